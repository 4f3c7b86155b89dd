//! Awaitable ports, port sets and RPC on the tokio runtime (the `tokio`
//! feature).
//!
//! Each type wraps its blocking counterpart in tokio's
//! `AsyncFd`, on the one descriptor that
//! counterpart exposes through [`AsFd`] for event loops, and does its work
//! in the counterpart's non-blocking call: [`AsyncReceiveRight`] on
//! [`ReceiveRight::try_recv`], [`AsyncPortSet`] on
//! `PortSet::wait(Timeout::Zero)`, [`AsyncRpcServer`] on
//! `RpcServer::reply_and_wait(_, Timeout::Zero)`, [`AsyncSendRight`] on a
//! send that never waits. The futex an RPC client sleeps on cannot be
//! polled, so an [`AsyncConnection`] asks the server, through its slot, to
//! ring the connection socket instead of waking the futex, and awaits that
//! socket; servers and blocking clients are unchanged and mix freely with
//! async ones.
//!
//! # Cancellation loses no message
//! A future dropped at any await point has taken nothing it did not hand
//! over: work is done only in the non-blocking calls, never across an
//! await.
//! - A dropped `recv`/`wait`/`reply_and_wait` future leaves every message
//!   and request queued for the next call (a reply passed to
//!   `reply_and_wait` is sent when it is called, before any wait).
//! - A [`SendFuture`] holds its message until the kernel accepts it whole;
//!   [`SendFuture::take_message`] hands it back if it has not been sent, so
//!   it is delivered once or not at all, never twice. Dropping the future
//!   without taking the message drops it unsent (its rights are closed, as
//!   when any unsent message is dropped).
//! - A dropped [`CallFuture`] that has sent its request leaves the
//!   connection usable: the server still answers that request, and the
//!   late reply is discarded by the next call, which is never given a reply
//!   to an earlier request. Since a server takes one request per connection
//!   at a time, the next call's request is served after the abandoned one.
//! - A dropped [`AsyncConnection::connect`] future gives its half-open
//!   connection up within 100 ms: it closes, and a runtime being dropped
//!   does not wait for it.
//!
//! All of these must be created and used inside a tokio runtime with its
//! I/O driver enabled (`enable_io`, or `enable_all`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ferry::tokio::{AsyncReceiveRight, AsyncSendRight};
//! use ferry::Message;
//!
//! let (rx, tx) = ferry::port()?;
//! let (mut rx, tx) = (AsyncReceiveRight::new(rx)?, AsyncSendRight::new(tx)?);
//! tx.send(Message::new(1).with_body(*b"hi")).await?;
//! assert_eq!(rx.recv().await?.body(), b"hi");
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ::tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use ::tokio::io::Interest;

use crate::error::{io_err, RecvError, SendError};
use crate::message::Message;
use crate::port::{ReceiveRight, ReplyReceiver, SendRight};
use crate::portset::{Event, MemberId, PortSet};
use crate::rpc::{ConnId, ConnectOptions, Connection, Look, RpcError, RpcServer};
use crate::sys::reactor::{register, Watched};
use crate::sys::socket;
use crate::timeout::Timeout;

/// Runs `attempt` once; if it had nothing, waits until `fd` is readable and
/// runs it again, clearing readiness only after an attempt made *under*
/// the readiness guard found nothing (so no wake-up between the attempt
/// and the clear can be lost). `attempt` returns `None` for "nothing now".
async fn readable_loop<T: AsFd, R>(
    fd: &mut AsyncFd<Watched<T>>,
    mut attempt: impl FnMut(&mut T) -> Option<R>,
    io: impl Fn(io::Error) -> R,
) -> R {
    if let Some(r) = attempt(&mut fd.get_mut().0) {
        return r;
    }
    loop {
        let mut guard = match fd.readable_mut().await {
            Ok(g) => g,
            Err(e) => return io(e),
        };
        match attempt(&mut guard.get_inner_mut().0) {
            Some(r) => return r,
            None => guard.clear_ready(),
        }
    }
}

