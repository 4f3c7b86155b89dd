//! One emulated open file in this process: the server's descriptor (kept
//! at a high number, for mapping and for what reaches the kernel), the
//! token page shared with every process sharing the open file, the hold,
//! and this process's window.
//!
//! # Safety
//! The window is a `MAP_SHARED` mapping of the file owned by [`Window`]
//! and unmapped only when it moves or the file is dropped, both under the
//! window's lock, which every copy holds. Copies touch only bytes below
//! the size the token holders know (pages past the end of the file would
//! fault); a file truncated behind the server's back can still make such
//! an access fault, which `fault::copy` survives (a page of zeros, then
//! the real size).

use std::os::fd::{AsFd, OwnedFd};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

use ferry::emulation::{OpenedFile, TokenPage, TokenState};
use ferry::SendRight;
use rustix::fs::SeekFrom;

use crate::state;

/// An `errno` value.
pub type Errno = i32;

struct Window {
    addr: usize,
    start: u64,
    len: usize,
    /// A read went to the file already (see `File::copy_out`).
    read_before: bool,
    /// Whether the file is on a `tmpfs`, once asked (see
    /// `File::window_at`).
    on_tmpfs: Option<bool>,
}

/// The lock of an open file's window, which records its holder's pid so
/// that a child of `fork` can take it over: a `Mutex` held by another
/// thread at the fork stays held in the child for ever (that thread is
/// not in the child), and the child's next read of the file hung. A
/// holder of another pid than this process's is such a thread; its
/// window, perhaps half moved, is forgotten (its mapping, if any, stays).
///
/// It also records its holder's thread ([`state::thread_mark`]): a thread
/// that finds it held by itself was left by a signal handler's jump in
/// the middle of a copy, and takes it over (a window is moved with
/// signals held, so it is whole).
struct WindowLock {
    /// The holder's pid; 0 when free.
    holder: AtomicI32,
    /// The holding thread's mark; 0 while none is recorded.
    thread: AtomicUsize,
    window: UnsafeCell<Window>,
}

// SAFETY: the window is reached only through a `WindowGuard`, of which
// one exists at a time in a process (`lock`).
unsafe impl Sync for WindowLock {}

/// The window, held by this thread.
struct WindowGuard<'a> {
    lock: &'a WindowLock,
}

impl WindowLock {
    fn new() -> WindowLock {
        WindowLock { holder: AtomicI32::new(0), thread: AtomicUsize::new(0), window: UnsafeCell::new(Window { addr: 0, start: 0, len: 0, read_before: false, on_tmpfs: None }) }
    }

    fn lock(&self) -> WindowGuard<'_> {
        let me = state::pid();
        let mark = state::thread_mark();
        let mut spins = 0u32;
        loop {
            match self.holder.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => {
                    self.thread.store(mark, Ordering::Relaxed);
                    return WindowGuard { lock: self };
                }
                // Left held by this thread's own copy, which a signal
                // handler left by a jump: no frame of it holds it now.
                Err(h) if h == me && self.thread.load(Ordering::Relaxed) == mark => {
                    return WindowGuard { lock: self };
                }
                // Held at a fork by a thread of the parent: ours now.
                Err(h) if h != me => {
                    if self.holder.compare_exchange(h, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                        self.thread.store(mark, Ordering::Relaxed);
                        // SAFETY: held (just taken); no thread of this
                        // process has the window.
                        unsafe { (*self.window.get()).len = 0 };
                        return WindowGuard { lock: self };
                    }
                }
                // Another thread of this process copies: a short wait.
                Err(_) => {}
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl std::ops::Deref for WindowGuard<'_> {
    type Target = Window;
    fn deref(&self) -> &Window {
        // SAFETY: this guard holds the lock (`WindowLock::lock`).
        unsafe { &*self.lock.window.get() }
    }
}

impl std::ops::DerefMut for WindowGuard<'_> {
    fn deref_mut(&mut self) -> &mut Window {
        // SAFETY: this guard holds the lock (`WindowLock::lock`).
        unsafe { &mut *self.lock.window.get() }
    }
}

