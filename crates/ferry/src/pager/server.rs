//! The pager side: an [`ObjectServer`] hosts memory objects behind one port
//! (and a port of its own for each client, where a [`PortMinter`] makes
//! them), answers `open`/`attach`/`copy`/`write`/`stats` requests, and
//! resolves the faults of every attached client from one event loop.
//!
//! Nothing a client sends can crash the server: every request is checked
//! completely before anything is changed, a malformed one is answered with
//! an `ERROR` reply (or dropped if it has no reply right), and a client whose
//! address space has gone or whose registration is wrong is detached.
//!
//! Who asks is checked on every request, not only at open: each object has
//! a set of users (kernel-reported uids) who may use it, and a request for
//! an object the sender may not use is answered exactly as one for an
//! object that does not exist, so ids cannot be probed. What a user can make
//! the server hold (attached mappings, held objects) is counted per user
//! against [`Budgets`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use rustix::io::Errno;

use super::pages::PageSet;
use super::proto::{self, Fields};
use super::store::{fill_cache, make_cache, object_unavailable, read_object, write_object, Object, Source};
use super::{
    errno, Budgets, Inner, ObjectConfig, ObjectId, ObjectStats, Offset, Pager, PagerError, PagerFd, Supply,
    SupplyMode,
};
use crate::error::RecvError;
use crate::message::{Item, Message, Reply};
use crate::port::{ReceiveRight, SendRight};
use crate::sys::mem;
use crate::sys::kept::Kept;
use crate::sys::uffd::{Event, Partial, Uffd};
use crate::sys::wait::{Epoll, Interest};
use crate::timeout::Timeout;

/// Counters of the server as a whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests answered with an error (malformed, unknown object, denied).
    pub rejected: u64,
    /// Messages the port discarded as malformed before they reached us.
    pub malformed: u64,
    /// Clients detached because they died, unmapped, or broke the protocol.
    pub detached: u64,
}

/// What an extension's handler answers for a request the object server
/// does not know: a reply, or an error code and reason (sent as `ERROR`).
pub type Answer = Result<Message, (u64, String)>;

/// Handles requests for operations the object server does not know, with
/// access to the server (to add objects). Returns `None` to let the server
/// answer "unknown operation".
pub type Extension<'a> = &'a mut dyn FnMut(&mut ObjectServer, &mut Message) -> Option<Answer>;

/// A port of the server's made for one client ([`PortMinter`]): its
/// requests are served as the main port's are, and it goes when the
/// client's last right to it does.
struct ClientPort {
    port: ReceiveRight,
    uid: u32,
    /// The port's socket, among those this process keeps.
    _kept: Option<Kept>,
}

/// The ports made for each user and still open, and how many one user may
/// have: shared by the server (which closes them) and its minter (which
/// makes them, on another thread).
#[derive(Debug)]
struct PortBook {
    open: HashMap<u32, usize>,
    per_user: usize,
    /// The sockets of ports made and not yet served, by inode: kept from
    /// the moment they are made, before any right to them is handed out,
    /// so that a right to one never passes for a right that leads
    /// elsewhere ([`Kept::unless_it_leads_back`]).
    pending: HashMap<u64, Kept>,
}

/// Makes each client of an [`ObjectServer`] a port of its own.
///
/// All send rights to one port are descriptors of one socket, so any
/// holder can act on the socket for all of them: `shutdown` it (the port
/// is then dead to every holder), shrink its buffer, or keep its queue
/// full. A service that every user looks up, such as `ferryd`'s file
/// server, therefore gives each lookup a port of its own
/// ([`crate::NameServer::add_system_service`]): what a client does to its
/// right reaches no one else. The server's main port's right stays with
/// the minter (and the name server, which watches it), never with a
/// client. Each port costs the server one descriptor and counts against
/// [`Budgets::ports_per_user`] until every right to it is gone.
#[derive(Debug)]
pub struct PortMinter {
    server: SendRight,
    book: Arc<Mutex<PortBook>>,
    /// Whose ports wait in the server's main queue: each user within its
    /// share of it ([`crate::intake`]).
    intake: Mutex<crate::intake::Intake>,
}

impl PortMinter {
    /// Ports one user may have open at once ([`Budgets::ports_per_user`]).
    pub fn per_user(&self) -> usize {
        self.lock().per_user
    }

    /// A send right to a new port of the server's for user `uid` alone:
    /// requests another user sends on it are refused
    /// ([`PagerError::Denied`]), unless `uid` is root's (they then act as
    /// their sender).
    ///
    /// # Errors
    /// [`PagerError::OverBudget`] when `uid` has its budget of ports open
    /// already; [`PagerError::Timeout`] when the server's main port has no
    /// room now (it is busy: retry); [`PagerError::PagerDead`] if the
    /// server is gone; [`PagerError::Io`] if the port cannot be made.
    pub fn mint(&self, uid: u32) -> Result<SendRight, PagerError> {
        {
            // Counted before the port exists, so that two lookups at once
            // cannot both take the last one; given back if it is not made.
            let mut book = self.lock();
            let open = book.open.get(&uid).copied().unwrap_or(0);
            if open >= book.per_user {
                return Err(PagerError::OverBudget(format!(
                    "uid {uid} has {open} ports of this server open (the budget); drop some first"
                )));
            }
            *book.open.entry(uid).or_insert(0) += 1;
        }
        // Within the user's share of the main queue, which every user's
        // ports cross while the server is busy: two users looking the
        // server up in a loop while it copied a large file filled it, and
        // every other user's lookups were refused as busy. Held while the
        // port is sent, so that the queue grows by this port alone.
        let mut intake = self.intake.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let room = intake.room_for(&self.server, uid).map_err(|_| PagerError::Timeout);
        let made = room.and_then(|before| crate::port().map(|p| (before, p)).map_err(PagerError::Io)).and_then(|(before, (port, right))| {
            let kept = Kept::new(port.main_fd()).map(|k| {
                let inode = k.inode();
                self.lock().pending.insert(inode, k);
                inode
            });
            let m = Message::new(proto::ADD_PORT).with_body(uid.to_le_bytes().to_vec()).with_item(Item::Receive(port));
            // Never waits: the name server's one thread mints for every
            // user's lookups, and the main port's queue is full only while
            // the server is busy (copying a large file, say), so a wait
            // for room (it was up to 5 s) let one user's lookups hold up
            // every other user's requests. Full, this lookup is refused
            // as busy, and may be retried. Only this minter sends on the
            // main port; the book is not locked meanwhile, so the server
            // may close ports as it drains it.
            let sent = self.server.send(m, Timeout::Zero).map(|()| right).map_err(|e| match e.into_error() {
                crate::error::SendError::QueueFull | crate::error::SendError::Timeout => PagerError::Timeout,
                _ => PagerError::PagerDead,
            });
            if sent.is_ok() {
                intake.sent(&self.server, before, uid);
            }
            if let (Err(_), Some(inode)) = (&sent, kept) {
                self.lock().pending.remove(&inode);
            }
            sent
        });
        if made.is_err() {
            forget(&self.book, uid);
        }
        made
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PortBook> {
        self.book.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One port of `uid`'s is gone (or was never made).
fn forget(book: &Mutex<PortBook>, uid: u32) {
    let mut book = book.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(n) = book.open.get_mut(&uid) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            book.open.remove(&uid);
        }
    }
}

struct Client {
    object: ObjectId,
    uffd: Uffd,
    base: usize,
    len: usize,
    lifeline: SendRight,
    /// The lifeline's socket, among those this process keeps.
    _kept: Kept,
    /// Pages supplied and pages dirtied, costing the server what it
    /// supplied, not what the client's claimed range spans.
    supplied: PageSet,
    dirty: PageSet,
    pid: Option<i32>,
    uid: Option<u32>,
    /// Its count in the process-wide budget, if the server shares one.
    _charge: Option<Charge>,
}

/// An object kept alive for a client while the receive right behind
/// `right` lives (see [`ObjectServer::hold`]).
struct Hold {
    object: ObjectId,
    uid: u32,
    right: SendRight,
    /// The hold's socket, among those this process keeps.
    _kept: Kept,
    /// Its count in the process-wide budget, if the server shares one.
    _charge: Option<Charge>,
}

/// A budget of mappings and holds (together) per user, shared by several
/// object servers of one process ([`ObjectServer::share_budget`]): a host
/// that starts an object server for each object it is given (a network
/// node serving each region received by reference) would otherwise let a
/// user take each server's whole [`Budgets`], as many times as it was
/// given objects.
#[derive(Clone, Debug)]
pub struct SharedBudget {
    inner: Arc<SharedInner>,
}

#[derive(Debug)]
struct SharedInner {
    per_user: usize,
    used: Mutex<HashMap<u32, usize>>,
}

impl SharedBudget {
    /// A budget of `per_user` mappings and holds for each user, counted
    /// across every server that shares it.
    pub fn new(per_user: usize) -> SharedBudget {
        SharedBudget { inner: Arc::new(SharedInner { per_user, used: Mutex::new(HashMap::new()) }) }
    }

