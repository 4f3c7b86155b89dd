//! The value encoding of typed interfaces: how each type is written into a
//! message's inline bytes and items, and read back with every check made
//! before a value exists (see `docs/interfaces.md`, "Wire encoding").
//!
//! Everything is little-endian. Scalars are their fixed-size bytes, `bool`
//! one byte (0 or 1), strings and lists a `u32` count then their contents;
//! an optional value a tag byte (0 absent, 1 present) then the value; a
//! record (an operation's arguments, a [`crate::record!`] struct) a sequence
//! of fields, each `u16` ordinal, `u32` length, bytes, so a reader skips
//! fields it does not know and fills optional fields a writer did not know
//! with `None`. Rights and regions travel as message items; the bytes hold
//! the item's index, and each item must be claimed by exactly one value.

use std::fmt;

use crate::rpc::SplitReply;
use crate::{Item, Message};
use serde_json::{json, Value};

/// Why bytes or items did not decode as the type the interface declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes end before the value does.
    Truncated {
        /// Bytes the value needs.
        need: usize,
        /// Bytes left.
        left: usize,
    },
    /// Bytes are left over after the value (or a field's declared length).
    Trailing(usize),
    /// A string is not UTF-8.
    BadUtf8,
    /// A `bool` byte other than 0 or 1.
    BadBool(u8),
    /// An optional value's tag other than 0 or 1.
    BadOptionTag(u8),
    /// An enumeration's tag this definition does not know.
    UnknownVariant {
        /// The enumeration.
        ty: &'static str,
        /// The tag received.
        tag: u32,
    },
    /// A required field (or argument) is missing.
    MissingField {
        /// The record, or the operation.
        record: &'static str,
        /// The field's ordinal.
        ordinal: u16,
    },
    /// A field appears twice.
    DuplicateField {
        /// The record, or the operation.
        record: &'static str,
        /// The field's ordinal.
        ordinal: u16,
    },
    /// A value refers to an item index the message does not have.
    NoSuchItem(u32),
    /// Two values refer to the same item.
    ItemReused(u32),
    /// An item is not of the kind the type declares.
    WrongItemKind {
        /// The item's index.
        index: u32,
        /// What the type declares.
        expected: &'static str,
    },
    /// A region item travels in another mode than the type declares.
    WrongRegionMode {
        /// The item's index.
        index: u32,
        /// What the type declares.
        expected: &'static str,
        /// What arrived.
        got: crate::region::Mode,
    },
    /// The message carries items no value claims.
    UnclaimedItems(usize),
    /// A count larger than the bytes left could hold.
    BadCount(u32),
    /// Records nested deeper than [`MAX_DEPTH`] (a recursive type cannot
    /// make a receiver run out of stack).
    TooDeep,
}

