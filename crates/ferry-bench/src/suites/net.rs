//! The `net` suite: ports across machines, two network servers over
//! loopback, against raw QUIC (`quinn`, the same TLS 1.3 setup) and raw
//! TCP. Everything runs in this process on threads (the nodes, their tokio
//! runtimes, the receivers and echo servers), grouped into two hosts: side
//! 0 serves, side 1 holds the timing thread. The placement places hosts,
//! not processes: same-core puts both hosts on one CPU, cross-core gives
//! each host a CPU of its own (what crosses between hosts then crosses
//! between CPUs, and a host's local hops do not), unpinned leaves every
//! thread free. Every impl, raw QUIC included, runs a tokio runtime per
//! host.
//!
//! - `null-roundtrip`: a message with no payload there and back
//!   (`ferry-net`, `quic-raw`, `tcp-raw`). Target: `ferry-net` within 1.3×
//!   of `quic-raw`.
//! - `oneshot` (256 MiB, touch `read`): one region crosses and the receiver
//!   reads all of it, then acknowledges (`ferry-net`: the region crosses by
//!   reference and the receiver asks for all of it at once, `fetch_all`;
//!   `quic-raw`: the bytes on a fresh stream; `tcp-raw`: on a connection).
//!   Target: within 1.25× of `quic-raw`.
//! - `stream` (messages of 8 KiB and of 60 KiB, `bytes` each): one port
//!   fed a sequence of messages with inline bodies, the sender writing
//!   each as soon as the link takes it, the receiver acknowledging every
//!   64th; reported per message (`ferry-net`: through both nodes, paced by
//!   the stream's credit; `quic-raw` and `tcp-raw`: the same bytes as
//!   length-prefixed frames on one stream or connection, paced by the
//!   transport's flow control). No target: it shows what a port's credit
//!   costs against the transport's own.
//! - `cor` (a 1 GiB region; `bytes` is the part the receiver reads, 0.1%,
//!   1%, 10% or 100% of it, and `extra.touched` that fraction, so each
//!   fraction is its own comparable group): `ferry-net-cor` maps the
//!   region and touches its first `bytes`, so only those pages (and their
//!   cluster's read-ahead) cross; `ferry-net-eager` moves the whole region
//!   first (`fetch_all`, one streamed transfer, which is what an eager
//!   send costs) and then touches the same bytes. `extra.wire_bytes` is the
//!   UDP bytes that crossed the link per operation, both ways. Target: at
//!   1%, under 2% of the region's bytes and at least 20× sooner than eager.
//!
//! - `quic-relay` (`null-roundtrip` only): the floor of a design in which
//!   a network server on each host holds the link: raw QUIC between two
//!   relay tasks, each a Unix datagram socket away from its program, so
//!   the four local hops of `ferry-net` with none of ferry's work.
//! - `quic-relay-port` (`null-roundtrip` only): the same relay with ferry
//!   ports for its local hops, so with what the kernel does for every
//!   port message (the sender's credentials, `recvmsg` with room for
//!   rights) and ferry's message code, but none of the network server's
//!   work (no rights translation, no link state, no budgets).
//!
//! The `-veth` impls (`ferry-net-veth`, `quic-raw-veth`, `tcp-raw-veth`,
//! `quic-relay-veth`, `quic-relay-port-veth`; `null-roundtrip`, and
//! `oneshot` but for the relays)
//! run the same code with the serving and the connecting side in two
//! network namespaces joined by a veth pair, made for each round
//! (`ip netns`) and removed after it; they need root and are recorded as
//! skipped otherwise. `ferry bench net` as root runs both
//! links in the same invocation, interleaved.
//!
//! The `-far` impls (`ferry-net-far`, `quic-raw-far`; `null-roundtrip` and
//! `stream`) run over a link of long round trips: a UDP relay on loopback
//! between the two sides sends each way at `FAR_RATE` from a queue of
//! `FAR_QUEUE` bytes and holds every datagram `FAR_DELAY` (the kernel
//! here has no `netem`). What they show is whether a port's credit
//! or QUIC's own flow control paces a stream once the link's round trip,
//! not the machine, is the cost; raw QUIC there gets the nodes' stream and
//! send windows, so both may keep as much in flight.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::{Message, Timeout};
use ferry_net::{Identity, Node, NodeConfig, Peer};

use crate::harness::{Case, Impl, Run, Skip, Suite};
use crate::record::Touch;

/// The suite.
pub fn suite() -> Suite {
    Suite {
        name: "net",
        about: "two network servers over loopback vs raw QUIC and TCP: null round trip, a 256 MiB region, copy-on-reference sweep of a 1 GiB region",
        reference: "quic-raw",
        cases,
        impls,
    }
}

/// The region of the `cor` case.
const COR_REGION: u64 = 1 << 30;
/// The region of the `oneshot` case.
const ONESHOT: u64 = 256 << 20;

/// `null-roundtrip`, `oneshot`, `stream`, and the `cor` sweep.
pub fn cases() -> Vec<Case> {
    let mut v = vec![
        Case { suite: "net", name: "null-roundtrip", bytes: 0, touch: Touch::None },
        Case { suite: "net", name: "oneshot", bytes: ONESHOT, touch: Touch::Read },
        Case { suite: "net", name: "stream", bytes: 8 << 10, touch: Touch::None },
        Case { suite: "net", name: "stream", bytes: 60 << 10, touch: Touch::None },
    ];
    for per_mille in [1, 10, 100, 1000] {
        v.push(Case { suite: "net", name: "cor", bytes: COR_REGION * per_mille / 1000, touch: Touch::Read });
    }
    v
}

