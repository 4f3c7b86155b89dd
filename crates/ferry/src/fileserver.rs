//! The file server: files handed out as by-value memory objects (Accent's
//! "give me README").
//!
//! A client asks for a file by name and receives a memory object holding a
//! **snapshot** of it: it maps it copy-on-write, and its own writes stay in
//! its address space. Writing a file back replaces its contents in one
//! message; clients holding older snapshots keep the old contents.
//!
//! How a snapshot is kept: each **version** of a file is copied once, at
//! the first open that finds it, into a memfd inside the kernel (`sendfile`,
//! page cache to page cache), which is then sealed against writes,
//! shrinking and growing. Every snapshot of that version is the same
//! memfd, sent in the open's reply; the client checks its seals and maps it
//! privately, copy-on-write, with every page mapped at once (they all
//! exist). So reading a snapshot is reading memory the kernel already
//! holds: no fault reaches the server, nor, once mapped, the kernel. Later
//! opens of an unchanged file (same inode, size and change times) by the
//! same user share the version; a file changed in any way since gets a new
//! one, and so does another user (each version's memory is charged to
//! the one user it was made for, until it is gone everywhere). Because the
//! version is a copy, a snapshot is exact: a write-back, another program
//! writing the file in place, or truncating it, never shows in a snapshot
//! taken before. (A file being written *during* the open is copied again,
//! up to three times, until no change happened while copying; a writer
//! that never pauses gets a copy read while it wrote, as `read` would
//! give, and never anything written after the open's reply.)
//!
//! The snapshot is also an object of the memory-object protocol (the
//! version's pager reads the same memfd), so it can be copied, its counters
//! read, or mapped through a pager by programs that want that.
//!
//! Compared with a plain `mmap(MAP_PRIVATE)` of the file: `mmap` is not a
//! snapshot (another writer's changes appear in pages not yet written by the
//! mapper, and truncation by anyone turns accesses past the new end into
//! `SIGBUS`), and it needs the right to open the file. Here the server
//! opens the file with the client's permissions and the client gets a value
//! it can keep.
//!
//! Access control is the file system's own. When the server runs as root,
//! the serving thread resolves and opens each name *as the asker*: its
//! filesystem uid and gid become the message's kernel-reported uid and gid,
//! with no supplementary groups (kernel credentials carry only the primary
//! gid; nothing is granted that the kernel would not grant that uid and gid
//! alone), so the kernel applies directory search permission, modes and
//! ACLs; write-back creates and renames as the asker too, and gives the
//! new inode the file's owner, group and mode as a write in place by the
//! asker leaves them. A server that
//! cannot switch identities checks the mode bits itself, of every directory
//! on the way and of the file. A root asker gets what the mode bits say,
//! not root's privileges. Names are resolved beneath the server's root
//! (`openat2` with `RESOLVE_BENEATH`), so `..`, absolute paths and symlinks
//! leading out are refused; they are resolved with `O_PATH`, and only a
//! regular file is then opened, so a FIFO or a device can never stall the
//! server.
//!
//! Lifetimes and budgets: an open carries a hold send right; the snapshot
//! is usable by the opener alone and lives while the hold (or a mapping of
//! it) does. A file version, and its memfd, goes with its last snapshot at
//! the server (a client keeps the memory it mapped until it unmaps it).
//! Snapshots and mappings are counted per user ([`Budgets`]), and so is the
//! memory of the versions copied for a user, for as long as any process
//! keeps a descriptor or a mapping of one
//! ([`FileServer::set_memory_budget`], [`DEFAULT_MEMORY_PER_USER`] by
//! default).
//!
//! The server lives in the library so that `ferryd` or any program can host
//! it: make a [`FileServer`], register [`FileServer::new`]'s send right under
//! a name, and call [`FileServer::serve`] in a loop (or on a thread).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use crate::message::{Item, Message};
use crate::pager::proto::{self, Fields};
use crate::pager::{
    refusal, Answer, Budgets, MappedObject, MemoryObject, ObjectConfig, ObjectId, ObjectServer, Offset, Pager, PagerError,
    PagerFault, PagerFd, Supply,
};
use crate::port::SendRight;
use crate::sys::fs::{self as files, FileInfo};
use crate::sys::mem::{self, Mapping};
use crate::timeout::Timeout;

/// Client → file server: body is the file's name; one item, a hold send
/// right whose receive right keeps the snapshot alive. Reply: `FILE_OPENED
/// snapshot, size, version` (snapshot 0 for an empty file) with one item,
/// the version's memfd (a page-cache item, sealed against writes, shrinking
/// and growing), for a file that is not empty.
pub const OP_FILE_OPEN: u32 = 0x7066_0001;
/// File server → client: the snapshot's object id, the size, and the id of
/// the file version's own object (whose counters show disk reads).
pub const OP_FILE_OPENED: u32 = 0x7066_0002;
/// Client → file server: body is `name length (u64), name, new contents`.
/// Reply: `FILE_WRITTEN size`.
pub const OP_FILE_WRITE: u32 = 0x7066_0003;
/// File server → client: the file was replaced.
pub const OP_FILE_WRITTEN: u32 = 0x7066_0004;

/// The owner of the server's objects: no process has this uid, so the
/// object protocol's `WRITE` and `CLEAN_REQUEST` are refused to everyone.
const NO_OWNER: u32 = u32::MAX;

/// How much memory the versions copied for one user may take at once,
/// by default: 1 GiB (see [`FileServer::set_memory_budget`]).
pub const DEFAULT_MEMORY_PER_USER: u64 = 1 << 30;

/// How often a file found changed while it was being copied is copied again.
const COPY_ATTEMPTS: usize = 3;

/// Supplies one version of a file, through the memory-object protocol,
/// from its sealed copy (the same memfd that snapshots map directly), or,
/// for a version served lazily, from the file itself.
struct FilePager {
    cache: Arc<OwnedFd>,
}

impl Pager for FilePager {
    fn data_request(&mut self, offset: Offset, buf: &mut [u8]) -> Result<Supply, PagerFault> {
        files::read_at(self.cache.as_fd(), buf, offset).map_err(|e| PagerFault(format!("reading the file's copy: {e}")))?;
        Ok(Supply::Provided)
    }
}

