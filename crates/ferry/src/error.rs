//! Errors a caller can act on: one enum per family of operations.
//!
//! Each variant names a situation (the peer is dead, the queue is full, the
//! message was malformed and why); an `std::io::Error` appears only as the
//! cause of [`SendError::Io`] and friends, for failures ferry cannot classify.

use std::fmt;
use std::io;

/// Why a received message was rejected. Every descriptor that came with it
/// has already been closed when the caller sees one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the fixed header (or than the header says follow).
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// The first four bytes are not ferry's magic number.
    BadMagic(u32),
    /// A version this implementation does not speak.
    UnknownVersion(u8),
    /// A later version than the message needs (every message is written in
    /// the lowest version that expresses it; see
    /// [`crate::wire::needed_version`]).
    NeedlessVersion(u8),
    /// A reserved field or flag bit is not zero.
    ReservedNotZero,
    /// The declared inline length and item count do not add up to the
    /// datagram's length.
    LengthMismatch {
        /// Length the header implies.
        declared: usize,
        /// Length received.
        actual: usize,
    },
    /// More items than [`crate::message::MAX_ITEMS`].
    TooManyItems(usize),
    /// More inline bytes than [`crate::message::MAX_INLINE`].
    InlineTooLarge(usize),
    /// The header declares more descriptors than [`crate::message::MAX_FDS`]
    /// (the most the kernel passes with one message).
    TooManyFds(usize),
    /// The header's descriptor count, or the items' counts, disagree with the
    /// descriptors the kernel delivered.
    FdCountMismatch {
        /// Descriptors the message declares.
        declared: usize,
        /// Descriptors that arrived.
        received: usize,
    },
    /// The kernel dropped descriptors (more than it passes at once, or the
    /// receiver is out of descriptors).
    FdsTruncated,
    /// The datagram was larger than any valid message.
    Oversized,
    /// An item kind this implementation does not know.
    UnknownItemKind(u8),
    /// An item declares a descriptor count its kind does not allow.
    BadItemFdCount {
        /// Index of the item.
        item: usize,
        /// Descriptors it declared.
        count: usize,
    },
    /// A descriptor declared as a right is not a ferry port socket.
    NotAPort {
        /// Index of the item.
        item: usize,
    },
    /// The reply flag is set but item 0 is not a send or send-once right.
    BadReplyRight,
    /// A receive right for the very port the message arrived on.
    ReceiveRightToSelf,
    /// An out-of-line region's descriptor or description is invalid.
    BadRegion {
        /// Index of the item.
        item: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A region sent by value is missing the seals that make it immutable.
    NotSealed {
        /// Index of the item.
        item: usize,
    },
    /// A memory-object item (a userfaultfd or a pager's page cache) whose
    /// descriptor or description is invalid.
    BadPagerItem {
        /// Index of the item.
        item: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use WireError::*;
        match self {
            Truncated { need, got } => write!(f, "message truncated: need {need} bytes, got {got}"),
            BadMagic(m) => write!(f, "not a ferry message (magic {m:#010x})"),
            UnknownVersion(v) => write!(f, "unknown wire-format version {v}"),
            NeedlessVersion(v) => write!(f, "wire-format version {v} used for a message an earlier version expresses"),
            ReservedNotZero => write!(f, "reserved header field or flag bit is set"),
            LengthMismatch { declared, actual } => {
                write!(f, "header declares {declared} bytes but the message has {actual}")
            }
            TooManyItems(n) => write!(f, "{n} items exceed the limit of {}", crate::message::MAX_ITEMS),
            InlineTooLarge(n) => write!(f, "{n} inline bytes exceed the limit of {}", crate::message::MAX_INLINE),
            TooManyFds(n) => write!(f, "{n} descriptors exceed the limit of {}", crate::message::MAX_FDS),
            FdCountMismatch { declared, received } => {
                write!(f, "message declares {declared} descriptors but {received} arrived")
            }
            FdsTruncated => write!(f, "the kernel dropped descriptors (too many, or the receiver is out of descriptors)"),
            Oversized => write!(f, "datagram larger than any valid ferry message"),
            UnknownItemKind(k) => write!(f, "unknown item kind {k}"),
            BadItemFdCount { item, count } => write!(f, "item {item} declares {count} descriptors, not allowed for its kind"),
            NotAPort { item } => write!(f, "item {item} claims to be a port right but its descriptor is not a port"),
            BadReplyRight => write!(f, "reply flag set but item 0 is not a send or send-once right"),
            ReceiveRightToSelf => write!(f, "message carries the receive right of the port it arrived on"),
            BadRegion { item, reason } => write!(f, "item {item}: bad out-of-line region: {reason}"),
            NotSealed { item } => write!(f, "item {item}: region sent by value is not sealed against writes"),
            BadPagerItem { item, reason } => write!(f, "item {item}: bad memory-object item: {reason}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Why a send failed. The message itself is not lost: it comes back inside
/// [`SendFailed`], with every right and region it carried still owned by
/// the caller.
#[derive(Debug)]
pub enum SendError {
    /// The receive right is gone: the port is a dead name.
    PeerDead,
    /// The queue is full and the timeout was zero.
    QueueFull,
    /// The queue stayed full until the timeout expired.
    Timeout,
    /// The message breaks a limit of the wire format (too many items, too
    /// many inline bytes, too many descriptors).
    TooLarge(String),
    /// A send-once right that was already used, or a message that tries to
    /// send a port's receive right to that same port.
    Invalid(&'static str),
    /// The kernel refused for another reason.
    Io(io::Error),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::PeerDead => write!(f, "the port's receiver is gone (dead name)"),
            SendError::QueueFull => write!(f, "the port's queue is full; retry or send with a timeout"),
            SendError::Timeout => write!(f, "the port's queue stayed full until the timeout"),
            SendError::TooLarge(why) => write!(f, "message too large: {why}"),
            SendError::Invalid(why) => write!(f, "invalid send: {why}"),
            SendError::Io(e) => write!(f, "send failed: {e}"),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// A send that failed, with the message it carried, intact, and (for rights
/// consumed by sending, such as [`crate::SendOnceRight`]) the right itself,
/// as `std::sync::mpsc::TrySendError` returns its value.
///
/// A message is sent in one `sendmsg(2)` on a sequenced-packet socket, which
/// queues the whole datagram with all its descriptors or nothing; so every
/// [`SendError`] leaves the message whole: its rights are still rights of
/// this process, a lent region is still out of its pool only as far as this
/// message holds it, a region made by move is still this process's to send
/// again. Dropping the `SendFailed` drops all of it (a receive right is then
/// destroyed, a send-once right reports [`RecvError::SendOnceDropped`] to its
/// port, a lent region returns to its pool).
///
/// `R` is what else comes back: `()` for [`crate::SendRight::send`], the
/// [`crate::SendOnceRight`] for [`crate::SendOnceRight::send`], the
/// [`crate::Reply`] for [`crate::Reply::send`]. It converts into its
/// [`SendError`] with `?` or `.into()` where the message is not wanted.
///
/// ```
/// use ferry::{Message, SendError, Timeout};
/// let (mut rx, tx) = ferry::port_with(ferry::PortOptions { queue_limit: Some(4096) })?;
/// let (other, _keep) = ferry::port()?;
/// // Fill the queue, then try to send a receive right.
/// while tx.send(Message::new(0).with_body(vec![0u8; 512]), Timeout::Zero).is_ok() {}
/// let failed = tx.send(Message::new(1).with_item(other), Timeout::Zero).unwrap_err();
/// assert!(matches!(failed.error(), SendError::QueueFull));
/// let msg = failed.into_message();               // the receive right is still ours
/// while rx.try_recv().is_ok() {}                  // drain, then retry
/// tx.send(msg, Timeout::Zero)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SendFailed<R = ()> {
    error: SendError,
    message: crate::Message,
    right: R,
}

impl<R> SendFailed<R> {
    pub(crate) fn new(error: SendError, message: crate::Message, right: R) -> Self {
        SendFailed { error, message, right }
    }

    /// Why the send failed.
    pub fn error(&self) -> &SendError {
        &self.error
    }

    /// The message that was not sent.
    pub fn message(&self) -> &crate::Message {
        &self.message
    }

    /// The right that was not used up (for a send-once right or a reply
    /// right; `()` for a send right, which the caller kept anyway).
    pub fn right(&self) -> &R {
        &self.right
    }

    /// Takes the message back (dropping the right that came back with it, if
    /// any), to retry or to recover its rights and regions.
    pub fn into_message(self) -> crate::Message {
        self.message
    }

    /// Everything: the error, the message, and the right.
    pub fn into_parts(self) -> (SendError, crate::Message, R) {
        (self.error, self.message, self.right)
    }

    /// Only the error; the message and the right are dropped.
    pub fn into_error(self) -> SendError {
        self.error
    }

    pub(crate) fn map_right<S>(self, f: impl FnOnce(R) -> S) -> SendFailed<S> {
        SendFailed { error: self.error, message: self.message, right: f(self.right) }
    }
}

impl<R> fmt::Display for SendFailed<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (the unsent message was returned to the sender)", self.error)
    }
}

impl<R: fmt::Debug> std::error::Error for SendFailed<R> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<R> From<SendFailed<R>> for SendError {
    fn from(f: SendFailed<R>) -> SendError {
        f.error
    }
}

/// Why a receive failed.
#[derive(Debug)]
pub enum RecvError {
    /// Every send right is gone and the queue is empty: nothing can ever
    /// arrive through the port's send rights again (Mach's no-senders).
    NoSenders,
    /// The only way a message could still come was a send-once right, and it
    /// was destroyed unused (its holder dropped it or died).
    SendOnceDropped,
    /// Nothing arrived before the timeout (or the queue was empty and the
    /// timeout was zero).
    Timeout,
    /// A message arrived but was malformed; it was discarded and every
    /// descriptor it carried was closed. The port remains usable.
    BadMessage(WireError),
    /// The kernel refused for another reason.
    Io(io::Error),
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::NoSenders => write!(f, "no senders: every send right to this port is gone"),
            RecvError::SendOnceDropped => write!(f, "a send-once right to this port was destroyed unused"),
            RecvError::Timeout => write!(f, "no message before the timeout"),
            RecvError::BadMessage(w) => write!(f, "malformed message discarded: {w}"),
            RecvError::Io(e) => write!(f, "receive failed: {e}"),
        }
    }
}

impl std::error::Error for RecvError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecvError::BadMessage(w) => Some(w),
            RecvError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<WireError> for RecvError {
    fn from(w: WireError) -> Self {
        crate::trace::event!(warn, reason = %w, "message rejected; its descriptors are closed");
        RecvError::BadMessage(w)
    }
}

pub(crate) fn io_err(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_for_any_thread<E: std::error::Error + Send + Sync + 'static>() {}

    /// `?` can turn a failed send into `Box<dyn Error + Send + Sync>`.
    #[test]
    fn send_failed_is_an_error_for_any_thread() {
        error_for_any_thread::<SendFailed>();
        error_for_any_thread::<SendFailed<crate::SendOnceRight>>();
        error_for_any_thread::<SendFailed<crate::Reply>>();
    }
}
