//! Memory objects backed by user-level pagers (Accent's memory objects,
//! Mach's external pagers, CHORUS's mappers), realised with userfaultfd.
//!
//! A **pager** is anything that implements [`Pager`]: given an offset and a
//! buffer, it supplies the object's data for that range (Mach's
//! `data_request` answered by `data_provided`), or says there is none
//! (`data_unavailable`: the pages are zero-filled), or fails (the client's
//! access raises `SIGBUS`). An [`ObjectServer`] hosts any number of objects
//! behind one port; a client holding a send right to that port names an
//! object with a [`MemoryObject`] and [maps](MemoryObject::map) it. Pages the
//! client never touches are never asked for.
//!
//! The protocol, in short (the full account is in `docs/pager.md`):
//! 1. the client asks to **open** the object and learns its size and how
//!    the pager supplies it; for a zero-copy object it also receives a
//!    read-only, sealed view of the pager's page cache (a memfd);
//! 2. the client maps fresh memory (private anonymous, or a private mapping
//!    of that memfd), creates a userfaultfd, registers the range and
//!    **attaches**: it sends the userfaultfd to the pager as a
//!    [`PagerFd`] item, together with a send right (the *lifeline*) whose
//!    receive right it keeps;
//! 3. each fault in the client becomes an event on the pager's copy of the
//!    userfaultfd; the pager supplies a cluster of pages around it with
//!    `UFFDIO_COPY` (copy mode), `UFFDIO_ZEROPAGE`, or fills its page cache
//!    and installs the pages with `UFFDIO_CONTINUE` (zero-copy mode);
//! 4. the client keeps its own copy of the userfaultfd and a guardian
//!    thread; if the pager dies, the guardian resolves every page not yet
//!    supplied according to the object's [`DeathPolicy`], so no thread
//!    waits forever; [`MappedObject::state`] says why.
//!
//! The module's parts: this file (the trait, the descriptor item, errors
//! and statistics), `server` (the pager side's event loop and requests),
//! `store` (the objects, their shadow pages and page caches), `pages` (the
//! per-mapping sets of pages the server keeps), `client` (the mapping side),
//! `fill` (regions another process fills in the asker's memory) and
//! `proto` (the message layouts).

mod client;
mod fill;
mod pages;
pub(crate) mod proto;
mod server;
mod store;

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::{RecvError, SendError, WireError};
use crate::sys::mem;
use crate::sys::uffd::{self, Uffd};
use crate::wire::{self, ItemDesc};

pub(crate) use client::call;
pub use client::{MappedObject, MemoryObject, ObjectState, DEFAULT_TIMEOUT};
pub use fill::{page_size, Filling};
pub(crate) use server::{made_by_asker, refusal};
pub use server::{Answer, Extension, ObjectServer, PortMinter, ServerStats, SharedBudget};

/// The offset of a byte within a memory object.
pub type Offset = u64;

/// Identifies an object within one [`ObjectServer`].
pub type ObjectId = u64;

/// What a pager did with a data request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Supply {
    /// The buffer now holds the object's data (Mach's `data_provided`).
    Provided,
    /// The range has no data: the client sees zeros (`data_unavailable`).
    Unavailable,
}

/// Why a pager could not supply data; the client's touch of the faulting
/// page raises `SIGBUS` (Mach's `data_error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagerFault(pub String);

impl fmt::Display for PagerFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pager could not supply data: {}", self.0)
    }
}

impl std::error::Error for PagerFault {}

