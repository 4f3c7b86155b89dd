//! Errors across the boundary: the status every call returns, the
//! per-thread text of the last failure, and the guard every entry point runs
//! its body in (null checks, `catch_unwind`, error mapping).
//!
//! Every conversion from a `ferry` error to a status is here, so a change in
//! the Rust API is adapted in one place; sends in particular go through
//! [`send_failed`].

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferry::bootstrap::NameError;
use ferry::region::{MapError, RegionError};
use ferry::rpc::RpcError;
use ferry::{RecvError, SendError, WireError};

/// What a call did. `FERRY_OK` is zero; every other value is a failure
/// whose text [`ferry_last_error_message`] returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferry_status {
    /// Success.
    FERRY_OK = 0,
    /// A required pointer argument was NULL.
    FERRY_ERR_NULL = 1,
    /// An argument is out of range or does not fit the object (an item
    /// index past the end, an item of another kind, an unknown flag).
    FERRY_ERR_INVALID_ARGUMENT = 2,
    /// The other side is gone: a send to a dead name, a call to a dead
    /// server.
    FERRY_ERR_PEER_DEAD = 3,
    /// The port's queue is full and the timeout was zero.
    FERRY_ERR_QUEUE_FULL = 4,
    /// Nothing happened before the timeout.
    FERRY_ERR_TIMEOUT = 5,
    /// The message breaks a limit of the wire format, or a region is longer
    /// than the receiver accepts (`ferry_message_map_region`).
    FERRY_ERR_TOO_LARGE = 6,
    /// A send that can never work (a used send-once right, a receive right
    /// sent to its own port).
    FERRY_ERR_INVALID_SEND = 7,
    /// Every send right to the port is gone and its queue is empty.
    FERRY_ERR_NO_SENDERS = 8,
    /// The only send-once right that could still deliver was destroyed.
    FERRY_ERR_SEND_ONCE_DROPPED = 9,
    /// A malformed message (or datagram given to the parser) was rejected.
    FERRY_ERR_BAD_MESSAGE = 10,
    /// The region was lent or shared: its sender can still change it, so it
    /// is not mapped or viewed as if it were immutable.
    FERRY_ERR_SENDER_MAY_WRITE = 11,
    /// Same-address placement was asked for but the range is taken (or the
    /// sender gave no address).
    FERRY_ERR_ADDRESS_TAKEN = 12,
    /// A region could not be allocated, sealed, mapped or read.
    FERRY_ERR_REGION = 13,
    /// The name is registered to a live port already.
    FERRY_ERR_NAME_TAKEN = 14,
    /// No live registration under that name for this user.
    FERRY_ERR_NAME_NOT_FOUND = 15,
    /// The name is empty, too long, not UTF-8 or has control characters.
    FERRY_ERR_NAME_INVALID = 16,
    /// The name server refused (another user's name).
    FERRY_ERR_DENIED = 17,
    /// No name server answered and none could be started.
    FERRY_ERR_UNAVAILABLE = 18,
    /// The peer broke a protocol; the connection was closed.
    FERRY_ERR_PROTOCOL = 19,
    /// The server refused the connection.
    FERRY_ERR_REFUSED = 20,
    /// An RPC server has no port left and no connections.
    FERRY_ERR_NO_CLIENTS = 21,
    /// The message has no reply right (or the RPC reply was not made with
    /// `ferry_message_new_reply`).
    FERRY_ERR_NO_REPLY_RIGHT = 22,
    /// The kernel refused for another reason.
    FERRY_ERR_IO = 23,
    /// ferry panicked (a bug); the call had no effect beyond what the text
    /// says.
    FERRY_ERR_PANIC = 24,
    /// A per-user budget of the server (names, connections) is used up;
    /// the text says which and its limit.
    FERRY_ERR_LIMIT = 25,
    /// The name server found is not to be trusted (another user's socket,
    /// or a directory others control); nothing was sent to it.
    FERRY_ERR_UNTRUSTED = 26,
}

use ferry_status::*;

