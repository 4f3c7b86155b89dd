//! The `tokio` feature against real threads and processes: awaited receives,
//! sends, port-set waits and RPC calls (against the blocking server in
//! another process and the async server), and the cancellation guarantees:
//! a dropped receive, send or call loses no message and delivers none twice.

mod common;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, ChildStdout};
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use ferry::rpc::{ConnectOptions, Connection, Policy, RpcError, RpcServer, Transport, SLOT_INLINE};
use ferry::tokio::{AsyncConnection, AsyncPortSet, AsyncReceiveRight, AsyncReplyReceiver, AsyncRpcServer, AsyncSendRight};
use ferry::{Event, Item, Message, PortOptions, PortSet, RecvError, SendError, SendRight, Timeout};

const OP_ECHO: u32 = 1;
const OP_SLOW: u32 = 2;
const OP_RIGHTS: u32 = 3;
const OP_BIG: u32 = 6;
const OP_EXIT: u32 = 7;

const LIMIT: Duration = Duration::from_secs(60);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// Runs `f` on a fresh current-thread runtime under the watchdog.
fn run<F: Future<Output = ()>>(name: &str, f: impl FnOnce() -> F) {
    common::watchdog(name, LIMIT, || rt().block_on(f()));
}

/// Polls `f` exactly once and says whether it was still pending.
async fn poll_once<F: Future + Unpin>(f: &mut F) -> bool {
    std::future::poll_fn(|cx: &mut Context<'_>| Poll::Ready(Pin::new(&mut *f).poll(cx).is_pending())).await
}

#[test]
fn recv_awaits_a_message_from_another_thread() {
    run("recv_awaits_a_message_from_another_thread", || async {
        let (rx, tx) = ferry::port().unwrap();
        let mut rx = AsyncReceiveRight::new(rx).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            for i in 0..100u32 {
                tx.send(Message::new(i).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
            }
        });
        for i in 0..100u32 {
            let m = rx.recv().await.unwrap();
            assert_eq!((m.op(), m.body()), (i, &i.to_le_bytes()[..]));
        }
        sender.join().unwrap();
        assert!(matches!(rx.recv().await, Err(RecvError::NoSenders)));
    });
}

#[test]
fn recv_sees_replies_through_send_once_rights() {
    // A receive right with send-once rights outstanding listens on several
    // sockets; its one readiness descriptor must cover all of them.
    run("recv_sees_replies_through_send_once_rights", || async {
        let (rx, _keep) = ferry::port().unwrap();
        let mut rx = AsyncReceiveRight::new(rx).unwrap();
        let once: Vec<_> = (0..3).map(|_| rx.make_send_once().unwrap()).collect();
        let t = std::thread::spawn(move || {
            for (i, r) in once.into_iter().enumerate() {
                std::thread::sleep(Duration::from_millis(5));
                if i == 1 {
                    drop(r);
                } else {
                    r.send(Message::new(i as u32), Timeout::Infinite).unwrap();
                }
            }
        });
        let mut got = Vec::new();
        for _ in 0..3 {
            match rx.recv().await {
                Ok(m) => got.push(format!("msg {} once={}", m.op(), m.via_send_once())),
                Err(RecvError::SendOnceDropped) => got.push("dropped".into()),
                Err(e) => panic!("{e}"),
            }
        }
        t.join().unwrap();
        got.sort();
        assert_eq!(got, ["dropped", "msg 0 once=true", "msg 2 once=true"]);
        assert_eq!(rx.get_ref().send_once_outstanding(), 0);
    });
}

