//! The name server: send rights registered under per-user names, within
//! per-user budgets.
//!
//! It runs inside `ferryd` (started by hand, as a system daemon, or on
//! demand by [`crate::bootstrap`]) or on a thread of a program that asked for
//! a private one ([`NameServer::spawn`], [`crate::Bootstrap::private`]).
//! Names are scoped by the uid the kernel reports for each request, never by
//! what a client claims, and a datagram another user sent on a client's
//! connection is refused (except on a connection root opened, where it acts
//! as its sender); a registration is dropped as soon as its port's
//! receive right dies (the server watches every registered right for a dead
//! name); re-registering a live name is refused. A malformed request gets an
//! error reply and the server carries on.
//!
//! Everything a client can make the server hold is budgeted ([`Limits`]):
//! names per user, connections per user, a reserve of descriptors no
//! client can take, and at most half of the rest for any one user (its
//! names and connections together), so that one user can never exhaust the
//! server for the others. The server holds nothing whose liveness it alone keeps: a
//! registration whose socket is the other end of one the server already
//! holds (both ends of one pair, or a client's own connection) is refused,
//! at a cost that does not grow with the sockets other users hold (the
//! kernel is asked about that one socket, see `sys::kept`).
//! When `accept` runs out of descriptors anyway (another thread of the
//! process took them), the listener is set aside until a descriptor is
//! freed, so the server never spins.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::bootstrap::{self, protocol, valid_name, Budget, Limit, Listing, NameEntry, Refusal, SERVICE_PORT, V1_BAD_REQUEST};
use crate::error::{io_err, RecvError};
use crate::intake::Intake;
use crate::idl::{answer_hello, fault_message, reply_of, ByValue, Context, Dispatch, Encoder, Fault, Route, Wire, OP_HELLO, REPLY_OK};
use crate::message::{Item, Message};
use crate::port::{recv_on, send_on, SendRight};
use crate::region::RegionItem;
use crate::sys::kept::{self, Keeper, OtherEnd};
use crate::sys::socket::{self, Cred};
use crate::sys::wait::{Epoll, Interest};
use crate::timeout::Timeout;

const KEY_LISTENER: u64 = 0;

/// The scope of names every user can look up (shown as this uid by `list`).
pub const SYSTEM_UID: u32 = u32::MAX;
const KEY_CONN: u64 = 1 << 32;
const KEY_WATCH: u64 = 2 << 32;
const KEY_REFUSED: u64 = 3 << 32;

/// How long a refused connection is kept open for its client to read the
/// refusal and hang up. Closing it earlier, with the client's version check
/// arriving unread, resets the connection and the refusal with it.
const REFUSED_LINGER: Duration = Duration::from_millis(500);

/// Most refused connections kept open at once (the oldest is closed to make
/// room): a client that opens connections as fast as it can makes the
/// server hold no more descriptors than this for them.
const MAX_REFUSED: usize = 16;

/// Most refused connections of one user kept open at once: a user that
/// floods the server with connections it will refuse closes its own
/// oldest ones early, never another user's.
const MAX_REFUSED_PER_USER: usize = 4;

/// How long the listener stays set aside after `accept` ran out of
/// descriptors, unless a descriptor is freed sooner.
const ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// How often, at most, the server logs one kind of trouble a client can
/// cause at will (refusals, running out of descriptors); the lines between
/// are counted and the count is logged with the next one.
const QUIET_FOR: Duration = Duration::from_secs(30);

/// Lines about one user's doings (its connections, malformed requests,
/// registrations and their ends) logged at most each [`LOG_EVERY`], by
/// default: any user can cause them at will, as fast as it can connect.
pub const LOG_LINES_PER_USER: u32 = 20;

/// The time [`LOG_LINES_PER_USER`] is counted over, by default.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// How much one user has made the server log in the current stretch of
/// its log budget ([`NameServer::set_log_budget`]).
#[derive(Debug)]
struct UserLog {
    /// When the stretch began.
    since: Instant,
    /// Lines logged in it.
    said: u32,
    /// Lines counted and not logged in it.
    held: u64,
}

/// What a name server lets each user make it hold. Exceeding a budget is a
/// typed error for that request
/// ([`NameError::LimitReached`](crate::NameError::LimitReached)); everyone
/// else is served as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Live registrations one uid may hold (default 256).
    pub names_per_user: usize,
    /// Open connections one uid may hold (default 64).
    pub connections_per_user: usize,
    /// Descriptors below the process's `RLIMIT_NOFILE` that no client may
    /// make the server use (default 300: more than the 253 one message can
    /// carry, so the server can always receive, reply and accept).
    pub fd_reserve: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { names_per_user: 256, connections_per_user: 64, fd_reserve: 300 }
    }
}

#[derive(Debug)]
struct Conn {
    sock: OwnedFd,
    identity: (u64, u64),
    peer: Option<Cred>,
    /// The client passed the version check.
    spoke: bool,
}

#[derive(Debug)]
struct Entry {
    right: SendRight,
    inode: u64,
    owner_pid: i32,
    watch: u32,
}

