//! Peer roles for the regions tests: senders in every transfer mode, a lend
//! pool streaming frames, a hostile sender that tries every trick on the
//! memfds it sends, a flood of regions for the reclamation test, and a sink
//! that holds a mapping until it is killed.
//!
//! The hostile role is the one place here with `unsafe`: it must map memfds
//! behind ferry's back, as an attacker would.

use std::error::Error;
use std::io::{IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use ferry::region::{LendPool, Region, RegionItem, SharedRegion};
use ferry::wire::{self, ItemDesc};
use ferry::{counters, Bootstrap, Item, Message, SendRight, Timeout};
use rustix::fs::{FallocateFlags, MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use crate::Outcome;

type Res = Result<(), Box<dyn Error>>;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let num = |i: usize| arg(i).parse::<usize>().unwrap_or(0);
    Some(match role {
        "region-copy" => copy_sender(&arg(0)),
        "region-move" => move_sender(&arg(0)),
        "region-lend" => lender(&arg(0), num(1), num(2)),
        "region-share" => sharer(&arg(0)),
        "region-hostile" => hostile(&arg(0)),
        "region-flood" => flood(&arg(0), num(1), num(2)),
        "region-sink" => sink(&arg(0)),
        "region-borrow-attack" => borrow_attack(&arg(0)),
        _ => return None,
    })
}

fn lookup(name: &str) -> Result<SendRight, Box<dyn Error>> {
    // Dropped at once: the connection to the name server closes here.
    Ok(Bootstrap::connect()?.lookup(name)?)
}

fn fill(b: &mut [u8], v: u8) {
    b.iter_mut().for_each(|x| *x = v);
}

/// Sends a region by copy, then writes its own copy; checks that the
/// receiver's writes never reach it; sends again after writing.
fn copy_sender(name: &str) -> Res {
    let to = lookup(name)?;
    let (mut rx, me) = ferry::port()?;
    let mut r = Region::new(1 << 20)?;
    fill(r.as_mut_slice(), b'A');
    to.send(Message::new(1).with_item(r.by_copy()?).with_item(me), Timeout::Infinite)?;
    fill(r.as_mut_slice(), b'B');
    to.send(Message::new(2), Timeout::Infinite)?;
    let m = rx.recv(Timeout::Infinite)?;
    if m.op() != 3 {
        return Err(format!("expected op 3, got {}", m.op()).into());
    }
    if !r.as_slice().iter().all(|&b| b == b'B') {
        return Err("the receiver's writes reached the sender's copy".into());
    }
    let before = counters::snapshot();
    to.send(Message::new(4).with_item(r.by_copy()?), Timeout::Infinite)?;
    let d = counters::snapshot().since(&before);
    println!("sender-ok resend_copied={}", d.bytes_copied);
    Ok(())
}

/// Sends the same region twice from one address: by copy, then by move.
fn move_sender(name: &str) -> Res {
    let to = lookup(name)?;
    let mut r = Region::new(256 << 10)?;
    for (i, b) in r.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let addr = r.addr();
    to.send(Message::new(1).with_body(addr.to_le_bytes()).with_item(r.by_copy()?), Timeout::Infinite)?;
    to.send(Message::new(2).with_body(addr.to_le_bytes()).with_item(r.by_move()?), Timeout::Infinite)?;
    println!("addr={addr:#x}");
    Ok(())
}

/// Streams `frames` frames through a pool of `pool` regions.
fn lender(name: &str, frames: usize, pool: usize) -> Res {
    let to = lookup(name)?;
    let before = counters::snapshot();
    let p = LendPool::new(pool, 64 << 10)?;
    let mut slots = std::collections::BTreeSet::new();
    for i in 0..frames {
        let mut lease = p.acquire(Timeout::After(std::time::Duration::from_secs(20)))?;
        slots.insert(lease.slot());
        let s = lease.as_mut_slice();
        s[..8].copy_from_slice(&(i as u64).to_le_bytes());
        fill(&mut s[8..], i as u8);
        lease.set_len(32 << 10)?;
        to.send(Message::new(i as u32).with_item(lease.lend()?), Timeout::Infinite)?;
    }
    let d = counters::snapshot().since(&before);
    // Wait until every frame came back, then report.
    while p.available() < pool {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    println!("allocated={} slots={} lent={}", d.regions_allocated, slots.len(), d.regions_sent_lend);
    Ok(())
}

/// Shares a region and talks through it with atomics.
fn sharer(name: &str) -> Res {
    use std::sync::atomic::Ordering::SeqCst;
    let to = lookup(name)?;
    let (mut rx, me) = ferry::port()?;
    let s = SharedRegion::new(4096)?;
    to.send(Message::new(1).with_item(s.share()?).with_item(me), Timeout::Infinite)?;
    rx.recv(Timeout::Infinite)?;
    let seen = s.as_atomic_u64()[1].load(SeqCst);
    s.as_atomic_u64()[2].store(seen + 1, SeqCst);
    to.send(Message::new(2), Timeout::Infinite)?;
    println!("saw={seen}");
    Ok(())
}

/// Sends the bytes of a hand-made message with the given descriptors.
fn raw_send(to: &SendRight, op: u32, descs: &[ItemDesc], fds: &[BorrowedFd<'_>]) -> Res {
    let mut bytes = Vec::new();
    wire::encode(&mut bytes, op, 0, descs, b"");
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        control.push(rustix::net::SendAncillaryMessage::ScmRights(fds));
    }
    rustix::net::sendmsg(to, &[IoSlice::new(&bytes)], &mut control, rustix::net::SendFlags::NOSIGNAL)?;
    Ok(())
}

fn memfd_with(len: u64, seals: SealFlags, byte: u8) -> Result<OwnedFd, Box<dyn Error>> {
    let fd = rustix::fs::memfd_create("hostile", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, len)?;
    let data = vec![byte; len as usize];
    let mut at = 0;
    while at < data.len() {
        at += rustix::io::pwrite(&fd, &data[at..], at as u64)?;
    }
    if !seals.is_empty() {
        rustix::fs::fcntl_add_seals(&fd, seals)?;
    }
    Ok(fd)
}

fn region_desc(mode: u8, fds: u16, len: u64) -> ItemDesc {
    ItemDesc { kind: wire::KIND_REGION, mode, fds, len, ..Default::default() }
}

const LEN: u64 = 64 << 10;

/// A sender that lies and cheats. Each hand-made message is numbered by its
/// op; the test expects a typed rejection of each, then a sound region it
/// maps, after which this role attacks that region every way it can and
/// reports what the kernel allowed.
fn hostile(name: &str) -> Res {
    let to = lookup(name)?;
    let all = SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    let size = SealFlags::SHRINK | SealFlags::GROW;

    // 1: an unsealed memfd claiming copy.
    let f = memfd_with(LEN, SealFlags::empty(), 1)?;
    raw_send(&to, 1, &[region_desc(wire::MODE_COPY, 1, LEN)], &[f.as_fd()])?;
    // 2: sealed against resizing only, claiming copy.
    let f = memfd_with(LEN, size, 2)?;
    raw_send(&to, 2, &[region_desc(wire::MODE_COPY, 1, LEN)], &[f.as_fd()])?;
    // 3: F_SEAL_FUTURE_WRITE (existing shared mappings stay writable), claiming move.
    let f = memfd_with(LEN, size | SealFlags::FUTURE_WRITE, 3)?;
    raw_send(&to, 3, &[region_desc(wire::MODE_MOVE, 1, LEN)], &[f.as_fd()])?;
    // 4: a shared writable mapping kept open while "sealing": the seal must
    // fail, and what is sent unsealed must be refused.
    let f = memfd_with(LEN, SealFlags::empty(), 4)?;
    // SAFETY: a fresh shared mapping chosen by the kernel (null hint), of a
    // memfd this function owns; it is only written through a raw pointer and
    // unmapped below.
    let p = unsafe {
        rustix::mm::mmap(std::ptr::null_mut(), LEN as usize, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &f, 0)?
    };
    let busy = rustix::fs::fcntl_add_seals(&f, all).is_err();
    rustix::fs::fcntl_add_seals(&f, size)?;
    raw_send(&to, 4, &[region_desc(wire::MODE_COPY, 1, LEN)], &[f.as_fd()])?;
    // SAFETY: `p` is the LEN-byte writable mapping made above.
    unsafe { p.cast::<u8>().write(44) };
    // 5: properly sealed but lying about its length.
    let f = memfd_with(4096, all, 5)?;
    raw_send(&to, 5, &[region_desc(wire::MODE_COPY, 1, 1 << 20)], &[f.as_fd()])?;
    // 6: not a memfd at all.
    let (pr, _pw) = rustix::pipe::pipe()?;
    raw_send(&to, 6, &[region_desc(wire::MODE_COPY, 1, LEN)], &[pr.as_fd()])?;
    // 7: lent, but the return right is a pipe.
    let f = memfd_with(LEN, size, 7)?;
    raw_send(&to, 7, &[region_desc(wire::MODE_LEND, 2, LEN)], &[f.as_fd(), pr.as_fd()])?;
    // 8: lent, but the memfd can still shrink under the borrower.
    let f = memfd_with(LEN, SealFlags::empty(), 8)?;
    let (a, _b) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    raw_send(&to, 8, &[region_desc(wire::MODE_LEND, 2, LEN)], &[f.as_fd(), a.as_fd()])?;
    // 9: an unknown mode.
    let f = memfd_with(LEN, all, 9)?;
    raw_send(&to, 9, &[region_desc(7, 1, LEN)], &[f.as_fd()])?;
    // 10: the descriptor count disagrees with the mode.
    raw_send(&to, 10, &[region_desc(wire::MODE_COPY, 2, LEN)], &[f.as_fd(), a.as_fd()])?;

    // 11: a sound region, with a way to tell us to attack.
    let f = memfd_with(LEN, all, 0x5a)?;
    // SAFETY: as above: a fresh private mapping of a memfd we own, written
    // through a raw pointer only, never unmapped while used.
    let private = unsafe {
        rustix::mm::mmap(std::ptr::null_mut(), LEN as usize, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE, &f, 0)?
    };
    let (mut rx, me) = ferry::port()?;
    let me_desc = ItemDesc { kind: wire::KIND_SEND, fds: 1, ..Default::default() };
    raw_send(&to, 11, &[region_desc(wire::MODE_COPY, 1, LEN), me_desc], &[f.as_fd(), me.as_fd()])?;
    drop(me);
    rx.recv(Timeout::Infinite)?; // the receiver has mapped it

    let mut report = Vec::new();
    let mut allowed = Vec::new();
    let mut note = |what: &str, ok: bool| {
        report.push(format!("{what}={}", if ok { "ALLOWED" } else { "refused" }));
        if ok {
            allowed.push(what.to_owned());
        }
    };
    note("write", rustix::io::pwrite(&f, b"evil", 0).is_ok());
    // SAFETY: asking for a new shared writable mapping; if the kernel grants
    // it (it must not), it is unmapped at once without being used.
    let shared = unsafe {
        rustix::mm::mmap(std::ptr::null_mut(), LEN as usize, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &f, 0)
    };
    if let Ok(q) = shared {
        // SAFETY: `q` is the mapping just made; unmapped once.
        let _ = unsafe { rustix::mm::munmap(q, LEN as usize) };
    }
    note("mmap-shared-write", shared.is_ok());
    // SAFETY: a new read-only shared mapping, unmapped below.
    let ro = unsafe { rustix::mm::mmap(std::ptr::null_mut(), LEN as usize, ProtFlags::READ, MapFlags::SHARED, &f, 0)? };
    // SAFETY: changes the protection of the mapping made just above only.
    let upgraded = unsafe { rustix::mm::mprotect(ro, LEN as usize, rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE) };
    note("mprotect-shared-write", upgraded.is_ok());
    // SAFETY: unmaps the mapping made above, once.
    let _ = unsafe { rustix::mm::munmap(ro, LEN as usize) };
    note("ftruncate-shrink", rustix::fs::ftruncate(&f, 4096).is_ok());
    note("ftruncate-grow", rustix::fs::ftruncate(&f, LEN * 2).is_ok());
    note(
        "punch-hole",
        rustix::fs::fallocate(&f, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, 0, LEN).is_ok(),
    );
    note("fallocate-grow", rustix::fs::fallocate(&f, FallocateFlags::empty(), 0, LEN * 2).is_ok());
    let reopened = rustix::fs::open(
        format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f)).as_str(),
        rustix::fs::OFlags::RDWR,
        rustix::fs::Mode::empty(),
    );
    note("reopen-write", matches!(&reopened, Ok(g) if rustix::io::pwrite(g, b"evil", 0).is_ok()));
    // Writing our own private mapping is allowed and must stay private.
    // SAFETY: `private` is the LEN-byte private writable mapping made above.
    unsafe { std::ptr::write_bytes(private.cast::<u8>(), 0xee, LEN as usize) };
    println!("seal-with-shared-mapping={} {}", if busy { "refused" } else { "ALLOWED" }, report.join(" "));
    std::io::stdout().flush()?;
    to.send(Message::new(12).with_body(allowed.join(",")), Timeout::Infinite)?;

    // 13: an honest region afterwards; the receiver must still be serving.
    let mut r = Region::new(8192)?;
    fill(r.as_mut_slice(), 0x13);
    to.send(Message::new(13).with_item(r.by_copy()?), Timeout::Infinite)?;
    if busy {
        Ok(())
    } else {
        Err("the kernel sealed a memfd with a live shared writable mapping".into())
    }
}

