//! Probe results as benchmark records (`suite: "probe"`, `impl:
//! "machine"`, the one [`Record`] type of the crate), and the unit of each
//! primitive's operation.

use std::fmt;

use super::Stats;

/// The `suite` of every probe record.
pub const SUITE: &str = "probe";
/// The `impl` of every probe record: the machine itself.
pub const IMPL: &str = "machine";

pub use crate::record::{Placement, Record, Touch};

/// A measured probe record, with its unit and sample count in `extra`.
pub fn measured(case: &str, placement: Placement, s: Stats) -> Record {
    let mut r = Record::new(SUITE, case, IMPL, placement).extra("unit", unit_of(case)).extra("samples", s.samples as u64);
    r.iters = s.iters;
    r.median_ns = Some(s.median_ns);
    r.p99_ns = Some(s.p99_ns);
    r.min_ns = Some(s.min_ns);
    r
}

/// A probe record for a primitive that could not run here, with the reason.
pub fn skipped(case: &str, placement: Placement, reason: impl fmt::Display) -> Record {
    Record::new(SUITE, case, IMPL, placement).extra("skipped", reason.to_string())
}

/// What one operation of a primitive is: the unit of its `*_ns` fields.
pub fn unit_of(case: &str) -> &'static str {
    match case {
        c if c.ends_with("-per-page") => "ns per page",
        "null-syscall" => "ns per system call",
        "trap" => "ns per trap (fault delivered to the handler and back)",
        "pte-change" | "pte-change-shootdown" => "ns per mprotect call",
        "context-switch" => "ns per switch",
        "futex-roundtrip" | "spin-roundtrip" => "ns per round trip",
        "memcpy" => "ns per copy of `bytes` bytes",
        "mmap-munmap" => "ns per mmap and munmap pair",
        "seal" => "ns per F_ADD_SEALS call",
        "fd-pass" => "ns per message carrying one fd",
        "seqpacket-message" => "ns per message",
        c if c.starts_with("uffd-fault") => "ns per fault (one page)",
        _ => "ns per operation",
    }
}

