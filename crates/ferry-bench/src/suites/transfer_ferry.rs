//! ferry's implementations of the `transfer` suite: regions sent through
//! real ports between real processes, next to the baselines of
//! `transfer.rs`.
//!
//! - `ferry-copy-lazy` / `ferry-copy-immediate`: a [`Region`] sent
//!   [`by_copy`](Region::by_copy), the receiver mapping it with
//!   [`MapOptions::lazy`] / [`MapOptions::immediate`].
//! - `ferry-move`: a region sent [`by_move`](Region::by_move) (mapped lazily).
//! - `ferry-move-pool` (`stream` only): as `ferry-move`, each frame taken
//!   from a [`RegionPool`] whose thread makes fresh, populated regions
//!   ahead of use.
//! - `ferry-move-huge` (`oneshot` and `stream`): as `ferry-move` (the
//!   stream through a [`RegionPool`]) with shmem huge pages; where the
//!   policy is `never` and the bench may change it (root) it is set to
//!   `advise` for the round and put back after, elsewhere skipped with the
//!   reason. `extra.shmem_enabled_was` records the policy found.
//! - `ferry-lend`: a slot of a [`LendPool`], mapped read-only by the
//!   receiver (so it does not do the `write` touch).
//! - `ferry-auto`: ordinary memory through [`auto::attach`] / [`auto::take`]
//!   (inline below the measured crossover, one copy into a region above;
//!   `take` maps read-only, so no `write` touch either).
//! - `ferry-inline`: the bytes in the message body (up to `MAX_INLINE`), the
//!   copy-inline side of the auto choice.
//!
//! What is timed. `oneshot`: the region is allocated and filled before the
//! sample (producing the payload); the sample covers making the item
//! (sealing on the first `by_copy`, free afterwards; for move the seal and
//! unmap of a freshly filled region), the send, the receiver's receive,
//! map, touch, and its acknowledgement (a small ferry message carrying how
//! many bytes it saw mapped with huge pages). The receiver then unmaps and
//! says it is ready, untimed (as `memfd-map` does). For `ferry-auto` and
//! `ferry-inline` the payload is ordinary memory and their one copy is
//! timed. `forward`: a producer process sends the middle (the timing
//! process) a region, untimed; the middle passes that received item on
//! unchanged and the third process maps it (per the impl's options) without
//! touching it and acknowledges. `ferry-auto` and `ferry-inline` hold the
//! bytes in ordinary memory in the middle, like the baselines. `stream`: the
//! sender allocates (or, for lend, leases) a region and writes every byte of
//! every frame inside the timed loop; at most two frames in flight, as for
//! the baselines; the receiver maps, unmaps and acknowledges each frame.

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use ferry::region::{auto, LendPool, MapOptions, MappedRegion, Region, RegionItem, RegionOptions, RegionPool, SharedMapping};
use ferry::{Item, Message, ReceiveRight, RecvError, SendRight, Timeout};

use super::per_pair;
use crate::harness::{Run, Skip};
use crate::record::Touch;

const OP_DATA: u32 = 1;
const OP_ACK: u32 = 2;
const OP_READY: u32 = 3;
const OP_WANT: u32 = 4;

/// How long the timing process waits for a peer before giving up (a dead
/// peer reads as a failed case, never a hang).
const PATIENCE: Timeout = Timeout::After(Duration::from_secs(120));

/// Which ferry path an implementation takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    CopyLazy,
    CopyImmediate,
    Move,
    Lend,
    Auto,
    Inline,
    /// By move, each frame taken from a [`RegionPool`] (base pages).
    MovePool,
    /// By move with shmem huge pages, frames of a stream taken from a
    /// [`RegionPool`].
    MoveHuge,
}

impl Kind {
    /// How the receiver maps a region of this kind.
    fn map_options(self) -> MapOptions {
        match self {
            Kind::CopyImmediate => MapOptions::immediate(),
            Kind::Lend => MapOptions::lazy().read_only(),
            _ => MapOptions::lazy(),
        }
    }

    /// Whether the sender builds a [`Region`] (or lease) rather than sending
    /// ordinary memory.
    fn uses_region(self) -> bool {
        !matches!(self, Kind::Auto | Kind::Inline)
    }

