//! Typed interfaces end to end over real ports and RPC connections: every
//! kind of value round-trips, and requests that do not match the interface
//! are refused with a typed fault before the implementation runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry::rpc::RpcServer;
use ferry::{LendPool, MapOptions, Message, RegionItem, SendRight, Timeout};
use ferry_idl::{
    enumeration, interface, record, ByValue, CallError, Context, DecodeError, Decoder, Encoder, Fault, IdlError, Interface, Lent,
    ReceiveOf, SendOnceTo, SendTo, Shared, Wire,
};

record! {
    /// A record with required, list and optional fields.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Entry {
        /// The key.
        1 => pub key: String,
        /// Its size.
        2 => pub size: u64,
        3 => pub tags: Vec<String>,
        4 => pub note: Option<String>,
    }
}

enumeration! {
    /// Unit and payload variants.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Color {
        /// Red.
        1 => Red,
        2 => Green,
        7 => Custom(u32),
    }
}

enumeration! {
    /// The typed error.
    #[derive(Debug, PartialEq)]
    pub enum AllError {
        1 => Refused(String),
        2 => Empty,
    }
}

interface! {
    /// Every kind of value ferry's interfaces carry.
    pub mod all: "test.all", version 1, compatible 1 {
        /// Adds every scalar up.
        fn sum(a: u8, b: u16, c: u32, d: u64, e: i8, f: i16, g: i32, h: i64, x: f32, y: f64, neg: bool) -> f64 = 1;
        /// Strings, bytes, lists and arrays; fails on an empty string.
        fn texts(s: String, b: Vec<u8>, list: Vec<u32>, fixed: [u8; 8]) -> Vec<String> | AllError = 2;
        /// Records, enumerations and optional values.
        fn entry(e: Entry, c: Color, maybe: Option<Entry>) -> Option<Entry> = 3;
        /// A by-value region, reversed.
        fn reverse(v: ByValue) -> ByValue = 4;
        /// The sum of a lent region's bytes.
        fn lend_sum(v: Lent) -> u64 = 5;
        /// Writes "seen" at the start of a shared region.
        fn touch(v: Shared) = 6;
        /// Calls `sum` on another server of this interface.
        fn introduce(peer: SendTo<all::Protocol>) -> f64 = 7;
        /// Receives one message on `rx`; returns its operation id.
        fn drain(rx: ReceiveOf<all::Protocol>) -> u32 = 8;
        /// Sends a message with operation id 42 through `once`.
        fn answer(once: SendOnceTo<all::Protocol>) = 9;
        /// Records a note.
        oneway note(text: String) = 10;
        /// The notes so far.
        fn notes() -> Vec<String> = 11;
    }
}

#[derive(Default)]
struct Impl {
    runs: Arc<AtomicU64>,
    notes: Vec<String>,
}