/// ferry-net and the baselines.
pub fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "ferry-net", run: |run| placed(run, ferry_net) },
        Impl { name: "quic-raw", run: |run| placed(run, quic_raw) },
        Impl { name: "tcp-raw", run: |run| placed(run, tcp_raw) },
        Impl { name: "ferry-net-cor", run: |run| placed(run, ferry_net_cor) },
        Impl { name: "ferry-net-eager", run: |run| placed(run, ferry_net_eager) },
        Impl { name: "ferry-net-veth", run: |run| placed(run, |run| over_veth(run, ferry_net)) },
        Impl { name: "quic-raw-veth", run: |run| placed(run, |run| over_veth(run, quic_raw)) },
        Impl { name: "tcp-raw-veth", run: |run| placed(run, |run| over_veth(run, tcp_raw)) },
        Impl { name: "quic-relay", run: |run| placed(run, quic_relay) },
        Impl { name: "quic-relay-veth", run: |run| placed(run, |run| over_veth(run, quic_relay)) },
        Impl { name: "quic-relay-port", run: |run| placed(run, quic_relay_port) },
        Impl { name: "quic-relay-port-veth", run: |run| placed(run, |run| over_veth(run, quic_relay_port)) },
        Impl { name: "ferry-net-far", run: |run| placed(run, |run| over_far(run, ferry_net)) },
        Impl { name: "quic-raw-far", run: |run| placed(run, |run| over_far(run, quic_raw)) },
    ]
}

thread_local! {
    /// The CPU of each side's host (0 serves, 1 connects and times) for the
    /// impl now running on this thread; `None` when unpinned.
    static HOSTS: std::cell::Cell<Option<[usize; 2]>> = const { std::cell::Cell::new(None) };
}

/// Runs one round of an impl with each side's host on the CPU the
/// placement gives it: the timing thread's CPU for side 1 (the host of the
/// timing program), the other side's CPU for side 0. Same-core puts both
/// hosts on one CPU; cross-core gives each host a CPU of its own, so what
/// crosses between hosts crosses between CPUs and a host's local hops do
/// not; unpinned leaves every thread free.
fn placed(run: &mut Run<'_>, f: fn(&mut Run<'_>) -> Result<(), Skip>) -> Result<(), Skip> {
    let hosts = run.own_cpu().zip(run.peer_cpu()).map(|(mine, other)| [other, mine]);
    run.note(
        "hosts",
        match hosts {
            None => "unpinned: every thread of both hosts free to run on any CPU".to_owned(),
            Some([a, b]) if a == b => format!("both hosts' threads on CPU {a}"),
            Some([a, b]) => format!("serving host's threads on CPU {a}, timing host's on CPU {b}"),
        },
    );
    HOSTS.with(|h| h.set(hosts));
    let r = f(run);
    HOSTS.with(|h| h.set(None));
    r
}

/// Two network namespaces joined by a veth pair, made for one round of a
/// `-veth` impl and removed after it.
struct Veth {
    names: [String; 2],
    ns: [std::fs::File; 2],
    addr: [std::net::IpAddr; 2],
}

fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Veth {
    fn make() -> Result<Veth, Skip> {
        if !rustix::process::geteuid().is_root() {
            return Err(Skip::new("the veth variant needs root (it makes two network namespaces)"));
        }
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let (pid, k) = (std::process::id(), NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let names = [format!("fba{pid}x{k}"), format!("fbb{pid}x{k}")];
        let veth = [format!("vba{pid}x{k}"), format!("vbb{pid}x{k}")];
        let net = (pid + k) % 250 + 1;
        let addr = [format!("10.78.{net}.1"), format!("10.78.{net}.2")];
        let made = ip(&["netns", "add", &names[0]]) && ip(&["netns", "add", &names[1]]);
        let cleanup = |names: &[String; 2]| names.iter().for_each(|n| {
            ip(&["netns", "del", n]);
        });
        let ok = made
            && ip(&["link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1]])
            && (0..2).all(|i| {
                ip(&["link", "set", &veth[i], "netns", &names[i]])
                    && ip(&["-n", &names[i], "addr", "add", &format!("{}/24", addr[i]), "dev", &veth[i]])
                    && ip(&["-n", &names[i], "link", "set", &veth[i], "up"])
            });
        if !ok {
            cleanup(&names);
            return Err(Skip::new("could not make two network namespaces and a veth pair (`ip netns`)"));
        }
        let open = |n: &str| std::fs::File::open(format!("/run/netns/{n}"));
        match (open(&names[0]), open(&names[1]), addr[0].parse(), addr[1].parse()) {
            (Ok(a), Ok(b), Ok(x), Ok(y)) => Ok(Veth { names, ns: [a, b], addr: [x, y] }),
            _ => {
                cleanup(&names);
                Err(Skip::new("could not open the namespaces just made"))
            }
        }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for n in &self.names {
            ip(&["netns", "del", n]);
        }
    }
}

thread_local! {
    /// The namespaces of the `-veth` impl now running on this thread.
    static VETH: std::cell::RefCell<Option<Veth>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` for one round with side 0 and side 1 in two namespaces joined
/// by a veth pair instead of both on loopback.
fn over_veth(run: &mut Run<'_>, f: fn(&mut Run<'_>) -> Result<(), Skip>) -> Result<(), Skip> {
    only(run, &["null-roundtrip", "oneshot"])?;
    run.note("link", "veth between two network namespaces");
    let veth = Veth::make()?;
    VETH.with(|v| *v.borrow_mut() = Some(veth));
    let r = f(run);
    VETH.with(|v| v.borrow_mut().take());
    r
}

/// How long the relay of a `-far` impl holds each datagram, each way.
const FAR_DELAY: Duration = Duration::from_millis(25);

/// The rate of the relay's link each way, bytes a second (400 Mbit/s):
/// with [`FAR_DELAY`], 2.5 MB in flight fill it.
const FAR_RATE: u64 = 50_000_000;

/// Bytes the relay's link queues each way before it drops (a router's
/// buffer): twice what is in flight when the link is full.
const FAR_QUEUE: u64 = 5_000_000;

thread_local! {
    /// The relays of the `-far` impl now running on this thread; `None`
    /// when the sides reach each other directly.
    static FAR: std::cell::RefCell<Option<Vec<Relay>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` for one round with every link between the sides through a
/// relay that holds each datagram [`FAR_DELAY`] each way.
fn over_far(run: &mut Run<'_>, f: fn(&mut Run<'_>) -> Result<(), Skip>) -> Result<(), Skip> {
    only(run, &["null-roundtrip", "stream"])?;
    run.note(
        "link",
        format!(
            "UDP relay on loopback: {} ms each way, {} Mbit/s, {} MB queue",
            FAR_DELAY.as_millis(),
            FAR_RATE * 8 / 1_000_000,
            FAR_QUEUE / 1_000_000
        ),
    );
    FAR.with(|r| *r.borrow_mut() = Some(Vec::new()));
    let out = f(run);
    // Dropping the relays stops them.
    FAR.with(|r| r.borrow_mut().take());
    out
}

/// Where side 1 sends to reach side 0's `server`: `server` itself, or,
/// while a `-far` impl runs, a new relay to it (kept for the round).
fn reach(server: SocketAddr) -> Result<SocketAddr, Skip> {
    FAR.with(|r| match r.borrow_mut().as_mut() {
        None => Ok(server),
        Some(relays) => {
            let relay = Relay::start(server)?;
            let addr = relay.addr;
            relays.push(relay);
            Ok(addr)
        }
    })
}

/// A UDP relay on loopback between the first client heard from and one
/// server, standing in for a link of long round trips: each way sends at
/// [`FAR_RATE`] from a queue of at most [`FAR_QUEUE`] bytes (a datagram
/// that finds it full is lost), and each datagram arrives [`FAR_DELAY`]
/// after it left. Its socket's receive buffer is large (forced, as root), so
/// only the link's queue drops; it stops when dropped, and after ten
/// minutes in any case.
struct Relay {
    addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(server: SocketAddr) -> Result<Relay, Skip> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let sock = std::net::UdpSocket::bind(loopback()).map_err(skip)?;
        let room = 64 << 20;
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&sock, room).is_err() {
            rustix::net::sockopt::set_socket_recv_buffer_size(&sock, room).map_err(skip)?;
        }
        let addr = sock.local_addr().map_err(skip)?;
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        sock.set_nonblocking(true).map_err(skip)?;
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(600);
            let mut client: Option<SocketAddr> = None;
            let mut buf = vec![0u8; 65536];
            // Each way's datagrams, due in arrival order.
            let mut held: [std::collections::VecDeque<(Instant, SocketAddr, Vec<u8>)>; 2] = Default::default();
            // When each way (to the client, to the server) has sent all it
            // holds at the link's rate.
            let mut free = [Instant::now(); 2];
            while !halt.load(Ordering::Relaxed) && Instant::now() < end {
                let now = Instant::now();
                for way in &mut held {
                    while way.front().is_some_and(|h| h.0 <= now) {
                        let (_, to, bytes) = way.pop_front().expect("checked above");
                        let _ = sock.send_to(&bytes, to);
                    }
                }
                // Waits in poll(2), whose timer is precise, until the next
                // datagram is due or one arrives (a socket's own receive
                // timer would round up to a clock tick).
                let next = held.iter().filter_map(|w| w.front().map(|h| h.0)).min();
                let wait = next.map_or(Duration::from_millis(50), |t| t.saturating_duration_since(now));
                let wait = rustix::time::Timespec { tv_sec: 0, tv_nsec: wait.min(Duration::from_millis(50)).as_nanos() as _ };
                let mut fds = [rustix::event::PollFd::new(&sock, rustix::event::PollFlags::IN)];
                if !matches!(rustix::event::poll(&mut fds, Some(&wait)), Ok(n) if n > 0) {
                    continue;
                }
                while let Ok((len, from)) = sock.recv_from(&mut buf) {
                    let way = usize::from(from == server);
                    let to = if from == server {
                        match client {
                            Some(c) => c,
                            None => continue,
                        }
                    } else {
                        client = Some(from);
                        server
                    };
                    // The link's queue: full, the datagram is lost, as at a
                    // router; else it leaves once the ones before it have.
                    let now = Instant::now();
                    let queued = FAR_RATE as f64 * free[way].saturating_duration_since(now).as_secs_f64();
                    if queued > FAR_QUEUE as f64 {
                        continue;
                    }
                    free[way] = free[way].max(now) + Duration::from_secs_f64(len as f64 / FAR_RATE as f64);
                    held[way].push_back((free[way] + FAR_DELAY, to, buf[..len].to_vec()));
                }
            }
        });
        Ok(Relay { addr, stop, thread: Some(thread) })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The address side `side` (0 serves, 1 connects) binds: loopback, or its
/// namespace's veth address.
fn addr(side: usize) -> SocketAddr {
    VETH.with(|v| v.borrow().as_ref().map_or_else(loopback, |v| SocketAddr::new(v.addr[side], 0)))
}

/// Runs `f`, which makes side `side`'s sockets or starts its threads, as
/// that side's host: on its CPU (threads started inherit it; see
/// [`placed`]) and, when a `-veth` impl runs, inside its network namespace.
/// The calling thread moves there and back.
fn on<T>(side: usize, f: impl FnOnce() -> T) -> Result<T, Skip> {
    let cpu = HOSTS.with(|h| h.get()).map(|h| h[side]);
    let home_cpus = match cpu {
        Some(c) => {
            let home = rustix::thread::sched_getaffinity(None).map_err(skip)?;
            crate::pin::pin_to(c).map_err(skip)?;
            Some(home)
        }
        None => None,
    };
    let out = VETH.with(|v| {
        let v = v.borrow();
        let Some(v) = v.as_ref() else { return Ok(f()) };
        let home = std::fs::File::open("/proc/thread-self/ns/net").map_err(skip)?;
        let net = Some(rustix::thread::LinkNameSpaceType::Network);
        rustix::thread::move_into_link_name_space(std::os::fd::AsFd::as_fd(&v.ns[side]), net).map_err(skip)?;
        let out = f();
        rustix::thread::move_into_link_name_space(std::os::fd::AsFd::as_fd(&home), net).map_err(skip)?;
        Ok(out)
    });
    if let Some(home) = home_cpus {
        rustix::thread::sched_setaffinity(None, &home).map_err(skip)?;
    }
    out
}

fn only(run: &Run<'_>, cases: &[&str]) -> Result<(), Skip> {
    if cases.contains(&run.case.name) {
        Ok(())
    } else {
        Err(Skip::new(format!("runs only the {} case", cases.join(" and "))))
    }
}

fn ferry_net(run: &mut Run<'_>) -> Result<(), Skip> {
    only(run, &["null-roundtrip", "oneshot", "stream"])?;
    match run.case.name {
        "null-roundtrip" => ferry_net_roundtrip(run),
        "stream" => ferry_net_stream(run),
        _ => ferry_net_region(run, Fetch::Whole, ONESHOT),
    }
}

fn quic_raw(run: &mut Run<'_>) -> Result<(), Skip> {
    only(run, &["null-roundtrip", "oneshot", "stream"])?;
    match run.case.name {
        "null-roundtrip" => quic_raw_roundtrip(run),
        "stream" => quic_raw_stream(run),
        _ => quic_raw_oneshot(run),
    }
}

fn tcp_raw(run: &mut Run<'_>) -> Result<(), Skip> {
    only(run, &["null-roundtrip", "oneshot", "stream"])?;
    match run.case.name {
        "null-roundtrip" => tcp_raw_roundtrip(run),
        "stream" => tcp_raw_stream(run),
        _ => tcp_raw_oneshot(run),
    }
}

/// Messages of the `stream` case per acknowledgement; the sender keeps at
/// most two batches unacknowledged.
const STREAM_BATCH: u64 = 64;

/// The sender's side of a `stream` case: `send` writes one message,
/// `acked` waits for the next acknowledgement; each batch's time since the
/// last is recorded per message. Over a `-far` link the sender may be
/// [`FAR_BATCHES`] batches ahead, and streams for [`FAR_WARM`] before the
/// round's clock starts, so that the congestion window and the port's
/// credit have grown: what is measured is a stream that flows, not the
/// link's slow start.
fn stream_sender(
    run: &mut Run<'_>,
    mut send: impl FnMut() -> Result<(), Skip>,
    mut acked: impl FnMut() -> Result<(), Skip>,
) -> Result<(), Skip> {
    let far = FAR.with(|r| r.borrow().is_some());
    let ahead = if far { FAR_BATCHES } else { 2 };
    run.note("batch", STREAM_BATCH);
    run.note("batches_ahead", ahead);
    let (mut sent, mut acks) = (0u64, 0u64);
    let mut step = |sent: &mut u64, acks: &mut u64| -> Result<bool, Skip> {
        let waited = *sent - *acks * STREAM_BATCH >= ahead * STREAM_BATCH;
        if waited {
            acked()?;
            *acks += 1;
        }
        send()?;
        *sent += 1;
        Ok(waited)
    };
    if far {
        // Short runs (`--quick`, `--smoke`) warm for as long as they measure.
        let warm = Instant::now() + FAR_WARM.min(run.budget().round_time * 4);
        while Instant::now() < warm {
            step(&mut sent, &mut acks)?;
        }
    }
    let mut last = Instant::now();
    while run.more() {
        if step(&mut sent, &mut acks)? {
            let now = Instant::now();
            run.record_batch(now - last, STREAM_BATCH);
            last = now;
        }
    }
    Ok(())
}

/// Batches of a `stream` case a sender may be ahead of the
/// acknowledgements over a `-far` link: more than the link holds in
/// flight, at either size.
const FAR_BATCHES: u64 = 16;

/// How long a `stream` case streams over a `-far` link before each round
/// (at most four rounds' time).
const FAR_WARM: Duration = Duration::from_secs(1);

/// A receiving program on host `a`, whose port `sink` host `b` looks up:
/// the first message brings a send right back to the timing program, and
/// `each` is then given every message with that right until it says to
/// stop (false) or the program is stopped.
struct Receiver {
    a: Node,
    b: Node,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Receiver {
    fn start(mut each: impl FnMut(&ferry::SendRight, Message) -> bool + Send + 'static) -> Result<Receiver, Skip> {
        let (mut rx, to_rx) = ferry::port().map_err(skip)?;
        let (a, b) = linked_nodes("sink", to_rx)?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = on(0, || {
            std::thread::spawn(move || {
                let Ok(mut first) = rx.recv(WAIT) else { return };
                let Some(ferry::Item::Send(back)) = first.take_items().pop() else { return };
                serve_until(&s2, &mut rx, |m| each(&back, m));
            })
        })?;
        Ok(Receiver { a, b, stop, thread })
    }

    /// Stops the program and both nodes.
    fn end(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.thread.join();
        drop((self.a, self.b));
    }
}

fn ferry_net_stream(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.case.bytes as usize;
    let mut got = 0u64;
    let r = Receiver::start(move |back, m| {
        got += u64::from(m.body().len() == n);
        !got.is_multiple_of(STREAM_BATCH) || back.send(Message::new(1), WAIT).is_ok()
    })?;
    let remote = r.b.lookup("sink@a").map_err(skip)?;
    let (mut acks, to_acks) = ferry::port().map_err(skip)?;
    remote.send(Message::new(0).with_item(to_acks), WAIT)?;
    let body = vec![7u8; n];
    let out = stream_sender(run, || Ok(remote.send(Message::new(2).with_body(body.clone()), WAIT)?), || Ok(acks.recv(WAIT).map(drop)?));
    drop(remote);
    r.end();
    out
}

fn quic_raw_stream(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.case.bytes as usize;
    let q = RawQuic::start(move |conn| async move {
        let Ok((mut send, mut recv)) = conn.accept_bi().await else { return };
        let mut buf = vec![0u8; n];
        let mut len = [0u8; 4];
        let mut got = 0u64;
        while recv.read_exact(&mut len).await.is_ok() && recv.read_exact(&mut buf[..(u32::from_le_bytes(len) as usize).min(n)]).await.is_ok() {
            got += 1;
            if got.is_multiple_of(STREAM_BATCH) && send.write_all(&[1]).await.is_err() {
                return;
            }
        }
    })?;
    let (mut send, mut recv) = q.rt_client.block_on(q.conn.open_bi()).map_err(skip)?;
    let mut frame = (n as u32).to_le_bytes().to_vec();
    frame.resize(4 + n, 7);
    let send = std::cell::RefCell::new(&mut send);
    let out = stream_sender(
        run,
        || q.rt_client.block_on(send.borrow_mut().write_all(&frame)).map_err(skip),
        || q.rt_client.block_on(recv.read_exact(&mut [0u8; 1])).map_err(skip),
    );
    q.end();
    out
}

fn tcp_raw_stream(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.case.bytes as usize;
    let mut got = 0u64;
    let (c, sink) = tcp_sink(4 + n, true, move |_| {
        got += 1;
        got.is_multiple_of(STREAM_BATCH)
    })?;
    let mut frame = (n as u32).to_le_bytes().to_vec();
    frame.resize(4 + n, 7);
    let c = std::cell::RefCell::new(c);
    let out = stream_sender(run, || c.borrow_mut().write_all(&frame).map_err(skip), || c.borrow_mut().read_exact(&mut [0u8; 1]).map_err(skip));
    drop(c);
    let _ = sink.join();
    out
}

fn ferry_net_cor(run: &mut Run<'_>) -> Result<(), Skip> {
    only(run, &["cor"])?;
    ferry_net_region(run, Fetch::OnTouch, COR_REGION)
}

fn ferry_net_eager(run: &mut Run<'_>) -> Result<(), Skip> {
    only(run, &["cor"])?;
    ferry_net_region(run, Fetch::Whole, COR_REGION)
}

/// How the receiver gets a region's bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fetch {
    /// Maps it: pages cross as they are touched.
    OnTouch,
    /// Fetches all of it first (`fetch_all`).
    Whole,
}

/// Reads one byte of every 64-byte line of `b` (the `read` touch).
fn touch_read(b: &[u8]) -> u64 {
    let mut sum = 0u64;
    for i in (0..b.len()).step_by(64) {
        sum = sum.wrapping_add(u64::from(b[i]));
    }
    std::hint::black_box(sum)
}

/// The receiver's untimed message after a region's teardown (its
/// acknowledgement is op 0).
const READY: u32 = 2;

/// Two nodes over loopback, `b` linked to `a`; `a` exports `name`.
fn linked_nodes(name: &str, to: ferry::SendRight) -> Result<(Node, Node), Skip> {
    let ia = Identity::generate("a").map_err(skip)?;
    let ib = Identity::generate("b").map_err(skip)?;
    let a = on(0, || Node::start(NodeConfig::new(ia.clone(), vec![Peer { name: "b".into(), cert: ib.cert.clone() }], addr(0))))?.map_err(skip)?;
    let b = on(1, || Node::start(NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], addr(1))))?.map_err(skip)?;
    b.connect("a", reach(a.local_addr().map_err(skip)?)?).map_err(skip)?;
    a.export(name, to);
    Ok((a, b))
}

