//! Typed interfaces: define a service once with
//! [`interface!`](crate::interface) (and its types with
//! [`record!`](crate::record) and [`enumeration!`](crate::enumeration)),
//! and get a typed client proxy, a server trait with its dispatcher, and a
//! language-neutral JSON description of the interface for stubs in other
//! languages. The design and the rules of evolution are in
//! `docs/interfaces.md`.
//!
//! ```
//! use ferry::idl::{ByValue, Context};
//! use ferry::{enumeration, interface, record};
//!
//! enumeration! {
//!     /// Why a key-value operation failed.
//!     #[derive(Debug, PartialEq)]
//!     pub enum KvError {
//!         /// No value under that key.
//!         1 => NotFound,
//!     }
//! }
//!
//! interface! {
//!     /// A key-value store whose values are by-value regions.
//!     pub mod kv: "example.kv", version 1, compatible 1 {
//!         /// Stores `value` under `key`.
//!         fn put(key: String, value: ByValue) = 1;
//!         /// The value under `key`.
//!         fn get(key: String) -> ByValue | KvError = 2;
//!     }
//! }
//!
//! struct Store(std::collections::HashMap<String, ferry::MappedRegion>);
//! impl kv::Service for Store {
//!     fn put(&mut self, _: &Context, key: String, value: ByValue) {
//!         let map = value.0.map(ferry::MapOptions::lazy()).unwrap();
//!         self.0.insert(key, map);
//!     }
//!     fn get(&mut self, _: &Context, key: String) -> Result<ByValue, KvError> {
//!         let v = self.0.get(&key).ok_or(KvError::NotFound)?;
//!         Ok(ByValue(ferry::RegionItem::copied_from(v.as_slice()).unwrap()))
//!     }
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (mut rx, tx) = ferry::port()?;
//! let server = std::thread::spawn(move || {
//!     ferry::idl::serve_port(&mut kv::Server(Store(Default::default())), &mut rx)
//! });
//! let mut client = kv::Client::over_port(tx)?;
//! client.put("greeting".into(), ByValue(ferry::RegionItem::copied_from(b"hello")?))?;
//! let v = client.get("greeting".into())?;
//! assert_eq!(v.0.copy_out(1 << 20)?, b"hello");
//! assert!(matches!(client.get("nothing".into()), Err(ferry::idl::CallError::App(KvError::NotFound))));
//! drop(client);
//! server.join().unwrap()?;
//! Ok(())
//! }
//! ```
//!
//! Definitions belong at module level (not inside a function body): the
//! generated module reaches the types it names through `use super::*`.

pub mod asynchronous;
pub mod channel;
pub mod codec;
mod macros;
pub mod serve;
pub mod types;

use std::fmt;

use crate::rpc::RpcError;
use crate::{Credentials, Message, RecvError, SendError};
use serde_json::{json, Value};

pub use asynchronous::AsyncChannel;
#[cfg(feature = "tokio")]
pub use asynchronous::{serve_port_async, serve_rpc_async, AsyncPortChannel, AsyncRpcChannel};
pub use channel::{Channel, PortChannel, RpcChannel};
pub use codec::{DecodeError, Decoder, Encoder, Wire};
pub use serve::{serve_port, serve_port_once, serve_rpc, Dispatch, Route};
pub use types::{ByValue, Lent, ReceiveOf, SendOnceTo, SendTo, Shared};

#[doc(hidden)]
pub use serde_json as __json;

/// What every generated interface tells about itself.
pub trait Interface {
    /// The interface's name, checked at connect.
    const NAME: &'static str;
    /// The version this build speaks.
    const VERSION: u32;
    /// The oldest peer version this build still talks to.
    const COMPATIBLE: u32;
    /// The language-neutral description: operations with their ordinals,
    /// argument and result types, and documentation.
    fn describe() -> Value;
}

