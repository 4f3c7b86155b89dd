//! Ports and rights: make a port, receive on its receive right, send
//! through send and send-once rights, clone send rights, watch for dead
//! names; a send-once right without a port (a reply pair).

use std::os::fd::{AsFd, AsRawFd};

use ferry::{ReceiveRight, ReplyReceiver, SendOnceRight, SendRight};

use crate::handle::{free, give, obj, obj_mut, out, put, take};
use crate::message::{ferry_message, send_contents};
use crate::status::{ferry_status, guard};
use crate::timeout;

/// A port's receive right (opaque). Exactly one exists per port; free it
/// with [`ferry_receive_right_free`] (senders then see a dead name).
#[derive(Debug)]
pub struct ferry_receive_right {
    pub(crate) right: ReceiveRight,
}

/// A send right (opaque). Free with [`ferry_send_right_free`]. A `const`
/// send right may be used from several threads at once.
#[derive(Debug)]
pub struct ferry_send_right {
    pub(crate) right: SendRight,
}

/// A send-once right (opaque): good for exactly one message. Sending
/// consumes it; freeing it unused tells the receiver
/// (`FERRY_ERR_SEND_ONCE_DROPPED`).
#[derive(Debug)]
pub struct ferry_send_once_right {
    pub(crate) right: SendOnceRight,
}

/// The receiving end of one send-once right made by [`ferry_reply_pair_new`]
/// (opaque): it gets that right's one message, or learns that the right
/// was destroyed unused. Free with [`ferry_reply_receiver_free`].
#[derive(Debug)]
pub struct ferry_reply_receiver {
    pub(crate) receiver: ReplyReceiver,
}

/// Creates a send-once right and the receiver its one message arrives on,
/// without a port (one socket pair): the cheap way to wait for one reply.
///
/// # Safety
/// `out_receiver` and `out_once` point at writable storage for a pointer
/// each; on success they hold new handles the caller frees.
#[no_mangle]
pub unsafe extern "C" fn ferry_reply_pair_new(out_receiver: *mut *mut ferry_reply_receiver, out_once: *mut *mut ferry_send_once_right) -> ferry_status {
    guard(|| {
        let (r, o) = (out(out_receiver, "out_receiver")?, out(out_once, "out_once")?);
        let (receiver, once) = ferry::reply_pair()?;
        // SAFETY: both checked non-null, writable per the header.
        unsafe {
            give(r, ferry_reply_receiver { receiver });
            give(o, ferry_send_once_right { right: once });
        }
        Ok(())
    })
}

/// Receives the one message, waiting as `timeout_ms` says (negative:
/// forever; 0: not at all). `FERRY_ERR_TIMEOUT` when it has not come;
/// `FERRY_ERR_SEND_ONCE_DROPPED` when the right was destroyed unused;
/// `FERRY_ERR_BAD_MESSAGE` when it was malformed (discarded);
/// `FERRY_ERR_NO_SENDERS` once one of these or the message was returned.
///
/// # Safety
/// `receiver` is a live handle used by no other call meanwhile; `out_msg`
/// points at writable storage for a pointer; on success it holds a new
/// message the caller frees.
#[no_mangle]
pub unsafe extern "C" fn ferry_reply_receiver_recv(receiver: *mut ferry_reply_receiver, timeout_ms: i64, out_msg: *mut *mut ferry_message) -> ferry_status {
    guard(|| {
        let o = out(out_msg, "out_msg")?;
        // SAFETY: header contract: a live handle used by no other call.
        let r = unsafe { obj_mut(receiver, "receiver") }?;
        let msg = r.receiver.recv(timeout(timeout_ms))?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_message::received(msg, None)) };
        Ok(())
    })
}

/// Frees a reply receiver (a send through its right then fails with
/// `FERRY_ERR_PEER_DEAD`). NULL is ignored.
///
/// # Safety
/// `receiver` is NULL or a live reply-receiver handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_reply_receiver_free(receiver: *mut ferry_reply_receiver) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(receiver) };
        Ok(())
    });
}

/// Creates a port: its receive right and a first send right.
///
/// # Safety
/// `out_receive` and `out_send` point at writable storage for a pointer
/// each; on success they hold new handles the caller frees.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_new(out_receive: *mut *mut ferry_receive_right, out_send: *mut *mut ferry_send_right) -> ferry_status {
    guard(|| {
        let (r, s) = (out(out_receive, "out_receive")?, out(out_send, "out_send")?);
        let (rx, tx) = ferry::port()?;
        // SAFETY: both checked non-null, writable per the header.
        unsafe {
            give(r, ferry_receive_right { right: rx });
            give(s, ferry_send_right { right: tx });
        }
        Ok(())
    })
}

