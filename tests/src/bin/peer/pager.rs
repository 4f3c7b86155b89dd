//! Peer roles for the pager tests.
//!
//! - `pager-serve NAME KEY=VALUE...`: hosts one object (id 1) and registers
//!   the server's port under NAME; prints `ready` and serves until killed.
//!   Keys: `pages=N` (size in pages, default 64), `extra=N` (bytes past the
//!   last whole page), `cluster=N`, `mode=copy|zerocopy`,
//!   `policy=sigbus|zero`, `holes=1` (odd pages are unavailable: zeros),
//!   `empty=1` (with `holes=1`: the pager says so before a buffer is
//!   prepared, and would supply 0xEE bytes if asked for such a page anyway),
//!   `hang=P` (the pager never answers for page P: it stops answering),
//!   `dirty=1` (track dirty pages; returned pages become the object's).
//! - `file-serve NAME ROOT`: a file server for the files beneath ROOT
//!   (cluster 4), registered under NAME; prints `ready` and serves.
//! - `pager-unprivileged`: drops to uid/gid 65534 (while still one thread),
//!   then serves and maps an object inside this process and prints what
//!   the kernel allowed.
//! - `pager-client NAME ID PAGE...`: maps object ID, prints `page P sum S`
//!   for each page touched, and exits (detaching by dying).
//! - `pager-churn NAME ID N`: maps object ID, touches it and unmaps it N
//!   times; prints how many descriptors and threads it gained.
//! - `pager-outlive NAME ID TOUCH`: maps object ID, touches page 0, prints
//!   `touching TOUCH`, touches page TOUCH (which may wait on a hung pager),
//!   prints the byte read and the object's state, then waits for the pager
//!   to end and prints `state=...`, then touches the last page.
//! - `pager-clean-flood PAGES [first-only]`: a hand-made pager of one
//!   object (id 1, PAGES pages, supplied by copy, dirty pages tracked)
//!   that sends a send right to its port through the inherited right
//!   (op 21), answers one open and one attach (filling every page at
//!   once, or with `first-only` the first page only and never another),
//!   then sends
//!   `CLEAN` for every page on the mapping's lifeline until it is full,
//!   waits until the pages sent back stop piling up in its port, says
//!   `flooded N queued B` (the `CLEAN` messages sent, the bytes waiting
//!   at its port), and never reads its port again; it holds everything
//!   until its standard input ends.

use std::io::Write;
use std::time::Duration;

use ferry::pager::{DeathPolicy, MemoryObject, ObjectConfig, ObjectServer, Offset, Pager, PagerFault, Supply, SupplyMode};
use ferry::{Bootstrap, Timeout};

use crate::Outcome;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "pager-serve" => Some(serve(args)),
        "pager-client" => Some(client(args)),
        "pager-outlive" => Some(outlive(args)),
        "pager-churn" => Some(churn(args)),
        "file-serve" => Some(file_serve(args)),
        "pager-unprivileged" => Some(unprivileged()),
        "pager-clean-flood" => Some(clean_flood(args)),
        _ => None,
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

/// The test pattern: byte at offset `i` is `(i / 4096 + i) % 251`.
pub fn pattern(at: usize) -> u8 {
    ((at / 4096 + at) % 251) as u8
}

struct TestPager {
    holes: bool,
    /// Declare the holes with `data_unavailable`.
    empty: bool,
    hang: Option<u64>,
    /// Pages clients returned (dirty tracking): served from here after.
    returned: std::collections::HashMap<u64, Vec<u8>>,
}

impl Pager for TestPager {
    fn data_request(&mut self, offset: Offset, buf: &mut [u8]) -> Result<Supply, PagerFault> {
        let page = 4096u64;
        if let Some(h) = self.hang {
            if (offset..offset + buf.len() as u64).contains(&(h * page)) {
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
        }
        for (i, chunk) in buf.chunks_mut(page as usize).enumerate() {
            if let Some(r) = self.returned.get(&(offset + i as u64 * page)) {
                chunk.copy_from_slice(&r[..chunk.len()]);
            } else {
                fill_pattern(offset + i as u64 * page, chunk);
            }
        }
        if !self.holes && !self.returned.is_empty() {
            return Ok(Supply::Provided);
        }
        if self.holes && (offset / page) % 2 == 1 {
            if self.empty {
                // Declared empty: never asked for, so a client that sees
                // these bytes shows the declaration was ignored.
                buf.fill(0xEE);
                return Ok(Supply::Provided);
            }
            return Ok(Supply::Unavailable);
        }
        fill_pattern(offset, buf);
        Ok(Supply::Provided)
    }

    fn data_unavailable(&mut self, offset: Offset, len: usize) -> bool {
        let page = 4096u64;
        self.empty && self.holes && (offset / page..(offset + len as u64).div_ceil(page)).all(|p| p % 2 == 1)
    }

    fn data_return(&mut self, offset: Offset, data: &[u8]) {
        self.returned.insert(offset, data.to_vec());
    }
}

fn fill_pattern(offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(offset as usize + i);
    }
}

