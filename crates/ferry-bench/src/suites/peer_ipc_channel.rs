//! The `ipc-channel` peer: Servo's typed inter-process channels (on Linux,
//! `SOCK_SEQPACKET` sockets carrying bincode-serialised values, with
//! `IpcSharedMemory` for bulk data in a memfd), measured the way its users
//! use it, beside ferry in the same invocation.
//!
//! - `port` / `null-roundtrip` and `rpc` / `roundtrip`: a typed
//!   `IpcSender<Msg>` each way; the request and the reply carry `bytes` of
//!   payload as a `Vec<u8>` (serialised by bincode, as a user's struct
//!   would be).
//! - `transfer` / `oneshot`: the payload, held in ordinary memory before
//!   timing starts, is put into an `IpcSharedMemory` (a memfd the sender
//!   fills: ipc-channel's way of sending bulk data) and sent; the receiver
//!   maps it, does its touch and acknowledges. ipc-channel hands the
//!   receiver read-only memory, so a `write` touch reads instead and the
//!   record says so in `extra.touch_write_reads`. `forward` and `stream`
//!   are recorded as skipped.
//!
//! The channels are created before the fork. Creating them starts no
//! threads (ipc-channel's router thread, which would, is never used), so
//! the harness's fork stays single-threaded. Each side holds the other's
//! ends too after the fork, so end-of-file cannot signal the end: an
//! explicit `None` does.

use std::io;
use std::time::Instant;

use ipc_channel::ipc::{self, IpcSharedMemory};

use crate::harness::{Run, Skip};
use crate::record::Touch;

/// The name of this peer in records.
pub const NAME: &str = "ipc-channel";

fn ipc_err(what: &str) -> impl Fn(ipc::IpcError) -> io::Error + '_ {
    move |e| io::Error::other(format!("ipc-channel {what}: {e:?}"))
}

fn send_err(what: &str) -> impl Fn(ipc_channel::Error) -> io::Error + '_ {
    move |e| io::Error::other(format!("ipc-channel {what}: {e}"))
}

fn no_channel(e: io::Error) -> Skip {
    Skip::new(format!("ipc-channel cannot create a channel: {e}"))
}

/// `ipc-channel` in the `port` and `rpc` suites: a request and a reply of
/// `bytes` each (none for `null-roundtrip`), as `Some(Vec<u8>)`; `None`
/// ends the run.
pub fn roundtrip(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.bytes();
    let (to_peer, peer_rx) = ipc::channel::<Option<Vec<u8>>>().map_err(no_channel)?;
    let (to_me, my_rx) = ipc::channel::<Vec<u8>>().map_err(no_channel)?;
    let peer = run.spawn(&[], move || {
        let reply = vec![2u8; n];
        while peer_rx.recv().map_err(ipc_err("receive"))?.is_some() {
            to_me.send(reply.clone()).map_err(send_err("send"))?;
        }
        Ok(())
    })?;
    let req = vec![1u8; n];
    while run.more() {
        let t = Instant::now();
        to_peer.send(Some(req.clone())).map_err(send_err("send"))?;
        let got = my_rx.recv().map_err(ipc_err("receive"))?;
        run.record(t.elapsed());
        if got.len() != n {
            return Err(Skip::new(format!("failed: reply of {} bytes, expected {n}", got.len())));
        }
    }
    to_peer.send(None).map_err(send_err("send"))?;
    peer.wait()?;
    Ok(())
}

/// `ipc-channel` in the `transfer` suite: `oneshot` through
/// `IpcSharedMemory`; the other cases are recorded as skipped.
pub fn transfer(run: &mut Run<'_>) -> Result<(), Skip> {
    if run.case.name != "oneshot" {
        return Err(Skip::new(format!("ipc-channel is measured for oneshot only, not {}", run.case.name)));
    }
    let n = run.bytes();
    let touch = run.case.touch;
    if touch == Touch::Write {
        run.note("touch_write_reads", true);
    }
    let (to_peer, peer_rx) = ipc::channel::<Option<IpcSharedMemory>>().map_err(no_channel)?;
    let (to_me, my_rx) = ipc::channel::<()>().map_err(no_channel)?;
    let peer = run.spawn(&[], move || {
        while let Some(shm) = peer_rx.recv().map_err(ipc_err("receive"))? {
            if shm.len() != n {
                return Err(io::Error::other(format!("shared memory of {} bytes, expected {n}", shm.len())));
            }
            std::hint::black_box(touch.apply_read(&shm));
            drop(shm);
            to_me.send(()).map_err(send_err("send"))?;
        }
        Ok(())
    })?;
    let data = vec![0x5au8; n];
    while run.more() {
        let t = Instant::now();
        let shm = IpcSharedMemory::from_bytes(&data);
        to_peer.send(Some(shm)).map_err(send_err("send"))?;
        my_rx.recv().map_err(ipc_err("receive"))?;
        run.record(t.elapsed());
    }
    to_peer.send(None).map_err(send_err("send"))?;
    peer.wait()?;
    Ok(())
}
