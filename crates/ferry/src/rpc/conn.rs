//! One accepted connection as its server sees it, and the per-connection
//! steps of serving it: draining its socket and sending a reply.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::frame::{self, Incoming};
use super::policy;
use super::probe;
use super::slot::{self, Slot, SLOT_INLINE};
use super::{RpcError, RPC_SOCKET_REPLY};
use crate::error::io_err;
use crate::message::Message;
use crate::sys::futex;

/// Most datagrams read from one socket per look.
const BATCH: usize = 16;

/// A connection accepted by a server thread.
#[derive(Debug)]
pub(super) struct Conn {
    /// Unique among the server and its workers; also its `epoll` key.
    pub(super) id: u64,
    /// The server's end of the connection socket.
    pub(super) sock: OwnedFd,
    /// The socket's identity, to refuse its own receive right in frames.
    pub(super) identity: (u64, u64),
    /// The client's credentials, as the kernel gave them with its connect
    /// request: the sender of every request on this connection.
    pub(super) client: Option<crate::message::Credentials>,
    /// The mapped slot; `None` for a socket-only connection. Shared with
    /// the watcher while the server thread sleeps on this slot's request
    /// word alone (see `RpcServer::sleep_on_futexes`).
    pub(super) slot: Option<Arc<Slot>>,
    /// The last request sequence number taken from the slot.
    pub(super) last_req: u32,
    /// The last value of the slot's `req_sock` word seen.
    pub(super) last_sock: u32,
    /// The request being served: its sequence number and whether it came
    /// through the slot.
    pub(super) busy: Option<(u32, bool)>,
    /// A socket request that arrived while another was being served.
    pub(super) pending: Option<(u32, Message)>,
    /// Gone or broken: forgotten at the next reap.
    pub(super) dead: bool,
    /// Counts this connection in the process's open-connection gauge.
    pub(super) _open: crate::counters::ConnectionGauge,
    /// Counts this connection against its user's budget.
    pub(super) _held: super::server::HeldConn,
}

impl Conn {
    /// Whether this connection's client sleeps on its futex.
    pub(super) fn client_asleep(&self) -> bool {
        self.slot.as_ref().is_some_and(|s| s.word(slot::OFF_CLIENT_SLEEPING).load(Ordering::Relaxed) != 0)
    }
}

/// Reads what is queued on a connection's socket: doorbells are consumed,
/// a framed request becomes the pending one (a newer request replaces an
/// older one, which its client has given up on), end-of-file or a bad frame
/// marks the connection dead.
///
/// `after_doorbell_stop`: return after a doorbell instead of reading on
/// until the socket is empty. For a look that `epoll` prompted: a doorbell
/// almost always comes alone, the read that would find the socket empty is
/// a system call per wake-up saved, and anything left behind keeps the
/// (level-triggered) socket readable for the next look; a request that
/// came over the socket is announced in the slot's `req_sock` as well.
pub(super) fn drain(c: &mut Conn, buf: &mut [u8], after_doorbell_stop: bool) {
    for _ in 0..BATCH {
        match frame::recv_one(c.sock.as_fd(), buf, c.identity, frame::FOR_SERVER) {
            Ok(Incoming::Empty) => return,
            Ok(Incoming::Doorbell) if after_doorbell_stop => return,
            Ok(Incoming::Doorbell) => {}
            Ok(Incoming::Framed(seq, m)) => c.pending = Some((seq, m.with_sender(c.client))),
            Ok(Incoming::Closed) | Ok(Incoming::ReplyTooLarge(_)) | Err(_) => {
                c.dead = true;
                return;
            }
        }
    }
}

