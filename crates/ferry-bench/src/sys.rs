//! The benchmark crate's only contact with the kernel that needs `unsafe`:
//! `fork`, shared and file mappings, `process_vm_readv`, `vmsplice` and the
//! `userfaultfd` probe. The baselines are these raw primitives by
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
        assert!(off % 4 == 0 && off + 4 <= self.len, "word offset {off} outside the mapping");
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
