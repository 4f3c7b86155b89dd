//! The server end: accepting connections on a port, and reply-and-wait over
//! many connections from one thread (or from a pool of worker threads, each
//! serving the connections it accepted).
//!
//! A server thread waits for all its connections at once. While it spins it
//! scans the slots' request sequence numbers; when it sleeps it first sets
//! `server_sleeping` in every idle slot, scans once more, and then sleeps in
//! one `futex_waitv` on the request word of every idle slot and on its
//! watcher's generation word (`watch.rs`): a client wakes it with a plain
//! `FUTEX_WAKE` on its request word, and descriptor events (new connections
//! on the port, requests sent over sockets, clients that died) reach it
//! through the watcher thread, which waits in `epoll` on its behalf. Where
//! `futex_waitv` cannot serve (a kernel without it, more idle slots than one
//! call watches, a watcher that stopped), the thread sleeps in `epoll`
//! itself and clients ring a one-byte doorbell on their socket instead; the
//! value of `server_sleeping` tells a client which of the two to use.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::conn::{drain, send_reply, send_reply_parts, Conn};
use super::frame;
use super::policy::{self, Budget, Policy, LIVENESS_INTERVAL, SPINS_PER_CLOCK};
use super::probe;
use super::slot::{self, Slot};
use super::watch::{Watcher, STOP_KEY};
use super::{RpcError, RPC_CONNECT};
use crate::error::{io_err, RecvError};
use crate::message::{Item, Message};
use crate::port::ReceiveRight;
use crate::sys::futex::{self, AnyWord};
use crate::sys::wait::{Epoll, Interest};
use crate::timeout::Timeout;

/// Identifies one connection of an [`RpcServer`]; pass it back with the
/// reply. Ids are unique in the process: another server has no connection
/// of this id (a reply there fails with [`RpcError::PeerDead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(u64);

const PORT_KEY: u64 = 0;

/// The next connection id, for every server of the process: an id names
/// one connection of one server, so a [`ConnId`] given to another server
/// (which numbers its own connections from the same counter) matches none
/// of its connections.
static NEXT_ID: AtomicU64 = AtomicU64::new(PORT_KEY + 1);
/// Most connections accepted per look at the port.
const BATCH: usize = 16;

/// Accepts connections on a port and serves calls on them.
#[derive(Debug)]
pub struct RpcServer {
    port: Option<Arc<Mutex<ReceiveRight>>>,
    epoll: Arc<Epoll>,
    /// Waits in `epoll` while this thread sleeps on futexes.
    watcher: Watcher,
    /// Whether the kernel has `futex_waitv` (cleared at the first `NOSYS`).
    waitv: bool,
    conns: Vec<Conn>,
    /// Connections held per user, shared by the server and its workers.
    held: Arc<Held>,
    policy: Policy,
    next_scan: usize,
    last_look: Instant,
    ready: VecDeque<(ConnId, Message)>,
    buf: Vec<u8>,
    /// The connection whose sleeping client the last reply woke.
    woke: Option<u64>,
    /// This thread's CPU tag, refreshed at each wait (adaptive only).
    cpu: u32,
    /// The CPU tag the client of the last slot reply recorded.
    replied_cpu: u32,
    /// The last wait timed out and left `server_sleeping` set in the idle
    /// slots: this thread is away (perhaps in an event loop watching
    /// `as_fd`), so clients must ring its doorbell.
    away: bool,
    /// The body buffer of the last reply that went through a slot, kept
    /// for the next request copied out of a slot: a server that answers
    /// each request with a new body allocates nothing else per call.
    spare: Vec<u8>,
    /// The mark of the process that made the server (its first server,
    /// for a worker): a child's copy shares the port, the connections and
    /// the `epoll` instance but has no watcher thread, and must not serve.
    made_at: u64,
}

impl RpcServer {
    /// A server accepting connections on `port`, waiting with the default
    /// policy.
    pub fn new(port: ReceiveRight) -> io::Result<RpcServer> {
        let epoll = Epoll::new().map_err(io_err)?;
        epoll.add(port.main_fd(), Interest::Readable, PORT_KEY).map_err(io_err)?;
        let epoll = Arc::new(epoll);
        Ok(RpcServer {
            port: Some(Arc::new(Mutex::new(port))),
            watcher: Watcher::start(epoll.clone())?,
            waitv: true,
            epoll,
            conns: Vec::new(),
            held: Arc::new(Held::default()),
            policy: Policy::default(),
            next_scan: 0,
            last_look: Instant::now(),
            ready: VecDeque::new(),
            buf: vec![0; crate::wire::MAX_MESSAGE + 1],
            woke: None,
            cpu: 0,
            replied_cpu: 0,
            away: false,
            spare: Vec::new(),
            made_at: crate::sys::process::count_forks(),
        })
    }

