//! Lend pools: trusted streaming without fresh pages (what iceoryx2 does for
//! everyone, here only between peers that opt in).
//!
//! A [`LendPool`] owns a fixed set of memfds, each mapped shared and
//! writable here once, then sealed against shrinking, growing and future
//! writes (`F_SEAL_FUTURE_WRITE`) and against further sealing.
//! [`LendPool::acquire`] hands one out as a [`Lease`] to fill; [`Lease::lend`]
//! makes the item. The item carries a read-only descriptor of the memfd and
//! the sending end of a fresh send-once socket whose other end the pool
//! keeps. When the borrower drops the region, or dies, that socket reads
//! end-of-file and the slot is free again: the return notice needs no
//! cooperation from the borrower.
//!
//! # What a borrower can and cannot do
//! Only the pool's own mappings, made before the seal, can write a slot.
//! The kernel refuses every other write path to everybody, whatever the
//! descriptor's access mode: `write`/`pwrite`, a new shared writable
//! mapping, `mprotect` to writable of a shared mapping, reopening the
//! descriptor through `/proc/self/fd` for writing and then doing any of
//! these, `ftruncate`, and `fallocate` (hole punching or growing). So a
//! borrower, even one that keeps the descriptor after it returned the slot,
//! can change neither the frame it borrowed nor any later frame written
//! into the same slot. It can read them: a borrower that keeps the
//! descriptor, or a mapping, sees later frames of that slot too, so lend
//! only to peers trusted with every frame of the stream. And the lender
//! writes the slot again once it is returned, so what a borrower maps can
//! change under it after it returned it; before, it holds still.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use super::{new_memfd, Plain, RegionError, RegionItem, HUGE_THRESHOLD, SIZE_SEALS};
use crate::error::io_err;
use crate::port::SendOnceRight;
use crate::sys::mem::{self, Mapping, Place, Share};
use crate::sys::socket;
use crate::sys::wait::{self, Interest};
use crate::timeout::Timeout;

/// Seals of a pool memfd: fixed size, no writes but through the pool's own
/// mappings made before sealing, no further seals.
const LEND_SEALS: rustix::fs::SealFlags =
    SIZE_SEALS.union(rustix::fs::SealFlags::FUTURE_WRITE).union(rustix::fs::SealFlags::SEAL);

#[derive(Debug)]
enum Slot {
    /// In the pool, ready to lease.
    Free(Mapping),
    /// Leased to this process's code, or in a message not yet sent.
    Held,
    /// Sent; `back` reads end-of-file once the borrower is done. Shared
    /// with a thread waiting for it in [`LendPool::acquire`], which must
    /// not see it closed under it.
    Lent { back: Arc<OwnedFd>, map: Mapping },
}

#[derive(Debug)]
struct Files {
    /// The memfd as created (read-write access mode, though the seal now
    /// refuses every write but through the pool's own mappings).
    _rw: OwnedFd,
    /// Read-only description of the same memfd, handed to borrowers.
    ro: OwnedFd,
}

#[derive(Debug)]
struct Shared {
    slot_len: usize,
    files: Vec<Files>,
    slots: Mutex<Vec<Slot>>,
}

impl Shared {
    fn put_back(&self, slot: usize, map: Mapping) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots[slot] = Slot::Free(map);
    }
}

/// A fixed set of regions lent out in turn to trusted receivers; a stream of
/// frames through it never allocates fresh pages.
#[derive(Debug, Clone)]
pub struct LendPool {
    shared: Arc<Shared>,
}

impl LendPool {
    /// A pool of `count` regions of `slot_len` bytes each, allocated now.
    pub fn new(count: usize, slot_len: usize) -> Result<LendPool, RegionError> {
        let slot_len = slot_len.max(1);
        let mut files = Vec::with_capacity(count);
        let mut slots = Vec::with_capacity(count);
        for _ in 0..count {
            let rw = new_memfd(slot_len)?;
            let ro = mem::reopen_read_only(rw.as_fd()).map_err(|e| RegionError::Alloc(io_err(e)))?;
            // The pool's writable mapping first: once the memfd is sealed
            // against future writes, no new one can be made, by anybody.
            let map = Mapping::map(rw.as_fd(), mem::page_round_up(slot_len), true, Share::Shared, Place::Anywhere, false)
                .map_err(|e| RegionError::Alloc(io_err(e)))?;
            mem::add_seals(rw.as_fd(), LEND_SEALS).map_err(|e| RegionError::Seal(io_err(e)))?;
            if slot_len >= HUGE_THRESHOLD {
                // Like a large Region: huge pages where the system allows
                // shmem huge pages (the borrower is told to ask too).
                map.advise_huge();
            }
            files.push(Files { _rw: rw, ro });
            slots.push(Slot::Free(map));
        }
        Ok(LendPool { shared: Arc::new(Shared { slot_len, files, slots: Mutex::new(slots) }) })
    }

    /// Number of regions in the pool.
    pub fn capacity(&self) -> usize {
        self.shared.files.len()
    }

    /// Size of each region.
    pub fn slot_len(&self) -> usize {
        self.shared.slot_len
    }