/// Operation id of the version check a client sends at connect. Interface
/// operations use ordinals from 1, below [`ANSWER`].
pub const OP_HELLO: u32 = 0;
/// The bit of an operation id that marks an answer. Every reply carries it
/// and no request may: a server drops a message whose id has it without
/// running or answering anything ([`is_answer`]), so an answer that a
/// client sent on to another server (by naming that server's port as its
/// reply right) can never be taken there as a request of whoever sent
/// the answer.
pub const ANSWER: u32 = 1 << 31;
/// Reply operation id: the operation succeeded; the body is its result.
pub const REPLY_OK: u32 = ANSWER;
/// Reply operation id: the operation failed; the body is its typed error.
pub const REPLY_ERR: u32 = ANSWER | 1;
/// Reply operation id: the server refused the request before running it;
/// the body is a [`Fault`].
pub const REPLY_FAULT: u32 = ANSWER | 2;

/// Whether operation id `op` is an answer's ([`ANSWER`]): never a request.
#[inline]
pub const fn is_answer(op: u32) -> bool {
    op & ANSWER != 0
}

static ANSWERS_DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static ANSWER_SAID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many messages the servers of this process dropped because they
/// were answers ([`is_answer`]) arriving where requests belong.
pub fn answers_dropped() -> u64 {
    ANSWERS_DROPPED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts an answer that reached `server` as if it were a request, and says
/// so on standard error at most once a minute. The message is dropped by
/// the caller, unanswered: an answer to an answer could go back and forth
/// between two servers.
#[doc(hidden)]
#[cold]
pub fn drop_answer(server: &str, msg: &Message) {
    use std::sync::atomic::Ordering::Relaxed;
    let n = ANSWERS_DROPPED.fetch_add(1, Relaxed) + 1;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let last = ANSWER_SAID.load(Relaxed);
    if (last == 0 || now >= last + 60) && ANSWER_SAID.compare_exchange(last, now.max(1), Relaxed, Relaxed).is_ok() {
        let from = msg.sender().map_or_else(|| "an unknown sender".to_owned(), |c| format!("uid {} (pid {})", c.uid, c.pid));
        eprintln!(
            "ferry: {server}: dropped an answer (operation id {:#x}) from {from} that arrived as a request; {n} so far (said at most once a minute)",
            msg.op()
        );
    }
}

/// What the server says about the request it sent to the caller as
/// [`REPLY_FAULT`]: the implementation did not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The server's interface has no operation with this ordinal (an older
    /// server, or a wrong peer).
    UnknownOperation(u32),
    /// The request did not decode as the operation's arguments.
    BadRequest(String),
    /// The version check at connect failed on the server's side.
    Incompatible(String),
    /// The server could not send its answer (too large for a message); the
    /// operation did run.
    ReplyTooLarge(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::UnknownOperation(op) => write!(f, "the server has no operation {op}"),
            Fault::BadRequest(why) => write!(f, "the server refused the request: {why}"),
            Fault::Incompatible(why) => write!(f, "the server refused the connection: {why}"),
            Fault::ReplyTooLarge(why) => write!(f, "the server's reply could not be sent: {why}"),
        }
    }
}

impl Wire for Fault {
    fn encode(self, enc: &mut Encoder) {
        let (code, text) = match self {
            Fault::UnknownOperation(op) => (1u32, op.to_string()),
            Fault::BadRequest(s) => (2, s),
            Fault::Incompatible(s) => (3, s),
            Fault::ReplyTooLarge(s) => (4, s),
        };
        code.encode(enc);
        text.encode(enc);
    }
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let code = u32::decode(dec)?;
        let text = String::decode(dec)?;
        Ok(match code {
            1 => Fault::UnknownOperation(text.parse().map_err(|_| DecodeError::BadUtf8)?),
            2 => Fault::BadRequest(text),
            3 => Fault::Incompatible(text),
            4 => Fault::ReplyTooLarge(text),
            tag => return Err(DecodeError::UnknownVariant { ty: "Fault", tag }),
        })
    }
    fn schema() -> Value {
        json!({ "fault": null })
    }
}

