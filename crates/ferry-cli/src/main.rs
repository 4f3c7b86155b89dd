//! `ferry`: run the demo, inspect the name service, benchmark and probe.

mod bench;
mod demo;
mod names;
mod probe;
mod stat;

use std::process::ExitCode;

const USAGE: &str = "usage: ferry COMMAND [ARGS...]

commands:
  demo            processes exchanging ports and a large region through ferryd
  names           what is registered with the name service
  bench SUITE     run benchmarks (see `ferry bench --help`)
  bench report F  a Markdown report of a results file beside the papers' figures
  probe           measure this machine's IPC primitives
  stat [PID|NAME] live counters of running ferry processes
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    match cmd.as_str() {
        "demo" => demo::main(rest),
        "names" => names::main(rest),
        "bench" => bench::main(rest),
        "probe" => probe::main(rest),
        "stat" => stat::main(rest),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("ferry: unknown command {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
