//! Typed interfaces on tokio (with the `tokio` feature): channels whose
//! calls are awaited, for the generated `AsyncClient`, and server loops
//! that serve a generated dispatcher from a task.
//!
//! The implementation of a service stays synchronous: the loop runs each
//! request's checks and the implementation on the task, then sends the
//! reply without blocking. An implementation that waits on something long
//! should hand the work to another task or thread.

use std::future::Future;

use crate::Message;

use crate::idl::IdlError;

/// Carries typed requests to a server, awaiting replies (the async
/// counterpart of [`crate::idl::Channel`]).
pub trait AsyncChannel {
    /// Sends `req` and resolves to the server's reply.
    ///
    /// # Errors
    /// The transport's failure as an [`IdlError`].
    fn call(&mut self, req: Message) -> impl Future<Output = Result<Message, IdlError>> + Send;

    /// Sends a one-way request.
    ///
    /// # Errors
    /// As [`crate::idl::Channel::send`].
    fn send(&mut self, msg: Message) -> impl Future<Output = Result<(), IdlError>> + Send;
}

#[cfg(feature = "tokio")]
pub use with_tokio::*;

#[cfg(feature = "tokio")]
mod with_tokio {
    use crate::rpc::{ConnectOptions, RpcError};
    use crate::tokio::{AsyncConnection, AsyncReceiveRight, AsyncRpcServer, AsyncSendRight};
    use crate::{Message, RecvError, SendRight, Timeout};

    use super::AsyncChannel;
    use crate::idl::serve::{Dispatch, Route};
    use crate::idl::{decode_reply, fault_message, Fault, IdlError, NoError};

    /// An async channel over a send right to the server's port; each call
    /// waits on a private reply port for its send-once reply.
    #[derive(Debug)]
    pub struct AsyncPortChannel {
        to: AsyncSendRight,
        replies: Option<AsyncReceiveRight>,
        /// A call was dropped while waiting: its late reply could still
        /// come, so the next call uses a fresh reply port.
        in_flight: bool,
    }

    impl AsyncPortChannel {
        /// A channel to the port `to` names.
        ///
        /// # Errors
        /// Outside a tokio runtime with I/O enabled.
        pub fn new(to: SendRight) -> std::io::Result<AsyncPortChannel> {
            Ok(AsyncPortChannel { to: AsyncSendRight::new(to)?, replies: None, in_flight: false })
        }
    }

    impl AsyncChannel for AsyncPortChannel {
        async fn call(&mut self, req: Message) -> Result<Message, IdlError> {
            if self.in_flight {
                self.replies = None;
            }
            if self.replies.is_none() {
                let io = |e| IdlError::Recv(RecvError::Io(e));
                let (rx, _tx) = crate::port().map_err(io)?;
                self.replies = Some(AsyncReceiveRight::new(rx).map_err(io)?);
            }
            let replies = self.replies.as_mut().expect("made above");
            let once = replies.make_send_once().map_err(|e| IdlError::Recv(RecvError::Io(e)))?;
            self.in_flight = true;
            self.to.send(req.with_reply(once)).await?;
            let got = replies.recv().await;
            self.in_flight = false;
            match got {
                Ok(m) => Ok(m),
                Err(RecvError::SendOnceDropped) => Err(IdlError::NoReply),
                Err(e) => {
                    self.replies = None;
                    Err(IdlError::Recv(e))
                }
            }
        }

        async fn send(&mut self, msg: Message) -> Result<(), IdlError> {
            Ok(self.to.send(msg).await?)
        }
    }

    /// An async channel over an RPC connection.
    #[derive(Debug)]
    pub struct AsyncRpcChannel {
        conn: AsyncConnection,
    }

    impl AsyncRpcChannel {
        /// Opens a connection to the RPC server whose port `server` names.
        ///
        /// # Errors
        /// As [`AsyncConnection::connect`].
        pub async fn connect(server: &SendRight, opts: ConnectOptions) -> Result<AsyncRpcChannel, IdlError> {
            Ok(AsyncRpcChannel { conn: AsyncConnection::connect(server, opts).await? })
        }

        /// A channel over an open connection.
        pub fn new(conn: AsyncConnection) -> AsyncRpcChannel {
            AsyncRpcChannel { conn }
        }
    }

    impl AsyncChannel for AsyncRpcChannel {
        async fn call(&mut self, req: Message) -> Result<Message, IdlError> {
            Ok(self.conn.call(req).await?)
        }

        /// Acknowledged once run, as [`crate::idl::RpcChannel`]'s.
        async fn send(&mut self, msg: Message) -> Result<(), IdlError> {
            let reply = self.conn.call(msg).await?;
            decode_reply::<(), NoError>(reply)?.unwrap_or_else(|e| match e {});
            Ok(())
        }
    }

    /// Serves requests arriving on `rx` until every sender is gone, as
    /// [`crate::idl::serve_port`] does, from a task. Replies are sent without
    /// waiting: one that cannot be queued at once is dropped (its caller
    /// learns [`IdlError::NoReply`]).
    ///
    /// # Errors
    /// A failure of the receive right other than a malformed message or a
    /// client's unused reply right.
    pub async fn serve_port_async(svc: &mut impl Dispatch, rx: &mut AsyncReceiveRight) -> Result<(), RecvError> {
        loop {
            let mut req = match rx.recv().await {
                Ok(m) => m,
                Err(RecvError::BadMessage(_)) | Err(RecvError::SendOnceDropped) => continue,
                Err(RecvError::NoSenders) => return Ok(()),
                Err(e) => return Err(e),
            };
            let reply = req.take_reply();
            let route = Route::Port { reply: reply.is_some() };
            if let (Some(out), Some(right)) = (svc.dispatch(req, route), reply) {
                if let Err(failed) = right.send(out, Timeout::Zero) {
                    let (err, _, right) = failed.into_parts();
                    if let crate::SendError::TooLarge(why) = err {
                        let _ = right.send(fault_message(Fault::ReplyTooLarge(why)), Timeout::Zero);
                    }
                }
            }
        }
    }

    /// Serves calls on `server`'s connections until it has no connections
    /// and no send right to its port is left, as [`crate::idl::serve_rpc`] does,
    /// from a task.
    ///
    /// # Errors
    /// A failure of the server other than [`RpcError::NoClients`].
    pub async fn serve_rpc_async(svc: &mut impl Dispatch, server: &mut AsyncRpcServer) -> Result<(), RpcError> {
        let mut reply = None;
        loop {
            match server.reply_and_wait(reply.take()).await {
                Ok((conn, req)) => {
                    let out = svc.dispatch(req, Route::Rpc).unwrap_or_else(|| fault_message(Fault::BadRequest("no answer".into())));
                    reply = Some((conn, out));
                }
                Err(RpcError::NoClients) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}
