//! The watcher: a thread that waits in `epoll` on a server thread's port and
//! connection sockets while that server thread sleeps on futexes.
//!
//! A sleeping server thread waits with one `futex_waitv` on the request
//! word of every idle slot (or, with one idle slot, a plain `FUTEX_WAIT` on
//! its word), so a client wakes it with a plain `FUTEX_WAKE`, the cheapest
//! wake-up there is. A futex cannot be waited on together with
//! descriptors, though, and the port (new connections), socket-path requests
//! and hang-ups are descriptor events. The watcher turns them into a futex
//! event: it sleeps in `epoll_wait` on the server's `epoll` set, and when
//! that reports anything it bumps `gen` (one more futex the server waits
//! on), wakes it (on `gen`, and on the one slot's word if it sleeps there),
//! and waits until the server has looked at its sockets and acknowledged
//! that generation before it waits in `epoll` again (the set is
//! level-triggered, so it would otherwise report the same events at once).
//! It consumes nothing itself: the server thread does every read.
//!
//! Its system calls are counted in `rpc::stats()` with the rest of the
//! RPC layer's. The watcher costs nothing per slot call: it sleeps until a descriptor
//! event, which the slot path never causes. Nothing a client writes reaches
//! it; a client that floods its socket only makes the server look more
//! often, as the server's own `epoll` wait did.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::policy;
use super::slot::{Slot, OFF_REQ_SEQ};
use crate::sys::futex;
use crate::sys::wait::{Bell, Epoll, Interest};

/// The `epoll` key of the bell that stops the watcher.
pub(super) const STOP_KEY: u64 = u64::MAX;

/// How long the watcher waits for the server thread to acknowledge a
/// report before it wakes the thread again; the wait doubles after each
/// wake, up to [`RE_WAKE_MAX`]. A thread that lost the first wake (see
/// [`Shared::set_sleeper`]) answers within this; a thread busy with a
/// long request costs the watcher a few wake calls a second.
const RE_WAKE_FIRST: Duration = Duration::from_millis(1);

/// The longest wait between two wakes of a thread that has not
/// acknowledged a report.
const RE_WAKE_MAX: Duration = Duration::from_millis(100);

/// What a server thread and its watcher share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Bumped by the watcher for each batch of descriptor events; a
    /// (process-private) futex the sleeping server waits on with its slots.
    pub(super) gen: AtomicU32,
    /// The last generation the server has handled; the futex the watcher
    /// waits on.
    acked: AtomicU32,
    /// Set when the server is dropped (or the watcher failed): no more
    /// reports.
    stop: AtomicBool,
    /// The slot whose request word the server thread sleeps on alone
    /// (`FUTEX_WAIT`, one client), if it does: the watcher wakes that word
    /// too when it reports. Held only while the thread sleeps, so the slot
    /// stays mapped for the watcher's wake.
    sleeper: Mutex<Option<Arc<Slot>>>,
}

impl Shared {
    /// Whether descriptor events wait for the server to look.
    pub(super) fn pending(&self) -> bool {
        self.gen.load(Ordering::Acquire) != self.acked.load(Ordering::Relaxed)
    }

    /// The last generation the server acknowledged.
    pub(super) fn acked(&self) -> u32 {
        self.acked.load(Ordering::Acquire)
    }

    /// Whether the watcher still runs (the server may sleep on futexes).
    pub(super) fn running(&self) -> bool {
        !self.stop.load(Ordering::Acquire)
    }

    /// The server thread is about to sleep on `slot`'s request word alone
    /// (`Some`), or is awake again (`None`). It sets the sleeper before it
    /// checks `gen` a last time, and the watcher bumps `gen` before it
    /// takes the sleeper, both under this lock: either the thread sees the
    /// new generation, or the watcher sees the sleeper and wakes it. That
    /// wake can still come after the check and before the thread's
    /// `FUTEX_WAIT` begins, and then it is lost (the word the thread waits
    /// on is the client's, which the watcher must not change): so the
    /// watcher wakes the thread again while the acknowledgement does not
    /// come ([`RE_WAKE_FIRST`]).
    pub(super) fn set_sleeper(&self, slot: Option<Arc<Slot>>) {
        *self.sleeper.lock().unwrap_or_else(|e| e.into_inner()) = slot;
    }

    /// Bumps the generation and wakes the server thread, wherever it
    /// sleeps: on the generation (with its slots) or on one slot's word.
    fn report(&self) -> u32 {
        let g = self.gen.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        self.wake();
        g
    }

    /// Wakes the server thread wherever it sleeps.
    fn wake(&self) {
        policy::count_wake();
        let _ = futex::wake_private(&self.gen);
        if let Some(slot) = self.sleeper.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            policy::count_wake();
            let _ = futex::wake(slot.word(OFF_REQ_SEQ));
        }
    }

    /// The server has looked at its sockets after reading `gen` as `g`:
    /// lets the watcher wait again.
    pub(super) fn ack(&self, g: u32) {
        if self.acked.swap(g, Ordering::AcqRel) != g {
            policy::count_wake();
            let _ = futex::wake_private(&self.acked);
        }
    }
}

