//! `ferry probe`: measures this machine's IPC primitives the way Anderson,
//! Levy, Bershad and Lazowska did in their Table 1 (null system call, trap,
//! page-table-entry change, context switch) and the way Accent measured its
//! mapping costs against pages, then derives the payload sizes at which
//! passing memory by remapping beats copying it.
//!
//! [`run`] measures every primitive and returns a [`Probe`]: a list of
//! [`Record`]s in the benchmark-schema shape (`suite: "probe"`,
//! `impl: "machine"`), the [`Machine`] it ran on (including whether shmem
//! huge pages and userfaultfd are available), and the crossover sizes
//! computed by [`crossover`]. A primitive that cannot run here becomes a
//! record with `median_ns: null` and the reason in `extra.skipped`.
//!
//! ```no_run
//! let probe = ferry_bench::probe::run(&ferry_bench::probe::Options::quick(), |_| {});
//! print!("{}", probe.table());
//! std::fs::write("probe.json", probe.records_json()).unwrap();
//! ```
//!
//! Raw memory, the signal handler, `fork` and userfaultfd live in the one
//! submodule allowed `unsafe` (`sys`); everything else is safe Rust.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod crossover;
mod cpu;
pub mod machine;
pub mod measure;
mod mem;
pub mod record;
pub mod report;
#[allow(unsafe_code)]
mod sys;
mod uffd;

use std::fmt;

pub use crossover::Crossover;
pub use machine::Machine;
pub use measure::{Budget, Stats};
pub use record::{unit_of, Placement, Record, Touch, IMPL, SUITE};

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Sampling budget per primitive.
    pub budget: Budget,
}

impl Options {
    /// Long enough for stable medians (some tens of seconds in all).
    pub fn full() -> Options {
        Options { budget: Budget::full() }
    }

    /// A few samples of everything (a few seconds in all), for smoke checks.
    pub fn quick() -> Options {
        Options { budget: Budget::quick() }
    }
}

/// Why a primitive could not be measured.
#[derive(Debug)]
pub enum ProbeError {
    /// A system call the primitive needs failed.
    Sys {
        /// The call, e.g. `mmap`.
        what: &'static str,
        /// What the kernel said.
        errno: rustix::io::Errno,
    },
    /// The facility is not available on this machine or configuration.
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The peer process or thread stopped answering.
    PeerLost {
        /// Which measurement.
        what: &'static str,
    },
    /// The sampling budget allowed no sample at all.
    NoSamples {
        /// Which measurement.
        what: &'static str,
    },
}

impl ProbeError {
    /// A closure for `map_err` naming the failed call.
    pub fn sys(what: &'static str) -> impl Fn(rustix::io::Errno) -> ProbeError {
        move |errno| ProbeError::Sys { what, errno }
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Sys { what, errno } => write!(
                f,
                "{what} failed ({errno}); check resource limits, seccomp or container restrictions and run the probe again"
            ),
            ProbeError::Unavailable { reason } => f.write_str(reason),
            ProbeError::PeerLost { what } => write!(
                f,
                "{what}: the peer stopped answering; the machine may be overloaded, run the probe again"
            ),
            ProbeError::NoSamples { what } => {
                write!(f, "{what}: the sampling budget allows no sample; give it min_samples of at least 1")
            }
        }
    }
}

impl std::error::Error for ProbeError {}

/// What a primitive function gets.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// Sampling budget.
    pub budget: Budget,
    /// CPUs the probe may use; the probe thread runs pinned to `cpus[0]`.
    pub cpus: Vec<usize>,
    /// Base page size.
    pub page: usize,
}

type PrimitiveFn = fn(&Ctx) -> Result<Vec<Record>, ProbeError>;

