//! The receiving side of a region: how to map it ([`MapOptions`]), what a
//! failed mapping gives back ([`MapError`]), and the mappings themselves:
//! [`MappedRegion`] for a region sent by value, which nobody else can change
//! and which is therefore an ordinary `&[u8]`, and [`SharedMapping`] for a
//! lent or shared region, which its sender may change under this process's
//! feet: its bytes are copied out ([`SharedMapping::read_at`],
//! [`SharedMapping::to_vec`]), used through atomics, or borrowed only
//! through an `unsafe` accessor whose caller vouches for the sender.

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
    pub(super) limit: Option<usize>,
}

impl MapOptions {
    /// Pages appear on first touch: cheapest when the data is forwarded or
    /// only partly read.
    pub fn lazy() -> MapOptions {
        MapOptions { populate: false, same_address: false, writable: true, limit: None }
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

/// A region received by value (copy or move) and mapped into this process,
/// privately: nobody else can change a byte of it (the memfd is sealed
/// against writes and resizing, and this process's own writes copy the page
/// first), so it is read as an ordinary slice. Unmapped on drop.
#[derive(Debug)]
pub struct MappedRegion {
    pub(super) map: Mapping,
    pub(super) len: usize,
    pub(super) mode: Mode,
}

impl MappedRegion {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.map.as_slice()[..self.len]
    }

    /// The bytes, writable; `None` when mapped read-only. Writes stay in
    /// this process.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        let len = self.len;
        self.map.as_mut_slice().map(|s| &mut s[..len])
    }

    /// Copies bytes at `offset` into `out`; false if out of range.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        match offset.checked_add(out.len()) {
            Some(end) if end <= self.len => {
                out.copy_from_slice(&self.as_slice()[offset..end]);
                true
            }
            _ => false,
        }
    }

    /// Copies `src` into the mapping at `offset` (only this process sees
    /// it); false if out of range or mapped read-only.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> bool {
        match (offset.checked_add(src.len()), self.as_mut_slice()) {
            (Some(end), Some(s)) if end <= s.len() => {
                s[offset..end].copy_from_slice(src);
                true
            }
            _ => false,
        }
    }

    /// The bytes viewed as `T`s.
    pub fn as_slice_of<T: Plain>(&self) -> &[T] {
        self.map.as_typed(self.len)
    }

    /// The bytes viewed as mutable `T`s; `None` when mapped read-only.
    pub fn as_mut_slice_of<T: Plain>(&mut self) -> Option<&mut [T]> {
        self.map.as_typed_mut(self.len)
    }

    /// A reader over the bytes (`std::io::Read`, `BufRead`, `Seek`).
    pub fn reader(&self) -> std::io::Cursor<&[u8]> {
        std::io::Cursor::new(self.as_slice())
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

impl AsRef<[u8]> for MappedRegion {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A lent or shared region mapped into this process ([`RegionItem::map_shared`]).
/// Its sender can still change the bytes (a shared region by design; a lent
/// one because the lender owns the memory), so no safe `&[u8]` or `&mut [u8]`
/// is handed out: a Rust reference promises the bytes do not change while it
/// lives, which only the sender could keep. Copy bytes out with
/// [`read_at`](Self::read_at) or [`to_vec`](Self::to_vec) (a copy may mix
/// bytes from before and after a concurrent write), write a shared one with
/// [`write_at`](Self::write_at), coordinate through
/// [`as_atomic_u64`](Self::as_atomic_u64), or borrow through the `unsafe`
/// [`as_slice`](Self::as_slice) when the sender is trusted not to write.
/// Unmapped on drop; a lent region then returns to its pool.
#[derive(Debug)]
pub struct SharedMapping {
    pub(super) map: Mapping,
    pub(super) len: usize,
    pub(super) mode: Mode,
    /// Dropped after `map` (field order), so the lender learns of the return
    /// only once the mapping is gone.
    pub(super) _ret: Option<SendOnceRight>,
}

impl SharedMapping {
    /// The bytes as a slice.
    ///
    /// # Safety
    /// No process may write these bytes while the returned reference lives.
    /// For a lent region from ferry's own [`super::LendPool`] that holds
    /// while the region is out (the pool never hands a lent slot to its
    /// lender's code before the borrower returns it), so the caller vouches
    /// that the lender is that, unmodified; for a shared region the caller
    /// must know the other side is not writing (by a protocol of its own).
    /// A write during the borrow is undefined behaviour in this process,
    /// not merely a torn read.
    // `unsafe` marks the caller's promise; the body has no unsafe operation.
    #[allow(unsafe_code)]
    pub unsafe fn as_slice(&self) -> &[u8] {
        &self.map.as_slice()[..self.len]
    }

    /// The bytes viewed as `T`s.
    ///
    /// # Safety
    /// As [`as_slice`](Self::as_slice).
    #[allow(unsafe_code)]
    pub unsafe fn as_slice_of<T: Plain>(&self) -> &[T] {
        self.map.as_typed(self.len)
    }

    /// Copies bytes at `offset` into `out` without forming a reference to
    /// memory another process may be writing; false if out of range.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        offset.checked_add(out.len()).is_some_and(|e| e <= self.len) && self.map.copy_out_racy(offset, out)
    }

    /// Copies all the bytes into a new vector (a private snapshot; bytes the
    /// sender writes meanwhile may be mixed in).
    ///
    /// # Errors
    /// [`RegionError::TooLarge`] when the region is longer than `limit`
    /// (its length is the sender's claim); [`RegionError::Alloc`] when the
    /// memory cannot be had. Nothing is allocated before the check.
    pub fn to_vec(&self, limit: usize) -> Result<Vec<u8>, RegionError> {
        if self.len > limit {
            return Err(RegionError::TooLarge { len: self.len as u64, limit: limit as u64 });
        }
        let mut v = Vec::new();
        v.try_reserve_exact(self.len)
            .map_err(|e| RegionError::Alloc(std::io::Error::new(std::io::ErrorKind::OutOfMemory, e)))?;
        v.resize(self.len, 0);
        self.map.copy_out_racy(0, &mut v);
        Ok(v)
    }

    /// Copies `src` into the mapping at `offset`, where the sender sees it;
    /// false if out of range or not writable (lent regions never are).
    pub fn write_at(&self, offset: usize, src: &[u8]) -> bool {
        offset.checked_add(src.len()).is_some_and(|e| e <= self.len) && self.map.copy_in_racy(offset, src)
    }

    /// The 64-bit words as atomics, for producer/consumer protocols with
    /// the other side (sound whatever it writes); `None` unless mapped
    /// writable, since an atomic may write.
    pub fn as_atomic_u64(&self) -> Option<&[std::sync::atomic::AtomicU64]> {
        self.is_writable().then(|| self.map.as_atomic_u64(self.len))
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

    /// Whether it is mapped writable (a shared region whose sender gave a
    /// writable descriptor, unless mapped read-only).
    pub fn is_writable(&self) -> bool {
        self.map.is_writable()
    }

    /// Bytes the kernel maps with huge pages right now.
    pub fn huge_bytes_mapped(&self) -> u64 {
        mem::pmd_mapped_bytes(self.map.addr()).unwrap_or(0)
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
