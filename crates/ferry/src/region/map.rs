//! The receiving side of a region: how to map it ([`MapOptions`]), what a
//! failed mapping gives back ([`MapError`]), and the mapping itself
//! ([`MappedRegion`]).

use std::fmt;
use std::ops::Deref;

use super::{Mode, Plain, RegionError, RegionItem};
use crate::port::SendOnceRight;
use crate::sys::mem::{self, Mapping};

/// How a receiver maps a region: when pages appear, where, and whether it
/// may write.
#[derive(Clone, Copy, Debug)]
pub struct MapOptions {
    pub(super) populate: bool,
    pub(super) same_address: bool,
    pub(super) writable: bool,
    pub(super) allow_sender_writes: bool,
    pub(super) limit: Option<usize>,
}

impl MapOptions {
    /// Pages appear on first touch: cheapest when the data is forwarded or
    /// only partly read.
    pub fn lazy() -> MapOptions {
        MapOptions { populate: false, same_address: false, writable: true, allow_sender_writes: false, limit: None }
    }

    /// Every page is mapped now (`MAP_POPULATE`): cheapest when all of it
    /// will be read.
    pub fn immediate() -> MapOptions {
        MapOptions { populate: true, ..MapOptions::lazy() }
    }

    /// Place the mapping at the address the region had in the sender
    /// (`MAP_FIXED_NOREPLACE`), so pointers inside it stay valid. Fails with
    /// [`RegionError::AddressTaken`] when the range is in use here.
    pub fn at_sender_address(mut self) -> MapOptions {
        self.same_address = true;
        self
    }

    /// Map read-only (by-value regions are otherwise writable, privately).
    pub fn read_only(mut self) -> MapOptions {
        self.writable = false;
        self
    }

    /// Refuse a region longer than `bytes` with [`RegionError::TooLarge`]
    /// (the region comes back in the [`MapError`]). The length is the
    /// sender's claim: a lazy mapping of it costs only address space, but an
    /// [`immediate`](Self::immediate) one allocates every page of it, so a
    /// receiver that populates regions from senders it does not trust sets
    /// the most it is willing to hold.
    pub fn limit(mut self, bytes: usize) -> MapOptions {
        self.limit = Some(bytes);
        self
    }

    /// Accept a lent or shared region, whose sender may still write what this
    /// process reads: only for peers you trust.
    pub fn allow_sender_writes(mut self) -> MapOptions {
        self.allow_sender_writes = true;
        self
    }
}

impl Default for MapOptions {
    fn default() -> MapOptions {
        MapOptions::lazy()
    }
}

/// A failed [`RegionItem::map`]: why, and the region back, untouched.
#[derive(Debug)]
pub struct MapError {
    /// Why mapping failed.
    pub error: RegionError,
    /// The region, to map differently or copy out.
    pub region: RegionItem,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for MapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// A received region mapped into this process. Unmapped on drop (a lent
/// region then returns to its pool).
#[derive(Debug)]
pub struct MappedRegion {
    pub(super) map: Mapping,
    pub(super) len: usize,
    pub(super) mode: Mode,
    /// Dropped after `map` (field order), so the lender learns of the return
    /// only once the mapping is gone.
    pub(super) _ret: Option<SendOnceRight>,
}

impl MappedRegion {
    /// The bytes. For a lent or shared region the sender may be changing
    /// them as you read (you opted in to that).
    pub fn as_slice(&self) -> &[u8] {
        &self.map.as_slice()[..self.len]
    }

