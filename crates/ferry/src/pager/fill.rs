//! Regions filled by another process, in the memory of the process that
//! asked: [`Filling`] on the asking side, [`PagerFd::fill`] on the side
//! that has the bytes.
//!
//! A server that produces a large region for a client (a network server
//! fetching a remote region whole, say) could fill a fresh memfd and hand
//! it over; but then every page is allocated by the server, counted against
//! the server's memory (its cgroup, not the client's), and the client may
//! ask again and keep every copy. Here the client makes the region, maps
//! it, registers the mapping with a userfaultfd and sends that descriptor
//! (a [`PagerFd`]); the server fills the missing pages with `UFFDIO_COPY`,
//! which allocates each page in the client's address space and charges it
//! to the client. The server holds nothing but the bytes in flight, and
//! it can only fill pages never filled: a page already present is never
//! overwritten, and once the client has finished (or gone) nothing more
//! lands.

use std::os::fd::AsFd;

use super::{errno, Inner, PagerError, PagerFd};
use crate::region::{Region, RegionOptions};
use crate::sys::mem;
use crate::sys::uffd::{self, Uffd};
use crate::sys::socket;

/// A fresh region that another process fills through the [`PagerFd`]
/// [`Filling::new`] returns with it; [`Filling::finish`] gives the region
/// back once that process says it is done.
///
/// Until then the region cannot be read here: its pages are missing, and
/// a touch would wait for a fill.
///
/// ```
/// use ferry::pager::Filling;
/// let (filling, item) = Filling::new(10_000)?;
/// // `item` travels in a message to the process that has the bytes, which
/// // calls `item.fill(offset, page_aligned_bytes)`; here, this process:
/// let page = ferry::pager::page_size();
/// let mut bytes = vec![7u8; 10_000usize.div_ceil(page) * page];
/// bytes[9_999] = 9;
/// item.fill(0, &bytes)?;
/// let region = filling.finish()?;
/// assert_eq!(region.as_slice()[9_999], 9);
/// assert_eq!(region.len(), 10_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Filling {
    region: Region,
    uffd: Uffd,
    mapped: usize,
}

impl Filling {
    /// Makes a region of `len` bytes (base pages, none allocated yet) and
    /// the item another process fills it through.
    ///
    /// # Errors
    /// [`PagerError::Io`] when the region cannot be made or registered;
    /// [`PagerError::UserfaultfdUnavailable`] when the kernel grants this
    /// process no userfaultfd; [`PagerError::Unsupported`] when it cannot
    /// register shmem for missing pages.
    pub fn new(len: usize) -> Result<(Filling, PagerFd), PagerError> {
        let region = Region::with_options(len, RegionOptions::default())
            .map_err(|e| PagerError::Io(std::io::Error::other(e.to_string())))?;
        let mapped = mem::page_round_up(len.max(1));
        let (uffd, _) = Uffd::new().map_err(|e| PagerError::UserfaultfdUnavailable(errno(e)))?;
        uffd.api(uffd::FEATURE_MISSING_SHMEM)
            .map_err(|e| PagerError::Unsupported(format!("userfaultfd on shared memory: {e}")))?;
        uffd.register(region.addr(), mapped, uffd::MODE_MISSING).map_err(|e| PagerError::Io(errno(e)))?;
        let theirs = Uffd::from_fd(socket::dup(uffd.as_fd()).map_err(|e| PagerError::Io(errno(e)))?);
        let item = PagerFd::userfault(theirs, region.addr(), mapped);
        Ok((Filling { region, uffd, mapped }, item))
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// Ends the filling and gives the region back: from here on nothing
    /// more can be filled, and a page the other process never filled reads
    /// as zeros.
    ///
    /// # Errors
    /// [`PagerError::Io`] if the range cannot be unregistered (the region
    /// is dropped then: a touch of a missing page would wait for ever).
    pub fn finish(self) -> Result<Region, PagerError> {
        self.uffd.unregister(self.region.addr(), self.mapped).map_err(|e| PagerError::Io(errno(e)))?;
        Ok(self.region)
    }
}

/// Size of a page, the unit [`PagerFd::fill`] works in.
pub fn page_size() -> usize {
    mem::page_size()
}

impl PagerFd {
    /// For a userfaultfd item (from [`Filling::new`] or a mapping client),
    /// the length of the range it registered; `None` for a page cache.
    pub fn registered_len(&self) -> Option<u64> {
        match &self.inner {
            Inner::UserFault { len, .. } => Some(*len),
            Inner::Cache { .. } => None,
        }
    }

