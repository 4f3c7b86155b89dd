//! A forked peer process that ping-pongs with the probe on a shared word,
//! by futex or by spinning, and the wait and signal steps both sides use.
//!
//! # Safety
//! The forked peer runs only code in this file that uses atomics in a
//! shared mapping and raw system calls (rustix's `linux_raw` backend): no
//! allocation, no locks, so forking a multi-threaded process is safe for it.
//! It ends with `_exit`, never returning into the parent's code.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions};
use rustix::thread::futex;
use rustix::time::Timespec;

use super::map::{now_ns, Map};

/// How a ping-pong waiter waits for its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Sleep in `futex_wait`; the other side wakes it with `futex_wake`.
    Futex,
    /// Poll the shared word; call `sched_yield` every `yield_every` polls.
    Spin {
        /// Polls between yields.
        yield_every: u32,
    },
}

/// Slots of the shared page used by the ping-pong.
pub const TURN: usize = 0;
/// Set to 1 to make the peer exit.
pub const STOP: usize = 16;

/// Waits until `word` equals `want`; gives up after `limit` (ETIMEDOUT).
/// Returns early with EPIPE when `stop` is set.
pub fn wait_for(word: &AtomicU32, want: u32, stop: &AtomicU32, mode: WaitMode, limit: Duration) -> rustix::io::Result<()> {
    let deadline = now_ns() + limit.as_nanos() as u64;
    let mut polls = 0u32;
    loop {
        let v = word.load(Ordering::Acquire);
        if v == want {
            return Ok(());
        }
        if stop.load(Ordering::Acquire) != 0 {
            return Err(Errno::PIPE);
        }
        match mode {
            WaitMode::Futex => {
                let ts = Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
                match futex::wait(word, futex::Flags::empty(), v, Some(&ts)) {
                    Ok(()) | Err(Errno::AGAIN) | Err(Errno::INTR) | Err(Errno::TIMEDOUT) => {}
                    Err(e) => return Err(e),
                }
            }
            WaitMode::Spin { yield_every } => {
                polls += 1;
                if polls >= yield_every {
                    polls = 0;
                    rustix::thread::sched_yield();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        if (polls == 0 || mode == WaitMode::Futex) && now_ns() > deadline {
            return Err(Errno::TIMEDOUT);
        }
    }
}

/// Stores `v` into `word` and, for futex mode, wakes the waiter.
pub fn signal(word: &AtomicU32, v: u32, mode: WaitMode) -> rustix::io::Result<()> {
    word.store(v, Ordering::Release);
    if mode == WaitMode::Futex {
        futex::wake(word, futex::Flags::empty(), 1)?;
    }
    Ok(())
}

/// A forked process that answers every `TURN = 2k+1` with `TURN = 2k+2`.
/// Killed and reaped on drop if it has not exited.
#[derive(Debug)]
pub struct Peer {
    pid: Option<Pid>,
}

impl Peer {
    /// Forks the peer, pinned to `cpu` (if given), waiting in `mode` on the
    /// words of `shared`. It exits when `STOP` is set, when the parent dies,
    /// or after 10 s without a turn.
    pub fn spawn(shared: &Map, mode: WaitMode, cpu: Option<usize>) -> rustix::io::Result<Peer> {
        let parent = rustix::process::getpid();
        // SAFETY: the child runs only `peer_main`, which uses atomics in the
        // shared mapping and raw syscalls (no allocation, no locks), then
        // `_exit`s; see the module's Safety section.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
        }
        if pid == 0 {
            let code = peer_main(shared, mode, cpu, parent);
            // SAFETY: ends the child without running the parent's atexit
            // handlers or destructors.
            unsafe { libc::_exit(code) };
        }
        Ok(Peer { pid: Pid::from_raw(pid) })
    }

    /// Waits for the peer to exit (after `STOP` was set); true if it exited 0.
    pub fn join(mut self) -> bool {
        let Some(pid) = self.pid.take() else { return false };
        for _ in 0..300 {
            match rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
                Ok(Some((_, st))) => return st.exit_status() == Some(0),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return false,
            }
        }
        let _ = rustix::process::kill_process(pid, Signal::KILL);
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        false
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        }
    }
}

fn peer_main(shared: &Map, mode: WaitMode, cpu: Option<usize>, parent: Pid) -> i32 {
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    if rustix::process::getppid() != Some(parent) {
        return 3;
    }
    if let Some(cpu) = cpu {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        if rustix::thread::sched_setaffinity(None, &set).is_err() {
            return 4;
        }
    }
    let turn = shared.atomic_u32(TURN);
    let stop = shared.atomic_u32(STOP);
    let mut want = 1u32;
    loop {
        match wait_for(turn, want, stop, mode, Duration::from_secs(10)) {
            Ok(()) => {}
            Err(Errno::PIPE) => return 0,
            Err(_) => return 5,
        }
        if signal(turn, want.wrapping_add(1), mode).is_err() {
            return 6;
        }
        want = want.wrapping_add(2);
    }
}
