//! Anderson et al.'s Table 1 primitives, plus the round trips that bound
//! any IPC from below: null system call, trap to a user handler, page-table
//! entry change (alone and with a TLB shootdown), context switch, and futex
//! and spin round trips between two processes on one core and on two.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::measure::{self, Samples};
use super::sys::{self, Map, Peer, TrapPage, WaitMode, STOP, TURN};
use super::{record, Ctx, Placement, ProbeError, Record};

/// `getppid`: the cheapest system call that really enters the kernel
/// (glibc and rustix cache `getpid`, not `getppid`).
pub fn null_syscall(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let batch = cx.budget.batch(2000);
    let mut s = Samples::default();
    let mut sm = cx.budget.start();
    black_box(rustix::process::getppid());
    while sm.more() {
        let t = Instant::now();
        for _ in 0..batch {
            black_box(rustix::process::getppid());
        }
        s.push_dur(t.elapsed(), batch);
    }
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "null-syscall" })?;
    Ok(vec![record::measured("null-syscall", Placement::SameCore, st)
        .extra("method", "getppid() in a loop, timed in batches")
        .extra("batch", batch)])
}

/// A store to a write-protected page, delivered as `SIGSEGV` to a user
/// handler that makes the page writable again. The record is delivery plus
/// return (clock read just before the store, at the handler's entry, at its
/// exit, and after the store), which is Anderson et al.'s trap without the
/// protection changes; `with_fix_ns` includes the handler's `mprotect`.
pub fn trap(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let page = TrapPage::new().map_err(ProbeError::sys("sigaction(SIGSEGV)"))?;
    let batch = cx.budget.batch(32);
    let (mut both, mut deliver, mut ret, mut total) =
        (Samples::default(), Samples::default(), Samples::default(), Samples::default());
    for _ in 0..8 {
        page.trap_once().map_err(ProbeError::sys("trap"))?;
    }
    let mut sm = cx.budget.start();
    while sm.more() {
        let (mut d, mut r, mut t) = (0u64, 0u64, 0u64);
        for _ in 0..batch {
            let tt = page.trap_once().map_err(ProbeError::sys("trap"))?;
            d += tt.delivery;
            r += tt.ret;
            t += tt.total;
        }
        both.push((d + r) as f64, batch);
        deliver.push(d as f64, batch);
        ret.push(r as f64, batch);
        total.push(t as f64, batch);
    }
    drop(page);
    let st = both.stats().ok_or(ProbeError::NoSamples { what: "trap" })?;
    let med = |s: &Samples| s.stats().map(|s| s.median_ns).unwrap_or(0.0);
    // The protect-before-each-trap mprotect is outside every interval.
    Ok(vec![record::measured("trap", Placement::SameCore, st)
        .extra("method", "write to a PROT_READ page; SIGSEGV handler mprotects it back; delivery + return legs")
        .extra("delivery_ns", med(&deliver))
        .extra("return_ns", med(&ret))
        .extra("with_fix_ns", med(&total))])
}

/// `mprotect` of one touched page, alternating read-only and read-write.
/// Includes the system call; `minus_syscalls_ns` (added later) does not.
pub fn pte_change(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let map = Map::anon(cx.page).map_err(ProbeError::sys("mmap"))?;
    map.write(0, 1);
    let s = protect_loop(cx, &map)?;
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "pte-change" })?;
    Ok(vec![record::measured("pte-change", Placement::SameCore, st)
        .bytes(cx.page as u64)
        .extra("method", "mprotect of one touched page, alternating PROT_READ and PROT_READ|PROT_WRITE; no other thread")])
}

/// The same with a second thread of this process spinning on another CPU
/// (reading the page), so each downgrade must shoot down that CPU's TLB.
pub fn pte_change_shootdown(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let Some(&other) = cx.cpus.get(1) else {
        return Err(ProbeError::Unavailable { reason: "needs two CPUs; this process may use only one".into() });
    };
    let map = Map::anon(cx.page).map_err(ProbeError::sys("mmap"))?;
    map.write(0, 1);
    let stop = AtomicBool::new(false);
    let running = AtomicBool::new(false);
    let s = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let old = measure::pin(other);
            running.store(true, Ordering::Release);
            let mut sum = 0u64;
            while !stop.load(Ordering::Relaxed) {
                sum += map.read(0) as u64;
            }
            if let Ok(old) = old {
                measure::unpin(&old);
            }
            black_box(sum);
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while !running.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let r = protect_loop(cx, &map);
        stop.store(true, Ordering::Relaxed);
        let _ = h.join();
        r
    })?;
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "pte-change-shootdown" })?;
    Ok(vec![record::measured("pte-change-shootdown", Placement::CrossCore, st)
        .bytes(cx.page as u64)
        .extra("method", "mprotect of one page while a second thread reads it in a loop on another CPU (TLB shootdown IPI)")])
}

