//! The Rust side of the cross-language tests (Python, C): exchanges rights
//! and by-value regions with a program written in another language.
//!
//! `xlang NAME BYTES`:
//! 1. looks `NAME` up and sends op 1 carrying a send right to a fresh port
//!    of its own and a region of `BYTES` bytes sent by copy, byte `i` being
//!    `i % 251`; the body is `BYTES` as a little-endian `u64`;
//! 2. receives op 2 on its port: a by-value region of little-endian `u64`s
//!    (their count in the body) and a reply right; checks that the region
//!    is by value, maps it read-only and sums the words;
//! 3. replies op 3 through the reply right with the sum (`u64`, little
//!    endian), and prints `xlang-ok sum=SUM mode=MODE`.

use std::error::Error;

use ferry::region::{MapOptions, Region};
use ferry::{Bootstrap, Item, Message, Timeout};

use crate::Outcome;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "xlang" => Some(exchange(args)),
        _ => None,
    }
}

fn exchange(args: &[String]) -> Result<(), Box<dyn Error>> {
    let name = args.first().ok_or("usage: xlang NAME BYTES")?;
    let bytes: usize = args.get(1).ok_or("usage: xlang NAME BYTES")?.parse()?;
    let limit = Timeout::After(std::time::Duration::from_secs(30));
    let mut bs = Bootstrap::connect()?;
    let mut to_peer = None;
    for _ in 0..2000 {
        match bs.lookup(name) {
            Ok(r) => {
                to_peer = Some(r);
                break;
            }
            Err(ferry::NameError::NotFound) => std::thread::sleep(std::time::Duration::from_millis(5)),
            Err(e) => return Err(e.into()),
        }
    }
    let to_peer = to_peer.ok_or_else(|| format!("{name} never registered"))?;

    let (mut rx, me) = ferry::port()?;
    let mut region = Region::new(bytes)?;
    for (i, b) in region.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let msg = Message::new(1).with_body((bytes as u64).to_le_bytes()).with_item(me).with_item(region.by_copy()?);
    to_peer.send(msg, limit)?;

    let mut m = rx.recv(limit)?;
    if m.op() != 2 {
        return Err(format!("expected op 2, got {}", m.op()).into());
    }
    let count = u64::from_le_bytes(m.body().get(..8).ok_or("short body")?.try_into()?) as usize;
    let reply = m.take_reply().ok_or("no reply right")?;
    let mut items = m.take_items().into_iter();
    let Some(Item::Region(item)) = items.next() else {
        return Err("op 2 carries no region".into());
    };
    let mode = item.mode();
    if !mode.is_by_value() {
        return Err(format!("region sent by {mode:?}, not by value").into());
    }
    let mapped = item.map(MapOptions::immediate().read_only()).map_err(|e| e.error)?;
    let words = mapped.as_slice_of::<u64>();
    if words.len() < count {
        return Err(format!("region holds {} words, body says {count}", words.len()).into());
    }
    let sum: u64 = words[..count].iter().fold(0u64, |a, &w| a.wrapping_add(u64::from_le(w)));
    reply.send(Message::new(3).with_body(sum.to_le_bytes()), limit)?;
    println!("xlang-ok sum={sum} mode={mode:?}");
    Ok(())
}