/// A supplier of a memory object's pages.
///
/// # Contract
/// - [`data_request`](Pager::data_request) is called with a page-aligned
///   `offset` and a buffer of whole pages (clipped at the object's end,
///   rounded up to a page), already zeroed. It fills the buffer and returns
///   [`Supply::Provided`], or leaves it and returns [`Supply::Unavailable`].
///   The buffer may cover more pages than the client touched (read-ahead);
///   a pager that cannot supply some of them may zero them.
/// - It is called only for pages some client touched, or read ahead of a
///   touch, and never twice for a page of a zero-copy object (its page
///   cache keeps it); a copy-mode object asks again for a page a client
///   dropped and touched again.
/// - [`data_unavailable`](Pager::data_unavailable) is asked first, for the
///   same range; when it says the range has no data, `data_request` is not
///   called for it.
/// - [`data_return`](Pager::data_return) receives pages a client wrote and
///   gave back (Mach's `data_return` after a `lock_request`); the default
///   discards them.
pub trait Pager: Send {
    /// Supplies the data of `[offset, offset + buf.len())`.
    ///
    /// # Errors
    /// A [`PagerFault`] makes the client's access fail with `SIGBUS`.
    fn data_request(&mut self, offset: Offset, buf: &mut [u8]) -> Result<Supply, PagerFault>;

    /// Says, before any buffer is prepared, whether `[offset, offset + len)`
    /// (page-aligned, whole pages) has no data at all, so that the pages
    /// can be answered as zeros (`UFFDIO_ZEROPAGE`) without zeroing a buffer
    /// and calling [`data_request`](Pager::data_request), which a
    /// zero-fill answer would never read. `true` is a promise for the whole
    /// range: it is answered as [`Supply::Unavailable`] would be. The
    /// default, `false`, always asks `data_request`.
    fn data_unavailable(&mut self, offset: Offset, len: usize) -> bool {
        let _ = (offset, len);
        false
    }

    /// Accepts a page a client dirtied and returned.
    fn data_return(&mut self, offset: Offset, data: &[u8]) {
        let _ = (offset, data);
    }
}

/// How an object's pages reach its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SupplyMode {
    /// Each client gets its own copy of each page (`UFFDIO_COPY` into
    /// private anonymous memory): Mach's `data_provided`.
    #[default]
    Copy,
    /// The pager fills one shared page cache (a memfd) once; every client
    /// maps it privately and pages are installed with `UFFDIO_CONTINUE`
    /// without copying. A client's writes copy the page and stay private.
    /// Objects served this way cannot be changed by their owner.
    ZeroCopy,
}

/// What a client's faults resolve to once the object's pager is gone (dead,
/// or revoked by the client with [`MappedObject::revoke`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeathPolicy {
    /// Touching a page that was never supplied raises `SIGBUS` (the page is
    /// poisoned with `UFFDIO_POISON`; `si_code` is `BUS_MCEERR_AR`). Pages
    /// already supplied stay readable.
    #[default]
    Sigbus,
    /// Pages never supplied read as zeros (the range is unregistered and
    /// behaves as ordinary memory).
    ZeroFill,
}

/// How an object is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectConfig {
    /// Pages supplied per fault (read-ahead), at least 1: the faulting page
    /// and the pages after it that were not yet supplied.
    pub cluster: usize,
    /// Copy or zero-copy supply.
    pub mode: SupplyMode,
    /// What clients' faults become if this pager dies.
    pub on_death: DeathPolicy,
    /// Track which pages clients write (pages are installed write-protected
    /// and the first write to each is reported to the pager), so the owner
    /// can ask for them back ([`ObjectServer::clean`], Mach's
    /// `lock_request`). Copy mode only.
    pub track_dirty: bool,
}

impl Default for ObjectConfig {
    fn default() -> Self {
        ObjectConfig { cluster: 16, mode: SupplyMode::Copy, on_death: DeathPolicy::Sigbus, track_dirty: false }
    }
}

/// What one user (by kernel-reported uid) may make an [`ObjectServer`]
/// hold at once. Requests past a budget fail with
/// [`PagerError::OverBudget`]; the server goes on serving everyone else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// Mappings attached at once (each costs the server two descriptors:
    /// the userfaultfd and the lifeline). Default 128.
    pub clients_per_user: usize,
    /// Objects held for the user at once ([`ObjectServer::hold`]: copies it
    /// asked for, file snapshots it opened; each costs one descriptor).
    /// Default 128.
    pub holds_per_user: usize,
    /// Ports of its own a client may have at once ([`PortMinter::mint`]:
    /// each lookup of a service that hands every client its own port;
    /// each costs the server one descriptor). Default 256.
    pub ports_per_user: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets { clients_per_user: 128, holds_per_user: 128, ports_per_user: 256 }
    }
}

