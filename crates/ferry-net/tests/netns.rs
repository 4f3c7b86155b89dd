//! Two `ferry-netd` daemons in two network namespaces linked by a veth
//! pair this test creates: a name exported on host `a` is imported on host
//! `b`, a message with a send right, a send-once reply right and a region
//! crosses, the right comes home as the original port, and SIGKILL of
//! daemon `a` turns the proxy on `b` into a dead name; a 64 MiB region
//! crosses by reference and only the pages touched move, as the daemons'
//! counters show, and the origin lets go of it when the receiver does. Needs root and
//! `ip netns`; says so and skips otherwise. Traffic goes only to the
//! addresses of the namespaces made here, and to loopback: over loopback
//! (no root needed), a daemon that is killed and started again is dialled
//! again and the names imported from it are registered afresh.

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferry::{Bootstrap, Item, Message, RegionItem, Reply, Timeout};
use ferry_net::node::key_of;
use ferry_net::Identity;

const WAIT: Timeout = Timeout::After(Duration::from_secs(15));

/// Turns a hang into a failure (the same helper as the workspace's
/// integration tests use).
fn watchdog<T>(name: &str, limit: Duration, f: impl FnOnce() -> T) -> T {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let label = name.to_owned();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            eprintln!("watchdog: test {label} still running after {limit:?}: deadlock; aborting");
            std::process::abort();
        }
    });
    let out = f();
    let _ = tx.send(());
    out
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Two namespaces and the veth pair between them; deleted on drop.
struct Hosts {
    ns: [String; 2],
    addr: [String; 2],
}

impl Hosts {
    /// `tag` keeps the names and addresses of each test's hosts apart.
    fn make(tag: u32) -> Option<Hosts> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("netns test skipped: needs root to create network namespaces");
            return None;
        }
        let id = std::process::id();
        let ns = [format!("fna{id}t{tag}"), format!("fnb{id}t{tag}")];
        let veth = [format!("fva{id}t{tag}"), format!("fvb{id}t{tag}")];
        let net = (id * 2 + tag) % 250 + 1;
        let addr = [format!("10.77.{net}.1"), format!("10.77.{net}.2")];
        if !ip(&["netns", "add", &ns[0]]) {
            eprintln!("netns test skipped: `ip netns add` failed (no iproute2 or no namespace support)");
            return None;
        }
        let h = Hosts { ns, addr };
        if !ip(&["netns", "add", &h.ns[1]]) {
            eprintln!("netns test skipped: `ip netns add` failed");
            return None;
        }
        let ok = ip(&["link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1]])
            && (0..2).all(|i| {
                ip(&["link", "set", &veth[i], "netns", &h.ns[i]])
                    && ip(&["-n", &h.ns[i], "addr", "add", &format!("{}/24", h.addr[i]), "dev", &veth[i]])
                    && ip(&["-n", &h.ns[i], "link", "set", &veth[i], "up"])
                    && ip(&["-n", &h.ns[i], "link", "set", "lo", "up"])
            });
        if !ok {
            eprintln!("netns test skipped: could not create the veth pair");
            return None;
        }
        Some(h)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in &self.ns {
            ip(&["netns", "del", n]);
        }
    }
}

/// A daemon, killed on drop, with what it has written to stderr so far.
struct Daemon(Child, std::sync::Arc<std::sync::Mutex<String>>);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Daemon {
    /// Waits (bounded) until the daemon has logged a line containing `what`.
    fn logged(&self, what: &str) -> bool {
        for _ in 0..300 {
            if self.1.lock().unwrap().contains(what) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// Starts `ferry-netd ARGS` in network namespace `ns` (`""`: in this
/// process's own, for loopback tests that need no root).
fn spawn_daemon(ns: &str, bootstrap: &Path, args: &[String]) -> (Daemon, std::sync::mpsc::Receiver<()>) {
    let bin = env!("CARGO_BIN_EXE_ferry-netd");
    let mut cmd = if ns.is_empty() {
        Command::new(bin)
    } else {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, bin]);
        c
    };
    let mut child = cmd
        .args(args)
        .env("FERRY_BOOTSTRAP", bootstrap)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferry-netd");
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().take(100) {
            let Ok(line) = line else { break };
            if line.contains("ready") {
                let _ = tx.send(());
            }
        }
    });
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let l2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().take(10_000) {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            let mut l = l2.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    (Daemon(child, log), rx)
}

