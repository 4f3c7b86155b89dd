//! Port and right semantics within one process (the kernel objects are real;
//! only the processes are not). Multi-process behaviour is in processes.rs.

mod common;

use std::time::Duration;

use common::{open_fds, watchdog};
use ferry::{Event, Item, Message, PortOptions, PortSet, RecvError, SendError, Timeout};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn message_carries_op_body_and_kernel_credentials() {
    let _serial = common::serial();
    let (mut rx, tx) = ferry::port().unwrap();
    tx.send(Message::new(42).with_body(vec![1, 2, 3]), Timeout::Infinite).unwrap();
    let m = rx.recv(Timeout::Infinite).unwrap();
    assert_eq!(m.op(), 42);
    assert_eq!(m.body(), &[1, 2, 3]);
    let c = m.sender().expect("credentials");
    assert_eq!(c.pid as u32, std::process::id());
    assert_eq!(c.uid, rustix::process::getuid().as_raw());
    assert_eq!(c.gid, rustix::process::getgid().as_raw());
    assert!(!m.via_send_once());
}

#[test]
fn no_senders_after_queue_drains() {
    let _serial = common::serial();
    watchdog("no_senders", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        let tx2 = tx.try_clone().unwrap();
        tx.send(Message::new(1), Timeout::Infinite).unwrap();
        tx2.send(Message::new(2), Timeout::Infinite).unwrap();
        drop(tx);
        assert!(matches!(rx.recv(Timeout::Zero), Ok(m) if m.op() == 1));
        drop(tx2);
        // Queued messages still arrive before the notification.
        assert!(matches!(rx.recv(Timeout::Infinite), Ok(m) if m.op() == 2));
        assert!(matches!(rx.recv(Timeout::Infinite), Err(RecvError::NoSenders)));
        // It stays true.
        assert!(matches!(rx.recv(Timeout::Zero), Err(RecvError::NoSenders)));
        assert!(rx.senders_gone());
    });
}

#[test]
fn dead_name_when_receive_right_dropped() {
    let _serial = common::serial();
    let (rx, tx) = ferry::port().unwrap();
    assert!(!tx.is_dead());
    assert!(!tx.wait_dead(Timeout::millis(5)));
    drop(rx);
    assert!(tx.is_dead());
    assert!(tx.wait_dead(Timeout::Infinite));
    assert!(matches!(tx.send(Message::new(1), Timeout::Infinite).map_err(SendError::from), Err(SendError::PeerDead)));
}

#[test]
fn timeouts_zero_and_finite() {
    let _serial = common::serial();
    let (mut rx, _tx) = ferry::port().unwrap();
    assert!(matches!(rx.recv(Timeout::Zero), Err(RecvError::Timeout)));
    assert!(matches!(rx.recv(Timeout::millis(10)), Err(RecvError::Timeout)));
    assert!(matches!(rx.try_recv(), Err(RecvError::Timeout)));
}

/// Runs `recv`, which must time out, and checks it took its whole `wait`
/// and not much longer (a hang would take far longer than the slack).
fn times_out_at_its_deadline(what: &str, wait: Duration, recv: impl FnOnce(Timeout) -> Result<Message, RecvError>) {
    let t = std::time::Instant::now();
    let got = recv(Timeout::After(wait));
    let took = t.elapsed();
    assert!(matches!(got, Err(RecvError::Timeout)), "{what}: {got:?}");
    assert!(took >= wait && took < wait + Duration::from_secs(2), "{what}: a {wait:?} receive took {took:?}");
}

/// Waits of 100 ms and more block in the receive itself under the
/// socket's own timer, which the kernel rounds up and may fire late: they
/// must still end at their deadline, not before and not long after.
#[test]
fn a_long_timed_receive_ends_at_its_deadline() {
    let _serial = common::serial();
    watchdog("a_long_timed_receive_ends_at_its_deadline", LIMIT, || {
        let (mut rx, _tx) = ferry::port().unwrap();
        let (mut answer, _right) = ferry::reply_pair().unwrap();
        // Twice each: the second wait finds the timer the first one set.
        for wait in [Duration::from_millis(300), Duration::from_millis(300), Duration::from_millis(150)] {
            times_out_at_its_deadline("port", wait, |t| rx.recv(t));
            times_out_at_its_deadline("reply receiver", wait, |t| answer.recv(t));
        }
    });
}

#[test]
fn a_long_timed_receive_gets_what_arrives_while_it_waits() {
    let _serial = common::serial();
    watchdog("a_long_timed_receive_gets_what_arrives_while_it_waits", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (mut answer, right) = ferry::reply_pair().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            tx.send(Message::new(7), Timeout::Infinite).unwrap();
            right.send(Message::new(8), Timeout::Infinite).unwrap();
        });
        assert_eq!(rx.recv(Timeout::After(Duration::from_secs(20))).unwrap().op(), 7);
        assert_eq!(answer.recv(Timeout::After(Duration::from_secs(20))).unwrap().op(), 8);
        sender.join().unwrap();
        // The sender is gone: the port hears it before the timer ends.
        assert!(matches!(rx.recv(Timeout::After(Duration::from_secs(20))), Err(RecvError::NoSenders)));
    });
}

