//! Fuzz targets: one entry point per parser that reads another process's
//! bytes, shared by the stable runner of the test suite (`tests/tests/fuzz.rs`,
//! over the committed corpus plus deterministic mutations) and the
//! coverage-guided cargo-fuzz targets under `fuzz/` (see `docs/fuzzing.md`).
//!
//! Only built with the non-default `fuzzing` feature, and not part of the
//! supported API. Each entry point takes arbitrary bytes, never fails, and
//! panics when an invariant breaks:
//!
//! - [`wire`]: `wire::parse` and the descriptor checks of a received message,
//!   with real descriptors attached (ports, sealed and unsealed memfds,
//!   pipes, stream sockets, userfaultfds); no panic, a parse that succeeds
//!   encodes back to the same bytes, a message that is accepted lowers back
//!   to the same layout, and every descriptor that came in is closed once the
//!   message is dropped or refused.
//! - [`names`]: a [`NameServer`](crate::NameServer) in this process, fed raw
//!   datagrams and well- or ill-formed messages on a connection of its real
//!   socket; afterwards it must still register and look up a name for a
//!   fresh client, and must have let go of every descriptor sent to it.
//! - [`pager`]: a [`FileServer`](crate::fileserver::FileServer) (and so the
//!   object server under it) on a thread, fed raw datagrams and messages with
//!   fuzzed operations, bodies and items through its port; afterwards it must
//!   still serve a file to a good client, and must have let go of every
//!   descriptor sent to it once their ports are gone.
//! - [`objects`]: an [`ObjectServer`](crate::pager::ObjectServer) hosting
//!   objects of every configuration (copy, zero-copy, dirty-tracking), fed
//!   the same way; afterwards a good client must map an object and read its
//!   bytes.
//! - [`rpc_slot`]: the checks of an RPC slot received from a peer and the
//!   copy-out-then-check reads of requests and replies from it.
//! - [`rpc_frame`]: the RPC handshake and the framed requests and replies
//!   read from a connection socket.
//!
//! Servers are fuzzed as black boxes through their sockets, so the targets
//! stay valid while the servers' insides change.

use std::collections::HashSet;
use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::fs::SealFlags;

use crate::message::Message;
use crate::port::{ReceiveRight, SendRight};
use crate::rpc::{frame, slot};
use crate::sys::{mem, socket, uffd};
use crate::timeout::Timeout;
use crate::wire::{self, ItemDesc};

/// A fuzz target: takes any bytes, panics when an invariant breaks.
pub type Target = fn(&[u8]);

/// Every target, by the name its corpus directory and cargo-fuzz binary use.
pub const TARGETS: &[(&str, Target)] = &[
    ("wire", wire),
    ("names", names),
    ("pager", pager),
    ("objects", objects),
    ("rpc_slot", rpc_slot),
    ("rpc_frame", rpc_frame),
];

/// Most real descriptors a target attaches to one datagram (the parser alone
/// sees counts up to 255).
const MAX_REAL_FDS: usize = 24;

/// How long a server may take to let go of descriptors whose ports are gone.
const RELEASE_LIMIT: Duration = Duration::from_secs(10);

static SERIAL: AtomicU64 = AtomicU64::new(0);

fn serial() -> u64 {
    SERIAL.fetch_add(1, Ordering::Relaxed)
}

// ---------------------------------------------------------------------------
// Descriptors of every kind, and the check that they were let go.

/// Kinds of descriptor a target attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One end of a fresh `SOCK_SEQPACKET` pair (a port's socket).
    Port,
    /// A memfd sealed as a by-value region is (`len` bytes).
    Sealed(u64),
    /// A memfd sealed against resizing only (a shared region).
    SizeSealed(u64),
    /// A memfd sealed as a page cache is.
    Cache(u64),
    /// A memfd without seals.
    Plain,
    /// A userfaultfd.
    Uffd,
    /// The read end of a pipe.
    Pipe,
    /// One end of a `SOCK_STREAM` pair.
    Stream,
    /// A memfd that passes the RPC slot checks.
    Slot,
}

const WRONG: [Kind; 6] = [Kind::Plain, Kind::Pipe, Kind::Stream, Kind::Port, Kind::Sealed(4096), Kind::Uffd];

/// Descriptors made for one execution: those to send, the other ends kept
/// meanwhile, and the identities of the sent ones (to check they are closed).
#[derive(Default)]
struct Fds {
    send: Vec<OwnedFd>,
    keep: Vec<OwnedFd>,
    ids: Vec<(u64, u64)>,
    ports: Vec<ReceiveRight>,
}

