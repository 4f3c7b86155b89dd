//! Unix sequenced-packet sockets: the kernel object behind every port.
//!
//! Everything here is safe `rustix` except [`queued_bytes`] and
//! [`peer_groups`], which need calls rustix does not wrap, and the receive,
//! which calls `recvmsg(2)` without asking for the sender's address (rustix
//! always asks, and the kernel then copies it out for every datagram). File
//! descriptors become [`OwnedFd`] the moment
//! the kernel hands them over (in `recvmsg`'s control buffer), so nothing above
//! this module ever sees a raw descriptor number.

use std::cell::Cell;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;
use rustix::net::{
    self, AddressFamily,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

/// Most file descriptors the kernel passes in one message (`SCM_MAX_FD`).
pub const MAX_FDS: usize = 253;

/// Credentials of a sending process as the kernel recorded them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    /// Process id of the sender.
    pub pid: i32,
    /// Real user id of the sender.
    pub uid: u32,
    /// Real group id of the sender.
    pub gid: u32,
}

impl From<net::UCred> for Cred {
    fn from(c: net::UCred) -> Self {
        Cred { pid: c.pid.as_raw_nonzero().get(), uid: c.uid.as_raw(), gid: c.gid.as_raw() }
    }
}

/// A datagram as `recvmsg` delivered it.
#[derive(Debug)]
pub struct Datagram {
    /// Bytes written into the caller's buffer.
    pub len: usize,
    /// The datagram was longer than the buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// Some descriptors were dropped by the kernel (`MSG_CTRUNC`).
    pub fds_truncated: bool,
    /// Descriptors that arrived with the datagram, in order.
    pub fds: Vec<OwnedFd>,
    /// The sender's credentials, when `SO_PASSCRED` is on.
    pub cred: Option<Cred>,
}

impl Datagram {
    /// Whether this is end-of-file (every peer socket closed and the queue
    /// empty) rather than a datagram. A peer can send a zero-length datagram,
    /// which also reads as zero bytes; it still carries the sender's
    /// credentials (every ferry socket has `SO_PASSCRED` on), end-of-file
    /// carries nothing.
    pub fn is_eof(&self) -> bool {
        self.len == 0 && self.fds.is_empty() && !self.truncated && !self.fds_truncated && self.cred.is_none()
    }
}

/// Creates a connected pair of close-on-exec `SOCK_SEQPACKET` sockets and
/// turns on credential passing for both ends.
pub fn seqpacket_pair() -> rustix::io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    net::sockopt::set_socket_passcred(&a, true)?;
    net::sockopt::set_socket_passcred(&b, true)?;
    Ok((a, b))
}

/// Sends one datagram carrying `fds`. `wait == false` fails with `EAGAIN`
/// instead of blocking on a full queue. Never raises `SIGPIPE`.
pub fn send(
    sock: BorrowedFd<'_>,
    parts: &[IoSlice<'_>],
    fds: &[BorrowedFd<'_>],
    wait: bool,
) -> rustix::io::Result<usize> {
    let mut flags = SendFlags::NOSIGNAL;
    if !wait {
        flags |= SendFlags::DONTWAIT;
    }
    let as_cred = SENDING_AS.with(Cell::get);
    // Without descriptors, plain send(2) carries the same datagram through a
    // shorter kernel path than sendmsg(2) (no msghdr or iovec import).
    if let ([only], [], None) = (parts, fds, as_cred) {
        return net::send(sock, only, flags);
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS), ScmCredentials(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Errno::TOOMANYREFS);
    }
    if let Some(c) = as_cred {
        let pid = rustix::process::Pid::from_raw(c.pid).ok_or(Errno::INVAL)?;
        let cred = net::UCred { pid, uid: rustix::process::Uid::from_raw(c.uid), gid: rustix::process::Gid::from_raw(c.gid) };
        if !control.push(SendAncillaryMessage::ScmCredentials(cred)) {
            return Err(Errno::INVAL);
        }
    }
    net::sendmsg(sock, parts, &mut control, flags)
}

thread_local! {
    /// The credentials this thread's sends carry instead of its own
    /// ([`sending_as`]).
    static SENDING_AS: Cell<Option<Cred>> = const { Cell::new(None) };
}

/// Runs `f` with every datagram this thread sends carrying `cred` as its
/// sender's credentials. The kernel checks them at each send: a process
/// may name its own pid, uid and gid, and root any (`EPERM` otherwise).
pub fn sending_as<R>(cred: Cred, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Cred>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SENDING_AS.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SENDING_AS.with(|s| s.replace(Some(cred))));
    f()
}

