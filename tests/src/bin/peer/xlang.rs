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
//!
//! `xlang3 NAME BYTES`, the hub of the three-language test (a Python
//! program and a C program, `crates/ferry-ffi/tests/c/xlang3.c`):
//! 1. registers `NAME` with a send right to its port;
//! 2. receives op 1 twice, once from each language, body `p` (Python) or
//!    `c` (C): a send right to the sender's port and a region by copy of
//!    `BYTES` bytes whose little-endian `u64` word `i` must be
//!    `word(i, salt)` with the sender's salt ([`PY_SALT`], [`C_SALT`]);
//! 3. passes each one the other's send right: op 2, body `r`, carrying that
//!    right and a region by copy of its own (`word(i, RUST_SALT)`), after
//!    which the two send each other op 4 with a region of their own words;
//! 4. prints `xlang3-ok`.

use std::error::Error;

use ferry::region::{MapOptions, Region};
use ferry::{Bootstrap, Item, Message, Timeout};

use crate::Outcome;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "xlang" => Some(exchange(args)),
        "xlang3" => Some(hub(args)),
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

/// The Python program's words are `word(i, PY_SALT)`.
pub const PY_SALT: u64 = 0x1111_1111_1111_1111;
/// The C program's words are `word(i, C_SALT)`.
pub const C_SALT: u64 = 0x2222_2222_2222_2222;
/// This program's words are `word(i, RUST_SALT)`.
pub const RUST_SALT: u64 = 0x3333_3333_3333_3333;

/// Word `i` of a region salted with `salt`.
fn word(i: usize, salt: u64) -> u64 {
    (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt
}

/// A region of `bytes` bytes by copy holding `word(i, salt)`.
fn salted(bytes: usize, salt: u64) -> Result<ferry::Item, Box<dyn Error>> {
    let mut region = Region::new(bytes)?;
    for (i, w) in region.as_mut_slice_of::<u64>().iter_mut().enumerate() {
        *w = word(i, salt).to_le();
    }
    Ok(region.by_copy()?.into())
}

fn hub(args: &[String]) -> Result<(), Box<dyn Error>> {
    let usage = "usage: xlang3 NAME BYTES";
    let name = args.first().ok_or(usage)?;
    let bytes: usize = args.get(1).ok_or(usage)?.parse()?;
    if bytes == 0 || !bytes.is_multiple_of(8) {
        return Err("BYTES must be a positive multiple of 8".into());
    }
    let limit = Timeout::After(std::time::Duration::from_secs(30));
    let mut bs = Bootstrap::connect()?;
    let (mut rx, tx) = ferry::port()?;
    bs.register(name, &tx)?;
    let (mut to_python, mut to_c) = (None, None);
    while to_python.is_none() || to_c.is_none() {
        let mut m = rx.recv(limit)?;
        if m.op() != 1 {
            return Err(format!("expected op 1, got {}", m.op()).into());
        }
        let (slot, salt) = match m.body() {
            b"p" => (&mut to_python, PY_SALT),
            b"c" => (&mut to_c, C_SALT),
            other => return Err(format!("op 1 from an unknown language {other:?}").into()),
        };
        if slot.is_some() {
            return Err("op 1 twice from one language".into());
        }
        let mut items = m.take_items().into_iter();
        let (Some(Item::Send(right)), Some(Item::Region(region)), None) = (items.next(), items.next(), items.next()) else {
            return Err("op 1 must carry a send right and a region".into());
        };
        if region.mode() != ferry::region::Mode::Copy {
            return Err(format!("region sent by {:?}, not by copy", region.mode()).into());
        }
        let mapped = region.map(MapOptions::immediate().read_only()).map_err(|e| e.error)?;
        let words = mapped.as_slice_of::<u64>();
        if words.len() * 8 != bytes {
            return Err(format!("region of {} bytes, expected {bytes}", words.len() * 8).into());
        }
        if let Some(i) = words.iter().enumerate().position(|(i, w)| u64::from_le(*w) != word(i, salt)) {
            return Err(format!("word {i} of the {:?} region is wrong", m.body()).into());
        }
        *slot = Some(right);
    }
    bs.unregister(name)?;
    let (to_python, to_c) = (to_python.expect("loop ends with both"), to_c.expect("loop ends with both"));
    // Each gets the other's right; the rights move through this process.
    let for_c = Message::new(2).with_body(*b"r").with_item(to_python.try_clone()?).with_item(salted(bytes, RUST_SALT)?);
    let for_python = Message::new(2).with_body(*b"r").with_item(to_c.try_clone()?).with_item(salted(bytes, RUST_SALT)?);
    to_c.send(for_c, limit)?;
    to_python.send(for_python, limit)?;
    println!("xlang3-ok");
    Ok(())
}
