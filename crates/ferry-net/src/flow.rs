//! Credit on each message stream: how much one destination port's stream
//! may have in flight that the receiving node has not delivered.
//!
//! QUIC bounds what is in flight twice: per stream, and for the whole
//! connection. A message stream whose port does not read is not read
//! either, and what the peer already sent on it (up to QUIC's window for a
//! stream) sits unread in the connection's window. With
//! enough such streams that window fills and every stream of the link
//! stops, other users' included. So the network servers keep credit of
//! their own on every message stream, and what a stream may hold beyond a
//! small first window is charged to its port's owner:
//!
//! - Every stream starts with [`WINDOW`] bytes of credit (frames counted
//!   without their length prefixes), uncharged, since the receiver learns
//!   whose a stream is only from its first frame. The sender writes a
//!   frame only within its credit.
//! - The receiver gives credit back for what it has **delivered** (so a
//!   port that does not read stops its stream's credit), once that comes
//!   to a quarter of the stream's window, or to [`SMALL`] if more; a frame
//!   of up to [`SMALL`] bytes therefore always fits once the credits in
//!   flight arrive, and the sender waits for them.
//! - A stream that keeps flowing has its window doubled with each credit,
//!   up to [`MAX_WINDOW`], as long as its port owner's share of the link's
//!   budget (`crate::inflight`) has room for the growth, taken without
//!   waiting.
//! - A larger frame that the credit does not cover is asked for
//!   ([`Frame::Want`](crate::frame::Frame::Want)): the receiver grows the
//!   window by the frame's length, charged to the owner's share (waiting
//!   for room), and grants it ([`Frame::Grant`](crate::frame::Frame::Grant),
//!   credit of that length). Sizes that repeat then fit without asking.
//!   A stream asks for one frame at a time. A reply (a frame for a
//!   send-once right) is granted at once and uncharged: it is delivered
//!   as soon as it is read, so it holds bytes only in flight, bounded by
//!   QUIC's window for a stream.
//!
//! A sender that waits for credit holds its stream, so the proxy port
//! behind it stops being read and its queue pushes back on the local
//! sender: a full port on one host holds up the senders to it on the
//! other, and nothing else. Whatever its port does, a stream holds at most
//! its window, and all windows together at most [`WINDOW`] a stream and
//! the link's budget, which the link's QUIC window is sized to hold. The
//! receiver checks every frame against the credit it gave, and a peer that
//! writes past it breaks the protocol and loses the link.

use std::sync::Mutex;

use tokio::sync::Notify;

/// The credit a message stream starts with (bytes of frames, length
/// prefixes left out).
pub const WINDOW: usize = 64 << 10;

/// The largest frame a sender waits for credit for; larger ones it asks
/// for when the credit does not cover them.
pub const SMALL: usize = WINDOW / 2;

/// The window a stream grows to while it flows, if its owner's share has
/// room (frames asked for may take it past this). A stream's rate is at
/// most its window per round trip of the link: 16 MiB keeps 160 MiB/s
/// flowing to one port over a link of 100 ms round trips (1 MiB, the
/// first bound, held a port to 25 MiB/s at 40 ms). The growth is charged
/// to the port's owner, so a larger bound costs only that user's share.
pub const MAX_WINDOW: usize = 16 << 20;

/// The sending side of one message stream's credit.
#[derive(Debug)]
pub(crate) struct Out {
    state: Mutex<OutState>,
    changed: Notify,
}

#[derive(Debug)]
struct OutState {
    /// Bytes the stream may still carry.
    avail: u64,
    /// A frame was asked for and its grant has not come.
    asked: bool,
    /// Senders waiting for credit now.
    waiting: usize,
    closed: bool,
}

/// The link closed while a sender waited for credit.
#[derive(Debug)]
pub(crate) struct Closed;

impl Default for Out {
    fn default() -> Out {
        Out { state: Mutex::new(OutState { avail: WINDOW as u64, asked: false, waiting: 0, closed: false }), changed: Notify::new() }
    }
}

impl Out {
    /// Takes `n` bytes of credit if the stream has them now.
    #[cfg(test)]
    pub(crate) fn try_take(&self, n: usize) -> bool {
        let mut s = self.state.lock().unwrap();
        let fits = s.avail >= n as u64;
        if fits {
            s.avail -= n as u64;
        }
        fits
    }

    /// Waits until the stream has `n` bytes of credit, and takes them.
    #[cfg(test)]
    pub(crate) async fn take(&self, n: usize) -> Result<(), Closed> {
        self.take_or_ask(n, || async {}).await
    }

