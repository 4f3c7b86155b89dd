//! userfaultfd: page faults delivered to a user process as events, and the
//! ioctls that resolve them. This is the kernel layer under ferry's memory
//! objects and pagers.
//!
//! `libc` 0.2 exposes none of the userfaultfd constants or structures, so
//! they are defined here with the values of the kernel's
//! `include/uapi/linux/userfaultfd.h` (stable ABI since Linux 4.3; each
//! feature bit notes the release that added it). `rustix::mm::userfaultfd`
//! creates the descriptor; everything else is `ioctl` and `read`.
//!
//! # Safety
//! A [`Uffd`] is a handle on *another* address space (or this one): its
//! ioctls fill pages of ranges that the owner of that address space
//! registered, and only pages that are missing there (the kernel answers
//! `EEXIST` for a page already present), so they never change bytes that
//! anyone could already have read. That is why they are safe functions here.
//! The one ioctl that can take a present page away (`UFFDIO_MOVE`, feature
//! bit `1 << 16`, Linux 6.8) is not wrapped, and ferry never enables that
//! feature on the descriptors it creates, so a pager handed one cannot move
//! a client's pages either.
//! [`ObjectMapping`] owns the range it maps (returned by `mmap`, unmapped
//! once in `Drop`), like [`crate::sys::mem::Mapping`].

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags, UserfaultfdFlags};

/// The API version the kernel speaks (`UFFD_API`).
pub const UFFD_API: u64 = 0xAA;
/// `userfaultfd(2)` flag: handle faults from user mode only (Linux 5.11).
/// Allowed to unprivileged processes even when
/// `vm.unprivileged_userfaultfd` is 0.
pub const UFFD_USER_MODE_ONLY: u32 = 1;

/// Feature: fault messages say whether a write-protect fault (Linux 5.7).
pub const FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
/// Feature: fork events (Linux 4.11; needs `CAP_SYS_PTRACE`). Never asked
/// for by ferry; a descriptor a client made may have it.
#[cfg(test)]
pub const FEATURE_EVENT_FORK: u64 = 1 << 1;
/// Feature: missing faults on shmem (Linux 4.11).
pub const FEATURE_MISSING_SHMEM: u64 = 1 << 5;
/// Feature: minor faults on shmem, resolved with `UFFDIO_CONTINUE` (5.14).
pub const FEATURE_MINOR_SHMEM: u64 = 1 << 10;
/// Feature: `UFFDIO_POISON`, a page that raises SIGBUS when touched (6.6).
pub const FEATURE_POISON: u64 = 1 << 14;

/// Register mode: report faults on missing pages.
pub const MODE_MISSING: u64 = 1;
/// Register mode: report writes to write-protected pages.
pub const MODE_WP: u64 = 2;
/// Register mode: report faults on pages present in the page cache but not
/// mapped (shmem, hugetlbfs).
pub const MODE_MINOR: u64 = 4;

const EVENT_PAGEFAULT: u8 = 0x12;
const EVENT_FORK: u8 = 0x13;
const EVENT_REMAP: u8 = 0x14;
const EVENT_REMOVE: u8 = 0x15;
const EVENT_UNMAP: u8 = 0x16;
const PAGEFAULT_FLAG_WRITE: u64 = 1;
const PAGEFAULT_FLAG_WP: u64 = 2;
const PAGEFAULT_FLAG_MINOR: u64 = 4;

const MODE_DONTWAKE: u64 = 1;
const COPY_MODE_WP: u64 = 2;
const WRITEPROTECT_MODE_WP: u64 = 1;
const WRITEPROTECT_MODE_DONTWAKE: u64 = 2;

// `_IOWR`/`_IOR`/`_IO` as the kernel's asm-generic/ioctl.h computes them.
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}
const IOC_READ: u64 = 2;
const IOC_RW: u64 = 3;

#[repr(C)]
#[derive(Default)]
struct ApiArg {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}
#[repr(C)]
#[derive(Default)]
struct RegisterArg {
    range: Range,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default)]
struct CopyArg {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
/// Shared layout of `uffdio_zeropage`, `uffdio_continue`, `uffdio_poison`.
#[repr(C)]
#[derive(Default)]
struct RangeModeArg {
    range: Range,
    mode: u64,
    result: i64,
}
#[repr(C)]
#[derive(Default)]
struct WriteProtectArg {
    range: Range,
    mode: u64,
}
/// `struct uffd_msg`: 32 bytes, the event byte first, then a union whose
/// page-fault member is `{ u64 flags; u64 address; u32 ptid; }`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Msg {
    event: u8,
    _reserved1: u8,
    _reserved2: u16,
    _reserved3: u32,
    a: u64,
    b: u64,
    c: u64,
}

