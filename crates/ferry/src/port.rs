//! Ports and the rights that name them.
//!
//! A port is a kernel `SOCK_SEQPACKET` socket pair. The **receive right** owns
//! one end; every **send right** is a descriptor for the other end, so the
//! kernel itself enforces who may send and tells both sides when the other
//! is gone: when the last send right closes, the receive end reads
//! end-of-file (no-senders); when the receive right closes, send rights see a
//! hang-up (dead name). Rights exist only as descriptors the kernel passed, so
//! they cannot be forged.
//!
//! A **send-once right** is its own tiny socket pair whose receiving end the
//! receive right keeps beside its main socket: exactly one message can come
//! through it, after which the receiver closes that end, and if the right is
//! destroyed unused the receiver learns so ([`RecvError::SendOnceDropped`]).
//!
//! The queue of a port is bounded in bytes by the kernel's send buffer of the
//! socket that all send rights share; see [`SendRight::set_queue_limit`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::error::{io_err, RecvError, SendError, SendFailed};
use crate::message::Message;
use crate::sys::socket;
use crate::sys::wait::{self, Epoll, Interest};
use crate::timeout::Timeout;

/// Options for a new port.
#[derive(Clone, Copy, Debug, Default)]
pub struct PortOptions {
    /// Bound on queued bytes as the kernel counts them (each message costs
    /// its size plus roughly 700 bytes of bookkeeping). `None` keeps the
    /// system default (`net.core.wmem_default`, about 200 KiB: some 270
    /// small messages).
    pub queue_limit: Option<usize>,
}

/// Creates a port with default options and returns its receive right and a
/// first send right. More send rights are made with [`SendRight::try_clone`].
pub fn port() -> io::Result<(ReceiveRight, SendRight)> {
    port_with(PortOptions::default())
}

/// Creates a port with the given options.
pub fn port_with(opts: PortOptions) -> io::Result<(ReceiveRight, SendRight)> {
    crate::counters::publish();
    let (rx, tx) = socket::seqpacket_pair().map_err(io_err)?;
    if let Some(n) = opts.queue_limit {
        socket::set_send_buffer(tx.as_fd(), n).map_err(io_err)?;
    }
    let mut rx = ReceiveRight::from_parts(rx, Vec::new()).map_err(io_err)?;
    rx.timer = SocketTimer::Own(None);
    Ok((rx, SendRight { sock: tx }))
}

/// The right to receive from a port. There is exactly one per port; it can
/// be moved to another process inside a message.
#[derive(Debug)]
pub struct ReceiveRight {
    sock: OwnedFd,
    /// The receiving ends of the outstanding send-once rights, in the
    /// order they came.
    once: Vec<OwnedFd>,
    /// Send-once sockets this right has held, counted as they came (made
    /// here, or brought along when the right arrived in a message): the
    /// last `once_made - n` of `once` include every one that came after
    /// the first `n`.
    once_made: u64,
    identity: (u64, u64),
    /// Every send right is gone; only send-once rights can still deliver.
    senders_gone: bool,
    /// Bumped whenever the set of descriptors to wait on changes.
    generation: u64,
    /// The `epoll` instance behind [`AsFd`], made on first use and kept
    /// watching exactly [`sources`](Self::sources).
    ready: OnceLock<Epoll>,
    /// Whether a timed receive may wait under the socket's own timer.
    timer: SocketTimer,
}

/// Whether a timed receive on a port's socket may block in `recvmsg(2)`
/// under the socket's own receive timer (`SO_RCVTIMEO`), one system call,
/// instead of waiting in `ppoll(2)` and then receiving, two. Both wake the
/// same way; the poll costs its own call and its wait-queue and timer
/// set-up (about 1–1.3 µs per receive on the development machine).
#[derive(Debug)]
enum SocketTimer {
    /// The socket came from another process, which may still hold a
    /// descriptor of it and change its timer (so that a wait would not end
    /// in time): timed receives poll.
    Foreign,
    /// This process made the socket and no other ever held it; the receive
    /// timer this process last set on it, if any.
    Own(Option<Duration>),
}

/// Shortest timeout that waits under the socket's timer. The kernel rounds
/// that timer up to whole clock ticks (4 ms here, 10 ms at 100 Hz) and
/// fires it up to 8/63 of the wait late, so it is set short of the deadline
/// ([`SocketTimer::bound`]) and the rest is waited out precisely; below
/// this, that rest would be most of the wait.
const SOCKET_TIMER_FROM: Duration = Duration::from_millis(100);