/// How deeply records may nest in one message.
pub const MAX_DEPTH: usize = 32;

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DecodeError::*;
        match self {
            Truncated { need, left } => write!(f, "truncated: a value needs {need} bytes, {left} are left"),
            Trailing(n) => write!(f, "{n} bytes left over after the value"),
            BadUtf8 => write!(f, "a string is not UTF-8"),
            BadBool(b) => write!(f, "a bool is {b}, not 0 or 1"),
            BadOptionTag(t) => write!(f, "an optional value's tag is {t}, not 0 or 1"),
            UnknownVariant { ty, tag } => write!(f, "{ty} has no variant {tag}"),
            MissingField { record, ordinal } => write!(f, "{record}: required field {ordinal} is missing"),
            DuplicateField { record, ordinal } => write!(f, "{record}: field {ordinal} appears twice"),
            NoSuchItem(i) => write!(f, "item {i} does not exist"),
            ItemReused(i) => write!(f, "item {i} is claimed twice"),
            WrongItemKind { index, expected } => write!(f, "item {index} is not a {expected}"),
            WrongRegionMode { index, expected, got } => write!(f, "item {index} is a {got:?} region, not {expected}"),
            UnclaimedItems(n) => write!(f, "{n} items are claimed by no value"),
            BadCount(n) => write!(f, "a count of {n} exceeds what the message holds"),
            TooDeep => write!(f, "records nested deeper than {MAX_DEPTH}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Writes values into a message's inline bytes and items.
///
/// A byte list is not copied when it is written: the encoder keeps the
/// list's own vector as the body's tail and copies it in only when
/// something is written after it. A request whose last argument is a byte
/// list therefore reaches the transport in two pieces, the framing and the
/// caller's vector ([`Encoder::parts`]), and goes into the RPC slot from
/// both with one copy ([`crate::rpc::Transport::call_parts`]).
#[derive(Debug, Default)]
pub struct Encoder {
    body: Vec<u8>,
    items: Vec<Item>,
    /// Bytes that follow `body`, still in the vector they were written
    /// from.
    tail: Vec<u8>,
}

impl Encoder {
    /// An empty encoder.
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// An empty encoder with room for `bytes` inline bytes.
    #[inline]
    pub fn with_capacity(bytes: usize) -> Encoder {
        Encoder { body: Vec::with_capacity(bytes), ..Encoder::default() }
    }

    /// An empty encoder that writes into `buf`'s allocation (its contents
    /// are discarded), so a reply can reuse its request's buffer.
    #[inline]
    pub fn reusing(mut buf: Vec<u8>, bytes: usize) -> Encoder {
        buf.clear();
        buf.reserve(bytes);
        Encoder { body: buf, ..Encoder::default() }
    }

    /// Appends raw bytes.
    #[inline]
    pub fn put(&mut self, bytes: &[u8]) {
        if !self.tail.is_empty() {
            self.flush_tail();
        }
        self.body.extend_from_slice(bytes);
    }

    /// Appends a byte list's bytes, keeping its vector as the tail instead
    /// of copying it (see [`Encoder`]).
    #[inline(always)]
    pub fn put_vec(&mut self, bytes: Vec<u8>) {
        if !self.tail.is_empty() {
            self.flush_tail();
        }
        self.tail = bytes;
    }

    /// Copies the tail into the body: something follows it.
    #[cold]
    fn flush_tail(&mut self) {
        self.body.extend_from_slice(&self.tail);
        self.tail.clear();
    }

    /// How many bytes are written so far.
    #[inline]
    fn len(&self) -> usize {
        self.body.len() + self.tail.len()
    }

    /// Appends a `u32`.
    #[inline]
    pub fn put_u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }

    /// Appends an item and writes its index.
    #[inline]
    pub fn put_item(&mut self, item: Item) {
        let index = self.items.len() as u32;
        self.items.push(item);
        self.put_u32(index);
    }

    /// Writes one field of a record: its ordinal, its length, its value.
    #[inline(always)]
    pub fn field<T: Wire>(&mut self, ordinal: u16, value: T) {
        self.put(&ordinal.to_le_bytes());
        // Written by `put`, so no tail follows it.
        let at = self.body.len();
        self.put_u32(0);
        value.encode(self);
        let len = (self.len() - at - 4) as u32;
        self.body[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Writes a nested record: its length, then what `fields` writes.
    pub fn record(&mut self, fields: impl FnOnce(&mut Encoder)) {
        self.put_u32(0);
        let at = self.body.len() - 4;
        fields(self);
        let len = (self.len() - at - 4) as u32;
        self.body[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// The message with operation id `op`, these bytes and these items.
    ///
    /// A byte list written last stays in its own vector when the bytes
    /// before it are few and that vector has room for them too (a reply
    /// that hands back its request's byte list): they are moved in front
    /// of it, so the message costs no allocation and no second copy of the
    /// list.
    #[inline]
    pub fn into_message(mut self, op: u32) -> Message {
        if !self.tail.is_empty() {
            let room = self.tail.capacity() - self.tail.len();
            if self.body.len() <= 64 && room >= self.body.len() {
                self.tail.splice(0..0, self.body.drain(..));
                return Message::from_parts(op, std::mem::take(&mut self.tail), self.items);
            }
            self.flush_tail();
        }
        Message::from_parts(op, self.body, self.items)
    }

    /// The bytes written, in two pieces that follow each other: the body
    /// and the byte list written last, if nothing followed it.
    #[inline]
    pub fn parts(&self) -> (&[u8], &[u8]) {
        (&self.body, &self.tail)
    }

    /// Empties the encoder for the next message, keeping its allocations.
    #[inline]
    pub fn clear(&mut self) {
        self.body.clear();
        self.items.clear();
        self.tail.clear();
    }

    /// Offers `buf`'s allocation (its contents are discarded) to an empty
    /// encoder: the body takes it if it has no allocation yet (a reply is
    /// then written into its request's buffer), else the tail does if it
    /// has none, and a transport that keeps the tail's allocation for its
    /// next receive ([`crate::rpc::RpcServer::reply_parts`]) gets it back.
    #[inline]
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if self.body.is_empty() && self.body.capacity() == 0 {
            self.body = buf;
        } else if self.tail.is_empty() && buf.capacity() > self.tail.capacity() {
            self.tail = buf;
        }
    }

    /// The body's and the tail's vectors, for a transport in this crate
    /// that sends them as they are and reuses their allocations.
    #[inline]
    pub(crate) fn pieces_mut(&mut self) -> (&mut Vec<u8>, &mut Vec<u8>) {
        (&mut self.body, &mut self.tail)
    }

    /// Whether any item (right, region, descriptor) was written.
    #[inline]
    pub fn has_items(&self) -> bool {
        !self.items.is_empty()
    }

    /// Takes the encoder apart: the body, the items and the tail
    /// ([`parts`](Self::parts)), for a caller that reuses their
    /// allocations.
    #[inline]
    pub fn into_parts(self) -> (Vec<u8>, Vec<Item>, Vec<u8>) {
        (self.body, self.items, self.tail)
    }
}

/// Reads values out of a received message, checking each.
#[derive(Debug)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
    depth: usize,
    items: Vec<Option<Item>>,
    /// The ordinal of the operation argument being read (0: none).
    arg: u16,
    /// A byte-list argument that ends the body, left in the body's buffer.
    claim: Option<TailClaim>,
}

/// A byte-list argument that runs to the end of a request's body: instead
/// of copying it out, the decoder notes where it lies, and the argument
/// takes the body's buffer once every check has passed (see
/// [`Wire::adopt`]), so a request whose last argument is bytes costs no
/// second allocation. Used by the generated server code.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailClaim {
    /// The argument's ordinal.
    pub field: u16,
    /// Where its bytes start in the body.
    pub start: usize,
    /// How many there are (they end the body).
    pub len: usize,
}

impl TailClaim {
    /// Cuts `body` down to the claimed bytes, in place.
    pub fn cut(&self, body: &mut Vec<u8>) {
        body.truncate(self.start + self.len);
        body.drain(..self.start);
    }
}

impl<'a> Decoder<'a> {
    /// A decoder over `body` and the message's `items`.
    #[inline]
    pub fn new(body: &'a [u8], items: Vec<Item>) -> Decoder<'a> {
        let items = if items.is_empty() { Vec::new() } else { items.into_iter().map(Some).collect() };
        Decoder { buf: body, pos: 0, end: body.len(), depth: 0, items, arg: 0, claim: None }
    }

    /// The byte-list argument left in the body, if one was (see
    /// [`TailClaim`]).
    #[doc(hidden)]
    pub fn take_claim(&mut self) -> Option<TailClaim> {
        self.claim.take()
    }

    /// Bytes left before the current limit.
    #[inline]
    pub fn left(&self) -> usize {
        self.end - self.pos
    }

    /// Takes `n` raw bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.left() {
            return Err(DecodeError::Truncated { need: n, left: self.left() });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Takes `N` raw bytes as an array.
    #[inline]
    pub fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Reads a `u32`.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take_array()?))
    }

    /// Reads a count of elements at least `min_size` bytes each, refusing
    /// one that the bytes left could not hold (so no huge allocation).
    #[inline]
    pub fn count(&mut self, min_size: usize) -> Result<usize, DecodeError> {
        let n = self.u32()?;
        let fits = if min_size == 0 {
            n as usize <= crate::message::MAX_INLINE
        } else {
            (n as usize).saturating_mul(min_size) <= self.left()
        };
        if fits {
            Ok(n as usize)
        } else {
            Err(DecodeError::BadCount(n))
        }
    }

    /// Reads an item index and takes that item.
    #[inline]
    pub fn item(&mut self) -> Result<(u32, Item), DecodeError> {
        let i = self.u32()?;
        match self.items.get_mut(i as usize) {
            None => Err(DecodeError::NoSuchItem(i)),
            Some(slot) => slot.take().map(|it| (i, it)).ok_or(DecodeError::ItemReused(i)),
        }
    }

    /// Decodes a `T` from exactly the next `len` bytes.
    #[inline]
    pub fn within<T>(&mut self, len: usize, f: impl FnOnce(&mut Decoder<'a>) -> Result<T, DecodeError>) -> Result<T, DecodeError> {
        if len > self.left() {
            return Err(DecodeError::Truncated { need: len, left: self.left() });
        }
        let outer = self.end;
        self.end = self.pos + len;
        let v = f(self)?;
        if self.pos != self.end {
            return Err(DecodeError::Trailing(self.end - self.pos));
        }
        self.end = outer;
        Ok(v)
    }

    /// Reads the next field header of a record that ends at the current
    /// limit: `None` at its end, else the ordinal and the field's length.
    #[inline]
    pub fn next_field(&mut self) -> Result<Option<(u16, usize)>, DecodeError> {
        if self.left() == 0 {
            return Ok(None);
        }
        let ord = u16::from_le_bytes(self.take_array()?);
        let len = self.u32()? as usize;
        if len > self.left() {
            return Err(DecodeError::Truncated { need: len, left: self.left() });
        }
        Ok(Some((ord, len)))
    }

    /// Skips `len` bytes (a field this definition does not know).
    #[inline]
    pub fn skip(&mut self, len: usize) -> Result<(), DecodeError> {
        self.take(len).map(|_| ())
    }

    /// Decodes a nested record (its `u32` length, then its fields) with `f`.
    pub fn record<T>(&mut self, f: impl FnOnce(&mut Decoder<'a>) -> Result<T, DecodeError>) -> Result<T, DecodeError> {
        let len = self.u32()? as usize;
        if self.depth >= MAX_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        self.depth += 1;
        let v = self.within(len, f);
        self.depth -= 1;
        v
    }

    /// Checks that every byte and every item was consumed.
    #[inline]
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.pos != self.end || self.end != self.buf.len() {
            return Err(DecodeError::Trailing(self.buf.len() - self.pos));
        }
        let left = self.items.iter().filter(|i| i.is_some()).count();
        if left > 0 {
            return Err(DecodeError::UnclaimedItems(left));
        }
        Ok(())
    }
}

/// A type that travels in typed messages: how it is written, how it is read
/// back and checked, and how it is described to other languages.
///
/// Implemented for the scalars, `bool`, `String`, `Vec<T>`, byte arrays,
/// `Option<T>`, `()`, ferry's rights and regions ([`crate::idl::types`]), and by
/// [`crate::record!`] and [`crate::enumeration!`] for user types.
pub trait Wire: Sized {
    /// Writes the value (moving any right or region into the message).
    fn encode(self, enc: &mut Encoder);
    /// Reads and checks a value.
    ///
    /// # Errors
    /// A [`DecodeError`] naming what did not match.
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError>;
    /// The type's language-neutral description.
    fn schema() -> Value;
    /// The value of a record field that the writer did not send: `None`
    /// (the field is required) except for optional types.
    fn absent() -> Option<Self> {
        None
    }
    /// Smallest encoded size, to refuse impossible counts early.
    fn min_size() -> usize {
        1
    }
    /// About how many bytes this value encodes to, so an encoder can
    /// allocate once (a guess is fine: it is only a capacity).
    fn size_hint(&self) -> usize {
        Self::min_size()
    }
    /// About how many bytes a list of these values encodes to (after its
    /// count); flat types answer without looking at each value.
    fn list_size_hint(list: &[Self]) -> usize {
        list.iter().map(Wire::size_hint).sum()
    }
    /// Where a reply whose body is this value alone is cut by
    /// [`crate::rpc::Transport::call_parts`] for [`Wire::decode_split`]:
    /// never (`usize::MAX`), except for a byte list, after its count.
    #[doc(hidden)]
    #[inline]
    fn split_at() -> usize {
        usize::MAX
    }
    /// Reads and checks a value that is a reply's whole body, taken apart
    /// at [`Wire::split_at`], with the same checks and errors as
    /// [`Wire::decode`] and [`Decoder::finish`]; a byte list takes the
    /// tail's vector instead of copying out of it. The buffers left in
    /// `reply` are reused for the next call.
    ///
    /// # Errors
    /// As [`Wire::decode`], and [`Decoder::finish`]'s errors.
    #[doc(hidden)]
    #[inline]
    fn decode_split(reply: &mut SplitReply) -> Result<Self, DecodeError> {
        decode_joined(reply)
    }
    /// [`Wire::split_at`] of a list of these values.
    #[doc(hidden)]
    #[inline]
    fn list_split_at() -> usize {
        usize::MAX
    }
    /// [`Wire::decode_split`] of a list of these values.
    ///
    /// # Errors
    /// As [`Wire::decode_split`].
    #[doc(hidden)]
    #[inline]
    fn decode_list_split(reply: &mut SplitReply) -> Result<Vec<Self>, DecodeError> {
        decode_joined(reply)
    }
    /// Writes a list of values (after its count); types with a flat
    /// encoding write all of it at once.
    fn encode_list(list: Vec<Self>, enc: &mut Encoder) {
        for v in list {
            v.encode(enc);
        }
    }
    /// Reads `n` values of a list.
    ///
    /// # Errors
    /// As [`Wire::decode`].
    fn decode_list(n: usize, dec: &mut Decoder<'_>) -> Result<Vec<Self>, DecodeError> {
        let mut v = Vec::with_capacity(n.min(dec.left()));
        for _ in 0..n {
            v.push(Self::decode(dec)?);
        }
        Ok(v)
    }
    /// Reads an operation's argument: as [`Wire::decode`], except that a
    /// byte list ending the body is left there ([`TailClaim`]) and filled
    /// in by [`Wire::adopt`].
    ///
    /// # Errors
    /// As [`Wire::decode`].
    #[doc(hidden)]
    #[inline]
    fn decode_arg(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Self::decode(dec)
    }
    /// [`Wire::decode_arg`] of a list of these values.
    ///
    /// # Errors
    /// As [`Wire::decode`].
    #[doc(hidden)]
    #[inline]
    fn decode_list_arg(dec: &mut Decoder<'_>) -> Result<Vec<Self>, DecodeError> {
        <Vec<Self>>::decode(dec)
    }
    /// Takes `body` (already cut to the claimed bytes) if this argument,
    /// ordinal `field`, is the one that claimed it.
    #[doc(hidden)]
    #[inline]
    fn adopt(&mut self, _field: u16, _claim: &TailClaim, _body: &mut Vec<u8>) {}
    /// [`Wire::adopt`] of a list of these values.
    #[doc(hidden)]
    #[inline]
    fn adopt_list(_list: &mut Vec<Self>, _field: u16, _claim: &TailClaim, _body: &mut Vec<u8>) {}
}

/// Decodes a value from a reply's body taken apart in two pieces,
/// joining them first if it was cut (the tail is then left empty).
#[inline]
pub(crate) fn decode_joined<T: Wire>(reply: &mut SplitReply) -> Result<T, DecodeError> {
    let items = std::mem::take(&mut reply.items);
    if !reply.tail.is_empty() {
        reply.head.append(&mut reply.tail);
    }
    decode_in(&reply.head, items)
}

macro_rules! scalar {
    ($($t:ty => $name:literal),*) => {$(
        impl Wire for $t {
            #[inline]
            fn encode(self, enc: &mut Encoder) {
                enc.put(&self.to_le_bytes());
            }
            #[inline]
            fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(dec.take_array()?))
            }
            fn schema() -> Value {
                json!($name)
            }
            fn min_size() -> usize {
                std::mem::size_of::<$t>()
            }
        }
    )*};
}

