//! Messages: a header (operation id, optional reply right), inline bytes and
//! typed items (rights and out-of-line regions), sent by value.
//!
//! Sending lowers a [`Message`] to wire bytes plus a descriptor list; receiving
//! goes the other way in two phases, following the rule *validate first, then
//! act*: [`crate::wire::parse`] and the descriptor checks here examine the
//! whole message, and only when all of it is sound are descriptors turned
//! into rights and regions, a step that cannot fail. A rejected message's
//! descriptors are closed when the error is returned.

use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::{SendError, SendFailed, WireError};
use crate::counters;
use crate::port::{ReceiveRight, SendOnceRight, SendRight};
use crate::region::{self, RegionItem};
use crate::sys::socket::{self, Cred, Datagram};
use crate::wire::{self, ItemDesc};

pub use crate::wire::{MAX_FDS, MAX_INLINE, MAX_ITEMS};

/// Who sent a message, as the kernel recorded it at send time (never taken
/// from the message itself).
pub type Credentials = Cred;

/// A typed item carried by a message.
#[derive(Debug)]
pub enum Item {
    /// A send right, moved to the receiver (clone it first to keep a copy).
    Send(SendRight),
    /// A send-once right, moved to the receiver.
    SendOnce(SendOnceRight),
    /// A port's receive right, moved to the receiver with every send-once
    /// right still outstanding on it.
    Receive(ReceiveRight),
    /// An out-of-line memory region (see [`crate::region`]); a received one
    /// has been validated (seals, size) before the message was delivered.
    Region(RegionItem),
    /// A descriptor of the memory-object protocol (a userfaultfd handed to a
    /// pager, or a pager's page cache handed to a client); see
    /// [`crate::pager`].
    Pager(crate::pager::PagerFd),
}

impl From<RegionItem> for Item {
    fn from(r: RegionItem) -> Item {
        Item::Region(r)
    }
}

impl From<SendRight> for Item {
    fn from(r: SendRight) -> Item {
        Item::Send(r)
    }
}
impl From<SendOnceRight> for Item {
    fn from(r: SendOnceRight) -> Item {
        Item::SendOnce(r)
    }
}
impl From<ReceiveRight> for Item {
    fn from(r: ReceiveRight) -> Item {
        Item::Receive(r)
    }
}

/// The right a reply should be sent through.
#[derive(Debug)]
pub enum Reply {
    /// A send right (the receiver may reply many times, or keep it).
    Send(SendRight),
    /// A send-once right (exactly one reply; the usual case).
    SendOnce(SendOnceRight),
}

impl Reply {
    /// Sends `msg` through this reply right, consuming it.
    ///
    /// # Errors
    /// As [`SendRight::send`]; the message and this reply right come back in
    /// the [`SendFailed`].
    pub fn send(self, msg: Message, timeout: crate::Timeout) -> Result<(), SendFailed<Reply>> {
        match self {
            Reply::Send(r) => r.send(msg, timeout).map_err(|f| f.map_right(|()| Reply::Send(r))),
            Reply::SendOnce(r) => r.send(msg, timeout).map_err(|f| f.map_right(Reply::SendOnce)),
        }
    }
}

impl From<SendRight> for Reply {
    fn from(r: SendRight) -> Reply {
        Reply::Send(r)
    }
}
impl From<SendOnceRight> for Reply {
    fn from(r: SendOnceRight) -> Reply {
        Reply::SendOnce(r)
    }
}

/// A message: build it, send it, receive it.
///
/// ```
/// use ferry::{Message, Timeout};
/// let (mut server, to_server) = ferry::port().unwrap();
/// let (mut client, _keep) = ferry::port().unwrap();
/// let reply = client.make_send_once().unwrap();
/// to_server.send(Message::new(1).with_body(*b"ping").with_reply(reply), Timeout::Infinite).unwrap();
/// let mut req = server.recv(Timeout::Infinite).unwrap();
/// req.take_reply().unwrap().send(Message::new(2).with_body(*b"pong"), Timeout::Infinite).unwrap();
/// assert_eq!(client.recv(Timeout::Infinite).unwrap().body(), b"pong");
/// ```
#[derive(Debug, Default)]
pub struct Message {
    op: u32,
    body: Vec<u8>,
    items: Vec<Item>,
    reply: Option<Reply>,
    sender: Option<Credentials>,
    via_send_once: bool,
}

