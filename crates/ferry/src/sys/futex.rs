//! Futexes on shared memory, the shared memory itself seen as atomics, and
//! CPU placement: the kernel services the RPC fast path waits with.
//!
//! The futex calls never use `FUTEX_PRIVATE_FLAG`: the words live in a memfd
//! mapped `MAP_SHARED` by two processes, and only a shared futex is keyed on
//! the page (not the address space), so a wake in one process reaches a
//! waiter in the other.
//!
//! # Safety
//! [`SharedWords`] owns a [`Mapping`] of a shared memfd and hands out
//! `&AtomicU32` / `&AtomicU64` and copies of byte ranges, never plain
//! references to the bytes: another process may write any byte at any time,
//! and through atomics (or, for bulk copies on x86-64, one `rep movsb` in
//! inline assembly, which the compiler cannot reason about) such writes are
//! defined behaviour (a racing reader sees some value, possibly torn across
//! words, never undefined behaviour).
//! Every offset is checked against the mapping's length and the type's
//! alignment before a reference is made, and the references borrow `self`,
//! so they cannot outlive the mapping.

use std::os::fd::BorrowedFd;
#[cfg(not(target_arch = "x86_64"))]
use std::sync::atomic::Ordering;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::thread::futex;

use super::mem::{Mapping, Place, Share};

/// How a futex wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// Woken by `FUTEX_WAKE`, by a signal, or spuriously: re-check the word.
    Maybe,
    /// The word no longer held the expected value when the wait began.
    Changed,
    /// The timeout passed.
    TimedOut,
}

/// Sleeps while `word` holds `expected`, for at most `timeout` (`None`:
/// forever).
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> rustix::io::Result<Woken> {
    wait_flagged(word, futex::Flags::empty(), expected, timeout)
}

/// [`wait`] with the futex `flags` given (shared or private).
fn wait_flagged(word: &AtomicU32, flags: futex::Flags, expected: u32, timeout: Option<Duration>) -> rustix::io::Result<Woken> {
    let ts = timeout.map(|d| futex::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: d.subsec_nanos() as i64 });
    match futex::wait(word, flags, expected, ts.as_ref()) {
        Ok(()) | Err(Errno::INTR) => Ok(Woken::Maybe),
        Err(Errno::AGAIN) => Ok(Woken::Changed),
        Err(Errno::TIMEDOUT) => Ok(Woken::TimedOut),
        Err(e) => Err(e),
    }
}

/// Most words one [`wait_any`] can watch (the kernel's limit for
/// `futex_waitv`).
pub const WAIT_ANY_MAX: usize = 128;

/// A word for [`wait_any`]: its expected value, and whether it is a
/// process-private futex (memory only this process maps, woken with
/// [`wake_private`]) rather than a shared one (woken with [`wake`]).
#[derive(Clone, Copy, Debug)]
pub struct AnyWord<'a> {
    /// The futex word.
    pub word: &'a AtomicU32,
    /// Sleep only while it holds this value.
    pub expected: u32,
    /// Private to this process.
    pub private: bool,
}

