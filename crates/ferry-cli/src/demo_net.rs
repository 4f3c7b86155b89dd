//! `ferry demo --net`: ports across machines in one command.
//!
//! Two hosts, `alpha` and `beta`, each a separate process running a ferry
//! network node (`ferry_net::Node`, the heart of `ferry-netd`) on loopback.
//! The demo makes each a fresh certificate, tells each to trust only the
//! other's, and links them with mutually authenticated QUIC. `alpha`
//! exports a service; `beta` looks it up as `greeter@alpha` and sends it a
//! send right to its own inbox, a send-once reply right and a 64 MiB
//! region, which crosses by reference: `alpha` touches three pages and only
//! their clusters cross the link. `alpha` answers through the send-once
//! right, then sends beta's own right back to it, where it arrives as the
//! original port, not a proxy. Every line says which host did what.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use ferry::{Item, Message, RecvError, Region, Timeout};
use ferry_net::node::key_of;
use ferry_net::{Identity, Node, NodeConfig, Peer, RemoteRegion};
use std::os::fd::AsFd;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const HELLO: u32 = 1;
const WELCOME: u32 = 2;
const HOME: u32 = 3;
const BYE: u32 = 4;
const REGION_LEN: usize = 64 << 20;
const WAIT: Timeout = Timeout::After(Duration::from_secs(15));
const PAGE: usize = 4096;

fn say(host: &str, what: impl std::fmt::Display) {
    println!("[host {host:<5} pid {:>6}] {what}", std::process::id());
}

fn byte_at(i: usize) -> u8 {
    (i / PAGE).wrapping_mul(7) as u8 ^ (i as u8)
}

