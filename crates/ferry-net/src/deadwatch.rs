//! Waiting, without a thread, for a port's receive right to go away.
//!
//! The network server must tell a peer when a port it exported dies (the
//! dead-name notification). A send right's socket reports hang-up when the
//! receive right is gone; this module registers the socket with tokio's
//! reactor and waits for that.
//!
//! # Safety
//! The one `unsafe` call registers a descriptor with the reactor, which is
//! sound as long as the descriptor stays open and the same while it is
//! registered. The [`AsyncFd`] here owns the [`SendRight`] (an `OwnedFd`
//! inside) for its whole life and never hands it out, so both hold.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use ferry::SendRight;
use tokio::io::unix::AsyncFd;

/// A send right owned by the reactor registration.
struct Owned(SendRight);

impl AsRawFd for Owned {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Waits until the port behind `right` is dead. Cancel by dropping the
/// future (or aborting its task), which also drops `right`.
///
/// # Errors
/// If the reactor refuses the descriptor (outside a runtime).
pub(crate) async fn wait_dead(right: SendRight) -> io::Result<()> {
    // SAFETY: see the module's safety section: `Owned` owns the descriptor
    // and keeps it open and unchanged for as long as `fd` lives.
    let fd = unsafe { AsyncFd::register_with_interest(Owned(right), tokio::io::Interest::READABLE) }.map_err(io::Error::from)?;
    loop {
        let mut g = fd.readable().await?;
        if g.get_inner().0.is_dead() {
            return Ok(());
        }
        g.clear_ready();
    }
}