const UFFDIO_API: u64 = ioc(IOC_RW, 0x3F, std::mem::size_of::<ApiArg>());
const UFFDIO_REGISTER: u64 = ioc(IOC_RW, 0x00, std::mem::size_of::<RegisterArg>());
const UFFDIO_UNREGISTER: u64 = ioc(IOC_READ, 0x01, std::mem::size_of::<Range>());
const UFFDIO_WAKE: u64 = ioc(IOC_READ, 0x02, std::mem::size_of::<Range>());
const UFFDIO_COPY: u64 = ioc(IOC_RW, 0x03, std::mem::size_of::<CopyArg>());
const UFFDIO_ZEROPAGE: u64 = ioc(IOC_RW, 0x04, std::mem::size_of::<RangeModeArg>());
const UFFDIO_WRITEPROTECT: u64 = ioc(IOC_RW, 0x06, std::mem::size_of::<WriteProtectArg>());
const UFFDIO_CONTINUE: u64 = ioc(IOC_RW, 0x07, std::mem::size_of::<RangeModeArg>());
const UFFDIO_POISON: u64 = ioc(IOC_RW, 0x08, std::mem::size_of::<RangeModeArg>());
/// `/dev/userfaultfd`'s `USERFAULTFD_IOC_NEW` (`_IO(0xAA, 0)`, Linux 6.1).
const USERFAULTFD_IOC_NEW: u64 = 0xAA << 8;

const _: () = assert!(std::mem::size_of::<Msg>() == 32);
const _: () = assert!(UFFDIO_API == 0xc018_aa3f);
const _: () = assert!(UFFDIO_REGISTER == 0xc020_aa00);
const _: () = assert!(UFFDIO_COPY == 0xc028_aa03);

/// One event read from a userfaultfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A thread faulted at `addr` (page-aligned unless the kernel was asked
    /// for exact addresses) and sleeps until the page is resolved.
    PageFault {
        /// Faulting address.
        addr: u64,
        /// The access was a write.
        write: bool,
        /// A write to a write-protected page (it is present).
        wp: bool,
        /// A minor fault: the page is in the page cache but not mapped.
        minor: bool,
    },
    /// Pages in `[start, end)` were dropped (`MADV_DONTNEED`/`REMOVE`).
    Remove {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// `[start, end)` was unmapped.
    Unmap {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// The registered range moved (`mremap`).
    Remap {
        /// Old start.
        from: u64,
        /// New start.
        to: u64,
        /// Length.
        len: u64,
    },
    /// The process forked with the range registered (not requested by
    /// ferry; the new descriptor the kernel installed has been closed).
    Fork,
    /// An event this code does not know.
    Unknown(u8),
}

/// How a userfaultfd was obtained, which decides which faults it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Full handling: faults from user mode and from the kernel (a system
    /// call reading the range waits for the pager too).
    Full,
    /// `UFFD_USER_MODE_ONLY`: a system call that touches a missing page
    /// fails with `EFAULT` instead of waiting. What unprivileged processes
    /// get when `vm.unprivileged_userfaultfd` is 0.
    UserModeOnly,
}

/// An owned userfaultfd (close-on-exec, non-blocking).
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
}

/// The outcome of a fill ioctl that did not do all it was asked: bytes done,
/// and why it stopped. Measured on Linux 6.18: a fill that made progress and
/// then met a present page reports the progress with `EAGAIN` (call again
/// for the rest); one that met a present page first reports `(0, EEXIST)`.
/// `ENOENT`: the range is not (or no longer) registered; `ESRCH`: the
/// address space is gone (its process exited).
pub type Partial = (usize, Errno);

impl Uffd {
    /// Creates a userfaultfd for this process, with the most capable kind
    /// the kernel grants: the `userfaultfd(2)` system call for faults from
    /// any mode, else `/dev/userfaultfd`, else user-mode-only.
    ///
    /// # Errors
    /// `EPERM` when none is permitted (a kernel built without
    /// userfaultfd gives `ENOSYS`).
    pub fn new() -> rustix::io::Result<(Uffd, Origin)> {
        let flags = UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::NONBLOCK;
        // SAFETY: creating the descriptor touches no memory; what it allows
        // later is confined to ranges this process registers (module doc).
        match unsafe { rustix::mm::userfaultfd(flags) } {
            Ok(fd) => return Ok((Uffd { fd }, Origin::Full)),
            Err(Errno::PERM) => {}
            Err(e) => return Err(e),
        }
        if let Ok(fd) = Self::from_device(flags) {
            return Ok((Uffd { fd }, Origin::Full));
        }
        Self::new_user_mode_only().map(|u| (u, Origin::UserModeOnly))
    }

