//! Runs `ferry probe` in its quick mode and checks that what it reports is
//! well-formed: every primitive present under its schema name, numbers
//! positive and ordered (min ≤ median ≤ p99) or null with a reason, the
//! crossover records present for each touch mode, and the JSON texts valid
//! (the records read back, strictly, as the records written). Never asserts
//! how fast anything is.

use std::sync::mpsc;
use std::time::Duration;

use ferry_bench::probe::{self, Options, Placement, Probe, Record, Touch};
use serde_json::Value;

/// Runs the probe on a thread and fails instead of hanging if it does not
/// finish within `limit`.
fn run_with_watchdog(limit: Duration) -> Probe {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(probe::run(&Options::quick(), |_| {}));
    });
    rx.recv_timeout(limit).expect("probe did not finish: a measurement is stuck")
}

fn find<'a>(p: &'a Probe, case: &str, placement: Placement) -> Option<&'a Record> {
    p.records.iter().find(|r| r.case == case && r.placement == placement)
}

fn check_record(r: &Record) {
    assert_eq!(r.suite, "probe", "{r:?}");
    assert_eq!(r.imp, "machine", "{r:?}");
    assert!(!r.case.is_empty() && r.case.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "case name {:?}", r.case);
    match r.median_ns {
        None => {
            let why = r.skipped().unwrap_or_else(|| panic!("{} has no median and no extra.skipped", r.case));
            assert!(!why.trim().is_empty(), "{}: empty skip reason", r.case);
            assert!(r.p99_ns.is_none() && r.min_ns.is_none() && r.gbps.is_none(), "{r:?}");
        }
        Some(m) if r.case == "crossover" => {
            assert!(m.is_finite() && m > 0.0, "{r:?}");
            assert!(r.bytes > 0 && r.iters == 0, "a crossover is computed, not timed: {r:?}");
            assert!(r.p99_ns.is_none() && r.min_ns.is_none(), "{r:?}");
        }
        Some(m) => {
            let (p99, min) = (r.p99_ns.expect("p99"), r.min_ns.expect("min"));
            for x in [m, p99, min] {
                assert!(x.is_finite() && x > 0.0, "{}: non-positive time {x}", r.case);
            }
            assert!(min <= m && m <= p99, "{}: min {min} median {m} p99 {p99} out of order", r.case);
            assert!(r.iters > 0, "{}: no iterations", r.case);
            assert!(r.skipped().is_none(), "{}: measured but also skipped", r.case);
            match r.get_extra("unit") {
                Some(Value::String(u)) => assert!(u.starts_with("ns per"), "{}: unit {u:?}", r.case),
                other => panic!("{}: no unit ({other:?})", r.case),
            }
        }
    }
}

#[test]
fn quick_probe_records_are_well_formed() {
    let p = run_with_watchdog(Duration::from_secs(240));

    for r in &p.records {
        check_record(r);
    }

    // Every primitive the issue names, under its schema name.
    for case in [
        "null-syscall",
        "trap",
        "pte-change",
        "pte-change-shootdown",
        "context-switch",
        "futex-roundtrip",
        "spin-roundtrip",
        "memcpy",
        "mmap-munmap",
        "read-fault-per-page",
        "cow-fault-per-page",
        "seal-per-page",
        "fd-pass",
        "uffd-fault",
    ] {
        assert!(probe::primitive_cases().contains(&case), "{case} not among the probe's cases");
        assert!(p.records.iter().any(|r| r.case == case), "{case} missing from the records");
    }
    for case in probe::primitive_cases() {
        assert!(p.records.iter().any(|r| r.case == case), "{case} produced no record");
    }
    for case in ["futex-roundtrip", "spin-roundtrip"] {
        for pl in [Placement::SameCore, Placement::CrossCore] {
            assert!(find(&p, case, pl).is_some(), "{case} {} missing", pl.name());
        }
    }

    // Primitives that need nothing special must have run.
    for case in ["null-syscall", "pte-change", "mmap-munmap", "memcpy", "seal", "fd-pass"] {
        let r = find(&p, case, Placement::SameCore).unwrap();
        assert!(r.median_ns.is_some(), "{case} skipped: {:?}", r.skipped());
    }
    for r in p.records.iter().filter(|r| r.case == "memcpy") {
        assert!(r.bytes > 0 && r.gbps.is_some_and(|g| g > 0.0), "{r:?}");
    }

    // The userfaultfd record agrees with the availability check.
    let uffd = find(&p, "uffd-fault", Placement::SameCore).unwrap();
    assert_eq!(uffd.median_ns.is_some(), p.machine.uffd.works, "{uffd:?} vs {:?}", p.machine.uffd);

    // One crossover per touch mode, as records too.
    let touches: Vec<Touch> = p.crossovers.iter().map(|c| c.touch).collect();
    assert_eq!(touches, vec![Touch::None, Touch::Read, Touch::Write]);
    let xs: Vec<&Record> = p.records.iter().filter(|r| r.case == "crossover").collect();
    assert_eq!(xs.len(), 3);
    for (c, r) in p.crossovers.iter().zip(&xs) {
        assert_eq!(c.touch, r.touch);
        assert_eq!(c.bytes().unwrap_or(0), r.bytes);
        assert_eq!(r.get_extra("kind"), Some(&Value::from("model")));
    }

    // The records read back as they were written, one per line; the sidecar
    // is JSON and has the facilities.
    let text = p.records_json();
    assert_eq!(ferry_bench::record::from_json_array(&text).unwrap_or_else(|e| panic!("{e}\n{text}")), p.records);
    assert_eq!(text.lines().filter(|l| l.starts_with("  {")).count(), p.records.len());
    let meta = p.meta_json();
    let parsed: Value = serde_json::from_str(&meta).unwrap_or_else(|e| panic!("{e}\n{meta}"));
    assert!(parsed["machine"]["userfaultfd"]["features"].is_object(), "{meta}");
    for key in ["\"shmem_enabled\"", "\"shmem_huge_mapped_in_test\"", "\"userfaultfd\"", "\"minor_shmem\"", "\"move\"", "\"pagefault_flag_wp\"", "\"kernel\""] {
        assert!(meta.contains(key), "meta lacks {key}: {meta}");
    }

    // The table names every case and explains the crossover.
    let table = p.table();
    for case in probe::primitive_cases() {
        assert!(table.contains(case), "table lacks {case}");
    }
    assert!(table.contains("crossover") && table.contains("userfaultfd") && table.contains("shmem huge pages"));
}

