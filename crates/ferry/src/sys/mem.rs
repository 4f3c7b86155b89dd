//! Memory the kernel can remap: memfds, their seals, and mappings of them.
//!
//! # Safety
//! A [`Mapping`] owns the address range it maps: it was returned by `mmap`
//! (or placed there with `MAP_FIXED` over a range the same `Mapping` owned) and
//! is unmapped exactly once, in `Drop`. While a `Mapping` lives, the range
//! stays mapped, so the pointer it hands out is valid for `len` bytes. Whether
//! the bytes may change underneath a reader is the caller's concern: for a
//! shared writable mapping they may; for a private mapping of a sealed memfd
//! they cannot, which is what the by-value regions build on.

use std::ffi::c_void;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// Size of a base page on this machine.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// Rounds `n` up to a whole number of pages.
pub fn page_round_up(n: usize) -> usize {
    let p = page_size();
    n.div_ceil(p) * p
}

/// Creates a close-on-exec, sealable, non-executable memfd of `len` bytes.
pub fn memfd(name: &str, len: u64) -> rustix::io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(
        name,
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING | MemfdFlags::NOEXEC_SEAL,
    )
    .or_else(|_| rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING))?;
    rustix::fs::ftruncate(&fd, len)?;
    Ok(fd)
}

/// Size in bytes of the file behind `fd`.
pub fn file_size(fd: BorrowedFd<'_>) -> rustix::io::Result<u64> {
    Ok(rustix::fs::fstat(fd)?.st_size as u64)
}

/// Whether `fd` is a memfd (its link in /proc reads `/memfd:…`).
pub fn is_memfd(fd: BorrowedFd<'_>) -> bool {
    // F_GET_SEALS succeeds only on files that support sealing: memfds (and
    // hugetlbfs/shmem files created with sealing); that is what we need.
    rustix::fs::fcntl_get_seals(fd).is_ok()
}

/// The seals set on a memfd.
pub fn seals(fd: BorrowedFd<'_>) -> rustix::io::Result<SealFlags> {
    rustix::fs::fcntl_get_seals(fd)
}

/// Adds seals to a memfd. Sealing `WRITE` fails with `EBUSY` while any
/// shared writable mapping of it exists.
pub fn add_seals(fd: BorrowedFd<'_>, seals: SealFlags) -> rustix::io::Result<()> {
    rustix::fs::fcntl_add_seals(fd, seals)
}

/// How a mapping is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Writes reach the file and every other shared mapping.
    Shared,
    /// Writes copy the page first (copy-on-write); nobody else sees them.
    Private,
}

/// Where a mapping goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Wherever the kernel chooses.
    Anywhere,
    /// Exactly at this address, failing with `EEXIST` if anything is there.
    At(usize),
}

/// An owned mapping of (part of) a file, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// SAFETY: a Mapping is an owned address range; it may move between threads
// like a Box<[u8]>. Shared access only hands out `&[u8]`.
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` only allows reads (as_slice); writes need `&mut`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0.
    pub fn map(
        fd: BorrowedFd<'_>,
        len: usize,
        writable: bool,
        share: Share,
        place: Place,
        populate: bool,
    ) -> rustix::io::Result<Mapping> {
        if len == 0 {
            return Err(rustix::io::Errno::INVAL);
        }
        let prot = if writable { ProtFlags::READ | ProtFlags::WRITE } else { ProtFlags::READ };
        let mut flags = match share {
            Share::Shared => MapFlags::SHARED,
            Share::Private => MapFlags::PRIVATE,
        };
        if populate {
            flags |= MapFlags::POPULATE;
        }
        let hint = match place {
            Place::Anywhere => std::ptr::null_mut(),
            Place::At(addr) => {
                flags |= MapFlags::FIXED_NOREPLACE;
                addr as *mut c_void
            }
        };
        // SAFETY: with a null hint or MAP_FIXED_NOREPLACE the kernel never
        // replaces an existing mapping, so no memory we do not own is touched;
        // the result is a fresh range we now own.
        let p = unsafe { rustix::mm::mmap(hint, len, prot, flags, fd, 0)? };
        if let Place::At(addr) = place {
            if p as usize != addr {
                // Old kernels ignore FIXED_NOREPLACE and treat it as a hint.
                // SAFETY: `p` is the range the kernel just gave us, unused.
                let _ = unsafe { rustix::mm::munmap(p, len) };
                return Err(rustix::io::Errno::EXIST);
            }
        }
        Ok(Mapping { ptr: NonNull::new(p.cast()).ok_or(rustix::io::Errno::FAULT)?, len, writable })
    }

    /// Replaces this mapping, in place and at the same address, with a new
    /// mapping of `fd` (used to swap a shared writable mapping for a private
    /// one before sealing). On error the old mapping is left as it was.
    pub fn remap_in_place(&mut self, fd: BorrowedFd<'_>, writable: bool, share: Share) -> rustix::io::Result<()> {
        let prot = if writable { ProtFlags::READ | ProtFlags::WRITE } else { ProtFlags::READ };
        let flags = MapFlags::FIXED
            | match share {
                Share::Shared => MapFlags::SHARED,
                Share::Private => MapFlags::PRIVATE,
            };
        // SAFETY: MAP_FIXED replaces exactly the range [ptr, ptr+len) which
        // this Mapping owns; nothing else lives there. Callers hold `&mut self`
        // so no slice into the old mapping is alive.
        let p = unsafe { rustix::mm::mmap(self.ptr.as_ptr().cast(), self.len, prot, flags, fd, 0)? };
        debug_assert_eq!(p as usize, self.ptr.as_ptr() as usize);
        self.writable = writable;
        Ok(())
    }

    /// Start address of the mapping.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether the mapping was made writable.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Raw pointer to the first byte, for code that shares it with another
    /// process through atomics (the RPC slot).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the range is mapped readable for `len` bytes while self
        // lives (module invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable. Returns `None` for a read-only mapping.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        if !self.writable {
            return None;
        }
        // SAFETY: mapped writable for `len` bytes; `&mut self` makes this the
        // only live reference into the range.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// Asks the kernel to back this range with huge pages where it can
    /// (`MADV_HUGEPAGE`); a refusal is not an error.
    pub fn advise_huge(&self) {
        // SAFETY: advice on a range we own changes no memory contents.
        let _ = unsafe { rustix::mm::madvise(self.ptr.as_ptr().cast(), self.len, rustix::mm::Advice::LinuxHugepage) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is ours and is unmapped once, here.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

