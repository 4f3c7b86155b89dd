//! The wire-format parser, for programs that check a datagram's layout
//! (and for the C test that runs the language-neutral vectors in
//! `tests/vectors/` through this library). It is `ferry::wire::parse`
//! itself, with each `WireError` variant mapped to a C error kind and its
//! fields.

use std::ffi::{c_char, c_int, CStr};

use ferry::WireError;

use crate::handle::{bytes, out, put};
use crate::status::{ferry_status, guard, Failure};

/// Most items a message holds.
pub const FERRY_MAX_ITEMS: usize = 64;
/// Most inline bytes a message holds.
pub const FERRY_MAX_INLINE: usize = 65536;
/// Longest reason text `ferry_wire_error` holds, with its NUL.
pub const FERRY_WIRE_REASON_LEN: usize = 128;

/// One item descriptor as it appears on the wire.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ferry_wire_item {
    /// Item kind (1 send, 2 send-once, 3 receive, 4 region, 16 pager).
    pub kind: u8,
    /// Region transfer mode or pager item mode (0 for rights).
    pub mode: u8,
    /// Descriptors the item consumes.
    pub fds: u16,
    /// Kind-specific flags.
    pub flags: u32,
    /// Region length in bytes.
    pub len: u64,
    /// Region address in the sender (0: none).
    pub addr: u64,
    /// Kind-specific extra word (a lent region's pool slot).
    pub aux: u64,
}

/// A datagram's checked layout.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ferry_wire_parsed {
    /// Operation id.
    pub op: u32,
    /// Header flags (0x01: item 0 is the reply right).
    pub flags: u8,
    /// Items in `items`.
    pub item_count: usize,
    /// The item descriptors, in order.
    pub items: [ferry_wire_item; FERRY_MAX_ITEMS],
    /// Offset of the inline bytes in the datagram.
    pub inline_offset: usize,
    /// Number of inline bytes.
    pub inline_len: usize,
}

/// Why a datagram was rejected: the Rust parser's `WireError` variants,
/// one for one (`ferry_wire_error_name` spells them as the test vectors
/// do).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferry_wire_error_kind {
    /// No error.
    FERRY_WIRE_OK = 0,
    /// Fewer bytes than needed: `a` needed, `b` present.
    FERRY_WIRE_TRUNCATED = 1,
    /// Not ferry's magic: `a` is the magic read as a little-endian u32.
    FERRY_WIRE_BAD_MAGIC = 2,
    /// Unknown version `a`.
    FERRY_WIRE_UNKNOWN_VERSION = 3,
    /// A reserved field or flag bit is set.
    FERRY_WIRE_RESERVED_NOT_ZERO = 4,
    /// The header implies `a` bytes, the datagram has `b`.
    FERRY_WIRE_LENGTH_MISMATCH = 5,
    /// `a` items exceed the limit.
    FERRY_WIRE_TOO_MANY_ITEMS = 6,
    /// `a` inline bytes exceed the limit.
    FERRY_WIRE_INLINE_TOO_LARGE = 7,
    /// `a` descriptors exceed the limit.
    FERRY_WIRE_TOO_MANY_FDS = 8,
    /// `a` descriptors declared, `b` arrived.
    FERRY_WIRE_FD_COUNT_MISMATCH = 9,
    /// The kernel dropped descriptors.
    FERRY_WIRE_FDS_TRUNCATED = 10,
    /// Larger than any valid message.
    FERRY_WIRE_OVERSIZED = 11,
    /// Unknown item kind `a`.
    FERRY_WIRE_UNKNOWN_ITEM_KIND = 12,
    /// Item `a` declares `b` descriptors, not allowed for its kind.
    FERRY_WIRE_BAD_ITEM_FD_COUNT = 13,
    /// Item `a` is declared a right but is not a port.
    FERRY_WIRE_NOT_A_PORT = 14,
    /// The reply flag is set but item 0 is not a send or send-once right.
    FERRY_WIRE_BAD_REPLY_RIGHT = 15,
    /// The receive right of the port the message arrived on.
    FERRY_WIRE_RECEIVE_RIGHT_TO_SELF = 16,
    /// Item `a` is a bad region; `reason` says why.
    FERRY_WIRE_BAD_REGION = 17,
    /// Item `a`, a region sent by value, is not sealed.
    FERRY_WIRE_NOT_SEALED = 18,
    /// Item `a` is a bad memory-object item; `reason` says why.
    FERRY_WIRE_BAD_PAGER_ITEM = 19,
    /// Version `a` was used for a message the earlier version expresses.
    FERRY_WIRE_NEEDLESS_VERSION = 20,
}

