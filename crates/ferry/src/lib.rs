//! ferry: message-passing IPC for Linux in the lineage of Accent, Mach, DASH
//! and L4.
//!
//! Processes talk through **ports**, kernel-protected message queues named by
//! unforgeable **rights**: one [`ReceiveRight`], any number of
//! [`SendRight`]s, and [`SendOnceRight`]s for a single reply. Rights travel
//! inside [`Message`]s, which carry an operation id, inline bytes and typed
//! [`Item`]s. [`PortSet`] receives from many ports at once; [`Bootstrap`]
//! reaches the name service of `ferryd` (started on demand) or a private
//! one. Large data
//! travels out of line, by value and without copying, in a [`Region`]
//! (see [`region`]); [`counters`] tells what ferry did.
//!
//! The shortest useful program, a request and its reply through a
//! send-once right:
//!
//! ```
//! use ferry::{Message, Timeout};
//!
//! let (mut server, to_server) = ferry::port()?;
//! let (mut client, _) = ferry::port()?;
//! let reply_right = client.make_send_once()?;
//! to_server.send(Message::new(1).with_body(*b"2+2").with_reply(reply_right), Timeout::Infinite)?;
//!
//! let mut req = server.recv(Timeout::Infinite)?;
//! assert_eq!(req.sender().unwrap().pid as u32, std::process::id());
//! req.take_reply().unwrap().send(Message::new(2).with_body(*b"4"), Timeout::Infinite)?;
//!
//! assert_eq!(client.recv(Timeout::Infinite)?.body(), b"4");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Everything that talks to the kernel lives in the private `sys` module;
//! the rest of the crate is safe Rust.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod bootstrap;
pub mod counters;
pub mod emulation;
pub mod error;
pub mod fileserver;
pub mod idl;
mod intake;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod message;
pub mod nameserver;
pub mod pager;
pub mod port;
pub mod portset;
pub mod process;
pub mod region;
pub mod rpc;
pub mod spawn;
#[allow(unsafe_code)]
mod sys;
pub mod timeout;
mod trace;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod wire;

pub use bootstrap::{Bootstrap, Limit, NameEntry, NameError};
pub use error::{RecvError, SendError, SendFailed, WireError};
pub use message::{Credentials, Item, Message, Reply};
pub use nameserver::{Limits, Mint, NameServer};
pub use port::{answering_as, port, port_with, reply_pair, sending_as, PortOptions, ReceiveRight, ReplyReceiver, SendOnceRight, SendRight};
pub use portset::{Event, MemberId, PortSet};
pub use region::{LendPool, MapOptions, MappedRegion, Region, RegionError, RegionItem, RegionPool, SharedMapping};
pub use timeout::Timeout;
