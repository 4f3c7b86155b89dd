//! The peer of the chaos test (`tests/tests/chaos.rs`).
//!
//! `chaos SLOT INCARNATION SLOTS SEED`: one of several processes that
//! exchange messages while the test kills them at random. It registers a
//! port as `chaos-SLOT` and an RPC port as `chaos-rpc-SLOT`, then, until
//! told to stop (op [`OP_STOP`] on its port), sends numbered requests to
//! random other slots, each of one kind: a plain message, one carrying a
//! send right, one carrying a region by copy (checksummed), or an RPC call.
//! Every request carries a send-once reply right (an RPC call its own reply
//! path); the receiver acknowledges it through that right.
//!
//! Standard output is the log the test checks, one line per event, written
//! before the event's effect is visible to anyone else:
//! - `recv FROM SEQ KIND` when a request is delivered (before its ack);
//! - `acked SLOT SEQ KIND` when the ack of this process's request arrives;
//! - `corrupt FROM SEQ` when a region's bytes do not match its checksum;
//! - at the end, `final fds=A/B memfds=C/D maps=E/F`: descriptors, memfds
//!   and memfd mappings now, against a baseline taken before any port
//!   existed (everything is dropped before measuring).
//!
//! `FROM` is `SLOT.INCARNATION` of the sender; sequence numbers count from
//! 1 per incarnation.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::region::{MapOptions, Region};
use ferry::rpc::{ConnId, ConnectOptions, Connection, RpcError, RpcServer, Transport};
use ferry::{Bootstrap, Item, Message, RecvError, SendRight, Timeout};

use crate::Outcome;

/// Asks a peer to stop, measure and exit.
pub const OP_STOP: u32 = 99;
const OP_REQ: u32 = 1;
const OP_ACK: u32 = 2;
const OP_HELLO: u32 = 3;

const KINDS: [&str; 4] = ["plain", "right", "region", "rpc"];

type Res = Result<(), Box<dyn std::error::Error>>;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "chaos" => Some(chaos(args)),
        _ => None,
    }
}

/// What a process holds, as the kernel lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    fds: usize,
    memfds: usize,
    maps: usize,
}

fn held() -> Held {
    let mut fds = 0;
    let mut memfds = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        for e in dir.flatten() {
            fds += 1;
            if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:")) {
                memfds += 1;
            }
        }
    }
    // The directory read above held one descriptor of its own.
    fds -= 1;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default().lines().filter(|l| l.contains("/memfd:")).count();
    Held { fds, memfds, maps }
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Request body: kind, sender slot, sender incarnation, sequence number,
/// checksum of the region (0 for other kinds).
fn request_body(kind: u8, slot: u32, inc: u32, seq: u64, sum: u64) -> Vec<u8> {
    let mut b = vec![kind];
    b.extend_from_slice(&slot.to_le_bytes());
    b.extend_from_slice(&inc.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&sum.to_le_bytes());
    b
}

struct Request {
    kind: u8,
    from: String,
    seq: u64,
    sum: u64,
}

