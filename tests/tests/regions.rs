//! Out-of-line regions between real processes: every transfer mode,
//! same-address placement, copy-on-write isolation both ways, a hostile
//! sender, reclamation through thousands of sends and a killed receiver,
//! and lend-pool reuse.
//!
//! The tests of this file run one at a time (a lock) because they measure
//! process-wide things: open descriptors and the system's shmem use.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use common::{finish, open_fds, spawn_peer, watchdog};
use ferry::region::{auto, LendPool, MapOptions, Mode, Region, RegionError, RegionItem};
use ferry::{counters, Bootstrap, Item, Message, ReceiveRight, RecvError, SendRight, Timeout, WireError};

fn serial() -> MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

/// One private name service for this test binary (the embedded server is
/// one per process).
fn bootstrap() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let p = common::private_bootstrap("regions");
        std::env::set_var("FERRY_BOOTSTRAP", &p);
        Bootstrap::connect().expect("embedded name server");
        p
    })
    .clone()
}

/// A port registered under `name`.
fn listen(name: &str) -> (ReceiveRight, SendRight) {
    let path = bootstrap();
    let (rx, tx) = ferry::port().unwrap();
    Bootstrap::connect_to(&path).unwrap().register(name, &tx).unwrap();
    (rx, tx)
}

const T: Timeout = Timeout::After(Duration::from_secs(30));

fn region_of(m: &mut Message) -> RegionItem {
    match m.take_items().into_iter().find_map(|i| if let Item::Region(r) = i { Some(r) } else { None }) {
        Some(r) => r,
        None => panic!("message {} carries no region", m.op()),
    }
}

fn shmem_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap();
    s.lines().find(|l| l.starts_with("Shmem:")).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
}

fn memfds_open() -> usize {
    // ferry's own long-lived memfd (the published counters) is not a region.
    ferry::counters::publish();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("/memfd:"))
        .count()
}

/// Open descriptors once the embedded name server has closed connections
/// that just ended (it does so on its own thread).
fn settled_fds() -> usize {
    let mut last = open_fds();
    let mut same = 0;
    while same < 5 {
        std::thread::sleep(Duration::from_millis(10));
        let now = open_fds();
        if now == last {
            same += 1;
        } else {
            (last, same) = (now, 0);
        }
    }
    last
}

/// Waits (bounded) for `f` to hold; returns whether it did.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..2000 {
        if f() {
            return true;
        }
        common::nap();
    }
    f()
}

#[test]
fn copy_mode_isolates_both_ways() {
    let _s = serial();
    watchdog("copy_mode_isolates_both_ways", Duration::from_secs(60), || {
        let (mut rx, _tx) = listen("regions-copy");
        let peer = spawn_peer(&bootstrap(), "region-copy", &["regions-copy"]);
        let mut m = rx.recv(T).unwrap();
        let mut items = m.take_items();
        let Some(Item::Send(back)) = items.pop() else { panic!("no reply right") };
        let Some(Item::Region(r)) = items.pop() else { panic!("no region") };
        assert_eq!((r.mode(), r.len()), (Mode::Copy, 1 << 20));
        let mut v = r.map(MapOptions::lazy()).unwrap();
        // The sender overwrites its copy with 'B' and then tells us.
        assert_eq!(rx.recv(T).unwrap().op(), 2);
        assert!(v.iter().all(|&b| b == b'A'), "the sender's later writes reached the receiver");
        v.as_mut_slice().unwrap().iter_mut().for_each(|b| *b = b'C');
        assert!(v.iter().all(|&b| b == b'C'));
        back.send(Message::new(3), T).unwrap();
        // A second send by copy carries what the sender wrote meanwhile.
        let mut m = rx.recv(T).unwrap();
        let again = region_of(&mut m).copy_out(64 << 20).unwrap();
        assert!(again.iter().all(|&b| b == b'B'));
        assert!(v.iter().all(|&b| b == b'C'), "our private copy changed");
        let out = finish(peer);
        assert!(out.contains("sender-ok resend_copied=1048576"), "{out}");
    });
}