/// Sends `count` regions of `size` bytes, every page written, cycling
/// through copy, move and copied-from; then waits to be told to exit.
fn flood(name: &str, count: usize, size: usize) -> Res {
    let to = lookup(name)?;
    let (mut rx, me) = ferry::port()?;
    to.send(Message::new(0).with_item(me), Timeout::Infinite)?;
    let scratch = vec![7u8; size];
    for i in 0..count {
        let item: RegionItem = match i % 3 {
            0 => {
                let mut r = Region::new(size)?;
                fill(r.as_mut_slice(), i as u8);
                r.by_copy()?
            }
            1 => {
                let mut r = Region::new(size)?;
                fill(r.as_mut_slice(), i as u8);
                r.by_move()?
            }
            _ => RegionItem::copied_from(&scratch)?,
        };
        to.send(Message::new(1).with_item(item), Timeout::Infinite)?;
    }
    rx.recv(Timeout::Infinite)?;
    Ok(())
}

/// Registers `name`, maps what arrives immediately, says so, and holds on
/// until killed.
fn sink(name: &str) -> Res {
    let (mut rx, tx) = ferry::port()?;
    Bootstrap::connect()?.register(name, &tx)?;
    drop(tx);
    let mut held = Vec::new();
    loop {
        let mut m = rx.recv(Timeout::Infinite)?;
        for it in m.take_items() {
            if let Item::Region(r) = it {
                // It takes lent regions too, as shared mappings.
                let v = r.map_shared(ferry::MapOptions::immediate())?;
                println!("mapped {}", v.len());
                std::io::stdout().flush()?;
                held.push(v);
            }
        }
    }
}

