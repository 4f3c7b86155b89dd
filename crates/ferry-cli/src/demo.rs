//! `ferry demo`: ferry's main job in one command.
//!
//! The demo starts an embedded name service, then a server and two clients
//! as separate processes (this same program, re-executed with a hidden
//! role). Client A hands the server a send right to its own inbox and a
//! send-once reply right; the server answers through the send-once right
//! with a send right to a private session port. A's note to B travels
//! through the server carrying a send right to a fresh port of A's, so B can
//! then talk to A directly; the same note carries a 64 MiB region by value,
//! which B maps copy-on-write while A's later writes stay A's own. When the clients exit, the server sees a
//! dead-name notification for each inbox and a no-senders notification for
//! each session port. Every line says which process did what, and which
//! rights crossed which process boundary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::Duration;

use ferry::region::{MapOptions, Region};
use ferry::{Bootstrap, Event, Item, Message, MemberId, PortSet, RecvError, SendRight, Timeout};

const HELLO: u32 = 1;
const WELCOME: u32 = 2;
const NOTE: u32 = 3;
const DIRECT: u32 = 4;
const STOP: u32 = 99;

/// Size of the region client A sends by value through the server to B.
const REGION_LEN: usize = 64 << 20;

/// A checksum of a region's 64-bit words (position-sensitive).
fn checksum(words: &[u64]) -> u64 {
    words.iter().enumerate().fold(0u64, |acc, (i, w)| acc.wrapping_mul(31).wrapping_add(w ^ i as u64))
}

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// `ferry demo`.
#[derive(Debug, clap::Args)]
#[command(long_about = "Runs a server and two clients as separate processes that exchange ports \
through an embedded name service, and narrates what crossed each boundary.")]
pub struct Args {
    /// The part this process plays when the demo re-executes itself.
    #[arg(long, hide = true, value_parser = ["server", "client-a", "client-b", "net-alpha", "net-beta"])]
    role: Option<String>,
    /// Show ports across machines instead: two hosts (network nodes on
    /// loopback, linked with fresh certificates) exchange rights and a
    /// region that crosses by reference.
    #[arg(long)]
    net: bool,
}