    /// Creates a userfaultfd that handles faults from user mode only
    /// (`UFFD_USER_MODE_ONLY`), which every process may do.
    pub fn new_user_mode_only() -> rustix::io::Result<Uffd> {
        let flags = UserfaultfdFlags::CLOEXEC
            | UserfaultfdFlags::NONBLOCK
            | UserfaultfdFlags::from_bits_retain(UFFD_USER_MODE_ONLY);
        // SAFETY: creating the descriptor touches no memory; what it allows
        // later is confined to ranges this process registers (module doc).
        let fd = unsafe { rustix::mm::userfaultfd(flags)? };
        Ok(Uffd { fd })
    }

    fn from_device(flags: UserfaultfdFlags) -> rustix::io::Result<OwnedFd> {
        let dev = rustix::fs::open(
            "/dev/userfaultfd",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        // SAFETY: USERFAULTFD_IOC_NEW takes its flags by value and returns a
        // new descriptor, which becomes an OwnedFd right here and nowhere else.
        let rc = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, flags.bits() as libc::c_int) };
        if rc < 0 {
            return Err(last_errno());
        }
        // SAFETY: `rc` is a fresh descriptor the kernel just gave us; nothing
        // else owns it.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(rc) })
    }

    /// Wraps a descriptor already checked with [`is_userfaultfd`].
    pub fn from_fd(fd: OwnedFd) -> Uffd {
        Uffd { fd }
    }

    /// The `UFFDIO_API` handshake: asks for `features` and returns the
    /// features the kernel supports (a superset is fine; asking for one it
    /// lacks fails with `EINVAL`). Done once per descriptor.
    pub fn api(&self, features: u64) -> rustix::io::Result<u64> {
        let mut a = ApiArg { api: UFFD_API, features, ioctls: 0 };
        self.ioctl(UFFDIO_API, &mut a)?;
        Ok(a.features)
    }

    /// The features the kernel offers and the kind of descriptor this
    /// process gets, probed on a throw-away descriptor.
    pub fn probe_features() -> rustix::io::Result<(u64, Origin)> {
        let (u, origin) = Uffd::new()?;
        Ok((u.api(0)?, origin))
    }

    /// Registers `[start, start+len)` for the given `MODE_*` bits; returns
    /// the bit mask of ioctls the range supports.
    pub fn register(&self, start: usize, len: usize, mode: u64) -> rustix::io::Result<u64> {
        let mut r = RegisterArg { range: Range { start: start as u64, len: len as u64 }, mode, ioctls: 0 };
        self.ioctl(UFFDIO_REGISTER, &mut r)?;
        Ok(r.ioctls)
    }

    /// Stops reporting faults in `[start, start+len)`; threads waiting there
    /// are woken and fault normally.
    pub fn unregister(&self, start: usize, len: usize) -> rustix::io::Result<()> {
        let mut r = Range { start: start as u64, len: len as u64 };
        self.ioctl(UFFDIO_UNREGISTER, &mut r)
    }

    /// Wakes threads waiting on faults in `[start, start+len)` (after fills
    /// made with `wake == false`).
    pub fn wake(&self, start: usize, len: usize) -> rustix::io::Result<()> {
        let mut r = Range { start: start as u64, len: len as u64 };
        self.ioctl(UFFDIO_WAKE, &mut r)
    }

    /// `UFFDIO_COPY`: fills the missing pages at `dst` with a copy of `src`
    /// (whole pages). `wp` installs them write-protected (for dirty
    /// tracking). Returns the bytes filled, or how far it got and why not.
    pub fn copy(&self, dst: usize, src: &[u8], wake: bool, wp: bool) -> Result<usize, Partial> {
        let mut mode = if wake { 0 } else { MODE_DONTWAKE };
        if wp {
            mode |= COPY_MODE_WP;
        }
        let mut c = CopyArg { dst: dst as u64, src: src.as_ptr() as u64, len: src.len() as u64, mode, copy: 0 };
        let r = self.ioctl(UFFDIO_COPY, &mut c);
        done(r, c.copy, src.len())
    }

    /// `UFFDIO_ZEROPAGE`: maps zero pages at the missing pages of
    /// `[dst, dst+len)` (Mach's `data_unavailable`).
    pub fn zeropage(&self, dst: usize, len: usize, wake: bool) -> Result<usize, Partial> {
        self.range_mode(UFFDIO_ZEROPAGE, dst, len, if wake { 0 } else { MODE_DONTWAKE })
    }

    /// `UFFDIO_CONTINUE`: maps the page-cache pages already present behind
    /// `[dst, dst+len)` of a shmem mapping, without copying.
    pub fn continue_(&self, dst: usize, len: usize, wake: bool) -> Result<usize, Partial> {
        self.range_mode(UFFDIO_CONTINUE, dst, len, if wake { 0 } else { MODE_DONTWAKE })
    }

    /// `UFFDIO_POISON`: marks the missing pages of `[dst, dst+len)` so that
    /// touching them raises `SIGBUS` (`BUS_MCEERR_AR`) instead of faulting
    /// to a handler. Needs [`FEATURE_POISON`].
    pub fn poison(&self, dst: usize, len: usize, wake: bool) -> Result<usize, Partial> {
        self.range_mode(UFFDIO_POISON, dst, len, if wake { 0 } else { MODE_DONTWAKE })
    }

    /// `UFFDIO_WRITEPROTECT`: sets (`protect`) or clears write protection
    /// on `[start, start+len)` of a range registered with [`MODE_WP`].
    /// `wake` matters only when clearing (waking the writers that waited);
    /// the kernel refuses `DONTWAKE` together with protecting, so it is not
    /// passed then.
    pub fn writeprotect(&self, start: usize, len: usize, protect: bool, wake: bool) -> rustix::io::Result<()> {
        let mut mode = if protect { WRITEPROTECT_MODE_WP } else { 0 };
        if !wake && !protect {
            mode |= WRITEPROTECT_MODE_DONTWAKE;
        }
        let mut w = WriteProtectArg { range: Range { start: start as u64, len: len as u64 }, mode };
        self.ioctl(UFFDIO_WRITEPROTECT, &mut w)
    }

    fn range_mode(&self, req: u64, dst: usize, len: usize, mode: u64) -> Result<usize, Partial> {
        let mut a = RangeModeArg { range: Range { start: dst as u64, len: len as u64 }, mode, result: 0 };
        let r = self.ioctl(req, &mut a);
        done(r, a.result, len)
    }

    /// Reads the events queued now (at most `max`); empty when none.
    ///
    /// Never blocks, whatever the descriptor's `O_NONBLOCK` flag says: that
    /// flag belongs to the open file description, which a pager shares with
    /// the client that made the descriptor, so the client can clear it. The
    /// read asks the kernel not to wait with `RWF_NOWAIT` (`preadv2`, which
    /// userfaultfd honours since it reads through `read_iter`, Linux 6.8);
    /// on a kernel that refuses the flag, it polls first and reads only when
    /// events are queued (a client reading its own events at the same
    /// moment could still win that race there).
    ///
    /// A fork event's new descriptor, which the kernel installs in the
    /// reading process, is closed here: ferry never asks for fork events,
    /// but a client may have, on a descriptor it made itself.
    pub fn read_events(&self, max: usize) -> rustix::io::Result<Vec<Event>> {
        let mut msgs = vec![Msg::default(); max.clamp(1, 64)];
        let bytes = msgs.len() * std::mem::size_of::<Msg>();
        let iov = libc::iovec { iov_base: msgs.as_mut_ptr().cast::<c_void>(), iov_len: bytes };
        // SAFETY: `iov` describes `msgs`, a live, writable buffer of `bytes`
        // bytes of plain-old-data; the kernel writes whole 32-byte messages
        // into it. Offset -1: the descriptor has no position to read at.
        let mut n = unsafe { libc::preadv2(self.fd.as_raw_fd(), &iov, 1, -1, libc::RWF_NOWAIT) };
        if n < 0 && last_errno() == Errno::OPNOTSUPP {
            let mut fds = [rustix::event::PollFd::new(&self.fd, rustix::event::PollFlags::IN)];
            let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
            match rustix::event::poll(&mut fds, Some(&zero)) {
                Ok(0) | Err(Errno::INTR) => return Ok(Vec::new()),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            // SAFETY: as above.
            n = unsafe { libc::read(self.fd.as_raw_fd(), iov.iov_base, bytes) };
        }
        if n < 0 {
            return match last_errno() {
                Errno::AGAIN | Errno::INTR => Ok(Vec::new()),
                e => Err(e),
            };
        }
        let count = n as usize / std::mem::size_of::<Msg>();
        let events: Vec<Event> = msgs[..count].iter().map(decode).collect();
        for (m, e) in msgs[..count].iter().zip(&events) {
            if *e == Event::Fork {
                close_forked(m.a as u32 as i32);
            }
        }
        Ok(events)
    }

    fn ioctl<T>(&self, req: u64, arg: &mut T) -> rustix::io::Result<()> {
        // SAFETY: every request used here takes a pointer to the structure
        // type it is paired with in this module (its size is encoded in the
        // request number and checked by the kernel); the kernel reads it and
        // writes back only its result fields. Source buffers named inside
        // (`copy`) are live slices borrowed for the duration of the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), req as _, arg as *mut T) };
        if rc < 0 {
            Err(last_errno())
        } else {
            Ok(())
        }
    }
}

