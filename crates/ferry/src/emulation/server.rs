//! The emulation server: names resolved beneath a root as the asker, open
//! files with their token pages and holds, and the token's arbitration.

use std::collections::HashMap;
use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{get_u32, get_u64, put_u32, put_u64, TokenPage, TokenState, PAGE_LEN};
use super::{OP_EMUL_CHANNEL, OP_EMUL_CLOSE, OP_EMUL_FSYNC, OP_EMUL_MKDIR, OP_EMUL_OPEN, OP_EMUL_RENAME, OP_EMUL_REPLY, OP_EMUL_STAT, OP_EMUL_TOKEN};
use super::{OP_EMUL_SG_READ, OP_EMUL_SG_WRITE, OP_EMUL_TRUNCATE, OP_EMUL_TRUNCATE_NAME, OP_EMUL_UNLINK, SG_MAX};
use crate::message::{Item, Message, Reply};
use crate::port::{port, SendRight};
use crate::portset::{Event, MemberId, PortSet};
use crate::process::ProcessPort;
use crate::sys::fs::{self as files, ActingAs};
use crate::sys::kept::Kept;
use crate::timeout::Timeout;

/// How long the server waits for an active token holder before answering
/// `EDEADLK` (a holder is active only inside one library call).
const ACTIVE_WAIT: Duration = Duration::from_secs(20);
/// How long a truncation waits for the active holders of other users' open
/// files of the same file, all of them together, before cutting the file
/// under them.
const OTHERS_WAIT: Duration = Duration::from_secs(2);
/// Most requests that may wait (for a token holder: token requests,
/// truncations; for the disk: flushes) handed on their own threads at once
/// (beyond, `EAGAIN`).
const MAX_WAITING: usize = 256;
/// Most of those one user may have at once: a user that keeps its own
/// tokens active, and so its requests waiting, takes its share of the
/// threads and leaves the rest to the others.
const MAX_WAITING_PER_USER: usize = MAX_WAITING / 4;
/// Most open files one user may hold at once (fewer where the process's
/// descriptor limit is lower: see [`FileBudget`]).
const OPEN_FILES_PER_USER: usize = 4096;
/// Descriptors the server holds per open file: the file and the hold.
const FDS_PER_OPEN_FILE: usize = 2;

/// Most channels (`OP_EMUL_CHANNEL`, one per calling thread) one user may
/// have open at once.
const CHANNELS_PER_USER: usize = 256;
/// Descriptors below `RLIMIT_NOFILE` no open file may use: enough to
/// receive a message with the most descriptors one can carry (253), and to
/// answer it.
const FD_RESERVE: usize = 300;
/// Most process ports (pidfds) of token holders kept at once; beyond, a
/// holder is looked up afresh each time it is checked.
const MAX_HOLDERS: usize = 256;

/// What an [`EmulServer`] has done, counted since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmulStats {
    /// Opens answered (files and directories).
    pub opens: u64,
    /// Requests by name answered: stat, unlink, rename, mkdir.
    pub names: u64,
    /// Token requests (a process that did not hold the token wanted it).
    pub token_requests: u64,
    /// Tokens called back from a passive holder in another process.
    pub callbacks: u64,
    /// Tokens taken from an active holder found dead.
    pub dead_holders: u64,
    /// Truncations, flushes, and segment reads and writes by message.
    pub file_ops: u64,
}

#[derive(Default)]
struct Counters {
    opens: AtomicU64,
    names: AtomicU64,
    token_requests: AtomicU64,
    callbacks: AtomicU64,
    dead_holders: AtomicU64,
    file_ops: AtomicU64,
    /// Requests waiting on their own threads now, in all and per uid.
    waiting: Mutex<(usize, HashMap<u32, usize>)>,
}

/// A thread's place among the requests that may wait (for a token holder,
/// or the disk), given back when it is dropped.
struct Slot {
    counters: Arc<Counters>,
    uid: u32,
}

impl Slot {
    /// A place for a request of `uid`, if the server and that user's share
    /// have one left.
    fn take(counters: &Arc<Counters>, uid: u32) -> Option<Slot> {
        let mut w = counters.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let (all, per_user) = &mut *w;
        let mine = per_user.entry(uid).or_default();
        if *all >= MAX_WAITING || *mine >= MAX_WAITING_PER_USER {
            return None;
        }
        *mine += 1;
        *all += 1;
        Some(Slot { counters: counters.clone(), uid })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut w = self.counters.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let (all, per_user) = &mut *w;
        *all -= 1;
        if let Some(n) = per_user.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                per_user.remove(&self.uid);
            }
        }
    }
}

/// What a request comes to: an answer now, or work that may wait (for an
/// active token holder, or for the disk to flush what the asker wrote) and
/// so runs on a thread of its own (the server's own thread never waits for
/// a client).
enum Step {
    Now(Res<Answer>),
    Wait(Box<dyn FnOnce() -> Res<Answer> + Send>),
}

/// The token holders' process ports, shared with the waiting threads.
type Holders = Arc<Mutex<HashMap<i32, ProcessPort>>>;

/// One open file: the server's own descriptor (for `ftruncate`, `fsync`
/// and segment reads and writes, as the opener), its token page, and who
/// opened it.
struct OpenFile {
    file: OwnedFd,
    page: Arc<TokenPage>,
    uid: u32,
    /// (device, inode): other open files of the same file.
    identity: (u64, u64),
}

/// The open files by id, shared with [`Handler`]s.
type Table = Arc<Mutex<HashMap<u64, Arc<OpenFile>>>>;

/// The server's routines for open files, run in the caller's thread: the
/// CHORUS message-handler form of the service, for a caller in the same
/// process as the server (no message, no context switch). Made by
/// [`EmulServer::handler`]; it acts for this process's user, under the same
/// checks as a request by message.
#[derive(Clone)]
pub struct Handler {
    table: Table,
    uid: u32,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler").field("uid", &self.uid).finish()
    }
}

impl Handler {
    fn file(&self, id: u64) -> Res<Arc<OpenFile>> {
        lookup(&self.table, id, self.uid)
    }

    /// Segment read: copies open file `id`'s bytes at `offset` into `buf`
    /// through the server's cache (the kernel's page cache of the file),
    /// without mapping; returns the bytes read (0 at the end).
    pub fn sg_read(&self, id: u64, offset: u64, buf: &mut [u8]) -> Result<usize, i32> {
        self.file(id).and_then(|f| sg_read(&f, offset, buf)).map_err(|e| e.raw_os_error())
    }

    /// Segment write: copies `data` into open file `id` at `offset` through
    /// the server's cache; returns the bytes written.
    pub fn sg_write(&self, id: u64, offset: u64, data: &[u8]) -> Result<usize, i32> {
        self.file(id).and_then(|f| sg_write(&f, offset, data)).map_err(|e| e.raw_os_error())
    }
}

/// The open file a client's request names, as far as the server's own
/// thread checks it.
enum Named {
    /// The asker's own (by uid).
    Own(Arc<OpenFile>),
    /// Another user's, which the asking process may still hold natively
    /// (a descriptor of the same open file description): a program that
    /// opened a file and then became another user (`setuid` or `seteuid`,
    /// as daemons do after opening their logs), whose reads, writes,
    /// truncations and flushes through it failed with `EBADF`. Checked by
    /// [`held_by`], on a waiting thread.
    Theirs(Arc<OpenFile>),
}

/// [`lookup`] for a client: its own open file at once, or another user's
/// to be checked with [`held_by`].
fn named(table: &Table, id: u64, who: &Asker) -> Res<Named> {
    match lookup(table, id, who.uid) {
        Ok(f) => Ok(Named::Own(f)),
        Err(Errno::BADF) => table.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned().map(Named::Theirs).ok_or(Errno::BADF),
        Err(e) => Err(e),
    }
}

/// `f`, another user's open file, if the asking process holds it. The
/// check compares each of the asker's descriptors with it, a system call
/// each, thousands for a process that holds as many as it may: it runs on
/// a waiting thread, within the asker's share of them, and one of the
/// asker's user's at a time ([`ScanTurn`]). On the server's
/// own thread, another user's requests naming an open file it did not
/// hold (any open file's id, from many threads at once) held up every
/// other user's calls. The pid is the one the kernel reported for the
/// request.
fn held_by(f: Arc<OpenFile>, who: &Asker) -> Res<Arc<OpenFile>> {
    let _turn = ScanTurn::take(who.uid);
    if files::holds_open_file(who.pid, f.file.as_fd()) {
        Ok(f)
    } else {
        Err(Errno::BADF)
    }
}

/// A user's turn to compare a process's descriptors with an open file
/// ([`held_by`]), given back when dropped: one such check at a time per
/// user. The check is a system call per descriptor of the asker's, all
/// work and no waiting, so one user's checks side by side only took the
/// CPU from everyone else: another user holding 19,000 descriptors and
/// asking from 200 threads for root's open file kept its 64 waiting
/// threads comparing at once, and root's ten calls, answered on the
/// server's own thread, took from 0.4 s to more than 30 s with the
/// machine's load.
struct ScanTurn(u32);

/// The users whose check runs now, and the condition their other checks
/// wait on.
static SCANNING: (Mutex<Vec<u32>>, std::sync::Condvar) = (Mutex::new(Vec::new()), std::sync::Condvar::new());