/// UDP bytes both ways on `node`'s links.
fn wire_bytes(node: &Node) -> u64 {
    node.links().iter().map(|l| l.wire_sent + l.wire_received).sum()
}

/// One region of `region` bytes crosses from host `b` to a receiver on host
/// `a` per operation; the receiver reads the case's `bytes` of it and
/// acknowledges.
fn ferry_net_region(run: &mut Run<'_>, how: Fetch, region: u64) -> Result<(), Skip> {
    let touched = run.case.bytes.min(region) as usize;
    run.note("region_bytes", region);
    run.note("touched", touched as f64 / region as f64);
    run.note("fetch", if how == Fetch::Whole { "whole (fetch_all)" } else { "on touch (mapped)" });
    // The receiving program: the first message brings the ack right.
    let receiver = Receiver::start(move |ack, mut m| {
        let Some(ferry::Item::Send(right)) = m.take_items().pop() else { return false };
        let Ok(r) = ferry_net::RemoteRegion::open(right) else { return false };
        // As in the transfer suite: touch, acknowledge (the end of
        // the timed operation), and only then let the region go,
        // then say ready, untimed. Unmapping and freeing 256 MiB of
        // fresh pages takes tens of milliseconds, which the raw
        // receivers, reading into one buffer they keep, never pay;
        // the "ready" keeps that teardown out of the next transfer.
        let mut on_touch = None;
        let mut whole = None;
        let ok = match how {
            Fetch::OnTouch => r.map().ok().is_some_and(|v| {
                let read = v.as_slice().map(|s| touch_read(&s[..touched])).is_some();
                on_touch = Some(v);
                read
            }),
            Fetch::Whole => r.fetch_all().ok().and_then(|w| w.map(ferry::MapOptions::lazy().read_only()).ok()).is_some_and(|v| {
                touch_read(&v[..touched]);
                whole = Some(v);
                true
            }),
        };
        if !ok || ack.send(Message::new(0), WAIT).is_err() {
            return false;
        }
        drop((on_touch, whole, r));
        ack.send(Message::new(READY), WAIT).is_ok()
    })?;
    let a = &receiver.a;
    let sink = receiver.b.lookup("sink@a").map_err(skip)?;
    let (mut me, my_tx) = ferry::port().map_err(skip)?;
    sink.send(Message::new(0).with_item(my_tx), WAIT)?;
    let mut data = ferry::Region::new(region as usize).map_err(skip)?;
    for (i, c) in data.as_mut_slice().chunks_mut(4096).enumerate() {
        c.fill(i as u8);
    }
    let long = Timeout::After(Duration::from_secs(120));
    let (wire0, fetched0) = (wire_bytes(a), a.stats().bytes_fetched);
    let mut ops = 0u64;
    while run.more() {
        let item = data.by_copy().map_err(skip)?;
        let t = Instant::now();
        sink.send(Message::new(1).with_item(item), long)?;
        if me.recv(long)?.op() != 0 {
            return Err(Skip::new("failed: the receiver said ready before it acknowledged"));
        }
        run.record(t.elapsed());
        ops += 1;
        if me.recv(long)?.op() != READY {
            return Err(Skip::new("failed: the receiver acknowledged twice"));
        }
    }
    if let Some(w) = (wire_bytes(a) - wire0).checked_div(ops) {
        run.note("wire_bytes", w);
        run.note("fetched_bytes", (a.stats().bytes_fetched - fetched0) / ops);
    }
    drop(sink);
    receiver.end();
    Ok(())
}