/// A running watcher; stopping it (on drop) joins its thread.
///
/// A child made with `fork()` holds a copy of its parent's server and so of
/// its watcher, without the thread. Its bell is the parent's (the child's
/// descriptor names the same eventfd), so dropping the copy there must not
/// ring it, which would stop the parent's watcher, nor join a thread the
/// child does not have.
#[derive(Debug)]
pub(super) struct Watcher {
    shared: Arc<Shared>,
    bell: Bell,
    thread: Option<JoinHandle<()>>,
    /// The process the thread runs in.
    pid: u32,
}

impl Watcher {
    /// Starts a watcher over `epoll` (which it adds a stop bell to).
    pub(super) fn start(epoll: Arc<Epoll>) -> std::io::Result<Watcher> {
        let shared = Arc::new(Shared::default());
        let bell = Bell::new().map_err(crate::error::io_err)?;
        epoll.add(bell.as_fd(), Interest::Readable, STOP_KEY).map_err(crate::error::io_err)?;
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("ferry-rpc-watch".into()).spawn(move || run(&epoll, &s))?;
        Ok(Watcher { shared, bell, thread: Some(thread), pid: std::process::id() })
    }

    /// The state shared with the watcher thread.
    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if std::process::id() != self.pid {
            // A forked child's copy: the thread and the bell are the
            // parent's. Forgetting the handle leaves the parent's thread
            // alone (it is not this process's to detach or join).
            std::mem::forget(self.thread.take());
            return;
        }
        let _ = self.bell.ring();
        let _ = futex::wake_private(&self.shared.acked);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The watcher thread: report each batch of events, then wait for the
/// server's acknowledgement.
fn run(epoll: &Epoll, s: &Shared) {
    while s.running() {
        policy::count_poll();
        let events = match epoll.wait(8, None) {
            Ok(e) => e,
            Err(_) => break,
        };
        if !s.running() || events.iter().any(|(k, _)| *k == STOP_KEY) {
            break;
        }
        if events.is_empty() {
            continue;
        }
        let g = s.report();
        let mut patience = RE_WAKE_FIRST;
        loop {
            let a = s.acked.load(Ordering::Acquire);
            if a == g || !s.running() {
                break;
            }
            policy::count_futex_wait();
            match futex::wait_private(&s.acked, a, Some(patience)) {
                Err(_) => break,
                // Not acknowledged yet: the thread may be busy, or asleep
                // after losing the wake (see `Shared::set_sleeper`).
                Ok(futex::Woken::TimedOut) => {
                    s.wake();
                    patience = (patience * 2).min(RE_WAKE_MAX);
                }
                Ok(_) => {}
            }
        }
    }
    // The server must not sleep on futexes alone any more: it falls back to
    // waiting in epoll itself.
    s.stop.store(true, Ordering::Release);
    s.report();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::futex::Woken;

    /// The race of [`Shared::set_sleeper`], made to happen: the server
    /// thread has checked the generation and is about to sleep on its one
    /// slot's request word when the watcher reports, so the report's wake
    /// finds nobody waiting. The watcher must wake the thread again; before
    /// it did, the thread slept until a client published a request (for
    /// ever, once every client had gone).
    #[test]
    fn a_wake_lost_before_the_sleep_is_given_again() {
        let epoll = Arc::new(Epoll::new().expect("epoll"));
        let event = Bell::new().expect("bell");
        epoll.add(event.as_fd(), Interest::Readable, 1).expect("add");
        let watcher = Watcher::start(epoll).expect("watcher");
        let s = watcher.shared();
        let (slot, _fd) = Slot::create().expect("slot");
        let slot = Arc::new(slot);
        let expected = slot.word(OFF_REQ_SEQ).load(Ordering::SeqCst);

        // The thread's last look at the generation, then its sleeper.
        let gen = s.gen.load(Ordering::SeqCst);
        s.set_sleeper(Some(slot.clone()));
        // A descriptor event, reported (and its wake given) before the
        // thread sleeps.
        event.ring().expect("ring");
        let start = std::time::Instant::now();
        while s.gen.load(Ordering::SeqCst) == gen {
            assert!(start.elapsed() < Duration::from_secs(10), "the watcher never reported");
            std::thread::yield_now();
        }
        // Now the thread sleeps, on the word no client will change.
        let woken = futex::wait(slot.word(OFF_REQ_SEQ), expected, Some(Duration::from_secs(5))).expect("wait");
        assert_ne!(woken, Woken::TimedOut, "the sleeping thread was not woken again");
        s.set_sleeper(None);
        s.ack(s.gen.load(Ordering::SeqCst));
        drop(watcher);
    }
}
