//! One probe result in the benchmark-schema shape (`suite: "probe"`,
//! `impl: "machine"`), with the schema's placement and touch names and the
//! unit of each primitive's operation.

use std::fmt;

use super::{Json, Stats};

/// The `suite` of every probe record.
pub const SUITE: &str = "probe";
/// The `impl` of every probe record: the machine itself.
pub const IMPL: &str = "machine";

pub use crate::record::{Placement, Touch};

/// One result in the benchmark-schema shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Always [`SUITE`].
    pub suite: &'static str,
    /// The primitive's name, e.g. `null-syscall`.
    pub case: String,
    /// Always [`IMPL`].
    pub impl_name: &'static str,
    /// Bytes the primitive works on (0 where meaningless).
    pub bytes: u64,
    /// Where the parties ran.
    pub placement: Placement,
    /// Receiver's use of the pages.
    pub touch: Touch,
    /// Operations timed.
    pub iters: u64,
    /// Median ns per operation; `None` when skipped.
    pub median_ns: Option<f64>,
    /// 99th percentile ns per operation.
    pub p99_ns: Option<f64>,
    /// Fastest ns per operation.
    pub min_ns: Option<f64>,
    /// GB/s where data moves.
    pub gbps: Option<f64>,
    /// Details: method, derived numbers, `skipped` reason.
    pub extra: Vec<(String, Json)>,
}

impl Record {
    /// A measured record.
    pub fn measured(case: &str, placement: Placement, s: Stats) -> Record {
        Record {
            suite: SUITE,
            case: case.to_string(),
            impl_name: IMPL,
            bytes: 0,
            placement,
            touch: Touch::None,
            iters: s.iters,
            median_ns: Some(s.median_ns),
            p99_ns: Some(s.p99_ns),
            min_ns: Some(s.min_ns),
            gbps: None,
            extra: vec![
                ("unit".into(), Json::Str(unit_of(case).into())),
                ("samples".into(), Json::Num(s.samples as f64)),
            ],
        }
    }

    /// A record for a primitive that could not run here, with the reason.
    pub fn skipped(case: &str, placement: Placement, reason: impl fmt::Display) -> Record {
        Record {
            suite: SUITE,
            case: case.to_string(),
            impl_name: IMPL,
            bytes: 0,
            placement,
            touch: Touch::None,
            iters: 0,
            median_ns: None,
            p99_ns: None,
            min_ns: None,
            gbps: None,
            extra: vec![("skipped".into(), Json::Str(reason.to_string()))],
        }
    }

    /// Sets `bytes`.
    pub fn bytes(mut self, n: u64) -> Record {
        self.bytes = n;
        self
    }

    /// Sets `touch`.
    pub fn touch(mut self, t: Touch) -> Record {
        self.touch = t;
        self
    }

    /// Sets `gbps`.
    pub fn gbps(mut self, g: f64) -> Record {
        self.gbps = Some(g);
        self
    }

    /// Adds an `extra` entry.
    pub fn extra(mut self, key: &str, v: impl Into<Json>) -> Record {
        self.extra.push((key.to_string(), v.into()));
        self
    }

    /// The `extra` entry named `key`.
    pub fn get_extra(&self, key: &str) -> Option<&Json> {
        self.extra.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The reason this record was skipped, if it was.
    pub fn skip_reason(&self) -> Option<&str> {
        match self.get_extra("skipped") {
            Some(Json::Str(s)) => Some(s),
            _ => None,
        }
    }
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

