//! Where does ferry's null round trip spend the time that a raw
//! `SOCK_SEQPACKET` ping-pong does not?
//!
//! Runs the raw socket ping-pong with ferry's choices added one at a time
//! (a socket pair per direction, the 24-byte header, `sendmsg`/`recvmsg`
//! with control buffers, `SO_PASSCRED`, a 64 KiB receive buffer), interleaved
//! with ferry's port and the suite's `uds-seqpacket`, same-core, through the
//! same harness as `ferry bench`. Also an example of a custom suite.
//!
//! `cargo run --release -p ferry-bench --example port_breakdown [-- --quick]`

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use clap::Parser as _;
use ferry_bench::chan;
use ferry_bench::harness::{run_suite, Case, Impl, Options, Run, Skip, Suite};
use ferry_bench::record::{Placement, Touch};
use ferry_bench::suites::pingpong;
use rustix::net::{self, RecvAncillaryBuffer, RecvFlags, SendAncillaryBuffer, SendFlags};

/// Which system calls move the message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Calls {
    /// `write` / `read`.
    ReadWrite,
    /// `sendmsg` / `recvmsg` with control buffers sized like ferry's (253 fds).
    Msg,
    /// `sendmsg` / `recvmsg` with control buffers for one fd.
    SmallMsg,
    /// `write` / `recvmsg` without a control buffer.
    WriteRecvmsg,
    /// `send` / `recvmsg` with ferry's control buffer.
    SendRecvmsg,
}

#[derive(Clone, Copy)]
struct Knobs {
    /// One socket pair per direction (like two ports) instead of one pair.
    two_pairs: bool,
    bytes: usize,
    passcred: bool,
    /// Receive into a buffer as large as ferry's (64 KiB and change).
    big_buf: bool,
    calls: Calls,
}

