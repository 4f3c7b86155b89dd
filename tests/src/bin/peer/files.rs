//! Peer roles for the file-server tests: another local user probing and
//! loading a file server that root runs (the test runs these as uid
//! `nobody`). Each finds the server as the system name `files`.
//!
//! - `files-open NAME...`: opens each file and prints `NAME ok LEN SUM` or
//!   `NAME err KIND` (the [`PagerError`] variant).
//! - `files-write NAME DATA`: writes DATA over NAME; prints `ok` or
//!   `err KIND`.
//! - `files-steal ID...`: for each object id, tries to map it, read its
//!   counters and copy it, and prints `ID map KIND stats KIND copy KIND`
//!   (`ok` for a success).
//! - `files-churn PREFIX N`: opens `PREFIX0` .. `PREFIX{N-1}`, reads each
//!   and lets it go; prints `opened N`.
//! - `files-hoard NAME N`: sends N opens of NAME and never maps them,
//!   keeping the hold right of each open granted; prints `granted G
//!   over-budget B other O`, then waits to be killed.
//! - `files-park NAME N`: as `files-hoard`, but parks each granted
//!   hold's receiving socket in flight inside the queue of the hold socket
//!   the server keeps (`names::port_parked`); prints `parked G over-budget
//!   B other O` and exits, leaving no process that holds a hold.
//! - `files-self-hold HOW NAME N`: opens NAME N times, each hold right
//!   leading back into the server's process: with HOW `server` a send
//!   right to the server itself (a lookup of `files` of its own); with
//!   `name` the receiving socket of a port whose send right it registered
//!   with the name server, sent by hand as a send right; with `system`
//!   a send right to the port another user registered as the system name
//!   `long-lived` (a lookup of its own). Prints `held G over-budget B
//!   other O` and exits, leaving no process that holds a hold.
//! - `files-sabotage`: looks `files` up and acts on its right's socket
//!   as only the kernel stops it: shrinks its send buffer, sets
//!   `O_NONBLOCK`, shuts it down; prints `done`.
//! - `files-lookups N`: looks `files` up N times, keeping every right,
//!   until refused; prints `looked-up K stopped: ERROR`, then `ready`, and
//!   waits to be killed.
//! - `files-keep NAME N`: opens NAME N times and maps each snapshot's
//!   object through the pager too, keeping every snapshot and mapping;
//!   prints `mapped M over-budget B other O`, then waits to be killed.
//! - `files-hold NAME...`: opens each NAME and reads it whole, keeping
//!   every snapshot; prints `NAME ok LEN SUM` or `NAME err KIND` for each,
//!   then `ready`, and waits to be killed.
//! - `files-reach PID FD...`: tries to open `/proc/PID/fd/FD` for reading
//!   and for writing, and to read `/proc/PID/maps`; prints `FD read KIND
//!   write KIND` for each and `maps KIND` (`ok`, or `denied` for any
//!   error).
//! - `files-block NAME READ_OWN`: opens NAME, maps its object through the
//!   pager, clears `O_NONBLOCK` on that mapping's userfaultfd (whose open
//!   file description the server shares), touches page 0; with READ_OWN=1
//!   a thread also reads the userfaultfd's events itself. Prints `ready`
//!   and waits to be killed.
//! - `files-plant NAME PATH`: opens NAME, its own file PATH, while it
//!   writes the file's last page in place every 0.5 ms, watching the
//!   server's reads of the file (inotify): once two copies are read, it
//!   stops, writes the first page once, behind the third copy, and leaves
//!   the file alone. Keeps the snapshot; prints `planted` (or `missed`
//!   when the server read fewer than two copies) and waits to be killed.
//! - `files-giveaway DIR N`: in DIR, a directory of its own at `DIR`'s
//!   name in the served root, makes `mine/` and a link `link` that it
//!   swaps, as fast as it can, between `../pub` (where root's file `w`,
//!   mode 0666, is) and `mine`; writes `link/w` back N times, and after
//!   each looks for a file in `mine` that is not its own. Prints
//!   `written W given G denied D missing M` (G: such files found, it
//!   stops at the first; D: write-backs refused as denied, as in `pub`,
//!   which it may not write; M: the others, as for `mine/w`, which does
//!   not exist).
//! - `files-flood-ports N`: looks `files` up N times (a port of its own
//!   each, until refused), fills every port's queue with requests the
//!   server refuses unanswered (an open of an object that does not
//!   exist, no reply wanted); prints `filled P ports with M requests` and
//!   `ready`, and goes on filling them again until killed.
//! - `files-link-new NAME DIR MINE N`: watches DIR (where NAME, a name
//!   in the served tree, is) for new names (inotify) and hard-links each
//!   name the server makes there for new contents into MINE, a directory
//!   of its own, as soon as it appears, while it writes NAME back N
//!   times. Prints `written W refused R linked L given G` (G: the files in
//!   MINE that are not its own).
//! - `files-acl-new NAME DIR N`: as `files-link-new`, but gives each
//!   name the server makes in DIR an access ACL granting its own uid
//!   read and write as soon as it appears; then tries to read the file
//!   in DIR named as NAME ends itself. Prints `written W refused R
//!   acl A read ok` (or `read denied`).
//! - `files-open-new NAME DIR N`: as `files-link-new`, but opens each
//!   name the server makes in DIR for reading as soon as it appears and
//!   keeps what it opened; prints `written W refused R opened O` and
//!   `ready`, and once a line comes on its standard input prints `read
//!   K`: how many of those it can read `secret` through.
//! - `files-refault NAME THREADS`: opens NAME, maps its snapshot through
//!   the pager, and has THREADS threads each read a page of its own of
//!   it and drop the page again (`MADV_DONTNEED`), over and over, so
//!   that the server always has another fault of this client to serve;
//!   prints `ready` once every thread has faulted, and goes on until
//!   killed.
//! - `files-flood THREADS`: looks `files` up and has THREADS threads
//!   send requests on that right (of an operation the server does not
//!   know, no reply wanted)
//!   as fast as its queue takes them; prints `ready` once every thread
//!   has sent, and goes on until killed.
//! - `files-pin NAME N`: opens NAME N times by hand, each time keeping
//!   the reply (and so the version's memory it carries) and letting the
//!   snapshot go with its hold right; prints `kept K lazy L other O`
//!   (replies with memory, replies without, refusals), then waits to be
//!   killed.

