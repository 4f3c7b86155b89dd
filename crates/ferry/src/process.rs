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
//! Handing the process a port: Linux has no call that puts a descriptor
//! into another process, so a port is handed the way `fork`/`exec` hand
//! one, by inheritance ([`crate::spawn`]), or by the process taking it
//! from its holder (the holder keeps it at a descriptor the process may
//! take with [`ProcessPort::take_right`] on a port to the holder). The
//! emulation server (`crate::emulation`) uses process ports to learn that
//! a token holder died.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags};

use crate::error::io_err;
use crate::port::SendRight;
use crate::sys::socket;

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
