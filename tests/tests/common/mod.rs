#![allow(dead_code)]
//! Shared helpers for ferry's integration tests: spawning peer processes,
//! a watchdog that turns a deadlock into a failure, and descriptor counting.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Fails the whole test process (with a message naming the test) if `f`
/// does not return within `limit`. Tests never assert timings; this only
/// turns a hang into a failure.
pub fn watchdog<T>(name: &str, limit: Duration, f: impl FnOnce() -> T) -> T {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let label = name.to_owned();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            eprintln!("watchdog: test {label} still running after {limit:?}: deadlock; aborting");
            std::process::abort();
        }
    });
    let out = f();
    let _ = tx.send(());
    out
}

/// `name` in the temporary directory, removed with whatever it holds when
/// this test process exits (its tests passed or failed), so that runs of
/// the suite leave nothing behind.
pub fn temp_path(name: impl AsRef<Path>) -> PathBuf {
    let path = std::env::temp_dir().join(name);
    ferry::fuzzing::remove_at_exit(path.clone());
    path
}

/// Starts a private name server for one test on a thread of this process
/// and returns its path, so tests running in parallel never share
/// registrations. Peers spawned with [`spawn_peer`] are pointed at it.
pub fn private_bootstrap(test: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = temp_path(format!("ferry-test-{}-{}-{}", std::process::id(), test, N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).expect("create test dir");
    let path = dir.join("bootstrap");
    ferry::NameServer::bind(&path).expect("bind name server").spawn().expect("start name server");
    path
}

/// Connects to the name server at `path`.
pub fn names(path: &std::path::Path) -> ferry::Bootstrap {
    ferry::Bootstrap::connect_to(path).expect("connect to name server")
}

/// Looks `name` up, retrying while the peer that registers it starts.
pub fn lookup_retry(bs: &mut ferry::Bootstrap, name: &str) -> ferry::SendRight {
    for _ in 0..2000 {
        match bs.lookup(name) {
            Ok(r) => return r,
            Err(ferry::NameError::NotFound) => nap(),
            Err(e) => panic!("lookup {name}: {e}"),
        }
    }
    panic!("{name} never registered");
}

/// Starts the peer program in `role` with `args`, pointed at `bootstrap`.
pub fn spawn_peer(bootstrap: &std::path::Path, role: &str, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
        .arg(role)
        .args(args)
        .env("FERRY_BOOTSTRAP", bootstrap)
        .env("FERRY_NO_EMBED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ferry-peer")
}

/// Waits for a peer and returns its standard output, panicking if it failed.
pub fn finish(child: Child) -> String {
    let out = child.wait_with_output().expect("wait for peer");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "peer failed with {}; stdout:\n{stdout}", out.status);
    stdout
}

/// Number of descriptors open in this process.
/// The one descriptor ferry keeps for the life of a process (its published
/// counter memfd) is opened first, so that it never counts as a leak.
pub fn open_fds() -> usize {
    ferry::counters::publish();
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Sleeps briefly; for polling loops that wait for another process.
pub fn nap() {
    std::thread::sleep(Duration::from_millis(5));
}

/// Serialises the tests of one test binary that count descriptors: the
/// count is process-wide, so such tests must not overlap with others.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The uid and gid tests run as when they play another, unprivileged local
/// user (`nobody` on Debian and most distributions).
pub const NOBODY: u32 = 65534;

/// Whether this test process may start children as another user (it runs as
/// root). Tests of cross-user attacks call this first and, when it is false,
/// print why they are skipped and return: they cannot play two users then.
pub fn can_play_other_user(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    eprintln!("skipped {test}: starting a process as uid {NOBODY} needs root (run the tests as root to check cross-user attacks)");
    false
}

/// `ferry-peer` at a path any user may reach: the build directory may sit
/// below directories other users cannot enter, so it is linked (or, across
/// file systems, copied) once into a world-readable directory of the
/// temporary directory.
pub fn peer_for_other_users() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        // Copies left by test processes that have ended are removed: a hard
        // link keeps an old build's program on disk after cargo replaced it.
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
            for e in entries.flatten() {
                let name = e.file_name();
                let pid = name.to_str().and_then(|n| n.strip_prefix("ferry-peer-")).and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("ferry-peer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create peer copy dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod peer copy dir");
        let path = dir.join("ferry-peer");
        let tmp = dir.join("ferry-peer.tmp");
        // A hard link costs no space; a copy where the build directory is
        // on another file system.
        let _ = std::fs::remove_file(&tmp);
        if std::fs::hard_link(env!("CARGO_BIN_EXE_ferry-peer"), &tmp).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_ferry-peer"), &tmp).expect("copy ferry-peer");
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod ferry-peer");
        }
        std::fs::rename(&tmp, &path).expect("place ferry-peer");
        path
    })
    .clone()
}