/// The version of a name the server last opened: its object (whose pager
/// holds the memfd) lives while a snapshot of it does (each snapshot is a
/// copy of it), then goes with its memfd; the entry is then stale and
/// pruned.
struct Version {
    object: ObjectId,
    identity: (u64, u64),
    size: u64,
    changed: [i64; 4],
    cache: Weak<OwnedFd>,
    /// Served lazily from the file (too large to copy within the opener's
    /// memory budget): no copy, nothing charged, nothing mapped directly.
    lazy: bool,
}

/// Memory charged to a user: a version copied for it (its memfd's pages).
struct Charge {
    uid: u32,
    version: ObjectId,
    bytes: u64,
}

/// The memory of file versions charged to each user.
///
/// A version copied for a user is charged to it until its memory is gone
/// everywhere: the server's snapshots of it, and every descriptor and
/// mapping of the memfd the opens' replies carried, in any process (which
/// `gone` tells). Charged only while the server kept it, a version
/// outlived its charge in whoever kept the reply's descriptor after
/// letting the snapshot go, and the next open copied the file anew: each
/// copy the server's memory, charged to no one.
struct Memory {
    per_user: u64,
    /// By the watch on the version's memfd.
    charges: HashMap<i32, Charge>,
    /// `None` where inotify cannot be had: nothing is copied then.
    gone: Option<files::GoneWatch>,
    /// Versions charged at once, all users together, at most: each is an
    /// inotify watch of the server's user (of `max_user_watches`, which
    /// its other programs share) and, when it goes, an event in the queue
    /// (of `max_queued_events`, past which events are lost).
    most: usize,
}

impl Memory {
    fn new(per_user: u64) -> Memory {
        let most = files::inotify_limit("max_queued_events")
            .unwrap_or(16384)
            .min(files::inotify_limit("max_user_watches").unwrap_or(8192) / 2);
        Memory { per_user, charges: HashMap::new(), gone: files::GoneWatch::new().ok(), most }
    }

    /// Bytes and number of the versions charged to `uid`, and the number
    /// charged to every user, after forgetting the versions whose memory
    /// has gone everywhere. Were events lost, the versions the server
    /// still keeps stay charged and the rest are forgotten.
    fn held(&mut self, srv: &ObjectServer, uid: u32) -> (u64, usize, usize) {
        if let Some(gone) = &self.gone {
            let charges = &mut self.charges;
            gone.gone(|watch| match watch {
                Some(w) => {
                    charges.remove(&w);
                }
                None => charges.retain(|_, c| srv.contains(c.version)),
            });
        }
        let mine = self.charges.values().filter(|c| c.uid == uid);
        let (bytes, n) = mine.fold((0u64, 0), |(b, n), c| (b.saturating_add(c.bytes), n + 1));
        (bytes, n, self.charges.len())
    }

    /// Watches the memory of a version about to be made, so that it can be
    /// charged until it is gone everywhere; `None` if it cannot be.
    fn watch(&self, memfd: &OwnedFd) -> Option<i32> {
        self.gone.as_ref()?.watch(memfd.as_fd()).ok()
    }
}

/// The memory a version of `size` bytes takes: whole pages.
fn in_pages(size: u64) -> u64 {
    let page = mem::page_size() as u64;
    size.div_ceil(page).saturating_mul(page)
}

/// Serves files under a root directory as by-value memory objects.
pub struct FileServer {
    objects: ObjectServer,
    root: OwnedFd,
    root_path: PathBuf,
    versions: Versions,
    config: ObjectConfig,
    memory: Memory,
}

/// The versions by user and name, pruned of stale entries as the map
/// grows. Each user has versions of its own: a version's memory is
/// charged to the one user it was copied for, and reaches no other.
#[derive(Default)]
struct Versions {
    by_name: HashMap<(u32, String), Version>,
    prune_at: usize,
}

impl Versions {
    fn prune(&mut self, srv: &ObjectServer) {
        if self.by_name.len() >= self.prune_at {
            self.by_name.retain(|_, v| srv.contains(v.object));
            self.prune_at = (2 * self.by_name.len()).max(64);
        }
    }
}

impl std::fmt::Debug for FileServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileServer").field("root", &self.root_path).field("files", &self.versions.by_name.len()).finish()
    }
}

type Refusal = (u64, String);

fn refuse(code: u64, why: impl Into<String>) -> Refusal {
    (code, why.into())
}

impl FileServer {
    /// Serves the files beneath `root`, reading ahead `config.cluster` pages
    /// per fault. Returns the server and a first send right to it. Each user
    /// may hold [`Budgets::default`] snapshots and mappings at once (see
    /// [`FileServer::set_budgets`]). Run by root, it answers each request
    /// as the asker's message ([`ObjectServer::answer_as_asker`]).
    ///
    /// # Errors
    /// [`PagerError::Io`] if `root` cannot be opened as a directory.
    pub fn new(root: &Path, config: ObjectConfig) -> Result<(FileServer, SendRight), PagerError> {
        let dir = files::open_dir(root).map_err(|e| PagerError::Io(e.into()))?;
        let (mut objects, right) = ObjectServer::new()?;
        // A request names its own reply right, which may be the asker's
        // proxy of another host's port or a port of a service that trusts
        // root: the answer is the asker's message, not the server's.
        objects.answer_as_asker();
        let config = ObjectConfig { mode: crate::pager::SupplyMode::Copy, track_dirty: false, ..config };
        let memory = Memory::new(DEFAULT_MEMORY_PER_USER);
        Ok((FileServer { objects, root: dir, root_path: root.to_owned(), versions: Versions::default(), config, memory }, right))
    }

    /// Sets how many bytes of file versions copied for one user may exist
    /// at once (each in whole pages, counted until its last descriptor and
    /// mapping in any process are gone, not only while the server keeps
    /// it); default [`DEFAULT_MEMORY_PER_USER`]. A
    /// file that would take its opener past it is not copied: its version
    /// is served lazily from the file through the pager (nothing held but
    /// its descriptor), and is exact only until the file is written in place.
    pub fn set_memory_budget(&mut self, bytes_per_user: u64) {
        self.memory.per_user = bytes_per_user;
    }

    /// Sets what one user may make the server hold at once: snapshots
    /// opened and not yet released (each keeps its file version, and so a
    /// descriptor, alive) and mappings attached.
    pub fn set_budgets(&mut self, budgets: Budgets) {
        self.objects.set_budgets(budgets);
    }

