//! `ferry demo`.

use std::process::ExitCode;

/// Runs `ferry demo` with its arguments.
pub fn main(_args: &[String]) -> ExitCode {
    eprintln!("ferry demo: not built yet");
    ExitCode::from(1)
}