/// Receives with `try_recv` (which says [`RecvError::Timeout`] when
/// nothing is there yet) once `fd` is readable, as [`readable_loop`] but
/// without its first attempt: a receive has nothing to do before it waits,
/// and readiness is cleared only after a receive found nothing, so when it
/// is clear nothing is queued (a message that arrives later sets it again,
/// as does one already queued when the descriptor was registered). A
/// receiver that waits for each message makes two receive calls per
/// message (the one that finds the queue empty, the one that takes it),
/// not three.
async fn recv_loop<T: AsFd>(
    fd: &mut AsyncFd<Watched<T>>,
    mut try_recv: impl FnMut(&mut T) -> Result<Message, RecvError>,
) -> Result<Message, RecvError> {
    loop {
        let mut guard = fd.readable_mut().await.map_err(RecvError::Io)?;
        match try_recv(&mut guard.get_inner_mut().0) {
            Err(RecvError::Timeout) => guard.clear_ready(),
            other => return other,
        }
    }
}

/// Awaits `fut` with every message this thread sends while polling it
/// carrying `sender` as its sender's credentials
/// ([`crate::sending_as`]): only during its polls, never for other tasks
/// that share the thread.
pub async fn sending_as<F: Future>(sender: crate::message::Credentials, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| crate::port::sending_as(sender, || fut.as_mut().poll(cx))).await
}

/// A [`ReceiveRight`] whose messages are awaited.
#[derive(Debug)]
pub struct AsyncReceiveRight {
    fd: AsyncFd<Watched<ReceiveRight>>,
}

impl AsyncReceiveRight {
    /// Wraps `right`, registering its readiness descriptor with the
    /// runtime.
    ///
    /// # Errors
    /// When called outside a tokio runtime with I/O enabled, or when the
    /// kernel refuses a descriptor.
    pub fn new(right: ReceiveRight) -> io::Result<AsyncReceiveRight> {
        right.readiness_fd()?;
        Ok(AsyncReceiveRight { fd: register(right, Interest::READABLE)? })
    }

    /// Receives the next message, waiting for it without blocking the
    /// thread. Dropping the future loses nothing: a message is taken off
    /// the queue only when this returns it.
    ///
    /// # Errors
    /// As [`ReceiveRight::recv`] (never [`RecvError::Timeout`]: wrap the
    /// future in `tokio::time::timeout` for a deadline).
    pub async fn recv(&mut self) -> Result<Message, RecvError> {
        recv_loop(&mut self.fd, |r| r.try_recv()).await
    }

    /// Makes a send-once right to this port ([`ReceiveRight::make_send_once`]);
    /// its message arrives through [`recv`](Self::recv).
    pub fn make_send_once(&mut self) -> io::Result<crate::SendOnceRight> {
        self.fd.get_mut().0.make_send_once()
    }

    /// Receives a message if one is queued now ([`ReceiveRight::try_recv`]).
    pub fn try_recv(&mut self) -> Result<Message, RecvError> {
        self.fd.get_mut().0.try_recv()
    }

    /// The receive right.
    pub fn get_ref(&self) -> &ReceiveRight {
        &self.fd.get_ref().0
    }

    /// Unregisters from the runtime and returns the receive right.
    pub fn into_inner(self) -> ReceiveRight {
        self.fd.into_inner().0
    }
}

/// A [`ReplyReceiver`] whose one message is awaited: the cheap way to wait
/// for one answer in an event loop (one socket pair and one registration,
/// where a port with a send-once right costs two socket pairs and an
/// `epoll` instance of its own).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use ferry::tokio::AsyncReplyReceiver;
/// use ferry::{Message, Timeout};
///
/// let (answer, right) = ferry::reply_pair()?;
/// let mut answer = AsyncReplyReceiver::new(answer)?;
/// std::thread::spawn(move || right.send(Message::new(9), Timeout::Infinite));
/// assert_eq!(answer.recv().await?.op(), 9);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AsyncReplyReceiver {
    fd: AsyncFd<Watched<ReplyReceiver>>,
}

impl AsyncReplyReceiver {
    /// Wraps `receiver`, registering it with the runtime.
    ///
    /// # Errors
    /// When called outside a tokio runtime with I/O enabled.
    pub fn new(receiver: ReplyReceiver) -> io::Result<AsyncReplyReceiver> {
        Ok(AsyncReplyReceiver { fd: register(receiver, Interest::READABLE)? })
    }

