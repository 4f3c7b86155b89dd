//! What travels over a connection's socket: the set-up handshake, the
//! one-byte doorbell, and requests and replies that do not fit the slot.
//!
//! - Handshake (client → server, first datagram): `"FRPC"`, version 1,
//!   flags (bit 0: a slot memfd is attached), slot size; 16 bytes, with the
//!   slot memfd as its only descriptor when flag bit 0 is set.
//! - Acknowledgement (server → client): `"FRPC"`, version 1, status 0;
//!   12 bytes. A server that refuses a connection over a budget sends the
//!   same frame with a non-zero status ([`REFUSED_USER_BUDGET`],
//!   [`REFUSED_SERVER_FULL`]) and closes it; on other faults it closes the
//!   connection without a word.
//! - Doorbell (client → server): the single byte `0xDB`, no descriptors.
//! - Socket request / reply: an ordinary ferry message with operation
//!   [`RPC_SOCKET_REQUEST`] / [`RPC_SOCKET_REPLY`] whose body starts with the
//!   call's sequence number and the caller's operation id (two little-endian
//!   `u32`), followed by the caller's body; items and reply right are the
//!   caller's own.
//!   A body too long to follow those 8 bytes in a message (more than
//!   [`MAX_INLINE`] less 8, up to [`MAX_INLINE`], as a port message
//!   carries) travels as [`RPC_SOCKET_REQUEST_LONG`] /
//!   [`RPC_SOCKET_REPLY_LONG`]: the message's body is the 8 bytes alone,
//!   and the caller's body is a region sent by copy after the caller's
//!   items, of a length only such a body has.
//! - Reply too large (server → client): an ordinary ferry message with
//!   operation [`RPC_SOCKET_REPLY_TOO_LARGE`] whose body is the call's
//!   sequence number and a zero word, no items.

use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;

use super::{RpcError, RPC_SOCKET_REPLY, RPC_SOCKET_REPLY_LONG, RPC_SOCKET_REPLY_TOO_LARGE, RPC_SOCKET_REQUEST, RPC_SOCKET_REQUEST_LONG};
use crate::error::io_err;
use crate::message::{Item, Message, MAX_INLINE};
use crate::region::RegionItem;
use crate::port::send_prefixed;
use crate::sys::socket;
use crate::timeout::Timeout;

const MAGIC: [u8; 4] = *b"FRPC";
const VERSION: u32 = 1;
const FLAG_SLOT: u32 = 1;
const DOORBELL: u8 = 0xDB;
const PREFIX: usize = 8;

/// The client's opening datagram, as the server decoded it.
pub(crate) struct Hello {
    pub slot: Option<OwnedFd>,
}

/// Sends the handshake, with the slot memfd if there is one.
pub(crate) fn send_hello(sock: BorrowedFd<'_>, slot: Option<BorrowedFd<'_>>) -> rustix::io::Result<()> {
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&(if slot.is_some() { FLAG_SLOT } else { 0 }).to_le_bytes());
    b.extend_from_slice(&(super::SLOT_SIZE as u32).to_le_bytes());
    let fds: Vec<BorrowedFd<'_>> = slot.into_iter().collect();
    super::policy::count_socket();
    socket::send(sock, &[IoSlice::new(&b)], &fds, false).map(|_| ())
}

/// Receives and checks the handshake (it is already queued when the
/// connect message arrives). Every descriptor that came with a bad one is
/// closed.
pub(crate) fn recv_hello(sock: BorrowedFd<'_>) -> Result<Hello, String> {
    let mut buf = [0u8; 64];
    let dg = match socket::recv(sock, &mut buf, false) {
        Ok(dg) => dg,
        Err(Errno::AGAIN) => return Err("no handshake queued on the connection socket".into()),
        Err(e) => return Err(format!("cannot read the handshake: {e}")),
    };
    if dg.truncated || dg.fds_truncated || dg.len != 16 || buf[..4] != MAGIC {
        return Err("malformed handshake".into());
    }
    let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    if word(4) != VERSION {
        return Err(format!("handshake version {} not supported", word(4)));
    }
    let flags = word(8);
    if flags & !FLAG_SLOT != 0 || word(12) != super::SLOT_SIZE as u32 {
        return Err("handshake flags or slot size not understood".into());
    }
    let mut fds = dg.fds;
    let want = usize::from(flags & FLAG_SLOT != 0);
    if fds.len() != want {
        return Err(format!("handshake carries {} descriptors, expected {want}", fds.len()));
    }
    Ok(Hello { slot: fds.pop() })
}