impl Drop for WindowGuard<'_> {
    fn drop(&mut self) {
        // The mark goes first: a thread never finds its own mark on a
        // lock another thread holds.
        self.lock.thread.store(0, Ordering::Relaxed);
        self.lock.holder.store(0, Ordering::Release);
    }
}

/// An emulated open file as this process sees it.
pub struct File {
    id: u64,
    fd: OwnedFd,
    page: TokenPage,
    /// The mark of the thread of this process that holds the token active
    /// ([`state::thread_mark`]); 0 while none is recorded. A thread that
    /// finds the token active for this process under its own mark was
    /// left by a signal handler's jump while it held it, and takes it
    /// over (another thread of the process would otherwise wait for it
    /// for ever, and so would this one).
    token_thread: AtomicUsize,
    /// Taken (and closed) when the open file goes, before the server is
    /// told to close its own descriptor of the file.
    hold: Option<SendRight>,
    readable: bool,
    writable: bool,
    map_writable: bool,
    /// `O_APPEND`, as opened or as `fcntl(F_SETFL)` last set it.
    append: AtomicBool,
    /// `O_DIRECT`, as opened or as `fcntl(F_SETFL)` here last set it:
    /// reads are the kernel's then, which refuses what the file system
    /// cannot do without the page cache (a read of a length or at an
    /// offset that is not aligned: `EINVAL`). From a window they succeeded.
    direct: AtomicBool,
    /// Whether the program took a lock that belongs to the open file
    /// (`flock`, `F_OFD_SETLK`), which lasts while any descriptor of it
    /// does, the server's among them.
    locked: AtomicBool,
    /// Whether this open file was written or cut since its last read by
    /// the kernel: the next read is then the kernel's (`pread`), which
    /// updates the access time as the file system's rules say (with
    /// `relatime`, once the file was modified after its last access). A
    /// copy from a window updates nothing, so a file written and read
    /// back kept the access time of its mapping.
    modified: AtomicBool,
    window: WindowLock,
    wsize: usize,
}

fn errno(e: rustix::io::Errno) -> Errno {
    e.raw_os_error()
}

/// Offsets above this are checked with the kernel when a seek sets them
/// (no file system allows less, so below it a seek stays a store).
const SEEK_CHECKED_FROM: i64 = 1 << 31;

/// Files up to this size are read with `pread` the first time (see
/// `File::copy_out`).
const SMALL_FILE: u64 = 64 << 10;

/// The kernel's check of a read's range: `EINVAL` when its end does not
/// fit an offset.
fn check_range(pos: u64, len: usize) -> Result<(), Errno> {
    match (pos as i64).checked_add(len as i64) {
        Some(_) if len <= isize::MAX as usize => Ok(()),
        _ => Err(libc::EINVAL),
    }
}

/// The token held active by this process for one call; passive again on
/// drop.
struct Token<'a> {
    page: &'a TokenPage,
    pid: i32,
    thread: &'a AtomicUsize,
}

impl Drop for Token<'_> {
    fn drop(&mut self) {
        // The mark goes first: a thread never finds its own mark on a
        // token another thread holds.
        self.thread.store(0, Ordering::Relaxed);
        self.page.deactivate(self.pid);
    }
}

impl File {
    /// Wraps what the server opened with `flags`.
    pub fn new(o: OpenedFile, flags: i32, wsize: usize) -> File {
        let acc = flags & libc::O_ACCMODE;
        File {
            id: o.id,
            fd: o.file,
            page: o.page,
            token_thread: AtomicUsize::new(0),
            hold: Some(o.hold),
            readable: acc != libc::O_WRONLY,
            writable: acc != libc::O_RDONLY,
            // Writes go through `pwrite`, not the window: on Linux the
            // first store to each clean page of a shared file mapping takes
            // a write fault through the file system (`page_mkwrite`), which
            // measured 2.9x slower than the system call (docs/emulation.md).
            map_writable: false,
            append: AtomicBool::new(flags & libc::O_APPEND != 0),
            direct: AtomicBool::new(flags & libc::O_DIRECT != 0),
            locked: AtomicBool::new(false),
            modified: AtomicBool::new(false),
            window: WindowLock::new(),
            wsize,
        }
    }

