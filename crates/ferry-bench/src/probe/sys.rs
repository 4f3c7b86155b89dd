//! The probe's only contact with raw memory and processes: owned mappings,
//! the `SIGSEGV` handler that times a trap, the forked ping-pong peer, and
//! the userfaultfd ioctls rustix does not wrap.
//!
//! # Safety
//! - A [`Map`] owns the range it maps: it came from `mmap` with a null hint,
//!   nothing else in the process refers to it, and it is unmapped exactly
//!   once (in `Drop` or in [`Map::unmap`], which consumes it). Byte accesses
//!   go through volatile reads and writes at offsets checked against `len`,
//!   so a protection change or a userfaultfd registration can only make an
//!   access fault (which the probe arranges to be handled), never touch
//!   memory outside the range.
//! - The trap handler is installed only while a [`TrapPage`] lives and only
//!   handles faults inside that page; any other `SIGSEGV` puts the previous
//!   action back and returns, so the fault repeats under the old handler.
//!   The handler does nothing but read the clock, call `mprotect` and store
//!   atomics: all async-signal-safe.
//! - The forked peer runs only code in this file that uses atomics in a
//!   shared mapping and raw system calls (rustix's `linux_raw` backend): no
//!   allocation, no locks, so forking a multi-threaded process is safe for
//!   it. It ends with `_exit`, never returning into the parent's code.
//! - userfaultfd ioctls get pointers to properly sized `#[repr(C)]` structs
//!   that live across the call; `UFFDIO_COPY` writes only into a range
//!   registered on that userfaultfd, which a live [`Map`] owns.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rustix::io::Errno;
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
use rustix::process::{Pid, Signal, WaitOptions};
use rustix::thread::futex;
use rustix::time::{ClockId, Timespec};

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

fn protect_raw(addr: usize, len: usize, writable: bool, readable: bool) -> rustix::io::Result<()> {
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

// ---------------------------------------------------------------- trap ----

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

// ------------------------------------------------------- ping-pong peer ----

/// How a ping-pong waiter waits for its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Sleep in `futex_wait`; the other side wakes it with `futex_wake`.
    Futex,
    /// Poll the shared word; call `sched_yield` every `yield_every` polls.
    Spin {
        /// Polls between yields.
        yield_every: u32,
    },
}

/// Slots of the shared page used by the ping-pong.
pub const TURN: usize = 0;
/// Set to 1 to make the peer exit.
pub const STOP: usize = 16;

/// Waits until `word` equals `want`; gives up after `limit` (ETIMEDOUT).
/// Returns early with EPIPE when `stop` is set.
pub fn wait_for(word: &AtomicU32, want: u32, stop: &AtomicU32, mode: WaitMode, limit: Duration) -> rustix::io::Result<()> {
    let deadline = now_ns() + limit.as_nanos() as u64;
    let mut polls = 0u32;
    loop {
        let v = word.load(Ordering::Acquire);
        if v == want {
            return Ok(());
        }
        if stop.load(Ordering::Acquire) != 0 {
            return Err(Errno::PIPE);
        }
        match mode {
            WaitMode::Futex => {
                let ts = Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
                match futex::wait(word, futex::Flags::empty(), v, Some(&ts)) {
                    Ok(()) | Err(Errno::AGAIN) | Err(Errno::INTR) | Err(Errno::TIMEDOUT) => {}
                    Err(e) => return Err(e),
                }
            }
            WaitMode::Spin { yield_every } => {
                polls += 1;
                if polls >= yield_every {
                    polls = 0;
                    rustix::thread::sched_yield();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        if (polls == 0 || mode == WaitMode::Futex) && now_ns() > deadline {
            return Err(Errno::TIMEDOUT);
        }
    }
}

/// Stores `v` into `word` and, for futex mode, wakes the waiter.
pub fn signal(word: &AtomicU32, v: u32, mode: WaitMode) -> rustix::io::Result<()> {
    word.store(v, Ordering::Release);
    if mode == WaitMode::Futex {
        futex::wake(word, futex::Flags::empty(), 1)?;
    }
    Ok(())
}

/// A forked process that answers every `TURN = 2k+1` with `TURN = 2k+2`.
/// Killed and reaped on drop if it has not exited.
#[derive(Debug)]
pub struct Peer {
    pid: Option<Pid>,
}

impl Peer {
    /// Forks the peer, pinned to `cpu` (if given), waiting in `mode` on the
    /// words of `shared`. It exits when `STOP` is set, when the parent dies,
    /// or after 10 s without a turn.
    pub fn spawn(shared: &Map, mode: WaitMode, cpu: Option<usize>) -> rustix::io::Result<Peer> {
        let parent = rustix::process::getpid();
        // SAFETY: the child runs only `peer_main`, which uses atomics in the
        // shared mapping and raw syscalls (no allocation, no locks), then
        // `_exit`s; see the module's Safety section.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
        }
        if pid == 0 {
            let code = peer_main(shared, mode, cpu, parent);
            // SAFETY: ends the child without running the parent's atexit
            // handlers or destructors.
            unsafe { libc::_exit(code) };
        }
        Ok(Peer { pid: Pid::from_raw(pid) })
    }

    /// Waits for the peer to exit (after `STOP` was set); true if it exited 0.
    pub fn join(mut self) -> bool {
        let Some(pid) = self.pid.take() else { return false };
        for _ in 0..300 {
            match rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
                Ok(Some((_, st))) => return st.exit_status() == Some(0),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return false,
            }
        }
        let _ = rustix::process::kill_process(pid, Signal::KILL);
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        false
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        }
    }
}