/// Waits (bounded) for a file another process writes.
fn wait_for_file(path: &Path) -> Res<String> {
    let end = Instant::now() + Duration::from_secs(15);
    while Instant::now() < end {
        if let Ok(s) = std::fs::read_to_string(path) {
            if !s.is_empty() {
                return Ok(s);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!("{} never appeared", path.display()).into())
}

fn identity(dir: &Path, host: &str) -> Res<Identity> {
    let cert = std::fs::read_to_string(dir.join(format!("{host}.cert.pem")))?;
    let key = std::fs::read_to_string(dir.join(format!("{host}.key.pem")))?;
    Ok(Identity::from_pem(&cert, &key)?)
}

fn peer(dir: &Path, host: &str) -> Res<Peer> {
    let cert = std::fs::read_to_string(dir.join(format!("{host}.cert.pem")))?;
    Ok(Peer { name: host.into(), cert: ferry_net::tls::parse_cert_pem(&cert)? })
}

fn node(dir: &Path, me: &str, other: &str) -> Res<Node> {
    let mut c = NodeConfig::new(identity(dir, me)?, vec![peer(dir, other)?], "127.0.0.1:0".parse()?);
    c.op_timeout = Duration::from_secs(10);
    Ok(Node::start(c)?)
}

/// Runs the two hosts and prints the summary.
pub fn orchestrate() -> Res {
    let dir: PathBuf = crate::demo::private_temp_dir("ferry-demo-net")?;
    let r = run_hosts(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    r?;
    println!();
    println!("What crossed between the hosts (QUIC, TLS 1.3, each side pinned to the other's certificate):");
    println!("  beta  -> alpha : a send right to beta's inbox (a proxy port on alpha), a send-once reply right,");
    println!("                   and a 64 MiB region by reference (pages fetched from beta when alpha touched them)");
    println!("  alpha -> beta  : a send right to a session port, through the send-once right");
    println!("  alpha -> beta  : beta's own inbox right, which arrived home as the original port");
    Ok(())
}

fn run_hosts(dir: &Path) -> Res {
    for host in ["alpha", "beta"] {
        let id = Identity::generate(host)?;
        let (cert, key) = id.to_pem();
        std::fs::write(dir.join(format!("{host}.cert.pem")), cert)?;
        std::fs::write(dir.join(format!("{host}.key.pem")), key)?;
        say("demo", format_args!("made a certificate for {host}; the other host is told to trust exactly it"));
    }
    let spawn = |role: &str| -> Res<Child> {
        Ok(Command::new(std::env::current_exe()?).args(["demo", "--role", role]).env("FERRY_DEMO_NET_DIR", dir).spawn()?)
    };
    let mut alpha = spawn("net-alpha")?;
    let mut beta = spawn("net-beta")?;
    let (sb, sa) = (wait_bounded(&mut beta)?, wait_bounded(&mut alpha)?);
    if !sa.success() || !sb.success() {
        return Err(format!("a host failed: alpha {sa}, beta {sb}").into());
    }
    Ok(())
}

/// Waits for a host process, killing it after a minute.
fn wait_bounded(c: &mut Child) -> Res<std::process::ExitStatus> {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = c.try_wait()? {
            return Ok(st);
        }
        if Instant::now() > end {
            let _ = c.kill();
            return Ok(c.wait()?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dir() -> Res<PathBuf> {
    Ok(PathBuf::from(std::env::var_os("FERRY_DEMO_NET_DIR").ok_or("FERRY_DEMO_NET_DIR is not set")?))
}

/// Host `alpha`: exports `greeter`, serves one hello.
pub fn alpha() -> Res {
    let (h, dir) = ("alpha", dir()?);
    let node = node(&dir, "alpha", "beta")?;
    let (mut service, to_service) = ferry::port()?;
    node.export("greeter", to_service);
    say(h, format_args!("network node listening on {}; exports \"greeter\" (nothing else is reachable)", node.local_addr()?));
    let tmp = dir.join("alpha.addr.tmp");
    std::fs::write(&tmp, node.local_addr()?.to_string())?;
    std::fs::rename(&tmp, dir.join("alpha.addr"))?;

    let mut hello = service.recv(WAIT)?;
    if hello.op() != HELLO {
        return Err(format!("expected a hello, got op {}", hello.op()).into());
    }
    let mut items = hello.take_items().into_iter();
    let (Some(Item::Send(inbox)), Some(Item::Send(region_right))) = (items.next(), items.next()) else {
        return Err("the hello lacks its rights".into());
    };
    let reply = hello.take_reply().ok_or("the hello has no reply right")?;
    say(h, "<- beta: a send right to beta's inbox (here a proxy port), a send-once reply right, and a region");
    let region = RemoteRegion::open(region_right)?;
    say(h, format_args!("   the region is {} MiB and crossed by reference: nothing of it has moved yet", region.len() >> 20));
    let view = region.map()?;
    let bytes = view.as_slice().ok_or("a copy-mode mapping")?;
    let mut ok = true;
    for at in [0, 17 * PAGE + 5, REGION_LEN - 1] {
        ok &= bytes[at] == byte_at(at);
    }
    let st = node.stats();
    say(h, format_args!(
        "   touched 3 pages: {} KiB fetched from beta in {} fetches, {:.3}% of the region; bytes are beta's: {ok}",
        st.bytes_fetched >> 10,
        st.fetches,
        st.bytes_fetched as f64 * 100.0 / REGION_LEN as f64
    ));
    drop(view);
    drop(region);

    let (mut session, to_session) = ferry::port()?;
    reply.send(Message::new(WELCOME).with_item(to_session), WAIT).map_err(|e| e.into_error())?;
    say(h, "-> beta: a send right to my session port, through the send-once reply right");
    let inbox_copy = inbox.try_clone()?;
    inbox.send(Message::new(HOME).with_item(inbox_copy), WAIT).map_err(|e| e.into_error())?;
    say(h, "-> beta: beta's own inbox right, sent back through it");
    let bye = session.recv(WAIT)?;
    say(h, format_args!("<- beta on the session port: {:?}", String::from_utf8_lossy(bye.body())));
    drop(inbox);
    for l in node.links() {
        say(h, format_args!(
            "link to {}: up {}, {} proxies, {} exports, regions by reference: {} sent, {} still mapped here; {} KiB sent, {} KiB received on the wire",
            l.peer,
            l.up,
            l.imports,
            l.exports,
            l.regions_out,
            l.regions_in,
            l.wire_sent >> 10,
            l.wire_received >> 10
        ));
    }
    match session.recv(WAIT) {
        Err(RecvError::NoSenders) => say(h, "no-senders on my session port: beta let go of its proxy"),
        other => say(h, format_args!("session port: {other:?}")),
    }
    Ok(())
}

/// Host `beta`: links to alpha, says hello with a right and a region.
pub fn beta() -> Res {
    let (h, dir) = ("beta", dir()?);
    let node = node(&dir, "beta", "alpha")?;
    let addr = wait_for_file(&dir.join("alpha.addr"))?.parse()?;
    node.connect("alpha", addr)?;
    say(h, format_args!("linked to alpha at {addr}: each side proved it holds the certificate the other pinned"));
    let greeter = node.lookup("greeter@alpha")?;
    say(h, "looked up \"greeter@alpha\": a send right to a proxy port for alpha's service");

    let (mut inbox, to_inbox) = ferry::port()?;
    let my_key = key_of(to_inbox.as_fd())?;
    let (mut replies, _keep) = ferry::port()?;
    let mut data = Region::new(REGION_LEN)?;
    for (i, b) in data.as_mut_slice().iter_mut().enumerate() {
        *b = byte_at(i);
    }
    let msg = Message::new(HELLO)
        .with_item(to_inbox)
        .with_item(data.by_move()?)
        .with_reply(replies.make_send_once()?);
    greeter.send(msg, WAIT).map_err(|e| e.into_error())?;
    say(h, "-> alpha: hello, with a send right to my inbox, a 64 MiB region by value, and a send-once reply right");

    let mut welcome = replies.recv(WAIT)?;
    let Some(Item::Send(session)) = welcome.take_items().pop() else { return Err("the welcome has no session right".into()) };
    say(h, format_args!("<- alpha: a send right to its session port (arrived via send-once: {})", welcome.via_send_once()));
    let mut home = inbox.recv(WAIT)?;
    let Some(Item::Send(back)) = home.take_items().pop() else { return Err("no right came home".into()) };
    let same = key_of(back.as_fd())? == my_key;
    say(h, format_args!("<- alpha on my inbox: a send right that is my own inbox port again, not a proxy: {same}"));
    drop(back);
    session.send(Message::new(BYE).with_body(*b"thanks, and goodbye"), WAIT).map_err(|e| e.into_error())?;
    say(h, "-> alpha: goodbye on the session port; dropping its right");
    drop(session);
    // Let alpha see the no-senders before the link goes.
    std::thread::sleep(Duration::from_millis(300));
    Ok(())
}
