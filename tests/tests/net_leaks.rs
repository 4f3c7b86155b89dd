//! Nothing leaks across the network server: after rights, send-once
//! rights and regions have crossed both ways and everything is dropped,
//! the process holds as many descriptors as before. Its own test binary,
//! so no other test opens descriptors meanwhile.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{open_fds, watchdog};
use ferry::{Item, Message, RegionItem, Timeout};
use ferry_net::{Identity, Node, NodeConfig, Peer};

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));

fn pair() -> (Node, Node) {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let ia = Identity::generate("a").unwrap();
    let ib = Identity::generate("b").unwrap();
    let a = Node::start(NodeConfig::new(ia.clone(), vec![Peer { name: "b".into(), cert: ib.cert.clone() }], addr)).unwrap();
    let b = Node::start(NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], addr)).unwrap();
    b.connect("a", a.local_addr().unwrap()).unwrap();
    (a, b)
}

fn exercise(svc: &ferry::SendRight, srv: &mut ferry::ReceiveRight, rounds: u32) {
    for round in 0..rounds {
        let (mut home, home_tx) = ferry::port().unwrap();
        let (mut me, _keep) = ferry::port().unwrap();
        let m = Message::new(round)
            .with_item(home_tx)
            .with_item(RegionItem::copied_from(&[round as u8; 5000]).unwrap())
            .with_reply(me.make_send_once().unwrap());
        svc.send(m, WAIT).unwrap();
        let mut req = srv.recv(WAIT).unwrap();
        let mut items = req.take_items().into_iter();
        let Some(Item::Send(proxy)) = items.next() else { panic!() };
        drop(items);
        if round % 2 == 0 {
            req.take_reply().unwrap().send(Message::new(1).with_item(proxy), WAIT).unwrap();
            let got = me.recv(WAIT).unwrap();
            drop(got);
        } else {
            // Dropped unused: the send-once proxy and the send proxy let go.
            drop(req);
            drop(proxy);
            assert!(matches!(home.recv(WAIT), Err(ferry::RecvError::NoSenders)));
        }
    }
}

/// Waits (bounded) until the process holds at most `before` descriptors.
fn settle(before: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(20);
    let mut now = open_fds();
    for _ in 0..400 {
        if now <= before || Instant::now() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        now = open_fds();
    }
    now
}

#[test]
fn nothing_leaks_after_rights_and_regions_cross() {
    watchdog("nothing_leaks_after_rights_and_regions_cross", Duration::from_secs(90), || {
        let outside = open_fds();
        let (a, b) = pair();
        let (mut srv, to_srv) = ferry::port().unwrap();
        a.export("svc", to_srv);
        let svc = b.lookup("svc@a").unwrap();
        exercise(&svc, &mut srv, 2); // warms up what is made once per link
        let before = open_fds();
        exercise(&svc, &mut srv, 20);
        let now = settle(before);
        assert!(now <= before, "while linked: descriptors before {before}, after {now}");
        let end = Instant::now() + Duration::from_secs(20);
        for _ in 0..400 {
            if b.links()[0].exports == 0 || Instant::now() > end {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(b.links()[0].exports, 0, "every right b sent was released");
        assert_eq!(a.links()[0].exports, 1, "only the looked-up name is still held");
        drop((svc, srv, a, b));
        let now = settle(outside);
        assert!(now <= outside, "after the nodes stopped: descriptors before {outside}, after {now}");
    });
}
