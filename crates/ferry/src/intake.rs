//! The shared way in to a server through which every user's requests
//! hand it a port of their own (a system service registered from another
//! process, the file server's main port), kept from being filled by one
//! user.
//!
//! One process sends there on every user's behalf (the name server for a
//! service registered elsewhere, a [`PortMinter`] for the file server),
//! never waiting, since it serves every user: a full queue refuses the
//! request. Users that asked in a loop while the server was busy (with
//! their own requests) filled the queue, and every other user's lookups
//! were refused. So each user may have at most half of what the other
//! users leave of the queue waiting in it, and a user with nothing
//! waiting may always send one: however many users fill their share, the
//! next finds room.
//!
//! [`PortMinter`]: crate::pager::PortMinter

use std::collections::VecDeque;

use crate::port::SendRight;

/// Messages remembered while what one costs is not known yet.
const UNKNOWN_COST_MAX: usize = 4096;

/// What waits unread in one server's queue, by user, as seen by the only
/// process that sends there.
#[derive(Debug, Default)]
pub(crate) struct Intake {
    /// The user each message was sent for, oldest first. The server takes
    /// them in order, so those it has not taken yet are the last ones.
    sent: VecDeque<u32>,
    /// What one message costs in the queue (its buffer's size, as the
    /// kernel charges it against the queue's limit), once seen: every
    /// message sent through one intake has the same length and items.
    cost: usize,
}

impl Intake {
    /// Whether user `uid` may have one more message waiting at `server`:
    /// the bytes waiting before it is sent (for [`Intake::sent`]), or why
    /// not.
    pub(crate) fn room_for(&mut self, server: &SendRight, uid: u32) -> Result<usize, String> {
        let unread = server.queued_bytes().unwrap_or(0);
        let left = match (unread, self.cost) {
            (0, _) => 0,
            (_, 0) => UNKNOWN_COST_MAX,
            (n, c) => n.div_ceil(c),
        };
        while self.sent.len() > left {
            self.sent.pop_front();
        }
        let mine = self.sent.iter().filter(|u| **u == uid).count();
        if mine == 0 || self.cost == 0 {
            return Ok(unread);
        }
        let room = (server.queue_limit().unwrap_or(0) / self.cost).max(1);
        let share = room.saturating_sub(self.sent.len() - mine) / 2;
        if mine < share {
            Ok(unread)
        } else {
            Err(format!("{mine} requests of this user's wait for it to take them, of the {share} it may have waiting; retry"))
        }
    }

    /// Records a message sent to `server` for user `uid`, `before` being
    /// what [`Intake::room_for`] returned.
    pub(crate) fn sent(&mut self, server: &SendRight, before: usize, uid: u32) {
        // Only this process sends there, so what the queue grew by is this
        // message, unless the server took some meanwhile (then less).
        let after = server.queued_bytes().unwrap_or(0);
        self.cost = self.cost.max(after.saturating_sub(before));
        self.sent.push_back(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::timeout::Timeout;

    /// With nobody reading, user 1 stops at half the queue, user 2 at half
    /// of what user 1 left, and user 3 still sends; once the server took
    /// user 1's, user 1 sends again.
    #[test]
    fn each_user_leaves_room_in_the_queue_for_the_others() {
        let (mut rx, tx) = crate::port().unwrap();
        tx.set_queue_limit(16 * 1024).unwrap();
        let mut intake = Intake::default();
        let send = |intake: &mut Intake, uid: u32| -> bool {
            match intake.room_for(&tx, uid) {
                Ok(before) => {
                    tx.send(Message::new(1).with_body(uid.to_le_bytes().to_vec()), Timeout::Zero).expect("the queue had room");
                    intake.sent(&tx, before, uid);
                    true
                }
                Err(_) => false,
            }
        };
        let mut one = 0;
        while send(&mut intake, 1) {
            one += 1;
            assert!(one < 10_000, "user 1 was never stopped");
        }
        let mut two = 0;
        while send(&mut intake, 2) {
            two += 1;
        }
        assert!(one >= 2 && two >= 1 && two <= one, "user 1 sent {one}, user 2 {two}");
        assert!(send(&mut intake, 3), "user 3 found no room");
        assert!(!send(&mut intake, 1));
        for _ in 0..one {
            assert_eq!(rx.recv(Timeout::Zero).unwrap().body(), 1u32.to_le_bytes());
        }
        assert!(send(&mut intake, 1), "user 1 may send again once the server took some");
    }
}
