//! What each local user has outstanding at one peer: references to this
//! host's ports the peer holds, and regions kept for it by reference.
//!
//! The far side counts every reference it holds against this host's share
//! of its proxies, so a right sent ten times is ten proxies there. The
//! budgets therefore count references, not distinct rights. References are
//! interchangeable once sent, and the peer's releases say how many of a
//! port's it let go of, never whose; the accounting here frees lookups'
//! first and then each user's in the order they first sent, so no user is
//! ever charged for more than it sent and the peer may still hold.

use std::collections::HashMap;

/// The owner of references the peer got by looking a name up: they count
/// against nobody's budget.
pub(crate) const LOOKUPS: u32 = u32::MAX;

/// Per-user counts for one link.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    /// Which local user each region sent by reference counts against.
    regions: HashMap<u64, u32>,
    /// The references to each export the peer holds, by who sent them:
    /// lookups' first, then each user in the order it first sent one (the
    /// order releases free them in).
    sent: HashMap<u64, Vec<(u32, u64)>>,
    /// Each user's counts: (references the peer holds, regions kept).
    usage: HashMap<u32, (usize, usize)>,
}

impl Budgets {
    /// `uid`'s counts: (references the peer holds, regions kept for it).
    pub(crate) fn of(&self, uid: u32) -> (usize, usize) {
        self.usage.get(&uid).copied().unwrap_or_default()
    }

    /// Every user with something outstanding, with its counts, by uid.
    pub(crate) fn users(&self) -> Vec<(u32, (usize, usize))> {
        let mut v: Vec<_> = self.usage.iter().map(|(&u, &c)| (u, c)).collect();
        v.sort_unstable();
        v
    }

    /// Counts region `id`, kept for the peer, against `uid`.
    pub(crate) fn charge_region(&mut self, uid: u32, id: u64) {
        self.regions.insert(id, uid);
        self.usage.entry(uid).or_default().1 += 1;
    }

    /// Gives back what region `id` cost its user, if it was charged.
    pub(crate) fn refund_region(&mut self, id: u64) {
        if let Some(uid) = self.regions.remove(&id) {
            self.adjust(uid, |u| u.1 = u.1.saturating_sub(1));
        }
    }

    /// Counts one more reference to export `id`, sent to the peer by `uid`
    /// (or handed out by a lookup, [`LOOKUPS`]).
    pub(crate) fn charge_ref(&mut self, uid: u32, id: u64) {
        let owners = self.sent.entry(id).or_default();
        match owners.iter_mut().find(|(u, _)| *u == uid) {
            Some((_, n)) => *n += 1,
            None if uid == LOOKUPS => owners.insert(0, (uid, 1)),
            None => owners.push((uid, 1)),
        }
        if uid != LOOKUPS {
            self.usage.entry(uid).or_default().0 += 1;
        }
    }

    /// The peer let go of `count` references to export `id`: lookups' are
    /// freed first, then each user's in the order they first sent one.
    pub(crate) fn release_refs(&mut self, id: u64, mut count: u64) {
        let Some(owners) = self.sent.get_mut(&id) else { return };
        let mut freed = Vec::new();
        for (uid, n) in owners.iter_mut() {
            if count == 0 {
                break;
            }
            let k = (*n).min(count);
            *n -= k;
            count -= k;
            if *uid != LOOKUPS {
                freed.push((*uid, k as usize));
            }
        }
        owners.retain(|(_, n)| *n > 0);
        if owners.is_empty() {
            self.sent.remove(&id);
        }
        for (uid, k) in freed {
            self.adjust(uid, |u| u.0 = u.0.saturating_sub(k));
        }
    }

    /// Export `id` is gone (every reference let go, its one message
    /// delivered, or the link closed): whatever is still charged for it is
    /// free.
    pub(crate) fn refund_export(&mut self, id: u64) {
        for (uid, n) in self.sent.remove(&id).unwrap_or_default() {
            if uid != LOOKUPS {
                self.adjust(uid, |u| u.0 = u.0.saturating_sub(n as usize));
            }
        }
    }

    /// Changes `uid`'s counts, forgetting the user once both are zero.
    fn adjust(&mut self, uid: u32, f: impl FnOnce(&mut (usize, usize))) {
        if let Some(u) = self.usage.get_mut(&uid) {
            f(u);
            if *u == (0, 0) {
                self.usage.remove(&uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_right_sent_again_counts_again() {
        let mut b = Budgets::default();
        for _ in 0..3 {
            b.charge_ref(0, 7);
        }
        assert_eq!(b.of(0), (3, 0));
        b.release_refs(7, 1);
        assert_eq!(b.of(0), (2, 0));
        b.refund_export(7);
        assert_eq!(b.of(0), (0, 0));
        assert!(b.users().is_empty(), "a user with nothing outstanding is forgotten");
    }

    #[test]
    fn releases_free_lookups_first_then_users_in_the_order_they_sent() {
        let mut b = Budgets::default();
        b.charge_ref(1000, 7);
        b.charge_ref(LOOKUPS, 7);
        b.charge_ref(0, 7);
        b.charge_ref(1000, 7);
        b.charge_ref(LOOKUPS, 7);
        // Two releases: both the lookups', none of a user's.
        b.release_refs(7, 2);
        assert_eq!((b.of(1000), b.of(0)), ((2, 0), (1, 0)));
        // Then the first sender's, then the next.
        b.release_refs(7, 1);
        assert_eq!((b.of(1000), b.of(0)), ((1, 0), (1, 0)));
        b.release_refs(7, 2);
        assert_eq!(b.users(), vec![]);
        // More than was charged (the peer's lookups of a port nobody sent
        // counted too): nothing goes below zero.
        b.charge_ref(0, 8);
        b.release_refs(8, 5);
        b.release_refs(9, 1);
        assert_eq!(b.of(0), (0, 0));
    }

    #[test]
    fn exports_and_regions_are_counted_apart_and_per_user() {
        let mut b = Budgets::default();
        b.charge_ref(0, 1);
        b.charge_ref(0, 2);
        b.charge_region(0, 1);
        b.charge_region(1000, 2);
        assert_eq!(b.users(), vec![(0, (2, 1)), (1000, (0, 1))]);
        b.refund_region(1);
        b.refund_region(1);
        b.refund_export(1);
        assert_eq!(b.users(), vec![(0, (1, 0)), (1000, (0, 1))]);
        b.refund_export(2);
        b.refund_region(2);
        assert!(b.users().is_empty());
    }
}
