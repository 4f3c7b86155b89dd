//! A network node near its descriptor limit refuses what would take it
//! into its last descriptors, saying so, instead of losing rights: a test
//! binary of its own, since it lowers the whole process's limit.

mod common;

use std::time::Duration;

use common::{loopback_node as node, watchdog};
use ferry::{Item, Message, Timeout};
use ferry_net::Identity;

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));


#[test]
fn a_node_short_of_descriptors_refuses_rights_and_keeps_the_link() {
    watchdog("a_node_short_of_descriptors_refuses_rights_and_keeps_the_link", Duration::from_secs(90), || {
        let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
        let (a, b) = (node(&ia, &ib, "b"), node(&ib, &ia, "a"));
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, to_srv) = ferry::port().unwrap();
        a.export("keep", to_srv);
        let keep = b.lookup("keep@a").unwrap();
        let (mut me, _me) = ferry::port().unwrap();
        keep.send(Message::new(0), WAIT).unwrap();
        assert_eq!(srv.recv(WAIT).unwrap().op(), 0);

        // Room for a few dozen rights more than are open now.
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        rustix::process::setrlimit(rustix::process::Resource::Nofile, rustix::process::Rlimit { current: Some(open + 300), maximum: lim.maximum }).unwrap();

        // Messages of eight live rights each, kept at the far side, until
        // one is refused (here) or arrives with dead names (there).
        let (mut ports, mut kept) = (Vec::new(), Vec::new());
        let mut outcome = None;
        for i in 1..100 {
            let mut m = Message::new(i).with_reply(me.make_send_once().unwrap());
            for _ in 0..8 {
                let (rx, tx) = ferry::port().unwrap();
                ports.push(rx);
                m = m.with_item(Item::Send(tx));
            }
            keep.send(m, WAIT).unwrap();
            if let Ok(answer) = me.recv(Timeout::millis(200)) {
                let (why, text) = ferry_net::Refusal::of(&answer).expect("a refusal");
                // Short of descriptors, or (one user sending them all) past
                // that user's share of them, which comes first.
                assert!(matches!(why, ferry_net::Refusal::Failed | ferry_net::Refusal::OverBudget), "{why:?}: {text}");
                assert_eq!(answer.items().len(), 8, "{text}");
                assert!(text.contains("descriptors"), "{text}");
                outcome = Some("refused");
                break;
            }
            let got = srv.recv(WAIT).unwrap();
            let dead = got.items().iter().filter(|it| matches!(it, Item::Send(s) if s.is_dead())).count();
            kept.push(got);
            if dead > 0 {
                assert_eq!(dead, 8, "a message's rights all arrive, or all arrive as dead names");
                outcome = Some("dead names");
                break;
            }
        }
        assert!(outcome.is_some(), "the node never ran short");
        // The link is up and carries messages meanwhile.
        keep.send(Message::new(1000), WAIT).unwrap();
        assert_eq!(srv.recv(WAIT).unwrap().op(), 1000, "{outcome:?}");
        assert!(b.links()[0].up && a.links()[0].up);
        // Let go, the descriptors come back and rights cross again.
        drop(kept);
        drop(ports);
        let mut crossed = false;
        for _ in 0..100 {
            let (_rx, tx) = ferry::port().unwrap();
            keep.send(Message::new(2000).with_item(Item::Send(tx)).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
            if let Ok(m) = srv.recv(Timeout::millis(100)) {
                if m.op() == 2000 && m.items().iter().all(|it| matches!(it, Item::Send(s) if !s.is_dead())) {
                    crossed = true;
                    break;
                }
            }
            let _ = me.recv(Timeout::Zero);
        }
        assert!(crossed, "rights never crossed again");
    });
}
