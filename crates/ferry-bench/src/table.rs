//! The human table `ferry bench` prints to stdout: one block per case and
//! placement, each implementation's median, p99, minimum, GB/s and its ratio
//! to the suite's reference baseline (the best of its variants).

use std::io::{self, Write as _};

use crate::harness::Suite;
use crate::record::Record;

/// Formats nanoseconds with a unit that keeps three or four digits.
pub fn human_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn human_bytes(b: u64) -> String {
    if b == 0 {
        "0".into()
    } else {
        crate::plot::fmt_bytes(b)
    }
}

fn human_ratio(r: f64) -> String {
    if r >= 0.1 {
        format!("{r:.2}")
    } else {
        format!("{r:.1e}")
    }
}

/// The best median among `reference` and its variants (`reference-…`).
pub fn reference_median(reference: &str, group: &[Record]) -> Option<f64> {
    group
        .iter()
        .filter(|r| r.imp == reference || r.imp.strip_prefix(reference).is_some_and(|s| s.starts_with('-')))
        .filter_map(|r| r.median_ns)
        .min_by(|a, b| a.total_cmp(b))
}

/// Prints one case-and-placement block of records.
pub fn print_group(suite: &Suite, group: &[Record]) {
    let Some(first) = group.first() else { return };
    let refm = reference_median(suite.reference, group);
    let mut out = String::new();
    out.push_str(&format!(
        "{} / {}  bytes={}  touch={}  placement={}\n",
        first.suite,
        first.case,
        human_bytes(first.bytes),
        first.touch.name(),
        first.placement.name()
    ));
    out.push_str(&format!(
        "  {:<18} {:>11} {:>11} {:>11} {:>8} {:>10}\n",
        "impl",
        "median",
        "p99",
        "min",
        "GB/s",
        format!("x {}", suite.reference)
    ));
    for r in group {
        match (r.median_ns, r.p99_ns, r.min_ns) {
            (Some(m), Some(p), Some(n)) => {
                let gbps = r.gbps.map_or("-".to_string(), |g| format!("{g:.2}"));
                let ratio = refm.map_or("-".to_string(), |rm| human_ratio(m / rm));
                out.push_str(&format!(
                    "  {:<18} {:>11} {:>11} {:>11} {:>8} {:>10}\n",
                    r.imp,
                    human_ns(m),
                    human_ns(p),
                    human_ns(n),
                    gbps,
                    ratio
                ));
            }
            _ => out.push_str(&format!("  {:<18} skipped: {}\n", r.imp, r.skipped().unwrap_or("no samples"))),
        }
    }
    out.push('\n');
    let mut so = io::stdout().lock();
    let _ = so.write_all(out.as_bytes());
    let _ = so.flush();
}
