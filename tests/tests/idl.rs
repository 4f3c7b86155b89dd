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