    /// Another server on the same port, for a pool of threads: every worker
    /// accepts new connections from the shared port and serves the ones it
    /// accepted itself. Give each worker its own thread.
    pub fn worker(&self) -> io::Result<RpcServer> {
        let epoll = Epoll::new().map_err(io_err)?;
        if let Some(p) = &self.port {
            let guard = p.lock().unwrap_or_else(|e| e.into_inner());
            epoll.add(guard.main_fd(), Interest::Readable, PORT_KEY).map_err(io_err)?;
        }
        let epoll = Arc::new(epoll);
        Ok(RpcServer {
            port: self.port.clone(),
            watcher: Watcher::start(epoll.clone())?,
            waitv: true,
            epoll,
            conns: Vec::new(),
            held: self.held.clone(),
            policy: self.policy,
            next_scan: 0,
            last_look: Instant::now(),
            ready: VecDeque::new(),
            buf: vec![0; crate::wire::MAX_MESSAGE + 1],
            woke: None,
            cpu: 0,
            replied_cpu: 0,
            away: false,
            spare: Vec::new(),
            made_at: self.made_at,
        })
    }

    /// How this server thread waits for requests.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Changes how this server thread waits: [`Policy::Adaptive`] spins for
    /// at most [`ADAPTIVE_SPIN`](super::ADAPTIVE_SPIN) after its last request before sleeping,
    /// [`Policy::Poll`] never sleeps, [`Policy::Block`] never spins.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    /// The connection budgets of this server and all its workers.
    pub fn limits(&self) -> RpcLimits {
        self.held.limits()
    }

    /// Changes the connection budgets of this server and all its workers.
    /// Connections already open stay open; the new budgets apply to the
    /// next ones.
    pub fn set_limits(&mut self, limits: RpcLimits) {
        *self.held.limits.lock().unwrap_or_else(|e| e.into_inner()) = limits;
    }

    /// Number of live connections this server (thread) serves.
    pub fn connections(&self) -> usize {
        self.conns.iter().filter(|c| !c.dead).count()
    }

