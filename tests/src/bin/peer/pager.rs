//! Peer roles for the pager tests.

use crate::Outcome;

/// Runs `role` if this module knows it.
pub fn run(role: &str, _args: &[String]) -> Outcome {
    match role {
        _ => None,
    }
}