fn daemon(ns: &str, bootstrap: &Path, args: &[String]) -> Daemon {
    let (d, ready) = spawn_daemon(ns, bootstrap, args);
    ready.recv_timeout(Duration::from_secs(30)).expect("ferry-netd did not become ready");
    d
}

fn name_server(dir: &Path) -> PathBuf {
    let path = dir.join("bootstrap");
    ferry::NameServer::bind(&path).expect("bind name server").spawn().expect("start name server");
    path
}

fn identity(dir: &Path, host: &str) -> PathBuf {
    let (cert, key) = Identity::generate(host).unwrap().to_pem();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
    dir.to_owned()
}

/// Two name servers and two `ferry-netd` daemons, one per namespace of
/// `hosts`, in a fresh directory: a program on host a serves `name` (its
/// receive right is `srv`), daemon a exports it and daemon b imports it as
/// `name@a`; `extra` goes to both daemons.
struct Linked {
    dir: PathBuf,
    bs_a: PathBuf,
    bs_b: PathBuf,
    id_a: PathBuf,
    daemon_a: Daemon,
    _daemon_b: Daemon,
    srv: ferry::ReceiveRight,
}

const PORT: &str = "7447";

fn link_two(hosts: &Hosts, tag: &str, name: &str, extra: &[&str]) -> Linked {
    let dir = std::env::temp_dir().join(format!("ferry-netns-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (bs_a, bs_b) = (name_server(&create(&dir.join("a"))), name_server(&create(&dir.join("b"))));
    let (id_a, id_b) = (identity(&dir.join("id-a"), "a"), identity(&dir.join("id-b"), "b"));
    let (srv, to_srv) = ferry::port().unwrap();
    Bootstrap::connect_to(&bs_a).unwrap().register(name, &to_srv).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let extra: Vec<String> = extra.iter().map(|e| e.to_string()).collect();
    let mut args_a = vec![
        "--identity".into(), s(&id_a),
        "--listen".into(), format!("{}:{PORT}", hosts.addr[0]),
        "--trust".into(), format!("b={}", s(&id_b.join("cert.pem"))),
        "--export".into(), name.into(),
    ];
    args_a.extend(extra.iter().cloned());
    let mut args_b = vec![
        "--identity".into(), s(&id_b),
        "--listen".into(), format!("{}:{PORT}", hosts.addr[1]),
        "--trust".into(), format!("a={}", s(&id_a.join("cert.pem"))),
        "--peer".into(), format!("a={}:{PORT}", hosts.addr[0]),
        "--import".into(), format!("{name}@a"),
    ];
    args_b.extend(extra);
    let daemon_a = daemon(&hosts.ns[0], &bs_a, &args_a);
    let _daemon_b = daemon(&hosts.ns[1], &bs_b, &args_b);
    Linked { dir, bs_a, bs_b, id_a, daemon_a, _daemon_b, srv }
}

#[test]
fn two_daemons_in_two_namespaces() {
    watchdog("two_daemons_in_two_namespaces", Duration::from_secs(120), || {
        let Some(hosts) = Hosts::make(0) else { return };
        let Linked { dir, bs_a: _, bs_b, id_a, daemon_a, _daemon_b, mut srv } =
            link_two(&hosts, "pair", "echo", &["--idle-timeout-ms", "1500"]);
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let port = PORT;

        // On host b, the remote name is looked up like any other.
        let echo = Bootstrap::connect_to(&bs_b).unwrap().lookup("echo@a").unwrap();
        let (mut home, home_tx) = ferry::port().unwrap();
        let original = key_of(home_tx.as_fd()).unwrap();
        let (mut me, _keep) = ferry::port().unwrap();
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        echo.send(
            Message::new(1)
                .with_body(*b"across")
                .with_item(home_tx)
                .with_item(RegionItem::copied_from(&bytes).unwrap())
                .with_reply(me.make_send_once().unwrap()),
            WAIT,
        )
        .unwrap();

        // On host a.
        let mut req = srv.recv(WAIT).unwrap();
        assert_eq!(req.body(), b"across");
        let mut items = req.take_items().into_iter();
        let Some(Item::Send(proxy)) = items.next() else { panic!("the send right crossed") };
        let Some(Item::Region(region)) = items.next() else { panic!("the region crossed") };
        assert_eq!(region.copy_out(1 << 20).unwrap(), bytes, "the region crossed by value");
        let Some(Reply::SendOnce(reply)) = req.take_reply() else { panic!("the reply right crossed") };
        reply.send(Message::new(2).with_item(proxy), WAIT).unwrap();

        // Back on host b: the right is the original port again.
        let mut got = me.recv(WAIT).unwrap();
        assert_eq!(got.op(), 2);
        let Some(Item::Send(back)) = got.take_items().pop() else { panic!("the right came back") };
        assert_eq!(key_of(back.as_fd()).unwrap(), original, "no proxy chain after a round trip");
        back.send(Message::new(3), WAIT).unwrap();
        assert_eq!(home.recv(WAIT).unwrap().op(), 3);

        // A host daemon a was not told to trust is refused, and a says so.
        let id_s = identity(&dir.join("id-stranger"), "b");
        let (_stranger, _) = spawn_daemon(
            &hosts.ns[1],
            &bs_b,
            &[
                "--identity".into(), s(&id_s),
                "--listen".into(), format!("{}:7448", hosts.addr[1]),
                "--trust".into(), format!("a={}", s(&id_a.join("cert.pem"))),
                "--peer".into(), format!("a={}:{port}", hosts.addr[0]),
            ],
        );
        assert!(
            daemon_a.logged("refused a client whose certificate is not on the trusted list"),
            "daemon a logged the refusal"
        );

        // SIGKILL of daemon a: the proxy on b becomes a dead name.
        drop(daemon_a);
        assert!(echo.wait_dead(WAIT), "the proxy became a dead name after the far daemon died");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

fn create(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    p.to_owned()
}

#[test]
fn a_large_region_crosses_by_reference_between_namespaces() {
    watchdog("a_large_region_crosses_by_reference_between_namespaces", Duration::from_secs(120), || {
        let Some(hosts) = Hosts::make(1) else { return };
        let Linked { dir, bs_a, bs_b, id_a: _, daemon_a: _daemon_a, _daemon_b, mut srv } = link_two(&hosts, "cor", "sink", &[]);
        let status = |bs: &Path| {
            let right = Bootstrap::connect_to(bs).unwrap().lookup(ferry_net::status::NAME).unwrap();
            ferry_net::status::query(&right).unwrap()
        };

        // Host b sends a 64 MiB region to a program on host a.
        let len = 64 << 20;
        let mut data = ferry::Region::new(len).unwrap();
        for (i, b) in data.as_mut_slice().iter_mut().enumerate() {
            *b = (i / 4096 % 251) as u8 ^ (i as u8);
        }
        let sink = Bootstrap::connect_to(&bs_b).unwrap().lookup("sink@a").unwrap();
        sink.send(Message::new(1).with_item(data.by_move().unwrap()), WAIT).unwrap();
        let Some(Item::Send(right)) = srv.recv(WAIT).unwrap().take_items().pop() else { panic!("the region arrived by reference") };
        let region = ferry_net::RemoteRegion::open(right).unwrap();
        assert_eq!(region.len(), len as u64);
        let view = region.map().unwrap();
        let bytes = view.as_slice().unwrap();
        for at in [0usize, 3 << 20, len - 1] {
            assert_eq!(bytes[at], (at / 4096 % 251) as u8 ^ (at as u8), "byte {at}");
        }
        // The daemons' counters: a fetched a sliver, b served exactly that.
        let (sa, sb) = (status(&bs_a), status(&bs_b));
        assert!(sa.stats.bytes_fetched > 0 && sa.stats.bytes_fetched * 100 < len as u64, "{:?}", sa.stats);
        assert_eq!(sb.stats.bytes_served, sa.stats.bytes_fetched);
        assert_eq!((sb.links[0].regions_out, sa.links[0].regions_in), (1, 1));

        // The receiver lets go: the origin's daemon frees the region.
        drop(view);
        drop(region);
        let mut freed = false;
        for _ in 0..300 {
            if status(&bs_b).links[0].regions_out == 0 {
                freed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(freed, "the origin's daemon released the region");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// A UDP port on loopback that was free a moment ago.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_daemon_that_comes_back_is_dialled_again_and_its_names_imported_afresh() {
    watchdog("a_daemon_that_comes_back_is_dialled_again_and_its_names_imported_afresh", Duration::from_secs(120), || {
        let dir = std::env::temp_dir().join(format!("ferry-netd-reimport-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (bs_a, bs_b) = (name_server(&create(&dir.join("a"))), name_server(&create(&dir.join("b"))));
        let (id_a, id_b) = (identity(&dir.join("id-a"), "a"), identity(&dir.join("id-b"), "b"));
        let (mut srv, to_srv) = ferry::port().unwrap();
        Bootstrap::connect_to(&bs_a).unwrap().register("svc", &to_srv).unwrap();
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let port = free_udp_port();
        let args_a: Vec<String> = vec![
            "--identity".into(), s(&id_a),
            "--listen".into(), format!("127.0.0.1:{port}"),
            "--trust".into(), format!("b={}", s(&id_b.join("cert.pem"))),
            "--export".into(), "svc".into(),
            "--idle-timeout-ms".into(), "1000".into(),
        ];
        let args_b: Vec<String> = vec![
            "--identity".into(), s(&id_b),
            "--listen".into(), "127.0.0.1:0".into(),
            "--trust".into(), format!("a={}", s(&id_a.join("cert.pem"))),
            "--peer".into(), format!("a=127.0.0.1:{port}"),
            "--import".into(), "svc@a".into(),
            "--idle-timeout-ms".into(), "1000".into(),
        ];
        let daemon_a = daemon("", &bs_a, &args_a);
        let daemon_b = daemon("", &bs_b, &args_b);
        let mut names_b = Bootstrap::connect_to(&bs_b).unwrap();
        let old = names_b.lookup("svc@a").expect("daemon b imported svc@a at start");
        old.send(Message::new(1), WAIT).unwrap();
        assert_eq!(srv.recv(WAIT).unwrap().op(), 1);

        // Daemon a dies: the imported name on b leads to a dead name.
        drop(daemon_a);
        assert!(old.wait_dead(WAIT), "the proxy stayed alive after daemon a was killed");

        // It starts again on the same address: daemon b dials it again and
        // registers svc@a afresh, which reaches the program on a.
        let _daemon_a = daemon("", &bs_a, &args_a);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let fresh = loop {
            match names_b.lookup("svc@a") {
                Ok(r) if !r.is_dead() => break r,
                _ => {
                    assert!(std::time::Instant::now() < deadline, "svc@a was not imported again:\n{}", daemon_b.1.lock().unwrap());
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        fresh.send(Message::new(2), WAIT).unwrap();
        assert_eq!(srv.recv(WAIT).unwrap().op(), 2, "the fresh import reaches the program on a");
        assert!(daemon_b.logged("is back"), "daemon b logged the link's return");
        assert!(old.is_dead(), "the old proxy never re-binds");
        drop(daemon_b);
        let _ = std::fs::remove_dir_all(&dir);
    });
}