fn serve(args: &[String]) -> Res {
    let name = args.first().ok_or("usage: pager-serve NAME KEY=VALUE...")?;
    let mut pages = 64u64;
    let mut extra = 0u64;
    let mut config = ObjectConfig::default();
    let mut pager = TestPager { holes: false, empty: false, hang: None, returned: Default::default() };
    for kv in &args[1..] {
        let (k, v) = kv.split_once('=').ok_or("KEY=VALUE")?;
        match k {
            "pages" => pages = v.parse()?,
            "extra" => extra = v.parse()?,
            "cluster" => config.cluster = v.parse()?,
            "mode" => config.mode = if v == "zerocopy" { SupplyMode::ZeroCopy } else { SupplyMode::Copy },
            "policy" => config.on_death = if v == "zero" { DeathPolicy::ZeroFill } else { DeathPolicy::Sigbus },
            "holes" => pager.holes = v == "1",
            "empty" => pager.empty = v == "1",
            "hang" => pager.hang = Some(v.parse()?),
            "dirty" => config.track_dirty = v == "1",
            _ => return Err(format!("unknown key {k}").into()),
        }
    }
    let (mut server, right) = ObjectServer::new()?;
    let id = server.add_object(pages * 4096 + extra, Box::new(pager), config)?;
    let mut bs = Bootstrap::connect()?;
    bs.register(name, &right)?;
    println!("ready id={id}");
    std::io::stdout().flush()?;
    loop {
        server.serve(Timeout::Infinite)?;
    }
}

fn open(args: &[String]) -> Result<(MemoryObject, Vec<usize>), Box<dyn std::error::Error>> {
    let name = args.first().ok_or("NAME")?;
    let id: u64 = args.get(1).ok_or("ID")?.parse()?;
    let right = Bootstrap::connect()?.lookup(name)?;
    let rest = args[2..].iter().map(|a| a.parse()).collect::<Result<Vec<usize>, _>>()?;
    Ok((MemoryObject::new(right, id), rest))
}

/// One byte of a mapped object, copied out (in any supply mode); touching
/// it faults the page in as any read does.
fn byte(m: &ferry::pager::MappedObject, at: usize) -> Result<u8, Box<dyn std::error::Error>> {
    let mut b = [0u8];
    if !m.read_at(at, &mut b) {
        return Err(format!("offset {at} outside the object").into());
    }
    Ok(b[0])
}

fn client(args: &[String]) -> Res {
    let (obj, pages) = open(args)?;
    let m = obj.map()?;
    for p in pages {
        let mut page = vec![0u8; 4096.min(m.len().saturating_sub(p * 4096))];
        if !m.read_at(p * 4096, &mut page) {
            return Err(format!("page {p} outside the object").into());
        }
        let sum: u64 = page.iter().map(|&b| b as u64).sum();
        println!("page {p} sum {sum}");
    }
    std::io::stdout().flush()?;
    std::mem::forget(m);
    Ok(())
}

fn outlive(args: &[String]) -> Res {
    let (obj, touch) = open(args)?;
    let t = *touch.first().ok_or("TOUCH")?;
    let m = obj.map()?;
    let first = byte(&m, 0)?;
    println!("first {first}");
    println!("touching {t}");
    std::io::stdout().flush()?;
    let v = byte(&m, t * 4096 + 1)?;
    println!("value {v} state {:?}", m.state());
    std::io::stdout().flush()?;
    let st = m.wait_until_ended(Duration::from_secs(60));
    println!("state={st:?}");
    std::io::stdout().flush()?;
    let last = byte(&m, m.len() - 1)?;
    println!("last {last}");
    Ok(())
}

fn file_serve(args: &[String]) -> Res {
    let (Some(name), Some(root)) = (args.first(), args.get(1)) else { return Err("usage: file-serve NAME ROOT".into()) };
    let config = ObjectConfig { cluster: 4, ..ObjectConfig::default() };
    let (mut server, right) = ferry::fileserver::FileServer::new(std::path::Path::new(root), config)?;
    Bootstrap::connect()?.register(name, &right)?;
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        server.serve(Timeout::Infinite)?;
    }
}