use std::io::Write;
use std::time::Duration;

use ferry::fileserver::{FileClient, OP_FILE_OPEN, OP_FILE_OPENED};
use ferry::pager::{MemoryObject, PagerError};
use ferry::{Bootstrap, Item, Message, Timeout};

use crate::Outcome;

type Res = Result<(), Box<dyn std::error::Error>>;

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "files-open" => Some(open(args)),
        "files-write" => Some(write(args)),
        "files-steal" => Some(steal(args)),
        "files-churn" => Some(churn(args)),
        "files-hoard" => Some(hoard(args)),
        "files-park" => Some(park(args)),
        "files-self-hold" => Some(self_hold(args)),
        "files-sabotage" => Some(sabotage()),
        "files-lookups" => Some(lookups(args)),
        "files-busy-lookups" => Some(busy_lookups(args)),
        "files-block" => Some(block(args)),
        "files-keep" => Some(keep(args)),
        "files-hold" => Some(hold_files(args)),
        "files-reach" => Some(reach(args)),
        "files-squat" => Some(squat(args)),
        "files-attach-raw" => Some(attach_raw(args)),
        "files-serve-here" => Some(serve_here(args)),
        "files-race" => Some(race(args)),
        "files-plant" => Some(plant(args)),
        "files-pin" => Some(pin(args)),
        "files-refault" => Some(refault(args)),
        "files-flood" => Some(flood_requests(args)),
        "files-flood-ports" => Some(flood_ports(args)),
        "files-link-new" => Some(link_new(args)),
        "files-acl-new" => Some(acl_new(args)),
        "files-open-new" => Some(open_new(args)),
        "files-giveaway" => Some(giveaway(args)),
        _ => None,
    }
}

fn server() -> Result<ferry::SendRight, Box<dyn std::error::Error>> {
    Ok(Bootstrap::connect()?.lookup("files")?)
}

fn client() -> Result<FileClient, Box<dyn std::error::Error>> {
    Ok(FileClient::new(server()?).with_timeout(WAIT))
}

/// The variant of an error, as the tests compare it.
fn kind<T>(r: &Result<T, PagerError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(PagerError::PagerDead) => "PagerDead",
        Err(PagerError::NoSuchObject(_)) => "NoSuchObject",
        Err(PagerError::BadRequest(_)) => "BadRequest",
        Err(PagerError::Timeout) => "Timeout",
        Err(PagerError::Denied(_)) => "Denied",
        Err(PagerError::Unsupported(_)) => "Unsupported",
        Err(PagerError::OverBudget(_)) => "OverBudget",
        Err(_) => "Other",
    }
}

fn open(args: &[String]) -> Res {
    let fs = client()?;
    for name in args {
        let r = fs.open(name);
        match &r {
            Ok(s) => {
                let sum: u64 = s.as_slice().iter().map(|&b| b as u64).sum();
                println!("{name} ok {} {sum}", s.as_slice().len());
            }
            Err(e) => {
                eprintln!("files-open {name}: {e}");
                println!("{name} err {}", kind(&r));
            }
        }
    }
    Ok(())
}

fn write(args: &[String]) -> Res {
    let [name, data] = args else { return Err("usage: files-write NAME DATA".into()) };
    let r = client()?.write(name, data.as_bytes());
    match kind(&r) {
        "ok" => println!("ok"),
        k => println!("err {k}"),
    }
    Ok(())
}

/// `files-squat PREFIX N`: creates the empty files PREFIX0 to PREFIX(N-1)
/// (names another user's write-back might want); prints how many.
fn squat(args: &[String]) -> Res {
    let [prefix, n] = args else { return Err("usage: files-squat PREFIX N".into()) };
    let mut made = 0;
    for i in 0..n.parse::<u64>()? {
        if std::fs::OpenOptions::new().write(true).create_new(true).open(format!("{prefix}{i}")).is_ok() {
            made += 1;
        }
    }
    println!("{made}");
    Ok(())
}

