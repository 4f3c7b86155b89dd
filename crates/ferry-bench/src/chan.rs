//! Small building blocks the baselines share: whole reads and writes on
//! descriptors, one-byte tokens, descriptor passing, and futex hand-offs on
//! shared words.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::io::Errno;
use rustix::net::{self, AddressFamily, SocketFlags, SocketType};
use rustix::thread::futex;

/// Writes all of `buf`, retrying on short writes and interruptions.
pub fn write_all(fd: impl AsFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(&fd, buf) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => buf = &buf[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Fills all of `buf`; `Ok(false)` on end-of-file before the first byte
/// (the peer is done), an error on end-of-file in the middle.
pub fn read_exact(fd: impl AsFd, buf: &mut [u8]) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match rustix::io::read(&fd, &mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => at += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// Reads one datagram (or up to `buf.len()` stream bytes); returns its
/// length, 0 meaning end-of-file.
pub fn read_some(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::io::read(&fd, &mut *buf) {
            Err(Errno::INTR) => {}
            r => return r.map_err(Into::into),
        }
    }
}

/// A connected pair of plain `SOCK_SEQPACKET` sockets (no credential
/// passing): the raw kernel object ferry's ports are built on.
pub fn seqpacket() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?)
}

/// A connected pair of `SOCK_SEQPACKET` sockets with `SO_PASSCRED` on both
/// ends, as every ferry port's sockets are: the kernel attaches the
/// sender's pid, uid and gid to each datagram.
pub fn seqpacket_with_credentials() -> io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = seqpacket()?;
    net::sockopt::set_socket_passcred(&a, true)?;
    net::sockopt::set_socket_passcred(&b, true)?;
    Ok((a, b))
}

/// Sends one datagram with `send(2)` (no ancillary data), as a port sends a
/// message that carries no rights.
pub fn send_datagram(fd: impl AsFd, buf: &[u8]) -> io::Result<()> {
    loop {
        match net::send(&fd, buf, net::SendFlags::NOSIGNAL) {
            Err(Errno::INTR) => {}
            Ok(n) if n == buf.len() => return Ok(()),
            Ok(n) => return Err(io::Error::other(format!("a datagram of {} bytes went out as {n}", buf.len()))),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one datagram with `recvmsg(2)` and a control buffer with room
/// for the descriptors one datagram can carry and the sender's credentials,
/// as a port receives; returns its length and the credentials' uid.
/// Descriptors that arrive are closed.
pub fn recv_with_credentials(fd: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<u32>)> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(ferry::message::MAX_FDS), ScmCredentials(1))];
    loop {
        let mut control = net::RecvAncillaryBuffer::new(&mut space);
        let mut iov = [io::IoSliceMut::new(&mut *buf)];
        match net::recvmsg(&fd, &mut iov, &mut control, net::RecvFlags::CMSG_CLOEXEC) {
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
            Ok(got) => {
                let mut uid = None;
                for msg in control.drain() {
                    match msg {
                        net::RecvAncillaryMessage::ScmCredentials(c) => uid = Some(c.uid.as_raw()),
                        net::RecvAncillaryMessage::ScmRights(fds) => fds.for_each(drop),
                        _ => {}
                    }
                }
                return Ok((got.bytes, uid));
            }
        }
    }
}

/// A connected pair of `SOCK_STREAM` Unix sockets.
pub fn stream() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(net::socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?)
}

/// A pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Sends one token byte.
pub fn token(fd: impl AsFd) -> io::Result<()> {
    write_all(fd, &[1])
}

/// Waits for one token byte; `Ok(false)` on end-of-file.
pub fn wait_token(fd: impl AsFd) -> io::Result<bool> {
    read_exact(fd, &mut [0u8])
}

/// Sends `data` and one descriptor over a Unix socket (`SCM_RIGHTS`).
pub fn send_fd(sock: impl AsFd, data: &[u8], fd: impl AsFd) -> io::Result<()> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = net::SendAncillaryBuffer::new(&mut space);
    let fds = [fd.as_fd()];
    if !control.push(net::SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("control buffer too small for one descriptor"));
    }
    net::sendmsg(sock, &[io::IoSlice::new(data)], &mut control, net::SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Receives a datagram with one descriptor; `Ok(None)` on end-of-file.
pub fn recv_fd(sock: impl AsFd, data: &mut [u8]) -> io::Result<Option<OwnedFd>> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = net::RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(data)];
    let got = net::recvmsg(sock, &mut iov, &mut control, net::RecvFlags::CMSG_CLOEXEC)?;
    let mut fd = None;
    for m in control.drain() {
        if let net::RecvAncillaryMessage::ScmRights(mut it) = m {
            fd = it.next();
        }
    }
    if got.bytes == 0 && fd.is_none() {
        return Ok(None);
    }
    fd.map(Some).ok_or_else(|| io::Error::other("message arrived without its descriptor"))
}

/// Waits (sleeping in the kernel) until `word` holds `want`.
pub fn futex_wait_for(word: &AtomicU32, want: u32) {
    loop {
        let cur = word.load(Ordering::Acquire);
        if cur == want {
            return;
        }
        // EAGAIN (the value changed) and EINTR just mean: look again.
        let _ = futex::wait(word, futex::Flags::empty(), cur, None);
    }
}

/// Stores `value` in `word` and wakes a waiter.
pub fn futex_set(word: &AtomicU32, value: u32) {
    word.store(value, Ordering::Release);
    let _ = futex::wake(word, futex::Flags::empty(), 1);
}

/// Spins (never sleeping) until `word` holds `want`.
pub fn spin_wait_for(word: &AtomicU32, want: u32) {
    while word.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
    }
}
