//! RPC: `Connection` (the client: `call`) and `RpcServer`
//! (`reply_and_wait`), ferry's fast path through a shared slot with futex
//! wake-ups; calls carrying rights or regions fall back to the socket.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::{Arc, Mutex, Weak};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use ferry::rpc::{Policy, RpcError};

use crate::errors::{os_error, rpc_error};
use crate::message::Message;
use crate::port::{ReceiveRight, SendRight};
use crate::{gone, interruptible, lock, lock_py};

fn policy(name: &str) -> PyResult<Policy> {
    match name {
        "adaptive" => Ok(Policy::Adaptive),
        "block" => Ok(Policy::Block),
        "poll" => Ok(Policy::Poll),
        _ => Err(PyValueError::new_err(format!("policy is \"adaptive\", \"block\" or \"poll\", not {name:?}"))),
    }
}

/// A connection to an `RpcServer` whose port `server` names. `policy` is
/// how this side waits for replies: `"adaptive"` (spin briefly, then sleep),
/// `"block"` or `"poll"`.
#[pyclass(module = "ferry._ferry", frozen, weakref)]
#[derive(Debug)]
pub struct Connection {
    inner: Mutex<Option<Open>>,
    /// The fork count when it was opened ([`crate::made_here`]).
    made_at: u64,
}

/// An open connection, and the call last sent with `send_request` (for
/// `ferry.call_async`) while its reply may still be waited for.
#[derive(Debug)]
struct Open {
    conn: ferry::rpc::Connection,
    awaited: Weak<Mutex<CallState>>,
}

impl Open {
    fn new(conn: ferry::rpc::Connection) -> Open {
        Open { conn, awaited: Weak::new() }
    }
}

/// What became of a call sent with `send_request`.
#[derive(Debug)]
enum CallState {
    /// Sent; its reply not yet taken.
    Waiting(ferry::rpc::PendingCall),
    /// Its outcome, taken for it by a blocking `call` on the connection
    /// (whose request would have abandoned it), for `try_reply` to return.
    Over(Result<ferry::Message, RpcError>),
    /// Returned by `try_reply`.
    Done,
}

#[pymethods]
impl Connection {
    /// Opens the connection, waiting up to `timeout` seconds for the server
    /// to accept (in slices, so that a signal such as Ctrl-C interrupts
    /// the wait).
    #[new]
    #[pyo3(signature = (server, policy="adaptive", timeout=None))]
    fn new(py: Python<'_>, server: &Bound<'_, SendRight>, policy: &str, timeout: Option<f64>) -> PyResult<Connection> {
        let t = crate::timeout(timeout)?;
        let mut connecting = ferry::rpc::Connection::begin_connect(self::policy(policy)?).map_err(rpc_error)?;
        let right = server.get();
        let r = interruptible(py, t, |e| matches!(e, Some(ferry::rpc::RpcError::Timeout)), |slice| {
            right.with_detached(|s| connecting.wait(s, slice)).map_err(|_| None)?.map_err(Some)
        })?;
        match r {
            Ok(c) => Ok(Connection { inner: Mutex::new(Some(Open::new(c))), made_at: crate::fork_count() }),
            Err(Some(e)) => Err(rpc_error(e)),
            Err(None) => Err(gone("SendRight")),
        }
    }

    /// Sends `request` and waits up to `timeout` seconds for the reply.
    /// Raises `RpcTimeout` (a later reply is discarded) or `RpcPeerDead`;
    /// `RpcError`, sending nothing, in a child forked after the connection
    /// was opened (open one there). The request is sent once; the wait for
    /// its reply is made in slices, so that a signal (Ctrl-C) interrupts
    /// it, and the call is then abandoned as after a timeout. A call
    /// awaited with `ferry.call_async` whose reply has not come takes its
    /// turn first: this call waits for that reply (within `timeout`,
    /// raising `RpcTimeout` with nothing sent if it does not come) and
    /// keeps it for the awaiting task, since sending now would abandon it.
    #[pyo3(signature = (request, timeout=None))]
    fn call(&self, py: Python<'_>, request: &Bound<'_, Message>, timeout: Option<f64>) -> PyResult<Message> {
        let t = crate::timeout(timeout)?;
        let started = std::time::Instant::now();
        crate::made_here(self.made_at, "Connection")?;
        // Held from the request to its reply: a call of another thread in
        // between would abandon this one.
        let mut g = lock_py(py, &self.inner);
        let open = g.as_mut().ok_or_else(|| gone("Connection"))?;
        let t = match open.awaited.upgrade() {
            Some(awaited) => {
                // `try_reply` takes this lock only under the connection's,
                // which this call holds: it is free.
                let mut state = lock_py(py, &awaited);
                if let CallState::Waiting(pending) = &mut *state {
                    let conn = &mut open.conn;
                    let r = interruptible(py, t, |e| matches!(e, RpcError::Timeout), |slice| conn.wait_reply(pending, slice))?;
                    if matches!(r, Err(RpcError::Timeout)) {
                        return Err(rpc_error(RpcError::Timeout));
                    }
                    *state = CallState::Over(r);
                }
                // What is left of the timeout for this call's own reply.
                match t {
                    ferry::Timeout::After(d) => ferry::Timeout::After(d.saturating_sub(started.elapsed())),
                    t => t,
                }
            }
            None => t,
        };
        open.awaited = Weak::new();
        let conn = &mut open.conn;
        // Taken once the connection is known open: a closed one leaves the
        // request whole.
        let m = crate::message::take_arg(request)?;
        let mut call = py.detach(|| conn.send_request(m)).map_err(rpc_error)?;
        let r = interruptible(py, t, |e| matches!(e, ferry::rpc::RpcError::Timeout), |slice| conn.wait_reply(&mut call, slice))?;
        r.map(Message::received).map_err(rpc_error)
    }

