//! The frames of the link protocol and their byte encoding.
//!
//! A frame is what one network server says to the other: a name lookup and
//! its answer, a message for a port the receiver exported, the release of
//! references, the death of an exported port, and the credit that bounds
//! what a message stream may have in flight (`crate::flow`). Frames are plain data; the
//! [`crate::link`] state machine decides what they mean. The encoding is a
//! small fixed little-endian layout (a tag byte, then fields; byte strings
//! carry a `u32` length), checked completely by [`Frame::decode`] before
//! anything is allocated at a length the peer chose beyond what the limits
//! below allow. Hand-written rather than generated because it is a few
//! dozen lines and every limit is in plain sight.

use std::fmt;

/// Largest encoded frame either side accepts (inline body, eager regions
/// and headers together).
pub const MAX_FRAME: usize = 40 << 20;
/// Largest region sent eagerly inside a message frame.
pub const MAX_EAGER_REGION: usize = 16 << 20;
/// Largest inline body of a message frame (ferry's own inline limit).
pub const MAX_BODY: usize = ferry::message::MAX_INLINE;
/// Most items (rights and regions) in one message frame.
pub const MAX_PARTS: usize = ferry::message::MAX_ITEMS;
/// Longest name in a lookup.
pub const MAX_NAME: usize = 255;
/// Largest region sent by reference (copy-on-reference): the receiver
/// reserves this much address space for it, nothing more until touched.
pub const MAX_REMOTE_REGION: u64 = 1 << 40;

/// A right as it crosses the link, named in one of the two export tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cap {
    /// A send right to a port the *sender* of the frame exports under this
    /// id; the receiver gains one reference to it.
    Hosted(u64),
    /// A send-once right the sender exports under this id (one use).
    HostedOnce(u64),
    /// A send right to a port the *receiver* of the frame exported under
    /// this id: the right comes home and becomes the original port again.
    Returned(u64),
    /// A send right whose port is already dead: the receiver gets a dead
    /// name (the id is unused and zero).
    DeadName,
}

/// One item of a message frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A right.
    Cap(Cap),
    /// An out-of-line region's bytes, sent eagerly.
    Region(Vec<u8>),
    /// A region sent by reference (copy-on-reference): the sender keeps its
    /// sealed bytes under `id` in its region table, and the receiver
    /// fetches pages with [`Frame::Fetch`] until it sends
    /// [`Frame::RegionRelease`].
    Remote {
        /// Region id in the sender's region table.
        id: u64,
        /// Length in bytes (at least 1, at most [`MAX_REMOTE_REGION`]).
        len: u64,
    },
}

