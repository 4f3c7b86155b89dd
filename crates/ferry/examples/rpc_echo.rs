//! An echo server and a client in two processes, talking through an RPC
//! connection: the client times a run of calls and prints what they cost
//! and how many system calls the RPC layer made on each side.
//!
//! ```text
//! cargo run --release -p ferry --example rpc_echo -- [adaptive|block|poll] [CALLS] [--pin]
//! cargo run --release -p ferry --features probes --example rpc_echo -- poll 100000 --pin
//! ```
//!
//! `--pin` puts the client on CPU 0 and the server on CPU 1 (spinning
//! policies need the two sides on different CPUs). With `--features probes`
//! it also prints the phase breakdown of the last call.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferry::rpc::{ConnId, ConnectOptions, Connection, Policy, RpcServer, Transport};
use ferry::{Bootstrap, Message, Timeout};

const NAME: &str = "rpc-echo-example";
const OP_ECHO: u32 = 1;
const OP_STATS: u32 = 2;
const OP_EXIT: u32 = 3;

fn policy(s: &str) -> Policy {
    match s {
        "block" => Policy::Block,
        "poll" => Policy::Poll,
        _ => Policy::Adaptive,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve") {
        return serve(&args[1..]);
    }
    let pol = args.first().cloned().unwrap_or_else(|| "adaptive".into());
    if !["adaptive", "block", "poll"].contains(&pol.as_str()) {
        eprintln!("rpc_echo: unknown policy {pol:?}\nusage: rpc_echo [adaptive|block|poll] [CALLS] [--pin]");
        std::process::exit(2);
    }
    let calls: u32 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(100_000);
    let pin = args.iter().any(|a| a == "--pin");

    // A private name service for this run, started inside this process.
    let dir = std::env::temp_dir().join(format!("ferry-rpc-echo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut names = Bootstrap::private(&dir)?;
    if pin {
        ferry::rpc::pin_current_thread(0)?;
    }
    let mut server = Command::new(std::env::current_exe()?)
        .args(["--serve", &pol, if pin { "1" } else { "-" }])
        .env("FERRY_BOOTSTRAP", names.path())
        .env("FERRY_NO_AUTOSTART", "1")
        .stdin(Stdio::null())
        .spawn()?;
    let to = loop {
        match names.lookup(NAME) {
            Ok(r) => break r,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let mut conn = Connection::connect(&to, ConnectOptions { policy: policy(&pol), ..Default::default() })?;
    for _ in 0..1000 {
        conn.call(Message::new(OP_ECHO).with_body(*b"warm-up!"), Timeout::Infinite)?;
    }
    let server_before = conn.call(Message::new(OP_STATS), Timeout::Infinite)?.body().to_vec();
    let before = ferry::rpc::stats();
    let start = Instant::now();
    for i in 0..calls {
        let r = conn.call(Message::new(OP_ECHO).with_body(i.to_le_bytes()), Timeout::Infinite)?;
        assert_eq!(r.body(), i.to_le_bytes());
    }
    let took = start.elapsed();
    let mine = ferry::rpc::stats().since(&before);
    let server_after = conn.call(Message::new(OP_STATS), Timeout::Infinite)?.body().to_vec();
    let theirs: Vec<u64> = server_after
        .chunks(8)
        .zip(server_before.chunks(8))
        .map(|(a, b)| u64::from_le_bytes(a.try_into().unwrap()) - u64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    println!("policy {pol}, {calls} calls of 4 bytes, pinned: {pin}");
    println!("  round trip: {:.2} us per call", took.as_secs_f64() * 1e6 / f64::from(calls));
    println!("  client rpc system calls: {} ({mine:?})", mine.total());
    println!(
        "  server rpc system calls: {} (futex waits {}, wakes {}, polls {}, socket ops {})",
        theirs.iter().sum::<u64>(),
        theirs[0],
        theirs[1],
        theirs[2],
        theirs[3]
    );
    if let Some(p) = conn.last_probe() {
        println!("  last call, ns: {p:?}");
    }
    conn.call(Message::new(OP_EXIT), Timeout::Infinite)?;
    server.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn serve(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(cpu) = args.get(1).and_then(|s| s.parse::<usize>().ok()) {
        ferry::rpc::pin_current_thread(cpu)?;
    }
    let (port, send) = ferry::port()?;
    Bootstrap::connect()?.register(NAME, &send)?;
    let mut server = RpcServer::new(port)?;
    server.set_policy(policy(args.first().map_or("adaptive", String::as_str)));
    let mut reply: Option<(ConnId, Message)> = None;
    loop {
        let (conn, req) = server.reply_and_wait(reply.take(), Timeout::Infinite)?;
        let answer = match req.op() {
            OP_STATS => {
                let s = ferry::rpc::stats();
                let words = [s.futex_waits, s.wakes, s.polls, s.socket_ops];
                Message::new(OP_STATS).with_body(words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>())
            }
            OP_EXIT => {
                server.reply(conn, Message::new(OP_EXIT))?;
                return Ok(());
            }
            op => Message::new(op).with_body(req.body().to_vec()),
        };
        reply = Some((conn, answer));
    }
}
