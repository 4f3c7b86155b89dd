//! Sets of page numbers whose cost grows with the pages in them, not with
//! the length of the range they are drawn from: what the object server
//! keeps per attached mapping (pages supplied, pages dirtied), where the
//! range's length is the client's claim.

use std::collections::BTreeMap;

/// Pages per chunk: one chunk's bits (512 bytes) cover 16 MiB of 4 KiB
/// pages.
const CHUNK: usize = 4096;
const WORDS: usize = CHUNK / 64;

/// A set of page numbers, kept as a bitmap in chunks of [`CHUNK`] pages
/// that are made as pages are added: dense where pages are many, nothing
/// where there are none.
#[derive(Debug, Default)]
pub(super) struct PageSet {
    chunks: BTreeMap<usize, Box<[u64; WORDS]>>,
}

impl PageSet {
    /// Whether page `p` is in the set.
    pub(super) fn contains(&self, p: usize) -> bool {
        self.chunks.get(&(p / CHUNK)).is_some_and(|c| c[p % CHUNK / 64] & (1 << (p % 64)) != 0)
    }

    /// Adds page `p`.
    pub(super) fn insert(&mut self, p: usize) {
        let c = self.chunks.entry(p / CHUNK).or_insert_with(|| Box::new([0; WORDS]));
        c[p % CHUNK / 64] |= 1 << (p % 64);
    }

    /// Adds pages `first..end`.
    pub(super) fn insert_range(&mut self, first: usize, end: usize) {
        (first..end).for_each(|p| self.insert(p));
    }

    /// Removes page `p` (a chunk left empty goes).
    pub(super) fn remove(&mut self, p: usize) {
        let key = p / CHUNK;
        if let Some(c) = self.chunks.get_mut(&key) {
            c[p % CHUNK / 64] &= !(1 << (p % 64));
            if c.iter().all(|w| *w == 0) {
                self.chunks.remove(&key);
            }
        }
    }

    /// The pages in the set, in ascending order.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.chunks.iter().flat_map(|(key, c)| {
            c.iter().enumerate().flat_map(move |(w, bits)| {
                (0..64).filter(move |b| bits & (1 << b) != 0).map(move |b| key * CHUNK + w * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PageSet;

    #[test]
    fn a_page_set_holds_what_was_added_in_order_and_costs_only_its_chunks() {
        let mut s = PageSet::default();
        let far = 1usize << 40;
        for p in [5, 4095, 4096, far, 63, 64] {
            s.insert(p);
        }
        s.insert_range(10, 13);
        assert!(s.contains(far) && s.contains(4096) && !s.contains(far - 1) && !s.contains(6));
        assert_eq!(s.iter().collect::<Vec<_>>(), [5, 10, 11, 12, 63, 64, 4095, 4096, far]);
        assert_eq!(s.chunks.len(), 3, "chunks for pages 0.., 4096.. and the far one only");
        s.remove(far);
        s.remove(7);
        assert!(!s.contains(far));
        assert_eq!(s.chunks.len(), 2, "an emptied chunk goes");
    }
}