    /// Sends `request` without waiting for the reply; returns the
    /// `PendingCall` whose reply `try_reply(pending)` takes. For
    /// `ferry.call_async`.
    fn send_request(&self, py: Python<'_>, request: &Bound<'_, Message>) -> PyResult<PendingCall> {
        crate::made_here(self.made_at, "Connection")?;
        let mut g = lock_py(py, &self.inner);
        Self::send_on(py, &mut g, request)
    }

    /// As `send_request`, but returns `None`, sending nothing and leaving
    /// `request` whole, while a call of another thread holds the
    /// connection (a blocking `call` does from its request to its reply),
    /// instead of waiting for it: an event loop awaits its turn. For
    /// `ferry.call_async`.
    fn try_send_request(&self, py: Python<'_>, request: &Bound<'_, Message>) -> PyResult<Option<PendingCall>> {
        crate::made_here(self.made_at, "Connection")?;
        let Some(mut g) = try_lock(&self.inner) else { return Ok(None) };
        Self::send_on(py, &mut g, request).map(Some)
    }

    /// The reply to `pending` if it is here; raises `RpcTimeout` if not
    /// yet, after asking the server to make `fileno()` poll readable when
    /// it replies, and also, without waiting, while a call of another
    /// thread holds the connection (a blocking `call` made meanwhile takes
    /// this reply for `pending` first). Any other outcome ends the call.
    /// For `ferry.call_async`.
    fn try_reply(&self, pending: &PendingCall) -> PyResult<Message> {
        crate::made_here(self.made_at, "Connection")?;
        let busy = || rpc_error(RpcError::Timeout);
        let mut g = try_lock(&self.inner).ok_or_else(busy)?;
        let open = g.as_mut().ok_or_else(|| gone("Connection"))?;
        let mut p = try_lock(&pending.inner).ok_or_else(busy)?;
        let out = match std::mem::replace(&mut *p, CallState::Done) {
            CallState::Waiting(mut call) => match open.conn.wait_reply(&mut call, ferry::Timeout::Zero) {
                Err(RpcError::Timeout) => {
                    *p = CallState::Waiting(call);
                    return Err(rpc_error(RpcError::Timeout));
                }
                out => out,
            },
            CallState::Over(out) => out,
            CallState::Done => return Err(PyValueError::new_err("this call is over: its reply was taken or it failed")),
        };
        out.map(Message::received).map_err(rpc_error)
    }

    /// The connection's socket: it polls readable once `try_reply` has
    /// asked for the reply and it came (or the server went away), for
    /// `selectors` and `asyncio`.
    fn fileno(&self, py: Python<'_>) -> PyResult<RawFd> {
        let g = lock_py(py, &self.inner);
        let c = &g.as_ref().ok_or_else(|| gone("Connection"))?.conn;
        c.socket_fd().map(|fd| fd.as_raw_fd()).ok_or_else(|| rpc_error(ferry::rpc::RpcError::PeerDead))
    }

    /// Whether the connection still works.
    #[getter]
    fn is_open(&self, py: Python<'_>) -> bool {
        lock_py(py, &self.inner).as_ref().is_some_and(|o| o.conn.is_open())
    }

