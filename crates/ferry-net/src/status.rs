//! The network server's status query: what `ferry names` and `ferry stat`
//! show of links, remote names, proxies and copy-on-reference traffic.
//!
//! `ferry-netd` registers a send right to a status port in the local name
//! server under [`NAME`]; a client sends [`QUERY`] with a reply right and
//! gets [`REPLY`] with a [`Status`] in a small line-based text encoding
//! (tab-separated fields; names holding a tab or a newline are left out).
//! Access follows ferryd's rule that a user sees only what is theirs or
//! public: the daemon's own user (and root) sees everything; any other
//! user sees the links and their state, and its own use of the per-user
//! budgets, not the names, the table sizes, the traffic counters or other
//! users' budgets.

use std::time::Duration;

use ferry::{Event, Message, PortSet, ReceiveRight, RecvError, SendRight, Timeout};

use crate::node::{LinkInfo, NetError, NetStats, Node, UserUsage};

/// The name `ferry-netd` registers its status port under.
pub const NAME: &str = "ferry-netd";
/// Client → daemon: what is the status? (with a reply right).
pub const QUERY: u32 = 0x6e65_5301;
/// Daemon → client: the encoded [`Status`].
pub const REPLY: u32 = 0x6e65_5302;

/// What the network server shows of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Whether the asker may see everything (names, tables, counters), or
    /// only the links' state.
    pub full: bool,
    /// The links.
    pub links: Vec<LinkInfo>,
    /// Remote names registered here (`NAME@HOST`), each a proxy.
    pub imports: Vec<String>,
    /// Local names trusted peers may look up.
    pub exports: Vec<String>,
    /// Copy-on-reference traffic.
    pub stats: NetStats,
    /// Each local user's use of its budgets at each peer: every user's
    /// for a full status, only the asker's own otherwise.
    pub users: Vec<UserUsage>,
}

fn clean(s: &str) -> bool {
    !s.contains(['\t', '\n'])
}

impl Status {
    /// The status of `node` with the names it imported, as user `asker`
    /// (`None`: unknown) may see it.
    pub fn of(node: &Node, imports: &[String], asker: Option<u32>) -> Status {
        let me = rustix::process::getuid().as_raw();
        let full = asker.is_some_and(|u| u == me || u == 0);
        let mut links = node.links();
        let mut users = node.usage();
        if !full {
            for l in &mut links {
                *l = LinkInfo { peer: l.peer.clone(), up: l.up, ..LinkInfo::default() };
            }
            users.retain(|u| Some(u.uid) == asker);
            return Status { full, links, users, ..Status::default() };
        }
        let mut exports = node.exported();
        exports.sort();
        Status { full, links, imports: imports.to_vec(), exports, stats: node.stats(), users }
    }

    /// Encodes the status as lines of tab-separated fields.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("full\t{}\n", u8::from(self.full));
        for l in self.links.iter().filter(|l| clean(&l.peer)) {
            s += &format!(
                "link\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                l.peer,
                u8::from(l.up),
                l.imports,
                l.exports,
                l.regions_out,
                l.regions_in,
                l.wire_sent,
                l.wire_received,
                l.streams_waiting,
                l.window_growth
            );
        }
        for n in self.imports.iter().filter(|n| clean(n)) {
            s += &format!("import\t{n}\n");
        }
        for n in self.exports.iter().filter(|n| clean(n)) {
            s += &format!("export\t{n}\n");
        }
        for u in self.users.iter().filter(|u| clean(&u.peer)) {
            s += &format!("user\t{}\t{}\t{}\t{}\n", u.peer, u.uid, u.rights, u.regions);
        }
        let t = &self.stats;
        s += &format!("stats\t{}\t{}\t{}\t{}\t{}\n", t.bytes_fetched, t.fetches, t.bytes_served, t.regions_sent, t.regions_received);
        s += &format!("handshakes\t{}\t{}\t{}\n", t.handshakes, t.handshakes_turned_away, t.address_checks);
        s.into_bytes()
    }

    /// Decodes [`encode`](Self::encode)'s output.
    ///
    /// # Errors
    /// A line that is not of the expected shape.
    pub fn decode(b: &[u8]) -> Result<Status, String> {
        let text = std::str::from_utf8(b).map_err(|_| "status is not UTF-8".to_string())?;
        let mut st = Status::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let n = |i: usize| -> Result<u64, String> { f.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad status line {line:?}")) };
            match f[0] {
                "full" => st.full = n(1)? == 1,
                "link" if f.len() == 11 => st.links.push(LinkInfo {
                    peer: f[1].to_string(),
                    up: n(2)? == 1,
                    imports: n(3)? as usize,
                    exports: n(4)? as usize,
                    regions_out: n(5)? as usize,
                    regions_in: n(6)? as usize,
                    wire_sent: n(7)?,
                    wire_received: n(8)?,
                    streams_waiting: n(9)? as usize,
                    window_growth: n(10)?,
                    ..LinkInfo::default()
                }),
                "import" if f.len() == 2 => st.imports.push(f[1].to_string()),
                "export" if f.len() == 2 => st.exports.push(f[1].to_string()),
                "user" if f.len() == 5 => st.users.push(UserUsage {
                    peer: f[1].to_string(),
                    uid: u32::try_from(n(2)?).map_err(|_| format!("bad status line {line:?}"))?,
                    rights: n(3)? as usize,
                    regions: n(4)? as usize,
                }),
                "stats" if f.len() == 6 => {
                    st.stats = NetStats {
                        bytes_fetched: n(1)?,
                        fetches: n(2)?,
                        bytes_served: n(3)?,
                        regions_sent: n(4)?,
                        regions_received: n(5)?,
                        ..st.stats
                    }
                }
                "handshakes" if f.len() == 4 => {
                    st.stats = NetStats { handshakes: n(1)?, handshakes_turned_away: n(2)?, address_checks: n(3)?, ..st.stats }
                }
                _ => return Err(format!("bad status line {line:?}")),
            }
        }
        Ok(st)
    }
}

