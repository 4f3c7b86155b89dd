//! The client end: opening a connection, and `call` over the slot (spin,
//! then futex) or over the connection socket.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::frame::{self, Incoming};
use super::policy::{self, Budget, Policy, LIVENESS_INTERVAL, SPINS_PER_CLOCK};
use super::probe::{self, CallProbe, ClientStamps};
use super::slot::{self, Slot, SLOT_INLINE};
use super::{RpcError, SplitReply, Transport, RPC_CONNECT};
use crate::error::io_err;
use crate::message::Message;
use crate::port::SendRight;
use crate::sys::futex::{self, Woken};
use crate::sys::socket;
use crate::sys::wait::{self, Interest};
use crate::timeout::Timeout;

/// How to open a connection.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnectOptions {
    /// How this client waits for replies (changeable later with
    /// [`Connection::set_policy`]).
    pub policy: Policy,
    /// How long to wait for the server to accept. `Infinite` (the default)
    /// still fails at once if the server dies.
    pub timeout: Timeout,
}

/// A connection to an [`RpcServer`](super::RpcServer) with a shared slot:
/// short calls go through shared memory, the rest over its socket.
#[derive(Debug)]
pub struct Connection {
    inner: Inner,
}

/// A connection that sends every call over its socket (no slot): the plain
/// message path, with the same semantics as [`Connection`].
#[derive(Debug)]
pub struct SocketConnection {
    inner: Inner,
}

#[derive(Debug)]
struct Inner {
    /// `None` once the connection is broken or the peer is known dead.
    sock: Option<OwnedFd>,
    identity: (u64, u64),
    slot: Option<(Slot, OwnedFd)>,
    policy: Policy,
    seq: u32,
    buf: Vec<u8>,
    probe: Option<CallProbe>,
    /// The fork count when the connection was made: a forked child's copy
    /// shares the slot and the sequence numbers, and must not call.
    made_at: u64,
    _open: crate::counters::ConnectionGauge,
}

impl Connection {
    /// Opens a connection to the server whose port `server` names, with a
    /// shared slot.
    ///
    /// # Errors
    /// [`RpcError::PeerDead`] if the port is dead; [`RpcError::Refused`] if
    /// the server closed the connection instead of accepting it;
    /// [`RpcError::Timeout`] if it did not answer in time.
    pub fn connect(server: &SendRight, opts: ConnectOptions) -> Result<Connection, RpcError> {
        Ok(Connection { inner: Inner::connect(server, opts, true)? })
    }

    /// How this connection waits for replies.
    pub fn policy(&self) -> Policy {
        self.inner.policy
    }

    /// Changes how this connection waits for replies.
    pub fn set_policy(&mut self, policy: Policy) {
        self.inner.policy = policy;
    }

    /// Whether the connection is still usable (not broken, peer not known
    /// to be dead).
    pub fn is_open(&self) -> bool {
        self.inner.sock.is_some()
    }

    /// The slot's memfd, for inspection and fault-injection tests. Whoever
    /// holds it can write anything into the slot; the server is built to
    /// survive exactly that, at the cost of this connection only.
    pub fn slot_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.slot.as_ref().map(|(_, fd)| fd.as_fd())
    }

    /// The phase breakdown of the last call that went through the slot
    /// (only with the `probes` feature; `None` otherwise).
    pub fn last_probe(&self) -> Option<CallProbe> {
        self.inner.probe
    }
}

/// A call whose request [`Connection::send_request`] has sent and whose
/// reply has not been taken yet: [`Connection::wait_reply`] waits for it,
/// as many times as it takes. Dropping it, or sending another request on
/// the connection, abandons the call: the server still answers it, and its
/// late reply is discarded, as after a timeout.
#[derive(Debug)]
#[must_use = "the reply is taken with Connection::wait_reply"]
pub struct PendingCall {
    seq: u32,
    /// The request went through the slot (the reply may come there).
    via_slot: bool,
    /// The slot asks the server to ring the socket when it replies.
    armed: bool,
}