fn rec(case: &str, bytes: u64, median: f64) -> Record {
    let st = probe::Stats { median_ns: median, p99_ns: median, min_ns: median, iters: 1, samples: 1 };
    probe::record::measured(case, Placement::SameCore, st).bytes(bytes)
}

#[test]
fn crossover_model_solves_known_costs() {
    // copy: 2 × 100 ns per page; remap fixed: 3000 (mmap) + 2000 (seal) +
    // 1500 (fd-pass 4000 − message 2500) = 6500 ns; per page untouched 10 ns
    // (no mmap growth), so remap wins once 6500 + 10 N < 200 N: N = 35.
    // Read adds 200 + 100 ns per page: 310 > 200, never.
    // Written adds 20 + 30 ns: 6500 + 60 N < 200 N from N = 47.
    let rs = vec![
        rec("memcpy", 4096, 100.0),
        rec("mmap-munmap", 4096, 3000.0),
        rec("mmap-munmap", 16 << 20, 3000.0),
        rec("seal", 4096, 2000.0),
        rec("seal-per-page", 1 << 20, 10.0),
        rec("fd-pass", 0, 4000.0),
        rec("seqpacket-message", 1, 2500.0),
        rec("read-fault-per-page", 1 << 20, 200.0),
        rec("munmap-read-per-page", 1 << 20, 100.0),
        rec("cow-fault-per-page", 1 << 20, 20.0),
        rec("munmap-cow-per-page", 1 << 20, 30.0),
    ];
    let xs = probe::crossover::compute(&rs, 4096);
    assert_eq!(xs.len(), 3);
    assert_eq!(xs[0].pages, Some(35));
    assert_eq!(xs[0].bytes(), Some(35 * 4096));
    assert_eq!(xs[0].fixed_ns, 6500.0);
    assert_eq!(xs[1].pages, None);
    assert!(xs[1].reason.as_deref().unwrap().contains("does not beat"));
    assert_eq!(xs[2].pages, Some(47));
    // As records: a found crossover carries its size and cost, a missing one a reason.
    let r0 = xs[0].record();
    assert_eq!((r0.case.as_str(), r0.bytes, r0.touch), ("crossover", 35 * 4096, Touch::None));
    assert_eq!(r0.median_ns, Some(6500.0 + 35.0 * 10.0));
    assert!(xs[1].record().skipped().is_some());

    // Copying that is cheap per page at 256 KiB (64 pages) but dear again
    // from 1 MiB: remapping wins at 35..63 pages, loses at 64..255 and wins
    // from 256 on; the crossover is where it wins for good.
    let mut bumpy = rs.clone();
    bumpy.push(rec("memcpy", 256 << 10, 64.0 * 5.0));
    bumpy.push(rec("memcpy", 1 << 20, 256.0 * 100.0));
    assert_eq!(probe::crossover::compute(&bumpy, 4096)[0].pages, Some(256));
    // And when copying stays cheaper at the largest size, there is none.
    bumpy.push(rec("memcpy", 4 << 20, 1024.0 * 4.0));
    assert_eq!(probe::crossover::compute(&bumpy, 4096)[0].pages, None);

    // Without the inputs there is no crossover, and the reason names what is missing.
    let xs = probe::crossover::compute(&rs[..1], 4096);
    assert!(xs.iter().all(|c| c.pages.is_none() && c.reason.as_deref().unwrap().contains("mmap-munmap")));
}
