//! Hostile and broken input on real sockets: datagrams written by hand with
//! `sendmsg` and real descriptors (pipes, eventfds, memfds, other ports, the
//! receiving port's own socket) beside them. Each case checks the precise
//! error, that the port keeps serving afterwards (a valid message sent next
//! arrives intact) and that no descriptor leaks (the process's open
//! descriptors are counted before and after). A last test floods a port
//! with garbage from another process while a well-behaved one talks to it.
//!
//! Descriptor counts are per process, so the tests here run one at a time.

mod common;

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use ferry::wire::{self, ItemDesc, KIND_RECEIVE, KIND_REGION, KIND_SEND, KIND_SEND_ONCE};
use ferry::{Bootstrap, Event, Item, Message, PortSet, ReceiveRight, RecvError, SendError, SendRight, Timeout, WireError};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs one case: no other case runs meanwhile, the process's descriptors
/// are counted before and after (everything the case made is dropped by
/// then), and a deadlock fails the test.
fn case(name: &str, f: impl FnOnce()) {
    let _one = serial();
    counted(name, f);
}

/// Holds off the other cases of this file.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` under a watchdog and requires the process to hold no more
/// descriptors afterwards than before. Descriptors closed by the name
/// server thread of this process close when it gets to them, so a surplus
/// is given a moment to go away before it counts as a leak.
fn counted(name: &str, f: impl FnOnce()) {
    common::watchdog(name, Duration::from_secs(120), || {
        let before = common::open_fds();
        f();
        let mut after = common::open_fds();
        for _ in 0..2000 {
            if after <= before {
                break;
            }
            common::nap();
            after = common::open_fds();
        }
        // Fewer than before is no leak: a descriptor of an earlier case
        // (closed by the name server thread when it got to it) went meanwhile.
        assert!(after <= before, "{name}: {} descriptors leaked; open now: {}", after as isize - before as isize, fd_list());
    });
}

/// What this process's descriptors refer to, for a leak report.
fn fd_list() -> String {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return String::new() };
    let mut v: Vec<String> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            Some(format!("{}={}", e.file_name().to_string_lossy(), std::fs::read_link(e.path()).ok()?.display()))
        })
        .collect();
    v.sort();
    v.join(" ")
}

/// The one name-service connection of this test process, to a private
/// name server embedded here. It stays open for the whole run, so the
/// server never closes a connection of a finished case while another case
/// counts descriptors.
fn names() -> std::sync::MutexGuard<'static, Bootstrap> {
    static NAMES: std::sync::OnceLock<(std::path::PathBuf, Mutex<Bootstrap>)> = std::sync::OnceLock::new();
    let (_, b) = NAMES.get_or_init(|| {
        let path = common::private_bootstrap("hostile");
        std::env::set_var("FERRY_BOOTSTRAP", &path);
        let mut b = Bootstrap::connect().expect("bootstrap");
        // A round trip: the server has accepted this connection.
        b.list().expect("list");
        (path, Mutex::new(b))
    });
    b.lock().unwrap_or_else(|e| e.into_inner())
}

fn names_path() -> std::path::PathBuf {
    names().path().to_owned()
}

/// Sends one datagram with `fds` beside it, straight through the kernel.
fn send_raw(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> rustix::io::Result<usize> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(300))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)), "control buffer too small");
    }
    rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL | SendFlags::DONTWAIT)
}

fn desc(kind: u8, fds: u16) -> ItemDesc {
    if kind == wire::KIND_REGION {
        // A region by copy of one page: only the descriptor count may be wrong.
        return ItemDesc { kind, fds, mode: wire::MODE_COPY, len: 4096, ..Default::default() };
    }
    ItemDesc { kind, fds, ..Default::default() }
}

/// A well-formed message's bytes.
fn bytes(op: u32, flags: u8, items: &[ItemDesc], inline: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    wire::encode(&mut v, op, flags, items, inline);
    v
}

fn pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe")
}

fn eventfd() -> OwnedFd {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).expect("eventfd")
}

