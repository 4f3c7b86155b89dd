//! The process-wide counters as `ferry stat` reads them: this binary holds a
//! single test, so nothing else in the process moves the counters under it.

use ferry::rpc::{ConnectOptions, Connection, RpcServer, Transport};
use ferry::{Message, Timeout};

#[test]
fn counters_follow_messages_calls_and_open_connections() {
    let base = ferry::counters::snapshot();
    let (rx, tx) = ferry::port().unwrap();
    let server = std::thread::spawn(move || {
        let mut srv = RpcServer::new(rx).unwrap();
        let mut reply = None;
        // Serve until the only client is gone and every send right dropped.
        loop {
            match srv.reply_and_wait(reply.take(), Timeout::Infinite) {
                Ok((id, m)) => reply = Some((id, Message::new(m.op() + 1))),
                Err(ferry::rpc::RpcError::NoClients) => return srv.connections(),
                Err(e) => panic!("server: {e}"),
            }
        }
    });
    let mut conn = Connection::connect(&tx, ConnectOptions::default()).unwrap();
    drop(tx);
    for i in 0..10 {
        assert_eq!(conn.call(Message::new(2 * i), Timeout::Infinite).unwrap().op(), 2 * i + 1);
    }
    let busy = ferry::counters::snapshot().since(&base);
    assert_eq!(busy.rpc_calls, 10);
    assert_eq!(busy.rpc_connections, 2, "the client's end and the server's end are open");
    assert!(busy.messages_sent >= 1, "connecting sends a message through the port");
    drop(conn);
    assert_eq!(server.join().unwrap(), 0);
    let after = ferry::counters::snapshot().since(&base);
    assert_eq!(after.rpc_connections, 0, "both ends closed");
    assert_eq!(after.rpc_calls, 10);
}