scalar!(u16 => "u16", u32 => "u32", u64 => "u64", i8 => "i8", i16 => "i16", i32 => "i32", i64 => "i64", f32 => "f32", f64 => "f64");

impl Wire for u8 {
    #[inline]
    fn encode(self, enc: &mut Encoder) {
        enc.put(&[self]);
    }
    #[inline]
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(dec.take(1)?[0])
    }
    fn schema() -> Value {
        json!("u8")
    }
    #[inline(always)]
    fn encode_list(list: Vec<u8>, enc: &mut Encoder) {
        enc.put_vec(list);
    }
    #[inline]
    fn decode_list(n: usize, dec: &mut Decoder<'_>) -> Result<Vec<u8>, DecodeError> {
        Ok(dec.take(n)?.to_vec())
    }
    #[inline]
    fn list_size_hint(list: &[u8]) -> usize {
        list.len()
    }
    /// A reply that is one byte list is cut after its count, so that its
    /// bytes arrive in a vector of their own.
    #[inline]
    fn list_split_at() -> usize {
        4
    }
    /// The tail becomes the list when the head is exactly its count and
    /// there are no items; anything else goes through the checking decoder.
    #[inline]
    fn decode_list_split(reply: &mut SplitReply) -> Result<Vec<u8>, DecodeError> {
        let h = &reply.head;
        if reply.items.is_empty() && h.len() == 4 && u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize == reply.tail.len() {
            return Ok(std::mem::take(&mut reply.tail));
        }
        decode_joined(reply)
    }
    /// A byte-list argument that runs to the end of the body is left in
    /// the body's buffer ([`TailClaim`]); the empty list returned here is
    /// replaced by [`Wire::adopt_list`] once the whole request is checked.
    #[inline]
    fn decode_list_arg(dec: &mut Decoder<'_>) -> Result<Vec<u8>, DecodeError> {
        let n = dec.count(1)?;
        if n > 0 && dec.arg != 0 && dec.end == dec.buf.len() && dec.pos + n == dec.end {
            dec.claim = Some(TailClaim { field: dec.arg, start: dec.pos, len: n });
            dec.pos += n;
            return Ok(Vec::new());
        }
        Self::decode_list(n, dec)
    }
    #[inline]
    fn adopt_list(list: &mut Vec<u8>, field: u16, claim: &TailClaim, body: &mut Vec<u8>) {
        if claim.field == field && list.is_empty() && body.len() == claim.len {
            *list = std::mem::take(body);
        }
    }
}