/// Counters of one object, as the server saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectStats {
    /// Fault events received for this object.
    pub faults: u64,
    /// Calls to the pager's `data_request`.
    pub requests: u64,
    /// Pages the pager was asked for.
    pub pages_requested: u64,
    /// Pages installed by `UFFDIO_COPY`.
    pub pages_copied: u64,
    /// Pages installed as zero pages.
    pub pages_zeroed: u64,
    /// Pages installed by `UFFDIO_CONTINUE` (zero-copy).
    pub pages_continued: u64,
    /// Pages duplicated into copy-on-write copies before the owner changed
    /// them (shadow pages).
    pub pages_shadowed: u64,
    /// Clients currently attached.
    pub clients: u64,
    /// First writes by clients to tracked pages (write-protect faults).
    pub pages_dirtied: u64,
    /// Dirty pages clients returned and the pager accepted.
    pub pages_returned: u64,
}

/// Errors of mapping and managing memory objects.
#[derive(Debug)]
pub enum PagerError {
    /// The pager's port is gone: its server exited or crashed.
    PagerDead,
    /// The server has no object with this id that this user may use (the
    /// two cases look the same, so ids cannot be probed).
    NoSuchObject(ObjectId),
    /// The server rejected the request as malformed.
    BadRequest(String),
    /// The pager did not answer a request in time (it is alive but busy or
    /// stuck); the request may still take effect later.
    Timeout,
    /// The server refused: the sender's credentials do not allow it.
    Denied(String),
    /// The request is valid but this object or kernel does not support it.
    Unsupported(String),
    /// This user already holds what the server allows one user (mappings,
    /// held objects: [`Budgets`]); release some and retry.
    OverBudget(String),
    /// The kernel refused to create a userfaultfd for this process.
    UserfaultfdUnavailable(io::Error),
    /// The object's pager runs as another user (the uid the kernel
    /// reported, if any) than this process's and root, and mapping would
    /// give it this process's userfaultfd
    /// ([`MemoryObject::trusting_any_pager`]).
    UntrustedPager(Option<u32>),
    /// The server's reply did not follow the protocol.
    Protocol(String),
    /// Sending to the server failed.
    Send(SendError),
    /// Receiving from the server failed.
    Recv(RecvError),
    /// A system call failed.
    Io(io::Error),
}

impl fmt::Display for PagerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PagerError::PagerDead => write!(f, "the object's pager is gone; open the object again from a live server"),
            PagerError::NoSuchObject(id) => write!(f, "the pager has no object {id} that this user may use"),
            PagerError::BadRequest(w) => write!(f, "the pager rejected the request: {w}"),
            PagerError::Timeout => write!(f, "the pager did not answer in time; retry with a longer timeout, or give up on it"),
            PagerError::Denied(w) => write!(f, "permission denied by the pager: {w}"),
            PagerError::Unsupported(w) => write!(f, "not supported: {w}"),
            PagerError::OverBudget(w) => write!(f, "over this user's budget at the pager: {w}"),
            PagerError::UserfaultfdUnavailable(e) => write!(
                f,
                "the kernel refused a userfaultfd ({e}); user-mode-only handling was also refused: \
                 set vm.unprivileged_userfaultfd=1, grant CAP_SYS_PTRACE, or give access to /dev/userfaultfd"
            ),
            PagerError::UntrustedPager(uid) => write!(
                f,
                "the object's pager runs as {}, neither this process's user nor root, and mapping would let it fill any untouched memory of this process; \
                 copy the object instead, or map it with MemoryObject::trusting_any_pager if that user may",
                uid.map_or("an unknown user".to_owned(), |u| format!("uid {u}"))
            ),
            PagerError::Protocol(w) => write!(f, "the pager broke the protocol: {w}"),
            PagerError::Send(e) => write!(f, "sending to the pager failed: {e}"),
            PagerError::Recv(e) => write!(f, "receiving from the pager failed: {e}"),
            PagerError::Io(e) => write!(f, "memory-object system call failed: {e}"),
        }
    }
}