#[test]
fn move_mode_and_same_address_placement() {
    let _s = serial();
    watchdog("move_mode_and_same_address_placement", Duration::from_secs(60), || {
        let (mut rx, _tx) = listen("regions-move");
        let peer = spawn_peer(&bootstrap(), "region-move", &["regions-move"]);
        let mut first = rx.recv(T).unwrap();
        let addr = usize::from_le_bytes(first.body().try_into().unwrap());
        let r1 = region_of(&mut first);
        assert_eq!((r1.mode(), r1.sender_address()), (Mode::Copy, Some(addr)));
        let before = counters::snapshot();
        let v1 = r1.map(MapOptions::immediate().at_sender_address().read_only()).unwrap();
        assert_eq!(v1.addr(), addr);
        assert!(!v1.is_writable());
        assert!(counters::snapshot().since(&before).pages_populated >= 64);
        let mut second = rx.recv(T).unwrap();
        let r2 = region_of(&mut second);
        assert_eq!((r2.mode(), r2.sender_address()), (Mode::Move, Some(addr)));
        // The range is taken by the first mapping: a clear error, and the
        // region comes back to be mapped elsewhere.
        let err = r2.map(MapOptions::lazy().at_sender_address()).unwrap_err();
        assert!(matches!(err.error, RegionError::AddressTaken { addr: a, .. } if a == addr), "{err}");
        let mut v2 = err.region.map(MapOptions::lazy()).unwrap();
        assert_ne!(v2.addr(), addr);
        for (i, (a, b)) in v1.iter().zip(v2.iter()).enumerate() {
            assert_eq!((*a, *b), ((i % 251) as u8, (i % 251) as u8), "byte {i}");
        }
        v2.as_mut_slice().unwrap()[0] = 0xff;
        assert_eq!(v1[0], 0, "a private write leaked into another mapping");
        let words = v2.as_slice_of::<u64>();
        assert_eq!(words.len(), (256 << 10) / 8);
        finish(peer);
    });
}

#[test]
fn lend_pool_reuses_its_regions() {
    let _s = serial();
    watchdog("lend_pool_reuses_its_regions", Duration::from_secs(120), || {
        const FRAMES: usize = 300;
        let (mut rx, _tx) = listen("regions-lend");
        let peer = spawn_peer(&bootstrap(), "region-lend", &["regions-lend", &FRAMES.to_string(), "3"]);
        for i in 0..FRAMES {
            let mut m = rx.recv(T).unwrap();
            assert_eq!(m.op() as usize, i);
            let r = region_of(&mut m);
            assert_eq!((r.mode(), r.len()), (Mode::Lend, 32 << 10));
            assert!(r.lend_slot().unwrap() < 3);
            if i == 0 {
                // Not by value: refused unless the receiver opts in.
                let err = r.map(MapOptions::lazy()).unwrap_err();
                assert!(matches!(err.error, RegionError::SenderMayWrite(Mode::Lend)), "{err}");
                let bytes = err.region.copy_out(64 << 20).unwrap();
                assert_eq!(&bytes[..8], &0u64.to_le_bytes());
                continue;
            }
            let v = r.map_shared(MapOptions::lazy()).unwrap();
            assert!(!v.is_writable() && v.as_atomic_u64().is_none(), "a lent region must map read-only");
            let mut head = [0u8; 8];
            assert!(v.read_at(0, &mut head));
            assert_eq!(head, (i as u64).to_le_bytes());
            assert!(v.to_vec(64 << 20).unwrap()[8..].iter().all(|&b| b == i as u8), "frame {i} corrupt");
            // Dropping `v` returns the slot to the lender's pool.
        }
        let out = finish(peer);
        assert!(out.contains("allocated=3 slots=3"), "pool allocated more than its regions: {out}");
        assert!(out.contains(&format!("lent={FRAMES}")), "{out}");
    });
}

