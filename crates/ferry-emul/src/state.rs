//! The library's process-wide state: the connection to the emulation
//! server, the served root, the table of emulated descriptors, the cached
//! pid, and the per-thread guard against re-entry
//! (the library's own code calls C functions that are themselves caught
//! here; inside the library they pass straight through).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard, OnceLock};

use ferry::emulation::Client;

use crate::file::File;

/// The connection and settings of an emulated process.
pub struct Emul {
    /// The client of the emulation server.
    pub client: Client,
    /// The served directory, absolute, without a trailing slash.
    pub root: String,
    /// Bytes per mapped window (a power of two, at least a page).
    pub window: usize,
    /// Whether a window is populated when mapped (`MAP_POPULATE`) rather
    /// than faulted in as it is read (`FERRY_EMUL_POPULATE=1`).
    pub populate: bool,
    /// Whether `FILE` objects made here may carry their descriptor in the
    /// C library's `_fileno` field (checked against the running library).
    pub fileno_patch: bool,
    /// The served directory's device and inode as its name led to them
    /// when the emulation was set up, to tell after a `chroot` whether the
    /// name still leads there.
    pub root_id: Option<(u64, u64)>,
    /// The mount namespace the server resolves names in, as announced
    /// ([`ferry::emulation::ENV_MOUNTS`]) when the emulation was set up.
    pub mounts: Option<String>,
    /// The user namespace the server acts in, as announced
    /// ([`ferry::emulation::ENV_USERS`]) when the emulation was set up.
    pub users: Option<String>,
}

/// Bytes per window unless `FERRY_EMUL_WINDOW` says otherwise: 1 MiB,
/// measured better than the paper's 64 KiB for cached sequential reads
/// (the cost of moving a window is nearly independent of its size when
/// pages are faulted in as read; see docs/emulation.md).
pub const DEFAULT_WINDOW: usize = 1 << 20;

static EMUL: OnceLock<Option<Emul>> = OnceLock::new();
static PID: AtomicI32 = AtomicI32::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Set once a `chroot` has taken the served directory's name away from
/// it: no name is served from then on.
static NAMES_GONE: AtomicBool = AtomicBool::new(false);
/// Set while the process is in another mount or user namespace than the
/// server's: no name is served meanwhile (see [`mounts_changed`]).
static OTHER_MOUNTS: AtomicBool = AtomicBool::new(false);

/// [`BUSY`]: this thread is not inside the library.
const OUT: u8 = 0;
/// [`BUSY`]: this thread is inside the library.
const INSIDE: u8 = 1;
/// [`BUSY`]: a signal handler left this thread's call into the library by
/// a jump (see [`jumping`]).
const LEFT: u8 = 2;

thread_local! {
    /// Whether this thread is inside the library: [`OUT`], [`INSIDE`] or
    /// [`LEFT`].
    static BUSY: Cell<u8> = const { Cell::new(OUT) };
}

/// The guard of one call being served by the library on this thread.
pub struct Busy {
    /// The thread's signals, held for the call unless it only copies.
    _held: Option<ferry::emulation::SignalsHeld>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(OUT));
    }
}

/// Enters the library on this thread; `None` if it is already inside (the
/// call then passes through: a call the library's own code makes, or a
/// signal handler's that came while the thread was inside).
///
/// Not when a handler left the call it interrupted by a jump
/// (`siglongjmp`, the classic time limit on a call with `alarm`): that
/// call's guard never ran, and the thread was taken for inside for good,
/// so every later call of it went past the library to the kernel (a read
/// of an emulated file read another descriptor's bytes). The next call
/// enters; what the left call held (its window, the token) is taken over
/// by this thread's next use of it (see [`thread_mark`]).
///
/// The thread's signals are held until the call returns: the call may
/// allocate, take the table's lock or ask the server, none of which a
/// handler may leave half done by a jump (a jump out of `malloc` left the
/// C library's heap broken, and the program's next allocation aborted).
pub fn enter() -> Option<Busy> {
    let mut busy = enter_for_copy()?;
    busy._held = Some(ferry::emulation::hold_signals());
    Some(busy)
}

/// [`enter`], for a call that only copies between the program and an
/// emulated file's window (a read, a write, a seek): it allocates
/// nothing, and the locks it takes are taken over by its thread after a
/// jump (see [`thread_mark`]), so no signal is held, which would cost two
/// system calls a call.
pub fn enter_for_copy() -> Option<Busy> {
    BUSY.with(|b| match b.replace(INSIDE) {
        OUT => Some(Busy { _held: None }),
        LEFT => {
            ferry::emulation::forget_held_signals();
            Some(Busy { _held: None })
        }
        _ => None,
    })
}

