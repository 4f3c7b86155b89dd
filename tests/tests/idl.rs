//! Typed interfaces across processes: the example key-value store
//! (`ferry_tests::kv`) runs in a `ferry-peer` child and is used through its
//! generated client over a port and over an RPC connection.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferry::spawn::CommandExt;
use ferry::{Item, Message, Region, SendRight, Timeout};
use ferry_idl::{ByValue, CallError, Decoder, Fault, Wire};
use ferry_tests::kv::{kv, Entry, KvError, MAX_VALUE};

const LIMIT: Duration = Duration::from_secs(60);

/// Starts the store in a child process; returns it with the rights to its
/// port and to its RPC server.
fn start_store() -> (Child, SendRight, SendRight) {
    let (mut rx, tx) = ferry::port().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry-peer"));
    cmd.arg("idl-kv-server").stdout(Stdio::piped()).stderr(Stdio::inherit());
    cmd.pass_right(&tx).unwrap();
    drop(tx);
    let child = cmd.spawn().unwrap();
    drop(cmd);
    let mut hello = rx.recv(Timeout::Infinite).expect("the store did not start");
    let mut items = hello.take_items().into_iter();
    match (items.next(), items.next()) {
        (Some(Item::Send(port)), Some(Item::Send(rpc))) => (child, port, rpc),
        other => panic!("the store sent {other:?}"),
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn a_key_value_store_in_another_process_keeps_values_by_value() {
    common::watchdog("a_key_value_store_in_another_process_keeps_values_by_value", LIMIT, || {
        let (child, port, rpc) = start_store();
        let mut store = kv::Client::over_port(port.try_clone().unwrap()).unwrap();
        assert_eq!(store.peer_version(), 1);

        // A megabyte sent by copy: the client keeps writing its own region
        // afterwards, and the store's value does not change.
        let want = pattern(1 << 20);
        let mut mine = Region::new(want.len()).unwrap();
        mine.as_mut_slice().copy_from_slice(&want);
        assert_eq!(store.put("big".into(), ByValue(mine.by_copy().unwrap())).unwrap(), None);
        mine.as_mut_slice().fill(0xAA);
        let got = store.get("big".into()).unwrap().expect("the value is there");
        assert_eq!(got.0.len(), want.len());
        let mapped = got.0.map(ferry::MapOptions::lazy()).unwrap();
        assert!(mapped.as_slice() == want.as_slice(), "the stored value changed after it was sent");

        // Replacing a value tells the old length; refusals are typed.
        let small = Region::copied_from(b"small").unwrap().by_move().unwrap();
        assert_eq!(store.put("big".into(), ByValue(small)).unwrap(), Some(1 << 20));
        let anon = Region::copied_from(b"x").unwrap().by_move().unwrap();
        assert!(matches!(store.put(String::new(), ByValue(anon)), Err(CallError::App(KvError::EmptyKey))));
        let huge = Region::new(MAX_VALUE as usize + 1).unwrap().by_move().unwrap();
        assert!(matches!(store.put("huge".into(), ByValue(huge)), Err(CallError::App(KvError::TooLarge(MAX_VALUE)))));
        assert!(store.get("missing".into()).unwrap().is_none());

        // A request that does not match the interface: a region where the
        // key belongs. Refused with a fault; the implementation never sees it.
        let (mut replies, _keep) = ferry::port().unwrap();
        let once = replies.make_send_once().unwrap();
        let mut enc = ferry_idl::Encoder::new();
        enc.field(1, ByValue(ferry::RegionItem::copied_from(b"key?").unwrap()));
        port.send(enc.into_message(kv::ops::get).with_reply(once), Timeout::Infinite).unwrap();
        let reply = replies.recv(Timeout::Infinite).unwrap();
        assert_eq!(reply.op(), ferry_idl::REPLY_FAULT);
        let fault = Fault::decode(&mut Decoder::new(reply.body(), Vec::new())).unwrap();
        assert!(matches!(fault, Fault::BadRequest(_)), "{fault:?}");
        // And an operation the store does not have.
        let once = replies.make_send_once().unwrap();
        port.send(Message::new(77).with_reply(once), Timeout::Infinite).unwrap();
        let reply = replies.recv(Timeout::Infinite).unwrap();
        assert_eq!(Fault::decode(&mut Decoder::new(reply.body(), Vec::new())).unwrap(), Fault::UnknownOperation(77));

        // The same store through its RPC server.
        let mut fast = kv::Client::over_rpc(&rpc).unwrap();
        let got = fast.get("big".into()).unwrap().unwrap();
        assert_eq!(got.0.copy_out(100).unwrap(), b"small");
        assert_eq!(fast.list().unwrap(), vec![Entry { key: "big".into(), len: 5 }]);
        assert!(fast.remove("big".into()).unwrap());
        assert!(!fast.remove("big".into()).unwrap());
        assert!(fast.list().unwrap().is_empty());

        // Every client gone: the store stops and reports what reached it
        // (6 requests by port, 5 by RPC; the two refused ones never did).
        drop((store, fast, port, rpc, replies));
        let out = common::finish(child);
        assert!(out.contains("served 11 requests"), "{out}");
        assert!(out.contains(&format!("callers [{}]", rustix::process::getuid().as_raw())), "{out}");
    });
}

#[test]
fn async_clients_use_the_store_in_another_process() {
    common::watchdog("async_clients_use_the_store_in_another_process", LIMIT, || {
        let (child, port, rpc) = start_store();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let chan = ferry_idl::AsyncPortChannel::new(port.try_clone().unwrap()).unwrap();
            let mut store = kv::AsyncClient::connect(chan).await.unwrap();
            assert_eq!(store.peer_version(), 1);
            let value = Region::copied_from(&pattern(5000)).unwrap().by_move().unwrap();
            assert_eq!(store.put("k".into(), ByValue(value)).await.unwrap(), None);
            let empty = Region::copied_from(b"v").unwrap().by_move().unwrap();
            assert!(matches!(store.put(String::new(), ByValue(empty)).await, Err(CallError::App(KvError::EmptyKey))));

            let got = store.get("k".into()).await.unwrap().unwrap();
            assert_eq!(got.0.copy_out(1 << 20).unwrap(), pattern(5000));

            let chan = ferry_idl::AsyncRpcChannel::connect(&rpc, Default::default()).await.unwrap();
            let mut fast = kv::AsyncClient::connect(chan).await.unwrap();
            assert_eq!(fast.list().await.unwrap(), vec![Entry { key: "k".into(), len: 5000 }]);
            assert!(fast.remove("k".into()).await.unwrap());
        });
        drop((port, rpc));
        drop(rt);
        let out = common::finish(child);
        // put, put, get by port; list and remove by RPC (the empty key
        // reached the implementation, which refused it).
        assert!(out.contains("served 5 requests"), "{out}");
    });
}