fn done(r: rustix::io::Result<()>, result: i64, want: usize) -> Result<usize, Partial> {
    match r {
        Ok(()) => Ok(if result > 0 { result as usize } else { want }),
        Err(e) => Err((result.max(0) as usize, e)),
    }
}

fn decode(m: &Msg) -> Event {
    match m.event {
        EVENT_PAGEFAULT => Event::PageFault {
            addr: m.b,
            write: m.a & PAGEFAULT_FLAG_WRITE != 0,
            wp: m.a & PAGEFAULT_FLAG_WP != 0,
            minor: m.a & PAGEFAULT_FLAG_MINOR != 0,
        },
        EVENT_REMOVE => Event::Remove { start: m.a, end: m.b },
        EVENT_UNMAP => Event::Unmap { start: m.a, end: m.b },
        EVENT_REMAP => Event::Remap { from: m.a, to: m.b, len: m.c },
        EVENT_FORK => Event::Fork,
        e => Event::Unknown(e),
    }
}

/// Closes the descriptor the kernel installed in this process for a fork
/// event (`uffd_msg.arg.fork.ufd`). Dropping it releases the forked
/// child's userfaultfd context, so the child's registered ranges become
/// ordinary memory instead of waiting for a handler nobody runs.
fn close_forked(fd: i32) {
    if fd < 0 {
        return;
    }
    // SAFETY: the kernel installed `fd` in our descriptor table while
    // delivering this very event, for the reader alone; nothing else in
    // this process knows its number, so owning (and closing) it is sound.
    drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
}

