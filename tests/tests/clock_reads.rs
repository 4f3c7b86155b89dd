//! How often a port's calls that never wait read the clock: a receive or
//! a send with [`Timeout::Zero`] has no deadline to keep, so it reads none.
//! These are the calls every awaited receive and send makes (two receives
//! for each message an awaiting receiver takes), on every hop a message
//! makes through a network server.
//!
//! This program counts its own clock reads: it defines `clock_gettime`,
//! which the standard library's `Instant::now` calls, in place of the C
//! library's, and counts the calls a thread makes while it asks.

mod common;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferry::tokio::AsyncReceiveRight;
use ferry::{Message, RecvError, Timeout};

thread_local! {
    /// Whether this thread's clock reads are counted now.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

/// Clock reads counted so far.
static READS: AtomicU64 = AtomicU64::new(0);

/// Every clock read of this program: counted if its thread counts, then
/// asked of the kernel (the standard library's `Instant::now` goes through
/// this symbol, which the program's own definition here takes).
#[no_mangle]
pub extern "C" fn clock_gettime(clock: libc::clockid_t, ts: *mut libc::timespec) -> libc::c_int {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        READS.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: `ts` is the caller's pointer to a `timespec` to fill, passed
    // on to the kernel as the C library would.
    unsafe { libc::syscall(libc::SYS_clock_gettime, clock, ts) as libc::c_int }
}

/// Runs `f` and says how many times it read the clock on this thread.
fn reads<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = READS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (r, READS.load(Ordering::Relaxed) - before)
}

#[test]
fn receives_and_sends_that_never_wait_read_no_clock() {
    // The count sees the clock: without that, every count below would be
    // nothing for nothing.
    let (_, seen) = reads(Instant::now);
    assert_eq!(seen, 1, "a clock read was not counted; the counts below would prove nothing");

    let (mut rx, tx) = ferry::port().expect("port");
    let (got, n) = reads(|| rx.try_recv());
    assert!(matches!(got, Err(RecvError::Timeout)), "{got:?}");
    assert_eq!(n, 0, "a receive from an empty port read the clock {n} times");

    let (sent, n) = reads(|| tx.send(Message::new(5).with_body(*b"x"), Timeout::Zero));
    assert!(sent.is_ok(), "{sent:?}");
    assert_eq!(n, 0, "a send that never waits read the clock {n} times");

    let (got, n) = reads(|| rx.try_recv());
    assert_eq!(got.expect("the message").op(), 5);
    assert_eq!(n, 0, "a receive of a queued message read the clock {n} times");

    // A right with a send-once right outstanding tries each of its
    // sockets; still nothing to wait for, so no clock either.
    let once = rx.make_send_once().expect("send-once right");
    let (got, n) = reads(|| rx.try_recv());
    assert!(matches!(got, Err(RecvError::Timeout)), "{got:?}");
    assert_eq!(n, 0, "a receive from an empty port with a send-once right out read the clock {n} times");
    once.send(Message::new(6), Timeout::Zero).expect("send-once");
    let (got, n) = reads(|| rx.try_recv());
    assert_eq!(got.expect("the send-once message").op(), 6);
    assert_eq!(n, 0, "a receive of a send-once right's message read the clock {n} times");

    // With more send-once rights out than it tries one by one, a receive
    // asks the right's `epoll` instance which have anything: now.
    let many: Vec<_> = (0..9).map(|_| rx.make_send_once().expect("send-once right")).collect();
    let (got, n) = reads(|| rx.try_recv());
    assert!(matches!(got, Err(RecvError::Timeout)), "{got:?}");
    assert_eq!(n, 0, "a receive from an empty port with nine send-once rights out read the clock {n} times");

    // Whether a right's port is gone, asked without waiting.
    let (dead, n) = reads(|| (tx.is_dead(), many[0].is_dead()));
    assert_eq!(dead, (false, false));
    assert_eq!(n, 0, "asking whether a port is gone read the clock {n} times");
    drop(many);

    let (mut answer, right) = ferry::reply_pair().expect("reply pair");
    let (got, n) = reads(|| answer.try_recv());
    assert!(matches!(got, Err(RecvError::Timeout)), "{got:?}");
    assert_eq!(n, 0, "a reply receiver's receive with nothing there read the clock {n} times");
    right.send(Message::new(7), Timeout::Zero).expect("reply");
    let (got, n) = reads(|| answer.try_recv());
    assert_eq!(got.expect("the reply").op(), 7);
    assert_eq!(n, 0, "a reply receiver's receive of its message read the clock {n} times");
}

#[test]
fn an_awaited_receive_reads_no_clock() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().expect("runtime");
    let (rx, tx) = ferry::port().expect("port");
    // Each message is queued before its receive: nothing here waits.
    common::watchdog("an_awaited_receive_reads_no_clock", Duration::from_secs(60), || rt.block_on(async {
        let mut rx = AsyncReceiveRight::new(rx).expect("register");
        for i in 0..3u32 {
            tx.send(Message::new(i), Timeout::Zero).expect("send");
            // Counted over the receive's polls only, not the runtime's
            // own waits between them.
            let mut recv = std::pin::pin!(rx.recv());
            let got = std::future::poll_fn(|cx| {
                let (p, n) = reads(|| recv.as_mut().poll(cx));
                assert_eq!(n, 0, "a poll of an awaited receive read the clock {n} times");
                p
            })
            .await;
            assert_eq!(got.expect("the message").op(), i);
        }
    }));
}
