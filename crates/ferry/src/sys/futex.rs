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
//! `&AtomicU32` / reads and writes through `AtomicU64`, never plain
//! references to the bytes: another process may write any byte at any time,
//! and through atomics such writes are defined behaviour (a racing reader
//! sees some value, possibly torn across words, never undefined behaviour).
//! Every offset is checked against the mapping's length and the type's
//! alignment before a reference is made, and the references borrow `self`,
//! so they cannot outlive the mapping.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
    let ts = timeout.map(|d| futex::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: d.subsec_nanos() as i64 });
    match futex::wait(word, futex::Flags::empty(), expected, ts.as_ref()) {
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
pub fn wait_private(word: &AtomicU32, expected: u32) -> rustix::io::Result<Woken> {
    match futex::wait(word, futex::Flags::PRIVATE, expected, None) {
        Ok(()) | Err(Errno::INTR) => Ok(Woken::Maybe),
        Err(Errno::AGAIN) => Ok(Woken::Changed),
        Err(Errno::TIMEDOUT) => Ok(Woken::TimedOut),
        Err(e) => Err(e),
    }
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
        assert!(off % 4 == 0 && off + 4 <= self.map.len(), "bad u32 offset {off}");
        // SAFETY: in bounds and 4-aligned (the mapping is page-aligned) as just
        // checked; the mapping lives as long as the returned borrow of self;
        // AtomicU32 has the size and alignment of u32 and tolerates concurrent
        // writes from the other process (module invariant).
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU32) }
    }

    /// The 64-bit words covering `len` bytes from byte offset `off`
    /// (8-aligned), checked once for the whole range so that copies need no
    /// check per word. Panics if the range is misaligned or out of range.
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

    /// Copies `dst.len()` bytes starting at byte offset `off` (8-aligned) out
    /// of the shared memory. The copy is made with relaxed atomic loads; a
    /// peer writing at the same time can make it inconsistent, never unsound.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
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

    /// Writes `src` at byte offset `off` (8-aligned) with relaxed atomic
    /// stores (a partial last word is padded with zeros).
    pub fn write(&self, off: usize, src: &[u8]) {
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
