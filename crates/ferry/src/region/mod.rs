//! Out-of-line memory regions: ferry-owned memory backed by a memfd, sent by
//! value without copying bytes (see `docs/regions.md`).
//!
//! A [`Region`] is memory this process writes as an ordinary `&mut [u8]`.
//! Attaching it to a message makes a [`RegionItem`] in one of four modes
//! ([`Mode`]): **copy** ([`Region::by_copy`]: both sides keep a logical copy,
//! pages shared copy-on-write), **move** ([`Region::by_move`]: the sender
//! gives its copy up), **lend** ([`LendPool`]: trusted streaming from a
//! reusable pool) and **share** ([`SharedRegion`]: explicitly shared mutable
//! memory). A [`RegionPool`] makes fresh regions ahead of use, on a thread
//! of its own, for senders that produce frame after frame. Ordinary memory is sent with [`RegionItem::copied_from`] (one
//! copy, named so) or through [`auto`], which picks inline bytes below a
//! crossover measured on the machine.
//!
//! The receiver gets `Item::Region(RegionItem)` already validated: a by-value
//! region is a memfd sealed against writes, shrinking and growing, at least as
//! long as it claims, so nobody, not even a hostile sender that kept the
//! descriptor, can change a byte the receiver sees. It then calls
//! [`RegionItem::map`] (lazy or immediate, anywhere or at the sender's
//! address) or [`RegionItem::copy_out`].

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::SealFlags;

use crate::counters;
use crate::error::io_err;
use crate::sys::mem::{self, Mapping, Place, Share};

pub mod auto;
mod item;
mod lend;
mod map;
mod pool;
mod share;

pub use crate::sys::mem::Plain;
pub use item::RegionItem;
pub use map::{MapError, MapOptions, MappedRegion, SharedMapping};
pub use lend::{LendPool, Lease};
pub use pool::RegionPool;
pub use share::SharedRegion;

pub(crate) use item::{check, raise};

/// How a region travels (Accent's MoveWords options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// By value: sender and receiver each keep a logical copy; pages are
    /// shared until either side writes one (copy-on-write).
    Copy,
    /// By value: the sender gave its copy up when it sent the region.
    Move,
    /// Lent from the sender's pool: read-only for the receiver, returned to
    /// the pool when the receiver drops it. The sender may reuse it after.
    Lend,
    /// Explicitly shared mutable memory: both sides see each other's writes.
    Share,
}

impl Mode {
    pub(crate) fn wire(self) -> u8 {
        match self {
            Mode::Copy => crate::wire::MODE_COPY,
            Mode::Move => crate::wire::MODE_MOVE,
            Mode::Lend => crate::wire::MODE_LEND,
            Mode::Share => crate::wire::MODE_SHARE,
        }
    }

    pub(crate) fn from_wire(m: u8) -> Option<Mode> {
        Some(match m {
            crate::wire::MODE_COPY => Mode::Copy,
            crate::wire::MODE_MOVE => Mode::Move,
            crate::wire::MODE_LEND => Mode::Lend,
            crate::wire::MODE_SHARE => Mode::Share,
            _ => return None,
        })
    }

    /// Index into the per-mode counters.
    pub(crate) fn index(self) -> usize {
        self.wire() as usize - 1
    }

    /// Whether the receiver gets a copy nobody else can change.
    pub fn is_by_value(self) -> bool {
        matches!(self, Mode::Copy | Mode::Move)
    }
}

