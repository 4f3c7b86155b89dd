//! The name service between real processes: registration, lookup, death of
//! registered ports, refusal of live names, and per-user scoping.

mod common;

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use ferry::bootstrap::ServicePort;
use ferry::{Message, NameError, Timeout};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn register_lookup_and_death_across_processes() {
    watchdog("names_basic", LIMIT, || {
        let path = private_bootstrap("names");
        let mut peer = spawn_peer(&path, "register", &["svc"]);
        let mut bs = names(&path);
        let to_peer = lookup_retry(&mut bs, "svc");
        // A live name cannot be taken over, by another process or by us.
        let second = finish(spawn_peer(&path, "register", &["svc"]));
        assert_eq!(second.trim(), "taken");
        let (_rx, tx) = ferry::port().unwrap();
        assert!(matches!(bs.register("svc", &tx), Err(NameError::Taken)));
        let listed = bs.list().unwrap();
        let entry = listed.iter().find(|e| e.name == "svc").expect("listed");
        assert_eq!(entry.owner_pid as u32, peer.id());
        // The registration disappears when its port dies.
        let _ = peer.kill();
        let _ = peer.wait();
        assert!(to_peer.wait_dead(Timeout::Infinite));
        let mut gone = false;
        for _ in 0..400 {
            if matches!(bs.lookup("svc"), Err(NameError::NotFound)) {
                gone = true;
                break;
            }
            nap();
        }
        assert!(gone, "registration of a dead port was not dropped");
        // And the name is free again.
        bs.register("svc", &tx).unwrap();
        assert_eq!(finish(spawn_peer(&path, "lookup", &["svc"])).trim(), "found");
        bs.unregister("svc").unwrap();
        assert_eq!(finish(spawn_peer(&path, "lookup", &["svc"])).trim(), "notfound");
    });
}

#[test]
fn bad_names_are_refused() {
    let path = private_bootstrap("badnames");
    let mut bs = names(&path);
    let (_rx, tx) = ferry::port().unwrap();
    assert!(matches!(bs.register("", &tx), Err(NameError::Invalid)));
    assert!(matches!(bs.register("a\nb", &tx), Err(NameError::Invalid)));
    assert!(matches!(bs.register(&"x".repeat(ferry::bootstrap::MAX_NAME + 1), &tx), Err(NameError::Invalid)));
    assert!(matches!(bs.lookup("nobody"), Err(NameError::NotFound)));
}

#[test]
fn names_are_scoped_per_user() {
    if !rustix::process::getuid().is_root() {
        eprintln!("names_are_scoped_per_user: needs root to run a peer as another user; skipped");
        return;
    }
    watchdog("names_scoped", LIMIT, || {
        let path = private_bootstrap("scoped");
        // Let another user reach the socket.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut bs = names(&path);
        let (mut rx, tx) = ferry::port().unwrap();
        bs.register("shared-name", &tx).unwrap();
        let run_as_nobody = |role: &str| {
            let out = Command::new(common::peer_for_other_users())
                .args([role, "shared-name"])
                .env("FERRY_BOOTSTRAP", &path)
                .env("FERRY_NO_EMBED", "1")
                .uid(65534)
                .gid(65534)
                .stdout(Stdio::piped())
                .output()
                .unwrap();
            assert!(out.status.success(), "{role} as nobody failed");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        // Another user does not see root's name ...
        assert_eq!(run_as_nobody("lookup"), "notfound");
        // ... and registering the same name creates its own, separate entry.
        let mut nobody = spawn_peer_as_nobody(&path);
        let listed = loop {
            let l = bs.list().unwrap();
            if l.iter().filter(|e| e.name == "shared-name").count() == 2 {
                break l;
            }
            nap();
        };
        let uids: Vec<u32> = listed.iter().filter(|e| e.name == "shared-name").map(|e| e.uid).collect();
        assert!(uids.contains(&0) && uids.contains(&65534), "{uids:?}");
        // Root's lookup still finds root's own port.
        let mine = bs.lookup("shared-name").unwrap();
        mine.send(Message::new(5), Timeout::Infinite).unwrap();
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 5);
        let _ = nobody.kill();
        let _ = nobody.wait();
    });
}

fn spawn_peer_as_nobody(path: &std::path::Path) -> std::process::Child {
    Command::new(common::peer_for_other_users())
        .args(["register", "shared-name"])
        .env("FERRY_BOOTSTRAP", path)
        .env("FERRY_NO_EMBED", "1")
        .uid(65534)
        .gid(65534)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Hardening: who the server is, budgets, descriptors, big listings, and a
// name service that outlives its clients.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Child;

/// The `ferryd` binary cargo built beside this test's directory. Cargo
/// builds it for `cargo test --workspace` but not for this package alone,
/// so a missing or stale one is an error that says what to run.
fn ferryd_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("ferryd");
    let built = std::fs::metadata(&bin).and_then(|m| m.modified());
    let Ok(built) = built else { panic!("ferryd is not built at {}: run `cargo build -p ferryd`", bin.display()) };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("crates");
    let newest_source = ["ferryd/src", "ferry/src", "ferry/src/sys", "ferry/src/idl"]
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d)).ok())
        .flatten()
        .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
        .max();
    assert!(newest_source.is_none_or(|s| s <= built), "ferryd at {} is older than its sources: run `cargo build -p ferryd`", bin.display());
    bin
}

/// A fresh directory for one test, that every user may enter but only
/// this one may write to.
fn test_dir(test: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::temp_path(format!("ferry-names-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Has the command's process start with umask `mask`.
fn with_umask(cmd: &mut Command, mask: u32) {
    // SAFETY: the closure runs in the forked child before exec and makes
    // only the umask system call, which is async-signal-safe; it allocates
    // nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::umask(rustix::fs::Mode::from_raw_mode(mask));
            Ok(())
        });
    }
}

