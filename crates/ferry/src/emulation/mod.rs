//! The Unix emulation service: open files served to unmodified programs
//! through ferry, as Mach 3.0's BSD server served its emulation library
//! (Dean & Armand).
//!
//! A program runs with the `ferry-emul` preload library (started by
//! `ferry run --files DIR`); its opens, stats, unlinks, renames and
//! directory creations under `DIR` become messages to an [`EmulServer`],
//! which resolves every name beneath its root (`openat2` with
//! `RESOLVE_BENEATH`) and acts with the asker's file-system identity, as the
//! file server does. An open regular file comes back as
//!
//! - the file's descriptor, opened with the asker's rights and the
//!   requested access, which the library maps in **windows** (`MAP_SHARED`
//!   views of the file: reads and writes are memory copies, with no
//!   message and no system call per call);
//! - a **token page** ([`TokenPage`]), one shared page per open file that
//!   holds the open file's offset and size and the **token** guarding
//!   them (free, passive or active, with the holder's pid), shared by every
//!   process that shares the open file (after `fork`, or when the
//!   descriptor is passed on);
//! - a **hold** send right: when every process has closed the open file
//!   the server forgets it (its descriptor and page go with it).
//!
//! The token protocol: a process whose pid is in the word as the passive
//! holder turns it active with one compare-and-swap, works on the offset
//! and size, and turns it passive again; only when it does not hold the
//! token does it ask the server ([`OP_EMUL_TOKEN`]). The server calls the
//! token back from a passive holder (one compare-and-swap that makes the
//! asker the active holder), and waits for an active holder to finish,
//! which wakes it through a futex on the word. A holder that dies while
//! active is found dead through its process port ([`crate::process`]) and
//! loses the token.
//!
//! Descriptors travel in an **envelope**: a fresh socket pair, one end of
//! which goes to the client as a send right in the reply; the other end
//! carries exactly one datagram with the descriptors and is closed. ferry's
//! message items carry only ports, regions and memory objects; a file is
//! none of these, and the envelope keeps that rule (every item is still a
//! port) while letting the client take exactly the descriptors of its own
//! reply.

pub mod client;
pub mod server;

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::sys::futex::{self, SharedWords};

pub use client::{Client, Opened, OpenedFile, StatInfo};
pub use crate::sys::process::{forget_held_signals, hold_signals, SignalsHeld};
pub use server::{EmulServer, EmulStats, Handler};

