//! `ferry-netd`: the network server daemon. It links this host's ferry
//! name server to other hosts: names given with `--export` can be looked up
//! by trusted peers, and names given with `--import NAME@HOST` are looked up
//! at the peer and registered here under `NAME@HOST`, as proxy ports.
//!
//! It is a process of its own, beside `ferryd`, so the name server stays
//! free of the network stack (tokio, QUIC, TLS) and the part that faces the
//! network can be run, restricted and restarted on its own, as Accent's
//! network server was.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ferry::Bootstrap;
use ferry_net::{Identity, Node, NodeConfig, Peer};

const USAGE: &str = "usage: ferry-netd --identity DIR --listen ADDR [--trust HOST=CERT.pem]... [--peer HOST=ADDR]...
                  [--export NAME]... [--import NAME@HOST]... [--idle-timeout-ms N]
       ferry-netd --gen-identity DIR [--host-name NAME]

  --identity DIR      this host's cert.pem and key.pem (make them with --gen-identity)
  --listen ADDR       UDP address to listen on, e.g. 0.0.0.0:7447
  --trust HOST=PEM    trust the peer presenting exactly this certificate, and call it HOST
  --peer HOST=ADDR    link to trusted peer HOST at ADDR at start
  --export NAME       let trusted peers look up the local name NAME as NAME@<this host>
  --import NAME@HOST  look NAME up at HOST and register the proxy here as NAME@HOST
The local name server is found as every ferry program finds it ($FERRY_BOOTSTRAP).";

struct Args {
    identity: PathBuf,
    listen: SocketAddr,
    trust: Vec<(String, PathBuf)>,
    peers: Vec<(String, SocketAddr)>,
    exports: Vec<String>,
    imports: Vec<String>,
    idle: Duration,
}

fn split_eq(v: &str) -> Result<(String, String), String> {
    v.split_once('=').map(|(a, b)| (a.to_owned(), b.to_owned())).ok_or_else(|| format!("{v:?}: expected HOST=VALUE"))
}

fn parse() -> Result<Option<Args>, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        identity: PathBuf::new(),
        listen: "0.0.0.0:7447".parse().unwrap(),
        trust: vec![],
        peers: vec![],
        exports: vec![],
        imports: vec![],
        idle: Duration::from_secs(10),
    };
    let mut gen: Option<(PathBuf, String)> = None;
    let mut host_name = "ferry-host".to_owned();
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--identity" => a.identity = val()?.into(),
            "--listen" => a.listen = val()?.parse().map_err(|e| format!("--listen: {e}"))?,
            "--trust" => {
                let (h, p) = split_eq(&val()?)?;
                a.trust.push((h, p.into()));
            }
            "--peer" => {
                let (h, p) = split_eq(&val()?)?;
                a.peers.push((h, p.parse().map_err(|e| format!("--peer: {e}"))?));
            }
            "--export" => a.exports.push(val()?),
            "--import" => a.imports.push(val()?),
            "--idle-timeout-ms" => a.idle = Duration::from_millis(val()?.parse().map_err(|e| format!("--idle-timeout-ms: {e}"))?),
            "--gen-identity" => gen = Some((val()?.into(), String::new())),
            "--host-name" => host_name = val()?,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if let Some((dir, _)) = gen {
        let id = Identity::generate(&host_name).map_err(|e| e.to_string())?;
        let (cert, key) = id.to_pem();
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        write_private(&dir.join("key.pem"), &key)?;
        std::fs::write(dir.join("cert.pem"), cert).map_err(|e| e.to_string())?;
        println!("ferry-netd: wrote {0}/cert.pem (give it to peers) and {0}/key.pem", dir.display());
        return Ok(None);
    }
    if a.identity.as_os_str().is_empty() {
        return Err(format!("--identity is required\n{USAGE}"));
    }
    Ok(Some(a))
}

fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes()).map_err(|e| e.to_string())
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(a: Args) -> Result<(), String> {
    let id = Identity::from_pem(&read(&a.identity.join("cert.pem"))?, &read(&a.identity.join("key.pem"))?)?;
    let mut peers = Vec::new();
    for (host, pem) in &a.trust {
        peers.push(Peer { name: host.clone(), cert: ferry_net::tls::parse_cert_pem(&read(pem)?)? });
    }
    let mut names = Bootstrap::connect().map_err(|e| format!("local name server: {e}"))?;
    let mut cfg = NodeConfig::new(id, peers, a.listen);
    cfg.idle_timeout = a.idle;
    let node = Node::start(cfg).map_err(|e| e.to_string())?;
    for name in &a.exports {
        let right = names.lookup_wait(name, Duration::from_secs(10)).map_err(|e| format!("--export {name}: {e}"))?;
        node.export(name, right);
    }
    for (host, addr) in &a.peers {
        connect_retrying(&node, host, *addr)?;
    }
    for remote in &a.imports {
        let right = node.lookup(remote).map_err(|e| format!("--import {remote}: {e}"))?;
        names.register(remote, &right).map_err(|e| format!("--import {remote}: {e}"))?;
    }
    // The status port `ferry names` and `ferry stat` ask (see ferry_net::status).
    let (mut status, to_status) = ferry::port().map_err(|e| e.to_string())?;
    if let Err(e) = names.register(ferry_net::status::NAME, &to_status) {
        eprintln!("ferry-netd: cannot register {:?} (ferry names and ferry stat will not show the network): {e}", ferry_net::status::NAME);
    }
    println!("ferry-netd: ready on {}", node.local_addr().map_err(|e| e.to_string())?);
    loop {
        ferry_net::status::serve(&node, &a.imports, &mut status, ferry::Timeout::Infinite);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The peer may be starting too: try for up to 20 seconds.
fn connect_retrying(node: &Node, host: &str, addr: SocketAddr) -> Result<(), String> {
    let end = Instant::now() + Duration::from_secs(20);
    for _ in 0..100 {
        match node.connect(host, addr) {
            Ok(()) => return Ok(()),
            Err(ferry_net::NetError::UnknownPeer(p)) => return Err(format!("--peer {p}: not trusted (add --trust {p}=CERT.pem)")),
            Err(e) if Instant::now() >= end => return Err(format!("--peer {host}={addr}: {e}")),
            Err(e) => {
                eprintln!("ferry-netd: link to {host} at {addr} not up yet: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    Err(format!("--peer {host}={addr}: gave up"))
}

fn main() -> ExitCode {
    match parse() {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(a)) => match run(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ferry-netd: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("ferry-netd: {e}");
            ExitCode::from(2)
        }
    }
}
