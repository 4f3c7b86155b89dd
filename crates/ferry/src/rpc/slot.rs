//! The shared slot: layout, creation, validation, and the copy-out-then-check
//! reads and writes of requests and replies.
//!
//! Layout (all little-endian 32-bit words unless said; see `docs/rpc.md`).
//! Each direction has a 68 KiB half of its own (control words, then up to
//! 64 KiB of body, the most a call carries), and its control words share their cache line with the
//! first 40 bytes of its body, so a short call moves one line each way (the
//! floor a spinning pair of processes reaches), not two. The memfd's pages
//! are allocated when first touched, so a connection whose calls are short
//! holds two pages, not 34:
//!
//! | offset | field | written by |
//! |---|---|---|
//! | 0 | magic `"FRPS"`, version, size | client, at setup |
//! | 16 | probe timestamps (ns): request seen, reply published | server |
//! | 64 | `req_seq` (publishes a request), `req_op`, `req_len` | client |
//! | 76 | `server_sleeping` (1: asleep in `epoll`, ring its doorbell; 2: asleep on futexes, wake `req_seq`) | server |
//! | 80 | `req_sock`: sequence number of the last request sent over the socket | client |
//! | 84 | `client_cpu`: the client's CPU tag (adaptive policy) | client |
//! | 88 | request body, [`SLOT_INLINE`] bytes | client |
//! | 69696 | `rep_seq` (futex word the client sleeps on), `rep_op`, `rep_len`, `rep_via` | server |
//! | 69712 | `client_sleeping` (1: the client sleeps on `rep_seq`, wake it; 2: it waits on its socket, ring its doorbell) | client |
//! | 69716 | `server_cpu`: the server thread's CPU tag (adaptive policy) | server |
//! | 69720 | reply body, [`SLOT_INLINE`] bytes | server |
//!
//! A side writes the body and its length first and publishes the sequence
//! number last (release); the other side loads the sequence number (acquire),
//! copies length, op and body out, and only then checks them.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};

use rustix::fs::SealFlags;

use crate::sys::futex::SharedWords;
use crate::sys::mem;

/// Size of a connection's slot memfd in bytes (136 KiB): a 68 KiB half for
/// the request, then one for the reply.
pub const SLOT_SIZE: usize = 2 * REPLY_PAGE;
/// Largest body that travels through the slot: 64 KiB, the most a call
/// carries ([`crate::message::MAX_INLINE`]), so every call without items
/// takes it; messages with items go over the connection socket.
pub const SLOT_INLINE: usize = crate::message::MAX_INLINE;

const MAGIC: u32 = u32::from_le_bytes(*b"FRPS");
/// 4: halves of 68 KiB, bodies of up to 64 KiB (3 carried 63 KiB in halves
/// of 64 KiB, and a call of 64513 to 65536 bytes went over the socket; 2
/// carried 3840 bytes in an 8 KiB slot; 1 had control words and body
/// apart).
pub(crate) const VERSION: u32 = 4;

/// Where the reply side's half starts.
pub(crate) const REPLY_PAGE: usize = 68 * 1024;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 4;
const OFF_SIZE: usize = 8;
pub(crate) const OFF_REQ_SEQ: usize = 64;
pub(crate) const OFF_REQ_OP: usize = 68;
pub(crate) const OFF_REQ_LEN: usize = 72;
pub(crate) const OFF_SERVER_SLEEPING: usize = 76;
pub(crate) const OFF_REQ_SOCK: usize = 80;
pub(crate) const OFF_CLIENT_CPU: usize = 84;
pub(crate) const OFF_REP_SEQ: usize = REPLY_PAGE + 64;
pub(crate) const OFF_REP_OP: usize = REPLY_PAGE + 68;
pub(crate) const OFF_REP_LEN: usize = REPLY_PAGE + 72;
pub(crate) const OFF_REP_VIA: usize = REPLY_PAGE + 76;
pub(crate) const OFF_CLIENT_SLEEPING: usize = REPLY_PAGE + 80;
pub(crate) const OFF_SERVER_CPU: usize = REPLY_PAGE + 84;
pub(crate) const OFF_PROBE: usize = 16;
pub(crate) const OFF_REQ_DATA: usize = 88;
pub(crate) const OFF_REP_DATA: usize = REPLY_PAGE + 88;

