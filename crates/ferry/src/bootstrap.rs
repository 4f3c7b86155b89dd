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
//! program (or one directory up), else on `PATH`, each of those only if
//! it and its directory are this user's or root's and no one else may
//! change them. Set
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
use crate::idl::{CallError, Channel, Decoder, Fault, IdlError, Wire, REPLY_ERR};
use crate::message::Message;
use crate::port::{recv_on, send_on, SendRight};
use crate::sys::socket;
use crate::timeout::Timeout;

/// The first reply op of the hand-packed protocol of version 1 that a
/// client of that version reads as "bad request" (the body says why): what
/// the server answers a request sent before the version check.
pub(crate) const V1_BAD_REQUEST: u32 = 5;

/// Longest name accepted, in bytes.
pub const MAX_NAME: usize = 255;

/// The longest listing a client accepts from the name server (it arrives
/// as a by-value region when it does not fit inline).
const MAX_LIST_BYTES: usize = 64 << 20;

/// How long a client waits for the name server to answer.
const REQUEST_TIMEOUT: Timeout = Timeout::After(REQUEST_WAIT);
/// How long [`REQUEST_TIMEOUT`] waits, for messages.
const REQUEST_WAIT: Duration = Duration::from_secs(10);

/// How long [`Bootstrap::connect`] waits for a daemon it started to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

crate::enumeration! {
    /// Which budget of the name server a request would have exceeded.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Limit {
        /// Live registrations of one user.
        1 => Names,
        /// Open connections of one user.
        2 => Connections,
        /// The server's descriptors (its reserve is not for clients).
        3 => Descriptors,
    }
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

crate::record! {
    /// One registration as [`Bootstrap::list`] reports it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NameEntry {
        /// The registered name.
        1 => pub name: String,
        /// The user that registered it (names are scoped per user).
        2 => pub uid: u32,
        /// The process that registered it.
        3 => pub owner_pid: i32,
        /// Bytes queued at the port and not yet received.
        4 => pub queued_bytes: u64,
    }
}

crate::record! {
    /// A budget of the name server that a request would exceed, and its
    /// size on that server.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Budget {
        /// Which budget.
        1 => pub what: Limit,
        /// Its size on that server.
        2 => pub limit: u64,
    }
}

crate::enumeration! {
    /// Why the name server refused a request: the typed error of every
    /// operation of [`protocol`] ([`NameError`] on the client's side).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Refusal {
        /// The name is registered to a live port already.
        1 => Taken,
        /// No live registration under that name for this user.
        2 => NotFound,
        /// Empty, longer than [`MAX_NAME`] bytes, or containing control
        /// characters.
        3 => Invalid,
        /// Another user's registration, or a request the caller may not
        /// make.
        4 => Denied,
        /// The request (or the connection, refused with this as the answer
        /// to its version check) would exceed a budget.
        5 => LimitReached(Budget),
        /// The server could not carry out a well-formed request, and says
        /// why.
        6 => Refused(String),
    }
}

crate::enumeration! {
    /// The registrations [`protocol`]'s `list` answers with.
    #[derive(Debug)]
    pub enum Listing {
        /// In the reply itself.
        1 => Inline(Vec<NameEntry>),
        /// Too many to travel inline: a by-value region that holds the
        /// list (`Vec<NameEntry>`) in the interface's encoding.
        2 => InRegion(crate::idl::ByValue),
    }
}

crate::interface! {
    /// The name service's protocol, version 5 (version 3 added
    /// `register_system`, version 4 `register_system_service`, version 5
    /// marks every answer with bit 31 of its operation id, which earlier
    /// versions cannot read; version 1 was packed by hand). A connection
    /// starts with the version check;
    /// the server answers requests sent before it with version 1's "bad
    /// request" so a client of either version is told. Every name is
    /// scoped by the uid the kernel reports for the connection, never by
    /// what a request says.
    pub mod protocol: "ferry.names", version 5, compatible 5 {
        /// Registers `right` under `name` for the calling user; the server
        /// keeps a copy until the port's receive right is gone or the name
        /// is unregistered.
        fn register(name: String, right: SendRight) | Refusal = 1;
        /// A new send right to the port registered under `name` by the
        /// calling user, else among the system names.
        fn lookup(name: String) -> SendRight | Refusal = 2;
        /// The calling user's live registrations and the system names (all
        /// users' for root).
        fn list() -> Listing | Refusal = 3;
        /// Removes the calling user's registration of `name`.
        fn unregister(name: String) | Refusal = 4;
        /// Registers `right` under `name` among the system names, which
        /// every user's lookups find after their own (version 3; root
        /// only: anyone else is `Denied`). Kept until the port's receive
        /// right is gone.
        fn register_system(name: String, right: SendRight) | Refusal = 5;
        /// Registers `right` under `name` among the system names as a
        /// service that hands every lookup a port of its own (version 4;
        /// root only): for each lookup the server makes a port, sends its
        /// receive right to `right` in a [`SERVICE_PORT`](super::SERVICE_PORT)
        /// message, and answers with a send right to it. Kept until the
        /// port's receive right is gone.
        fn register_system_service(name: String, right: SendRight) | Refusal = 6;
    }
}