fn peer_main(shared: &Map, mode: WaitMode, cpu: Option<usize>, parent: Pid) -> i32 {
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    if rustix::process::getppid() != Some(parent) {
        return 3;
    }
    if let Some(cpu) = cpu {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        if rustix::thread::sched_setaffinity(None, &set).is_err() {
            return 4;
        }
    }
    let turn = shared.atomic_u32(TURN);
    let stop = shared.atomic_u32(STOP);
    let mut want = 1u32;
    loop {
        match wait_for(turn, want, stop, mode, Duration::from_secs(10)) {
            Ok(()) => {}
            Err(Errno::PIPE) => return 0,
            Err(_) => return 5,
        }
        if signal(turn, want.wrapping_add(1), mode).is_err() {
            return 6;
        }
        want = want.wrapping_add(2);
    }
}

// ------------------------------------------------------------ userfaultfd --

/// `UFFD_API`.
const UFFD_API: u64 = 0xAA;
const fn iowr(nr: u64, size: u64) -> u64 {
    (3 << 30) | (size << 16) | (0xAA << 8) | nr
}
const fn ior(nr: u64, size: u64) -> u64 {
    (2 << 30) | (size << 16) | (0xAA << 8) | nr
}

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}
#[repr(C)]
struct UffdMsg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    flags: u64,
    address: u64,
    _rest: u64,
}

const UFFDIO_API: u64 = iowr(0x3F, 24);
const UFFDIO_REGISTER: u64 = iowr(0x00, 32);
const UFFDIO_UNREGISTER: u64 = ior(0x01, 16);
const UFFDIO_COPY: u64 = iowr(0x03, 40);
const UFFDIO_ZEROPAGE: u64 = iowr(0x04, 32);
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFD_USER_MODE_ONLY: u32 = 1;

fn ioctl<T>(fd: BorrowedFd<'_>, req: u64, arg: &mut T) -> rustix::io::Result<()> {
    // SAFETY: every request used with this helper takes a pointer to a
    // `#[repr(C)]` struct of exactly `T`'s layout (encoded in `req`), which
    // lives across the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg as *mut T) };
    if rc < 0 {
        Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)))
    } else {
        Ok(())
    }
}

/// A userfaultfd after the API handshake.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    /// Features the kernel reported (`UFFDIO_API`).
    pub features: u64,
    /// Whether the descriptor had to be opened with `UFFD_USER_MODE_ONLY`.
    pub user_mode_only: bool,
}

