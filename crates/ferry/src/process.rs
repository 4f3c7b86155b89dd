//! Process ports: a right to a process, built on a Linux `pidfd` (Accent's
//! kernel port, Mach's task port).
//!
//! A [`ProcessPort`] names one process for as long as the port lives: the
//! `pidfd` keeps naming it even after its pid is reused, so a check made
//! through the port never reaches a stranger. Through it the holder learns
//! of the process's death ([`ProcessPort::is_dead`], or by waiting on its
//! descriptor), reads and writes its memory (`process_vm_readv` and
//! `process_vm_writev`, which the kernel allows only to a holder that may
//! ptrace the process: same user and not setuid, or `CAP_SYS_PTRACE`), and
//! takes a descriptor from it (`pidfd_getfd`, under the same check).
//!
//! Handing the process a port: Linux has one call that places a
//! descriptor into another process, the answer of a seccomp supervisor to
//! a system call it trapped (`SECCOMP_IOCTL_NOTIF_ADDFD`). A process
//! started with [`spawn_with_hand_off`] runs under a filter that traps one
//! marker call and nothing else; its holder's [`HandOff`] answers that
//! call with a send right, which [`handed_right`] returns in the process.
//! `ferry run` hands the emulated program its file server this way. A port
//! can also be handed by inheritance ([`crate::spawn`]), or taken from its
//! holder ([`ProcessPort::take_right`]). The emulation server
//! (`crate::emulation`) uses process ports to learn that a token holder
//! died.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags};

use crate::error::io_err;
use crate::port::SendRight;
use crate::sys::socket;
use crate::timeout::Timeout;

/// A right to one process, through its `pidfd`.
#[derive(Debug)]
pub struct ProcessPort {
    pid: i32,
    fd: OwnedFd,
}

impl ProcessPort {
    /// A port to the process `pid`, as it is now.
    ///
    /// # Errors
    /// `ESRCH` when no such process exists (a process that has exited but
    /// was not yet reaped still gets a port, which reports it dead).
    pub fn open(pid: i32) -> io::Result<ProcessPort> {
        let p = Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        let fd = rustix::process::pidfd_open(p, PidfdFlags::empty()).map_err(io_err)?;
        Ok(ProcessPort { pid, fd })
    }

    /// A port to this process.
    pub fn this() -> io::Result<ProcessPort> {
        ProcessPort::open(std::process::id() as i32)
    }

    /// The process id (as seen in the namespace the port was made in).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the process has exited (it may not be reaped yet).
    pub fn is_dead(&self) -> bool {
        crate::sys::process::exited(self.fd.as_fd(), 0).unwrap_or(true)
    }

    /// Waits at most `timeout_ms` milliseconds for the process to exit;
    /// returns whether it has.
    pub fn wait_dead(&self, timeout_ms: i32) -> bool {
        crate::sys::process::exited(self.fd.as_fd(), timeout_ms).unwrap_or(true)
    }

    /// Copies `buf.len()` bytes of the process's memory from `addr`.
    ///
    /// # Errors
    /// `EPERM` when the kernel does not let this process inspect it (see
    /// the module documentation), `EFAULT` when the range is not mapped
    /// there, `ESRCH` when it is gone.
    pub fn read_memory(&self, addr: usize, buf: &mut [u8]) -> io::Result<usize> {
        crate::sys::process::vm_read(self.pid, addr, buf).map_err(io_err)
    }

    /// Writes `data` into the process's memory at `addr` (under the same
    /// check as [`ProcessPort::read_memory`]).
    pub fn write_memory(&self, addr: usize, data: &[u8]) -> io::Result<usize> {
        crate::sys::process::vm_write(self.pid, addr, data).map_err(io_err)
    }

