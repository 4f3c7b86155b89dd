//! `ferry-call-block`, `ferry-call-poll`, `ferry-call-adaptive`,
//! `ferry-call-parts-block`, `ferry-call-parts-poll`, `ferry-async-call`:
//! the `rpc` / `roundtrip` case through ferry's RPC fast path (the
//! `-parts-` impls calling with `call_parts` from a kept buffer, the last
//! through the tokio API).
//!
//! The timing process opens a [`Connection`] (with the policy the impl is
//! named after) to an [`RpcServer`] in a forked peer process running the
//! same policy, and times `call` of a request of `bytes` against a reply of
//! `bytes`, each side handing the buffer of the message it is done with on
//! to the next (as the floors keep theirs). Besides the latency each
//! record carries what a call costs the system (Anderson et al.'s table
//! of system calls and context switches per call): the RPC layer's own
//! system-call counters ([`ferry::rpc::stats`])
//! of the client and, asked over the connection before and after the timed
//! loop, of the server. Built with the `probes` feature of this crate, it
//! also records the median of each phase of a call (DASH's breakdown:
//! client copy-in, wake, server dispatch, server reply, to client, client
//! copy-out); the probes read the clock several times per call, so latency
//! from such a build is not comparable with a normal one and the feature is
//! off by default. `ferry-call-adaptive` finally leaves the connection idle
//! (as long as its timed loop ran; 2 s for the 8-byte case of a full run)
//! and reports the CPU time the server burnt meanwhile, which should be next
//! to nothing once its bounded spin has run out.

use std::time::{Duration, Instant};

use ferry::rpc::{ConnectOptions, Connection, Policy, RpcServer, RpcStats, Transport};
use ferry::{Message, Timeout};

use crate::harness::{Run, Skip};
use crate::record::Placement;

/// Operation: echo a reply of the request's size.
const OP_CALL: u32 = 1;
/// Operation: reply with the server's RPC system-call counters.
const OP_STATS: u32 = 2;
/// Operation: reply, then exit.
const OP_STOP: u32 = 3;

/// Calls made before timing starts (connection warm, caches hot).
const WARM_UP: u32 = 100;

/// Wait before the idle window opens (several scheduler ticks, hundreds of
/// adaptive spin budgets).
const IDLE_SETTLE: Duration = Duration::from_millis(20);

/// Longest idle window the adaptive impl measures.
const IDLE_MAX: Duration = Duration::from_secs(2);

fn rpc_err(e: ferry::rpc::RpcError) -> Skip {
    Skip::new(format!("ferry rpc failed: {e}"))
}