/// Receives one datagram into `buf`, with any descriptors and credentials.
/// `wait == false` fails with `EAGAIN` when the queue is empty. A zero-length
/// result with no descriptors is end-of-file: every peer socket is closed.
///
/// A non-blocking end-of-file is confirmed by a second look. The kernel
/// decides it by checking the queue and then the peer's shutdown, not
/// atomically: a peer that sends its last datagram and closes between the
/// two checks reads as end-of-file with the datagram still queued (a
/// send-once reply was lost that way as `SendOnceDropped`). The datagram was
/// queued before the shutdown could be seen, so the second receive finds it
/// if there is one.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8], wait: bool) -> rustix::io::Result<Datagram> {
    match recv_once(sock, buf, wait)? {
        dg if dg.is_eof() && !wait => recv_once(sock, buf, false),
        dg => Ok(dg),
    }
}

/// Room for the control messages of one datagram: the most descriptors
/// the kernel passes, and the sender's credentials.
const CONTROL_LEN: usize = rustix::cmsg_space!(ScmRights(MAX_FDS), ScmCredentials(1));

/// A control buffer aligned for `cmsghdr`. It is never initialised: the
/// kernel writes the control messages, and only what it says it wrote is
/// read.
#[repr(C)]
struct Control {
    _align: [libc::cmsghdr; 0],
    bytes: [MaybeUninit<u8>; CONTROL_LEN],
}

/// One `recvmsg(2)` without the sender's address: the kernel would copy
/// the peer's name out on every datagram (a socket passing credentials is
/// bound to one), and nothing here reads it.
fn recv_once(sock: BorrowedFd<'_>, buf: &mut [u8], wait: bool) -> rustix::io::Result<Datagram> {
    let mut control = Control { _align: [], bytes: [MaybeUninit::uninit(); CONTROL_LEN] };
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: `msghdr` is plain data for which all zeroes is a valid value
    // (no name, no buffers, no flags).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_LEN as _;
    let mut flags = libc::MSG_CMSG_CLOEXEC;
    if !wait {
        flags |= libc::MSG_DONTWAIT;
    }
    // The C library's `recvmsg` reports failure through `errno`, which
    // belongs to the program: a program served by the emulation library
    // calls in here from its own `read`, and a receive that found nothing
    // must leave its `errno` as it was (rustix, used everywhere else here,
    // never touches it).
    // SAFETY: `__errno_location` gives this thread's `errno`, valid for as
    // long as the thread lives; `msg` points to one iovec over `buf` and to
    // `control`, both live and writable for their whole stated lengths
    // during the call; the descriptor is borrowed and valid for it.
    let (got, failed) = unsafe {
        let errno = libc::__errno_location();
        let kept = *errno;
        let got = libc::recvmsg(sock.as_raw_fd(), &mut msg, flags);
        let failed = *errno;
        *errno = kept;
        (got, failed)
    };
    if got < 0 {
        return Err(Errno::from_raw_os_error(failed));
    }
    let mut fds = Vec::new();
    let mut cred = None;
    // SAFETY: the kernel wrote `msg.msg_controllen` bytes of well-formed
    // control messages at the start of `control` (the CMSG macros stay
    // within that length, and `control` is aligned for `cmsghdr`). Each
    // descriptor in an `SCM_RIGHTS` message was just installed in this
    // process for us alone, so it becomes an `OwnedFd` at once, exactly
    // once; data are read unaligned as the kernel lays them out.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let len = ((*c).cmsg_len as usize).saturating_sub(data.offset_from(c.cast::<u8>()) as usize);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    let n = len / std::mem::size_of::<libc::c_int>();
                    fds.reserve_exact(n);
                    for i in 0..n {
                        let fd = data.cast::<libc::c_int>().add(i).read_unaligned();
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) if len >= std::mem::size_of::<libc::ucred>() => {
                    let u = data.cast::<libc::ucred>().read_unaligned();
                    cred = Some(Cred { pid: u.pid, uid: u.uid, gid: u.gid });
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let got = got as usize;
    Ok(Datagram {
        len: got.min(buf.len()),
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        fds_truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
        fds,
        cred,
    })
}

/// Sets the kernel's send-buffer size of a socket (the byte bound of the
/// queue that all holders of this socket share). Uses the privileged variant
/// when the caller may exceed `net.core.wmem_max`.
pub fn set_send_buffer(sock: BorrowedFd<'_>, bytes: usize) -> rustix::io::Result<()> {
    match net::sockopt::set_socket_send_buffer_size_force(sock, bytes) {
        Ok(()) => Ok(()),
        Err(Errno::PERM) => net::sockopt::set_socket_send_buffer_size(sock, bytes),
        Err(e) => Err(e),
    }
}

/// Sets how long a blocking receive on `sock` may wait before it fails with
/// `EAGAIN` (`SO_RCVTIMEO`); `None` lets it wait without bound. The kernel
/// rounds the time up to whole clock ticks and its timer wheel may fire
/// later still, never sooner.
pub fn set_recv_timeout(sock: BorrowedFd<'_>, wait: Option<std::time::Duration>) -> rustix::io::Result<()> {
    net::sockopt::set_socket_timeout(sock, net::sockopt::Timeout::Recv, wait)
}

/// The kernel's send-buffer size of a socket, as it reports it (doubled for
/// bookkeeping).
pub fn send_buffer(sock: BorrowedFd<'_>) -> rustix::io::Result<usize> {
    net::sockopt::socket_send_buffer_size(sock)
}

/// Bytes sent on this socket and not yet received by the peer (`SIOCOUTQ`),
/// counted as the kernel charges them (each datagram costs its buffer's size).
pub fn queued_bytes(sock: BorrowedFd<'_>) -> rustix::io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one c_int through the pointer, which points to a
    // live, properly aligned c_int; the fd is borrowed and valid for the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if rc < 0 {
        return Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
    }
    Ok(n.max(0) as usize)
}