impl ScanTurn {
    fn take(uid: u32) -> ScanTurn {
        let (running, turn) = &SCANNING;
        let mut running = running.lock().unwrap_or_else(|e| e.into_inner());
        while running.contains(&uid) {
            running = turn.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        running.push(uid);
        ScanTurn(uid)
    }
}

impl Drop for ScanTurn {
    fn drop(&mut self) {
        let (running, turn) = &SCANNING;
        running.lock().unwrap_or_else(|e| e.into_inner()).retain(|u| *u != self.0);
        turn.notify_all();
    }
}

fn lookup(table: &Table, id: u64, uid: u32) -> Res<Arc<OpenFile>> {
    let f = table.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned().ok_or(Errno::BADF)?;
    // Another user's open file is as good as closed to the asker.
    if f.uid != uid {
        return Err(Errno::BADF);
    }
    Ok(f)
}

/// Reads a segment of open file `f` (`OP_EMUL_SG_READ`: up to
/// [`SG_MAX`] bytes) or writes one (`OP_EMUL_SG_WRITE`, as the asker
/// `who`, the server running as `euid`), as `body` asks.
fn segment(f: &OpenFile, op: u32, euid: u32, who: &Asker, body: &[u8]) -> Res<Vec<u8>> {
    let offset = get_u64(body, 8).ok_or(Errno::INVAL)?;
    if op == OP_EMUL_SG_READ {
        let len = (get_u32(body, 16).ok_or(Errno::INVAL)? as usize).min(SG_MAX);
        let mut buf = vec![0u8; len];
        let n = sg_read(f, offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    } else {
        // As the asker: a write by the server's own privileges would
        // keep a set-user-ID bit the asker's write clears.
        let n = as_asker(euid, who, || sg_write(f, offset, &body[16..]))??;
        let mut out = Vec::new();
        put_u64(&mut out, n as u64);
        Ok(out)
    }
}

fn sg_read(f: &OpenFile, offset: u64, buf: &mut [u8]) -> Res<usize> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(&f.file, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

fn sg_write(f: &OpenFile, offset: u64, data: &[u8]) -> Res<usize> {
    let mut done = 0;
    while done < data.len() {
        match rustix::io::pwrite(&f.file, &data[done..], offset + done as u64) {
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    // Token holders see the file grow at their next look past the end
    // they know.
    Ok(done)
}

/// Whether the served directory's name still leads to the served
/// directory. Programs find their files by that name, and the server
/// resolves them from the directory it was given, wherever it went: after
/// `mv DIR DIR.moved` (or `rm -r DIR; mkdir DIR`), `cat DIR/f` read the
/// moved file where natively it fails, and files made in the new `DIR`
/// went into the moved one. While the name leads elsewhere, names are
/// refused with `EXDEV` and the library leaves each call to the kernel,
/// as for a name out of the tree; a directory moved back is served again.
///
/// The name is looked up again only after something changed along it:
/// an `inotify` watch on each directory above the served one reports its
/// entries created, removed and renamed, and is read (without waiting)
/// before each call by name. The kernel queues the event before the
/// rename or removal returns, so a call made after it finds it. Without
/// the watches (`inotify` unavailable, or out of watches), and while the
/// name leads elsewhere, the name is looked up before every call.
struct RootName {
    name: std::path::PathBuf,
    /// The served directory's device and inode.
    id: (u64, u64),
    watch: Option<OwnedFd>,
    moved: bool,
}

impl RootName {
    fn new(name: &Path, root: &OwnedFd) -> std::io::Result<RootName> {
        let st = rustix::fs::fstat(root).map_err(crate::error::io_err)?;
        // By its absolute name, as programs name it (and the server may
        // not stay in the directory it was started in).
        let name = std::fs::canonicalize(name)?;
        let watch = Self::watch_above(&name);
        Ok(RootName { name, id: (st.st_dev as u64, st.st_ino as u64), watch, moved: false })
    }

    /// An `inotify` descriptor watching the entries of every directory
    /// above `name`, or `None` if any cannot be watched.
    fn watch_above(name: &Path) -> Option<OwnedFd> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        let what = WatchFlags::CREATE | WatchFlags::DELETE | WatchFlags::MOVED_FROM | WatchFlags::MOVED_TO | WatchFlags::DELETE_SELF | WatchFlags::MOVE_SELF | WatchFlags::ONLYDIR;
        for above in name.ancestors().skip(1) {
            inotify::add_watch(&fd, above, what).ok()?;
        }
        Some(fd)
    }

    /// Whether `who` may reach the served directory by its name: search
    /// every directory on the way (and the served one itself), as the
    /// kernel checks a program's names. Names are resolved from the
    /// served directory, beneath which the kernel checks each directory as
    /// the asker; above it, nothing was checked, and a user who may not
    /// search a directory there read and wrote the files under it. Asked
    /// only for an asker the server acts as another for (another user, or
    /// other groups or capabilities): one lookup of the name.
    fn reachable_by(&self, euid: u32, who: &Asker) -> bool {
        if who.uid == euid && !who.switch && who.caps.is_none() {
            return true;
        }
        let look = || rustix::fs::accessat(rustix::fs::CWD, &self.name, rustix::fs::Access::EXEC_OK, AtFlags::EACCESS);
        matches!(as_asker(euid, who, look), Ok(Ok(())))
    }

    /// Whether the name now leads elsewhere than to the served directory.
    fn moved(&mut self) -> bool {
        let mut look = self.moved || self.watch.is_none();
        if let Some(fd) = &self.watch {
            let mut events = [0u8; 4096];
            while let Ok(n) = rustix::io::read(fd, &mut events) {
                if n == 0 {
                    break;
                }
                look = true;
            }
        }
        if look {
            let now = rustix::fs::stat(&self.name).ok().map(|st| (st.st_dev, st.st_ino));
            self.moved = now != Some(self.id);
        }
        self.moved
    }
}

/// Serves files under a root directory to emulated programs.
pub struct EmulServer {
    root: OwnedFd,
    /// Whether `root`'s name still leads to it.
    root_name: RootName,
    set: PortSet,
    main: MemberId,
    /// Open files by hold, and by id (shared with handlers).
    files: HashMap<MemberId, (u64, u32)>,
    table: Table,
    per_user: HashMap<u32, usize>,
    budget: FileBudget,
    /// Threads' channels (`OP_EMUL_CHANNEL`) by member: a descriptor of
    /// the server's end to answer on (shared with waiting threads), and
    /// the user that made it.
    channels: HashMap<MemberId, (Arc<OwnedFd>, u32)>,
    /// Channels per user.
    channels_of: HashMap<u32, usize>,
    /// The groups each channel's asker was last found in
    /// ([`GroupsSeen`]).
    groups_seen: HashMap<MemberId, GroupsSeen>,
    /// The sockets of the main port, the holds' ports and the channels,
    /// among those this process keeps (a channel must not lead back to
    /// any of them).
    kept: HashMap<MemberId, Kept>,
    next_id: u64,
    /// Process ports of the pids the token was last given to.
    holders: Holders,
    euid: u32,
    /// The server's effective gid and its supplementary groups (sorted):
    /// an asker of its uid in others is served with its own.
    egid: u32,
    groups: Arc<[u32]>,
    /// The server's effective capabilities (raw bits) when it started.
    capabilities: u64,
    /// The server's user namespace (device and inode of its
    /// `/proc/self/ns/user`), if the kernel says.
    user_namespace: Option<(u64, u64)>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for EmulServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulServer").field("open_files", &self.files.len()).finish()
    }
}

/// Who asks, as the kernel reported it.
#[derive(Clone)]
struct Asker {
    pid: i32,
    uid: u32,
    gid: u32,
    /// Supplementary groups: those of the process that made the socket
    /// the answer goes on (a thread's channel, a reply right), as the
    /// kernel reports them, when it is the asker's user; else none.
    groups: Arc<[u32]>,
    /// Whether the server takes on the asker's uid, gid and groups: it is
    /// another user, or the server's own in another gid or other groups
    /// than the server's (which only a server holding capabilities, run
    /// by root, can take on).
    switch: bool,
    /// The asker's effective capabilities, read when the server holds
    /// any: the server acts within them for an asker of its own user that
    /// holds fewer (a root program run without some of root's), and with
    /// those of them it holds for another user (a program given some, as
    /// ambient or file capabilities). `None`: all of the server's for its
    /// own user, none for another.
    caps: Option<u64>,
}

/// What a channel's asker was last served in: the channel's groups
/// (`SO_PEERGROUPS`, its maker's when it made it) less those the process
/// was no longer in, for which process, and whether that process could
/// change its groups then (it held `CAP_SETGID`).
struct GroupsSeen {
    pid: i32,
    made_in: Arc<[u32]>,
    served: Arc<[u32]>,
    could_change: bool,
}

/// `CAP_SETGID`, which `setgroups` needs.
const CAP_SETGID: u64 = 1 << 6;

/// The supplementary groups of the user `uid`, `gid` that made `sock`'s
/// other end, as the kernel reports them (`SO_PEERGROUPS`), or none when
/// another user made it. Acting without them, the server refused a user
/// files its groups open to it natively.
fn groups_of(sock: BorrowedFd<'_>, uid: u32, gid: u32) -> Arc<[u32]> {
    use crate::sys::socket::{peer_cred, peer_groups};
    match peer_cred(sock) {
        Ok(c) if c.uid == uid && c.gid == gid => peer_groups(sock).map(Arc::from).unwrap_or_else(|_| Arc::from([])),
        _ => Arc::from([]),
    }
}

/// This process's supplementary groups, sorted (none if unreadable).
fn own_groups() -> Arc<[u32]> {
    let mut groups: Vec<u32> = rustix::process::getgroups().map(|g| g.iter().map(|g| g.as_raw()).collect()).unwrap_or_default();
    groups.sort_unstable();
    groups.dedup();
    Arc::from(groups)
}

/// Whether `theirs` holds the same groups as `ours` (sorted), in any
/// order.
fn same_groups(theirs: &[u32], ours: &[u32]) -> bool {
    let mut theirs = theirs.to_vec();
    theirs.sort_unstable();
    theirs.dedup();
    theirs == ours
}

type Res<T> = Result<T, Errno>;

/// A successful answer's body (after the errno) and items.
type Answer = (Vec<u8>, Vec<Item>);

impl EmulServer {
    /// Serves the files beneath `root`. Returns the server and a first send
    /// right to it.
    pub fn new(root: &Path) -> std::io::Result<(EmulServer, SendRight)> {
        let dir = files::open_dir(root).map_err(crate::error::io_err)?;
        let (rx, tx) = port()?;
        let mut set = PortSet::new()?;
        let main_kept = Kept::new(rx.main_fd());
        let main = set.insert(rx);
        let euid = rustix::process::geteuid().as_raw();
        let budget = FileBudget::now();
        let root_name = RootName::new(root, &dir)?;
        let srv = EmulServer {
            budget,
            root_name,
            root: dir,
            set,
            main,
            files: HashMap::new(),
            table: Arc::default(),
            per_user: HashMap::new(),
            channels: HashMap::new(),
            channels_of: HashMap::new(),
            groups_seen: HashMap::new(),
            kept: main_kept.map(|k| HashMap::from([(main, k)])).unwrap_or_default(),
            next_id: 1,
            holders: Arc::default(),
            euid,
            egid: rustix::process::getegid().as_raw(),
            groups: own_groups(),
            capabilities: files::own_effective_capabilities(),
            user_namespace: user_namespace_of("self"),
            counters: Arc::default(),
        };
        Ok((srv, tx))
    }

    /// How many open files the server holds (descriptors and token pages).
    pub fn open_files(&self) -> usize {
        self.files.len()
    }

    /// How many threads' channels the server holds
    /// ([`OP_EMUL_CHANNEL`]).
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    /// What the server has done so far.
    pub fn stats(&self) -> EmulStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EmulStats {
            opens: l(&c.opens),
            names: l(&c.names),
            token_requests: l(&c.token_requests),
            callbacks: l(&c.callbacks),
            dead_holders: l(&c.dead_holders),
            file_ops: l(&c.file_ops),
        }
    }

    /// Handles requests until `timeout` passes with nothing to do, or until
    /// every send right to the server (and every open file) is gone. Returns
    /// `false` when there is nobody left to serve.
    pub fn serve(&mut self, timeout: Timeout) -> bool {
        // Just after a request, the next is often a few microseconds away
        // (a program making file calls in a row): the server looks for it,
        // yielding the CPU between looks, for a while before it sleeps,
        // which spares the program a wake-up of this thread.
        let mut last: Option<Instant> = None;
        loop {
            let mut now = self.set.wait(Timeout::Zero);
            while matches!(now, Err(crate::RecvError::Timeout)) && last.is_some_and(|t| t.elapsed() < super::SPIN) {
                std::thread::yield_now();
                now = self.set.wait(Timeout::Zero);
            }
            let now = match now {
                Err(crate::RecvError::Timeout) => self.set.wait(timeout),
                got => got,
            };
            last = Some(Instant::now());
            let ev = match now {
                Ok(ev) => ev,
                Err(crate::RecvError::Timeout) => {
                    self.holders.lock().expect("holders").retain(|_, p| !p.is_dead());
                    return true;
                }
                Err(_) => return true,
            };
            match ev {
                Event::Message(id, mut m) if id == self.main => self.handle(&mut m, None, None),
                Event::Message(id, mut m) if self.channels.contains_key(&id) => {
                    let (sock, owner) = self.channels[&id].clone();
                    // Only its own thread asks on a channel, and the answer
                    // goes back to that thread: a request from anyone else
                    // (a right to the channel's port passed on, say to a
                    // relay that sends as root) would be served with the
                    // other's rights and answered to the channel's owner.
                    // It is not answered, and the channel goes.
                    if m.sender().map(|c| c.uid) != Some(owner) || m.has_reply() {
                        self.drop_channel(id);
                        continue;
                    }
                    self.handle(&mut m, Some(ReplyTo::Channel(sock)), Some(id));
                }
                Event::NoSenders(id) | Event::BadMessage(id, _) if self.channels.contains_key(&id) => self.drop_channel(id),
                // Nobody can ask any more: done once no open file is left
                // either (else when the last hold goes, below).
                Event::NoSenders(id) if id == self.main && self.files.is_empty() => return false,
                Event::NoSenders(id) if id == self.main => {}
                Event::NoSenders(id) => {
                    let nobody_left = self.let_go(id);
                    if nobody_left {
                        return false;
                    }
                }
                // A message on a hold, or a malformed one: ignored (the hold
                // carries nothing).
                _ => {}
            }
        }
    }

    /// Every hold of the open file whose hold port is `id` is gone:
    /// closes the server's descriptor of it. Returns whether nobody is
    /// left to serve.
    fn let_go(&mut self, id: MemberId) -> bool {
        self.set.remove(id);
        self.kept.remove(&id);
        // A closing client is a good moment to forget the process ports of
        // processes gone (a process's files close before it is seen to
        // exit, so some are kept until a later look), and all of them once
        // no open file is left (no token to hand).
        let mut holders = self.holders.lock().expect("holders");
        holders.retain(|_, p| !p.is_dead());
        drop(holders);
        if let Some((fid, uid)) = self.files.remove(&id) {
            self.table.lock().unwrap_or_else(|e| e.into_inner()).remove(&fid);
            if let Some(n) = self.per_user.get_mut(&uid) {
                *n = n.saturating_sub(1);
            }
        }
        if self.files.is_empty() {
            self.holders.lock().expect("holders").clear();
            return self.set.port_mut(self.main).is_some_and(|p| p.senders_gone());
        }
        false
    }

    /// `OP_EMUL_CLOSE`: lets open file `fid` go now if its holds are all
    /// gone (their end-of-file is already queued on its hold port), rather
    /// than when the loop comes to it.
    fn close_now(&mut self, fid: u64) {
        let Some(id) = self.files.iter().find_map(|(id, (f, _))| (*f == fid).then_some(*id)) else { return };
        // What arrives on a hold is ignored; a few messages at most stand
        // before its end-of-file.
        for _ in 0..16 {
            match self.set.port_mut(id).map(|p| p.try_recv()) {
                Some(Err(crate::RecvError::NoSenders)) => {
                    // The main port's rights are the program's too: the
                    // server never stops here while the asker holds one.
                    self.let_go(id);
                    return;
                }
                Some(Ok(_)) => {}
                _ => return,
            }
        }
    }

    /// Stops serving channel `id`: its thread closed its end, or sent
    /// what is not a message.
    fn drop_channel(&mut self, id: MemberId) {
        self.set.remove(id);
        self.kept.remove(&id);
        self.groups_seen.remove(&id);
        if let Some((_, uid)) = self.channels.remove(&id) {
            if let Some(n) = self.channels_of.get_mut(&uid) {
                *n -= 1;
                if *n == 0 {
                    self.channels_of.remove(&uid);
                }
            }
        }
    }

    /// `OP_EMUL_CHANNEL`: serves the receive right in `m` as a channel of
    /// user `uid`, within the budget of channels (a quarter of what open
    /// files may take in all, half of that for one user, at most
    /// [`CHANNELS_PER_USER`]); past it `EAGAIN`, and the asker's calls
    /// bring reply rights of their own.
    fn add_channel(&mut self, uid: u32, m: &mut Message) -> Res<Answer> {
        let mut items = m.take_items().into_iter();
        let (Some(Item::Receive(rx)), None) = (items.next(), items.next()) else { return Err(Errno::INVAL) };
        // A channel is a bare socket pair's end: send-once rights made on
        // it would each be one more descriptor the server holds.
        if rx.send_once_outstanding() != 0 {
            return Err(Errno::INVAL);
        }
        // Served until its other end goes, which must be the asker's: a
        // socket with none (a listener) never hangs up, and a right to the
        // server's own port (or to a hold, or the other end of another
        // channel) would never go: the server, holding a sender of its own
        // port, would never see its last client leave.
        let Some(kept) = Kept::unless_it_leads_back(rx.main_fd()) else { return Err(Errno::INVAL) };
        // Channels take their descriptors from the open files' budget.
        let in_all = (self.budget.in_all / 4).max(1);
        let mine = self.channels_of.get(&uid).copied().unwrap_or(0);
        if self.channels.len() >= in_all || mine >= (in_all / 2).clamp(1, CHANNELS_PER_USER) || self.files.len() + self.channels.len() >= self.budget.in_all {
            return Err(Errno::AGAIN);
        }
        let answer_on = rustix::io::fcntl_dupfd_cloexec(rx.main_fd(), 0)?;
        let id = self.set.insert(rx);
        self.kept.insert(id, kept);
        self.channels.insert(id, (Arc::new(answer_on), uid));
        *self.channels_of.entry(uid).or_insert(0) += 1;
        Ok((vec![], vec![]))
    }

    /// Handles one request: from the main port with its reply right
    /// (`channel` `None`), or from a thread's channel (`on`), answered
    /// there.
    fn handle(&mut self, m: &mut Message, channel: Option<ReplyTo>, on: Option<MemberId>) {
        if crate::idl::is_answer(m.op()) {
            // An answer sent on to this server by naming its port as a
            // reply right: never a request, and never answered.
            crate::idl::drop_answer("emulation server", m);
            return;
        }
        let reply = match channel {
            Some(to) => to,
            None => match m.take_reply() {
                Some(r) => ReplyTo::Right(r),
                None => return,
            },
        };
        let reply = Answerer(Some(reply), m.sender());
        let Some(c) = m.sender() else { return };
        // Looked up only when the server acts as another user, or may act
        // as its own in other groups (it holds capabilities).
        let groups = match &reply.0 {
            _ if c.uid == self.euid && self.capabilities == 0 => Arc::from([]),
            Some(ReplyTo::Channel(sock)) => groups_of(sock.as_fd(), c.uid, c.gid),
            Some(ReplyTo::Right(Reply::SendOnce(r))) => groups_of(r.sock.as_fd(), c.uid, c.gid),
            Some(ReplyTo::Right(Reply::Send(r))) => groups_of(r.sock.as_fd(), c.uid, c.gid),
            None => Arc::from([]),
        };
        // A root asker may hold fewer capabilities than the server run by
        // root: they are asked of the kernel for each request (a program
        // may drop them at any time), and only then.
        let mine = self.capabilities;
        let held = if mine == 0 { None } else { files::capabilities_of(c.pid, c.uid) };
        let caps = if mine == 0 {
            None
        } else if c.uid == self.euid {
            // Unreadable (the asker is gone, or in another pid namespace):
            // none.
            held.map_or(Some(0), |(theirs, _)| (mine & !theirs != 0).then_some(theirs))
        } else {
            held.map(|(theirs, _)| theirs).filter(|theirs| *theirs != 0)
        };
        // The socket's groups are its maker's when it made it: a process
        // may have left some since (`setgroups`, as a daemon shedding
        // privileges does), and was served in them for as long as the
        // socket lived. They count only as far as the process is still in
        // them. Asked of the kernel only where groups may give what the
        // asker's capabilities do not (it holds fewer than the server),
        // and for a channel once, then again only while its process may
        // change its groups (it holds `CAP_SETGID`) and once after.
        let groups = if mine == 0 || groups.is_empty() || (c.uid == self.euid && caps.is_none()) {
            groups
        } else {
            let could_change = held.is_none_or(|(_, permitted)| permitted & CAP_SETGID != 0);
            self.groups_now(on, (c.pid, c.uid, c.gid), groups, could_change)
        };
        // An asker of the server's uid in another gid or other groups is
        // served with its own, as natively: with the server's, a root
        // program in a group the server is not in (and without
        // `CAP_DAC_OVERRIDE`) was refused that group's files, and the files
        // it made were of the server's gid.
        let switch = c.uid != self.euid || (mine != 0 && (c.gid != self.egid || !same_groups(&groups, &self.groups)));
        let caps = if c.uid == self.euid && switch { Some(caps.unwrap_or(mine)) } else { caps };
        // An asker in another user namespace holds its capabilities in
        // that namespace, where they count only over the files of the
        // users it maps, which the server cannot weigh: its names are the
        // kernel's (`EXDEV`, below), and whatever else it asks is done
        // with no capability. Acting with them, a server run by root let
        // an unprivileged user in a namespace of its own (`unshare -r`)
        // read and overwrite root's private files. Asked only by a server
        // that holds capabilities (one that holds none lends none) of an
        // asker that would be served with some: without any, its calls
        // are weighed by its ids alone, as the kernel weighs them.
        let lent = match caps {
            Some(theirs) => theirs != 0,
            None => c.uid == self.euid,
        };
        let foreign = mine != 0 && lent && self.user_namespace.is_some() && user_namespace_of(&c.pid.to_string()) != self.user_namespace;
        let (switch, caps) = if foreign { (true, Some(0)) } else { (switch, caps) };
        let who = Asker { pid: c.pid, uid: c.uid, gid: c.gid, groups, switch, caps };
        let uid = who.uid;
        let body = m.body().to_vec();
        let c = &self.counters;
        let counter = match m.op() {
            OP_EMUL_OPEN => Some(&c.opens),
            OP_EMUL_TOKEN => Some(&c.token_requests),
            OP_EMUL_TRUNCATE | OP_EMUL_FSYNC | OP_EMUL_SG_READ | OP_EMUL_SG_WRITE | OP_EMUL_CLOSE => Some(&c.file_ops),
            OP_EMUL_CHANNEL => None,
            _ => Some(&c.names),
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let by_name = matches!(m.op(), OP_EMUL_OPEN | OP_EMUL_STAT | OP_EMUL_UNLINK | OP_EMUL_RENAME | OP_EMUL_MKDIR | OP_EMUL_TRUNCATE_NAME);
        let step = match m.op() {
            // The served directory's name leads elsewhere: names under it
            // are the kernel's (`RootName`).
            _ if by_name && (foreign || self.root_name.moved()) => Step::Now(Err(Errno::XDEV)),
            // Nor for an asker who may not reach it by its name: the
            // kernel refuses the call, as natively.
            _ if by_name && !self.root_name.reachable_by(self.euid, &who) => Step::Now(Err(Errno::XDEV)),
            // Over a channel, an open's descriptors go on it just before
            // the answer; by a reply right, in an envelope.
            OP_EMUL_OPEN => {
                let direct = match &reply.0 {
                    Some(ReplyTo::Channel(sock)) => Some(sock.clone()),
                    _ => None,
                };
                self.open(who, &body, direct.as_deref())
            }
            OP_EMUL_CLOSE => {
                if let Some(fid) = get_u64(&body, 0) {
                    self.close_now(fid);
                }
                Step::Now(Ok((vec![], vec![])))
            }
            OP_EMUL_STAT => Step::Now(stat(&self.root, self.euid, who, &body).map(|b| (b, vec![]))),
            OP_EMUL_UNLINK => Step::Now(unlink(&self.root, self.euid, who, &body).map(|()| (vec![], vec![]))),
            OP_EMUL_RENAME => Step::Now(rename(&self.root, self.euid, who, &body).map(|()| (vec![], vec![]))),
            OP_EMUL_MKDIR => Step::Now(mkdir(&self.root, self.euid, who, &body).map(|()| (vec![], vec![]))),
            OP_EMUL_TRUNCATE | OP_EMUL_FSYNC => self.file_op(m.op(), who, &body),
            OP_EMUL_TRUNCATE_NAME => self.truncate_by_name(who, &body),
            OP_EMUL_SG_READ | OP_EMUL_SG_WRITE => self.segment(m.op(), who, &body),
            OP_EMUL_TOKEN => self.token(who, &body),
            // A channel is asked for on the main port only.
            OP_EMUL_CHANNEL if matches!(reply.0, Some(ReplyTo::Right(_))) => Step::Now(self.add_channel(who.uid, m)),
            _ => Step::Now(Err(Errno::NOSYS)),
        };
        match step {
            Step::Now(answer) => send_reply(reply, answer),
            // What may wait runs on its own thread, so other clients are
            // served meanwhile. Waiting threads are bounded, in all and
            // per user: a client cannot make the server spawn without end,
            // nor take every thread from the other users.
            Step::Wait(work) => match Slot::take(&self.counters, uid) {
                Some(slot) => {
                    let spawned = std::thread::Builder::new().name("ferry-emul-wait".into()).spawn(move || {
                        send_reply(reply, work());
                        drop(slot);
                    });
                    // Without a thread the work (and the reply right
                    // with it) is dropped: the client sees its request
                    // refused, as when the server dies.
                    drop(spawned);
                }
                None => {
                    drop(work);
                    send_reply(reply, Err(Errno::AGAIN));
                }
            },
        }
    }

    /// The groups of `made_in` (a socket's, `SO_PEERGROUPS`) that process
    /// `pid` of user `uid` in group `gid` is still in: as last found on
    /// channel `on` when neither then nor now could the process change
    /// its groups, else from the kernel (`/proc/PID/status`); none when
    /// they cannot be read.
    fn groups_now(&mut self, on: Option<MemberId>, (pid, uid, gid): (i32, u32, u32), made_in: Arc<[u32]>, could_change: bool) -> Arc<[u32]> {
        if let Some(seen) = on.and_then(|id| self.groups_seen.get(&id)) {
            if !could_change && !seen.could_change && seen.pid == pid && seen.made_in == made_in {
                return seen.served.clone();
            }
        }
        let served: Arc<[u32]> = match files::supplementary_groups_of(pid, uid, gid) {
            Some(now) => made_in.iter().copied().filter(|g| now.contains(g)).collect(),
            None => Arc::from([]),
        };
        if let Some(id) = on {
            self.groups_seen.insert(id, GroupsSeen { pid, made_in, served: served.clone(), could_change });
        }
        served
    }

    /// A token request: the asker's open file's page, handed to the asker
    /// once it is free (on a thread of its own).
    fn token(&self, who: Asker, body: &[u8]) -> Step {
        let Some(id) = get_u64(body, 0) else { return Step::Now(Err(Errno::INVAL)) };
        let named = match named(&self.table, id, &who) {
            Ok(n) => n,
            Err(e) => return Step::Now(Err(e)),
        };
        let (holders, counters) = (self.holders.clone(), self.counters.clone());
        Step::Wait(Box::new(move || {
            let f = match named {
                Named::Own(f) => f,
                Named::Theirs(f) => held_by(f, &who)?,
            };
            hand_token(&f.page, &holders, &counters, who.pid, ACTIVE_WAIT).map(|()| (vec![], vec![]))
        }))
    }

    /// The handler form of the server's open-file routines, for callers in
    /// this process.
    pub fn handler(&self) -> Handler {
        Handler { table: self.table.clone(), uid: self.euid }
    }

    /// A segment read or write of an open file: at once on the asker's
    /// own open file, else on a waiting thread once [`held_by`] found the
    /// asker holding it.
    fn segment(&self, op: u32, who: Asker, body: &[u8]) -> Step {
        let Some(id) = get_u64(body, 0) else { return Step::Now(Err(Errno::INVAL)) };
        let euid = self.euid;
        match named(&self.table, id, &who) {
            Err(e) => Step::Now(Err(e)),
            Ok(Named::Own(f)) => Step::Now(segment(&f, op, euid, &who, body).map(|b| (b, vec![]))),
            Ok(Named::Theirs(f)) => {
                let body = body.to_vec();
                Step::Wait(Box::new(move || {
                    let f = held_by(f, &who)?;
                    segment(&f, op, euid, &who, &body).map(|b| (b, vec![]))
                }))
            }
        }
    }

    fn file_op(&self, op: u32, who: Asker, body: &[u8]) -> Step {
        let Some(id) = get_u64(body, 0) else { return Step::Now(Err(Errno::INVAL)) };
        // Another user's open file is checked, and then used, on a waiting
        // thread; so is every flush (the disk decides how long it takes,
        // and the asker how much it has to write) and every cut.
        let (f, theirs) = match named(&self.table, id, &who) {
            Ok(Named::Own(f)) => (f, false),
            Ok(Named::Theirs(f)) => (f, true),
            Err(e) => return Step::Now(Err(e)),
        };
        let len = get_u64(body, 8);
        // What the kernel would refuse is refused before anyone's token is
        // called back: a file open only for reading cannot be cut.
        if !theirs && op != OP_EMUL_FSYNC && (len.is_none() || !writable(f.file.as_fd())) {
            return Step::Now(Err(Errno::INVAL));
        }
        let (table, holders, counters, euid) = (self.table.clone(), self.holders.clone(), self.counters.clone(), self.euid);
        Step::Wait(Box::new(move || {
            let f = if theirs { held_by(f, &who)? } else { f };
            if op == OP_EMUL_FSYNC {
                return rustix::fs::fsync(&f.file).map(|()| (vec![], vec![]));
            }
            let len = len.ok_or(Errno::INVAL)?;
            if !writable(f.file.as_fd()) {
                return Err(Errno::INVAL);
            }
            cut(&table, &holders, &counters, (euid, who), f.identity, Cut::Open(f.file.as_fd()), len).map(|()| (vec![], vec![]))
        }))
    }

    /// `OP_EMUL_TRUNCATE_NAME`: the name is resolved as the asker and the
    /// file cut by name on a waiting thread, like an open file, with the
    /// kernel's checks of a truncation by name (a directory is `EISDIR`,
    /// a FIFO `EINVAL`, a file the asker may not write `EACCES`). Nothing
    /// is opened, so nothing watching the file (`inotify`) sees it opened
    /// and closed, as natively.
    fn truncate_by_name(&self, who: Asker, body: &[u8]) -> Step {
        let Some(len) = get_u64(body, 0) else { return Step::Now(Err(Errno::INVAL)) };
        let name = match body.get(8..).ok_or(Errno::INVAL).and_then(name_of) {
            Ok(name) => lookup_name(name),
            Err(e) => return Step::Now(Err(e)),
        };
        // What the kernel would refuse (a file the asker may not write) is
        // refused before anyone's token is called back.
        let found = as_asker(self.euid, &who, || {
            let path = resolve(&self.root, name, true, OFlags::empty())?;
            let st = rustix::fs::fstat(&path)?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() {
                use std::os::fd::AsRawFd;
                let proc_name = format!("/proc/self/fd/{}", path.as_raw_fd());
                rustix::fs::accessat(rustix::fs::CWD, proc_name.as_str(), rustix::fs::Access::WRITE_OK, AtFlags::EACCESS)?;
            }
            Ok((path, (st.st_dev as u64, st.st_ino as u64)))
        });
        let identity = found.and_then(|r| r);
        let (path, identity) = match identity {
            Ok(found) => found,
            Err(e) => return Step::Now(Err(e)),
        };
        let (table, holders, counters, euid) = (self.table.clone(), self.holders.clone(), self.counters.clone(), self.euid);
        Step::Wait(Box::new(move || cut(&table, &holders, &counters, (euid, who), identity, Cut::Name(path.as_fd()), len).map(|()| (vec![], vec![]))))
    }

    fn open(&mut self, who: Asker, body: &[u8], direct: Option<&OwnedFd>) -> Step {
        match self.open_now(who.clone(), body, direct) {
            Ok((answer, None)) => Step::Now(Ok(answer)),
            // The reply (with the open file's hold) goes once the file is
            // cut; if the cut fails, the hold goes with the answer, and
            // the open file with it.
            Ok((answer, Some(open))) => {
                let (table, holders, counters, euid) = (self.table.clone(), self.holders.clone(), self.counters.clone(), self.euid);
                Step::Wait(Box::new(move || cut(&table, &holders, &counters, (euid, who), open.identity, Cut::Open(open.file.as_fd()), 0).map(|()| answer)))
            }
            Err(e) => Step::Now(Err(e)),
        }
    }

    /// Opens and registers a file; with `O_TRUNC`, also returns the open
    /// file, still to be cut to nothing before the answer goes. The
    /// descriptors go on the channel `direct` (the asker reads them just
    /// before the answer), or without one in an envelope among the
    /// answer's items.
    fn open_now(&mut self, who: Asker, body: &[u8], direct: Option<&OwnedFd>) -> Res<(Answer, Option<Arc<OpenFile>>)> {
        let flags = get_u32(body, 0).ok_or(Errno::INVAL)?;
        let mode = get_u32(body, 4).ok_or(Errno::INVAL)?;
        let name = lookup_name(name_of(&body[8..])?);
        if self.per_user.get(&who.uid).copied().unwrap_or(0) >= self.budget.per_user || self.files.len() + self.channels.len() >= self.budget.in_all {
            return Err(Errno::NFILE);
        }
        // O_TRUNC on a file opened for writing is done below as a cut, with
        // the other open files' tokens called back: the kernel's would take
        // bytes from under their windows (a reader there would fault).
        // Opening for writing checked the permission a truncation needs.
        let writes = flags as i32 & libc::O_ACCMODE != libc::O_RDONLY;
        let trunc = writes && flags as i32 & libc::O_TRUNC != 0;
        let open_flags = if trunc { flags as i32 & !libc::O_TRUNC } else { flags as i32 };
        let (fd, is_dir) = as_asker(self.euid, &who, || open_beneath(&self.root, name, open_flags, mode, who.uid))??;
        // Never waits for room on a channel: only an asker that sent more
        // requests than it read answers fills its own.
        let deliver = |marker: &[u8], fds: &[BorrowedFd<'_>]| -> Res<Vec<Item>> {
            match direct {
                Some(ch) => crate::sys::socket::send(ch.as_fd(), &[IoSlice::new(marker)], fds, false).map(|_| Vec::new()),
                None => {
                    let (a, b) = crate::sys::socket::seqpacket_pair()?;
                    crate::sys::socket::send(a.as_fd(), &[IoSlice::new(marker)], fds, true)?;
                    Ok(vec![Item::Send(SendRight::from_fd(b))])
                }
            }
        };
        let mut out = Vec::new();
        if is_dir {
            let items = deliver(b"d", &[fd.as_fd()])?;
            put_u32(&mut out, 1);
            put_u64(&mut out, 0);
            put_u64(&mut out, 0);
            return Ok(((out, items), None));
        }
        let st = rustix::fs::fstat(&fd)?;
        let identity = (st.st_dev as u64, st.st_ino as u64);
        let size = if trunc { 0 } else { st.st_size as u64 };
        let memfd = crate::sys::mem::memfd("ferry-emul-token", PAGE_LEN as u64)?;
        // Every process sharing the open file, and the server, maps the
        // page shared: sealed so that none can shrink it under the others
        // (their next look at it would fault).
        crate::sys::mem::add_seals(memfd.as_fd(), TokenPage::SEALS)?;
        let page = Arc::new(TokenPage::map(memfd.as_fd()).map_err(|_| Errno::NOMEM)?);
        page.init(who.pid, size);
        if trunc {
            // Free until the cut is done: the opener asks for it then.
            page.give_up(who.pid);
        }
        // A process opening many files is remembered once: a live port to
        // its pid is the same process (a pid is not reused while it runs).
        let known = self.holders.lock().unwrap_or_else(|e| e.into_inner()).get(&who.pid).is_some_and(|p| !p.is_dead());
        if !known {
            if let Ok(p) = ProcessPort::open(who.pid) {
                remember(&self.holders, p);
            }
        }
        let mut items = deliver(b"f", &[fd.as_fd(), memfd.as_fd()])?;
        let (hold_rx, hold) = port().map_err(|_| Errno::NOMEM)?;
        let kept = Kept::new(hold_rx.main_fd());
        let member = self.set.insert(hold_rx);
        if let Some(k) = kept {
            self.kept.insert(member, k);
        }
        let id = self.next_id;
        self.next_id += 1;
        let open = Arc::new(OpenFile { file: fd, page, uid: who.uid, identity });
        self.table.lock().unwrap_or_else(|e| e.into_inner()).insert(id, open.clone());
        self.files.insert(member, (id, who.uid));
        *self.per_user.entry(who.uid).or_default() += 1;
        put_u32(&mut out, 0);
        put_u64(&mut out, id);
        put_u64(&mut out, size);
        items.push(Item::Send(hold));
        Ok(((out, items), trunc.then_some(open)))
    }
}

/// Whether `file` is open for writing.
fn writable(file: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_getfl(file).is_ok_and(|f| f & OFlags::ACCMODE != OFlags::RDONLY)
}

/// What [`cut`] truncates: an open file, by its descriptor, or a file by
/// its name (an `O_PATH` descriptor: `truncate(2)`, which opens nothing).
#[derive(Clone, Copy)]
enum Cut<'a> {
    Open(BorrowedFd<'a>),
    Name(BorrowedFd<'a>),
}

/// Sets the length of the file `identity` (open as `file`, or named by
/// it) to `len`.
/// Every open file of this file (the caller's included: after a fork
/// others may share it) may be reading through a window the bytes about
/// to go. Their tokens are called back first (the server waits for an
/// active holder to finish its call: holders never wait for the server
/// while active), their sizes set, and the tokens left free, so that no
/// holder copies from beyond the new end (which would fault) or misses
/// the new size. Runs on a waiting thread, never the server's own. The
/// tokens are called back in the order of the open files' ids, so two
/// cuts of one file at once never each hold a token the other waits for.
///
/// The file is cut as `who` (the server running as `euid`), so that it
/// keeps no set-user-ID bit the asker's own truncation would clear. An
/// open file of another user than the one cutting (who may write the
/// file) whose holder stays active past [`OTHERS_WAIT`] (counted once for
/// all such open files) does not stop the cut: it is cut under that
/// holder, whose own process alone can fault, so
/// that nobody who may only read a file can keep its writer from
/// truncating it.
fn cut(
    table: &Table,
    holders: &Mutex<HashMap<i32, ProcessPort>>,
    counters: &Counters,
    (euid, who): (u32, Asker),
    identity: (u64, u64),
    file: Cut<'_>,
    len: u64,
) -> Res<()> {
    let me = std::process::id() as i32;
    let mut all: Vec<(u64, Arc<OpenFile>)> = table
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, o)| o.identity == identity)
        .map(|(id, o)| (*id, o.clone()))
        .collect();
    all.sort_by_key(|(id, _)| *id);
    let (mut recalled, mut stuck) = (Vec::new(), Vec::new());
    let mut result = Ok(());
    // Other users' holders are waited for together, for OTHERS_WAIT in
    // all: waited for in turn, a user's many open files of the file (up to
    // its budget, thousands) held the owner's truncation for that many
    // times OTHERS_WAIT.
    let others_until = Instant::now() + OTHERS_WAIT;
    for (_, o) in &all {
        let wait = if o.uid == who.uid { ACTIVE_WAIT } else { others_until.saturating_duration_since(Instant::now()) };
        match hand_token(&o.page, holders, counters, me, wait) {
            Ok(()) => recalled.push(o),
            Err(Errno::DEADLK) if o.uid != who.uid => stuck.push(o),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if result.is_ok() {
        result = as_asker(euid, &who, || match file {
            Cut::Open(fd) => rustix::fs::ftruncate(fd, len),
            Cut::Name(path) => files::truncate_by_path(path, len),
        })
        .and_then(|r| r);
    }
    for o in recalled {
        if result.is_ok() {
            o.page.set_size(len);
        }
        o.page.release(me);
    }
    if result.is_ok() {
        for o in stuck {
            o.page.set_size(len);
        }
    }
    result
}

/// Where an answer goes: a request's reply right, or the channel it came
/// on.
enum ReplyTo {
    Right(Reply),
    Channel(Arc<OwnedFd>),
}

/// An answer still owed, and who asked. A reply right dropped unanswered
/// tells its client so by itself (`SendOnceDropped`); a channel does not,
/// so one dropped unanswered (a waiting thread that could not start, or
/// whose work panicked) answers `EIO` rather than leave its thread
/// waiting.
struct Answerer(Option<ReplyTo>, Option<crate::message::Credentials>);

impl Drop for Answerer {
    fn drop(&mut self) {
        if let Some(to @ ReplyTo::Channel(_)) = self.0.take() {
            send_reply(Answerer(Some(to), self.1), Err(Errno::IO));
        }
    }
}

fn send_reply(mut reply: Answerer, answer: Res<Answer>) {
    let Some(to) = reply.0.take() else { return };
    let mut body = Vec::new();
    let msg = match answer {
        Ok((b, items)) => {
            put_u32(&mut body, 0);
            body.extend_from_slice(&b);
            items.into_iter().fold(Message::new(OP_EMUL_REPLY).with_body(body), |m, i| m.with_item(i))
        }
        Err(e) => {
            put_u32(&mut body, e.raw_os_error() as u32);
            Message::new(OP_EMUL_REPLY).with_body(body)
        }
    };
    // A client that went away takes its answer with it; so does one whose
    // reply right leads to a full queue (a send-once right, as the
    // library's, always has room). The server never waits for room: a
    // client that chose a full port as its reply port would hold up
    // everyone behind it. A channel's thread waits for this one answer,
    // so its queue has room unless the client filled it itself.
    // A reply right is the asker's choice, and may be its proxy of
    // another host's port or a port of a service that trusts root: the
    // answer goes as the asker's message there, not the server's. A
    // channel leads only to the asker's own thread.
    match to {
        ReplyTo::Right(r) => drop(crate::answering_as(reply.1, || r.send(msg, Timeout::Zero))),
        ReplyTo::Channel(sock) => drop(crate::port::send_on(sock.as_fd(), msg, Timeout::Zero)),
    }
}

/// Keeps `port` among the token holders' ports (within [`MAX_HOLDERS`],
/// making room by forgetting dead processes first; a port that does not fit
/// is not kept).
fn remember(holders: &Mutex<HashMap<i32, ProcessPort>>, port: ProcessPort) {
    let mut map = holders.lock().unwrap_or_else(|e| e.into_inner());
    // The limit is asked only once there are enough holders for it to
    // matter (an eighth of a limit of 64 and more): not on every open.
    if map.len() >= 8 && !map.contains_key(&port.pid()) {
        let most = Reserve::of(nofile_limit()).holders;
        if map.len() >= most {
            map.retain(|_, p| !p.is_dead());
            if map.len() >= most {
                return;
            }
        }
    }
    map.insert(port.pid(), port);
}

/// This process's limit on descriptors.
fn nofile_limit() -> usize {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current.map_or(usize::MAX, |n| n as usize)
}

/// Descriptors kept from open files: [`FD_RESERVE`] and [`MAX_HOLDERS`],
/// or under a low limit a quarter and an eighth of it (with a hard limit
/// of 512, as `ulimit -n 512` sets, the whole reserve took every
/// descriptor and each open failed with `ENFILE`).
struct Reserve {
    messages: usize,
    holders: usize,
}

impl Reserve {
    fn of(limit: usize) -> Reserve {
        Reserve { messages: FD_RESERVE.min(limit / 4), holders: MAX_HOLDERS.min(limit / 8) }
    }
}

/// How many open files the server may hold, in all and per user: what its
/// descriptor limit leaves after the descriptors open when it started and
/// the [`Reserve`], at two descriptors per open file,
/// with at most half of that for one user (and never more than
/// [`OPEN_FILES_PER_USER`]), so that one user can never run the server out
/// of descriptors for the others.
#[derive(Clone, Copy, Debug)]
struct FileBudget {
    in_all: usize,
    per_user: usize,
}

impl FileBudget {
    fn now() -> FileBudget {
        let limit = nofile_limit();
        let open = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
        let r = Reserve::of(limit);
        let in_all = limit.saturating_sub(open + r.messages + r.holders) / FDS_PER_OPEN_FILE;
        FileBudget { in_all, per_user: (in_all / 2).clamp(1, OPEN_FILES_PER_USER) }
    }
}

/// Makes `pid` the active holder of `page`'s token: at once if the token is
/// free or passive (the passive holder is called back), else once the
/// active holder finishes or is found dead (`EDEADLK` after `wait`).
fn hand_token(page: &TokenPage, holders: &Mutex<HashMap<i32, ProcessPort>>, counters: &Counters, pid: i32, wait: Duration) -> Res<()> {
    let deadline = Instant::now() + wait;
    loop {
        let before = page.state();
        match page.take_for(pid) {
            Ok(()) => {
                if matches!(before, TokenState::Passive(h) if h != pid) {
                    counters.callbacks.fetch_add(1, Ordering::Relaxed);
                }
                if let Ok(p) = ProcessPort::open(pid) {
                    remember(holders, p);
                }
                return Ok(());
            }
            Err(TokenState::Active(h)) => {
                let dead = {
                    let map = holders.lock().expect("holders");
                    match map.get(&h) {
                        Some(p) => p.is_dead(),
                        // A holder the server never gave the token to (any
                        // pid a client wrote into its page): looked up
                        // now, and not kept, so a client cannot make the
                        // server keep a pidfd per process on the machine.
                        None => ProcessPort::open(h).map_or(true, |p| p.is_dead()),
                    }
                };
                if dead {
                    holders.lock().expect("holders").remove(&h);
                    if page.seize_from_dead(h, pid) {
                        counters.dead_holders.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    continue;
                }
                if Instant::now() >= deadline {
                    return Err(Errno::DEADLK);
                }
                page.wait_active(Duration::from_millis(20));
            }
            Err(_) => {}
        }
    }
}

fn name_of(bytes: &[u8]) -> Res<&str> {
    let name = std::str::from_utf8(bytes).map_err(|_| Errno::INVAL)?;
    if name.len() > 4096 || name.contains('\0') {
        return Err(Errno::NAMETOOLONG);
    }
    Ok(name)
}

/// `name` for a lookup: the root itself is `.`.
fn lookup_name(name: &str) -> &str {
    if name.is_empty() {
        "."
    } else {
        name
    }
}

/// The user namespace of the process `pid` (`self` for the server) as the
/// device and inode of its `/proc/PID/ns/user`; `None` when it cannot be
/// read (the process is gone, or another user's to a server not run by
/// root).
fn user_namespace_of(pid: &str) -> Option<(u64, u64)> {
    let st = rustix::fs::stat(format!("/proc/{pid}/ns/user").as_str()).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// Runs `f` with the asker's file-system identity: directly when the server
/// runs as the asker's uid (in its gid and groups, or unable to take on
/// others), by switching this thread's identity when the server may
/// (root), and never otherwise (`EACCES`).
fn as_asker<T>(euid: u32, who: &Asker, f: impl FnOnce() -> T) -> Res<T> {
    if who.uid == euid && !who.switch {
        let Some(caps) = who.caps else { return Ok(f()) };
        // The server's user, with fewer of its capabilities: within them.
        let acting = ActingAs::within_capabilities(caps).map_err(|_| Errno::ACCESS)?;
        let r = f();
        drop(acting);
        return Ok(r);
    }
    let acting = ActingAs::user_in_with(who.uid, who.gid, &who.groups, who.caps.unwrap_or(0)).map_err(|_| Errno::ACCESS)?;
    let r = f();
    drop(acting);
    Ok(r)
}

/// Resolves `name` beneath `root` as an `O_PATH` descriptor. A name on a
/// procfs or another of the kernel's own file systems (the root may hold
/// `/proc` or `/sys`) is `EXDEV`, as a name leading out of the tree: the
/// server's `/proc/self` is the server, the kernel lets the server read
/// its own `/proc` files whatever identity it acts with, and some sysfs
/// files answer by their opener's credentials; the library hands such
/// names to the program's own kernel.
fn resolve(root: &OwnedFd, name: &str, follow: bool, extra: OFlags) -> Res<OwnedFd> {
    let mut flags = OFlags::PATH | OFlags::CLOEXEC | extra;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::openat2(root, name, flags, Mode::empty(), ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS)?;
    if files::pseudo_fs(fd.as_fd()).is_some() {
        return Err(Errno::XDEV);
    }
    Ok(fd)
}

fn reopen(path: BorrowedFd<'_>, flags: OFlags) -> Res<OwnedFd> {
    use std::os::fd::AsRawFd;
    rustix::fs::open(format!("/proc/self/fd/{}", path.as_raw_fd()), flags | OFlags::CLOEXEC | OFlags::NOCTTY, Mode::empty())
}

/// Opens the file or directory `name` beneath `root`, found as `st`,
/// with `flags`: through its `O_PATH` descriptor `path` ([`reopen`]),
/// unless `flags` hold `O_NOFOLLOW`, which the open file keeps (`F_GETFL`
/// shows it) but a magic link refuses. Then `name` is opened again
/// without following a last link, with `O_NONBLOCK` (no FIFO stalls the
/// server), and kept only if it is still the file found: `None` when the
/// name now leads elsewhere (the caller looks it up again).
fn reopen_as_asked(root: &OwnedFd, path: BorrowedFd<'_>, name: &str, st: &rustix::fs::Stat, flags: OFlags) -> Res<Option<OwnedFd>> {
    if !flags.contains(OFlags::NOFOLLOW) {
        return reopen(path, flags).map(Some);
    }
    let f = flags | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::openat2(root, name, f, Mode::empty(), ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS)?;
    let now = rustix::fs::fstat(&fd)?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Ok(None);
    }
    if !flags.contains(OFlags::NONBLOCK) {
        rustix::fs::fcntl_setfl(&fd, rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK)?;
    }
    Ok(Some(fd))
}

/// Opens `name` beneath `root` with the client's `flags` (access mode,
/// create, exclusive, truncate, append, synchronous and direct I/O,
/// no access time, directory, no-follow): only a
/// regular file or a directory. A FIFO, device or socket is never opened
/// here (opening a FIFO would stall the server until a writer came):
/// it is answered `EXDEV`, and the client's library lets the program's
/// own kernel open it, as it does for a name that leads out of the tree.
///
/// A directory opened for writing, to create or to truncate is `EISDIR`,
/// as natively. Creating through a dangling symbolic link creates the
/// link's target, as the kernel does (without `O_EXCL` or `O_NOFOLLOW`):
/// the link is read and the creation tried again at the name it holds,
/// beneath the root (a link out of the tree is `EXDEV`, and the kernel's).
fn open_beneath(root: &OwnedFd, name: &str, flags: i32, mode: u32, uid: u32) -> Res<(OwnedFd, bool)> {
    let o = OFlags::from_bits_retain(flags as u32);
    let access = o & (OFlags::RDONLY | OFlags::WRONLY | OFlags::RDWR);
    // What the open file keeps of the flags: O_SYNC, O_DSYNC, O_DIRECT and
    // O_NOATIME change what the kernel does with its reads and writes
    // (they were dropped: a program's O_SYNC writes were not synchronous,
    // and F_GETFL did not show them).
    // O_ASYNC and O_NOFOLLOW change nothing the server does, but stay in
    // the open file's flags as natively (they were dropped from `F_GETFL`).
    let keep = o & (OFlags::TRUNC | OFlags::APPEND | OFlags::SYNC | OFlags::DSYNC | OFlags::DIRECT | OFlags::NOATIME | OFlags::ASYNC);
    if o.contains(OFlags::CREATE) && name.ends_with('/') {
        // The kernel refuses to create a name with a trailing slash
        // (EISDIR) once the directories before it are found, whatever is
        // there: their errors come first.
        parent_of(root, name)?;
        return Err(Errno::ISDIR);
    }
    let mut name = name.to_owned();
    // The kernel's own limit on links followed in one lookup.
    for _ in 0..40 {
        // With O_CREAT | O_EXCL the kernel never follows a last link:
        // whatever is there, a dangling or looping link too, is EEXIST.
        let follow = !o.contains(OFlags::NOFOLLOW) && !o.contains(OFlags::CREATE | OFlags::EXCL);
        match resolve(root, &name, follow, OFlags::empty()) {
            Ok(path) => {
                if o.contains(OFlags::CREATE | OFlags::EXCL) {
                    return Err(Errno::EXIST);
                }
                let st = rustix::fs::fstat(&path)?;
                let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
                if ft.is_dir() {
                    if !access.is_empty() || o.intersects(OFlags::CREATE | OFlags::TRUNC) {
                        return Err(Errno::ISDIR);
                    }
                    // The open file's flags are the program's, as `F_GETFL`
                    // shows them: O_DIRECTORY only if it asked (the O_PATH
                    // descriptor holds the directory itself), and the
                    // status flags it asked for (`find` asks O_NONBLOCK;
                    // the reopen refuses O_DIRECT as the kernel does).
                    let asked = o
                        & (OFlags::DIRECTORY
                            | OFlags::NOATIME
                            | OFlags::ASYNC
                            | OFlags::NOFOLLOW
                            | OFlags::NONBLOCK
                            | OFlags::APPEND
                            | OFlags::SYNC
                            | OFlags::DSYNC
                            | OFlags::DIRECT);
                    match reopen_as_asked(root, path.as_fd(), &name, &st, OFlags::RDONLY | asked)? {
                        Some(fd) => return Ok((fd, true)),
                        None => continue,
                    }
                }
                if ft.is_symlink() {
                    // O_NOFOLLOW on a link: as the kernel answers (not a
                    // directory, if one was asked for).
                    return Err(if o.contains(OFlags::DIRECTORY) { Errno::NOTDIR } else { Errno::LOOP });
                }
                if !ft.is_file() {
                    return Err(if o.contains(OFlags::DIRECTORY) { Errno::NOTDIR } else { Errno::XDEV });
                }
                if o.contains(OFlags::DIRECTORY) {
                    return Err(Errno::NOTDIR);
                }
                // The reopen below carries no O_CREAT, so the kernel's
                // check of an existing file opened with it is made here.
                if o.contains(OFlags::CREATE) && sticky_refuses(root, &name, &st, uid)? {
                    return Err(Errno::ACCESS);
                }
                let fd = match reopen_as_asked(root, path.as_fd(), &name, &st, access | keep | (o & OFlags::NOFOLLOW) | OFlags::NONBLOCK)? {
                    Some(fd) => fd,
                    None => continue,
                };
                // The name may have changed kind in between: only what was
                // opened counts.
                if !rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode).is_file() {
                    return Err(Errno::XDEV);
                }
                return Ok((fd, false));
            }
            Err(Errno::NOENT) if o.contains(OFlags::CREATE) => {
                // O_EXCL alone keeps the kernel off a last link; O_NOFOLLOW
                // would stay in the open file's flags (`F_GETFL`), where the
                // program did not put it.
                let f = access | keep | (o & OFlags::NOFOLLOW) | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOCTTY;
                let (mode, umask) = super::split_creation_mode(mode);
                let create = |m: u32| rustix::fs::openat2(root, &name, f, Mode::from_raw_mode(m), ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS);
                let (made, masked) = match umask.and_then(|u| files::under_umask(u, || create(mode))) {
                    Some(r) => (r, true),
                    None => (create(mode & !umask.unwrap_or(0)), false),
                };
                match made {
                    Ok(fd) => {
                        if !masked {
                            // The client's umask (or the mode it masked
                            // itself): the server's own must not apply on
                            // top. The set-user-ID, set-group-ID and
                            // sticky bits the program asked for are kept,
                            // as the kernel keeps them (the kernel drops
                            // set-group-ID for a group the asker is not
                            // in, in fchmod as in open).
                            let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & !umask.unwrap_or(0)));
                        }
                        return Ok((fd, false));
                    }
                    Err(Errno::EXIST) if !o.intersects(OFlags::EXCL | OFlags::NOFOLLOW) => {
                        // A dangling link (or someone made the name
                        // meanwhile): follow the link by hand and try
                        // again where it points.
                        if let Some(target) = dangling_target(root, &name)? {
                            name = target;
                        }
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(Errno::LOOP)
}

/// Whether the kernel would refuse user `uid` an existing regular file
/// `name` (described by `file`) opened with `O_CREAT`, by its protection
/// of files in sticky directories (`fs.protected_regular`): in a sticky
/// directory other users may write to (any, or with the setting at 2,
/// its group too), a file that neither the directory's owner nor `uid`
/// owns is refused, to root as well, so that a program creating a file
/// there never writes into one another user put in its way. The
/// directory is the one holding the file after the last component's
/// links are followed, as the kernel's.
fn sticky_refuses(root: &OwnedFd, name: &str, file: &rustix::fs::Stat, uid: u32) -> Res<bool> {
    let mut name = name.to_owned();
    for _ in 0..40 {
        match dangling_target(root, &name)? {
            Some(target) => name = target,
            None => break,
        }
    }
    let (dir, _) = parent_of(root, &name)?;
    let d = rustix::fs::fstat(&dir)?;
    if d.st_mode & 0o1000 == 0 || d.st_uid == file.st_uid || uid == file.st_uid {
        return Ok(false);
    }
    let level = std::fs::read_to_string("/proc/sys/fs/protected_regular").ok().and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(0);
    Ok(level >= 1 && (d.st_mode & 0o002 != 0 || (level >= 2 && d.st_mode & 0o020 != 0)))
}

/// Where the symbolic link `name` beneath `root` points, as a name beneath
/// `root` (`None` if `name` is not a link now). An absolute target is
/// `EXDEV`: the library hands the open to the kernel.
fn dangling_target(root: &OwnedFd, name: &str) -> Res<Option<String>> {
    let (dir, last) = parent_of(root, name)?;
    let target = match rustix::fs::readlinkat(&dir, last.trim_end_matches('/'), Vec::new()) {
        Ok(t) => t,
        Err(Errno::INVAL) | Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    let target = target.to_str().map_err(|_| Errno::XDEV)?;
    if target.starts_with('/') {
        return Err(Errno::XDEV);
    }
    let trimmed = name.trim_end_matches('/');
    Ok(Some(match trimmed.rfind('/') {
        Some(i) => format!("{}/{target}", &trimmed[..i]),
        None => target.to_owned(),
    }))
}

/// The parent directory of `name` beneath `root` and the last component,
/// which keeps its trailing slashes and may be `.` or `..`: the kernel's
/// call on it then answers as it would natively (`unlink("file/")` is
/// `ENOTDIR`, `rmdir("d/.")` is `EINVAL`, a rename of `..` is `EBUSY`; the
/// kernel never acts on what a last `.` or `..` names). The root itself
/// (an empty name) has its parent outside: `EXDEV`, and the library hands
/// the call to the kernel.
fn parent_of<'a>(root: &OwnedFd, name: &'a str) -> Res<(OwnedFd, &'a str)> {
    let trimmed = name.trim_end_matches('/');
    if trimmed.is_empty() {
        return Err(Errno::XDEV);
    }
    let (dir, last) = match trimmed.rfind('/') {
        Some(i) => (&trimmed[..i], &name[i + 1..]),
        None => (".", name),
    };
    let dir = if dir.is_empty() { "." } else { dir };
    Ok((resolve(root, dir, true, OFlags::DIRECTORY)?, last))
}

fn stat(root: &OwnedFd, euid: u32, who: Asker, body: &[u8]) -> Res<Vec<u8>> {
    let flags = get_u32(body, 0).ok_or(Errno::INVAL)?;
    let name = lookup_name(name_of(&body[4..])?);
    let st = as_asker(euid, &who, || resolve(root, name, flags & 1 == 0, OFlags::empty()).and_then(|p| rustix::fs::fstat(&p)))??;
    let mut out = Vec::new();
    for v in [
        st.st_dev as u64,
        st.st_ino as u64,
        st.st_mode as u64,
        st.st_nlink as u64,
        st.st_uid as u64,
        st.st_gid as u64,
        st.st_rdev as u64,
        st.st_size as u64,
        st.st_blksize as u64,
        st.st_blocks as u64,
        st.st_atime as u64,
        st.st_atime_nsec as u64,
        st.st_mtime as u64,
        st.st_mtime_nsec as u64,
        st.st_ctime as u64,
        st.st_ctime_nsec as u64,
    ] {
        put_u64(&mut out, v);
    }
    Ok(out)
}

fn unlink(root: &OwnedFd, euid: u32, who: Asker, body: &[u8]) -> Res<()> {
    let flags = get_u32(body, 0).ok_or(Errno::INVAL)?;
    let name = name_of(&body[4..])?;
    let at = if flags & 1 != 0 { AtFlags::REMOVEDIR } else { AtFlags::empty() };
    as_asker(euid, &who, || parent_of(root, name).and_then(|(dir, last)| rustix::fs::unlinkat(&dir, last, at)))?
}

fn rename(root: &OwnedFd, euid: u32, who: Asker, body: &[u8]) -> Res<()> {
    let n = get_u32(body, 0).ok_or(Errno::INVAL)? as usize;
    let names = body.get(4..).ok_or(Errno::INVAL)?;
    let from = name_of(names.get(..n).ok_or(Errno::INVAL)?)?;
    let to = name_of(&names[n..])?;
    as_asker(euid, &who, || {
        let (fd, fl) = parent_of(root, from)?;
        let (td, tl) = parent_of(root, to)?;
        rustix::fs::renameat(&fd, fl, &td, tl)
    })?
}

fn mkdir(root: &OwnedFd, euid: u32, who: Asker, body: &[u8]) -> Res<()> {
    let (mode, umask) = super::split_creation_mode(get_u32(body, 0).ok_or(Errno::INVAL)?);
    let name = name_of(&body[4..])?;
    as_asker(euid, &who, || {
        let (dir, last) = parent_of(root, name)?;
        let make = |m: u32| rustix::fs::mkdirat(&dir, last, Mode::from_raw_mode(m));
        if let Some(made) = umask.and_then(|u| files::under_umask(u, || make(mode))) {
            // Made as the kernel makes it for the program: its umask, or
            // its directory's default ACL in the umask's place.
            return made;
        }
        let mode = mode & !umask.unwrap_or(0);
        make(mode)?;
        // Without a umask of this thread's own: the asker's umask is
        // applied here, and the server's own applied on top (a program
        // under `umask 0` made 0755 directories, not 0777).
        // The new directory's permission bits are set to the asked ones,
        // through a descriptor of it (never a link put in its place); the
        // set-group-ID bit it inherited stays.
        let made = rustix::fs::openat(&dir, last, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty());
        if let Ok(made) = made {
            if let Ok(st) = rustix::fs::fstat(&made) {
                let want = (st.st_mode & 0o7000) | (mode & 0o777);
                if st.st_mode & 0o7777 != want {
                    let _ = rustix::fs::fchmod(&made, Mode::from_raw_mode(want));
                }
            }
        }
        Ok(())
    })?
}
