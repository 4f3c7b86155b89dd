//! The client side: naming an object ([`MemoryObject`]), mapping it
//! ([`MappedObject`]), and the guardian thread that keeps a dead pager from
//! hanging the mapping's readers.
//!
//! The client keeps its own copy of the userfaultfd it hands to the pager.
//! Without it, the pager's death would release the descriptor and the kernel
//! would silently turn the range into ordinary memory (zeros where nothing
//! was supplied; measured on Linux 6.18); with it, the descriptor outlives
//! the pager and the guardian decides what unsupplied pages become.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustix::io::Errno;

use super::proto::{self, Fields};
use super::{errno, DeathPolicy, Inner, ObjectId, ObjectStats, Offset, PagerError, PagerFd, SupplyMode};
use crate::message::{Item, Message};
use crate::port::SendRight;
use crate::sys::mem;
use crate::sys::socket;
use crate::sys::uffd::{self, Backing, ObjectMapping, Origin, Uffd};
use crate::sys::wait::{self, Interest};
use crate::timeout::Timeout;

/// A memory object as a client names it: a send right to its server and
/// the object's id there. Cheap to make; nothing is mapped until
/// [`map`](Self::map).
#[derive(Debug)]
pub struct MemoryObject {
    server: SendRight,
    id: ObjectId,
    timeout: Timeout,
    /// For an object the server made for us (a copy): the receive right of
    /// the hold that keeps it there while this lives.
    _hold: Option<crate::ReceiveRight>,
    /// Whether [`MemoryObject::map`] may hand this process's userfaultfd
    /// to a pager run by another user than this process's and root.
    trust_any_pager: bool,
}

/// How long requests wait for the pager's reply unless told otherwise.
pub const DEFAULT_TIMEOUT: Timeout = Timeout::After(Duration::from_secs(30));

/// Sends a request to a pager's port and waits for the reply; `ERROR`
/// replies become errors (`no_object` makes the one for "no such object").
pub(crate) fn call(
    server: &SendRight,
    msg: Message,
    timeout: Timeout,
    no_object: impl FnOnce(String) -> PagerError,
) -> Result<Message, PagerError> {
    let (mut rx, tx) = crate::port().map_err(PagerError::Io)?;
    drop(tx);
    let once = rx.make_send_once().map_err(PagerError::Io)?;
    server.send(msg.with_reply(once), timeout).map_err(|e| match e.into_error() {
        crate::SendError::Timeout | crate::SendError::QueueFull => PagerError::Timeout,
        e => PagerError::from(e),
    })?;
    let reply = rx.recv(timeout).map_err(|e| match e {
        crate::RecvError::Timeout => PagerError::Timeout,
        e => PagerError::from(e),
    })?;
    if reply.op() == proto::ERROR {
        let mut f = Fields::new(reply.body());
        let code = f.u64().unwrap_or(0);
        let why = String::from_utf8_lossy(f.rest()).into_owned();
        return Err(match code {
            proto::E_NO_OBJECT => no_object(why),
            proto::E_DENIED => PagerError::Denied(why),
            proto::E_UNSUPPORTED => PagerError::Unsupported(why),
            proto::E_BUDGET => PagerError::OverBudget(why),
            _ => PagerError::BadRequest(why),
        });
    }
    Ok(reply)
}

impl MemoryObject {
    /// Names object `id` of the server reached through `server`.
    pub fn new(server: SendRight, id: ObjectId) -> MemoryObject {
        MemoryObject { server, id, timeout: DEFAULT_TIMEOUT, _hold: None, trust_any_pager: false }
    }

    /// Lets [`map`](Self::map) map an object whose pager runs as another
    /// user than this process's and root. Mapping hands the pager this
    /// process's userfaultfd, and the kernel lets whoever holds it register
    /// and fill any range of this process's memory, not only the object's:
    /// such a pager can write into memory this process has not touched yet
    /// (fresh heap and stack pages) and stall its writes. Call this only
    /// for a pager trusted as much as one that could `ptrace` this process.
    pub fn trusting_any_pager(mut self) -> MemoryObject {
        self.trust_any_pager = true;
        self
    }

