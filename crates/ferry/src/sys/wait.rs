//! Waiting on descriptors: `poll` for a handful, `epoll` for port sets, and
//! an `eventfd` to interrupt a thread that waits in `epoll`.
//!
//! Timeouts are absolute deadlines here so that a wait interrupted by a
//! signal, or woken spuriously, resumes with the time that is really left.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use rustix::event::{epoll, poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

/// What to wait for on one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interest {
    /// A datagram (or end-of-file) can be read.
    Readable,
    /// A datagram can be queued.
    Writable,
    /// The peer has gone away (`POLLHUP`): only hang-ups wake this wait.
    HangUp,
    /// The peer of a held send right has gone away, or has written into
    /// it (reported as readable). A receiver never writes into its own
    /// port's sending end, except to park a descriptor there: a socket
    /// sent into the queue of one the server holds stays in flight, so
    /// its end never closes and the server would hold what it keeps for
    /// the client for ever. Either way, the holder lets the right go.
    Abandoned,
}

/// What a descriptor reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Data or end-of-file can be read.
    pub readable: bool,
    /// Space for a datagram.
    pub writable: bool,
    /// The peer is gone.
    pub hangup: bool,
}

impl Ready {
    /// Whether anything at all was reported.
    pub fn any(&self) -> bool {
        self.readable || self.writable || self.hangup
    }
}

fn flags_of(i: Interest) -> PollFlags {
    match i {
        Interest::Readable => PollFlags::IN,
        Interest::Writable => PollFlags::OUT,
        Interest::HangUp => PollFlags::RDHUP,
        Interest::Abandoned => PollFlags::RDHUP.union(PollFlags::IN),
    }
}

fn ready_of(f: PollFlags) -> Ready {
    Ready {
        readable: f.intersects(PollFlags::IN | PollFlags::PRI),
        writable: f.contains(PollFlags::OUT),
        hangup: f.intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR),
    }
}

fn timespec_until(deadline: Option<Instant>) -> Option<Timespec> {
    deadline.map(|d| {
        let left = d.saturating_duration_since(Instant::now());
        Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 }
    })
}

/// Waits until one of `fds` is ready for its interest or `deadline` passes
/// (`None`: forever). Returns one [`Ready`] per descriptor, all empty on a
/// timeout.
pub fn poll_many(
    fds: &[(BorrowedFd<'_>, Interest)],
    deadline: Option<Instant>,
) -> rustix::io::Result<Vec<Ready>> {
    poll_many_for(fds, || timespec_until(deadline))
}

/// [`poll_many`] with the wait's length asked of `ts` before each try.
fn poll_many_for(fds: &[(BorrowedFd<'_>, Interest)], ts: impl Fn() -> Option<Timespec>) -> rustix::io::Result<Vec<Ready>> {
    let mut pfds: Vec<PollFd<'_>> = fds.iter().map(|(fd, i)| PollFd::from_borrowed_fd(*fd, flags_of(*i))).collect();
    loop {
        let ts = ts();
        match poll(&mut pfds, ts.as_ref()) {
            Ok(_) => return Ok(pfds.iter().map(|p| ready_of(p.revents())).collect()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Waits on one descriptor; `Ok(false)` on timeout.
pub fn poll_one(fd: BorrowedFd<'_>, interest: Interest, deadline: Option<Instant>) -> rustix::io::Result<Ready> {
    Ok(poll_many(&[(fd, interest)], deadline)?[0])
}

/// What one descriptor is ready for now, without waiting (and without
/// reading the clock for a deadline of now).
pub fn poll_one_now(fd: BorrowedFd<'_>, interest: Interest) -> rustix::io::Result<Ready> {
    Ok(poll_many_for(&[(fd, interest)], || Some(NOW))?[0])
}

/// A wait of no time.
const NOW: Timespec = Timespec { tv_sec: 0, tv_nsec: 0 };

/// An `epoll` instance whose entries carry a caller-chosen 64-bit key.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// Creates an empty, close-on-exec epoll instance.
    pub fn new() -> rustix::io::Result<Self> {
        Ok(Epoll { fd: epoll::create(epoll::CreateFlags::CLOEXEC)? })
    }

    /// Watches `fd` for `interest`, reporting `key` (level-triggered).
    pub fn add(&self, fd: BorrowedFd<'_>, interest: Interest, key: u64) -> rustix::io::Result<()> {
        let flags = match interest {
            Interest::Readable => epoll::EventFlags::IN,
            Interest::Writable => epoll::EventFlags::OUT,
            Interest::HangUp => epoll::EventFlags::RDHUP,
            Interest::Abandoned => epoll::EventFlags::RDHUP.union(epoll::EventFlags::IN),
        };
        epoll::add(&self.fd, fd, epoll::EventData::new_u64(key), flags)
    }

    /// Stops watching `fd`. A descriptor already closed is not an error.
    pub fn remove(&self, fd: BorrowedFd<'_>) -> rustix::io::Result<()> {
        match epoll::delete(&self.fd, fd) {
            Ok(()) | Err(Errno::NOENT) | Err(Errno::BADF) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits for events until `deadline` (`None`: forever) and returns
    /// `(key, ready)` pairs; empty on timeout.
    pub fn wait(&self, max: usize, deadline: Option<Instant>) -> rustix::io::Result<Vec<(u64, Ready)>> {
        self.wait_for(max, || timespec_until(deadline))
    }

    /// The events ready now, as [`wait`](Self::wait) with a deadline of
    /// now, without reading the clock for it.
    pub fn wait_now(&self, max: usize) -> rustix::io::Result<Vec<(u64, Ready)>> {
        self.wait_for(max, || Some(NOW))
    }

    /// [`wait`](Self::wait) with the wait's length asked of `ts` before
    /// each try.
    fn wait_for(&self, max: usize, ts: impl Fn() -> Option<Timespec>) -> rustix::io::Result<Vec<(u64, Ready)>> {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(max.max(1));
        loop {
            let ts = ts();
            match epoll::wait(&self.fd, spare(&mut events), ts.as_ref()) {
                Ok(_) => break,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(events
            .iter()
            .map(|e| {
                let f = e.flags;
                let r = Ready {
                    readable: f.intersects(epoll::EventFlags::IN | epoll::EventFlags::PRI),
                    writable: f.contains(epoll::EventFlags::OUT),
                    hangup: f.intersects(epoll::EventFlags::HUP | epoll::EventFlags::RDHUP | epoll::EventFlags::ERR),
                };
                (e.data.u64(), r)
            })
            .collect())
    }
}

fn spare(v: &mut Vec<epoll::Event>) -> rustix::buffer::SpareCapacity<'_, epoll::Event> {
    rustix::buffer::spare_capacity(v)
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An `eventfd` that makes a thread waiting in `epoll` on it return: once
/// rung it stays readable.
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
}

impl Bell {
    /// A new, unrung, non-blocking, close-on-exec bell.
    pub fn new() -> rustix::io::Result<Bell> {
        let fd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK)?;
        Ok(Bell { fd })
    }

    /// Rings it: its descriptor becomes readable (and stays so).
    pub fn ring(&self) -> rustix::io::Result<()> {
        match rustix::io::write(&self.fd, &1u64.to_ne_bytes()) {
            Ok(_) | Err(Errno::AGAIN) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for Bell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
