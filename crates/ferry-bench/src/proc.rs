//! The other side of a benchmark, in a real second process.
//!
//! [`Peer::spawn`] forks the (single-threaded) benchmark process. The child
//! pins itself, asks to be killed if the parent dies, runs only the closure
//! it was given (the benchmark loop) and leaves with `_exit`; the parent
//! drops its copy of the closure, so each process holds only its own ends of
//! the pipes and sockets the closure captured, and a crash on one side shows
//! up as end-of-file or `EPIPE` on the other instead of a hang. Why the fork
//! is sound is written in `sys` (one thread at fork time, `_exit` in the
//! child). A [`Peer`] that is dropped without [`Peer::wait`] is killed and
//! reaped, so no benchmark leaves processes behind.

use std::io;
use std::os::fd::BorrowedFd;

use rustix::process::{kill_process, waitpid, Pid, Signal, WaitOptions};

use crate::pin;
use crate::sys;

/// A child process running one side of a benchmark.
#[derive(Debug)]
pub struct Peer {
    pid: Option<Pid>,
}

impl Peer {
    /// Forks a child that closes its copies of `parent_ends` (so that the
    /// parent dropping them reads as end-of-file there), pins itself to `cpu`
    /// (if given), runs `body` and exits with status 0 if it returned `Ok`, 1
    /// (after printing the error to stderr) otherwise.
    pub fn spawn<F>(cpu: Option<usize>, parent_ends: &[BorrowedFd<'_>], body: F) -> io::Result<Peer>
    where
        F: FnOnce() -> io::Result<()>,
    {
        let parent = rustix::process::getpid();
        let pid = sys::fork_run(parent_ends, move || {
            let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
            if rustix::process::getppid() != Some(parent) {
                return 1;
            }
            if let Some(c) = cpu {
                if let Err(e) = pin::pin_to(c) {
                    eprintln!("ferry bench: peer cannot pin itself to CPU {c}: {e}");
                    return 1;
                }
            }
            match body() {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("ferry bench: peer failed: {e}");
                    1
                }
            }
        })?;
        Ok(Peer { pid: Some(pid) })
    }

    /// The child's pid.
    pub fn pid(&self) -> Pid {
        self.pid.expect("a live Peer has a pid")
    }

    /// Waits for the child to exit.
    ///
    /// # Errors
    /// When it exited with a non-zero status or was killed by a signal.
    pub fn wait(mut self) -> io::Result<()> {
        let pid = self.pid.take().expect("a live Peer has a pid");
        let (_, status) = waitpid(Some(pid), WaitOptions::empty())?.ok_or_else(|| io::Error::other("waitpid returned nothing"))?;
        match (status.exit_status(), status.terminating_signal()) {
            (Some(0), _) => Ok(()),
            (Some(c), _) => Err(io::Error::other(format!("peer process exited with status {c}"))),
            (None, Some(s)) => Err(io::Error::other(format!("peer process was killed by signal {s}"))),
            _ => Err(io::Error::other("peer process ended abnormally")),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = kill_process(pid, Signal::KILL);
            let _ = waitpid(Some(pid), WaitOptions::empty());
        }
    }
}
