//! The driver: links over QUIC, proxy ports, exported names.
//!
//! A [`Node`] owns a QUIC endpoint (`quinn`, TLS 1.3 by `rustls` with the
//! `ring` provider, mutual authentication by pinned certificates, see
//! [`crate::tls`]) and a small tokio runtime. For each peer it keeps one
//! connection and one [`Link`] state machine; everything the protocol
//! decides happens in the state machine, and this module only moves frames
//! and rights:
//!
//! - a bidirectional **control stream** (opened by the accepting side)
//!   carries lookups, answers, releases and death notices;
//! - every destination port gets its **own unidirectional stream**, so
//!   messages to one port stay in order and a slow port (whose queue is
//!   full) stalls only its stream: the reader awaits the local send before
//!   reading on, QUIC flow control fills, and the sending side's proxy stops
//!   being drained, which pushes back on the local sender;
//! - each frame on a stream is a `u32` little-endian length and the frame.
//!
//! An imported port becomes a local **proxy port**: a task receives from it
//! and forwards each message; when its last local send right is gone
//! (no-senders) the reference is released; when the remote port dies, or
//! the link drops (QUIC idle timeout, peer gone), every proxy's receive
//! right is destroyed, so local holders see a dead name.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry::tokio::{AsyncReceiveRight, AsyncReplyReceiver, AsyncSendRight};
use ferry::{Item, Message, RecvError, RegionItem, Reply, SendOnceRight, SendRight, Timeout};
use tokio::sync::{oneshot, watch};

use crate::budget::{share_left, Budgets, Limits, Owners, LOOKUPS};
use crate::cor::{self, Counters, Fetcher};
use crate::flow::{self, MAX_WINDOW, SMALL, WINDOW};
use crate::frame::{self, Cap, Frame, Part, MAX_EAGER_REGION, MAX_FRAME};
use crate::inflight::InFlight;
use crate::link::{Event, Incoming, Key, Link, LinkError, Outgoing, Store};
use crate::tls::{self, Identity, Peer};
use crate::turns;

/// How a node is set up.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's certificate and key.
    pub identity: Identity,
    /// The peers it trusts (and the names it calls them by).
    pub peers: Vec<Peer>,
    /// The UDP address to listen on (port 0 picks one).
    pub listen: SocketAddr,
    /// Time after which a silent link is declared dead (its proxies become
    /// dead names). Keep-alives are sent at a third of it.
    pub idle_timeout: Duration,
    /// Bound on connecting, on each lookup, and on each step of a region's
    /// fetch (opening its stream, and each mebibyte of the answer).
    pub op_timeout: Duration,
    /// Most references to this host's ports one local user (by the
    /// kernel-reported uid of the messages it sends to proxies) may have
    /// sent to one peer and not yet seen let go. Every right sent counts,
    /// a right sent again counts again: each arrival is a proxy on the far
    /// side, which holds at most `max_proxies_per_peer` of this host's, so
    /// the budget is what keeps one user from taking all of them (with the
    /// defaults, a quarter). Besides it, a user may hold at most half of
    /// the peer's proxies the other users leave, so users together cannot
    /// take them all either. It also bounds the rights this node keeps for
    /// that user's exports (each a kept right and a watcher). A message
    /// that would pass either is refused with [`Refusal::OverBudget`].
    pub max_exports_per_user: usize,
    /// Most regions one local user may have this node keep for one peer at
    /// once, sent by reference (each keeps the region's memory alive until
    /// the peer lets go). Past it: [`Refusal::OverBudget`].
    pub max_regions_per_user: usize,
    /// Most references to one peer's ports this node holds at once, each a
    /// proxy port with a descriptor and a task here. Past it, a right from
    /// that peer arrives as a dead name and its reference goes back at
    /// once, so one peer cannot take every descriptor of the host. Each
    /// proxy counts against the local user that made the port its right
    /// came to (lookups' against no user), who may have at most half of
    /// what the others leave; past it, the right arrives dead too. The
    /// peer is taken to hold as many of this host's at most, for the
    /// per-user shares of [`max_exports_per_user`](Self::max_exports_per_user):
    /// set it alike on both.
    pub max_proxies_per_peer: u64,
    /// Most bytes by which one peer's message streams' windows may grow
    /// past their first 64 KiB, together (at least two frames of
    /// [`crate::frame::MAX_FRAME`]; smaller values are raised to it): a
    /// stream holds at most its window of frames not yet delivered. Each
    /// stream's growth counts against the local user that owns its
    /// destination port, who may hold at most half of what the other users
    /// leave, so a user whose ports never read stalls only its own
    /// messages from the peer. Past it, that user's streams grow no more,
    /// and a frame a window does not cover waits at the peer's sender
    /// (`docs/network.md`, "Flow control").
    pub max_frame_bytes_per_peer: usize,
    /// Most message streams (one per destination port, and one for all
    /// send-once rights) a peer may open to this node at once; the peer is
    /// taken to allow as many, so set it alike on both. One local user may
    /// open at most half of what the other users leave of them, so another
    /// user's first message to a port always finds a stream; past it,
    /// [`Refusal::OverBudget`]. A stream stays open while this node holds
    /// a proxy for its port.
    pub max_streams_per_peer: u32,
    /// Most of one peer's regions received by reference this node serves
    /// at once (each a thread and a pager here, until every right to it
    /// is gone). Each counts against the user that made the port it was
    /// sent to, who may have at most half of what the other users leave;
    /// past either, the region is given back at once and its item is lost
    /// (logged), so one user keeping regions cannot make another's arrive
    /// without theirs.
    pub max_regions_in_per_peer: usize,
    /// The credentials the peer's messages carry when this node delivers
    /// them to local ports ([`Message::sender`](ferry::Message::sender)),
    /// or `None` for this process's own. A local server that decides by
    /// its sender's credentials (a file server acting as the sender, say)
    /// must never act as this node's user for another host: by default a
    /// node run by root delivers as uid and gid 65534 (nobody)
    /// ([`NodeConfig::new`]). The pid is always this process's.
    pub deliver_as: Option<ferry::Credentials>,
}

/// The user and group a node run by root delivers other hosts' messages
/// as (`nobody`).
pub const DELIVER_AS_UID: u32 = 65534;

impl NodeConfig {
    /// A configuration with defaults: 10 s idle timeout, 5 s per operation,
    /// 4096 rights held by the peer and 64 regions by reference per local user and
    /// peer, 16 384 proxies, 256 MiB of message frames, 4096 message
    /// streams and 256 regions received by reference per peer; run by
    /// root, the peer's messages are delivered as uid and gid
    /// [`DELIVER_AS_UID`] (see [`NodeConfig::deliver_as`]).
    pub fn new(identity: Identity, peers: Vec<Peer>, listen: SocketAddr) -> NodeConfig {
        NodeConfig {
            identity,
            peers,
            listen,
            idle_timeout: Duration::from_secs(10),
            op_timeout: Duration::from_secs(5),
            max_exports_per_user: 4096,
            max_regions_per_user: 64,
            max_proxies_per_peer: crate::link::DEFAULT_MAX_PROXIES,
            max_frame_bytes_per_peer: DEFAULT_FRAME_BUDGET,
            max_streams_per_peer: 4096,
            max_regions_in_per_peer: 256,
            deliver_as: rustix::process::geteuid().is_root().then(|| ferry::Credentials {
                pid: std::process::id() as i32,
                uid: DELIVER_AS_UID,
                gid: DELIVER_AS_UID,
            }),
        }
    }
}

/// Errors of the node's operations.
#[derive(Debug)]
pub enum NetError {
    /// The peer name is not on the trusted list.
    UnknownPeer(String),
    /// No link to that peer is up.
    NotLinked(String),
    /// A remote name is not of the form `name@host`.
    BadName(String),
    /// The peer does not export that name.
    NotExported(String),
    /// The handshake failed or the peer refused this node.
    Refused(String),
    /// The operation did not finish in time.
    Timeout,
    /// The link broke during the operation.
    LinkLost(String),
    /// A right that should name a region received by reference does not
    /// ([`crate::RemoteRegion::open`]), or its server answered out of turn.
    NotARegion(String),
    /// This node already holds as many references to the peer's ports as
    /// it may ([`NodeConfig::max_proxies_per_peer`]).
    TooManyProxies(String),
    /// A local failure (sockets, ports, TLS setup).
    Io(io::Error),
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::UnknownPeer(p) => write!(f, "peer {p:?} is not on the trusted list"),
            NetError::NotLinked(p) => write!(f, "no link to peer {p:?}: connect first"),
            NetError::BadName(n) => write!(f, "remote name {n:?} is not of the form name@host"),
            NetError::NotExported(n) => write!(f, "{n} is not exported by its host"),
            NetError::Refused(why) => write!(f, "link refused: {why}"),
            NetError::Timeout => write!(f, "the operation timed out"),
            NetError::LinkLost(why) => write!(f, "link lost: {why}"),
            NetError::NotARegion(why) => write!(f, "not a region received by reference: {why}"),
            NetError::TooManyProxies(p) => write!(f, "this node holds as many of {p}'s ports as it may (max_proxies_per_peer)"),
            NetError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for NetError {}

impl From<io::Error> for NetError {
    fn from(e: io::Error) -> Self {
        NetError::Io(e)
    }
}

fn other(e: impl fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The identity of the port behind a send right (its socket's device and
/// inode, shared by every send right to the port).
pub fn key_of(fd: BorrowedFd<'_>) -> io::Result<Key> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// The operation code of the message a network server sends back on a
/// message's reply right when it refuses to carry that message across
/// ([`Refusal::of`] reads it).
pub const REFUSED: u32 = 0x6e65_7f01;

/// Why the network server refused to carry a message to another host. The
/// refusal happens on the sender's host, before anything of the message
/// leaves it. If the message has a reply right, the sender gets a message
/// of op [`REFUSED`] on it (the body: the code as a little-endian `u32`,
/// then the reason in UTF-8) carrying the refused message's rights and
/// regions back, in their order (all of them, except after a local
/// failure while taking them, [`Refusal::Failed`]). A message without a
/// reply right is dropped and logged, and its rights destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It carries a receive right: receive rights do not cross hosts.
    ReceiveRight,
    /// It carries an item that only makes sense on one host (a pager
    /// descriptor).
    OtherItem,
    /// It carries a lent or shared region over the eager limit, which its
    /// sender could change while the far side fetches it; send it by copy
    /// or move.
    MutableRegion,
    /// A local failure while translating it (out of descriptors, memory).
    Failed,
    /// Its sender's user already has as many rights held by this peer, or
    /// regions kept for it, as the node allows one user
    /// ([`NodeConfig::max_exports_per_user`],
    /// [`NodeConfig::max_regions_per_user`]); they are freed as the peer
    /// lets go.
    OverBudget,
    /// It is larger than a link carries in one message: its body and
    /// eager regions (those of up to 16 MiB) together above the frame limit
    /// ([`frame::MAX_FRAME`], 40 MiB), or a region above the largest sent
    /// by reference ([`frame::MAX_REMOTE_REGION`], 1 TiB). The peer would
    /// close the link on such a frame, for every user of it.
    TooLarge,
}

impl Refusal {
    fn code(self) -> u32 {
        match self {
            Refusal::ReceiveRight => 1,
            Refusal::OtherItem => 2,
            Refusal::MutableRegion => 3,
            Refusal::Failed => 4,
            Refusal::OverBudget => 5,
            Refusal::TooLarge => 6,
        }
    }

    fn message(self, why: &str) -> Message {
        let mut body = self.code().to_le_bytes().to_vec();
        body.extend_from_slice(why.as_bytes());
        Message::new(REFUSED).with_body(body)
    }

    /// Reads a refusal from a reply: the refusal and its reason, or `None`
    /// if `m` is not one.
    pub fn of(m: &Message) -> Option<(Refusal, String)> {
        if m.op() != REFUSED || m.body().len() < 4 {
            return None;
        }
        let code = u32::from_le_bytes(m.body()[..4].try_into().ok()?);
        let r = match code {
            1 => Refusal::ReceiveRight,
            2 => Refusal::OtherItem,
            3 => Refusal::MutableRegion,
            4 => Refusal::Failed,
            5 => Refusal::OverBudget,
            6 => Refusal::TooLarge,
            _ => return None,
        };
        Some((r, String::from_utf8_lossy(&m.body()[4..]).into_owned()))
    }
}

/// What a link shows of itself ([`Node::links`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinkInfo {
    /// The peer's name.
    pub peer: String,
    /// Whether the link is up.
    pub up: bool,
    /// Peer ports with proxies here.
    pub imports: usize,
    /// Local ports the peer holds references to.
    pub exports: usize,
    /// Regions this node sent by reference that the peer may still fetch.
    pub regions_out: usize,
    /// The peer's regions served here (received by reference).
    pub regions_in: usize,
    /// UDP bytes this node sent on the link (QUIC, TLS and all).
    pub wire_sent: u64,
    /// UDP bytes this node received on the link.
    pub wire_received: u64,
    /// This node's message streams to the peer whose sender waits for
    /// credit now: their ports on the peer's host are not reading, or their
    /// owners' shares there are full.
    pub streams_waiting: usize,
    /// Bytes by which the peer's message streams' windows have grown here,
    /// charged to the local users their ports belong to
    /// ([`NodeConfig::max_frame_bytes_per_peer`]).
    pub window_growth: u64,
    /// Lookups of the peer's names that timed out whose answers this node
    /// still watches for by id, to give back a right a late answer carries.
    pub late_lookups: usize,
}

/// What one local user has outstanding at one peer ([`Node::usage`]): what
/// the per-user budgets count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserUsage {
    /// The peer's name.
    pub peer: String,
    /// The local user, by the kernel-reported uid of what it sent.
    pub uid: u32,
    /// References to this host's ports that the user sent and the peer has
    /// not let go of; a right sent twice counts twice
    /// ([`NodeConfig::max_exports_per_user`]).
    pub rights: usize,
    /// Regions the user sent by reference that this node keeps for the
    /// peer ([`NodeConfig::max_regions_per_user`]).
    pub regions: usize,
}

/// Copy-on-reference traffic of a node, since it started ([`Node::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Bytes of remote regions fetched from peers (on demand or whole).
    pub bytes_fetched: u64,
    /// Fetch requests sent (one per cluster fault, or per whole fetch).
    pub fetches: u64,
    /// Bytes of this node's regions sent to peers that fetched them.
    pub bytes_served: u64,
    /// Regions sent by reference.
    pub regions_sent: u64,
    /// Regions received by reference.
    pub regions_received: u64,
    /// TLS handshakes started with hosts that asked to link
    /// ([`crate::gate`]).
    pub handshakes: u64,
    /// Attempts to link ignored past a bound of [`crate::gate`].
    pub handshakes_turned_away: u64,
    /// Attempts whose address was asked to prove itself first (a QUIC
    /// Retry).
    pub address_checks: u64,
}

