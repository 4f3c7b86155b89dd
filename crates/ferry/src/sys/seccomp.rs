//! Handing a process a descriptor with seccomp user notification.
//!
//! Linux has one call that puts a descriptor into another process:
//! `SECCOMP_IOCTL_NOTIF_ADDFD`, by which the supervisor of a seccomp filter
//! answers a system call it trapped in the filtered process with a new
//! descriptor there. ferry's filter traps exactly one **marker call**,
//! `ioctl(-1, MARKER, want_fd, cloexec)` (a call the kernel would refuse
//! with `EBADF` anyway), and allows every other system call untouched; the
//! supervisor answers the marker with the descriptor it hands over. Without
//! a filter the marker fails with `EBADF`, which tells the caller that no
//! holder hands it anything.
//!
//! Installing a filter needs `no_new_privs` (or `CAP_SYS_ADMIN`): a program
//! started this way, and everything it starts, cannot gain privileges
//! through set-user-ID programs. The filter and `no_new_privs` last for
//! the process and its descendants.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The `ioctl` request number of the marker call ("FRRY").
pub const MARKER: u32 = 0x4652_5259;

/// `AUDIT_ARCH_X86_64` (`linux/audit.h`: `EM_X86_64 | 64BIT | LE`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
/// `AUDIT_ARCH_AARCH64` (`linux/audit.h`: `EM_AARCH64 | 64BIT | LE`).
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Offsets into `struct seccomp_data` (`linux/seccomp.h`).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// The low 32 bits of argument `i` (little-endian).
const fn off_arg_lo(i: u32) -> u32 {
    16 + 8 * i
}

/// Instructions in [`filter`].
pub const FILTER_LEN: usize = 10;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

/// A comparison that falls through when equal and jumps `jf` instructions
/// ahead when not.
fn jeq(k: u32, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16, jt: 0, jf, k }
}

/// The filter: the marker call goes to the supervisor, everything else
/// (including every other `ioctl`, and every call of another
/// architecture's ABI) is allowed.
pub fn filter() -> [libc::sock_filter; FILTER_LEN] {
    const LD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const RET: u32 = libc::BPF_RET | libc::BPF_K;
    // Each failed comparison jumps to the last instruction, "allow".
    [
        stmt(LD, OFF_ARCH),
        jeq(AUDIT_ARCH, 7),
        stmt(LD, OFF_NR),
        jeq(libc::SYS_ioctl as u32, 5),
        stmt(LD, off_arg_lo(1)),
        jeq(MARKER, 3),
        stmt(LD, off_arg_lo(0)),
        jeq(u32::MAX, 1),
        stmt(RET, libc::SECCOMP_RET_USER_NOTIF),
        stmt(RET, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Starts `cmd` with [`filter`] installed in the child before `exec`, and
/// returns the child and the filter's listener.
pub fn spawn_filtered(cmd: &mut std::process::Command) -> io::Result<(std::process::Child, OwnedFd)> {
    use std::os::unix::process::CommandExt as _;
    let (mine, theirs) = super::socket::seqpacket_pair().map_err(io::Error::from)?;
    let prog = filter();
    let raw = theirs.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe system calls (prctl, seccomp, sendmsg, close),
    // from stack buffers, allocating nothing and taking no lock.
    unsafe {
        cmd.pre_exec(move || install_and_send_listener(&prog, raw));
    }
    let child = cmd.spawn()?;
    drop(theirs);
    // The child sent the listener before its exec, which `spawn` waited
    // for: it is queued already.
    let mut buf = [0u8; 8];
    let got = super::socket::recv(mine.as_fd(), &mut buf, true).map_err(io::Error::from)?;
    match got.fds.into_iter().next() {
        Some(listener) => Ok((child, listener)),
        None => Err(io::Error::other("the child sent no seccomp listener")),
    }
}

/// Installs `filter` on the calling thread (and what it execs) with a new
/// listener, and sends the listener over `sock` (`SCM_RIGHTS`), then
/// closes it. Only async-signal-safe calls and no allocation: this runs in
/// a forked child before `exec`.
pub fn install_and_send_listener(filter: &[libc::sock_filter; FILTER_LEN], sock: RawFd) -> io::Result<()> {
    // The filter above cannot trap the calls made after it is in place
    // here (sendmsg, close), nor those of exec.
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let prog = libc::sock_fprog { len: FILTER_LEN as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: `prog` points at `FILTER_LEN` instructions that outlive the
    // call (the kernel copies them).
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if listener < 0 {
        return Err(io::Error::last_os_error());
    }
    let listener = listener as RawFd;
    let r = send_fd(sock, listener);
    // SAFETY: closes the listener this function received from the kernel.
    unsafe { libc::close(listener) };
    r
}

/// Sends `fd` over `sock` with one byte of data, from stack buffers only.
fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    #[repr(C)]
    union Cmsg {
        buf: [u8; 64],
        _align: libc::cmsghdr,
    }
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut cmsg = Cmsg { buf: [0; 64] };
    // SAFETY: CMSG_SPACE/CMSG_LEN compute sizes only.
    let (space, len) = unsafe { (libc::CMSG_SPACE(4) as usize, libc::CMSG_LEN(4) as usize) };
    // SAFETY: a zeroed msghdr is valid; its pointers are set below to
    // buffers on this stack frame that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: writing the union's byte view.
    msg.msg_control = unsafe { cmsg.buf.as_mut_ptr().cast() };
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer holds one header of `space` <= 64 bytes;
    // CMSG_FIRSTHDR points into it and CMSG_DATA at its 4 data bytes.
    unsafe {
        let h = libc::CMSG_FIRSTHDR(&msg);
        (*h).cmsg_level = libc::SOL_SOCKET;
        (*h).cmsg_type = libc::SCM_RIGHTS;
        (*h).cmsg_len = len as _;
        std::ptr::copy_nonoverlapping(fd.to_ne_bytes().as_ptr(), libc::CMSG_DATA(h), 4);
    }
    // SAFETY: `msg` and everything it points at are valid for the call.
    if unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) } != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One trapped marker call.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// The notification's id, for the answer.
    pub id: u64,
    /// The caller's pid (in the supervisor's pid namespace).
    pub pid: u32,
    /// The descriptor number the caller wants the right at (`-1`: any).
    pub want_fd: i32,
    /// Whether the caller wants it close-on-exec.
    pub cloexec: bool,
}

/// Receives one notification from `listener` (which must be readable, or
/// this blocks). Notifications that are not the marker call (impossible
/// with [`filter`], but answered anyway) get `ENOSYS` and `None`.
pub fn receive(listener: BorrowedFd<'_>) -> io::Result<Option<Request>> {
    // SAFETY: the kernel requires a zeroed struct; it fills it.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `n` is a valid seccomp_notif for the ioctl to fill.
    if unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut n) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let marker = n.data.nr == libc::SYS_ioctl as i32 && n.data.args[1] as u32 == MARKER && n.data.args[0] as u32 == u32::MAX;
    if !marker {
        refuse(listener, n.id, libc::ENOSYS);
        return Ok(None);
    }
    Ok(Some(Request { id: n.id, pid: n.pid, want_fd: n.data.args[2] as i32, cloexec: n.data.args[3] != 0 }))
}

