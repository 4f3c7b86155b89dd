//! Copy-on-reference regions: a region too large to send eagerly crosses
//! as a reference, and its pages are fetched from the origin host on first
//! touch.
//!
//! The receiving node serves each such region with a ferry pager
//! ([`ferry::pager::ObjectServer`]) of its own, on its own thread, whose
//! backing store is the far host: the remote pager (`RemotePager`) answers
//! a fault by fetching the cluster of pages around it over a QUIC stream of
//! its own
//! ([`crate::frame::Frame::Fetch`]). The receiving program gets, in place of
//! the region, a send right to that object server; [`RemoteRegion::open`]
//! turns it into an ordinary memory object it maps
//! ([`RemoteRegion::map`]) or, with DASH's immediate-access hint, into an
//! ordinary by-value region holding every byte ([`RemoteRegion::fetch_all`]).
//!
//! Why these shapes:
//! - **A thread and a stream per region.** A fault blocks the pager that
//!   answers it until the bytes arrive, so each region has its own object
//!   server thread, and each fetch its own bidirectional QUIC stream: a
//!   fetch on one region never waits behind another region's fetch, nor
//!   behind messages to any port (no head-of-line blocking).
//! - **Clusters of [`CLUSTER_PAGES`] pages.** A fetch costs a round trip;
//!   16 pages (64 KiB with 4 KiB pages) take about as long to send on a
//!   gigabit link as a LAN round trip, so sequential readers pay roughly
//!   half the round trips' cost in bandwidth, while a program that touches
//!   one page moves at most 16 times what it needed.
//! - **Failure is the pager's dead-pager failure.** When the link is lost,
//!   the region's object server stops: mappings see
//!   [`ferry::pager::ObjectState::PagerDead`], and a touch of a page never
//!   fetched raises `SIGBUS` ([`ferry::pager::DeathPolicy::Sigbus`], as for
//!   any pager that dies); a fault already waiting for the network fails
//!   the same way within the operation timeout. Nothing hangs.
//! - **Release.** The object server stops when nobody holds a send right
//!   to it (the receiver dropped the right, the [`RemoteRegion`] and every
//!   mapping); the node then tells the origin, which unmaps the sealed
//!   memfd it kept.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry::pager::{
    Answer, DeathPolicy, Filling, MappedObject, MemoryObject, ObjectConfig, ObjectServer, Pager, PagerError, PagerFault, SharedBudget, Supply, SupplyMode,
};
use ferry::{Item, Message, ReceiveRight, RegionItem, SendRight, Timeout};

use crate::frame::Frame;
use crate::node::NetError;

/// Pages fetched per fault (see the module doc for why 16).
pub const CLUSTER_PAGES: usize = 16;

/// Bytes read or written per step of a large fetch (each step must arrive
/// within the operation timeout, so a stalled or trickling link is noticed).
const STEP: usize = 1 << 20;

/// Bytes of a whole fetch gathered before they are copied into the
/// asker's region: few enough to stay in cache, enough that each copy's
/// system call is cheap next to the copy itself.
const WRITE_BLOCK: usize = 256 << 10;

/// Requests a region's object server answers besides the pager protocol.
const INFO: u32 = 0x6e65_7401;
const INFO_REPLY: u32 = 0x6e65_7402;
const FETCH_ALL: u32 = 0x6e65_7403;
const FETCHED: u32 = 0x6e65_7404;
/// The pager protocol's error reply (`code`, then a reason).
const ERROR: u32 = 0x7061_00ff;
/// Marks an `INFO_REPLY` as coming from a region's object server.
const MAGIC: u64 = 0x6665_7272_7972_6567;

/// Counters of copy-on-reference traffic of one node.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) bytes_fetched: AtomicU64,
    pub(crate) fetches: AtomicU64,
    pub(crate) bytes_served: AtomicU64,
    pub(crate) regions_sent: AtomicU64,
    pub(crate) regions_received: AtomicU64,
    /// Handshakes started with peers that asked to link (`crate::gate`).
    pub(crate) handshakes: AtomicU64,
    /// Attempts to link that were ignored, past a bound of `crate::gate`.
    pub(crate) handshakes_turned_away: AtomicU64,
    /// Attempts whose address was asked to prove itself first.
    pub(crate) address_checks: AtomicU64,
}

/// Fetches the bytes of one remote region.
#[derive(Debug)]
pub(crate) struct Fetcher {
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) conn: quinn::Connection,
    pub(crate) peer: String,
    pub(crate) id: u64,
    pub(crate) len: u64,
    pub(crate) lost: Arc<AtomicBool>,
    pub(crate) timeout: Duration,
    pub(crate) counters: Arc<Counters>,
}

