//! `rpc` / `roundtrip`: a request and a reply of `bytes` each (8, 64 and
//! 1024), between two processes.
//!
//! Baselines: the blocking floor (`futex-floor`), the polling floor
//! (`spin-floor`), `pipe`, `uds-seqpacket` and `eventfd` (payload in shared
//! memory, eventfds for wake-ups). ferry: `ferry-port` (two ports), and its
//! RPC fast path `ferry-call-block`, `ferry-call-poll`, `ferry-call-adaptive`
//! and, through the tokio API, `ferry-async-call` (in `rpc_ferry`). Peers:
//! `iceoryx2-poll`, `iceoryx2-event` (in `rpc_iceoryx2`). An implementation is a function
//! `fn(run: &mut Run) -> Result<(), Skip>` (set up, fork the server with
//! `run.spawn`, loop `while run.more() { …; run.record(t) }`) and one line
//! in [`impls`].

use crate::harness::{Case, Impl, Suite};
use crate::record::Touch;
use crate::suites::{pingpong, rpc_ferry, rpc_iceoryx2};

/// Payload sizes of the `roundtrip` case.
pub const SIZES: [u64; 3] = [8, 64, 1024];

/// The suite.
pub fn suite() -> Suite {
    Suite {
        name: "rpc",
        about: "request/reply round trip of 8, 64, 1024 bytes vs the futex and spin floors",
        reference: "uds-seqpacket",
        cases,
        impls,
    }
}

/// `roundtrip` at each size.
pub fn cases() -> Vec<Case> {
    SIZES.iter().map(|&bytes| Case { suite: "rpc", name: "roundtrip", bytes, touch: Touch::None }).collect()
}

/// The implementations, baselines first.
pub fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "futex-floor", run: pingpong::futex_floor },
        Impl { name: "spin-floor", run: pingpong::spin_floor },
        Impl { name: "pipe", run: pingpong::pipe },
        Impl { name: "uds-seqpacket", run: pingpong::uds_seqpacket },
        Impl { name: "eventfd", run: pingpong::eventfd_pingpong },
        Impl { name: "ferry-port", run: pingpong::ferry_port },
        Impl { name: "ferry-call-block", run: rpc_ferry::ferry_call_block },
        Impl { name: "ferry-call-poll", run: rpc_ferry::ferry_call_poll },
        Impl { name: "ferry-call-adaptive", run: rpc_ferry::ferry_call_adaptive },
        Impl { name: "ferry-async-call", run: rpc_ferry::ferry_async_call },
        Impl { name: "iceoryx2-poll", run: rpc_iceoryx2::iceoryx2_poll },
        Impl { name: "iceoryx2-event", run: rpc_iceoryx2::iceoryx2_event },
        Impl { name: "ipc-channel", run: crate::suites::peer_ipc_channel::roundtrip },
    ]
}
