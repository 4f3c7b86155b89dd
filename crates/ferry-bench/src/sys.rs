//! The benchmark crate's only contact with the kernel that needs `unsafe`:
//! `fork`, shared and file mappings, `process_vm_readv`, `vmsplice`, the
//! `userfaultfd` probe, and the bare userfaultfd handler of the `pager`
//! suite's `uffd-raw` baseline ([`RawUffd`]). The baselines are these raw primitives by
//! definition, and ferry does not (and should not) export them, so they live
//! here, in one module with the same shape as ferry's own `sys` layer.
//!
//! # Safety
//! - [`fork_run`] forks only when the calling process has exactly one
//!   thread, so the child inherits no lock held by another thread; the child
//!   runs the given closure and leaves with `_exit`, never returning into the
//!   parent's stack, never running its destructors or flushing its stdio
//!   buffers.
//! - A [`Map`] owns the range `mmap` returned and unmaps it once, in `Drop`;
//!   the slices it hands out borrow it, so they cannot outlive the range.
//!   A shared mapping's words are handed out only as atomics; its bytes are
//!   copied in and out through raw copies that the benchmark's protocol
//!   orders with those atomics (release on publish, acquire on consume).
//! - [`process_vm_readv`] writes only into the caller's `&mut [u8]`;
//!   [`vmsplice`] only reads the caller's `&[u8]`, which the caller keeps
//!   unchanged until the reader has acknowledged (stated on the function).

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

use rustix::mm::{MapFlags, ProtFlags};
use rustix::process::Pid;

/// Number of threads in this process, from `/proc/self/status`.
pub fn thread_count() -> io::Result<usize> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no Threads: line in /proc/self/status"))
}

/// Forks; the child closes its copies of `close_in_child` (the parent's
/// ends of the benchmark's channels, so that the parent closing them reads
/// as end-of-file in the child), runs `child` and exits with its result (101
/// if it panicked) without returning. Returns the child's pid to the parent, which
/// drops its copy of `child` (closing every descriptor the closure owns, so
/// each side keeps only its own ends).
///
/// # Errors
/// Refuses when the process has more than one thread (forking it would be
/// unsound), and reports `fork` failures.
pub fn fork_run<F: FnOnce() -> i32>(close_in_child: &[BorrowedFd<'_>], child: F) -> io::Result<Pid> {
    let close: Vec<i32> = close_in_child.iter().map(|f| f.as_raw_fd()).collect();
    let threads = thread_count()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "the benchmark process has {threads} threads; forking it would be unsafe (run it single-threaded)"
        )));
    }
    // SAFETY: the process is single-threaded (checked just above), so the
    // child's copy of every lock is unheld; the child never returns from this
    // function (it ends in `_exit`), so no destructor of the parent's state
    // runs twice and no stdio buffer is flushed twice.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        for fd in close {
            // SAFETY: `fd` is the parent's end of a channel, owned by an
            // `OwnedFd` in the parent's frame; in the child that frame is never
            // resumed and the `OwnedFd` never dropped or used (the child runs
            // only `child` and `_exit`s), so closing the number here cannot
            // close anything twice or invalidate a descriptor still in use.
            unsafe { libc::close(fd) };
        }
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: `_exit` ends the process at once; nothing after it runs.
        unsafe { libc::_exit(code) }
    }
    drop(child);
    Pid::from_raw(pid).ok_or_else(|| io::Error::other("fork returned pid 0 in the parent"))
}

