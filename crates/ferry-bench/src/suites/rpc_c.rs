//! `ferry-c-port`, `ferry-c-call-block`, `ferry-c-call-poll`: the
//! `port` / `null-roundtrip` and `rpc` / `roundtrip` cases through ferry's
//! C API, beside the Rust API's `ferry-port`, `ferry-call-block` and
//! `ferry-call-poll` in the same results file (the languages issue's
//! target: within 1.1× of the Rust API).
//!
//! Same shape as the Rust impls: the timing process is the client, the
//! forked peer the server, each running C code (`c/capi.c`, through
//! [`crate::capi`]) that calls libferry's exported functions as a C program
//! does: `ferry_message_reset`, `ferry_send_right_send`,
//! `ferry_receive_right_recv_into`, `ferry_connection_call_in_place`,
//! `ferry_rpc_server_reply_and_wait_in_place`. One sample is one C call
//! that makes a whole round trip, so the only Rust in the timed path is the
//! loop around it.

use std::time::Instant;

use crate::capi::{self, CError, Policy};
use crate::harness::{Run, Skip};
use crate::record::Placement;

/// Calls made before timing starts (connection warm, caches hot).
const WARM_UP: u32 = 100;

fn failed(what: &str, e: CError) -> Skip {
    Skip::new(format!("failed: {what}: {e}"))
}

/// `ferry-c-port`: a request of `bytes` through one port, the reply of
/// `bytes` through another, both ends in C; compare with `ferry-port`.
pub fn ferry_c_port(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.bytes();
    let (mut peer_rx, to_peer) = capi::port().map_err(|e| failed("ferry_port_new", e))?;
    let (mut my_rx, to_me) = capi::port().map_err(|e| failed("ferry_port_new", e))?;
    let peer = run.spawn(&[], move || Ok(capi::port_serve(&mut peer_rx, &to_me, n)?))?;
    let mut client = capi::PortRoundTrip::open(&to_peer, &mut my_rx, n).map_err(|e| failed("opening the client", e))?;
    for _ in 0..WARM_UP {
        client.roundtrip().map_err(|e| failed("a warm-up round trip", e))?;
    }
    while run.more() {
        let t = Instant::now();
        let r = client.roundtrip();
        run.record(t.elapsed());
        r.map_err(|e| failed("a round trip", e))?;
    }
    run.note("api", "c");
    client.close().map_err(|e| failed("stopping the server", e))?;
    peer.wait()?;
    Ok(())
}

fn c_call(run: &mut Run<'_>, policy: Policy) -> Result<(), Skip> {
    let n = run.bytes();
    let (port, to_server) = capi::port().map_err(|e| failed("ferry_port_new", e))?;
    let peer = run.spawn(&[], move || Ok(capi::rpc_serve(port, policy, n)?))?;
    let mut client = capi::RpcCall::open(&to_server, policy, n).map_err(|e| failed("connecting", e))?;
    for _ in 0..WARM_UP {
        client.call().map_err(|e| failed("a warm-up call", e))?;
    }
    while run.more() {
        let t = Instant::now();
        let r = client.call();
        run.record(t.elapsed());
        r.map_err(|e| failed("a call", e))?;
    }
    run.note("api", "c");
    client.close().map_err(|e| failed("stopping the server", e))?;
    peer.wait()?;
    Ok(())
}

/// `ferry-c-call-block`: RPC calls through the C API, both sides sleeping
/// (`FERRY_POLICY_BLOCK`); compare with `ferry-call-block`.
pub fn ferry_c_call_block(run: &mut Run<'_>) -> Result<(), Skip> {
    c_call(run, Policy::Block)
}

/// `ferry-c-call-poll`: RPC calls through the C API, both sides spinning
/// (`FERRY_POLICY_POLL`); compare with `ferry-call-poll`. Skipped on one
/// CPU for the same reason as `ferry-call-poll`.
pub fn ferry_c_call_poll(run: &mut Run<'_>) -> Result<(), Skip> {
    if run.placement == Placement::SameCore {
        return Err(Skip::new(
            "Policy::Poll never yields: on one CPU the spinning client keeps the server from running until the scheduler preempts it (a time slice per call); polling needs two CPUs",
        ));
    }
    c_call(run, Policy::Poll)
}