    /// Sets how long requests (open, attach, copy, stats, write, clean) wait
    /// for the pager's reply before failing with [`PagerError::Timeout`]
    /// (default [`DEFAULT_TIMEOUT`]). Faults are not requests: see
    /// [`MappedObject::revoke`] for a pager that stops answering them.
    pub fn with_timeout(mut self, timeout: Timeout) -> MemoryObject {
        self.timeout = timeout;
        self
    }

    /// The object's id at its server.
    pub fn id(&self) -> ObjectId {
        self.id
    }

    fn call(&self, msg: Message) -> Result<Message, PagerError> {
        let id = self.id;
        call(&self.server, msg, self.timeout, |_| PagerError::NoSuchObject(id))
    }

    /// Makes a copy-on-write copy of the object at its server (Accent's
    /// shadow object): the copy keeps today's contents whatever the owner
    /// writes to the original later. The server keeps the copy while the
    /// returned value lives, or a mapping of it does.
    ///
    /// # Errors
    /// [`PagerError::OverBudget`] when this user already holds as many
    /// objects at the server as it allows.
    pub fn copy(&self) -> Result<MemoryObject, PagerError> {
        let (hold, right) = crate::port().map_err(PagerError::Io)?;
        let r = self.call(Message::new(proto::COPY).with_body(proto::body(&[self.id])).with_item(Item::Send(right)))?;
        let id = expect(&r, proto::COPIED, 1)?[0];
        Ok(MemoryObject { server: self.server.try_clone().map_err(PagerError::Io)?, id, timeout: self.timeout, _hold: Some(hold), trust_any_pager: self.trust_any_pager })
    }

    /// Keeps `hold` (the receive right of a hold the server took for this
    /// object) as long as this value lives.
    pub(crate) fn with_hold(mut self, hold: crate::ReceiveRight) -> MemoryObject {
        self._hold = Some(hold);
        self
    }

    /// The object's counters at its server.
    pub fn stats(&self) -> Result<ObjectStats, PagerError> {
        let r = self.call(Message::new(proto::STATS).with_body(proto::body(&[self.id])))?;
        let w = expect(&r, proto::STATS_REPLY, 10)?;
        Ok(ObjectStats {
            faults: w[0],
            requests: w[1],
            pages_requested: w[2],
            pages_copied: w[3],
            pages_zeroed: w[4],
            pages_continued: w[5],
            pages_shadowed: w[6],
            clients: w[7],
            pages_dirtied: w[8],
            pages_returned: w[9],
        })
    }

    /// Asks the object's clients to return the pages they dirtied (Mach's
    /// `lock_request`), as the object's owner; the pager receives them
    /// shortly after, in [`super::Pager::data_return`]. Returns how many
    /// pages were asked for.
    pub fn clean(&self) -> Result<u64, PagerError> {
        let r = self.call(Message::new(proto::CLEAN_REQUEST).with_body(proto::body(&[self.id])))?;
        Ok(expect(&r, proto::CLEANING, 1)?[0])
    }

    /// Changes bytes of the object at `offset`, as its owner (checked by the
    /// server against the kernel-reported uid of this process). At most
    /// [`crate::message::MAX_INLINE`] − 16 bytes per call.
    pub fn write(&self, offset: Offset, data: &[u8]) -> Result<(), PagerError> {
        let mut body = proto::body(&[self.id, offset]);
        body.extend_from_slice(data);
        let r = self.call(Message::new(proto::WRITE).with_body(body))?;
        expect(&r, proto::WRITTEN, 0).map(|_| ())
    }

