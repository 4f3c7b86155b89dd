//! Peer role for the typed-interface tests (`tests/tests/idl.rs`): the
//! example key-value store of `ferry_tests::kv`, served over a port and
//! over an RPC server in this process.
//!
//! The role takes its parent's send right with `ferry::spawn::inherited`,
//! sends back one message carrying the store's port right and its RPC
//! server's right, serves both until every client is gone, then prints
//! what reached the implementation.

use ferry::rpc::RpcServer;
use ferry::{Message, Timeout};
use ferry_tests::kv::{kv, SharedStore};

use crate::Outcome;

/// Runs `role` if this module knows it.
pub fn run(role: &str, _args: &[String]) -> Outcome {
    Some(match role {
        "idl-kv-server" => kv_server(),
        _ => return None,
    })
}

type R = Result<(), Box<dyn std::error::Error>>;

fn kv_server() -> R {
    let parent = ferry::spawn::inherited()?;
    let store = SharedStore::default();
    let (mut port_rx, port_tx) = ferry::port()?;
    let (rpc_rx, rpc_tx) = ferry::port()?;
    let mut rpc = RpcServer::new(rpc_rx)?;
    parent.send(Message::new(1).with_item(port_tx).with_item(rpc_tx), Timeout::Infinite)?;
    drop(parent);

    let mut by_port = kv::Server(store.clone());
    let port = std::thread::spawn(move || ferry_idl::serve_port(&mut by_port, &mut port_rx));
    let mut by_rpc = kv::Server(store.clone());
    ferry_idl::serve_rpc(&mut by_rpc, &mut rpc, Timeout::Infinite)?;
    port.join().map_err(|_| "the port server panicked")??;

    let s = store.0.lock().map_err(|_| "the store's lock is poisoned")?;
    let mut callers = s.callers.clone();
    callers.sort_unstable();
    callers.dedup();
    println!("served {} requests", s.requests);
    println!("callers {callers:?}");
    Ok(())
}