/// Called on a jump (`longjmp` and its kin) of this thread: one made while
/// it is inside the library can only come from a signal handler that
/// interrupted the library (the library makes none, and calls no code of
/// the program), and leaves the call, unless the handler jumps within
/// itself (which it may, but then makes no call into the library before
/// returning, or the call passes through as a handler's would).
pub fn jumping() {
    crate::table::left_by_jump();
    let _ = BUSY.try_with(|b| {
        if b.get() == INSIDE {
            b.set(LEFT);
        }
    });
}

/// A nonzero number naming this thread among the live threads of the
/// process (`pthread_self`; a child of `fork` keeps the forking thread's).
/// A lock the library stamps with it and finds stamped so when this
/// thread takes it again was left held by a call of this thread that a
/// handler left by `siglongjmp`: the library never takes its locks again
/// from inside itself (a nested call passes through, [`enter`]), so no
/// frame of this thread still holds it.
pub fn thread_mark() -> usize {
    // SAFETY: pthread_self takes no arguments and cannot fail.
    unsafe { libc::pthread_self() as usize }
}

thread_local! {
    /// The table's lock, held by the forking thread across `fork`, and the
    /// thread's signal mask from before it.
    static FORKING: RefCell<Option<(MutexGuard<'static, ()>, libc::sigset_t)>> = const { RefCell::new(None) };
}

/// Before `fork`: the table's lock is taken, so that no other thread of
/// the process is changing the table when the child is made (a child
/// copies the lock as it was, and one held by a thread the child does not
/// have would never be released there: the child's next open, close or
/// exec hung). Not when this thread is inside the library already (a
/// `fork` from a signal handler), where the lock may be its own. Signals
/// are blocked on this thread meanwhile: a handler that made a file call
/// while the lock was held here waited for it for ever (`open` is
/// async-signal-safe); it runs once the lock is given back.
extern "C" fn before_fork() {
    if BUSY.with(|b| b.get() != OUT) {
        return;
    }
    // SAFETY: plain signal-set calls on sets of this frame.
    let old = unsafe {
        let mut all = std::mem::zeroed::<libc::sigset_t>();
        let mut old = std::mem::zeroed::<libc::sigset_t>();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    };
    let guard = crate::table::hold_writers();
    let _ = FORKING.try_with(|f| *f.borrow_mut() = Some((guard, old)));
}

/// After `fork`: the table's lock goes, then the signal mask is what it
/// was before.
fn fork_done() {
    if let Ok(Some((guard, old))) = FORKING.try_with(|f| f.borrow_mut().take()) {
        drop(guard);
        // SAFETY: restores the mask saved in `before_fork`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
}

/// After `fork`, in the parent.
extern "C" fn after_fork_in_parent() {
    fork_done();
}

extern "C" fn after_fork_in_child() {
    // SAFETY: getpid takes no arguments and cannot fail.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    crate::table::forget_other_threads();
    // The child's copy of the lock, held by this same thread, goes (after
    // the pid is the child's, for a handler that runs at once).
    fork_done();
}

/// The emulation, set up on first use (`None`: this process is not
/// emulated, everything passes through). Call with [`enter`] held.
pub fn emul() -> Option<&'static Emul> {
    EMUL.get_or_init(|| {
        // Set up once, with allocation: a handler's jump must not leave it
        // half done (see `enter`).
        let _held = ferry::emulation::hold_signals();
        if shares_parent_memory() {
            // A child of a raw `clone(CLONE_VM)` (no `fork`): this state
            // is its parent's as well, and the descriptors set up here
            // would be the child's alone. Neither is emulated.
            return None;
        }
        let root = std::env::var(ferry::emulation::ENV_ROOT).ok()?;
        let root = root.trim_end_matches('/').to_owned();
        if !root.starts_with('/') {
            return None;
        }
        let client = Client::from_env()?;
        let window = std::env::var("FERRY_EMUL_WINDOW")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|w| w.is_power_of_two() && *w >= 4096)
            .unwrap_or(DEFAULT_WINDOW);
        PID.store(rustix::process::getpid().as_raw_nonzero().get(), Ordering::Relaxed);
        crate::fault::install();
        // SAFETY: registers handlers that take and release the table's
        // lock around fork and store the child's pid.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child)) };
        let populate = std::env::var("FERRY_EMUL_POPULATE").is_ok_and(|v| v == "1");
        let root_id = identity(&root);
        let e = Emul { client, root, window, populate, fileno_patch: crate::hooks::check_fileno_patch(), root_id, mounts: std::env::var(ferry::emulation::ENV_MOUNTS).ok(), users: std::env::var(ferry::emulation::ENV_USERS).ok() };
        mounts_changed(&e);
        Some(e)
    })
    .as_ref()
}