/// Client → server: open. Body: flags (i32), mode (u32), name. Reply body:
/// errno (u32; 0 = success), kind (u32: 0 file, 1 directory), open-file id
/// (u64), size (u64); items: the envelope (a send right whose socket holds
/// the file descriptor and, for a file, the token page), then for a file
/// the hold send right.
pub const OP_EMUL_OPEN: u32 = 0x7065_0001;
/// Client → server: stat. Body: flags (u32, 1 = do not follow a final
/// symbolic link), name. Reply: errno, then [`StatInfo`]'s 13 fields (u64).
pub const OP_EMUL_STAT: u32 = 0x7065_0002;
/// Client → server: unlink. Body: flags (u32, 1 = remove a directory), name.
pub const OP_EMUL_UNLINK: u32 = 0x7065_0003;
/// Client → server: rename. Body: length of the first name (u32), the two
/// names.
pub const OP_EMUL_RENAME: u32 = 0x7065_0004;
/// Client → server: make a directory. Body: mode (u32), name.
pub const OP_EMUL_MKDIR: u32 = 0x7065_0005;
/// Client → server: give me the token of open file `id` (u64). The reply
/// comes once the asker is the active holder.
pub const OP_EMUL_TOKEN: u32 = 0x7065_0006;
/// Client → server: truncate open file `id` (u64) to a length (u64).
pub const OP_EMUL_TRUNCATE: u32 = 0x7065_0007;
/// Client → server: flush open file `id` (u64) to disk.
pub const OP_EMUL_FSYNC: u32 = 0x7065_0008;
/// Client → server: segment read (CHORUS's `sgRead`): open file `id`
/// (u64), offset (u64), length (u32, at most [`SG_MAX`]). The reply
/// carries the bytes, copied through the server's cache of the file.
pub const OP_EMUL_SG_READ: u32 = 0x7065_0009;
/// Client → server: segment write (`sgWrite`): `id` (u64), offset (u64),
/// the bytes. Reply: the count written (u64).
pub const OP_EMUL_SG_WRITE: u32 = 0x7065_000a;
/// Client → server: this process let go of open file `id` (u64), closing
/// its hold just before. If no process holds the open file any more, the
/// server closes its own descriptor of it before answering, so that once
/// the program's `close` returns the file is as closed as natively: an
/// executable just written may run (no `ETXTBSY`), and a `flock` on it is
/// gone. Answered the same whoever asks and whatever the id.
pub const OP_EMUL_CLOSE: u32 = 0x7065_000b;
/// Client → server, on the server's main port: a channel for one thread's
/// calls. The message carries one receive right, the server's end of a
/// socket pair whose other end the thread keeps; the server answers on
/// the message's reply right (errno first: `0`, or `EAGAIN` past the
/// asker's budget of channels). After that the thread sends its requests
/// on its end (no reply right: the answer comes back on the same socket)
/// and each answer arrives there, so a call makes no socket and passes no
/// right. The server's end closes when the thread's does.
pub const OP_EMUL_CHANNEL: u32 = 0x7065_000c;
/// Client → server: truncate the file `name` to a length (body: the
/// length, u64, then the name), as `truncate(2)` by name. The server
/// resolves the name as the asker and cuts the file as
/// [`OP_EMUL_TRUNCATE`] does, with the tokens of every open file of it
/// called back first, by name (`truncate(2)` of its `O_PATH`
/// descriptor's `/proc/self/fd` name): nothing is opened, so the asking
/// process holds no descriptor to close (closing one would drop its POSIX
/// record locks on the file) and `inotify` sees one modification.
pub const OP_EMUL_TRUNCATE_NAME: u32 = 0x7065_000d;
/// How long a thread that waits for the other side of a call looks for
/// it, yielding the CPU between looks, before it sleeps: the caller for
/// its answer, and the server, just after a request, for the next one (a
/// program making file calls in a row sends it within microseconds). With
/// the two on different CPUs a sleeper's wake-up costs some 50 µs on a
/// virtual machine; on one CPU the yield runs the other side at once, and
/// any other runnable thread before the one that looks.
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);
/// Most bytes one segment read or write moves (what fits inline in one
/// message beside its header).
pub const SG_MAX: usize = crate::wire::MAX_INLINE - 64;
/// Server → client: every reply (errno first).
pub const OP_EMUL_REPLY: u32 = 0x7065_00ff;

/// Set in a creation mode that carries the asker's umask
/// ([`creation_mode`]).
const WITH_UMASK: u32 = 1 << 31;

/// A new file's or directory's mode as a client sends it: the mode the
/// program asked for and its umask, for the server to create it under
/// that umask as the kernel would. A directory with a default ACL then
/// takes the umask's place, as natively; a mode sent with the umask
/// already applied cannot tell (files came out 0600 where natively they
/// were 0666). A mode without the flag is taken as already masked.
pub fn creation_mode(mode: u32, umask: u32) -> u32 {
    (mode & 0o7777) | ((umask & 0o777) << 16) | WITH_UMASK
}

/// The mode and, if it was sent, the umask of a [`creation_mode`].
pub(crate) fn split_creation_mode(m: u32) -> (u32, Option<u32>) {
    (m & 0o7777, (m & WITH_UMASK != 0).then_some((m >> 16) & 0o777))
}

/// Environment variable naming the descriptor of the send right to the
/// emulation server in an emulated program.
pub const ENV_FD: &str = "FERRY_EMUL_FD";
/// Environment variable naming the emulated directory (absolute, canonical).
pub const ENV_ROOT: &str = "FERRY_EMUL_ROOT";
/// Set (to `1`) when the program gets the server's right from its holder
/// through the process port's hand-off (`crate::process::HandOff`), placed
/// at the descriptor [`ENV_FD`] names, rather than inheriting it there.
pub const ENV_HANDOFF: &str = "FERRY_EMUL_HANDOFF";

