//! The automatic choice between inline bytes and a region for data already
//! in ordinary memory, at a crossover measured on this machine.
//!
//! [`attach`] puts `data` in the message body when it is shorter than
//! [`crossover`], and otherwise copies it once into a sealed region
//! ([`RegionItem::copied_from`]) marked as the payload; [`take`] gets it back
//! on the receiving side either way. [`measure`] times both paths end to end
//! (build, send, receive, read every byte) through a port in this process
//! and returns the smallest size at which the region path wins; the first
//! call of [`crossover`] runs it once and caches the result for the process.

use std::ops::Deref;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{MapOptions, MappedRegion, RegionError, RegionItem};
use crate::message::{Item, Message, MAX_INLINE};
use crate::timeout::Timeout;

/// Largest body [`attach`] puts inline: the inline limit less room for
/// whatever body the caller's protocol has.
pub const INLINE_CAP: usize = MAX_INLINE;

/// Result of [`measure`].
#[derive(Clone, Debug, PartialEq)]
pub struct Crossover {
    /// Smallest payload size, in bytes, from which a region beats inline
    /// bytes; [`INLINE_CAP`] + 1 when inline won at every size it can carry.
    pub bytes: usize,
    /// Each size tried, with the median nanoseconds of one inline round and
    /// one region round.
    pub samples: Vec<(usize, u64, u64)>,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn checksum(b: &[u8]) -> u64 {
    // Read every byte, as a receiver would.
    b.chunks(8).fold(0u64, |a, c| a.wrapping_add(c.iter().fold(0u64, |x, &y| x.wrapping_mul(31).wrapping_add(y as u64))))
}

fn round(data: &[u8], region: bool, port: &mut (crate::ReceiveRight, crate::SendRight)) -> Result<u64, RegionError> {
    let start = Instant::now();
    let msg = if region {
        Message::new(0).with_item(RegionItem::copied_from(data)?)
    } else {
        Message::new(0).with_body(data.to_vec())
    };
    port.1.send(msg, Timeout::Infinite).map_err(|e| RegionError::Io(std::io::Error::other(e.to_string())))?;
    let mut m = port.0.recv(Timeout::Infinite).map_err(|e| RegionError::Io(std::io::Error::other(e.to_string())))?;
    let sum = if region {
        let Some(Item::Region(r)) = m.take_items().pop() else {
            return Err(RegionError::Io(std::io::Error::other("region lost in transit")));
        };
        checksum(&r.map(MapOptions::lazy()).map_err(|e| e.error)?)
    } else {
        checksum(m.body())
    };
    std::hint::black_box(sum);
    Ok(start.elapsed().as_nanos() as u64)
}

/// Measures the crossover now (a few hundred milliseconds at most): for
/// sizes from 1 KiB doubling up to [`INLINE_CAP`], the median of `rounds`
/// end-to-end rounds of each path.
pub fn measure(rounds: usize) -> Result<Crossover, RegionError> {
    let rounds = rounds.max(3);
    let mut port = crate::port().map_err(RegionError::Alloc)?;
    port.1.set_queue_limit(4 * MAX_INLINE).map_err(RegionError::Alloc)?;
    let mut samples = Vec::new();
    let mut size = 1024;
    let mut bytes = INLINE_CAP + 1;
    let budget = Instant::now() + Duration::from_secs(2);
    while size <= INLINE_CAP {
        let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
        // Warm both paths once.
        round(&data, false, &mut port)?;
        round(&data, true, &mut port)?;
        let mut inline = Vec::with_capacity(rounds);
        let mut region = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            inline.push(round(&data, false, &mut port)?);
            region.push(round(&data, true, &mut port)?);
        }
        let (i, r) = (median(inline), median(region));
        samples.push((size, i, r));
        if r < i && bytes > INLINE_CAP {
            bytes = size;
        }
        if Instant::now() > budget {
            break;
        }
        size *= 2;
    }
    Ok(Crossover { bytes, samples })
}

/// The crossover for this process: measured on first use (with 15 rounds
/// per size), then cached. If the measurement cannot run, the inline cap
/// plus one (inline whenever possible).
pub fn crossover() -> usize {
    static C: OnceLock<usize> = OnceLock::new();
    *C.get_or_init(|| measure(15).map(|c| c.bytes).unwrap_or(INLINE_CAP + 1))
}

/// Puts `data` into `msg`: as the body when shorter than [`crossover`] (the
/// body is replaced), else copied once into a by-value region appended as
/// an item marked as the payload. Either way the bytes are copied once.
pub fn attach(msg: Message, data: &[u8]) -> Result<Message, RegionError> {
    if data.len() < crossover() {
        Ok(msg.with_body(data.to_vec()))
    } else {
        Ok(msg.with_item(RegionItem::copied_from(data)?.mark_auto()))
    }
}

/// A payload taken out of a message by [`take`].
#[derive(Debug)]
pub enum Payload {
    /// It came inline.
    Inline(Vec<u8>),
    /// It came in a region, now mapped (lazily, read-only).
    Mapped(MappedRegion),
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Inline(v) => v,
            Payload::Mapped(m) => m,
        }
    }
}

/// Takes the payload [`attach`] put into a received message: the region item
/// marked as the payload if there is one (removed from the items), else the
/// body (taken out of the message).
pub fn take(msg: &mut Message) -> Result<Payload, RegionError> {
    let items = msg.take_items();
    let mut rest = Vec::with_capacity(items.len());
    let mut found = None;
    for it in items {
        match it {
            Item::Region(r) if found.is_none() && r.is_auto() => found = Some(r),
            other => rest.push(other),
        }
    }
    for it in rest {
        *msg = std::mem::take(msg).with_item(it);
    }
    match found {
        Some(r) => Ok(Payload::Mapped(r.map(MapOptions::lazy().read_only()).map_err(|e| e.error)?)),
        None => Ok(Payload::Inline(std::mem::take(msg.body_mut()))),
    }
}