/// A rejected datagram's error and its fields (which of `a` and `b` mean
/// something depends on `kind`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ferry_wire_error {
    /// The error.
    pub kind: ferry_wire_error_kind,
    /// First field.
    pub a: u64,
    /// Second field.
    pub b: u64,
    /// Reason text of `FERRY_WIRE_BAD_REGION` and `FERRY_WIRE_BAD_PAGER_ITEM`
    /// (NUL-terminated, cut at a character boundary if longer); empty
    /// otherwise.
    pub reason: [c_char; FERRY_WIRE_REASON_LEN],
}

impl ferry_wire_error {
    fn from_wire(e: &WireError) -> ferry_wire_error {
        use ferry_wire_error_kind::*;
        use WireError::*;
        let (kind, a, b, reason): (_, u64, u64, &str) = match e {
            Truncated { need, got } => (FERRY_WIRE_TRUNCATED, *need as u64, *got as u64, ""),
            BadMagic(m) => (FERRY_WIRE_BAD_MAGIC, u64::from(*m), 0, ""),
            UnknownVersion(v) => (FERRY_WIRE_UNKNOWN_VERSION, u64::from(*v), 0, ""),
            NeedlessVersion(v) => (FERRY_WIRE_NEEDLESS_VERSION, u64::from(*v), 0, ""),
            ReservedNotZero => (FERRY_WIRE_RESERVED_NOT_ZERO, 0, 0, ""),
            LengthMismatch { declared, actual } => (FERRY_WIRE_LENGTH_MISMATCH, *declared as u64, *actual as u64, ""),
            TooManyItems(n) => (FERRY_WIRE_TOO_MANY_ITEMS, *n as u64, 0, ""),
            InlineTooLarge(n) => (FERRY_WIRE_INLINE_TOO_LARGE, *n as u64, 0, ""),
            TooManyFds(n) => (FERRY_WIRE_TOO_MANY_FDS, *n as u64, 0, ""),
            FdCountMismatch { declared, received } => (FERRY_WIRE_FD_COUNT_MISMATCH, *declared as u64, *received as u64, ""),
            FdsTruncated => (FERRY_WIRE_FDS_TRUNCATED, 0, 0, ""),
            Oversized => (FERRY_WIRE_OVERSIZED, 0, 0, ""),
            UnknownItemKind(k) => (FERRY_WIRE_UNKNOWN_ITEM_KIND, u64::from(*k), 0, ""),
            BadItemFdCount { item, count } => (FERRY_WIRE_BAD_ITEM_FD_COUNT, *item as u64, *count as u64, ""),
            NotAPort { item } => (FERRY_WIRE_NOT_A_PORT, *item as u64, 0, ""),
            BadReplyRight => (FERRY_WIRE_BAD_REPLY_RIGHT, 0, 0, ""),
            ReceiveRightToSelf => (FERRY_WIRE_RECEIVE_RIGHT_TO_SELF, 0, 0, ""),
            BadRegion { item, reason } => (FERRY_WIRE_BAD_REGION, *item as u64, 0, reason.as_str()),
            NotSealed { item } => (FERRY_WIRE_NOT_SEALED, *item as u64, 0, ""),
            BadPagerItem { item, reason } => (FERRY_WIRE_BAD_PAGER_ITEM, *item as u64, 0, *reason),
        };
        let mut out = ferry_wire_error { kind, a, b, reason: [0; FERRY_WIRE_REASON_LEN] };
        let mut end = reason.len().min(FERRY_WIRE_REASON_LEN - 1);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        for (d, s) in out.reason.iter_mut().zip(&reason.as_bytes()[..end]) {
            *d = *s as c_char;
        }
        out
    }
}