/// A call in two steps: send the request, then wait for its reply in as
/// many waits as the caller likes, each with its own timeout. For callers
/// that must look at something else between waits (an interpreter's
/// signals, an event loop), where one [`Transport::call`] would block
/// until its end.
impl Connection {
    /// Sends `req` (through the slot when it fits, else over the socket)
    /// without waiting for the reply.
    ///
    /// # Errors
    /// [`RpcError::PeerDead`] if the connection is closed or the server
    /// gone; [`RpcError::TooLarge`] if `req` cannot travel.
    pub fn send_request(&mut self, req: Message) -> Result<PendingCall, RpcError> {
        // A call abandoned while it asked for the doorbell asks no more.
        self.want_doorbell(false);
        let (seq, via_slot) = self.start_call(req)?;
        Ok(PendingCall { seq, via_slot, armed: false })
    }

    /// Waits up to `timeout` for the reply to `call`, as this connection's
    /// policy says. [`RpcError::Timeout`] leaves the call pending: wait
    /// again for the same reply (the request is never sent twice).
    /// [`Timeout::Zero`] only looks, and asks the server to ring the
    /// connection's socket ([`socket_fd`](Self::socket_fd)) when it replies, so
    /// that an event loop can wait for the socket to poll readable and then
    /// look again.
    ///
    /// # Errors
    /// As [`Transport::call`]; after any error but
    /// [`RpcError::Timeout`] the call is over. [`RpcError::Io`] at once for
    /// a call that a later request on this connection abandoned (its reply
    /// would never be returned).
    pub fn wait_reply(&mut self, call: &mut PendingCall, timeout: Timeout) -> Result<Message, RpcError> {
        if call.seq != self.inner.seq {
            return Err(RpcError::Io(std::io::Error::other("the call was abandoned: a later request was sent on this connection")));
        }
        let out = if timeout == Timeout::Zero {
            match self.look_for_reply(call) {
                Ok(Some(m)) => Ok(m),
                Ok(None) => return Err(RpcError::Timeout),
                Err(e) => Err(e),
            }
        } else {
            self.disarm(call);
            let out = self.inner.wait_reply(call, timeout.deadline());
            self.inner.close_if_broken(out)
        };
        if !matches!(out, Err(RpcError::Timeout)) {
            self.disarm(call);
        }
        out
    }

    /// The connection's socket, while the connection is open: it polls
    /// readable when [`wait_reply`](Self::wait_reply) with
    /// [`Timeout::Zero`] asked for a doorbell and the reply (or the
    /// server's hang-up) came.
    pub fn socket_fd(&self) -> Option<BorrowedFd<'_>> {
        self.socket()
    }

    /// The reply to `call` if it is here, without waiting; else asks for
    /// the doorbell and says `None`.
    fn look_for_reply(&mut self, call: &mut PendingCall) -> Result<Option<Message>, RpcError> {
        if call.via_slot {
            if let Some(out) = self.slot_reply(call.seq) {
                return out.map(Some);
            }
            if !call.armed {
                // Ask for the doorbell, then look once more: the server
                // publishes, then reads the flag.
                self.want_doorbell(true);
                call.armed = true;
                if let Some(out) = self.slot_reply(call.seq) {
                    return out.map(Some);
                }
            }
        }
        match self.read_socket(call.seq, call.via_slot)? {
            Look::Reply(m) => Ok(Some(m)),
            // The datagrams just read may have included the doorbell of a
            // reply published in the slot meanwhile.
            Look::Empty | Look::More if call.via_slot => self.slot_reply(call.seq).transpose(),
            Look::Empty | Look::More => Ok(None),
        }
    }

    fn disarm(&mut self, call: &mut PendingCall) {
        if std::mem::take(&mut call.armed) {
            self.want_doorbell(false);
        }
    }
}

impl Transport for Connection {
    fn call(&mut self, req: Message, timeout: Timeout) -> Result<Message, RpcError> {
        self.inner.call(req, timeout)
    }