/// Why a region operation failed.
#[derive(Debug)]
pub enum RegionError {
    /// The memory or descriptor for a region could not be had (out of memory,
    /// out of descriptors, or a size the system refuses).
    Alloc(io::Error),
    /// The memfd could not be sealed. `EBUSY` means something still holds a
    /// writable shared mapping of it or has pages pinned for I/O: finish
    /// that I/O first. (A child just forked by another thread holds the
    /// parent's mappings until it execs; sealing a region of this process's
    /// own waits a bounded time for that before failing.)
    Seal(io::Error),
    /// Same-address placement was asked for but something is already mapped
    /// in `[addr, addr+len)` here. Map it anywhere instead, or free the range.
    AddressTaken {
        /// The sender's address.
        addr: usize,
        /// Length of the range.
        len: usize,
    },
    /// Same-address placement was asked for but the sender gave no address.
    NoSenderAddress,
    /// The region was lent or shared: its sender can still change what this
    /// process would see, so it cannot be mapped as a [`MappedRegion`]. Map
    /// it with [`RegionItem::map_shared`], or take a private copy with
    /// [`RegionItem::copy_out`].
    SenderMayWrite(Mode),
    /// Mapping the region failed for another reason.
    Map(io::Error),
    /// Reading or writing a region's descriptor failed.
    Io(io::Error),
    /// Every region of a lend pool is still out, and stayed out until the
    /// timeout.
    PoolExhausted,
    /// A received region is longer than the receiver is willing to hold
    /// (the `limit` it passed to [`RegionItem::copy_out`] or
    /// [`MapOptions::limit`]). Its sender chose
    /// the length; nothing was allocated.
    TooLarge {
        /// The region's length, as its sender declared it.
        len: u64,
        /// The most the receiver accepts.
        limit: u64,
    },
    /// A length larger than the region or pool slot allows.
    TooLong {
        /// Length asked for.
        asked: usize,
        /// Largest allowed.
        max: usize,
    },
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionError::Alloc(e) => write!(f, "cannot allocate region memory: {e} (out of memory or descriptors?)"),
            RegionError::Seal(e) => write!(f, "cannot seal region: {e} (is a writable shared mapping or pinned I/O still live?)"),
            RegionError::AddressTaken { addr, len } => {
                write!(f, "cannot place region at the sender's address {addr:#x} (+{len}): the range is in use here; map it anywhere instead")
            }
            RegionError::NoSenderAddress => write!(f, "the sender gave no address for same-address placement; map it anywhere"),
            RegionError::SenderMayWrite(m) => write!(
                f,
                "region was sent in {m:?} mode, so its sender may still write it: map it with map_shared(), or copy_out(limit)"
            ),
            RegionError::Map(e) => write!(f, "cannot map region: {e}"),
            RegionError::Io(e) => write!(f, "region i/o failed: {e}"),
            RegionError::PoolExhausted => write!(f, "every region of the lend pool is still out; wait longer or make the pool larger"),
            RegionError::TooLarge { len, limit } => {
                write!(f, "region of {len} bytes exceeds the {limit} bytes this receiver accepts; map it lazily or refuse it")
            }
            RegionError::TooLong { asked, max } => write!(f, "length {asked} exceeds the region's {max} bytes"),
        }
    }
}

impl std::error::Error for RegionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RegionError::Alloc(e) | RegionError::Seal(e) | RegionError::Map(e) | RegionError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Seals a by-value region carries: nobody can write, shrink or grow it, nor
/// change its seals.
pub(crate) const BY_VALUE_SEALS: SealFlags =
    SealFlags::WRITE.union(SealFlags::SHRINK).union(SealFlags::GROW).union(SealFlags::SEAL);
/// Seals every region carries so a receiver's mapping can never fault past
/// the end of the file (`SIGBUS`).
pub(crate) const SIZE_SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW);

/// Options for a new region.
#[derive(Clone, Copy, Debug, Default)]
pub struct RegionOptions {
    /// Ask for transparent huge pages (`MADV_HUGEPAGE`) on this region's
    /// mappings, and tell the receiver to ask too. Takes effect only where
    /// the system allows shmem huge pages (see [`shmem_huge_pages`]);
    /// elsewhere it changes nothing. [`Region::new`] sets it for regions of
    /// 2 MiB and more.
    pub huge_pages: bool,
    /// Allocate and map every page now, so that writing the region takes
    /// no page fault (see [`Region::with_options`]). What a fresh page costs
    /// is paid here, before the bytes are produced, which is what a
    /// [`RegionPool`] does on its own thread.
    pub populate: bool,
}

impl RegionOptions {
    /// The options [`Region::new`] uses for `len` bytes: huge pages from
    /// [`HUGE_THRESHOLD`] on, pages allocated on first touch.
    pub fn for_len(len: usize) -> RegionOptions {
        RegionOptions { huge_pages: len >= HUGE_THRESHOLD, populate: false }
    }

    /// The same, with every page allocated and mapped up front.
    pub fn populated(mut self) -> RegionOptions {
        self.populate = true;
        self
    }
}