#[test]
fn a_right_hears_every_source_however_its_send_once_rights_were_made() {
    // Wrapped without send-once rights, a right's socket is watched
    // itself; its first send-once right moves the watch to the readiness
    // descriptor, which must still report what was already queued. Wrapped
    // with some, the readiness descriptor is watched from the start.
    run("a_right_hears_every_source_however_its_send_once_rights_were_made", || async {
        let (rx, tx) = ferry::port().unwrap();
        let mut rx = AsyncReceiveRight::new(rx).unwrap();
        tx.send(Message::new(1), Timeout::Zero).unwrap();
        assert_eq!(rx.recv().await.unwrap().op(), 1);
        tx.send(Message::new(2), Timeout::Zero).unwrap();
        let once = rx.make_send_once().unwrap();
        assert_eq!(rx.recv().await.unwrap().op(), 2, "queued on the socket before the send-once right");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            once.send(Message::new(3), Timeout::Infinite).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            tx.send(Message::new(4), Timeout::Infinite).unwrap();
        });
        assert_eq!(rx.recv().await.unwrap().op(), 3);
        assert_eq!(rx.recv().await.unwrap().op(), 4);
        t.join().unwrap();
        assert!(matches!(rx.recv().await, Err(RecvError::NoSenders)), "every right is gone");

        let (mut rx, tx) = ferry::port().unwrap();
        let once = rx.make_send_once().unwrap();
        let mut rx = AsyncReceiveRight::new(rx).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(Message::new(5), Timeout::Infinite).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            once.send(Message::new(6), Timeout::Infinite).unwrap();
        });
        assert_eq!(rx.recv().await.unwrap().op(), 5);
        assert_eq!(rx.recv().await.unwrap().op(), 6);
        t.join().unwrap();
        assert!(matches!(rx.recv().await, Err(RecvError::NoSenders)));
        // And the right comes back out whole.
        assert_eq!(rx.into_inner().send_once_outstanding(), 0);
    });
}

#[test]
fn a_reply_receiver_is_awaited_and_a_dropped_future_loses_nothing() {
    run("a_reply_receiver_is_awaited_and_a_dropped_future_loses_nothing", || async {
        // Awaited while the answer comes from another thread.
        let (answer, right) = ferry::reply_pair().unwrap();
        let mut answer = AsyncReplyReceiver::new(answer).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            right.send(Message::new(3).with_body(*b"late"), Timeout::Infinite).unwrap();
        });
        let m = answer.recv().await.unwrap();
        assert_eq!((m.op(), m.body(), m.via_send_once()), (3, &b"late"[..], true));
        t.join().unwrap();
        assert!(matches!(answer.recv().await, Err(RecvError::NoSenders)));
        // A receive abandoned while waiting takes nothing.
        let (answer, right) = ferry::reply_pair().unwrap();
        let mut answer = AsyncReplyReceiver::new(answer).unwrap();
        let mut fut = Box::pin(answer.recv());
        assert!(poll_once(&mut fut).await, "nothing was sent yet");
        drop(fut);
        right.send(Message::new(4), Timeout::Infinite).unwrap();
        assert_eq!(answer.recv().await.unwrap().op(), 4);
        // A right destroyed unused is heard, and the receiver comes back.
        let (answer, right) = ferry::reply_pair().unwrap();
        let mut answer = AsyncReplyReceiver::new(answer).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(right);
        });
        assert!(matches!(answer.recv().await, Err(RecvError::SendOnceDropped)));
        t.join().unwrap();
        assert!(answer.into_inner().is_done());
    });
}

#[test]
fn a_dropped_recv_future_loses_no_message() {
    run("a_dropped_recv_future_loses_no_message", || async {
        let (rx, tx) = ferry::port().unwrap();
        let mut rx = AsyncReceiveRight::new(rx).unwrap();
        for round in 0..20u32 {
            // Start a receive, abandon it while it waits, then send.
            let mut fut = Box::pin(rx.recv());
            assert!(poll_once(&mut fut).await, "nothing was sent yet");
            drop(fut);
            tx.send(Message::new(round), Timeout::Infinite).unwrap();
            // A receive abandoned after the message arrived, before it ran.
            let fut = rx.recv();
            drop(fut);
            assert_eq!(rx.recv().await.unwrap().op(), round);
            assert!(matches!(rx.try_recv(), Err(RecvError::Timeout)), "delivered once");
        }
    });
}

