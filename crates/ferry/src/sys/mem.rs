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
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
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

/// `statfs` magic of tmpfs/shmem, the file system memfds live on.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Whether `fd` is a file on tmpfs/shmem (where memfds live; hugetlbfs
/// memfds and ordinary files are not).
#[allow(clippy::unnecessary_cast)] // f_type's type differs between architectures
pub fn is_shmem(fd: BorrowedFd<'_>) -> bool {
    matches!(rustix::fs::fstatfs(fd), Ok(st) if st.f_type as i64 == TMPFS_MAGIC)
        && matches!(rustix::fs::fstat(fd), Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile)
}

/// Writes all of `bytes` into `fd` at `offset` (`pwrite`, retried on short
/// writes and `EINTR`).
pub fn pwrite_all(fd: BorrowedFd<'_>, mut bytes: &[u8], mut offset: u64) -> rustix::io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::pwrite(fd, bytes, offset) {
            Ok(0) => return Err(rustix::io::Errno::IO),
            Ok(n) => {
                bytes = &bytes[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes from `fd` at `offset` (`pread`); a file
/// that ends early is `EIO`.
pub fn pread_exact(fd: BorrowedFd<'_>, buf: &mut [u8], mut offset: u64) -> rustix::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match rustix::io::pread(fd, &mut buf[at..], offset) {
            Ok(0) => return Err(rustix::io::Errno::IO),
            Ok(n) => {
                at += n;
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens a new, read-only file description of the same file as `fd`
/// (through `/proc/self/fd`), so a holder of the result can neither write to
/// it nor map it writable and shared.
pub fn reopen_read_only(fd: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(path.as_str(), rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
}

/// Whether `fd` was opened for writing (its access mode is not read-only).
pub fn is_writable_fd(fd: BorrowedFd<'_>) -> bool {
    matches!(rustix::fs::fcntl_getfl(fd), Ok(fl) if fl & rustix::fs::OFlags::RWMODE != rustix::fs::OFlags::RDONLY)
}

/// Minor page faults this process has taken so far (`getrusage`); the
/// kernel counts copy-on-write faults, first touches of mapped file pages
/// and anonymous first touches alike.
pub fn minor_faults() -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `struct rusage` through the pointer, which
    // points to zeroed memory of exactly that type; on error nothing is read.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: getrusage succeeded and filled the struct (it was zeroed
    // before, so every field is initialised either way).
    let ru = unsafe { ru.assume_init() };
    ru.ru_minflt as u64
}

/// The system's shmem transparent-huge-page policy, the bracketed word of
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` (`never`, `advise`,
/// `always`, `within_size`, `deny`, `force`), or `None` when the kernel has
/// no THP.
pub fn shmem_thp_policy() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").ok()?;
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_owned())
}

/// Bytes of the mapping starting at `addr` that the kernel maps with huge
/// (PMD) pages right now, from `/proc/self/smaps` (`ShmemPmdMapped` plus
/// `FilePmdMapped`); `None` if the mapping or the file cannot be read.
pub fn pmd_mapped_bytes(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    let mut total = 0u64;
    let mut found = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, _hi)) = first.split_once('-') {
            if lo.chars().all(|c| c.is_ascii_hexdigit()) && !first.ends_with(':') {
                if inside {
                    break;
                }
                inside = usize::from_str_radix(lo, 16).ok() == Some(addr);
                found |= inside;
                continue;
            }
        }
        if inside && (line.starts_with("ShmemPmdMapped:") || line.starts_with("FilePmdMapped:")) {
            let kb: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
            total += kb * 1024;
        }
    }
    found.then_some(total)
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

/// [`add_seals`] for a memfd this process made and maps only privately
/// (a region of its own). Sealing `WRITE` fails with `EBUSY` while any
/// process maps the memfd shared and writable, and a child that another
/// thread of this process has just forked holds a copy of every mapping
/// the parent had until it execs: a region written through its shared
/// view a moment before could not be sealed (seen as a rare failure of
/// `by_copy` in tests that start processes). Such a refusal is tried again
/// for a bounded time (about 60 ms), which covers a child on its way to
/// `exec`; a mapping that stays longer still fails with `EBUSY`. Only for
/// the process's own memfds: a peer's memfd is refused at once.
pub fn add_seals_own(fd: BorrowedFd<'_>, seals: SealFlags) -> rustix::io::Result<()> {
    let mut pause = std::time::Duration::from_micros(500);
    for _ in 0..7 {
        match rustix::fs::fcntl_add_seals(fd, seals) {
            Err(rustix::io::Errno::BUSY) => {
                std::thread::sleep(pause);
                pause *= 2;
            }
            other => return other,
        }
    }
    rustix::fs::fcntl_add_seals(fd, seals)
}

/// Element types that may be viewed directly in mapped memory: every bit
/// pattern is a valid value and there is no padding or interior pointer.
///
/// # Safety
/// Implement only for types for which any sequence of `size_of::<T>()`
/// initialised bytes is a valid value, with no padding bytes, and whose
/// alignment divides the page size.
pub unsafe trait Plain: Copy + 'static {}

macro_rules! plain {
    ($($t:ty),*) => {
        $(
            // SAFETY: primitive integers and floats accept every bit pattern,
            // have no padding, and are at most 16-byte aligned.
            unsafe impl Plain for $t {}
        )*
    };
}
plain!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

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
        // The kernel populates a private writable mapping by write-faulting
        // every page, which copies each one (breaking copy-on-write). Populate
        // such a mapping read-only instead (the pages are mapped, still
        // shared) and make it writable afterwards: a later write copies only
        // the page written.
        let populate_then_write = populate && writable && share == Share::Private;
        let prot = if writable && !populate_then_write { ProtFlags::READ | ProtFlags::WRITE } else { ProtFlags::READ };
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
        let map = Mapping { ptr: NonNull::new(p.cast()).ok_or(rustix::io::Errno::FAULT)?, len, writable };
        if populate_then_write {
            // SAFETY: the range is the private mapping just made and owned by
            // `map`; adding write permission to a private mapping changes no
            // byte and cannot reach the file (writes copy the page).
            unsafe { rustix::mm::mprotect(p, len, rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE)? };
        }
        Ok(map)
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

    /// The first `len` bytes viewed as `T`s (`len` rounded down to whole
    /// elements). Mappings are page aligned, so every [`Plain`] type fits.
    pub fn as_typed<T: Plain>(&self, len: usize) -> &[T] {
        let n = len.min(self.len) / std::mem::size_of::<T>().max(1);
        // SAFETY: the range is mapped readable (module invariant), page
        // aligned (so aligned for T, whose alignment divides the page size
        // by the Plain contract), holds n*size_of::<T>() <= len bytes, and
        // any bytes are a valid T (Plain).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<T>(), n) }
    }

    /// The first `len` bytes viewed as mutable `T`s; `None` for a
    /// read-only mapping.
    pub fn as_typed_mut<T: Plain>(&mut self, len: usize) -> Option<&mut [T]> {
        if !self.writable {
            return None;
        }
        let n = len.min(self.len) / std::mem::size_of::<T>().max(1);
        // SAFETY: as in `as_typed`, and the mapping is writable; `&mut self`
        // makes this the only live reference into the range.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<T>(), n) })
    }

    /// The first `n` 64-bit words as atomics, for memory shared with another
    /// process that writes it concurrently.
    pub fn as_atomic_u64(&self, len: usize) -> &[std::sync::atomic::AtomicU64] {
        let n = len.min(self.len) / 8;
        // SAFETY: the range is mapped (readable; atomics are only usable for
        // writing when it is writable, which callers check), page aligned,
        // and AtomicU64 has the size and alignment of u64 with every bit
        // pattern valid; concurrent access through atomics is race-free.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<std::sync::atomic::AtomicU64>(), n) }
    }

    /// Copies `out.len()` bytes at `offset` out of a mapping that another
    /// process may be writing concurrently, without forming a reference to
    /// the shared bytes. Returns false if the range is out of bounds.
    pub fn copy_out_racy(&self, offset: usize, out: &mut [u8]) -> bool {
        if offset.checked_add(out.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the source range is inside the mapping (checked), readable
        // while self lives; `out` is a distinct, exclusively borrowed buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies `src` into the mapping at `offset`, without forming a
    /// reference to the shared bytes. Returns false if out of bounds or the
    /// mapping is read-only.
    pub fn copy_in_racy(&self, offset: usize, src: &[u8]) -> bool {
        if !self.writable || offset.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the destination is inside a writable mapping (checked); no
        // Rust reference into it exists (shared mappings hand out none), and
        // `src` is a distinct buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
        true
    }

    /// Asks the kernel to back this range with huge pages where it can
    /// (`MADV_HUGEPAGE`); a refusal is not an error.
    pub fn advise_huge(&self) {
        // SAFETY: advice on a range we own changes no memory contents.
        let _ = unsafe { rustix::mm::madvise(self.ptr.as_ptr().cast(), self.len, rustix::mm::Advice::LinuxHugepage) };
    }

    /// Allocates and maps every page of a shared writable mapping now
    /// (`MADV_POPULATE_WRITE`, Linux ≥ 5.14), through the fault path, so a
    /// range advised for huge pages gets them. Changes no byte.
    pub fn populate_write(&self) -> rustix::io::Result<()> {
        if !self.writable {
            return Err(rustix::io::Errno::PERM);
        }
        // SAFETY: populating allocates and maps pages of a range we own as
        // if each were written, without changing any byte of it.
        unsafe { rustix::mm::madvise(self.ptr.as_ptr().cast(), self.len, rustix::mm::Advice::LinuxPopulateWrite) }
    }

    /// Maps the pages that already exist in the file behind this mapping by
    /// reading one byte of each page. A read fault maps a whole block of
    /// neighbouring cached pages at once (fault-around), and in a shared
    /// writable mapping of a memfd they are mapped writable, so a later
    /// write takes no fault: far fewer faults than touching each page by
    /// writing (or `MADV_POPULATE_*`, which fault page by page). Pages
    /// missing from the file are read as zeros (mapped to the shared zero
    /// page or allocated, as the kernel does for any read).
    pub fn prefault_read(&self) {
        let page = page_size();
        let mut at = 0;
        while at < self.len {
            // SAFETY: `at < len`, so the byte is inside the mapping, which is
            // readable while self lives (module invariant). A volatile read
            // of a byte forms no reference and tolerates concurrent writers.
            let _ = unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(at)) };
            at += page;
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is ours and is unmapped once, here.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}


/// Writes `len` zero bytes into `fd` from offset 0 (`pwrite`), which
/// allocates the pages of a memfd already filled (and so, unlike pages
/// made by `fallocate`, mappable in blocks by fault-around).
pub fn write_zeros(fd: BorrowedFd<'_>, len: u64) -> rustix::io::Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(ZEROS.len() as u64) as usize;
        pwrite_all(fd, &ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Makes the pages of `[offset, offset + len)` of a file present (zeros
/// where nothing was written) without changing its size.
pub fn allocate(fd: BorrowedFd<'_>, offset: u64, len: u64) -> rustix::io::Result<()> {
    rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::KEEP_SIZE, offset, len)
}

/// Reads `out.len()` 64-bit words at `addr` in process `pid`
/// (`process_vm_readv`), for inspecting another process's counters.
pub fn read_other_process(pid: i32, addr: usize, out: &mut [u64]) -> rustix::io::Result<()> {
    let len = std::mem::size_of_val(out);
    let local = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: len };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
    // SAFETY: `local` describes `out`, which we own mutably for the call; the
    // kernel checks the remote range and our right to read it, and writes at
    // most `len` bytes into `out`. Any bit pattern is a valid u64.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(rustix::io::Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
    }
    if n as usize != len {
        return Err(rustix::io::Errno::FAULT);
    }
    Ok(())
}

impl Mapping {
    /// Maps every page of this range that its file already holds, for
    /// reading, in one call (`MADV_POPULATE_READ`, Linux 5.14): later reads
    /// take no fault, and a private mapping's pages stay shared until
    /// written (unlike `MAP_POPULATE` on a writable private mapping, which
    /// copies each one). A refusal (an older kernel) is not an error: the
    /// pages are then faulted in as they are touched.
    pub fn populate_read(&self) {
        // SAFETY: advice on a range we own; populating for reading changes
        // no memory contents and no mapping's protection.
        let _ = unsafe { rustix::mm::madvise(self.ptr.as_ptr().cast(), self.len, rustix::mm::Advice::LinuxPopulateRead) };
    }
}
