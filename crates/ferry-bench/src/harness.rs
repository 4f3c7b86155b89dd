//! The harness: suites, cases and implementations, and the loop that runs
//! them interleaved and turns their samples into records.
//!
//! A [`Suite`] lists its [`Case`]s and its [`Impl`]s. An implementation is a
//! plain function `fn(&mut Run) -> Result<(), Skip>`: it sets up (untimed),
//! usually forks its peer with [`Run::spawn`], then loops
//! `while run.more() { …; run.record(elapsed) }` and tears down. The harness
//! calls every implementation of a case once per round, rotating the order
//! each round, for several rounds, so that a noisy machine slows all of them
//! alike and their ratios survive. Adding an implementation to a suite is
//! one function and one line in the suite's `impls()` list.

use std::io::{self, IsTerminal, Write as _};
use std::cell::Cell;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::pin;
use crate::proc::Peer;
use serde_json::Value;

use crate::record::{Extra, Placement, Record, Touch};
use crate::stats;
use crate::table;

/// How long each implementation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Rounds over all implementations of a case.
    pub rounds: u32,
    /// Time each implementation runs per round (after its set-up).
    pub round_time: Duration,
    /// Operations per round at least, however long they take.
    pub min_iters: u64,
    /// Operations per round at most.
    pub max_iters: u64,
}

impl Budget {
    /// `--quick`: a few seconds per suite, for smoke checks.
    pub fn quick() -> Budget {
        Budget { rounds: 3, round_time: Duration::from_millis(15), min_iters: 1, max_iters: 1_000_000 }
    }

    /// The default: long enough for stable medians.
    pub fn full() -> Budget {
        Budget { rounds: 8, round_time: Duration::from_millis(250), min_iters: 3, max_iters: 10_000_000 }
    }

    /// A handful of operations, for tests that check the plumbing only.
    pub fn tiny() -> Budget {
        Budget { rounds: 1, round_time: Duration::ZERO, min_iters: 2, max_iters: 2 }
    }
}

/// What to run and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// Time per implementation.
    pub budget: Budget,
    /// Placements to measure every case in.
    pub placements: Vec<Placement>,
    /// Cases with more payload bytes than this are recorded as skipped.
    pub max_bytes: u64,
    /// Why cases above `max_bytes` are skipped (for the record).
    pub max_bytes_reason: String,
    /// Show a progress line on stderr (only when it is a terminal).
    pub progress: bool,
    /// Print the human table to stdout.
    pub table: bool,
    /// Run only the implementations named here (all when empty); a same-run
    /// ratio needs its baseline named too.
    pub only: Vec<String>,
}

impl Options {
    /// The default run: every placement that pins, no size limit.
    pub fn full() -> Options {
        Options {
            budget: Budget::full(),
            placements: vec![Placement::SameCore, Placement::CrossCore],
            max_bytes: u64::MAX,
            max_bytes_reason: String::new(),
            progress: true,
            table: true,
            only: Vec::new(),
        }
    }

    /// `--quick`: brief runs, and the 1 GiB cases skipped.
    pub fn quick() -> Options {
        Options {
            budget: Budget::quick(),
            max_bytes: 256 << 20,
            max_bytes_reason: "payloads above 256 MiB are skipped with --quick".into(),
            ..Options::full()
        }
    }
}

/// One thing measured: records with equal suite, case, bytes and touch (and
/// placement) are comparable across implementations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// Suite name.
    pub suite: &'static str,
    /// Case name (`null-roundtrip`, `roundtrip`, `oneshot`, `forward`, `stream`).
    pub name: &'static str,
    /// Payload bytes (0 where meaningless).
    pub bytes: u64,
    /// What the receiver does with the payload.
    pub touch: Touch,
}

/// Why an implementation could not run a case here; recorded in
/// `extra.skipped` with `median_ns: null`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip(pub String);