impl SocketTimer {
    /// What to set the socket's timer to for a wait of `wait`: late as the
    /// kernel may fire it, it fires before the deadline (7/8 of the wait,
    /// less two ticks at 100 Hz, plus 8/63 of that, plus two ticks, is
    /// under the wait for any wait of at least [`SOCKET_TIMER_FROM`]).
    fn bound(wait: Duration) -> Duration {
        wait - wait / 8 - Duration::from_millis(20)
    }

    /// Waits up to about `wait` for a datagram on `sock` under its own
    /// timer. `Ok(None)` when this socket or wait does not take the timer,
    /// or the timer ended the wait (or a signal did): the caller waits out
    /// what is left of its deadline precisely.
    fn wait(&mut self, sock: BorrowedFd<'_>, buf: &mut [u8], wait: Duration) -> rustix::io::Result<Option<socket::Datagram>> {
        let SocketTimer::Own(set) = self else { return Ok(None) };
        if wait < SOCKET_TIMER_FROM {
            return Ok(None);
        }
        let bound = SocketTimer::bound(wait);
        if *set != Some(bound) {
            if socket::set_recv_timeout(sock, Some(bound)).is_err() {
                return Ok(None);
            }
            *set = Some(bound);
        }
        match socket::recv(sock, buf, true) {
            Ok(dg) => Ok(Some(dg)),
            Err(Errno::AGAIN) | Err(Errno::INTR) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

thread_local! {
    /// One receive buffer per thread, large enough for any valid message
    /// plus one byte (to detect oversized datagrams); messages copy their
    /// inline bytes out of it, so ports need no buffer of their own.
    static RECV_BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; crate::wire::MAX_MESSAGE + 1]);
}

/// Runs `f` with this thread's receive buffer, or with a buffer of its own
/// where the thread's is out of reach: torn down (a receive from an
/// `atexit` handler or a thread-local destructor) or in use further up
/// this thread's stack.
pub(crate) fn with_buf<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut f = Some(f);
    let kept = RECV_BUF.try_with(|b| b.try_borrow_mut().ok().map(|mut buf| f.take().map(|f| f(&mut buf))));
    match (kept, f) {
        (Ok(Some(Some(r))), _) => r,
        (_, Some(f)) => f(&mut vec![0; crate::wire::MAX_MESSAGE + 1]),
        (_, None) => unreachable!("the closure ran, so it returned"),
    }
}

impl ReceiveRight {
    pub(crate) fn from_parts(sock: OwnedFd, once: Vec<OwnedFd>) -> rustix::io::Result<Self> {
        let identity = socket::identity(sock.as_fd())?;
        Ok(ReceiveRight::from_checked(sock, once, identity))
    }

    /// Builds a receive right from descriptors already checked to be port
    /// sockets, whose identity is known. Cannot fail.
    pub(crate) fn from_checked(sock: OwnedFd, once: Vec<OwnedFd>, identity: (u64, u64)) -> Self {
        let once_made = once.len() as u64;
        ReceiveRight { sock, once, once_made, identity, senders_gone: false, generation: 0, ready: OnceLock::new(), timer: SocketTimer::Foreign }
    }

    /// Every descriptor that makes up this right, main socket first, for
    /// moving it inside a message.
    pub(crate) fn sources_all(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        std::iter::once(self.sock.as_fd()).chain(self.once_fds())
    }

