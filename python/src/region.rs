//! Out-of-line memory for Python: `Region` (memory this process fills and
//! sends by value), `RegionItem` (a region inside a received message) and
//! `MappedRegion` (a received region mapped here).
//!
//! `Region` and `MappedRegion` export their memory through the buffer
//! protocol, so `memoryview` and NumPy see it without a copy. The memory
//! stays mapped as long as the Python object lives, and every view or array
//! over it holds a reference to the object (NumPy's `base`), so an array can
//! never outlive the memory under it: `close()` only ends the handle's use.
//! The one early unmap is a send by move of a region never viewed; a move
//! is refused while views are counted, and a region ever viewed keeps its
//! memory mapped (copy-on-write) after a move, since an array may hold the
//! object without a counted view.
//! A `Region`'s views stay valid when it is sealed for a send by copy: the
//! mapping is replaced by a private one at the same address, and later
//! writes through them stay in this process (copy-on-write). A
//! `MappedRegion` of a by-value region is exported read-only unless it was
//! mapped writable (privately).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ferry::region::{MapOptions, Mode};

use crate::errors::region_error;
use crate::{gone, lock};

/// The most bytes `RegionItem.copy_out` accepts unless told otherwise: the
/// sender chose the region's length, the receiver chooses what it holds.
const DEFAULT_COPY_LIMIT: usize = 1 << 30;

/// The most bytes `RegionItem.map(immediate=True)` accepts unless told
/// otherwise: an immediate mapping allocates every page of the region.
const DEFAULT_IMMEDIATE_LIMIT: usize = 1 << 30;

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Copy => "copy",
        Mode::Move => "move",
        Mode::Lend => "lend",
        Mode::Share => "share",
    }
}

fn busy(what: &str, views: usize) -> PyErr {
    PyBufferError::new_err(format!("{views} view(s) of this {what} (arrays, memoryviews) are still alive; delete them first"))
}

/// Memory ferry allocated (from a memfd) for this process to fill and send
/// by value without copying: view it with `memoryview(region)` or
/// `ferry.ndarray(region, dtype, shape)`, write it, then `msg.add(region)`.
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct Region {
    inner: Mutex<Option<ferry::Region>>,
    /// Live buffer views.
    views: AtomicUsize,
    /// A writable view was ever handed out: arrays may write it at any time
    /// (some, like `numpy.ndarray(buffer=...)`, without holding the view).
    viewed: AtomicBool,
    /// The region was sent by copy at least once (and so is sealed).
    sealed: AtomicBool,
    /// `close()` was called: no new use; the memory goes with the object.
    closed: AtomicBool,
}

/// The handle's state unless `close()` was called.
fn open<'a, T>(inner: &'a Mutex<Option<T>>, closed: &AtomicBool, what: &str) -> PyResult<std::sync::MutexGuard<'a, Option<T>>> {
    let g = lock(inner);
    if closed.load(Ordering::SeqCst) || g.is_none() {
        return Err(gone(what));
    }
    Ok(g)
}

impl Region {
    fn state(&self) -> PyResult<std::sync::MutexGuard<'_, Option<ferry::Region>>> {
        open(&self.inner, &self.closed, "Region")
    }

    /// An item sending the region by copy. The first send seals the
    /// region without copying. Writes through views and arrays are invisible
    /// to ferry, so a later send of a region that was ever viewed marks it
    /// written first: ferry then seals its current contents (one copy), never
    /// stale ones.
    pub(crate) fn copy_item(&self) -> PyResult<ferry::RegionItem> {
        let mut g = self.state()?;
        let r = g.as_mut().ok_or_else(|| gone("Region"))?;
        if self.sealed.load(Ordering::SeqCst) && self.viewed.load(Ordering::SeqCst) {
            // Only marks the region written; nothing is touched.
            let _ = r.as_mut_slice();
        }
        let item = r.by_copy().map_err(region_error)?;
        self.sealed.store(true, Ordering::SeqCst);
        Ok(item)
    }

    /// An item sending the region by move; the region is used up. Refused
    /// while views are counted. An array made with
    /// `numpy.ndarray(buffer=region)` holds the object but no view (NumPy
    /// releases the buffer at once), so a region that was ever viewed keeps
    /// its memory mapped here, copy-on-write, as long as the object lives;
    /// only a region never viewed is unmapped at once.
    pub(crate) fn move_item(&self) -> PyResult<ferry::RegionItem> {
        let mut g = self.state()?;
        let views = self.views.load(Ordering::SeqCst);
        if views > 0 {
            return Err(busy("Region", views));
        }
        if self.viewed.load(Ordering::SeqCst) {
            let r = g.as_mut().ok_or_else(|| gone("Region"))?;
            if self.sealed.load(Ordering::SeqCst) {
                // As for a send by copy: arrays may have written it since
                // it was sealed, unseen by ferry. Only marks it written.
                let _ = r.as_mut_slice();
            }
            let item = r.by_move_keeping_view().map_err(region_error)?;
            self.closed.store(true, Ordering::SeqCst);
            return Ok(item);
        }
        let r = g.take().ok_or_else(|| gone("Region"))?;
        r.by_move().map_err(region_error)
    }
}

