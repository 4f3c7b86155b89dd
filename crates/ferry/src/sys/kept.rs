//! The sockets this process's servers keep while they wait for something
//! at the other end (a name server's registered rights and connections;
//! an object server's or emulation server's ports, holds, lifelines and
//! channels), and whether a socket handed to a server leads back to one
//! of them.
//!
//! A server must not keep a socket whose other end a server of this
//! process keeps too: neither end would ever see the other go. Only the
//! kernel knows a Unix socket's other end, and the one call that names it
//! by inode (`sock_diag`'s `UNIX_DIAG_PEER`) finds the socket by walking
//! every Unix socket of the network namespace, so its cost grew with the
//! sockets every other user held. What the kernel does say of the one
//! socket in question, in constant time, is the address of its other end
//! (`getpeername`). So every socket kept here has an address: one that
//! has none is given a fresh abstract name first (`bind`, 64 random bits
//! that nobody can take ahead), and once bound, a socket's address never
//! changes. A socket whose other end's address is one of those kept leads
//! back; one whose other end has no address, or another, does not. An
//! accepted connection has its listener's address, shared by every
//! connection of that listener: the check then refuses every socket
//! connected to a listener at that address, which is what a name server
//! wants of its own listener.
//!
//! The check and the record are one step under one lock, so two servers
//! each taking one end of a connection at the same moment cannot both see
//! the other's end not yet kept.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::io::Errno;
use rustix::net::{self, SocketAddrUnix};

/// Which server of this process keeps a socket: a name server's own mark
/// ([`new_keeper`]), or [`ANY_SERVER`] for servers that only need to know
/// whether a socket is kept by any.
pub type Keeper = u64;

/// The keeper of the object and emulation servers' sockets.
pub const ANY_SERVER: Keeper = 0;