impl Fetcher {
    /// Fills `buf` with the region's bytes at `offset`, over a stream of
    /// its own; every step is bounded by the operation timeout. As for a
    /// whole fetch, the stream is read by a task of the node's runtime
    /// (into a buffer of its own, copied into `buf` at the end), so this
    /// thread is woken once, when the bytes are all there.
    fn fetch_into(self: &Arc<Self>, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        let me = self.clone();
        let len = buf.len();
        let task = self.handle.spawn(async move {
            let mut got = Vec::with_capacity(len);
            me.stream(offset, len as u64, |_, bytes| {
                got.extend_from_slice(bytes);
                Ok(())
            })
            .await
            .map(|()| got)
        });
        let got = self.wait_for(task)?;
        if got.len() != buf.len() {
            return Err(format!("a fetch from {} brought {} bytes, not {}", self.peer, got.len(), buf.len()));
        }
        buf.copy_from_slice(&got);
        Ok(())
    }

    /// Waits on this (non-runtime) thread for a fetch task of the node's
    /// runtime to end, and gives its result.
    fn wait_for<T>(&self, task: tokio::task::JoinHandle<Result<T, String>>) -> Result<T, String> {
        match self.handle.block_on(task) {
            Ok(done) => done,
            Err(e) => Err(format!("the fetch from {} stopped: {e}", self.peer)),
        }
    }

