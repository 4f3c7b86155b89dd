//! Runs `ferry demo` as a user would and checks its account of what crossed
//! each process boundary.

use std::path::{Path, PathBuf};
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

/// `ferry stat --json` is JSON whatever the observed process is called: its
/// command name (the kernel's `comm`, from the executable's file name) may
/// hold quotes, backslashes and control characters, which must be escaped
/// as JSON escapes them, not as Rust's `{:?}` does (`\u{1}` is not JSON).
#[test]
fn stat_json_escapes_the_command_name() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("ferry-stat-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bootstrap");
    ferry::NameServer::bind(&path).unwrap().spawn().unwrap();
    // The kernel names a process after the file it was started from (at
    // most 15 bytes). A symbolic link, not a copy: writing a program while
    // other tests fork would make running it fail with "Text file busy".
    let name = "f\"e\\r\u{1}\u{7f}y";
    let exe = dir.join(name);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ferry"), &exe).unwrap();
    let mut server = Command::new(&exe)
        .args(["demo", "--role", "server"])
        .env("FERRY_BOOTSTRAP", &path)
        .env("FERRY_NO_EMBED", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("registered"), "{first}");
    let pid = server.id().to_string();
    let one = Command::new(env!("CARGO_BIN_EXE_ferry")).args(["stat", &pid, "--json"]).env("FERRY_BOOTSTRAP", &path).output().unwrap();
    let all = Command::new(env!("CARGO_BIN_EXE_ferry")).args(["stat", "--json"]).output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(one.status.success() && all.status.success(), "{}{}", String::from_utf8_lossy(&one.stderr), String::from_utf8_lossy(&all.stderr));
    let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap_or_else(|e| panic!("ferry stat PID --json: {e}: {}", String::from_utf8_lossy(&one.stdout)));
    assert_eq!(one["command"], name);
    assert_eq!(one["pid"].as_u64(), Some(u64::from(server.id())));
    assert!(one["messages_sent"].as_u64().is_some_and(|n| n >= 1), "{one}");
    assert_eq!(one["ports"][0]["name"], "demo.server");
    let all: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap_or_else(|e| panic!("ferry stat --json: {e}: {}", String::from_utf8_lossy(&all.stdout)));
    let listed = all.as_array().unwrap().iter().find(|p| p["pid"].as_u64() == Some(u64::from(server.id()))).expect("the server is listed");
    assert_eq!(listed["command"], name);
}