fn last_errno() -> Errno {
    Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

impl AsFd for Uffd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Copies `buf.len()` bytes of this process's memory at `addr` into `buf`
/// through the kernel (`process_vm_readv` on ourselves), for memory another
/// thread may be writing: no Rust reference to the source is ever made, and
/// an unmapped source fails with `EFAULT` instead of crashing.
pub fn read_own(addr: usize, buf: &mut [u8]) -> rustix::io::Result<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, live and writable for its length; the
    // kernel checks `remote` against our own address space and only reads it.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(last_errno())
    } else {
        Ok(n as usize)
    }
}

/// Whether `fd` is a userfaultfd: its `/proc/self/fd` link names the
/// anonymous inode `[userfaultfd]` (both `userfaultfd(2)` and
/// `/dev/userfaultfd` make those).
pub fn is_userfaultfd(fd: BorrowedFd<'_>) -> bool {
    match std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
        Ok(p) => p.as_os_str() == "anon_inode:[userfaultfd]",
        Err(_) => false,
    }
}

/// What backs an [`ObjectMapping`].
#[derive(Debug)]
pub enum Backing<'a> {
    /// Private anonymous memory: pages arrive by `UFFDIO_COPY`/`ZEROPAGE`.
    Anonymous,
    /// A private mapping of a shmem file (memfd): pages present in its page
    /// cache are installed by `UFFDIO_CONTINUE` without copying; writes by
    /// the mapping process copy the page and stay private.
    Shmem(BorrowedFd<'a>),
}

/// An owned private mapping made to be registered with a userfaultfd.
#[derive(Debug)]
pub struct ObjectMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: an owned address range may move between threads like a Box<[u8]>.
unsafe impl Send for ObjectMapping {}
// SAFETY: `&ObjectMapping` hands out only `&[u8]`; writes need `&mut`.
unsafe impl Sync for ObjectMapping {}

