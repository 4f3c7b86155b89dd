//! Explicitly shared mutable memory (opt-in only), for producer/consumer
//! buffers between processes that both write.
//!
//! Because the other process writes concurrently, a [`SharedRegion`] hands
//! out no `&mut [u8]`: it offers atomics and racy copies that never form a
//! Rust reference to bytes another process may be changing.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::AtomicU64;

use super::{new_memfd, Mode, RegionError, RegionItem, SIZE_SEALS};
use crate::error::io_err;
use crate::sys::mem::{self, Mapping, Place, Share};

/// Memory shared, mutable, with every process it is sent to
/// ([`share`](Self::share)). Its size is fixed (sealed), so no side can make
/// another's mapping fault past the end.
#[derive(Debug)]
pub struct SharedRegion {
    fd: OwnedFd,
    map: Mapping,
    len: usize,
}

impl SharedRegion {
    /// A zeroed shared region of `len` bytes.
    pub fn new(len: usize) -> Result<SharedRegion, RegionError> {
        let len = len.max(1);
        let fd = new_memfd(len)?;
        mem::add_seals(fd.as_fd(), SIZE_SEALS | rustix::fs::SealFlags::SEAL).map_err(|e| RegionError::Seal(io_err(e)))?;
        let map = Mapping::map(fd.as_fd(), mem::page_round_up(len), true, Share::Shared, Place::Anywhere, false)
            .map_err(|e| RegionError::Alloc(io_err(e)))?;
        Ok(SharedRegion { fd, map, len })
    }

    /// An item that shares this region (this process keeps it too).
    pub fn share(&self) -> Result<RegionItem, RegionError> {
        let fd = crate::sys::socket::dup(self.fd.as_fd()).map_err(|e| RegionError::Alloc(io_err(e)))?;
        Ok(RegionItem::outgoing(Mode::Share, fd, self.len, self.map.addr(), false))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The words as atomics.
    pub fn as_atomic_u64(&self) -> &[AtomicU64] {
        self.map.as_atomic_u64(self.len)
    }

    /// Copies bytes at `offset` into `out`; false if out of range. The other
    /// side may be writing meanwhile: the result may mix old and new bytes.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        offset.checked_add(out.len()).is_some_and(|e| e <= self.len) && self.map.copy_out_racy(offset, out)
    }

    /// Copies `src` into the region at `offset`; false if out of range.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> bool {
        offset.checked_add(src.len()).is_some_and(|e| e <= self.len) && self.map.copy_in_racy(offset, src)
    }
}
