//! Peer roles for the hostile-input tests: a process that floods a port
//! with malformed datagrams and real descriptors, written by hand with
//! `sendmsg`, and a well-behaved client that talks to the same port.
//!
//! `hostile-flood NAME COUNT` sends COUNT malformed datagrams to the port
//! registered as NAME and prints, one line each, the `WireError` (in `Debug`
//! form) the receiver must answer with, so the test can compare exactly.
//! `hostile-client NAME COUNT` sends COUNT valid messages, op `i` and body
//! `good message i`, every fifth one carrying a send right.
//! `hostile-huge-region NAME LEN` sends one region by move whose memfd is a
//! sparse, sealed file of LEN bytes (a petabyte costs its sender nothing).

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use ferry::wire::{self, ItemDesc, KIND_RECEIVE, KIND_SEND};
use ferry::{Bootstrap, Message, Timeout, WireError};
use rustix::net::{AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType};

use crate::Outcome;

type Res = Result<(), Box<dyn std::error::Error>>;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "hostile-flood" => Some(flood(args)),
        "hostile-client" => Some(client(args)),
        "hostile-huge-region" => Some(huge_region(args)),
        _ => None,
    }
}

fn target_and_count(args: &[String]) -> Result<(ferry::SendRight, usize), Box<dyn std::error::Error>> {
    let [name, count] = args else { return Err("usage: NAME COUNT".into()) };
    let right = Bootstrap::connect()?.lookup(name)?;
    Ok((right, count.parse()?))
}

/// Sends one datagram, waiting for room in the queue.
fn send_raw(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> rustix::io::Result<usize> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(wire::MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(rustix::io::Errno::TOOMANYREFS);
    }
    loop {
        match rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r,
        }
    }
}

fn encode(op: u32, flags: u8, items: &[ItemDesc], inline: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    wire::encode(&mut v, op, flags, items, inline);
    v
}

fn desc(kind: u8, fds: u16) -> ItemDesc {
    ItemDesc { kind, fds, ..Default::default() }
}

/// A small deterministic generator, so a failing run can be repeated.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// What the parser alone says of bytes that arrive with `nfds` descriptors.
fn parse_error(bytes: &[u8], nfds: usize) -> Result<WireError, Box<dyn std::error::Error>> {
    match wire::parse(bytes, nfds) {
        Err(e) => Ok(e),
        Ok(_) => Err(format!("generated garbage parses: {bytes:02x?}").into()),
    }
}

fn flood(args: &[String]) -> Res {
    let (target, count) = target_and_count(args)?;
    let sock = target.as_fd();
    let (pipe_r, pipe_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let ev = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
    let mem = rustix::fs::memfd_create("ferry-flood", rustix::fs::MemfdFlags::CLOEXEC)?;
    let (own_rx, own_tx): (OwnedFd, OwnedFd) =
        rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut out = String::new();
    for i in 0..count {
        let (bytes, fds, want): (Vec<u8>, Vec<BorrowedFd<'_>>, WireError) = match i % 10 {
            0 => (Vec::new(), vec![], WireError::Truncated { need: wire::HEADER_LEN, got: 0 }),
            1 => {
                let n = 1 + (rng.next() % 120) as usize;
                let mut b = rng.bytes(n);
                b[0] = b'X';
                let want = parse_error(&b, 1)?;
                (b, vec![pipe_w.as_fd()], want)
            }
            2 => (encode(1, 0, &[desc(KIND_SEND, 1)], b"pipe"), vec![pipe_r.as_fd()], WireError::NotAPort { item: 0 }),
            3 => (
                encode(1, 0, &[desc(KIND_SEND, 1)], b""),
                vec![ev.as_fd(), mem.as_fd()],
                WireError::FdCountMismatch { declared: 1, received: 2 },
            ),
            4 => {
                let mut b = encode(1, 0, &[], b"from the future");
                b[4] = 3;
                (b, vec![mem.as_fd()], WireError::UnknownVersion(3))
            }
            5 => {
                let mut b = encode(1, 0, &[], b"");
                b.resize(wire::MAX_MESSAGE + 1000, 0x55);
                (b, vec![pipe_r.as_fd()], WireError::Oversized)
            }
            6 => (
                encode(1, 0, &[desc(KIND_RECEIVE, 2)], b""),
                vec![own_rx.as_fd(), ev.as_fd()],
                WireError::NotAPort { item: 0 },
            ),
            7 => {
                let b = encode(1, wire::FLAG_REPLY, &[desc(KIND_RECEIVE, 1), desc(KIND_SEND, 1)], b"");
                let want = parse_error(&b, 2)?;
                (b, vec![own_rx.as_fd(), own_tx.as_fd()], want)
            }
            8 => {
                // The right magic and version, then noise.
                let mut b = encode(0, 0, &[], b"");
                let n = (rng.next() % 200) as usize;
                b.extend(rng.bytes(n));
                for (at, x) in b.iter_mut().enumerate().skip(5) {
                    *x = if at < wire::HEADER_LEN { rng.next() as u8 } else { *x };
                }
                let nfds = (rng.next() % 4) as usize;
                let fds = vec![mem.as_fd(); nfds];
                let want = parse_error(&b, nfds)?;
                (b, fds, want)
            }
            _ => {
                // An inline length that lies.
                let mut b = encode(1, 0, &[desc(KIND_SEND, 1)], &[0xEE; 50]);
                b[12..16].copy_from_slice(&100u32.to_le_bytes());
                let want = parse_error(&b, 1)?;
                (b, vec![own_tx.as_fd()], want)
            }
        };
        send_raw(sock, &bytes, &fds)?;
        out.push_str(&format!("{want:?}\n"));
    }
    print!("{out}");
    Ok(())
}

fn client(args: &[String]) -> Res {
    let (target, count) = target_and_count(args)?;
    let (_keep, right) = ferry::port()?;
    for i in 0..count {
        let mut m = Message::new(i as u32).with_body(format!("good message {i}"));
        if i % 5 == 0 {
            m = m.with_item(right.try_clone()?);
        }
        target.send(m, Timeout::Infinite)?;
    }
    Ok(())
}

/// Sends one by-move region whose memfd is LEN bytes long and holds nothing:
/// every rule of the format is kept, only the size is absurd.
fn huge_region(args: &[String]) -> Res {
    let (target, len) = target_and_count(args)?;
    let mem = rustix::fs::memfd_create("ferry-huge", rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&mem, len as u64)?;
    use rustix::fs::SealFlags;
    rustix::fs::fcntl_add_seals(&mem, SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    let d = ItemDesc { kind: wire::KIND_REGION, mode: wire::MODE_MOVE, fds: 1, len: len as u64, ..Default::default() };
    send_raw(target.as_fd(), &encode(1, 0, &[d], b"huge"), &[mem.as_fd()])?;
    println!("sent");
    Ok(())
}
