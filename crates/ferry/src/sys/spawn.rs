//! Handing a descriptor to a child process at a fixed number, and taking
//! it over in the child.
//!
//! # Safety
//! [`inherit_at`] installs a `pre_exec` hook: it runs in the child between
//! `fork` and `exec`, where only async-signal-safe calls are allowed; it
//! calls only `dup2` and `fcntl` and allocates nothing. The descriptor it
//! copies is owned by the hook itself, so it is open in the parent whenever
//! the command is spawned. [`take_inherited`] makes an `OwnedFd` of a
//! number only after the kernel confirmed it is open, and its caller makes
//! sure that happens at most once per process.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::io::{fcntl_setfd, FdFlags};

/// Makes `fd` appear in the child spawned by `cmd` as descriptor `target`,
/// without close-on-exec. Every spawn of `cmd` passes it.
pub fn inherit_at(cmd: &mut Command, fd: OwnedFd, target: RawFd) {
    let src = fd.as_raw_fd();
    let hook = move || -> io::Result<()> {
        // The hook owns `fd`, so `src` is open at every fork.
        let _owned = &fd;
        // SAFETY: plain system calls on descriptor numbers; `dup2` and
        // `fcntl` are async-signal-safe and touch no memory of ours.
        let rc = unsafe {
            if src == target {
                libc::fcntl(target, libc::F_SETFD, 0)
            } else {
                libc::dup2(src, target)
            }
        };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook is async-signal-safe (see above and the module's
    // safety section).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Takes ownership of descriptor `fd` if it is open and `is_ours` accepts
/// it (a descriptor refused is left alone, never closed), and marks it
/// close-on-exec so it goes no further. The caller guarantees nothing else
/// in the process owns it (it is taken once, from the number a parent
/// announced).
pub fn take_inherited(fd: RawFd, is_ours: impl FnOnce(BorrowedFd<'_>) -> bool) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: `fcntl(F_GETFD)` on a number reads its flags or fails with
    // EBADF; it touches no memory.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: open (checked just now), and borrowed only for the check.
    if !is_ours(unsafe { BorrowedFd::borrow_raw(fd) }) {
        return None;
    }
    // SAFETY: the descriptor is open (checked just now) and, by the
    // caller's guarantee, owned by nothing else in this process.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = fcntl_setfd(&owned, FdFlags::CLOEXEC);
    Some(owned)
}

/// Copies descriptor `fd`, if it is open and `is_ours` accepts it, to a
/// close-on-exec descriptor numbered `min` or above (or anywhere, when the
/// limit forbids): the original stays as it is, for the programs this
/// process starts in turn.
pub fn copy_inherited(fd: RawFd, min: RawFd, is_ours: impl FnOnce(BorrowedFd<'_>) -> bool) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: `fcntl(F_GETFD)` on a number reads its flags or fails with
    // EBADF; it touches no memory.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: open (checked just now), and borrowed only for the check and
    // the copy, during which nothing in this thread closes it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    if !is_ours(borrowed) {
        return None;
    }
    rustix::io::fcntl_dupfd_cloexec(borrowed, min).or_else(|_| rustix::io::fcntl_dupfd_cloexec(borrowed, 0)).ok()
}
