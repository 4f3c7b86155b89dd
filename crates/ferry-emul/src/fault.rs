//! Copies from a window over bytes the file no longer has.
//!
//! A window is a shared mapping of the file; a page of it wholly past the
//! file's end faults (`SIGBUS`) when touched. Truncation through the
//! emulation calls every token back first, so a copy never reaches past
//! the end the token holders know; but a file cut behind the library's
//! back (by a program not run under the library, such as one started with
//! a cleared environment, or one under another `ferry run`) left the next
//! read there to kill the program with `SIGBUS`, where natively it reads
//! short. The library's `SIGBUS` handler recognises a fault inside the copy
//! this thread is making, maps a page of zeros over the faulting page so
//! that the copy can finish, and notes it; the copier then asks the kernel
//! for the size, keeps only the bytes below it and drops the window. Any
//! other `SIGBUS` goes to the disposition the program had before.
//!
//! # Safety
//! The handler reads two thread-local cells (constant-initialised, no
//! destructor: usable in a signal handler), maps one page inside the range
//! the interrupted copy named (part of the window the copier owns under
//! its lock, unmapped whole afterwards), and otherwise restores or calls
//! the previous disposition, which was read once before the handler was
//! installed.

use std::cell::Cell;
use std::sync::OnceLock;

use libc::{c_int, c_void};

thread_local! {
    /// The source range of the copy this thread is making, `[start, end)`.
    static COPYING: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// Whether a page of that range faulted and was replaced by zeros.
    static FAULTED: Cell<bool> = const { Cell::new(false) };
}

/// The program's `SIGBUS` disposition before the library's.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

extern "C" fn on_sigbus(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel's siginfo for this SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (start, end) = COPYING.try_with(|c| c.get()).unwrap_or((0, 0));
    if addr >= start && addr < end {
        let page = addr & !(page_size() - 1);
        // SAFETY: replaces one page of the window this thread is copying
        // from (module safety) with a private page of zeros.
        let r = unsafe {
            libc::mmap(page as *mut c_void, page_size(), libc::PROT_READ, libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if r != libc::MAP_FAILED {
            let _ = FAULTED.try_with(|f| f.set(true));
            return;
        }
    }
    // Not the library's: as the program would have had it.
    match PREVIOUS.get() {
        Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program's own three-argument handler, as installed.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the program's own one-argument handler, as installed.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // The default: back to it, and the faulting access, repeated
            // on return, ends the program as it would have.
            // SAFETY: a zeroed sigaction is SIG_DFL with no flags.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a constant.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }) as usize
}

/// Installs the library's `SIGBUS` handler, once, keeping the program's.
pub fn install() {
    if PREVIOUS.get().is_some() {
        return;
    }
    // SAFETY: reads the current disposition, then installs the handler
    // (after the previous one is stored for it to find).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
            return;
        }
        if PREVIOUS.set(old).is_err() {
            return;
        }
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
    }
}

/// Copies `n` bytes from `src` (inside a window the caller holds) to
/// `dst`; returns whether a page of the source was past the file's end
/// (replaced by zeros: the caller must drop the window and keep only the
/// bytes below the file's real size).
///
/// # Safety
/// `src..src+n` lies in a window the caller holds locked; `dst` has room
/// for `n` bytes.
pub unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) -> bool {
    use std::sync::atomic::{compiler_fence, Ordering};
    COPYING.with(|c| c.set((src as usize, src as usize + n)));
    FAULTED.with(|f| f.set(false));
    // The handler runs on this thread, between any two instructions: the
    // cells must be written before the copy's loads, and read after them,
    // as the program is written (the compiler may not move either across).
    compiler_fence(Ordering::SeqCst);
    // SAFETY: the caller's promise; a fault past the file's end is
    // answered by the handler with a page of zeros.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    compiler_fence(Ordering::SeqCst);
    COPYING.with(|c| c.set((0, 0)));
    FAULTED.with(|f| f.replace(false))
}