/// A network node: exports names, links to peers, proxies their ports.
#[derive(Debug)]
pub struct Node {
    rt: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
    endpoint: quinn::Endpoint,
}

#[derive(Debug)]
struct Shared {
    config: NodeConfig,
    names: Mutex<HashMap<String, SendRight>>,
    links: Mutex<HashMap<String, Arc<Conn>>>,
    counters: Arc<Counters>,
    /// Which attempts to link may start a handshake.
    gate: crate::gate::Gate,
    /// Mappings and copies of the regions this node serves, per local
    /// user, across all of them ([`REGION_USES_PER_USER`]).
    region_uses: ferry::pager::SharedBudget,
    /// The user each port this node serves for one is charged to ([`MadeFor`]).
    made_for: MadeFor,
}

/// The ports this node made or took to serve for a local user, by key: the
/// proxies of rights sent to that user's ports, and the ports a name
/// server made for that user's lookups of an import. Their sockets are
/// the node's (or the name server's), so `SO_PEERCRED` names root for a
/// node run by root: a user that passed one on to another peer had that
/// peer's traffic to it charged to root's shares there. Kept while the
/// proxy serves.
type MadeFor = Arc<Mutex<HashMap<Key, u32>>>;

/// A right kept for an export.
#[derive(Debug)]
enum Held {
    Send {
        right: Arc<AsyncSendRight>,
        watch: tokio::task::JoinHandle<()>,
        /// The user that made the port (`SO_PEERCRED` of its socket), whose
        /// share of the link's frame bytes its messages wait in.
        owner: u32,
    },
    Once {
        right: SendOnceRight,
        /// The user that made the right (`SO_PEERCRED` of its socket).
        owner: u32,
    },
}

#[derive(Debug)]
struct State {
    link: Link,
    held: HashMap<u64, Held>,
    kills: HashMap<u64, watch::Sender<bool>>,
    /// The message streams this node writes, by [`stream_key`].
    streams: HashMap<u64, Arc<OutStream>>,
    /// Their credit, by QUIC stream id, where the peer's
    /// [`Frame::Credit`]s and [`Frame::Grant`]s name them.
    out_flows: HashMap<u64, Arc<flow::Out>>,
    lookups: HashMap<u64, oneshot::Sender<Answer>>,
    /// Regions sent by reference, kept (their sealed memfds, read for the
    /// peer's fetches with `pread`) until the peer releases them.
    regions: HashMap<u64, Arc<RegionItem>>,
    /// The peer's regions served here: the flag that stops their servers,
    /// and the user that made the port they were sent to.
    remote_regions: HashMap<u64, (Arc<AtomicBool>, u32)>,
    /// What each local user has outstanding at the peer.
    budgets: Budgets,
    /// The user each proxy here is charged to (the user that made the
    /// port its right came to), by the proxy's identity (none for a
    /// send-once right's) and import.
    proxy_owners: Owners<(Option<Key>, u64)>,
    /// Of those, the ports made for lookups that each user has
    /// ([`ADOPTED_PER_USER`]).
    adopted: HashMap<u32, usize>,
}


impl State {
    /// The kill switch of import `import`'s proxies (made with the first
    /// proxy), for a new proxy's task to watch.
    fn kill_switch(&mut self, import: u64) -> watch::Receiver<bool> {
        self.kills.entry(import).or_insert_with(|| watch::channel(false).0).subscribe()
    }

    /// The user whose share a frame for export `export` is charged to:
    /// none for a reply (a send-once right's, delivered as soon as it is
    /// read, so holding bytes only in flight), else the port's owner.
    fn charged_to(&self, export: u64) -> Option<u32> {
        match self.held.get(&export) {
            Some(Held::Once { .. }) => None,
            _ => Some(self.owner(export)),
        }
    }

    /// The user that made the port behind export `export`.
    fn owner(&self, export: u64) -> u32 {
        match self.held.get(&export) {
            Some(Held::Send { owner, .. } | Held::Once { owner, .. }) => *owner,
            None => UNKNOWN_OWNER,
        }
    }

    /// Finishes the message stream under `key` (dropped, it ends cleanly
    /// once its last frame is written); a writer waiting for its credit
    /// gives up.
    fn drop_stream(&mut self, key: u64) {
        if let Some(s) = self.streams.remove(&key) {
            self.out_flows.remove(&s.id);
            s.flow.close();
        }
    }

    /// Once import `import` is gone (released, used up), finishes its
    /// stream and forgets its proxies' kill switch.
    fn forget_if_gone(&mut self, import: u64) {
        if !self.link.import_alive(import) {
            self.drop_stream(import);
            self.budgets.refund_stream(import);
            self.kills.remove(&import);
        }
    }
}

/// A message stream this node writes: the QUIC stream, and the credit the
/// peer gives it ([`crate::flow`]).
#[derive(Debug)]
struct OutStream {
    /// Its QUIC stream id.
    id: u64,
    send: tokio::sync::Mutex<quinn::SendStream>,
    flow: Arc<flow::Out>,
    /// Its writers' turns by user ([`crate::turns`]), taken before `send`.
    turns: turns::Turns,
}

#[derive(Debug)]
struct Conn {
    peer: String,
    conn: quinn::Connection,
    control: tokio::sync::Mutex<quinn::SendStream>,
    state: Mutex<State>,
    counters: Arc<Counters>,
    /// Per-user budgets at this peer.
    limits: Limits,
    /// The operation timeout: how long a control frame may wait to be
    /// written before the link is given up as stalled.
    op_timeout: Duration,
    /// What the peer's message streams' windows may grow by, shared among
    /// the local users they are for ([`NodeConfig::max_frame_bytes_per_peer`]).
    frames: Arc<InFlight>,
    /// The credit given to each of the peer's message streams, by its QUIC
    /// stream id (`flow`).
    ins: Mutex<HashMap<u64, flow::In>>,
    /// Deliveries to send-once rights that wait for room, by the user
    /// that made each right ([`ONCE_WAITS_PER_USER`]).
    once_waits: Mutex<HashMap<u32, usize>>,
    /// Descriptors held by messages waiting to cross, by the user that sent
    /// them ([`FDS_WAITING_PER_USER`]).
    waiting_fds: Mutex<HashMap<u32, usize>>,
    /// The node's ports served for users, all links' ([`MadeFor`]).
    made_for: MadeFor,
}

/// Deliveries to one user's send-once rights from one peer that may wait
/// at once, each on a thread of its own for up to the operation timeout.
/// A send-once right's socket holds its one message, so only a holder
/// that wrote to it itself (through a copy of its descriptor) makes one
/// wait; past these, such a reply is dropped.
pub const ONCE_WAITS_PER_USER: usize = 16;

/// Most bytes by which one link's message streams' windows may grow past
/// their first 64 KiB, together, by default
/// ([`NodeConfig::max_frame_bytes_per_peer`]). A stream holds at most its
/// window of frames not yet delivered, and a frame its window does not
/// cover is granted only out of this budget, so a peer that sends large
/// frames on many streams slowly, or towards ports that do not read,
/// stalls its own link's messages instead of filling this host's memory.
/// Six frames of the largest size fit. Growth is charged to the local user
/// that owns the stream's destination port, at most half of what the
/// others leave each, so a receiver that never reads slows only its own
/// user's messages from that peer, never another user's.
pub const DEFAULT_FRAME_BUDGET: usize = 256 << 20;

