//! The C functions this library exports in place of the C library's: each
//! serves a descriptor or a name the emulation owns and passes everything
//! else to the C library's own function untouched.
//!
//! # Safety
//! These are C entry points: pointers come from the calling program with
//! the C library's contracts (valid strings, buffers of the stated length,
//! arrays of `iovec`), which the C library itself would rely on. The
//! library's own work on them is limited to building slices of exactly the
//! stated lengths for the duration of the call.

#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use ferry::emulation::{Opened, StatInfo};
use libc::{c_char, c_int, c_uint, c_ulong, c_void, mode_t, off_t, size_t, ssize_t, FILE};

use crate::file::{Errno, File};
use crate::real;
use crate::state::{self, emul, enter};

pub(crate) fn set_errno(e: Errno) {
    // SAFETY: the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

fn ret_size(r: Result<usize, Errno>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn ret_int(r: Result<(), Errno>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The emulated file behind `fd`, unless this thread is already inside the
/// library.
fn emulated(fd: c_int) -> Option<(Arc<File>, state::Busy)> {
    let f = state::get(fd)?;
    let b = enter()?;
    Some((f, b))
}

/// [`emulated`], for a call that only copies (`state::enter_for_copy`).
fn emulated_for_copy(fd: c_int) -> Option<(Arc<File>, state::Busy)> {
    let f = state::get(fd)?;
    let b = state::enter_for_copy()?;
    Some((f, b))
}

unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        None
    } else {
        // SAFETY: a C string from the caller (module safety).
        Some(unsafe { CStr::from_ptr(p) }.to_bytes())
    }
}

fn current_umask() -> u32 {
    // SAFETY: umask only swaps an integer; set back at once.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    }
}

/// The descriptor a name of the process's own descriptor table stands for:
/// `/proc/self/fd/N`, `/proc/thread-self/fd/N`, `/proc/PID/fd/N` of this
/// process, `/dev/fd/N`, and `/dev/stdin`, `/dev/stdout`, `/dev/stderr`.
fn fd_link(name: &[u8]) -> Option<c_int> {
    match name {
        b"/dev/stdin" => return Some(0),
        b"/dev/stdout" => return Some(1),
        b"/dev/stderr" => return Some(2),
        _ => {}
    }
    if let Some(n) = name.strip_prefix(b"/dev/fd/") {
        return fd_number(n);
    }
    own_proc_entry(name, b"/fd/")
}

/// A descriptor number spelled in decimal digits.
fn fd_number(digits: &[u8]) -> Option<c_int> {
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The descriptor `name` stands for in one of this process's `/proc`
/// directories of descriptors (`dir` being `/fd/` or `/fdinfo/`): under
/// `/proc/self`, `/proc/thread-self` or `/proc/PID` of this process.
fn own_proc_entry(name: &[u8], dir: &[u8]) -> Option<c_int> {
    let rest = name.strip_prefix(b"/proc/")?;
    let slash = rest.iter().position(|&c| c == b'/')?;
    let (who, rest) = rest.split_at(slash);
    // Compared as a number: a string made of the pid would allocate.
    let own = who == b"self" || who == b"thread-self" || fd_number(who) == Some(state::pid());
    if !own {
        return None;
    }
    fd_number(rest.strip_prefix(dir)?)
}

/// A file's identity: device and inode.
type Identity = (u64, u64);

fn identity_of(fd: std::os::fd::BorrowedFd<'_>) -> Option<Identity> {
    rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

/// The identity of what the server opened.
fn opened_identity(o: &Opened) -> Option<Identity> {
    identity_of(match o {
        Opened::Dir(dir) => dir.as_fd(),
        Opened::File(f) => f.file.as_fd(),
    })
}

/// Where reopening descriptor `n` by its `/proc` name leads, as a name
/// the server can resolve: the path the kernel gives the descriptor's
/// file, if that path names the same file now (not for a pipe, a socket,
/// a file deleted or renamed over since), with the file's identity.
fn reopen_target(n: c_int) -> Option<(String, Identity)> {
    let link = rustix::fs::readlink(format!("/proc/self/fd/{n}"), Vec::new()).ok()?;
    let link = link.into_string().ok()?;
    if !link.starts_with('/') {
        return None;
    }
    // SAFETY: a descriptor number the program named; borrowed for one
    // fstat, which fails cleanly if it is not open.
    let id = identity_of(unsafe { std::os::fd::BorrowedFd::borrow_raw(n) })?;
    let by_name = rustix::fs::stat(link.as_str()).ok()?;
    ((by_name.st_dev, by_name.st_ino) == id).then_some((link, id))
}

/// Opens `path` (relative to `dirfd`) through the server when it is under
/// the served root: `None` when it is not (the caller passes through).
///
/// A descriptor's own name (`/proc/self/fd/N`, `/dev/fd/N`, …; what
/// `freopen(NULL, …)` reopens a stream by) whose file is under the root
/// is opened through the server by the file's path, so the new descriptor
/// is served like the first (passed to the kernel, it was not, and a
/// truncation through it left the other open files of the file reading
/// bytes past the new end). It stays the kernel's when the path no longer
/// names that file (then, or after the server's open), and when the
/// server refuses: the kernel reopens by the descriptor itself.
fn emul_open(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> Option<c_int> {
    let _b = state::enter_for_copy()?;
    let e = emul()?;
    // Held from where the name may lead beneath the root (`state::beneath`).
    let mut signals = None;
    // A child of a raw `clone` sharing this memory has descriptors of its
    // own, which the table (its parent's) must not record: its opens are
    // the kernel's. (Recorded there, the child's file stood for whatever
    // the parent had at that number later, and a pipe the parent made
    // was read as the child's file.)
    // `O_TMPFILE` holds `O_DIRECTORY`'s bit: only both make a nameless
    // file (tested as one mask, every open of a directory with
    // `O_DIRECTORY`, as `find` and `os.fwalk` open them, was the kernel's).
    // `O_CREAT` with `O_DIRECTORY` is the kernel's to answer too (`EINVAL`
    // since Linux 6.4, other answers before).
    let directory = flags & libc::O_DIRECTORY != 0;
    if flags & libc::O_PATH != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE || (directory && flags & libc::O_CREAT != 0) || state::foreign() {
        return None;
    }
    // SAFETY: the caller's path (module safety).
    let name = unsafe { cstr(path) }?;
    // The kernel shows its own offset of the descriptor's open file
    // there, which the library does not move (the token page holds the
    // offset): it is set first, so the file shows the program's (`pos:`
    // said 0 after a read of 17 bytes). The open itself is the kernel's.
    if let Some(n) = own_proc_entry(name, b"/fdinfo/") {
        if let Some(f) = state::get(n) {
            f.show_offset_to_kernel();
        }
        return None;
    }
    let (rel, reopens) = match fd_link(name) {
        Some(n) => {
            signals = Some(ferry::emulation::hold_signals());
            let (target, id) = reopen_target(n)?;
            (state::beneath(e, libc::AT_FDCWD, target.as_bytes(), &mut signals)?, Some(id))
        }
        None => (state::beneath(e, dirfd, name, &mut signals)?, None),
    };
    let mode = if flags & libc::O_CREAT != 0 { ferry::emulation::creation_mode(mode, current_umask()) } else { 0 };
    let cloexec = flags & libc::O_CLOEXEC != 0;
    // The program's descriptor is taken first, as the kernel takes it
    // before it looks at the name: out of descriptors, the open fails
    // with EMFILE before the server creates or truncates anything (it
    // used to create the file and fail with EIO), and the number is the
    // one the kernel would have given, whatever the library's own calls
    // hold meanwhile.
    let slot = match reserve_slot(e, flags) {
        Ok(Some(fd)) => fd,
        // The program's number is free but not the library's own: the
        // kernel opens the file, not served, as natively.
        Ok(None) => return None,
        Err(err) => {
            set_errno(err);
            return Some(-1);
        }
    };
    // The placeholder goes just before the call, so that the file's
    // descriptor arrives at that number, the lowest free, and is the
    // program's as it came: moving it would close a descriptor of the
    // file, and closing any drops the process's POSIX record locks on it
    // (a second open of a file the program had locked with `fcntl` let
    // another process take the lock; SQLite's second connection to a
    // database did, inside the first's transaction). Not when the
    // library's own descriptors cannot go above the program's (a limit
    // lowered since they were placed): one made during the call (a
    // channel) would take the number, and the placeholder keeps it.
    let early = above_the_program();
    let mut held = Some(slot);
    let release = |held: &mut Option<c_int>| {
        if let Some(slot) = held.take() {
            // SAFETY: the placeholder this call made; nobody else knows it.
            unsafe { real::close()(slot) };
        }
    };
    if early {
        release(&mut held);
    }
    let place = |ours: c_int, held: &mut Option<c_int>| -> c_int {
        let mode = if cloexec { libc::O_CLOEXEC } else { 0 };
        let fd = match held.take() {
            // SAFETY: replaces the placeholder with a duplicate of our own
            // descriptor, at the number the program gets.
            Some(slot) => unsafe { real::dup3()(ours, slot, mode) },
            // SAFETY: a duplicate of our own descriptor at the lowest
            // free number, the program's.
            None => unsafe { real::fcntl()(ours, if cloexec { libc::F_DUPFD_CLOEXEC } else { libc::F_DUPFD }, 0) },
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            release(held);
            set_errno(err);
            return -1;
        }
        state::take(fd);
        fd
    };
    Some(match e.client.open(&rel, flags, mode) {
        // The name leads out of the served tree (a symbolic link to
        // elsewhere): the kernel opens it, as it would without the library.
        Err(libc::EXDEV) => {
            release(&mut held);
            return None;
        }
        // A reopen by a descriptor's name the server refuses, or that
        // reached another file: the kernel's, by the descriptor itself.
        ref r if reopens.is_some() && r.as_ref().ok().and_then(opened_identity) != reopens => {
            release(&mut held);
            return None;
        }
        // The library ran out of descriptors for the open file's own (the
        // program's number is held for it): the kernel's open, as above,
        // unless it was to make the file and the server may have made it.
        Err(libc::EMFILE) if flags & (libc::O_CREAT | libc::O_EXCL) != libc::O_CREAT | libc::O_EXCL => {
            release(&mut held);
            return None;
        }
        // The server holds as many open files of this user as it allows
        // one user (it refuses before it opens or makes anything): the
        // kernel's open, not served, as natively. The program's limit is
        // not the server's: a program holding some 160 files under a
        // server limited to 1024 descriptors got `ENFILE` at its next open
        // where natively it opened 600.
        Err(libc::ENFILE) => {
            release(&mut held);
            return None;
        }
        Err(err) => {
            release(&mut held);
            set_errno(err);
            -1
        }
        // Where the placeholder was, as a file's (no descriptor of the
        // directory closed, so the process keeps its record locks on it),
        // unless another thread took the number meanwhile.
        Ok(Opened::Dir(dir)) if early && dir.as_raw_fd() == slot => {
            let fd = dir.into_raw_fd();
            // SAFETY: the descriptor the directory came on, now the
            // program's; it came close-on-exec.
            unsafe { real::fcntl()(fd, libc::F_SETFD, if cloexec { libc::FD_CLOEXEC as c_ulong } else { 0 }) };
            state::take(fd);
            fd
        }
        Ok(Opened::Dir(dir)) => place(dir.as_raw_fd(), &mut held),
        Ok(Opened::File(mut o)) => {
            let received = o.received.take();
            let file = File::new(o, flags, e.window);
            let fd = match received {
                // Where the placeholder was, unless another thread took
                // the number meanwhile: else as before, at the cost of
                // the locks.
                Some(fd) if early && fd.as_raw_fd() == slot => {
                    let fd = fd.into_raw_fd();
                    // SAFETY: the descriptor the file came on, now the
                    // program's; it came close-on-exec.
                    unsafe { real::fcntl()(fd, libc::F_SETFD, if cloexec { libc::FD_CLOEXEC as c_ulong } else { 0 }) };
                    state::take(fd);
                    fd
                }
                _ => place(file.fd().as_raw_fd(), &mut held),
            };
            if fd < 0 {
                return Some(-1);
            }
            if flags & libc::O_NONBLOCK == 0 {
                // The server opens with O_NONBLOCK against special files;
                // the program asked for a plain descriptor.
                // SAFETY: flag changes on our own descriptor.
                unsafe {
                    let fl = real::fcntl()(fd, libc::F_GETFL, 0);
                    real::fcntl()(fd, libc::F_SETFL, (fl & !libc::O_NONBLOCK) as c_ulong);
                }
            }
            state::set(fd, Arc::new(file));
            fd
        }
    })
}

/// Whether the library's own descriptors go above the program's now:
/// the limit on descriptors still leaves room for them there.
fn above_the_program() -> bool {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: fills a local structure.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    r == 0 && lim.rlim_cur > ferry::emulation::client::high_fd() as libc::rlim_t + OPEN_NEEDS as libc::rlim_t
}

/// Descriptors an open through the server holds at once besides the
/// program's: the reply's envelope and hold, the envelope's file and token
/// page, and the library's own copies of the file and the hold.
const OPEN_NEEDS: usize = 6;

/// The descriptors through which the program set POSIX record locks
/// (`fcntl` `F_SETLK`, `F_SETLKW`, `lockf`), -1 in a free slot: the
/// process's record locks on a file go when it closes any descriptor of
/// that file, so [`let_a_served_file_go`] lets no open file of theirs go
/// (closing the library's copy of it would drop the locks). A fixed
/// table, which a signal handler's `fcntl` may fill without allocating.
static LOCKED_THROUGH: [AtomicI32; 64] = [const { AtomicI32::new(-1) }; 64];

/// Set when [`LOCKED_THROUGH`] had no slot left: no open file is let go
/// from then on.
static LOCKED_THROUGH_FULL: AtomicBool = AtomicBool::new(false);

/// Notes that the program set (or cleared) a POSIX record lock through
/// descriptor `fd`.
fn record_locks_set(fd: c_int) {
    for slot in &LOCKED_THROUGH {
        match slot.load(Ordering::Relaxed) {
            v if v == fd => return,
            -1 if slot.compare_exchange(-1, fd, Ordering::Relaxed, Ordering::Relaxed).is_ok() => return,
            _ => {}
        }
    }
    LOCKED_THROUGH_FULL.store(true, Ordering::Relaxed);
}

/// The files (device and inode) the program may hold POSIX record locks
/// on: those of the descriptors in [`LOCKED_THROUGH`]. A slot whose
/// descriptor is closed is freed (the close dropped the locks set through
/// it); one whose number was taken again stands for its new file, which
/// only keeps that file served. `None` when the table was ever full.
fn files_maybe_locked() -> Option<Vec<(u64, u64)>> {
    if LOCKED_THROUGH_FULL.load(Ordering::Relaxed) {
        return None;
    }
    let mut files = Vec::new();
    for slot in &LOCKED_THROUGH {
        let fd = slot.load(Ordering::Relaxed);
        if fd < 0 {
            continue;
        }
        // SAFETY: a descriptor number only, borrowed for one fstat.
        match rustix::fs::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }) {
            Ok(st) => files.push((st.st_dev, st.st_ino)),
            Err(rustix::io::Errno::BADF) => {
                let _ = slot.compare_exchange(fd, -1, Ordering::Relaxed, Ordering::Relaxed);
            }
            Err(_) => return None,
        }
    }
    Some(files)
}

/// Frees the library's two descriptors of one served open file (its own
/// copy and the hold) for a program out of descriptors: the open file's
/// offset is handed to the kernel, as before `exec` (every process
/// sharing the open file reads, writes and seeks at the kernel's offset
/// from then on), and the program's descriptors of it become plain
/// kernel descriptors, no longer served. Natively a program's files take
/// one descriptor each; with two more for each served file, a program
/// under a limit of 64 opened 22 files where natively 60. False when
/// there is none to let go but files the program may hold record locks
/// on (see [`LOCKED_THROUGH`]), and in a child of a raw `clone` (its
/// parent's table).
///
/// Called with the library entered on this thread (its own calls pass
/// through).
fn let_a_served_file_go() -> bool {
    if state::foreign() {
        return false;
    }
    // The table changes, and the file is closed and told to the server,
    // whole (see `state::enter`).
    let _held = ferry::emulation::hold_signals();
    let Some(locked) = files_maybe_locked() else { return false };
    let all = state::all();
    let unlocked = |f: &Arc<File>| rustix::fs::fstat(f.fd()).is_ok_and(|st| !locked.contains(&(st.st_dev, st.st_ino)));
    let Some((_, file)) = all.iter().find(|(_, f)| unlocked(f)) else { return false };
    file.hand_offset_to_kernel();
    for (fd, f) in &all {
        if Arc::ptr_eq(f, file) {
            drop(state::take(*fd));
        }
    }
    // The last reference, unless another thread is in a call on the file
    // (it goes when that call ends): its window unmapped, its descriptors
    // closed, the server told.
    drop(all);
    true
}

/// Runs `make`, a call of the C library's own that makes a descriptor,
/// again after letting a served file go while it fails with `EMFILE`
/// (the kernel refuses before it creates or truncates anything, so the
/// call may be made again); `failed` tells a failure from its answer.
fn freeing_descriptors<T>(failed: impl Fn(&T) -> bool, mut make: impl FnMut() -> T) -> T {
    loop {
        let made = make();
        if !failed(&made) || std::io::Error::last_os_error().raw_os_error() != Some(libc::EMFILE) {
            return made;
        }
        let Some(_b) = enter() else { return made };
        if !let_a_served_file_go() {
            drop(_b);
            set_errno(libc::EMFILE);
            return made;
        }
    }
}

/// [`freeing_descriptors`] for a call that answers a descriptor or -1.
fn freeing_fds(make: impl FnMut() -> c_int) -> c_int {
    freeing_descriptors(|fd: &c_int| *fd < 0, make)
}

/// Takes the lowest free descriptor for the program's open (a placeholder,
/// replaced by the open file), and, for an open that creates or truncates,
/// checks that the library's own descriptors for it are there too, so that
/// a program out of descriptors gets `EMFILE` with nothing done. `None`
/// when the program's descriptor is there but the library's are not: the
/// open is then the kernel's, not served, and succeeds as natively (it
/// failed with `EMFILE`: a served open file takes three descriptors, and
/// under `ulimit -n 16` a program opened 2 files where natively 12).
fn reserve_slot(e: &state::Emul, flags: c_int) -> Result<Option<c_int>, Errno> {
    let server = e.client.right().as_fd();
    let dup = || {
        // SAFETY: a close-on-exec duplicate of the library's own descriptor.
        let fd = unsafe { real::fcntl()(server.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE))
        } else {
            Ok(fd)
        }
    };
    let slot = loop {
        match dup() {
            Ok(fd) => break fd,
            // The program's own number is not there while the library holds
            // two of each served file's: one of those goes.
            Err(libc::EMFILE) if let_a_served_file_go() => {}
            Err(err) => return Err(err),
        }
    };
    if flags & (libc::O_CREAT | libc::O_TRUNC) != 0 {
        let mut spare = Vec::with_capacity(OPEN_NEEDS);
        let mut short = None;
        for _ in 0..OPEN_NEEDS {
            match dup() {
                Ok(fd) => spare.push(fd),
                Err(err) => {
                    short = Some(err);
                    break;
                }
            }
        }
        for fd in spare {
            // SAFETY: a duplicate made just above.
            unsafe { real::close()(fd) };
        }
        if short.is_some() {
            // SAFETY: the placeholder made above.
            unsafe { real::close()(slot) };
            return Ok(None);
        }
    }
    Ok(Some(slot))
}

fn passed(fd: c_int) -> c_int {
    // A number the kernel hands out again is no longer emulated (it was
    // closed behind the library's back).
    if fd >= 0 {
        state::take(fd);
    }
    fd
}

/// `longjmp`: a signal handler that leaves a call the library was serving
/// (see `state::jumping`).
#[no_mangle]
pub unsafe extern "C" fn longjmp(env: *mut c_void, val: c_int) -> ! {
    state::jumping();
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function, which does not return.
    unsafe { real::longjmp()(env, val) };
    std::process::abort()
}
/// `_longjmp`.
#[no_mangle]
pub unsafe extern "C" fn _longjmp(env: *mut c_void, val: c_int) -> ! {
    state::jumping();
    // SAFETY: as for `longjmp`.
    unsafe { real::_longjmp()(env, val) };
    std::process::abort()
}
/// `siglongjmp`.
#[no_mangle]
pub unsafe extern "C" fn siglongjmp(env: *mut c_void, val: c_int) -> ! {
    state::jumping();
    // SAFETY: as for `longjmp`.
    unsafe { real::siglongjmp()(env, val) };
    std::process::abort()
}
/// The fortified `longjmp`.
#[no_mangle]
pub unsafe extern "C" fn __longjmp_chk(env: *mut c_void, val: c_int) -> ! {
    state::jumping();
    // SAFETY: as for `longjmp`.
    unsafe { real::__longjmp_chk()(env, val) };
    std::process::abort()
}

/// `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(libc::AT_FDCWD, path, flags, mode).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::open()(path, flags, mode) })))
}
/// `open64(2)`.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(libc::AT_FDCWD, path, flags, mode).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::open64()(path, flags, mode) })))
}
/// The fortified `open`.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(libc::AT_FDCWD, path, flags, 0).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::__open_2()(path, flags) })))
}
/// The fortified `open64`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(libc::AT_FDCWD, path, flags, 0).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::__open64_2()(path, flags) })))
}
/// `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(dirfd, path, flags, mode).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::openat()(dirfd, path, flags, mode) })))
}
/// `openat64(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(dirfd, path, flags, mode).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::openat64()(dirfd, path, flags, mode) })))
}
/// The fortified `openat`.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(dirfd, path, flags, 0).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::__openat_2()(dirfd, path, flags) })))
}
/// The fortified `openat64`.
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(dirfd, path, flags, 0).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::__openat64_2()(dirfd, path, flags) })))
}
/// `creat(2)`.
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(libc::AT_FDCWD, path, flags, mode).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::creat()(path, mode) })))
}
/// `creat64(2)`.
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_open(libc::AT_FDCWD, path, flags, mode).unwrap_or_else(|| passed(freeing_fds(|| unsafe { real::creat64()(path, mode) })))
}

