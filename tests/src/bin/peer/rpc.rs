//! Peer roles for the rpc tests.
//!
//! - `rpc-server NAME POLICY WORKERS [CPU]`: registers a port under NAME,
//!   prints `ready`, and serves calls with WORKERS threads (the first pinned
//!   to CPU if given) (see [`serve`] for the
//!   operations) until asked to exit.
//! - `rpc-client NAME POLICY`: connects to NAME, prints `connected`, then
//!   makes one slow call and prints `calling` first, so the test can kill it
//!   in the middle of the call.
//! - `rpc-fds NAME`: opens connections to NAME of both kinds, makes calls of
//!   every kind (slot, socket, rights, timeouts, garbage in its slot), drops
//!   them, and fails unless its descriptors and slot mappings are back to
//!   where they started.
//! - `rpc-hold NAME MAX`: opens RPC connections to NAME (`-`: the right
//!   this process inherited) (each makes one
//!   echo call) until refused or MAX, prints `connected K` and
//!   `stopped: ERROR`, then `ready`, and holds them until killed.

use std::io::Write;
use std::time::Duration;

use ferry::rpc::{ConnId, ConnectOptions, Connection, Policy, RpcError, RpcServer, Transport};
use ferry::{Bootstrap, Item, Message, Timeout};

use crate::Outcome;

/// Echo the request's op and body.
pub const OP_ECHO: u32 = 1;
/// Sleep for the milliseconds in the first 4 body bytes, then echo the rest.
pub const OP_SLOW: u32 = 2;
/// The request carries a send right: send `through-right` on it, then reply
/// with the right itself.
pub const OP_RIGHTS: u32 = 3;
/// Reply with this process's rpc counters (four little-endian u64).
pub const OP_STATS: u32 = 4;
/// Reply with the serving thread's number of live connections (u64).
pub const OP_CONNS: u32 = 5;
/// Reply with as many bytes (value 0x5A) as the u32 in the body says.
pub const OP_BIG: u32 = 6;
/// Reply, then exit the process cleanly.
pub const OP_EXIT: u32 = 7;
/// Reply with this process's open descriptors and mapped slots (two u64).
pub const OP_FDS: u32 = 8;
/// Reply with how many replies this serving thread could not deliver
/// because they were too large (u64), as `reply_and_wait` reported them.
pub const OP_FAILED: u32 = 9;
/// Echo the body after its first 4 bytes through `reply_parts`, cut where
/// the u32 in those 4 bytes says (the rest of the body in two pieces).
pub const OP_PARTS: u32 = 10;

/// Open descriptors and mappings of RPC slots in this process.
pub fn fds_and_slots() -> (u64, u64) {
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0) as u64;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    (fds, maps.lines().filter(|l| l.contains("ferry-rpc-slot")).count() as u64)
}

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "rpc-server" => Some(server(args)),
        "rpc-client" => Some(client(args)),
        "rpc-fds" => Some(fds(args)),
        "rpc-hold" => Some(hold(args)),
        _ => None,
    }
}

fn policy(s: &str) -> Result<Policy, Box<dyn std::error::Error>> {
    Ok(match s {
        "adaptive" => Policy::Adaptive,
        "block" => Policy::Block,
        "poll" => Policy::Poll,
        other => return Err(format!("unknown policy {other}").into()),
    })
}

fn server(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let (name, pol, workers, cpu) = match args {
        [n, p, w] => (n, p, w, None),
        [n, p, w, c] => (n, p, w, Some(c.parse::<usize>()?)),
        _ => return Err("usage: rpc-server NAME POLICY WORKERS [CPU]".into()),
    };
    let workers: usize = workers.parse()?;
    if let Some(cpu) = cpu {
        ferry::rpc::pin_current_thread(cpu)?;
    }
    let (port, send) = ferry::port()?;
    let mut boot = Bootstrap::connect()?;
    boot.register(name, &send)?;
    let mut first = RpcServer::new(port)?;
    first.set_policy(policy(pol)?);
    let mut pool = Vec::new();
    for _ in 1..workers {
        let w = first.worker()?;
        pool.push(std::thread::spawn(move || {
            if let Err(e) = serve(w) {
                eprintln!("rpc-server worker: {e}");
                std::process::exit(1);
            }
        }));
    }
    println!("ready");
    std::io::stdout().flush()?;
    serve(first)
}