impl Skip {
    /// A skip with this reason.
    pub fn new(reason: impl Into<String>) -> Skip {
        Skip(reason.into())
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<io::Error> for Skip {
    fn from(e: io::Error) -> Skip {
        Skip(format!("failed: {e}"))
    }
}
impl From<rustix::io::Errno> for Skip {
    fn from(e: rustix::io::Errno) -> Skip {
        Skip(format!("failed: {}", io::Error::from(e)))
    }
}
impl From<ferry::SendError> for Skip {
    fn from(e: ferry::SendError) -> Skip {
        Skip(format!("ferry send failed: {e}"))
    }
}
impl<R> From<ferry::SendFailed<R>> for Skip {
    fn from(e: ferry::SendFailed<R>) -> Skip {
        Skip::from(e.into_error())
    }
}
impl From<ferry::RecvError> for Skip {
    fn from(e: ferry::RecvError) -> Skip {
        Skip(format!("ferry receive failed: {e}"))
    }
}

/// The function that runs one implementation for one round of one case.
pub type RunFn = fn(&mut Run<'_>) -> Result<(), Skip>;

/// An implementation of (some of) a suite's cases: ferry or a baseline.
#[derive(Clone, Copy, Debug)]
pub struct Impl {
    /// `ferry-<variant>` or a baseline name from the output contract.
    pub name: &'static str,
    /// Runs one round; see [`Run`].
    pub run: RunFn,
}

/// A benchmark suite.
#[derive(Clone, Copy, Debug)]
pub struct Suite {
    /// Suite name as it appears in records and on the command line.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// Baseline the table's ratio column divides by; its variants
    /// (`name-suffix`) count too and the best one is used.
    pub reference: &'static str,
    /// The cases, in the order they run.
    pub cases: fn() -> Vec<Case>,
    /// The implementations, in the order of the first round.
    pub impls: fn() -> Vec<Impl>,
}

/// One round of one implementation on one case: where to run, how long,
/// and where the samples go.
#[derive(Debug)]
pub struct Run<'a> {
    /// The case being measured.
    pub case: &'a Case,
    /// Where the processes run.
    pub placement: Placement,
    cpus: Option<(usize, usize)>,
    budget: Budget,
    started: Option<Instant>,
    round_ops: u64,
    samples: Vec<f64>,
    ops: u64,
    extra: Extra,
    peer: Cell<Option<u32>>,
    csw_start: Option<u64>,
    csw: u64,
    csw_ops: u64,
}

/// Context switches (voluntary and involuntary) of a process so far, from
/// `/proc/PID/status`; `None` when it cannot be read.
pub fn context_switches(pid: Option<u32>) -> Option<u64> {
    let path = pid.map_or("/proc/self/status".to_string(), |p| format!("/proc/{p}/status"));
    let s = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| s.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<u64>().ok());
    Some(field("voluntary_ctxt_switches:")? + field("nonvoluntary_ctxt_switches:")?)
}

impl<'a> Run<'a> {
    /// A round with no samples yet. The harness makes these; tests may too.
    pub fn new(case: &'a Case, placement: Placement, cpus: Option<(usize, usize)>, budget: Budget) -> Run<'a> {
        Run {
            case,
            placement,
            cpus,
            budget,
            started: None,
            round_ops: 0,
            samples: Vec::new(),
            ops: 0,
            extra: Extra::new(),
            peer: Cell::new(None),
            csw_start: None,
            csw: 0,
            csw_ops: 0,
        }
    }

    /// Payload size in bytes.
    pub fn bytes(&self) -> usize {
        self.case.bytes as usize
    }

    /// How long this round may run (suites that scale their payload to the
    /// budget, as `pager` does under `--quick`, read it here).
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// The CPU the timing process is pinned to (`None`: unpinned).
    pub fn own_cpu(&self) -> Option<usize> {
        self.cpus.map(|c| c.0)
    }

    /// The CPU the other side should be pinned to (`None`: unpinned).
    pub fn peer_cpu(&self) -> Option<usize> {
        self.cpus.map(|c| c.1)
    }

    /// Forks the other side, pinned as the placement asks, closing its
    /// copies of `parent_ends`; see [`Peer::spawn`].
    pub fn spawn<F: FnOnce() -> io::Result<()>>(&self, parent_ends: &[BorrowedFd<'_>], body: F) -> io::Result<Peer> {
        let peer = Peer::spawn(self.peer_cpu(), parent_ends, body)?;
        self.peer.set(Some(peer.pid().as_raw_nonzero().get() as u32));
        Ok(peer)
    }

    /// Context switches of this process and its current peer together.
    fn both_switches(&self) -> Option<u64> {
        let mine = context_switches(None)?;
        match self.peer.get() {
            Some(p) => Some(mine + context_switches(Some(p))?),
            None => Some(mine),
        }
    }

    /// Whether to do another timed operation this round. The first call
    /// starts the round's clock, so set-up before it is not charged.
    ///
    /// It also counts the context switches of both processes over the timed
    /// loop (reported as `extra.ctx_switches_per_op`).
    pub fn more(&mut self) -> bool {
        if self.started.is_none() {
            self.csw_start = self.both_switches();
            self.started = Some(Instant::now());
        }
        let start = self.started.expect("set above");
        let n = self.round_ops;
        let more = n < self.budget.max_iters && (n < self.budget.min_iters || start.elapsed() < self.budget.round_time);
        if !more {
            if let (Some(a), Some(b)) = (self.csw_start.take(), self.both_switches()) {
                self.csw += b.saturating_sub(a);
                self.csw_ops += n;
            }
        }
        more
    }

    /// Records one timed operation.
    pub fn record(&mut self, elapsed: Duration) {
        self.record_batch(elapsed, 1);
    }

    /// Records `ops` operations timed together (one sample of their mean).
    pub fn record_batch(&mut self, elapsed: Duration, ops: u64) {
        let ops = ops.max(1);
        self.samples.push(elapsed.as_nanos() as f64 / ops as f64);
        self.ops += ops;
        self.round_ops += ops;
    }

    /// Adds a key to the record's `extra` object (a later value for the same
    /// key replaces the earlier one).
    pub fn note(&mut self, key: &str, value: impl Into<Value>) {
        self.extra.insert(key.to_string(), value.into());
    }
}

/// Everything an implementation gathered over all rounds of one case and
/// placement.
struct Tally {
    name: &'static str,
    samples: Vec<f64>,
    ops: u64,
    csw: u64,
    csw_ops: u64,
    extra: Extra,
    skipped: Option<String>,
}

fn progress_line(show: bool, text: &str) {
    if show {
        let mut e = io::stderr().lock();
        let _ = write!(e, "\r\x1b[K{text}");
        let _ = e.flush();
    }
}

/// A progress bar `[#####-----]  42%` for `done` of `total` steps.
pub fn progress_bar(done: usize, total: usize, width: usize) -> String {
    let total = total.max(1);
    let filled = (done.min(total) * width) / total;
    format!("[{}{}] {:>3}%", "#".repeat(filled), "-".repeat(width - filled), done.min(total) * 100 / total)
}

/// Runs every case of `suite` in every placement of `opts`, interleaving the
/// implementations, prints the table (if asked) and returns the records.
pub fn run_suite(suite: &Suite, opts: &Options) -> Vec<Record> {
    run_suite_with(suite, opts, |_| {})
}

/// [`run_suite`], calling `on_group` with the records of each case and
/// placement as soon as they are measured (a long run saves what it has
/// after each group, so an interruption loses at most one group).
pub fn run_suite_with(suite: &Suite, opts: &Options, mut on_group: impl FnMut(&[Record])) -> Vec<Record> {
    let show = opts.progress && io::stderr().is_terminal();
    let allowed = pin::allowed_cpus().unwrap_or_else(|_| vec![0]);
    let impls: Vec<Impl> = (suite.impls)().into_iter().filter(|i| opts.only.is_empty() || opts.only.iter().any(|o| o == i.name)).collect();
    let cases = (suite.cases)();
    let mut records = Vec::new();
    let total = cases.len() * opts.placements.len();
    let mut done = 0;
    let steps = total * impls.len() * opts.budget.rounds as usize;
    let mut step = 0;
    for case in &cases {
        for &placement in &opts.placements {
            done += 1;
            let mut tallies: Vec<Tally> = impls
                .iter()
                .map(|i| Tally { name: i.name, samples: Vec::new(), ops: 0, csw: 0, csw_ops: 0, extra: Extra::new(), skipped: None })
                .collect();
            let cpus = pin::cpus_for(placement, &allowed);
            let pre_skip = match (&cpus, case.bytes > opts.max_bytes) {
                (Err(e), _) => Some(e.clone()),
                (_, true) => Some(opts.max_bytes_reason.clone()),
                _ => None,
            };
            if let Some(reason) = pre_skip {
                tallies.iter_mut().for_each(|t| t.skipped = Some(reason.clone()));
            } else {
                let cpus = cpus.expect("checked above");
                let pinned = match cpus {
                    Some((own, _)) => pin::pin_to(own),
                    None => pin::unpin(&allowed),
                };
                if let Err(e) = pinned {
                    tallies.iter_mut().for_each(|t| t.skipped = Some(format!("cannot set CPU affinity: {e}")));
                }
                for round in 0..opts.budget.rounds as usize {
                    for k in 0..impls.len() {
                        let idx = (k + round) % impls.len();
                        let tally = &mut tallies[idx];
                        step += 1;
                        if tally.skipped.is_some() {
                            continue;
                        }
                        progress_line(
                            show,
                            &format!(
                                "{} {} {done}/{total}: {} {} B {} {} — round {}/{} {}",
                                progress_bar(step, steps, 24),
                                suite.name,
                                case.name,
                                case.bytes,
                                case.touch.name(),
                                placement.name(),
                                round + 1,
                                opts.budget.rounds,
                                tally.name
                            ),
                        );
                        let mut run = Run::new(case, placement, cpus, opts.budget);
                        match (impls[idx].run)(&mut run) {
                            Ok(()) if run.samples.is_empty() => {
                                tally.skipped = Some("the implementation recorded no samples".into())
                            }
                            Ok(()) => {
                                tally.samples.extend(run.samples);
                                tally.ops += run.ops;
                                tally.csw += run.csw;
                                tally.csw_ops += run.csw_ops;
                                tally.extra.extend(run.extra);
                            }
                            Err(s) => tally.skipped = Some(s.0),
                        }
                    }
                }
                let _ = pin::unpin(&allowed);
            }
            step = done * impls.len() * opts.budget.rounds as usize;
            let group: Vec<Record> = tallies.into_iter().map(|t| to_record(suite, case, placement, opts, t)).collect();
            progress_line(show, "");
            if opts.table {
                table::print_group(suite, &group);
            }
            on_group(&group);
            records.extend(group);
        }
    }
    records
}

fn to_record(suite: &Suite, case: &Case, placement: Placement, opts: &Options, t: Tally) -> Record {
    let summary = if t.skipped.is_none() { stats::summarize(&t.samples) } else { None };
    let mut extra = t.extra;
    if let Some(reason) = &t.skipped {
        extra.shift_remove("skipped");
        extra.insert("skipped".into(), reason.clone().into());
    } else {
        extra.insert("rounds".into(), opts.budget.rounds.into());
        extra.insert("samples".into(), t.samples.len().into());
        if t.csw_ops > 0 {
            extra.insert("ctx_switches_per_op".into(), ((t.csw as f64 / t.csw_ops as f64 * 100.0).round() / 100.0).into());
        }
    }
    let moved = match suite.name {
        "rpc" => 2 * case.bytes,
        _ => case.bytes,
    };
    Record {
        suite: suite.name.into(),
        case: case.name.into(),
        imp: t.name.into(),
        bytes: case.bytes,
        placement,
        touch: case.touch,
        iters: if summary.is_some() { t.ops } else { 0 },
        median_ns: summary.map(|s| s.median),
        p99_ns: summary.map(|s| s.p99),
        min_ns: summary.map(|s| s.min),
        gbps: summary.filter(|_| moved > 0).map(|s| moved as f64 / s.median),
        extra,
    }
}