/// An owned memory mapping, unmapped on drop.
#[derive(Debug)]
pub struct Map {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

impl Map {
    /// Anonymous memory shared with children forked after this call.
    pub fn shared_anon(len: usize) -> io::Result<Map> {
        // SAFETY: a null hint lets the kernel choose a fresh range; nothing
        // we do not own is replaced.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
            )?
        };
        Ok(Map { ptr: NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?, len, writable: true })
    }

    /// Maps `len` bytes of `fd`: shared read-write (`shared`), or private
    /// (copy-on-write), readable, and writable if `writable`.
    pub fn file(fd: BorrowedFd<'_>, len: usize, shared: bool, writable: bool) -> io::Result<Map> {
        let prot = if writable || shared { ProtFlags::READ | ProtFlags::WRITE } else { ProtFlags::READ };
        let flags = if shared { MapFlags::SHARED } else { MapFlags::PRIVATE };
        // SAFETY: a null hint lets the kernel choose a fresh range; nothing
        // we do not own is replaced.
        let p = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0)? };
        Ok(Map {
            ptr: NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?,
            len,
            writable: writable || shared,
        })
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the range is mapped readable for `len` bytes while self
        // lives (module invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable; `None` for a read-only mapping.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        if !self.writable {
            return None;
        }
        // SAFETY: mapped writable for `len` bytes; `&mut self` makes this the
        // only reference into the range in this process.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// The 4-byte word at byte offset `off` (a multiple of 4), as an atomic
    /// shared with every process that maps the same memory.
    ///
    /// # Panics
    /// If `off` is unaligned or out of range.
    pub fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len, "word offset {off} outside the mapping");
        // SAFETY: in range and 4-aligned (page-aligned base); the memory is
        // only ever accessed as this atomic by every process, and the
        // reference borrows self, so the range stays mapped.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// Copies `src` into the mapping at `off`.
    ///
    /// # Panics
    /// If the range falls outside the mapping.
    pub fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(self.writable && off + src.len() <= self.len, "copy_in outside the mapping");
        // SAFETY: the destination range is mapped writable (checked); the
        // other process does not touch it until the atomic that publishes it
        // (module invariant: the protocol orders the accesses).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len()) }
    }

    /// Copies from the mapping at `off` into `dst`.
    ///
    /// # Panics
    /// If the range falls outside the mapping.
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len, "copy_out outside the mapping");
        // SAFETY: the source range is mapped readable (checked) and was
        // published by the writer before the atomic we acquired.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len()) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the range is ours and is unmapped once, here.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Reads `dst.len()` bytes at `remote` in process `pid` into `dst`
/// (`process_vm_readv`); returns the bytes read (possibly fewer).
pub fn process_vm_readv(pid: Pid, dst: &mut [u8], remote: usize) -> io::Result<usize> {
    let local = libc::iovec { iov_base: dst.as_mut_ptr().cast::<c_void>(), iov_len: dst.len() };
    let remote = libc::iovec { iov_base: remote as *mut c_void, iov_len: dst.len() };
    // SAFETY: the kernel writes at most `dst.len()` bytes into `dst`, which we
    // borrow mutably; the remote range is checked by the kernel against the
    // other process's mappings and never dereferenced here.
    let n = unsafe { libc::process_vm_readv(pid.as_raw_nonzero().get(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Maps the pages of `src` into the pipe `pipe` (`vmsplice` without
/// `SPLICE_F_GIFT`); returns the bytes accepted.
///
/// The pipe refers to `src`'s pages until a reader consumes them: the
/// caller must leave `src` unchanged until the reader has acknowledged,
/// or the reader may see the new contents (that is a correctness concern of
/// the benchmark, not a memory-safety one: the kernel holds page references).
pub fn vmsplice(pipe: BorrowedFd<'_>, src: &[u8]) -> io::Result<usize> {
    let iov = [rustix::pipe::IoSliceRaw::from_slice(src)];
    // SAFETY: without GIFT the kernel takes references to the pages of `src`,
    // which is a live borrowed slice for the duration of the call.
    Ok(unsafe { rustix::pipe::vmsplice(pipe, &iov, rustix::pipe::SpliceFlags::empty())? })
}

/// Whether the `userfaultfd(2)` system call works for this process (in
/// user-mode-only mode, as an unprivileged process would use it). Returns
/// the error otherwise.
pub fn userfaultfd_works() -> io::Result<()> {
    const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    // SAFETY: userfaultfd takes only flags and returns a new descriptor or -1;
    // no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | UFFD_USER_MODE_ONLY) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call just returned this descriptor, which nothing else owns.
    drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as libc::c_int) });
    Ok(())
}

/// Anonymous private memory, unmapped on drop: the client side of the
/// `uffd-raw` pager baseline registers it with a userfaultfd.
pub fn private_anon(len: usize) -> io::Result<Map> {
    // SAFETY: a null hint lets the kernel choose a fresh range; nothing we
    // do not own is replaced.
    let p = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)? };
    Ok(Map { ptr: NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?, len, writable: true })
}