fn stats_body(s: RpcStats) -> Vec<u8> {
    [s.futex_waits, s.wakes, s.polls, s.socket_ops].iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn stats_from(body: &[u8]) -> Result<RpcStats, Skip> {
    if body.len() != 32 {
        return Err(Skip::new(format!("failed: server statistics of {} bytes, expected 32", body.len())));
    }
    let w = |i: usize| u64::from_le_bytes(body[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    Ok(RpcStats { futex_waits: w(0), wakes: w(1), polls: w(2), socket_ops: w(3) })
}

/// On-CPU time of process `pid` so far in nanoseconds (`/proc/PID/schedstat`,
/// exact, read without disturbing the process).
fn cpu_ns(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?.split_whitespace().next()?.parse().ok()
}

/// `buf` emptied and filled with `bytes`. Both sides of a timed call pass
/// the buffer of the message they are done with on to the next one (the
/// client its last reply's, the server its request's), as a careful
/// caller's loop does and as the floors do, which copy into buffers they
/// keep: what is timed is the call, not the allocator.
pub(crate) fn refill(mut buf: Vec<u8>, bytes: &[u8]) -> Vec<u8> {
    buf.clear();
    buf.extend_from_slice(bytes);
    buf
}

/// The server side, in the peer process: answers until `OP_STOP`.
fn serve(port: ferry::ReceiveRight, policy: Policy, n: usize) -> std::io::Result<()> {
    let mut server = RpcServer::new(port)?;
    server.set_policy(policy);
    let reply_body = vec![2u8; n];
    let mut reply = None;
    loop {
        let (conn, req) = server.reply_and_wait(reply.take(), Timeout::Infinite).map_err(std::io::Error::other)?;
        let answer = match req.op() {
            OP_CALL => {
                let mut req = req;
                Message::new(OP_CALL).with_body(refill(std::mem::take(req.body_mut()), &reply_body))
            }
            OP_STATS => Message::new(OP_STATS).with_body(stats_body(ferry::rpc::stats())),
            OP_STOP => {
                server.reply(conn, Message::new(OP_STOP)).map_err(std::io::Error::other)?;
                return Ok(());
            }
            op => return Err(std::io::Error::other(format!("unexpected operation {op:#x}"))),
        };
        reply = Some((conn, answer));
    }
}

/// Medians of the probe phases of the timed calls.
#[cfg(feature = "probes")]
#[derive(Default)]
struct Phases([Vec<u64>; 6]);

#[cfg(feature = "probes")]
impl Phases {
    const NAMES: [&'static str; 6] = [
        "probe_copy_in_ns",
        "probe_wake_ns",
        "probe_server_dispatch_ns",
        "probe_server_reply_ns",
        "probe_to_client_ns",
        "probe_copy_out_ns",
    ];
    fn add(&mut self, conn: &Connection) {
        if let Some(p) = conn.last_probe() {
            let v = [p.copy_in, p.wake, p.server_dispatch, p.server_reply, p.to_client, p.copy_out];
            self.0.iter_mut().zip(v).for_each(|(s, x)| s.push(x));
        }
    }
    fn note(mut self, run: &mut Run<'_>) {
        for (name, s) in Self::NAMES.iter().zip(self.0.iter_mut()) {
            if !s.is_empty() {
                s.sort_unstable();
                run.note(name, s[s.len() / 2]);
            }
        }
    }
}

/// How the timing process makes its calls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// `call` with a message whose body is the payload (the `ferry-call-*`
    /// impls): the payload is put into the message's buffer first.
    Message,
    /// `call_parts` straight from the buffer the payload is kept in, the
    /// reply taken into a [`SplitReply`](ferry::rpc::SplitReply) kept from
    /// call to call (the `ferry-call-parts-*` impls): the payload is
    /// copied only into the slot, as the floors copy it.
    Parts,
}

fn ferry_call(run: &mut Run<'_>, policy: Policy) -> Result<(), Skip> {
    ferry_call_as(run, policy, Caller::Message)
}

/// Skipped for `Policy::Poll` on one CPU, like `spin-floor`: two spinning
/// processes on one CPU alternate only when the scheduler preempts one of
/// them.
fn ferry_call_as(run: &mut Run<'_>, policy: Policy, caller: Caller) -> Result<(), Skip> {
    if policy == Policy::Poll && run.placement == Placement::SameCore {
        return Err(Skip::new(
            "Policy::Poll never yields: on one CPU the spinning client keeps the server from running until the scheduler preempts it (a time slice per call); polling needs two CPUs",
        ));
    }
    let n = run.bytes();
    let (port, to_server) = ferry::port()?;
    let peer = run.spawn(&[], move || serve(port, policy, n))?;
    let pid = peer.pid().as_raw_nonzero().get() as u32;
    let mut conn = Connection::connect(&to_server, ConnectOptions { policy, ..Default::default() }).map_err(rpc_err)?;
    let req = vec![1u8; n];
    for _ in 0..WARM_UP {
        conn.call(Message::new(OP_CALL).with_body(req.clone()), Timeout::Infinite).map_err(rpc_err)?;
    }
    let server_before = stats_from(conn.call(Message::new(OP_STATS), Timeout::Infinite).map_err(rpc_err)?.body())?;
    let client_before = ferry::rpc::stats();
    #[cfg(feature = "probes")]
    let mut phases = Phases::default();
    let mut calls = 0u64;
    let mut last = Message::new(0);
    let mut split = ferry::rpc::SplitReply::default();
    let loop_start = Instant::now();
    while run.more() {
        let t = Instant::now();
        if caller == Caller::Parts {
            conn.call_parts(OP_CALL, &[], &req, &mut split, Timeout::Infinite).map_err(rpc_err)?;
        } else {
            let body = refill(std::mem::take(last.body_mut()), &req);
            last = conn.call(Message::new(OP_CALL).with_body(body), Timeout::Infinite).map_err(rpc_err)?;
        }
        run.record(t.elapsed());
        calls += 1;
        #[cfg(feature = "probes")]
        phases.add(&conn);
    }
    let loop_time = loop_start.elapsed();
    let client = ferry::rpc::stats().since(&client_before);
    let server_after = stats_from(conn.call(Message::new(OP_STATS), Timeout::Infinite).map_err(rpc_err)?.body())?;
    // The statistics call itself is one server wait more; a sleeping
    // server's share of it is small next to thousands of calls.
    let server = server_after.since(&server_before);
    let got = match caller {
        Caller::Message => last.body().len(),
        Caller::Parts => split.head.len() + split.tail.len(),
    };
    if got != n {
        return Err(Skip::new(format!("failed: ferry reply of {got} bytes, expected {n}")));
    }
    let per = |x: u64| x as f64 / calls.max(1) as f64;
    run.note("syscalls_per_call_client", per(client.total()));
    run.note("syscalls_per_call_server", per(server.total()));
    run.note("futex_waits_per_call", per(client.futex_waits + server.futex_waits));
    run.note("wakes_per_call", per(client.wakes + server.wakes));
    run.note("polls_per_call", per(client.polls + server.polls));
    run.note("socket_ops_per_call", per(client.socket_ops + server.socket_ops));
    run.note("syscalls_counted_by", "ferry::rpc::stats() of both processes");
    #[cfg(feature = "probes")]
    phases.note(run);

    if policy == Policy::Adaptive {
        // Idle: no call in flight. The server's bounded spin runs out and it
        // should then sleep in epoll, burning nothing. The window starts
        // after IDLE_SETTLE: the kernel brings a running task's CPU time up
        // to date only at scheduler ticks, so a reading taken while the
        // server still spins would be stale by up to a tick.
        // The window is as long as the timed loop was (at most IDLE_MAX),
        // except that a full-length run of the smallest case measures the
        // whole IDLE_MAX: one long window per placement is enough, and it
        // keeps the suite's run time in bounds.
        let idle = if n == 8 && loop_time >= Duration::from_millis(100) {
            IDLE_MAX
        } else {
            loop_time.clamp(Duration::from_millis(10), IDLE_MAX)
        };
        std::thread::sleep(IDLE_SETTLE);
        if let Some(before) = cpu_ns(pid) {
            std::thread::sleep(idle);
            if let Some(after) = cpu_ns(pid) {
                run.note("idle_window_ms", idle.as_secs_f64() * 1e3);
                run.note("idle_server_cpu_us", after.saturating_sub(before) as f64 / 1e3);
                run.note("idle_server_cpu_fraction", after.saturating_sub(before) as f64 / idle.as_nanos() as f64);
            }
        }
    }
    conn.call(Message::new(OP_STOP), Timeout::Infinite).map_err(rpc_err)?;
    drop(conn);
    peer.wait()?;
    Ok(())
}

/// `ferry-call-block`: both sides sleep at once (`Policy::Block`).
pub fn ferry_call_block(run: &mut Run<'_>) -> Result<(), Skip> {
    ferry_call(run, Policy::Block)
}

/// `ferry-call-poll`: both sides spin (`Policy::Poll`); cross-core only.
pub fn ferry_call_poll(run: &mut Run<'_>) -> Result<(), Skip> {
    ferry_call(run, Policy::Poll)
}

/// `ferry-call-parts-block`: as `ferry-call-block`, the client calling
/// with `call_parts` from the buffer its payload is kept in.
pub fn ferry_call_parts_block(run: &mut Run<'_>) -> Result<(), Skip> {
    ferry_call_as(run, Policy::Block, Caller::Parts)
}

/// `ferry-call-parts-poll`: as `ferry-call-poll`, the client calling with
/// `call_parts` from the buffer its payload is kept in.
pub fn ferry_call_parts_poll(run: &mut Run<'_>) -> Result<(), Skip> {
    ferry_call_as(run, Policy::Poll, Caller::Parts)
}

/// `ferry-call-adaptive`: both sides spin briefly, then sleep
/// (`Policy::Adaptive`, the default).
pub fn ferry_call_adaptive(run: &mut Run<'_>) -> Result<(), Skip> {
    ferry_call(run, Policy::Adaptive)
}

/// `ferry-async-call`: the client awaits each call with
/// [`AsyncConnection::call`](ferry::tokio::AsyncConnection::call) on a
/// current-thread tokio runtime (no runtime threads: the task runs in the
/// timing process's own thread), against the same server as
/// `ferry-call-block` (`Policy::Block`). The reply's wake-up reaches the
/// client as a doorbell on the connection socket, which the runtime waits
/// for in `epoll`, instead of the futex the blocking client sleeps on; the
/// ratio to `ferry-call-block` in the same run is what the async API
/// costs. The server's system calls per call are recorded as for the
/// blocking impls; the client's are not (the runtime's `epoll` waits are
/// not counted by ferry).
pub fn ferry_async_call(run: &mut Run<'_>) -> Result<(), Skip> {
    let n = run.bytes();
    let (port, to_server) = ferry::port()?;
    // Forked before the runtime exists: the timing process stays
    // single-threaded while it forks.
    let peer = run.spawn(&[], move || serve(port, Policy::Block, n))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    let opts = ConnectOptions { policy: Policy::Block, ..Default::default() };
    // The handshake is blocking either way; connect outside the runtime and
    // register the open connection with it.
    let conn = Connection::connect(&to_server, opts).map_err(rpc_err)?;
    let mut conn = {
        let _in_runtime = rt.enter();
        ferry::tokio::AsyncConnection::new(conn).map_err(rpc_err)?
    };
    let req = vec![1u8; n];
    let call = |conn: &mut ferry::tokio::AsyncConnection, op: u32, body: Vec<u8>| {
        rt.block_on(conn.call(Message::new(op).with_body(body))).map_err(rpc_err)
    };
    for _ in 0..WARM_UP {
        call(&mut conn, OP_CALL, req.clone())?;
    }
    let server_before = stats_from(call(&mut conn, OP_STATS, Vec::new())?.body())?;
    let mut calls = 0u64;
    let mut last = Message::new(0);
    rt.block_on(async {
        while run.more() {
            let t = Instant::now();
            last = conn.call(Message::new(OP_CALL).with_body(req.clone())).await?;
            run.record(t.elapsed());
            calls += 1;
        }
        Ok::<(), ferry::rpc::RpcError>(())
    })
    .map_err(rpc_err)?;
    let server_after = stats_from(call(&mut conn, OP_STATS, Vec::new())?.body())?;
    let server = server_after.since(&server_before);
    if last.body().len() != n {
        return Err(Skip::new(format!("failed: ferry reply of {} bytes, expected {n}", last.body().len())));
    }
    run.note("syscalls_per_call_server", server.total() as f64 / calls.max(1) as f64);
    run.note("syscalls_counted_by", "ferry::rpc::stats() of the server");
    run.note("client", "tokio current_thread runtime, AsyncConnection::call");
    run.note("server", "RpcServer, Policy::Block");
    call(&mut conn, OP_STOP, Vec::new())?;
    drop(conn);
    drop(rt);
    peer.wait()?;
    Ok(())
}