impl Message {
    /// An empty message with operation id `op`.
    pub fn new(op: u32) -> Message {
        Message { op, ..Default::default() }
    }

    /// Sets the inline bytes (at most [`MAX_INLINE`]; they are copied into
    /// the kernel's queue and out again).
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Message {
        self.body = body.into();
        self
    }

    /// Appends an item.
    pub fn with_item(mut self, item: impl Into<Item>) -> Message {
        self.items.push(item.into());
        self
    }

    /// Sets the right the receiver should reply through.
    pub fn with_reply(mut self, reply: impl Into<Reply>) -> Message {
        self.reply = Some(reply.into());
        self
    }

    /// The operation id.
    pub fn op(&self) -> u32 {
        self.op
    }

    /// Sets the operation id, keeping everything else (a received message
    /// keeps its [`sender`](Self::sender), as it does when its body is
    /// changed).
    pub fn set_op(&mut self, op: u32) {
        self.op = op;
    }

    /// The inline bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The inline bytes, mutably.
    pub fn body_mut(&mut self) -> &mut Vec<u8> {
        &mut self.body
    }

    /// The items, in order.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// Takes the items out of the message.
    pub fn take_items(&mut self) -> Vec<Item> {
        std::mem::take(&mut self.items)
    }

    /// Takes the reply right, if the sender supplied one.
    pub fn take_reply(&mut self) -> Option<Reply> {
        self.reply.take()
    }

    /// Whether the message carries a reply right.
    pub fn has_reply(&self) -> bool {
        self.reply.is_some()
    }

    /// A message of these parts, with no reply right (what an encoder
    /// built).
    #[inline]
    pub(crate) fn from_parts(op: u32, body: Vec<u8>, items: Vec<Item>) -> Message {
        Message { op, body, items, reply: None, sender: None, via_send_once: false }
    }

    /// Who sent this message (pid, uid, gid), for a received message. For
    /// a request an [`RpcServer`](crate::rpc::RpcServer) returns, its
    /// client's, as the kernel reported them when the connection was made
    /// (a call through the shared slot carries none of its own).
    pub fn sender(&self) -> Option<Credentials> {
        self.sender
    }

    /// The message with `sender` as its sender (an RPC server's request
    /// gets its connection's).
    pub(crate) fn with_sender(mut self, sender: Option<Credentials>) -> Message {
        self.sender = sender;
        self
    }

    /// Whether the message arrived through a send-once right.
    pub fn via_send_once(&self) -> bool {
        self.via_send_once
    }

    /// Checks the limits and produces the wire bytes and the items whose
    /// descriptors travel beside them. A message that breaks a limit comes
    /// back untouched beside the error. (Senders use
    /// [`lower_prefixed`](Self::lower_prefixed); the fuzz targets this.)
    #[cfg(feature = "fuzzing")]
    pub(crate) fn lower(self) -> Result<Lowered, (SendError, Message)> {
        self.lower_prefixed(&[])
    }

    /// [`lower`](Self::lower) with `prefix` on the wire before the body,
    /// as inline bytes of the message (the framing of an RPC request or
    /// reply): the body is not copied to make room for it.
    pub(crate) fn lower_prefixed(self, prefix: &[u8]) -> Result<Lowered, (SendError, Message)> {
        let nitems = self.items.len() + usize::from(self.reply.is_some());
        if nitems > MAX_ITEMS {
            return Err((SendError::TooLarge(format!("{nitems} items, the limit is {MAX_ITEMS}")), self));
        }
        let inline = prefix.len() + self.body.len();
        if inline > MAX_INLINE {
            let why = format!("{inline} inline bytes, the limit is {MAX_INLINE}; send large data out of line");
            return Err((SendError::TooLarge(why), self));
        }
        let reply_fds = usize::from(self.reply.is_some());
        let nfds: usize = reply_fds + self.items.iter().map(|i| describe(i).fds as usize).sum::<usize>();
        if nfds > MAX_FDS {
            return Err((SendError::TooLarge(format!("{nfds} descriptors, the limit is {MAX_FDS}")), self));
        }
        let Message { op, body, mut items, reply, .. } = self;
        let mut flags = 0u8;
        if let Some(r) = reply {
            flags |= wire::FLAG_REPLY;
            items.insert(
                0,
                match r {
                    Reply::Send(s) => Item::Send(s),
                    Reply::SendOnce(s) => Item::SendOnce(s),
                },
            );
        }
        let descs: Vec<ItemDesc> = items.iter().map(describe).collect();
        let gather = body.len() > GATHER_FROM;
        let mut head = Vec::with_capacity(wire::HEADER_LEN + descs.len() * wire::ITEM_LEN + prefix.len() + if gather { 0 } else { body.len() });
        wire::encode_head(&mut head, op, flags, &descs, inline);
        head.extend_from_slice(prefix);
        if !gather {
            head.extend_from_slice(&body);
        }
        Ok(Lowered { head, gather, inline, items, op, flags, body })
    }