    /// Maps the object into this process. Pages arrive from the pager when
    /// first touched (and read ahead by the object's cluster).
    ///
    /// The pager gets this process's userfaultfd, with which it could fill
    /// any untouched memory of this process, so only a pager run by this
    /// process's user or by root (as the kernel reports the sender of its
    /// answer to the open) is given it, unless
    /// [`trusting_any_pager`](Self::trusting_any_pager) said otherwise.
    ///
    /// # Errors
    /// [`PagerError::UntrustedPager`] for a pager run by another user
    /// (nothing is mapped or sent);
    /// [`PagerError::PagerDead`], [`PagerError::NoSuchObject`];
    /// [`PagerError::UserfaultfdUnavailable`] if the kernel grants this
    /// process no userfaultfd at all; [`PagerError::Unsupported`] if the
    /// kernel lacks a feature the object needs (poisoning, shmem faults).
    pub fn map(&self) -> Result<MappedObject, PagerError> {
        let mut opened = self.call(Message::new(proto::OPEN).with_body(proto::body(&[self.id])))?;
        let w = expect(&opened, proto::OPENED, 5)?;
        let pager = opened.sender().map(|c| c.uid);
        if !self.trust_any_pager && !pager.is_some_and(trusted_pager) {
            return Err(PagerError::UntrustedPager(pager));
        }
        let (size, mode, policy, track_dirty) = (w[0], w[1], w[3], w[4] == 1);
        let mode = match mode {
            0 => SupplyMode::Copy,
            1 => SupplyMode::ZeroCopy,
            m => return Err(PagerError::Protocol(format!("unknown supply mode {m}"))),
        };
        let policy = if policy == 1 { DeathPolicy::ZeroFill } else { DeathPolicy::Sigbus };
        if size == 0 || size > isize::MAX as u64 {
            return Err(PagerError::Protocol(format!("object size {size}")));
        }
        let len = mem::page_round_up(size as usize);
        let mut items = opened.take_items().into_iter();
        let cache = match (mode, items.next()) {
            (SupplyMode::Copy, None) => None,
            (SupplyMode::ZeroCopy, Some(Item::Pager(PagerFd { inner: Inner::Cache { memfd, len: l } }))) if l == size => {
                Some(memfd)
            }
            _ => return Err(PagerError::Protocol("the open reply's items do not match the supply mode".into())),
        };
        let io = |e: Errno| PagerError::Io(errno(e));
        let backing = match &cache {
            Some(fd) => Backing::Shmem(fd.as_fd()),
            None => Backing::Anonymous,
        };
        let mapping = ObjectMapping::new(len, backing).map_err(io)?;
        let (uffd, origin) = Uffd::new().map_err(|e| PagerError::UserfaultfdUnavailable(errno(e)))?;
        let mut features = uffd::FEATURE_POISON;
        let mut modes = uffd::MODE_MISSING;
        if cache.is_some() {
            features |= uffd::FEATURE_MISSING_SHMEM | uffd::FEATURE_MINOR_SHMEM;
            modes |= uffd::MODE_MINOR;
        }
        if track_dirty {
            features |= uffd::FEATURE_PAGEFAULT_FLAG_WP;
            modes |= uffd::MODE_WP;
        }
        uffd.api(features).map_err(|e| PagerError::Unsupported(format!("userfaultfd features {features:#x}: {e}")))?;
        uffd.register(mapping.addr(), len, modes).map_err(io)?;
        let theirs = Uffd::from_fd(socket::dup(uffd.as_fd()).map_err(io)?);
        let (lifeline_rx, lifeline) = crate::port().map_err(PagerError::Io)?;
        let attach = Message::new(proto::ATTACH)
            .with_body(proto::body(&[self.id]))
            .with_item(Item::Pager(PagerFd::userfault(theirs, mapping.addr(), len)))
            .with_item(Item::Send(lifeline));
        let r = self.call(attach)?;
        expect(&r, proto::ATTACHED, 0)?;

        let shared = Arc::new(Shared {
            uffd,
            base: mapping.addr(),
            len,
            size,
            id: self.id,
            policy,
            track_dirty,
            state: AtomicU8::new(LIVE),
            changed: (Mutex::new(()), Condvar::new()),
        });
        let (stop, stop_rx) = socket::seqpacket_pair().map_err(io)?;
        let server = self.server.try_clone().map_err(PagerError::Io)?;
        let g = shared.clone();
        let guardian = std::thread::Builder::new()
            .name("ferry-pager-guard".into())
            .spawn(move || guard(g, server, stop_rx, lifeline_rx))
            .map_err(PagerError::Io)?;
        Ok(MappedObject { mapping, shared, stop: Some(stop), guardian: Some(guardian), size, mode, origin, _cache: cache })
    }
}

