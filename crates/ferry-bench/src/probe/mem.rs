//! Accent's mapping costs on Linux: what copying a payload costs against
//! what passing it as a sealed memfd costs (map and unmap, seal, fault the
//! pages in on read or copy them on write, pass the descriptor).
//!
//! Payload pages live in a memfd filled with `pwrite` and sealed, as ferry's
//! by-value regions are; the receiver's side is a `MAP_PRIVATE` mapping.

use std::hint::black_box;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

use super::measure::Samples;
use super::sys::{self, Map};
use super::{record, Ctx, ProbeError, Record, Touch};
use super::Placement::SameCore;

/// Pages in the payload used for the per-page fault costs (1 MiB with
/// 4 KiB pages): large enough that the fixed costs vanish, small enough to
/// stay quick.
const FAULT_PAGES: usize = 256;

/// `memcpy` of cache-warm buffers of several sizes, in GB/s.
pub fn memcpy(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let sizes: &[usize] = &[4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20];
    let mut out = Vec::new();
    for &n in sizes {
        let src: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
        let mut dst = vec![0u8; n];
        dst.copy_from_slice(&src);
        let batch = cx.budget.batch(((64 << 20) / n) as u64).min(((64 << 20) / n) as u64).max(1);
        let mut s = Samples::default();
        let mut sm = cx.budget.start();
        while sm.more() {
            let t = Instant::now();
            for _ in 0..batch {
                dst.copy_from_slice(black_box(&src));
                black_box(&mut dst);
            }
            s.push_dur(t.elapsed(), batch);
        }
        let st = s.stats().ok_or(ProbeError::NoSamples { what: "memcpy" })?;
        out.push(
            record::measured("memcpy", SameCore, st)
                .bytes(n as u64)
                .gbps(n as f64 / st.median_ns)
                .extra("method", "copy_from_slice between two pre-faulted buffers, repeated (warm caches)")
                .extra("per_page_ns", st.median_ns * cx.page as f64 / n as f64),
        );
    }
    Ok(out)
}

