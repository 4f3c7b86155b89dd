//! Messages: build one (operation id, body, rights, regions, a reply
//! right), send it, and take a received one apart item by item.
//!
//! A `ferry_message` keeps its items in an indexed list: a received
//! message's items stay at the index they arrived at, and taking one out
//! (`ferry_message_take_send_right`, `ferry_message_map_region`, …) leaves
//! `FERRY_ITEM_TAKEN` in its place, so indices never shift. Items still in a
//! message when it is freed are closed with it.

use std::mem;

use ferry::rpc::ConnId;
use ferry::{Item, Message, Reply, SendFailed};

use crate::handle::{bytes, free, give, obj, obj_mut, out, put, take};
use crate::port::{ferry_receive_right, ferry_send_once_right, ferry_send_right};
use crate::region::{ferry_mapped_region, ferry_region, map_options, Mapped};
use crate::status::{ferry_status, guard, send_failed, Failure, Res};

/// A message (opaque): an operation id, inline bytes, items and an optional
/// reply right. Free with [`ferry_message_free`].
#[derive(Debug, Default)]
pub struct ferry_message {
    /// Operation id, body and sender; never items or a reply right.
    pub(crate) msg: Message,
    /// The reply right, kept here so it can be looked at without taking it.
    pub(crate) reply: Option<Reply>,
    /// The items by index; `None` once taken out.
    pub(crate) items: Vec<Option<Item>>,
    /// For an RPC request: the connection it came on. For a reply made with
    /// `ferry_message_new_reply`: the connection it answers.
    pub(crate) conn: Option<ConnId>,
}

impl ferry_message {
    /// Wraps a received message, its items moved into the indexed list.
    pub(crate) fn received(mut msg: Message, conn: Option<ConnId>) -> ferry_message {
        // Most messages carry no item: skip the conversion for them.
        let items = if msg.items().is_empty() { Vec::new() } else { msg.take_items().into_iter().map(Some).collect() };
        let reply = msg.take_reply();
        ferry_message { msg, items, reply, conn }
    }

    /// Replaces the contents with a received message's (what was there is
    /// closed).
    pub(crate) fn refill(&mut self, msg: Message, conn: Option<ConnId>) {
        *self = ferry_message::received(msg, conn);
    }

    /// Takes the contents out for sending, leaving the handle empty (its
    /// operation id kept).
    /// Puts the contents of an unsent message back (the inverse of
    /// [`take_contents`](Self::take_contents)).
    pub(crate) fn put_back(&mut self, mut unsent: Message) {
        self.reply = unsent.take_reply();
        self.items = unsent.take_items().into_iter().map(Some).collect();
        self.msg = unsent;
    }

    pub(crate) fn take_contents(&mut self) -> Message {
        let op = self.msg.op();
        let mut msg = mem::replace(&mut self.msg, Message::new(op));
        if !self.items.is_empty() {
            for item in self.items.drain(..).flatten() {
                msg = msg.with_item(item);
            }
        }
        match self.reply.take() {
            Some(r) => msg.with_reply(r),
            None => msg,
        }
    }

    fn push(&mut self, item: Item) -> Res {
        if self.items.len() >= ferry::message::MAX_ITEMS {
            return Err(Failure::new(ferry_status::FERRY_ERR_TOO_LARGE, format!("a message holds at most {} items", ferry::message::MAX_ITEMS)));
        }
        self.items.push(Some(item));
        Ok(())
    }

    fn slot(&mut self, index: usize) -> Res<&mut Option<Item>> {
        let n = self.items.len();
        self.items.get_mut(index).ok_or_else(|| Failure::invalid(format!("item {index} does not exist (the message has {n})")))
    }

    /// Takes item `index` out if `pick` accepts it; otherwise leaves it.
    pub(crate) fn take_item<T>(&mut self, index: usize, want: &str, pick: impl FnOnce(Item) -> Result<T, Item>) -> Res<T> {
        let slot = self.slot(index)?;
        let item = slot.take().ok_or_else(|| Failure::invalid(format!("item {index} was already taken")))?;
        pick(item).map_err(|back| {
            let kind = kind_of(Some(&back));
            *slot = Some(back);
            Failure::invalid(format!("item {index} is a {kind:?}, not a {want}"))
        })
    }

