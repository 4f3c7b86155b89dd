//! `port` / `null-roundtrip`: a message with no payload there and back
//! through ferry ports, against the raw kernel objects underneath
//! (`uds-seqpacket`, which ferry's ports are), pipes, and the futex floor;
//! `ferry-c-port` is the same round trip through ferry's C API.
//! `uds-seqpacket-cred` is the socket pair with what a port keeps in the
//! kernel path of every message (the sender's credentials, `recvmsg` with a
//! control buffer): the floor with that guarantee. `uds-seqpacket-recvmsg`
//! is the same program without the credentials: the two in one run show
//! what the credentials alone cost.
//! The target: ferry's round trip within 1.2× of `uds-seqpacket`.

use crate::harness::{Case, Impl, Suite};
use crate::record::Touch;
use crate::suites::pingpong;

/// The suite.
pub fn suite() -> Suite {
    Suite {
        name: "port",
        about: "null message round trip through ports vs raw sockets, pipes and the futex floor",
        reference: "uds-seqpacket",
        cases,
        impls,
    }
}

/// `null-roundtrip`, no payload.
pub fn cases() -> Vec<Case> {
    vec![Case { suite: "port", name: "null-roundtrip", bytes: 0, touch: Touch::None }]
}

/// ferry's port and the baselines.
pub fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "ferry-port", run: pingpong::ferry_port },
        Impl { name: "ferry-c-port", run: crate::suites::rpc_c::ferry_c_port },
        Impl { name: "uds-seqpacket", run: pingpong::uds_seqpacket },
        Impl { name: "uds-seqpacket-recvmsg", run: pingpong::uds_seqpacket_recvmsg },
        Impl { name: "uds-seqpacket-cred", run: pingpong::uds_seqpacket_cred },
        Impl { name: "pipe", run: pingpong::pipe },
        Impl { name: "futex-floor", run: pingpong::futex_floor },
        Impl { name: "ipc-channel", run: crate::suites::peer_ipc_channel::roundtrip },
    ]
}