fn memfd() -> OwnedFd {
    rustix::fs::memfd_create("ferry-hostile", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd")
}

/// A raw `SOCK_SEQPACKET` pair set up as ferry sets up its ports.
fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    let (a, b) = rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .expect("socketpair");
    rustix::net::sockopt::set_socket_passcred(&a, true).expect("passcred");
    rustix::net::sockopt::set_socket_passcred(&b, true).expect("passcred");
    (a, b)
}

/// Receives now and requires the malformed-message error `want`.
fn expect_bad(rx: &mut ReceiveRight, want: WireError) {
    match rx.recv(Timeout::millis(5000)) {
        Err(RecvError::BadMessage(got)) => assert_eq!(got, want, "wrong rejection"),
        Ok(m) => panic!("expected BadMessage({want:?}), got a message: op {}, {} items", m.op(), m.items().len()),
        Err(e) => panic!("expected BadMessage({want:?}), got {e:?}"),
    }
}

/// Sends `bytes` with `fds` through `tx` by hand and requires `want`.
fn reject(rx: &mut ReceiveRight, tx: &SendRight, bytes: &[u8], fds: &[BorrowedFd<'_>], want: WireError) {
    send_raw(tx.as_fd(), bytes, fds).expect("sendmsg");
    expect_bad(rx, want);
}

/// The port still serves: a valid message with a right in it arrives
/// intact, and nothing else is queued.
fn still_serves(rx: &mut ReceiveRight, tx: &SendRight) {
    let (mut other_rx, other_tx) = ferry::port().expect("port");
    let body: Vec<u8> = (0..200u8).collect();
    tx.send(Message::new(0xC0FFEE).with_body(body.clone()).with_item(other_tx), Timeout::Zero).expect("send valid");
    let mut m = rx.recv(Timeout::millis(5000)).expect("valid message after the bad ones");
    assert_eq!((m.op(), m.body()), (0xC0FFEE, &body[..]));
    let mut items = m.take_items();
    let Some(Item::Send(s)) = items.pop() else { panic!("the send right did not arrive: {items:?}") };
    s.send(Message::new(1), Timeout::Zero).expect("use the right that arrived");
    assert_eq!(other_rx.recv(Timeout::Zero).expect("through the passed right").op(), 1);
    assert!(matches!(rx.try_recv(), Err(RecvError::Timeout)), "something else was queued");
}

/// Builds a receive right and a send right over sockets this test also
/// holds by hand, by passing them through a go-between port as hand-written items.
fn smuggled_port() -> (ReceiveRight, SendRight, OwnedFd, OwnedFd) {
    let (a, b) = seqpacket_pair();
    let (mut via_rx, via_tx) = ferry::port().expect("port");
    send_raw(via_tx.as_fd(), &bytes(0, 0, &[desc(KIND_RECEIVE, 1), desc(KIND_SEND, 1)], b""), &[a.as_fd(), b.as_fd()])
        .expect("sendmsg");
    let mut m = via_rx.recv(Timeout::Zero).expect("smuggled rights");
    let mut items = m.take_items().into_iter();
    let (Some(Item::Receive(rx)), Some(Item::Send(tx))) = (items.next(), items.next()) else {
        panic!("unexpected items")
    };
    (rx, tx, a, b)
}

/// A second receive right over the same socket as one made by
/// [`smuggled_port`].
fn second_receive_right(sock: &OwnedFd) -> ReceiveRight {
    let (mut via_rx, via_tx) = ferry::port().expect("port");
    send_raw(via_tx.as_fd(), &bytes(0, 0, &[desc(KIND_RECEIVE, 1)], b""), &[sock.as_fd()]).expect("sendmsg");
    match via_rx.recv(Timeout::Zero).expect("smuggled right").take_items().pop() {
        Some(Item::Receive(r)) => r,
        other => panic!("unexpected item {other:?}"),
    }
}

#[test]
fn truncated_headers() {
    case("truncated_headers", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let good = bytes(1, 0, &[desc(KIND_SEND, 1)], b"abc");
        for n in [1, 10, 23] {
            reject(&mut rx, &tx, &good[..n], &[], WireError::Truncated { need: 24, got: n });
        }
        // With descriptors beside the stub, which must be closed.
        let (r, w) = pipe();
        let (other_rx, other_tx) = ferry::port().unwrap();
        reject(&mut rx, &tx, &good[..10], &[r.as_fd(), w.as_fd(), other_tx.as_fd()], WireError::Truncated { need: 24, got: 10 });
        drop(other_tx);
        assert_no_senders(other_rx);
        still_serves(&mut rx, &tx);
    });
}

