//! Links that come back: a node told to link to a peer (`ferry-netd
//! --peer`) dials it again whenever the link is lost.
//!
//! A lost link makes every proxy of it a dead name, and that stays so: a
//! right never silently re-binds to whatever answers at the address next.
//! What comes back is the link, so new lookups of `name@host` work again;
//! [`Redial::start`]'s `on_up` callback is where a daemon re-imports the
//! names it registered for that host.
//!
//! Dialling backs off from 100 ms, doubling to 10 s, with a quarter of
//! jitter, so a peer that is down for long costs a dial every ten seconds
//! and two nodes that lost each other do not dial in lock step. Each
//! change of state is logged once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::node::Node;

/// The first pause after a failed dial.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between dials.
pub const MAX_PAUSE: Duration = Duration::from_secs(10);

/// Keeps a node's links to some peers up, on a thread of its own, until
/// dropped.
#[derive(Debug)]
pub struct Redial {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One peer's dialling state.
struct Dial {
    host: String,
    addr: SocketAddr,
    up: bool,
    pause: Duration,
    next: Instant,
    attempts: u32,
}

/// `d` with up to a quarter of it added or taken away, from the clock's
/// low bits (enough to keep two nodes out of step).
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.subsec_nanos());
    let quarter = d / 4;
    let spread = quarter.as_nanos().max(1) as u64 * 2;
    d - quarter + Duration::from_nanos(u64::from(nanos) % spread)
}

impl Redial {
    /// Watches `node`'s links to `peers` (host and address) and dials any
    /// that is not up, backing off between failures. `on_up(host)` runs
    /// after each dial that brought a link back (not for links already up
    /// when this starts).
    pub fn start(node: Arc<Node>, peers: Vec<(String, SocketAddr)>, mut on_up: impl FnMut(&str) + Send + 'static) -> Redial {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ferry-net-redial".into())
            .spawn(move || {
                let now = Instant::now();
                let mut dials: Vec<Dial> =
                    peers.into_iter().map(|(host, addr)| Dial { host, addr, up: true, pause: FIRST_PAUSE, next: now, attempts: 0 }).collect();
                while !s2.load(Ordering::Relaxed) {
                    let links = node.links();
                    for d in &mut dials {
                        let up = links.iter().any(|l| l.peer == d.host && l.up);
                        if up {
                            d.up = true;
                            continue;
                        }
                        if d.up {
                            eprintln!("ferry-net: link to {} is down; dialling {} again", d.host, d.addr);
                            d.up = false;
                            d.pause = FIRST_PAUSE;
                            d.next = Instant::now();
                            d.attempts = 0;
                        }
                        if Instant::now() < d.next {
                            continue;
                        }
                        d.attempts += 1;
                        match node.connect(&d.host, d.addr) {
                            Ok(()) => {
                                eprintln!("ferry-net: link to {} at {} is back (dial {})", d.host, d.addr, d.attempts);
                                d.up = true;
                                on_up(&d.host);
                            }
                            Err(e) => {
                                if d.attempts == 1 || d.pause < MAX_PAUSE && d.pause * 2 >= MAX_PAUSE {
                                    eprintln!("ferry-net: dialling {} at {} failed: {e}; trying again, at most every {:?}", d.host, d.addr, MAX_PAUSE);
                                }
                                d.next = Instant::now() + jitter(d.pause);
                                d.pause = (d.pause * 2).min(MAX_PAUSE);
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .expect("start the redial thread");
        Redial { stop, thread: Some(thread) }
    }
}

impl Drop for Redial {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
