//! Files beneath a directory, for the file server: opening without escaping
//! the served root, reading at offsets, and replacing a file's contents by
//! renaming a fresh inode over its name.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Uid};
use rustix::io::Errno;

/// What the file server needs to know of an open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// A regular file (not a directory, device, socket, ...).
    pub is_file: bool,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// (device, inode): which version of a name this is.
    pub identity: (u64, u64),
}

/// Opens `path` as a directory to serve files beneath.
pub fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
}

/// Opens `name` beneath `root` for reading, refusing to leave `root` (by
/// `..`, absolute paths or symbolic links) with `EXDEV`/`ELOOP`.
pub fn open_read_beneath(root: BorrowedFd<'_>, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Describes an open file.
pub fn info(fd: BorrowedFd<'_>) -> rustix::io::Result<FileInfo> {
    let st = rustix::fs::fstat(fd)?;
    Ok(FileInfo {
        is_file: FileType::from_raw_mode(st.st_mode).is_file(),
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        identity: (st.st_dev as u64, st.st_ino as u64),
    })
}

/// Fills `buf` from `offset`, stopping early only at end of file; returns
/// the bytes read.
pub fn read_at(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> rustix::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Replaces the contents of `name` beneath `root` with `data`: writes a
/// fresh inode under `tmp` (with the given mode and, where permitted, owner),
/// syncs it and renames it over `name`, so that whoever has the old inode
/// open keeps reading the old contents. On failure the temporary file is
/// removed and `name` is untouched.
pub fn replace(root: BorrowedFd<'_>, name: &str, tmp: &str, data: &[u8], mode: u32, uid: u32, gid: u32) -> rustix::io::Result<()> {
    let new = rustix::fs::openat2(
        root,
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(mode & 0o7777),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )?;
    let result = (|| {
        // Keeping the owner needs privilege; without it the file is ours.
        let _ = rustix::fs::fchown(&new, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
        let mut done = 0;
        while done < data.len() {
            match rustix::io::write(&new, &data[done..]) {
                Ok(n) => done += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
        rustix::fs::fsync(new.as_fd())?;
        rustix::fs::renameat(root, tmp, root, name)
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(root, tmp, AtFlags::empty());
    }
    result
}
