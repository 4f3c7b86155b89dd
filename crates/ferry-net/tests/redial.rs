//! A link that is lost comes back: a node told to keep a peer linked
//! (`Redial`, as `ferry-netd --peer` does) dials it again with back-off
//! once it is reachable; the old proxies stay dead names and new lookups
//! work. Two real nodes over loopback, one stopped and started again on
//! the same address. And a `ferry-netd` stopped by a signal tells its
//! peers at once.

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
        let mut daemon = Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
            .arg("--identity")
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0", "--export", "echo", "--idle-timeout-ms", "60000", "--trust"])
            .arg(format!("b={}", dir.join("b.pem").display()))
            .env("FERRY_BOOTSTRAP", &boot)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ferry-netd");
        let mut ready = String::new();
        std::io::BufReader::new(daemon.stdout.take().unwrap()).read_line(&mut ready).unwrap();
        let addr: std::net::SocketAddr = ready.trim().rsplit(' ').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("ferry-netd said {ready:?}"));
        let mut cfg = NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], "127.0.0.1:0".parse().unwrap());
        cfg.idle_timeout = Duration::from_secs(60);
        let b = Node::start(cfg).unwrap();
        b.connect("a", addr).unwrap();
        let echo = b.lookup("echo@a").unwrap();
        let pid = rustix::process::Pid::from_raw(daemon.id() as i32).unwrap();
        let t = Instant::now();
        rustix::process::kill_process(pid, signal).unwrap();
        assert!(echo.wait_dead(Timeout::After(Duration::from_secs(10))), "{name}: the peer's proxy stayed alive");
        assert!(t.elapsed() < Duration::from_secs(10));
        let status = daemon.wait().unwrap();
        let mut said = String::new();
        std::io::Read::read_to_string(&mut daemon.stderr.take().unwrap(), &mut said).unwrap();
        assert!(status.success(), "{name}: {status}: {said}");
        assert!(said.contains(&format!("stopping on {name}")), "{said}");
        assert!(!b.links().iter().any(|l| l.up), "{name}: the link stayed up");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
