//! The link protocol as a state machine without I/O.
//!
//! One [`Link`] holds what one network server knows about its peer: the
//! **export table** (local ports the peer holds references to, each with a
//! reference count, as in Cap'n Proto's `rpc.capnp`), the **import table**
//! (the peer's ports for which this side made proxy ports) and the pending
//! name lookups. It is fed decoded-or-not frames from the peer
//! ([`Link::handle`]) and local events (a message to send through a proxy,
//! a proxy whose last local holder let go, an exported port that died) and
//! answers with frames to send and [`Event`]s for the driver to carry out.
//! It never touches a descriptor: local ports appear only as a [`Key`] (the
//! identity of a port's send socket) and the driver keeps the rights
//! themselves in maps by export or import id.
//!
//! Rules it keeps:
//! - An id in a frame must name an entry that exists and has the right
//!   kind, and a release may not drop more references than were handed
//!   out; anything else is a [`LinkError`] and the link is closed (only
//!   that link: the state machine is per peer).
//! - Export ids are never reused, so a late frame cannot reach a newer port.
//! - A right that comes home ([`Cap::Returned`]) becomes the original port.
//! - Frames travel on several streams, so a release can overtake a message
//!   sent before it (to the export, or carrying it home). Each release says
//!   how many such uses its sender made in all; the export is freed only
//!   when every reference is released *and* that many uses have arrived.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use crate::frame::{Cap, DecodeError, Frame, Part};

/// How many death notices for unknown ids a link remembers.
const RECENT_DEAD: usize = 1024;

/// How many timed-out lookups a link remembers by id; older ones are known
/// by their ids being older ([`Link::cancel_lookup`]).
pub const LATE_LOOKUPS: usize = 1024;

/// The identity of a local port: device and inode of its send socket, the
/// same for every send right to the port.
pub type Key = (u64, u64);

/// Why the peer's frame broke the protocol. The link is closed after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// The frame's bytes are malformed.
    Decode(DecodeError),
    /// An export id this side never handed out, or already freed.
    UnknownExport(u64),
    /// An answer to a lookup this side did not make.
    UnknownRequest(u64),
    /// A right of the wrong kind in this place.
    BadRight(&'static str),
    /// A release of more references than were handed out.
    OverRelease(u64),
    /// A region id this side never sent by reference, or already released.
    UnknownRegion(u64),
    /// A fetch of bytes outside the region: region, offset, length.
    BadFetch(u64, u64, u64),
    /// A frame on a stream where it does not belong.
    Misplaced(&'static str),
    /// The link is closed.
    Closed,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Decode(e) => write!(f, "malformed frame: {e}"),
            LinkError::UnknownExport(id) => write!(f, "frame names export {id}, which does not exist"),
            LinkError::UnknownRequest(r) => write!(f, "answer to lookup {r}, which was never asked"),
            LinkError::BadRight(why) => write!(f, "wrong kind of right: {why}"),
            LinkError::OverRelease(id) => write!(f, "release of more references to export {id} than were given"),
            LinkError::UnknownRegion(id) => write!(f, "frame names region {id}, which was never sent or is released"),
            LinkError::BadFetch(id, off, len) => write!(f, "fetch of {len} bytes at {off} leaves region {id}"),
            LinkError::Misplaced(what) => write!(f, "misplaced frame: {what}"),
            LinkError::Closed => write!(f, "link closed"),
        }
    }
}

impl std::error::Error for LinkError {}

impl From<DecodeError> for LinkError {
    fn from(e: DecodeError) -> Self {
        LinkError::Decode(e)
    }
}

/// A right or region arriving in a message from the peer.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// Make a proxy port for the peer's export `import`; `once` makes it a
    /// send-once right.
    Proxy {
        /// Import id (the peer's export id).
        import: u64,
        /// A send-once right rather than a send right.
        once: bool,
    },
    /// A right to this side's own export `export` came home: hand out a
    /// clone of the original right.
    Home {
        /// The export id.
        export: u64,
    },
    /// Region bytes, to be sealed into a region locally.
    Region(Vec<u8>),
    /// A region sent by reference: serve it locally from the peer's region
    /// `id` of `len` bytes, and release it with [`Link::release_region`].
    Remote {
        /// Region id in the peer's table.
        id: u64,
        /// Length in bytes.
        len: u64,
    },
    /// A send right to a port that is already dead: hand out a dead name.
    DeadName,
}