/// Tries every way of writing through `f` (a descriptor of a lent slot, or
/// one reopened from it): `write`, a new shared writable mapping, `mprotect`
/// of a shared read-only mapping, `ftruncate`, hole punching, growing. Each
/// attempt is reported as `TAG-what=ALLOWED|refused`.
fn write_attempts(f: BorrowedFd<'_>, len: usize, tag: &str, report: &mut Vec<String>, allowed: &mut Vec<String>) {
    let mut note = |what: &str, ok: bool| {
        report.push(format!("{tag}-{what}={}", if ok { "ALLOWED" } else { "refused" }));
        if ok {
            allowed.push(format!("{tag}-{what}"));
        }
    };
    note("write", rustix::io::pwrite(f, b"evil", 0).is_ok());
    // SAFETY: asks for a new shared writable mapping chosen by the kernel;
    // if granted (it must not be), it is written once through the raw
    // pointer, as an attacker would, and unmapped at once.
    let shared = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, f, 0) };
    if let Ok(q) = shared {
        // SAFETY: `q` is the len-byte writable mapping just made; written
        // through the raw pointer only, then unmapped once.
        unsafe {
            q.cast::<u8>().write(0xEE);
            let _ = rustix::mm::munmap(q, len);
        }
    }
    note("mmap-shared-write", shared.is_ok());
    // SAFETY: a new read-only shared mapping chosen by the kernel, unmapped below.
    match unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ, MapFlags::SHARED, f, 0) } {
        Ok(ro) => {
            // SAFETY: changes the protection of the mapping made just above only.
            let up = unsafe { rustix::mm::mprotect(ro, len, rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE) };
            if up.is_ok() {
                // SAFETY: the mapping is len bytes and (wrongly) writable now.
                unsafe { ro.cast::<u8>().write(0xEE) };
            }
            note("mprotect-shared-write", up.is_ok());
            // SAFETY: unmaps the mapping made above, once.
            let _ = unsafe { rustix::mm::munmap(ro, len) };
        }
        Err(_) => note("mmap-shared-read", false),
    }
    note("ftruncate", rustix::fs::ftruncate(f, 0).is_ok());
    note("punch-hole", rustix::fs::fallocate(f, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, 0, len as u64).is_ok());
    note("fallocate-grow", rustix::fs::fallocate(f, FallocateFlags::empty(), 0, 2 * len as u64).is_ok());
}