    /// Builds a received message from a datagram read into `buf`, after
    /// checking all of it. `port` is the identity of the receiving port's
    /// socket, to refuse its own receive right.
    pub(crate) fn from_datagram(buf: &[u8], dg: Datagram, port: (u64, u64), via_send_once: bool) -> Result<Message, WireError> {
        if dg.truncated {
            return Err(WireError::Oversized);
        }
        if dg.fds_truncated {
            return Err(WireError::FdsTruncated);
        }
        let bytes = &buf[..dg.len];
        let parsed = wire::parse(bytes, dg.fds.len())?;
        // Check every descriptor before converting any.
        let mut at = 0;
        let mut idents = Vec::with_capacity(parsed.items.len());
        for (i, d) in parsed.items.iter().enumerate() {
            let fds = &dg.fds[at..at + d.fds as usize];
            at += d.fds as usize;
            match d.kind {
                wire::KIND_SEND | wire::KIND_SEND_ONCE | wire::KIND_RECEIVE => {
                    if !fds.iter().all(|f| socket::is_unix_seqpacket(f.as_fd())) {
                        return Err(WireError::NotAPort { item: i });
                    }
                    let ident = if d.kind == wire::KIND_RECEIVE {
                        // The port's own socket may hide among the send-once
                        // sockets of a receive right too.
                        let ids = fds
                            .iter()
                            .map(|f| socket::identity(f.as_fd()))
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(|_| WireError::NotAPort { item: i })?;
                        if ids.contains(&port) {
                            return Err(WireError::ReceiveRightToSelf);
                        }
                        ids[0]
                    } else {
                        (0, 0)
                    };
                    idents.push(ident);
                }
                wire::KIND_PAGER => {
                    crate::pager::PagerFd::check(d, fds[0].as_fd(), i)?;
                    idents.push((0, 0));
                }
                wire::KIND_REGION => {
                    region::check(i, d, fds)?;
                    idents.push((0, 0));
                }
                _ => unreachable!("wire::parse rejects unknown kinds"),
            }
        }
        // Act: nothing below can fail.
        let mut fds = dg.fds.into_iter();
        let mut items = Vec::with_capacity(parsed.items.len());
        for (d, ident) in parsed.items.iter().zip(idents) {
            let mine: Vec<OwnedFd> = fds.by_ref().take(d.fds as usize).collect();
            items.push(raise(d, mine, ident));
        }
        let reply = if parsed.flags & wire::FLAG_REPLY != 0 {
            match items.remove(0) {
                Item::Send(s) => Some(Reply::Send(s)),
                Item::SendOnce(s) => Some(Reply::SendOnce(s)),
                Item::Receive(_) | Item::Region(_) | Item::Pager(_) => unreachable!("wire::parse checks the reply item's kind"),
            }
        } else {
            None
        };
        counters::add(counters::MESSAGES_RECEIVED, 1);
        counters::add(counters::BYTES_INLINE_RECEIVED, parsed.inline.len() as u64);
        Ok(Message { op: parsed.op, body: bytes[parsed.inline].to_vec(), items, reply, sender: dg.cred, via_send_once })
    }
}

