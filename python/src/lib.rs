//! `ferry._ferry`: the compiled half of ferry's Python package.
//!
//! Each class wraps one of ferry's handles (rights, messages, regions, port
//! sets, the name service, RPC) for Python; the pure-Python package `ferry`
//! beside it re-exports them with the exception classes, the NumPy helpers
//! and `asyncio` support. The GIL is released around every call that can
//! block. A handle that has been moved (into a message, a port set) or closed
//! refuses further use with `ValueError`, never with a crash.
//!
//! `buffer` is the only module with `unsafe` code: it implements Python's
//! buffer protocol over region memory.

#![deny(unsafe_code)]
#![deny(missing_docs)]

mod buffer;
mod errors;
mod message;
mod names;
mod port;
mod portset;
mod region;
mod rpc;

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::{MutexExt, RwLockExt};
use pyo3::types::PyDict;

/// Converts a Python timeout (seconds; `None` waits forever, `0` not at all)
/// into ferry's. A timeout longer than a `Duration` holds (about 1.8e19
/// seconds, `math.inf` included) waits forever.
pub(crate) fn timeout(secs: Option<f64>) -> PyResult<ferry::Timeout> {
    match secs {
        None => Ok(ferry::Timeout::Infinite),
        Some(s) if s.is_nan() || s < 0.0 => Err(PyValueError::new_err(format!("timeout must be None or >= 0 seconds, not {s}"))),
        Some(0.0) => Ok(ferry::Timeout::Zero),
        Some(s) => Ok(Duration::try_from_secs_f64(s).map_or(ferry::Timeout::Infinite, ferry::Timeout::After)),
    }
}

/// Locks a handle's state. A panic while it was held cannot leave a ferry
/// handle half-changed (each operation either took it or not), so a
/// poisoned lock is used as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks a handle's state from code that holds the GIL. Another thread may
/// hold the same lock with the GIL released for as long as its call blocks
/// (a receive, an RPC call, a send waiting for room in a queue); waiting
/// for it with the GIL held would stop every Python thread meanwhile, the
/// one that could end that call included. So the GIL is released while
/// waiting. [`lock`] is for code that runs without the GIL.
pub(crate) fn lock_py<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    m.lock_py_attached(py).unwrap_or_else(|p| p.into_inner())
}

/// As [`lock_py`], to read a handle kept in a `RwLock`.
pub(crate) fn read_py<'a, T>(py: Python<'_>, l: &'a RwLock<T>) -> RwLockReadGuard<'a, T> {
    l.read_py_attached(py).unwrap_or_else(|p| p.into_inner())
}

/// As [`lock_py`], to change a handle kept in a `RwLock`.
pub(crate) fn write_py<'a, T>(py: Python<'_>, l: &'a RwLock<T>) -> RwLockWriteGuard<'a, T> {
    l.write_py_attached(py).unwrap_or_else(|p| p.into_inner())
}

/// The error for a handle that was closed or moved away.
pub(crate) fn gone(what: &str) -> PyErr {
    PyValueError::new_err(format!("this {what} was closed or moved into a message or port set"))
}

/// The mark a handle made now records: ferry's own
/// ([`ferry::rpc::process_mark`]), which changes in a child made by any
/// `fork()`, one Python's `os.register_at_fork` hooks do not see (the C
/// library's, called by an extension) included, and by a raw `clone`. An
/// RPC connection or server records it, since its slot and sequence
/// numbers are the making process's: see [`made_here`].
pub(crate) fn fork_count() -> u64 {
    ferry::rpc::process_mark()
}

/// `Ok` if a handle that recorded `made_at` was made in this process;
/// else `RpcError`: a forked child's copy of a connection shares its slot
/// and sequence numbers with the parent (and with every other child), so
/// calls through copies would take each other's replies. Checked before
/// the handle's lock is taken: in a child, that lock may have been held
/// at the fork by a thread of the parent, which the child does not have.
pub(crate) fn made_here(made_at: u64, what: &str) -> PyResult<()> {
    if made_at == fork_count() {
        return Ok(());
    }
    Err(errors::rpc_error_text(format!(
        "this {what} was opened by the process this one was forked from: its copies share one slot, and calls through them would take each \
         other's replies; open a new {what} in this process (closing this copy leaves the other process's alone)"
    )))
}

/// ferry's counters of this process (messages, bytes inline and mapped,
/// bytes copied, regions, faults...) as a dict of name to count.
#[pyfunction]
fn counters(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (name, v) in ferry::counters::snapshot().fields() {
        d.set_item(name, v)?;
    }
    Ok(d)
}

