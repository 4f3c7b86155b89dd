//! Files beneath a directory, for the file server: resolving names without
//! escaping the served root and without opening special files, acting as
//! the requesting user on the serving thread so the kernel applies its own
//! permission rules, reading at offsets, and replacing a file's contents by
//! renaming a fresh inode over its name.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Uid};
use rustix::io::Errno;

/// What the file server needs to know of an open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// A regular file (not a directory, device, socket, ...).
    pub is_file: bool,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// (device, inode): which version of a name this is.
    pub identity: (u64, u64),
    /// Names (hard links) the inode has.
    pub links: u64,
    /// When the inode last changed (status change and modification times,
    /// seconds and nanoseconds): a write in place, a truncation or a
    /// `chmod` moves the status change time, so equal stamps of the same
    /// inode mean no such change in between (at the file system's timestamp
    /// granularity; Linux ≥ 6.13 makes a change after a `stat` always visible
    /// on tmpfs, ext4, XFS and Btrfs).
    pub changed: [i64; 4],
}

/// Opens `path` as a directory to serve files beneath.
pub fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
}

/// Resolves `name` beneath `root` to an `O_PATH` descriptor, refusing to
/// leave `root` (by `..`, absolute paths or symbolic links) with
/// `EXDEV`/`ELOOP`. Nothing is opened for I/O, so a FIFO, a device or a
/// socket is never opened (opening a FIFO waits for a writer); the
/// directories on the way are searched with this thread's filesystem
/// credentials (see [`ActingAs`]).
pub fn resolve_beneath(root: BorrowedFd<'_>, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        name,
        OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// `statfs` magic of procfs.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// The kernel's own file systems by `statfs` magic, whose files are made
/// up on each read and may answer by who reads them.
const PSEUDO: [(i64, &str); 11] = [
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x6265_6570, "configfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0xcafe_4a11, "bpf"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
    (PROC_SUPER_MAGIC, "proc"),
];

/// The name of the kernel's own file system `fd` is on, if it is one
/// ([`PSEUDO`]): its files are not contents to copy but the kernel's
/// answers, sized 0 or 4096 whatever they hold, some decided by the
/// opener's credentials (and the kernel resolves `/proc/self` to the
/// resolving process, letting it open its own `/proc` files whatever its
/// file-system identity). A server acting as a client must not open them
/// for it: they would be the server's.
#[allow(clippy::unnecessary_cast)] // f_type's type differs between architectures
pub fn pseudo_fs(fd: BorrowedFd<'_>) -> Option<&'static str> {
    let st = rustix::fs::fstatfs(fd).ok()?;
    PSEUDO.iter().find(|(m, _)| *m == st.f_type as i64).map(|(_, name)| *name)
}

/// Opens the inode behind `path` (an `O_PATH` descriptor of a regular file
/// the caller has checked) for reading or writing, through its
/// `/proc/self/fd` link: the same inode, whatever happened to its name
/// since, with the kernel's permission check for this thread's filesystem
/// credentials. `O_NONBLOCK|O_NOCTTY` as a second guard against special
/// files.
pub fn reopen(path: BorrowedFd<'_>, write: bool) -> rustix::io::Result<OwnedFd> {
    let access = if write { OFlags::WRONLY } else { OFlags::RDONLY };
    rustix::fs::open(
        format!("/proc/self/fd/{}", path.as_raw_fd()),
        access | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
    )
}

/// Tells when files are gone everywhere: an inotify instance (read
/// without waiting) whose watches the kernel drops, with `IN_IGNORED`,
/// once the last descriptor and the last mapping of their inode, in any
/// process, are gone. For inodes without a name (memfds), which nothing
/// can move or unlink: the watches ask for `IN_MOVE_SELF` only, which
/// never comes, so that each inode's end is one event.
#[derive(Debug)]
pub struct GoneWatch {
    fd: OwnedFd,
}

impl GoneWatch {
    /// A new inotify instance.
    pub fn new() -> rustix::io::Result<GoneWatch> {
        use rustix::fs::inotify::{init, CreateFlags};
        Ok(GoneWatch { fd: init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)? })
    }

    /// Watches the inode of `file`; returns the watch's number, which
    /// [`GoneWatch::gone`] gives once nothing holds the inode any more.
    pub fn watch(&self, file: BorrowedFd<'_>) -> rustix::io::Result<i32> {
        use rustix::fs::inotify::{add_watch, WatchFlags};
        add_watch(&self.fd, format!("/proc/self/fd/{}", file.as_raw_fd()), WatchFlags::MOVE_SELF)
    }

    /// Calls `f` with the number of each watch whose inode went since the
    /// last call, and with `None` if the kernel's queue of events
    /// overflowed (some went unreported).
    pub fn gone(&self, mut f: impl FnMut(Option<i32>)) {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut events = Reader::new(&self.fd, &mut buf);
        // Bounded: the queue holds at most `max_queued_events`.
        loop {
            match events.next() {
                Ok(e) if e.events().contains(ReadFlags::QUEUE_OVERFLOW) => f(None),
                Ok(e) if e.events().contains(ReadFlags::IGNORED) => f(Some(e.wd())),
                Ok(_) | Err(Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }
}

/// A limit of inotify's (`/proc/sys/fs/inotify/NAME`), if it can be read.
pub fn inotify_limit(name: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/proc/sys/fs/inotify/{name}")).ok()?.trim().parse().ok()
}

/// Resolves directory `name` beneath `root` to an `O_PATH` descriptor,
/// following symbolic links that stay beneath `root` (as
/// [`resolve_beneath`] does on the way to a name's last component) and
/// refusing to leave it (`EXDEV`/`ELOOP`); `ENOTDIR` for anything but a
/// directory. The directories on the way are searched with this thread's
/// filesystem credentials.
pub fn resolve_dir_beneath(root: BorrowedFd<'_>, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Opens directory `name` beneath `dir` as an `O_PATH` descriptor without
/// following any symbolic link or leaving `dir` (for walking a path one
/// directory at a time).
pub fn resolve_dir_strictly(dir: BorrowedFd<'_>, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// The serving thread's filesystem identity switched to another user's, so
/// that the kernel itself applies directory search permission, modes and
/// ACLs to what the thread resolves and opens. Made by [`ActingAs::user`];
/// dropping it restores the thread's own identity.
///
/// Only this thread changes: `setfsuid`, `setfsgid` and `setgroups` are
/// per-thread system calls, made here directly (glibc's `setgroups`
/// wrapper would change every thread of the process). The supplementary
/// groups are emptied while acting ([`ActingAs::user`]): the kernel's
/// credentials on a message carry only the primary gid, and nothing is
/// granted that the kernel would not grant to that uid and gid alone; or
/// they are groups the kernel reported for the asker otherwise
/// ([`ActingAs::user_in`]: a socket's creator's, `SO_PEERGROUPS`).
///
/// The thread's effective capabilities are emptied too (also per thread,
/// `capset`), and given back on drop. Switching the filesystem uid drops
/// only the capabilities that concern files; without this the thread kept
/// `CAP_SYS_ADMIN` and the rest, and a file that answers by its opener's
/// capabilities (a PCI device's configuration space in sysfs, say) gave a
/// client what only root may read.
#[derive(Debug)]
pub struct ActingAs {
    fsuid: u32,
    fsgid: u32,
    groups: Vec<Gid>,
    /// The thread's capabilities before, once they were emptied.
    caps: Option<rustix::thread::CapabilitySets>,
}

/// Whether process `pid` has a descriptor of the same open file
/// description as `file` (`kcmp(KCMP_FILE)` against each of its
/// descriptors). False when its descriptors cannot be listed or compared
/// (it is gone, or this process may not inspect it).
pub fn holds_open_file(pid: i32, file: BorrowedFd<'_>) -> bool {
    /// `kcmp`'s comparison of two open file descriptions (linux/kcmp.h).
    const KCMP_FILE: libc::c_long = 0;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    let me = std::process::id() as libc::c_long;
    dir.flatten().filter_map(|e| e.file_name().to_str()?.parse::<libc::c_long>().ok()).any(|n| {
        // SAFETY: kcmp compares two processes' descriptors by number and
        // touches no memory of ours.
        let r = unsafe { libc::syscall(libc::SYS_kcmp, pid as libc::c_long, me, KCMP_FILE, n, file.as_raw_fd() as libc::c_long) };
        r == 0
    })
}

/// Truncates the file that the `O_PATH` descriptor `path` holds to `len`
/// bytes by name (`truncate(2)` of its `/proc/self/fd` name), with the
/// permission checks of a truncation by name and without opening it, so
/// nothing watching the file sees it opened and closed.
pub fn truncate_by_path(path: BorrowedFd<'_>, len: u64) -> rustix::io::Result<()> {
    let name = std::ffi::CString::new(format!("/proc/self/fd/{}", path.as_raw_fd())).map_err(|_| Errno::INVAL)?;
    let len = libc::off_t::try_from(len).map_err(|_| Errno::INVAL)?;
    // SAFETY: truncate reads the NUL-terminated name, which lives across
    // the call, and touches no other memory of ours.
    if unsafe { libc::truncate(name.as_ptr(), len) } == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)))
    }
}

fn set_fsuid(uid: u32) -> u32 {
    // SAFETY: setfsuid takes an integer and touches no memory; it returns
    // the previous filesystem uid whether or not it changed it.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) as u32 }
}

fn set_fsgid(gid: u32) -> u32 {
    // SAFETY: as for setfsuid.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) as u32 }
}

/// An id the kernel rejects, so `setfs[ug]id` with it only reports the
/// current value.
const QUERY: u32 = u32::MAX;

impl ActingAs {
    /// Switches this thread's filesystem uid and gid to `uid`/`gid` with no
    /// supplementary groups.
    ///
    /// # Errors
    /// `EPERM` when this process may not switch (it lacks `CAP_SETUID` and
    /// `CAP_SETGID`: it is not root); nothing is changed then.
    pub fn user(uid: u32, gid: u32) -> rustix::io::Result<ActingAs> {
        Self::user_in(uid, gid, &[])
    }

    /// As [`ActingAs::user`], with the supplementary groups `groups`
    /// (which the kernel must have reported for that user: they grant what
    /// they grant natively).
    ///
    /// # Errors
    /// As [`ActingAs::user`].
    pub fn user_in(uid: u32, gid: u32, groups: &[u32]) -> rustix::io::Result<ActingAs> {
        Self::user_in_with(uid, gid, groups, 0)
    }

    /// As [`ActingAs::user_in`], keeping in effect those of this
    /// process's capabilities that are in `allowed` (the raw bits of the
    /// client's effective set: a program run as another user with
    /// capabilities of its own, ambient or from a file, uses them
    /// natively).
    ///
    /// # Errors
    /// As [`ActingAs::user`].
    pub fn user_in_with(uid: u32, gid: u32, groups: &[u32], allowed: u64) -> rustix::io::Result<ActingAs> {
        let acting_in: Vec<Gid> = groups.iter().map(|&g| Gid::from_raw(g)).collect();
        let groups = rustix::process::getgroups()?;
        rustix::thread::set_thread_groups(&acting_in)?;
        let mut acting = ActingAs { fsuid: set_fsuid(QUERY), fsgid: set_fsgid(QUERY), groups, caps: None };
        set_fsgid(gid);
        set_fsuid(uid);
        if set_fsgid(QUERY) != gid || set_fsuid(QUERY) != uid {
            // Dropping `acting` restores what did change.
            return Err(Errno::PERM);
        }
        // Last, since switching the identity above needs CAP_SETUID and
        // CAP_SETGID in effect.
        let caps = rustix::thread::capabilities(None)?;
        let effective = caps.permitted & rustix::thread::CapabilitySet::from_bits_retain(allowed);
        rustix::thread::set_capabilities(None, rustix::thread::CapabilitySets { effective, ..caps })?;
        acting.caps = Some(caps);
        Ok(acting)
    }
}

impl ActingAs {
    /// Keeps this thread's identity and limits its effective capabilities
    /// to those in `allowed` (the raw bits of a capability set), as a
    /// client of the same user that holds fewer than this process.
    ///
    /// # Errors
    /// When the thread's capabilities cannot be read or set; nothing is
    /// changed then.
    pub fn within_capabilities(allowed: u64) -> rustix::io::Result<ActingAs> {
        let groups = rustix::process::getgroups()?;
        let caps = rustix::thread::capabilities(None)?;
        let effective = caps.effective & rustix::thread::CapabilitySet::from_bits_retain(allowed);
        let mut acting = ActingAs { fsuid: set_fsuid(QUERY), fsgid: set_fsgid(QUERY), groups, caps: None };
        rustix::thread::set_capabilities(None, rustix::thread::CapabilitySets { effective, ..caps })?;
        acting.caps = Some(caps);
        Ok(acting)
    }
}

/// The effective capabilities of process `pid` acting as user `uid` (the
/// raw bits of its `CapEff` in `/proc/PID/status`), or `None` when they
/// cannot be read or the process there is not acting as `uid` (gone, and
/// its pid another's).
pub fn effective_capabilities_of(pid: i32, uid: u32) -> Option<u64> {
    capabilities_of(pid, uid).map(|(effective, _)| effective)
}

/// The effective and permitted capabilities of process `pid` acting as
/// user `uid` (raw bits), or `None` as for [`effective_capabilities_of`].
pub fn capabilities_of(pid: i32, uid: u32) -> Option<(u64, u64)> {
    // The quick way, two system calls: `capget` of the process's main
    // thread (the credentials' pid), and the owner of `/proc/PID`, which
    // is its effective uid while it is dumpable. Formatting `status` costs
    // the kernel some 20 µs, asked at every request.
    let caps = rustix::thread::capabilities(Some(rustix::process::Pid::from_raw(pid)?)).ok()?;
    if rustix::fs::stat(format!("/proc/{pid}")).is_ok_and(|st| st.st_uid == uid) {
        return Some((caps.effective.bits(), caps.permitted.bits()));
    }
    // A process that is not dumpable (one started from a file with
    // capabilities, say) shows `/proc/PID` as root's: its status says.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::split_whitespace);
    let euid = field("Uid:")?.nth(1)?.parse::<u32>().ok()?;
    if euid != uid {
        return None;
    }
    let bits = |name: &str| u64::from_str_radix(field(name)?.next()?, 16).ok();
    Some((bits("CapEff:")?, bits("CapPrm:")?))
}

/// Whether process `pid` is in the initial user namespace, where its
/// capabilities count over every file: its `uid_map` maps every id to
/// itself. The kernel keeps set-user-ID on a write only for a writer
/// holding `CAP_FSETID` there; one in a namespace of its own holds it only
/// inside. `false` when the map cannot be read.
pub fn in_initial_user_namespace(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/uid_map")).is_ok_and(|map| map.split_whitespace().eq(["0", "0", "4294967295"]))
}

/// The supplementary groups process `pid` is in now (those of its main
/// thread, `Groups` in `/proc/PID/status`), or `None` when they cannot
/// be read or the process there is not acting as user `uid` in group
/// `gid` (gone, and its pid another's).
pub fn supplementary_groups_of(pid: i32, uid: u32, gid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::split_whitespace);
    let euid = field("Uid:")?.nth(1)?.parse::<u32>().ok()?;
    let egid = field("Gid:")?.nth(1)?.parse::<u32>().ok()?;
    if euid != uid || egid != gid {
        return None;
    }
    field("Groups:")?.map(|g| g.parse::<u32>().ok()).collect()
}

/// This thread's effective capabilities (raw bits), or none when they
/// cannot be read.
pub fn own_effective_capabilities() -> u64 {
    rustix::thread::capabilities(None).map_or(0, |c| c.effective.bits())
}

impl Drop for ActingAs {
    fn drop(&mut self) {
        // First, so that the identity below may be switched back.
        let caps = self.caps.map_or(Ok(()), |c| rustix::thread::set_capabilities(None, c));
        set_fsuid(self.fsuid);
        set_fsgid(self.fsgid);
        let groups = rustix::thread::set_thread_groups(&self.groups);
        // A thread left with a client's identity would serve the next client
        // with it: better to stop than to go on.
        assert!(
            caps.is_ok() && groups.is_ok() && set_fsuid(QUERY) == self.fsuid && set_fsgid(QUERY) == self.fsgid,
            "could not restore the serving thread's identity"
        );
    }
}

/// Runs `f` with this thread's umask set to `umask` (and set back after),
/// or returns `None` when this thread cannot have a umask of its own. A
/// umask is shared by the threads of a process, so the thread first takes
/// a copy of the process's file-system context for itself
/// (`unshare(CLONE_FS)`, once per thread): its umask then changes nothing
/// for the other threads. Its root and working directory go with it; a
/// server resolving every name beneath a directory descriptor uses
/// neither.
pub fn under_umask<T>(umask: u32, f: impl FnOnce() -> T) -> Option<T> {
    thread_local! {
        static OWN_FS: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    }
    let own = OWN_FS.with(|c| {
        let own = c.get().unwrap_or_else(|| {
            // SAFETY: CLONE_FS gives this thread its own copy of the
            // process's root, working directory and umask; the descriptor
            // table (CLONE_FILES) stays shared, so every descriptor stays
            // usable by every thread.
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }.is_ok()
        });
        c.set(Some(own));
        own
    });
    if !own {
        return None;
    }
    let old = rustix::process::umask(Mode::from_raw_mode(umask & 0o777));
    let r = f();
    rustix::process::umask(old);
    Some(r)
}