/// The port `rx`'s only send right was carried by a rejected message: once
/// the receiver closed it, the port reports no senders.
fn assert_no_senders(mut rx: ReceiveRight) {
    assert!(matches!(rx.recv(Timeout::millis(5000)), Err(RecvError::NoSenders)), "a rejected message's right was kept open");
}

/// A peer may write a zero-length datagram; it is a malformed message, not
/// the end of the port.
#[test]
fn zero_length_datagram_is_not_end_of_file() {
    case("zero_length_datagram", || {
        let (mut rx, tx) = ferry::port().unwrap();
        reject(&mut rx, &tx, b"", &[], WireError::Truncated { need: 24, got: 0 });
        let (r, _w) = pipe();
        reject(&mut rx, &tx, b"", &[r.as_fd()], WireError::Truncated { need: 24, got: 0 });
        assert!(!rx.senders_gone());
        still_serves(&mut rx, &tx);
        // And in a port set.
        let mut set = PortSet::new().unwrap();
        let id = set.insert(rx);
        send_raw(tx.as_fd(), b"", &[]).unwrap();
        match set.wait(Timeout::millis(5000)) {
            Ok(Event::BadMessage(got, WireError::Truncated { need: 24, got: 0 })) => assert_eq!(got, id),
            other => panic!("expected a bad message event, got {other:?}"),
        }
        tx.send(Message::new(9), Timeout::Zero).unwrap();
        match set.wait(Timeout::millis(5000)) {
            Ok(Event::Message(got, m)) => assert_eq!((got, m.op()), (id, 9)),
            other => panic!("expected the message, got {other:?}"),
        }
    });
}

#[test]
fn lengths_that_lie() {
    case("lengths_that_lie", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (port_rx, port_tx) = ferry::port().unwrap();
        let two = bytes(5, 0, &[desc(KIND_SEND, 1), desc(KIND_SEND, 1)], b"0123456789");
        let fds = [port_tx.as_fd(), port_tx.as_fd()];
        // Inline bytes missing.
        reject(&mut rx, &tx, &two[..two.len() - 4], &fds, WireError::Truncated { need: 98, got: 94 });
        // An item missing.
        reject(&mut rx, &tx, &two[..56], &fds, WireError::Truncated { need: 98, got: 56 });
        // Bytes beyond what the header declares.
        let mut longer = two.clone();
        longer.extend_from_slice(b"extra");
        reject(&mut rx, &tx, &longer, &fds, WireError::LengthMismatch { declared: 98, actual: 103 });
        // An inline length beyond the limit.
        let mut huge = bytes(5, 0, &[], b"");
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        reject(&mut rx, &tx, &huge, &[], WireError::InlineTooLarge(u32::MAX as usize));
        // An item count beyond the limit.
        let mut many = bytes(5, 0, &[], b"");
        many[6..8].copy_from_slice(&65u16.to_le_bytes());
        reject(&mut rx, &tx, &many, &fds, WireError::TooManyItems(65));
        drop(port_tx);
        assert_no_senders(port_rx);
        still_serves(&mut rx, &tx);
    });
}