#[pymethods]
impl Region {
    /// Allocates a zeroed region of `nbytes` bytes (pages appear on first
    /// touch; large regions ask for huge pages).
    #[new]
    fn new(nbytes: usize) -> PyResult<Region> {
        if nbytes == 0 {
            return Err(PyValueError::new_err("a region has at least one byte"));
        }
        let r = ferry::Region::new(nbytes).map_err(region_error)?;
        Ok(Region { inner: Mutex::new(Some(r)), views: AtomicUsize::new(0), viewed: AtomicBool::new(false), sealed: AtomicBool::new(false), closed: AtomicBool::new(false) })
    }

    /// Same as `Region(nbytes)`.
    #[staticmethod]
    fn alloc(nbytes: usize) -> PyResult<Region> {
        Region::new(nbytes)
    }

    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> PyResult<usize> {
        Ok(self.state()?.as_ref().ok_or_else(|| gone("Region"))?.len())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.nbytes()
    }

    /// Address of the first byte in this process.
    #[getter]
    fn addr(&self) -> PyResult<usize> {
        Ok(self.state()?.as_ref().ok_or_else(|| gone("Region"))?.addr())
    }

    /// Whether the region has been sealed (sent by copy at least once).
    #[getter]
    fn sealed(&self) -> bool {
        self.sealed.load(Ordering::SeqCst)
    }

    /// Live views (memoryviews, arrays) of the region.
    #[getter]
    fn views(&self) -> usize {
        self.views.load(Ordering::SeqCst)
    }

    /// Whether the region was closed or moved into a message.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || lock(&self.inner).is_none()
    }

    /// Ends the use of this handle: it can no longer be viewed or sent. The
    /// memory stays mapped as long as the object lives (arrays made over
    /// it, even with `numpy.ndarray(buffer=...)`, hold it), and is freed
    /// with it. Idempotent.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let me = slf.get();
        let g = me.state()?;
        let r = g.as_ref().ok_or_else(|| gone("Region"))?;
        let (addr, len) = (r.addr(), r.len());
        // SAFETY: the region stays mapped at `addr` while the view is
        // counted (and the view holds a reference to this object): close
        // leaves the mapping to the object's end, a move refuses while
        // `views` > 0, and sealing remaps at the same address.
        unsafe { crate::buffer::fill(view, flags, slf.as_any(), addr, len, false)? };
        me.views.fetch_add(1, Ordering::SeqCst);
        me.viewed.store(true, Ordering::SeqCst);
        Ok(())
    }

    #[allow(unsafe_code)]
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.views.fetch_sub(1, Ordering::SeqCst);
    }

    fn __repr__(&self) -> String {
        match lock(&self.inner).as_ref() {
            Some(r) => format!("<ferry.Region {} bytes{}>", r.len(), if self.sealed() { " sealed" } else { "" }),
            None => "<ferry.Region closed>".to_owned(),
        }
    }
}

/// A region inside a received message: map it (`map()`), copy it out
/// (`copy_out()`), or pass it on in another message (`msg.add(item)`).
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct RegionItem {
    inner: Mutex<Option<ferry::RegionItem>>,
}

impl RegionItem {
    pub(crate) fn wrap(r: ferry::RegionItem) -> RegionItem {
        RegionItem { inner: Mutex::new(Some(r)) }
    }

    pub(crate) fn take(&self) -> PyResult<ferry::RegionItem> {
        lock(&self.inner).take().ok_or_else(|| gone("RegionItem"))
    }
}

#[pymethods]
impl RegionItem {
    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> PyResult<usize> {
        Ok(lock(&self.inner).as_ref().ok_or_else(|| gone("RegionItem"))?.len())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.nbytes()
    }

