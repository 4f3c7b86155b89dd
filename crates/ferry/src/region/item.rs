//! A region travelling in a message ([`RegionItem`]), and how a receiver
//! checks it before anything is acted on ([`check`]), maps it or copies it
//! out.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::SealFlags;

use super::{lend, MapError, MapOptions, MappedRegion, Mode, RegionError, SharedMapping, BY_VALUE_SEALS, SIZE_SEALS};
use crate::counters;
use crate::error::{io_err, WireError};
use crate::port::SendOnceRight;
use crate::sys::mem::{self, Mapping, Place, Share};
use crate::sys::socket;
use crate::wire::{self, ItemDesc};

/// An out-of-line region inside a message: made by a sender
/// ([`super::Region::by_copy`], [`super::Region::by_move`],
/// [`RegionItem::copied_from`], [`super::Lease::lend`],
/// [`super::SharedRegion::share`]) or received, already validated. A
/// received one can be mapped ([`map`](Self::map)), copied out
/// ([`copy_out`](Self::copy_out)), or forwarded in another message as it is
/// (no page is touched). Dropping it releases it (a lent region returns to
/// its pool).
pub struct RegionItem {
    mode: Mode,
    fd: OwnedFd,
    len: usize,
    addr: usize,
    flags: u32,
    slot: u64,
    /// Lent regions: the right whose destruction returns the region.
    ret: Option<SendOnceRight>,
    /// Lent regions not yet sent: the pool's bookkeeping.
    ticket: Option<lend::Ticket>,
}

impl fmt::Debug for RegionItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionItem")
            .field("mode", &self.mode)
            .field("len", &self.len)
            .field("sender_addr", &self.sender_address())
            .field("flags", &self.flags)
            .finish()
    }
}

impl RegionItem {
    pub(super) fn outgoing(mode: Mode, fd: OwnedFd, len: usize, addr: usize, huge: bool) -> RegionItem {
        let flags = if huge { wire::REGION_FLAG_HUGE } else { 0 };
        RegionItem { mode, fd, len, addr, flags, slot: 0, ret: None, ticket: None }
    }

    pub(super) fn lent(fd: OwnedFd, len: usize, addr: usize, slot: u64, ret: SendOnceRight, ticket: lend::Ticket, huge: bool) -> RegionItem {
        let flags = if huge { wire::REGION_FLAG_HUGE } else { 0 };
        RegionItem { mode: Mode::Lend, fd, len, addr, flags, slot, ret: Some(ret), ticket: Some(ticket) }
    }

    /// A by-value region holding a copy of `bytes`: ferry copies them once
    /// into a fresh sealed memfd (`pwrite`, no mapping), sent by move. The
    /// caller keeps `bytes`. Use it for data already in ordinary memory; for
    /// data you are about to produce, write it into a [`super::Region`] and
    /// save the copy.
    pub fn copied_from(bytes: &[u8]) -> Result<RegionItem, RegionError> {
        let len = bytes.len();
        let fd = super::new_memfd(len)?;
        mem::pwrite_all(fd.as_fd(), bytes, 0).map_err(|e| RegionError::Io(io_err(e)))?;
        counters::add(counters::BYTES_COPIED, bytes.len() as u64);
        mem::add_seals(fd.as_fd(), BY_VALUE_SEALS).map_err(|e| RegionError::Seal(io_err(e)))?;
        Ok(RegionItem::outgoing(Mode::Move, fd, len, 0, false))
    }

    pub(crate) fn mark_auto(mut self) -> RegionItem {
        self.flags |= wire::REGION_FLAG_AUTO;
        self
    }

    pub(crate) fn is_auto(&self) -> bool {
        self.flags & wire::REGION_FLAG_AUTO != 0
    }

    /// The transfer mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region holds no bytes (it then travels in wire-format
    /// version 2, see `docs/wire-format.md`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address the region had in its sender, if it gave one.
    pub fn sender_address(&self) -> Option<usize> {
        (self.addr != 0).then_some(self.addr)
    }

    /// Whether the sender asked for huge pages.
    pub fn huge_pages_hint(&self) -> bool {
        self.flags & wire::REGION_FLAG_HUGE != 0
    }

    /// For a lent region, the pool slot it came from.
    pub fn lend_slot(&self) -> Option<u64> {
        (self.mode == Mode::Lend).then_some(self.slot)
    }

