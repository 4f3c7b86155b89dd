//! Populated regions and region pools: frames made ahead of use keep every
//! by-value guarantee (the sender cannot change what it sent, the receiver's
//! view never changes, no region shows anyone an earlier frame's bytes),
//! huge pages fall back to base pages where the system grants none, and a
//! pool leaves no descriptor, memfd or mapping behind.
//!
//! The tests of this file run one at a time (a lock) because they count
//! process-wide things: descriptors, memfds, mappings and page faults.

mod common;

use std::time::Duration;

use common::{open_fds, serial, watchdog};
use ferry::region::{shmem_huge_pages, MapOptions, Mode, Region, RegionItem, RegionOptions, RegionPool};
use ferry::{Item, Message, ReceiveRight, SendRight, Timeout};

const T: Timeout = Timeout::After(Duration::from_secs(30));
const MIB: usize = 1 << 20;

fn region_of(m: &mut Message) -> RegionItem {
    match m.take_items().into_iter().find_map(|i| if let Item::Region(r) = i { Some(r) } else { None }) {
        Some(r) => r,
        None => panic!("message {} carries no region", m.op()),
    }
}

/// Sends `item` to ourselves through a real port and takes it back out.
fn round_trip(rx: &mut ReceiveRight, tx: &SendRight, item: RegionItem) -> RegionItem {
    tx.send(Message::new(1).with_item(item), T).expect("send");
    region_of(&mut rx.recv(T).expect("recv"))
}

/// Memfds this process holds open that are regions.
fn region_memfds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("fd dir")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("/memfd:ferry-region"))
        .count()
}

/// Mappings of region memfds in this process.
fn region_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").expect("maps").lines().filter(|l| l.contains("/memfd:ferry-region")).count()
}

/// Minor page faults of this process so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").expect("stat");
    // The command name may hold spaces: count fields after its closing paren.
    let rest = &s[s.rfind(')').expect("comm") + 2..];
    rest.split_whitespace().nth(7).expect("minflt").parse().expect("number")
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

/// Whether the system gives shmem huge pages to regions that ask.
fn huge_granted() -> bool {
    matches!(shmem_huge_pages().as_deref(), Some("advise" | "always" | "within_size" | "force"))
}

#[test]
fn populated_region_is_zeroed_and_written_without_faults() {
    let _s = serial();
    watchdog("populated_region_is_zeroed_and_written_without_faults", Duration::from_secs(60), || {
        let len = 8 * MIB;
        let pages = (len / 4096) as u64;
        // Base pages, so the fault count below is about ferry's populate
        // path, not huge pages.
        let mut r = Region::with_options(len, RegionOptions { huge_pages: false, populate: true }).expect("region");
        assert!(r.as_slice().iter().all(|&b| b == 0), "a populated region is not zeroed");
        let before = minor_faults();
        r.as_mut_slice().fill(0x77);
        let faults = minor_faults() - before;
        assert!(faults < pages / 16, "writing a populated region took {faults} faults for {pages} pages");
        // The same region unpopulated takes a fault per page written.
        let mut lazy = Region::with_options(len, RegionOptions { huge_pages: false, populate: false }).expect("region");
        let before = minor_faults();
        lazy.as_mut_slice().fill(0x77);
        assert!(minor_faults() - before >= pages / 2, "the lazy region took no faults: the measure is blind");
        let (mut rx, tx) = ferry::port().expect("port");
        let got = round_trip(&mut rx, &tx, r.by_move().expect("by move")).map(MapOptions::lazy()).expect("map");
        assert!(got.iter().all(|&b| b == 0x77));
    });
}

#[test]
fn pooled_regions_keep_the_by_value_guarantee() {
    let _s = serial();
    watchdog("pooled_regions_keep_the_by_value_guarantee", Duration::from_secs(120), || {
        let len = 4 * MIB;
        let (mut rx, tx) = ferry::port().expect("port");
        let pool = RegionPool::new(len, 2, RegionOptions::for_len(len)).expect("pool");
        assert_eq!((pool.region_len(), pool.depth()), (len, 2));
        let mut seen = Vec::new();
        for frame in 1..=6u8 {
            let mut r = pool.take().expect("take");
            assert_eq!(r.len(), len);
            // Fresh: no earlier frame, this process's or anybody's, shows.
            assert!(r.as_slice().iter().all(|&b| b == 0), "frame {frame}: a pooled region shows earlier bytes");
            r.as_mut_slice().fill(frame);
            if frame % 2 == 0 {
                // By copy: the sender keeps writing its copy afterwards.
                let item = round_trip(&mut rx, &tx, r.by_copy().expect("by copy"));
                assert_eq!(item.mode(), Mode::Copy);
                let view = item.map(MapOptions::lazy()).expect("map");
                r.as_mut_slice().fill(0xee);
                assert!(view.iter().all(|&b| b == frame), "frame {frame}: the sender's later write reached the receiver");
                seen.push((frame, view));
            } else {
                let item = round_trip(&mut rx, &tx, r.by_move().expect("by move"));
                assert_eq!(item.mode(), Mode::Move);
                let mut view = item.map(MapOptions::lazy()).expect("map");
                // The receiver's own writes stay its own.
                view.as_mut_slice().expect("writable")[0] = 0xdd;
                seen.push((frame, view));
            }
        }
        // Every receiver view still holds exactly what was sent, whatever
        // came after it through the pool.
        for (frame, view) in &seen {
            let first = if frame % 2 == 1 { 0xdd } else { *frame };
            assert_eq!(view[0], first, "frame {frame}");
            assert!(view[1..].iter().all(|b| b == frame), "frame {frame}: the receiver's view changed");
        }
        // Nothing to write back into: every sent region is sealed, so the
        // receiver's descriptor cannot be used to change a frame either.
        assert!(pool.take().expect("take").as_slice().iter().all(|&b| b == 0));
    });
}

