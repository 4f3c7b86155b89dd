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

/// How much one user may hold of `total` when the other users hold
/// `others`: half of what they leave. The one rule behind every per-user
/// share of a link (references and streams at the peer, proxies, regions
/// and frame bytes here): however many users fill their share, the next
/// still finds room, where a fixed share per user lets a few users take
/// everything between them.
pub(crate) fn share_left(total: usize, others: usize) -> usize {
    total.saturating_sub(others) / 2
}

/// Things of one kind a link holds here, each charged to a local user, with
/// each user's count kept as they come and go, so that a user's share is
/// checked without counting the table.
#[derive(Debug)]
pub(crate) struct Owners<K> {
    owner: HashMap<K, u32>,
    counts: HashMap<u32, usize>,
}

impl<K> Default for Owners<K> {
    fn default() -> Self {
        Owners { owner: HashMap::new(), counts: HashMap::new() }
    }
}

impl<K: std::hash::Hash + Eq> Owners<K> {
    /// Charges `k` to `uid` (moving it from its old owner, if any).
    pub(crate) fn insert(&mut self, k: K, uid: u32) {
        if let Some(old) = self.owner.insert(k, uid) {
            uncount(&mut self.counts, old);
        }
        *self.counts.entry(uid).or_insert(0) += 1;
    }

    /// Gives back what `k` cost its owner.
    pub(crate) fn remove(&mut self, k: &K) {
        if let Some(old) = self.owner.remove(k) {
            uncount(&mut self.counts, old);
        }
    }

    /// Keeps only what `keep` says to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let counts = &mut self.counts;
        self.owner.retain(|k, uid| {
            let kept = keep(k);
            if !kept {
                uncount(counts, *uid);
            }
            kept
        });
    }

    /// How many are charged to `uid`.
    pub(crate) fn of(&self, uid: u32) -> usize {
        self.counts.get(&uid).copied().unwrap_or(0)
    }

    /// How many there are, whoever they are charged to.
    pub(crate) fn len(&self) -> usize {
        self.owner.len()
    }
}

/// One thing fewer charged to `uid`; a user with none is forgotten.
fn uncount(counts: &mut HashMap<u32, usize>, uid: u32) {
    if let Some(n) = counts.get_mut(&uid) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&uid);
        }
    }
}

/// What one user may have a peer keep, per link.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// References the peer holds, per user (`max_exports_per_user`).
    pub(crate) refs: usize,
    /// Regions kept by reference, per user (`max_regions_per_user`).
    pub(crate) regions: usize,
    /// References to this host's ports the peer is taken to hold at most:
    /// this node's own `max_proxies_per_peer`, as nodes are set up alike.
    pub(crate) peer_proxies: usize,
    /// Message streams the peer lets this node open at once: taken to be
    /// this node's own `max_streams_per_peer`, as nodes are set up alike.
    pub(crate) peer_streams: usize,
}

/// Address space one link's regions sent by reference may take here:
/// each stays mapped (reserved, not resident) until the peer lets it go,
/// and one may be as large as [`crate::frame::MAX_REMOTE_REGION`], so a
/// count of regions alone let a user take the process's whole address
/// space. A user may take half of what the others leave.
pub(crate) const LINK_REGION_SPACE: u64 = 16 << 40;

/// Address space all links' regions sent by reference may take together,
/// half of what a 47-bit address space leaves a process: the node's own
/// work keeps the rest. A user may take half of what the others leave of
/// it, as of each link's.
pub(crate) const NODE_REGION_SPACE: u64 = 64 << 40;

/// Address space regions sent by reference take now, all links together:
/// in all, and each user's.
#[derive(Debug, Default)]
struct NodeSpace {
    total: u64,
    users: Option<HashMap<u32, u64>>,
}

impl NodeSpace {
    fn of(&self, uid: u32) -> u64 {
        self.users.as_ref().and_then(|u| u.get(&uid)).copied().unwrap_or(0)
    }

