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

/// A `ferry-netd` stopped with SIGTERM (or SIGINT, SIGHUP) closes its links
/// before it exits: the peer turns its proxies of that host into dead names
/// at once, not after the idle timeout (60 s here, past this test's bound),
/// and the daemon exits with success. The daemon is the real binary, with
/// a name server of this test's own; the peer is a node in this process.
#[test]
fn a_daemon_stopped_by_a_signal_tells_its_peers_at_once() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    for (signal, name) in [(rustix::process::Signal::TERM, "SIGTERM"), (rustix::process::Signal::INT, "SIGINT")] {
        let dir = std::env::temp_dir().join(format!("ferry-netd-stop-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let boot = dir.join("bootstrap");
        let server = ferry::NameServer::bind(&boot).unwrap();
        std::thread::spawn(move || server.serve());
        let (_echo_rx, echo_tx) = ferry::port().unwrap();
        let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
        names.register("echo", &echo_tx).unwrap();
        let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
        let (a_cert, a_key) = ia.to_pem();
        std::fs::write(dir.join("cert.pem"), a_cert).unwrap();
        std::fs::write(dir.join("key.pem"), a_key).unwrap();
        std::fs::write(dir.join("b.pem"), ib.to_pem().0).unwrap();
        let mut daemon = Killed(
            Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
                .arg("--identity")
                .arg(&dir)
                .args(["--listen", "127.0.0.1:0", "--export", "echo", "--idle-timeout-ms", "60000", "--trust"])
                .arg(format!("b={}", dir.join("b.pem").display()))
                .env("FERRY_BOOTSTRAP", &boot)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start ferry-netd"),
        );
        let mut ready = String::new();
        std::io::BufReader::new(daemon.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
        let addr: std::net::SocketAddr = ready.trim().rsplit(' ').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("ferry-netd said {ready:?}"));
        let mut cfg = NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], "127.0.0.1:0".parse().unwrap());
        cfg.idle_timeout = Duration::from_secs(60);
        let b = Node::start(cfg).unwrap();
        b.connect("a", addr).unwrap();
        let echo = b.lookup("echo@a").unwrap();
        let pid = rustix::process::Pid::from_raw(daemon.0.id() as i32).unwrap();
        let t = Instant::now();
        rustix::process::kill_process(pid, signal).unwrap();
        assert!(echo.wait_dead(Timeout::After(Duration::from_secs(10))), "{name}: the peer's proxy stayed alive");
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

/// A child process killed when the test lets go of it, passing or not: a
/// failed test leaves no daemon or name server behind.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Set in the environment of this test binary run as a name server of its
/// own (a process the test can kill and start again).
const NAME_SERVER_CHILD: &str = "FERRY_NETD_TEST_NAME_SERVER";

/// A name server restarted under a running `ferry-netd` has lost every
/// registration; the daemon notices (it looks every two seconds) and
/// registers its status name and its imports again, and the imported name
/// reaches the remote port as before. The name server is this test binary
/// run again as one (so the test can kill it), the daemon is the real
/// binary, and its peer a node in this process.
#[test]
fn a_restarted_name_server_gets_the_daemons_names_back() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    if let Ok(path) = std::env::var(NAME_SERVER_CHILD) {
        let _ = ferry::NameServer::bind(std::path::Path::new(&path)).unwrap().serve();
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferry-netd-renames-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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
    // The peer, in this process, exports `svc`.
    let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
    let b = Node::start(NodeConfig::new(ib.clone(), vec![Peer { name: "a".into(), cert: ia.cert.clone() }], "127.0.0.1:0".parse().unwrap())).unwrap();
    let (mut svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    let (a_cert, a_key) = ia.to_pem();
    std::fs::write(dir.join("cert.pem"), a_cert).unwrap();
    std::fs::write(dir.join("key.pem"), a_key).unwrap();
    std::fs::write(dir.join("b.pem"), ib.to_pem().0).unwrap();
    let mut daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
            .arg("--identity")
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0", "--import", "svc@b", "--trust"])
            .arg(format!("b={}", dir.join("b.pem").display()))
            .arg("--peer")
            .arg(format!("b={}", b.local_addr().unwrap()))
            .env("FERRY_BOOTSTRAP", &boot)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ferry-netd"),
    );
    let mut ready = String::new();
    std::io::BufReader::new(daemon.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert!(ready.contains("ready"), "ferry-netd said {ready:?}");
    let mut through = |what: u32| {
        let right = ferry::Bootstrap::connect_to(&boot).unwrap().lookup("svc@b").unwrap();
        right.send(Message::new(what), Timeout::After(Duration::from_secs(10))).unwrap();
        assert_eq!(svc.recv(Timeout::After(Duration::from_secs(10))).unwrap().op(), what);
    };
    through(1);
    // The name server goes, and another starts at the same path, empty.
    drop(first);
    let second = name_server();
    assert!(ferry::Bootstrap::connect_to(&boot).unwrap().lookup("svc@b").is_err(), "the new name server started with names");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
        if names.lookup("svc@b").is_ok() && names.lookup(ferry_net::status::NAME).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "ferry-netd did not register its names with the new name server");
        std::thread::sleep(Duration::from_millis(50));
    }
    through(2);
    drop((daemon, second));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A peer that is down when `ferry-netd` starts does not stop it: after
/// trying for 20 s the daemon starts without the link, says so, and dials
/// in the background; when the peer comes up, the link comes up and the
/// daemon's `--import` of it is registered then, and reaches the peer.
#[test]
fn a_daemon_whose_peer_is_down_at_start_links_when_it_comes_up() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let dir = std::env::temp_dir().join(format!("ferry-netd-late-peer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind(&boot).unwrap().spawn().unwrap();
    let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
    let trust_a = vec![Peer { name: "b".into(), cert: ib.cert.clone() }];
    // An address for the peer, free again once this node is gone.
    let a_addr = Node::start(NodeConfig::new(ia.clone(), trust_a.clone(), "127.0.0.1:0".parse().unwrap())).unwrap().local_addr().unwrap();
    let (b_cert, b_key) = ib.to_pem();
    std::fs::write(dir.join("cert.pem"), b_cert).unwrap();
    std::fs::write(dir.join("key.pem"), b_key).unwrap();
    std::fs::write(dir.join("a.pem"), ia.to_pem().0).unwrap();
    let mut daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
            .arg("--identity")
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0", "--import", "svc@a", "--trust"])
            .arg(format!("a={}", dir.join("a.pem").display()))
            .arg("--peer")
            .arg(format!("a={a_addr}"))
            .env("FERRY_BOOTSTRAP", &boot)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ferry-netd"),
    );
    let mut ready = String::new();
    std::io::BufReader::new(daemon.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert!(ready.contains("ready"), "ferry-netd said {ready:?} with its peer down");
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
    let deadline = Instant::now() + Duration::from_secs(30);
    let right = loop {
        if let Ok(r) = names.lookup("svc@a") {
            break r;
        }
        assert!(Instant::now() < deadline, "the import was never registered after the peer came up");
        std::thread::sleep(Duration::from_millis(50));
    };
    right.send(Message::new(3), Timeout::After(Duration::from_secs(10))).unwrap();
    assert_eq!(svc.recv(Timeout::After(Duration::from_secs(10))).unwrap().op(), 3);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Servers restart on both sides of a running `ferry-netd`: a local server
/// it exports registers a new port under the same name, and a remote
/// server it imports is exported anew by its host. New lookups of each
/// name, here and at the peer, find the new port within seconds, while the
/// old proxies stay dead. The daemon is the real binary, with a name
/// server of this test's own; its peer is a node in this process.
#[test]
fn restarted_servers_are_exported_and_imported_again() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let dir = std::env::temp_dir().join(format!("ferry-netd-restarts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind(&boot).unwrap().spawn().unwrap();
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    let (local1, local1_tx) = ferry::port().unwrap();
    names.register("svc", &local1_tx).unwrap();
    drop(local1_tx);
    let (ix, ib) = (Identity::generate("x").unwrap(), Identity::generate("b").unwrap());
    let b = Node::start(NodeConfig::new(ib.clone(), vec![Peer { name: "x".into(), cert: ix.cert.clone() }], "127.0.0.1:0".parse().unwrap())).unwrap();
    let (remote1, remote1_tx) = ferry::port().unwrap();
    b.export("rsvc", remote1_tx);
    let (x_cert, x_key) = ix.to_pem();
    std::fs::write(dir.join("cert.pem"), x_cert).unwrap();
    std::fs::write(dir.join("key.pem"), x_key).unwrap();
    std::fs::write(dir.join("b.pem"), ib.to_pem().0).unwrap();
    let mut daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
            .arg("--identity")
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0", "--export", "svc", "--import", "rsvc@b", "--trust"])
            .arg(format!("b={}", dir.join("b.pem").display()))
            .arg("--peer")
            .arg(format!("b={}", b.local_addr().unwrap()))
            .env("FERRY_BOOTSTRAP", &boot)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ferry-netd"),
    );
    let mut ready = String::new();
    std::io::BufReader::new(daemon.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert!(ready.contains("ready"), "ferry-netd said {ready:?}");
    let wait = Timeout::After(Duration::from_secs(10));
    // `reach` sends through `right` and `rx` must get it.
    let reach = |right: &ferry::SendRight, rx: &mut ferry::ReceiveRight, op: u32| {
        right.send(Message::new(op), wait).unwrap();
        assert_eq!(rx.recv(wait).unwrap().op(), op);
    };
    // Polls `find` until it gives a live right, for at most 20 s.
    let until_found = |what: &str, find: &mut dyn FnMut() -> Option<ferry::SendRight>| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(r) = find().filter(|r| !r.is_dead()) {
                return r;
            }
            assert!(Instant::now() < deadline, "{what} was not found again");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // The imported remote server restarts: its host exports a new port.
    let (mut remote1, old_import) = (remote1, names.lookup("rsvc@b").unwrap());
    reach(&old_import, &mut remote1, 1);
    drop(remote1);
    assert!(old_import.wait_dead(wait), "the proxy of a dead remote port stayed alive");
    let (mut remote2, remote2_tx) = ferry::port().unwrap();
    b.export("rsvc", remote2_tx);
    let new_import = until_found("rsvc@b", &mut || names.lookup("rsvc@b").ok());
    reach(&new_import, &mut remote2, 2);
    assert!(old_import.is_dead(), "an old proxy came back to life");

    // The exported local server restarts: it registers a new port here.
    let (mut local1, old_export) = (local1, b.lookup("svc@x").unwrap());
    reach(&old_export, &mut local1, 3);
    drop(local1);
    assert!(old_export.wait_dead(wait), "the peer's proxy of a dead port stayed alive");
    let (mut local2, local2_tx) = ferry::port().unwrap();
    names.register("svc", &local2_tx).unwrap();
    let new_export = until_found("svc@x", &mut || b.lookup("svc@x").ok());
    reach(&new_export, &mut local2, 4);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `--import` of a trusted host that links to this one (it is not a
/// `--peer` here) waits for that link instead of failing the start, and is
/// registered once the host has linked.
#[test]
fn an_import_of_a_host_that_links_in_later_is_registered_then() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let dir = std::env::temp_dir().join(format!("ferry-netd-inbound-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind(&boot).unwrap().spawn().unwrap();
    let (ix, ib) = (Identity::generate("x").unwrap(), Identity::generate("b").unwrap());
    let (x_cert, x_key) = ix.to_pem();
    std::fs::write(dir.join("cert.pem"), x_cert).unwrap();
    std::fs::write(dir.join("key.pem"), x_key).unwrap();
    std::fs::write(dir.join("b.pem"), ib.to_pem().0).unwrap();
    let mut daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
            .arg("--identity")
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0", "--import", "svc@b", "--trust"])
            .arg(format!("b={}", dir.join("b.pem").display()))
            .env("FERRY_BOOTSTRAP", &boot)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ferry-netd"),
    );
    let mut ready = String::new();
    std::io::BufReader::new(daemon.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    let addr: std::net::SocketAddr = ready.trim().rsplit(' ').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("ferry-netd said {ready:?}"));
    let mut names = ferry::Bootstrap::connect_to(&boot).unwrap();
    assert!(names.lookup("svc@b").is_err());
    // Host b links in, and exports `svc`.
    let b = Node::start(NodeConfig::new(ib, vec![Peer { name: "x".into(), cert: ix.cert.clone() }], "127.0.0.1:0".parse().unwrap())).unwrap();
    let (mut svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    b.connect("x", addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let right = loop {
        if let Ok(r) = names.lookup("svc@b") {
            break r;
        }
        assert!(Instant::now() < deadline, "the import was not registered after its host linked in");
        std::thread::sleep(Duration::from_millis(50));
    };
    right.send(Message::new(6), Timeout::After(Duration::from_secs(10))).unwrap();
    assert_eq!(svc.recv(Timeout::After(Duration::from_secs(10))).unwrap().op(), 6);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
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
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    if let Ok(name) = std::env::var(OTHER_USER_CLIENT) {
        let mut names = ferry::Bootstrap::connect().unwrap();
        names.lookup(&name).unwrap().send(Message::new(31), Timeout::After(Duration::from_secs(10))).unwrap();
        println!("sent as uid {}", rustix::process::getuid().as_raw());
        return;
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped system_names_offer_a_root_daemons_imports_to_every_user: starting a process as another user needs root");
        return;
    }
    const NOBODY: u32 = 65534;
    // Every user may enter the directory; only root writes to it.
    let dir = std::env::temp_dir().join(format!("ferry-netd-system-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind_with_mode(&boot, 0o666).unwrap().spawn().unwrap();
    let (ix, ib) = (Identity::generate("x").unwrap(), Identity::generate("b").unwrap());
    let b = Node::start(NodeConfig::new(ib.clone(), vec![Peer { name: "x".into(), cert: ix.cert.clone() }], "127.0.0.1:0".parse().unwrap())).unwrap();
    let (mut svc, svc_tx) = ferry::port().unwrap();
    b.export("svc", svc_tx);
    let id = dir.join("id");
    std::fs::create_dir_all(&id).unwrap();
    let (x_cert, x_key) = ix.to_pem();
    std::fs::write(id.join("cert.pem"), x_cert).unwrap();
    std::fs::write(id.join("key.pem"), x_key).unwrap();
    std::fs::write(id.join("b.pem"), ib.to_pem().0).unwrap();
    let mut daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
            .arg("--identity")
            .arg(&id)
            .args(["--listen", "127.0.0.1:0", "--system-names", "--import", "svc@b", "--trust"])
            .arg(format!("b={}", id.join("b.pem").display()))
            .arg("--peer")
            .arg(format!("b={}", b.local_addr().unwrap()))
            .env("FERRY_BOOTSTRAP", &boot)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ferry-netd"),
    );
    let mut ready = String::new();
    std::io::BufReader::new(daemon.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert!(ready.contains("ready"), "ferry-netd said {ready:?}");
    // The other user's program: this binary, where that user may run it.
    let copy = dir.join("as-another-user");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(&copy)
        .args(["--exact", "system_names_offer_a_root_daemons_imports_to_every_user", "--nocapture"])
        .env(OTHER_USER_CLIENT, "svc@b")
        .env("FERRY_BOOTSTRAP", &boot)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(&format!("sent as uid {NOBODY}")), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(svc.recv(Timeout::After(Duration::from_secs(10))).unwrap().op(), 31, "the other user's message did not cross");
    // The status name is a system name too: `ferry names` and `ferry stat`
    // find the network server for every user.
    let list = ferry::Bootstrap::connect_to(&boot).unwrap().list().unwrap();
    for name in ["svc@b", ferry_net::status::NAME] {
        assert!(list.iter().any(|e| e.name == name && e.uid == ferry::nameserver::SYSTEM_UID), "{name} is not a system name: {list:?}");
    }
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
