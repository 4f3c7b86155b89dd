//! Process-wide counters of what ferry did: messages, inline bytes, regions
//! per transfer mode, bytes mapped versus bytes copied, pages populated.
//!
//! Each counter is a relaxed atomic add on a path that already makes a system
//! call, so counting costs nothing measurable; reading them is
//! [`snapshot`]. They let a user reproduce Accent's fault table and DASH's
//! cost breakdown for their own workload. What each field measures, and what
//! it cannot, is written on the field.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A copy of every counter at one moment. Subtract two snapshots to see
/// what happened in between ([`Counters::since`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Messages handed to the kernel successfully (socket path).
    pub messages_sent: u64,
    /// Messages received and validated successfully (socket path).
    pub messages_received: u64,
    /// Inline bytes (message bodies) in sent messages.
    pub bytes_inline_sent: u64,
    /// Inline bytes (message bodies) in received messages.
    pub bytes_inline_received: u64,
    /// Regions sent by copy.
    pub regions_sent_copy: u64,
    /// Regions sent by move.
    pub regions_sent_move: u64,
    /// Regions lent from a pool.
    pub regions_sent_lend: u64,
    /// Regions sent as explicitly shared memory.
    pub regions_sent_share: u64,
    /// Regions received (validated) by copy.
    pub regions_received_copy: u64,
    /// Regions received (validated) by move.
    pub regions_received_move: u64,
    /// Lent regions received (validated).
    pub regions_received_lend: u64,
    /// Shared regions received (validated).
    pub regions_received_share: u64,
    /// Memfds this process created for regions (pools count once per slot).
    pub regions_allocated: u64,
    /// Messages, received by value, that were rejected because a region was
    /// not sealed or otherwise invalid.
    pub regions_rejected: u64,
    /// Bytes of received regions mapped into this process (no copy).
    pub bytes_mapped: u64,
    /// Bytes ferry copied on behalf of regions: ordinary memory copied into a
    /// region, regions copied out, and a sender's view copied into a fresh
    /// memfd when it had been written after an earlier send.
    pub bytes_copied: u64,
    /// Pages populated eagerly (`MAP_POPULATE`) when mapping received
    /// regions.
    pub pages_populated: u64,
    /// Minor page faults of this process (`getrusage`) at the time of the
    /// snapshot. The kernel does not separate copy-on-write faults from
    /// other minor faults, so this is an upper bound on them: take the
    /// difference of two snapshots around a loop that writes to regions and
    /// subtract the pages the loop touches for the first time otherwise.
    pub minor_faults: u64,
    /// Calls made through the RPC fast path (not counted by this module;
    /// the RPC layer adds to it).
    pub rpc_calls: u64,
    /// Page faults a pager served (not counted by this module; the pager
    /// layer adds to it).
    pub pager_faults: u64,
}

impl Counters {
    /// Field-by-field difference `self - earlier` (saturating), except
    /// `minor_faults`, which is also a difference.
    pub fn since(&self, earlier: &Counters) -> Counters {
        macro_rules! d {
            ($($f:ident),*) => { Counters { $($f: self.$f.saturating_sub(earlier.$f)),* } };
        }
        d!(
            messages_sent,
            messages_received,
            bytes_inline_sent,
            bytes_inline_received,
            regions_sent_copy,
            regions_sent_move,
            regions_sent_lend,
            regions_sent_share,
            regions_received_copy,
            regions_received_move,
            regions_received_lend,
            regions_received_share,
            regions_allocated,
            regions_rejected,
            bytes_mapped,
            bytes_copied,
            pages_populated,
            minor_faults,
            rpc_calls,
            pager_faults
        )
    }
}

pub(crate) static MESSAGES_SENT: AtomicU64 = AtomicU64::new(0);
pub(crate) static MESSAGES_RECEIVED: AtomicU64 = AtomicU64::new(0);
pub(crate) static BYTES_INLINE_SENT: AtomicU64 = AtomicU64::new(0);
pub(crate) static BYTES_INLINE_RECEIVED: AtomicU64 = AtomicU64::new(0);
/// Indexed by transfer mode: copy, move, lend, share.
pub(crate) static REGIONS_SENT: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
/// Indexed by transfer mode: copy, move, lend, share.
pub(crate) static REGIONS_RECEIVED: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
pub(crate) static REGIONS_ALLOCATED: AtomicU64 = AtomicU64::new(0);
pub(crate) static REGIONS_REJECTED: AtomicU64 = AtomicU64::new(0);
pub(crate) static BYTES_MAPPED: AtomicU64 = AtomicU64::new(0);
pub(crate) static BYTES_COPIED: AtomicU64 = AtomicU64::new(0);
pub(crate) static PAGES_POPULATED: AtomicU64 = AtomicU64::new(0);
/// For the RPC layer to add to.
#[allow(dead_code)]
pub(crate) static RPC_CALLS: AtomicU64 = AtomicU64::new(0);
/// For the pager layer to add to.
#[allow(dead_code)]
pub(crate) static PAGER_FAULTS: AtomicU64 = AtomicU64::new(0);

/// Adds `n` to a counter (relaxed).
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// Reads every counter. Each is read on its own (relaxed), so a snapshot
/// taken while other threads work is consistent per field, not across fields.
pub fn snapshot() -> Counters {
    let r = |c: &AtomicU64| c.load(Relaxed);
    Counters {
        messages_sent: r(&MESSAGES_SENT),
        messages_received: r(&MESSAGES_RECEIVED),
        bytes_inline_sent: r(&BYTES_INLINE_SENT),
        bytes_inline_received: r(&BYTES_INLINE_RECEIVED),
        regions_sent_copy: r(&REGIONS_SENT[0]),
        regions_sent_move: r(&REGIONS_SENT[1]),
        regions_sent_lend: r(&REGIONS_SENT[2]),
        regions_sent_share: r(&REGIONS_SENT[3]),
        regions_received_copy: r(&REGIONS_RECEIVED[0]),
        regions_received_move: r(&REGIONS_RECEIVED[1]),
        regions_received_lend: r(&REGIONS_RECEIVED[2]),
        regions_received_share: r(&REGIONS_RECEIVED[3]),
        regions_allocated: r(&REGIONS_ALLOCATED),
        regions_rejected: r(&REGIONS_REJECTED),
        bytes_mapped: r(&BYTES_MAPPED),
        bytes_copied: r(&BYTES_COPIED),
        pages_populated: r(&PAGES_POPULATED),
        minor_faults: crate::sys::mem::minor_faults(),
        rpc_calls: r(&RPC_CALLS),
        pager_faults: r(&PAGER_FAULTS),
    }
}