/// A lend pool of 201 slots, 200 of them held by a receiver in this
/// process: 40 rounds of acquire, lend, send, receive and the oldest frame
/// dropped; then, every slot out, an acquire that waits until a thread
/// drops one.
fn lend_beside_many_lent_slots() {
    let pool = LendPool::new(201, 4096).unwrap();
    let (mut rx, tx) = ferry::port_with(ferry::PortOptions { queue_limit: Some(1 << 20) }).unwrap();
    let mut held = std::collections::VecDeque::new();
    let mut lend = |held: &mut std::collections::VecDeque<Vec<Item>>, i: u32| {
        let mut lease = pool.acquire(Timeout::Infinite).unwrap();
        lease.as_mut_slice()[0] = i as u8;
        tx.send(Message::new(i).with_item(lease.lend().unwrap()), Timeout::Infinite).unwrap();
        held.push_back(rx.recv(Timeout::Infinite).unwrap().take_items());
    };
    for i in 0..200 {
        lend(&mut held, i);
    }
    let _ = rustix::process::getppid();
    for i in 0..40 {
        lend(&mut held, 200 + i);
        held.pop_front();
    }
    let last = pool.acquire(Timeout::Zero).unwrap();
    assert!(matches!(pool.acquire(Timeout::Zero), Err(RegionError::PoolExhausted)));
    let oldest = held.pop_front().unwrap();
    let returner = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(oldest);
    });
    let freed = pool.acquire(Timeout::Infinite).unwrap();
    let _ = rustix::process::getppid();
    returner.join().unwrap();
    drop((last, freed, held));
    println!("done");
}

#[test]
fn a_lend_pool_costs_the_same_however_many_of_its_slots_are_out() {
    if common::counted_child() {
        lend_beside_many_lent_slots();
        return;
    }
    let _s = serial();
    // Counted in system calls, not time: each acquire polled every lent
    // slot with a call of its own, and one that waited duplicated the
    // descriptor of every lent slot (lending duplicates one per frame).
    let Some(calls) = common::counted_calls("a_lend_pool_costs_the_same_however_many_of_its_slots_are_out", "poll,ppoll,fcntl") else { return };
    let made = calls.iter().filter(|l| l.contains("poll(") || l.contains("F_DUPFD")).count();
    assert!(made <= 41 * 4, "41 acquires beside 200 lent slots made {made} polling and duplicating calls");
}

#[test]
fn share_mode_is_opt_in_and_mutual() {
    let _s = serial();
    watchdog("share_mode_is_opt_in_and_mutual", Duration::from_secs(60), || {
        use std::sync::atomic::Ordering::SeqCst;
        let (mut rx, _tx) = listen("regions-share");
        let peer = spawn_peer(&bootstrap(), "region-share", &["regions-share"]);
        let mut m = rx.recv(T).unwrap();
        let mut items = m.take_items();
        let Some(Item::Send(back)) = items.pop() else { panic!("no reply right") };
        let Some(Item::Region(r)) = items.pop() else { panic!("no region") };
        let err = r.map(MapOptions::lazy()).unwrap_err();
        assert!(matches!(err.error, RegionError::SenderMayWrite(Mode::Share)));
        let v = err.region.map_shared(MapOptions::lazy()).unwrap();
        assert!(v.is_writable());
        assert!(v.write_at(0, b"hi"));
        let words = v.as_atomic_u64().expect("writable");
        words[1].store(41, SeqCst);
        back.send(Message::new(1), T).unwrap();
        rx.recv(T).unwrap();
        assert_eq!(words[2].load(SeqCst), 42, "the sharer's write is not visible");
        assert!(finish(peer).contains("saw=41"));
    });
}

