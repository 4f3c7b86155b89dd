//! How long a blocking operation may wait (L4's zero, finite and infinite
//! timeouts).

use std::time::{Duration, Instant};

/// How long an operation may block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Timeout {
    /// Do not block at all: succeed now or fail with a timeout / full / empty
    /// error.
    Zero,
    /// Block for at most this long.
    After(Duration),
    /// Block until the operation completes or the peer dies.
    #[default]
    Infinite,
}

impl Timeout {
    /// A timeout of `ms` milliseconds.
    pub fn millis(ms: u64) -> Timeout {
        Timeout::After(Duration::from_millis(ms))
    }

    /// The absolute deadline for an operation starting now; `None` means no
    /// deadline (wait forever), as for a duration too long for the clock.
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Timeout::Zero => Some(Instant::now()),
            Timeout::After(d) => Instant::now().checked_add(d),
            Timeout::Infinite => None,
        }
    }
}

impl From<Duration> for Timeout {
    fn from(d: Duration) -> Timeout {
        if d.is_zero() { Timeout::Zero } else { Timeout::After(d) }
    }
}
