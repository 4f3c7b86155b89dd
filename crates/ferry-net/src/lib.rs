//! Ports across machines: ferry's network server.
//!
//! Two parts, in the shape of `quinn-proto` and `rustls`:
//! - [`frame`] and [`link`]: the link protocol as a pure state machine —
//!   frames in, frames and [`link::Event`]s out, export and import tables
//!   with reference counts — with no sockets, no timers and no threads, so
//!   it is tested and fuzzed without a network;
//! - [`node`]: the thin driver that runs links over QUIC with TLS 1.3 and
//!   mutual authentication, one QUIC stream per destination port, and turns
//!   imported ports into local proxy ports.
//!
//! See `docs/network.md` for the protocol, the trust model and the costs.

#![deny(missing_docs)]
#![deny(unsafe_code)]

mod budget;
pub mod cor;
mod deadwatch;
mod flow;
mod inflight;
pub mod frame;
pub mod gate;
pub mod link;
pub mod node;
pub mod redial;
pub mod status;
pub mod tls;
mod turns;

pub use cor::RemoteRegion;
pub use redial::Redial;
pub use node::{LinkInfo, NetError, NetStats, Node, NodeConfig, Refusal, UserUsage, REFUSED};
pub use tls::{Identity, Peer};