    /// The receiving ends of the outstanding send-once rights.
    pub(crate) fn once_fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.once.iter().map(|f| f.as_fd())
    }

    /// How many send-once sockets this right has held so far (see
    /// [`newest_once_fds`](Self::newest_once_fds)).
    pub(crate) fn once_made(&self) -> u64 {
        self.once_made
    }

    /// The receiving ends of the `n` newest outstanding send-once rights
    /// (all of them if fewer): with `n` = `once_made()` now less its value
    /// earlier, every one that came since, and perhaps some older.
    pub(crate) fn newest_once_fds(&self, n: u64) -> impl Iterator<Item = BorrowedFd<'_>> {
        let n = usize::try_from(n).unwrap_or(usize::MAX).min(self.once.len());
        self.once[self.once.len() - n..].iter().map(|f| f.as_fd())
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Receives the next message, waiting as `timeout` allows.
    ///
    /// # Errors
    /// [`RecvError::Timeout`] when nothing arrived in time;
    /// [`RecvError::NoSenders`] when every send right is gone and no send-once
    /// right is outstanding, so nothing can ever arrive;
    /// [`RecvError::SendOnceDropped`] when an outstanding send-once right was
    /// destroyed unused; [`RecvError::BadMessage`] when a malformed message
    /// arrived (it is discarded, its descriptors closed, and the port stays
    /// usable).
    ///
    /// ```
    /// let (mut rx, tx) = ferry::port().unwrap();
    /// tx.send(ferry::Message::new(7).with_body(*b"hello"), ferry::Timeout::Infinite).unwrap();
    /// let m = rx.recv(ferry::Timeout::Infinite).unwrap();
    /// assert_eq!((m.op(), m.body()), (7, &b"hello"[..]));
    /// ```
    pub fn recv(&mut self, timeout: Timeout) -> Result<Message, RecvError> {
        // The deadline of the wait over several sockets below; the one
        // socket's fast path keeps `timeout` itself, and a receive that
        // never waits has no deadline: neither reads the clock.
        let deadline = if self.once.is_empty() || matches!(timeout, Timeout::Zero) { None } else { timeout.deadline() };
        loop {
            if self.once.is_empty() {
                if self.senders_gone {
                    return Err(RecvError::NoSenders);
                }
                // Fast path: one socket, let the kernel block for us.
                let (sock, identity, timer) = (self.sock.as_fd(), self.identity, &mut self.timer);
                return match with_buf(|buf| recv_timed(sock, buf, identity, timeout, timer, false))? {
                    Some(m) => Ok(m),
                    None => {
                        self.mark_senders_gone();
                        Err(RecvError::NoSenders)
                    }
                };
            }
            let (got, reported) = self.try_recv_pass();
            if let Some(r) = got {
                return r;
            }
            if matches!(timeout, Timeout::Zero) || past(deadline) {
                return Err(RecvError::Timeout);
            }
            let woken = match self.ready.get() {
                // The instance the pass asked: waiting in it costs the same
                // however many sources there are.
                Some(ep) if reported => ep.wait(1, deadline).map(|ev| !ev.is_empty()),
                _ => {
                    let fds: Vec<(BorrowedFd<'_>, Interest)> = self.sources().map(|f| (f, Interest::Readable)).collect();
                    wait::poll_many(&fds, deadline).map(|ready| ready.iter().any(|r| r.any()))
                }
            };
            if !woken.map_err(|e| RecvError::Io(io_err(e)))? {
                return Err(RecvError::Timeout);
            }
        }
    }

    /// Receives a message if one is queued now.
    pub fn try_recv(&mut self) -> Result<Message, RecvError> {
        self.recv(Timeout::Zero)
    }

    /// One non-blocking pass over every source; `None` when none had anything.
    pub(crate) fn try_recv_any(&mut self) -> Option<Result<Message, RecvError>> {
        self.try_recv_pass().0
    }

    /// [`try_recv_any`](Self::try_recv_any), and whether the pass went by
    /// what the right's `epoll` instance reported (so that waiting in it
    /// is sound). With more than [`SCAN_ONCE_MAX`] send-once rights
    /// outstanding, the instance says which sources have anything and only
    /// those are read; otherwise, or when it cannot be had or names a
    /// source this right no longer holds, every source is tried in turn.
    fn try_recv_pass(&mut self) -> (Option<Result<Message, RecvError>>, bool) {
        if self.once.len() > SCAN_ONCE_MAX {
            if let Some(got) = self.try_recv_reported() {
                return (got, true);
            }
        }
        (self.try_recv_scan(), false)
    }

    /// The pass of [`try_recv_pass`](Self::try_recv_pass) that asks the
    /// `epoll` instance (made now if need be) which sources are readable:
    /// a receive then costs the same however many send-once rights are
    /// outstanding, where trying each was one `recvmsg(2)` per right (a
    /// millisecond per message with a thousand outstanding). `None` when
    /// the instance cannot be had, or reports a source this right no
    /// longer holds (or one with nothing to read): a send-once socket it
    /// closed while another process (a child after `fork`) kept a copy
    /// stays registered, perhaps under a descriptor number now reused, and
    /// only a scan and `poll` are sure not to spin on it.
    fn try_recv_reported(&mut self) -> Option<Option<Result<Message, RecvError>>> {
        self.readiness_fd().ok()?;
        let events = self.ready.get()?.wait_now(SCAN_ONCE_MAX).ok()?;
        let mut main = false;
        let mut stale = false;
        for (key, _) in events {
            if key == MAIN_KEY {
                main = true;
                continue;
            }
            // A reported socket with nothing to read is another's entry
            // under a reused descriptor number.
            match self.once.iter().position(|f| source_key(f.as_fd()) == key).and_then(|i| self.recv_once(i)) {
                Some(r) => return Some(Some(r)),
                None => stale = true,
            }
        }
        if main && !self.senders_gone {
            if let Some(r) = self.recv_main(false) {
                return Some(Some(r));
            }
        }
        if stale {
            return None;
        }
        Some(None)
    }

    /// The pass of [`try_recv_pass`](Self::try_recv_pass) that tries every
    /// source in turn.
    fn try_recv_scan(&mut self) -> Option<Result<Message, RecvError>> {
        let mut i = 0;
        while i < self.once.len() {
            match self.recv_once(i) {
                Some(r) => return Some(r),
                None => i += 1,
            }
        }
        if !self.senders_gone {
            if let Some(r) = self.recv_main(false) {
                return Some(r);
            }
        }
        if self.once.is_empty() && self.senders_gone {
            return Some(Err(RecvError::NoSenders));
        }
        None
    }

    /// Receives from the main socket; `None` when nothing is queued.
    fn recv_main(&mut self, wait: bool) -> Option<Result<Message, RecvError>> {
        let got = with_buf(|buf| match socket::recv(self.sock.as_fd(), buf, wait) {
            Ok(dg) if dg.is_eof() => Some(None),
            Ok(dg) => Some(Some(Message::from_datagram(buf, dg, self.identity, false).map_err(RecvError::from))),
            Err(Errno::AGAIN) | Err(Errno::INTR) => None,
            Err(e) => Some(Some(Err(RecvError::Io(io_err(e))))),
        })?;
        match got {
            Some(r) => Some(r),
            None => {
                // End-of-file: every send right is gone.
                self.mark_senders_gone();
                self.once.is_empty().then_some(Err(RecvError::NoSenders))
            }
        }
    }

    /// Receives from send-once socket `i`, closing it after one message or
    /// end-of-file; `None` when it has nothing yet.
    fn recv_once(&mut self, i: usize) -> Option<Result<Message, RecvError>> {
        let sock = self.once[i].as_fd();
        let identity = self.identity;
        let got = with_buf(|buf| match socket::recv(sock, buf, false) {
            Ok(dg) if dg.is_eof() => Some(Err(RecvError::SendOnceDropped)),
            Ok(dg) => Some(Message::from_datagram(buf, dg, identity, true).map_err(RecvError::from)),
            Err(Errno::AGAIN) | Err(Errno::INTR) => None,
            Err(e) => Some(Err(RecvError::Io(io_err(e)))),
        })?;
        // One message or end-of-file: either way this right is used up.
        // Removed in place, keeping the rest in the order they came.
        drop(self.once.remove(i));
        self.generation += 1;
        Some(got)
    }

    /// Makes a send-once right to this port: whoever holds it can send exactly
    /// one message here (typically a reply). If it is destroyed unused, this
    /// port's [`recv`](Self::recv) reports [`RecvError::SendOnceDropped`].
    pub fn make_send_once(&mut self) -> io::Result<SendOnceRight> {
        let (rx, tx) = socket::seqpacket_pair().map_err(io_err)?;
        if let Some(ep) = self.ready.get() {
            ep.add(rx.as_fd(), Interest::Readable, source_key(rx.as_fd())).map_err(io_err)?;
        }
        self.once.push(rx);
        self.once_made += 1;
        self.generation += 1;
        Ok(SendOnceRight { sock: tx })
    }

    /// Number of send-once rights made here and not yet used or destroyed.
    pub fn send_once_outstanding(&self) -> usize {
        self.once.len()
    }

    /// Whether every send right is known to be gone (send-once rights may
    /// still deliver).
    pub fn senders_gone(&self) -> bool {
        self.senders_gone
    }

    /// Descriptors anything can still arrive on: the main socket while send
    /// rights exist, and every outstanding send-once socket.
    fn sources(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        (!self.senders_gone).then(|| self.sock.as_fd()).into_iter().chain(self.once_fds())
    }

    pub(crate) fn main_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Records that every send right is gone. The main socket now reads
    /// end-of-file for ever, so the readiness descriptor stops watching it
    /// (else it would stay readable with nothing to receive).
    fn mark_senders_gone(&mut self) {
        crate::trace::event!(debug, "no senders: every send right to the port is gone");
        self.senders_gone = true;
        self.generation += 1;
        if let Some(ep) = self.ready.get() {
            let _ = ep.remove(self.sock.as_fd());
        }
    }

    /// The descriptor an event loop should watch for this right, made on
    /// first use; see the [`AsFd`] implementation for what it means. Unlike
    /// [`as_fd`](AsFd::as_fd) this reports the kernel's refusal (out of
    /// descriptors) as an error.
    pub fn readiness_fd(&self) -> io::Result<BorrowedFd<'_>> {
        if let Some(ep) = self.ready.get() {
            return Ok(ep.as_fd());
        }
        let ep = Epoll::new().map_err(io_err)?;
        if !self.senders_gone {
            ep.add(self.sock.as_fd(), Interest::Readable, MAIN_KEY).map_err(io_err)?;
        }
        for fd in self.once_fds() {
            ep.add(fd, Interest::Readable, source_key(fd)).map_err(io_err)?;
        }
        // Two threads may race to make it: one wins, the other's is closed.
        Ok(self.ready.get_or_init(|| ep).as_fd())
    }
}