    /// Waits for the one message without blocking the thread. Dropping the
    /// future loses nothing: the message is taken only when this returns.
    ///
    /// # Errors
    /// As [`ReplyReceiver::recv`] (never [`RecvError::Timeout`]: wrap the
    /// future in `tokio::time::timeout` for a deadline).
    pub async fn recv(&mut self) -> Result<Message, RecvError> {
        recv_loop(&mut self.fd, |r| r.try_recv()).await
    }

    /// Unregisters from the runtime and returns the receiver.
    pub fn into_inner(self) -> ReplyReceiver {
        self.fd.into_inner().0
    }
}

/// A [`SendRight`] whose sends wait for queue space without blocking the
/// thread.
#[derive(Debug)]
pub struct AsyncSendRight {
    fd: AsyncFd<Watched<SendRight>>,
}

impl AsyncSendRight {
    /// Wraps `right`, registering it with the runtime.
    ///
    /// # Errors
    /// When called outside a tokio runtime with I/O enabled.
    pub fn new(right: SendRight) -> io::Result<AsyncSendRight> {
        Ok(AsyncSendRight { fd: register(right, Interest::WRITABLE)? })
    }

    /// Sends `msg`, waiting while the port's queue is full. The message is
    /// consumed only when the kernel accepts it; until then the returned
    /// future holds it and [`SendFuture::take_message`] gives it back.
    ///
    /// The future resolves to the errors of [`SendRight::send`] (never
    /// `Timeout` or `QueueFull`). After an error other than
    /// [`SendError::TooLarge`] for a wire-format limit, the message is
    /// still in the future.
    pub fn send(&self, msg: Message) -> SendFuture<'_> {
        SendFuture { right: self, msg: Some(msg), room: None }
    }

    /// The send right.
    pub fn get_ref(&self) -> &SendRight {
        &self.fd.get_ref().0
    }

    /// Unregisters from the runtime and returns the send right.
    pub fn into_inner(self) -> SendRight {
        self.fd.into_inner().0
    }
}

/// The future of [`AsyncSendRight::send`]: it holds the message until the
/// kernel has accepted it. Several may wait on one right at once (tasks
/// sharing it): each waits for room on its own, so each is woken.
#[must_use = "a send does nothing unless awaited or polled"]
pub struct SendFuture<'a> {
    right: &'a AsyncSendRight,
    msg: Option<Message>,
    /// This send's wait for room while the queue is full. (The runtime's
    /// `poll_write_ready` wakes only the task that asked last.)
    room: Option<Pin<Box<WaitForRoom<'a>>>>,
}

/// A wait for the send right's socket to poll writable.
type WaitForRoom<'a> = dyn Future<Output = io::Result<AsyncFdReadyGuard<'a, Watched<SendRight>>>> + Send + 'a;

impl std::fmt::Debug for SendFuture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendFuture").field("right", &self.right).field("msg", &self.msg).field("waiting", &self.room.is_some()).finish()
    }
}

impl SendFuture<'_> {
    /// Takes the message back if it has not been sent: `None` once the
    /// kernel has accepted it (or after a wire-format error dropped it).
    /// A future whose message was taken resolves to an error if polled
    /// again.
    pub fn take_message(&mut self) -> Option<Message> {
        self.msg.take()
    }
}

impl Future for SendFuture<'_> {
    type Output = Result<(), SendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let right = this.right;
        let sock = right.fd.get_ref().0.as_fd();
        // One attempt before asking for readiness: the usual case, a queue
        // with room, costs no round through the runtime.
        if this.room.is_none() {
            match try_send(sock, &mut this.msg) {
                Err(SendError::QueueFull) => {}
                done => return Poll::Ready(done),
            }
        }
        loop {
            let room = this.room.get_or_insert_with(|| Box::pin(right.fd.writable()));
            let ready = room.as_mut().poll(cx);
            let mut guard = match ready {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => {
                    this.room = None;
                    match r {
                        Ok(g) => g,
                        Err(e) => return Poll::Ready(Err(SendError::Io(e))),
                    }
                }
            };
            match try_send(sock, &mut this.msg) {
                Err(SendError::QueueFull) => guard.clear_ready(),
                done => return Poll::Ready(done),
            }
        }
    }
}