/// A name server bound to its socket, ready to [`serve`](NameServer::serve).
#[derive(Debug)]
pub struct NameServer {
    listener: OwnedFd,
    path: PathBuf,
    /// The inode of the socket file this server made at `path`.
    path_ino: Option<u64>,
    epoll: Epoll,
    conns: HashMap<u32, Conn>,
    names: HashMap<(u32, String), Entry>,
    watches: HashMap<u32, (u32, String)>,
    /// System services that hand each lookup a port of its own, by name
    /// ([`NameServer::add_system_service`]).
    minters: HashMap<String, Minter>,
    /// Socket inodes the server holds a descriptor of, with how many.
    held: HashMap<u64, usize>,
    /// This server's mark on the sockets it keeps ([`kept`]).
    keeper: Keeper,
    names_of: HashMap<u32, usize>,
    conns_of: HashMap<u32, usize>,
    limits: Limits,
    /// Descriptors the process may open before the reserve begins.
    fd_capacity: usize,
    /// Descriptors open when the server was bound (not clients').
    fd_base: usize,
    listener_paused: Option<Instant>,
    /// Refused connections kept open until their client hangs up or
    /// [`REFUSED_LINGER`] has passed, by key: the socket, when it was
    /// refused, and its client's uid.
    refused: HashMap<u32, (OwnedFd, Instant, u32)>,
    /// Per kind of rate-limited log line: when last logged, lines held back.
    quiet: HashMap<&'static str, (Instant, u64)>,
    /// Per uid, what its doings have logged lately.
    user_log: HashMap<u32, UserLog>,
    /// Lines about one user logged at most each `log_every`.
    log_lines: u32,
    log_every: Duration,
    next: u32,
    buf: Vec<u8>,
    log: bool,
    /// Stop serving after this long with no connection and no name.
    idle_exit: Option<Duration>,
    /// The last turn that found a connection or a name.
    last_busy: Instant,
}

/// Checks that `dir` is a real directory owned by this user or root that
/// nobody else may write to, so that nobody else can put a socket, a lock
/// file or a symbolic link where the server is about to bind.
fn check_bind_dir(dir: &Path) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("refusing to bind in {}: it is a symbolic link or not a directory", dir.display()),
            ),
            e => io::Error::new(io_err(e).kind(), format!("cannot open {}: {e}", dir.display())),
        })?;
    let st = rustix::fs::fstat(&fd).map_err(io_err)?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me && st.st_uid != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing to bind in {}: it is owned by uid {}, not by this user (uid {me}) or root", dir.display(), st.st_uid),
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing to bind in {}: its mode {:o} lets other users write to it; put the socket in a directory of its own, such as {}, made mode 0700 if missing",
                dir.display(),
                st.st_mode & 0o7777,
                dir.join(format!("ferry-{me}")).join("bootstrap").display()
            ),
        ));
    }
    Ok(())
}

/// Descriptors this process may have open (`RLIMIT_NOFILE`, soft).
fn nofile_limit() -> usize {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current.map_or(usize::MAX, |n| n as usize)
}

/// Descriptors open in this process now.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count().saturating_sub(1)).unwrap_or(0)
}

impl NameServer {
    /// Binds a name server at `path`, creating its directory (mode 0700) if
    /// needed and removing a stale socket nobody listens on. The socket is
    /// mode 0600: only this user (and root) may connect.
    ///
    /// # Errors
    /// `AddrInUse` if a live server already listens at `path`;
    /// `AlreadyExists` if something other than a socket is there (it is
    /// left alone); `PermissionDenied` if the directory is a symbolic link,
    /// is owned by another user (other than root), or lets other users
    /// write to it.
    pub fn bind(path: &Path) -> io::Result<NameServer> {
        NameServer::bind_with_mode(path, 0o600)
    }