/// The name of a status value as the header spells it
/// (`"FERRY_ERR_TIMEOUT"`), or `"FERRY_ERR_UNKNOWN"` for a value that is not
/// one. The string is static.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub extern "C" fn ferry_status_name(status: c_int) -> *const c_char {
    let name: &'static CStr = match status {
        0 => c"FERRY_OK",
        1 => c"FERRY_ERR_NULL",
        2 => c"FERRY_ERR_INVALID_ARGUMENT",
        3 => c"FERRY_ERR_PEER_DEAD",
        4 => c"FERRY_ERR_QUEUE_FULL",
        5 => c"FERRY_ERR_TIMEOUT",
        6 => c"FERRY_ERR_TOO_LARGE",
        7 => c"FERRY_ERR_INVALID_SEND",
        8 => c"FERRY_ERR_NO_SENDERS",
        9 => c"FERRY_ERR_SEND_ONCE_DROPPED",
        10 => c"FERRY_ERR_BAD_MESSAGE",
        11 => c"FERRY_ERR_SENDER_MAY_WRITE",
        12 => c"FERRY_ERR_ADDRESS_TAKEN",
        13 => c"FERRY_ERR_REGION",
        14 => c"FERRY_ERR_NAME_TAKEN",
        15 => c"FERRY_ERR_NAME_NOT_FOUND",
        16 => c"FERRY_ERR_NAME_INVALID",
        17 => c"FERRY_ERR_DENIED",
        18 => c"FERRY_ERR_UNAVAILABLE",
        19 => c"FERRY_ERR_PROTOCOL",
        20 => c"FERRY_ERR_REFUSED",
        21 => c"FERRY_ERR_NO_CLIENTS",
        22 => c"FERRY_ERR_NO_REPLY_RIGHT",
        23 => c"FERRY_ERR_IO",
        24 => c"FERRY_ERR_PANIC",
        25 => c"FERRY_ERR_LIMIT",
        26 => c"FERRY_ERR_UNTRUSTED",
        _ => c"FERRY_ERR_UNKNOWN",
    };
    name.as_ptr()
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// The text given for a failure once the calling thread's storage is torn
/// down (a call from a `pthread_key_create` destructor or an `atexit`
/// handler): the failure's own text cannot be kept there any more.
const TORN_DOWN: &CStr = c"this thread is exiting, so the text of its last failure was not kept; the status says what failed";

/// The text of the last failed ferry call on the calling thread (`""` if
/// none failed yet). Successful calls leave it alone.
///
/// # Safety
/// Always safe to call. The string belongs to ferry and stays valid until
/// the next failing ferry call on the same thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn ferry_last_error_message() -> *const c_char {
    LAST.try_with(|l| l.try_borrow().map(|t| t.as_ptr())).ok().and_then(Result::ok).unwrap_or(TORN_DOWN.as_ptr())
}

/// A failure on its way to C: the status and the text for
/// [`ferry_last_error_message`].
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: ferry_status,
    pub(crate) text: String,
}

impl Failure {
    pub(crate) fn new(status: ferry_status, text: impl Into<String>) -> Failure {
        Failure { status, text: text.into() }
    }

    #[cold]
    pub(crate) fn null(what: &str) -> Failure {
        Failure::new(FERRY_ERR_NULL, format!("{what} is NULL"))
    }

    #[cold]
    pub(crate) fn invalid(text: impl Into<String>) -> Failure {
        Failure::new(FERRY_ERR_INVALID_ARGUMENT, text)
    }
}

/// Result of an entry point's body.
pub(crate) type Res<T = ()> = Result<T, Failure>;

/// Runs an entry point's body: catches panics, records the failure's text
/// for this thread and returns its status.
#[inline]
pub(crate) fn guard(body: impl FnOnce() -> Res) -> ferry_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => FERRY_OK,
        Ok(Err(f)) => record(f),
        Err(p) => panicked(p),
    }
}

#[cold]
#[inline(never)]
fn panicked(p: Box<dyn std::any::Any + Send>) -> ferry_status {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    record(Failure::new(FERRY_ERR_PANIC, format!("ferry panicked: {what}")))
}