    /// Handles requests and faults until `timeout` passes with nothing to
    /// do; returns how many events were handled.
    pub fn serve(&mut self, timeout: Timeout) -> Result<usize, PagerError> {
        let FileServer { objects, root, versions, config, memory, .. } = self;
        objects.serve_with(timeout, &mut |srv, m| match m.op() {
            OP_FILE_OPEN => Some(open(srv, root, versions, memory, *config, m)),
            OP_FILE_WRITE => Some(write_back(srv, root, versions, m)),
            _ => None,
        })
    }

    /// The object server underneath (for its counters).
    pub fn objects(&self) -> &ObjectServer {
        &self.objects
    }

    /// A minter of ports of this server's own, one per client
    /// ([`crate::pager::PortMinter`]); `main` is the send right
    /// [`FileServer::new`] returned, which the minter keeps. A server
    /// every user looks up should hand out only the minter's ports
    /// ([`crate::NameServer::add_system_service`]), so that no client can
    /// act on another's.
    pub fn port_minter(&self, main: SendRight) -> crate::pager::PortMinter {
        self.objects.port_minter(main)
    }
}

fn name_of(bytes: &[u8]) -> Result<&str, Refusal> {
    let name = std::str::from_utf8(bytes).map_err(|_| refuse(proto::E_BAD_REQUEST, "the name is not UTF-8"))?;
    if name.is_empty() || name.len() > 4096 || name.contains('\0') {
        return Err(refuse(proto::E_BAD_REQUEST, "empty, overlong or NUL in the name"));
    }
    Ok(name)
}

/// Whether the mode bits grant `want` (4 read, 2 write, 1 search) to
/// `uid`/`gid` (owner class, else group class, else other: the kernel's
/// order, without ACLs).
fn permits(st: &FileInfo, uid: u32, gid: u32, want: u32) -> bool {
    let mode = st.mode;
    let bits = if uid == st.uid {
        mode >> 6
    } else if gid == st.gid {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

fn resolve_refusal(name: &str, e: rustix::io::Errno) -> Refusal {
    match e {
        rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR => refuse(proto::E_NO_OBJECT, format!("no file {name}")),
        rustix::io::Errno::XDEV | rustix::io::Errno::LOOP => {
            refuse(proto::E_DENIED, format!("{name} leads outside the served directory"))
        }
        rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => refuse(proto::E_DENIED, format!("{name}: permission denied")),
        rustix::io::Errno::EXIST => refuse(proto::E_DENIED, format!("{name}: the temporary name for its new contents is taken")),
        e => refuse(proto::E_DENIED, format!("{name}: {e}")),
    }
}

/// Who asks, as the kernel reported it.
#[derive(Clone, Copy)]
struct Asker {
    uid: u32,
    gid: u32,
}

/// Runs `f` with the kernel applying the file system's permission rules
/// for `who`: on this thread, as that user (when the server may switch its
/// filesystem identity, i.e. runs as root). Returns `None` when it may not,
/// or when `who` is root: the caller then checks mode bits itself
/// ([`check_by_mode`]).
fn as_user<T>(who: Asker, f: impl FnOnce() -> T) -> Result<Option<T>, Refusal> {
    if who.uid == 0 {
        // Root's privileges are not passed on: root clients get what the
        // mode bits say, as every other user.
        return Ok(None);
    }
    match files::ActingAs::user(who.uid, who.gid) {
        Ok(acting) => {
            let r = f();
            drop(acting);
            Ok(Some(r))
        }
        Err(rustix::io::Errno::PERM) => Ok(None),
        Err(e) => Err(refuse(proto::E_UNSUPPORTED, format!("cannot act as uid {}: {e}", who.uid))),
    }
}

/// The last directory on the way to a name, as [`check_by_mode`] opened
/// and checked it (`None`: the root), and the name's last component.
#[derive(Debug)]
struct Checked<'a> {
    dir: Option<OwnedFd>,
    last: &'a str,
}

impl Checked<'_> {
    fn dir<'d>(&'d self, root: &'d OwnedFd) -> std::os::fd::BorrowedFd<'d> {
        self.dir.as_ref().unwrap_or(root).as_fd()
    }
}

/// What a server that cannot act as its clients checks itself: search
/// permission on the root and every directory on the way to `name`
/// (walked without symbolic links or `..`, stricter than the kernel), and
/// `dir_want` on the last directory (write and search, for a write-back).
/// Returns that directory, open, so that the caller acts on the name's
/// last component in exactly the directory checked: resolving the whole
/// name again would let another user swap a directory on the way for a
/// symbolic link in between.
fn check_by_mode<'a>(root: &OwnedFd, name: &'a str, who: Asker, dir_want: u32) -> Result<Checked<'a>, Refusal> {
    if name.starts_with('/') {
        // Absolute: out of the served tree, as the kernel's resolution says.
        return Err(resolve_refusal(name, rustix::io::Errno::XDEV));
    }
    let parts: Vec<&str> = name.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    let Some((last, dirs)) = parts.split_last() else { return Err(refuse(proto::E_BAD_REQUEST, "no file name")) };
    let info = |fd: &OwnedFd| files::info(fd.as_fd()).map_err(|e| refuse(proto::E_UNSUPPORTED, e.to_string()));
    let mut st = info(root)?;
    let mut cur: Option<OwnedFd> = None;
    for d in dirs {
        if *d == ".." || !permits(&st, who.uid, who.gid, 1) {
            return Err(refuse(proto::E_DENIED, format!("{name}: permission denied")));
        }
        let next = files::resolve_dir_strictly(cur.as_ref().unwrap_or(root).as_fd(), d).map_err(|e| resolve_refusal(name, e))?;
        st = info(&next)?;
        cur = Some(next);
    }
    if !permits(&st, who.uid, who.gid, dir_want) {
        return Err(refuse(proto::E_DENIED, format!("{name}: permission denied")));
    }
    Ok(Checked { dir: cur, last })
}