impl Wire for bool {
    fn encode(self, enc: &mut Encoder) {
        enc.put(&[u8::from(self)]);
    }
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        match dec.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(DecodeError::BadBool(b)),
        }
    }
    fn schema() -> Value {
        json!("bool")
    }
}

impl Wire for () {
    fn encode(self, _: &mut Encoder) {}
    fn decode(_: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(())
    }
    fn schema() -> Value {
        json!("unit")
    }
    fn min_size() -> usize {
        0
    }
}

impl Wire for String {
    fn encode(self, enc: &mut Encoder) {
        enc.put_u32(self.len() as u32);
        enc.put(self.as_bytes());
    }
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let n = dec.count(1)?;
        let b = dec.take(n)?;
        std::str::from_utf8(b).map(str::to_owned).map_err(|_| DecodeError::BadUtf8)
    }
    fn schema() -> Value {
        json!("string")
    }
    fn min_size() -> usize {
        4
    }
    fn size_hint(&self) -> usize {
        4 + self.len()
    }
}

impl<T: Wire> Wire for Vec<T> {
    #[inline(always)]
    fn encode(self, enc: &mut Encoder) {
        enc.put_u32(self.len() as u32);
        T::encode_list(self, enc);
    }
    #[inline]
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let n = dec.count(T::min_size())?;
        T::decode_list(n, dec)
    }
    fn size_hint(&self) -> usize {
        4 + T::list_size_hint(self)
    }
    #[inline]
    fn split_at() -> usize {
        T::list_split_at()
    }
    #[inline]
    fn decode_split(reply: &mut SplitReply) -> Result<Self, DecodeError> {
        T::decode_list_split(reply)
    }
    #[inline]
    fn decode_arg(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        T::decode_list_arg(dec)
    }
    #[inline]
    fn adopt(&mut self, field: u16, claim: &TailClaim, body: &mut Vec<u8>) {
        T::adopt_list(self, field, claim, body);
    }
    fn schema() -> Value {
        let inner = T::schema();
        if inner == json!("u8") {
            json!("bytes")
        } else {
            json!({ "list": inner })
        }
    }
    fn min_size() -> usize {
        4
    }
}