#[inline(never)]
fn recv_big_cmsg(fd: &OwnedFd, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(253), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let got = net::recvmsg(fd, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    control.drain().for_each(drop);
    Ok(got.bytes)
}

#[inline(never)]
fn recv_small_cmsg(fd: &OwnedFd, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let got = net::recvmsg(fd, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    control.drain().for_each(drop);
    Ok(got.bytes)
}

#[inline(never)]
fn recv_no_cmsg(fd: &OwnedFd, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut control = RecvAncillaryBuffer::new(&mut []);
    let mut iov = [IoSliceMut::new(buf)];
    Ok(net::recvmsg(fd, &mut iov, &mut control, RecvFlags::empty())?.bytes)
}

#[inline(never)]
fn send_big_cmsg(fd: &OwnedFd, data: &[u8]) -> std::io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(253))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    net::sendmsg(fd, &[IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

#[inline(never)]
fn send_small_cmsg(fd: &OwnedFd, data: &[u8]) -> std::io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    net::sendmsg(fd, &[IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

fn rx(fd: &OwnedFd, buf: &mut [u8], calls: Calls) -> std::io::Result<usize> {
    match calls {
        Calls::ReadWrite => chan::read_some(fd, buf),
        Calls::Msg | Calls::SendRecvmsg => recv_big_cmsg(fd, buf),
        Calls::SmallMsg => recv_small_cmsg(fd, buf),
        Calls::WriteRecvmsg => recv_no_cmsg(fd, buf),
    }
}

fn tx(fd: &OwnedFd, data: &[u8], calls: Calls) -> std::io::Result<()> {
    match calls {
        Calls::ReadWrite | Calls::WriteRecvmsg => chan::write_all(fd, data),
        Calls::Msg => send_big_cmsg(fd, data),
        Calls::SmallMsg => send_small_cmsg(fd, data),
        Calls::SendRecvmsg => {
            net::send(fd, data, SendFlags::NOSIGNAL)?;
            Ok(())
        }
    }
}

fn raw(run: &mut Run<'_>, k: Knobs) -> Result<(), Skip> {
    // Requests go a_tx -> b_rx, replies b -> a.
    let (a, b) = chan::seqpacket()?;
    let (a_tx, b_rx) = if k.two_pairs { chan::seqpacket()? } else { (a.try_clone()?, b.try_clone()?) };
    if k.passcred {
        for s in [&a, &b, &a_tx, &b_rx] {
            net::sockopt::set_socket_passcred(s, true)?;
        }
    }
    let bufsz = if k.big_buf { 65536 + 24 + 64 * 32 + 1 } else { k.bytes + 1 };
    let peer = run.spawn(&[a.as_fd(), a_tx.as_fd()], move || {
        let mut buf = vec![0u8; bufsz];
        let reply = vec![2u8; k.bytes];
        while rx(&b_rx, &mut buf, k.calls)? != 0 {
            tx(&b, &reply, k.calls)?;
        }
        Ok(())
    })?;
    let req = vec![1u8; k.bytes];
    let mut buf = vec![0u8; bufsz];
    while run.more() {
        let t = Instant::now();
        tx(&a_tx, &req, k.calls)?;
        let got = rx(&a, &mut buf, k.calls)?;
        run.record(t.elapsed());
        if got != k.bytes {
            return Err(Skip::new(format!("failed: reply of {got} bytes")));
        }
    }
    drop((a, a_tx));
    peer.wait()?;
    Ok(())
}

macro_rules! variant {
    ($name:ident, $two:expr, $bytes:expr, $cred:expr, $big:expr, $calls:expr) => {
        fn $name(run: &mut Run<'_>) -> Result<(), Skip> {
            raw(run, Knobs { two_pairs: $two, bytes: $bytes, passcred: $cred, big_buf: $big, calls: $calls })
        }
    };
}
variant!(one_pair, false, 1, false, false, Calls::ReadWrite);
variant!(two_pairs, true, 1, false, false, Calls::ReadWrite);
variant!(header, true, 24, false, false, Calls::ReadWrite);
variant!(write_recvmsg, true, 24, false, false, Calls::WriteRecvmsg);
variant!(small_msg, true, 24, false, false, Calls::SmallMsg);
variant!(msg, true, 24, false, false, Calls::Msg);
variant!(msg_cred, true, 24, true, false, Calls::Msg);
variant!(msg_cred_buf, true, 24, true, true, Calls::Msg);
variant!(send_cred_buf, true, 24, true, true, Calls::SendRecvmsg);

fn cases() -> Vec<Case> {
    vec![Case { suite: "port-breakdown", name: "null-roundtrip", bytes: 0, touch: Touch::None }]
}

fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "uds-seqpacket", run: pingpong::uds_seqpacket },
        Impl { name: "raw-1pair", run: one_pair },
        Impl { name: "raw-2pairs", run: two_pairs },
        Impl { name: "+24B", run: header },
        Impl { name: "+write/recvmsg", run: write_recvmsg },
        Impl { name: "+msg-smallcmsg", run: small_msg },
        Impl { name: "+msg", run: msg },
        Impl { name: "+msg+cred", run: msg_cred },
        Impl { name: "+msg+cred+64k", run: msg_cred_buf },
        Impl { name: "+send+cred+64k", run: send_cred_buf },
        Impl { name: "ferry-port", run: pingpong::ferry_port },
    ]
}

/// The command line.
#[derive(Debug, clap::Parser)]
#[command(about = "Raw seqpacket round trips with ferry's choices added one at a time.")]
struct Args {
    /// Brief runs.
    #[arg(long)]
    quick: bool,
}

fn main() {
    let suite = Suite {
        name: "port-breakdown",
        about: "raw seqpacket with ferry's choices added one at a time",
        reference: "uds-seqpacket",
        cases,
        impls,
    };
    let args = Args::parse();
    let mut opts = if args.quick { Options::quick() } else { Options::full() };
    opts.placements = vec![Placement::SameCore];
    run_suite(&suite, &opts);
}