    fn charge(&mut self, uid: u32, len: u64) {
        *self.users.get_or_insert_with(HashMap::new).entry(uid).or_insert(0) += len;
        self.total += len;
    }

    fn uncharge(&mut self, uid: u32, len: u64) {
        if let Some(n) = self.users.as_mut().and_then(|u| u.get_mut(&uid)) {
            let k = (*n).min(len);
            *n -= k;
            self.total -= k;
            if *n == 0 {
                if let Some(u) = self.users.as_mut() {
                    u.remove(&uid);
                }
            }
        }
    }
}

/// The process's address space is one for all its links: so is the count.
static NODE_SPACE: std::sync::Mutex<NodeSpace> = std::sync::Mutex::new(NodeSpace { total: 0, users: None });

fn node_space() -> std::sync::MutexGuard<'static, NodeSpace> {
    NODE_SPACE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Per-user counts for one link.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    /// Which local user each region sent by reference counts against, and
    /// its length.
    regions: HashMap<u64, (u32, u64)>,
    /// Each user's address space taken by regions sent by reference.
    space: HashMap<u32, u64>,
    /// All users' address space taken on this link: the sum of `space`.
    space_total: u64,
    /// The references to each export the peer holds, by who sent them:
    /// lookups' first, then each user in the order it first sent one (the
    /// order releases free them in).
    sent: HashMap<u64, Vec<(u32, u64)>>,
    /// Each user's counts: (references the peer holds, regions kept).
    usage: HashMap<u32, (usize, usize)>,
    /// Every reference to this host's ports the peer holds, lookups'
    /// included: the sum of `sent`.
    held: usize,
    /// The user whose message opened the stream to each import, charged
    /// until the import is gone.
    streams: HashMap<u64, u32>,
    /// How many of those streams each user opened.
    opened: HashMap<u32, usize>,
}

impl Drop for Budgets {
    /// A link gone gives back the node's address space its regions took.
    fn drop(&mut self) {
        let mut all = node_space();
        for (&uid, &len) in &self.space {
            all.uncharge(uid, len);
        }
    }
}

impl Budgets {
    /// `uid`'s counts: (references the peer holds, regions kept for it).
    pub(crate) fn of(&self, uid: u32) -> (usize, usize) {
        self.usage.get(&uid).copied().unwrap_or_default()
    }

    /// Every reference to this host's ports the peer holds, whoever sent
    /// it or looked it up.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Every user with something outstanding, with its counts, by uid.
    pub(crate) fn users(&self) -> Vec<(u32, (usize, usize))> {
        let mut v: Vec<_> = self.usage.iter().map(|(&u, &c)| (u, c)).collect();
        v.sort_unstable();
        v
    }

    /// Why a message from `uid` that would make the peer hold `refs` more
    /// references and this node keep `regions` more regions must be
    /// refused, or `None` if it may pass. A user may not pass its own
    /// limits, nor hold more than half of the peer's proxies the others
    /// leave free: so however many users fill their budgets, the next one
    /// still finds room (each takes at most half of what is left), where a
    /// fixed share per user lets a few users take every proxy between them.
    pub(crate) fn over(&self, uid: u32, refs: usize, regions: usize, limits: Limits, peer: &str) -> Option<String> {
        if refs == 0 && regions == 0 {
            return None;
        }
        let (e, r) = self.of(uid);
        if regions > 0 && r + regions > limits.regions {
            return Some(format!("user {uid} already has {r} regions by reference kept for {peer} (the limit is {})", limits.regions));
        }
        if refs == 0 {
            return None;
        }
        if e + refs > limits.refs {
            return Some(format!("user {uid} already has {e} rights kept for {peer} (the limit is {})", limits.refs));
        }
        let free = limits.peer_proxies.saturating_sub(self.held() - e);
        if e + refs > share_left(limits.peer_proxies, self.held() - e) {
            return Some(format!(
                "user {uid} already has {e} rights kept for {peer}, and one user may hold at most half of the {free} of {peer}'s proxies the others leave"
            ));
        }
        None
    }

