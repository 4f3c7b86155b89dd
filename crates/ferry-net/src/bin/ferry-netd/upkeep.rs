//! What keeps a running `ferry-netd`'s names true while the programs and
//! hosts around it come and go, on a thread of its own that looks every
//! two seconds (and at once when a link comes back):
//!
//! - an `--export`ed port that died (its server restarted) is exported
//!   again as soon as its name is registered again here, so peers' new
//!   lookups reach the new server;
//! - an `--import`ed proxy that died (the far server restarted, or the
//!   link was lost) is looked up again while its host is linked, and
//!   registered again under `NAME@HOST`;
//! - a name server that was restarted (and so lost every registration)
//!   gets the status name and the imports registered again.
//!
//! A right never silently re-binds: a dead proxy stays dead for whoever
//! holds it, and only new lookups of the name find the new port.

use std::collections::HashSet;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use ferry::{Bootstrap, SendRight};
use ferry_net::Node;

/// How often the names are looked at.
pub const EVERY: Duration = Duration::from_secs(2);

/// One `--export`: the local name and the port last exported under it.
struct Export {
    name: String,
    right: Option<SendRight>,
    said: Option<String>,
}

/// One `--import NAME@HOST`: the proxy registered under it, if any.
struct Import {
    remote: String,
    host: String,
    proxy: Option<SendRight>,
    said: Option<String>,
}

/// The first version of the name service that makes a port of its own
/// for each lookup of a system service (`register_system_service`).
const SERVICE_VERSION: u32 = 4;

/// Registers `right` under `name`: as a system name if `system`, else for
/// this daemon's user. A system name is registered as a service, so that
/// each user's lookup gets a port of its own (which that user alone can
/// shut down or fill); a name server older than that gets the one port
/// for everyone.
pub fn register(names: &mut Bootstrap, name: &str, right: &SendRight, system: bool) -> Result<(), ferry::NameError> {
    if system && names.server_version() >= SERVICE_VERSION {
        names.register_system_service(name, right)
    } else if system {
        names.register_system(name, right)
    } else {
        names.register(name, right)
    }
}

/// The daemon's names and what it last found of each.
pub struct Upkeep {
    names: Bootstrap,
    node: Arc<Node>,
    /// Whether its names are system names (`--system-names`).
    system: bool,
    /// The status port's send right, and whether it is to be registered
    /// (it was at start).
    status: Option<SendRight>,
    status_said: Option<String>,
    exports: Vec<Export>,
    imports: Vec<Import>,
}

/// Logs `msg` unless it is what `slot` said last; `None` forgets, so the
/// next trouble is logged again.
fn say(slot: &mut Option<String>, msg: Option<String>) {
    if let Some(m) = &msg {
        if slot.as_ref() != Some(m) {
            eprintln!("ferry-netd: {m}");
        }
    }
    *slot = msg;
}

/// Whether two send rights name the same port (their sockets' device and
/// inode).
fn same_port(a: &SendRight, b: &SendRight) -> bool {
    use std::os::fd::AsFd;
    matches!((ferry_net::node::key_of(a.as_fd()), ferry_net::node::key_of(b.as_fd())), (Ok(x), Ok(y)) if x == y)
}

impl Upkeep {
    /// The upkeep of a daemon whose name server connection is `names`:
    /// `system` says whether it registers system names, `status` is its
    /// registered status port, `exports` the names and rights it exported
    /// at start, `imports` each `NAME@HOST` with the proxy registered for
    /// it at start (`None`: its host was not linked).
    pub fn new(
        names: Bootstrap,
        node: Arc<Node>,
        system: bool,
        status: Option<SendRight>,
        exports: Vec<(String, SendRight)>,
        imports: Vec<(String, Option<SendRight>)>,
    ) -> Upkeep {
        Upkeep {
            names,
            node,
            system,
            status,
            status_said: None,
            exports: exports.into_iter().map(|(name, right)| Export { name, right: Some(right), said: None }).collect(),
            imports: imports
                .into_iter()
                .map(|(remote, proxy)| {
                    let host = remote.rsplit_once('@').map_or_else(String::new, |(_, h)| h.to_owned());
                    Import { remote, host, proxy, said: None }
                })
                .collect(),
        }
    }

    /// Looks every [`EVERY`], or when `wake` says a link came back, for
    /// as long as the daemon runs.
    pub fn run(mut self, wake: Receiver<()>) {
        loop {
            match wake.recv_timeout(EVERY) {
                Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                // The redial is gone: the daemon is stopping.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(EVERY),
            }
            let mine = self.my_services();
            self.status(mine.as_ref());
            self.exports();
            self.imports(mine.as_ref());
        }
    }

