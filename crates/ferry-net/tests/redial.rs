//! A link that is lost comes back: a node told to keep a peer linked
//! (`Redial`, as `ferry-netd --peer` does) dials it again with back-off
//! once it is reachable; the old proxies stay dead names and new lookups
//! work. Two real nodes over loopback, one stopped and started again on
//! the same address.

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