/// Why a typed call failed (apart from the operation's own typed error).
#[derive(Debug)]
pub enum IdlError {
    /// Sending the request failed.
    Send(SendError),
    /// Receiving the reply failed.
    Recv(RecvError),
    /// The RPC connection failed.
    Rpc(RpcError),
    /// The server destroyed the reply right without answering.
    NoReply,
    /// The server refused the request before running it.
    Fault(Fault),
    /// The reply did not decode as the operation's result.
    BadReply(DecodeError),
    /// The reply's operation id is none of [`REPLY_OK`], [`REPLY_ERR`],
    /// [`REPLY_FAULT`].
    UnexpectedReply(u32),
    /// The peer serves another interface.
    WrongInterface {
        /// The interface this client speaks.
        expected: &'static str,
        /// The one the server named.
        got: String,
    },
    /// The server's version is older than this build still talks to.
    Incompatible {
        /// The server's version.
        server: u32,
        /// The oldest version this client accepts.
        oldest: u32,
    },
}

impl fmt::Display for IdlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdlError::Send(e) => write!(f, "sending the request failed: {e}"),
            IdlError::Recv(e) => write!(f, "receiving the reply failed: {e}"),
            IdlError::Rpc(e) => write!(f, "the call failed: {e}"),
            IdlError::NoReply => write!(f, "the server dropped the reply right without answering"),
            IdlError::Fault(x) => write!(f, "{x}"),
            IdlError::BadReply(e) => write!(f, "the server's reply does not match the interface: {e}"),
            IdlError::UnexpectedReply(op) if *op <= 2 => write!(
                f,
                "the server answers with reply code {op} of the typed protocol before answers were marked: it is too old for this client (upgrade it)"
            ),
            IdlError::UnexpectedReply(op) => write!(f, "the server's reply has operation id {op:#x}, not a reply code"),
            IdlError::WrongInterface { expected, got } => write!(f, "the server speaks {got:?}, not {expected:?}"),
            IdlError::Incompatible { server, oldest } => {
                write!(f, "the server speaks version {server}; this client needs at least {oldest}")
            }
        }
    }
}

impl std::error::Error for IdlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IdlError::Send(e) => Some(e),
            IdlError::Recv(e) => Some(e),
            IdlError::Rpc(e) => Some(e),
            IdlError::BadReply(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SendError> for IdlError {
    fn from(e: SendError) -> IdlError {
        IdlError::Send(e)
    }
}
impl From<RpcError> for IdlError {
    fn from(e: RpcError) -> IdlError {
        IdlError::Rpc(e)
    }
}

/// A failed call of an operation that declares a typed error: the server's
/// error, or a failure of the call itself.
#[derive(Debug)]
pub enum CallError<E> {
    /// The operation ran and returned its typed error.
    App(E),
    /// The call failed (transport, version, a refused request).
    Idl(IdlError),
}

impl<E> From<IdlError> for CallError<E> {
    fn from(e: IdlError) -> Self {
        CallError::Idl(e)
    }
}

impl<E: fmt::Debug> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::App(e) => write!(f, "the operation failed: {e:?}"),
            CallError::Idl(e) => write!(f, "{e}"),
        }
    }
}

impl<E: fmt::Debug> std::error::Error for CallError<E> {}

/// The error type of operations that declare none: it has no values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoError {}

impl Wire for NoError {
    fn encode(self, _: &mut Encoder) {
        match self {}
    }
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let tag = dec.left() as u32;
        Err(DecodeError::UnknownVariant { ty: "NoError", tag })
    }
    fn schema() -> Value {
        Value::Null
    }
}

/// What a server implementation learns about a request besides its
/// arguments.
#[derive(Clone, Copy, Debug, Default)]
pub struct Context {
    /// Who sent it, as the kernel recorded it (for a call through an RPC
    /// connection, when the client made the connection; `None` where the
    /// transport does not tell).
    pub sender: Option<Credentials>,
}

/// The reply message for an operation's outcome.
#[doc(hidden)]
pub fn reply_of<R: Wire, E: Wire>(r: Result<R, E>) -> Message {
    let mut enc = Encoder::new();
    answer_into(&mut enc, r).into_message(enc)
}