impl Fds {
    fn make(&mut self, kind: Kind) {
        let made = match kind {
            Kind::Port => socket::seqpacket_pair().map(|(a, b)| (a, Some(b))),
            Kind::Sealed(len) => sealed_memfd(len, SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW).map(|f| (f, None)),
            Kind::SizeSealed(len) => sealed_memfd(len, SealFlags::SHRINK | SealFlags::GROW).map(|f| (f, None)),
            Kind::Cache(len) => {
                sealed_memfd(len, SealFlags::FUTURE_WRITE | SealFlags::SHRINK | SealFlags::GROW).map(|f| (f, None))
            }
            Kind::Plain => mem::memfd("ferry-fuzz", 4096).map(|f| (f, None)),
            Kind::Uffd => match uffd::Uffd::new() {
                Ok((u, _)) => socket::dup(u.as_fd()).map(|f| (f, None)),
                Err(_) => rustix::pipe::pipe().map(|(r, w)| (r, Some(w))),
            },
            Kind::Pipe => rustix::pipe::pipe().map(|(r, w)| (r, Some(w))),
            Kind::Stream => rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::STREAM,
                rustix::net::SocketFlags::CLOEXEC,
                None,
            )
            .map(|(a, b)| (a, Some(b))),
            Kind::Slot => slot::Slot::create().map(|(_, fd)| (fd, None)),
        };
        let (fd, other) = made.expect("cannot make a descriptor for fuzzing");
        // Anonymous inodes (userfaultfds) share one identity: not tracked.
        if kind != Kind::Uffd {
            self.ids.push(socket::identity(fd.as_fd()).expect("fstat"));
        }
        self.send.push(fd);
        self.keep.extend(other);
    }

    /// A fresh port: its send right goes out, the receive right stays here.
    fn send_right(&mut self) -> SendRight {
        let (rx, tx) = crate::port().expect("port");
        self.ids.push(socket::identity(tx.sock.as_fd()).expect("fstat"));
        self.ports.push(rx);
        tx
    }

    /// A send-once right to a fresh port kept here.
    fn send_once(&mut self) -> crate::SendOnceRight {
        let (mut rx, _tx) = crate::port().expect("port");
        let once = rx.make_send_once().expect("send-once");
        self.ids.push(socket::identity(once.sock.as_fd()).expect("fstat"));
        self.ports.push(rx);
        once
    }

    fn borrowed(&self) -> Vec<BorrowedFd<'_>> {
        self.send.iter().map(|f| f.as_fd()).collect()
    }

    /// Drops everything kept here, then waits (bounded) until no descriptor
    /// of this process is one of those that were sent.
    fn check_released(self, what: &str) {
        let Fds { send, keep, ids, ports } = self;
        drop((send, keep, ports));
        let ids: HashSet<(u64, u64)> = ids.into_iter().collect();
        let start = Instant::now();
        loop {
            let still: Vec<_> = open_identities().into_iter().filter(|i| ids.contains(i)).collect();
            if still.is_empty() {
                return;
            }
            assert!(start.elapsed() < RELEASE_LIMIT, "{what}: {} descriptor(s) sent in are still open: {still:?}", still.len());
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn sealed_memfd(len: u64, seals: SealFlags) -> rustix::io::Result<OwnedFd> {
    let fd = mem::memfd("ferry-fuzz", len.min(1 << 20))?;
    mem::add_seals(fd.as_fd(), seals)?;
    Ok(fd)
}

/// (device, inode) of every descriptor open in this process.
fn open_identities() -> Vec<(u64, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    dir.flatten().filter_map(|e| std::fs::metadata(e.path()).ok()).map(|m| (m.dev(), m.ino())).collect()
}

/// The descriptor kinds that satisfy `items`, in order, perturbed by `wrong`
/// (0: none; else every third descriptor from an offset is of a wrong kind).
fn kinds_for(items: &[ItemDesc], wrong: u8) -> Vec<Kind> {
    let mut out = Vec::new();
    for d in items {
        for j in 0..d.fds as usize {
            out.push(match (d.kind, d.mode) {
                (wire::KIND_REGION, wire::MODE_COPY | wire::MODE_MOVE) => Kind::Sealed(d.len),
                (wire::KIND_REGION, wire::MODE_SHARE) => Kind::SizeSealed(d.len),
                (wire::KIND_REGION, wire::MODE_LEND) if j == 0 => Kind::Sealed(d.len),
                (wire::KIND_PAGER, 1) => Kind::Uffd,
                (wire::KIND_PAGER, _) => Kind::Cache(d.len),
                _ => Kind::Port,
            });
        }
    }
    perturb(&mut out, wrong);
    out
}

fn perturb(kinds: &mut [Kind], wrong: u8) {
    if wrong == 0 {
        return;
    }
    for (i, k) in kinds.iter_mut().enumerate() {
        if (i + wrong as usize).is_multiple_of(3) {
            *k = WRONG[(i + wrong as usize) % WRONG.len()];
        }
    }
}

/// `n` descriptors of rotating kinds.
fn rotating(n: usize, from: u8) -> Vec<Kind> {
    const ALL: [Kind; 8] =
        [Kind::Port, Kind::Sealed(4096), Kind::Plain, Kind::Pipe, Kind::Stream, Kind::SizeSealed(4096), Kind::Cache(4096), Kind::Uffd];
    (0..n).map(|i| ALL[(i + from as usize) % ALL.len()]).collect()
}

// ---------------------------------------------------------------------------
// The wire format.

/// The wire format and the checks of a received message. Input: one byte,
/// then the datagram. Below `0x80` the byte is the number of descriptors
/// that arrived, each of the kind its item wants; from `0x80` its low five
/// bits are the count and bits 5-6 choose descriptors of wrong kinds.
pub fn wire(data: &[u8]) {
    let Some((&spec, bytes)) = data.split_first() else { return };
    let (nfds, wrong) = if spec < 0x80 { (spec as usize, 0) } else { ((spec & 0x1f) as usize, (spec >> 5) & 3) };
    let parsed = wire::parse(bytes, nfds);
    if let Ok(p) = &parsed {
        assert!(p.items.len() <= wire::MAX_ITEMS && p.inline.len() <= wire::MAX_INLINE && nfds <= wire::MAX_FDS);
        assert_eq!(p.inline.end, bytes.len());
        assert_eq!(p.items.iter().map(|d| d.fds as usize).sum::<usize>(), nfds);
        let mut again = Vec::new();
        wire::encode(&mut again, p.op, p.flags, &p.items, &bytes[p.inline.clone()]);
        assert_eq!(again, bytes, "an accepted datagram encodes back differently");
        assert_eq!(wire::parse(&again, nfds).as_ref(), Ok(p));
    }
    if nfds > MAX_REAL_FDS {
        return;
    }
    // With real descriptors: the checks of message.rs, region/ and pager/.
    let kinds = match &parsed {
        Ok(p) => kinds_for(&p.items, wrong),
        Err(_) => rotating(nfds, wrong),
    };
    let mut fds = Fds::default();
    kinds.iter().for_each(|&k| fds.make(k));
    let dg = socket::Datagram {
        len: bytes.len(),
        truncated: false,
        fds_truncated: false,
        fds: std::mem::take(&mut fds.send),
        cred: None,
    };
    if let Ok(msg) = Message::from_datagram(bytes, dg, (u64::MAX, u64::MAX), false) {
        let p = parsed.as_ref().expect("a message was accepted whose bytes do not parse");
        assert_eq!(msg.op(), p.op);
        assert_eq!(msg.body(), &bytes[p.inline.clone()]);
        let lowered = msg.lower().expect("an accepted message cannot be sent again");
        let n = lowered.fds().len();
        assert_eq!(n, nfds, "descriptors were lost or made up");
        let again = wire::parse(&lowered.bytes(), n).expect("a received message lowers to bytes that do not parse");
        assert_eq!((again.op, again.flags, &again.items), (p.op, p.flags, &p.items), "a received message lowers differently");
    }
    fds.check_released("wire");
}

// ---------------------------------------------------------------------------
// Frames: how the server targets cut their input into datagrams.

/// One datagram to send, as the input describes it.
enum Frame<'a> {
    /// Bytes as they are, with `n` descriptors of rotating kinds.
    Raw { bytes: &'a [u8], n: usize, from: u8 },
    /// A message built with the API: operation, item choice, body.
    Message { op: u32, items: u8, body: &'a [u8] },
    /// Item descriptors and inline bytes from the input, framed by
    /// `wire::encode` with descriptors of the kinds they ask for.
    Encoded { op: u32, flags: u8, items: Vec<ItemDesc>, inline: &'a [u8], wrong: u8 },
}

/// Cuts `data` into at most eight frames: each is a tag byte, a
/// little-endian `u16` length and that many bytes. `ops` maps small
/// operation selectors to the protocol's operations.
fn frames<'a>(mut data: &'a [u8], ops: &[u32]) -> Vec<Frame<'a>> {
    let mut out = Vec::new();
    while out.len() < 8 && data.len() >= 3 {
        let tag = data[0];
        let len = u16::from_le_bytes([data[1], data[2]]) as usize;
        let rest = &data[3..];
        let chunk = &rest[..len.min(rest.len())];
        data = &rest[chunk.len()..];
        let op_of = |c: &[u8]| -> u32 {
            match c.first() {
                Some(&s) if (s as usize) < ops.len() => ops[s as usize],
                _ => c.get(..4).map_or(0, |w| u32::from_le_bytes(w.try_into().expect("4 bytes"))),
            }
        };
        out.push(match tag % 3 {
            0 => Frame::Raw { bytes: chunk, n: ((tag >> 2) & 7) as usize, from: tag >> 5 },
            1 => {
                let (sel, skip) = match chunk.first() {
                    Some(&s) if (s as usize) < ops.len() => (op_of(chunk), 1),
                    _ => (op_of(chunk), 4),
                };
                let items = chunk.get(skip).copied().unwrap_or(0);
                Frame::Message { op: sel, items, body: chunk.get(skip + 1..).unwrap_or(&[]) }
            }
            _ => {
                let op = op_of(chunk);
                let flags = chunk.get(4).copied().unwrap_or(0) & wire::FLAG_REPLY;
                let count = (chunk.get(5).copied().unwrap_or(0) & 7) as usize;
                let mut items = Vec::new();
                let mut at = 6;
                for _ in 0..count {
                    let Some(b) = chunk.get(at..at + wire::ITEM_LEN) else { break };
                    let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
                    items.push(ItemDesc {
                        kind: b[0],
                        mode: b[1],
                        fds: u16::from_le_bytes([b[2], b[3]]).min(4),
                        flags: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
                        len: w(8),
                        addr: w(16),
                        aux: w(24),
                    });
                    at += wire::ITEM_LEN;
                }
                Frame::Encoded { op, flags, items, inline: chunk.get(at..).unwrap_or(&[]), wrong: (tag >> 2) & 3 }
            }
        });
    }
    out
}

/// Sends one frame on `sock` without waiting (a full queue drops it),
/// recording every descriptor in `fds`.
fn send_frame(sock: BorrowedFd<'_>, frame: &Frame<'_>, fds: &mut Fds) {
    match frame {
        Frame::Raw { bytes, n, from } => {
            let mut f = Fds::default();
            rotating(*n, *from).into_iter().for_each(|k| f.make(k));
            let _ = socket::send(sock, &[IoSlice::new(bytes)], &f.borrowed(), false);
            fds.absorb(f);
        }
        Frame::Message { op, items, body } => {
            let msg = build_message(*op, *items, body, fds);
            let _ = crate::port::send_on(sock, msg, Timeout::Zero);
        }
        Frame::Encoded { op, flags, items, inline, wrong } => {
            let mut f = Fds::default();
            kinds_for(items, *wrong).into_iter().for_each(|k| f.make(k));
            let mut bytes = Vec::new();
            wire::encode(&mut bytes, *op, *flags, items, &inline[..inline.len().min(wire::MAX_INLINE)]);
            let _ = socket::send(sock, &[IoSlice::new(&bytes)], &f.borrowed(), false);
            fds.absorb(f);
        }
    }
}

impl Fds {
    fn absorb(&mut self, other: Fds) {
        self.send.extend(other.send);
        self.keep.extend(other.keep);
        self.ids.extend(other.ids);
        self.ports.extend(other.ports);
    }
}

/// A message with operation `op`, inline `body` and the items whose bits
/// are set in `items`: 0x01 a send right, 0x02 a send-once right, 0x04 a
/// region by copy, 0x08 a receive right, 0x10 a reply (send-once) right,
/// 0x20 a second send right, 0x40 a region by move, 0x80 a shared region.
fn build_message(op: u32, items: u8, body: &[u8], fds: &mut Fds) -> Message {
    let mut m = Message::new(op).with_body(&body[..body.len().min(wire::MAX_INLINE)]);
    let region = |fill: u8| {
        let mut r = crate::Region::new(4096).expect("region");
        r.as_mut_slice().iter_mut().for_each(|b| *b = fill);
        r
    };
    if items & 0x01 != 0 {
        m = m.with_item(fds.send_right());
    }
    if items & 0x02 != 0 {
        m = m.with_item(fds.send_once());
    }
    if items & 0x04 != 0 {
        let item = region(op as u8).by_copy().expect("by copy");
        fds.ids.push(socket::identity(item.fds().next().expect("fd")).expect("fstat"));
        m = m.with_item(item);
    }
    if items & 0x08 != 0 {
        let (rx, _tx) = crate::port().expect("port");
        fds.ids.push(socket::identity(rx.main_fd()).expect("fstat"));
        m = m.with_item(rx);
    }
    if items & 0x10 != 0 {
        m = m.with_reply(fds.send_once());
    }
    if items & 0x20 != 0 {
        m = m.with_item(fds.send_right());
    }
    if items & 0x40 != 0 {
        let item = region(!op as u8).by_move().expect("by move");
        fds.ids.push(socket::identity(item.fds().next().expect("fd")).expect("fstat"));
        m = m.with_item(item);
    }
    if items & 0x80 != 0 {
        let shared = crate::region::SharedRegion::new(4096).expect("shared region");
        let item = shared.share().expect("share");
        fds.ids.push(socket::identity(item.fds().next().expect("fd")).expect("fstat"));
        m = m.with_item(item);
    }
    m
}

/// Reads and drops whatever is queued on `sock` now (bounded).
fn drain(sock: BorrowedFd<'_>) {
    let mut buf = vec![0u8; wire::MAX_MESSAGE + 1];
    for _ in 0..64 {
        match socket::recv(sock, &mut buf, false) {
            Ok(dg) if !dg.is_eof() => {}
            _ => return,
        }
    }
}

// ---------------------------------------------------------------------------
// The hostile client: another user.

/// The user the server targets' hostile client acts as (`nobody`), as in
/// the attacks they model: one local user against a service another uses.
const OTHER_UID: u32 = 65534;

/// An input that starts with these bytes is sent as this process's own
/// user instead, as a good client's own mistakes are.
const AS_SELF: &[u8] = b"SELF";

/// Sends the frames of `data` (after an optional [`AS_SELF`]) through
/// `sock` from a fresh thread acting as [`OTHER_UID`] (when this process
/// runs as root and the input does not ask otherwise; the kernel keeps
/// credentials per thread and stamps each datagram with the sender's).
/// Returns the descriptors it made and whether it acted as another user.
fn send_frames_as_client(sock: OwnedFd, data: Vec<u8>, ops: &'static [u32]) -> (Fds, bool) {
    let (data, as_self) = match data.strip_prefix(AS_SELF) {
        Some(rest) => (rest.to_vec(), true),
        None => (data, false),
    };
    let thread = std::thread::spawn(move || {
        use rustix::process::{Gid, Uid};
        let other = !as_self
            && rustix::process::geteuid().is_root()
            && rustix::thread::set_thread_groups(&[]).is_ok()
            && rustix::thread::set_thread_res_gid(Gid::from_raw(OTHER_UID), Gid::from_raw(OTHER_UID), Gid::from_raw(OTHER_UID)).is_ok()
            && rustix::thread::set_thread_res_uid(Uid::from_raw(OTHER_UID), Uid::from_raw(OTHER_UID), Uid::from_raw(OTHER_UID)).is_ok();
        let mut fds = Fds::default();
        for f in frames(&data, ops) {
            send_frame(sock.as_fd(), &f, &mut fds);
        }
        drain(sock.as_fd());
        (fds, other)
    });
    thread.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Whether `e` is a server's refusal to make more objects for the calling
/// user (its budget), which a good client meets only when the same user
/// spent the budget.
fn over_budget(e: &crate::pager::PagerError) -> bool {
    matches!(e, crate::pager::PagerError::Unsupported(w) if w.contains("objects made at its request"))
}

// ---------------------------------------------------------------------------
// The name service.

/// Removes `path` (a directory with what it holds, or a file) when this
/// process exits normally: for test runners, whose scratch directories
/// hold servers that live as long as the process.
pub fn remove_at_exit(path: PathBuf) {
    crate::sys::process::remove_at_exit(path);
}

/// A directory of this process's for `what`, removed with what it holds
/// when the process exits (the servers in it live as long as the process).
fn scratch_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-fuzz-{}-{what}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create fuzzing directory");
    remove_at_exit(dir.clone());
    dir
}

fn name_server() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = scratch_dir("names").join("bootstrap");
        crate::NameServer::bind(&path).expect("bind name server").spawn().expect("start name server");
        path
    })
}

