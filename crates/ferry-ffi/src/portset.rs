//! Port sets: one thread receiving from many ports and watching send rights
//! for dead names.
//!
//! Members are named by small numbers this layer hands out (the Rust
//! `MemberId` stays inside).

use std::collections::HashMap;
use std::os::fd::AsRawFd;

use ferry::{Event, MemberId, PortSet};

use crate::handle::{free, give, obj, obj_mut, out, put, take};
use crate::message::ferry_message;
use crate::port::{ferry_receive_right, ferry_send_right};
use crate::status::{ferry_status, guard, Failure};
use crate::timeout;

/// A set of receive rights and dead-name watches waited on together
/// (opaque). Free with [`ferry_port_set_free`].
#[derive(Debug)]
pub struct ferry_port_set {
    set: PortSet,
    ids: HashMap<u32, MemberId>,
    names: HashMap<MemberId, u32>,
    next: u32,
}

impl ferry_port_set {
    fn name(&mut self, id: MemberId) -> u32 {
        if let Some(n) = self.names.get(&id) {
            return *n;
        }
        self.next = self.next.wrapping_add(1);
        while self.ids.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        self.ids.insert(self.next, id);
        self.names.insert(id, self.next);
        self.next
    }

    fn forget(&mut self, n: u32) {
        if let Some(id) = self.ids.remove(&n) {
            self.names.remove(&id);
        }
    }
}

/// What `ferry_port_set_wait` reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferry_event_kind {
    /// A message arrived on a member port (`*out_msg` holds it).
    FERRY_EVENT_MESSAGE = 1,
    /// Every send right to a member port is gone: nothing can arrive there
    /// again. Reported once; the port stays in the set until removed.
    FERRY_EVENT_NO_SENDERS = 2,
    /// A send-once right to a member port was destroyed unused.
    FERRY_EVENT_SEND_ONCE_DROPPED = 3,
    /// A malformed message arrived on a member port and was discarded (the
    /// reason is in `ferry_last_error_message`).
    FERRY_EVENT_BAD_MESSAGE = 4,
    /// The receiver of a watched send right is gone; the watch is removed.
    FERRY_EVENT_DEAD_NAME = 5,
}

/// Creates an empty port set.
///
/// # Safety
/// `out_set` points at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_new(out_set: *mut *mut ferry_port_set) -> ferry_status {
    guard(|| {
        let o = out(out_set, "out_set")?;
        let set = PortSet::new()?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_port_set { set, ids: HashMap::new(), names: HashMap::new(), next: 0 }) };
        Ok(())
    })
}

/// Frees a port set and every receive right in it. NULL is ignored.
///
/// # Safety
/// `set` is NULL or a live port-set handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_free(set: *mut ferry_port_set) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(set) };
        Ok(())
    });
}

/// Adds a port, **consuming** its receive right (whatever the outcome);
/// `*member` names it in events.
///
/// # Safety
/// `set` is a live port-set handle used by no other call; `right` is NULL
/// or a live receive-right handle not used again; `member` points at a
/// writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_insert(set: *mut ferry_port_set, right: *mut ferry_receive_right, member: *mut u32) -> ferry_status {
    guard(|| {
        // SAFETY: the caller gives `right` up.
        let rx = unsafe { take(right, "right") }?;
        let m = out(member, "member")?;
        // SAFETY: header contract: a live handle used by no other call.
        let s = unsafe { obj_mut(set, "set") }?;
        let id = s.set.insert(rx.right);
        let n = s.name(id);
        // SAFETY: `m` checked non-null.
        unsafe { put(m, n) };
        Ok(())
    })
}

/// Takes port `member` out of the set, its receive right into
/// `*out_right`.
///
/// # Safety
/// `set` is a live port-set handle used by no other call; `out_right`
/// points at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_remove(set: *mut ferry_port_set, member: u32, out_right: *mut *mut ferry_receive_right) -> ferry_status {
    guard(|| {
        let o = out(out_right, "out_right")?;
        // SAFETY: header contract: a live handle used by no other call.
        let s = unsafe { obj_mut(set, "set") }?;
        let id = *s.ids.get(&member).ok_or_else(|| Failure::invalid(format!("no member {member}")))?;
        let right = s.set.remove(id).ok_or_else(|| Failure::invalid(format!("member {member} is not a port")))?;
        s.forget(member);
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_receive_right { right }) };
        Ok(())
    })
}