/// A keeper no other server of this process has.
pub fn new_keeper() -> Keeper {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Where the other end of a socket handed to a server is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtherEnd {
    /// It has none: it was never connected, or it is a listener.
    Missing,
    /// A socket a server of this process keeps.
    Kept {
        /// Who keeps it: the keeper that asks, if it is one of those
        /// that do.
        by: Keeper,
    },
    /// A socket no server of this process keeps.
    Elsewhere,
}

/// The sockets kept, by inode and by address.
#[derive(Default)]
struct Registry {
    /// By inode: the socket's address, and one keeper for each keep.
    sockets: BTreeMap<u64, (Vec<u8>, Vec<Keeper>)>,
    /// By address: the keepers of the sockets there, with how many keeps
    /// each (a listener's connections share its address).
    addresses: BTreeMap<Vec<u8>, BTreeMap<Keeper, usize>>,
}

static KEPT: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A socket's address as compared here: an abstract name with its leading
/// NUL, or a path (which never begins with one); `None` for none (the
/// kernel reports an unnamed socket's address as an empty abstract name).
fn key(addr: &SocketAddrUnix) -> Option<Vec<u8>> {
    match (addr.abstract_name(), addr.path_bytes()) {
        (Some(name), _) if !name.is_empty() => Some([&[0], name].concat()),
        (_, Some(path)) if !path.is_empty() => Some(path.to_vec()),
        _ => None,
    }
}

/// The address of socket `fd` (`None`: it has none).
fn own_address(fd: BorrowedFd<'_>) -> rustix::io::Result<Option<Vec<u8>>> {
    Ok(key(&SocketAddrUnix::try_from(net::getsockname(fd)?)?))
}

/// The address of `fd`'s other end: `None` when it has no other end,
/// `Some(None)` when that has no address.
fn other_address(fd: BorrowedFd<'_>) -> rustix::io::Result<Option<Option<Vec<u8>>>> {
    match net::getpeername(fd) {
        Ok(Some(addr)) => Ok(Some(key(&SocketAddrUnix::try_from(addr)?))),
        Ok(None) | Err(Errno::NOTCONN) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The address of socket `fd`, given a fresh abstract name first if it
/// has none.
fn named(fd: BorrowedFd<'_>) -> rustix::io::Result<Vec<u8>> {
    use std::hash::{BuildHasher, Hasher};
    static NAMES: AtomicU64 = AtomicU64::new(0);
    if let Some(addr) = own_address(fd)? {
        return Ok(addr);
    }
    for _ in 0..4 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(NAMES.fetch_add(1, Ordering::Relaxed));
        let name = format!("ferry-kept-{:016x}", h.finish());
        match net::bind(fd, &SocketAddrUnix::new_abstract_name(name.as_bytes())?) {
            // Named meanwhile by another holder of the socket: that name.
            Ok(()) | Err(Errno::INVAL) => return own_address(fd)?.ok_or(Errno::INVAL),
            Err(Errno::ADDRINUSE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::ADDRINUSE)
}

impl Registry {
    fn other_end(&self, fd: BorrowedFd<'_>, keeper: Keeper) -> rustix::io::Result<OtherEnd> {
        let Some(addr) = other_address(fd)? else { return Ok(OtherEnd::Missing) };
        // Every socket kept has an address: one with none is not kept.
        Ok(match addr.and_then(|a| self.addresses.get(&a)) {
            Some(by) if by.contains_key(&keeper) => OtherEnd::Kept { by: keeper },
            Some(by) => OtherEnd::Kept { by: by.keys().next().copied().unwrap_or(ANY_SERVER) },
            None => OtherEnd::Elsewhere,
        })
    }

    fn keep(&mut self, fd: BorrowedFd<'_>, keeper: Keeper) -> rustix::io::Result<u64> {
        let inode = rustix::fs::fstat(fd)?.st_ino as u64;
        let addr = match self.sockets.get(&inode) {
            Some((addr, _)) => addr.clone(),
            None => named(fd)?,
        };
        self.sockets.entry(inode).or_insert_with(|| (addr.clone(), Vec::new())).1.push(keeper);
        *self.addresses.entry(addr).or_default().entry(keeper).or_insert(0) += 1;
        Ok(inode)
    }

    fn unkeep(&mut self, inode: u64, keeper: Keeper) {
        let Some((addr, keepers)) = self.sockets.get_mut(&inode) else { return };
        let Some(at) = keepers.iter().position(|&k| k == keeper) else { return };
        keepers.swap_remove(at);
        let addr = addr.clone();
        if keepers.is_empty() {
            self.sockets.remove(&inode);
        }
        if let Some(by) = self.addresses.get_mut(&addr) {
            if let Some(n) = by.get_mut(&keeper) {
                *n -= 1;
                if *n == 0 {
                    by.remove(&keeper);
                }
            }
            if by.is_empty() {
                self.addresses.remove(&addr);
            }
        }
    }
}

/// Records that `keeper` keeps socket `fd` (a server's own port, or a
/// system name's right); undone by [`unkeep`] with the inode returned.
///
/// # Errors
/// When the socket cannot be identified or named.
pub fn keep(fd: BorrowedFd<'_>, keeper: Keeper) -> rustix::io::Result<u64> {
    registry().get_or_insert_with(Registry::default).keep(fd, keeper)
}

/// Undoes one [`keep`] by `keeper` of the socket `inode`.
pub fn unkeep(inode: u64, keeper: Keeper) {
    if let Some(r) = registry().as_mut() {
        r.unkeep(inode, keeper);
    }
}

/// Whether a server of this process keeps the socket `inode`.
#[cfg(test)]
pub fn is_kept(inode: u64) -> bool {
    registry().as_ref().is_some_and(|r| r.sockets.contains_key(&inode))
}

/// Keeps socket `fd` for `keeper` ([`keep`]) unless `refuse` says no to
/// where its other end is, in one step: two servers each taking one end
/// of a connection at the same moment cannot both see the other's end not
/// yet kept. Returns the inode kept, or where the other end is when
/// refused. Its cost is a few system calls on `fd` alone, whatever other
/// sockets exist.
///
/// # Errors
/// When the socket cannot be asked about, identified or named.
pub fn keep_unless(fd: BorrowedFd<'_>, keeper: Keeper, refuse: impl FnOnce(OtherEnd) -> bool) -> rustix::io::Result<Result<u64, OtherEnd>> {
    let mut r = registry();
    let r = r.get_or_insert_with(Registry::default);
    let other = r.other_end(fd, keeper)?;
    if refuse(other) {
        return Ok(Err(other));
    }
    r.keep(fd, keeper).map(Ok)
}

/// A socket's [`keep`] by [`ANY_SERVER`], undone when this is dropped.
#[derive(Debug)]
pub struct Kept(u64);

impl Kept {
    /// Keeps socket `fd`, handed to a server as a right it would keep
    /// until its other end goes (a hold, a lifeline, a channel), unless it
    /// could never see that end go: it has none (a listening socket, or
    /// one never connected, which nothing ever hangs up), or its other end
    /// is a socket a server of this process keeps, so that the server would
    /// hold both ends of one connection, or a right to its own port. `None`
    /// then, and when the socket cannot be asked about or named.
    pub fn unless_it_leads_back(fd: BorrowedFd<'_>) -> Option<Kept> {
        keep_unless(fd, ANY_SERVER, |other| other != OtherEnd::Elsewhere).ok()?.ok().map(Kept)
    }

    /// The kept socket's inode.
    pub fn inode(&self) -> u64 {
        self.0
    }

    /// Keeps socket `fd` (a server's own port), or nothing if it cannot be
    /// identified or named.
    pub fn new(fd: BorrowedFd<'_>) -> Option<Kept> {
        keep(fd, ANY_SERVER).ok().map(Kept)
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        unkeep(self.0, ANY_SERVER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::socket::seqpacket_pair;
    use std::os::fd::AsFd;

    /// A socket leads back when its other end is kept, by whom it is
    /// kept, and not once it is no longer kept; one never connected has
    /// no other end.
    #[test]
    fn the_other_end_of_a_pair_is_found_kept_by_its_keeper() {
        let (a, b) = seqpacket_pair().unwrap();
        let me = new_keeper();
        let refuse_none = |_| false;
        let kept = keep_unless(a.as_fd(), me, refuse_none).unwrap().unwrap();
        let mut seen = None;
        let refused = keep_unless(b.as_fd(), ANY_SERVER, |o| {
            seen = Some(o);
            true
        });
        assert_eq!(refused.unwrap(), Err(OtherEnd::Kept { by: me }));
        assert_eq!(seen, Some(OtherEnd::Kept { by: me }));
        unkeep(kept, me);
        assert_eq!(keep_unless(b.as_fd(), ANY_SERVER, |o| o != OtherEnd::Elsewhere).unwrap().map_err(|_| ()).map(|_| ()), Ok(()));
        assert!(Kept::unless_it_leads_back(a.as_fd()).is_none(), "the other end of a kept socket was kept");
        unkeep(rustix::fs::fstat(b.as_fd()).unwrap().st_ino as u64, ANY_SERVER);
        let lone = net::socket_with(net::AddressFamily::UNIX, net::SocketType::SEQPACKET, net::SocketFlags::CLOEXEC, None).unwrap();
        assert!(Kept::unless_it_leads_back(lone.as_fd()).is_none(), "a socket with no other end was kept");
        assert_eq!(keep_unless(lone.as_fd(), me, |_| true).unwrap(), Err(OtherEnd::Missing));
    }
}
