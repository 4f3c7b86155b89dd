//! Registering ferry's descriptors with tokio's reactor (the `tokio`
//! feature).
//!
//! # Safety
//! tokio's `AsyncFd::register_with_interest` is `unsafe`: the descriptor
//! must stay open and name the same open file description until the
//! registration ends, and `as_raw_fd` must return that same number each
//! time. [`Stable`] is implemented only for types whose descriptor is fixed
//! for the value's whole life and closed only when the value is dropped:
//! a receive right's readiness `epoll` (made once, never replaced), a send
//! right's socket, a reply receiver's socket, a port set's and an RPC
//! server's `epoll`, an `OwnedFd`.
//! The value is moved into the `AsyncFd`, which drops the registration
//! before the value; and the async wrappers built on [`register`] never
//! hand out a `&mut` to the registered value, so it cannot be swapped for
//! another one while registered.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::port::{ReceiveRight, ReplyReceiver, SendRight};
use crate::portset::PortSet;
use crate::rpc::RpcServer;

/// A type whose [`AsFd`] descriptor is the same open descriptor for the
/// value's whole life.
pub trait Stable: AsFd {}

impl Stable for ReceiveRight {}
impl Stable for SendRight {}
impl Stable for ReplyReceiver {}
impl Stable for PortSet {}
impl Stable for RpcServer {}
impl Stable for OwnedFd {}

/// A registered value: tokio sees its descriptor through `AsRawFd`.
#[derive(Debug)]
pub struct Watched<T>(pub T);

impl<T: AsFd> AsRawFd for Watched<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Registers `inner` with the current tokio runtime's reactor.
///
/// # Errors
/// Outside a runtime with I/O enabled, or when `epoll` refuses.
pub fn register<T: Stable>(inner: T, interest: Interest) -> io::Result<AsyncFd<Watched<T>>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other("not inside a tokio runtime"));
    }
    // SAFETY: `T: Stable` (see the module's safety section): the descriptor
    // stays open and the same for as long as the value lives, the `AsyncFd`
    // owns the value, and callers never swap it out while registered.
    let fd = unsafe { AsyncFd::register_with_interest(Watched(inner), interest) };
    fd.map_err(io::Error::from)
}