// ---- stdio: FILE objects over emulated descriptors -------------------------

/// The functions of a `fopencookie` stream.
#[repr(C)]
pub(crate) struct CookieIo {
    pub(crate) read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    pub(crate) write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    pub(crate) seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    pub(crate) close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn __fpending(f: *mut FILE) -> size_t;
    pub(crate) fn fopencookie(cookie: *mut c_void, mode: *const c_char, funcs: CookieIo) -> *mut FILE;
}

/// A library stream's cookie: the descriptor its reads, writes and seeks
/// go to, and the buffer the stream was given, owned here because the C
/// library does not free a buffer handed to `setvbuf`. Made by
/// [`cookie_file`], freed by [`cookie_close`] when the stream closes.
struct Cookie {
    fd: c_int,
    buf: Vec<u8>,
    /// The stream made with this cookie (its `FILE`), once made.
    stream: *mut FILE,
}

/// The descriptor of the cookie `c`.
///
/// # Safety
/// `c` is a cookie [`cookie_file`] made and [`cookie_close`] has not freed.
unsafe fn cookie_fd(c: *mut c_void) -> c_int {
    // SAFETY: the caller's promise: a live `Cookie`.
    unsafe { (*c.cast::<Cookie>()).fd }
}

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: the stream's live cookie; the C library hands a buffer of n bytes.
    unsafe { read(cookie_fd(c), buf.cast(), n) }
}
unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: the stream's live cookie; the C library hands a buffer of n bytes.
    unsafe { write(cookie_fd(c), buf.cast(), n) }
}
unsafe extern "C" fn cookie_seek(c: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    // SAFETY: the stream's live cookie; the C library hands a valid offset
    // to read and update.
    unsafe {
        let r = lseek(cookie_fd(c), *off, whence);
        if r < 0 {
            return -1;
        }
        *off = r;
    }
    0
}
unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    // SAFETY: the C library calls this once, as the stream closes, after
    // its last use of the stream's buffer; the cookie is the `Box`
    // `cookie_file` leaked, and the descriptor is the stream's own.
    unsafe {
        let cookie = Box::from_raw(c.cast::<Cookie>());
        // The stream `fwscanf` kept for it goes with it.
        crate::wide::forget_scanner(cookie.stream);
        crate::wide::forget_orientation(cookie.stream);
        close(cookie.fd)
    }
}

/// Where glibc's `struct _IO_FILE` keeps `_fileno` on 64-bit Linux.
const FILENO_OFFSET: usize = 112;

/// Whether the running C library keeps a `FILE`'s descriptor at
/// [`FILENO_OFFSET`]: checked on a real `FILE` before the library ever
/// writes there.
pub(crate) fn check_fileno_patch() -> bool {
    if cfg!(not(all(target_pointer_width = "64", target_env = "gnu"))) {
        return false;
    }
    // SAFETY: opens and closes a FILE of the C library's own, reading one
    // int inside it at an offset within the structure's public layout.
    unsafe {
        let f = real::fopen()(c"/dev/null".as_ptr(), c"r".as_ptr());
        if f.is_null() {
            return false;
        }
        let ok = *(f as *const u8).add(FILENO_OFFSET).cast::<c_int>() == real::fileno()(f);
        real::fclose()(f);
        ok
    }
}

/// Where glibc's `struct _IO_FILE` keeps its six read and write pointers
/// (`_IO_read_ptr` to `_IO_write_end`, one after another) on 64-bit
/// Linux; `_IO_buf_base` follows them.
const IO_POINTERS_OFFSET: usize = 8;

/// Whether the running C library keeps a `FILE`'s read and write
/// pointers and then its buffer's start at [`IO_POINTERS_OFFSET`]:
/// checked once on a stream of its own given a buffer (which puts all
/// seven at the buffer's start) before the library ever writes there.
fn check_io_pointers() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        if cfg!(not(all(target_pointer_width = "64", target_env = "gnu"))) {
            return false;
        }
        let mut buf = [0u8; 64];
        // SAFETY: a stream of the C library's own, given a buffer that
        // outlives it, seven pointer-sized fields read inside the
        // structure's public layout, closed (the buffer is the caller's,
        // so the C library does not free it).
        unsafe {
            let f = real::fopen()(c"/dev/null".as_ptr(), c"r".as_ptr());
            if f.is_null() {
                return false;
            }
            let at = buf.as_mut_ptr();
            let ok = libc::setvbuf(f, at.cast(), libc::_IOFBF, buf.len()) == 0
                && (0..7).all(|i| *(f as *const u8).add(IO_POINTERS_OFFSET + 8 * i).cast::<usize>() == at as usize);
            real::fclose()(f);
            ok
        }
    })
}

/// Puts a stream of the library's own that holds no bytes read ahead or
/// unwritten (just made, or just reopened) back to having neither read
/// nor written yet, as a stream the C library opens starts: its read and
/// write pointers empty, its buffer kept. Giving it its buffer set them
/// to the buffer's start, so `__freading` said 1 on a fresh `"r+"`,
/// `"w+"` or `"a+"` stream where natively 0.
fn as_never_used(f: *mut FILE) {
    if !check_io_pointers() {
        return;
    }
    // SAFETY: checked layout; a live stream whose pointers all stand at
    // its buffer's start (nothing read ahead, nothing unwritten), which
    // the C library treats as a stream that has not been used yet when
    // they are null (it reads or writes its buffer from the start then).
    unsafe {
        for i in 0..6 {
            *(f as *mut u8).add(IO_POINTERS_OFFSET + 8 * i).cast::<usize>() = 0;
        }
    }
}

/// The buffer size the C library gives a stream over a file of block
/// size `blksize`: the block size when it is below `BUFSIZ`, else `BUFSIZ`.
/// (A cookie stream cannot tell its file's block size and takes `BUFSIZ`,
/// so a reader and a writer of one file saw each other's bytes at other
/// moments than natively.)
fn stream_buffer_size(blksize: usize) -> usize {
    let bufsiz = libc::BUFSIZ as usize;
    if blksize > 0 && blksize < bufsiz {
        blksize
    } else {
        bufsiz
    }
}

/// A `FILE` whose reads, writes, seeks and close go through the emulated
/// descriptor `fd` (and which `fileno` reports as `fd`), with a buffer of
/// the size the C library gives a stream over the same file.
fn cookie_file(fd: c_int, mode: StdioMode) -> *mut FILE {
    let funcs = CookieIo { read: Some(cookie_read), write: Some(cookie_write), seek: Some(cookie_seek), close: Some(cookie_close) };
    // SAFETY: the caller's open descriptor, borrowed for one fstat.
    let st = rustix::fs::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) });
    let size = stream_buffer_size(st.map_or(0, |st| st.st_blksize.try_into().unwrap_or(0)));
    let cookie = Box::into_raw(Box::new(Cookie { fd, buf: vec![0u8; size], stream: std::ptr::null_mut() }));
    // SAFETY: the cookie lives until `cookie_close` (or just below if the
    // stream is not made); the mode is a static string.
    let f = unsafe { fopencookie(cookie.cast(), mode.cookie_mode().as_ptr(), funcs) };
    if f.is_null() {
        // SAFETY: the Box leaked above, which no stream holds.
        drop(unsafe { Box::from_raw(cookie) });
        return f;
    }
    // SAFETY: a fresh stream that has done no I/O, given a buffer the
    // cookie owns (alive as long as the stream, never moved: the Vec is
    // not touched again until `cookie_close` drops it); the cookie is
    // still only ours until the stream's first call.
    unsafe {
        (*cookie).stream = f;
        let buf = (*cookie).buf.as_mut_ptr();
        libc::setvbuf(f, buf.cast(), libc::_IOFBF, size);
    }
    if emul().is_some_and(|e| e.fileno_patch) {
        // SAFETY: checked layout (check_fileno_patch); the field is an int
        // the C library leaves at -1 for cookie streams and uses only to
        // answer `fileno`.
        unsafe { *(f as *mut u8).add(FILENO_OFFSET).cast::<c_int>() = fd };
    }
    // No orientation until its first use, as a stream the C library opens
    // (a cookie stream starts as a byte stream: `fwide` said -1, and wide
    // output after narrow output went into the file).
    crate::wide::unorient(f);
    as_never_used(f);
    f
}

/// A stdio mode string as the C library reads it: its first letter (`r`,
/// `w` or `a`) and the letters it looks at after it. The library's
/// streams are cookie streams, which the C library makes from a mode it
/// reads only as far as a `+` right after the first letter (or after a
/// `b`), so they are made from [`StdioMode::cookie_mode`], never the
/// caller's string: `fopen(name, "rt+")` opened the file for reading and
/// writing and gave a stream that could only read, and the mode's other
/// letters were looked for in the whole string.
#[derive(Clone, Copy)]
struct StdioMode {
    /// `r`, `w` or `a`.
    first: u8,
    /// Reading and writing (`+`).
    plus: bool,
    /// `O_EXCL` (`x`).
    excl: bool,
    /// `O_CLOEXEC` (`e`).
    cloexec: bool,
}