/// Ports of the status server one user may have at once (each a lookup
/// of the status name from a system name server that made it a port of
/// its own); past that, more are dropped and the user's rights to them
/// are dead names.
pub const PORTS_PER_USER: usize = 64;

/// The status port and the ports a system name server made for each
/// lookup of it ([`ferry::Bootstrap::register_system_service`]), served
/// together: a user who shuts down or fills its own right to the status
/// server leaves every other user's working.
///
/// Each user's ports are a set of their own, and the sets (and the status
/// port's, through which the name server hands over the ports) are served
/// in turn, one query from each that has one: a user that keeps every
/// port it may have full of queries holds another user's query up by one
/// answer, not by one answer for each of its ports. With one set for all,
/// root's query waited behind about one answer for every port the other
/// user kept busy, about a second a query under a flood.
#[derive(Debug)]
pub struct Server {
    /// The status port, in a set of its own.
    main: PortSet,
    /// Whether the main port may still get messages.
    main_open: bool,
    /// The ports made for each user's lookups, a set for each user, in the
    /// order they are served.
    users: Vec<(u32, PortSet)>,
    /// The set to serve first next time (0: the status port's, then each
    /// user's), so that each is served in turn.
    next: usize,
}

impl Server {
    /// A server for the status port `port`.
    ///
    /// # Errors
    /// The set's `epoll` cannot be made.
    pub fn new(port: ReceiveRight) -> std::io::Result<Server> {
        let mut main = PortSet::new()?;
        main.insert(port);
        Ok(Server { main, main_open: true, users: Vec::new(), next: 0 })
    }

    /// The set `i` (0: the status port's, then each user's).
    fn set(&mut self, i: usize) -> &mut PortSet {
        match i {
            0 => &mut self.main,
            i => &mut self.users[i - 1].1,
        }
    }