    /// Like [`bind`](NameServer::bind), with the socket's permission bits
    /// `mode` (0666 lets every user connect, as `ferryd --system` does). The
    /// socket has that mode from the moment it appears at `path`.
    pub fn bind_with_mode(path: &Path, mode: u32) -> io::Result<NameServer> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        check_bind_dir(dir)?;
        let lock_path = path.with_extension("lock");
        let lock = crate::sys::lock::lock_exclusive(&lock_path).map_err(io_err)?;
        match socket::connect_to(path) {
            Ok(_) => return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("a name server already listens at {}", path.display()))),
            Err(e) if bootstrap::nobody_listening(e) => {
                // Only a socket left by a server that is gone is replaced:
                // a path given by mistake (a user's file) is never removed.
                use std::os::unix::fs::FileTypeExt;
                match std::fs::symlink_metadata(path) {
                    Ok(m) if m.file_type().is_socket() => {
                        let _ = std::fs::remove_file(path);
                    }
                    Ok(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!("{} is not a socket; refusing to replace it (give the path of a socket, or of nothing yet)", path.display()),
                        ))
                    }
                    Err(_) => {}
                }
            }
            Err(e) => return Err(io_err(e)),
        }
        let listener = socket::listen_at_mode(path, 128, mode).map_err(io_err)?;
        let path_ino = std::fs::symlink_metadata(path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok();
        let epoll = Epoll::new().map_err(io_err)?;
        epoll.add(listener.as_fd(), Interest::Readable, KEY_LISTENER).map_err(io_err)?;
        drop(lock);
        let limits = Limits::default();
        Ok(NameServer {
            listener,
            path: path.to_owned(),
            path_ino,
            epoll,
            conns: HashMap::new(),
            names: HashMap::new(),
            watches: HashMap::new(),
            minters: HashMap::new(),
            held: HashMap::new(),
            keeper: kept::new_keeper(),
            names_of: HashMap::new(),
            conns_of: HashMap::new(),
            limits,
            fd_capacity: nofile_limit().saturating_sub(limits.fd_reserve),
            fd_base: open_fds(),
            listener_paused: None,
            refused: HashMap::new(),
            quiet: HashMap::new(),
            user_log: HashMap::new(),
            log_lines: LOG_LINES_PER_USER,
            log_every: LOG_EVERY,
            next: 0,
            buf: vec![0; crate::wire::MAX_MESSAGE + 1],
            log: false,
            idle_exit: None,
            last_busy: Instant::now(),
        })
    }

    /// Sets the budgets this server enforces (see [`Limits`]). The
    /// descriptor capacity is taken from `RLIMIT_NOFILE` as it is now, so
    /// raise that first.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
        self.fd_capacity = nofile_limit().saturating_sub(limits.fd_reserve);
    }

    /// The budgets this server enforces.
    pub fn limits(&self) -> Limits {
        self.limits
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
        if let Some(e) = self.names.get(&key) {
            if !e.right.is_dead() {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("system name {name:?} is taken")));
            }
            // A dead entry goes whole (its watch, and the socket it kept),
            // as a registration over it does.
            let w = e.watch;
            self.drop_watch(w);
        }
        self.next += 1;
        let watch = self.next;
        self.epoll.add(right.as_fd(), Interest::Abandoned, KEY_WATCH | watch as u64).map_err(io_err)?;
        let inode = match kept::keep(right.as_fd(), self.keeper) {
            Ok(inode) => inode,
            Err(e) => {
                let _ = self.epoll.remove(right.as_fd());
                return Err(io_err(e));
            }
        };
        self.say(format_args!("registered system name {name:?}"));
        self.hold(inode);
        self.watches.insert(watch, key.clone());
        self.names.insert(key, Entry { right, inode, owner_pid: std::process::id() as i32, watch });
        Ok(())
    }

    /// Publishes a system service under `name` that hands every lookup a
    /// port of its own: `mint` is called with the asker's uid and returns
    /// a new send right to the service (typically
    /// [`PortMinter::mint`](crate::pager::PortMinter::mint)). All send
    /// rights to one port share one socket, which any holder can shut
    /// down or fill for all; a service every user reaches must not hand
    /// them one. `right` is the service's main port, which the server
    /// keeps to watch (the name goes when the service dies) and never
    /// hands out.
    ///
    /// # Errors
    /// As [`NameServer::add_system_name`].
    pub fn add_system_service(&mut self, name: &str, right: SendRight, mint: Mint) -> io::Result<()> {
        self.add_system_name(name, right)?;
        self.minters.insert(name.to_owned(), Minter::Here(mint));
        Ok(())
    }

    /// Prints one line per event on standard error (for `ferryd`), with
    /// the lines about each user's doings within a budget
    /// ([`NameServer::set_log_budget`]).
    pub fn set_logging(&mut self, on: bool) {
        self.log = on;
    }

    /// Logs at most `lines` lines about one user's doings (its
    /// connections, malformed requests, registrations and their ends)
    /// each `every` ([`LOG_LINES_PER_USER`] each [`LOG_EVERY`] unless set
    /// here). The lines past them are counted, and once `every` is over
    /// the count is logged in one line, so a user connecting in a loop
    /// adds a bounded number of lines to the log, whatever it does.
    pub fn set_log_budget(&mut self, lines: u32, every: Duration) {
        self.log_lines = lines;
        self.log_every = every;
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

    /// Logs `what`, a line about a doing of user `uid`, within that user's
    /// budget of lines ([`NameServer::set_log_budget`]); past it, counts
    /// it.
    fn say_for(&mut self, uid: u32, what: std::fmt::Arguments<'_>) {
        if !self.log {
            return;
        }
        let now = Instant::now();
        self.say_held(now);
        let (lines, every) = (self.log_lines, self.log_every);
        let log = self.user_log.entry(uid).or_insert(UserLog { since: now, said: 0, held: 0 });
        if log.said < lines {
            log.said += 1;
            eprintln!("ferryd: {what}");
        } else {
            if log.held == 0 {
                eprintln!("ferryd: {lines} lines about uid {uid} in under {}: the rest of them are counted, not logged", secs(every));
            }
            log.held += 1;
        }
    }

    /// Logs, for each user whose budget of lines began `log_every` or
    /// more before `now`, how many of its lines were not logged, and
    /// begins its budget anew.
    fn say_held(&mut self, now: Instant) {
        let every = self.log_every;
        self.user_log.retain(|uid, log| {
            if now < log.since + every {
                return true;
            }
            if log.held > 0 {
                eprintln!("ferryd: {} more lines about uid {uid} not logged in those {}", log.held, secs(every));
            }
            false
        });
    }

    /// When the first user's count of lines held back is due in the log.
    fn held_due(&self) -> Option<Instant> {
        self.user_log.values().filter(|l| l.held > 0).map(|l| l.since + self.log_every).min()
    }

    /// Logs `what` unless a line of this `kind` was logged within
    /// [`QUIET_FOR`]; then only counts it.
    fn say_limited(&mut self, kind: &'static str, what: std::fmt::Arguments<'_>) {
        if !self.log {
            return;
        }
        match self.quiet.get_mut(kind) {
            Some((last, held)) if last.elapsed() < QUIET_FOR => *held += 1,
            Some((last, held)) => {
                eprintln!("ferryd: {what} ({held} more like it not logged)");
                (*last, *held) = (Instant::now(), 0);
            }
            None => {
                eprintln!("ferryd: {what}");
                self.quiet.insert(kind, (Instant::now(), 0));
            }
        }
    }

    /// Makes [`serve`](Self::serve) return once the server has had no
    /// connection and held no name (system names included) for `after`:
    /// how a daemon started on demand goes away when nobody needs it. It
    /// removes its socket first (unless another server's socket has taken
    /// the path meanwhile), so the next client starts a fresh daemon; a
    /// client that connected in the moment before sees the connection
    /// close and reconnects once on its next request, as it does when any
    /// daemon stops. `None` (the default) serves for ever.
    pub fn set_idle_exit(&mut self, after: Option<Duration>) {
        self.idle_exit = after;
        self.last_busy = Instant::now();
    }

    /// Serves requests until an unrecoverable kernel error, or until idle
    /// for the time given to [`set_idle_exit`](Self::set_idle_exit).
    pub fn serve(mut self) -> io::Result<()> {
        self.say(format_args!("name service listening at {}", self.path.display()));
        loop {
            self.turn()?;
            if self.idle_for_long_enough() {
                self.leave();
                return Ok(());
            }
        }
    }

    /// Whether nothing is held now, and has not been for the idle time.
    fn idle_for_long_enough(&mut self) -> bool {
        let Some(after) = self.idle_exit else { return false };
        if !self.conns.is_empty() || !self.names.is_empty() {
            self.last_busy = Instant::now();
            return false;
        }
        self.last_busy.elapsed() >= after
    }

    /// Removes the socket if it is still this server's, before exiting,
    /// under the lock a server takes to bind there (so a successor's
    /// socket is never removed).
    fn leave(&self) {
        let lock = crate::sys::lock::lock_exclusive(&self.path.with_extension("lock"));
        let at_path = std::fs::symlink_metadata(&self.path).ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        if lock.is_ok() && self.path_ino.is_some() && self.path_ino == at_path {
            let _ = std::fs::remove_file(&self.path);
        }
        drop(lock);
        self.say(format_args!("no connection and no name for {:?}: exiting", self.idle_exit.unwrap_or_default()));
    }

    /// Serves on a background thread of this process (named `ferry-names`)
    /// for as long as the process lives.
    pub fn spawn(self) -> io::Result<()> {
        std::thread::Builder::new().name("ferry-names".into()).spawn(move || {
            if let Err(e) = self.serve() {
                eprintln!("ferry: name server stopped: {e}");
            }
        })?;
        Ok(())
    }

    /// Handles whatever is ready; while the listener is set aside, waits no
    /// longer than until it is due back.
    fn turn(&mut self) -> io::Result<()> {
        let mut deadline = self.listener_paused.map(|since| since + ACCEPT_PAUSE);
        if let Some(after) = self.idle_exit.filter(|_| self.conns.is_empty() && self.names.is_empty()) {
            let idle_at = self.last_busy + after;
            deadline = Some(deadline.map_or(idle_at, |d| d.min(idle_at)));
        }
        if let Some(due) = self.refused.values().map(|(_, at, _)| *at + REFUSED_LINGER).min() {
            deadline = Some(deadline.map_or(due, |d| d.min(due)));
        }
        if let Some(due) = self.held_due() {
            deadline = Some(deadline.map_or(due, |d| d.min(due)));
        }
        let events = self.epoll.wait(32, deadline).map_err(io_err)?;
        if self.log {
            self.say_held(Instant::now());
        }
        if self.listener_paused.is_some_and(|since| Instant::now() >= since + ACCEPT_PAUSE) {
            self.resume_listener();
        }
        for (key, ready) in events {
            match key & !0xffff_ffff {
                KEY_LISTENER => self.accept(),
                KEY_CONN => self.serve_conn(key as u32),
                KEY_WATCH if ready.hangup || ready.readable => self.drop_watch(key as u32),
                KEY_REFUSED => self.drain_refused(key as u32),
                _ => {}
            }
        }
        let now = Instant::now();
        let expired: Vec<u32> = self.refused.iter().filter(|(_, (_, at, _))| now >= *at + REFUSED_LINGER).map(|(k, _)| *k).collect();
        for k in expired {
            self.close_refused(k);
        }
        Ok(())
    }

    /// Reads what the client of a refused connection sent (so that closing
    /// does not reset the refusal away) and closes the connection once the
    /// client has hung up.
    fn drain_refused(&mut self, key: u32) {
        let Some((sock, ..)) = self.refused.get(&key) else { return };
        if !discard_unread(sock.as_fd()) {
            self.close_refused(key);
        }
    }

    fn close_refused(&mut self, key: u32) {
        if let Some((sock, ..)) = self.refused.remove(&key) {
            let _ = self.epoll.remove(sock.as_fd());
        }
    }

    /// Descriptors the server holds for clients.
    fn fds_held(&self) -> usize {
        self.conns.len() + self.names.len()
    }

    /// Whether one more client descriptor would cut into the reserve.
    fn fds_exhausted(&self) -> bool {
        self.fd_base + self.fds_held() + 1 > self.fd_capacity
    }

    /// The most descriptors one user may make the server hold: half of
    /// what is there for clients, so one user never takes them all.
    fn user_fd_share(&self) -> usize {
        (self.fd_capacity.saturating_sub(self.fd_base) / 2).max(1)
    }

    /// Whether `uid` holds its whole share of descriptors already.
    fn user_fds_exhausted(&self, uid: u32) -> bool {
        let held = self.names_of.get(&uid).copied().unwrap_or(0) + self.conns_of.get(&uid).copied().unwrap_or(0);
        held + 1 > self.user_fd_share()
    }

    /// Records a socket the server holds, already kept process-wide
    /// ([`kept::keep`], [`kept::keep_unless`]).
    fn hold(&mut self, inode: u64) {
        *self.held.entry(inode).or_insert(0) += 1;
    }

    fn release(&mut self, inode: u64) {
        if let Some(n) = self.held.get_mut(&inode) {
            *n -= 1;
            kept::unkeep(inode, self.keeper);
            if *n == 0 {
                self.held.remove(&inode);
            }
        }
        // A descriptor came free: accept again if we had stopped.
        self.resume_listener();
    }

    fn resume_listener(&mut self) {
        if self.listener_paused.take().is_some() {
            let _ = self.epoll.add(self.listener.as_fd(), Interest::Readable, KEY_LISTENER);
        }
    }

    fn accept(&mut self) {
        let sock = match socket::accept(self.listener.as_fd()) {
            Ok(s) => s,
            Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)) => {
                // The pending connection stays readable: set the listener
                // aside until a descriptor is freed (or a while has passed)
                // instead of waking on it again at once.
                if self.listener_paused.is_none() {
                    let _ = self.epoll.remove(self.listener.as_fd());
                    self.listener_paused = Some(Instant::now());
                }
                self.say_limited("accept", format_args!("accept failed: {e}; not accepting until a descriptor is freed"));
                return;
            }
            Err(e) => {
                self.say(format_args!("accept failed: {e}"));
                return;
            }
        };
        let (Ok(identity), Ok(peer)) = (socket::identity(sock.as_fd()), socket::peer_cred(sock.as_fd())) else { return };
        let refuse = if self.conns_of.get(&peer.uid).copied().unwrap_or(0) >= self.limits.connections_per_user {
            Some((Limit::Connections, self.limits.connections_per_user))
        } else if self.user_fds_exhausted(peer.uid) {
            Some((Limit::Descriptors, self.user_fd_share()))
        } else if self.fds_exhausted() {
            Some((Limit::Descriptors, self.fd_capacity))
        } else {
            None
        };
        if let Some((what, limit)) = refuse {
            self.say_limited("refused", format_args!("connection of pid {} uid {} refused: {} limit {limit} reached", peer.pid, peer.uid, kind(what)));
            // A farewell the client reads as the answer to its version
            // check. Closing a socket with a request unread resets the
            // connection and the farewell with it: read what came already.
            // The connection is kept open (within bounds) until the client
            // hangs up, reading what it sends meanwhile.
            discard_unread(sock.as_fd());
            let _ = send_on(sock.as_fd(), refusal(limit_reached(what, limit)), Timeout::Zero);
            discard_unread(sock.as_fd());
            if what == Limit::Connections || !self.fds_exhausted() {
                self.linger(sock, peer.uid);
            }
            return;
        }
        self.next += 1;
        let id = self.next;
        // A client's end that another server of this process keeps (handed
        // to the file server as a hold before this accept, say) would keep
        // the connection open, and that server the end, for ever: closed.
        match kept::keep_unless(sock.as_fd(), self.keeper, |other| matches!(other, OtherEnd::Kept { .. })) {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => {
                self.say_limited("refused", format_args!("connection of pid {} uid {} closed: its other end is kept by a server of this process", peer.pid, peer.uid));
                return;
            }
            Err(e) => {
                self.say_limited("refused", format_args!("connection of pid {} uid {} closed: cannot ask the kernel about its socket: {e}", peer.pid, peer.uid));
                return;
            }
        }
        if self.epoll.add(sock.as_fd(), Interest::Readable, KEY_CONN | id as u64).is_err() {
            kept::unkeep(identity.1, self.keeper);
        } else {
            self.say_for(peer.uid, format_args!("client connected: pid {} uid {}", peer.pid, peer.uid));
            *self.conns_of.entry(peer.uid).or_insert(0) += 1;
            self.hold(identity.1);
            self.conns.insert(id, Conn { sock, identity, peer: Some(peer), spoke: false });
        }
    }

    /// Keeps a refused connection of user `uid` open for its client to
    /// read the refusal (see [`REFUSED_LINGER`], [`MAX_REFUSED_PER_USER`],
    /// [`MAX_REFUSED`]).
    fn linger(&mut self, sock: OwnedFd, uid: u32) {
        let oldest = |refused: &HashMap<u32, (OwnedFd, Instant, u32)>, of_uid: Option<u32>| {
            refused.iter().filter(|(_, (.., u))| of_uid.is_none_or(|o| *u == o)).min_by_key(|(_, (_, at, _))| *at).map(|(k, _)| *k)
        };
        let own = self.refused.values().filter(|(.., u)| *u == uid).count();
        let make_room = if own >= MAX_REFUSED_PER_USER {
            oldest(&self.refused, Some(uid))
        } else if self.refused.len() >= MAX_REFUSED {
            oldest(&self.refused, None)
        } else {
            None
        };
        if let Some(k) = make_room {
            self.close_refused(k);
        }
        self.next += 1;
        let key = self.next;
        if self.epoll.add(sock.as_fd(), Interest::Readable, KEY_REFUSED | key as u64).is_ok() {
            self.refused.insert(key, (sock, Instant::now(), uid));
        }
    }

    fn close_conn(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            let _ = self.epoll.remove(c.sock.as_fd());
            if let Some(p) = c.peer {
                if let Some(n) = self.conns_of.get_mut(&p.uid) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.conns_of.remove(&p.uid);
                    }
                }
            }
            drop(c.sock);
            self.release(c.identity.1);
        }
    }

    fn serve_conn(&mut self, id: u32) {
        let Some(conn) = self.conns.get(&id) else { return };
        let got = recv_on(conn.sock.as_fd(), &mut self.buf, conn.identity, Timeout::Zero, false);
        let reply = match got {
            Ok(Some(msg)) if crate::idl::is_answer(msg.op()) => {
                // An answer handed on to this connection (as the reply
                // right of a request to another server): never a request,
                // and never answered.
                crate::idl::drop_answer("name server", &msg);
                return;
            }
            Ok(Some(msg)) => self.handle(id, msg),
            Ok(None) | Err(RecvError::Io(_)) => {
                self.close_conn(id);
                return;
            }
            Err(RecvError::BadMessage(w)) => {
                let (uid, spoke) = (conn.peer.map_or(u32::MAX, |p| p.uid), conn.spoke);
                self.say_for(uid, format_args!("malformed request of uid {uid} discarded: {w}"));
                if spoke {
                    fault_message(Fault::BadRequest(w.to_string()))
                } else {
                    Message::new(V1_BAD_REQUEST).with_body(w.to_string())
                }
            }
            Err(RecvError::Timeout) => return,
            Err(_) => {
                self.close_conn(id);
                return;
            }
        };
        if let Some(conn) = self.conns.get(&id) {
            // A client that does not read its replies only loses its own.
            let _ = send_on(conn.sock.as_fd(), reply, Timeout::Zero);
        }
    }

    /// Answers one request of connection `id`: the version check, else
    /// (once it passed) an operation of [`protocol`], checked whole by the
    /// generated dispatcher before it runs.
    fn handle(&mut self, id: u32, msg: Message) -> Message {
        let Some(conn) = self.conns.get(&id) else { return refusal(Refusal::Denied) };
        let (spoke, peer) = (conn.spoke, conn.peer);
        let Some(cred) = msg.sender().or(peer) else { return refusal(Refusal::Denied) };
        // A request acts as the user who opened the connection, whoever
        // sent its datagram: a client can hand its connection to a more
        // privileged process (as the reply right of a request to a root
        // server, say), whose answer would otherwise act as that process
        // here and be answered to the client. Root's own connections may
        // carry another user's requests (a process that dropped its
        // privileges, or root sending as another): those act as that user.
        if let Some(p) = peer.filter(|p| p.uid != 0 && p.uid != cred.uid) {
            self.say_limited("refused", format_args!("request of uid {} pid {} on a connection of uid {} refused: a request acts as the user who opened its connection", cred.uid, cred.pid, p.uid));
            return refusal(Refusal::Denied);
        }
        if msg.op() == OP_HELLO {
            let reply = answer_hello::<protocol::Protocol>(msg);
            if let (REPLY_OK, Some(c)) = (reply.op(), self.conns.get_mut(&id)) {
                c.spoke = true;
            }
            return reply;
        }
        if !spoke {
            // Before the version check: a client of version 1 reads this
            // as "bad request" and shows the text.
            return Message::new(V1_BAD_REQUEST).with_body(
                "this name server speaks ferry.names version 5, which starts with a version check; this client speaks an older version",
            );
        }
        protocol::Server(Requests { ns: self, cred, conn: id }).dispatch(msg, Route::Rpc).unwrap_or_else(|| refusal(Refusal::Denied))
    }

    /// Checks a registration of `name` in the caller's own scope
    /// completely, then records it.
    fn register(&mut self, cred: Cred, name: String, right: SendRight) -> Result<(), Refusal> {
        self.register_in(cred.uid, cred, name, right)
    }

    /// Checks a registration of `name` in `scope` (a uid, or
    /// [`SYSTEM_UID`]: root's system names, outside every user's names
    /// budget) completely, then records it.
    fn register_in(&mut self, scope: u32, cred: Cred, name: String, right: SendRight) -> Result<(), Refusal> {
        let key = (scope, name);
        if let Some(e) = self.names.get(&key) {
            if !e.right.is_dead() {
                return Err(Refusal::Taken);
            }
            let w = e.watch;
            self.drop_watch(w);
        }
        if scope != SYSTEM_UID && self.names_of.get(&scope).copied().unwrap_or(0) >= self.limits.names_per_user {
            self.say_limited("refused", format_args!("registration of {:?} for uid {} refused: names limit reached", key.1, cred.uid));
            return Err(limit_reached(Limit::Names, self.limits.names_per_user));
        }
        if self.user_fds_exhausted(cred.uid) {
            self.say_limited("refused", format_args!("registration of {:?} for uid {} refused: its share of descriptors is taken", key.1, cred.uid));
            return Err(limit_reached(Limit::Descriptors, self.user_fd_share()));
        }
        if self.fds_exhausted() {
            self.say_limited("refused", format_args!("registration of {:?} for uid {} refused: descriptor reserve reached", key.1, cred.uid));
            return Err(limit_reached(Limit::Descriptors, self.fd_capacity));
        }
        // The server must not keep a port alive by itself: the right's
        // socket must be connected, and its other end must not be a socket
        // the server holds (the receive end registered as a "send right"
        // under another name, or the client's own connection to us).
        // Nor one that another server of this process keeps (a file
        // server's port, hold or lifeline), which would keep the name and
        // the other's socket for each other; unless this process itself
        // registers it, as a host publishing its own server may. Checked
        // and kept in one step (another server of this process may be
        // taking the other end right now), by asking the kernel about this
        // one socket ([`kept`]): what it costs does not grow with the
        // sockets other users hold.
        let own = cred.pid == std::process::id() as i32;
        let me = self.keeper;
        let refuse = |other| match other {
            OtherEnd::Missing => true,
            OtherEnd::Kept { by } => by == me || !own,
            OtherEnd::Elsewhere => false,
        };
        let inode = match kept::keep_unless(right.as_fd(), me, refuse) {
            Ok(Ok(inode)) => inode,
            Ok(Err(OtherEnd::Missing)) => return Err(Refusal::Refused("the registered socket is not connected to a port".into())),
            Ok(Err(OtherEnd::Kept { by })) if by == me => {
                self.say_limited("refused", format_args!("registration of {:?} for uid {} refused: the server holds the other end", key.1, cred.uid));
                return Err(Refusal::Refused(
                    "the other end of this socket is held by the name server itself: a registered right must lead to a receive right held elsewhere".into(),
                ));
            }
            Ok(Err(_)) => {
                self.say_limited("refused", format_args!("registration of {:?} for uid {} refused: a server of this process holds the other end", key.1, cred.uid));
                return Err(Refusal::Refused(
                    "the other end of this socket is held by a server of the name server's process: a registered right must lead to a receive right held elsewhere".into(),
                ));
            }
            Err(e) => return Err(Refusal::Refused(format!("cannot ask the kernel about the registered socket: {e}"))),
        };
        self.next += 1;
        let watch = self.next;
        if let Err(e) = self.epoll.add(right.as_fd(), Interest::Abandoned, KEY_WATCH | watch as u64) {
            kept::unkeep(inode, me);
            return Err(Refusal::Refused(format!("cannot watch the registered port: {e}")));
        }
        if scope == SYSTEM_UID {
            self.say_for(cred.uid, format_args!("registered system name {:?} by uid {} pid {}", key.1, cred.uid, cred.pid));
        } else {
            self.say_for(cred.uid, format_args!("registered {:?} for uid {} by pid {}", key.1, cred.uid, cred.pid));
            *self.names_of.entry(scope).or_insert(0) += 1;
        }
        crate::trace::event!(info, name = %key.1, uid = cred.uid, pid = cred.pid, system = scope == SYSTEM_UID, "name registered");
        self.hold(inode);
        self.watches.insert(watch, key.clone());
        self.names.insert(key, Entry { right, inode, owner_pid: cred.pid, watch });
        Ok(())
    }

    fn drop_watch(&mut self, watch: u32) {
        if let Some(key) = self.watches.remove(&watch) {
            if let Some(e) = self.names.remove(&key) {
                let _ = self.epoll.remove(e.right.as_fd());
                if key.0 != SYSTEM_UID {
                    if let Some(n) = self.names_of.get_mut(&key.0) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            self.names_of.remove(&key.0);
                        }
                    }
                }
                if key.0 == SYSTEM_UID {
                    self.minters.remove(&key.1);
                }
                drop(e.right);
                self.release(e.inode);
                self.say_for(key.0, format_args!("dropped {:?} of uid {}", key.1, key.0));
            }
        }
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        // The sockets it kept go with it.
        for (inode, n) in self.held.drain() {
            for _ in 0..n {
                kept::unkeep(inode, self.keeper);
            }
        }
    }
}

