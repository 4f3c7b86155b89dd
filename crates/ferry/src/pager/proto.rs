//! The memory-object protocol's operation ids and message bodies.
//!
//! Bodies are fixed sequences of little-endian `u64`s (and, for errors, a
//! UTF-8 reason); [`Fields`] reads them with bounds checks so a short or
//! long body from a hostile peer becomes an error, never a panic.

/// Client → server: open object `id`. Reply: `OPENED` or `ERROR`.
pub const OPEN: u32 = 0x7061_0001;
/// Server → client: `size, mode, cluster, on_death, track_dirty` (+ page-cache item for
/// zero-copy objects).
pub const OPENED: u32 = 0x7061_0002;
/// Client → server: attach `id, wp`; items: the userfaultfd and the
/// lifeline send right. Reply: `ATTACHED` or `ERROR`.
pub const ATTACH: u32 = 0x7061_0003;
/// Server → client: attached.
pub const ATTACHED: u32 = 0x7061_0004;
/// Client → server: make a copy-on-write copy of `id`; item: a hold send
/// right (the copy lives while its receive right does). Reply: `COPIED id2`.
pub const COPY: u32 = 0x7061_0005;
/// Server → client: the copy's id.
pub const COPIED: u32 = 0x7061_0006;
/// Client → server: counters of `id`. Reply: `STATS` with the counters.
pub const STATS: u32 = 0x7061_0007;
/// Server → client: the counters, in [`super::ObjectStats`] field order.
pub const STATS_REPLY: u32 = 0x7061_0008;
/// Client → server: `id, offset` + data (inline): change the object, as its
/// owner. Reply: `WRITTEN`.
pub const WRITE: u32 = 0x7061_0009;
/// Server → client: written.
pub const WRITTEN: u32 = 0x7061_000a;
/// Server → client's guardian (on the lifeline): return dirty pages
/// (Mach's `lock_request` with clean): body is a list of page offsets.
pub const CLEAN: u32 = 0x7061_000b;
/// Client's guardian → server (on the lifeline's reply right): one page
/// `offset` + its bytes (Mach's `data_return`).
pub const DIRTY: u32 = 0x7061_000c;
/// Owner → server: ask the clients of `id` to return their dirty pages.
/// Reply: `CLEANING n` (pages asked for).
pub const CLEAN_REQUEST: u32 = 0x7061_000d;
/// Server → owner: how many pages were asked back.
pub const CLEANING: u32 = 0x7061_000e;
/// The server's own minter → its main port: `uid` (u32), carrying the
/// receive right of a port made for that user's client
/// ([`super::PortMinter`]). Taken only from this process.
pub const ADD_PORT: u32 = 0x7061_0010;
/// Server → client: `code` + reason.
pub const ERROR: u32 = 0x7061_00ff;

/// `ERROR` codes.
pub const E_NO_OBJECT: u64 = 1;
/// The request was malformed.
pub const E_BAD_REQUEST: u64 = 2;
/// The sender may not do this.
pub const E_DENIED: u64 = 3;
/// Not supported for this object.
pub const E_UNSUPPORTED: u64 = 4;
/// The sender's user is at its budget (mappings, held objects).
pub const E_BUDGET: u64 = 5;

/// Encodes `u64`s as a body.
pub fn body(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Reads `u64`s from a body, front to back.
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    /// Starts reading `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Fields { rest: b }
    }

    /// The next word, or `None` if the body is too short.
    pub fn u64(&mut self) -> Option<u64> {
        let (w, rest) = self.rest.split_first_chunk::<8>()?;
        self.rest = rest;
        Some(u64::from_le_bytes(*w))
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_bodies_are_none_not_panics() {
        let b = body(&[7, 9]);
        let mut f = Fields::new(&b[..12]);
        assert_eq!(f.u64(), Some(7));
        assert_eq!(f.u64(), None);
        assert_eq!(f.rest().len(), 4);
    }
}
