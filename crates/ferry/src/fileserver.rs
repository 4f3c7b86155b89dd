//! The file server: files handed out as by-value memory objects (Accent's
//! "give me README").
//!
//! A client asks for a file by name and receives a memory object holding a
//! **snapshot** of it: it maps the object copy-on-write, pages nobody
//! touches are never read from disk, and the client's own writes stay in
//! its address space. Writing a file back replaces its contents in one
//! message; clients holding older snapshots keep the old contents.
//!
//! How the snapshot is kept without reading the file eagerly: each version
//! of a file is one object whose pager reads the file's inode with `pread`
//! on demand, and each `open` hands out a copy-on-write copy of it. A
//! write-back never changes that inode: the new contents go to a fresh file
//! that is renamed over the name, so older snapshots keep reading the old,
//! now unlinked inode, lazily, and nothing is duplicated. (Programs that
//! write the file *in place* behind the server's back do show through in
//! pages a snapshot has not touched yet, exactly as with `mmap`.)
//!
//! Compared with a plain `mmap(MAP_PRIVATE)` of the file: `mmap` is not a
//! snapshot (another writer's changes appear in pages not yet written by the
//! mapper, and truncation by anyone turns accesses past the new end into
//! `SIGBUS`), and it needs the right to open the file. Here the server
//! opens the file, checks the client's kernel-reported uid and gid against
//! the file's mode bits, and the client gets a value it can keep.
//!
//! Access control: a request is granted by the file's mode bits for the
//! sender's uid and gid exactly (owner, else group, else other). The server
//! grants no privilege to uid 0: it hands out what the mode says. Names are
//! resolved beneath the server's root (`openat2` with `RESOLVE_BENEATH`), so
//! `..`, absolute paths and symlinks leading out are refused.
//!
//! The server lives in the library so that `ferryd` or any program can host
//! it: make a [`FileServer`], register [`FileServer::new`]'s send right under
//! a name, and call [`FileServer::serve`] in a loop (or on a thread).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::message::Message;
use crate::pager::proto::{self, Fields};
use crate::pager::{
    Answer, MappedObject, MemoryObject, ObjectConfig, ObjectId, ObjectServer, Offset, Pager, PagerError, PagerFault,
    Supply,
};
use crate::port::SendRight;
use crate::sys::fs::{self as files, FileInfo};
use crate::timeout::Timeout;

/// Client → file server: body is the file's name. Reply: `FILE_OPENED
/// snapshot, size, version` (snapshot 0 for an empty file).
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

/// Reads one version of a file on demand.
struct FilePager {
    file: OwnedFd,
}

impl Pager for FilePager {
    fn data_request(&mut self, offset: Offset, buf: &mut [u8]) -> Result<Supply, PagerFault> {
        // A file shrunk in place by someone else reads as zeros past its end.
        files::read_at(self.file.as_fd(), buf, offset).map_err(|e| PagerFault(format!("reading the file: {e}")))?;
        Ok(Supply::Provided)
    }
}

struct Version {
    object: ObjectId,
    identity: (u64, u64),
    size: u64,
}

/// Serves files under a root directory as by-value memory objects.
pub struct FileServer {
    objects: ObjectServer,
    root: OwnedFd,
    root_path: PathBuf,
    versions: HashMap<String, Version>,
    config: ObjectConfig,
}

impl std::fmt::Debug for FileServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileServer").field("root", &self.root_path).field("files", &self.versions.len()).finish()
    }
}

type Refusal = (u64, String);

fn refuse(code: u64, why: impl Into<String>) -> Refusal {
    (code, why.into())
}