impl std::error::Error for PagerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PagerError::Send(e) => Some(e),
            PagerError::Recv(e) => Some(e),
            PagerError::Io(e) | PagerError::UserfaultfdUnavailable(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SendError> for PagerError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::PeerDead => PagerError::PagerDead,
            e => PagerError::Send(e),
        }
    }
}

impl<R> From<crate::SendFailed<R>> for PagerError {
    fn from(e: crate::SendFailed<R>) -> Self {
        PagerError::from(e.into_error())
    }
}

impl From<RecvError> for PagerError {
    fn from(e: RecvError) -> Self {
        match e {
            RecvError::SendOnceDropped | RecvError::NoSenders => PagerError::PagerDead,
            e => PagerError::Recv(e),
        }
    }
}

/// What this kernel and this process's privileges allow, for choosing an
/// object's configuration or explaining a failure before mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSupport {
    /// Faults from system calls are handled too (not user-mode-only): a
    /// `write(2)` from a mapped object waits for the pager instead of
    /// failing with `EFAULT`.
    pub full_handling: bool,
    /// `UFFDIO_POISON` (Linux 6.6): needed by every mapping, for the
    /// `Sigbus` death policy and pager errors.
    pub poison: bool,
    /// Minor faults on shmem (Linux 5.14): needed for zero-copy objects.
    pub zero_copy: bool,
    /// Write-protect faults (Linux 5.7): needed for dirty tracking.
    pub dirty_tracking: bool,
}

/// Probes what this kernel and process allow.
///
/// # Errors
/// [`PagerError::UserfaultfdUnavailable`] when this process may not create
/// a userfaultfd at all (not even user-mode-only).
pub fn probe() -> Result<KernelSupport, PagerError> {
    let (f, origin) = Uffd::probe_features().map_err(|e| PagerError::UserfaultfdUnavailable(errno(e)))?;
    Ok(KernelSupport {
        full_handling: origin == uffd::Origin::Full,
        poison: f & uffd::FEATURE_POISON != 0,
        zero_copy: f & uffd::FEATURE_MINOR_SHMEM != 0 && f & uffd::FEATURE_MISSING_SHMEM != 0,
        dirty_tracking: f & uffd::FEATURE_PAGEFAULT_FLAG_WP != 0,
    })
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

const FD_USERFAULT: u8 = 1;
const FD_CACHE: u8 = 2;

/// A descriptor of the memory-object protocol travelling in a message
/// ([`crate::Item::Pager`]): either a client's userfaultfd on its way to the
/// pager, with the range it registered, or a pager's page cache on its way
/// to a client. Made only by this module; checked on arrival before the
/// message is accepted:
/// - a userfaultfd must be one (its `/proc/self/fd` link names
///   `[userfaultfd]`), with a non-empty, page-aligned range that does not
///   wrap around;
/// - a page cache must be a memfd at least as long as the object, sealed
///   against shrinking, growing and further writes (`F_SEAL_SHRINK`,
///   `F_SEAL_GROW`, `F_SEAL_FUTURE_WRITE`), so the receiver can neither be
///   cut short nor change what other clients see.
#[derive(Debug)]
pub struct PagerFd {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    UserFault { uffd: Uffd, addr: u64, len: u64 },
    Cache { memfd: OwnedFd, len: u64 },
}

impl PagerFd {
    pub(crate) fn check(d: &ItemDesc, fd: BorrowedFd<'_>, item: usize) -> Result<(), WireError> {
        let bad = |reason| Err(WireError::BadPagerItem { item, reason });
        let page = mem::page_size() as u64;
        match d.mode {
            FD_USERFAULT => {
                if !uffd::is_userfaultfd(fd) {
                    return bad("the descriptor is not a userfaultfd");
                }
                if d.len == 0 || !d.len.is_multiple_of(page) || !d.addr.is_multiple_of(page) || d.addr.checked_add(d.len).is_none() {
                    return bad("the registered range is empty, unaligned or wraps around");
                }
            }
            FD_CACHE => {
                if !mem::is_memfd(fd) {
                    return bad("the page cache is not a memfd");
                }
                if d.addr != 0 || d.len == 0 {
                    return bad("a page cache carries a length and no address");
                }
                if mem::file_size(fd).map_or(true, |n| n < d.len) {
                    return bad("the page cache is shorter than the object");
                }
                use rustix::fs::SealFlags;
                let need = SealFlags::SHRINK | SealFlags::GROW | SealFlags::FUTURE_WRITE;
                if !mem::seals(fd).is_ok_and(|s| s.contains(need)) {
                    return bad("the page cache is not sealed against shrinking, growing and writes");
                }
            }
            _ => return bad("unknown memory-object item mode"),
        }
        Ok(())
    }

    pub(crate) fn raise(d: &ItemDesc, fd: OwnedFd) -> PagerFd {
        let inner = match d.mode {
            FD_USERFAULT => Inner::UserFault { uffd: Uffd::from_fd(fd), addr: d.addr, len: d.len },
            _ => Inner::Cache { memfd: fd, len: d.len },
        };
        PagerFd { inner }
    }

    pub(crate) fn describe(&self) -> ItemDesc {
        match &self.inner {
            Inner::UserFault { addr, len, .. } => {
                ItemDesc { kind: wire::KIND_PAGER, mode: FD_USERFAULT, fds: 1, len: *len, addr: *addr, ..Default::default() }
            }
            Inner::Cache { len, .. } => {
                ItemDesc { kind: wire::KIND_PAGER, mode: FD_CACHE, fds: 1, len: *len, ..Default::default() }
            }
        }
    }

    fn userfault(uffd: Uffd, addr: usize, len: usize) -> PagerFd {
        PagerFd { inner: Inner::UserFault { uffd, addr: addr as u64, len: len as u64 } }
    }

    pub(crate) fn cache(memfd: OwnedFd, len: u64) -> PagerFd {
        PagerFd { inner: Inner::Cache { memfd, len } }
    }

    /// The memfd and length of a page-cache item (`None` for a userfaultfd).
    pub(crate) fn into_cache(self) -> Option<(OwnedFd, u64)> {
        match self.inner {
            Inner::Cache { memfd, len } => Some((memfd, len)),
            Inner::UserFault { .. } => None,
        }
    }
}

impl AsFd for PagerFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.inner {
            Inner::UserFault { uffd, .. } => uffd.as_fd(),
            Inner::Cache { memfd, .. } => memfd.as_fd(),
        }
    }
}

