//! The RPC fast path between real processes: one conformance suite run
//! against both transports (shared slot and socket) under every waiting
//! policy, every failure mode (server killed mid-call, client killed,
//! timeouts with late replies, a hostile client scribbling on its slot), and
//! the system-call count of calls while both sides are active.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use ferry::rpc::{
    ConnectOptions, Connection, Policy, RpcError, RpcServer, RpcStats, SocketConnection, SplitReply, Transport, ADAPTIVE_SPIN,
    LIVENESS_INTERVAL,
    SLOT_INLINE, SLOT_SIZE,
};
use ferry::{Bootstrap, Item, Message, SendRight, Timeout};

const OP_ECHO: u32 = 1;
const OP_SLOW: u32 = 2;
const OP_RIGHTS: u32 = 3;
const OP_STATS: u32 = 4;
const OP_CONNS: u32 = 5;
const OP_BIG: u32 = 6;
const OP_EXIT: u32 = 7;
const OP_FDS: u32 = 8;
const OP_FAILED: u32 = 9;
const OP_PARTS: u32 = 10;

const LIMIT: Duration = Duration::from_secs(60);

/// The system-call count test runs alone: other tests' spinning peers
/// would take its CPUs. Every other test holds this shared.
static ALONE: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    ALONE.read().unwrap_or_else(|e| e.into_inner())
}

fn alone() -> RwLockWriteGuard<'static, ()> {
    ALONE.write().unwrap_or_else(|e| e.into_inner())
}

/// One name service for the whole test process (the embedded server is
/// per process); each test registers its own names.
fn bootstrap() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = common::private_bootstrap("rpc");
        std::env::set_var("FERRY_BOOTSTRAP", &p);
        Bootstrap::connect().expect("start the embedded name service");
        p
    })
    .clone()
}

struct Server {
    child: Child,
    to: SendRight,
    _out: BufReader<ChildStdout>,
}

fn start_server(name: &str, policy: &str, workers: usize) -> Server {
    start_server_on(name, policy, workers, None)
}