/// Whether a pager run by `uid` may hold this process's userfaultfd
/// unasked: this process's own user (who could `ptrace` it anyway) or
/// root.
pub(crate) fn trusted_pager(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

fn expect(m: &Message, op: u32, words: usize) -> Result<Vec<u64>, PagerError> {
    if m.op() != op {
        return Err(PagerError::Protocol(format!("expected reply {op:#x}, got {:#x}", m.op())));
    }
    let mut f = Fields::new(m.body());
    (0..words)
        .map(|_| f.u64().ok_or_else(|| PagerError::Protocol(format!("reply {op:#x} too short"))))
        .collect()
}

const LIVE: u8 = 0;
const PAGER_DEAD: u8 = 1;
const REVOKED: u8 = 2;
const DETACHED: u8 = 3;

/// Whether a mapped object's pager still serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectState {
    /// The pager is alive and answers faults.
    Live,
    /// The pager's port died: pages never supplied now follow the object's
    /// [`DeathPolicy`] (`SIGBUS`, or zeros).
    PagerDead,
    /// This client revoked the pager ([`MappedObject::revoke`]) with the
    /// same effect.
    Revoked,
    /// The pager, still alive, stopped serving this mapping (it found the
    /// mapping's registration broken), with the same effect.
    Detached,
}

struct Shared {
    uffd: Uffd,
    base: usize,
    len: usize,
    size: u64,
    id: ObjectId,
    policy: DeathPolicy,
    /// Registered for write-protection faults (dirty pages tracked).
    track_dirty: bool,
    state: AtomicU8,
    changed: (Mutex<()>, Condvar),
}

