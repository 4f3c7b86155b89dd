//! Raw pointers from C turned into references and owned handles, each in
//! one place with its null check.
//!
//! # Safety
//! Every function here trusts what the C header promises: a non-null handle
//! pointer came from the matching `ferry_*` constructor and has not been
//! freed or consumed, and nothing else uses it for the duration of the call
//! (or only reads it, for `const` handles of thread-safe objects). Byte
//! pointers are valid for the length given with them. A handle is a
//! `Box<T>` turned into a raw pointer by [`give`] and back by [`take`].

use std::ffi::{c_char, CStr};

use crate::status::{Failure, Res};

/// The object behind a `const` handle.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` not being written meanwhile.
pub(crate) unsafe fn obj<'a, T>(p: *const T, what: &str) -> Res<&'a T> {
    // SAFETY: the caller promises `p` is NULL or a live, unaliased-for-writes handle.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(what))
}

/// The object behind a mutable handle.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` nothing else uses meanwhile.
pub(crate) unsafe fn obj_mut<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: the caller promises `p` is NULL or a live handle used by nobody else now.
    unsafe { p.as_mut() }.ok_or_else(|| Failure::null(what))
}

/// Takes a handle back (the C side gives it up).
///
/// # Safety
/// `p` is NULL or a live handle of type `T` made by [`give`], which the
/// caller will not use again.
pub(crate) unsafe fn take<T>(p: *mut T, what: &str) -> Res<Box<T>> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: `p` came from `Box::into_raw` in `give` and is given up by the caller.
    Ok(unsafe { Box::from_raw(p) })
}

/// Frees a handle; NULL is ignored.
///
/// # Safety
/// As [`take`].
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: as `take`: a handle made by `give`, given up by the caller.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// Checks an out-parameter before any work is done.
pub(crate) fn out<T>(p: *mut T, what: &str) -> Res<*mut T> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    Ok(p)
}

/// Stores a value through an out-parameter checked by [`out`].
///
/// # Safety
/// `p` is non-null, aligned and valid for writes of a `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller checked `p` with `out` and the header requires it to point at a `T`.
    unsafe { p.write(v) }
}

/// Hands a new object to C as a handle through an out-parameter.
///
/// # Safety
/// `p` is non-null, aligned and valid for writes of a pointer.
pub(crate) unsafe fn give<T>(p: *mut *mut T, v: T) {
    // SAFETY: as `put`.
    unsafe { put(p, Box::into_raw(Box::new(v))) }
}

/// The bytes behind a pointer and length; NULL is allowed for zero bytes.
///
/// # Safety
/// `p` is valid for reads of `len` bytes, unchanged during the call.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: the caller promises `len` readable bytes at `p`.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Writable bytes behind a pointer and length; NULL is allowed for zero bytes.
///
/// # Safety
/// `p` is valid for writes of `len` bytes, used by nothing else during the call.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut u8, len: usize, what: &str) -> Res<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: the caller promises `len` writable bytes at `p`, not otherwise in use.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A NUL-terminated UTF-8 string.
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string unchanged during the call.
pub(crate) unsafe fn string<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: the caller promises a NUL-terminated string at `p`.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| Failure::new(crate::ferry_status::FERRY_ERR_NAME_INVALID, format!("{what} is not UTF-8")))
}
