//! A link that is lost comes back: a node told to keep a peer linked
//! (`Redial`, as `ferry-netd --peer` does) dials it again with back-off
//! once it is reachable; the old proxies stay dead names and new lookups
//! work. Two real nodes over loopback, one stopped and started again on
//! the same address. And `ferry-netd` as a service: stopped by a signal,
//! it tells its peers at once; under a restarted name server, it
//! registers its names again; started while its peer is down (or before
//! a host it imports from links in), it links and imports when the host
//! comes; with servers restarted on either side, it exports and imports
//! their new ports; with `--system-names`, another user reaches its
//! imports.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::{Message, Timeout};
use ferry_net::{Identity, Node, NodeConfig, Peer, Redial};

#[test]
fn a_lost_link_is_dialled_again_and_new_lookups_work() {
    let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
    let trust_a = vec![Peer { name: "b".into(), cert: ib.cert.clone() }];
    let trust_b = vec![Peer { name: "a".into(), cert: ia.cert.clone() }];
    let a = Node::start(NodeConfig::new(ia.clone(), trust_a.clone(), "127.0.0.1:0".parse().unwrap())).unwrap();
    let a_addr = a.local_addr().unwrap();
    let b = Arc::new(Node::start(NodeConfig::new(ib, trust_b, "127.0.0.1:0".parse().unwrap())).unwrap());
    b.connect("a", a_addr).unwrap();
    let (_rx, tx) = ferry::port().unwrap();
    a.export("svc", tx);
    let old = b.lookup("svc@a").unwrap();
    let ups = Arc::new(AtomicUsize::new(0));
    let u2 = ups.clone();
    let redial = Redial::start(b.clone(), vec![("a".into(), a_addr)], move |host| {
        assert_eq!(host, "a");
        u2.fetch_add(1, Ordering::Relaxed);
    });

    // The peer stops: its proxies here become dead names, and lookups fail
    // with an error while it is away (no hang).
    drop(a);
    assert!(old.wait_dead(Timeout::After(Duration::from_secs(20))), "the proxy of a stopped peer stayed alive");
    let t = Instant::now();
    assert!(b.lookup("svc@a").is_err());
    assert!(t.elapsed() < Duration::from_secs(30));

    // It comes back on the same address: the link is dialled again.
    let started = Instant::now();
    let a2 = loop {
        match Node::start(NodeConfig::new(ia.clone(), trust_a.clone(), a_addr)) {
            Ok(n) => break n,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                eprintln!("rebinding {a_addr}: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("cannot start the peer again on {a_addr}: {e}"),
        }
    };
    let (mut rx2, tx2) = ferry::port().unwrap();
    a2.export("svc", tx2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ups.load(Ordering::Relaxed) == 0 || !b.links().iter().any(|l| l.peer == "a" && l.up) {
        assert!(Instant::now() < deadline, "the link never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let new = b.lookup("svc@a").expect("a lookup after the link came back");
    new.send(Message::new(5).with_body(*b"again"), Timeout::After(Duration::from_secs(10))).unwrap();
    let m = rx2.recv(Timeout::After(Duration::from_secs(10))).unwrap();
    assert_eq!((m.op(), m.body()), (5, &b"again"[..]));
    // The old proxy never re-binds to the new incarnation.
    assert!(old.is_dead());
    drop(redial);
}

// ---------------------------------------------------------------------------
// `ferry-netd`, the real binary, as a service: each test gives it a name
// server of its own and links it to a node in this process.

/// A child process killed when the test lets go of it, passing or not: a
/// failed test leaves no daemon or name server behind.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An empty directory for one test, that every user may enter.
fn fresh_dir(tag: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("ferry-netd-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// [`fresh_dir`] with a name server of its own serving at `DIR/bootstrap`,
/// on a thread of this process: the directory and the socket's path.
fn with_names(tag: &str) -> (PathBuf, PathBuf) {
    let dir = fresh_dir(tag);
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind(&boot).unwrap().spawn().unwrap();
    (dir, boot)
}

/// Two identities, `me` for the daemon and `peer` for the node in this
/// process; the daemon's cert.pem and key.pem, and the peer's certificate
/// as `PEER.pem`, are written into `id` (made).
fn identities(id: &Path, me: &str, peer: &str) -> (Identity, Identity) {
    let (mine, theirs) = (Identity::generate(me).unwrap(), Identity::generate(peer).unwrap());
    std::fs::create_dir_all(id).unwrap();
    let (cert, key) = mine.to_pem();
    std::fs::write(id.join("cert.pem"), cert).unwrap();
    std::fs::write(id.join("key.pem"), key).unwrap();
    std::fs::write(id.join(format!("{peer}.pem")), theirs.to_pem().0).unwrap();
    (mine, theirs)
}

/// A node in this process called `me`, trusting `peer` as `peer_name`.
fn node(me: Identity, peer_name: &str, peer: &Identity) -> Node {
    Node::start(NodeConfig::new(me, vec![Peer { name: peer_name.into(), cert: peer.cert.clone() }], "127.0.0.1:0".parse().unwrap())).unwrap()
}

/// Starts `ferry-netd` with the identity in `id`, trusting `peer` (its
/// certificate `id/PEER.pem`), listening on a free loopback port, with the
/// name server at `boot` and `args` besides; waits until it is ready and
/// returns it and the address it listens on. Its standard error is kept
/// for the test to read if `stderr`.
fn netd(id: &Path, peer: &str, boot: &Path, args: &[String], stderr: bool) -> (Killed, SocketAddr) {
    let mut daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
            .arg("--identity")
            .arg(id)
            .args(["--listen", "127.0.0.1:0", "--trust"])
            .arg(format!("{peer}={}", id.join(format!("{peer}.pem")).display()))
            .args(args)
            .env("FERRY_BOOTSTRAP", boot)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if stderr { Stdio::piped() } else { Stdio::null() })
            .spawn()
            .expect("start ferry-netd"),
    );
    let mut ready = String::new();
    std::io::BufReader::new(daemon.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    let addr = ready.trim().rsplit(' ').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("ferry-netd said {ready:?}"));
    (daemon, addr)
}

/// Owned arguments, for [`netd`].
fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

/// Polls `find` until it gives a live right, for at most 20 s.
fn until_found(what: &str, find: &mut dyn FnMut() -> Option<ferry::SendRight>) -> ferry::SendRight {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(r) = find().filter(|r| !r.is_dead()) {
            return r;
        }
        assert!(Instant::now() < deadline, "{what} was not found (again)");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends op `op` through `right`, and `rx` must get it.
fn reach(right: &ferry::SendRight, rx: &mut ferry::ReceiveRight, op: u32) {
    right.send(Message::new(op), WAIT).unwrap();
    assert_eq!(rx.recv(WAIT).unwrap().op(), op);
}

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));

/// A `ferry-netd` stopped with SIGTERM (or SIGINT, SIGHUP) closes its links
/// before it exits: the peer turns its proxies of that host into dead names
/// at once, not after the idle timeout (60 s here, past this test's bound),
/// and the daemon exits with success.
#[test]
fn a_daemon_stopped_by_a_signal_tells_its_peers_at_once() {
    for (signal, name) in [(rustix::process::Signal::TERM, "SIGTERM"), (rustix::process::Signal::INT, "SIGINT")] {
        let (dir, boot) = with_names(&format!("stop-{name}"));
        let (_echo_rx, echo_tx) = ferry::port().unwrap();
        ferry::Bootstrap::connect_to(&boot).unwrap().register("echo", &echo_tx).unwrap();
        let (ia, ib) = identities(&dir, "a", "b");
        let (mut daemon, addr) = netd(&dir, "b", &boot, &args(&["--export", "echo", "--idle-timeout-ms", "60000"]), true);
        let mut cfg = NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], "127.0.0.1:0".parse().unwrap());
        cfg.idle_timeout = Duration::from_secs(60);
        let b = Node::start(cfg).unwrap();
        b.connect("a", addr).unwrap();
        let echo = b.lookup("echo@a").unwrap();
        let pid = rustix::process::Pid::from_raw(daemon.0.id() as i32).unwrap();
        let t = Instant::now();
        rustix::process::kill_process(pid, signal).unwrap();
        assert!(echo.wait_dead(WAIT), "{name}: the peer's proxy stayed alive");
        assert!(t.elapsed() < Duration::from_secs(10));
        let status = daemon.0.wait().unwrap();
        let mut said = String::new();
        std::io::Read::read_to_string(&mut daemon.0.stderr.take().unwrap(), &mut said).unwrap();
        assert!(status.success(), "{name}: {status}: {said}");
        assert!(said.contains(&format!("stopping on {name}")), "{said}");
        assert!(!b.links().iter().any(|l| l.up), "{name}: the link stayed up");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Set in the environment of this test binary run as a name server of its
/// own (a process the test can kill and start again).
const NAME_SERVER_CHILD: &str = "FERRY_NETD_TEST_NAME_SERVER";

/// A name server restarted under a running `ferry-netd` has lost every
/// registration; the daemon notices (it looks every two seconds) and
/// registers its status name and its imports again, and the imported name
/// reaches the remote port as before. The name server is this test binary
/// run again as one (so the test can kill it).
#[test]
fn a_restarted_name_server_gets_the_daemons_names_back() {
    if let Ok(path) = std::env::var(NAME_SERVER_CHILD) {
        let _ = ferry::NameServer::bind(Path::new(&path)).unwrap().serve();
        return;
    }
    let dir = fresh_dir("renames");
    let boot = dir.join("bootstrap");
    let name_server = || {
        let child = Killed(
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "a_restarted_name_server_gets_the_daemons_names_back", "--nocapture"])
                .env(NAME_SERVER_CHILD, &boot)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while ferry::Bootstrap::connect_to(&boot).is_err() {
            assert!(Instant::now() < deadline, "the name server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    };
    let first = name_server();
    let (ia, ib) = identities(&dir, "a", "b");
    let b = node(ib, "a", &ia);
    let (mut svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    let (daemon, _) = netd(&dir, "b", &boot, &args(&["--import", "svc@b", "--peer", &format!("b={}", b.local_addr().unwrap())]), false);
    let lookup = || ferry::Bootstrap::connect_to(&boot).unwrap().lookup("svc@b");
    reach(&lookup().unwrap(), &mut svc, 1);
    // The name server goes, and another starts at the same path, empty.
    drop(first);
    let second = name_server();
    assert!(lookup().is_err(), "the new name server started with names");
    until_found("the status name", &mut || ferry::Bootstrap::connect_to(&boot).unwrap().lookup(ferry_net::status::NAME).ok());
    reach(&until_found("svc@b", &mut || lookup().ok()), &mut svc, 2);
    drop((daemon, second));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A peer that is down when `ferry-netd` starts does not stop it: after
/// trying for 20 s the daemon starts without the link, says so, and dials
/// in the background; when the peer comes up, the link comes up and the
/// daemon's `--import` of it is registered then, and reaches the peer.
#[test]
fn a_daemon_whose_peer_is_down_at_start_links_when_it_comes_up() {
    let (dir, boot) = with_names("late-peer");
    let (ib, ia) = identities(&dir, "b", "a");
    let trust_a = vec![Peer { name: "b".into(), cert: ib.cert.clone() }];
    // An address for the peer, free again once this node is gone.
    let a_addr = Node::start(NodeConfig::new(ia.clone(), trust_a.clone(), "127.0.0.1:0".parse().unwrap())).unwrap().local_addr().unwrap();
    let (mut daemon, _) = netd(&dir, "a", &boot, &args(&["--import", "svc@a", "--peer", &format!("a={a_addr}")]), false);
    assert!(daemon.0.try_wait().unwrap().is_none(), "ferry-netd stopped with its peer down");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    assert!(names.lookup("svc@a").is_err(), "a name of a host never reached was registered");
    // The peer comes up at its address.
    let started = Instant::now();
    let a = loop {
        match Node::start(NodeConfig::new(ia.clone(), trust_a.clone(), a_addr)) {
            Ok(n) => break n,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                eprintln!("rebinding {a_addr}: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("cannot start the peer on {a_addr}: {e}"),
        }
    };
    let (mut svc, svc_tx) = ferry::port().unwrap();
    a.export("svc", svc_tx);
    reach(&until_found("svc@a after the peer came up", &mut || names.lookup("svc@a").ok()), &mut svc, 3);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Servers restart on both sides of a running `ferry-netd`: a local server
/// it exports registers a new port under the same name, and a remote
/// server it imports is exported anew by its host. New lookups of each
/// name, here and at the peer, find the new port within seconds, while the
/// old proxies stay dead.
#[test]
fn restarted_servers_are_exported_and_imported_again() {
    let (dir, boot) = with_names("restarts");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let (mut local1, local1_tx) = ferry::port().unwrap();
    names.register("svc", &local1_tx).unwrap();
    drop(local1_tx);
    let (ix, ib) = identities(&dir, "x", "b");
    let b = node(ib, "x", &ix);
    let (mut remote1, remote1_tx) = ferry::port().unwrap();
    b.export("rsvc", remote1_tx);
    let peer = format!("b={}", b.local_addr().unwrap());
    let (daemon, _) = netd(&dir, "b", &boot, &args(&["--export", "svc", "--import", "rsvc@b", "--peer", &peer]), false);

    // The imported remote server restarts: its host exports a new port.
    let old_import = names.lookup("rsvc@b").unwrap();
    reach(&old_import, &mut remote1, 1);
    drop(remote1);
    assert!(old_import.wait_dead(WAIT), "the proxy of a dead remote port stayed alive");
    let (mut remote2, remote2_tx) = ferry::port().unwrap();
    b.export("rsvc", remote2_tx);
    reach(&until_found("rsvc@b", &mut || names.lookup("rsvc@b").ok()), &mut remote2, 2);
    assert!(old_import.is_dead(), "an old proxy came back to life");

    // The exported local server restarts: it registers a new port here.
    let old_export = b.lookup("svc@x").unwrap();
    reach(&old_export, &mut local1, 3);
    drop(local1);
    assert!(old_export.wait_dead(WAIT), "the peer's proxy of a dead port stayed alive");
    let (mut local2, local2_tx) = ferry::port().unwrap();
    names.register("svc", &local2_tx).unwrap();
    reach(&until_found("svc@x", &mut || b.lookup("svc@x").ok()), &mut local2, 4);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `--import` of a trusted host that links to this one (it is not a
/// `--peer` here) waits for that link instead of failing the start, and is
/// registered once the host has linked.
#[test]
fn an_import_of_a_host_that_links_in_later_is_registered_then() {
    let (dir, boot) = with_names("inbound");
    let (ix, ib) = identities(&dir, "x", "b");
    let (daemon, addr) = netd(&dir, "b", &boot, &args(&["--import", "svc@b"]), false);
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    assert!(names.lookup("svc@b").is_err());
    // Host b links in, and exports `svc`.
    let b = node(ib, "x", &ix);
    let (mut svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    b.connect("x", addr).unwrap();
    reach(&until_found("svc@b after its host linked in", &mut || names.lookup("svc@b").ok()), &mut svc, 6);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Uid `nobody`, the other user of the tests that need one.
const NOBODY: u32 = 65534;

/// A system name server and a root `ferry-netd --system-names` importing
/// `svc@b` from a node `b` of this process (whose port is `svc`), in a
/// fresh directory every user may enter (only root writes to it).
struct SystemImport {
    dir: PathBuf,
    boot: PathBuf,
    b: Node,
    svc: ferry::ReceiveRight,
    daemon: Killed,
}

fn system_import(tag: &str) -> SystemImport {
    let dir = fresh_dir(tag);
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind_with_mode(&boot, 0o666).unwrap().spawn().unwrap();
    let id = dir.join("id");
    let (ix, ib) = identities(&id, "x", "b");
    let b = node(ib, "x", &ix);
    let (svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    let peer = format!("b={}", b.local_addr().unwrap());
    let (daemon, _) = netd(&id, "b", &boot, &args(&["--system-names", "--import", "svc@b", "--peer", &peer]), false);
    SystemImport { dir, boot, b, svc, daemon }
}

/// Runs test `test` of this binary as uid nobody, with `svc@b` in the
/// environment variable `role` and the name server at `boot`: the binary
/// is copied into `dir`, where that user may run it.
fn as_nobody(dir: &Path, boot: &Path, test: &str, role: &str) -> std::process::Output {
    nobody_command(dir, boot, test, role, "svc@b").stdin(Stdio::null()).output().unwrap()
}

/// The command [`as_nobody`] runs, with `value` in `role`, for a caller
/// that adds to it.
fn nobody_command(dir: &Path, boot: &Path, test: &str, role: &str, value: &str) -> Command {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let copy = dir.join("as-another-user");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&copy);
    cmd.args(["--exact", test, "--nocapture"])
        .env(role, value)
        .env("FERRY_BOOTSTRAP", boot)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY);
    cmd
}

/// Set in the environment of this test binary run as another user's
/// program: the name to look up and send op 31 to.
const OTHER_USER_CLIENT: &str = "FERRY_NETD_TEST_OTHER_USER_LOOKUP";

/// A `ferry-netd` run by root with `--system-names` beside a system name
/// server registers its imports as system names: another user (uid
/// nobody) finds `NAME@HOST` with an ordinary lookup and reaches the far
/// port through it, where without the flag only root would. The other
/// user's program is this test binary, copied where that user may run it.
#[test]
fn system_names_offer_a_root_daemons_imports_to_every_user() {
    if let Ok(name) = std::env::var(OTHER_USER_CLIENT) {
        let mut names = ferry::Bootstrap::connect().unwrap();
        names.lookup(&name).unwrap().send(Message::new(31), WAIT).unwrap();
        println!("sent as uid {}", rustix::process::getuid().as_raw());
        return;
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped system_names_offer_a_root_daemons_imports_to_every_user: starting a process as another user needs root");
        return;
    }
    let SystemImport { dir, boot, b: _b, mut svc, daemon } = system_import("system-names");
    let out = as_nobody(&dir, &boot, "system_names_offer_a_root_daemons_imports_to_every_user", OTHER_USER_CLIENT);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("sent as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(svc.recv(WAIT).unwrap().op(), 31, "the other user's message did not cross");
    // The status name is a system name too: `ferry names` and `ferry stat`
    // find the network server for every user.
    let list = ferry::Bootstrap::connect_to(&boot).unwrap().list().unwrap();
    for name in ["svc@b", ferry_net::status::NAME] {
        assert!(list.iter().any(|e| e.name == name && e.uid == ferry::nameserver::SYSTEM_UID), "{name} is not a system name: {list:?}");
    }
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Set in the environment of this test binary run as another user's
/// program: the import to look up, send op 31 through, and then wreck.
const SABOTEUR: &str = "FERRY_NETD_TEST_SABOTEUR";

/// The other user's part of
/// [`one_users_right_to_a_system_import_is_its_own`]: reaches the import
/// once, then does to its rights to the import and to the status server
/// what only the kernel limits (a send buffer of one byte, non-blocking,
/// shut down both ways), and tries to pass itself off as the name server
/// by sending a port of its own as a service port.
fn sabotage(import: &str) {
    use std::os::fd::AsFd;
    let mut names = ferry::Bootstrap::connect().unwrap();
    let right = names.lookup(import).unwrap();
    right.send(Message::new(31), WAIT).unwrap();
    // A port of its own offered as one the name server made: taken from
    // root only, so it is an ordinary message, refused for its receive
    // right, which comes back.
    let (rx, tx) = ferry::port().unwrap();
    let (mut answers, to_answers) = ferry::port().unwrap();
    let forged = Message::new(ferry::bootstrap::SERVICE_PORT)
        .with_body(0u32.to_le_bytes().to_vec())
        .with_item(ferry::Item::Receive(rx))
        .with_item(ferry::Item::Send(tx.try_clone().unwrap()))
        .with_reply(answers.make_send_once().unwrap());
    drop(to_answers);
    right.send(forged, WAIT).unwrap();
    let answer = answers.recv(WAIT).unwrap();
    let (refusal, _) = ferry_net::Refusal::of(&answer).expect("a refusal");
    println!("forged port refused: {refusal:?}");
    let status = names.lookup(ferry_net::status::NAME).unwrap();
    for r in [&right, &status] {
        let sock = r.as_fd();
        rustix::net::sockopt::set_socket_send_buffer_size(sock, 1).unwrap();
        let flags = rustix::fs::fcntl_getfl(sock).unwrap();
        rustix::fs::fcntl_setfl(sock, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
        rustix::net::shutdown(sock, rustix::net::Shutdown::Both).unwrap();
    }
    println!("sabotaged as uid {}", rustix::process::getuid().as_raw());
}

/// Each user's lookup of a root `ferry-netd`'s system names gets a port of
/// its own (the name server makes one per lookup and the daemon serves it
/// as another proxy of the import, or another status port): another user
/// (nobody) that shuts down its rights to the import and to the status
/// server, and shrinks their buffers, leaves root's rights, new lookups
/// and the status working. With one port for all, every user's right was
/// that one socket, and one user's shutdown was everyone's. A port sent as
/// the name server would send it is taken from root only.
#[test]
fn one_users_right_to_a_system_import_is_its_own() {
    if let Ok(import) = std::env::var(SABOTEUR) {
        return sabotage(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped one_users_right_to_a_system_import_is_its_own: starting a process as another user needs root");
        return;
    }
    let SystemImport { dir, boot, b: _b, mut svc, daemon } = system_import("own-right");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let before = until_found("svc@b", &mut || names.lookup("svc@b").ok());
    reach(&before, &mut svc, 30);
    let out = as_nobody(&dir, &boot, "one_users_right_to_a_system_import_is_its_own", SABOTEUR);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("sabotaged as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("forged port refused: ReceiveRight"), "{said}");
    assert_eq!(svc.recv(WAIT).unwrap().op(), 31, "the other user's message did not cross");

    // Root's right from before, and a new lookup, still reach the port.
    reach(&before, &mut svc, 32);
    reach(&names.lookup("svc@b").unwrap(), &mut svc, 33);
    let status = ferry_net::status::query(&names.lookup(ferry_net::status::NAME).unwrap()).expect("the status server still answers");
    assert!(status.imports.iter().any(|i| i == "svc@b"), "{status:?}");
    // Nothing else came: the forged port did not become a proxy.
    assert!(matches!(svc.recv(Timeout::millis(200)), Err(ferry::RecvError::Timeout)));
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `main` (a proxy) a port made as a name server makes one for user
/// `uid`'s lookup of it, and returns the send right to that port.
fn port_for_lookup(main: &ferry::SendRight, uid: u32) -> ferry::SendRight {
    let (rx, tx) = ferry::port().unwrap();
    let m = Message::new(ferry::bootstrap::SERVICE_PORT)
        .with_body(uid.to_le_bytes().to_vec())
        .with_item(ferry::Item::Receive(rx))
        .with_item(ferry::Item::Send(tx.try_clone().unwrap()));
    main.send(m, WAIT).unwrap();
    tx
}

/// Whether the link to `peer` holds `n` imports, within 10 s.
fn imports_become(node: &Node, peer: &str, n: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if node.links().iter().any(|l| l.peer == peer && l.imports == n) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Ports a system name server makes for lookups of a proxy (as root,
/// [`ferry::bootstrap::SERVICE_PORT`]) are served as more proxies of the
/// same import, each charged to the user it was made for: past a user's
/// share of the link's proxies its ports are dropped (dead names) and
/// another user's are still taken; a right to one goes home as the
/// original port; and the import is released only when the last of them
/// and the proxy itself are gone.
#[test]
fn ports_made_for_lookups_of_a_proxy_are_served_within_each_users_share() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped ports_made_for_lookups_of_a_proxy_are_served_within_each_users_share: a node takes such ports from root only");
        return;
    }
    let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
    let mut config = NodeConfig::new(ia.clone(), vec![Peer { name: "b".into(), cert: ib.cert.clone() }], "127.0.0.1:0".parse().unwrap());
    config.max_proxies_per_peer = 8;
    let a = Node::start(config).unwrap();
    let b = node(ib, "a", &ia);
    a.connect("b", b.local_addr().unwrap()).unwrap();
    let (mut svc, svc_tx) = ferry::port().unwrap();
    let original = ferry_net::node::key_of(std::os::fd::AsFd::as_fd(&svc_tx)).unwrap();
    b.export("svc", svc_tx);
    let main = a.lookup("svc@b").unwrap();

    // Eight proxies at most, the looked-up one charged to nobody in
    // particular: one user may have half of the seven left.
    let ports: Vec<_> = (0..5).map(|_| port_for_lookup(&main, 4242)).collect();
    for (i, p) in ports[3..].iter().enumerate() {
        assert!(p.wait_dead(WAIT), "port {} past the user's share was served", i + 3);
    }
    for (i, p) in ports[..3].iter().enumerate() {
        reach(p, &mut svc, 40 + i as u32);
    }
    let other = port_for_lookup(&main, 4343);
    reach(&other, &mut svc, 50);

    // Sent back to its host inside a message, a right to one of them is the
    // original port there, not a proxy of a proxy.
    ports[0].send(Message::new(60).with_item(ferry::Item::Send(ports[1].try_clone().unwrap())), WAIT).unwrap();
    let mut m = svc.recv(WAIT).unwrap();
    assert_eq!(m.op(), 60);
    let Some(ferry::Item::Send(back)) = m.take_items().pop() else { panic!("no right in {m:?}") };
    assert_eq!(ferry_net::node::key_of(std::os::fd::AsFd::as_fd(&back)).unwrap(), original, "the right did not come home as the original");

    // The import lives while any of its proxies does.
    drop(main);
    drop(ports);
    reach(&other, &mut svc, 70);
    assert!(imports_become(&a, "b", 1), "the import went before its last proxy");
    drop(other);
    assert!(imports_become(&a, "b", 0), "the import outlived its proxies");
}

/// One user's ports made for lookups of a proxy are served up to
/// `ADOPTED_PER_USER` per link (each costs the node a socket, its
/// readiness and a task), past which they are dead names; another user's
/// are still served, and the user gets room again as it lets go.
#[test]
fn one_users_ports_made_for_lookups_stop_at_their_cap() {
    use ferry_net::node::ADOPTED_PER_USER;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped one_users_ports_made_for_lookups_stop_at_their_cap: a node takes such ports from root only");
        return;
    }
    // Three descriptors and more a port, on both sides in this process.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(rustix::process::Resource::Nofile, rustix::process::Rlimit { current: limit.maximum, ..limit }).unwrap();
    let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
    let a = node(ia.clone(), "b", &ib);
    let b = node(ib, "a", &ia);
    a.connect("b", b.local_addr().unwrap()).unwrap();
    let (mut svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    let main = a.lookup("svc@b").unwrap();
    let mut ports: Vec<_> = (0..=ADOPTED_PER_USER).map(|_| port_for_lookup(&main, 4242)).collect();
    assert!(ports[ADOPTED_PER_USER].wait_dead(WAIT), "a port past the user's cap was served");
    reach(&ports[0], &mut svc, 1);
    reach(&ports[ADOPTED_PER_USER - 1], &mut svc, 2);
    reach(&port_for_lookup(&main, 4343), &mut svc, 3);
    // Let go of half: new lookups are served again.
    ports.truncate(ADOPTED_PER_USER / 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let again = loop {
        let p = port_for_lookup(&main, 4242);
        if !p.wait_dead(Timeout::millis(200)) {
            break p;
        }
        assert!(Instant::now() < deadline, "the user's ports were not given back");
    };
    reach(&again, &mut svc, 4);
}

/// Set in the environment of this test binary run as another user's
/// program: the import to send large messages through, one on each of
/// many ports of its own.
const FLOODER: &str = "FERRY_NETD_TEST_FLOODER";

/// How many ports of its own the flooding user looks up, each sent one
/// message of two regions of 16 MiB by copy (a frame of 32 MiB).
const FLOOD_PORTS: usize = 24;

/// The other user's part of
/// [`large_messages_waiting_for_credit_are_not_held_by_the_daemon`]:
/// looks the import up [`FLOOD_PORTS`] times (a port of its own each
/// time) and sends each one message with two 16 MiB regions, which cross
/// in the frame, from one memfd that costs it 16 MiB.
fn flood(import: &str) {
    let mut names = ferry::Bootstrap::connect().unwrap();
    let mut region = ferry::Region::new(ferry_net::frame::MAX_EAGER_REGION).unwrap();
    let rights: Vec<_> = (0..FLOOD_PORTS).map(|_| names.lookup(import).unwrap()).collect();
    for r in &rights {
        let m = Message::new(41).with_item(ferry::Item::Region(region.by_copy().unwrap())).with_item(ferry::Item::Region(region.by_copy().unwrap()));
        r.send(m, WAIT).unwrap();
    }
    println!("flooded {} ports as uid {}", rights.len(), rustix::process::getuid().as_raw());
}

/// The most memory `pid` has had resident (`VmHWM`), in bytes.
fn peak_resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kb.expect("VmHWM in /proc/PID/status") << 10
}

/// A user that sends large messages through many ports of its own to a
/// root `ferry-netd`'s system import (one for each lookup) does not make
/// the daemon hold them all: a frame is made only once its stream has
/// credit for it. Each proxy copied its message's regions out and held
/// the frame, twice over, while the stream waited, so user nobody's 24
/// messages of 32 MiB took the daemon past 1.5 GiB; every message still
/// arrives.
#[test]
fn large_messages_waiting_for_credit_are_not_held_by_the_daemon() {
    if let Ok(import) = std::env::var(FLOODER) {
        return flood(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped large_messages_waiting_for_credit_are_not_held_by_the_daemon: starting a process as another user needs root");
        return;
    }
    let SystemImport { dir, boot, b: _b, mut svc, daemon } = system_import("flood");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    until_found("svc@b", &mut || names.lookup("svc@b").ok());
    let before = peak_resident(daemon.0.id());
    let out = as_nobody(&dir, &boot, "large_messages_waiting_for_credit_are_not_held_by_the_daemon", FLOODER);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("flooded {FLOOD_PORTS} ports as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    for i in 0..FLOOD_PORTS {
        let m = svc.recv(Timeout::After(Duration::from_secs(60))).unwrap_or_else(|e| panic!("message {i} did not arrive: {e}"));
        assert_eq!((m.op(), m.items().len()), (41, 2));
    }
    // The frames waiting for the stream's credit are not made yet;
    // before, all 24 were held twice over.
    let grew = peak_resident(daemon.0.id()).saturating_sub(before);
    assert!(grew < 512 << 20, "the daemon grew by {} MiB for one user's messages", grew >> 20);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Set in the environment of this test binary run as another user's
/// program: the import to flood with small messages through many ports of
/// its own.
const PORTS_FLOODER: &str = "FERRY_NETD_TEST_PORTS_FLOODER";

/// How many ports of its own the flooding user looks up and keeps full.
const FLOODED_PORTS: usize = 256;

/// The other user's part of
/// [`a_user_flooding_an_import_through_many_ports_holds_up_anothers_messages_by_few`]:
/// looks the import up [`FLOODED_PORTS`] times (a port of its own each
/// time) and keeps every one of them full of 1 KiB messages until its
/// standard input closes (or two minutes pass).
fn flood_ports(import: &str) {
    let mut names = ferry::Bootstrap::connect().unwrap();
    let ports: Vec<_> = (0..FLOODED_PORTS).map(|_| names.lookup(import).unwrap()).collect();
    keep_full(&ports, || Message::new(41).with_body(vec![7u8; 1024]));
}

/// Keeps every one of `ports` full of `message()`s, as the other user's
/// part of a flood, until standard input ends (or two minutes pass).
fn keep_full(ports: &[ferry::SendRight], message: impl Fn() -> Message) {
    use std::io::Read;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        s2.store(true, Ordering::Relaxed);
    });
    println!("flooding {} ports as uid {}", ports.len(), rustix::process::getuid().as_raw());
    let end = Instant::now() + Duration::from_secs(120);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        let mut full = 0;
        for p in ports {
            full += usize::from(p.send(message(), Timeout::Zero).is_err());
        }
        if full == ports.len() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Another user (nobody) keeping many ports of its own to a root
/// `ferry-netd`'s system import full (a port for each lookup, all sending
/// to the far host's one port on the import's one stream) holds root's
/// messages to the same import up by a few of its messages, not by one
/// for each of its ports: the import's senders take the stream in turn by
/// user. Both users' messages come to one port here, so their order is
/// the order they crossed in. Taken in the order the proxies came, each
/// of root's waited behind one message of each of the other user's 256
/// ports and what was in flight: 257 to 399 of its messages, never fewer;
/// now the best of ten rounds waits behind a few.
#[test]
fn a_user_flooding_an_import_through_many_ports_holds_up_anothers_messages_by_few() {
    if let Ok(import) = std::env::var(PORTS_FLOODER) {
        return flood_ports(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_user_flooding_an_import_through_many_ports_holds_up_anothers_messages_by_few: starting a process as another user needs root");
        return;
    }
    let test = "a_user_flooding_an_import_through_many_ports_holds_up_anothers_messages_by_few";
    let SystemImport { dir, boot, b: _b, mut svc, daemon } = system_import("ports-flood");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let mine = until_found("svc@b", &mut || names.lookup("svc@b").ok());
    reach(&mine, &mut svc, 42);
    let mut other = nobody_command(&dir, &boot, test, PORTS_FLOODER, "svc@b").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let said = said_line(&mut other, "as uid");
    assert!(said.contains(&format!("flooding {FLOODED_PORTS} ports as uid {NOBODY}")), "{said}");
    // The flood is on once the other user's messages come.
    for _ in 0..2000 {
        assert_eq!(svc.recv(WAIT).unwrap().op(), 41, "a message of root's before it sent one");
    }
    let mut before = Vec::new();
    for _ in 0..10 {
        // What crossed so far is read first.
        for _ in 0..100_000 {
            if svc.recv(Timeout::Zero).is_err() {
                break;
            }
        }
        mine.send(Message::new(42), WAIT).unwrap();
        before.push(others_before(&mut svc, |m| m.op() == 42, "root's message"));
    }
    drop(other.stdin.take());
    let _ = other.wait();
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    println!("the other user's messages before each of root's ten: {before:?}");
    // Root's message waits for the other user's one turn, and behind what
    // is in flight on the stream (its window, which grows while the stream
    // flows, and the far port's queue), which varies from round to round;
    // what crossed while this test had not sent yet (it may lose its CPU
    // between reading and sending) counts too, and under load that is
    // most of it (rounds of 2 to 36 on a quiet machine, 179 to 544 on a
    // busy one). Taken in the order the proxies came, no round could wait
    // for fewer than one message of each of the other user's ports (the
    // best round was 257 to 284), so the best round is what is checked,
    // against that floor.
    let best = before.iter().copied().min().unwrap_or(usize::MAX);
    assert!(best < FLOODED_PORTS, "root's messages waited behind {before:?} of the other user's: one of each of its ports, or more");
}

/// Set in the environment of this test binary run as another user's
/// program: the import to call with reply rights it has filled.
const FILLER: &str = "FERRY_NETD_TEST_FILLER";

/// How many calls the filling user makes, each with a reply right whose
/// socket it filled first.
const FILLED_CALLS: usize = 300;

/// The other user's part of
/// [`replies_to_send_once_rights_their_holder_filled_wait_a_few_at_a_time`]:
/// makes [`FILLED_CALLS`] send-once rights, fills each one's socket
/// through a copy of its descriptor (which it keeps, as any holder of a
/// descriptor can), sends each as the reply right of a call to the import,
/// and waits with the rights' receivers open.
fn fill_replies(import: &str) {
    use std::os::fd::AsFd;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(rustix::process::Resource::Nofile, rustix::process::Rlimit { current: limit.maximum, ..limit }).unwrap();
    let mut names = ferry::Bootstrap::connect().unwrap();
    let right = names.lookup(import).unwrap();
    let mut receivers = Vec::new();
    for _ in 0..FILLED_CALLS {
        let (rx, once) = ferry::reply_pair().unwrap();
        let copy = rustix::io::dup(once.as_fd()).unwrap();
        let mut full = false;
        for _ in 0..100_000 {
            match rustix::net::send(&copy, &[0u8; 1024], rustix::net::SendFlags::DONTWAIT) {
                Ok(_) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("filling a send-once right's socket: {e}"),
            }
        }
        assert!(full, "the send-once right's socket never filled");
        drop(copy);
        right.send(Message::new(51).with_reply(once), WAIT).unwrap();
        receivers.push(rx);
    }
    println!("made {} calls with filled reply rights as uid {}", receivers.len(), rustix::process::getuid().as_raw());
    std::thread::sleep(Duration::from_secs(4));
}

/// The threads a process has now.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok()).expect("Threads in /proc/PID/status")
}

/// A reply to a send-once right whose socket is full waits for it on a
/// thread of its own for up to the operation timeout; a user that fills
/// the sockets of the reply rights of its calls (a socket it made, and
/// may write to through a copy of its descriptor) has at most a few of
/// its replies wait at once, the rest dropped. Before, every one waited:
/// user nobody's 300 calls to a root `ferry-netd`'s system import took
/// the daemon to hundreds of threads, each holding its reply, and with
/// more a second the waits queued without bound. Root's calls are still
/// answered.
#[test]
fn replies_to_send_once_rights_their_holder_filled_wait_a_few_at_a_time() {
    if let Ok(import) = std::env::var(FILLER) {
        return fill_replies(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped replies_to_send_once_rights_their_holder_filled_wait_a_few_at_a_time: starting a process as another user needs root");
        return;
    }
    let SystemImport { dir, boot, b: _b, svc, daemon } = system_import("filled-replies");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let root_right = until_found("svc@b", &mut || names.lookup("svc@b").ok());
    // The far service answers every call, for as long as calls come.
    let answered = Arc::new(AtomicUsize::new(0));
    let server = {
        let answered = answered.clone();
        std::thread::spawn(move || {
            let mut svc = svc;
            while let Ok(mut m) = svc.recv(Timeout::After(Duration::from_secs(10))) {
                if let Some(reply) = m.take_reply() {
                    let _ = reply.send(Message::new(m.op() + 1), Timeout::Zero);
                }
                answered.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let pid = daemon.0.id();
    let base = threads(pid);
    let attacker = {
        let (dir, boot) = (dir.clone(), boot.clone());
        std::thread::spawn(move || as_nobody(&dir, &boot, "replies_to_send_once_rights_their_holder_filled_wait_a_few_at_a_time", FILLER))
    };
    let mut most = base;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !attacker.is_finished() && Instant::now() < deadline {
        most = most.max(threads(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = attacker.join().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("made {FILLED_CALLS} calls with filled reply rights as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(answered.load(Ordering::Relaxed) >= FILLED_CALLS, "the far service answered {} calls", answered.load(Ordering::Relaxed));
    assert!(most < base + 64, "the daemon went from {base} to {most} threads for one user's replies");
    // Root's call through the same import is answered.
    let (mut rx, once) = ferry::reply_pair().unwrap();
    root_right.send(Message::new(70).with_reply(once), WAIT).unwrap();
    assert_eq!(rx.recv(WAIT).unwrap().op(), 71);
    drop(daemon);
    drop(root_right);
    let _ = server.join();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Set in the environment of this test binary run as another user's
/// program: the import to send descriptors through, on many ports of its
/// own, while its stream waits.
const FD_FLOODER: &str = "FERRY_NETD_TEST_FD_FLOODER";

/// How many ports of its own the descriptor-flooding user looks up, each
/// sent one message of [`ferry::message::MAX_ITEMS`] small regions.
const FD_PORTS: usize = 320;

/// The other user's part of
/// [`descriptors_of_messages_waiting_to_cross_are_held_within_a_users_budget`].
fn flood_fds(import: &str) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(rustix::process::Resource::Nofile, rustix::process::Rlimit { current: limit.maximum, ..limit }).unwrap();
    let mut names = ferry::Bootstrap::connect().unwrap();
    let mut region = ferry::Region::new(4096).unwrap();
    let rights: Vec<_> = (0..FD_PORTS).map(|_| names.lookup(import).unwrap()).collect();
    // The kernel may push back first: a user may have no more descriptors
    // in flight than its limit of open files, and those the daemon has
    // not taken off its ports yet count.
    let mut pushed_back = 0;
    for r in &rights {
        let mut m = Message::new(61);
        for _ in 0..ferry::message::MAX_ITEMS {
            m = m.with_item(ferry::Item::Region(region.by_copy().unwrap()));
        }
        match r.send(m, WAIT).map_err(|e| e.into_error()) {
            Ok(()) => {}
            Err(ferry::SendError::TooLarge(_)) => pushed_back += 1,
            Err(e) => panic!("sending descriptors: {e}"),
        }
    }
    println!("sent descriptors through {} ports as uid {} ({pushed_back} sends refused by the kernel's limit of descriptors in flight)", rights.len(), rustix::process::getuid().as_raw());
}

/// The descriptors a process has open now.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Messages waiting to cross (their stream has no credit, as when the far
/// port is slower than its senders) hold their rights and regions, a
/// descriptor each, in the network server. A user with many ports of its
/// own to a root `ferry-netd`'s system import (one for each lookup) had a
/// message wait on each, and 320 messages of 64 regions took the daemon
/// past 20 000 descriptors, the hard limit here, so that nothing more
/// could arrive; now the descriptors one user's waiting messages hold are
/// budgeted, and past the budget a message is refused at once. Root's
/// message with a right is not refused, and the status server still
/// answers root.
#[test]
fn descriptors_of_messages_waiting_to_cross_are_held_within_a_users_budget() {
    if let Ok(import) = std::env::var(FD_FLOODER) {
        return flood_fds(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped descriptors_of_messages_waiting_to_cross_are_held_within_a_users_budget: starting a process as another user needs root");
        return;
    }
    let SystemImport { dir, boot, b: _b, svc, daemon } = system_import("waiting-fds");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let root_right = until_found("svc@b", &mut || names.lookup("svc@b").ok());
    // The far port does not read: its queue, and then its stream's
    // credit, fill, and what is sent to it after waits.
    let mut filled = 0;
    while filled < 10_000 && root_right.send(Message::new(1).with_body(vec![0u8; 60 << 10]), Timeout::millis(200)).is_ok() {
        filled += 1;
    }
    assert!(filled < 10_000, "the import never pushed back");
    let pid = daemon.0.id();
    let attacker = {
        let (dir, boot) = (dir.clone(), boot.clone());
        std::thread::spawn(move || as_nobody(&dir, &boot, "descriptors_of_messages_waiting_to_cross_are_held_within_a_users_budget", FD_FLOODER))
    };
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !attacker.is_finished() && Instant::now() < deadline {
        most = most.max(open_fds(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = attacker.join().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("sent descriptors through {FD_PORTS} ports as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(Duration::from_millis(500));
    most = most.max(open_fds(pid));
    // Root's message with a right, through a port of its own, waits for
    // the stream like the rest: the budget is one user's.
    let (mut me, _keep) = ferry::port().unwrap();
    let (_other, other_tx) = ferry::port().unwrap();
    let fresh = names.lookup("svc@b").unwrap();
    fresh.send(Message::new(62).with_item(ferry::Item::Send(other_tx)).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
    if let Ok(answer) = me.recv(Timeout::millis(1000)) {
        panic!("root's message was refused: {:?}", ferry_net::Refusal::of(&answer));
    }
    assert!(most < 8000, "the daemon had {most} descriptors open for one user's waiting messages");
    let status = ferry_net::status::query(&names.lookup(ferry_net::status::NAME).unwrap()).expect("the status server still answers");
    assert!(status.imports.iter().any(|i| i == "svc@b"), "{status:?}");
    drop(svc);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Set in the environment of this test binary run as another user's
/// program: the import to send messages through that are refused.
const REFUSED_SENDER: &str = "FERRY_NETD_TEST_REFUSED_SENDER";

/// How many messages that cannot cross the refused sender sends.
const REFUSED_MESSAGES: usize = 2000;

/// The other user's part of
/// [`a_user_whose_messages_are_refused_cannot_flood_the_daemons_log`]:
/// sends [`REFUSED_MESSAGES`] messages through the import, each carrying a
/// receive right (which does not cross) and a reply right on which the
/// refusal comes back, and half as many without a reply right (dropped).
fn send_refused(import: &str) {
    let mut names = ferry::Bootstrap::connect().unwrap();
    let right = names.lookup(import).unwrap();
    let (mut answers, _keep) = ferry::port().unwrap();
    let mut refused = 0;
    for i in 0..REFUSED_MESSAGES + REFUSED_MESSAGES / 2 {
        let (rx, _tx) = ferry::port().unwrap();
        let mut m = Message::new(51).with_item(ferry::Item::Receive(rx));
        if i < REFUSED_MESSAGES {
            m = m.with_reply(answers.make_send_once().unwrap());
        }
        right.send(m, WAIT).unwrap();
        if i < REFUSED_MESSAGES {
            refused += usize::from(ferry_net::Refusal::of(&answers.recv(WAIT).unwrap()).is_some());
        }
    }
    println!("refused {refused} as uid {}", rustix::process::getuid().as_raw());
}

/// A user sending a root `ferry-netd` messages that cannot cross (through
/// a system import every user may look up) does not write a line into
/// the daemon's log for each: it wrote one per message refused or
/// dropped, so 3000 messages made 3000 lines, and a loop of them filled
/// whatever holds the log. Such lines are said once a minute.
#[test]
fn a_user_whose_messages_are_refused_cannot_flood_the_daemons_log() {
    if let Ok(import) = std::env::var(REFUSED_SENDER) {
        return send_refused(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_user_whose_messages_are_refused_cannot_flood_the_daemons_log: starting a process as another user needs root");
        return;
    }
    let dir = fresh_dir("refused-log");
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind_with_mode(&boot, 0o666).unwrap().spawn().unwrap();
    let id = dir.join("id");
    let (ix, ib) = identities(&id, "x", "b");
    let b = node(ib, "x", &ix);
    let (mut svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    let peer = format!("b={}", b.local_addr().unwrap());
    let (mut daemon, _) = netd(&id, "b", &boot, &args(&["--system-names", "--import", "svc@b", "--peer", &peer]), true);
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let import = until_found("svc@b", &mut || names.lookup("svc@b").ok());
    reach(&import, &mut svc, 30);
    // The daemon's log, read as it is written.
    let mut stderr = daemon.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut log);
        log
    });
    let out = as_nobody(&dir, &boot, "a_user_whose_messages_are_refused_cannot_flood_the_daemons_log", REFUSED_SENDER);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("refused {REFUSED_MESSAGES} as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    let pid = rustix::process::Pid::from_raw(daemon.0.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let _ = daemon.0.wait();
    let log = reader.join().unwrap();
    let lines = log.lines().filter(|l| l.contains("a message to b's port was")).count();
    println!("lines the daemon logged for the other user's {} messages: {lines}", REFUSED_MESSAGES + REFUSED_MESSAGES / 2);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(lines <= 4, "the daemon logged {lines} lines for one user's refused messages");
}

/// Set in the environment of this test binary run as another user's
/// program: floods a root daemon's system services (see
/// [`a_user_flooding_the_daemons_services_leaves_others_lookups_served`]).
const SERVICE_FLOODER: &str = "FERRY_NETD_TEST_SERVICE_FLOODER";

/// How long the other user floods, in seconds.
const FLOOD_SECS: u64 = 12;

/// The other user's part of
/// [`a_user_flooding_the_daemons_services_leaves_others_lookups_served`]:
/// from many threads, keeps the status server answering queries on every
/// status port it may have, and looks up the status name and the import
/// in a loop, dropping each right at once.
fn flood_services(import: &str) {
    let end = Instant::now() + Duration::from_secs(FLOOD_SECS);
    let lookups = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for t in 0..12 {
        let import = import.to_owned();
        let lookups = lookups.clone();
        threads.push(std::thread::spawn(move || {
            let mut names = ferry::Bootstrap::connect().unwrap();
            if t < 6 {
                // Queries on ports of its own, their answers never read.
                let ports: Vec<_> = (0..10).filter_map(|_| names.lookup(ferry_net::status::NAME).ok()).collect();
                let (_answers, to_answers) = ferry::port().unwrap();
                while Instant::now() < end {
                    for p in &ports {
                        let m = Message::new(ferry_net::status::QUERY).with_reply(to_answers.try_clone().unwrap());
                        let _ = p.send(m, Timeout::millis(100));
                    }
                }
            } else {
                let name = if t % 2 == 0 { ferry_net::status::NAME.to_owned() } else { import };
                while Instant::now() < end {
                    if names.lookup(&name).is_ok() {
                        lookups.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    println!("flooded as uid {} with {} lookups", rustix::process::getuid().as_raw(), lookups.load(Ordering::Relaxed));
}

/// Another user (nobody) that keeps a root `ferry-netd --system-names`
/// busy, with queries on every status port it may have and lookups of the
/// status name and of an import in a loop from many threads, leaves root's
/// lookups of both served: each lookup's port is handed to the daemon on
/// a port every user's lookups share, and a daemon behind on that port
/// made the name server refuse the lookup ("did not take a port").
#[test]
fn a_user_flooding_the_daemons_services_leaves_others_lookups_served() {
    if let Ok(import) = std::env::var(SERVICE_FLOODER) {
        return flood_services(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_user_flooding_the_daemons_services_leaves_others_lookups_served: starting a process as another user needs root");
        return;
    }
    let SystemImport { dir, boot, b: _b, mut svc, daemon } = system_import("service-flood");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let first = until_found("svc@b", &mut || names.lookup("svc@b").ok());
    reach(&first, &mut svc, 30);
    drop(first);
    let (d2, b2) = (dir.clone(), boot.clone());
    let flooder = std::thread::spawn(move || as_nobody(&d2, &b2, "a_user_flooding_the_daemons_services_leaves_others_lookups_served", SERVICE_FLOODER));
    std::thread::sleep(Duration::from_secs(2));
    let (mut tries, mut failed) = (0, Vec::new());
    let end = Instant::now() + Duration::from_secs(FLOOD_SECS - 4);
    while Instant::now() < end {
        tries += 1;
        match names.lookup(ferry_net::status::NAME).map_err(|e| e.to_string()).and_then(|r| ferry_net::status::query(&r).map_err(|e| e.to_string())) {
            Ok(_) => {}
            Err(e) => failed.push(format!("status: {e}")),
        }
        match names.lookup("svc@b") {
            Ok(r) => reach(&r, &mut svc, 34),
            Err(e) => failed.push(format!("svc@b: {e}")),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = flooder.join().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("flooded as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    println!("root's {tries} rounds: {} failed; the other user {}", failed.len(), said.lines().find(|l| l.contains("flooded")).unwrap_or(""));
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failed.is_empty(), "root's lookups failed while another user flooded: {failed:?}");
}

/// Set in the environment of this test binary run as another user's
/// program: `IMPORT,VIA`, the names of two system imports.
const PASSER: &str = "FERRY_NETD_TEST_PASSER";

/// The other user's part of
/// [`a_port_made_for_a_users_lookup_and_passed_on_is_charged_to_that_user`]:
/// looks both names up (a port of its own each, made by the name server)
/// and sends its right to the first through the second (op 21); says so,
/// and holds its rights until its standard input ends.
fn pass_on(names: &str) {
    use std::io::Read;
    let (import, via) = names.split_once(',').unwrap();
    let mut bs = ferry::Bootstrap::connect().unwrap();
    let (right, to) = (bs.lookup(import).unwrap(), bs.lookup(via).unwrap());
    to.send(Message::new(21).with_item(ferry::Item::Send(right)), WAIT).unwrap();
    println!("passed on as uid {}", rustix::process::getuid().as_raw());
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    drop(to);
}

/// The first line of `child`'s standard output (after the test harness's
/// own) that contains `what`, or all it said if none does within a
/// minute; the rest of its output is read and dropped meanwhile, so it
/// never blocks on it.
fn said_line(child: &mut std::process::Child, what: &str) -> String {
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut said = String::new();
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if line.contains(what) {
            return line;
        }
        said += &line;
        said.push('\n');
    }
    said
}

/// The right in `m`, its one item, and whether it is a dead name.
fn right_in(m: &mut Message) -> (ferry::SendRight, bool) {
    match m.take_items().pop() {
        Some(ferry::Item::Send(s)) => {
            let dead = s.is_dead();
            (s, dead)
        }
        other => panic!("not one send right: {other:?}"),
    }
}

/// How many messages arrive on `rx` before the one `mine` picks out
/// (`what`, for the failures): the other user's, ahead of root's.
fn others_before(rx: &mut ferry::ReceiveRight, mine: impl Fn(&Message) -> bool, what: &str) -> usize {
    let mut others = 0;
    loop {
        let m = rx.recv(Timeout::After(Duration::from_secs(30))).unwrap_or_else(|e| panic!("{what} did not come: {e}"));
        if mine(&m) {
            return others;
        }
        others += 1;
        assert!(others < 1_000_000, "{what} never came");
    }
}

/// Host a, whose system name server (at `boot` in `dir`) offers every
/// user host b's export `svc` and host c's export `sink`, as `ferry-netd
/// --system-names` offers them; host a keeps 16 proxies a peer. The
/// tests of rights passed on by one user from one peer to another.
struct PassingHosts {
    dir: std::path::PathBuf,
    boot: std::path::PathBuf,
    svc: ferry::ReceiveRight,
    sink: ferry::ReceiveRight,
    /// Root's right to `sink@c`.
    to_sink: ferry::SendRight,
    /// Kept for the test's length: root's right to `svc@b`, its name
    /// server connection and the three hosts.
    kept: (ferry::SendRight, ferry::Bootstrap, [Node; 3]),
}

/// Starts the hosts of [`PassingHosts`], in a fresh directory named by `tag`.
fn passing_hosts(tag: &str) -> PassingHosts {
    passing_hosts_with(tag, |_| {})
}

/// [`passing_hosts`], with host a's configuration changed by `tune`.
fn passing_hosts_with(tag: &str, tune: impl FnOnce(&mut NodeConfig)) -> PassingHosts {
    let dir = fresh_dir(tag);
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind_with_mode(&boot, 0o666).unwrap().spawn().unwrap();
    let (ia, ib, ic) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap(), Identity::generate("c").unwrap());
    let peers = vec![Peer { name: "b".into(), cert: ib.cert.clone() }, Peer { name: "c".into(), cert: ic.cert.clone() }];
    let mut config = NodeConfig::new(ia.clone(), peers, "127.0.0.1:0".parse().unwrap());
    config.max_proxies_per_peer = 16;
    tune(&mut config);
    let a = Node::start(config).unwrap();
    let (b, c) = (node(ib, "a", &ia), node(ic, "a", &ia));
    a.connect("b", b.local_addr().unwrap()).unwrap();
    a.connect("c", c.local_addr().unwrap()).unwrap();
    let (svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    let (sink, sink_tx) = ferry::port().unwrap();
    c.export("sink", sink_tx);
    let (to_svc, to_sink) = (a.lookup("svc@b").unwrap(), a.lookup("sink@c").unwrap());
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    names.register_system_service("svc@b", &to_svc).unwrap();
    names.register_system_service("sink@c", &to_sink).unwrap();
    PassingHosts { dir, boot, svc, sink, to_sink, kept: (to_svc, names, [a, b, c]) }
}

/// Whether a right host c sends to a port of root's at host a arrives
/// dead: root sends host c (`sink`) a right to its port with op `op`, and
/// host c sends a right back through it with op `op + 1`.
fn roots_right_arrives_dead(to_sink: &ferry::SendRight, sink: &mut ferry::ReceiveRight, op: u32) -> bool {
    let (mut mine, mine_tx) = ferry::port().unwrap();
    to_sink.send(Message::new(op).with_item(ferry::Item::Send(mine_tx)), WAIT).unwrap();
    let mut m = sink.recv(WAIT).unwrap();
    let Some(ferry::Item::Send(to_mine)) = m.take_items().pop() else { panic!("no right in {m:?}") };
    let (_rx, tx) = ferry::port().unwrap();
    to_mine.send(Message::new(op + 1).with_item(ferry::Item::Send(tx)), WAIT).unwrap();
    right_in(&mut mine.recv(WAIT).unwrap()).1
}

/// A port a system name server made for one user's lookup of a node's
/// import is that user's: passed on by that user (nobody) to another peer,
/// the traffic that peer sends to it counts against that user's shares
/// here, not root's. Its socket is the name server's (root's), and it was
/// charged to root: rights the peer sent to it took root's share of that
/// peer's proxies, and a right sent to root's own port arrived dead.
#[test]
fn a_port_made_for_a_users_lookup_and_passed_on_is_charged_to_that_user() {
    if let Ok(names) = std::env::var(PASSER) {
        return pass_on(&names);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_port_made_for_a_users_lookup_and_passed_on_is_charged_to_that_user: starting a process as another user needs root");
        return;
    }
    let PassingHosts { dir, boot, mut svc, mut sink, to_sink, kept: _kept } = passing_hosts("passed-on");

    let mut other = nobody_command(&dir, &boot, "a_port_made_for_a_users_lookup_and_passed_on_is_charged_to_that_user", PASSER, "svc@b,sink@c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let said = said_line(&mut other, "passed on as uid");
    assert!(said.contains(&format!("passed on as uid {NOBODY}")), "{said}");
    let mut m = sink.recv(WAIT).unwrap();
    assert_eq!(m.op(), 21);
    let Some(ferry::Item::Send(passed)) = m.take_items().pop() else { panic!("no right in {m:?}") };

    // Host c sends eight rights to the port passed on, each kept at b.
    let mut kept = Vec::new();
    let mut dead = 0;
    for i in 0..8 {
        let (rx, tx) = ferry::port().unwrap();
        passed.send(Message::new(30 + i).with_item(ferry::Item::Send(tx)), WAIT).unwrap();
        let mut m = svc.recv(WAIT).unwrap();
        assert_eq!(m.op(), 30 + i);
        let (right, is_dead) = right_in(&mut m);
        dead += usize::from(is_dead);
        kept.push((rx, right));
    }
    // Then one to a port of root's there: it arrives live.
    let root_dead = roots_right_arrives_dead(&to_sink, &mut sink, 22);
    println!("of the eight rights sent to the port passed on, {dead} arrived dead; root's right arrived {}", if root_dead { "dead" } else { "live" });
    drop(other.stdin.take());
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!root_dead, "root's right arrived dead: the traffic to the other user's port took root's share of the peer's proxies");
    assert!(dead > 0, "the other user's share of the peer's proxies held nothing back");
}

/// Set in the environment of this test binary run as another user's
/// program: a collecting port is passed to it, and it floods the status
/// server with queries answered there.
const STATUS_FLOODER: &str = "FERRY_NETD_TEST_STATUS_FLOODER";

/// The other user's part of
/// [`a_user_flooding_the_status_server_holds_up_roots_query_by_few_answers`]:
/// looks the status name up as often as it may (a port of its own each
/// time), and until its standard input ends keeps every one of those
/// ports full of queries whose answers go to the passed port.
fn flood_status() {
    let answers = ferry::spawn::inherited().unwrap();
    let mut names = ferry::Bootstrap::connect().unwrap();
    let ports: Vec<_> = (0..ferry_net::status::PORTS_PER_USER).filter_map(|_| names.lookup(ferry_net::status::NAME).ok()).collect();
    keep_full(&ports, || Message::new(ferry_net::status::QUERY).with_reply(answers.try_clone().unwrap()));
}

/// Another user (nobody) keeping every status port it may have full of
/// queries holds root's `ferry stat` (a lookup of the status name, then a
/// query) up by a few answers, not by one answer for each of its ports:
/// the status server serves each user's ports in turn. Both users' answers
/// come to one port here, so their order is the order they were answered
/// in. With every port in one set, about one answer for each of the other
/// user's ports came before each of root's, about a second a query under
/// such a flood.
#[test]
fn a_user_flooding_the_status_server_holds_up_roots_query_by_few_answers() {
    if std::env::var(STATUS_FLOODER).is_ok() {
        return flood_status();
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_user_flooding_the_status_server_holds_up_roots_query_by_few_answers: starting a process as another user needs root");
        return;
    }
    use ferry::spawn::CommandExt;
    let SystemImport { dir, boot, b: _b, svc: _svc, daemon } = system_import("status-flood");
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    until_found("the status name", &mut || names.lookup(ferry_net::status::NAME).ok());
    let (mut answers, to_answers) = ferry::port().unwrap();
    to_answers.set_queue_limit(64 << 20).unwrap();
    let mut other = nobody_command(&dir, &boot, "a_user_flooding_the_status_server_holds_up_roots_query_by_few_answers", STATUS_FLOODER, "1")
        .pass_right(&to_answers)
        .unwrap()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let said = said_line(&mut other, "as uid");
    assert!(said.contains(&format!("as uid {NOBODY}")), "{said}");
    // Whose answer `m` is: root's status is the full one.
    let roots = |m: &Message| ferry_net::status::Status::decode(m.body()).unwrap().full;
    // The flood is on once the other user's answers come.
    for _ in 0..200 {
        assert!(!roots(&answers.recv(WAIT).unwrap()), "an answer to root before it asked");
    }
    let mut before = Vec::new();
    for _ in 0..10 {
        // What was answered so far is read first.
        for _ in 0..100_000 {
            if answers.recv(Timeout::Zero).is_err() {
                break;
            }
        }
        let status = names.lookup(ferry_net::status::NAME).unwrap();
        status.send(Message::new(ferry_net::status::QUERY).with_reply(to_answers.try_clone().unwrap()), WAIT).unwrap();
        before.push(others_before(&mut answers, roots, "root's query's answer"));
    }
    drop(other.stdin.take());
    let _ = other.wait();
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    println!("answers to the other user before each of root's ten: {before:?}");
    // The other user's set is served once before the lookup's port is
    // taken and once before the query, in the worst turn; answers made
    // while this test had not asked yet (it may lose its CPU between
    // reading what came and asking) count too, so the typical round is
    // what is checked.
    before.sort_unstable();
    assert!(before[before.len() / 2] <= 16, "root's queries waited behind {before:?} answers to the other user");
}

/// Set in the environment of this test binary run as another user's
/// program: the system imports (comma-separated) to send regions by
/// reference through.
const SPACE_TAKER: &str = "FERRY_NETD_TEST_SPACE_TAKER";

/// The other user's part of
/// [`one_user_takes_at_most_half_of_a_nodes_address_space_for_regions_over_all_links`]:
/// sends nine regions of a tebibyte (sparse) by reference through each of
/// the imports in turn, then op 99 through each, and says so.
fn take_space(imports: &str) {
    let mut names = ferry::Bootstrap::connect().unwrap();
    let rights: Vec<_> = imports.split(',').map(|i| names.lookup(i).unwrap()).collect();
    for r in &rights {
        for i in 0..9 {
            let region = ferry::Region::new(1 << 40).unwrap().by_move().unwrap();
            r.send(Message::new(40 + i).with_item(region), WAIT).unwrap();
        }
    }
    for r in &rights {
        r.send(Message::new(99), WAIT).unwrap();
    }
    println!("sent as uid {}", rustix::process::getuid().as_raw());
}

/// How many peers the address space test links the daemon to: with a
/// user's half of each link's 16 TiB, eight take the node's 64 TiB.
const SPACE_PEERS: usize = 8;

/// Regions by reference stay mapped at their origin until the peer lets
/// them go: a user (nobody) sending tebibyte regions to eight peers of a
/// root `ferry-netd` takes at most half of the 64 TiB of address space
/// the node gives them over all links, and root's region still crosses.
/// Each link's share was half of its 16 TiB, and the node's 64 TiB was
/// no one's: the other user's 64 regions, eight on each link, took all of
/// it, and root's was refused.
#[test]
fn one_user_takes_at_most_half_of_a_nodes_address_space_for_regions_over_all_links() {
    if let Ok(imports) = std::env::var(SPACE_TAKER) {
        return take_space(&imports);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped one_user_takes_at_most_half_of_a_nodes_address_space_for_regions_over_all_links: starting a process as another user needs root");
        return;
    }
    let dir = fresh_dir("region-space");
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind_with_mode(&boot, 0o666).unwrap().spawn().unwrap();
    let id = dir.join("id");
    std::fs::create_dir_all(&id).unwrap();
    let me = Identity::generate("x").unwrap();
    let (cert, key) = me.to_pem();
    std::fs::write(id.join("cert.pem"), cert).unwrap();
    std::fs::write(id.join("key.pem"), key).unwrap();
    let mut args = vec!["--system-names".to_owned()];
    let mut peers = Vec::new();
    for i in 1..=SPACE_PEERS {
        let host = format!("b{i}");
        let them = Identity::generate(&host).unwrap();
        std::fs::write(id.join(format!("{host}.pem")), them.to_pem().0).unwrap();
        let peer = node(them, "x", &me);
        let (sink, sink_tx) = ferry::port().unwrap();
        peer.export("sink", sink_tx);
        // The helper trusts b1 itself.
        if i > 1 {
            args.extend(["--trust".to_owned(), format!("{host}={}", id.join(format!("{host}.pem")).display())]);
        }
        args.extend([
            "--peer".to_owned(),
            format!("{host}={}", peer.local_addr().unwrap()),
            "--import".to_owned(),
            format!("sink@{host}"),
        ]);
        peers.push((peer, sink));
    }
    let (daemon, _) = netd(&id, "b1", &boot, &args, false);
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    for i in 1..=SPACE_PEERS {
        until_found("an import", &mut || names.lookup(&format!("sink@b{i}")).ok());
    }
    let imports: Vec<String> = (1..=SPACE_PEERS).map(|i| format!("sink@b{i}")).collect();
    let test = "one_user_takes_at_most_half_of_a_nodes_address_space_for_regions_over_all_links";
    let out = nobody_command(&dir, &boot, test, SPACE_TAKER, &imports.join(",")).stdin(Stdio::null()).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("sent as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    // Each peer's regions from the other user, kept, up to its op 99.
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for (_, sink) in &mut peers {
        let mut n = 0;
        // Nine regions at most, then op 99.
        for _ in 0..10 {
            let m = sink.recv(WAIT).expect("the other user's messages arrive");
            if m.op() == 99 {
                break;
            }
            n += m.items().len();
            kept.push(m);
        }
        taken.push(n);
    }
    // Root's region through the first link.
    let (mut refusals, _keep) = ferry::port().unwrap();
    let region = ferry::Region::new(1 << 40).unwrap().by_move().unwrap();
    let to = names.lookup("sink@b1").unwrap();
    to.send(Message::new(7).with_item(region).with_reply(refusals.make_send_once().unwrap()), WAIT).unwrap();
    let got = peers[0].1.recv(WAIT).map(|m| (m.op(), m.items().len()));
    let refused = refusals.recv(Timeout::Zero).ok().and_then(|m| ferry_net::Refusal::of(&m)).map(|(_, why)| why);
    println!("the other user's tebibyte regions kept on each link: {taken:?}; root's: {got:?} {refused:?}");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    // Half of the node's 64 TiB, and a few more its links' proxies let
    // pass at once while each checked what the others had not charged yet.
    assert!(taken.iter().sum::<usize>() <= 32 + SPACE_PEERS, "one user took {taken:?} TiB, more than half of the node's 64");
    assert_eq!(got.ok(), Some((7, 1)), "root's region did not cross: {refused:?}");
}

/// Set in the environment of this test binary run as a node of its own
/// (so that its log can be read): the directory holding its identity
/// (`a.pem`, `a.key`) and its peer's certificate (`b.pem`) and address
/// (`b.addr`).
const NOISY_NODE: &str = "FERRY_NETD_TEST_NOISY_NODE";

/// The node of
/// [`rights_past_a_users_share_arriving_dead_cannot_flood_the_log`]: at
/// most 16 proxies of its peer `b`, linked to it, exporting `sink`, a
/// port it never reads (with room for many messages); says `ready` and
/// runs until its standard input ends.
fn noisy_node(dir: &str) {
    use std::io::Read;
    let dir = Path::new(dir);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let me = Identity::from_pem(&read("a.pem"), &read("a.key")).unwrap();
    let peer = Peer { name: "b".into(), cert: ferry_net::tls::parse_cert_pem(&read("b.pem")).unwrap() };
    let mut config = NodeConfig::new(me, vec![peer], "127.0.0.1:0".parse().unwrap());
    config.max_proxies_per_peer = 16;
    let a = Node::start(config).unwrap();
    let (_sink, to_sink) = ferry::port_with(ferry::PortOptions { queue_limit: Some(16 << 20) }).unwrap();
    a.export("sink", to_sink);
    a.connect("b", read("b.addr").parse().unwrap()).unwrap();
    println!("ready");
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
}

/// Rights a peer sends to one local user's port past that user's share of
/// the peer's proxies arrive as dead names, and the node says so at most
/// once a minute: the peer's hosts (a user there sending to its own port
/// here, say) choose how many. Each was a line of the node's log: 300
/// rights sent past a share of eight made 292 lines.
#[test]
fn rights_past_a_users_share_arriving_dead_cannot_flood_the_log() {
    if let Ok(dir) = std::env::var(NOISY_NODE) {
        return noisy_node(&dir);
    }
    let dir = fresh_dir("noisy");
    let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
    let (cert, key) = ia.to_pem();
    std::fs::write(dir.join("a.pem"), cert).unwrap();
    std::fs::write(dir.join("a.key"), key).unwrap();
    std::fs::write(dir.join("b.pem"), ib.to_pem().0).unwrap();
    let b = node(ib, "a", &ia);
    std::fs::write(dir.join("b.addr"), b.local_addr().unwrap().to_string()).unwrap();
    let mut a = Killed(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "rights_past_a_users_share_arriving_dead_cannot_flood_the_log", "--nocapture"])
            .env(NOISY_NODE, &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let said = said_line(&mut a.0, "ready");
    assert_eq!(said, "ready");
    let sink = until_found("sink@a", &mut || b.lookup("sink@a").ok());
    let mut kept = Vec::new();
    for i in 0..300 {
        let (rx, tx) = ferry::port().unwrap();
        kept.push(rx);
        sink.send(Message::new(i).with_item(ferry::Item::Send(tx)), WAIT).unwrap();
    }
    // The node has taken them all once the rights past its share are
    // released back here: each such port has no senders left.
    let deadline = Instant::now() + Duration::from_secs(20);
    while kept.iter_mut().map(|rx| matches!(rx.try_recv(), Err(ferry::RecvError::NoSenders))).filter(|&gone| gone).count() < 292 {
        assert!(Instant::now() < deadline, "the rights past the share did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(a.0.stdin.take());
    let _ = a.0.wait();
    let mut log = String::new();
    std::io::Read::read_to_string(&mut a.0.stderr.take().unwrap(), &mut log).unwrap();
    let lines = log.lines().filter(|l| l.contains("arrives as a dead name")).count();
    println!("{lines} lines of the node's log for the rights that arrived dead");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(lines <= 1, "{lines} lines for the rights that arrived dead:\n{log}");
}

/// Set in the environment of this test binary run as another user's
/// program: `IMPORT,VIA`, the names of two system imports.
const REPLY_PASSER: &str = "FERRY_NETD_TEST_REPLY_PASSER";

/// The other user's part of
/// [`a_reply_right_from_a_peer_passed_on_by_a_user_is_not_charged_to_root`]:
/// sends a right to a port of its own through the first import (op 21),
/// takes the reply right of the first call that port gets, and sends it
/// on through the second import (op 22); says so, and holds what it has
/// until its standard input ends.
fn pass_reply_on(names: &str) {
    use std::io::Read;
    let (import, via) = names.split_once(',').unwrap();
    let mut bs = ferry::Bootstrap::connect().unwrap();
    let (to_import, to_via) = (bs.lookup(import).unwrap(), bs.lookup(via).unwrap());
    let (mut mine, tx) = ferry::port().unwrap();
    to_import.send(Message::new(21).with_item(ferry::Item::Send(tx)), WAIT).unwrap();
    let mut call = mine.recv(WAIT).unwrap();
    let Some(ferry::Reply::SendOnce(reply)) = call.take_reply() else { panic!("a call without a send-once reply right: {call:?}") };
    to_via.send(Message::new(22).with_item(ferry::Item::SendOnce(reply)), WAIT).unwrap();
    println!("passed the reply right on as uid {}", rustix::process::getuid().as_raw());
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    drop((to_import, to_via, mine));
}

/// A reply right a peer sent to a user's port is a send-once right the
/// node made, its socket root's for a node run by root: passed on by that
/// user (nobody) to another peer, the reply that peer sends through it
/// counted against root's share of that peer's proxies, and a right to
/// root's own port arrived dead. It is no user's now.
#[test]
fn a_reply_right_from_a_peer_passed_on_by_a_user_is_not_charged_to_root() {
    if let Ok(names) = std::env::var(REPLY_PASSER) {
        return pass_reply_on(&names);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_reply_right_from_a_peer_passed_on_by_a_user_is_not_charged_to_root: starting a process as another user needs root");
        return;
    }
    let PassingHosts { dir, boot, mut svc, mut sink, to_sink, kept: _kept } = passing_hosts("reply-passed-on");

    let test = "a_reply_right_from_a_peer_passed_on_by_a_user_is_not_charged_to_root";
    let mut other = nobody_command(&dir, &boot, test, REPLY_PASSER, "svc@b,sink@c").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    // Host b calls the other user's port with a reply right.
    let mut m = svc.recv(WAIT).unwrap();
    assert_eq!(m.op(), 21);
    let Some(ferry::Item::Send(to_other)) = m.take_items().pop() else { panic!("no right in {m:?}") };
    let (mut replies, _keep) = ferry::port().unwrap();
    to_other.send(Message::new(1).with_reply(replies.make_send_once().unwrap()), WAIT).unwrap();
    let said = said_line(&mut other, "passed the reply right on");
    assert!(said.contains(&format!("as uid {NOBODY}")), "{said}");
    let mut m = sink.recv(WAIT).unwrap();
    assert_eq!(m.op(), 22);
    let Some(ferry::Item::SendOnce(reply)) = m.take_items().pop() else { panic!("no send-once right in {m:?}") };

    // Host c answers through it with eight rights, kept at b.
    let mut ports = Vec::new();
    let mut answer = Message::new(2);
    for _ in 0..8 {
        let (rx, tx) = ferry::port().unwrap();
        ports.push(rx);
        answer = answer.with_item(ferry::Item::Send(tx));
    }
    reply.send(answer, WAIT).unwrap();
    let mut got = replies.recv(WAIT).unwrap();
    let rights: Vec<_> = got.take_items().into_iter().map(|i| if let ferry::Item::Send(s) = i { s } else { panic!("not a send right") }).collect();
    let dead = rights.iter().filter(|r| r.is_dead()).count();
    // Then a right to a port of root's there: it arrives live.
    let root_dead = roots_right_arrives_dead(&to_sink, &mut sink, 23);
    println!("of the eight rights in the reply, {dead} arrived dead; root's right arrived {}", if root_dead { "dead" } else { "live" });
    drop(other.stdin.take());
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    drop(rights);
    assert!(!root_dead, "root's right arrived dead: the reply through the other user's reply right took root's share of the peer's proxies");
}

/// Set in the environment of this test binary run as another user's
/// program: `IMPORT,VIA`, the names of two system imports.
const REFUSAL_PASSER: &str = "FERRY_NETD_TEST_REFUSAL_PASSER";

/// The other user's part of
/// [`a_refusal_sent_on_through_another_import_is_charged_to_the_refused_user`]:
/// sends two rights through the first import (op 41), which fill its
/// budget of three there, then one more with its right to the second
/// import as the reply right (op 42), which is refused back through that
/// right; says so, and holds what it has until its standard input ends.
fn pass_refusal_on(names: &str) {
    use std::io::Read;
    let (import, via) = names.split_once(',').unwrap();
    let mut bs = ferry::Bootstrap::connect().unwrap();
    let (to_import, to_via) = (bs.lookup(import).unwrap(), bs.lookup(via).unwrap());
    let mut ports = Vec::new();
    let mut fill = Message::new(41);
    for _ in 0..2 {
        let (rx, tx) = ferry::port().unwrap();
        ports.push(rx);
        fill = fill.with_item(ferry::Item::Send(tx));
    }
    to_import.send(fill, WAIT).unwrap();
    let (rx, tx) = ferry::port().unwrap();
    ports.push(rx);
    let refused = Message::new(42).with_item(ferry::Item::Send(tx)).with_reply(ferry::Reply::Send(to_via.try_clone().unwrap()));
    to_import.send(refused, WAIT).unwrap();
    println!("sent the message to be refused as uid {}", rustix::process::getuid().as_raw());
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    drop((to_import, to_via, ports));
}

/// A message refused back to its sender comes back on its reply right with
/// its items; a reply right that is a proxy of another peer's port sends
/// them on to that peer. The refusal is the refused user's message: its
/// items there are charged to that user (nobody), within its budgets. The
/// node sent it as itself, so they were charged to root, and a user past
/// its budget at one peer had its rights kept at another within root's.
#[test]
fn a_refusal_sent_on_through_another_import_is_charged_to_the_refused_user() {
    if let Ok(names) = std::env::var(REFUSAL_PASSER) {
        return pass_refusal_on(&names);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_refusal_sent_on_through_another_import_is_charged_to_the_refused_user: starting a process as another user needs root");
        return;
    }
    let PassingHosts { dir, boot, svc: _svc, mut sink, to_sink: _to_sink, kept } = passing_hosts_with("refusal-passed-on", |c| c.max_exports_per_user = 3);
    let a = &kept.2[0];

    let test = "a_refusal_sent_on_through_another_import_is_charged_to_the_refused_user";
    let mut other = nobody_command(&dir, &boot, test, REFUSAL_PASSER, "svc@b,sink@c").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let said = said_line(&mut other, "sent the message to be refused");
    assert!(said.contains(&format!("as uid {NOBODY}")), "{said}");
    let mut m = sink.recv(WAIT).unwrap();
    let refusal = ferry_net::Refusal::of(&m);
    let items = m.take_items().len();
    let at_c: Vec<_> = a.usage().into_iter().filter(|u| u.peer == "c").map(|u| (u.uid, u.rights)).collect();
    println!("host c got {refusal:?} with {items} items; host a charges (uid, rights) there: {at_c:?}");
    drop(other.stdin.take());
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(matches!(refusal, Some((ferry_net::Refusal::OverBudget, _))), "not the refusal: {m:?}");
    assert_eq!(items, 1, "the refused right did not come with the refusal");
    assert!(!at_c.iter().any(|&(uid, _)| uid == 0), "the other user's refused right was charged to root at host c: {at_c:?}");
    assert_eq!(at_c, vec![(NOBODY, 1)], "the refused right is not charged to the user it came from");
}

/// Set in the environment of this test binary run as another user's
/// program: the name of a system import that hands out ports.
const STATUS_REPLIER: &str = "FERRY_NETD_TEST_STATUS_REPLIER";

/// The other user's part of
/// [`status_answers_sent_on_through_a_users_proxies_are_charged_to_that_user`]:
/// sends a right to a port of its own through the import (op 51), takes
/// the rights to the peer's ports that come back on it, and asks the
/// status server for its status with each of them as the reply right;
/// says so, and holds what it has until its standard input ends.
fn reply_status_through_imports(import: &str) {
    use std::io::Read;
    let mut bs = ferry::Bootstrap::connect().unwrap();
    let (to_import, status) = (bs.lookup(import).unwrap(), bs.lookup(ferry_net::status::NAME).unwrap());
    let (mut mine, tx) = ferry::port().unwrap();
    to_import.send(Message::new(51).with_item(ferry::Item::Send(tx)), WAIT).unwrap();
    let mut m = mine.recv(WAIT).unwrap();
    let rights: Vec<_> = m.take_items().into_iter().map(|i| if let ferry::Item::Send(s) = i { s } else { panic!("not a send right") }).collect();
    for r in &rights {
        let query = Message::new(ferry_net::status::QUERY).with_reply(ferry::Reply::Send(r.try_clone().unwrap()));
        status.send(query, WAIT).unwrap();
    }
    println!("asked for the status through {} ports as uid {}", rights.len(), rustix::process::getuid().as_raw());
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    drop((to_import, status, mine, rights));
}

/// The status server answers on whatever reply right a query names, and
/// that may be a user's proxy of a peer's port: the answer is the asker's
/// message there, its stream charged to the asker (nobody). Sent as the
/// daemon, each answer through another of the peer's ports opened a
/// stream charged to root, and with root's share of the peer's streams
/// taken so, root's own first message to another port of that peer was
/// refused.
#[test]
fn status_answers_sent_on_through_a_users_proxies_are_charged_to_that_user() {
    if let Ok(import) = std::env::var(STATUS_REPLIER) {
        return reply_status_through_imports(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped status_answers_sent_on_through_a_users_proxies_are_charged_to_that_user: starting a process as another user needs root");
        return;
    }
    let StreamHosts { dir, boot, a, c: _c, mut gen, mut theirs, mut names, kept: _kept, .. } = stream_hosts("status-answers-passed-on");
    let (status_rx, status_tx) = ferry::port().unwrap();
    names.register_system(ferry_net::status::NAME, &status_tx).unwrap();
    let served = a.clone();
    std::thread::spawn(move || ferry_net::status::Server::new(status_rx).unwrap().serve(&served, &[], Timeout::After(Duration::from_secs(20))));

    let test = "status_answers_sent_on_through_a_users_proxies_are_charged_to_that_user";
    let mut other = nobody_command(&dir, &boot, test, STATUS_REPLIER, "gen@c").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut ports = hand_ports(&mut gen, None);
    let said = said_line(&mut other, "asked for the status through");
    assert!(said.contains(&format!("{STREAM_PORTS} ports as uid {NOBODY}")), "{said}");
    let answered = answers_crossed(&mut ports, |m| m.op() == ferry_net::status::REPLY);
    let (arrived, refused) = roots_message_arrives(&a, &mut theirs);
    println!("{answered} of {STREAM_PORTS} status answers crossed; root's message {}: {refused:?}", if arrived { "arrived" } else { "did not arrive" });
    drop(other.stdin.take());
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(answered > 0, "no status answer crossed through the other user's proxies");
    assert!(arrived, "root's message to the peer did not arrive, refused {refused:?}: the other user's status answers took root's share of the peer's streams");
}

/// How many of a peer's ports the other user is handed in
/// [`stream_hosts`]: more than a user's share of the peer's 16 streams.
const STREAM_PORTS: usize = 16;

/// Host a (root's node) linked to host c, each letting the other open at
/// most 16 streams, with a system name server offering every user c's
/// export `gen` as `gen@c`; c also exports `theirs`. The tests of answers
/// sent on through a user's proxies of c's ports.
struct StreamHosts {
    dir: PathBuf,
    boot: PathBuf,
    a: Arc<Node>,
    c: Node,
    gen: ferry::ReceiveRight,
    theirs: ferry::ReceiveRight,
    names: ferry::Bootstrap,
    /// Kept for the test's length: root's right to `gen@c`.
    kept: ferry::SendRight,
    /// The name server's process, when it is not this one.
    daemon: Option<Killed>,
}

/// Starts the hosts of [`StreamHosts`], in a fresh directory named by `tag`.
fn stream_hosts(tag: &str) -> StreamHosts {
    stream_hosts_named(tag, |boot| {
        ferry::NameServer::bind_with_mode(boot, 0o666).unwrap().spawn().unwrap();
        None
    })
}

/// As [`stream_hosts`], with the system name server `serve` starts at
/// the path it is given (and returns, if it is another process).
fn stream_hosts_named(tag: &str, serve: impl FnOnce(&Path) -> Option<Killed>) -> StreamHosts {
    let dir = fresh_dir(tag);
    let boot = dir.join("bootstrap");
    let daemon = serve(&boot);
    let (ia, ic) = (Identity::generate("a").unwrap(), Identity::generate("c").unwrap());
    let streams = |mut config: NodeConfig| {
        config.max_streams_per_peer = 16;
        config
    };
    let a = Arc::new(Node::start(streams(NodeConfig::new(ia.clone(), vec![Peer { name: "c".into(), cert: ic.cert.clone() }], "127.0.0.1:0".parse().unwrap()))).unwrap());
    let c = Node::start(streams(NodeConfig::new(ic, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], "127.0.0.1:0".parse().unwrap()))).unwrap();
    a.connect("c", c.local_addr().unwrap()).unwrap();
    let (gen, gen_tx) = ferry::port().unwrap();
    c.export("gen", gen_tx);
    let (theirs, theirs_tx) = ferry::port().unwrap();
    c.export("theirs", theirs_tx);
    let to_gen = a.lookup("gen@c").unwrap();
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    names.register_system_service("gen@c", &to_gen).unwrap();
    StreamHosts { dir, boot, a, c, gen, theirs, names, kept: to_gen, daemon }
}

/// Host c's part: takes the right in the other user's op 51 at `gen` and
/// sends on it [`STREAM_PORTS`] rights to ports of its own, after
/// `first` if given; returns those ports.
fn hand_ports(gen: &mut ferry::ReceiveRight, first: Option<ferry::Item>) -> Vec<ferry::ReceiveRight> {
    let mut m = gen.recv(WAIT).unwrap();
    assert_eq!(m.op(), 51);
    let Some(ferry::Item::Send(to_other)) = m.take_items().pop() else { panic!("no right in {m:?}") };
    let mut ports = Vec::new();
    let mut handed = first.into_iter().fold(Message::new(52), Message::with_item);
    for _ in 0..STREAM_PORTS {
        let (rx, tx) = ferry::port().unwrap();
        ports.push(rx);
        handed = handed.with_item(ferry::Item::Send(tx));
    }
    to_other.send(handed, WAIT).unwrap();
    ports
}

/// How many of `ports` get a message `answer` picks out within five
/// seconds in all: the answers that crossed (the rest were past a share
/// of streams).
fn answers_crossed(ports: &mut [ferry::ReceiveRight], answer: impl Fn(&Message) -> bool) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut answered = 0;
    for p in ports {
        let left = deadline.saturating_duration_since(Instant::now());
        answered += usize::from(p.recv(Timeout::After(left)).is_ok_and(|m| answer(&m)));
    }
    answered
}

/// Whether root's first message to `theirs@c` arrives at `theirs`, and
/// the refusal if it was refused.
fn roots_message_arrives(a: &Node, theirs: &mut ferry::ReceiveRight) -> (bool, Option<(ferry_net::Refusal, String)>) {
    let to_theirs = a.lookup("theirs@c").unwrap();
    let (mut back, _keep) = ferry::port().unwrap();
    to_theirs.send(Message::new(53).with_reply(back.make_send_once().unwrap()), WAIT).unwrap();
    let arrived = theirs.recv(WAIT).is_ok_and(|m| m.op() == 53);
    let refused = back.recv(Timeout::Zero).ok().and_then(|m| ferry_net::Refusal::of(&m));
    (arrived, refused)
}

/// Set in the environment of this test binary run as another user's
/// program: the name of a system import that hands out ports.
const REGION_ASKER: &str = "FERRY_NETD_TEST_REGION_ASKER";

/// The other user's part of
/// [`a_remote_regions_answers_sent_on_through_a_users_proxies_are_charged_to_that_user`]:
/// sends a right to a port of its own through the import (op 51), takes
/// the region by reference and the rights to the peer's ports that come
/// back on it, and sends the region's server a request of an operation it
/// does not know with each of those rights as the reply right; says so,
/// and holds what it has until its standard input ends.
fn ask_region_through_imports(import: &str) {
    use std::io::Read;
    let mut bs = ferry::Bootstrap::connect().unwrap();
    let to_import = bs.lookup(import).unwrap();
    let (mut mine, tx) = ferry::port().unwrap();
    to_import.send(Message::new(51).with_item(ferry::Item::Send(tx)), WAIT).unwrap();
    let mut m = mine.recv(WAIT).unwrap();
    let mut rights: Vec<_> = m.take_items().into_iter().map(|i| if let ferry::Item::Send(s) = i { s } else { panic!("not a send right") }).collect();
    let region = rights.remove(0);
    for r in &rights {
        region.send(Message::new(0x0bad).with_reply(ferry::Reply::Send(r.try_clone().unwrap())), WAIT).unwrap();
    }
    println!("asked the region through {} ports as uid {}", rights.len(), rustix::process::getuid().as_raw());
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    drop((to_import, region, mine, rights));
}

/// A region sent by reference is served on the receiving host by an
/// object server of the node's, which answers on whatever reply right a
/// request names, and that may be the asker's proxy of a peer's port: the
/// answer is the asker's (nobody's) message there. Sent as the node, each
/// answer through another of the peer's ports opened a stream charged to
/// root, and with root's share of the peer's streams taken so, root's own
/// first message to another port of that peer was refused.
#[test]
fn a_remote_regions_answers_sent_on_through_a_users_proxies_are_charged_to_that_user() {
    if let Ok(import) = std::env::var(REGION_ASKER) {
        return ask_region_through_imports(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped a_remote_regions_answers_sent_on_through_a_users_proxies_are_charged_to_that_user: starting a process as another user needs root");
        return;
    }
    let StreamHosts { dir, boot, a, c: _c, mut gen, mut theirs, names: _names, kept: _kept, .. } = stream_hosts("region-answers-passed-on");
    let test = "a_remote_regions_answers_sent_on_through_a_users_proxies_are_charged_to_that_user";
    let mut other = nobody_command(&dir, &boot, test, REGION_ASKER, "gen@c").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let region = ferry::Region::new(ferry_net::frame::MAX_EAGER_REGION + 4096).unwrap().by_move().unwrap();
    let mut ports = hand_ports(&mut gen, Some(ferry::Item::Region(region)));
    let said = said_line(&mut other, "asked the region through");
    assert!(said.contains(&format!("{STREAM_PORTS} ports as uid {NOBODY}")), "{said}");
    let answered = answers_crossed(&mut ports, |_| true);
    let (arrived, refused) = roots_message_arrives(&a, &mut theirs);
    println!("{answered} of {STREAM_PORTS} answers of the region's server crossed; root's message {}: {refused:?}", if arrived { "arrived" } else { "did not arrive" });
    drop(other.stdin.take());
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(answered > 0, "no answer crossed through the other user's proxies");
    assert!(arrived, "root's message to the peer did not arrive, refused {refused:?}: the other user's requests to the region's server took root's share of the peer's streams");
}

/// The `ferryd` binary cargo built beside this test's directory (for the
/// whole workspace), checked to be newer than its sources.
fn ferryd_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("ferryd");
    let built = std::fs::metadata(&bin).and_then(|m| m.modified());
    let Ok(built) = built else { panic!("ferryd is not built at {}: run `cargo build -p ferryd`", bin.display()) };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest_source = ["ferryd/src", "ferry/src", "ferry/src/pager", "ferry/src/sys"]
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d)).ok())
        .flatten()
        .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
        .max();
    assert!(newest_source.is_none_or(|s| s <= built), "ferryd at {} is older than its sources: run `cargo build -p ferryd`", bin.display());
    bin
}

/// Set in the environment of this test binary run as another user's
/// program: the name of a system import that hands out ports.
const FILES_ASKER: &str = "FERRY_NETD_TEST_FILES_ASKER";

/// The other user's part of
/// [`the_file_servers_answers_sent_on_through_a_users_proxies_are_charged_to_that_user`]:
/// sends a right to a port of its own through the import (op 51), takes
/// the rights to the peer's ports that come back on it, and sends
/// `ferryd`'s file server a request of an operation it does not know with
/// each of them as the reply right; says so, and holds what it has until
/// its standard input ends.
fn ask_files_through_imports(import: &str) {
    use std::io::Read;
    let mut bs = ferry::Bootstrap::connect().unwrap();
    let (to_import, files) = (bs.lookup(import).unwrap(), bs.lookup("files").unwrap());
    let (mut mine, tx) = ferry::port().unwrap();
    to_import.send(Message::new(51).with_item(ferry::Item::Send(tx)), WAIT).unwrap();
    let mut m = mine.recv(WAIT).unwrap();
    let rights: Vec<_> = m.take_items().into_iter().map(|i| if let ferry::Item::Send(s) = i { s } else { panic!("not a send right") }).collect();
    for r in &rights {
        files.send(Message::new(0x0bad).with_reply(ferry::Reply::Send(r.try_clone().unwrap())), WAIT).unwrap();
    }
    println!("asked the file server through {} ports as uid {}", rights.len(), rustix::process::getuid().as_raw());
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    drop((to_import, files, mine, rights));
}

/// `ferryd`'s file server, run by root, answers on whatever reply right a
/// request names, and that may be the asker's proxy of a peer's port: the
/// answer is the asker's (nobody's) message there. Sent as root, each
/// answer through another of the peer's ports opened a stream charged to
/// root, and with root's share of the peer's streams taken so, root's own
/// first message to another port of that peer was refused.
#[test]
fn the_file_servers_answers_sent_on_through_a_users_proxies_are_charged_to_that_user() {
    if let Ok(import) = std::env::var(FILES_ASKER) {
        return ask_files_through_imports(&import);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped the_file_servers_answers_sent_on_through_a_users_proxies_are_charged_to_that_user: starting a process as another user needs root");
        return;
    }
    let served = fresh_dir("files-answers-passed-on-root");
    let ferryd = |boot: &Path| {
        let mut child = Killed(
            Command::new(ferryd_bin())
                .arg("--socket")
                .arg(boot)
                .args(["--system", "--files"])
                .arg(&served)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while ferry::Bootstrap::connect_to(boot).is_err() {
            assert!(child.0.try_wait().unwrap().is_none(), "ferryd exited");
            assert!(Instant::now() < deadline, "ferryd never answered at {}", boot.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(child)
    };
    let StreamHosts { dir, boot, a, c: _c, mut gen, mut theirs, names: _names, kept: _kept, daemon: _daemon } =
        stream_hosts_named("files-answers-passed-on", ferryd);
    let test = "the_file_servers_answers_sent_on_through_a_users_proxies_are_charged_to_that_user";
    let mut other = nobody_command(&dir, &boot, test, FILES_ASKER, "gen@c").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut ports = hand_ports(&mut gen, None);
    let said = said_line(&mut other, "asked the file server through");
    assert!(said.contains(&format!("{STREAM_PORTS} ports as uid {NOBODY}")), "{said}");
    let answered = answers_crossed(&mut ports, |_| true);
    let (arrived, refused) = roots_message_arrives(&a, &mut theirs);
    println!("{answered} of {STREAM_PORTS} answers of the file server crossed; root's message {}: {refused:?}", if arrived { "arrived" } else { "did not arrive" });
    drop(other.stdin.take());
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&served);
    assert!(answered > 0, "no answer crossed through the other user's proxies");
    assert!(arrived, "root's message to the peer did not arrive, refused {refused:?}: the other user's requests to the file server took root's share of the peer's streams");
}
