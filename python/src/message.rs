//! `Message`: build one (operation id, inline bytes, rights, regions, a
//! reply right), send it, receive it.
//!
//! Adding a right or a region to a message moves it out of its Python
//! handle at once, as `with_item` does in Rust; sending uses the message up.
//! A received message's items become Python handles the first time `items`
//! is read.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffer::with_bytes;
use crate::errors::region_error;
use crate::port::{ReceiveRight, SendOnceRight, SendRight};
use crate::region::{Region, RegionItem};

/// A message: an operation id, inline bytes (at most `MAX_INLINE`), and
/// items (send, send-once and receive rights, out-of-line regions), with an
/// optional right to reply through.
#[pyclass(module = "ferry._ferry")]
#[derive(Debug)]
pub struct Message {
    msg: Option<ferry::Message>,
    /// Items of a received message, once turned into Python handles.
    items: Option<Vec<Py<PyAny>>>,
}

impl Message {
    pub(crate) fn received(m: ferry::Message) -> Message {
        Message { msg: Some(m), items: None }
    }

    fn get(&self) -> PyResult<&ferry::Message> {
        self.msg.as_ref().ok_or_else(sent)
    }

    fn update(&mut self, f: impl FnOnce(ferry::Message) -> ferry::Message) -> PyResult<()> {
        let m = self.msg.take().ok_or_else(sent)?;
        self.msg = Some(f(m));
        Ok(())
    }

    /// Whether the message was sent already.
    pub(crate) fn is_sent(&self) -> bool {
        self.msg.is_none()
    }

    /// Takes the message out to send it; the Python object is used up.
    pub(crate) fn take_for_send(&mut self) -> PyResult<ferry::Message> {
        self.msg.take().ok_or_else(sent)
    }

    /// Puts back a message whose send was interrupted before it was sent,
    /// so that the Python object can be sent again.
    pub(crate) fn restore(&mut self, m: ferry::Message) {
        self.msg = Some(m);
    }
}

/// The error for a message used again after it was sent.
pub(crate) fn sent() -> PyErr {
    PyValueError::new_err("this message was already sent")
}

/// The error for a message another call holds: the message being replied
/// to, given as its own answer or sent by another thread meanwhile.
fn in_use() -> PyErr {
    PyValueError::new_err("this message is in use by another call (a reply to it is being sent)")
}

/// Whether a message given as an argument was sent already.
pub(crate) fn is_sent_arg(msg: &Bound<'_, Message>) -> PyResult<bool> {
    Ok(msg.try_borrow().map_err(|_| in_use())?.is_sent())
}

/// Takes a message given as an argument out to send it (see
/// [`Message::take_for_send`]).
pub(crate) fn take_arg(msg: &Bound<'_, Message>) -> PyResult<ferry::Message> {
    msg.try_borrow_mut().map_err(|_| in_use())?.take_for_send()
}

/// Puts a message whose send was interrupted back into its argument (see
/// [`Message::restore`]); if another call holds it by now, the message is
/// dropped unsent.
pub(crate) fn restore_arg(msg: &Bound<'_, Message>, m: ferry::Message) {
    if let Ok(mut g) = msg.try_borrow_mut() {
        g.restore(m);
    }
}

/// Turns a received item into its Python handle.
fn raise_item(py: Python<'_>, item: ferry::Item) -> PyResult<Py<PyAny>> {
    Ok(match item {
        ferry::Item::Send(r) => Py::new(py, SendRight::wrap(r))?.into_any(),
        ferry::Item::SendOnce(r) => Py::new(py, SendOnceRight::wrap(r))?.into_any(),
        ferry::Item::Receive(r) => Py::new(py, ReceiveRight::wrap(r))?.into_any(),
        ferry::Item::Region(r) => Py::new(py, RegionItem::wrap(r))?.into_any(),
        // Memory-object descriptors are for Rust pagers; closed here.
        ferry::Item::Pager(p) => {
            drop(p);
            py.None()
        }
    })
}

/// Turns a reply right into its Python handle.
fn raise_reply(py: Python<'_>, r: ferry::Reply) -> PyResult<Py<PyAny>> {
    Ok(match r {
        ferry::Reply::Send(r) => Py::new(py, SendRight::wrap(r))?.into_any(),
        ferry::Reply::SendOnce(r) => Py::new(py, SendOnceRight::wrap(r))?.into_any(),
    })
}

