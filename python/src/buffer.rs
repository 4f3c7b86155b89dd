//! Python's buffer protocol over region memory, and reading the bytes of any
//! object that exports a buffer.
//!
//! # Safety
//! The only `unsafe` code of the package. Its invariants:
//! - An exported view points at memory that stays mapped for as long as the
//!   view exists: the view holds a reference to the exporting object
//!   (`view.obj`), the exporters ([`crate::region`]) keep their memory
//!   mapped as long as they live, and the one early unmap (a send by move)
//!   is refused while views are counted and made only for a region never
//!   viewed (one ever viewed keeps its memory mapped after a move). Sealing a region for a send by
//!   copy remaps it at the same address, so views stay valid across it.
//! - A read-only export is never handed out writable: `PyBuffer_FillInfo`
//!   refuses a writable request for read-only memory with `BufferError`.
//! - [`with_bytes`] lends the bytes only for the duration of the closure,
//!   which runs with the GIL held, and releases the view afterwards.

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::mem::MaybeUninit;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// Fills `view` to export `len` bytes at `addr`, owned by `owner`.
///
/// # Safety
/// `view` must be the pointer Python passed to `__getbuffer__`, and
/// `[addr, addr + len)` must stay mapped (and writable unless `readonly`) for
/// as long as `owner` keeps the export counted.
pub(crate) unsafe fn fill(view: *mut ffi::Py_buffer, flags: c_int, owner: &Bound<'_, PyAny>, addr: usize, len: usize, readonly: bool) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("no view to fill"));
    }
    let len = ffi::Py_ssize_t::try_from(len).map_err(|_| PyBufferError::new_err("region too large for a buffer"))?;
    // SAFETY: `view` is Python's non-null view pointer; `owner` is a live
    // object (FillInfo takes a new reference to it into `view.obj`); the
    // memory stays mapped while the export is counted (the caller's promise).
    let rc = unsafe { ffi::PyBuffer_FillInfo(view, owner.as_ptr(), addr as *mut std::ffi::c_void, len, c_int::from(readonly), flags) };
    if rc != 0 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}

/// Runs `f` over the bytes of `obj` (`bytes`, `bytearray`, `memoryview`, a
/// contiguous NumPy array...), without copying them first.
pub(crate) fn with_bytes<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    let mut view = MaybeUninit::<ffi::Py_buffer>::uninit();
    // SAFETY: `obj` is a live object; `view` is writable storage for one
    // Py_buffer that GetBuffer fills on success.
    let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_SIMPLE) };
    if rc != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    // SAFETY: GetBuffer succeeded, so the view is initialised.
    let mut view = unsafe { view.assume_init() };
    let bytes: &[u8] = if view.len <= 0 || view.buf.is_null() {
        &[]
    } else {
        // SAFETY: a PyBUF_SIMPLE view is `len` contiguous bytes at `buf`,
        // valid until the view is released below; the GIL is held
        // throughout, so no Python code runs meanwhile.
        unsafe { std::slice::from_raw_parts(view.buf as *const u8, view.len as usize) }
    };
    let out = f(bytes);
    // SAFETY: releases the view GetBuffer filled, exactly once; `bytes` is
    // not used after this.
    unsafe { ffi::PyBuffer_Release(&mut view) };
    Ok(out)
}