/// `every` as the log says it: whole seconds, or milliseconds below one.
fn secs(every: Duration) -> String {
    if every >= Duration::from_secs(1) {
        format!("{} s", every.as_secs())
    } else {
        format!("{} ms", every.as_millis())
    }
}

/// A budget's short name in the log.
fn kind(what: Limit) -> &'static str {
    match what {
        Limit::Names => "names",
        Limit::Connections => "connections",
        Limit::Descriptors => "descriptors",
    }
}

/// The refusal of a request that would exceed a budget.
fn limit_reached(what: Limit, limit: usize) -> Refusal {
    Refusal::LimitReached(Budget { what, limit: limit as u64 })
}

/// The reply that refuses a request (or a connection).
fn refusal(why: Refusal) -> Message {
    reply_of::<(), Refusal>(Err(why))
}

/// The operations of one request, with the caller the kernel named.
struct Requests<'a> {
    ns: &'a mut NameServer,
    cred: Cred,
    /// The connection the request came on.
    conn: u32,
}

/// Listings whose entries take more than this (estimated from above)
/// travel in a region.
const INLINE_LISTING: usize = crate::wire::MAX_INLINE - 1024;

impl protocol::Service for Requests<'_> {
    fn register(&mut self, _: &Context, name: String, right: SendRight) -> Result<(), Refusal> {
        if !valid_name(name.as_bytes()) {
            return Err(Refusal::Invalid);
        }
        self.ns.register(self.cred, name, right)
    }

    fn lookup(&mut self, _: &Context, name: String) -> Result<SendRight, Refusal> {
        if !valid_name(name.as_bytes()) {
            return Err(Refusal::Invalid);
        }
        let names = &self.ns.names;
        let live = |k: &(u32, String)| names.get(k).filter(|e| !e.right.is_dead());
        if let Some(e) = live(&(self.cred.uid, name.clone())) {
            return e.right.try_clone().map_err(|_| limit_reached(Limit::Descriptors, self.ns.fd_capacity));
        }
        let Some(e) = live(&(SYSTEM_UID, name.clone())) else { return Err(Refusal::NotFound) };
        match self.ns.minters.get_mut(&name) {
            Some(Minter::Here(mint)) => mint(self.cred.uid),
            Some(Minter::There(intake)) => mint_there(&e.right, intake, self.cred.uid, &name),
            None => e.right.try_clone().map_err(|_| limit_reached(Limit::Descriptors, self.ns.fd_capacity)),
        }
    }

    fn list(&mut self, _: &Context) -> Result<Listing, Refusal> {
        let uid = self.cred.uid;
        let mut rows: Vec<_> = self.ns.names.iter().filter(|((u, _), e)| (uid == 0 || *u == uid || *u == SYSTEM_UID) && !e.right.is_dead()).collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        let entries: Vec<NameEntry> = rows
            .into_iter()
            .map(|((u, name), e)| NameEntry {
                name: name.clone(),
                uid: *u,
                owner_pid: e.owner_pid,
                queued_bytes: e.right.queued_bytes().unwrap_or(0) as u64,
            })
            .collect();
        // Each entry takes its name and under 64 bytes of framing.
        if entries.iter().map(|e| e.name.len() + 64).sum::<usize>() <= INLINE_LISTING {
            return Ok(Listing::Inline(entries));
        }
        // Too long to travel inline: a sealed by-value region. Its memfd
        // is not counted against the connection's queue (the message is),
        // so a client that asks again without reading its replies could
        // park any number of them there: at most one waits unread.
        let unread = self.ns.conns.get(&self.conn).map_or(0, |c| socket::queued_bytes(c.sock.as_fd()).unwrap_or(0));
        if unread > 0 {
            return Err(Refusal::Refused("a long listing is sent only once this connection's earlier replies are read".into()));
        }
        let mut enc = Encoder::new();
        entries.encode(&mut enc);
        let bytes = enc.into_message(0);
        match RegionItem::copied_from(bytes.body()) {
            Ok(region) => Ok(Listing::InRegion(ByValue(region))),
            Err(e) => Err(Refusal::Refused(format!("cannot send the listing: {e}"))),
        }
    }

    fn register_system(&mut self, _: &Context, name: String, right: SendRight) -> Result<(), Refusal> {
        if !valid_name(name.as_bytes()) {
            return Err(Refusal::Invalid);
        }
        if self.cred.uid != 0 {
            self.ns.say_limited("refused", format_args!("system name {name:?} refused to uid {}: only root registers system names", self.cred.uid));
            return Err(Refusal::Denied);
        }
        self.ns.register_in(SYSTEM_UID, self.cred, name, right)
    }

    fn register_system_service(&mut self, ctx: &Context, name: String, right: SendRight) -> Result<(), Refusal> {
        self.register_system(ctx, name.clone(), right)?;
        self.ns.minters.insert(name, Minter::There(Intake::default()));
        Ok(())
    }

    fn unregister(&mut self, _: &Context, name: String) -> Result<(), Refusal> {
        match self.ns.names.get(&(self.cred.uid, name)) {
            Some(e) => {
                let w = e.watch;
                self.ns.drop_watch(w);
                Ok(())
            }
            None => Err(Refusal::NotFound),
        }
    }
}