/// A timeout too long for the clock waits like an endless one: a send,
/// a receive and a name lookup given `Duration::MAX` do their work rather
/// than panic when their deadline is worked out.
#[test]
fn a_timeout_too_long_for_the_clock_waits_like_an_endless_one() {
    let _serial = common::serial();
    watchdog("a_timeout_too_long_for_the_clock_waits_like_an_endless_one", LIMIT, || {
        let forever = Timeout::After(Duration::MAX);
        let (mut rx, tx) = ferry::port().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            tx.send(Message::new(7), forever).unwrap();
        });
        assert_eq!(rx.recv(forever).unwrap().op(), 7);
        sender.join().unwrap();
        assert!(matches!(rx.recv(forever), Err(RecvError::NoSenders)));
    });
}

/// A timed receive leaves the socket's timer set; a receive without a
/// timeout must wait through it for as long as it takes.
#[test]
fn an_endless_receive_outlasts_the_timer_a_timed_one_left() {
    let _serial = common::serial();
    watchdog("an_endless_receive_outlasts_the_timer_a_timed_one_left", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        assert!(matches!(rx.recv(Timeout::millis(120)), Err(RecvError::Timeout)));
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            tx.send(Message::new(3), Timeout::Infinite).unwrap();
            tx
        });
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 3);
        drop(sender.join().unwrap());
    });
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// A signal that interrupts a timed receive (a handler installed without
/// `SA_RESTART`) neither ends it early nor restarts the whole wait.
#[test]
fn a_signal_does_not_cut_a_timed_receive_short() {
    let _serial = common::serial();
    watchdog("a_signal_does_not_cut_a_timed_receive_short", LIMIT, || {
        // SAFETY: installs a handler that does nothing, for a signal no other
        // test uses; the struct is zeroed, then its handler set.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            assert_eq!(libc::sigaction(libc::SIGUSR2, &act, std::ptr::null_mut()), 0);
        }
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let (mut rx, _tx) = ferry::port().unwrap();
        let (mut answer, _right) = ferry::reply_pair().unwrap();
        let wait = Duration::from_millis(400);
        let kicker = std::thread::spawn(move || {
            for _ in 0..2 {
                std::thread::sleep(Duration::from_millis(150));
                // SAFETY: the receiving thread lives until this thread is
                // joined, and SIGUSR2 has a handler.
                unsafe { libc::pthread_kill(me, libc::SIGUSR2) };
            }
        });
        times_out_at_its_deadline("interrupted port", wait, |t| rx.recv(t));
        kicker.join().unwrap();
        let kicker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            // SAFETY: as above.
            unsafe { libc::pthread_kill(me, libc::SIGUSR2) };
        });
        times_out_at_its_deadline("interrupted reply receiver", wait, |t| answer.recv(t));
        kicker.join().unwrap();
    });
}

/// A receive right that arrived in a message may still be held by its
/// sender, who could change its socket's timer: it never waits under that
/// timer, and one the old holder left set does not end its waits.
#[test]
fn a_receive_right_that_travelled_keeps_its_timeouts() {
    let _serial = common::serial();
    watchdog("a_receive_right_that_travelled_keeps_its_timeouts", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        assert!(matches!(rx.recv(Timeout::millis(120)), Err(RecvError::Timeout)));
        let (mut carrier, to_carrier) = ferry::port().unwrap();
        to_carrier.send(Message::new(1).with_item(rx), Timeout::Infinite).unwrap();
        let Some(Item::Receive(mut rx)) = carrier.recv(Timeout::Infinite).unwrap().take_items().pop() else {
            panic!("the receive right did not arrive")
        };
        times_out_at_its_deadline("travelled port", Duration::from_millis(250), |t| rx.recv(t));
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            tx.send(Message::new(4), Timeout::Infinite).unwrap();
            tx
        });
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 4);
        drop(sender.join().unwrap());
    });
}

#[test]
fn send_once_delivers_once_and_reports_drop() {
    let _serial = common::serial();
    watchdog("send_once", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        let once = rx.make_send_once().unwrap();
        let unused = rx.make_send_once().unwrap();
        assert_eq!(rx.send_once_outstanding(), 2);
        // The reply-port pattern: the only send right is dropped, yet the
        // port waits for its send-once rights instead of reporting no-senders.
        drop(tx);
        once.send(Message::new(5).with_body(*b"reply"), Timeout::Infinite).unwrap();
        let m = rx.recv(Timeout::Infinite).unwrap();
        assert_eq!((m.op(), m.via_send_once()), (5, true));
        drop(unused);
        assert!(matches!(rx.recv(Timeout::Infinite), Err(RecvError::SendOnceDropped)));
        assert_eq!(rx.send_once_outstanding(), 0);
        assert!(matches!(rx.recv(Timeout::Infinite), Err(RecvError::NoSenders)));
    });
}