impl AsFd for ReceiveRight {
    /// One descriptor that stands for everything this right receives on
    /// (its main socket and the receiving end of every outstanding
    /// send-once right), so the right fits any event loop (`epoll`, `mio`,
    /// tokio's `AsyncFd`, `poll`).
    ///
    /// **Readable means: call [`try_recv`](ReceiveRight::try_recv) (or
    /// `recv(Timeout::Zero)`) now** — a message, a no-senders or
    /// send-once-dropped notification, or a malformed message's error is
    /// waiting. Call it until it returns [`RecvError::Timeout`]; only then
    /// is the descriptor quiet again. It is an `epoll` instance the right
    /// keeps up to date as send-once rights are made and used, and the
    /// same descriptor for the right's whole life, so register it once.
    /// Nothing is ever read from it; receiving happens only in `try_recv`.
    ///
    /// It is made on first use.
    ///
    /// # Panics
    /// If the kernel refuses to make it (the process is out of
    /// descriptors); [`ReceiveRight::readiness_fd`] returns that error
    /// instead.
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self.readiness_fd() {
            Ok(fd) => fd,
            Err(e) => panic!("cannot make the readiness descriptor of a receive right: {e}"),
        }
    }
}

/// Most send-once rights outstanding for which a receive tries each
/// right's socket in turn (a non-blocking `recvmsg(2)` apiece); with more,
/// it asks the right's `epoll` instance which sources have anything.
const SCAN_ONCE_MAX: usize = 8;

