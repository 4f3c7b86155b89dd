//! `ferry bench report` on a small results file written here: every paper
//! table has its section, what the file lacks is "not measured", a skipped
//! record shows its reason, ratios are computed from the medians, and a
//! document's hand-written part survives regeneration.

use ferry_bench::report::{self, ReportError, NOT_MEASURED};

const RESULTS: &str = r#"[
  {"suite": "port", "case": "null-roundtrip", "impl": "ferry-port", "bytes": 0, "placement": "cross-core", "touch": "none", "iters": 10, "median_ns": 3000.0, "p99_ns": 5000.0, "min_ns": 2000.0, "gbps": null, "extra": {"ctx_switches_per_op": 2.5}},
  {"suite": "port", "case": "null-roundtrip", "impl": "uds-seqpacket", "bytes": 0, "placement": "cross-core", "touch": "none", "iters": 10, "median_ns": 2500.0, "p99_ns": 4000.0, "min_ns": 2000.0, "gbps": null, "extra": {}},
  {"suite": "rpc", "case": "roundtrip", "impl": "futex-floor", "bytes": 8, "placement": "cross-core", "touch": "none", "iters": 10, "median_ns": 1000.0, "p99_ns": 1500.0, "min_ns": 900.0, "gbps": 0.016, "extra": {}},
  {"suite": "rpc", "case": "roundtrip", "impl": "ferry-call-poll", "bytes": 8, "placement": "cross-core", "touch": "none", "iters": 10, "median_ns": 2000.0, "p99_ns": 2600.0, "min_ns": 1800.0, "gbps": 0.008, "extra": {}},
  {"suite": "rpc", "case": "roundtrip", "impl": "ipc-channel", "bytes": 8, "placement": "cross-core", "touch": "none", "iters": 10, "median_ns": 8000.0, "p99_ns": 9000.0, "min_ns": 7000.0, "gbps": 0.002, "extra": {}},
  {"suite": "transfer", "case": "oneshot", "impl": "pipe", "bytes": 65536, "placement": "cross-core", "touch": "read", "iters": 10, "median_ns": 40000.0, "p99_ns": 50000.0, "min_ns": 30000.0, "gbps": 1.6, "extra": {}},
  {"suite": "transfer", "case": "oneshot", "impl": "ferry-copy-lazy", "bytes": 65536, "placement": "cross-core", "touch": "read", "iters": 10, "median_ns": 10000.0, "p99_ns": 12000.0, "min_ns": 9000.0, "gbps": 6.5, "extra": {}},
  {"suite": "transfer", "case": "oneshot", "impl": "memfd-map", "bytes": 1073741824, "placement": "cross-core", "touch": "read", "iters": 0, "median_ns": null, "p99_ns": null, "min_ns": null, "gbps": null, "extra": {"skipped": "payloads above 256 MiB are skipped with --quick"}},
  {"suite": "probe", "case": "null-syscall", "impl": "machine", "bytes": 0, "placement": "same-core", "touch": "none", "iters": 100, "median_ns": 82.0, "p99_ns": 90.0, "min_ns": 80.0, "gbps": null, "extra": {"unit": "call"}}
]
"#;

const META: &str = r#"{"cpu_model": "Test CPU \"9000\"", "cores": 2, "kernel": "6.1.0", "date": "2026-01-01T00:00:00Z", "command_line": "ferry bench all --json r.json"}"#;

/// The one source of a report made from a single file.
fn source(path: &str, meta: Option<serde_json::Value>, rows: &[ferry_bench::record::Record]) -> report::Source {
    let mut suites: Vec<String> = rows.iter().map(|r| r.suite.clone()).collect();
    suites.sort();
    suites.dedup();
    report::Source { path: path.into(), meta, suites }
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-bench-report-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temporary directory");
    d
}

fn section<'a>(md: &'a str, heading: &str) -> &'a str {
    let start = md.find(heading).unwrap_or_else(|| panic!("no section {heading:?} in:\n{md}"));
    let rest = &md[start + heading.len()..];
    let end = rest.find("\n### ").map_or(rest.len(), |e| e);
    &rest[..end]
}

