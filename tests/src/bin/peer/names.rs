//! Peer roles for the name-service hardening tests: an impostor that
//! listens where another user's name server should be, a program reaching
//! the default name server, and clients that push the server's budgets.
//!
//! - `impostor-listen DIR`: binds a name server at `DIR/bootstrap` (creating
//!   `DIR`), lets everyone reach it, prints `ready` and serves until killed.
//! - `default-connect`: `Bootstrap::connect()`, registers a port as `probe`,
//!   prints `registered` or `refused: ERROR`.
//! - `fill-names PREFIX MAX`: registers one port under `PREFIX-0`, `PREFIX-1`,
//!   ... until refused or MAX, prints `registered K` and `stopped: ERROR`,
//!   then `ready`, and keeps the port alive until killed.
//! - `hold-connections MAX`: opens connections (each makes one request) until
//!   refused or MAX, prints `connected K` and `stopped: ERROR`, then `ready`,
//!   and holds them until killed.
//! - `refused-connections N`: tries N connections (each making one
//!   request) that the server is expected to refuse, one after another, and
//!   prints `refused K`, then one line per other outcome (`other: ...`).
//! - `flood-connections MAX`: opens up to MAX raw connections without a
//!   request, stopping when a connect would block, prints `opened K`, and
//!   holds them until killed.
//! - `server-out-of-fds DIR`: with an open-file limit of 64, runs a name
//!   server (logging, no descriptor reserve) at `DIR/bootstrap` on a thread,
//!   then takes every descriptor left for the rest of the program (as a
//!   busy host program would), prints `ready`; a line on standard input
//!   gives them back (`freed`); serves until killed.
//! - `park-names PREFIX N`: registers N ports under `PREFIX-0` .. and
//!   parks each port's receiving socket in flight, inside the queue of the
//!   registered socket the name server holds (see [`port_parked`]); prints
//!   `parked N` and exits, leaving no process that holds any of them.
//! - `churn-connections N`: N times, one after another, connects,
//!   registers a fresh port as `churn`, and hangs up with the port gone;
//!   prints `churned K` (the registrations that succeeded).
//! - `hold-sockets N`: makes up to N Unix sockets (socket pairs), as many
//!   as its open-file limit allows, prints `holding K`, then `ready`, and
//!   holds them until killed.
//! - `deputy ECHO SECRET KEEP`: opens a connection of its own to the name
//!   server (version check done), then hands it as the reply right of
//!   requests to `ECHO`, a system name of a root server that replies with
//!   op + 1 and the body reversed (`server` in `core.rs`): op 1 with
//!   `SECRET` makes the reply a `lookup` (2) of it, op 3 with `KEEP` an
//!   `unregister` (4). Prints what the name server answered on the
//!   connection to each: `lookup: right` (and sends op 77 through the right
//!   got) or `lookup: ERROR`, `unregister: done` or `unregister: ERROR`;
//!   then `ready`.
//! - `files-deputy ECHO NAME`: makes `ECHO` (as for `deputy`) answer a
//!   request of op `OP_FILE_WRITE - 1` onto this user's own port of the
//!   file server (`files`), as a write-back of `NAME` with the contents
//!   `written by another user`; waits for the echo server to have
//!   answered it, then for the file server to answer an open of `NAME` on
//!   the same port (so the write-back was served first), prints what that
//!   open said (`open: LEN bytes` or `open: ERROR`), then `ready`.
//! - `unread-listings CONNS N`: registers names of 250 bytes until refused
//!   (so that its listing travels in a region), then over CONNS raw
//!   connections asks for the listing up to N times each without reading
//!   a reply, stopping on a connection when a send would block; prints
//!   `asked K` and `ready`, and holds everything until killed.
//! - `register-files PREFIX N`: looks up `files` N times and registers
//!   each right it gets (a port of the file server's, in the name
//!   server's own process) under `PREFIX-0` ..; prints `registered K
//!   refused R` and exits.

use std::time::Duration;

use ferry::{Bootstrap, NameServer};

