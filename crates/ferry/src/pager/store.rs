//! The objects an [`super::ObjectServer`] hosts: their pages (own, shadowed
//! or from a pager), the shared page cache of zero-copy objects, and how a
//! range of an object is read, following copies back to their source.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};

use super::{ObjectConfig, ObjectId, ObjectStats, Offset, Pager, PagerError, PagerFault, Supply, SupplyMode};
use crate::sys::mem::{self, Mapping, Place, Share};

pub(super) enum Source {
    Pager(Box<dyn Pager>),
    CopyOf(ObjectId),
}

pub(super) struct Cache {
    pub(super) fd: OwnedFd,
    pub(super) view: OwnedFd,
    pub(super) map: Mapping,
    pub(super) filled: Vec<bool>,
}

pub(super) struct Object {
    pub(super) size: u64,
    pub(super) config: ObjectConfig,
    pub(super) owner: u32,
    /// Users (by kernel-reported uid) who may use the object: open, attach,
    /// copy, read counters, return pages.
    pub(super) users: BTreeSet<u32>,
    /// Every user may use it.
    pub(super) everyone: bool,
    pub(super) source: Source,
    /// Pages held by the object itself: the owner's writes, or (for a copy)
    /// the old pages pushed into it before its original changed.
    pub(super) pages: BTreeMap<u64, Box<[u8]>>,
    pub(super) copies: Vec<ObjectId>,
    pub(super) cache: Option<Cache>,
    pub(super) stats: ObjectStats,
    /// Removed once a client has attached and the last one detached.
    pub(super) ephemeral: bool,
    pub(super) attached_once: bool,
}

pub(super) fn make_cache(size: u64) -> rustix::io::Result<Cache> {
    use rustix::fs::SealFlags;
    let len = mem::page_round_up(size as usize);
    let fd = mem::memfd("ferry-object", len as u64)?;
    let map = Mapping::map(fd.as_fd(), len, true, Share::Shared, Place::Anywhere, false)?;
    // Our shared writable mapping stays usable; nobody can make another,
    // write(2) to it, or change its size.
    mem::add_seals(fd.as_fd(), SealFlags::SHRINK | SealFlags::GROW | SealFlags::FUTURE_WRITE)?;
    // Clients get a read-only open file description of it.
    let view = mem::reopen_read_only(fd.as_fd())?;
    Ok(Cache { fd, view, map, filled: vec![false; len / mem::page_size()] })
}

/// Makes pages `[first, end)` of a zero-copy object's page cache present,
/// asking the pager for those not yet there.
pub(super) fn fill_cache(objects: &mut BTreeMap<ObjectId, Object>, id: ObjectId, first: usize, end: usize) -> Result<(), PagerFault> {
    let page = mem::page_size();
    let mut p = first;
    while p < end {
        let filled = |o: &Object, p: usize| o.cache.as_ref().is_none_or(|c| c.filled[p]);
        if filled(&objects[&id], p) {
            p += 1;
            continue;
        }
        let mut q = p + 1;
        while q < end && !filled(&objects[&id], q) {
            q += 1;
        }
        // The pager writes straight into the page cache: no staging copy.
        let mut cache = objects.get_mut(&id).expect("live object").cache.take().expect("zero-copy object");
        let size = objects[&id].size as usize;
        let stop = (q * page).min(size);
        let buf = &mut cache.map.as_mut_slice().expect("writable cache")[p * page..stop];
        let r = read_object(objects, id, p as u64, buf);
        // Make every page of the run present: pages the pager did not write
        // (an unavailable range) are allocated as zeros; written ones stay.
        let present = r.is_ok()
            && mem::allocate(cache.fd.as_fd(), (p * page) as u64, ((q - p) * page) as u64).is_ok();
        if present {
            cache.filled[p..q].iter_mut().for_each(|f| *f = true);
        }
        objects.get_mut(&id).expect("live object").cache = Some(cache);
        if !present {
            return Err(r.err().unwrap_or_else(|| PagerFault("the page cache could not be allocated".into())));
        }
        p = q;
    }
    Ok(())
}