#[test]
fn item_counts_that_do_not_match_the_descriptors() {
    case("fd_counts", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (a_rx, a_tx) = ferry::port().unwrap();
        let (r, w) = pipe();
        // Two rights declared, one descriptor sent.
        let two = bytes(1, 0, &[desc(KIND_SEND, 1), desc(KIND_SEND, 1)], b"");
        reject(&mut rx, &tx, &two, &[a_tx.as_fd()], WireError::FdCountMismatch { declared: 2, received: 1 });
        // Two declared, none sent.
        reject(&mut rx, &tx, &two, &[], WireError::FdCountMismatch { declared: 2, received: 0 });
        // One declared, three sent.
        let one = bytes(1, 0, &[desc(KIND_SEND, 1)], b"");
        reject(&mut rx, &tx, &one, &[a_tx.as_fd(), r.as_fd(), w.as_fd()], WireError::FdCountMismatch { declared: 1, received: 3 });
        // None declared, one sent.
        reject(&mut rx, &tx, &bytes(1, 0, &[], b"hi"), &[a_tx.as_fd()], WireError::FdCountMismatch { declared: 0, received: 1 });
        // The header agrees with what arrived, the items do not.
        let mut lying = two.clone();
        lying[16..18].copy_from_slice(&3u16.to_le_bytes());
        reject(&mut rx, &tx, &lying, &[a_tx.as_fd(), r.as_fd(), w.as_fd()], WireError::FdCountMismatch { declared: 2, received: 3 });
        // A send right with two descriptors.
        reject(&mut rx, &tx, &bytes(1, 0, &[desc(KIND_SEND, 2)], b""), &[a_tx.as_fd(), r.as_fd()], WireError::BadItemFdCount { item: 0, count: 2 });
        // A region with none.
        reject(&mut rx, &tx, &bytes(1, 0, &[desc(KIND_SEND, 1), desc(KIND_REGION, 0)], b""), &[a_tx.as_fd()], WireError::BadItemFdCount { item: 1, count: 0 });
        drop((a_tx, r, w));
        assert_no_senders(a_rx);
        still_serves(&mut rx, &tx);
    });
}

#[test]
fn too_many_descriptors() {
    case("too_many_fds", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (a_rx, a_tx) = ferry::port().unwrap();
        let (r, _w) = pipe();
        // The most the kernel passes, beside a message that declares one.
        let mut fds = vec![a_tx.as_fd()];
        fds.extend(std::iter::repeat_n(r.as_fd(), wire::MAX_FDS - 1));
        let one = bytes(1, 0, &[desc(KIND_SEND, 1)], b"");
        reject(&mut rx, &tx, &one, &fds, WireError::FdCountMismatch { declared: 1, received: wire::MAX_FDS });
        // A header that declares more than any message may carry.
        let mut over = bytes(1, 0, &[desc(KIND_RECEIVE, 1)], b"");
        over[16..18].copy_from_slice(&254u16.to_le_bytes());
        reject(&mut rx, &tx, &over, &fds, WireError::TooManyFds(254));
        // One more than the kernel passes cannot even be sent.
        fds.push(r.as_fd());
        assert_eq!(send_raw(tx.as_fd(), &one, &fds), Err(Errno::INVAL), "the kernel passed more than SCM_MAX_FD");
        drop(fds);
        // Through the library the sender learns it before the kernel does: a
        // receive right with 253 send-once rights outstanding is 254
        // descriptors.
        let (mut big_rx, _big_tx) = ferry::port().unwrap();
        let once: Vec<_> = (0..wire::MAX_FDS).map(|_| big_rx.make_send_once().unwrap()).collect();
        match tx.send(Message::new(1).with_item(big_rx), Timeout::Zero).map_err(SendError::from) {
            Err(SendError::TooLarge(why)) => assert!(why.contains("254 descriptors"), "{why}"),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        drop(once);
        drop(a_tx);
        assert_no_senders(a_rx);
        still_serves(&mut rx, &tx);
    });
}