/// Sends the message in `slot` without waiting. The slot is emptied only
/// when the kernel accepted the message (or lowering it failed, which
/// drops it); on every other failure the message is put back.
fn try_send(sock: BorrowedFd<'_>, slot: &mut Option<Message>) -> Result<(), SendError> {
    let Some(msg) = slot.take() else {
        return Err(SendError::Io(io::Error::other("the message was already sent or taken back")));
    };
    crate::port::send_on(sock, msg, Timeout::Zero).map_err(|(err, msg)| {
        *slot = Some(msg);
        err
    })
}

/// A [`PortSet`] whose events are awaited.
#[derive(Debug)]
pub struct AsyncPortSet {
    fd: AsyncFd<Watched<PortSet>>,
}

impl AsyncPortSet {
    /// Wraps `set`, registering its `epoll` descriptor with the runtime.
    ///
    /// # Errors
    /// When called outside a tokio runtime with I/O enabled.
    pub fn new(set: PortSet) -> io::Result<AsyncPortSet> {
        Ok(AsyncPortSet { fd: register(set, Interest::READABLE)? })
    }

    /// Waits for the next event on any member. Dropping the future loses
    /// nothing. Members may be changed ([`insert`](Self::insert),
    /// [`port_mut`](Self::port_mut)) between waits: each wait brings the
    /// registrations up to date before it sleeps.
    ///
    /// # Errors
    /// `Io` on a kernel failure (never [`RecvError::Timeout`]).
    pub async fn wait(&mut self) -> Result<Event, RecvError> {
        readable_loop(
            &mut self.fd,
            |s| match s.wait(Timeout::Zero) {
                Err(RecvError::Timeout) => None,
                other => Some(other),
            },
            |e| Err(RecvError::Io(e)),
        )
        .await
    }

    /// Moves a receive right into the set ([`PortSet::insert`]).
    pub fn insert(&mut self, port: ReceiveRight) -> MemberId {
        self.fd.get_mut().0.insert(port)
    }

    /// Takes a receive right back out of the set ([`PortSet::remove`]).
    pub fn remove(&mut self, id: MemberId) -> Option<ReceiveRight> {
        self.fd.get_mut().0.remove(id)
    }

    /// The member port `id` ([`PortSet::port_mut`]), to make send-once
    /// rights on it; the next [`wait`](Self::wait) watches them.
    pub fn port_mut(&mut self, id: MemberId) -> Option<&mut ReceiveRight> {
        self.fd.get_mut().0.port_mut(id)
    }

    /// Watches `right`'s port for a dead name ([`PortSet::watch_dead_name`]).
    pub fn watch_dead_name(&mut self, right: &SendRight) -> io::Result<MemberId> {
        self.fd.get_mut().0.watch_dead_name(right)
    }

    /// Stops a dead-name watch ([`PortSet::unwatch`]).
    pub fn unwatch(&mut self, id: MemberId) -> bool {
        self.fd.get_mut().0.unwatch(id)
    }

    /// The set.
    pub fn get_ref(&self) -> &PortSet {
        &self.fd.get_ref().0
    }

    /// Unregisters from the runtime and returns the set.
    pub fn into_inner(self) -> PortSet {
        self.fd.into_inner().0
    }
}

/// An [`RpcServer`] thread whose requests are awaited: one task serves
/// every connection it accepts.
#[derive(Debug)]
pub struct AsyncRpcServer {
    fd: AsyncFd<Watched<RpcServer>>,
}

impl AsyncRpcServer {
    /// Wraps `server`, registering its `epoll` descriptor with the runtime.
    /// The server's [`Policy`](crate::rpc::Policy) does not matter here: an
    /// async server never spins.
    ///
    /// # Errors
    /// When called outside a tokio runtime with I/O enabled.
    pub fn new(server: RpcServer) -> io::Result<AsyncRpcServer> {
        Ok(AsyncRpcServer { fd: register(server, Interest::READABLE)? })
    }