fn start_server_on(name: &str, policy: &str, workers: usize, cpu: Option<usize>) -> Server {
    let path = bootstrap();
    let mut args = vec![name.to_string(), policy.to_string(), workers.to_string()];
    args.extend(cpu.map(|c| c.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = common::spawn_peer(&path, "rpc-server", &args);
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read ready");
    assert_eq!(line.trim(), "ready", "server did not start");
    let to = Bootstrap::connect().unwrap().lookup(name).expect("server registered");
    Server { child, to, _out: out }
}

impl Server {
    fn exit(mut self, conn: &mut impl Transport) {
        let r = conn.call(Message::new(OP_EXIT), Timeout::Infinite).expect("exit call");
        assert_eq!(r.op(), OP_EXIT);
        assert!(self.child.wait().expect("wait").success());
    }
}

fn opts(policy: Policy) -> ConnectOptions {
    ConnectOptions { policy, ..Default::default() }
}

fn slow(ms: u32, tag: &[u8]) -> Message {
    let mut b = ms.to_le_bytes().to_vec();
    b.extend_from_slice(tag);
    Message::new(OP_SLOW).with_body(b)
}

fn u64s(b: &[u8]) -> Vec<u64> {
    b.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The message-semantics suite every transport must pass.
fn conformance<T: Transport>(conn: &mut T) {
    // Bodies of every size class: empty, small, a page, large, the slot's
    // whole length (the most a call carries).
    for len in [0, 1, 100, 4096, 60_000, SLOT_INLINE - 1, SLOT_INLINE] {
        let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let r = conn.call(Message::new(OP_ECHO).with_body(body.clone()), Timeout::Infinite).expect("echo");
        assert_eq!(r.op(), OP_ECHO);
        assert_eq!(r.body(), &body[..], "echo of {len} bytes");
    }
    // A reply much larger than its request.
    let r = conn.call(Message::new(OP_BIG).with_body(65_000u32.to_le_bytes()), Timeout::Infinite).unwrap();
    assert_eq!(r.body().len(), 65_000);
    assert!(r.body().iter().all(|&b| b == 0x5A));
    // Rights travel both ways.
    let (mut rx, tx) = ferry::port().unwrap();
    let mut r = conn.call(Message::new(OP_RIGHTS).with_item(tx), Timeout::Infinite).expect("rights call");
    assert_eq!(r.body(), b"right-returned");
    assert_eq!(rx.recv(Timeout::Infinite).unwrap().body(), b"through-right");
    match r.take_items().pop() {
        Some(Item::Send(back)) => back.send(Message::new(9).with_body(*b"again"), Timeout::Infinite).unwrap(),
        other => panic!("expected a send right back, got {other:?}"),
    }
    assert_eq!(rx.recv(Timeout::Infinite).unwrap().body(), b"again");
    // A timeout, then the late reply is discarded: the next call gets its own.
    match conn.call(slow(300, b"late"), Timeout::millis(30)) {
        Err(RpcError::Timeout) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    let r = conn.call(Message::new(OP_ECHO).with_body(*b"mine"), Timeout::Infinite).unwrap();
    assert_eq!(r.body(), b"mine", "a late reply leaked into the next call");
    // A zero timeout never waits; the connection stays usable.
    match conn.call(Message::new(OP_ECHO).with_body(*b"zero"), Timeout::Zero) {
        Err(RpcError::Timeout) => {}
        Ok(r) => assert_eq!(r.body(), b"zero"),
        Err(e) => panic!("zero timeout: {e}"),
    }
    let r = conn.call(Message::new(OP_ECHO).with_body(*b"after-zero"), Timeout::millis(10_000)).unwrap();
    assert_eq!(r.body(), b"after-zero");
    // Bodies as long as a port message carries, whole, each way, in the
    // slot and (carrying a right, which only the socket takes) over the
    // socket: there, those the framing would push over a message's inline
    // bytes travel in a region of their own.
    let (_scratch, right) = ferry::port().unwrap();
    for len in [60_000, ferry::message::MAX_INLINE - 8, ferry::message::MAX_INLINE - 7, ferry::message::MAX_INLINE] {
        let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        for with_right in [false, true] {
            let mut req = Message::new(OP_ECHO).with_body(body.clone());
            if with_right {
                req = req.with_item(right.try_clone().unwrap());
            }
            let r = conn.call(req, Timeout::Infinite).unwrap_or_else(|e| panic!("a call of {len} bytes (right: {with_right}): {e}"));
            assert!(r.body() == &body[..], "a call of {len} bytes (right: {with_right}) came back changed");
        }
    }
    // Too large for any path: a typed error, the connection still usable.
    match conn.call(Message::new(OP_ECHO).with_body(vec![0; ferry::message::MAX_INLINE + 1]), Timeout::Infinite) {
        Err(RpcError::TooLarge(_)) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let r = conn.call(Message::new(OP_ECHO).with_body(*b"still"), Timeout::Infinite).unwrap();
    assert_eq!(r.body(), b"still");
    // Many calls in a row, each getting its own answer.
    for i in 0u32..500 {
        let r = conn.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
        assert_eq!(r.body(), i.to_le_bytes());
    }
    parts_conformance(conn);
}

/// `call_parts` and `reply_parts`: a body sent in two pieces arrives as
/// one, and comes back in two pieces cut where the server said, split
/// where the caller asked, at every size class (in the slot, at its end)
/// and every cut; timeouts and errors as for `call`.
fn parts_conformance<T: Transport>(conn: &mut T) {
    let mut reply = SplitReply::default();
    for len in [0usize, 1, 5, 100, SLOT_INLINE - 5, SLOT_INLINE - 4, 60_000] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
        for cut in [0, 1, 4, len / 2, len].into_iter().filter(|&c| c <= len) {
            for (server_cut, split) in [(0, 0), (cut, 4), (len, usize::MAX), (len / 3, len / 2)] {
                // The request: the server's cut word and the payload's
                // first `cut` bytes, then the rest as the tail.
                let mut head = (server_cut as u32).to_le_bytes().to_vec();
                head.extend_from_slice(&payload[..cut]);
                reply.split = split;
                conn.call_parts(OP_PARTS, &head, &payload[cut..], &mut reply, Timeout::Infinite).expect("parts call");
                assert_eq!(reply.op, OP_PARTS);
                assert!(reply.items.is_empty());
                assert_eq!(reply.head.len(), split.min(len), "{len} bytes cut at {cut}, split at {split}");
                assert_eq!([&reply.head[..], &reply.tail[..]].concat(), payload, "{len} bytes cut at {cut}/{server_cut}, split at {split}");
            }
        }
    }
    // A timeout, then the late reply is discarded.
    let mut late = 300u32.to_le_bytes().to_vec();
    late.extend_from_slice(b"la");
    match conn.call_parts(OP_SLOW, &late, b"te", &mut reply, Timeout::millis(30)) {
        Err(RpcError::Timeout) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    conn.call_parts(OP_PARTS, &0u32.to_le_bytes(), b"mine", &mut reply, Timeout::Infinite).unwrap();
    assert_eq!([&reply.head[..], &reply.tail[..]].concat(), b"mine", "a late reply leaked into the next call");
    // Too large for any path: a typed error, the connection still usable.
    match conn.call_parts(OP_ECHO, &[0; 8], &vec![0; ferry::message::MAX_INLINE], &mut reply, Timeout::Infinite) {
        Err(RpcError::TooLarge(_)) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    reply.split = 2;
    conn.call_parts(OP_ECHO, b"st", b"ill", &mut reply, Timeout::Infinite).unwrap();
    assert_eq!((reply.op, &reply.head[..], &reply.tail[..]), (OP_ECHO, &b"st"[..], &b"ill"[..]));
    // A reply with rights, split after it arrived whole.
    let (mut rx, tx) = ferry::port().unwrap();
    reply.split = 5;
    let r = conn.call(Message::new(OP_RIGHTS).with_item(tx), Timeout::Infinite).unwrap();
    reply.fill(r);
    assert_eq!((&reply.head[..], &reply.tail[..], reply.items.len()), (&b"right"[..], &b"-returned"[..], 1));
    assert_eq!(rx.recv(Timeout::Infinite).unwrap().body(), b"through-right");
}

fn conformance_for(name: &str, server_policy: &str, client: Policy, slot: bool) {
    common::watchdog(name, LIMIT, || {
        let server = start_server(name, server_policy, 1);
        if slot {
            let mut c = Connection::connect(&server.to, opts(client)).unwrap();
            conformance(&mut c);
            server.exit(&mut c);
        } else {
            let mut c = SocketConnection::connect(&server.to, opts(client)).unwrap();
            conformance(&mut c);
            server.exit(&mut c);
        }
    })
}

#[test]
fn conformance_slot_adaptive() {
    let _guard = shared();
    conformance_for("conf-slot-adaptive", "adaptive", Policy::Adaptive, true);
}

#[test]
fn conformance_slot_block() {
    let _guard = shared();
    conformance_for("conf-slot-block", "block", Policy::Block, true);
}

#[test]
fn conformance_slot_poll() {
    let _guard = shared();
    conformance_for("conf-slot-poll", "poll", Policy::Poll, true);
}

#[test]
fn conformance_socket() {
    let _guard = shared();
    conformance_for("conf-socket", "block", Policy::Block, false);
}

/// The server is SIGKILLed while it works on a call: the caller gets
/// `PeerDead`, not a hang, under every policy and on both transports.
/// Waits until `fd` polls readable or hangs up (or a signal ends the
/// wait: the caller looks again either way).
fn readable(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, borrowed for the duration of the call.
    unsafe { libc::poll(&mut p, 1, -1) };
}

/// A call in two steps (`send_request`, then `wait_reply` as often as it
/// takes), under every policy, with the request and the reply in the slot
/// or over the socket: a wait that times out leaves the call pending and
/// a later wait gets that call's one reply; a zero wait only looks, and
/// the connection's socket polls readable once the reply is there; a new
/// request abandons a pending call, whose late reply is discarded (and a
/// wait for it fails at once). A
/// connection opened in steps (`begin_connect`) works as one opened at
/// once.
#[test]
fn a_call_in_steps_gets_its_one_reply() {
    let _guard = shared();
    common::watchdog("a_call_in_steps_gets_its_one_reply", LIMIT, || {
        let server = start_server("call-in-steps", "adaptive", 1);
        for policy in [Policy::Adaptive, Policy::Block, Policy::Poll] {
            let mut connecting = Connection::begin_connect(policy).unwrap();
            let mut conn = connecting.wait(&server.to, Timeout::Infinite).unwrap();
            // A call carrying a right takes the socket.
            let (_scratch, right) = ferry::port().unwrap();
            let big = vec![7u8; 60_000];
            let requests = || {
                [
                    (slow(100, b"slot"), b"slot".to_vec()),
                    (slow(100, &big).with_item(right.try_clone().unwrap()), big.clone()),
                    (Message::new(OP_BIG).with_body(65_000u32.to_le_bytes()), vec![0x5A; 65_000]),
                ]
            };
            for (req, want) in requests() {
                let mut call = conn.send_request(req).unwrap();
                let reply = loop {
                    match conn.wait_reply(&mut call, Timeout::millis(10)) {
                        Err(RpcError::Timeout) => {}
                        other => break other.unwrap(),
                    }
                };
                assert_eq!(reply.body(), &want[..], "{policy:?}, timed waits");
            }
            for (req, want) in requests() {
                let mut call = conn.send_request(req).unwrap();
                let reply = loop {
                    match conn.wait_reply(&mut call, Timeout::Zero) {
                        Err(RpcError::Timeout) => readable(conn.socket_fd().expect("open")),
                        other => break other.unwrap(),
                    }
                };
                assert_eq!(reply.body(), &want[..], "{policy:?}, zero waits");
            }
            let mut abandoned = conn.send_request(slow(100, b"late")).unwrap();
            assert!(matches!(conn.wait_reply(&mut abandoned, Timeout::Zero), Err(RpcError::Timeout)));
            let r = conn.call(Message::new(OP_ECHO).with_body(*b"mine"), Timeout::Infinite).unwrap();
            assert_eq!(r.body(), b"mine", "a late reply leaked into the next call");
            assert!(matches!(conn.wait_reply(&mut abandoned, Timeout::Infinite), Err(RpcError::Io(_))), "an abandoned call waits for nothing");
        }
        let mut last = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        server.exit(&mut last);
    });
}

#[test]
fn server_killed_mid_call() {
    let _guard = shared();
    common::watchdog("server_killed_mid_call", LIMIT, || {
        for (i, (policy, slot)) in
            [(Policy::Adaptive, true), (Policy::Block, true), (Policy::Poll, true), (Policy::Block, false)].into_iter().enumerate()
        {
            let name = format!("kill-server-{i}");
            let mut server = start_server(&name, "adaptive", 1);
            let mut conn: Box<dyn Transport> = if slot {
                Box::new(Connection::connect(&server.to, opts(policy)).unwrap())
            } else {
                Box::new(SocketConnection::connect(&server.to, opts(policy)).unwrap())
            };
            assert_eq!(conn.call(Message::new(OP_ECHO).with_body(*b"up"), Timeout::Infinite).unwrap().body(), b"up");
            let pid = server.child.id();
            let killer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid as i32).unwrap(),
                    rustix::process::Signal::KILL,
                );
            });
            match conn.call(slow(30_000, b"never"), Timeout::Infinite) {
                Err(RpcError::PeerDead) => {}
                other => panic!("policy {policy:?} slot {slot}: expected PeerDead, got {other:?}"),
            }
            // And it stays dead.
            assert!(matches!(conn.call(Message::new(OP_ECHO), Timeout::Infinite), Err(RpcError::PeerDead)));
            killer.join().unwrap();
            let _ = server.child.wait();
        }
    })
}

/// A child forked after a connection was made shares its slot and sequence
/// numbers: a call through the copy is refused with `RpcError::Forked`,
/// sending nothing, over the slot and over the socket alike; the child's
/// own connection works and the parent's calls go on with their replies.
#[test]
fn a_connection_copied_by_fork_refuses_calls_in_the_child() {
    // SAFETY: the child only calls, connects and exits with `_exit`.
    copies_refuse_calls_in_a_child("fork-copy", || unsafe { libc::fork() });
}

/// A child made by a raw `clone` system call, which runs no `fork()`
/// handlers, holds copies of its parent's connections as a forked child
/// does: a call through one is refused with `RpcError::Forked` there too,
/// over the slot and over the socket, and its own connection works.
#[test]
fn a_connection_copied_by_a_raw_clone_refuses_calls_in_the_child() {
    // SAFETY: a clone without CLONE_VM is a fork that skips the C
    // library's handlers; the child only calls, connects and exits with
    // `_exit`.
    copies_refuse_calls_in_a_child("clone-copy", || unsafe {
        libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long) as i32
    });
}

/// Makes a child with `make_child` (a pid in the parent, 0 in the child)
/// while the parent holds a slot connection and a socket connection: the
/// child's calls through both copies must be refused and a connection of
/// its own must work; the parent's calls then go on with their replies.
fn copies_refuse_calls_in_a_child(name: &str, make_child: impl FnOnce() -> i32) {
    let _guard = shared();
    common::watchdog(name, LIMIT, || {
        let server = start_server(name, "block", 1);
        let mut conn = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        let mut sock = SocketConnection::connect(&server.to, opts(Policy::Block)).unwrap();
        let echo = |t: &mut dyn Transport, tag: &[u8]| t.call(Message::new(OP_ECHO).with_body(tag.to_vec()), Timeout::After(LIMIT));
        assert_eq!(echo(&mut conn, b"before").unwrap().body(), b"before");
        let pid = make_child();
        assert!(pid >= 0, "making the child failed");
        if pid == 0 {
            let slot = echo(&mut conn, b"child");
            let socket = echo(&mut sock, b"child");
            let refused = matches!(slot, Err(RpcError::Forked)) as i32 + matches!(socket, Err(RpcError::Forked)) as i32;
            let own = Connection::connect(&server.to, opts(Policy::Block)).and_then(|mut own| echo(&mut own, b"own"));
            let own_ok = own.is_ok_and(|r| r.body() == b"own");
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(if own_ok { refused } else { 10 + refused }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "the child did not exit (status {status})");
        assert_eq!(libc::WEXITSTATUS(status), 2, "calls refused through the child's 2 copies, plus 10 if its own connection failed");
        for i in 0..100u32 {
            let tag = i.to_le_bytes();
            assert_eq!(echo(&mut conn, &tag).unwrap().body(), tag);
            assert_eq!(echo(&mut sock, &tag).unwrap().body(), tag);
        }
        server.exit(&mut conn);
    })
}

/// A child forked after a server was made holds a copy of it that shares
/// its port, its connections' slots and sockets, but has no watcher thread:
/// its `reply_and_wait` and `reply` are refused with `RpcError::Forked`, at
/// once and taking nothing, its `drop_connection` leaves the parent's
/// connection alone, and the parent's server goes on serving.
#[test]
fn a_server_copied_by_fork_refuses_to_serve_in_the_child() {
    let _guard = shared();
    common::watchdog("fork_server", LIMIT, || {
        let (port, to) = ferry::port().unwrap();
        let mut srv = RpcServer::new(port).unwrap();
        srv.set_policy(Policy::Block);
        let client = std::thread::spawn(move || {
            let mut c = Connection::connect(&to, opts(Policy::Block)).unwrap();
            let mut answered = 0;
            for i in 0..50u32 {
                let r = c.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::After(LIMIT));
                answered += usize::from(r.is_ok_and(|r| r.body() == i.to_le_bytes()));
            }
            // A right takes the connection's socket, which the server hears
            // of through its epoll instance (shared with the child's copy).
            let (_rx, tx) = ferry::port().unwrap();
            let r = c.call(Message::new(OP_ECHO).with_body(*b"socket").with_item(tx), Timeout::After(Duration::from_secs(10)));
            answered + usize::from(r.is_ok_and(|r| r.body() == b"socket"))
        });
        let (conn, req) = srv.reply_and_wait(None, Timeout::After(LIMIT)).unwrap();
        // SAFETY: the child only serves through its copy and exits with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let reply = matches!(srv.reply(conn, Message::new(OP_ECHO)), Err(RpcError::Forked));
            srv.drop_connection(conn);
            let started = Instant::now();
            let wait = srv.reply_and_wait(None, Timeout::After(Duration::from_secs(2)));
            let code = match wait {
                Err(RpcError::Forked) if started.elapsed() < Duration::from_secs(1) => 0,
                Err(RpcError::Forked) => 1,
                Err(RpcError::Timeout) => 2,
                Ok(_) => 3,
                Err(_) => 4,
            };
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(code + if reply { 0 } else { 10 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "the child did not exit (status {status})");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child's copy: 1 refused late, 2 timed out, 3 took a request, 4 another error; plus 10 if its reply was not refused"
        );
        let mut reply = Some((conn, Message::new(req.op()).with_body(req.body().to_vec())));
        loop {
            match srv.reply_and_wait(reply.take(), Timeout::After(LIMIT)) {
                Ok((c, r)) => reply = Some((c, Message::new(r.op()).with_body(r.body().to_vec()))),
                Err(RpcError::NoClients) => break,
                Err(e) => panic!("server: {e}"),
            }
        }
        assert_eq!(client.join().unwrap(), 51, "calls answered, of 50 through the slot and 1 over the socket");
    })
}

/// A connection id names a connection of one server: given to another
/// server of the same process, which numbered its own connections alike,
/// a reply is refused (`PeerDead`: no such connection) and reaches none of
/// that server's clients, which get their own replies.
#[test]
fn a_reply_to_another_servers_connection_id_reaches_no_client() {
    let _guard = shared();
    common::watchdog("foreign_conn_id", LIMIT, || {
        let (port_a, to_a) = ferry::port().unwrap();
        let (port_b, to_b) = ferry::port().unwrap();
        let mut a = RpcServer::new(port_a).unwrap();
        let mut b = RpcServer::new(port_b).unwrap();
        let client = |to: SendRight, tag: &'static [u8]| {
            std::thread::spawn(move || {
                let mut c = Connection::connect(&to, opts(Policy::Block)).unwrap();
                c.call(Message::new(OP_ECHO).with_body(tag), Timeout::After(LIMIT)).map(|r| r.body().to_vec())
            })
        };
        let (client_a, client_b) = (client(to_a, b"to a"), client(to_b, b"to b"));
        let (id_a, req_a) = a.reply_and_wait(None, Timeout::After(LIMIT)).unwrap();
        let (id_b, req_b) = b.reply_and_wait(None, Timeout::After(LIMIT)).unwrap();
        assert_eq!((req_a.body(), req_b.body()), (&b"to a"[..], &b"to b"[..]));
        let foreign = b.reply(id_a, Message::new(OP_ECHO).with_body(*b"a's answer"));
        b.reply(id_b, Message::new(OP_ECHO).with_body(*b"b's answer")).ok();
        a.reply(id_a, Message::new(OP_ECHO).with_body(*b"a's answer")).unwrap();
        let got_b = client_b.join().unwrap().unwrap();
        let got_a = client_a.join().unwrap().unwrap();
        assert!(matches!(foreign, Err(RpcError::PeerDead)), "a reply to another server's connection id: {foreign:?}");
        assert_eq!((got_a, got_b), (b"a's answer".to_vec(), b"b's answer".to_vec()));
    })
}