#[pymethods]
impl Message {
    /// A message with operation id `op` and inline bytes `body` (any
    /// bytes-like object).
    #[new]
    #[pyo3(signature = (op=0, body=None))]
    fn new(op: u32, body: Option<&Bound<'_, PyAny>>) -> PyResult<Message> {
        let mut m = ferry::Message::new(op);
        if let Some(b) = body {
            m = m.with_body(with_bytes(b, |s| s.to_vec())?);
        }
        Ok(Message { msg: Some(m), items: None })
    }

    /// The operation id.
    #[getter]
    fn op(&self) -> PyResult<u32> {
        Ok(self.get()?.op())
    }

    /// The inline bytes (a copy).
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.get()?.body()))
    }

    #[setter]
    fn set_body(&mut self, body: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = with_bytes(body, |s| s.to_vec())?;
        let m = self.msg.as_mut().ok_or_else(sent)?;
        *m.body_mut() = v;
        Ok(())
    }

    /// Adds an item, moving it out of its handle: a `SendRight`,
    /// `SendOnceRight` or `ReceiveRight`, a received `RegionItem` (passed
    /// on as it is), or a `Region`, sent by value: by copy (sealed; this
    /// process keeps a copy-on-write copy) or, with `move=True`, by move
    /// (this process gives its mapping up: no view or array of it may be
    /// alive).
    /// Returns the message, for chaining.
    #[pyo3(signature = (item, *, r#move=false))]
    fn add<'py>(mut slf: PyRefMut<'py, Self>, item: &Bound<'py, PyAny>, r#move: bool) -> PyResult<PyRefMut<'py, Self>> {
        slf.get()?;
        let it: ferry::Item = if let Ok(r) = item.cast::<Region>() {
            if r#move {
                r.get().move_item()?.into()
            } else {
                r.get().copy_item()?.into()
            }
        } else if r#move {
            return Err(PyTypeError::new_err("move=True applies to a Region only"));
        } else if let Ok(r) = item.cast::<SendRight>() {
            r.get().take(item.py())?.into()
        } else if let Ok(r) = item.cast::<SendOnceRight>() {
            r.get().take(item.py())?.into()
        } else if let Ok(r) = item.cast::<ReceiveRight>() {
            r.get().take(item.py())?.into()
        } else if let Ok(r) = item.cast::<RegionItem>() {
            r.get().take()?.into()
        } else {
            return Err(PyTypeError::new_err(format!(
                "cannot send a {} in a message; use add_bytes() for bytes-like data",
                item.get_type().name()?
            )));
        };
        slf.update(|m| m.with_item(it))?;
        Ok(slf)
    }

    /// Adds a by-value region holding a copy of `data` (any contiguous
    /// bytes-like object): one copy, into a fresh sealed region. For data
    /// you are about to produce, write it into a `Region` and skip the copy.
    fn add_bytes<'py>(mut slf: PyRefMut<'py, Self>, data: &Bound<'py, PyAny>) -> PyResult<PyRefMut<'py, Self>> {
        slf.get()?;
        let item = with_bytes(data, ferry::RegionItem::copied_from)?.map_err(region_error)?;
        slf.update(|m| m.with_item(item))?;
        Ok(slf)
    }

    /// Sets the right the receiver should reply through (a `SendRight` or,
    /// usually, a `SendOnceRight`), moving it out of its handle.
    fn set_reply<'py>(mut slf: PyRefMut<'py, Self>, right: &Bound<'py, PyAny>) -> PyResult<PyRefMut<'py, Self>> {
        slf.get()?;
        let reply: ferry::Reply = if let Ok(r) = right.cast::<SendOnceRight>() {
            r.get().take(right.py())?.into()
        } else if let Ok(r) = right.cast::<SendRight>() {
            r.get().take(right.py())?.into()
        } else {
            return Err(PyTypeError::new_err("a reply right is a SendRight or a SendOnceRight"));
        };
        slf.update(|m| m.with_reply(reply))?;
        Ok(slf)
    }

    /// The items of a received message as handles (`SendRight`,
    /// `SendOnceRight`, `ReceiveRight`, `RegionItem`), in order. The first
    /// read moves them out of the message; later reads return the same list.
    #[getter]
    fn items(&mut self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        if self.items.is_none() {
            let taken = self.msg.as_mut().ok_or_else(sent)?.take_items();
            let list = taken.into_iter().map(|i| raise_item(py, i)).collect::<PyResult<Vec<_>>>()?;
            self.items = Some(list);
        }
        Ok(self.items.as_ref().map(|l| l.iter().map(|o| o.clone_ref(py)).collect()).unwrap_or_default())
    }

    /// Takes the port out of a name server's `SERVICE_PORT` message (sent to
    /// a service registered with `Bootstrap.register_system_service`, one
    /// for each lookup of its name): returns `(uid, ReceiveRight)`, the
    /// user whose lookup the port was made for and the port to serve as
    /// that user's. Returns `None`, leaving the message as it was, for
    /// anything else: the same bytes from anyone but root (the kernel's
    /// word) included. Call it before reading `items`; after, a
    /// `SERVICE_PORT` message raises `ValueError`.
    fn take_service_port(&mut self, py: Python<'_>) -> PyResult<Option<(u32, Py<ReceiveRight>)>> {
        let m = self.msg.as_mut().ok_or_else(sent)?;
        if m.op() != ferry::bootstrap::SERVICE_PORT {
            return Ok(None);
        }
        if self.items.is_some() {
            return Err(PyValueError::new_err("take_service_port must come before reading the message's items"));
        }
        match ferry::bootstrap::ServicePort::take(m) {
            Some(sp) => Ok(Some((sp.uid, Py::new(py, ReceiveRight::wrap(sp.port))?))),
            None => Ok(None),
        }
    }

    /// Takes the reply right the sender supplied (`None` if there is none or
    /// it was taken already).
    fn take_reply(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.msg.as_mut().ok_or_else(sent)?.take_reply().map(|r| raise_reply(py, r)).transpose()
    }

    /// Sends `answer` through this message's reply right, using the right
    /// up. Raises `ValueError` if the message carries no reply right. A
    /// send that fails, or that a signal (Ctrl-C) interrupts while it
    /// waits for room, leaves the right and `answer` unused.
    #[pyo3(signature = (answer, timeout=None))]
    fn reply(&mut self, py: Python<'_>, answer: &Bound<'_, Message>, timeout: Option<f64>) -> PyResult<()> {
        let t = crate::timeout(timeout)?;
        if is_sent_arg(answer)? {
            return Err(sent());
        }
        let r = self.msg.as_mut().ok_or_else(sent)?.take_reply().ok_or_else(|| PyValueError::new_err("this message carries no reply right"))?;
        let m = take_arg(answer)?;
        match crate::send_in_slices(py, t, r, m, |r, m, slice| r.send(m, slice)) {
            Ok(()) => Ok(()),
            Err(u) => {
                let u = *u;
                // Unsent: the reply right and the answer stay.
                self.update(|m| m.with_reply(u.right))?;
                restore_arg(answer, u.msg);
                Err(u.error)
            }
        }
    }

    /// Who sent a received message, as the kernel recorded it: `(pid, uid,
    /// gid)` (for an `RpcServer`'s request, its client's when it made the
    /// connection); `None` for a message built here.
    #[getter]
    fn sender(&self) -> PyResult<Option<(i32, u32, u32)>> {
        Ok(self.get()?.sender().map(|c| (c.pid, c.uid, c.gid)))
    }

    /// Whether the message arrived through a send-once right.
    #[getter]
    fn via_send_once(&self) -> PyResult<bool> {
        Ok(self.get()?.via_send_once())
    }

    /// Whether the message was sent (and so can no longer be used).
    #[getter]
    fn sent(&self) -> bool {
        self.msg.is_none()
    }

    fn __repr__(&self) -> String {
        match &self.msg {
            Some(m) => format!("<ferry.Message op={} body={} bytes items={}>", m.op(), m.body().len(), m.items().len() + self.items.as_ref().map_or(0, Vec::len)),
            None => "<ferry.Message sent>".to_owned(),
        }
    }
}
