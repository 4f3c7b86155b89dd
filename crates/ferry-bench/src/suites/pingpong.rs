//! Request–reply ping-pong between two processes, the shape of both the
//! `port` suite (no payload) and the `rpc` suite (`bytes` each way).
//!
//! The timing process sends a request of `bytes` (at least one byte where
//! a descriptor needs something to carry: the `token_bytes` extra says so)
//! and waits for a reply of the same size from the peer; one sample is one
//! round trip. Shared-memory variants copy the payload in and out of the
//! shared page on both sides, as a real call would.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use rustix::event::{eventfd, EventfdFlags};

use crate::chan;
use crate::harness::{Run, Skip};
use crate::record::Placement;
use crate::sys::Map;

/// Bytes each way on descriptor-based channels (they cannot carry nothing).
fn wire_bytes(run: &mut Run<'_>) -> usize {
    let n = run.bytes();
    if n == 0 {
        run.note("token_bytes", 1u64);
    }
    n.max(1)
}

fn short(what: &str, got: usize, want: usize) -> Skip {
    Skip::new(format!("failed: {what} of {got} bytes, expected {want}"))
}

/// Ping-pong over one connected socket pair or a pair of pipes.
fn fd_pingpong(
    run: &mut Run<'_>,
    mine: (impl AsFd, impl AsFd),
    theirs: (impl AsFd + Send + 'static, impl AsFd + Send + 'static),
    datagram: bool,
) -> Result<(), Skip> {
    let n = wire_bytes(run);
    let (my_rx, my_tx) = mine;
    let (their_rx, their_tx) = theirs;
    let peer = run.spawn(&[my_rx.as_fd(), my_tx.as_fd()], move || {
        let mut buf = vec![0u8; n + 1];
        let reply = vec![2u8; n];
        loop {
            let got = if datagram {
                chan::read_some(&their_rx, &mut buf)?
            } else if chan::read_exact(&their_rx, &mut buf[..n])? {
                n
            } else {
                0
            };
            if got == 0 {
                return Ok(());
            }
            chan::write_all(&their_tx, &reply)?;
        }
    })?;
    let req = vec![1u8; n];
    let mut buf = vec![0u8; n + 1];
    while run.more() {
        let t = Instant::now();
        chan::write_all(&my_tx, &req)?;
        let got = if datagram {
            chan::read_some(&my_rx, &mut buf)?
        } else if chan::read_exact(&my_rx, &mut buf[..n])? {
            n
        } else {
            0
        };
        run.record(t.elapsed());
        if got != n {
            return Err(short("reply", got, n));
        }
    }
    drop((my_rx, my_tx));
    peer.wait()?;
    Ok(())
}

/// `uds-seqpacket`: a raw `SOCK_SEQPACKET` socket pair, no credentials.
pub fn uds_seqpacket(run: &mut Run<'_>) -> Result<(), Skip> {
    let (a, b) = chan::seqpacket()?;
    let a2 = a.try_clone()?;
    let b2 = b.try_clone()?;
    fd_pingpong(run, (a, a2), (b, b2), true)
}

/// `uds-seqpacket-cred`: the same socket pair with what a port's kernel
/// path adds to every message: `SO_PASSCRED` on both ends, so the kernel
/// attaches the sender's credentials to each datagram, and `recvmsg` with a
/// control buffer for a port's descriptors and those credentials, which
/// are read. The floor of a port round trip that keeps the guarantee that
/// a receiver learns who sent each message; `uds-seqpacket` gives it up.
pub fn uds_seqpacket_cred(run: &mut Run<'_>) -> Result<(), Skip> {
    seqpacket_recvmsg(run, true)
}

/// `uds-seqpacket-recvmsg`: [`uds_seqpacket_cred`] without `SO_PASSCRED`:
/// `send` and `recvmsg` with the same control buffer, no credentials. The
/// same program as `uds-seqpacket-cred` but for the credentials, so set
/// beside it in the same run it shows what they alone cost.
pub fn uds_seqpacket_recvmsg(run: &mut Run<'_>) -> Result<(), Skip> {
    seqpacket_recvmsg(run, false)
}