impl StdioMode {
    /// `mode` as `fopen` and `freopen` read it: after the first letter at
    /// most six letters, up to a `,` (where `ccs=` begins); `None` (the C
    /// library's `EINVAL`) when the first letter is not `r`, `w` or `a`.
    fn of_fopen(mode: &[u8]) -> Option<StdioMode> {
        let mut m = StdioMode::first(mode)?;
        for &c in mode.iter().skip(1).take(6) {
            match c {
                b',' => break,
                b'+' => m.plus = true,
                b'x' => m.excl = true,
                b'e' => m.cloexec = true,
                _ => {}
            }
        }
        Some(m)
    }

    /// `mode` as `fdopen` reads it: after the first letter at most four
    /// letters, up to a `+`.
    fn of_fdopen(mode: &[u8]) -> Option<StdioMode> {
        let mut m = StdioMode::first(mode)?;
        m.plus = mode.iter().skip(1).take(4).any(|&c| c == b'+');
        Some(m)
    }

    /// Whether `mode` names a coded character set (`",ccs="` after its
    /// first letter, where the C library looks for it): the stream is then
    /// a wide one that converts to and from that set, which only the C
    /// library's own streams can be (a cookie stream is byte-only).
    fn names_a_charset(mode: &[u8]) -> bool {
        mode.get(1..).is_some_and(|rest| rest.windows(5).any(|w| w == b",ccs="))
    }

    /// The mode's first letter, with nothing after it yet.
    fn first(mode: &[u8]) -> Option<StdioMode> {
        let first = *mode.first().filter(|c| matches!(c, b'r' | b'w' | b'a'))?;
        Some(StdioMode { first, plus: false, excl: false, cloexec: false })
    }

    /// The `open` flags the C library opens a file with for this mode.
    fn flags(self) -> c_int {
        let access = if self.plus {
            libc::O_RDWR
        } else if self.first == b'r' {
            libc::O_RDONLY
        } else {
            libc::O_WRONLY
        };
        let mut f = access
            | match self.first {
                b'w' => libc::O_CREAT | libc::O_TRUNC,
                b'a' => libc::O_CREAT | libc::O_APPEND,
                _ => 0,
            };
        if self.excl {
            f |= libc::O_EXCL;
        }
        if self.cloexec {
            f |= libc::O_CLOEXEC;
        }
        f
    }

    /// Whether the stream only appends (`a` without `+`).
    fn append_only(self) -> bool {
        self.first == b'a' && !self.plus
    }

    /// The mode a cookie stream of this mode is made with.
    fn cookie_mode(self) -> &'static CStr {
        match (self.first, self.plus) {
            (b'w', false) => c"w",
            (b'w', true) => c"w+",
            (b'a', false) => c"a",
            (b'a', true) => c"a+",
            (_, false) => c"r",
            (_, true) => c"r+",
        }
    }
}

fn emul_fopen(path: *const c_char, mode: *const c_char) -> Option<*mut FILE> {
    // A mode the C library refuses is its own to refuse (EINVAL), before
    // it opens anything: the library opened the file first, and a missing
    // one answered ENOENT.
    // SAFETY: the caller's mode string.
    let mode = unsafe { cstr(mode) }?;
    // A stream converting to a coded character set is the C library's: it
    // opens the file itself, through the kernel, as natively (as a cookie
    // stream the text went out in the locale's encoding, and an unknown
    // set was not refused).
    if StdioMode::names_a_charset(mode) {
        return None;
    }
    let m = StdioMode::of_fopen(mode)?;
    let fd = emul_open(libc::AT_FDCWD, path, m.flags(), 0o666)?;
    if fd < 0 {
        return Some(std::ptr::null_mut());
    }
    if m.append_only() {
        // The C library's `fopen` puts an append-only stream at the end
        // at once, so that `ftell` before the first write says where it
        // will go; a cookie stream starts at 0 (`ftell` said 0).
        // SAFETY: lseek through the hook on our own descriptor.
        unsafe { lseek(fd, 0, libc::SEEK_END) };
    }
    let f = cookie_file(fd, m);
    if f.is_null() {
        // SAFETY: our own descriptor, just opened.
        unsafe { close(fd) };
    }
    Some(f)
}

/// `fdopen` of an emulated descriptor, as the C library's does it: the
/// mode must fit the descriptor's access (`EINVAL`), an append mode turns
/// `O_APPEND` on, and an append-only stream that had to do so starts at
/// the end.
fn emul_fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    // SAFETY: the caller's mode string.
    let Some(m) = (unsafe { cstr(mode) }).and_then(StdioMode::of_fdopen) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: reads the flags of the caller's descriptor.
    let fl = unsafe { real::fcntl()(fd, libc::F_GETFL, 0) };
    if fl < 0 {
        return std::ptr::null_mut();
    }
    let want = m.flags() & libc::O_ACCMODE;
    let have = fl & libc::O_ACCMODE;
    if have != libc::O_RDWR && have != want {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    if m.first == b'a' && fl & libc::O_APPEND == 0 {
        // SAFETY: fcntl through the hook (the open file follows O_APPEND)
        // and lseek through the hook, on the caller's descriptor.
        unsafe {
            if fcntl(fd, libc::F_SETFL, (fl | libc::O_APPEND) as c_ulong) < 0 {
                return std::ptr::null_mut();
            }
            if m.append_only() {
                lseek(fd, 0, libc::SEEK_END);
            }
        }
    }
    cookie_file(fd, m)
}

/// Whether `f` is one of the library's own streams: a cookie stream with
/// a descriptor, which only `cookie_file` gives one (the C library leaves
/// a cookie stream's at -1). After `freopen(NULL, ...)` the descriptor
/// may be the kernel's, but the stream is still such a cookie stream.
pub(crate) fn own_stream(f: *mut FILE) -> bool {
    // SAFETY: a stream the program passed to a stdio function; `fileno`
    // only reads it.
    crate::wide::byte_only(f) && emul().is_some_and(|e| e.fileno_patch) && unsafe { real::fileno()(f) } >= 0
}

/// Runs `seek(off, whence)`, the C library's own seek of `f`, with two
/// corrections on the library's own streams.
///
/// A seek relative to the current position on a stream holding unwritten
/// bytes is made from the start, at `ftello` plus `off`. The C library
/// gets such a seek wrong on a cookie stream whose unwritten bytes do not
/// start where its last read ended (bytes written after a seek back, say):
/// writing them out inside the seek sets the stream's idea of the offset
/// to where they start, and a cookie's write does not move it on, so the
/// seek landed that many bytes short (`fseek(f, 0, SEEK_CUR)` after
/// `fseek(f, 100, SEEK_SET)` and a 300-byte `fwrite` left the stream at
/// 100, not 400). A seek from the start does not use that idea, and the C
/// library still writes the bytes out first and then reads the block the
/// position falls in, whole, as it does natively for a stream that held
/// unwritten bytes. (Writing them out here first, as this did before, made
/// it read only up to the position, so another stream's later changes
/// past it showed where natively they did not.)
///
/// A seek from the end is made from the start, at the size the file will
/// have once the stream's unwritten bytes are out, plus `off`: that is
/// what the C library does for a stream over a regular file (after
/// writing them out itself), and then it reads the block the new position
/// falls in. On a cookie stream it cannot learn the size, so it only moved
/// the descriptor, and a later read came from the file where natively it
/// came from that block (another stream of the file had truncated it
/// meanwhile, say). Nothing is written out first here: whether the C
/// library reads a whole block or only up to the position depends on
/// whether the stream held unwritten bytes when the seek began.
///
/// Everything else (a failed seek's effects, `ungetc`'s pushback) stays
/// the C library's.
fn seek_stream(f: *mut FILE, off: i64, whence: c_int, seek: impl FnOnce(i64, c_int) -> c_int) -> c_int {
    if (whence != libc::SEEK_CUR && whence != libc::SEEK_END) || !own_stream(f) {
        return seek(off, whence);
    }
    // SAFETY: the caller's live stream, one of the library's own, locked
    // (recursively) so that no other thread writes to it between the
    // position or the size and the seek.
    unsafe {
        crate::wide::flockfile(f);
        let r = if whence == libc::SEEK_END {
            match end_after_write_out(f).map(|end| end.checked_add(off)) {
                Some(Some(to)) => seek(to, libc::SEEK_SET),
                Some(None) => {
                    // Past what an offset holds: the C library's sum goes
                    // negative, which it refuses.
                    set_errno(libc::EINVAL);
                    -1
                }
                None => seek(off, whence),
            }
        } else {
            match unwritten_end(f) {
                // Past what an offset holds, -1, which the seek refuses as
                // the C library does.
                Some(Some(pos)) => seek(pos.checked_add(off).unwrap_or(-1), libc::SEEK_SET),
                Some(None) => seek(off, whence),
                None => -1,
            }
        };
        crate::wide::funlockfile(f);
        r
    }
}

/// The size the file under the library's stream `f` will have once the
/// stream's unwritten bytes are written out: its size now, or where those
/// bytes end if further (`ftello` counts them, at the end of the file for
/// an append stream). `None` if the file is not a regular file or either
/// answer fails, and the C library's own seek from the end is left to do
/// what it can.
///
/// # Safety
/// `f` is one of the library's own streams, locked by the caller.
unsafe fn end_after_write_out(f: *mut FILE) -> Option<i64> {
    // SAFETY: the caller's stream; `fileno` reports the descriptor
    // `cookie_file` patched in, open while the stream is.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(real::fileno()(f)) };
    let st = rustix::fs::fstat(fd).ok().filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)?;
    // SAFETY: the caller's promise, passed on.
    let pending_end = unsafe { unwritten_end(f) }?.unwrap_or(0);
    Some((st.st_size as i64).max(pending_end))
}

/// Where the unwritten bytes of the library's stream `f` end, which is
/// where the stream is: `Some(None)` when it holds none, `None` if
/// `ftello` fails. `ftello` counts them from the descriptor's offset,
/// which a cookie's write moves on (and, on an append stream holding
/// some, first moves the descriptor to the end, where they will go).
///
/// # Safety
/// `f` is one of the library's own streams, locked by the caller.
unsafe fn unwritten_end(f: *mut FILE) -> Option<Option<i64>> {
    // SAFETY: the caller's stream; `__fpending` only reads it, `ftello`
    // asks the descriptor where it is.
    unsafe {
        if __fpending(f) == 0 {
            return Some(None);
        }
        let pos = libc::ftello(f);
        (pos >= 0).then_some(Some(pos))
    }
}
/// `fseek(3)`.
#[no_mangle]
pub unsafe extern "C" fn fseek(f: *mut FILE, off: libc::c_long, whence: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on to the C library's own function.
    seek_stream(f, off, whence, |off, whence| unsafe { real::fseek()(f, off, whence) })
}
/// `fseeko(3)`.
#[no_mangle]
pub unsafe extern "C" fn fseeko(f: *mut FILE, off: off_t, whence: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on to the C library's own function.
    seek_stream(f, off, whence, |off, whence| unsafe { real::fseeko()(f, off, whence) })
}
/// `fseeko64(3)`.
#[no_mangle]
pub unsafe extern "C" fn fseeko64(f: *mut FILE, off: off_t, whence: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on to the C library's own function.
    seek_stream(f, off, whence, |off, whence| unsafe { real::fseeko64()(f, off, whence) })
}

/// `fopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_fopen(path, mode).unwrap_or_else(|| freeing_descriptors(|f: &*mut FILE| f.is_null(), || unsafe { real::fopen()(path, mode) }))
}
/// `fopen64(3)`.
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_fopen(path, mode).unwrap_or_else(|| freeing_descriptors(|f: &*mut FILE| f.is_null(), || unsafe { real::fopen64()(path, mode) }))
}
/// `fdopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if state::get(fd).is_some() {
        return emul_fdopen(fd, mode);
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fdopen()(fd, mode) }
}

/// glibc's `_flags` bits for what a stream may do (stable since the
/// library's first `libio`): no reading, no writing, appending.
const IO_NO_READS: c_int = 0x4;
const IO_NO_WRITES: c_int = 0x8;
const IO_IS_APPENDING: c_int = 0x1000;
const IO_MODE_BITS: c_int = IO_NO_READS | IO_NO_WRITES | IO_IS_APPENDING;

/// The `_flags` bits a stream opened with `mode` carries.
fn mode_bits(mode: StdioMode) -> c_int {
    match (mode.first, mode.plus) {
        (b'a', true) => IO_IS_APPENDING,
        (b'a', false) => IO_IS_APPENDING | IO_NO_READS,
        (b'w', false) => IO_NO_READS,
        (_, true) => 0,
        _ => IO_NO_WRITES,
    }
}

/// Whether the running C library gives cookie streams the `_flags` bits
/// [`mode_bits`] says, so that [`freopen`] may set them: checked once on
/// three streams of every kind of mode before any is changed.
fn check_mode_bits() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        if cfg!(not(all(target_pointer_width = "64", target_env = "gnu"))) {
            return false;
        }
        [c"r", c"w", c"a+"].iter().all(|m| {
            let Some(mode) = StdioMode::of_fopen(m.to_bytes()) else { return false };
            let funcs = CookieIo { read: None, write: None, seek: None, close: None };
            // SAFETY: a cookie stream with no functions, one int read at
            // the start of the structure (its first, public field), closed.
            unsafe {
                let f = fopencookie(std::ptr::null_mut(), m.as_ptr(), funcs);
                if f.is_null() {
                    return false;
                }
                let ok = *(f as *const c_int) & IO_MODE_BITS == mode_bits(mode);
                real::fclose()(f);
                ok
            }
        })
    })
}

/// `freopen` of one of the library's streams, keeping the `FILE`: the new
/// file is opened (through the library when it is under the served
/// directory) and put in place of the stream's descriptor, which is the
/// cookie its reads and writes go to, and the stream takes the new mode.
/// The C library's own `freopen` would reopen the file through its
/// internal calls behind the cookie's back (a crash).
fn cookie_reopen(path: *const c_char, mode: *const c_char, f: *mut FILE) -> Option<*mut FILE> {
    if !own_stream(f) || !check_mode_bits() {
        return None;
    }
    // SAFETY: the caller's mode string.
    let Some(m) = StdioMode::of_fopen(unsafe { cstr(mode) }?) else {
        // As the C library does with a mode it refuses: the stream is
        // closed, and the answer is EINVAL (the file was reopened for
        // reading).
        // SAFETY: the caller's stream, closed once as `freopen` does.
        unsafe { real::fclose()(f) };
        set_errno(libc::EINVAL);
        return Some(std::ptr::null_mut());
    };
    // SAFETY: a stream of ours, whose descriptor `fileno` reports (patched
    // in by `cookie_file`).
    let fd = unsafe { real::fileno()(f) };
    let flags = m.flags() & !libc::O_CLOEXEC;
    // SAFETY: the caller's stream and path; `open` is this library's.
    unsafe {
        let was_cloexec = real::fcntl()(fd, libc::F_GETFD, 0) & libc::FD_CLOEXEC != 0;
        libc::fflush(f);
        let new = if path.is_null() {
            // The same file in the new mode, through the kernel's link to it.
            let proc = format!("/proc/self/fd/{fd}\0");
            open(proc.as_ptr().cast(), flags & !(libc::O_CREAT | libc::O_EXCL), 0)
        } else {
            open(path, flags, 0o666)
        };
        if new < 0 {
            // As the C library does: the stream is closed either way.
            let e = *libc::__errno_location();
            real::fclose()(f);
            set_errno(e);
            return Some(std::ptr::null_mut());
        }
        if dup2(new, fd) < 0 {
            let e = *libc::__errno_location();
            close(new);
            real::fclose()(f);
            set_errno(e);
            return Some(std::ptr::null_mut());
        }
        close(new);
        if m.cloexec || was_cloexec {
            // dup2 clears close-on-exec; the C library keeps it once a
            // mode asked for it, and so does this.
            real::fcntl()(fd, libc::F_SETFD, libc::FD_CLOEXEC as c_ulong);
        }
        // The stream may now do what the new mode allows, and starts over.
        let flags_field = f as *mut c_int;
        *flags_field = (*flags_field & !IO_MODE_BITS) | mode_bits(m);
        libc::clearerr(f);
        // As `fopen` does: an append-only stream starts at the end, an
        // "a+" one (reads from the start) and every other at 0.
        libc::fseek(f, 0, if m.append_only() { libc::SEEK_END } else { libc::SEEK_SET });
    }
    // And with no orientation, not yet used, as `freopen` leaves a stream
    // natively (the seek just made left nothing in its buffer).
    crate::wide::unorient(f);
    as_never_used(f);
    Some(f)
}

