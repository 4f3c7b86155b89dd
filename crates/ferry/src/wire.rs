//! The wire format: encoding and checking message bytes (see
//! `docs/wire-format.md`).
//!
//! This module is pure: it turns bytes into a [`Parsed`] description and back,
//! and knows nothing of descriptors beyond how many each item claims. The
//! checks that need the descriptors themselves (is it a port? is the region
//! sealed?) happen in `message.rs`, after these and before anything is acted on.

use crate::error::WireError;

/// `"FERY"` read as a little-endian `u32`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"FERY");
/// The wire-format version of every message that version 1 can express.
pub const VERSION: u8 = 1;
/// Version 2: version 1 plus regions of length 0. A message is written in
/// the lowest version that expresses it, so only a message carrying an
/// empty region is version 2, and a version-2 message without one is
/// refused ([`WireError::NeedlessVersion`]): every message has exactly one
/// encoding. This implementation accepts both.
pub const VERSION_EMPTY_REGIONS: u8 = 2;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 24;
/// Size of one item descriptor in bytes.
pub const ITEM_LEN: usize = 32;
/// Most items in one message.
pub const MAX_ITEMS: usize = 64;
/// Most inline bytes in one message.
pub const MAX_INLINE: usize = 64 * 1024;
/// Most descriptors in one message (the kernel's `SCM_MAX_FD`).
pub const MAX_FDS: usize = crate::sys::socket::MAX_FDS;
/// Largest possible valid datagram.
pub const MAX_MESSAGE: usize = HEADER_LEN + MAX_ITEMS * ITEM_LEN + MAX_INLINE;

/// Header flag: item 0 is the reply right.
pub const FLAG_REPLY: u8 = 0x01;

/// Item kind: a send right (one descriptor).
pub const KIND_SEND: u8 = 1;
/// Item kind: a send-once right (one descriptor).
pub const KIND_SEND_ONCE: u8 = 2;
/// Item kind: a receive right (1 + outstanding send-once sockets).
pub const KIND_RECEIVE: u8 = 3;
/// Item kind: an out-of-line memory region (one memfd; a lent region also
/// carries a send-once right for its return).
pub const KIND_REGION: u8 = 4;
/// Item kind: a descriptor of the memory-object protocol (one descriptor;
/// `mode` says which: see [`crate::pager`] and `docs/pager.md`). Numbered
/// apart from the core kinds so that the core can grow without a clash.
pub const KIND_PAGER: u8 = 16;

/// Region mode: by value, copy-on-write (the sender keeps its copy).
pub const MODE_COPY: u8 = 1;
/// Region mode: by value, the sender gave its copy up.
pub const MODE_MOVE: u8 = 2;
/// Region mode: lent from the sender's pool, read-only, returned on drop.
pub const MODE_LEND: u8 = 3;
/// Region mode: explicitly shared mutable memory.
pub const MODE_SHARE: u8 = 4;

/// Region flag: the sender advised huge pages; the receiver should too.
pub const REGION_FLAG_HUGE: u32 = 0x1;
/// Region flag: the region holds a payload placed by the automatic
/// inline-or-region choice (`ferry::region::auto`).
pub const REGION_FLAG_AUTO: u32 = 0x2;
/// Every region flag this version knows.
pub const REGION_FLAGS: u32 = REGION_FLAG_HUGE | REGION_FLAG_AUTO;

/// One item descriptor as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ItemDesc {
    /// One of the `KIND_*` constants.
    pub kind: u8,
    /// Region transfer mode, or pager item mode (0 for rights).
    pub mode: u8,
    /// Descriptors this item consumes, in order.
    pub fds: u16,
    /// Kind-specific flags (0 for rights).
    pub flags: u32,
    /// Region length in bytes (0 for rights).
    pub len: u64,
    /// Region address in the sender (0: no placement requested).
    pub addr: u64,
    /// Kind-specific extra word (region: pool slot for lend; 0 otherwise).
    pub aux: u64,
}

/// A fully checked message layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Operation id.
    pub op: u32,
    /// Header flags.
    pub flags: u8,
    /// Item descriptors, in order.
    pub items: Vec<ItemDesc>,
    /// Byte range of the inline data within the datagram.
    pub inline: std::ops::Range<usize>,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// Checks a datagram that arrived with `nfds` descriptors and describes it.