    /// Why a message from `uid` whose regions by reference are `bytes` long
    /// together must be refused for the address space they would take,
    /// or `None` if they fit: a user may take half of what the others
    /// leave of [`LINK_REGION_SPACE`], and, over all links together, half
    /// of what they leave of [`NODE_REGION_SPACE`]. With only the first,
    /// one user sending to eight peers took all of the node's, and every
    /// other user's regions were refused.
    pub(crate) fn space_over(&self, uid: u32, bytes: u64, peer: &str) -> Option<String> {
        if bytes == 0 {
            return None;
        }
        let mine = self.space.get(&uid).copied().unwrap_or(0);
        let others = self.space_total - mine;
        let share = LINK_REGION_SPACE.saturating_sub(others) / 2;
        if mine + bytes > share {
            let free = LINK_REGION_SPACE.saturating_sub(others);
            return Some(format!(
                "user {uid} already has {mine} bytes of regions by reference kept for {peer}, and one user may have at most half of the {free} bytes of address space the others leave"
            ));
        }
        let all = node_space();
        let mine = all.of(uid);
        let others = all.total - mine;
        (mine + bytes > NODE_REGION_SPACE.saturating_sub(others) / 2).then(|| {
            let free = NODE_REGION_SPACE.saturating_sub(others);
            format!(
                "user {uid} already has {mine} bytes of regions by reference kept on all links, and one user may have at most half of the {free} bytes of this node's address space for them that the others leave"
            )
        })
    }

    /// Why a message from `uid` to import `import` must be refused because
    /// it would open one more stream to the peer, or `None` if the import's
    /// stream is open (or being opened) already or there is room. One
    /// stream is kept for send-once rights' messages; of the rest, a user
    /// may open at most half of what the others leave, so one user whose
    /// messages go to many of the peer's ports cannot take every stream
    /// the peer allows and leave another user's first message to a port
    /// waiting for one that never comes.
    pub(crate) fn stream_over(&self, uid: u32, import: u64, limits: Limits, peer: &str) -> Option<String> {
        if self.streams.contains_key(&import) {
            return None;
        }
        let mine = self.opened.get(&uid).copied().unwrap_or(0);
        // One stream is kept for send-once rights' messages.
        let (room, others) = (limits.peer_streams.saturating_sub(1), self.streams.len() - mine);
        (mine + 1 > share_left(room, others)).then(|| {
            let free = room.saturating_sub(others);
            format!("user {uid} already has {mine} streams open to {peer}, and one user may open at most half of the {free} the others leave")
        })
    }