    /// Puts an item back where it was taken from.
    pub(crate) fn restore(&mut self, index: usize, item: Item) {
        self.items[index] = Some(item);
    }
}

/// Sends a message's contents with `send`; the one place a send's failure
/// is converted (see [`send_failed`]). On failure the contents go back into
/// the handle, whole: its rights, regions and reply right are still the
/// caller's, to send again or free.
pub(crate) fn send_contents<R>(msg: &mut ferry_message, send: impl FnOnce(Message) -> Result<(), SendFailed<R>>) -> Res {
    send(msg.take_contents()).map_err(|failed| {
        let (error, unsent, _right) = failed.into_parts();
        msg.put_back(unsent);
        send_failed(error)
    })
}

/// Whether `src` lies, even in part, in `body`'s buffer: a C caller may
/// set a message's body from its own (`ferry_message_body`, then a part
/// of it), and those bytes must be copied out before the buffer is
/// rewritten.
fn overlaps(body: &[u8], src: &[u8]) -> bool {
    let (b, s) = (body.as_ptr() as usize, src.as_ptr() as usize);
    !src.is_empty() && s < b + body.len() && b < s + src.len()
}

/// What an item of a message is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferry_item_kind {
    /// The item was taken out already.
    FERRY_ITEM_TAKEN = 0,
    /// A send right (`ferry_message_take_send_right`).
    FERRY_ITEM_SEND_RIGHT = 1,
    /// A send-once right (`ferry_message_take_send_once_right`).
    FERRY_ITEM_SEND_ONCE_RIGHT = 2,
    /// A port's receive right (`ferry_message_take_receive_right`).
    FERRY_ITEM_RECEIVE_RIGHT = 3,
    /// An out-of-line region (`ferry_message_region_info`,
    /// `ferry_message_map_region`).
    FERRY_ITEM_REGION = 4,
    /// A memory-object descriptor of the pager protocol (not usable from C;
    /// closed with the message).
    FERRY_ITEM_PAGER = 16,
}

fn kind_of(item: Option<&Item>) -> ferry_item_kind {
    use ferry_item_kind::*;
    match item {
        None => FERRY_ITEM_TAKEN,
        Some(Item::Send(_)) => FERRY_ITEM_SEND_RIGHT,
        Some(Item::SendOnce(_)) => FERRY_ITEM_SEND_ONCE_RIGHT,
        Some(Item::Receive(_)) => FERRY_ITEM_RECEIVE_RIGHT,
        Some(Item::Region(_)) => FERRY_ITEM_REGION,
        Some(Item::Pager(_)) => FERRY_ITEM_PAGER,
    }
}

/// Who sent a received message, as the kernel recorded it at send time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ferry_credentials {
    /// Process id of the sender.
    pub pid: i32,
    /// Real user id of the sender.
    pub uid: u32,
    /// Real group id of the sender.
    pub gid: u32,
}

/// Creates an empty message with operation id `op`.
///
/// # Safety
/// `out` must point at writable storage for a pointer; on success it holds
/// a new message the caller frees with [`ferry_message_free`].
#[no_mangle]
pub unsafe extern "C" fn ferry_message_new(op: u32, out_msg: *mut *mut ferry_message) -> ferry_status {
    guard(|| {
        let o = out(out_msg, "out_msg")?;
        // SAFETY: `o` is checked non-null and the header requires it writable.
        unsafe { give(o, ferry_message { msg: Message::new(op), ..Default::default() }) };
        Ok(())
    })
}

/// Frees a message and closes every right and region still in it. NULL is
/// ignored.
///
/// # Safety
/// `msg` is NULL or a live message handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_free(msg: *mut ferry_message) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(msg) };
        Ok(())
    });
}

