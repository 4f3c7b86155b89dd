//! The cost of a generated stub: the `rpc` / `roundtrip` case through a
//! typed client (`ferry-stub-call-poll`, `ferry-stub-call-block`) against
//! a hand-written call of the same payload (`ferry-call-poll`,
//! `ferry-call-block`), interleaved call by call over one connection to one
//! server process.
//!
//! ```text
//! cargo run --release -p ferry-idl --example stub_bench [-- --iters N] [--quick]
//! ```
//!
//! The server is this program again (`stub_bench serve POLICY`), started
//! with a send right to the parent; it answers hand-written requests (a raw
//! operation id, the body echoed) and the typed `echo` operation through
//! the same RPC server. Standard output is a JSON array of records in the
//! benchmark schema (suite `rpc`, case `roundtrip`, placement `unpinned`);
//! each stub record's `extra.ratio_to_hand_written` is its median over the
//! hand-written median of the same size and policy. Case `region-arg`
//! compares a typed `ByValue` argument (`take(region) -> u64`) with a
//! hand-written message carrying the same 1 MiB region by copy. A summary
//! goes to standard error.

use std::process::{Command, ExitCode};
use std::time::Instant;

use ferry::rpc::{ConnectOptions, Connection, Policy, RpcServer, Transport};
use ferry::spawn::CommandExt;
use ferry::{Item, Message, Timeout};
use ferry_idl::{ByValue, Context, Dispatch, Route, RpcChannel};
use serde_json::json;

ferry_idl::interface! {
    /// The benchmark's service.
    pub mod echo: "bench.echo", version 1, compatible 1 {
        /// Returns `data`.
        fn echo(data: Vec<u8>) -> Vec<u8> = 1;
        /// Returns the length of a region sent by value.
        fn take(region: ByValue) -> u64 = 2;
    }
}

/// The hand-written operation id (outside the interface's ordinals).
const RAW_OP: u32 = 1000;
/// The hand-written region operation: one region item in, its length (8
/// bytes) back.
const RAW_REGION_OP: u32 = 1001;
/// The region the `region-arg` case sends.
const REGION_BYTES: usize = 1 << 20;

struct Echo;

impl echo::Service for Echo {
    fn echo(&mut self, _: &Context, data: Vec<u8>) -> Vec<u8> {
        data
    }
    fn take(&mut self, _: &Context, region: ByValue) -> u64 {
        region.0.len() as u64
    }
}

/// The typed server plus the hand-written operation.
struct Both(echo::Server<Echo>);

impl Dispatch for Both {
    fn dispatch(&mut self, req: Message, route: Route) -> Option<Message> {
        if req.op() == RAW_OP {
            return Some(Message::new(RAW_OP).with_body(req.body().to_vec()));
        }
        if req.op() == RAW_REGION_OP {
            let mut req = req;
            let len = match req.take_items().pop() {
                Some(Item::Region(r)) => r.len() as u64,
                _ => u64::MAX,
            };
            return Some(Message::new(RAW_REGION_OP).with_body(len.to_le_bytes()));
        }
        self.0.dispatch(req, route)
    }
}

fn policy_of(name: &str) -> Policy {
    match name {
        "poll" => Policy::Poll,
        _ => Policy::Block,
    }
}

fn serve(policy: &str) -> Result<(), Box<dyn std::error::Error>> {
    let parent = ferry::spawn::inherited()?;
    let (rx, tx) = ferry::port()?;
    let mut server = RpcServer::new(rx)?;
    server.set_policy(policy_of(policy));
    parent.send(Message::new(1).with_item(tx), Timeout::Infinite)?;
    drop(parent);
    ferry_idl::serve_rpc(&mut Both(echo::Server(Echo)), &mut server, Timeout::Infinite)?;
    Ok(())
}

/// Per-call times of one impl.
#[derive(Default)]
struct Samples(Vec<u64>);

impl Samples {
    fn stats(&mut self) -> (f64, f64, f64) {
        self.0.sort_unstable();
        let n = self.0.len();
        let at = |q: f64| self.0[((n as f64 * q) as usize).min(n - 1)] as f64;
        (at(0.5), at(0.99), self.0[0] as f64)
    }
}