    /// Takes a copy of the process's descriptor `fd`, if it is a ferry send
    /// right (any other kind of descriptor is closed and refused with
    /// `EBADF`). The kernel allows this only to a holder that may ptrace
    /// the process.
    pub fn take_right(&self, fd: RawFd) -> io::Result<SendRight> {
        let copy = rustix::process::pidfd_getfd(self.fd.as_fd(), fd, PidfdGetfdFlags::empty()).map_err(io_err)?;
        if !socket::is_unix_seqpacket(copy.as_fd()) {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Ok(SendRight::from_fd(copy))
    }
}

impl AsFd for ProcessPort {
    /// The `pidfd`: readable once the process has exited.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The holder's side of the hand-off: the supervisor of the filter a
/// process started with [`spawn_with_hand_off`] runs under, through which
/// its holder hands that process (and any process it starts) send rights.
///
/// Only the marker call of [`handed_right`] is trapped: every other system
/// call of the process runs as it would without the filter. The filter
/// sets `no_new_privs` on the process, so set-user-ID programs it starts
/// do not gain privileges. When the `HandOff` is dropped, later marker
/// calls fail and [`handed_right`] reports an error.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[derive(Debug)]
pub struct HandOff {
    listener: OwnedFd,
}

/// Starts `cmd` under the hand-off filter and returns the child, a process
/// port to it, and the [`HandOff`] that answers its requests.
///
/// # Errors
/// What starting the command gives (the filter is installed in the child
/// before `exec`; a kernel without seccomp user notification fails the
/// start with its error).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn spawn_with_hand_off(cmd: &mut std::process::Command) -> io::Result<(std::process::Child, ProcessPort, HandOff)> {
    let (child, listener) = crate::sys::seccomp::spawn_filtered(cmd)?;
    let port = ProcessPort::open(child.id() as i32)?;
    Ok((child, port, HandOff { listener }))
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl HandOff {
    /// Waits, as `timeout` allows, for one process under the filter to ask
    /// ([`handed_right`]), and answers it with a copy of `right`. Returns
    /// the pid of the process answered, or `None` when nobody asked in
    /// time (or the asker died before the answer).
    ///
    /// # Errors
    /// What the kernel gives for the listener (a process tree that has
    /// all exited leaves it readable and failing with `ENOENT`, reported
    /// as `None`).
    pub fn hand(&self, right: &SendRight, timeout: Timeout) -> io::Result<Option<u32>> {
        let deadline = timeout.deadline();
        let ready = crate::sys::wait::poll_one(self.listener.as_fd(), crate::sys::wait::Interest::Readable, deadline).map_err(io_err)?;
        if ready.hangup && !ready.readable {
            return Ok(None);
        }
        if !ready.readable {
            return Ok(None);
        }
        let req = match crate::sys::seccomp::receive(self.listener.as_fd()) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
        if !crate::sys::seccomp::still_waiting(self.listener.as_fd(), req.id) {
            return Ok(None);
        }
        match crate::sys::seccomp::hand_fd(self.listener.as_fd(), &req, right.as_fd()) {
            Ok(_) => Ok(Some(req.pid)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => {
                crate::sys::seccomp::refuse(self.listener.as_fd(), req.id, e.raw_os_error().unwrap_or(libc::EIO));
                Err(e)
            }
        }
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl AsFd for HandOff {
    /// The seccomp listener: readable when a process asks.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

/// In a process started with [`spawn_with_hand_off`]: asks its holder for
/// a send right and waits for it. `None` when this process runs under no
/// hand-off filter (nobody would answer).
///
/// # Errors
/// `ENOSYS` when the filter's holder is gone; `EBADF` (with the descriptor
/// closed) if what arrived is not a send right.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn handed_right() -> io::Result<Option<SendRight>> {
    handed_right_at(None, true)
}

/// [`handed_right`], placing the right at descriptor `want` when that
/// number is free (the holder chooses otherwise), close-on-exec or not.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn handed_right_at(want: Option<RawFd>, cloexec: bool) -> io::Result<Option<SendRight>> {
    let Some(fd) = crate::sys::seccomp::ask_for_fd(want, cloexec)? else { return Ok(None) };
    if !socket::is_unix_seqpacket(fd.as_fd()) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    Ok(Some(SendRight::from_fd(fd)))
}

/// Stands between `child` and whoever signals this process, as a
/// supervisor such as `ferry run` must: hang-up, interrupt, quit,
/// termination, `SIGUSR1`, `SIGUSR2`, `SIGALRM` and a window change sent
/// to this process are passed on to the child, so that a signal meant for
/// the program neither kills this process and leaves the program running
/// nor is lost. Interrupt, quit and a window change from the terminal
/// reach the child directly (it is in the terminal's process group) and
/// are not passed again. Call it with 0 before starting the child (a
/// signal that comes meanwhile is kept, and passed on when it is called
/// again with the child's pid after the child started) or only after.
pub fn pass_signals_to(child: i32) {
    crate::sys::process::pass_signals_to(child);
}