/// `freopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn freopen(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    cookie_reopen(path, mode, f).unwrap_or_else(|| unsafe { real::freopen()(path, mode, f) })
}
/// `freopen64(3)`.
#[no_mangle]
pub unsafe extern "C" fn freopen64(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    cookie_reopen(path, mode, f).unwrap_or_else(|| unsafe { real::freopen64()(path, mode, f) })
}

// ---- reading and writing ---------------------------------------------------

/// Most bytes one read or write moves: the kernel caps a transfer there.
const MAX_RW: usize = 0x7fff_f000;

/// The caller's buffer of `n` bytes (capped at [`MAX_RW`], as the kernel
/// caps a transfer) as a slice: empty when `n` is 0, whatever the pointer
/// (a program may pass NULL; a slice from it would be undefined
/// behaviour, and a debug build of the library aborted the program on
/// `read(fd, NULL, 0)`), and `EFAULT` for a null pointer with bytes, as
/// the kernel answers.
///
/// # Safety
/// A non-null `p` is valid for `n` bytes (the call's contract).
unsafe fn user_buf_mut<'a>(p: *mut c_void, n: usize) -> Result<&'a mut [u8], Errno> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's promise; non-null, at most MAX_RW bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n.min(MAX_RW)) })
}

/// [`user_buf_mut`] for a buffer the call only reads.
///
/// # Safety
/// As [`user_buf_mut`].
unsafe fn user_buf<'a>(p: *const c_void, n: usize) -> Result<&'a [u8], Errno> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's promise; non-null, at most MAX_RW bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n.min(MAX_RW)) })
}

/// `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if let Some((f, _b)) = emulated_for_copy(fd) {
        if buf.is_null() && n > 0 {
            return ret_size(f.read_into_nothing(None));
        }
        // SAFETY: the caller's buffer of n bytes (module safety).
        return ret_size(unsafe { user_buf_mut(buf, n) }.and_then(|s| f.read(s)));
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::read()(fd, buf, n) }
}
/// The fortified `read`.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
    if state::get(fd).is_some() && n <= buflen {
        // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
        return unsafe { read(fd, buf, n) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::__read_chk()(fd, buf, n, buflen) }
}

unsafe fn pread_impl(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> Option<ssize_t> {
    let (f, _b) = emulated_for_copy(fd)?;
    if buf.is_null() && n > 0 {
        return Some(ret_size(f.read_into_nothing(Some(off))));
    }
    // SAFETY: the caller's buffer of n bytes.
    Some(ret_size(unsafe { user_buf_mut(buf, n) }.and_then(|s| f.pread(s, off))))
}
/// `pread(2)`.
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { pread_impl(fd, buf, n, off).unwrap_or_else(|| real::pread()(fd, buf, n, off)) }
}
/// `pread64(2)`.
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { pread_impl(fd, buf, n, off).unwrap_or_else(|| real::pread64()(fd, buf, n, off)) }
}
/// The fortified `pread`.
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, l: size_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { pread_impl(fd, buf, n.min(l), off).unwrap_or_else(|| real::__pread_chk()(fd, buf, n, off, l)) }
}
/// The fortified `pread64`.
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, l: size_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { pread_impl(fd, buf, n.min(l), off).unwrap_or_else(|| real::__pread64_chk()(fd, buf, n, off, l)) }
}

/// `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if let Some((f, _b)) = emulated_for_copy(fd) {
        if buf.is_null() && n > 0 {
            return ret_size(f.write_from_nothing(None));
        }
        // SAFETY: the caller's buffer of n bytes.
        return ret_size(unsafe { user_buf(buf, n) }.and_then(|s| f.write(s)));
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::write()(fd, buf, n) }
}

unsafe fn pwrite_impl(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> Option<ssize_t> {
    let (f, _b) = emulated_for_copy(fd)?;
    if buf.is_null() && n > 0 {
        return Some(ret_size(f.write_from_nothing(Some(off))));
    }
    // SAFETY: the caller's buffer of n bytes.
    Some(ret_size(unsafe { user_buf(buf, n) }.and_then(|s| f.pwrite(s, off))))
}
/// `pwrite(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { pwrite_impl(fd, buf, n, off).unwrap_or_else(|| real::pwrite()(fd, buf, n, off)) }
}
/// `pwrite64(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { pwrite_impl(fd, buf, n, off).unwrap_or_else(|| real::pwrite64()(fd, buf, n, off)) }
}

/// Serves a vector call one buffer after another: `op(buffer, offset)`
/// with the running offset when `off` is given. Stops at a short transfer.
unsafe fn vector(
    iov: *const libc::iovec,
    cnt: c_int,
    off: Option<i64>,
    mut op: impl FnMut(*mut u8, usize, Option<i64>) -> Result<usize, Errno>,
) -> ssize_t {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        set_errno(libc::EINVAL);
        return -1;
    }
    if cnt == 0 {
        return 0;
    }
    if iov.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: the caller's array of cnt iovecs.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut total = 0usize;
    for io in v {
        match op(io.iov_base.cast(), io.iov_len, off.map(|o| o + total as i64)) {
            Ok(n) => {
                total += n;
                if n < io.iov_len {
                    break;
                }
            }
            Err(e) if total == 0 => {
                set_errno(e);
                return -1;
            }
            Err(_) => break,
        }
    }
    total as ssize_t
}

/// Most bytes a vector call gathers into one buffer to be done as one
/// call; larger vectors are done a buffer at a time.
const GATHER_MAX: usize = 16 << 20;

/// The caller's `iovec` array, checked as the kernel checks it: `EINVAL`
/// for a count out of range or lengths whose sum overflows `ssize_t`.
/// Returns the array and the total length.
unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> Result<(&'a [libc::iovec], usize), Errno> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok((&[], 0));
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's array of cnt iovecs (module safety).
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let total = v.iter().try_fold(0usize, |t, io| t.checked_add(io.iov_len).filter(|t| *t <= isize::MAX as usize));
    Ok((v, total.ok_or(libc::EINVAL)?))
}

/// The buffers of a vector the kernel reaches: those before the first
/// null one with bytes to move, with their total, and whether such a
/// buffer cut the vector there. The kernel copies buffer after buffer
/// and stops at the first it cannot reach, answering what it moved
/// before it (`EFAULT` only if that is nothing and there was something
/// to move): a `readv` or `writev` whose second buffer was null moved
/// 5 bytes natively and failed whole with `EFAULT` here.
fn reachable(v: &[libc::iovec], total: usize) -> (&[libc::iovec], usize, bool) {
    match v.iter().position(|io| io.iov_base.is_null() && io.iov_len > 0) {
        Some(k) => (&v[..k], v[..k].iter().map(|io| io.iov_len).sum(), true),
        None => (v, total, false),
    }
}

/// What the kernel checks of a vector call before its vector: a negative
/// offset (`EINVAL`), then the descriptor's mode (`EBADF`), so that an
/// empty vector fails as it does natively.
fn vector_checks(f: &File, off: Option<i64>, write: bool) -> Result<(), Errno> {
    if matches!(off, Some(o) if o < 0) {
        return Err(libc::EINVAL);
    }
    if write {
        f.check_writable()
    } else {
        f.check_readable()
    }
}

/// `readv` and `preadv` on an emulated descriptor: one read (one token,
/// one offset update) into a buffer, scattered into the caller's, so that
/// no other process sharing the offset reads or writes in between, as the
/// kernel keeps the call whole.
unsafe fn readv_impl(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<i64>) -> Option<ssize_t> {
    let (f, _b) = emulated_for_copy(fd)?;
    // The kernel's order: the offset, the descriptor's mode, the vector.
    if let Err(e) = vector_checks(&f, off, false) {
        return Some(ret_size(Err(e)));
    }
    // SAFETY: the caller's array (module safety).
    let (v, total) = match unsafe { iovecs(iov, cnt) } {
        Ok(x) => x,
        Err(e) => return Some(ret_size(Err(e))),
    };
    let (v, total, cut) = reachable(v, total);
    if cut && total == 0 {
        // Nothing reachable to read into: 0 with nothing left to read
        // from there, as the kernel answers, else `EFAULT`.
        return Some(ret_size(f.read_into_nothing(off)));
    }
    if v.len() > 1 && total <= GATHER_MAX {
        let mut buf = vec![0u8; total];
        let r = match off {
            Some(o) => f.pread(&mut buf, o),
            None => f.read(&mut buf),
        };
        if let Ok(n) = r {
            let mut done = 0;
            for io in v {
                if done == n {
                    break;
                }
                let k = io.iov_len.min(n - done);
                if k > 0 {
                    // SAFETY: one of the caller's buffers, of at least k bytes.
                    unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(done), io.iov_base.cast::<u8>(), k) };
                }
                done += k;
            }
        }
        return Some(ret_size(r));
    }
    // SAFETY: the caller's buffers that the kernel would reach (module safety).
    Some(unsafe {
        vector(v.as_ptr(), v.len() as c_int, off, |p, n, o| {
            // SAFETY: one of the caller's buffers.
            let s = user_buf_mut(p.cast(), n)?;
            match o {
                Some(o) => f.pread(s, o),
                None => f.read(s),
            }
        })
    })
}

/// `writev` and `pwritev` on an emulated descriptor: the buffers gathered
/// and written as one write, so that the data of one call is never torn
/// by another process's write in between (with `O_APPEND`, or sharing the
/// offset), as the kernel keeps the call whole. Written a buffer at a
/// time, lines of concurrent `writev` calls came out interleaved.
unsafe fn writev_impl(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<i64>) -> Option<ssize_t> {
    let (f, _b) = emulated(fd)?;
    if let Err(e) = vector_checks(&f, off, true) {
        return Some(ret_size(Err(e)));
    }
    // SAFETY: the caller's array (module safety).
    let (v, total) = match unsafe { iovecs(iov, cnt) } {
        Ok(x) => x,
        Err(e) => return Some(ret_size(Err(e))),
    };
    let (v, total, cut) = reachable(v, total);
    if cut && total == 0 {
        return Some(ret_size(f.write_from_nothing(off)));
    }
    if v.len() > 1 && total <= GATHER_MAX {
        let mut buf = Vec::with_capacity(total);
        for io in v {
            // SAFETY: one of the caller's buffers, of iov_len bytes.
            match unsafe { user_buf(io.iov_base.cast_const(), io.iov_len) } {
                Ok(b) => buf.extend_from_slice(b),
                Err(e) => return Some(ret_size(Err(e))),
            }
        }
        return Some(ret_size(match off {
            Some(o) => f.pwrite(&buf, o),
            None => f.write(&buf),
        }));
    }
    // SAFETY: the caller's buffers that the kernel would reach (module safety).
    Some(unsafe {
        vector(v.as_ptr(), v.len() as c_int, off, |p, n, o| {
            // SAFETY: one of the caller's buffers.
            let s = user_buf(p.cast_const().cast(), n)?;
            match o {
                Some(o) => f.pwrite(s, o),
                None => f.write(s),
            }
        })
    })
}
fn at(off: off_t) -> Option<i64> {
    // preadv2/pwritev2 take -1 for "at the current offset".
    if off == -1 {
        None
    } else {
        Some(off)
    }
}

/// `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { readv_impl(fd, iov, cnt, None).unwrap_or_else(|| real::readv()(fd, iov, cnt)) }
}
/// `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { writev_impl(fd, iov, cnt, None).unwrap_or_else(|| real::writev()(fd, iov, cnt)) }
}
/// `preadv(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { readv_impl(fd, iov, cnt, Some(off)).unwrap_or_else(|| real::preadv()(fd, iov, cnt, off)) }
}
/// `preadv64(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { readv_impl(fd, iov, cnt, Some(off)).unwrap_or_else(|| real::preadv64()(fd, iov, cnt, off)) }
}
/// `pwritev(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { writev_impl(fd, iov, cnt, Some(off)).unwrap_or_else(|| real::pwritev()(fd, iov, cnt, off)) }
}
/// `pwritev64(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { writev_impl(fd, iov, cnt, Some(off)).unwrap_or_else(|| real::pwritev64()(fd, iov, cnt, off)) }
}
/// `preadv2` and `pwritev2` with flags on an emulated descriptor: the
/// flags are the kernel's to check and keep, so the call is made by the
/// kernel on the library's descriptor ([`File::preadv2`],
/// [`File::pwritev2`]); without flags it is `preadv`/`pwritev` (or
/// `readv`/`writev` at offset -1).
unsafe fn rw2_impl(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t, fl: c_int, write: bool) -> Option<ssize_t> {
    if fl == 0 {
        // SAFETY: the caller's arguments (module safety).
        return unsafe {
            if write {
                writev_impl(fd, iov, cnt, at(off))
            } else {
                readv_impl(fd, iov, cnt, at(off))
            }
        };
    }
    let (f, _b) = emulated(fd)?;
    let pos = at(off);
    if let Err(e) = vector_checks(&f, pos, write) {
        return Some(ret_size(Err(e)));
    }
    // SAFETY: the caller's array (module safety).
    let v = match unsafe { iovecs(iov, cnt) } {
        Ok((v, total)) => match reachable(v, total) {
            // Nothing reachable: as without flags (the kernel would check
            // the flags first).
            (_, 0, true) => return Some(ret_size(if write { f.write_from_nothing(pos) } else { f.read_into_nothing(pos) })),
            (v, _, _) => v,
        },
        Err(e) => return Some(ret_size(Err(e))),
    };
    Some(ret_size(if write {
        // SAFETY: each of the caller's buffers, of iov_len bytes (module safety).
        let bufs: Result<Vec<_>, Errno> = v.iter().map(|io| unsafe { user_buf(io.iov_base.cast_const(), io.iov_len) }.map(std::io::IoSlice::new)).collect();
        bufs.and_then(|b| f.pwritev2(&b, pos, fl as u32))
    } else {
        // SAFETY: each of the caller's buffers, of iov_len bytes (module safety).
        let bufs: Result<Vec<_>, Errno> = v.iter().map(|io| unsafe { user_buf_mut(io.iov_base, io.iov_len) }.map(std::io::IoSliceMut::new)).collect();
        bufs.and_then(|mut b| f.preadv2(&mut b, pos, fl as u32))
    }))
}

/// `preadv2(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { rw2_impl(fd, iov, cnt, off, fl, false).unwrap_or_else(|| real::preadv2()(fd, iov, cnt, off, fl)) }
}
/// `preadv64v2(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv64v2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { rw2_impl(fd, iov, cnt, off, fl, false).unwrap_or_else(|| real::preadv64v2()(fd, iov, cnt, off, fl)) }
}
/// `pwritev2(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { rw2_impl(fd, iov, cnt, off, fl, true).unwrap_or_else(|| real::pwritev2()(fd, iov, cnt, off, fl)) }
}
/// `pwritev64v2(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { rw2_impl(fd, iov, cnt, off, fl, true).unwrap_or_else(|| real::pwritev64v2()(fd, iov, cnt, off, fl)) }
}

