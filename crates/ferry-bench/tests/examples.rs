//! The crate's examples run (briefly, so they never rot): `port_breakdown
//! --quick` prints a row per variant, `transfer_subset` on a tiny subset a
//! row per chosen impl. Nothing here looks at a timing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn run(name: &str, args: &[&str]) -> String {
    // target/<profile>/deps/<this test> -> target/<profile>/examples
    let exe = std::env::current_exe().expect("current exe");
    let path: PathBuf = exe.parent().and_then(|d| d.parent()).expect("target dir").join("examples").join(name);
    assert!(path.exists(), "{} is not built (cargo test builds the examples)", path.display());
    let dir = std::env::temp_dir().join(format!("ferry-bench-example-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join("stdout");
    let mut child = Command::new(&path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{name} did not finish");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{name} failed:\n{out}");
    out
}

#[test]
fn port_breakdown_measures_every_variant() {
    let out = run("port_breakdown", &["--quick"]);
    for row in ["uds-seqpacket", "ferry-port"] {
        assert!(out.lines().any(|l| l.trim_start().starts_with(row)), "no {row} row:\n{out}");
    }
}

#[test]
fn transfer_subset_runs_the_chosen_corner() {
    let out = run(
        "transfer_subset",
        &["--quick", "--case", "oneshot", "--bytes", "4096", "--touch", "none", "--impl", "pipe,ferry-copy-lazy", "--placement", "cross-core"],
    );
    for row in ["pipe", "ferry-copy-lazy"] {
        assert!(out.lines().any(|l| l.trim_start().starts_with(row)), "no {row} row:\n{out}");
    }
}