#[test]
fn wrong_right_kinds() {
    case("wrong_right_kinds", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (r, w) = pipe();
        let ev = eventfd();
        let mem = memfd();
        let (stream_a, _stream_b) =
            rustix::net::socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None).unwrap();
        let (dgram_a, _dgram_b) =
            rustix::net::socketpair(AddressFamily::UNIX, SocketType::DGRAM, SocketFlags::CLOEXEC, None).unwrap();
        let udp = rustix::net::socket(AddressFamily::INET, SocketType::DGRAM, None).unwrap();
        let one = bytes(1, 0, &[desc(KIND_SEND, 1)], b"");
        for (what, fd) in [
            ("pipe", r.as_fd()),
            ("pipe's write end", w.as_fd()),
            ("eventfd", ev.as_fd()),
            ("memfd", mem.as_fd()),
            ("stream socket", stream_a.as_fd()),
            ("datagram socket", dgram_a.as_fd()),
            ("inet socket", udp.as_fd()),
        ] {
            send_raw(tx.as_fd(), &one, &[fd]).unwrap();
            match rx.recv(Timeout::millis(5000)) {
                Err(RecvError::BadMessage(WireError::NotAPort { item: 0 })) => {}
                other => panic!("a {what} claimed as a send right gave {other:?}"),
            }
        }
        // A good right first, then an eventfd as a send-once right: the
        // message is refused whole, and the good right is closed.
        let (a_rx, a_tx) = ferry::port().unwrap();
        let mixed = bytes(1, 0, &[desc(KIND_SEND, 1), desc(KIND_SEND_ONCE, 1)], b"");
        reject(&mut rx, &tx, &mixed, &[a_tx.as_fd(), ev.as_fd()], WireError::NotAPort { item: 1 });
        // A receive right whose send-once socket is a pipe.
        let (b_rx, b_tx) = ferry::port().unwrap();
        let (c, _d) = seqpacket_pair();
        let recv = bytes(1, 0, &[desc(KIND_SEND, 1), desc(KIND_RECEIVE, 2)], b"");
        reject(&mut rx, &tx, &recv, &[b_tx.as_fd(), c.as_fd(), r.as_fd()], WireError::NotAPort { item: 1 });
        // A memfd as a receive right.
        reject(&mut rx, &tx, &bytes(1, 0, &[desc(KIND_RECEIVE, 1)], b""), &[mem.as_fd()], WireError::NotAPort { item: 0 });
        // A reply right that is not a send right.
        let reply = bytes(1, wire::FLAG_REPLY, &[desc(KIND_RECEIVE, 1)], b"");
        reject(&mut rx, &tx, &reply, &[c.as_fd()], WireError::BadReplyRight);
        // An unknown kind.
        let mut unknown = bytes(1, 0, &[desc(KIND_SEND, 1)], b"");
        unknown[24] = 9;
        reject(&mut rx, &tx, &unknown, &[ev.as_fd()], WireError::UnknownItemKind(9));
        drop((a_tx, b_tx));
        assert_no_senders(a_rx);
        assert_no_senders(b_rx);
        still_serves(&mut rx, &tx);
    });
}

#[test]
fn unknown_versions_and_reserved_bits() {
    case("versions_and_reserved", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (a_rx, a_tx) = ferry::port().unwrap();
        let good = bytes(3, 0, &[desc(KIND_SEND, 1)], b"v");
        for v in [0u8, 3, 255] {
            let mut b = good.clone();
            b[4] = v;
            reject(&mut rx, &tx, &b, &[a_tx.as_fd()], WireError::UnknownVersion(v));
        }
        // Version 2 is known, but only for messages that carry an empty region.
        let mut b = good.clone();
        b[4] = wire::VERSION_EMPTY_REGIONS;
        reject(&mut rx, &tx, &b, &[a_tx.as_fd()], WireError::NeedlessVersion(2));
        let mut magic = good.clone();
        magic[0] = b'f';
        reject(&mut rx, &tx, &magic, &[a_tx.as_fd()], WireError::BadMagic(u32::from_le_bytes(*b"fERY")));
        for (at, val) in [(5, 0x02u8), (5, 0x81), (18, 1), (19, 0x80), (20, 1), (23, 0x80), (24 + 1, 1), (24 + 4, 1), (24 + 31, 1)] {
            let mut b = good.clone();
            b[at] = val;
            reject(&mut rx, &tx, &b, &[a_tx.as_fd()], WireError::ReservedNotZero);
        }
        drop(a_tx);
        assert_no_senders(a_rx);
        still_serves(&mut rx, &tx);
    });
}