/// Credentials of the process that created the other end of a connected
/// socket (`SO_PEERCRED`).
pub fn peer_cred(sock: BorrowedFd<'_>) -> rustix::io::Result<Cred> {
    net::sockopt::socket_peercred(sock).map(Cred::from)
}

/// Supplementary groups of the process that created the other end of a
/// connected socket (`SO_PEERGROUPS`), as they were when it did.
pub fn peer_groups(sock: BorrowedFd<'_>) -> rustix::io::Result<Vec<u32>> {
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<u32>()) as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `groups`, and
        // says in `len` how many it wrote (or, with ERANGE, would need).
        let rc = unsafe { libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERGROUPS, groups.as_mut_ptr().cast(), &mut len) };
        let n = len as usize / std::mem::size_of::<u32>();
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if err != libc::ERANGE || n <= groups.len() || n > 65536 {
            return Err(Errno::from_raw_os_error(err));
        }
        groups.resize(n, 0);
    }
}

/// Binds a listening `SOCK_SEQPACKET` socket at `path`.
pub fn listen_at(path: &Path, backlog: i32) -> rustix::io::Result<OwnedFd> {
    let sock = net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    net::sockopt::set_socket_passcred(&sock, true)?;
    let addr = SocketAddrUnix::new(path)?;
    net::bind(&sock, &addr)?;
    net::listen(&sock, backlog)?;
    Ok(sock)
}

/// Accepts one connection from a listening socket, with credential passing on.
pub fn accept(listener: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    let s = net::accept_with(listener, SocketFlags::CLOEXEC)?;
    net::sockopt::set_socket_passcred(&s, true)?;
    Ok(s)
}

/// Connects a `SOCK_SEQPACKET` socket to `path`.
pub fn connect_to(path: &Path) -> rustix::io::Result<OwnedFd> {
    let sock = net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    net::sockopt::set_socket_passcred(&sock, true)?;
    let addr = SocketAddrUnix::new(path)?;
    net::connect(&sock, &addr)?;
    Ok(sock)
}

/// Identity of the kernel object behind a descriptor: (device, inode).
pub fn identity(fd: BorrowedFd<'_>) -> rustix::io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev as u64, st.st_ino as u64))
}

/// Whether `fd` refers to a socket of type `SOCK_SEQPACKET` in the Unix family.
pub fn is_unix_seqpacket(fd: BorrowedFd<'_>) -> bool {
    matches!(net::sockopt::socket_type(fd), Ok(SocketType::SEQPACKET))
        && matches!(net::sockopt::socket_domain(fd), Ok(AddressFamily::UNIX))
}

/// Duplicates a descriptor (close-on-exec).
pub fn dup(fd: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
}

/// Binds a listening `SOCK_SEQPACKET` socket at `path` whose file has
/// permission bits `mode` from the moment it appears there: it is bound
/// under a temporary name in the same directory, given its mode, and then
/// renamed into place, so no client ever finds it with other permissions.
pub fn listen_at_mode(path: &Path, backlog: i32, mode: u32) -> rustix::io::Result<OwnedFd> {
    let name = path.file_name().ok_or(Errno::INVAL)?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.new", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = rustix::fs::unlink(&tmp);
    let sock = listen_at(&tmp, backlog)?;
    let placed = rustix::fs::chmod(&tmp, rustix::fs::Mode::from_raw_mode(mode)).and_then(|()| rustix::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = rustix::fs::unlink(&tmp);
        return Err(e);
    }
    Ok(sock)
}