#[test]
fn huge_pages_fall_back_to_base_pages() {
    let _s = serial();
    watchdog("huge_pages_fall_back_to_base_pages", Duration::from_secs(60), || {
        let len = 4 * MIB;
        let opts = RegionOptions { huge_pages: true, populate: true };
        let mut r = Region::with_options(len, opts).expect("a region that asks for huge pages is made either way");
        assert!(r.huge_pages_requested());
        let huge = r.huge_bytes_mapped();
        if huge_granted() {
            // Granted, huge pages may still be short: then base pages.
            assert!(huge as usize <= len);
        } else {
            assert_eq!(huge, 0, "huge pages where the policy {:?} grants none", shmem_huge_pages());
        }
        assert!(r.as_slice().iter().all(|&b| b == 0));
        r.as_mut_slice().fill(9);
        let (mut rx, tx) = ferry::port().expect("port");
        let item = round_trip(&mut rx, &tx, r.by_move().expect("by move"));
        assert!(item.huge_pages_hint());
        let view = item.map(MapOptions::immediate()).expect("map");
        assert!(view.iter().all(|&b| b == 9));
        // A pool of huge regions works the same way.
        let pool = RegionPool::new(len, 1, opts).expect("pool");
        let mut p = pool.take().expect("take");
        assert!(p.huge_pages_requested());
        p.as_mut_slice().fill(3);
        let view = round_trip(&mut rx, &tx, p.by_move().expect("by move")).map(MapOptions::lazy()).expect("map");
        assert!(view.iter().all(|&b| b == 3));
    });
}

#[test]
fn a_pool_leaves_nothing_behind() {
    let _s = serial();
    watchdog("a_pool_leaves_nothing_behind", Duration::from_secs(120), || {
        let (mut rx, tx) = ferry::port().expect("port");
        let fds = open_fds();
        let (memfds, maps) = (region_memfds(), region_mappings());
        for round in 0..3 {
            let pool = RegionPool::new(MIB, 3, RegionOptions::for_len(MIB)).expect("pool");
            assert!(eventually(|| pool.ready() == 3), "round {round}: the filler made {} of 3", pool.ready());
            assert_eq!(region_memfds(), memfds + 3, "round {round}: three regions ready");
            // One sent and received, one dropped unsent, one left in the
            // pool, one made to replace the taken ones.
            let mut sent = pool.take().expect("take");
            sent.as_mut_slice()[0] = 1;
            let view = round_trip(&mut rx, &tx, sent.by_move().expect("by move")).map(MapOptions::lazy()).expect("map");
            assert_eq!(view[0], 1);
            drop(pool.take().expect("take"));
            drop(view);
            drop(pool);
            assert_eq!(region_memfds(), memfds, "round {round}: memfd leaked");
            assert_eq!(region_mappings(), maps, "round {round}: mapping leaked");
        }
        assert!(eventually(|| open_fds() <= fds), "descriptor leak: {fds} before, {} after", open_fds());
    });
}

#[test]
fn a_pool_that_cannot_keep_up_still_hands_out_fresh_regions() {
    let _s = serial();
    watchdog("a_pool_that_cannot_keep_up", Duration::from_secs(120), || {
        // Taking faster than one filler can make regions: every take gets
        // a fresh region (waiting for the one under way, or making its own).
        let pool = RegionPool::new(2 * MIB, 1, RegionOptions::for_len(2 * MIB)).expect("pool");
        let held: Vec<Region> = (0..8).map(|_| pool.take().expect("take")).collect();
        let mut addrs: Vec<usize> = held.iter().map(Region::addr).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), 8, "a region was handed out twice");
        assert!(held.iter().all(|r| r.as_slice().iter().all(|&b| b == 0)));
    });
}