/// The key of a receive right's main socket in its `epoll` instance.
const MAIN_KEY: u64 = u64::MAX;

/// The key of a send-once socket in its receive right's `epoll` instance:
/// its descriptor number, never [`MAIN_KEY`].
fn source_key(fd: BorrowedFd<'_>) -> u64 {
    fd.as_raw_fd() as u64
}

fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// The right to send to a port. Clone it with [`try_clone`](Self::try_clone);
/// send it to another process inside a message ([`crate::Item::Send`]).
#[derive(Debug)]
pub struct SendRight {
    pub(crate) sock: OwnedFd,
}

impl SendRight {
    /// Sends `msg`, waiting for queue space as `timeout` allows. The rights
    /// and regions in `msg` are moved to the receiver: on success this
    /// process no longer holds them.
    ///
    /// # Errors
    /// [`SendError::PeerDead`] if the receive right is gone;
    /// [`SendError::QueueFull`] if the queue is full and `timeout` is zero;
    /// [`SendError::Timeout`] if it stayed full; [`SendError::TooLarge`] if the
    /// message breaks a wire-format limit. The message comes back whole in
    /// the [`SendFailed`] (a send queues all of a message or none of it), so
    /// nothing it carried is lost: retry it, or take its rights back with
    /// [`SendFailed::into_message`]. `?` converts it into its [`SendError`]
    /// where the message is not wanted.
    pub fn send(&self, msg: Message, timeout: Timeout) -> Result<(), SendFailed> {
        send_on(self.sock.as_fd(), msg, timeout).map_err(|(e, m)| SendFailed::new(e, m, ()))
    }

    /// Makes another send right to the same port.
    pub fn try_clone(&self) -> io::Result<SendRight> {
        Ok(SendRight { sock: socket::dup(self.sock.as_fd()).map_err(io_err)? })
    }

    /// Whether the port's receive right is gone (a dead name), without
    /// waiting.
    pub fn is_dead(&self) -> bool {
        self.wait_dead(Timeout::Zero)
    }

    /// Waits until the port's receive right is gone or the timeout passes;
    /// returns whether it is gone. This is the dead-name notification as an
    /// event; [`crate::PortSet::watch_dead_name`] delivers it among other
    /// events.
    pub fn wait_dead(&self, timeout: Timeout) -> bool {
        let ready = match timeout {
            Timeout::Zero => wait::poll_one_now(self.sock.as_fd(), Interest::HangUp),
            waits => wait::poll_one(self.sock.as_fd(), Interest::HangUp, waits.deadline()),
        };
        matches!(ready, Ok(r) if r.hangup)
    }

    /// Sets the bound on this port's queue in bytes as the kernel counts them
    /// (see [`PortOptions::queue_limit`]). It applies to all send rights of
    /// the port, which share one kernel socket.
    pub fn set_queue_limit(&self, bytes: usize) -> io::Result<()> {
        socket::set_send_buffer(self.sock.as_fd(), bytes).map_err(io_err)
    }

    /// The current queue bound in bytes (as the kernel reports it).
    pub fn queue_limit(&self) -> io::Result<usize> {
        socket::send_buffer(self.sock.as_fd()).map_err(io_err)
    }

