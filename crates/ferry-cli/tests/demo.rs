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

/// `ferry stat PID` reads a live process's counters from outside; the
/// observed process is the demo's server role, blocked waiting for clients
/// after registering its port.
#[test]
fn stat_reads_counters_of_a_live_process() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("ferry-stat-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bootstrap");
    ferry::NameServer::bind(&path).unwrap().spawn().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["demo", "--role", "server"])
        .env("FERRY_BOOTSTRAP", &path)
        .env("FERRY_NO_EMBED", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("registered"), "{first}");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["stat", &server.id().to_string()])
        .env("FERRY_BOOTSTRAP", &path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "ferry stat failed: {text} {}", String::from_utf8_lossy(&out.stderr));
    // The server sent a request (register) and received its reply.
    let value = |k: &str| -> u64 {
        text.lines().find(|l| l.trim_start().starts_with(k)).and_then(|l| l.split_whitespace().last()).unwrap().parse().unwrap()
    };
    assert!(value("messages_sent") >= 1, "{text}");
    assert!(value("messages_received") >= 1, "{text}");
    assert_eq!(value("rpc_connections_open"), 0, "{text}");
    // The queue depth of the port it registered, from the name service.
    assert!(text.contains("port \"demo.server\": 0 bytes queued"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