/// Runs `ferry demo`, or one of its roles when re-executed.
pub fn main(args: &Args) -> ExitCode {
    let result = match args.role.as_deref() {
        Some("server") => server(),
        Some("client-a") => client_a(),
        Some("client-b") => client_b(),
        #[cfg(feature = "net")]
        Some("net-alpha") => crate::demo_net::alpha(),
        #[cfg(feature = "net")]
        Some("net-beta") => crate::demo_net::beta(),
        Some(other) => Err(format!("unknown demo role {other:?}").into()),
        #[cfg(feature = "net")]
        None if args.net => crate::demo_net::orchestrate(),
        #[cfg(not(feature = "net"))]
        None if args.net => Err("this ferry was built without the `net` feature (which pulls in QUIC and TLS); \
run: cargo run --release -p ferry-cli --features net -- demo --net"
            .into()),
        None => orchestrate(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferry demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn say(role: &str, what: impl std::fmt::Display) {
    println!("[{role:<8} pid {:>6}] {what}", std::process::id());
}

fn spawn_role(path: &Path, role: &str) -> Res<Child> {
    Ok(Command::new(std::env::current_exe()?)
        .args(["demo", "--role", role])
        .env("FERRY_BOOTSTRAP", path)
        .env("FERRY_NO_EMBED", "1")
        .spawn()?)
}

fn wait_ok(mut c: Child, role: &str) -> Res {
    let st = c.wait()?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{role} failed: {st}").into())
    }
}

fn lookup_retry(bs: &mut Bootstrap, name: &str) -> Res<SendRight> {
    for _ in 0..1000 {
        match bs.lookup(name) {
            Ok(r) => return Ok(r),
            Err(ferry::NameError::NotFound) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!("{name} was never registered").into())
}

/// A new directory of this user's alone (mode 0700) in the temporary
/// directory, named `PREFIX-` and random characters (`tempfile`). The
/// temporary directory is shared: another user may have made a name
/// first (a directory of its own, with symbolic links in it to files this
/// user may write), so the name is never one that already exists, and the
/// directory is made here, not reused. The caller removes it.
pub(crate) fn private_temp_dir(prefix: &str) -> std::io::Result<PathBuf> {
    Ok(tempfile::Builder::new().prefix(&format!("{prefix}-")).tempdir()?.keep())
}

fn orchestrate() -> Res {
    let dir: PathBuf = private_temp_dir("ferry-demo")?;
    let path = dir.join("bootstrap");
    ferry::NameServer::bind(&path)?.spawn()?;
    say("demo", format_args!("embedded name service listening at {}", path.display()));
    let server = spawn_role(&path, "server")?;
    let mut bs = Bootstrap::connect_to(&path)?;
    let to_server = lookup_retry(&mut bs, "demo.server")?;
    let b = spawn_role(&path, "client-b")?;
    let a = spawn_role(&path, "client-a")?;
    wait_ok(a, "client A")?;
    wait_ok(b, "client B")?;
    // Give the server a moment to report the notifications, then stop it.
    to_server.send(Message::new(STOP), Timeout::Infinite)?;
    wait_ok(server, "server")?;
    drop(bs);
    let _ = std::fs::remove_dir_all(&dir);
    println!();
    println!("What crossed which boundary:");
    println!("  client A -> server   : send right to A's inbox, send-once reply right (in the header)");
    println!("  server   -> client A : send right to a session port, through the send-once right");
    println!("  client A -> server   : a note carrying a send right to A's direct port");
    println!("  client A -> server   : ... and a 64 MiB region by value: a sealed memfd, not its bytes");
    println!("  server   -> client B : the same note, right and region, forwarded (each crossed two boundaries)");
    println!("  client B -> client A : a message through that right, with no server in between");
    println!("  on exit              : the server saw dead names (inboxes) and no-senders (session ports)");
    Ok(())
}

/// The server: a port set holding its service port and one session port per
/// client, plus dead-name watches on the clients' inboxes.
fn server() -> Res {
    let role = "server";
    let (service_rx, service_tx) = ferry::port()?;
    Bootstrap::connect()?.register("demo.server", &service_tx)?;
    drop(service_tx);
    say(role, "registered a send right to its service port as \"demo.server\"");
    let mut set = PortSet::new()?;
    let service = set.insert(service_rx);
    let mut sessions: HashMap<MemberId, String> = HashMap::new();
    let mut watches: HashMap<MemberId, String> = HashMap::new();
    let mut inboxes: HashMap<String, SendRight> = HashMap::new();
    let mut pending: Vec<(String, Message)> = Vec::new();
    let mut stopping = false;
    loop {
        // Once asked to stop, finish reporting the clients' notifications
        // (bounded, in case a client is stuck) before exiting.
        if stopping && sessions.is_empty() && watches.is_empty() {
            say(role, "stopping");
            return Ok(());
        }
        let wait = if stopping { Timeout::After(Duration::from_secs(5)) } else { Timeout::Infinite };
        let event = match set.wait(wait) {
            Err(RecvError::Timeout) => {
                say(role, "stopping with notifications still outstanding");
                return Ok(());
            }
            other => other?,
        };
        match event {
            Event::Message(id, mut m) if id == service => match m.op() {
                HELLO => {
                    let who = String::from_utf8_lossy(m.body()).into_owned();
                    let cred = m.sender().ok_or("no credentials")?;
                    let reply = m.take_reply().ok_or("hello without a reply right")?;
                    let Some(Item::Send(inbox)) = m.take_items().pop() else { return Err("hello without an inbox".into()) };
                    say(role, format_args!("<- {who} (pid {}, uid {}): send right to its inbox + send-once reply right", cred.pid, cred.uid));
                    watches.insert(set.watch_dead_name(&inbox)?, who.clone());
                    let (session_rx, session_tx) = ferry::port()?;
                    sessions.insert(set.insert(session_rx), who.clone());
                    reply.send(Message::new(WELCOME).with_item(session_tx), Timeout::Infinite)?;
                    say(role, format_args!("-> {who}: send right to a new session port, through the send-once right"));
                    let (ready, wait): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(to, _)| *to == who);
                    pending = wait;
                    for (_, note) in ready {
                        inbox.send(note, Timeout::Infinite)?;
                        say(role, format_args!("-> {who}: forwarded a held note with its send right"));
                    }
                    inboxes.insert(who, inbox);
                }
                STOP => stopping = true,
                op => say(role, format_args!("ignored op {op} on the service port")),
            },
            Event::Message(id, mut m) => {
                let who = sessions.get(&id).cloned().unwrap_or_default();
                if m.op() != NOTE {
                    say(role, format_args!("ignored op {} from {who}", m.op()));
                    continue;
                }
                let to = String::from_utf8_lossy(m.body()).into_owned();
                let items = m.take_items();
                let regions: Vec<usize> = items.iter().filter_map(|i| if let Item::Region(r) = i { Some(r.len()) } else { None }).collect();
                say(role, format_args!(
                    "<- {who}: a note for {to} carrying {} right(s) and {} by-value region(s) of {} MiB, not mapped here",
                    items.len() - regions.len(),
                    regions.len(),
                    regions.iter().sum::<usize>() >> 20
                ));
                let mut note = Message::new(NOTE).with_body(who.clone());
                for it in items {
                    note = note.with_item(it);
                }
                match inboxes.get(&to) {
                    Some(inbox) => {
                        inbox.send(note, Timeout::Infinite)?;
                        say(role, format_args!("-> {to}: forwarded the note, its right and its region, untouched"));
                    }
                    None => {
                        say(role, format_args!("holding the note until {to} says hello"));
                        pending.push((to, note));
                    }
                }
            }
            Event::DeadName(id) => {
                let who = watches.remove(&id).unwrap_or_default();
                inboxes.remove(&who);
                say(role, format_args!("dead-name notification: {who}'s inbox is gone"));
            }
            Event::NoSenders(id) => {
                let who = sessions.remove(&id).unwrap_or_default();
                drop(set.remove(id));
                say(role, format_args!("no-senders notification: nobody can reach {who}'s session port any more"));
            }
            Event::SendOnceDropped(_) => {}
            Event::BadMessage(_, e) => say(role, format_args!("discarded a malformed message: {e}")),
        }
    }
}

/// Says hello to the server, getting a session port through a send-once
/// reply right.
fn hello(role: &str, to_server: &SendRight) -> Res<(ferry::ReceiveRight, SendRight)> {
    let (mut inbox, inbox_tx) = ferry::port()?;
    let reply = inbox.make_send_once()?;
    to_server.send(Message::new(HELLO).with_body(role).with_item(inbox_tx).with_reply(reply), Timeout::Infinite)?;
    say(role, "-> server: hello, with a send right to my inbox and a send-once reply right");
    let mut welcome = inbox.recv(Timeout::Infinite)?;
    let Some(Item::Send(session)) = welcome.take_items().pop() else { return Err("welcome without a session right".into()) };
    say(role, format_args!("<- server: send right to my session port (arrived via send-once: {})", welcome.via_send_once()));
    Ok((inbox, session))
}

fn client_a() -> Res {
    let role = "client-a";
    let mut bs = Bootstrap::connect()?;
    let to_server = lookup_retry(&mut bs, "demo.server")?;
    say(role, "looked up \"demo.server\" and got a send right");
    let (_inbox, session) = hello(role, &to_server)?;
    let (mut direct, direct_tx) = ferry::port()?;
    let mut region = Region::new(REGION_LEN)?;
    for (i, w) in region.as_mut_slice_of::<u64>().iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let sum = checksum(region.as_slice_of::<u64>());
    let before = ferry::counters::snapshot();
    let item = region.by_copy()?;
    session.send(Message::new(NOTE).with_body("client-b").with_item(direct_tx).with_item(item), Timeout::Infinite)?;
    let sent = ferry::counters::snapshot().since(&before);
    say(role, format_args!(
        "-> server: a note for client-b carrying a send right to my direct port and {} MiB by value (sealed memfd; bytes copied: {})",
        REGION_LEN >> 20,
        sent.bytes_copied
    ));
    // By value: what we write now is ours alone.
    region.as_mut_slice_of::<u64>()[0] = u64::MAX;
    say(role, "overwrote the first word of my copy after sending it");
    let m = direct.recv(Timeout::Infinite)?;
    let from = m.sender().ok_or("no credentials")?;
    say(role, format_args!("<- pid {} directly: {:?}", from.pid, String::from_utf8_lossy(m.body())));
    let reported: u64 = String::from_utf8_lossy(m.body()).rsplit(' ').next().and_then(|s| s.parse().ok()).ok_or("no checksum in the reply")?;
    if reported != sum {
        return Err(format!("client-b saw checksum {reported}, the data sent had {sum}").into());
    }
    say(role, "client-b's checksum matches what I sent, not what I wrote afterwards: the region crossed by value");
    match direct.recv(Timeout::Infinite) {
        Err(RecvError::NoSenders) => say(role, "no-senders on my direct port: client-b let go of its right"),
        other => return Err(format!("expected no-senders, got {other:?}").into()),
    }
    Ok(())
}

fn client_b() -> Res {
    let role = "client-b";
    let mut bs = Bootstrap::connect()?;
    let to_server = lookup_retry(&mut bs, "demo.server")?;
    say(role, "looked up \"demo.server\" and got a send right");
    let (mut inbox, _session) = hello(role, &to_server)?;
    let mut note = inbox.recv(Timeout::Infinite)?;
    let from = String::from_utf8_lossy(note.body()).into_owned();
    let mut items = note.take_items().into_iter();
    let (Some(Item::Send(to_a)), Some(Item::Region(region))) = (items.next(), items.next()) else {
        return Err("note without a right and a region".into());
    };
    say(role, format_args!("<- server: a note from {from} with a send right to {from}'s direct port and {} MiB by value", region.len() >> 20));
    let mapped = region.map(MapOptions::lazy())?;
    let sum = checksum(mapped.as_slice_of::<u64>());
    say(role, format_args!("mapped the region copy-on-write and read all of it; first word {}", mapped.as_slice_of::<u64>()[0]));
    to_a.send(Message::new(DIRECT).with_body(format!("hello from client-b, no server in between; checksum {sum}")), Timeout::Infinite)?;
    say(role, format_args!("-> {from} directly, through the right that crossed two boundaries"));
    Ok(())
}
