//! Rights and ports: `ReceiveRight`, `SendRight`, `SendOnceRight`,
//! `ReplyReceiver`, `port()` and `reply_pair()`.
//!
//! Each handle owns its ferry right until the right is moved into a message
//! (or a port set) or closed; after that the handle raises `ValueError`. A
//! receive right that an event loop polls is kept inside a one-member
//! [`ferry::PortSet`], whose descriptor is readable when the port has
//! something to deliver (its main socket or any send-once reply).

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::{Mutex, RwLock};

use pyo3::prelude::*;

use crate::errors::{os_error, recv_error};
use crate::message::Message;
use crate::{gone, interruptible, lock, lock_py, read_py, send_in_slices, write_py};

/// How a receive right is held: on its own, or inside a one-member port set
/// so that it has one descriptor to poll.
#[derive(Debug)]
pub(crate) enum Holder {
    Plain(ferry::ReceiveRight),
    Polled(ferry::PortSet, ferry::MemberId),
}

impl Holder {
    fn port(&mut self) -> &mut ferry::ReceiveRight {
        match self {
            Holder::Plain(r) => r,
            Holder::Polled(set, id) => set.port_mut(*id).expect("the member stays in its private set"),
        }
    }

    pub(crate) fn into_right(self) -> ferry::ReceiveRight {
        match self {
            Holder::Plain(r) => r,
            Holder::Polled(mut set, id) => set.remove(id).expect("the member stays in its private set"),
        }
    }
}

/// Receives with `recv` through the handle in `inner` (named `what` when it
/// is closed), waiting as `timeout` says (seconds; `None` forever) in
/// slices, so that a signal (Ctrl-C) interrupts the wait.
fn recv_through<H: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    inner: &Mutex<Option<H>>,
    what: &'static str,
    recv: impl Fn(&mut H, ferry::Timeout) -> Result<ferry::Message, ferry::RecvError> + Sync,
) -> PyResult<Message> {
    let t = crate::timeout(timeout)?;
    let r = interruptible(py, t, |e| matches!(e, Some(ferry::RecvError::Timeout)), |slice| {
        let mut g = lock(inner);
        match g.as_mut() {
            Some(h) => recv(h, slice).map_err(Some),
            None => Err(None),
        }
    })?;
    match r {
        Ok(m) => Ok(Message::received(m)),
        Err(Some(e)) => Err(recv_error(e)),
        Err(None) => Err(gone(what)),
    }
}

/// The right to receive from a port: exactly one per port. Move it to
/// another process with `Message.add(right)`.
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct ReceiveRight {
    inner: Mutex<Option<Holder>>,
}

impl ReceiveRight {
    pub(crate) fn wrap(r: ferry::ReceiveRight) -> ReceiveRight {
        ReceiveRight { inner: Mutex::new(Some(Holder::Plain(r))) }
    }

    /// Takes the right out of this handle (to move it into a message or a
    /// port set).
    pub(crate) fn take(&self, py: Python<'_>) -> PyResult<ferry::ReceiveRight> {
        lock_py(py, &self.inner).take().map(Holder::into_right).ok_or_else(|| gone("ReceiveRight"))
    }
}

#[pymethods]
impl ReceiveRight {
    /// Receives the next message, waiting up to `timeout` seconds (`None`:
    /// forever; `0`: only what is queued now). Raises `RecvTimeout`,
    /// `NoSenders` (every send right is gone), `SendOnceDropped` or
    /// `BadMessage` (the message was discarded; the port stays usable).
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Message> {
        recv_through(py, timeout, &self.inner, "ReceiveRight", |h, t| h.port().recv(t))
    }

    /// Receives a message if one is queued now; raises `RecvTimeout` if not.
    fn try_recv(&self, py: Python<'_>) -> PyResult<Message> {
        self.recv(py, Some(0.0))
    }