// Each body area fits in its page, after its control words.
const _: () = assert!(OFF_CLIENT_CPU + 4 <= OFF_REQ_DATA && OFF_REQ_DATA + SLOT_INLINE <= REPLY_PAGE);
const _: () = assert!(OFF_SERVER_CPU + 4 <= OFF_REP_DATA && OFF_REP_DATA + SLOT_INLINE <= SLOT_SIZE);

/// `client_sleeping`: the client waits on the connection socket (an event
/// loop), not on the futex: ring its doorbell instead of waking the futex.
pub(crate) const CLIENT_WANTS_DOORBELL: u32 = 2;
/// `server_sleeping`: the server sleeps in `epoll`; ring the doorbell on
/// the connection socket.
pub(crate) const SLEEPING_DOORBELL: u32 = 1;
/// `server_sleeping`: the server sleeps on futexes; `FUTEX_WAKE` the
/// request word.
pub(crate) const SLEEPING_FUTEX: u32 = 2;

/// `rep_via`: the reply body is in the slot.
pub(crate) const VIA_SLOT: u32 = 0;
/// `rep_via`: the reply travels over the socket; the slot only says it is
/// there.
pub(crate) const VIA_SOCKET: u32 = 1;
/// `rep_via`: the server's reply was too large to carry; there is none.
pub(crate) const VIA_TOO_LARGE: u32 = 2;

/// One connection's mapped slot.
#[derive(Debug)]
pub(crate) struct Slot {
    mem: SharedWords,
}

/// A request or reply copied out of the slot, not yet checked beyond its
/// length.
#[derive(Debug)]
pub(crate) struct Copied {
    pub op: u32,
    pub via: u32,
    pub body: Vec<u8>,
}

impl Slot {
    /// Creates a slot memfd, sealed against resizing (so neither side can
    /// make the other fault by truncating it), and maps it.
    pub(crate) fn create() -> rustix::io::Result<(Slot, OwnedFd)> {
        let fd = mem::memfd("ferry-rpc-slot", SLOT_SIZE as u64)?;
        mem::add_seals(fd.as_fd(), SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let mem = SharedWords::map(fd.as_fd(), SLOT_SIZE)?;
        mem.u32_at(OFF_MAGIC).store(MAGIC, Ordering::Relaxed);
        mem.u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
        mem.u32_at(OFF_SIZE).store(SLOT_SIZE as u32, Ordering::Release);
        Ok((Slot { mem }, fd))
    }

    /// Maps a slot memfd received from a peer, after checking that it is a
    /// memfd of exactly [`SLOT_SIZE`] bytes that cannot shrink, and that its
    /// header is ours. The error says what was wrong; the fd is closed.
    pub(crate) fn open(fd: OwnedFd) -> Result<Slot, String> {
        let seals = mem::seals(fd.as_fd()).map_err(|_| "the slot descriptor is not a memfd".to_string())?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
            return Err("the slot memfd is not sealed against shrinking and growing".into());
        }
        let size = mem::file_size(fd.as_fd()).map_err(|e| format!("cannot stat the slot: {e}"))?;
        if size != SLOT_SIZE as u64 {
            return Err(format!("the slot is {size} bytes, expected {SLOT_SIZE}"));
        }
        let mem = SharedWords::map(fd.as_fd(), SLOT_SIZE).map_err(|e| format!("cannot map the slot: {e}"))?;
        let (magic, version, size) = (
            mem.u32_at(OFF_MAGIC).load(Ordering::Acquire),
            mem.u32_at(OFF_VERSION).load(Ordering::Relaxed),
            mem.u32_at(OFF_SIZE).load(Ordering::Relaxed),
        );
        if magic != MAGIC || version != VERSION || size != SLOT_SIZE as u32 {
            return Err(format!("bad slot header (magic {magic:#x}, version {version}, size {size})"));
        }
        Ok(Slot { mem })
    }

    /// A control word of the slot.
    pub(crate) fn word(&self, off: usize) -> &AtomicU32 {
        self.mem.u32_at(off)
    }

    /// Client: writes a request body, given as `head` then `tail` (a whole
    /// body is a `head` with an empty `tail`), and publishes it under
    /// `seq`. The body must fit ([`SLOT_INLINE`]); the caller checked.
    pub(crate) fn put_request(&self, seq: u32, op: u32, head: &[u8], tail: &[u8]) {
        self.mem.write_parts(OFF_REQ_DATA, head, tail);
        self.word(OFF_REQ_OP).store(op, Ordering::Relaxed);
        self.word(OFF_REQ_LEN).store((head.len() + tail.len()) as u32, Ordering::Relaxed);
        // SeqCst (not just release): it must be ordered before the load of
        // `server_sleeping` that follows (Dekker's handshake, docs/rpc.md).
        self.word(OFF_REQ_SEQ).store(seq, Ordering::SeqCst);
    }