    /// Fetches `len` bytes of the region at `offset` over a stream of its
    /// own and hands them to `sink` in order as they arrive, with each
    /// piece's position from `offset`; every step ([`STEP`] bytes) is
    /// bounded by the operation timeout.
    async fn stream(&self, offset: u64, len: u64, mut sink: impl FnMut(usize, &[u8]) -> Result<(), String>) -> Result<(), String> {
        if self.lost.load(Ordering::Acquire) {
            return Err(format!("the link to {} is lost", self.peer));
        }
        let req = Frame::Fetch { region: self.id, offset, len }.encode_with_len();
        let t = self.timeout;
        let step = |e: &dyn std::fmt::Display| format!("fetch from {} failed: {e}", self.peer);
        let (mut send, mut recv) = match tokio::time::timeout(t, self.conn.open_bi()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(step(&e)),
            Err(_) => return Err(step(&"timed out")),
        };
        match tokio::time::timeout(t, send.write_all(&req)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(step(&e)),
            Err(_) => return Err(step(&"timed out")),
        }
        let _ = send.finish();
        self.counters.fetches.fetch_add(1, Ordering::Relaxed);
        let mut at = 0u64;
        // Each step of STEP bytes must arrive within the operation timeout:
        // a link that stalls is noticed within it, and one that trickles
        // (a peer sending a byte now and then) cannot hold the fetch for
        // longer than the region's steps allow.
        let mut step_end = 0u64;
        let mut deadline = tokio::time::Instant::now() + t;
        while at < len {
            if at >= step_end {
                step_end = at + STEP as u64;
                deadline = tokio::time::Instant::now() + t;
            }
            let want = (len.min(step_end) - at) as usize;
            let chunk = match tokio::time::timeout_at(deadline, recv.read_chunk(want, true)).await {
                Ok(Ok(Some(c))) => c,
                Ok(Ok(None)) => return Err(step(&format_args!("the stream ended after {at} of {len} bytes"))),
                Ok(Err(e)) => return Err(step(&e)),
                Err(_) => return Err(step(&"timed out")),
            };
            sink(at as usize, &chunk.bytes)?;
            at += chunk.bytes.len() as u64;
            self.counters.bytes_fetched.fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The pager of a region received by reference: its backing store is the
/// origin host.
struct RemotePager {
    f: Arc<Fetcher>,
}

impl Pager for RemotePager {
    fn data_request(&mut self, offset: u64, buf: &mut [u8]) -> Result<Supply, PagerFault> {
        // The buffer is whole pages; the region may end inside the last.
        let n = (self.f.len.saturating_sub(offset) as usize).min(buf.len());
        self.f.fetch_into(offset, &mut buf[..n]).map_err(PagerFault)?;
        Ok(Supply::Provided)
    }
}

/// Starts the object server of one region received by reference, on a
/// thread of its own; returns the send right the receiving program gets.
/// Its mappings and copies count against `uses`, which every region
/// server of the node shares. `on_exit` runs when the server stops
/// (released, or the link lost).
pub(crate) fn serve(f: Arc<Fetcher>, uses: SharedBudget, on_exit: Box<dyn FnOnce() + Send>) -> io::Result<SendRight> {
    let (port, right) = ferry::port()?;
    std::thread::Builder::new().name("ferry-net-region".into()).spawn(move || {
        run(port, &f, uses);
        on_exit();
    })?;
    Ok(right)
}

fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(port: ReceiveRight, f: &Arc<Fetcher>, uses: SharedBudget) {
    let mut server = match ObjectServer::with_port(port) {
        Ok(s) => s,
        Err(e) => return eprintln!("ferry-net: cannot serve a region from {}: {e}", f.peer),
    };
    server.share_budget(uses);
    // Its answers may go on through the asker's proxy of a peer's port:
    // they are the asker's there, not the node's.
    server.answer_as_asker();
    let config = ObjectConfig { cluster: CLUSTER_PAGES, mode: SupplyMode::Copy, on_death: DeathPolicy::Sigbus, track_dirty: false };
    let id = match server.add_object(f.len, Box::new(RemotePager { f: f.clone() }), config) {
        Ok(id) => id,
        Err(e) => return eprintln!("ferry-net: cannot serve a region from {}: {e}", f.peer),
    };
    // Holding a send right to this server is the capability: whoever the
    // message's receiver gave it to may map the region, whatever its uid.
    let _ = server.grant_everyone(id);
    let mut ext = |_: &mut ObjectServer, m: &mut Message| -> Option<Answer> {
        match m.op() {
            INFO => Some(Ok(Message::new(INFO_REPLY).with_body(words(&[MAGIC, id, f.len])))),
            FETCH_ALL => Some(fetch_all(f, m)),
            _ => None,
        }
    };
    // Bounded waits, so a lost link stops the server within one.
    while !f.lost.load(Ordering::Acquire) {
        if let Err(e) = server.serve_with(Timeout::After(Duration::from_millis(100)), &mut ext) {
            eprintln!("ferry-net: the server of a region from {} failed: {e}", f.peer);
            break;
        }
        if server.port_closed() && server.object_stats(id).is_none_or(|s| s.clients == 0) {
            break;
        }
    }
}

/// Fetches the whole region (DASH's immediate-access hint) into the
/// region the asker made for it: one request, streamed, each block copied
/// into the asker's memory through the userfaultfd it sent
/// ([`ferry::pager::Filling`]). The pages are the asker's, allocated in
/// its address space and counted against its memory; this node holds no
/// more than a block, however often and however many regions it is asked
/// for.
fn fetch_all(f: &Arc<Fetcher>, m: &mut Message) -> Answer {
    let mut items = m.take_items().into_iter();
    let (Some(Item::Pager(into)), None) = (items.next(), items.next()) else {
        return Err((3, "a whole fetch carries the userfaultfd of the region to fill, and nothing else".into()));
    };
    let page = ferry::pager::page_size() as u64;
    if into.registered_len().is_none_or(|n| n < f.len.div_ceil(page) * page) {
        return Err((3, format!("the region to fill is smaller than the {} bytes fetched", f.len)));
    }
    // The stream is read by a task of the node's runtime, beside the
    // connection that receives its packets, not by this thread, which would
    // be woken across threads each time it had drained what had arrived.
    // The packets' bytes are gathered into a block that stays in cache and
    // copied, whole pages at a time, into the asker's region; a copy of a
    // block holds the runtime's thread for well under a millisecond.
    let fetcher = f.clone();
    let page = page as usize;
    let task = f.handle.spawn(async move {
        let mut block = Vec::with_capacity(WRITE_BLOCK + page);
        let mut block_at = 0u64;
        let len = fetcher.len;
        fetcher
            .stream(0, len, |at, bytes| {
                block.extend_from_slice(bytes);
                let end = (at + bytes.len()) as u64 == len;
                if end {
                    block.resize(block.len().div_ceil(page) * page, 0);
                }
                if block.len() >= WRITE_BLOCK || end {
                    let whole = block.len() / page * page;
                    into.fill(block_at, &block[..whole]).map_err(|e| format!("cannot fill the asker's region: {e}"))?;
                    block.drain(..whole);
                    block_at += whole as u64;
                }
                Ok(())
            })
            .await
    });
    f.wait_for(task).map_err(|e| (6, e))?;
    Ok(Message::new(FETCHED))
}

/// A region that arrived by reference from another host: in the message,
/// it is a send right to the receiving node's object server for it.
///
/// ```no_run
/// # fn f(mut msg: ferry::Message) -> Result<(), Box<dyn std::error::Error>> {
/// use ferry::Item;
/// let Some(Item::Send(right)) = msg.take_items().pop() else { return Ok(()) };
/// let region = ferry_net::RemoteRegion::open(right)?;
/// let view = region.map()?;             // pages are fetched as they are touched
/// let first = view.as_slice().unwrap()[0];
/// # let _ = first; Ok(()) }
/// ```
#[derive(Debug)]
pub struct RemoteRegion {
    server: SendRight,
    object: MemoryObject,
    len: u64,
}

impl RemoteRegion {
    /// Opens the region behind `right` (the item that took the region's
    /// place in a message from another host).
    ///
    /// # Errors
    /// [`NetError::NotARegion`] if `right` is not a region's object server
    /// (or it did not answer in 5 s), or its server runs as another user
    /// than this process's and root; [`NetError::LinkLost`] if it is gone.
    pub fn open(right: SendRight) -> Result<RemoteRegion, NetError> {
        let r = call(&right, Message::new(INFO), Timeout::After(Duration::from_secs(5)))?;
        // Mapping or fetching the region hands its server this process's
        // userfaultfd, with which it could fill any untouched memory of
        // this process: only a node run by this user or by root serves it.
        let server = r.sender().map(|c| c.uid);
        if !server.is_some_and(|u| u == 0 || u == rustix::process::geteuid().as_raw()) {
            return Err(NetError::NotARegion(format!(
                "the right's port answered as {}, neither this process's user nor root, and a region's server gets this process's userfaultfd",
                server.map_or("an unknown user".to_owned(), |u| format!("uid {u}"))
            )));
        }
        let w: Vec<u64> = r.body().chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
        match (r.op(), w.as_slice()) {
            (INFO_REPLY, &[MAGIC, id, len]) => {
                let object = MemoryObject::new(right.try_clone()?, id);
                Ok(RemoteRegion { server: right, object, len })
            }
            _ => Err(NetError::NotARegion("the right's port did not answer as a remote region".into())),
        }
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never empty (an empty region is sent eagerly).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The memory object serving the region (for its counters, or to map).
    pub fn object(&self) -> &MemoryObject {
        &self.object
    }

    /// Maps the region: pages are fetched from the origin host as they are
    /// first touched, a cluster at a time. If the link is lost, pages never
    /// fetched follow [`ferry::pager::DeathPolicy::Sigbus`] (see
    /// [`MappedObject::state`]).
    ///
    /// # Errors
    /// As [`MemoryObject::map`].
    pub fn map(&self) -> Result<MappedObject, PagerError> {
        self.object.map()
    }

    /// Fetches every byte now, in one streamed transfer, into an ordinary
    /// by-value region (DASH's immediate-access hint): cheapest when the
    /// receiver will read all of it.
    ///
    /// It waits as long as the transfer keeps moving: the node bounds each
    /// step (opening the stream, sending the request, every mebibyte of
    /// the answer) by its operation timeout and answers with an error when
    /// one takes longer, and a node that dies drops the answer's send-once
    /// right, which ends the wait too. So a link that stalls, or trickles
    /// under a mebibyte per operation timeout, fails; a slow one that
    /// keeps up does not. (A fixed deadline scaled by the length failed
    /// healthy transfers over slow links, and left the node fetching bytes
    /// nobody waited for.)
    ///
    /// # Errors
    /// [`NetError::LinkLost`] if the link is lost, or a mebibyte does not
    /// arrive within the operation timeout; [`NetError::Io`] if the memory cannot be had
    /// here (the copy is this process's: it is made here and filled
    /// through a userfaultfd, [`ferry::pager::Filling`], so it counts
    /// against this process's memory, never the node's).
    pub fn fetch_all(&self) -> Result<RegionItem, NetError> {
        let len = usize::try_from(self.len).map_err(|_| io::Error::other("the region is larger than this host's address space"))?;
        let (filling, into) = Filling::new(len).map_err(|e| io::Error::other(format!("cannot make the region to fetch into: {e}")))?;
        let r = call(&self.server, Message::new(FETCH_ALL).with_item(Item::Pager(into)), Timeout::Infinite)?;
        if r.op() != FETCHED {
            return Err(NetError::NotARegion("unexpected answer to a fetch".into()));
        }
        let region = filling.finish().map_err(|e| io::Error::other(format!("cannot end the fetch: {e}")))?;
        Ok(region.by_move().map_err(|e| io::Error::other(format!("cannot seal the fetched region: {e}")))?)
    }
}

fn call(server: &SendRight, msg: Message, timeout: Timeout) -> Result<Message, NetError> {
    let (mut rx, tx) = ferry::port()?;
    drop(tx);
    let once = rx.make_send_once()?;
    server.send(msg.with_reply(once), timeout).map_err(|e| match e.into_error() {
        ferry::SendError::Timeout | ferry::SendError::QueueFull => NetError::Timeout,
        e => NetError::LinkLost(format!("the region's server is gone: {e}")),
    })?;
    let r = rx.recv(timeout).map_err(|e| match e {
        ferry::RecvError::Timeout => NetError::Timeout,
        e => NetError::LinkLost(format!("the region's server is gone: {e}")),
    })?;
    if r.op() == ERROR {
        let code = r.body().get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        let why = String::from_utf8_lossy(r.body().get(8..).unwrap_or_default()).into_owned();
        return Err(match code {
            6 => NetError::LinkLost(why),
            2 => NetError::NotARegion(why),
            _ => NetError::Io(io::Error::other(why)),
        });
    }
    Ok(r)
}