    /// Whether the region travels by move.
    fn moves(self) -> bool {
        matches!(self, Kind::Move | Kind::MovePool | Kind::MoveHuge)
    }
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn skip(e: impl std::fmt::Display) -> Skip {
    Skip::new(format!("failed: {e}"))
}

/// `ferry-copy-lazy`.
pub fn copy_lazy(run: &mut Run<'_>) -> Result<(), Skip> {
    dispatch(run, Kind::CopyLazy)
}

/// `ferry-copy-immediate`.
pub fn copy_immediate(run: &mut Run<'_>) -> Result<(), Skip> {
    dispatch(run, Kind::CopyImmediate)
}

/// `ferry-move`.
pub fn by_move(run: &mut Run<'_>) -> Result<(), Skip> {
    dispatch(run, Kind::Move)
}

/// `ferry-lend`.
pub fn lend(run: &mut Run<'_>) -> Result<(), Skip> {
    dispatch(run, Kind::Lend)
}

/// `ferry-move-pool`.
pub fn move_pool(run: &mut Run<'_>) -> Result<(), Skip> {
    dispatch(run, Kind::MovePool)
}

/// `ferry-move-huge`: shmem huge pages, switched on for the round where
/// the policy is `never` and this process may change it (root), and put
/// back afterwards; skipped, with the reason, where they cannot be had.
pub fn move_huge(run: &mut Run<'_>) -> Result<(), Skip> {
    let guard = ShmemHuge::enable()?;
    run.note("shmem_enabled_was", guard.was.clone());
    let r = dispatch(run, Kind::MoveHuge);
    drop(guard);
    r
}

/// Shmem huge pages granted to regions that ask, for as long as this lives.
struct ShmemHuge {
    was: String,
    changed: bool,
}

const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

impl ShmemHuge {
    fn enable() -> Result<ShmemHuge, Skip> {
        let Some(was) = ferry::region::shmem_huge_pages() else {
            return Err(Skip::new("no transparent huge pages in this kernel"));
        };
        match was.as_str() {
            "advise" | "always" | "within_size" | "force" => Ok(ShmemHuge { was, changed: false }),
            "never" => match std::fs::write(SHMEM_ENABLED, "advise") {
                Ok(()) => Ok(ShmemHuge { was, changed: true }),
                Err(e) => Err(Skip::new(format!(
                    "shmem huge pages unavailable: {SHMEM_ENABLED} is never and cannot be set to advise ({e})"
                ))),
            },
            other => Err(Skip::new(format!("shmem huge pages unavailable: {SHMEM_ENABLED} is {other}"))),
        }
    }
}

impl Drop for ShmemHuge {
    fn drop(&mut self) {
        if self.changed {
            if let Err(e) = std::fs::write(SHMEM_ENABLED, &self.was) {
                eprintln!("ferry-bench: could not restore {SHMEM_ENABLED} to {}: {e}", self.was);
            }
        }
    }
}

/// `ferry-auto`.
pub fn auto_path(run: &mut Run<'_>) -> Result<(), Skip> {
    dispatch(run, Kind::Auto)
}

/// `ferry-inline`.
pub fn inline(run: &mut Run<'_>) -> Result<(), Skip> {
    dispatch(run, Kind::Inline)
}

fn dispatch(run: &mut Run<'_>, kind: Kind) -> Result<(), Skip> {
    let n = run.bytes();
    if kind == Kind::Inline && n > ferry::message::MAX_INLINE {
        return Err(Skip::new(format!("inline bytes are limited to {} per message", ferry::message::MAX_INLINE)));
    }
    if run.case.touch == Touch::Write && matches!(kind, Kind::Lend | Kind::Auto) {
        return Err(Skip::new(match kind {
            Kind::Lend => "a lent region is read-only for its receiver (use copy or move to write)",
            _ => "auto::take maps the payload read-only (use a region by copy or move to write)",
        }));
    }
    if let Some(p) = ferry::region::shmem_huge_pages() {
        run.note("shmem_enabled", p);
    }
    match (kind, run.case.name) {
        (Kind::MovePool, "stream") | (Kind::MoveHuge, "oneshot" | "stream") => {}
        (Kind::MovePool, _) => return Err(Skip::new("a region pool matters only for a stream of fresh frames")),
        (Kind::MoveHuge, _) => return Err(Skip::new("forwarding passes on a received region: huge pages are the producer's choice")),
        _ => {}
    }
    match run.case.name {
        "oneshot" => oneshot(run, kind),
        "forward" => forward(run, kind),
        "stream" => stream(run, kind),
        other => Err(Skip::new(format!("no ferry implementation of case {other:?}"))),
    }
}

/// A data port whose queue holds a few maximal inline messages.
fn data_port() -> Result<(ReceiveRight, SendRight), Skip> {
    let (rx, tx) = ferry::port()?;
    tx.set_queue_limit(4 * ferry::message::MAX_INLINE)?;
    Ok((rx, tx))
}

/// The receiving process: takes each payload, maps it as `kind` says,
/// applies `touch`, acknowledges, then drops the mapping and says it is
/// ready for the next one; in a stream it drops the mapping before it
/// acknowledges and sends no "ready". The bytes it saw mapped with huge
/// pages (first payload only) ride in the "ready" (stream: the first
/// acknowledgement).
fn receiver(kind: Kind, touch: Touch, stream: bool, mut rx: ReceiveRight, ack: SendRight) -> io::Result<()> {
    let mut first = true;
    loop {
        let mut m = match rx.recv(Timeout::Infinite) {
            Ok(m) => m,
            Err(RecvError::NoSenders) => return Ok(()),
            Err(e) => return Err(other(e)),
        };
        let mut body = Vec::new();
        let mut mapped: Option<MappedRegion> = None;
        let mut lent: Option<SharedMapping> = None;
        match kind {
            Kind::Inline => body = std::mem::take(m.body_mut()),
            Kind::Auto => match auto::take(&mut m).map_err(other)? {
                auto::Payload::Inline(v) => body = v,
                auto::Payload::Mapped(r) => mapped = Some(r),
            },
            _ => {
                let Some(Item::Region(item)) = m.take_items().pop() else {
                    return Err(other("a data message came without its region"));
                };
                if kind == Kind::Lend {
                    lent = Some(item.map_shared(kind.map_options()).map_err(other)?);
                } else {
                    mapped = Some(item.map(kind.map_options()).map_err(other)?);
                }
            }
        }
        match (&mut mapped, &lent) {
            (Some(r), _) => match r.as_mut_slice() {
                Some(s) => std::hint::black_box(touch.apply(s)),
                None => std::hint::black_box(touch.apply_read(r.as_slice())),
            },
            (None, Some(l)) => std::hint::black_box(touch.apply_read(lent_frame(l))),
            (None, None) => std::hint::black_box(touch.apply(&mut body)),
        };
        // Whether huge pages were used is read from /proc/self/smaps, which
        // costs far more than a small transfer: only for the first payload,
        // and outside a stream after the acknowledgement (in the untimed
        // "ready" message).
        let huge = |m: &Option<MappedRegion>, l: &Option<SharedMapping>| {
            m.as_ref().map_or(0, |r| r.huge_bytes_mapped()) + l.as_ref().map_or(0, |r| r.huge_bytes_mapped())
        };
        let mut reported = 0;
        if stream {
            if first {
                reported = huge(&mapped, &lent);
            }
            // The frame is done with: unmap (a lent slot goes back) first.
            drop(mapped.take());
            drop(lent.take());
        }
        ack.send(Message::new(OP_ACK).with_body(reported.to_ne_bytes()), Timeout::Infinite).map_err(other)?;
        if !stream {
            let h = if first { huge(&mapped, &lent) } else { 0 };
            drop(mapped);
            drop(lent);
            drop(body);
            ack.send(Message::new(OP_READY).with_body(h.to_ne_bytes()), Timeout::Infinite).map_err(other)?;
        }
        first = false;
    }
}

/// A lent frame's bytes, read in place as the lend path promises.
#[allow(unsafe_code)]
fn lent_frame(l: &SharedMapping) -> &[u8] {
    // SAFETY: the lender is this benchmark's own sender, writing through a
    // ferry `LendPool`, which never hands a lent slot back to its code
    // before this receiver drops the mapping; nothing writes the frame
    // while the slice lives.
    unsafe { l.as_slice() }
}

/// Waits for a message with `op` from a peer; returns its body.
fn expect(rx: &mut ReceiveRight, op: u32) -> Result<Vec<u8>, Skip> {
    let mut m = rx.recv(PATIENCE)?;
    if m.op() != op {
        return Err(Skip::new(format!("peer sent op {} where {op} was expected", m.op())));
    }
    Ok(std::mem::take(m.body_mut()))
}

/// Waits for an acknowledgement (`OP_ACK`) or a ready message; returns the
/// huge-page bytes it reports.
fn wait_for(rx: &mut ReceiveRight, op: u32) -> Result<u64, Skip> {
    let b = expect(rx, op)?;
    Ok(b.get(..8).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes"))))
}

fn wait_ack(rx: &mut ReceiveRight) -> Result<u64, Skip> {
    wait_for(rx, OP_ACK)
}

fn note_huge(run: &mut Run<'_>, receiver_huge: u64, sender_huge: u64) {
    run.note("thp", receiver_huge > 0 || sender_huge > 0);
    run.note("huge_bytes_receiver", receiver_huge);
    run.note("huge_bytes_sender", sender_huge);
}

/// A region of `n` bytes, every byte `fill`.
fn filled_region(n: usize, fill: u8) -> Result<Region, Skip> {
    let mut r = Region::new(n).map_err(skip)?;
    r.as_mut_slice().fill(fill);
    Ok(r)
}

/// Spawns the receiving process on a fresh data port; returns the data
/// send right, the acknowledgement receive right and the peer.
fn spawn_receiver(run: &Run<'_>, kind: Kind, touch: Touch, stream: bool) -> Result<(SendRight, ReceiveRight, crate::proc::Peer), Skip> {
    let (rx, tx) = data_port()?;
    let (ack_rx, ack_tx) = ferry::port()?;
    let peer = run.spawn(&[tx.as_fd()], move || receiver(kind, touch, stream, rx, ack_tx))?;
    Ok((tx, ack_rx, peer))
}

fn oneshot(run: &mut Run<'_>, kind: Kind) -> Result<(), Skip> {
    let n = run.bytes();
    let (tx, mut ack, peer) = spawn_receiver(run, kind, run.case.touch, false)?;
    let (mut rhuge, mut shuge) = (0, 0);
    match kind {
        Kind::CopyLazy | Kind::CopyImmediate => {
            let mut region = filled_region(n, 0x5a)?;
            // The first by_copy of a freshly written region seals it: the
            // writer's shared mapping is swapped for a private one (its page
            // table entries are dropped). Counted as producing the payload,
            // reported as `seal_ns`; later sends of it are the steady state.
            let t = Instant::now();
            drop(region.by_copy().map_err(skip)?);
            run.note("seal_ns", t.elapsed().as_nanos() as u64);
            while run.more() {
                let t = Instant::now();
                let item = region.by_copy().map_err(skip)?;
                tx.send(Message::new(OP_DATA).with_item(item), PATIENCE)?;
                wait_ack(&mut ack)?;
                run.record(t.elapsed());
                rhuge = rhuge.max(wait_for(&mut ack, OP_READY)?);
            }
            shuge = region.huge_bytes_mapped();
        }
        Kind::Move | Kind::MovePool | Kind::MoveHuge => {
            while run.more() {
                let region = filled_region(n, 0x5a)?;
                if shuge == 0 {
                    shuge = region.huge_bytes_mapped();
                }
                let t = Instant::now();
                let item = region.by_move().map_err(skip)?;
                tx.send(Message::new(OP_DATA).with_item(item), PATIENCE)?;
                wait_ack(&mut ack)?;
                run.record(t.elapsed());
                rhuge = rhuge.max(wait_for(&mut ack, OP_READY)?);
            }
        }
        Kind::Lend => {
            let pool = LendPool::new(1, n).map_err(skip)?;
            let mut first = true;
            while run.more() {
                let mut lease = pool.acquire(PATIENCE).map_err(skip)?;
                if first {
                    lease.as_mut_slice().fill(0x5a);
                    first = false;
                }
                let t = Instant::now();
                let item = lease.lend().map_err(skip)?;
                tx.send(Message::new(OP_DATA).with_item(item), PATIENCE)?;
                wait_ack(&mut ack)?;
                run.record(t.elapsed());
                rhuge = rhuge.max(wait_for(&mut ack, OP_READY)?);
            }
        }
        Kind::Auto | Kind::Inline => {
            let src = vec![0x5a; n];
            if kind == Kind::Auto {
                run.note("crossover_bytes", auto::crossover() as u64);
            }
            while run.more() {
                let t = Instant::now();
                let msg = if kind == Kind::Auto {
                    auto::attach(Message::new(OP_DATA), &src).map_err(skip)?
                } else {
                    Message::new(OP_DATA).with_body(src.as_slice())
                };
                tx.send(msg, PATIENCE)?;
                wait_ack(&mut ack)?;
                run.record(t.elapsed());
                rhuge = rhuge.max(wait_for(&mut ack, OP_READY)?);
            }
        }
    }
    note_huge(run, rhuge, shuge);
    drop(tx);
    peer.wait()?;
    Ok(())
}

/// The producer of `forward`: on each request it sends the middle one
/// region of `n` bytes in `kind`'s mode.
fn producer(kind: Kind, n: usize, mut want: ReceiveRight, out: SendRight) -> io::Result<()> {
    let mut copy_src: Option<Region> = None;
    let pool = if kind == Kind::Lend { Some(LendPool::new(1, n).map_err(other)?) } else { None };
    let mut filled = false;
    loop {
        match want.recv(Timeout::Infinite) {
            Ok(_) => {}
            Err(RecvError::NoSenders) => return Ok(()),
            Err(e) => return Err(other(e)),
        }
        let item: RegionItem = match kind {
            Kind::Move | Kind::MovePool | Kind::MoveHuge => {
                let mut r = Region::new(n).map_err(other)?;
                r.as_mut_slice().fill(0x5a);
                r.by_move().map_err(other)?
            }
            Kind::Lend => {
                let mut lease = pool.as_ref().expect("made above").acquire(Timeout::Infinite).map_err(other)?;
                if !filled {
                    lease.as_mut_slice().fill(0x5a);
                    filled = true;
                }
                lease.lend().map_err(other)?
            }
            _ => {
                let r = match &mut copy_src {
                    Some(r) => r,
                    None => {
                        let mut r = Region::new(n).map_err(other)?;
                        r.as_mut_slice().fill(0x5a);
                        copy_src.insert(r)
                    }
                };
                r.by_copy().map_err(other)?
            }
        };
        out.send(Message::new(OP_DATA).with_item(item), Timeout::Infinite).map_err(other)?;
    }
}

fn forward(run: &mut Run<'_>, kind: Kind) -> Result<(), Skip> {
    let n = run.bytes();
    // The producer first (regions only), so the receiver's ports do not leak into it.
    let mut upstream = None;
    if kind.uses_region() {
        let (want_rx, want_tx) = ferry::port()?;
        let (in_rx, in_tx) = ferry::port()?;
        let p = run.spawn(&[want_tx.as_fd()], move || producer(kind, n, want_rx, in_tx))?;
        upstream = Some((want_tx, in_rx, p));
    }
    let parent_ends: Vec<_> = upstream.iter().map(|u| u.0.as_fd()).collect();
    let (rx, tx) = data_port()?;
    let (mut ack, ack_tx) = ferry::port()?;
    let mut ends = parent_ends;
    ends.push(tx.as_fd());
    let last = run.spawn(&ends, move || receiver(kind, Touch::None, false, rx, ack_tx))?;
    drop(ends);
    let mut rhuge = 0;
    match &mut upstream {
        Some((want, inbox, _)) => {
            while run.more() {
                want.send(Message::new(OP_WANT), PATIENCE)?;
                let mut m = inbox.recv(PATIENCE)?;
                let Some(Item::Region(item)) = m.take_items().pop() else {
                    return Err(Skip::new("the producer's message came without its region"));
                };
                let t = Instant::now();
                tx.send(Message::new(OP_DATA).with_item(item), PATIENCE)?;
                wait_ack(&mut ack)?;
                run.record(t.elapsed());
                rhuge = rhuge.max(wait_for(&mut ack, OP_READY)?);
            }
        }
        None => {
            let src = vec![0x5a; n];
            while run.more() {
                let t = Instant::now();
                let msg = if kind == Kind::Auto {
                    auto::attach(Message::new(OP_DATA), &src).map_err(skip)?
                } else {
                    Message::new(OP_DATA).with_body(src.as_slice())
                };
                tx.send(msg, PATIENCE)?;
                wait_ack(&mut ack)?;
                run.record(t.elapsed());
                rhuge = rhuge.max(wait_for(&mut ack, OP_READY)?);
            }
        }
    }
    note_huge(run, rhuge, 0);
    run.note("processes", 3u64 - u64::from(!kind.uses_region()));
    drop(tx);
    last.wait()?;
    if let Some((want, inbox, p)) = upstream {
        drop(want);
        drop(inbox);
        p.wait()?;
    }
    Ok(())
}

fn stream(run: &mut Run<'_>, kind: Kind) -> Result<(), Skip> {
    let n = run.bytes();
    let (tx, mut ack, peer) = spawn_receiver(run, kind, Touch::None, true)?;
    let pool = if kind == Kind::Lend { Some(LendPool::new(2, n).map_err(skip)?) } else { None };
    // Made after the receiver is forked (a pool's filler thread stays in
    // the process that made it). Two ready: the filler stays a frame
    // ahead of the writer even when one frame took longer to make.
    let fresh = if matches!(kind, Kind::MovePool | Kind::MoveHuge) {
        Some(RegionPool::new(n, 2, RegionOptions::for_len(n)).map_err(skip)?)
    } else {
        None
    };
    let mut slots = [vec![0x5au8; if kind.uses_region() { 0 } else { n }], vec![0x5au8; if kind.uses_region() { 0 } else { n }]];
    let (mut rhuge, mut shuge) = (0u64, 0u64);
    let (mut sent, mut acked) = (0u64, 0u64);
    let mut last = Instant::now();
    while run.more() {
        if sent - acked == 2 {
            rhuge = rhuge.max(wait_ack(&mut ack)?);
            acked += 1;
            per_pair(run, &mut last, acked);
        }
        let k = (sent as u8) | 1;
        let msg = match kind {
            Kind::CopyLazy | Kind::CopyImmediate | Kind::Move | Kind::MovePool | Kind::MoveHuge => {
                let region = match &fresh {
                    Some(p) => {
                        let mut r = p.take().map_err(skip)?;
                        r.as_mut_slice().fill(k);
                        r
                    }
                    None => filled_region(n, k)?,
                };
                if sent == 0 {
                    // smaps is slow: look once per round.
                    shuge = region.huge_bytes_mapped();
                }
                let mut region = region;
                let item = if kind.moves() { region.by_move() } else { region.by_copy() }.map_err(skip)?;
                Message::new(OP_DATA).with_item(item)
            }
            Kind::Lend => {
                let mut lease = pool.as_ref().expect("made above").acquire(PATIENCE).map_err(skip)?;
                lease.as_mut_slice().fill(k);
                Message::new(OP_DATA).with_item(lease.lend().map_err(skip)?)
            }
            Kind::Auto | Kind::Inline => {
                let slot = &mut slots[(sent % 2) as usize];
                slot.fill(k);
                if kind == Kind::Auto {
                    auto::attach(Message::new(OP_DATA), slot).map_err(skip)?
                } else {
                    Message::new(OP_DATA).with_body(slot.as_slice())
                }
            }
        };
        tx.send(msg, PATIENCE)?;
        sent += 1;
    }
    while acked < sent {
        rhuge = rhuge.max(wait_ack(&mut ack)?);
        acked += 1;
        per_pair(run, &mut last, acked);
    }
    if acked % 2 == 1 {
        run.record(last.elapsed());
    }
    run.note("in_flight", 2u64);
    if let Some(p) = &fresh {
        run.note("pool_misses", p.misses());
    }
    note_huge(run, rhuge, shuge);
    drop(tx);
    peer.wait()?;
    Ok(())
}