fn parse_request(b: &[u8]) -> Option<Request> {
    if b.len() != 25 {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4"));
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
    Some(Request { kind: b[0], from: format!("{}.{}", u32_at(1), u32_at(5)), seq: u64_at(9), sum: u64_at(17) })
}

fn register(bs: &mut Bootstrap, name: &str, right: &SendRight) -> Res {
    // A name whose previous holder was just killed is freed when the name
    // server sees its port die: retry a bounded number of times.
    for _ in 0..1000 {
        match bs.register(name, right) {
            Ok(()) => return Ok(()),
            Err(ferry::NameError::Taken) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!("{name} stayed taken").into())
}

fn chaos(args: &[String]) -> Res {
    let num = |i: usize| -> Result<u64, Box<dyn std::error::Error>> { Ok(args.get(i).ok_or("usage: chaos SLOT INC SLOTS SEED")?.parse()?) };
    let (slot, inc, slots, seed) = (num(0)? as u32, num(1)? as u32, num(2)? as u32, num(3)?);
    ferry::counters::publish();
    let baseline = held();

    let (mut port, to_me) = ferry::port()?;
    let (rpc_port, to_rpc) = ferry::port()?;
    {
        let mut bs = Bootstrap::connect()?;
        register(&mut bs, &format!("chaos-{slot}"), &to_me)?;
        register(&mut bs, &format!("chaos-rpc-{slot}"), &to_rpc)?;
    }
    drop((to_me, to_rpc));
    say(format_args!("ready {slot}.{inc}"));

    let stop = Arc::new(AtomicBool::new(false));
    let rpc = {
        let stop = stop.clone();
        std::thread::spawn(move || rpc_server(rpc_port, &stop).map_err(|e| e.to_string()))
    };
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || send_loop(slot, inc, slots, seed, &stop).map_err(|e| e.to_string()))
    };

    // Serve requests until told to stop.
    let served = loop {
        match port.recv(Timeout::After(Duration::from_millis(100))) {
            Ok(m) if m.op() == OP_STOP => break Ok(()),
            Ok(m) => serve(m),
            Err(RecvError::Timeout) => {}
            Err(RecvError::BadMessage(w)) => say(format_args!("bad-message {w}")),
            Err(e) => break Err(e),
        }
    };
    stop.store(true, Ordering::SeqCst);
    let sent = sender.join().map_err(|_| "sender panicked")?;
    let rpc = rpc.join().map_err(|_| "rpc server panicked")?;
    drop(port);
    served?;
    sent?;
    rpc?;
    let now = held();
    say(format_args!(
        "final fds={}/{} memfds={}/{} maps={}/{}",
        now.fds, baseline.fds, now.memfds, baseline.memfds, now.maps, baseline.maps
    ));
    Ok(())
}

/// Handles one request on the main port: log it, check it, act on its
/// items, acknowledge it.
fn serve(mut m: Message) {
    if m.op() != OP_REQ {
        return;
    }
    let Some(req) = parse_request(m.body()) else {
        say(format_args!("malformed-request"));
        return;
    };
    let mut corrupt = false;
    for it in m.take_items() {
        match it {
            Item::Region(r) => match r.map(MapOptions::lazy()) {
                Ok(mapped) => corrupt |= fnv(&mapped) != req.sum,
                Err(e) => say(format_args!("map-failed {} {} {e}", req.from, req.seq)),
            },
            Item::Send(s) => {
                let _ = s.send(Message::new(OP_HELLO).with_body(*b"hello"), Timeout::Zero);
            }
            _ => {}
        }
    }
    if corrupt {
        say(format_args!("corrupt {} {}", req.from, req.seq));
    }
    say(format_args!("recv {} {} {}", req.from, req.seq, KINDS.get(req.kind as usize).unwrap_or(&"?")));
    if let Some(reply) = m.take_reply() {
        let _ = reply.send(Message::new(OP_ACK).with_body(req.seq.to_le_bytes()), Timeout::After(Duration::from_secs(1)));
    }
}