#[test]
fn every_paper_table_has_a_section_and_gaps_say_not_measured() {
    let dir = temp_dir("sections");
    let path = dir.join("r.json");
    std::fs::write(&path, RESULTS).unwrap();
    std::fs::write(dir.join("r.json.meta.json"), META).unwrap();
    let path = path.to_str().unwrap();
    let (rows, meta) = report::load(path).expect("the synthetic file loads");
    assert_eq!(rows.len(), 9);
    let md = report::render(&rows, &[source("r.json", meta, &rows)], &[]);

    // The machine, from the sidecar (with the quote unescaped).
    assert!(section(&md, "### Machine and run").contains("Test CPU \"9000\""), "{md}");

    // Accent 3-2: a simple message is half the ferry round trip, 1.5 µs;
    // 2.5 ms / 1.5 µs = 1667×. The 1 KiB rpc case is absent.
    let accent = section(&md, "### Accent, Table 3-2");
    assert!(accent.contains("1.5 µs"), "{accent}");
    assert!(accent.contains("1667×"), "{accent}");
    assert!(accent.contains(NOT_MEASURED), "{accent}");

    // DASH: copy ÷ ferry at 64 KiB read is 40 / 10 = 4.00×; the 1 GiB
    // record's skip reason is shown; iceoryx2 was not in the run.
    let dash = section(&md, "### DASH, Tables I–III");
    assert!(dash.contains("4.00×"), "{dash}");
    assert!(dash.contains("payloads above 256 MiB are skipped with --quick"), "{dash}");
    assert!(dash.contains("0.957") || dash.contains("957 µs"), "{dash}");
    assert!(dash.contains(NOT_MEASURED), "{dash}");
    assert!(dash.contains("| 64 KiB | read | cross-core | 10 µs | not measured |"), "{dash}");

    // L4: ferry-call-poll is 2.00× the futex floor; no spin floor measured;
    // ferry ÷ ipc-channel = 0.25×.
    let l4 = section(&md, "### L4");
    assert!(l4.contains("| `ferry-call-poll` | cross-core | 2 µs (p99 2.6 µs) `ferry-call-poll` | 2.00× | not measured |"), "{l4}");
    assert!(l4.contains("0.25×"), "{l4}");

    // Dean & Armand 5-2 uses the probe's null system call: 61 µs / 82 ns.
    let da = section(&md, "### Dean & Armand, Table 5-2");
    assert!(da.contains("82 ns"), "{da}");
    assert!(da.contains("744×"), "{da}");
    // 5-8: no pager suite in the file.
    let da8 = section(&md, "### Dean & Armand, Table 5-8");
    assert!(da8.contains(&format!("`pager`: {NOT_MEASURED}")), "{da8}");

    // Anderson Table 1: the null system call is there, the others are not.
    let a1 = section(&md, "### Anderson et al., Table 1");
    assert!(a1.contains("| null system call | 15.8 µs | 4.1 µs | 82 ns (same-core) | 50.0× |"), "{a1}");
    assert!(a1.contains(&format!("| trap | 23.1 µs | 5.2 µs | {NOT_MEASURED} |")), "{a1}");
    // Table 7: ferry's counts; the socket recorded none.
    let a7 = section(&md, "### Anderson et al., Table 7");
    assert!(a7.contains("ctx switches 2.5"), "{a7}");
    assert!(a7.contains(&format!("`uds-seqpacket` | {NOT_MEASURED}")), "{a7}");

    // Every record appears in the full listing.
    let all = section(&md, "### Every record");
    assert_eq!(all.matches("| `").count(), 8, "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_empty_run_is_all_not_measured_and_a_missing_sidecar_is_said() {
    let dir = temp_dir("empty");
    let path = dir.join("e.json");
    std::fs::write(&path, "[]").unwrap();
    let (rows, meta) = report::load(path.to_str().unwrap()).expect("an empty array is a valid results file");
    assert!(meta.is_none());
    let md = report::render(&rows, &[source("e.json", meta, &rows)], &[]);
    for h in [
        "### Machine and run",
        "### Accent, Table 3-2",
        "### DASH, Tables I–III",
        "### L4",
        "### Dean & Armand, Table 5-2",
        "### Dean & Armand, Table 5-8",
        "### Dean & Armand, Table 5-4",
        "### Dean & Armand, Table 5-5",
        "### Anderson et al., Table 1",
        "### Anderson et al., Table 7",
    ] {
        assert!(section(&md, h).contains(NOT_MEASURED), "{h} does not say {NOT_MEASURED}:\n{md}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_files_get_typed_errors() {
    let dir = temp_dir("bad");
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "[{\"suite\": \"port\",").unwrap();
    assert!(matches!(report::load(broken.to_str().unwrap()), Err(ReportError::Syntax { .. })));
    let shape = dir.join("shape.json");
    std::fs::write(&shape, "{\"suite\": \"port\"}").unwrap();
    assert!(matches!(report::load(shape.to_str().unwrap()), Err(ReportError::Shape { .. })));
    let nocase = dir.join("nocase.json");
    std::fs::write(&nocase, "[{\"suite\": \"port\", \"impl\": \"x\"}]").unwrap();
    let e = report::load(nocase.to_str().unwrap()).unwrap_err();
    assert!(matches!(e, ReportError::Shape { .. }) && e.to_string().contains("missing field `case`"), "{e}");
    // A float where the contract wants an integer, and a key twice, are not
    // records either.
    let line = RESULTS.lines().nth(1).unwrap().trim_end_matches(',');
    for bad in [line.replace("\"bytes\": 0", "\"bytes\": 0.5"), line.replace("\"iters\": 10", "\"iters\": 10, \"iters\": 10")] {
        let f = dir.join("bad-record.json");
        std::fs::write(&f, format!("[{bad}]")).unwrap();
        assert!(matches!(report::load(f.to_str().unwrap()), Err(ReportError::Shape { .. })), "{bad}");
    }
    assert!(matches!(report::load(dir.join("absent.json").to_str().unwrap()), Err(ReportError::Read { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn regenerating_keeps_the_hand_written_part_of_a_document() {
    let dir = temp_dir("doc");
    let doc = dir.join("doc.md");
    let doc = doc.to_str().unwrap();
    std::fs::write(doc, format!("# Method\nkeep me\n\n{}\nold report\n{}\n\ntrailer\n", report::BEGIN, report::END)).unwrap();
    report::write_into(doc, "new report\n").unwrap();
    let text = std::fs::read_to_string(doc).unwrap();
    assert!(text.starts_with("# Method\nkeep me\n"), "{text}");
    assert!(text.contains("new report") && !text.contains("old report"), "{text}");
    assert!(text.trim_end().ends_with("trailer"), "{text}");
    // Without markers the report is the whole file.
    let plain = dir.join("plain.md");
    report::write_into(plain.to_str().unwrap(), "only this\n").unwrap();
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "only this\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dean_armand_cached_reads_divide_the_file_server_by_native_read() {
    // 16 MiB = 4096 pages: a 8.192 ms pass is 2 µs a page, 2048 MB/s;
    // native read() 4.096 ms (1 µs a page). Random reads: 3 µs against 2 µs.
    let rec = |case: &str, imp: &str, bytes: u64, median: f64| {
        format!(
            r#"{{"suite": "pager", "case": "{case}", "impl": "{imp}", "bytes": {bytes}, "placement": "same-core", "touch": "read", "iters": 10, "median_ns": {median}, "p99_ns": {median}, "min_ns": {median}, "gbps": null, "extra": {{}}}}"#
        )
    };
    let text = format!(
        "[{}]",
        [
            rec("seqread", "ferry-fileserver", 16 << 20, 8_192_000.0),
            rec("seqread", "file-read", 16 << 20, 4_096_000.0),
            rec("randread", "ferry-fileserver", 4096, 3000.0),
            rec("randread", "file-read", 4096, 2000.0),
        ]
        .join(",")
    );
    let rows = report::parse_rows("c.json", &text).unwrap();
    let md = report::render(&rows, &[source("c.json", None, &rows)], &[]);
    let t4 = section(&md, "### Dean & Armand, Table 5-4");
    assert!(t4.contains("| 16 MiB | same-core | file server (`ferry-fileserver`) | 2 µs `ferry-fileserver` | 2048 | 2.00× |  |"), "{t4}");
    assert!(t4.contains("| 16 MiB | same-core | native `read()` (`file-read`) | 1 µs `file-read` | 4096 | 1.00× |  |"), "{t4}");
    // The file server at 512 pages and mmap were not in this run.
    assert!(t4.contains(&format!("512-page cluster | {NOT_MEASURED}")), "{t4}");
    let t5 = section(&md, "### Dean & Armand, Table 5-5");
    assert!(t5.contains("| same-core | file server (`ferry-fileserver`) | 3 µs (p99 3 µs) `ferry-fileserver` | 1.50× | 70.0× |"), "{t5}");
}

/// A later run of one suite replaces that suite's records whole (none of
/// the earlier run's are left to be divided by the later run's), leaves
/// the other suites' alone, and its machine is named beside the first.
#[test]
fn a_later_run_replaces_the_suites_it_measured() {
    let dir = temp_dir("with");
    let later = r#"[
  {"suite": "port", "case": "null-roundtrip", "impl": "ferry-port", "bytes": 0, "placement": "cross-core", "touch": "none", "iters": 10, "median_ns": 4000.0, "p99_ns": 5000.0, "min_ns": 3000.0, "gbps": null, "extra": {}}
]
"#;
    std::fs::write(dir.join("r.json"), RESULTS).unwrap();
    std::fs::write(dir.join("r.json.meta.json"), META).unwrap();
    std::fs::write(dir.join("n.json"), later).unwrap();
    std::fs::write(dir.join("n.json.meta.json"), META.replace("Test CPU", "Later CPU")).unwrap();
    let out = dir.join("report.md");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_ferry-bench"))
        .args(["bench", "report"])
        .arg(dir.join("r.json"))
        .arg("--with")
        .arg(dir.join("n.json"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let md = std::fs::read_to_string(&out).unwrap();
    assert!(md.contains("--with"), "{md}");
    // 9 records, less the file's two port records, plus the later one.
    assert!(md.contains("from 8 records"), "{md}");
    let machine = section(&md, "### Machine and run");
    assert!(machine.contains("Test CPU") && machine.contains("Later CPU"), "{machine}");
    assert!(machine.contains("The `port` records are from"), "{machine}");
    // The port suite's one record now is the later run's: 2 µs one way, and
    // no ratio to the earlier run's uds-seqpacket.
    let accent = section(&md, "### Accent, Table 3-2");
    assert!(accent.contains("2 µs") && !accent.contains("1.5 µs"), "{accent}");
    // The rpc suite's records are still the first file's.
    assert!(md.contains("ferry-call-poll"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