/// Frees a receive right: the port dies, its queued messages are closed and
/// its senders see a dead name. NULL is ignored.
///
/// # Safety
/// `right` is NULL or a live receive-right handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_receive_right_free(right: *mut ferry_receive_right) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(right) };
        Ok(())
    });
}

/// Receives the next message, waiting as `timeout_ms` says (negative:
/// forever; 0: not at all). `FERRY_ERR_NO_SENDERS` once every send right is
/// gone and the queue is empty; `FERRY_ERR_BAD_MESSAGE` for a malformed
/// message (discarded, its descriptors closed; the port stays usable).
///
/// # Safety
/// `right` is a live receive-right handle used by no other call meanwhile;
/// `out_msg` points at writable storage for a pointer; on success it holds
/// a new message the caller frees.
#[no_mangle]
pub unsafe extern "C" fn ferry_receive_right_recv(right: *mut ferry_receive_right, timeout_ms: i64, out_msg: *mut *mut ferry_message) -> ferry_status {
    guard(|| {
        let o = out(out_msg, "out_msg")?;
        // SAFETY: header contract: a live handle used by no other call.
        let rx = unsafe { obj_mut(right, "right") }?;
        let msg = rx.right.recv(timeout(timeout_ms))?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_message::received(msg, None)) };
        Ok(())
    })
}

/// Like [`ferry_receive_right_recv`], but into an existing message handle,
/// whose contents are replaced (and closed) on success and left alone on
/// failure.
///
/// # Safety
/// `right` and `msg` are live handles used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_receive_right_recv_into(right: *mut ferry_receive_right, msg: *mut ferry_message, timeout_ms: i64) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: live handles used by no other call.
        let (rx, m) = unsafe { (obj_mut(right, "right")?, obj_mut(msg, "msg")?) };
        let got = rx.right.recv(timeout(timeout_ms))?;
        m.refill(got, None);
        Ok(())
    })
}

/// Makes a send-once right to this port (for a reply).
///
/// # Safety
/// `right` is a live receive-right handle used by no other call meanwhile;
/// `out_right` points at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_receive_right_make_send_once(right: *mut ferry_receive_right, out_right: *mut *mut ferry_send_once_right) -> ferry_status {
    guard(|| {
        let o = out(out_right, "out_right")?;
        // SAFETY: header contract: a live handle used by no other call.
        let rx = unsafe { obj_mut(right, "right") }?;
        let once = rx.right.make_send_once()?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_send_once_right { right: once }) };
        Ok(())
    })
}

/// Frees a send right. NULL is ignored.
///
/// # Safety
/// `right` is NULL or a live send-right handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_right_free(right: *mut ferry_send_right) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(right) };
        Ok(())
    });
}

/// Makes another send right to the same port.
///
/// # Safety
/// `right` is a live send-right handle; `out_right` points at writable
/// storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_right_clone(right: *const ferry_send_right, out_right: *mut *mut ferry_send_right) -> ferry_status {
    guard(|| {
        let o = out(out_right, "out_right")?;
        // SAFETY: header contract: a live handle.
        let tx = unsafe { obj(right, "right") }?;
        let copy = tx.right.try_clone()?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_send_right { right: copy }) };
        Ok(())
    })
}

/// Sends the contents of `msg` to the port, waiting for queue space as
/// `timeout_ms` says. The message handle stays the caller's: on success it
/// is left empty (its operation id kept) to free or fill again; on failure
/// (nothing was sent) it holds all it held, its rights, regions and reply
/// right included, as in the Rust API: send it again, or free it (which
/// closes them). Do not add its items to it again.
///
/// # Safety
/// `right` is a live send-right handle (it may be shared between threads);
/// `msg` is a live message handle used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_right_send(right: *const ferry_send_right, msg: *mut ferry_message, timeout_ms: i64) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: live handles, `msg` used by no other call.
        let (tx, m) = unsafe { (obj(right, "right")?, obj_mut(msg, "msg")?) };
        send_contents(m, |x| tx.right.send(x, timeout(timeout_ms)))
    })
}

/// Whether the port's receive right is gone (a dead name).
///
/// # Safety
/// `right` is a live send-right handle; `dead` points at a writable `bool`.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_right_is_dead(right: *const ferry_send_right, dead: *mut bool) -> ferry_status {
    guard(|| {
        let d = out(dead, "dead")?;
        // SAFETY: header contract: a live handle.
        let tx = unsafe { obj(right, "right") }?;
        // SAFETY: `d` checked non-null.
        unsafe { put(d, tx.right.is_dead()) };
        Ok(())
    })
}