    /// Makes a send-once right to this port: good for exactly one message
    /// (typically a reply).
    fn make_send_once(&self, py: Python<'_>) -> PyResult<SendOnceRight> {
        let mut g = lock_py(py, &self.inner);
        let h = g.as_mut().ok_or_else(|| gone("ReceiveRight"))?;
        Ok(SendOnceRight::wrap(h.port().make_send_once().map_err(os_error)?))
    }

    /// Send-once rights made here and not yet used or destroyed.
    #[getter]
    fn send_once_outstanding(&self, py: Python<'_>) -> PyResult<usize> {
        let mut g = lock_py(py, &self.inner);
        Ok(g.as_mut().ok_or_else(|| gone("ReceiveRight"))?.port().send_once_outstanding())
    }

    /// Whether every send right is known to be gone.
    #[getter]
    fn senders_gone(&self, py: Python<'_>) -> PyResult<bool> {
        let mut g = lock_py(py, &self.inner);
        Ok(g.as_mut().ok_or_else(|| gone("ReceiveRight"))?.port().senders_gone())
    }

    /// A descriptor that polls readable when `try_recv` has something to
    /// report (a message, no-senders, a dropped send-once right), for
    /// `selectors` and `asyncio`. Ask again after making send-once rights:
    /// the descriptor's registrations are brought up to date on each call.
    fn fileno(&self, py: Python<'_>) -> PyResult<RawFd> {
        let mut g = lock_py(py, &self.inner);
        let h = g.take().ok_or_else(|| gone("ReceiveRight"))?;
        let mut h = match h {
            Holder::Plain(r) => match ferry::PortSet::new() {
                Ok(mut set) => {
                    let id = set.insert(r);
                    Holder::Polled(set, id)
                }
                Err(e) => {
                    *g = Some(Holder::Plain(r));
                    return Err(os_error(e));
                }
            },
            polled => polled,
        };
        let fd = match &mut h {
            Holder::Polled(set, _) => set.ready_fd().map(|fd| fd.as_raw_fd()),
            Holder::Plain(_) => unreachable!("made polled above"),
        };
        *g = Some(h);
        fd.map_err(os_error)
    }

    /// Whether the right was closed or moved away.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        lock_py(py, &self.inner).is_none()
    }

    /// Destroys the right now (senders see a dead name). Idempotent.
    fn close(&self, py: Python<'_>) {
        let h = lock_py(py, &self.inner).take();
        drop(h);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<ferry.ReceiveRight{}>", if self.closed(py) { " closed" } else { "" })
    }
}

/// The right to send to a port. `clone()` it to keep a copy when moving one
/// into a message.
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct SendRight {
    inner: RwLock<Option<ferry::SendRight>>,
}

impl SendRight {
    pub(crate) fn wrap(r: ferry::SendRight) -> SendRight {
        SendRight { inner: RwLock::new(Some(r)) }
    }

    pub(crate) fn take(&self, py: Python<'_>) -> PyResult<ferry::SendRight> {
        write_py(py, &self.inner).take().ok_or_else(|| gone("SendRight"))
    }

    /// Runs `f` with the right (shared: sends may run side by side), from
    /// code that holds the GIL.
    pub(crate) fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&ferry::SendRight) -> R) -> PyResult<R> {
        let g = read_py(py, &self.inner);
        Ok(f(g.as_ref().ok_or_else(|| gone("SendRight"))?))
    }

    /// As [`with`](Self::with), from code that runs without the GIL.
    pub(crate) fn with_detached<R>(&self, f: impl FnOnce(&ferry::SendRight) -> R) -> PyResult<R> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        Ok(f(g.as_ref().ok_or_else(|| gone("SendRight"))?))
    }
}

