//! The stable fuzz runner: every target of `ferry::fuzzing` over its
//! committed corpus (`fuzz/corpus/<target>/`), then over
//! deterministic mutations of them (bit flips, byte sets, truncations,
//! insertions, deletions, splices, length- and count-field tweaks) from a
//! seeded generator, in every `cargo test` run.
//!
//! - `FERRY_FUZZ_ITERS=N`: mutated executions per target (defaults keep the
//!   whole binary to seconds on two cores);
//! - `FERRY_FUZZ_SEED=N`: the generator's seed (printed; default fixed, so
//!   every run checks the same inputs unless told otherwise).
//!
//! An input that breaks an invariant fails the test; it is written to
//! `target/fuzz-failures/` and printed in hex, to be added to the corpus
//! once fixed. `docs/fuzzing.md` tells how to run the coverage-guided
//! targets for longer.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default mutated executions per target, by target (the server targets
/// cost a round trip through a server each).
fn default_iters(target: &str) -> u64 {
    match target {
        "wire" => 6000,
        "rpc_slot" => 6000,
        "rpc_frame" => 4000,
        "names" => 4000,
        "pager" => 2000,
        "objects" => 1200,
        _ => 1000,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("fuzz").join("corpus").join(target)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the committed corpus {} is missing: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).expect("read corpus file")).collect()
}

/// splitmix64: small, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: [u32; 12] = [0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff];

/// Offsets of length and count fields worth tweaking, by target: the
/// wire-format header's item count, inline length and descriptor count
/// (after the one-byte prefix), and the slot's length words.
fn fields(target: &str) -> &'static [usize] {
    match target {
        "wire" => &[1 + 6, 1 + 12, 1 + 16, 0],
        "rpc_frame" => &[2 + 6, 2 + 12, 2 + 16, 1, 2 + 24],
        // req_seq, req_len, then rep_seq, rep_len, rep_via (the reply
        // page's control words follow the request page's 88 bytes).
        "rpc_slot" => &[2 + 64, 2 + 72, 2 + 88 + 64, 2 + 88 + 72, 2 + 88 + 76, 0, 1],
        _ => &[1, 3, 4, 5],
    }
}

/// One to four stacked mutations of `input`, `other` being a second corpus
/// input to splice from.
fn mutate(rng: &mut Rng, target: &str, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = INTERESTING[rng.below(INTERESTING.len())] as u8;
            }
            2 if len > 0 => v.truncate(rng.below(len)),
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(32));
                v.drain(at..at + n);
            }
            5 if !other.is_empty() => {
                let cut = rng.below(len + 1);
                let from = rng.below(other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            6 | 7 => {
                // A length or count field: nudged or set to a boundary.
                let f = fields(target);
                let at = f[rng.below(f.len())];
                let width = if rng.below(2) == 0 { 2 } else { 4 };
                if at + width <= v.len() {
                    let mut w = [0u8; 4];
                    w[..width].copy_from_slice(&v[at..at + width]);
                    let old = u32::from_le_bytes(w);
                    let new = if rng.below(2) == 0 {
                        let d = 1 + rng.below(16) as u32;
                        if rng.below(2) == 0 {
                            old.wrapping_add(d)
                        } else {
                            old.wrapping_sub(d)
                        }
                    } else {
                        INTERESTING[rng.below(INTERESTING.len())]
                    };
                    v[at..at + width].copy_from_slice(&new.to_le_bytes()[..width]);
                }
            }
            8 if len >= 4 => {
                let at = rng.below(len - 3);
                let w = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                v[at..at + 4].copy_from_slice(&w);
            }
            _ if len > 1 => {
                // Duplicate a chunk elsewhere.
                let from = rng.below(len);
                let n = 1 + rng.below((len - from).min(48));
                let chunk = v[from..from + n].to_vec();
                let at = rng.below(len + 1);
                v.splice(at..at, chunk);
            }
            _ => v.push(rng.next() as u8),
        }
    }
    v.truncate(70_000);
    v
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs `f` on `input`; on a panic, keeps the input and returns a line
/// describing the failure.
fn execute(target: &str, f: fn(&[u8]), input: &[u8], label: &str) -> Option<String> {
    match catch_unwind(AssertUnwindSafe(|| f(input))) {
        Ok(()) => None,
        Err(p) => {
            let why = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{target}-{label}"));
            let _ = std::fs::write(&file, input);
            Some(format!("{target} {label}: {why}\n  input ({} bytes, kept in {}): {}", input.len(), file.display(), hex(input)))
        }
    }
}