/// `files-attach-raw NAME N`: opens NAME, then attaches a mapping of the
/// whole snapshot N times by hand: a userfaultfd that registers nothing
/// (this process maps nothing) and a range as long as the file, the
/// server's only check. Prints `attached K other M`, then keeps everything
/// until killed.
fn attach_raw(args: &[String]) -> Res {
    use ferry::wire::{self, ItemDesc};
    use std::mem::MaybeUninit;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    /// The memory-object protocol's attach, its answer, and the pager
    /// item's userfaultfd mode, as a client writes them by hand.
    const ATTACH: u32 = 0x7061_0003;
    const ATTACHED: u32 = 0x7061_0004;
    const FD_USERFAULT: u8 = 1;
    let [name, n] = args else { return Err("usage: files-attach-raw NAME N".into()) };
    let n: usize = n.parse()?;
    let right = server()?;
    let (mut replies, _keep) = ferry::port()?;
    let (hold, hold_right) = ferry::port()?;
    let once = replies.make_send_once()?;
    right.send(Message::new(OP_FILE_OPEN).with_body(name.as_bytes()).with_item(Item::Send(hold_right)).with_reply(once), WAIT)?;
    let r = replies.recv(WAIT)?;
    if r.op() != OP_FILE_OPENED {
        return Err(format!("open refused: {:?}", String::from_utf8_lossy(r.body())).into());
    }
    let word = |i: usize| u64::from_le_bytes(r.body()[i * 8..i * 8 + 8].try_into().expect("eight bytes"));
    let (id, size) = (word(0), word(1));
    let len = size.div_ceil(4096) * 4096;
    let (mut attached, mut other, mut kept) = (0, 0, vec![hold]);
    let mut uffds = Vec::new();
    for _ in 0..n {
        // SAFETY: a system call that returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | 1) } as i32;
        if fd < 0 {
            return Err(format!("userfaultfd: {}", std::io::Error::last_os_error()).into());
        }
        // SAFETY: the descriptor was just returned to us and is owned by nothing else.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd) };
        // The API handshake (UFFDIO_API), so that the descriptor is a
        // working one the server watches, not one it drops at once.
        let mut api = [0xAAu64, 0, 0];
        // SAFETY: UFFDIO_API reads and writes a struct uffdio_api (three
        // u64), which `api` is, for the duration of the call.
        if unsafe { libc::ioctl(fd, 0xc018_aa3f, api.as_mut_ptr()) } != 0 {
            return Err(format!("UFFDIO_API: {}", std::io::Error::last_os_error()).into());
        }
        let (reply_rx, reply_tx) =
            rustix::net::socketpair(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::SEQPACKET, rustix::net::SocketFlags::CLOEXEC, None)?;
        rustix::net::sockopt::set_socket_passcred(&reply_rx, true)?;
        rustix::net::sockopt::set_socket_passcred(&reply_tx, true)?;
        let (lifeline_rx, lifeline) = ferry::port()?;
        let items = [
            ItemDesc { kind: wire::KIND_SEND_ONCE, fds: 1, ..Default::default() },
            ItemDesc { kind: wire::KIND_PAGER, mode: FD_USERFAULT, fds: 1, len, addr: 1 << 40, ..Default::default() },
            ItemDesc { kind: wire::KIND_SEND, fds: 1, ..Default::default() },
        ];
        let mut bytes = Vec::new();
        wire::encode(&mut bytes, ATTACH, wire::FLAG_REPLY, &items, &id.to_le_bytes());
        let fds = [reply_tx.as_fd(), uffd.as_fd(), lifeline.as_fd()];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(right.as_fd(), &[std::io::IoSlice::new(&bytes)], &mut control, rustix::net::SendFlags::NOSIGNAL)?;
        drop((reply_tx, lifeline));
        let mut buf = vec![0u8; wire::MAX_MESSAGE];
        let got = rustix::net::recv(&reply_rx, &mut buf, rustix::net::RecvFlags::empty())?.0;
        match wire::parse(&buf[..got], 0) {
            Ok(p) if p.op == ATTACHED => attached += 1,
            _ => other += 1,
        }
        uffds.push((uffd, lifeline_rx));
    }
    kept.clear();
    println!("attached {attached} other {other}");
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `files-serve-here DIR`: serves DIR as this process's own user (not
/// root: a server that checks mode bits itself), sends a send right to it
/// through the inherited right, and serves until killed.
fn serve_here(args: &[String]) -> Res {
    let [dir] = args else { return Err("usage: files-serve-here DIR".into()) };
    let parent = ferry::spawn::inherited()?;
    let (mut server, right) = ferry::fileserver::FileServer::new(std::path::Path::new(dir), ferry::pager::ObjectConfig::default())?;
    parent.send(Message::new(1).with_item(Item::Send(right)), WAIT)?;
    drop(parent);
    loop {
        server.serve(Timeout::Infinite)?;
    }
}

/// `files-race DIR N`: through the server passed as the inherited right,
/// asks N times for `sw/secret`, where `sw` (in DIR, a directory of the
/// served tree this user may write, given as the server names it) is
/// swapped all the while between a real directory of this user's, holding
/// a decoy `secret`, and a symbolic link to `../private`, the server's own
/// directory this user may not enter. Prints how many answers held the
/// decoy, how many the real secret (`decoy D leaked L refused R`).
fn race(args: &[String]) -> Res {
    let [dir, n] = args else { return Err("usage: files-race DIR N".into()) };
    let n: usize = n.parse()?;
    let local = std::path::Path::new(dir);
    let (real, link, sw) = (local.join("real"), local.join("link"), local.join("sw"));
    std::fs::create_dir(&real)?;
    std::fs::write(real.join("secret"), b"decoy")?;
    std::os::unix::fs::symlink("../private", &link)?;
    std::fs::rename(&real, &sw)?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let (sw, link) = (sw.clone(), link.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = rustix::fs::renameat_with(rustix::fs::CWD, &sw, rustix::fs::CWD, &link, rustix::fs::RenameFlags::EXCHANGE);
            }
        })
    };
    let fs = FileClient::new(ferry::spawn::inherited()?).with_timeout(WAIT);
    let name = format!("{}/sw/secret", local.file_name().and_then(|n| n.to_str()).ok_or("DIR")?);
    let (mut decoy, mut leaked, mut refused) = (0, 0, 0);
    for _ in 0..n {
        match fs.open(&name) {
            Ok(s) if s.as_slice() == b"decoy" => decoy += 1,
            Ok(_) => leaked += 1,
            Err(_) => refused += 1,
        }
        if leaked > 0 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flipper.join();
    println!("decoy {decoy} leaked {leaked} refused {refused}");
    Ok(())
}