/// The device and inode the name `path` leads to, if any.
fn identity(path: &str) -> Option<(u64, u64)> {
    let st = rustix::fs::stat(path).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// After the process changed its root directory (`chroot`): names are
/// the new root's, so unless the served directory's name still leads to
/// the served directory (a `chroot("/")`, or a jail where it is mounted
/// at the same name), no name is served any more; descriptors opened
/// before stay served, as the kernel keeps them open.
pub fn root_changed(e: &Emul) {
    if e.root_id.is_none() || identity(&e.root) != e.root_id {
        NAMES_GONE.store(true, Ordering::Relaxed);
    }
}

/// At set-up and after the process changed its mount namespace
/// (`unshare`, `setns`): in another namespace than the server's, the
/// file systems under the served directory may be others (a program's own
/// `mount` there is not the server's to see), so its names are the
/// kernel's until the process is back in the server's namespace;
/// descriptors opened before stay served, as the kernel keeps them open.
/// When either namespace is unknown, names are served as before.
///
/// The same goes for a user namespace (`unshare -r`, `CLONE_NEWUSER`):
/// there the process holds capabilities over the files of the users the
/// namespace maps, which only its own kernel weighs. Served as its user
/// with none, a program that `unshare -r` made root of its namespace was
/// refused its own user's files of mode 000, which natively it reads (a
/// server run by root refuses such a program's names itself).
pub fn mounts_changed(e: &Emul) {
    let differs = |server: &Option<String>, own: fn() -> Option<String>| server.as_ref().is_some_and(|server| own().is_some_and(|own| own != *server));
    let other = differs(&e.mounts, ferry::emulation::mount_namespace) || differs(&e.users, ferry::emulation::user_namespace);
    OTHER_MOUNTS.store(other, Ordering::Relaxed);
}

/// Whether this process shares its memory with its parent (`kcmp`
/// with `KCMP_VM`): a child of a raw `clone(CLONE_VM)`, running in its
/// parent's memory until it execs. False when the kernel cannot say.
fn shares_parent_memory() -> bool {
    /// `kcmp`'s comparison of two processes' memory (linux/kcmp.h).
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp compares two processes by pid and touches no memory of
    // ours; getpid and getppid cannot fail.
    unsafe { libc::syscall(libc::SYS_kcmp, libc::getpid() as libc::c_long, libc::getppid() as libc::c_long, KCMP_VM, 0 as libc::c_long, 0 as libc::c_long) == 0 }
}

/// This process's pid, kept without a system call.
pub fn pid() -> i32 {
    PID.load(Ordering::Relaxed)
}

/// Whether this is not the process the library's memory belongs to: a
/// child made by a raw `clone` (no `fork`, so no fork handler told the
/// library), which with `CLONE_VM` shares the parent's memory, and with it
/// the table of descriptors, but has a table of descriptors of its own in
/// the kernel. Asked of the kernel (one system call), so only on paths
/// that change the table.
pub fn foreign() -> bool {
    let me = pid();
    me != 0 && rustix::process::getpid().as_raw_nonzero().get() != me
}

/// The emulated open file behind descriptor `fd`, if any: read without a
/// lock (see `crate::table`), and while no descriptor is emulated,
/// unrelated calls cost one load.
pub fn get(fd: i32) -> Option<Arc<File>> {
    if fd < 0 || COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    crate::table::read(|t| t.get(fd as usize)?.clone())
}

/// Records `fd` as a descriptor of `file`.
///
/// Standard input, output and error hand the open file's offset to the
/// kernel (`File::hand_offset_to_kernel`): the C library's own streams on
/// them (`printf`, `fwrite` to `stdout`, `scanf`) write and read with
/// internal system calls the library never sees, which move the kernel's
/// offset only.
pub fn set(fd: i32, file: Arc<File>) {
    if fd < 0 {
        return;
    }
    if foreign() {
        // Another process's table (a raw `clone` child's): its numbers
        // are not this one's.
        return;
    }
    if fd <= 2 {
        file.hand_offset_to_kernel();
    }
    let old = crate::table::write(|t| {
        if t.len() <= fd as usize {
            t.resize(fd as usize + 1, None);
        }
        let old = t[fd as usize].replace(file);
        if old.is_none() {
            COUNT.fetch_add(1, Ordering::Relaxed);
        }
        old
    });
    // The file this number stood for goes (perhaps for good) with the
    // thread's signals held, as the table's changes are.
    let _held = ferry::emulation::hold_signals();
    drop(old);
}

/// Forgets descriptor `fd`; returns its open file if it was emulated.
pub fn take(fd: i32) -> Option<Arc<File>> {
    if fd < 0 || COUNT.load(Ordering::Relaxed) == 0 || get(fd).is_none() {
        return None;
    }
    if foreign() {
        // A raw `clone` child closing or replacing its own copy of the
        // descriptor: the parent's stays emulated.
        return None;
    }
    crate::table::write(|t| {
        let f = t.get_mut(fd as usize)?.take();
        if f.is_some() {
            COUNT.fetch_sub(1, Ordering::Relaxed);
        }
        f
    })
}

/// Every emulated descriptor and its open file.
pub fn all() -> Vec<(i32, Arc<File>)> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    // The list is allocated: with the thread's signals held.
    let _held = ferry::emulation::hold_signals();
    crate::table::read(|t| t.iter().enumerate().filter_map(|(i, f)| f.clone().map(|f| (i as i32, f))).collect())
}