/// Sleeps until any of `words` no longer holds its expected value, or is
/// woken, or `deadline` passes (`None`: never), with one `futex_waitv`
/// (Linux 5.16 and later). At most [`WAIT_ANY_MAX`] words.
///
/// # Errors
/// `NOSYS` where the kernel has no `futex_waitv`; `INVAL` for no words or
/// more than [`WAIT_ANY_MAX`].
pub fn wait_any<'a>(words: impl IntoIterator<Item = AnyWord<'a>>, deadline: Option<Instant>) -> rustix::io::Result<Woken> {
    let mut waits = [futex::Wait::new(); WAIT_ANY_MAX];
    let mut n = 0;
    for w in words {
        let x = waits.get_mut(n).ok_or(Errno::INVAL)?;
        x.val = u64::from(w.expected);
        x.uaddr = futex::WaitPtr::new(w.word.as_ptr().cast());
        x.flags = if w.private { futex::WaitFlags::SIZE_U32 | futex::WaitFlags::PRIVATE } else { futex::WaitFlags::SIZE_U32 };
        n += 1;
    }
    if n == 0 {
        return Err(Errno::INVAL);
    }
    // futex_waitv takes an absolute time on the clock given; `Instant` is
    // CLOCK_MONOTONIC on Linux.
    let ts = deadline.map(|d| {
        let left = d.saturating_duration_since(Instant::now());
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let ns = now.tv_nsec as u64 + u64::from(left.subsec_nanos());
        futex::Timespec { tv_sec: now.tv_sec + left.as_secs() as i64 + (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 }
    });
    match futex::waitv(&waits[..n], futex::WaitvFlags::empty(), ts.as_ref(), rustix::time::ClockId::Monotonic) {
        Ok(_) | Err(Errno::INTR) => Ok(Woken::Maybe),
        Err(Errno::AGAIN) => Ok(Woken::Changed),
        Err(Errno::TIMEDOUT) => Ok(Woken::TimedOut),
        Err(e) => Err(e),
    }
}

/// [`wait`] on a word only this process maps (a private futex: cheaper to
/// key than a shared one).
pub fn wait_private(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> rustix::io::Result<Woken> {
    wait_flagged(word, futex::Flags::PRIVATE, expected, timeout)
}

/// [`wake`] for a word only this process maps.
pub fn wake_private(word: &AtomicU32) -> rustix::io::Result<usize> {
    futex::wake(word, futex::Flags::PRIVATE, i32::MAX as u32)
}

/// Wakes every waiter sleeping on `word` (in any process that maps it);
/// returns how many were woken.
pub fn wake(word: &AtomicU32) -> rustix::io::Result<usize> {
    futex::wake(word, futex::Flags::empty(), i32::MAX as u32)
}

/// Binds the calling thread to one CPU (`sched_setaffinity`), for pinned
/// latency-critical pairs that busy-wait.
pub fn pin_current_thread(cpu: usize) -> rustix::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(Errno::INVAL);
    }
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)
}