#[pymethods]
impl SendRight {
    /// Sends `msg`, moving its rights and regions, waiting up to `timeout`
    /// seconds while the queue is full (`None`: forever; `0`: raise
    /// `QueueFull` at once). Raises `PeerDead` when the receive right is
    /// gone, `SendTimeout`, `MessageTooLarge`. A sent message is used up;
    /// one that was not (the send failed, or a signal such as Ctrl-C
    /// interrupted the wait for room) is left whole, rights and regions
    /// inside, to send again or elsewhere.
    #[pyo3(signature = (msg, timeout=None))]
    fn send(&self, py: Python<'_>, msg: &Bound<'_, Message>, timeout: Option<f64>) -> PyResult<()> {
        let t = crate::timeout(timeout)?;
        // Held until the send ends (sends share it; `close` waits).
        let g = read_py(py, &self.inner);
        let right = g.as_ref().ok_or_else(|| gone("SendRight"))?;
        let m = crate::message::take_arg(msg)?;
        send_in_slices(py, t, (), m, |(), m, slice| right.send(m, slice)).map_err(|u| {
            let u = *u;
            crate::message::restore_arg(msg, u.msg);
            u.error
        })
    }

    /// Another send right to the same port.
    fn clone(&self, py: Python<'_>) -> PyResult<SendRight> {
        let r = self.with(py, |s| s.try_clone())?.map_err(os_error)?;
        Ok(SendRight::wrap(r))
    }

    /// Whether the port's receive right is gone (a dead name).
    #[getter]
    fn is_dead(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |s| s.is_dead())
    }

    /// Waits up to `timeout` seconds for the receive right to go; returns
    /// whether it did.
    #[pyo3(signature = (timeout=None))]
    fn wait_dead(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let t = crate::timeout(timeout)?;
        let inner = &self.inner;
        let r = interruptible(py, t, |e: &Option<()>| e.is_some(), |slice| {
            let g = inner.read().unwrap_or_else(|p| p.into_inner());
            match g.as_ref() {
                Some(s) if s.wait_dead(slice) => Ok(()),
                Some(_) => Err(Some(())),
                None => Err(None),
            }
        })?;
        match r {
            Ok(()) => Ok(true),
            Err(Some(())) => Ok(false),
            Err(None) => Err(gone("SendRight")),
        }
    }

    /// The kernel's bound on the port's queue, in bytes.
    #[getter]
    fn queue_limit(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |s| s.queue_limit())?.map_err(os_error)
    }

    /// Sets the bound on the port's queue, in bytes.
    #[setter]
    fn set_queue_limit(&self, py: Python<'_>, bytes: usize) -> PyResult<()> {
        self.with(py, |s| s.set_queue_limit(bytes))?.map_err(os_error)
    }

    /// The descriptor of this right (polls writable while the queue has
    /// room, hang-up once the receiver is gone).
    fn fileno(&self, py: Python<'_>) -> PyResult<RawFd> {
        use std::os::fd::AsFd;
        self.with(py, |s| s.as_fd().as_raw_fd())
    }

    /// Whether the right was closed or moved away.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        read_py(py, &self.inner).is_none()
    }

    /// Destroys this right now. Idempotent.
    fn close(&self, py: Python<'_>) {
        let r = write_py(py, &self.inner).take();
        drop(r);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<ferry.SendRight{}>", if self.closed(py) { " closed" } else { "" })
    }
}

/// A right good for exactly one message to a port, typically a reply. If it
/// is destroyed unused, the port's receiver sees `SendOnceDropped`.
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct SendOnceRight {
    inner: Mutex<Option<ferry::SendOnceRight>>,
}

impl SendOnceRight {
    pub(crate) fn wrap(r: ferry::SendOnceRight) -> SendOnceRight {
        SendOnceRight { inner: Mutex::new(Some(r)) }
    }

    pub(crate) fn take(&self, py: Python<'_>) -> PyResult<ferry::SendOnceRight> {
        lock_py(py, &self.inner).take().ok_or_else(|| gone("SendOnceRight"))
    }
}

