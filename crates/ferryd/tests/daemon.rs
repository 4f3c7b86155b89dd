//! `ferryd` as a user runs it: a separate daemon process serving the name
//! service and, with `--files`, the file server under a system name.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &std::path::Path, files: &std::path::Path) -> (Daemon, ferry::Bootstrap) {
    let sock = dir.join("bootstrap");
    let child = Command::new(env!("CARGO_BIN_EXE_ferryd"))
        .args(["--socket", sock.to_str().unwrap(), "--files", files.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .expect("start ferryd");
    let daemon = Daemon(child);
    for _ in 0..1000 {
        if let Ok(bs) = ferry::Bootstrap::connect_to(&sock) {
            return (daemon, bs);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("ferryd never listened at {}", sock.display());
}

#[test]
fn file_server_hands_out_files_by_value() {
    let dir = std::env::temp_dir().join(format!("ferryd-test-{}", std::process::id()));
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let content: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(files.join("data.bin"), &content).unwrap();
    let (_daemon, mut bs) = start(&dir, &files);
    // The file server is a system name: visible although we did not register it.
    let right = bs.lookup("files").expect("files is registered");
    assert!(bs.list().unwrap().iter().any(|e| e.name == "files" && e.uid == ferry::nameserver::SYSTEM_UID));
    let client = ferry::fileserver::FileClient::new(right);
    let mut old = client.open("data.bin").expect("open data.bin");
    // Write back through the server before touching a page of the first
    // snapshot: it still reads the old contents (a value, not a window).
    client.write("data.bin", b"changed").expect("write back");
    assert_eq!(old.as_slice(), &content[..]);
    assert_eq!(client.open("data.bin").unwrap().as_slice(), b"changed");
    assert_eq!(std::fs::read(files.join("data.bin")).unwrap(), b"changed");
    // Our writes to a snapshot stay private.
    old.as_mut_slice()[0] ^= 0xff;
    assert_eq!(&old.as_slice()[1..], &content[1..]);
    assert_eq!(client.open("data.bin").unwrap().as_slice(), b"changed");
    assert!(client.open("../outside").is_err(), "a name leading outside the served directory is refused");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_idle_daemon_exits_and_removes_its_socket_once_nothing_is_held() {
    let dir = std::env::temp_dir().join(format!("ferryd-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("bootstrap");
    let mut daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_ferryd"))
            .args(["--socket", sock.to_str().unwrap(), "--idle-exit", "1"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ferryd"),
    );
    let mut bs = None;
    for _ in 0..1000 {
        if let Ok(b) = ferry::Bootstrap::connect_to(&sock) {
            bs = Some(b);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut bs = bs.expect("ferryd never listened");
    // A registered name keeps the daemon, after its client has gone.
    let (rx, tx) = ferry::port().unwrap();
    bs.register("kept", &tx).unwrap();
    drop((bs, tx));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(daemon.0.try_wait().unwrap().is_none(), "ferryd exited while a name was registered");
    // So does a connection with no name.
    let mut watcher = ferry::Bootstrap::connect_to(&sock).unwrap();
    // The name goes with its port.
    drop(rx);
    for _ in 0..400 {
        if watcher.lookup("kept").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(watcher.lookup("kept").is_err(), "the name of a dead port stayed");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(daemon.0.try_wait().unwrap().is_none(), "ferryd exited while a client was connected");
    // Nothing held: it goes, and takes its socket with it.
    drop(watcher);
    let mut status = None;
    for _ in 0..1000 {
        status = daemon.0.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = status.expect("an idle ferryd did not exit within ten seconds");
    assert!(status.success(), "ferryd exited with {status}");
    assert!(!sock.exists(), "the idle daemon left its socket behind");
    let mut log = String::new();
    std::io::Read::read_to_string(daemon.0.stderr.as_mut().unwrap(), &mut log).unwrap();
    assert!(log.contains("no connection and no name"), "{log}");
    // The next server binds the same path.
    drop(ferry::NameServer::bind(&sock).expect("bind after the idle daemon left"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferryd --detach` run by a caller that captures its output (a script's
/// `$(…)`, Python's `subprocess.run(capture_output=True)`) returns as soon
/// as the daemon serves: what the daemon says while starting reaches the
/// caller, and from then on it logs to a file of mode 0600 beside its
/// socket, holding none of the caller's pipes (the caller waited for as
/// long as the daemon lived before). A daemon that cannot start says why
/// through the same pipe, and the caller hears it.
#[test]
fn detach_returns_to_a_caller_capturing_its_output_and_logs_to_a_file() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

    let dir = fresh_dir("ferryd-detach");
    let sock = dir.join("bootstrap");
    // Output captured through pipes, read to their end as `$(…)` does; the
    // reading happens on threads so a hang fails the test instead of
    // blocking it.
    let run = |extra: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferryd"))
            .args(["--socket", sock.to_str().unwrap(), "--idle-exit", "60", "--detach"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ferryd --detach");
        let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut o, mut e) = (String::new(), String::new());
            let _ = out.read_to_string(&mut o);
            let _ = err.read_to_string(&mut e);
            let _ = tx.send((o, e));
        });
        let said = rx.recv_timeout(Duration::from_secs(10)).expect("the caller's pipes stayed open: ferryd --detach kept them");
        (child.wait().unwrap(), said)
    };
    let (status, (out, err)) = run(&[]);
    assert!(status.success(), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("serving") && err.contains("ferryd.log"), "{err}");
    let first = err;
    let log = dir.join("ferryd.log");
    assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, 0o600);
    // It serves, and says so in its log, not to the caller.
    let bs = ferry::Bootstrap::connect_to(&sock).expect("the detached daemon serves");
    let mut logged = String::new();
    for _ in 0..400 {
        logged = std::fs::read_to_string(&log).unwrap();
        if logged.contains("client connected") {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(logged.contains("client connected"), "{logged}");
    // A second one cannot listen there: it says why, to the caller.
    let (status, (_, err)) = run(&[]);
    assert!(!status.success());
    assert!(err.contains("already listens"), "{err}");
    drop(bs);
    stop_detached(&first);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A detached daemon's log stays bounded however many clients connect
/// (each connection is a line): past `--log-limit` it is renamed to
/// `ferryd.log.1` and begun anew, so a user connecting in a loop cannot
/// fill the file system the log is on (`/run`, in memory, for a system
/// daemon). Here every connection is logged (`--log-lines`, past this
/// user's budget of lines otherwise).
#[test]
fn a_detached_daemons_log_is_begun_anew_past_its_limit() {
    let dir = fresh_dir("ferryd-logturn");
    let sock = dir.join("bootstrap");
    let out = Command::new(env!("CARGO_BIN_EXE_ferryd"))
        .args(["--socket", sock.to_str().unwrap(), "--idle-exit", "60", "--detach", "--log-limit", "4000", "--log-lines", "1000000"])
        .stdin(Stdio::null())
        .output()
        .expect("start ferryd --detach");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let (log, old) = (dir.join("ferryd.log"), dir.join("ferryd.log.1"));
    // Three rounds of 200 connections, each a line or more, with time
    // between them for the daemon to look at the log's size.
    for _ in 0..3 {
        for _ in 0..200 {
            drop(ferry::Bootstrap::connect_to(&sock).expect("the daemon serves"));
        }
        std::thread::sleep(Duration::from_millis(2500));
    }
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    assert!(size(&old) > 4000, "the log was not begun anew: {} and {} bytes", size(&log), size(&old));
    // What the daemon writes in the second between two looks, at most
    // 200 connections' worth, stays well under the limit here.
    assert!(size(&log) < 4000 + 200 * 100 && size(&old) < 4000 + 200 * 100, "{} and {} bytes", size(&log), size(&old));
    assert!(std::fs::read_to_string(&log).unwrap().contains("ferryd:"), "the new log is written to");
    stop_detached(&said);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferryd --detach --log FILE` run by root never logs into a file of
/// another user's: uid nobody made FILE first, in a directory every user
/// may write to, readable by it, and the daemon appended to it every
/// user's connections and registrations (names are each user's own to
/// list). A log file that is not the daemon's user's is refused, and so is
/// the daemon's start.
#[test]
fn a_detached_daemon_never_logs_into_another_users_file() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("a_detached_daemon_never_logs_into_another_users_file: skipped (needs root to play another user)");
        return;
    }
    let dir = fresh_dir("ferryd-squatted-log");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (sockets, shared) = (dir.join("run"), dir.join("tmp"));
    std::fs::create_dir_all(&sockets).unwrap();
    std::fs::set_permissions(&sockets, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let log = shared.join("ferryd.log");
    // The other user, a real process of uid nobody, makes the log first.
    let made = Command::new("sh")
        .args(["-c", &format!("touch {0} && chmod 666 {0}", log.display())])
        .uid(65534)
        .gid(65534)
        .current_dir("/")
        .status()
        .unwrap();
    assert!(made.success(), "the other user could not make the file");
    let sock = sockets.join("bootstrap");
    let out = Command::new(env!("CARGO_BIN_EXE_ferryd"))
        .args(["--socket", sock.to_str().unwrap(), "--idle-exit", "60", "--detach", "--log", log.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .expect("start ferryd --detach");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        let (_rx, tx) = ferry::port().unwrap();
        ferry::Bootstrap::connect_to(&sock).expect("the daemon serves").register("roots-own-service", &tx).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        stop_detached(&said);
    }
    let theirs = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    println!("ferryd --detach: {}; nobody's file now holds {} bytes", out.status, theirs.len());
    assert!(!theirs.contains("ferryd:"), "the daemon logged into another user's file:\n{theirs}");
    assert!(!out.status.success() && said.contains("owned by uid 65534"), "{said}");
}

/// An empty directory of this test run's own, named after `tag`.
/// `ferryd --files` of a directory that is not there says so and exits at
/// once: it said "memory-object system call failed", as if the kernel had
/// refused the file server, not the path.
#[test]
fn files_of_a_missing_directory_are_refused_naming_the_directory() {
    let dir = fresh_dir("ferryd-files-missing");
    let missing = dir.join("no-such-dir");
    let (status, err) = ferryd_exit(&["--socket", dir.join("bootstrap").to_str().unwrap(), "--files", missing.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.expect("ferryd --files of a missing directory did not exit within ten seconds");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot serve files from {}: No such file or directory", missing.display())), "{err}");
    assert!(!err.contains("memory-object"), "{err}");
}

/// Runs `ferryd` with `args` and waits up to ten seconds for it to exit
/// (killing it after that): its status, if it exited, and what it wrote on
/// standard error.
fn ferryd_exit(args: &[&str]) -> (Option<std::process::ExitStatus>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferryd"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferryd");
    let mut status = None;
    for _ in 0..1000 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status, err)
}

/// `ferryd --socket` in a directory others may write to (the shared
/// temporary directory itself, say) is refused, and the refusal says where to put the socket instead:
/// it said only that the directory's mode lets other users write to it.
#[test]
fn a_socket_in_a_shared_directory_is_refused_saying_where_to_put_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh_dir("ferryd-shared-dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferryd"))
        .args(["--socket", dir.join("bootstrap").to_str().unwrap(), "--idle-exit", "5"])
        .stdin(Stdio::null())
        .output()
        .expect("run ferryd");
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("lets other users write to it"), "{err}");
    assert!(err.contains(&format!("{}/", dir.display())) && err.contains("made mode 0700"), "{err}");
}

/// `ferryd --socket FILE` where `FILE` is a regular file (a mistyped
/// path) is refused and leaves the file alone: only a socket nobody
/// listens at is replaced. The daemon deleted the file, listened in its
/// place, and removed its socket on exit, so the file's bytes were gone.
#[test]
fn a_socket_path_that_is_a_regular_file_is_refused_and_kept() {
    let dir = fresh_dir("ferryd-socket-file");
    let file = dir.join("notes.txt");
    std::fs::write(&file, b"keep me\n").unwrap();
    let (status, err) = ferryd_exit(&["--socket", file.to_str().unwrap(), "--idle-exit", "1"]);
    let kept = std::fs::read(&file).ok();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(kept.as_deref(), Some(&b"keep me\n"[..]), "ferryd replaced the file: {err}");
    let status = status.expect("ferryd did not exit within ten seconds");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("is not a socket"), "{err}");
}

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Stops the daemon that `ferryd --detach` said it started (`said` is what
/// it wrote, `… (pid N) …`) and waits until it is gone.
fn stop_detached(said: &str) {
    let pid: i32 = said.split("(pid ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse().ok()).expect("the pid in what it said");
    let pid = rustix::process::Pid::from_raw(pid).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    for _ in 0..1000 {
        if rustix::process::test_kill_process(pid).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the detached daemon did not stop");
}