    /// Server: the published request sequence number.
    pub(crate) fn request_seq(&self) -> u32 {
        self.word(OFF_REQ_SEQ).load(Ordering::Acquire)
    }

    /// Server: copies out the request published under `seq` (into `buf`'s
    /// allocation when it is large enough), then checks it. `Ok(None)` when
    /// the client replaced it while it was being copied (the client gave up
    /// on it: it is dropped without a reply).
    pub(crate) fn take_request(&self, seq: u32, mut buf: Vec<u8>) -> Result<Option<Copied>, String> {
        let op = self.word(OFF_REQ_OP).load(Ordering::Relaxed);
        let len = self.word(OFF_REQ_LEN).load(Ordering::Relaxed) as usize;
        if len > SLOT_INLINE {
            return Err(format!("request length {len} exceeds the slot's {SLOT_INLINE} bytes"));
        }
        self.mem.read_into(OFF_REQ_DATA, len, &mut buf);
        let body = buf;
        // Seqlock check: the copy is good only if `req_seq` did not move.
        fence(Ordering::Acquire);
        if self.word(OFF_REQ_SEQ).load(Ordering::Relaxed) != seq {
            return Ok(None);
        }
        Ok(Some(Copied { op, via: VIA_SLOT, body }))
    }

    /// Server: writes a reply body, given as `head` then `tail` (or, with
    /// `via == VIA_SOCKET`, the note that it went over the socket), and
    /// publishes it under `seq`.
    pub(crate) fn put_reply(&self, seq: u32, op: u32, head: &[u8], tail: &[u8], via: u32) {
        self.mem.write_parts(OFF_REP_DATA, head, tail);
        self.word(OFF_REP_OP).store(op, Ordering::Relaxed);
        self.word(OFF_REP_LEN).store((head.len() + tail.len()) as u32, Ordering::Relaxed);
        self.word(OFF_REP_VIA).store(via, Ordering::Relaxed);
        self.word(OFF_REP_SEQ).store(seq, Ordering::SeqCst);
    }

    /// Client: the published reply sequence number.
    pub(crate) fn reply_seq(&self) -> u32 {
        self.word(OFF_REP_SEQ).load(Ordering::Acquire)
    }

    /// Client: copies out the reply published under the current `rep_seq`
    /// (into `buf`'s allocation when it is large enough) and checks its
    /// length and path marker.
    pub(crate) fn take_reply(&self, mut buf: Vec<u8>) -> Result<Copied, String> {
        let (op, len, via) = self.reply_header()?;
        self.mem.read_into(OFF_REP_DATA, len, &mut buf);
        let body = buf;
        Ok(Copied { op, via, body })
    }

    /// Client: the published reply's operation id, the length of its body
    /// in the slot (0 unless it is there) and its path marker, checked.
    fn reply_header(&self) -> Result<(u32, usize, u32), String> {
        let op = self.word(OFF_REP_OP).load(Ordering::Relaxed);
        let len = self.word(OFF_REP_LEN).load(Ordering::Relaxed) as usize;
        let via = self.word(OFF_REP_VIA).load(Ordering::Relaxed);
        if via != VIA_SLOT && via != VIA_SOCKET && via != VIA_TOO_LARGE {
            return Err(format!("unknown reply path marker {via}"));
        }
        if len > SLOT_INLINE {
            return Err(format!("reply length {len} exceeds the slot's {SLOT_INLINE} bytes"));
        }
        Ok((op, if via == VIA_SLOT { len } else { 0 }, via))
    }

    /// Client: as [`take_reply`](Self::take_reply), with the body's first
    /// `at` bytes copied into `head` and the rest into `tail` (their
    /// allocations reused); returns the operation id and path marker.
    pub(crate) fn take_reply_split(&self, at: usize, head: &mut Vec<u8>, tail: &mut Vec<u8>) -> Result<(u32, u32), String> {
        let (op, len, via) = self.reply_header()?;
        self.mem.read_split(OFF_REP_DATA, len, at, head, tail);
        Ok((op, via))
    }

    /// Raw access to the probe area (timestamps only; never trusted).
    pub(crate) fn probe_words(&self) -> &SharedWords {
        &self.mem
    }
}
