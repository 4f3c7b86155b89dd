//! Port sets: one thread receiving from many ports, and watching send rights
//! for dead names, through one `epoll` instance (Mach's port sets).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use crate::error::{io_err, RecvError};
use crate::message::Message;
use crate::port::{ReceiveRight, SendRight};
use crate::sys::wait::{Epoll, Interest};
use crate::timeout::Timeout;

/// Names a member of a [`PortSet`]: a port inserted with
/// [`PortSet::insert`] or a dead-name watch from
/// [`PortSet::watch_dead_name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(u32);

/// What [`PortSet::wait`] reports.
#[derive(Debug)]
pub enum Event {
    /// A message arrived on a member port.
    Message(MemberId, Message),
    /// Every send right to a member port is gone and no send-once right is
    /// outstanding: nothing can arrive there again. Reported once; the port
    /// stays in the set until removed.
    NoSenders(MemberId),
    /// A send-once right to a member port was destroyed unused.
    SendOnceDropped(MemberId),
    /// A malformed message arrived on a member port and was discarded.
    BadMessage(MemberId, crate::WireError),
    /// The receiver of a watched send right is gone (a dead name). Reported
    /// once; the watch is then removed. A watch stopped with
    /// [`PortSet::unwatch`] reports nothing.
    DeadName(MemberId),
}

#[derive(Debug)]
struct Member {
    port: ReceiveRight,
    seen_generation: Option<u64>,
    /// The port's `once_made()` when its send-once sockets were last
    /// registered; `None` before the first time.
    seen_made: Option<u64>,
    main_registered: bool,
    quiet: bool,
}

/// A set of receive rights and dead-name watches waited on together.
#[derive(Debug)]
pub struct PortSet {
    epoll: Epoll,
    ports: HashMap<u32, Member>,
    watches: HashMap<u32, SendRight>,
    next: u32,
    /// Members whose last send-once right was just used up after their
    /// send rights had gone: their `NoSenders` is reported next, since
    /// nothing of theirs is left for `epoll` to wake on.
    due: Vec<u32>,
}

const WATCH_BIT: u64 = 1 << 63;

impl PortSet {
    /// Creates an empty set.
    pub fn new() -> io::Result<PortSet> {
        Ok(PortSet { epoll: Epoll::new().map_err(io_err)?, ports: HashMap::new(), watches: HashMap::new(), next: 0, due: Vec::new() })
    }

    fn id(&mut self) -> u32 {
        self.next += 1;
        self.next
    }

    /// Moves a receive right into the set.
    pub fn insert(&mut self, port: ReceiveRight) -> MemberId {
        let id = self.id();
        self.ports.insert(id, Member { port, seen_generation: None, seen_made: None, main_registered: false, quiet: false });
        // Registered now, so an event loop watching `as_fd` sees it at once;
        // a failure here is reported by the next `wait`, which retries.
        let _ = self.sync();
        MemberId(id)
    }

    /// Takes a receive right back out of the set.
    pub fn remove(&mut self, id: MemberId) -> Option<ReceiveRight> {
        let m = self.ports.remove(&id.0)?;
        for fd in m.port.sources_all() {
            let _ = self.epoll.remove(fd);
        }
        Some(m.port)
    }

    /// The member port `id`, to make send-once rights on it or receive from it
    /// directly.
    pub fn port_mut(&mut self, id: MemberId) -> Option<&mut ReceiveRight> {
        self.ports.get_mut(&id.0).map(|m| &mut m.port)
    }

    /// Number of member ports.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// Whether the set has no member ports.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// Watches `right`'s port and reports [`Event::DeadName`] when its receive
    /// right is gone. The set keeps its own copy of the right.
    pub fn watch_dead_name(&mut self, right: &SendRight) -> io::Result<MemberId> {
        let copy = right.try_clone()?;
        let id = self.id();
        self.epoll.add(copy.as_fd(), Interest::HangUp, WATCH_BIT | id as u64).map_err(io_err)?;
        self.watches.insert(id, copy);
        Ok(MemberId(id))
    }

    /// Stops dead-name watch `id` and drops the set's copy of the right
    /// (which otherwise keeps the watched port from seeing no senders for
    /// as long as the set lives). False if `id` is no watch here (a port,
    /// or a watch already stopped or reported as a dead name).
    pub fn unwatch(&mut self, id: MemberId) -> bool {
        match self.watches.remove(&id.0) {
            Some(w) => {
                let _ = self.epoll.remove(w.as_fd());
                true
            }
            None => false,
        }
    }

