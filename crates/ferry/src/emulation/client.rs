//! The client side of the emulation protocol, used by the `ferry-emul`
//! preload library: one blocking call per request, errors as `errno`
//! values (a server that is gone gives `EIO`).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::{get_u32, get_u64, put_u32, put_u64, TokenPage};
use super::{OP_EMUL_CHANNEL, OP_EMUL_CLOSE, OP_EMUL_FSYNC, OP_EMUL_MKDIR, OP_EMUL_OPEN, OP_EMUL_RENAME, OP_EMUL_STAT, OP_EMUL_TOKEN, OP_EMUL_TRUNCATE};
use super::{OP_EMUL_SG_READ, OP_EMUL_SG_WRITE, OP_EMUL_TRUNCATE_NAME, OP_EMUL_UNLINK, SG_MAX};
use crate::message::{Item, Message};
use crate::port::SendRight;
use crate::timeout::Timeout;

/// A connection to an emulation server.
#[derive(Debug)]
pub struct Client {
    server: SendRight,
}

/// A regular file the server opened.
#[derive(Debug)]
pub struct OpenedFile {
    /// The open file's id at the server.
    pub id: u64,
    /// The file, opened with the asker's rights and the requested access.
    pub file: OwnedFd,
    /// The open file's token page.
    pub page: TokenPage,
    /// Keeps the open file alive at the server; drop it on the last close.
    pub hold: SendRight,
    /// The descriptor the file arrived on, at the lowest number free then,
    /// when `file` is a copy of it placed high: not closed here, because
    /// closing any descriptor of a file drops the process's POSIX record
    /// locks on it (`fcntl(F_SETLK)`, `lockf`), so a program's second open
    /// of a file it had locked let another process take the lock. An
    /// emulation library gives it to the program as the open's descriptor.
    pub received: Option<OwnedFd>,
}

/// What an open gave.
#[derive(Debug)]
pub enum Opened {
    /// A directory, opened for reading (listing) and as a base for names.
    Dir(OwnedFd),
    /// A regular file.
    File(OpenedFile),
}

/// What `stat` reports, field by field as in `struct stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct StatInfo {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: i64,
    pub blksize: i64,
    pub blocks: i64,
    pub atime: (i64, i64),
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

/// The lowest descriptor number the library's own descriptors take when
/// the limit allows ([`high_fd`]).
pub const HIGH_FD: i32 = 1000;

/// The lowest descriptor number the library's own descriptors take in
/// this process: [`HIGH_FD`], or under a lower limit on descriptors (taken
/// once, when first asked) the top quarter of it. Above the limit, the
/// library's descriptors fell among the program's low numbers, where a
/// shell's `exec 3<file` moved and closed them (the second such
/// redirection under `ulimit -n 512` failed with `EIO`).
pub fn high_fd() -> i32 {
    static HIGH: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *HIGH.get_or_init(|| {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
        i32::try_from(limit - limit / 4).map_or(HIGH_FD, |top| top.clamp(3, HIGH_FD))
    })
}

/// The lowest number below [`high_fd`] that one of the library's own
/// descriptors was given ([`dup_high`]), or `i32::MAX`.
static LOW_WATER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(i32::MAX);

/// The lowest descriptor number the library's own descriptors may have
/// had in this process: [`high_fd`], or lower once they went below it
/// (a limit on descriptors lowered since, with the top of it full).
/// Below it every descriptor is the program's.
pub fn library_floor() -> i32 {
    high_fd().min(LOW_WATER.load(std::sync::atomic::Ordering::Relaxed))
}

/// A close-on-exec duplicate of `fd` at [`high_fd`] or above, or, when
/// the program lowered its limit on descriptors below that since, in the
/// top quarter of the limit as it is now. (Left where they came, the
/// library's descriptors fell among the program's numbers: after `ulimit
/// -n 64`, a shell's `exec 40>file` found a hold of the library's at 40,
/// saved and put it back, and `echo x >&40` wrote into the hold.) When
/// that is full, at the highest free number below it: the program's
/// descriptors are the lowest free ones, so it gets the numbers it would
/// get natively as long as both fit under the limit. (They went to the
/// lowest free number, the one the program's next `open` should have got:
/// with more than eight files open under `ulimit -n 64`, a shell's
/// `exec {fd}>file` gave other numbers than natively.)
pub fn dup_high(fd: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    use std::sync::atomic::Ordering;
    let limit = || rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    let top = match rustix::io::fcntl_dupfd_cloexec(fd, high_fd()) {
        Err(rustix::io::Errno::INVAL) => {
            let l = limit();
            i32::try_from(l - l / 4).map_or(HIGH_FD, |top| top.clamp(3, HIGH_FD))
        }
        r => return r.or_else(|e| below(fd, high_fd(), e)),
    };
    let placed = rustix::io::fcntl_dupfd_cloexec(fd, top).or_else(|e| below(fd, top, e))?;
    LOW_WATER.fetch_min(placed.as_raw_fd(), Ordering::Relaxed);
    Ok(placed)
}