/// The message a name server sends to a service registered with
/// [`Bootstrap::register_system_service`] for each lookup of its name: a
/// port made for the user that looked it up. Its body is that user's uid
/// (a little-endian `u32`); its items are the port's receive right, then a
/// send right to it (so the service can tell the port's send rights when
/// they come back to it; it drops this one). The service serves that port
/// as its own, for that user alone, and closes it when its last send right
/// is gone. A service takes it only from root (the credentials the kernel
/// gives with the message): from anyone else it is an ordinary message.
pub const SERVICE_PORT: u32 = 0x6e73_0010;

/// A port the name server made for one user's lookup of a service
/// registered with [`Bootstrap::register_system_service`], taken from its
/// [`SERVICE_PORT`] message by [`ServicePort::take`].
#[derive(Debug)]
pub struct ServicePort {
    /// The uid of the user whose lookup the port was made for: serve it as
    /// that user's, whatever credentials its messages carry.
    pub uid: u32,
    /// The port's receive right, to serve like the service's main port.
    pub port: crate::port::ReceiveRight,
}

impl ServicePort {
    /// Whether `m` is a [`SERVICE_PORT`] message from a name server: op
    /// [`SERVICE_PORT`], sent by root (the credentials the kernel gave it),
    /// a 4-byte body, no reply right, and exactly a receive right then a
    /// send right. From anyone else the same bytes are an ordinary message
    /// (one that would hand the service a port to serve in another user's
    /// name).
    pub fn is(m: &Message) -> bool {
        use crate::message::Item;
        m.op() == SERVICE_PORT
            && m.sender().is_some_and(|c| c.uid == 0)
            && m.body().len() == 4
            && !m.has_reply()
            && matches!(m.items(), [Item::Receive(_), Item::Send(_)])
    }

    /// Takes the port out of `m` when [`ServicePort::is`] says it is a
    /// name server's [`SERVICE_PORT`] message (dropping the send right that
    /// came with it, which the service never needs); otherwise leaves `m`
    /// as it was and returns `None`.
    pub fn take(m: &mut Message) -> Option<ServicePort> {
        use crate::message::Item;
        if !ServicePort::is(m) {
            return None;
        }
        let uid = u32::from_le_bytes(m.body().try_into().ok()?);
        let mut items = m.take_items().into_iter();
        match (items.next(), items.next()) {
            (Some(Item::Receive(port)), Some(Item::Send(_))) => Some(ServicePort { uid, port }),
            _ => None,
        }
    }
}

impl From<Refusal> for NameError {
    fn from(r: Refusal) -> NameError {
        match r {
            Refusal::Taken => NameError::Taken,
            Refusal::NotFound => NameError::NotFound,
            Refusal::Invalid => NameError::Invalid,
            Refusal::Denied => NameError::Denied,
            Refusal::LimitReached(b) => NameError::LimitReached { what: b.what, limit: usize::try_from(b.limit).unwrap_or(usize::MAX) },
            Refusal::Refused(why) => NameError::Refused(why),
        }
    }
}

impl From<IdlError> for NameError {
    fn from(e: IdlError) -> NameError {
        match e {
            IdlError::Fault(Fault::BadRequest(why)) => NameError::Refused(why),
            IdlError::Fault(f) => NameError::Refused(f.to_string()),
            IdlError::Send(e) => NameError::from(e),
            IdlError::Recv(e) => NameError::from(e),
            e => NameError::Protocol(e.to_string()),
        }
    }
}