fn lseek_impl(fd: c_int, off: off_t, whence: c_int) -> Option<off_t> {
    let (f, _b) = emulated_for_copy(fd)?;
    Some(match f.lseek(off, whence) {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}
/// `lseek(2)`.
#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    lseek_impl(fd, off, whence).unwrap_or_else(|| unsafe { real::lseek()(fd, off, whence) })
}
/// `lseek64(2)`.
#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    lseek_impl(fd, off, whence).unwrap_or_else(|| unsafe { real::lseek64()(fd, off, whence) })
}

/// `truncate` by name under the served root: cut by the server
/// (`Client::truncate_name`), so the token and every process's cached
/// size and windows follow (the kernel's `truncate` would leave them
/// describing bytes that are gone). No descriptor of the file is opened
/// in the process: the library used to open it for writing and close it
/// again, and closing any descriptor of a file drops the process's POSIX
/// record locks on it (a lock the program held on a file open only for
/// reading went to another process). A negative length is the kernel's to
/// refuse, before it looks at the name.
fn emul_truncate(path: *const c_char, len: off_t) -> Option<c_int> {
    if grows_past_the_size_limit(len, || {
        // SAFETY: the caller's path (module safety).
        rustix::fs::stat(unsafe { CStr::from_ptr(path) }).ok().map(|st| st.st_size)
    }) {
        return None;
    }
    if let Some(r) = truncate_through_an_open_file(path, len) {
        return Some(r);
    }
    let len = u64::try_from(len).ok()?;
    by_name(libc::AT_FDCWD, path, |c, r| c.truncate_name(r, len))
}
/// `truncate` by name of a file this process already has open for
/// writing through the server, which the program may write: cut through
/// that open file. Opening the file again and closing it would close a
/// descriptor of it, which drops the process's POSIX record locks on the
/// file (the kernel's `truncate` keeps them; a lock the program held on a
/// file it truncated by name went to another process).
fn truncate_through_an_open_file(path: *const c_char, len: off_t) -> Option<c_int> {
    let _b = state::enter_for_copy()?;
    let e = emul()?;
    let mut signals = None;
    // SAFETY: the caller's path (module safety).
    state::beneath(e, libc::AT_FDCWD, unsafe { cstr(path) }?, &mut signals)?;
    // SAFETY: the caller's path, checked for writing as `truncate` checks it.
    if unsafe { libc::faccessat(libc::AT_FDCWD, path, libc::W_OK, libc::AT_EACCESS) } != 0 {
        return None;
    }
    // SAFETY: the caller's path (module safety).
    let st = rustix::fs::stat(unsafe { CStr::from_ptr(path) }).ok()?;
    let (_, f) = state::all().into_iter().find(|(_, f)| f.check_writable().is_ok() && identity_of(f.fd().as_fd()) == Some((st.st_dev, st.st_ino)))?;
    Some(ret_int(f.truncate(len)))
}
/// Whether cutting a file to `len` bytes would grow it past the process's
/// file size limit (`RLIMIT_FSIZE`), which the kernel refuses with `EFBIG`
/// and a `SIGXFSZ` to the caller. The server makes its cuts under limits
/// of its own, and grew the file to any length: such a cut is left to the
/// kernel, in the process, which refuses it as natively, after its own
/// earlier checks (a name it cannot find, a descriptor not open for
/// writing). `size` is the file's size now (`None` if the kernel cannot
/// say, when it will refuse the cut itself). Only a file that grows
/// between `size` and the kernel's cut is cut by the kernel, as by a
/// program outside the emulation.
fn grows_past_the_size_limit(len: off_t, size: impl FnOnce() -> Option<i64>) -> bool {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: fills a local structure.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim) };
    if r != 0 || lim.rlim_cur == libc::RLIM_INFINITY || u64::try_from(len).map_or(true, |len| len <= lim.rlim_cur) {
        return false;
    }
    size().is_none_or(|size| size < len)
}
/// `truncate(2)`.
#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_truncate(path, len).unwrap_or_else(|| unsafe { real::truncate()(path, len) })
}
/// `truncate64(2)`.
#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    emul_truncate(path, len).unwrap_or_else(|| unsafe { real::truncate64()(path, len) })
}
/// `ftruncate(2)`.
#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    if let Some((f, _b)) = emulated(fd) {
        if grows_past_the_size_limit(len, || rustix::fs::fstat(f.fd()).ok().map(|st| st.st_size)) {
            // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
            return unsafe { real::ftruncate()(fd, len) };
        }
        return ret_int(f.truncate(len));
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::ftruncate()(fd, len) }
}
/// `ftruncate64(2)`.
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    if let Some((f, _b)) = emulated(fd) {
        if grows_past_the_size_limit(len, || rustix::fs::fstat(f.fd()).ok().map(|st| st.st_size)) {
            // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
            return unsafe { real::ftruncate64()(fd, len) };
        }
        return ret_int(f.truncate(len));
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::ftruncate64()(fd, len) }
}
/// `fsync(2)`.
#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    if let Some((f, _b)) = emulated(fd) {
        return ret_int(f.fsync());
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fsync()(fd) }
}
/// `fdatasync(2)`.
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    if let Some((f, _b)) = emulated(fd) {
        return ret_int(f.fsync());
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fdatasync()(fd) }
}

// ---- descriptors -------------------------------------------------------------

/// `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // Signals are held only where the library has work to do (see
    // `state::enter`): a close of a descriptor it knows nothing of is
    // the kernel's at once.
    let work = fd >= ferry::emulation::client::library_floor() || state::get(fd).is_some();
    if let Some(_b) = if work { enter() } else { state::enter_for_copy() } {
        if fd >= ferry::emulation::client::library_floor() && kept_from_the_program(fd) {
            // The program closes descriptors it did not open (a child
            // closing all but a few before exec, as Python's subprocess
            // does, or a daemon): the library's own stay, as `close_range`
            // spares them. Closed, the child's last call to the server
            // before exec failed, and the program it started wrote at a
            // stale offset.
            return 0;
        }
        // The open file goes (with its window and hold) when its last
        // descriptor in this process does.
        drop(state::take(fd));
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::close()(fd) }
}

/// Whether `fd` is a descriptor the library keeps for as long as the
/// process runs or a file is open: the server's right, or an open file's
/// own descriptor or hold. (Not a thread's reply port: the library closes
/// those itself when a thread ends, through this same function, and makes
/// a new one if a program closed it.)
fn kept_from_the_program(fd: c_int) -> bool {
    if emul().is_some_and(|e| e.client.right().as_fd().as_raw_fd() == fd) {
        return true;
    }
    state::all().iter().any(|(_, f)| f.fd().as_raw_fd() == fd || f.hold_fd() == fd)
}
/// Whether `fd` is one of the library's own descriptors, which it keeps at
/// [`high_fd`](ferry::emulation::client::high_fd) and above: an open
/// file's own descriptor (`files`), or a close-on-exec Unix
/// `SOCK_SEQPACKET` socket (the server's right, a thread's reply port, an
/// open file's hold), which a program that did not make it with ferry
/// does not have up there.
fn library_owned(fd: c_int, files: &[c_int]) -> bool {
    if fd < ferry::emulation::client::high_fd() {
        // Below, where the library's descriptors went only when the top of
        // a lowered limit was full, the program may have such sockets of
        // its own: only the library's own count.
        return kept_from_the_program(fd);
    }
    // SAFETY: a descriptor number only; the borrow lasts for the checks.
    let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let cloexec = rustix::io::fcntl_getfd(b).is_ok_and(|f| f.contains(rustix::io::FdFlags::CLOEXEC));
    cloexec
        && (files.contains(&fd)
            || (rustix::net::sockopt::socket_type(b).is_ok_and(|t| t == rustix::net::SocketType::SEQPACKET)
                && rustix::net::sockopt::socket_domain(b).is_ok_and(|d| d == rustix::net::AddressFamily::UNIX)))
}

/// Closes (or, with `CLOSE_RANGE_CLOEXEC`, marks) `first..=last` as
/// `close_range` would, sparing the library's own descriptors: a program
/// that closes every descriptor but the standard ones (daemons,
/// `closefrom(3)`) would otherwise cut the library off its server and its
/// open files.
fn close_range_sparing(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let high = ferry::emulation::client::library_floor() as c_uint;
    if last < high || first > last {
        // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
        return unsafe { real::close_range()(first, last, flags) };
    }
    if first < high {
        // SAFETY: the caller's range below the library's descriptors.
        let r = unsafe { real::close_range()(first, high - 1, flags) };
        if r < 0 {
            return r;
        }
    }
    let files: Vec<c_int> = state::all().iter().map(|(_, f)| f.fd().as_raw_fd()).collect();
    let Ok(dir) = rustix::fs::open("/proc/self/fd", rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty()) else {
        set_errno(libc::EMFILE);
        return -1;
    };
    let listing = dir.as_raw_fd();
    let mut open = Vec::new();
    if let Ok(entries) = rustix::fs::Dir::read_from(&dir) {
        for e in entries.flatten() {
            if let Some(fd) = e.file_name().to_str().ok().and_then(|n| n.parse::<c_int>().ok()) {
                if fd != listing && fd as c_uint >= first.max(high) && fd as c_uint <= last {
                    open.push(fd);
                }
            }
        }
    }
    drop(dir);
    for fd in open {
        if library_owned(fd, &files) {
            continue;
        }
        if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
            // SAFETY: sets the close-on-exec flag of a descriptor the caller named.
            unsafe { real::fcntl()(fd, libc::F_SETFD, libc::FD_CLOEXEC as c_ulong) };
        } else {
            // SAFETY: closes a descriptor in the caller's range, not the library's.
            unsafe { real::close()(fd) };
        }
    }
    0
}

/// `close_range(2)`, sparing the library's own descriptors.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        if let Some(_b) = enter() {
            for (fd, _) in state::all() {
                if fd as c_uint >= first && fd as c_uint <= last {
                    drop(state::take(fd));
                }
            }
        }
    }
    close_range_sparing(first, last, flags)
}

/// `syscall(2)`, the C library's door to any system call: closes made
/// through it (`syscall(SYS_close, fd)`, as libuv under Node.js makes
/// them) go through `close` and `close_range` above, so the descriptor
/// table never keeps an entry for a number the program closed (a file
/// Node.js read and closed left one, and the next descriptor to get that
/// number, an inotify or a socket, was taken for the file). An `execve`
/// or `execveat` hands the offsets to the kernel first, as `execve`
/// does; duplications go through `dup`, `dup2` and `dup3`, and the calls
/// on a descriptor
/// that the library does itself (reads, writes, seeks, vectors,
/// truncation, `fcntl`, `flock`, `ioctl`, syncs and in-kernel copies)
/// go through its own functions when the descriptor is emulated: the
/// kernel's offset of a served file is not the program's (a raw read
/// after a seek to 5 read from 0, and a raw truncation left the library
/// reading the old size). Every other call passes through unchanged.
/// `syscall` is variadic; its arguments are integers, which the x86-64
/// and AArch64 Linux conventions pass as they pass fixed ones, so seven
/// are read whatever the call.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    let emulated = |fd: libc::c_long| state::get(fd as c_int).is_some();
    let long = libc::c_long::from;
    // SAFETY: in every arm, the caller's arguments, as the kernel takes
    // them for the call `number` names, passed to the function of the C
    // library that makes that call (this library's, for its own
    // descriptors); on 64-bit Linux `preadv`'s offset is its fourth
    // argument whole and `preadv2`'s flags are its sixth.
    unsafe {
        match number {
            libc::SYS_close => long(close(a1 as c_int)),
            libc::SYS_close_range => long(close_range(a1 as c_uint, a2 as c_uint, a3 as c_int)),
            libc::SYS_execve | libc::SYS_execveat => {
                before_exec(false);
                real::syscall()(number, a1, a2, a3, a4, a5, a6)
            }
            libc::SYS_dup => long(dup(a1 as c_int)),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_dup2 => long(dup2(a1 as c_int, a2 as c_int)),
            libc::SYS_dup3 => long(dup3(a1 as c_int, a2 as c_int, a3 as c_int)),
            libc::SYS_read if emulated(a1) => read(a1 as c_int, a2 as *mut c_void, a3 as size_t) as libc::c_long,
            libc::SYS_write if emulated(a1) => write(a1 as c_int, a2 as *const c_void, a3 as size_t) as libc::c_long,
            libc::SYS_pread64 if emulated(a1) => pread64(a1 as c_int, a2 as *mut c_void, a3 as size_t, a4) as libc::c_long,
            libc::SYS_pwrite64 if emulated(a1) => pwrite64(a1 as c_int, a2 as *const c_void, a3 as size_t, a4) as libc::c_long,
            libc::SYS_readv if emulated(a1) => readv(a1 as c_int, a2 as *const libc::iovec, a3 as c_int) as libc::c_long,
            libc::SYS_writev if emulated(a1) => writev(a1 as c_int, a2 as *const libc::iovec, a3 as c_int) as libc::c_long,
            libc::SYS_preadv if emulated(a1) => preadv64(a1 as c_int, a2 as *const libc::iovec, a3 as c_int, a4) as libc::c_long,
            libc::SYS_pwritev if emulated(a1) => pwritev64(a1 as c_int, a2 as *const libc::iovec, a3 as c_int, a4) as libc::c_long,
            libc::SYS_preadv2 if emulated(a1) => preadv64v2(a1 as c_int, a2 as *const libc::iovec, a3 as c_int, a4, a6 as c_int) as libc::c_long,
            libc::SYS_pwritev2 if emulated(a1) => pwritev64v2(a1 as c_int, a2 as *const libc::iovec, a3 as c_int, a4, a6 as c_int) as libc::c_long,
            libc::SYS_lseek if emulated(a1) => lseek64(a1 as c_int, a2, a3 as c_int),
            libc::SYS_ftruncate if emulated(a1) => long(ftruncate64(a1 as c_int, a2)),
            libc::SYS_fsync if emulated(a1) => long(fsync(a1 as c_int)),
            libc::SYS_fdatasync if emulated(a1) => long(fdatasync(a1 as c_int)),
            libc::SYS_fcntl if emulated(a1) || matches!(a2 as c_int, libc::F_SETLK | libc::F_SETLKW) => long(fcntl(a1 as c_int, a2 as c_int, a3 as c_ulong)),
            libc::SYS_flock if emulated(a1) => long(flock(a1 as c_int, a2 as c_int)),
            libc::SYS_ioctl if emulated(a1) => long(ioctl(a1 as c_int, a2 as c_ulong, a3 as *mut c_void)),
            libc::SYS_copy_file_range if emulated(a1) || emulated(a3) => {
                copy_file_range(a1 as c_int, a2 as *mut i64, a3 as c_int, a4 as *mut i64, a5 as size_t, a6 as c_uint) as libc::c_long
            }
            libc::SYS_sendfile if emulated(a1) || emulated(a2) => sendfile64(a1 as c_int, a2 as c_int, a3 as *mut off_t, a4 as size_t) as libc::c_long,
            libc::SYS_splice if emulated(a1) || emulated(a3) => {
                splice(a1 as c_int, a2 as *mut i64, a3 as c_int, a4 as *mut i64, a5 as size_t, a6 as c_uint) as libc::c_long
            }
            _ => real::syscall()(number, a1, a2, a3, a4, a5, a6),
        }
    }
}