/// What the driver must do after a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// Deliver a message to the local port held under export `export`. If
    /// `once`, that export was a send-once right and is used up: take it out.
    Deliver {
        /// The export id of the destination.
        export: u64,
        /// Whether the export is a send-once right (consumed now).
        once: bool,
        /// Operation code.
        op: u32,
        /// Inline bytes.
        body: Vec<u8>,
        /// Items, in order.
        items: Vec<Incoming>,
        /// The reply right.
        reply: Option<Incoming>,
    },
    /// The peer looks up `name`; answer with [`Link::answer_lookup`].
    Lookup {
        /// The request id.
        req: u64,
        /// The name asked for.
        name: String,
    },
    /// The answer to this side's lookup `req`: make a proxy for `import`,
    /// or the name is not exported.
    Found {
        /// The request answered.
        req: u64,
        /// Import id to make a proxy for.
        import: Option<u64>,
    },
    /// The answer to this side's lookup `req` named a port, but this side
    /// already holds as many references to the peer's ports as it may
    /// ([`Link::set_max_proxies`]): no proxy, and the reference went back.
    LookupOverLimit {
        /// The request answered.
        req: u64,
    },
    /// The peer's port `import` is dead: destroy every proxy for it.
    ImportDead {
        /// The import id.
        import: u64,
    },
    /// Nobody across the link holds export `export` any more: drop the
    /// right kept for it.
    DropExport {
        /// The export id.
        export: u64,
    },
    /// The peer will fetch no more of region `id` this side sent by
    /// reference (or the link closed): free its bytes.
    DropRegion {
        /// The region id.
        id: u64,
    },
    /// The link closed while this side still served the peer's region `id`
    /// (received by reference): its pages can no longer be fetched.
    RegionLost {
        /// The peer's region id.
        id: u64,
    },
}

/// What the driver does with a right it put into an outgoing message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// Keep it under this export id until [`Event::DropExport`].
    Keep(u64),
    /// Drop it: the port is already exported, or it was a proxy going home.
    Drop,
    /// Nothing to keep (a region sent eagerly).
    Nothing,
    /// Keep the region's bytes under this region id until
    /// [`Event::DropRegion`] (a region sent by reference).
    Region(u64),
}

/// A right or region in an outgoing message, as the driver describes it.
#[derive(Debug)]
pub enum Outgoing {
    /// A send right to the local port with this identity (maybe a proxy).
    Send(Key),
    /// A send right whose port the driver found dead already.
    DeadSend,
    /// A send-once right.
    Once,
    /// A region's bytes.
    Region(Vec<u8>),
    /// A region of this many bytes, sent by reference.
    Remote(u64),
}

/// The result of [`Link::handle`].
#[derive(Debug, Default)]
pub struct Output {
    /// Things for the driver to do, in order.
    pub events: Vec<Event>,
    /// Frames to send to the peer (control stream).
    pub frames: Vec<Frame>,
    /// References to this side's exports that the peer let go of, as
    /// (export id, count): what the driver charged to whoever sent them
    /// is free again.
    pub released: Vec<(u64, u64)>,
}

#[derive(Debug)]
struct Export {
    once: bool,
    refs: u64,
    key: Option<Key>,
    uses_seen: u64,
    uses_announced: u64,
    dead_sent: bool,
}

#[derive(Debug)]
struct Import {
    once: bool,
    /// Local proxies standing for it: those the peer sent, and `local`.
    refs: u64,
    /// Proxies made here for it ([`Link::proxy_copied`]), for which the
    /// peer gave no reference and so is sent no release.
    local: u64,
    uses: u64,
}

/// The state of one link to one peer. See the module doc.
#[derive(Debug, Default)]
pub struct Link {
    exports: HashMap<u64, Export>,
    by_key: HashMap<Key, u64>,
    next_export: u64,
    imports: HashMap<u64, Import>,
    proxies: HashMap<Key, u64>,
    lookups: HashSet<u64>,
    /// Timed-out lookups whose answers may still come, the latest
    /// [`LATE_LOOKUPS`] of them.
    cancelled: BTreeSet<u64>,
    /// Every lookup below this id is answered, pending or timed out: one
    /// not pending was forgotten from `cancelled`, and its answer is late.
    cancelled_below: u64,
    /// Recent `Dead` notices: a right to that export may still be on its
    /// way on another stream, and must arrive dead. Export ids are never
    /// reused, so an entry never misfires.
    recent_dead: std::collections::VecDeque<u64>,
    next_req: u64,
    closed: bool,
    /// Regions this side sent by reference: id → length.
    regions_out: HashMap<u64, u64>,
    next_region: u64,
    /// The peer's regions served here (received by reference).
    regions_in: HashSet<u64>,
    /// References to the peer's ports held here (each a proxy here): the
    /// sum of the imports' counts.
    proxy_refs: u64,
    /// Most of those at once ([`DEFAULT_MAX_PROXIES`]).
    max_proxies: u64,
}