    /// Brings epoll's registrations up to date with each port's sources.
    fn sync(&mut self) -> io::Result<()> {
        for (&id, m) in self.ports.iter_mut() {
            if m.seen_generation == Some(m.port.generation()) {
                continue;
            }
            let key = id as u64;
            let want_main = !m.port.senders_gone();
            if m.main_registered != want_main {
                if want_main {
                    self.epoll.add(m.port.main_fd(), Interest::Readable, key).map_err(io_err)?;
                } else {
                    self.epoll.remove(m.port.main_fd()).map_err(io_err)?;
                }
                m.main_registered = want_main;
            }
            // Send-once sockets already registered stay registered; closed
            // ones left epoll when they were closed. Only those that came
            // since the last registration are added: offering every
            // outstanding one again cost a call each, on every wait after
            // a send-once right was made or used.
            let made = m.port.once_made();
            let fresh = m.seen_made.and_then(|seen| made.checked_sub(seen)).unwrap_or(u64::MAX);
            for fd in m.port.newest_once_fds(fresh) {
                match self.epoll.add(fd, Interest::Readable, key) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io_err(e)),
                }
            }
            m.seen_made = Some(made);
            m.seen_generation = Some(m.port.generation());
        }
        Ok(())
    }

    /// The same descriptor as [`AsFd::as_fd`], after bringing the set's
    /// registrations up to date: it polls readable while
    /// [`wait`](Self::wait) has something to report, for an outside event loop (Python's `asyncio`,
    /// `selectors`, tokio's `AsyncFd`): when it is readable, call
    /// `wait(Timeout::Zero)`. The set's registrations are brought up to date
    /// first; they change when a port is inserted or a member's send-once
    /// rights come and go, so ask for the descriptor again (a cheap call)
    /// before each time you poll it.
    ///
    /// # Errors
    /// The kernel refused to update the registrations.
    pub fn ready_fd(&mut self) -> io::Result<BorrowedFd<'_>> {
        self.sync()?;
        Ok(self.epoll.as_fd())
    }

    /// Waits for the next event on any member, as `timeout` allows.
    ///
    /// # Errors
    /// [`RecvError::Timeout`] when nothing happened in time; `Io` on a kernel
    /// failure.
    pub fn wait(&mut self, timeout: Timeout) -> Result<Event, RecvError> {
        let deadline = timeout.deadline();
        while let Some(id) = self.due.pop() {
            if let Some(m) = self.ports.get_mut(&id).filter(|m| !m.quiet) {
                m.quiet = true;
                return Ok(Event::NoSenders(MemberId(id)));
            }
        }
        loop {
            self.sync().map_err(RecvError::Io)?;
            let ready = self.epoll.wait(16, deadline).map_err(|e| RecvError::Io(io_err(e)))?;
            if ready.is_empty() {
                return Err(RecvError::Timeout);
            }
            for (key, r) in ready {
                if key & WATCH_BIT != 0 {
                    let id = (key & !WATCH_BIT) as u32;
                    if r.hangup {
                        if let Some(w) = self.watches.remove(&id) {
                            crate::trace::event!(debug, member = id, "dead name: a watched port's receive right is gone");
                            let _ = self.epoll.remove(w.as_fd());
                            return Ok(Event::DeadName(MemberId(id)));
                        }
                    }
                    continue;
                }
                let id = key as u32;
                let Some(m) = self.ports.get_mut(&id) else { continue };
                let got = m.port.try_recv_any();
                if matches!(got, Some(Ok(_)) | Some(Err(RecvError::SendOnceDropped)))
                    && !m.quiet
                    && m.port.senders_gone()
                    && m.port.send_once_outstanding() == 0
                {
                    self.due.push(id);
                }
                match got {
                    None => {}
                    Some(Ok(msg)) => return Ok(Event::Message(MemberId(id), msg)),
                    Some(Err(RecvError::NoSenders)) if !m.quiet => {
                        m.quiet = true;
                        return Ok(Event::NoSenders(MemberId(id)));
                    }
                    Some(Err(RecvError::NoSenders)) => {}
                    Some(Err(RecvError::SendOnceDropped)) => return Ok(Event::SendOnceDropped(MemberId(id))),
                    Some(Err(RecvError::BadMessage(w))) => return Ok(Event::BadMessage(MemberId(id), w)),
                    Some(Err(e)) => return Err(e),
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(RecvError::Timeout);
            }
        }
    }
}

impl AsFd for PortSet {
    /// The set's `epoll` instance, so the whole set fits any event loop as
    /// one descriptor.
    ///
    /// **Readable means: call [`wait`](PortSet::wait)`(Timeout::Zero)` now**,
    /// and keep calling it until it returns [`RecvError::Timeout`]. Each
    /// `wait` first brings the registrations up to date with the members
    /// (ports inserted, send-once rights made or used, senders gone), so
    /// after changing a member through [`port_mut`](PortSet::port_mut) —
    /// making a send-once right on it, say — call `wait(Timeout::Zero)`
    /// once before going back to the event loop, or what arrives on the new
    /// right will not make this descriptor readable. Ports added with
    /// [`insert`](PortSet::insert) are registered at once. Never read from
    /// the descriptor or change its registrations yourself.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}
