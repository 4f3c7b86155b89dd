//! The client side of the name service: finding `ferryd` (or starting an
//! embedded one), registering send rights under names and looking them up.
//!
//! The daemon listens on a `SOCK_SEQPACKET` socket at `$FERRY_BOOTSTRAP`, or
//! else `$XDG_RUNTIME_DIR/ferry/bootstrap`, or else
//! `ferry-<uid>/bootstrap` in the temporary directory (`$TMPDIR`, by default
//! the system one). Requests and replies are ordinary ferry
//! messages on the connection (see `docs/wire-format.md`, "Name service").
//! When nothing listens there, [`Bootstrap::connect`] starts a name server on
//! a background thread of the calling process, bound at that path, so a
//! program and the children it spawns need no set-up; it lives as long as
//! that process. Set `FERRY_NO_EMBED=1` to forbid this.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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

/// Longest name accepted, in bytes.
pub const MAX_NAME: usize = 255;

/// How long a client waits for the name server to answer.
const REQUEST_TIMEOUT: Timeout = Timeout::After(std::time::Duration::from_secs(10));

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
    /// No name server answered, and none could be started here.
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
            NameError::Unavailable(e) => write!(f, "name server unavailable: {e} (is FERRY_BOOTSTRAP right?)"),
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

/// The path the name server listens on for this process.
pub fn default_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FERRY_BOOTSTRAP") {
        return PathBuf::from(p);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return Path::new(&d).join("ferry").join("bootstrap");
    }
    std::env::temp_dir().join(format!("ferry-{}", rustix::process::getuid().as_raw())).join("bootstrap")
}

/// A connection to the name server.
#[derive(Debug)]
pub struct Bootstrap {
    conn: OwnedFd,
    identity: (u64, u64),
    buf: Vec<u8>,
    path: PathBuf,
}

static EMBEDDED: OnceLock<PathBuf> = OnceLock::new();

impl Bootstrap {
    /// Connects to the name server at [`default_path`], starting an embedded
    /// one in this process if none is running (unless `FERRY_NO_EMBED=1`).
    pub fn connect() -> Result<Bootstrap, NameError> {
        let path = default_path();
        match Bootstrap::connect_to(&path) {
            Ok(b) => Ok(b),
            Err(NameError::Unavailable(e))
                if e.raw_os_error().is_some_and(|c| nobody_listening(Errno::from_raw_os_error(c)))
                    && std::env::var_os("FERRY_NO_EMBED").is_none_or(|v| v != "1") =>
            {
                crate::nameserver::start_embedded(&path, &EMBEDDED).map_err(NameError::Unavailable)?;
                Bootstrap::connect_to(&path)
            }
            Err(e) => Err(e),
        }
    }

    /// Connects to the name server listening at `path`; never starts one.
    pub fn connect_to(path: &Path) -> Result<Bootstrap, NameError> {
        let conn = socket::connect_to(path).map_err(|e| NameError::Unavailable(io_err(e)))?;
        let identity = socket::identity(conn.as_fd()).map_err(|e| NameError::Unavailable(io_err(e)))?;
        Ok(Bootstrap { conn, identity, buf: vec![0; crate::wire::MAX_MESSAGE + 1], path: path.to_owned() })
    }

    /// The path of the name server this connection reached.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn request(&mut self, msg: Message) -> Result<Message, NameError> {
        send_on(self.conn.as_fd(), msg, REQUEST_TIMEOUT).map_err(|(e, _)| e)?;
        match recv_on(self.conn.as_fd(), &mut self.buf, self.identity, REQUEST_TIMEOUT, false)? {
            Some(m) => match m.op() {
                ST_OK => Ok(m),
                ST_TAKEN => Err(NameError::Taken),
                ST_NOT_FOUND => Err(NameError::NotFound),
                ST_INVALID => Err(NameError::Invalid),
                ST_DENIED => Err(NameError::Denied),
                other => Err(NameError::Protocol(format!("status {other}"))),
            },
            None => Err(NameError::Unavailable(io::Error::new(io::ErrorKind::ConnectionReset, "name server closed the connection"))),
        }
    }

    /// Registers `right` under `name` for the calling user. The server keeps
    /// a copy; the registration disappears when the port's receive right is
    /// gone.
    ///
    /// # Errors
    /// [`NameError::Taken`] if the name is registered to a live port;
    /// [`NameError::Invalid`] for a bad name.
    pub fn register(&mut self, name: &str, right: &SendRight) -> Result<(), NameError> {
        if !valid_name(name.as_bytes()) {
            return Err(NameError::Invalid);
        }
        let copy = right.try_clone().map_err(NameError::Unavailable)?;
        self.request(Message::new(OP_REGISTER).with_body(name.as_bytes()).with_item(copy))?;
        Ok(())
    }

    /// Looks `name` up among the calling user's registrations and returns a
    /// new send right to it.
    pub fn lookup(&mut self, name: &str) -> Result<SendRight, NameError> {
        if !valid_name(name.as_bytes()) {
            return Err(NameError::Invalid);
        }
        let mut m = self.request(Message::new(OP_LOOKUP).with_body(name.as_bytes()))?;
        match m.take_items().pop() {
            Some(Item::Send(s)) => Ok(s),
            _ => Err(NameError::Protocol("lookup reply carries no send right".into())),
        }
    }

    /// Removes the calling user's registration of `name`.
    pub fn unregister(&mut self, name: &str) -> Result<(), NameError> {
        self.request(Message::new(OP_UNREGISTER).with_body(name.as_bytes()))?;
        Ok(())
    }

    /// Lists the calling user's live registrations (all users' for root).
    pub fn list(&mut self) -> Result<Vec<NameEntry>, NameError> {
        let m = self.request(Message::new(OP_LIST))?;
        let text = std::str::from_utf8(m.body()).map_err(|_| NameError::Protocol("list is not UTF-8".into()))?;
        text.lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
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

/// Whether a connect error means "nobody is listening there".
pub(crate) fn nobody_listening(e: Errno) -> bool {
    matches!(e, Errno::CONNREFUSED | Errno::NOENT)
}
