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

use ferry_bench::harness::{run_suite, Case, Impl, Options, Suite};
use ferry_bench::record::{to_json_array, Placement};
use ferry_bench::suites::transfer;

#[derive(Default)]
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

fn list(s: &str) -> Vec<String> {
    s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut f = Filter::default();
    let mut opts = Options::full();
    let mut json = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--quick" => opts = Options { placements: opts.placements.clone(), ..Options::quick() },
            "--json" => json = Some(val()),
            "--placement" => {
                opts.placements = match val().as_str() {
                    "all" => vec![Placement::SameCore, Placement::CrossCore],
                    p => vec![Placement::parse(p).unwrap_or_else(|| panic!("unknown placement {p}"))],
                }
            }
            "--rounds" => opts.budget.rounds = val().parse().expect("a number of rounds"),
            "--round-ms" => {
                opts.budget.round_time = std::time::Duration::from_millis(val().parse().expect("milliseconds"))
            }
            "--case" => f.cases = list(&val()),
            "--bytes" => f.bytes = list(&val()).iter().map(|b| b.parse().expect("a byte count")).collect(),
            "--touch" => f.touches = list(&val()),
            "--impl" => f.impls = list(&val()),
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(FILTER.set(f).is_ok());
    let base = transfer::suite();
    let suite = Suite { cases, impls, ..base };
    let records = run_suite(&suite, &opts);
    if let Some(path) = json {
        std::fs::write(&path, to_json_array(&records)).expect("write the records");
    }
}
