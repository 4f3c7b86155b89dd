//! The client side of the name service: finding `ferryd` (starting one on
//! demand), checking that it is who it should be, registering send rights
//! under names and looking them up.
//!
//! The daemon listens on a `SOCK_SEQPACKET` socket at `$FERRY_BOOTSTRAP`, or
//! else `$XDG_RUNTIME_DIR/ferry/bootstrap`, or else `ferry-<uid>/bootstrap`
//! in the temporary directory (`$TMPDIR`, by default the system one).
//! Requests and replies are ordinary ferry messages on the connection (see
//! `docs/wire-format.md`, "Name service").
//!
//! Trust: every connection checks the credentials of the server it reached
//! (`SO_PEERCRED`): it must run as this user or as root, or the connection
//! is refused with [`NameError::Impostor`]. The default directory is created
//! mode 0700 and must be a real directory owned by this user that nobody
//! else may enter ([`NameError::UnsafeDirectory`] otherwise), so another user
//! cannot put a socket there first.
//!
//! When nothing listens at the default path, [`Bootstrap::connect`] starts
//! `ferryd` detached from the caller (its own session, output to
//! `ferryd.log` beside the socket), so the name service outlives any one
//! client; it exits after [`AUTOSTART_IDLE_EXIT`] with no connection and
//! no registered name, and the next client starts another. The binary is `$FERRY_DAEMON`, else `ferryd` beside the running
//! program (or one directory up), else on `PATH`. Set
//! `FERRY_NO_AUTOSTART=1` (or the older `FERRY_NO_EMBED=1`) to forbid
//! this; a path given by `FERRY_BOOTSTRAP` is never started on demand.
//! [`Bootstrap::private`] runs a private name server inside the caller
//! instead.
//!
//! A connection whose server went away reconnects once, on the next
//! request, and re-sends it. That is sound for every request, registration
//! included: the server closes a connection without a reply only when it
//! exits, and its registrations go with it, so a re-sent registration can
//! never meet its own earlier copy. Registrations made through the lost
//! server are not re-made.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::error::{io_err, RecvError, SendError};
use crate::message::{Item, Message};
use crate::port::{recv_on, send_on, SendRight};
use crate::sys::socket;
use crate::timeout::Timeout;

pub(crate) const OP_REGISTER: u32 = 1;
pub(crate) const OP_LOOKUP: u32 = 2;
pub(crate) const OP_LIST: u32 = 3;
pub(crate) const OP_UNREGISTER: u32 = 4;

pub(crate) const ST_OK: u32 = 0;
pub(crate) const ST_TAKEN: u32 = 1;
pub(crate) const ST_NOT_FOUND: u32 = 2;
pub(crate) const ST_INVALID: u32 = 3;
pub(crate) const ST_DENIED: u32 = 4;
pub(crate) const ST_BAD_REQUEST: u32 = 5;
pub(crate) const ST_LIMIT: u32 = 6;

pub(crate) const LIMIT_NAMES: &str = "names";
pub(crate) const LIMIT_CONNECTIONS: &str = "connections";
pub(crate) const LIMIT_DESCRIPTORS: &str = "descriptors";

/// Longest name accepted, in bytes.
pub const MAX_NAME: usize = 255;

/// The longest listing a client accepts from the name server (it arrives
/// as a by-value region when it does not fit inline).
const MAX_LIST_BYTES: usize = 64 << 20;

/// How long a client waits for the name server to answer.
const REQUEST_TIMEOUT: Timeout = Timeout::After(Duration::from_secs(10));

/// How long [`Bootstrap::connect`] waits for a daemon it started to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Which budget of the name server a request would have exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Live registrations of one user.
    Names,
    /// Open connections of one user.
    Connections,
    /// The server's descriptors (its reserve is not for clients).
    Descriptors,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Names => "registrations per user",
            Limit::Connections => "connections per user",
            Limit::Descriptors => "descriptors the server may hold for clients",
        })
    }
}