impl Node {
    /// Starts a node: binds the endpoint and begins accepting links from
    /// trusted peers.
    ///
    /// # Errors
    /// If the address cannot be bound or the TLS setup is refused.
    pub fn start(config: NodeConfig) -> Result<Node, NetError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ferry-net")
            .enable_all()
            .build()?;
        let mut server = tls::quic_server_config(&config.identity, config.peers.clone()).map_err(other)?;
        server.transport_config(transport(&config));
        let listen = config.listen;
        let endpoint = rt
            .block_on(async { quinn::Endpoint::server(server, listen) })
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))?;
        let shared = Arc::new(Shared {
            config,
            names: Mutex::new(HashMap::new()),
            links: Mutex::new(HashMap::new()),
            counters: Arc::new(Counters::default()),
            gate: crate::gate::Gate::default(),
            region_uses: ferry::pager::SharedBudget::new(REGION_USES_PER_USER),
            made_for: MadeFor::default(),
        });
        let (ep, sh) = (endpoint.clone(), shared.clone());
        rt.spawn(async move {
            while let Some(incoming) = ep.accept().await {
                let remote = incoming.remote_address();
                let ticket = match sh.gate.admit(remote.ip(), incoming.remote_address_validated(), incoming.may_retry()) {
                    crate::gate::Admit::Go(ticket) => ticket,
                    crate::gate::Admit::Check => {
                        sh.counters.address_checks.fetch_add(1, Ordering::Relaxed);
                        let _ = incoming.retry();
                        continue;
                    }
                    crate::gate::Admit::No => {
                        sh.counters.handshakes_turned_away.fetch_add(1, Ordering::Relaxed);
                        static SAID_BUSY: AtomicU64 = AtomicU64::new(0);
                        say_once_a_minute(&SAID_BUSY, &format!("ferry-net: ignored attempts to link from {remote}: too many handshakes at once or too often"));
                        incoming.ignore();
                        continue;
                    }
                };
                sh.counters.handshakes.fetch_add(1, Ordering::Relaxed);
                let sh = sh.clone();
                tokio::spawn(async move {
                    // Counted as going until the link is up or refused.
                    let _ticket = ticket;
                    if let Err(e) = accept(sh, incoming).await {
                        // Anyone who can reach the address may try, as
                        // often as it likes.
                        static SAID: AtomicU64 = AtomicU64::new(0);
                        say_once_a_minute(&SAID, &format!("ferry-net: refused a link from {remote}: {e}"));
                    }
                });
            }
        });
        Ok(Node { rt: Some(rt), shared, endpoint })
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("runtime lives as long as the node")
    }

    /// The UDP address the node listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Exports `right` under `name`: trusted peers may look it up as
    /// `name@<this host>`. Only exported names can be reached from the
    /// network.
    pub fn export(&self, name: &str, right: SendRight) {
        self.shared.names.lock().unwrap().insert(name.to_owned(), right);
    }

    /// The names exported now.
    pub fn exported(&self) -> Vec<String> {
        self.shared.names.lock().unwrap().keys().cloned().collect()
    }

    /// Stops exporting `name` (rights already handed out stay valid).
    pub fn unexport(&self, name: &str) -> Option<SendRight> {
        self.shared.names.lock().unwrap().remove(name)
    }

    /// Links to the trusted peer `peer` at `addr`, within the operation
    /// timeout. A link already up is replaced.
    ///
    /// # Errors
    /// [`NetError::UnknownPeer`] if `peer` is not trusted;
    /// [`NetError::Refused`] if the handshake fails either way (the peer's
    /// certificate is not the pinned one, or the peer does not trust this
    /// node); [`NetError::Timeout`].
    pub fn connect(&self, peer: &str, addr: SocketAddr) -> Result<(), NetError> {
        let sh = self.shared.clone();
        let p = sh.config.peers.iter().find(|p| p.name == peer).cloned().ok_or_else(|| NetError::UnknownPeer(peer.into()))?;
        let mut client = tls::quic_client_config(&sh.config.identity, &p).map_err(other)?;
        client.transport_config(transport(&sh.config));
        let ep = self.endpoint.clone();
        let t = sh.config.op_timeout;
        self.rt().block_on(async move {
            let fut = async {
                let conn = ep
                    .connect_with(client, addr, "ferry-peer")
                    .map_err(|e| NetError::Refused(e.to_string()))?
                    .await
                    .map_err(|e| NetError::Refused(e.to_string()))?;
                // The accepting side opens the control stream only once it
                // has checked this node's certificate.
                let (send, mut recv) = conn.accept_bi().await.map_err(|e| NetError::Refused(e.to_string()))?;
                let mut magic = [0u8; 4];
                recv.read_exact(&mut magic).await.map_err(|e| NetError::Refused(e.to_string()))?;
                if &magic != MAGIC {
                    return Err(NetError::Refused(format!(
                        "the peer does not speak this version of the link protocol (it said {:?}, this node speaks {:?})",
                        String::from_utf8_lossy(&magic),
                        String::from_utf8_lossy(MAGIC)
                    )));
                }
                Ok(start_link(sh, p.name.clone(), conn, send, recv))
            };
            match tokio::time::timeout(t, fut).await {
                Ok(r) => r.map(|_| ()),
                Err(_) => Err(NetError::Timeout),
            }
        })
    }

    /// Looks up a remote name, `name@host`, and returns a send right to a
    /// local proxy port for it.
    ///
    /// # Errors
    /// [`NetError::BadName`], [`NetError::NotLinked`],
    /// [`NetError::NotExported`], [`NetError::Timeout`],
    /// [`NetError::LinkLost`].
    pub fn lookup(&self, remote: &str) -> Result<SendRight, NetError> {
        let (name, host) = remote.rsplit_once('@').filter(|(n, h)| !n.is_empty() && !h.is_empty()).ok_or_else(|| NetError::BadName(remote.into()))?;
        let conn = self.shared.links.lock().unwrap().get(host).cloned().ok_or_else(|| NetError::NotLinked(host.into()))?;
        let t = self.shared.config.op_timeout;
        let (tx, rx) = oneshot::channel();
        let frame = {
            let mut st = conn.state.lock().unwrap();
            let (req, frame) = st.link.lookup(name).map_err(|e| NetError::LinkLost(e.to_string()))?;
            st.lookups.insert(req, tx);
            (req, frame)
        };
        let (req, frame) = frame;
        let c2 = conn.clone();
        let r = self.rt().block_on(async move {
            c2.send_control(&[frame]).await;
            tokio::time::timeout(t, rx).await
        });
        match r {
            Ok(Ok(Answer::Right(right))) => Ok(right),
            Ok(Ok(Answer::NotExported)) => Err(NetError::NotExported(remote.into())),
            Ok(Ok(Answer::OverLimit)) => Err(NetError::TooManyProxies(host.into())),
            Ok(Err(_)) => Err(NetError::LinkLost(format!("link to {host} closed during the lookup"))),
            Err(_) => {
                let mut st = conn.state.lock().unwrap();
                st.lookups.remove(&req);
                st.link.cancel_lookup(req);
                Err(NetError::Timeout)
            }
        }
    }

    /// What each local user has outstanding at each linked peer (users
    /// with nothing outstanding are left out), by peer and uid.
    pub fn usage(&self) -> Vec<UserUsage> {
        let links: Vec<Arc<Conn>> = self.shared.links.lock().unwrap().values().cloned().collect();
        let mut v: Vec<UserUsage> = links
            .iter()
            .flat_map(|c| {
                let users = c.state.lock().unwrap().budgets.users();
                users.into_iter().map(|(uid, (rights, regions))| UserUsage { peer: c.peer.clone(), uid, rights, regions })
            })
            .collect();
        v.sort_by(|a, b| (&a.peer, a.uid).cmp(&(&b.peer, b.uid)));
        v
    }

    /// The links and what they hold.
    pub fn links(&self) -> Vec<LinkInfo> {
        let links: Vec<Arc<Conn>> = self.shared.links.lock().unwrap().values().cloned().collect();
        let mut v: Vec<LinkInfo> = links
            .iter()
            .map(|c| {
                let st = c.state.lock().unwrap();
                let q = c.conn.stats();
                LinkInfo {
                    wire_sent: q.udp_tx.bytes,
                    wire_received: q.udp_rx.bytes,
                    peer: c.peer.clone(),
                    up: !st.link.is_closed(),
                    imports: st.link.imports(),
                    exports: st.link.exports(),
                    regions_out: st.link.regions_out(),
                    regions_in: st.link.regions_in(),
                    streams_waiting: st.out_flows.values().filter(|f| f.waiting()).count(),
                    window_growth: c.frames.held() as u64,
                    late_lookups: st.link.late_lookups(),
                }
            })
            .collect();
        v.sort_by(|a, b| a.peer.cmp(&b.peer));
        v
    }

    /// Copy-on-reference traffic since the node started.
    pub fn stats(&self) -> NetStats {
        let c = &self.shared.counters;
        NetStats {
            bytes_fetched: c.bytes_fetched.load(Ordering::Relaxed),
            fetches: c.fetches.load(Ordering::Relaxed),
            bytes_served: c.bytes_served.load(Ordering::Relaxed),
            regions_sent: c.regions_sent.load(Ordering::Relaxed),
            regions_received: c.regions_received.load(Ordering::Relaxed),
            handshakes: c.handshakes.load(Ordering::Relaxed),
            handshakes_turned_away: c.handshakes_turned_away.load(Ordering::Relaxed),
            address_checks: c.address_checks.load(Ordering::Relaxed),
        }
    }

    /// Drops the link to `peer` at once (as if it had died): every proxy
    /// for its ports becomes a dead name.
    pub fn disconnect(&self, peer: &str) {
        let c = self.shared.links.lock().unwrap().remove(peer);
        if let Some(c) = c {
            c.conn.close(0u32.into(), b"disconnect");
            let _g = self.rt().enter();
            c.close_link("disconnected");
        }
    }
}

impl Node {
    /// Closes every link, as dropping the node does, and waits up to `wait`
    /// for the peers to have been told ("node stopped"), so that they turn
    /// their proxies of this host into dead names now rather than after the
    /// idle timeout. The node takes no link afterwards. For a daemon that
    /// stops on a signal and exits without dropping its node.
    pub fn close(&self, wait: Duration) {
        if let Some(rt) = &self.rt {
            rt.block_on(async {
                self.close_links();
                let _ = tokio::time::timeout(wait, self.endpoint.wait_idle()).await;
            });
        }
    }