    /// Maps a region sent by value (copy, move) into this process, private:
    /// writable unless [`MapOptions::read_only`], and a write copies just
    /// that page, so nobody else sees it. Nobody else can change it either,
    /// so it reads as an ordinary slice.
    ///
    /// # Errors
    /// The region comes back inside [`MapError`], so the caller can try
    /// again (say, anywhere instead of at the sender's address).
    /// [`RegionError::SenderMayWrite`] for a lent or shared region, whose
    /// sender can still change it: map it with [`map_shared`](Self::map_shared)
    /// or take a copy with [`copy_out`](Self::copy_out);
    /// [`RegionError::AddressTaken`] when same-address placement finds the
    /// range in use; [`RegionError::NoSenderAddress`];
    /// [`RegionError::TooLarge`] beyond [`MapOptions::limit`];
    /// [`RegionError::Map`].
    pub fn map(self, opts: MapOptions) -> Result<MappedRegion, MapError> {
        if !self.mode.is_by_value() {
            return Err(MapError { error: RegionError::SenderMayWrite(self.mode), region: self });
        }
        match self.try_map(&opts) {
            Ok(map) => {
                self.count_mapped(&opts, &map);
                // The mapping keeps the file alive; the descriptor closes here.
                Ok(MappedRegion { map, len: self.len, mode: self.mode })
            }
            Err(error) => Err(MapError { error, region: self }),
        }
    }

    /// Maps a region of any mode as a [`SharedMapping`], which never hands
    /// out a safe reference to its bytes: for a lent region (mapped
    /// read-only and shared) or a shared one (shared, writable unless
    /// [`MapOptions::read_only`] or its sender gave a read-only descriptor),
    /// whose sender may still write them. A by-value region is mapped as
    /// [`map`](Self::map) would.
    ///
    /// # Errors
    /// As [`map`](Self::map), without [`RegionError::SenderMayWrite`].
    pub fn map_shared(self, opts: MapOptions) -> Result<SharedMapping, MapError> {
        match self.try_map(&opts) {
            Ok(map) => {
                self.count_mapped(&opts, &map);
                let RegionItem { mode, len, ret, .. } = self;
                Ok(SharedMapping { map, len, mode, _ret: ret })
            }
            Err(error) => Err(MapError { error, region: self }),
        }
    }

    fn count_mapped(&self, opts: &MapOptions, map: &Mapping) {
        crate::trace::event!(debug, len = self.len, mode = ?self.mode, populate = opts.populate, "region mapped");
        counters::add(counters::BYTES_MAPPED, self.len as u64);
        if opts.populate {
            counters::add(counters::PAGES_POPULATED, (map.len() / mem::page_size()) as u64);
        }
    }

    fn try_map(&self, opts: &MapOptions) -> Result<Mapping, RegionError> {
        if let Some(limit) = opts.limit.filter(|&l| self.len > l) {
            return Err(RegionError::TooLarge { len: self.len as u64, limit: limit as u64 });
        }
        let place = if opts.same_address {
            Place::At(self.sender_address().ok_or(RegionError::NoSenderAddress)?)
        } else {
            Place::Anywhere
        };
        let (writable, share) = match self.mode {
            Mode::Copy | Mode::Move => (opts.writable, Share::Private),
            Mode::Lend => (false, Share::Shared),
            Mode::Share => (opts.writable && mem::is_writable_fd(self.fd.as_fd()), Share::Shared),
        };
        // An empty region still gets a page of address space (never readable
        // through the view, which is `len` bytes), so every view has an address.
        let len = mem::page_round_up(self.len.max(1));
        let map = Mapping::map(self.fd.as_fd(), len, writable, share, place, opts.populate).map_err(|e| match e {
            rustix::io::Errno::EXIST => RegionError::AddressTaken { addr: self.addr, len },
            e => RegionError::Map(io_err(e)),
        })?;
        if self.huge_pages_hint() {
            map.advise_huge();
        }
        Ok(map)
    }

    /// Copies the region's bytes into a new vector (`pread`; nothing is
    /// mapped) and releases the region (a lent one returns to its pool at
    /// once). For a lent or shared region the copy is private, but the
    /// sender may have been writing while it was taken.
    ///
    /// The length is the sender's claim (the memfd was checked to hold at
    /// least that many bytes, and sealed so it cannot shrink, but a sparse
    /// memfd of a petabyte costs its sender nothing): `limit` is the most
    /// this process is willing to hold, and nothing is allocated before the
    /// length is checked against it.
    ///
    /// # Errors
    /// [`RegionError::TooLarge`] when the region is longer than `limit`;
    /// [`RegionError::Alloc`] when the memory cannot be had; either way the
    /// region is released. [`RegionError::Io`] when reading fails.
    pub fn copy_out(self, limit: usize) -> Result<Vec<u8>, RegionError> {
        if self.len > limit {
            return Err(RegionError::TooLarge { len: self.len as u64, limit: limit as u64 });
        }
        let mut v = Vec::new();
        v.try_reserve_exact(self.len)
            .map_err(|e| RegionError::Alloc(std::io::Error::new(std::io::ErrorKind::OutOfMemory, e)))?;
        v.resize(self.len, 0);
        mem::pread_exact(self.fd.as_fd(), &mut v, 0).map_err(|e| RegionError::Io(io_err(e)))?;
        counters::add(counters::BYTES_COPIED, self.len as u64);
        Ok(v)
    }