/// `closefrom(3)`: as `close_range` (the C library's own closes through
/// its internal `close_range`, which the hook above never sees).
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    if let Some(_b) = enter() {
        for (fd, _) in state::all() {
            if fd >= low {
                drop(state::take(fd));
            }
        }
    }
    // The C library's closefrom would close the library's own too.
    let _ = close_range_sparing(low.max(0) as c_uint, c_uint::MAX, 0);
}

fn duplicated(old: c_int, new: c_int) -> c_int {
    if new >= 0 {
        match state::get(old) {
            Some(f) => state::set(new, f),
            None => {
                state::take(new);
            }
        }
    }
    new
}

/// `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    duplicated(fd, freeing_fds(|| unsafe { real::dup()(fd) }))
}
/// `opendir(3)`: the C library's (the kernel opens the directory), made
/// again after letting a served file go if the program is out of
/// descriptors (see [`let_a_served_file_go`]).
#[no_mangle]
pub unsafe extern "C" fn opendir(name: *const c_char) -> *mut libc::DIR {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    freeing_descriptors(|d: &*mut libc::DIR| d.is_null(), || unsafe { real::opendir()(name) })
}
/// Defines C library calls that make a descriptor and answer it (or -1)
/// as [`opendir`]: made again after letting a served file go while they
/// fail with `EMFILE`.
macro_rules! freeing_calls {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`, as [`opendir`].")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
            freeing_fds(|| unsafe { real::$name()($($arg),*) })
        }
    )*};
}

freeing_calls! {
    epoll_create(size: c_int);
    epoll_create1(flags: c_int);
    eventfd(initval: c_uint, flags: c_int);
    memfd_create(name: *const c_char, flags: c_uint);
    inotify_init();
    inotify_init1(flags: c_int);
    timerfd_create(clock: c_int, flags: c_int);
    signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int);
}

/// Runs `make`, one of the `mkstemp` family, as [`freeing_fds`], with
/// the caller's template put back as it was before each new try: the
/// family writes the names it tried into it, and a template without its
/// `XXXXXX` is refused with `EINVAL`.
///
/// # Safety
/// `template` is null or the caller's NUL-terminated template.
unsafe fn freeing_fds_template(template: *mut c_char, mut make: impl FnMut() -> c_int) -> c_int {
    // SAFETY: the caller's template, read up to its NUL.
    let saved = unsafe { cstr(template) }.map(<[u8]>::to_vec);
    let mut first = true;
    freeing_fds(|| {
        if let (Some(saved), false) = (&saved, first) {
            // SAFETY: the same template, as long as before (the family
            // only replaces its letters), written back in place.
            unsafe { std::ptr::copy_nonoverlapping(saved.as_ptr(), template.cast::<u8>(), saved.len()) };
        }
        first = false;
        make()
    })
}

/// Defines the `mkstemp` family as [`freeing_fds_template`].
macro_rules! freeing_temporaries {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "(3)`, as [`opendir`], its template put back before each new try.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(template: *mut c_char $(, $arg: $ty)*) -> c_int {
            // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
            unsafe { freeing_fds_template(template, || real::$name()(template $(, $arg)*)) }
        }
    )*};
}

freeing_temporaries! {
    mkstemp();
    mkstemp64();
    mkostemp(flags: c_int);
    mkostemp64(flags: c_int);
    mkstemps(suffix: c_int);
    mkstemps64(suffix: c_int);
    mkostemps(suffix: c_int, flags: c_int);
    mkostemps64(suffix: c_int, flags: c_int);
}

/// `tmpfile(3)`, as [`opendir`].
#[no_mangle]
pub unsafe extern "C" fn tmpfile() -> *mut FILE {
    // SAFETY: no arguments; the C library's own function.
    freeing_descriptors(|f: &*mut FILE| f.is_null(), || unsafe { real::tmpfile()() })
}
/// `tmpfile64(3)`, as [`opendir`].
#[no_mangle]
pub unsafe extern "C" fn tmpfile64() -> *mut FILE {
    // SAFETY: no arguments; the C library's own function.
    freeing_descriptors(|f: &*mut FILE| f.is_null(), || unsafe { real::tmpfile64()() })
}

/// `pipe(2)`, as [`opendir`].
#[no_mangle]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    freeing_fds(|| unsafe { real::pipe()(fds) })
}
/// `pipe2(2)`, as [`opendir`].
#[no_mangle]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    freeing_fds(|| unsafe { real::pipe2()(fds, flags) })
}
/// `socket(2)`, as [`opendir`].
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    freeing_fds(|| unsafe { real::socket()(domain, kind, protocol) })
}
/// `socketpair(2)`, as [`opendir`].
#[no_mangle]
pub unsafe extern "C" fn socketpair(domain: c_int, kind: c_int, protocol: c_int, fds: *mut c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    freeing_fds(|| unsafe { real::socketpair()(domain, kind, protocol, fds) })
}
/// `accept(2)`, as [`opendir`] (the connection waits meanwhile).
#[no_mangle]
pub unsafe extern "C" fn accept(sock: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    freeing_fds(|| unsafe { real::accept()(sock, addr, len) })
}
/// `accept4(2)`, as [`accept`].
#[no_mangle]
pub unsafe extern "C" fn accept4(sock: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    freeing_fds(|| unsafe { real::accept4()(sock, addr, len, flags) })
}

/// Whether `dup2`/`dup3` onto `new` would replace one of the library's
/// own descriptors (the server's right, an open file's descriptor or
/// hold, a reply port), which it keeps at
/// [`high_fd`](ferry::emulation::client::high_fd) and above. Such a call
/// fails with `EBUSY`, as a `dup2` racing an `open` may natively: done,
/// the library went on using the number for what the program put there
/// (a write to one file landed in another, and a shell's `exec 1001<file`
/// hung).
fn clobbers_library(new: c_int) -> bool {
    if new < ferry::emulation::client::library_floor() {
        return false;
    }
    let Some(_b) = enter() else { return false };
    let files: Vec<c_int> = state::all().iter().map(|(_, f)| f.fd().as_raw_fd()).collect();
    kept_from_the_program(new) || library_owned(new, &files)
}

/// `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if clobbers_library(new) {
        set_errno(libc::EBUSY);
        return -1;
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::dup2()(old, new) };
    if r >= 0 && old != new && (state::get(old).is_some() || state::get(new).is_some()) {
        let _b = enter();
        drop(state::take(new));
        duplicated(old, r);
    }
    r
}

/// `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if clobbers_library(new) {
        set_errno(libc::EBUSY);
        return -1;
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::dup3()(old, new, flags) };
    if r >= 0 && (state::get(old).is_some() || state::get(new).is_some()) {
        let _b = enter();
        drop(state::take(new));
        duplicated(old, r);
    }
    r
}

/// `fcntl` and `fcntl64` (`real`): record locks placed from the open
/// file's offset; duplicates, open-file-description locks and changes of
/// the file's flags followed.
fn fcntl_impl(fd: c_int, cmd: c_int, arg: c_ulong, real: unsafe extern "C" fn(c_int, c_int, c_ulong) -> c_int) -> c_int {
    if matches!(cmd, libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW | libc::F_SETLEASE) {
        settle_reaped_outside();
    }
    let r = if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        // SAFETY: passes the caller's arguments through unchanged.
        freeing_fds(|| unsafe { real(fd, cmd, arg) })
    } else {
        // SAFETY: passes the caller's arguments through unchanged.
        lock_from_the_offset(fd, cmd, arg, real).unwrap_or_else(|| unsafe { real(fd, cmd, arg) })
    };
    if matches!(cmd, libc::F_SETLK | libc::F_SETLKW) && r >= 0 {
        record_locks_set(fd);
    }
    if (cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC) && r >= 0 {
        return duplicated(fd, r);
    }
    if matches!(cmd, libc::F_OFD_SETLK | libc::F_OFD_SETLKW) && r >= 0 {
        if let Some(f) = state::get(fd) {
            f.set_locked();
        }
    }
    if cmd == libc::F_SETFL && r >= 0 {
        // The open file's flags changed in the kernel; writes must follow
        // O_APPEND (the data lands at the end either way, the offset too).
        if let Some(f) = state::get(fd) {
            f.set_append(arg as c_int & libc::O_APPEND != 0);
            f.set_direct(arg as c_int & libc::O_DIRECT != 0);
        }
    }
    r
}

/// A record lock (`F_GETLK`, `F_SETLK`, `F_SETLKW` and their open-file
/// forms) that an emulated descriptor's caller places relative to its
/// offset (`l_whence` `SEEK_CUR`): the kernel would place it from its own
/// offset of the descriptor, which is not the open file's (that lives in
/// the token page), so it is placed from the open file's offset
/// (`SEEK_SET`), checked as the kernel checks it (`EOVERFLOW` past the
/// largest offset, `EINVAL` before the start). A test answers as the
/// kernel does: the conflicting lock whole, from the start, or only
/// `F_UNLCK` in `l_type` when none conflicts. `None`: not such a lock, or
/// not an emulated descriptor; the kernel's as it is.
fn lock_from_the_offset(fd: c_int, cmd: c_int, arg: c_ulong, real: unsafe extern "C" fn(c_int, c_int, c_ulong) -> c_int) -> Option<c_int> {
    if !matches!(cmd, libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW) || arg == 0 {
        return None;
    }
    // Any other descriptor's lock is the kernel's alone (a bad pointer
    // its EFAULT): nothing of the caller's is read for it.
    state::get(fd)?;
    let asked = arg as *mut libc::flock;
    // SAFETY: the lock commands' argument is the caller's `struct flock`,
    // not null (the call's contract).
    let mut lock = unsafe { asked.read() };
    if c_int::from(lock.l_whence) != libc::SEEK_CUR {
        return None;
    }
    let offset = lseek_impl(fd, 0, libc::SEEK_CUR)?;
    if offset < 0 {
        return Some(-1);
    }
    let Some(start) = lock.l_start.checked_add(offset) else {
        set_errno(libc::EOVERFLOW);
        return Some(-1);
    };
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    // SAFETY: the caller's descriptor and command, with a lock of ours.
    let r = unsafe { real(fd, cmd, std::ptr::addr_of_mut!(lock) as c_ulong) };
    if r == 0 && matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        if c_int::from(lock.l_type) == libc::F_UNLCK {
            // SAFETY: as above.
            unsafe { (*asked).l_type = lock.l_type };
        } else {
            // SAFETY: as above.
            unsafe { asked.write(lock) };
        }
    }
    Some(r)
}

/// `lockf(3)`'s commands (`<unistd.h>`).
const F_ULOCK: c_int = 0;
const F_LOCK: c_int = 1;
const F_TLOCK: c_int = 2;
const F_TEST: c_int = 3;

/// `lockf(3)` on an emulated descriptor: a record lock from the open
/// file's offset, `len` bytes on (back from it when negative, to the end
/// of any file when 0), made as the C library makes it but through
/// [`fcntl_impl`]. The C library's own makes its `fcntl` call internally,
/// where the library does not see it, and the kernel placed the lock from
/// its own offset (`lockf` after a seek to 100 locked bytes from 0).
fn lockf_impl(fd: c_int, cmd: c_int, len: off_t) -> Option<c_int> {
    state::get(fd)?;
    // SAFETY: a plain C structure, all zeros a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_whence = libc::SEEK_CUR as libc::c_short;
    lock.l_len = len;
    let (kind, op) = match cmd {
        F_TEST => (libc::F_RDLCK, libc::F_GETLK),
        F_ULOCK => (libc::F_UNLCK, libc::F_SETLK),
        F_LOCK => (libc::F_WRLCK, libc::F_SETLKW),
        F_TLOCK => (libc::F_WRLCK, libc::F_SETLK),
        _ => {
            set_errno(libc::EINVAL);
            return Some(-1);
        }
    };
    lock.l_type = kind as libc::c_short;
    let r = fcntl_impl(fd, op, std::ptr::addr_of_mut!(lock) as c_ulong, real::fcntl());
    if cmd != F_TEST || r < 0 {
        return Some(r);
    }
    // Free, or held by this process: as the C library answers.
    // SAFETY: getpid takes no arguments and cannot fail.
    if c_int::from(lock.l_type) == libc::F_UNLCK || lock.l_pid == unsafe { libc::getpid() } {
        return Some(0);
    }
    set_errno(libc::EACCES);
    Some(-1)
}
/// `lockf(3)`.
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    settle_reaped_outside();
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = lockf_impl(fd, cmd, len).unwrap_or_else(|| unsafe { real::lockf()(fd, cmd, len) });
    if cmd != F_TEST && r == 0 {
        record_locks_set(fd);
    }
    r
}
/// `lockf64(3)`.
#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    settle_reaped_outside();
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = lockf_impl(fd, cmd, len).unwrap_or_else(|| unsafe { real::lockf64()(fd, cmd, len) });
    if cmd != F_TEST && r == 0 {
        record_locks_set(fd);
    }
    r
}

/// `flock(2)`: the kernel's, on the program's descriptor; a lock taken on
/// a served file is noted, so that closing the file lets go of it at once
/// (the server's descriptor of the open file holds the lock too).
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    settle_reaped_outside();
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::flock()(fd, op) };
    if r == 0 && op & (libc::LOCK_SH | libc::LOCK_EX) != 0 {
        if let Some(f) = state::get(fd) {
            f.set_locked();
        }
    }
    r
}

/// `ioctl(2)`: `FIONREAD` on an emulated descriptor counts from the open
/// file's offset (the kernel's own offset is not it), negative past the
/// end as the kernel's; everything else is the C library's.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if request == libc::FIONREAD as c_ulong && !arg.is_null() {
        if let Some(f) = state::get(fd) {
            return match f.readable_bytes() {
                Ok(n) => {
                    // The kernel stores the difference in an int as it
                    // is (negative past the end, cut to 32 bits).
                    // SAFETY: FIONREAD's argument is the caller's int.
                    unsafe { *arg.cast::<c_int>() = n as c_int };
                    0
                }
                Err(e) => {
                    set_errno(e);
                    -1
                }
            };
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::ioctl()(fd, request, arg) }
}
/// `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, real::fcntl())
}
/// `fcntl64(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, real::fcntl64())
}

/// Whether either end of an in-kernel copy is emulated: the kernel would
/// use its own offset and size for the descriptor, not the open file's, so
/// the library copies instead (`user_copy`).
fn either_emulated(a: c_int, b: c_int) -> bool {
    state::get(a).is_some() || state::get(b).is_some()
}

/// Reads one chunk from `fd` at `at` (or at its offset when `None`),
/// through the hooks so that emulated descriptors use the open file.
/// With `nowait` (`SPLICE_F_NONBLOCK`) a descriptor that is not emulated
/// (the splice's pipe) is read without waiting (`RWF_NOWAIT`: `EAGAIN`
/// when it is empty), as the kernel's splice reads it.
unsafe fn chunk_read(fd: c_int, buf: &mut [u8], at: Option<i64>, nowait: bool) -> ssize_t {
    if nowait && state::get(fd).is_none() {
        // SAFETY: the caller's descriptor, borrowed for one call.
        let pipe = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let r = rustix::io::preadv2(pipe, &mut [std::io::IoSliceMut::new(buf)], u64::MAX, rustix::io::ReadWriteFlags::NOWAIT);
        return ret_size(r.map_err(|e| e.raw_os_error()));
    }
    // SAFETY: our own buffer of buf.len() bytes.
    unsafe {
        match at {
            Some(o) => pread(fd, buf.as_mut_ptr().cast(), buf.len(), o),
            None => read(fd, buf.as_mut_ptr().cast(), buf.len()),
        }
    }
}

