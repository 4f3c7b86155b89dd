//! Other processes: whether a `pidfd`'s process has exited, and copying to
//! and from its memory (`process_vm_readv`/`process_vm_writev`, which the
//! kernel permits only to a caller that may ptrace the target).

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use super::wait::{poll_one, Interest};

/// Whether the process behind `pidfd` has exited, waiting at most
/// `timeout_ms` milliseconds (0: just look).
pub fn exited(pidfd: BorrowedFd<'_>, timeout_ms: i32) -> rustix::io::Result<bool> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
    Ok(poll_one(pidfd, Interest::Readable, Some(deadline))?.readable)
}

fn last_errno() -> rustix::io::Errno {
    rustix::io::Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
}

/// Copies up to `buf.len()` bytes at `addr` in process `pid` into `buf`.
pub fn vm_read(pid: i32, addr: usize, buf: &mut [u8]) -> rustix::io::Result<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, borrowed mutably for the call; the
    // kernel checks the remote range and our right to read it and writes
    // at most `buf.len()` bytes into `buf`; any bytes are valid u8.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(last_errno());
    }
    Ok(n as usize)
}

/// Copies `data` to `addr` in process `pid`; returns the bytes written.
pub fn vm_write(pid: i32, addr: usize, data: &[u8]) -> rustix::io::Result<usize> {
    let local = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: `local` describes `data`, which the kernel only reads; the
    // remote range is the other process's and the kernel checks it and our
    // right to write there. Nothing in this process is written.
    let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(last_errno());
    }
    Ok(n as usize)
}

/// The child whose signals [`pass_signals_to`] passes on (0: none).
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Signals a supervisor passes on to its child. Interrupt, quit and
/// window changes are passed on only when a process sent them (`kill`):
/// from the terminal, the child has them already, in the terminal's
/// process group.
const PASSED_ON: [libc::c_int; 8] =
    [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM, libc::SIGWINCH];

extern "C" fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler;
    // it is only read.
    let from_kernel = !info.is_null() && unsafe { (*info).si_code } > 0;
    if from_kernel && matches!(sig, libc::SIGINT | libc::SIGQUIT | libc::SIGWINCH) {
        return;
    }
    let pid = CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and takes integers only.
        unsafe { libc::kill(pid, sig) };
    } else if (0..64).contains(&sig) {
        // No child yet: passed on once there is one.
        PENDING.fetch_or(1 << sig, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Signals that came before the child was known, one bit each.
static PENDING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Passes the signals of [`PASSED_ON`] on to `child`, and every other
/// signal keeps its disposition. Interrupt, quit and a window change from
/// the terminal reach the child directly and are not passed again. With
/// `child` 0 the signals are caught and kept until a later call names the
/// child (call it so before starting the child, whose handlers the exec
/// resets: a signal that came while the child was starting is not lost,
/// nor does it kill this process).
pub fn pass_signals_to(child: i32) {
    CHILD.store(child, std::sync::atomic::Ordering::Relaxed);
    if child > 0 {
        let pending = PENDING.swap(0, std::sync::atomic::Ordering::Relaxed);
        for sig in PASSED_ON.into_iter().filter(|s| pending & (1 << s) != 0) {
            // SAFETY: kill takes integers only.
            unsafe { libc::kill(child, sig) };
        }
    }
    for sig in PASSED_ON {
        // SAFETY: a zeroed sigaction is a valid value to fill in; the
        // handler is async-signal-safe (an atomic load and kill), and
        // SA_RESTART keeps this process's own waits going.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = pass_on as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

thread_local! {
    /// How many [`SignalsHeld`] of this thread are alive (only the first
    /// changes the mask).
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Asynchronous signals held back from this thread while alive: they are
/// delivered when the last guard of the thread goes. Faults (`SIGSEGV`,
/// `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`, `SIGSYS`) are never held; the
/// kernel would kill the process for a held one.
pub struct SignalsHeld {
    old: Option<libc::sigset_t>,
    /// The mask is the thread's: the guard stays on it.
    _thread: std::marker::PhantomData<*const ()>,
}

/// Holds back this thread's asynchronous signals until the guard goes.
/// Nested guards cost nothing: only the outermost changes the mask.
pub fn hold_signals() -> SignalsHeld {
    let first = HELD.try_with(|h| {
        h.set(h.get() + 1);
        h.get() == 1
    });
    if first != Ok(true) {
        return SignalsHeld { old: None, _thread: std::marker::PhantomData };
    }
    // SAFETY: plain signal-set calls on sets of this frame; the mask is
    // this thread's own.
    let old = unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        let mut old = std::mem::zeroed::<libc::sigset_t>();
        libc::sigfillset(&mut set);
        for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS] {
            libc::sigdelset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    };
    SignalsHeld { old: Some(old), _thread: std::marker::PhantomData }
}

impl std::fmt::Debug for SignalsHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalsHeld").field("outermost", &self.old.is_some()).finish()
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        let _ = HELD.try_with(|h| h.set(h.get().saturating_sub(1)));
        if let Some(old) = self.old.take() {
            // SAFETY: restores the mask saved by `hold_signals` on this
            // thread (the guard is not `Send`: it holds a raw set).
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        }
    }
}

/// Forgets this thread's guards from [`hold_signals`] that were never
/// dropped (their frames were left by `siglongjmp` from a handler of a
/// fault, which is never held; `siglongjmp` restored the mask itself), so
/// that the next guard changes the mask again.
pub fn forget_held_signals() {
    let _ = HELD.try_with(|h| h.set(0));
}

/// Removes `path` (a directory with what it holds, or a file) when this
/// process exits normally (`ferry::fuzzing::remove_at_exit`).
#[cfg(feature = "fuzzing")]
pub fn remove_at_exit(path: std::path::PathBuf) {
    static MADE: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    extern "C" fn remove_all() {
        // A thread still holding the list at exit keeps it: better some
        // litter than an exit that waits.
        if let Ok(made) = MADE.try_lock() {
            for p in made.iter() {
                let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
            }
        }
    }
    // SAFETY: `remove_all` is an `extern "C"` function taking nothing, as
    // `atexit` requires; it touches only the list above and the file system.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(remove_all);
    });
    MADE.lock().unwrap_or_else(|e| e.into_inner()).push(path);
}