    /// Mappings and holds user `uid` has now in every server sharing it.
    pub fn used(&self, uid: u32) -> usize {
        self.lock().get(&uid).copied().unwrap_or(0)
    }

    /// Mappings and holds each user may have.
    pub fn per_user(&self) -> usize {
        self.inner.per_user
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, usize>> {
        self.inner.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one more for `uid`, if its budget has room.
    fn charge(&self, uid: u32) -> Option<Charge> {
        let mut used = self.lock();
        let n = used.entry(uid).or_insert(0);
        if *n >= self.inner.per_user {
            return None;
        }
        *n += 1;
        Some(Charge { budget: self.clone(), uid })
    }

    fn refusal(&self, uid: u32) -> String {
        format!("uid {uid} already has {} mappings and copies of this process's objects (the budget); let some go first", self.inner.per_user)
    }
}

/// One mapping's or hold's count in a [`SharedBudget`], given back when
/// dropped (with its mapping or hold).
#[derive(Debug)]
struct Charge {
    budget: SharedBudget,
    uid: u32,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut used = self.budget.lock();
        if let Some(n) = used.get_mut(&self.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                used.remove(&self.uid);
            }
        }
    }
}

/// Hosts memory objects and serves their pages to clients in other
/// processes (or threads).
///
/// ```no_run
/// use ferry::pager::{ObjectServer, ObjectConfig, Pager, Supply, PagerFault};
/// struct Squares;
/// impl Pager for Squares {
///     fn data_request(&mut self, offset: u64, buf: &mut [u8]) -> Result<Supply, PagerFault> {
///         for (i, b) in buf.iter_mut().enumerate() { *b = ((offset as usize + i) % 251) as u8; }
///         Ok(Supply::Provided)
///     }
/// }
/// let (mut server, right) = ObjectServer::new()?;
/// let id = server.add_object(1 << 20, Box::new(Squares), ObjectConfig::default())?;
/// // Usable by this process's user only, unless granted to others:
/// server.grant_everyone(id)?;
/// // hand `right` and `id` to clients (e.g. through the name service), then:
/// loop { server.serve(ferry::Timeout::Infinite)?; }
/// # Ok::<(), ferry::pager::PagerError>(())
/// ```
pub struct ObjectServer {
    port: ReceiveRight,
    /// The port's socket, among those this process keeps.
    _kept: Option<Kept>,
    port_open: bool,
    epoll: Epoll,
    objects: BTreeMap<ObjectId, Object>,
    next_id: ObjectId,
    clients: Vec<Option<Client>>,
    holds: Vec<Option<Hold>>,
    ports: Vec<Option<ClientPort>>,
    book: Arc<Mutex<PortBook>>,
    budgets: Budgets,
    /// A budget shared with other servers of the process, if any.
    shared: Option<SharedBudget>,
    stats: ServerStats,
    /// The copy-mode staging buffer, kept between faults.
    scratch: Vec<u8>,
    /// Whether answers go as their requests' senders
    /// ([`ObjectServer::answer_as_asker`]).
    as_asker: bool,
    /// How many ports of each user are ready in this turn of the loop
    /// (kept between turns, so as to allocate once).
    ready_ports: Vec<(u32, usize)>,
}

impl std::fmt::Debug for ObjectServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectServer").field("objects", &self.objects.len()).field("stats", &self.stats).finish()
    }
}

const KEY_PORT: u64 = 0;
const KIND_UFFD: u64 = 0;
const KIND_LIFELINE: u64 = 1;
const KIND_HOLD: u64 = 2;
const KIND_PORT: u64 = 3;

/// Messages read off one user's ports per turn of the loop (shared by
/// those ready together), so that a client that keeps its ports full does
/// not keep the others waiting.
const PORT_TURN: usize = 64;

/// Faults of one mapping served per turn of the loop, so that a client
/// that faults again as fast as it is served does not keep the others
/// waiting: its threads, each reading a page and dropping it again, had
/// another fault waiting each time the last ones were served, and the
/// server served that mapping alone for as long as they went on.
const FAULT_TURN: usize = 64;

/// The epoll key of a client's descriptor or a hold: `(slot + 1) * 4 + kind`
/// (never 0, the port's key).
fn key(slot: usize, kind: u64) -> u64 {
    (slot as u64 + 1) * 4 + kind
}