/// Records a failure's text for this thread and returns its status. Once
/// the thread's storage is torn down (thread-exit destructors, `atexit`
/// handlers, which C code may call ferry from), the text is dropped and
/// [`ferry_last_error_message`] says so: a panic here would abort.
#[cold]
#[inline(never)]
pub(crate) fn record(f: Failure) -> ferry_status {
    let text = CString::new(f.text.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST.try_with(|l| {
        if let Ok(mut last) = l.try_borrow_mut() {
            *last = text;
        }
    });
    f.status
}

/// The one conversion of a failed send. (When `send` hands the message back
/// on failure, this is where it is put back into the caller's handle.)
pub(crate) fn send_failed(e: SendError) -> Failure {
    let status = match e {
        SendError::PeerDead => FERRY_ERR_PEER_DEAD,
        SendError::QueueFull => FERRY_ERR_QUEUE_FULL,
        SendError::Timeout => FERRY_ERR_TIMEOUT,
        SendError::TooLarge(_) => FERRY_ERR_TOO_LARGE,
        SendError::Invalid(_) => FERRY_ERR_INVALID_SEND,
        _ => FERRY_ERR_IO,
    };
    Failure::new(status, e.to_string())
}

impl From<RecvError> for Failure {
    fn from(e: RecvError) -> Failure {
        let status = match e {
            RecvError::NoSenders => FERRY_ERR_NO_SENDERS,
            RecvError::SendOnceDropped => FERRY_ERR_SEND_ONCE_DROPPED,
            RecvError::Timeout => FERRY_ERR_TIMEOUT,
            RecvError::BadMessage(_) => FERRY_ERR_BAD_MESSAGE,
            _ => FERRY_ERR_IO,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<WireError> for Failure {
    fn from(e: WireError) -> Failure {
        Failure::new(FERRY_ERR_BAD_MESSAGE, e.to_string())
    }
}

impl From<RpcError> for Failure {
    fn from(e: RpcError) -> Failure {
        let status = match e {
            RpcError::PeerDead => FERRY_ERR_PEER_DEAD,
            RpcError::Timeout => FERRY_ERR_TIMEOUT,
            RpcError::Protocol { .. } => FERRY_ERR_PROTOCOL,
            RpcError::TooLarge(_) | RpcError::ReplyTooLarge => FERRY_ERR_TOO_LARGE,
            RpcError::Refused(_) => FERRY_ERR_REFUSED,
            RpcError::NoClients => FERRY_ERR_NO_CLIENTS,
            RpcError::Forked => FERRY_ERR_INVALID_ARGUMENT,
            _ => FERRY_ERR_IO,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<NameError> for Failure {
    fn from(e: NameError) -> Failure {
        let status = match e {
            NameError::Taken => FERRY_ERR_NAME_TAKEN,
            NameError::NotFound => FERRY_ERR_NAME_NOT_FOUND,
            NameError::Invalid => FERRY_ERR_NAME_INVALID,
            NameError::Denied => FERRY_ERR_DENIED,
            NameError::Unavailable(_) | NameError::NotRunning { .. } => FERRY_ERR_UNAVAILABLE,
            NameError::LimitReached { .. } => FERRY_ERR_LIMIT,
            NameError::Impostor { .. } | NameError::UnsafeDirectory { .. } => FERRY_ERR_UNTRUSTED,
            NameError::Refused(_) => FERRY_ERR_REFUSED,
            _ => FERRY_ERR_PROTOCOL,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<RegionError> for Failure {
    fn from(e: RegionError) -> Failure {
        let status = match e {
            RegionError::SenderMayWrite(_) => FERRY_ERR_SENDER_MAY_WRITE,
            RegionError::AddressTaken { .. } | RegionError::NoSenderAddress => FERRY_ERR_ADDRESS_TAKEN,
            RegionError::TooLong { .. } => FERRY_ERR_INVALID_ARGUMENT,
            RegionError::TooLarge { .. } => FERRY_ERR_TOO_LARGE,
            _ => FERRY_ERR_REGION,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<MapError> for Failure {
    fn from(e: MapError) -> Failure {
        e.error.into()
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::new(FERRY_ERR_IO, e.to_string())
    }
}