    /// Sends `reply` (if any) at once, when this is called, then returns the
    /// wait for the next request on any connection; as
    /// [`RpcServer::reply_and_wait`]. The reply has gone whether or not the
    /// future is ever polled, and dropping the future takes no request.
    ///
    /// # Errors
    /// As [`RpcServer::reply_and_wait`], never [`RpcError::Timeout`].
    pub fn reply_and_wait(
        &mut self,
        reply: Option<(ConnId, Message)>,
    ) -> impl Future<Output = Result<(ConnId, Message), RpcError>> + '_ {
        let sent = match reply {
            // As the blocking call: a reply to a connection that has gone,
            // or one that cannot travel (its connection is closed), is not
            // this server's error.
            Some((id, msg)) => match self.fd.get_mut().0.reply(id, msg) {
                Ok(()) | Err(RpcError::PeerDead) | Err(RpcError::Protocol { .. }) | Err(RpcError::TooLarge(_)) => Ok(()),
                Err(e) => Err(e),
            },
            None => Ok(()),
        };
        async move {
            sent?;
            readable_loop(
                &mut self.fd,
                |s| match s.reply_and_wait(None, Timeout::Zero) {
                    Err(RpcError::Timeout) => None,
                    other => Some(other),
                },
                |e| Err(RpcError::Io(e)),
            )
            .await
        }
    }

    /// Sends the reply to a request out of order ([`RpcServer::reply`]).
    ///
    /// # Errors
    /// As [`RpcServer::reply`].
    pub fn reply(&mut self, id: ConnId, msg: Message) -> Result<(), RpcError> {
        self.fd.get_mut().0.reply(id, msg)
    }

    /// Closes connection `id` ([`RpcServer::drop_connection`]).
    pub fn drop_connection(&mut self, id: ConnId) {
        self.fd.get_mut().0.drop_connection(id)
    }

    /// The server.
    pub fn get_ref(&self) -> &RpcServer {
        &self.fd.get_ref().0
    }

    /// Unregisters from the runtime and returns the server.
    pub fn into_inner(self) -> RpcServer {
        self.fd.into_inner().0
    }
}

/// Longest stretch an [`AsyncConnection::connect`] thread waits before it
/// looks whether its future was dropped.
const CONNECT_SLICE: Duration = Duration::from_millis(100);

/// Tells a connect's blocking thread, when its future is dropped, that
/// nobody waits for the connection any more.
struct Abandon(Arc<AtomicBool>);

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A [`Connection`] whose calls are awaited. Short calls go through the
/// shared slot as with blocking calls; the reply's wake-up is a doorbell
/// datagram on the connection socket, which the runtime watches.
#[derive(Debug)]
pub struct AsyncConnection {
    conn: Connection,
    /// A duplicate of the connection socket, registered with the runtime
    /// (so closing the connection's own descriptor can never leave the
    /// runtime watching a reused number); dropped once the connection is
    /// broken, so the server sees the hang-up.
    fd: Option<AsyncFd<Watched<OwnedFd>>>,
}

impl AsyncConnection {
    /// Opens a connection to the server whose port `server` names. The
    /// handshake waits for the server to accept, on a blocking-pool thread,
    /// in slices of at most 100 ms. Dropping the future (a
    /// timeout around it, `select!`, a runtime shutting down) abandons the
    /// connect: the thread gives the connection up at the end of its slice,
    /// so it closes and the runtime waits for nothing longer.
    ///
    /// # Errors
    /// As [`Connection::connect`].
    pub async fn connect(server: &SendRight, opts: ConnectOptions) -> Result<AsyncConnection, RpcError> {
        let server = server.try_clone().map_err(RpcError::Io)?;
        let mut connecting = Connection::begin_connect(opts.policy)?;
        let abandon = Abandon(Arc::new(AtomicBool::new(false)));
        let abandoned = Arc::clone(&abandon.0);
        let deadline = opts.timeout.deadline();
        let conn = ::tokio::task::spawn_blocking(move || loop {
            let slice = deadline.map_or(CONNECT_SLICE, |d| d.saturating_duration_since(Instant::now()).min(CONNECT_SLICE));
            match connecting.wait(&server, Timeout::from(slice)) {
                Err(RpcError::Timeout) if !abandoned.load(Ordering::Acquire) && deadline.is_none_or(|d| Instant::now() < d) => {}
                done => return done,
            }
        })
        .await
        .map_err(|e| RpcError::Io(io::Error::other(e)))??;
        drop(abandon);
        AsyncConnection::new(conn)
    }

