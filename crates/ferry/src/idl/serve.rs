//! Server loops: receive a request, let the generated dispatcher check it
//! and run the implementation, send its reply; over a port or over an RPC
//! server's connections.

use crate::rpc::{RpcError, RpcServer};
use crate::{Message, ReceiveRight, RecvError, SendError, Timeout};

use crate::idl::{fault_message, Answer, Encoder, Fault};

/// How a request arrived, which decides whether and how it is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Through a port; `reply` tells whether it carried a reply right.
    Port {
        /// The request carried a reply right.
        reply: bool,
    },
    /// Through an RPC connection: every request is answered.
    Rpc,
}

impl Route {
    /// Whether the sender can be answered.
    pub fn can_reply(self) -> bool {
        matches!(self, Route::Rpc | Route::Port { reply: true })
    }

    /// The fault reply, where the sender can be answered.
    pub fn fault(self, f: Fault) -> Option<Message> {
        self.can_reply().then(|| fault_message(f))
    }
}

/// A server of one interface: the generated `Server` wrapper of an
/// implementation.
pub trait Dispatch {
    /// Checks `req` against the interface, runs the implementation if it
    /// matches, and returns the reply to send (`None` when there is no one
    /// to answer, for a one-way operation through a port, or for an answer
    /// through a port: an id with [`crate::idl::ANSWER`] set is never a
    /// request, and is dropped unanswered).
    fn dispatch(&mut self, req: Message, route: Route) -> Option<Message>;

    /// As [`dispatch`](Dispatch::dispatch), with the reply of an
    /// operation's outcome written into `out` ([`Answer::Encoded`]), an
    /// encoder the caller keeps from request to request: [`serve_rpc`]
    /// writes its two pieces into the connection's slot without joining
    /// them and allocates nothing per call for the framing. The generated
    /// servers do this; the default answers with
    /// [`dispatch`](Dispatch::dispatch)'s message.
    fn dispatch_encoded(&mut self, req: Message, route: Route, out: &mut Encoder) -> Option<Answer> {
        let _ = out;
        self.dispatch(req, route).map(Answer::Message)
    }
}

/// Receives one request on `rx` (waiting as `timeout` allows), dispatches
/// it and sends the reply. The reply never waits for room: a client that
/// supplied a reply right to a full queue loses its reply instead of
/// stalling the server for everybody.
///
/// # Errors
/// The receive right's error ([`RecvError::Timeout`],
/// [`RecvError::NoSenders`], …). A malformed message
/// ([`RecvError::BadMessage`]) or a destroyed send-once right is reported
/// too; the port stays usable.
pub fn serve_port_once(svc: &mut impl Dispatch, rx: &mut ReceiveRight, timeout: Timeout) -> Result<(), RecvError> {
    let mut req = rx.recv(timeout)?;
    let reply = req.take_reply();
    let route = Route::Port { reply: reply.is_some() };
    if let (Some(out), Some(right)) = (svc.dispatch(req, route), reply) {
        if let Err(failed) = right.send(out, Timeout::Zero) {
            // The answer could not be carried: say so instead.
            let (err, _, right) = failed.into_parts();
            if let SendError::TooLarge(why) = err {
                let _ = right.send(fault_message(Fault::ReplyTooLarge(why)), Timeout::Zero);
            }
        }
    }
    Ok(())
}

/// Serves requests on `rx` until every sender is gone. Malformed messages
/// and unused reply rights of clients are skipped.
///
/// # Errors
/// A failure of the receive right other than those.
pub fn serve_port(svc: &mut impl Dispatch, rx: &mut ReceiveRight) -> Result<(), RecvError> {
    loop {
        match serve_port_once(svc, rx, Timeout::Infinite) {
            Ok(()) | Err(RecvError::BadMessage(_)) | Err(RecvError::SendOnceDropped) => {}
            Err(RecvError::NoSenders) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Serves calls on `server`'s connections until it has no connections and
/// no send right to its port is left; `timeout` bounds each wait.
///
/// # Errors
/// A failure of the server other than [`RpcError::NoClients`] (which ends
/// the loop); [`RpcError::Timeout`] when a wait found nothing in time.
pub fn serve_rpc(svc: &mut impl Dispatch, server: &mut RpcServer, timeout: Timeout) -> Result<(), RpcError> {
    let mut reply = None;
    let mut enc = Encoder::new();
    loop {
        match server.reply_and_wait(reply.take(), timeout) {
            Ok((conn, req)) => match svc.dispatch_encoded(req, Route::Rpc, &mut enc) {
                Some(Answer::Encoded(op)) if !enc.has_items() => {
                    let (head, tail) = enc.pieces_mut();
                    match server.reply_parts(conn, op, head, tail) {
                        // As `reply_and_wait` treats them: the client is
                        // gone, or was told its reply was too large.
                        Ok(()) | Err(RpcError::PeerDead | RpcError::Protocol { .. } | RpcError::TooLarge(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Some(Answer::Message(m)) => reply = Some((conn, m)),
                // Items travel over the socket, in a message.
                Some(Answer::Encoded(op)) => reply = Some((conn, std::mem::take(&mut enc).into_message(op))),
                None => reply = Some((conn, fault_message(Fault::BadRequest("no answer".into())))),
            },
            Err(RpcError::NoClients) => return Ok(()),
            // The client was told its reply was too large; go on serving.
            Err(RpcError::TooLarge(_)) => {}
            Err(e) => return Err(e),
        }
    }
}
