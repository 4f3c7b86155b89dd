//! `ferry names` and `ferry stat` show the network server's links, remote
//! names and bytes fetched on demand, asked through its status port. The
//! network server here is a `ferry_net::Node` in this process, linked over
//! loopback to a second one, serving its status as `ferry-netd` does.

#![cfg(feature = "net")]

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry::{Item, Message, Region, Timeout};
use ferry_net::status::{self, Status};
use ferry_net::{Identity, Node, NodeConfig, Peer, RemoteRegion};

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run ferry");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{cmd:?} failed: {}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn names_and_stat_show_links_remote_names_and_bytes_fetched() {
    let dir = std::env::temp_dir().join(format!("ferry-cli-net-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bootstrap");
    let mut server = ferry::NameServer::bind(&path).unwrap();
    // A system name (as `ferryd --files` and `ferry-netd --system-names`
    // make): listed as the system's, not under a number.
    let (_sys_rx, sys_tx) = ferry::port().unwrap();
    server.add_system_name("shared", sys_tx).unwrap();
    server.spawn().unwrap();
    let mut bs = ferry::Bootstrap::connect_to(&path).unwrap();

    let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
    let loopback = "127.0.0.1:0".parse().unwrap();
    let a = Arc::new(Node::start(NodeConfig::new(ia.clone(), vec![Peer { name: "b".into(), cert: ib.cert.clone() }], loopback)).unwrap());
    let b = Node::start(NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], loopback)).unwrap();
    a.connect("b", b.local_addr().unwrap()).unwrap();
    // `b` exports "echo"; this host imports it as echo@b, as --import does.
    let (mut echo_rx, echo) = ferry::port().unwrap();
    b.export("echo", echo);
    let remote = a.lookup("echo@b").unwrap();
    bs.register("echo@b", &remote).unwrap();
    // A right of this host's crosses to `b`, which keeps it: one reference
    // against this user's budget at `b`.
    let (_mine, my_right) = ferry::port().unwrap();
    remote.send(Message::new(2).with_item(my_right), WAIT).unwrap();
    let kept_by_b = echo_rx.recv(WAIT).unwrap();
    assert_eq!(kept_by_b.items().len(), 1);
    let me = rustix::process::getuid().as_raw();
    let usage = a.usage();
    assert_eq!(usage.iter().map(|u| (u.peer.as_str(), u.uid, u.rights, u.regions)).collect::<Vec<_>>(), [("b", me, 1, 0)]);
    // Each user sees its own budgets; another user sees none of them.
    assert_eq!(Status::of(&a, &[], Some(me)).users, usage);
    let other = if me == 65534 { 65533 } else { 65534 };
    let theirs = Status::of(&a, &[], Some(other));
    assert!(theirs.users.is_empty(), "{theirs:?}");
    let mine = Status::of(&a, &["echo@b".into()], Some(me));
    assert_eq!(Status::decode(&mine.encode()).unwrap(), mine);
    // A region crosses from `b` to a receiver here, which touches one page.
    let (mut inbox, to_inbox) = ferry::port().unwrap();
    a.export("inbox", to_inbox);
    let to_here = b.lookup("inbox@a").unwrap();
    to_here.send(Message::new(1).with_item(Region::new(20 << 20).unwrap().by_move().unwrap()), WAIT).unwrap();
    let Some(Item::Send(r)) = inbox.recv(WAIT).unwrap().take_items().pop() else { panic!("a region by reference") };
    let region = RemoteRegion::open(r).unwrap();
    let view = region.map().unwrap();
    assert_eq!(view.as_slice().unwrap()[4096 * 100], 0);
    let fetched = a.stats().bytes_fetched;
    assert!(fetched > 0);

    // The status port, served as ferry-netd serves it.
    let (port, right) = ferry::port().unwrap();
    bs.register(status::NAME, &right).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (a2, s2) = (a.clone(), stop.clone());
    let server = std::thread::spawn(move || {
        let mut server = status::Server::new(port).unwrap();
        for _ in 0..600 {
            if s2.load(Ordering::Relaxed) {
                return;
            }
            server.serve(&a2, &["echo@b".to_string()], Timeout::millis(100));
        }
    });

    let names = run(Command::new(env!("CARGO_BIN_EXE_ferry")).args(["names", "--socket"]).arg(&path));
    for needle in ["network (ferry-netd):", "link to b", "up", "remote name echo@b", "proxy to host b (link up)", "exported     inbox"] {
        assert!(names.contains(needle), "ferry names lacks {needle:?}:\n{names}");
    }
    assert!(names.lines().any(|l| l.starts_with("shared ") && l.split_whitespace().nth(1) == Some("system")), "{names}");
    let stat = run(Command::new(env!("CARGO_BIN_EXE_ferry")).arg("stat").env("FERRY_BOOTSTRAP", &path));
    let budget = format!("user {me:<6} at b                    1 rights held there,   0 regions kept for it");
    for needle in ["network (ferry-netd):", "regions sent   0 / mapped here   1", &format!("fetched on demand {fetched} B in "), &budget] {
        assert!(stat.contains(needle), "ferry stat lacks {needle:?}:\n{stat}");
    }
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    drop((view, region, kept_by_b));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn another_user_sees_the_links_but_not_the_names_or_counters() {
    let ia = Identity::generate("a").unwrap();
    let a = Node::start(NodeConfig::new(ia, vec![], "127.0.0.1:0".parse().unwrap())).unwrap();
    let (_rx, tx) = ferry::port().unwrap();
    a.export("private-service", tx);
    let me = rustix::process::getuid().as_raw();
    let mine = Status::of(&a, &["x@b".into()], Some(me));
    assert!(mine.full);
    assert_eq!((mine.exports.as_slice(), mine.imports.as_slice()), (&["private-service".to_string()][..], &["x@b".to_string()][..]));
    let other = if me == 65534 { 65533 } else { 65534 };
    for asker in [Some(other), None] {
        let theirs = Status::of(&a, &["x@b".into()], asker);
        assert!(!theirs.full && theirs.exports.is_empty() && theirs.imports.is_empty(), "{asker:?}: {theirs:?}");
        assert_eq!(theirs.stats, Default::default());
        // And it survives the wire encoding.
        assert_eq!(Status::decode(&theirs.encode()).unwrap(), theirs);
    }
    assert_eq!(Status::decode(&mine.encode()).unwrap(), mine);
}