/// A reply receiver (`ferry::reply_pair`) gets its right's one message,
/// carried as a request's reply right through a port; hears when a right
/// is destroyed unused; answers every later receive with `NoSenders`; and
/// closes its descriptors when dropped.
#[test]
fn a_reply_receiver_gets_one_message_or_hears_the_right_was_dropped() {
    let _serial = common::serial();
    watchdog("reply_receiver", LIMIT, || {
        let before = open_fds();
        let (mut server, to_server) = ferry::port().unwrap();
        for round in 0..50u32 {
            let (mut answer, right) = ferry::reply_pair().unwrap();
            assert!(matches!(answer.try_recv(), Err(RecvError::Timeout)));
            assert!(matches!(answer.recv(Timeout::millis(5)), Err(RecvError::Timeout)));
            assert!(!answer.is_done());
            to_server.send(Message::new(1).with_reply(right).with_body(round.to_le_bytes()), Timeout::Infinite).unwrap();
            let mut req = server.recv(Timeout::Infinite).unwrap();
            // The server answers with a right of its own inside the reply.
            let (_keep, carried) = ferry::port().unwrap();
            let reply = Message::new(2).with_body(req.body().to_vec()).with_item(carried);
            req.take_reply().expect("the reply right").send(reply, Timeout::Infinite).unwrap();
            let mut m = answer.recv(Timeout::Infinite).unwrap();
            assert_eq!((m.op(), m.body(), m.via_send_once()), (2, &round.to_le_bytes()[..], true));
            assert!(matches!(m.take_items().pop(), Some(Item::Send(_))));
            assert!(answer.is_done());
            assert!(matches!(answer.recv(Timeout::Infinite), Err(RecvError::NoSenders)));
        }
        // Destroyed unused, before or while the receiver waits.
        let (mut answer, right) = ferry::reply_pair().unwrap();
        drop(right);
        assert!(matches!(answer.recv(Timeout::Infinite), Err(RecvError::SendOnceDropped)));
        assert!(matches!(answer.try_recv(), Err(RecvError::NoSenders)));
        drop(answer);
        let (mut answer, right) = ferry::reply_pair().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(right);
        });
        assert!(matches!(answer.recv(Timeout::Infinite), Err(RecvError::SendOnceDropped)));
        t.join().unwrap();
        drop((answer, server, to_server));
        assert_eq!(open_fds(), before, "descriptors left behind");
    });
}

#[test]
fn reply_right_travels_in_header() {
    let _serial = common::serial();
    let (mut server, to_server) = ferry::port().unwrap();
    let (mut client, _keep) = ferry::port().unwrap();
    let reply = client.make_send_once().unwrap();
    to_server.send(Message::new(1).with_reply(reply).with_body(*b"q"), Timeout::Infinite).unwrap();
    let mut req = server.recv(Timeout::Infinite).unwrap();
    assert!(req.items().is_empty(), "the reply right is not an ordinary item");
    req.take_reply().unwrap().send(Message::new(2), Timeout::Infinite).unwrap();
    assert_eq!(client.recv(Timeout::Infinite).unwrap().op(), 2);
}

#[test]
fn rights_move_inside_messages() {
    let _serial = common::serial();
    watchdog("rights_move", LIMIT, || {
        let (mut a, to_a) = ferry::port().unwrap();
        let (b, to_b) = ferry::port().unwrap();
        // Queue two messages on b, then move b's receive right (with one
        // outstanding send-once right) and a send right to b through a.
        let mut b = b;
        let once_b = b.make_send_once().unwrap();
        to_b.send(Message::new(10), Timeout::Infinite).unwrap();
        to_b.send(Message::new(11), Timeout::Infinite).unwrap();
        let copy = to_b.try_clone().unwrap();
        to_a.send(Message::new(1).with_item(b).with_item(copy), Timeout::Infinite).unwrap();
        let mut m = a.recv(Timeout::Infinite).unwrap();
        let mut items = m.take_items().into_iter();
        let (Some(Item::Receive(mut b2)), Some(Item::Send(s2)), None) = (items.next(), items.next(), items.next()) else {
            panic!("unexpected items");
        };
        assert_eq!(b2.send_once_outstanding(), 1);
        assert_eq!(b2.recv(Timeout::Infinite).unwrap().op(), 10);
        assert_eq!(b2.recv(Timeout::Infinite).unwrap().op(), 11);
        s2.send(Message::new(12), Timeout::Infinite).unwrap();
        once_b.send(Message::new(13), Timeout::Infinite).unwrap();
        let mut ops = vec![b2.recv(Timeout::Infinite).unwrap().op(), b2.recv(Timeout::Infinite).unwrap().op()];
        ops.sort();
        assert_eq!(ops, vec![12, 13]);
    });
}

