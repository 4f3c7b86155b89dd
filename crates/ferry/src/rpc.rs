//! The fast path: L4-style call / reply-and-wait over shared memory and
//! futexes.
//!
//! A client opens a [`Connection`] to a server through a send right to the
//! server's port; the server ([`RpcServer`]) accepts it. From then on the
//! client [`call`](Transport::call)s (send a request and wait for its reply,
//! one operation) and the server [`reply_and_wait`](RpcServer::reply_and_wait)s
//! (answer one client and wait for the next request from any of its
//! connections, one operation).
//!
//! Each connection has a **socket** (a `SOCK_SEQPACKET` pair: its hang-up is
//! how either side learns the other died) and a **slot**: a 136 KiB memfd both
//! sides map `MAP_SHARED`, holding one request and one reply area with
//! sequence numbers. Short messages (body up to [`SLOT_INLINE`] bytes, no
//! items, which is every body a call carries) travel through the slot; a
//! message with rights travels over the connection socket instead, with the
//! same semantics. A
//! [`SocketConnection`] sends everything over the socket (the plain path,
//! for comparison and for the conformance suite).
//!
//! Nothing read from the slot is trusted: it is copied out first and then
//! checked (length, sequence number), so a hostile peer can only break its
//! own connection. How a client waits for its reply is its [`Policy`];
//! `docs/rpc.md` describes the slot layout, the handshake, the wake-up
//! protocol and what each policy costs.
//!
//! # The `Transport` contract
//! Every implementation of [`Transport`] (the shared-slot [`Connection`] and
//! the socket-only [`SocketConnection`]) behaves the same, and one test suite
//! checks both:
//! - `call(req, timeout)` delivers `req` (operation id, body, items, reply
//!   right) to the server exactly once, or not at all, and returns the reply
//!   the server gave to *that* request: a reply to an earlier call that timed
//!   out is discarded, never returned.
//! - [`Timeout::Zero`] fails at once with [`RpcError::Timeout`] unless the
//!   reply is already there (it never is for a fresh call, so a zero timeout
//!   is only useful to poll); a finite timeout fails with
//!   [`RpcError::Timeout`] when it passes; the connection stays usable.
//! - When the server process dies or drops the connection, a call fails with
//!   [`RpcError::PeerDead`] (promptly, not at the timeout) and every later
//!   call fails the same way.
//! - A malformed reply fails with [`RpcError::Protocol`]; the connection is
//!   then broken and later calls fail with [`RpcError::PeerDead`].
//! - A reply too large for any path fails the server's reply with
//!   [`RpcError::TooLarge`] and the call with [`RpcError::ReplyTooLarge`];
//!   the connection stays usable.
//! - Rights in a request or reply move with it, as with
//!   [`crate::SendRight::send`].
//!
//! ```no_run
//! use ferry::rpc::{Connection, ConnectOptions, RpcServer, Transport};
//! use ferry::{Message, Timeout};
//!
//! let (port, to_port) = ferry::port()?;
//! let server = std::thread::spawn(move || {
//!     let mut server = RpcServer::new(port).unwrap();
//!     let mut reply = None;
//!     loop {
//!         let (conn, req) = server.reply_and_wait(reply.take(), Timeout::Infinite).unwrap();
//!         reply = Some((conn, Message::new(req.op()).with_body(req.body().to_vec())));
//!     }
//! });
//! let mut conn = Connection::connect(&to_port, ConnectOptions::default())?;
//! let reply = conn.call(Message::new(1).with_body(*b"ping"), Timeout::Infinite)?;
//! assert_eq!(reply.body(), b"ping");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod client;
mod conn;
pub(crate) mod frame;
mod policy;
mod probe;
mod server;
pub(crate) mod slot;
mod watch;

use std::fmt;
use std::io;

use crate::message::Message;
use crate::timeout::Timeout;

pub use client::{ConnectOptions, Connecting, Connection, PendingCall, SocketConnection};
#[cfg(feature = "tokio")]
pub(crate) use client::Look;
pub use policy::{pin_current_thread, stats, Policy, RpcStats, ADAPTIVE_SPIN, LIVENESS_INTERVAL, WAKE_GRACE};
pub use probe::CallProbe;
pub use server::{ConnId, RpcLimits, RpcServer};
pub use slot::{SLOT_INLINE, SLOT_SIZE};

