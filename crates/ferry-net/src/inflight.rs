//! The bytes by which one peer's message streams may exceed their first
//! window, shared among the local users the streams are for.
//!
//! A message stream holds at most its window of frames not yet delivered
//! (`crate::flow`); a window grows past its first [`crate::flow::WINDOW`]
//! only by bytes taken from this pool, and keeps them while the stream is
//! open. A single pool for the whole link would let one local user whose
//! ports never read hold all of it, and with it every other user's messages
//! from that peer. So each growth is charged to the user that owns the
//! stream's destination port, and a user may hold at most half of what the
//! others leave; one charge is always let through for a user that holds
//! nothing, if the pool has room for it. With a pool of at least two frames
//! of the largest size, however long one user's ports stay full, any other
//! user still finds room for its frames.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The pool of frame bytes of one link.
#[derive(Debug)]
pub(crate) struct InFlight {
    total: usize,
    counts: Mutex<Counts>,
    room: Notify,
}

#[derive(Debug, Default)]
struct Counts {
    /// Every byte held, whoever it is for.
    held: usize,
    /// The bytes held for each user (users holding none are left out).
    by_user: HashMap<u32, usize>,
    /// Once the link is closed nothing more is handed out.
    closed: bool,
}

/// The link was closed while a frame waited for room.
#[derive(Debug)]
pub(crate) struct Closed;

/// Bytes charged to a user; given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    pool: Arc<InFlight>,
    uid: u32,
    n: usize,
}

impl InFlight {
    /// A pool of `total` bytes.
    pub(crate) fn new(total: usize) -> InFlight {
        InFlight { total, counts: Mutex::new(Counts::default()), room: Notify::new() }
    }

    /// Takes `n` bytes for a frame to a port of user `uid`, waiting until
    /// the pool and that user's share have room.
    pub(crate) async fn acquire(self: &Arc<Self>, uid: u32, n: usize) -> Result<Permit, Closed> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before the check, so a release between the check
            // and the wait is not missed.
            room.as_mut().enable();
            if self.try_take(uid, n)? {
                return Ok(Permit { pool: self.clone(), uid, n });
            }
            room.await;
        }
    }

    /// Takes `n` bytes for user `uid` if the pool and that user's share
    /// have room now.
    pub(crate) fn try_acquire(self: &Arc<Self>, uid: u32, n: usize) -> Option<Permit> {
        matches!(self.try_take(uid, n), Ok(true)).then(|| Permit { pool: self.clone(), uid, n })
    }

    /// The bytes held now, by every user.
    pub(crate) fn held(&self) -> usize {
        self.counts.lock().unwrap().held
    }

    /// The bytes nobody holds.
    #[cfg(test)]
    pub(crate) fn left(&self) -> usize {
        self.total - self.counts.lock().unwrap().held
    }

    fn try_take(&self, uid: u32, n: usize) -> Result<bool, Closed> {
        let mut c = self.counts.lock().unwrap();
        if c.closed {
            return Err(Closed);
        }
        let mine = c.by_user.get(&uid).copied().unwrap_or(0);
        let others = c.held - mine;
        let fits = c.held + n <= self.total && (mine == 0 || mine + n <= crate::budget::share_left(self.total, others));
        if fits {
            c.held += n;
            *c.by_user.entry(uid).or_insert(0) += n;
        }
        Ok(fits)
    }

    /// Ends every wait, now and later: the link is gone.
    pub(crate) fn close(&self) {
        self.counts.lock().unwrap().closed = true;
        self.room.notify_waiters();
    }

    /// The bytes held for `uid` now.
    #[cfg(test)]
    fn held_for(&self, uid: u32) -> usize {
        self.counts.lock().unwrap().by_user.get(&uid).copied().unwrap_or(0)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        {
            let mut c = self.pool.counts.lock().unwrap();
            c.held -= self.n;
            if let Some(m) = c.by_user.get_mut(&self.uid) {
                *m -= self.n;
                if *m == 0 {
                    c.by_user.remove(&self.uid);
                }
            }
        }
        self.pool.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async { tokio::time::timeout(std::time::Duration::from_millis(50), f).await.ok() })
    }

    #[test]
    fn a_user_that_fills_its_share_leaves_room_for_another() {
        let pool = Arc::new(InFlight::new(100));
        let a1 = now(pool.acquire(1, 30)).unwrap().unwrap();
        let a2 = now(pool.acquire(1, 20)).unwrap().unwrap();
        assert!(now(pool.acquire(1, 10)).is_none(), "user 1 holds half the pool");
        assert_eq!(pool.held_for(1), 50);
        let b = now(pool.acquire(2, 40)).unwrap().unwrap();
        drop(a1);
        let a3 = now(pool.acquire(1, 10)).unwrap().unwrap();
        drop((a2, a3, b));
        assert_eq!((pool.held_for(1), pool.held_for(2)), (0, 0));
    }

    #[test]
    fn one_frame_passes_for_a_user_holding_none_if_the_pool_has_room() {
        let pool = Arc::new(InFlight::new(100));
        let big = now(pool.acquire(1, 80)).unwrap().unwrap();
        assert!(now(pool.acquire(2, 30)).is_none(), "the pool is short");
        let small = now(pool.acquire(2, 20)).unwrap().unwrap();
        drop((big, small));
    }

    #[test]
    fn closing_ends_the_waits() {
        let pool = Arc::new(InFlight::new(10));
        let _held = now(pool.acquire(1, 10)).unwrap().unwrap();
        pool.close();
        assert!(matches!(now(pool.acquire(2, 1)), Some(Err(Closed))));
    }
}