impl ObjectMapping {
    /// Maps `len` bytes (a whole number of pages), readable and writable,
    /// private, anywhere.
    pub fn new(len: usize, backing: Backing<'_>) -> rustix::io::Result<ObjectMapping> {
        if len == 0 || !len.is_multiple_of(crate::sys::mem::page_size()) {
            return Err(Errno::INVAL);
        }
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a null hint without MAP_FIXED never replaces an existing
        // mapping; the returned range is fresh and now owned by us.
        let p = unsafe {
            match backing {
                Backing::Anonymous => rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, prot, MapFlags::PRIVATE)?,
                Backing::Shmem(fd) => rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::PRIVATE, fd, 0)?,
            }
        };
        Ok(ObjectMapping { ptr: NonNull::new(p.cast()).ok_or(Errno::FAULT)?, len })
    }

    /// First address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The mapped bytes. Touching a page that is not present faults to
    /// whoever handles the range's userfaultfd.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: mapped readable for `len` bytes while self lives. Pages of
        // a registered range are only ever filled where missing (module
        // doc), so bytes already read do not change under a shared borrow;
        // the one exception, a shmem backing whose owner writes the file
        // after supplying a page, is the trust a zero-copy client places in
        // its pager (docs/pager.md, "Whom to trust").
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Copies `out.len()` bytes at `offset` out of the mapping without
    /// forming a reference to them (another process may be changing them,
    /// for a shmem backing); touching a page not present faults to the
    /// userfaultfd handler as an ordinary read would. False if out of range.
    pub fn copy_out_racy(&self, offset: usize, out: &mut [u8]) -> bool {
        if offset.checked_add(out.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the source range is inside the mapping (checked), readable
        // while self lives; `out` is a distinct, exclusively borrowed buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies `src` into the mapping at `offset` without forming a
    /// reference to the bytes (writes are private to this process: the
    /// mapping is private). False if out of range.
    pub fn copy_in_racy(&mut self, offset: usize, src: &[u8]) -> bool {
        if offset.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the destination is inside the writable mapping (checked);
        // `&mut self` rules out a live reference into it from this process,
        // and `src` is a distinct buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
        true
    }

    /// The mapped bytes, writable (writes are private to this process).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: mapped writable for `len` bytes; `&mut self` makes this the
        // only live reference into the range.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for ObjectMapping {
    fn drop(&mut self) {
        // SAFETY: the range is ours and is unmapped once, here.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Forking children for tests of fork events (the pager's code is free of
/// `unsafe`; this layer is not).
#[cfg(test)]
pub(crate) mod fork_support {
    /// Tests that ask for fork events hold this for as long as their
    /// userfaultfd lives: a fork anywhere in the process queues an event on
    /// every such descriptor and waits until each is read, so two of them
    /// at once would wait for each other.
    pub(crate) static FORK_EVENTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Takes [`FORK_EVENTS`].
    pub(crate) fn exclusive() -> std::sync::MutexGuard<'static, ()> {
        FORK_EVENTS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forks a child that reads the byte at `addr` (a mapping it inherits)
    /// and exits with it as its status. Returns the child's pid.
    ///
    /// The raw `clone` system call, not the C library's `fork()`: that one
    /// holds the allocator's locks across the system call, which waits
    /// until the fork event is read, and the thread reading it in this
    /// same process allocates: each would wait for the other for ever.
    pub(crate) fn fork_reader(addr: usize) -> i32 {
        // SAFETY: a plain fork by `clone(SIGCHLD)` (no shared memory, no
        // new stack); the child only reads one byte of a mapping it
        // inherited and leaves with `_exit`, touching no C library state.
        let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) } as i32;
        if pid == 0 {
            // SAFETY: `addr` is mapped readable in the child (inherited).
            let b = unsafe { std::ptr::read_volatile(addr as *const u8) };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(b as i32) };
        }
        assert!(pid > 0, "fork failed");
        pid
    }

    /// The exit code of child `pid` if it exits within about 20 seconds;
    /// otherwise kills it and returns `None`.
    pub(crate) fn reap_within(pid: i32) -> Option<i32> {
        let mut status = 0;
        for _ in 0..4000 {
            // SAFETY: waits for our own child without blocking.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                return Some(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: kills and reaps our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mem::page_size;
    use std::sync::Arc;

    /// Serves `n` faults of `u` with `fill(addr)`, in a thread.
    fn serve(u: Arc<Uffd>, n: usize, page: u8) -> std::thread::JoinHandle<Vec<Event>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while seen.len() < n {
                let _ = rustix::event::poll(&mut [rustix::event::PollFd::new(&*u, rustix::event::PollFlags::IN)], None);
                for ev in u.read_events(16).unwrap() {
                    if let Event::PageFault { addr, .. } = ev {
                        let at = addr as usize & !(page_size() - 1);
                        let buf = vec![page; page_size()];
                        u.copy(at, &buf, true, false).unwrap();
                    }
                    seen.push(ev);
                }
            }
            seen
        })
    }

    #[test]
    fn ioctl_numbers_match_the_kernel() {
        assert_eq!(UFFDIO_ZEROPAGE, 0xc020_aa04);
        assert_eq!(UFFDIO_CONTINUE, 0xc020_aa07);
        assert_eq!(UFFDIO_POISON, 0xc020_aa08);
        assert_eq!(UFFDIO_WRITEPROTECT, 0xc018_aa06);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010_aa01);
        assert_eq!(UFFDIO_WAKE, 0x8010_aa02);
    }

    #[test]
    fn copy_resolves_a_missing_fault_and_refuses_a_present_page() {
        let (u, _) = Uffd::new().unwrap();
        u.api(0).unwrap();
        let p = page_size();
        let m = ObjectMapping::new(4 * p, Backing::Anonymous).unwrap();
        u.register(m.addr(), m.as_slice().len(), MODE_MISSING).unwrap();
        let u = Arc::new(u);
        let h = serve(u.clone(), 1, 0x5a);
        assert_eq!(m.as_slice()[p + 7], 0x5a);
        let evs = h.join().unwrap();
        assert!(matches!(evs[0], Event::PageFault { addr, write: false, .. } if addr as usize & !(p - 1) == m.addr() + p));
        // A present page is never overwritten.
        assert_eq!(u.copy(m.addr() + p, &vec![1u8; p], true, false), Err((0, Errno::EXIST)));
        // Zero-fill the rest without anyone faulting.
        let filled = u.zeropage(m.addr() + 2 * p, 2 * p, true).unwrap();
        assert_eq!(filled, 2 * p);
        assert_eq!(m.as_slice()[3 * p], 0);
        // A copy that runs into a present page stops there and says how far it got.
        let r = u.copy(m.addr(), &vec![2u8; 2 * p], true, false);
        assert_eq!(r, Err((p, Errno::AGAIN)), "progress first, then the present page");
        assert_eq!(m.as_slice()[0], 2);
    }

    #[test]
    fn poison_marks_only_missing_pages() {
        let (u, _) = Uffd::new().unwrap();
        let feats = u.api(FEATURE_POISON).unwrap();
        assert!(feats & FEATURE_POISON != 0);
        let p = page_size();
        let m = ObjectMapping::new(2 * p, Backing::Anonymous).unwrap();
        u.register(m.addr(), m.as_slice().len(), MODE_MISSING).unwrap();
        u.copy(m.addr(), &vec![9u8; p], true, false).unwrap();
        // Poisoning stops at the present page.
        assert_eq!(u.poison(m.addr(), 2 * p, true), Err((0, Errno::EXIST)));
        assert_eq!(u.poison(m.addr() + p, p, true), Ok(p));
        assert_eq!(m.as_slice()[0], 9);
    }

    #[test]
    fn minor_fault_on_shmem_is_resolved_by_continue() {
        let (u, _) = Uffd::new().unwrap();
        u.api(FEATURE_MINOR_SHMEM | FEATURE_MISSING_SHMEM).unwrap();
        let p = page_size();
        let fd = crate::sys::mem::memfd("uffd-test", 2 * p as u64).unwrap();
        let m = ObjectMapping::new(2 * p, Backing::Shmem(fd.as_fd())).unwrap();
        u.register(m.addr(), m.as_slice().len(), MODE_MISSING | MODE_MINOR).unwrap();
        // The "pager" fills page 1 of the file through its own mapping.
        let mut w = crate::sys::mem::Mapping::map(
            fd.as_fd(), 2 * p, true, crate::sys::mem::Share::Shared, crate::sys::mem::Place::Anywhere, false,
        )
        .unwrap();
        w.as_mut_slice().unwrap()[p..2 * p].fill(0x77);
        let u = Arc::new(u);
        let u2 = u.clone();
        let h = std::thread::spawn(move || loop {
            let _ = rustix::event::poll(&mut [rustix::event::PollFd::new(&*u2, rustix::event::PollFlags::IN)], None);
            if let Some(Event::PageFault { addr, minor, .. }) = u2.read_events(1).unwrap().first().copied() {
                u2.continue_(addr as usize & !(p - 1), p, true).unwrap();
                return minor;
            }
        });
        assert_eq!(m.as_slice()[p + 1], 0x77);
        assert!(h.join().unwrap(), "a page present in the page cache faults as minor");
    }

    #[test]
    fn write_protect_reports_the_first_write() {
        let (u, _) = Uffd::new().unwrap();
        u.api(FEATURE_PAGEFAULT_FLAG_WP).unwrap();
        let p = page_size();
        let mut m = ObjectMapping::new(p, Backing::Anonymous).unwrap();
        u.register(m.addr(), p, MODE_MISSING | MODE_WP).unwrap();
        u.copy(m.addr(), &vec![3u8; p], true, true).unwrap();
        let u = Arc::new(u);
        let u2 = u.clone();
        let h = std::thread::spawn(move || loop {
            let _ = rustix::event::poll(&mut [rustix::event::PollFd::new(&*u2, rustix::event::PollFlags::IN)], None);
            if let Some(ev @ Event::PageFault { addr, .. }) = u2.read_events(1).unwrap().first().copied() {
                u2.writeprotect(addr as usize & !(p - 1), p, false, true).unwrap();
                return ev;
            }
        });
        assert_eq!(m.as_slice()[0], 3, "reading a protected page does not fault");
        m.as_mut_slice()[0] = 4;
        assert!(matches!(h.join().unwrap(), Event::PageFault { wp: true, write: true, .. }));
        // Protecting again is allowed only with wake (the kernel refuses
        // DONTWAKE with protection; the wrapper never passes it then).
        u.writeprotect(m.addr(), p, true, false).unwrap();
    }

    /// What the kernel does when the last descriptor of a userfaultfd goes
    /// (a pager holding the only copy dies): threads waiting in faults are
    /// woken, the range is no longer registered, and they fault it in as
    /// ordinary memory, zeros here. This is why clients keep their own copy.
    #[test]
    fn releasing_the_last_descriptor_turns_the_range_into_ordinary_memory() {
        let (u, _) = Uffd::new().unwrap();
        u.api(0).unwrap();
        let p = page_size();
        let m = Arc::new(ObjectMapping::new(p, Backing::Anonymous).unwrap());
        u.register(m.addr(), p, MODE_MISSING).unwrap();
        let m2 = m.clone();
        let reader = std::thread::spawn(move || m2.as_slice()[10]);
        // Wait until the reader is stuck in its fault (the event is queued).
        let _ = rustix::event::poll(&mut [rustix::event::PollFd::new(&u, rustix::event::PollFlags::IN)], None);
        drop(u);
        assert_eq!(reader.join().unwrap(), 0);
    }

    #[test]
    fn the_device_makes_working_descriptors_where_it_may_be_opened() {
        let flags = UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::NONBLOCK;
        match Uffd::from_device(flags) {
            Ok(fd) => {
                assert!(is_userfaultfd(fd.as_fd()));
                let u = Uffd::from_fd(fd);
                assert!(u.api(0).is_ok());
            }
            // No device, or no permission to open it: `new` falls back.
            Err(e) => assert!(matches!(e, Errno::NOENT | Errno::ACCESS | Errno::PERM), "{e}"),
        }
    }

    /// The pager shares the open file description with the client, so the
    /// client can clear `O_NONBLOCK`; reading must still never wait.
    #[test]
    fn reading_never_waits_even_when_the_descriptor_blocks() {
        let (u, _) = Uffd::new().unwrap();
        u.api(0).unwrap();
        let fl = rustix::fs::fcntl_getfl(&u).unwrap();
        rustix::fs::fcntl_setfl(&u, fl - rustix::fs::OFlags::NONBLOCK).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = u.read_events(4).map(|e| e.len());
            let _ = tx.send(r);
        });
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(r) => assert_eq!(r, Ok(0)),
            Err(_) => panic!("read_events waited on a descriptor without O_NONBLOCK"),
        }
    }

    /// A fork event installs a descriptor for the child's context in the
    /// reader; it must be closed, or the child's faults wait forever for a
    /// handler nobody runs (and the reader leaks a descriptor per fork).
    #[test]
    fn a_fork_event_leaves_no_descriptor_behind() {
        let _one = fork_support::exclusive();
        let (u, _) = Uffd::new().unwrap();
        match u.api(FEATURE_EVENT_FORK) {
            Ok(_) => {}
            Err(e) => {
                eprintln!("skipped a_fork_event_leaves_no_descriptor_behind: fork events need CAP_SYS_PTRACE ({e})");
                return;
            }
        }
        let p = page_size();
        let m = Arc::new(ObjectMapping::new(p, Backing::Anonymous).unwrap());
        u.register(m.addr(), p, MODE_MISSING).unwrap();
        let addr = m.addr();
        // The forking thread waits in fork() until the event is read.
        let forker = std::thread::spawn(move || fork_support::fork_reader(addr));
        // Events are read until our forker is back from fork(): a fork by
        // another test of this process while `u` lives queues an event too,
        // and stopping at the first one seen could leave ours unread, and
        // our forker waiting in fork() for ever.
        let mut seen = Vec::new();
        for _ in 0..4000 {
            seen.extend(u.read_events(4).unwrap());
            if seen.contains(&Event::Fork) && forker.is_finished() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(seen.contains(&Event::Fork), "{seen:?}");
        assert!(forker.is_finished(), "the forking thread is still in fork() after 20 s: its event was never read");
        let pid = forker.join().unwrap();
        // With the child's descriptor closed, its range is ordinary memory:
        // it reads a zero and exits. Left open, it would wait in the fault.
        let code = fork_support::reap_within(pid);
        assert_eq!(code, Some(0), "the forked child waited in its fault: the fork event's descriptor was left open");
        drop(m);
    }

    #[test]
    fn descriptors_are_recognised() {
        let (u, _) = Uffd::new().unwrap();
        assert!(is_userfaultfd(u.as_fd()));
        let fd = crate::sys::mem::memfd("not-uffd", 1).unwrap();
        assert!(!is_userfaultfd(fd.as_fd()));
        let um = Uffd::new_user_mode_only().unwrap();
        assert!(is_userfaultfd(um.as_fd()));
    }
}