    /// The system services this daemon has registered, if it registers
    /// its names as services (`None`: ask by looking each name up). A
    /// lookup of a service makes a new port each time, so whether a name
    /// is still this daemon's is read from the name server's listing: a
    /// system name registered by this process.
    fn my_services(&mut self) -> Option<HashSet<String>> {
        if !self.system || self.names.server_version() < SERVICE_VERSION {
            return None;
        }
        let me = i32::try_from(std::process::id()).unwrap_or(-1);
        let listing = self.names.list().unwrap_or_default();
        Some(listing.into_iter().filter(|e| e.uid == ferry::nameserver::SYSTEM_UID && e.owner_pid == me).map(|e| e.name).collect())
    }

    /// Whether `name` is registered here to `right`: by this daemon, as
    /// `mine` says, or else as a lookup finds.
    fn registered(&mut self, mine: Option<&HashSet<String>>, name: &str, right: &SendRight) -> bool {
        match mine {
            Some(names) => names.contains(name),
            None => self.names.lookup(name).is_ok_and(|r| same_port(&r, right)),
        }
    }

    /// Registers the status name again if the name server lost it.
    fn status(&mut self, mine: Option<&HashSet<String>>) {
        let Some(status) = self.status.take() else { return };
        let registered = self.registered(mine, ferry_net::status::NAME, &status);
        let status = self.status.insert(status);
        if registered {
            return;
        }
        let msg = match register(&mut self.names, ferry_net::status::NAME, status, self.system) {
            Ok(()) => {
                eprintln!("ferry-netd: {:?} registered again (the local name server was restarted?)", ferry_net::status::NAME);
                None
            }
            Err(e) => Some(format!("cannot register {:?} again: {e}", ferry_net::status::NAME)),
        };
        say(&mut self.status_said, msg);
    }

    /// Exports again each name whose exported port died, once the name is
    /// registered here to a live port.
    fn exports(&mut self) {
        for e in &mut self.exports {
            if e.right.as_ref().is_some_and(|r| !r.is_dead()) {
                continue;
            }
            let found = self.names.lookup(&e.name).ok().filter(|r| !r.is_dead());
            match found.map(|r| r.try_clone().map(|kept| (r, kept))) {
                Some(Ok((r, kept))) => {
                    self.node.export(&e.name, kept);
                    e.right = Some(r);
                    eprintln!("ferry-netd: --export {}: its port came back; exporting the new one", e.name);
                    say(&mut e.said, None);
                }
                Some(Err(err)) => say(&mut e.said, Some(format!("--export {}: {err}", e.name))),
                None => say(&mut e.said, Some(format!("--export {}: its port is gone; exported again once the name is registered again", e.name))),
            }
        }
    }

    /// Looks up again each import whose proxy died (while its host is
    /// linked) and keeps each live proxy registered under its name.
    fn imports(&mut self, mine: Option<&HashSet<String>>) {
        let links = self.node.links();
        let mut imports = std::mem::take(&mut self.imports);
        for i in &mut imports {
            self.import(i, &links, mine);
        }
        self.imports = imports;
    }

    /// [`imports`](Self::imports) of one import.
    fn import(&mut self, i: &mut Import, links: &[ferry_net::node::LinkInfo], mine: Option<&HashSet<String>>) {
        if i.proxy.as_ref().is_none_or(|p| p.is_dead()) {
            i.proxy = None;
            if !links.iter().any(|l| l.peer == i.host && l.up) {
                // Looked at again when the link is up: the redial
                // wakes this when it brings a link back, and a link
                // the peer dials is seen at the next look.
                return;
            }
            match self.node.lookup(&i.remote) {
                Ok(p) => i.proxy = Some(p),
                Err(e) => {
                    say(&mut i.said, Some(format!("--import {}: {e}", i.remote)));
                    return;
                }
            }
        }
        let Some(proxy) = &i.proxy else { return };
        if self.registered(mine, &i.remote, proxy) {
            return;
        }
        // What is registered under the name, if anything, is this
        // daemon's old proxy: replaced (a system name whose port is
        // gone is replaced by registering it).
        if !self.system {
            let _ = self.names.unregister(&i.remote);
        }
        match register(&mut self.names, &i.remote, proxy, self.system) {
            Ok(()) => {
                eprintln!("ferry-netd: --import {}: registered", i.remote);
                say(&mut i.said, None);
            }
            Err(e) => say(&mut i.said, Some(format!("--import {}: {e}", i.remote))),
        }
    }
}
