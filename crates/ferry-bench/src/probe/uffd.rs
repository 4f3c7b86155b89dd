//! A userfaultfd fault served by a user-level pager thread: the Linux form of
//! Accent's port-backed memory objects and Mach's external pagers.
//!
//! The probe thread touches each page of a fresh anonymous range registered
//! for missing-page faults; a server thread, on the same CPU or on another,
//! reads each fault from the userfaultfd and resolves it with `UFFDIO_COPY`
//! (a page of data) or `UFFDIO_ZEROPAGE`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::measure::{self, Samples};
use super::sys::{Map, Uffd};
use super::{record, Ctx, Placement, ProbeError, Record, Touch};

/// Pages touched per sample (one fault each: missing faults have no
/// fault-around).
const PAGES: usize = 64;

/// Fault resolved with `UFFDIO_COPY` by a server on the same CPU.
pub fn fault_copy_same_core(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    fault(cx, true, false)
}

/// Fault resolved with `UFFDIO_COPY` by a server on another CPU.
pub fn fault_copy_cross_core(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    fault(cx, true, true)
}

/// Fault resolved with `UFFDIO_ZEROPAGE` by a server on another CPU.
pub fn fault_zeropage(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    fault(cx, false, true)
}

fn fault(cx: &Ctx, copy: bool, cross: bool) -> Result<Vec<Record>, ProbeError> {
    let case = if copy { "uffd-fault" } else { "uffd-fault-zeropage" };
    let uffd = Uffd::open().map_err(|e| ProbeError::Unavailable {
        reason: format!("userfaultfd unavailable ({e}); vm.unprivileged_userfaultfd=0 needs CAP_SYS_PTRACE or /dev/userfaultfd"),
    })?;
    let src = Map::anon(cx.page).map_err(ProbeError::sys("mmap"))?;
    src.touch_write(cx.page, 0x77);
    let server_cpu = if cross {
        Some(*cx.cpus.get(1).ok_or_else(|| ProbeError::Unavailable {
            reason: "needs two CPUs; this process may use only one".into(),
        })?)
    } else {
        cx.cpus.first().copied()
    };
    let placement = if cross { Placement::CrossCore } else { Placement::SameCore };
    let stop = AtomicBool::new(false);
    let served = std::sync::atomic::AtomicU64::new(0);
    let result = std::thread::scope(|sc| {
        let server = sc.spawn(|| -> Result<(), ProbeError> {
            let old = match server_cpu {
                Some(c) => measure::pin(c).ok(),
                None => None,
            };
            // Never stop serving on an error while the probe thread may be
            // blocked in a fault: fall back to the zero page and report the
            // first error at the end.
            let mut first_err = None;
            while !stop.load(Ordering::Acquire) {
                let addr = match uffd.next_fault(Duration::from_millis(20)) {
                    Ok(Some(a)) => a,
                    Ok(None) => continue,
                    Err(e) => {
                        first_err.get_or_insert(ProbeError::Sys { what: "read(userfaultfd)", errno: e });
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                };
                if let Err(e) = uffd.resolve(addr, cx.page, copy.then_some(&src)) {
                    first_err.get_or_insert(ProbeError::Sys { what: "UFFDIO_COPY/UFFDIO_ZEROPAGE", errno: e });
                    let _ = uffd.resolve(addr, cx.page, None);
                }
                served.fetch_add(1, Ordering::Relaxed);
            }
            let r = first_err.map_or(Ok(()), Err);
            if let Some(old) = old {
                measure::unpin(&old);
            }
            r
        });
        let r = (|| {
            let mut s = Samples::default();
            let mut sm = cx.budget.start();
            let mut first = true;
            while sm.more() {
                let m = Map::anon(PAGES * cx.page).map_err(ProbeError::sys("mmap"))?;
                uffd.register_missing(&m).map_err(ProbeError::sys("UFFDIO_REGISTER"))?;
                let t = Instant::now();
                m.touch_write(cx.page, 1);
                let d = t.elapsed();
                uffd.unregister(&m).map_err(ProbeError::sys("UFFDIO_UNREGISTER"))?;
                m.unmap().map_err(ProbeError::sys("munmap"))?;
                if first {
                    first = false; // warm-up: the server thread starts here
                    continue;
                }
                s.push_dur(d, PAGES as u64);
            }
            Ok(s)
        })();
        stop.store(true, Ordering::Release);
        let sr = server.join().unwrap_or(Err(ProbeError::PeerLost { what: "uffd server" }));
        r.and_then(|s| sr.map(|()| s))
    })?;
    let st = result.stats().ok_or(ProbeError::NoSamples { what: case })?;
    let how = if copy { "UFFDIO_COPY of one page of data" } else { "UFFDIO_ZEROPAGE" };
    Ok(vec![record::measured(case, placement, st)
        .bytes((PAGES * cx.page) as u64)
        .touch(Touch::Write)
        .extra("pages", PAGES)
        .extra("faults_served", served.load(Ordering::Relaxed))
        .extra("resolve", how)
        .extra("user_mode_only", uffd.user_mode_only)
        .extra("method", "write to each page of an anonymous range registered MISSING; a server thread reads the fault and resolves it; per page")])
}