/// Environment variable naming the mount namespace the server resolves
/// names in (see [`mount_namespace`]): a program in another one sees other
/// file systems under the served directory, and its names there are the
/// kernel's.
pub const ENV_MOUNTS: &str = "FERRY_EMUL_MOUNTS";

/// Environment variable naming the user namespace the server acts in
/// (see [`user_namespace`]): a program in another one holds its
/// capabilities there, over the files of the users it maps, which only
/// its own kernel weighs, so its names are the kernel's.
pub const ENV_USERS: &str = "FERRY_EMUL_USERS";

/// The user namespace this process is in, as the device and inode of
/// `/proc/self/ns/user` written `dev:ino` (the form [`ENV_USERS`] holds);
/// `None` when the kernel cannot say (no `/proc`).
pub fn user_namespace() -> Option<String> {
    let st = rustix::fs::stat("/proc/self/ns/user").ok()?;
    Some(format!("{}:{}", st.st_dev, st.st_ino))
}

/// The mount namespace this process is in, as the device and inode of
/// `/proc/self/ns/mnt` written `dev:ino` (the form [`ENV_MOUNTS`] holds);
/// `None` when the kernel cannot say (no `/proc`).
pub fn mount_namespace() -> Option<String> {
    let st = rustix::fs::stat("/proc/self/ns/mnt").ok()?;
    Some(format!("{}:{}", st.st_dev, st.st_ino))
}

/// Announces in `cmd`'s environment the mount and user namespaces of
/// this process ([`ENV_MOUNTS`], [`ENV_USERS`]), where the server is
/// expected to resolve names and act (the ones `ferry run` and its server
/// share), or that either is unknown.
fn announce_namespaces(cmd: &mut std::process::Command) {
    for (name, ns) in [(ENV_MOUNTS, mount_namespace()), (ENV_USERS, user_namespace())] {
        match ns {
            Some(ns) => cmd.env(name, ns),
            None => cmd.env_remove(name),
        };
    }
}

/// Token states (low two bits of the token word).
const FREE: u32 = 0;
const PASSIVE: u32 = 1;
const ACTIVE: u32 = 2;
/// Someone waits for the active holder to finish.
const WANTED: u32 = 4;
const PID_SHIFT: u32 = 3;

const TOKEN_OFF: usize = 0;
const OFFSET_OFF: usize = 8;
const SIZE_OFF: usize = 16;
/// Non-zero once a program without the library may share the open file
/// (it was inherited across `exec`): the kernel's offset is then the one.
const KERNEL_OFFSET_OFF: usize = 24;
/// The open file's `O_APPEND` as a process last set it with
/// `fcntl(F_SETFL)` (1 off, 2 on; 0: as opened), for every process
/// sharing the open file: the flag is the open file's in the kernel.
const APPEND_OFF: usize = 28;
/// Bytes of the token page.
const PAGE_LEN: usize = 4096;

/// Who holds an open file's token, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenState {
    /// Nobody: the next user asks the server.
    Free,
    /// Held by this pid, which is not using it right now (the server may
    /// call it back).
    Passive(i32),
    /// Held by this pid, which is using it right now (the server waits).
    Active(i32),
}

fn word(state: u32, pid: i32) -> u32 {
    ((pid as u32) << PID_SHIFT) | state
}

fn decode(w: u32) -> TokenState {
    let pid = (w >> PID_SHIFT) as i32;
    match w & 3 {
        PASSIVE => TokenState::Passive(pid),
        ACTIVE => TokenState::Active(pid),
        _ => TokenState::Free,
    }
}

/// One open file's shared page: the token word, the offset and the size,
/// mapped by the server and by every process sharing the open file.
/// Everything is read and written as atomics (any process may write any
/// byte at any time); the offset and size are meaningful to the active
/// holder only.
#[derive(Debug)]
pub struct TokenPage {
    words: SharedWords,
}

impl TokenPage {
    /// The seals every token page carries: no process mapping it can shrink
    /// or grow it (a page shrunk under a mapping faults whoever looks next).
    pub(crate) const SEALS: rustix::fs::SealFlags =
        rustix::fs::SealFlags::SHRINK.union(rustix::fs::SealFlags::GROW).union(rustix::fs::SealFlags::SEAL);

