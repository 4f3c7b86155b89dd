//! The crate's example runs (briefly, so it never rots): `stub_bench` with
//! a few hundred calls per case writes a record for every impl, size and
//! case, each measured. Nothing here looks at a timing.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/<this test> -> target/<profile>/examples
    let exe = std::env::current_exe().expect("current exe");
    exe.parent().and_then(|d| d.parent()).expect("target dir").join("examples").join(name)
}

#[test]
fn stub_bench_runs_and_reports_every_case() {
    let path = example("stub_bench");
    assert!(path.exists(), "{} is not built (cargo test builds the examples)", path.display());
    let mut child = Command::new(&path)
        .args(["--iters", "200"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start stub_bench");
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("stub_bench did not finish");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert!(out.status.success(), "stub_bench failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("a JSON array of records");
    for imp in ["ferry-call-poll", "ferry-stub-call-poll", "ferry-call-block", "ferry-stub-call-block"] {
        for bytes in [8u64, 1024] {
            let r = records
                .iter()
                .find(|r| r["impl"] == imp && r["bytes"] == bytes && r["case"] == "roundtrip")
                .unwrap_or_else(|| panic!("no {imp} record at {bytes} bytes in {records:?}"));
            assert_eq!(r["suite"], "rpc");
            assert!(r["median_ns"].as_f64().is_some_and(|m| m > 0.0), "{r}");
        }
    }
    assert!(records.iter().any(|r| r["case"] == "region-arg"), "no region-arg record");
}