use crate::Outcome;

type Res = Result<(), Box<dyn std::error::Error>>;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let num = |i: usize| arg(i).parse::<usize>().unwrap_or(0);
    Some(match role {
        "impostor-listen" => impostor(&arg(0)),
        "default-connect" => default_connect(),
        "fill-names" => fill_names(&arg(0), num(1)),
        "hold-connections" => hold_connections(num(0)),
        "flood-connections" => flood_connections(num(0)),
        "refused-connections" => refused_connections(num(0)),
        "server-out-of-fds" => server_out_of_fds(&arg(0)),
        "system-names" => system_names(&arg(0)),
        "park-names" => park_names(&arg(0), num(1)),
        "register-files" => register_files(&arg(0), num(1)),
        "churn-connections" => churn_connections(num(0)),
        "hold-sockets" => hold_sockets(num(0)),
        "unread-listings" => unread_listings(num(0), num(1)),
        "deputy" => deputy(&arg(0), &arg(1), &arg(2)),
        "files-deputy" => files_deputy(&arg(0), &arg(1)),
        _ => return None,
    })
}

/// The sockets this process holds, by descriptor number.
fn sockets() -> std::collections::HashSet<i32> {
    let mut v = std::collections::HashSet::new();
    for e in std::fs::read_dir("/proc/self/fd").into_iter().flatten().flatten() {
        if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")) {
            v.extend(e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()));
        }
    }
    v
}

/// A new port, and the descriptor of its receiving socket (which `rx`
/// owns: valid while it lives).
pub fn port_and_receiving_fd() -> Result<(ferry::ReceiveRight, ferry::SendRight, i32), Box<dyn std::error::Error>> {
    use std::os::fd::{AsFd, AsRawFd};
    let before = sockets();
    let (rx, tx) = ferry::port()?;
    let tx_fd = tx.as_fd().as_raw_fd();
    let new: Vec<i32> = sockets().difference(&before).copied().filter(|fd| *fd != tx_fd).collect();
    let [rx_fd] = new[..] else { return Err(format!("cannot tell the receiving socket among {new:?}").into()) };
    Ok((rx, tx, rx_fd))
}

/// A new port whose receiving socket is sent into the port's own sending
/// socket: written on the receiving end, the datagram lands in the queue
/// of the socket the send right is, carrying the receiving end in flight.
/// Whoever holds the send right then holds the receiving end too, through
/// its queue, so the port never hangs up: the kernel frees a socket in
/// flight only when what holds it is unreachable, and a server's socket
/// is not. The caller hands the send right to a server and drops the
/// receive right: no process of the caller's keeps the port alive.
pub fn port_parked() -> Result<(ferry::ReceiveRight, ferry::SendRight), Box<dyn std::error::Error>> {
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
    let before = sockets();
    let (rx, tx) = ferry::port()?;
    let tx_fd = tx.as_fd().as_raw_fd();
    let new: Vec<i32> = sockets().difference(&before).copied().filter(|fd| *fd != tx_fd).collect();
    let [rx_fd] = new[..] else { return Err(format!("cannot tell the receiving socket among {new:?}").into()) };
    // SAFETY: `rx_fd` is the receiving socket `rx` owns, open for as long
    // as `rx` is, which outlives this borrow.
    let end = unsafe { BorrowedFd::borrow_raw(rx_fd) };
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [end];
    control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(end, &[std::io::IoSlice::new(b"p")], &mut control, rustix::net::SendFlags::empty())?;
    Ok((rx, tx))
}

fn park_names(prefix: &str, n: usize) -> Res {
    let mut bs = Bootstrap::connect()?;
    for i in 0..n {
        let (rx, tx) = port_parked()?;
        bs.register(&format!("{prefix}-{i}"), &tx)?;
        drop((rx, tx));
    }
    println!("parked {n}");
    Ok(())
}