#[cfg(test)]
mod tests_support {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Byte `i` of the object is `(i / 4096 + i) % 251`.
    pub struct Pattern;
    impl Pager for Pattern {
        fn data_request(&mut self, offset: Offset, buf: &mut [u8]) -> Result<Supply, PagerFault> {
            for (i, b) in buf.iter_mut().enumerate() {
                let at = offset as usize + i;
                *b = ((at / 4096 + at) % 251) as u8;
            }
            Ok(Supply::Provided)
        }
    }

    pub fn expected(at: usize) -> u8 {
        ((at / 4096 + at) % 251) as u8
    }

    /// Runs a server in a thread until `stop`.
    pub fn run(mut server: ObjectServer, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<ObjectServer> {
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                server.serve(crate::Timeout::millis(20)).unwrap();
            }
            server
        })
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_hold_its_client_let_go_frees_the_budget_before_its_hang_up_is_served() {
        let (mut srv, _right) = ObjectServer::new().unwrap();
        srv.set_budgets(Budgets { holds_per_user: 1, ..Budgets::default() });
        let config = ObjectConfig::default();
        let (a, b) = (srv.add_object(4096, Box::new(Pattern), config).unwrap(), srv.add_object(4096, Box::new(Pattern), config).unwrap());
        let (first, first_right) = crate::port().unwrap();
        srv.hold(a, 7, first_right).unwrap();
        let (_second, second_right) = crate::port().unwrap();
        assert!(matches!(srv.hold(b, 7, second_right), Err(PagerError::OverBudget(_))), "one hold is the budget");
        // The client lets go, and asks again before the server has served
        // anything.
        drop(first);
        let (_third, third_right) = crate::port().unwrap();
        srv.hold(b, 7, third_right).unwrap();
        assert_eq!(srv.usage(7).1, 1);
    }

    /// A minter never waits for room on a busy server's main port: the
    /// name server's one thread mints for every user's lookups. With the
    /// queue full, a mint is refused as busy (not as a dead server) and
    /// gives its budget back; once the server has drained its queue,
    /// minting works again.
    #[test]
    fn a_busy_servers_minter_refuses_at_once_and_gives_its_budget_back() {
        let (mut srv, main) = ObjectServer::new().unwrap();
        main.set_queue_limit(4096).unwrap();
        let minter = srv.port_minter(main);
        let mut made = Vec::new();
        let busy = loop {
            match minter.mint(7) {
                Ok(r) => made.push(r),
                Err(e) => break e,
            }
            assert!(made.len() < minter.per_user(), "the queue never filled");
        };
        assert!(matches!(busy, PagerError::Timeout), "a full queue refused as {busy:?}");
        srv.serve(crate::Timeout::Zero).unwrap();
        assert_eq!(srv.client_ports(), made.len(), "every port minted before the refusal is served");
        let again = minter.mint(7).expect("minting after the server drained its queue");
        srv.serve(crate::Timeout::Zero).unwrap();
        assert_eq!(srv.client_ports(), made.len() + 1, "the refused mint kept a share of the budget");
        drop(again);
    }

    #[test]
    fn both_supply_modes_serve_touched_pages_in_process() {
        let page = mem::page_size();
        let (mut server, right) = ObjectServer::new().unwrap();
        let copy = server.add_object(10 * page as u64 + 5, Box::new(Pattern), ObjectConfig { cluster: 1, ..Default::default() }).unwrap();
        let zc = server
            .add_object(8 * page as u64, Box::new(Pattern), ObjectConfig { cluster: 2, mode: SupplyMode::ZeroCopy, ..Default::default() })
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let h = run(server, stop.clone());

        let a = MemoryObject::new(right.try_clone().unwrap(), copy);
        let m = a.map().unwrap();
        assert_eq!(m.len(), 10 * page + 5);
        let m_bytes = m.as_slice().expect("supplied by copy");
        assert_eq!(m_bytes[3 * page + 1], expected(3 * page + 1));
        assert_eq!(m_bytes[10 * page + 4], expected(10 * page + 4));
        let s = a.stats().unwrap();
        assert_eq!((s.requests, s.pages_requested, s.clients), (2, 2, 1));

        let b = MemoryObject::new(right.try_clone().unwrap(), zc);
        let mut z = b.map().unwrap();
        assert!(z.as_slice().is_none(), "zero-copy pages must not be handed out as a safe slice");
        let byte = |m: &MappedObject, at: usize| {
            let mut b = [0u8];
            assert!(m.read_at(at, &mut b));
            b[0]
        };
        assert_eq!(byte(&z, page + 9), expected(page + 9));
        assert_eq!(byte(&z, 2 * page), expected(2 * page), "read ahead");
        assert!(z.write_at(page, &[0]));
        let z2 = b.map().unwrap();
        assert_eq!(byte(&z2, page), expected(page), "a client's writes stay private");
        assert_eq!(byte(&z, page), 0);
        let s = b.stats().unwrap();
        assert_eq!(s.pages_requested, 2, "the second client got the cached pages without asking the pager");
        assert_eq!(s.clients, 2);

        stop.store(true, Ordering::Relaxed);
        drop((m, z, z2));
        h.join().unwrap();
    }
}