/// A client is SIGKILLed in the middle of its call: the server drops that
/// connection and keeps serving the others.
#[test]
fn client_killed_server_keeps_serving() {
    let _guard = shared();
    common::watchdog("client_killed", LIMIT, || {
        for policy in ["adaptive", "block", "poll"] {
            let name = format!("kill-client-{policy}");
            let server = start_server(&name, policy, 1);
            let mut mine = Connection::connect(&server.to, opts(Policy::Adaptive)).unwrap();
            let mut victim = common::spawn_peer(&bootstrap(), "rpc-client", &[&name, policy]);
            let mut out = BufReader::new(victim.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "connected");
            assert_eq!(connections_held(&mut mine), 2);
            line.clear();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "calling");
            std::thread::sleep(Duration::from_millis(50));
            victim.kill().unwrap();
            victim.wait().unwrap();
            // The server finishes the dead client's call, then must notice.
            while connections_held(&mut mine) != 1 {
                common::nap();
            }
            let r = mine.call(Message::new(OP_ECHO).with_body(*b"alive"), Timeout::Infinite).unwrap();
            assert_eq!(r.body(), b"alive");
            server.exit(&mut mine);
        }
    })
}

/// A hostile client writes garbage into its own slot: its connection is
/// dropped, the server and the other connections carry on.
#[test]
fn hostile_client_breaks_only_itself() {
    let _guard = shared();
    common::watchdog("hostile_client", LIMIT, || {
        for policy in ["adaptive", "block", "poll"] {
            let name = format!("hostile-{policy}");
            let server = start_server(&name, policy, 1);
            let mut good = Connection::connect(&server.to, opts(Policy::Adaptive)).unwrap();
            let mut evil = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
            assert_eq!(evil.call(Message::new(OP_ECHO).with_body(*b"x"), Timeout::Infinite).unwrap().body(), b"x");
            // req_len (offset 72) far beyond the slot, then a new req_seq
            // (offset 64), written through the memfd, not through the API.
            let fd = evil.slot_fd().unwrap();
            rustix::io::pwrite(fd, &0xFFFF_FFF0u32.to_le_bytes(), 72).unwrap();
            rustix::io::pwrite(fd, &0x7777u32.to_le_bytes(), 64).unwrap();
            // Calls with a right travel over the socket, leaving the garbage
            // in place, and wake even a sleeping server, which then finds it.
            let mut broken = false;
            for _ in 0..3 {
                let (_rx, tx) = ferry::port().unwrap();
                match evil.call(Message::new(OP_RIGHTS).with_item(tx), Timeout::millis(5_000)) {
                    Err(RpcError::PeerDead) => {
                        broken = true;
                        break;
                    }
                    Ok(r) => assert_eq!(r.body(), b"right-returned"),
                    Err(e) => panic!("hostile connection: unexpected {e}"),
                }
            }
            assert!(broken, "the server kept serving a connection whose slot holds garbage");
            assert!(!evil.is_open());
            for i in 0u32..50 {
                let r = good.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
                assert_eq!(r.body(), i.to_le_bytes());
            }
            let n = connections_held(&mut good);
            assert_eq!(n, 1);
            server.exit(&mut good);
        }
    })
}