fn register_files(prefix: &str, n: usize) -> Res {
    let mut bs = Bootstrap::connect()?;
    let (mut registered, mut refused) = (0, 0);
    for i in 0..n {
        let files = bs.lookup("files")?;
        match bs.register(&format!("{prefix}-{i}"), &files) {
            Ok(()) => registered += 1,
            Err(_) => refused += 1,
        }
    }
    println!("registered {registered} refused {refused}");
    Ok(())
}

fn wait_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn impostor(dir: &str) -> Res {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::path::Path::new(dir);
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let path = dir.join("bootstrap");
    NameServer::bind(&path)?.spawn()?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
    println!("ready");
    wait_forever()
}

fn default_connect() -> Res {
    let (_rx, tx) = ferry::port()?;
    match Bootstrap::connect().and_then(|mut b| b.register("probe", &tx)) {
        Ok(()) => println!("registered"),
        Err(e) => println!("refused: {e}"),
    }
    Ok(())
}

fn fill_names(prefix: &str, max: usize) -> Res {
    let (_rx, tx) = ferry::port()?;
    let mut bs = Bootstrap::connect()?;
    let mut n = 0;
    let mut why = String::from("none");
    while n < max {
        match bs.register(&format!("{prefix}-{n}"), &tx) {
            Ok(()) => n += 1,
            Err(e) => {
                why = format!("{e:?}");
                break;
            }
        }
    }
    println!("registered {n}");
    println!("stopped: {why}");
    // Lookups of this user's own names are still served.
    bs.lookup(&format!("{prefix}-0"))?;
    println!("ready");
    wait_forever()
}

/// A connection to the default name server that has made one request.
fn connect_and_ask(path: &std::path::Path) -> Result<Bootstrap, ferry::NameError> {
    Bootstrap::connect_to(path).and_then(|mut b| b.list().map(|_| b))
}

fn churn_connections(n: usize) -> Res {
    let path = ferry::bootstrap::default_path();
    let mut churned = 0;
    for _ in 0..n {
        let mut b = Bootstrap::connect_to(&path)?;
        let (rx, tx) = ferry::port()?;
        if b.register("churn", &tx).is_ok() {
            churned += 1;
        }
        drop((tx, rx));
        // The next registration waits for this one to go with its port.
        while b.lookup("churn").is_ok() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    println!("churned {churned}");
    Ok(())
}

fn hold_sockets(n: usize) -> Res {
    let mut held = Vec::new();
    while held.len() + 2 <= n {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        match rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None) {
            Ok(pair) => held.push(pair),
            Err(_) => break,
        }
    }
    println!("holding {}", held.len() * 2);
    println!("ready");
    wait_forever()
}

fn unread_listings(conns: usize, n: usize) -> Res {
    use rustix::net::{AddressFamily, SendFlags, SocketAddrUnix, SocketFlags, SocketType};
    let (_rx, tx) = ferry::port()?;
    let mut bs = Bootstrap::connect()?;
    let long = "x".repeat(240);
    let mut i = 0;
    while bs.register(&format!("{long}-{i}"), &tx).is_ok() {
        i += 1;
    }
    let path = ferry::bootstrap::default_path();
    let datagram = |m: ferry::Message| {
        let mut out = Vec::new();
        ferry::wire::encode(&mut out, m.op(), 0, &[], m.body());
        out
    };
    let hello = datagram(ferry::idl::hello_request::<ferry::bootstrap::protocol::Protocol>());
    // `list`, operation 3 of the protocol, takes no arguments.
    let list = datagram(ferry::Message::new(3));
    let (mut held, mut asked) = (Vec::new(), 0);
    for _ in 0..conns {
        let sock = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
        if rustix::net::connect(&sock, &SocketAddrUnix::new(&path)?).is_err() {
            break;
        }
        rustix::net::send(&sock, &hello, SendFlags::empty())?;
        let mut buf = vec![0u8; 70_000];
        rustix::net::recv(&sock, &mut buf, rustix::net::RecvFlags::empty())?;
        for _ in 0..n {
            match rustix::net::send(&sock, &list, SendFlags::DONTWAIT) {
                Ok(_) => asked += 1,
                Err(_) => break,
            }
        }
        held.push(sock);
    }
    println!("registered {i} asked {asked}");
    println!("ready");
    wait_forever()
}