    fn call_reusing(&mut self, req: &mut Message, timeout: Timeout) -> Result<Message, RpcError> {
        self.inner.call_reusing(req, timeout)
    }

    fn call_parts(&mut self, op: u32, head: &[u8], tail: &[u8], reply: &mut SplitReply, timeout: Timeout) -> Result<(), RpcError> {
        self.inner.call_parts(op, head, tail, reply, timeout)
    }
}

impl SocketConnection {
    /// Opens a connection whose calls all travel over its socket.
    ///
    /// # Errors
    /// As [`Connection::connect`].
    pub fn connect(server: &SendRight, opts: ConnectOptions) -> Result<SocketConnection, RpcError> {
        Ok(SocketConnection { inner: Inner::connect(server, opts, false)? })
    }

    /// Whether the connection is still usable.
    pub fn is_open(&self) -> bool {
        self.inner.sock.is_some()
    }
}

/// What [`Connection::read_socket`] found.
#[derive(Debug)]
pub(crate) enum Look {
    /// The reply to the call.
    Reply(Message),
    /// Not yet, and the socket is empty: wait for it to become readable.
    Empty,
    /// Not yet, and the socket still holds datagrams (a flood of stale
    /// ones): look again soon.
    More,
}

/// The hooks a call in two steps is built from (the `tokio` module's
/// awaited calls, [`Connection::send_request`] and
/// [`Connection::wait_reply`]): publish the request, then look for the
/// reply without ever blocking, waiting in between on the connection
/// socket, where the server rings a doorbell instead of a futex wake when
/// the slot asks for one.
impl Connection {
    /// The client end of the connection socket, while the connection is
    /// open.
    pub(crate) fn socket(&self) -> Option<BorrowedFd<'_>> {
        self.inner.sock.as_ref().map(|s| s.as_fd())
    }

    /// Publishes `req` (through the slot when it fits, else over the socket,
    /// without waiting) and returns its sequence number and whether it went
    /// through the slot.
    pub(crate) fn start_call(&mut self, mut req: Message) -> Result<(u32, bool), RpcError> {
        let inner = &mut self.inner;
        let seq = inner.next_seq()?;
        let reply_right = req.take_reply();
        let fits = reply_right.is_none() && req.items().is_empty() && req.body().len() <= SLOT_INLINE;
        if let Some(r) = reply_right {
            req = req.with_reply(r);
        }
        let out = match &inner.slot {
            Some((slot, _)) if fits => {
                slot.word(slot::OFF_CLIENT_CPU).store(0, Ordering::Relaxed);
                slot.put_request(seq, req.op(), req.body(), &[]);
                if slot.word(slot::OFF_SERVER_SLEEPING).load(Ordering::SeqCst) != 0 {
                    frame::ring(inner.sock()).map(|_| (seq, true))
                } else {
                    Ok((seq, true))
                }
            }
            _ => frame::send_framed(inner.sock(), frame::FOR_SERVER, seq, req).map(|_| {
                if let Some((slot, _)) = &inner.slot {
                    slot.word(slot::OFF_REQ_SOCK).store(seq, Ordering::SeqCst);
                }
                (seq, false)
            }),
        };
        inner.close_if_broken(out)
    }

    /// Asks the server to ring the socket (`on`) when it publishes a reply
    /// in the slot, instead of a futex wake; or stops asking.
    pub(crate) fn want_doorbell(&self, on: bool) {
        if let Some((slot, _)) = &self.inner.slot {
            let v = if on { slot::CLIENT_WANTS_DOORBELL } else { 0 };
            slot.word(slot::OFF_CLIENT_SLEEPING).store(v, Ordering::SeqCst);
        }
    }

    /// The reply to slot call `seq` if the server has published it in the
    /// slot (no system call); `None` while it has not, or when the reply
    /// travels over the socket ([`read_socket`](Self::read_socket) gets it).
    pub(crate) fn slot_reply(&mut self, seq: u32) -> Option<Result<Message, RpcError>> {
        let out = self.inner.slot_reply(seq)?;
        Some(self.inner.close_if_broken(out))
    }

    /// Reads what the socket holds without waiting: the socket reply to
    /// `seq`, doorbells and late replies to earlier calls (discarded), or
    /// the hang-up.
    pub(crate) fn read_socket(&mut self, seq: u32, via_slot: bool) -> Result<Look, RpcError> {
        let out = self.inner.read_socket(seq, via_slot);
        self.inner.close_if_broken(out)
    }
}

