//! The table of emulated descriptors, read without a lock.
//!
//! Every read, write and seek of the program looks its descriptor up here,
//! with no signal held (holding costs two system calls a call). A signal
//! handler may leave such a call by a jump (`siglongjmp`), and a read lock
//! left held so would keep every later writer (the next open or close of
//! an emulated file, in any thread) waiting for ever. So a reader raises a
//! mark of its own thread instead, and a writer (which holds the thread's
//! signals and a lock of writers) says it is writing and waits until no
//! mark is up; a reader that finds a writer at work waits for it. The
//! library's jump hooks lower the jumping thread's mark
//! ([`left_by_jump`]), so a handler's jump never leaves it up.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::file::File;

/// The table: an open file per descriptor number.
pub type Slots = Vec<Option<Arc<File>>>;

struct Shared(UnsafeCell<Slots>);

// SAFETY: the slots are changed only by a writer, which holds `WRITERS`
// and, with `WRITING` set, has seen every reader's mark down; a reader
// reads them only with its mark up after finding `WRITING` clear, or
// holding `WRITERS` (see `read` and `write`).
unsafe impl Sync for Shared {}

static SLOTS: Shared = Shared(UnsafeCell::new(Vec::new()));
static WRITERS: Mutex<()> = Mutex::new(());
static WRITING: AtomicBool = AtomicBool::new(false);

/// One thread's mark: up while the thread reads the table (a count: a
/// signal handler's read may come inside the thread's own). Records are
/// never freed; one whose thread ended is taken by a later thread.
struct Reader {
    reading: AtomicU32,
    taken: AtomicBool,
    next: *const Reader,
}

/// Every thread's record, newest first.
static READERS: AtomicPtr<Reader> = AtomicPtr::new(std::ptr::null_mut());

/// Gives the thread's record back when the thread ends.
struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        let _ = ME.try_with(|m| {
            let r = m.replace(std::ptr::null());
            if !r.is_null() {
                // SAFETY: records live for ever (`READERS`).
                unsafe { &*r }.taken.store(false, Ordering::Release);
            }
        });
    }
}

thread_local! {
    /// This thread's record; null until its first read.
    static ME: Cell<*const Reader> = const { Cell::new(std::ptr::null()) };
    static GIVE_BACK: GiveBack = const { GiveBack };
}

/// This thread's record, taken or made on its first read (with its
/// signals held: that allocates). `None` while the thread's storage is
/// torn down.
fn me() -> Option<&'static Reader> {
    let r = ME.try_with(|m| m.get()).ok()?;
    if !r.is_null() {
        // SAFETY: records live for ever (`READERS`).
        return Some(unsafe { &*r });
    }
    let _held = ferry::emulation::hold_signals();
    // The record goes back when the thread ends.
    GIVE_BACK.try_with(|_| ()).ok()?;
    let mut p = READERS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: records live for ever.
        let rec = unsafe { &*p };
        if rec.taken.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            let _ = ME.try_with(|m| m.set(p));
            return Some(rec);
        }
        p = rec.next.cast_mut();
    }
    let rec: &'static mut Reader =
        Box::leak(Box::new(Reader { reading: AtomicU32::new(0), taken: AtomicBool::new(true), next: std::ptr::null() }));
    loop {
        let head = READERS.load(Ordering::Acquire);
        rec.next = head;
        if READERS.compare_exchange(head, rec, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            break;
        }
    }
    let rec: &'static Reader = rec;
    let _ = ME.try_with(|m| m.set(rec));
    Some(rec)
}

/// Runs `f` on the table, read as described above.
pub fn read<R>(f: impl FnOnce(&Slots) -> R) -> R {
    if let Some(rec) = me() {
        rec.reading.fetch_add(1, Ordering::SeqCst);
        if !WRITING.load(Ordering::SeqCst) {
            // SAFETY: this thread's mark is up and no writer was at work,
            // so none changes the slots until the mark goes down (a writer
            // sets `WRITING`, then waits for every mark).
            let r = f(unsafe { &*SLOTS.0.get() });
            rec.reading.fetch_sub(1, Ordering::Release);
            return r;
        }
        rec.reading.fetch_sub(1, Ordering::Release);
    }
    // A writer is at work (or the thread has no record): wait for it.
    let _held = ferry::emulation::hold_signals();
    let _w = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: holding `WRITERS`, no writer changes the slots.
    f(unsafe { &*SLOTS.0.get() })
}

/// Runs `f` on the table to change it, with the thread's signals held.
pub fn write<R>(f: impl FnOnce(&mut Slots) -> R) -> R {
    let _held = ferry::emulation::hold_signals();
    let _w = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    WRITING.store(true, Ordering::SeqCst);
    let mut p = READERS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: records live for ever.
        let rec = unsafe { &*p };
        let mut spins = 0u32;
        while rec.reading.load(Ordering::SeqCst) != 0 {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        p = rec.next.cast_mut();
    }
    // SAFETY: holding `WRITERS` with `WRITING` set, and every mark seen
    // down after it was set: no reader is in the slots, and none enters.
    let r = f(unsafe { &mut *SLOTS.0.get() });
    WRITING.store(false, Ordering::SeqCst);
    r
}

/// The lock of writers, for `fork` to hold across itself.
pub fn hold_writers() -> MutexGuard<'static, ()> {
    WRITERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// In a child of `fork`, before the lock of writers goes: the threads of
/// the parent are not here, so their records are free and their marks
/// down (a thread of the parent that was reading left its mark up in the
/// child's copy, and the child's next writer would have waited for ever).
pub fn forget_other_threads() {
    let mine = ME.try_with(|m| m.get()).unwrap_or(std::ptr::null());
    let mut p = READERS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: records live for ever.
        let rec = unsafe { &*p };
        rec.reading.store(0, Ordering::SeqCst);
        if !std::ptr::eq(p, mine) {
            rec.taken.store(false, Ordering::Release);
        }
        p = rec.next.cast_mut();
    }
    WRITING.store(false, Ordering::SeqCst);
}

/// Lowers this thread's mark: a signal handler's jump left its read.
pub fn left_by_jump() {
    let _ = ME.try_with(|m| {
        let r = m.get();
        if !r.is_null() {
            // SAFETY: records live for ever.
            unsafe { &*r }.reading.store(0, Ordering::SeqCst);
        }
    });
}
