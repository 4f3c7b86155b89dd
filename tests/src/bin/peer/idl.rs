//! Peer role for the typed-interface tests (`tests/tests/idl.rs`): the
//! example key-value store of `ferry_tests::kv`, served over a port and
//! over an RPC server in this process.
//!
//! The role takes its parent's send right with `ferry::spawn::inherited`,
//! sends back one message carrying the store's port right and its RPC
//! server's right, serves both until every client is gone, then prints
//! what reached the implementation.
//!
//! For the other languages' stubs (`python/tests/test_idl.py`,
//! `crates/ferry-ffi/tests/c.rs`):
//! - `idl-kv-named NAME`: the same store, its port registered as `NAME`
//!   and its RPC server's port as `NAME.rpc`; serves until every client is
//!   gone, then prints `served N requests`.
//! - `idl-kv-client NAME`: looks `NAME` up (a store in another language)
//!   and runs the script in [`kv_script`] through the Rust client, over the
//!   port, then (if `NAME.rpc` is registered) over RPC; prints
//!   `kv-client-ok` when every answer was the one expected.
//!
//! For the confused-deputy test (`tests/tests/idl.rs`), run as another
//! user:
//! - `idl-answer-elsewhere`: takes its parent's send right, sends back one
//!   message with a send right to a port of its own, and receives there a
//!   message carrying a send right to a store (another user's) and one to
//!   another service of that user. It asks the store to keep a value larger
//!   than it takes, naming the service as the reply right (the store's
//!   refusal is then sent to the service, by the store's user), makes one
//!   call of its own so that the store has answered, then sends the service
//!   its operation 1 itself, and prints `sent`.

use ferry::rpc::RpcServer;
use ferry::{Message, Timeout};
use ferry_tests::kv::{kv, SharedStore};

use crate::Outcome;

/// Runs `role` if this module knows it.
pub fn run(role: &str, _args: &[String]) -> Outcome {
    Some(match role {
        "idl-kv-server" => kv_server(),
        "idl-kv-named" => kv_named(_args),
        "idl-kv-client" => kv_client(_args),
        "idl-answer-elsewhere" => answer_elsewhere(),
        _ => return None,
    })
}

type R = Result<(), Box<dyn std::error::Error>>;

fn kv_server() -> R {
    let parent = ferry::spawn::inherited()?;
    let store = SharedStore::default();
    let (mut port_rx, port_tx) = ferry::port()?;
    let (rpc_rx, rpc_tx) = ferry::port()?;
    let mut rpc = RpcServer::new(rpc_rx)?;
    parent.send(Message::new(1).with_item(port_tx).with_item(rpc_tx), Timeout::Infinite)?;
    drop(parent);

    let mut by_port = kv::Server(store.clone());
    let port = std::thread::spawn(move || ferry_idl::serve_port(&mut by_port, &mut port_rx));
    let mut by_rpc = kv::Server(store.clone());
    ferry_idl::serve_rpc(&mut by_rpc, &mut rpc, Timeout::Infinite)?;
    port.join().map_err(|_| "the port server panicked")??;

    let s = store.0.lock().map_err(|_| "the store's lock is poisoned")?;
    let mut callers = s.callers.clone();
    callers.sort_unstable();
    callers.dedup();
    println!("served {} requests", s.requests);
    println!("callers {callers:?}");
    Ok(())
}