/// A port whose queue holds only a few messages, filled up.
fn full_port() -> (ferry::ReceiveRight, SendRight, u32) {
    let (rx, tx) = ferry::port_with(PortOptions { queue_limit: Some(4096) }).unwrap();
    let mut n = 0u32;
    loop {
        match tx.send(Message::new(n).with_body(vec![n as u8; 512]), Timeout::Zero) {
            Ok(()) => n += 1,
            Err(f) if matches!(f.error(), SendError::QueueFull) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(n < 10_000, "the queue limit did not hold");
    }
    assert!(n > 0);
    (rx, tx, n)
}

#[test]
fn a_send_waits_for_queue_space_without_blocking_the_runtime() {
    run("a_send_waits_for_queue_space_without_blocking_the_runtime", || async {
        let (mut rx, tx, queued) = full_port();
        let tx = AsyncSendRight::new(tx).unwrap();
        let drainer = std::thread::spawn(move || {
            let mut ops = Vec::new();
            std::thread::sleep(Duration::from_millis(20));
            while ops.len() < queued as usize + 1 {
                ops.push(rx.recv(Timeout::Infinite).unwrap().op());
            }
            ops
        });
        // The runtime's one thread keeps running other tasks meanwhile.
        let ticker = tokio::spawn(async {
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            "ran"
        });
        tx.send(Message::new(9999).with_body(*b"late")).await.unwrap();
        assert_eq!(ticker.await.unwrap(), "ran");
        let ops = drainer.join().unwrap();
        assert_eq!(ops.iter().filter(|&&o| o == 9999).count(), 1);
        assert_eq!(ops.len(), queued as usize + 1);
    });
}

#[test]
fn a_dropped_send_future_hands_its_message_back_and_delivers_nothing() {
    run("a_dropped_send_future_hands_its_message_back_and_delivers_nothing", || async {
        let (mut rx, tx, queued) = full_port();
        let tx = AsyncSendRight::new(tx).unwrap();
        // A message with a right in it: losing or duplicating it would show.
        let (mut probe_rx, probe_tx) = ferry::port().unwrap();
        let msg = Message::new(7777).with_body(*b"precious").with_item(probe_tx);
        let mut fut = tx.send(msg);
        assert!(poll_once(&mut fut).await, "the queue is full: the send must wait");
        let back = fut.take_message().expect("an unsent message comes back");
        drop(fut);
        assert_eq!((back.op(), back.body(), back.items().len()), (7777, &b"precious"[..], 1));
        // Everything queued before is there, and the abandoned send is not.
        for i in 0..queued {
            assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), i);
        }
        assert!(matches!(rx.recv(Timeout::Zero), Err(RecvError::Timeout)));
        // The right inside is still ours: the probe port has a sender.
        assert!(matches!(probe_rx.try_recv(), Err(RecvError::Timeout)));
        // Sent again, it arrives exactly once, right and all.
        tx.send(back).await.unwrap();
        let mut got = rx.recv(Timeout::Infinite).unwrap();
        assert_eq!((got.op(), got.body()), (7777, &b"precious"[..]));
        assert!(matches!(rx.recv(Timeout::Zero), Err(RecvError::Timeout)));
        let Some(Item::Send(right)) = got.take_items().pop() else { panic!("the right travelled") };
        right.send(Message::new(1), Timeout::Infinite).unwrap();
        assert_eq!(probe_rx.recv(Timeout::Infinite).unwrap().op(), 1);
    });
}

