//! Advisory file locks, to serialise processes racing to bind one socket path.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FlockOperation, Mode, OFlags};

/// Opens (creating) `path` and takes an exclusive `flock` on it; the lock is
/// released when the returned descriptor is closed.
pub fn lock_exclusive(path: &Path) -> rustix::io::Result<OwnedFd> {
    let fd = rustix::fs::open(path, OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    rustix::fs::flock(&fd, FlockOperation::LockExclusive)?;
    Ok(fd)
}