/// The operation id.
///
/// # Safety
/// `msg` is a live message handle; `op` points at a writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_op(msg: *const ferry_message, op: *mut u32) -> ferry_status {
    guard(|| {
        let o = out(op, "op")?;
        // SAFETY: `msg` is NULL or live per the header.
        let m = unsafe { obj(msg, "msg") }?;
        // SAFETY: `o` checked non-null, writable per the header.
        unsafe { put(o, m.msg.op()) };
        Ok(())
    })
}

/// Replaces the inline body with a copy of `len` bytes at `data` (at most
/// `FERRY_MAX_INLINE` are accepted when sending). `data` may point into
/// the message's own body (from `ferry_message_body`), to trim it in place.
///
/// # Safety
/// `msg` is a live message handle used by no other call meanwhile; `data`
/// points at `len` readable bytes (it may be NULL when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn ferry_message_set_body(msg: *mut ferry_message, data: *const u8, len: usize) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: live, unshared handle; `len` bytes at `data`.
        let m = unsafe { obj_mut(msg, "msg") }?;
        // SAFETY: as above.
        let src = unsafe { bytes(data, len, "data") }?;
        let body = m.msg.body_mut();
        if overlaps(body, src) {
            *body = src.to_vec();
        } else {
            body.clear();
            body.extend_from_slice(src);
        }
        Ok(())
    })
}

/// The inline body: `*data` points at `*len` bytes owned by the message,
/// valid until the message is freed, sent or its body set again.
///
/// # Safety
/// `msg` is a live message handle; `data` and `len` point at writable
/// storage.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_body(msg: *const ferry_message, data: *mut *const u8, len: *mut usize) -> ferry_status {
    guard(|| {
        let (d, l) = (out(data, "data")?, out(len, "len")?);
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj(msg, "msg") }?;
        let body = m.msg.body();
        // SAFETY: `d` and `l` checked non-null, writable per the header.
        unsafe {
            put(d, body.as_ptr());
            put(l, body.len());
        }
        Ok(())
    })
}

/// How many items the message holds (taken ones included: indices never
/// shift).
///
/// # Safety
/// `msg` is a live message handle; `count` points at a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_item_count(msg: *const ferry_message, count: *mut usize) -> ferry_status {
    guard(|| {
        let c = out(count, "count")?;
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj(msg, "msg") }?;
        // SAFETY: `c` checked non-null.
        unsafe { put(c, m.items.len()) };
        Ok(())
    })
}

/// What item `index` is.
///
/// # Safety
/// `msg` is a live message handle; `kind` points at a writable
/// `ferry_item_kind`.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_item_kind(msg: *const ferry_message, index: usize, kind: *mut ferry_item_kind) -> ferry_status {
    guard(|| {
        let k = out(kind, "kind")?;
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj(msg, "msg") }?;
        let item = m.items.get(index).ok_or_else(|| Failure::invalid(format!("item {index} does not exist (the message has {})", m.items.len())))?;
        // SAFETY: `k` checked non-null.
        unsafe { put(k, kind_of(item.as_ref())) };
        Ok(())
    })
}

/// Who sent a received message (pid, uid, gid as the kernel reported them).
/// For a request from `ferry_rpc_server_reply_and_wait`, its client, as the
/// kernel reported them when the client made the connection.
/// `FERRY_ERR_INVALID_ARGUMENT` for a message this process built.
///
/// # Safety
/// `msg` is a live message handle; `creds` points at a writable
/// `ferry_credentials`.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_sender(msg: *const ferry_message, creds: *mut ferry_credentials) -> ferry_status {
    guard(|| {
        let c = out(creds, "creds")?;
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj(msg, "msg") }?;
        let s = m.msg.sender().ok_or_else(|| Failure::invalid("the message was not received, so it has no sender"))?;
        // SAFETY: `c` checked non-null.
        unsafe { put(c, ferry_credentials { pid: s.pid, uid: s.uid, gid: s.gid }) };
        Ok(())
    })
}

/// Adds an item, consuming the handle `p` whatever the outcome.
fn add<T>(msg: *mut ferry_message, p: *mut T, what: &str, wrap: impl FnOnce(T) -> Item) -> ferry_status {
    guard(|| {
        // SAFETY: the header says `p` is NULL or a live handle the caller gives up.
        let item = unsafe { take(p, what) }?;
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        m.push(wrap(*item))
    })
}

