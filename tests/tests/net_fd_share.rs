//! One local user cannot take a network node's last descriptors from the
//! others: a test binary of its own, since it lowers the whole process's
//! open-file limit.

mod common;

use std::io::BufRead;
use std::time::Duration;

use common::{loopback_node as node, watchdog};
use ferry::{Item, Message, Timeout};
use ferry_net::Identity;

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));


/// Another user (nobody) on host `b` sends rights to its own ports to a
/// port on `a` that keeps them (a third user's), until refused; root's
/// message of as many rights, sent from `b` to root's port on `a`
/// afterwards, still crosses. Every right kept for the peer costs
/// `b` descriptors, and one user's rights, within their count budget
/// (4096 a peer), took every descriptor a node with a few thousand has,
/// and root's rights were refused as the node being short of them.
#[test]
fn one_user_cannot_take_the_nodes_last_descriptors_from_another() {
    if !common::can_play_other_user("one_user_cannot_take_the_nodes_last_descriptors_from_another") {
        return;
    }
    watchdog("one_user_cannot_take_the_nodes_last_descriptors_from_another", Duration::from_secs(120), || {
        let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
        let (a, b) = (node(&ia, &ib, "b"), node(&ib, &ia, "a"));
        b.connect("a", a.local_addr().unwrap()).unwrap();
        // Where the other user's rights go: a port on `a` of a third
        // user's (65533), which keeps every message, so that they are
        // charged to neither root nor the sender there.
        let (mut collect, to_collect) = ferry::port().unwrap();
        let mut keeper = {
            use ferry::spawn::CommandExt;
            common::peer_command_as(65533, std::path::Path::new("/nonexistent"), "keep-all", &[]).pass_right(&to_collect).unwrap().stdin(std::process::Stdio::piped()).spawn().unwrap()
        };
        let mut got = collect.recv(WAIT).unwrap();
        let Some(Item::Send(sink)) = got.take_items().pop() else { panic!("no right from the keeper") };
        a.export("sink", sink);
        // Root's own port on `a`.
        let (mut srv, to_srv) = ferry::port().unwrap();
        a.export("root", to_srv);
        let to_root = b.lookup("root@a").unwrap();
        // A few thousand descriptors more than are open now.
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        rustix::process::setrlimit(rustix::process::Resource::Nofile, rustix::process::Rlimit { current: Some(open + 3000), maximum: lim.maximum }).unwrap();

        let mut other = common::spawn_other_user(&b.lookup("sink@a").unwrap(), "export-rights", &["100"]);
        let mut said = std::io::BufReader::new(other.stdout.take().unwrap()).lines();
        let line = match said.next() {
            Some(Ok(l)) => l,
            Some(Err(e)) => format!("said nothing readable: {e}"),
            None => "exited saying nothing".into(),
        };
        println!("the other user {line}");

        // Root's message of as many rights, sent to its own port, crosses
        // with every right live.
        let (mut me, _me) = ferry::port().unwrap();
        let mut m = Message::new(50).with_reply(me.make_send_once().unwrap());
        let mut ports = Vec::new();
        for _ in 0..63 {
            let (rx, tx) = ferry::port().unwrap();
            ports.push(rx);
            m = m.with_item(Item::Send(tx));
        }
        to_root.send(m, WAIT).unwrap();
        if let Ok(answer) = me.recv(Timeout::millis(500)) {
            panic!("root's right was refused: {:?} (the other user {line})", ferry_net::Refusal::of(&answer));
        }
        let got = srv.recv(WAIT).unwrap();
        assert_eq!(got.op(), 50);
        assert_eq!(got.items().len(), 63);
        assert!(got.items().iter().all(|it| matches!(it, Item::Send(s) if !s.is_dead())), "root's rights arrived as dead names (the other user {line})");
        drop(keeper.stdin.take());
        let _ = keeper.wait();
        drop(other.stdin.take());
        let _ = other.wait();
    });
}