    /// Counts the stream to import `import` against `uid`, unless it is
    /// counted already.
    pub(crate) fn charge_stream(&mut self, uid: u32, import: u64) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.streams.entry(import) {
            e.insert(uid);
            *self.opened.entry(uid).or_insert(0) += 1;
        }
    }

    /// The stream to import `import` is gone: its user may open another.
    pub(crate) fn refund_stream(&mut self, import: u64) {
        if let Some(uid) = self.streams.remove(&import) {
            if let Some(n) = self.opened.get_mut(&uid) {
                *n -= 1;
                if *n == 0 {
                    self.opened.remove(&uid);
                }
            }
        }
    }

    /// Counts region `id`, `len` bytes kept for the peer, against `uid`.
    pub(crate) fn charge_region(&mut self, uid: u32, id: u64, len: u64) {
        if let Some((old, old_len)) = self.regions.insert(id, (uid, len)) {
            self.uncharge_space(old, old_len);
        } else {
            self.usage.entry(uid).or_default().1 += 1;
        }
        *self.space.entry(uid).or_insert(0) += len;
        self.space_total += len;
        node_space().charge(uid, len);
    }

    /// Gives back what region `id` cost its user, if it was charged.
    pub(crate) fn refund_region(&mut self, id: u64) {
        if let Some((uid, len)) = self.regions.remove(&id) {
            self.adjust(uid, |u| u.1 = u.1.saturating_sub(1));
            self.uncharge_space(uid, len);
        }
    }

    fn uncharge_space(&mut self, uid: u32, len: u64) {
        if let Some(n) = self.space.get_mut(&uid) {
            *n = n.saturating_sub(len);
            if *n == 0 {
                self.space.remove(&uid);
            }
        }
        self.space_total = self.space_total.saturating_sub(len);
        node_space().uncharge(uid, len);
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
        self.held += 1;
        if uid != LOOKUPS {
            self.usage.entry(uid).or_default().0 += 1;
        }
    }

    /// The references to export `id` charged now, whoever they are charged
    /// to.
    pub(crate) fn charged(&self, id: u64) -> u64 {
        self.sent.get(&id).map_or(0, |owners| owners.iter().map(|(_, n)| n).sum())
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
            self.held -= k as usize;
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
            self.held -= n as usize;
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
    fn one_user_opens_at_most_half_of_the_streams_the_others_leave() {
        let limits = Limits { refs: 10, regions: 10, peer_streams: 16, peer_proxies: 100 };
        let mut b = Budgets::default();
        for import in 0..7 {
            assert_eq!(b.stream_over(1, import, limits, "p"), None);
            b.charge_stream(1, import);
        }
        assert!(b.stream_over(1, 7, limits, "p").is_some(), "seven of the fifteen are half");
        assert_eq!(b.stream_over(1, 3, limits, "p"), None, "an open stream costs nothing more");
        for import in 100..104 {
            assert_eq!(b.stream_over(2, import, limits, "p"), None);
            b.charge_stream(2, import);
        }
        assert!(b.stream_over(2, 104, limits, "p").is_some());
        b.refund_stream(100);
        assert_eq!(b.stream_over(2, 104, limits, "p"), None, "a stream gone is room again");
    }

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
        assert_eq!(b.held(), 0, "every reference, lookups' too, is let go");
        // More than was charged (the peer's lookups of a port nobody sent
        // counted too): nothing goes below zero.
        b.charge_ref(0, 8);
        b.release_refs(8, 5);
        b.release_refs(9, 1);
        assert_eq!(b.of(0), (0, 0));
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn each_user_holds_at_most_half_of_what_the_others_leave() {
        let limits = Limits { refs: 100, regions: 1, peer_proxies: 16, peer_streams: 16 };
        let mut b = Budgets::default();
        // Alone, a user may hold half of the peer's proxies.
        for i in 0..8 {
            assert_eq!(b.over(0, 1, 0, limits, "p"), None, "reference {i}");
            b.charge_ref(0, i);
        }
        assert!(b.over(0, 1, 0, limits, "p").unwrap().contains("at most half of the 16"));
        // The next user, half of the eight left; the one after, half of
        // the four left then, and so on: never the last of them.
        for (uid, share) in [(1, 4), (2, 2), (3, 1)] {
            assert_eq!(b.over(uid, share, 0, limits, "p"), None, "user {uid}");
            assert!(b.over(uid, share + 1, 0, limits, "p").is_some(), "user {uid}");
            for k in 0..share {
                b.charge_ref(uid, 100 * uid as u64 + k as u64);
            }
        }
        assert_eq!(b.held(), 15);
        // Lookups' references are the others' too.
        b.charge_ref(LOOKUPS, 50);
        assert!(b.over(4, 1, 0, limits, "p").is_some());
        // A message with no rights passes whatever is held; regions are
        // counted on their own.
        assert_eq!(b.over(4, 0, 1, limits, "p"), None);
        b.charge_region(4, 1, 4096);
        assert!(b.over(4, 0, 1, limits, "p").unwrap().contains("regions"));
        // Let go, the room is back.
        for i in 0..8 {
            b.refund_export(i);
        }
        assert_eq!(b.held(), 8);
        assert_eq!(b.over(4, 1, 0, limits, "p"), None);
    }

    #[test]
    fn owners_count_each_users_share_as_things_come_and_go() {
        let mut o = Owners::default();
        o.insert(("a", 1), 7);
        o.insert(("b", 1), 7);
        o.insert(("c", 2), 8);
        assert_eq!((o.of(7), o.of(8), o.len()), (2, 1, 3));
        o.insert(("c", 2), 7);
        assert_eq!((o.of(7), o.of(8)), (3, 0), "charged again, to its new owner only");
        o.retain(|(_, i)| *i != 1);
        assert_eq!((o.of(7), o.len()), (1, 1));
        o.remove(&("c", 2));
        o.remove(&("c", 2));
        assert_eq!((o.of(7), o.len()), (0, 0));
        assert!(o.counts.is_empty(), "a user with nothing is forgotten");
        assert_eq!(share_left(16, 8), 4);
        assert_eq!(share_left(4, 9), 0);
    }

    #[test]
    fn exports_and_regions_are_counted_apart_and_per_user() {
        let mut b = Budgets::default();
        b.charge_ref(0, 1);
        b.charge_ref(0, 2);
        b.charge_ref(LOOKUPS, 2);
        assert_eq!(b.held(), 3, "lookups' references are held too");
        b.charge_region(0, 1, 4096);
        b.charge_region(1000, 2, 4096);
        assert_eq!(b.users(), vec![(0, (2, 1)), (1000, (0, 1))]);
        b.refund_region(1);
        b.refund_region(1);
        b.refund_export(1);
        assert_eq!(b.users(), vec![(0, (1, 0)), (1000, (0, 1))]);
        assert_eq!(b.held(), 2);
        b.refund_export(2);
        b.refund_region(2);
        assert!(b.users().is_empty());
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn address_space_of_regions_by_reference_is_shared_out() {
        let mut b = Budgets::default();
        let tib = 1u64 << 40;
        // Alone, a user may take half of the link's space.
        assert_eq!(b.space_over(1, LINK_REGION_SPACE / 2, "p"), None);
        assert!(b.space_over(1, LINK_REGION_SPACE / 2 + 1, "p").unwrap().contains("at most half"));
        for id in 0..8 {
            b.charge_region(1, id, tib);
        }
        assert!(b.space_over(1, 1, "p").is_some(), "eight TiB is user 1's half");
        // The next user finds half of what is left.
        assert_eq!(b.space_over(2, 4 * tib, "p"), None);
        assert!(b.space_over(2, 4 * tib + 1, "p").is_some());
        // Let go, the room is back, and the node's count with it.
        for id in 0..8 {
            b.refund_region(id);
        }
        assert_eq!(b.space_over(1, LINK_REGION_SPACE / 2, "p"), None);
        assert!(b.users().is_empty());
    }

    #[test]
    fn one_user_takes_at_most_half_of_the_nodes_address_space_over_all_links() {
        let tib = 1u64 << 40;
        // Users of their own: the count is the process's, shared with the
        // other tests.
        let (one, two) = (4_000_001, 4_000_002);
        let mut links: Vec<Budgets> = (0..5).map(|_| Budgets::default()).collect();
        for (i, b) in links.iter_mut().enumerate().take(4) {
            for id in 0..8 {
                assert_eq!(b.space_over(one, tib, "p"), None, "link {i}, region {id}");
                b.charge_region(one, id, tib);
            }
        }
        let why = links[4].space_over(one, tib, "p").expect("half of the node's space is user one's");
        assert!(why.contains("all links"), "{why}");
        assert_eq!(links[4].space_over(two, tib, "p"), None, "another user still finds room");
        // A link gone gives its space back.
        links.pop();
        links.pop();
        assert_eq!(Budgets::default().space_over(one, tib, "p"), None);
    }
}