/// Operations of the name-service protocol, chosen by small selectors.
const NAME_OPS: [u32; 5] = {
    use crate::bootstrap::protocol::ops;
    [ops::register, ops::lookup, ops::list, ops::unregister, crate::idl::OP_HELLO]
};

/// The name server through its socket. Unless the input starts with `V1`
/// (a client of the protocol's version 1, taken off), the connection passes
/// the version check first, so the frames reach the operations. Input: up
/// to eight frames, each a
/// tag byte, a little-endian `u16` length and that many bytes, sent on one
/// connection by another user (an input starting with `SELF` by this
/// process's own). By the tag modulo 3:
/// - 0: the bytes as they are, with `(tag >> 2) & 7` descriptors of
///   rotating kinds;
/// - 1: a message built with the API: an operation byte (a small one picks
///   one of the protocol's operations, else the first four bytes are the
///   operation), an item byte (bits: send right, send-once right, region
///   by copy, receive right, reply right, second send right, region by
///   move, shared region), then the body;
/// - 2: an operation as in 1 (four bytes), a flags byte, an item count
///   (low three bits), that many 32-byte item descriptors and the inline
///   bytes, framed by `wire::encode` with descriptors of the kinds the
///   items ask for (`(tag >> 2) & 3` makes some of the wrong kind).
///
/// Then a fresh client must register and look up a name and reach its
/// port through the right it got back, and every descriptor sent in must
/// be let go once the fuzzing ports are gone.
pub fn names(data: &[u8]) {
    let path = name_server();
    let conn = socket::connect_to(path).expect("connect to the name server");
    let (data, version_1) = match data.strip_prefix(b"V1") {
        Some(rest) => (rest, true),
        None => (data, false),
    };
    if !version_1 {
        // Most inputs reach the operations: the version check goes first.
        let hello = crate::idl::hello_request::<crate::bootstrap::protocol::Protocol>();
        crate::port::send_on(conn.as_fd(), hello, Timeout::After(Duration::from_secs(10))).map_err(|(e, _)| e).expect("send the version check");
        let mut buf = vec![0; crate::wire::MAX_MESSAGE + 1];
        let id = socket::identity(conn.as_fd()).expect("identity");
        let answer = crate::port::recv_on(conn.as_fd(), &mut buf, id, Timeout::After(Duration::from_secs(10)), false);
        assert_eq!(answer.expect("answer to the version check").expect("a reply").op(), crate::idl::REPLY_OK);
    }
    let (fds, _) = send_frames_as_client(conn, data.to_vec(), &NAME_OPS);
    // A good client is served.
    let n = serial();
    let name = format!("fuzz-health-{n}");
    let (mut rx, tx) = crate::port().expect("port");
    let mut bs = crate::Bootstrap::connect_to(path).expect("connect after fuzzing");
    bs.register(&name, &tx).unwrap_or_else(|e| panic!("register after fuzzing: {e}"));
    let found = bs.lookup(&name).unwrap_or_else(|e| panic!("lookup after fuzzing: {e}"));
    let _ = found.send(Message::new(7).with_body(n.to_le_bytes()), Timeout::Zero);
    let got = rx.recv(Timeout::After(Duration::from_secs(10))).expect("the looked-up right reaches the port");
    assert_eq!((got.op(), got.body()), (7, &n.to_le_bytes()[..]));
    drop((rx, tx, found, bs));
    fds.check_released("names");
}