/// The CPU the calling thread runs on right now, or `None` if the kernel
/// cannot say. glibc answers from the thread's `rseq` area or the vDSO, so
/// this makes no system call; the answer may be stale as soon as it is
/// returned (it is only a hint, for deciding whether spinning can help).
pub fn current_cpu() -> Option<u32> {
    // SAFETY: `sched_getcpu` takes no arguments and touches no memory of
    // ours; it returns a CPU number or -1.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// Nanoseconds on the system-wide monotonic clock: comparable between
/// processes on this machine (read through the vDSO, no system call).
#[cfg_attr(not(feature = "probes"), allow(dead_code))]
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A shared, writable mapping of a whole memfd, accessed only as atomics.
#[derive(Debug)]
pub struct SharedWords {
    map: Mapping,
}

impl SharedWords {
    /// Maps all `len` bytes of `fd` shared and writable.
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> rustix::io::Result<SharedWords> {
        Ok(SharedWords { map: Mapping::map(fd, len, true, Share::Shared, Place::Anywhere, true)? })
    }

    /// The 32-bit word at byte offset `off`. Panics if `off` is not 4-aligned
    /// or out of range (offsets are the caller's constants, not peer data).
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.map.len(), "bad u32 offset {off}");
        // SAFETY: in bounds and 4-aligned (the mapping is page-aligned) as just
        // checked; the mapping lives as long as the returned borrow of self;
        // AtomicU32 has the size and alignment of u32 and tolerates concurrent
        // writes from the other process (module invariant).
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU32) }
    }

    /// The 64-bit word at byte offset `off`. Panics if `off` is not 8-aligned
    /// or out of range (offsets are the caller's constants, not peer data).
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.map.len(), "bad u64 offset {off}");
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned) as
        // just checked; the mapping lives as long as the returned borrow of
        // self; AtomicU64 has the size and alignment of u64 and tolerates
        // concurrent writes from the other process (module invariant).
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    /// The 64-bit words covering `len` bytes from byte offset `off`
    /// (8-aligned), checked once for the whole range so that copies need no
    /// check per word. Panics if the range is misaligned or out of range.
    #[cfg(not(target_arch = "x86_64"))]
    fn words(&self, off: usize, len: usize) -> &[AtomicU64] {
        let n = len.div_ceil(8);
        assert!(off % 8 == 0 && off + n * 8 <= self.map.len(), "bad word range {off}+{len}");
        // SAFETY: the n words from `off` are in bounds and 8-aligned (the
        // mapping is page-aligned) as just checked; the mapping lives as long
        // as the returned borrow of self; AtomicU64 has the size and
        // alignment of u64 and tolerates concurrent writes from the other
        // process (module invariant).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off) as *const AtomicU64, n) }
    }

    /// Panics unless `off` is 8-aligned, as the public copies promise
    /// their callers on every architecture (the block copies themselves
    /// need no alignment).
    #[cfg(target_arch = "x86_64")]
    fn check_aligned(off: usize, len: usize) {
        assert!(off.is_multiple_of(8), "bad byte range {off}+{len}");
    }

    /// The address of `len` bytes of the mapping from byte offset `off`,
    /// checked once for the whole range. Panics if the range is out of
    /// range (offsets and lengths come from the caller, checked against
    /// the slot's limits before they get here).
    #[cfg(target_arch = "x86_64")]
    fn bytes_at(&self, off: usize, len: usize) -> *mut u8 {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.map.len()), "bad byte range {off}+{len}");
        // SAFETY: `off` is within the mapping, as just checked.
        unsafe { self.map.as_ptr().add(off) }
    }

    /// Copies `src` (private memory) to byte offset `off`, any alignment.
    #[cfg(target_arch = "x86_64")]
    fn copy_in_at(&self, off: usize, src: &[u8]) {
        let dst = self.bytes_at(off, src.len());
        // SAFETY: `dst` is `src.len()` bytes of our writable mapping
        // (checked by `bytes_at`); `src` is private memory we borrow, so
        // disjoint from the mapping.
        unsafe { block_copy(src.as_ptr(), dst, src.len()) }
    }

    /// Copies `len` bytes from byte offset `off`, any alignment, into
    /// `buf`, replacing its contents and reusing its allocation.
    #[cfg(target_arch = "x86_64")]
    fn copy_out_at(&self, off: usize, len: usize, buf: &mut Vec<u8>) {
        buf.clear();
        buf.reserve(len);
        let src = self.bytes_at(off, len);
        // SAFETY: `src` is `len` bytes of our mapping (checked); the
        // vector's buffer has room for `len` bytes (reserved above) and is
        // private.
        unsafe { block_copy(src, buf.as_mut_ptr(), len) };
        // SAFETY: the copy above initialised the first `len` bytes.
        unsafe { buf.set_len(len) };
    }

    /// Writes `head` and then `tail` as one run of bytes at byte offset
    /// `off` (8-aligned): a body gathered from two buffers without joining
    /// them first (with `tail` empty, exactly [`write`](Self::write)).
    ///
    /// On x86-64 the two copies are ordinary stores, which wait in the
    /// store buffer together, so the peer spinning on a word in the line
    /// the body starts in does not see that line between them. Elsewhere
    /// the two are joined in a private buffer first when `head` is not a
    /// whole number of words.
    pub fn write_parts(&self, off: usize, head: &[u8], tail: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        {
            self.write(off, head);
            self.copy_in_at(off + head.len(), tail);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            if tail.is_empty() {
                self.write(off, head);
            } else if head.len() % 8 == 0 {
                self.write(off, head);
                self.write(off + head.len(), tail);
            } else {
                self.write(off, &[head, tail].concat());
            }
        }
    }

    /// Copies `len` bytes from byte offset `off` (8-aligned) out of the
    /// shared memory in two pieces: the first `at` bytes (all of them when
    /// `len` is not more) into `head`, the rest into `tail`, replacing
    /// their contents and reusing their allocations. Torn copies as for
    /// [`read`](Self::read); elsewhere than x86-64 the bytes are copied
    /// out whole first.
    pub fn read_split(&self, off: usize, len: usize, at: usize, head: &mut Vec<u8>, tail: &mut Vec<u8>) {
        let at = at.min(len);
        #[cfg(target_arch = "x86_64")]
        {
            self.read_into(off, at, head);
            self.copy_out_at(off + at, len - at, tail);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.read_into(off, len, head);
            tail.clear();
            tail.extend_from_slice(&head[at..]);
            head.truncate(at);
        }
    }

    /// Copies `dst.len()` bytes starting at byte offset `off` (8-aligned) out
    /// of the shared memory. A peer writing at the same time can make the
    /// copy inconsistent (torn), never unsound.
    ///
    /// On x86-64 the copy is a [`block_copy`]; elsewhere relaxed 64-bit
    /// atomic loads.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        {
            Self::check_aligned(off, dst.len());
            let src = self.bytes_at(off, dst.len());
            // SAFETY: `src` is `dst.len()` bytes of our mapping (checked by
            // `bytes_at`, alive while `self` is borrowed); `dst` is a private
            // buffer we borrow mutably, so disjoint from the mapping.
            unsafe { block_copy(src, dst.as_mut_ptr(), dst.len()) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let words = self.words(off, dst.len());
            let mut chunks = dst.chunks_exact_mut(8);
            for (chunk, w) in (&mut chunks).zip(words) {
                chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            let rest = chunks.into_remainder();
            if !rest.is_empty() {
                let w = words[words.len() - 1].load(Ordering::Relaxed).to_le_bytes();
                rest.copy_from_slice(&w[..rest.len()]);
            }
        }
    }

    /// Copies `len` bytes starting at byte offset `off` (8-aligned) out of
    /// the shared memory into `buf`, replacing its contents; `buf`'s
    /// allocation is reused when it is large enough (a receiver that hands
    /// back the last body it was given allocates nothing). Torn copies as
    /// for [`read`](Self::read).
    pub fn read_into(&self, off: usize, len: usize, buf: &mut Vec<u8>) {
        #[cfg(target_arch = "x86_64")]
        {
            Self::check_aligned(off, len);
            self.copy_out_at(off, len, buf);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            buf.clear();
            buf.resize(len, 0);
            self.read(off, buf);
        }
    }

    /// Writes `src` at byte offset `off` (8-aligned) into the shared memory
    /// (elsewhere than x86-64, a partial last word is padded with zeros).
    pub fn write(&self, off: usize, src: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        {
            Self::check_aligned(off, src.len());
            self.copy_in_at(off, src);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let words = self.words(off, src.len());
            let mut chunks = src.chunks_exact(8);
            for (chunk, w) in (&mut chunks).zip(words) {
                w.store(u64::from_le_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
            }
            let rest = chunks.remainder();
            if !rest.is_empty() {
                let mut b = [0u8; 8];
                b[..rest.len()].copy_from_slice(rest);
                words[words.len() - 1].store(u64::from_le_bytes(b), Ordering::Relaxed);
            }
        }
    }
}