/// How a system service makes a port of its own for one asker, given the
/// asker's uid ([`NameServer::add_system_service`]).
pub type Mint = Box<dyn FnMut(u32) -> Result<SendRight, Refusal> + Send>;

/// How the ports of a system service are made for its lookups.
enum Minter {
    /// By a function of this process ([`NameServer::add_system_service`]).
    Here(Mint),
    /// By this server, which sends each port's receive right to the
    /// service's registered port ([`SERVICE_PORT`]), each user within its
    /// share of that port's queue.
    There(Intake),
}

impl std::fmt::Debug for Minter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Minter::Here(_) => "Minter::Here",
            Minter::There(_) => "Minter::There",
        })
    }
}


/// A port of its own for user `uid`'s lookup of the system service
/// `name` registered at `service` by another process
/// (`register_system_service`): made here, its receive right sent to the
/// service in a [`SERVICE_PORT`] message, and a send right to it
/// returned. Nothing stays here: the port closes when the service drops
/// its receive right or the user its last send right. A user with more
/// than its share of `intake` waiting is refused before a port is made.
fn mint_there(service: &SendRight, intake: &mut Intake, uid: u32, name: &str) -> Result<SendRight, Refusal> {
    let before = intake.room_for(service, uid).map_err(|why| Refusal::Refused(format!("the service {name:?} is busy: {why}")))?;
    let (rx, tx) = crate::port().map_err(|e| Refusal::Refused(format!("cannot make a port for {name:?}: {e}")))?;
    let copy = tx.try_clone().map_err(|e| Refusal::Refused(format!("cannot make a port for {name:?}: {e}")))?;
    let m = Message::new(SERVICE_PORT).with_body(uid.to_le_bytes().to_vec()).with_item(Item::Receive(rx)).with_item(Item::Send(copy));
    // Never waits: only the name server sends on that port and the
    // service drains it as it serves, so it is full only when the service
    // has fallen behind, and a wait would hold up every user's requests.
    match service.send(m, Timeout::Zero) {
        Ok(()) => {
            intake.sent(service, before, uid);
            Ok(tx)
        }
        Err(e) => Err(Refusal::Refused(format!("the service {name:?} did not take a port for this lookup: {e}"))),
    }
}