    /// Closes the connection. Idempotent.
    fn close(&self, py: Python<'_>) {
        let c = lock_py(py, &self.inner).take();
        drop(c);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// A call whose request `Connection.send_request` sent; its reply is taken
/// with `Connection.try_reply` (a blocking `Connection.call` made
/// meanwhile takes it first and keeps it here). Dropping it abandons the
/// call (a late reply is discarded).
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct PendingCall {
    inner: Arc<Mutex<CallState>>,
    /// The connection's socket when the request was sent.
    fd: RawFd,
}

/// `m` locked if no other thread holds it now (a poisoned lock is used as
/// it is, as by [`crate::lock`]).
fn try_lock<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

impl Connection {
    /// Sends `request` on the connection held in `g`; the call it starts
    /// is the one a blocking `call` takes the reply of first.
    fn send_on(py: Python<'_>, g: &mut Option<Open>, request: &Bound<'_, Message>) -> PyResult<PendingCall> {
        let open = g.as_mut().ok_or_else(|| gone("Connection"))?;
        let conn = &mut open.conn;
        // Taken once the connection is known open, as in `call`.
        let m = crate::message::take_arg(request)?;
        let c = py.detach(|| conn.send_request(m)).map_err(rpc_error)?;
        let fd = conn.socket_fd().map_or(-1, |fd| fd.as_raw_fd());
        let state = Arc::new(Mutex::new(CallState::Waiting(c)));
        open.awaited = Arc::downgrade(&state);
        Ok(PendingCall { inner: state, fd })
    }
}

#[pymethods]
impl PendingCall {
    /// Whether the call is over (its reply taken, or it failed).
    #[getter]
    fn done(&self, py: Python<'_>) -> bool {
        matches!(*lock_py(py, &self.inner), CallState::Done)
    }

    /// The connection's socket as it was when the request was sent (-1 if
    /// it was closed then): what `ferry.call_async` waits on between tries
    /// of `Connection.try_reply`, without taking the connection, which a
    /// call of another thread may hold. A number the connection's closing
    /// freed is waited on for one slice at most: the next `try_reply`
    /// raises.
    fn fileno(&self) -> RawFd {
        self.fd
    }
}

/// A connection being opened without blocking, for `ferry.connect_async`:
/// `try_open()` sends the connect request to the server (once) and returns
/// the `Connection` once the server has accepted; until then it raises
/// `RpcTimeout`, and `fileno()` polls readable when the server answers
/// (while `request_sent` is false, the server's port was full: wait for
/// its send right to poll writable instead).
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct Connecting {
    server: ferry::SendRight,
    inner: Mutex<Option<ferry::rpc::Connecting>>,
}

#[pymethods]
impl Connecting {
    /// Makes the connection's socket and slot; nothing is sent yet.
    /// `server` is the server's port (the handle stays the caller's).
    #[new]
    #[pyo3(signature = (server, policy="adaptive"))]
    fn new(py: Python<'_>, server: &Bound<'_, SendRight>, policy: &str) -> PyResult<Connecting> {
        let p = self::policy(policy)?;
        let server = server.get().with(py, |s| s.try_clone())?.map_err(os_error)?;
        let c = ferry::rpc::Connection::begin_connect(p).map_err(rpc_error)?;
        Ok(Connecting { server, inner: Mutex::new(Some(c)) })
    }

    /// The open `Connection` if the server has accepted; raises
    /// `RpcTimeout` if not yet, `RpcPeerDead` if the server's port is gone,
    /// `RpcError` if the server refused.
    fn try_open(&self, py: Python<'_>) -> PyResult<Connection> {
        let mut g = lock_py(py, &self.inner);
        let c = g.as_mut().ok_or_else(|| PyValueError::new_err("this connection was opened already"))?;
        match c.wait(&self.server, ferry::Timeout::Zero) {
            Ok(conn) => {
                *g = None;
                Ok(Connection { inner: Mutex::new(Some(Open::new(conn))), made_at: crate::fork_count() })
            }
            Err(e) => Err(rpc_error(e)),
        }
    }

    /// Whether the connect request is in the server's port (a full port
    /// keeps it here until there is room).
    #[getter]
    fn request_sent(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| PyValueError::new_err("this connection was opened already"))?.request_sent())
    }

    /// This side's end of the connection socket: it polls readable once
    /// the server has answered the request.
    fn fileno(&self, py: Python<'_>) -> PyResult<RawFd> {
        let g = lock_py(py, &self.inner);
        let c = g.as_ref().ok_or_else(|| PyValueError::new_err("this connection was opened already"))?;
        c.socket_fd().map(|fd| fd.as_raw_fd()).ok_or_else(|| PyValueError::new_err("this connection was opened already"))
    }
}

/// Names a connection of an `RpcServer`: pass it back with the reply.
#[pyclass(module = "ferry._ferry", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(ferry::rpc::ConnId);

