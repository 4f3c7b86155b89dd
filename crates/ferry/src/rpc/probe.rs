//! Per-phase timing probes of one call (DASH's breakdown of an operation),
//! compiled in only with the `probes` feature; without it every probe is an
//! empty inline function and [`CallProbe`]s are never produced.
//!
//! Timestamps are nanoseconds on the system-wide monotonic clock (read through
//! the vDSO, no system call), so the server's stamps, left in the slot's probe
//! area, are comparable with the client's. They are only ever reported, never
//! trusted for anything.

use super::slot::{Slot, OFF_PROBE};

/// Where the time of one slot-path call went, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallProbe {
    /// Client: copying the request into the slot and publishing it.
    pub copy_in: u64,
    /// Client: deciding on, and issuing, the server's wake-up.
    pub wake: u64,
    /// From the request's publication until the server had copied it out
    /// (the server noticing it: spin, or wake-up and scheduling).
    pub server_dispatch: u64,
    /// Server: from copying the request out until the reply was published
    /// (the handler's work and the reply's copy-in).
    pub server_reply: u64,
    /// From the reply's publication until the client saw it.
    pub to_client: u64,
    /// Client: copying the reply out and checking it.
    pub copy_out: u64,
}

#[cfg(feature = "probes")]
mod imp {
    pub(super) const ON: bool = true;
    pub(super) fn now() -> u64 {
        crate::sys::futex::monotonic_ns()
    }
}

#[cfg(not(feature = "probes"))]
mod imp {
    pub(super) const ON: bool = false;
    #[inline(always)]
    pub(super) fn now() -> u64 {
        0
    }
}

/// A timestamp now (0 without the feature).
#[inline(always)]
pub(crate) fn now() -> u64 {
    imp::now()
}

/// Server: records when a request was copied out (`which == 0`) or its reply
/// published (`which == 1`).
#[inline(always)]
pub(crate) fn server_stamp(slot: &Slot, which: usize) {
    if imp::ON {
        slot.probe_words().write(OFF_PROBE + which * 8, &now().to_le_bytes());
    }
}

/// Client: the stamps of one call.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClientStamps {
    pub start: u64,
    pub published: u64,
    pub woken: u64,
    pub seen: u64,
    pub done: u64,
}

/// Client: assembles a call's probe from its stamps and the server's.
pub(crate) fn assemble(slot: &Slot, c: &ClientStamps) -> Option<CallProbe> {
    if !imp::ON {
        return None;
    }
    let mut b = [0u8; 16];
    slot.probe_words().read(OFF_PROBE, &mut b);
    let s_seen = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let s_pub = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
    Some(CallProbe {
        copy_in: c.published.saturating_sub(c.start),
        wake: c.woken.saturating_sub(c.published),
        server_dispatch: s_seen.saturating_sub(c.woken),
        server_reply: s_pub.saturating_sub(s_seen),
        to_client: c.seen.saturating_sub(s_pub),
        copy_out: c.done.saturating_sub(c.seen),
    })
}