/// Reads and discards up to eight datagrams a refused client sent, so that
/// closing its connection does not reset the refusal away. True while the
/// client is still connected with nothing more to read yet; false once it
/// hung up, failed, or keeps sending.
fn discard_unread(sock: BorrowedFd<'_>) -> bool {
    let mut scratch = [0u8; 64];
    for _ in 0..8 {
        match socket::recv(sock, &mut scratch, false) {
            Ok(d) if d.is_eof() => return false,
            Ok(_) => {}
            Err(Errno::AGAIN) => return true,
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system name added over a dead one takes the dead entry's place
    /// whole: its watch goes, and the socket it kept is no longer counted
    /// as kept by this process (where a socket connected to a new one
    /// given the same inode number would have been refused as leading
    /// back into it).
    #[test]
    fn a_system_name_over_a_dead_one_lets_the_dead_ones_socket_go() {
        let dir = std::env::temp_dir().join(format!("ferry-ns-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ns = NameServer::bind(&dir.join("bootstrap")).unwrap();
        let (rx, tx) = crate::port().unwrap();
        let old = socket::identity(tx.as_fd()).unwrap().1;
        ns.add_system_name("svc", tx).unwrap();
        drop(rx);
        let (_rx2, tx2) = crate::port().unwrap();
        ns.add_system_name("svc", tx2).unwrap();
        assert_eq!(ns.watches.len(), 1, "the dead entry's watch stayed");
        assert!(!kept::is_kept(old), "the dead entry's socket is still kept");
        drop(ns);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
