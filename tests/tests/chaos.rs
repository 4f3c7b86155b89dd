//! The chaos test: several `ferry-peer chaos` processes exchange messages,
//! send rights, send-once reply rights, regions by copy and RPC calls
//! through a private name server, while the driver SIGKILLs random ones at
//! random points for a bounded time and restarts some. Afterwards:
//! - every survivor stops and exits by itself when asked (no hang);
//! - every survivor is back to the descriptors, memfds and memfd mappings
//!   it had before it made its first port (nothing leaked);
//! - every request a sender logged as acknowledged was logged as delivered
//!   exactly once by the slot it was sent to, no request was delivered
//!   twice, and no region arrived with bytes other than those sent.
//!
//! `FERRY_CHAOS_SEED` replays a run (the seed is printed);
//! `FERRY_CHAOS_SECS` sets how long the killing goes on (default 6).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{private_bootstrap, watchdog};
use ferry::{Message, Timeout};

const SLOTS: u32 = 5;
/// Most kills per second of chaos.
const KILLS_PER_SEC: usize = 2;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One process of one slot, with the lines it printed so far.
struct Peer {
    slot: u32,
    inc: u32,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: JoinHandle<()>,
}

fn spawn(bootstrap: &std::path::Path, slot: u32, inc: u32, seed: u64) -> Peer {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
        .args(["chaos", &slot.to_string(), &inc.to_string(), &SLOTS.to_string(), &seed.to_string()])
        .env("FERRY_BOOTSTRAP", bootstrap)
        .env("FERRY_NO_EMBED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ferry-peer chaos");
    let out = child.stdout.take().expect("stdout");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            sink.lock().expect("log lock").push(line);
        }
    });
    Peer { slot, inc, child, lines, reader }
}

/// Everything one process printed, once it has exited.
struct Log {
    slot: u32,
    inc: u32,
    survived: bool,
    lines: Vec<String>,
}

fn collect(p: Peer, survived: bool) -> Log {
    p.reader.join().expect("reader");
    let lines = std::mem::take(&mut *p.lines.lock().expect("log lock"));
    Log { slot: p.slot, inc: p.inc, survived, lines }
}

fn is_ready(p: &Peer) -> bool {
    p.lines.lock().expect("log lock").iter().any(|l| l.starts_with("ready "))
}