/// Tasks sending through one right while the queue is full each get
/// their turn: every waiting send is woken when room appears, not only the
/// one that asked last.
#[test]
fn tasks_sending_through_one_right_to_a_full_queue_are_all_woken() {
    run("tasks_sending_through_one_right_to_a_full_queue_are_all_woken", || async {
        let (mut rx, tx, queued) = full_port();
        let tx = std::sync::Arc::new(AsyncSendRight::new(tx).unwrap());
        let senders: Vec<_> = (0..3)
            .map(|i| {
                let tx = tx.clone();
                tokio::spawn(async move { tx.send(Message::new(9000 + i).with_body(vec![1; 512])).await })
            })
            .collect();
        // Every task reaches its wait for room before any is made.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(senders.iter().all(|s| !s.is_finished()), "the queue is full: every send waits");
        let expected = queued as usize + senders.len();
        let drainer = std::thread::spawn(move || {
            let mut ops = Vec::new();
            while ops.len() < expected {
                match rx.recv(Timeout::After(Duration::from_secs(10))) {
                    Ok(m) => ops.push(m.op()),
                    Err(_) => break,
                }
            }
            ops
        });
        let all = tokio::time::timeout(Duration::from_secs(20), async {
            let mut done = Vec::new();
            for s in senders {
                done.push(s.await.unwrap());
            }
            done
        })
        .await;
        let ops = drainer.join().unwrap();
        let sent = ops.iter().filter(|&&o| o >= 9000).count();
        assert!(all.is_ok(), "{sent} of 3 waiting sends were woken and delivered");
        assert!(all.unwrap().iter().all(Result::is_ok));
        assert_eq!((ops.len(), sent), (expected, 3));
    });
}

#[test]
fn a_send_to_a_dead_port_fails_and_keeps_the_message() {
    run("a_send_to_a_dead_port_fails_and_keeps_the_message", || async {
        let (rx, tx, _) = full_port();
        let tx = AsyncSendRight::new(tx).unwrap();
        let mut fut = tx.send(Message::new(5).with_body(*b"x"));
        assert!(poll_once(&mut fut).await);
        drop(rx);
        assert!(matches!((&mut fut).await, Err(SendError::PeerDead)));
        assert_eq!(fut.take_message().expect("kept").op(), 5);
    });
}

#[test]
fn port_sets_are_awaited() {
    run("port_sets_are_awaited", || async {
        let (a, to_a) = ferry::port().unwrap();
        let (b, to_b) = ferry::port().unwrap();
        let (watched_rx, watched) = ferry::port().unwrap();
        let mut set = AsyncPortSet::new(PortSet::new().unwrap()).unwrap();
        let ia = set.insert(a);
        let ib = set.insert(b);
        let iw = set.watch_dead_name(&watched).unwrap();
        // A send-once right made on a member after the set was created.
        let once = set.port_mut(ia).unwrap().make_send_once().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            to_a.send(Message::new(1), Timeout::Infinite).unwrap();
            to_b.send(Message::new(2), Timeout::Infinite).unwrap();
            once.send(Message::new(3), Timeout::Infinite).unwrap();
            drop(watched_rx);
            drop(to_b);
            to_a
        });
        let mut seen = Vec::new();
        while seen.len() < 5 {
            match set.wait().await.unwrap() {
                Event::Message(id, m) => seen.push(format!("{}:{}", if id == ia { "a" } else { "b" }, m.op())),
                Event::DeadName(id) => {
                    assert_eq!(id, iw);
                    seen.push("dead".into());
                }
                Event::NoSenders(id) if id == ib => seen.push("b-gone".into()),
                other => panic!("unexpected {other:?}"),
            }
        }
        let _to_a = t.join().unwrap();
        seen.sort();
        assert_eq!(seen, ["a:1", "a:3", "b-gone", "b:2", "dead"]);
        // A watch stopped before its port goes lets that port see no
        // senders, and reports nothing when the port dies.
        let (mut rx2, tx2) = ferry::port().unwrap();
        let w2 = set.watch_dead_name(&tx2).unwrap();
        drop(tx2);
        assert!(set.unwatch(w2));
        assert!(matches!(rx2.recv(Timeout::millis(10_000)), Err(RecvError::NoSenders)));
        drop(rx2);
        assert!(tokio::time::timeout(Duration::from_millis(20), set.wait()).await.is_err(), "a stopped watch reported");
    });
}

