//! A typed client over an RPC connection takes the fast path (the shared
//! slot, no socket operation) for calls that fit the slot, up to nearly the
//! most a call carries, and the connection's socket for the rest (calls
//! with rights or regions), without the stub choosing. Its own test binary:
//! the RPC layer's system-call counters are per process.

use std::time::Duration;

use ferry::rpc::{ConnectOptions, Policy, RpcServer, SLOT_INLINE};
use ferry::{RegionItem, Timeout};
use ferry_idl::{ByValue, Context, RpcChannel};

ferry_idl::interface! {
    /// Echoes.
    pub mod echo: "test.fastpath", version 1, compatible 1 {
        /// Returns `data`.
        fn echo(data: Vec<u8>) -> Vec<u8> = 1;
        /// The length of a region.
        fn take(region: ByValue) -> u64 = 2;
    }
}

struct Echo;

impl echo::Service for Echo {
    fn echo(&mut self, _: &Context, data: Vec<u8>) -> Vec<u8> {
        data
    }
    fn take(&mut self, _: &Context, region: ByValue) -> u64 {
        region.0.len() as u64
    }
}

#[test]
fn typed_calls_that_fit_the_slot_never_touch_the_socket() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (port, to_port) = ferry::port().unwrap();
        let mut server = RpcServer::new(port).unwrap();
        // Both sides spin, so no wake-up is needed and any system call
        // counted is the message path's own.
        server.set_policy(Policy::Poll);
        let opts = ConnectOptions { policy: Policy::Poll, ..Default::default() };
        let client = std::thread::spawn(move || {
            let mut c = echo::Client::connect(RpcChannel::connect(&to_port, opts).unwrap()).unwrap();
            let socket_ops = || ferry::rpc::stats().socket_ops;

            let before = socket_ops();
            for i in 0..100u8 {
                assert_eq!(c.echo(vec![i; 64]).unwrap(), vec![i; 64]);
            }
            let small = socket_ops() - before;

            let before = socket_ops();
            // Its encoding's few bytes on top still fit the slot.
            let long = SLOT_INLINE - 64;
            assert_eq!(c.echo(vec![7; long]).unwrap().len(), long);
            let large = socket_ops() - before;

            let before = socket_ops();
            assert_eq!(c.take(ByValue(RegionItem::copied_from(b"region").unwrap())).unwrap(), 6);
            let region = socket_ops() - before;
            (small, large, region)
        });
        let _ = ferry_idl::serve_rpc(&mut echo::Server(Echo), &mut server, Timeout::Infinite);
        tx.send(client.join().unwrap()).unwrap();
    });
    let (small, large, region) = rx.recv_timeout(Duration::from_secs(60)).expect("the test hung or panicked");
    assert_eq!(small, 0, "100 typed calls that fit the slot made {small} socket operations");
    assert_eq!(large, 0, "a typed call of nearly 64 KiB made {large} socket operations");
    assert!(region > 0, "a typed call with a region goes over the socket");
}