/// The ping-pong of `uds-seqpacket-cred` (`creds`) and
/// `uds-seqpacket-recvmsg`: every datagram received with `recvmsg` and a
/// port's control buffer, with or without the sender's credentials.
fn seqpacket_recvmsg(run: &mut Run<'_>, creds: bool) -> Result<(), Skip> {
    let n = wire_bytes(run);
    let (mine, theirs) = if creds { chan::seqpacket_with_credentials()? } else { chan::seqpacket()? };
    let peer = run.spawn(&[mine.as_fd()], move || {
        let mut buf = vec![0u8; n + 1];
        let reply = vec![2u8; n];
        loop {
            let (got, uid) = chan::recv_with_credentials(&theirs, &mut buf)?;
            if got == 0 {
                return Ok(());
            }
            if creds && uid.is_none() {
                return Err(std::io::Error::other("a datagram arrived without its sender's credentials"));
            }
            chan::send_datagram(&theirs, &reply)?;
        }
    })?;
    let req = vec![1u8; n];
    let mut buf = vec![0u8; n + 1];
    let mut last = None;
    while run.more() {
        let t = Instant::now();
        chan::send_datagram(&mine, &req)?;
        let (got, uid) = chan::recv_with_credentials(&mine, &mut buf)?;
        run.record(t.elapsed());
        if got != n {
            return Err(short("reply", got, n));
        }
        last = uid;
    }
    if creds && last.is_none() {
        return Err(Skip::new("failed: the replies carried no credentials"));
    }
    if !creds && last.is_some() {
        return Err(Skip::new("failed: credentials arrived on a socket that did not ask for them"));
    }
    drop(mine);
    peer.wait()?;
    Ok(())
}

/// `pipe`: two pipes, one each way.
pub fn pipe(run: &mut Run<'_>) -> Result<(), Skip> {
    let (req_r, req_w) = chan::pipe()?;
    let (rep_r, rep_w) = chan::pipe()?;
    fd_pingpong(run, (rep_r, req_w), (req_r, rep_w), false)
}

/// The shared page of the memory-based ping-pongs: a state word, then the
/// request and the reply areas.
struct Slot {
    map: Map,
    n: usize,
}

const IDLE: u32 = 0;
const REQUEST: u32 = 1;
const REPLY: u32 = 2;
const STOP: u32 = 3;

impl Slot {
    fn new(n: usize) -> std::io::Result<Slot> {
        let area = n.div_ceil(64) * 64;
        let len = (64 + 2 * area).div_ceil(4096) * 4096;
        Ok(Slot { map: Map::shared_anon(len)?, n })
    }
    fn state(&self) -> &AtomicU32 {
        self.map.word(0)
    }
    fn req_at(&self) -> usize {
        64
    }
    fn rep_at(&self) -> usize {
        64 + self.n.div_ceil(64) * 64
    }
}

/// How a side waits for the other's store.
#[derive(Clone, Copy)]
enum Wait {
    Futex,
    Spin,
}

fn wait_until(word: &AtomicU32, how: Wait, pred: impl Fn(u32) -> bool) -> u32 {
    loop {
        let v = word.load(Ordering::Acquire);
        if pred(v) {
            return v;
        }
        match how {
            Wait::Spin => std::hint::spin_loop(),
            Wait::Futex => {
                let _ = rustix::thread::futex::wait(word, rustix::thread::futex::Flags::empty(), v, None);
            }
        }
    }
}

fn publish(word: &AtomicU32, how: Wait, v: u32) {
    match how {
        Wait::Spin => word.store(v, Ordering::Release),
        Wait::Futex => chan::futex_set(word, v),
    }
}

fn shm_pingpong(run: &mut Run<'_>, how: Wait) -> Result<(), Skip> {
    let n = run.bytes();
    let slot = Slot::new(n)?;
    slot.state().store(IDLE, Ordering::Relaxed);
    let peer = run.spawn(&[], || {
        let mut req = vec![0u8; n];
        let reply = vec![2u8; n];
        loop {
            if wait_until(slot.state(), how, |v| v == REQUEST || v == STOP) == STOP {
                return Ok(());
            }
            slot.map.copy_out(slot.req_at(), &mut req);
            slot.map.copy_in(slot.rep_at(), &reply);
            publish(slot.state(), how, REPLY);
        }
    })?;
    let req = vec![1u8; n];
    let mut rep = vec![0u8; n];
    while run.more() {
        let t = Instant::now();
        slot.map.copy_in(slot.req_at(), &req);
        publish(slot.state(), how, REQUEST);
        wait_until(slot.state(), how, |v| v == REPLY);
        slot.map.copy_out(slot.rep_at(), &mut rep);
        run.record(t.elapsed());
    }
    publish(slot.state(), how, STOP);
    peer.wait()?;
    if n > 0 && rep[n - 1] != 2 {
        return Err(Skip::new("failed: the reply did not arrive in shared memory"));
    }
    Ok(())
}

