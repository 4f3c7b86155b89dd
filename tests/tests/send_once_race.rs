//! A send-once reply is never lost to a racing end-of-file: the replier
//! sends through the right and closes it at once, while the receiver polls
//! its send-once sockets without blocking. The kernel's non-blocking
//! `SOCK_SEQPACKET` receive can report end-of-file with the reply still
//! queued when the close lands between its two checks; ferry must deliver
//! the reply, not `SendOnceDropped`. The race is narrow, so this runs many
//! round trips with the two sides on different CPUs where there are two.

mod common;

use std::time::Duration;

use common::*;
use ferry::{Message, Timeout};

const ROUND_TRIPS: usize = 20_000;

#[test]
fn send_once_replies_survive_the_close_that_follows_them() {
    watchdog("send_once_race", Duration::from_secs(300), || {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (mut srv_rx, srv_tx) = ferry::port().unwrap();
        let (mut mine, _keep_alive) = ferry::port().unwrap();
        let server = std::thread::spawn(move || {
            if cpus > 1 {
                let _ = ferry::rpc::pin_current_thread(1);
            }
            for _ in 0..ROUND_TRIPS {
                let mut req = srv_rx.recv(Timeout::Infinite).expect("request");
                req.take_reply().expect("reply right").send(Message::new(2), Timeout::Infinite).expect("reply");
            }
        });
        if cpus > 1 {
            let _ = ferry::rpc::pin_current_thread(0);
        }
        for i in 0..ROUND_TRIPS {
            let once = mine.make_send_once().unwrap();
            srv_tx.send(Message::new(1).with_reply(once), Timeout::Infinite).unwrap();
            match mine.recv(Timeout::Infinite) {
                Ok(reply) => assert_eq!(reply.op(), 2),
                Err(e) => panic!("round trip {i}: the reply was lost: {e}"),
            }
        }
        server.join().expect("server thread");
    });
}