/// Copies `len` bytes from `src` to `dst`, where one side is shared memory
/// that another process may write during the copy.
///
/// Plain Rust loads and stores (`copy_nonoverlapping`) must not race with
/// another writer, and atomics copy a word at a time (a 1 KiB body in 128
/// moves: measured at about 160 ns more per 1 KiB each way than a block
/// copy when the lines sit in the other CPU's cache). The copy is therefore
/// made in inline assembly, which the compiler treats as an opaque block
/// that reads and writes the memory it is given: 8-byte moves for copies
/// under 128 bytes, 32-byte AVX2 moves for longer ones where the CPU has
/// AVX2 (measured 40 ns faster per 1 KiB round trip than `rep movsb` on
/// the development machine), else one `rep movsb`. Short copies were one
/// `rep movsb` too, until a profile of the spinning round trip put most of
/// the client's own time on it: it starts slowly, and into a line the
/// peer spins on it waits for the line where ordinary stores wait in the
/// store buffer (`docs/rpc.md`, "Short copies"). A
/// byte another process writes during the copy arrives either old or new;
/// the callers check sequence numbers after copying and never act on a body
/// before they have.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `len` bytes, the
/// two ranges must not overlap, and the side that is not shared memory must
/// be memory nothing else accesses during the copy.
#[cfg(target_arch = "x86_64")]
unsafe fn block_copy(src: *const u8, dst: *mut u8, len: usize) {
    if len < 128 {
        // SAFETY: the ranges are the caller's, as this function's contract
        // says.
        unsafe { word_copy(src, dst, len) };
        return;
    }
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just checked); the ranges are the
        // caller's, as this function's contract says.
        unsafe { avx2_copy(src, dst, len) };
        return;
    }
    // SAFETY: the caller guarantees both ranges; `rep movsb` copies exactly
    // `rcx` bytes forwards (the ABI guarantees the direction flag is clear
    // on entry) and changes only rcx, rsi and rdi, which are declared
    // clobbered; it touches no stack and leaves the flags alone.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags),
        );
    }
}