fn describe(item: &Item) -> ItemDesc {
    match item {
        Item::Send(_) => ItemDesc { kind: wire::KIND_SEND, fds: 1, ..Default::default() },
        Item::SendOnce(_) => ItemDesc { kind: wire::KIND_SEND_ONCE, fds: 1, ..Default::default() },
        Item::Receive(r) => ItemDesc { kind: wire::KIND_RECEIVE, fds: 1 + r.send_once_outstanding() as u16, ..Default::default() },
        Item::Region(r) => r.describe(),
        Item::Pager(p) => p.describe(),
    }
}

/// Turns checked descriptors into an item. Cannot fail.
fn raise(d: &ItemDesc, mut fds: Vec<OwnedFd>, ident: (u64, u64)) -> Item {
    match d.kind {
        wire::KIND_SEND => Item::Send(SendRight::from_fd(fds.remove(0))),
        wire::KIND_SEND_ONCE => Item::SendOnce(SendOnceRight::from_fd(fds.remove(0))),
        wire::KIND_RECEIVE => {
            let main = fds.remove(0);
            Item::Receive(ReceiveRight::from_checked(main, fds, ident))
        }
        wire::KIND_REGION => Item::Region(region::raise(d, fds)),
        wire::KIND_PAGER => Item::Pager(crate::pager::PagerFd::raise(d, fds.remove(0))),
        _ => unreachable!("checked before raising"),
    }
}

/// Bodies longer than this are sent from where they are, beside the
/// message's header (`sendmsg(2)` of two buffers), instead of copied after
/// the header into one buffer for `send(2)`: for a long body the copy, and
/// the allocation it needs, cost more than the longer system call (a port
/// message of 65000 bytes allocated and copied 65 KiB for every send, and
/// with the receiver's copy the C library returned memory to the kernel
/// and faulted it back in on every message).
const GATHER_FROM: usize = 2048;

/// A message ready to go: its bytes, and the items that own the descriptors
/// listed beside them.
pub(crate) struct Lowered {
    /// The header and item descriptors, then the inline bytes: the
    /// prefix, and the body too unless `gather`.
    head: Vec<u8>,
    /// The body travels from `body`, after `head`.
    gather: bool,
    /// Inline bytes on the wire: the prefix and the body.
    inline: usize,
    items: Vec<Item>,
    op: u32,
    flags: u8,
    body: Vec<u8>,
}

impl Lowered {
    /// The message's bytes on the wire, in order: one buffer, or the head
    /// and the body.
    pub(crate) fn parts(&self) -> ([IoSlice<'_>; 2], usize) {
        if self.gather {
            ([IoSlice::new(&self.head), IoSlice::new(&self.body)], 2)
        } else {
            ([IoSlice::new(&self.head), IoSlice::new(&[])], 1)
        }
    }

    /// The message's bytes on the wire, joined.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut v = self.head.clone();
        if self.gather {
            v.extend_from_slice(&self.body);
        }
        v
    }

    /// The descriptors to pass, in item order.
    pub(crate) fn fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut v = Vec::new();
        for it in &self.items {
            match it {
                Item::Send(s) => v.push(s.sock.as_fd()),
                Item::SendOnce(s) => v.push(s.sock.as_fd()),
                Item::Receive(r) => v.extend(r.sources_all()),
                Item::Region(r) => v.extend(r.fds()),
                Item::Pager(p) => v.push(p.as_fd()),
            }
        }
        v
    }

    /// The kernel has taken its references: release ours.
    pub(crate) fn sent(self) {
        counters::add(counters::MESSAGES_SENT, 1);
        counters::add(counters::BYTES_INLINE_SENT, self.inline as u64);
        for it in self.items {
            if let Item::Region(r) = it {
                r.sent();
            }
        }
    }

    /// The send failed and nothing was queued: the message as it was built,
    /// with its reply right back in place.
    pub(crate) fn unlower(self) -> Message {
        let Lowered { mut items, op, flags, body, .. } = self;
        let reply = if flags & wire::FLAG_REPLY != 0 {
            match items.remove(0) {
                Item::Send(s) => Some(Reply::Send(s)),
                Item::SendOnce(s) => Some(Reply::SendOnce(s)),
                Item::Receive(_) | Item::Region(_) | Item::Pager(_) => unreachable!("lower puts the reply right first"),
            }
        } else {
            None
        };
        Message { op, body, items, reply, sender: None, via_send_once: false }
    }
}