#[test]
fn limits_are_enforced_on_send() {
    let _serial = common::serial();
    let (_rx, tx) = ferry::port().unwrap();
    let big = vec![0u8; ferry::message::MAX_INLINE + 1];
    assert!(matches!(tx.send(Message::new(1).with_body(big), Timeout::Zero).map_err(SendError::from), Err(SendError::TooLarge(_))));
    let mut m = Message::new(1);
    for _ in 0..=ferry::message::MAX_ITEMS {
        m = m.with_item(tx.try_clone().unwrap());
    }
    assert!(matches!(tx.send(m, Timeout::Zero).map_err(SendError::from), Err(SendError::TooLarge(_))));
}

#[test]
fn full_queue_fails_now_times_out_or_blocks() {
    let _serial = common::serial();
    watchdog("full_queue", LIMIT, || {
        let (mut rx, tx) = ferry::port_with(PortOptions { queue_limit: Some(4096) }).unwrap();
        let mut queued = 0u64;
        loop {
            match tx.send(Message::new(1).with_body(queued.to_le_bytes()), Timeout::Zero).map_err(SendError::from) {
                Ok(()) => queued += 1,
                Err(SendError::QueueFull) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(queued > 0, "a 4 KiB queue holds at least one small message");
        assert!(tx.queued_bytes().unwrap() > 0);
        assert!(matches!(tx.send(Message::new(1), Timeout::millis(20)).map_err(SendError::from), Err(SendError::Timeout)));
        // A blocking sender waits until the receiver makes room.
        let tx2 = tx.try_clone().unwrap();
        let t = std::thread::spawn(move || tx2.send(Message::new(2).with_body(u64::MAX.to_le_bytes()), Timeout::Infinite));
        let mut seen = Vec::new();
        while seen.len() as u64 <= queued {
            let m = rx.recv(Timeout::Infinite).unwrap();
            seen.push(u64::from_le_bytes(m.body().try_into().unwrap()));
        }
        t.join().unwrap().unwrap();
        let mut expect: Vec<u64> = (0..queued).collect();
        expect.push(u64::MAX);
        assert_eq!(seen, expect, "nothing lost, duplicated or reordered");
    });
}

#[test]
fn queue_limit_is_adjustable() {
    let _serial = common::serial();
    let (_rx, tx) = ferry::port().unwrap();
    tx.set_queue_limit(8192).unwrap();
    let small = tx.queue_limit().unwrap();
    tx.set_queue_limit(1 << 20).unwrap();
    assert!(tx.queue_limit().unwrap() > small);
}

#[test]
fn port_set_delivers_messages_and_notifications() {
    let _serial = common::serial();
    watchdog("port_set", LIMIT, || {
        let mut set = PortSet::new().unwrap();
        let (a, to_a) = ferry::port().unwrap();
        let (b, to_b) = ferry::port().unwrap();
        let (c_rx, c_tx) = ferry::port().unwrap();
        let ia = set.insert(a);
        let ib = set.insert(b);
        let wc = set.watch_dead_name(&c_tx).unwrap();
        to_a.send(Message::new(1), Timeout::Infinite).unwrap();
        to_b.send(Message::new(2), Timeout::Infinite).unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            match set.wait(Timeout::Infinite).unwrap() {
                Event::Message(id, m) => got.push((id, m.op())),
                e => panic!("unexpected {e:?}"),
            }
        }
        got.sort();
        assert_eq!(got, vec![(ia, 1), (ib, 2)]);
        assert!(matches!(set.wait(Timeout::Zero), Err(RecvError::Timeout)));
        // A send-once right made while the port is in the set is watched too.
        let once = set.port_mut(ia).unwrap().make_send_once().unwrap();
        once.send(Message::new(3), Timeout::Infinite).unwrap();
        assert!(matches!(set.wait(Timeout::Infinite).unwrap(), Event::Message(id, m) if id == ia && m.via_send_once()));
        drop(to_b);
        assert!(matches!(set.wait(Timeout::Infinite).unwrap(), Event::NoSenders(id) if id == ib));
        drop(c_rx);
        assert!(matches!(set.wait(Timeout::Infinite).unwrap(), Event::DeadName(id) if id == wc));
        // Notifications are reported once, not forever.
        assert!(matches!(set.wait(Timeout::millis(10)), Err(RecvError::Timeout)));
        let back = set.remove(ia).unwrap();
        drop(back);
        assert!(to_a.is_dead());
    });
}

/// A dead-name watch holds a copy of the watched send right, so the port it
/// watches cannot see no senders while the watch lasts; stopping the watch
/// drops the copy, and the stopped watch reports nothing when the port dies.
#[test]
fn port_set_watch_stops_and_lets_the_port_see_no_senders() {
    let _serial = common::serial();
    watchdog("port_set_unwatch", LIMIT, || {
        let mut set = PortSet::new().unwrap();
        let (mut rx, tx) = ferry::port().unwrap();
        let w = set.watch_dead_name(&tx).unwrap();
        drop(tx);
        assert!(matches!(rx.recv(Timeout::millis(20)), Err(RecvError::Timeout)), "the watch's copy is a sender");
        assert!(set.unwatch(w));
        assert!(!set.unwatch(w), "a watch stops once");
        assert!(matches!(rx.recv(Timeout::millis(10_000)), Err(RecvError::NoSenders)));
        drop(rx);
        assert!(matches!(set.wait(Timeout::millis(20)), Err(RecvError::Timeout)));
        // A port is no watch: unwatch leaves it in the set.
        let (p, to_p) = ferry::port().unwrap();
        let ip = set.insert(p);
        assert!(!set.unwatch(ip));
        to_p.send(Message::new(5), Timeout::Infinite).unwrap();
        assert!(matches!(set.wait(Timeout::millis(10_000)).unwrap(), Event::Message(id, m) if id == ip && m.op() == 5));
    });
}

/// Whether `fd` polls readable now.
fn readable_now(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
}

#[test]
fn port_set_ready_fd_polls_readable_for_an_outside_event_loop() {
    let _serial = common::serial();
    watchdog("port_set_ready_fd", LIMIT, || {
        let mut set = PortSet::new().unwrap();
        let (a, to_a) = ferry::port().unwrap();
        let ia = set.insert(a);
        assert!(!readable_now(set.ready_fd().unwrap()), "nothing queued yet");
        to_a.send(Message::new(1), Timeout::Infinite).unwrap();
        assert!(readable_now(set.ready_fd().unwrap()), "a queued message makes the set readable");
        assert!(matches!(set.wait(Timeout::Zero).unwrap(), Event::Message(id, m) if id == ia && m.op() == 1));
        assert!(!readable_now(set.ready_fd().unwrap()), "drained");
        // A send-once right made after the last wait: ready_fd registers it.
        let once = set.port_mut(ia).unwrap().make_send_once().unwrap();
        once.send(Message::new(2), Timeout::Infinite).unwrap();
        assert!(readable_now(set.ready_fd().unwrap()), "a reply through a new send-once right makes the set readable");
        assert!(matches!(set.wait(Timeout::Zero).unwrap(), Event::Message(id, m) if id == ia && m.via_send_once()));
    });
}

#[test]
fn dropping_everything_leaks_no_descriptor() {
    let _serial = common::serial();
    let before = open_fds();
    {
        let (mut rx, tx) = ferry::port().unwrap();
        let once = rx.make_send_once().unwrap();
        let (r2, t2) = ferry::port().unwrap();
        tx.send(Message::new(1).with_item(r2).with_item(t2.try_clone().unwrap()).with_reply(once), Timeout::Infinite).unwrap();
        let _unread = tx.try_clone().unwrap().send(Message::new(2).with_item(t2), Timeout::Infinite);
        let m = rx.recv(Timeout::Infinite).unwrap();
        drop(m);
        // One message stays queued with a right inside; dropping the port
        // must release it too.
    }
    assert_eq!(open_fds(), before);
}

/// Fills a port's queue with small messages until the kernel refuses one.
fn fill(tx: &ferry::SendRight) -> u64 {
    for queued in 0..100_000u64 {
        match tx.send(Message::new(1).with_body(queued.to_le_bytes()), Timeout::Zero).map_err(SendError::from) {
            Ok(()) => {}
            Err(SendError::QueueFull) => return queued,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("a 4 KiB queue never filled");
}

#[test]
fn failed_send_returns_rights_and_regions_intact() {
    let _serial = common::serial();
    watchdog("failed_send_returns", LIMIT, || {
        let (mut rx, tx) = ferry::port_with(PortOptions { queue_limit: Some(4096) }).unwrap();
        let queued = fill(&tx);
        // A receive right (with a send-once right outstanding on it), a
        // region, and a reply right go to the full queue.
        let (mut carried_rx, carried_tx) = ferry::port().unwrap();
        let carried_once = carried_rx.make_send_once().unwrap();
        let mut region = ferry::Region::new(8192).unwrap();
        region.as_mut_slice()[..5].copy_from_slice(b"keep!");
        let (mut reply_rx, _reply_keep) = ferry::port().unwrap();
        let reply = reply_rx.make_send_once().unwrap();
        let msg = Message::new(7)
            .with_body(*b"payload")
            .with_item(carried_rx)
            .with_item(region.by_copy().unwrap())
            .with_reply(reply);
        let before = open_fds();
        let failed = tx.send(msg, Timeout::Zero).unwrap_err();
        assert!(matches!(failed.error(), SendError::QueueFull), "{failed}");
        // A timed send fails the same way and also gives the message back.
        let failed = tx.send(failed.into_message(), Timeout::millis(10)).unwrap_err();
        assert!(matches!(failed.error(), SendError::Timeout), "{failed}");
        assert_eq!(open_fds(), before, "a failed send closed or leaked descriptors");
        let (_, mut msg, ()) = failed.into_parts();
        assert_eq!((msg.op(), msg.body()), (7, &b"payload"[..]));
        assert_eq!(msg.items().len(), 2);
        // The message, sent again once there is room, arrives whole.
        for _ in 0..queued {
            rx.recv(Timeout::Infinite).unwrap();
        }
        let reply = msg.take_reply().expect("the reply right came back");
        tx.send(msg.with_reply(reply), Timeout::Zero).unwrap();
        let mut got = rx.recv(Timeout::Infinite).unwrap();
        assert_eq!((got.op(), got.body()), (7, &b"payload"[..]));
        got.take_reply().unwrap().send(Message::new(8), Timeout::Zero).unwrap();
        assert_eq!(reply_rx.recv(Timeout::Infinite).unwrap().op(), 8);
        let mut items = got.take_items().into_iter();
        let Some(Item::Receive(mut carried_rx)) = items.next() else { panic!("receive right lost") };
        let Some(Item::Region(r)) = items.next() else { panic!("region lost") };
        // The receive right still receives from its send right and its
        // send-once right.
        carried_tx.send(Message::new(9), Timeout::Zero).unwrap();
        carried_once.send(Message::new(10), Timeout::Zero).unwrap();
        let mut ops = [carried_rx.recv(Timeout::Infinite).unwrap().op(), carried_rx.recv(Timeout::Infinite).unwrap().op()];
        ops.sort();
        assert_eq!(ops, [9, 10]);
        assert_eq!(&r.map(ferry::MapOptions::lazy()).unwrap()[..5], b"keep!");
    });
}

#[test]
fn failed_send_to_a_dead_port_returns_the_message() {
    let _serial = common::serial();
    let (rx, tx) = ferry::port().unwrap();
    drop(rx);
    let (mut carried_rx, carried_tx) = ferry::port().unwrap();
    let failed = tx.send(Message::new(1).with_item(carried_rx), Timeout::Infinite).unwrap_err();
    assert!(matches!(failed.error(), SendError::PeerDead));
    let Some(Item::Receive(back)) = failed.into_message().take_items().pop() else { panic!("receive right lost") };
    carried_rx = back;
    carried_tx.send(Message::new(2), Timeout::Zero).unwrap();
    assert_eq!(carried_rx.recv(Timeout::Infinite).unwrap().op(), 2);
}

#[test]
fn failed_send_once_returns_the_right_and_it_sends_again() {
    let _serial = common::serial();
    let (mut rx, _tx) = ferry::port().unwrap();
    let once = rx.make_send_once().unwrap();
    let big = vec![0u8; ferry::message::MAX_INLINE + 1];
    let failed = once.send(Message::new(1).with_body(big), Timeout::Zero).unwrap_err();
    assert!(matches!(failed.error(), SendError::TooLarge(_)));
    let (_, msg, once) = failed.into_parts();
    assert_eq!(msg.body().len(), ferry::message::MAX_INLINE + 1);
    assert_eq!(rx.send_once_outstanding(), 1, "the receiver still counts the right as outstanding");
    once.send(Message::new(2), Timeout::Zero).unwrap();
    let m = rx.recv(Timeout::Infinite).unwrap();
    assert!(m.via_send_once() && m.op() == 2);
    // A reply right comes back the same way.
    let reply: ferry::Reply = rx.make_send_once().unwrap().into();
    let failed = reply.send(Message::new(3).with_body(vec![0u8; ferry::message::MAX_INLINE + 1]), Timeout::Zero).unwrap_err();
    let (_, _, reply) = failed.into_parts();
    reply.send(Message::new(4), Timeout::Zero).unwrap();
    assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 4);
}

#[test]
fn receive_right_fd_wakes_an_event_loop() {
    use std::os::fd::AsFd;
    let _serial = common::serial();
    watchdog("receive_right_fd", LIMIT, || {
        let ready = |rx: &ferry::ReceiveRight| {
            let mut fds = [rustix::event::PollFd::new(rx, rustix::event::PollFlags::IN)];
            rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
        };
        let (mut rx, tx) = ferry::port().unwrap();
        assert!(!ready(&rx), "readable with nothing queued");
        tx.send(Message::new(5), Timeout::Zero).unwrap();
        assert!(ready(&rx));
        assert_eq!(rx.try_recv().unwrap().op(), 5);
        assert!(!ready(&rx));
        drop(tx);
        assert!(ready(&rx), "the last send right's end does not wake the loop");
        assert!(matches!(rx.try_recv(), Err(RecvError::NoSenders)));
        assert!(rx.as_fd().try_clone_to_owned().is_ok());
    });
}

/// A port set reports a member's no-senders whichever goes last, its send
/// rights or its last send-once right: when the send rights went first,
/// the send-once right's end left nothing for the set to wake on, and
/// `NoSenders` never came (a server waiting for it kept the port for ever).
#[test]
fn a_port_set_reports_no_senders_after_the_last_send_once_right() {
    watchdog("portset_no_senders_after_send_once", Duration::from_secs(30), || {
        for send_rights_first in [true, false] {
            let (mut rx, tx) = ferry::port().unwrap();
            let once = rx.make_send_once().unwrap();
            let mut set = PortSet::new().unwrap();
            let id = set.insert(rx);
            if send_rights_first {
                drop(tx);
                // The set sees the send rights go while the send-once
                // right is still out.
                assert!(matches!(set.wait(Timeout::millis(100)), Err(RecvError::Timeout)));
                drop(once);
            } else {
                drop(once);
                drop(tx);
            }
            let mut seen = Vec::new();
            for _ in 0..4 {
                match set.wait(Timeout::millis(500)) {
                    Ok(Event::NoSenders(i)) if i == id => {
                        seen.push("NoSenders");
                        break;
                    }
                    Ok(Event::SendOnceDropped(i)) if i == id => seen.push("SendOnceDropped"),
                    Ok(other) => panic!("unexpected {other:?}"),
                    Err(RecvError::Timeout) => seen.push("Timeout"),
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(seen, ["SendOnceDropped", "NoSenders"], "send rights first: {send_rights_first}");
        }
    });
}

/// Receives through a port with 500 send-once rights outstanding: 40
/// messages queued on the port itself, 40 replies through send-once rights,
/// one message that comes while the receiver waits.
fn receive_beside_many_send_once_rights() {
    let (mut rx, tx) = ferry::port().unwrap();
    let mut out: Vec<_> = (0..500).map(|_| rx.make_send_once().unwrap()).collect();
    let _ = rustix::process::getppid();
    for i in 0..40 {
        tx.send(Message::new(i), Timeout::Infinite).unwrap();
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), i);
    }
    for i in 0..40 {
        out.pop().unwrap().send(Message::new(1000 + i), Timeout::Infinite).unwrap();
        let m = rx.recv(Timeout::Infinite).unwrap();
        assert_eq!((m.op(), m.via_send_once()), (1000 + i, true));
    }
    let late = tx.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        late.send(Message::new(7), Timeout::Infinite).unwrap();
    });
    assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 7);
    sender.join().unwrap();
    assert_eq!(rx.send_once_outstanding(), 460);
    println!("done");
}