impl Map {
    /// The address of the first mapped byte (for registering the range with
    /// a userfaultfd and naming fault addresses).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Reads the byte at `off` with a volatile load, so that a read whose
    /// only purpose is to fault the page in is never optimised away.
    ///
    /// # Panics
    /// If `off` is outside the mapping.
    pub fn touch(&self, off: usize) -> u8 {
        assert!(off < self.len, "touch outside the mapping");
        // SAFETY: in range and mapped readable while self lives.
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off)) }
    }
}

/// The userfaultfd constants and structures of the kernel's
/// `include/uapi/linux/userfaultfd.h` that the raw pager baseline needs
/// (`libc` 0.2 has none of them).
mod uffd_abi {
    pub const API: u64 = 0xAA;
    pub const FEATURE_MISSING_SHMEM: u64 = 1 << 5;
    pub const FEATURE_MINOR_SHMEM: u64 = 1 << 10;
    pub const MODE_MISSING: u64 = 1;
    pub const MODE_MINOR: u64 = 4;
    pub const EVENT_PAGEFAULT: u8 = 0x12;

    #[repr(C)]
    pub struct ApiArg {
        pub api: u64,
        pub features: u64,
        pub ioctls: u64,
    }
    #[repr(C)]
    pub struct RegisterArg {
        pub start: u64,
        pub len: u64,
        pub mode: u64,
        pub ioctls: u64,
    }
    #[repr(C)]
    pub struct CopyArg {
        pub dst: u64,
        pub src: u64,
        pub len: u64,
        pub mode: u64,
        pub copy: i64,
    }
    #[repr(C)]
    pub struct RangeModeArg {
        pub start: u64,
        pub len: u64,
        pub mode: u64,
        pub result: i64,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct Msg {
        pub event: u8,
        pub reserved: [u8; 7],
        pub flags: u64,
        pub address: u64,
        pub feat: u64,
    }

    const fn rw(nr: u64, size: usize) -> u64 {
        (3 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
    }
    pub const UFFDIO_API: u64 = rw(0x3F, std::mem::size_of::<ApiArg>());
    pub const UFFDIO_REGISTER: u64 = rw(0x00, std::mem::size_of::<RegisterArg>());
    pub const UFFDIO_COPY: u64 = rw(0x03, std::mem::size_of::<CopyArg>());
    pub const UFFDIO_ZEROPAGE: u64 = rw(0x04, std::mem::size_of::<RangeModeArg>());
    pub const UFFDIO_CONTINUE: u64 = rw(0x07, std::mem::size_of::<RangeModeArg>());
    const _: () = assert!(std::mem::size_of::<Msg>() == 32);
    const _: () = assert!(UFFDIO_API == 0xc018_aa3f);
    const _: () = assert!(UFFDIO_COPY == 0xc028_aa03);
}

/// A bare userfaultfd (blocking reads), for the `uffd-raw` baseline: what a
/// pager costs with nothing but the kernel's interface. It is created and
/// registered by the process whose memory it serves; a forked child that
/// inherits it resolves the faults with the fill ioctls.
///
/// Its fill ioctls only ever fill *missing* pages of a range its creator
/// registered (the kernel answers `EEXIST` for present ones), so they cannot
/// change memory anyone has read: they are safe functions, as in ferry's own
/// wrapper.
#[derive(Debug)]
pub struct RawUffd {
    fd: std::os::fd::OwnedFd,
}

/// A fill ioctl's outcome when it did not complete: bytes done and errno.
pub type RawPartial = (usize, rustix::io::Errno);

impl RawUffd {
    /// Creates a userfaultfd with the `userfaultfd(2)` call (handling faults
    /// from any mode), or user-mode-only if that is all the kernel allows,
    /// and performs the `UFFDIO_API` handshake, asking for shmem missing and
    /// minor faults if `shmem`.
    pub fn new(shmem: bool) -> io::Result<RawUffd> {
        const UFFD_USER_MODE_ONLY: libc::c_int = 1;
        let mut fd = -1;
        for flags in [libc::O_CLOEXEC, libc::O_CLOEXEC | UFFD_USER_MODE_ONLY] {
            // SAFETY: userfaultfd takes only flags and returns a new
            // descriptor or -1; no memory is passed.
            fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) } as libc::c_int;
            if fd >= 0 {
                break;
            }
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the call just returned this descriptor, which nothing else owns.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let u = RawUffd { fd };
        let features = if shmem { uffd_abi::FEATURE_MISSING_SHMEM | uffd_abi::FEATURE_MINOR_SHMEM } else { 0 };
        let mut a = uffd_abi::ApiArg { api: uffd_abi::API, features, ioctls: 0 };
        u.ioctl(uffd_abi::UFFDIO_API, &mut a)?;
        Ok(u)
    }