// ---------------------------------------------------------------------------
// The object and file servers.

/// Contents of the read-only file every health check opens.
const HELLO: &[u8] = b"hello from the file server, read by a good client after fuzzing\n";

struct FileService {
    right: SendRight,
    map_works: bool,
    /// The object id of the file version of `hello`, which frames name
    /// with the body word [`HELLO_VERSION`].
    hello_version: u64,
}

/// A body word that [`pager`] replaces with the id of `hello`'s version
/// object, so an input can aim at an object whose id it cannot know.
const HELLO_VERSION: u64 = u64::from_le_bytes(*b"@hello\0\0");

/// Opens `name` with a raw request and returns the reply's words.
fn raw_file_open(right: &SendRight, name: &str) -> Vec<u64> {
    let (mut rx, _tx) = crate::port().expect("port");
    let once = rx.make_send_once().expect("send-once");
    let _ = right.send(Message::new(crate::fileserver::OP_FILE_OPEN).with_body(name.as_bytes()).with_reply(once), Timeout::Zero);
    let r = rx.recv(Timeout::After(Duration::from_secs(10))).expect("the file server answers an open");
    let mut f = crate::pager::proto::Fields::new(r.body());
    std::iter::from_fn(|| f.u64()).collect()
}

fn file_server() -> &'static FileService {
    static SERVER: OnceLock<FileService> = OnceLock::new();
    SERVER.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch_dir("files");
        let hello = root.join("hello");
        let _ = std::fs::remove_file(&hello);
        std::fs::write(&hello, HELLO).expect("write hello");
        std::fs::set_permissions(&hello, std::fs::Permissions::from_mode(0o444)).expect("chmod hello");
        std::fs::write(root.join("rw"), vec![7u8; 9000]).expect("write rw");
        // Writable by the hostile client's user too, to reach write-backs.
        std::fs::set_permissions(root.join("rw"), std::fs::Permissions::from_mode(0o666)).expect("chmod rw");
        std::fs::write(root.join("empty"), b"").expect("write empty");
        let _ = std::fs::create_dir(root.join("sub"));
        let (mut server, right) = crate::fileserver::FileServer::new(&root, crate::pager::ObjectConfig::default()).expect("file server");
        std::thread::Builder::new()
            .name("ferry-fuzz-files".into())
            .spawn(move || loop {
                if let Err(e) = server.serve(Timeout::After(Duration::from_millis(200))) {
                    eprintln!("fuzzing: the file server stopped: {e}");
                    return;
                }
            })
            .expect("spawn file server");
        let map_works = crate::pager::probe().is_ok_and(|k| k.full_handling);
        let hello_version = raw_file_open(&right, "hello").get(2).copied().expect("the open of hello names its version");
        FileService { right, map_works, hello_version }
    })
}

