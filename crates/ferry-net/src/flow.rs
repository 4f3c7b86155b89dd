//! Credit on each message stream: how much one destination port's stream
//! may have in flight that the receiving node has not read.
//!
//! QUIC bounds what is in flight twice: per stream, and for the whole
//! connection. A message stream whose port does not read is not read
//! either, and what the peer already sent on it (up to QUIC's window for a
//! stream, about a megabyte) sits unread in the connection's window. With
//! enough such streams that window fills and every stream of the link
//! stops, other users' included. So the network servers keep credit of
//! their own on every message stream, small enough that however many
//! streams stall, what they hold unread stays inside the connection's
//! window (`node::transport` sizes it from the limits):
//!
//! - A **small frame** (at most [`SMALL`] bytes, length prefix left out)
//!   may be sent while the stream's small frames not yet credited back
//!   come to at most [`WINDOW`] with it. The receiver credits what it has
//!   read ([`Frame::Credit`](crate::frame::Frame::Credit)) once it has read
//!   at least [`SMALL`] bytes since its last credit, so a frame of
//!   [`SMALL`] bytes always fits once the credits in flight arrive.
//! - A **larger frame** is asked for first
//!   ([`Frame::Want`](crate::frame::Frame::Want)): the receiver takes its
//!   bytes from the destination port owner's share of the link's frame
//!   bytes (`crate::inflight`) and only then grants it
//!   ([`Frame::Grant`](crate::frame::Frame::Grant)). One frame a stream is
//!   asked for at a time.
//!
//! A sender that waits for credit holds its stream, so the proxy port
//! behind it stops being read and its queue pushes back on the local
//! sender: a full port on one host holds up the senders to it on the
//! other, and nothing else. A receiver checks every grant and credit it is
//! sent and every large frame against its grant (a peer that breaks them
//! loses the link); what it cannot see is unread bytes, so a peer that
//! sends small frames past its credit fills only its own link's window.

use std::sync::Mutex;

use tokio::sync::Notify;

/// Bytes of small frames a message stream may have in flight, not yet
/// credited back by the receiver.
pub const WINDOW: usize = 64 << 10;

/// The largest frame sent within a stream's standing window; larger ones
/// are asked for ([`Frame::Want`](crate::frame::Frame::Want)) and granted.
pub const SMALL: usize = WINDOW / 2;

/// The sending side of one message stream's credit.
#[derive(Debug, Default)]
pub(crate) struct Out {
    state: Mutex<OutState>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct OutState {
    /// Bytes of small frames sent and not yet credited.
    unacked: usize,
    want: Want,
    closed: bool,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum Want {
    #[default]
    None,
    /// A frame of this many bytes was asked for.
    Asked(u64),
    /// ... and granted.
    Granted,
}

/// The link closed while a sender waited for credit.
#[derive(Debug)]
pub(crate) struct Closed;

impl Out {
    /// Waits until a small frame of `n` bytes fits in the window, and
    /// counts it as sent.
    pub(crate) async fn send_small(&self, n: usize) -> Result<(), Closed> {
        debug_assert!(n <= SMALL);
        self.wait(|s| {
            let fits = s.unacked + n <= WINDOW;
            if fits {
                s.unacked += n;
            }
            fits
        })
        .await
    }

    /// Records that a frame of `n` bytes is about to be asked for: call it
    /// before the [`Frame::Want`](crate::frame::Frame::Want) goes out, so
    /// the grant cannot come first.
    pub(crate) fn ask(&self, n: u64) {
        self.state.lock().unwrap().want = Want::Asked(n);
    }

    /// Waits for the grant of the frame asked for.
    pub(crate) async fn granted(&self) -> Result<(), Closed> {
        self.wait(|s| {
            let done = s.want == Want::Granted;
            if done {
                s.want = Want::None;
            }
            done
        })
        .await
    }

    /// The receiver credits `bytes` of small frames back.
    ///
    /// # Errors
    /// When it credits more than was sent: the peer breaks the protocol.
    pub(crate) fn credit(&self, bytes: u64) -> Result<(), &'static str> {
        {
            let mut s = self.state.lock().unwrap();
            let b = usize::try_from(bytes).map_err(|_| "credit beyond what was sent")?;
            s.unacked = s.unacked.checked_sub(b).ok_or("credit beyond what was sent")?;
        }
        self.changed.notify_waiters();
        Ok(())
    }

    /// The receiver grants the frame of `bytes` asked for.
    ///
    /// # Errors
    /// When no frame of that length was asked for.
    pub(crate) fn grant(&self, bytes: u64) -> Result<(), &'static str> {
        {
            let mut s = self.state.lock().unwrap();
            if s.want != Want::Asked(bytes) {
                return Err("a grant for a frame never asked for");
            }
            s.want = Want::Granted;
        }
        self.changed.notify_waiters();
        Ok(())
    }

