//! Runs every example of the library as a user would (the binaries `cargo
//! test` builds beside the tests), so the examples in the README and docs
//! never rot. Each must exit successfully; its output is checked only for
//! what the example promises, never for timings.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The directory where cargo put this package's examples.
fn examples_dir() -> PathBuf {
    // target/<profile>/deps/<this test> -> target/<profile>/examples
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("examples")
}

/// Runs an example to completion (failing after `limit` instead of hanging)
/// and returns its standard output.
fn run(name: &str, args: &[&str], limit: Duration) -> String {
    let path = examples_dir().join(name);
    assert!(path.exists(), "example {name} was not built at {}", path.display());
    let mut child = Command::new(&path).args(args).stdout(std::process::Stdio::piped()).spawn().expect("spawn example");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut out = String::new();
            use std::io::Read;
            child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            assert!(status.success(), "example {name} failed with {status}:\n{out}");
            return out;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("example {name} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn big_region_crosses_by_value_without_copies() {
    let out = run("big_region", &[], Duration::from_secs(300));
    assert!(out.contains("bytes copied by ferry: 0"), "{out}");
}

#[test]
fn rpc_echo_answers_every_call() {
    let out = run("rpc_echo", &["adaptive", "2000"], Duration::from_secs(120));
    assert!(out.contains("2000 calls of 4 bytes") && out.contains("server rpc system calls"), "{out}");
}

#[test]
fn crossover_reports_a_measurement() {
    let out = run("crossover", &[], Duration::from_secs(300));
    assert!(out.contains("crossover:"), "{out}");
}

#[cfg(feature = "tokio")]
#[test]
fn async_echo_answers_every_call_and_survives_an_abandoned_one() {
    let out = run("async_echo", &["500"], Duration::from_secs(120));
    assert!(out.contains("500 calls of 4 bytes echoed"), "{out}");
    assert!(out.contains("abandoned call timed out: true; next call got its own reply: true"), "{out}");
}

#[cfg(feature = "tokio")]
#[test]
fn async_rpc_bench_prints_both_impls_in_the_schema() {
    let out = run("async_rpc_bench", &["200"], Duration::from_secs(120));
    for bytes in [8, 64, 1024] {
        for imp in ["ferry-call-block", "ferry-async-call"] {
            let rec = format!("\"suite\":\"rpc\",\"case\":\"roundtrip\",\"impl\":\"{imp}\",\"bytes\":{bytes},");
            assert!(out.contains(&rec), "no record for {imp} at {bytes} bytes:\n{out}");
        }
        assert!(out.contains(&format!("ratio async/blocking at {bytes} bytes: ")), "{out}");
    }
}