#[test]
fn hostile_sender_cannot_change_what_the_receiver_sees() {
    let _s = serial();
    watchdog("hostile_sender", Duration::from_secs(60), || {
        let (mut rx, _tx) = listen("regions-hostile");
        let fds_before = settled_fds();
        let memfds_before = memfds_open();
        let rejected_before = counters::snapshot().regions_rejected;
        let peer = spawn_peer(&bootstrap(), "region-hostile", &["regions-hostile"]);
        let expect = |e: RecvError, op: u32| match (op, e) {
            (1..=4, RecvError::BadMessage(WireError::NotSealed { item: 0 })) => {}
            (5 | 6 | 8 | 9, RecvError::BadMessage(WireError::BadRegion { item: 0, .. })) => {}
            (7, RecvError::BadMessage(WireError::NotAPort { item: 0 })) => {}
            (10, RecvError::BadMessage(WireError::BadItemFdCount { item: 0, count: 2 })) => {}
            (op, e) => panic!("message {op}: unexpected {e:?}"),
        };
        for op in 1..=10 {
            expect(rx.recv(T).unwrap_err(), op);
        }
        let mut m = rx.recv(T).unwrap();
        assert_eq!(m.op(), 11);
        let mut items = m.take_items();
        let Some(Item::Send(back)) = items.pop() else { panic!("no right") };
        let Some(Item::Region(r)) = items.pop() else { panic!("no region") };
        let v = r.map(MapOptions::immediate()).unwrap();
        assert!(v.iter().all(|&b| b == 0x5a));
        back.send(Message::new(0), T).unwrap();
        let report = rx.recv(T).unwrap();
        assert_eq!(report.op(), 12);
        assert!(report.body().is_empty(), "the kernel allowed: {}", String::from_utf8_lossy(report.body()));
        assert!(v.iter().all(|&b| b == 0x5a), "the hostile sender changed the receiver's bytes");
        // Still serving.
        let mut m = rx.recv(T).unwrap();
        assert_eq!(m.op(), 13);
        assert!(region_of(&mut m).copy_out(64 << 20).unwrap().iter().all(|&b| b == 0x13));
        let out = finish(peer);
        assert!(out.contains("seal-with-shared-mapping=refused"), "{out}");
        assert!(counters::snapshot().regions_rejected - rejected_before >= 8);
        drop((v, back, m));
        assert_eq!(memfds_open(), memfds_before, "memfd leaked");
        assert!(eventually(|| open_fds() <= fds_before), "descriptor leak: {} before, {} after", fds_before, open_fds());
    });
}

#[test]
fn thousands_of_sends_return_their_memory() {
    let _s = serial();
    watchdog("thousands_of_sends", Duration::from_secs(300), || {
        const N: usize = 3000;
        const SIZE: usize = 1 << 20;
        let (mut rx, _tx) = listen("regions-flood");
        let fds_before = settled_fds();
        let base = shmem_kib();
        let peer = spawn_peer(&bootstrap(), "region-flood", &["regions-flood", &N.to_string(), &SIZE.to_string()]);
        let mut first = rx.recv(T).unwrap();
        let Some(Item::Send(back)) = first.take_items().pop() else { panic!("no right") };
        let mut held = Vec::new();
        let mut peak = 0;
        for i in 0..N {
            let mut m = rx.recv(T).unwrap();
            let v = region_of(&mut m).map(MapOptions::lazy()).unwrap();
            // Touch every page.
            let sum: u64 = v.iter().step_by(4096).map(|&b| b as u64).sum();
            std::hint::black_box(sum);
            held.push(v);
            // Hold 64 at a time, so the measurement is shown to see them.
            if held.len() == 64 {
                if i < 64 {
                    peak = shmem_kib();
                }
                held.clear();
            }
        }
        drop(held);
        assert!(peak >= base + 48 * 1024, "shmem did not show 64 live regions: base {base} KiB, peak {peak} KiB");
        // Every region is gone from both sides (the peer is still alive). The
        // slack absorbs other processes' shmem use; a leak of even a tenth of
        // the 3000 MiB that went through would exceed it.
        let slack = 256 * 1024;
        assert!(eventually(|| shmem_kib() <= base + slack), "shmem {} KiB, baseline {base} KiB after {N} regions", shmem_kib());
        back.send(Message::new(0), T).unwrap();
        drop(back);
        finish(peer);
        assert!(eventually(|| open_fds() <= fds_before), "descriptor leak: {} before, {} after", fds_before, open_fds());
    });
}