/// Checks the logs: acknowledged means delivered exactly once to the slot
/// it was sent to; nothing delivered twice; no corrupt region; every
/// survivor back to its baseline. Returns (deliveries, acks).
fn check(logs: &[Log]) -> (usize, usize) {
    // (sender, seq) -> slots that logged its delivery.
    let mut delivered: HashMap<(String, u64), Vec<u32>> = HashMap::new();
    let mut acks = Vec::new();
    let mut problems = Vec::new();
    for log in logs {
        let me = format!("{}.{}", log.slot, log.inc);
        for l in &log.lines {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["recv", from, seq, _kind] => {
                    delivered.entry((from.to_string(), seq.parse().expect("seq"))).or_default().push(log.slot);
                }
                ["acked", to, seq, kind] => acks.push((me.clone(), to.parse::<u32>().expect("slot"), seq.parse::<u64>().expect("seq"), kind.to_string())),
                ["corrupt", ..] | ["wrong-reply", ..] | ["malformed-request"] | ["malformed-call"] | ["map-failed", ..] | ["bad-message", ..] => {
                    problems.push(format!("{me}: {l}"))
                }
                _ => {}
            }
        }
        if log.survived {
            let fin = log.lines.iter().find(|l| l.starts_with("final ")).unwrap_or_else(|| panic!("survivor {me} printed no final line"));
            for pair in fin.split_whitespace().skip(1) {
                let (what, v) = pair.split_once('=').expect("name=now/baseline");
                let (now, base) = v.split_once('/').expect("now/baseline");
                if now != base {
                    problems.push(format!("survivor {me} leaked {what}: {now} now, {base} before it made any port"));
                }
            }
        }
    }
    for ((from, seq), slots) in &delivered {
        if slots.len() > 1 {
            problems.push(format!("request {from} #{seq} delivered {} times (slots {slots:?})", slots.len()));
        }
    }
    for (from, to, seq, kind) in &acks {
        match delivered.get(&(from.clone(), *seq)).map(Vec::as_slice) {
            Some([slot]) if slot == to => {}
            other => problems.push(format!("{from} saw {kind} request #{seq} to slot {to} acknowledged, but it was delivered to {other:?}")),
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
    (delivered.len(), acks.len())
}

#[test]
fn chaos_kills_lose_nothing_acknowledged_and_leak_nothing() {
    let seed = std::env::var("FERRY_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let secs = std::env::var("FERRY_CHAOS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6u64).min(120);
    println!("chaos: seed {seed} (replay with FERRY_CHAOS_SEED={seed}), {secs} s of kills");
    watchdog("chaos", Duration::from_secs(secs + 120), || {
        let bootstrap = private_bootstrap("chaos");
        let mut rng = Rng(seed);
        let mut peers: Vec<Peer> = (0..SLOTS).map(|s| spawn(&bootstrap, s, 0, seed)).collect();
        let mut incs = vec![0u32; SLOTS as usize];
        let mut logs = Vec::new();
        let mut kills = 0;
        let mut restarts = 0;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(100 + rng.below(500)));
            if kills >= KILLS_PER_SEC * secs as usize || peers.is_empty() {
                continue;
            }
            // Only kill processes that are up (registered), so kills land
            // in the middle of the traffic rather than at start-up.
            let up: Vec<usize> = (0..peers.len()).filter(|&i| is_ready(&peers[i])).collect();
            if up.is_empty() {
                continue;
            }
            let i = up[rng.below(up.len() as u64) as usize];
            let mut p = peers.swap_remove(i);
            p.child.kill().expect("SIGKILL a peer");
            p.child.wait().expect("reap a peer");
            kills += 1;
            let slot = p.slot;
            logs.push(collect(p, false));
            // Restart most, and always while fewer than three are left.
            if peers.len() < 3 || rng.below(4) != 0 {
                incs[slot as usize] += 1;
                peers.push(spawn(&bootstrap, slot, incs[slot as usize], seed));
                restarts += 1;
            }
        }
        // Stop the survivors: each must exit by itself.
        let mut bs = common::names(&bootstrap);
        for p in &peers {
            let until = Instant::now() + Duration::from_secs(20);
            while !is_ready(p) {
                assert!(Instant::now() < until, "peer {}.{} never came up", p.slot, p.inc);
                common::nap();
            }
            let right = common::lookup_retry(&mut bs, &format!("chaos-{}", p.slot));
            right.send(Message::new(99), Timeout::Infinite).expect("send stop");
        }
        let survivors = peers.len();
        for mut p in peers {
            let until = Instant::now() + Duration::from_secs(30);
            let status = loop {
                if let Some(s) = p.child.try_wait().expect("wait for a survivor") {
                    break s;
                }
                if Instant::now() > until {
                    let _ = p.child.kill();
                    panic!("survivor {}.{} did not exit within 30 s of being asked to stop: it hangs", p.slot, p.inc);
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            assert!(status.success(), "survivor {}.{} failed: {status}", p.slot, p.inc);
            logs.push(collect(p, true));
        }
        for log in logs.iter().filter(|l| l.survived) {
            println!("chaos: survivor {}.{}: {}", log.slot, log.inc, log.lines.iter().find(|l| l.starts_with("final ")).map_or("", String::as_str));
        }
        let (delivered, acked) = check(&logs);
        println!("chaos: {kills} kills, {restarts} restarts, {survivors} survivors; {delivered} requests delivered, {acked} acknowledged");
        assert!(acked > 0, "no request was acknowledged at all: the peers never talked");
    });
}