impl FileServer {
    /// Serves the files beneath `root`, reading ahead `config.cluster` pages
    /// per fault. Returns the server and a first send right to it.
    ///
    /// # Errors
    /// [`PagerError::Io`] if `root` cannot be opened as a directory.
    pub fn new(root: &Path, config: ObjectConfig) -> Result<(FileServer, SendRight), PagerError> {
        let dir = files::open_dir(root).map_err(|e| PagerError::Io(e.into()))?;
        let (objects, right) = ObjectServer::new()?;
        let config = ObjectConfig { mode: crate::pager::SupplyMode::Copy, track_dirty: false, ..config };
        Ok((FileServer { objects, root: dir, root_path: root.to_owned(), versions: HashMap::new(), config }, right))
    }

    /// Handles requests and faults until `timeout` passes with nothing to
    /// do; returns how many events were handled.
    pub fn serve(&mut self, timeout: Timeout) -> Result<usize, PagerError> {
        let FileServer { objects, root, versions, config, .. } = self;
        objects.serve_with(timeout, &mut |srv, m| match m.op() {
            OP_FILE_OPEN => Some(open(srv, root, versions, *config, m)),
            OP_FILE_WRITE => Some(write_back(srv, root, versions, m)),
            _ => None,
        })
    }

    /// The object server underneath (for its counters).
    pub fn objects(&self) -> &ObjectServer {
        &self.objects
    }
}

fn name_of(bytes: &[u8]) -> Result<&str, Refusal> {
    let name = std::str::from_utf8(bytes).map_err(|_| refuse(proto::E_BAD_REQUEST, "the name is not UTF-8"))?;
    if name.is_empty() || name.len() > 4096 || name.contains('\0') {
        return Err(refuse(proto::E_BAD_REQUEST, "empty, overlong or NUL in the name"));
    }
    Ok(name)
}

/// Whether the mode bits grant `want` (4 read, 2 write) to `uid`/`gid`.
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

fn open_beneath(root: &OwnedFd, name: &str) -> Result<OwnedFd, Refusal> {
    files::open_read_beneath(root.as_fd(), name)
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => refuse(proto::E_NO_OBJECT, format!("no file {name}")),
            rustix::io::Errno::XDEV | rustix::io::Errno::LOOP => refuse(proto::E_DENIED, format!("{name} leads outside the served directory")),
            e => refuse(proto::E_DENIED, format!("{name}: {e}")),
        })
}

fn open(srv: &mut ObjectServer, root: &OwnedFd, versions: &mut HashMap<String, Version>, config: ObjectConfig, m: &Message) -> Answer {
    (|| {
        let cred = m.sender().ok_or_else(|| refuse(proto::E_DENIED, "no credentials"))?;
        let name = name_of(m.body())?;
        let file = open_beneath(root, name)?;
        let st = files::info(file.as_fd()).map_err(|e| refuse(proto::E_UNSUPPORTED, e.to_string()))?;
        if !st.is_file {
            return Err(refuse(proto::E_UNSUPPORTED, format!("{name} is not a regular file")));
        }
        if !permits(&st, cred.uid, cred.gid, 4) {
            return Err(refuse(proto::E_DENIED, format!("{name} is not readable by uid {}", cred.uid)));
        }
        let identity = st.identity;
        let size = st.size;
        if size == 0 {
            return Ok(Message::new(OP_FILE_OPENED).with_body(proto::body(&[0, 0, 0])));
        }
        let current = versions.get(name).filter(|v| v.identity == identity && v.size == size && srv.contains(v.object));
        let version = match current {
            Some(v) => v.object,
            None => {
                let id = srv
                    .add_object(size, Box::new(FilePager { file }), config)
                    .map_err(|e| refuse(proto::E_UNSUPPORTED, e.to_string()))?;
                // A file changes only through a write-back, which checks the
                // file's mode: no user may change its object by message.
                let _ = srv.set_owner(id, NO_OWNER);
                if let Some(old) = versions.insert(name.to_owned(), Version { object: id, identity, size }) {
                    srv.retire(old.object);
                }
                id
            }
        };
        let snapshot = srv.copy_object_for(version, cred.uid).map_err(|e| refuse(proto::E_UNSUPPORTED, e.to_string()))?;
        let _ = srv.set_ephemeral(snapshot);
        Ok(Message::new(OP_FILE_OPENED).with_body(proto::body(&[snapshot, size, version])))
    })()
}