/// Adds a send right to the message, **consuming** `right` (whatever the
/// outcome). Clone it first with `ferry_send_right_clone` to keep one.
///
/// # Safety
/// `msg` is a live message handle; `right` is NULL or a live send-right
/// handle the caller does not use again.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_add_send_right(msg: *mut ferry_message, right: *mut ferry_send_right) -> ferry_status {
    add(msg, right, "right", |r| Item::Send(r.right))
}

/// Adds a send-once right to the message, **consuming** `right` (whatever
/// the outcome).
///
/// # Safety
/// `msg` is a live message handle; `right` is NULL or a live send-once
/// handle the caller does not use again.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_add_send_once_right(msg: *mut ferry_message, right: *mut ferry_send_once_right) -> ferry_status {
    add(msg, right, "right", |r| Item::SendOnce(r.right))
}

/// Adds a port's receive right to the message, **consuming** `right`
/// (whatever the outcome): the port moves to the receiver.
///
/// # Safety
/// `msg` is a live message handle; `right` is NULL or a live receive-right
/// handle the caller does not use again.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_add_receive_right(msg: *mut ferry_message, right: *mut ferry_receive_right) -> ferry_status {
    add(msg, right, "right", |r| Item::Receive(r.right))
}

/// Attaches `region` **by copy**: the receiver gets the bytes as they are
/// now, sealed; later writes here stay here (copy-on-write). The region
/// stays the caller's. Pointers from `ferry_region_data` taken before this
/// call must be fetched again before writing.
///
/// # Safety
/// `msg` and `region` are live handles used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_add_region_copy(msg: *mut ferry_message, region: *mut ferry_region) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: live handles used by no other call.
        let (m, r) = unsafe { (obj_mut(msg, "msg")?, obj_mut(region, "region")?) };
        let item = r.region.by_copy()?;
        m.push(Item::Region(item))
    })
}

/// Attaches `region` **by move**, **consuming** it (whatever the outcome):
/// this process gives its copy up, so no copy-on-write is ever needed.
///
/// # Safety
/// `msg` is a live message handle; `region` is NULL or a live region handle
/// the caller does not use again (nor any pointer into it).
#[no_mangle]
pub unsafe extern "C" fn ferry_message_add_region_move(msg: *mut ferry_message, region: *mut ferry_region) -> ferry_status {
    guard(|| {
        // SAFETY: the caller gives `region` up.
        let r = unsafe { take(region, "region") }?;
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        let item = r.region.by_move()?;
        m.push(Item::Region(item))
    })
}

/// Makes `right` the message's reply right, **consuming** it (whatever the
/// outcome); a reply right set before is closed.
///
/// # Safety
/// `msg` is a live message handle; `right` is NULL or a live send-once
/// handle the caller does not use again.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_set_reply_send_once(msg: *mut ferry_message, right: *mut ferry_send_once_right) -> ferry_status {
    guard(|| {
        // SAFETY: the caller gives `right` up.
        let r = unsafe { take(right, "right") }?;
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        m.reply = Some(r.right.into());
        Ok(())
    })
}

/// Makes the send right `right` the message's reply right (the receiver may
/// reply many times), **consuming** it (whatever the outcome).
///
/// # Safety
/// `msg` is a live message handle; `right` is NULL or a live send-right
/// handle the caller does not use again.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_set_reply_send(msg: *mut ferry_message, right: *mut ferry_send_right) -> ferry_status {
    guard(|| {
        // SAFETY: the caller gives `right` up.
        let r = unsafe { take(right, "right") }?;
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        m.reply = Some(r.right.into());
        Ok(())
    })
}

