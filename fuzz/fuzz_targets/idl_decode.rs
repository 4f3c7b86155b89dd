//! Fuzzes the decoder that typed interfaces (`ferry-idl`) generate: the
//! code a server runs on another process's request before its
//! implementation. The first input byte picks an operation of a test
//! interface; the rest is the request's inline bytes. Dispatching must
//! never panic, must answer every request (a result or a fault), and must
//! run the implementation only for requests that decode whole.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run idl_decode
//! ```

#![no_main]

use std::cell::Cell;

use ferry::Message;
use ferry_idl::{Context, Dispatch, Route};
use libfuzzer_sys::fuzz_target;

ferry_idl::record! {
    /// A nested record with optional and recursive fields.
    pub struct Node {
        1 => pub name: String,
        2 => pub size: Option<u64>,
        3 => pub children: Vec<Node>,
    }
}

ferry_idl::enumeration! {
    /// Unit and payload variants.
    pub enum Kind {
        1 => Plain,
        2 => Sized(u32),
        3 => Named(String),
    }
}

ferry_idl::interface! {
    /// Every value kind that has bytes.
    pub mod target: "fuzz.target", version 1, compatible 1 {
        /// Scalars.
        fn scalars(a: u8, b: u64, c: i32, d: f64, e: bool) = 1;
        /// Text and lists.
        fn texts(s: String, b: Vec<u8>, l: Vec<u32>, o: Option<String>, f: [u8; 4]) = 2;
        /// Records and enumerations.
        fn records(n: Node, k: Kind, list: Vec<Kind>) -> Option<u64> | Kind = 3;
        /// One way.
        oneway note(s: String) = 4;
    }
}

thread_local! {
    static RAN: Cell<u64> = const { Cell::new(0) };
}

fn ran() {
    RAN.with(|r| r.set(r.get() + 1));
}

struct Impl;

impl target::Service for Impl {
    fn scalars(&mut self, _: &Context, _: u8, _: u64, _: i32, _: f64, _: bool) {
        ran();
    }
    fn texts(&mut self, _: &Context, _: String, _: Vec<u8>, _: Vec<u32>, _: Option<String>, _: [u8; 4]) {
        ran();
    }
    fn records(&mut self, _: &Context, n: Node, _: Kind, _: Vec<Kind>) -> Result<Option<u64>, Kind> {
        ran();
        Ok(n.size)
    }
    fn note(&mut self, _: &Context, _: String) {
        ran();
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&op, body)) = data.split_first() else { return };
    // 1..=4 are the operations, 5 is unknown (0, the version check, is
    // fuzzed by the decoder of its record through these).
    let op = 1 + u32::from(op % 5);
    let before = RAN.with(Cell::get);
    let reply = target::Server(Impl).dispatch(Message::new(op).with_body(body.to_vec()), Route::Rpc);
    let reply = reply.expect("a request through a connection is always answered");
    let ran = RAN.with(Cell::get) - before;
    match reply.op() {
        ferry_idl::REPLY_FAULT => assert_eq!(ran, 0, "a refused request reached the implementation"),
        ferry_idl::REPLY_OK | ferry_idl::REPLY_ERR => assert_eq!(ran, 1),
        other => panic!("reply code {other}"),
    }
});