/// A server's answer to one request ([`Dispatch::dispatch_encoded`]).
#[derive(Debug)]
pub enum Answer {
    /// A reply message, to send as it is.
    Message(Message),
    /// A reply with this operation id ([`REPLY_OK`] or [`REPLY_ERR`]),
    /// whose body and items are in the encoder the dispatcher was given:
    /// an RPC server writes its two pieces ([`Encoder::parts`]) into the
    /// connection's slot without joining them
    /// ([`crate::rpc::RpcServer::reply_parts`]).
    Encoded(u32),
}

impl Answer {
    /// The answer as one message; `enc` is the encoder the dispatcher
    /// wrote an [`Answer::Encoded`] reply into.
    pub fn into_message(self, enc: Encoder) -> Message {
        match self {
            Answer::Message(m) => m,
            Answer::Encoded(op) => enc.into_message(op),
        }
    }
}

/// Writes an operation's outcome into `enc` (which the caller emptied)
/// and says which reply it is.
#[doc(hidden)]
#[inline]
pub fn answer_into<R: Wire, E: Wire>(enc: &mut Encoder, r: Result<R, E>) -> Answer {
    match r {
        Ok(v) => {
            v.encode(enc);
            Answer::Encoded(REPLY_OK)
        }
        Err(e) => {
            e.encode(enc);
            Answer::Encoded(REPLY_ERR)
        }
    }
}

/// The reply message for a fault.
pub fn fault_message(f: Fault) -> Message {
    let mut enc = Encoder::new();
    f.encode(&mut enc);
    enc.into_message(REPLY_FAULT)
}

/// Decodes a reply: the result, the typed error, or the server's fault.
#[doc(hidden)]
#[inline]
pub fn decode_reply<R: Wire, E: Wire>(msg: Message) -> Result<Result<R, E>, IdlError> {
    let mut reply = crate::rpc::SplitReply { split: R::split_at(), ..Default::default() };
    reply.fill(msg);
    decode_split_reply(&mut reply)
}

/// [`decode_reply`] of a reply taken apart where `R` wants it
/// ([`Wire::split_at`]).
#[inline]
fn decode_split_reply<R: Wire, E: Wire>(reply: &mut crate::rpc::SplitReply) -> Result<Result<R, E>, IdlError> {
    match reply.op {
        REPLY_OK => R::decode_split(reply).map(Ok).map_err(IdlError::BadReply),
        REPLY_ERR => codec::decode_joined(reply).map(Err).map_err(IdlError::BadReply),
        REPLY_FAULT => Err(IdlError::Fault(codec::decode_joined(reply).map_err(IdlError::BadReply)?)),
        op => Err(IdlError::UnexpectedReply(op)),
    }
}

/// A generated client's buffers, reused call after call: the encoder of
/// each request and the reply taken apart ([`crate::rpc::SplitReply`]).
/// The vector of a byte-list argument that ends a request is kept after
/// the call, and the next reply whose result is a byte list is copied into
/// it; so a typed call allocates no more than the payloads it hands over.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct CallBuffers {
    enc: Encoder,
    reply: crate::rpc::SplitReply,
    /// A byte list's vector, emptied, for the next reply's tail.
    spare: Vec<u8>,
}

impl CallBuffers {
    /// The request encoder, emptied.
    #[inline]
    pub fn encoder(&mut self) -> &mut Encoder {
        self.enc.clear();
        &mut self.enc
    }
}

/// The largest buffer a client keeps between calls: one large call does
/// not pin its memory for the client's lifetime.
const KEPT_BUFFER: usize = 64 << 10;