#[test]
fn killed_receiver_frees_everything() {
    let _s = serial();
    watchdog("killed_receiver", Duration::from_secs(120), || {
        const SIZE: usize = 128 << 20;
        let path = bootstrap();
        let base = shmem_kib();
        let mut peer = spawn_peer(&path, "region-sink", &["regions-sink"]);
        let mut lines = BufReader::new(peer.stdout.take().unwrap()).lines();
        let to = {
            let mut b = Bootstrap::connect_to(&path).unwrap();
            let mut found = None;
            assert!(eventually(|| {
                found = b.lookup("regions-sink").ok();
                found.is_some()
            }));
            found.unwrap()
        };
        // One region it maps and holds, three more still queued when it dies.
        for i in 0..4 {
            let mut r = Region::new(SIZE).unwrap();
            r.as_mut_slice().iter_mut().step_by(4096).for_each(|b| *b = i + 1);
            to.send(Message::new(1).with_item(r.by_copy().unwrap()), T).unwrap();
            if i == 0 {
                assert_eq!(lines.next().unwrap().unwrap(), format!("mapped {SIZE}"));
            }
        }
        // Our copies are gone; the peer holds one mapping and the queue three.
        assert!(shmem_kib() >= base + 3 * (SIZE as u64 >> 10), "regions in flight not visible in shmem");
        peer.kill().unwrap();
        peer.wait().unwrap();
        // Slack for other processes' shmem use: under one of the four regions.
        let slack = 96 * 1024;
        assert!(eventually(|| shmem_kib() <= base + slack), "shmem {} KiB after the receiver died, baseline {base} KiB", shmem_kib());
        assert!(to.wait_dead(Timeout::Zero));
    });
}

#[test]
fn lent_region_returns_when_the_borrower_is_killed() {
    let _s = serial();
    watchdog("lent_region_returns", Duration::from_secs(60), || {
        let path = bootstrap();
        let mut peer = spawn_peer(&path, "region-sink", &["regions-borrower"]);
        let mut lines = BufReader::new(peer.stdout.take().unwrap()).lines();
        let mut b = Bootstrap::connect_to(&path).unwrap();
        let mut found = None;
        assert!(eventually(|| {
            found = b.lookup("regions-borrower").ok();
            found.is_some()
        }));
        let to = found.unwrap();
        let pool = LendPool::new(1, 1 << 20).unwrap();
        let mut lease = pool.acquire(T).unwrap();
        lease.as_mut_slice()[0] = 9;
        to.send(Message::new(1).with_item(lease.lend().unwrap()), T).unwrap();
        assert_eq!(lines.next().unwrap().unwrap(), format!("mapped {}", 1 << 20));
        // The borrower holds the only region: none to lease.
        assert!(matches!(pool.acquire(Timeout::Zero), Err(RegionError::PoolExhausted)));
        peer.kill().unwrap();
        peer.wait().unwrap();
        let lease = pool.acquire(T).expect("the region came back when its borrower died");
        assert_eq!(lease.as_slice()[0], 9);
        assert_eq!(pool.available(), 0);
        drop(lease);
        assert_eq!(pool.available(), 1);
    });
}

#[test]
fn auto_payload_goes_inline_or_by_region() {
    let _s = serial();
    watchdog("auto_payload", Duration::from_secs(60), || {
        let crossover = auto::crossover();
        assert!(crossover > 0);
        let (mut rx, tx) = ferry::port().unwrap();
        let small = vec![1u8; 100.min(crossover - 1)];
        let big = vec![2u8; crossover.max(256 << 10)];
        for data in [&small, &big] {
            let m = auto::attach(Message::new(5).with_item(ferry::port().unwrap().1), data).unwrap();
            let regions = m.items().iter().filter(|i| matches!(i, Item::Region(_))).count();
            assert_eq!(regions, usize::from(data.len() >= crossover));
            tx.send(m, T).unwrap();
            let mut got = rx.recv(T).unwrap();
            let payload = auto::take(&mut got).unwrap();
            assert_eq!(&payload[..], &data[..]);
            assert_eq!(got.items().len(), 1, "other items must stay");
        }
    });
}