/// One name service for this test process.
fn bootstrap() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| common::private_bootstrap("tokio")).clone()
}

/// The blocking RPC server of the peer program, in its own process.
struct Server {
    child: Child,
    to: SendRight,
    _out: BufReader<ChildStdout>,
}

fn start_server(name: &str, policy: &str) -> Server {
    let path = bootstrap();
    let mut child = common::spawn_peer(&path, "rpc-server", &[name, policy, "1"]);
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read ready");
    assert_eq!(line.trim(), "ready", "server did not start");
    let to = common::names(&path).lookup(name).expect("server registered");
    Server { child, to, _out: out }
}

impl Server {
    async fn exit(mut self, conn: &mut AsyncConnection) {
        assert_eq!(conn.call(Message::new(OP_EXIT)).await.unwrap().op(), OP_EXIT);
        assert!(self.child.wait().expect("wait").success());
    }
}

fn slow(ms: u32, tag: &[u8]) -> Message {
    let mut b = ms.to_le_bytes().to_vec();
    b.extend_from_slice(tag);
    Message::new(OP_SLOW).with_body(b)
}

#[test]
fn async_calls_reach_a_blocking_server_in_another_process() {
    for policy in ["block", "adaptive"] {
        let name = format!("tokio-calls-{policy}");
        run(&name.clone(), || async move {
            let server = start_server(&name, policy);
            let mut conn = AsyncConnection::connect(&server.to, ConnectOptions::default()).await.unwrap();
            for i in 0..500u32 {
                let body = i.to_le_bytes();
                let r = conn.call(Message::new(OP_ECHO).with_body(body)).await.unwrap();
                assert_eq!((r.op(), r.body()), (OP_ECHO, &body[..]));
            }
            // The most a call carries: through the slot, and with a right
            // (which only the socket takes) over the socket, both ways.
            let big = vec![0xA5u8; SLOT_INLINE];
            let r = conn.call(Message::new(OP_ECHO).with_body(big.clone())).await.unwrap();
            assert_eq!(r.body(), &big[..]);
            let (_scratch, right) = ferry::port().unwrap();
            let r = conn.call(Message::new(OP_ECHO).with_body(big.clone()).with_item(right)).await.unwrap();
            assert_eq!(r.body(), &big[..]);
            // A small request with a much larger reply.
            let r = conn.call(Message::new(OP_BIG).with_body(65_000u32.to_le_bytes())).await.unwrap();
            assert!(r.body().len() == 65_000 && r.body().iter().all(|&b| b == 0x5A));
            // Rights move with a call.
            let (mut back_rx, back) = ferry::port().unwrap();
            let mut r = conn.call(Message::new(OP_RIGHTS).with_item(back)).await.unwrap();
            assert_eq!(r.body(), b"right-returned");
            assert!(matches!(r.take_items().pop(), Some(Item::Send(_))));
            assert_eq!(back_rx.recv(Timeout::Infinite).unwrap().body(), b"through-right");
            server.exit(&mut conn).await;
        });
    }
}