/// Reads object `id`'s bytes from page `first` into `buf` (which may end
/// mid-page at the object's end): its own pages first, the rest from its
/// source (its pager, or the object it is a copy of).
pub(super) fn read_object(objects: &mut BTreeMap<ObjectId, Object>, id: ObjectId, first: u64, buf: &mut [u8]) -> Result<Supply, PagerFault> {
    let page = mem::page_size();
    let npages = buf.len().div_ceil(page);
    let mut provided = false;
    let mut i = 0;
    while i < npages {
        let o = objects.get(&id).ok_or_else(|| PagerFault(format!("object {id} is gone")))?;
        if let Some(own) = o.pages.get(&(first + i as u64)) {
            let to = ((i + 1) * page).min(buf.len());
            buf[i * page..to].copy_from_slice(&own[..to - i * page]);
            provided = true;
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < npages && !o.pages.contains_key(&(first + j as u64)) {
            j += 1;
        }
        let to = (j * page).min(buf.len());
        let run = &mut buf[i * page..to];
        let offset = (first + i as u64) * page as u64;
        let got = match &o.source {
            Source::CopyOf(parent) => {
                let parent = *parent;
                read_object(objects, parent, first + i as u64, run)?
            }
            Source::Pager(_) => {
                let o = objects.get_mut(&id).expect("live object");
                o.stats.requests += 1;
                o.stats.pages_requested += (j - i) as u64;
                let Source::Pager(p) = &mut o.source else { unreachable!("matched above") };
                p.data_request(offset, run)?
            }
        };
        provided |= got == Supply::Provided;
        i = j;
    }
    Ok(if provided { Supply::Provided } else { Supply::Unavailable })
}

/// Whether pages `[first, first + npages)` of object `id` are known to hold
/// no data, without preparing a buffer: no page of its own (or of the
/// objects it copies) in the range and a pager that says the range is
/// empty. Counted as a request to the pager when it is asked.
pub(super) fn object_unavailable(objects: &mut BTreeMap<ObjectId, Object>, id: ObjectId, first: u64, npages: u64) -> bool {
    let page = mem::page_size() as u64;
    let Some(o) = objects.get_mut(&id) else { return false };
    if o.pages.range(first..first + npages).next().is_some() {
        return false;
    }
    match &mut o.source {
        Source::CopyOf(parent) => {
            let parent = *parent;
            object_unavailable(objects, parent, first, npages)
        }
        Source::Pager(p) => {
            let none = p.data_unavailable(first * page, (npages * page) as usize);
            if none {
                o.stats.requests += 1;
                o.stats.pages_requested += npages;
            }
            none
        }
    }
}

/// Changes object `id` as its owner (see [`super::ObjectServer::write`]):
/// for each page touched, the old page is first pushed into every copy that
/// has no version of its own yet, then the object's own page is changed.
pub(super) fn write_object(objects: &mut BTreeMap<ObjectId, Object>, id: ObjectId, offset: Offset, data: &[u8]) -> Result<(), PagerError> {
    let o = objects.get(&id).ok_or(PagerError::NoSuchObject(id))?;
    if offset.checked_add(data.len() as u64).is_none_or(|end| end > o.size) {
        return Err(PagerError::BadRequest("the write leaves the object".into()));
    }
    if o.config.mode == SupplyMode::ZeroCopy || matches!(o.source, Source::CopyOf(_)) {
        return Err(PagerError::Unsupported("zero-copy objects and copies cannot change".into()));
    }
    let page = mem::page_size() as u64;
    let mut at = offset;
    let end = offset + data.len() as u64;
    while at < end {
        let p = at / page;
        let copies = objects[&id].copies.clone();
        for c in copies {
            if objects.get(&c).is_none_or(|o| o.pages.contains_key(&p)) {
                continue;
            }
            let old = page_of(objects, id, p)?;
            let co = objects.get_mut(&c).expect("checked above");
            co.pages.insert(p, old);
            co.stats.pages_shadowed += 1;
        }
        let mut cur = page_of(objects, id, p)?;
        let from = (at - p * page) as usize;
        let n = ((page - from as u64).min(end - at)) as usize;
        let src = (at - offset) as usize;
        cur[from..from + n].copy_from_slice(&data[src..src + n]);
        objects.get_mut(&id).expect("checked above").pages.insert(p, cur);
        at += n as u64;
    }
    Ok(())
}

/// Page `p` of object `id`, a whole page; bytes past the object's end are
/// zero (the pager is asked only for bytes inside the object).
fn page_of(objects: &mut BTreeMap<ObjectId, Object>, id: ObjectId, p: u64) -> Result<Box<[u8]>, PagerError> {
    let page = mem::page_size();
    let size = objects.get(&id).ok_or(PagerError::NoSuchObject(id))?.size;
    let n = (size.saturating_sub(p * page as u64)).min(page as u64) as usize;
    let mut buf = vec![0u8; page].into_boxed_slice();
    read_object(objects, id, p, &mut buf[..n]).map_err(|f| PagerError::Protocol(f.0))?;
    Ok(buf)
}