/// Serves until an `OP_EXIT` request, answering the operations above.
fn serve(mut server: RpcServer) -> Result<(), Box<dyn std::error::Error>> {
    let mut reply: Option<(ConnId, Message)> = None;
    let mut failed = 0u64;
    loop {
        let (conn, mut req) = match server.reply_and_wait(reply.take(), Timeout::Infinite) {
            Ok(r) => r,
            Err(RpcError::TooLarge(_)) => {
                failed += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let body = req.body().to_vec();
        let answer = match req.op() {
            OP_ECHO => Message::new(OP_ECHO).with_body(body),
            OP_SLOW => {
                let ms = u32::from_le_bytes(body.get(..4).ok_or("short slow request")?.try_into()?);
                std::thread::sleep(Duration::from_millis(ms.into()));
                Message::new(OP_SLOW).with_body(body[4..].to_vec())
            }
            OP_RIGHTS => match req.take_items().pop() {
                Some(Item::Send(right)) => {
                    right.send(Message::new(OP_RIGHTS).with_body(*b"through-right"), Timeout::Infinite)?;
                    Message::new(OP_RIGHTS).with_body(*b"right-returned").with_item(right)
                }
                _ => Message::new(OP_RIGHTS).with_body(*b"no-right"),
            },
            OP_STATS => {
                let s = ferry::rpc::stats();
                let mut b = Vec::new();
                for v in [s.futex_waits, s.wakes, s.polls, s.socket_ops] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                Message::new(OP_STATS).with_body(b)
            }
            OP_FDS => {
                let (f, m) = fds_and_slots();
                Message::new(OP_FDS).with_body([f.to_le_bytes(), m.to_le_bytes()].concat())
            }
            OP_FAILED => Message::new(OP_FAILED).with_body(failed.to_le_bytes()),
            OP_CONNS => Message::new(OP_CONNS).with_body((server.connections() as u64).to_le_bytes()),
            OP_BIG => {
                let n = u32::from_le_bytes(body.get(..4).ok_or("short big request")?.try_into()?);
                Message::new(OP_BIG).with_body(vec![0x5A; n as usize])
            }
            OP_EXIT => {
                server.reply(conn, Message::new(OP_EXIT))?;
                std::process::exit(0);
            }
            OP_PARTS => {
                let cut = u32::from_le_bytes(body.get(..4).ok_or("short parts request")?.try_into()?) as usize;
                let rest = &body[4..];
                let (mut head, mut tail) = (rest[..cut.min(rest.len())].to_vec(), rest[cut.min(rest.len())..].to_vec());
                match server.reply_parts(conn, OP_PARTS, &mut head, &mut tail) {
                    Ok(()) => {}
                    Err(RpcError::TooLarge(_)) => failed += 1,
                    Err(e) => return Err(e.into()),
                }
                if !head.is_empty() || !tail.is_empty() {
                    return Err("reply_parts left bytes in its buffers".into());
                }
                continue;
            }
            other => Message::new(other).with_body(*b"unknown"),
        };
        reply = Some((conn, answer));
    }
}

fn client(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [name, pol] = args else { return Err("usage: rpc-client NAME POLICY".into()) };
    let to = Bootstrap::connect()?.lookup(name)?;
    let mut conn = Connection::connect(&to, ConnectOptions { policy: policy(pol)?, ..Default::default() })?;
    let r = conn.call(Message::new(OP_ECHO).with_body(*b"hello"), Timeout::Infinite)?;
    if r.body() != b"hello" {
        return Err("bad echo".into());
    }
    println!("connected");
    std::io::stdout().flush()?;
    std::thread::sleep(Duration::from_millis(50));
    println!("calling");
    std::io::stdout().flush()?;
    let mut slow = 300u32.to_le_bytes().to_vec();
    slow.extend_from_slice(b"slow");
    match conn.call(Message::new(OP_SLOW).with_body(slow), Timeout::Infinite) {
        Ok(_) | Err(RpcError::PeerDead) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn hold(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [name, max] = args else { return Err("usage: rpc-hold NAME MAX".into()) };
    let max: usize = max.parse()?;
    let to = if name == "-" { ferry::spawn::inherited()? } else { Bootstrap::connect()?.lookup(name)? };
    crate::hold_until_refused(max, || {
        let mut c = Connection::connect(&to, ConnectOptions::default())?;
        c.call(Message::new(OP_ECHO).with_body(*b"hi"), Timeout::After(Duration::from_secs(10)))?;
        Ok::<_, RpcError>(c)
    })
}

fn fds(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [name] = args else { return Err("usage: rpc-fds NAME".into()) };
    let to = Bootstrap::connect()?.lookup(name)?;
    // ferry's one long-lived descriptor (its published counters) is not a leak.
    ferry::counters::publish();
    let before = fds_and_slots();
    for round in 0..3 {
        let mut slot = Connection::connect(&to, ConnectOptions::default())?;
        let mut sock = ferry::rpc::SocketConnection::connect(&to, ConnectOptions::default())?;
        for c in [&mut slot as &mut dyn Transport, &mut sock as &mut dyn Transport] {
            c.call(Message::new(OP_ECHO).with_body(*b"small"), Timeout::Infinite)?;
            c.call(Message::new(OP_BIG).with_body(10_000u32.to_le_bytes()), Timeout::Infinite)?;
            let (_rx, tx) = ferry::port()?;
            let mut r = c.call(Message::new(OP_RIGHTS).with_item(tx), Timeout::Infinite)?;
            drop(r.take_items());
            let mut late = 200u32.to_le_bytes().to_vec();
            late.extend_from_slice(b"late");
            match c.call(Message::new(OP_SLOW).with_body(late), Timeout::millis(20)) {
                Err(RpcError::Timeout) => {}
                other => return Err(format!("expected a timeout, got {other:?}").into()),
            }
            c.call(Message::new(OP_ECHO).with_body(*b"after"), Timeout::Infinite)?;
        }
        if round == 2 {
            // Garbage in the slot: the server closes this connection.
            let fd = slot.slot_fd().ok_or("no slot")?;
            rustix::io::pwrite(fd, &u32::MAX.to_le_bytes(), 72)?;
            rustix::io::pwrite(fd, &999u32.to_le_bytes(), 64)?;
            let (_rx, tx) = ferry::port()?;
            let _ = slot.call(Message::new(OP_RIGHTS).with_item(tx), Timeout::millis(5_000));
        }
    }
    let after = fds_and_slots();
    println!("fds {} {} slots {} {}", before.0, after.0, before.1, after.1);
    if before != after {
        return Err(format!("leaked: before {before:?}, after {after:?}").into());
    }
    Ok(())
}