#[test]
fn a_task_serves_the_store_over_a_port_and_an_rpc_server() {
    common::watchdog("a_task_serves_the_store_over_a_port_and_an_rpc_server", LIMIT, || {
        let (port_rx, port_tx) = ferry::port().unwrap();
        let (rpc_rx, rpc_tx) = ferry::port().unwrap();
        let store = ferry_tests::kv::SharedStore::default();
        let rpc_server = ferry::rpc::RpcServer::new(rpc_rx).unwrap();
        // Blocking clients on a thread; the servers are tasks.
        let clients = std::thread::spawn(move || {
            let mut by_port = kv::Client::over_port(port_tx).unwrap();
            let v = Region::copied_from(b"async").unwrap().by_move().unwrap();
            by_port.put("a".into(), ByValue(v)).unwrap();
            let mut by_rpc = kv::Client::over_rpc(&rpc_tx).unwrap();
            let got = by_rpc.get("a".into()).unwrap().unwrap();
            assert_eq!(got.0.copy_out(10).unwrap(), b"async");
            // An unknown operation through the RPC server: a fault.
            use ferry::rpc::Transport;
            let r = by_rpc.channel_mut().transport_mut().call(Message::new(55), Timeout::Infinite).unwrap();
            assert_eq!(Fault::decode(&mut Decoder::new(r.body(), Vec::new())).unwrap(), Fault::UnknownOperation(55));
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (a, b) = (store.clone(), store.clone());
        rt.block_on(async move {
            let mut rx = ferry::tokio::AsyncReceiveRight::new(port_rx).unwrap();
            let mut rpc = ferry::tokio::AsyncRpcServer::new(rpc_server).unwrap();
            let (mut a, mut b) = (kv::Server(a), kv::Server(b));
            let (p, r) = tokio::join!(ferry_idl::serve_port_async(&mut a, &mut rx), ferry_idl::serve_rpc_async(&mut b, &mut rpc));
            p.unwrap();
            r.unwrap();
        });
        clients.join().unwrap();
        assert_eq!(store.0.lock().unwrap().requests, 2);
    });
}

#[test]
fn a_cancelled_async_call_never_lets_its_late_reply_answer_the_next() {
    common::watchdog("a_cancelled_async_call_never_lets_its_late_reply_answer_the_next", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let mut svc = kv::Server(ferry_tests::kv::SharedStore::default());
            // The version check, then the next request is held until the
            // client has given up on it, and answered with a stale list.
            ferry_idl::serve_port_once(&mut svc, &mut rx, Timeout::Infinite).unwrap();
            let mut held = rx.recv(Timeout::Infinite).unwrap();
            wait.recv().unwrap();
            let mut enc = ferry_idl::Encoder::new();
            vec![Entry { key: "stale".into(), len: 1 }].encode(&mut enc);
            let _ = held.take_reply().unwrap().send(enc.into_message(ferry_idl::REPLY_OK), Timeout::Infinite);
            ferry_idl::serve_port(&mut svc, &mut rx).unwrap();
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut store = kv::AsyncClient::connect(ferry_idl::AsyncPortChannel::new(tx).unwrap()).await.unwrap();
            let gave_up = tokio::time::timeout(Duration::from_millis(20), store.list()).await;
            assert!(gave_up.is_err(), "the server holds the reply, so the call cannot finish");
            go.send(()).unwrap();
            assert!(store.list().await.unwrap().is_empty(), "the stale reply answered a later call");
        });
        drop(rt);
        server.join().unwrap();
    });
}