/// Sends one reply through the slot when it fits, else over the socket
/// (leaving a note in the slot for a slot request), and wakes the client if
/// it sleeps; says whether it did.
///
/// A reply no path can carry is replaced by a notice to the client (in the
/// slot, or over the socket), so its call fails with
/// [`RpcError::ReplyTooLarge`] and the connection stays usable; the result
/// is then `Err(TooLarge)` with `Conn::dead` still false.
/// `spare`: where a slot reply's body buffer is left for the server's next
/// request (when it is no larger than a slot body needs).
pub(super) fn send_reply(c: &mut Conn, seq: u32, via_slot: bool, mut msg: Message, spare: &mut Vec<u8>) -> Result<bool, RpcError> {
    let reply_right = msg.take_reply();
    let fits = reply_right.is_none() && msg.items().is_empty() && msg.body().len() <= SLOT_INLINE;
    if let Some(r) = reply_right {
        msg = msg.with_reply(r);
    }
    let slot = match (&c.slot, via_slot) {
        (Some(s), true) => s,
        _ => {
            return match frame::send_framed(c.sock.as_fd(), RPC_SOCKET_REPLY, seq, msg) {
                Err(RpcError::TooLarge(why)) => {
                    frame::send_too_large(c.sock.as_fd(), seq)?;
                    Err(RpcError::TooLarge(why))
                }
                other => other.map(|_| false),
            };
        }
    };
    let mut too_large = None;
    if fits {
        probe::server_stamp(slot, 1);
        slot.put_reply(seq, msg.op(), msg.body(), &[], slot::VIA_SLOT);
        keep_spare(msg.body_mut(), spare);
    } else {
        match frame::send_framed(c.sock.as_fd(), RPC_SOCKET_REPLY, seq, msg) {
            Ok(()) => slot.put_reply(seq, 0, &[], &[], slot::VIA_SOCKET),
            Err(RpcError::TooLarge(why)) => {
                slot.put_reply(seq, 0, &[], &[], slot::VIA_TOO_LARGE);
                too_large = Some(why);
            }
            Err(e) => return Err(e),
        }
    }
    let woke = wake_client(c, slot)?;
    match too_large {
        Some(why) => Err(RpcError::TooLarge(why)),
        None => Ok(woke),
    }
}

/// As [`send_reply`] for a reply of inline bytes given in two pieces,
/// `head` then `tail`: written into the slot from both without joining
/// them when it fits there (a slot request), else joined and sent as a
/// message. Both are left empty; the larger allocation of `tail` and
/// `spare` is left in `spare` for the next request.
pub(super) fn send_reply_parts(c: &mut Conn, seq: u32, via_slot: bool, op: u32, head: &mut Vec<u8>, tail: &mut Vec<u8>, spare: &mut Vec<u8>) -> Result<bool, RpcError> {
    let out = match &c.slot {
        Some(slot) if via_slot && head.len() + tail.len() <= SLOT_INLINE => {
            probe::server_stamp(slot, 1);
            slot.put_reply(seq, op, head, tail, slot::VIA_SLOT);
            keep_spare(tail, spare);
            wake_client(c, slot)
        }
        _ => send_reply(c, seq, via_slot, Message::new(op).with_body([&head[..], &tail[..]].concat()), spare),
    };
    head.clear();
    tail.clear();
    out
}

/// Leaves in `spare`, for the server's next request, the larger of its
/// allocation and `buf`'s (a reply body already in the slot), unless that
/// is larger than a slot body needs.
fn keep_spare(buf: &mut Vec<u8>, spare: &mut Vec<u8>) {
    if buf.capacity() > spare.capacity() && buf.capacity() <= 2 * SLOT_INLINE {
        std::mem::swap(buf, spare);
    }
}

/// Wakes the client of `c` after a reply was published in its slot, if it
/// sleeps; says whether it did.
fn wake_client(c: &Conn, slot: &Slot) -> Result<bool, RpcError> {
    Ok(match slot.word(slot::OFF_CLIENT_SLEEPING).load(Ordering::SeqCst) {
        0 => false,
        // An event-driven client waits on its socket. `ring` never blocks:
        // a full socket already holds a doorbell.
        slot::CLIENT_WANTS_DOORBELL => frame::ring(c.sock.as_fd()).map(|_| true)?,
        _ => {
            policy::count_wake();
            futex::wake(slot.word(slot::OFF_REP_SEQ)).map_err(|e| RpcError::Io(io_err(e)))?;
            true
        }
    })
}
