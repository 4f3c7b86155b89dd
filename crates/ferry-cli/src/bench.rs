//! `ferry bench`.

use std::process::ExitCode;

/// Runs `ferry bench` with its arguments.
pub fn main(_args: &[String]) -> ExitCode {
    eprintln!("ferry bench: not built yet");
    ExitCode::from(1)
}