    /// Bytes queued at the port and not yet received (kernel accounting,
    /// including per-message overhead): the port's queue depth.
    pub fn queued_bytes(&self) -> io::Result<usize> {
        socket::queued_bytes(self.sock.as_fd()).map_err(io_err)
    }

    pub(crate) fn from_fd(sock: OwnedFd) -> SendRight {
        SendRight { sock }
    }
}

impl AsFd for SendRight {
    /// The socket behind the right, to wait on it in an external event loop.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl AsFd for SendOnceRight {
    /// The socket behind the right, to ask the kernel about it (the
    /// process that made it, `SO_PEERCRED`) or wait on it in an external
    /// event loop.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// The right to send exactly one message to a port. Using it consumes it;
/// dropping it unused tells the receiver ([`RecvError::SendOnceDropped`]).
#[derive(Debug)]
pub struct SendOnceRight {
    pub(crate) sock: OwnedFd,
}

impl SendOnceRight {
    /// Sends the one message this right allows, consuming the right.
    ///
    /// # Errors
    /// As [`SendRight::send`]. The right is not used up by a failed send: it
    /// comes back with the message in the [`SendFailed`]
    /// ([`SendFailed::into_parts`]), and after [`SendError::QueueFull`],
    /// [`SendError::Timeout`] or [`SendError::TooLarge`] it can send again.
    /// After [`SendError::PeerDead`] it is a dead name, good only to drop.
    pub fn send(self, msg: Message, timeout: Timeout) -> Result<(), SendFailed<SendOnceRight>> {
        match send_on(self.sock.as_fd(), msg, timeout) {
            Ok(()) => Ok(()),
            Err((e, m)) => Err(SendFailed::new(e, m, self)),
        }
    }

    /// Whether the receiving port is gone.
    pub fn is_dead(&self) -> bool {
        matches!(wait::poll_one_now(self.sock.as_fd(), Interest::HangUp), Ok(r) if r.hangup)
    }

    pub(crate) fn from_fd(sock: OwnedFd) -> SendOnceRight {
        SendOnceRight { sock }
    }
}

/// Runs `f` with every message this thread sends meanwhile carrying
/// `sender` as its sender's credentials ([`Message::sender`] at the
/// receiver) instead of the thread's own. For a relay that must not lend
/// its own identity to what it passes on: a network server run by root
/// delivers other hosts' messages as an unprivileged user, so that no local
/// server acts as root for them. The kernel checks the credentials at each
/// send: a process may name its own pid, uid and gid, and root any;
/// otherwise the send fails (`EPERM`).
///
/// ```
/// let me = ferry::Credentials { pid: std::process::id() as i32, uid: rustix::process::getuid().as_raw(), gid: rustix::process::getgid().as_raw() };
/// let (mut rx, tx) = ferry::port()?;
/// ferry::sending_as(me, || tx.send(ferry::Message::new(1), ferry::Timeout::Infinite))?;
/// assert_eq!(rx.recv(ferry::Timeout::Infinite)?.sender(), Some(me));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn sending_as<R>(sender: crate::message::Credentials, f: impl FnOnce() -> R) -> R {
    socket::sending_as(sender, f)
}

/// Runs `f` (an answer's send) as the message of `asker`, the sender of
/// the request it answers (its uid and gid, this process's pid), when
/// this process may say so and it is another user's: a server run by
/// root whose answer may go on through the asker's proxy of another
/// host's port, where sent as root it was charged to root's shares of
/// that host. Otherwise, or without an asker, `f` runs as this process.
/// The kernel lets a process name another user only with `CAP_SETUID`
/// and `CAP_SETGID` in effect: a process run by root without them answers
/// as itself (named so, each answer was refused, `EPERM`).
pub fn answering_as<R>(asker: Option<crate::message::Credentials>, f: impl FnOnce() -> R) -> R {
    use rustix::thread::CapabilitySet;
    let me = rustix::process::geteuid();
    let may = || rustix::thread::capabilities(None).is_ok_and(|c| c.effective.contains(CapabilitySet::SETUID | CapabilitySet::SETGID));
    match asker.filter(|c| me.is_root() && c.uid != me.as_raw() && may()) {
        Some(c) => sending_as(crate::message::Credentials { pid: std::process::id() as i32, ..c }, f),
        None => f(),
    }
}