/// [`block_copy`] for short copies: 8-byte moves, then single bytes.
///
/// # Safety
/// As for [`block_copy`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn word_copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees both ranges. The loop reads and writes
    // only within `[src, src + len)` and `[dst, dst + len)`; it changes
    // rax, rcx, rsi, rdi and the flags (all declared) and no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "cmp rcx, 8",
            "jb 3f",
            "mov rax, [rsi]",
            "mov [rdi], rax",
            "add rsi, 8",
            "add rdi, 8",
            "sub rcx, 8",
            "jmp 2b",
            "3:",
            "test rcx, rcx",
            "jz 4f",
            "mov al, [rsi]",
            "mov [rdi], al",
            "inc rsi",
            "inc rdi",
            "dec rcx",
            "jmp 3b",
            "4:",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            out("rax") _,
            options(nostack),
        );
    }
}

/// [`block_copy`] in 64-byte steps of two 32-byte AVX2 moves, the rest
/// by [`word_copy`].
///
/// # Safety
/// As for [`block_copy`], and the CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_copy(src: *const u8, dst: *mut u8, len: usize) {
    let (rest, src_rest, dst_rest): (usize, *const u8, *mut u8);
    // SAFETY: the caller guarantees both ranges and AVX2. The loop reads
    // and writes only within `[src, src + len)` and `[dst, dst + len)`: it
    // moves 64 bytes while at least 64 are left and hands back how many
    // are left and where. It changes rcx, rsi, rdi and the flags, and
    // `clobber_abi("C")` declares every register a call may change, so
    // `vzeroupper` (which clears the upper halves of all vector registers,
    // avoiding the SSE transition penalty after the function) disturbs
    // nothing the compiler keeps.
    unsafe {
        std::arch::asm!(
            "2:",
            "cmp rcx, 64",
            "jb 3f",
            "vmovdqu ymm0, [rsi]",
            "vmovdqu ymm1, [rsi + 32]",
            "vmovdqu [rdi], ymm0",
            "vmovdqu [rdi + 32], ymm1",
            "add rsi, 64",
            "add rdi, 64",
            "sub rcx, 64",
            "jmp 2b",
            "3:",
            "vzeroupper",
            inout("rcx") len => rest,
            inout("rsi") src => src_rest,
            inout("rdi") dst => dst_rest,
            clobber_abi("C"),
            options(nostack),
        );
    }
    // SAFETY: what is left of the two ranges, which the loop did not touch.
    unsafe { word_copy(src_rest, dst_rest, rest) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Every length the slot carries (and the AVX2 path's boundaries) round
    /// trips exactly, and a write touches no byte outside its range.
    #[test]
    fn copies_in_and_out_of_shared_memory_are_exact_and_stay_in_range() {
        const LEN: usize = 8192;
        let fd = crate::sys::mem::memfd("ferry-test-words", LEN as u64).unwrap();
        let words = SharedWords::map(fd.as_fd(), LEN).unwrap();
        let other = SharedWords::map(fd.as_fd(), LEN).unwrap();
        let mut x = 0x2545_F491u32;
        let mut byte = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        };
        let lens = (0..=200).chain([255, 256, 257, 1023, 1024, 1025, 3839, 3840]);
        for len in lens {
            for off in [0usize, 8, 88, 4096 + 88] {
                let fill: Vec<u8> = (0..LEN).map(|_| 0xA5).collect();
                words.write(0, &fill);
                let src: Vec<u8> = (0..len).map(|_| byte()).collect();
                words.write(off, &src);
                // Seen through a second mapping of the same memfd, as the
                // peer process sees it.
                let mut back = vec![0u8; len];
                other.read(off, &mut back);
                assert_eq!(back, src, "read of {len} bytes at {off}");
                let mut into = vec![7u8; (len * 3) % 50];
                other.read_into(off, len, &mut into);
                assert_eq!(into, src, "read_into of {len} bytes at {off}");
                let mut all = Vec::new();
                other.read_into(0, LEN, &mut all);
                assert!(all[..off].iter().all(|&b| b == 0xA5), "a write of {len} at {off} touched bytes before it");
                // Elsewhere than x86-64 a partial last word is zero-padded.
                let end = if cfg!(target_arch = "x86_64") { off + len } else { off + len.div_ceil(8) * 8 };
                assert!(all[end..].iter().all(|&b| b == 0xA5), "a write of {len} at {off} touched bytes after it");
            }
        }
    }

    /// A body written from two pieces, and read back split at any point,
    /// is the same bytes as the body written and read whole, at every
    /// split of both sides and across the AVX2 path's boundaries.
    #[test]
    fn gathered_writes_and_split_reads_are_the_whole_copies() {
        const LEN: usize = 8192;
        let fd = crate::sys::mem::memfd("ferry-test-words", LEN as u64).unwrap();
        let words = SharedWords::map(fd.as_fd(), LEN).unwrap();
        let other = SharedWords::map(fd.as_fd(), LEN).unwrap();
        for len in [0usize, 1, 7, 8, 9, 18, 63, 64, 65, 130, 1027, 3840] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            for cut in [0, 1, 4, 6, 8, 10, len / 2, len.saturating_sub(1), len].into_iter().filter(|&c| c <= len) {
                words.write(0, &vec![0xA5; LEN]);
                words.write_parts(88, &src[..cut], &src[cut..]);
                let mut back = Vec::new();
                other.read_into(88, len, &mut back);
                assert_eq!(back, src, "{len} bytes gathered at {cut}");
                let mut all = Vec::new();
                other.read_into(0, LEN, &mut all);
                let end = if cfg!(target_arch = "x86_64") { 88 + len } else { 88 + len.div_ceil(8) * 8 };
                assert!(all[..88].iter().chain(&all[end..]).all(|&b| b == 0xA5), "{len} bytes gathered at {cut} wrote outside");
                for at in [0, 3, 4, 5, len, len + 4] {
                    let (mut head, mut tail) = (vec![9u8; 3], vec![9u8; 70]);
                    other.read_split(88, len, at, &mut head, &mut tail);
                    assert_eq!(head, src[..at.min(len)], "{len} bytes split at {at}");
                    assert_eq!(tail, src[at.min(len)..], "{len} bytes split at {at}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "bad")]
    fn a_copy_past_the_mapping_panics_before_touching_memory() {
        let fd = crate::sys::mem::memfd("ferry-test-words", 4096).unwrap();
        let words = SharedWords::map(fd.as_fd(), 4096).unwrap();
        let mut buf = vec![0u8; 16];
        words.read(4088, &mut buf);
    }
}
