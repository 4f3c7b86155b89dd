//! `ferry`: run the demo, inspect the name service and the live counters of
//! ferry processes, and run the benchmarks and the machine probe when the
//! separate `ferry-bench` program is installed.
//!
//! The command line is parsed by clap; each subcommand lives in its own
//! module with its arguments.

mod bench;
mod demo;
#[cfg(feature = "net")]
mod demo_net;
mod names;
mod run;
#[cfg(feature = "net")]
mod netview;
#[cfg(not(feature = "net"))]
#[path = "netview_off.rs"]
mod netview;
mod stat;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The `ferry` command line.
#[derive(Debug, Parser)]
#[command(
    name = "ferry",
    version,
    about = "Message-passing IPC for Linux: demo, inspect, benchmark.",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Processes exchanging ports and a large region through an embedded
    /// name service, narrated.
    Demo(demo::Args),
    /// What is registered with the name service.
    Names(names::Args),
    /// Live counters of running ferry processes, read from outside.
    Stat(stat::Args),
    /// Benchmarks against baselines in the same run (needs `ferry-bench`).
    #[command(disable_help_flag = true)]
    Bench(bench::Forward),
    /// Runs a program with its files under a directory served by ferry.
    Run(run::Args),
    /// The emulation server `ferry run` starts (not for direct use).
    #[command(name = "__emul-serve", hide = true)]
    EmulServe(run::ServeArgs),
    /// This machine's IPC primitives and copy/remap crossover (needs `ferry-bench`).
    #[command(disable_help_flag = true)]
    Probe(bench::Forward),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Demo(a) => demo::main(&a),
        Command::Names(a) => names::main(&a),
        Command::Stat(a) => stat::main(&a),
        Command::Bench(a) => bench::main("bench", &a),
        Command::Probe(a) => bench::main("probe", &a),
        Command::Run(a) => run::main(&a),
        Command::EmulServe(a) => run::serve(&a),
    }
}