/// Starts the peer program in `role` as uid and gid `uid` (no supplementary
/// groups), pointed at `bootstrap`: another local user attacking what this
/// test process (root) set up. Callers check [`can_play_other_user`] first.
pub fn spawn_peer_as(uid: u32, bootstrap: &std::path::Path, role: &str, args: &[&str]) -> Child {
    peer_command_as(uid, bootstrap, role, args).spawn().expect("spawn ferry-peer as another user")
}

/// The command [`spawn_peer_as`] runs, for a caller that adds to it (say,
/// a right passed with `ferry::spawn::CommandExt::pass_right`).
#[allow(dead_code)]
pub fn peer_command_as(uid: u32, bootstrap: &std::path::Path, role: &str, args: &[&str]) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(peer_for_other_users());
    cmd.arg(role)
        .args(args)
        .env("FERRY_BOOTSTRAP", bootstrap)
        .env("FERRY_NO_EMBED", "1")
        .env("TMPDIR", "/tmp")
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir("/")
        .uid(uid)
        .gid(uid)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// A UDP relay on loopback between one client and `server`, standing in
/// for a bad network (the kernel here has no `netem`): it can drop one
/// datagram in `drop_every` (0: none), hold each datagram for a delay
/// and one in eight a random jitter longer (so others overtake it), and, once
/// `cut` is set, forward nothing. It stops when dropped, and after two
/// minutes in any case.
pub struct Relay {
    /// Where the client sends: the relay's own address.
    pub addr: SocketAddr,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Delay and jitter, in microseconds, applied to datagrams from now on.
    delay: std::sync::Arc<[std::sync::atomic::AtomicU64; 2]>,
    forwarded: std::sync::Arc<std::sync::atomic::AtomicU64>,
    overtaken: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A datagram the relay holds until it is due: when, its arrival number,
/// where it goes, its bytes.
type Held = std::cmp::Reverse<(std::time::Instant, u64, SocketAddr, Vec<u8>)>;

impl Relay {
    /// Starts relaying between the first client heard from and `server`,
    /// dropping one datagram in `drop_every` and delaying none.
    pub fn start(server: SocketAddr, drop_every: u64) -> Relay {
        Relay::with_delay(server, drop_every, Duration::ZERO, Duration::ZERO)
    }

