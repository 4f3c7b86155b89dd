//! The generated stub's own work per call, without a transport: the typed
//! `echo(data: Vec<u8>) -> Vec<u8>` call through the generated client and
//! the generated dispatcher, joined by a channel that copies the request
//! and the reply as the RPC slot does (in their two pieces), against the
//! hand-written call's messages built and copied the same way. Both run on
//! one thread, so the difference is the stub's CPU time per call
//! (encoding, checks, decoding, allocations), which a profile of the
//! spinning `poll` benchmark hides under spinning.
//!
//! ```text
//! cargo run --release -p ferry-idl --example stub_cost [-- --iters N] [--size BYTES]
//! ```
//!
//! Prints, per size and round, the per-call time of each and their
//! difference, in nanoseconds, on standard error.

use std::hint::black_box;
use std::time::Instant;

use ferry::Message;
use ferry::rpc::SplitReply;
use ferry_idl::{Answer, Channel, Context, Dispatch, Encoder, IdlError, Route};

ferry_idl::interface! {
    /// The benchmark's service: a payload there and back.
    pub mod echo: "bench.echo", version 1, compatible 1 {
        /// Returns `data`.
        fn echo(data: Vec<u8>) -> Vec<u8> = 1;
    }
}

/// The service: answers `echo` with its argument.
struct Echo;

impl echo::Service for Echo {
    fn echo(&mut self, _: &Context, data: Vec<u8>) -> Vec<u8> {
        data
    }
}

/// A channel straight into the dispatcher that copies as the RPC slot
/// does: a request's two pieces into the slot, the slot into the server's
/// vector, the reply's two pieces into the slot, and the slot out to the
/// client cut where it asks ([`Channel::call_parts`], the path a typed
/// call over an RPC connection takes).
struct Direct {
    server: echo::Server<Echo>,
    slot: Vec<u8>,
    enc: Encoder,
}

/// A copy of `m`'s operation and body, as a transport delivers it.
fn delivered(m: Message) -> Message {
    Message::new(m.op()).with_body(m.body().to_vec())
}

impl Channel for Direct {
    fn call(&mut self, req: Message) -> Result<Message, IdlError> {
        let out = self.server.dispatch(delivered(req), Route::Rpc).ok_or(IdlError::NoReply)?;
        Ok(delivered(out))
    }
    fn send(&mut self, _: Message) -> Result<(), IdlError> {
        Ok(())
    }
    fn call_parts(&mut self, op: u32, head: &[u8], tail: &[u8], reply: &mut SplitReply) -> Result<(), IdlError> {
        self.slot.clear();
        self.slot.extend_from_slice(head);
        self.slot.extend_from_slice(tail);
        let req = Message::new(op).with_body(black_box(&self.slot[..]).to_vec());
        let answer = self.server.dispatch_encoded(req, Route::Rpc, &mut self.enc).ok_or(IdlError::NoReply)?;
        let Answer::Encoded(op) = answer else { return Err(IdlError::NoReply) };
        let (h, t) = self.enc.parts();
        self.slot.clear();
        self.slot.extend_from_slice(h);
        self.slot.extend_from_slice(t);
        self.enc.clear();
        let at = reply.split.min(self.slot.len());
        reply.op = op;
        reply.head.clear();
        reply.head.extend_from_slice(black_box(&self.slot[..at]));
        reply.tail.clear();
        reply.tail.extend_from_slice(black_box(&self.slot[at..]));
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iters: u32 = args.iter().position(|a| a == "--iters").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--size").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()) {
        Some(n) => vec![n],
        None => vec![8, 1024],
    };
    for n in sizes {
        let direct = Direct { server: echo::Server(Echo), slot: Vec::new(), enc: Encoder::new() };
        let mut stub = echo::Client::connect(direct).expect("version check");
        let data = vec![1u8; n];
        for round in 0..3 {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(stub.echo(black_box(data.clone())).expect("stub call"));
            }
            let typed = t.elapsed().as_nanos() as f64 / f64::from(iters);
            let t = Instant::now();
            for _ in 0..iters {
                // Client builds, transport copies, server answers with a
                // copy of the body, transport copies back.
                let req = delivered(Message::new(1000).with_body(black_box(data.clone())));
                let reply = delivered(Message::new(1000).with_body(req.body().to_vec()));
                black_box(reply);
            }
            let hand = t.elapsed().as_nanos() as f64 / f64::from(iters);
            eprintln!("{n:5} B round {round}: stub {typed:6.1} ns, hand-written {hand:6.1} ns, stub's own work {:6.1} ns", typed - hand);
        }
    }
}