#[pymethods]
impl SendOnceRight {
    /// Sends `msg` through this right, using it up. A send that fails, or
    /// that a signal (Ctrl-C) interrupts while it waits for room, leaves
    /// the right and the message unused.
    #[pyo3(signature = (msg, timeout=None))]
    fn send(&self, py: Python<'_>, msg: &Bound<'_, Message>, timeout: Option<f64>) -> PyResult<()> {
        let t = crate::timeout(timeout)?;
        if crate::message::is_sent_arg(msg)? {
            return Err(crate::message::sent());
        }
        let right = self.take(py)?;
        let m = crate::message::take_arg(msg)?;
        send_in_slices(py, t, right, m, |r, m, slice| r.send(m, slice)).map_err(|u| {
            let u = *u;
            // Unsent: the right and the message stay.
            *lock_py(py, &self.inner) = Some(u.right);
            crate::message::restore_arg(msg, u.msg);
            u.error
        })
    }

    /// Whether the port's receive right is gone.
    #[getter]
    fn is_dead(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| gone("SendOnceRight"))?.is_dead())
    }

    /// Whether the right was used, closed or moved away.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        lock_py(py, &self.inner).is_none()
    }

    /// Destroys the right unused (the receiver sees `SendOnceDropped`).
    fn close(&self, py: Python<'_>) {
        let r = lock_py(py, &self.inner).take();
        drop(r);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<ferry.SendOnceRight{}>", if self.closed(py) { " used" } else { "" })
    }
}

/// The receiving end of one send-once right made by `reply_pair()`: it gets
/// that right's one message, or learns that the right was destroyed unused.
/// Cheaper than a port when one answer is all that is awaited; it cannot be
/// moved into a message.
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct ReplyReceiver {
    inner: Mutex<Option<ferry::ReplyReceiver>>,
}

#[pymethods]
impl ReplyReceiver {
    /// Receives the one message, waiting up to `timeout` seconds (`None`:
    /// forever; `0`: only if it is here). Raises `RecvTimeout`,
    /// `SendOnceDropped` (the right was destroyed unused), `BadMessage` (it
    /// was malformed and discarded), and `NoSenders` once the answer was
    /// taken.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Message> {
        recv_through(py, timeout, &self.inner, "ReplyReceiver", ferry::ReplyReceiver::recv)
    }

    /// Receives the message if it is here now; raises `RecvTimeout` if not.
    fn try_recv(&self, py: Python<'_>) -> PyResult<Message> {
        self.recv(py, Some(0.0))
    }

    /// Whether the message, or the news that none will come, was taken.
    #[getter]
    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| gone("ReplyReceiver"))?.is_done())
    }

    /// A descriptor that polls readable when `try_recv` has an answer, for
    /// `selectors` and `asyncio` (`ferry.recv_async` takes this receiver
    /// too). It stays readable once the answer was taken.
    fn fileno(&self, py: Python<'_>) -> PyResult<RawFd> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| gone("ReplyReceiver"))?.as_fd().as_raw_fd())
    }

    /// Whether the receiver was closed.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        lock_py(py, &self.inner).is_none()
    }

    /// Closes the receiver now (a send through its right then fails with
    /// `PeerDead`). Idempotent.
    fn close(&self, py: Python<'_>) {
        let r = lock_py(py, &self.inner).take();
        drop(r);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<ferry.ReplyReceiver{}>", if self.closed(py) { " closed" } else { "" })
    }
}

/// Makes a send-once right and the `ReplyReceiver` its one message arrives
/// on, without a port; returns `(receiver, right)`.
#[pyfunction]
pub fn reply_pair() -> PyResult<(ReplyReceiver, SendOnceRight)> {
    let (rx, tx) = ferry::reply_pair().map_err(os_error)?;
    Ok((ReplyReceiver { inner: Mutex::new(Some(rx)) }, SendOnceRight::wrap(tx)))
}

/// Makes a port; returns its receive right and a first send right.
/// `queue_limit` bounds the queued bytes (the kernel's count).
#[pyfunction]
#[pyo3(signature = (queue_limit=None))]
pub fn port(queue_limit: Option<usize>) -> PyResult<(ReceiveRight, SendRight)> {
    let (rx, tx) = ferry::port_with(ferry::PortOptions { queue_limit }).map_err(os_error)?;
    Ok((ReceiveRight::wrap(rx), SendRight::wrap(tx)))
}