/// Why a name-service request failed.
#[derive(Debug)]
pub enum NameError {
    /// The name is registered to a live port already.
    Taken,
    /// No live registration under that name for this user.
    NotFound,
    /// Empty, longer than [`MAX_NAME`], or containing control characters.
    Invalid,
    /// Another user's registration, or a request the caller may not make.
    Denied,
    /// The request would exceed one of the server's budgets.
    LimitReached {
        /// Which budget.
        what: Limit,
        /// Its size on that server.
        limit: usize,
    },
    /// The server refused the request as malformed, and said why.
    Refused(String),
    /// The socket at `path` is served by another user (neither this one
    /// nor root): it was not trusted with anything.
    Impostor {
        /// The socket.
        path: PathBuf,
        /// The uid of the process listening there.
        uid: u32,
    },
    /// The directory that should hold this user's socket is not safe to
    /// use (another user's, a symbolic link, or open to others).
    UnsafeDirectory {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// No name server listens at `path`, and none could be started: the
    /// message says why and what to do.
    NotRunning {
        /// Where the server was expected.
        path: PathBuf,
        /// Why none runs there and what to do.
        why: String,
    },
    /// The name server could not be reached or stopped answering; the error
    /// says which server and what happened.
    Unavailable(io::Error),
    /// The server answered with something that is not a valid reply.
    Protocol(String),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Taken => write!(f, "name already registered to a live port"),
            NameError::NotFound => write!(f, "no such name registered for this user"),
            NameError::Invalid => write!(f, "invalid name (1-{MAX_NAME} bytes, no control characters)"),
            NameError::Denied => write!(f, "permission denied by the name server"),
            NameError::LimitReached { what, limit } => {
                write!(f, "the name server's limit of {limit} {what} is reached; release some, or raise it (ferryd --help)")
            }
            NameError::Refused(why) => write!(f, "the name server refused the request: {why}"),
            NameError::Impostor { path, uid } => write!(
                f,
                "refusing the name server at {}: it runs as uid {uid}, neither this user (uid {}) nor root; another user may have put it there",
                path.display(),
                rustix::process::getuid().as_raw()
            ),
            NameError::UnsafeDirectory { path, why } => write!(f, "refusing to use {}: {why}", path.display()),
            NameError::NotRunning { path, why } => write!(f, "no name server at {}: {why}", path.display()),
            NameError::Unavailable(e) => write!(f, "name server unavailable: {e}"),
            NameError::Protocol(s) => write!(f, "name server protocol error: {s}"),
        }
    }
}

impl std::error::Error for NameError {}

impl From<SendError> for NameError {
    fn from(e: SendError) -> Self {
        NameError::Unavailable(io::Error::new(io::ErrorKind::BrokenPipe, e.to_string()))
    }
}

impl<R> From<crate::SendFailed<R>> for NameError {
    fn from(e: crate::SendFailed<R>) -> Self {
        NameError::from(e.into_error())
    }
}

impl From<RecvError> for NameError {
    fn from(e: RecvError) -> Self {
        match e {
            RecvError::BadMessage(w) => NameError::Protocol(w.to_string()),
            other => NameError::Unavailable(io::Error::other(other.to_string())),
        }
    }
}

/// One registration as [`Bootstrap::list`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameEntry {
    /// The registered name.
    pub name: String,
    /// The user that registered it (names are scoped per user).
    pub uid: u32,
    /// The process that registered it.
    pub owner_pid: i32,
    /// Bytes queued at the port and not yet received.
    pub queued_bytes: usize,
}

/// Checks a name against the rules.
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && std::str::from_utf8(name).is_ok_and(|s| !s.chars().any(char::is_control))
}

/// Where the name server is expected, and whether this user's default.
fn location() -> (PathBuf, bool) {
    if let Some(p) = std::env::var_os("FERRY_BOOTSTRAP") {
        return (PathBuf::from(p), false);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return (Path::new(&d).join("ferry").join("bootstrap"), true);
    }
    let dir = std::env::temp_dir().join(format!("ferry-{}", rustix::process::getuid().as_raw()));
    (dir.join("bootstrap"), true)
}

/// The path the name server listens on for this process.
pub fn default_path() -> PathBuf {
    location().0
}

