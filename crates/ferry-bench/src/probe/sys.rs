//! The probe's only contact with raw memory, signals and processes, one
//! concept per file: owned mappings ([`map`]), the `SIGSEGV` handler that
//! times a trap ([`trap`]), the forked ping-pong peer ([`peer`]), and the
//! userfaultfd ioctls rustix does not wrap ([`uffd`]).
//!
//! # Safety
//! Each file states the invariants its `unsafe` blocks rely on; in short:
//! mappings are owned and unmapped once, the signal handler only handles
//! faults in its own page and only does async-signal-safe work, the forked
//! peer neither allocates nor locks, and ioctls get correctly sized
//! `#[repr(C)]` arguments.

pub mod map;
pub mod peer;
pub mod trap;
pub mod uffd;

pub use map::{minor_faults, Map};
pub use peer::{signal, wait_for, Peer, WaitMode, STOP, TURN};
pub use trap::TrapPage;
pub use uffd::Uffd;