    /// The bytes, writable; `None` when mapped read-only (always for lent
    /// regions) and for shared regions, which another process writes
    /// concurrently (use [`write_at`](Self::write_at) or the atomics). For a
    /// by-value region, writes stay in this process.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        if self.mode == Mode::Share {
            return None;
        }
        let len = self.len;
        self.map.as_mut_slice().map(|s| &mut s[..len])
    }

    /// Copies bytes at `offset` into `out` without forming a reference to
    /// memory another process may be writing; false if out of range.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        offset.checked_add(out.len()).is_some_and(|e| e <= self.len) && self.map.copy_out_racy(offset, out)
    }

    /// Copies `src` into the mapping at `offset` (shared regions: the sender
    /// sees it; by-value regions: only this process does); false if out of
    /// range or mapped read-only.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> bool {
        offset.checked_add(src.len()).is_some_and(|e| e <= self.len) && self.map.copy_in_racy(offset, src)
    }

    /// The bytes viewed as `T`s.
    pub fn as_slice_of<T: Plain>(&self) -> &[T] {
        self.map.as_typed(self.len)
    }

    /// The bytes viewed as mutable `T`s; `None` when mapped read-only or
    /// shared.
    pub fn as_mut_slice_of<T: Plain>(&mut self) -> Option<&mut [T]> {
        if self.mode == Mode::Share {
            return None;
        }
        self.map.as_typed_mut(self.len)
    }

    /// The words of a shared region as atomics, for producer/consumer
    /// protocols with the other side.
    pub fn as_atomic_u64(&self) -> &[std::sync::atomic::AtomicU64] {
        self.map.as_atomic_u64(self.len)
    }

    /// Address of the first byte here.
    pub fn addr(&self) -> usize {
        self.map.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mode it was sent in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether it is mapped writable.
    pub fn is_writable(&self) -> bool {
        self.map.is_writable()
    }

    /// Bytes the kernel maps with huge pages right now.
    pub fn huge_bytes_mapped(&self) -> u64 {
        mem::pmd_mapped_bytes(self.map.addr()).unwrap_or(0)
    }
}

impl Deref for MappedRegion {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::MapOptions;
    use crate::region::Region;
    use crate::{Item, Message, Timeout};

    /// `(Rss, Anonymous)` in kB of the mapping starting at `addr`, from
    /// `/proc/self/smaps`.
    fn rss_anon(addr: usize) -> (u64, u64) {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut inside = false;
        let (mut rss, mut anon) = (None, None);
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, _)) = first.split_once('-') {
                if !first.ends_with(':') && lo.chars().all(|c| c.is_ascii_hexdigit()) {
                    if inside {
                        break;
                    }
                    inside = usize::from_str_radix(lo, 16).ok() == Some(addr);
                    continue;
                }
            }
            let kb = || line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok());
            if inside && line.starts_with("Rss:") {
                rss = kb();
            }
            if inside && line.starts_with("Anonymous:") {
                anon = kb();
            }
        }
        (rss.expect("mapping found"), anon.expect("mapping found"))
    }

    /// An immediate mapping of a by-value region maps every page without
    /// copying any (populating a private writable mapping would otherwise
    /// break copy-on-write on every page); a write then copies one page.
    #[test]
    fn immediate_private_mapping_populates_without_copying() {
        let (mut rx, tx) = crate::port().expect("port");
        let mut r = Region::new(1 << 20).expect("region");
        r.as_mut_slice().fill(7);
        tx.send(Message::new(1).with_item(r.by_copy().expect("by copy")), Timeout::Infinite).expect("send");
        let mut m = rx.recv(Timeout::Infinite).expect("recv");
        let Some(Item::Region(item)) = m.take_items().pop() else { panic!("no region") };
        let mut view = item.map(MapOptions::immediate()).expect("map");
        assert!(view.is_writable());
        let (rss, anon) = rss_anon(view.addr());
        assert_eq!((rss, anon), (1024, 0), "every page mapped, none copied");
        view.as_mut_slice().expect("writable")[0] = 9;
        let (_, anon) = rss_anon(view.addr());
        assert_eq!(anon, crate::sys::mem::page_size() as u64 / 1024, "one page copied by the write");
        assert_eq!(r.as_slice()[0], 7);
        assert_eq!(view[1], 7);
    }
}