/// Answers RPC calls: logs each, replies with its sequence number.
fn rpc_server(port: ferry::ReceiveRight, stop: &AtomicBool) -> Res {
    let mut server = RpcServer::new(port)?;
    let mut reply: Option<(ConnId, Message)> = None;
    while !stop.load(Ordering::SeqCst) {
        match server.reply_and_wait(reply.take(), Timeout::After(Duration::from_millis(100))) {
            Ok((conn, req)) => {
                let Some(r) = parse_request(req.body()) else {
                    say(format_args!("malformed-call"));
                    continue;
                };
                say(format_args!("recv {} {} rpc", r.from, r.seq));
                reply = Some((conn, Message::new(OP_ACK).with_body(r.seq.to_le_bytes())));
            }
            Err(RpcError::Timeout) | Err(RpcError::PeerDead) | Err(RpcError::Protocol { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Sends numbered requests to random other slots until `stop`.
fn send_loop(slot: u32, inc: u32, slots: u32, seed: u64, stop: &AtomicBool) -> Res {
    let mut rng = Rng(seed ^ ((slot as u64) << 32 | inc as u64));
    let (mut acks, _keep) = ferry::port()?;
    let mut rights: Vec<Option<SendRight>> = (0..slots).map(|_| None).collect();
    let mut conns: Vec<Option<Connection>> = (0..slots).map(|_| None).collect();
    let mut seq = 0u64;
    // Requests sent through the main port whose ack has not come yet.
    let mut outstanding = std::collections::HashMap::new();
    while !stop.load(Ordering::SeqCst) {
        let to = (slot + 1 + (rng.next() % (slots as u64 - 1)) as u32) % slots;
        let kind = (rng.next() % 4) as u8;
        seq += 1;
        let t = to as usize;
        if kind == 3 {
            if conns[t].is_none() {
                let Some(right) = lookup(&format!("chaos-rpc-{to}"), stop) else { continue };
                conns[t] = Connection::connect(&right, ConnectOptions::default()).ok();
            }
            let Some(conn) = conns[t].as_mut() else { continue };
            match conn.call(Message::new(OP_REQ).with_body(request_body(kind, slot, inc, seq, 0)), Timeout::After(Duration::from_secs(2))) {
                Ok(r) if r.body() == seq.to_le_bytes() => say(format_args!("acked {to} {seq} rpc")),
                Ok(_) => say(format_args!("wrong-reply {to} {seq}")),
                Err(RpcError::Timeout) => {}
                Err(_) => conns[t] = None,
            }
            continue;
        }
        if rights[t].is_none() {
            rights[t] = lookup(&format!("chaos-{to}"), stop);
        }
        let Some(right) = rights[t].as_ref() else { continue };
        let mut items = Vec::new();
        let mut sum = 0;
        // A port whose send right travels in a `right` request; kept until
        // the ack, so the receiver can greet it.
        let mut spare = None;
        match kind {
            1 => {
                let (rx, tx) = ferry::port()?;
                spare = Some(rx);
                items.push(Item::Send(tx));
            }
            2 => {
                let len = 4096 * (1 + (rng.next() % 64) as usize);
                let mut region = Region::new(len)?;
                let mut x = rng.next();
                for b in region.as_mut_slice().iter_mut() {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    *b = (x >> 56) as u8;
                }
                sum = fnv(region.as_slice());
                items.push(Item::Region(region.by_copy()?));
            }
            _ => {}
        }
        let mut msg = Message::new(OP_REQ).with_body(request_body(kind, slot, inc, seq, sum)).with_reply(acks.make_send_once()?);
        for it in items {
            msg = msg.with_item(it);
        }
        if right.send(msg, Timeout::After(Duration::from_secs(1))).is_err() {
            // Dead, or not draining: look it up again next time.
            rights[t] = None;
            continue;
        }
        outstanding.insert(seq, (to, kind));
        // Wait for this request's ack; an earlier one's may come first.
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match acks.recv(Timeout::After(left)) {
                Ok(m) if m.op() == OP_ACK => {
                    let acked = m.body().try_into().map(u64::from_le_bytes).unwrap_or(0);
                    match outstanding.remove(&acked) {
                        Some((dest, k)) => say(format_args!("acked {dest} {acked} {}", KINDS[k as usize])),
                        None => say(format_args!("wrong-reply {to} {acked}")),
                    }
                    if acked == seq {
                        break;
                    }
                }
                Ok(_) => {}
                Err(RecvError::Timeout) => {
                    rights[t] = None;
                    break;
                }
                // The reply right died unused (its receiver was killed).
                Err(_) if left.is_zero() => break,
                Err(_) => {}
            }
        }
        drop(spare);
    }
    Ok(())
}

fn lookup(name: &str, stop: &AtomicBool) -> Option<SendRight> {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until && !stop.load(Ordering::SeqCst) {
        match Bootstrap::connect().and_then(|mut b| b.lookup(name)) {
            Ok(r) => return Some(r),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    None
}