impl From<CallError<Refusal>> for NameError {
    fn from(e: CallError<Refusal>) -> NameError {
        match e {
            CallError::App(r) => r.into(),
            CallError::Idl(e) => e.into(),
        }
    }
}

/// Checks a name against the rules: 1 to [`MAX_NAME`] bytes of UTF-8 with
/// no control character and no character that reorders or hides text
/// ([`hides_text`]), so that a listing shows a name as it is.
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && std::str::from_utf8(name).is_ok_and(|s| !s.chars().any(|c| c.is_control() || hides_text(c)))
}

/// Unicode's invisible formatting characters that reorder or hide the text
/// around them: the bidirectional marks, embeddings, overrides and
/// isolates, the zero-width spaces and joiners, the word joiner and
/// invisible operators, and the byte-order mark. In a name, one would let
/// `ferry names` show a user's name as another's (an override turning
/// `selif` into `files`, a zero-width space making two names look alike).
/// Whatever shows another user's text to a terminal should not pass these
/// on either (`ferry stat` shows them as `?`).
pub fn hides_text(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
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
    let explicit = std::env::var_os("FERRY_DAEMON").is_some();
    let Some(bin) = candidates
        .iter()
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) && (explicit || crate::spawn::nobody_else_controls(p)))
    else {
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        return Err(NameError::NotRunning {
            path: path.to_owned(),
            why: format!(
                "nothing listens there and no ferryd binary was found to start (looked at: {}; one another user owns or may change is never run); put ferryd on PATH, set FERRY_DAEMON to it, or run `ferryd` yourself",
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
    client: protocol::Client<Link>,
    path: PathBuf,
    server: socket::Cred,
    /// Whether a reconnection may start a daemon (the per-user default).
    autostart: bool,
}

/// The connection's socket as the typed client's channel. A call that
/// ends without a reply leaves why in `lost`, which [`Bootstrap`] reads
/// to decide whether reconnecting helps.
#[derive(Debug)]
struct Link {
    conn: OwnedFd,
    identity: (u64, u64),
    buf: Vec<u8>,
    path: PathBuf,
    lost: Option<Lost>,
}

/// How one exchange with the server ended, when not with a reply.
#[derive(Debug)]
enum Lost {
    /// The server closed the connection (or was gone): reconnecting helps.
    Closed(String),
    /// Anything else: reconnecting would not help.
    Failed(NameError),
}

impl Link {
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
                format!("the name server at {} did not answer within {REQUEST_WAIT:?}", self.path.display()),
            )))),
            Err(RecvError::Io(e)) => Err(Lost::Closed(format!("the connection failed: {e}"))),
            Err(e) => Err(Lost::Failed(e.into())),
        }
    }
}

impl Channel for Link {
    fn call(&mut self, req: Message) -> Result<Message, IdlError> {
        self.exchange(req).map_err(|lost| {
            self.lost = Some(lost);
            IdlError::NoReply
        })
    }

