//! What ferry allocates to move a long body: a message or a call of
//! 65000 bytes, counted by an allocator that adds up, per thread, the
//! bytes each thread asks for. Counted in bytes, never in time.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use ferry::rpc::{ConnectOptions, Connection, Policy, RpcError, RpcServer, Transport};
use ferry::{Message, Timeout};

/// The system allocator, counting what each thread allocates.
struct Counting;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // A thread being torn down has no counter left: not counted.
    let _ = ALLOCATED.try_with(|a| a.set(a.get() + bytes as u64));
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counting only adds to a thread-local number, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as the caller promised for this layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as the caller promised for this layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes this thread allocated while `f` ran.
fn allocated_by<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = ALLOCATED.with(Cell::get);
    let r = f();
    (r, ALLOCATED.with(Cell::get) - before)
}

const LONG: usize = 65000;
const ROUNDS: u64 = 40;

#[test]
fn a_long_message_is_sent_without_a_copy_of_its_body() {
    let (mut rx, tx) = ferry::port().unwrap();
    let mut body = vec![7u8; LONG];
    // The thread's receive buffer, made on first use, is not counted.
    tx.send(Message::new(0), Timeout::Infinite).unwrap();
    rx.recv(Timeout::Infinite).unwrap();
    let ((), bytes) = allocated_by(|| {
        for i in 0..ROUNDS as u32 {
            tx.send(Message::new(i).with_body(std::mem::take(&mut body)), Timeout::Infinite).unwrap();
            let mut m = rx.recv(Timeout::Infinite).unwrap();
            assert_eq!((m.op(), m.body().len()), (i, LONG));
            body = std::mem::take(m.body_mut());
        }
    });
    // Each message's body is allocated once, by the receive that hands it
    // out; the send copied it after the header into a buffer of its own.
    let per_message = bytes / ROUNDS;
    assert!(per_message < LONG as u64 + 4096, "a message of {LONG} bytes allocated {per_message} bytes to send and receive");
}

#[test]
fn a_long_call_over_the_socket_copies_its_body_once_each_way() {
    common::watchdog("long_call", Duration::from_secs(60), || {
        let (port, to) = ferry::port().unwrap();
        let server = std::thread::spawn(move || {
            let mut srv = RpcServer::new(port).unwrap();
            srv.set_policy(Policy::Block);
            let mut reply = None;
            loop {
                match srv.reply_and_wait(reply.take(), Timeout::Infinite) {
                    Ok((conn, mut req)) => {
                        let body = std::mem::take(req.body_mut());
                        reply = Some((conn, Message::new(req.op()).with_body(body)));
                    }
                    Err(RpcError::NoClients) => return,
                    Err(e) => panic!("server: {e}"),
                }
            }
        });
        let mut c = Connection::connect(&to, ConnectOptions { policy: Policy::Block, ..Default::default() }).unwrap();
        drop(to);
        let mut body = vec![7u8; LONG];
        // A call carrying a right goes over the connection's socket (one
        // without items takes the slot, whatever its length).
        let (_other, right) = ferry::port().unwrap();
        c.call(Message::new(0).with_body(body.clone()).with_item(right.try_clone().unwrap()), Timeout::Infinite).unwrap();
        let ((), bytes) = allocated_by(|| {
            for i in 0..ROUNDS as u32 {
                let mut r = c.call(Message::new(i).with_body(std::mem::take(&mut body)).with_item(right.try_clone().unwrap()), Timeout::Infinite).unwrap();
                assert_eq!((r.op(), r.body().len()), (i, LONG));
                body = std::mem::take(r.body_mut());
            }
        });
        drop(c);
        server.join().unwrap();
        // The reply's body is allocated once, by the receive; the request
        // was copied behind its framing and then again behind the
        // message's header, the reply once more to take the framing off.
        let per_call = bytes / ROUNDS;
        assert!(per_call < LONG as u64 + 8192, "a call of {LONG} bytes each way allocated {per_call} bytes in the caller");
    });
}