/// A memfd of `pages` pages filled with data, optionally sealed against
/// writes, shrinking and growing.
fn payload(cx: &Ctx, pages: usize, seal: bool) -> Result<OwnedFd, ProbeError> {
    let fd = rustix::fs::memfd_create("ferry-probe", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(ProbeError::sys("memfd_create"))?;
    let len = pages * cx.page;
    rustix::fs::ftruncate(&fd, len as u64).map_err(ProbeError::sys("ftruncate"))?;
    let chunk = vec![0x5au8; (64 * cx.page).min(len)];
    let mut off = 0;
    while off < len {
        let n = chunk.len().min(len - off);
        let w = rustix::io::pwrite(&fd, &chunk[..n], off as u64).map_err(ProbeError::sys("pwrite"))?;
        off += w.max(1);
    }
    if seal {
        rustix::fs::fcntl_add_seals(&fd, SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW)
            .map_err(ProbeError::sys("F_ADD_SEALS"))?;
    }
    Ok(fd)
}

/// `mmap` + `munmap` of a sealed memfd, never touched, for several sizes:
/// Accent's Validate/Invalidate against pages.
pub fn mmap_munmap(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let sizes: &[usize] = &[1, 16, 256, 4096];
    let fd = payload(cx, *sizes.last().unwrap(), true)?;
    let mut out = Vec::new();
    for &pages in sizes {
        let len = pages * cx.page;
        let batch = cx.budget.batch(100);
        let mut s = Samples::default();
        let mut sm = cx.budget.start();
        while sm.more() {
            let t = Instant::now();
            for _ in 0..batch {
                let m = Map::file(fd.as_fd(), len, false, false).map_err(ProbeError::sys("mmap"))?;
                m.unmap().map_err(ProbeError::sys("munmap"))?;
            }
            s.push_dur(t.elapsed(), batch);
        }
        let st = s.stats().ok_or(ProbeError::NoSamples { what: "mmap-munmap" })?;
        out.push(
            record::measured("mmap-munmap", SameCore, st)
                .bytes(len as u64)
                .extra("pages", pages)
                .extra("method", "mmap(MAP_PRIVATE, PROT_READ) of a sealed memfd and munmap, pages untouched"),
        );
    }
    Ok(out)
}

/// Maps the payload privately, touches every page (read or write), unmaps;
/// returns per-page samples of the touch, of the unmap, and faults per page.
fn fault_loop(cx: &Ctx, write: bool) -> Result<(Samples, Samples, f64), ProbeError> {
    let fd = payload(cx, FAULT_PAGES, true)?;
    let len = FAULT_PAGES * cx.page;
    let (mut touch, mut unmap) = (Samples::default(), Samples::default());
    let (mut faults, mut rounds) = (0u64, 0u64);
    let mut sm = cx.budget.start();
    while sm.more() {
        let m = Map::file(fd.as_fd(), len, false, write).map_err(ProbeError::sys("mmap"))?;
        let f0 = sys::minor_faults();
        let t0 = Instant::now();
        if write {
            m.touch_write(cx.page, 1);
        } else {
            black_box(m.touch_read(cx.page));
        }
        let t1 = Instant::now();
        faults += sys::minor_faults().saturating_sub(f0);
        rounds += 1;
        m.unmap().map_err(ProbeError::sys("munmap"))?;
        let t2 = Instant::now();
        touch.push_dur(t1 - t0, FAULT_PAGES as u64);
        unmap.push_dur(t2 - t1, FAULT_PAGES as u64);
    }
    Ok((touch, unmap, faults as f64 / (rounds.max(1) * FAULT_PAGES as u64) as f64))
}

fn fault_records(cx: &Ctx, write: bool) -> Result<Vec<Record>, ProbeError> {
    let (touch, unmap, faults_per_page) = fault_loop(cx, write)?;
    let (case, ucase, t, how) = if write {
        ("cow-fault-per-page", "munmap-cow-per-page", Touch::Write, "write one byte per page: each page copied on write")
    } else {
        ("read-fault-per-page", "munmap-read-per-page", Touch::Read, "read one byte per page: page-cache pages mapped (with fault-around)")
    };
    let bytes = (FAULT_PAGES * cx.page) as u64;
    let st = touch.stats().ok_or(ProbeError::NoSamples { what: case })?;
    let ust = unmap.stats().ok_or(ProbeError::NoSamples { what: ucase })?;
    Ok(vec![
        record::measured(case, SameCore, st)
            .bytes(bytes)
            .touch(t)
            .extra("pages", FAULT_PAGES)
            .extra("faults_per_page", faults_per_page)
            .extra("method", format!("MAP_PRIVATE mapping of a sealed {FAULT_PAGES}-page memfd; {how}")),
        record::measured(ucase, SameCore, ust)
            .bytes(bytes)
            .touch(t)
            .extra("pages", FAULT_PAGES)
            .extra("method", "munmap of that mapping after the touch, per page"),
    ])
}

/// Read fault per page (and the unmap of the touched mapping).
pub fn read_fault(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    fault_records(cx, false)
}

/// Copy-on-write fault per page (and the unmap that frees the copies).
pub fn cow_fault(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    fault_records(cx, true)
}

/// First write to fresh shmem pages: what a sender pays to fill a new region.
pub fn shmem_alloc_fault(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let len = FAULT_PAGES * cx.page;
    let mut s = Samples::default();
    let mut sm = cx.budget.start();
    while sm.more() {
        let fd = rustix::fs::memfd_create("ferry-probe", MemfdFlags::CLOEXEC).map_err(ProbeError::sys("memfd_create"))?;
        rustix::fs::ftruncate(&fd, len as u64).map_err(ProbeError::sys("ftruncate"))?;
        let m = Map::file(fd.as_fd(), len, true, true).map_err(ProbeError::sys("mmap"))?;
        let t = Instant::now();
        m.touch_write(cx.page, 1);
        s.push_dur(t.elapsed(), FAULT_PAGES as u64);
    }
    let st = s.stats().ok_or(ProbeError::NoSamples { what: "shmem-alloc-fault-per-page" })?;
    Ok(vec![record::measured("shmem-alloc-fault-per-page", SameCore, st)
        .bytes(len as u64)
        .touch(Touch::Write)
        .extra("pages", FAULT_PAGES)
        .extra("method", "first write to each page of a fresh memfd mapped MAP_SHARED (allocate + zero + map)")])
}

/// `F_ADD_SEALS(WRITE|SHRINK|GROW)` on a filled memfd of one page (the fixed
/// cost) and of many pages (per page; the fixed part is included, divided).
pub fn seal(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let seals = SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW;
    let (mut one, mut many) = (Samples::default(), Samples::default());
    let mut sm = cx.budget.start();
    while sm.more() {
        let a = payload(cx, 1, false)?;
        let b = payload(cx, FAULT_PAGES, false)?;
        let t0 = Instant::now();
        rustix::fs::fcntl_add_seals(&a, seals).map_err(ProbeError::sys("F_ADD_SEALS"))?;
        let t1 = Instant::now();
        rustix::fs::fcntl_add_seals(&b, seals).map_err(ProbeError::sys("F_ADD_SEALS"))?;
        let t2 = Instant::now();
        one.push_dur(t1 - t0, 1);
        many.push_dur(t2 - t1, FAULT_PAGES as u64);
    }
    let s1 = one.stats().ok_or(ProbeError::NoSamples { what: "seal" })?;
    let sn = many.stats().ok_or(ProbeError::NoSamples { what: "seal-per-page" })?;
    Ok(vec![
        record::measured("seal", SameCore, s1)
            .bytes(cx.page as u64)
            .extra("method", "F_ADD_SEALS(WRITE|SHRINK|GROW) on a one-page memfd with data, no mappings"),
        record::measured("seal-per-page", SameCore, sn)
            .bytes((FAULT_PAGES * cx.page) as u64)
            .extra("pages", FAULT_PAGES)
            .extra("method", format!("the same seal on a {FAULT_PAGES}-page memfd, divided by its pages (includes 1/{FAULT_PAGES} of the fixed cost)")),
    ])
}

/// Passing a memfd in a one-byte `SOCK_SEQPACKET` message (send, receive,
/// close what arrived), and the same message without the descriptor.
pub fn fd_pass(cx: &Ctx) -> Result<Vec<Record>, ProbeError> {
    let (a, b) = rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .map_err(ProbeError::sys("socketpair"))?;
    let memfd = payload(cx, 1, true)?;
    let one = |with_fd: bool| -> Result<(), ProbeError> {
        let mut sspace = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut ctl = SendAncillaryBuffer::new(&mut sspace);
        let fds = [memfd.as_fd()];
        if with_fd && !ctl.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(ProbeError::Unavailable { reason: "no room for SCM_RIGHTS in the control buffer".into() });
        }
        rustix::net::sendmsg(&a, &[IoSlice::new(b"x")], &mut ctl, SendFlags::NOSIGNAL)
            .map_err(ProbeError::sys("sendmsg"))?;
        let mut rspace = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut rctl = RecvAncillaryBuffer::new(&mut rspace);
        let mut buf = [0u8; 8];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        rustix::net::recvmsg(&b, &mut iov, &mut rctl, RecvFlags::CMSG_CLOEXEC).map_err(ProbeError::sys("recvmsg"))?;
        let mut got = 0;
        for m in rctl.drain() {
            if let RecvAncillaryMessage::ScmRights(it) = m {
                got += it.count(); // each OwnedFd is closed as it is counted
            }
        }
        if got != usize::from(with_fd) {
            return Err(ProbeError::Unavailable { reason: "the descriptor did not arrive with the message".into() });
        }
        Ok(())
    };
    let batch = cx.budget.batch(200);
    let (mut with, mut without) = (Samples::default(), Samples::default());
    one(true)?;
    one(false)?;
    let mut sm = cx.budget.start();
    while sm.more() {
        let t0 = Instant::now();
        for _ in 0..batch {
            one(true)?;
        }
        let t1 = Instant::now();
        for _ in 0..batch {
            one(false)?;
        }
        let t2 = Instant::now();
        with.push_dur(t1 - t0, batch);
        without.push_dur(t2 - t1, batch);
    }
    let sw = with.stats().ok_or(ProbeError::NoSamples { what: "fd-pass" })?;
    let so = without.stats().ok_or(ProbeError::NoSamples { what: "seqpacket-message" })?;
    Ok(vec![
        record::measured("fd-pass", SameCore, sw)
            .extra("method", "sendmsg of 1 byte + SCM_RIGHTS(memfd), recvmsg, close the received fd; one thread, no wakeup")
            .extra("fd_extra_ns", (sw.median_ns - so.median_ns).max(0.0)),
        record::measured("seqpacket-message", SameCore, so)
            .bytes(1)
            .extra("method", "sendmsg of 1 byte and recvmsg on a SOCK_SEQPACKET pair; one thread, no wakeup"),
    ])
}