/// Writes all of `buf` to `fd` at `at` (or at its offset), retrying short
/// writes: what was taken from the input must not be lost. Returns the
/// bytes written and the error that stopped it, if any. With `nowait`
/// (`SPLICE_F_NONBLOCK`) a descriptor that is not emulated (the splice's
/// pipe) is written without waiting (`RWF_NOWAIT`: `EAGAIN` when full).
unsafe fn chunk_write(fd: c_int, buf: &[u8], at: Option<i64>, nowait: bool) -> (usize, Option<Errno>) {
    let nowait = nowait && state::get(fd).is_none();
    let mut done = 0usize;
    let mut tries = 0u32;
    while done < buf.len() {
        let rest = &buf[done..];
        // SAFETY: our own buffer; the caller's descriptor, borrowed for one call.
        let r = unsafe {
            match at {
                _ if nowait => {
                    let pipe = std::os::fd::BorrowedFd::borrow_raw(fd);
                    ret_size(rustix::io::pwritev2(pipe, &[std::io::IoSlice::new(rest)], u64::MAX, rustix::io::ReadWriteFlags::NOWAIT).map_err(|e| e.raw_os_error()))
                }
                Some(o) => pwrite(fd, rest.as_ptr().cast(), rest.len(), o + done as i64),
                None => write(fd, rest.as_ptr().cast(), rest.len()),
            }
        };
        if r < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            if e == libc::EINTR && tries < 1000 {
                tries += 1;
                continue;
            }
            return (done, Some(e));
        }
        if r == 0 {
            return (done, Some(libc::EIO));
        }
        done += r as usize;
    }
    (done, None)
}

/// `copy_file_range`, `sendfile` and `splice` with an emulated end, done in
/// the library with read and write through the open files (the kernel would
/// bypass the window, the token's offset and the cached size). `in_at` and
/// `out_at` are the callers' offset pointers (null: the descriptor's own
/// offset, which moves). Input is taken by `pread` and its offset moved by
/// what was written, so nothing read is lost on a short write; an input
/// that cannot seek (a pipe) is read and its bytes written in full.
/// `nowait` is `SPLICE_F_NONBLOCK`: the pipe end is not waited for.
unsafe fn user_copy(i: c_int, in_at: *mut i64, o: c_int, out_at: *mut i64, n: size_t, nowait: bool) -> ssize_t {
    const CHUNK: usize = 256 * 1024;
    let mut buf = vec![0u8; n.min(CHUNK)];
    // SAFETY: the callers' offset pointers, null or valid (the kernel's contract).
    let (mut ip, mut op) = unsafe { (in_at.as_mut(), out_at.as_mut()) };
    if ip.as_deref().is_some_and(|v| *v < 0) || op.as_deref().is_some_and(|v| *v < 0) {
        set_errno(libc::EINVAL);
        return -1;
    }
    // The input's own offset when it is seekable, to peek without consuming.
    // SAFETY: lseek through the hook on the caller's descriptor.
    let mut cur = if ip.is_none() { Some(unsafe { lseek(i, 0, libc::SEEK_CUR) }).filter(|&c| c >= 0) } else { None };
    let mut total = 0usize;
    while total < n {
        let want = (n - total).min(buf.len());
        let at = ip.as_deref().copied().or(cur);
        // SAFETY: our own buffer.
        let got = unsafe { chunk_read(i, &mut buf[..want], at, nowait) };
        if got < 0 {
            if total == 0 {
                return -1;
            }
            break;
        }
        if got == 0 {
            break;
        }
        let got = got as usize;
        // SAFETY: our own buffer.
        let (put, err) = unsafe { chunk_write(o, &buf[..got], op.as_deref().copied(), nowait) };
        total += put;
        if let Some(v) = op.as_deref_mut() {
            *v += put as i64;
        }
        if let Some(v) = ip.as_deref_mut() {
            *v += put as i64;
        } else if let Some(c) = cur.as_mut() {
            *c += put as i64;
            // SAFETY: lseek through the hook on the caller's descriptor.
            unsafe { lseek(i, *c, libc::SEEK_SET) };
        }
        if let Some(e) = err {
            if total == 0 {
                set_errno(e);
                return -1;
            }
            break;
        }
        if put < got || got < want {
            break;
        }
    }
    total as ssize_t
}

/// Which in-kernel copy a call is, for the kernel's checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CopyKind {
    CopyFileRange,
    Sendfile,
    Splice,
}

/// What the checks need of one end of a copy.
struct CopyEnd {
    mode: u32,
    flags: c_int,
    dev: u64,
    ino: u64,
    size: i64,
}

fn copy_end(fd: c_int) -> Result<CopyEnd, Errno> {
    // SAFETY: a plain stat buffer, written by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the caller's descriptor; our buffer.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EBADF));
    }
    // SAFETY: reads the caller's descriptor's flags.
    let flags = unsafe { real::fcntl()(fd, libc::F_GETFL, 0) };
    Ok(CopyEnd { mode: st.st_mode & libc::S_IFMT, flags, dev: st.st_dev, ino: st.st_ino, size: st.st_size })
}

/// The kernel's checks of a copy with an emulated end, in the kernel's
/// order, before the library copies: without them the library copied
/// what the kernel refuses (to an `O_APPEND` file, between two files with
/// `splice`, overlapping ranges of one file) and, reading from a pipe the
/// kernel would refuse, blocked for ever.
unsafe fn copy_checks(kind: CopyKind, i: c_int, io: *const i64, o: c_int, oo: *const i64, n: size_t) -> Result<(), Errno> {
    let (a, b) = (copy_end(i)?, copy_end(o)?);
    let (reads, writes) = (a.flags & libc::O_ACCMODE != libc::O_WRONLY, b.flags & libc::O_ACCMODE != libc::O_RDONLY);
    let append = b.flags & libc::O_APPEND != 0;
    let fifo = |e: &CopyEnd| e.mode == libc::S_IFIFO;
    match kind {
        CopyKind::CopyFileRange => {
            if a.mode == libc::S_IFDIR || b.mode == libc::S_IFDIR {
                return Err(libc::EISDIR);
            }
            if a.mode != libc::S_IFREG || b.mode != libc::S_IFREG {
                return Err(libc::EINVAL);
            }
            if !reads || !writes || append {
                return Err(libc::EBADF);
            }
            // SAFETY: the caller's offset pointers, null or valid; lseek
            // through the hook reads an emulated descriptor's offset.
            let (pin, pout) = unsafe {
                (
                    if io.is_null() { lseek(i, 0, libc::SEEK_CUR) } else { *io },
                    if oo.is_null() { lseek(o, 0, libc::SEEK_CUR) } else { *oo },
                )
            };
            if pin < 0 || pout < 0 {
                return Err(libc::EOVERFLOW);
            }
            let count = if pin >= a.size { 0 } else { (n as u64).min((a.size - pin) as u64) as i64 };
            if (a.dev, a.ino) == (b.dev, b.ino) && pout + count > pin && pout < pin + count {
                return Err(libc::EINVAL);
            }
        }
        CopyKind::Sendfile => {
            if !reads || !writes {
                return Err(libc::EBADF);
            }
            if append || a.mode != libc::S_IFREG {
                return Err(libc::EINVAL);
            }
        }
        CopyKind::Splice => {
            if !fifo(&a) && !fifo(&b) {
                return Err(libc::EINVAL);
            }
            if (fifo(&a) && !io.is_null()) || (fifo(&b) && !oo.is_null()) {
                return Err(libc::ESPIPE);
            }
            if !reads || !writes {
                return Err(libc::EBADF);
            }
            if append {
                return Err(libc::EINVAL);
            }
        }
    }
    Ok(())
}

/// Checks a copy with an emulated end as the kernel would, then copies in
/// the library (`nowait`: see [`user_copy`]).
unsafe fn checked_copy(kind: CopyKind, i: c_int, io: *mut i64, o: c_int, oo: *mut i64, n: size_t, nowait: bool) -> ssize_t {
    // SAFETY: the caller's arguments (the kernel's contract).
    if let Err(e) = unsafe { copy_checks(kind, i, io, o, oo, n) } {
        set_errno(e);
        return -1;
    }
    // SAFETY: the caller's arguments (the kernel's contract).
    unsafe { user_copy(i, io, o, oo, n, nowait) }
}

/// `copy_file_range(2)`.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(i: c_int, io: *mut i64, o: c_int, oo: *mut i64, n: size_t, fl: c_uint) -> ssize_t {
    if either_emulated(i, o) {
        if fl != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's arguments (the kernel's contract).
        return unsafe { checked_copy(CopyKind::CopyFileRange, i, io, o, oo, n, false) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::copy_file_range()(i, io, o, oo, n, fl) }
}
/// `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if either_emulated(i, o) {
        // SAFETY: the caller's arguments (the kernel's contract); the output's offset moves.
        return unsafe { checked_copy(CopyKind::Sendfile, i, off, o, std::ptr::null_mut(), n, false) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::sendfile()(o, i, off, n) }
}
/// `sendfile64(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile64(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if either_emulated(i, o) {
        // SAFETY: the caller's arguments (the kernel's contract); the output's offset moves.
        return unsafe { checked_copy(CopyKind::Sendfile, i, off, o, std::ptr::null_mut(), n, false) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::sendfile64()(o, i, off, n) }
}
/// `splice(2)`.
#[no_mangle]
pub unsafe extern "C" fn splice(i: c_int, io: *mut i64, o: c_int, oo: *mut i64, n: size_t, fl: c_uint) -> ssize_t {
    if either_emulated(i, o) {
        // A flag the kernel does not know is refused first (after a length
        // of 0, which is nothing to do): it was ignored, and the splice
        // copied. SPLICE_F_MOVE, SPLICE_F_MORE and SPLICE_F_GIFT are
        // hints; SPLICE_F_NONBLOCK keeps the pipe end from waiting (an
        // empty or full pipe waited for ever where the kernel answers
        // EAGAIN).
        let known = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MORE | libc::SPLICE_F_GIFT;
        if n != 0 && fl & !known != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's arguments (the kernel's contract).
        return unsafe { checked_copy(CopyKind::Splice, i, io, o, oo, n, fl & libc::SPLICE_F_NONBLOCK != 0) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::splice()(i, io, o, oo, n, fl) }
}

// ---- names -------------------------------------------------------------------

fn fill_stat(s: &StatInfo, out: *mut libc::stat) {
    // SAFETY: the caller's stat buffer; every field is plain data.
    let st = unsafe { &mut *out };
    // SAFETY: all-zero is a valid struct stat (plain integers).
    *st = unsafe { std::mem::zeroed() };
    st.st_dev = s.dev;
    st.st_ino = s.ino;
    st.st_mode = s.mode;
    st.st_nlink = s.nlink;
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = s.rdev;
    st.st_size = s.size;
    st.st_blksize = s.blksize;
    st.st_blocks = s.blocks;
    st.st_atime = s.atime.0;
    st.st_atime_nsec = s.atime.1;
    st.st_mtime = s.mtime.0;
    st.st_mtime_nsec = s.mtime.1;
    st.st_ctime = s.ctime.0;
    st.st_ctime_nsec = s.ctime.1;
}

/// Serves a name call when `path` (relative to `dirfd`) is under the
/// served root.
fn by_name(dirfd: c_int, path: *const c_char, f: impl FnOnce(&ferry::emulation::Client, &str) -> Result<(), Errno>) -> Option<c_int> {
    let _b = state::enter_for_copy()?;
    let e = emul()?;
    let mut signals = None;
    // SAFETY: the caller's path.
    let rel = state::beneath(e, dirfd, unsafe { cstr(path) }?, &mut signals)?;
    match f(&e.client, &rel) {
        // Out of the served tree through a symbolic link (or across file
        // systems, where the kernel says the same): the kernel decides.
        Err(libc::EXDEV) => None,
        r => Some(ret_int(r)),
    }
}

fn stat_impl(dirfd: c_int, path: *const c_char, out: *mut libc::stat, nofollow: bool) -> Option<c_int> {
    by_name(dirfd, path, |c, rel| {
        let s = c.stat(rel, nofollow)?;
        if out.is_null() {
            // As the kernel answers a null buffer (writing there crashed).
            return Err(libc::EFAULT);
        }
        fill_stat(&s, out);
        Ok(())
    })
}

/// `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    stat_impl(libc::AT_FDCWD, path, out, false).unwrap_or_else(|| unsafe { real::stat()(path, out) })
}
/// `stat64(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    stat_impl(libc::AT_FDCWD, path, out, false).unwrap_or_else(|| unsafe { real::stat64()(path, out) })
}
/// `lstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    stat_impl(libc::AT_FDCWD, path, out, true).unwrap_or_else(|| unsafe { real::lstat()(path, out) })
}
/// `lstat64(2)`.
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    stat_impl(libc::AT_FDCWD, path, out, true).unwrap_or_else(|| unsafe { real::lstat64()(path, out) })
}
/// The flags of `fstatat` the server's answer covers. With any other the
/// call is the kernel's, which refuses one it does not take (`EINVAL`):
/// unknown flags were ignored and the call answered 0.
const STAT_FLAGS: c_int = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT;

fn fstatat_impl(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> Option<c_int> {
    if flags & !STAT_FLAGS != 0 {
        return None;
    }
    if flags & libc::AT_EMPTY_PATH != 0 {
        // SAFETY: the caller's path.
        if unsafe { cstr(path) }.is_none_or(|p| p.is_empty()) {
            return None;
        }
    }
    stat_impl(dirfd, path, out, flags & libc::AT_SYMLINK_NOFOLLOW != 0)
}
/// `fstatat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstatat(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    fstatat_impl(dirfd, path, out, flags).unwrap_or_else(|| unsafe { real::fstatat()(dirfd, path, out, flags) })
}
/// `fstatat64(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstatat64(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    fstatat_impl(dirfd, path, out, flags).unwrap_or_else(|| unsafe { real::fstatat64()(dirfd, path, out, flags) })
}

/// `unlink(2)`.
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    by_name(libc::AT_FDCWD, path, |c, r| c.unlink(r, false)).unwrap_or_else(|| unsafe { real::unlink()(path) })
}
/// Whether the kernel lets this process link a file it opened itself by
/// its descriptor (`linkat` with `AT_EMPTY_PATH`): since Linux 6.10 it
/// does for a file opened with the process's present credentials, before
/// only with `CAP_DAC_READ_SEARCH`. Asked of the kernel with a descriptor
/// of the root opened here, linked to the root's own name: refused, the
/// descriptor's lookup fails with `ENOENT`; allowed, the new name's with
/// `EEXIST`. Nothing is ever made.
fn may_link_own_opens() -> bool {
    let Ok(root) = rustix::fs::open("/", rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty()) else {
        return false;
    };
    let r = rustix::fs::linkat(&root, "", rustix::fs::CWD, "/", rustix::fs::AtFlags::EMPTY_PATH);
    r == Err(rustix::io::Errno::EXIST)
}