impl Uffd {
    /// Opens a non-blocking userfaultfd and asks the kernel for every
    /// feature it has (`UFFDIO_API` with features 0 reports them).
    pub fn open() -> rustix::io::Result<Uffd> {
        use rustix::mm::UserfaultfdFlags as F;
        let base = F::CLOEXEC | F::NONBLOCK;
        // SAFETY: creating the descriptor is harmless; the ranges registered
        // on it are owned Maps (module Safety section).
        let (fd, user_mode_only) = match unsafe { rustix::mm::userfaultfd(base) } {
            Ok(fd) => (fd, false),
            Err(Errno::PERM) => {
                // SAFETY: as above.
                let fd = unsafe { rustix::mm::userfaultfd(base | F::from_bits_retain(UFFD_USER_MODE_ONLY)) }?;
                (fd, true)
            }
            Err(e) => return Err(e),
        };
        let mut api = UffdioApi { api: UFFD_API, ..Default::default() };
        ioctl(fd.as_fd(), UFFDIO_API, &mut api)?;
        Ok(Uffd { fd, features: api.features, user_mode_only })
    }

    /// Registers all of `map` for missing-page faults.
    pub fn register_missing(&self, map: &Map) -> rustix::io::Result<()> {
        let mut r = UffdioRegister {
            range: UffdioRange { start: map.addr() as u64, len: map.len() as u64 },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        ioctl(self.fd.as_fd(), UFFDIO_REGISTER, &mut r)
    }

    /// Unregisters all of `map`.
    pub fn unregister(&self, map: &Map) -> rustix::io::Result<()> {
        let mut r = UffdioRange { start: map.addr() as u64, len: map.len() as u64 };
        ioctl(self.fd.as_fd(), UFFDIO_UNREGISTER, &mut r)
    }

    /// Waits up to `timeout` for a page fault; returns its address.
    pub fn next_fault(&self, timeout: Duration) -> rustix::io::Result<Option<u64>> {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut pfd = [PollFd::new(&self.fd, PollFlags::IN)];
        let ts = Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: timeout.subsec_nanos() as i64 };
        match poll(&mut pfd, Some(&ts)) {
            Ok(0) | Err(Errno::INTR) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        let mut msg = MaybeUninit::<UffdMsg>::uninit();
        // SAFETY: the buffer is exactly one uffd_msg (32 bytes) and lives
        // across the call.
        let buf = unsafe { std::slice::from_raw_parts_mut(msg.as_mut_ptr().cast::<MaybeUninit<u8>>(), 32) };
        match rustix::io::read(&self.fd, buf) {
            Ok((got, _)) if got.len() == 32 => {}
            Ok(_) | Err(Errno::AGAIN) => return Ok(None),
            Err(e) => return Err(e),
        }
        // SAFETY: the kernel wrote a whole uffd_msg; every bit pattern is a
        // valid UffdMsg (plain integers).
        let msg = unsafe { msg.assume_init() };
        let _ = msg.flags;
        Ok((msg.event == UFFD_EVENT_PAGEFAULT).then_some(msg.address))
    }

    /// Resolves the fault at `addr` by copying one page from `src`
    /// (`UFFDIO_COPY`), or with the zero page when `src` is `None`.
    pub fn resolve(&self, addr: u64, page: usize, src: Option<&Map>) -> rustix::io::Result<()> {
        let dst = addr & !(page as u64 - 1);
        let r = match src {
            Some(src) => {
                assert!(src.len() >= page);
                let mut c = UffdioCopy { dst, src: src.addr() as u64, len: page as u64, ..Default::default() };
                ioctl(self.fd.as_fd(), UFFDIO_COPY, &mut c)
            }
            None => {
                let mut z = UffdioZeropage { range: UffdioRange { start: dst, len: page as u64 }, ..Default::default() };
                ioctl(self.fd.as_fd(), UFFDIO_ZEROPAGE, &mut z)
            }
        };
        match r {
            // Another resolution got there first: the page is present.
            Err(Errno::EXIST) => Ok(()),
            r => r,
        }
    }
}

// ------------------------------------------------------------- counters --

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