/// Whether starting a daemon on demand is allowed here.
fn autostart_allowed() -> bool {
    let off = |v: &str| std::env::var_os(v).is_some_and(|v| v == "1");
    !off("FERRY_NO_AUTOSTART") && !off("FERRY_NO_EMBED")
}

/// Creates `dir` (mode 0700, never through a symbolic link) if it is
/// missing, then checks that it is a real directory owned by this user
/// that nobody else may enter.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), NameError> {
    use rustix::fs::{Mode, OFlags};
    let unsafe_dir = |why: String| NameError::UnsafeDirectory { path: dir.to_owned(), why };
    match rustix::fs::mkdir(dir, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(unsafe_dir(format!("cannot create it: {e}"))),
    }
    let fd = rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => unsafe_dir("it is a symbolic link or not a directory".into()),
            e => unsafe_dir(format!("cannot open it: {e}")),
        })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| unsafe_dir(format!("cannot examine it: {e}")))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(unsafe_dir(format!(
            "it is owned by uid {}, not by this user (uid {me}); another user may have created it to intercept this user's rights. Remove it, or set XDG_RUNTIME_DIR or FERRY_BOOTSTRAP",
            st.st_uid
        )));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(unsafe_dir(format!("its mode {:o} lets other users in; make it 0700", st.st_mode & 0o7777)));
    }
    Ok(())
}

/// Candidates for the `ferryd` binary, in the order they are tried.
fn daemon_candidates() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os("FERRY_DAEMON") {
        return vec![PathBuf::from(p)];
    }
    let mut out = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            out.push(dir.join("ferryd"));
            if let Some(up) = dir.parent() {
                out.push(up.join("ferryd"));
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        out.extend(std::env::split_paths(&path).map(|d| d.join("ferryd")));
    }
    out
}

/// How long a daemon started on demand stays with no connection and no
/// name before it exits (`ferryd --idle-exit`).
pub const AUTOSTART_IDLE_EXIT: Duration = Duration::from_secs(600);

/// Starts `ferryd` detached, serving `path`, and waits (bounded) until it
/// answers there.
fn start_daemon(path: &Path) -> Result<Bootstrap, NameError> {
    use std::os::unix::fs::PermissionsExt;
    // The daemon runs from `/`, so it holds no directory of the caller's.
    let path = &std::path::absolute(path).map_err(|e| NameError::NotRunning { path: path.to_owned(), why: format!("cannot make the path absolute: {e}") })?;
    let candidates = daemon_candidates();
    let Some(bin) = candidates.iter().find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)) else {
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        return Err(NameError::NotRunning {
            path: path.to_owned(),
            why: format!(
                "nothing listens there and no ferryd binary was found to start (looked at: {}); put ferryd on PATH, set FERRY_DAEMON to it, or run `ferryd` yourself",
                looked.join(", ")
            ),
        });
    };
    let bin = &std::path::absolute(bin).unwrap_or_else(|_| bin.clone());
    let log = path.with_file_name("ferryd.log");
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&log)
        .map_err(|e| NameError::NotRunning { path: path.to_owned(), why: format!("cannot open the daemon's log {}: {e}", log.display()) })?;
    // `--detach`: ferryd starts itself again in a new session and this
    // child exits at once, so the daemon is nobody's child here and outlives
    // this process.
    let status = Command::new(bin)
        .args(["--detach", "--idle-exit", &AUTOSTART_IDLE_EXIT.as_secs().to_string(), "--socket"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(out))
        .env_remove("FERRY_BOOTSTRAP")
        .current_dir("/")
        .status()
        .map_err(|e| NameError::NotRunning { path: path.to_owned(), why: format!("cannot start {}: {e}", bin.display()) })?;
    if !status.success() {
        return Err(NameError::NotRunning {
            path: path.to_owned(),
            why: format!("{} --detach failed ({status}); see {}", bin.display(), log.display()),
        });
    }
    let deadline = Instant::now() + START_TIMEOUT;
    let mut nap = Duration::from_millis(2);
    loop {
        match Bootstrap::connect_to(path) {
            Err(NameError::NotRunning { .. }) if Instant::now() < deadline => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(100));
            }
            Err(NameError::NotRunning { .. }) => {
                return Err(NameError::NotRunning {
                    path: path.to_owned(),
                    why: format!("started {} but it did not answer within {START_TIMEOUT:?}; see {}", bin.display(), log.display()),
                })
            }
            other => return other,
        }
    }
}

