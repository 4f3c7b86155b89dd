//! `transfer`: moving a payload from one process to another.
//!
//! - `oneshot`: one payload of `bytes`, produced before timing starts; the
//!   sample ends when the receiver has done its `touch` and acknowledged.
//! - `forward`: a middle process already holding `bytes` passes them on;
//!   the sample ends when the next process acknowledges without touching
//!   them (a pipe's reader still drains them into its buffer). Here the
//!   timing process is the middle: for the baselines the bytes it holds are
//!   ordinary private memory (or, for `memfd-map`, a sealed memfd), which is
//!   what any earlier receipt would have left it with.
//! - `stream`: frames of 16 MiB, the sender writing every byte of every
//!   frame before sending it; at most two frames in flight (each
//!   acknowledged); one sample per two frames, reported per frame.
//!
//! The receiver's buffer is allocated and faulted in before timing and
//! reused, the most favourable case for the copying baselines. ferry's
//! implementations (regions by copy, move and lend, the automatic choice and
//! inline bytes) are in `transfer_ferry.rs`, registered in [`impls`].

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use rustix::fs::{MemfdFlags, SealFlags};

use crate::chan;
use crate::harness::{Case, Impl, Run, Skip, Suite};
use crate::record::Touch;
use crate::sys::{self, Map};

#[path = "transfer_ferry.rs"]
mod transfer_ferry;

/// Payload sizes of `oneshot` and `forward`.
pub const SIZES: [u64; 6] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30];
/// Payload sizes of `forward`: those of `oneshot` and 4 MiB, so that size
/// independence can be read off between 4 MiB and 1 GiB.
pub const FORWARD_SIZES: [u64; 7] = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 256 << 20, 1 << 30];
/// Frame size of `stream`.
pub const FRAME: u64 = 16 << 20;
/// Pipe size `pipe-1m` (and `vmsplice`) ask for with `F_SETPIPE_SZ`.
pub const BIG_PIPE: usize = 1 << 20;

/// The suite.
pub fn suite() -> Suite {
    Suite {
        name: "transfer",
        about: "one payload, a forwarded payload, and a stream of 16 MiB frames vs pipes, sockets, process_vm_readv, vmsplice, memcpy and mmap",
        reference: "pipe",
        cases,
        impls,
    }
}

/// `oneshot` (every size × none/read/write), `forward` (every size), `stream`.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for &bytes in &SIZES {
        for touch in [Touch::None, Touch::Read, Touch::Write] {
            v.push(Case { suite: "transfer", name: "oneshot", bytes, touch });
        }
    }
    for &bytes in &FORWARD_SIZES {
        v.push(Case { suite: "transfer", name: "forward", bytes, touch: Touch::None });
    }
    v.push(Case { suite: "transfer", name: "stream", bytes: FRAME, touch: Touch::None });
    v
}

/// The implementations.
pub fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "pipe", run: pipe },
        Impl { name: "pipe-1m", run: pipe_1m },
        Impl { name: "uds-stream", run: uds_stream },
        Impl { name: "process-vm-readv", run: process_vm_readv },
        Impl { name: "vmsplice", run: vmsplice },
        Impl { name: "memcpy", run: memcpy },
        Impl { name: "memfd-map", run: memfd_map },
        Impl { name: "ferry-copy-lazy", run: transfer_ferry::copy_lazy },
        Impl { name: "ferry-copy-immediate", run: transfer_ferry::copy_immediate },
        Impl { name: "ferry-move", run: transfer_ferry::by_move },
        Impl { name: "ferry-move-pool", run: transfer_ferry::move_pool },
        Impl { name: "ferry-move-huge", run: transfer_ferry::move_huge },
        Impl { name: "ferry-lend", run: transfer_ferry::lend },
        Impl { name: "ferry-auto", run: transfer_ferry::auto_path },
        Impl { name: "ferry-inline", run: transfer_ferry::inline },
        Impl { name: "ipc-channel", run: crate::suites::peer_ipc_channel::transfer },
    ]
}

/// A prefaulted buffer of `n` bytes, every byte `fill`.
fn buffer(n: usize, fill: u8) -> Vec<u8> {
    vec![fill; n]
}

/// How the sender hands bytes to the byte-stream channels.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Push {
    Write,
    Vmsplice,
}

fn push(how: Push, fd: impl AsFd, mut data: &[u8]) -> io::Result<()> {
    match how {
        Push::Write => chan::write_all(fd, data),
        Push::Vmsplice => {
            while !data.is_empty() {
                let n = sys::vmsplice(fd.as_fd(), data)?;
                if n == 0 {
                    return Err(io::Error::from(io::ErrorKind::WriteZero));
                }
                data = &data[n..];
            }
            Ok(())
        }
    }
}

/// In a stream with two frames in flight the acknowledgements come in
/// pairs (one late, one right behind it), so one sample is the time for two
/// frames, reported per frame.
fn per_pair(run: &mut Run<'_>, last: &mut Instant, acked: u64) {
    if acked.is_multiple_of(2) {
        let now = Instant::now();
        run.record_batch(now - *last, 2);
        *last = now;
    }
}

