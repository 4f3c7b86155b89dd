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

/// A policy `rpc_echo` does not know is refused with its usage: it ran
/// the calls under the adaptive policy while printing "policy bogus", so
/// a mistyped `pol` measured something other than what it said.
#[test]
fn rpc_echo_refuses_an_unknown_policy() {
    let path = examples_dir().join("rpc_echo");
    assert!(path.exists(), "example rpc_echo was not built at {}", path.display());
    let mut child = Command::new(&path)
        .args(["bogus", "10"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn example");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("rpc_echo bogus still running after two minutes");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stdout:\n{}\nstderr:\n{err}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("adaptive|block|poll"), "{err}");
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

/// Every example compiles unchanged as edition 2024 (where, among other
/// things, `std::env::set_var` is `unsafe`), so what a user copies from one
/// into a new crate builds. The examples stay in this package (whose
/// edition is the workspace's); the check builds them in a scratch crate
/// of edition 2024 under `target/`, with this workspace's lock file and no
/// network, and fails with the compiler's messages.
#[test]
fn examples_compile_as_edition_2024() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().and_then(|p| p.parent()).expect("workspace root");
    let target = examples_dir().parent().and_then(|p| p.parent()).expect("target dir").to_path_buf();
    let scratch = target.join("edition2024");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut toml = format!(
        "[package]\nname = \"ferry-examples-2024\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\
         [workspace]\n\
         [dependencies]\nferry = {{ path = {:?}, features = [\"tokio\"] }}\n\
         tokio = {{ version = \"1\", features = [\"rt\", \"rt-multi-thread\", \"macros\", \"time\", \"net\"] }}\n",
        manifest.display().to_string()
    );
    let mut names = Vec::new();
    for entry in std::fs::read_dir(manifest.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            toml += &format!("[[example]]\nname = {name:?}\npath = {:?}\n", path.display().to_string());
            names.push(name);
        }
    }
    assert!(names.len() >= 5, "examples found: {names:?}");
    std::fs::write(scratch.join("Cargo.toml"), toml).unwrap();
    std::fs::create_dir_all(scratch.join("src")).unwrap();
    std::fs::write(scratch.join("src/lib.rs"), "//! Scratch crate: ferry's examples built as edition 2024.\n").unwrap();
    if !scratch.join("Cargo.lock").exists() {
        std::fs::copy(root.join("Cargo.lock"), scratch.join("Cargo.lock")).unwrap();
    }
    let out = Command::new(env!("CARGO"))
        .args(["check", "--examples", "--offline", "--quiet", "--manifest-path"])
        .arg(scratch.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", scratch.join("target"))
        .env("RUSTFLAGS", "-D warnings")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "examples do not compile as edition 2024:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