/// Resolves `name` as `who` would and opens it for reading (or checks it
/// may be written): only a regular file, never a FIFO, device or socket,
/// and only if the file system's rules let `who` reach and open it.
fn open_as(root: &OwnedFd, name: &str, who: Asker, write: bool) -> Result<(OwnedFd, FileInfo), Refusal> {
    match as_user(who, || open_in(root.as_fd(), name, name, who, write, false))? {
        Some(r) => r,
        None => {
            // The file, from the directory whose way was just checked.
            let checked = check_by_mode(root, name, who, 1)?;
            open_in(checked.dir(root), name, checked.last, who, write, true)
        }
    }
}

/// Opens `path` beneath `dir` (the file `name`, for what is said) for
/// reading, or writing: only a regular file, never a FIFO, device or
/// socket. With `check_mode`, the file's mode bits must let `who` do so;
/// without, this thread acts as `who` and the kernel checks.
fn open_in(dir: BorrowedFd<'_>, name: &str, path: &str, who: Asker, write: bool, check_mode: bool) -> Result<(OwnedFd, FileInfo), Refusal> {
    let path = files::resolve_beneath(dir, path).map_err(|e| resolve_refusal(name, e))?;
    let st = files::info(path.as_fd()).map_err(|e| refuse(proto::E_UNSUPPORTED, e.to_string()))?;
    if !st.is_file {
        return Err(refuse(proto::E_UNSUPPORTED, format!("{name} is not a regular file")));
    }
    if let Some(fs) = files::pseudo_fs(path.as_fd()) {
        return Err(refuse(proto::E_UNSUPPORTED, format!("{name} is on {fs}, the kernel's own file system: its files are not contents to copy")));
    }
    if check_mode && !permits(&st, who.uid, who.gid, if write { 2 } else { 4 }) {
        let what = if write { "writable" } else { "readable" };
        return Err(refuse(proto::E_DENIED, format!("{name} is not {what} by uid {}", who.uid)));
    }
    let file = files::reopen(path.as_fd(), write).map_err(|e| resolve_refusal(name, e))?;
    Ok((file, st))
}

/// The directory `name`'s last component is in, resolved beneath `root`
/// with this thread's identity (symbolic links that stay beneath it
/// followed, as for the whole name), and that component.
fn parent_of<'a>(root: &OwnedFd, name: &'a str) -> Result<(OwnedFd, &'a str), Refusal> {
    let (parent, last) = match name.rsplit_once('/') {
        // Absolute: out of the served tree, as the kernel's resolution says.
        Some(("", _)) => return Err(resolve_refusal(name, rustix::io::Errno::XDEV)),
        Some((parent, last)) => (parent, last),
        None => (".", name),
    };
    if matches!(last, "" | "." | "..") {
        return Err(refuse(proto::E_UNSUPPORTED, format!("{name} is not a regular file")));
    }
    let dir = files::resolve_dir_beneath(root.as_fd(), parent).map_err(|e| resolve_refusal(name, e))?;
    Ok((dir, last))
}

fn asker(m: &Message) -> Result<Asker, Refusal> {
    let c = m.sender().ok_or_else(|| refuse(proto::E_DENIED, "no credentials"))?;
    Ok(Asker { uid: c.uid, gid: c.gid })
}

/// Copies `size` bytes of `file` into a fresh memfd and seals it against
/// writes, shrinking and growing. Returns the memfd and the change stamp
/// the copy is known to match (taken before the last copy; a change during
/// it makes the next open copy again).
fn copy_version(file: &OwnedFd, st: &FileInfo, name: &str) -> Result<(OwnedFd, [i64; 4]), Refusal> {
    let io = |what: &str, e: rustix::io::Errno| refuse(proto::E_UNSUPPORTED, format!("{name}: {what}: {e}"));
    let memfd = mem::memfd("ferry-file", st.size).map_err(|e| io("making its copy", e))?;
    let mut before = st.changed;
    for attempt in 1..=COPY_ATTEMPTS {
        files::copy_into(file.as_fd(), memfd.as_fd(), st.size).map_err(|e| io("copying", e))?;
        let after = files::info(file.as_fd()).map_err(|e| io("stat", e))?;
        // The last copy, changed under it, keeps the stamp from before
        // it, which the file no longer has. Stamped with the state after
        // it, a copy its file's writer tore (writing behind where it had
        // read, then leaving the file alone) was handed to every later
        // opener as the file's contents.
        if (after.changed == before && after.size == st.size) || attempt == COPY_ATTEMPTS {
            break;
        }
        before = after.changed;
    }
    use rustix::fs::SealFlags;
    let seals = SealFlags::WRITE | SealFlags::FUTURE_WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    mem::add_seals(memfd.as_fd(), seals).map_err(|e| io("sealing its copy", e))?;
    Ok((memfd, before))
}

