//! The only layer of ferry that talks to the kernel.
//!
//! Each file wraps one family of system calls in owned, typed handles:
//! descriptors become `OwnedFd` in exactly one place, and nothing here
//! interprets ferry's message format. Most calls go through `rustix`; the few
//! it does not cover use `libc` in small `unsafe` blocks that say why they hold.

pub mod fs;
pub mod futex;
pub mod kept;
pub mod lock;
pub mod mem;
pub mod process;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub mod seccomp;
#[cfg(feature = "tokio")]
pub mod reactor;
pub mod socket;
pub mod spawn;
pub mod uffd;
pub mod wait;