/// Sends `reply`'s contents through the reply right that came with
/// `request`, using the right up (a send-once right is spent even if the
/// send fails). `FERRY_ERR_NO_REPLY_RIGHT` if there is none (nothing is
/// sent then). Both handles stay the caller's.
///
/// # Safety
/// `request` and `reply` are live, distinct message handles used by no
/// other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_reply(request: *mut ferry_message, reply: *mut ferry_message, timeout_ms: i64) -> ferry_status {
    guard(|| {
        if std::ptr::eq(request, reply) {
            return Err(Failure::invalid("request and reply are the same message"));
        }
        // SAFETY: header contract: live, distinct handles used by no other call.
        let (req, rep) = unsafe { (obj_mut(request, "request")?, obj_mut(reply, "reply")?) };
        let right = req.reply.take().ok_or_else(|| Failure::new(ferry_status::FERRY_ERR_NO_REPLY_RIGHT, "the message carries no reply right"))?;
        send_contents(rep, |m| right.send(m, crate::timeout(timeout_ms)))
    })
}

/// Whether the message carries a reply right.
///
/// # Safety
/// `msg` is a live message handle; `has` points at a writable `bool`.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_has_reply(msg: *const ferry_message, has: *mut bool) -> ferry_status {
    guard(|| {
        let h = out(has, "has")?;
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj(msg, "msg") }?;
        // SAFETY: `h` checked non-null.
        unsafe { put(h, m.reply.is_some()) };
        Ok(())
    })
}

/// Takes item `index` of the kind `pick` accepts out of `msg` into a new
/// handle made by `wrap`, stored at `*out`; the body of every
/// `ferry_message_take_*` function.
///
/// # Safety
/// `msg` is a live message handle used by no other call; `out` points at
/// writable storage for a pointer.
unsafe fn take_into<R, H>(
    msg: *mut ferry_message,
    index: usize,
    out_handle: *mut *mut H,
    want: &'static str,
    pick: impl FnOnce(Item) -> Result<R, Item>,
    wrap: impl FnOnce(R) -> H,
) -> ferry_status {
    guard(|| {
        let o = out(out_handle, "out_right")?;
        // SAFETY: the caller's contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        let right = m.take_item(index, want, pick)?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, wrap(right)) };
        Ok(())
    })
}

/// Takes send right `index` out of a received message into `*out_right`.
///
/// # Safety
/// `msg` is a live message handle used by no other call; `out_right`
/// points at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_take_send_right(msg: *mut ferry_message, index: usize, out_right: *mut *mut ferry_send_right) -> ferry_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // helper's.
    unsafe { take_into(msg, index, out_right, "send right", |i| match i {
        Item::Send(r) => Ok(r),
        other => Err(other),
    }, |right| ferry_send_right { right }) }
}

/// Takes send-once right `index` out of a received message into
/// `*out_right`.
///
/// # Safety
/// As [`ferry_message_take_send_right`].
#[no_mangle]
pub unsafe extern "C" fn ferry_message_take_send_once_right(msg: *mut ferry_message, index: usize, out_right: *mut *mut ferry_send_once_right) -> ferry_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // helper's.
    unsafe { take_into(msg, index, out_right, "send-once right", |i| match i {
        Item::SendOnce(r) => Ok(r),
        other => Err(other),
    }, |right| ferry_send_once_right { right }) }
}

/// Takes receive right `index` out of a received message into
/// `*out_right`: this process now owns that port.
///
/// # Safety
/// As [`ferry_message_take_send_right`].
#[no_mangle]
pub unsafe extern "C" fn ferry_message_take_receive_right(msg: *mut ferry_message, index: usize, out_right: *mut *mut ferry_receive_right) -> ferry_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // helper's.
    unsafe { take_into(msg, index, out_right, "receive right", |i| match i {
        Item::Receive(r) => Ok(r),
        other => Err(other),
    }, |right| ferry_receive_right { right }) }
}

/// The operation id of the message a name server sends to a service
/// registered with `ferry_bootstrap_register_system_service`, one for each
/// lookup of its name.
pub const FERRY_SERVICE_PORT: u32 = 0x6e73_0010;

// The header needs the number written out; it is the name server's.
const _: () = assert!(FERRY_SERVICE_PORT == ferry::bootstrap::SERVICE_PORT);