    /// The server's descriptor of the file.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The descriptor of the hold (the send right that keeps the open
    /// file at the server).
    pub fn hold_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.hold.as_ref().map_or(-1, |h| h.as_fd().as_raw_fd())
    }

    /// Makes this process the token's active holder: one compare-and-swap
    /// when it is the passive holder, else a wait for another thread of it,
    /// else a request to the server (which calls the token back).
    fn token(&self) -> Result<Token<'_>, Errno> {
        let pid = state::pid();
        let mark = state::thread_mark();
        let held = || {
            self.token_thread.store(mark, Ordering::Relaxed);
            Token { page: &self.page, pid, thread: &self.token_thread }
        };
        for _ in 0..100_000 {
            if self.page.try_activate(pid) {
                return Ok(held());
            }
            match self.page.state() {
                TokenState::Active(p) if p == pid && self.token_thread.load(Ordering::Relaxed) == mark => return Ok(held()),
                TokenState::Active(p) if p == pid => self.page.wait_active(Duration::from_millis(10)),
                _ => {
                    let e = state::emul().ok_or(libc::EIO)?;
                    // Asked with the thread's signals held: a handler that
                    // left the call by a jump left its reply port open and
                    // the token given to this process with no thread's
                    // mark on it (see `state::enter`).
                    let _held = ferry::emulation::hold_signals();
                    match e.client.token(self.id) {
                        Ok(()) => return Ok(held()),
                        // The server has too many waits going: ask again.
                        Err(libc::EAGAIN) => std::thread::sleep(Duration::from_millis(1)),
                        Err(err) => return Err(err),
                    }
                }
            }
        }
        Err(libc::EDEADLK)
    }

    /// The size as far as `need` matters: the known size, or the kernel's
    /// when a request reaches past it (the file may have grown elsewhere).
    fn size_for(&self, need: u64) -> Result<u64, Errno> {
        let known = self.page.size();
        if need <= known {
            return Ok(known);
        }
        let real = rustix::fs::fstat(&self.fd).map_err(errno)?.st_size as u64;
        if real != known {
            self.page.set_size(real);
        }
        Ok(real)
    }

    /// The window holding byte `p`, moved there if needed; returns the
    /// address of `p` and the bytes mapped from it.
    fn window_at(&self, w: &mut Window, p: u64) -> Result<(*mut u8, usize), Errno> {
        if w.len == 0 || p < w.start || p >= w.start + w.len as u64 {
            // Moving a window is where the server is consulted: a server
            // that is gone fails the call (EIO) instead of serving on.
            let e = state::emul().ok_or(libc::EIO)?;
            if e.client.is_dead() {
                return Err(libc::EIO);
            }
            // Moved whole: a handler that left the copy by a jump leaves
            // a window this thread takes over (`WindowLock`).
            let _held = ferry::emulation::hold_signals();
            self.unmap(w);
            if rustix::process::getrlimit(rustix::process::Resource::As).current.is_some() {
                // Under a limit on the address space the windows would
                // take what the program has natively (1 MiB an open file:
                // with a few hundred files open, reads and then its own
                // allocations failed with ENOMEM): none is mapped, and
                // the read is the kernel's (`copy_out`).
                return Err(libc::ENOMEM);
            }
            // A `tmpfs` fills a hole with a page of memory at a read fault
            // of a mapping, where its `read` copies zeros and leaves the
            // hole: `md5sum` of a sparse file of 64 MiB there took its
            // blocks from 8 to 131,080 (and as much memory, for as long as
            // the file lives). Its files get no window: their reads are
            // the kernel's (`copy_out`). Asked once per open file.
            let on_tmpfs = *w.on_tmpfs.get_or_insert_with(|| rustix::fs::fstatfs(&self.fd).is_ok_and(|st| st.f_type == libc::TMPFS_MAGIC));
            if on_tmpfs {
                return Err(libc::ENOMEM);
            }
            let start = p & !(self.wsize as u64 - 1);
            let prot = if self.map_writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
            use std::os::fd::AsRawFd;
            // SAFETY: a fresh shared mapping of our own descriptor, placed
            // by the kernel; nothing else refers to its range yet.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    self.wsize,
                    prot,
                    if e.populate { libc::MAP_SHARED | libc::MAP_POPULATE } else { libc::MAP_SHARED },
                    self.fd.as_raw_fd(),
                    start as libc::off_t,
                )
            };
            if addr == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            *w = Window { addr: addr as usize, start, len: self.wsize, read_before: true, on_tmpfs: w.on_tmpfs };
        }
        let off = (p - w.start) as usize;
        Ok(((w.addr + off) as *mut u8, w.len - off))
    }

    fn unmap(&self, w: &mut Window) {
        if w.len != 0 {
            // SAFETY: the range is the window's own mapping (module
            // safety); the lock is held, so no copy is using it.
            unsafe { libc::munmap(w.addr as *mut libc::c_void, w.len) };
            w.len = 0;
        }
    }

    /// Copies from the file at `pos` into `buf` through the windows.
    fn copy_out(&self, pos: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        if buf.is_empty() {
            return Ok(0);
        }
        let size = self.size_for(pos.saturating_add(buf.len() as u64))?;
        if pos >= size {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(size - pos) as usize;
        let mut w = self.window.lock();
        let direct = self.direct.load(Ordering::Relaxed);
        // One load on the way of every read; the swap only after a write.
        let modified = self.modified.load(Ordering::Relaxed) && self.modified.swap(false, Ordering::Relaxed);
        if modified && !direct {
            w.read_before = true;
            return self.pread_below(&mut buf[..want], pos, 0);
        }
        if direct || (!w.read_before && size <= SMALL_FILE) {
            // The first read of a small file (most are read once, whole):
            // one `pread`, where a window costs a mapping, a fault and an
            // unmapping. A file read again gets a window, whose reads are
            // copies. With O_DIRECT every read is the kernel's.
            w.read_before = true;
            if direct {
                // As much as asked, not just what is below the size known
                // here: the length is the kernel's to check.
                return rustix::io::pread(&self.fd, buf, pos).map_err(errno);
            }
            return self.pread_below(&mut buf[..want], pos, 0);
        }
        let mut done = 0;
        while done < want {
            // Bytes already copied are returned; the failure comes with
            // the next call, as a short read is followed by the error.
            let (src, avail) = match self.window_at(&mut w, pos + done as u64) {
                Ok(x) => x,
                // No window (under a limit on the address space, on a
                // `tmpfs`, or no room for one): the rest is the kernel's
                // to read, as natively, where the read failed with ENOMEM.
                Err(libc::ENOMEM) => return self.pread_below(&mut buf[..want], pos, done),
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            };
            let n = avail.min(want - done);
            // SAFETY: `src..src+n` lies in the window (window_at) and below
            // the file's size as the token holders know it (module
            // safety); `buf[done..done+n]` is ours.
            let faulted = unsafe { crate::fault::copy(src, buf.as_mut_ptr().add(done), n) };
            if faulted {
                // The file was cut behind the library's back: the window
                // now holds zeros where pages were; only the bytes below
                // the file's real end count, and the window goes.
                self.unmap(&mut w);
                let real = rustix::fs::fstat(&self.fd).map_err(errno)?.st_size as u64;
                self.page.set_size(real);
                let valid = real.saturating_sub(pos).min((done + n) as u64) as usize;
                return Ok(valid);
            }
            done += n;
        }
        Ok(done)
    }

    /// Reads `buf` (bytes below the size known) from the file at `pos`
    /// with `pread`, the first `done` already there; returns the bytes
    /// read in all, short at the file's real end, and a failure only when
    /// nothing was read.
    fn pread_below(&self, buf: &mut [u8], pos: u64, mut done: usize) -> Result<usize, Errno> {
        while done < buf.len() {
            match rustix::io::pread(&self.fd, &mut buf[done..], pos + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) if done > 0 => break,
                Err(e) => return Err(errno(e)),
            }
        }
        Ok(done)
    }

    /// Copies `buf` into the file at `pos`: through the windows for the
    /// bytes inside the file when it is mapped writable, with `pwrite`
    /// for the rest (which grows the file).
    fn copy_in(&self, pos: u64, buf: &[u8]) -> Result<usize, Errno> {
        let size = self.page.size();
        let inside = if self.map_writable && pos < size { (buf.len() as u64).min(size - pos) as usize } else { 0 };
        if inside > 0 {
            let mut w = self.window.lock();
            let mut done = 0;
            while done < inside {
                let (dst, avail) = self.window_at(&mut w, pos + done as u64)?;
                let n = avail.min(inside - done);
                // SAFETY: `dst..dst+n` lies in the writable window and below
                // the file's size; `buf[done..done+n]` is ours.
                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(done), dst, n) };
                done += n;
            }
        }
        let mut done = inside;
        while done < buf.len() {
            match rustix::io::pwrite(&self.fd, &buf[done..], pos + done as u64) {
                // A short write is the kernel's answer (the file size
                // limit, a full disk): returned as it is. Written on, the
                // rest started at the limit and raised SIGXFSZ, which
                // killed a program the kernel had told of a short write.
                Ok(n) if n < buf.len() - done => {
                    done += n;
                    break;
                }
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) if done > 0 => {
                    let _ = e;
                    break;
                }
                Err(e) => return Err(errno(e)),
            }
        }
        if done > 0 {
            self.modified.store(true, Ordering::Relaxed);
        }
        let end = pos + done as u64;
        // A write of nothing does not grow the file, wherever it is (the
        // size once went to its offset, and reads there returned zeros
        // that are not in the file).
        if done > 0 && end > size {
            self.page.set_size(end);
        }
        Ok(done)
    }

    /// The open file's offset: the token page's, or the kernel's once a
    /// program that execs may move it behind the library (see
    /// `TokenPage::kernel_offset`). The caller holds the token.
    fn offset_now(&self) -> Result<u64, Errno> {
        if self.page.kernel_offset() {
            rustix::fs::seek(&self.fd, SeekFrom::Current(0)).map_err(errno)
        } else {
            Ok(self.page.offset())
        }
    }

    /// Moves the open file's offset (the kernel's too, where it rules).
    /// The caller holds the token.
    fn set_offset_now(&self, v: u64) -> Result<(), Errno> {
        self.page.set_offset(v);
        if self.page.kernel_offset() {
            rustix::fs::seek(&self.fd, SeekFrom::Start(v)).map_err(errno)?;
        }
        Ok(())
    }

    /// `EBADF` unless the open file was opened for reading, as the kernel
    /// answers before it looks at the buffers.
    pub fn check_readable(&self) -> Result<(), Errno> {
        if self.readable {
            Ok(())
        } else {
            Err(libc::EBADF)
        }
    }

    /// `EBADF` unless the open file was opened for writing.
    pub fn check_writable(&self) -> Result<(), Errno> {
        if self.writable {
            Ok(())
        } else {
            Err(libc::EBADF)
        }
    }

    /// `read(2)` at the shared offset.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize, Errno> {
        self.check_readable()?;
        let _t = self.token()?;
        let pos = self.offset_now()?;
        check_range(pos, buf.len())?;
        let n = self.copy_out(pos, buf)?;
        self.set_offset_now(pos + n as u64)?;
        Ok(n)
    }

    /// `pread(2)`: the offset is not used, but the token is held for the
    /// size.
    pub fn pread(&self, buf: &mut [u8], pos: i64) -> Result<usize, Errno> {
        // The kernel checks the offset before the descriptor's mode.
        if pos < 0 {
            return Err(libc::EINVAL);
        }
        self.check_readable()?;
        check_range(pos as u64, buf.len())?;
        // The token keeps the size from shrinking under the copy.
        let _t = self.token()?;
        self.copy_out(pos as u64, buf)
    }

    /// `read(2)` (at the shared offset: `pos` `None`) or `pread(2)` into
    /// no buffer (a null pointer with bytes to move), answered as the
    /// kernel answers it: its checks first (a negative offset, a
    /// descriptor not open for reading), then 0 where nothing is left to
    /// read from there (at or past the end) and `EFAULT` where bytes
    /// would be copied. The offset does not move.
    pub fn read_into_nothing(&self, pos: Option<i64>) -> Result<usize, Errno> {
        if matches!(pos, Some(p) if p < 0) {
            return Err(libc::EINVAL);
        }
        self.check_readable()?;
        let _t = self.token()?;
        let at = match pos {
            Some(p) => p as u64,
            None => self.offset_now()?,
        };
        let size = rustix::fs::fstat(&self.fd).map_err(errno)?.st_size as u64;
        if at >= size {
            Ok(0)
        } else {
            Err(libc::EFAULT)
        }
    }

    /// `write(2)` (`pos` `None`) or `pwrite(2)` from no buffer (a null
    /// pointer with bytes to move): the kernel's checks first (a negative
    /// offset, a descriptor not open for writing), then `EFAULT`.
    pub fn write_from_nothing(&self, pos: Option<i64>) -> Result<usize, Errno> {
        if matches!(pos, Some(p) if p < 0) {
            return Err(libc::EINVAL);
        }
        self.check_writable()?;
        Err(libc::EFAULT)
    }

    /// `write(2)` at the shared offset (at the end with `O_APPEND`, which
    /// the kernel places atomically, as other openers of the file may be
    /// appending too).
    pub fn write(&self, buf: &[u8]) -> Result<usize, Errno> {
        self.check_writable()?;
        if buf.is_empty() {
            // The kernel does nothing for a write of nothing, the offset
            // included (with O_APPEND the library took the offset from the
            // kernel's, which no append had moved, and left it stale).
            return Ok(0);
        }
        let _t = self.token()?;
        if self.appending() {
            let n = rustix::io::write(&self.fd, buf).map_err(errno)?;
            self.modified.store(true, Ordering::Relaxed);
            let end = rustix::fs::seek(&self.fd, SeekFrom::Current(0)).map_err(errno)?;
            self.page.set_offset(end);
            if end > self.page.size() {
                self.page.set_size(end);
            }
            return Ok(n);
        }
        let pos = self.offset_now()?;
        let n = self.copy_in(pos, buf)?;
        self.set_offset_now(pos + n as u64)?;
        Ok(n)
    }

    /// `pwrite(2)`.
    pub fn pwrite(&self, buf: &[u8], pos: i64) -> Result<usize, Errno> {
        if pos < 0 {
            return Err(libc::EINVAL);
        }
        self.check_writable()?;
        if self.appending() {
            // Linux appends a pwrite on an O_APPEND file: so does this.
            let _t = self.token()?;
            let n = rustix::io::pwrite(&self.fd, buf, pos as u64).map_err(errno)?;
            self.modified.store(true, Ordering::Relaxed);
            let size = rustix::fs::fstat(&self.fd).map_err(errno)?.st_size as u64;
            self.page.set_size(size);
            return Ok(n);
        }
        let _t = self.token()?;
        self.copy_in(pos as u64, buf)
    }

    /// `preadv2(2)` with flags: the kernel reads on the library's
    /// descriptor, at `pos` or at the open file's offset (which then moves
    /// on), so that it checks the flags and keeps their promises
    /// (`RWF_NOWAIT`'s `EAGAIN`, `EOPNOTSUPP` for a flag it does not know)
    /// as it does for any file. Without flags, reads go through the window.
    pub fn preadv2(&self, bufs: &mut [std::io::IoSliceMut<'_>], pos: Option<i64>, flags: u32) -> Result<usize, Errno> {
        if matches!(pos, Some(p) if p < 0) {
            return Err(libc::EINVAL);
        }
        self.check_readable()?;
        let rwf = rustix::io::ReadWriteFlags::from_bits_retain(flags);
        let _t = self.token()?;
        let at = match pos {
            Some(p) => p as u64,
            None => self.offset_now()?,
        };
        let n = rustix::io::preadv2(&self.fd, bufs, at, rwf).map_err(errno)?;
        if pos.is_none() && n > 0 {
            self.set_offset_now(at + n as u64)?;
        }
        Ok(n)
    }

    /// `pwritev2(2)` with flags, by the kernel on the library's descriptor
    /// as [`File::preadv2`]: `RWF_DSYNC`/`RWF_SYNC` make the data durable
    /// before the call returns, `RWF_APPEND` puts this write at the end
    /// whatever `pos` says, `RWF_NOAPPEND` puts it at `pos` on an
    /// `O_APPEND` file. Appending at the current offset (`pos` `None`) the
    /// kernel moves the open file's offset to the write's end, which
    /// becomes the shared offset; otherwise the write lands at `pos`, or
    /// at the shared offset, which then moves on.
    pub fn pwritev2(&self, bufs: &[std::io::IoSlice<'_>], pos: Option<i64>, flags: u32) -> Result<usize, Errno> {
        if matches!(pos, Some(p) if p < 0) {
            return Err(libc::EINVAL);
        }
        self.check_writable()?;
        let rwf = rustix::io::ReadWriteFlags::from_bits_retain(flags);
        let appends = flags & libc::RWF_APPEND as u32 != 0 || (self.appending() && flags & libc::RWF_NOAPPEND as u32 == 0);
        let _t = self.token()?;
        // `u64::MAX` is the kernel's "at the open file's offset", which an
        // append moves to the end of what it wrote; any other write here is
        // at an offset given, the token page's if not the caller's.
        let at = match pos {
            Some(p) => p as u64,
            None if appends => u64::MAX,
            None => self.offset_now()?,
        };
        let n = rustix::io::pwritev2(&self.fd, bufs, at, rwf).map_err(errno)?;
        self.modified.store(true, Ordering::Relaxed);
        if n == 0 {
            // Nothing written: no offset or size moved (and the kernel's
            // offset may be stale, the token page holding the offset).
            return Ok(0);
        }
        let end = if appends {
            // An append lands wherever the end was: ask the kernel.
            rustix::fs::fstat(&self.fd).map_err(errno)?.st_size as u64
        } else {
            at + n as u64
        };
        if pos.is_none() {
            // An append at the open file's offset left the kernel's there.
            let moved = if appends { rustix::fs::seek(&self.fd, SeekFrom::Current(0)).map_err(errno)? } else { end };
            self.set_offset_now(moved)?;
        }
        if end > self.page.size() {
            self.page.set_size(end);
        }
        Ok(n)
    }

    /// The program took a lock that belongs to the open file (`flock`,
    /// `F_OFD_SETLK`): closing it must not leave the lock with the
    /// server's descriptor.
    pub fn set_locked(&self) {
        self.locked.store(true, Ordering::Relaxed);
    }

    /// Follows `fcntl(F_SETFL)` on a descriptor of this open file: whether
    /// reads are the kernel's (`O_DIRECT`).
    pub fn set_direct(&self, on: bool) {
        self.direct.store(on, Ordering::Relaxed);
    }

    /// Follows `fcntl(F_SETFL)` on a descriptor of this open file: whether
    /// writes go to the end. Recorded in the token page too: the flag is
    /// the open file's, and another process sharing it (a parent, a child)
    /// wrote at the end, or did not, by its own idea of the flag.
    pub fn set_append(&self, on: bool) {
        self.append.store(on, Ordering::Relaxed);
        self.page.set_append(on);
    }

    /// Whether writes go to the end now.
    fn appending(&self) -> bool {
        self.page.append().unwrap_or_else(|| self.append.load(Ordering::Relaxed))
    }

    /// `ioctl(FIONREAD)`: the size less the shared offset, negative when
    /// the offset is past the end, as the kernel computes it.
    pub fn readable_bytes(&self) -> Result<i64, Errno> {
        let _t = self.token()?;
        let size = rustix::fs::fstat(&self.fd).map_err(errno)?.st_size;
        Ok(size.wrapping_sub(self.offset_now()? as i64))
    }

    /// `lseek(2)` on the shared offset.
    pub fn lseek(&self, off: i64, whence: i32) -> Result<i64, Errno> {
        let _t = self.token()?;
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => self.offset_now()? as i64,
            libc::SEEK_END => {
                let s = rustix::fs::fstat(&self.fd).map_err(errno)?.st_size;
                self.page.set_size(s as u64);
                s
            }
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let how = if whence == libc::SEEK_DATA { SeekFrom::Data(off as u64) } else { SeekFrom::Hole(off as u64) };
                let r = rustix::fs::seek(&self.fd, how).map_err(errno)?;
                self.page.set_offset(r);
                return Ok(r as i64);
            }
            _ => return Err(libc::EINVAL),
        };
        let new = base.checked_add(off).filter(|v| *v >= 0).ok_or(libc::EINVAL)?;
        if new > SEEK_CHECKED_FROM && !self.page.kernel_offset() {
            // Past what every file system allows, the kernel's answer is
            // the file system's limit (EINVAL beyond ext4's 16 TiB, FAT's
            // 4 GiB): asked of it on the library's descriptor, whose own
            // offset nobody uses while the token page holds the offset.
            rustix::fs::seek(&self.fd, SeekFrom::Start(new as u64)).map_err(errno)?;
        }
        self.set_offset_now(new as u64)?;
        Ok(new)
    }

    /// `ftruncate(2)`, by the server.
    pub fn truncate(&self, len: i64) -> Result<(), Errno> {
        if len < 0 {
            return Err(libc::EINVAL);
        }
        // Not under the token: the server calls back the token of every
        // open file of this file (this one too) and sets their sizes.
        let e = state::emul().ok_or(libc::EIO)?;
        e.client.truncate(self.id, len as u64)?;
        self.modified.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// `fsync(2)`, by the server.
    pub fn fsync(&self) -> Result<(), Errno> {
        let e = state::emul().ok_or(libc::EIO)?;
        e.client.fsync(self.id)
    }

    /// Sets the kernel's offset of the open file to the open file's, for
    /// what shows it (`/proc/self/fdinfo/N`), without making it the one
    /// from now on: while the token page holds the offset nobody uses the
    /// kernel's.
    pub fn show_offset_to_kernel(&self) {
        let Ok(_t) = self.token() else { return };
        if !self.page.kernel_offset() {
            let _ = rustix::fs::seek(&self.fd, SeekFrom::Start(self.page.offset()));
        }
    }

    /// Before `exec` with this open file inherited: sets the kernel's
    /// offset to the open file's and makes the kernel's the one from now
    /// on, for every process sharing the open file, since the new program
    /// moves it without the library (it starts with an empty table).
    ///
    /// Without the token (the server cannot be reached: a child that
    /// closed the library's descriptors before exec, or a server gone) it
    /// is done all the same: the offset in the token page is the last one
    /// any holder left, and a stale kernel offset is what the new program
    /// would use otherwise.
    pub fn hand_offset_to_kernel(&self) {
        let _t = self.token().ok();
        if !self.page.kernel_offset() {
            if rustix::fs::seek(&self.fd, SeekFrom::Start(self.page.offset())).is_err() {
                return;
            }
            self.page.hand_offset_to_kernel();
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        // Unmapped, closed and told to the server whole (see
        // `state::enter`); nested in the caller's hold, this costs nothing.
        let _held = ferry::emulation::hold_signals();
        let mut w = self.window.lock();
        self.unmap(&mut w);
        drop(w);
        self.page.give_up(state::pid());
        // The hold first, then the server closes its descriptor if this
        // was the last hold: a native close leaves nothing open for
        // writing or locked, so a program may exec the file it just wrote
        // or lock it afresh at once (the server used to close it when its
        // loop came to the hold's end, and an exec right after found it
        // busy). A file opened only for reading and never locked is let
        // go at the server's pace: a round trip on every close cost 40%
        // more per open and close (400 against 240 µs here).
        drop(self.hold.take());
        if self.writable || self.locked.load(Ordering::Relaxed) {
            if let Some(e) = state::emul() {
                let _ = e.client.close(self.id);
            }
        }
    }
}
