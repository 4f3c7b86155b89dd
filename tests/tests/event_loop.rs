//! Ports, port sets and RPC servers in a foreign event loop, through the one
//! descriptor each exposes with `AsFd`: readable means "call the
//! non-blocking receive now", and it must become readable for everything
//! that can arrive (send-once replies, new members, calls from spinning
//! clients), or a loop that sleeps on it hangs.

mod common;

use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use ferry::rpc::{ConnectOptions, Connection, Policy, RpcError, RpcServer, Transport};
use ferry::{Event, Message, PortSet, RecvError, Timeout};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

const LIMIT: Duration = Duration::from_secs(60);

/// Whether `fd` is readable within `ms` milliseconds (0: now).
fn readable(fd: &impl AsFd, ms: i64) -> bool {
    let mut p = [PollFd::new(fd, PollFlags::IN)];
    let ts = Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 };
    poll(&mut p, Some(&ts)).expect("poll") > 0
}

/// How long a loop in these tests sleeps at most before it calls a hang a
/// failure (a generous bound, never a timing assertion).
const HANG_MS: i64 = 20_000;

#[test]
fn a_receive_rights_descriptor_covers_its_send_once_rights() {
    common::watchdog("a_receive_rights_descriptor_covers_its_send_once_rights", LIMIT, || {
        let (mut rx, _tx) = ferry::port().unwrap();
        let fd_before = rx.as_fd().as_raw_fd();
        assert!(!readable(&rx, 0), "nothing queued");
        let once = rx.make_send_once().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            once.send(Message::new(42), Timeout::Infinite).unwrap();
        });
        assert!(readable(&rx, HANG_MS), "a reply through a send-once right made after the descriptor");
        assert_eq!(rx.try_recv().unwrap().op(), 42);
        t.join().unwrap();
        assert!(!readable(&rx, 0), "quiet again once try_recv had everything");
        assert_eq!(rx.as_fd().as_raw_fd(), fd_before, "one descriptor for the right's life");
    });
}

#[test]
fn a_receive_rights_descriptor_reports_no_senders_once_then_goes_quiet() {
    common::watchdog("a_receive_rights_descriptor_reports_no_senders_once_then_goes_quiet", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        let _ = rx.as_fd();
        let once = rx.make_send_once().unwrap();
        drop(tx);
        assert!(readable(&rx, HANG_MS));
        assert!(matches!(rx.try_recv(), Err(RecvError::Timeout)), "the send-once right can still deliver");
        assert!(!readable(&rx, 0), "end-of-file on the main socket no longer counts");
        once.send(Message::new(1), Timeout::Infinite).unwrap();
        assert!(readable(&rx, HANG_MS));
        assert_eq!(rx.try_recv().unwrap().op(), 1);
        assert!(matches!(rx.try_recv(), Err(RecvError::NoSenders)));
    });
}

#[test]
fn a_port_sets_descriptor_sees_ports_inserted_after_it_was_registered() {
    common::watchdog("a_port_sets_descriptor_sees_ports_inserted_after_it_was_registered", LIMIT, || {
        let mut set = PortSet::new().unwrap();
        assert!(!readable(&set, 0));
        let (rx, tx) = ferry::port().unwrap();
        let id = set.insert(rx);
        tx.send(Message::new(3), Timeout::Infinite).unwrap();
        assert!(readable(&set, HANG_MS), "a message on a port inserted without a wait since");
        assert!(matches!(set.wait(Timeout::Zero), Ok(Event::Message(i, m)) if i == id && m.op() == 3));
        assert!(matches!(set.wait(Timeout::Zero), Err(RecvError::Timeout)));
        assert!(!readable(&set, 0));
    });
}

/// Serves calls from a loop that sleeps in `poll` on the server's
/// descriptor and drains it with zero-timeout waits, as an event loop does.
fn serve_from_event_loop(mut server: RpcServer, calls: usize) {
    let mut reply = None;
    let mut served = 0;
    while served < calls {
        assert!(readable(&server, HANG_MS), "a call was made but the server's descriptor never became readable");
        loop {
            match server.reply_and_wait(reply.take(), Timeout::Zero) {
                Ok((id, req)) => {
                    served += 1;
                    reply = Some((id, Message::new(req.op()).with_body(req.body().to_vec())));
                }
                Err(RpcError::Timeout) => break,
                Err(e) => panic!("{e}"),
            }
        }
    }
    if let Some((id, m)) = reply {
        server.reply(id, m).unwrap();
    }
}

#[test]
fn an_rpc_servers_descriptor_hears_spinning_and_sleeping_clients() {
    // An adaptive client rings the doorbell only when the slot says the
    // server sleeps: a server that timed out in an event loop must say so.
    for policy in [Policy::Adaptive, Policy::Block, Policy::Poll] {
        common::watchdog("an_rpc_servers_descriptor_hears_spinning_and_sleeping_clients", LIMIT, || {
            let (port, to) = ferry::port().unwrap();
            let server = RpcServer::new(port).unwrap();
            let calls = 200;
            let t = std::thread::spawn(move || serve_from_event_loop(server, calls));
            let mut c = Connection::connect(&to, ConnectOptions { policy, timeout: Timeout::Infinite }).unwrap();
            for i in 0..calls as u32 {
                let r = c.call(Message::new(1).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
                assert_eq!(r.body(), i.to_le_bytes());
            }
            t.join().unwrap();
        });
    }
}

#[test]
fn an_rpc_server_that_replies_while_away_hears_the_next_call() {
    // The server takes a request, goes back to its loop (the wait times
    // out while the request is still being worked on), and replies later,
    // outside any wait: the client's next call must still ring it.
    for policy in [Policy::Adaptive, Policy::Block] {
        common::watchdog("an_rpc_server_that_replies_while_away_hears_the_next_call", LIMIT, || {
            let (port, to) = ferry::port().unwrap();
            let mut server = RpcServer::new(port).unwrap();
            let calls = 100u32;
            let t = std::thread::spawn(move || {
                let mut served = 0;
                while served < calls {
                    assert!(readable(&server, HANG_MS), "the next call never made the descriptor readable");
                    let (id, req) = match server.reply_and_wait(None, Timeout::Zero) {
                        Ok(r) => r,
                        Err(RpcError::Timeout) => continue,
                        Err(e) => panic!("{e}"),
                    };
                    assert!(matches!(server.reply_and_wait(None, Timeout::Zero), Err(RpcError::Timeout)));
                    server.reply(id, Message::new(req.op()).with_body(req.body().to_vec())).unwrap();
                    served += 1;
                }
            });
            let mut c = Connection::connect(&to, ConnectOptions { policy, timeout: Timeout::Infinite }).unwrap();
            for i in 0..calls {
                let r = c.call(Message::new(1).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
                assert_eq!(r.body(), i.to_le_bytes());
            }
            t.join().unwrap();
        });
    }
}