impl Shared {
    /// Resolves every page never supplied by the policy, once.
    fn end(&self, why: u8) {
        if self.state.compare_exchange(LIVE, why, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        // With dirty pages tracked, a supplied page stays write-protected
        // until the pager hears of its first write. Nobody will now: the
        // protection goes, and a writer waiting on it goes on.
        if self.track_dirty {
            let _ = self.uffd.writeprotect(self.base, self.len, false, true);
        }
        match self.policy {
            DeathPolicy::ZeroFill => {
                // An unregistered range is ordinary memory; waiters wake
                // and fault it in as zeros.
                let _ = self.uffd.unregister(self.base, self.len);
            }
            DeathPolicy::Sigbus => {
                let page = mem::page_size();
                let mut at = 0;
                while at < self.len {
                    match self.uffd.poison(self.base + at, self.len - at, true) {
                        Ok(n) => at += n.max(page),
                        Err((n, Errno::AGAIN)) if n > 0 => at += n,
                        Err((n, Errno::EXIST)) => at += n.max(page),
                        Err((n, _)) => at += n.max(page),
                    }
                }
            }
        }
        let _g = self.changed.0.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.1.notify_all();
    }
}

fn guard(s: Arc<Shared>, server: SendRight, stop: OwnedFd, mut lifeline: crate::ReceiveRight) {
    let mut listening = true;
    loop {
        let mut fds = vec![(server.as_fd(), Interest::HangUp), (stop.as_fd(), Interest::Readable)];
        if listening {
            fds.push((lifeline.main_fd(), Interest::Readable));
        }
        let Ok(ready) = wait::poll_many(&fds, None) else { return };
        if ready[1].any() {
            return;
        }
        if listening && ready[2].any() {
            match lifeline.recv(Timeout::Zero) {
                Ok(m) if m.op() == proto::CLEAN => {
                    if !return_dirty(&s, &server, stop.as_fd(), &m) {
                        return;
                    }
                }
                Ok(_) | Err(crate::RecvError::Timeout) | Err(crate::RecvError::BadMessage(_)) => {}
                // The server let go of this mapping: it died, or it found
                // the mapping's registration broken and detached it. Either
                // way nobody will answer its faults any more. (A dying
                // process closes its descriptors one by one: give its port
                // a moment to hang up too, to report the right reason.)
                Err(_) => {
                    listening = false;
                    let dead = server.wait_dead(Timeout::millis(100));
                    s.end(if dead { PAGER_DEAD } else { DETACHED });
                }
            }
            continue;
        }
        if ready[0].hangup {
            s.end(PAGER_DEAD);
            // Nothing more to watch but the stop signal.
            let _ = wait::poll_one(stop.as_fd(), Interest::Readable, None);
            return;
        }
    }
}

/// Answers a `CLEAN`: write-protects each named page again (so the next
/// write is reported anew), then sends its bytes to the pager. The bytes are
/// read through the kernel, since the mapping's owner may be writing them.
/// False once the mapping is being dropped (`stop` readable): a pager that
/// asks for pages and never reads them holds up only its own pages.
fn return_dirty(s: &Shared, server: &SendRight, stop: BorrowedFd<'_>, m: &Message) -> bool {
    let page = mem::page_size();
    let mut f = Fields::new(m.body());
    if f.u64() != Some(s.id) {
        return true;
    }
    while let Some(p) = f.u64() {
        let off = (p as usize).saturating_mul(page);
        if p as usize >= s.len / page || s.uffd.writeprotect(s.base + off, page, true, false).is_err() {
            continue;
        }
        let mut body = proto::body(&[s.id, off as u64]);
        let n = page.min(s.size as usize - off);
        let at = body.len();
        body.resize(at + n, 0);
        if uffd::read_own(s.base + off, &mut body[at..]).is_ok_and(|got| got == n) {
            // A page read while the mapping is being dropped may be zeros
            // in place of a page never supplied: never sent back.
            if wait::poll_one_now(stop, Interest::Readable).is_ok_and(|r| r.any()) {
                return false;
            }
            match send_unless_stopped(server, stop, Message::new(proto::DIRTY).with_body(body)) {
                Ok(()) => {}
                Err(stopped) => return !stopped,
            }
        }
    }
    true
}

/// Sends `msg` to the pager's port, waiting for room in its queue for as
/// long as the pager lives, but never past the mapping's drop (`stop`
/// readable): the pager chooses when to read its port, and a wait without
/// end there held the dropping thread of the mapping's owner for ever.
/// `Err(true)` when the mapping is being dropped, `Err(false)` when the
/// message cannot go (the pager is gone).
fn send_unless_stopped(server: &SendRight, stop: BorrowedFd<'_>, mut msg: Message) -> Result<(), bool> {
    loop {
        match server.send(msg, Timeout::Zero) {
            Ok(()) => return Ok(()),
            Err(failed) if matches!(failed.error(), crate::SendError::QueueFull) => msg = failed.into_message(),
            Err(_) => return Err(false),
        }
        let ready = wait::poll_many(&[(server.as_fd(), Interest::Writable), (stop, Interest::Readable)], None).map_err(|_| false)?;
        if ready[1].any() {
            return Err(true);
        }
        if ready[0].hangup && !ready[0].writable {
            return Err(false);
        }
    }
}

/// A memory object mapped into this process. Reads fault pages in from the
/// pager; writes stay private to this process. Unmapped on drop.
pub struct MappedObject {
    mapping: ObjectMapping,
    shared: Arc<Shared>,
    stop: Option<OwnedFd>,
    guardian: Option<std::thread::JoinHandle<()>>,
    size: u64,
    mode: SupplyMode,
    origin: Origin,
    _cache: Option<OwnedFd>,
}

impl std::fmt::Debug for MappedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedObject").field("addr", &self.mapping.addr()).field("size", &self.size).finish()
    }
}

impl MappedObject {
    /// The object's bytes, for an object supplied by copy
    /// ([`SupplyMode::Copy`]): its pages are copied into this process's
    /// private memory as they are first touched and nobody can change them
    /// after, so they read as an ordinary slice. `None` for a zero-copy
    /// object, whose pages are the pager's page cache, mapped: the pager can
    /// change a page this process has not written; read it with
    /// [`read_at`](Self::read_at), or borrow it with the `unsafe`
    /// [`as_slice_unchecked`](Self::as_slice_unchecked).
    ///
    /// Touching a page not yet supplied waits for the pager (or, once it is
    /// gone, follows the object's [`DeathPolicy`]: with `Sigbus`, the touch
    /// kills the process unless it handles the signal).
    pub fn as_slice(&self) -> Option<&[u8]> {
        (self.mode == SupplyMode::Copy).then(|| &self.mapping.as_slice()[..self.size as usize])
    }