/// A connection to the name server.
#[derive(Debug)]
pub struct Bootstrap {
    conn: OwnedFd,
    identity: (u64, u64),
    buf: Vec<u8>,
    path: PathBuf,
    server: socket::Cred,
    /// Whether a reconnection may start a daemon (the per-user default).
    autostart: bool,
}

/// How one exchange with the server ended, when not with a reply.
enum Lost {
    /// The server closed the connection (or was gone): reconnecting helps.
    Closed(String),
    /// Anything else: reconnecting would not help.
    Failed(NameError),
}

impl Bootstrap {
    /// Connects to the name server at [`default_path`]. At this user's
    /// default path (no `FERRY_BOOTSTRAP`), first makes sure its directory
    /// is private to this user, and if nothing listens there starts
    /// `ferryd` detached (unless `FERRY_NO_AUTOSTART=1`).
    ///
    /// # Errors
    /// [`NameError::UnsafeDirectory`] if the default directory belongs to
    /// someone else or is open to others; [`NameError::Impostor`] if the
    /// server there runs as another user; [`NameError::NotRunning`] if no
    /// server runs and none could be started, with what to do about it.
    pub fn connect() -> Result<Bootstrap, NameError> {
        let (path, default) = location();
        if !default {
            return Bootstrap::connect_to(&path).map_err(|e| match e {
                NameError::NotRunning { path, why } => NameError::NotRunning { path, why: format!("{why} (the path comes from FERRY_BOOTSTRAP)") },
                e => e,
            });
        }
        if let Some(dir) = path.parent() {
            ensure_private_dir(dir)?;
        }
        let allowed = autostart_allowed();
        let mut b = match Bootstrap::connect_to(&path) {
            Err(NameError::NotRunning { .. }) if allowed => start_daemon(&path)?,
            Err(NameError::NotRunning { path, why }) => {
                return Err(NameError::NotRunning { path, why: format!("{why}; starting one on demand is off (FERRY_NO_AUTOSTART)") })
            }
            other => other?,
        };
        b.autostart = allowed;
        Ok(b)
    }

    /// Connects to the name server listening at `path`; never starts one.
    ///
    /// # Errors
    /// [`NameError::NotRunning`] if nothing listens there;
    /// [`NameError::Impostor`] if the server runs as another user than this
    /// one or root.
    pub fn connect_to(path: &Path) -> Result<Bootstrap, NameError> {
        let conn = socket::connect_to(path).map_err(|e| {
            if nobody_listening(e) {
                NameError::NotRunning { path: path.to_owned(), why: format!("nothing listens there ({e})") }
            } else {
                NameError::Unavailable(io::Error::new(io_err(e).kind(), format!("cannot connect to {}: {e}", path.display())))
            }
        })?;
        let server = socket::peer_cred(conn.as_fd()).map_err(|e| NameError::Unavailable(io_err(e)))?;
        let (uid, euid) = (rustix::process::getuid().as_raw(), rustix::process::geteuid().as_raw());
        if server.uid != 0 && server.uid != uid && server.uid != euid {
            return Err(NameError::Impostor { path: path.to_owned(), uid: server.uid });
        }
        let identity = socket::identity(conn.as_fd()).map_err(|e| NameError::Unavailable(io_err(e)))?;
        Ok(Bootstrap { conn, identity, buf: vec![0; crate::wire::MAX_MESSAGE + 1], path: path.to_owned(), server, autostart: false })
    }

    /// Starts a private name server on a thread of this process, listening
    /// in `dir` (created mode 0700 if missing; it must not be open to other
    /// users' writes), and connects to it. No environment variable is read;
    /// other processes reach it with `FERRY_BOOTSTRAP` set to
    /// [`path`](Bootstrap::path) or with [`Bootstrap::connect_to`].
    pub fn private(dir: &Path) -> Result<Bootstrap, NameError> {
        let path = dir.join("bootstrap");
        let server = crate::nameserver::NameServer::bind(&path).map_err(|e| NameError::NotRunning {
            path: path.clone(),
            why: format!("cannot start a private name server: {e}"),
        })?;
        server.spawn().map_err(NameError::Unavailable)?;
        Bootstrap::connect_to(&path)
    }

