//! ferry's benchmark suites and the baselines they are compared with, run in
//! the same invocation so that ratios survive a noisy machine. Output follows
//! the benchmark-schema contract (`docs/benchmarks.md`).

pub mod probe;