impl Transport for SocketConnection {
    fn call(&mut self, req: Message, timeout: Timeout) -> Result<Message, RpcError> {
        self.inner.call(req, timeout)
    }
}

fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// A connection being opened in steps ([`Connection::begin_connect`]): the
/// connect request goes to the server's port, then the server's acceptance
/// is awaited, each step as long as [`wait`](Self::wait) is told, in as many
/// waits as it takes. For callers that must look at something else between
/// waits (an interpreter's signals), where [`Connection::connect`] would
/// block until its end. Dropping it gives the connection up.
#[derive(Debug)]
pub struct Connecting {
    /// This side's end of the connection socket and the slot, until the
    /// connection is open.
    ends: Option<(OwnedFd, Option<(Slot, OwnedFd)>)>,
    policy: Policy,
    /// The connect request, until the server's port has taken it.
    request: Option<Message>,
}

impl Connection {
    /// Makes the connection's socket and slot, to be opened with
    /// [`Connecting::wait`]; nothing is sent yet.
    ///
    /// # Errors
    /// [`RpcError::Io`] if the socket or the slot cannot be made.
    pub fn begin_connect(policy: Policy) -> Result<Connecting, RpcError> {
        Connecting::new(policy, true)
    }
}

impl Connecting {
    fn new(policy: Policy, with_slot: bool) -> Result<Connecting, RpcError> {
        let io = |e| RpcError::Io(io_err(e));
        let (mine, theirs) = socket::seqpacket_pair().map_err(io)?;
        let slot = if with_slot { Some(Slot::create().map_err(io)?) } else { None };
        frame::send_hello(mine.as_fd(), slot.as_ref().map(|(_, fd)| fd.as_fd())).map_err(io)?;
        let request = Message::new(RPC_CONNECT).with_item(SendRight::from_fd(theirs));
        Ok(Connecting { ends: Some((mine, slot)), policy, request: Some(request) })
    }

    /// Sends the connect request to the server whose port `server` names,
    /// unless an earlier wait did, then waits for the server to accept; each
    /// step waits up to `timeout`. [`RpcError::Timeout`] leaves the
    /// connection half open: wait again, with the same server (the request
    /// is sent once).
    ///
    /// # Errors
    /// As [`Connection::connect`]; [`RpcError::Io`] once the connection was
    /// returned.
    pub fn wait(&mut self, server: &SendRight, timeout: Timeout) -> Result<Connection, RpcError> {
        Ok(Connection { inner: self.wait_inner(server, timeout)? })
    }

    /// Whether the connect request has been sent (a full port keeps it
    /// here until a [`wait`](Self::wait) finds room).
    pub fn request_sent(&self) -> bool {
        self.request.is_none()
    }