/// Operations of the memory-object and file protocols, chosen by small
/// selectors.
const PAGER_OPS: [u32; 15] = [
    crate::pager::proto::OPEN,
    crate::pager::proto::ATTACH,
    crate::pager::proto::COPY,
    crate::pager::proto::STATS,
    crate::pager::proto::WRITE,
    crate::pager::proto::DIRTY,
    crate::pager::proto::CLEAN_REQUEST,
    crate::fileserver::OP_FILE_OPEN,
    crate::fileserver::OP_FILE_WRITE,
    crate::pager::proto::OPENED,
    crate::pager::proto::ERROR,
    crate::rpc::RPC_CONNECT,
    crate::pager::proto::CLEAN,
    crate::pager::proto::ATTACHED,
    0,
];

/// The file server (and the object server under it) through its port.
/// Input: frames as for [`names`], sent to the server's port (a body word `"@hello\0\0"` stands for the id of the object holding the
/// read-only file `hello`); then a good
/// client must open and read a file, and every descriptor sent in must be
/// let go once the fuzzing ports are gone.
pub fn pager(data: &[u8]) {
    let svc = file_server();
    let mut data = data.to_vec();
    let mut at = 0;
    while let Some(i) = data.get(at..).and_then(|d| d.windows(8).position(|w| w == HELLO_VERSION.to_le_bytes())) {
        data[at + i..at + i + 8].copy_from_slice(&svc.hello_version.to_le_bytes());
        at += i + 8;
    }
    let sock = socket::dup(svc.right.sock.as_fd()).expect("dup");
    let (fds, other) = send_frames_as_client(sock, data, &PAGER_OPS);
    let client = crate::fileserver::FileClient::new(svc.right.try_clone().expect("clone")).with_timeout(Timeout::After(Duration::from_secs(10)));
    if svc.map_works {
        match client.open("hello") {
            Ok(snap) => assert_eq!(snap.as_slice(), HELLO, "the file server handed out wrong contents after fuzzing"),
            // This user spent its own budget: the server still answers.
            Err(e) if !other && over_budget(&e) => {
                client.stats(svc.hello_version).unwrap_or_else(|e| panic!("the file server does not answer after fuzzing: {e}"));
            }
            Err(e) => panic!("a good client cannot open a file after fuzzing: {e}"),
        }
    } else {
        // Without userfaultfd no snapshot can be mapped: the server must
        // still answer a request, here with its refusal.
        use crate::pager::PagerError;
        let err = client.open("no-such-file").expect_err("a missing file opened");
        assert!(!matches!(err, PagerError::Timeout | PagerError::PagerDead | PagerError::Send(_) | PagerError::Recv(_)), "after fuzzing: {err}");
    }
    drop(client);
    fds.check_released("pager");
}

/// Supplies byte `(offset + i) % 251` at offset `offset + i`.
struct Pattern;

impl crate::pager::Pager for Pattern {
    fn data_request(&mut self, offset: u64, buf: &mut [u8]) -> Result<crate::pager::Supply, crate::pager::PagerFault> {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = ((offset as usize + i) % 251) as u8;
        }
        Ok(crate::pager::Supply::Provided)
    }
}

struct ObjectService {
    right: SendRight,
    map_works: bool,
    /// An object nobody may change by message, which the health check maps.
    fixed: u64,
}

/// Object ids 1-3 are writable by this process's user (copy, zero-copy
/// where the kernel has it, dirty-tracking where it has that), id 4 is the
/// one the health check maps.
fn object_server() -> &'static ObjectService {
    static SERVER: OnceLock<ObjectService> = OnceLock::new();
    SERVER.get_or_init(|| {
        use crate::pager::{ObjectConfig, ObjectServer, SupplyMode};
        let support = crate::pager::probe().ok();
        let (mut server, right) = ObjectServer::new().expect("object server");
        let copy = ObjectConfig { cluster: 4, ..ObjectConfig::default() };
        let zero = ObjectConfig { mode: SupplyMode::ZeroCopy, ..copy };
        let dirty = ObjectConfig { track_dirty: true, ..copy };
        let want_zero = support.as_ref().is_some_and(|k| k.zero_copy);
        let want_dirty = support.as_ref().is_some_and(|k| k.dirty_tracking);
        server.add_object(64 << 10, Box::new(Pattern), copy).expect("object");
        server.add_object(64 << 10, Box::new(Pattern), if want_zero { zero } else { copy }).expect("object");
        server.add_object(64 << 10, Box::new(Pattern), if want_dirty { dirty } else { copy }).expect("object");
        let fixed = server.add_object(16 << 10, Box::new(Pattern), copy).expect("object");
        server.set_owner(fixed, u32::MAX).expect("owner");
        std::thread::Builder::new()
            .name("ferry-fuzz-objects".into())
            .spawn(move || loop {
                if let Err(e) = server.serve(Timeout::After(Duration::from_millis(200))) {
                    eprintln!("fuzzing: the object server stopped: {e}");
                    return;
                }
            })
            .expect("spawn object server");
        ObjectService { right, map_works: support.is_some_and(|k| k.full_handling), fixed }
    })
}

/// The object server through its port. Input: frames as for [`names`],
/// sent to the server's port, whose objects are numbered 1 to 4 (1-3 of
/// 64 KiB, writable by this process's user: copy, zero-copy and
/// dirty-tracking where the kernel has them; 4 of 16 KiB, which nobody may
/// change); then a good client must map object 4 and read its
/// bytes, and every descriptor sent in must be let go once the fuzzing
/// ports are gone.
pub fn objects(data: &[u8]) {
    let svc = object_server();
    let sock = socket::dup(svc.right.sock.as_fd()).expect("dup");
    let (fds, _) = send_frames_as_client(sock, data.to_vec(), &PAGER_OPS);
    let obj = crate::pager::MemoryObject::new(svc.right.try_clone().expect("clone"), svc.fixed).with_timeout(Timeout::After(Duration::from_secs(10)));
    if svc.map_works {
        let mapped = obj.map().unwrap_or_else(|e| panic!("a good client cannot map an object after fuzzing: {e}"));
        let mut bytes = vec![0u8; mapped.len()];
        assert!(mapped.read_at(0, &mut bytes), "the mapping is shorter than it says");
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "the object server supplied wrong bytes after fuzzing");
    } else {
        obj.stats().unwrap_or_else(|e| panic!("the object server does not answer after fuzzing: {e}"));
    }
    drop(obj);
    fds.check_released("objects");
    // What clients make the server hold is bounded: page caches of the
    // zero-copy object and of at most the per-user limit of copies, for
    // each of the two users that send here.
    let caches = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.flatten().filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:ferry-object"))).count())
        .unwrap_or(0);
    let bound = 2 * (2 * crate::pager::Budgets::default().holds_per_user + 1) + 16;
    assert!(caches <= bound, "the object server holds {caches} page-cache descriptors, more than clients may make it hold ({bound})");
}