/// Waits until the port's receive right is gone; `FERRY_ERR_TIMEOUT` if it
/// is still alive after `timeout_ms`.
///
/// # Safety
/// `right` is a live send-right handle.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_right_wait_dead(right: *const ferry_send_right, timeout_ms: i64) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle.
        let tx = unsafe { obj(right, "right") }?;
        if tx.right.wait_dead(timeout(timeout_ms)) {
            Ok(())
        } else {
            Err(crate::status::Failure::new(ferry_status::FERRY_ERR_TIMEOUT, "the port is still alive"))
        }
    })
}

/// Frees a send-once right unused (its port's receiver sees
/// `FERRY_ERR_SEND_ONCE_DROPPED` if nothing else can arrive). NULL is
/// ignored.
///
/// # Safety
/// `right` is NULL or a live send-once handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_once_right_free(right: *mut ferry_send_once_right) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(right) };
        Ok(())
    });
}

/// Sends the contents of `msg` through the send-once right, **consuming**
/// `right` (whatever the outcome). The message handle stays the caller's,
/// as with [`ferry_send_right_send`].
///
/// # Safety
/// `right` is NULL or a live send-once handle not used again; `msg` is a
/// live message handle used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_once_right_send(right: *mut ferry_send_once_right, msg: *mut ferry_message, timeout_ms: i64) -> ferry_status {
    guard(|| {
        // SAFETY: the caller gives `right` up.
        let once = unsafe { take(right, "right") }?;
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        send_contents(m, |x| once.right.send(x, timeout(timeout_ms)))
    })
}

/// A descriptor for an event loop (`poll`, `epoll`, libuv, ...) that polls
/// readable when [`ferry_receive_right_recv`] with a zero timeout has
/// something to return: a message, a send-once right dropped, no senders.
/// Call it with a zero timeout until it says `FERRY_ERR_TIMEOUT`, then wait
/// for the descriptor again. It stands for the port's socket and every
/// send-once right made on it (later ones included) and stays the same for
/// the right's life. It belongs to the right: do not read, close or change
/// it; it is closed when the right is freed or moved.
///
/// # Safety
/// `right` is a live receive-right handle used by no other call meanwhile;
/// `out_fd` points at a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn ferry_receive_right_fd(right: *mut ferry_receive_right, out_fd: *mut std::ffi::c_int) -> ferry_status {
    guard(|| {
        let o = out(out_fd, "out_fd")?;
        // SAFETY: header contract: a live handle used by no other call.
        let rx = unsafe { obj_mut(right, "right") }?;
        let fd = rx.right.readiness_fd()?.as_raw_fd();
        // SAFETY: `o` checked non-null.
        unsafe { put(o, fd) };
        Ok(())
    })
}

/// The right's socket, for an event loop: it polls writable while a send
/// with a zero timeout may succeed (the queue has room), and reports a
/// hang-up once the port's receive right is gone. It belongs to the right:
/// do not read, write, close or change it.
///
/// # Safety
/// `right` is a live send-right handle; `out_fd` points at a writable
/// `int`.
#[no_mangle]
pub unsafe extern "C" fn ferry_send_right_fd(right: *const ferry_send_right, out_fd: *mut std::ffi::c_int) -> ferry_status {
    guard(|| {
        let o = out(out_fd, "out_fd")?;
        // SAFETY: header contract: a live handle.
        let tx = unsafe { obj(right, "right") }?;
        // SAFETY: `o` checked non-null.
        unsafe { put(o, tx.right.as_fd().as_raw_fd()) };
        Ok(())
    })
}

/// The receiver's socket, for an event loop: it polls readable when
/// [`ferry_reply_receiver_recv`] with a zero timeout has the answer (the
/// message, or that the right was dropped), and stays readable once it was
/// taken, so stop watching it then. It belongs to the receiver: do not
/// read, close or change it.
///
/// # Safety
/// `receiver` is a live reply-receiver handle; `out_fd` points at a
/// writable `int`.
#[no_mangle]
pub unsafe extern "C" fn ferry_reply_receiver_fd(receiver: *const ferry_reply_receiver, out_fd: *mut std::ffi::c_int) -> ferry_status {
    guard(|| {
        let o = out(out_fd, "out_fd")?;
        // SAFETY: header contract: a live handle.
        let r = unsafe { obj(receiver, "receiver") }?;
        // SAFETY: `o` checked non-null.
        unsafe { put(o, r.receiver.as_fd().as_raw_fd()) };
        Ok(())
    })
}