    /// Answers status queries until `timeout` passes with none (or forever
    /// with [`Timeout::Infinite`]), or nothing can arrive any more (every
    /// right to every port is gone); returns how many were answered.
    pub fn serve(&mut self, node: &Node, imports: &[String], timeout: Timeout) -> usize {
        let mut n = 0;
        loop {
            // The next set in turn that has something: one event of it.
            let sets = 1 + self.users.len();
            let mut got = None;
            for k in 0..sets {
                let i = (self.next + k) % sets;
                match self.set(i).wait(Timeout::Zero) {
                    Ok(e) => {
                        got = Some((i, e));
                        break;
                    }
                    Err(RecvError::Timeout) | Err(RecvError::BadMessage(_)) => {}
                    Err(_) => return n,
                }
            }
            let Some((i, event)) = got else {
                if !self.idle(timeout) {
                    return n;
                }
                continue;
            };
            self.next = i + 1;
            match event {
                Event::Message(_, mut m) if i == 0 && ferry::bootstrap::ServicePort::is(&m) => self.adopt(&mut m),
                // An answer sent on to this server by naming its port as a
                // reply right: never a query, and never answered.
                Event::Message(_, m) if ferry::idl::is_answer(m.op()) => ferry::idl::drop_answer("ferry-netd status server", &m),
                Event::Message(_, mut m) => {
                    let asker = m.sender().map(|c| c.uid);
                    if let (QUERY, Some(reply)) = (m.op(), m.take_reply()) {
                        let answer = Message::new(REPLY).with_body(Status::of(node, imports, asker).encode());
                        // The answer is the asker's message (its uid and
                        // gid, this process's pid), when this daemon may
                        // say so: the reply right may be the asker's proxy
                        // of a peer's port, and sent as the daemon, the
                        // answer's stream there was charged to root.
                        let _ = ferry::answering_as(m.sender(), || reply.send(answer, Timeout::Zero));
                        n += 1;
                    }
                }
                Event::NoSenders(id) => {
                    self.set(i).remove(id);
                    if i == 0 {
                        self.main_open = false;
                    } else if self.users[i - 1].1.is_empty() {
                        self.users.remove(i - 1);
                    }
                    if !self.main_open && self.users.is_empty() {
                        return n;
                    }
                }
                _ => {}
            }
        }
    }

    /// Waits until a set may have something, or `timeout` passes (false).
    fn idle(&mut self, timeout: Timeout) -> bool {
        // Each set's registrations brought up to date before it is polled.
        for i in 0..1 + self.users.len() {
            if self.set(i).ready_fd().is_err() {
                return false;
            }
        }
        let wait = match timeout {
            Timeout::Zero => return false,
            Timeout::After(d) => Some(rustix::event::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) }),
            Timeout::Infinite => None,
        };
        let mut fds: Vec<_> = std::iter::once(&self.main)
            .chain(self.users.iter().map(|(_, s)| s))
            .map(|s| rustix::event::PollFd::new(s, rustix::event::PollFlags::IN))
            .collect();
        loop {
            match rustix::event::poll(&mut fds, wait.as_ref()) {
                Ok(0) => return false,
                Ok(_) => return true,
                // A signal: nothing to serve yet, so waiting again for the
                // whole timeout only makes it longer.
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }

    /// Serves the port in `m` for the user it was made for, within that
    /// user's [`PORTS_PER_USER`].
    fn adopt(&mut self, m: &mut Message) {
        let Some(ferry::bootstrap::ServicePort { uid, port }) = ferry::bootstrap::ServicePort::take(m) else { return };
        let have = self.users.iter().find(|(u, _)| *u == uid).map_or(0, |(_, s)| s.len());
        if have >= PORTS_PER_USER {
            static SAID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let why = format!("ferry-netd: status ports made for user {uid}'s lookups are dropped: it has {have}, the most one user may");
            crate::node::say_once_a_minute(&SAID, &why);
            return;
        }
        let set = match self.users.iter().position(|(u, _)| *u == uid) {
            Some(i) => &mut self.users[i].1,
            None => match PortSet::new() {
                Ok(set) => {
                    self.users.push((uid, set));
                    &mut self.users.last_mut().expect("just pushed").1
                }
                Err(e) => return eprintln!("ferry-netd: a status port made for user {uid}'s lookup is dropped: {e}"),
            },
        };
        set.insert(port);
    }
}


/// Asks the network server behind `right` for its status (bounded: 5 s).
///
/// # Errors
/// [`NetError::Timeout`]; [`NetError::LinkLost`] if the daemon is gone;
/// [`NetError::Io`] for a malformed answer.
pub fn query(right: &SendRight) -> Result<Status, NetError> {
    let t = Timeout::After(Duration::from_secs(5));
    let (mut rx, tx) = ferry::port()?;
    drop(tx);
    let once = rx.make_send_once()?;
    right.send(Message::new(QUERY).with_reply(once), t).map_err(|e| NetError::LinkLost(e.into_error().to_string()))?;
    let r = rx.recv(t).map_err(|e| match e {
        RecvError::Timeout => NetError::Timeout,
        e => NetError::LinkLost(e.to_string()),
    })?;
    if r.op() != REPLY {
        return Err(NetError::Io(std::io::Error::other(format!("unexpected status reply op {:#x}", r.op()))));
    }
    Status::decode(r.body()).map_err(|e| NetError::Io(std::io::Error::other(e)))
}