/// Most references to the peer's ports one link holds at once by default
/// (each is a proxy port, a descriptor and a task on this host): past it, a
/// right from the peer arrives as a dead name and its reference goes back
/// at once, so one peer cannot take every descriptor of the host.
pub const DEFAULT_MAX_PROXIES: u64 = 16384;

impl Link {
    /// A fresh link with empty tables.
    pub fn new() -> Link {
        Link { next_export: 1, next_req: 1, next_region: 1, max_proxies: DEFAULT_MAX_PROXIES, ..Link::default() }
    }

    /// Sets how many references to the peer's ports this link holds at
    /// once (see [`DEFAULT_MAX_PROXIES`]).
    pub fn set_max_proxies(&mut self, n: u64) {
        self.max_proxies = n;
    }

    /// References to the peer's ports held here now (proxies).
    pub fn proxy_refs(&self) -> u64 {
        self.proxy_refs
    }

    /// Whether the link is closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Number of live exports (ports the peer holds references to).
    pub fn exports(&self) -> usize {
        self.exports.len()
    }

    /// Number of live imports (peer ports with proxies here).
    pub fn imports(&self) -> usize {
        self.imports.len()
    }

    /// Number of regions this side sent by reference that the peer may
    /// still fetch.
    pub fn regions_out(&self) -> usize {
        self.regions_out.len()
    }

    /// Number of the peer's regions served here.
    pub fn regions_in(&self) -> usize {
        self.regions_in.len()
    }

    /// Number of timed-out lookups whose late answers this side watches
    /// for by id.
    pub fn late_lookups(&self) -> usize {
        self.cancelled.len()
    }

    /// Checks a [`Frame::Fetch`] from the peer (its bytes, read off a fetch
    /// stream): the region must be one this side sent by reference and not
    /// yet released, and the range must lie inside it. Returns the region,
    /// offset and length to send.
    ///
    /// # Errors
    /// [`LinkError::UnknownRegion`], [`LinkError::BadFetch`], a decode
    /// error, or [`LinkError::Misplaced`] for any other frame; the link is
    /// closed then.
    pub fn check_fetch(&mut self, bytes: &[u8]) -> Result<(u64, u64, u64), LinkError> {
        self.open()?;
        let r = match Frame::decode(bytes) {
            Ok(Frame::Fetch { region, offset, len }) => match self.regions_out.get(&region) {
                None => Err(LinkError::UnknownRegion(region)),
                Some(&size) if len == 0 || offset.checked_add(len).is_none_or(|end| end > size) => {
                    Err(LinkError::BadFetch(region, offset, len))
                }
                Some(_) => Ok((region, offset, len)),
            },
            Ok(_) => Err(LinkError::Misplaced("only a fetch may open a fetch stream")),
            Err(e) => Err(e.into()),
        };
        if r.is_err() {
            self.closed = true;
        }
        r
    }

    /// This side will fetch no more of the peer's region `id`: returns the
    /// frame that tells the peer to free it (none if the link is closed or
    /// the region was already released).
    pub fn release_region(&mut self, id: u64) -> Option<Frame> {
        if self.closed || !self.regions_in.remove(&id) {
            return None;
        }
        Some(Frame::RegionRelease { id })
    }

    /// Starts a lookup of `name` at the peer; returns the request id and
    /// the frame to send.
    pub fn lookup(&mut self, name: &str) -> Result<(u64, Frame), LinkError> {
        self.open()?;
        let req = self.next_req;
        self.next_req += 1;
        self.lookups.insert(req);
        Ok((req, Frame::Lookup { req, name: name.to_owned() }))
    }