/// This process's mark, as a connection or server made now records it:
/// a child made since by `fork()` or by a raw `clone` (without
/// `CLONE_VM`) has another, and refuses the handle with
/// [`RpcError::Forked`]. For bindings that keep handles of their own and
/// want to refuse one before taking anything; one or two atomic loads
/// once the first handle was made.
pub fn process_mark() -> u64 {
    crate::sys::process::count_forks()
}

/// Operation id of the message that opens a connection, sent to the
/// server's port. Operation ids `0xFE77_0000..=0xFE77_FFFF` are reserved for
/// the RPC layer; a server's port should not use them for anything else.
pub const RPC_CONNECT: u32 = 0xFE77_0001;
/// Operation id of a request sent over a connection's socket (its body
/// starts with the call's sequence number and the caller's operation id).
pub const RPC_SOCKET_REQUEST: u32 = 0xFE77_0002;
/// Operation id of a reply sent over a connection's socket.
pub const RPC_SOCKET_REPLY: u32 = 0xFE77_0003;
/// Operation id of the notice, sent over a connection's socket, that the
/// server's reply to a call was too large to carry (its body is the call's
/// sequence number and a zero word). The call fails with
/// [`RpcError::ReplyTooLarge`]; the connection stays usable.
pub const RPC_SOCKET_REPLY_TOO_LARGE: u32 = 0xFE77_0004;
/// Operation id of a request sent over a connection's socket whose body
/// is too long to follow the 8 bytes of framing in a message (more than
/// [`crate::message::MAX_INLINE`] less 8): the message's body is the
/// framing alone, and the caller's body travels by copy in a region, its
/// last item.
pub const RPC_SOCKET_REQUEST_LONG: u32 = 0xFE77_0005;
/// Operation id of a reply sent over a connection's socket as
/// [`RPC_SOCKET_REQUEST_LONG`] sends a request.
pub const RPC_SOCKET_REPLY_LONG: u32 = 0xFE77_0006;

/// Why a call or a reply-and-wait failed.
#[derive(Debug)]
pub enum RpcError {
    /// The other side is gone (its process died, or it dropped the
    /// connection); the connection cannot be used again. Reconnect.
    PeerDead,
    /// Nothing arrived before the timeout. For a call, a reply that comes
    /// later is discarded; the connection stays usable.
    Timeout,
    /// The peer broke the protocol (garbage in the slot, a malformed frame);
    /// the connection has been closed.
    Protocol {
        /// What was wrong.
        reason: String,
    },
    /// The message is larger than any path can carry. For a server's reply,
    /// the client was told ([`RpcError::ReplyTooLarge`]) and the connection
    /// stays usable.
    TooLarge(String),
    /// The server answered this call, but its reply was larger than a
    /// message can carry, so it could not be delivered; the server was told
    /// (its reply failed with [`RpcError::TooLarge`]). The server is alive
    /// and the connection stays usable: retry differently (ask for less).
    ReplyTooLarge,
    /// The server's port refused the connection or the handshake failed.
    Refused(String),
    /// The server has no port left to accept on and no connections: nothing
    /// can ever arrive.
    NoClients,
    /// The connection or server was made by the process this one was
    /// forked from: a connection's copies share one slot and one sequence
    /// of calls, so calls through them would take each other's replies; a
    /// server's share its port and connections. Nothing was sent or
    /// taken; make a new one in this process (dropping this copy leaves
    /// the other process's alone).
    Forked,
    /// The kernel refused for another reason.
    Io(io::Error),
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::PeerDead => write!(f, "the peer is gone; open a new connection"),
            RpcError::Timeout => write!(f, "no reply before the timeout; retry or use a longer timeout"),
            RpcError::Protocol { reason } => write!(f, "the peer broke the RPC protocol ({reason}); the connection was closed"),
            RpcError::TooLarge(why) => write!(f, "message too large for a call: {why}"),
            RpcError::ReplyTooLarge => {
                write!(f, "the server's reply was too large to deliver (the server was told); the connection is still usable")
            }
            RpcError::Refused(why) => write!(f, "connection refused: {why}"),
            RpcError::NoClients => write!(f, "no connections and no port to accept new ones"),
            RpcError::Forked => write!(
                f,
                "this connection or server was made by the process this one was forked from: its copies share one slot and one port, and calls or replies through them would take each other's; make a new one in this process"
            ),
            RpcError::Io(e) => write!(f, "rpc failed: {e}"),
        }
    }
}