#[test]
fn receive_right_sent_to_itself() {
    case("receive_right_to_self", || {
        let (mut rx, tx, a, b) = smuggled_port();
        // By hand: the port's own socket as a receive right, through a send
        // right and through the raw peer socket.
        let recv = bytes(1, 0, &[desc(KIND_RECEIVE, 1)], b"");
        reject(&mut rx, &tx, &recv, &[a.as_fd()], WireError::ReceiveRightToSelf);
        send_raw(b.as_fd(), &recv, &[a.as_fd()]).unwrap();
        expect_bad(&mut rx, WireError::ReceiveRightToSelf);
        // Hidden among a receive right's send-once sockets.
        let (c, _d) = seqpacket_pair();
        let hidden = bytes(1, 0, &[desc(KIND_RECEIVE, 3)], b"");
        let (e, _f) = seqpacket_pair();
        reject(&mut rx, &tx, &hidden, &[c.as_fd(), a.as_fd(), e.as_fd()], WireError::ReceiveRightToSelf);
        // Through the ordinary API: a second receive right over the same
        // socket, moved into a message sent to its own port.
        let twin = second_receive_right(&a);
        tx.send(Message::new(1).with_item(twin), Timeout::Zero).expect("the kernel takes it");
        expect_bad(&mut rx, WireError::ReceiveRightToSelf);
        // A receive right of another port is fine.
        let (other_rx, other_tx) = ferry::port().unwrap();
        tx.send(Message::new(2).with_item(other_rx), Timeout::Zero).unwrap();
        let mut m = rx.recv(Timeout::Zero).unwrap();
        let Some(Item::Receive(mut moved)) = m.take_items().pop() else { panic!("no receive right") };
        other_tx.send(Message::new(3), Timeout::Zero).unwrap();
        assert_eq!(moved.recv(Timeout::Zero).unwrap().op(), 3);
        drop((a, b));
        still_serves(&mut rx, &tx);
    });
}

#[test]
fn oversized_datagrams() {
    case("oversized", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (a_rx, a_tx) = ferry::port().unwrap();
        // Far larger than any message, with a right beside it.
        let mut big = bytes(1, 0, &[desc(KIND_SEND, 1)], b"");
        big.resize(wire::MAX_MESSAGE + 4096, 0xAB);
        reject(&mut rx, &tx, &big, &[a_tx.as_fd()], WireError::Oversized);
        // The largest valid message, plus one byte.
        let items = vec![desc(KIND_SEND, 1); wire::MAX_ITEMS];
        let mut max = bytes(1, 0, &items, &vec![7u8; wire::MAX_INLINE]);
        assert_eq!(max.len(), wire::MAX_MESSAGE);
        max.push(0);
        let fds = vec![a_tx.as_fd(); wire::MAX_ITEMS];
        reject(&mut rx, &tx, &max, &fds, WireError::LengthMismatch { declared: wire::MAX_MESSAGE, actual: wire::MAX_MESSAGE + 1 });
        // And without the extra byte it is accepted whole.
        max.pop();
        send_raw(tx.as_fd(), &max, &fds).unwrap();
        let mut m = rx.recv(Timeout::Zero).unwrap();
        assert_eq!((m.body().len(), m.items().len()), (wire::MAX_INLINE, wire::MAX_ITEMS));
        drop(m.take_items());
        drop(fds);
        drop(a_tx);
        assert_no_senders(a_rx);
        still_serves(&mut rx, &tx);
    });
}

