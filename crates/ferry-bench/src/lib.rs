//! ferry's benchmark suites and the baselines they are compared with, run in
//! the same invocation so that ratios survive a noisy machine. Output follows
//! the benchmark-schema contract (`docs/benchmarks.md`).
//!
//! The pieces: [`harness`] (suites, cases, implementations and the
//! interleaved loop), [`table`] (the human table), [`record`] (the one
//! record type of the schema and its JSON, through serde_json), [`stats`],
//! [`machine`] (the `FILE.meta.json` sidecar), [`pin`] (placement),
//! [`proc`] (the peer process), [`chan`] (the baselines' building blocks),
//! [`suites`] (what is measured), [`probe`] (the machine's primitives),
//! [`report`] and [`plot`] (what a results file becomes) and [`cli`] (the
//! `ferry-bench` program that `ferry bench` and `ferry probe` run). The raw system calls the baselines
//! need (`fork`, `mmap`, `process_vm_readv`, `vmsplice`) sit in one private
//! module allowed `unsafe`; the other, [`capi`], holds the calls into the C
//! code of the impls that go through ferry's C API.
//!
//! Running one suite from code, as the smoke test does:
//!
//! ```no_run
//! use ferry_bench::harness::{run_suite, Options};
//! let records = run_suite(&ferry_bench::suites::port::suite(), &Options::quick());
//! println!("{}", ferry_bench::record::to_json_array(&records));
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod chan;
pub mod cli;
pub mod harness;
pub mod machine;
pub mod pin;
pub mod probe;
pub mod plot;
pub mod proc;
pub mod record;
pub mod report;
pub mod stats;
pub mod suites;
pub mod table;
#[allow(unsafe_code)]
mod sys;
#[allow(unsafe_code)]
pub mod capi;
