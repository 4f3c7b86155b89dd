//! The `rpc` / `roundtrip` case through the tokio API (`ferry-async-call`)
//! against the blocking API (`ferry-call-block`), in the same run.
//!
//! One server process (a blocking [`RpcServer`] with [`Policy::Block`],
//! started as a child of this one) serves two connections from this
//! process: one called with the blocking `Connection::call` under
//! `Policy::Block` (both sides sleep at once: futex wake-up to the client,
//! doorbell to the server), one called with `AsyncConnection::call` on a
//! current-thread tokio runtime (the client waits in the runtime's `epoll`
//! for a doorbell on the connection socket instead of the futex). The two
//! are timed in alternating rounds so a noisy machine affects both alike.
//! Each call is timed on its own; the records follow the benchmark schema
//! (`suite` `rpc`, `case` `roundtrip`, `placement` `unpinned`), one JSON
//! object per line after the table, and the ratio of the medians closes
//! the output.
//!
//! ```sh
//! cargo run --release -p ferry --features tokio --example async_rpc_bench -- [CALLS]
//! ```

use std::process::Command;
use std::time::Instant;

use ferry::rpc::{ConnectOptions, Connection, Policy, RpcError, RpcServer, Transport};
use ferry::spawn::CommandExt;
use ferry::tokio::AsyncConnection;
use ferry::{Item, Message, Timeout};

const OP_CALL: u32 = 1;
const OP_STOP: u32 = 3;
/// Payload sizes, as in the `rpc` suite.
const SIZES: [usize; 3] = [8, 64, 1024];
/// Alternating rounds per size.
const ROUNDS: usize = 10;
/// Calls before timing starts.
const WARM_UP: usize = 200;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("server") {
        return server();
    }
    let calls: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(20_000);
    client(calls.max(ROUNDS))
}

/// The child: a blocking server that echoes the request's size back.
fn server() -> Result<(), Error> {
    let parent = ferry::spawn::inherited()?;
    let (port, to_port) = ferry::port()?;
    let mut server = RpcServer::new(port)?;
    server.set_policy(Policy::Block);
    parent.send(Message::new(0).with_item(to_port), Timeout::Infinite)?;
    drop(parent);
    let mut reply = None;
    loop {
        let (conn, req) = match server.reply_and_wait(reply.take(), Timeout::Infinite) {
            Ok(r) => r,
            Err(RpcError::NoClients) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if req.op() == OP_STOP {
            server.reply(conn, Message::new(OP_STOP))?;
            return Ok(());
        }
        reply = Some((conn, Message::new(OP_CALL).with_body(vec![0x42; req.body().len()])));
    }
}

/// Median, 99th percentile and minimum of `ns`, sorted in place.
fn summary(ns: &mut [f64]) -> (f64, f64, f64) {
    ns.sort_by(f64::total_cmp);
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), ns[0])
}

fn client(calls: usize) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (mut from_child, to_parent) = ferry::port()?;
    let mut child = Command::new(std::env::current_exe()?).arg("server").pass_right(&to_parent)?.spawn()?;
    drop(to_parent);
    let mut hello = from_child.recv(Timeout::Infinite)?;
    let Some(Item::Send(to_server)) = hello.take_items().pop() else {
        return Err("the server sent no send right".into());
    };
    let block_opts = ConnectOptions { policy: Policy::Block, ..Default::default() };
    let mut blocking = Connection::connect(&to_server, block_opts)?;
    let mut asynchronous = rt.block_on(AsyncConnection::connect(&to_server, block_opts))?;

    let per_round = calls / ROUNDS;
    let mut records = Vec::new();
    println!("{:<18} {:>6} {:>10} {:>10} {:>10}", "impl", "bytes", "median ns", "p99 ns", "min ns");
    for bytes in SIZES {
        let req = || Message::new(OP_CALL).with_body(vec![0x17; bytes]);
        let mut block_ns = Vec::with_capacity(calls);
        let mut async_ns = Vec::with_capacity(calls);
        for _ in 0..WARM_UP {
            blocking.call(req(), Timeout::Infinite)?;
        }
        rt.block_on(async {
            for _ in 0..WARM_UP {
                asynchronous.call(req()).await?;
            }
            Ok::<(), RpcError>(())
        })?;
        for _ in 0..ROUNDS {
            for _ in 0..per_round {
                let t = Instant::now();
                let r = blocking.call(req(), Timeout::Infinite)?;
                block_ns.push(t.elapsed().as_nanos() as f64);
                assert_eq!(r.body().len(), bytes);
            }
            rt.block_on(async {
                for _ in 0..per_round {
                    let t = Instant::now();
                    let r = asynchronous.call(req()).await?;
                    async_ns.push(t.elapsed().as_nanos() as f64);
                    assert_eq!(r.body().len(), bytes);
                }
                Ok::<(), RpcError>(())
            })?;
        }
        let (bm, bp, bmin) = summary(&mut block_ns);
        let (am, ap, amin) = summary(&mut async_ns);
        for (name, m, p, min) in [("ferry-call-block", bm, bp, bmin), ("ferry-async-call", am, ap, amin)] {
            println!("{name:<18} {bytes:>6} {m:>10.0} {p:>10.0} {min:>10.0}");
            records.push(format!(
                "{{\"suite\":\"rpc\",\"case\":\"roundtrip\",\"impl\":\"{name}\",\"bytes\":{bytes},\"placement\":\"unpinned\",\"touch\":\"none\",\"iters\":{},\"median_ns\":{m:.1},\"p99_ns\":{p:.1},\"min_ns\":{min:.1},\"gbps\":null,\"extra\":{{\"server\":\"RpcServer Policy::Block\",\"client\":\"{}\"}}}}",
                per_round * ROUNDS,
                if name == "ferry-async-call" { "tokio current_thread" } else { "Policy::Block" },
            ));
        }
        println!("ratio async/blocking at {bytes} bytes: {:.2}", am / bm);
    }
    for r in &records {
        println!("{r}");
    }
    rt.block_on(asynchronous.call(Message::new(OP_STOP)))?;
    drop(blocking);
    if !child.wait()?.success() {
        return Err("the server failed".into());
    }
    Ok(())
}