/// A client may hand the pager a userfaultfd made with fork events (ferry's
/// own client never asks for them). Each fork then installs a descriptor in
/// the pager; the pager must close it and go on serving the parent.
#[cfg(test)]
mod fork_tests {
    use super::tests_support::*;
    use super::*;
    use crate::message::{Item, Message};
    use crate::sys::uffd::{Backing, ObjectMapping};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_client_forking_leaves_nothing_in_the_pager() {
        let _one = crate::sys::uffd::fork_support::exclusive();
        let page = mem::page_size();
        let (u, _) = Uffd::new().unwrap();
        if let Err(e) = u.api(uffd::FEATURE_EVENT_FORK | uffd::FEATURE_POISON) {
            eprintln!("skipped a_client_forking_leaves_nothing_in_the_pager: fork events need CAP_SYS_PTRACE ({e})");
            return;
        }
        let (mut server, right) = ObjectServer::new().unwrap();
        let id = server.add_object(4 * page as u64, Box::new(Pattern), ObjectConfig { cluster: 1, ..Default::default() }).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let h = run(server, stop.clone());

        let m = ObjectMapping::new(4 * page, Backing::Anonymous).unwrap();
        u.register(m.addr(), 4 * page, uffd::MODE_MISSING).unwrap();
        let theirs = Uffd::from_fd(crate::sys::socket::dup(u.as_fd()).unwrap());
        let (_lifeline, lifeline) = crate::port().unwrap();
        let attach = Message::new(proto::ATTACH)
            .with_body(proto::body(&[id]))
            .with_item(Item::Pager(PagerFd::userfault(theirs, m.addr(), 4 * page)))
            .with_item(Item::Send(lifeline));
        call(&right, attach, crate::Timeout::millis(10_000), PagerError::BadRequest).unwrap();
        assert_eq!(m.as_slice()[page + 1], expected(page + 1));

        // fork() returns once the pager has read the event. The pager
        // closed the child's descriptor: the child's range is ordinary
        // memory and it reads a zero. Left open in the pager (and never
        // served), the child would wait in its fault forever.
        let pid = crate::sys::uffd::fork_support::fork_reader(m.addr() + 2 * page);
        let code = crate::sys::uffd::fork_support::reap_within(pid);
        assert_eq!(code, Some(0), "the forked child waited in its fault: the pager kept its descriptor");
        // And the parent is still served.
        assert_eq!(m.as_slice()[3 * page + 5], expected(3 * page + 5));
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        drop(m);
    }
}