// ---------------------------------------------------------------------------
// The RPC slot and frames.

/// Bytes of control words an `rpc_slot` input carries: the request page's
/// up to its body, then as many of the reply page's.
pub const SLOT_CONTROL: usize = 2 * slot::OFF_REQ_DATA;

const SLOT_HEADER: [u8; 12] = {
    let mut h = [0u8; 12];
    let m = *b"FRPS";
    let mut i = 0;
    while i < 4 {
        h[i] = m[i];
        i += 1;
    }
    h[4] = slot::VERSION as u8;
    let size = (slot::SLOT_SIZE as u32).to_le_bytes();
    h[8] = size[0];
    h[9] = size[1];
    h[10] = size[2];
    h[11] = size[3];
    h
};

/// The RPC slot as a peer hands it over. Input: a seal byte (bit 0: sealed
/// against shrinking and growing; bit 1 also `F_SEAL_SEAL`; bit 7: write a
/// good header over the input's), a size byte (0: the right size, else that
/// many 512-byte blocks), up to [`SLOT_CONTROL`] bytes of control words (the
/// request page's first 88 bytes, then the reply page's first 88), then the
/// body placed in both the request and the reply area.
pub fn rpc_slot(data: &[u8]) {
    let (Some(&seal), Some(&size)) = (data.first(), data.get(1)) else { return };
    let rest = &data[2..];
    let (control, body) = rest.split_at(rest.len().min(SLOT_CONTROL));
    let len = if size == 0 { slot::SLOT_SIZE as u64 } else { size as u64 * 512 };
    let fd = mem::memfd("ferry-fuzz-slot", len).expect("memfd");
    let mut image = vec![0u8; len as usize];
    let put = |image: &mut Vec<u8>, at: usize, b: &[u8]| {
        let n = b.len().min(image.len().saturating_sub(at));
        if n > 0 {
            image[at..at + n].copy_from_slice(&b[..n]);
        }
    };
    let (req_control, rep_control) = control.split_at(control.len().min(slot::OFF_REQ_DATA));
    put(&mut image, 0, req_control);
    put(&mut image, slot::REPLY_PAGE, rep_control);
    if seal & 0x80 != 0 {
        put(&mut image, 0, &SLOT_HEADER);
    }
    put(&mut image, slot::OFF_REQ_DATA, body);
    put(&mut image, slot::OFF_REP_DATA, body);
    mem::pwrite_all(fd.as_fd(), &image, 0).expect("fill the slot");
    let mut seals = SealFlags::empty();
    if seal & 1 != 0 {
        seals |= SealFlags::SHRINK | SealFlags::GROW;
    }
    if seal & 2 != 0 {
        seals |= SealFlags::SEAL;
    }
    if !seals.is_empty() {
        mem::add_seals(fd.as_fd(), seals).expect("seal");
    }
    let word = |at: usize| image.get(at..at + 4).map_or(0, |w| u32::from_le_bytes(w.try_into().expect("4 bytes")));
    let good = seal & 1 != 0 && len == slot::SLOT_SIZE as u64 && image[..12] == SLOT_HEADER;
    let id = socket::identity(fd.as_fd()).expect("fstat");
    match slot::Slot::open(fd) {
        Ok(s) => {
            assert!(good, "a slot that fails the checks was accepted");
            let seq = s.request_seq();
            assert_eq!(seq, word(slot::OFF_REQ_SEQ));
            let (req_len, rep_len, via) = (word(slot::OFF_REQ_LEN) as usize, word(slot::OFF_REP_LEN) as usize, word(slot::OFF_REP_VIA));
            match s.take_request(seq, Vec::new()) {
                Ok(Some(c)) => {
                    assert!(req_len <= slot::SLOT_INLINE);
                    assert_eq!((c.op, c.body.len()), (word(slot::OFF_REQ_OP), req_len));
                    assert_eq!(&c.body[..], &image[slot::OFF_REQ_DATA..slot::OFF_REQ_DATA + req_len]);
                }
                Ok(None) => panic!("a request nobody changed read as replaced"),
                Err(_) => assert!(req_len > slot::SLOT_INLINE, "a good request was refused"),
            }
            match s.take_reply(Vec::new()) {
                Ok(c) => {
                    assert!(rep_len <= slot::SLOT_INLINE && [slot::VIA_SLOT, slot::VIA_SOCKET, slot::VIA_TOO_LARGE].contains(&via));
                    let want = if via == slot::VIA_SLOT { rep_len } else { 0 };
                    assert_eq!(&c.body[..], &image[slot::OFF_REP_DATA..slot::OFF_REP_DATA + want]);
                }
                Err(_) => assert!(rep_len > slot::SLOT_INLINE || ![slot::VIA_SLOT, slot::VIA_SOCKET, slot::VIA_TOO_LARGE].contains(&via)),
            }
        }
        Err(why) => assert!(!good, "a good slot was refused: {why}"),
    }
    assert!(!open_identities().contains(&id), "the slot memfd is still open");
}

/// The RPC connection socket: the handshake (server side), framed requests
/// (server side) and framed replies (client side). Input: a selector byte
/// (0 handshake, 1 request, 2 reply, 3 acknowledgement check), a descriptor
/// byte as in [`wire`] (low five bits: how many; a handshake gets slot
/// memfds first), then the datagram.
pub fn rpc_frame(data: &[u8]) {
    let (Some(&which), Some(&spec)) = (data.first(), data.get(1)) else { return };
    let bytes = &data[2..];
    let which = which % 4;
    if which == 3 {
        let ack = frame::is_ack(bytes);
        assert_eq!(ack, bytes.len() == 12 && bytes[..4] == *b"FRPC" && bytes[4..8] == [1, 0, 0, 0] && bytes[8..] == [0; 4]);
        // A refusal is the same frame with a non-zero status, never an ack.
        let refused = frame::refusal(bytes);
        assert!(!(ack && refused.is_some()));
        assert!(!frame::refusal_reason(refused.unwrap_or(0)).is_empty());
        return;
    }
    let n = ((spec & 0x1f) as usize).min(MAX_REAL_FDS);
    let mut kinds = match wire::parse(bytes, n) {
        Ok(p) if which != 0 => kinds_for(&p.items, spec >> 5),
        _ => rotating(n, spec >> 5),
    };
    if which == 0 && spec & 0x80 == 0 {
        kinds.iter_mut().for_each(|k| *k = Kind::Slot);
    }
    let mut fds = Fds::default();
    kinds.into_iter().for_each(|k| fds.make(k));
    let (a, b) = socket::seqpacket_pair().expect("socket pair");
    let sent = socket::send(a.as_fd(), &[IoSlice::new(bytes)], &fds.borrowed(), false);
    fds.send.clear();
    if sent.is_err() {
        return fds.check_released("rpc_frame");
    }
    match which {
        0 => {
            if let Ok(hello) = frame::recv_hello(b.as_fd()) {
                assert_eq!(bytes.len(), 16);
                if let Some(fd) = hello.slot {
                    let _ = slot::Slot::open(fd);
                }
            }
        }
        _ => {
            let (op, other) = if which == 1 { (frame::FOR_SERVER, frame::FOR_CLIENT) } else { (frame::FOR_CLIENT, frame::FOR_SERVER) };
            let mut buf = vec![0u8; wire::MAX_MESSAGE + 1];
            let ident = frame::identity_of(&b);
            match frame::recv_one(b.as_fd(), &mut buf, ident, op) {
                Ok(frame::Incoming::Framed(_, m)) => {
                    let p = wire::parse(bytes, n).expect("a frame was accepted whose bytes do not parse");
                    if p.op == frame::long_op(op) {
                        // The body came in a region, of a length only a
                        // body too long for the framing has.
                        assert_eq!(p.inline.len(), 8, "a long frame with inline bytes past its framing was accepted");
                        assert!(m.body().len() > wire::MAX_INLINE - 8 && m.body().len() <= wire::MAX_INLINE, "a long frame of {} bytes was accepted", m.body().len());
                    } else {
                        assert_eq!(p.op, op, "a frame of the other direction ({other:#x}) was accepted");
                        assert_eq!(m.body().len() + 8, p.inline.len());
                    }
                }
                Ok(frame::Incoming::Doorbell) => assert_eq!(bytes, [0xDB]),
                Ok(frame::Incoming::ReplyTooLarge(_)) => {
                    assert_eq!(op, frame::FOR_CLIENT, "a too-large notice was accepted by a server");
                }
                Ok(frame::Incoming::Closed) => assert!(bytes.is_empty()),
                Ok(frame::Incoming::Empty) | Err(_) => {}
            }
        }
    }
    drop((a, b));
    fds.check_released("rpc_frame");
}