    /// Closes the endpoint (every connection, with "node stopped") and the
    /// state of every link. Called inside the node's runtime.
    fn close_links(&self) {
        self.endpoint.close(0u32.into(), b"node stopped");
        let links: Vec<Arc<Conn>> = self.shared.links.lock().unwrap().drain().map(|(_, c)| c).collect();
        for c in links {
            c.close_link("node stopped");
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            {
                let _g = rt.enter();
                self.close_links();
            }
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// The link protocol's version, the first bytes on the control stream: 2
/// added credit on message streams (`flow`), which a peer of version 1
/// would not give.
const MAGIC: &[u8; 4] = b"FNL2";

/// The bytes of the peer's message frames a link holds at once
/// ([`NodeConfig::max_frame_bytes_per_peer`], at least two of the largest).
fn frame_budget(c: &NodeConfig) -> usize {
    c.max_frame_bytes_per_peer.max(2 * MAX_FRAME)
}

/// QUIC's window for each stream of a link: the most credit a message
/// stream's window grows to (16 MiB), so that on a link of
/// long round trips a port's messages are paced by their credit, not by
/// QUIC, and a page fetch may have as much in flight.
pub const STREAM_WINDOW: usize = MAX_WINDOW;

/// The bytes a node keeps written but not yet acknowledged on one link:
/// room for a few streams at their largest window at once.
pub const SEND_WINDOW: u64 = 4 * MAX_WINDOW as u64;

fn transport(c: &NodeConfig) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(quinn::IdleTimeout::try_from(c.idle_timeout).ok());
    t.keep_alive_interval(Some(c.idle_timeout / 3));
    t.max_concurrent_uni_streams(c.max_streams_per_peer.max(2).into());
    // What the peer may have in flight unread across all streams of the
    // link: bounded, since a stream whose port does not read is not read.
    // Credit keeps each message stream's unread bytes to its window, and
    // the large frames granted to what the frame budget holds (`flow`), so
    // with room for both and for the control and fetch streams, streams
    // that stall never fill it.
    let window = frame_budget(c) as u64 + u64::from(c.max_streams_per_peer.max(2)) * WINDOW as u64 + (32 << 20);
    t.receive_window(quinn::VarInt::from_u64(window).unwrap_or(quinn::VarInt::MAX));
    // What the peer may hold here unread is bounded by the link's window
    // above, whatever each stream's.
    t.stream_receive_window(quinn::VarInt::from_u64(STREAM_WINDOW as u64).unwrap_or(quinn::VarInt::MAX));
    t.send_window(SEND_WINDOW);
    // Each page fetch rides a bidirectional stream of its own.
    t.max_concurrent_bidi_streams(1024u32.into());
    Arc::new(t)
}

async fn accept(sh: Arc<Shared>, incoming: quinn::Incoming) -> Result<(), NetError> {
    // The handshake, within the operation timeout: a host that starts one
    // and stops answering holds it no longer (see `crate::gate`).
    let conn = match tokio::time::timeout(sh.config.op_timeout, incoming).await {
        Ok(r) => r.map_err(|e| NetError::Refused(e.to_string()))?,
        Err(_) => return Err(NetError::Timeout),
    };
    let certs = conn
        .peer_identity()
        .and_then(|i| i.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok())
        .ok_or_else(|| NetError::Refused("no client certificate".into()))?;
    let first = certs.first().ok_or_else(|| NetError::Refused("no client certificate".into()))?;
    let peer = sh
        .config
        .peers
        .iter()
        .find(|p| p.cert.as_ref() == first.as_ref())
        .ok_or_else(|| NetError::Refused("client certificate is not on the trusted list".into()))?
        .name
        .clone();
    // A peer that lets no stream be opened, or reads nothing, would hold
    // this task and its connection for ever: the control stream must be
    // open within the operation timeout.
    let open = async {
        let (mut send, recv) = conn.open_bi().await.map_err(|e| NetError::LinkLost(e.to_string()))?;
        send.write_all(MAGIC).await.map_err(|e| NetError::LinkLost(e.to_string()))?;
        Ok::<_, NetError>((send, recv))
    };
    let (send, recv) = match tokio::time::timeout(sh.config.op_timeout, open).await {
        Ok(r) => r?,
        Err(_) => {
            conn.close(1u32.into(), b"no control stream");
            return Err(NetError::Timeout);
        }
    };
    start_link(sh, peer, conn, send, recv);
    Ok(())
}

/// Registers a new link and starts its readers.
fn start_link(sh: Arc<Shared>, peer: String, conn: quinn::Connection, send: quinn::SendStream, recv: quinn::RecvStream) -> Arc<Conn> {
    let c = Arc::new(Conn {
        peer: peer.clone(),
        conn: conn.clone(),
        control: tokio::sync::Mutex::new(send),
        counters: sh.counters.clone(),
        limits: Limits {
            refs: sh.config.max_exports_per_user,
            regions: sh.config.max_regions_per_user,
            peer_proxies: usize::try_from(sh.config.max_proxies_per_peer).unwrap_or(usize::MAX),
            peer_streams: sh.config.max_streams_per_peer as usize,
        },
        op_timeout: sh.config.op_timeout,
        frames: Arc::new(InFlight::new(frame_budget(&sh.config))),
        ins: Mutex::new(HashMap::new()),
        once_waits: Mutex::new(HashMap::new()),
        waiting_fds: Mutex::new(HashMap::new()),
        made_for: sh.made_for.clone(),
        state: Mutex::new(State {
            link: {
                let mut l = Link::new();
                l.set_max_proxies(sh.config.max_proxies_per_peer);
                l
            },
            held: HashMap::new(),
            kills: HashMap::new(),
            streams: HashMap::new(),
            out_flows: HashMap::new(),
            lookups: HashMap::new(),
            regions: HashMap::new(),
            remote_regions: HashMap::new(),
            budgets: Budgets::default(),
            proxy_owners: Owners::default(),
            adopted: HashMap::new(),
        }),
    });
    if let Some(old) = sh.links.lock().unwrap().insert(peer.clone(), c.clone()) {
        old.conn.close(0u32.into(), b"replaced");
        old.close_link("replaced by a new link");
    }
    // Control stream reader.
    {
        let (c, sh) = (c.clone(), sh.clone());
        tokio::spawn(async move { c.read_stream(sh, recv, false).await });
    }
    // Message streams, one per destination port.
    {
        let (c, sh) = (c.clone(), sh.clone());
        tokio::spawn(async move {
            while let Ok(s) = c.conn.accept_uni().await {
                let (c, sh) = (c.clone(), sh.clone());
                tokio::spawn(async move { c.read_stream(sh, s, true).await });
            }
        });
    }
    // Page fetches, one bidirectional stream each.
    {
        let (c, sh) = (c.clone(), sh.clone());
        tokio::spawn(async move {
            while let Ok((send, recv)) = c.conn.accept_bi().await {
                let (c, sh) = (c.clone(), sh.clone());
                tokio::spawn(async move { c.serve_fetch(&sh, send, recv).await });
            }
        });
    }
    // Link loss.
    {
        let (c, sh) = (c.clone(), sh.clone());
        tokio::spawn(async move {
            let why = c.conn.closed().await;
            eprintln!("ferry-net: link to {} lost: {why}", c.peer);
            c.close_link(&why.to_string());
            let mut links = sh.links.lock().unwrap();
            if links.get(&c.peer).is_some_and(|x| Arc::ptr_eq(x, &c)) {
                links.remove(&c.peer);
            }
        });
    }
    c
}

/// Reads one frame's length prefix; `None` when the stream ended cleanly.
async fn read_len(s: &mut quinn::RecvStream) -> Result<Option<usize>, String> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(format!("frame of {n} bytes is over the limit"));
    }
    Ok(Some(n))
}

/// Reads the rest of a frame of `n` bytes into `buf`, which holds its
/// first bytes. The length is the peer's claim: memory grows with the bytes
/// that actually arrive, a chunk at a time, not with the claim.
async fn read_rest(s: &mut quinn::RecvStream, buf: &mut Vec<u8>, n: usize) -> Result<(), String> {
    const CHUNK: usize = 256 << 10;
    while buf.len() < n {
        let start = buf.len();
        buf.resize(start + (n - start).min(CHUNK), 0);
        s.read_exact(&mut buf[start..]).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Reads one length-prefixed frame whole, unbudgeted (the control
/// stream); `None` when the stream ended cleanly.
async fn read_frame(s: &mut quinn::RecvStream) -> Result<Option<Vec<u8>>, String> {
    let Some(n) = read_len(s).await? else { return Ok(None) };
    let mut buf = Vec::new();
    read_rest(s, &mut buf, n).await?;
    Ok(Some(buf))
}

/// Forgets the credit of a message stream once its reader ends (the
/// growth of its window goes back to its owner's share).
struct ForgetCredit<'a>(&'a Mutex<HashMap<u64, flow::In>>, u64);

impl Drop for ForgetCredit<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().remove(&self.1);
    }
}

/// The owner charged for frames whose destination is no port of a known
/// user (send-once rights, whose delivery never waits; frames that are not
/// messages; ids that are not exported).
const UNKNOWN_OWNER: u32 = u32::MAX;

/// Writes one frame with its length prefix, in one stream write.
async fn write_frame(s: &mut quinn::SendStream, f: &Frame) -> Result<(), quinn::WriteError> {
    s.write_all(&f.encode_with_len()).await
}

/// What a lookup's waiter is told.
#[derive(Debug)]
enum Answer {
    /// A proxy for the exported port.
    Right(SendRight),
    /// The name is not exported (or its port is dead).
    NotExported,
    /// The port exists, but this node holds as many of the peer's ports
    /// as it may.
    OverLimit,
}

/// Work to do after the state lock is released.
#[derive(Default)]
struct After {
    deliver: Vec<(Target, Message)>,
    frames: Vec<Frame>,
}

enum Target {
    Send(Arc<AsyncSendRight>),
    Once(SendOnceRight),
}