    /// Fills the missing pages at `offset` of the range this userfaultfd
    /// item registered with a copy of `bytes`, in the address space of the
    /// process that registered it (which is charged for the pages). Both
    /// `offset` and the length of `bytes` must be whole pages
    /// ([`page_size`]).
    ///
    /// # Errors
    /// [`PagerError::BadRequest`] for an unaligned or out-of-range fill or
    /// a page cache item; [`PagerError::Io`] when the kernel refuses: a
    /// page already there (`EEXIST`), the range no longer registered
    /// (`ENOENT`), its process gone (`ESRCH`), or out of memory there
    /// (`ENOMEM`).
    pub fn fill(&self, offset: u64, bytes: &[u8]) -> Result<(), PagerError> {
        let Inner::UserFault { uffd, addr, len } = &self.inner else {
            return Err(PagerError::BadRequest("only a userfaultfd item can be filled".into()));
        };
        let page = mem::page_size() as u64;
        let n = bytes.len() as u64;
        if !offset.is_multiple_of(page) || !n.is_multiple_of(page) || offset.checked_add(n).is_none_or(|end| end > *len) {
            return Err(PagerError::BadRequest(format!(
                "a fill of {n} bytes at {offset} is not whole pages within the {len} bytes registered"
            )));
        }
        let mut done = 0usize;
        while done < bytes.len() {
            let at = (*addr + offset) as usize + done;
            match uffd.copy(at, &bytes[done..], true, false) {
                Ok(k) => done += k,
                // Progress, then a present page: the kernel asks to be called
                // again for the rest (a present page first is EEXIST).
                Err((k, rustix::io::Errno::AGAIN)) if k > 0 => done += k,
                Err((_, e)) => return Err(PagerError::Io(errno(e))),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_lands_in_the_region_and_nowhere_else() {
        let page = page_size();
        let (filling, item) = Filling::new(3 * page + 5).unwrap();
        assert_eq!(item.registered_len(), Some(4 * page as u64));
        let mut bytes = vec![1u8; 4 * page];
        bytes[3 * page + 4] = 2;
        assert!(matches!(item.fill(1, &bytes[..page]), Err(PagerError::BadRequest(_))), "unaligned");
        assert!(matches!(item.fill(0, &bytes[..page + 1]), Err(PagerError::BadRequest(_))), "part of a page");
        assert!(matches!(item.fill(page as u64, &bytes), Err(PagerError::BadRequest(_))), "past the end");
        item.fill(0, &bytes).unwrap();
        // A page already there is never overwritten.
        assert!(matches!(item.fill(0, &vec![9u8; page]), Err(PagerError::Io(_))));
        let region = filling.finish().unwrap();
        assert_eq!(region.len(), 3 * page + 5);
        assert!(region.as_slice()[..3 * page + 4].iter().all(|&b| b == 1));
        assert_eq!(region.as_slice()[3 * page + 4], 2);
        // Finished: nothing more lands.
        assert!(matches!(item.fill(0, &vec![9u8; page]), Err(PagerError::Io(_))));
    }

    #[test]
    fn pages_never_filled_read_as_zeros_once_finished() {
        let page = page_size();
        let (filling, item) = Filling::new(2 * page).unwrap();
        item.fill(page as u64, &vec![5u8; page]).unwrap();
        drop(item);
        let region = filling.finish().unwrap();
        assert!(region.as_slice()[..page].iter().all(|&b| b == 0));
        assert!(region.as_slice()[page..].iter().all(|&b| b == 5));
    }
}