/// Whether `right`'s socket was made by the asker `who` (as the kernel
/// says who sent the request): by a process of its user, or by the asking
/// process itself (a relay sending as another user, as a root network
/// server delivers other hosts' requests). A hold or a lifeline must be a
/// port its client keeps; one another user made (a system name's port,
/// looked up) is kept by that user's process, and kept what it held, a
/// user's snapshots and budget, after the client exited.
pub(crate) fn made_by_asker(right: &SendRight, who: Option<crate::Credentials>) -> bool {
    let Some(who) = who else { return false };
    crate::sys::socket::peer_cred(right.as_fd()).is_ok_and(|maker| maker.uid == who.uid || maker.pid == who.pid)
}

fn free_slot<T>(v: &[Option<T>]) -> usize {
    v.iter().position(Option::is_none).unwrap_or(v.len())
}

fn put<T>(v: &mut Vec<Option<T>>, slot: usize, x: T) {
    if slot == v.len() {
        v.push(Some(x));
    } else {
        v[slot] = Some(x);
    }
}

/// The one answer for an object that does not exist and for one the sender
/// may not use: they must look the same, or ids could be probed.
fn no_object(id: ObjectId) -> (u64, String) {
    (proto::E_NO_OBJECT, format!("no object {id} that this user may use"))
}

impl ObjectServer {
    /// Creates a server with a fresh port; returns it and a first send right
    /// to give to clients.
    pub fn new() -> Result<(ObjectServer, SendRight), PagerError> {
        let (port, right) = crate::port().map_err(PagerError::Io)?;
        Ok((ObjectServer::with_port(port)?, right))
    }

    /// Creates a server receiving on an existing port.
    pub fn with_port(port: ReceiveRight) -> Result<ObjectServer, PagerError> {
        let epoll = Epoll::new().map_err(|e| PagerError::Io(errno(e)))?;
        epoll.add(port.main_fd(), Interest::Readable, KEY_PORT).map_err(|e| PagerError::Io(errno(e)))?;
        Ok(ObjectServer {
            _kept: Kept::new(port.main_fd()),
            port,
            port_open: true,
            epoll,
            objects: BTreeMap::new(),
            next_id: 1,
            clients: Vec::new(),
            holds: Vec::new(),
            ports: Vec::new(),
            book: Arc::new(Mutex::new(PortBook { open: HashMap::new(), per_user: Budgets::default().ports_per_user, pending: HashMap::new() })),
            budgets: Budgets::default(),
            shared: None,
            stats: ServerStats::default(),
            scratch: Vec::new(),
            as_asker: false,
            ready_ports: Vec::new(),
        })
    }

    /// Adds an object of `size` bytes whose pages `pager` supplies; its
    /// owner (who may change it with [`write`](Self::write) requests) is
    /// this process's user, and it is usable by that user only until the
    /// host grants more ([`grant`](Self::grant),
    /// [`grant_everyone`](Self::grant_everyone)).
    ///
    /// # Errors
    /// [`PagerError::BadRequest`] for a zero size or a zero cluster;
    /// [`PagerError::Io`] if a zero-copy object's page cache cannot be made.
    pub fn add_object(&mut self, size: u64, pager: Box<dyn Pager>, config: ObjectConfig) -> Result<ObjectId, PagerError> {
        self.insert(size, Source::Pager(pager), config, rustix::process::getuid().as_raw())
    }

    fn insert(&mut self, size: u64, source: Source, config: ObjectConfig, owner: u32) -> Result<ObjectId, PagerError> {
        if size == 0 || config.cluster == 0 || size > isize::MAX as u64 {
            return Err(PagerError::BadRequest("an object needs a size and a cluster of at least one page".into()));
        }
        if config.track_dirty && config.mode == SupplyMode::ZeroCopy {
            return Err(PagerError::Unsupported("dirty tracking needs copy mode".into()));
        }
        let cache = match config.mode {
            SupplyMode::Copy => None,
            SupplyMode::ZeroCopy => Some(make_cache(size).map_err(|e| PagerError::Io(errno(e)))?),
        };
        let id = self.next_id;
        self.next_id += 1;
        let stats = ObjectStats::default();
        self.objects.insert(
            id,
            Object {
                size,
                config,
                owner,
                users: BTreeSet::from([owner]),
                everyone: false,
                source,
                pages: BTreeMap::new(),
                copies: Vec::new(),
                cache,
                stats,
                ephemeral: false,
                attached_once: false,
            },
        );
        Ok(id)
    }

    /// Marks object `id` to be removed when, after a first client attached,
    /// the last one detaches and no copy of it exists (for objects made per
    /// request, such as the file server's snapshots).
    pub fn set_ephemeral(&mut self, id: ObjectId) -> Result<(), PagerError> {
        self.objects.get_mut(&id).ok_or(PagerError::NoSuchObject(id))?.ephemeral = true;
        Ok(())
    }

    /// Retires object `id`: it is removed as soon as no client maps it and
    /// no copy of it remains (now, if that is already so).
    pub fn retire(&mut self, id: ObjectId) {
        if let Some(o) = self.objects.get_mut(&id) {
            o.ephemeral = true;
            o.attached_once = true;
        }
        self.reclaim(id);
    }

    /// Whether object `id` exists.
    pub fn contains(&self, id: ObjectId) -> bool {
        self.objects.contains_key(&id)
    }

    /// Sets the user allowed to change object `id` by message (the owner
    /// may also use it).
    pub fn set_owner(&mut self, id: ObjectId, uid: u32) -> Result<(), PagerError> {
        let o = self.objects.get_mut(&id).ok_or(PagerError::NoSuchObject(id))?;
        o.owner = uid;
        o.users.insert(uid);
        Ok(())
    }

    /// Lets user `uid` use object `id`: open and map it, copy it, read its
    /// counters, return its dirty pages. Checked against the kernel-reported
    /// uid of every request.
    pub fn grant(&mut self, id: ObjectId, uid: u32) -> Result<(), PagerError> {
        self.objects.get_mut(&id).ok_or(PagerError::NoSuchObject(id))?.users.insert(uid);
        Ok(())
    }

    /// Lets every user use object `id` (a public object).
    pub fn grant_everyone(&mut self, id: ObjectId) -> Result<(), PagerError> {
        self.objects.get_mut(&id).ok_or(PagerError::NoSuchObject(id))?.everyone = true;
        Ok(())
    }

    /// Makes `users` the only users who may use object `id` (not even the
    /// owner otherwise; mappings already attached stay).
    pub fn set_access(&mut self, id: ObjectId, users: &[u32]) -> Result<(), PagerError> {
        let o = self.objects.get_mut(&id).ok_or(PagerError::NoSuchObject(id))?;
        o.users = users.iter().copied().collect();
        o.everyone = false;
        Ok(())
    }

    /// Whether user `uid` (`None`: a sender without credentials) may use
    /// object `id`; false for an object that does not exist.
    pub fn may_use(&self, id: ObjectId, uid: Option<u32>) -> bool {
        self.objects.get(&id).is_some_and(|o| o.everyone || uid.is_some_and(|u| o.users.contains(&u)))
    }