impl Conn {
    /// Writes `frames` on the control stream, in order. A peer that stops
    /// reading its control stream (its flow-control window stays shut)
    /// would hold every writer here, and with them lookups, releases and
    /// the readers that answer frames: a write that waits longer than the
    /// operation timeout closes the link instead.
    async fn send_control(&self, frames: &[Frame]) {
        if frames.is_empty() {
            return;
        }
        let write = async {
            let mut s = self.control.lock().await;
            for f in frames {
                if write_frame(&mut s, f).await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(self.op_timeout, write).await.is_err() && self.conn.close_reason().is_none() {
            eprintln!("ferry-net: link to {} closed: it stopped reading its control stream", self.peer);
            self.conn.close(1u32.into(), b"control stream stalled");
        }
    }

    /// Reads frames off one stream until it ends; a protocol error closes
    /// the whole link (and only it).
    /// `message`: a message stream, whose frames count against the link's
    /// frame budget and its credit (`flow`); the control stream, one per
    /// link and read at once, does not, so a budget held by messages
    /// waiting for ports that do not read never stops lookups, releases,
    /// credit and death notices.
    async fn read_stream(self: Arc<Self>, sh: Arc<Shared>, mut s: quinn::RecvStream, message: bool) {
        let id = u64::from(s.id());
        let _forget = message.then(|| ForgetCredit(&self.ins, id));
        // This process's pid, whatever the configuration says: the kernel
        // refuses a pid of no process. Asked once (a system call), not for
        // every frame.
        let deliver_as = sh.config.deliver_as.map(|c| ferry::Credentials { pid: std::process::id() as i32, ..c });
        loop {
            let got = if message { self.read_message_frame(&mut s, id).await } else { read_frame(&mut s).await };
            let bytes = match got {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(e) => {
                    if !self.state.lock().unwrap().link.is_closed() && self.conn.close_reason().is_none() {
                        self.protocol_error(&e);
                    }
                    return;
                }
            };
            // A message on the control stream would skip its stream's
            // credit, and the control stream would wait for its port.
            if !message && frame::is_message(&bytes) {
                self.protocol_error("a message frame on the control stream");
                return;
            }
            if !message && frame::is_flow(&bytes) {
                if let Err(e) = self.handle_flow(&bytes) {
                    self.protocol_error(&e);
                    return;
                }
                continue;
            }
            let after = match self.handle(&sh, &bytes) {
                Ok(a) => a,
                // A frame still in flight when the link was closed (the
                // peer stopped, or this node did): nothing is wrong with it.
                Err(LinkError::Closed) => return,
                Err(e) => {
                    self.protocol_error(&e.to_string());
                    return;
                }
            };
            self.send_control(&after.frames).await;
            for (t, m) in after.deliver {
                match t {
                    Target::Send(r) => {
                        // Waits while the port's queue is full: back-pressure.
                        let _ = match deliver_as {
                            Some(c) => ferry::tokio::sending_as(c, r.send(m)).await,
                            None => r.send(m).await,
                        };
                    }
                    Target::Once(r) => {
                        // A send-once right's socket holds exactly one
                        // message, so the send almost never has to wait:
                        // try it here (a hop to a blocking thread costs more
                        // than the send), and hand only a send that must wait
                        // to a blocking thread, not awaited, since the stream
                        // it came on carries other send-once messages too.
                        if let Err(failed) = send_once_as(deliver_as, r, m, Timeout::Zero) {
                            let (err, m, r) = failed.into_parts();
                            if matches!(err, ferry::SendError::QueueFull | ferry::SendError::Timeout) {
                                // Its socket is full only if its holder
                                // wrote to it through a copy of the
                                // descriptor: each such wait holds a
                                // thread and the message, so a user has
                                // at most a few at once, and past them
                                // the message is dropped (the right is
                                // destroyed unused, as its holder sees).
                                let owner = owner_of(r.as_fd());
                                if self.once_wait(owner) {
                                    let t = Timeout::After(sh.config.op_timeout);
                                    let c = self.clone();
                                    drop(tokio::task::spawn_blocking(move || {
                                        let _ = send_once_as(deliver_as, r, m, t);
                                        c.once_waited(owner);
                                    }));
                                } else {
                                    static SAID: AtomicU64 = AtomicU64::new(0);
                                    let why = format!("ferry-net: replies from {} to user {owner}'s send-once rights whose sockets are full are dropped: it has {ONCE_WAITS_PER_USER} waiting", self.peer);
                                    say_once_a_minute(&SAID, &why);
                                }
                            }
                        }
                    }
                }
            }
            if message {
                self.delivered(id, &bytes).await;
            }
        }
    }

    /// Counts a delivery to a send-once right of user `owner` that waits
    /// for room, if that user has fewer than [`ONCE_WAITS_PER_USER`].
    fn once_wait(&self, owner: u32) -> bool {
        let mut waits = self.once_waits.lock().unwrap();
        let n = waits.entry(owner).or_insert(0);
        let room = *n < ONCE_WAITS_PER_USER;
        *n += usize::from(room);
        room
    }

    /// A delivery counted by [`Conn::once_wait`] has ended.
    fn once_waited(&self, owner: u32) {
        let mut waits = self.once_waits.lock().unwrap();
        if let Some(n) = waits.get_mut(&owner) {
            *n -= 1;
            if *n == 0 {
                waits.remove(&owner);
            }
        }
    }

    /// Frame `frame` off message stream `id` was delivered: gives the peer
    /// its credit back when enough has been, with the window's growth while
    /// the stream's owner has room for it.
    async fn delivered(&self, id: u64, frame: &[u8]) {
        let credit = {
            let mut ins = self.ins.lock().unwrap();
            let Some(f) = ins.get_mut(&id) else { return };
            // The user the stream's window grows for, from its first frame:
            // its destination's owner, or no user for the stream all
            // replies share.
            let owner = *f.owner.get_or_insert_with(|| {
                frame::message_target(frame).and_then(|t| self.state.lock().unwrap().charged_to(t)).unwrap_or(UNKNOWN_OWNER)
            });
            f.delivered(frame.len(), |more| self.frames.try_acquire(owner, more))
        };
        if let Some(bytes) = credit {
            self.send_control(&[Frame::Credit { stream: id, bytes }]).await;
        }
    }

    /// Reads one frame off message stream `id`, which its credit must
    /// cover (checked before the body is read); `None` when the stream
    /// ended cleanly.
    async fn read_message_frame(&self, s: &mut quinn::RecvStream, id: u64) -> Result<Option<Vec<u8>>, String> {
        let Some(n) = read_len(s).await? else { return Ok(None) };
        self.ins.lock().unwrap().entry(id).or_default().read(n)?;
        let mut buf = Vec::new();
        read_rest(s, &mut buf, n).await?;
        Ok(Some(buf))
    }

    /// Handles a flow-control frame from the control stream.
    fn handle_flow(self: &Arc<Self>, bytes: &[u8]) -> Result<(), String> {
        match Frame::decode(bytes).map_err(|e| e.to_string())? {
            Frame::Credit { stream, bytes } => {
                // A stream finished meanwhile has no credit to take.
                let f = self.state.lock().unwrap().out_flows.get(&stream).cloned();
                if let Some(f) = f {
                    f.credit(bytes);
                }
            }
            Frame::Grant { stream, bytes } => {
                let f = self.state.lock().unwrap().out_flows.get(&stream).cloned();
                if let Some(f) = f {
                    f.grant(bytes)?;
                }
            }
            Frame::Want { stream, target, bytes } => {
                if bytes <= SMALL as u64 || bytes > MAX_FRAME as u64 {
                    return Err(format!("a frame of {bytes} bytes was asked for: it needs no asking, or is over the limit"));
                }
                {
                    let mut ins = self.ins.lock().unwrap();
                    if ins.len() > self.limits.peer_streams && !ins.contains_key(&stream) {
                        return Err("frames were asked for on more streams than the peer may have".into());
                    }
                    let f = ins.entry(stream).or_default();
                    if f.asked {
                        return Err("a frame was asked for on a stream before the last one was granted".into());
                    }
                    f.asked = true;
                }
                // Granted once the destination owner's share has room;
                // meanwhile the peer's sender waits, and so do the local
                // senders behind its proxy. A reply (to a send-once right)
                // waits for no share: it is delivered as soon as it is read
                // (the right's socket holds its one message), so its bytes
                // are held only in flight, where QUIC's window for a stream
                // bounds them, and the replies behind it on the stream they
                // share do not wait for one user's share either. That is
                // one stream of the link at a time, the first to ask for a
                // reply's frame while no other that did is open: on any
                // other the frame is charged as one for no known user. (A
                // peer naming a reply right in asks on thousands of streams
                // was granted a frame of up to 40 MiB on each, charged to
                // no one.)
                let c = self.clone();
                tokio::spawn(async move {
                    let charged = c.state.lock().unwrap().charged_to(target);
                    let charged = match charged {
                        Some(uid) => Some(uid),
                        None => {
                            let mut ins = c.ins.lock().unwrap();
                            let other = ins.iter().any(|(&id, f)| id != stream && f.replies);
                            match ins.get_mut(&stream) {
                                Some(f) if !other => {
                                    f.replies = true;
                                    None
                                }
                                Some(_) => Some(UNKNOWN_OWNER),
                                None => return,
                            }
                        }
                    };
                    let p = match charged {
                        None => None,
                        Some(uid) => match c.frames.acquire(uid, bytes as usize).await {
                            Ok(p) => Some(p),
                            Err(_) => return,
                        },
                    };
                    let granted = c.ins.lock().unwrap().get_mut(&stream).filter(|f| f.asked).map(|f| f.grant(bytes as usize, p));
                    if let Some(bytes) = granted {
                        c.send_control(&[Frame::Grant { stream, bytes }]).await;
                    }
                });
            }
            _ => return Err("not a flow-control frame".into()),
        }
        Ok(())
    }

    fn protocol_error(self: &Arc<Self>, e: &str) {
        eprintln!("ferry-net: link to {} closed: protocol error: {e}", self.peer);
        self.conn.close(1u32.into(), b"protocol error");
        self.close_link(e);
    }

    /// Closes the state machine and carries out its last events.
    fn close_link(self: &Arc<Self>, _why: &str) {
        // Readers waiting for frame budget, and writers for credit, end now.
        self.frames.close();
        self.ins.lock().unwrap().clear();
        let mut st = self.state.lock().unwrap();
        for (_, f) in st.out_flows.drain() {
            f.close();
        }
        if st.link.is_closed() && st.held.is_empty() && st.kills.is_empty() && st.regions.is_empty() && st.remote_regions.is_empty() {
            return;
        }
        let ev = st.link.close();
        let mut after = After::default();
        for e in ev {
            apply_event(self, &mut st, None, e, &mut after);
        }
        for (_, k) in st.kills.drain() {
            let _ = k.send(true);
        }
        for (_, h) in st.held.drain() {
            if let Held::Send { watch, .. } = h {
                watch.abort();
            }
        }
        st.lookups.clear();
        for key in st.streams.keys().copied().collect::<Vec<_>>() {
            st.drop_stream(key);
        }
        st.regions.clear();
        st.budgets = Budgets::default();
        st.proxy_owners = Owners::default();
        for (_, (lost, _)) in st.remote_regions.drain() {
            lost.store(true, Ordering::Release);
        }
    }

    /// Answers one fetch stream: checks the request against the region
    /// table (a bad one closes the link) and streams the bytes.
    async fn serve_fetch(self: Arc<Self>, sh: &Arc<Shared>, mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
        // A fetch request is 25 bytes: anything longer is refused before
        // it is read.
        let mut len = [0u8; 4];
        let t = sh.config.op_timeout;
        let bytes = match tokio::time::timeout(t, recv.read_exact(&mut len)).await {
            Ok(Ok(())) if u32::from_le_bytes(len) <= 64 => {
                let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
                match tokio::time::timeout(t, recv.read_exact(&mut b)).await {
                    Ok(Ok(())) => b,
                    _ => return,
                }
            }
            Ok(Ok(())) => return self.protocol_error("fetch request over 64 bytes"),
            _ => return,
        };
        let checked = {
            let mut st = self.state.lock().unwrap();
            st.link.check_fetch(&bytes).map(|(r, off, n)| (st.regions.get(&r).cloned(), off as usize, n as usize))
        };
        let (region, off, n) = match checked {
            Ok((Some(region), off, n)) => (region, off, n),
            Ok((None, ..)) => return,
            Err(e) => return self.protocol_error(&e.to_string()),
        };
        // Read with `pread`, which leaves a sparse region's holes holes:
        // read through a mapping, every page of a hole fetched was a page
        // of memory allocated in the region's memfd and kept there until
        // the peer let the region go, so a peer fetching a sparse region
        // of a terabyte made this node allocate a terabyte.
        let mut chunk = vec![0u8; n.min(1 << 20)];
        let mut at = off;
        while at < off + n {
            let chunk = &mut chunk[..(off + n - at).min(1 << 20)];
            if region.read_at(at, chunk).is_err() {
                let _ = send.reset(0u32.into());
                return;
            }
            at += chunk.len();
            // Counted before the write, so that no byte reaches the fetcher
            // (and its own count) before it is counted here: both sides'
            // counters agree whenever the fetch has ended. A chunk that
            // could not be written is taken back. A fetcher that stops
            // reading (its flow-control window stays shut) holds a chunk
            // for at most the operation timeout, then loses the stream.
            sh.counters.bytes_served.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if !matches!(tokio::time::timeout(t, send.write_all(chunk)).await, Ok(Ok(()))) {
                sh.counters.bytes_served.fetch_sub(chunk.len() as u64, Ordering::Relaxed);
                let _ = send.reset(0u32.into());
                return;
            }
        }
        let _ = send.finish();
    }

    fn handle(self: &Arc<Self>, sh: &Arc<Shared>, bytes: &[u8]) -> Result<After, LinkError> {
        let mut st = self.state.lock().unwrap();
        let out = st.link.handle(bytes)?;
        for (id, count) in out.released {
            // An export the peer let go of wholly that still waits for
            // frames naming it (the uses its release announced) stays kept
            // here, and so does the last reference charged for it, until
            // it goes: a peer announcing uses it never sends had the node
            // keep rights that no budget counted, as many as its users
            // sent.
            let kept = u64::from(st.link.export_waiting(id) && st.budgets.charged(id) <= count);
            st.budgets.release_refs(id, count.saturating_sub(kept));
        }
        let mut after = After { deliver: Vec::new(), frames: out.frames };
        for e in out.events {
            apply_event(self, &mut st, Some(sh), e, &mut after);
        }
        Ok(after)
    }
}

/// Carries out one event of the state machine, under the state lock.
fn apply_event(c: &Arc<Conn>, st: &mut State, sh: Option<&Arc<Shared>>, e: Event, after: &mut After) {
    match e {
        Event::Deliver { export, once, op, body, items, reply } => {
            let mut msg = Message::new(op).with_body(body);
            let owner = st.owner(export);
            // Out of descriptors, every right arrives as a dead name (its
            // reference released at once) rather than being lost unsaid.
            // The reply right is not counted: used once and gone, it fits
            // the reserve, and a call (a message with only its reply
            // right) pays no probe on its way.
            let proxies = items.iter().filter(|i| matches!(i, Incoming::Proxy { .. })).count();
            let short = if proxies > 0 { fds_short(proxies * FDS_PER_ITEM) } else { None };
            if let Some(why) = &short {
                say_short(why);
            }
            // Within the node's descriptors, the port's owner may still
            // be past its share of them: then too they arrive dead.
            let short = short.or_else(|| {
                if proxies == 0 {
                    return None;
                }
                let mine = st.proxy_owners.of(owner) * FDS_PER_ITEM + st.remote_regions.values().filter(|(_, o)| *o == owner).count();
                fds_over_share(proxies * FDS_PER_ITEM, mine, owner)
            });
            for i in items {
                let i = match i {
                    Incoming::Proxy { import, .. } if short.is_some() => {
                        after.frames.extend(st.link.proxy_released(import, None));
                        st.forget_if_gone(import);
                        Incoming::DeadName
                    }
                    i => i,
                };
                // As for rights arriving dead: the peer's hosts choose how
                // many items past a share (regions, say) are lost.
                match incoming(c, st, sh, i, owner, after) {
                    Ok(item) => msg = msg.with_item(item),
                    Err(e) => {
                        static SAID: AtomicU64 = AtomicU64::new(0);
                        say_once_a_minute(&SAID, &format!("ferry-net: an item from {} was lost: {e}", c.peer));
                    }
                }
            }
            if let Some(r) = reply {
                match incoming(c, st, sh, r, owner, after) {
                    Ok(Item::Send(s)) => msg = msg.with_reply(Reply::Send(s)),
                    Ok(Item::SendOnce(s)) => msg = msg.with_reply(Reply::SendOnce(s)),
                    Ok(_) => {}
                    Err(e) => {
                        static SAID: AtomicU64 = AtomicU64::new(0);
                        say_once_a_minute(&SAID, &format!("ferry-net: a reply right from {} was lost: {e}", c.peer));
                    }
                }
            }
            let target = if once {
                st.budgets.refund_export(export);
                match st.held.remove(&export) {
                    Some(Held::Once { right, .. }) => Some(Target::Once(right)),
                    _ => None,
                }
            } else {
                match st.held.get(&export) {
                    Some(Held::Send { right, .. }) => Some(Target::Send(right.clone())),
                    _ => None,
                }
            };
            if let Some(t) = target {
                after.deliver.push((t, msg));
            }
        }
        Event::Lookup { req, name } => {
            let right = sh.and_then(|sh| sh.names.lock().unwrap().get(&name).and_then(|r| r.try_clone().ok())).filter(|r| !r.is_dead());
            let key = right.as_ref().and_then(|r| key_of(r.as_fd()).ok());
            if let Ok((f, store)) = st.link.answer_lookup(req, key) {
                if let (Store::Keep(id), Some(r)) = (store, right) {
                    keep_send(c, st, id, r, key);
                }
                if let Frame::Found { cap: Some(Cap::Hosted(id)), .. } = f {
                    st.budgets.charge_ref(LOOKUPS, id);
                }
                after.frames.push(f);
            }
        }
        Event::Found { req, import } => {
            let waiter = st.lookups.remove(&req);
            let answer = match import {
                Some(id) => match proxy_or_release(c, st, id, false, None, after) {
                    Ok(Item::Send(s)) => {
                        st.proxy_owners.insert((key_of(s.as_fd()).ok(), id), UNKNOWN_OWNER);
                        Answer::Right(s)
                    }
                    _ => Answer::NotExported,
                },
                None => Answer::NotExported,
            };
            if let Some(w) = waiter {
                let _ = w.send(answer);
            }
        }
        Event::LookupOverLimit { req } => {
            if let Some(w) = st.lookups.remove(&req) {
                let _ = w.send(Answer::OverLimit);
            }
        }
        Event::ImportDead { import } => {
            if let Some(k) = st.kills.remove(&import) {
                let _ = k.send(true);
            }
            st.drop_stream(import);
            st.budgets.refund_stream(import);
            st.proxy_owners.retain(|(_, i)| *i != import);
        }
        Event::DropExport { export } => {
            if let Some(Held::Send { watch, .. }) = st.held.remove(&export) {
                watch.abort();
            }
            st.budgets.refund_export(export);
        }
        Event::DropRegion { id } => {
            st.regions.remove(&id);
            st.budgets.refund_region(id);
        }
        Event::RegionLost { id } => {
            if let Some((lost, _)) = st.remote_regions.remove(&id) {
                lost.store(true, Ordering::Release);
            }
        }
    }
}

/// Starts serving the peer's region `id` here; returns the right that
/// takes the region's place in the message. If it cannot be served, the
/// region is released at once.
fn remote_region(c: &Arc<Conn>, st: &mut State, sh: Option<&Arc<Shared>>, (id, len): (u64, u64), owner: u32, after: &mut After) -> io::Result<Item> {
    let r = (|| {
        let sh = sh.ok_or_else(|| other("the node is stopping"))?;
        let most = sh.config.max_regions_in_per_peer.max(2);
        let mine = st.remote_regions.values().filter(|(_, o)| *o == owner).count();
        let others = st.remote_regions.len() - mine;
        if others + mine >= most {
            return Err(other(format!("{most} regions from this peer are served already")));
        }
        if mine + 1 > share_left(most, others) {
            return Err(other(format!(
                "user {owner} has {mine} regions from this peer served, and one user may have at most half of the {} the others leave",
                most - others
            )));
        }
        let lost = Arc::new(AtomicBool::new(false));
        let f = Arc::new(Fetcher {
            handle: tokio::runtime::Handle::current(),
            conn: c.conn.clone(),
            peer: c.peer.clone(),
            id,
            len,
            lost: lost.clone(),
            timeout: sh.config.op_timeout,
            counters: sh.counters.clone(),
        });
        let weak = Arc::downgrade(c);
        let handle = f.handle.clone();
        let on_exit = Box::new(move || {
            if let Some(c) = weak.upgrade() {
                let f = {
                    let mut st = c.state.lock().unwrap();
                    st.remote_regions.remove(&id);
                    st.link.release_region(id)
                };
                if let Some(f) = f {
                    handle.spawn(async move { c.send_control(&[f]).await });
                }
            }
        });
        let right = cor::serve(f, sh.region_uses.clone(), on_exit)?;
        st.remote_regions.insert(id, (lost, owner));
        sh.counters.regions_received.fetch_add(1, Ordering::Relaxed);
        Ok(Item::Send(right))
    })();
    if r.is_err() {
        after.frames.extend(st.link.release_region(id));
    }
    r
}

/// Turns an incoming right or region, in a message to a port of user
/// `owner`, into a local item.
fn incoming(c: &Arc<Conn>, st: &mut State, sh: Option<&Arc<Shared>>, i: Incoming, owner: u32, after: &mut After) -> io::Result<Item> {
    match i {
        Incoming::Remote { id, len } => remote_region(c, st, sh, (id, len), owner, after),
        Incoming::Proxy { import, once } => {
            // Every proxy here is charged to someone (lookups' to no
            // user), so the others' are the rest of the table.
            let mine = st.proxy_owners.of(owner);
            let others = st.proxy_owners.len() - mine;
            let free = c.limits.peer_proxies.saturating_sub(others);
            if mine + 1 > share_left(c.limits.peer_proxies, others) {
                // How many come is the peer's hosts' choice (a user there
                // sending rights to its own port here, say): a line for
                // each filled the log.
                static SAID: AtomicU64 = AtomicU64::new(0);
                say_once_a_minute(
                    &SAID,
                    &format!(
                        "ferry-net: a right from {} arrives as a dead name: user {owner} has {mine} of its proxies, and one user may have at most half of the {free} the others leave",
                        c.peer
                    ),
                );
                after.frames.extend(st.link.proxy_released(import, None));
                st.forget_if_gone(import);
                return dead_name();
            }
            let item = proxy_or_release(c, st, import, once, Some(owner), after)?;
            let key = match &item {
                Item::Send(s) => key_of(s.as_fd()).ok(),
                _ => None,
            };
            st.proxy_owners.insert((key, import), owner);
            Ok(item)
        }
        Incoming::Home { export } => match st.held.get(&export) {
            Some(Held::Send { right, .. }) => Ok(Item::Send(right.get_ref().try_clone()?)),
            _ => Err(other("a right came home to an export that is gone")),
        },
        Incoming::Region(b) => Ok(Item::Region(RegionItem::copied_from(&b).map_err(other)?)),
        Incoming::DeadName => dead_name(),
    }
}

/// A send right to a port whose receive right is gone at once: a dead name.
fn dead_name() -> io::Result<Item> {
    let (rx, tx) = ferry::port()?;
    drop(rx);
    Ok(Item::Send(tx))
}

/// Keeps a send right for export `id` (its port's `key`, if known) and
/// watches it for death.
fn keep_send(c: &Arc<Conn>, st: &mut State, id: u64, right: SendRight, key: Option<Key>) {
    // A port this node serves for a user is that user's, whoever made its
    // socket ([`MadeFor`]).
    let made = key.and_then(|k| c.made_for.lock().unwrap().get(&k).copied());
    let owner = made.unwrap_or_else(|| owner_of(right.as_fd()));
    let watch_right = right.try_clone();
    let right = match AsyncSendRight::new(right) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            eprintln!("ferry-net: cannot keep an exported right: {e}");
            return;
        }
    };
    let watch = match watch_right {
        Ok(w) => tokio::spawn(watch_dead(Arc::downgrade(c), id, w)),
        Err(_) => tokio::spawn(async {}),
    };
    st.held.insert(id, Held::Send { right, watch, owner });
}