/// Checks a datagram of `len` bytes that arrived with `nfds` descriptors,
/// exactly as a receiver does before acting on it. On success `*parsed`
/// describes it; on `FERRY_ERR_BAD_MESSAGE`, `*error` (if not NULL) says
/// which rule it broke.
///
/// # Safety
/// `bytes` points at `len` readable bytes (NULL allowed when `len` is 0);
/// `parsed` points at a writable `ferry_wire_parsed`; `error` is NULL or
/// points at a writable `ferry_wire_error`.
#[no_mangle]
pub unsafe extern "C" fn ferry_wire_parse(data: *const u8, len: usize, nfds: usize, parsed: *mut ferry_wire_parsed, error: *mut ferry_wire_error) -> ferry_status {
    guard(|| {
        let p = out(parsed, "parsed")?;
        // SAFETY: the header promises `len` readable bytes at `data`.
        let b = unsafe { bytes(data, len, "data") }?;
        match ferry::wire::parse(b, nfds) {
            Ok(w) => {
                let mut items = [ferry_wire_item::default(); FERRY_MAX_ITEMS];
                for (d, s) in items.iter_mut().zip(&w.items) {
                    *d = ferry_wire_item { kind: s.kind, mode: s.mode, fds: s.fds, flags: s.flags, len: s.len, addr: s.addr, aux: s.aux };
                }
                let out = ferry_wire_parsed {
                    op: w.op,
                    flags: w.flags,
                    item_count: w.items.len(),
                    items,
                    inline_offset: w.inline.start,
                    inline_len: w.inline.len(),
                };
                // SAFETY: `p` checked non-null; the header requires it writable.
                unsafe { put(p, out) };
                if !error.is_null() {
                    let ok = ferry_wire_error { kind: ferry_wire_error_kind::FERRY_WIRE_OK, a: 0, b: 0, reason: [0; FERRY_WIRE_REASON_LEN] };
                    // SAFETY: non-null and writable per the header.
                    unsafe { put(error, ok) };
                }
                Ok(())
            }
            Err(e) => {
                if !error.is_null() {
                    // SAFETY: non-null and writable per the header.
                    unsafe { put(error, ferry_wire_error::from_wire(&e)) };
                }
                Err(Failure::from(e))
            }
        }
    })
}

/// The name of a wire error kind as the Rust parser and the test vectors
/// spell it (`"Truncated"`, `"BadRegion"`, …; `"Ok"` for none,
/// `"Unknown"` for a value that is not a kind). The string is static.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub extern "C" fn ferry_wire_error_name(kind: c_int) -> *const c_char {
    let name: &'static CStr = match kind {
        0 => c"Ok",
        1 => c"Truncated",
        2 => c"BadMagic",
        3 => c"UnknownVersion",
        4 => c"ReservedNotZero",
        5 => c"LengthMismatch",
        6 => c"TooManyItems",
        7 => c"InlineTooLarge",
        8 => c"TooManyFds",
        9 => c"FdCountMismatch",
        10 => c"FdsTruncated",
        11 => c"Oversized",
        12 => c"UnknownItemKind",
        13 => c"BadItemFdCount",
        14 => c"NotAPort",
        15 => c"BadReplyRight",
        16 => c"ReceiveRightToSelf",
        17 => c"BadRegion",
        18 => c"NotSealed",
        19 => c"BadPagerItem",
        20 => c"NeedlessVersion",
        _ => c"Unknown",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C constants agree with the Rust limits.
    #[test]
    fn limits_match_the_rust_crate() {
        assert_eq!(FERRY_MAX_ITEMS, ferry::message::MAX_ITEMS);
        assert_eq!(FERRY_MAX_INLINE, ferry::message::MAX_INLINE);
    }

    /// Every kind's name is the Rust variant's name (its Debug spelling).
    #[test]
    fn kind_names_are_the_variant_names() {
        let samples = [
            WireError::Truncated { need: 1, got: 0 },
            WireError::BadMagic(0),
            WireError::UnknownVersion(0),
            WireError::NeedlessVersion(2),
            WireError::ReservedNotZero,
            WireError::LengthMismatch { declared: 0, actual: 0 },
            WireError::TooManyItems(0),
            WireError::InlineTooLarge(0),
            WireError::TooManyFds(0),
            WireError::FdCountMismatch { declared: 0, received: 0 },
            WireError::FdsTruncated,
            WireError::Oversized,
            WireError::UnknownItemKind(0),
            WireError::BadItemFdCount { item: 0, count: 0 },
            WireError::NotAPort { item: 0 },
            WireError::BadReplyRight,
            WireError::ReceiveRightToSelf,
            WireError::BadRegion { item: 0, reason: String::new() },
            WireError::NotSealed { item: 0 },
            WireError::BadPagerItem { item: 0, reason: "" },
        ];
        for e in samples {
            let k = ferry_wire_error::from_wire(&e).kind;
            // SAFETY: the names are static NUL-terminated strings.
            let name = unsafe { CStr::from_ptr(ferry_wire_error_name(k as c_int)) }.to_str().unwrap();
            let debug = format!("{e:?}");
            assert_eq!(debug.split(['{', '(', ' ']).next().unwrap(), name, "{e:?}");
        }
    }

    /// A reason longer than the buffer is cut at a character boundary and
    /// stays NUL-terminated.
    #[test]
    fn long_reasons_are_cut_cleanly() {
        let reason = "é".repeat(200);
        let e = ferry_wire_error::from_wire(&WireError::BadRegion { item: 2, reason });
        assert_eq!(e.a, 2);
        // SAFETY: `from_wire` always leaves a NUL within the buffer.
        let s = unsafe { CStr::from_ptr(e.reason.as_ptr()) };
        assert_eq!(s.to_str().unwrap(), "é".repeat(63));
    }
}