/// Every rule of the format is checked here, in a fixed order, so each
/// malformed input maps to exactly one error.
pub fn parse(b: &[u8], nfds: usize) -> Result<Parsed, WireError> {
    if b.len() < HEADER_LEN {
        return Err(WireError::Truncated { need: HEADER_LEN, got: b.len() });
    }
    let magic = u32_at(b, 0);
    if magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    let version = b[4];
    if version != VERSION && version != VERSION_EMPTY_REGIONS {
        return Err(WireError::UnknownVersion(version));
    }
    let flags = b[5];
    if flags & !FLAG_REPLY != 0 || u16_at(b, 18) != 0 || u32_at(b, 20) != 0 {
        return Err(WireError::ReservedNotZero);
    }
    let count = u16_at(b, 6) as usize;
    if count > MAX_ITEMS {
        return Err(WireError::TooManyItems(count));
    }
    let op = u32_at(b, 8);
    let inline_len = u32_at(b, 12) as usize;
    if inline_len > MAX_INLINE {
        return Err(WireError::InlineTooLarge(inline_len));
    }
    let declared_fds = u16_at(b, 16) as usize;
    if declared_fds > MAX_FDS {
        return Err(WireError::TooManyFds(declared_fds));
    }
    let total = HEADER_LEN + count * ITEM_LEN + inline_len;
    if b.len() < total {
        return Err(WireError::Truncated { need: total, got: b.len() });
    }
    if b.len() != total {
        return Err(WireError::LengthMismatch { declared: total, actual: b.len() });
    }
    if declared_fds != nfds {
        return Err(WireError::FdCountMismatch { declared: declared_fds, received: nfds });
    }
    let mut items = Vec::with_capacity(count);
    let mut sum = 0usize;
    for i in 0..count {
        let o = HEADER_LEN + i * ITEM_LEN;
        let d = ItemDesc {
            kind: b[o],
            mode: b[o + 1],
            fds: u16_at(b, o + 2),
            flags: u32_at(b, o + 4),
            len: u64_at(b, o + 8),
            addr: u64_at(b, o + 16),
            aux: u64_at(b, o + 24),
        };
        let fds = d.fds as usize;
        match d.kind {
            KIND_SEND | KIND_SEND_ONCE => {
                if fds != 1 {
                    return Err(WireError::BadItemFdCount { item: i, count: fds });
                }
                if d.mode != 0 || d.flags != 0 || d.len != 0 || d.addr != 0 || d.aux != 0 {
                    return Err(WireError::ReservedNotZero);
                }
            }
            KIND_RECEIVE => {
                if fds == 0 {
                    return Err(WireError::BadItemFdCount { item: i, count: fds });
                }
                if d.mode != 0 || d.flags != 0 || d.len != 0 || d.addr != 0 || d.aux != 0 {
                    return Err(WireError::ReservedNotZero);
                }
            }
            KIND_REGION => {
                let want = match d.mode {
                    MODE_COPY | MODE_MOVE | MODE_SHARE => 1,
                    MODE_LEND => 2,
                    m => return Err(WireError::BadRegion { item: i, reason: format!("unknown transfer mode {m}") }),
                };
                if fds != want {
                    return Err(WireError::BadItemFdCount { item: i, count: fds });
                }
                if d.flags & !REGION_FLAGS != 0 || (d.mode != MODE_LEND && d.aux != 0) {
                    return Err(WireError::ReservedNotZero);
                }
                if d.len == 0 && version < VERSION_EMPTY_REGIONS {
                    return Err(WireError::BadRegion { item: i, reason: "zero length".into() });
                }
                if d.len > isize::MAX as u64 {
                    return Err(WireError::BadRegion { item: i, reason: format!("length {} exceeds the address space", d.len) });
                }
                if !d.addr.is_multiple_of(4096) || d.addr.checked_add(d.len).is_none() {
                    return Err(WireError::BadRegion { item: i, reason: format!("sender address {:#x} is not page aligned or wraps", d.addr) });
                }
            }
            KIND_PAGER => {
                if fds != 1 {
                    return Err(WireError::BadItemFdCount { item: i, count: fds });
                }
                if d.flags != 0 || d.aux != 0 {
                    return Err(WireError::ReservedNotZero);
                }
            }
            k => return Err(WireError::UnknownItemKind(k)),
        }
        sum += fds;
        items.push(d);
    }
    if sum != nfds {
        return Err(WireError::FdCountMismatch { declared: sum, received: nfds });
    }
    if flags & FLAG_REPLY != 0 && !matches!(items.first(), Some(d) if d.kind == KIND_SEND || d.kind == KIND_SEND_ONCE) {
        return Err(WireError::BadReplyRight);
    }
    if version != needed_version(&items) {
        return Err(WireError::NeedlessVersion(version));
    }
    Ok(Parsed { op, flags, items, inline: HEADER_LEN + count * ITEM_LEN..total })
}

/// The lowest version that expresses a message with these items: 2 when a
/// region is empty, else 1.
pub fn needed_version(items: &[ItemDesc]) -> u8 {
    if items.iter().any(|d| d.kind == KIND_REGION && d.len == 0) {
        VERSION_EMPTY_REGIONS
    } else {
        VERSION
    }
}

/// Writes a message's bytes into `out` (cleared first), in the lowest
/// version that expresses it ([`needed_version`]). The caller has checked
/// the limits; the descriptor total is the sum of the items' counts.
pub fn encode(out: &mut Vec<u8>, op: u32, flags: u8, items: &[ItemDesc], inline: &[u8]) {
    out.clear();
    encode_head(out, op, flags, items, inline.len());
    out.extend_from_slice(inline);
}