    /// As [`Relay::start`], each datagram held for `delay` before it is
    /// forwarded, and one in eight a random part of `jitter` longer.
    pub fn with_delay(server: SocketAddr, drop_every: u64, delay: Duration, jitter: Duration) -> Relay {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let sock = std::net::UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = sock.local_addr().unwrap();
        let (cut, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let us = |d: Duration| AtomicU64::new(d.as_micros() as u64);
        let delays = Arc::new([us(delay), us(jitter)]);
        let (forwarded, overtaken) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (c, s, d, f, o) = (cut.clone(), stop.clone(), delays.clone(), forwarded.clone(), overtaken.clone());
        std::thread::spawn(move || {
            let end = std::time::Instant::now() + Duration::from_secs(120);
            let mut client: Option<SocketAddr> = None;
            let mut buf = vec![0u8; 65536];
            let mut n = 0u64;
            let mut held: std::collections::BinaryHeap<Held> = std::collections::BinaryHeap::new();
            // The last arrival number forwarded each way (to the server,
            // to the client), to count datagrams that overtook others.
            let mut last_sent = [0u64; 2];
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            while !s.load(Ordering::Relaxed) && std::time::Instant::now() < end {
                let now = std::time::Instant::now();
                // Forward what is due, in order of due time.
                while held.peek().is_some_and(|h| h.0 .0 <= now) {
                    let std::cmp::Reverse((_, seq, to, bytes)) = held.pop().expect("checked above");
                    if c.load(Ordering::Relaxed) {
                        continue;
                    }
                    let way = usize::from(to != server);
                    if seq < last_sent[way] {
                        o.fetch_add(1, Ordering::Relaxed);
                    }
                    last_sent[way] = last_sent[way].max(seq);
                    let _ = sock.send_to(&bytes, to);
                    f.fetch_add(1, Ordering::Relaxed);
                }
                let wait = held.peek().map_or(Duration::from_millis(50), |h| h.0 .0.saturating_duration_since(now));
                sock.set_read_timeout(Some(wait.clamp(Duration::from_micros(100), Duration::from_millis(50)))).unwrap();
                let Ok((len, from)) = sock.recv_from(&mut buf) else { continue };
                n += 1;
                if c.load(Ordering::Relaxed) || (drop_every > 0 && n.is_multiple_of(drop_every)) {
                    continue;
                }
                let to = if from == server {
                    match client {
                        Some(c) => c,
                        None => continue,
                    }
                } else {
                    client = Some(from);
                    server
                };
                // One datagram in eight (chosen by xorshift) is held a
                // random part of `jitter` longer, so those behind it
                // overtake it; the rest keep their order, as in a queue.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let jitter = d[1].load(Ordering::Relaxed);
                let extra = if jitter == 0 || !rng.is_multiple_of(8) { 0 } else { (rng >> 3) % jitter };
                let hold = Duration::from_micros(d[0].load(Ordering::Relaxed) + extra);
                held.push(std::cmp::Reverse((std::time::Instant::now() + hold, n, to, buf[..len].to_vec())));
            }
        });
        Relay { addr, cut, stop, delay: delays, forwarded, overtaken }
    }

    /// From now on, forwards nothing (the link is cut).
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Holds datagrams that arrive from now on for `delay`, and one in
    /// eight a random part of `jitter` longer.
    pub fn set_delay(&self, delay: Duration, jitter: Duration) {
        self.delay[0].store(delay.as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
        self.delay[1].store(jitter.as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Datagrams forwarded so far.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Datagrams forwarded after one that arrived later than they did.
    pub fn overtaken(&self) -> u64 {
        self.overtaken.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Dials the network node at `addr` by hand over QUIC, as the host whose
/// identity is `me`, trusting `node`'s certificate; `tune` sets the
/// transport as a hostile peer might. For tests that play a peer that
/// misbehaves where a `ferry_net::Node` never would.
pub async fn dial(
    me: &ferry_net::Identity,
    node: &ferry_net::Identity,
    addr: SocketAddr,
    tune: impl FnOnce(&mut quinn::TransportConfig),
) -> quinn::Connection {
    let peer = ferry_net::Peer { name: "node".into(), cert: node.cert.clone() };
    let mut cfg = ferry_net::tls::quic_client_config(me, &peer).unwrap();
    let mut t = quinn::TransportConfig::default();
    tune(&mut t);
    cfg.transport_config(std::sync::Arc::new(t));
    let mut ep = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    ep.set_default_client_config(cfg);
    ep.connect(addr, "ferry-peer").unwrap().await.unwrap()
}

/// Polls `f` every 5 ms until it holds; fails the test, naming `what`,
/// after 20 s (bounded in count and time).
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    for _ in 0..4000 {
        if f() {
            return;
        }
        assert!(std::time::Instant::now() < end, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("gave up waiting for {what}");
}

/// A node on loopback for identity `me` that trusts `peer` under the name
/// `name`, with a 5 s operation timeout.
pub fn loopback_node(me: &ferry_net::Identity, peer: &ferry_net::Identity, name: &str) -> ferry_net::Node {
    let peers = vec![ferry_net::Peer { name: name.into(), cert: peer.cert.clone() }];
    let mut c = ferry_net::NodeConfig::new(me.clone(), peers, SocketAddr::from(([127, 0, 0, 1], 0)));
    c.op_timeout = Duration::from_secs(5);
    ferry_net::Node::start(c).unwrap()
}

/// Host `a` trusting only host `m`, a peer the test plays by hand with
/// [`dial`] (3 s idle timeout, `op_timeout` per operation): the node, its
/// identity and `m`'s.
pub fn host_facing_m(op_timeout: Duration) -> (ferry_net::Node, ferry_net::Identity, ferry_net::Identity) {
    let ia = ferry_net::Identity::generate("a").unwrap();
    let im = ferry_net::Identity::generate("m").unwrap();
    let peers = vec![ferry_net::Peer { name: "m".into(), cert: im.cert.clone() }];
    let mut c = ferry_net::NodeConfig::new(ia.clone(), peers, SocketAddr::from(([127, 0, 0, 1], 0)));
    c.idle_timeout = Duration::from_secs(3);
    c.op_timeout = op_timeout;
    (ferry_net::Node::start(c).unwrap(), ia, im)
}

/// The test peer in `role` run as a second user (uid nobody), with
/// `right` passed to it and its standard input piped (it holds what it
/// has until that input ends).
pub fn spawn_other_user(right: &ferry::SendRight, role: &str, args: &[&str]) -> Child {
    use ferry::spawn::CommandExt;
    peer_command_as(NOBODY, Path::new("/nonexistent"), role, args)
        .pass_right(right)
        .unwrap()
        .stdin(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A port exported as `collect` on node `home`, and a second user (uid
/// nobody) running the test peer in `role` with a right to it looked up
/// through node `via` as `name` (`collect@HOME`): the collecting port, the
/// running peer (its standard input piped), and the right to the peer's
/// own port that it sends first (operation 21).
pub fn other_user_handing_its_port(
    home: &ferry_net::Node,
    via: &ferry_net::Node,
    name: &str,
    role: &str,
    args: &[&str],
) -> (ferry::ReceiveRight, Child, ferry::SendRight) {
    let (mut collect, to_collect) = ferry::port().unwrap();
    home.export("collect", to_collect);
    let other = spawn_other_user(&via.lookup(name).unwrap(), role, args);
    let mut got = collect.recv(ferry::Timeout::After(Duration::from_secs(10))).unwrap();
    assert_eq!(got.op(), 21);
    let Some(ferry::Item::Send(to_other)) = got.take_items().pop() else { panic!("no right from the other user") };
    (collect, other, to_other)
}

/// A memory cgroup made for one test below this process's own (cgroup v1's
/// memory hierarchy, or v2 where this process's cgroup lets children have
/// the memory controller), to see whose memory a page is counted against.
/// Removed on drop (once the processes put in it have exited).
#[allow(dead_code)]
pub struct MemoryCgroup {
    dir: PathBuf,
    usage: &'static str,
}

#[allow(dead_code)]
impl MemoryCgroup {
    /// Makes the cgroup, or says why `test` is skipped and returns `None`
    /// (no writable memory cgroup here).
    pub fn new(test: &str) -> Option<MemoryCgroup> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("ferry-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let v1 = own.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.trim_start_matches('/').to_string()));
        let (parent, usage) = match v1 {
            Some(p) => (Path::new("/sys/fs/cgroup/memory").join(p), "memory.usage_in_bytes"),
            None => match own.lines().find_map(|l| l.strip_prefix("0::")) {
                Some(p) => (Path::new("/sys/fs/cgroup").join(p.trim_start_matches('/')), "memory.current"),
                None => (PathBuf::new(), ""),
            },
        };
        let dir = parent.join(name);
        if std::fs::create_dir(&dir).is_ok() {
            if dir.join(usage).exists() {
                return Some(MemoryCgroup { dir, usage });
            }
            let _ = std::fs::remove_dir(&dir);
        }
        eprintln!("skipped {test}: no memory cgroup can be made below this process's (needs root and the memory controller)");
        None
    }

    /// Moves process `pid` into the cgroup.
    pub fn enter(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).expect("move a process into the test's cgroup");
    }

    /// Bytes of memory counted against the cgroup now.
    pub fn usage(&self) -> u64 {
        std::fs::read_to_string(self.dir.join(self.usage)).unwrap().trim().parse().unwrap()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // A process that has just exited may still be listed a moment.
        for _ in 0..200 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Set in the copy of this test binary that a test counting system calls
/// runs under `strace`: that copy does the work to be counted.
pub const COUNTED_CHILD: &str = "FERRY_TEST_COUNTED_CHILD";

/// Runs test `test` of this binary again under `strace`, tracing `calls`
/// (and `getppid`, which the counted work makes to mark where the counting
/// starts and, if it makes it again, where it ends), with [`COUNTED_CHILD`]
/// set; checks that it passed and printed `done`. Returns the traced calls
/// made between the marks, one line each (a call that blocked once);
/// `None` (said on stderr) where `strace` cannot run or trace.
pub fn counted_calls(test: &str, calls: &str) -> Option<Vec<String>> {
    let log = temp_path(format!("ferry-counted-{}-{test}.strace", std::process::id()));
    let run = Command::new("strace")
        .args(["-f", "-qq", "-e", &format!("trace={calls},getppid"), "-o"])
        .arg(&log)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(COUNTED_CHILD, "1")
        .output();
    let run = match run {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skipped: this test counts system calls with strace, which cannot be run here ({e})");
            return None;
        }
    };
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !run.status.success() && stderr.contains("ptrace") {
        eprintln!("skipped: strace may not trace processes here: {}", stderr.trim());
        return None;
    }
    assert!(run.status.success() && stdout.contains("done"), "the counted work failed:\n{stdout}\n{stderr}");
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let after = text.lines().skip_while(|l| !l.contains("getppid(")).skip(1).take_while(|l| !l.contains("getppid("));
    // One line per call; a call that blocked shows again as resumed.
    Some(after.filter(|l| !l.contains("resumed>")).map(str::to_owned).collect())
}

/// Whether this process is the copy of a test binary that
/// [`counted_calls`] runs: the test then does only the work to be counted.
pub fn counted_child() -> bool {
    std::env::var_os(COUNTED_CHILD).is_some()
}
