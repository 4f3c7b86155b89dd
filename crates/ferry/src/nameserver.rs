//! The name server: send rights registered under per-user names.
//!
//! It runs inside `ferryd`, or embedded on a thread of the first program that
//! found none (see [`crate::bootstrap`]). Names are scoped by the uid the
//! kernel reports for each request, never by what a client claims; a
//! registration is dropped as soon as its port's receive right dies (the
//! server watches every registered right for a dead name); re-registering a
//! live name is refused. A malformed request gets an error reply and the
//! server carries on.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::bootstrap::{self, *};
use crate::error::{io_err, RecvError};
use crate::message::{Item, Message};
use crate::port::{recv_on, send_on, SendRight};
use crate::sys::socket::{self, Cred};
use crate::sys::wait::{Epoll, Interest};
use crate::timeout::Timeout;

const KEY_LISTENER: u64 = 0;

/// The scope of names every user can look up (shown as this uid by `list`).
pub const SYSTEM_UID: u32 = u32::MAX;
const KEY_CONN: u64 = 1 << 32;
const KEY_WATCH: u64 = 2 << 32;

#[derive(Debug)]
struct Conn {
    sock: OwnedFd,
    identity: (u64, u64),
    peer: Option<Cred>,
}

#[derive(Debug)]
struct Entry {
    right: SendRight,
    owner_pid: i32,
    watch: u32,
}

/// A name server bound to its socket, ready to [`serve`](NameServer::serve).
#[derive(Debug)]
pub struct NameServer {
    listener: OwnedFd,
    path: PathBuf,
    epoll: Epoll,
    conns: HashMap<u32, Conn>,
    names: HashMap<(u32, String), Entry>,
    watches: HashMap<u32, (u32, String)>,
    next: u32,
    buf: Vec<u8>,
    log: bool,
}