#[test]
fn a_dropped_call_leaves_the_connection_in_step() {
    run("a_dropped_call_leaves_the_connection_in_step", || async {
        let server = start_server("tokio-dropped-call", "block");
        let mut conn = AsyncConnection::connect(&server.to, ConnectOptions::default()).await.unwrap();
        // Through the slot, then over the socket (a call carrying a
        // right): each call is abandoned while the server works on it, then
        // the next call must get its own reply, never the late one.
        let (_scratch, right) = ferry::port().unwrap();
        for (tag, with_right) in [(&b"slot"[..], false), (&vec![b's'; 60_000][..], true)] {
            let req = if with_right { slow(200, tag).with_item(right.try_clone().unwrap()) } else { slow(200, tag) };
            let abandoned = tokio::time::timeout(Duration::from_millis(20), conn.call(req)).await;
            assert!(abandoned.is_err(), "the slow call cannot have finished");
            let r = conn.call(Message::new(OP_ECHO).with_body(*b"next")).await.unwrap();
            assert_eq!((r.op(), r.body()), (OP_ECHO, &b"next"[..]));
        }
        assert!(conn.is_open());
        server.exit(&mut conn).await;
    });
}

#[test]
fn an_async_call_fails_when_the_server_process_dies() {
    run("an_async_call_fails_when_the_server_process_dies", || async {
        let mut server = start_server("tokio-killed", "block");
        let mut conn = AsyncConnection::connect(&server.to, ConnectOptions::default()).await.unwrap();
        let mut call = Box::pin(conn.call(slow(10_000, b"never")));
        assert!(poll_once(&mut call).await);
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        assert!(matches!(call.await, Err(RpcError::PeerDead)));
        assert!(!conn.is_open());
        assert!(matches!(conn.call(Message::new(OP_ECHO)).await, Err(RpcError::PeerDead)));
    });
}

#[test]
fn an_async_server_serves_blocking_and_async_clients() {
    common::watchdog("an_async_server_serves_blocking_and_async_clients", LIMIT, || {
        let (port, to) = ferry::port().unwrap();
        let to2 = to.try_clone().unwrap();
        // A blocking client in its own thread, adaptive (it spins, then
        // sleeps on the futex: the async server must still hear it).
        let blocking = std::thread::spawn(move || {
            let mut c = Connection::connect(&to2, ConnectOptions::default()).unwrap();
            for i in 0..300u32 {
                let r = c.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
                assert_eq!(r.body(), i.to_le_bytes());
            }
            let mut c = Connection::connect(&to2, ConnectOptions { policy: Policy::Block, ..Default::default() }).unwrap();
            for i in 0..300u32 {
                let r = c.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
                assert_eq!(r.body(), i.to_le_bytes());
            }
        });
        rt().block_on(async move {
            let mut server = AsyncRpcServer::new(RpcServer::new(port).unwrap()).unwrap();
            let served = tokio::spawn(async move {
                let mut reply = None;
                let mut n = 0;
                loop {
                    let (id, req) = match server.reply_and_wait(reply.take()).await {
                        Ok(r) => r,
                        Err(RpcError::NoClients) => return n,
                        Err(e) => panic!("{e}"),
                    };
                    n += 1;
                    reply = Some((id, Message::new(req.op()).with_body(req.body().to_vec())));
                }
            });
            let mut conn = AsyncConnection::connect(&to, ConnectOptions::default()).await.unwrap();
            for i in 0..300u32 {
                let r = conn.call(Message::new(OP_ECHO).with_body(i.to_le_bytes())).await.unwrap();
                assert_eq!(r.body(), i.to_le_bytes());
            }
            drop(conn);
            drop(to);
            // Joined off the runtime's thread: the server task must keep
            // running on it while the blocking client finishes.
            tokio::task::spawn_blocking(move || blocking.join().unwrap()).await.unwrap();
            assert_eq!(served.await.unwrap(), 900);
        });
    });
}

#[test]
fn outside_a_runtime_registration_is_an_error() {
    // Registration outside a runtime is an error, not a panic.
    let (rx, tx) = ferry::port().unwrap();
    assert!(AsyncReceiveRight::new(rx).is_err());
    assert!(AsyncSendRight::new(tx).is_err());
}