fn unprivileged() -> Res {
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    use rustix::process::{Gid, Uid};
    let (g, u) = (Gid::from_raw(65534), Uid::from_raw(65534));
    set_thread_groups(&[])?;
    set_thread_res_gid(g, g, g)?;
    set_thread_res_uid(u, u, u)?;
    let support = ferry::pager::probe()?;
    println!("full={} poison={}", support.full_handling, support.poison);
    let (mut server, right) = ObjectServer::new()?;
    let config = ObjectConfig { cluster: 1, ..ObjectConfig::default() };
    let id = server.add_object(8 * 4096, Box::new(TestPager { holes: false, empty: false, hang: None, returned: Default::default() }), config)?;
    std::thread::spawn(move || loop {
        if server.serve(Timeout::Infinite).is_err() {
            return;
        }
    });
    let m = MemoryObject::new(right, id).map()?;
    println!("user_mode_only={} byte={}", m.user_mode_only(), byte(&m, 4096 + 3)? == pattern(4096 + 3));
    // A system call reading a page never touched cannot wait for the pager
    // under user-mode-only handling: it fails with EFAULT.
    let sink = rustix::fs::memfd_create("sink", rustix::fs::MemfdFlags::CLOEXEC)?;
    let s = m.as_slice().ok_or("the object is supplied by copy")?;
    let r = rustix::io::write(&sink, &s[5 * 4096..6 * 4096]);
    println!("syscall={r:?}");
    Ok(())
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn churn(args: &[String]) -> Res {
    let (obj, n) = open(args)?;
    let n = *n.first().ok_or("N")?;
    // ferry's one long-lived descriptor (its published counters) is not churn.
    ferry::counters::publish();
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));
    for i in 0..n {
        let m = obj.map()?;
        let at = (i * 4096 + 7) % m.len();
        if byte(&m, at)? != pattern(at) {
            return Err(format!("wrong byte at {at}").into());
        }
    }
    println!("fds +{} threads +{}", count("/proc/self/fd") - fds, count("/proc/self/task") - threads);
    Ok(())
}

/// See the module's documentation (`pager-clean-flood`). The operations
/// are the object protocol's (`ferry::pager`), written by hand as a
/// hostile pager would.
fn clean_flood(args: &[String]) -> Res {
    const OPEN: u32 = 0x7061_0001;
    const OPENED: u32 = 0x7061_0002;
    const ATTACH: u32 = 0x7061_0003;
    const ATTACHED: u32 = 0x7061_0004;
    const CLEAN: u32 = 0x7061_000b;
    let pages: u64 = args.first().ok_or("usage: pager-clean-flood PAGES")?.parse()?;
    let words = |w: &[u64]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let t = Timeout::After(Duration::from_secs(10));
    let to = ferry::spawn::inherited()?;
    let (mut port, tx) = ferry::port()?;
    let depth = tx.try_clone()?;
    to.send(ferry::Message::new(21).with_item(tx), t)?;
    let mut open = port.recv(t)?;
    if open.op() != OPEN {
        return Err(format!("expected an open, got {:#x}", open.op()).into());
    }
    // Size, supply by copy, (unused), death policy SIGBUS, dirty tracking.
    let opened = ferry::Message::new(OPENED).with_body(words(&[pages * 4096, 0, 0, 0, 1]));
    open.take_reply().ok_or("no reply right")?.send(opened, t)?;
    let mut attach = port.recv(t)?;
    if attach.op() != ATTACH {
        return Err(format!("expected an attach, got {:#x}", attach.op()).into());
    }
    let reply = attach.take_reply().ok_or("no reply right")?;
    let mut uffd = None;
    let mut lifeline = None;
    for item in attach.take_items() {
        match item {
            ferry::Item::Pager(p) => uffd = Some(p),
            ferry::Item::Send(s) => lifeline = Some(s),
            _ => {}
        }
    }
    let (uffd, lifeline) = (uffd.ok_or("no userfaultfd")?, lifeline.ok_or("no lifeline")?);
    let filled = if args.get(1).is_some_and(|a| a == "first-only") { 1 } else { pages };
    uffd.fill(0, &vec![7u8; filled as usize * 4096])?;
    reply.send(ferry::Message::new(ATTACHED), t)?;
    let mut clean = vec![1u64];
    clean.extend(0..pages);
    let mut sent = 0;
    while sent < 100_000 && lifeline.send(ferry::Message::new(CLEAN).with_body(words(&clean)), Timeout::Zero).is_ok() {
        sent += 1;
    }
    // What the client sends back piles up unread: wait (within bounds)
    // until it stops growing, the client then waiting for room.
    let mut queued = depth.queued_bytes()?;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(200));
        let now = depth.queued_bytes()?;
        if now == queued && now > 0 {
            break;
        }
        queued = now;
    }
    println!("flooded {sent} queued {queued}");
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())?;
    drop((port, uffd, lifeline));
    Ok(())
}