/// Takes the port out of a name server's `FERRY_SERVICE_PORT` message: its
/// receive right in `*out_port` and the uid of the user whose lookup it was
/// made for in `*out_uid` (serve the port as that user's). The message must
/// come from root (the credentials the kernel gave it) with the name
/// server's shape, and none of its items taken; anything else, the same
/// bytes from another user included, is not a service port: `*out_port` is
/// then set to NULL, `*out_uid` left alone and the message left as it was.
///
/// # Safety
/// `msg` is a live message handle used by no other call; `out_uid` points
/// at a writable `uint32_t` and `out_port` at writable storage for a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_take_service_port(msg: *mut ferry_message, out_uid: *mut u32, out_port: *mut *mut ferry_receive_right) -> ferry_status {
    guard(|| {
        let (u, o) = (out(out_uid, "out_uid")?, out(out_port, "out_port")?);
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        // SAFETY: `o` checked non-null.
        unsafe { put(o, std::ptr::null_mut()) };
        // Only a message whose items are all still there is looked at
        // whole, so that putting it back changes nothing.
        if m.items.len() != 2 || m.items.iter().any(Option::is_none) || m.msg.op() != FERRY_SERVICE_PORT {
            return Ok(());
        }
        let mut whole = m.take_contents();
        match ferry::bootstrap::ServicePort::take(&mut whole) {
            Some(sp) => {
                // SAFETY: `u` and `o` checked non-null.
                unsafe {
                    put(u, sp.uid);
                    give(o, ferry_receive_right { right: sp.port });
                }
            }
            None => m.put_back(whole),
        }
        Ok(())
    })
}

/// How a region travelled.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferry_region_mode {
    /// By value, the sender keeping its copy (sealed, copy-on-write).
    FERRY_REGION_COPY = 1,
    /// By value, the sender giving its copy up.
    FERRY_REGION_MOVE = 2,
    /// Lent from the sender's pool: the sender may write it again later.
    FERRY_REGION_LEND = 3,
    /// Shared mutable memory: both sides see each other's writes.
    FERRY_REGION_SHARE = 4,
}

pub(crate) fn mode_of(m: ferry::region::Mode) -> ferry_region_mode {
    use ferry::region::Mode;
    use ferry_region_mode::*;
    match m {
        Mode::Copy => FERRY_REGION_COPY,
        Mode::Move => FERRY_REGION_MOVE,
        Mode::Lend => FERRY_REGION_LEND,
        Mode::Share => FERRY_REGION_SHARE,
    }
}

/// The length and mode of region item `index`, without taking it. Either
/// out-pointer may be NULL.
///
/// # Safety
/// `msg` is a live message handle; `len` and `mode` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_region_info(msg: *const ferry_message, index: usize, len: *mut usize, mode: *mut ferry_region_mode) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj(msg, "msg") }?;
        let Some(Some(Item::Region(r))) = m.items.get(index) else {
            return Err(Failure::invalid(format!("item {index} is not a region")));
        };
        if !len.is_null() {
            // SAFETY: non-null and writable per the header.
            unsafe { put(len, r.len()) };
        }
        if !mode.is_null() {
            // SAFETY: non-null and writable per the header.
            unsafe { put(mode, mode_of(r.mode())) };
        }
        Ok(())
    })
}

/// Maps region item `index` into this process (taking it out of the
/// message) with `flags` (`FERRY_MAP_*`, or 0: lazily, anywhere, privately
/// writable). A lent or shared region is refused with
/// `FERRY_ERR_SENDER_MAY_WRITE` unless `FERRY_MAP_ALLOW_SENDER_WRITES` is
/// given; with `FERRY_MAP_IMMEDIATE`, which allocates every page, a region
/// longer than `FERRY_MAP_IMMEDIATE_LIMIT` is refused with
/// `FERRY_ERR_TOO_LARGE` (its length is the sender's claim; see
/// [`ferry_message_map_region_limited`] for another limit). On failure the
/// region stays in the message.
///
/// # Safety
/// `msg` is a live message handle used by no other call; `out_map` points
/// at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_map_region(msg: *mut ferry_message, index: usize, flags: u32, out_map: *mut *mut ferry_mapped_region) -> ferry_status {
    map_region(msg, index, flags, None, out_map)
}