impl all::Service for Impl {
    fn sum(&mut self, _: &Context, a: u8, b: u16, c: u32, d: u64, e: i8, f: i16, g: i32, h: i64, x: f32, y: f64, neg: bool) -> f64 {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let s = a as f64 + b as f64 + c as f64 + d as f64 + e as f64 + f as f64 + g as f64 + h as f64 + x as f64 + y;
        if neg {
            -s
        } else {
            s
        }
    }
    fn texts(&mut self, _: &Context, s: String, b: Vec<u8>, list: Vec<u32>, fixed: [u8; 8]) -> Result<Vec<String>, AllError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if s.is_empty() {
            return Err(AllError::Empty);
        }
        if s == "no" {
            return Err(AllError::Refused("said no".into()));
        }
        Ok(vec![s, format!("{b:?}"), format!("{list:?}"), format!("{fixed:?}")])
    }
    fn entry(&mut self, _: &Context, mut e: Entry, c: Color, maybe: Option<Entry>) -> Option<Entry> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        e.tags.push(format!("{c:?}"));
        e.note = maybe.map(|m| m.key);
        (e.size > 0).then_some(e)
    }
    fn reverse(&mut self, _: &Context, v: ByValue) -> ByValue {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let mut bytes = v.0.copy_out(1 << 20).unwrap();
        bytes.reverse();
        ByValue(RegionItem::copied_from(&bytes).unwrap())
    }
    fn lend_sum(&mut self, _: &Context, v: Lent) -> u64 {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let m = v.0.map_shared(MapOptions::lazy().read_only()).unwrap();
        m.to_vec(4096).unwrap().iter().map(|&b| b as u64).sum()
    }
    fn touch(&mut self, _: &Context, v: Shared) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let m = v.0.map_shared(MapOptions::lazy()).unwrap();
        assert!(m.write_at(0, b"seen"));
    }
    fn introduce(&mut self, _: &Context, peer: SendTo<all::Protocol>) -> f64 {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let mut c = all::Client::over_port(peer.into_inner()).unwrap();
        c.sum(1, 1, 1, 1, 1, 1, 1, 1, 1.0, 1.0, false).unwrap()
    }
    fn drain(&mut self, _: &Context, rx: ReceiveOf<all::Protocol>) -> u32 {
        self.runs.fetch_add(1, Ordering::SeqCst);
        rx.into_inner().recv(Timeout::Zero).map(|m| m.op()).unwrap_or(0)
    }
    fn answer(&mut self, _: &Context, once: SendOnceTo<all::Protocol>) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        once.into_inner().send(Message::new(42), Timeout::Infinite).unwrap();
    }
    fn note(&mut self, _: &Context, text: String) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.notes.push(text);
    }
    fn notes(&mut self, _: &Context) -> Vec<String> {
        self.notes.clone()
    }
}

/// Runs `f` on a thread and fails the test if it takes longer than a
/// minute (a hang is a failure, never a stuck test run).
fn watchdog<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the test hung or panicked")
}

/// A port server of `all` on a thread; returns the send right and the
/// implementation's run counter.
fn port_server() -> (SendRight, Arc<AtomicU64>) {
    let (mut rx, tx) = ferry::port().unwrap();
    let runs = Arc::new(AtomicU64::new(0));
    let mut server = all::Server(Impl { runs: runs.clone(), notes: Vec::new() });
    std::thread::spawn(move || ferry_idl::serve_port(&mut server, &mut rx));
    (tx, runs)
}

fn rpc_server() -> (SendRight, Arc<AtomicU64>) {
    let (rx, tx) = ferry::port().unwrap();
    let runs = Arc::new(AtomicU64::new(0));
    let mut server = all::Server(Impl { runs: runs.clone(), notes: Vec::new() });
    std::thread::spawn(move || {
        let mut rpc = RpcServer::new(rx).unwrap();
        ferry_idl::serve_rpc(&mut server, &mut rpc, Timeout::Infinite)
    });
    (tx, runs)
}

fn entry() -> Entry {
    Entry { key: "k".into(), size: 3, tags: vec!["a".into(), "é".into()], note: None }
}

