//! A right and a region crossing hosts: two network nodes, `a` and `b`,
//! linked over loopback QUIC with mutual TLS (in one process here; across
//! machines each host runs `ferry-netd`). A service on `a` is exported as
//! `greeter`; a client on `b` looks up `greeter@a`, sends it a 4 MiB region
//! and a send right to its own port, and the service answers through that
//! right. The client's right comes back home as its original port.
//!
//! `cargo run -p ferry-net --example net_demo`

use std::os::fd::AsFd;
use std::time::Duration;

use ferry::{Item, Message, RegionItem, Timeout};
use ferry_net::node::key_of;
use ferry_net::{Identity, Node, NodeConfig, Peer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wait = Timeout::After(Duration::from_secs(10));
    let here = "127.0.0.1:0".parse()?;
    let (ia, ib) = (Identity::generate("a")?, Identity::generate("b")?);
    let a = Node::start(NodeConfig::new(ia.clone(), vec![Peer { name: "b".into(), cert: ib.cert.clone() }], here))?;
    let b = Node::start(NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], here))?;
    b.connect("a", a.local_addr()?)?;
    println!("host b linked to host a at {} (each trusts exactly the other's certificate)", a.local_addr()?);

    // Host a: a service, exported under one name.
    let (mut service, to_service) = ferry::port()?;
    a.export("greeter", to_service);
    let server = std::thread::spawn(move || -> Result<(), String> {
        let mut req = service.recv(wait).map_err(|e| e.to_string())?;
        let mut items = req.take_items().into_iter();
        let (Some(Item::Send(reply_to)), Some(Item::Region(region))) = (items.next(), items.next()) else {
            return Err("expected a send right and a region".into());
        };
        let bytes = region.copy_out(64 << 20).map_err(|e| e.to_string())?;
        let sum: u64 = bytes.iter().map(|&b| u64::from(b)).sum();
        println!("host a: got {} region bytes (sum {sum}) and a send right; answering through it", bytes.len());
        let answer = Message::new(2).with_body(format!("hello from a, your bytes sum to {sum}")).with_item(reply_to.try_clone().map_err(|e| e.to_string())?);
        reply_to.send(answer, wait).map_err(|e| e.to_string())
    });

    // Host b: a client holding a proxy for greeter@a.
    let greeter = b.lookup("greeter@a")?;
    let (mut inbox, inbox_tx) = ferry::port()?;
    let original = key_of(inbox_tx.as_fd())?;
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 7) as u8).collect();
    greeter.send(Message::new(1).with_item(inbox_tx).with_item(RegionItem::copied_from(&data)?), wait)?;
    println!("host b: sent a 4 MiB region and a send right to greeter@a");
    let mut answer = inbox.recv(wait)?;
    println!("host b: {}", String::from_utf8_lossy(answer.body()));
    let Some(Item::Send(back)) = answer.take_items().pop() else { return Err("no right came back".into()) };
    let home = key_of(back.as_fd())? == original;
    println!("host b: the send right that came back is {}", if home { "the original port (no proxy chain)" } else { "a proxy" });
    server.join().map_err(|_| "server panicked")??;
    for l in b.links() {
        println!("host b: link to {}: up {}, {} imports, {} exports", l.peer, l.up, l.imports, l.exports);
    }
    if !home {
        return Err("the right did not come home".into());
    }
    Ok(())
}
