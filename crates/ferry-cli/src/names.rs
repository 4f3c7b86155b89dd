//! `ferry names`.

use std::process::ExitCode;

/// Runs `ferry names` with its arguments.
pub fn main(_args: &[String]) -> ExitCode {
    eprintln!("ferry names: not built yet");
    ExitCode::from(1)
}