fn steal(args: &[String]) -> Res {
    let right = server()?;
    for id in args {
        let id: u64 = id.parse()?;
        let obj = MemoryObject::new(right.try_clone()?, id).with_timeout(WAIT);
        let map = obj.map();
        let stats = obj.stats();
        let copy = obj.copy();
        println!("{id} map {} stats {} copy {}", kind(&map), kind(&stats), kind(&copy));
    }
    Ok(())
}

fn churn(args: &[String]) -> Res {
    let [prefix, n] = args else { return Err("usage: files-churn PREFIX N".into()) };
    let n: usize = n.parse()?;
    let fs = client()?;
    for i in 0..n {
        let s = fs.open(&format!("{prefix}{i}"))?;
        std::hint::black_box(s.as_slice().first());
    }
    println!("opened {n}");
    Ok(())
}

/// How the server answered an open: granted, over the user's budget, or
/// anything else.
enum Opened {
    Granted,
    OverBudget,
    Other,
}

/// Reads the file server's answer to an open: granted, over the user's
/// budget (error code 5), or anything else.
fn answer(replies: &mut ferry::ReceiveRight) -> Result<Opened, Box<dyn std::error::Error>> {
    let r = replies.recv(WAIT)?;
    let code = r.body().get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    Ok(match (r.op(), code) {
        (OP_FILE_OPENED, _) => Opened::Granted,
        (_, Some(5)) => Opened::OverBudget,
        _ => Opened::Other,
    })
}

/// Sends one open of `name` whose snapshot is held by `hold` (a send right
/// whose receive right the caller keeps) and reads the answer.
fn open_held(right: &ferry::SendRight, replies: &mut ferry::ReceiveRight, name: &str, hold: ferry::SendRight) -> Result<Opened, Box<dyn std::error::Error>> {
    let once = replies.make_send_once()?;
    let m = Message::new(OP_FILE_OPEN).with_body(name.as_bytes()).with_item(Item::Send(hold)).with_reply(once);
    right.send(m, WAIT)?;
    answer(replies)
}

/// Opens `name` `n` times, each held by a port from `make`, and returns
/// the receive rights of the granted holds with the counts of the others.
fn open_many(
    name: &str,
    n: usize,
    make: impl Fn() -> Result<(ferry::ReceiveRight, ferry::SendRight), Box<dyn std::error::Error>>,
) -> Result<(Vec<ferry::ReceiveRight>, usize, usize), Box<dyn std::error::Error>> {
    let right = server()?;
    let (mut replies, _keep) = ferry::port()?;
    let (mut granted, mut over, mut other) = (Vec::new(), 0, 0);
    for _ in 0..n {
        let (hold, hold_right) = make()?;
        match open_held(&right, &mut replies, name, hold_right)? {
            Opened::Granted => granted.push(hold),
            Opened::OverBudget => over += 1,
            Opened::Other => other += 1,
        }
    }
    Ok((granted, over, other))
}

fn giveaway(args: &[String]) -> Res {
    use std::os::unix::fs::MetadataExt;
    let [dir, n] = args else { return Err("usage: files-giveaway DIR N".into()) };
    let local = std::path::Path::new(dir);
    let (mine, link, sw) = (local.join("mine"), local.join("link"), local.join("sw"));
    std::fs::create_dir(&mine)?;
    std::os::unix::fs::symlink("../pub", &link)?;
    std::os::unix::fs::symlink("mine", &sw)?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let (sw, link) = (sw.clone(), link.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = rustix::fs::renameat_with(rustix::fs::CWD, &sw, rustix::fs::CWD, &link, rustix::fs::RenameFlags::EXCHANGE);
            }
        })
    };
    let fs = client()?;
    let name = format!("{}/link/w", local.file_name().and_then(|n| n.to_str()).ok_or("DIR")?);
    let me = rustix::process::getuid().as_raw();
    let (mut written, mut given, mut denied, mut missing) = (0, 0, 0, 0);
    for _ in 0..n.parse::<usize>()? {
        match fs.write(&name, b"planted") {
            Ok(()) => written += 1,
            Err(PagerError::Denied(_)) => denied += 1,
            Err(_) => missing += 1,
        }
        for e in std::fs::read_dir(&mine)?.flatten() {
            if e.metadata().is_ok_and(|m| m.uid() != me) {
                eprintln!("files-giveaway: {} is uid {}'s", e.path().display(), e.metadata()?.uid());
                given += 1;
            }
        }
        if given > 0 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flipper.join();
    println!("written {written} given {given} denied {denied} missing {missing}");
    Ok(())
}