/// A reply slot holding garbage (what a hostile server could write) fails
/// the call with a protocol error and closes the connection; the client
/// process is unharmed.
#[test]
fn garbage_reply_is_a_protocol_error() {
    let _guard = shared();
    common::watchdog("garbage_reply", LIMIT, || {
        let server = start_server("garbage-reply", "adaptive", 1);
        let mut c = Connection::connect(&server.to, opts(Policy::Adaptive)).unwrap();
        assert_eq!(c.call(Message::new(OP_ECHO).with_body(*b"1"), Timeout::Infinite).unwrap().body(), b"1");
        // Stop the real server so that only the forgery answers; the next
        // call is sequence number 2: forge its reply with a length beyond
        // the slot (rep_len and rep_seq at 72 and 64 into the reply half,
        // the slot's second: docs/rpc.md).
        let pid = rustix::process::Pid::from_raw(server.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
        let fd = c.slot_fd().unwrap();
        rustix::io::pwrite(fd, &0x10_0000u32.to_le_bytes(), (SLOT_SIZE / 2 + 72) as u64).unwrap();
        rustix::io::pwrite(fd, &2u32.to_le_bytes(), (SLOT_SIZE / 2 + 64) as u64).unwrap();
        let got = c.call(Message::new(OP_ECHO).with_body(*b"2"), Timeout::Infinite);
        rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
        match got {
            Err(RpcError::Protocol { .. }) => {}
            other => panic!("expected a protocol error, got {other:?}"),
        }
        assert!(matches!(c.call(Message::new(OP_ECHO), Timeout::Infinite), Err(RpcError::PeerDead)));
        let mut other = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        assert_eq!(other.call(Message::new(OP_ECHO).with_body(*b"ok"), Timeout::Infinite).unwrap().body(), b"ok");
        server.exit(&mut other);
    })
}

/// Bodies of 4, 16 and 64 KiB (the most a call carries) each way travel
/// through the slot: no socket operation on either side, and the slot holds
/// the last request and reply. The slot carried 3840 bytes, and later 63
/// KiB; every larger call went over the connection socket and reached a
/// sleeping server only through its watcher thread, three to eight times
/// slower than the slot path (and than a plain socket).
#[test]
fn bodies_up_to_64_kib_travel_through_the_slot() {
    let _guard = alone();
    common::watchdog("large_slot_bodies", LIMIT, || {
        let server = start_server("large-slot-bodies", "block", 1);
        let mut c = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        assert_eq!(c.call(Message::new(OP_ECHO).with_body(*b"1"), Timeout::Infinite).unwrap().body(), b"1");
        let server_before = server_stats(&mut c);
        let before = ferry::rpc::stats();
        let fd = c.slot_fd().unwrap().try_clone_to_owned().unwrap();
        let word = |off: usize| {
            let mut w = [0u8; 4];
            assert_eq!(rustix::io::pread(&fd, &mut w, off as u64).unwrap(), 4);
            u32::from_le_bytes(w)
        };
        // The reply page is the slot's second half (docs/rpc.md).
        let reply_page = SLOT_SIZE / 2;
        for len in [4096usize, 16384, SLOT_INLINE] {
            for round in 0..5usize {
                let body: Vec<u8> = (0..len).map(|i| (i * 31 + round + len) as u8).collect();
                let r = c.call(Message::new(OP_ECHO).with_body(body.clone()), Timeout::Infinite).unwrap();
                assert_eq!(r.body(), &body[..], "echo of {len} bytes");
            }
            assert_eq!(word(72) as usize, len, "a {len}-byte request did not go through the slot");
            assert_eq!((word(reply_page + 72) as usize, word(reply_page + 76)), (len, 0), "a {len}-byte reply did not go through the slot");
        }
        let made = ferry::rpc::stats().since(&before);
        let server_delta = server_stats(&mut c).since(&server_before);
        eprintln!("client: {made:?}; server: {server_delta:?}");
        assert_eq!(made.socket_ops, 0, "large calls went over the socket");
        // The stats call itself is one slot call; the calls above made no
        // socket operation on the server either.
        assert_eq!(server_delta.socket_ops, 0, "the server read large calls from the socket");
        server.exit(&mut c);
    })
}

/// How many connections the test server holds.
fn connections_held(c: &mut Connection) -> u64 {
    u64s(c.call(Message::new(OP_CONNS), Timeout::Infinite).unwrap().body())[0]
}

fn server_stats(c: &mut Connection) -> RpcStats {
    let v = u64s(c.call(Message::new(OP_STATS), Timeout::Infinite).unwrap().body());
    RpcStats { futex_waits: v[0], wakes: v[1], polls: v[2], socket_ops: v[3] }
}

/// With both sides active, a poll-mode call makes no system call at all: a
/// call that took less than the liveness interval made none on the client,
/// and the server issued no wake-up and never slept. In adaptive mode a
/// client spins while its budget lasts and the server is awake: a call that
/// took less than the spin budget and rang no doorbell (the server was not
/// asleep) made no system call. How many calls are that quick depends on
/// the scheduler, so nothing is asserted about their number, only about
/// each of them. Both sides are pinned
/// to different CPUs when the machine has two, as a latency-critical pair
/// would be: spinning for a peer that waits for the same CPU only delays it.
#[test]
fn active_calls_make_no_system_calls() {
    let _guard = alone();
    common::watchdog("no_syscalls", LIMIT, || {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (mine, theirs) = if cpus >= 2 { (Some(0), Some(1)) } else { (None, None) };
        if let Some(cpu) = mine {
            ferry::rpc::pin_current_thread(cpu).unwrap();
        }
        for (policy, name) in [(Policy::Poll, "poll"), (Policy::Adaptive, "adaptive")] {
            let server = start_server_on(&format!("count-{name}"), name, 1, theirs);
            let mut c = Connection::connect(&server.to, opts(policy)).unwrap();
            for _ in 0..200 {
                c.call(Message::new(OP_ECHO).with_body(*b"warm"), Timeout::Infinite).unwrap();
            }
            let calls = 2000;
            let server_before = server_stats(&mut c);
            let mut quiet = 0;
            let mut quick = 0;
            let mut quick_noisy = 0;
            let mut spun = 0;
            let mut spun_noisy = 0;
            for i in 0u32..calls {
                let before = ferry::rpc::stats();
                let t = Instant::now();
                let r = c.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
                let took = t.elapsed();
                let made = ferry::rpc::stats().since(&before);
                assert_eq!(r.body(), i.to_le_bytes());
                quiet += u32::from(made.total() == 0);
                if took < LIVENESS_INTERVAL {
                    quick += 1;
                    quick_noisy += u32::from(made.total() != 0);
                }
                if took < ADAPTIVE_SPIN && made.wakes == 0 {
                    spun += 1;
                    spun_noisy += u32::from(made.total() != 0);
                }
            }
            let server_delta = server_stats(&mut c).since(&server_before);
            eprintln!(
                "{name}: {quiet}/{calls} calls without a system call on the client; {quick} quick calls, {quick_noisy} of them with one; {spun} within the spin budget, {spun_noisy} of them with one; server: {server_delta:?}"
            );
            if policy == Policy::Poll {
                assert_eq!(quick_noisy, 0, "a poll-mode call made a system call while the server was active");
                assert_eq!(server_delta.wakes, 0, "the server woke a client that polls");
                assert_eq!(server_delta.futex_waits, 0);
                assert_eq!(server_delta.socket_ops, 0);
            } else if mine.is_some() {
                // Pinned apart, the client never takes the server for a
                // thread on its own CPU, so only the budget or a sleeping
                // server can send it to sleep.
                assert_eq!(spun_noisy, 0, "an adaptive call slept within its spin budget while the server was awake");
            }
            server.exit(&mut c);
        }
    })
}

/// A blocking server sleeps on its slots' futexes, not in `epoll`: a
/// client wakes it with `FUTEX_WAKE`, and no doorbell is rung or read. The
/// old design rang a one-byte doorbell on the connection socket for every
/// call that found the server asleep, which the server then read: one
/// socket operation and one `epoll` wait on the server per call.
#[test]
fn blocking_server_sleeps_on_futexes() {
    let _guard = shared();
    common::watchdog("block_futex", LIMIT, || {
        let server = start_server("block-futex", "block", 1);
        let mut c = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        for _ in 0..20 {
            c.call(Message::new(OP_ECHO).with_body(*b"warm"), Timeout::Infinite).unwrap();
        }
        let calls = 300u32;
        let before = server_stats(&mut c);
        for i in 0..calls {
            let r = c.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::Infinite).unwrap();
            assert_eq!(r.body(), i.to_le_bytes());
        }
        let d = server_stats(&mut c).since(&before);
        eprintln!("server over {calls} blocking calls: {d:?}");
        assert_eq!(d.socket_ops, 0, "the server read doorbells from the socket");
        assert!(d.futex_waits > 0, "the server never slept on a futex");
        // Only the housekeeping look every LIVENESS_INTERVAL may wait in epoll.
        assert!(d.polls < u64::from(calls) / 4, "the server slept in epoll: {d:?}");
        server.exit(&mut c);
    })
}