/// One unit of the link protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Asks the peer for the send right it exports under `name`.
    Lookup {
        /// Request id, echoed in the answer.
        req: u64,
        /// The exported name.
        name: String,
    },
    /// Answers a [`Frame::Lookup`]: the right, or `None` if the name is not
    /// exported.
    Found {
        /// The request answered.
        req: u64,
        /// The right ([`Cap::Hosted`]), if any.
        cap: Option<Cap>,
    },
    /// A message for a port the receiver of the frame exported.
    Message {
        /// Export id (in the receiver's table) of the destination port.
        target: u64,
        /// The message's operation code.
        op: u32,
        /// Inline bytes.
        body: Vec<u8>,
        /// Rights and regions.
        parts: Vec<Part>,
        /// The reply right of the header.
        reply: Option<Cap>,
    },
    /// The sender drops `count` references to the receiver's export `id`;
    /// `uses` is how many frames in all the sender has sent that name the
    /// id (messages to it and [`Cap::Returned`] rights), so a release that
    /// overtakes such a frame on another stream cannot free the export
    /// before the frame arrives.
    Release {
        /// Export id in the receiver's table.
        id: u64,
        /// References dropped.
        count: u32,
        /// Uses of this id sent so far, in all.
        uses: u64,
    },
    /// The sender's export `id` is a dead name: its receive right is gone.
    Dead {
        /// Export id in the sender's table.
        id: u64,
    },
    /// The sender will fetch no more of region `id` (the receiver's
    /// [`Part::Remote`]): the receiver of this frame frees it.
    RegionRelease {
        /// Region id in the receiver's region table.
        id: u64,
    },
    /// Asks for `len` bytes at `offset` of region `id` (in the receiver's
    /// region table). Sent alone on a bidirectional stream of its own; the
    /// answer is exactly `len` raw bytes on the same stream.
    Fetch {
        /// Region id in the receiver's region table.
        region: u64,
        /// First byte wanted.
        offset: u64,
        /// Bytes wanted.
        len: u64,
    },
    /// Flow control, receiver to sender, on the control stream: the
    /// sender may put `bytes` more bytes of frames (length prefixes left
    /// out) on its message stream `stream` (by QUIC stream id): what the
    /// receiver has delivered since its last credit, and what it adds to
    /// the stream's window.
    Credit {
        /// The message stream, by QUIC stream id.
        stream: u64,
        /// Bytes of credit.
        bytes: u64,
    },
    /// Flow control, sender to receiver, on the control stream: the sender
    /// has a frame of `bytes` bytes for export `target` that its message
    /// stream `stream` has not the credit for, and waits for the
    /// [`Frame::Grant`]. One at a time a stream.
    Want {
        /// The message stream, by QUIC stream id.
        stream: u64,
        /// Export id (in the receiver's table) the frame is for.
        target: u64,
        /// The frame's length, length prefix left out.
        bytes: u64,
    },
    /// Flow control, receiver to sender: the answer to the stream's
    /// [`Frame::Want`], credit of the length asked for, by which the
    /// stream's window has grown.
    Grant {
        /// The message stream, by QUIC stream id.
        stream: u64,
        /// Bytes of credit (the length asked for).
        bytes: u64,
    },
}

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The frame ended before a field did.
    Truncated,
    /// Bytes were left after the frame.
    Trailing(usize),
    /// An unknown frame, cap or part tag.
    BadTag(&'static str, u8),
    /// A length beyond the agreed limit.
    TooLong(&'static str, usize),
    /// A name that is not UTF-8.
    BadName,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "frame truncated"),
            DecodeError::Trailing(n) => write!(f, "{n} stray bytes after the frame"),
            DecodeError::BadTag(what, t) => write!(f, "unknown {what} tag {t}"),
            DecodeError::TooLong(what, n) => write!(f, "{what} of {n} is over the limit"),
            DecodeError::BadName => write!(f, "name is not UTF-8"),
        }
    }
}

impl std::error::Error for DecodeError {}

const T_LOOKUP: u8 = 1;
const T_FOUND: u8 = 2;
const T_MESSAGE: u8 = 3;
const T_RELEASE: u8 = 4;
const T_DEAD: u8 = 5;
const T_REGION_RELEASE: u8 = 6;
const T_FETCH: u8 = 7;
const T_CREDIT: u8 = 8;
const T_WANT: u8 = 9;
const T_GRANT: u8 = 10;

/// The encoded length of a message frame (without its length prefix)
/// with a `body`-byte body, `caps` rights and `remotes` regions by
/// reference among its parts, eager regions of the lengths `eager`, and a
/// reply right or not: what a sender checks against [`MAX_FRAME`] before
/// it translates anything, since the peer closes a link that sends more.
pub fn message_len(body: usize, caps: usize, remotes: usize, eager: impl IntoIterator<Item = usize>, reply: bool) -> usize {
    // Tag, target, op, the body's length and the parts' count; a right is
    // a kind byte, a tag and an id; a region by reference a kind byte, an
    // id and a length; an eager region a kind byte, a length and bytes.
    let head = 1 + 8 + 4 + 4 + body + 2;
    let eager: usize = eager.into_iter().map(|n| 1 + 4 + n).sum();
    head + caps * 10 + remotes * 17 + eager + if reply { 9 } else { 1 }
}