/// Sends the acknowledgement.
pub(crate) fn send_ack(sock: BorrowedFd<'_>) -> rustix::io::Result<()> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    super::policy::count_socket();
    socket::send(sock, &[IoSlice::new(&b)], &[], false).map(|_| ())
}

/// Refusal status: the connecting user holds its budget of connections.
pub(crate) const REFUSED_USER_BUDGET: u32 = 1;
/// Refusal status: the server holds as many connections as it takes.
pub(crate) const REFUSED_SERVER_FULL: u32 = 2;

/// Sends a refusal with `status` in place of the acknowledgement.
pub(crate) fn send_refusal(sock: BorrowedFd<'_>, status: u32) -> rustix::io::Result<()> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&status.to_le_bytes());
    socket::send(sock, &[IoSlice::new(&b)], &[], false).map(|_| ())
}

/// The status of a refusal datagram (an acknowledgement with a non-zero
/// status), if `bytes` is one.
pub(crate) fn refusal(bytes: &[u8]) -> Option<u32> {
    if bytes.len() == 12 && bytes[..4] == MAGIC && bytes[4..8] == VERSION.to_le_bytes() {
        let status = u32::from_le_bytes(bytes[8..12].try_into().ok()?);
        (status != 0).then_some(status)
    } else {
        None
    }
}

/// What a refusal with `status` means, for the client's error.
pub(crate) fn refusal_reason(status: u32) -> String {
    match status {
        REFUSED_USER_BUDGET => "this user holds as many connections to the server as it allows; close some first".into(),
        REFUSED_SERVER_FULL => "the server holds as many connections as it takes".into(),
        other => format!("the server refused the connection (status {other})"),
    }
}

/// Checks an acknowledgement datagram.
pub(crate) fn is_ack(bytes: &[u8]) -> bool {
    bytes.len() == 12 && bytes[..4] == MAGIC && bytes[4..8] == VERSION.to_le_bytes() && bytes[8..12] == [0; 4]
}

/// Rings the server's doorbell. A full socket means a doorbell is already
/// pending, which is as good.
pub(crate) fn ring(sock: BorrowedFd<'_>) -> Result<(), RpcError> {
    super::policy::count_wake();
    match socket::send(sock, &[IoSlice::new(&[DOORBELL])], &[], false) {
        Ok(_) | Err(Errno::AGAIN) => Ok(()),
        Err(Errno::PIPE) | Err(Errno::CONNRESET) | Err(Errno::NOTCONN) => Err(RpcError::PeerDead),
        Err(e) => Err(RpcError::Io(io_err(e))),
    }
}

/// Sends `msg` over the socket as a framed request or reply for `seq`.
pub(crate) fn send_framed(sock: BorrowedFd<'_>, frame_op: u32, seq: u32, mut msg: Message) -> Result<(), RpcError> {
    let len = msg.body().len();
    if len > MAX_INLINE {
        return Err(RpcError::TooLarge(format!("a body of {len} bytes is over the {MAX_INLINE} a call carries")));
    }
    // A body the framing would push over a message's inline bytes goes in
    // a region of its own. Otherwise the body goes on the wire from where
    // it is, after the framing (no copy to put the framing in front).
    let long = len > MAX_INLINE - PREFIX;
    let mut prefix = [0u8; PREFIX];
    prefix[..4].copy_from_slice(&seq.to_le_bytes());
    prefix[4..].copy_from_slice(&msg.op().to_le_bytes());
    let tail = if long {
        Some(RegionItem::copied_from(msg.body()).map_err(|e| RpcError::Io(std::io::Error::other(e.to_string())))?)
    } else {
        None
    };
    let body = if long { Vec::new() } else { std::mem::take(msg.body_mut()) };
    let mut out = Message::new(if long { long_op(frame_op) } else { frame_op }).with_body(body);
    if let Some(r) = msg.take_reply() {
        out = out.with_reply(r);
    }
    for it in msg.take_items() {
        out = out.with_item(it);
    }
    if let Some(r) = tail {
        out = out.with_item(Item::Region(r));
    }
    super::policy::count_socket();
    send_prefixed(sock, &prefix, out, Timeout::Zero).map_err(|(e, _)| match e {
        crate::SendError::PeerDead => RpcError::PeerDead,
        crate::SendError::TooLarge(w) => RpcError::TooLarge(w),
        crate::SendError::QueueFull | crate::SendError::Timeout => {
            RpcError::protocol("the peer does not drain its connection socket")
        }
        crate::SendError::Invalid(w) => RpcError::TooLarge(w.into()),
        crate::SendError::Io(e) => RpcError::Io(e),
    })
}

