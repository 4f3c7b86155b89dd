//! The C ABI of ferry: `libferry.so`, `libferry.a` and the header
//! `include/ferry.h`, which `cbindgen` generates from this crate.
//!
//! A thin, boring layer over the `ferry` crate. Every object a C program
//! holds is an **opaque handle** (`ferry_send_right*`, `ferry_message*`,
//! `ferry_region*`, …) that it owns and frees with the matching
//! `ferry_*_free`. Every call returns a [`ferry_status`]; results come back
//! through out-parameters, and the text of the last failure on the calling
//! thread through [`ferry_last_error_message`]. No Rust panic crosses the
//! boundary: every entry point runs inside `catch_unwind` and reports a
//! panic as `FERRY_ERR_PANIC`.
//!
//! Ownership, in four rules the header repeats per function:
//! - A function that takes a handle as `*mut` and says it **consumes** it
//!   frees it whatever the outcome; the caller must not use it again.
//! - Sending takes a message's **contents**, never the message handle: the
//!   caller frees the handle afterwards (or fills and sends it again).
//! - A `const` handle is only read; it may be shared between threads when
//!   the function says so.
//! - A pointer into memory a handle owns (a body, a region's bytes) is valid
//!   until that handle is freed, consumed or changed by another call.
//!
//! Memory another process may change is never handed out as `const
//! uint8_t*`: only regions received by value (sealed, copy-on-write) give a
//! direct view; lent and shared regions are read by copying.
//!
//! The modules follow the objects: [`status`] (errors and the entry-point
//! guard), [`port`] (ports and rights), [`message`], [`region`], [`rpc`],
//! [`portset`], [`names`] and [`wire`] (the wire-format parser, for
//! checking other implementations against the test vectors).

#![deny(missing_docs)]
// The C names (`ferry_send_right`, `FERRY_OK`) are the ABI.
#![allow(non_camel_case_types)]

mod handle;
pub mod message;
pub mod names;
pub mod port;
pub mod portset;
pub mod region;
pub mod rpc;
pub mod status;
pub mod wire;

pub use status::{ferry_last_error_message, ferry_status, ferry_status_name};

/// Timeout value meaning "wait as long as it takes" (any negative value
/// does). `0` means "do not wait"; a positive value is milliseconds.
pub const FERRY_TIMEOUT_INFINITE: i64 = -1;

/// Converts a C timeout in milliseconds: negative waits forever, zero does
/// not wait.
pub(crate) fn timeout(ms: i64) -> ferry::Timeout {
    match ms {
        ..0 => ferry::Timeout::Infinite,
        0 => ferry::Timeout::Zero,
        ms => ferry::Timeout::millis(ms as u64),
    }
}