#[test]
fn region_api_in_process() {
    let _s = serial();
    let mut r = Region::new(10_000).unwrap();
    assert_eq!(r.len(), 10_000);
    r.as_mut_slice_of::<u32>()[5] = 0xdead_beef;
    assert_eq!(r.as_slice_of::<u32>().len(), 2500);
    let (mut rx, tx) = ferry::port().unwrap();
    tx.send(Message::new(1).with_item(r.by_copy().unwrap()), T).unwrap();
    let mut m = rx.recv(T).unwrap();
    let item = region_of(&mut m);
    // Forwarded as it is, without mapping.
    tx.send(Message::new(2).with_item(item), T).unwrap();
    let mut m = rx.recv(T).unwrap();
    let v = region_of(&mut m).map(MapOptions::lazy()).unwrap();
    assert_eq!(v.as_slice_of::<u32>()[5], 0xdead_beef);
    assert_eq!(v.len(), 10_000);
    // Sending by copy again without writing costs no copy.
    let before = counters::snapshot();
    drop(r.by_copy().unwrap());
    assert_eq!(counters::snapshot().since(&before).bytes_copied, 0);
    // Ordinary memory costs one copy, and has no sender address to keep.
    let before = counters::snapshot();
    tx.send(Message::new(3).with_item(RegionItem::copied_from(&[5u8; 5000]).unwrap()), T).unwrap();
    let mut m = rx.recv(T).unwrap();
    let d = counters::snapshot().since(&before);
    assert_eq!((d.bytes_copied, d.messages_sent, d.messages_received, d.regions_sent_move, d.regions_received_move), (5000, 1, 1, 1, 1));
    let err = region_of(&mut m).map(MapOptions::lazy().at_sender_address()).unwrap_err();
    assert!(matches!(err.error, RegionError::NoSenderAddress));
    assert_eq!(err.region.copy_out(64 << 20).unwrap(), vec![5u8; 5000]);
}

/// `Region::write_at` writes a fresh region through its memfd and a sent
/// one through its private mapping: the writer sees every write, a
/// receiver by copy only what was there when it was sent, and a write
/// that would end past the region is refused whole.
#[test]
fn write_at_fills_a_region_and_never_reaches_a_receiver_by_copy() {
    let _s = serial();
    let len = 3 * 4096 + 100;
    let mut r = Region::new(len).unwrap();
    let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    // Pieces that straddle page boundaries, written out of order.
    for (at, n) in [(4000, 5000), (0, 4000), (9000, len - 9000)] {
        r.write_at(at, &pattern[at..at + n]).unwrap();
    }
    assert!(r.as_slice() == &pattern[..], "the region does not read back what was written");
    // Past the end: an error, and not a byte written.
    for (at, n) in [(len - 10, 11), (len + 1, 0), (usize::MAX, 2)] {
        let e = r.write_at(at, &vec![0xEE; n]).unwrap_err();
        assert!(matches!(&e, RegionError::Io(io) if io.kind() == std::io::ErrorKind::InvalidInput), "{e}");
    }
    assert!(r.as_slice() == &pattern[..], "a refused write changed the region");
    r.write_at(len, &[]).unwrap();

    let (mut rx, tx) = ferry::port().unwrap();
    tx.send(Message::new(1).with_item(r.by_copy().unwrap()), T).unwrap();
    // After the send the memfd is sealed: the write goes to this copy only.
    r.write_at(100, &[0xAB; 5000]).unwrap();
    assert!(r.as_slice()[100..5100].iter().all(|&b| b == 0xAB));
    let mut m = rx.recv(T).unwrap();
    let v = region_of(&mut m).map(MapOptions::lazy()).unwrap();
    assert!(v.as_slice() == &pattern[..], "a write after the send reached the receiver");
    // A second send by copy carries the write.
    tx.send(Message::new(2).with_item(r.by_copy().unwrap()), T).unwrap();
    let mut m = rx.recv(T).unwrap();
    let again = region_of(&mut m).copy_out(1 << 20).unwrap();
    assert!(again[100..5100].iter().all(|&b| b == 0xAB) && again[5100..] == pattern[5100..]);
}