fn open(
    srv: &mut ObjectServer,
    root: &OwnedFd,
    versions: &mut Versions,
    memory: &mut Memory,
    config: ObjectConfig,
    m: &mut Message,
) -> Answer {
    let who = asker(m)?;
    let mut items = m.take_items().into_iter();
    let (Some(Item::Send(hold)), None) = (items.next(), items.next()) else {
        return Err(refuse(proto::E_BAD_REQUEST, "an open carries one hold send right"));
    };
    // The client's own port: another user's would keep the snapshot after
    // the client exited.
    if !crate::pager::made_by_asker(&hold, m.sender()) {
        return Err(refuse(proto::E_BAD_REQUEST, "a hold must be a send right to a port its client made: this one was made by another user"));
    }
    // Over budget: refuse before touching the file system.
    if !srv.can_hold(who.uid) {
        return Err(refusal(PagerError::OverBudget(format!(
            "uid {} already holds {} snapshots (the budget); release some first",
            who.uid,
            srv.budgets().holds_per_user
        ))));
    }
    let name = name_of(m.body())?;
    let (file, st) = open_as(root, name, who, false)?;
    let (identity, size) = (st.identity, st.size);
    if size == 0 {
        return Ok(Message::new(OP_FILE_OPENED).with_body(proto::body(&[0, 0, 0])));
    }
    let key = (who.uid, name.to_owned());
    let current = versions.by_name.get(&key).and_then(|v| {
        let same = v.identity == identity && v.size == size && v.changed == st.changed && srv.contains(v.object);
        same.then(|| v.cache.upgrade().map(|c| (v.object, c, v.lazy))).flatten()
    });
    // The memory this user's snapshots keep, this one's version included.
    // A version that would take the user past the budget is not copied: it
    // is served lazily from the file, as before versions were copied (pages
    // read on demand, nothing held but the descriptor; a snapshot of it
    // shows later in-place writes in pages not yet read, as `mmap` would).
    //
    // A lazy version is what an opener over its budget gets, and only such
    // an opener gets it: one within its budget gets a copy of its own, as
    // if no one had opened the file before. Handed to everyone, another
    // user's lazy version (made by filling that user's budget first) made
    // root's snapshot of a file read the live file, showing writes made
    // after the snapshot was taken.
    //
    // The memory of every version copied for the user counts until it is
    // gone everywhere, the copies whose descriptors the user kept after
    // letting their snapshots go included ([`Memory`]), and so does their
    // number (each is watched): at most as many as its snapshots.
    let (held, count, total) = memory.held(srv, who.uid);
    let extra = match &current {
        Some((_, _, false)) => 0,
        _ => in_pages(size),
    };
    let over = extra > 0 && (held.saturating_add(extra) > memory.per_user || count >= srv.budgets().holds_per_user || total >= memory.most);
    let current = current.filter(|(_, _, lazy)| !*lazy || over);
    let (version, cache, lazy) = match current {
        Some(v) => v,
        None => {
            // A copy whose end cannot be watched is not made.
            let copied = if over { None } else { Some(copy_version(&file, &st, name)?) };
            let copied = copied.and_then(|(memfd, changed)| memory.watch(&memfd).map(|w| (memfd, changed, w)));
            let lazy = copied.is_none();
            let (backing, changed, watch) = match copied {
                Some((memfd, changed, w)) => (memfd, changed, Some(w)),
                None => (file, st.changed, None),
            };
            let cache = Arc::new(backing);
            let id = srv.add_object(size, Box::new(FilePager { cache: cache.clone() }), config).map_err(refusal)?;
            if let Some(w) = watch {
                memory.charges.insert(w, Charge { uid: who.uid, version: id, bytes: in_pages(size) });
            }
            // A file changes only through a write-back, which checks the
            // file's mode: no user, the server's own included, may change
            // its object by message.
            srv.set_owner(id, NO_OWNER).map_err(refusal)?;
            let v = Version { object: id, identity, size, changed, cache: Arc::downgrade(&cache), lazy };
            if let Some(old) = versions.by_name.insert(key, v) {
                srv.retire(old.object);
            }
            versions.prune(srv);
            (id, cache, lazy)
        }
    };
    // A lazy version's descriptor is the file itself: it never leaves.
    let sent = if lazy {
        None
    } else {
        Some(crate::sys::socket::dup(cache.as_fd()).map_err(|e| refuse(proto::E_UNSUPPORTED, format!("{name}: {e}"))))
    };
    drop(cache);
    let sent = sent.transpose();
    // The snapshot is the opener's alone; the version's counters may be
    // read by whoever opened it.
    let snapshot = srv.copy_object(version).map_err(refusal)?;
    let made = sent.map_err(|e| PagerError::Protocol(e.1)).and_then(|sent| {
        srv.set_access(snapshot, &[who.uid]).and_then(|()| srv.grant(version, who.uid)).and_then(|()| srv.hold(snapshot, who.uid, hold))?;
        Ok(sent)
    });
    // The version goes with its last snapshot (and with it the memfd).
    srv.retire(version);
    let sent = match made {
        Ok(sent) => sent,
        Err(e) => {
            srv.retire(snapshot);
            return Err(refusal(e));
        }
    };
    let reply = Message::new(OP_FILE_OPENED).with_body(proto::body(&[snapshot, size, version]));
    Ok(match sent {
        Some(sent) => reply.with_item(Item::Pager(PagerFd::cache(sent, size))),
        None => reply,
    })
}