    /// Counts every mapping and hold of this server against `budget` too,
    /// which other servers of the process share (from now on): past it,
    /// an attach or a hold is refused as over budget, as past this
    /// server's own [`Budgets`].
    pub fn share_budget(&mut self, budget: SharedBudget) {
        self.shared = Some(budget);
    }

    /// Sends each answer from now on as its request's message: with the
    /// asker's uid and gid (and this process's pid) when this process may
    /// say so (run by root), rather than its own. For a server in a relay
    /// such as a network server run by root, where the reply right a
    /// request names may be the asker's proxy of another host's port:
    /// sent as the relay, the answer went on there as root's, charged to
    /// root's shares of that host.
    pub fn answer_as_asker(&mut self) {
        self.as_asker = true;
    }

    /// Sets the per-user budgets (they apply to requests from now on).
    pub fn set_budgets(&mut self, budgets: Budgets) {
        self.budgets = budgets;
        self.book.lock().unwrap_or_else(std::sync::PoisonError::into_inner).per_user = budgets.ports_per_user;
    }

    /// A minter of ports of this server's own for each client
    /// ([`PortMinter`]); `main` is a send right to this server's port (the
    /// one [`ObjectServer::new`] returned), which the minter keeps: give
    /// clients the minter's ports instead of it.
    pub fn port_minter(&self, main: SendRight) -> PortMinter {
        PortMinter { server: main, book: self.book.clone(), intake: Mutex::default() }
    }

    /// Ports made for clients by a [`PortMinter`] and still open.
    pub fn client_ports(&self) -> usize {
        self.ports.iter().flatten().count()
    }

