//! How a side waits for the other: the three policies, their bounds, and the
//! counters of every system call the RPC layer makes.
//!
//! Waking a thread that sleeps costs tens of microseconds on a small virtual
//! machine, while seeing a store on a shared cache line costs well under one:
//! so a waiter that knows its peer is running spins for a bounded time
//! ([`ADAPTIVE_SPIN`]) before it sleeps, and it says in the slot that it
//! sleeps, so the peer issues a wake-up only when somebody really sleeps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::io_err;

/// How a side of a connection waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// Spin while the peer is running, for at most [`ADAPTIVE_SPIN`], then
    /// sleep on the futex (client) or in `epoll` (server). The default.
    #[default]
    Adaptive,
    /// Never spin: sleep at once. Two system calls per side per call, like a
    /// socket, but no CPU is burnt.
    Block,
    /// Busy-wait until the reply (or request) comes, checking peer liveness
    /// every [`LIVENESS_INTERVAL`]. For pinned pairs on dedicated cores only:
    /// it burns a whole CPU while waiting.
    Poll,
}

/// Longest an adaptive waiter spins before it sleeps. A little less than
/// one sleep/wake cycle on a small virtual machine, so spinning never costs
/// more than the sleep it tries to avoid.
pub const ADAPTIVE_SPIN: Duration = Duration::from_micros(50);

/// Longest an adaptive waiter that has just woken its sleeping peer spins
/// while that peer is being scheduled (it sees the peer clear its sleeping
/// flag); once the peer runs, the ordinary [`ADAPTIVE_SPIN`] budget starts.
/// Without this grace, a pair whose wake-up latency exceeds the spin budget
/// would fall into a rhythm where both sides sleep on every call.
pub const WAKE_GRACE: Duration = Duration::from_micros(200);

/// The adaptive spin budget of one wait.
#[derive(Debug)]
pub(crate) struct Budget {
    start: Instant,
    from: Instant,
    waking: bool,
}

impl Budget {
    /// A budget starting now; `peer_waking` says this side just woke its peer.
    pub(crate) fn new(peer_waking: bool) -> Budget {
        let now = Instant::now();
        Budget { start: now, from: now, waking: peer_waking }
    }

    /// Whether to spin once more, given whether the peer (still) sleeps.
    ///
    /// The peer's flag matters only while this side waits for the peer it
    /// has just woken. Otherwise the peer was awake when this side
    /// published what it waits on (else this side would have woken it), and
    /// a peer that goes to sleep afterwards sets its flag and then looks
    /// once more (Dekker's handshake), so it finds the publication and does
    /// not sleep after all: a flag seen set then is that moment, not a
    /// sleeper. Giving up the spin on it cost a sleep and a wake-up (about
    /// 50 µs) for a peer that was answering.
    pub(crate) fn spin(&mut self, peer_asleep: bool) -> bool {
        let now = Instant::now();
        if self.waking {
            if !peer_asleep {
                self.waking = false;
                self.from = now;
                return true;
            }
            return now.duration_since(self.start) < WAKE_GRACE;
        }
        now.duration_since(self.from) < ADAPTIVE_SPIN
    }
}

/// This thread's CPU as the slot records it: the CPU number plus one, 0
/// when unknown. Only adaptive waiters record and read it.
pub(crate) fn cpu_tag() -> u32 {
    crate::sys::futex::current_cpu().map_or(0, |c| c.saturating_add(1))
}

/// Whether two recorded CPUs are known to be the same one. A waiter whose
/// peer runs on its own CPU must not spin: the peer cannot make progress
/// until the spinner gives the CPU up, so every spin would be wasted and
/// would delay the answer it waits for.
pub(crate) fn same_cpu(mine: u32, theirs: u32) -> bool {
    mine != 0 && mine == theirs
}

/// How often a waiter that has not been answered checks whether its peer is
/// still alive (the connection socket's hang-up), and how often a busy
/// server looks at its sockets (new connections, socket-path requests,
/// hang-ups). A sleeping client sleeps on the futex at most this long at a
/// time; peer death is therefore noticed within this interval.
pub const LIVENESS_INTERVAL: Duration = Duration::from_millis(10);

/// How many spin iterations pass between two looks at the clock.
pub(crate) const SPINS_PER_CLOCK: u32 = 64;

static FUTEX_WAITS: AtomicU64 = AtomicU64::new(0);
static WAKES: AtomicU64 = AtomicU64::new(0);
static POLLS: AtomicU64 = AtomicU64::new(0);
static SOCKET_OPS: AtomicU64 = AtomicU64::new(0);

/// Counts of the system calls the RPC layer of this process has made since
/// it started. The fast path's promise — no system call per call while both
/// sides are active — is checked against these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// `FUTEX_WAIT` calls (a client going to sleep).
    pub futex_waits: u64,
    /// Wake-ups issued: `FUTEX_WAKE` (server → client) and doorbells
    /// (client → server).
    pub wakes: u64,
    /// `poll`/`epoll_wait` calls: liveness checks, and a server sleeping or
    /// looking at its sockets.
    pub polls: u64,
    /// Socket sends and receives: set-up, socket-path calls, doorbells read.
    pub socket_ops: u64,
}

impl RpcStats {
    /// All system calls counted.
    pub fn total(&self) -> u64 {
        self.futex_waits + self.wakes + self.polls + self.socket_ops
    }

    /// The calls made between `earlier` and `self`.
    pub fn since(&self, earlier: &RpcStats) -> RpcStats {
        RpcStats {
            futex_waits: self.futex_waits - earlier.futex_waits,
            wakes: self.wakes - earlier.wakes,
            polls: self.polls - earlier.polls,
            socket_ops: self.socket_ops - earlier.socket_ops,
        }
    }
}

/// This process's RPC system-call counters.
pub fn stats() -> RpcStats {
    RpcStats {
        futex_waits: FUTEX_WAITS.load(Ordering::Relaxed),
        wakes: WAKES.load(Ordering::Relaxed),
        polls: POLLS.load(Ordering::Relaxed),
        socket_ops: SOCKET_OPS.load(Ordering::Relaxed),
    }
}

pub(crate) fn count_futex_wait() {
    FUTEX_WAITS.fetch_add(1, Ordering::Relaxed);
}
pub(crate) fn count_wake() {
    WAKES.fetch_add(1, Ordering::Relaxed);
}
pub(crate) fn count_poll() {
    POLLS.fetch_add(1, Ordering::Relaxed);
}
pub(crate) fn count_socket() {
    SOCKET_OPS.fetch_add(1, Ordering::Relaxed);
}

/// Binds the calling thread to CPU `cpu`, so a benchmark or a
/// latency-critical pair using [`Policy::Poll`] can run each side on its own
/// core.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    crate::sys::futex::pin_current_thread(cpu).map_err(io_err)
}
