//! A page whose write faults are delivered to a user `SIGSEGV` handler that
//! makes the page writable again: Anderson et al.'s trap, timed from both
//! sides of the kernel.
//!
//! # Safety
//! The handler is installed only while a [`TrapPage`] lives (one at a time)
//! and only handles faults inside that page; any other `SIGSEGV` puts the
//! previous action back and returns, so the fault repeats under the old
//! handler. The handler does nothing but read the clock, call `mprotect`
//! and store atomics: all async-signal-safe.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use rustix::io::Errno;

use super::map::{now_ns, protect_raw, Map};

static TRAP_PAGE: AtomicUsize = AtomicUsize::new(0);
static TRAP_LEN: AtomicUsize = AtomicUsize::new(0);
static TRAP_IN: AtomicU64 = AtomicU64::new(0);
static TRAP_OUT: AtomicU64 = AtomicU64::new(0);
static TRAP_HANDLED: AtomicU64 = AtomicU64::new(0);
static TRAP_ACTIVE: AtomicBool = AtomicBool::new(false);

struct OldAction(UnsafeCell<MaybeUninit<libc::sigaction>>);
// SAFETY: written only by `TrapPage::new` while no TrapPage exists (guarded
// by TRAP_ACTIVE) and before the handler is installed; read by the handler
// and by `Drop` afterwards.
unsafe impl Sync for OldAction {}
static OLD_ACTION: OldAction = OldAction(UnsafeCell::new(MaybeUninit::uninit()));

extern "C" fn on_segv(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    let t_in = now_ns();
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = TRAP_PAGE.load(Ordering::Acquire);
    let len = TRAP_LEN.load(Ordering::Acquire);
    if page != 0 && addr >= page && addr < page + len {
        let _ = protect_raw(page, len, true, true);
        TRAP_HANDLED.fetch_add(1, Ordering::Relaxed);
        TRAP_IN.store(t_in, Ordering::Relaxed);
        TRAP_OUT.store(now_ns(), Ordering::Release);
    } else {
        // Not ours: give the fault back to whoever handled it before.
        // SAFETY: OLD_ACTION was filled before this handler was installed.
        unsafe { libc::sigaction(libc::SIGSEGV, (*OLD_ACTION.0.get()).as_ptr(), std::ptr::null_mut()) };
    }
}

/// One page whose write faults are delivered to a user `SIGSEGV` handler
/// that makes the page writable again and records when it ran.
#[derive(Debug)]
pub struct TrapPage {
    map: Map,
}

/// Times of one trap, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct TrapTimes {
    /// From just before the faulting store to the handler's first clock read.
    pub delivery: u64,
    /// From the handler's last clock read to the store completing.
    pub ret: u64,
    /// The whole round trip, including the handler's `mprotect`.
    pub total: u64,
}

impl TrapPage {
    /// Maps the page and installs the handler. Fails with `EBUSY` if another
    /// `TrapPage` is alive.
    pub fn new() -> rustix::io::Result<TrapPage> {
        if TRAP_ACTIVE.swap(true, Ordering::AcqRel) {
            return Err(Errno::BUSY);
        }
        let map = match Map::anon(rustix::param::page_size()) {
            Ok(m) => m,
            Err(e) => {
                TRAP_ACTIVE.store(false, Ordering::Release);
                return Err(e);
            }
        };
        map.write(0, 1);
        TRAP_LEN.store(map.len(), Ordering::Release);
        TRAP_PAGE.store(map.addr(), Ordering::Release);
        // SAFETY: zeroed sigaction is a valid starting value; we fill in the
        // handler, SA_SIGINFO and an empty mask. OLD_ACTION is written before
        // the new handler can run (see OldAction's Sync note).
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_segv as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGSEGV, &sa, (*OLD_ACTION.0.get()).as_mut_ptr())
        };
        if rc != 0 {
            TRAP_PAGE.store(0, Ordering::Release);
            TRAP_ACTIVE.store(false, Ordering::Release);
            return Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
        }
        Ok(TrapPage { map })
    }

    /// Write-protects the page, stores to it (faulting into the handler) and
    /// returns how long each leg took.
    pub fn trap_once(&self) -> rustix::io::Result<TrapTimes> {
        self.map.protect(false, true)?;
        let before = TRAP_HANDLED.load(Ordering::Acquire);
        let t0 = now_ns();
        self.map.write(0, 2);
        let t1 = now_ns();
        if TRAP_HANDLED.load(Ordering::Acquire) != before + 1 {
            return Err(Errno::FAULT);
        }
        let t_in = TRAP_IN.load(Ordering::Relaxed);
        let t_out = TRAP_OUT.load(Ordering::Acquire);
        Ok(TrapTimes {
            delivery: t_in.saturating_sub(t0),
            ret: t1.saturating_sub(t_out),
            total: t1.saturating_sub(t0),
        })
    }
}

impl Drop for TrapPage {
    fn drop(&mut self) {
        // SAFETY: OLD_ACTION holds the action we replaced in `new`.
        unsafe { libc::sigaction(libc::SIGSEGV, (*OLD_ACTION.0.get()).as_ptr(), std::ptr::null_mut()) };
        TRAP_PAGE.store(0, Ordering::Release);
        TRAP_ACTIVE.store(false, Ordering::Release);
    }
}