/// A blocking client keeps working on a connection an async client used
/// before (the doorbell request is withdrawn when a call completes).
#[test]
fn a_connection_goes_back_to_blocking_calls() {
    run("a_connection_goes_back_to_blocking_calls", || async {
        let server = start_server("tokio-back-to-blocking", "block");
        let mut conn = AsyncConnection::connect(&server.to, ConnectOptions { policy: Policy::Block, ..Default::default() })
            .await
            .unwrap();
        assert_eq!(conn.call(Message::new(OP_ECHO).with_body(*b"a")).await.unwrap().body(), b"a");
        let mut blocking = conn.into_inner();
        let r = tokio::task::spawn_blocking(move || {
            let r = blocking.call(Message::new(OP_ECHO).with_body(*b"b"), Timeout::Infinite).unwrap();
            (r, blocking)
        })
        .await
        .unwrap();
        assert_eq!(r.0.body(), b"b");
        let mut conn = AsyncConnection::new(r.1).unwrap();
        server.exit(&mut conn).await;
    });
}

#[test]
fn a_reply_goes_out_even_if_the_wait_after_it_is_never_polled() {
    run("a_reply_goes_out_even_if_the_wait_after_it_is_never_polled", || async {
        let (port, to) = ferry::port().unwrap();
        let mut server = AsyncRpcServer::new(RpcServer::new(port).unwrap()).unwrap();
        let client = std::thread::spawn(move || {
            let mut c = Connection::connect(&to, ConnectOptions::default()).unwrap();
            let a = c.call(Message::new(OP_ECHO).with_body(*b"one"), Timeout::Infinite).unwrap();
            let b = c.call(Message::new(OP_ECHO).with_body(*b"two"), Timeout::Infinite).unwrap();
            (a.body().to_vec(), b.body().to_vec())
        });
        let (id, req) = server.reply_and_wait(None).await.unwrap();
        assert_eq!(req.body(), b"one");
        // Dropped unpolled: the reply has gone anyway, no request is taken.
        drop(server.reply_and_wait(Some((id, Message::new(OP_ECHO).with_body(*b"one")))));
        let (id, req) = server.reply_and_wait(None).await.unwrap();
        assert_eq!(req.body(), b"two");
        server.reply(id, Message::new(OP_ECHO).with_body(*b"two")).unwrap();
        assert_eq!(client.join().unwrap(), (b"one".to_vec(), b"two".to_vec()));
    });
}

/// A connect abandoned by a timeout around it holds nothing: the runtime
/// can be dropped at once (it waits for no thread still connecting), and
/// the connection the abandoned request offered is closed, so a server
/// that takes the request later sees it gone. The server here is a port
/// nobody accepts on, so the connect itself can never finish.
#[test]
fn an_abandoned_connect_holds_neither_the_runtime_nor_its_connection() {
    common::watchdog("an_abandoned_connect_holds_neither_the_runtime_nor_its_connection", LIMIT * 2, || {
        let (mut port, to) = ferry::port().unwrap();
        let runtime = rt();
        let abandoned = runtime.block_on(async {
            tokio::time::timeout(Duration::from_millis(50), AsyncConnection::connect(&to, ConnectOptions::default())).await
        });
        assert!(abandoned.is_err(), "nobody accepts, so the connect cannot have finished");
        let (dropped_tx, dropped_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(runtime);
            let _ = dropped_tx.send(());
        });
        let runtime_dropped = dropped_rx.recv_timeout(Duration::from_secs(20)).is_ok();
        let mut request = port.recv(Timeout::After(LIMIT)).expect("the connect request");
        let Some(Item::Send(offered)) = request.take_items().into_iter().next() else {
            panic!("the connect request carries its connection's socket");
        };
        let connection_closed = offered.wait_dead(Timeout::After(Duration::from_secs(20)));
        // Frees a connect still waiting for this port, so the process ends.
        drop(port);
        assert!(runtime_dropped, "dropping the runtime waited for the abandoned connect");
        assert!(connection_closed, "the abandoned connect's connection is still open");
    });
}