/// Makes a send-once right together with the [`ReplyReceiver`] its one
/// message arrives on, without a port: one socket pair, where
/// [`ReceiveRight::make_send_once`] needs a port first. For a caller that
/// waits for exactly one answer, and for an event loop waiting for many
/// answers at once (with the `tokio` feature,
/// `ferry::tokio::AsyncReplyReceiver` awaits it).
///
/// ```
/// use ferry::{Message, RecvError, Timeout};
/// let (mut answer, right) = ferry::reply_pair()?;
/// right.send(Message::new(7), Timeout::Infinite)?; // usually in another process
/// assert_eq!(answer.recv(Timeout::Infinite)?.op(), 7);
/// // The right was used up: nothing more can come.
/// assert!(matches!(answer.recv(Timeout::Zero), Err(RecvError::NoSenders)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// The kernel's refusal of a socket pair (out of descriptors).
pub fn reply_pair() -> io::Result<(ReplyReceiver, SendOnceRight)> {
    let (rx, tx) = socket::seqpacket_pair().map_err(io_err)?;
    let identity = socket::identity(rx.as_fd()).map_err(io_err)?;
    Ok((ReplyReceiver { sock: rx, identity, done: false, timer: SocketTimer::Own(None) }, SendOnceRight { sock: tx }))
}

/// The receiving end of one send-once right made by [`reply_pair`]: it
/// gets that right's one message, or learns that the right was destroyed
/// unused. Unlike a [`ReceiveRight`] it cannot be sent to another process.
#[derive(Debug)]
pub struct ReplyReceiver {
    sock: OwnedFd,
    identity: (u64, u64),
    /// The message, or the news that none will come, was handed out.
    done: bool,
    /// Always this process's own: a reply receiver never travels.
    timer: SocketTimer,
}

impl ReplyReceiver {
    /// Waits for the one message, as `timeout` allows.
    ///
    /// # Errors
    /// [`RecvError::Timeout`] when it has not come in time (call again);
    /// [`RecvError::SendOnceDropped`] when the right was destroyed unused;
    /// [`RecvError::BadMessage`] when what came was malformed (it is
    /// discarded and its descriptors closed); [`RecvError::NoSenders`] once
    /// one of these or the message was handed out, since nothing more can
    /// come.
    pub fn recv(&mut self, timeout: Timeout) -> Result<Message, RecvError> {
        if self.done {
            return Err(RecvError::NoSenders);
        }
        let (sock, identity, timer) = (self.sock.as_fd(), self.identity, &mut self.timer);
        match with_buf(|buf| recv_timed(sock, buf, identity, timeout, timer, true)) {
            Err(e @ (RecvError::Timeout | RecvError::Io(_))) => Err(e),
            got => {
                self.done = true;
                got?.ok_or(RecvError::SendOnceDropped)
            }
        }
    }

    /// Receives the message if it is here now.
    ///
    /// # Errors
    /// As [`recv`](Self::recv); [`RecvError::Timeout`] when it is not.
    pub fn try_recv(&mut self) -> Result<Message, RecvError> {
        self.recv(Timeout::Zero)
    }

    /// Whether the message, or the news that none will come, was handed
    /// out (every later receive says [`RecvError::NoSenders`]).
    pub fn is_done(&self) -> bool {
        self.done
    }
}