    /// Forgets a lookup that timed out: a late answer is then no error, and
    /// the right it carries is released at once. The latest
    /// [`LATE_LOOKUPS`] are remembered by id; past them the oldest is known
    /// by its id only (lower than any remembered and not pending), so a
    /// peer that never answers costs the link nothing that grows, and an
    /// answer to an old lookup answered before is taken as late too.
    pub fn cancel_lookup(&mut self, req: u64) {
        if self.lookups.remove(&req) {
            self.cancelled.insert(req);
            if self.cancelled.len() > LATE_LOOKUPS {
                if let Some(old) = self.cancelled.pop_first() {
                    self.cancelled_below = self.cancelled_below.max(old + 1);
                }
            }
        }
    }

    /// Answers the peer's lookup `req` with the local port `key` (the
    /// driver keeps a send right to it as [`Store`] says) or with nothing.
    pub fn answer_lookup(&mut self, req: u64, key: Option<Key>) -> Result<(Frame, Store), LinkError> {
        self.open()?;
        match key {
            None => Ok((Frame::Found { req, cap: None }, Store::Nothing)),
            Some(k) => {
                let (cap, store) = self.export_send(k);
                Ok((Frame::Found { req, cap: Some(cap) }, store))
            }
        }
    }

    /// Records that the local proxy port with send-socket identity `key`
    /// stands for import `import` (so the right goes home when sent back).
    pub fn proxy_made(&mut self, key: Key, import: u64) {
        if self.imports.contains_key(&import) {
            self.proxies.insert(key, import);
        }
    }

    /// A proxy for `import` lost its last local holder (or its send-once
    /// right was dropped unused): release its reference. `key` is the
    /// proxy's identity if it had one.
    pub fn proxy_released(&mut self, import: u64, key: Option<Key>) -> Option<Frame> {
        if let Some(k) = key {
            if self.proxies.get(&k) == Some(&import) {
                self.proxies.remove(&k);
            }
        }
        if self.closed {
            return None;
        }
        let imp = self.imports.get_mut(&import)?;
        imp.refs -= 1;
        self.proxy_refs = self.proxy_refs.saturating_sub(1);
        // The peer's references are released only as the last proxies go:
        // one proxy is as good as another, so the first to go stands for
        // one made here.
        if imp.local > 0 {
            imp.local -= 1;
            return None;
        }
        let uses = imp.uses;
        if imp.refs == 0 {
            self.imports.remove(&import);
        }
        Some(Frame::Release { id: import, count: 1, uses })
    }

    /// Counts one more local proxy for import `import` that the peer did
    /// not send: a port made on this host for one user's lookup of a proxy
    /// offered as a system service. It keeps the import alive like any
    /// proxy, and its release sends the peer nothing (the peer's own
    /// references are released as the last proxies go). False, and nothing
    /// counted, if the import is gone, stands for a send-once right, or
    /// this side holds as many proxies as it may.
    pub fn proxy_copied(&mut self, import: u64) -> bool {
        if self.closed || self.proxy_refs >= self.max_proxies {
            return false;
        }
        match self.imports.get_mut(&import) {
            Some(imp) if !imp.once => {
                imp.refs += 1;
                imp.local += 1;
                self.proxy_refs += 1;
                true
            }
            _ => false,
        }
    }

    /// A local port exported under `export` is dead; returns the frame
    /// telling the peer (once per export).
    pub fn export_dead(&mut self, export: u64) -> Option<Frame> {
        if self.closed {
            return None;
        }
        let e = self.exports.get_mut(&export)?;
        if e.dead_sent {
            return None;
        }
        e.dead_sent = true;
        Some(Frame::Dead { id: export })
    }

    /// Whether import `import` may still be sent to.
    pub fn import_alive(&self, import: u64) -> bool {
        !self.closed && self.imports.contains_key(&import)
    }

    fn export_send(&mut self, key: Key) -> (Cap, Store) {
        if let Some(&import) = self.proxies.get(&key) {
            if let Some(imp) = self.imports.get_mut(&import) {
                imp.uses += 1;
                return (Cap::Returned(import), Store::Drop);
            }
        }
        if let Some(&id) = self.by_key.get(&key) {
            if let Some(e) = self.exports.get_mut(&id) {
                if e.dead_sent {
                    return (Cap::DeadName, Store::Drop);
                }
                e.refs += 1;
                return (Cap::Hosted(id), Store::Drop);
            }
        }
        let id = self.new_export(false, Some(key));
        self.by_key.insert(key, id);
        (Cap::Hosted(id), Store::Keep(id))
    }