/// The sender's loop for one case: `send(frame)` hands over one payload and
/// `ack()` waits for the receiver's acknowledgement.
fn drive(
    run: &mut Run<'_>,
    mut send: impl FnMut(&[u8]) -> io::Result<()>,
    mut ack: impl FnMut() -> io::Result<()>,
) -> Result<(), Skip> {
    let n = run.bytes();
    if run.case.name == "stream" {
        let mut slots = [buffer(n, 0x5a), buffer(n, 0x5a)];
        let (mut sent, mut acked) = (0u64, 0u64);
        let mut last = Instant::now();
        while run.more() {
            if sent - acked == 2 {
                ack()?;
                acked += 1;
                per_pair(run, &mut last, acked);
            }
            let slot = &mut slots[(sent % 2) as usize];
            slot.fill((sent as u8) | 1);
            send(slot)?;
            sent += 1;
        }
        while acked < sent {
            ack()?;
            acked += 1;
            per_pair(run, &mut last, acked);
        }
        if acked % 2 == 1 {
            run.record(last.elapsed());
        }
        run.note("in_flight", 2u64);
    } else {
        let src = buffer(n, 0x5a);
        while run.more() {
            let t = Instant::now();
            send(&src)?;
            ack()?;
            run.record(t.elapsed());
        }
    }
    Ok(())
}

fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("the receiver closed its {what}"))
}

/// Byte-stream channels: the receiver drains `bytes` into its buffer,
/// touches it and acknowledges on a separate socket.
fn byte_stream(run: &mut Run<'_>, data: (OwnedFd, OwnedFd), how: Push) -> Result<(), Skip> {
    let n = run.bytes();
    let touch = run.case.touch;
    let (rx, tx) = data;
    let (ack_mine, ack_theirs) = chan::seqpacket()?;
    let peer = run.spawn(&[tx.as_fd(), ack_mine.as_fd()], move || {
        let mut buf = buffer(n, 1);
        while chan::read_exact(&rx, &mut buf)? {
            touch.apply(&mut buf);
            chan::token(&ack_theirs)?;
        }
        Ok(())
    })?;
    drive(run, |d| push(how, &tx, d), || chan::wait_token(&ack_mine)?.then_some(()).ok_or_else(|| eof("ack socket")))?;
    drop(tx);
    peer.wait()?;
    Ok(())
}

fn sized_pipe(run: &mut Run<'_>, size: Option<usize>) -> Result<(OwnedFd, OwnedFd), Skip> {
    let (r, w) = chan::pipe()?;
    if let Some(size) = size {
        let got = rustix::pipe::fcntl_setpipe_size(&w, size)
            .map_err(|e| Skip::new(format!("F_SETPIPE_SZ to {size} bytes refused: {}", io::Error::from(e))))?;
        run.note("pipe_bytes", got as u64);
    }
    Ok((r, w))
}

/// `pipe`: write into a default-sized pipe, read out of it.
pub fn pipe(run: &mut Run<'_>) -> Result<(), Skip> {
    let p = sized_pipe(run, None)?;
    byte_stream(run, p, Push::Write)
}

/// `pipe-1m`: the same through a pipe enlarged to 1 MiB.
pub fn pipe_1m(run: &mut Run<'_>) -> Result<(), Skip> {
    let p = sized_pipe(run, Some(BIG_PIPE))?;
    byte_stream(run, p, Push::Write)
}

/// `uds-stream`: a `SOCK_STREAM` Unix socket pair with default buffers.
pub fn uds_stream(run: &mut Run<'_>) -> Result<(), Skip> {
    let (a, b) = chan::stream()?;
    byte_stream(run, (b, a), Push::Write)
}

/// `vmsplice`: the sender maps its pages into a 1 MiB pipe, the receiver
/// reads them out (one copy, on the receiving side).
pub fn vmsplice(run: &mut Run<'_>) -> Result<(), Skip> {
    let p = sized_pipe(run, Some(BIG_PIPE))?;
    byte_stream(run, p, Push::Vmsplice)
}

