//! `ferry-netd`: the network server daemon. It links this host's ferry
//! name server to other hosts: names given with `--export` can be looked up
//! by trusted peers, and names given with `--import NAME@HOST` are looked up
//! at the peer and registered here under `NAME@HOST`, as proxy ports;
//! `upkeep` keeps both true while servers, links and the name server
//! restart.
//!
//! It is a process of its own, beside `ferryd`, so the name server stays
//! free of the network stack (tokio, QUIC, TLS) and the part that faces the
//! network can be run, restricted and restarted on its own, as Accent's
//! network server was.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod upkeep;

use clap::Parser;
use ferry::Bootstrap;
use ferry_net::{Identity, Node, NodeConfig, Peer};

/// The ferry network server: links this host's names to trusted hosts over
/// QUIC with mutual TLS.
///
/// Names given with --export can be looked up by trusted peers as NAME@ME
/// (ME: the name they trust this host under); names given with --import
/// NAME@HOST are looked up at HOST and registered here as proxy ports. The
/// local name server is found as every ferry program finds it
/// ($FERRY_BOOTSTRAP). Make this host's
/// certificate and key once with --gen-identity DIR.
#[derive(Debug, Parser)]
#[command(name = "ferry-netd", version, about, long_about)]
struct Args {
    /// This host's cert.pem and key.pem (make them with --gen-identity).
    #[arg(long, value_name = "DIR", required_unless_present = "gen_identity")]
    identity: Option<PathBuf>,
    /// UDP address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7447")]
    listen: SocketAddr,
    /// Trust the peer presenting exactly this certificate, and call it HOST
    /// (repeatable).
    #[arg(long, value_name = "HOST=CERT.pem", value_parser = parse_trust)]
    trust: Vec<(String, PathBuf)>,
    /// Link to trusted peer HOST at ADDR at start (repeatable).
    #[arg(long = "peer", value_name = "HOST=ADDR", value_parser = parse_peer)]
    peers: Vec<(String, SocketAddr)>,
    /// Let trusted peers look up the local name NAME as NAME@ME (ME: the
    /// name they trust this host under; repeatable).
    #[arg(long = "export", value_name = "NAME")]
    exports: Vec<String>,
    /// Look NAME up at HOST and register the proxy here as NAME@HOST
    /// (repeatable).
    #[arg(long = "import", value_name = "NAME@HOST")]
    imports: Vec<String>,
    /// Register the imported names and the status name as system names,
    /// which every user of a system name server (`ferryd --system`) finds;
    /// needs root. Without it they are registered for this daemon's user
    /// alone.
    #[arg(long)]
    system_names: bool,
    /// Close a link after this many milliseconds without traffic.
    #[arg(long = "idle-timeout-ms", value_name = "N", default_value_t = 10_000)]
    idle_timeout_ms: u64,
    /// Write a new identity (cert.pem, and key.pem with mode 0600) into DIR
    /// and exit; an identity already in DIR is kept, and this refused.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["identity", "trust", "peers", "exports", "imports"])]
    gen_identity: Option<PathBuf>,
    /// The host name written into the certificate made by --gen-identity
    /// [default: ferry-host].
    #[arg(long, value_name = "NAME", requires = "gen_identity", conflicts_with = "identity")]
    host_name: Option<String>,
}

/// Splits `HOST=VALUE`, with neither side empty.
fn split_eq(v: &str) -> Result<(String, &str), String> {
    match v.split_once('=') {
        Some((h, rest)) if !h.is_empty() && !rest.is_empty() => Ok((h.to_owned(), rest)),
        _ => Err("expected HOST=VALUE".to_owned()),
    }
}

fn parse_trust(v: &str) -> Result<(String, PathBuf), String> {
    let (h, pem) = split_eq(v)?;
    Ok((h, pem.into()))
}

fn parse_peer(v: &str) -> Result<(String, SocketAddr), String> {
    let (h, addr) = split_eq(v)?;
    let addr = addr.parse().map_err(|e| format!("{addr:?} is not a socket address (IP:PORT): {e}"))?;
    Ok((h, addr))
}

