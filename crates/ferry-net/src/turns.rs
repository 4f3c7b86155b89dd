//! Turns by user at one message stream.
//!
//! Every proxy of an import writes its messages on the import's one
//! stream, one message at a time; a proxy with a message waits for the
//! stream, and so does its queue behind it. A user has a proxy for each
//! lookup of a system import (up to `node::ADOPTED_PER_USER`), so with the
//! writers served in the order they came, one user keeping many proxies
//! full had a message waiting ahead of another user's for each of them.
//! So the writers take the stream in turn by *user*: each user waiting has
//! one turn in each round, and its own writers take its turns in the order
//! they came. However many proxies a user fills, another user's message
//! waits for at most one of its messages to be written (and then behind
//! what the stream has in flight, which its credit bounds, `crate::flow`).
//!
//! A writer that finds the stream free takes it at once (a lock taken and
//! let go, no queue joined, nothing awaited): a stream with one writer at
//! a time, as one user's calls are, pays nothing more.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::oneshot;

/// The turns at one message stream.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// A writer has the stream.
    busy: bool,
    /// The users with writers waiting, in the order of their next turns,
    /// each with its writers in the order they came.
    waiting: VecDeque<(u32, VecDeque<oneshot::Sender<()>>)>,
}

/// The stream's turn, held by one writer; passed on when dropped.
#[derive(Debug)]
pub(crate) struct Turn<'a>(&'a Turns);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.pass();
    }
}

/// A writer waiting for its turn. Dropped before its turn came (its
/// task was cancelled), it leaves the queue; dropped as its turn was
/// handed to it, it passes the turn on.
#[derive(Debug)]
pub(crate) struct Waiting<'a> {
    turns: &'a Turns,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.turns.pass();
            }
        }
    }
}

impl<'a> Waiting<'a> {
    /// Waits until the turn comes.
    pub(crate) async fn turn(mut self) -> Turn<'a> {
        if let Some(rx) = self.rx.as_mut() {
            // Its sender is dropped unsent only with the turns themselves,
            // which outlive this borrow: what comes is the turn.
            let _ = rx.await;
        }
        self.rx = None;
        Turn(self.turns)
    }
}

impl Turns {
    /// Takes the stream for user `uid` if it is free (no queue joined, no
    /// future made: most takes), or queues the user's writer for its turn.
    pub(crate) fn take(&self, uid: u32) -> Result<Turn<'_>, Waiting<'_>> {
        let mut s = self.state.lock().unwrap();
        if !s.busy {
            s.busy = true;
            return Ok(Turn(self));
        }
        let (tx, rx) = oneshot::channel();
        match s.waiting.iter_mut().find(|(u, _)| *u == uid) {
            Some((_, mine)) => mine.push_back(tx),
            None => s.waiting.push_back((uid, VecDeque::from([tx]))),
        }
        Err(Waiting { turns: self, rx: Some(rx) })
    }

    /// Hands the stream to the first writer of the user whose turn is
    /// next (that user goes to the back of the round if it has more
    /// writers waiting), or leaves it free when none waits.
    fn pass(&self) {
        let mut s = self.state.lock().unwrap();
        while let Some((uid, mut mine)) = s.waiting.pop_front() {
            let next = mine.pop_front();
            if !mine.is_empty() {
                s.waiting.push_back((uid, mine));
            }
            // A writer that left the queue is skipped.
            if next.is_some_and(|tx| tx.send(()).is_ok()) {
                return;
            }
        }
        s.busy = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Writers of user 1 that came first take turns with user 2's one
    /// writer, which waits for one of theirs, not all.
    #[test]
    fn each_user_waiting_has_one_turn_a_round() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let turns = Arc::new(Turns::default());
            let order = Arc::new(Mutex::new(Vec::new()));
            let first = turns.take(1).unwrap();
            let mut tasks = Vec::new();
            for uid in [1, 1, 1, 1, 2] {
                let (turns, order) = (turns.clone(), order.clone());
                tasks.push(tokio::spawn(async move {
                    let _turn = match turns.take(uid) {
                        Ok(t) => t,
                        Err(w) => w.turn().await,
                    };
                    order.lock().unwrap().push(uid);
                }));
                tokio::task::yield_now().await;
            }
            drop(first);
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(*order.lock().unwrap(), [1, 2, 1, 1, 1]);
            // All done: the stream is free again.
            assert!(turns.take(3).is_ok());
        });
    }

    /// A writer whose wait is given up leaves the queue, and a turn handed
    /// to one that gave up is passed on.
    #[test]
    fn a_writer_that_gives_up_holds_up_no_one() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let turns = Turns::default();
            let first = turns.take(1).unwrap();
            let Err(w) = turns.take(2) else { panic!("the stream was free while taken") };
            let mut gave_up = Box::pin(w.turn());
            assert!(futures_poll(gave_up.as_mut()).is_none());
            drop(first);
            // Handed the turn, then dropped before it looked.
            drop(gave_up);
            assert!(turns.take(3).is_ok());
            // Given up before its turn came: left the queue.
            let first = turns.take(1).unwrap();
            drop(turns.take(2).unwrap_err());
            drop(first);
            assert!(turns.take(3).is_ok());
        });
    }

    /// Polls `f` once.
    fn futures_poll<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match f.poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