fn write_back(srv: &mut ObjectServer, root: &OwnedFd, versions: &mut HashMap<String, Version>, m: &Message) -> Answer {
    (|| {
        let cred = m.sender().ok_or_else(|| refuse(proto::E_DENIED, "no credentials"))?;
        let mut f = Fields::new(m.body());
        let n = f.u64().ok_or_else(|| refuse(proto::E_BAD_REQUEST, "body too short"))? as usize;
        let rest = f.rest();
        if n > rest.len() {
            return Err(refuse(proto::E_BAD_REQUEST, "name length past the body"));
        }
        let name = name_of(&rest[..n])?;
        let data = &rest[n..];
        let old = open_beneath(root, name)?;
        let st = files::info(old.as_fd()).map_err(|e| refuse(proto::E_UNSUPPORTED, e.to_string()))?;
        if !st.is_file || !permits(&st, cred.uid, cred.gid, 2) {
            return Err(refuse(proto::E_DENIED, format!("{name} is not writable by uid {}", cred.uid)));
        }
        // New contents go to a fresh inode renamed over the name: snapshots
        // of the old version keep reading the old inode.
        let tmp = format!("{name}.ferry-new-{}", std::process::id());
        files::replace(root.as_fd(), name, &tmp, data, st.mode, st.uid, st.gid)
            .map_err(|e| refuse(proto::E_UNSUPPORTED, format!("writing {name}: {e}")))?;
        if let Some(v) = versions.remove(name) {
            srv.retire(v.object);
        }
        Ok(Message::new(OP_FILE_WRITTEN).with_body(proto::body(&[data.len() as u64])))
    })()
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
    mapped: Option<MappedObject>,
    object: Option<MemoryObject>,
    version: ObjectId,
}

impl FileSnapshot {
    /// The file's bytes as they were when it was opened.
    pub fn as_slice(&self) -> &[u8] {
        self.mapped.as_ref().map_or(&[], |m| m.as_slice())
    }

    /// The bytes, writable; writes stay in this process.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.mapped.as_mut().map_or(&mut [], |m| m.as_mut_slice())
    }

    /// The snapshot's mapping (`None` for an empty file).
    pub fn mapped(&self) -> Option<&MappedObject> {
        self.mapped.as_ref()
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

    /// Opens `name` as a snapshot: mapped copy-on-write, read from disk
    /// page by page as it is touched.
    ///
    /// # Errors
    /// [`PagerError::Denied`] when the file's mode does not let this
    /// process's user read it, or the name leads outside the served
    /// directory; [`PagerError::BadRequest`] for a missing file; errors of
    /// [`MemoryObject::map`].
    pub fn open(&self, name: &str) -> Result<FileSnapshot, PagerError> {
        let r = self.call(Message::new(OP_FILE_OPEN).with_body(name.as_bytes()))?;
        let mut f = Fields::new(r.body());
        let (Some(id), Some(_size), Some(version), OP_FILE_OPENED) = (f.u64(), f.u64(), f.u64(), r.op()) else {
            return Err(PagerError::Protocol("bad reply to a file open".into()));
        };
        if id == 0 {
            return Ok(FileSnapshot { mapped: None, object: None, version });
        }
        let object = MemoryObject::new(self.server.try_clone().map_err(PagerError::Io)?, id).with_timeout(self.timeout);
        let mapped = object.map()?;
        Ok(FileSnapshot { mapped: Some(mapped), object: Some(object), version })
    }

    /// Replaces the contents of `name` with `data`, in one message (at most
    /// [`crate::message::MAX_INLINE`] − 8 − `name.len()` bytes). Snapshots
    /// taken before keep the old contents.
    ///
    /// # Errors
    /// [`PagerError::Denied`] when the file's mode does not let this
    /// process's user write it.
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