    /// This side's end of the connection socket, until the connection is
    /// returned: it polls readable once the server has answered the
    /// request (accepted it, refused it, or gone away).
    pub fn socket_fd(&self) -> Option<BorrowedFd<'_>> {
        self.ends.as_ref().map(|(mine, _)| mine.as_fd())
    }

    fn wait_inner(&mut self, server: &SendRight, timeout: Timeout) -> Result<Inner, RpcError> {
        let io = |e| RpcError::Io(io_err(e));
        let Some((mine, _)) = &self.ends else {
            return Err(RpcError::Io(std::io::Error::other("the connection was opened already")));
        };
        if let Some(request) = self.request.take() {
            if let Err(failed) = server.send(request, timeout) {
                let (e, request, ()) = failed.into_parts();
                let e = match e {
                    crate::SendError::PeerDead => RpcError::PeerDead,
                    crate::SendError::QueueFull | crate::SendError::Timeout => RpcError::Timeout,
                    crate::SendError::Io(e) => RpcError::Io(e),
                    other => RpcError::Refused(other.to_string()),
                };
                if matches!(e, RpcError::Timeout) {
                    self.request = Some(request);
                }
                return Err(e);
            }
        }
        let deadline = timeout.deadline();
        let mut buf = vec![0u8; 64];
        loop {
            policy::count_poll();
            let r = wait::poll_one(mine.as_fd(), Interest::Readable, deadline).map_err(io)?;
            if !r.any() {
                return Err(RpcError::Timeout);
            }
            policy::count_socket();
            match socket::recv(mine.as_fd(), &mut buf, false) {
                Ok(dg) if dg.len == 0 && dg.fds.is_empty() => {
                    return Err(RpcError::Refused("the server closed the connection during the handshake".into()))
                }
                Ok(dg) if frame::is_ack(&buf[..dg.len]) && dg.fds.is_empty() => break,
                Ok(dg) if dg.fds.is_empty() && frame::refusal(&buf[..dg.len]).is_some() => {
                    return Err(RpcError::Refused(frame::refusal_reason(frame::refusal(&buf[..dg.len]).unwrap_or(0))));
                }
                Ok(_) => return Err(RpcError::protocol("malformed handshake acknowledgement")),
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(io(e)),
            }
        }
        let (mine, slot) = self.ends.take().expect("checked above");
        let identity = frame::identity_of(&mine);
        Ok(Inner {
            sock: Some(mine),
            identity,
            slot,
            policy: self.policy,
            seq: 0,
            buf: vec![0; crate::wire::MAX_MESSAGE + 1],
            probe: None,
            made_at: crate::sys::process::count_forks(),
            _open: crate::counters::ConnectionGauge::open(),
        })
    }
}

impl Inner {
    fn connect(server: &SendRight, opts: ConnectOptions, with_slot: bool) -> Result<Inner, RpcError> {
        Connecting::new(opts.policy, with_slot)?.wait_inner(server, opts.timeout)
    }

    /// A call that owns its request: on the fast path the reply is copied
    /// into the request's buffer, which is no longer needed once the
    /// request is in the slot (one allocation less per call).
    fn call(&mut self, mut req: Message, timeout: Timeout) -> Result<Message, RpcError> {
        self.call_inner(&mut req, timeout, true)
    }

    fn call_reusing(&mut self, req: &mut Message, timeout: Timeout) -> Result<Message, RpcError> {
        self.call_inner(req, timeout, false)
    }

    /// `recycle`: the caller does not want `req` back, so its body buffer
    /// may carry the reply.
    fn call_inner(&mut self, req: &mut Message, timeout: Timeout, recycle: bool) -> Result<Message, RpcError> {
        let seq = self.next_seq()?;
        let deadline = timeout.deadline();
        let fits = !req.has_reply() && req.items().is_empty() && req.body().len() <= SLOT_INLINE;
        let out = if fits && self.slot.is_some() {
            self.slot_call(seq, req, deadline, recycle)
        } else {
            self.socket_call(seq, std::mem::take(req), deadline)
        };
        self.close_if_broken(out)
    }

    /// The sequence number of a new call (never 0), counted; `Forked` in a
    /// child forked since the connection was made; `PeerDead` once the
    /// connection is closed.
    fn next_seq(&mut self) -> Result<u32, RpcError> {
        if self.made_at != crate::sys::process::forks() {
            return Err(RpcError::Forked);
        }
        if self.sock.is_none() {
            return Err(RpcError::PeerDead);
        }
        self.seq = self.seq.wrapping_add(1).max(1);
        crate::counters::add(crate::counters::RPC_CALLS, 1);
        Ok(self.seq)
    }