    /// Ends every wait, now and later: the link is gone.
    pub(crate) fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.changed.notify_waiters();
    }

    async fn wait(&self, mut ready: impl FnMut(&mut OutState) -> bool) -> Result<(), Closed> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a change between the check
            // and the wait is not missed.
            changed.as_mut().enable();
            {
                let mut s = self.state.lock().unwrap();
                if s.closed {
                    return Err(Closed);
                }
                if ready(&mut s) {
                    return Ok(());
                }
            }
            changed.await;
        }
    }
}

/// The receiving side of one message stream's credit: the small frames
/// read and not yet credited back.
#[derive(Debug, Default)]
pub(crate) struct In {
    uncredited: usize,
}

impl In {
    /// A small frame of `n` bytes was read off the stream; returns the
    /// credit to send back now, if any.
    pub(crate) fn read_small(&mut self, n: usize) -> Option<u64> {
        self.uncredited += n;
        if self.uncredited < SMALL {
            return None;
        }
        let c = self.uncredited as u64;
        self.uncredited = 0;
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn now<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), f).await.ok() })
    }

    #[test]
    fn small_frames_wait_for_credit_past_the_window() {
        let out = Out::default();
        let mut inn = In::default();
        let mut credits = Vec::new();
        // The sender fills the window; the receiver reads it all.
        for _ in 0..WINDOW / 1024 {
            now(out.send_small(1024)).unwrap().unwrap();
            credits.extend(inn.read_small(1024));
        }
        assert!(now(out.send_small(1024)).is_none(), "past the window with no credit back");
        assert_eq!(credits.iter().sum::<u64>(), WINDOW as u64, "every byte read is credited, in credits of at least SMALL");
        assert!(credits.iter().all(|c| *c >= SMALL as u64));
        for c in credits {
            out.credit(c).unwrap();
        }
        now(out.send_small(1024)).unwrap().unwrap();
    }

    #[test]
    fn a_frame_of_small_always_fits_once_credits_arrive() {
        // Whatever was sent before, what is left uncredited after every
        // credit has arrived leaves room for a frame of SMALL bytes.
        for step in [1, 7, 100, 999, SMALL - 1, SMALL] {
            let out = Out::default();
            let mut inn = In::default();
            for _ in 0..50 {
                now(out.send_small(step)).unwrap().unwrap();
                if let Some(c) = inn.read_small(step) {
                    out.credit(c).unwrap();
                }
            }
            assert!(now(out.send_small(SMALL)).is_some(), "a frame of SMALL after frames of {step}");
        }
    }

    #[test]
    fn credit_beyond_what_was_sent_and_grants_never_asked_for_are_errors() {
        let out = Out::default();
        now(out.send_small(10)).unwrap().unwrap();
        assert!(out.credit(11).is_err());
        assert!(out.grant(100_000).is_err());
        out.ask(100_000);
        assert!(out.grant(99_999).is_err());
        out.grant(100_000).unwrap();
        now(out.granted()).unwrap().unwrap();
        assert!(now(out.granted()).is_none(), "one grant, one frame");
    }

    #[test]
    fn closing_ends_the_waits() {
        let out = Out::default();
        now(out.send_small(WINDOW / 2)).unwrap().unwrap();
        now(out.send_small(WINDOW / 2)).unwrap().unwrap();
        out.ask(1 << 20);
        out.close();
        assert!(matches!(now(out.send_small(1)), Some(Err(Closed))));
        assert!(matches!(now(out.granted()), Some(Err(Closed))));
    }
}