/// The calls every transport must carry the same way.
fn exercise<C: ferry_idl::Channel>(c: &mut all::Client<C>) {
    assert_eq!(c.sum(1, 2, 3, 4, -5, -6, -7, -8, 0.5, 0.25, true).unwrap(), 15.25);
    assert_eq!(
        c.texts("hi".into(), vec![1, 2], vec![7, 8, 9], *b"abcdefgh").unwrap(),
        vec!["hi".to_string(), "[1, 2]".into(), "[7, 8, 9]".into(), format!("{:?}", *b"abcdefgh")]
    );
    assert!(matches!(c.texts(String::new(), vec![], vec![], [0; 8]), Err(CallError::App(AllError::Empty))));
    assert!(matches!(c.texts("no".into(), vec![], vec![], [0; 8]), Err(CallError::App(AllError::Refused(s))) if s == "said no"));

    let mut want = entry();
    want.tags.push("Custom(9)".into());
    want.note = Some("other".into());
    let other = Entry { key: "other".into(), ..entry() };
    assert_eq!(c.entry(entry(), Color::Custom(9), Some(other)).unwrap(), Some(want));
    assert_eq!(c.entry(Entry { size: 0, ..entry() }, Color::Red, None).unwrap(), None);

    let back = c.reverse(ByValue(RegionItem::copied_from(b"region").unwrap())).unwrap();
    assert_eq!(back.0.copy_out(100).unwrap(), b"noiger");

    let pool = LendPool::new(1, 4096).unwrap();
    let mut lease = pool.acquire(Timeout::Infinite).unwrap();
    lease.as_mut_slice()[..3].copy_from_slice(&[1, 2, 3]);
    lease.set_len(3).unwrap();
    assert_eq!(c.lend_sum(Lent(lease.lend().unwrap())).unwrap(), 6);

    let shared = ferry::region::SharedRegion::new(4096).unwrap();
    c.touch(Shared(shared.share().unwrap())).unwrap();
    let mut seen = [0u8; 4];
    assert!(shared.read_at(0, &mut seen));
    assert_eq!(&seen, b"seen");

    let (other_server, _) = port_server();
    assert_eq!(c.introduce(SendTo::new(other_server)).unwrap(), 10.0);

    let (inbox, to_inbox) = ferry::port().unwrap();
    to_inbox.send(Message::new(77), Timeout::Infinite).unwrap();
    assert_eq!(c.drain(ReceiveOf::new(inbox)).unwrap(), 77);

    let (mut mine, _keep) = ferry::port().unwrap();
    let once = mine.make_send_once().unwrap();
    c.answer(SendOnceTo::new(once)).unwrap();
    assert_eq!(mine.recv(Timeout::Infinite).unwrap().op(), 42);

    c.note("one".into()).unwrap();
    c.note("two".into()).unwrap();
    assert_eq!(c.notes().unwrap(), vec!["one".to_string(), "two".into()]);
}

#[test]
fn every_kind_of_value_round_trips_over_a_port() {
    watchdog(|| {
        let (tx, _) = port_server();
        let mut c = all::Client::over_port(tx).unwrap();
        assert_eq!(c.peer_version(), 1);
        exercise(&mut c);
    });
}

#[test]
fn every_kind_of_value_round_trips_over_an_rpc_connection() {
    watchdog(|| {
        let (tx, _) = rpc_server();
        let mut c = all::Client::over_rpc(&tx).unwrap();
        exercise(&mut c);
    });
}

/// Sends `req` with a reply right to `to` and returns the reply.
fn raw_call(to: &SendRight, req: Message) -> Message {
    let (mut rx, _keep) = ferry::port().unwrap();
    let once = rx.make_send_once().unwrap();
    to.send(req.with_reply(once), Timeout::Infinite).unwrap();
    rx.recv(Timeout::Infinite).unwrap()
}

fn fault_of(reply: Message) -> Fault {
    assert_eq!(reply.op(), ferry_idl::REPLY_FAULT, "expected a fault");
    let mut dec = Decoder::new(reply.body(), Vec::new());
    Fault::decode(&mut dec).unwrap()
}

fn bad_request(reply: Message) -> String {
    match fault_of(reply) {
        Fault::BadRequest(why) => why,
        f => panic!("expected a bad request, got {f:?}"),
    }
}

/// One `reverse` request's argument record, with `items` and a field that
/// names item `index`.
fn reverse_request(index: u32, items: Vec<ferry::Item>) -> Message {
    let mut enc = Encoder::new();
    enc.field(1, index);
    let mut m = enc.into_message(all::ops::reverse);
    for i in items {
        m = m.with_item(i);
    }
    m
}

