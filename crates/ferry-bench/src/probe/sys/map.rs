//! Owned memory mappings with volatile byte access, protection changes,
//! the monotonic clock and the thread's fault counter.
//!
//! # Safety
//! A [`Map`] owns the range it maps: it came from `mmap` with a null hint,
//! nothing else in the process refers to it, and it is unmapped exactly once
//! (in `Drop` or in [`Map::unmap`], which consumes it). Byte accesses go
//! through volatile reads and writes at offsets checked against `len`, so a
//! protection change or a userfaultfd registration can only make an access
//! fault (which the probe arranges to be handled), never touch memory
//! outside the range.

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

use rustix::io::Errno;
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
use rustix::time::ClockId;

/// Monotonic clock in nanoseconds (vDSO, async-signal-safe).
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// An owned memory mapping, unmapped on drop.
#[derive(Debug)]
pub struct Map {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Map is an owned address range like a Box<[u8]>; all access goes
// through volatile byte operations or atomics, so sharing it between threads
// cannot create a data race the compiler assumes away.
unsafe impl Send for Map {}
// SAFETY: as above; `&Map` allows only volatile/atomic access.
unsafe impl Sync for Map {}

impl Map {
    /// A fresh private anonymous read-write mapping of `len` bytes.
    pub fn anon(len: usize) -> rustix::io::Result<Map> {
        Self::anon_with(len, MapFlags::PRIVATE)
    }

    /// A shared anonymous mapping (survives `fork` as shared memory).
    pub fn shared_anon(len: usize) -> rustix::io::Result<Map> {
        Self::anon_with(len, MapFlags::SHARED)
    }

    fn anon_with(len: usize, flags: MapFlags) -> rustix::io::Result<Map> {
        if len == 0 {
            return Err(Errno::INVAL);
        }
        // SAFETY: a null hint without MAP_FIXED never replaces an existing
        // mapping; the returned range is new and ours.
        let p = unsafe {
            rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, flags)?
        };
        Ok(Map { ptr: NonNull::new(p.cast()).ok_or(Errno::FAULT)?, len })
    }

    /// Maps `len` bytes of `fd` from offset 0: shared or private, writable
    /// or read-only.
    pub fn file(fd: BorrowedFd<'_>, len: usize, shared: bool, writable: bool) -> rustix::io::Result<Map> {
        if len == 0 {
            return Err(Errno::INVAL);
        }
        let prot = if writable { ProtFlags::READ | ProtFlags::WRITE } else { ProtFlags::READ };
        let flags = if shared { MapFlags::SHARED } else { MapFlags::PRIVATE };
        // SAFETY: null hint, no MAP_FIXED: a new range we own.
        let p = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0)? };
        Ok(Map { ptr: NonNull::new(p.cast()).ok_or(Errno::FAULT)?, len })
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Reads one byte at `off` (volatile, so the access really happens).
    pub fn read(&self, off: usize) -> u8 {
        assert!(off < self.len, "offset {off} outside mapping of {} bytes", self.len);
        // SAFETY: in bounds of a range we own (module invariant).
        unsafe { self.ptr.as_ptr().add(off).read_volatile() }
    }

    /// Writes one byte at `off` (volatile). The mapping must be writable.
    pub fn write(&self, off: usize, v: u8) {
        assert!(off < self.len, "offset {off} outside mapping of {} bytes", self.len);
        // SAFETY: in bounds of a range we own; volatile so a concurrent
        // volatile reader sees some value, never UB from the compiler's view.
        unsafe { self.ptr.as_ptr().add(off).write_volatile(v) }
    }

    /// Reads one byte from each `stride`-sized step; returns their sum.
    pub fn touch_read(&self, stride: usize) -> u64 {
        (0..self.len).step_by(stride).map(|o| self.read(o) as u64).sum()
    }

    /// Writes one byte in each `stride`-sized step.
    pub fn touch_write(&self, stride: usize, v: u8) {
        (0..self.len).step_by(stride).for_each(|o| self.write(o, v));
    }

    /// A 32-bit atomic at 4-byte slot `i` (for futexes and spinning).
    pub fn atomic_u32(&self, i: usize) -> &AtomicU32 {
        assert!((i + 1) * 4 <= self.len);
        // SAFETY: the slot is in bounds, 4-aligned (mmap returns page-aligned
        // memory) and lives as long as `&self`; all access to it is atomic.
        unsafe { &*(self.ptr.as_ptr().add(i * 4) as *const AtomicU32) }
    }

    /// Changes the protection of the whole mapping.
    pub fn protect(&self, writable: bool, readable: bool) -> rustix::io::Result<()> {
        protect_raw(self.addr(), self.len, writable, readable)
    }

    /// Asks for huge pages on this range (`MADV_HUGEPAGE`).
    pub fn advise_huge(&self) -> rustix::io::Result<()> {
        // SAFETY: advice on a range we own changes no memory contents.
        unsafe { rustix::mm::madvise(self.ptr.as_ptr().cast(), self.len, rustix::mm::Advice::LinuxHugepage) }
    }

    /// Unmaps now (so the caller can time it).
    pub fn unmap(self) -> rustix::io::Result<()> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the range is ours and, since `me` is never dropped, it is
        // unmapped exactly once, here.
        unsafe { rustix::mm::munmap(me.ptr.as_ptr().cast(), me.len) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the range is ours and is unmapped once, here.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

pub(super) fn protect_raw(addr: usize, len: usize, writable: bool, readable: bool) -> rustix::io::Result<()> {
    let mut f = MprotectFlags::empty();
    if readable {
        f |= MprotectFlags::READ;
    }
    if writable {
        f |= MprotectFlags::WRITE;
    }
    // SAFETY: callers pass a range owned by a live Map; changing its
    // protection can only make accesses fault, never alias other memory.
    unsafe { rustix::mm::mprotect(addr as *mut c_void, len, f) }
}

/// Minor page faults taken so far by the calling thread (`RUSAGE_THREAD`).
pub fn minor_faults() -> u64 {
    let mut ru = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the buffer we own.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: zero-initialised and, on success, filled by the kernel.
    unsafe { ru.assume_init() }.ru_minflt as u64
}
