//! ferry's errors as Python exceptions, one family per operation.
//!
//! The exception classes are defined in Python (`ferry/errors.py`) so that
//! they can inherit from two bases (`ferry.SendTimeout` is both a
//! `ferry.SendError` and a `TimeoutError`); this module picks the class for
//! each Rust error and raises it with the error's message. Every conversion
//! of a send failure goes through [`send_error`].

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

use ferry::region::RegionError;
use ferry::rpc::RpcError;
use ferry::{NameError, RecvError, SendError, WireError};

/// Builds an exception of the class `name` in `ferry.errors`.
fn raise(name: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        let cls = py
            .import("ferry.errors")
            .and_then(|m| m.getattr(name))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match cls {
            Ok(cls) => PyErr::from_type(cls, msg),
            Err(e) => PyRuntimeError::new_err(format!("{msg} (ferry.errors.{name} unavailable: {e})")),
        }
    })
}

/// A failed send. Takes anything that converts into [`SendError`], so the
/// send paths keep compiling whatever error type `send` returns.
pub(crate) fn send_error(e: impl Into<SendError>) -> PyErr {
    let e = e.into();
    let class = match &e {
        SendError::PeerDead => "PeerDead",
        SendError::QueueFull => "QueueFull",
        SendError::Timeout => "SendTimeout",
        SendError::TooLarge(_) => "MessageTooLarge",
        SendError::Invalid(_) => "InvalidSend",
        SendError::Io(_) => "SendError",
    };
    raise(class, e.to_string())
}

/// A failed receive.
pub(crate) fn recv_error(e: RecvError) -> PyErr {
    let class = match &e {
        RecvError::NoSenders => "NoSenders",
        RecvError::SendOnceDropped => "SendOnceDropped",
        RecvError::Timeout => "RecvTimeout",
        RecvError::BadMessage(_) => "BadMessage",
        RecvError::Io(_) => "RecvError",
    };
    raise(class, e.to_string())
}

/// A malformed message reported outside a receive (port-set events).
pub(crate) fn wire_error(e: &WireError) -> PyErr {
    raise("BadMessage", format!("malformed message discarded: {e}"))
}

/// A failed region operation.
pub(crate) fn region_error(e: RegionError) -> PyErr {
    let class = match &e {
        RegionError::SenderMayWrite(_) => "SenderMayWrite",
        RegionError::AddressTaken { .. } => "AddressTaken",
        _ => "RegionError",
    };
    raise(class, e.to_string())
}

/// A failed name-service request.
pub(crate) fn name_error(e: NameError) -> PyErr {
    let class = match &e {
        NameError::NotFound => "NameNotFound",
        NameError::Taken => "NameTaken",
        NameError::Invalid => "InvalidName",
        NameError::Denied => "NameDenied",
        NameError::Unavailable(_) | NameError::NotRunning { .. } => "NameServiceUnavailable",
        NameError::LimitReached { .. } => "NameLimitReached",
        NameError::Impostor { .. } | NameError::UnsafeDirectory { .. } => "NameServiceUntrusted",
        _ => "NameError",
    };
    raise(class, e.to_string())
}

/// A failed call or reply-and-wait.
pub(crate) fn rpc_error(e: RpcError) -> PyErr {
    let class = match &e {
        RpcError::PeerDead => "RpcPeerDead",
        RpcError::Timeout => "RpcTimeout",
        RpcError::NoClients => "NoClients",
        _ => "RpcError",
    };
    raise(class, e.to_string())
}

/// A `RpcError` with its own text (no Rust error behind it).
pub(crate) fn rpc_error_text(msg: String) -> PyErr {
    raise("RpcError", msg)
}

/// An operating-system failure outside the families above (making a port or
/// a port set).
pub(crate) fn os_error(e: std::io::Error) -> PyErr {
    PyErr::from(e)
}
