//! Runs `ferry demo` as a user would and checks its account of what crossed
//! each process boundary.

use std::process::Command;

#[test]
fn demo_runs_and_narrates_every_crossing() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry")).arg("demo").output().expect("run ferry demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ferry demo failed: {}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    for needle in [
        "embedded name service listening at",
        "registered a send right to its service port",
        "arrived via send-once: true",
        "forwarded the note, its right and its region, untouched",
        "the region crossed by value",
        "no server in between",
        "dead-name notification: client-a's inbox is gone",
        "dead-name notification: client-b's inbox is gone",
        "no-senders notification: nobody can reach client-a's session port",
        "no-senders notification: nobody can reach client-b's session port",
        "no-senders on my direct port",
    ] {
        assert!(text.contains(needle), "demo output lacks {needle:?}:\n{text}");
    }
    // Each client is a separate process from the server and from the other.
    let pids: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split("pid").nth(1))
        .filter_map(|r| r.split(']').next())
        .map(str::trim)
        .collect();
    assert!(pids.len() >= 4, "expected demo, server and two clients as separate processes: {pids:?}");
}