    /// How it travelled: `"copy"`, `"move"` (both by value: nobody else can
    /// change it), `"lend"` or `"share"`.
    #[getter]
    fn mode(&self) -> PyResult<&'static str> {
        Ok(mode_name(lock(&self.inner).as_ref().ok_or_else(|| gone("RegionItem"))?.mode()))
    }

    /// The address it had in its sender, if given.
    #[getter]
    fn sender_address(&self) -> PyResult<Option<usize>> {
        Ok(lock(&self.inner).as_ref().ok_or_else(|| gone("RegionItem"))?.sender_address())
    }

    /// Maps the region here and returns the mapping. `immediate` maps every
    /// page now (cheapest when all of it will be read); `at_sender_address`
    /// places it where the sender had it; `writable` maps a by-value region
    /// writable, privately (writes stay in this process). Only regions sent
    /// by value (copy, move) are mapped: a lent or shared region's sender
    /// may still change it, so it raises `SenderMayWrite`; copy it out
    /// instead. On failure the item stays usable (map differently, or copy
    /// out). A region longer than `limit` bytes raises `RegionError` before
    /// anything is mapped; the sender chose the length, and an immediate
    /// mapping allocates every page of it, so `immediate` with no `limit`
    /// refuses more than 1 GiB (a lazy one costs only address space and has
    /// no limit unless given one).
    #[pyo3(signature = (*, immediate=false, at_sender_address=false, writable=false, limit=None))]
    fn map(&self, py: Python<'_>, immediate: bool, at_sender_address: bool, writable: bool, limit: Option<usize>) -> PyResult<MappedRegion> {
        let mut opts = if immediate { MapOptions::immediate() } else { MapOptions::lazy() };
        if let Some(l) = limit.or(immediate.then_some(DEFAULT_IMMEDIATE_LIMIT)) {
            opts = opts.limit(l);
        }
        if at_sender_address {
            opts = opts.at_sender_address();
        }
        if !writable {
            opts = opts.read_only();
        }
        let item = self.take()?;
        match py.detach(|| item.map(opts)) {
            Ok(m) => Ok(MappedRegion { inner: Mutex::new(Some(m)), views: AtomicUsize::new(0), closed: AtomicBool::new(false) }),
            Err(e) => {
                *lock(&self.inner) = Some(e.region);
                Err(region_error(e.error))
            }
        }
    }

    /// Copies the bytes out (nothing is mapped) and releases the region.
    /// A region longer than `limit` bytes (`None`: 1 GiB; the sender chose
    /// the length) raises `RegionError` before anything is allocated.
    #[pyo3(signature = (limit=None))]
    fn copy_out<'py>(&self, py: Python<'py>, limit: Option<usize>) -> PyResult<Bound<'py, PyBytes>> {
        let limit = limit.unwrap_or(DEFAULT_COPY_LIMIT);
        let item = self.take()?;
        let v = py.detach(|| item.copy_out(limit)).map_err(region_error)?;
        Ok(PyBytes::new(py, &v))
    }

    /// Whether the item was mapped, copied out, passed on or closed.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// Releases the region unused. Idempotent.
    fn close(&self) {
        let r = lock(&self.inner).take();
        drop(r);
    }

    fn __repr__(&self) -> String {
        match lock(&self.inner).as_ref() {
            Some(r) => format!("<ferry.RegionItem {} bytes by {}>", r.len(), mode_name(r.mode())),
            None => "<ferry.RegionItem closed>".to_owned(),
        }
    }
}

/// A received region mapped into this process. Its buffer (see
/// `ferry.ndarray`) is read-only unless it was mapped writable; every view
/// keeps the mapping alive, and it is unmapped when the last reference and
/// view are gone (or at `close()`, which refuses while views are alive).
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct MappedRegion {
    inner: Mutex<Option<ferry::MappedRegion>>,
    views: AtomicUsize,
    /// `close()` was called: no new use; the mapping goes with the object.
    closed: AtomicBool,
}

impl MappedRegion {
    fn state(&self) -> PyResult<std::sync::MutexGuard<'_, Option<ferry::MappedRegion>>> {
        open(&self.inner, &self.closed, "MappedRegion")
    }
}

#[pymethods]
impl MappedRegion {
    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> PyResult<usize> {
        Ok(self.state()?.as_ref().ok_or_else(|| gone("MappedRegion"))?.len())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.nbytes()
    }

    /// Address of the first byte here.
    #[getter]
    fn addr(&self) -> PyResult<usize> {
        Ok(self.state()?.as_ref().ok_or_else(|| gone("MappedRegion"))?.addr())
    }

    /// The mode the region was sent in.
    #[getter]
    fn mode(&self) -> PyResult<&'static str> {
        Ok(mode_name(self.state()?.as_ref().ok_or_else(|| gone("MappedRegion"))?.mode()))
    }

    /// Whether it is mapped writable (privately, for a by-value region).
    #[getter]
    fn writable(&self) -> PyResult<bool> {
        Ok(self.state()?.as_ref().ok_or_else(|| gone("MappedRegion"))?.is_writable())
    }

    /// Live views (memoryviews, arrays) of the mapping.
    #[getter]
    fn views(&self) -> usize {
        self.views.load(Ordering::SeqCst)
    }

    /// Whether the mapping was closed.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Ends the use of this handle: no new views. The mapping stays as long
    /// as the object lives (every array over it holds it, even one made with
    /// `numpy.ndarray(buffer=...)`), and is unmapped with it. Idempotent.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let me = slf.get();
        let g = me.state()?;
        let m = g.as_ref().ok_or_else(|| gone("MappedRegion"))?;
        let (addr, len, writable) = (m.addr(), m.len(), m.is_writable() && m.mode() != Mode::Share);
        // SAFETY: the mapping stays at `addr` as long as this object lives,
        // and the view holds a reference to it. A read-only mapping is exported
        // read-only, so no view can write it; a shared region (whose memory
        // another process writes) is never exported writable.
        unsafe { crate::buffer::fill(view, flags, slf.as_any(), addr, len, !writable)? };
        me.views.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    #[allow(unsafe_code)]
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.views.fetch_sub(1, Ordering::SeqCst);
    }

    fn __repr__(&self) -> String {
        match lock(&self.inner).as_ref() {
            Some(m) => format!("<ferry.MappedRegion {} bytes by {}{}>", m.len(), mode_name(m.mode()), if m.is_writable() { "" } else { " read-only" }),
            None => "<ferry.MappedRegion closed>".to_owned(),
        }
    }
}