/// A blocking server with one client sleeps on that client's request word
/// alone (`FUTEX_WAIT`, not `futex_waitv`); what arrives on descriptors
/// meanwhile must still wake it, through its watcher: a call carrying a
/// right (it travels over the socket), a second client's connection
/// request at the port, and that client's hang-up.
#[test]
fn a_server_asleep_on_its_one_client_still_hears_sockets_and_its_port() {
    let _guard = shared();
    common::watchdog("one_slot_sleep", LIMIT, || {
        let server = start_server("one-slot-sleep", "block", 1);
        let mut only = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        for round in 0..3 {
            assert_eq!(only.call(Message::new(OP_ECHO).with_body(*b"warm"), Timeout::Infinite).unwrap().body(), b"warm");
            // Long enough for the server to be asleep on the one slot.
            std::thread::sleep(Duration::from_millis(50));
            let (mut rx, tx) = ferry::port().unwrap();
            let r = only.call(Message::new(OP_RIGHTS).with_item(tx), Timeout::millis(5_000));
            assert_eq!(r.expect("a socket call to a server asleep on the slot").body(), b"right-returned", "round {round}");
            assert_eq!(rx.recv(Timeout::millis(5_000)).unwrap().body(), b"through-right");
            std::thread::sleep(Duration::from_millis(50));
            let mut second = Connection::connect(&server.to, ConnectOptions { policy: Policy::Block, timeout: Timeout::millis(5_000) })
                .expect("a connection to a server asleep on its one slot");
            assert_eq!(second.call(Message::new(OP_ECHO).with_body(*b"2nd"), Timeout::millis(5_000)).unwrap().body(), b"2nd");
            assert_eq!(connections_held(&mut only), 2);
            drop(second);
            let start = Instant::now();
            while connections_held(&mut only) != 1 {
                assert!(start.elapsed() < Duration::from_secs(10), "the server never noticed the second client hang up");
                common::nap();
            }
        }
        server.exit(&mut only);
    })
}