/// Describes an open file (an `O_PATH` descriptor will do).
pub fn info(fd: BorrowedFd<'_>) -> rustix::io::Result<FileInfo> {
    let st = rustix::fs::fstat(fd)?;
    Ok(FileInfo {
        is_file: FileType::from_raw_mode(st.st_mode).is_file(),
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        identity: (st.st_dev as u64, st.st_ino as u64),
        #[allow(clippy::unnecessary_cast)] // the field types differ between architectures
        links: st.st_nlink as u64,
        #[allow(clippy::unnecessary_cast)] // the field types differ between architectures
        changed: [st.st_ctime as i64, st.st_ctime_nsec as i64, st.st_mtime as i64, st.st_mtime_nsec as i64],
    })
}

/// Copies the first `len` bytes of `file` into `out` from offset 0 inside
/// the kernel (`sendfile`: one copy, page cache to page cache, no buffer in
/// this process), stopping early only at the end of `file`; returns the
/// bytes copied. `out`'s file position is left after them.
pub fn copy_into(file: BorrowedFd<'_>, out: BorrowedFd<'_>, len: u64) -> rustix::io::Result<u64> {
    rustix::fs::seek(out, rustix::fs::SeekFrom::Start(0))?;
    let mut offset = 0u64;
    while offset < len {
        let chunk = (len - offset).min(1 << 30) as usize;
        match rustix::fs::sendfile(out, file, Some(&mut offset), chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(offset)
}

/// Fills `buf` from `offset`, stopping early only at end of file; returns
/// the bytes read.
pub fn read_at(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> rustix::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Creates `name` beneath `root` for writing, with `mode`'s permission bits
/// (set-user-ID and set-group-ID never), failing with `EEXIST` if anything
/// (a file, a link planted by someone else) already has that name, and
/// without leaving `root`. With [`ActingAs`] in force the kernel checks the
/// directory's write permission for that user.
pub fn create_beneath(root: BorrowedFd<'_>, name: &str, mode: u32) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::from_raw_mode(mode & 0o777),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Whether this thread's file-system identity may add a file to the
/// directory `dir` (write and search permission, `faccessat` with
/// `AT_EACCESS`): asked before the server makes a file there for a user.
pub fn may_add_to(dir: BorrowedFd<'_>) -> rustix::io::Result<()> {
    rustix::fs::accessat(dir, ".", rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK, AtFlags::EACCESS)
}

/// Writes all of `data` to `fd` and syncs it to disk.
pub fn write_all_synced(fd: BorrowedFd<'_>, data: &[u8]) -> rustix::io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match rustix::io::write(fd, &data[done..]) {
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    rustix::fs::fsync(fd)
}

/// Gives `to` the extended attributes of `from` that a write in place
/// would have left on it: the POSIX ACL (`system.posix_acl_access`), the
/// user's own (`user.*`) and, where this process may read them, the
/// trusted ones. The security namespace is left to the kernel: a write
/// drops file capabilities (`security.capability`), and a security
/// module labels a new inode itself. The first attribute that cannot be
/// read or set is the error, named; a file system without extended
/// attributes has none to copy.
pub fn copy_xattrs(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), (String, Errno)> {
    let list = match read_growing(|buf| match buf {
        None => rustix::fs::flistxattr_query(from),
        Some(b) => rustix::fs::flistxattr(from, b),
    }) {
        Ok(l) => l,
        Err(Errno::NOTSUP) => return Ok(()),
        Err(e) => return Err(("the list of its extended attributes".into(), e)),
    };
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let shown = String::from_utf8_lossy(name).into_owned();
        if name.starts_with(b"security.") {
            continue;
        }
        let value = match read_growing(|buf| match buf {
            None => rustix::fs::fgetxattr_query(from, name),
            Some(b) => rustix::fs::fgetxattr(from, name, b),
        }) {
            Ok(v) => v,
            // Removed since it was listed: nothing to keep.
            Err(Errno::NODATA) => continue,
            Err(e) => return Err((shown, e)),
        };
        rustix::fs::fsetxattr(to, name, &value, rustix::fs::XattrFlags::empty()).map_err(|e| (shown, e))?;
    }
    Ok(())
}

/// Removes the extended attributes of `fd` that [`copy_xattrs`] gives,
/// every one but the security namespace's: whatever a file's maker gave
/// it before it was given to another user. The first attribute that
/// cannot be listed or removed is the error, named; a file system without
/// extended attributes has none.
pub fn clear_xattrs(fd: BorrowedFd<'_>) -> Result<(), (String, Errno)> {
    let list = match read_growing(|buf| match buf {
        None => rustix::fs::flistxattr_query(fd),
        Some(b) => rustix::fs::flistxattr(fd, b),
    }) {
        Ok(l) => l,
        Err(Errno::NOTSUP) => return Ok(()),
        Err(e) => return Err(("the list of its extended attributes".into(), e)),
    };
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty() && !n.starts_with(b"security.")) {
        match rustix::fs::fremovexattr(fd, name) {
            // Removed since it was listed.
            Ok(()) | Err(Errno::NODATA) => {}
            Err(e) => return Err((String::from_utf8_lossy(name).into_owned(), e)),
        }
    }
    Ok(())
}

/// Reads a value whose length the kernel tells first (`read(None)`) into
/// a buffer of that length (`read(Some(buf))`), again with the new length
/// if it grew between the two calls.
fn read_growing(mut read: impl FnMut(Option<&mut [u8]>) -> rustix::io::Result<usize>) -> rustix::io::Result<Vec<u8>> {
    for _ in 0..8 {
        let n = read(None)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; n];
        match read(Some(&mut buf)) {
            Ok(got) => {
                buf.truncate(got);
                return Ok(buf);
            }
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::RANGE)
}

/// Gives `fd` the owner `uid`/`gid` where this process may (root); a
/// process without the privilege leaves it as it is.
pub fn keep_owner(fd: BorrowedFd<'_>, uid: u32, gid: u32) {
    let _ = rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
}

/// Gives `fd` the permission bits `mode` (`fchmod`), set-user-ID,
/// set-group-ID and sticky bits included, as far as this process may: the
/// kernel drops set-group-ID for a process that is neither in the file's
/// group nor privileged. Made after [`keep_owner`], since a change of owner
/// clears set-user-ID and set-group-ID.
pub fn set_mode(fd: BorrowedFd<'_>, mode: u32) -> rustix::io::Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777))
}

/// Renames `from` over `to`, both beneath `root` (atomically: whoever has
/// the old inode of `to` open keeps reading the old contents). With
/// [`ActingAs`] in force the kernel checks the directory's write permission
/// (and the sticky bit's rules) for that user.
pub fn rename_beneath(root: BorrowedFd<'_>, from: &str, to: &str) -> rustix::io::Result<()> {
    rustix::fs::renameat(root, from, root, to)
}

/// Removes `name` beneath `root` (a temporary file after a failure).
pub fn remove_beneath(root: BorrowedFd<'_>, name: &str) {
    let _ = rustix::fs::unlinkat(root, name, AtFlags::empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Acting as a user, the thread holds none of root's capabilities
    /// (those that concern files go with the filesystem uid, the rest are
    /// emptied), and has every one back afterwards.
    #[test]
    fn acting_as_a_user_holds_no_capabilities_and_gives_them_back() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: switching identity needs root");
            return;
        }
        std::thread::spawn(|| {
            let before = rustix::thread::capabilities(None).unwrap();
            assert!(before.effective.contains(rustix::thread::CapabilitySet::SYS_ADMIN), "{before:?}");
            let acting = ActingAs::user(65534, 65534).unwrap();
            let during = rustix::thread::capabilities(None).unwrap();
            assert!(during.effective.is_empty(), "{during:?}");
            drop(acting);
            assert_eq!(rustix::thread::capabilities(None).unwrap(), before);
        })
        .join()
        .unwrap();
    }

    /// The kernel's own file systems are told apart from real ones.
    #[test]
    fn pseudo_file_systems_are_named() {
        let at = |p: &str| rustix::fs::open(p, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
        assert_eq!(pseudo_fs(at("/proc/self/status").as_fd()), Some("proc"));
        assert_eq!(pseudo_fs(at("/sys/kernel").as_fd()), Some("sysfs"));
        assert_eq!(pseudo_fs(at(env!("CARGO_MANIFEST_DIR")).as_fd()), None);
    }
}
