//! How a typed client reaches its server: over a port (each call carries a
//! send-once right for its reply) or over an RPC connection (calls whose
//! request fits the shared slot take the fast path; the rest travel over
//! the connection's socket, which `ferry::rpc::Connection` chooses itself).

use crate::rpc::{ConnectOptions, Connection, SplitReply, Transport};
use crate::{Message, ReceiveRight, RecvError, SendRight, Timeout};

use crate::idl::{decode_reply, IdlError, NoError};

/// Carries typed requests to a server.
pub trait Channel {
    /// Sends `req` and returns the server's reply.
    ///
    /// # Errors
    /// The transport's failure as an [`IdlError`].
    fn call(&mut self, req: Message) -> Result<Message, IdlError>;

    /// Sends a one-way request.
    ///
    /// # Errors
    /// The transport's failure as an [`IdlError`]; over an RPC connection
    /// also the server's refusal ([`IdlError::Fault`]).
    fn send(&mut self, msg: Message) -> Result<(), IdlError>;

    /// As [`call`](Channel::call), leaving `req`'s body buffer with the
    /// caller where the transport only read it (an RPC call on the fast
    /// path), so a client that encodes every request into the same message
    /// allocates once. The default takes the request whole.
    ///
    /// # Errors
    /// As [`call`](Channel::call).
    fn call_reusing(&mut self, req: &mut Message) -> Result<Message, IdlError> {
        self.call(std::mem::take(req))
    }

    /// Sends operation `op` whose body is `head` then `tail` (no items)
    /// and leaves the reply taken apart in `reply`, as
    /// [`Transport::call_parts`] does; an RPC connection copies both
    /// pieces straight into its slot. The default joins them into one
    /// message.
    ///
    /// # Errors
    /// As [`call`](Channel::call).
    fn call_parts(&mut self, op: u32, head: &[u8], tail: &[u8], reply: &mut SplitReply) -> Result<(), IdlError> {
        let msg = self.call(Message::new(op).with_body([head, tail].concat()))?;
        reply.fill(msg);
        Ok(())
    }
}

/// A channel over a send right to the server's port; replies come back
/// through a send-once right to a private reply port.
#[derive(Debug)]
pub struct PortChannel {
    to: SendRight,
    replies: Option<ReceiveRight>,
    timeout: Timeout,
}

impl PortChannel {
    /// A channel to the port `to` names, waiting for ever for each reply.
    pub fn new(to: SendRight) -> PortChannel {
        PortChannel { to, replies: None, timeout: Timeout::Infinite }
    }

    /// Sets how long a call waits to send and then for its reply.
    pub fn set_timeout(&mut self, timeout: Timeout) {
        self.timeout = timeout;
    }

    /// The send right to the server's port.
    pub fn right(&self) -> &SendRight {
        &self.to
    }
}

impl Channel for PortChannel {
    fn call(&mut self, req: Message) -> Result<Message, IdlError> {
        if self.replies.is_none() {
            let (rx, _tx) = crate::port().map_err(|e| IdlError::Recv(RecvError::Io(e)))?;
            self.replies = Some(rx);
        }
        let replies = self.replies.as_mut().expect("made above");
        let once = replies.make_send_once().map_err(|e| IdlError::Recv(RecvError::Io(e)))?;
        self.to.send(req.with_reply(once), self.timeout).map_err(|f| IdlError::Send(f.into_error()))?;
        match replies.recv(self.timeout) {
            Ok(m) => Ok(m),
            Err(RecvError::SendOnceDropped) => Err(IdlError::NoReply),
            Err(e) => {
                // A late reply must never answer a later call: start over
                // with a fresh reply port.
                self.replies = None;
                Err(IdlError::Recv(e))
            }
        }
    }

    fn send(&mut self, msg: Message) -> Result<(), IdlError> {
        self.to.send(msg, self.timeout).map_err(|f| IdlError::Send(f.into_error()))
    }
}

/// A channel over an RPC connection ([`Connection`] by default).
#[derive(Debug)]
pub struct RpcChannel<T: Transport = Connection> {
    conn: T,
    timeout: Timeout,
}

impl<T: Transport> RpcChannel<T> {
    /// A channel over `conn`, waiting for ever for each reply.
    pub fn new(conn: T) -> RpcChannel<T> {
        RpcChannel { conn, timeout: Timeout::Infinite }
    }

    /// Sets how long a call waits for its reply.
    pub fn set_timeout(&mut self, timeout: Timeout) {
        self.timeout = timeout;
    }

    /// The connection.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.conn
    }
}

impl RpcChannel<Connection> {
    /// Opens a connection (with a shared slot) to the RPC server whose port
    /// `server` names.
    ///
    /// # Errors
    /// As [`Connection::connect`].
    pub fn connect(server: &SendRight, opts: ConnectOptions) -> Result<RpcChannel<Connection>, IdlError> {
        Ok(RpcChannel::new(Connection::connect(server, opts)?))
    }
}

impl<T: Transport> Channel for RpcChannel<T> {
    fn call(&mut self, req: Message) -> Result<Message, IdlError> {
        Ok(self.conn.call(req, self.timeout)?)
    }

    fn call_reusing(&mut self, req: &mut Message) -> Result<Message, IdlError> {
        Ok(self.conn.call_reusing(req, self.timeout)?)
    }

    fn call_parts(&mut self, op: u32, head: &[u8], tail: &[u8], reply: &mut SplitReply) -> Result<(), IdlError> {
        Ok(self.conn.call_parts(op, head, tail, reply, self.timeout)?)
    }

    /// The fast path has no one-way message: the server acknowledges a
    /// one-way operation once it has run it (or refuses it with a fault).
    fn send(&mut self, msg: Message) -> Result<(), IdlError> {
        let reply = self.conn.call(msg, self.timeout)?;
        decode_reply::<(), NoError>(reply)?.unwrap_or_else(|e| match e {});
        Ok(())
    }
}