fn put_cap(out: &mut Vec<u8>, cap: Cap) {
    let (t, id) = match cap {
        Cap::Hosted(id) => (1, id),
        Cap::HostedOnce(id) => (2, id),
        Cap::Returned(id) => (3, id),
        Cap::DeadName => (4, 0),
    };
    out.push(t);
    out.extend_from_slice(&id.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The export id a message frame is for, read from its first bytes alone
/// (`head`: at least the tag and the id), or `None` if they are not those
/// of a message frame. The frame itself is checked only when decoded.
pub fn message_target(head: &[u8]) -> Option<u64> {
    match head {
        [T_MESSAGE, id @ ..] if id.len() >= 8 => Some(u64::from_le_bytes(id[..8].try_into().ok()?)),
        _ => None,
    }
}

/// Whether `bytes` (one frame) is a flow-control frame
/// ([`Frame::Credit`], [`Frame::Want`], [`Frame::Grant`]), which the
/// network server handles itself rather than the [`crate::link`] state
/// machine, and only on the control stream.
pub fn is_flow(bytes: &[u8]) -> bool {
    matches!(bytes.first(), Some(&(T_CREDIT | T_WANT | T_GRANT)))
}

/// Whether `bytes` (one frame, without its length prefix) is a
/// [`Frame::Message`], which belongs on a message stream only, within its
/// credit.
pub fn is_message(bytes: &[u8]) -> bool {
    bytes.first() == Some(&T_MESSAGE)
}

impl Frame {
    /// Encodes the frame (without the stream's length prefix).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        self.encode_into(&mut out);
        out
    }

    /// Encodes the frame after a `u32` little-endian length prefix, as it
    /// goes on a stream, in one buffer.
    pub fn encode_with_len(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36);
        out.extend_from_slice(&[0; 4]);
        self.encode_into(&mut out);
        let n = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&n.to_le_bytes());
        out
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Lookup { req, name } => {
                out.push(T_LOOKUP);
                out.extend_from_slice(&req.to_le_bytes());
                put_bytes(out, name.as_bytes());
            }
            Frame::Found { req, cap } => {
                out.push(T_FOUND);
                out.extend_from_slice(&req.to_le_bytes());
                match cap {
                    None => out.push(0),
                    Some(c) => put_cap(out, *c),
                }
            }
            Frame::Message { target, op, body, parts, reply } => {
                out.reserve(body.len() + 32);
                out.push(T_MESSAGE);
                out.extend_from_slice(&target.to_le_bytes());
                out.extend_from_slice(&op.to_le_bytes());
                put_bytes(out, body);
                out.extend_from_slice(&(parts.len() as u16).to_le_bytes());
                for p in parts {
                    match p {
                        Part::Cap(c) => {
                            out.push(0);
                            put_cap(out, *c);
                        }
                        Part::Region(b) => {
                            out.push(1);
                            put_bytes(out, b);
                        }
                        Part::Remote { id, len } => {
                            out.push(2);
                            out.extend_from_slice(&id.to_le_bytes());
                            out.extend_from_slice(&len.to_le_bytes());
                        }
                    }
                }
                match reply {
                    None => out.push(0),
                    Some(c) => put_cap(out, *c),
                }
            }
            Frame::Release { id, count, uses } => {
                out.push(T_RELEASE);
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(&uses.to_le_bytes());
            }
            Frame::Dead { id } => {
                out.push(T_DEAD);
                out.extend_from_slice(&id.to_le_bytes());
            }
            Frame::RegionRelease { id } => {
                out.push(T_REGION_RELEASE);
                out.extend_from_slice(&id.to_le_bytes());
            }
            Frame::Fetch { region, offset, len } => {
                out.push(T_FETCH);
                out.extend_from_slice(&region.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            Frame::Credit { stream, bytes } => {
                out.push(T_CREDIT);
                out.extend_from_slice(&stream.to_le_bytes());
                out.extend_from_slice(&bytes.to_le_bytes());
            }
            Frame::Want { stream, target, bytes } => {
                out.push(T_WANT);
                out.extend_from_slice(&stream.to_le_bytes());
                out.extend_from_slice(&target.to_le_bytes());
                out.extend_from_slice(&bytes.to_le_bytes());
            }
            Frame::Grant { stream, bytes } => {
                out.push(T_GRANT);
                out.extend_from_slice(&stream.to_le_bytes());
                out.extend_from_slice(&bytes.to_le_bytes());
            }
        }
    }

    /// Decodes one frame, checking every length against the limits above.
    ///
    /// # Errors
    /// A [`DecodeError`] naming what is wrong; nothing is kept.
    pub fn decode(bytes: &[u8]) -> Result<Frame, DecodeError> {
        if bytes.len() > MAX_FRAME {
            return Err(DecodeError::TooLong("frame", bytes.len()));
        }
        let mut r = Reader { b: bytes };
        let frame = match r.u8()? {
            T_LOOKUP => {
                let req = r.u64()?;
                let name = r.bytes("name", MAX_NAME)?;
                let name = String::from_utf8(name.to_vec()).map_err(|_| DecodeError::BadName)?;
                Frame::Lookup { req, name }
            }
            T_FOUND => Frame::Found { req: r.u64()?, cap: r.opt_cap()? },
            T_MESSAGE => {
                let target = r.u64()?;
                let op = r.u32()?;
                let body = r.bytes("body", MAX_BODY)?.to_vec();
                let n = r.u16()? as usize;
                if n > MAX_PARTS {
                    return Err(DecodeError::TooLong("item count", n));
                }
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    parts.push(match r.u8()? {
                        0 => Part::Cap(r.cap()?),
                        1 => Part::Region(r.bytes("region", MAX_EAGER_REGION)?.to_vec()),
                        2 => {
                            let id = r.u64()?;
                            let len = r.u64()?;
                            if len == 0 || len > MAX_REMOTE_REGION {
                                return Err(DecodeError::TooLong("remote region", len as usize));
                            }
                            Part::Remote { id, len }
                        }
                        t => return Err(DecodeError::BadTag("item", t)),
                    });
                }
                let reply = r.opt_cap()?;
                Frame::Message { target, op, body, parts, reply }
            }
            T_RELEASE => Frame::Release { id: r.u64()?, count: r.u32()?, uses: r.u64()? },
            T_DEAD => Frame::Dead { id: r.u64()? },
            T_REGION_RELEASE => Frame::RegionRelease { id: r.u64()? },
            T_FETCH => Frame::Fetch { region: r.u64()?, offset: r.u64()?, len: r.u64()? },
            T_CREDIT => Frame::Credit { stream: r.u64()?, bytes: r.u64()? },
            T_WANT => Frame::Want { stream: r.u64()?, target: r.u64()?, bytes: r.u64()? },
            T_GRANT => Frame::Grant { stream: r.u64()?, bytes: r.u64()? },
            t => return Err(DecodeError::BadTag("frame", t)),
        };
        if !r.b.is_empty() {
            return Err(DecodeError::Trailing(r.b.len()));
        }
        Ok(frame)
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().map_err(|_| DecodeError::Truncated)?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| DecodeError::Truncated)?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| DecodeError::Truncated)?))
    }
    fn bytes(&mut self, what: &'static str, limit: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        if n > limit {
            return Err(DecodeError::TooLong(what, n));
        }
        self.take(n)
    }
    fn cap_tagged(&mut self, t: u8) -> Result<Cap, DecodeError> {
        let id = self.u64()?;
        match t {
            1 => Ok(Cap::Hosted(id)),
            2 => Ok(Cap::HostedOnce(id)),
            3 => Ok(Cap::Returned(id)),
            4 => Ok(Cap::DeadName),
            t => Err(DecodeError::BadTag("right", t)),
        }
    }
    fn cap(&mut self) -> Result<Cap, DecodeError> {
        let t = self.u8()?;
        self.cap_tagged(t)
    }
    fn opt_cap(&mut self) -> Result<Option<Cap>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            t => self.cap_tagged(t).map(Some),
        }
    }
}
