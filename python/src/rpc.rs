//! RPC: `Connection` (the client: `call`) and `RpcServer`
//! (`reply_and_wait`), ferry's fast path through a shared slot with futex
//! wake-ups; calls carrying rights or regions fall back to the socket.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use ferry::rpc::Policy;

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
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct Connection {
    inner: Mutex<Option<ferry::rpc::Connection>>,
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
            Ok(c) => Ok(Connection { inner: Mutex::new(Some(c)) }),
            Err(Some(e)) => Err(rpc_error(e)),
            Err(None) => Err(gone("SendRight")),
        }
    }

    /// Sends `request` and waits up to `timeout` seconds for the reply.
    /// Raises `RpcTimeout` (a later reply is discarded) or `RpcPeerDead`.
    /// The request is sent once; the wait for its reply is made in slices,
    /// so that a signal (Ctrl-C) interrupts it, and the call is then
    /// abandoned as after a timeout.
    #[pyo3(signature = (request, timeout=None))]
    fn call(&self, py: Python<'_>, request: &Bound<'_, Message>, timeout: Option<f64>) -> PyResult<Message> {
        let t = crate::timeout(timeout)?;
        let m = request.borrow_mut().take_for_send()?;
        // Held from the request to its reply: a call of another thread in
        // between would abandon this one.
        let mut g = lock_py(py, &self.inner);
        let conn = g.as_mut().ok_or_else(|| gone("Connection"))?;
        let mut call = py.detach(|| conn.send_request(m)).map_err(rpc_error)?;
        let r = interruptible(py, t, |e| matches!(e, ferry::rpc::RpcError::Timeout), |slice| conn.wait_reply(&mut call, slice))?;
        r.map(Message::received).map_err(rpc_error)
    }

    /// Whether the connection still works.
    #[getter]
    fn is_open(&self, py: Python<'_>) -> bool {
        lock_py(py, &self.inner).as_ref().is_some_and(|c| c.is_open())
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
        Ok(RpcServer { inner: Mutex::new(Some(s)) })
    }

    /// Sends `reply` (a `(conn, message)` pair, or `None`), then waits up to
    /// `timeout` seconds for the next request; returns `(conn, request)`.
    /// Every request must be answered (here or with `reply`) before its
    /// connection sends another. Raises `RpcTimeout` or `NoClients`.
    #[pyo3(signature = (reply=None, timeout=None))]
    fn reply_and_wait(&self, py: Python<'_>, reply: Option<(PyRef<'_, ConnId>, Bound<'_, Message>)>, timeout: Option<f64>) -> PyResult<(ConnId, Message)> {
        let t = crate::timeout(timeout)?;
        let mut first = match reply {
            Some((id, m)) => Some((id.0, m.borrow_mut().take_for_send()?)),
            None => None,
        };
        let inner = &self.inner;
        let r = interruptible(py, t, |e| matches!(e, Some(ferry::rpc::RpcError::Timeout)), |slice| {
            let mut g = lock(inner);
            match g.as_mut() {
                Some(s) => s.reply_and_wait(first.take(), slice).map_err(Some),
                None => Err(None),
            }
        })?;
        match r {
            Ok((id, m)) => Ok((ConnId(id), Message::received(m))),
            Err(Some(e)) => Err(rpc_error(e)),
            Err(None) => Err(gone("RpcServer")),
        }
    }

    /// Sends the reply to the request last taken from `conn`.
    fn reply(&self, py: Python<'_>, conn: PyRef<'_, ConnId>, msg: &Bound<'_, Message>) -> PyResult<()> {
        let m = msg.borrow_mut().take_for_send()?;
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