    /// Regions ready to lease now (after collecting returns).
    pub fn available(&self) -> usize {
        let mut slots = self.lock();
        reap(&mut slots);
        slots.iter().filter(|s| matches!(s, Slot::Free(_))).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.shared.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Leases a free region, waiting as `timeout` allows for a borrower to
    /// return one. Its contents are whatever the last frame left.
    ///
    /// # Errors
    /// [`RegionError::PoolExhausted`] when none came back in time.
    pub fn acquire(&self, timeout: Timeout) -> Result<Lease, RegionError> {
        let deadline = timeout.deadline();
        loop {
            let waits: Vec<Arc<OwnedFd>> = {
                let mut slots = self.lock();
                reap(&mut slots);
                if let Some(i) = slots.iter().position(|s| matches!(s, Slot::Free(_))) {
                    let Slot::Free(map) = std::mem::replace(&mut slots[i], Slot::Held) else { unreachable!() };
                    return Ok(Lease { pool: self.shared.clone(), slot: i, map: Some(map), len: self.shared.slot_len });
                }
                slots
                    .iter()
                    .filter_map(|s| match s {
                        Slot::Lent { back, .. } => Some(back.clone()),
                        _ => None,
                    })
                    .collect()
            };
            if matches!(timeout, Timeout::Zero) || deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(RegionError::PoolExhausted);
            }
            if waits.is_empty() {
                // Every slot is held by this process: only a drop here frees one.
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            let fds: Vec<_> = waits.iter().map(|f| (f.as_fd(), Interest::Readable)).collect();
            wait::poll_many(&fds, deadline).map_err(|e| RegionError::Io(io_err(e)))?;
        }
    }
}

/// Frees every lent slot whose borrower is done: one `poll` over all the
/// lent slots, not one each (a pool most of whose slots a slow receiver
/// holds paid a system call per held slot on every acquire).
fn reap(slots: &mut [Slot]) {
    let lent: Vec<usize> = (0..slots.len()).filter(|&i| matches!(slots[i], Slot::Lent { .. })).collect();
    if lent.is_empty() {
        return;
    }
    let done: Vec<usize> = {
        let fds: Vec<_> = lent
            .iter()
            .filter_map(|&i| match &slots[i] {
                Slot::Lent { back, .. } => Some((back.as_fd(), Interest::Readable)),
                _ => None,
            })
            .collect();
        let Ok(ready) = wait::poll_many(&fds, Timeout::Zero.deadline()) else { return };
        lent.iter().zip(ready).filter(|(_, r)| r.any()).map(|(&i, _)| i).collect()
    };
    for i in done {
        if let Slot::Lent { map, .. } = std::mem::replace(&mut slots[i], Slot::Held) {
            slots[i] = Slot::Free(map);
        }
    }
}

/// A pool region leased to this process: fill it, then [`lend`](Self::lend)
/// it. Dropped without lending, it goes straight back to the pool.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<Shared>,
    slot: usize,
    map: Option<Mapping>,
    len: usize,
}

impl Lease {
    /// The slot's bytes (up to the frame length set, initially the slot size).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.map.as_mut().expect("held").as_mut_slice().expect("writable")[..len]
    }

    /// The slot's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.map.as_ref().expect("held").as_slice()[..self.len]
    }

    /// The slot's bytes viewed as `T`s (slots are page aligned, so any
    /// [`Plain`] type fits); a trailing partial element is left out.
    pub fn as_slice_of<T: Plain>(&self) -> &[T] {
        self.map.as_ref().expect("held").as_typed(self.len)
    }

    /// The slot's bytes viewed as mutable `T`s.
    pub fn as_mut_slice_of<T: Plain>(&mut self) -> &mut [T] {
        let len = self.len;
        self.map.as_mut().expect("held").as_typed_mut(len).expect("writable")
    }

    /// A writer over the slot's bytes from the start (`std::io::Write`,
    /// `Seek`); a write past the end fails with `WriteZero`. Set the frame
    /// length from its position once done:
    /// `lease.set_len(w.position() as usize)`.
    pub fn writer(&mut self) -> std::io::Cursor<&mut [u8]> {
        std::io::Cursor::new(self.as_mut_slice())
    }

    /// Sets how many bytes the receiver will see (at most the slot size;
    /// 0 lends an empty frame).
    ///
    /// # Errors
    /// [`RegionError::TooLong`] beyond the slot size.
    pub fn set_len(&mut self, len: usize) -> Result<(), RegionError> {
        if len > self.pool.slot_len {
            return Err(RegionError::TooLong { asked: len, max: self.pool.slot_len });
        }
        self.len = len;
        Ok(())
    }

    /// Which slot of the pool this is.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Makes the item that lends this region. Once the message is sent the
    /// slot is out until the borrower drops it; if the message is dropped
    /// unsent, the slot comes straight back.
    pub fn lend(mut self) -> Result<RegionItem, RegionError> {
        let ro = socket::dup(self.pool.files[self.slot].ro.as_fd()).map_err(|e| RegionError::Alloc(io_err(e)))?;
        let (back, give) = socket::seqpacket_pair().map_err(|e| RegionError::Alloc(io_err(e)))?;
        let map = self.map.take().expect("held");
        let addr = map.addr();
        let ticket = Ticket { pool: self.pool.clone(), slot: self.slot, map: Some(map), back: Some(back) };
        let huge = self.pool.slot_len >= HUGE_THRESHOLD;
        Ok(RegionItem::lent(ro, self.len, addr, self.slot as u64, SendOnceRight::from_fd(give), ticket, huge))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            self.pool.put_back(self.slot, map);
        }
    }
}

/// A lent region in a message not yet sent: the pool's side of it.
#[derive(Debug)]
pub(crate) struct Ticket {
    pool: Arc<Shared>,
    slot: usize,
    map: Option<Mapping>,
    back: Option<OwnedFd>,
}

impl Ticket {
    /// The message left: the slot is out until `back` reads end-of-file.
    pub(crate) fn sent(mut self) {
        let (Some(map), Some(back)) = (self.map.take(), self.back.take()) else { return };
        let mut slots = self.pool.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots[self.slot] = Slot::Lent { back: Arc::new(back), map };
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            self.pool.put_back(self.slot, map);
        }
    }
}