impl<const N: usize> Wire for [u8; N] {
    #[inline]
    fn encode(self, enc: &mut Encoder) {
        enc.put(&self);
    }
    #[inline]
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        dec.take_array()
    }
    fn schema() -> Value {
        json!({ "array": "u8", "len": N })
    }
    fn min_size() -> usize {
        N
    }
}

impl<T: Wire> Wire for Option<T> {
    fn encode(self, enc: &mut Encoder) {
        match self {
            None => enc.put(&[0]),
            Some(v) => {
                enc.put(&[1]);
                v.encode(enc);
            }
        }
    }
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        match dec.take(1)?[0] {
            0 => Ok(None),
            1 => T::decode(dec).map(Some),
            t => Err(DecodeError::BadOptionTag(t)),
        }
    }
    fn schema() -> Value {
        json!({ "optional": T::schema() })
    }
    fn absent() -> Option<Self> {
        Some(None)
    }
    fn size_hint(&self) -> usize {
        1 + self.as_ref().map_or(0, Wire::size_hint)
    }
}

/// Reads a `T` that must fill `body` and claim every item exactly.
fn decode_in<T: Wire>(body: &[u8], items: Vec<Item>) -> Result<T, DecodeError> {
    let mut dec = Decoder::new(body, items);
    let v = T::decode(&mut dec)?;
    dec.finish()?;
    Ok(v)
}