#[cfg(test)]
mod item_tests {
    use super::*;
    use crate::error::RecvError;
    use crate::Timeout;

    fn send(tx: &crate::SendRight, mode: u8, len: u64, addr: u64, fd: BorrowedFd<'_>) {
        let mut bytes = Vec::new();
        let d = ItemDesc { kind: wire::KIND_PAGER, mode, fds: 1, len, addr, ..Default::default() };
        wire::encode(&mut bytes, 1, 0, &[d], b"");
        crate::sys::socket::send(tx.as_fd(), &[io::IoSlice::new(&bytes)], &[fd], true).unwrap();
    }

    #[test]
    fn forged_pager_items_are_rejected() {
        let (mut rx, tx) = crate::port().unwrap();
        let page = mem::page_size() as u64;
        let memfd = mem::memfd("not-a-uffd", page).unwrap();
        let (uffd, _) = Uffd::new().unwrap();
        let cases: [(u8, u64, u64, BorrowedFd<'_>); 5] = [
            (FD_USERFAULT, 8 * page, 0x10000, memfd.as_fd()), // not a userfaultfd
            (9, page, 0, memfd.as_fd()),                     // unknown mode
            (FD_CACHE, page, 0, memfd.as_fd()),              // cache without seals
            (FD_USERFAULT, 100, 0x10000, uffd.as_fd()),      // unaligned length
            (FD_USERFAULT, 2 * page, u64::MAX - page + 1, uffd.as_fd()), // wraps
        ];
        for (i, (mode, len, addr, fd)) in cases.into_iter().enumerate() {
            send(&tx, mode, len, addr, fd);
            match rx.recv(Timeout::Zero) {
                Err(RecvError::BadMessage(WireError::BadPagerItem { item: 0, .. })) => {}
                other => panic!("case {i}: {other:?}"),
            }
        }
        send(&tx, FD_USERFAULT, 2 * page, 0x10000, uffd.as_fd());
        let mut m = rx.recv(Timeout::Zero).unwrap();
        assert!(matches!(m.take_items().pop(), Some(crate::Item::Pager(PagerFd { inner: Inner::UserFault { len, .. } })) if len == 2 * page));
    }
}