/// Reopens `f` through `/proc/self/fd` for reading and writing.
fn reopen_rw(f: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
    rustix::fs::open(path.as_str(), rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
}

/// A borrower that attacks the lender's pool. It gives the lender (the port
/// NAME) a raw socket as a "send right", so that it receives the lent slot's
/// descriptors itself, with `recvmsg`, as an attacker would; tries every
/// write path on the slot's descriptor and on one reopened from it (op 2
/// reports what the kernel allowed); returns the slot but keeps both
/// descriptors; when told (op 3) that the lender wrote its next frame into
/// the same slot, tries again with what it kept (op 4).
fn borrow_attack(name: &str) -> Res {
    let to = lookup(name)?;
    let (mine, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    raw_send(&to, 1, &[ItemDesc { kind: wire::KIND_SEND, fds: 1, ..Default::default() }], &[theirs.as_fd()])?;
    drop(theirs);
    let recv = |want: usize| -> Result<(Vec<u8>, Vec<OwnedFd>), Box<dyn Error>> {
        let mut buf = vec![0u8; wire::MAX_MESSAGE];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(&mine, &mut [std::io::IoSliceMut::new(&mut buf)], &mut control, rustix::net::RecvFlags::CMSG_CLOEXEC)?;
        let mut fds = Vec::new();
        for m in control.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
        if fds.len() != want {
            return Err(format!("expected {want} descriptors, got {}", fds.len()).into());
        }
        buf.truncate(got.bytes);
        Ok((buf, fds))
    };
    let (bytes, mut fds) = recv(2)?;
    let parsed = wire::parse(&bytes, 2)?;
    let len = parsed.items[0].len as usize;
    let back = fds.pop().expect("two");
    let slot = fds.pop().expect("two");
    let (mut report, mut allowed) = (Vec::new(), Vec::new());
    write_attempts(slot.as_fd(), len, "lent", &mut report, &mut allowed);
    let reopened = reopen_rw(slot.as_fd());
    match &reopened {
        Ok(g) => write_attempts(g.as_fd(), len, "reopened", &mut report, &mut allowed),
        Err(e) => report.push(format!("reopen={e}")),
    }
    println!("{}", report.join(" "));
    std::io::stdout().flush()?;
    // Return the slot, keeping both memory descriptors.
    drop(back);
    to.send(Message::new(2).with_body(allowed.join(",")), Timeout::Infinite)?;
    let (bytes, _) = recv(0)?;
    if wire::parse(&bytes, 0)?.op != 3 {
        return Err("expected op 3".into());
    }
    let (mut report, mut allowed) = (Vec::new(), Vec::new());
    write_attempts(slot.as_fd(), len, "kept", &mut report, &mut allowed);
    if let Ok(g) = &reopened {
        write_attempts(g.as_fd(), len, "kept-reopened", &mut report, &mut allowed);
    }
    println!("{}", report.join(" "));
    to.send(Message::new(4).with_body(allowed.join(",")), Timeout::Infinite)?;
    Ok(())
}