#[test]
fn requests_that_do_not_match_are_refused_before_the_implementation_runs() {
    watchdog(|| {
        let (tx, runs) = port_server();
        let fds_before = std::fs::read_dir("/proc/self/fd").unwrap().count();

        // An unknown operation gets a fault, never silence.
        assert_eq!(fault_of(raw_call(&tx, Message::new(999))), Fault::UnknownOperation(999));

        // A scalar argument cut short.
        let mut enc = Encoder::new();
        enc.put(&1u16.to_le_bytes());
        enc.put_u32(4);
        enc.put(&[1, 2]);
        assert!(bad_request(raw_call(&tx, enc.into_message(all::ops::sum))).contains("truncated"));

        // A string that is not UTF-8.
        let mut enc = Encoder::new();
        enc.field(1, vec![0xffu8, 0xfe]); // bytes where a string goes: same layout, bad text
        enc.field(2, Vec::<u8>::new());
        enc.field(3, Vec::<u32>::new());
        enc.field(4, [0u8; 8]);
        assert!(bad_request(raw_call(&tx, enc.into_message(all::ops::texts))).contains("UTF-8"));

        // A required argument missing.
        let mut enc = Encoder::new();
        enc.field(1, "only".to_string());
        assert!(bad_request(raw_call(&tx, enc.into_message(all::ops::texts))).contains("field 2 is missing"));

        // An argument twice.
        let mut enc = Encoder::new();
        enc.field(1, "x".to_string());
        enc.field(1, "y".to_string());
        assert!(bad_request(raw_call(&tx, enc.into_message(all::ops::texts))).contains("twice"));

        // A bool that is neither 0 nor 1, deep in a list of arguments.
        let mut enc = Encoder::new();
        for (ord, len) in [(1u16, 1usize), (2, 2), (3, 4), (4, 8), (5, 1), (6, 2), (7, 4), (8, 8), (9, 4), (10, 8), (11, 1)] {
            enc.put(&ord.to_le_bytes());
            enc.put_u32(len as u32);
            enc.put(&vec![if ord == 11 { 2 } else { 0 }; len]);
        }
        assert!(bad_request(raw_call(&tx, enc.into_message(all::ops::sum))).contains("not 0 or 1"));

        // A count larger than the message.
        let mut enc = Encoder::new();
        enc.put(&1u16.to_le_bytes());
        enc.put_u32(4);
        enc.put_u32(1_000_000);
        assert!(bad_request(raw_call(&tx, enc.into_message(all::ops::texts))).contains("count"));

        // An enumeration tag nobody defined.
        let mut enc = Encoder::new();
        enc.field(1, entry());
        enc.field(2, 99u32);
        assert!(bad_request(raw_call(&tx, enc.into_message(all::ops::entry))).contains("no variant 99"));

        // The region argument names an item that is not there.
        assert!(bad_request(raw_call(&tx, reverse_request(3, Vec::new()))).contains("item 3 does not exist"));

        // A send right where a region belongs: refused, and the right is
        // closed (its port learns it has no senders left).
        let (mut victim, victim_tx) = ferry::port().unwrap();
        let why = bad_request(raw_call(&tx, reverse_request(0, vec![ferry::Item::Send(victim_tx)])));
        assert!(why.contains("not a region"), "{why}");
        assert!(matches!(victim.recv(Timeout::Infinite), Err(ferry::RecvError::NoSenders)));

        // A shared region where the interface says by value: the sender
        // could change it, so it is refused.
        let shared = ferry::region::SharedRegion::new(4096).unwrap();
        let why = bad_request(raw_call(&tx, reverse_request(0, vec![shared.share().unwrap().into()])));
        assert!(why.contains("Share region, not by_value"), "{why}");

        // An item no argument claims.
        let region = RegionItem::copied_from(b"abc").unwrap();
        let extra = RegionItem::copied_from(b"extra").unwrap();
        assert!(bad_request(raw_call(&tx, reverse_request(0, vec![region.into(), extra.into()]))).contains("claimed by no value"));

        // A call without a reply right is not run (nobody could learn the
        // outcome); a one-way operation with a bad argument is dropped.
        let mut enc = Encoder::new();
        enc.field(1, "unanswerable".to_string());
        tx.send(enc.into_message(all::ops::texts), Timeout::Infinite).unwrap();
        tx.send(Message::new(all::ops::note).with_body(vec![9, 9, 9]), Timeout::Infinite).unwrap();

        // Nothing above reached the implementation; this call does.
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let mut c = all::Client::over_port(tx).unwrap();
        assert!(c.notes().unwrap().is_empty());
        c.sum(0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, false).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        drop(c);
        drop((victim, shared));
        let fds_after = std::fs::read_dir("/proc/self/fd").unwrap().count();
        assert!(fds_after <= fds_before, "descriptors leaked: {fds_before} before, {fds_after} after");
    });
}