/// The working directory, asked of the kernel at each call: a cached one
/// went stale when the directory was renamed (by this process or any
/// other) and names relative to it went to the old name.
fn cwd() -> Option<String> {
    let p = rustix::process::getcwd(Vec::new()).ok()?;
    Some(p.to_str().ok()?.to_owned())
}

/// The name beneath `root` that the absolute `full` denotes, or `None`
/// when it does not lead there.
///
/// Only the part of the name up to `root` is taken apart by name (`.`,
/// `..` and repeated slashes), to tell whether the name goes through the
/// served directory at all; so is a `..` right at the root, which leaves
/// it (the root is a real directory, named canonically). What follows is
/// kept as the program spelled it, for the server to resolve beneath the
/// root as the kernel would: `link/../f` goes to the parent of the link's
/// target, not to `f`; `file/`, `file/.` and `missing/../f` fail as they
/// do natively; a `..` further down that climbs out of the root is
/// refused by the server (`EXDEV`) and the call is the kernel's.
fn split_at_root(root: &str, full: &str) -> Option<String> {
    let root: Vec<&str> = root.split('/').filter(|p| !p.is_empty()).collect();
    let mut parts: Vec<&str> = Vec::new();
    let mut rest = full;
    loop {
        let r = rest.trim_start_matches('/');
        let (head, tail) = match r.find('/') {
            Some(i) => (&r[..i], &r[i..]),
            None => (r, ""),
        };
        let at_root = parts == root;
        match head {
            "" if at_root => return Some(String::new()),
            "" => return None,
            "." => {}
            ".." => {
                parts.pop();
            }
            // The name so far is the root: what is left is beneath it,
            // spelled as the program spelled it.
            _ if at_root => return Some(r.to_owned()),
            p => parts.push(p),
        }
        rest = tail;
    }
}