#[test]
fn many_gigabyte_region_costs_only_touched_pages() {
    let _s = serial();
    const LEN: usize = 8 << 30;
    let base = shmem_kib();
    let mut r = Region::new(LEN).unwrap();
    r.as_mut_slice()[0] = 1;
    r.as_mut_slice()[LEN - 1] = 2;
    let (mut rx, tx) = ferry::port().unwrap();
    tx.send(Message::new(1).with_item(r.by_copy().unwrap()), T).unwrap();
    let mut m = rx.recv(T).unwrap();
    let v = region_of(&mut m).map(MapOptions::lazy().read_only()).unwrap();
    assert_eq!((v.len(), v[0], v[LEN - 1], v[LEN / 2]), (LEN, 1, 2, 0));
    assert!(shmem_kib() < base + 64 * 1024, "an 8 GiB region with three pages touched used {} KiB", shmem_kib() - base);
}

/// A borrower that receives a lent slot's descriptors itself tries every
/// write path on them, and on a descriptor reopened from them through
/// `/proc/self/fd` for writing; the kernel refuses all of them. It returns
/// the slot but keeps its descriptors, the lender writes its next (not yet
/// sent) frame into the same slot, and the borrower tries again: refused
/// again, and neither frame changed.
#[test]
fn borrower_cannot_write_the_lenders_pool() {
    let _s = serial();
    watchdog("borrower_cannot_write", Duration::from_secs(120), || {
        let (mut rx, _tx) = listen("regions-borrow-attack");
        let mut peer = spawn_peer(&bootstrap(), "region-borrow-attack", &["regions-borrow-attack"]);
        let mut out = BufReader::new(peer.stdout.take().unwrap());
        let mut m = rx.recv(T).unwrap();
        let Some(Item::Send(to_borrower)) = m.take_items().pop() else { panic!("no right from the borrower") };
        let pool = LendPool::new(1, 64 << 10).unwrap();
        let mut lease = pool.acquire(T).unwrap();
        lease.as_mut_slice().fill(b'A');
        to_borrower.send(Message::new(1).with_item(lease.lend().unwrap()), T).unwrap();
        let m = rx.recv(T).unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        eprintln!("first round: {line}");
        assert_eq!(m.op(), 2);
        assert_eq!(std::str::from_utf8(m.body()).unwrap(), "", "the kernel let the borrower write: {line}");
        assert!(line.contains("reopened-write=refused"), "the borrower could not even try to reopen: {line}");
        // The slot came back: it still holds the frame as it was sent.
        let mut lease = pool.acquire(T).unwrap();
        assert!(lease.as_slice().iter().all(|&b| b == b'A'), "the lent frame changed");
        // The next frame, not yet sent, goes into the same slot.
        lease.as_mut_slice().fill(b'B');
        to_borrower.send(Message::new(3), T).unwrap();
        let m = rx.recv(T).unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        eprintln!("second round: {line}");
        assert_eq!(m.op(), 4);
        assert_eq!(std::str::from_utf8(m.body()).unwrap(), "", "the kernel let the borrower write: {line}");
        assert!(lease.as_slice().iter().all(|&b| b == b'B'), "the unsent frame changed");
        assert!(peer.wait().unwrap().success());
    });
}