    /// The object's bytes, writable, for an object supplied by copy; writes
    /// are private to this process. `None` for a zero-copy object (see
    /// [`as_slice`](Self::as_slice)).
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        let n = self.size as usize;
        (self.mode == SupplyMode::Copy).then(|| &mut self.mapping.as_mut_slice()[..n])
    }

    /// The object's bytes in any supply mode.
    ///
    /// # Safety
    /// For a zero-copy object, the pager must not change a page of its
    /// page cache that this process has not written, while the reference
    /// lives: the caller vouches for the pager. (For an object supplied by
    /// copy this is [`as_slice`](Self::as_slice), always sound.)
    // `unsafe` marks the caller's promise; the body has no unsafe operation.
    #[allow(unsafe_code)]
    pub unsafe fn as_slice_unchecked(&self) -> &[u8] {
        &self.mapping.as_slice()[..self.size as usize]
    }

    /// The object's bytes, writable, in any supply mode (writes stay
    /// private to this process).
    ///
    /// # Safety
    /// As [`as_slice_unchecked`](Self::as_slice_unchecked).
    #[allow(unsafe_code)]
    pub unsafe fn as_mut_slice_unchecked(&mut self) -> &mut [u8] {
        let n = self.size as usize;
        &mut self.mapping.as_mut_slice()[..n]
    }

    /// Copies the bytes at `offset` into `out` in any supply mode, without
    /// forming a reference to memory the pager may change (a copy from a
    /// zero-copy object may mix bytes from before and after such a change);
    /// false if out of range. Pages not yet supplied are faulted in as by
    /// any read.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        offset.checked_add(out.len()).is_some_and(|e| e <= self.size as usize) && self.mapping.copy_out_racy(offset, out)
    }

    /// Copies `src` into the object at `offset` in any supply mode (the
    /// write stays private to this process); false if out of range.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> bool {
        offset.checked_add(src.len()).is_some_and(|e| e <= self.size as usize) && self.mapping.copy_in_racy(offset, src)
    }

    /// The object's size in bytes.
    pub fn len(&self) -> usize {
        self.size as usize
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Start address of the mapping.
    pub fn addr(&self) -> usize {
        self.mapping.addr()
    }

    /// How the pager supplies this object.
    pub fn mode(&self) -> SupplyMode {
        self.mode
    }

    /// Whether the kernel gave this process full fault handling, or faults
    /// from user mode only (then a system call that reads a page not yet
    /// supplied, such as `write(2)` from the mapping, fails with `EFAULT`
    /// instead of waiting for the pager).
    pub fn user_mode_only(&self) -> bool {
        self.origin == Origin::UserModeOnly
    }

    /// Whether the pager still serves this mapping.
    pub fn state(&self) -> ObjectState {
        match self.shared.state.load(Ordering::Acquire) {
            LIVE => ObjectState::Live,
            PAGER_DEAD => ObjectState::PagerDead,
            REVOKED => ObjectState::Revoked,
            _ => ObjectState::Detached,
        }
    }

    /// Waits until the pager is gone (or revoked) or `limit` passes; returns
    /// the state then.
    pub fn wait_until_ended(&self, limit: Duration) -> ObjectState {
        let (m, cv) = &self.shared.changed;
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cv.wait_timeout_while(g, limit, |_| self.state() == ObjectState::Live);
        self.state()
    }

    /// Stops depending on the pager, as if it had died: every page not yet
    /// supplied follows the object's [`DeathPolicy`] now, and threads waiting
    /// on such a page wake. For a pager that stopped answering.
    pub fn revoke(&self) {
        self.shared.end(REVOKED);
    }
}

impl Drop for MappedObject {
    fn drop(&mut self) {
        drop(self.stop.take());
        // The guardian may be waiting in a fault on a page its pager asked
        // back but never supplied: the range, about to go, is unregistered
        // first, which wakes it (the page reads as zeros, and nothing more
        // is sent once the stop is seen).
        let _ = self.shared.uffd.unregister(self.shared.base, self.shared.len);
        if let Some(g) = self.guardian.take() {
            let _ = g.join();
        }
    }
}
