//! The benchmark command end to end, as CI runs it: the built `ferry-bench`
//! program (what `ferry bench` runs) runs every suite (and the probe) with
//! `--smoke`, writes the results, the machine sidecar and the plots, and
//! `bench report` turns them into Markdown with every paper table; one suite
//! also runs with `--quick`, and `probe --quick --json` writes its records.
//! Nothing here looks at a timing.
//!
//! `--smoke` runs every case and impl of every suite through the same code
//! as a measured run, a few iterations each, in seconds. A `--quick` run of
//! all suites in a debug build took about twelve minutes (the 1 GiB sweeps
//! of `net` and `transfer`), which bought CI no coverage the smoke run
//! lacks: benchmarks are measured by `ferry bench`, not by tests.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FERRY_BENCH: &str = env!("CARGO_BIN_EXE_ferry-bench");

/// Runs `ferry-bench ARGS` as `ferry` runs it (named `ferry` in its
/// `argv[0]`), killing it after `limit` (a hang fails the test).
/// Its output goes to files, not pipes: a benchmark prints more than a pipe
/// holds, and nobody reads a pipe while this waits.
fn ferry(args: &[&str], limit: Duration) -> (bool, String, String) {
    ferry_with(args, &[], limit)
}

/// As [`ferry`], with `env` added to the program's environment.
fn ferry_with(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (bool, String, String) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = temp_dir(&format!("out{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(FERRY_BENCH)
        .arg0("ferry")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("start ferry-bench");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for ferry") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferry {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let result = (status.success(), read(&out_path), read(&err_path));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-bench-smoke-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temporary directory");
    d
}

#[test]
fn bench_all_then_report() {
    let dir = temp_dir("all");
    let json = dir.join("results.json");
    let json_s = json.to_str().unwrap();
    let mode = "--smoke";
    let (ok, _, err) = ferry(&["bench", "all", mode, "--json", json_s], Duration::from_secs(1800));
    assert!(ok, "ferry bench all {mode} failed:\n{err}");

    let text = std::fs::read_to_string(&json).expect("the results file");
    assert!(text.trim_start().starts_with('[') && text.trim_end().ends_with(']'));
    let compact = text.replace(' ', "");
    for suite in ["\"suite\":\"port\"", "\"suite\":\"rpc\"", "\"suite\":\"transfer\"", "\"suite\":\"probe\"", "\"impl\":\"ipc-channel\""] {
        assert!(compact.contains(suite), "no {suite} in the results");
    }
    let meta = std::fs::read_to_string(format!("{json_s}.meta.json")).expect("the sidecar");
    let meta: serde_json::Value = serde_json::from_str(&meta).unwrap_or_else(|e| panic!("the sidecar: {e}\n{meta}"));
    for k in ["cpu_model", "kernel", "loadavg_start", "loadavg_end", "command_line"] {
        assert!(meta.get(k).is_some(), "no {k} in the sidecar:\n{meta}");
    }
    // The command as the user typed it.
    assert_eq!(meta["command_line"], format!("ferry bench all {mode} --json {json_s}"));
    let plots: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("results-") && n.ends_with(".svg"))
        .collect();
    assert!(plots.iter().any(|p| p.starts_with("results-rpc-roundtrip-")), "no rpc plot among {plots:?}");
    assert!(plots.iter().any(|p| p.starts_with("results-transfer-oneshot-")), "no transfer plot among {plots:?}");
    for p in &plots {
        let svg = std::fs::read_to_string(dir.join(p)).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{p} is not an SVG document");
    }

    let md = dir.join("report.md");
    let (ok, _, err) = ferry(&["bench", "report", json_s, "--out", md.to_str().unwrap()], Duration::from_secs(60));
    assert!(ok, "ferry bench report failed:\n{err}");
    let md = std::fs::read_to_string(&md).expect("the report");
    for h in ["Accent, Table 3-2", "DASH, Tables I–III", "L4", "Dean & Armand, Table 5-2", "Dean & Armand, Table 5-8", "Anderson et al., Table 1", "Anderson et al., Table 7", "### Plots", "### Every record"] {
        assert!(md.contains(h), "the report has no section {h:?}");
    }
    // The plots are linked relative to the report, which sits beside them.
    assert!(md.contains("(results-rpc-roundtrip-"), "plots not linked relatively");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_suite_quick_and_bad_report_input() {
    let dir = temp_dir("quick");
    let json = dir.join("port.json");
    let (ok, _, err) = ferry(&["bench", "port", "--quick", "--json", json.to_str().unwrap()], Duration::from_secs(300));
    assert!(ok, "ferry bench port --quick failed:\n{err}");
    assert!(std::fs::read_to_string(&json).unwrap().contains("\"impl\": \"ipc-channel\""));

    let broken = dir.join("broken.json");
    std::fs::write(&broken, "[{").unwrap();
    let (ok, _, err) = ferry(&["bench", "report", broken.to_str().unwrap()], Duration::from_secs(60));
    assert!(!ok && err.contains("not valid JSON"), "a broken file must fail clearly:\n{err}");
    let (ok, _, err) = ferry(&["bench", "report"], Duration::from_secs(60));
    assert!(!ok && err.contains("<FILE>") && err.contains("Usage: ferry bench report"), "{err}");
    assert!(!Path::new(&dir.join("absent")).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--max-bytes` records larger cases as skipped, with the reason; a bad
/// size is refused with a message; a run's results are on disk, whole,
/// from its first group on, and a finished run's sidecar says so.
#[test]
fn max_bytes_skips_large_cases_and_results_are_saved_group_by_group() {
    let dir = temp_dir("maxbytes");
    let json = dir.join("rpc.json");
    let json_s = json.to_str().unwrap();
    let (ok, _, err) = ferry(&["bench", "rpc", "--smoke", "--placement", "same-core", "--max-bytes", "64", "--json", json_s], Duration::from_secs(600));
    assert!(ok, "ferry bench rpc --max-bytes 64 failed:\n{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let (mut small, mut large) = (0, 0);
    for r in &rows {
        let skipped = r["extra"]["skipped"].as_str().unwrap_or("");
        if r["bytes"].as_u64() == Some(1024) {
            large += 1;
            assert!(r["median_ns"].is_null() && skipped.contains("--max-bytes"), "a 1 KiB case was not skipped for --max-bytes: {r}");
        } else if !skipped.contains("--max-bytes") {
            small += 1;
        }
    }
    assert!(large > 0 && small > 0, "expected both measured and skipped cases, got {small} and {large}");
    let every_group = 2 * rows.len();
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("rpc.json.meta.json")).unwrap()).unwrap();
    assert_eq!(meta["complete"], serde_json::Value::Bool(true), "a finished run's sidecar must say complete: {meta}");
    assert!(!dir.join("rpc.json.partial").exists(), "a temporary file was left behind");

    let (ok, _, err) = ferry(&["bench", "rpc", "--smoke", "--max-bytes", "12XB"], Duration::from_secs(60));
    assert!(!ok && err.contains("unknown unit") && err.contains("KiB"), "a bad size must be refused clearly:\n{err}");

    // Interrupted as soon as its results file appears, a run leaves a whole
    // JSON array of the groups it finished and a sidecar saying so (five
    // times: the interruption lands at a different point each time).
    for attempt in 0..5 {
        interrupted_run_leaves_whole_files(&dir.join(format!("part{attempt}.json")), every_group);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `ferry bench rpc --smoke --json part`, kills it as soon as the
/// results file appears, and checks what it left.
fn interrupted_run_leaves_whole_files(part: &Path, every_group: usize) {
    let mut child = Command::new(FERRY_BENCH)
        .args(["bench", "rpc", "--smoke", "--json", part.to_str().expect("a UTF-8 path")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ferry-bench");
    let sidecar = format!("{}.meta.json", part.display());
    // Watched without sleeping, so that a results file written before its
    // sidecar is seen in the moment between the two.
    let deadline = Instant::now() + Duration::from_secs(300);
    while !part.exists() && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::hint::spin_loop();
    }
    let sidecar_first = Path::new(&sidecar).exists();
    let _ = child.kill();
    let _ = child.wait();
    assert!(sidecar_first, "the results file appeared before its sidecar");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(part).expect("the results of the first group")).expect("a whole JSON array");
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&sidecar).expect("a results file without its sidecar")).expect("a whole sidecar");
    assert!(!rows.is_empty(), "the first group's records");
    if meta["complete"] == serde_json::Value::Bool(false) {
        assert!(rows.len() < every_group, "an interrupted run cannot hold every group");
    }
}

#[test]
fn probe_quick_writes_records_and_sidecar() {
    let dir = temp_dir("probe");
    let json = dir.join("probe.json");
    let (ok, out, err) = ferry(&["probe", "--quick", "--json", json.to_str().unwrap()], Duration::from_secs(300));
    assert!(ok, "ferry probe --quick failed:\n{err}");
    assert!(out.contains("null-syscall") && out.contains("crossover"), "the probe's table:\n{out}");
    let text = std::fs::read_to_string(&json).expect("the probe's records");
    let compact = text.replace(' ', "");
    assert!(compact.contains("\"suite\":\"probe\"") && compact.contains("\"case\":\"null-syscall\""), "{text}");
    let meta = std::fs::read_to_string(format!("{}.meta.json", json.display())).expect("the probe's sidecar");
    assert!(meta.contains("\"userfaultfd\""), "{meta}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every subcommand has `--help`; the usage names `ferry` when `ferry` ran
/// the program, and the suites are listed with what they measure.
#[test]
fn help_on_every_subcommand() {
    for args in [&["--help"][..], &["bench", "--help"], &["bench", "report", "--help"], &["probe", "--help"]] {
        let (ok, out, err) = ferry(args, Duration::from_secs(60));
        assert!(ok, "ferry {args:?} failed:\n{err}");
        assert!(out.contains("Usage: ferry"), "ferry {args:?}:\n{out}");
    }
    let (_, out, _) = ferry(&["bench", "--help"], Duration::from_secs(60));
    for suite in ferry_bench::suites::all() {
        assert!(out.contains(&format!("- {}:", suite.name)) && out.contains(suite.about), "bench --help lacks {}:\n{out}", suite.name);
    }
    for opt in ["--quick", "--smoke", "--json <FILE>", "--placement <P>"] {
        assert!(out.contains(opt), "bench --help lacks {opt}:\n{out}");
    }
    let (ok, _, err) = ferry(&["bench", "nosuch"], Duration::from_secs(60));
    assert!(!ok && err.contains("invalid value 'nosuch'") && err.contains("port"), "{err}");
}

/// The async API's cost is measured by `ferry bench rpc` itself, beside the
/// blocking call it is compared with: a measured `ferry-async-call` record
/// (tokio client, blocking server) at every size, next to
/// `ferry-call-block` from the same run.
#[test]
fn rpc_suite_measures_the_async_call() {
    let dir = temp_dir("async");
    let json = dir.join("rpc.json");
    let json_s = json.to_str().unwrap();
    let (ok, out, err) =
        ferry(&["bench", "rpc", "--smoke", "--placement", "unpinned", "--json", json_s], Duration::from_secs(600));
    assert!(ok, "ferry bench rpc --smoke failed:\n{err}");
    assert!(out.contains("ferry-async-call"), "no ferry-async-call row in the table:\n{out}");
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the results file")).expect("a JSON array");
    for bytes in [8u64, 64, 1024] {
        let find = |imp: &str| {
            records
                .iter()
                .find(|r| r["impl"] == imp && r["bytes"] == bytes && r["case"] == "roundtrip")
                .unwrap_or_else(|| panic!("no {imp} record at {bytes} bytes"))
        };
        let a = find("ferry-async-call");
        assert_eq!(a["suite"], "rpc");
        assert_eq!(a["placement"], "unpinned");
        assert!(a["median_ns"].is_number(), "ferry-async-call at {bytes} bytes was not measured: {a}");
        assert!(a["iters"].as_u64().is_some_and(|n| n > 0), "{a}");
        assert!(a["extra"]["client"].as_str().is_some_and(|c| c.contains("tokio")), "{a}");
        assert!(a["extra"]["syscalls_per_call_server"].is_number(), "{a}");
        assert!(find("ferry-call-block")["median_ns"].is_number(), "the blocking call was not measured at {bytes} bytes");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The generated stubs' cost is measured by `ferry bench rpc` itself:
/// measured `ferry-stub-call-block` and `ferry-stub-call-poll` records at
/// every size but 65536, where the stub's encoding does not fit and the
/// records say so (cross-core, where polling can run), next to the
/// hand-written `ferry-call-block` and `ferry-call-poll` of the same run.
/// The run names those four with `--impl`, and nothing else is recorded.
#[test]
fn rpc_suite_measures_the_generated_stubs() {
    let dir = temp_dir("stub");
    let json = dir.join("rpc.json");
    let json_s = json.to_str().unwrap();
    let four = ["ferry-stub-call-block", "ferry-call-block", "ferry-stub-call-poll", "ferry-call-poll"];
    let mut args = vec!["bench", "rpc", "--smoke", "--placement", "cross-core", "--json", json_s];
    for imp in four {
        args.extend(["--impl", imp]);
    }
    let (ok, out, err) = ferry(&args, Duration::from_secs(600));
    assert!(ok, "ferry bench rpc --smoke failed:\n{err}");
    assert!(out.contains("ferry-stub-call-block"), "no ferry-stub-call-block row in the table:\n{out}");
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the results file")).expect("a JSON array");
    const SIZES: [u64; 7] = [8, 64, 1024, 4096, 16384, 64512, 65536];
    assert_eq!(records.len(), SIZES.len() * four.len(), "one record per size and named impl: {records:?}");
    for r in &records {
        assert!(four.iter().any(|imp| r["impl"] == *imp), "an impl not named with --impl ran: {r}");
    }
    for bytes in SIZES {
        for (stub, hand) in [("ferry-stub-call-block", "ferry-call-block"), ("ferry-stub-call-poll", "ferry-call-poll")] {
            let find = |imp: &str| {
                records
                    .iter()
                    .find(|r| r["impl"] == imp && r["bytes"] == bytes && r["case"] == "roundtrip")
                    .unwrap_or_else(|| panic!("no {imp} record at {bytes} bytes"))
            };
            let s = find(stub);
            assert_eq!(s["placement"], "cross-core");
            assert!(find(hand)["median_ns"].is_number(), "{hand} was not measured at {bytes} bytes");
            if bytes == 65536 {
                // The stub's encoding does not fit beside the most a call
                // carries: skipped, saying so.
                assert!(s["median_ns"].is_null() && s["extra"]["skipped"].as_str().is_some_and(|w| w.contains("encoding")), "{s}");
                continue;
            }
            assert!(s["median_ns"].is_number(), "{stub} at {bytes} bytes was not measured: {s}");
            assert!(s["iters"].as_u64().is_some_and(|n| n > 0), "{s}");
            assert_eq!(s["extra"]["interface"], "bench.echo", "{s}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--impl` with a name no chosen suite has is refused before anything
/// runs, with the names the suites do have.
#[test]
fn an_unknown_impl_is_refused_with_the_known_names() {
    let (ok, out, err) = ferry(&["bench", "rpc", "port", "--smoke", "--impl", "spin-floor", "--impl", "no-such-impl"], Duration::from_secs(60));
    assert!(!ok, "an unknown --impl was accepted:\n{out}");
    assert!(err.contains("no-such-impl") && err.contains("ferry-call-poll") && err.contains("ferry-port"), "{err}");
    assert!(out.is_empty(), "something ran:\n{out}");
}

/// A results file that cannot be written (its directory is missing, or it
/// names a directory) is refused before anything is measured, not after a
/// run of an hour whose numbers then go nowhere.
#[test]
fn a_results_file_that_cannot_be_written_is_refused_before_anything_runs() {
    let dir = temp_dir("unwritable");
    let missing = dir.join("no-such-dir").join("r.json");
    let missing = missing.to_str().unwrap();
    for args in [
        vec!["bench", "port", "--smoke", "--json", missing],
        vec!["bench", "port", "--smoke", "--json", dir.to_str().unwrap()],
        vec!["probe", "--quick", "--json", missing],
    ] {
        let (ok, out, err) = ferry(&args, Duration::from_secs(60));
        assert!(!ok, "{args:?} was accepted:\n{out}\n{err}");
        assert!(out.is_empty(), "{args:?}: something ran:\n{out}");
        assert!(err.contains("directory"), "{args:?}: the error does not say what is wrong: {err}");
    }
    assert!(!dir.join("no-such-dir").exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "a file was left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The C API's cost is measured by `ferry bench rpc` itself: measured
/// `ferry-c-call-block`, `ferry-c-call-poll` and `ferry-c-port` records (C
/// code calling libferry's functions) at every size, next to the Rust API's
/// `ferry-call-block`, `ferry-call-poll` and `ferry-port` of the same run.
#[test]
fn rpc_suite_measures_the_c_api() {
    let dir = temp_dir("capi");
    let json = dir.join("rpc.json");
    let json_s = json.to_str().unwrap();
    let (ok, out, err) =
        ferry(&["bench", "rpc", "--smoke", "--placement", "cross-core", "--json", json_s], Duration::from_secs(600));
    assert!(ok, "ferry bench rpc --smoke failed:\n{err}");
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the results file")).expect("a JSON array");
    for (c, rust) in [("ferry-c-call-block", "ferry-call-block"), ("ferry-c-call-poll", "ferry-call-poll"), ("ferry-c-port", "ferry-port")] {
        assert!(out.contains(c), "no {c} row in the table:\n{out}");
        for bytes in [8u64, 64, 1024] {
            let find = |imp: &str| {
                records
                    .iter()
                    .find(|r| r["impl"] == imp && r["bytes"] == bytes && r["case"] == "roundtrip" && r["placement"] == "cross-core")
                    .unwrap_or_else(|| panic!("no {imp} record at {bytes} bytes"))
            };
            let r = find(c);
            assert!(r["median_ns"].is_number(), "{c} at {bytes} bytes was not measured: {r}");
            assert!(r["iters"].as_u64().is_some_and(|n| n > 0), "{r}");
            assert_eq!(r["extra"]["api"], "c", "{r}");
            assert!(find(rust)["median_ns"].is_number(), "{rust} was not measured at {bytes} bytes");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferry bench python` puts suite `python` into the results file: measured
/// records of every case and impl when ferry's Python package is built
/// (the virtual environment `python/test.sh` makes), otherwise every record
/// skipped with how to build it, said on stderr too. A script that is not
/// where it should be is a skip with its reason, never a silent hole.
#[test]
fn python_suite_lands_in_the_results_file() {
    let dir = temp_dir("python");
    let json = dir.join("py.json");
    let json_s = json.to_str().unwrap();
    let want = [
        ("oneshot", "ferry-py"),
        ("oneshot", "mp-pipe-pickle"),
        ("oneshot", "mp-shared-memory"),
        ("oneshot", "pickle5-oob"),
        ("roundtrip", "ferry-py"),
        ("roundtrip", "ferry-py-port"),
        ("roundtrip", "mp-pipe"),
    ];
    let read = || -> Vec<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the results file")).expect("a JSON array")
    };
    let (ok, _, err) = ferry(&["bench", "python", "--smoke", "--json", json_s], Duration::from_secs(600));
    assert!(ok, "ferry bench python --smoke failed:\n{err}");
    let records = read();
    assert_eq!(records.len(), want.len(), "{records:?}");
    for (case, imp) in want {
        let r = records
            .iter()
            .find(|r| r["suite"] == "python" && r["case"] == case && r["impl"] == imp)
            .unwrap_or_else(|| panic!("no python {case} {imp} record in {records:?}"));
        // --smoke sends 1 MiB instead of 256.
        assert_eq!(r["bytes"], if case == "oneshot" { 1u64 << 20 } else { 64 }, "{r}");
        assert_eq!(r["touch"], if case == "oneshot" { "read" } else { "none" }, "{r}");
        match r["extra"]["skipped"].as_str() {
            None => assert!(r["median_ns"].is_number() && r["iters"].as_u64().is_some_and(|n| n > 0), "{r}"),
            Some(why) => {
                assert!(why.contains("python/test.sh") && why.contains("FERRY_PYTHON"), "the skip says how to get the package: {why}");
                assert!(err.contains("python/test.sh"), "stderr says it too:\n{err}");
            }
        }
    }
    // The script missing: skipped with the reason.
    let (ok, _, err) =
        ferry_with(&["bench", "python", "--smoke", "--json", json_s], &[("FERRY_PY_BENCH", "/nonexistent/bench.py")], Duration::from_secs(60));
    assert!(ok, "{err}");
    let records = read();
    assert_eq!(records.len(), want.len());
    assert!(records.iter().all(|r| r["median_ns"].is_null() && r["extra"]["skipped"].as_str().is_some_and(|s| s.contains("FERRY_PY_BENCH"))), "{records:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