    /// Waits until the stream has `n` bytes of credit, and takes them; for
    /// a frame larger than [`SMALL`] that the credit does not cover, when
    /// no frame of the stream is asked for already, calls `ask` to send the
    /// [`Frame::Want`](crate::frame::Frame::Want).
    pub(crate) async fn take_or_ask<F: std::future::Future<Output = ()>>(&self, n: usize, mut ask: impl FnMut() -> F) -> Result<(), Closed> {
        // Most takes find the credit there: taken without joining the
        // list of waiters for a change.
        if let Some(done) = Self::take_now(&mut self.state.lock().unwrap(), n) {
            return done;
        }
        let mut counted = None;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a credit between the check
            // and the wait is not missed.
            changed.as_mut().enable();
            let asking = {
                let mut s = self.state.lock().unwrap();
                if let Some(done) = Self::take_now(&mut s, n) {
                    return done;
                }
                let asking = n > SMALL && !s.asked;
                s.asked |= asking;
                asking
            };
            if asking {
                ask().await;
            }
            counted.get_or_insert_with(|| Waiting::new(self));
            changed.await;
        }
    }

    /// Takes `n` bytes of credit if the stream has them (`Some(Ok)`), or
    /// says it is closed (`Some(Err)`); `None`: wait for more.
    fn take_now(s: &mut OutState, n: usize) -> Option<Result<(), Closed>> {
        if s.closed {
            return Some(Err(Closed));
        }
        if s.avail < n as u64 {
            return None;
        }
        s.avail -= n as u64;
        Some(Ok(()))
    }

    /// Whether a sender waits for credit on the stream now.
    pub(crate) fn waiting(&self) -> bool {
        self.state.lock().unwrap().waiting > 0
    }

    /// The receiver gives `bytes` more credit. (A receiver that gives more
    /// than it can hold harms only itself: its QUIC window still bounds
    /// what it is sent.)
    pub(crate) fn credit(&self, bytes: u64) {
        {
            let mut s = self.state.lock().unwrap();
            s.avail = s.avail.saturating_add(bytes);
        }
        self.changed.notify_waiters();
    }

    /// The receiver grants the frame asked for: `bytes` more credit.
    ///
    /// # Errors
    /// When nothing was asked for: the peer breaks the protocol.
    pub(crate) fn grant(&self, bytes: u64) -> Result<(), &'static str> {
        {
            let mut s = self.state.lock().unwrap();
            if !s.asked {
                return Err("a grant for a frame never asked for");
            }
            s.asked = false;
        }
        self.credit(bytes);
        Ok(())
    }

    /// Ends every wait, now and later: the stream or the link is gone.
    pub(crate) fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.changed.notify_waiters();
    }
}

/// A sender counted as waiting for credit, until dropped (whether the wait
/// ended or was given up).
struct Waiting<'a>(&'a Out);

impl<'a> Waiting<'a> {
    fn new(out: &'a Out) -> Waiting<'a> {
        out.state.lock().unwrap().waiting += 1;
        Waiting(out)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().waiting -= 1;
    }
}

/// The receiving side of one message stream's credit.
#[derive(Debug)]
pub(crate) struct In {
    /// Credit given in all, the first window included.
    given: u64,
    /// Bytes of frames read in all.
    read: u64,
    /// Bytes delivered since the last credit.
    delivered: usize,
    /// The stream's window: the first one and its growth.
    window: usize,
    /// The growth, charged to the stream's port owner.
    growth: Vec<crate::inflight::Permit>,
    /// The user the stream's frames are for, from its first frame.
    pub(crate) owner: Option<u32>,
    /// A frame was asked for and not yet credited.
    pub(crate) asked: bool,
    /// The stream carries the peer's messages for send-once rights (its
    /// replies), whose frames are granted charged to no one: one stream of
    /// a link at a time.
    pub(crate) replies: bool,
}

impl Default for In {
    fn default() -> In {
        In { given: WINDOW as u64, read: 0, delivered: 0, window: WINDOW, growth: Vec::new(), owner: None, asked: false, replies: false }
    }
}

impl In {
    /// A frame of `n` bytes is about to be read.
    ///
    /// # Errors
    /// When the credit given does not cover it: the sender broke the
    /// protocol.
    pub(crate) fn read(&mut self, n: usize) -> Result<(), &'static str> {
        if self.read + n as u64 > self.given {
            return Err("a message stream went past its credit");
        }
        self.read += n as u64;
        Ok(())
    }