#[test]
fn a_receive_costs_the_same_however_many_send_once_rights_are_out() {
    if common::counted_child() {
        receive_beside_many_send_once_rights();
        return;
    }
    let _serial = common::serial();
    // Counted in system calls, not time: each receive tried every
    // outstanding send-once right's socket with a `recvmsg(2)` of its own.
    let calls = "recvmsg,recvfrom,poll,ppoll,epoll_wait,epoll_pwait,epoll_pwait2";
    let Some(made) = common::counted_calls("a_receive_costs_the_same_however_many_send_once_rights_are_out", calls) else { return };
    let made = made.len();
    assert!(made <= 81 * 4, "81 receives beside 500 outstanding send-once rights made {made} receiving and waiting calls");
}

/// A port set whose one member has 500 send-once rights outstanding, then
/// 40 rounds of: a send-once right made on the member, a reply through it,
/// the set's wait for it.
fn port_set_beside_many_send_once_rights() {
    let (rx, _tx) = ferry::port().unwrap();
    let mut set = PortSet::new().unwrap();
    let id = set.insert(rx);
    let mut out: Vec<_> = (0..500).map(|_| set.port_mut(id).unwrap().make_send_once().unwrap()).collect();
    // Registered once, before the counting starts.
    assert!(matches!(set.wait(Timeout::Zero), Err(RecvError::Timeout)));
    out.pop().unwrap().send(Message::new(1), Timeout::Infinite).unwrap();
    assert!(matches!(set.wait(Timeout::Infinite), Ok(Event::Message(i, m)) if i == id && m.op() == 1));
    let _ = rustix::process::getppid();
    for i in 0..40 {
        let once = set.port_mut(id).unwrap().make_send_once().unwrap();
        once.send(Message::new(100 + i), Timeout::Infinite).unwrap();
        assert!(matches!(set.wait(Timeout::Infinite), Ok(Event::Message(m, msg)) if m == id && msg.op() == 100 + i));
    }
    assert_eq!(set.port_mut(id).unwrap().send_once_outstanding(), 499);
    println!("done");
}