fn hold_connections(max: usize) -> Res {
    let path = ferry::bootstrap::default_path();
    crate::hold_until_refused(max, || connect_and_ask(&path))
}

fn refused_connections(n: usize) -> Res {
    let path = ferry::bootstrap::default_path();
    let mut refused = 0;
    let mut other = Vec::new();
    for _ in 0..n {
        match connect_and_ask(&path) {
            Err(ferry::NameError::LimitReached { what: ferry::Limit::Connections, .. }) => refused += 1,
            Err(e) => other.push(format!("{e:?}")),
            Ok(_) => other.push("accepted".into()),
        }
    }
    println!("refused {refused}");
    for o in other {
        println!("other: {o}");
    }
    println!("ready");
    Ok(())
}

fn flood_connections(max: usize) -> Res {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let path = ferry::bootstrap::default_path();
    let addr = SocketAddrUnix::new(&path)?;
    let mut held = Vec::new();
    while held.len() < max {
        let s = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK, None)?;
        match rustix::net::connect(&s, &addr) {
            Ok(()) => held.push(s),
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => return Err(e.into()),
        }
    }
    println!("opened {}", held.len());
    println!("ready");
    wait_forever()
}

fn server_out_of_fds(dir: &str) -> Res {
    use rustix::process::{setrlimit, Resource, Rlimit};
    setrlimit(Resource::Nofile, Rlimit { current: Some(64), maximum: Some(64) })?;
    let mut server = NameServer::bind(&std::path::Path::new(dir).join("bootstrap"))?;
    server.set_limits(ferry::Limits { names_per_user: 1000, connections_per_user: 1000, fd_reserve: 0 });
    server.set_logging(true);
    server.spawn()?;
    let mut taken = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        taken.push(f);
    }
    println!("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    drop(taken);
    println!("freed");
    wait_forever()
}

/// As a user other than root, at the default name server: sends op 21 to
/// the system name `name` (root's), tries to register a system name and a
/// system service of its own (`register_system: …`,
/// `register_system_service: …`), then registers `name` in its own scope and
/// says whether its lookups now find its own port (`own name first: …`).
fn system_names(name: &str) -> Res {
    let mut bs = Bootstrap::connect()?;
    bs.lookup(name)?.send(ferry::Message::new(21), ferry::Timeout::After(Duration::from_secs(10)))?;
    let (mut rx, tx) = ferry::port()?;
    match bs.register_system("from-another-user", &tx) {
        Ok(()) => println!("register_system: registered"),
        Err(e) => println!("register_system: {e:?}"),
    }
    match bs.register_system_service("from-another-user", &tx) {
        Ok(()) => println!("register_system_service: registered"),
        Err(e) => println!("register_system_service: {e:?}"),
    }
    bs.register(name, &tx)?;
    bs.lookup(name)?.send(ferry::Message::new(22), ferry::Timeout::After(Duration::from_secs(10)))?;
    let own = rx.recv(ferry::Timeout::After(Duration::from_secs(10))).is_ok_and(|m| m.op() == 22);
    println!("own name first: {own}");
    println!("ready");
    Ok(())
}