fn protect_loop(cx: &Ctx, map: &Map) -> Result<Samples, ProbeError> {
    let batch = cx.budget.batch(200).max(2) & !1;
    let mut s = Samples::default();
    let mut sm = cx.budget.start();
    while sm.more() {
        let t = Instant::now();
        for i in 0..batch {
            map.protect(i % 2 == 1, true).map_err(ProbeError::sys("mprotect"))?;
        }
        s.push_dur(t.elapsed(), batch);
    }
    map.protect(true, true).map_err(ProbeError::sys("mprotect"))?;
    Ok(s)
}

/// Round trips between this process and a forked peer through one shared
/// word: this side stores an odd turn, the peer answers with the next even
/// one. Returns per-round-trip samples.
fn pingpong(cx: &Ctx, mode: WaitMode, cross: bool, batch: u64) -> Result<Samples, ProbeError> {
    let what = "ping-pong";
    let peer_cpu = if cross {
        Some(*cx.cpus.get(1).ok_or_else(|| ProbeError::Unavailable {
            reason: "needs two CPUs; this process may use only one".into(),
        })?)
    } else {
        cx.cpus.first().copied()
    };
    let shared = Map::shared_anon(cx.page).map_err(ProbeError::sys("mmap(MAP_SHARED)"))?;
    let (turn, stop) = (shared.atomic_u32(TURN), shared.atomic_u32(STOP));
    let peer = Peer::spawn(&shared, mode, peer_cpu).map_err(ProbeError::sys("fork"))?;
    let limit = Duration::from_secs(5);
    let mut k = 0u32;
    let round = |k: &mut u32| -> Result<(), ProbeError> {
        sys::signal(turn, *k + 1, mode).map_err(ProbeError::sys("futex_wake"))?;
        sys::wait_for(turn, *k + 2, stop, mode, limit).map_err(|e| match e {
            rustix::io::Errno::TIMEDOUT | rustix::io::Errno::PIPE => ProbeError::PeerLost { what },
            errno => ProbeError::Sys { what: "futex_wait", errno },
        })?;
        *k += 2;
        Ok(())
    };
    let result = (|| {
        for _ in 0..cx.budget.batch(200) {
            round(&mut k)?;
        }
        let mut s = Samples::default();
        let mut sm = cx.budget.start();
        while sm.more() {
            let t = Instant::now();
            for _ in 0..batch {
                round(&mut k)?;
            }
            s.push_dur(t.elapsed(), batch);
        }
        Ok(s)
    })();
    stop.store(1, Ordering::Release);
    let _ = sys::signal(turn, turn.load(Ordering::Acquire), WaitMode::Futex);
    let clean = peer.join();
    let s = result?;
    if !clean {
        return Err(ProbeError::PeerLost { what });
    }
    Ok(s)
}

const FUTEX_METHOD: &str = "two processes ping-pong on a shared word with futex_wait/futex_wake (one round trip = two wakeups)";

/// Futex round trip with both processes on one CPU, and the context switch
/// derived from it (half a round trip: one wake, one wait, one switch
/// between address spaces).
pub fn futex_same_core(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let s = pingpong(cx, WaitMode::Futex, false, cx.budget.batch(200))?;
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "futex-roundtrip" })?;
    let cs = s.scaled(0.5).stats().ok_or(ProbeError::NoSamples { what: "context-switch" })?;
    Ok(vec![
        record::measured("futex-roundtrip", Placement::SameCore, st).extra("method", FUTEX_METHOD),
        record::measured("context-switch", Placement::SameCore, cs)
            .extra("method", "half a same-core futex round trip between two processes: futex_wake + futex_wait + one switch of address space")
            .extra("derived_from", "futex-roundtrip same-core"),
    ])
}

/// Futex round trip with the processes on two CPUs.
pub fn futex_cross_core(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let s = pingpong(cx, WaitMode::Futex, true, cx.budget.batch(200))?;
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "futex-roundtrip" })?;
    Ok(vec![record::measured("futex-roundtrip", Placement::CrossCore, st).extra("method", FUTEX_METHOD)])
}

/// Spin round trip on one CPU: a spinner can only make progress by giving
/// the CPU away, so each poll yields (what spinning costs when it shares a
/// core).
pub fn spin_same_core(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let s = pingpong(cx, WaitMode::Spin { yield_every: 1 }, false, cx.budget.batch(200))?;
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "spin-roundtrip" })?;
    Ok(vec![record::measured("spin-roundtrip", Placement::SameCore, st)
        .extra("method", "two processes poll a shared word on one CPU, calling sched_yield after every poll")
        .extra("yield_every", 1)])
}

/// Spin round trip on two CPUs: the cache-line transfer floor.
pub fn spin_cross_core(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let every = 1 << 14;
    let s = pingpong(cx, WaitMode::Spin { yield_every: every }, true, cx.budget.batch(2000))?;
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "spin-roundtrip" })?;
    Ok(vec![record::measured("spin-roundtrip", Placement::CrossCore, st)
        .extra("method", "two processes on two CPUs poll a shared word (one cache line there and back per round trip)")
        .extra("yield_every", every)])
}