/// Sends the request in `bufs`' encoder as operation `op` and decodes the
/// reply: a request of inline bytes goes out in its two pieces and its
/// reply comes back cut where the result type wants it
/// ([`Channel::call_parts`]); one with items travels as a message.
///
/// # Errors
/// The channel's failure, the server's fault, or a reply that does not
/// decode.
#[doc(hidden)]
#[inline]
pub fn call_encoded<R: Wire, E: Wire>(chan: &mut impl Channel, bufs: &mut CallBuffers, op: u32) -> Result<Result<R, E>, IdlError> {
    if bufs.enc.has_items() {
        return decode_reply(chan.call(std::mem::take(&mut bufs.enc).into_message(op))?);
    }
    let reply = &mut bufs.reply;
    reply.split = R::split_at();
    if reply.tail.capacity() == 0 {
        reply.tail = std::mem::take(&mut bufs.spare);
    }
    let (head, tail) = bufs.enc.pieces_mut();
    let out = chan.call_parts(op, head, tail, reply);
    // The argument's vector receives a later reply's byte list.
    if tail.capacity() > bufs.spare.capacity() {
        std::mem::swap(tail, &mut bufs.spare);
        bufs.spare.clear();
    }
    let decoded = out.and_then(|()| decode_split_reply(reply));
    let (head, tail) = bufs.enc.pieces_mut();
    for b in [head, tail, &mut bufs.spare, &mut bufs.reply.head, &mut bufs.reply.tail] {
        if b.capacity() > KEPT_BUFFER {
            *b = Vec::new();
        }
    }
    decoded
}

crate::record! {
    /// The version check's request and answer.
    #[derive(Debug)]
    struct Hello {
        1 => name: String,
        2 => version: u32,
        3 => compatible: u32,
    }
}

/// The version check at connect: tells the server this build's interface
/// and version, learns the server's, and returns the server's version.
///
/// # Errors
/// [`IdlError::WrongInterface`], [`IdlError::Incompatible`] (the server is
/// too old for this client), [`IdlError::Fault`] with
/// [`Fault::Incompatible`] (this client is too old for the server), or the
/// channel's error.
pub fn hello<I: Interface>(chan: &mut impl Channel) -> Result<u32, IdlError> {
    let reply = chan.call(hello_request::<I>())?;
    hello_check::<I>(reply)
}

/// The version check's request (what [`hello`] sends).
pub fn hello_request<I: Interface>() -> Message {
    let mut enc = Encoder::new();
    Hello { name: I::NAME.to_owned(), version: I::VERSION, compatible: I::COMPATIBLE }.encode(&mut enc);
    enc.into_message(OP_HELLO)
}

/// Checks the server's answer to the version check; its version.
///
/// # Errors
/// As [`hello`].
pub fn hello_check<I: Interface>(reply: Message) -> Result<u32, IdlError> {
    let theirs: Hello = decode_reply::<Hello, NoError>(reply)?.unwrap_or_else(|e| match e {});
    if theirs.name != I::NAME {
        return Err(IdlError::WrongInterface { expected: I::NAME, got: theirs.name });
    }
    if theirs.version < I::COMPATIBLE {
        return Err(IdlError::Incompatible { server: theirs.version, oldest: I::COMPATIBLE });
    }
    Ok(theirs.version)
}

/// The server's answer to a version check.
#[doc(hidden)]
pub fn answer_hello<I: Interface>(mut msg: Message) -> Message {
    let items = msg.take_items();
    let mut dec = Decoder::new(msg.body(), items);
    let theirs = match Hello::decode(&mut dec).and_then(|h| dec.finish().map(|()| h)) {
        Ok(h) => h,
        Err(e) => return fault_message(Fault::BadRequest(format!("version check: {e}"))),
    };
    if theirs.name != I::NAME {
        return fault_message(Fault::Incompatible(format!("this server speaks {:?}, not {:?}", I::NAME, theirs.name)));
    }
    if theirs.version < I::COMPATIBLE {
        return fault_message(Fault::Incompatible(format!(
            "{} version {} is older than {}, the oldest this server talks to",
            I::NAME,
            theirs.version,
            I::COMPATIBLE
        )));
    }
    reply_of::<Hello, NoError>(Ok(Hello { name: I::NAME.to_owned(), version: I::VERSION, compatible: I::COMPATIBLE }))
}
