//! The RPC fast path: a client's connection (`ferry_connection_call`) and a
//! server (`ferry_rpc_server_reply_and_wait`), over a shared slot with
//! futex wake-ups.

use std::os::fd::{AsFd, AsRawFd};

use ferry::rpc::{ConnId, ConnectOptions, Connection, Policy, RpcError, RpcServer, Transport};
use ferry::Message;

use crate::handle::{free, give, obj, obj_mut, out, put, take};
use crate::message::ferry_message;
use crate::port::{ferry_receive_right, ferry_send_right};
use crate::status::{ferry_status, guard, Failure, Res};
use crate::timeout;

/// Wait policy: spin briefly while the peer runs, then sleep (the default).
pub const FERRY_POLICY_ADAPTIVE: u32 = 0;
/// Wait policy: sleep at once, never spin.
pub const FERRY_POLICY_BLOCK: u32 = 1;
/// Wait policy: busy-wait (pinned pairs on dedicated cores only).
pub const FERRY_POLICY_POLL: u32 = 2;

fn parse_policy(p: u32) -> Res<Policy> {
    match p {
        FERRY_POLICY_ADAPTIVE => Ok(Policy::Adaptive),
        FERRY_POLICY_BLOCK => Ok(Policy::Block),
        FERRY_POLICY_POLL => Ok(Policy::Poll),
        other => Err(Failure::invalid(format!("unknown policy {other}"))),
    }
}

/// A client's connection to an RPC server (opaque). Free with
/// [`ferry_connection_free`] (the server sees the connection close).
#[derive(Debug)]
pub struct ferry_connection {
    conn: Connection,
}

/// An RPC server accepting connections on a port (opaque). Free with
/// [`ferry_rpc_server_free`].
#[derive(Debug)]
pub struct ferry_rpc_server {
    server: RpcServer,
}

/// Opens a connection to the RPC server whose port `server` names, with
/// wait policy `policy` (`FERRY_POLICY_*`), waiting for the server to
/// accept as `timeout_ms` says.
///
/// # Safety
/// `server` is a live send-right handle; `out_conn` points at writable
/// storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_connection_connect(server: *const ferry_send_right, policy: u32, timeout_ms: i64, out_conn: *mut *mut ferry_connection) -> ferry_status {
    guard(|| {
        let o = out(out_conn, "out_conn")?;
        let policy = parse_policy(policy)?;
        // SAFETY: header contract: a live handle.
        let tx = unsafe { obj(server, "server") }?;
        let conn = Connection::connect(&tx.right, ConnectOptions { policy, timeout: timeout(timeout_ms) })?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_connection { conn }) };
        Ok(())
    })
}

/// Closes a connection. NULL is ignored.
///
/// # Safety
/// `conn` is NULL or a live connection handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_connection_free(conn: *mut ferry_connection) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(conn) };
        Ok(())
    });
}

/// Changes how the connection waits for replies (`FERRY_POLICY_*`).
///
/// # Safety
/// `conn` is a live connection handle used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_connection_set_policy(conn: *mut ferry_connection, policy: u32) -> ferry_status {
    guard(|| {
        let p = parse_policy(policy)?;
        // SAFETY: header contract: a live handle used by no other call.
        unsafe { obj_mut(conn, "conn") }?.conn.set_policy(p);
        Ok(())
    })
}

/// Sends the contents of `request` and waits for its reply, as
/// `timeout_ms` allows. The request handle stays the caller's (left empty).
/// `FERRY_ERR_PEER_DEAD` when the server is gone; `FERRY_ERR_TIMEOUT` when
/// no reply came in time (a late one is discarded; the connection stays
/// usable).
///
/// # Safety
/// `conn` and `request` are live handles used by no other call meanwhile;
/// `out_reply` points at writable storage for a pointer; on success it
/// holds a new message the caller frees.
#[no_mangle]
pub unsafe extern "C" fn ferry_connection_call(conn: *mut ferry_connection, request: *mut ferry_message, timeout_ms: i64, out_reply: *mut *mut ferry_message) -> ferry_status {
    guard(|| {
        let o = out(out_reply, "out_reply")?;
        // SAFETY: header contract: live handles used by no other call.
        let (c, req) = unsafe { (obj_mut(conn, "conn")?, obj_mut(request, "request")?) };
        let reply = c.conn.call(req.take_contents(), timeout(timeout_ms))?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_message::received(reply, None)) };
        Ok(())
    })
}

/// Like [`ferry_connection_call`], but the reply comes back in the same
/// handle: `msg`'s contents are sent and replaced by the reply's (L4's
/// message registers; no handle is allocated per call). On failure the
/// handle is left empty.
///
/// # Safety
/// `conn` and `msg` are live handles used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_connection_call_in_place(conn: *mut ferry_connection, msg: *mut ferry_message, timeout_ms: i64) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: live handles used by no other call.
        let (c, m) = unsafe { (obj_mut(conn, "conn")?, obj_mut(msg, "msg")?) };
        let reply = c.conn.call(m.take_contents(), timeout(timeout_ms))?;
        m.refill(reply, None);
        Ok(())
    })
}