/// The user that made the socket of a kept right (`SO_PEERCRED`), whose
/// shares what the node holds for the right's port is charged to.
fn owner_of(fd: BorrowedFd<'_>) -> u32 {
    rustix::net::sockopt::socket_peercred(fd).map_or(UNKNOWN_OWNER, |c| c.uid.as_raw())
}

/// The user a kept send-once right is charged to: whoever made its socket
/// ([`owner_of`]), except a right this process made, which is a proxy of a
/// peer's send-once right (a reply right sent to a local user's port):
/// no user's. Its socket is the node's, root's for a node run by root, so
/// a user that passed one on to another peer had the reply that peer sent
/// through it charged to root's shares there. Which user it was made for
/// is not asked of the kernel on every call's way; `SO_PEERCRED` tells the
/// pid along with the uid.
fn once_owner(fd: BorrowedFd<'_>) -> u32 {
    static OWN: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    let own = *OWN.get_or_init(|| std::process::id() as i32);
    match rustix::net::sockopt::socket_peercred(fd) {
        Ok(c) if c.pid.as_raw_nonzero().get() != own => c.uid.as_raw(),
        _ => UNKNOWN_OWNER,
    }
}

/// Waits until the exported port dies, then tells the peer. The task is
/// aborted when the export is dropped, which lets go of its right.
async fn watch_dead(c: std::sync::Weak<Conn>, id: u64, right: SendRight) {
    if crate::deadwatch::wait_dead(right).await.is_err() {
        return;
    }
    if let Some(c) = c.upgrade() {
        let f = c.state.lock().unwrap().link.export_dead(id);
        if let Some(f) = f {
            c.send_control(&[f]).await;
        }
    }
}

/// Makes a proxy, or if that fails here (out of descriptors), releases
/// the reference at once so the peer's count stays right.
fn proxy_or_release(c: &Arc<Conn>, st: &mut State, import: u64, once: bool, owner: Option<u32>, after: &mut After) -> io::Result<Item> {
    make_proxy(c, st, import, once, owner).inspect_err(|_| {
        after.frames.extend(st.link.proxy_released(import, None));
        st.forget_if_gone(import);
    })
}

/// Makes a proxy for import `import` (a port behind a send right, a reply
/// receiver behind a send-once right) and starts its forwarding task;
/// returns the local right to hand out. A send right's proxy made for
/// user `owner` is that user's while it serves ([`MadeFor`]).
fn make_proxy(c: &Arc<Conn>, st: &mut State, import: u64, once: bool, owner: Option<u32>) -> io::Result<Item> {
    if once {
        // A send-once right needs no port behind it: one socket pair,
        // registered once, is a proxy for its one message.
        let (rx, so) = ferry::reply_pair()?;
        let rx = AsyncReplyReceiver::new(rx)?;
        tokio::spawn(forward_once(c.clone(), rx, import, st.kill_switch(import)));
        return Ok(Item::SendOnce(so));
    }
    let (rx, tx) = ferry::port()?;
    let rx = AsyncReceiveRight::new(rx)?;
    let k = key_of(tx.as_fd())?;
    st.link.proxy_made(k, import);
    let serve = forward(c.clone(), rx, import, k, st.kill_switch(import));
    match owner {
        Some(uid) => {
            c.made_for.lock().unwrap().insert(k, uid);
            let made_for = c.made_for.clone();
            tokio::spawn(async move {
                serve.await;
                made_for.lock().unwrap().remove(&k);
            });
        }
        None => {
            tokio::spawn(serve);
        }
    }
    Ok(Item::Send(tx))
}

/// The key in `State::streams` of the stream that carries messages for
/// import `import`. A port's messages share one stream (in order, and a
/// slow port holds up only its own stream); the one message of each
/// send-once right (a reply, usually) goes on one stream the link keeps for
/// them all. A stream of its own would cost every reply a stream opened,
/// accepted and finished, and delivery to a send-once right never waits, so
/// sharing the stream holds no reply up behind another.
fn stream_key(import: u64, once: bool) -> u64 {
    if once {
        ONCE_STREAM
    } else {
        import
    }
}

/// [`stream_key`] of the stream for send-once rights' messages. Import ids
/// are the peer's export ids, which count up from 1; a peer that used this
/// one would only put that port's messages on the shared stream.
const ONCE_STREAM: u64 = u64::MAX;

/// The task behind one proxy port: forwards its messages to the peer.
async fn forward(c: Arc<Conn>, mut rx: AsyncReceiveRight, import: u64, key: Key, mut kill: watch::Receiver<bool>) {
    // One wait on the kill switch for the proxy's life: a wait made afresh
    // for each message joined and left the switch's list of waiters each
    // time, a lock and two list updates on every message's way.
    let killed = kill.wait_for(|k| *k);
    tokio::pin!(killed);
    loop {
        let got = tokio::select! {
            m = rx.recv() => m,
            _ = &mut killed => return,
        };
        match got {
            Ok(m) if ferry::bootstrap::ServicePort::is(&m) => c.adopt_port(import, m),
            Ok(m) => c.forward_one(import, false, m).await,
            Err(RecvError::NoSenders) | Err(RecvError::SendOnceDropped) => return c.proxy_gone(import, Some(key)).await,
            Err(RecvError::BadMessage(_)) | Err(RecvError::Timeout) => continue,
            Err(RecvError::Io(e)) => {
                eprintln!("ferry-net: proxy for {}'s port {import} failed: {e}", c.peer);
                return;
            }
        }
    }
}