// ---------------------------------------------------------------------------
// Seeds.

/// Valid inputs of every kind for `target`, to seed a corpus.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "wire" => wire_seeds(),
        "names" => name_seeds(),
        "pager" => pager_seeds(),
        "objects" => object_seeds(),
        "rpc_slot" => slot_seeds(),
        "rpc_frame" => frame_seeds(),
        _ => Vec::new(),
    }
}

fn encoded(op: u32, flags: u8, items: &[ItemDesc], inline: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    wire::encode(&mut v, op, flags, items, inline);
    v
}

fn item(kind: u8, mode: u8, fds: u16, len: u64, aux: u64) -> ItemDesc {
    ItemDesc { kind, mode, fds, len, aux, ..Default::default() }
}

fn wire_seeds() -> Vec<Vec<u8>> {
    let send = item(wire::KIND_SEND, 0, 1, 0, 0);
    let once = item(wire::KIND_SEND_ONCE, 0, 1, 0, 0);
    let cases: Vec<(u8, u8, Vec<ItemDesc>, &[u8])> = vec![
        (0, 0, vec![], b""),
        (0, 0, vec![], b"inline bytes"),
        (1, wire::FLAG_REPLY, vec![once], b"request"),
        (1, wire::FLAG_REPLY, vec![send, send], b""),
        (1, 0, vec![item(wire::KIND_RECEIVE, 0, 3, 0, 0)], b""),
        (1, 0, vec![item(wire::KIND_REGION, wire::MODE_COPY, 1, 4096, 0)], b"copy"),
        (1, 0, vec![item(wire::KIND_REGION, wire::MODE_MOVE, 1, 100, 0)], b""),
        (1, 0, vec![item(wire::KIND_REGION, wire::MODE_SHARE, 1, 8192, 0)], b""),
        (1, 0, vec![item(wire::KIND_REGION, wire::MODE_LEND, 2, 4096, 3)], b""),
        (1, 0, vec![item(wire::KIND_PAGER, 1, 1, 8192, 0)], b""),
        (1, 0, vec![item(wire::KIND_PAGER, 2, 1, 4096, 0)], b""),
        (1, wire::FLAG_REPLY, vec![once, send, item(wire::KIND_REGION, wire::MODE_COPY, 1, 4096, 0)], b"all"),
    ];
    let mut out = Vec::new();
    for (i, (_, flags, items, inline)) in cases.into_iter().enumerate() {
        let nfds: u16 = items.iter().map(|d| d.fds).sum();
        let mut s = vec![nfds as u8];
        s.extend(encoded(i as u32 + 1, flags, &items, inline));
        out.push(s);
    }
    out
}

fn frame_bytes(tag: u8, chunk: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
    v.extend_from_slice(chunk);
    v
}

fn message_frame(sel: u8, items: u8, body: &[u8]) -> Vec<u8> {
    let mut c = vec![sel, items];
    c.extend_from_slice(body);
    frame_bytes(1, &c)
}

/// The body of a name-service request as the typed interface encodes it:
/// a name, and for `register` the right as item 0.
fn name_request(name: &str, with_right: bool) -> Vec<u8> {
    let mut enc = crate::idl::Encoder::new();
    enc.field(1, name.to_owned());
    if with_right {
        enc.field(2, 0u32);
    }
    enc.into_message(0).body().to_vec()
}

fn name_seeds() -> Vec<Vec<u8>> {
    let hello = crate::idl::hello_request::<crate::bootstrap::protocol::Protocol>();
    vec![
        message_frame(0, 0x01, &name_request("fuzz-a", true)),
        [
            message_frame(0, 0x01, &name_request("fuzz-b", true)),
            message_frame(1, 0, &name_request("fuzz-b", false)),
            message_frame(2, 0, b""),
            message_frame(3, 0, &name_request("fuzz-b", false)),
        ]
        .concat(),
        message_frame(1, 0, &name_request("no-such-name", false)),
        message_frame(2, 0, b""),
        message_frame(0, 0x05, &name_request("two items", true)),
        message_frame(0, 0x11, &name_request("with-reply", true)),
        message_frame(1, 0, &name_request("bad\nname", false)),
        message_frame(4, 0, hello.body()),
        frame_bytes(0, &encoded(2, 0, &[], &name_request("raw lookup", false))),
        frame_bytes(4, &encoded(1, 0, &[item(wire::KIND_SEND, 0, 1, 0, 0)], &name_request("raw-register", true))),
        frame_bytes(2, &[[1, 0, 0, 0, 0, 1].as_slice(), &encoded_item(wire::KIND_SEND, 0, 1, 0, 0), &name_request("encoded", true)].concat()),
        frame_bytes(0, b"not a ferry message"),
        // Protocol version 1's requests, without the version check.
        [b"V1".as_slice(), &message_frame(0, 0x01, b"fuzz-v1"), &message_frame(1, 0, b"fuzz-v1")].concat(),
    ]
}

fn encoded_item(kind: u8, mode: u8, fds: u16, len: u64, aux: u64) -> Vec<u8> {
    let mut v = encoded(0, 0, &[item(kind, mode, fds, len, aux)], b"");
    v.drain(..wire::HEADER_LEN);
    v
}

