//! Smoke test of every registered suite: runs each case with a couple of
//! iterations per implementation (real processes, real channels) and checks
//! that the JSON records and the machine sidecar are well formed per the
//! output contract. It never looks at how long anything took.
//!
//! It runs without libtest's harness because the benchmarks fork their
//! peers, which needs a single-threaded process; a watchdog thread is
//! therefore not available either, so the whole test re-executes itself as
//! a child and the parent kills it if it runs past its deadline.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use ferry_bench::harness::{run_suite, Budget, Options};
use ferry_bench::record::{from_json_array, to_json_array, Placement, Record};
use ferry_bench::suites;
use serde_json::{Map, Value};

const FIELDS: [&str; 12] =
    ["suite", "case", "impl", "bytes", "placement", "touch", "iters", "median_ns", "p99_ns", "min_ns", "gbps", "extra"];

/// What identifies a record: (case, bytes, touch, placement, impl).
type Key = (String, u64, String, String, String);

/// Reads a results file as the contract wants it: every record's fields in
/// the contract's order, then strictly as [`Record`]s (integers where it
/// wants integers, known names, no field or `extra` key twice).
fn read_results(text: &str) -> Result<Vec<Record>, String> {
    let raw: Vec<Map<String, Value>> = serde_json::from_str(text).map_err(|e| format!("not an array of objects: {e}"))?;
    for (i, o) in raw.iter().enumerate() {
        let keys: Vec<&str> = o.keys().map(String::as_str).collect();
        if keys != FIELDS {
            return Err(format!("record {i}: fields {keys:?}, expected {FIELDS:?}"));
        }
    }
    from_json_array(text).map_err(|e| format!("not benchmark records: {e}"))
}

/// Checks one record against the contract and the suite's declared names;
/// returns its key and, if it was skipped, why.
fn check_record(r: &Record, suite: &ferry_bench::harness::Suite) -> Result<(Key, Option<String>), String> {
    if r.suite != suite.name {
        return Err(format!("suite {} in the {} suite's output", r.suite, suite.name));
    }
    let cases = (suite.cases)();
    if !cases.iter().any(|c| c.name == r.case) {
        return Err(format!("case {} is not a case of {}", r.case, r.suite));
    }
    if !(suite.impls)().iter().any(|i| i.name == r.imp) {
        return Err(format!("impl {} is not an impl of {}", r.imp, r.suite));
    }
    if !cases.iter().any(|c| c.name == r.case && c.bytes == r.bytes && c.touch == r.touch) {
        return Err(format!("{} with {} bytes and touch {} is not a declared case", r.case, r.bytes, r.touch));
    }
    let skipped = match r.median_ns {
        None => {
            let reason = match r.skipped() {
                Some(why) if !why.is_empty() => why.to_string(),
                _ => return Err(format!("{}/{}: median_ns is null but extra.skipped has no reason", r.imp, r.case)),
            };
            if r.p99_ns.is_some() || r.min_ns.is_some() || r.gbps.is_some() {
                return Err(format!("p99_ns, min_ns or gbps set on a skipped record: {r:?}"));
            }
            Some(reason)
        }
        Some(_) => {
            if r.p99_ns.is_none() || r.min_ns.is_none() {
                return Err(format!("a measured record without p99_ns or min_ns: {r:?}"));
            }
            if r.extra.contains_key("skipped") {
                return Err("a measured record carries extra.skipped".into());
            }
            if r.iters == 0 {
                return Err("a measured record with zero iterations".into());
            }
            None
        }
    };
    Ok(((r.case.clone(), r.bytes, r.touch.to_string(), r.placement.to_string(), r.imp.clone()), skipped))
}