    /// The path of the name server this connection reached.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The process id of the name server, as the kernel reported it when
    /// this connection was made.
    pub fn server_pid(&self) -> i32 {
        self.server.pid
    }

    /// One request and its reply, without retrying.
    fn exchange(&mut self, msg: Message) -> Result<Message, Lost> {
        let sent = send_on(self.conn.as_fd(), msg, REQUEST_TIMEOUT).map_err(|(e, _unsent)| e);
        if let Err(e) = sent {
            // A server that refused this connection left a farewell saying
            // why before closing it; read it if it is there.
            if let Ok(Some(m)) = recv_on(self.conn.as_fd(), &mut self.buf, self.identity, Timeout::Zero, false) {
                return Ok(m);
            }
            return Err(match e {
                SendError::PeerDead | SendError::Io(_) => Lost::Closed(format!("the connection failed: {e}")),
                e => Lost::Failed(e.into()),
            });
        }
        match recv_on(self.conn.as_fd(), &mut self.buf, self.identity, REQUEST_TIMEOUT, false) {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(Lost::Closed("it closed the connection".into())),
            Err(RecvError::Timeout) => Err(Lost::Failed(NameError::Unavailable(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the name server at {} did not answer within {REQUEST_TIMEOUT:?}", self.path.display()),
            )))),
            Err(RecvError::Io(e)) => Err(Lost::Closed(format!("the connection failed: {e}"))),
            Err(e) => Err(Lost::Failed(e.into())),
        }
    }

    /// Sends the request `build` makes and returns the reply's message on
    /// success. A connection the server closed is re-made once and the
    /// request sent again (see the module documentation).
    fn request(&mut self, build: &dyn Fn() -> Result<Message, NameError>) -> Result<Message, NameError> {
        let reply = match self.exchange(build()?) {
            Ok(m) => m,
            Err(Lost::Failed(e)) => return Err(e),
            Err(Lost::Closed(why)) => {
                let what = format!("the name server at {} went away ({why})", self.path.display());
                let fresh = if self.autostart { Bootstrap::connect() } else { Bootstrap::connect_to(&self.path) };
                match fresh {
                    Ok(b) => {
                        let autostart = self.autostart;
                        *self = b;
                        self.autostart = autostart;
                    }
                    Err(e) => return Err(NameError::Unavailable(io::Error::new(io::ErrorKind::ConnectionReset, format!("{what}; reconnecting failed: {e}")))),
                }
                match self.exchange(build()?) {
                    Ok(m) => m,
                    Err(Lost::Failed(e)) => return Err(e),
                    Err(Lost::Closed(why)) => {
                        return Err(NameError::Unavailable(io::Error::new(
                            io::ErrorKind::ConnectionReset,
                            format!("{what}; the new connection was lost too ({why})"),
                        )))
                    }
                }
            }
        };
        match reply.op() {
            ST_OK => Ok(reply),
            ST_TAKEN => Err(NameError::Taken),
            ST_NOT_FOUND => Err(NameError::NotFound),
            ST_INVALID => Err(NameError::Invalid),
            ST_DENIED => Err(NameError::Denied),
            ST_BAD_REQUEST => Err(NameError::Refused(String::from_utf8_lossy(reply.body()).into_owned())),
            ST_LIMIT => Err(parse_limit(reply.body())),
            other => Err(NameError::Protocol(format!("status {other}"))),
        }
    }

    /// Registers `right` under `name` for the calling user. The server keeps
    /// a copy; the registration disappears when the port's receive right is
    /// gone.
    ///
    /// # Errors
    /// [`NameError::Taken`] if the name is registered to a live port;
    /// [`NameError::Invalid`] for a bad name; [`NameError::LimitReached`]
    /// when this user holds as many names as the server allows.
    pub fn register(&mut self, name: &str, right: &SendRight) -> Result<(), NameError> {
        if !valid_name(name.as_bytes()) {
            return Err(NameError::Invalid);
        }
        self.request(&|| {
            let copy = right.try_clone().map_err(NameError::Unavailable)?;
            Ok(Message::new(OP_REGISTER).with_body(name.as_bytes()).with_item(copy))
        })?;
        Ok(())
    }

    /// Looks `name` up among the calling user's registrations (then the
    /// system names) and returns a new send right to it.
    pub fn lookup(&mut self, name: &str) -> Result<SendRight, NameError> {
        if !valid_name(name.as_bytes()) {
            return Err(NameError::Invalid);
        }
        let mut m = self.request(&|| Ok(Message::new(OP_LOOKUP).with_body(name.as_bytes())))?;
        match m.take_items().pop() {
            Some(Item::Send(s)) => Ok(s),
            _ => Err(NameError::Protocol("lookup reply carries no send right".into())),
        }
    }

    /// Looks `name` up until it is registered or `timeout` has passed (for a
    /// server started at the same time as its client).
    ///
    /// # Errors
    /// [`NameError::NotFound`] if the name did not appear in time; any other
    /// error of [`lookup`](Bootstrap::lookup) at once.
    pub fn lookup_wait(&mut self, name: &str, timeout: Duration) -> Result<SendRight, NameError> {
        let deadline = Instant::now() + timeout;
        let mut nap = Duration::from_millis(1);
        loop {
            match self.lookup(name) {
                Err(NameError::NotFound) if Instant::now() < deadline => {
                    std::thread::sleep(nap.min(deadline.saturating_duration_since(Instant::now())));
                    nap = (nap * 2).min(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    /// Removes the calling user's registration of `name`.
    pub fn unregister(&mut self, name: &str) -> Result<(), NameError> {
        self.request(&|| Ok(Message::new(OP_UNREGISTER).with_body(name.as_bytes())))?;
        Ok(())
    }

    /// Lists the calling user's live registrations and the system names (all
    /// users' for root), however many there are.
    pub fn list(&mut self) -> Result<Vec<NameEntry>, NameError> {
        let mut m = self.request(&|| Ok(Message::new(OP_LIST)))?;
        // A long listing comes as a by-value region instead of inline.
        let region = m.take_items().into_iter().find_map(|i| if let Item::Region(r) = i { Some(r) } else { None });
        let bytes = match region {
            Some(r) => r.copy_out(MAX_LIST_BYTES).map_err(|e| NameError::Protocol(format!("list region: {e}")))?,
            None => m.body().to_vec(),
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| NameError::Protocol("list is not UTF-8".into()))?;
        text.lines()
            .map(|l| {
                let f: Vec<&str> = l.splitn(4, '\t').collect();
                let bad = || NameError::Protocol(format!("bad list line {l:?}"));
                if f.len() != 4 {
                    return Err(bad());
                }
                Ok(NameEntry {
                    uid: f[0].parse().map_err(|_| bad())?,
                    owner_pid: f[1].parse().map_err(|_| bad())?,
                    queued_bytes: f[2].parse().map_err(|_| bad())?,
                    name: f[3].to_owned(),
                })
            })
            .collect()
    }
}

/// Reads the body of a `LIMIT` status: `KIND SPACE LIMIT`.
fn parse_limit(body: &[u8]) -> NameError {
    let text = String::from_utf8_lossy(body);
    let mut parts = text.split_whitespace();
    let what = match parts.next() {
        Some(LIMIT_NAMES) => Limit::Names,
        Some(LIMIT_CONNECTIONS) => Limit::Connections,
        Some(LIMIT_DESCRIPTORS) => Limit::Descriptors,
        _ => return NameError::Protocol(format!("bad limit reply {text:?}")),
    };
    match parts.next().and_then(|n| n.parse().ok()) {
        Some(limit) => NameError::LimitReached { what, limit },
        None => NameError::Protocol(format!("bad limit reply {text:?}")),
    }
}

/// Whether a connect error means "nobody is listening there".
pub(crate) fn nobody_listening(e: Errno) -> bool {
    matches!(e, Errno::CONNREFUSED | Errno::NOENT)
}