    /// Closes our end when `out` says the connection is broken or the peer
    /// dead, so the server drops it too.
    fn close_if_broken<T>(&mut self, out: Result<T, RpcError>) -> Result<T, RpcError> {
        if let Err(e @ (RpcError::PeerDead | RpcError::Protocol { .. })) = &out {
            crate::trace::event!(info, error = %e, "rpc connection closed");
            let _ = e;
            self.sock = None;
        }
        out
    }

    /// See [`Connection::slot_reply`].
    fn slot_reply(&self, seq: u32) -> Option<Result<Message, RpcError>> {
        let slot = &self.slot.as_ref()?.0;
        if slot.reply_seq() != seq {
            return None;
        }
        match slot.take_reply(Vec::new()) {
            Ok(c) if c.via == slot::VIA_SLOT => Some(Ok(Message::new(c.op).with_body(c.body))),
            Ok(c) if c.via == slot::VIA_TOO_LARGE => Some(Err(RpcError::ReplyTooLarge)),
            Ok(_) => None,
            Err(e) => Some(Err(RpcError::protocol(e))),
        }
    }

    /// See [`Connection::read_socket`].
    fn read_socket(&mut self, seq: u32, via_slot: bool) -> Result<Look, RpcError> {
        let Some(sock) = self.sock.as_ref() else { return Err(RpcError::PeerDead) };
        // Bounded, so a peer flooding stale frames cannot hold the caller.
        for _ in 0..64 {
            match frame::recv_one(sock.as_fd(), &mut self.buf, self.identity, frame::FOR_CLIENT)? {
                Incoming::Framed(s, m) if s == seq => return Ok(Look::Reply(m)),
                Incoming::ReplyTooLarge(s) if s == seq => return Err(RpcError::ReplyTooLarge),
                Incoming::Framed(..) | Incoming::ReplyTooLarge(_) | Incoming::Doorbell => {}
                Incoming::Empty => return Ok(Look::Empty),
                Incoming::Closed => {
                    // Answered just before the server went away?
                    return match via_slot.then(|| self.slot_reply(seq)).flatten() {
                        Some(r) => r.map(Look::Reply),
                        None => Err(RpcError::PeerDead),
                    };
                }
            }
        }
        Ok(Look::More)
    }