/// A client that keeps scribbling on its own slot's request word (the futex
/// a sleeping server waits on), its request length, the server's sleeping
/// flag and the socket-request word cannot stall a blocking server: another
/// client's calls are all answered meanwhile, and afterwards.
#[test]
fn scribbled_futex_words_stall_no_one() {
    let _guard = shared();
    common::watchdog("scribbled_futex", LIMIT, || {
        let server = start_server("scribble-futex", "block", 1);
        let mut good = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        let mut evil = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        assert_eq!(evil.call(Message::new(OP_ECHO).with_body(*b"x"), Timeout::Infinite).unwrap().body(), b"x");
        let fd = evil.slot_fd().unwrap().try_clone_to_owned().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let scribbler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0x9E37_79B9u32;
                let start = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && start.elapsed() < Duration::from_secs(20) {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    // req_seq, req_op, req_len (small or huge), server_sleeping, req_sock
                    let off = [64u64, 68, 72, 76, 80][(x % 5) as usize];
                    let v = if off == 72 && x & 1 == 0 { x % 64 } else { x };
                    let _ = rustix::io::pwrite(&fd, &v.to_le_bytes(), off);
                }
            })
        };
        for i in 0u32..300 {
            let r = good.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::millis(10_000)).unwrap();
            assert_eq!(r.body(), i.to_le_bytes());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        scribbler.join().unwrap();
        for i in 0u32..20 {
            let r = good.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::millis(10_000)).unwrap();
            assert_eq!(r.body(), i.to_le_bytes());
        }
        drop(evil);
        server.exit(&mut good);
    })
}