#[test]
fn a_port_set_costs_the_same_however_many_send_once_rights_are_out() {
    if common::counted_child() {
        port_set_beside_many_send_once_rights();
        return;
    }
    let _serial = common::serial();
    // Each wait after a send-once right was made or used offered every
    // outstanding one to `epoll` again, one `epoll_ctl(2)` apiece.
    let calls = "epoll_ctl,recvmsg,recvfrom,poll,ppoll,epoll_wait,epoll_pwait,epoll_pwait2";
    let Some(made) = common::counted_calls("a_port_set_costs_the_same_however_many_send_once_rights_are_out", calls) else { return };
    let made = made.len();
    assert!(made <= 40 * 8, "40 rounds through a port set beside 500 outstanding send-once rights made {made} registering, receiving and waiting calls");
}

/// 40 messages of 64 bytes through a port for each way of receiving them
/// (waiting without a bound, without waiting, with a timeout), and 40
/// receives that find the port empty.
fn messages_each_way_of_receiving() {
    let (mut rx, tx) = ferry::port().unwrap();
    let body = vec![7u8; 64];
    let _ = rustix::process::getppid();
    for timeout in [Timeout::Infinite, Timeout::Zero, Timeout::After(Duration::from_secs(10))] {
        for i in 0..40 {
            tx.send(Message::new(i).with_body(body.clone()), Timeout::Infinite).unwrap();
            let m = rx.recv(timeout).unwrap();
            assert_eq!((m.op(), m.body().len()), (i, 64));
        }
    }
    for _ in 0..40 {
        assert!(matches!(rx.recv(Timeout::Zero), Err(RecvError::Timeout)));
    }
    let _ = rustix::process::getppid();
    println!("done");
}