/// Sends a reply as a reply-and-wait does before it waits: a client that
/// has gone, or that was told its reply could not travel (too large), is
/// not the server's failure.
fn send_reply(server: &mut RpcServer, conn: ConnId, reply: Message) -> Res {
    match server.reply(conn, reply) {
        Ok(()) | Err(RpcError::PeerDead | RpcError::Protocol { .. } | RpcError::TooLarge(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Makes an RPC server accepting connections on the port of `port`,
/// **consuming** the receive right (whatever the outcome).
///
/// # Safety
/// `port` is NULL or a live receive-right handle the caller does not use
/// again; `out_server` points at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_rpc_server_new(port: *mut ferry_receive_right, out_server: *mut *mut ferry_rpc_server) -> ferry_status {
    guard(|| {
        // SAFETY: the caller gives `port` up.
        let rx = unsafe { take(port, "port") }?;
        let o = out(out_server, "out_server")?;
        let server = RpcServer::new(rx.right)?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_rpc_server { server }) };
        Ok(())
    })
}

/// Frees a server: its port and every connection close. NULL is ignored.
///
/// # Safety
/// `server` is NULL or a live server handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_rpc_server_free(server: *mut ferry_rpc_server) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(server) };
        Ok(())
    });
}

/// Changes how the server waits for requests (`FERRY_POLICY_*`).
///
/// # Safety
/// `server` is a live server handle used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_rpc_server_set_policy(server: *mut ferry_rpc_server, policy: u32) -> ferry_status {
    guard(|| {
        let p = parse_policy(policy)?;
        // SAFETY: header contract: a live handle used by no other call.
        unsafe { obj_mut(server, "server") }?.server.set_policy(p);
        Ok(())
    })
}

/// Sends `reply` (NULL for none; made with `ferry_message_new_reply` from
/// the request it answers) and waits for the next request on any
/// connection, as `timeout_ms` allows. The reply handle stays the caller's
/// (left empty). A reply to a client that has gone is dropped silently; one
/// too large to travel fails its client's call (`FERRY_ERR_TOO_LARGE`
/// there) and the wait goes on.
/// Every request must be answered by a later call before its connection
/// sends another. `FERRY_ERR_NO_CLIENTS` when the port has no senders and
/// no connection is left.
///
/// # Safety
/// `server` and `reply` (if not NULL) are live handles used by no other
/// call meanwhile; `out_request` points at writable storage for a pointer;
/// on success it holds a new message the caller frees.
#[no_mangle]
pub unsafe extern "C" fn ferry_rpc_server_reply_and_wait(
    server: *mut ferry_rpc_server,
    reply: *mut ferry_message,
    timeout_ms: i64,
    out_request: *mut *mut ferry_message,
) -> ferry_status {
    guard(|| {
        let o = out(out_request, "out_request")?;
        // SAFETY: header contract: a live handle used by no other call.
        let s = unsafe { obj_mut(server, "server") }?;
        if !reply.is_null() {
            // SAFETY: non-null, so a live handle used by no other call per the header.
            let r = unsafe { obj_mut(reply, "reply") }?;
            let conn = r.conn.ok_or_else(|| Failure::new(ferry_status::FERRY_ERR_NO_REPLY_RIGHT, "the reply was not made with ferry_message_new_reply"))?;
            send_reply(&mut s.server, conn, r.take_contents())?;
        }
        let (conn, req) = s.server.reply_and_wait(None, timeout(timeout_ms))?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_message::received(req, Some(conn))) };
        Ok(())
    })
}

/// Like [`ferry_rpc_server_reply_and_wait`], with one handle for both
/// directions: if `msg` holds a request received here (it remembers its
/// connection), its current contents are sent as the reply to that request
/// (refill it with `ferry_message_reset` first: whatever it holds
/// is sent, items included); then the next request is received into it. A
/// new message (from `ferry_message_new`) sends nothing, so the first call
/// only waits. A reply too large to travel fails its client's call and the
/// wait goes on, as in [`ferry_rpc_server_reply_and_wait`]. On failure the
/// handle is left empty (no request).
///
/// # Safety
/// `server` and `msg` are live handles used by no other call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ferry_rpc_server_reply_and_wait_in_place(server: *mut ferry_rpc_server, msg: *mut ferry_message, timeout_ms: i64) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: live handles used by no other call.
        let (s, m) = unsafe { (obj_mut(server, "server")?, obj_mut(msg, "msg")?) };
        if let Some(conn) = m.conn.take() {
            let reply = m.take_contents();
            send_reply(&mut s.server, conn, reply).inspect_err(|_| m.refill(Message::new(0), None))?;
        }
        let (conn, req) = s.server.reply_and_wait(None, timeout(timeout_ms)).inspect_err(|_| m.refill(Message::new(0), None))?;
        m.refill(req, Some(conn));
        Ok(())
    })
}

/// A descriptor for an event loop (`poll`, `epoll`, libuv, ...) that polls
/// readable when the server has something to do: call
/// [`ferry_rpc_server_reply_and_wait`] (or its in-place form) with a zero
/// timeout, answering what it returns, until it says `FERRY_ERR_TIMEOUT`,
/// then wait for the descriptor again. A wait that times out marks the
/// server asleep, so that clients ring it and the descriptor hears of
/// their calls. It belongs to the server: do not read, close or change it.
///
/// # Safety
/// `server` is a live server handle; `out_fd` points at a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn ferry_rpc_server_fd(server: *const ferry_rpc_server, out_fd: *mut std::ffi::c_int) -> ferry_status {
    guard(|| {
        let o = out(out_fd, "out_fd")?;
        // SAFETY: header contract: a live handle.
        let s = unsafe { obj(server, "server") }?;
        // SAFETY: `o` checked non-null.
        unsafe { put(o, s.server.as_fd().as_raw_fd()) };
        Ok(())
    })
}
