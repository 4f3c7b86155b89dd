//! Runs a subset of the `transfer` suite: chosen cases, sizes, touches and
//! implementations, with the default (full) budget or `--quick`. For
//! investigating one corner of the suite without running all of it; the
//! records it writes have the same shape as `ferry bench transfer`'s.
//!
//! ```text
//! cargo run --release -p ferry-bench --example transfer_subset -- \
//!     [--quick] [--rounds N] [--round-ms MS] [--json FILE] \
//!     [--placement same-core|cross-core|all] \
//!     [--case oneshot,forward,stream] [--bytes 4096,268435456] \
//!     [--touch none,read,write] [--impl pipe,pipe-1m,ferry-copy-lazy]
//! ```
//! Every list defaults to everything; the named implementations still run
//! interleaved with each other.

use std::sync::OnceLock;

use clap::Parser;

use ferry_bench::harness::{run_suite, Case, Impl, Options, Suite};
use ferry_bench::record::{to_json_array, Placement};
use ferry_bench::suites::transfer;

struct Filter {
    cases: Vec<String>,
    bytes: Vec<u64>,
    touches: Vec<String>,
    impls: Vec<String>,
}

static FILTER: OnceLock<Filter> = OnceLock::new();

fn keep<T: PartialEq>(list: &[T], x: &T) -> bool {
    list.is_empty() || list.contains(x)
}

fn cases() -> Vec<Case> {
    let f = FILTER.get().expect("set in main");
    transfer::cases()
        .into_iter()
        .filter(|c| keep(&f.cases, &c.name.to_string()) && keep(&f.bytes, &c.bytes) && keep(&f.touches, &c.touch.name().to_string()))
        .collect()
}

fn impls() -> Vec<Impl> {
    let f = FILTER.get().expect("set in main");
    transfer::impls().into_iter().filter(|i| keep(&f.impls, &i.name.to_string())).collect()
}

/// The command line (every list is comma-separated and defaults to
/// everything).
#[derive(Debug, Parser)]
#[command(about = "Runs a subset of the transfer suite, interleaved as `ferry bench transfer` runs it.")]
struct Args {
    /// Brief runs, payloads above 256 MiB skipped.
    #[arg(long)]
    quick: bool,
    /// Rounds over all implementations of a case.
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,
    /// Time each implementation runs per round.
    #[arg(long, value_name = "MS")]
    round_ms: Option<u64>,
    /// Write the records to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Where the two sides run; `all` is same-core and cross-core.
    #[arg(long, value_name = "P", value_parser = ["same-core", "cross-core", "unpinned", "all"])]
    placement: Option<String>,
    /// Cases: oneshot, forward, stream.
    #[arg(long = "case", value_name = "CASES", value_delimiter = ',')]
    cases: Vec<String>,
    /// Payload sizes in bytes.
    #[arg(long = "bytes", value_name = "SIZES", value_delimiter = ',')]
    bytes: Vec<u64>,
    /// Touches: none, read, write.
    #[arg(long = "touch", value_name = "TOUCHES", value_delimiter = ',', value_parser = ["none", "read", "write"])]
    touches: Vec<String>,
    /// Implementations, e.g. pipe,pipe-1m,ferry-copy-lazy.
    #[arg(long = "impl", value_name = "IMPLS", value_delimiter = ',')]
    impls: Vec<String>,
}

fn main() {
    let args = Args::parse();
    let mut opts = if args.quick { Options::quick() } else { Options::full() };
    match args.placement.as_deref() {
        None | Some("all") => {}
        Some(p) => opts.placements = Placement::parse(p).into_iter().collect(),
    }
    if let Some(n) = args.rounds {
        opts.budget.rounds = n;
    }
    if let Some(ms) = args.round_ms {
        opts.budget.round_time = std::time::Duration::from_millis(ms);
    }
    let f = Filter { cases: args.cases, bytes: args.bytes, touches: args.touches, impls: args.impls };
    let json = args.json;
    assert!(FILTER.set(f).is_ok());
    let base = transfer::suite();
    let suite = Suite { cases, impls, ..base };
    let records = run_suite(&suite, &opts);
    if let Some(path) = json {
        std::fs::write(&path, to_json_array(&records)).expect("write the records");
    }
}