/// Watches a send right for its port's death (a dead name); `*member`
/// names the watch. The set keeps its own copy of the right.
///
/// # Safety
/// `set` is a live port-set handle used by no other call; `right` is a live
/// send-right handle; `member` points at a writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_watch_dead_name(set: *mut ferry_port_set, right: *const ferry_send_right, member: *mut u32) -> ferry_status {
    guard(|| {
        let m = out(member, "member")?;
        // SAFETY: header contract: live handles, `set` used by no other call.
        let (s, tx) = unsafe { (obj_mut(set, "set")?, obj(right, "right")?) };
        let id = s.set.watch_dead_name(&tx.right)?;
        let n = s.name(id);
        // SAFETY: `m` checked non-null.
        unsafe { put(m, n) };
        Ok(())
    })
}

/// Stops dead-name watch `member` and frees the set's copy of the right
/// (which otherwise keeps the watched port from seeing no senders while
/// the set lives); a stopped watch reports nothing.
/// `FERRY_ERR_INVALID_ARGUMENT` if `member` is no watch (a port, or a watch
/// already stopped or reported as a dead name).
///
/// # Safety
/// `set` is a live port-set handle used by no other call.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_unwatch(set: *mut ferry_port_set, member: u32) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle used by no other call.
        let s = unsafe { obj_mut(set, "set") }?;
        let id = *s.ids.get(&member).ok_or_else(|| Failure::invalid(format!("no member {member}")))?;
        if !s.set.unwatch(id) {
            return Err(Failure::invalid(format!("member {member} is not a dead-name watch")));
        }
        s.forget(member);
        Ok(())
    })
}

/// Waits for the next event on any member, as `timeout_ms` allows:
/// `*kind` says what happened to `*member`; for `FERRY_EVENT_MESSAGE`,
/// `*out_msg` holds the message (the caller frees it), otherwise NULL.
///
/// # Safety
/// `set` is a live port-set handle used by no other call; `kind`,
/// `member` and `out_msg` point at writable storage.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_wait(
    set: *mut ferry_port_set,
    timeout_ms: i64,
    kind: *mut ferry_event_kind,
    member: *mut u32,
    out_msg: *mut *mut ferry_message,
) -> ferry_status {
    guard(|| {
        let (k, m, o) = (out(kind, "kind")?, out(member, "member")?, out(out_msg, "out_msg")?);
        // SAFETY: header contract: a live handle used by no other call.
        let s = unsafe { obj_mut(set, "set") }?;
        let event = s.set.wait(timeout(timeout_ms))?;
        use ferry_event_kind::*;
        let (what, id, msg) = match event {
            Event::Message(id, msg) => (FERRY_EVENT_MESSAGE, id, Some(msg)),
            Event::NoSenders(id) => (FERRY_EVENT_NO_SENDERS, id, None),
            Event::SendOnceDropped(id) => (FERRY_EVENT_SEND_ONCE_DROPPED, id, None),
            Event::BadMessage(id, w) => {
                // The text is for the caller to log; the call itself succeeded.
                crate::status::record(Failure::from(w));
                (FERRY_EVENT_BAD_MESSAGE, id, None)
            }
            Event::DeadName(id) => (FERRY_EVENT_DEAD_NAME, id, None),
        };
        let n = s.name(id);
        if what == FERRY_EVENT_DEAD_NAME {
            s.forget(n);
        }
        // SAFETY: all three checked non-null.
        unsafe {
            put(k, what);
            put(m, n);
            match msg {
                Some(msg) => give(o, ferry_message::received(msg, None)),
                None => put(o, std::ptr::null_mut()),
            }
        }
        Ok(())
    })
}

/// A descriptor for an event loop (`poll`, `epoll`, libuv, ...) that polls
/// readable when [`ferry_port_set_wait`] with a zero timeout has an event.
/// Call it with a zero timeout until it says `FERRY_ERR_TIMEOUT`, then wait
/// for the descriptor again. The set's registrations are brought up to
/// date by this call and by every wait; the descriptor stays the same for
/// the set's life. It belongs to the set: do not read, close or change it.
///
/// # Safety
/// `set` is a live port-set handle used by no other call; `out_fd` points
/// at a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn ferry_port_set_fd(set: *mut ferry_port_set, out_fd: *mut std::ffi::c_int) -> ferry_status {
    guard(|| {
        let o = out(out_fd, "out_fd")?;
        // SAFETY: header contract: a live handle used by no other call.
        let s = unsafe { obj_mut(set, "set") }?;
        let fd = s.set.ready_fd()?.as_raw_fd();
        // SAFETY: `o` checked non-null.
        unsafe { put(o, fd) };
        Ok(())
    })
}