/// The compiled module.
#[pymodule]
fn _ferry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(port::port, m)?)?;
    m.add_function(wrap_pyfunction!(port::reply_pair, m)?)?;
    m.add_function(wrap_pyfunction!(counters, m)?)?;
    m.add_class::<port::ReceiveRight>()?;
    m.add_class::<port::SendRight>()?;
    m.add_class::<port::SendOnceRight>()?;
    m.add_class::<port::ReplyReceiver>()?;
    m.add_class::<message::Message>()?;
    m.add_class::<region::Region>()?;
    m.add_class::<region::RegionItem>()?;
    m.add_class::<region::MappedRegion>()?;
    m.add_class::<portset::PortSet>()?;
    m.add_class::<portset::Event>()?;
    m.add_class::<names::Bootstrap>()?;
    m.add_class::<rpc::Connection>()?;
    m.add_class::<rpc::RpcServer>()?;
    m.add_class::<rpc::ConnId>()?;
    m.add_class::<rpc::PendingCall>()?;
    m.add_class::<rpc::Connecting>()?;
    m.add("MAX_INLINE", ferry::message::MAX_INLINE)?;
    m.add("MAX_ITEMS", ferry::message::MAX_ITEMS)?;
    m.add("SERVICE_PORT", ferry::bootstrap::SERVICE_PORT)?;
    Ok(())
}

/// Longest stretch a blocking call waits with the GIL released before it
/// looks at Python's signals (so Ctrl-C interrupts a receive, a call, a
/// send waiting for room).
const SIGNAL_SLICE: Duration = Duration::from_millis(200);

/// Runs a blocking `op` with the GIL released, in slices of at most
/// [`SIGNAL_SLICE`] so that pending signals are handled between them; `op`
/// must be safe to repeat after it timed out (a receive, a wait, the wait
/// for the reply to a call already sent; a send only through
/// [`send_in_slices`], which takes its message back). `is_timeout` tells a
/// slice's timeout.
pub(crate) fn interruptible<T, E>(
    py: Python<'_>,
    t: ferry::Timeout,
    is_timeout: fn(&E) -> bool,
    mut op: impl FnMut(ferry::Timeout) -> Result<T, E> + Send,
) -> PyResult<Result<T, E>>
where
    T: Send,
    E: Send,
{
    let deadline = match t {
        ferry::Timeout::Zero => return Ok(py.detach(|| op(ferry::Timeout::Zero))),
        // A deadline past the end of the clock is no deadline.
        ferry::Timeout::After(d) => std::time::Instant::now().checked_add(d),
        ferry::Timeout::Infinite => None,
    };
    loop {
        let slice = match deadline {
            None => SIGNAL_SLICE,
            Some(d) => d.saturating_duration_since(std::time::Instant::now()).min(SIGNAL_SLICE),
        };
        let r = py.detach(|| op(ferry::Timeout::from(slice)));
        match r {
            Err(e) if is_timeout(&e) && deadline.is_none_or(|d| std::time::Instant::now() < d) => py.check_signals()?,
            r => return Ok(r),
        }
    }
}

/// A send that did not happen (it failed, or a signal interrupted its
/// wait for room): the Python exception, and the right and message to give
/// back to their handles.
pub(crate) struct Unsent<R> {
    pub(crate) error: PyErr,
    pub(crate) right: R,
    pub(crate) msg: ferry::Message,
}

/// Sends `msg` through `right` with `send`, waiting for room as `t` says
/// in slices of at most [`SIGNAL_SLICE`] so that pending signals are
/// handled between them. A slice that times out gives the message and the
/// right back (a send queues all of a message or none of it), and the next
/// slice sends that same message: it is sent once or not at all. A send
/// that fails, or that a signal interrupts, sent nothing: the message and
/// the right come back whole with the exception, as a failed send hands
/// them back in Rust.
pub(crate) fn send_in_slices<R: Send>(
    py: Python<'_>,
    t: ferry::Timeout,
    right: R,
    msg: ferry::Message,
    send: impl Fn(R, ferry::Message, ferry::Timeout) -> Result<(), ferry::SendFailed<R>> + Sync,
) -> Result<(), Box<Unsent<R>>> {
    let mut held = Some((right, msg));
    let r = interruptible(py, t, |e| matches!(e, ferry::SendError::Timeout), |slice| {
        let (right, msg) = held.take().expect("a failed slice gives the message back");
        send(right, msg, slice).map_err(|f| {
            let (e, msg, right) = f.into_parts();
            held = Some((right, msg));
            e
        })
    });
    let error = match r {
        Ok(Ok(())) => return Ok(()),
        // The last slice of a timeout may have had no time left, and a send
        // that does not wait says the queue is full: the timeout ran out.
        Ok(Err(ferry::SendError::QueueFull)) if t != ferry::Timeout::Zero => errors::send_error(ferry::SendError::Timeout),
        Ok(Err(e)) => errors::send_error(e),
        Err(interrupted) => interrupted,
    };
    let (right, msg) = held.take().expect("a failed slice gives the message back");
    Err(Box::new(Unsent { error, right, msg }))
}