/// 256 MiB on a fresh QUIC stream per operation; the receiver reads it all
/// into its buffer, touches it and answers one byte on the same stream.
fn quic_raw_oneshot(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.case.bytes as usize;
    let q = RawQuic::start(move |conn| async move {
        let mut buf = vec![0u8; n];
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            if recv.read_exact(&mut buf).await.is_err() {
                return;
            }
            touch_read(&buf);
            if send.write_all(&[1]).await.is_err() {
                return;
            }
            let _ = send.finish();
        }
    })?;
    let data = vec![7u8; n];
    while run.more() {
        let t = Instant::now();
        q.rt_client.block_on(async {
            let (mut send, mut recv) = q.conn.open_bi().await.map_err(skip)?;
            send.write_all(&data).await.map_err(skip)?;
            let _ = send.finish();
            let mut b = [0u8; 1];
            recv.read_exact(&mut b).await.map_err(skip)
        })?;
        run.record(t.elapsed());
    }
    q.end();
    Ok(())
}

/// Two hosts' tokio runtimes with a raw QUIC connection between them (the
/// nodes' TLS setup), as the `quic-raw` impls use: `serve` runs on host 0
/// with the connection it accepted; `rt_client` and `conn` are host 1's,
/// for the timing thread. A runtime per host, as two machines have (and as
/// the nodes and the relays have): one runtime driving both endpoints
/// would carry a packet from client to server without waking any thread,
/// which no two hosts can do.
struct RawQuic {
    rt: tokio::runtime::Runtime,
    rt_client: tokio::runtime::Runtime,
    server: quinn::Endpoint,
    conn: quinn::Connection,
    _client_ep: quinn::Endpoint,
}