fn write_back(srv: &mut ObjectServer, root: &OwnedFd, versions: &mut Versions, m: &mut Message) -> Answer {
    let who = asker(m)?;
    let mut f = Fields::new(m.body());
    let n = f.u64().ok_or_else(|| refuse(proto::E_BAD_REQUEST, "body too short"))? as usize;
    let rest = f.rest();
    if n > rest.len() {
        return Err(refuse(proto::E_BAD_REQUEST, "name length past the body"));
    }
    let name = name_of(&rest[..n])?;
    let data = &rest[n..];
    // The one directory the whole write-back acts in, found once: the file
    // is checked, and its new contents made and renamed, there, by the
    // name's last component. Resolving the whole name again for each let
    // another user swap a directory on the way between them (a link of its
    // own), and the new inode, given the file's owner and mode, was made
    // where that user chose: uid nobody had files of root's, with its
    // contents, made in its own directory.
    //
    // As the asker, the kernel checks the way there and the directory's
    // write permission (for the new inode and the rename, with the sticky
    // bit's rules); a server that cannot act as the asker checks the mode
    // bits of every directory on the way and write and search on the last.
    let (dir, last, checked) = match as_user(who, || parent_of(root, name))? {
        Some(found) => {
            let (dir, last) = found?;
            (Some(dir), last, false)
        }
        None => {
            let c = check_by_mode(root, name, who, 3)?;
            (c.dir, c.last, true)
        }
    };
    let at = dir.as_ref().unwrap_or(root).as_fd();
    // Write permission on the file. The open file is kept for its extended
    // attributes, which the new contents get.
    let open = |check_mode| open_in(at, name, last, who, true, check_mode);
    let (old, st) = if checked { open(true)? } else { as_user(who, || open(false))?.unwrap_or_else(|| open(true))? };
    // New contents go to a fresh inode renamed over the name: snapshots
    // of the old version keep reading the old inode. The new contents'
    // name is one nobody can guess ahead, so that no one who may write the
    // directory can take it first.
    //
    // New contents that are to be another user's (the file's owner's,
    // below) are made by the server, never the asker: an inode of the
    // asker's, even for a moment, is one it may open, link and give
    // attributes by the name it sees made (inotify), and keep so once it
    // is the owner's. Uid nobody kept such descriptors and read through
    // them what root later wrote into its file of mode 0662, which nobody
    // may write but not read. The asker's leave to make a file there is
    // asked of the kernel first, as the asker.
    let for_another = who.uid != st.uid && (st.links <= 1 || who.uid == 0);
    if for_another && !checked {
        if let Some(Err(e)) = as_user(who, || files::may_add_to(at))? {
            return Err(resolve_refusal(name, e));
        }
    }
    let mut made = None;
    for _ in 0..4 {
        let tmp = temporary_name(last);
        let create = || files::create_beneath(at, &tmp, if for_another { 0o600 } else { st.mode });
        let r = if checked || for_another { create() } else { as_user(who, create)?.unwrap_or_else(create) };
        match r {
            Err(rustix::io::Errno::EXIST) => continue,
            r => {
                made = Some((r.map_err(|e| resolve_refusal(name, e))?, tmp));
                break;
            }
        }
    }
    let Some((new, tmp)) = made else { return Err(resolve_refusal(name, rustix::io::Errno::EXIST)) };
    let written = files::write_all_synced(new.as_fd(), data).map_err(|e| refuse(proto::E_UNSUPPORTED, format!("writing {name}: {e}")));
    // The file keeps its owner where the server may give it (as itself),
    // then its mode: the new inode was made under the server's umask, and a
    // file of mode 0666 became 0644. Not a file with other names written
    // back by another user than its owner (or root): the new inode takes
    // this name only, and would be a file of the owner's made where the
    // writer chose (a hard link of its own to the owner's file, which the
    // kernel lets it make once it may read and write the file): it is the
    // writer's, as if it had replaced the name with a file of its own,
    // which its write permission on the directory lets it do.
    if st.links <= 1 || who.uid == st.uid || who.uid == 0 {
        files::keep_owner(new.as_fd(), st.uid, st.gid);
    }
    // The file's ACL and its other extended attributes, and no others:
    // without its ACL the file's group bits, which show the ACL's mask,
    // would give its owning group what the ACL withheld. Given once the
    // owner is, and after whatever the inode had is removed: an inode
    // its asker made was its own until then, and so were its attributes
    // (the asker, who sees the inode's name as it is made, with inotify,
    // gave it an ACL granting itself read, and read the owner's file it
    // may only write). A file whose attributes cannot be kept is not
    // written back.
    let written = written.and_then(|()| {
        files::clear_xattrs(new.as_fd())
            .map_err(|(attr, e)| refuse(proto::E_UNSUPPORTED, format!("{name}: its new contents cannot lose the {attr} they were given: {e}")))?;
        files::copy_xattrs(old.as_fd(), new.as_fd())
            .map_err(|(attr, e)| refuse(proto::E_UNSUPPORTED, format!("{name}: its new contents cannot keep its {attr}: {e}")))
    });
    drop(old);
    // An asker holding CAP_FSETID (root, as a rule) keeps set-user-ID and
    // set-group-ID, as on its native write; one without it, root or not,
    // loses them as there. The kernel reads the capabilities an asker
    // holds in its own user namespace, and keeps the bits only for one
    // holding it in the initial namespace: uid nobody in a namespace of
    // its own (where it holds every capability) kept the set-user-ID bit
    // of root's file it wrote back.
    const CAP_FSETID: u64 = 1 << 4;
    let fsetid = m.sender().is_some_and(|c| {
        files::effective_capabilities_of(c.pid, c.uid).is_some_and(|caps| caps & CAP_FSETID != 0) && files::in_initial_user_namespace(c.pid)
    });
    let written = written.and_then(|()| {
        let now = files::info(new.as_fd()).map_err(|e| refuse(proto::E_UNSUPPORTED, format!("{name}: {e}")))?;
        // A new inode that is not the asker's has no other name: one the
        // asker made was its own until given the owner, and a hard link it
        // made meanwhile (it sees the name as it is made, with inotify)
        // was a file of the owner's, with the asker's contents, where the
        // asker chose, and gave the file a second name. Counted once the
        // owner is given, so no link made by the inode's maker is missed;
        // a link made since needs the kernel's leave to link the owner's
        // file. Such contents are not written back. (An inode that stays
        // the asker's may have other names: they are its own file's.)
        if now.links != 1 && now.uid != who.uid {
            return Err(refuse(proto::E_DENIED, format!("{name}: its new contents were given another name while they were made; not written back")));
        }
        let mode = written_mode(&st, &now, who, fsetid);
        files::set_mode(new.as_fd(), mode).map_err(|e| refuse(proto::E_UNSUPPORTED, format!("giving {name} its mode: {e}")))
    });
    drop(new);
    let renamed = written.and_then(|()| {
        let rename = || files::rename_beneath(at, &tmp, last).map_err(|e| resolve_refusal(name, e));
        if checked {
            rename()
        } else {
            as_user(who, rename)?.unwrap_or_else(rename)
        }
    });
    if let Err(e) = renamed {
        files::remove_beneath(at, &tmp);
        return Err(e);
    }
    versions.by_name.retain(|(_, n), v| {
        if n == name {
            srv.retire(v.object);
        }
        n != name
    });
    Ok(Message::new(OP_FILE_WRITTEN).with_body(proto::body(&[data.len() as u64])))
}

/// The mode bits of a file's new contents, whose inode is now as `now`
/// says, for a file that was as `was` says before `who` wrote it back: the
/// file's own, as a write in place by `who` leaves them. Unless the writer
/// holds CAP_FSETID (`fsetid`), the kernel drops set-user-ID on such a
/// write, and set-group-ID where the group may execute the file or the
/// writer is not in its group (the asker's primary gid). Where the server
/// could not give the new inode the file's owner or group (it does not run
/// as root), the new owner or group gets no more than it had: set-user-ID
/// and set-group-ID go, and the group class gets no more than others had.
fn written_mode(was: &FileInfo, now: &FileInfo, who: Asker, fsetid: bool) -> u32 {
    const SUID: u32 = 0o4000;
    const SGID: u32 = 0o2000;
    let mut mode = was.mode;
    if !fsetid || now.uid != was.uid {
        mode &= !SUID;
    }
    if (!fsetid && (mode & 0o010 != 0 || who.gid != was.gid)) || now.gid != was.gid {
        mode &= !SGID;
    }
    if now.gid != was.gid {
        mode &= !(0o070 & !((mode & 0o007) << 3));
    }
    mode
}

/// A fresh name beside `name` for its new contents, unpredictable to
/// other processes: the name, then 64 bits of a keyed hash (SipHash under
/// the process's random keys) of a counter.
fn temporary_name(name: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    format!("{name}.ferry-new-{:016x}", h.finish())
}