    /// Wraps an open connection.
    ///
    /// # Errors
    /// [`RpcError::PeerDead`] if the connection is already broken;
    /// [`RpcError::Io`] outside a tokio runtime with I/O enabled.
    pub fn new(conn: Connection) -> Result<AsyncConnection, RpcError> {
        let sock = conn.socket().ok_or(RpcError::PeerDead)?;
        let dup = socket::dup(sock).map_err(|e| RpcError::Io(io_err(e)))?;
        let fd = register(dup, Interest::READABLE).map_err(RpcError::Io)?;
        Ok(AsyncConnection { conn, fd: Some(fd) })
    }

    /// Sends `req` and awaits its reply. Nothing is sent until the future is
    /// first polled. For a deadline wrap it in `tokio::time::timeout`: a
    /// call dropped after sending leaves the connection usable and its late
    /// reply is discarded (see the [module documentation](self)).
    ///
    /// The future resolves to the errors of
    /// [`Transport::call`](crate::rpc::Transport::call), never
    /// [`RpcError::Timeout`].
    pub fn call(&mut self, req: Message) -> CallFuture<'_> {
        CallFuture { conn: self, req: Some(req), started: None, armed: false }
    }

    /// Whether the connection is still usable.
    pub fn is_open(&self) -> bool {
        self.conn.is_open()
    }

    /// Unregisters from the runtime and returns the connection, for
    /// blocking calls.
    pub fn into_inner(self) -> Connection {
        self.conn
    }
}

/// The future of [`AsyncConnection::call`].
#[derive(Debug)]
#[must_use = "a call does nothing unless awaited or polled"]
pub struct CallFuture<'a> {
    conn: &'a mut AsyncConnection,
    req: Option<Message>,
    /// The call's sequence number and whether it went through the slot.
    started: Option<(u32, bool)>,
    /// The slot asks the server for a doorbell.
    armed: bool,
}

impl CallFuture<'_> {
    fn disarm(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.conn.conn.want_doorbell(false);
        }
    }

    fn finish(&mut self, out: Result<Message, RpcError>) -> Poll<Result<Message, RpcError>> {
        self.disarm();
        if !self.conn.conn.is_open() {
            self.conn.fd = None;
        }
        Poll::Ready(out)
    }
}

impl Future for CallFuture<'_> {
    type Output = Result<Message, RpcError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (seq, via_slot) = match this.started {
            Some(s) => s,
            None => {
                let Some(req) = this.req.take() else {
                    return Poll::Ready(Err(RpcError::Io(io::Error::other("the call already completed"))));
                };
                match this.conn.conn.start_call(req) {
                    Ok(s) => *this.started.insert(s),
                    Err(e) => return this.finish(Err(e)),
                }
            }
        };
        loop {
            // The slot first (no system call); then ask for the doorbell and
            // look once more (the server publishes, then reads the flag).
            if via_slot {
                if let Some(out) = this.conn.conn.slot_reply(seq) {
                    return this.finish(out);
                }
                if !this.armed {
                    this.conn.conn.want_doorbell(true);
                    this.armed = true;
                    continue;
                }
            }
            let Some(fd) = this.conn.fd.as_ref() else { return this.finish(Err(RpcError::PeerDead)) };
            let mut guard = match fd.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return this.finish(Err(RpcError::Io(e))),
                Poll::Ready(Ok(g)) => g,
            };
            // Readable: doorbells, a socket reply, late replies or the
            // hang-up. Readiness is cleared only once the socket is empty.
            let out = match this.conn.conn.read_socket(seq, via_slot) {
                Ok(Look::Empty) => {
                    guard.clear_ready();
                    continue;
                }
                Ok(Look::More) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Ok(Look::Reply(m)) => Ok(m),
                Err(e) => Err(e),
            };
            drop(guard);
            return this.finish(out);
        }
    }
}

impl Drop for CallFuture<'_> {
    fn drop(&mut self) {
        // A call abandoned while waiting: the server goes back to futex
        // wake-ups (nobody sleeps on it, so none are issued) and its late
        // reply is discarded by the next call.
        self.disarm();
    }
}