impl NameServer {
    /// Binds a name server at `path`, creating its directory (mode 0700) if
    /// needed and removing a stale socket nobody listens on.
    ///
    /// # Errors
    /// `AddrInUse` if a live server already listens at `path`.
    pub fn bind(path: &Path) -> io::Result<NameServer> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir)?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            }
        }
        let lock_path = path.with_extension("lock");
        let _lock = crate::sys::lock::lock_exclusive(&lock_path).map_err(io_err)?;
        match socket::connect_to(path) {
            Ok(_) => return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("a name server already listens at {}", path.display()))),
            Err(e) if bootstrap::nobody_listening(e) => {
                let _ = std::fs::remove_file(path);
            }
            Err(e) => return Err(io_err(e)),
        }
        let listener = socket::listen_at(path, 128).map_err(io_err)?;
        let epoll = Epoll::new().map_err(io_err)?;
        epoll.add(listener.as_fd(), Interest::Readable, KEY_LISTENER).map_err(io_err)?;
        Ok(NameServer {
            listener,
            path: path.to_owned(),
            epoll,
            conns: HashMap::new(),
            names: HashMap::new(),
            watches: HashMap::new(),
            next: 0,
            buf: vec![0; crate::wire::MAX_MESSAGE + 1],
            log: false,
        })
    }

    /// Registers `right` under `name` in the system scope, which every user's
    /// lookups fall back to when their own scope has no such name: how the
    /// daemon publishes its system servers (the file server, for one). The
    /// registration lasts while the port lives.
    ///
    /// # Errors
    /// `InvalidInput` for a bad name, `AlreadyExists` if the system scope
    /// already holds a live registration of it.
    pub fn add_system_name(&mut self, name: &str, right: SendRight) -> io::Result<()> {
        if !valid_name(name.as_bytes()) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("invalid name {name:?}")));
        }
        let key = (SYSTEM_UID, name.to_owned());
        if self.names.get(&key).is_some_and(|e| !e.right.is_dead()) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("system name {name:?} is taken")));
        }
        self.next += 1;
        let watch = self.next;
        self.epoll.add(right.as_fd(), Interest::HangUp, KEY_WATCH | watch as u64).map_err(io_err)?;
        self.say(format_args!("registered system name {name:?}"));
        self.watches.insert(watch, key.clone());
        self.names.insert(key, Entry { right, owner_pid: std::process::id() as i32, watch });
        Ok(())
    }

    /// Prints one line per event on standard error (for `ferryd`).
    pub fn set_logging(&mut self, on: bool) {
        self.log = on;
    }

    /// The path this server listens on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn say(&self, what: std::fmt::Arguments<'_>) {
        if self.log {
            eprintln!("ferryd: {what}");
        }
    }

    /// Serves requests until an unrecoverable kernel error.
    pub fn serve(mut self) -> io::Result<()> {
        self.say(format_args!("name service listening at {}", self.path.display()));
        loop {
            self.turn(None)?;
        }
    }

    /// Serves on a background thread of this process (named `ferry-names`)
    /// for as long as the process lives.
    pub fn spawn(self) -> io::Result<()> {
        std::thread::Builder::new().name("ferry-names".into()).spawn(move || {
            if let Err(e) = self.serve() {
                eprintln!("ferry: embedded name server stopped: {e}");
            }
        })?;
        Ok(())
    }

    /// Handles whatever is ready, waiting up to `deadline`.
    fn turn(&mut self, deadline: Option<std::time::Instant>) -> io::Result<()> {
        for (key, ready) in self.epoll.wait(32, deadline).map_err(io_err)? {
            match key & !0xffff_ffff {
                KEY_LISTENER => self.accept(),
                KEY_CONN => self.serve_conn(key as u32),
                KEY_WATCH if ready.hangup => self.drop_watch(key as u32),
                _ => {}
            }
        }
        Ok(())
    }

    fn accept(&mut self) {
        let sock = match socket::accept(self.listener.as_fd()) {
            Ok(s) => s,
            Err(e) => {
                self.say(format_args!("accept failed: {e}"));
                return;
            }
        };
        let (Ok(identity), peer) = (socket::identity(sock.as_fd()), socket::peer_cred(sock.as_fd()).ok()) else { return };
        self.next += 1;
        let id = self.next;
        if self.epoll.add(sock.as_fd(), Interest::Readable, KEY_CONN | id as u64).is_ok() {
            if let Some(p) = peer {
                self.say(format_args!("client connected: pid {} uid {}", p.pid, p.uid));
            }
            self.conns.insert(id, Conn { sock, identity, peer });
        }
    }

    fn serve_conn(&mut self, id: u32) {
        let Some(conn) = self.conns.get(&id) else { return };
        let got = recv_on(conn.sock.as_fd(), &mut self.buf, conn.identity, Timeout::Zero, false);
        let reply = match got {
            Ok(Some(msg)) => self.handle(msg, conn.peer),
            Ok(None) | Err(RecvError::Io(_)) => {
                if let Some(c) = self.conns.remove(&id) {
                    let _ = self.epoll.remove(c.sock.as_fd());
                }
                return;
            }
            Err(RecvError::BadMessage(w)) => {
                self.say(format_args!("malformed request discarded: {w}"));
                Message::new(ST_BAD_REQUEST).with_body(w.to_string())
            }
            Err(_) => return,
        };
        if let Some(conn) = self.conns.get(&id) {
            // A client that does not read its replies only loses its own.
            let _ = send_on(conn.sock.as_fd(), reply, Timeout::Zero);
        }
    }

    fn handle(&mut self, mut msg: Message, peer: Option<Cred>) -> Message {
        let Some(cred) = msg.sender().or(peer) else { return Message::new(ST_DENIED) };
        let name = msg.body().to_vec();
        match msg.op() {
            OP_REGISTER => {
                let mut items = msg.take_items();
                let (Some(Item::Send(right)), true) = (items.pop(), items.is_empty()) else {
                    return Message::new(ST_BAD_REQUEST).with_body("register takes exactly one send right");
                };
                if !valid_name(&name) {
                    return Message::new(ST_INVALID);
                }
                let name = String::from_utf8(name).expect("valid_name checks UTF-8");
                let key = (cred.uid, name.clone());
                if let Some(e) = self.names.get(&key) {
                    if !e.right.is_dead() {
                        return Message::new(ST_TAKEN);
                    }
                    let w = e.watch;
                    self.drop_watch(w);
                }
                self.next += 1;
                let watch = self.next;
                if self.epoll.add(right.as_fd(), Interest::HangUp, KEY_WATCH | watch as u64).is_err() {
                    return Message::new(ST_BAD_REQUEST);
                }
                self.say(format_args!("registered {name:?} for uid {} by pid {}", cred.uid, cred.pid));
                crate::trace::event!(info, name = %name, uid = cred.uid, pid = cred.pid, "name registered");
                self.watches.insert(watch, key.clone());
                self.names.insert(key, Entry { right, owner_pid: cred.pid, watch });
                Message::new(ST_OK)
            }
            OP_LOOKUP => {
                if !valid_name(&name) {
                    return Message::new(ST_INVALID);
                }
                let name = String::from_utf8(name).expect("valid_name checks UTF-8");
                let live = |k: &(u32, String)| self.names.get(k).filter(|e| !e.right.is_dead());
                let found = live(&(cred.uid, name.clone())).or_else(|| live(&(SYSTEM_UID, name)));
                match found {
                    Some(e) => match e.right.try_clone() {
                        Ok(copy) => Message::new(ST_OK).with_item(copy),
                        Err(_) => Message::new(ST_BAD_REQUEST),
                    },
                    _ => Message::new(ST_NOT_FOUND),
                }
            }
            OP_UNREGISTER => {
                let key = (cred.uid, String::from_utf8_lossy(&name).into_owned());
                match self.names.get(&key) {
                    Some(e) => {
                        let w = e.watch;
                        self.drop_watch(w);
                        Message::new(ST_OK)
                    }
                    None => Message::new(ST_NOT_FOUND),
                }
            }
            OP_LIST => {
                let mut out = String::new();
                let mut rows: Vec<_> =
                    self.names.iter().filter(|((uid, _), _)| cred.uid == 0 || *uid == cred.uid || *uid == SYSTEM_UID).collect();
                rows.sort_by(|a, b| a.0.cmp(b.0));
                for ((uid, name), e) in rows {
                    if e.right.is_dead() {
                        continue;
                    }
                    let q = e.right.queued_bytes().unwrap_or(0);
                    out.push_str(&format!("{uid}\t{}\t{q}\t{name}\n", e.owner_pid));
                }
                Message::new(ST_OK).with_body(out)
            }
            _ => Message::new(ST_BAD_REQUEST).with_body("unknown operation"),
        }
    }

    fn drop_watch(&mut self, watch: u32) {
        if let Some(key) = self.watches.remove(&watch) {
            if let Some(e) = self.names.remove(&key) {
                let _ = self.epoll.remove(e.right.as_fd());
                self.say(format_args!("dropped {:?} of uid {}: its port is gone", key.1, key.0));
            }
        }
    }
}

/// Starts a name server at `path` on a background thread of this process,
/// unless one was started here already or another process won the race to
/// bind it.
pub(crate) fn start_embedded(path: &Path, started: &OnceLock<PathBuf>) -> io::Result<()> {
    if started.get().is_some_and(|p| p == path) {
        return Ok(());
    }
    let server = match NameServer::bind(path) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Ok(()),
        Err(e) => return Err(e),
    };
    let _ = started.set(path.to_owned());
    server.spawn()
}
