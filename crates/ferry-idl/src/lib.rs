//! Typed interfaces for ferry, for applications: everything of
//! [`ferry::idl`] (the [`interface!`], [`record!`] and [`enumeration!`]
//! macros, the codec, channels and server loops) under its own name, plus
//! the C stub generator ([`c`], run by the `ferry-idl-c` program).
//!
//! The runtime lives in `ferry` itself so that ferry's own services (the
//! name service) are defined with it; this crate adds what only
//! applications need. The design and the rules of evolution are in
//! `docs/interfaces.md`.
//!
//! ```
//! ferry_idl::interface! {
//!     /// Counts things.
//!     pub mod counter: "example.counter", version 1, compatible 1 {
//!         /// Adds `n`; returns the new total.
//!         fn add(n: u64) -> u64 = 1;
//!     }
//! }
//! struct Total(u64);
//! impl counter::Service for Total {
//!     fn add(&mut self, _: &ferry_idl::Context, n: u64) -> u64 { self.0 += n; self.0 }
//! }
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (mut rx, tx) = ferry::port()?;
//! let server = std::thread::spawn(move || ferry_idl::serve_port(&mut counter::Server(Total(0)), &mut rx));
//! let mut client = counter::Client::over_port(tx)?;
//! assert_eq!(client.add(2)?, 2);
//! assert_eq!(client.add(3)?, 5);
//! drop(client);
//! server.join().unwrap()?;
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod c;

pub use ferry::idl::*;
pub use ferry::{enumeration, interface, record};