/// The name beneath the served root that `path` (relative to `dirfd`)
/// denotes, or `None` when it is outside (the call then passes through).
/// The empty string is the root itself.
///
/// A name that may lead beneath the root is worked on with the thread's
/// signals held, from here until `held` goes (the caller keeps it for the
/// rest of the call): what follows allocates, and a handler that left the
/// call by a jump out of `malloc` left the C library's heap broken. A name
/// that cannot lead there (most names a program opens: the system's
/// files) is told apart first, without allocating, and holds nothing.
pub fn beneath(e: &Emul, dirfd: i32, path: &[u8], held: &mut Option<ferry::emulation::SignalsHeld>) -> Option<String> {
    // After a `chroot` away from it, the served directory has no name;
    // in another mount namespace, names are that namespace's.
    if NAMES_GONE.load(Ordering::Relaxed) || OTHER_MOUNTS.load(Ordering::Relaxed) {
        return None;
    }
    // A name of PATH_MAX bytes or more is the kernel's to refuse
    // (ENAMETOOLONG): cut short at the root, it was served.
    if path.len() >= libc::PATH_MAX as usize {
        return None;
    }
    let path = std::str::from_utf8(path).ok()?;
    if path.is_empty() || !may_lead_beneath(&e.root, dirfd, path) {
        return None;
    }
    if held.is_none() {
        *held = Some(ferry::emulation::hold_signals());
    }
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        let base = if dirfd == libc::AT_FDCWD {
            cwd()?
        } else {
            let link = rustix::fs::readlink(format!("/proc/self/fd/{dirfd}"), Vec::new()).ok()?;
            let link = link.to_str().ok()?.to_owned();
            if link.ends_with(" (deleted)") && deleted(dirfd) {
                // A directory removed while open has no name to send:
                // the kernel resolves relative to the descriptor itself
                // (`rmdir(".")` there is EINVAL, not the ENOENT of a name).
                return None;
            }
            link
        };
        format!("{base}/{path}")
    };
    // A short name relative to a deep directory can make a name beneath
    // the root too long to resolve in one piece (ENAMETOOLONG at the
    // server): the kernel resolves it from the directory, as natively
    // (`mkdir -p` of a tree deeper than PATH_MAX stopped there).
    split_at_root(&e.root, &full).filter(|rel| rel.len() < libc::PATH_MAX as usize)
}

/// Whether `path` (relative to `dirfd`) may lead beneath `root`, told
/// without allocating: `false` only for a name whose components, from the
/// root of the file system, leave `root`'s before they end. A `..` on the
/// way, a relative name from a directory descriptor, or a working
/// directory too long for the buffer here, all say `true`; so does a
/// failure to learn the working directory.
fn may_lead_beneath(root: &str, dirfd: i32, path: &str) -> bool {
    let mut buf = [0u8; 4096];
    let base = if path.starts_with('/') {
        ""
    } else if dirfd != libc::AT_FDCWD {
        return true;
    } else {
        // SAFETY: getcwd writes at most buf.len() bytes, NUL included,
        // into the buffer of this frame, and returns null on failure.
        if unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) }.is_null() {
            return true;
        }
        let n = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
        match std::str::from_utf8(&buf[..n]) {
            Ok(cwd) => cwd,
            Err(_) => return true,
        }
    };
    let mut want = root.split('/').filter(|c| !c.is_empty());
    for c in base.split('/').chain(path.split('/')) {
        match c {
            "" | "." => continue,
            ".." => return true,
            _ => {}
        }
        match want.next() {
            // Every component of the root matched: the name is beneath it.
            None => return true,
            Some(r) if r == c => {}
            Some(_) => return false,
        }
    }
    // The name ended on the way to the root, or at it (the root itself).
    want.next().is_none()
}

/// Whether the directory `dirfd` has been removed (no link left).
fn deleted(dirfd: i32) -> bool {
    // SAFETY: a descriptor number the caller passed; borrowed for one fstat.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(dirfd) };
    rustix::fs::fstat(fd).is_ok_and(|st| st.st_nlink == 0)
}

#[cfg(test)]
mod tests {
    use super::split_at_root;

    #[test]
    fn names_are_taken_apart_only_up_to_the_root() {
        let r = "/srv/data";
        assert_eq!(split_at_root(r, "/srv/data").as_deref(), Some(""));
        assert_eq!(split_at_root(r, "/srv/data/").as_deref(), Some(""));
        assert_eq!(split_at_root(r, "/srv//./data/a/b").as_deref(), Some("a/b"));
        assert_eq!(split_at_root(r, "/srv/x/../data/f/").as_deref(), Some("f/"));
        assert_eq!(split_at_root(r, "/srv/data/link/../f").as_deref(), Some("link/../f"));
        assert_eq!(split_at_root(r, "/srv/data/f/.").as_deref(), Some("f/."));
        assert_eq!(split_at_root(r, "/srv/data/../data/f").as_deref(), Some("f"));
        assert_eq!(split_at_root(r, "/srv/data/./../x"), None);
        assert_eq!(split_at_root(r, "/srv/data/a/../../x").as_deref(), Some("a/../../x"));
        assert_eq!(split_at_root(r, "/srv/database/f"), None);
        assert_eq!(split_at_root(r, "/srv"), None);
        assert_eq!(split_at_root(r, "/elsewhere/f"), None);
        assert_eq!(split_at_root("/", "/etc/passwd").as_deref(), Some("etc/passwd"));
    }
}