/// The system's shmem transparent-huge-page policy, as
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` shows it: `never`
/// (the usual default: regions use base pages), `advise` (regions that ask,
/// which large ones do, get huge pages), `always`, `within_size`, `deny` or
/// `force`; `None` without THP support. Enable with
/// `echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled`.
pub fn shmem_huge_pages() -> Option<String> {
    mem::shmem_thp_policy()
}

/// Size from which [`Region::new`] asks for huge pages.
pub const HUGE_THRESHOLD: usize = 2 << 20;

/// Where the sender's view of a region stands.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Shared writable mapping of an unsealed memfd only this process holds.
    Open,
    /// Private mapping of a sealed memfd; `dirty` once the sender may have
    /// written its private copy since the memfd was sealed.
    Sealed { dirty: bool },
}

/// Memory ferry allocated from a memfd, writable by this process as an
/// ordinary slice, to be sent out of line.
///
/// ```
/// use ferry::{region::{Region, MapOptions}, Item, Message, Timeout};
/// let (mut rx, tx) = ferry::port()?;
/// let mut r = Region::new(1 << 20)?;
/// r.as_mut_slice()[..5].copy_from_slice(b"hello");
/// tx.send(Message::new(1).with_item(r.by_copy()?), Timeout::Infinite)?;
/// r.as_mut_slice()[0] = b'j'; // the receiver never sees this
/// let mut m = rx.recv(Timeout::Infinite)?;
/// let Some(Item::Region(inc)) = m.take_items().pop() else { unreachable!() };
/// let view = inc.map(MapOptions::lazy())?;
/// assert_eq!(&view[..5], b"hello");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Region {
    fd: OwnedFd,
    map: Mapping,
    len: usize,
    huge: bool,
    state: State,
}

impl Region {
    /// Allocates a zeroed region of `len` bytes (possibly none). Pages are
    /// allocated on first touch. Regions of [`HUGE_THRESHOLD`] bytes or more
    /// ask for huge pages.
    ///
    /// # Errors
    /// [`RegionError::Alloc`] when the memfd or mapping cannot be made.
    pub fn new(len: usize) -> Result<Region, RegionError> {
        Region::with_options(len, RegionOptions::for_len(len))
    }

    /// Allocates a zeroed region with explicit options.
    ///
    /// With [`RegionOptions::populate`] every page is allocated and mapped
    /// before this returns. Where huge pages were asked for and the system's
    /// shmem policy grants them to regions that ask ([`shmem_huge_pages`] is
    /// `advise`, `always`, `within_size` or `force`), the pages are made
    /// through the fault path (`MADV_POPULATE_WRITE`), which takes huge
    /// pages; otherwise zeros are written into the memfd (allocating its
    /// pages, no mapping involved) and the pages are mapped by reading one
    /// byte of each, whose faults map whole blocks of pages at once. Either
    /// way cheaper than a write fault per base page, and an allocation
    /// failure is a [`RegionError::Alloc`] here rather than a fault later.
    ///
    /// # Errors
    /// [`RegionError::Alloc`] when the memfd, the mapping or (populated)
    /// the pages cannot be had.
    pub fn with_options(len: usize, opts: RegionOptions) -> Result<Region, RegionError> {
        let fd = new_memfd(len)?;
        // An empty region still maps a page (never reachable through its
        // slices), so that it has an address like any other.
        let map = Mapping::map(fd.as_fd(), mem::page_round_up(len.max(1)), true, Share::Shared, Place::Anywhere, false)
            .map_err(|e| RegionError::Alloc(io_err(e)))?;
        if opts.huge_pages {
            map.advise_huge();
        }
        if opts.populate && len > 0 {
            populate(&fd, &map, len, opts.huge_pages)?;
        }
        Ok(Region { fd, map, len, huge: opts.huge_pages, state: State::Open })
    }