/// Writes `name` back `n` times as this user while a thread watches `dir`
/// and calls `act` on the path of every new inode the server makes there
/// (a name with `.ferry-new-`) as it appears; returns the write-backs that
/// went through and those refused.
fn on_each_new_inode(name: &str, dir: &std::path::Path, n: &str, mut act: impl FnMut(std::path::PathBuf) + Send + 'static) -> Result<(usize, usize), Box<dyn std::error::Error>> {
    use rustix::fs::inotify;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let watch = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
    inotify::add_watch(&watch, dir, inotify::WatchFlags::CREATE)?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, dir) = (stop.clone(), dir.to_owned());
        std::thread::spawn(move || {
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
            while !stop.load(Ordering::Relaxed) {
                let mut events = inotify::Reader::new(&watch, &mut buf);
                let Ok(e) = events.next() else {
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                };
                let Some(made) = e.file_name().and_then(|f| f.to_str().ok()).filter(|f| f.contains(".ferry-new-")).map(str::to_owned) else { continue };
                act(dir.join(made));
            }
        })
    };
    let fs = client()?;
    let (mut written, mut refused) = (0, 0);
    for i in 0..n.parse::<usize>()? {
        match fs.write(name, format!("written by uid nobody, {i}").as_bytes()) {
            Ok(()) => written += 1,
            Err(_) => refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    Ok((written, refused))
}

fn link_new(args: &[String]) -> Res {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let [name, dir, mine, n] = args else { return Err("usage: files-link-new NAME DIR MINE N".into()) };
    let (dir, mine) = (std::path::PathBuf::from(dir), std::path::PathBuf::from(mine));
    let linked = Arc::new(AtomicUsize::new(0));
    let (written, refused) = {
        let (linked, mine) = (linked.clone(), mine.clone());
        on_each_new_inode(name, &dir, n, move |made| {
            let k = linked.load(Ordering::Relaxed);
            if std::fs::hard_link(made, mine.join(format!("linked-{k}"))).is_ok() {
                linked.fetch_add(1, Ordering::Relaxed);
            }
        })?
    };
    let me = rustix::process::getuid().as_raw();
    let mut given = 0;
    for e in std::fs::read_dir(&mine)?.flatten() {
        if e.metadata().is_ok_and(|m| m.uid() != me) {
            eprintln!("files-link-new: {} is uid {}'s", e.path().display(), e.metadata()?.uid());
            given += 1;
        }
    }
    println!("written {written} refused {refused} linked {} given {given}", linked.load(Ordering::Relaxed));
    Ok(())
}

fn acl_new(args: &[String]) -> Res {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let [name, dir, n] = args else { return Err("usage: files-acl-new NAME DIR N".into()) };
    let dir = std::path::PathBuf::from(dir);
    let me = rustix::process::getuid().as_raw();
    // An access ACL (version 2): the owner, this uid and the group read
    // and write, the mask too, others nothing.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [(0x01u16, 6u16, u32::MAX), (0x02, 6, me), (0x04, 6, u32::MAX), (0x10, 6, u32::MAX), (0x20, 0, u32::MAX)] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    let given = Arc::new(AtomicUsize::new(0));
    let (written, refused) = {
        let given = given.clone();
        on_each_new_inode(name, &dir, n, move |made| {
            if rustix::fs::setxattr(made, "system.posix_acl_access", &acl, rustix::fs::XattrFlags::empty()).is_ok() {
                given.fetch_add(1, Ordering::Relaxed);
            }
        })?
    };
    let file = dir.join(name.rsplit('/').next().unwrap_or(name));
    let read = if std::fs::read(&file).is_ok() { "ok" } else { "denied" };
    println!("written {written} refused {refused} acl {} read {read}", given.load(Ordering::Relaxed));
    Ok(())
}

fn open_new(args: &[String]) -> Res {
    use std::io::BufRead;
    use std::os::unix::fs::FileExt;
    use std::sync::{Arc, Mutex};
    let [name, dir, n] = args else { return Err("usage: files-open-new NAME DIR N".into()) };
    let dir = std::path::PathBuf::from(dir);
    let opened = Arc::new(Mutex::new(Vec::new()));
    let (written, refused) = {
        let opened = opened.clone();
        on_each_new_inode(name, &dir, n, move |made| {
            if let Ok(f) = std::fs::File::open(made) {
                opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(f);
            }
        })?
    };
    let opened = std::mem::take(&mut *opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    println!("written {written} refused {refused} opened {}", opened.len());
    println!("ready");
    std::io::stdout().flush()?;
    std::io::stdin().lock().read_line(&mut String::new())?;
    let mut read = 0;
    for f in &opened {
        let mut b = vec![0u8; 4096];
        let got = f.read_at(&mut b, 0).unwrap_or(0);
        read += usize::from(b[..got].windows(6).any(|w| w == b"secret"));
    }
    println!("read {read}");
    Ok(())
}

fn flood_requests(args: &[String]) -> Res {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let [threads] = args else { return Err("usage: files-flood THREADS".into()) };
    let threads: usize = threads.parse()?;
    let right = server()?;
    let started = std::sync::Arc::new(AtomicUsize::new(0));
    for _ in 0..threads {
        let (right, started) = (right.try_clone()?, started.clone());
        std::thread::spawn(move || {
            let mut first = true;
            loop {
                let m = Message::new(1).with_body(1u64.to_le_bytes().to_vec());
                if right.send(m, Timeout::Infinite).is_err() {
                    return;
                }
                if first {
                    started.fetch_add(1, Ordering::Relaxed);
                    first = false;
                }
            }
        });
    }
    while started.load(Ordering::Relaxed) < threads {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn flood_ports(args: &[String]) -> Res {
    let [n] = args else { return Err("usage: files-flood-ports N".into()) };
    let n: usize = n.parse()?;
    let mut bs = Bootstrap::connect()?;
    let mut ports = Vec::new();
    let mut busy = 0;
    while ports.len() < n {
        match bs.lookup("files") {
            Ok(r) => ports.push(r),
            Err(ferry::bootstrap::NameError::Refused(w)) if w.contains("busy") && busy < 2000 => {
                busy += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => break,
        }
    }
    // The object protocol's open, of an object that does not exist.
    const OPEN: u32 = 0x7061_0001;
    // Sends on every port until its queue is full; how many went.
    let fill = |ports: &[ferry::SendRight]| {
        let mut sent = 0usize;
        for p in ports {
            for _ in 0..100_000 {
                let m = Message::new(OPEN).with_body(u64::MAX.to_le_bytes().to_vec());
                if p.send(m, Timeout::Zero).is_err() {
                    break;
                }
                sent += 1;
            }
        }
        sent
    };
    let sent = fill(&ports);
    println!("filled {} ports with {sent} requests", ports.len());
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        if fill(&ports) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[allow(unsafe_code)]
fn refault(args: &[String]) -> Res {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let [name, threads] = args else { return Err("usage: files-refault NAME THREADS".into()) };
    let threads: usize = threads.parse()?;
    let snap = client()?.open(name)?;
    let mapped = snap.object().ok_or("no object")?.map()?;
    let (base, pages) = (mapped.addr(), mapped.len() / 4096);
    if pages < threads {
        return Err(format!("{name} has {pages} pages, fewer than {threads} threads").into());
    }
    let started = std::sync::Arc::new(AtomicUsize::new(0));
    for t in 0..threads {
        let started = started.clone();
        std::thread::spawn(move || {
            let page = base + t * 4096;
            let mut first = true;
            loop {
                // SAFETY: `page` is a page of `mapped`, which lives until
                // the process ends (the main thread keeps it and never
                // returns); reading it only faults it in.
                let _ = unsafe { std::ptr::read_volatile(page as *const u8) };
                if first {
                    started.fetch_add(1, Ordering::Relaxed);
                    first = false;
                }
                // SAFETY: as above; dropping the page of a private mapping
                // only makes the next read fault again.
                let _ = unsafe { rustix::mm::madvise(page as *mut std::ffi::c_void, 4096, rustix::mm::Advice::LinuxDontNeed) };
            }
        });
    }
    while started.load(Ordering::Relaxed) < threads {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
        std::hint::black_box(&mapped);
    }
}

fn pin(args: &[String]) -> Res {
    let [name, n] = args else { return Err("usage: files-pin NAME N".into()) };
    let right = server()?;
    let (mut replies, _keep) = ferry::port()?;
    let (mut kept, mut lazy, mut other) = (Vec::new(), 0, 0);
    for _ in 0..n.parse::<usize>()? {
        let (hold, hold_right) = ferry::port()?;
        let once = replies.make_send_once()?;
        right.send(Message::new(OP_FILE_OPEN).with_body(name.as_bytes()).with_item(Item::Send(hold_right)).with_reply(once), WAIT)?;
        let r = replies.recv(WAIT)?;
        if r.op() != OP_FILE_OPENED {
            other += 1;
        } else if r.items().iter().any(|i| matches!(i, Item::Pager(_))) {
            kept.push(r);
        } else {
            lazy += 1;
        }
        // The snapshot goes with its hold; the memory stays in `kept`.
        drop(hold);
        // Time for the server to see the hold go (else the next open
        // shares this version, which makes nothing new).
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("kept {} lazy {lazy} other {other}", kept.len());
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn hoard(args: &[String]) -> Res {
    let [name, n] = args else { return Err("usage: files-hoard NAME N".into()) };
    let (granted, over, other) = open_many(name, n.parse()?, || Ok(ferry::port()?))?;
    println!("granted {} over-budget {over} other {other}", granted.len());
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn park(args: &[String]) -> Res {
    let [name, n] = args else { return Err("usage: files-park NAME N".into()) };
    // The receive rights dropped on return: the parked copies in flight
    // are all that is left of the holds.
    let (parked, over, other) = open_many(name, n.parse()?, crate::names::port_parked)?;
    println!("parked {} over-budget {over} other {other}", parked.len());
    Ok(())
}

fn self_hold(args: &[String]) -> Res {
    use std::os::fd::{AsFd, BorrowedFd};
    let [how, name, n] = args else { return Err("usage: files-self-hold HOW NAME N".into()) };
    let right = server()?;
    let mut bs = Bootstrap::connect()?;
    let (mut replies, reply_right) = ferry::port()?;
    // The registered ports' receiving ends, dropped on return.
    let mut kept = Vec::new();
    let (mut held, mut over, mut other) = (0, 0, 0);
    for i in 0..n.parse::<usize>()? {
        let got = match how.as_str() {
            "server" => open_held(&right, &mut replies, name, server()?)?,
            "name" => {
                let (rx, tx, rx_fd) = crate::names::port_and_receiving_fd()?;
                bs.register(&format!("self-hold-{i}"), &tx)?;
                // SAFETY: `rx_fd` is the receiving socket `rx` owns, which
                // is kept open in `kept` until this function returns.
                let end = unsafe { BorrowedFd::borrow_raw(rx_fd) };
                let got = open_by_hand(&right, &mut replies, reply_right.as_fd(), name, end)?;
                kept.push((rx, tx));
                got
            }
            "system" => open_held(&right, &mut replies, name, bs.lookup("long-lived")?)?,
            "listen" => {
                use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
                let l = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
                let addr = SocketAddrUnix::new_abstract_name(format!("ferry-test-hold-{}-{i}", std::process::id()).as_bytes())?;
                rustix::net::bind(&l, &addr)?;
                rustix::net::listen(&l, 1)?;
                open_by_hand(&right, &mut replies, reply_right.as_fd(), name, l.as_fd())?
            }
            "connect" => {
                // A new connection to the name server (in the server's
                // process), sent before the name server has taken it.
                use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
                let c = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
                rustix::net::connect(&c, &SocketAddrUnix::new(ferry::bootstrap::default_path())?)?;
                open_by_hand(&right, &mut replies, reply_right.as_fd(), name, c.as_fd())?
            }
            _ => return Err(format!("unknown HOW {how}").into()),
        };
        match got {
            Opened::Granted => held += 1,
            Opened::OverBudget => over += 1,
            Opened::Other => other += 1,
        }
    }
    println!("held {held} over-budget {over} other {other}");
    Ok(())
}

/// An open of `name` written by hand: its reply right a copy of
/// `reply_right` (to `replies`), its hold the socket `hold`, whatever it is.
fn open_by_hand(
    right: &ferry::SendRight,
    replies: &mut ferry::ReceiveRight,
    reply_right: std::os::fd::BorrowedFd<'_>,
    name: &str,
    hold: std::os::fd::BorrowedFd<'_>,
) -> Result<Opened, Box<dyn std::error::Error>> {
    use ferry::wire::{self, ItemDesc, KIND_SEND};
    use std::os::fd::AsFd;
    let desc = ItemDesc { kind: KIND_SEND, fds: 1, ..Default::default() };
    let mut bytes = Vec::new();
    wire::encode(&mut bytes, OP_FILE_OPEN, wire::FLAG_REPLY, &[desc, desc], name.as_bytes());
    let fds = [reply_right, hold];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(right.as_fd(), &[std::io::IoSlice::new(&bytes)], &mut control, rustix::net::SendFlags::empty())?;
    answer(replies)
}

fn sabotage() -> Res {
    use std::os::fd::AsFd;
    let right = server()?;
    let sock = right.as_fd();
    rustix::net::sockopt::set_socket_send_buffer_size(sock, 1)?;
    let flags = rustix::fs::fcntl_getfl(sock)?;
    rustix::fs::fcntl_setfl(sock, flags | rustix::fs::OFlags::NONBLOCK)?;
    rustix::net::shutdown(sock, rustix::net::Shutdown::Both)?;
    println!("done");
    Ok(())
}

fn lookups(args: &[String]) -> Res {
    let [n] = args else { return Err("usage: files-lookups N".into()) };
    let n: usize = n.parse()?;
    let mut bs = Bootstrap::connect()?;
    let (mut kept, mut why) = (Vec::new(), String::from("none"));
    // The server refuses a lookup while its queue is full (a loaded
    // machine): that says look again, not stop.
    let mut busy = 0;
    while kept.len() < n {
        match bs.lookup("files") {
            Ok(r) => kept.push(r),
            Err(ferry::bootstrap::NameError::Refused(w)) if w.contains("busy") && busy < 2000 => {
                busy += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                why = format!("{e:?}");
                break;
            }
        }
    }
    println!("looked-up {} stopped: {why}", kept.len());
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// For SECS seconds, keeps the file server busy copying a fresh version
/// of NAME (a large file of this user's, changed before each open) on one
/// thread, and looks up `files` as fast as it can on another, keeping up
/// to 200 of the ports it gets at once: while the server copies, each
/// lookup's port waits in the server's one main queue.
fn busy_lookups(args: &[String]) -> Res {
    use std::os::unix::fs::FileExt;
    let [name, secs] = args else { return Err("usage: files-busy-lookups NAME SECS".into()) };
    let end = std::time::Instant::now() + Duration::from_secs(secs.parse()?);
    let path = name.clone();
    let busy = std::thread::spawn(move || -> Result<usize, String> {
        let fs = client().map_err(|e| e.to_string())?;
        let file = std::fs::OpenOptions::new().write(true).open(&path).map_err(|e| e.to_string())?;
        let mut copies = 0usize;
        while std::time::Instant::now() < end {
            file.write_all_at(&[copies as u8], 0).map_err(|e| e.to_string())?;
            if fs.open(std::path::Path::new(&path).file_name().and_then(|n| n.to_str()).unwrap_or_default()).is_ok() {
                copies += 1;
            }
        }
        Ok(copies)
    });
    let mut bs = Bootstrap::connect()?;
    let (mut kept, mut looked, mut refused) = (Vec::new(), 0usize, 0usize);
    while std::time::Instant::now() < end {
        match bs.lookup("files") {
            Ok(r) => {
                looked += 1;
                kept.push(r);
                if kept.len() >= 200 {
                    kept.clear();
                }
            }
            Err(_) => refused += 1,
        }
    }
    let copies = busy.join().map_err(|_| "the copying thread panicked")??;
    println!("copies {copies} lookups {looked} refused {refused}");
    std::io::stdout().flush()?;
    Ok(())
}

fn keep(args: &[String]) -> Res {
    let [name, n] = args else { return Err("usage: files-keep NAME N".into()) };
    let n: usize = n.parse()?;
    let fs = client()?;
    let (mut kept, mut over, mut other) = (Vec::new(), 0, 0);
    for _ in 0..n {
        // The snapshot, and a mapping of it through the pager.
        let r = fs.open(name).and_then(|s| {
            let m = s.object().ok_or_else(|| PagerError::Protocol("no object".into()))?.map()?;
            Ok((s, m))
        });
        match kind(&r) {
            "ok" => kept.push(r?),
            "OverBudget" => over += 1,
            _ => other += 1,
        }
    }
    println!("mapped {} over-budget {over} other {other}", kept.len());
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn hold_files(args: &[String]) -> Res {
    let fs = client()?;
    let mut kept = Vec::new();
    for name in args {
        let r = fs.open(name);
        match &r {
            Ok(s) => {
                let sum: u64 = s.as_slice().iter().map(|&b| b as u64).sum();
                println!("{name} ok {} {sum}", s.as_slice().len());
            }
            Err(e) => {
                eprintln!("files-hold {name}: {e}");
                println!("{name} err {}", kind(&r));
            }
        }
        kept.push(r);
    }
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn reach(args: &[String]) -> Res {
    let [pid, fds @ ..] = args else { return Err("usage: files-reach PID FD...".into()) };
    let verdict = |r: std::io::Result<std::fs::File>| if r.is_ok() { "ok" } else { "denied" };
    for fd in fds {
        let path = format!("/proc/{pid}/fd/{fd}");
        let read = verdict(std::fs::File::open(&path));
        let write = verdict(std::fs::OpenOptions::new().write(true).open(&path));
        println!("{fd} read {read} write {write}");
    }
    let maps = if std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|s| !s.is_empty()) { "ok" } else { "denied" };
    println!("maps {maps}");
    Ok(())
}

/// The userfaultfds this process holds (found by their `/proc/self/fd`
/// links).
fn userfaultfds() -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").into_iter().flatten().flatten() {
        let link = std::fs::read_link(e.path()).unwrap_or_default();
        if link.as_os_str() == "anon_inode:[userfaultfd]" {
            if let Some(fd) = e.file_name().to_str().and_then(|s| s.parse().ok()) {
                v.push(fd);
            }
        }
    }
    v
}

fn block(args: &[String]) -> Res {
    use std::os::fd::BorrowedFd;
    let [name, read_own] = args else { return Err("usage: files-block NAME READ_OWN".into()) };
    let opened = client()?.open(name)?;
    let snap = opened.object().ok_or("no object")?.map()?;
    let fds = userfaultfds();
    if fds.is_empty() {
        return Err("no userfaultfd found".into());
    }
    for &fd in &fds {
        // SAFETY: `fd` is open in this process for as long as `snap` lives.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let fl = rustix::fs::fcntl_getfl(fd)?;
        rustix::fs::fcntl_setfl(fd, fl - rustix::fs::OFlags::NONBLOCK)?;
    }
    std::hint::black_box(snap.as_slice().ok_or("not a copy")?[0]);
    if read_own == "1" {
        let fd = fds[0];
        std::thread::spawn(move || {
            let mut buf = [0u8; 32 * 16];
            loop {
                // SAFETY: as above; the thread only reads events.
                let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                if rustix::io::read(fd, &mut buf).is_err() {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        });
        // A touch whose event this process may well read itself: that
        // thread of ours then waits in its fault; the server must not.
        let len = snap.len();
        let s = snap.as_slice().ok_or("not a copy")?.as_ptr() as usize;
        std::thread::spawn(move || {
            // SAFETY: the mapping lives until this process is killed (`snap`
            // is never dropped: the main thread sleeps forever below).
            let b = unsafe { std::ptr::read_volatile((s + len - 1) as *const u8) };
            std::hint::black_box(b);
        });
    }
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn plant(args: &[String]) -> Res {
    use rustix::fs::inotify;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let [name, path] = args else { return Err("usage: files-plant NAME PATH".into()) };
    let file = Arc::new(std::fs::OpenOptions::new().read(true).write(true).open(path)?);
    let pages = (file.metadata()?.len() / 4096).max(2);
    // The first page gets a value it does not have.
    let mut first = [0u8; 1];
    file.read_exact_at(&mut first, 0)?;
    let first = first[0].wrapping_add(1);
    // Each copy the server makes of the file is one read of it, which
    // the file's own user may watch.
    let watch = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
    inotify::add_watch(&watch, path.as_str(), inotify::WatchFlags::ACCESS)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (s2, f2) = (stop.clone(), file.clone());
    let writer = std::thread::spawn(move || {
        let mut i = 0u64;
        while !s2.load(Ordering::Relaxed) {
            i += 1;
            let _ = f2.write_at(&[(i % 250) as u8 + 1; 4096], (pages - 1) * 4096);
            std::thread::sleep(Duration::from_micros(500));
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let name = name.clone();
    std::thread::spawn(move || {
        let r = client().map_err(|e| e.to_string()).and_then(|fs| fs.open(&name).map_err(|e| e.to_string()));
        let _ = tx.send(r);
    });
    // Writes go on through the first two copies; one more lands in the
    // third, behind where it has read, and then the file is left alone.
    let mut copies = 0;
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while copies < 2 && std::time::Instant::now() < deadline {
        let mut events = inotify::Reader::new(&watch, &mut buf);
        match events.next() {
            Ok(_) => copies += 1,
            Err(_) => std::thread::sleep(Duration::from_micros(50)),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    if copies == 2 {
        file.write_at(&[first; 4096], 0)?;
    }
    let snap = rx.recv()??;
    println!("{}", if copies == 2 { "planted" } else { "missed" });
    std::io::stdout().flush()?;
    loop {
        std::hint::black_box(&snap);
        std::thread::sleep(Duration::from_secs(3600));
    }
}
