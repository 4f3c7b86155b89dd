//! Starting a child process that inherits a send right: the child's first
//! ferry connection, with no name service and no environment to set up by
//! hand.
//!
//! The parent adds a send right to a [`Command`] with
//! [`CommandExt::pass_right`]; the child, spawned from that command, takes it
//! with [`inherited`]. The right travels as descriptor [`INHERITED_FD`]
//! (3, the first after standard input, output and error), announced in the
//! child's environment as `FERRY_INHERITED_FD=3`; the parent's own
//! environment is never changed. Pass a right to a port of the parent and
//! the child can send it anything else (its own send rights, a region, a
//! name server's right) in messages; pass the right of a private name
//! server to give a whole family of processes one name space.
//!
//! ```no_run
//! use std::process::Command;
//! use ferry::spawn::CommandExt;
//! use ferry::{Message, Timeout};
//!
//! // In the parent:
//! let (mut from_child, to_parent) = ferry::port()?;
//! let mut child = Command::new("my-worker").pass_right(&to_parent)?.spawn()?;
//! drop(to_parent); // the child holds the only send right now
//! let hello = from_child.recv(Timeout::Infinite)?;
//!
//! // In the child (`my-worker`):
//! let parent = ferry::spawn::inherited()?;
//! parent.send(Message::new(1).with_body(*b"ready"), Timeout::Infinite)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::io;
use std::os::fd::{AsFd, RawFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::io_err;
use crate::port::SendRight;
use crate::sys::{socket, spawn};

/// The descriptor number the passed send right has in the child.
pub const INHERITED_FD: RawFd = 3;

/// The environment variable that tells the child the right is there, and
/// at which descriptor.
pub const INHERITED_ENV: &str = "FERRY_INHERITED_FD";

/// Adds [`pass_right`](CommandExt::pass_right) to [`std::process::Command`].
pub trait CommandExt {
    /// Passes a copy of `right` to every child spawned from this command,
    /// as descriptor [`INHERITED_FD`] (whatever the child had there is
    /// replaced), and announces it in the child's environment. The child
    /// takes it with [`inherited`]. The copy is made now; the command
    /// holds it until the command is dropped.
    ///
    /// # Errors
    /// When the kernel refuses to duplicate the descriptor.
    fn pass_right(&mut self, right: &SendRight) -> io::Result<&mut Command>;
}

impl CommandExt for Command {
    fn pass_right(&mut self, right: &SendRight) -> io::Result<&mut Command> {
        let copy = socket::dup(right.as_fd()).map_err(io_err)?;
        spawn::inherit_at(self, copy, INHERITED_FD);
        Ok(self.env(INHERITED_ENV, INHERITED_FD.to_string()))
    }
}

/// Why [`inherited`] found no right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InheritError {
    /// This process was not started with a right (no `FERRY_INHERITED_FD`
    /// in its environment, or not a number).
    NotPassed,
    /// The announced descriptor is closed or is not a ferry port socket.
    NotARight(RawFd),
    /// The right was already taken by an earlier call.
    AlreadyTaken,
}

impl fmt::Display for InheritError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InheritError::NotPassed => {
                write!(f, "no send right was passed to this process (start it with ferry::spawn::CommandExt::pass_right)")
            }
            InheritError::NotARight(fd) => write!(f, "descriptor {fd} announced by {INHERITED_ENV} is not a ferry send right"),
            InheritError::AlreadyTaken => write!(f, "the inherited send right was already taken"),
        }
    }
}

impl std::error::Error for InheritError {}

static TAKEN: AtomicBool = AtomicBool::new(false);

/// Takes the send right the parent passed with
/// [`CommandExt::pass_right`]. It can be taken once; the descriptor is made
/// close-on-exec, so it does not leak further into this process's own
/// children.
///
/// # Errors
/// [`InheritError::NotPassed`] when the process was started without one;
/// [`InheritError::NotARight`] when the announced descriptor is closed or
/// is not a ferry port socket (it is then left alone);
/// [`InheritError::AlreadyTaken`] on a second call.
pub fn inherited() -> Result<SendRight, InheritError> {
    let fd: RawFd = std::env::var(INHERITED_ENV).ok().and_then(|v| v.parse().ok()).ok_or(InheritError::NotPassed)?;
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Err(InheritError::AlreadyTaken);
    }
    match spawn::take_inherited(fd, socket::is_unix_seqpacket) {
        Some(owned) => Ok(SendRight::from_fd(owned)),
        None => {
            TAKEN.store(false, Ordering::SeqCst);
            Err(InheritError::NotARight(fd))
        }
    }
}

/// Whether no one but this user (by effective uid) and root may change
/// the file at `path` or what that name leads to: the file, every
/// directory on its way, and every symbolic link followed on the way are
/// this user's or root's, the file is not writable by group or others, and
/// neither is a directory unless it is sticky (where no one may replace
/// another's entry). A program or library found by where the running
/// program is (beside it, a directory up, `../lib`) or on `PATH`, rather
/// than named by its user, is run or loaded only then: a program run by
/// root from a directory of its own inside one every user may write to
/// (`$TMPDIR/build/prog`) looked one directory up, and ran or preloaded
/// another user's file there as root; and a link of another user's in a
/// sticky directory (`$TMPDIR/ferryd`) may lead to any program at all.
pub fn nobody_else_controls(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let ours = |m: &std::fs::Metadata| m.uid() == me || m.uid() == 0;
    let Ok(cwd) = std::env::current_dir() else { return false };
    let given = cwd.join(path);
    let Ok(real) = std::fs::canonicalize(&given) else { return false };
    // Each link on the way as written (a link's own mode means nothing:
    // whoever owns it may point it elsewhere).
    let links_ours = given.ancestors().all(|p| std::fs::symlink_metadata(p).map_or(true, |m| !m.file_type().is_symlink() || ours(&m)));
    // The file and each directory on its real way.
    let file_ours = std::fs::metadata(&real).is_ok_and(|m| ours(&m) && m.mode() & 0o022 == 0);
    let dirs_ours = real.ancestors().skip(1).all(|d| {
        std::fs::metadata(d).is_ok_and(|m| ours(&m) && (m.mode() & 0o022 == 0 || m.mode() & 0o1000 != 0))
    });
    links_ours && file_ours && dirs_ours
}