    /// Registers `[start, start + len)` of this process for missing faults,
    /// and minor faults too if `minor` (a shmem mapping).
    pub fn register(&self, start: usize, len: usize, minor: bool) -> io::Result<()> {
        let mode = uffd_abi::MODE_MISSING | if minor { uffd_abi::MODE_MINOR } else { 0 };
        let mut r = uffd_abi::RegisterArg { start: start as u64, len: len as u64, mode, ioctls: 0 };
        self.ioctl(uffd_abi::UFFDIO_REGISTER, &mut r)
    }

    /// Blocks until a fault event arrives; returns the faulting address, or
    /// `None` at end of file.
    pub fn next_fault(&self) -> io::Result<Option<u64>> {
        loop {
            let mut m = uffd_abi::Msg::default();
            // SAFETY: `m` is a live, writable 32-byte plain-old-data buffer;
            // the kernel writes at most one whole message into it.
            let n = unsafe {
                libc::read(self.fd.as_raw_fd(), (&mut m as *mut uffd_abi::Msg).cast::<c_void>(), std::mem::size_of::<uffd_abi::Msg>())
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Ok(None);
            }
            if m.event == uffd_abi::EVENT_PAGEFAULT {
                return Ok(Some(m.address));
            }
        }
    }

    /// `UFFDIO_COPY` of `src` to the missing pages at `dst`, waking the faulter.
    pub fn copy(&self, dst: usize, src: &[u8]) -> Result<usize, RawPartial> {
        let mut c = uffd_abi::CopyArg { dst: dst as u64, src: src.as_ptr() as u64, len: src.len() as u64, mode: 0, copy: 0 };
        let r = self.ioctl(uffd_abi::UFFDIO_COPY, &mut c);
        raw_done(r, c.copy, src.len())
    }

    /// `UFFDIO_ZEROPAGE` over the missing pages of `[dst, dst + len)`.
    pub fn zeropage(&self, dst: usize, len: usize) -> Result<usize, RawPartial> {
        self.range(uffd_abi::UFFDIO_ZEROPAGE, dst, len)
    }

    /// `UFFDIO_CONTINUE`: maps the shmem page-cache pages behind
    /// `[dst, dst + len)`.
    pub fn continue_(&self, dst: usize, len: usize) -> Result<usize, RawPartial> {
        self.range(uffd_abi::UFFDIO_CONTINUE, dst, len)
    }

    fn range(&self, req: u64, dst: usize, len: usize) -> Result<usize, RawPartial> {
        let mut a = uffd_abi::RangeModeArg { start: dst as u64, len: len as u64, mode: 0, result: 0 };
        let r = self.ioctl(req, &mut a);
        raw_done(r, a.result, len)
    }

    fn ioctl<T>(&self, req: u64, arg: &mut T) -> io::Result<()> {
        // SAFETY: every request used here is paired with the structure type
        // its number encodes (size checked by the kernel); the kernel reads it
        // and writes back only its result fields; `copy`'s source is a live
        // slice borrowed for the duration of the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), req as _, arg as *mut T) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

fn raw_done(r: io::Result<()>, result: i64, want: usize) -> Result<usize, RawPartial> {
    match r {
        Ok(()) => Ok(if result > 0 { result as usize } else { want }),
        Err(e) => Err((result.max(0) as usize, rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))),
    }
}
