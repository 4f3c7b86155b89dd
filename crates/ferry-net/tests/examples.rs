//! Runs the crate's example as a user would, so it never rots. It must
//! exit successfully and say what it promises; timings are never checked.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/<this test> -> target/<profile>/examples
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(|d| d.parent()).expect("target dir").join("examples").join(name)
}

#[test]
fn net_demo_moves_a_right_and_a_region_across_hosts() {
    let path = example("net_demo");
    assert!(path.exists(), "example not built at {}", path.display());
    let mut child = Command::new(&path).stdout(Stdio::piped()).spawn().expect("spawn example");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("net_demo still running after a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "net_demo failed with {status}:\n{out}");
    assert!(out.contains("got 4194304 region bytes"), "{out}");
    assert!(out.contains("the original port (no proxy chain)"), "{out}");
}