    fn new_export(&mut self, once: bool, key: Option<Key>) -> u64 {
        let id = self.next_export;
        self.next_export += 1;
        self.exports.insert(id, Export { once, refs: 1, key, uses_seen: 0, uses_announced: 0, dead_sent: false });
        id
    }

    fn outgoing(&mut self, o: Outgoing) -> (Part, Store) {
        match o {
            Outgoing::Send(k) => {
                let (c, s) = self.export_send(k);
                (Part::Cap(c), s)
            }
            Outgoing::DeadSend => (Part::Cap(Cap::DeadName), Store::Drop),
            Outgoing::Once => {
                let id = self.new_export(true, None);
                (Part::Cap(Cap::HostedOnce(id)), Store::Keep(id))
            }
            Outgoing::Region(b) => (Part::Region(b), Store::Nothing),
            Outgoing::Remote(len) => {
                let id = self.next_region;
                self.next_region += 1;
                self.regions_out.insert(id, len);
                (Part::Remote { id, len }, Store::Region(id))
            }
        }
    }

    /// Sends a message through the proxy for `target`. Returns the frame and,
    /// for each item and then the reply right, what to do with the local
    /// right. If `target` is a send-once import it is used up.
    ///
    /// # Errors
    /// [`LinkError::UnknownExport`] if the target is gone (dead or released):
    /// nothing was exported, and the caller drops the message.
    pub fn message(
        &mut self,
        target: u64,
        op: u32,
        body: Vec<u8>,
        items: Vec<Outgoing>,
        reply: Option<Outgoing>,
    ) -> Result<(Frame, Vec<Store>), LinkError> {
        self.open()?;
        let once = match self.imports.get_mut(&target) {
            Some(i) => {
                i.uses += 1;
                i.once
            }
            None => return Err(LinkError::UnknownExport(target)),
        };
        if let Some(Outgoing::Region(_) | Outgoing::Remote(_)) = reply {
            return Err(LinkError::BadRight("a region as reply right"));
        }
        let mut stores = Vec::with_capacity(items.len() + 1);
        let mut parts = Vec::with_capacity(items.len());
        for o in items {
            let (p, s) = self.outgoing(o);
            parts.push(p);
            stores.push(s);
        }
        let reply = reply.map(|o| {
            let (p, s) = self.outgoing(o);
            stores.push(s);
            match p {
                Part::Cap(c) => c,
                Part::Region(_) | Part::Remote { .. } => unreachable!("checked above"),
            }
        });
        if once {
            if let Some(imp) = self.imports.remove(&target) {
                self.proxy_refs = self.proxy_refs.saturating_sub(imp.refs);
            }
        }
        Ok((Frame::Message { target, op, body, parts, reply }, stores))
    }

    /// Handles one frame's bytes from the peer.
    ///
    /// # Errors
    /// A [`LinkError`] when the frame is malformed or breaks the protocol;
    /// the link is then closed and the caller should call [`Link::close`]
    /// and drop the connection. Nothing of the bad frame is applied.
    pub fn handle(&mut self, bytes: &[u8]) -> Result<Output, LinkError> {
        self.open()?;
        let frame = match Frame::decode(bytes) {
            Ok(f) => f,
            Err(e) => {
                self.closed = true;
                return Err(e.into());
            }
        };
        let r = self.handle_frame(frame);
        if r.is_err() {
            self.closed = true;
        }
        r
    }

    fn check_incoming(&self, c: Cap, seen: &mut HashSet<u64>) -> Result<(), LinkError> {
        match c {
            Cap::Hosted(id) => match self.imports.get(&id) {
                Some(i) if i.once => Err(LinkError::BadRight("send right for a send-once import")),
                _ => Ok(()),
            },
            Cap::HostedOnce(id) => {
                if self.imports.contains_key(&id) || !seen.insert(id) {
                    Err(LinkError::BadRight("send-once id reused"))
                } else {
                    Ok(())
                }
            }
            Cap::DeadName => Ok(()),
            Cap::Returned(id) => match self.exports.get(&id) {
                None => Err(LinkError::UnknownExport(id)),
                Some(e) if e.once => Err(LinkError::BadRight("a send-once right cannot come home")),
                Some(_) => Ok(()),
            },
        }
    }