/// Maps a version's memory privately (and populated), after checking that nobody can change
/// it: a memfd of at least `size` bytes (the item's own length `len` must
/// be the snapshot's) sealed against writes (`F_SEAL_WRITE`: no shared
/// writable mapping of it exists or can be made, no `write` succeeds),
/// shrinking and growing. The page-cache item's own check on arrival only
/// asks for `F_SEAL_FUTURE_WRITE`, which leaves a writable mapping its
/// maker already had; a by-value snapshot must not accept that.
fn map_sealed(memfd: &OwnedFd, len: u64, size: u64) -> Result<Mapping, PagerError> {
    use rustix::fs::SealFlags;
    if len != size || size > isize::MAX as u64 {
        return Err(PagerError::Protocol(format!("the file server sent {len} bytes of memory for a {size}-byte snapshot")));
    }
    let need = SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW;
    if !mem::is_shmem(memfd.as_fd()) || !mem::seals(memfd.as_fd()).is_ok_and(|s| s.contains(need)) {
        return Err(PagerError::Protocol("the file server's snapshot memory is not sealed against writes".into()));
    }
    if mem::file_size(memfd.as_fd()).map_or(true, |n| n < size) {
        return Err(PagerError::Protocol("the file server's snapshot memory is shorter than the file".into()));
    }
    let map = Mapping::map(memfd.as_fd(), size as usize, true, mem::Share::Private, mem::Place::Anywhere, false)
        .map_err(|e| PagerError::Io(std::io::Error::from_raw_os_error(e.raw_os_error())))?;
    // Populated: the version's pages are all in memory already (copied at
    // its first open), so they are mapped now, shared and read-only, in one
    // call instead of one fault per 16 pages later; a write still copies
    // only the page written.
    map.populate_read();
    Ok(map)
}

/// A client of a file server.
#[derive(Debug)]
pub struct FileClient {
    server: SendRight,
    timeout: Timeout,
}

/// A snapshot of a file, mapped copy-on-write.
#[derive(Debug)]
pub struct FileSnapshot {
    direct: Option<Mapping>,
    mapped: Option<MappedObject>,
    object: Option<MemoryObject>,
    version: ObjectId,
}

impl FileSnapshot {
    /// The file's bytes as they were when it was opened. (A snapshot is a
    /// private mapping of a memfd sealed against writes, or supplied by
    /// copy; both are checked at [`FileClient::open`], so nobody else can
    /// change them.)
    pub fn as_slice(&self) -> &[u8] {
        if let Some(d) = &self.direct {
            return d.as_slice();
        }
        self.mapped.as_ref().and_then(|m| m.as_slice()).unwrap_or(&[])
    }

    /// The bytes, writable; writes stay in this process.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if let Some(d) = &mut self.direct {
            return d.as_mut_slice().unwrap_or(&mut []);
        }
        self.mapped.as_mut().and_then(|m| m.as_mut_slice()).unwrap_or(&mut [])
    }

    /// The snapshot's mapping through the memory-object protocol: `None`
    /// for an empty file and for a snapshot mapped directly from the
    /// version's sealed memory (what this library's server hands out; map
    /// [`FileSnapshot::object`] to go through the pager instead).
    pub fn mapped(&self) -> Option<&MappedObject> {
        self.mapped.as_ref()
    }

    /// Whether the bytes are a direct private mapping of the version's
    /// sealed memory (faults never reach the server).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The snapshot as a memory object (to copy it or read its counters).
    pub fn object(&self) -> Option<&MemoryObject> {
        self.object.as_ref()
    }

    /// The id of the file version's own object at the server, whose
    /// counters show how many pages were read from disk.
    pub fn version(&self) -> ObjectId {
        self.version
    }
}

impl FileClient {
    /// A client of the file server reached through `server`.
    pub fn new(server: SendRight) -> FileClient {
        FileClient { server, timeout: crate::pager::DEFAULT_TIMEOUT }
    }

    fn call(&self, msg: Message) -> Result<Message, PagerError> {
        crate::pager::call(&self.server, msg, self.timeout, PagerError::BadRequest)
    }