/// The plots of a suite's records: one latency plot for every (case, touch,
/// placement) measured at two sizes or more, each a well-formed SVG with a
/// line or point per measured implementation.
fn check_plots(records: &[ferry_bench::record::Record], path: &str) -> Result<(), String> {
    let written = ferry_bench::plot::write_plots(records, path).map_err(|e| e.to_string())?;
    let mut groups = Vec::new();
    for r in records.iter().filter(|r| r.median_ns.is_some()) {
        let k = (r.case.clone(), r.touch.name(), r.placement.name());
        let sizes: std::collections::BTreeSet<u64> = records
            .iter()
            .filter(|q| q.median_ns.is_some() && (q.case.clone(), q.touch.name(), q.placement.name()) == k)
            .map(|q| q.bytes)
            .collect();
        if sizes.len() >= 2 && !groups.contains(&k) {
            groups.push(k);
        }
    }
    let latency: Vec<&String> = written.iter().filter(|p| p.ends_with("-latency.svg")).collect();
    if latency.len() < groups.len() {
        return Err(format!("{} latency plots for {} groups measured at several sizes", latency.len(), groups.len()));
    }
    for p in &written {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
        if !text.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") || !text.trim_end().ends_with("</svg>") {
            return Err(format!("{p} is not an SVG document"));
        }
        if text.matches('<').count() != text.matches('>').count() {
            return Err(format!("{p} has unbalanced tags"));
        }
        if !text.contains("<circle") {
            return Err(format!("{p} plots no point"));
        }
    }
    Ok(())
}

fn run_all() -> Result<(), String> {
    let opts = Options {
        budget: Budget::tiny(),
        placements: vec![Placement::SameCore, Placement::CrossCore],
        max_bytes: 1 << 20,
        max_bytes_reason: "the smoke test stops at 1 MiB".into(),
        progress: false,
        table: false,
        only: Vec::new(),
    };
    let dir = std::env::temp_dir().join(format!("ferry-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut total = 0;
    for suite in suites::all() {
        let records = run_suite(&suite, &opts);
        let path = dir.join(format!("{}.json", suite.name));
        let path = path.to_str().unwrap();
        ferry_bench::cli::write_json(path, &records, &["ferry".into(), "bench".into(), suite.name.into()])
            .map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        assert_eq!(text, to_json_array(&records));
        let items = read_results(&text).map_err(|e| format!("{}: {e}", suite.name))?;
        if items != records {
            return Err(format!("{}: the file does not read back as the records written", suite.name));
        }
        // Every case × placement × impl appears exactly once.
        let mut seen = BTreeMap::new();
        let mut measured = 0;
        for it in &items {
            let (k, skipped) = check_record(it, &suite).map_err(|e| format!("{}: {e}", suite.name))?;
            match skipped {
                None => measured += 1,
                // A benchmark that broke is a failure; one this machine
                // cannot run (one CPU, a refused pipe size) is not.
                Some(r) if r.starts_with("failed") || r.starts_with("ferry") || r.contains("no samples") => {
                    return Err(format!("{} {k:?} broke: {r}", suite.name));
                }
                Some(r) if k.1 <= opts.max_bytes => eprintln!("smoke: {} {k:?}: skipped: {r}", suite.name),
                Some(_) => {}
            }
            if seen.insert(k.clone(), ()).is_some() {
                return Err(format!("{}: duplicate record {k:?}", suite.name));
            }
        }
        let want = (suite.cases)().len() * opts.placements.len() * (suite.impls)().len();
        if items.len() != want {
            return Err(format!("{}: {} records, expected {want}", suite.name, items.len()));
        }
        if measured == 0 {
            return Err(format!("{}: nothing was measured", suite.name));
        }
        let meta = std::fs::read_to_string(format!("{path}.meta.json")).map_err(|e| e.to_string())?;
        let m: Map<String, Value> = serde_json::from_str(&meta).map_err(|e| format!("meta: {e}"))?;
        for k in ["cpu_model", "cores", "kernel", "thp_enabled", "thp_shmem_enabled", "unprivileged_userfaultfd", "userfaultfd_syscall_works", "ferry_version", "date", "command_line"] {
            if !m.contains_key(k) {
                return Err(format!("meta: missing field {k}"));
            }
        }
        check_plots(&records, path).map_err(|e| format!("{}: plots: {e}", suite.name))?;
        println!("smoke: {}: {} records ({measured} measured) well formed", suite.name, items.len());
        total += items.len();
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("smoke: {total} records checked");
    Ok(())
}

const CHILD: &str = "FERRY_BENCH_SMOKE_CHILD";

fn main() -> ExitCode {
    if std::env::var_os(CHILD).is_some() {
        return match run_all() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("smoke: FAILED: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // Watchdog: run the checks in a child process and kill it if it hangs.
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe).env(CHILD, "1").spawn().expect("start the smoke run");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Some(status) = child.try_wait().expect("wait for the smoke run") {
            return if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("smoke: FAILED: the run did not finish within 600 s (a deadlock?)");
            return ExitCode::FAILURE;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