/// One server thread with more idle connections than one `futex_waitv`
/// can watch (128) sleeps in `epoll` instead, and its clients ring the
/// socket doorbell: every call on every connection is still answered, and
/// the server's socket reads show the doorbells were used (calls made
/// after a pause, once the server is asleep, need them).
#[test]
fn more_connections_than_one_futex_wait_use_the_doorbell() {
    let _guard = shared();
    common::watchdog("many_idle", LIMIT, || {
        let server = start_server("many-idle", "block", 1);
        let mut conns: Vec<Connection> = (0..130).map(|_| Connection::connect(&server.to, opts(Policy::Block)).unwrap()).collect();
        let before = server_stats(&mut conns[0]);
        for round in 0u32..3 {
            for (i, c) in conns.iter_mut().enumerate() {
                let body = [round.to_le_bytes(), (i as u32).to_le_bytes()].concat();
                let r = c.call(Message::new(OP_ECHO).with_body(body.clone()), Timeout::millis(10_000)).unwrap();
                assert_eq!(r.body(), &body[..]);
            }
        }
        // Calls back to back may each find the server still scanning its
        // connections, awake, so that none needs the doorbell. A pause
        // before a call lets it fall asleep first; a few are enough.
        for i in 0..50 {
            if server_stats(&mut conns[0]).since(&before).socket_ops > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            let c = &mut conns[1 + i % 129];
            let r = c.call(Message::new(OP_ECHO).with_body(b"asleep".to_vec()), Timeout::millis(10_000)).unwrap();
            assert_eq!(r.body(), b"asleep");
        }
        let d = server_stats(&mut conns[0]).since(&before);
        eprintln!("server over at least 390 blocking calls on 130 connections: {d:?}");
        assert!(d.socket_ops > 0, "no doorbell was read: {d:?}");
        let n = connections_held(&mut conns[0]);
        assert_eq!(n, 130);
        let mut last = conns.pop().unwrap();
        drop(conns);
        server.exit(&mut last);
    })
}

/// A pool of server threads serves many connections at once.
#[test]
fn thread_pool_serves_many_connections() {
    let _guard = shared();
    common::watchdog("thread_pool", LIMIT, || {
        let server = start_server("pool", "adaptive", 3);
        let to = &server.to;
        std::thread::scope(|s| {
            for t in 0u32..4 {
                s.spawn(move || {
                    let policy = [Policy::Adaptive, Policy::Block, Policy::Poll, Policy::Adaptive][t as usize];
                    let mut c = Connection::connect(to, opts(policy)).unwrap();
                    for i in 0u32..300 {
                        let body = [t.to_le_bytes(), i.to_le_bytes()].concat();
                        let r = c.call(Message::new(OP_ECHO).with_body(body.clone()), Timeout::Infinite).unwrap();
                        assert_eq!(r.body(), &body[..]);
                    }
                });
            }
        });
        let mut c = Connection::connect(to, opts(Policy::Block)).unwrap();
        server.exit(&mut c);
    })
}

/// One server thread in this process, many client threads; the server's
/// `reply_and_wait` interleaves them and a call with a right goes over the
/// socket transparently.
#[test]
fn in_process_server_interleaves_connections() {
    let _guard = shared();
    common::watchdog("in_process", LIMIT, || {
        let (port, to) = ferry::port().unwrap();
        let server = std::thread::spawn(move || {
            let mut srv = RpcServer::new(port).unwrap();
            srv.set_policy(Policy::Block);
            let mut reply = None;
            let mut served = 0u32;
            loop {
                match srv.reply_and_wait(reply.take(), Timeout::Infinite) {
                    Ok((conn, mut req)) => {
                        served += 1;
                        let mut out = Message::new(req.op()).with_body(req.body().to_vec());
                        for it in req.take_items() {
                            out = out.with_item(it);
                        }
                        reply = Some((conn, out));
                    }
                    Err(RpcError::NoClients) => return served,
                    Err(e) => panic!("server: {e}"),
                }
            }
        });
        std::thread::scope(|s| {
            for t in 0u8..3 {
                let to = &to;
                s.spawn(move || {
                    let mut c = Connection::connect(to, opts(Policy::Adaptive)).unwrap();
                    for i in 0u8..100 {
                        let r = c.call(Message::new(u32::from(t)).with_body([t, i]), Timeout::Infinite).unwrap();
                        assert_eq!((r.op(), r.body()), (u32::from(t), &[t, i][..]));
                    }
                    let (_rx, tx) = ferry::port().unwrap();
                    let mut r = c.call(Message::new(77).with_item(tx), Timeout::Infinite).unwrap();
                    assert_eq!(r.take_items().len(), 1);
                });
            }
        });
        drop(to);
        assert_eq!(server.join().unwrap(), 3 * 101);
    })
}

