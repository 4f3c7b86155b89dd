//! `PortSet`: one thread (or one event loop) receiving from many ports and
//! watching send rights for dead names.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;

use pyo3::prelude::*;

use crate::errors::{os_error, recv_error, wire_error};
use crate::message::Message;
use crate::port::{ReceiveRight, SendOnceRight, SendRight};
use crate::{gone, interruptible, lock, lock_py};

#[derive(Debug)]
struct Set {
    set: ferry::PortSet,
    /// Python's member numbers and ferry's ids, both ways.
    ids: HashMap<u64, ferry::MemberId>,
    numbers: HashMap<ferry::MemberId, u64>,
    next: u64,
}

impl Set {
    fn number(&mut self, id: ferry::MemberId) -> u64 {
        self.next += 1;
        self.ids.insert(self.next, id);
        self.numbers.insert(id, self.next);
        self.next
    }

    fn id(&self, n: u64) -> PyResult<ferry::MemberId> {
        self.ids.get(&n).copied().ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(format!("no member {n} in this port set")))
    }
}

/// What `PortSet.wait` reports: `kind` is `"message"` (with `message`),
/// `"no-senders"`, `"send-once-dropped"`, `"bad-message"` (with `error`, the
/// exception describing it) or `"dead-name"`; `member` is the number
/// `insert` or `watch_dead_name` returned.
#[pyclass(module = "ferry._ferry", get_all)]
#[derive(Debug)]
pub struct Event {
    /// The kind of event.
    kind: &'static str,
    /// The member it happened to.
    member: u64,
    /// The message, for `"message"`.
    message: Option<Py<Message>>,
    /// The exception describing a discarded message, for `"bad-message"`.
    error: Option<Py<PyAny>>,
}

#[pymethods]
impl Event {
    fn __repr__(&self) -> String {
        format!("<ferry.Event {} member={}>", self.kind, self.member)
    }
}

/// A set of receive rights and dead-name watches waited on together;
/// `fileno()` gives one descriptor for `selectors` and `asyncio`.
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct PortSet {
    inner: Mutex<Option<Set>>,
}

#[pymethods]
impl PortSet {
    /// An empty set.
    #[new]
    fn new() -> PyResult<PortSet> {
        let set = ferry::PortSet::new().map_err(os_error)?;
        Ok(PortSet { inner: Mutex::new(Some(Set { set, ids: HashMap::new(), numbers: HashMap::new(), next: 0 })) })
    }

    /// Moves a receive right into the set; returns its member number.
    fn insert(&self, py: Python<'_>, right: &Bound<'_, ReceiveRight>) -> PyResult<u64> {
        let mut g = lock_py(py, &self.inner);
        let s = g.as_mut().ok_or_else(|| gone("PortSet"))?;
        let id = s.set.insert(right.get().take(py)?);
        Ok(s.number(id))
    }

    /// Takes member `member`'s receive right back out of the set.
    fn remove(&self, py: Python<'_>, member: u64) -> PyResult<ReceiveRight> {
        let mut g = lock_py(py, &self.inner);
        let s = g.as_mut().ok_or_else(|| gone("PortSet"))?;
        let id = s.id(member)?;
        let r = s.set.remove(id).ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(format!("member {member} is not a port")))?;
        s.ids.remove(&member);
        s.numbers.remove(&id);
        Ok(ReceiveRight::wrap(r))
    }

    /// Makes a send-once right to member port `member`.
    fn make_send_once(&self, py: Python<'_>, member: u64) -> PyResult<SendOnceRight> {
        let mut g = lock_py(py, &self.inner);
        let s = g.as_mut().ok_or_else(|| gone("PortSet"))?;
        let id = s.id(member)?;
        let port = s.set.port_mut(id).ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(format!("member {member} is not a port")))?;
        Ok(SendOnceRight::wrap(port.make_send_once().map_err(os_error)?))
    }

    /// Watches `right`'s port and reports a `"dead-name"` event when its
    /// receive right is gone. The set keeps its own copy of the right.
    fn watch_dead_name(&self, py: Python<'_>, right: &Bound<'_, SendRight>) -> PyResult<u64> {
        let mut g = lock_py(py, &self.inner);
        let s = g.as_mut().ok_or_else(|| gone("PortSet"))?;
        let id = right.get().with(py, |r| s.set.watch_dead_name(r))?.map_err(os_error)?;
        Ok(s.number(id))
    }

    /// Stops dead-name watch `member` and drops the set's copy of the right
    /// (which otherwise keeps the watched port from seeing no senders while
    /// the set lives); a stopped watch reports nothing. Raises `KeyError` if
    /// `member` is no watch (a port, or a watch already stopped or reported
    /// as a dead name).
    fn unwatch(&self, py: Python<'_>, member: u64) -> PyResult<()> {
        let mut g = lock_py(py, &self.inner);
        let s = g.as_mut().ok_or_else(|| gone("PortSet"))?;
        let id = s.id(member)?;
        if !s.set.unwatch(id) {
            return Err(pyo3::exceptions::PyKeyError::new_err(format!("member {member} is not a dead-name watch")));
        }
        s.ids.remove(&member);
        s.numbers.remove(&id);
        Ok(())
    }

    /// Waits up to `timeout` seconds for the next event (`None`: forever;
    /// `0`: only what is ready now). Raises `RecvTimeout` if none came.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Event> {
        let t = crate::timeout(timeout)?;
        let inner = &self.inner;
        let r = interruptible(py, t, |e| matches!(e, Some(ferry::RecvError::Timeout)), |slice| {
            let mut g = lock(inner);
            match g.as_mut() {
                Some(s) => s.set.wait(slice).map_err(Some),
                None => Err(None),
            }
        })?;
        let ev = match r {
            Ok(ev) => ev,
            Err(Some(e)) => return Err(recv_error(e)),
            Err(None) => return Err(gone("PortSet")),
        };
        let mut g = lock_py(py, &self.inner);
        let s = g.as_mut().ok_or_else(|| gone("PortSet"))?;
        let number = |s: &Set, id: ferry::MemberId| s.numbers.get(&id).copied().unwrap_or(0);
        let (kind, member, message, error) = match ev {
            ferry::Event::Message(id, m) => ("message", number(s, id), Some(Py::new(py, Message::received(m))?), None),
            ferry::Event::NoSenders(id) => ("no-senders", number(s, id), None, None),
            ferry::Event::SendOnceDropped(id) => ("send-once-dropped", number(s, id), None, None),
            ferry::Event::BadMessage(id, w) => ("bad-message", number(s, id), None, Some(wire_error(&w).into_value(py).into_any())),
            ferry::Event::DeadName(id) => {
                let n = number(s, id);
                s.ids.remove(&n);
                s.numbers.remove(&id);
                ("dead-name", n, None, None)
            }
        };
        Ok(Event { kind, member, message, error })
    }

    /// A descriptor that polls readable when `wait(0)` has something to
    /// report. Ask again after inserting ports or making send-once rights:
    /// each call brings the registrations up to date.
    fn fileno(&self, py: Python<'_>) -> PyResult<RawFd> {
        let mut g = lock_py(py, &self.inner);
        let s = g.as_mut().ok_or_else(|| gone("PortSet"))?;
        s.set.ready_fd().map(|fd| fd.as_raw_fd()).map_err(os_error)
    }

    /// Number of member ports.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| gone("PortSet"))?.set.len())
    }

    /// Destroys the set and every right in it. Idempotent.
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