    /// Sets how long requests wait for the server's reply (default
    /// [`crate::pager::DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Timeout) -> FileClient {
        self.timeout = timeout;
        self
    }

    /// Opens `name` as a snapshot: the version's sealed copy, mapped
    /// privately (copy-on-write); its pages come from memory the kernel
    /// already holds, without asking the server. The server keeps the
    /// version while the returned value lives.
    ///
    /// Such a snapshot is exact: no later write to the file shows in it.
    /// A file that would take this user past the server's memory budget
    /// is served lazily from the file instead (pages read on first touch,
    /// [`FileSnapshot::is_direct`] false): an in-place write to a page the
    /// snapshot has not read yet then shows through, as with `mmap`.
    ///
    /// # Errors
    /// [`PagerError::Denied`] when the file system's permissions (the
    /// file's, and search permission on its directories) do not let this
    /// process's user read it, or the name leads outside the served
    /// directory; [`PagerError::BadRequest`] for a missing file;
    /// [`PagerError::Unsupported`] for anything but a regular file (a FIFO,
    /// a device, a directory); [`PagerError::OverBudget`] when this user
    /// already holds as many snapshots or mappings as the server allows (a
    /// file past its memory budget is served lazily, not refused);
    /// [`PagerError::Protocol`] when the memory sent is not sealed against
    /// writes; errors of [`MemoryObject::map`].
    pub fn open(&self, name: &str) -> Result<FileSnapshot, PagerError> {
        // The server keeps the snapshot while `hold` lives (or a mapping).
        let (hold, right) = crate::port().map_err(PagerError::Io)?;
        let mut r = self.call(Message::new(OP_FILE_OPEN).with_body(name.as_bytes()).with_item(Item::Send(right)))?;
        let mut f = Fields::new(r.body());
        let (Some(id), Some(size), Some(version), OP_FILE_OPENED) = (f.u64(), f.u64(), f.u64(), r.op()) else {
            return Err(PagerError::Protocol("bad reply to a file open".into()));
        };
        if id == 0 {
            return Ok(FileSnapshot { direct: None, mapped: None, object: None, version });
        }
        let cache = r.take_items().into_iter().find_map(|i| match i {
            Item::Pager(p) => p.into_cache(),
            _ => None,
        });
        let object =
            MemoryObject::new(self.server.try_clone().map_err(PagerError::Io)?, id).with_timeout(self.timeout).with_hold(hold);
        if let Some((memfd, len)) = cache {
            let direct = map_sealed(&memfd, len, size)?;
            // The mapping keeps the memory; the descriptor is not needed.
            drop(memfd);
            return Ok(FileSnapshot { direct: Some(direct), mapped: None, object: Some(object), version });
        }
        let mapped = object.map()?;
        if mapped.mode() != crate::pager::SupplyMode::Copy {
            // Only pages copied into this process make a snapshot nobody
            // else can change.
            return Err(PagerError::Protocol("the file server offered a zero-copy snapshot".into()));
        }
        Ok(FileSnapshot { direct: None, mapped: Some(mapped), object: Some(object), version })
    }

    /// Replaces the contents of `name` with `data`, in one message (at most
    /// [`crate::message::MAX_INLINE`] − 8 − `name.len()` bytes). Snapshots
    /// taken before keep the old contents.
    ///
    /// # Errors
    /// [`PagerError::Denied`] when the file system's permissions do not let
    /// this process's user write the file, or create and rename a file in
    /// its directory; [`PagerError::Unsupported`] for anything but a regular
    /// file.
    pub fn write(&self, name: &str, data: &[u8]) -> Result<(), PagerError> {
        let mut body = proto::body(&[name.len() as u64]);
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(data);
        let r = self.call(Message::new(OP_FILE_WRITE).with_body(body))?;
        if r.op() != OP_FILE_WRITTEN {
            return Err(PagerError::Protocol("bad reply to a file write".into()));
        }
        Ok(())
    }

    /// Counters of object `id` at the file server (e.g. a snapshot's
    /// [`FileSnapshot::version`], to see how many pages came from disk).
    pub fn stats(&self, id: ObjectId) -> Result<crate::pager::ObjectStats, PagerError> {
        MemoryObject::new(self.server.try_clone().map_err(PagerError::Io)?, id).with_timeout(self.timeout).stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A confused server's memory is never mapped into a snapshot: only a
    /// memfd sealed against writes (not merely future writes, which leave a
    /// writable mapping its maker already has), shrinking and growing, of
    /// the snapshot's length.
    #[test]
    fn snapshots_map_only_memory_sealed_against_writes() {
        use rustix::fs::SealFlags;
        let page = mem::page_size() as u64;
        let sealed = |seals: SealFlags| {
            let fd = mem::memfd("ferry-file-test", 2 * page).unwrap();
            mem::pwrite_all(fd.as_fd(), b"kept", 0).unwrap();
            mem::add_seals(fd.as_fd(), seals).unwrap();
            fd
        };
        let all = SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW;
        // A writable shared mapping made before the seal: FUTURE_WRITE
        // allows it to go on writing.
        let future = mem::memfd("ferry-file-test", 2 * page).unwrap();
        let mut theirs = Mapping::map(future.as_fd(), 2 * page as usize, true, mem::Share::Shared, mem::Place::Anywhere, false).unwrap();
        mem::add_seals(future.as_fd(), SealFlags::FUTURE_WRITE | SealFlags::SHRINK | SealFlags::GROW).unwrap();
        theirs.as_mut_slice().unwrap()[0] = 1;
        assert!(matches!(map_sealed(&future, 2 * page, 2 * page), Err(PagerError::Protocol(_))));
        for seals in [SealFlags::SHRINK | SealFlags::GROW, SealFlags::WRITE | SealFlags::GROW, SealFlags::WRITE | SealFlags::SHRINK] {
            assert!(matches!(map_sealed(&sealed(seals), 2 * page, 2 * page), Err(PagerError::Protocol(_))), "{seals:?}");
        }
        let good = sealed(all);
        assert!(matches!(map_sealed(&good, page, 2 * page), Err(PagerError::Protocol(_))), "length mismatch");
        assert!(matches!(map_sealed(&good, 3 * page, 3 * page), Err(PagerError::Protocol(_))), "shorter than the file");
        let mut m = map_sealed(&good, 2 * page, 2 * page).unwrap();
        assert_eq!(&m.as_slice()[..4], b"kept");
        // Private: our write stays ours.
        m.as_mut_slice().unwrap()[0] = b'K';
        let again = map_sealed(&good, 2 * page, 2 * page).unwrap();
        assert_eq!(&again.as_slice()[..4], b"kept");
    }

    /// The check a server that cannot act as its clients makes itself:
    /// directory search bits on the whole way, then the last directory's
    /// bits for a write-back.
    #[test]
    fn mode_checks_cover_every_directory_on_the_way() {
        let dir = std::env::temp_dir().join(format!("ferry-fs-modes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("open/closed/inner")).unwrap();
        std::fs::create_dir_all(dir.join("open/shared")).unwrap();
        let chmod = |p: &str, m| std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(m)).unwrap();
        chmod("open", 0o755);
        chmod("open/shared", 0o777);
        chmod("open/closed/inner", 0o755);
        chmod("open/closed", 0o700);
        let root = files::open_dir(&dir).unwrap();
        let st = files::info(root.as_fd()).unwrap();
        // Someone who is neither the owner nor in the group.
        let other = Asker { uid: st.uid.wrapping_add(1), gid: st.gid.wrapping_add(1) };
        assert!(check_by_mode(&root, "open/f", other, 1).is_ok());
        assert_eq!(check_by_mode(&root, "open/closed/inner/f", other, 1).unwrap_err().0, proto::E_DENIED);
        assert_eq!(check_by_mode(&root, "open/closed/f", other, 1).unwrap_err().0, proto::E_DENIED);
        assert_eq!(check_by_mode(&root, "open/f", other, 3).unwrap_err().0, proto::E_DENIED, "no writing in a 0755 directory");
        assert!(check_by_mode(&root, "open/shared/f", other, 3).is_ok());
        assert_eq!(check_by_mode(&root, "open/../open/f", other, 1).unwrap_err().0, proto::E_DENIED, "no .. in the walk");
        // The owner passes everywhere its bits allow.
        let owner = Asker { uid: st.uid, gid: st.gid };
        assert!(check_by_mode(&root, "open/closed/inner/f", owner, 1).is_ok());
        chmod("open/closed", 0o755);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
