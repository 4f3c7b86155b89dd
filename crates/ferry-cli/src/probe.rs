//! `ferry probe`.

use std::process::ExitCode;

/// Runs `ferry probe` with its arguments.
pub fn main(_args: &[String]) -> ExitCode {
    eprintln!("ferry probe: not built yet");
    ExitCode::from(1)
}