/// Looks `name` up, waiting up to 30 s for it to be registered.
fn lookup_wait(bs: &mut ferry::Bootstrap, name: &str) -> Result<ferry::SendRight, Box<dyn std::error::Error>> {
    for _ in 0..6000 {
        match bs.lookup(name) {
            Ok(r) => return Ok(r),
            Err(ferry::NameError::NotFound) => std::thread::sleep(std::time::Duration::from_millis(5)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!("{name} was never registered").into())
}

fn kv_named(args: &[String]) -> R {
    let name = args.first().ok_or("usage: idl-kv-named NAME")?;
    let store = SharedStore::default();
    let (mut port_rx, port_tx) = ferry::port()?;
    let (rpc_rx, rpc_tx) = ferry::port()?;
    let mut rpc = RpcServer::new(rpc_rx)?;
    let mut bs = ferry::Bootstrap::connect()?;
    bs.register(name, &port_tx)?;
    bs.register(&format!("{name}.rpc"), &rpc_tx)?;
    println!("ready");
    drop((port_tx, rpc_tx));
    let mut by_port = kv::Server(store.clone());
    let port = std::thread::spawn(move || ferry_idl::serve_port(&mut by_port, &mut port_rx));
    let mut by_rpc = kv::Server(store.clone());
    // The name server holds a send right to each port until the names go:
    // the client's test unregisters them when it is done.
    ferry_idl::serve_rpc(&mut by_rpc, &mut rpc, Timeout::Infinite)?;
    port.join().map_err(|_| "the port server panicked")??;
    let s = store.0.lock().map_err(|_| "the store's lock is poisoned")?;
    println!("served {} requests", s.requests);
    Ok(())
}

/// The script a client in any language runs against a store in another:
/// every operation, a typed error, a by-value region both ways, a missing
/// key, and the store's listing.
fn kv_script<C: ferry_idl::Channel>(client: &mut kv::Client<C>, tag: &str) -> R {
    use ferry_idl::ByValue;
    use ferry_tests::kv::{Entry, KvError};
    let key = format!("rust-{tag}");
    let value = format!("value from Rust over {tag}").into_bytes();
    let region = ferry::RegionItem::copied_from(&value)?;
    if client.put(key.clone(), ByValue(region))?.is_some() {
        return Err("a first put replaced something".into());
    }
    let got = client.get(key.clone())?.ok_or("get found nothing")?;
    if !got.0.mode().is_by_value() || got.0.copy_out(1 << 20)? != value {
        return Err("get returned other bytes".into());
    }
    match client.put(String::new(), ByValue(ferry::RegionItem::copied_from(b"x")?)) {
        Err(ferry_idl::CallError::App(KvError::EmptyKey)) => {}
        other => return Err(format!("an empty key gave {other:?}, not EmptyKey").into()),
    }
    let list = client.list()?;
    if !list.contains(&Entry { key: key.clone(), len: value.len() as u64 }) {
        return Err(format!("list lacks {key}: {list:?}").into());
    }
    if !client.remove(key.clone())? || client.remove(key.clone())? {
        return Err("remove did not report what was there".into());
    }
    if client.get(key)?.is_some() {
        return Err("a removed key is still there".into());
    }
    Ok(())
}

fn kv_client(args: &[String]) -> R {
    let name = args.first().ok_or("usage: idl-kv-client NAME")?;
    let mut bs = ferry::Bootstrap::connect()?;
    let to_store = lookup_wait(&mut bs, name)?;
    let mut by_port = kv::Client::over_port(to_store)?;
    kv_script(&mut by_port, "port")?;
    if let Ok(rpc) = bs.lookup(&format!("{name}.rpc")) {
        let mut by_rpc = kv::Client::over_rpc(&rpc)?;
        kv_script(&mut by_rpc, "rpc")?;
    }
    println!("kv-client-ok");
    Ok(())
}

/// The attack of the confused-deputy test: see the module's documentation.
fn answer_elsewhere() -> R {
    use ferry::{Item, Region};
    use ferry_idl::{ByValue, Encoder};
    const WAIT: Timeout = Timeout::After(std::time::Duration::from_secs(30));
    let parent = ferry::spawn::inherited()?;
    let (mut rx, tx) = ferry::port()?;
    parent.send(Message::new(1).with_item(tx), WAIT)?;
    let mut rights = rx.recv(WAIT)?;
    let mut items = rights.take_items().into_iter();
    let (Some(Item::Send(store)), Some(Item::Send(service))) = (items.next(), items.next()) else {
        return Err("expected a send right to the store and one to the service".into());
    };
    // A value over the store's limit: refused with TooLarge(64 MiB), whose
    // bytes read as a record of two empty fields the service does not
    // know, so as operation 1 with no arguments.
    let huge = Region::new(ferry_tests::kv::MAX_VALUE as usize + 1)?.by_move()?;
    let mut enc = Encoder::new();
    enc.field(1, String::from("huge"));
    enc.field(2, ByValue(huge));
    store.send(enc.into_message(kv::ops::put).with_reply(service.try_clone()?), WAIT)?;
    // The store serves its port in order: once this call is answered, so
    // is the put.
    kv::Client::over_port(store)?.list()?;
    service.send(Message::new(1), WAIT)?;
    println!("sent");
    Ok(())
}