/// When the receiver cannot take every descriptor (it is at its limit),
/// the kernel drops some; the message is refused and the ones that arrived
/// are closed.
#[test]
fn receiver_out_of_descriptors() {
    case("out_of_descriptors", || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (r, _w) = pipe();
        let msg = bytes(1, 0, &[desc(KIND_RECEIVE, 64)], b"");
        send_raw(tx.as_fd(), &msg, &[r.as_fd(); 64]).unwrap();
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let open = common::open_fds() as u64;
        let tight = rustix::process::Rlimit { current: Some(open + 3), maximum: lim.maximum };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, tight).unwrap();
        let got = rx.recv(Timeout::Zero);
        rustix::process::setrlimit(rustix::process::Resource::Nofile, lim).unwrap();
        match got {
            Err(RecvError::BadMessage(WireError::FdsTruncated)) => {}
            other => panic!("expected FdsTruncated, got {other:?}"),
        }
        still_serves(&mut rx, &tx);
    });
}

/// The name server is a ferry port like any other: garbage gets a
/// refusal that says why (before and after the version check) and the
/// server goes on serving everyone.
#[test]
fn name_server_survives_garbage() {
    let _one = serial();
    let path = names_path();
    let mut names = names();
    counted("name_server_garbage", || {
        let conn = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None).unwrap();
        rustix::net::sockopt::set_socket_passcred(&conn, true).unwrap();
        rustix::net::connect(&conn, &rustix::net::SocketAddrUnix::new(&path).unwrap()).unwrap();
        let (r, _w) = pipe();
        let mut version2 = bytes(1, 0, &[], b"name");
        version2[4] = 2;
        let not_a_port = bytes(1, 0, &[desc(KIND_SEND, 1)], b"name");
        let hello = ferry::idl::hello_request::<ferry::bootstrap::protocol::Protocol>();
        let hello = bytes(hello.op(), 0, &[], hello.body());
        // Before the version check, garbage gets the "bad request" of the
        // protocol's version 1; after it, a fault of the typed interface.
        for (spoke, want) in [(false, 5), (true, ferry::idl::REPLY_FAULT)] {
            if spoke {
                send_raw(conn.as_fd(), &hello, &[]).unwrap();
                let mut buf = vec![0u8; wire::MAX_MESSAGE];
                let n = rustix::net::recv(&conn, &mut buf, rustix::net::RecvFlags::empty()).unwrap().0;
                assert_eq!(wire::parse(&buf[..n], 0).expect("a well-formed reply").op, ferry::idl::REPLY_OK, "the version check");
            }
            for (garbage, fds) in [
                (&b""[..], &[][..]),
                (&b"hello"[..], &[r.as_fd()][..]),
                (&version2[..], &[][..]),
                (&not_a_port[..], &[r.as_fd()][..]),
            ] {
                send_raw(conn.as_fd(), garbage, fds).unwrap();
                let mut buf = vec![0u8; wire::MAX_MESSAGE];
                let n = rustix::net::recv(&conn, &mut buf, rustix::net::RecvFlags::empty()).unwrap().0;
                let p = wire::parse(&buf[..n], 0).expect("a well-formed reply");
                assert_eq!(p.op, want, "the refusal of {garbage:?} (version check passed: {spoke})");
                assert!(!buf[p.inline].is_empty(), "the reply says why");
            }
        }
        // The server still serves this connection and others.
        let (_port_rx, port_tx) = ferry::port().unwrap();
        names.register("still-here", &port_tx).unwrap();
        assert!(names.lookup("still-here").is_ok());
        names.unregister("still-here").unwrap();
    });
}