/// Sends `m` on the send-once right `r` with the sender's credentials
/// `sender` (`None`: this process's own).
fn send_once_as(sender: Option<ferry::Credentials>, r: SendOnceRight, m: Message, timeout: Timeout) -> Result<(), ferry::SendFailed<SendOnceRight>> {
    match sender {
        Some(c) => ferry::sending_as(c, || r.send(m, timeout)),
        None => r.send(m, timeout),
    }
}

/// The task behind the proxy of one send-once right: forwards its one
/// message to the peer, or tells the peer that none will come.
async fn forward_once(c: Arc<Conn>, mut rx: AsyncReplyReceiver, import: u64, mut kill: watch::Receiver<bool>) {
    let got = tokio::select! {
        m = rx.recv() => m,
        _ = kill.wait_for(|k| *k) => return,
    };
    match got {
        Ok(m) => c.forward_one(import, true, m).await,
        // Destroyed unused, or what came was malformed (and discarded):
        // either way the right is used up.
        Err(RecvError::SendOnceDropped) | Err(RecvError::BadMessage(_)) | Err(RecvError::NoSenders) => c.proxy_gone(import, None).await,
        Err(RecvError::Timeout) => {}
        Err(RecvError::Io(e)) => eprintln!("ferry-net: proxy for {}'s send-once right {import} failed: {e}", c.peer),
    }
}

/// Why `item` cannot cross to another host, if it cannot: a receive right,
/// an item that only makes sense here, or a region its sender may still
/// change that is too large to copy into the frame.
fn cannot_cross(item: &Item) -> Option<(Refusal, String)> {
    match item {
        Item::Send(_) | Item::SendOnce(_) => None,
        Item::Region(r) if r.len() > MAX_EAGER_REGION && !r.mode().is_by_value() => Some((
            Refusal::MutableRegion,
            format!(
                "a {:?} region of {} bytes cannot cross by reference: its sender may still change it (send it by copy or move)",
                r.mode(),
                r.len()
            ),
        )),
        Item::Region(_) => None,
        Item::Receive(_) => Some((Refusal::ReceiveRight, "receive rights do not cross the network".into())),
        _ => Some((Refusal::OtherItem, "this kind of item does not cross the network".into())),
    }
}

/// Descriptors a node keeps free for its own work (links, streams,
/// accepting, its name server) whatever its users send.
const FD_RESERVE: usize = 64;

/// Descriptors one item of a message may cost the node that takes it: a
/// kept send right is the right, its readiness and its watcher's copy; a
/// proxy a socket pair and its readiness; a region by reference its
/// memory.
const FDS_PER_ITEM: usize = 3;

/// Why `needed` more descriptors would take this process into its last
/// [`FD_RESERVE`], or `None` when they fit. Descriptors are handed out
/// lowest first, so the probe asks for the lowest free one at or above
/// the limit less the reserve and `needed` (a few system calls, made only
/// for messages with rights or regions); only when that one is taken are
/// the open descriptors counted. Nothing is kept open between calls.
fn fds_short(needed: usize) -> Option<String> {
    use rustix::process::{getrlimit, Resource};
    let limit = getrlimit(Resource::Nofile).current.map_or(usize::MAX, |l| l as usize);
    let below = limit.saturating_sub(FD_RESERVE + needed);
    let probe = rustix::fs::open("/", rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty());
    if let Ok(fd) = probe.and_then(|p| rustix::io::fcntl_dupfd_cloexec(&p, i32::try_from(below).unwrap_or(i32::MAX))) {
        use std::os::fd::AsRawFd;
        if fd.as_raw_fd() as usize == below {
            return None;
        }
    }
    let open = std::fs::read_dir("/proc/self/fd").map_or(limit, |d| d.count());
    (open + needed + FD_RESERVE > limit).then(|| {
        format!("this node is short of descriptors ({open} open of its limit of {limit}, and {FD_RESERVE} kept for its own work)")
    })
}

/// Why one local user, holding `mine` of this node's descriptors on a
/// link, may not take `needed` more, if it may not: a user may hold at
/// most half of what is free of them with its own counted in (so however
/// many of its rights it sends or is sent, it leaves at least as many
/// free as it holds), and one holding none is held only by
/// [`fds_short`]. Without it one user's rights, each within its count
/// budgets, took every descriptor of a node with a few thousand, and
/// every other user's rights were refused as the node being short.
fn fds_over_share(needed: usize, mine: usize, uid: u32) -> Option<String> {
    if mine == 0 {
        return None;
    }
    fds_short(mine + 2 * needed).map(|short| {
        let counts = short.trim_start_matches("this node is short of descriptors ");
        let why = format!("user {uid} holds about {mine} of this node's descriptors on this link, and one user may hold at most half of those free with its own {counts}");
        static SAID: AtomicU64 = AtomicU64::new(0);
        say_once_a_minute(&SAID, &format!("ferry-net: {why}"));
        why
    })
}

/// Logs that the node is short of descriptors, at most once a minute
/// however often it refuses for it.
fn say_short(why: &str) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    say_once_a_minute(&LAST, &format!("ferry-net: {why}: refusing messages with rights and regions until some are let go"));
}

/// Logs `msg` (and that it is said once a minute) unless `last`, the
/// second it was last said, is under a minute ago: what users can make
/// happen as often as they like must not fill the daemon's log.
pub(crate) fn say_once_a_minute(last: &AtomicU64, msg: &str) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let before = last.load(Ordering::Relaxed);
    if now >= before + 60 && last.compare_exchange(before, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        eprintln!("{msg} (said once a minute)");
    }
}

/// Mappings and copies one local user may have at once of all the regions
/// this node serves (regions received by reference, each served by an
/// object server of its own): each mapping costs the node two descriptors
/// (its userfaultfd and lifeline), each copy one (its hold). Past it a
/// mapping or copy is refused with `PagerError::OverBudget`. Each
/// region's server had budgets of its own, so a user's mappings and
/// copies cost the node 384 descriptors more for every region it was sent.
pub const REGION_USES_PER_USER: usize = 256;

/// Ports made for one user's lookups (of proxies offered as system
/// services) that one link serves at once: each costs the node a socket,
/// its readiness and a task.
pub const ADOPTED_PER_USER: usize = 1024;

/// Descriptors (rights and regions, one each) that the messages one local
/// user sent to one peer's ports may hold in the node while they wait to
/// cross: a message waits for its stream's credit, and a user with many
/// proxies (a port for each lookup of a system import) could otherwise
/// have one wait on each and take every descriptor the node may open.
/// Past it, a message is refused at once (`Refusal::OverBudget`).
pub const FDS_WAITING_PER_USER: usize = 1024;

/// Descriptors of a message counted against its sender's
/// [`FDS_WAITING_PER_USER`] until dropped.
struct WaitingFds<'a> {
    conn: &'a Conn,
    uid: u32,
    n: usize,
}

impl<'a> WaitingFds<'a> {
    /// Counts `n` descriptors for user `uid`, if its budget has room.
    fn take(conn: &'a Conn, uid: u32, n: usize) -> Option<WaitingFds<'a>> {
        // A message of no descriptors counts nothing (most calls).
        if n == 0 {
            return Some(WaitingFds { conn, uid, n });
        }
        let mut held = conn.waiting_fds.lock().unwrap();
        let mine = held.entry(uid).or_insert(0);
        if *mine + n > FDS_WAITING_PER_USER {
            if *mine == 0 {
                held.remove(&uid);
            }
            return None;
        }
        *mine += n;
        Some(WaitingFds { conn, uid, n })
    }
}

impl Drop for WaitingFds<'_> {
    fn drop(&mut self) {
        if self.n == 0 {
            return;
        }
        let mut held = self.conn.waiting_fds.lock().unwrap();
        if let Some(mine) = held.get_mut(&self.uid) {
            *mine -= self.n;
            if *mine == 0 {
                held.remove(&self.uid);
            }
        }
    }
}

/// Credit taken on a message stream for a frame, given back to the
/// stream when dropped unless the frame was written (`None`).
struct Unused<'a>(Option<(&'a flow::Out, usize)>);

impl Drop for Unused<'_> {
    fn drop(&mut self) {
        if let Some((flow, n)) = self.0.take() {
            flow.credit(n as u64);
        }
    }
}

/// A local right taken out of a message, waiting for the state machine to
/// say whether to keep it.
enum Taken {
    /// A send right, and its port's key (none for a dead name).
    Send(SendRight, Option<Key>),
    Once(SendOnceRight),
    Region(RegionItem),
    None,
}

impl Conn {
    /// A proxy can deliver nothing more (every right to it is gone): tells
    /// the peer its reference is released.
    async fn proxy_gone(self: &Arc<Self>, import: u64, key: Option<Key>) {
        let f = {
            let mut st = self.state.lock().unwrap();
            let f = st.link.proxy_released(import, key);
            st.proxy_owners.remove(&(key, import));
            st.forget_if_gone(import);
            f
        };
        if let Some(f) = f {
            self.send_control(&[f]).await;
        }
    }

    /// Serves the port in `m` (a name server's
    /// [`ServicePort`](ferry::bootstrap::ServicePort) message) as another proxy for
    /// import `import`, charged to the user it was made for. Past that
    /// user's share of the proxies, when this node is short of
    /// descriptors, or when the import is gone, the port is dropped: the
    /// user's right to it is a dead name, as any right that arrives past
    /// its owner's share.
    fn adopt_port(self: &Arc<Self>, import: u64, mut m: Message) {
        let owner = u32::from_le_bytes(m.body()[..4].try_into().unwrap_or_default());
        let mut items = m.take_items().into_iter();
        let (Some(Item::Receive(rx)), Some(Item::Send(tx))) = (items.next(), items.next()) else { return };
        let (key, rx) = match (key_of(tx.as_fd()), AsyncReceiveRight::new(rx)) {
            (Ok(k), Ok(rx)) => (k, rx),
            (Err(e), _) | (_, Err(e)) => return eprintln!("ferry-net: a port made for user {owner}'s lookup of {}'s port {import} is dropped: {e}", self.peer),
        };
        drop(tx);
        if let Some(why) = fds_short(FDS_PER_ITEM) {
            return say_short(&why);
        }
        let mut st = self.state.lock().unwrap();
        let mine = st.proxy_owners.of(owner);
        let regions = st.remote_regions.values().filter(|(_, o)| *o == owner).count();
        if fds_over_share(FDS_PER_ITEM, mine * FDS_PER_ITEM + regions, owner).is_some() {
            return;
        }
        let others = st.proxy_owners.len() - mine;
        let adopted = st.adopted.get(&owner).copied().unwrap_or(0);
        if mine + 1 > share_left(self.limits.peer_proxies, others) || adopted >= ADOPTED_PER_USER {
            static SAID: AtomicU64 = AtomicU64::new(0);
            return say_once_a_minute(
                &SAID,
                &format!(
                    "ferry-net: ports made for user {owner}'s lookups of {}'s ports are dropped: that user has {mine} of its proxies ({adopted} of them made for lookups, of at most {ADOPTED_PER_USER}), and one user may have at most half of what the others leave",
                    self.peer
                ),
            );
        }
        if !st.link.proxy_copied(import) {
            return;
        }
        st.link.proxy_made(key, import);
        st.proxy_owners.insert((Some(key), import), owner);
        *st.adopted.entry(owner).or_insert(0) += 1;
        self.made_for.lock().unwrap().insert(key, owner);
        let kill = st.kill_switch(import);
        let c = self.clone();
        tokio::spawn(async move {
            forward(c.clone(), rx, import, key, kill).await;
            c.made_for.lock().unwrap().remove(&key);
            let mut st = c.state.lock().unwrap();
            if let Some(n) = st.adopted.get_mut(&owner) {
                *n -= 1;
                if *n == 0 {
                    st.adopted.remove(&owner);
                }
            }
        });
    }