    /// The protocol has no one-way operation; a one-way message would be
    /// answered anyway, so it is a call whose reply is read and dropped.
    fn send(&mut self, msg: Message) -> Result<(), IdlError> {
        self.call(msg).map(drop)
    }
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
                NameError::NotRunning { path: path.to_owned(), why: format!("nothing listens there ({e}); start one with {}", start_command(path)) }
            } else if e == Errno::ACCESS {
                NameError::Unavailable(io::Error::new(io_err(e).kind(), format!("cannot connect to {}: {e}; {}", path.display(), denied_advice(path))))
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
        let mut link = Link { conn, identity, buf: vec![0; crate::wire::MAX_MESSAGE + 1], path: path.to_owned(), lost: None };
        let version = hello(&mut link)?;
        Ok(Bootstrap { client: protocol::Client::after_hello(link, version), path: path.to_owned(), server, autostart: false })
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

    /// Runs one typed call. A connection the server closed is re-made
    /// once (with its version check) and the call made again (see the
    /// module documentation).
    fn call<T>(&mut self, op: &dyn Fn(&mut protocol::Client<Link>) -> Result<T, NameError>) -> Result<T, NameError> {
        let first = op(&mut self.client);
        let why = match self.client.channel_mut().lost.take() {
            None => return first,
            Some(Lost::Failed(e)) => return Err(e),
            Some(Lost::Closed(why)) => why,
        };
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
        let second = op(&mut self.client);
        match self.client.channel_mut().lost.take() {
            None => second,
            Some(Lost::Failed(e)) => Err(e),
            Some(Lost::Closed(why)) => Err(NameError::Unavailable(io::Error::new(
                io::ErrorKind::ConnectionReset,
                format!("{what}; the new connection was lost too ({why})"),
            ))),
        }
    }

    /// The version of the name service's protocol the server speaks
    /// (learnt at connect; see [`protocol`]).
    pub fn server_version(&self) -> u32 {
        self.client.peer_version()
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
        self.register_in(name, right, Scope::User)
    }

    /// Registers `right` under `name` among the system names, which every
    /// user of this name server finds (after its own names): how a service
    /// run by root, such as a network server's imported names, is offered
    /// to every user of a system daemon (`ferryd --system`). The name
    /// server keeps a copy until the port's receive right is gone.
    ///
    /// # Errors
    /// [`NameError::Denied`] unless the caller is root;
    /// [`NameError::Taken`] if a live port holds the system name;
    /// [`NameError::Refused`] from a name server older than this call
    /// (protocol version 2); otherwise as [`register`](Self::register).
    pub fn register_system(&mut self, name: &str, right: &SendRight) -> Result<(), NameError> {
        self.register_in(name, right, Scope::System)
    }

    /// Registers `right` under `name` among the system names as a service
    /// that hands every lookup a port of its own, as the system daemon's
    /// own servers do: all send rights to one port share one socket, which
    /// any holder may shut down or fill for all, so a port every user
    /// reaches must not be one port. For each lookup the name server makes
    /// a port and sends its receive right to `right` in a
    /// [`SERVICE_PORT`] message (which the service takes with
    /// [`ServicePort::take`], from root only, and serves like its main
    /// port); the name server keeps `right`
    /// to send those and to watch, and never hands it out.
    ///
    /// # Errors
    /// As [`register_system`](Self::register_system); a name server older
    /// than this call (protocol version 3 or less, see
    /// [`server_version`](Self::server_version)) answers
    /// [`NameError::Refused`].
    pub fn register_system_service(&mut self, name: &str, right: &SendRight) -> Result<(), NameError> {
        self.register_in(name, right, Scope::SystemService)
    }

    /// Registers `right` under `name` in `scope`.
    fn register_in(&mut self, name: &str, right: &SendRight, scope: Scope) -> Result<(), NameError> {
        if !valid_name(name.as_bytes()) {
            return Err(NameError::Invalid);
        }
        self.call(&|c| {
            let copy = right.try_clone().map_err(NameError::Unavailable)?;
            let name = name.to_owned();
            match scope {
                Scope::User => c.register(name, copy)?,
                Scope::System => c.register_system(name, copy)?,
                Scope::SystemService => c.register_system_service(name, copy)?,
            }
            Ok(())
        })
    }

    /// Looks `name` up among the calling user's registrations (then the
    /// system names) and returns a new send right to it.
    pub fn lookup(&mut self, name: &str) -> Result<SendRight, NameError> {
        if !valid_name(name.as_bytes()) {
            return Err(NameError::Invalid);
        }
        self.call(&|c| Ok(c.lookup(name.to_owned())?))
    }

    /// Looks `name` up until it is registered or `timeout` has passed (for a
    /// server started at the same time as its client).
    ///
    /// # Errors
    /// [`NameError::NotFound`] if the name did not appear in time; any other
    /// error of [`lookup`](Bootstrap::lookup) at once.
    pub fn lookup_wait(&mut self, name: &str, timeout: Duration) -> Result<SendRight, NameError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut nap = Duration::from_millis(1);
        loop {
            match self.lookup(name) {
                Err(NameError::NotFound) if deadline.is_none_or(|d| Instant::now() < d) => {
                    let left = deadline.map_or(nap, |d| d.saturating_duration_since(Instant::now()));
                    std::thread::sleep(nap.min(left));
                    nap = (nap * 2).min(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    /// Removes the calling user's registration of `name`.
    pub fn unregister(&mut self, name: &str) -> Result<(), NameError> {
        self.call(&|c| Ok(c.unregister(name.to_owned())?))
    }

    /// Lists the calling user's live registrations and the system names (all
    /// users' for root), however many there are.
    pub fn list(&mut self) -> Result<Vec<NameEntry>, NameError> {
        match self.call(&|c| Ok(c.list()?))? {
            Listing::Inline(entries) => Ok(entries),
            Listing::InRegion(region) => {
                let bytes = region.0.copy_out(MAX_LIST_BYTES).map_err(|e| NameError::Protocol(format!("list region: {e}")))?;
                let mut dec = Decoder::new(&bytes, Vec::new());
                let entries = Vec::<NameEntry>::decode(&mut dec).and_then(|l| dec.finish().map(|()| l));
                entries.map_err(|e| NameError::Protocol(format!("list region: {e}")))
            }
        }
    }
}

/// Where a registration goes.
#[derive(Clone, Copy)]
enum Scope {
    /// The calling user's names.
    User,
    /// The system names, one port for every user.
    System,
    /// The system names, a port of its own for each lookup.
    SystemService,
}

/// The version check at connect. The server's refusal of the connection
/// (a budget reached) arrives as the answer to it.
fn hello(link: &mut Link) -> Result<u32, NameError> {
    let reply = link.call(crate::idl::hello_request::<protocol::Protocol>());
    let reply = match (reply, link.lost.take()) {
        (Ok(m), _) => m,
        (Err(_), Some(Lost::Failed(e))) => return Err(e),
        (Err(_), Some(Lost::Closed(why))) => {
            return Err(NameError::Unavailable(io::Error::new(
                io::ErrorKind::ConnectionReset,
                format!("the name server at {} closed the connection at its version check ({why})", link.path.display()),
            )))
        }
        (Err(e), None) => return Err(e.into()),
    };
    if reply.op() == REPLY_ERR {
        return Err(match crate::idl::decode_reply::<(), Refusal>(reply)? {
            Err(refusal) => refusal.into(),
            Ok(()) => NameError::Protocol("the version check's error reply decoded as a success".into()),
        });
    }
    crate::idl::hello_check::<protocol::Protocol>(reply).map_err(|e| match e {
        IdlError::UnexpectedReply(status) => NameError::Protocol(format!(
            "the name server at {} speaks an older protocol (it answered the version check with status {status}); stop it, and a new one starts on demand",
            link.path.display()
        )),
        e => NameError::Protocol(format!("the name server at {}: {e}", link.path.display())),
    })
}

/// The command that starts a daemon listening at `path`: a plain `ferryd
/// --detach` listens at this process's [`default_path`] only.
fn start_command(path: &Path) -> String {
    if path == default_path() {
        "`ferryd --detach`".to_owned()
    } else if path == Path::new("/run/ferry/bootstrap") {
        "`ferryd --system --detach` (as root)".to_owned()
    } else {
        format!("`ferryd --detach --socket {}`", path.display())
    }
}

/// What to do when connecting to `path` was refused: whose socket it is,
/// and which name server serves the caller instead.
fn denied_advice(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let theirs = match std::fs::metadata(path) {
        Ok(m) if m.uid() != rustix::process::geteuid().as_raw() => format!("the socket belongs to uid {}, whose name server serves that user alone", m.uid()),
        Ok(_) => "check the permissions of the socket".to_owned(),
        Err(_) => "a directory above the socket is closed to this user".to_owned(),
    };
    format!("{theirs}; use this user's own (at the default path, with FERRY_BOOTSTRAP unset) or a `ferryd --system` at /run/ferry/bootstrap, which serves every user")
}

/// Whether a connect error means "nobody is listening there".
pub(crate) fn nobody_listening(e: Errno) -> bool {
    matches!(e, Errno::CONNREFUSED | Errno::NOENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names that would show as other names in a listing are refused;
    /// ordinary names in any script are not.
    #[test]
    fn names_that_reorder_or_hide_text_are_invalid() {
        for bad in ["\u{202e}selif", "files\u{200b}", "fi\u{2066}les\u{2069}", "\u{feff}files", "a\u{200d}b", "x\u{61c}y", "tab\there", ""] {
            assert!(!valid_name(bad.as_bytes()), "{bad:?} was taken");
        }
        for good in ["files", "svc@host", "日本語の名前", "имя", "اسم", "ünïcödé-name_1.2"] {
            assert!(valid_name(good.as_bytes()), "{good:?} was refused");
        }
        assert!(!valid_name(&[0xff, 0xfe]), "bytes that are not UTF-8 were taken");
    }
}