/// A close-on-exec duplicate of `fd` at the highest free number below
/// `top` (everything from `top` up being taken: `err`), starting from
/// where the last one went (holes there are filled first), and never
/// below the standard three.
fn below(fd: BorrowedFd<'_>, top: i32, err: rustix::io::Errno) -> rustix::io::Result<OwnedFd> {
    use std::sync::atomic::Ordering;
    if err != rustix::io::Errno::MFILE {
        return Err(err);
    }
    let from = LOW_WATER.load(Ordering::Relaxed).min(top);
    if from < top {
        if let Ok(fd) = rustix::io::fcntl_dupfd_cloexec(fd, from) {
            LOW_WATER.fetch_min(fd.as_raw_fd(), Ordering::Relaxed);
            return Ok(fd);
        }
    }
    for n in (3..from).rev() {
        match rustix::io::fcntl_dupfd_cloexec(fd, n) {
            Ok(fd) => {
                LOW_WATER.fetch_min(fd.as_raw_fd(), Ordering::Relaxed);
                return Ok(fd);
            }
            Err(rustix::io::Errno::MFILE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(err)
}

/// Moves `fd` to a close-on-exec descriptor numbered [`high_fd`] or above
/// when the limit allows (see [`dup_high`]; else it stays where it is).
pub fn high(fd: OwnedFd) -> OwnedFd {
    match dup_high(fd.as_fd()) {
        Ok(moved) => moved,
        Err(_) => fd,
    }
}

/// An `errno` value.
pub type Errno = i32;

/// An answer's body (after the errno), its items, and the descriptors
/// that came before it on a channel.
type Answered = (Vec<u8>, Vec<Item>, Vec<OwnedFd>);

/// One thread's channel to the server ([`super::OP_EMUL_CHANNEL`]).
enum Channel {
    /// None yet (or the last one failed).
    None,
    /// Made in process `pid` acting as user and group `ids`: this end.
    Open { pid: u32, ids: (u32, u32), end: ChannelEnd },
    /// The server would not keep one more for this user, when asked in
    /// process `pid`.
    Refused { pid: u32 },
}

/// A thread's end of its channel: the socket, and its identity (device
/// and inode), to tell whether the program closed the descriptor.
struct ChannelEnd {
    id: (u64, u64),
    sock: Option<OwnedFd>,
}

impl ChannelEnd {
    /// Lets the descriptor be without closing it: the number may be
    /// another descriptor's by now, or the socket a parent's.
    fn forget(mut self) {
        std::mem::forget(self.sock.take());
    }
}

impl Drop for ChannelEnd {
    /// Closed with its thread, or when it failed, unless the program
    /// closed its descriptor meanwhile: the number may be the program's.
    fn drop(&mut self) {
        if let Some(sock) = self.sock.take() {
            if !ours(self.id, &sock) {
                std::mem::forget(sock);
            }
        }
    }
}

/// Whether `sock` is still the socket of identity `id`: a program may
/// close the library's descriptors (a child about to exec closes all it
/// does not pass on), and the number may be another descriptor's by now.
fn ours(id: (u64, u64), sock: &OwnedFd) -> bool {
    crate::sys::socket::identity(sock.as_fd()).is_ok_and(|now| now == id)
}

/// Sends one request on a channel (its socket of identity `id`) and waits
/// there for its answer. An open's descriptors come just before its answer
/// in a datagram of their own (a marker byte, `f` or `d`, and the
/// descriptors): they are returned beside it.
fn exchange_on(sock: std::os::fd::BorrowedFd<'_>, id: (u64, u64), op: u32, body: Vec<u8>) -> Result<(Message, Vec<OwnedFd>), ()> {
    crate::port::send_on(sock, Message::new(op).with_body(body), Timeout::Infinite).map_err(drop)?;
    let mut fds = Vec::new();
    crate::port::with_buf(|buf| loop {
        let dg = recv_looking(sock, buf)?;
        if dg.len == 1 && matches!(buf[0], b'f' | b'd') && !dg.fds.is_empty() && !dg.fds_truncated && fds.is_empty() {
            fds = dg.fds;
            continue;
        }
        return match crate::port::datagram_message(buf, dg, id, false) {
            Ok(Some(m)) if m.op() == super::OP_EMUL_REPLY => Ok((m, fds)),
            _ => Err(()),
        };
    })
}

/// The next datagram on `sock`: looked for, yielding the CPU between
/// looks, for up to [`super::SPIN`], then waited for.
fn recv_looking(sock: std::os::fd::BorrowedFd<'_>, buf: &mut [u8]) -> Result<crate::sys::socket::Datagram, ()> {
    use rustix::io::Errno as E;
    let start = std::time::Instant::now();
    loop {
        let wait = start.elapsed() >= super::SPIN;
        match crate::sys::socket::recv(sock, buf, wait) {
            Ok(dg) => return Ok(dg),
            Err(E::AGAIN) => std::thread::yield_now(),
            Err(E::INTR) => {}
            Err(_) => return Err(()),
        }
    }
}

/// A port for the server's replies, its descriptor placed high (see
/// [`high`]): the program owns the low numbers and may `dup2` onto any of
/// them, which would silently replace a descriptor of the library's (and
/// the library, closing "its" descriptor later, would close the program's).
fn reply_port() -> Result<crate::port::ReceiveRight, Errno> {
    let (rx, tx) = crate::sys::socket::seqpacket_pair().map_err(|e| e.raw_os_error())?;
    drop(tx);
    crate::port::ReceiveRight::from_parts(high(rx), Vec::new()).map_err(|e| e.raw_os_error())
}

impl Client {
    /// A client of the server behind `server`.
    pub fn new(server: SendRight) -> Client {
        Client { server }
    }

    /// The client of an emulated program: the send right announced by
    /// [`super::ENV_FD`], copied to a close-on-exec descriptor (the
    /// announced one stays, for the programs this one starts). `None` when
    /// nothing is announced or the descriptor is not a ferry port.
    pub fn from_env() -> Option<Client> {
        let fd: i32 = std::env::var(super::ENV_FD).ok()?.parse().ok()?;
        if let Some(copy) = crate::sys::spawn::copy_inherited(fd, high_fd(), crate::sys::socket::is_unix_seqpacket) {
            return Some(Client::new(SendRight::from_fd(copy)));
        }
        std::env::var_os(super::ENV_HANDOFF)?;
        // Asked of the holder through the process port: the right lands at
        // `fd`, inheritable, for the programs this one starts (which find
        // it there and ask nobody).
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            use std::os::fd::AsRawFd as _;
            let right = crate::process::handed_right_at(Some(fd), false).ok()??;
            if right.sock.as_raw_fd() == fd {
                // Kept open at `fd` for the life of the process, as an
                // inherited one would be; this process uses a copy.
                let copy = rustix::io::fcntl_dupfd_cloexec(&right.sock, high_fd()).ok()?;
                std::mem::forget(right);
                return Some(Client::new(SendRight::from_fd(copy)));
            }
            Some(Client::new(SendRight::from_fd(high(right.sock))))
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        None
    }

    /// The send right to the server.
    pub fn right(&self) -> &SendRight {
        &self.server
    }

    /// Whether the server is gone.
    pub fn is_dead(&self) -> bool {
        self.server.is_dead()
    }

    fn call(&self, op: u32, body: Vec<u8>) -> Result<(Vec<u8>, Vec<Item>), Errno> {
        self.call_fds(op, body).map(|(b, items, _)| (b, items))
    }

    /// [`call`](Self::call), with the descriptors an open's answer brought
    /// over a channel (none when it came by a reply right: those come in
    /// an envelope among the items).
    fn call_fds(&self, op: u32, body: Vec<u8>) -> Result<Answered, Errno> {
        // A call is made as the caller's effective user and group, the
        // ones the kernel checks its own file calls with: the credentials
        // on a datagram name the real ones unless told otherwise, and a
        // program run as root that took another user's effective uid to
        // act for that user (`seteuid`) was served as root. The kernel
        // checks the claim at each send (real, effective or saved ids).
        use rustix::process::{getegid, geteuid, getgid, getuid};
        let (ruid, euid, rgid, egid) = (getuid().as_raw(), geteuid().as_raw(), getgid().as_raw(), getegid().as_raw());
        if (euid, egid) != (ruid, rgid) {
            let cred = crate::sys::socket::Cred { pid: std::process::id() as i32, uid: euid, gid: egid };
            return crate::sys::socket::sending_as(cred, || self.call_fds_as(op, body, (euid, egid)));
        }
        self.call_fds_as(op, body, (ruid, rgid))
    }

    /// [`call_fds`](Self::call_fds), made as user and group `ids`.
    fn call_fds_as(&self, op: u32, body: Vec<u8>, ids: (u32, u32)) -> Result<Answered, Errno> {
        // Each thread of each process calls over a channel of its own (a
        // socket pair whose other end the server keeps,
        // `OP_EMUL_CHANNEL`): a request and its answer are one datagram
        // each way, with no socket made and no right passed per call.
        // Where there is none (the server refused one, or this is a call
        // made while the thread's channel is in use, from a signal
        // handler, or while the thread's storage is torn down) the call
        // brings a reply right of its own.
        thread_local! {
            static CHANNEL: std::cell::RefCell<Channel> = const { std::cell::RefCell::new(Channel::None) };
        }
        let pid = std::process::id();
        let mut body = Some(body);
        let kept = CHANNEL.try_with(|cell| {
            let Ok(mut chan) = cell.try_borrow_mut() else { return None };
            let usable = match &*chan {
                Channel::Open { pid: p, ids: i, end: ChannelEnd { id, sock: Some(sock) } } => *p == pid && *i == ids && ours(*id, sock),
                Channel::Open { .. } => false,
                Channel::Refused { pid: p } => *p == pid,
                Channel::None => false,
            };
            if !usable {
                if let Channel::Open { end, pid: p, .. } = std::mem::replace(&mut *chan, Channel::None) {
                    if p == pid {
                        // Made here as another user (the effective ids
                        // changed since): closed, unless the program
                        // closed it meanwhile (see `ChannelEnd`'s drop).
                        drop(end);
                    } else {
                        // Inherited from the parent, or closed by the
                        // program. Its descriptor is not closed: the child
                        // may have closed it already (a child about to exec
                        // closes all it does not pass on, as Python's
                        // subprocess does), and the number may now be
                        // another descriptor's. It is close-on-exec; a
                        // child that does not exec keeps one descriptor
                        // more.
                        end.forget();
                    }
                }
                *chan = self.open_channel(pid, ids);
            }
            let Channel::Open { end: ChannelEnd { id, sock: Some(sock) }, .. } = &*chan else { return None };
            let m = exchange_on(sock.as_fd(), *id, op, body.take().unwrap_or_default()).map_err(|()| self.failed());
            if m.is_err() {
                // A channel in an unknown state (an answer may still come)
                // is not used again (dropped: closed if still ours).
                *chan = Channel::None;
            }
            Some(m)
        });
        let (reply, fds) = match kept {
            Ok(Some(Ok((m, fds)))) => (Ok(m), fds),
            Ok(Some(Err(e))) => (Err(e), Vec::new()),
            Ok(None) | Err(_) => (self.exchange_once(op, body.take().unwrap_or_default()), Vec::new()),
        };
        let (b, items) = reply.and_then(Self::answer)?;
        Ok((b, items, fds))
    }

    /// A new channel for this thread of process `pid`, or, if the server
    /// will not keep one for this user, [`Channel::Refused`] (the thread's
    /// calls then bring reply rights of their own).
    fn open_channel(&self, pid: u32, ids: (u32, u32)) -> Channel {
        let Ok((mine, theirs)) = crate::sys::socket::seqpacket_pair() else { return Channel::None };
        let mine = high(mine);
        let Ok(id) = crate::sys::socket::identity(mine.as_fd()) else { return Channel::None };
        let Ok(theirs) = crate::port::ReceiveRight::from_parts(theirs, Vec::new()) else { return Channel::None };
        let Ok(rx) = reply_port() else { return Channel::None };
        let m = self.exchange(rx, Message::new(OP_EMUL_CHANNEL).with_item(Item::Receive(theirs)));
        // Refused for good in this thread once the server said no, or the
        // asking failed: a call asks for a channel once, not every time.
        match m.and_then(Self::answer) {
            Ok(_) => Channel::Open { pid, ids, end: ChannelEnd { id: (id.0, id.1), sock: Some(mine) } },
            Err(_) => Channel::Refused { pid },
        }
    }

    /// One call with a reply port made for it alone.
    fn exchange_once(&self, op: u32, body: Vec<u8>) -> Result<Message, Errno> {
        let rx = reply_port()?;
        self.exchange(rx, Message::new(op).with_body(body))
    }

    /// Sends `m` to the server's main port with a send-once right to `rx`
    /// and waits for the answer there.
    fn exchange(&self, mut rx: crate::port::ReceiveRight, m: Message) -> Result<Message, Errno> {
        let once = rx.make_send_once().map_err(|_| self.failed())?;
        self.server.send(m.with_reply(once), Timeout::Infinite).map_err(|_| self.failed())?;
        rx.recv(Timeout::Infinite).map_err(|_| self.failed())
    }

    /// The error for an exchange with the server that failed: `EMFILE`
    /// when this process has no descriptor free (a send-once right, or the
    /// descriptors a reply carries, could not be made or taken), else
    /// `EIO` (the server is gone, or answered nonsense).
    fn failed(&self) -> Errno {
        // An exchange holds up to four descriptors at once (a send-once
        // right's pair, a reply's two rights, an envelope's two files).
        let mut probe = Vec::with_capacity(4);
        for _ in 0..4 {
            match rustix::io::fcntl_dupfd_cloexec(self.server.as_fd(), 0) {
                Ok(fd) => probe.push(fd),
                Err(e) if e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE => return e.raw_os_error(),
                Err(_) => break,
            }
        }
        libc::EIO
    }

    fn answer(mut m: Message) -> Result<(Vec<u8>, Vec<Item>), Errno> {
        let err = get_u32(m.body(), 0).ok_or(libc::EIO)? as i32;
        if err != 0 {
            return Err(err);
        }
        Ok((m.body()[4..].to_vec(), m.take_items()))
    }

    /// Opens `name` (relative to the served root) with `open(2)` flags and
    /// the mode for a new file (the caller's umask already applied).
    pub fn open(&self, name: &str, flags: i32, mode: u32) -> Result<Opened, Errno> {
        let mut body = Vec::with_capacity(8 + name.len());
        put_u32(&mut body, flags as u32);
        put_u32(&mut body, mode);
        body.extend_from_slice(name.as_bytes());
        let (b, items, direct) = self.call_fds(OP_EMUL_OPEN, body)?;
        let kind = get_u32(&b, 0).ok_or(libc::EIO)?;
        let id = get_u64(&b, 4).ok_or(libc::EIO)?;
        // The rights that came with the answer (an envelope, a hold) go
        // above the program's numbers before the envelope is opened, so
        // that the file arrives at the lowest free number, as it does over
        // a channel (see `OpenedFile::received`).
        let mut items = items
            .into_iter()
            .map(|i| match i {
                Item::Send(s) => Item::Send(SendRight::from_fd(high(s.sock))),
                other => other,
            })
            .collect::<Vec<_>>()
            .into_iter();
        // Over a channel the descriptors came before the answer; by a
        // reply right, in an envelope (a socket pair's end whose queue
        // holds them).
        let fds = if direct.is_empty() {
            let Some(Item::Send(envelope)) = items.next() else { return Err(libc::EIO) };
            let mut buf = [0u8; 8];
            let dg = crate::sys::socket::recv(envelope.as_fd(), &mut buf, true).map_err(|_| self.failed())?;
            if dg.fds_truncated {
                return Err(self.failed());
            }
            dg.fds
        } else {
            direct
        };
        let mut fds = fds.into_iter();
        match (kind, fds.next(), fds.next(), items.next()) {
            // Left where it came, at the lowest number free then: an
            // emulation library gives it to the program there, and moving
            // it would close a descriptor of the directory, which drops
            // the process's POSIX record locks on it.
            (1, Some(dir), None, None) => Ok(Opened::Dir(dir)),
            (0, Some(file), Some(page), Some(Item::Send(hold))) => {
                let page = TokenPage::map(page.as_fd()).map_err(|_| libc::EIO)?;
                // The library's own descriptors keep out of the low numbers
                // programs expect open(2) to return. The file's is copied
                // there, not moved: the one it came on stays open (see
                // `OpenedFile::received`).
                let (file, received) = match dup_high(file.as_fd()) {
                    Ok(copy) => (copy, Some(file)),
                    Err(_) => (file, None),
                };
                Ok(Opened::File(OpenedFile { id, file, page, hold, received }))
            }
            _ => Err(libc::EIO),
        }
    }

    /// `stat` (or `lstat` when `nofollow`) of `name`.
    pub fn stat(&self, name: &str, nofollow: bool) -> Result<StatInfo, Errno> {
        let mut body = Vec::new();
        put_u32(&mut body, nofollow as u32);
        body.extend_from_slice(name.as_bytes());
        let (b, _) = self.call(OP_EMUL_STAT, body)?;
        let f = |i: usize| get_u64(&b, i * 8).ok_or(libc::EIO);
        Ok(StatInfo {
            dev: f(0)?,
            ino: f(1)?,
            mode: f(2)? as u32,
            nlink: f(3)?,
            uid: f(4)? as u32,
            gid: f(5)? as u32,
            rdev: f(6)?,
            size: f(7)? as i64,
            blksize: f(8)? as i64,
            blocks: f(9)? as i64,
            atime: (f(10)? as i64, f(11)? as i64),
            mtime: (f(12)? as i64, f(13)? as i64),
            ctime: (f(14)? as i64, f(15)? as i64),
        })
    }

    /// Removes a file (or, with `dir`, an empty directory).
    pub fn unlink(&self, name: &str, dir: bool) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u32(&mut body, dir as u32);
        body.extend_from_slice(name.as_bytes());
        self.call(OP_EMUL_UNLINK, body).map(drop)
    }

    /// Renames `from` to `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u32(&mut body, from.len() as u32);
        body.extend_from_slice(from.as_bytes());
        body.extend_from_slice(to.as_bytes());
        self.call(OP_EMUL_RENAME, body).map(drop)
    }

    /// Makes a directory (the caller's umask already applied to `mode`).
    pub fn mkdir(&self, name: &str, mode: u32) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u32(&mut body, mode);
        body.extend_from_slice(name.as_bytes());
        self.call(OP_EMUL_MKDIR, body).map(drop)
    }

    /// Truncates the file `name` to `len` bytes, as `truncate(2)` does,
    /// with no descriptor of it opened in this process.
    pub fn truncate_name(&self, name: &str, len: u64) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u64(&mut body, len);
        body.extend_from_slice(name.as_bytes());
        self.call(OP_EMUL_TRUNCATE_NAME, body).map(drop)
    }

    /// Asks for the token of open file `id`; returns once this process is
    /// its active holder.
    pub fn token(&self, id: u64) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u64(&mut body, id);
        self.call(OP_EMUL_TOKEN, body).map(drop)
    }

    /// Truncates (or extends) open file `id` to `len` bytes.
    pub fn truncate(&self, id: u64, len: u64) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u64(&mut body, id);
        put_u64(&mut body, len);
        self.call(OP_EMUL_TRUNCATE, body).map(drop)
    }

    /// Segment read by message (CHORUS's `sgRead`): up to `buf.len()`
    /// bytes (at most [`SG_MAX`] per call) of open file `id` at `offset`,
    /// copied through the server's cache without mapping anything here.
    pub fn sg_read(&self, id: u64, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut body = Vec::with_capacity(20);
        put_u64(&mut body, id);
        put_u64(&mut body, offset);
        put_u32(&mut body, buf.len().min(SG_MAX) as u32);
        let (b, _) = self.call(OP_EMUL_SG_READ, body)?;
        let n = b.len().min(buf.len());
        buf[..n].copy_from_slice(&b[..n]);
        Ok(n)
    }

    /// Segment write by message (`sgWrite`): `data` (at most [`SG_MAX`]
    /// bytes per call) into open file `id` at `offset`.
    pub fn sg_write(&self, id: u64, offset: u64, data: &[u8]) -> Result<usize, Errno> {
        let data = &data[..data.len().min(SG_MAX)];
        let mut body = Vec::with_capacity(16 + data.len());
        put_u64(&mut body, id);
        put_u64(&mut body, offset);
        body.extend_from_slice(data);
        let (b, _) = self.call(OP_EMUL_SG_WRITE, body)?;
        Ok(get_u64(&b, 0).ok_or(libc::EIO)? as usize)
    }

    /// Flushes open file `id` to disk.
    pub fn fsync(&self, id: u64) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u64(&mut body, id);
        self.call(OP_EMUL_FSYNC, body).map(drop)
    }

    /// This process let go of open file `id` and closed its hold: the
    /// server closes the file now if no process holds it any more, so
    /// that it is as closed as after a native `close` when this returns
    /// ([`OP_EMUL_CLOSE`]).
    pub fn close(&self, id: u64) -> Result<(), Errno> {
        let mut body = Vec::new();
        put_u64(&mut body, id);
        self.call(OP_EMUL_CLOSE, body).map(drop)
    }
}