    /// Translates one message from a proxy port and sends it on the
    /// destination's stream; `once`: the proxy stands for a send-once
    /// right, whose one message goes on the link's stream for those.
    async fn forward_one(self: &Arc<Self>, import: u64, once: bool, mut m: Message) {
        // What cannot cross, and what would pass its sender's budgets, is
        // known from the items before any is taken: such a message is
        // refused with all of its items given back (`refuse`).
        if let Some((code, why)) = m.items().iter().find_map(cannot_cross) {
            return self.refuse(&mut m, code, &why);
        }
        // The message's descriptors are this node's until it has crossed,
        // which waits for its stream's credit: counted against its
        // sender's budget of them meanwhile.
        let uid = m.sender().map_or(u32::MAX, |c| c.uid);
        let Some(_fds) = WaitingFds::take(self, uid, m.items().len() + usize::from(m.has_reply())) else {
            let why = format!("its sender's messages waiting to cross to {} hold {FDS_WAITING_PER_USER} descriptors already", self.peer);
            return self.refuse(&mut m, Refusal::OverBudget, &why);
        };
        // Budgets: what this message could make this node keep for the
        // peer on its sender's behalf, counted before anything is kept.
        // One pass: each send right's death is asked once (a system call)
        // and remembered for taking the items below.
        let (mut rights, mut regions) = (usize::from(m.has_reply()), 0);
        let (mut caps, mut eager, mut space) = (0, Vec::new(), 0u64);
        let mut dead = Vec::with_capacity(m.items().len());
        for item in m.items() {
            let is_dead = matches!(item, Item::Send(s) if s.is_dead());
            match item {
                Item::Send(_) if !is_dead => rights += 1,
                Item::SendOnce(_) => rights += 1,
                Item::Region(r) if r.len() as u64 > frame::MAX_REMOTE_REGION => {
                    let why = format!("a region of {} bytes is over the {} a link sends by reference", r.len(), frame::MAX_REMOTE_REGION);
                    return self.refuse(&mut m, Refusal::TooLarge, &why);
                }
                Item::Region(r) if r.len() > MAX_EAGER_REGION => {
                    regions += 1;
                    space += r.len() as u64;
                }
                Item::Region(r) => eager.push(r.len()),
                _ => {}
            }
            caps += usize::from(matches!(item, Item::Send(_) | Item::SendOnce(_)));
            dead.push(is_dead);
        }
        // The reply right is not counted (see `apply_event`): a call pays
        // no probe.
        let takes = caps * FDS_PER_ITEM + regions;
        if takes > 0 {
            if let Some(why) = fds_short(takes) {
                say_short(&why);
                return self.refuse(&mut m, Refusal::Failed, &why);
            }
            let mine = {
                let st = self.state.lock().unwrap();
                let (refs, kept) = st.budgets.of(uid);
                refs * FDS_PER_ITEM + kept
            };
            if let Some(why) = fds_over_share(takes, mine, uid) {
                return self.refuse(&mut m, Refusal::OverBudget, &why);
            }
        }
        let len = frame::message_len(m.body().len(), caps, regions, eager.iter().copied(), m.has_reply());
        if len > frame::MAX_FRAME {
            let why = format!(
                "its body and regions of up to {MAX_EAGER_REGION} bytes, which cross in the message, make {len} bytes, over the {} a link carries in one (larger regions cross by reference)",
                frame::MAX_FRAME
            );
            return self.refuse(&mut m, Refusal::TooLarge, &why);
        }
        let (over, existing) = {
            let mut st = self.state.lock().unwrap();
            let over = st.budgets.over(uid, rights, regions, self.limits, &self.peer);
            let over = over.or_else(|| st.budgets.space_over(uid, space, &self.peer));
            let over = over.or_else(|| if once { None } else { st.budgets.stream_over(uid, import, self.limits, &self.peer) });
            if over.is_none() && !once {
                // Charged even if taking an item fails below (out of
                // descriptors or memory): the stream is refunded when the
                // port's proxies go.
                st.budgets.charge_stream(uid, import);
            }
            let existing = if over.is_none() { st.streams.get(&stream_key(import, once)).cloned() } else { None };
            (over, existing)
        };
        if let Some(why) = over {
            return self.refuse(&mut m, Refusal::OverBudget, &why);
        }
        // The stream's credit for the frame is had before its regions are
        // copied out: a frame waiting for credit (its port on the peer's
        // host does not read) used to be held whole meanwhile, and a user
        // with many proxies (a port for each lookup of a system import)
        // made the node hold a frame of up to 40 MiB, twice over, for each.
        // Meanwhile this proxy reads nothing more, and its queue pushes
        // back on the local senders.
        let stream = match existing {
            Some(s) => s,
            None => {
                let s = match self.conn.open_uni().await {
                    Ok(s) => s,
                    Err(_) => return,
                };
                let s = Arc::new(OutStream { id: u64::from(s.id()), send: tokio::sync::Mutex::new(s), flow: Arc::default(), turns: turns::Turns::default() });
                let mut st = self.state.lock().unwrap();
                if st.link.is_closed() {
                    return;
                }
                let s = st.streams.entry(stream_key(import, once)).or_insert(s).clone();
                st.out_flows.entry(s.id).or_insert_with(|| s.flow.clone());
                s
            }
        };
        // Its user's turn at the stream first: one user's many proxies
        // (a port for each lookup of a system import) wait as one.
        let turn = match stream.turns.take(uid) {
            Ok(t) => t,
            Err(waiting) => waiting.turn().await,
        };
        let mut s = stream.send.lock().await;
        // Within the stream's credit: waited for, or for a large frame it
        // does not cover, asked for.
        let want = [Frame::Want { stream: stream.id, target: import, bytes: len as u64 }];
        if stream.flow.take_or_ask(len, || self.send_control(&want)).await.is_err() {
            return;
        }
        // Given back if the frame is not written after all.
        let mut unused = Unused(Some((&stream.flow, len)));
        // The budgets again, as this message's items are charged below:
        // the user's other messages may have been while it waited. (A
        // message that charges nothing passes them.)
        if rights > 0 || regions > 0 || space > 0 {
            let over = {
                let st = self.state.lock().unwrap();
                st.budgets.over(uid, rights, regions, self.limits, &self.peer).or_else(|| st.budgets.space_over(uid, space, &self.peer))
            };
            if let Some(why) = over {
                return self.refuse(&mut m, Refusal::OverBudget, &why);
            }
        }
        let mut outs = Vec::new();
        let mut taken = Vec::new();
        for (item, is_dead) in m.take_items().into_iter().zip(dead) {
            match item {
                Item::Send(s) if is_dead => {
                    outs.push(Outgoing::DeadSend);
                    taken.push(Taken::Send(s, None));
                }
                Item::Send(s) => match key_of(s.as_fd()) {
                    Ok(k) => {
                        outs.push(Outgoing::Send(k));
                        taken.push(Taken::Send(s, Some(k)));
                    }
                    Err(e) => return self.refuse(&mut m, Refusal::Failed, &e.to_string()),
                },
                Item::SendOnce(s) => {
                    outs.push(Outgoing::Once);
                    taken.push(Taken::Once(s));
                }
                // By value (`cannot_cross` refused any other), so its
                // sealed memfd is kept as it is and read for the peer's
                // fetches (`serve_fetch`).
                Item::Region(r) if r.len() > MAX_EAGER_REGION => {
                    outs.push(Outgoing::Remote(r.len() as u64));
                    taken.push(Taken::Region(r));
                }
                Item::Region(r) => match r.copy_out(MAX_EAGER_REGION) {
                    Ok(b) => {
                        outs.push(Outgoing::Region(b));
                        taken.push(Taken::None);
                    }
                    Err(e) => return self.refuse(&mut m, Refusal::Failed, &format!("region cannot cross: {e}")),
                },
                // Refused by `cannot_cross` above, before anything was taken.
                other => {
                    let (code, why) = cannot_cross(&other).unwrap_or((Refusal::Failed, "an item that was checked could not be taken".into()));
                    return self.refuse(&mut m, code, &why);
                }
            }
        }
        let reply = match m.take_reply() {
            Some(Reply::Send(s)) if s.is_dead() => {
                taken.push(Taken::Send(s, None));
                Some(Outgoing::DeadSend)
            }
            Some(Reply::Send(s)) => match key_of(s.as_fd()) {
                Ok(k) => {
                    taken.push(Taken::Send(s, Some(k)));
                    Some(Outgoing::Send(k))
                }
                Err(e) => return self.drop_message(&e.to_string()),
            },
            Some(Reply::SendOnce(s)) => {
                taken.push(Taken::Once(s));
                Some(Outgoing::Once)
            }
            None => None,
        };
        let body = std::mem::take(m.body_mut());
        let frame = {
            let mut st = self.state.lock().unwrap();
            let (frame, stores) = match st.link.message(import, m.op(), body, outs, reply) {
                Ok(x) => x,
                Err(_) => {
                    // The destination died meanwhile: the message is
                    // dropped, and the stream charged for it above is free.
                    st.forget_if_gone(import);
                    return;
                }
            };
            for (store, t) in stores.into_iter().zip(taken) {
                match (store, t) {
                    (Store::Keep(id), Taken::Send(s, key)) => keep_send(self, &mut st, id, s, key),
                    (Store::Keep(id), Taken::Once(s)) => {
                        let owner = once_owner(s.as_fd());
                        st.held.insert(id, Held::Once { right: s, owner });
                    }
                    (Store::Region(id), Taken::Region(m)) => {
                        let len = m.len() as u64;
                        st.regions.insert(id, Arc::new(m));
                        st.budgets.charge_region(uid, id, len);
                        self.counters().regions_sent.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
            // Every reference the frame hands the peer, new export or not.
            if let Frame::Message { parts, reply, .. } = &frame {
                let caps = parts.iter().filter_map(|p| if let Part::Cap(c) = p { Some(c) } else { None }).chain(reply);
                for c in caps {
                    if let Cap::Hosted(id) | Cap::HostedOnce(id) = *c {
                        st.budgets.charge_ref(uid, id);
                    }
                }
            }
            frame
        };
        let bytes = frame.encode_with_len();
        drop(frame);
        // `message_len` is the frame's length exactly, so the credit taken
        // is what is written.
        debug_assert_eq!(bytes.len() - 4, len);
        unused.0 = None;
        let _ = s.write_all(&bytes).await;
        drop(s);
        drop(turn);
        self.state.lock().unwrap().forget_if_gone(import);
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Refuses a message that cannot cross, before anything of it leaves
    /// this host. If it has a reply right, the sender is told why on it
    /// ([`Refusal`]), and the message's items still in it (all of them,
    /// unless taking one failed) come back in the refusal, in their order:
    /// a receive right sent by mistake is not lost. Without a reply right
    /// (or if the refusal cannot be queued) its items are destroyed, and
    /// their holders told as for any dropped right.
    ///
    /// The refusal goes as its sender's message (its uid and gid, this
    /// process's pid), when this node may say so: its reply right may be
    /// a proxy of another peer's port, and sent as the node, its items
    /// crossed there charged to the node's own user, root's for a root
    /// daemon, past the refused user's budgets.
    fn refuse(&self, m: &mut Message, code: Refusal, why: &str) {
        match m.take_reply() {
            Some(reply) => {
                // Any local user with a right to a proxy may send such
                // messages as fast as it likes: a line for each filled the
                // log (3000 lines for 3000 messages).
                static SAID: AtomicU64 = AtomicU64::new(0);
                say_once_a_minute(&SAID, &format!("ferry-net: a message to {}'s port was refused back to its sender: {why}", self.peer));
                let back = m.take_items().into_iter().fold(code.message(why), Message::with_item);
                let _ = ferry::answering_as(m.sender(), || reply.send(back, Timeout::Zero));
            }
            None => self.drop_message(why),
        }
    }

    fn drop_message(&self, why: &str) {
        // As for refusals: a local user may cause these at will.
        static SAID: AtomicU64 = AtomicU64::new(0);
        say_once_a_minute(&SAID, &format!("ferry-net: a message to {}'s port was dropped: {why}", self.peer));
    }
}