fn run(target: &str) {
    let f = ferry::fuzzing::TARGETS.iter().find(|(n, _)| *n == target).map(|(_, f)| *f).expect("known target");
    let seed = env_u64("FERRY_FUZZ_SEED").unwrap_or(0x5EED_F377);
    let iters = env_u64("FERRY_FUZZ_ITERS").unwrap_or_else(|| default_iters(target));
    let inputs = corpus(target);
    let committed = inputs.len();
    assert!(committed > 0, "the corpus of {target} is empty");
    // Keep the default quiet: a failing execution's panic message is
    // reported below, with its input.
    let start = Instant::now();
    let mut failures = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        failures.extend(execute(target, f, input, &format!("corpus-{i}")));
    }
    let mut rng = Rng(seed ^ target.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)));
    for n in 0..iters {
        let a = &inputs[rng.below(inputs.len())];
        let b = &inputs[rng.below(inputs.len())];
        let m = mutate(&mut rng, target, a, b);
        failures.extend(execute(target, f, &m, &format!("mutation-{n}")));
        if failures.len() >= 5 {
            break;
        }
    }
    let total = inputs.len() as u64 + iters;
    println!(
        "fuzz {target}: {total} executions ({committed} corpus files, {iters} mutations, seed {seed:#x}) in {:.1?}, {} failures",
        start.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "fuzz target {target} failed (replay with FERRY_FUZZ_SEED={seed}):\n{}", failures.join("\n"));
}

fn limit() -> Duration {
    Duration::from_secs(600)
}

#[test]
fn fuzz_wire() {
    common::watchdog("fuzz_wire", limit(), || run("wire"));
}

#[test]
fn fuzz_names() {
    common::watchdog("fuzz_names", limit(), || run("names"));
}

#[test]
fn fuzz_pager() {
    common::watchdog("fuzz_pager", limit(), || run("pager"));
}

#[test]
fn fuzz_objects() {
    common::watchdog("fuzz_objects", limit(), || run("objects"));
}

#[test]
fn fuzz_rpc_slot() {
    common::watchdog("fuzz_rpc_slot", limit(), || run("rpc_slot"));
}

#[test]
fn fuzz_rpc_frame() {
    common::watchdog("fuzz_rpc_frame", limit(), || run("rpc_frame"));
}

/// Writes the built-in seeds of every target into the corpus directories
/// (run by hand: `cargo test -p ferry-tests --test fuzz -- --ignored`).
#[test]
#[ignore]
fn write_seed_corpus() {
    for (target, _) in ferry::fuzzing::TARGETS {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        for (i, s) in ferry::fuzzing::seeds(target).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), s).expect("write seed");
        }
    }
}

/// Found by fuzzing the object server: every copy a client asked for by
/// message lived as long as the server, and a copy of a zero-copy object
/// cost the server two descriptors and a mapping, so one client repeating
/// `COPY` exhausted the server's descriptors for every client. Copies made
/// at one user's request are now bounded.
#[test]
fn fuzz_finding_copies_asked_for_by_one_user_are_bounded() {
    use ferry::pager::{Budgets, MemoryObject, ObjectConfig, ObjectServer, PagerError, SupplyMode};
    let limit = Budgets::default().holds_per_user;
    common::watchdog("fuzz_finding_copies_asked_for_by_one_user_are_bounded", Duration::from_secs(120), || {
        let zero_copy = ferry::pager::probe().is_ok_and(|k| k.zero_copy);
        let mode = if zero_copy { SupplyMode::ZeroCopy } else { SupplyMode::Copy };
        struct Zeros;
        impl ferry::pager::Pager for Zeros {
            fn data_request(&mut self, _: u64, _: &mut [u8]) -> Result<ferry::pager::Supply, ferry::pager::PagerFault> {
                Ok(ferry::pager::Supply::Unavailable)
            }
        }
        let (mut server, right) = ObjectServer::new().expect("object server");
        let id = server.add_object(1 << 20, Box::new(Zeros), ObjectConfig { mode, ..ObjectConfig::default() }).expect("object");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                server.serve(ferry::Timeout::After(Duration::from_millis(50))).expect("serve");
            }
            server
        });
        let obj = MemoryObject::new(right.try_clone().expect("clone"), id).with_timeout(ferry::Timeout::After(Duration::from_secs(10)));
        let mut made = Vec::new();
        let refused = loop {
            match obj.copy() {
                Ok(c) => made.push(c),
                Err(e) => break e,
            }
            assert!(made.len() <= 4 * limit, "{} copies made for one user and no end in sight", made.len());
        };
        assert_eq!(made.len(), limit, "copies before the first refusal");
        assert!(matches!(refused, PagerError::OverBudget(_)), "refused with {refused:?}");
        // The server still serves everything else, this user included.
        let s = obj.stats().expect("stats after the refusal");
        assert_eq!(s.clients, 0);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let server = thread.join().expect("server thread");
        assert_eq!(server.object_count(), 1 + limit);
    });
}