/// The server side: accepts connections on a port (its receive right is
/// moved in) and answers calls with `reply_and_wait`.
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct RpcServer {
    inner: Mutex<Option<ferry::rpc::RpcServer>>,
    /// The fork count when it was made ([`crate::made_here`]).
    made_at: u64,
}

#[pymethods]
impl RpcServer {
    /// A server on `port`, whose receive right moves in.
    #[new]
    #[pyo3(signature = (port, policy="adaptive"))]
    fn new(py: Python<'_>, port: &Bound<'_, ReceiveRight>, policy: &str) -> PyResult<RpcServer> {
        let p = self::policy(policy)?;
        let mut s = ferry::rpc::RpcServer::new(port.get().take(py)?).map_err(os_error)?;
        s.set_policy(p);
        Ok(RpcServer { inner: Mutex::new(Some(s)), made_at: crate::fork_count() })
    }

    /// Sends `reply` (a `(conn, message)` pair, or `None`), then waits up to
    /// `timeout` seconds for the next request; returns `(conn, request)`.
    /// Every request must be answered (here or with `reply`) before its
    /// connection sends another. A reply that cannot travel (too large) fails
    /// its client's call and, like one to a client that has gone, does not
    /// stop the wait. Raises `RpcTimeout` or `NoClients`.
    #[pyo3(signature = (reply=None, timeout=None))]
    fn reply_and_wait(&self, py: Python<'_>, reply: Option<(PyRef<'_, ConnId>, Bound<'_, Message>)>, timeout: Option<f64>) -> PyResult<(ConnId, Message)> {
        let t = crate::timeout(timeout)?;
        crate::made_here(self.made_at, "RpcServer")?;
        let mut first = match reply {
            Some((id, m)) => Some((id.0, crate::message::take_arg(&m)?)),
            None => None,
        };
        let inner = &self.inner;
        let r = interruptible(py, t, |e| matches!(e, Some(ferry::rpc::RpcError::Timeout)), |slice| {
            let mut g = lock(inner);
            let Some(s) = g.as_mut() else { return Err(None) };
            if let Some((id, m)) = first.take() {
                // As ferry's own serving loops treat them: a client gone, or
                // told that its reply could not travel, is not this server's
                // failure; it goes on to the next request.
                match s.reply(id, m) {
                    Ok(()) | Err(RpcError::PeerDead | RpcError::Protocol { .. } | RpcError::TooLarge(_)) => {}
                    Err(e) => return Err(Some(e)),
                }
            }
            s.reply_and_wait(None, slice).map_err(Some)
        })?;
        match r {
            Ok((id, m)) => Ok((ConnId(id), Message::received(m))),
            Err(Some(e)) => Err(rpc_error(e)),
            Err(None) => Err(gone("RpcServer")),
        }
    }

    /// Sends the reply to the request last taken from `conn`.
    fn reply(&self, py: Python<'_>, conn: PyRef<'_, ConnId>, msg: &Bound<'_, Message>) -> PyResult<()> {
        crate::made_here(self.made_at, "RpcServer")?;
        let m = crate::message::take_arg(msg)?;
        let (inner, id) = (&self.inner, conn.0);
        py.detach(|| lock(inner).as_mut().map(|s| s.reply(id, m))).ok_or_else(|| gone("RpcServer"))?.map_err(rpc_error)
    }

    /// Closes connection `conn` (its client's calls fail with
    /// `RpcPeerDead`).
    fn drop_connection(&self, py: Python<'_>, conn: PyRef<'_, ConnId>) -> PyResult<()> {
        lock_py(py, &self.inner).as_mut().ok_or_else(|| gone("RpcServer"))?.drop_connection(conn.0);
        Ok(())
    }

    /// A descriptor that polls readable when `reply_and_wait(reply, 0)` has
    /// something to do, for `selectors` and `asyncio`
    /// (`ferry.reply_and_wait_async`): call it with a zero timeout until it
    /// raises `RpcTimeout`, then wait for the descriptor again. A wait that
    /// times out marks the server asleep, so that clients ring it and the
    /// descriptor hears of their calls.
    fn fileno(&self, py: Python<'_>) -> PyResult<RawFd> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| gone("RpcServer"))?.as_fd().as_raw_fd())
    }

    /// Number of live connections.
    #[getter]
    fn connections(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| gone("RpcServer"))?.connections())
    }

    /// Closes the server, its port and every connection. Idempotent.
    fn close(&self, py: Python<'_>) {
        let s = lock_py(py, &self.inner).take();
        drop(s);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}
