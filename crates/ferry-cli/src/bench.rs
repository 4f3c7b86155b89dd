//! `ferry bench`: a thin front for the `ferry-bench` crate, where the suites,
//! the harness and the output format live.

use std::process::ExitCode;

/// Runs `ferry bench` with its arguments.
pub fn main(args: &[String]) -> ExitCode {
    ferry_bench::cli::main(args)
}