fn measure(policy: &str, bytes: usize, iters: usize, records: &mut Vec<serde_json::Value>) -> Result<(), Box<dyn std::error::Error>> {
    let (mut rx, tx) = ferry::port()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["serve", policy]);
    cmd.pass_right(&tx)?;
    drop(tx);
    let mut child = cmd.spawn()?;
    drop(cmd);
    let mut hello = rx.recv(Timeout::Infinite)?;
    let Some(Item::Send(server)) = hello.take_items().pop() else {
        return Err("the server sent no right".into());
    };
    let opts = ConnectOptions { policy: policy_of(policy), ..Default::default() };
    // One connection carries both, so neither gains from the server's
    // order of looking at its connections.
    let mut stub = echo::Client::connect(RpcChannel::new(Connection::connect(&server, opts)?))?;
    drop(server);

    let req = vec![1u8; bytes];
    let (mut hand, mut gen) = (Samples::default(), Samples::default());
    // Interleaved rounds, so both impls see the same machine.
    let rounds = 20;
    let per_round = (iters / rounds).max(1);
    for round in 0..=rounds {
        for _ in 0..per_round {
            let t = Instant::now();
            let raw = stub.channel_mut().transport_mut();
            let reply = raw.call(Message::new(RAW_OP).with_body(req.clone()), Timeout::Infinite)?;
            let ns = t.elapsed().as_nanos() as u64;
            if reply.body().len() != bytes {
                return Err("hand-written reply of the wrong size".into());
            }
            if round > 0 {
                hand.0.push(ns);
            }
            let t = Instant::now();
            let reply = stub.echo(req.clone())?;
            let ns = t.elapsed().as_nanos() as u64;
            if reply.len() != bytes {
                return Err("stub reply of the wrong size".into());
            }
            if round > 0 {
                gen.0.push(ns);
            }
        }
    }
    // A region by value: the same region sent by copy each call (after the
    // first, no byte is copied: only its descriptor travels).
    let mut region = ferry::Region::new(REGION_BYTES)?;
    region.as_mut_slice().fill(3);
    let (mut hand_r, mut gen_r) = (Samples::default(), Samples::default());
    let per_round_r = (per_round / 10).max(1);
    for round in 0..=rounds {
        for _ in 0..per_round_r {
            let item = region.by_copy()?;
            let t = Instant::now();
            let raw = stub.channel_mut().transport_mut();
            let reply = raw.call(Message::new(RAW_REGION_OP).with_item(item), Timeout::Infinite)?;
            let ns = t.elapsed().as_nanos() as u64;
            if reply.body() != (REGION_BYTES as u64).to_le_bytes() {
                return Err("hand-written region reply is wrong".into());
            }
            if round > 0 {
                hand_r.0.push(ns);
            }
            let item = region.by_copy()?;
            let t = Instant::now();
            let len = stub.take(ByValue(item))?;
            let ns = t.elapsed().as_nanos() as u64;
            if len != REGION_BYTES as u64 {
                return Err("stub region reply is wrong".into());
            }
            if round > 0 {
                gen_r.0.push(ns);
            }
        }
    }
    drop(stub);
    child.wait()?;

    let (hm, hp, hmin) = hand.stats();
    let (gm, gp, gmin) = gen.stats();
    let record = |case: &str, bytes: usize, name: &str, median: f64, p99: f64, min: f64, n: usize, extra: serde_json::Value| {
        json!({
            "suite": "rpc", "case": case, "impl": name, "bytes": bytes,
            "placement": "unpinned", "touch": "none", "iters": n,
            "median_ns": median, "p99_ns": p99, "min_ns": min, "gbps": null, "extra": extra,
        })
    };
    records.push(record("roundtrip", bytes, &format!("ferry-call-{policy}"), hm, hp, hmin, hand.0.len(), json!({})));
    let ratio = gm / hm;
    records.push(record(
        "roundtrip",
        bytes,
        &format!("ferry-stub-call-{policy}"),
        gm,
        gp,
        gmin,
        gen.0.len(),
        json!({ "ratio_to_hand_written": ratio, "interface": "bench.echo", "operation": "echo(data: bytes) -> bytes" }),
    ));
    eprintln!("{policy:>5} {bytes:>5} B: hand-written {hm:>8.0} ns, stub {gm:>8.0} ns, ratio {ratio:.3}");
    if bytes == 8 {
        // Once per policy: the region case does not depend on `bytes`.
        let (hm, hp, hmin) = hand_r.stats();
        let (gm, gp, gmin) = gen_r.stats();
        let extra = json!({ "region_mode": "copy", "reply_bytes": 8 });
        records.push(record("region-arg", REGION_BYTES, &format!("ferry-call-{policy}"), hm, hp, hmin, hand_r.0.len(), extra.clone()));
        let ratio = gm / hm;
        let mut extra = extra;
        extra["ratio_to_hand_written"] = json!(ratio);
        extra["operation"] = json!("take(region: by_value region) -> u64");
        records.push(record("region-arg", REGION_BYTES, &format!("ferry-stub-call-{policy}"), gm, gp, gmin, gen_r.0.len(), extra));
        eprintln!("{policy:>5} region 1 MiB by value: hand-written {hm:>8.0} ns, stub {gm:>8.0} ns, ratio {ratio:.3}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        return match serve(args.get(1).map(String::as_str).unwrap_or("block")) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("stub_bench server: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let quick = args.iter().any(|a| a == "--quick");
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 2_000 } else { 100_000 });
    let mut records = Vec::new();
    for policy in ["poll", "block"] {
        for bytes in [8, 1024] {
            if let Err(e) = measure(policy, bytes, iters, &mut records) {
                eprintln!("stub_bench: {policy} {bytes} B: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("{}", serde_json::to_string_pretty(&records).expect("records are JSON"));
    ExitCode::SUCCESS
}