/// Another process floods a port with garbage (and real descriptors) while
/// a well-behaved one sends; every good message arrives intact and in
/// order, every bad one is refused with the error its sender predicted.
#[test]
fn flood_from_another_process() {
    let _one = serial();
    let path = names_path();
    let mut names = names();
    common::watchdog("flood", Duration::from_secs(120), || {
        let (mut rx, tx) = ferry::port().unwrap();
        names.register("flood-target", &tx).unwrap();
        drop(tx);
        let before = common::open_fds();
        const BAD: usize = 400;
        const GOOD: usize = 300;
        let flood = common::spawn_peer(&path, "hostile-flood", &["flood-target", &BAD.to_string()]);
        let client = common::spawn_peer(&path, "hostile-client", &["flood-target", &GOOD.to_string()]);
        let (mut bad, mut good) = (Vec::new(), 0usize);
        while good < GOOD || bad.len() < BAD {
            match rx.recv(Timeout::Infinite) {
                Ok(mut m) => {
                    assert_eq!(m.op() as usize, good, "good messages arrive in order");
                    assert_eq!(m.body(), format!("good message {good}").as_bytes());
                    let items = m.take_items();
                    if good % 5 == 0 {
                        assert!(matches!(items[..], [Item::Send(_)]), "message {good} lost its right");
                    }
                    good += 1;
                }
                Err(RecvError::BadMessage(w)) => bad.push(format!("{w:?}")),
                Err(e) => panic!("receive failed: {e}"),
            }
        }
        let predicted = common::finish(flood);
        common::finish(client);
        let predicted: Vec<&str> = predicted.lines().collect();
        assert_eq!(predicted.len(), BAD);
        for (i, (p, b)) in predicted.iter().zip(&bad).enumerate() {
            assert_eq!(p, b, "garbage datagram {i}");
        }
        // The peers' connections to the name server (in this process) close
        // when it gets to them; nothing the flood sent may stay open.
        let mut after = common::open_fds();
        for _ in 0..2000 {
            if after <= before {
                break;
            }
            common::nap();
            after = common::open_fds();
        }
        assert_eq!(after, before, "{} descriptors leaked", after as isize - before as isize);
        names.unregister("flood-target").unwrap();
        assert!(matches!(rx.recv(Timeout::millis(5000)), Err(RecvError::NoSenders)));
    });
}

/// A sender declares a region of a petabyte, backed by a sealed sparse
/// memfd that really is that long (so every check of the format passes).
/// Copying it out, or mapping it at once, is refused against the limit the
/// receiver chose before anything is allocated; even without a limit the
/// copy fails with a typed error instead of aborting the receiver; the
/// region can still be mapped lazily or dropped, and nothing leaks.
#[test]
fn declared_size_cannot_crash_the_receiver() {
    let _one = serial();
    let path = names_path();
    let mut names = names();
    counted("declared_size", || {
        let (mut rx, tx) = ferry::port().unwrap();
        names.register("huge-target", &tx).unwrap();
        drop(tx);
        const HUGE: usize = 1 << 50;
        let peer = common::spawn_peer(&path, "hostile-huge-region", &["huge-target", &HUGE.to_string()]);
        let mut take = || {
            let mut m = rx.recv(Timeout::Infinite).unwrap();
            assert_eq!(m.body(), b"huge");
            match m.take_items().pop() {
                Some(Item::Region(r)) => r,
                other => panic!("expected a region, got {other:?}"),
            }
        };
        let r = take();
        assert_eq!(r.len(), HUGE);
        let limit = 64 << 20;
        match r.copy_out(limit) {
            Err(ferry::RegionError::TooLarge { len, limit: l }) => assert_eq!((len, l), (HUGE as u64, limit as u64)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(common::finish(peer).trim(), "sent");
        // Mapping it at once is refused the same way, and the region comes back.
        let peer = common::spawn_peer(&path, "hostile-huge-region", &["huge-target", &HUGE.to_string()]);
        let r = take();
        let err = r.map(ferry::MapOptions::immediate().limit(limit)).unwrap_err();
        assert!(matches!(err.error, ferry::RegionError::TooLarge { .. }), "{err}");
        // Without a limit the allocation itself fails, with a typed error.
        match err.region.copy_out(usize::MAX) {
            Err(ferry::RegionError::Alloc(_)) => {}
            other => panic!("expected Alloc, got {other:?}"),
        }
        assert_eq!(common::finish(peer).trim(), "sent");
        names.unregister("huge-target").unwrap();
    });
}