impl std::error::Error for RpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RpcError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl RpcError {
    pub(crate) fn protocol(reason: impl Into<String>) -> RpcError {
        RpcError::Protocol { reason: reason.into() }
    }
}

/// The client end of a request/response channel. The contract every
/// implementation keeps is in the [module documentation](self).
pub trait Transport {
    /// Sends `req` and waits for its reply, as `timeout` allows.
    ///
    /// # Errors
    /// [`RpcError::Timeout`], [`RpcError::PeerDead`], [`RpcError::Protocol`],
    /// [`RpcError::TooLarge`], as the module documentation describes.
    fn call(&mut self, req: Message, timeout: Timeout) -> Result<Message, RpcError>;

    /// As [`call`](Transport::call), but the request stays with the caller
    /// where the transport only needed to read it: a call that takes the
    /// fast path copies `req`'s body into the slot and leaves the buffer in
    /// `req`, so a caller that builds its requests in the same message
    /// allocates once, not per call. A request that travels otherwise (with
    /// rights, or too large for the slot) is taken whole and `req` is left
    /// empty. The default takes every request whole.
    ///
    /// # Errors
    /// As [`call`](Transport::call).
    fn call_reusing(&mut self, req: &mut Message, timeout: Timeout) -> Result<Message, RpcError> {
        self.call(std::mem::take(req), timeout)
    }

    /// A call whose request is inline bytes only, given in two pieces that
    /// travel as one body (`head`, then `tail`), and whose reply is taken
    /// apart into `reply` where [`SplitReply::split`] says. On the fast
    /// path neither piece is joined to the other first and the reply's two
    /// parts are copied straight out of the slot into their own buffers:
    /// a caller that frames a payload it holds in a vector of its own (a
    /// generated stub's last byte-list argument) sends and receives it
    /// with no copy beyond the slot's. A request too large for the slot
    /// travels whole over the socket, and its reply is split after it
    /// arrives. The default joins the pieces, calls and splits.
    ///
    /// # Errors
    /// As [`call`](Transport::call).
    fn call_parts(&mut self, op: u32, head: &[u8], tail: &[u8], reply: &mut SplitReply, timeout: Timeout) -> Result<(), RpcError> {
        let msg = self.call(Message::new(op).with_body([head, tail].concat()), timeout)?;
        reply.fill(msg);
        Ok(())
    }
}

/// A reply taken apart where its reader wants it
/// ([`Transport::call_parts`]): the first [`split`](Self::split) bytes of
/// its body in [`head`](Self::head), the rest in [`tail`](Self::tail).
/// The buffers are filled in place call after call, so their allocations
/// are reused; a caller that takes `tail` away (to keep a payload in its
/// own allocation) leaves an empty vector for the next reply.
#[derive(Debug, Default)]
pub struct SplitReply {
    /// Where the body is cut: `head` gets the bytes before this offset
    /// (all of them in a shorter body), `tail` the rest.
    pub split: usize,
    /// The reply's operation id.
    pub op: u32,
    /// The body's first `split` bytes.
    pub head: Vec<u8>,
    /// The body's bytes from `split` on.
    pub tail: Vec<u8>,
    /// The reply's items (rights, regions, descriptors), in order.
    pub items: Vec<crate::message::Item>,
}

impl SplitReply {
    /// Takes apart a reply that arrived whole. The larger part keeps the
    /// message's buffer (a tail is moved to its front in place); only the
    /// smaller one is copied.
    pub fn fill(&mut self, mut msg: Message) {
        self.op = msg.op();
        self.items = msg.take_items();
        let mut body = std::mem::take(msg.body_mut());
        let at = self.split.min(body.len());
        if at <= body.len() - at {
            self.head.clear();
            self.head.extend_from_slice(&body[..at]);
            body.drain(..at);
            self.tail = body;
        } else {
            self.tail.clear();
            self.tail.extend_from_slice(&body[at..]);
            body.truncate(at);
            self.head = body;
        }
    }
}