    /// Allocates a region holding a copy of `bytes` (one copy, paid here,
    /// through [`write_at`](Self::write_at)).
    pub fn copied_from(bytes: &[u8]) -> Result<Region, RegionError> {
        let mut r = Region::new(bytes.len())?;
        r.write_at(0, bytes)?;
        counters::add(counters::BYTES_COPIED, bytes.len() as u64);
        Ok(r)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte in this process (what same-address
    /// placement reproduces in the receiver).
    pub fn addr(&self) -> usize {
        self.map.addr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.map.as_slice()[..self.len]
    }

    /// The bytes, writable. After a send by copy, the first write to each
    /// page copies that page (copy-on-write); the receiver never sees it.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.touch();
        let len = self.len;
        &mut self.map.as_mut_slice().expect("regions are mapped writable")[..len]
    }

    /// A writer over the bytes from the start (`std::io::Write`, `Seek`); a
    /// write past the end fails with `WriteZero`. As with
    /// [`as_mut_slice`](Self::as_mut_slice), the receiver of an earlier send
    /// never sees these writes.
    pub fn writer(&mut self) -> std::io::Cursor<&mut [u8]> {
        std::io::Cursor::new(self.as_mut_slice())
    }

    /// A reader over the bytes (`std::io::Read`, `BufRead`, `Seek`).
    pub fn reader(&self) -> std::io::Cursor<&[u8]> {
        std::io::Cursor::new(self.as_slice())
    }

    /// Writes `bytes` at `offset`, with the same result as copying them into
    /// [`as_mut_slice`](Self::as_mut_slice), but cheaper for a region being
    /// filled for the first time (from a stream, a socket, a file): until the
    /// region is first sent, the bytes go into its memfd with `pwrite`, and
    /// the kernel allocates each page as it fills it, without the page fault
    /// and the zeroing that a first store into each page costs. Once the
    /// region has been sent by copy its memfd is sealed, and the bytes are
    /// copied through this process's private mapping instead (copy-on-write),
    /// so a receiver never sees them. Each call is one system call: write
    /// blocks of a few hundred KiB, not packets.
    ///
    /// # Errors
    /// [`RegionError::Io`] with [`io::ErrorKind::InvalidInput`] when the
    /// bytes would end past the region (nothing is written), or the write's
    /// own failure.
    pub fn write_at(&mut self, offset: usize, bytes: &[u8]) -> Result<(), RegionError> {
        if offset.checked_add(bytes.len()).is_none_or(|end| end > self.len) {
            return Err(RegionError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes at offset {offset} end past the region's {} bytes", bytes.len(), self.len),
            )));
        }
        match self.state {
            State::Open => mem::pwrite_all(self.fd.as_fd(), bytes, offset as u64).map_err(|e| RegionError::Io(io_err(e))),
            State::Sealed { .. } => {
                self.as_mut_slice()[offset..offset + bytes.len()].copy_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// The bytes viewed as `T`s (the region is page aligned, so any
    /// [`Plain`] type fits); a trailing partial element is left out.
    pub fn as_slice_of<T: Plain>(&self) -> &[T] {
        self.map.as_typed(self.len)
    }

    /// The bytes viewed as mutable `T`s.
    pub fn as_mut_slice_of<T: Plain>(&mut self) -> &mut [T] {
        self.touch();
        self.map.as_typed_mut(self.len).expect("regions are mapped writable")
    }

    fn touch(&mut self) {
        if let State::Sealed { dirty } = &mut self.state {
            *dirty = true;
        }
    }

    /// Whether huge pages were asked for.
    pub fn huge_pages_requested(&self) -> bool {
        self.huge
    }

    /// Bytes of this region the kernel maps with huge pages right now (from
    /// `/proc/self/smaps`); 0 where shmem huge pages are disabled.
    pub fn huge_bytes_mapped(&self) -> u64 {
        mem::pmd_mapped_bytes(self.map.addr()).unwrap_or(0)
    }

    /// Makes an item that sends this region **by copy**. The receiver gets a
    /// logical copy of the current contents; this process keeps its own.
    /// No byte is copied: the first time, the shared mapping is replaced by a
    /// private one at the same address and the memfd is sealed; afterwards
    /// both sides share the pages until one writes (copy-on-write). Sending
    /// again is free unless this process wrote in between, in which case its
    /// current contents are copied once into a fresh sealed memfd.
    ///
    /// # Errors
    /// [`RegionError::Seal`] if the memfd cannot be sealed (the region stays
    /// as it was); [`RegionError::Alloc`] if a fresh memfd is needed and
    /// cannot be had.
    pub fn by_copy(&mut self) -> Result<RegionItem, RegionError> {
        self.seal()?;
        let fd = crate::sys::socket::dup(self.fd.as_fd()).map_err(|e| RegionError::Alloc(io_err(e)))?;
        Ok(RegionItem::outgoing(Mode::Copy, fd, self.len, self.map.addr(), self.huge))
    }

    /// Makes an item that sends this region **by move**: this process gives
    /// its copy up (its mapping is removed now and its descriptor closed once
    /// sent), so no copy-on-write is ever needed here. The memfd is sealed
    /// so the receiver can trust it.
    ///
    /// # Errors
    /// [`RegionError::Seal`] or [`RegionError::Alloc`]; the region is lost
    /// either way.
    pub fn by_move(mut self) -> Result<RegionItem, RegionError> {
        if self.state == (State::Sealed { dirty: true }) {
            self.refresh()?;
        }
        let Region { fd, map, len, huge, state } = self;
        let addr = map.addr();
        drop(map);
        if state == State::Open {
            mem::add_seals_own(fd.as_fd(), BY_VALUE_SEALS).map_err(|e| RegionError::Seal(io_err(e)))?;
        }
        Ok(RegionItem::outgoing(Mode::Move, fd, len, addr, huge))
    }

    /// Makes an item that sends this region **by move**, as
    /// [`by_move`](Self::by_move) does, but leaves this process's view
    /// mapped at the same address, privately (copy-on-write, as after a
    /// send by copy), until the region is dropped; the region may not be
    /// sent again. For callers that cannot rule out a pointer into the
    /// region still being used after the send (a language binding whose
    /// arrays hold the region without saying so): such a pointer keeps
    /// reading the sent bytes and its writes stay in this process. The
    /// receiver sees a region sent by move.
    ///
    /// # Errors
    /// As [`by_copy`](Self::by_copy).
    pub fn by_move_keeping_view(&mut self) -> Result<RegionItem, RegionError> {
        self.seal()?;
        let fd = crate::sys::socket::dup(self.fd.as_fd()).map_err(|e| RegionError::Alloc(io_err(e)))?;
        Ok(RegionItem::outgoing(Mode::Move, fd, self.len, self.map.addr(), self.huge))
    }

    /// Seals the memfd (once) and makes sure it holds the current contents.
    fn seal(&mut self) -> Result<(), RegionError> {
        match self.state {
            State::Sealed { dirty: false } => Ok(()),
            State::Sealed { dirty: true } => self.refresh(),
            State::Open => {
                self.map
                    .remap_in_place(self.fd.as_fd(), true, Share::Private)
                    .map_err(|e| RegionError::Map(io_err(e)))?;
                if let Err(e) = mem::add_seals_own(self.fd.as_fd(), BY_VALUE_SEALS) {
                    // Nothing was written since the remap: the shared view
                    // holds the same bytes. Go back to it.
                    let _ = self.map.remap_in_place(self.fd.as_fd(), true, Share::Shared);
                    self.rehuge();
                    return Err(RegionError::Seal(io_err(e)));
                }
                self.rehuge();
                self.state = State::Sealed { dirty: false };
                crate::trace::event!(debug, len = self.len, "region sealed: the sender's view is now copy-on-write");
                Ok(())
            }
        }
    }

    /// Copies this process's (written) private view into a fresh sealed
    /// memfd and maps that privately in its place.
    fn refresh(&mut self) -> Result<(), RegionError> {
        let fd = new_memfd(self.len)?;
        mem::pwrite_all(fd.as_fd(), self.as_slice(), 0).map_err(|e| RegionError::Io(io_err(e)))?;
        counters::add(counters::BYTES_COPIED, self.len as u64);
        mem::add_seals_own(fd.as_fd(), BY_VALUE_SEALS).map_err(|e| RegionError::Seal(io_err(e)))?;
        self.map.remap_in_place(fd.as_fd(), true, Share::Private).map_err(|e| RegionError::Map(io_err(e)))?;
        self.rehuge();
        self.fd = fd;
        self.state = State::Sealed { dirty: false };
        Ok(())
    }

    fn rehuge(&self) {
        if self.huge {
            self.map.advise_huge();
        }
    }
}

/// Whether the shmem policy gives huge pages to mappings that ask.
fn huge_pages_granted() -> bool {
    matches!(mem::shmem_thp_policy().as_deref(), Some("advise" | "always" | "within_size" | "force"))
}

/// Allocates and maps every page of a fresh region's shared mapping.
fn populate(fd: &OwnedFd, map: &Mapping, len: usize, huge: bool) -> Result<(), RegionError> {
    if huge && huge_pages_granted() && map.populate_write().is_ok() {
        return Ok(());
    }
    // Base pages (or a kernel without MADV_POPULATE_WRITE): write zeros
    // into the file, which allocates every page already filled, then map
    // them with read faults, each of which maps a block of cached
    // neighbours (fault-around). Pages allocated by `fallocate` would not
    // do: shmem zeroes those at their first fault, one fault per page, and
    // fault-around skips them.
    mem::write_zeros(fd.as_fd(), len as u64).map_err(|e| RegionError::Alloc(io_err(e)))?;
    map.prefault_read();
    Ok(())
}

/// A fresh memfd of `len` bytes, counted.
pub(crate) fn new_memfd(len: usize) -> Result<OwnedFd, RegionError> {
    let fd = mem::memfd("ferry-region", len as u64).map_err(|e| RegionError::Alloc(io_err(e)))?;
    counters::add(counters::REGIONS_ALLOCATED, 1);
    Ok(fd)
}