/// Appends to `out` the header and item descriptors of a message whose
/// inline bytes, `inline_len` of them, follow them on the wire (as
/// [`encode`] writes them, for a sender that passes the inline bytes
/// from where they are).
pub fn encode_head(out: &mut Vec<u8>, op: u32, flags: u8, items: &[ItemDesc], inline_len: usize) {
    let nfds: usize = items.iter().map(|d| d.fds as usize).sum();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(needed_version(items));
    out.push(flags);
    out.extend_from_slice(&(items.len() as u16).to_le_bytes());
    out.extend_from_slice(&op.to_le_bytes());
    out.extend_from_slice(&(inline_len as u32).to_le_bytes());
    out.extend_from_slice(&(nfds as u16).to_le_bytes());
    out.extend_from_slice(&[0u8; 6]);
    for d in items {
        out.push(d.kind);
        out.push(d.mode);
        out.extend_from_slice(&d.fds.to_le_bytes());
        out.extend_from_slice(&d.flags.to_le_bytes());
        out.extend_from_slice(&d.len.to_le_bytes());
        out.extend_from_slice(&d.addr.to_le_bytes());
        out.extend_from_slice(&d.aux.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let items = [ItemDesc { kind: KIND_SEND, fds: 1, ..Default::default() }];
        let mut v = Vec::new();
        encode(&mut v, 7, FLAG_REPLY, &items, b"hi");
        let p = parse(&v, 1).unwrap();
        assert_eq!(p.op, 7);
        assert_eq!(p.items, items);
        assert_eq!(&v[p.inline], b"hi");
    }

    fn region(mode: u8, fds: u16) -> ItemDesc {
        ItemDesc { kind: KIND_REGION, mode, fds, len: 8192, addr: 0x7f00_0000_0000, ..Default::default() }
    }

    #[test]
    fn region_items_by_mode() {
        let mut v = Vec::new();
        for (mode, fds) in [(MODE_COPY, 1), (MODE_MOVE, 1), (MODE_SHARE, 1), (MODE_LEND, 2)] {
            let d = ItemDesc { aux: if mode == MODE_LEND { 3 } else { 0 }, flags: REGION_FLAG_HUGE, ..region(mode, fds) };
            encode(&mut v, 1, 0, &[d], b"");
            assert_eq!(parse(&v, fds as usize).unwrap().items, vec![d]);
        }
    }

    #[test]
    fn bad_region_items_are_rejected() {
        let mut v = Vec::new();
        type Case = (ItemDesc, usize, fn(&WireError) -> bool);
        let cases: Vec<Case> = vec![
            (region(0, 1), 1, |e| matches!(e, WireError::BadRegion { item: 0, .. })),
            (region(9, 1), 1, |e| matches!(e, WireError::BadRegion { item: 0, .. })),
            (region(MODE_COPY, 2), 2, |e| matches!(e, WireError::BadItemFdCount { item: 0, count: 2 })),
            (region(MODE_LEND, 1), 1, |e| matches!(e, WireError::BadItemFdCount { item: 0, count: 1 })),
            (region(MODE_SHARE, 0), 0, |e| matches!(e, WireError::BadItemFdCount { item: 0, count: 0 })),
            (ItemDesc { len: u64::MAX, ..region(MODE_COPY, 1) }, 1, |e| matches!(e, WireError::BadRegion { .. })),
            (ItemDesc { addr: 0x1001, ..region(MODE_MOVE, 1) }, 1, |e| matches!(e, WireError::BadRegion { .. })),
            (ItemDesc { flags: 0x80, ..region(MODE_COPY, 1) }, 1, |e| *e == WireError::ReservedNotZero),
            (ItemDesc { aux: 1, ..region(MODE_COPY, 1) }, 1, |e| *e == WireError::ReservedNotZero),
        ];
        for (d, nfds, ok) in cases {
            encode(&mut v, 1, 0, &[d], b"");
            let e = parse(&v, nfds).unwrap_err();
            assert!(ok(&e), "{d:?} gave {e:?}");
        }
    }

    #[test]
    fn every_prefix_is_rejected() {
        let items = [ItemDesc { kind: KIND_RECEIVE, fds: 2, ..Default::default() }];
        let mut v = Vec::new();
        encode(&mut v, 1, 0, &items, b"payload");
        for n in 0..v.len() {
            assert!(parse(&v[..n], 2).is_err(), "prefix of {n} bytes accepted");
        }
    }

    #[test]
    fn empty_regions_need_version_2_and_only_they() {
        let empty = ItemDesc { len: 0, ..region(MODE_COPY, 1) };
        let mut v = Vec::new();
        encode(&mut v, 1, 0, &[empty], b"");
        assert_eq!(v[4], VERSION_EMPTY_REGIONS);
        assert_eq!(parse(&v, 1).unwrap().items, vec![empty]);
        v[4] = VERSION;
        assert_eq!(parse(&v, 1).unwrap_err(), WireError::BadRegion { item: 0, reason: "zero length".into() });
        encode(&mut v, 1, 0, &[region(MODE_COPY, 1)], b"");
        assert_eq!(v[4], VERSION);
        v[4] = VERSION_EMPTY_REGIONS;
        assert_eq!(parse(&v, 1).unwrap_err(), WireError::NeedlessVersion(VERSION_EMPTY_REGIONS));
    }
}