impl RawQuic {
    fn start<F>(serve: impl FnOnce(quinn::Connection) -> F + Send + 'static) -> Result<RawQuic, Skip>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (rt, rt_client) = (host_runtime(0)?, host_runtime(1)?);
        let (server, connect) = quic_pair(&rt)?;
        let srv = server.clone();
        rt.spawn(async move {
            let Some(inc) = srv.accept().await else { return };
            let Ok(conn) = inc.await else { return };
            serve(conn).await;
        });
        let (conn, _client_ep) = connect(&rt_client)?;
        Ok(RawQuic { rt, rt_client, server, conn, _client_ep })
    }

    /// Closes the connection and both runtimes.
    fn end(self) {
        self.conn.close(0u32.into(), b"done");
        self.server.close(0u32.into(), b"done");
        self.rt_client.shutdown_timeout(Duration::from_secs(1));
        self.rt.shutdown_timeout(Duration::from_secs(1));
    }
}

/// How to connect a client to a [`quic_pair`] server.
type Connect = Box<dyn FnOnce(&tokio::runtime::Runtime) -> Result<(quinn::Connection, quinn::Endpoint), Skip>>;

/// A QUIC server endpoint with the nodes' TLS setup, and how to connect a
/// client to it (once the server accepts: the handshake waits for that).
fn quic_pair(rt: &tokio::runtime::Runtime) -> Result<(quinn::Endpoint, Connect), Skip> {
    let ia = Identity::generate("a").map_err(skip)?;
    let ib = Identity::generate("b").map_err(skip)?;
    let mut server_cfg = ferry_net::tls::quic_server_config(&ia, vec![Peer { name: "b".into(), cert: ib.cert.clone() }]).map_err(skip)?;
    let mut client_cfg = ferry_net::tls::quic_client_config(&ib, &Peer { name: "a".into(), cert: ia.cert.clone() }).map_err(skip)?;
    if FAR.with(|r| r.borrow().is_some()) {
        // Over a far link, the nodes' windows: as much in flight as a
        // node lets one port's stream have.
        let mut t = quinn::TransportConfig::default();
        t.stream_receive_window(quinn::VarInt::from_u64(ferry_net::node::STREAM_WINDOW as u64).map_err(skip)?);
        t.send_window(ferry_net::node::SEND_WINDOW);
        let t = Arc::new(t);
        server_cfg.transport_config(t.clone());
        client_cfg.transport_config(t);
    }
    let server = on(0, || rt.block_on(async { quinn::Endpoint::server(server_cfg, addr(0)) }))?.map_err(skip)?;
    let server_addr = server.local_addr().map_err(skip)?;
    let connect: Connect = Box::new(move |rt| {
        let ep = on(1, || {
            let _in_runtime = rt.enter();
            quinn::Endpoint::client(addr(1))
        })?.map_err(skip)?;
        let to = reach(server_addr)?;
        rt.block_on(async move {
            let mut ep = ep;
            ep.set_default_client_config(client_cfg);
            let conn = ep.connect(to, "ferry-peer").map_err(std::io::Error::other)?.await?;
            Ok::<_, std::io::Error>((conn, ep))
        })
        .map_err(skip)
    });
    Ok((server, connect))
}

/// A tokio runtime for side `side`'s host, as a node has (two workers),
/// its threads on that host's CPU.
fn host_runtime(side: usize) -> Result<tokio::runtime::Runtime, Skip> {
    on(side, || tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build())?.map_err(skip)
}

/// A TCP connection from side 1, without Nagle's delay, to a receiver on
/// side 0 (without it too if `nodelay`): the receiver reads frames of
/// `len` bytes, hands each to `each`, and answers one byte when it says
/// so, until the connection ends (join the thread after dropping the
/// connection).
fn tcp_sink(
    len: usize,
    nodelay: bool,
    mut each: impl FnMut(&[u8]) -> bool + Send + 'static,
) -> Result<(TcpStream, std::thread::JoinHandle<()>), Skip> {
    let l = on(0, || TcpListener::bind(addr(0)))?.map_err(skip)?;
    let to = l.local_addr().map_err(skip)?;
    let sink = on(0, || {
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            if nodelay {
                let _ = s.set_nodelay(true);
            }
            let mut buf = vec![0u8; len];
            while s.read_exact(&mut buf).is_ok() {
                if each(&buf) && s.write_all(&[1]).is_err() {
                    return;
                }
            }
        })
    })?;
    let c = on(1, || TcpStream::connect(to))?.map_err(skip)?;
    c.set_nodelay(true).map_err(skip)?;
    Ok((c, sink))
}

/// 256 MiB on one TCP connection per operation; the receiver reads it all,
/// touches it and answers one byte.
fn tcp_raw_oneshot(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.case.bytes as usize;
    let (mut c, sink) = tcp_sink(n, false, |buf| {
        touch_read(buf);
        true
    })?;
    let data = vec![7u8; n];
    let mut b = [0u8; 1];
    while run.more() {
        let t = Instant::now();
        c.write_all(&data).map_err(skip)?;
        c.read_exact(&mut b).map_err(skip)?;
        run.record(t.elapsed());
    }
    drop(c);
    let _ = sink.join();
    Ok(())
}

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));