/// Every primitive: the records it produces (so a failure can be recorded
/// for each) and the function that measures it.
const PRIMITIVES: &[(&[(&str, Placement)], PrimitiveFn)] = &[
    (&[("null-syscall", Placement::SameCore)], cpu::null_syscall),
    (&[("trap", Placement::SameCore)], cpu::trap),
    (&[("pte-change", Placement::SameCore)], cpu::pte_change),
    (&[("pte-change-shootdown", Placement::CrossCore)], cpu::pte_change_shootdown),
    (
        &[("futex-roundtrip", Placement::SameCore), ("context-switch", Placement::SameCore)],
        cpu::futex_same_core,
    ),
    (&[("futex-roundtrip", Placement::CrossCore)], cpu::futex_cross_core),
    (&[("spin-roundtrip", Placement::SameCore)], cpu::spin_same_core),
    (&[("spin-roundtrip", Placement::CrossCore)], cpu::spin_cross_core),
    (&[("memcpy", Placement::SameCore)], mem::memcpy),
    (&[("mmap-munmap", Placement::SameCore)], mem::mmap_munmap),
    (
        &[("read-fault-per-page", Placement::SameCore), ("munmap-read-per-page", Placement::SameCore)],
        mem::read_fault,
    ),
    (
        &[("cow-fault-per-page", Placement::SameCore), ("munmap-cow-per-page", Placement::SameCore)],
        mem::cow_fault,
    ),
    (&[("shmem-alloc-fault-per-page", Placement::SameCore)], mem::shmem_alloc_fault),
    (&[("seal", Placement::SameCore), ("seal-per-page", Placement::SameCore)], mem::seal),
    (&[("fd-pass", Placement::SameCore), ("seqpacket-message", Placement::SameCore)], mem::fd_pass),
    (&[("uffd-fault", Placement::SameCore)], uffd::fault_copy_same_core),
    (&[("uffd-fault", Placement::CrossCore)], uffd::fault_copy_cross_core),
    (&[("uffd-fault-zeropage", Placement::CrossCore)], uffd::fault_zeropage),
];

/// The names of every primitive record the probe produces, sorted (crossover
/// records, case `crossover`, come on top).
pub fn primitive_cases() -> Vec<&'static str> {
    let mut v: Vec<&str> = PRIMITIVES.iter().flat_map(|(c, _)| c.iter().map(|(n, _)| *n)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// How many measurements [`run`] makes (how often it calls `progress`).
pub fn steps() -> usize {
    PRIMITIVES.len()
}

/// Everything one probe run found.
#[derive(Clone, Debug)]
pub struct Probe {
    /// Primitive records, then crossover records.
    pub records: Vec<Record>,
    /// The machine and its facilities.
    pub machine: Machine,
    /// Crossover sizes derived from the records.
    pub crossovers: Vec<Crossover>,
    /// Whether this was a `--quick` run.
    pub quick: bool,
}

/// Measures every primitive, calling `progress` with each measurement's
/// name and placement before it starts. The calling thread is pinned to one CPU while the probe
/// runs and its affinity is restored afterwards.
pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> Probe {
    let machine = Machine::detect();
    let cpus = measure::allowed_cpus();
    let pinned = cpus.first().and_then(|&c| measure::pin(c).ok());
    let cx = Ctx { budget: opts.budget, cpus, page: rustix::param::page_size() };
    let mut records = Vec::new();
    for (cases, f) in PRIMITIVES {
        progress(&format!("{} {}", cases[0].0, cases[0].1.name()));
        match f(&cx) {
            Ok(rs) => records.extend(rs),
            Err(e) => records.extend(cases.iter().map(|(c, p)| record::skipped(c, *p, &e))),
        }
    }
    if let Some(old) = pinned {
        measure::unpin(&old);
    }
    annotate(&mut records);
    let crossovers = crossover::compute(&records, cx.page);
    records.extend(crossovers.iter().map(Crossover::record));
    Probe { records, machine, crossovers, quick: opts.budget.batch_scale < 1.0 }
}

/// Adds numbers that need two records: PTE change and context switch with
/// the null system call subtracted, as Anderson et al. reported them.
fn annotate(records: &mut [Record]) {
    let median = |rs: &[Record], case: &str| rs.iter().find(|r| r.case == case).and_then(|r| r.median_ns);
    let Some(sys) = median(records, "null-syscall") else { return };
    for r in records.iter_mut() {
        let Some(m) = r.median_ns else { continue };
        let k = match r.case.as_str() {
            "pte-change" | "pte-change-shootdown" => 1.0,
            "context-switch" => 2.0,
            _ => continue,
        };
        r.extra.insert("minus_syscalls_ns".into(), (m - k * sys).max(0.0).into());
    }
}

impl Probe {
    /// The human table: every primitive with the papers' numbers beside it,
    /// availability, and the crossover sizes with the model behind them.
    pub fn table(&self) -> String {
        report::table(self)
    }

    /// The records as a JSON array (the benchmark-schema file).
    pub fn records_json(&self) -> String {
        report::records_json(&self.records)
    }

    /// The sidecar `FILE.meta.json`: machine, facilities, ferry's version.
    pub fn meta_json(&self) -> String {
        report::meta_json(self)
    }
}