/// `futex-floor`: two processes handing a shared futex word back and forth;
/// the blocking lower bound.
pub fn futex_floor(run: &mut Run<'_>) -> Result<(), Skip> {
    shm_pingpong(run, Wait::Futex)
}

/// `spin-floor`: two processes spinning on a shared cache line; the polling
/// lower bound. Needs two CPUs.
pub fn spin_floor(run: &mut Run<'_>) -> Result<(), Skip> {
    if run.placement == Placement::SameCore {
        return Err(Skip::new(
            "two spinning processes on one CPU alternate only when the scheduler preempts one; the polling floor needs two CPUs",
        ));
    }
    shm_pingpong(run, Wait::Spin)
}

/// `eventfd`: payload in shared memory, one eventfd each way for wake-ups.
pub fn eventfd_pingpong(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.bytes();
    let slot = Slot::new(n)?;
    let to_peer = eventfd(0, EventfdFlags::CLOEXEC)?;
    let to_me = eventfd(0, EventfdFlags::CLOEXEC)?;
    let peer = run.spawn(&[], || {
        let mut req = vec![0u8; n];
        let reply = vec![2u8; n];
        let mut cnt = [0u8; 8];
        loop {
            chan::read_exact(&to_peer, &mut cnt)?;
            if slot.state().load(Ordering::Acquire) == STOP {
                return Ok(());
            }
            slot.map.copy_out(slot.req_at(), &mut req);
            slot.map.copy_in(slot.rep_at(), &reply);
            chan::write_all(&to_me, &1u64.to_ne_bytes())?;
        }
    })?;
    let req = vec![1u8; n];
    let mut rep = vec![0u8; n];
    let mut cnt = [0u8; 8];
    while run.more() {
        let t = Instant::now();
        slot.map.copy_in(slot.req_at(), &req);
        chan::write_all(&to_peer, &1u64.to_ne_bytes())?;
        chan::read_exact(&to_me, &mut cnt)?;
        slot.map.copy_out(slot.rep_at(), &mut rep);
        run.record(t.elapsed());
    }
    slot.state().store(STOP, Ordering::Release);
    chan::write_all(&to_peer, &1u64.to_ne_bytes())?;
    peer.wait()?;
    Ok(())
}

/// `ferry-port`: a message there and back through two ferry ports
/// (`SendRight::send` / `ReceiveRight::recv`, infinite timeouts). The body
/// carries `bytes` (none in the port suite).
pub fn ferry_port(run: &mut Run<'_>) -> Result<(), Skip> {
    use ferry::{Message, Timeout};
    let n = run.bytes();
    let (mut peer_rx, to_peer) = ferry::port()?;
    let (mut my_rx, to_me) = ferry::port()?;
    let peer = run.spawn(&[], move || {
        let reply = vec![2u8; n];
        loop {
            let m = peer_rx.recv(Timeout::Infinite).map_err(std::io::Error::other)?;
            if m.op() == 0 {
                return Ok(());
            }
            to_me.send(Message::new(m.op()).with_body(reply.clone()), Timeout::Infinite).map_err(std::io::Error::other)?;
        }
    })?;
    let req = vec![1u8; n];
    while run.more() {
        let t = Instant::now();
        to_peer.send(Message::new(1).with_body(req.clone()), Timeout::Infinite)?;
        let m = my_rx.recv(Timeout::Infinite)?;
        run.record(t.elapsed());
        if m.body().len() != n {
            return Err(short("ferry reply", m.body().len(), n));
        }
    }
    to_peer.send(Message::new(0), Timeout::Infinite)?;
    peer.wait()?;
    Ok(())
}