/// Runs `ferry demo --net` (with `TMPDIR` at `tmp` if given) and returns
/// its output. Bounded: the demo's own waits end within a minute; it is
/// killed after two.
#[cfg(feature = "net")]
fn demo_net(tmp: Option<&std::path::Path>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.args(["demo", "--net"]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    if let Some(t) = tmp {
        cmd.env("TMPDIR", t);
    }
    let mut child = cmd.spawn().expect("run ferry demo --net");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > end {
            let _ = child.kill();
            panic!("ferry demo --net did not finish in two minutes");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[cfg(feature = "net")]
#[test]
fn demo_net_shows_a_right_and_a_region_crossing_hosts() {
    let out = demo_net(None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ferry demo --net failed: {}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    for needle in [
        "linked to alpha at 127.0.0.1:",
        "looked up \"greeter@alpha\"",
        "crossed by reference: nothing of it has moved yet",
        "bytes are beta's: true",
        "arrived via send-once: true",
        "my own inbox port again, not a proxy: true",
        "no-senders on my session port",
    ] {
        assert!(text.contains(needle), "demo output lacks {needle:?}:\n{text}");
    }
    // Only the touched pages' clusters crossed: far less than 1% of 64 MiB.
    let pct: f64 = text
        .split(" fetches, ")
        .nth(1)
        .and_then(|r| r.split('%').next())
        .and_then(|p| p.parse().ok())
        .expect("the fetched share is printed");
    assert!(pct > 0.0 && pct < 1.0, "{pct}% of the region was fetched");
    // The two hosts are separate processes.
    let pid = |host: &str| {
        text.lines().find(|l| l.starts_with(&format!("[host {host}"))).and_then(|l| l.split("pid").nth(1)).map(|p| p.split(']').next().unwrap().trim().to_string())
    };
    assert_ne!(pid("alpha"), pid("beta"));
}

/// What another user does before `ferry demo --net` runs, when
/// `FERRY_TEST_SQUAT` names the shared temporary directory: makes the
/// directories the demo's next processes would have used (by their
/// likely pids), world-writable, with its certificate and key names
/// symbolic links to `FERRY_TEST_VICTIM`. Run as uid nobody by
/// `demo_net_makes_its_directory_afresh_in_a_shared_temporary_directory`;
/// otherwise nothing.
#[cfg(feature = "net")]
#[test]
fn squat_the_demo_s_directories() {
    use std::os::unix::fs::PermissionsExt;
    let (Some(tmp), Some(victim)) = (std::env::var_os("FERRY_TEST_SQUAT"), std::env::var_os("FERRY_TEST_VICTIM")) else { return };
    let read = |p: &str| -> u32 { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    let (last, max) = (read("/proc/sys/kernel/ns_last_pid"), read("/proc/sys/kernel/pid_max"));
    let mut made = 0;
    // The next pids, as the kernel hands them out (after the last, past
    // the largest from 300 again).
    for n in 1..3000 {
        let pid = if last + n < max { last + n } else { 300 + (last + n - max) };
        let dir = std::path::Path::new(&tmp).join(format!("ferry-demo-net-{pid}"));
        if std::fs::create_dir(&dir).is_err() {
            continue;
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        for host in ["alpha", "beta"] {
            for what in ["cert", "key"] {
                std::os::unix::fs::symlink(&victim, dir.join(format!("{host}.{what}.pem"))).unwrap();
            }
        }
        made += 1;
    }
    println!("squatted {made}");
}

/// `ferry demo --net` run by root in a temporary directory every user may
/// write to: another user (nobody) has made the directories the demo
/// would have used, with symbolic links in them to a file only root may
/// read or write. The demo makes a directory of its own, so the file is
/// untouched and nothing the demo writes lands in the other user's
/// directories.
#[cfg(feature = "net")]
#[test]
fn demo_net_makes_its_directory_afresh_in_a_shared_temporary_directory() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("demo_net_makes_its_directory_afresh_in_a_shared_temporary_directory: skipped (needs root to play another user)");
        return;
    }
    let base = std::env::temp_dir().join(format!("ferry-demo-squat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (tmp, secret) = (base.join("tmp"), base.join("secret"));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = secret.join("victim");
    std::fs::write(&victim, b"root's own\n").unwrap();
    // The other user, a real process of uid nobody, running a copy of this
    // test binary where that user may run it (the build directory may be
    // beneath directories it cannot enter).
    let copy = base.join("as-another-user");
    runnable_by_others(&std::env::current_exe().unwrap(), &copy);
    let out = spawn_retrying(
        Command::new(&copy)
            .args(["--exact", "squat_the_demo_s_directories", "--nocapture", "--test-threads=1"])
            .env("FERRY_TEST_SQUAT", &tmp)
            .env("FERRY_TEST_VICTIM", &victim)
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    )
    .wait_with_output()
    .unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("squatted"), "{out:?}");
    let out = demo_net(Some(&tmp));
    let victim_now = std::fs::read(&victim).unwrap();
    let _ = std::fs::remove_dir_all(&base);
    assert_eq!(victim_now, b"root's own\n", "the demo wrote through another user's symbolic link");
    assert!(out.status.success(), "ferry demo --net failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
}

/// `ferry stat` run by root lists every user's processes that use ferry,
/// with their command names, which their users choose (the kernel's
/// `comm`, from the executable's file name): another user's process (uid
/// nobody) named with terminal escape sequences must not have them
/// written to root's terminal, where they could clear the screen, move
/// the cursor over the lines before, or hide what follows.
#[test]
fn stat_writes_no_control_characters_of_another_users_command_name() {
    // Clears the screen and moves the cursor home: 14 bytes, within the
    // kernel's 15 for a command name.
    let Some((pid, shown)) = stat_of_another_users_process("stat_writes_no_control_characters_of_another_users_command_name", "escape", "\u{1b}[2J\u{1b}[Hx\u{7}\u{8}") else { return };
    for (what, text) in shown {
        let control: Vec<char> = text.chars().filter(|c| c.is_control() && *c != '\n').collect();
        assert!(control.is_empty(), "{what} wrote control characters {control:?}:\n{text:?}");
        assert!(text.contains(&format!("{pid} ")) || text.contains(&format!("pid {pid}")), "{what} does not show the process:\n{text}");
    }
}

/// Nor the invisible characters that reorder or hide the text around them
/// (the name service refuses them in names for the same reason): a
/// right-to-left override and `dyrref` showed another user's process as
/// `ferryd` in root's `ferry stat` on a terminal that lays out
/// bidirectional text.
#[test]
fn stat_writes_no_reordering_characters_of_another_users_command_name() {
    let Some((pid, shown)) = stat_of_another_users_process("stat_writes_no_reordering_characters_of_another_users_command_name", "bidi", "\u{202e}dyrref\u{200b}") else { return };
    for (what, text) in shown {
        let hiding: Vec<char> = text.chars().filter(|c| matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')).collect();
        assert!(hiding.is_empty(), "{what} wrote characters that reorder or hide text {hiding:?}:\n{text:?}");
        assert!(text.contains(&format!("{pid} ")) || text.contains(&format!("pid {pid}")), "{what} does not show the process:\n{text}");
    }
}

/// Runs a ferry process as uid nobody from an executable named `name` (its
/// command name) and returns its pid and what root's `ferry stat PID` and
/// `ferry stat` printed; `None`, saying so, when this test cannot play
/// another user.
fn stat_of_another_users_process(test: &str, tag: &str, name: &str) -> Option<(String, Vec<(&'static str, String)>)> {
    use std::os::unix::fs::PermissionsExt;
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("{test}: skipped (needs root to play another user)");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("ferry-stat-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("bootstrap");
    ferry::NameServer::bind(&path).unwrap().spawn().unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let exe = dir.join(name);
    runnable_by_others(Path::new(env!("CARGO_BIN_EXE_ferry")), &exe);
    let (mut other, _output) = demo_server_as_nobody(&exe, &path);
    let pid = other.id().to_string();
    let one = Command::new(env!("CARGO_BIN_EXE_ferry")).args(["stat", &pid]).env("FERRY_BOOTSTRAP", &path).output().unwrap();
    let all = Command::new(env!("CARGO_BIN_EXE_ferry")).arg("stat").env("FERRY_BOOTSTRAP", &path).output().unwrap();
    let _ = other.kill();
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(one.status.success() && all.status.success(), "{}{}", String::from_utf8_lossy(&one.stderr), String::from_utf8_lossy(&all.stderr));
    let text = |out: &[u8]| String::from_utf8_lossy(out).into_owned();
    Some((pid, vec![("ferry stat PID", text(&one.stdout)), ("ferry stat", text(&all.stdout))]))
}

/// `ferry demo --role server` run from `exe` as uid nobody against the
/// name server at `bootstrap`, once it says it registered its name; with
/// the rest of its output, kept open while it runs.
fn demo_server_as_nobody(exe: &Path, bootstrap: &Path) -> (std::process::Child, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>) {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut other = spawn_retrying(
        Command::new(exe)
            .args(["demo", "--role", "server"])
            .env("FERRY_BOOTSTRAP", bootstrap)
            .env("FERRY_NO_EMBED", "1")
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .stdout(Stdio::piped()),
    );
    let mut lines = BufReader::new(other.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("registered"), "{first}");
    (other, lines)
}

/// A name server on a thread of this process, in a fresh directory
/// `ferry-TAG-PID` every user may reach, whose socket every user may
/// connect to, with `system` registered as a system name for a port of
/// this process: its directory, its socket, and the port's receive right.
fn name_server_for_everyone(tag: &str, system: &str) -> (PathBuf, PathBuf, ferry::ReceiveRight) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("ferry-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("bootstrap");
    let mut server = ferry::NameServer::bind_with_mode(&path, 0o666).unwrap();
    let (rx, tx) = ferry::port().unwrap();
    server.add_system_name(system, tx).unwrap();
    server.spawn().unwrap();
    (dir, path, rx)
}

/// `ferry stat NAME` run by root shows the process behind the name a
/// lookup of NAME would reach: root's own, else the system's. Root's
/// listing holds every user's names, and the first with that name was
/// taken: another user (uid nobody) that registered a system service's
/// name in its own scope had root's `ferry stat` show that user's process
/// as the service.
#[test]
fn stat_by_name_never_shows_another_users_process_for_a_system_name() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("stat_by_name_never_shows_another_users_process_for_a_system_name: skipped (needs root to play another user)");
        return;
    }
    // The system's "demo.server", a port of this process (as ferryd's
    // `files` is the daemon's).
    let (dir, path, _rx) = name_server_for_everyone("stat-spoof", "demo.server");
    let exe = dir.join("ferry");
    runnable_by_others(Path::new(env!("CARGO_BIN_EXE_ferry")), &exe);
    let (mut other, _output) = demo_server_as_nobody(&exe, &path);
    let out = Command::new(env!("CARGO_BIN_EXE_ferry")).args(["stat", "demo.server"]).env("FERRY_BOOTSTRAP", &path).output().unwrap();
    let theirs = other.id();
    let _ = other.kill();
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("ferry stat demo.server (nobody's process is {theirs}, the system's {}):\n{text}", std::process::id());
    assert!(!text.contains(&format!("pid {theirs} ")), "ferry stat showed another user's process for the system's name:\n{text}");
    assert!(out.status.success() && text.contains(&format!("pid {} ", std::process::id())), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// A name that forges a row of `ferry names`: the system's `files`,
/// registered by pid 1, with nothing queued, laid out as the listing lays
/// out its columns.
fn forged_row() -> String {
    format!("files{}system{}1{}0", " ".repeat(28), " ".repeat(10), " ".repeat(12))
}

/// The other user's part of
/// [`names_never_shows_another_users_name_as_a_row_of_its_own`]:
/// registers [`forged_row`] with the name server at `path` and keeps it
/// until its standard input closes.
fn forge_a_row(path: &str) {
    let (_rx, tx) = ferry::port().unwrap();
    ferry::Bootstrap::connect_to(Path::new(path)).unwrap().register(&forged_row(), &tx).unwrap();
    println!("registered");
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
}

/// `ferry names` run by root lists every user's names, whose users choose
/// them. A name may hold spaces, and one laid out as the listing's
/// columns (`files`, then `system` under UID, a pid and a queue depth)
/// showed another user's (uid nobody's) registration as a row of its own:
/// the system's `files`, registered by pid 1. A name of anything but
/// visible ASCII is shown quoted, with those characters escaped.
#[test]
fn names_never_shows_another_users_name_as_a_row_of_its_own() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    if let Ok(path) = std::env::var("FERRY_TEST_FORGE_ROW") {
        return forge_a_row(&path);
    }
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("names_never_shows_another_users_name_as_a_row_of_its_own: skipped (needs root to play another user)");
        return;
    }
    let (dir, path, _rx) = name_server_for_everyone("names-forge", "files");
    let copy = dir.join("as-another-user");
    runnable_by_others(&std::env::current_exe().unwrap(), &copy);
    let mut other = spawn_retrying(
        Command::new(&copy)
            .args(["--exact", "names_never_shows_another_users_name_as_a_row_of_its_own", "--nocapture", "--test-threads=1"])
            .env("FERRY_TEST_FORGE_ROW", &path)
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut lines = BufReader::new(other.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("registered"))), "the other user did not register its name");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry")).args(["names", "--socket"]).arg(&path).output().unwrap();
    drop(other.stdin.take());
    let _ = other.kill();
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("ferry names:\n{text}");
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<&str> = text.lines().filter(|l| l.split_whitespace().take(2).eq(["files", "system"])).collect();
    assert_eq!(rows.len(), 1, "ferry names shows the system's files more than once:\n{text}");
    assert!(rows[0].split_whitespace().nth(2) == Some(&std::process::id().to_string()), "{text}");
}

/// A program run by root that starts the name server on demand never
/// runs another user's program as `ferryd`. It looked for `ferryd` beside
/// itself and one directory up, and ran whatever was there: with the
/// program in a directory of root's inside a directory every user may
/// write to (`$TMPDIR/build/prog`), uid nobody put a `ferryd` of its own one
/// directory up, and root ran it. A candidate is now run only if it and
/// its directory are the user's or root's and no one else may change
/// them.
#[test]
fn the_daemon_started_on_demand_is_never_another_users_program() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("the_daemon_started_on_demand_is_never_another_users_program: skipped (needs root to play another user)");
        return;
    }
    let base = std::env::temp_dir().join(format!("ferry-autostart-squat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (shared, runtime) = (base.join("tmp"), base.join("runtime"));
    let build = shared.join("build");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let program = build.join("ferry");
    runnable_by_others(Path::new(env!("CARGO_BIN_EXE_ferry")), &program);
    // The other user, a real process of uid nobody, puts its `ferryd` one
    // directory up from root's program; then, in its place, a link of its
    // own to a program of root's (one that only says it ran, standing for
    // any program on the system).
    let marker = shared.join("ran-as");
    let script = |to: &Path| format!("printf '#!/bin/sh\\nid -u > {}\\nexit 1\\n' > {1} && chmod 755 {1}", marker.display(), to.display());
    let roots = base.join("roots-program");
    assert!(Command::new("sh").args(["-c", &script(&roots)]).status().unwrap().success());
    let plants = [
        ("its own program", script(&shared.join("ferryd"))),
        ("a link to a program of root's", format!("rm -f {0} && ln -s {1} {0}", shared.join("ferryd").display(), roots.display())),
    ];
    for (what, plant) in plants {
        let planted = Command::new("sh").args(["-c", &plant]).uid(65534).gid(65534).current_dir("/").status().unwrap();
        assert!(planted.success(), "the other user could not plant {what}");
        let out = Command::new(&program)
            .args(["demo", "--role", "server"])
            .env_remove("FERRY_BOOTSTRAP")
            .env_remove("FERRY_DAEMON")
            .env_remove("FERRY_NO_AUTOSTART")
            .env_remove("FERRY_NO_EMBED")
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let ran = std::fs::read_to_string(&marker).ok();
        println!("{what} as ferryd ran as uid: {ran:?}; the program said: {}", String::from_utf8_lossy(&out.stderr).trim());
        assert_eq!(ran, None, "root ran {what}, planted by another user, as ferryd");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Puts program `from` at `to`, in a directory another user may enter,
/// where that user may run it: the build directory may be beneath
/// directories it cannot enter. A hard link where it can be (no bytes
/// written), else a copy.
fn runnable_by_others(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Spawns `cmd`, again while the kernel says its program is busy (a copy
/// just written, whose descriptor a child that another test forked
/// meanwhile still held): at most 100 tries, 10 ms apart.
fn spawn_retrying(cmd: &mut Command) -> std::process::Child {
    for _ in 0..100 {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => std::thread::sleep(std::time::Duration::from_millis(10)),
            r => return r.expect("spawn a program as another user"),
        }
    }
    panic!("the program stayed busy for a second")
}