/// A receiving program's loop: hands each message on `rx` to `each` until
/// `stop` is set, `each` says to end (false), or the port fails; it looks
/// at `stop` at least every 200 ms.
fn serve_until(stop: &std::sync::atomic::AtomicBool, rx: &mut ferry::ReceiveRight, mut each: impl FnMut(Message) -> bool) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match rx.recv(Timeout::millis(200)) {
            Ok(m) => {
                if !each(m) {
                    return;
                }
            }
            Err(ferry::RecvError::Timeout) => {}
            Err(_) => return,
        }
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn skip(e: impl std::fmt::Display) -> Skip {
    Skip::new(format!("failed: {e}"))
}

fn ferry_net_roundtrip(run: &mut Run<'_>) -> Result<(), Skip> {
    let (mut srv, to_srv) = ferry::port().map_err(skip)?;
    let (a, b) = linked_nodes("echo", to_srv)?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    // The echo server: the first message brings the reply right.
    let echo = on(0, || std::thread::spawn(move || {
        let Ok(mut first) = srv.recv(WAIT) else { return };
        let Some(ferry::Item::Send(back)) = first.take_items().pop() else { return };
        let _ = back.send(Message::new(0), WAIT);
        serve_until(&s2, &mut srv, |_| back.send(Message::new(0), WAIT).is_ok());
    }))?;
    let remote = b.lookup("echo@a").map_err(skip)?;
    let (mut me, my_tx) = ferry::port().map_err(skip)?;
    remote.send(Message::new(0).with_item(my_tx), WAIT)?;
    me.recv(WAIT)?;
    while run.more() {
        let t = Instant::now();
        remote.send(Message::new(0), WAIT)?;
        me.recv(WAIT)?;
        run.record(t.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = echo.join();
    drop((remote, a, b));
    Ok(())
}

fn quic_raw_roundtrip(run: &mut Run<'_>) -> Result<(), Skip> {
    run.note("token_bytes", 1u64);
    let q = RawQuic::start(|conn| async move {
        let Ok((mut send, mut recv)) = conn.accept_bi().await else { return };
        let mut b = [0u8; 1];
        while recv.read_exact(&mut b).await.is_ok() {
            if send.write_all(&b).await.is_err() {
                return;
            }
        }
    })?;
    let (mut send, mut recv) = q.rt_client.block_on(q.conn.open_bi()).map_err(skip)?;
    let mut b = [1u8; 1];
    while run.more() {
        let t = Instant::now();
        q.rt_client.block_on(async {
            send.write_all(&b).await.map_err(skip)?;
            recv.read_exact(&mut b).await.map_err(skip)
        })?;
        run.record(t.elapsed());
    }
    drop((send, recv));
    q.end();
    Ok(())
}

/// `quic-relay` (`null-roundtrip` only): the floor of any design in which a
/// daemon on each host holds the link. The token goes from the timing
/// thread over a Unix datagram socket to a relay task on its side's tokio
/// runtime, over raw QUIC to the other side's runtime, over a second Unix
/// datagram socket to the echo thread, and back the same way: the four
/// local hops and two runtimes of `ferry-net`, with none of ferry's work
/// (no ports, no credentials, no translation). `ferry-net` ÷ `quic-relay`
/// is then what ferry's own code costs; `quic-relay` ÷ `quic-raw` what the
/// hops cost.
fn quic_relay(run: &mut Run<'_>) -> Result<(), Skip> {
    use tokio::net::UnixDatagram;
    only(run, &["null-roundtrip"])?;
    run.note("token_bytes", 1u64);
    run.note("local_hops", "Unix datagram socket pairs, one per host, each way");
    let (rt_a, rt_b) = (host_runtime(0)?, host_runtime(1)?);
    let (server, connect) = quic_pair(&rt_a)?;
    // Side 1 (the caller's host): the timing thread's socket and its relay's.
    let (mine, relay_b) = std::os::unix::net::UnixDatagram::pair().map_err(skip)?;
    // Side 0 (the serving host): the echo thread's socket and its relay's.
    let (echo_sock, relay_a) = std::os::unix::net::UnixDatagram::pair().map_err(skip)?;
    let srv = server.clone();
    rt_a.spawn(async move {
        let Some(inc) = srv.accept().await else { return };
        let Ok(conn) = inc.await else { return };
        let Ok((send, recv)) = conn.accept_bi().await else { return };
        let Ok(sock) = relay_a.set_nonblocking(true).and_then(|()| UnixDatagram::from_std(relay_a)) else { return };
        let sock = Arc::new(sock);
        // Echo's answers go back over the link; what comes over the link
        // goes to the echo thread.
        tokio::spawn(relay_up(sock.clone(), send));
        relay_down(recv, sock).await;
    });
    echo_sock.set_read_timeout(Some(Duration::from_millis(200))).map_err(skip)?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = on(0, || {
        std::thread::spawn(move || {
            let mut b = [0u8; 1];
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                match echo_sock.recv(&mut b) {
                    Ok(_) => {
                        if echo_sock.send(&b).is_err() {
                            return;
                        }
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                    Err(_) => return,
                }
            }
        })
    })?;
    let (conn, _client_ep) = connect(&rt_b)?;
    let (send, recv) = rt_b.block_on(conn.open_bi()).map_err(skip)?;
    let sock = {
        let _in_runtime = rt_b.enter();
        relay_b.set_nonblocking(true).map_err(skip)?;
        Arc::new(UnixDatagram::from_std(relay_b).map_err(skip)?)
    };
    // The caller's messages go over the link; the answers come back to it.
    rt_b.spawn(relay_up(sock.clone(), send));
    rt_b.spawn(relay_down(recv, sock));
    mine.set_read_timeout(Some(Duration::from_secs(10))).map_err(skip)?;
    let mut b = [1u8; 1];
    while run.more() {
        let t = Instant::now();
        mine.send(&b).map_err(skip)?;
        mine.recv(&mut b).map_err(skip)?;
        run.record(t.elapsed());
    }
    end_relay(&stop, echo, &conn, &server, [rt_b, rt_a]);
    Ok(())
}

/// Ends a round of a relay impl: stops its echo thread, closes both ends
/// of the link and shuts both hosts' runtimes down.
fn end_relay(
    stop: &std::sync::atomic::AtomicBool,
    echo: std::thread::JoinHandle<()>,
    conn: &quinn::Connection,
    server: &quinn::Endpoint,
    runtimes: [tokio::runtime::Runtime; 2],
) {
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = echo.join();
    conn.close(0u32.into(), b"done");
    server.close(0u32.into(), b"done");
    for rt in runtimes {
        rt.shutdown_timeout(Duration::from_secs(1));
    }
}

/// A relay task of `quic-relay`: each byte from the local program's
/// socket goes over the link.
async fn relay_up(sock: Arc<tokio::net::UnixDatagram>, mut send: quinn::SendStream) {
    let mut b = [0u8; 1];
    while sock.recv(&mut b).await.is_ok() {
        if send.write_all(&b).await.is_err() {
            return;
        }
    }
}

/// A relay task of `quic-relay`: each byte from the link goes to the local
/// program's socket.
async fn relay_down(mut recv: quinn::RecvStream, sock: Arc<tokio::net::UnixDatagram>) {
    let mut b = [0u8; 1];
    while recv.read_exact(&mut b).await.is_ok() {
        if sock.send(&b).await.is_err() {
            return;
        }
    }
}

/// `quic-relay-port` (`null-roundtrip` only): [`quic_relay`] with ferry
/// ports for the four local hops. The timing thread sends a message to its
/// relay's port; the relay sends the message's operation and body over raw
/// QUIC (a length, the operation, the body); the other relay sends a
/// message made of them to the echo thread's port, and the answer comes
/// back the same way. What separates it from `ferry-net` is the network
/// server's own work; what separates it from `quic-relay` is the ports'.
fn quic_relay_port(run: &mut Run<'_>) -> Result<(), Skip> {
    use ferry::tokio::{AsyncReceiveRight, AsyncSendRight};
    only(run, &["null-roundtrip"])?;
    run.note("local_hops", "ferry ports, one per program and one per relay");
    let (rt_a, rt_b) = (host_runtime(0)?, host_runtime(1)?);
    let (server, connect) = quic_pair(&rt_a)?;
    // Side 0: the echo thread's port, and its relay's, where answers go.
    let (mut echo_rx, to_echo) = ferry::port().map_err(skip)?;
    let (relay_a_rx, to_relay_a) = ferry::port().map_err(skip)?;
    // Side 1: the timing thread's port, and its relay's.
    let (mut mine, to_me) = ferry::port().map_err(skip)?;
    let (relay_b_rx, to_relay_b) = ferry::port().map_err(skip)?;
    let srv = server.clone();
    let (up_a, down_a) = {
        let _in_runtime = rt_a.enter();
        (AsyncReceiveRight::new(relay_a_rx).map_err(skip)?, AsyncSendRight::new(to_echo).map_err(skip)?)
    };
    rt_a.spawn(async move {
        let Some(inc) = srv.accept().await else { return };
        let Ok(conn) = inc.await else { return };
        let Ok((send, recv)) = conn.accept_bi().await else { return };
        tokio::spawn(port_up(up_a, send));
        port_down(recv, down_a).await;
    });
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = on(0, || {
        std::thread::spawn(move || serve_until(&s2, &mut echo_rx, |m| to_relay_a.send(Message::new(m.op()), WAIT).is_ok()))
    })?;
    let (conn, _client_ep) = connect(&rt_b)?;
    let (send, recv) = rt_b.block_on(conn.open_bi()).map_err(skip)?;
    {
        let _in_runtime = rt_b.enter();
        rt_b.spawn(port_up(AsyncReceiveRight::new(relay_b_rx).map_err(skip)?, send));
        rt_b.spawn(port_down(recv, AsyncSendRight::new(to_me).map_err(skip)?));
    }
    while run.more() {
        let t = Instant::now();
        to_relay_b.send(Message::new(1), WAIT)?;
        mine.recv(WAIT)?;
        run.record(t.elapsed());
    }
    end_relay(&stop, echo, &conn, &server, [rt_b, rt_a]);
    Ok(())
}

/// A relay task of `quic-relay-port`: each message from the local
/// program's port goes over the link as its length, operation and body.
async fn port_up(mut port: ferry::tokio::AsyncReceiveRight, mut send: quinn::SendStream) {
    let mut frame = Vec::new();
    while let Ok(m) = port.recv().await {
        frame.clear();
        frame.extend_from_slice(&(4 + m.body().len() as u32).to_le_bytes());
        frame.extend_from_slice(&m.op().to_le_bytes());
        frame.extend_from_slice(m.body());
        if send.write_all(&frame).await.is_err() {
            return;
        }
    }
}

/// A relay task of `quic-relay-port`: each message from the link goes to
/// the local program's port.
async fn port_down(mut recv: quinn::RecvStream, port: ferry::tokio::AsyncSendRight) {
    let mut len = [0u8; 4];
    while recv.read_exact(&mut len).await.is_ok() {
        let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
        if b.len() < 4 || recv.read_exact(&mut b).await.is_err() {
            return;
        }
        let op = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        b.drain(..4);
        if port.send(Message::new(op).with_body(b)).await.is_err() {
            return;
        }
    }
}

fn tcp_raw_roundtrip(run: &mut Run<'_>) -> Result<(), Skip> {
    run.note("token_bytes", 1u64);
    let l = on(0, || TcpListener::bind(addr(0)))?.map_err(skip)?;
    let addr = l.local_addr().map_err(skip)?;
    let echo = on(0, || {
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            let _ = s.set_nodelay(true);
            let mut b = [0u8; 1];
            while s.read_exact(&mut b).is_ok() {
                if s.write_all(&b).is_err() {
                    return;
                }
            }
        })
    })?;
    let mut c = on(1, || TcpStream::connect(addr))?.map_err(skip)?;
    c.set_nodelay(true).map_err(skip)?;
    let mut b = [1u8; 1];
    while run.more() {
        let t = Instant::now();
        c.write_all(&b).map_err(skip)?;
        c.read_exact(&mut b).map_err(skip)?;
        run.record(t.elapsed());
    }
    drop(c);
    let _ = echo.join();
    Ok(())
}