    /// Sends `reply` (if any) to the connection it answers, then waits for
    /// the next request on any connection, as `timeout` allows.
    ///
    /// A reply to a connection that has gone (its client died or broke the
    /// protocol) is dropped: that is not this server's error. Every request
    /// returned must be answered (here or with [`reply`](Self::reply)), or
    /// its connection dropped with [`drop_connection`](Self::drop_connection);
    /// until then no further request is taken from that connection.
    ///
    /// # Errors
    /// [`RpcError::TooLarge`] when the reply could not be carried (larger
    /// than a message can be): nothing was waited for, the client's call
    /// failed with [`RpcError::ReplyTooLarge`], its connection stays open;
    /// call again (with no reply) to go on serving.
    /// [`RpcError::Timeout`] when nothing arrived in time;
    /// [`RpcError::NoClients`] when every send right to the port is gone and
    /// no connection is left; [`RpcError::Io`] when the kernel fails;
    /// [`RpcError::Forked`] in a child forked since the server was made
    /// (nothing is sent or taken: make a server in the child).
    pub fn reply_and_wait(&mut self, reply: Option<(ConnId, Message)>, timeout: Timeout) -> Result<(ConnId, Message), RpcError> {
        self.check_made_here()?;
        if let Some((id, msg)) = reply {
            match self.reply(id, msg) {
                Ok(()) | Err(RpcError::PeerDead) | Err(RpcError::Protocol { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.wait(timeout)
    }

    /// Sends the reply to the request last taken from connection `id`.
    ///
    /// # Errors
    /// [`RpcError::PeerDead`] if the connection is gone (it is forgotten);
    /// [`RpcError::TooLarge`] if the reply cannot travel (a body over
    /// [`crate::message::MAX_INLINE`], too many
    /// descriptors): the client's call fails with
    /// [`RpcError::ReplyTooLarge`] instead of waiting for a reply that cannot
    /// come, and the connection stays open (the rights the reply carried are
    /// dropped); [`RpcError::Io`] if no request of that connection is
    /// waiting for a reply (nothing changes); [`RpcError::Forked`] in a
    /// child forked since the server was made (nothing is sent).
    pub fn reply(&mut self, id: ConnId, msg: Message) -> Result<(), RpcError> {
        self.reply_with(id, |c, seq, via_slot, spare| send_reply(c, seq, via_slot, msg, spare))
    }

    /// As [`reply`](Self::reply), for a reply of inline bytes given in two
    /// pieces that travel as one body (`head`, then `tail`): a reply that
    /// fits the slot is written there from both without joining them
    /// first (the server's half of [`Transport::call_parts`](super::Transport::call_parts)).
    /// Both are left empty; `tail`'s allocation may be exchanged for the
    /// server's buffer for its next request (the larger of the two is
    /// kept for that), so a loop that answers this way, reusing its two
    /// vectors, allocates nothing per call.
    ///
    /// # Errors
    /// As [`reply`](Self::reply).
    pub fn reply_parts(&mut self, id: ConnId, op: u32, head: &mut Vec<u8>, tail: &mut Vec<u8>) -> Result<(), RpcError> {
        self.reply_with(id, |c, seq, via_slot, spare| send_reply_parts(c, seq, via_slot, op, head, tail, spare))
    }

    /// Sends the reply to connection `id`'s request with `send`, keeping
    /// the books of [`reply`](Self::reply).
    fn reply_with(&mut self, id: ConnId, send: impl FnOnce(&mut Conn, u32, bool, &mut Vec<u8>) -> Result<bool, RpcError>) -> Result<(), RpcError> {
        self.check_made_here()?;
        let Some(i) = self.conns.iter().position(|c| c.id == id.0 && !c.dead) else {
            return Err(RpcError::PeerDead);
        };
        let c = &mut self.conns[i];
        let Some((seq, via_slot)) = c.busy.take() else {
            return Err(RpcError::Io(io::Error::new(io::ErrorKind::InvalidInput, "no request is waiting for a reply on this connection")));
        };
        self.replied_cpu = c.slot.as_ref().map_or(0, |s| s.word(slot::OFF_CLIENT_CPU).load(Ordering::Relaxed));
        if self.away {
            // Replying outside a wait: this connection turns idle while the
            // thread is away, so its client must ring for its next call.
            // Marked before the reply is published, so that call sees it.
            if let Some(s) = &c.slot {
                s.word(slot::OFF_SERVER_SLEEPING).store(1, Ordering::SeqCst);
            }
        }
        let out = send(c, seq, via_slot, &mut self.spare);
        if let Ok(true) = out {
            self.woke = Some(id.0);
        }
        let out = out.map(|_| ());
        if out.is_err() && !matches!(out, Err(RpcError::TooLarge(_))) {
            // The client waits for this reply and no other can come: close
            // the connection so its call fails instead of hanging.
            c.dead = true;
            self.reap();
        }
        out
    }

    /// Closes connection `id` (its client's calls fail with
    /// [`RpcError::PeerDead`]). Does nothing in a child forked since the
    /// server was made: the connection is the parent's.
    pub fn drop_connection(&mut self, id: ConnId) {
        if self.check_made_here().is_err() {
            return;
        }
        if let Some(c) = self.conns.iter_mut().find(|c| c.id == id.0) {
            c.dead = true;
        }
        self.reap();
    }

    /// `Forked` in a child forked since the server was made (two atomic
    /// loads, no system call): its copy shares the port, the connections and the `epoll`
    /// instance with the parent's server, whose requests and replies it
    /// would take, and has no watcher thread to wake it.
    fn check_made_here(&self) -> Result<(), RpcError> {
        if self.made_at != crate::sys::process::forks() {
            return Err(RpcError::Forked);
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Timeout) -> Result<(ConnId, Message), RpcError> {
        if std::mem::take(&mut self.away) {
            self.set_sleeping(0);
        }
        let deadline = timeout.deadline();
        let mut looked = false;
        let mut spins = 0u32;
        let waking = self.woke.take();
        let mut budget = (self.policy == Policy::Adaptive).then(|| Budget::new(waking.is_some()));
        // The client just answered runs on this CPU: it can make its next
        // call only once this thread gives the CPU up, so do not spin.
        let peer_cpu = std::mem::take(&mut self.replied_cpu);
        if self.policy == Policy::Adaptive {
            self.cpu = policy::cpu_tag();
        }
        let beside_peer = policy::same_cpu(self.cpu, peer_cpu);
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Ok(r);
            }
            if let Some(r) = self.scan() {
                return Ok(r);
            }
            if self.port.is_none() && self.conns.is_empty() {
                return Err(RpcError::NoClients);
            }
            // The clock is read on the first pass, after each sleep and every
            // SPINS_PER_CLOCK spins: a spinning server notices a request one
            // clock read sooner.
            let now = spins.is_multiple_of(SPINS_PER_CLOCK).then(Instant::now);
            // Housekeeping is due at once when the watcher reports
            // descriptor events, and every LIVENESS_INTERVAL while spinning
            // (a thread that sleeps looks when it sleeps, or is told).
            let now_due = self.watcher.shared().pending()
                || (self.policy != Policy::Block && now.is_some_and(|n| n.duration_since(self.last_look) >= LIVENESS_INTERVAL));
            let spin = match self.policy {
                Policy::Poll => true,
                Policy::Block => false,
                Policy::Adaptive => !beside_peer && budget.as_mut().is_some_and(|b| b.spin(waking.is_some_and(|id| self.client_asleep(id)))),
            };
            let expired = deadline.is_some_and(|d| now.is_some_and(|n| n >= d));
            if now_due || (expired && !looked) {
                // Housekeeping while busy, or the one look at the sockets
                // that even a zero timeout gets.
                looked = true;
                spins = 0;
                self.look(Some(Instant::now()))?;
                continue;
            }
            if expired {
                return self.go_away();
            }
            if spin {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                continue;
            }
            spins = 0;
            self.sleep(deadline)?;
            looked = true;
        }
    }

    /// Advertises sleep in every idle slot, scans once more, then sleeps
    /// until a request, a descriptor event or the deadline: on futexes when
    /// it can, else in `epoll`.
    fn sleep(&mut self, deadline: Option<std::time::Instant>) -> Result<(), RpcError> {
        let watch = self.watcher.shared();
        let gen = watch.gen.load(Ordering::SeqCst);
        let idle = self.idle_slots().count();
        let on_futex = self.waitv && watch.running() && idle < futex::WAIT_ANY_MAX;
        if on_futex && gen != watch.acked() {
            // Events already reported: look instead of sleeping.
            return self.look(Some(Instant::now()));
        }
        let how = if on_futex { slot::SLEEPING_FUTEX } else { slot::SLEEPING_DOORBELL };
        self.set_sleeping(how);
        if let Some(r) = self.scan() {
            self.set_sleeping(0);
            self.ready.push_back(r);
            return Ok(());
        }
        let out = if on_futex { self.sleep_on_futexes(gen, deadline) } else { self.look(deadline) };
        self.set_sleeping(0);
        out
    }

    /// Gives up waiting: advertises sleep in every idle slot, exactly as
    /// before sleeping in `epoll`, scans once more, and returns the timeout
    /// with the flags left set. Until the next wait the thread is away, and
    /// a client publishing a request must ring the doorbell, which makes
    /// `as_fd` readable; without the flags an event loop watching it would
    /// never hear of requests made through the slot.
    fn go_away(&mut self) -> Result<(ConnId, Message), RpcError> {
        self.set_sleeping(1);
        if let Some(r) = self.scan() {
            self.set_sleeping(0);
            return Ok(r);
        }
        self.away = true;
        Err(RpcError::Timeout)
    }

    /// Sleeps until a request or a descriptor event (or the deadline).
    ///
    /// With one idle slot (one client, the case where a call's latency is
    /// the whole story) the thread sleeps with a plain `FUTEX_WAIT` on that
    /// slot's request word, and the watcher, which shares the slot while
    /// the thread sleeps, wakes the same word for descriptor events: a
    /// multi-word `futex_waitv` costs about half a microsecond more per
    /// sleep (`docs/rpc.md`). With more, one `futex_waitv` on the watcher's
    /// generation (still `gen`) and on the request word of every idle slot
    /// (still the last request taken). Either way a client that changes its
    /// word at any time only wakes this thread, which then scans; it cannot
    /// keep others' requests from being seen.
    fn sleep_on_futexes(&mut self, gen: u32, deadline: Option<Instant>) -> Result<(), RpcError> {
        let one = {
            let mut idle = self.idle_slots();
            match (idle.next(), idle.next()) {
                (Some((only, slot)), None) => Some((slot.clone(), only.last_req)),
                _ => None,
            }
        };
        if let Some((slot, expected)) = one {
            return self.sleep_on_one(slot, expected, gen, deadline);
        }
        let watch = self.watcher.shared();
        let gen_word = AnyWord { word: &watch.gen, expected: gen, private: true };
        let slots = self.idle_slots().map(|(c, s)| AnyWord { word: s.word(slot::OFF_REQ_SEQ), expected: c.last_req, private: false });
        let words = std::iter::once(gen_word).chain(slots);
        policy::count_futex_wait();
        match futex::wait_any(words, deadline) {
            Ok(_) => Ok(()),
            Err(rustix::io::Errno::NOSYS) => {
                // No futex_waitv here: sleep in epoll from now on.
                self.waitv = false;
                Ok(())
            }
            Err(e) => Err(RpcError::Io(io_err(e))),
        }
    }

    /// The one-slot sleep of [`sleep_on_futexes`](Self::sleep_on_futexes):
    /// hands the watcher the slot, checks the generation once more (the
    /// watcher bumps it before it looks for a sleeper, the lock orders the
    /// two), and waits while the request word still holds `expected`.
    fn sleep_on_one(&self, slot: Arc<Slot>, expected: u32, gen: u32, deadline: Option<Instant>) -> Result<(), RpcError> {
        let watch = self.watcher.shared();
        watch.set_sleeper(Some(slot.clone()));
        let out = if watch.gen.load(Ordering::SeqCst) != gen || !watch.running() {
            Ok(())
        } else {
            let timeout = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => {
                        watch.set_sleeper(None);
                        return Ok(());
                    }
                },
                None => None,
            };
            policy::count_futex_wait();
            futex::wait(slot.word(slot::OFF_REQ_SEQ), expected, timeout).map(|_| ()).map_err(|e| RpcError::Io(io_err(e)))
        };
        watch.set_sleeper(None);
        out
    }

    /// The live connections with a slot and no request in service: the
    /// ones whose request words a sleeping thread waits on.
    fn idle_slots(&self) -> impl Iterator<Item = (&Conn, &Arc<Slot>)> {
        self.conns.iter().filter(|c| !c.dead && c.busy.is_none()).filter_map(|c| c.slot.as_ref().map(|s| (c, s)))
    }

    /// Whether the client of connection `id` still sleeps (false once it is
    /// gone).
    fn client_asleep(&self, id: u64) -> bool {
        self.conns.iter().find(|c| c.id == id).is_some_and(Conn::client_asleep)
    }

    /// Sets `server_sleeping` in the slots: to 1 in the idle ones (a client
    /// waiting for its reply will not call), back to 0 in all of them. A
    /// connection whose request the last scan took is busy by the time the
    /// flag is cleared, and a flag left at 1 there would make its client
    /// ring a doorbell on every call while this thread spins.
    fn set_sleeping(&self, v: u32) {
        for c in &self.conns {
            if let Some(s) = &c.slot {
                if v == 0 || c.busy.is_none() {
                    s.word(slot::OFF_SERVER_SLEEPING).store(v, Ordering::SeqCst);
                }
            }
        }
    }

    /// One pass over the idle connections, round-robin: a pending socket
    /// request in the slot, or a request that came over the socket. A slot
    /// holding garbage costs its connection, nothing else.
    fn scan(&mut self) -> Option<(ConnId, Message)> {
        let n = self.conns.len();
        let cpu = self.cpu;
        let mut found = None;
        // Round-robin from `next_scan`, without a division per pass (this
        // loop is what a spinning server runs between requests).
        let start = if self.next_scan < n { self.next_scan } else { 0 };
        for k in 0..n {
            let i = if start + k < n { start + k } else { start + k - n };
            let c = &mut self.conns[i];
            if c.dead || c.busy.is_some() {
                continue;
            }
            if let Some(slot) = &c.slot {
                let seq = slot.request_seq();
                if seq != c.last_req {
                    c.last_req = seq;
                    match slot.take_request(seq, std::mem::take(&mut self.spare)) {
                        Ok(Some(req)) => {
                            probe::server_stamp(slot, 0);
                            slot.word(slot::OFF_SERVER_CPU).store(cpu, Ordering::Relaxed);
                            c.busy = Some((seq, true));
                            found = Some((i, Message::new(req.op).with_body(req.body).with_sender(c.client)));
                            break;
                        }
                        Ok(None) => {}
                        Err(_garbage) => {
                            c.dead = true;
                            continue;
                        }
                    }
                }
                let sock_seq = slot.word(slot::OFF_REQ_SOCK).load(Ordering::Relaxed);
                if sock_seq != c.last_sock {
                    c.last_sock = sock_seq;
                    drain(c, &mut self.buf, false);
                }
            }
            if let Some((seq, m)) = c.pending.take() {
                c.busy = Some((seq, false));
                found = Some((i, m));
                break;
            }
        }
        let r = found.map(|(i, m)| {
            self.next_scan = i + 1;
            (ConnId(self.conns[i].id), m)
        });
        self.reap();
        r
    }

    /// Waits in `epoll` until `deadline` (now: just look) and handles what
    /// it reports: new connections, socket traffic, hang-ups. Then
    /// acknowledges the watcher's reports up to the generation read first.
    fn look(&mut self, deadline: Option<Instant>) -> Result<(), RpcError> {
        let gen = self.watcher.shared().gen.load(Ordering::Acquire);
        policy::count_poll();
        let events = self.epoll.wait(64, deadline).map_err(|e| RpcError::Io(io_err(e)))?;
        self.last_look = Instant::now();
        for (key, _ready) in events {
            if key == STOP_KEY {
                continue;
            }
            if key == PORT_KEY {
                self.accept_all();
            } else if let Some(c) = self.conns.iter_mut().find(|c| c.id == key) {
                drain(c, &mut self.buf, true);
            }
        }
        self.reap();
        self.watcher.shared().ack(gen);
        Ok(())
    }

    /// Accepts the connection requests queued at the port. Other messages
    /// sent to the port are discarded (their rights closed).
    fn accept_all(&mut self) {
        let Some(port) = self.port.clone() else { return };
        for _ in 0..BATCH {
            let got = port.lock().unwrap_or_else(|e| e.into_inner()).recv(Timeout::Zero);
            match got {
                Ok(mut m) if m.op() == RPC_CONNECT && m.items().len() == 1 => {
                    // The kernel's word on who sent the request; a message
                    // without credentials is charged to a user of its own.
                    let client = m.sender();
                    if let Some(Item::Send(s)) = m.take_items().pop() {
                        self.accept(s.sock, client);
                    }
                }
                Ok(_) | Err(RecvError::BadMessage(_)) | Err(RecvError::SendOnceDropped) => {}
                Err(RecvError::Timeout) => return,
                Err(RecvError::NoSenders) | Err(RecvError::Io(_)) => {
                    // Nothing can arrive any more: stop watching the port.
                    let guard = port.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = self.epoll.remove(guard.main_fd());
                    drop(guard);
                    self.port = None;
                    return;
                }
            }
        }
    }

    /// Checks a new connection's handshake and slot; on any fault the
    /// socket is closed, which the client sees as a refusal. A user over
    /// its budget (or a server at its total) is told so before the close.
    /// `client`: the kernel's credentials on the connect request; a request
    /// without them is charged to a user of its own.
    fn accept(&mut self, sock: OwnedFd, client: Option<crate::message::Credentials>) {
        let uid = client.map_or(u32::MAX, |c| c.uid);
        let Ok(hello) = frame::recv_hello(sock.as_fd()) else { return };
        // The hello is read first: closing a socket with a datagram unread
        // resets the connection, and the client would lose the refusal.
        let held = match Held::take(&self.held, uid) {
            Ok(h) => h,
            Err(status) => {
                crate::trace::event!(warn, uid, status, "rpc connection refused: over its connection budget");
                let _ = frame::send_refusal(sock.as_fd(), status);
                return;
            }
        };
        let slot = match hello.slot.map(Slot::open).transpose() {
            Ok(s) => s.map(Arc::new),
            Err(_) => return,
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if frame::send_ack(sock.as_fd()).is_err() || self.epoll.add(sock.as_fd(), Interest::Readable, id).is_err() {
            return;
        }
        // Sequence numbers start at 0 and a client's first call is 1; the
        // client may already have published it, since it saw the ack.
        let identity = frame::identity_of(&sock);
        self.conns.push(Conn { id, sock, identity, client, slot, last_req: 0, last_sock: 0, busy: None, pending: None, dead: false, _open: crate::counters::ConnectionGauge::open(), _held: held });
    }

    /// Forgets dead connections (closing their sockets and unmapping their
    /// slots).
    fn reap(&mut self) {
        if self.conns.iter().any(|c| c.dead) {
            for c in self.conns.iter().filter(|c| c.dead) {
                crate::trace::event!(info, conn = c.id, "rpc connection closed: the client is gone or broke the protocol");
                let _ = self.epoll.remove(c.sock.as_fd());
            }
            self.conns.retain(|c| !c.dead);
            self.next_scan = 0;
        }
    }
}

impl AsFd for RpcServer {
    /// The server thread's `epoll` instance (its port and every connection
    /// socket), so a server fits any event loop as one descriptor.
    ///
    /// **Readable means: call
    /// [`reply_and_wait`](RpcServer::reply_and_wait)`(reply, Timeout::Zero)`
    /// now**, and keep calling it (answering what it returns) until it
    /// returns [`RpcError::Timeout`]. A wait that times out leaves the
    /// server marked asleep in its idle slots, so every client that calls
    /// while the thread is away rings the connection's doorbell and makes
    /// this descriptor readable (a connection answered with
    /// [`reply`](RpcServer::reply) while the thread is away is marked too);
    /// the next wait clears the marks. Never read
    /// from the descriptor or change its registrations yourself.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

/// How many connections an [`RpcServer`] (with all its workers) holds open
/// at once: per user, so that one local user opening connections in a loop
/// cannot take a shared service from the others, and in all, so that the
/// server keeps descriptors for its own work.
///
/// A client over a budget is refused at connect
/// ([`RpcError::Refused`](super::RpcError::Refused), saying which budget);
/// connections already open are never closed for it. The defaults suit a
/// service shared by the users of one machine: raise them with
/// [`RpcServer::set_limits`] for a server expecting more clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpcLimits {
    /// Connections one user (by the kernel's credentials on the connect
    /// request) may hold open. Default 256.
    pub connections_per_user: usize,
    /// Connections the server may hold open in all. Default 4096.
    pub connections: usize,
}

impl Default for RpcLimits {
    fn default() -> RpcLimits {
        RpcLimits { connections_per_user: 256, connections: 4096 }
    }
}

/// The connections held open per user by a server and its workers.
#[derive(Debug, Default)]
struct Held {
    limits: Mutex<RpcLimits>,
    /// Open connections by user, and in all.
    count: Mutex<(std::collections::HashMap<u32, usize>, usize)>,
}

impl Held {
    fn limits(&self) -> RpcLimits {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one more connection of `uid`, or the refusal status when a
    /// budget is spent.
    fn take(this: &Arc<Held>, uid: u32) -> Result<HeldConn, u32> {
        let limits = this.limits();
        let mut guard = this.count.lock().unwrap_or_else(|e| e.into_inner());
        let (by_user, total) = &mut *guard;
        if *total >= limits.connections {
            return Err(frame::REFUSED_SERVER_FULL);
        }
        let mine = by_user.entry(uid).or_insert(0);
        if *mine >= limits.connections_per_user {
            return Err(frame::REFUSED_USER_BUDGET);
        }
        *mine += 1;
        *total += 1;
        Ok(HeldConn { held: this.clone(), uid })
    }
}

/// One connection counted in its server's [`Held`]; uncounted when dropped
/// with the connection.
#[derive(Debug)]
pub(super) struct HeldConn {
    held: Arc<Held>,
    uid: u32,
}

impl Drop for HeldConn {
    fn drop(&mut self) {
        let mut guard = self.held.count.lock().unwrap_or_else(|e| e.into_inner());
        let (by_user, total) = &mut *guard;
        *total = total.saturating_sub(1);
        if let Some(n) = by_user.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                by_user.remove(&self.uid);
            }
        }
    }
}