fn gen_identity(dir: &Path, host_name: &str) -> Result<(), String> {
    let id = Identity::generate(host_name).map_err(|e| e.to_string())?;
    let (cert, key) = id.to_pem();
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let at = own_dir(dir)?;
    // Peers pin this host's certificate: an identity already here is
    // kept, never replaced by a second run of the same command.
    for name in ["key.pem", "cert.pem"] {
        if rustix::fs::statat(&at, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok() {
            return Err(format!(
                "{} already holds an identity ({name}), which its peers may trust; remove its cert.pem and key.pem first to make a new one",
                dir.display()
            ));
        }
    }
    write_in(&at, dir, "key.pem", &key, 0o600)?;
    write_in(&at, dir, "cert.pem", &cert, 0o644)?;
    println!("ferry-netd: wrote {0}/cert.pem (give it to peers) and {0}/key.pem", dir.display());
    Ok(())
}

/// Opens `dir` for writing an identity into, if it is a directory (not a
/// symbolic link) of this user or root that neither group nor others may
/// write to. In another user's directory, or one others may write to,
/// that user could have put a file of its own, readable by it, where the
/// private key goes, or a symbolic link to a file only root may write.
fn own_dir(dir: &Path) -> Result<std::os::fd::OwnedFd, String> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("{}: {e} (a symbolic link or not a directory?)", dir.display()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me && st.st_uid != 0 {
        return Err(format!("refusing to write an identity into {}: it is owned by uid {}, not by this user (uid {me}) or root", dir.display(), st.st_uid));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(format!("refusing to write an identity into {}: its mode {:o} lets other users write to it", dir.display(), st.st_mode & 0o7777));
    }
    Ok(fd)
}

/// Writes `text` as the new file `name` in the directory `at` (`dir`),
/// never over a file or through a symbolic link, with exactly the
/// permissions `mode`.
fn write_in(at: &std::os::fd::OwnedFd, dir: &Path, name: &str, text: &str, mode: u32) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Write;
    let path = dir.join(name);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(at, name, flags, Mode::from_raw_mode(mode)).map_err(|e| format!("{}: {e}", path.display()))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::File::from(fd).write_all(text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Raises the soft limit on descriptors to the hard one. Every right the
/// node keeps for a peer, and every proxy it makes, costs descriptors (two
/// or three each); the per-user budgets, not a service manager's default
/// soft limit of 1024, are what users should meet. Whatever the limit,
/// the node refuses what would take it into its last descriptors
/// (`Refusal::Failed`, saying so) rather than lose rights.
fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: lim.maximum, maximum: lim.maximum });
    }
}