#[test]
fn a_message_costs_one_send_and_one_receive_call() {
    if common::counted_child() {
        messages_each_way_of_receiving();
        return;
    }
    let _serial = common::serial();
    // Every system call a message could take beside its one `sendto(2)`
    // and one `recvmsg(2)`.
    let calls = "sendto,sendmsg,recvmsg,recvfrom,poll,ppoll,epoll_wait,epoll_pwait,epoll_ctl,fcntl,ioctl,setsockopt,getsockopt,futex,clock_gettime";
    let Some(made) = common::counted_calls("a_message_costs_one_send_and_one_receive_call", calls) else { return };
    let count = |name: &str| made.iter().filter(|l| l.contains(&format!("{name}("))).count();
    let (sends, receives) = (count("sendto") + count("sendmsg"), count("recvmsg") + count("recvfrom"));
    assert_eq!((sends, receives), (120, 160), "120 messages sent and received, 40 empty receives:\n{}", made.join("\n"));
    // The timed receives set the socket's receive timer once.
    assert!(made.len() <= sends + receives + 1, "calls beside the sends and receives:\n{}", made.join("\n"));
    // The kernel copies the sender's address out to a receive that asks
    // for it: a port's sending end is bound to one (it passes
    // credentials), and nothing reads it.
    let named = made.iter().filter(|l| l.contains("recvmsg(") && l.contains("msg_name={")).count();
    assert_eq!(named, 0, "{named} of {receives} receives asked for the sender's address");
}

/// A receive leaves the caller's `errno` as it was, whether it finds a
/// message, finds none or times out: a program served by the emulation
/// library reaches a port's receive from its own `read`, and the C
/// library's `getc` at the end of a file was then seen failing with
/// `EAGAIN` (the empty receive's), where natively `errno` stays 0.
#[test]
fn a_receive_leaves_the_callers_errno_as_it_was() {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
    // SAFETY: `__errno_location` gives this thread's `errno`, valid while
    // the thread lives; writing it is what `errno = v` does in C.
    let set = |v: i32| unsafe { *libc::__errno_location() = v };
    let (mut rx, tx) = ferry::port().unwrap();
    let mut seen = Vec::new();
    for timeout in [Timeout::Zero, Timeout::After(Duration::from_millis(20))] {
        set(0);
        assert!(matches!(rx.recv(timeout), Err(RecvError::Timeout)));
        seen.push(errno());
        tx.send(Message::new(1), Timeout::Infinite).unwrap();
        set(0);
        rx.recv(timeout).unwrap();
        seen.push(errno());
    }
    assert_eq!(seen, [0, 0, 0, 0], "errno after each receive");
}