    /// Takes a port made for a client by this server's minter: only from
    /// this process (the main port's rights may have been handed out
    /// before a minter was made).
    fn add_port(&mut self, mut m: Message) {
        let ours = m.sender().is_some_and(|c| c.pid == std::process::id() as i32);
        let uid = m.body().get(..4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
        let (true, Some(uid), Some(Item::Receive(port))) = (ours, uid, m.take_items().pop()) else {
            self.stats.rejected += 1;
            return;
        };
        // Kept since the minter made it.
        let _kept = crate::sys::socket::identity(port.main_fd())
            .ok()
            .and_then(|id| self.book.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pending.remove(&id.1));
        let slot = free_slot(&self.ports);
        if self.epoll.add(port.main_fd(), Interest::Readable, key(slot, KIND_PORT)).is_err() {
            // The client's right is dead at once; the book forgets it.
            forget(&self.book, uid);
            return;
        }
        put(&mut self.ports, slot, ClientPort { port, uid, _kept });
    }


    /// Serves what a client sent on its own port, `turn` messages at
    /// most; closes the port once the client's rights to it are all gone.
    fn drain_client_port(&mut self, slot: usize, ext: Extension<'_>, turn: usize) {
        for _ in 0..turn {
            let Some(cp) = self.ports.get_mut(slot).and_then(Option::as_mut) else { return };
            match cp.port.recv(Timeout::Zero) {
                Ok(m) => {
                    let owner = cp.uid;
                    self.handle(m, ext, Some(owner));
                }
                Err(RecvError::Timeout) => return,
                Err(RecvError::BadMessage(_)) => self.stats.malformed += 1,
                Err(_) => {
                    if let Some(cp) = self.ports.get_mut(slot).and_then(Option::take) {
                        let _ = self.epoll.remove(cp.port.main_fd());
                        forget(&self.book, cp.uid);
                    }
                    return;
                }
            }
        }
    }

    /// The per-user budgets in force.
    pub fn budgets(&self) -> Budgets {
        self.budgets
    }

    /// What user `uid` holds now: (mappings attached, objects held).
    pub fn usage(&self, uid: u32) -> (usize, usize) {
        let clients = self.clients.iter().flatten().filter(|c| c.uid == Some(uid)).count();
        let holds = self.holds.iter().flatten().filter(|h| h.uid == uid).count();
        (clients, holds)
    }

    /// Whether user `uid` may take one more hold now. At its budget, the
    /// holds whose clients already let go are released first, whether or
    /// not their hang-ups have been served yet: a client that drops each
    /// snapshot before it opens the next never finds its budget full
    /// because the server has not caught up.
    pub fn can_hold(&mut self, uid: u32) -> bool {
        if self.usage(uid).1 < self.budgets.holds_per_user {
            return true;
        }
        let gone: Vec<usize> =
            self.holds.iter().enumerate().filter_map(|(i, h)| h.as_ref().filter(|h| h.uid == uid && h.right.is_dead()).map(|_| i)).collect();
        for slot in gone {
            self.release_hold(slot);
        }
        self.usage(uid).1 < self.budgets.holds_per_user
    }

    /// Keeps object `id` for user `uid` while the receive right behind
    /// `right` lives: the object is removed once that right is gone (the
    /// client dropped it, or exited), no client maps it and no copy of it
    /// remains. This is how objects made for one client (copies, the file
    /// server's snapshots) never outlive it, even when never mapped; a held
    /// object is one that goes once unused, like a retired one. Each
    /// hold costs the server one descriptor and counts against
    /// [`Budgets::holds_per_user`].
    ///
    /// # Errors
    /// [`PagerError::NoSuchObject`]; [`PagerError::OverBudget`] when `uid`
    /// already holds its budget; [`PagerError::Io`] if the right cannot be
    /// watched. On error the object is left as it was.
    pub fn hold(&mut self, id: ObjectId, uid: u32, right: SendRight) -> Result<(), PagerError> {
        if !self.objects.contains_key(&id) {
            return Err(PagerError::NoSuchObject(id));
        }
        if !self.can_hold(uid) {
            return Err(PagerError::OverBudget(format!(
                "uid {uid} already holds {} objects (the budget); drop some first",
                self.budgets.holds_per_user
            )));
        }
        // Kept until its other end goes: there must be one, elsewhere.
        let Some(_kept) = Kept::unless_it_leads_back(right.as_fd()) else {
            return Err(PagerError::BadRequest(
                "a hold must be a send right to a port whose receive right its client keeps: this one has no other end, or it leads back into the server".into(),
            ));
        };
        let _charge = match &self.shared {
            Some(b) => Some(b.charge(uid).ok_or_else(|| PagerError::OverBudget(b.refusal(uid)))?),
            None => None,
        };
        let slot = free_slot(&self.holds);
        self.epoll.add(right.as_fd(), Interest::Abandoned, key(slot, KIND_HOLD)).map_err(|e| PagerError::Io(errno(e)))?;
        put(&mut self.holds, slot, Hold { object: id, uid, right, _kept, _charge });
        let o = self.objects.get_mut(&id).expect("checked above");
        o.ephemeral = true;
        o.attached_once = true;
        Ok(())
    }

    fn release_hold(&mut self, slot: usize) {
        if let Some(h) = self.holds.get_mut(slot).and_then(Option::take) {
            let _ = self.epoll.remove(h.right.as_fd());
            self.reclaim(h.object);
        }
    }

    /// Makes a copy-on-write copy of `id` (Accent's shadow object): it keeps
    /// the contents `id` has now, whatever the owner later writes to `id`;
    /// only pages the owner changes are duplicated, when they change. The
    /// copy has the owner and the users of `id`.
    pub fn copy_object(&mut self, id: ObjectId) -> Result<ObjectId, PagerError> {
        let o = self.objects.get(&id).ok_or(PagerError::NoSuchObject(id))?;
        let (size, config, owner, users, everyone) = (o.size, o.config, o.owner, o.users.clone(), o.everyone);
        let copy = self.insert(size, Source::CopyOf(id), config, owner)?;
        let c = self.objects.get_mut(&copy).expect("just made");
        (c.users, c.everyone) = (users, everyone);
        self.objects.get_mut(&id).expect("checked above").copies.push(copy);
        Ok(copy)
    }

    /// Changes `data.len()` bytes of object `id` at `offset`, as its owner.
    /// Copies made earlier keep the old bytes (the old pages are pushed into
    /// them first); clients mapping `id` itself see the new bytes in pages
    /// they have not touched yet, as with a shared file mapping.
    ///
    /// # Errors
    /// [`PagerError::NoSuchObject`]; [`PagerError::BadRequest`] if the range
    /// leaves the object; [`PagerError::Unsupported`] for a zero-copy object
    /// (its pages are shared by every client and cannot change) or a copy
    /// (copies are values); [`PagerError::Protocol`] if the pager failed to
    /// supply a page being changed.
    pub fn write(&mut self, id: ObjectId, offset: Offset, data: &[u8]) -> Result<(), PagerError> {
        write_object(&mut self.objects, id, offset, data)
    }

    /// Counters of object `id`.
    pub fn object_stats(&self, id: ObjectId) -> Option<ObjectStats> {
        let o = self.objects.get(&id)?;
        let mut s = o.stats;
        s.clients = self.clients.iter().flatten().filter(|c| c.object == id).count() as u64;
        Some(s)
    }

    /// Whether the server's port has no senders left: every send right to
    /// it is gone (clients' mappings keep one each), so no new request can
    /// come. A server that hosts objects for one holder (such as a region
    /// fetched from another host) stops once this is true and no client is
    /// attached.
    pub fn port_closed(&self) -> bool {
        !self.port_open
    }

    /// Counters of the server.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Handles requests and faults until `timeout` passes with nothing to
    /// do; returns how many events were handled (0 on a timeout).
    ///
    /// # Errors
    /// Only failures of the server's own descriptors ([`PagerError::Io`]);
    /// anything a client does is handled and counted.
    pub fn serve(&mut self, timeout: Timeout) -> Result<usize, PagerError> {
        self.serve_with(timeout, &mut |_, _| None)
    }

    /// As [`serve`](Self::serve), passing requests for operations the
    /// object server does not know to `ext` (how the file server adds its
    /// own requests on the same port).
    pub fn serve_with(&mut self, timeout: Timeout, ext: Extension<'_>) -> Result<usize, PagerError> {
        let deadline = timeout.deadline();
        let events = self.epoll.wait(64, deadline).map_err(|e| PagerError::Io(errno(e)))?;
        // A user's ports ready in this turn share one turn's worth
        // ([`PORT_TURN`]) between them: given one each, a user holding
        // many ports kept full (one per lookup, up to its budget) had the
        // server serve that many turns of its before another user's port
        // came round, 64 requests of each of 256 ports.
        self.ready_ports.clear();
        for &(k, _) in &events {
            let Some(uid) = (k % 4 == KIND_PORT)
                .then(|| self.ports.get((k / 4 - 1) as usize).and_then(Option::as_ref).map(|cp| cp.uid))
                .flatten()
            else {
                continue;
            };
            match self.ready_ports.iter_mut().find(|(u, _)| *u == uid) {
                Some((_, n)) => *n += 1,
                None => self.ready_ports.push((uid, 1)),
            }
        }
        for &(k, ready) in &events {
            if k == KEY_PORT {
                self.drain_port(ext);
                continue;
            }
            let slot = (k / 4 - 1) as usize;
            match k % 4 {
                KIND_UFFD => self.drain_faults(slot),
                KIND_LIFELINE if ready.hangup || ready.readable => self.detach(slot),
                KIND_HOLD if ready.hangup || ready.readable => self.release_hold(slot),
                KIND_PORT => {
                    let uid = self.ports.get(slot).and_then(Option::as_ref).map(|cp| cp.uid);
                    let sharing = self.ready_ports.iter().find(|(u, _)| Some(*u) == uid).map_or(1, |&(_, n)| n);
                    self.drain_client_port(slot, ext, (PORT_TURN / sharing).max(1));
                }
                _ => {}
            }
        }
        Ok(events.len())
    }

    /// Serves what came on the main port, a turn's worth ([`PORT_TURN`]),
    /// as a client's own port is: what is left waits for the next turn
    /// (the port stays readable), after the other clients' faults and
    /// ports. Served until none was left, requests a client kept coming
    /// (a host may hand its main port to every client) held up every
    /// other client's faults for as long as it went on.
    fn drain_port(&mut self, ext: Extension<'_>) {
        for _ in 0..PORT_TURN {
            match self.port.recv(Timeout::Zero) {
                Ok(m) if m.op() == proto::ADD_PORT => self.add_port(m),
                Ok(m) => self.handle(m, ext, None),
                Err(RecvError::Timeout) => return,
                Err(RecvError::BadMessage(_)) => self.stats.malformed += 1,
                Err(RecvError::NoSenders) => {
                    // Nobody can send any more: stop watching the port so
                    // its end-of-file does not spin the loop.
                    if self.port_open {
                        let _ = self.epoll.remove(self.port.main_fd());
                        self.port_open = false;
                    }
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Answers one request; `owner` is the user the port it came on was
    /// made for ([`PortMinter`]), `None` for the main port.
    fn handle(&mut self, mut m: Message, ext: Extension<'_>, owner: Option<u32>) {
        if crate::idl::is_answer(m.op()) {
            // An answer sent on to this server by naming its port as a
            // reply right: never a request, and never answered.
            crate::idl::drop_answer("object server", &m);
            return;
        }
        let reply = m.take_reply();
        let asker = m.sender();
        let uid = asker.map(|c| c.uid);
        // A request on a port made for one user acts as that user, whoever
        // sent it: a client could hand its port to a process of another
        // user (as the reply right of a request to a root server, say),
        // whose message would otherwise act as that process. On root's
        // port another user's requests act as that user.
        if let Some((o, u)) = owner.zip(uid).filter(|(o, u)| *o != 0 && u != o) {
            let why = format!("this port was made for uid {o}: a request sent on it by uid {u} is refused");
            self.answer(reply, asker, Err((proto::E_DENIED, why)));
            return;
        }
        let answer = match m.op() {
            proto::OPEN => self.open(&m, uid),
            proto::ATTACH => self.attach(&mut m, uid),
            proto::COPY => self.req_copy(&mut m, uid),
            proto::STATS => self.req_stats(&m, uid),
            proto::WRITE => self.req_write(&m, uid),
            proto::CLEAN_REQUEST => self.req_clean(&m, uid),
            proto::DIRTY => {
                self.data_return(&m);
                return;
            }
            op => ext(self, &mut m).unwrap_or_else(|| Err((proto::E_BAD_REQUEST, format!("unknown operation {op:#x}")))),
        };
        self.answer(reply, asker, answer);
    }

    /// Sends `answer` through `reply`, if the request carried one, as
    /// `asker` if the server answers as the asker
    /// ([`ObjectServer::answer_as_asker`]) and may.
    fn answer(&mut self, reply: Option<Reply>, asker: Option<crate::message::Credentials>, answer: Answer) {
        let msg = match answer {
            Ok(msg) => msg,
            Err((code, why)) => {
                self.stats.rejected += 1;
                let mut b = proto::body(&[code]);
                b.extend_from_slice(why.as_bytes());
                Message::new(proto::ERROR).with_body(b)
            }
        };
        let Some(r) = reply else { return };
        let _ = crate::answering_as(asker.filter(|_| self.as_asker), || r.send(msg, Timeout::Zero));
    }

    /// The object a request names, if the sender may use it.
    fn object_of(&self, f: &mut Fields<'_>, uid: Option<u32>) -> Result<ObjectId, (u64, String)> {
        let id = f.u64().ok_or((proto::E_BAD_REQUEST, "body too short for an object id".into()))?;
        if self.may_use(id, uid) {
            Ok(id)
        } else {
            Err(no_object(id))
        }
    }

    fn open(&mut self, m: &Message, uid: Option<u32>) -> Result<Message, (u64, String)> {
        let id = self.object_of(&mut Fields::new(m.body()), uid)?;
        let o = &self.objects[&id];
        let mode = match o.config.mode {
            SupplyMode::Copy => 0,
            SupplyMode::ZeroCopy => 1,
        };
        let death = match o.config.on_death {
            super::DeathPolicy::Sigbus => 0,
            super::DeathPolicy::ZeroFill => 1,
        };
        let mut reply = Message::new(proto::OPENED).with_body(proto::body(&[o.size, mode, o.config.cluster as u64, death, o.config.track_dirty as u64]));
        if let Some(c) = &o.cache {
            let view = crate::sys::socket::dup(c.view.as_fd()).map_err(|e| (proto::E_UNSUPPORTED, e.to_string()))?;
            reply = reply.with_item(Item::Pager(PagerFd::cache(view, o.size)));
        }
        Ok(reply)
    }

    fn attach(&mut self, m: &mut Message, uid: Option<u32>) -> Result<Message, (u64, String)> {
        let id = self.object_of(&mut Fields::new(m.body()), uid)?;
        let mut items = m.take_items().into_iter();
        let (Some(Item::Pager(PagerFd { inner: Inner::UserFault { uffd, addr, len } })), Some(Item::Send(lifeline)), None) =
            (items.next(), items.next(), items.next())
        else {
            return Err((proto::E_BAD_REQUEST, "attach carries a userfaultfd and a lifeline send right, nothing else".into()));
        };
        let size = self.objects[&id].size;
        if len != mem::page_round_up(size as usize) as u64 {
            return Err((proto::E_BAD_REQUEST, format!("registered {len} bytes for an object of {size}")));
        }
        let Some(u) = uid else { return Err((proto::E_DENIED, "an attach needs the sender's credentials".into())) };
        if self.usage(u).0 >= self.budgets.clients_per_user {
            return Err((
                proto::E_BUDGET,
                format!("uid {u} already has {} mappings attached (the budget); unmap some first", self.budgets.clients_per_user),
            ));
        }
        // Kept until its other end goes: there must be one, elsewhere, and
        // the client's own.
        let kept = made_by_asker(&lifeline, m.sender()).then(|| Kept::unless_it_leads_back(lifeline.as_fd())).flatten();
        let Some(_kept) = kept else {
            return Err((
                proto::E_BAD_REQUEST,
                "a lifeline must be a send right to a port its client made and keeps: this one has no other end, leads back into the server, or was made by another user".into(),
            ));
        };
        let _charge = match &self.shared {
            Some(b) => Some(b.charge(u).ok_or_else(|| (proto::E_BUDGET, b.refusal(u)))?),
            None => None,
        };
        let slot = free_slot(&self.clients);
        let pid = m.sender().map(|c| c.pid);
        let client = Client {
            object: id,
            uffd,
            base: addr as usize,
            len: len as usize,
            lifeline,
            _kept,
            supplied: PageSet::default(),
            dirty: PageSet::default(),
            pid,
            uid,
            _charge,
        };
        let watched = self
            .epoll
            .add(client.uffd.as_fd(), Interest::Readable, key(slot, KIND_UFFD))
            .and_then(|()| self.epoll.add(client.lifeline.as_fd(), Interest::Abandoned, key(slot, KIND_LIFELINE)));
        if let Err(e) = watched {
            let _ = self.epoll.remove(client.uffd.as_fd());
            return Err((proto::E_UNSUPPORTED, format!("cannot watch the client: {e}")));
        }
        self.objects.get_mut(&id).expect("checked above").attached_once = true;
        put(&mut self.clients, slot, client);
        Ok(Message::new(proto::ATTACHED))
    }

    /// A copy made for a client lives while the hold right it sent does (or
    /// a mapping or a copy of it), and counts against its budget.
    fn req_copy(&mut self, m: &mut Message, uid: Option<u32>) -> Result<Message, (u64, String)> {
        let id = self.object_of(&mut Fields::new(m.body()), uid)?;
        let mut items = m.take_items().into_iter();
        let (Some(Item::Send(hold)), None, Some(uid)) = (items.next(), items.next(), uid) else {
            return Err((proto::E_BAD_REQUEST, "a copy request carries one hold send right and credentials".into()));
        };
        if !made_by_asker(&hold, m.sender()) {
            return Err((proto::E_BAD_REQUEST, "a hold must be a send right to a port its client made: this one was made by another user".into()));
        }
        if !self.can_hold(uid) {
            return Err((proto::E_BUDGET, format!("uid {uid} already holds {} objects (the budget)", self.budgets.holds_per_user)));
        }
        let copy = self.copy_object(id).map_err(|e| (proto::E_UNSUPPORTED, e.to_string()))?;
        if let Err(e) = self.hold(copy, uid, hold) {
            self.retire(copy);
            return Err(refusal(e));
        }
        Ok(Message::new(proto::COPIED).with_body(proto::body(&[copy])))
    }

    fn req_stats(&mut self, m: &Message, uid: Option<u32>) -> Result<Message, (u64, String)> {
        let id = self.object_of(&mut Fields::new(m.body()), uid)?;
        let s = self.object_stats(id).expect("checked above");
        Ok(Message::new(proto::STATS_REPLY).with_body(proto::body(&[
            s.faults,
            s.requests,
            s.pages_requested,
            s.pages_copied,
            s.pages_zeroed,
            s.pages_continued,
            s.pages_shadowed,
            s.clients,
            s.pages_dirtied,
            s.pages_returned,
        ])))
    }

    fn req_write(&mut self, m: &Message, uid: Option<u32>) -> Result<Message, (u64, String)> {
        let mut f = Fields::new(m.body());
        let id = self.object_of(&mut f, uid)?;
        let offset = f.u64().ok_or((proto::E_BAD_REQUEST, "body too short for an offset".into()))?;
        if uid != Some(self.objects[&id].owner) {
            return Err((proto::E_DENIED, "only the object's owner may change it".into()));
        }
        let data = f.rest().to_vec();
        match self.write(id, offset, &data) {
            Ok(()) => Ok(Message::new(proto::WRITTEN)),
            Err(PagerError::BadRequest(w)) => Err((proto::E_BAD_REQUEST, w)),
            Err(e) => Err((proto::E_UNSUPPORTED, e.to_string())),
        }
    }

    fn req_clean(&mut self, m: &Message, uid: Option<u32>) -> Result<Message, (u64, String)> {
        let id = self.object_of(&mut Fields::new(m.body()), uid)?;
        if uid != Some(self.objects[&id].owner) {
            return Err((proto::E_DENIED, "only the object's owner may ask for dirty pages".into()));
        }
        let n = self.clean(id).map_err(|e| (proto::E_UNSUPPORTED, e.to_string()))?;
        Ok(Message::new(proto::CLEANING).with_body(proto::body(&[n as u64])))
    }

    /// Asks every client of `id` to return the pages it dirtied since they
    /// were last returned (Mach's `lock_request` with clean): each client
    /// write-protects them again, then sends their bytes back, and the pager
    /// receives them in [`Pager::data_return`] as they arrive. Returns how
    /// many pages were asked for.
    ///
    /// # Errors
    /// [`PagerError::NoSuchObject`]; [`PagerError::Unsupported`] if the
    /// object does not track dirty pages.
    pub fn clean(&mut self, id: ObjectId) -> Result<usize, PagerError> {
        let o = self.objects.get(&id).ok_or(PagerError::NoSuchObject(id))?;
        if !o.config.track_dirty {
            return Err(PagerError::Unsupported("the object does not track dirty pages".into()));
        }
        let mut asked = 0;
        for c in self.clients.iter_mut().flatten().filter(|c| c.object == id) {
            let pages: Vec<u64> = c.dirty.iter().map(|p| p as u64).collect();
            for chunk in pages.chunks(crate::message::MAX_INLINE / 8 - 1) {
                let mut words = vec![id];
                words.extend_from_slice(chunk);
                if c.lifeline.send(Message::new(proto::CLEAN).with_body(proto::body(&words)), Timeout::Zero).is_ok() {
                    chunk.iter().for_each(|&p| c.dirty.remove(p as usize));
                    asked += chunk.len();
                }
            }
        }
        Ok(asked)
    }

    /// A returned dirty page: accepted only for an object that tracks dirty
    /// pages, from a process attached to it, for a whole page inside it.
    fn data_return(&mut self, m: &Message) {
        let mut f = Fields::new(m.body());
        let (Some(id), Some(offset)) = (f.u64(), f.u64()) else { return self.stats.rejected += 1 };
        let pid = m.sender().map(|c| c.pid);
        let uid = m.sender().map(|c| c.uid);
        let attached = self.may_use(id, uid)
            && self.clients.iter().flatten().any(|c| c.object == id && c.pid.is_some() && c.pid == pid && c.uid == uid);
        let page = mem::page_size() as u64;
        let Some(o) = self.objects.get_mut(&id) else { return self.stats.rejected += 1 };
        let data = f.rest();
        let whole = offset % page == 0 && offset < o.size && data.len() as u64 == page.min(o.size - offset);
        match (&mut o.source, attached && whole && o.config.track_dirty) {
            (Source::Pager(p), true) => {
                p.data_return(offset, data);
                o.stats.pages_returned += 1;
            }
            _ => self.stats.rejected += 1,
        }
    }

    fn detach(&mut self, slot: usize) {
        if let Some(c) = self.clients.get_mut(slot).and_then(Option::take) {
            let _ = self.epoll.remove(c.uffd.as_fd());
            let _ = self.epoll.remove(c.lifeline.as_fd());
            self.stats.detached += 1;
            self.reclaim(c.object);
        }
    }

    /// Removes an ephemeral object nobody uses any more.
    fn reclaim(&mut self, id: ObjectId) {
        let unused = self.objects.get(&id).is_some_and(|o| o.ephemeral && o.attached_once && o.copies.is_empty())
            && !self.clients.iter().flatten().any(|c| c.object == id)
            && !self.holds.iter().flatten().any(|h| h.object == id);
        if !unused {
            return;
        }
        if let Some(o) = self.objects.remove(&id) {
            if let Source::CopyOf(parent) = o.source {
                if let Some(p) = self.objects.get_mut(&parent) {
                    p.copies.retain(|&c| c != id);
                }
                self.reclaim(parent);
            }
        }
    }

    /// Number of objects hosted.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// Serves the faults waiting at client `slot`'s mapping, a turn's
    /// worth ([`FAULT_TURN`]).
    fn drain_faults(&mut self, slot: usize) {
        // What is left waits for the next turn (the descriptor stays
        // readable), after the other clients' and requests' turns.
        let mut served = 0;
        while served < FAULT_TURN {
            let Some(c) = self.clients.get(slot).and_then(Option::as_ref) else { return };
            let events = match c.uffd.read_events(32.min(FAULT_TURN - served)) {
                Ok(ev) if ev.is_empty() => return,
                Ok(ev) => ev,
                Err(_) => return self.detach(slot),
            };
            served += events.len();
            for ev in events {
                let r = match ev {
                    Event::PageFault { addr, wp: true, .. } => self.dirtied(slot, addr),
                    Event::PageFault { addr, .. } => self.resolve(slot, addr),
                    _ => Ok(()),
                };
                if r.is_err() {
                    return self.detach(slot);
                }
            }
        }
    }

    /// A first write to a write-protected page: note it dirty and let the
    /// write proceed.
    fn dirtied(&mut self, slot: usize, addr: u64) -> Result<(), Errno> {
        let page = mem::page_size();
        let c = self.clients[slot].as_mut().expect("live slot");
        let addr = addr as usize;
        if addr < c.base || addr >= c.base + c.len {
            return Ok(());
        }
        let p = (addr - c.base) / page;
        c.dirty.insert(p);
        c.uffd.writeprotect(c.base + p * page, page, false, true)?;
        let id = c.object;
        self.stat(id, |s| s.pages_dirtied += 1);
        Ok(())
    }

    /// Supplies the cluster around a fault at `addr` in client `slot`.
    /// An error means the client's range is gone: detach it.
    fn resolve(&mut self, slot: usize, addr: u64) -> Result<(), Errno> {
        let page = mem::page_size();
        let c = self.clients[slot].as_ref().expect("live slot");
        let (base, len, id) = (c.base, c.len, c.object);
        let addr = addr as usize;
        if addr < base || addr >= base + len {
            // The client registered more than it attached: not ours to serve.
            return Ok(());
        }
        let first = (addr - base) / page;
        let pages = len / page;
        let obj = self.objects.get_mut(&id).ok_or(Errno::NOENT)?;
        obj.stats.faults += 1;
        crate::counters::add(crate::counters::PAGER_FAULTS, 1);
        let cluster = obj.config.cluster;
        let mode = obj.config.mode;
        let wp = obj.config.track_dirty;
        let mut end = first + 1;
        while end < pages && end < first + cluster && !c.supplied.contains(end) {
            end += 1;
        }
        let dst = base + first * page;
        let n = (end - first) * page;
        let size = obj.size;
        let outcome = match mode {
            // A pager that knows the range is empty: zero pages at once,
            // no buffer prepared. (Tracked pages must be copied: there is no
            // write-protected zero page.)
            SupplyMode::Copy if !wp && object_unavailable(&mut self.objects, id, first as u64, (end - first) as u64) => {
                let c = self.clients[slot].as_ref().expect("live slot");
                let r = fill(n, |at, left| c.uffd.zeropage(dst + at, left, true));
                r.map(|f| {
                    self.stat(id, |s| s.pages_zeroed += f.pages);
                    f.first_skipped
                })
            }
            SupplyMode::Copy => {
                // One buffer reused across faults: zeroing it is the only
                // per-fault cost (a fresh allocation per fault cost a
                // cluster's worth of page faults or a second memset).
                let mut buf = std::mem::take(&mut self.scratch);
                buf.clear();
                buf.resize(n, 0);
                let clip = (size - (first * page) as u64).min(n as u64) as usize;
                let r = match read_object(&mut self.objects, id, first as u64, &mut buf[..clip]) {
                    // Tracked pages are installed write-protected; there is
                    // no write-protected zero page, so zeros are copied.
                    Ok(Supply::Provided) | Ok(Supply::Unavailable) if wp => {
                        let c = self.clients[slot].as_ref().expect("live slot");
                        let r = fill(n, |at, _| c.uffd.copy(dst + at, &buf[at..], true, true));
                        r.map(|f| {
                            self.stat(id, |s| s.pages_copied += f.pages);
                            f.first_skipped
                        })
                    }
                    Ok(Supply::Provided) => {
                        let c = self.clients[slot].as_ref().expect("live slot");
                        let r = fill(n, |at, _| c.uffd.copy(dst + at, &buf[at..], true, false));
                        r.map(|f| {
                            self.stat(id, |s| s.pages_copied += f.pages);
                            f.first_skipped
                        })
                    }
                    Ok(Supply::Unavailable) => {
                        let c = self.clients[slot].as_ref().expect("live slot");
                        let r = fill(n, |at, left| c.uffd.zeropage(dst + at, left, true));
                        r.map(|f| {
                            self.stat(id, |s| s.pages_zeroed += f.pages);
                            f.first_skipped
                        })
                    }
                    Err(_) => self.poison(slot, dst),
                };
                self.scratch = buf;
                r
            }
            SupplyMode::ZeroCopy => match fill_cache(&mut self.objects, id, first, end) {
                Ok(()) => {
                    let c = self.clients[slot].as_ref().expect("live slot");
                    let r = fill(n, |at, left| c.uffd.continue_(dst + at, left, true));
                    r.map(|f| {
                        self.stat(id, |s| s.pages_continued += f.pages);
                        f.first_skipped
                    })
                }
                Err(_) => self.poison(slot, dst),
            },
        };
        let first_skipped = outcome?;
        let c = self.clients[slot].as_mut().expect("live slot");
        c.supplied.insert_range(first, end);
        if first_skipped {
            // Another fault already filled the page: wake this one too.
            c.uffd.wake(dst, page)?;
        }
        Ok(())
    }

    fn poison(&mut self, slot: usize, dst: usize) -> Result<bool, Errno> {
        let c = self.clients[slot].as_ref().expect("live slot");
        match c.uffd.poison(dst, mem::page_size(), true) {
            Ok(_) | Err((_, Errno::EXIST)) => Ok(true),
            Err((_, e)) => Err(e),
        }
    }

    fn stat(&mut self, id: ObjectId, f: impl FnOnce(&mut ObjectStats)) {
        if let Some(o) = self.objects.get_mut(&id) {
            f(&mut o.stats);
        }
    }
}

/// A server-side error as a refusal to send back.
pub(crate) fn refusal(e: PagerError) -> (u64, String) {
    let code = match e {
        PagerError::NoSuchObject(id) => return no_object(id),
        PagerError::OverBudget(_) => proto::E_BUDGET,
        PagerError::BadRequest(_) => proto::E_BAD_REQUEST,
        PagerError::Denied(_) => proto::E_DENIED,
        _ => proto::E_UNSUPPORTED,
    };
    (code, e.to_string())
}

/// What a fill did: whether the first (faulting) page was already present,
/// and how many pages it installed.
struct Filled {
    first_skipped: bool,
    pages: u64,
}

/// Runs a fill ioctl over `len` bytes until done, stepping over pages that
/// are already present.
fn fill(len: usize, mut op: impl FnMut(usize, usize) -> Result<usize, Partial>) -> Result<Filled, Errno> {
    let page = mem::page_size();
    let (mut at, mut stalls, mut skipped, mut first_skipped) = (0, 0, 0, false);
    while at < len {
        match op(at, len - at) {
            Ok(n) => at += n.max(page),
            Err((n, Errno::AGAIN)) if n > 0 => at += n,
            Err((0, Errno::EXIST)) => {
                first_skipped |= at == 0;
                skipped += 1;
                at += page;
            }
            Err((n, Errno::EXIST)) => at += n,
            Err((_, Errno::AGAIN)) if stalls < 64 => stalls += 1,
            Err((_, e)) => return Err(e),
        }
    }
    Ok(Filled { first_skipped, pages: (len.div_ceil(page) - skipped) as u64 })
}