/// Decodes one record field's value from exactly its `len` bytes.
///
/// # Errors
/// As [`Wire::decode`], and [`DecodeError::DuplicateField`] when the field
/// was already read.
#[doc(hidden)]
pub fn field_value<T: Wire>(
    dec: &mut Decoder<'_>,
    slot: &mut Option<T>,
    len: usize,
    record: &'static str,
    ordinal: u16,
) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(DecodeError::DuplicateField { record, ordinal });
    }
    *slot = Some(dec.within(len, T::decode)?);
    Ok(())
}

/// Reads an operation's argument `ordinal` into `slot` (see
/// [`Wire::decode_arg`]).
///
/// # Errors
/// [`DecodeError::DuplicateField`], or the value's error.
#[doc(hidden)]
#[inline]
pub fn field_arg<T: Wire>(dec: &mut Decoder<'_>, slot: &mut Option<T>, len: usize, op: &'static str, ordinal: u16) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(DecodeError::DuplicateField { record: op, ordinal });
    }
    dec.arg = ordinal;
    let v = dec.within(len, T::decode_arg);
    dec.arg = 0;
    *slot = Some(v?);
    Ok(())
}

/// The value of a field after a record is read: what arrived, else the
/// type's [`Wire::absent`] value, else [`DecodeError::MissingField`].
///
/// # Errors
/// [`DecodeError::MissingField`] for a required field that did not arrive.
#[doc(hidden)]
pub fn field_or_absent<T: Wire>(slot: Option<T>, record: &'static str, ordinal: u16) -> Result<T, DecodeError> {
    match slot {
        Some(v) => Ok(v),
        None => T::absent().ok_or(DecodeError::MissingField { record, ordinal }),
    }
}

/// Whether every operation ordinal in `ords` is below [`crate::idl::ANSWER`]
/// (checked at compile time by the interface macro): ids with that bit
/// set are answers.
#[doc(hidden)]
pub const fn below_answers(ords: &[u32]) -> bool {
    let mut i = 0;
    while i < ords.len() {
        if crate::idl::is_answer(ords[i]) {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether every ordinal in `ords` is non-zero and distinct (checked at
/// compile time by the macros).
#[doc(hidden)]
pub const fn ordinals_ok(ords: &[u32]) -> bool {
    let mut i = 0;
    while i < ords.len() {
        if ords[i] == 0 {
            return false;
        }
        let mut j = i + 1;
        while j < ords.len() {
            if ords[i] == ords[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// The text of doc-comment lines, as the description carries it: each
/// line without the space after `///`, joined by newlines.
#[doc(hidden)]
pub fn doc_text(lines: &[&str]) -> String {
    let lines: Vec<&str> = lines.iter().map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end()).collect();
    lines.join("\n").trim().to_owned()
}