/// Puts a second descriptor of `sock` where `right`'s own is, so that what
/// is sent or received through `right` goes through `sock`.
fn alias(sock: &std::os::fd::OwnedFd, right: std::os::fd::BorrowedFd<'_>) -> Res {
    use std::os::fd::AsRawFd;
    // SAFETY: both descriptors are open for the whole call (`sock` is owned
    // by the caller, `right` borrowed from a right the caller holds); dup2
    // replaces the right's descriptor with another of `sock`'s, which the
    // right then owns and closes as it would have its own.
    if unsafe { libc::dup2(sock.as_raw_fd(), right.as_raw_fd()) } < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Makes the root server `echo` answer onto this user's own connection to
/// the name server (see `deputy` in the module's list of roles).
fn deputy(echo: &str, secret: &str, keep: &str) -> Res {
    use ferry::bootstrap::{protocol, Refusal};
    use ferry::idl::decode_reply;
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    use std::os::fd::AsFd;
    let wait = ferry::Timeout::After(Duration::from_secs(10));
    let echo = Bootstrap::connect()?.lookup(echo)?;
    let sock = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
    rustix::net::sockopt::set_socket_passcred(&sock, true)?;
    rustix::net::connect(&sock, &SocketAddrUnix::new(ferry::bootstrap::default_path())?)?;
    // The connection, as a right to send on, and (one for each answer) a
    // reply receiver to receive on.
    let (_unused, conn_tx) = ferry::port()?;
    alias(&sock, conn_tx.as_fd())?;
    let answer = || -> Result<ferry::Message, Box<dyn std::error::Error>> {
        let (mut rx, _unused) = ferry::reply_pair()?;
        alias(&sock, rx.as_fd())?;
        Ok(rx.recv(wait)?)
    };
    conn_tx.send(ferry::idl::hello_request::<protocol::Protocol>(), wait)?;
    ferry::idl::hello_check::<protocol::Protocol>(answer()?)?;
    // A request as the name service's own client encodes it, taken from a
    // port of this program's; reversed, the body the echo server turns it
    // back into.
    let encoded = |call: &dyn Fn(&mut protocol::Client<ferry::idl::PortChannel>)| -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let (mut rx, tx) = ferry::port()?;
        let mut chan = ferry::idl::PortChannel::new(tx);
        chan.set_timeout(ferry::Timeout::Zero);
        call(&mut protocol::Client::after_hello(chan, 4));
        let mut b = rx.recv(wait)?.body().to_vec();
        b.reverse();
        Ok(b)
    };
    let ask = |op: u32, body: Vec<u8>| -> Result<ferry::Message, Box<dyn std::error::Error>> {
        let (_unused, once) = ferry::reply_pair()?;
        alias(&sock, once.as_fd())?;
        echo.send(ferry::Message::new(op).with_body(body).with_reply(once), wait)?;
        answer()
    };
    match decode_reply::<ferry::SendRight, Refusal>(ask(1, encoded(&|c| drop(c.lookup(secret.to_owned())))?)?)? {
        Ok(right) => {
            right.send(ferry::Message::new(77), wait)?;
            println!("lookup: right");
        }
        Err(e) => println!("lookup: {e:?}"),
    }
    match decode_reply::<(), Refusal>(ask(3, encoded(&|c| drop(c.unregister(keep.to_owned())))?)?)? {
        Ok(()) => println!("unregister: done"),
        Err(e) => println!("unregister: {e:?}"),
    }
    println!("ready");
    Ok(())
}

/// Makes the root server `echo` send a write-back of `name` to this user's
/// own port of the file server (see `files-deputy` in the module's list).
fn files_deputy(echo: &str, name: &str) -> Res {
    let wait = ferry::Timeout::After(Duration::from_secs(10));
    let mut bs = Bootstrap::connect()?;
    let echo = bs.lookup(echo)?;
    let files = bs.lookup("files")?;
    let mut body = (name.len() as u64).to_le_bytes().to_vec();
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(b"written by another user");
    body.reverse();
    let op = ferry::fileserver::OP_FILE_WRITE - 1;
    echo.send(ferry::Message::new(op).with_body(body).with_reply(files.try_clone()?), wait)?;
    // The echo server answers in order: once it answered this, it sent
    // the one before.
    let (mut done, once) = ferry::reply_pair()?;
    echo.send(ferry::Message::new(0).with_reply(once), wait)?;
    done.recv(wait)?;
    let fs = ferry::fileserver::FileClient::new(files).with_timeout(wait);
    match fs.open(name) {
        Ok(f) => println!("open: {} bytes", f.as_slice().len()),
        Err(e) => println!("open: {e}"),
    }
    println!("ready");
    Ok(())
}