fn pager_seeds() -> Vec<Vec<u8>> {
    let w = |words: &[u64]| crate::pager::proto::body(words);
    let mut write_body = w(&[2]);
    write_body.extend_from_slice(b"rwnew contents");
    vec![
        message_frame(7, 0x10, b"hello"),
        message_frame(7, 0x10, b"../etc/passwd"),
        message_frame(8, 0x10, &write_body),
        [message_frame(7, 0x10, b"rw"), message_frame(0, 0x10, &w(&[1])), message_frame(2, 0x10, &w(&[2])), message_frame(3, 0x10, &w(&[3]))].concat(),
        message_frame(4, 0x10, &[w(&[1, 0]), b"data".to_vec()].concat()),
        message_frame(5, 0x10, &[w(&[1, 0]), vec![0; 64]].concat()),
        message_frame(6, 0x10, &w(&[1])),
        message_frame(1, 0x11, &w(&[1])),
        frame_bytes(
            2,
            &[
                [1, 0, 0, 0, 0, 2].as_slice(),
                &encoded_item(wire::KIND_PAGER, 1, 1, 8192, 0),
                &encoded_item(wire::KIND_SEND, 0, 1, 0, 0),
                &w(&[1]),
            ]
            .concat(),
        ),
        frame_bytes(0, &encoded(crate::fileserver::OP_FILE_OPEN, 0, &[], b"hello")),
        // The object behind a read-only file, changed by message by a
        // client of the server's own user.
        [AS_SELF, &message_frame(4, 0x10, &[HELLO_VERSION.to_le_bytes().as_slice(), &0u64.to_le_bytes(), b"changed by a message"].concat())].concat(),
        [AS_SELF, &message_frame(6, 0x10, &HELLO_VERSION.to_le_bytes())].concat(),
        // The same, and a copy of it, from another user.
        message_frame(4, 0x10, &[HELLO_VERSION.to_le_bytes().as_slice(), &0u64.to_le_bytes(), b"changed by a message"].concat()),
        message_frame(2, 0x10, &HELLO_VERSION.to_le_bytes()),
    ]
}

fn object_seeds() -> Vec<Vec<u8>> {
    let w = |words: &[u64]| crate::pager::proto::body(words);
    let mut out = Vec::new();
    for id in 1..=4u64 {
        out.push([message_frame(0, 0x10, &w(&[id])), message_frame(2, 0x10, &w(&[id])), message_frame(3, 0x10, &w(&[id]))].concat());
    }
    out.extend([
        message_frame(4, 0x10, &[w(&[1, 4096]), b"written by the owner".to_vec()].concat()),
        message_frame(4, 0x10, &[w(&[4, 0]), b"not the owner".to_vec()].concat()),
        message_frame(4, 0x10, &[w(&[2, 0]), b"zero-copy".to_vec()].concat()),
        message_frame(6, 0x10, &w(&[3])),
        message_frame(5, 0x10, &[w(&[3, 0]), vec![9; 4096]].concat()),
        message_frame(1, 0x11, &w(&[1])),
        frame_bytes(
            2,
            &[
                [1, 0, 0, 0, 0, 2].as_slice(),
                &encoded_item(wire::KIND_PAGER, 1, 1, 64 << 10, 0),
                &encoded_item(wire::KIND_SEND, 0, 1, 0, 0),
                &w(&[1]),
            ]
            .concat(),
        ),
        frame_bytes(
            2,
            &[
                [1, 0, 0, 0, wire::FLAG_REPLY, 3].as_slice(),
                &encoded_item(wire::KIND_SEND_ONCE, 0, 1, 0, 0),
                &encoded_item(wire::KIND_PAGER, 1, 1, 16 << 10, 0),
                &encoded_item(wire::KIND_SEND, 0, 1, 0, 0),
                &w(&[4]),
            ]
            .concat(),
        ),
    ]);
    out
}

fn slot_seeds() -> Vec<Vec<u8>> {
    let mut control = vec![0u8; SLOT_CONTROL];
    control[..12].copy_from_slice(&SLOT_HEADER);
    // Offsets in the slot, as offsets in the input's control words (the
    // reply page's words follow the request page's `OFF_REQ_DATA` bytes).
    let at = |off: usize| if off < slot::OFF_REQ_DATA { off } else { off - slot::REPLY_PAGE + slot::OFF_REQ_DATA };
    let put = |c: &mut Vec<u8>, off: usize, v: u32| c[at(off)..at(off) + 4].copy_from_slice(&v.to_le_bytes());
    const INLINE: u32 = slot::SLOT_INLINE as u32;
    let mut out = Vec::new();
    for (req_len, rep_len, via) in [(0u32, 0u32, 0u32), (5, 7, 0), (5, 7, 1), (INLINE, INLINE, 0), (INLINE + 1, 1, 0), (1, 1, 2)] {
        let mut c = control.clone();
        put(&mut c, slot::OFF_REQ_SEQ, 9);
        put(&mut c, slot::OFF_REQ_OP, 42);
        put(&mut c, slot::OFF_REQ_LEN, req_len);
        put(&mut c, slot::OFF_REP_SEQ, 9);
        put(&mut c, slot::OFF_REP_OP, 43);
        put(&mut c, slot::OFF_REP_LEN, rep_len);
        put(&mut c, slot::OFF_REP_VIA, via);
        let mut s = vec![1, 0];
        s.extend(c);
        s.extend_from_slice(b"body bytes of the request and the reply");
        out.push(s);
    }
    out.push([vec![0, 0], control.clone()].concat());
    out.push([vec![1, 4], control].concat());
    out
}

fn frame_seeds() -> Vec<Vec<u8>> {
    let hello = |flags: u32| -> Vec<u8> {
        [b"FRPC".as_slice(), &1u32.to_le_bytes(), &flags.to_le_bytes(), &(slot::SLOT_SIZE as u32).to_le_bytes()].concat()
    };
    let framed = |op: u32, items: &[ItemDesc], body: &[u8]| encoded(op, 0, items, &[&7u32.to_le_bytes()[..], &1u32.to_le_bytes(), body].concat());
    vec![
        [vec![0, 1], hello(1)].concat(),
        [vec![0, 0], hello(0)].concat(),
        [vec![1, 0], framed(crate::rpc::RPC_SOCKET_REQUEST, &[], b"request")].concat(),
        [vec![1, 1], framed(crate::rpc::RPC_SOCKET_REQUEST, &[item(wire::KIND_SEND, 0, 1, 0, 0)], b"")].concat(),
        [vec![2, 0], framed(crate::rpc::RPC_SOCKET_REPLY, &[], b"reply")].concat(),
        [vec![2, 1], framed(crate::rpc::RPC_SOCKET_REPLY, &[item(wire::KIND_REGION, wire::MODE_COPY, 1, 4096, 0)], b"")].concat(),
        vec![1, 0, 0xDB],
        [vec![3, 0], b"FRPC".to_vec(), vec![1, 0, 0, 0, 0, 0, 0, 0]].concat(),
    ]
}