/// A channel that records each request and answers it from a script, to
/// see exactly what the generated client writes.
struct Recorder {
    sent: Vec<Message>,
    /// The server's answer to the version check of the interface recorded.
    hello: fn(Message) -> Message,
}

impl Recorder {
    fn of<I: ferry_idl::Interface>() -> Recorder {
        Recorder { sent: Vec::new(), hello: ferry_idl::answer_hello::<I> }
    }
}

impl ferry_idl::Channel for Recorder {
    fn call(&mut self, req: Message) -> Result<Message, ferry_idl::IdlError> {
        let reply = if req.op() == ferry_idl::OP_HELLO {
            let mut copy = Message::new(req.op()).with_body(req.body().to_vec());
            copy.take_items();
            (self.hello)(copy)
        } else {
            ferry_idl::fault_message(Fault::UnknownOperation(0))
        };
        self.sent.push(req);
        Ok(reply)
    }
    fn send(&mut self, msg: Message) -> Result<(), ferry_idl::IdlError> {
        self.sent.push(msg);
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn item_kinds(m: &Message) -> Vec<&'static str> {
    m.items()
        .iter()
        .map(|i| match i {
            Item::Region(_) => "region",
            Item::Send(_) => "send_right",
            Item::SendOnce(_) => "send_once_right",
            Item::Receive(_) => "receive_right",
            Item::Pager(_) => "pager",
        })
        .collect()
}

/// What the example store's definition says and writes, as other
/// languages must: its description, and the exact bytes of its requests
/// and replies.
fn contract() -> serde_json::Value {
    let mut client = kv::Client::connect(Recorder::of::<kv::Protocol>()).unwrap();
    let _ = client.put("k".into(), ByValue(ferry::RegionItem::copied_from(b"v").unwrap()));
    let _ = client.get("key".into());
    let _ = client.remove("k".into());
    let _ = client.list();
    let sent = client.into_channel().sent;
    let requests: Vec<serde_json::Value> = sent
        .iter()
        .map(|m| serde_json::json!({ "op": m.op(), "body_hex": hex(m.body()), "items": item_kinds(m) }))
        .collect();
    let reply = |r: Message| serde_json::json!({ "op": r.op(), "body_hex": hex(r.body()), "items": item_kinds(&r) });
    let mut enc = ferry_idl::Encoder::new();
    Some(1u64).encode(&mut enc);
    let put_replaced = enc.into_message(ferry_idl::REPLY_OK);
    let mut enc = ferry_idl::Encoder::new();
    KvError::TooLarge(MAX_VALUE).encode(&mut enc);
    let put_too_large = enc.into_message(ferry_idl::REPLY_ERR);
    let mut enc = ferry_idl::Encoder::new();
    vec![Entry { key: "k".into(), len: 1 }].encode(&mut enc);
    let list = enc.into_message(ferry_idl::REPLY_OK);
    serde_json::json!({
        "description": kv::describe(),
        "requests": {
            "hello": requests[0],
            "put(\"k\", region of b\"v\")": requests[1],
            "get(\"key\")": requests[2],
            "remove(\"k\")": requests[3],
            "list()": requests[4],
        },
        "replies": {
            "put: Ok(Some(1))": reply(put_replaced),
            "put: Err(TooLarge(64 MiB))": reply(put_too_large),
            "list: [Entry { key: \"k\", len: 1 }]": reply(list),
            "fault: UnknownOperation(77)": reply(ferry_idl::fault_message(Fault::UnknownOperation(77))),
        },
    })
}

/// Checks `now` against the contract file `tests/idl/NAME` and returns
/// the file's contents (`FERRY_BLESS=1` rewrites the file from `now`
/// first, for a deliberate change; `what_else` says what else such a
/// change needs).
fn matches_contract_file(name: &str, now: serde_json::Value, what_else: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("idl").join(name);
    if std::env::var_os("FERRY_BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&now).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("tests/idl/{name}: {e}"));
    let want: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(now, want, "the contract in tests/idl/{name} changed; if that is deliberate, {what_else}rerun with FERRY_BLESS=1");
    want
}

#[test]
fn the_example_store_writes_what_its_contract_file_says() {
    // `tests/idl/example.kv.json` is the contract other languages' stubs
    // are checked against; a change to the definition or the encoding that
    // alters it must be deliberate (FERRY_BLESS=1 rewrites the file).
    let want = matches_contract_file("example.kv.json", contract(), "");
    // The file says what the interface is.
    assert_eq!(want["description"]["interface"], "example.kv");
    assert_eq!(want["requests"]["get(\"key\")"]["op"], 2);
    // get("key"): field 1, 7 bytes long: a string of 3 bytes.
    assert_eq!(want["requests"]["get(\"key\")"]["body_hex"], "010007000000030000006b6579");
}

/// The name service's protocol as other languages must speak it: its
/// description and the exact bytes of each request and of the replies.
fn names_contract() -> serde_json::Value {
    use ferry::bootstrap::{protocol, Budget, Limit, Listing, NameEntry, Refusal};
    let mut client = protocol::Client::connect(Recorder::of::<protocol::Protocol>()).unwrap();
    let (_rx, tx) = ferry::port().unwrap();
    let _ = client.register("svc".into(), tx);
    let _ = client.lookup("svc".into());
    let _ = client.list();
    let _ = client.unregister("svc".into());
    let (_rx2, tx2) = ferry::port().unwrap();
    let _ = client.register_system("svc".into(), tx2);
    let (_rx3, tx3) = ferry::port().unwrap();
    let _ = client.register_system_service("svc".into(), tx3);
    let sent = client.into_channel().sent;
    let m = |m: &Message| serde_json::json!({ "op": m.op(), "body_hex": hex(m.body()), "items": item_kinds(m) });
    let encoded = |op: u32, f: &dyn Fn(&mut ferry_idl::Encoder)| {
        let mut enc = ferry_idl::Encoder::new();
        f(&mut enc);
        m(&enc.into_message(op))
    };
    let entry = NameEntry { name: "svc".into(), uid: 1000, owner_pid: 42, queued_bytes: 0 };
    serde_json::json!({
        "description": protocol::describe(),
        "requests": {
            "hello": m(&sent[0]),
            "register(\"svc\", send right)": m(&sent[1]),
            "lookup(\"svc\")": m(&sent[2]),
            "list()": m(&sent[3]),
            "unregister(\"svc\")": m(&sent[4]),
            "register_system(\"svc\", send right)": m(&sent[5]),
            "register_system_service(\"svc\", send right)": m(&sent[6]),
        },
        "replies": {
            "register: Ok(())": encoded(ferry_idl::REPLY_OK, &|_| {}),
            "lookup: Err(NotFound)": encoded(ferry_idl::REPLY_ERR, &|e| Refusal::NotFound.encode(e)),
            "register: Err(LimitReached(names 256))":
                encoded(ferry_idl::REPLY_ERR, &|e| Refusal::LimitReached(Budget { what: Limit::Names, limit: 256 }).encode(e)),
            "list: Inline([svc of uid 1000, pid 42])": encoded(ferry_idl::REPLY_OK, &|e| Listing::Inline(vec![entry.clone()]).encode(e)),
        },
    })
}

#[test]
fn the_name_service_speaks_what_its_contract_file_says() {
    // `tests/idl/ferry.names.json` fixes the name service's protocol (its
    // description and bytes) for stubs in other languages and for old
    // peers; a change must be deliberate (FERRY_BLESS=1 rewrites it) and
    // come with a new version (docs/interfaces.md, "Evolution").
    let want = matches_contract_file("ferry.names.json", names_contract(), "give it a new version and ");
    assert_eq!((want["description"]["interface"].as_str(), want["description"]["version"].as_u64()), (Some("ferry.names"), Some(5)));
    // Version 3 added register_system (operation 5), version 4
    // register_system_service (operation 6); version 5 marks answers
    // (bit 31 of their operation id), which no older peer reads.
    assert_eq!(want["description"]["compatible"].as_u64(), Some(5), "{}", want["description"]);
    assert_eq!(want["replies"]["lookup: Err(NotFound)"]["op"], ferry_idl::REPLY_ERR);
    assert_eq!(want["requests"]["register_system(\"svc\", send right)"]["op"], 5);
    assert_eq!(want["requests"]["register_system_service(\"svc\", send right)"]["op"], 6);
    // lookup("svc"): operation 2, field 1 of 7 bytes: a string of 3.
    assert_eq!(want["requests"]["lookup(\"svc\")"]["op"], 2);
    assert_eq!(want["requests"]["lookup(\"svc\")"]["body_hex"], "01000700000003000000737663");
    // register carries the right as item 0.
    assert_eq!(want["requests"]["register(\"svc\", send right)"]["items"], serde_json::json!(["send_right"]));
}

ferry_idl::interface! {
    /// A service that acts on who the kernel says sent each request: it
    /// forgets what it keeps when root asks, and only then.
    pub mod keeper: "example.keeper", version 1, compatible 1 {
        /// Forgets everything kept (honoured from root only).
        oneway forget_all() = 1;
    }
}

/// The keeper of [`keeper`]: records the uid of every `forget_all` that
/// reached it.
struct Keeper(std::sync::Arc<std::sync::Mutex<Vec<u32>>>);

impl keeper::Service for Keeper {
    fn forget_all(&mut self, ctx: &ferry_idl::Context) {
        self.0.lock().unwrap().push(ctx.sender.map_or(u32::MAX, |c| c.uid));
    }
}

/// A confused deputy: another user asks a store run by root to put a value
/// too large for it, naming as reply right a send right to another service
/// of root's. The store's refusal (`TooLarge(64 MiB)`, operation id
/// `REPLY_ERR`) is sent to that service by root; it must never read as
/// that service's operation 1 asked by root.
#[test]
fn an_answer_sent_to_another_service_is_never_taken_as_a_request() {
    const NAME: &str = "an_answer_sent_to_another_service_is_never_taken_as_a_request";
    if !common::can_play_other_user(NAME) {
        return;
    }
    common::watchdog(NAME, LIMIT, || {
        let (store_child, store, rpc) = start_store();
        drop(rpc);
        let dropped = ferry_idl::answers_dropped();
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (mut keeper_rx, keeper_tx) = ferry::port().unwrap();
        let mut server = keeper::Server(Keeper(asked.clone()));
        let keeper_thread = std::thread::spawn(move || ferry_idl::serve_port(&mut server, &mut keeper_rx));

        let (mut rx, tx) = ferry::port().unwrap();
        let mut cmd = common::peer_command_as(common::NOBODY, std::path::Path::new("/nonexistent"), "idl-answer-elsewhere", &[]);
        cmd.pass_right(&tx).unwrap();
        drop(tx);
        let attacker = cmd.spawn().unwrap();
        drop(cmd);
        let mut hello = rx.recv(Timeout::After(Duration::from_secs(30))).expect("the other user's peer did not start");
        let Some(Item::Send(to_attacker)) = hello.take_items().into_iter().next() else { panic!("the peer sent no right") };
        to_attacker.send(Message::new(1).with_item(store).with_item(keeper_tx), Timeout::Infinite).unwrap();
        let out = common::finish(attacker);
        assert!(out.contains("sent"), "{out}");

        // The peer's own request went after the store's answer: once the
        // keeper saw it, it saw everything that was sent to it.
        for _ in 0..6000 {
            if asked.lock().unwrap().contains(&common::NOBODY) {
                break;
            }
            common::nap();
        }
        let asked = asked.lock().unwrap().clone();
        assert!(asked.contains(&common::NOBODY), "the peer's own request never reached the keeper: {asked:?}");
        assert!(!asked.contains(&0), "the store's answer reached the keeper as root's request: {asked:?}");
        assert!(ferry_idl::answers_dropped() > dropped, "the keeper did not count the answer it dropped");
        drop(to_attacker);
        keeper_thread.join().unwrap().unwrap();
        common::finish(store_child);
    });
}
