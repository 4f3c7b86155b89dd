//! Ports, rights and notifications between real processes: the peer program
//! `ferry-peer` plays the other side, found through a private name server.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use ferry::{Item, Message, PortOptions, RecvError, SendError, Timeout};

const LIMIT: Duration = Duration::from_secs(60);

fn kill(child: &mut std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn rights_cross_process_boundaries() {
    let _serial = serial();
    watchdog("rights_cross", LIMIT, || {
        let path = private_bootstrap("rights");
        let server = spawn_peer(&path, "server", &["svc"]);
        let mut bs = names(&path);
        let to_server = lookup_retry(&mut bs, "svc");
        let (mut mine, to_me) = ferry::port().unwrap();
        let reply = mine.make_send_once().unwrap();
        // Hand the server a send right to our own port, and a send-once reply right.
        to_server.send(Message::new(1).with_body(*b"abc").with_item(to_me).with_reply(reply), Timeout::Infinite).unwrap();
        let mut got = [mine.recv(Timeout::Infinite).unwrap(), mine.recv(Timeout::Infinite).unwrap()];
        got.sort_by_key(|m| m.op());
        assert_eq!(got[0].op(), 2, "the reply through the send-once right");
        assert!(got[0].via_send_once());
        assert_eq!(got[0].body(), b"cba");
        assert_eq!(got[1].op(), 7, "the greeting through the send right we passed");
        assert_eq!(got[0].sender().unwrap().pid as u32, server.id());
        assert_eq!(got[1].sender().unwrap().pid as u32, server.id());
        to_server.send(Message::new(99), Timeout::Infinite).unwrap();
        let out = finish(server);
        assert!(out.contains("op 1 from pid"), "{out}");
        // The server dropped the send right it was given: we see no-senders.
        assert!(matches!(mine.recv(Timeout::Infinite), Err(RecvError::NoSenders)));
    });
}

#[test]
fn receive_right_moves_with_its_queue() {
    let _serial = serial();
    watchdog("receive_moves", LIMIT, || {
        let path = private_bootstrap("recvmove");
        let (mut control, to_control) = ferry::port().unwrap();
        names(&path).register("control", &to_control).unwrap();
        let peer = spawn_peer(&path, "take-receive", &["control"]);
        let mut m = control.recv(Timeout::Infinite).unwrap();
        let Some(Item::Send(to_peer)) = m.take_items().pop() else { panic!("expected a send right") };
        let (mut moving, to_moving) = ferry::port().unwrap();
        let once = moving.make_send_once().unwrap();
        to_moving.send(Message::new(10).with_body(*b"before"), Timeout::Infinite).unwrap();
        to_peer.send(Message::new(1).with_item(moving), Timeout::Infinite).unwrap();
        to_moving.send(Message::new(11).with_body(*b"after"), Timeout::Infinite).unwrap();
        once.send(Message::new(12).with_body(*b"once"), Timeout::Infinite).unwrap();
        to_moving.send(Message::new(99), Timeout::Infinite).unwrap();
        let out = finish(peer);
        assert!(out.contains("1 send-once outstanding"), "{out}");
        assert!(out.contains("got 10 before"), "{out}");
        assert!(out.contains("got 11 after"), "{out}");
        assert!(out.contains("got 12 once"), "{out}");
        // The receive right died with the peer: our send right is a dead name.
        assert!(to_moving.wait_dead(Timeout::Infinite));
    });
}

#[test]
fn killed_receiver_is_a_dead_name() {
    let _serial = serial();
    watchdog("killed_receiver", LIMIT, || {
        let path = private_bootstrap("deadname");
        let before = open_fds();
        {
            let (mut control, to_control) = ferry::port().unwrap();
            names(&path).register("control", &to_control).unwrap();
            let mut peer = spawn_peer(&path, "hold-receive", &["control"]);
            let mut m = control.recv(Timeout::Infinite).unwrap();
            let Some(Item::Send(to_peer)) = m.take_items().pop() else { panic!("expected a send right") };
            to_peer.send(Message::new(1), Timeout::Infinite).unwrap();
            assert!(!to_peer.is_dead());
            kill(&mut peer);
            assert!(to_peer.wait_dead(Timeout::Infinite), "dead-name event after SIGKILL");
            assert!(matches!(to_peer.send(Message::new(2), Timeout::Infinite).map_err(SendError::from), Err(SendError::PeerDead)));
        }
        // The registration of "control" holds one descriptor in the server
        // thread of this process until its port dies, which it has now.
        for _ in 0..200 {
            if open_fds() <= before {
                break;
            }
            nap();
        }
        assert_eq!(open_fds(), before, "descriptors leaked");
    });
}

#[test]
fn killed_sender_mid_send_gives_no_senders() {
    let _serial = serial();
    watchdog("killed_sender", LIMIT, || {
        let path = private_bootstrap("nosenders");
        let (mut rx, tx) = ferry::port_with(PortOptions { queue_limit: Some(8192) }).unwrap();
        names(&path).register("sink", &tx).unwrap();
        drop(tx);
        let mut peer = spawn_peer(&path, "send-forever", &["sink"]);
        // Let its queue fill so that it is blocked inside send when killed.
        let first = rx.recv(Timeout::Infinite).unwrap();
        assert_eq!(first.op(), 3);
        std::thread::sleep(Duration::from_millis(50));
        kill(&mut peer);
        names(&path).unregister("sink").unwrap();
        let mut seqs = vec![u64::from_le_bytes(first.body().try_into().unwrap())];
        loop {
            match rx.recv(Timeout::Infinite) {
                Ok(m) => seqs.push(u64::from_le_bytes(m.body().try_into().unwrap())),
                Err(RecvError::NoSenders) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let expect: Vec<u64> = (0..seqs.len() as u64).collect();
        assert_eq!(seqs, expect, "every complete message arrives once, in order");
    });
}

#[test]
fn many_senders_full_queue_nothing_lost_or_duplicated() {
    let _serial = serial();
    watchdog("many_senders", LIMIT, || {
        let path = private_bootstrap("flood");
        let (mut rx, tx) = ferry::port_with(PortOptions { queue_limit: Some(16 * 1024) }).unwrap();
        names(&path).register("sink", &tx).unwrap();
        drop(tx);
        const N: u64 = 300;
        let blocking: Vec<_> = (0..3).map(|id| spawn_peer(&path, "flood", &["sink", &N.to_string(), &id.to_string(), "block"])).collect();
        let timed = spawn_peer(&path, "flood", &["sink", &N.to_string(), "9", "timed"]);
        let mut got: BTreeSet<(u64, u64)> = BTreeSet::new();
        let mut received = 0usize;
        let mut slow = 0u32;
        // A slow receiver: it pauses now and then so the queue stays full.
        let outputs = {
            let mut children = blocking;
            children.push(timed);
            let mut done = Vec::new();
            loop {
                match rx.recv(Timeout::millis(500)) {
                    Ok(m) => {
                        let b = m.body();
                        let key = (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap()));
                        assert!(got.insert(key), "duplicate {key:?}");
                        received += 1;
                        slow += 1;
                        if slow.is_multiple_of(97) {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    Err(RecvError::Timeout) => {
                        if children.iter_mut().all(|c| c.try_wait().unwrap().is_some()) {
                            break;
                        }
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            while let Ok(m) = rx.recv(Timeout::Zero) {
                let b = m.body();
                let key = (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap()));
                assert!(got.insert(key), "duplicate {key:?}");
                received += 1;
            }
            for c in children {
                done.push(finish(c));
            }
            done
        };
        for id in 0..3u64 {
            for seq in 0..N {
                assert!(got.contains(&(id, seq)), "blocking sender {id} message {seq} lost");
            }
        }
        // The timed sender: exactly the messages it reported as sent arrived.
        let timed_out = &outputs[3];
        let sent: BTreeSet<u64> = timed_out.lines().filter_map(|l| l.strip_prefix("ok ")).map(|s| s.parse().unwrap()).collect();
        let timeouts = timed_out.lines().filter(|l| l.starts_with("timeout ")).count();
        assert_eq!(sent.len() + timeouts, N as usize);
        let arrived: BTreeSet<u64> = got.iter().filter(|(id, _)| *id == 9).map(|(_, s)| *s).collect();
        assert_eq!(arrived, sent, "timed sender: sent set and arrived set differ");
        assert_eq!(received, 3 * N as usize + sent.len());
    });
}

#[test]
fn a_process_port_hands_a_started_process_a_right() {
    let _serial = serial();
    watchdog("hand_off", Duration::from_secs(60), || {
        // ferry's one long-lived descriptor (its published counters) is
        // not a leak.
        ferry::counters::publish();
        let fds_before = open_fds();
        let (mut rx, tx) = ferry::port().unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ferry-peer"));
        cmd.arg("handed-right").stdout(std::process::Stdio::piped());
        let (child, port, handoff) = ferry::process::spawn_with_hand_off(&mut cmd).expect("start under the hand-off filter");
        assert_eq!(port.pid(), child.id() as i32);
        // Two asks, two answers: each is a fresh copy of the right.
        for _ in 0..2 {
            let mut asker = None;
            for _ in 0..200 {
                asker = handoff.hand(&tx, Timeout::millis(100)).expect("hand the right");
                if asker.is_some() {
                    break;
                }
            }
            assert_eq!(asker, Some(child.id()), "the child never asked");
            let m = rx.recv(Timeout::After(Duration::from_secs(10))).expect("the child sends on the handed right");
            assert_eq!((m.op(), m.body()), (77, &b"handed"[..]));
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "got\ngot\nioctl ok\n");
        assert!(port.wait_dead(1000));
        // Nobody asks any more: the hand-off times out, keeping nothing.
        assert_eq!(handoff.hand(&tx, Timeout::millis(50)).unwrap(), None);
        drop((handoff, port, tx, rx));
        let mut settled = false;
        for _ in 0..200 {
            if open_fds() <= fds_before {
                settled = true;
                break;
            }
            nap();
        }
        assert!(settled, "descriptor leak: {} before, {} after", fds_before, open_fds());
        // A process started without the filter hears from nobody.
        let plain = std::process::Command::new(env!("CARGO_BIN_EXE_ferry-peer")).arg("handed-right").output().unwrap();
        assert!(plain.status.success());
        assert_eq!(String::from_utf8_lossy(&plain.stdout), "none\nnone\nioctl ok\n");
    });
}

#[test]
fn a_hand_off_whose_holder_is_gone_is_an_error_not_a_hang() {
    let _serial = serial();
    watchdog("hand_off_gone", Duration::from_secs(60), || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ferry-peer"));
        cmd.arg("handed-right").stdout(std::process::Stdio::piped());
        let (child, _port, handoff) = ferry::process::spawn_with_hand_off(&mut cmd).unwrap();
        drop(handoff);
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.starts_with("error: ") && said.ends_with("ioctl ok\n"), "{said}");
        assert!(!said.contains("got"), "{said}");
    });
}
