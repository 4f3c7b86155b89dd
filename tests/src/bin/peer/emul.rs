//! Roles for the emulation tests: an emulation server in its own process
//! (so a test can kill it under a reader), and a token holder that dies
//! while active.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use ferry::emulation::{Client, EmulServer, Opened, TokenState};
use ferry::{Message, Timeout};

use crate::Outcome;

pub fn run(role: &str, args: &[String]) -> Outcome {
    match role {
        "emul-server" => Some(server(args)),
        "emul-token-dies" => Some(token_dies(args)),
        "emul-other-user" => Some(other_user(args)),
        "emul-stall" => Some(stall(args)),
        "emul-foreign" => Some(foreign(args)),
        "emul-open-many" => Some(open_many(args)),
        "emul-full-reply" => Some(full_reply(args)),
        "emul-answer-through" => Some(answer_through()),
        "emul-channel-intrude" => Some(channel_intrude(args)),
        "emul-channels" => Some(channels()),
        "emul-channel-self" => Some(channel_self(args)),
        "emul-shrink-page" => Some(shrink_page(args)),
        "emul-proc" => Some(proc_names(args)),
        "emul-write-suid" => Some(write_suid(args)),
        "process-target" => Some(process_target()),
        _ => None,
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

/// `emul-server DIR`: serves DIR, sends the server's right through the
/// inherited right, serves until nobody is left (or it is killed).
fn server(args: &[String]) -> Res {
    let dir = args.first().ok_or("usage: emul-server DIR")?;
    let parent = ferry::spawn::inherited()?;
    let (mut srv, right) = EmulServer::new(std::path::Path::new(dir))?;
    let fds = || std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    parent.send(Message::new(1).with_item(right), Timeout::Infinite)?;
    drop(parent);
    // The descriptors the server holds before any client came.
    let before = fds();
    while srv.serve(Timeout::After(Duration::from_millis(200))) {}
    // Every client is gone: the server holds no open file, and no more
    // descriptors than before.
    println!("open-files {} descriptors-before {} after {}", srv.open_files(), before, fds());
    Ok(())
}

/// `emul-token-dies NAME`: opens NAME through the server passed as the
/// inherited right, forks; the child takes the token (active) and is
/// killed holding it; the parent then asks for the token, which the
/// server must take from the dead child. Prints `seized`.
fn token_dies(args: &[String]) -> Res {
    let name = args.first().ok_or("usage: emul-token-dies NAME")?;
    let client = Client::new(ferry::spawn::inherited()?);
    let Opened::File(f) = client.open(name, libc::O_RDONLY, 0).map_err(|e| format!("open: errno {e}"))? else {
        return Err("not a file".into());
    };
    let (r, w) = rustix::pipe::pipe()?;
    // SAFETY: this process is single-threaded here; the child only makes
    // system calls and the library calls the token protocol needs.
    let child = unsafe { libc::fork() };
    if child == 0 {
        drop(r);
        let ok = client.token(f.id).is_ok();
        let mut w = std::fs::File::from(w);
        let _ = w.write_all(if ok { b"A" } else { b"E" });
        std::thread::sleep(Duration::from_secs(60));
        // SAFETY: ends the child at once, as it would be killed.
        unsafe { libc::_exit(0) };
    }
    drop(w);
    let mut b = [0u8; 1];
    std::fs::File::from(r).read_exact(&mut b)?;
    if &b != b"A" {
        return Err("the child did not get the token".into());
    }
    if f.page.state() != TokenState::Active(child) {
        return Err(format!("the child holds no active token: {:?}", f.page.state()).into());
    }
    // SAFETY: signals and reaps our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    client.token(f.id).map_err(|e| format!("token after the holder died: errno {e}"))?;
    let me = std::process::id() as i32;
    if f.page.state() != TokenState::Active(me) {
        return Err(format!("the token did not come back: {:?}", f.page.state()).into());
    }
    f.page.deactivate(me);
    let _ = f.file.as_fd();
    println!("seized");
    Ok(())
}

/// `emul-other-user ID`: as another user, through the server passed as
/// the inherited right: a file only its owner may read is refused, the
/// owner's open file `ID` is unknown to this user (token, segment read,
/// truncation), `..` cannot leave the root, and a readable file opens.
/// Prints one word per check.
fn other_user(args: &[String]) -> Res {
    let id: u64 = args.first().ok_or("usage: emul-other-user ID")?.parse()?;
    let client = Client::new(ferry::spawn::inherited()?);
    let mut out = Vec::new();
    out.push(match client.open("secret", libc::O_RDONLY, 0) {
        Err(libc::EACCES) => "denied".to_string(),
        Err(e) => format!("errno-{e}"),
        Ok(_) => "opened-secret".to_string(),
    });
    out.push(match client.token(id) {
        Err(libc::EBADF) => "no-token".to_string(),
        Err(e) => format!("errno-{e}"),
        Ok(()) => "took-token".to_string(),
    });
    let mut buf = [0u8; 16];
    out.push(match client.sg_read(id, 0, &mut buf) {
        Err(libc::EBADF) => "no-read".to_string(),
        Err(e) => format!("errno-{e}"),
        Ok(_) => "read-secret".to_string(),
    });
    out.push(match client.truncate(id, 0) {
        Err(libc::EBADF) => "no-truncate".to_string(),
        Err(e) => format!("errno-{e}"),
        Ok(()) => "truncated".to_string(),
    });
    out.push(match client.open("../../etc/passwd", libc::O_RDONLY, 0) {
        Err(libc::EXDEV) => "beneath".to_string(),
        Err(e) => format!("errno-{e}"),
        Ok(_) => "escaped".to_string(),
    });
    out.push(match client.open("public", libc::O_RDONLY, 0) {
        Ok(Opened::File(_)) => "public".to_string(),
        Ok(_) => "not-a-file".to_string(),
        Err(e) => format!("errno-{e}"),
    });
    println!("{}", out.join(" "));
    Ok(())
}

/// `emul-stall HOW NAME`: as a hostile user, through the server passed as
/// the inherited right: opens NAME (its own file) for writing, makes its
/// token active and keeps it so, then asks the server for something that
/// waits for the active holder: `truncate` (a truncation of the open
/// file), `open-trunc` (an open of NAME with `O_TRUNC`) or `tokens` (300
/// token requests at once); or, with `hold`, opens NAME (another user's
/// file) for reading and only keeps its token active (`hold-many`: opens
/// it 60 times, keeping every token active); or, with `fsync`,
/// writes 256 MiB into NAME and asks the server to flush it to disk (which
/// the disk makes wait, token or not). Prints `stalling`, waits for a line on standard
/// input, and prints whether its first request was answered by then
/// (`answered`) or is still waiting (`pending`); then lets the token go and
/// exits once every request is answered.
fn stall(args: &[String]) -> Res {
    use ferry::emulation::{OP_EMUL_OPEN, OP_EMUL_TOKEN, OP_EMUL_TRUNCATE};
    let (how, name) = match args {
        [how, name] => (how.as_str(), name.as_str()),
        _ => return Err("usage: emul-stall truncate|open-trunc|tokens|hold|hold-many|fsync NAME".into()),
    };
    let right = ferry::spawn::inherited()?;
    let client = Client::new(right.try_clone()?);
    let me = std::process::id() as i32;
    let mut more = Vec::new();
    if how == "hold-many" {
        for _ in 1..60 {
            let Opened::File(f) = client.open(name, libc::O_RDONLY, 0).map_err(|e| format!("open: errno {e}"))? else {
                return Err("not a file".into());
            };
            if !f.page.try_activate(me) {
                return Err(format!("the token is not this process's: {:?}", f.page.state()).into());
            }
            more.push(f);
        }
    }
    let how = if how == "hold-many" { "hold" } else { how };
    let flags = if how == "hold" { libc::O_RDONLY } else { libc::O_RDWR | libc::O_CREAT };
    let Opened::File(f) = client.open(name, flags, 0o644).map_err(|e| format!("open: errno {e}"))? else {
        return Err("not a file".into());
    };
    if !f.page.try_activate(me) {
        return Err(format!("the token is not this process's: {:?}", f.page.state()).into());
    }
    let (mut rx, _) = ferry::port()?;
    let requests: Vec<(u32, Vec<u8>)> = match how {
        "truncate" => vec![(OP_EMUL_TRUNCATE, [f.id.to_le_bytes(), 0u64.to_le_bytes()].concat())],
        "open-trunc" => {
            let mut b = ((libc::O_RDWR | libc::O_TRUNC) as u32).to_le_bytes().to_vec();
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(name.as_bytes());
            vec![(OP_EMUL_OPEN, b)]
        }
        "tokens" => (0..300).map(|_| (OP_EMUL_TOKEN, f.id.to_le_bytes().to_vec())).collect(),
        "hold" => Vec::new(),
        "fsync" => {
            let chunk = vec![0x5au8; 1 << 20];
            for i in 0..256u64 {
                rustix::io::pwrite(&f.file, &chunk, i << 20)?;
            }
            vec![(ferry::emulation::OP_EMUL_FSYNC, f.id.to_le_bytes().to_vec())]
        }
        other => return Err(format!("unknown way to stall: {other}").into()),
    };
    let sent = requests.len();
    for (op, body) in requests {
        let once = rx.make_send_once()?;
        right.send(Message::new(op).with_body(body).with_reply(once), Timeout::Infinite)?;
    }
    println!("stalling");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let answered = rx.try_recv().is_ok();
    println!("{}", if answered { "answered" } else { "pending" });
    std::io::stdout().flush()?;
    // Each token granted makes this process the active holder again.
    f.page.deactivate(me);
    for g in &more {
        g.page.deactivate(me);
    }
    for _ in usize::from(answered)..sent {
        rx.recv(Timeout::After(Duration::from_secs(60)))?;
        f.page.deactivate(me);
    }
    Ok(())
}

/// `emul-open-many NAME N`: opens NAME for reading up to N times through
/// the server passed as the inherited right, keeping every open file,
/// until the server refuses; prints how many opened and the refusal's
/// errno (0 if none), waits for a line on standard input, and exits.
fn open_many(args: &[String]) -> Res {
    let (name, n) = match args {
        [name, n] => (name.as_str(), n.parse::<usize>()?),
        _ => return Err("usage: emul-open-many NAME N".into()),
    };
    let client = Client::new(ferry::spawn::inherited()?);
    let mut kept = Vec::new();
    let mut refused = 0;
    while kept.len() < n {
        match client.open(name, libc::O_RDONLY, 0) {
            Ok(o) => kept.push(o),
            Err(e) => {
                refused = e;
                break;
            }
        }
    }
    println!("{} {refused}", kept.len());
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(())
}

/// `emul-full-reply N`: through the server passed as the inherited right,
/// sends N requests whose reply right is a send right to a port of this
/// process whose queue it filled first (the replies can never be
/// queued); prints `stalling`, and exits at a line on standard input.
fn full_reply(args: &[String]) -> Res {
    let n: usize = args.first().ok_or("usage: emul-full-reply N")?.parse()?;
    let right = ferry::spawn::inherited()?;
    let (rx, tx) = ferry::port()?;
    let mut queued = 0usize;
    while tx.send(Message::new(0).with_body(vec![0u8; 4000]), Timeout::Zero).is_ok() {
        queued += 1;
    }
    if queued == 0 {
        return Err("could not queue anything".into());
    }
    for _ in 0..n {
        let mut body = 0u32.to_le_bytes().to_vec();
        body.extend_from_slice(b".");
        right.send(Message::new(ferry::emulation::OP_EMUL_STAT).with_body(body).with_reply(tx.try_clone()?), Timeout::Infinite)?;
    }
    println!("stalling");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    drop(rx);
    Ok(())
}

/// `emul-answer-through`: sends a right to a port of its own through the
/// inherited right (op 21) and takes what comes back on it: the
/// server's right and rights to other ports. Asks the server to stat
/// `.` once with each of those other rights as the reply right; prints
/// `asked N`, and holds everything until its standard input ends.
fn answer_through() -> Res {
    let hand = ferry::spawn::inherited()?;
    let (mut mine, tx) = ferry::port()?;
    hand.send(Message::new(21).with_item(ferry::Item::Send(tx)), Timeout::After(Duration::from_secs(10)))?;
    let mut m = mine.recv(Timeout::After(Duration::from_secs(10)))?;
    let mut rights = Vec::new();
    for item in m.take_items() {
        let ferry::Item::Send(r) = item else { return Err("not a send right".into()) };
        rights.push(r);
    }
    if rights.is_empty() {
        return Err("no server right".into());
    }
    let server = rights.remove(0);
    for r in &rights {
        let mut body = 0u32.to_le_bytes().to_vec();
        body.extend_from_slice(b".");
        let ask = Message::new(ferry::emulation::OP_EMUL_STAT).with_body(body).with_reply(ferry::Reply::Send(r.try_clone()?));
        server.send(ask, Timeout::After(Duration::from_secs(10)))?;
    }
    println!("asked {}", rights.len());
    std::io::stdout().flush()?;
    std::io::stdin().read_to_end(&mut Vec::new())?;
    drop((hand, mine, server, rights));
    Ok(())
}

/// `emul-channel-intrude NAME`: sends an open of NAME on the inherited
/// right, which is a right to another user's channel to the server (as
/// a relay that was handed it would); prints `sent`.
fn channel_intrude(args: &[String]) -> Res {
    let name = args.first().ok_or("usage: emul-channel-intrude NAME")?;
    let right = ferry::spawn::inherited()?;
    let mut body = (libc::O_RDONLY as u32).to_le_bytes().to_vec();
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(name.as_bytes());
    right.send(Message::new(ferry::emulation::OP_EMUL_OPEN).with_body(body), Timeout::Infinite)?;
    println!("sent");
    Ok(())
}

/// `emul-channels`: asks the server (the inherited right) for channels,
/// keeping each, until it refuses; prints `channels K refused ERRNO` and
/// `ready`, and keeps them until its standard input closes.
fn channels() -> Res {
    let right = ferry::spawn::inherited()?;
    let mut kept = Vec::new();
    let refused = loop {
        let (rx, tx) = ferry::port()?;
        let (mut answers, _keep) = ferry::port()?;
        let m = Message::new(ferry::emulation::OP_EMUL_CHANNEL).with_item(ferry::Item::Receive(rx)).with_reply(answers.make_send_once()?);
        right.send(m, Timeout::Infinite)?;
        let a = answers.recv(Timeout::After(Duration::from_secs(10)))?;
        let errno = u32::from_le_bytes(a.body().get(..4).ok_or("short answer")?.try_into()?);
        if errno != 0 || kept.len() >= 10_000 {
            break errno;
        }
        kept.push(tx);
    };
    println!("channels {} refused {refused}", kept.len());
    println!("ready");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(())
}

/// `emul-channel-self HOW`: asks the server (the inherited right) for a
/// channel whose "receive right", written by hand, is a copy of that very
/// send right to the server (HOW `server`) or a listening socket (HOW
/// `listen`); prints `answer ERRNO` (or `no-answer`) and exits.
fn channel_self(args: &[String]) -> Res {
    use ferry::wire::{self, ItemDesc, KIND_RECEIVE, KIND_SEND};
    use std::io::IoSlice;
    use std::mem::MaybeUninit;
    let right = ferry::spawn::inherited()?;
    let (mut answers, answer_right) = ferry::port()?;
    let desc = |kind| ItemDesc { kind, fds: 1, ..Default::default() };
    let mut bytes = Vec::new();
    wire::encode(&mut bytes, ferry::emulation::OP_EMUL_CHANNEL, wire::FLAG_REPLY, &[desc(KIND_SEND), desc(KIND_RECEIVE)], &[]);
    let listener = {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let l = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
        rustix::net::bind(&l, &SocketAddrUnix::new_abstract_name(format!("ferry-test-channel-{}", std::process::id()).as_bytes())?)?;
        rustix::net::listen(&l, 1)?;
        l
    };
    let fds = match args.first().map(String::as_str) {
        Some("server") => [answer_right.as_fd(), right.as_fd()],
        Some("listen") => [answer_right.as_fd(), listener.as_fd()],
        _ => return Err("usage: emul-channel-self server|listen".into()),
    };
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(right.as_fd(), &[IoSlice::new(&bytes)], &mut control, rustix::net::SendFlags::empty())?;
    drop(answer_right);
    match answers.recv(Timeout::After(Duration::from_secs(10))) {
        Ok(a) => println!("answer {}", u32::from_le_bytes(a.body().get(..4).ok_or("short answer")?.try_into()?)),
        Err(_) => println!("no-answer"),
    }
    Ok(())
}

/// `emul-shrink-page NAME`: opens NAME through the server passed as the
/// inherited right by hand, takes the token page's memfd out of the
/// envelope, tries to truncate it to nothing (under the server's shared
/// mapping of it) and then asks for the token, which makes the server read
/// the page. Prints `shrunk` or `sealed`, then `token-ok`, `token-errno-N`
/// or `no-answer` (the server died).
fn shrink_page(args: &[String]) -> Res {
    use ferry::emulation::{OP_EMUL_OPEN, OP_EMUL_TOKEN};
    use ferry::Item;
    use std::mem::MaybeUninit;
    let name = args.first().ok_or("usage: emul-shrink-page NAME")?;
    let right = ferry::spawn::inherited()?;
    let (mut rx, _) = ferry::port()?;
    let mut body = (libc::O_RDONLY as u32).to_le_bytes().to_vec();
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(name.as_bytes());
    let once = rx.make_send_once()?;
    right.send(Message::new(OP_EMUL_OPEN).with_body(body).with_reply(once), Timeout::Infinite)?;
    let mut m = rx.recv(Timeout::After(Duration::from_secs(30)))?;
    let b = m.body().to_vec();
    if b.get(..4) != Some(&[0, 0, 0, 0][..]) {
        return Err(format!("open refused: {b:?}").into());
    }
    let id = u64::from_le_bytes(b[8..16].try_into()?);
    let mut items = m.take_items().into_iter();
    let (Some(Item::Send(envelope)), Some(Item::Send(_hold))) = (items.next(), items.next()) else {
        return Err("no envelope and hold".into());
    };
    let mut buf = [0u8; 8];
    // Room for the credentials the kernel adds beside the descriptors.
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4), ScmCredentials(1))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(&envelope, &mut [std::io::IoSliceMut::new(&mut buf)], &mut control, rustix::net::RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for m in control.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    let [_file, page] = <[_; 2]>::try_from(fds).map_err(|f| format!("expected 2 descriptors, got {}", f.len()))?;
    let mut out = vec![match rustix::fs::ftruncate(&page, 0) {
        Ok(()) => "shrunk",
        Err(_) => "sealed",
    }
    .to_string()];
    let once = rx.make_send_once()?;
    right.send(Message::new(OP_EMUL_TOKEN).with_body(id.to_le_bytes().to_vec()).with_reply(once), Timeout::Infinite)?;
    out.push(match rx.recv(Timeout::After(Duration::from_secs(30))) {
        Ok(m) => match m.body().get(..4).map(|e| u32::from_le_bytes(e.try_into().expect("four bytes"))) {
            Some(0) => "token-ok".to_string(),
            Some(e) => format!("token-errno-{e}"),
            None => "token-garbled".to_string(),
        },
        Err(_) => "no-answer".to_string(),
    });
    println!("{}", out.join(" "));
    Ok(())
}

/// `emul-proc PID`: through the server passed as the inherited right
/// (serving `/`), opens and stats the server's own `/proc` files by
/// `proc/self` and by `proc/PID` (the server's pid); prints one word per
/// call: `kernel` (`EXDEV`: the library lets the program's own kernel do
/// it), `denied`, or `served` (the server did it, as itself).
fn proc_names(args: &[String]) -> Res {
    let pid = args.first().ok_or("usage: emul-proc PID")?;
    let client = Client::new(ferry::spawn::inherited()?);
    let word = |r: Result<(), i32>| match r {
        Err(libc::EXDEV) => "kernel".to_string(),
        Err(libc::EACCES) | Err(libc::EPERM) => "denied".to_string(),
        Err(e) => format!("errno-{e}"),
        Ok(()) => "served".to_string(),
    };
    let mut out = Vec::new();
    for name in ["proc/self/maps".to_string(), format!("proc/{pid}/maps")] {
        out.push(word(client.open(&name, libc::O_RDONLY, 0).map(drop)));
        out.push(word(client.stat(&name, false).map(drop)));
    }
    println!("{}", out.join(" "));
    Ok(())
}

/// `emul-write-suid WRITE TRUNCATE`: through the server passed as the
/// inherited right, opens WRITE for writing and writes a byte into it by
/// message (a segment write, which the server performs), and opens
/// TRUNCATE for writing and truncates it by message. Prints `wrote
/// truncated` (or the errno of what failed).
fn write_suid(args: &[String]) -> Res {
    let [write, truncate] = args else { return Err("usage: emul-write-suid WRITE TRUNCATE".into()) };
    let client = Client::new(ferry::spawn::inherited()?);
    let open = |name: &str| match client.open(name, libc::O_RDWR, 0) {
        Ok(Opened::File(f)) => Ok(f),
        Ok(_) => Err(format!("{name} is not a file")),
        Err(e) => Err(format!("open {name}: errno {e}")),
    };
    let (w, t) = (open(write)?, open(truncate)?);
    let mut out = vec![match client.sg_write(w.id, 0, b"x") {
        Ok(1) => "wrote".to_string(),
        Ok(n) => format!("wrote-{n}"),
        Err(e) => format!("write-errno-{e}"),
    }];
    out.push(match client.truncate(t.id, 1) {
        Ok(()) => "truncated".to_string(),
        Err(e) => format!("truncate-errno-{e}"),
    });
    println!("{}", out.join(" "));
    Ok(())
}

/// `process-target`: the process a process port is pointed at. Prints the
/// address of a 16-byte buffer, waits for a line on standard input, prints
/// the buffer as it is then (another process may have written it), and
/// exits at end of input. A right passed with `pass_right` stays at its
/// descriptor, for the other side to take.
fn process_target() -> Res {
    use std::io::BufRead;
    let buf: &'static mut [u8; 16] = Box::leak(Box::new(*b"original-bytes!!"));
    println!("{:x}", buf.as_ptr() as usize);
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    // SAFETY: reads our own buffer; volatile because another process wrote
    // it behind the compiler's back.
    let now: [u8; 16] = unsafe { std::ptr::read_volatile(buf as *const [u8; 16]) };
    println!("{}", String::from_utf8_lossy(&now));
    std::io::stdout().flush()?;
    line.clear();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(())
}

/// `emul-foreign ID THREADS`: as a hostile user, through the server passed
/// as the inherited right, holding as many descriptors as its hard limit
/// allows (less 1000), asks from THREADS threads (each over a channel of
/// its own) for segment reads of open file ID, another user's, until a
/// line comes on standard input. Prints `flooding` once they ask, then
/// how many were answered and how many refused.
fn foreign(args: &[String]) -> Res {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let (id, threads) = match args {
        [id, n] => (id.parse::<u64>()?, n.parse::<usize>()?),
        _ => return Err("usage: emul-foreign ID THREADS".into()),
    };
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let hard = limit.maximum.unwrap_or(1 << 20).min(1 << 20);
    rustix::process::setrlimit(rustix::process::Resource::Nofile, rustix::process::Rlimit { current: Some(hard), ..limit })?;
    let null = std::fs::File::open("/dev/null")?;
    let mut kept = Vec::new();
    while (kept.len() as u64) + 1000 < hard {
        match rustix::io::fcntl_dupfd_cloexec(&null, 0) {
            Ok(fd) => kept.push(fd),
            Err(_) => break,
        }
    }
    let right = ferry::spawn::inherited()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (client, stop, answered, refused) = (Client::new(right.try_clone().unwrap()), stop.clone(), answered.clone(), refused.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16];
                while !stop.load(Ordering::Relaxed) {
                    match client.sg_read(id, 0, &mut buf) {
                        Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                        Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    println!("flooding with {} descriptors held", kept.len());
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    println!("answered {} refused {}", answered.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    Ok(())
}