fn run(a: Args) -> Result<(), String> {
    if let Some(dir) = &a.gen_identity {
        return gen_identity(dir, a.host_name.as_deref().unwrap_or("ferry-host"));
    }
    if a.system_names && !rustix::process::geteuid().is_root() {
        return Err("--system-names registers system names, which only root may: run ferry-netd as root, or leave the flag out (its names are then its user's)".into());
    }
    let dir = a.identity.as_deref().ok_or("--identity is required")?;
    let identity = |file: &str| {
        read(&dir.join(file)).map_err(|e| format!("{e} (make this host's identity with `ferry-netd --gen-identity {}`)", dir.display()))
    };
    let id = Identity::from_pem(&identity("cert.pem")?, &identity("key.pem")?)?;
    let mut peers = Vec::new();
    for (host, pem) in &a.trust {
        let cert = ferry_net::tls::parse_cert_pem(&read(pem)?).map_err(|e| format!("--trust {host}={}: {e} (give the peer's cert.pem)", pem.display()))?;
        peers.push(Peer { name: host.clone(), cert });
    }
    raise_nofile_limit();
    let mut names = Bootstrap::connect().map_err(|e| format!("local name server: {e}"))?;
    let mut cfg = NodeConfig::new(id, peers, a.listen);
    cfg.idle_timeout = Duration::from_millis(a.idle_timeout_ms);
    let node = std::sync::Arc::new(Node::start(cfg).map_err(|e| e.to_string())?);
    let mut exports = Vec::new();
    for name in &a.exports {
        let right = names.lookup_wait(name, Duration::from_secs(10)).map_err(|e| format!("--export {name}: {e}"))?;
        node.export(name, right.try_clone().map_err(|e| format!("--export {name}: {e}"))?);
        exports.push((name.clone(), right));
    }
    for (host, addr) in &a.peers {
        connect_retrying(&node, host, *addr)?;
    }
    let up = |host: &str| node.links().iter().any(|l| l.peer == host && l.up);
    let mut imports = Vec::new();
    for remote in &a.imports {
        let host = match remote.rsplit_once('@') {
            Some((name, host)) if !name.is_empty() && !host.is_empty() => host,
            _ => return Err(format!("--import {remote}: expected NAME@HOST")),
        };
        if !a.trust.iter().any(|(h, _)| h == host) {
            return Err(format!("--import {remote}: {host} is not a trusted host (add --trust {host}=CERT.pem)"));
        }
        // A host not linked yet (still down, or one that links to this
        // host itself): its names are registered once its link is up
        // (`upkeep`).
        if !up(host) {
            eprintln!("ferry-netd: --import {remote}: {host} is not linked yet; registered once it is");
            imports.push((remote.clone(), None));
            continue;
        }
        let right = node.lookup(remote).map_err(|e| format!("--import {remote}: {e}"))?;
        upkeep::register(&mut names, remote, &right, a.system_names).map_err(|e| format!("--import {remote}: {e}"))?;
        imports.push((remote.clone(), Some(right)));
    }
    // The status port `ferry names` and `ferry stat` ask (see ferry_net::status).
    let (status, to_status) = ferry::port().map_err(|e| e.to_string())?;
    let status_kept = match upkeep::register(&mut names, ferry_net::status::NAME, &to_status, a.system_names) {
        Ok(()) => Some(to_status),
        Err(e) => {
            eprintln!("ferry-netd: cannot register {:?} (ferry names and ferry stat will not show the network): {e}", ferry_net::status::NAME);
            None
        }
    };
    // A lost link is dialled again; once it is back, the upkeep looks the
    // names imported from that host up afresh (their old proxies are dead
    // names, and their registrations went with them).
    let (wake, woken) = std::sync::mpsc::channel();
    let _redial = ferry_net::Redial::start(node.clone(), a.peers.clone(), move |_host| {
        let _ = wake.send(());
    });
    let upkeep = upkeep::Upkeep::new(names, node.clone(), a.system_names, status_kept, exports, imports);
    std::thread::Builder::new().name("ferry-netd-upkeep".into()).spawn(move || upkeep.run(woken)).map_err(|e| e.to_string())?;
    stop_on_signals(node.clone()).map_err(|e| format!("cannot wait for signals: {e}"))?;
    println!("ferry-netd: ready on {}", node.local_addr().map_err(|e| e.to_string())?);
    let mut status = ferry_net::status::Server::new(status).map_err(|e| format!("cannot serve the status port: {e}"))?;
    loop {
        status.serve(&node, &a.imports, ferry::Timeout::Infinite);
        // Nobody can send to the status port any more (its name could not
        // be registered): nothing to serve.
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// How long a stopping daemon waits for its peers to be told its links
/// are closed.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// On SIGTERM, SIGINT or SIGHUP, closes every link (each peer hears "node
/// stopped" and turns its proxies of this host into dead names at once,
/// rather than after the idle timeout) and exits. Its names in the local
/// name server go with the process.
fn stop_on_signals(node: std::sync::Arc<Node>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new().name("ferry-netd-signals".into()).spawn(move || {
        let name = match signals.forever().next() {
            Some(SIGTERM) => "SIGTERM",
            Some(SIGINT) => "SIGINT",
            Some(SIGHUP) => "SIGHUP",
            _ => "a signal",
        };
        eprintln!("ferry-netd: stopping on {name}: closing every link");
        node.close(STOP_WAIT);
        std::process::exit(0);
    })?;
    Ok(())
}

/// The peer may be starting too: try for up to 20 seconds. A peer still
/// unreachable then is no reason to stop: the daemon starts without the
/// link and the redial goes on dialling it. A peer that is not trusted is
/// an error in the daemon's arguments.
fn connect_retrying(node: &Node, host: &str, addr: SocketAddr) -> Result<(), String> {
    let end = Instant::now() + Duration::from_secs(20);
    // Each different failure is said once, not every 200 ms.
    let mut said = String::new();
    loop {
        match node.connect(host, addr) {
            Ok(()) => return Ok(()),
            Err(ferry_net::NetError::UnknownPeer(p)) => return Err(format!("--peer {p}: not trusted (add --trust {p}=CERT.pem)")),
            Err(e) if Instant::now() >= end => {
                eprintln!("ferry-netd: link to {host} at {addr} not up after 20 s ({e}); starting without it, and dialling it in the background");
                return Ok(());
            }
            Err(e) => {
                let why = e.to_string();
                if why != said {
                    eprintln!("ferry-netd: link to {host} at {addr} not up yet: {why}; trying again for up to 20 s");
                    said = why;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

fn main() -> ExitCode {
    // Bad arguments: clap prints the error and the usage, and exits with 2.
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferry-netd: {e}");
            ExitCode::FAILURE
        }
    }
}