    /// A frame of `n` bytes was delivered. Returns the credit to give back
    /// now, if any: what was delivered, and the window's growth if
    /// `grow` can charge it (it is asked for the bytes, and returns the
    /// charge or `None`).
    pub(crate) fn delivered(&mut self, n: usize, grow: impl FnOnce(usize) -> Option<crate::inflight::Permit>) -> Option<u64> {
        self.delivered += n;
        if self.delivered < (self.window / 4).max(SMALL) {
            return None;
        }
        let mut credit = std::mem::take(&mut self.delivered);
        if self.window < MAX_WINDOW {
            let more = self.window.min(MAX_WINDOW - self.window);
            if let Some(p) = grow(more) {
                self.growth.push(p);
                self.window += more;
                credit += more;
            }
        }
        self.given += credit as u64;
        Some(credit as u64)
    }

    /// The window grows by a frame of `n` bytes that was asked for, its
    /// charge `permit` (none for a reply, which waits for no share);
    /// returns the credit to give.
    pub(crate) fn grant(&mut self, n: usize, permit: Option<crate::inflight::Permit>) -> u64 {
        self.growth.extend(permit);
        self.window += n;
        self.given += n as u64;
        self.asked = false;
        n as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::inflight::InFlight;

    fn now<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), f).await.ok() })
    }

    #[test]
    fn a_stream_that_is_not_delivered_stops_at_its_window() {
        let out = Out::default();
        let mut inn = In::default();
        let mut sent = 0;
        while out.try_take(1000) {
            inn.read(1000).unwrap();
            sent += 1000;
        }
        assert!(sent <= WINDOW && sent > WINDOW - 1000);
        assert!(now(out.take(1000)).is_none(), "nothing delivered, no credit");
        assert!(inn.read(1000).is_err(), "a sender past its credit is caught");
    }

    #[test]
    fn delivery_gives_credit_back_and_a_flowing_stream_grows_while_its_owner_has_room() {
        let pool = Arc::new(InFlight::new(3 * MAX_WINDOW));
        let out = Out::default();
        let mut inn = In::default();
        let mut credits = 0;
        for _ in 0..2000 {
            now(out.take(SMALL)).expect("a frame of SMALL always fits once credits arrive").unwrap();
            inn.read(SMALL).unwrap();
            if let Some(c) = inn.delivered(SMALL, |n| pool.try_acquire(7, n)) {
                out.credit(c);
                credits += 1;
            }
        }
        assert_eq!(inn.window, MAX_WINDOW, "grown to its most");
        assert!(credits < 2000, "credit goes back in batches");
        // Without room, it stays where it is.
        let mut other = In::default();
        let _all = pool.try_acquire(8, pool.left()).unwrap();
        for _ in 0..100 {
            other.read(SMALL).unwrap();
            if let Some(c) = other.delivered(SMALL, |n| pool.try_acquire(9, n)) {
                assert!(c <= (WINDOW / 4).max(SMALL) as u64);
            }
        }
        assert_eq!(other.window, WINDOW);
    }

    #[test]
    fn a_frame_asked_for_is_covered_by_the_window_it_grew() {
        let pool = Arc::new(InFlight::new(100 << 20));
        let out = Out::default();
        let mut inn = In::default();
        let big = 300_000;
        assert!(!out.try_take(big));
        // The peer asks; the receiver grows the window and credits it.
        let p = now(pool.acquire(3, big)).unwrap().unwrap();
        out.credit(inn.grant(big, Some(p)));
        assert!(out.try_take(big));
        inn.read(big).unwrap();
        if let Some(c) = inn.delivered(big, |_| None) {
            out.credit(c);
        }
        assert!(out.try_take(big), "the same size again fits without asking");
    }

    #[test]
    fn a_large_frame_is_asked_for_once_until_granted() {
        let out = Out::default();
        let asks = std::cell::Cell::new(0);
        assert!(now(out.take_or_ask(100_000, || async { asks.set(asks.get() + 1) })).is_none());
        assert!(now(out.take_or_ask(100_000, || async { asks.set(asks.get() + 1) })).is_none());
        assert_eq!(asks.get(), 1, "asked once, however long it waits");
        assert!(!out.waiting(), "a wait given up is no longer counted");
        assert!(out.grant(100_000).is_ok());
        assert!(out.grant(100_000).is_err(), "one grant per asking");
        now(out.take_or_ask(100_000, || async { panic!("covered") })).unwrap().unwrap();
    }

    #[test]
    fn closing_ends_the_waits() {
        let out = Out::default();
        assert!(out.try_take(WINDOW));
        out.close();
        assert!(matches!(now(out.take(1)), Some(Err(Closed))));
    }
}