    /// Reads the bytes at `offset` into `out` (`pread`; nothing is mapped)
    /// and keeps the region. Holes of a sparse region read as zeros and
    /// stay holes, where reading them through a mapping allocates a page of
    /// memory for each in the region's file. For a lent or shared region
    /// the bytes are whatever its sender has written by then.
    ///
    /// # Errors
    /// [`RegionError::TooLong`] when the range leaves the region (nothing
    /// is read); [`RegionError::Io`] when reading fails.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), RegionError> {
        let end = offset.checked_add(out.len()).filter(|&e| e <= self.len);
        if end.is_none() {
            return Err(RegionError::TooLong { asked: offset.saturating_add(out.len()), max: self.len });
        }
        mem::pread_exact(self.fd.as_fd(), out, offset as u64).map_err(|e| RegionError::Io(io_err(e)))
    }

    /// Descriptors that travel with this item, in wire order.
    pub(crate) fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        std::iter::once(self.fd.as_fd()).chain(self.ret.as_ref().map(|r| r.sock.as_fd()))
    }

    /// Its wire descriptor.
    pub(crate) fn describe(&self) -> ItemDesc {
        ItemDesc {
            kind: wire::KIND_REGION,
            mode: self.mode.wire(),
            fds: 1 + self.ret.is_some() as u16,
            flags: self.flags,
            len: self.len as u64,
            addr: self.addr as u64,
            aux: if self.mode == Mode::Lend { self.slot } else { 0 },
        }
    }

    /// The kernel has taken its references: release ours, and tell a pool
    /// its slot is now out.
    pub(crate) fn sent(mut self) {
        counters::add(&counters::REGIONS_SENT[self.mode.index()], 1);
        if let Some(t) = self.ticket.take() {
            t.sent();
        }
    }
}

/// Checks a received region item's descriptors before anything is acted
/// on: the memory descriptor must be a memfd at least as long as claimed,
/// sealed against shrinking and growing, and, for a region sent by value,
/// against writing; a lent region's second descriptor must be a port.
pub(crate) fn check(item: usize, d: &ItemDesc, fds: &[OwnedFd]) -> Result<(), WireError> {
    let r = check_inner(item, d, fds);
    if r.is_err() {
        counters::add(counters::REGIONS_REJECTED, 1);
    }
    r
}

fn check_inner(item: usize, d: &ItemDesc, fds: &[OwnedFd]) -> Result<(), WireError> {
    let bad = |reason: String| WireError::BadRegion { item, reason };
    let mode = Mode::from_wire(d.mode).ok_or_else(|| bad(format!("unknown mode {}", d.mode)))?;
    let fd = fds[0].as_fd();
    if !mem::is_shmem(fd) || !mem::is_memfd(fd) {
        return Err(bad("descriptor is not a memfd".into()));
    }
    let seals = mem::seals(fd).map_err(|e| bad(format!("cannot read seals: {e}")))?;
    if mode.is_by_value() && !seals.contains(SealFlags::WRITE) {
        return Err(WireError::NotSealed { item });
    }
    if !seals.contains(SIZE_SEALS) {
        return Err(if mode.is_by_value() {
            WireError::NotSealed { item }
        } else {
            bad("memfd is not sealed against shrinking and growing".into())
        });
    }
    let size = mem::file_size(fd).map_err(|e| bad(format!("cannot stat: {e}")))?;
    if size < d.len {
        return Err(bad(format!("claims {} bytes but the memfd holds {size}", d.len)));
    }
    if mode == Mode::Lend && !socket::is_unix_seqpacket(fds[1].as_fd()) {
        return Err(WireError::NotAPort { item });
    }
    Ok(())
}

/// Turns a checked region item into a [`RegionItem`]. Cannot fail.
pub(crate) fn raise(d: &ItemDesc, mut fds: Vec<OwnedFd>) -> RegionItem {
    let mode = Mode::from_wire(d.mode).expect("checked");
    counters::add(&counters::REGIONS_RECEIVED[mode.index()], 1);
    let ret = (fds.len() > 1).then(|| SendOnceRight::from_fd(fds.pop().expect("two descriptors")));
    RegionItem {
        mode,
        fd: fds.pop().expect("one descriptor"),
        len: d.len as usize,
        addr: d.addr as usize,
        flags: d.flags,
        slot: d.aux,
        ret,
        ticket: None,
    }
}