/// Forks this process's line has been through: `fork()` adds one in each
/// child, once [`count_forks`] has run. Only where the kernel has no
/// `MADV_WIPEONFORK` ([`WIPED`]).
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The first word of a page the kernel empties in every child that does
/// not share this process's memory (`MADV_WIPEONFORK`): a child of
/// `fork()`, and one of a raw `clone` without `CLONE_VM` too, which runs
/// no `fork()` handlers. The word is this process's mark, 0 until
/// [`count_forks`] sets one. Null until the page is made, and for good if
/// the kernel cannot make it (then [`FORKS`] counts instead).
static WIPED: std::sync::atomic::AtomicPtr<std::sync::atomic::AtomicU64> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The last mark this process's line handed out: a child inherits it, so
/// the marks it hands out are larger than every one its parent's handles
/// hold.
static LAST_MARK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" {
    /// `pthread_atfork(3)`.
    fn pthread_atfork(prepare: Option<extern "C" fn()>, parent: Option<extern "C" fn()>, child: Option<extern "C" fn()>) -> libc::c_int;
}

/// Runs in the child of every `fork()`, before `fork` returns there: one
/// atomic add (async-signal-safe, as a child of a threaded process needs).
extern "C" fn forked() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Makes the [`WIPED`] page, or registers the `fork()` handler that
/// counts [`FORKS`] where the kernel cannot.
fn start_marking() {
    // SAFETY: a new private anonymous page, mapped where the kernel
    // chooses, so that no existing mapping is touched.
    let page = unsafe {
        rustix::mm::mmap_anonymous(std::ptr::null_mut(), 4096, rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE, rustix::mm::MapFlags::PRIVATE)
    };
    if let Ok(p) = page {
        // SAFETY: `p` is the page just mapped, which nothing else knows of;
        // on failure it is unmapped again and never used.
        let wiped = unsafe { rustix::mm::madvise(p, 4096, rustix::mm::Advice::LinuxWipeOnFork) };
        if wiped.is_ok() {
            // The page stays mapped for the life of the process; a zeroed
            // page is a valid, aligned `AtomicU64` of value 0.
            WIPED.store(p.cast(), std::sync::atomic::Ordering::Release);
            return;
        }
        // SAFETY: unmaps the page mapped above, never published.
        let _ = unsafe { rustix::mm::munmap(p, 4096) };
    }
    // SAFETY: registers a child handler that does one atomic add and
    // nothing else; no prepare or parent handler. It stays registered for
    // the life of the process, as the static it touches does.
    let _ = unsafe { pthread_atfork(None, None, Some(forked)) };
}

/// The [`WIPED`] word, if the page was made.
#[inline]
fn wiped() -> Option<&'static std::sync::atomic::AtomicU64> {
    let p = WIPED.load(std::sync::atomic::Ordering::Acquire);
    // SAFETY: a non-null `WIPED` is the first word of a page that stays
    // mapped, readable and writable for the life of the process, and is
    // only ever accessed atomically.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// This process's mark, set now if it has none: what [`forks`] must still
/// return for a handle made now to be this process's own. A child that
/// does not share this process's memory, made by `fork()` or by a raw
/// `clone` system call, has another.
pub fn count_forks() -> u64 {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(start_marking);
    let Some(word) = wiped() else { return FORKS.load(std::sync::atomic::Ordering::Relaxed) };
    loop {
        let mark = word.load(std::sync::atomic::Ordering::Relaxed);
        if mark != 0 {
            return mark;
        }
        let new = LAST_MARK.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if word.compare_exchange(0, new, std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed).is_ok() {
            return new;
        }
    }
}

/// This process's mark (one or two atomic loads, no system call): differs
/// from what [`count_forks`] returned when a handle was made if this
/// process is a child made since, by `fork()` or by a raw `clone`.
#[inline]
pub fn forks() -> u64 {
    match wiped() {
        Some(word) => word.load(std::sync::atomic::Ordering::Relaxed),
        None => FORKS.load(std::sync::atomic::Ordering::Relaxed),
    }
}