    fn sock(&self) -> BorrowedFd<'_> {
        self.sock.as_ref().expect("checked open at the start of the call").as_fd()
    }

    fn slot_call(&mut self, seq: u32, req: &mut Message, deadline: Option<Instant>, recycle: bool) -> Result<Message, RpcError> {
        let mut st = self.slot_round(seq, deadline, |slot| slot.put_request(seq, req.op(), req.body(), &[]))?;
        let slot = &self.slot.as_ref().expect("slot path needs a slot").0;
        let buf = if recycle { std::mem::take(req.body_mut()) } else { Vec::new() };
        let copied = slot.take_reply(buf).map_err(RpcError::protocol)?;
        if copied.via == slot::VIA_SOCKET {
            return self.recv_reply(seq, deadline);
        }
        if copied.via == slot::VIA_TOO_LARGE {
            return Err(RpcError::ReplyTooLarge);
        }
        st.done = probe::now();
        self.probe = probe::assemble(slot, &st);
        Ok(Message::new(copied.op).with_body(copied.body))
    }

    /// [`Transport::call_parts`]: the request gathered into the slot from
    /// its two pieces, the reply split out of it.
    fn call_parts(&mut self, op: u32, head: &[u8], tail: &[u8], reply: &mut SplitReply, timeout: Timeout) -> Result<(), RpcError> {
        if self.slot.is_none() || head.len() + tail.len() > SLOT_INLINE {
            let msg = self.call(Message::new(op).with_body([head, tail].concat()), timeout)?;
            reply.fill(msg);
            return Ok(());
        }
        let seq = self.next_seq()?;
        let deadline = timeout.deadline();
        let out = self.slot_call_parts(seq, op, head, tail, reply, deadline);
        self.close_if_broken(out)
    }

    fn slot_call_parts(&mut self, seq: u32, op: u32, head: &[u8], tail: &[u8], reply: &mut SplitReply, deadline: Option<Instant>) -> Result<(), RpcError> {
        let mut st = self.slot_round(seq, deadline, |slot| slot.put_request(seq, op, head, tail))?;
        let slot = &self.slot.as_ref().expect("slot path needs a slot").0;
        let (rep_op, via) = slot.take_reply_split(reply.split, &mut reply.head, &mut reply.tail).map_err(RpcError::protocol)?;
        if via == slot::VIA_SOCKET {
            let msg = self.recv_reply(seq, deadline)?;
            reply.fill(msg);
            return Ok(());
        }
        if via == slot::VIA_TOO_LARGE {
            return Err(RpcError::ReplyTooLarge);
        }
        reply.op = rep_op;
        reply.items.clear();
        st.done = probe::now();
        self.probe = probe::assemble(slot, &st);
        Ok(())
    }

    /// Publishes a request through the slot with `put`, wakes the server if
    /// it sleeps, and waits (as the policy says) until the reply to `seq`
    /// is published; returns the probe stamps so far.
    fn slot_round(&self, seq: u32, deadline: Option<Instant>, put: impl FnOnce(&Slot)) -> Result<ClientStamps, RpcError> {
        let mut st = ClientStamps { start: probe::now(), ..Default::default() };
        let slot = &self.slot.as_ref().expect("slot path needs a slot").0;
        let my_cpu = if self.policy == Policy::Adaptive { policy::cpu_tag() } else { 0 };
        slot.word(slot::OFF_CLIENT_CPU).store(my_cpu, Ordering::Relaxed);
        put(slot);
        st.published = probe::now();
        let rang = match slot.word(slot::OFF_SERVER_SLEEPING).load(Ordering::SeqCst) {
            0 => false,
            slot::SLEEPING_FUTEX => {
                policy::count_wake();
                futex::wake(slot.word(slot::OFF_REQ_SEQ)).map_err(|e| RpcError::Io(io_err(e)))?;
                true
            }
            _ => {
                frame::ring(self.sock())?;
                true
            }
        };
        st.woken = probe::now();
        self.wait_slot(seq, deadline, rang, my_cpu)?;
        st.seen = probe::now();
        Ok(st)
    }

    /// Waits until the slot's `rep_seq` is `seq`, as the policy says.
    /// `rang`: the server was asleep and its doorbell was just rung;
    /// `my_cpu`: this thread's CPU tag (adaptive only, else 0).
    fn wait_slot(&self, seq: u32, deadline: Option<Instant>, rang: bool, my_cpu: u32) -> Result<(), RpcError> {
        let slot = &self.slot.as_ref().expect("slot path needs a slot").0;
        let rep = slot.word(slot::OFF_REP_SEQ);
        let server_sleeping = slot.word(slot::OFF_SERVER_SLEEPING);
        let sleeping = slot.word(slot::OFF_CLIENT_SLEEPING);
        let server_cpu = slot.word(slot::OFF_SERVER_CPU);
        // Clocks are read only by waiters that spin.
        let mut last_check = (self.policy != Policy::Block).then(Instant::now);
        let mut spins = 0u32;
        let mut budget = (self.policy == Policy::Adaptive).then(|| Budget::new(rang));
        loop {
            let seen = rep.load(Ordering::Acquire);
            if seen == seq {
                return Ok(());
            }
            let spin = match self.policy {
                Policy::Poll => true,
                Policy::Block => false,
                // A server on this very CPU can only answer once we sleep.
                Policy::Adaptive => {
                    !policy::same_cpu(my_cpu, server_cpu.load(Ordering::Relaxed))
                        && budget.as_mut().is_some_and(|b| b.spin(server_sleeping.load(Ordering::Relaxed) != 0))
                }
            };
            if spin {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(SPINS_PER_CLOCK) {
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return Err(RpcError::Timeout);
                    }
                    if last_check.is_none_or(|t| now.duration_since(t) >= LIVENESS_INTERVAL) {
                        last_check = Some(now);
                        self.check_alive(seq)?;
                    }
                }
                continue;
            }
            if past(deadline) {
                return Err(RpcError::Timeout);
            }
            // Say we sleep, then look once more (Dekker's handshake with the
            // server's publish-then-check in `put_reply`).
            sleeping.store(1, Ordering::SeqCst);
            if rep.load(Ordering::SeqCst) == seq {
                sleeping.store(0, Ordering::Relaxed);
                return Ok(());
            }
            let chunk = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(LIVENESS_INTERVAL),
                None => LIVENESS_INTERVAL,
            };
            policy::count_futex_wait();
            let woken = futex::wait(rep, seen, Some(chunk)).map_err(|e| RpcError::Io(io_err(e)));
            sleeping.store(0, Ordering::Relaxed);
            if woken? == Woken::TimedOut {
                self.check_alive(seq)?;
            }
        }
    }

    /// See [`Connection::wait_reply`]: waits until `deadline` for the reply
    /// to a call already sent.
    fn wait_reply(&mut self, call: &mut PendingCall, deadline: Option<Instant>) -> Result<Message, RpcError> {
        if self.sock.is_none() {
            return Err(RpcError::PeerDead);
        }
        if call.via_slot {
            let my_cpu = if self.policy == Policy::Adaptive { policy::cpu_tag() } else { 0 };
            if let Some((slot, _)) = &self.slot {
                slot.word(slot::OFF_CLIENT_CPU).store(my_cpu, Ordering::Relaxed);
            }
            self.wait_slot(call.seq, deadline, false, my_cpu)?;
            match self.slot_reply(call.seq) {
                Some(out) => return out,
                // Published as travelling over the socket: wait there.
                None => call.via_slot = false,
            }
        }
        self.recv_reply(call.seq, deadline)
    }

    /// Fails with `PeerDead` if the server's end of the socket is gone and
    /// no reply to `seq` is in the slot.
    fn check_alive(&self, seq: u32) -> Result<(), RpcError> {
        policy::count_poll();
        let r = wait::poll_one(self.sock(), Interest::HangUp, Some(Instant::now())).map_err(|e| RpcError::Io(io_err(e)))?;
        let answered = self.slot.as_ref().is_some_and(|(s, _)| s.reply_seq() == seq);
        if r.hangup && !answered {
            return Err(RpcError::PeerDead);
        }
        Ok(())
    }

    fn socket_call(&mut self, seq: u32, req: Message, deadline: Option<Instant>) -> Result<Message, RpcError> {
        frame::send_framed(self.sock(), frame::FOR_SERVER, seq, req)?;
        if let Some((slot, _)) = &self.slot {
            // Tell a server that spins over its slots to look at the socket.
            slot.word(slot::OFF_REQ_SOCK).store(seq, Ordering::SeqCst);
        }
        self.recv_reply(seq, deadline)
    }

    /// Receives the socket reply to `seq`, discarding late replies to
    /// earlier calls.
    fn recv_reply(&mut self, seq: u32, deadline: Option<Instant>) -> Result<Message, RpcError> {
        loop {
            let sock = self.sock.as_ref().expect("open").as_fd();
            match frame::recv_one(sock, &mut self.buf, self.identity, frame::FOR_CLIENT)? {
                Incoming::Framed(s, m) if s == seq => return Ok(m),
                Incoming::ReplyTooLarge(s) if s == seq => return Err(RpcError::ReplyTooLarge),
                Incoming::Framed(..) | Incoming::ReplyTooLarge(_) | Incoming::Doorbell => {
                    // A late reply to an earlier call: discarded. A peer
                    // that floods them still cannot hold us past the deadline.
                    if past(deadline) {
                        return Err(RpcError::Timeout);
                    }
                }
                Incoming::Closed => return Err(RpcError::PeerDead),
                Incoming::Empty => {
                    if past(deadline) {
                        return Err(RpcError::Timeout);
                    }
                    policy::count_poll();
                    wait::poll_one(sock, Interest::Readable, deadline).map_err(|e| RpcError::Io(io_err(e)))?;
                }
            }
        }
    }
}