    fn apply_incoming(&mut self, c: Cap, out: &mut Output) -> Incoming {
        match c {
            Cap::Hosted(id) | Cap::HostedOnce(id) if self.recent_dead.contains(&id) => {
                // Its death notice overtook it: it arrives dead, released.
                out.frames.push(Frame::Release { id, count: 1, uses: 0 });
                Incoming::DeadName
            }
            Cap::DeadName => Incoming::DeadName,
            Cap::Hosted(id) | Cap::HostedOnce(id) if self.proxy_refs >= self.max_proxies => {
                // Past the limit: no proxy; the reference goes back at once.
                let uses = self.imports.get(&id).map_or(0, |i| i.uses);
                out.frames.push(Frame::Release { id, count: 1, uses });
                Incoming::DeadName
            }
            Cap::Hosted(id) => {
                self.imports.entry(id).or_insert(Import { once: false, refs: 0, local: 0, uses: 0 }).refs += 1;
                self.proxy_refs += 1;
                Incoming::Proxy { import: id, once: false }
            }
            Cap::HostedOnce(id) => {
                self.imports.insert(id, Import { once: true, refs: 1, local: 0, uses: 0 });
                self.proxy_refs += 1;
                Incoming::Proxy { import: id, once: true }
            }
            Cap::Returned(id) => {
                if let Some(e) = self.exports.get_mut(&id) {
                    e.uses_seen += 1;
                }
                Incoming::Home { export: id }
            }
        }
    }

    /// Whether export `id` is let go of by the peer, every reference, but
    /// still kept: frames naming it that the peer said it sent (its
    /// `uses`) have not all arrived.
    pub fn export_waiting(&self, id: u64) -> bool {
        self.exports.get(&id).is_some_and(|e| e.refs == 0)
    }

    /// Frees export `id` if nothing across the link can still name it. A
    /// send-once right is named by its one message only, which frees it,
    /// so a release frees it whatever uses it announces (waiting for them,
    /// a peer that announced uses it never sent had the right kept until
    /// the link closed).
    fn maybe_free(&mut self, id: u64, out: &mut Output) {
        if let Some(e) = self.exports.get(&id) {
            if e.refs == 0 && (e.once || e.uses_seen >= e.uses_announced) {
                if let Some(k) = e.key {
                    self.by_key.remove(&k);
                }
                self.exports.remove(&id);
                out.events.push(Event::DropExport { export: id });
            }
        }
    }