/// As [`ferry_message_map_region`], refusing a region longer than `limit`
/// bytes with `FERRY_ERR_TOO_LARGE` whether mapped immediately or lazily
/// (`SIZE_MAX`: no limit). On failure the region stays in the message.
///
/// # Safety
/// `msg` is a live message handle used by no other call; `out_map` points
/// at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_map_region_limited(
    msg: *mut ferry_message,
    index: usize,
    flags: u32,
    limit: usize,
    out_map: *mut *mut ferry_mapped_region,
) -> ferry_status {
    map_region(msg, index, flags, Some(limit), out_map)
}

/// Maps region item `index` with `flags` and `limit` (`None`: the default
/// of [`map_options`]), under [`ferry_message_map_region`]'s contract.
fn map_region(msg: *mut ferry_message, index: usize, flags: u32, limit: Option<usize>, out_map: *mut *mut ferry_mapped_region) -> ferry_status {
    guard(|| {
        let o = out(out_map, "out_map")?;
        let (opts, allow_sender_writes) = map_options(flags, limit)?;
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        let item = m.take_item(index, "region", |i| match i {
            Item::Region(r) => Ok(r),
            other => Err(other),
        })?;
        let mode = item.mode();
        let mapped = if allow_sender_writes && !mode.is_by_value() {
            item.map_shared(opts).map(|m| Mapped::Shared(m, mode))
        } else {
            item.map(opts).map(Mapped::Value)
        };
        match mapped {
            Ok(map) => {
                // SAFETY: `o` checked non-null.
                unsafe { give(o, ferry_mapped_region { map }) };
                Ok(())
            }
            Err(e) => {
                let f = Failure::from(e.error);
                m.restore(index, Item::Region(e.region));
                Err(f)
            }
        }
    })
}

/// Makes the reply to an RPC request `request` (received with
/// `ferry_rpc_server_reply_and_wait`): an empty message with operation id
/// `op` that remembers which connection it answers.
///
/// # Safety
/// `request` is a live message handle; `out_msg` points at writable storage
/// for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_new_reply(request: *const ferry_message, op: u32, out_msg: *mut *mut ferry_message) -> ferry_status {
    guard(|| {
        let o = out(out_msg, "out_msg")?;
        // SAFETY: header contract: a live handle.
        let req = unsafe { obj(request, "request") }?;
        let conn = req.conn.ok_or_else(|| Failure::new(ferry_status::FERRY_ERR_NO_REPLY_RIGHT, "the message is not an RPC request"))?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_message { msg: Message::new(op), conn: Some(conn), ..Default::default() }) };
        Ok(())
    })
}

/// Sets the operation id, keeping the body, items and reply right (a
/// received message keeps its sender, `ferry_message_sender`, as when its
/// body is changed; what is sent carries the kernel's credentials of the
/// sending process whatever this says).
///
/// # Safety
/// `msg` is a live message handle used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_message_set_op(msg: *mut ferry_message, op: u32) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(msg, "msg") }?;
        m.msg.set_op(op);
        Ok(())
    })
}

/// Empties the message for reuse and fills it again: operation id `op`,
/// a copy of `len` bytes at `data` as its body (NULL and 0 for none; it may
/// point into the message's own body), every
/// item and the reply right closed. An RPC request keeps the connection it
/// came on, so the handle can carry the reply
/// (`ferry_rpc_server_reply_and_wait_in_place`), and a received message
/// its sender (`ferry_message_sender`) until it is refilled.
///
/// # Safety
/// `msg` is a live message handle used by no other call meanwhile; `data`
/// points at `len` readable bytes (it may be NULL when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn ferry_message_reset(msg: *mut ferry_message, op: u32, data: *const u8, len: usize) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle used by no other call; `len` bytes at `data`.
        let (m, src) = unsafe { (obj_mut(msg, "msg")?, bytes(data, len, "data")?) };
        let mut body = mem::take(m.msg.body_mut());
        if overlaps(&body, src) {
            body = src.to_vec();
        } else {
            body.clear();
            body.extend_from_slice(src);
        }
        *m.msg.body_mut() = body;
        m.msg.set_op(op);
        m.items.clear();
        m.reply = None;
        Ok(())
    })
}