    /// Maps a token page from its memfd.
    ///
    /// # Errors
    /// `EINVAL` when the memfd is shorter than a page or not sealed against
    /// shrinking and growing (another process could then make this one
    /// fault), or the error of mapping it.
    pub fn map(fd: BorrowedFd<'_>) -> std::io::Result<TokenPage> {
        let sealed = crate::sys::mem::seals(fd).is_ok_and(|s| s.contains(Self::SEALS));
        if !sealed || crate::sys::mem::file_size(fd).map_err(crate::error::io_err)? < PAGE_LEN as u64 {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(TokenPage { words: SharedWords::map(fd, PAGE_LEN).map_err(crate::error::io_err)? })
    }

    fn token(&self) -> &AtomicU32 {
        self.words.u32_at(TOKEN_OFF)
    }

    /// The token's state now.
    pub fn state(&self) -> TokenState {
        decode(self.token().load(Ordering::Acquire))
    }

    /// Turns a passive token held by `pid` active, without asking anyone
    /// (the fast path): `false` if `pid` is not the passive holder.
    pub fn try_activate(&self, pid: i32) -> bool {
        self.token().compare_exchange(word(PASSIVE, pid), word(ACTIVE, pid), Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Turns the token `pid` holds active back to passive, waking whoever
    /// waits for it.
    pub fn deactivate(&self, pid: i32) {
        let old = self.token().swap(word(PASSIVE, pid), Ordering::AcqRel);
        if old & WANTED != 0 {
            let _ = futex::wake(self.token());
        }
    }

    /// Frees a token `pid` holds active (the server, after calling it back
    /// to change the file under every holder), waking waiters.
    pub(crate) fn release(&self, pid: i32) {
        if let Ok(old) = self.token().compare_exchange(word(ACTIVE, pid), word(FREE, 0), Ordering::AcqRel, Ordering::Acquire)
            .or_else(|_| self.token().compare_exchange(word(ACTIVE, pid) | WANTED, word(FREE, 0), Ordering::AcqRel, Ordering::Acquire))
        {
            if old & WANTED != 0 {
                let _ = futex::wake(self.token());
            }
        }
    }

    /// Gives up a passive token `pid` holds (on its last close).
    pub fn give_up(&self, pid: i32) {
        let _ = self.token().compare_exchange(word(PASSIVE, pid), word(FREE, 0), Ordering::AcqRel, Ordering::Acquire);
    }

    /// Makes `pid` the active holder if the token is free or passive
    /// (calling it back from a passive holder); returns the state found
    /// when it is active elsewhere.
    pub(crate) fn take_for(&self, pid: i32) -> Result<(), TokenState> {
        let w = self.token().load(Ordering::Acquire);
        match decode(w) {
            TokenState::Active(h) => Err(TokenState::Active(h)),
            _ => match self.token().compare_exchange(w, word(ACTIVE, pid), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => Ok(()),
                Err(now) => Err(decode(now)),
            },
        }
    }

    /// Takes the token from an active holder that is dead.
    pub(crate) fn seize_from_dead(&self, dead: i32, pid: i32) -> bool {
        let w = self.token().load(Ordering::Acquire);
        decode(w) == TokenState::Active(dead)
            && self.token().compare_exchange(w, word(ACTIVE, pid), Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Sets the passive holder (the opener) of a fresh page.
    pub(crate) fn init(&self, pid: i32, size: u64) {
        self.set_offset(0);
        self.set_size(size);
        self.token().store(word(PASSIVE, pid), Ordering::Release);
    }

    /// Waits (at most `timeout`) while the token is active, asking its
    /// holder to wake the waiter when it finishes.
    pub fn wait_active(&self, timeout: Duration) {
        let w = self.token().load(Ordering::Acquire);
        if w & 3 != ACTIVE {
            return;
        }
        let with = w | WANTED;
        if w & WANTED == 0 && self.token().compare_exchange(w, with, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        let _ = futex::wait(self.token(), with, Some(timeout));
    }

    fn get(&self, off: usize) -> u64 {
        self.words.u64_at(off).load(Ordering::Relaxed)
    }

    /// The open file's offset (the active holder's to use).
    pub fn offset(&self) -> u64 {
        self.get(OFFSET_OFF)
    }

    /// Sets the open file's offset.
    pub fn set_offset(&self, v: u64) {
        self.words.u64_at(OFFSET_OFF).store(v, Ordering::Relaxed);
    }

    /// Whether the open file's offset is the kernel's, not the page's: set
    /// for good once the open file was inherited across `exec`, where the
    /// new program (or one without the library) moves the kernel's offset
    /// and cannot know of this page.
    pub fn kernel_offset(&self) -> bool {
        self.words.u32_at(KERNEL_OFFSET_OFF).load(Ordering::Acquire) != 0
    }

    /// Makes the kernel's offset the open file's from now on (see
    /// [`kernel_offset`](Self::kernel_offset)); the caller has set it.
    pub fn hand_offset_to_kernel(&self) {
        self.words.u32_at(KERNEL_OFFSET_OFF).store(1, Ordering::Release);
    }

    /// The open file's `O_APPEND` as a sharer last set it with
    /// `fcntl(F_SETFL)`, if one did (else it is as the file was opened).
    pub fn append(&self) -> Option<bool> {
        match self.words.u32_at(APPEND_OFF).load(Ordering::Acquire) {
            0 => None,
            v => Some(v == 2),
        }
    }

    /// Records the open file's `O_APPEND`, set with `fcntl(F_SETFL)`, for
    /// every process sharing it.
    pub fn set_append(&self, on: bool) {
        self.words.u32_at(APPEND_OFF).store(if on { 2 } else { 1 }, Ordering::Release);
    }

    /// The file's size as the token holders know it.
    pub fn size(&self) -> u64 {
        self.get(SIZE_OFF)
    }

    /// Sets the file's size as the token holders know it.
    pub fn set_size(&self, v: u64) {
        self.words.u64_at(SIZE_OFF).store(v, Ordering::Relaxed);
    }
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The descriptor number an emulated program finds the server's send right
/// at (high, out of the way of the numbers programs expect).
pub const INHERITED_AT: i32 = 1000;

/// Prepares `cmd` to run emulated: the program inherits a copy of
/// `server` at [`INHERITED_AT`] (announced in [`ENV_FD`]), `root` is
/// announced in [`ENV_ROOT`] and this process's mount and user
/// namespaces in [`ENV_MOUNTS`] and [`ENV_USERS`], and `library` (the `ferry-emul` preload
/// library) is put first in `LD_PRELOAD`. `root` should be absolute and
/// canonical: names are matched against it as the program spells them
/// after `.` and `..` are taken out.
///
/// # Errors
/// When the right cannot be duplicated.
pub fn prepare_command(
    cmd: &mut std::process::Command,
    server: &crate::port::SendRight,
    root: &std::path::Path,
    library: &std::path::Path,
) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let copy = crate::sys::socket::dup(server.as_fd()).map_err(crate::error::io_err)?;
    crate::sys::spawn::inherit_at(cmd, copy, INHERITED_AT);
    let mut preload = library.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload).env(ENV_ROOT, root).env(ENV_FD, INHERITED_AT.to_string());
    announce_namespaces(cmd);
    Ok(())
}

/// Prepares `cmd` to run emulated with the server's right handed over
/// through the process port (start it with
/// [`crate::process::spawn_with_hand_off`] and answer with
/// [`crate::process::HandOff::hand`]): the preload library at `library`
/// in `LD_PRELOAD`, files under `root` served (to programs in this
/// process's mount and user namespaces, [`ENV_MOUNTS`], [`ENV_USERS`]),
/// and the right asked for at
/// its first file call and placed at [`INHERITED_AT`], where the programs
/// it starts inherit it. Nothing is inherited from the caller.
pub fn prepare_command_for_hand_off(cmd: &mut std::process::Command, root: &std::path::Path, library: &std::path::Path) {
    let mut preload = library.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload).env(ENV_ROOT, root).env(ENV_FD, INHERITED_AT.to_string()).env(ENV_HANDOFF, "1");
    announce_namespaces(cmd);
}