/// Tells the client that the reply to call `seq` was too large to carry.
pub(crate) fn send_too_large(sock: BorrowedFd<'_>, seq: u32) -> Result<(), RpcError> {
    send_framed(sock, RPC_SOCKET_REPLY_TOO_LARGE, seq, Message::new(0))
}

/// One datagram read from a connection socket.
pub(crate) enum Incoming {
    /// Nothing queued now.
    Empty,
    /// The peer closed its end (or died).
    Closed,
    /// A doorbell (server side) or a stray acknowledgement.
    Doorbell,
    /// A framed request or reply: its sequence number and the message with
    /// the caller's operation id and body restored.
    Framed(u32, Message),
    /// Client side: the reply to call `seq` was too large to carry.
    ReplyTooLarge(u32),
}

/// Reads one datagram without waiting, and decodes it. `frame_op` is the
/// framed operation this side expects.
pub(crate) fn recv_one(sock: BorrowedFd<'_>, buf: &mut [u8], identity: (u64, u64), frame_op: u32) -> Result<Incoming, RpcError> {
    super::policy::count_socket();
    let dg = match socket::recv(sock, buf, false) {
        Ok(dg) => dg,
        Err(Errno::AGAIN) | Err(Errno::INTR) => return Ok(Incoming::Empty),
        Err(Errno::CONNRESET) => return Ok(Incoming::Closed),
        Err(e) => return Err(RpcError::Io(io_err(e))),
    };
    if dg.len == 0 && dg.fds.is_empty() && !dg.truncated {
        return Ok(Incoming::Closed);
    }
    if dg.fds.is_empty() && !dg.truncated && dg.len == 1 && buf[0] == DOORBELL {
        return Ok(Incoming::Doorbell);
    }
    let mut m = Message::from_datagram(buf, dg, identity, false).map_err(|e| RpcError::protocol(format!("bad frame: {e}")))?;
    if frame_op == FOR_CLIENT && m.op() == RPC_SOCKET_REPLY_TOO_LARGE {
        if m.body().len() != PREFIX || !m.items().is_empty() || m.take_reply().is_some() {
            return Err(RpcError::protocol("malformed reply-too-large notice"));
        }
        return Ok(Incoming::ReplyTooLarge(u32::from_le_bytes(m.body()[..4].try_into().expect("4 bytes"))));
    }
    let long = m.op() == long_op(frame_op);
    if (m.op() != frame_op && !long) || m.body().len() < PREFIX || (long && m.body().len() != PREFIX) {
        return Err(RpcError::protocol(format!("unexpected frame (operation {:#x}, {} bytes)", m.op(), m.body().len())));
    }
    let b = m.body();
    let seq = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
    let op = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
    // The caller's body is what follows the framing: moved down in place,
    // not copied into a new allocation.
    let mut inline = std::mem::take(m.body_mut());
    inline.drain(..PREFIX);
    let mut items = m.take_items();
    let body = if long {
        // The body's region: by value, and of a length only a body too
        // long for the framing has (checked before a byte is read).
        match items.pop() {
            Some(Item::Region(r)) if r.mode().is_by_value() && r.len() > MAX_INLINE - PREFIX && r.len() <= MAX_INLINE => {
                r.copy_out(MAX_INLINE).map_err(|e| RpcError::protocol(format!("the body's region cannot be read: {e}")))?
            }
            _ => return Err(RpcError::protocol("a long frame's last item is not a region by value of a long body")),
        }
    } else {
        inline
    };
    let mut out = Message::new(op).with_body(body);
    if let Some(r) = m.take_reply() {
        out = out.with_reply(r);
    }
    for it in items {
        out = out.with_item(it);
    }
    Ok(Incoming::Framed(seq, out))
}

/// The operation of a frame whose body travels in a region, for the
/// frame operation `frame_op`.
pub(crate) fn long_op(frame_op: u32) -> u32 {
    if frame_op == RPC_SOCKET_REQUEST { RPC_SOCKET_REQUEST_LONG } else { RPC_SOCKET_REPLY_LONG }
}

/// Which frame a side receives.
pub(crate) const FOR_SERVER: u32 = RPC_SOCKET_REQUEST;
/// Which frame a side receives.
pub(crate) const FOR_CLIENT: u32 = RPC_SOCKET_REPLY;

/// The identity of a socket, for refusing a receive right to itself.
pub(crate) fn identity_of(sock: &OwnedFd) -> (u64, u64) {
    socket::identity(sock.as_fd()).unwrap_or((0, 0))
}
