//! The registered suites. Each suite module lists its cases and its
//! implementations; `all()` is what `ferry bench all` runs.

pub mod files;
pub mod net;
pub mod pager;
pub mod peer_ipc_channel;
pub mod pingpong;
pub mod python;
pub mod port;
pub mod rpc;
pub mod rpc_c;
pub mod rpc_ferry;
pub mod rpc_iceoryx2;
pub mod rpc_stub;
pub mod transfer;

use crate::harness::Suite;

/// Every registered suite, in the order `ferry bench all` runs them.
pub fn all() -> Vec<Suite> {
    vec![port::suite(), rpc::suite(), transfer::suite(), pager::suite(), net::suite(), files::suite()]
}

/// The suite called `name`.
pub fn find(name: &str) -> Option<Suite> {
    all().into_iter().find(|s| s.name == name)
}