/// Answers request `id` with a failure `errno` (best effort: a caller that
/// died meanwhile needs no answer).
pub fn refuse(listener: BorrowedFd<'_>, id: u64, errno: i32) {
    let resp = libc::seccomp_notif_resp { id, val: 0, error: -errno, flags: 0 };
    // SAFETY: `resp` is a valid seccomp_notif_resp.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND as _, &resp) };
}

/// Whether request `id` still waits for its answer (its caller is alive
/// and still in the call).
pub fn still_waiting(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: reads `id` only.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &id) == 0 }
}

/// Answers request `req` by placing a copy of `fd` in the caller (at the
/// number it asked for when it can, else at its lowest free number); the
/// caller's marker call returns the number. Returns it too.
pub fn hand_fd(listener: BorrowedFd<'_>, req: &Request, fd: BorrowedFd<'_>) -> io::Result<i32> {
    let newfd_flags = if req.cloexec { libc::O_CLOEXEC as u32 } else { 0 };
    let mut add = libc::seccomp_notif_addfd {
        id: req.id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags,
    };
    if (3..1 << 20).contains(&req.want_fd) {
        add.flags |= libc::SECCOMP_ADDFD_FLAG_SETFD as u32;
        add.newfd = req.want_fd as u32;
        // SAFETY: `add` is a valid seccomp_notif_addfd.
        let r = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD as _, &add) };
        if r >= 0 {
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            return Err(e);
        }
        add.flags = libc::SECCOMP_ADDFD_FLAG_SEND as u32;
        add.newfd = 0;
    }
    // SAFETY: `add` is a valid seccomp_notif_addfd.
    let r = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD as _, &add) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// Makes the marker call: the descriptor a supervisor placed in this
/// process (at `want_fd` if it could), `None` when there is no filter
/// (`EBADF`, the kernel's own answer to `ioctl(-1, ...)`).
pub fn ask_for_fd(want_fd: Option<RawFd>, cloexec: bool) -> io::Result<Option<OwnedFd>> {
    // SAFETY: an ioctl on descriptor -1 touches no memory: the kernel
    // refuses it with EBADF unless the filter sends it to the supervisor.
    let r = unsafe { libc::syscall(libc::SYS_ioctl, -1 as libc::c_int, MARKER as libc::c_ulong, want_fd.unwrap_or(-1) as libc::c_long, cloexec as libc::c_long) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EBADF) { Ok(None) } else { Err(e) };
    }
    // SAFETY: the supervisor placed a new descriptor at `r` for this call;
    // nothing else owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(r as RawFd) }))
}