/// Has the command's process start with sockets of the netlink family
/// refused to it (`socket(AF_NETLINK, ..)` fails with `EPERM`, through a
/// seccomp filter): it has then no way to look through the system's
/// sockets (`sock_diag`), and can ask the kernel only about sockets it
/// holds.
fn without_netlink(cmd: &mut Command) {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    const LD: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let op = |code, jf, k| libc::sock_filter { code, jt: 0, jf, k };
    // struct seccomp_data: nr at 0, arch at 4, the first argument at 16.
    let filter = [
        op(LD, 0, 4),
        op(JEQ, 5, ARCH),
        op(LD, 0, 0),
        op(JEQ, 3, libc::SYS_socket as u32),
        op(LD, 0, 16),
        op(JEQ, 1, libc::AF_NETLINK as u32),
        op(RET, 0, RET_ERRNO | libc::EPERM as u32),
        op(RET, 0, RET_ALLOW),
    ];
    // SAFETY: the closure runs in the forked child before exec and makes
    // only the prctl and seccomp system calls, which are async-signal-safe;
    // the filter it points the kernel at lives in the closure, and nothing
    // is allocated or locked.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || libc::syscall(libc::SYS_seccomp, 1, 0, &prog as *const libc::sock_fprog) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The processor time process `pid` has used, user and system, in
/// milliseconds (for the record: tests never assert times).
fn cpu_ms(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = after.split(' ').skip(11).take(2).map(|v| v.parse().unwrap()).collect();
    (f[0] + f[1]) * 1000 / rustix::param::clock_ticks_per_second()
}

/// A `ferryd` process run by this test, killed when dropped.
struct Daemon {
    child: Child,
    dir: PathBuf,
    path: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Starts `ferryd --socket DIR/run/bootstrap ARGS`, with its open-file
    /// limit (soft and hard) set to `nofile` if given, and waits until it
    /// answers.
    fn start(test: &str, args: &[&str], nofile: Option<u64>) -> Daemon {
        Daemon::start_with(test, args, nofile, |_| {})
    }

    /// As [`Daemon::start`], with the daemon's command given to `prepare`
    /// first (see [`with_umask`], [`without_netlink`]).
    fn start_with(test: &str, args: &[&str], nofile: Option<u64>, prepare: impl FnOnce(&mut Command)) -> Daemon {
        let dir = test_dir(test);
        let path = dir.join("run").join("bootstrap");
        let log = dir.join("ferryd.log");
        let mut cmd = Command::new(ferryd_bin());
        cmd.arg("--socket").arg(&path).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs in the forked child before exec and
            // makes only the setrlimit system call, which is
            // async-signal-safe; it allocates nothing and takes no lock.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = rustix::process::Rlimit { current: Some(n), maximum: Some(n) };
                    rustix::process::setrlimit(rustix::process::Resource::Nofile, lim).map_err(std::io::Error::from)
                });
            }
        }
        prepare(&mut cmd);
        let mut child = cmd.spawn().expect("start ferryd");
        for _ in 0..2000 {
            if ferry::Bootstrap::connect_to(&path).is_ok() {
                return Daemon { child, dir, path, log };
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("ferryd exited with {st}: {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            nap();
        }
        let _ = child.kill();
        panic!("ferryd never answered at {}: {}", path.display(), std::fs::read_to_string(&log).unwrap_or_default());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A peer whose output is read line by line, killed when dropped.
struct Peer {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Peer {
    fn new(mut child: Child) -> Peer {
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        Peer { child, out }
    }

    /// Reads lines until one is `ready` and returns those before it.
    fn until_ready(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            if self.out.read_line(&mut l).unwrap() == 0 {
                panic!("peer ended before it was ready; it said {lines:?}");
            }
            if l.trim() == "ready" {
                return lines;
            }
            lines.push(l.trim().to_owned());
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Another unprivileged uid, for tests that need two users besides root.
const OTHER: u32 = 65533;

#[test]
fn impostor_server_and_directory_are_refused() {
    if !can_play_other_user("impostor_server_and_directory_are_refused") {
        return;
    }
    watchdog("impostor", LIMIT, || {
        use std::os::unix::fs::PermissionsExt;
        // A shared temporary directory, like /tmp.
        let tmp = test_dir("impostor");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        // Another user gets there first and listens where root's default
        // name server would be.
        let mine = tmp.join("ferry-0");
        let mut impostor = Peer::new(spawn_peer_as(NOBODY, Path::new("/nonexistent"), "impostor-listen", &[mine.to_str().unwrap()]));
        impostor.until_ready();
        let sock = mine.join("bootstrap");
        // Connecting straight to it: the server's credentials give it away.
        match ferry::Bootstrap::connect_to(&sock) {
            Err(NameError::Impostor { path, uid }) => {
                assert_eq!((path.as_path(), uid), (sock.as_path(), NOBODY));
            }
            other => panic!("an impostor's socket was trusted: {other:?}"),
        }
        // A root program using the default path refuses the directory and
        // hands nothing over.
        let out = Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
            .arg("default-connect")
            .env("TMPDIR", &tmp)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("FERRY_BOOTSTRAP")
            .env("FERRY_NO_AUTOSTART", "1")
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{said}");
        assert!(said.contains("refused") && said.contains("owned by uid 65534"), "{said}");
        let _ = std::fs::remove_dir_all(&tmp);
    });
}

#[test]
fn bind_refuses_directories_others_control() {
    use std::os::unix::fs::PermissionsExt;
    let dir = test_dir("binddirs");
    // Open to everyone's writes: refused.
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = ferry::NameServer::bind(&open.join("bootstrap")).expect_err("bound in a world-writable directory");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    // A symbolic link to a directory: refused.
    let real = dir.join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("link")).unwrap();
    let e = ferry::NameServer::bind(&dir.join("link").join("bootstrap")).expect_err("bound through a symbolic link");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    // Another user's directory: refused.
    if can_play_other_user("bind_refuses_directories_others_control (another user's directory)") {
        let theirs = dir.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
        let e = ferry::NameServer::bind(&theirs.join("bootstrap")).expect_err("bound in another user's directory");
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }
    // This user's own, closed directory is fine.
    ferry::NameServer::bind(&real.join("bootstrap")).expect("bind in a private directory");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Root offers a port to every user of a system name server as a system
/// name (`register_system`, as `ferry-netd --system-names` does with its
/// imports): another user finds it and sends to it, cannot register a
/// system name itself (`Denied`), and its own registration of the same
/// name comes first in its own lookups only.
#[test]
fn root_registers_system_names_that_every_user_finds() {
    if !can_play_other_user("root_registers_system_names_that_every_user_finds") {
        return;
    }
    watchdog("system_names", LIMIT, || {
        let d = Daemon::start("sysnames", &["--system"], None);
        let mut bs = names(&d.path);
        let (mut rx, tx) = ferry::port().unwrap();
        bs.register_system("shared-svc", &tx).unwrap();
        let (_rx2, tx2) = ferry::port().unwrap();
        assert!(matches!(bs.register_system("shared-svc", &tx2), Err(NameError::Taken)));
        let mut other = Peer::new(spawn_peer_as(NOBODY, &d.path, "system-names", &["shared-svc"]));
        let said = other.until_ready();
        assert_eq!(rx.recv(Timeout::After(Duration::from_secs(10))).unwrap().op(), 21, "the other user did not reach the system name");
        assert_eq!(said, ["register_system: Denied", "register_system_service: Denied", "own name first: true"], "{said:?}");
        // Root's lookup still finds the system name, and the listing says
        // whose each entry is.
        bs.lookup("shared-svc").unwrap().send(Message::new(23), Timeout::Infinite).unwrap();
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 23);
        let list = bs.list().unwrap();
        assert!(list.iter().any(|e| e.name == "shared-svc" && e.uid == ferry::nameserver::SYSTEM_UID), "{list:?}");
        assert!(!list.iter().any(|e| e.name == "from-another-user"), "{list:?}");
        // The system name goes with its port.
        drop((rx, tx));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while bs.lookup("shared-svc").is_ok() {
            assert!(std::time::Instant::now() < deadline, "the system name outlived its port");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
}

/// A request acts as the user who opened the connection it came on, not
/// as whoever sent its datagram. Uid nobody opens a connection to the name
/// server and hands it, as the reply right of its requests, to a root
/// server that answers every request (op + 1, body reversed): root's
/// answers land on nobody's connection as a `lookup` and an `unregister`
/// of root's names. They are refused (`Denied`), answered to nobody; root's
/// names and ports are untouched.
#[test]
fn a_request_on_a_users_connection_never_acts_as_the_root_server_that_sent_it() {
    if !can_play_other_user("a_request_on_a_users_connection_never_acts_as_the_root_server_that_sent_it") {
        return;
    }
    watchdog("names_deputy", LIMIT, || {
        let d = Daemon::start("deputy", &["--system"], None);
        let mut bs = names(&d.path);
        let (mut secret_rx, secret_tx) = ferry::port().unwrap();
        bs.register("root-secret", &secret_tx).unwrap();
        let (_keep_rx, keep_tx) = ferry::port().unwrap();
        bs.register("root-keep", &keep_tx).unwrap();
        let _server = Peer::new(spawn_peer(&d.path, "server", &["echo-root"]));
        let echo = lookup_retry(&mut bs, "echo-root");
        bs.register_system("echo", &echo).unwrap();
        let mut nobody = Peer::new(spawn_peer_as(NOBODY, &d.path, "deputy", &["echo", "root-secret", "root-keep"]));
        let said = nobody.until_ready();
        let got = secret_rx.recv(Timeout::Zero);
        assert!(got.is_err(), "uid {NOBODY} reached root's port, sent by {:?}; it said {said:?}", got.ok().and_then(|m| m.sender()));
        assert!(bs.lookup("root-keep").is_ok(), "uid {NOBODY} removed root's name; it said {said:?}");
        assert_eq!(said, ["lookup: Denied", "unregister: Denied"], "{said:?}");
    });
}

/// A request on a user's own port of `ferryd`'s file server acts as that
/// user, whoever sent it. Uid nobody hands its port of the file server, as
/// the reply right of a request, to a root server that answers every
/// request (op + 1, body reversed): root's answer lands on nobody's port as
/// a write-back of a file only root may write. It is refused; the file
/// keeps its contents.
#[test]
fn a_request_on_a_users_file_server_port_never_acts_as_the_root_server_that_sent_it() {
    if !can_play_other_user("a_request_on_a_users_file_server_port_never_acts_as_the_root_server_that_sent_it") {
        return;
    }
    watchdog("files_deputy", LIMIT, || {
        use std::os::unix::fs::PermissionsExt;
        let served = test_dir("filesdeputy-root");
        std::fs::write(served.join("secret"), b"root only").unwrap();
        std::fs::set_permissions(served.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let d = Daemon::start("filesdeputy", &["--system", "--files", served.to_str().unwrap()], None);
        let mut bs = names(&d.path);
        let _server = Peer::new(spawn_peer(&d.path, "server", &["echo-root"]));
        let echo = lookup_retry(&mut bs, "echo-root");
        bs.register_system("echo", &echo).unwrap();
        let mut nobody = Peer::new(spawn_peer_as(NOBODY, &d.path, "files-deputy", &["echo", "secret"]));
        let said = nobody.until_ready();
        let now = std::fs::read(served.join("secret")).unwrap();
        assert_eq!(String::from_utf8_lossy(&now), "root only", "uid {NOBODY} wrote root's file; it said {said:?}");
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("open: ") && !said[0].ends_with(" bytes"), "uid {NOBODY} opened root's file: {said:?}");
    });
}

/// Root offers a system service (`register_system_service`, as a root
/// `ferry-netd --system-names` does with its imports): each lookup gets a
/// port of its own, whose receive right the name server sends to the
/// service's port with the asker's uid, so one user's right is never
/// another's. The service's own port is never handed out.
#[test]
fn system_services_give_each_lookup_a_port_of_its_own() {
    if !can_play_other_user("system_services_give_each_lookup_a_port_of_its_own") {
        return;
    }
    watchdog("system_services", LIMIT, || {
        let d = Daemon::start("sysservices", &["--system"], None);
        let mut bs = names(&d.path);
        let (mut main, tx) = ferry::port().unwrap();
        bs.register_system_service("each-svc", &tx).unwrap();
        let wait = Timeout::After(Duration::from_secs(10));
        // Takes the port the name server made for one lookup: the asker's
        // uid, the receive right, and a send right to the same port.
        let take = |main: &mut ferry::ReceiveRight, want_uid: u32| {
            let mut m = main.recv(wait).unwrap();
            assert_eq!(m.op(), ferry::bootstrap::SERVICE_PORT);
            assert_eq!(m.sender().map(|c| c.uid), Some(0), "not sent by the name server (root)");
            assert_eq!(m.body(), want_uid.to_le_bytes(), "not made for uid {want_uid}");
            assert!(matches!(m.items(), [ferry::Item::Receive(_), ferry::Item::Send(_)]), "a service port carries its receive right and a send right to it");
            let ServicePort { uid, port } = ServicePort::take(&mut m).expect("the name server's message is a service port");
            assert_eq!(uid, want_uid);
            assert!(m.items().is_empty());
            port
        };
        // The same message from anyone but root is not a service port, and
        // taking it leaves it whole.
        let (forged_rx, forged_tx) = ferry::port().unwrap();
        let as_nobody = ferry::Credentials { pid: std::process::id() as i32, uid: NOBODY, gid: NOBODY };
        let forged = Message::new(ferry::bootstrap::SERVICE_PORT).with_body(0u32.to_le_bytes().to_vec()).with_item(forged_rx).with_item(forged_tx);
        ferry::sending_as(as_nobody, || tx.send(forged, wait)).unwrap();
        drop(tx);
        let mut m = main.recv(wait).unwrap();
        assert_eq!(m.sender().map(|c| c.uid), Some(NOBODY));
        assert!(ServicePort::take(&mut m).is_none(), "a service port taken from uid {NOBODY}");
        assert_eq!(m.items().len(), 2);
        drop(m);
        let mut other = Peer::new(spawn_peer_as(NOBODY, &d.path, "system-names", &["each-svc"]));
        let mut theirs = take(&mut main, NOBODY);
        assert_eq!(theirs.recv(wait).unwrap().op(), 21, "the other user's message came on another port");
        let said = other.until_ready();
        assert_eq!(said, ["register_system: Denied", "register_system_service: Denied", "own name first: true"], "{said:?}");
        // Root's lookups get ports of their own too, each a new one.
        let (r1, r2) = (bs.lookup("each-svc").unwrap(), bs.lookup("each-svc").unwrap());
        let (mut p1, mut p2) = (take(&mut main, 0), take(&mut main, 0));
        r1.send(Message::new(1), wait).unwrap();
        r2.send(Message::new(2), wait).unwrap();
        assert_eq!((p1.recv(wait).unwrap().op(), p2.recv(wait).unwrap().op()), (1, 2));
        // A port whose user let go tells the service so (no senders).
        drop(r1);
        assert!(matches!(p1.recv(wait), Err(ferry::RecvError::NoSenders)));
        // The service name goes with its port.
        drop(main);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while bs.lookup("each-svc").is_ok() {
            assert!(std::time::Instant::now() < deadline, "the service's name outlived its port");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
}

#[test]
fn names_per_user_are_budgeted() {
    if !can_play_other_user("names_per_user_are_budgeted") {
        return;
    }
    watchdog("names_budget", LIMIT, || {
        let d = Daemon::start("namesbudget", &["--system", "--max-names", "16"], None);
        let mut hog = Peer::new(spawn_peer_as(NOBODY, &d.path, "fill-names", &["hog", "1000"]));
        let said = hog.until_ready();
        assert_eq!(said[0], "registered 16", "{said:?}");
        assert_eq!(said[1], "stopped: LimitReached { what: Names, limit: 16 }", "{said:?}");
        // Everyone else is served meanwhile.
        let mut other = Peer::new(spawn_peer_as(OTHER, &d.path, "fill-names", &["other", "3"]));
        assert_eq!(other.until_ready()[0], "registered 3");
        let mut bs = names(&d.path);
        let (mut rx, tx) = ferry::port().unwrap();
        bs.register("root-svc", &tx).unwrap();
        bs.lookup("root-svc").unwrap().send(Message::new(8), Timeout::Infinite).unwrap();
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 8);
        assert_eq!(bs.list().unwrap().iter().filter(|e| e.uid == NOBODY).count(), 16);
    });
}

/// Names whose ports are parked in flight (each receiving socket sent into
/// the queue of the registered socket the name server holds, so it never
/// hangs up) are dropped all the same once their owner is gone: the
/// server holds nothing whose liveness it alone keeps.
#[test]
fn names_parked_in_flight_are_dropped_with_their_owner() {
    if !can_play_other_user("names_parked_in_flight_are_dropped_with_their_owner") {
        return;
    }
    watchdog("names_parked", LIMIT, || {
        let d = Daemon::start("namesparked", &["--system", "--max-names", "16"], None);
        let fds = |pid: u32| -> Vec<String> {
            let dir = format!("/proc/{pid}/fd");
            std::fs::read_dir(&dir).unwrap().flatten().map(|e| format!("{:?} -> {:?}", e.file_name(), std::fs::read_link(e.path()).ok())).collect()
        };
        // This test's own connection is open in both counts.
        let mut bs = names(&d.path);
        bs.list().unwrap();
        let before = fds(d.child.id());
        let mut parker = Peer::new(spawn_peer_as(NOBODY, &d.path, "park-names", &["parked", "16"]));
        let mut said = String::new();
        parker.out.read_line(&mut said).unwrap();
        assert_eq!(said.trim(), "parked 16");
        let _ = parker.child.wait();
        let mut left = usize::MAX;
        for _ in 0..2000 {
            left = bs.list().unwrap().iter().filter(|e| e.uid == NOBODY).count();
            if left == 0 {
                break;
            }
            nap();
        }
        assert_eq!(left, 0, "parked names outlived their owner: {}", d.log());
        let after = fds(d.child.id());
        assert!(after.len() <= before.len(), "the server kept descriptors: {before:#?} then {after:#?}");
        let mut again = Peer::new(spawn_peer_as(NOBODY, &d.path, "fill-names", &["again", "16"]));
        assert_eq!(again.until_ready()[0], "registered 16", "the user's budget is whole again");
    });
}

/// Every lookup of `ferryd`'s file server gets a port of its own: a user
/// who shuts down its right's socket, shrinks its buffer and makes it
/// non-blocking (what any holder of a shared socket could do to every
/// other holder) harms only itself, and the ports one user may hold are
/// budgeted and go when it does.
#[test]
fn one_users_file_server_right_is_its_own() {
    if !can_play_other_user("one_users_file_server_right_is_its_own") {
        return;
    }
    watchdog("files_own_port", LIMIT, || {
        use std::os::unix::fs::PermissionsExt;
        let served = test_dir("filesownport-root");
        std::fs::write(served.join("README"), b"shared with everyone").unwrap();
        std::fs::set_permissions(served.join("README"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let d = Daemon::start("filesownport", &["--system", "--files", served.to_str().unwrap()], None);
        let mut bs = names(&d.path);
        let before = ferry::fileserver::FileClient::new(bs.lookup("files").unwrap()).with_timeout(Timeout::After(Duration::from_secs(10)));
        let read = |fs: &ferry::fileserver::FileClient| fs.open("README").unwrap().as_slice().to_vec();
        assert_eq!(read(&before), b"shared with everyone");

        let mut saboteur = Peer::new(spawn_peer_as(NOBODY, &d.path, "files-sabotage", &[]));
        let mut said = String::new();
        saboteur.out.read_line(&mut said).unwrap();
        assert_eq!(said.trim(), "done");
        // Root's right from before, and a new one, both still serve; so
        // does another user's.
        assert_eq!(read(&before), b"shared with everyone", "{}", d.log());
        let after = ferry::fileserver::FileClient::new(bs.lookup("files").unwrap()).with_timeout(Timeout::After(Duration::from_secs(10)));
        assert_eq!(read(&after), b"shared with everyone");
        let mut other = Peer::new(spawn_peer_as(OTHER, &d.path, "files-lookups", &["3"]));
        assert_eq!(other.until_ready()[0], "looked-up 3 stopped: none");

        // One user's ports are budgeted, and go with it.
        let base = settled_fds(d.child.id());
        let mut hog = Peer::new(spawn_peer_as(NOBODY, &d.path, "files-lookups", &["1000"]));
        let said = hog.until_ready();
        let most = ferry::pager::Budgets::default().ports_per_user;
        assert_eq!(said[0], format!("looked-up {most} stopped: LimitReached {{ what: Descriptors, limit: {most} }}"), "{said:?}");
        drop(hog);
        let now = fds_back_to(d.child.id(), base);
        assert!(now <= base, "the server kept the ports of a user that is gone: {base} before, {now} after");
        assert_eq!(read(&after), b"shared with everyone");
    });
}

/// One user's ports of `ferryd`'s file server get a turn together, not
/// one each: uid nobody looks `files` up 256 times (its budget of ports)
/// and keeps every port's queue full of requests the server refuses, and
/// root's open, on a port of its own, waits for few of them. Each port had
/// a turn of 64 requests, so root's waited behind 64 requests of each of
/// nobody's ports. The requests counted are those the daemon received
/// while root's open waited for its answer.
#[test]
fn a_user_flooding_many_file_server_ports_holds_up_roots_open_by_few_requests() {
    let test = "a_user_flooding_many_file_server_ports_holds_up_roots_open_by_few_requests";
    if !can_play_other_user(test) {
        return;
    }
    watchdog(test, LIMIT, || {
        use std::os::unix::fs::PermissionsExt;
        let served = test_dir("floodports-root");
        std::fs::write(served.join("README"), b"shared with everyone").unwrap();
        std::fs::set_permissions(served.join("README"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let d = Daemon::start("floodports", &["--system", "--files", served.to_str().unwrap()], None);
        let files = ferry::fileserver::FileClient::new(names(&d.path).lookup("files").unwrap()).with_timeout(Timeout::After(Duration::from_secs(60)));
        assert_eq!(files.open("README").unwrap().as_slice(), b"shared with everyone");
        let daemon = ferry::counters::find(d.child.id() as i32).expect("the daemon's counters");
        let received = || ferry::counters::read(&daemon).unwrap().messages_received;
        let mut flood = Peer::new(spawn_peer_as(NOBODY, &d.path, "files-flood-ports", &["256"]));
        let said = flood.until_ready();
        let mut waits = Vec::new();
        for _ in 0..3 {
            let before = received();
            let got = files.open("README");
            waits.push(received() - before);
            assert_eq!(got.unwrap().as_slice(), b"shared with everyone", "{}", d.log());
        }
        drop(flood);
        println!("the other user {said:?}; requests the daemon received while each of root's opens waited: {waits:?}");
        let ports = ferry::pager::Budgets::default().ports_per_user as u64;
        assert!(said.first().is_some_and(|l| l.starts_with(&format!("filled {ports} ports"))), "{said:?}");
        // A turn of 64 requests of each of its ports is 16 384; the count
        // also takes in what the daemon served while this test's own
        // thread waited for a processor, before its request and after its
        // answer (a few hundred on a loaded machine).
        let most = waits.iter().copied().max().unwrap_or(0);
        assert!(most <= ports * 64 / 4, "root's open waited for {most} requests of another user's");
    });
}

/// Another user (nobody) that asks for its listing over and over without
/// reading the replies makes the daemon hold at most one listing's region
/// per connection: a listing longer than a message travels as a memfd,
/// which waited in the connection's queue, unread, costing the daemon
/// nothing it could see but its memory (the queue's limit counts the
/// message, not its memfd). Sixty connections asking 400 times each
/// took 370 MiB of the machine's memory that way. What is measured is the
/// daemon's own memory: it runs in a memory cgroup of its own, which is
/// charged for the memfds it fills wherever they wait, and nothing else
/// on the machine counts there.
#[test]
fn listings_a_user_never_reads_hold_little_of_the_daemons_memory() {
    let test = "listings_a_user_never_reads_hold_little_of_the_daemons_memory";
    if !can_play_other_user(test) {
        return;
    }
    let Some(cgroup) = common::MemoryCgroup::new(test) else { return };
    watchdog("unread_listings", LIMIT, || {
        let d = Daemon::start("unreadlistings", &["--system"], None);
        cgroup.enter(d.child.id());
        let before = cgroup.usage();
        let mut p = Peer::new(spawn_peer_as(NOBODY, &d.path, "unread-listings", &["60", "400"]));
        let said = p.until_ready();
        let grown = cgroup.usage().saturating_sub(before);
        println!("the other user {said:?}; the daemon's memory grew by {} KiB", grown / 1024);
        // Root is served meanwhile.
        assert!(names(&d.path).list().is_ok(), "{}", d.log());
        drop(p);
        assert!(grown < 24 << 20, "one user's unread listings held {} MiB of the daemon's memory: {said:?}", grown >> 20);
        drop(d);
    });
}

/// A user registering, as a name of its own, the right it got for `files`
/// (a port of the file server, which runs in the name server's process)
/// would make the daemon keep both a sender of that port and the port:
/// neither would ever go, and the name and the port would stay after the
/// user left. Such a registration is refused; nothing of the user's stays.
#[test]
fn a_name_never_leads_back_into_the_daemon() {
    if !can_play_other_user("a_name_never_leads_back_into_the_daemon") {
        return;
    }
    watchdog("name_leads_back", LIMIT, || {
        let served = test_dir("leadsback-root");
        let d = Daemon::start("leadsback", &["--system", "--files", served.to_str().unwrap()], None);
        let base = fds_of(d.child.id());
        let mut p = Peer::new(spawn_peer_as(NOBODY, &d.path, "register-files", &["loop", "16"]));
        let mut said = String::new();
        p.out.read_line(&mut said).unwrap();
        assert_eq!(said.trim(), "registered 0 refused 16", "{}", d.log());
        drop(p);
        let now = fds_back_to(d.child.id(), base);
        assert!(now <= base, "the daemon kept what a user that is gone registered: {base} descriptors before, {now} after");
        let left: Vec<_> = names(&d.path).list().unwrap().into_iter().filter(|e| e.uid == NOBODY).map(|e| e.name).collect();
        assert!(left.is_empty(), "names of a user that is gone: {left:?}");
    });
}

/// A write-back's new contents are made by the asker and were its own
/// until the server gave them the file's owner: uid nobody, watching the
/// directory (inotify), hard-linked each new inode into a directory of
/// its own as it appeared, and kept there a file of root's with its own
/// contents, of root's file of mode 0662 (which nobody may write but not
/// read, so the kernel refuses nobody a link of its own to it); with that
/// link, root's file had another name, and the next write-back left it
/// nobody's. A new inode found with another name once given the owner is
/// given back to the asker and not written back.
#[test]
fn a_write_back_never_gives_the_writer_a_link_to_a_file_of_the_owners() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let test = "a_write_back_never_gives_the_writer_a_link_to_a_file_of_the_owners";
    if !can_play_other_user(test) {
        return;
    }
    watchdog(test, LIMIT, || {
        let served = test_dir("linknew-root");
        let (public, mine) = (served.join("pub"), served.join("mine"));
        std::fs::create_dir(&public).unwrap();
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::create_dir(&mine).unwrap();
        std::os::unix::fs::chown(&mine, Some(NOBODY), Some(NOBODY)).unwrap();
        std::fs::write(public.join("w"), b"root's").unwrap();
        std::fs::set_permissions(public.join("w"), std::fs::Permissions::from_mode(0o662)).unwrap();
        let d = Daemon::start("linknew", &["--system", "--files", served.to_str().unwrap()], None);
        let peer = spawn_peer_as(NOBODY, &d.path, "files-link-new", &["pub/w", public.to_str().unwrap(), mine.to_str().unwrap(), "30"]);
        let said = finish(peer);
        let owner = std::fs::metadata(public.join("w")).unwrap().uid();
        println!("{}; root's pub/w is now uid {owner}'s", said.trim());
        let given: usize = said.split_whitespace().skip_while(|w| *w != "given").nth(1).and_then(|v| v.parse().ok()).expect("given G");
        assert_eq!(given, 0, "uid {NOBODY} kept files of root's in its own directory: {said}");
        assert_eq!(owner, 0, "root's file became uid {owner}'s: {said}");
        drop(d);
    });
}

/// A write-back's new inode was the asker's until the server gave it the
/// file's owner, and so were its extended attributes: uid nobody, seeing
/// each new inode appear (inotify), gave it an access ACL granting
/// itself read and write, which the server kept, and then read root's
/// file of mode 0662, which it may write but not read. The new inode
/// keeps the file's attributes and no others.
#[test]
fn a_write_back_never_keeps_attributes_the_writer_gave_the_new_contents() {
    use std::os::unix::fs::PermissionsExt;
    let test = "a_write_back_never_keeps_attributes_the_writer_gave_the_new_contents";
    if !can_play_other_user(test) {
        return;
    }
    watchdog(test, LIMIT, || {
        let served = test_dir("aclnew-root");
        let public = served.join("pub");
        std::fs::create_dir(&public).unwrap();
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(public.join("w"), b"root's").unwrap();
        std::fs::set_permissions(public.join("w"), std::fs::Permissions::from_mode(0o662)).unwrap();
        let d = Daemon::start("aclnew", &["--system", "--files", served.to_str().unwrap()], None);
        let peer = spawn_peer_as(NOBODY, &d.path, "files-acl-new", &["pub/w", public.to_str().unwrap(), "30"]);
        let said = finish(peer);
        println!("{}", said.trim());
        assert!(said.contains(" acl "), "{said}");
        assert!(said.trim().ends_with("read denied"), "uid {NOBODY} reads root's file of mode 0662 after writing it back: {said}");
        drop(d);
    });
}

/// A write-back's new inode, given to the file's owner, was the asker's
/// from the moment it was made, and the asker may open a file of its own
/// by the name it sees made (inotify): uid nobody kept such descriptors
/// open for reading and read through them what root wrote into its file
/// of mode 0662 (which nobody may write but not read) after the
/// write-back. An inode that is to be another user's is made by the
/// server, never the asker's.
#[test]
fn a_write_back_never_lets_the_writer_read_the_owners_file_it_may_only_write() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let test = "a_write_back_never_lets_the_writer_read_the_owners_file_it_may_only_write";
    if !can_play_other_user(test) {
        return;
    }
    watchdog(test, LIMIT, || {
        let served = test_dir("opennew-root");
        let public = served.join("pub");
        std::fs::create_dir(&public).unwrap();
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(public.join("w"), b"root's").unwrap();
        std::fs::set_permissions(public.join("w"), std::fs::Permissions::from_mode(0o662)).unwrap();
        let d = Daemon::start("opennew", &["--system", "--files", served.to_str().unwrap()], None);
        let mut cmd = peer_command_as(NOBODY, &d.path, "files-open-new", &["pub/w", public.to_str().unwrap(), "30"]);
        let mut peer = Peer::new(cmd.stdin(Stdio::piped()).spawn().unwrap());
        let said = peer.until_ready();
        // Root writes its file in place, as its own programs do.
        std::fs::OpenOptions::new().append(true).open(public.join("w")).unwrap().write_all(b" secret").unwrap();
        writeln!(peer.child.stdin.take().unwrap()).unwrap();
        let mut read = String::new();
        std::io::BufRead::read_line(&mut peer.out, &mut read).unwrap();
        println!("{said:?} {}", read.trim());
        assert_eq!(read.trim(), "read 0", "uid {NOBODY} read what root wrote into its file of mode 0662: {said:?}");
        drop(d);
    });
}

/// A `ferryd --system --files` run by root without capabilities (its
/// bounding set emptied, as a service manager may start it) cannot act
/// as its clients and checks mode bits itself, and may not name another
/// user in its messages: it answers another user as itself. Answering
/// as the asker there, the kernel refused every answer to another user
/// (`EPERM`), and uid nobody's open of a world-readable file found the
/// server gone.
#[test]
fn a_root_daemon_without_capabilities_still_answers_other_users() {
    let test = "a_root_daemon_without_capabilities_still_answers_other_users";
    if !can_play_other_user(test) {
        return;
    }
    watchdog(test, LIMIT, || {
        use std::os::unix::fs::PermissionsExt;
        let served = test_dir("nocaps-root");
        std::fs::write(served.join("README"), b"shared with everyone").unwrap();
        std::fs::set_permissions(served.join("README"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let d = Daemon::start_with("nocaps", &["--system", "--files", served.to_str().unwrap()], None, |cmd| {
            // SAFETY: the closure runs in the forked child before exec and
            // makes only prctl system calls, which are async-signal-safe;
            // it allocates nothing and takes no lock.
            unsafe {
                cmd.pre_exec(|| {
                    for cap in 0..64 {
                        libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
                    }
                    Ok(())
                });
            }
        });
        let caps = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
        assert!(caps.lines().any(|l| l == "CapEff:\t0000000000000000"), "the daemon kept capabilities: {caps}");
        let out = finish(spawn_peer_as(NOBODY, &d.path, "files-open", &["README"]));
        println!("{}", out.trim());
        assert_eq!(out.trim(), format!("README ok 20 {}", b"shared with everyone".iter().map(|&b| u64::from(b)).sum::<u64>()), "{}", d.log());
        drop(d);
    });
}

/// A write-back through `ferryd --files` leaves the file's mode, owner
/// and group as a write in place by the same user leaves them: for each
/// file a twin is written natively by the same user, and the two must
/// agree. The daemon runs under umask 077, as daemons often do; its new
/// inode was made under that umask and given back only its owner, so a
/// root-owned file of mode 0666 that another user wrote back became 0600
/// (0644 under the usual umask).
#[test]
fn a_write_back_keeps_the_files_mode_owner_and_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !can_play_other_user("a_write_back_keeps_the_files_mode_owner_and_group") {
        return;
    }
    watchdog("write_back_mode", LIMIT, || {
        const GROUP: u32 = 4242;
        // A writer that is root without CAP_FSETID (`setpriv`), which
        // loses set-user-ID on a write as any user does.
        const ROOT_WITHOUT_FSETID: u32 = u32::MAX;
        let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
        let served = test_dir("writeback-root");
        let dir = served.join("dropbox");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        // (name, owner, group, mode, written by)
        let files = [
            ("everyones", 0, 0, 0o666, NOBODY),
            ("grouped", NOBODY, GROUP, 0o640, NOBODY),
            ("roots-grouped", 0, GROUP, 0o640, 0),
            ("setgid", NOBODY, NOBODY, 0o2664, NOBODY),
            ("setgid-other-group", NOBODY, GROUP, 0o2664, NOBODY),
            ("setgid-exec", NOBODY, NOBODY, 0o2775, NOBODY),
            ("setuid", NOBODY, NOBODY, 0o4755, NOBODY),
            ("setuid-by-root", 0, 0, 0o4755, 0),
            ("setgid-exec-by-root", 0, GROUP, 0o2775, 0),
            ("setuid-by-root-without-fsetid", 0, 0, 0o4755, ROOT_WITHOUT_FSETID),
            ("sticky", 0, 0, 0o1666, NOBODY),
        ];
        for (name, uid, gid, mode, _) in files {
            for f in [name.to_owned(), format!("{name}.native")] {
                let p = dir.join(f);
                std::fs::write(&p, b"before").unwrap();
                std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        let d = Daemon::start_with("writeback", &["--system", "--files", served.to_str().unwrap()], None, |cmd| with_umask(cmd, 0o077));
        for (name, uid, gid, mode, writer) in files {
            if writer == ROOT_WITHOUT_FSETID && !setpriv {
                println!("{name}: skipped, no setpriv");
                continue;
            }
            let path = format!("dropbox/{name}");
            let drop_fsetid = ["--bounding-set=-fsetid", "--inh-caps=-fsetid"];
            if writer == ROOT_WITHOUT_FSETID {
                let out = Command::new("setpriv")
                    .args(drop_fsetid)
                    .arg(common::peer_for_other_users())
                    .args(["files-write", &path, "after"])
                    .env("FERRY_BOOTSTRAP", &d.path)
                    .env("FERRY_NO_EMBED", "1")
                    .output()
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "{name}: {}", d.log());
            } else if writer == 0 {
                let client = ferry::fileserver::FileClient::new(names(&d.path).lookup("files").unwrap());
                client.write(&path, b"after").unwrap_or_else(|e| panic!("root's write-back of {name}: {e}"));
            } else {
                assert_eq!(finish(spawn_peer_as(writer, &d.path, "files-write", &[&path, "after"])), "ok\n", "{name}: {}", d.log());
            }
            let twin = dir.join(format!("{name}.native"));
            let native = if writer == ROOT_WITHOUT_FSETID {
                Command::new("setpriv").args(drop_fsetid).args(["sh", "-c", "printf after > \"$0\""]).arg(&twin).current_dir("/").status().unwrap()
            } else {
                Command::new("sh").args(["-c", "printf after > \"$0\""]).arg(&twin).uid(writer).gid(writer).current_dir("/").status().unwrap()
            };
            assert!(native.success(), "{name}: the native write failed");
            let state = |m: std::fs::Metadata| format!("{:o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid());
            let served = state(std::fs::metadata(dir.join(name)).unwrap());
            let native = state(std::fs::metadata(dir.join(format!("{name}.native"))).unwrap());
            assert_eq!(std::fs::read(dir.join(name)).unwrap(), b"after", "{name}");
            println!("{name}: {mode:o} {uid}:{gid} before; written back {served}; written natively {native}");
            assert_eq!(served, native, "{name}: a write-back left another mode, owner or group than a native write");
        }
    });
}

/// A user in a user namespace of its own holds every capability there,
/// `CAP_FSETID` included, but the kernel keeps set-user-ID (and
/// set-group-ID on a file its group may run) on a write only for a writer
/// holding it in the initial namespace: uid nobody in such a namespace
/// (`unshare -U --keep-caps`, mapping only itself) writing a set-user-ID
/// or set-group-ID file it may write, root's or its own, loses the bit
/// natively. The file server read the asker's capabilities from the
/// kernel and kept the bit: nobody's own contents in a set-user-ID root
/// file (mode 4757) and a set-group-ID one (2777).
#[test]
fn a_write_back_from_a_user_namespace_keeps_no_set_id_bit_the_kernel_would_drop() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let test = "a_write_back_from_a_user_namespace_keeps_no_set_id_bit_the_kernel_would_drop";
    if !can_play_other_user(test) {
        return;
    }
    let in_namespace = |cmd: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-U", "--map-user=65534", "--map-group=65534", "--keep-caps"]).args(cmd).current_dir("/");
        c
    };
    let caps = in_namespace(&["grep", "CapEff", "/proc/self/status"]).output();
    if !caps.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ffffff")) {
        eprintln!("skipped {test}: needs setpriv, and unshare with --map-user and --keep-caps into a user namespace");
        return;
    }
    watchdog("write_back_userns", LIMIT, || {
        let served = test_dir("writeback-userns-root");
        let dir = served.join("dropbox");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        // (name, owner and group, mode): root's, and nobody's own.
        let files = [("setuid", 0, 0o4757), ("setgid", 0, 0o2777), ("own-setuid", NOBODY, 0o4755)];
        for (name, owner, mode) in files {
            for f in [name.to_owned(), format!("{name}.native")] {
                let p = dir.join(f);
                std::fs::write(&p, b"before").unwrap();
                std::os::unix::fs::chown(&p, Some(owner), Some(owner)).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        let d = Daemon::start("writeback-userns", &["--system", "--files", served.to_str().unwrap()], None);
        let peer = common::peer_for_other_users();
        for (name, owner, mode) in files {
            let path = format!("dropbox/{name}");
            let out = in_namespace(&[peer.to_str().unwrap(), "files-write", &path, "after"])
                .env("FERRY_BOOTSTRAP", &d.path)
                .env("FERRY_NO_EMBED", "1")
                .env("TMPDIR", "/tmp")
                .env_remove("XDG_RUNTIME_DIR")
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "{name}: {}", d.log());
            let twin = dir.join(format!("{name}.native"));
            let native = in_namespace(&["sh", "-c", "printf after > \"$0\""]).arg(&twin).status().unwrap();
            assert!(native.success(), "{name}: the native write failed");
            let state = |m: std::fs::Metadata| format!("{:o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid());
            let served = state(std::fs::metadata(dir.join(name)).unwrap());
            let native = state(std::fs::metadata(&twin).unwrap());
            assert_eq!(std::fs::read(dir.join(name)).unwrap(), b"after", "{name}");
            println!("{name}: {mode:o} {owner}:{owner} before; written back {served}; written natively {native}");
            assert_eq!(served, native, "{name}: a write-back from a user namespace kept what a native write drops");
        }
    });
}

/// Two other users keeping the file server busy (each copying fresh
/// versions of a large file of its own) while they look up `files` as
/// fast as they can leave root's lookups of `files` served. Each lookup's
/// port reaches the file server through its one main queue, sent without
/// waiting; while the server copies, the ports wait there, and two users
/// with their budgets of ports (256 each) filled it: root's lookups were
/// refused as the server being busy.
#[test]
fn users_looking_up_a_busy_file_server_leave_room_for_others() {
    use std::os::unix::fs::PermissionsExt;
    let test = "users_looking_up_a_busy_file_server_leave_room_for_others";
    if !can_play_other_user(test) {
        return;
    }
    // Its copies of large files would count in another test's measure of
    // the machine's shared memory.
    let _serial = serial();
    watchdog("busy_files_lookups", LIMIT, || {
        const SECS: u64 = 8;
        let served = test_dir("busylookups-root");
        std::fs::set_permissions(&served, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut attackers = Vec::new();
        let d = Daemon::start("busylookups", &["--system", "--files", served.to_str().unwrap()], None);
        for uid in [NOBODY, OTHER] {
            let big = served.join(format!("big-{uid}"));
            let f = std::fs::File::create(&big).unwrap();
            f.set_len(192 << 20).unwrap();
            std::os::unix::fs::chown(&big, Some(uid), Some(uid)).unwrap();
            std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
            attackers.push(spawn_peer_as(uid, &d.path, "files-busy-lookups", &[big.to_str().unwrap(), &SECS.to_string()]));
        }
        std::thread::sleep(Duration::from_secs(1));
        let mut bs = names(&d.path);
        let end = std::time::Instant::now() + Duration::from_secs(SECS - 2);
        let (mut tries, mut refused) = (0, Vec::new());
        // A lookup every 100 ms, each port kept waiting in the queue while
        // the server copies: root's share of the queue (some 50 ports with
        // the two others at theirs) outlasts a copy of several seconds. (A
        // user that looks the server up in a loop gets its share, as each
        // of the two others does, and is refused past it.)
        let mut kept = Vec::new();
        while std::time::Instant::now() < end {
            tries += 1;
            match bs.lookup("files") {
                Ok(r) => kept.push(r),
                Err(e) => refused.push(e.to_string()),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(kept);
        for a in attackers {
            println!("the other user: {}", finish(a).trim());
        }
        println!("root's {tries} lookups of files: {} refused", refused.len());
        assert!(refused.is_empty(), "root's lookups were refused while two other users looked up a busy file server: {:?}", &refused[..refused.len().min(3)]);
    });
}

/// A write-back through `ferryd --files` keeps the file's ACL and its
/// user attributes, as a write in place does. The file's ACL lets uid
/// nobody write it and gives its owning group nothing, so its group bits
/// (0660 as `stat` shows them) are the ACL's mask. The new inode of a
/// write-back had no ACL: its group bits then were the owning group's own,
/// and a member of that group read a file the ACL had kept from it; the
/// file's `user.` attribute was gone as well. A twin written natively by
/// nobody must agree on the ACL, the attribute and the mode, and the
/// group's member must be refused both.
#[test]
fn a_write_back_keeps_the_files_acl_and_attributes() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let test = "a_write_back_keeps_the_files_acl_and_attributes";
    if !can_play_other_user(test) {
        return;
    }
    watchdog("write_back_acl", LIMIT, || {
        const GROUP: u32 = 4243;
        const MEMBER: u32 = 4244;
        const ACL: &str = "system.posix_acl_access";
        // version 2; (tag, permissions, id): the owner rw, uid nobody rw,
        // the owning group nothing, mask rw, others nothing.
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [(0x01u16, 6u16, u32::MAX), (0x02, 6, NOBODY), (0x04, 0, u32::MAX), (0x10, 6, u32::MAX), (0x20, 0, u32::MAX)] {
            acl.extend_from_slice(&tag.to_le_bytes());
            acl.extend_from_slice(&perm.to_le_bytes());
            acl.extend_from_slice(&id.to_le_bytes());
        }
        let served = test_dir("writeback-acl-root");
        let dir = served.join("dropbox");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        for f in ["kept", "kept.native"] {
            let p = dir.join(f);
            std::fs::write(&p, b"before").unwrap();
            std::os::unix::fs::chown(&p, Some(0), Some(GROUP)).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            let set = rustix::fs::setxattr(&p, ACL, &acl, rustix::fs::XattrFlags::empty())
                .and_then(|()| rustix::fs::setxattr(&p, "user.origin", b"made by the test", rustix::fs::XattrFlags::empty()));
            if let Err(e) = set {
                eprintln!("skipped {test}: the temporary directory's file system takes no ACL or user attribute ({e})");
                return;
            }
        }
        let d = Daemon::start("writeback-acl", &["--system", "--files", served.to_str().unwrap()], None);
        assert_eq!(finish(spawn_peer_as(NOBODY, &d.path, "files-write", &["dropbox/kept", "after"])), "ok\n", "{}", d.log());
        let twin = dir.join("kept.native");
        let native = Command::new("sh").args(["-c", "printf after > \"$0\""]).arg(&twin).uid(NOBODY).gid(NOBODY).current_dir("/").status().unwrap();
        assert!(native.success(), "the native write failed");
        let attr = |p: &Path, name: &str| -> Option<Vec<u8>> {
            let mut buf = vec![0u8; 4096];
            rustix::fs::getxattr(p, name, &mut buf[..]).ok().map(|n| buf[..n].to_vec())
        };
        let state = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (format!("{:o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid()), attr(p, ACL), attr(p, "user.origin"))
        };
        let kept = dir.join("kept");
        assert_eq!(std::fs::read(&kept).unwrap(), b"after");
        let (served_state, native_state) = (state(&kept), state(&twin));
        println!("written back: {served_state:?}\nwritten natively: {native_state:?}");
        // A member of the file's group, refused by the ACL, reads neither.
        let read_as_member = |p: &Path| Command::new("cat").arg(p).uid(MEMBER).gid(GROUP).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap().success();
        assert!(!read_as_member(&twin), "the group's member read the native twin");
        assert!(!read_as_member(&kept), "the group's member read the written-back file the ACL keeps from it");
        assert!(native_state.1.is_some() && native_state.2.is_some(), "the native write lost the attributes: {native_state:?}");
        assert_eq!(served_state, native_state, "a write-back left another ACL, attribute or mode than a native write");
    });
}

/// Any user can make a daemon log a line by connecting (and more by
/// registering a name and letting it go); `ferryd` in the foreground
/// logged each, and a user connecting in a loop wrote to its log without
/// bound. Here uid nobody makes 300 connections, each with a
/// registration that ends: of the 900 lines about it, at most the budget
/// (5 lines each 2 s here) is logged per stretch, and each stretch's
/// count of the rest is logged in one line.
#[test]
fn a_user_connecting_in_a_loop_cannot_flood_the_daemons_log() {
    if !can_play_other_user("a_user_connecting_in_a_loop_cannot_flood_the_daemons_log") {
        return;
    }
    watchdog("log_flood", Duration::from_secs(120), || {
        let d = Daemon::start("logflood", &["--system", "--log-lines", "5", "--log-every", "2"], None);
        assert_eq!(finish(spawn_peer_as(NOBODY, &d.path, "churn-connections", &["300"])), "churned 300\n", "{}", d.log());
        let about = |log: &str| -> (usize, u64, usize) {
            let lines: Vec<&str> = log.lines().collect();
            let said = lines.iter().filter(|l| !l.contains("not logged") && !l.contains("counted") && l.contains(&format!("uid {NOBODY}"))).count();
            let counted: Vec<u64> = lines
                .iter()
                .filter(|l| l.contains(&format!("lines about uid {NOBODY} not logged")))
                .filter_map(|l| l.trim_start_matches("ferryd: ").split(' ').next()?.parse().ok())
                .collect();
            (said, counted.iter().sum(), counted.len())
        };
        // The last stretch's count comes once it is over.
        let mut seen = about(&d.log());
        for _ in 0..2000 {
            if seen.0 as u64 + seen.1 >= 900 {
                break;
            }
            nap();
            seen = about(&d.log());
        }
        let (said, counted, stretches) = seen;
        println!("of 900 lines about uid {NOBODY}, {said} logged and {counted} counted in {stretches} lines");
        assert_eq!(said as u64 + counted, 900, "lines about the user went missing:\n{}", d.log());
        assert!(said <= 5 * (stretches + 1), "{said} lines about one user logged in {stretches} stretches of its budget:\n{}", d.log());
    });
}

/// The name server checks that a registered right does not lead back to
/// a socket a server of its process keeps (`the_server_never_holds_both_ends_of_a_port`,
/// `a_name_never_leads_back_into_the_daemon`). It asked the kernel for
/// the inode of the right's other end (`sock_diag`), which the kernel
/// finds by walking every Unix socket of the system, so each registration
/// and each connection cost the daemon more for every socket any user
/// held. Here the daemon runs with netlink refused to it, so it can ask
/// only about the sockets it is handed, and the check still holds: both
/// ends of a pair, a client's own connection and a port of the daemon's
/// file server are refused. The daemon's processor time for 200
/// connections with a registration each, beside no other sockets and
/// beside 38000 of uid nobody's, is printed for the record.
#[test]
fn registrations_are_checked_without_looking_through_other_users_sockets() {
    use std::os::fd::AsFd;
    if !can_play_other_user("registrations_are_checked_without_looking_through_other_users_sockets") {
        return;
    }
    watchdog("no_scan", Duration::from_secs(300), || {
        let served = test_dir("noscan-root");
        let d = Daemon::start_with("noscan", &["--system", "--files", served.to_str().unwrap()], None, without_netlink);
        let churn = || {
            let before = cpu_ms(d.child.id());
            assert_eq!(finish(spawn_peer_as(OTHER, &d.path, "churn-connections", &["200"])), "churned 200\n", "{}", d.log());
            cpu_ms(d.child.id()) - before
        };
        let alone = churn();
        // Two processes, as each may open 20000 descriptors here; killed
        // when dropped.
        let mut hogs: Vec<Peer> = (0..2).map(|_| Peer::new(spawn_peer_as(NOBODY, &d.path, "hold-sockets", &["19000"]))).collect();
        let held: usize = hogs.iter_mut().map(|h| h.until_ready()[0].trim_start_matches("holding ").parse::<usize>().unwrap()).sum();
        let beside = churn();
        println!("200 connections and registrations: the daemon used {alone} ms beside no other sockets, {beside} ms beside {held} of uid {NOBODY}'s");
        // The checks hold with no way of looking through the system's
        // sockets.
        let conn = raw_connection(&d.path);
        let (a, b) = rustix::net::socketpair(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::SEQPACKET, rustix::net::SocketFlags::CLOEXEC, None).unwrap();
        raw_hello(conn.as_fd());
        assert_eq!(raw_register(conn.as_fd(), "one-end", a.as_fd()), None, "{}", d.log());
        let refused = raw_register(conn.as_fd(), "other-end", b.as_fd());
        assert!(matches!(&refused, Some(ferry::bootstrap::Refusal::Refused(why)) if why.contains("held by the name server")), "both ends of a pair were registered: {refused:?}\n{}", d.log());
        let refused = raw_register(conn.as_fd(), "own-conn", conn.as_fd());
        assert!(matches!(&refused, Some(ferry::bootstrap::Refusal::Refused(why)) if why.contains("held by the name server")), "the client's own connection was registered: {refused:?}\n{}", d.log());
        assert_eq!(finish(spawn_peer_as(NOBODY, &d.path, "register-files", &["loop", "4"])).trim(), "registered 0 refused 4", "{}", d.log());
        assert!(!d.log().contains("unchecked"), "{}", d.log());
        drop(hogs);
    });
}

#[test]
fn one_user_cannot_take_every_descriptor() {
    if !can_play_other_user("one_user_cannot_take_every_descriptor") {
        return;
    }
    watchdog("fd_share", LIMIT, || {
        // Budgets out of the way: only descriptors bound this user.
        let d = Daemon::start("fdshare", &["--system", "--max-names", "100000", "--max-connections", "100000"], Some(400));
        let mut hog = Peer::new(spawn_peer_as(NOBODY, &d.path, "fill-names", &["hog", "100000"]));
        let said = hog.until_ready();
        assert!(said[1].starts_with("stopped: LimitReached { what: Descriptors"), "{said:?}");
        let n: usize = said[0].trim_start_matches("registered ").parse().unwrap();
        assert!(n > 10, "{said:?}");
        // Another user and root still register and look up.
        let mut other = Peer::new(spawn_peer_as(OTHER, &d.path, "fill-names", &["other", "5"]));
        assert_eq!(other.until_ready()[0], "registered 5");
        let mut bs = names(&d.path);
        let (_rx, tx) = ferry::port().unwrap();
        bs.register("root-svc", &tx).unwrap();
        bs.lookup("root-svc").unwrap();
        // The hog's descriptors come back when it goes.
        drop(hog);
        let mut freed = false;
        for _ in 0..2000 {
            if !bs.list().unwrap().iter().any(|e| e.uid == NOBODY) {
                freed = true;
                break;
            }
            nap();
        }
        assert!(freed, "registrations of a dead client were kept");
    });
}

/// A raw connection to the name server at `path`, made now; its version
/// check is sent later by [`ask`].
fn connect_raw(path: &Path) -> OwnedFd {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let s = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None).unwrap();
    rustix::net::connect(&s, &SocketAddrUnix::new(path).unwrap()).unwrap();
    s
}

/// Sends a version check on `s` and returns the operation of the answer.
fn ask(s: &OwnedFd) -> u32 {
    use rustix::net::{RecvFlags, SendFlags};
    let mut hello = Vec::new();
    ferry::wire::encode(&mut hello, 0, 0, &[], b"late");
    rustix::net::send(s, &hello, SendFlags::NOSIGNAL).expect("the refused connection was closed before its client asked");
    let mut buf = vec![0u8; 4096];
    let n = rustix::net::recv(s, &mut buf, RecvFlags::empty()).expect("the refusal was reset away").0;
    ferry::wire::parse(&buf[..n], 0).expect("a well-formed answer").op
}

/// A refused client is told why even when its version check arrives late:
/// the server keeps the refused connection open (for a bounded time) and
/// reads what comes, instead of closing at once, when a request arriving
/// later would find the connection gone or reset the refusal away.
#[test]
fn a_refused_client_that_asks_late_still_reads_the_refusal() {
    watchdog("late_refusal", LIMIT, || {
        let d = Daemon::start("laterefusal", &["--max-connections", "2"], None);
        let held: Vec<_> = (0..2).map(|_| names(&d.path)).collect();
        let s = connect_raw(&d.path);
        // The server refuses at accept; ask only well after that.
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(ask(&s), ferry::idl::REPLY_ERR);
        // The server goes on serving once the connections are gone.
        drop(s);
        drop(held);
        let mut bs = names(&d.path);
        bs.list().unwrap();
    });
}

/// The refused connections the server keeps open are budgeted per user:
/// another user (nobody) flooding the server with connections it refuses
/// and never closing them costs only its own, and a refused client of this
/// user that asks late still reads its refusal.
#[test]
fn one_users_refused_connections_never_cost_another_its_refusal() {
    if !can_play_other_user("one_users_refused_connections_never_cost_another_its_refusal") {
        return;
    }
    watchdog("refusal_share", LIMIT, || {
        let d = Daemon::start("refusalshare", &["--system", "--max-connections", "2"], None);
        let held: Vec<_> = (0..2).map(|_| names(&d.path)).collect();
        let mut hog = Peer::new(spawn_peer_as(NOBODY, &d.path, "hold-connections", &["100"]));
        assert_eq!(hog.until_ready()[0], "connected 2");
        // Bounded tries: an attempt only counts if the flood was in before
        // this user's refused connection could have been let go anyway.
        for attempt in 0.. {
            assert!(attempt < 5, "the flood never arrived within the server's grace period");
            let started = std::time::Instant::now();
            let s = connect_raw(&d.path);
            std::thread::sleep(Duration::from_millis(20));
            let mut flood = Peer::new(spawn_peer_as(NOBODY, &d.path, "flood-connections", &["60"]));
            let said = flood.until_ready();
            assert!(said[0].starts_with("opened "), "{said:?}");
            std::thread::sleep(Duration::from_millis(30));
            if started.elapsed() > Duration::from_millis(400) {
                continue;
            }
            assert_eq!(ask(&s), ferry::idl::REPLY_ERR);
            break;
        }
        drop(held);
    });
}

#[test]
fn connections_per_user_are_budgeted() {
    if !can_play_other_user("connections_per_user_are_budgeted") {
        return;
    }
    watchdog("conn_budget", LIMIT, || {
        let d = Daemon::start("connbudget", &["--system", "--max-connections", "8"], None);
        let mut hog = Peer::new(spawn_peer_as(NOBODY, &d.path, "hold-connections", &["1000"]));
        let said = hog.until_ready();
        assert_eq!(said[0], "connected 8", "{said:?}");
        assert_eq!(said[1], "stopped: LimitReached { what: Connections, limit: 8 }", "{said:?}");
        // Every further connection of that user is refused with the typed
        // error, never reset before its client could read why.
        let mut late = Peer::new(spawn_peer_as(NOBODY, &d.path, "refused-connections", &["200"]));
        let said = late.until_ready();
        assert_eq!(said, ["refused 200"], "{said:?}");
        let mut other = Peer::new(spawn_peer_as(OTHER, &d.path, "hold-connections", &["3"]));
        assert_eq!(other.until_ready()[0], "connected 3");
        let mut bs = names(&d.path);
        bs.list().unwrap();
        // Connections of a client that died are released.
        drop(hog);
        let mut again = None;
        for _ in 0..200 {
            let mut p = Peer::new(spawn_peer_as(NOBODY, &d.path, "hold-connections", &["8"]));
            let said = p.until_ready();
            if said[0] == "connected 8" {
                again = Some(p);
                break;
            }
            nap();
        }
        assert!(again.is_some(), "the connections of a dead client were never released");
    });
}

#[test]
fn rpc_connections_per_user_are_budgeted() {
    if !can_play_other_user("rpc_connections_per_user_are_budgeted") {
        return;
    }
    watchdog("rpc_conn_budget", LIMIT, || {
        use ferry::rpc::{ConnectOptions, Connection, RpcError, RpcLimits, RpcServer, Transport};
        let d = Daemon::start("rpcbudget", &["--system"], None);
        // Names are scoped per user, so the other users get the server's
        // right as a program is handed one at its start.
        let (port, tx) = ferry::port().unwrap();
        let hold_as = |uid: u32, max: &str| {
            use ferry::spawn::CommandExt as _;
            Peer::new(peer_command_as(uid, &d.path, "rpc-hold", &["-", max]).pass_right(&tx).unwrap().spawn().unwrap())
        };
        // A real server on its own thread, answering echoes, with a budget
        // of 4 connections per user.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let server = std::thread::spawn(move || {
            let mut srv = RpcServer::new(port).unwrap();
            srv.set_limits(RpcLimits { connections_per_user: 4, ..RpcLimits::default() });
            assert_eq!(srv.limits().connections_per_user, 4);
            let mut reply = None;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                match srv.reply_and_wait(reply.take(), Timeout::millis(50)) {
                    Ok((id, m)) => reply = Some((id, Message::new(m.op()).with_body(m.body().to_vec()))),
                    Err(RpcError::Timeout) => {}
                    Err(e) => panic!("server: {e}"),
                }
            }
        });
        let mut hog = hold_as(NOBODY, "1000");
        let said = hog.until_ready();
        assert_eq!(said[0], "connected 4", "{said:?}");
        assert!(said[1].starts_with("stopped: Refused(") && said[1].contains("as many connections"), "{said:?}");
        // Another user, and the owner, are served meanwhile.
        let mut other = hold_as(OTHER, "3");
        assert_eq!(other.until_ready()[0], "connected 3");
        let mut mine = Connection::connect(&tx, ConnectOptions::default()).unwrap();
        assert_eq!(mine.call(Message::new(1).with_body(*b"ok"), Timeout::Infinite).unwrap().body(), b"ok");
        // A dead client's connections are given back to its user.
        drop(hog);
        let mut again = None;
        for _ in 0..200 {
            let mut p = hold_as(NOBODY, "4");
            if p.until_ready()[0] == "connected 4" {
                again = Some(p);
                break;
            }
            nap();
        }
        assert!(again.is_some(), "the connections of a dead client were never given back");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        server.join().unwrap();
    });
}

/// CPU time (user + system) a process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); field 3 is the first after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Opens up to `max` connections to `path` that wait in its listen queue
/// (non-blocking connects, no request), stopping when one would block.
fn queue_connections(path: &Path, max: usize) -> Vec<std::os::fd::OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let addr = SocketAddrUnix::new(path).unwrap();
    let mut held = Vec::new();
    while held.len() < max {
        let s = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK, None).unwrap();
        match rustix::net::connect(&s, &addr) {
            Ok(()) => held.push(s),
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => panic!("connect: {e}"),
        }
    }
    held
}

/// Measures the CPU time `pid` uses over two seconds and fails if it used
/// more than a twentieth of them: a process that waits uses next to none,
/// one that spins uses all the CPU it gets (a fifth or more even on a
/// machine busy with other work).
fn assert_idle(pid: u32, log: impl Fn() -> String) {
    std::thread::sleep(Duration::from_millis(300));
    let (t0, c0) = (std::time::Instant::now(), cpu_ticks(pid));
    std::thread::sleep(Duration::from_secs(2));
    let (wall, used) = (t0.elapsed(), cpu_ticks(pid) - c0);
    let wall_ticks = wall.as_secs_f64() * rustix::param::clock_ticks_per_second() as f64;
    assert!((used as f64) < wall_ticks / 20.0, "used {used} ticks of CPU in {wall:?}:\n{}", log());
}

/// Waits (bounded) until a new client is served at `path`.
fn served_again(path: &Path) -> bool {
    for _ in 0..2000 {
        if ferry::Bootstrap::connect_to(path).and_then(|mut bs| bs.list()).is_ok() {
            return true;
        }
        nap();
    }
    false
}

#[test]
fn a_daemon_at_its_descriptor_limit_does_not_spin() {
    if !can_play_other_user("a_daemon_at_its_descriptor_limit_does_not_spin") {
        return;
    }
    watchdog("fd_limit", LIMIT, || {
        // No reserve and room for few descriptors: three users' connections
        // take them all, and more keep coming.
        let d = Daemon::start("fdlimit", &["--system", "--fd-reserve", "0", "--max-connections", "100000"], Some(48));
        let mut a = Peer::new(spawn_peer_as(NOBODY, &d.path, "flood-connections", &["100"]));
        a.until_ready();
        let mut b = Peer::new(spawn_peer_as(OTHER, &d.path, "flood-connections", &["100"]));
        b.until_ready();
        let mine = queue_connections(&d.path, 100);
        assert_idle(d.child.id(), || d.log());
        let log = d.log();
        assert!(log.contains("refused: descriptors limit"), "the daemon never reached its descriptor limit:\n{log}");
        assert!(log.matches("refused").count() <= 3, "every refusal was logged:\n{log}");
        // Once the clients go, the daemon serves again.
        drop((a, b, mine));
        assert!(served_again(&d.path), "the daemon did not serve again after descriptors were freed:\n{}", d.log());
    });
}

#[test]
fn a_server_whose_process_ran_out_of_descriptors_does_not_spin() {
    watchdog("emfile", LIMIT, || {
        let dir = test_dir("emfile");
        let log = dir.join("server.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
            .args(["server-out-of-fds", dir.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut server = Peer::new(child);
        server.until_ready();
        let path = dir.join("bootstrap");
        // Clients wait at the listener; accept fails with EMFILE.
        let queued = queue_connections(&path, 20);
        assert!(!queued.is_empty());
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        assert_idle(server.child.id(), read_log);
        let text = read_log();
        assert!(text.contains("accept failed"), "accept never ran out of descriptors:\n{text}");
        assert!(text.matches("accept failed").count() <= 2, "out of descriptors logged on every turn:\n{text}");
        // Descriptors come back: the listener is taken up again.
        use std::io::Write;
        writeln!(stdin, "free").unwrap();
        let mut l = String::new();
        server.out.read_line(&mut l).unwrap();
        assert_eq!(l.trim(), "freed");
        drop(queued);
        assert!(served_again(&path), "the server did not accept again:\n{}", read_log());
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// Sends one hand-framed request on a raw connection (`fd`, if any, as a
/// send right) and returns the reply's operation id and body.
fn raw_request(conn: std::os::fd::BorrowedFd<'_>, op: u32, body: &[u8], fd: Option<std::os::fd::BorrowedFd<'_>>) -> (u32, Vec<u8>) {
    use rustix::net::{RecvAncillaryBuffer, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let mut bytes = Vec::new();
    let items: Vec<_> = fd.iter().map(|_| ferry::wire::ItemDesc { kind: ferry::wire::KIND_SEND, fds: 1, ..Default::default() }).collect();
    ferry::wire::encode(&mut bytes, op, 0, &items, body);
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds: Vec<_> = fd.into_iter().collect();
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    }
    rustix::net::sendmsg(conn, &[std::io::IoSlice::new(&bytes)], &mut control, SendFlags::NOSIGNAL).unwrap();
    let mut buf = vec![0u8; ferry::wire::MAX_MESSAGE];
    let mut rspace = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4), ScmCredentials(1))];
    let mut rcontrol = RecvAncillaryBuffer::new(&mut rspace);
    let got = rustix::net::recvmsg(conn, &mut [std::io::IoSliceMut::new(&mut buf)], &mut rcontrol, RecvFlags::CMSG_CLOEXEC).unwrap();
    let parsed = ferry::wire::parse(&buf[..got.bytes], 0).expect("a valid reply");
    (parsed.op, buf[parsed.inline].to_vec())
}

/// Passes the version check of the name service's protocol on a raw
/// connection.
fn raw_hello(conn: std::os::fd::BorrowedFd<'_>) {
    let hello = ferry::idl::hello_request::<ferry::bootstrap::protocol::Protocol>();
    assert_eq!(raw_request(conn, hello.op(), hello.body(), None).0, ferry::idl::REPLY_OK);
}

/// Sends a hand-framed `register` of `name` carrying `fd` as the send
/// right and returns the server's refusal (`None` when it registered).
fn raw_register(conn: std::os::fd::BorrowedFd<'_>, name: &str, fd: std::os::fd::BorrowedFd<'_>) -> Option<ferry::bootstrap::Refusal> {
    use ferry::idl::Wire;
    let mut enc = ferry::idl::Encoder::new();
    enc.field(1, name.to_owned());
    // The right is item 0: its value is the item's index.
    enc.field(2, 0u32);
    let body = enc.into_message(0).body().to_vec();
    let (op, reply) = raw_request(conn, ferry::bootstrap::protocol::ops::register, &body, Some(fd));
    match op {
        ferry::idl::REPLY_OK => None,
        ferry::idl::REPLY_ERR => {
            let mut dec = ferry::idl::Decoder::new(&reply, Vec::new());
            Some(ferry::bootstrap::Refusal::decode(&mut dec).expect("a refusal"))
        }
        op => panic!("reply op {op} to a register"),
    }
}

#[test]
fn the_server_never_holds_both_ends_of_a_port() {
    watchdog("both_ends", LIMIT, || {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        use std::os::fd::AsFd;
        let path = private_bootstrap("bothends");
        let conn = raw_connection(&path);
        let (a, b) = rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None).unwrap();
        raw_hello(conn.as_fd());
        // One end is a fine registration: the other end lives here.
        assert_eq!(raw_register(conn.as_fd(), "one-end", a.as_fd()), None);
        // The other end too would leave the server keeping the pair alive
        // by itself, forever.
        let refused = raw_register(conn.as_fd(), "other-end", b.as_fd());
        assert!(matches!(&refused, Some(ferry::bootstrap::Refusal::Refused(why)) if why.contains("held by the name server")), "both ends of a pair were registered: {refused:?}");
        // So would this client's own connection to the server.
        let refused = raw_register(conn.as_fd(), "own-conn", conn.as_fd());
        assert!(matches!(&refused, Some(ferry::bootstrap::Refusal::Refused(why)) if why.contains("held by the name server")), "the client's own connection was registered: {refused:?}");
        // With the other end gone here, the registration dies as it should.
        drop((a, b));
        let mut bs = names(&path);
        let mut gone = false;
        for _ in 0..2000 {
            if matches!(bs.lookup("one-end"), Err(NameError::NotFound)) {
                gone = true;
                break;
            }
            nap();
        }
        assert!(gone, "a registration outlived its port");
        assert!(matches!(bs.lookup("other-end"), Err(NameError::NotFound)));
    });
}

#[test]
fn a_listing_longer_than_a_message_arrives_whole() {
    watchdog("big_list", LIMIT, || {
        let path = private_bootstrap("biglist");
        let mut bs = names(&path);
        let (_rx, tx) = ferry::port().unwrap();
        let count = 256;
        for i in 0..count {
            bs.register(&format!("{i:04}-{}", "n".repeat(248)), &tx).unwrap();
        }
        let listed = bs.list().expect("list");
        assert_eq!(listed.len(), count);
        // Encoded as the protocol does, the listing is larger than a message.
        let mut enc = ferry::idl::Encoder::new();
        ferry::idl::Wire::encode(listed.clone(), &mut enc);
        let encoded = enc.into_message(0).body().len();
        assert!(encoded > ferry::wire::MAX_INLINE, "the listing must not fit inline ({encoded} bytes)");
        assert!(listed.iter().enumerate().all(|(i, e)| e.name.starts_with(&format!("{i:04}-"))));
    });
}

#[test]
fn a_lost_server_is_reconnected_or_named() {
    watchdog("reconnect", LIMIT, || {
        let d = Daemon::start("reconnect", &[], None);
        let path = d.path.clone();
        let mut bs = names(&path);
        let (_rx, tx) = ferry::port().unwrap();
        bs.register("svc", &tx).unwrap();
        drop(d);
        // Nobody there: the error says which server went away and why.
        let e = bs.lookup("svc").expect_err("a lookup through a dead server");
        let text = e.to_string();
        assert!(text.contains(&path.display().to_string()) && text.contains("went away"), "{text}");
        assert!(!text.contains("FERRY_BOOTSTRAP"), "{text}");
        // A new server at the same path: the next request reconnects.
        let d = Daemon::start("reconnect", &[], None);
        assert_eq!(d.path, path);
        assert!(matches!(bs.lookup("svc"), Err(NameError::NotFound)), "the old registration cannot be there");
        bs.register("svc", &tx).unwrap();
        assert!(bs.lookup("svc").is_ok());
        assert_eq!(bs.server_pid() as u32, d.child.id());
    });
}

#[test]
fn the_on_demand_daemon_outlives_the_program_that_started_it() {
    watchdog("ondemand", LIMIT, || {
        let tmp = test_dir("ondemand");
        let me = rustix::process::getuid().as_raw();
        let default = tmp.join(format!("ferry-{me}")).join("bootstrap");
        let run = |role: &str, args: &[&str]| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry-peer"));
            cmd.arg(role)
                .args(args)
                .env("TMPDIR", &tmp)
                .env_remove("XDG_RUNTIME_DIR")
                .env_remove("FERRY_BOOTSTRAP")
                .env_remove("FERRY_NO_AUTOSTART")
                .env_remove("FERRY_NO_EMBED")
                .env_remove("FERRY_DAEMON")
                .stdout(Stdio::piped());
            cmd
        };
        // The first program finds no server and starts one; it exits.
        let first = run("default-connect", &[]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&first.stdout).trim(), "registered");
        // A second program registers through it ...
        let mut second = Peer::new(run("register", &["svc"]).spawn().unwrap());
        let mut line = String::new();
        second.out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "registered");
        // ... and a third finds that name, although the first is gone.
        let mut bs = names(&default);
        assert!(bs.lookup("svc").is_ok());
        let daemon = bs.server_pid();
        assert_ne!(daemon, 0);
        assert!(default.with_file_name("ferryd.log").exists(), "the daemon's log is beside its socket");
        drop(bs);
        let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(daemon).unwrap(), rustix::process::Signal::TERM);
        drop(second);
        let _ = std::fs::remove_dir_all(&tmp);
    });
}

#[test]
fn without_a_daemon_binary_the_error_says_what_to_do() {
    let tmp = test_dir("nodaemon");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
        .arg("default-connect")
        .env("TMPDIR", &tmp)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("FERRY_BOOTSTRAP")
        .env_remove("FERRY_NO_AUTOSTART")
        .env_remove("FERRY_NO_EMBED")
        .env("FERRY_DAEMON", tmp.join("no-such-ferryd"))
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("no ferryd binary was found") && said.contains("FERRY_DAEMON") && said.contains("no-such-ferryd"), "{said}");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_private_server_and_waiting_for_a_name() {
    watchdog("private", LIMIT, || {
        let dir = test_dir("private").join("mine");
        let mut bs = ferry::Bootstrap::private(&dir).expect("private name server");
        assert_eq!(bs.path(), dir.join("bootstrap"));
        let path = bs.path().to_owned();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let (rx, tx) = ferry::port().unwrap();
            names(&path).register("late", &tx).unwrap();
            rx
        });
        let right = bs.lookup_wait("late", LIMIT).expect("the name appeared");
        let mut rx = late.join().unwrap();
        right.send(Message::new(4), Timeout::Infinite).unwrap();
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 4);
        assert!(matches!(bs.lookup_wait("never", Duration::from_millis(20)), Err(NameError::NotFound)));
    });
}

/// Opens a raw connection (credentials on) to the name server at `path`.
fn raw_connection(path: &std::path::Path) -> std::os::fd::OwnedFd {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let conn = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None).unwrap();
    rustix::net::sockopt::set_socket_passcred(&conn, true).unwrap();
    rustix::net::connect(&conn, &SocketAddrUnix::new(path).unwrap()).unwrap();
    conn
}

#[test]
fn the_protocol_is_the_typed_interface_and_a_version_1_client_is_told() {
    watchdog("versioned", LIMIT, || {
        use ferry::bootstrap::protocol;
        use std::os::fd::AsFd;
        let path = private_bootstrap("versioned");
        // The description says what the server speaks.
        let desc = protocol::describe();
        assert_eq!((desc["interface"].as_str(), desc["version"].as_u64(), desc["compatible"].as_u64()), (Some("ferry.names"), Some(5), Some(5)));
        let ops: Vec<_> = desc["operations"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap().to_owned()).collect();
        assert_eq!(ops, ["register", "lookup", "list", "unregister", "register_system", "register_system_service"]);
        let bs = names(&path);
        assert_eq!(bs.server_version(), 5);

        // A version-1 request (the name as the whole body, no version
        // check) is answered with version 1's "bad request" and a text.
        let conn = raw_connection(&path);
        let (op, body) = raw_request(conn.as_fd(), protocol::ops::lookup, b"svc", None);
        let text = String::from_utf8_lossy(&body);
        assert_eq!(op, 5, "{text}");
        assert!(text.contains("version 5"), "{text}");

        // After the check, a request that does not match its operation
        // never reaches the server's code: a fault says why, and the
        // connection goes on.
        raw_hello(conn.as_fd());
        let (op, _) = raw_request(conn.as_fd(), protocol::ops::register, b"\x01\x00\x03\x00\x00\x00abc", None);
        assert_eq!(op, ferry::idl::REPLY_FAULT);
        let (op, _) = raw_request(conn.as_fd(), 99, b"", None);
        assert_eq!(op, ferry::idl::REPLY_FAULT);
        let (_rx, tx) = ferry::port().unwrap();
        let (a, _b) = rustix::net::socketpair(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::SEQPACKET, rustix::net::SocketFlags::CLOEXEC, None).unwrap();
        assert_eq!(raw_register(conn.as_fd(), "raw", a.as_fd()), None);
        drop(tx);

        // A client of this version meeting a version-1 server is told so:
        // what it answered an operation it did not know (status 5 with a
        // text); and one of versions 2 to 4, whose answer to the version
        // check is the unmarked reply code 0.
        for (old_op, body) in [(5, &b"unknown operation"[..]), (0, &b""[..])] {
            let old = common::temp_path(format!("ferry-test-{}-old-server-{old_op}", std::process::id()));
            let _ = std::fs::remove_file(&old);
            let listener = rustix::net::socket_with(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::SEQPACKET, rustix::net::SocketFlags::CLOEXEC, None).unwrap();
            rustix::net::bind(&listener, &rustix::net::SocketAddrUnix::new(&old).unwrap()).unwrap();
            rustix::net::listen(&listener, 4).unwrap();
            let server = std::thread::spawn(move || {
                let c = rustix::net::accept(&listener).unwrap();
                let mut buf = vec![0u8; ferry::wire::MAX_MESSAGE];
                let _ = rustix::io::read(&c, &mut buf);
                let mut reply = Vec::new();
                ferry::wire::encode(&mut reply, old_op, 0, &[], body);
                rustix::io::write(&c, &reply).unwrap();
            });
            let e = ferry::Bootstrap::connect_to(&old).expect_err("an older server");
            server.join().unwrap();
            let _ = std::fs::remove_file(&old);
            assert!(matches!(&e, NameError::Protocol(why) if why.contains("older protocol")), "{old_op}: {e}");
        }
    });
}

/// An answer handed on to a name server connection (say, as the reply
/// right of a request to another server, which then answers on it) is never
/// taken as a request: it is dropped, counted, and not answered, so the
/// next answer on the connection is that of the next request.
#[test]
fn an_answer_on_a_connection_is_dropped_unanswered() {
    watchdog("answer-dropped", LIMIT, || {
        use std::os::fd::AsFd;
        let path = private_bootstrap("answer-dropped");
        let conn = raw_connection(&path);
        raw_hello(conn.as_fd());
        let dropped = ferry::idl::answers_dropped();
        // A refusal whose bytes would read as `lookup("svc")`.
        let mut enc = ferry::idl::Encoder::new();
        enc.field(1, String::from("svc"));
        let mut answer = Vec::new();
        ferry::wire::encode(&mut answer, ferry::idl::REPLY_ERR, 0, &[], enc.into_message(0).body());
        rustix::io::write(&conn, &answer).unwrap();
        let (op, _) = raw_request(conn.as_fd(), ferry::bootstrap::protocol::ops::list, b"", None);
        assert_eq!(op, ferry::idl::REPLY_OK, "the first answer on the connection is not the list's");
        assert_eq!(ferry::idl::answers_dropped(), dropped + 1, "the answer was not counted as dropped");
    });
}

/// How many descriptors process `pid` has open.
fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// How many descriptors process `pid` has once the count has held for 40
/// naps in a row (at most 2000 naps): a server still closing what an
/// earlier client left goes down to it.
fn settled_fds(pid: u32) -> usize {
    let (mut last, mut same) = (fds_of(pid), 0);
    for _ in 0..2000 {
        nap();
        let now = fds_of(pid);
        same = if now == last { same + 1 } else { 0 };
        last = now;
        if same >= 40 {
            break;
        }
    }
    last
}

/// Waits (at most 2000 naps) until process `pid` has at most `base`
/// descriptors open; returns how many it has.
fn fds_back_to(pid: u32, base: usize) -> usize {
    let mut now = usize::MAX;
    for _ in 0..2000 {
        now = fds_of(pid);
        if now <= base {
            break;
        }
        nap();
    }
    now
}