/// An empty region arrives empty in every mode that can make one: from
/// ordinary memory, a zero-length `Region` by copy and by move, and an
/// empty frame of a lend pool (`Lease::set_len(0)`); it maps to an empty
/// view and copies out to an empty vector.
#[test]
fn empty_regions_arrive_empty() {
    let _s = serial();
    let (mut rx, tx) = ferry::port().unwrap();
    let mut check = |item: RegionItem, what: &str| {
        tx.send(Message::new(1).with_item(item), T).unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut m = rx.recv(T).unwrap_or_else(|e| panic!("{what}: {e}"));
        let r = region_of(&mut m);
        assert_eq!((r.len(), r.is_empty()), (0, true), "{what}");
        tx.send(Message::new(2).with_item(r), T).unwrap();
        let r = region_of(&mut rx.recv(T).unwrap());
        if r.mode() == Mode::Lend {
            let v = r.map_shared(MapOptions::lazy()).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!((v.len(), v.is_empty(), v.to_vec(0).unwrap()), (0, true, vec![]), "{what}");
        } else {
            let v = r.map(MapOptions::immediate()).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!((v.len(), v.is_empty(), &v[..]), (0, true, &[][..]), "{what}");
        }
    };
    check(RegionItem::copied_from(&[]).unwrap(), "copied from an empty slice");
    let mut empty = Region::new(0).unwrap();
    assert!(empty.is_empty() && empty.as_mut_slice().is_empty());
    check(empty.by_copy().unwrap(), "an empty region by copy");
    check(empty.by_move().unwrap(), "an empty region by move");
    let pool = LendPool::new(1, 4096).unwrap();
    let mut lease = pool.acquire(T).unwrap();
    lease.set_len(0).unwrap();
    check(lease.lend().unwrap(), "an empty lent frame");
    assert!(matches!(pool.acquire(T).unwrap().set_len(4097), Err(RegionError::TooLong { asked: 4097, max: 4096 })));
    tx.send(Message::new(3).with_item(RegionItem::copied_from(&[]).unwrap()), T).unwrap();
    assert_eq!(region_of(&mut rx.recv(T).unwrap()).copy_out(0).unwrap(), Vec::<u8>::new());
}

/// Regions and leases are filled through `std::io::Write` and typed
/// slices, and a received by-value region is read through `std::io::Read`.
#[test]
fn regions_and_leases_are_written_and_read_as_streams() {
    use std::io::{Read, Write};
    let _s = serial();
    let (mut rx, tx) = ferry::port().unwrap();
    let mut r = Region::new(16).unwrap();
    let mut w = r.writer();
    w.write_all(b"0123456789abcdef").unwrap();
    assert_eq!(w.write(b"!").unwrap(), 0, "a region does not grow");
    let mut back = String::new();
    r.reader().read_to_string(&mut back).unwrap();
    assert_eq!(back, "0123456789abcdef");
    tx.send(Message::new(1).with_item(r.by_copy().unwrap()), T).unwrap();
    let v = region_of(&mut rx.recv(T).unwrap()).map(MapOptions::lazy()).unwrap();
    let mut got = Vec::new();
    v.reader().read_to_end(&mut got).unwrap();
    assert_eq!(got, b"0123456789abcdef");

    let pool = LendPool::new(1, 4096).unwrap();
    let mut lease = pool.acquire(T).unwrap();
    lease.as_mut_slice_of::<u32>()[1] = 0xfeed_f00d;
    assert_eq!(lease.as_slice_of::<u32>().len(), 1024);
    let mut w = lease.writer();
    w.write_all(b"frame").unwrap();
    let n = w.position() as usize;
    lease.set_len(n).unwrap();
    tx.send(Message::new(2).with_item(lease.lend().unwrap()), T).unwrap();
    let v = region_of(&mut rx.recv(T).unwrap()).map_shared(MapOptions::lazy()).unwrap();
    assert_eq!(v.to_vec(4096).unwrap(), b"frame");
}

#[test]
fn a_region_seals_once_a_just_forked_child_lets_go_of_its_mapping() {
    let _s = serial();
    watchdog("seal_after_fork", Duration::from_secs(60), || {
        let mut r = Region::new(1 << 20).unwrap();
        r.as_mut_slice().fill(7);
        // A child forked now holds a copy of the region's shared writable
        // mapping for 20 ms (as a child another thread forked holds it
        // until it execs); the seal must wait for it, not fail.
        // SAFETY: the raw clone gives the child a copy of this process;
        // the child makes only the nanosleep and exit_group system calls,
        // taking no lock and allocating nothing.
        let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) } as i32;
        if pid == 0 {
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 20_000_000 };
            // SAFETY: see above; exit_group does not return.
            unsafe {
                libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, std::ptr::null::<libc::timespec>());
                libc::syscall(libc::SYS_exit_group, 0);
            }
        }
        assert!(pid > 0, "clone failed");
        let item = r.by_copy().expect("sealed once the child let go");
        let mut status = 0;
        // SAFETY: waits for the child made above; `status` is ours.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(item.copy_out(1 << 20).unwrap(), vec![7u8; 1 << 20]);
    });
}