/// `call_reusing` leaves a fast-path request's buffer with the caller (the
/// same allocation, ready for the next request), up to the slot's whole
/// length, and takes a request that carries rights whole; every reply is the one
/// asked for, on both transports.
#[test]
fn call_reusing_keeps_the_buffer_only_where_the_request_was_only_read() {
    let _guard = shared();
    common::watchdog("call_reusing", LIMIT, || {
        let server = start_server("call_reusing", "block", 1);
        let mut c = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        let mut req = Message::new(OP_ECHO).with_body(vec![7u8; 100]);
        let at = req.body().as_ptr();
        for i in 0u8..20 {
            req.body_mut().clear();
            req.body_mut().extend_from_slice(&[i; 100]);
            let r = c.call_reusing(&mut req, Timeout::Infinite).unwrap();
            assert_eq!(r.body(), &[i; 100][..]);
            assert_eq!(req.body().as_ptr(), at, "the fast path kept the request's buffer");
        }
        // Rights take the socket path: the request is taken whole.
        let (mut rx, tx) = ferry::port().unwrap();
        let mut req = Message::new(OP_RIGHTS).with_item(tx);
        let r = c.call_reusing(&mut req, Timeout::Infinite).unwrap();
        assert_eq!(r.body(), b"right-returned");
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().body(), b"through-right");
        assert!(req.items().is_empty() && req.body().is_empty(), "a request with rights is taken");
        // A body of the most a call carries takes the slot: kept.
        let mut req = Message::new(OP_ECHO).with_body(vec![3u8; SLOT_INLINE]);
        let r = c.call_reusing(&mut req, Timeout::Infinite).unwrap();
        assert_eq!(r.body(), &vec![3u8; SLOT_INLINE][..]);
        assert_eq!(req.body().len(), SLOT_INLINE, "a request of the slot's whole length is kept");
        // A socket-only connection takes every request whole.
        let mut s = SocketConnection::connect(&server.to, opts(Policy::Block)).unwrap();
        let mut req = Message::new(OP_ECHO).with_body(*b"whole");
        assert_eq!(s.call_reusing(&mut req, Timeout::Infinite).unwrap().body(), b"whole");
        assert!(req.body().is_empty());
        drop(s);
        server.exit(&mut c);
    })
}

/// A reply too large for any path is reported to both sides: the server's
/// `reply_and_wait` fails with `TooLarge` (the peer counts them), the call
/// fails with `ReplyTooLarge` (not `PeerDead`: the server is alive), and the
/// same connection goes on working, over the slot and over the socket.
#[test]
fn oversized_reply_is_reported_to_both_sides() {
    let _guard = shared();
    common::watchdog("oversized_reply", LIMIT, || {
        let server = start_server("oversized-reply", "adaptive", 1);
        let failed = |c: &mut dyn Transport| {
            let r = c.call(Message::new(OP_FAILED), Timeout::Infinite).unwrap();
            u64::from_le_bytes(r.body().try_into().unwrap())
        };
        let too_big = (ferry::message::MAX_INLINE as u32) + 1;
        let fits = ferry::message::MAX_INLINE as u32;
        let mut slot = Connection::connect(&server.to, opts(Policy::Adaptive)).unwrap();
        let mut sock = SocketConnection::connect(&server.to, opts(Policy::Block)).unwrap();
        for (n, c) in [&mut slot as &mut dyn Transport, &mut sock].into_iter().enumerate() {
            match c.call(Message::new(OP_BIG).with_body(too_big.to_le_bytes()), Timeout::Infinite) {
                Err(RpcError::ReplyTooLarge) => {}
                other => panic!("expected ReplyTooLarge, got {other:?}"),
            }
            assert_eq!(failed(c), n as u64 + 1, "the server was not told");
            let r = c.call(Message::new(OP_BIG).with_body(fits.to_le_bytes()), Timeout::Infinite).unwrap();
            assert_eq!(r.body().len(), fits as usize);
            assert_eq!(c.call(Message::new(OP_ECHO).with_body(*b"fine"), Timeout::Infinite).unwrap().body(), b"fine");
        }
        assert!(slot.is_open());
        server.exit(&mut slot);
    })
}

/// Connections of every kind, opened, used (slot, socket, rights, timeouts,
/// garbage) and closed, leave no descriptor and no slot mapping behind in
/// either process.
#[test]
fn no_descriptor_or_mapping_leaks() {
    let _guard = shared();
    common::watchdog("no_leaks", LIMIT, || {
        let server = start_server("leaks", "adaptive", 1);
        let mut mine = Connection::connect(&server.to, opts(Policy::Block)).unwrap();
        let server_fds = |c: &mut Connection| u64s(c.call(Message::new(OP_FDS), Timeout::Infinite).unwrap().body());
        let before = server_fds(&mut mine);
        let out = common::finish(common::spawn_peer(&bootstrap(), "rpc-fds", &["leaks"]));
        eprintln!("client: {}", out.trim());
        while connections_held(&mut mine) != 1 {
            common::nap();
        }
        let after = server_fds(&mut mine);
        assert_eq!(before, after, "server descriptors and slot mappings (before, after)");
        server.exit(&mut mine);
    })
}

/// A server thread asleep on the request word of its one idle connection
/// is woken by its watcher for descriptor events: a new connection, a
/// hang-up, the port's last sender leaving. Connections made and dropped
/// one after another, while a first one stays idle, meet the server just
/// as it goes back to sleep; the first call on each must be answered, and
/// the server must notice when everyone has gone. (The race this is
/// about, a wake-up given after the thread's last check and before its
/// sleep, is made to happen deterministically by the unit test
/// `rpc::watch::tests::a_wake_lost_before_the_sleep_is_given_again`; this
/// runs the whole path many times.)
#[test]
fn a_server_going_to_sleep_never_misses_a_descriptor_event() {
    let _g = shared();
    const ROUNDS: usize = 3000;
    let (port, to_port) = ferry::port().expect("port");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut server = RpcServer::new(port).expect("server");
        server.set_policy(Policy::Block);
        let mut reply = None;
        let out = loop {
            match server.reply_and_wait(reply.take(), Timeout::Infinite) {
                Ok((conn, req)) => reply = Some((conn, Message::new(req.op()))),
                Err(RpcError::NoClients) => break Ok(()),
                Err(e) => break Err(e.to_string()),
            }
        };
        let _ = done_tx.send(out);
    });
    let call_limit = Timeout::After(Duration::from_secs(20));
    let mut idle = Connection::connect(&to_port, opts(Policy::Block)).expect("connect");
    idle.call(Message::new(OP_ECHO), call_limit).expect("first call");
    for round in 0..ROUNDS {
        let mut c = Connection::connect(&to_port, opts(Policy::Block)).expect("connect");
        match c.call(Message::new(OP_ECHO), call_limit) {
            Ok(r) => assert_eq!(r.op(), OP_ECHO),
            Err(e) => panic!("round {round}: the call on a new connection failed: {e} (the server slept through its arrival)"),
        }
    }
    drop(idle);
    drop(to_port);
    match done_rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("the server failed: {e}"),
        Err(_) => panic!("the server did not notice within 20 s that every client had gone"),
    }
}