/// `linkat(2)`. A link to an emulated descriptor's file by the
/// descriptor (`AT_EMPTY_PATH` and an empty name) is made from the
/// descriptor's `/proc/self/fd` name, when the kernel would let the
/// program link a file it opened itself ([`may_link_own_opens`]): the
/// kernel allows such a link only for a file opened with the caller's
/// credentials, and the server opened this one, so another user's link
/// of a file it had just opened failed with `ENOENT` where natively it
/// was made. The kernel still checks the link itself (an existing name,
/// `fs.protected_hardlinks`).
#[no_mangle]
pub unsafe extern "C" fn linkat(olddirfd: c_int, oldpath: *const c_char, newdirfd: c_int, newpath: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's name, read up to its NUL.
    let by_descriptor = flags & libc::AT_EMPTY_PATH != 0 && unsafe { cstr(oldpath) }.is_some_and(|p| p.is_empty());
    // Any other flag is the kernel's to refuse.
    if by_descriptor && flags & !(libc::AT_EMPTY_PATH | libc::AT_SYMLINK_FOLLOW) == 0 {
        if let Some((_f, _b)) = emulated(olddirfd) {
            if may_link_own_opens() {
                let name = format!("/proc/self/fd/{olddirfd}\0");
                // SAFETY: our NUL-terminated name; the caller's new name.
                return unsafe { real::linkat()(libc::AT_FDCWD, name.as_ptr().cast(), newdirfd, newpath, libc::AT_SYMLINK_FOLLOW) };
            }
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::linkat()(olddirfd, oldpath, newdirfd, newpath, flags) }
}

/// `unlinkat(2)`.
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let dir = flags & libc::AT_REMOVEDIR != 0;
    // Any flag but AT_REMOVEDIR is the kernel's to refuse (EINVAL): it
    // was ignored, and `unlinkat(dirfd, name, 1)` removed the file.
    let served = if flags & !libc::AT_REMOVEDIR == 0 { by_name(dirfd, path, |c, r| c.unlink(r, dir)) } else { None };
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    served.unwrap_or_else(|| unsafe { real::unlinkat()(dirfd, path, flags) })
}
/// `rmdir(2)`.
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    by_name(libc::AT_FDCWD, path, |c, r| c.unlink(r, true)).unwrap_or_else(|| unsafe { real::rmdir()(path) })
}
/// `mkdir(2)`.
#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    let m = ferry::emulation::creation_mode(mode, current_umask());
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    by_name(libc::AT_FDCWD, path, |c, r| c.mkdir(r, m)).unwrap_or_else(|| unsafe { real::mkdir()(path, mode) })
}
/// `mkdirat(2)`.
#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    let m = ferry::emulation::creation_mode(mode, current_umask());
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    by_name(dirfd, path, |c, r| c.mkdir(r, m)).unwrap_or_else(|| unsafe { real::mkdirat()(dirfd, path, mode) })
}

/// `chroot(2)`. The names the program uses after it are the new root's:
/// the emulation is set up first (so that it knows where the served
/// directory's name led before), and once the root has changed, names
/// stop being served unless that name still leads to the same directory
/// (`state::root_changed`). The library went on serving them from the old
/// root, so a program in a jail read and created files outside it.
#[no_mangle]
pub unsafe extern "C" fn chroot(path: *const c_char) -> c_int {
    let e = enter().and_then(|_b| emul());
    // SAFETY: the caller's argument, passed on unchanged to the C library's own function.
    let r = unsafe { real::chroot()(path) };
    if r == 0 {
        if let (Some(e), Some(_b)) = (e, enter()) {
            state::root_changed(e);
        }
    }
    r
}

/// `unshare(2)`. A process that takes a mount namespace of its own
/// (`CLONE_NEWNS`) may mount other file systems under the served
/// directory, which the server, in its own namespace, does not see, and
/// one in a user namespace of its own (`CLONE_NEWUSER`) holds
/// capabilities there that only its kernel weighs: its names are the
/// kernel's from then on (`state::mounts_changed`). The
/// library went on serving them, so files written under a program's own
/// mount went to the directory beneath it.
#[no_mangle]
pub unsafe extern "C" fn unshare(flags: c_int) -> c_int {
    let e = enter().and_then(|_b| emul());
    // SAFETY: the caller's argument, passed on unchanged to the C library's own function.
    let r = unsafe { real::unshare()(flags) };
    if r == 0 && flags & (libc::CLONE_NEWNS | libc::CLONE_NEWUSER) != 0 {
        if let (Some(e), Some(_b)) = (e, enter()) {
            state::mounts_changed(e);
        }
    }
    r
}

/// `setns(2)`. Into another mount or user namespace (`CLONE_NEWNS`,
/// `CLONE_NEWUSER`, or any kind with `nstype` 0 or a process's
/// descriptor): names are served only while both are the server's, as
/// after `unshare`.
#[no_mangle]
pub unsafe extern "C" fn setns(fd: c_int, nstype: c_int) -> c_int {
    let e = enter().and_then(|_b| emul());
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::setns()(fd, nstype) };
    if r == 0 && (nstype == 0 || nstype & (libc::CLONE_NEWNS | libc::CLONE_NEWUSER) != 0) {
        if let (Some(e), Some(_b)) = (e, enter()) {
            state::mounts_changed(e);
        }
    }
    r
}

/// Renames through the server when both names are under the root. A
/// rename with one name outside the root, or one the server cannot do
/// beneath it (the root itself, a name through a link out of the tree:
/// `EXDEV`), is the kernel's, as it would be without the library: both
/// names are on the program's own file systems, and the server keeps
/// nothing by name. (It used to fail with `EXDEV`: `mv` copies then, but
/// Python's `os.replace` from a temporary directory into the tree failed.)
fn rename_impl(fd1: c_int, p1: *const c_char, fd2: c_int, p2: *const c_char) -> Option<c_int> {
    let _b = state::enter_for_copy()?;
    let e = emul()?;
    let mut signals = None;
    // SAFETY: the caller's paths.
    let (a, b) = unsafe { (cstr(p1)?, cstr(p2)?) };
    let (x, y) = (state::beneath(e, fd1, a, &mut signals)?, state::beneath(e, fd2, b, &mut signals)?);
    match e.client.rename(&x, &y) {
        Err(libc::EXDEV) => None,
        r => Some(ret_int(r)),
    }
}
/// `rename(2)`.
#[no_mangle]
pub unsafe extern "C" fn rename(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    rename_impl(libc::AT_FDCWD, a, libc::AT_FDCWD, b).unwrap_or_else(|| unsafe { real::rename()(a, b) })
}
/// `renameat(2)`.
#[no_mangle]
pub unsafe extern "C" fn renameat(d1: c_int, a: *const c_char, d2: c_int, b: *const c_char) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    rename_impl(d1, a, d2, b).unwrap_or_else(|| unsafe { real::renameat()(d1, a, d2, b) })
}
/// `renameat2(2)`: without flags through the server; with flags (no
/// replace, exchange) through the kernel.
#[no_mangle]
pub unsafe extern "C" fn renameat2(d1: c_int, a: *const c_char, d2: c_int, b: *const c_char, fl: c_uint) -> c_int {
    if fl == 0 {
        if let Some(r) = rename_impl(d1, a, d2, b) {
            return r;
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::renameat2()(d1, a, d2, b, fl) }
}

// ---- vfork: a fork ------------------------------------------------------------

/// `vfork(2)`, done as `fork`: a child of `vfork` shares the parent's
/// memory until it execs, so the `dup2` and `close` with which it sets up
/// its descriptors (Python's `subprocess` does this) would change the
/// parent's table of emulated descriptors: the parent's next `print`
/// went to the child's output file. POSIX lets `vfork` be a `fork`, and
/// the children of `vfork` do only what is safe after a `fork`. (A wrapper
/// cannot call the real `vfork` and return: the child would return
/// through the wrapper's frame and the parent resume in a frame the child
/// overwrote.)
#[no_mangle]
pub extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: this library's `fork`, below.
    unsafe { fork() }
}

/// `fork(2)`: the library's set-up finishes first. A `fork` while another
/// thread was setting the library up (its first file call) left the
/// child waiting for ever on a set-up that thread, absent in the child,
/// would never finish: a program whose threads start with file calls
/// while another forks hung its children. Waiting here for the set-up
/// also registers the handlers that keep the table of descriptors whole
/// across the fork.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    if let Some(_b) = enter() {
        let _ = emul();
    }
    // SAFETY: the C library's own fork, which takes no arguments and runs
    // the fork handlers (the library's among them, which record the
    // child's pid).
    unsafe { real::fork()() }
}


// ---- descriptors passed to other processes -----------------------------------

/// Hands the offsets of the emulated files among the descriptors `msg`
/// passes (`SCM_RIGHTS`) to the kernel, as before `exec`: the process that
/// receives one reads and writes at the kernel's offset, which this
/// process shares from then on (the receiver used to start at 0 and write
/// over what this process had written).
///
/// # Safety
/// `msg` is null or a `msghdr` the caller passes to `sendmsg`.
unsafe fn hand_passed_offsets(msg: *const libc::msghdr) {
    if msg.is_null() {
        return;
    }
    // SAFETY: the caller's message, read as the kernel will read it: its
    // control buffer's headers walked with the C library's macros, which
    // stay within `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let fds = libc::CMSG_DATA(c).cast::<c_int>();
                for i in 0..bytes / std::mem::size_of::<c_int>() {
                    if let Some((f, _b)) = emulated(fds.add(i).read_unaligned()) {
                        f.hand_offset_to_kernel();
                    }
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

/// `sendmsg(2)`: see [`hand_passed_offsets`].
#[no_mangle]
pub unsafe extern "C" fn sendmsg(sock: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments; then passed on unchanged to the C library's own function.
    unsafe {
        hand_passed_offsets(msg);
        real::sendmsg()(sock, msg, flags)
    }
}

/// `sendmmsg(2)`: see [`hand_passed_offsets`].
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(sock: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int) -> c_int {
    if !msgs.is_null() {
        for i in 0..n as usize {
            // SAFETY: the caller's `n` messages; each header is read only.
            unsafe { hand_passed_offsets(&raw const (*msgs.add(i)).msg_hdr) };
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::sendmmsg()(sock, msgs, n, flags) }
}

// ---- children: what they left open is closed once they are reaped -----------

/// Set when a `wait` call reported a child: the server may still hold
/// files the child left open (see [`settle_reaped`]).
static REAPED: AtomicBool = AtomicBool::new(false);

/// After a child was reported by a `wait` call (often made in a `SIGCHLD`
/// handler, where nothing may allocate): only notes it, for
/// [`settle_reaped`].
fn after_reaping() {
    REAPED.store(true, Ordering::Relaxed);
}

/// Before what would see the files a reaped child left open (an `exec`,
/// a lock, a lease), once after each reaping: asks the server for nothing
/// (`OP_EMUL_CLOSE` of no open file), so that the call goes on only once
/// the server has let go of those files. The kernel closes a process's
/// descriptors before its parent can reap it, but the server's own
/// descriptor of each served open file keeps the file open until the
/// server comes to the end of the file's last hold; it takes its events
/// in the order they came, so the ends of the child's holds come before
/// this request. Natively the child's files are closed when it can be
/// reaped: a script the child had written and not closed ran at once
/// (served, `execl` failed with `ETXTBSY` 3 times in 50), and an
/// open-file lock the child had left was gone (served, the parent's
/// conflicting lock was refused 47 times in 100). Called with the
/// library entered on this thread.
fn settle_reaped() {
    if REAPED.load(Ordering::Relaxed) && REAPED.swap(false, Ordering::Relaxed) {
        if let Some(e) = emul() {
            let _ = e.client.close(0);
        }
    }
}

/// [`settle_reaped`] from outside the library, `errno` kept; a load when
/// no child was reaped.
fn settle_reaped_outside() {
    if REAPED.load(Ordering::Relaxed) {
        keeping_errno(|| {
            if let Some(_b) = enter() {
                settle_reaped();
            }
        });
    }
}

/// `waitpid(2)`: see [`after_reaping`].
#[no_mangle]
pub unsafe extern "C" fn waitpid(pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::waitpid()(pid, status, options) };
    if r > 0 {
        after_reaping();
    }
    r
}
/// `wait(2)`: see [`after_reaping`].
#[no_mangle]
pub unsafe extern "C" fn wait(status: *mut c_int) -> libc::pid_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::wait()(status) };
    if r > 0 {
        after_reaping();
    }
    r
}
/// `wait3(2)`: see [`after_reaping`].
#[no_mangle]
pub unsafe extern "C" fn wait3(status: *mut c_int, options: c_int, usage: *mut libc::rusage) -> libc::pid_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::wait3()(status, options, usage) };
    if r > 0 {
        after_reaping();
    }
    r
}
/// `wait4(2)`: see [`after_reaping`].
#[no_mangle]
pub unsafe extern "C" fn wait4(pid: libc::pid_t, status: *mut c_int, options: c_int, usage: *mut libc::rusage) -> libc::pid_t {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::wait4()(pid, status, options, usage) };
    if r > 0 {
        after_reaping();
    }
    r
}
/// `waitid(2)`: see [`after_reaping`] (a child was reported when the
/// answer names one).
#[no_mangle]
pub unsafe extern "C" fn waitid(idtype: libc::idtype_t, id: libc::id_t, info: *mut libc::siginfo_t, options: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function;
    // `info` is read only after the call filled it.
    unsafe {
        let r = real::waitid()(idtype, id, info, options);
        if r == 0 && !info.is_null() && (*info).si_pid() > 0 {
            after_reaping();
        }
        r
    }
}
/// `pclose(3)`, whose wait is the C library's own: see [`after_reaping`].
#[no_mangle]
pub unsafe extern "C" fn pclose(f: *mut FILE) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::pclose()(f) };
    if r != -1 {
        after_reaping();
    }
    r
}

/// [`after_reaping`] for a child the C library waited for itself
/// (`system`).
pub(crate) fn child_reaped() {
    after_reaping();
}

/// Runs `f` and sets `errno` back to what it was: the calls above answer
/// as the C library's did.
fn keeping_errno(f: impl FnOnce()) {
    // SAFETY: the calling thread's own errno.
    let saved = unsafe { *libc::__errno_location() };
    f();
    set_errno(saved);
}

// ---- exec: the kernel's offsets take over ------------------------------------

/// Before `exec`, every emulated descriptor the new program inherits hands
/// its open file's offset to the kernel: the new program (emulated afresh
/// or not) goes on from there with plain kernel descriptors, and the
/// processes still sharing the open file use the kernel's offset from then
/// on, so that what the new program reads or seeks is seen by them. For
/// `posix_spawn` (`spawn`), whose file actions may hand on any descriptor,
/// every emulated descriptor does.
pub(crate) fn before_exec(spawn: bool) {
    let Some(_b) = enter() else { return };
    settle_reaped();
    for (fd, f) in state::all() {
        // SAFETY: reads the flags of one of the process's descriptors.
        let flags = unsafe { real::fcntl()(fd, libc::F_GETFD, 0) };
        if spawn || (flags >= 0 && flags & libc::FD_CLOEXEC == 0) {
            f.hand_offset_to_kernel();
        }
    }
}

/// `execve(2)`.
#[no_mangle]
pub unsafe extern "C" fn execve(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int {
    before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::execve()(p, a, e) }
}
/// `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(p: *const c_char, a: *const *const c_char) -> c_int {
    before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::execv()(p, a) }
}
/// `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(p: *const c_char, a: *const *const c_char) -> c_int {
    before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::execvp()(p, a) }
}
/// `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int {
    before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::execvpe()(p, a, e) }
}
/// `fexecve(3)`.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, a: *const *const c_char, e: *const *const c_char) -> c_int {
    before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fexecve()(fd, a, e) }
}
/// `execveat(2)`.
#[no_mangle]
pub unsafe extern "C" fn execveat(dir: c_int, p: *const c_char, a: *const *const c_char, e: *const *const c_char, flags: c_int) -> c_int {
    before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::execveat()(dir, p, a, e, flags) }
}
/// `posix_spawn(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    p: *const c_char,
    fa: *const c_void,
    at: *const c_void,
    a: *const *mut c_char,
    e: *const *mut c_char,
) -> c_int {
    before_exec(true);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::posix_spawn()(pid, p, fa, at, a, e) }
}
/// `posix_spawnp(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    p: *const c_char,
    fa: *const c_void,
    at: *const c_void,
    a: *const *mut c_char,
    e: *const *mut c_char,
) -> c_int {
    before_exec(true);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::posix_spawnp()(pid, p, fa, at, a, e) }
}
