//! An echo server and its client on tokio, in two processes.
//!
//! The client starts the server as a child process and passes it a send
//! right to one of its ports (`ferry::spawn`); the server sends back a send
//! right to its RPC port through it, then serves calls in one task. The
//! client makes concurrent-looking calls from one task, abandons one call
//! on a timeout (the next call still gets its own reply), and stops the
//! server.
//!
//! ```sh
//! cargo run -p ferry --features tokio --example async_echo -- 1000
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use ferry::rpc::{ConnectOptions, RpcError, RpcServer};
use ferry::spawn::CommandExt;
use ferry::tokio::{AsyncConnection, AsyncReceiveRight, AsyncRpcServer, AsyncSendRight};
use ferry::{Item, Message};

const OP_ECHO: u32 = 1;
const OP_SLOW: u32 = 2;
const OP_EXIT: u32 = 3;

type Error = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("server") {
        return server().await;
    }
    let calls: u32 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1000);
    client(calls).await
}

/// The child: sends its RPC port's send right to the parent, then serves.
async fn server() -> Result<(), Error> {
    let parent = AsyncSendRight::new(ferry::spawn::inherited()?)?;
    let (port, to_port) = ferry::port()?;
    let mut server = AsyncRpcServer::new(RpcServer::new(port)?)?;
    parent.send(Message::new(0).with_item(to_port)).await?;
    drop(parent);
    let mut reply = None;
    loop {
        let (conn, req) = match server.reply_and_wait(reply.take()).await {
            Ok(r) => r,
            Err(RpcError::NoClients) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let answer = match req.op() {
            OP_SLOW => {
                // Other connections would be served meanwhile in a real
                // server; here the sleep just makes the client give up.
                tokio::time::sleep(Duration::from_millis(100)).await;
                Message::new(OP_SLOW).with_body(req.body().to_vec())
            }
            OP_EXIT => {
                server.reply(conn, Message::new(OP_EXIT))?;
                return Ok(());
            }
            op => Message::new(op).with_body(req.body().to_vec()),
        };
        reply = Some((conn, answer));
    }
}

/// The parent: starts the server, then calls it.
async fn client(calls: u32) -> Result<(), Error> {
    let (from_child, to_parent) = ferry::port()?;
    let mut from_child = AsyncReceiveRight::new(from_child)?;
    let mut child = Command::new(std::env::current_exe()?).arg("server").pass_right(&to_parent)?.spawn()?;
    drop(to_parent);
    let mut hello = from_child.recv().await?;
    let Some(Item::Send(to_server)) = hello.take_items().pop() else {
        return Err("the server sent no send right".into());
    };
    let mut conn = AsyncConnection::connect(&to_server, ConnectOptions::default()).await?;

    let start = Instant::now();
    for i in 0..calls {
        let body = i.to_le_bytes();
        let r = conn.call(Message::new(OP_ECHO).with_body(body)).await?;
        if r.body() != body {
            return Err(format!("call {i}: wrong reply").into());
        }
    }
    let per_call = start.elapsed() / calls.max(1);
    println!("{calls} calls of 4 bytes echoed, {per_call:?} per round trip");

    // A call given up on: the server answers it late, and the next call
    // still gets its own reply.
    let gave_up = tokio::time::timeout(Duration::from_millis(10), conn.call(Message::new(OP_SLOW).with_body(*b"late"))).await;
    let next = conn.call(Message::new(OP_ECHO).with_body(*b"next")).await?;
    println!("abandoned call timed out: {}; next call got its own reply: {}", gave_up.is_err(), next.body() == b"next");

    conn.call(Message::new(OP_EXIT)).await?;
    let status = child.wait()?;
    println!("server exited: {status}");
    if !status.success() || next.body() != b"next" {
        return Err("the server failed".into());
    }
    Ok(())
}