    fn handle_frame(&mut self, frame: Frame) -> Result<Output, LinkError> {
        let mut out = Output::default();
        match frame {
            Frame::Lookup { req, name } => out.events.push(Event::Lookup { req, name }),
            Frame::Found { req, cap } => {
                let forgotten = req < self.cancelled_below && !self.lookups.contains(&req);
                if self.cancelled.remove(&req) || forgotten {
                    match cap {
                        None | Some(Cap::DeadName) => {}
                        Some(Cap::Hosted(id)) => {
                            let uses = self.imports.get(&id).map_or(0, |i| i.uses);
                            out.frames.push(Frame::Release { id, count: 1, uses });
                        }
                        Some(_) => return Err(LinkError::BadRight("a lookup answers with a send right")),
                    }
                    return Ok(out);
                }
                if !self.lookups.remove(&req) {
                    return Err(LinkError::UnknownRequest(req));
                }
                match cap {
                    None => out.events.push(Event::Found { req, import: None }),
                    Some(c @ Cap::Hosted(id)) => {
                        self.check_incoming(c, &mut HashSet::new())?;
                        let over = self.proxy_refs >= self.max_proxies && !self.recent_dead.contains(&id);
                        match self.apply_incoming(c, &mut out) {
                            Incoming::Proxy { .. } => out.events.push(Event::Found { req, import: Some(id) }),
                            _ if over => out.events.push(Event::LookupOverLimit { req }),
                            _ => out.events.push(Event::Found { req, import: None }),
                        }
                    }
                    Some(Cap::DeadName) => out.events.push(Event::Found { req, import: None }),
                    Some(_) => return Err(LinkError::BadRight("a lookup answers with a send right")),
                }
            }
            Frame::Message { target, op, body, parts, reply } => {
                // Validate everything first, then apply (nothing half-done).
                let once = match self.exports.get(&target) {
                    None => return Err(LinkError::UnknownExport(target)),
                    Some(e) => e.once,
                };
                let mut seen = HashSet::new();
                let mut homes = Vec::new();
                for c in parts.iter().filter_map(|p| if let Part::Cap(c) = p { Some(*c) } else { None }).chain(reply) {
                    self.check_incoming(c, &mut seen)?;
                    if let Cap::Returned(id) = c {
                        if once && id == target {
                            return Err(LinkError::BadRight("a send-once right's message carries it home"));
                        }
                        homes.push(id);
                    }
                }
                let mut remote = HashSet::new();
                for p in &parts {
                    if let Part::Remote { id, .. } = p {
                        if self.regions_in.contains(id) || !remote.insert(*id) {
                            return Err(LinkError::BadRight("a region id sent by reference twice"));
                        }
                    }
                }
                let mut items = Vec::with_capacity(parts.len());
                for p in parts {
                    items.push(match p {
                        Part::Cap(c) => self.apply_incoming(c, &mut out),
                        Part::Region(b) => Incoming::Region(b),
                        Part::Remote { id, len } => {
                            self.regions_in.insert(id);
                            Incoming::Remote { id, len }
                        }
                    });
                }
                let reply = reply.map(|c| self.apply_incoming(c, &mut out));
                if once {
                    if let Some(e) = self.exports.remove(&target) {
                        if let Some(k) = e.key {
                            self.by_key.remove(&k);
                        }
                    }
                } else if let Some(e) = self.exports.get_mut(&target) {
                    e.uses_seen += 1;
                }
                out.events.push(Event::Deliver { export: target, once, op, body, items, reply });
                if !once {
                    homes.push(target);
                }
                homes.dedup();
                for id in homes {
                    self.maybe_free(id, &mut out);
                }
            }
            Frame::Release { id, count, uses } => {
                let e = self.exports.get_mut(&id).ok_or(LinkError::UnknownExport(id))?;
                if u64::from(count) > e.refs {
                    return Err(LinkError::OverRelease(id));
                }
                e.refs -= u64::from(count);
                e.uses_announced = e.uses_announced.max(uses);
                out.released.push((id, u64::from(count)));
                self.maybe_free(id, &mut out);
            }
            Frame::RegionRelease { id } => {
                if self.regions_out.remove(&id).is_none() {
                    return Err(LinkError::UnknownRegion(id));
                }
                out.events.push(Event::DropRegion { id });
            }
            Frame::Fetch { .. } => return Err(LinkError::Misplaced("a fetch on a message or control stream")),
            Frame::Credit { .. } | Frame::Want { .. } | Frame::Grant { .. } => {
                return Err(LinkError::Misplaced("flow control off the control stream"))
            }
            Frame::Dead { id } => {
                // The import may be released already: a crossing is no error.
                if let Some(imp) = self.imports.remove(&id) {
                    self.proxy_refs = self.proxy_refs.saturating_sub(imp.refs);
                    self.proxies.retain(|_, v| *v != id);
                    out.events.push(Event::ImportDead { import: id });
                    if !imp.once {
                        let count = u32::try_from(imp.refs - imp.local).unwrap_or(u32::MAX);
                        out.frames.push(Frame::Release { id, count, uses: imp.uses });
                    } else {
                        out.frames.push(Frame::Release { id, count: 1, uses: imp.uses });
                    }
                }
                // A right to it sent before the notice may still arrive on
                // another stream: it must arrive dead.
                if !self.recent_dead.contains(&id) {
                    if self.recent_dead.len() >= RECENT_DEAD {
                        self.recent_dead.pop_front();
                    }
                    self.recent_dead.push_back(id);
                }
            }
        }
        Ok(out)
    }

    /// Closes the link (the connection is gone or broke the protocol):
    /// every import becomes dead and every export is dropped.
    pub fn close(&mut self) -> Vec<Event> {
        self.closed = true;
        let mut ev: Vec<Event> = self.imports.drain().map(|(id, _)| Event::ImportDead { import: id }).collect();
        ev.extend(self.exports.drain().map(|(id, _)| Event::DropExport { export: id }));
        ev.extend(self.regions_out.drain().map(|(id, _)| Event::DropRegion { id }));
        ev.extend(self.regions_in.drain().map(|id| Event::RegionLost { id }));
        self.by_key.clear();
        self.proxies.clear();
        self.lookups.clear();
        self.cancelled.clear();
        self.recent_dead.clear();
        self.proxy_refs = 0;
        ev
    }

    fn open(&self) -> Result<(), LinkError> {
        if self.closed {
            Err(LinkError::Closed)
        } else {
            Ok(())
        }
    }
}