impl AsFd for ReplyReceiver {
    /// The socket the message arrives on, for any event loop: readable
    /// when [`try_recv`](ReplyReceiver::try_recv) has an answer (the
    /// message, or that the right is gone). It stays readable once the
    /// answer was taken, so stop watching it then.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// As [`recv_on`], on a socket whose [`SocketTimer`] this process keeps: a
/// long enough wait first blocks in `recvmsg(2)` under the socket's timer,
/// then waits out whatever is left of its deadline as `recv_on` does.
fn recv_timed(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    identity: (u64, u64),
    timeout: Timeout,
    timer: &mut SocketTimer,
    via_send_once: bool,
) -> Result<Option<Message>, RecvError> {
    let Timeout::After(wait) = timeout else { return recv_on(sock, buf, identity, timeout, via_send_once) };
    let start = Instant::now();
    if start.checked_add(wait).is_none() {
        // Longer than the clock can hold: as endless as no timeout.
        return recv_on(sock, buf, identity, Timeout::Infinite, via_send_once);
    }
    if let Some(dg) = timer.wait(sock, buf, wait).map_err(|e| RecvError::Io(io_err(e)))? {
        return datagram_message(buf, dg, identity, via_send_once);
    }
    recv_on(sock, buf, identity, Timeout::from(wait.saturating_sub(start.elapsed())), via_send_once)
}

/// The message a received datagram holds; `Ok(None)` is end-of-file.
pub(crate) fn datagram_message(buf: &[u8], dg: socket::Datagram, identity: (u64, u64), via_send_once: bool) -> Result<Option<Message>, RecvError> {
    if dg.is_eof() {
        return Ok(None);
    }
    Message::from_datagram(buf, dg, identity, via_send_once).map(Some).map_err(RecvError::from)
}

/// Receives one message from a single socket, waiting as `timeout` allows.
/// `Ok(None)` is end-of-file: every peer descriptor is closed.
pub(crate) fn recv_on(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    identity: (u64, u64),
    timeout: Timeout,
    via_send_once: bool,
) -> Result<Option<Message>, RecvError> {
    // A receive that never waits has no deadline, and reads no clock.
    let deadline = match timeout {
        Timeout::Zero => None,
        waits => waits.deadline(),
    };
    loop {
        let wait = matches!(timeout, Timeout::Infinite);
        if !wait && !matches!(timeout, Timeout::Zero) {
            let ready = wait::poll_one(sock, Interest::Readable, deadline).map_err(|e| RecvError::Io(io_err(e)))?;
            if !ready.any() {
                return Err(RecvError::Timeout);
            }
        }
        let dg = match socket::recv(sock, buf, wait) {
            Ok(dg) => dg,
            Err(Errno::AGAIN) | Err(Errno::INTR) => {
                if matches!(timeout, Timeout::Zero) || past(deadline) {
                    return Err(RecvError::Timeout);
                }
                continue;
            }
            Err(e) => return Err(RecvError::Io(io_err(e))),
        };
        return datagram_message(buf, dg, identity, via_send_once);
    }
}

/// Encodes and sends one message on `sock`. On failure the message comes
/// back whole beside the error: `sendmsg(2)` on a `SOCK_SEQPACKET` socket
/// queues the datagram and all its descriptors, or nothing.
pub(crate) fn send_on(sock: BorrowedFd<'_>, msg: Message, timeout: Timeout) -> Result<(), (SendError, Message)> {
    send_prefixed(sock, &[], msg, timeout)
}

/// [`send_on`] with `prefix` as the first inline bytes of the message on
/// the wire, before its body ([`Message::lower_prefixed`]).
pub(crate) fn send_prefixed(sock: BorrowedFd<'_>, prefix: &[u8], msg: Message, timeout: Timeout) -> Result<(), (SendError, Message)> {
    let lowered = msg.lower_prefixed(prefix)?;
    match send_lowered(sock, &lowered, timeout) {
        Ok(()) => {
            lowered.sent();
            Ok(())
        }
        Err(e) => Err((e, lowered.unlower())),
    }
}

/// Sends a lowered message, waiting as `timeout` allows. Nothing is queued
/// unless it returns `Ok`.
fn send_lowered(sock: BorrowedFd<'_>, lowered: &crate::message::Lowered, timeout: Timeout) -> Result<(), SendError> {
    // A send that never waits has no deadline, and reads no clock.
    let deadline = match timeout {
        Timeout::Zero => None,
        waits => waits.deadline(),
    };
    let fds = lowered.fds();
    loop {
        let wait = matches!(timeout, Timeout::Infinite);
        let (parts, n) = lowered.parts();
        match socket::send(sock, &parts[..n], &fds, wait) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(Errno::PIPE) | Err(Errno::CONNRESET) | Err(Errno::NOTCONN) => {
                crate::trace::event!(debug, "send failed: the port's receive right is gone (dead name)");
                return Err(SendError::PeerDead);
            }
            Err(Errno::MSGSIZE) => {
                return Err(SendError::TooLarge("the message is larger than the port's queue limit".into()))
            }
            Err(Errno::TOOMANYREFS) => return Err(SendError::TooLarge("too many descriptors in flight".into())),
            Err(Errno::AGAIN) => {
                if matches!(timeout, Timeout::Zero) {
                    return Err(SendError::QueueFull);
                }
                if past(deadline) {
                    return Err(SendError::Timeout);
                }
                let r = wait::poll_one(sock, Interest::Writable, deadline).map_err(|e| SendError::Io(io_err(e)))?;
                if r.hangup && !r.writable {
                    return Err(SendError::PeerDead);
                }
            }
            Err(e) => return Err(SendError::Io(io_err(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However late the kernel may fire a socket's timer set to
    /// [`SocketTimer::bound`] (rounded up to a tick of up to 10 ms, then up
    /// to 8/63 later on its timer wheel, then a tick more before the woken
    /// thread sees it), it fires before the wait's deadline.
    #[test]
    fn the_socket_timer_fires_before_the_deadline() {
        let tick = Duration::from_millis(10);
        let mut wait = SOCKET_TIMER_FROM;
        while wait < Duration::from_secs(7 * 24 * 3600) {
            let bound = SocketTimer::bound(wait);
            let latest = (bound + tick) * 71 / 63 + tick;
            assert!(bound > Duration::ZERO && latest < wait, "a {wait:?} wait sets {bound:?}, which may fire at {latest:?}");
            wait = wait * 5 / 4 + Duration::from_micros(1);
        }
    }
}