#[test]
fn an_rpc_server_answers_unknown_and_malformed_requests_with_faults() {
    watchdog(|| {
        let (tx, runs) = rpc_server();
        let mut conn = ferry::rpc::Connection::connect(&tx, Default::default()).unwrap();
        use ferry::rpc::Transport;
        let r = conn.call(Message::new(4444), Timeout::Infinite).unwrap();
        assert_eq!(fault_of(r), Fault::UnknownOperation(4444));
        let r = conn.call(Message::new(all::ops::note).with_body(vec![1]), Timeout::Infinite).unwrap();
        assert!(matches!(fault_of(r), Fault::BadRequest(_)));
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        // The typed one-way call over RPC is acknowledged once run.
        let mut c = all::Client::over_rpc(&tx).unwrap();
        c.note("hello".into()).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_reply_that_does_not_match_is_a_typed_error_for_the_caller() {
    watchdog(|| {
        let (mut rx, tx) = ferry::port().unwrap();
        // A fake server: answers the version check properly, then sends
        // garbage where a `f64` belongs, then an unknown reply code, then
        // drops the reply right.
        std::thread::spawn(move || {
            let mut hello = rx.recv(Timeout::Infinite).unwrap();
            let r = hello.take_reply().unwrap();
            r.send(ferry_idl::answer_hello::<all::Protocol>(hello), Timeout::Infinite).unwrap();
            let mut req = rx.recv(Timeout::Infinite).unwrap();
            req.take_reply().unwrap().send(Message::new(ferry_idl::REPLY_OK).with_body(vec![1, 2, 3]), Timeout::Infinite).unwrap();
            let mut req = rx.recv(Timeout::Infinite).unwrap();
            req.take_reply().unwrap().send(Message::new(12345), Timeout::Infinite).unwrap();
            let mut req = rx.recv(Timeout::Infinite).unwrap();
            drop(req.take_reply());
        });
        let mut c = all::Client::over_port(tx).unwrap();
        let z = || (0u8, 0u16, 0u32, 0u64, 0i8, 0i16, 0i32, 0i64, 0f32, 0f64, false);
        let (a, b, cc, d, e, f, g, h, x, y, n) = z();
        assert!(matches!(c.sum(a, b, cc, d, e, f, g, h, x, y, n), Err(IdlError::BadReply(DecodeError::Truncated { .. }))));
        assert!(matches!(c.sum(a, b, cc, d, e, f, g, h, x, y, n), Err(IdlError::UnexpectedReply(12345))));
        assert!(matches!(c.sum(a, b, cc, d, e, f, g, h, x, y, n), Err(IdlError::NoReply)));
    });
}

#[test]
fn a_port_client_survives_a_timed_out_call() {
    watchdog(|| {
        let (mut rx, tx) = ferry::port().unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut server = all::Server(Impl::default());
            // Version check, then hold the next request until told.
            ferry_idl::serve_port_once(&mut server, &mut rx, Timeout::Infinite).unwrap();
            let mut late = rx.recv(Timeout::Infinite).unwrap();
            wait.recv().unwrap();
            let reply = late.take_reply().unwrap();
            let _ = reply.send(server_reply_for_notes(), Timeout::Infinite);
            ferry_idl::serve_port(&mut server, &mut rx)
        });
        let mut chan = ferry_idl::PortChannel::new(tx);
        chan.set_timeout(Timeout::After(Duration::from_millis(50)));
        let mut c = all::Client::connect(chan).unwrap();
        assert!(matches!(c.notes(), Err(IdlError::Recv(ferry::RecvError::Timeout))));
        go.send(()).unwrap();
        // The late reply to the first call never answers the second.
        c.channel_mut().set_timeout(Timeout::Infinite);
        c.note("after".into()).unwrap();
        assert_eq!(c.notes().unwrap(), vec!["after".to_string()]);
    });
}

fn server_reply_for_notes() -> Message {
    let mut enc = Encoder::new();
    vec!["stale".to_string()].encode(&mut enc);
    enc.into_message(ferry_idl::REPLY_OK)
}

#[test]
fn the_description_names_every_operation_and_type() {
    let d = all::describe();
    assert_eq!(d["interface"], "test.all");
    assert_eq!(d["doc"], "Every kind of value ferry's interfaces carry.");
    let ops = d["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 11);
    let texts = &ops[1];
    assert_eq!(texts["name"], "texts");
    assert_eq!(texts["ordinal"], 2);
    assert_eq!(texts["kind"], "call");
    assert_eq!(texts["args"][1]["type"], "bytes");
    assert_eq!(texts["args"][2]["type"]["list"], "u32");
    assert_eq!(texts["args"][3]["ordinal"], 4);
    assert_eq!(texts["error"]["enum"], "AllError");
    assert_eq!(texts["error"]["variants"][0]["payload"], "string");
    assert_eq!(ops[2]["args"][0]["type"]["fields"][3]["type"]["optional"], "string");
    assert_eq!(ops[3]["args"][0]["type"]["region"], "by_value");
    assert_eq!(ops[4]["args"][0]["type"]["region"], "lend");
    assert_eq!(ops[6]["args"][0]["type"]["send_right"], "test.all");
    assert_eq!(ops[7]["args"][0]["type"]["receive_right"], "test.all");
    assert_eq!(ops[8]["args"][0]["type"]["send_once_right"], "test.all");
    assert_eq!(ops[9]["kind"], "oneway");
    assert_eq!(ops[9]["result"], "unit");
    assert_eq!(ops[9]["doc"], "Records a note.");
    assert_eq!(<all::Protocol as Interface>::NAME, "test.all");
}

record! {
    /// A recursive record: a hostile sender could nest it deeply.
    #[derive(Debug, PartialEq)]
    pub struct Node {
        1 => pub children: Vec<Node>,
    }
}

fn nested(depth: usize) -> Node {
    let mut n = Node { children: Vec::new() };
    for _ in 1..depth {
        n = Node { children: vec![n] };
    }
    n
}

#[test]
fn deeply_nested_records_are_refused_not_a_stack_overflow() {
    let decode = |n: Node| {
        let mut enc = Encoder::new();
        n.encode(&mut enc);
        let m = enc.into_message(0);
        let mut dec = Decoder::new(m.body(), Vec::new());
        Node::decode(&mut dec)
    };
    assert_eq!(decode(nested(ferry_idl::codec::MAX_DEPTH)).unwrap(), nested(ferry_idl::codec::MAX_DEPTH));
    assert_eq!(decode(nested(200)), Err(DecodeError::TooDeep));
}

/// A small deterministic generator (xorshift), so the mutation test needs
/// no dependency and repeats exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn mutated_requests_never_crash_the_dispatcher_and_never_half_run() {
    // Valid requests of several operations, each then damaged at random
    // (bytes flipped, cut short, lengthened): the dispatcher must answer
    // every one with a reply (a result or a fault), never panic, and run
    // the implementation only for requests that still decode whole.
    let valid: Vec<(u32, Vec<u8>)> = {
        let mut v = Vec::new();
        let mut enc = Encoder::new();
        enc.field(1, "text".to_string());
        enc.field(2, vec![1u8, 2, 3]);
        enc.field(3, vec![7u32, 8]);
        enc.field(4, *b"abcdefgh");
        v.push((all::ops::texts, enc.into_message(0).body().to_vec()));
        let mut enc = Encoder::new();
        enc.field(1, entry());
        enc.field(2, Color::Custom(5));
        enc.field(3, Some(entry()));
        v.push((all::ops::entry, enc.into_message(0).body().to_vec()));
        let mut enc = Encoder::new();
        for ord in 1..=11u16 {
            let len = [1usize, 2, 4, 8, 1, 2, 4, 8, 4, 8, 1][ord as usize - 1];
            enc.put(&ord.to_le_bytes());
            enc.put_u32(len as u32);
            enc.put(&vec![0; len]);
        }
        v.push((all::ops::sum, enc.into_message(0).body().to_vec()));
        v
    };
    let runs = Arc::new(AtomicU64::new(0));
    let mut server = all::Server(Impl { runs: runs.clone(), notes: Vec::new() });
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ran, mut refused) = (0u64, 0u64);
    for _ in 0..20_000 {
        let (op, body) = &valid[rng.below(valid.len())];
        let mut body = body.clone();
        for _ in 0..1 + rng.below(3) {
            match rng.below(4) {
                0 if !body.is_empty() => {
                    let i = rng.below(body.len());
                    body[i] ^= 1 << rng.below(8);
                }
                1 if !body.is_empty() => {
                    let i = rng.below(body.len());
                    body[i] = [0u8, 1, 2, 0x7f, 0x80, 0xff][rng.below(6)];
                }
                2 => body.truncate(rng.below(body.len() + 1)),
                _ => body.extend((0..rng.below(8)).map(|_| rng.next() as u8)),
            }
        }
        let before = runs.load(Ordering::SeqCst);
        let reply = ferry_idl::Dispatch::dispatch(&mut server, Message::new(*op).with_body(body), ferry_idl::Route::Rpc)
            .expect("every request through a connection is answered");
        let after = runs.load(Ordering::SeqCst);
        match reply.op() {
            ferry_idl::REPLY_FAULT => {
                assert_eq!(before, after, "a refused request reached the implementation");
                refused += 1;
            }
            ferry_idl::REPLY_OK | ferry_idl::REPLY_ERR => {
                assert_eq!(before + 1, after);
                ran += 1;
            }
            other => panic!("reply code {other}"),
        }
    }
    assert!(ran > 0 && refused > 0, "the mutations should make both kinds: {ran} ran, {refused} refused");
}

#[test]
fn a_client_whose_reply_queue_is_full_cannot_stall_the_server() {
    watchdog(|| {
        let (tx, runs) = port_server();
        // A reply right (a plain send right) to a port whose queue is full.
        let (_full_rx, full_tx) = ferry::port_with(ferry::PortOptions { queue_limit: Some(4096) }).unwrap();
        while full_tx.send(Message::new(0).with_body(vec![0u8; 512]), Timeout::Zero).is_ok() {}
        let mut enc = Encoder::new();
        enc.field(1, "x".to_string());
        enc.field(2, Vec::<u8>::new());
        enc.field(3, Vec::<u32>::new());
        enc.field(4, [0u8; 8]);
        let stalling = enc.into_message(all::ops::texts).with_reply(full_tx.try_clone().unwrap());
        tx.send(stalling, Timeout::Infinite).unwrap();
        // The server ran that call, dropped its reply, and answers others.
        let mut c = all::Client::over_port(tx).unwrap();
        assert_eq!(c.sum(1, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, false).unwrap(), 1.0);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    });
}