/// `process-vm-readv`: the sender tells the receiver where its bytes are;
/// the receiver copies them straight out of the sender's memory.
pub fn process_vm_readv(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.bytes();
    let touch = run.case.touch;
    let (mine, theirs) = chan::seqpacket()?;
    let peer = run.spawn(&[mine.as_fd()], move || {
        let sender = rustix::process::getppid().ok_or_else(|| io::Error::other("the sender is gone"))?;
        let mut buf = buffer(n, 1);
        let mut msg = [0u8; 16];
        loop {
            if chan::read_some(&theirs, &mut msg)? == 0 {
                return Ok(());
            }
            let addr = u64::from_ne_bytes(msg[..8].try_into().expect("8 bytes")) as usize;
            let mut at = 0;
            while at < n {
                let got = sys::process_vm_readv(sender, &mut buf[at..], addr + at)?;
                if got == 0 {
                    return Err(io::Error::other("process_vm_readv made no progress"));
                }
                at += got;
            }
            touch.apply(&mut buf);
            chan::token(&theirs)?;
        }
    })?;
    // Where Yama restricts ptrace, let this one child read us (it reads only
    // after our first message); elsewhere this fails harmlessly.
    let _ = rustix::process::set_ptracer(rustix::process::PTracer::ProcessID(peer.pid()));
    let result = drive(
        run,
        |d| {
            let mut msg = [0u8; 16];
            msg[..8].copy_from_slice(&(d.as_ptr() as u64).to_ne_bytes());
            msg[8..].copy_from_slice(&(d.len() as u64).to_ne_bytes());
            chan::write_all(&mine, &msg)
        },
        || chan::wait_token(&mine)?.then_some(()).ok_or_else(|| eof("socket")),
    );
    let _ = rustix::process::set_ptracer(rustix::process::PTracer::None);
    result?;
    drop(mine);
    peer.wait()?;
    Ok(())
}

/// `memcpy`: one copy inside one process (the copying lower bound), then
/// the touch. Placement does not apply; it runs on the timing CPU.
pub fn memcpy(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.bytes();
    let touch = run.case.touch;
    run.note("processes", 1u64);
    let mut dst = buffer(n, 1);
    if run.case.name == "stream" {
        let mut src = buffer(n, 0x5a);
        let mut k = 0u8;
        while run.more() {
            let t = Instant::now();
            k = k.wrapping_add(2) | 1;
            src.fill(k);
            dst.copy_from_slice(&src);
            run.record(t.elapsed());
        }
    } else {
        let src = buffer(n, 0x5a);
        while run.more() {
            let t = Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(touch.apply(&mut dst));
            run.record(t.elapsed());
        }
    }
    Ok(())
}

/// A sealed memfd holding `data`, written through `write` (no mapping).
fn sealed_memfd(data: &[u8]) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create("ferry-bench", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, data.len() as u64)?;
    chan::write_all(&fd, data)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(fd)
}

/// A sealed memfd whose bytes the sender writes through a shared mapping
/// (as a producer of a fresh frame would), unmapped before sealing.
fn fill_sealed_memfd(n: usize, fill: u8) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create("ferry-bench", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, n as u64)?;
    {
        let mut map = Map::file(fd.as_fd(), n, true, true)?;
        map.as_mut_slice().expect("a shared mapping is writable").fill(fill);
    }
    rustix::fs::fcntl_add_seals(&fd, SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(fd)
}

/// `memfd-map`: the sender passes a sealed memfd (`SCM_RIGHTS`); the
/// receiver maps it private, touches it, acknowledges, and unmaps after the
/// acknowledgement (outside the sample). The mapping lower bound: no seal
/// check, no message format, no pooling.
pub fn memfd_map(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.bytes();
    let touch = run.case.touch;
    let stream = run.case.name == "stream";
    let (mine, theirs) = chan::seqpacket()?;
    run.note("thp", false);
    let peer = run.spawn(&[mine.as_fd()], move || {
        let mut b = [0u8; 1];
        while let Some(fd) = chan::recv_fd(&theirs, &mut b)? {
            let mut map = Map::file(fd.as_fd(), n, false, touch == Touch::Write)?;
            match map.as_mut_slice() {
                Some(s) => std::hint::black_box(touch.apply(s)),
                None => std::hint::black_box(touch.apply_read(map.as_slice())),
            };
            chan::token(&theirs)?;
            drop(map);
            drop(fd);
            if !stream {
                chan::token(&theirs)?;
            }
        }
        Ok(())
    })?;
    if stream {
        let mut k = 0u8;
        let mut send = |_: &[u8]| -> io::Result<()> {
            k = k.wrapping_add(2) | 1;
            let fd = fill_sealed_memfd(n, k)?;
            chan::send_fd(&mine, &[1], &fd)
        };
        let (mut sent, mut acked) = (0u64, 0u64);
        let mut last = Instant::now();
        while run.more() {
            if sent - acked == 2 {
                chan::wait_token(&mine)?;
                acked += 1;
                per_pair(run, &mut last, acked);
            }
            send(&[])?;
            sent += 1;
        }
        while acked < sent {
            chan::wait_token(&mine)?;
            acked += 1;
            per_pair(run, &mut last, acked);
        }
        if acked % 2 == 1 {
            run.record(last.elapsed());
        }
        run.note("in_flight", 2u64);
    } else {
        let fd = sealed_memfd(&buffer(n, 0x5a))?;
        while run.more() {
            let t = Instant::now();
            chan::send_fd(&mine, &[1], &fd)?;
            if !chan::wait_token(&mine)? {
                return Err(eof("socket").into());
            }
            run.record(t.elapsed());
            // The receiver unmaps, then says it is ready: not timed.
            chan::wait_token(&mine)?;
        }
    }
    drop(mine);
    peer.wait()?;
    Ok(())
}
