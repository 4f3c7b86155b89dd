//! Copy-on-reference regions over loopback: a region too large to send
//! eagerly crosses as a reference, the receiver maps it through a ferry
//! pager in its node, and pages move only when touched. Two
//! `ferry_net::Node`s in this process, linked by QUIC on 127.0.0.1; no
//! root. Every wait is bounded and every test runs under a watchdog.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{wait_until, watchdog};
use ferry::pager::ObjectState;
use ferry::{Item, MapOptions, Message, Region, SendRight, Timeout};
use ferry_net::{Identity, NetError, Node, NodeConfig, Peer, RemoteRegion};

const LIMIT: Duration = Duration::from_secs(90);
const WAIT: Timeout = Timeout::After(Duration::from_secs(10));
const PAGE: usize = 4096;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn config(me: &Identity, peers: Vec<Peer>) -> NodeConfig {
    let mut c = NodeConfig::new(me.clone(), peers, loopback());
    c.idle_timeout = Duration::from_secs(3);
    c.op_timeout = Duration::from_secs(5);
    c
}

fn identities() -> (Identity, Identity) {
    (Identity::generate("a").unwrap(), Identity::generate("b").unwrap())
}

fn nodes(ia: &Identity, ib: &Identity) -> (Node, Node) {
    nodes_with(ia, ib, |_| {})
}

/// [`nodes`], with `b`'s configuration changed by `tune` (budgets).
fn nodes_with(ia: &Identity, ib: &Identity, tune: impl FnOnce(&mut NodeConfig)) -> (Node, Node) {
    let a = Node::start(config(ia, vec![Peer { name: "b".into(), cert: ib.cert.clone() }])).unwrap();
    let mut cb = config(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }]);
    tune(&mut cb);
    let b = Node::start(cb).unwrap();
    (a, b)
}

/// A port on host `a` exported as `data`, and host `b`'s right to it.
fn export_data(a: &Node, b: &Node) -> (ferry::ReceiveRight, SendRight) {
    let (srv, to_srv) = ferry::port().unwrap();
    a.export("data", to_srv);
    (srv, b.lookup("data@a").unwrap())
}

fn byte_at(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 12)) as u8
}

/// A sealed by-value region of `len` bytes holding the test pattern.
fn pattern_region(len: usize) -> ferry::RegionItem {
    let mut r = Region::new(len).unwrap();
    for (i, b) in r.as_mut_slice().iter_mut().enumerate() {
        *b = byte_at(i);
    }
    r.by_move().unwrap()
}

/// This process's ferry region memfds of exactly `len` bytes (rounded to
/// pages), mapped or held by a descriptor: the origin's kept copy of a
/// region sent by reference.
fn region_memfds(len: usize) -> usize {
    use std::os::unix::fs::MetadataExt;
    let len = len.div_ceil(PAGE) * PAGE;
    let mut files: std::collections::HashSet<u64> = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("memfd:ferry-region"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (s, e) = f[0].split_once('-').unwrap();
            let size = usize::from_str_radix(e, 16).unwrap() - usize::from_str_radix(s, 16).unwrap();
            (size == len).then(|| f[4].parse().unwrap())
        })
        .collect();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let is_region = std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:ferry-region"));
        match std::fs::metadata(e.path()) {
            Ok(md) if is_region && (md.len() as usize).div_ceil(PAGE) * PAGE == len => {
                files.insert(md.ino());
            }
            _ => {}
        }
    }
    files.len()
}

/// Sends a region of `len` bytes from host `b` to a port on host `a`;
/// returns the right that took the region's place in the delivered message.
fn send_region(a: &Node, b: &Node, len: usize) -> (SendRight, ferry::ReceiveRight) {
    let (mut srv, data) = export_data(a, b);
    data.send(Message::new(7).with_body(*b"by reference").with_item(pattern_region(len)), WAIT).unwrap();
    let mut m = srv.recv(WAIT).unwrap();
    assert_eq!((m.op(), m.body()), (7, &b"by reference"[..]));
    let Some(Item::Send(right)) = m.take_items().pop() else { panic!("the region arrived as a right to its server") };
    (right, srv)
}

#[test]
fn a_large_region_crosses_by_reference_and_only_touched_pages_move() {
    watchdog("a_large_region_crosses_by_reference_and_only_touched_pages_move", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let len = (64 << 20) + 3 * PAGE + 100; // 64 MiB and a ragged tail
        let (right, _srv) = send_region(&a, &b, len);
        assert_eq!(region_memfds(len), 1, "the origin keeps the sealed bytes while the far side may fetch");
        assert_eq!((b.stats().regions_sent, a.stats().regions_received), (1, 1));
        assert_eq!((b.links()[0].regions_out, a.links()[0].regions_in), (1, 1));

        let region = RemoteRegion::open(right).unwrap();
        assert_eq!(region.len(), len as u64);
        let view = region.map().unwrap();
        let bytes = view.as_slice().expect("supplied by copy");
        let touched = [0, 5 * PAGE + 17, 40 << 20, len - 1];
        for &at in &touched {
            assert_eq!(bytes[at], byte_at(at), "byte {at}");
        }
        let fetched = a.stats().bytes_fetched;
        let most = (touched.len() * ferry_net::cor::CLUSTER_PAGES * PAGE) as u64;
        assert!(fetched > 0 && fetched <= most, "{fetched} bytes fetched for {} touches (at most {most})", touched.len());
        assert!(fetched * 100 < len as u64, "bytes fetched ({fetched}) are a sliver of the region ({len})");
        assert_eq!(b.stats().bytes_served, fetched);
        assert_eq!(region.object().stats().unwrap().pages_requested as usize * PAGE, fetched.div_ceil(PAGE as u64) as usize * PAGE);

        // Letting go everywhere frees the origin's memfd.
        drop(view);
        drop(region);
        wait_until("the origin to free the region", || b.links()[0].regions_out == 0 && a.links()[0].regions_in == 0);
        // A fetch still finishing its stream holds the mapping a moment longer.
        wait_until("the origin's sealed memfd to go", || region_memfds(len) == 0);
    });
}

#[test]
fn the_whole_region_at_once_is_an_ordinary_by_value_region() {
    watchdog("the_whole_region_at_once_is_an_ordinary_by_value_region", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let len = (24 << 20) + 5 * PAGE + 1;
        let (right, _srv) = send_region(&a, &b, len);
        let region = RemoteRegion::open(right).unwrap();
        let whole = region.fetch_all().unwrap();
        assert_eq!(whole.len(), len);
        assert!(whole.mode().is_by_value());
        let view = whole.map(MapOptions::lazy().read_only()).unwrap();
        assert!(view.as_slice().iter().enumerate().all(|(i, &b)| b == byte_at(i)), "every byte is the sender's");
        assert_eq!(a.stats().bytes_fetched, len as u64, "one transfer of exactly the region");
        assert_eq!(a.stats().fetches, 1);
        drop(view); // the received copy is a memfd of the same size
        drop(region);
        wait_until("the origin to free the region", || b.links()[0].regions_out == 0);
        wait_until("the origin's sealed memfd to go", || region_memfds(len) == 0);
    });
}

/// The memfd this process keeps for a region of `len` bytes sent by
/// reference, found through its mapping or its descriptor (the paths
/// under `/proc/self` that lead to it, one per file).
fn kept_region_files(len: usize) -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut files = Vec::new();
    for dir in ["/proc/self/map_files", "/proc/self/fd"] {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            let is_region = std::fs::read_link(&path).is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:ferry-region"));
            match std::fs::metadata(&path) {
                Ok(md) if is_region && md.len() == len as u64 && seen.insert((md.dev(), md.ino())) => files.push(path),
                _ => {}
            }
        }
    }
    files
}

/// Bytes of memory the file at `path` has allocated.
fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// A region sent by reference is read for the peer's fetches without
/// filling in its holes: a sparse region (a reservation, a file with
/// holes) costs its sender nothing, and read through a mapping each page
/// fetched was a page of memory allocated in the origin's memfd and kept
/// there until the peer let the region go, so a peer fetching a region of
/// a terabyte made the origin allocate a terabyte.
#[test]
fn fetching_a_sparse_region_allocates_nothing_for_its_holes_at_the_origin() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped fetching_a_sparse_region_allocates_nothing_for_its_holes_at_the_origin: finding the origin's memfd through /proc/self/map_files needs root");
        return;
    }
    watchdog("fetching_a_sparse_region_allocates_nothing_for_its_holes_at_the_origin", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let len = 64 << 20;
        // One page written, the rest holes.
        let mut r = Region::new(len).unwrap();
        r.as_mut_slice()[5 * PAGE] = 9;
        let (mut srv, data) = export_data(&a, &b);
        data.send(Message::new(7).with_item(r.by_move().unwrap()), WAIT).unwrap();
        let mut m = srv.recv(WAIT).unwrap();
        let Some(Item::Send(right)) = m.take_items().pop() else { panic!("the region arrived as a right to its server") };
        let kept = kept_region_files(len);
        assert_eq!(kept.len(), 1, "the origin keeps one memfd for the region: {kept:?}");
        let before = allocated(&kept[0]);
        let region = RemoteRegion::open(right).unwrap();
        let whole = region.fetch_all().unwrap();
        let view = whole.map(MapOptions::lazy().read_only()).unwrap();
        let bytes = view.as_slice();
        assert_eq!(bytes.len(), len);
        assert!(bytes[5 * PAGE] == 9 && bytes.iter().filter(|&&b| b != 0).count() == 1, "the bytes are the sender's");
        assert_eq!(b.stats().bytes_served, len as u64);
        let after = allocated(&kept[0]);
        assert!(after <= before, "the origin's memfd grew from {before} to {after} bytes for a fetch of its holes");
        drop(view);
        drop(region);
        wait_until("the origin to free the region", || b.links()[0].regions_out == 0);
    });
}

#[test]
fn a_region_crosses_a_slow_lossy_link_intact() {
    watchdog("a_region_crosses_a_slow_lossy_link_intact", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        // 3 ms each way, one datagram in 200 lost.
        let relay = common::Relay::with_delay(a.local_addr().unwrap(), 200, Duration::from_millis(3), Duration::ZERO);
        b.connect("a", relay.addr).unwrap();
        let len = (16 << 20) + 3 * PAGE + 11;
        let (right, _srv) = send_region(&a, &b, len);
        let region = RemoteRegion::open(right).unwrap();
        // Pages fetched on touch, scattered over the region.
        let view = region.map().unwrap();
        let bytes = view.as_slice().unwrap();
        for i in (0..len).step_by(len / 13).chain([len - 1]) {
            assert_eq!(bytes[i], byte_at(i), "byte {i} fetched on touch is the sender's");
        }
        // And the whole region at once.
        let whole = region.fetch_all().unwrap();
        let copy = whole.map(MapOptions::lazy().read_only()).unwrap();
        assert!(copy.as_slice().iter().enumerate().all(|(i, &b)| b == byte_at(i)), "every byte is the sender's");
        drop((copy, view, region));
        wait_until("the origin to free the region", || b.links()[0].regions_out == 0);
    });
}

#[test]
fn a_peer_that_stops_reading_a_fetch_loses_that_stream_within_the_timeout() {
    watchdog("a_peer_that_stops_reading_a_fetch_loses_that_stream_within_the_timeout", LIMIT, || {
        use ferry_net::frame::{Cap, Frame, Part};
        let (a, ia, im) = common::host_facing_m(Duration::from_secs(1));
        let addr = a.local_addr().unwrap();
        let len = (20 << 20) + PAGE;
        // A worker drives `m`'s connection while this thread waits.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        // `m`, trusted but hostile, links to `a` by hand.
        let (conn, mut control, mut control_in) = rt.block_on(async {
            let conn = common::dial(&im, &ia, addr, |_| {}).await;
            let (control, mut control_in) = conn.accept_bi().await.unwrap();
            let mut magic = [0u8; 4];
            control_in.read_exact(&mut magic).await.unwrap();
            (conn, control, control_in)
        });
        let read_frame = |s: &mut quinn::RecvStream| {
            rt.block_on(async {
                let mut n = [0u8; 4];
                s.read_exact(&mut n).await.unwrap();
                let mut b = vec![0u8; u32::from_le_bytes(n) as usize];
                s.read_exact(&mut b).await.unwrap();
                Frame::decode(&b).unwrap()
            })
        };
        // `a` names the link once its side of the handshake is done, which
        // may come after `m` read the magic.
        wait_until("the link to m", || a.links().iter().any(|l| l.peer == "m"));
        // A program on `a` looks up `x@m` (answered by hand) and sends a
        // region by reference to it.
        let sender = std::thread::spawn(move || {
            let x = a.lookup("x@m").unwrap();
            x.send(Message::new(1).with_item(pattern_region(len)), WAIT).unwrap();
            (a, x)
        });
        let Frame::Lookup { req, name } = read_frame(&mut control_in) else { panic!("a lookup") };
        assert_eq!(name, "x");
        rt.block_on(control.write_all(&Frame::Found { req, cap: Some(Cap::Hosted(1)) }.encode_with_len())).unwrap();
        let (a, _x) = sender.join().unwrap();
        let mut messages = rt.block_on(conn.accept_uni()).unwrap();
        let Frame::Message { target: 1, parts, .. } = read_frame(&mut messages) else { panic!("the message") };
        let [Part::Remote { id, len: got_len }] = parts[..] else { panic!("a region by reference: {parts:?}") };
        assert_eq!(got_len, len as u64);
        // It asks for the whole region and reads none of it.
        let (mut send, mut recv) = rt.block_on(conn.open_bi()).unwrap();
        rt.block_on(send.write_all(&Frame::Fetch { region: id, offset: 0, len: got_len }.encode_with_len())).unwrap();
        let _ = send.finish();
        std::thread::sleep(Duration::from_secs(3));
        // The origin gave up on the stream: what it wrote before its flow
        // window shut can still be read, then the stream ends in a reset,
        // never in the whole region.
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0usize;
        let ended = rt.block_on(async {
            loop {
                match tokio::time::timeout(Duration::from_secs(10), recv.read(&mut buf)).await {
                    Ok(Ok(Some(n))) => got += n,
                    Ok(Ok(None)) => return "finished",
                    Ok(Err(_)) => return "reset",
                    Err(_) => return "still open",
                }
            }
        });
        assert_eq!(ended, "reset", "after {got} of {len} bytes");
        assert!(got < len);
        // Only that stream: the link is up, and a fetch that is read works.
        assert_eq!(a.links().iter().map(|l| (l.peer.as_str(), l.regions_out)).collect::<Vec<_>>(), [("m", 1)]);
        let page = rt.block_on(async {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(&Frame::Fetch { region: id, offset: PAGE as u64, len: PAGE as u64 }.encode_with_len()).await.unwrap();
            let _ = send.finish();
            recv.read_to_end(PAGE).await.unwrap()
        });
        assert!(page.iter().enumerate().all(|(i, &b)| b == byte_at(PAGE + i)), "a fetch that is read gets the sender's bytes");
    });
}

#[test]
fn a_right_that_is_no_region_is_a_typed_error() {
    watchdog("a_right_that_is_no_region_is_a_typed_error", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        let t = std::thread::spawn(move || {
            // An ordinary server that knows nothing of regions: it drops
            // the request (and its reply right) unanswered.
            let _ = rx.recv(WAIT);
        });
        assert!(matches!(RemoteRegion::open(tx), Err(NetError::LinkLost(_) | NetError::NotARegion(_))));
        t.join().unwrap();
    });
}


#[test]
fn a_cut_link_mid_fetch_ends_with_a_clear_error_and_frees_the_origin() {
    watchdog("a_cut_link_mid_fetch_ends_with_a_clear_error_and_frees_the_origin", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        let relay = common::Relay::start(b.local_addr().unwrap(), 0);
        // `a` (the receiver) dials `b` (the origin) through the relay.
        a.connect("b", relay.addr).unwrap();
        let (mut srv, to_srv) = ferry::port().unwrap();
        a.export("data", to_srv);
        // The origin finds the receiver's port over the same link.
        wait_until("the link on both sides", || b.links().len() == 1);
        let data = b.lookup("data@a").unwrap();
        let len = (32 << 20) + 7 * PAGE;
        data.send(Message::new(1).with_item(pattern_region(len)), WAIT).unwrap();
        let Some(Item::Send(right)) = srv.recv(WAIT).unwrap().take_items().pop() else { panic!("a region by reference") };
        let region = RemoteRegion::open(right).unwrap();
        let view = region.map().unwrap();
        assert_eq!(view.as_slice().unwrap()[PAGE * 3], byte_at(PAGE * 3), "pages come while the link is up");

        // The link is cut while a whole-region fetch is under way: it ends
        // with a clear error, not a hang.
        let started = Instant::now();
        relay.cut();
        let r = region.fetch_all();
        assert!(matches!(r, Err(NetError::LinkLost(_)) | Err(NetError::Timeout)), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(30));
        // The mapping ends as for any dead pager: pages already fetched stay
        // readable, the rest would raise SIGBUS (DeathPolicy::Sigbus).
        assert_eq!(view.wait_until_ended(Duration::from_secs(20)), ObjectState::PagerDead);
        assert_eq!(view.as_slice().unwrap()[PAGE * 3], byte_at(PAGE * 3));
        // The origin lets go of the bytes when it sees the link die.
        wait_until("the origin to drop the link", || b.links().is_empty());
        wait_until("the origin's memfd to be freed with the link", || region_memfds(len) == 0);
    });
}

#[test]
fn a_hostile_peer_fetching_a_region_it_was_never_sent_loses_only_its_link() {
    watchdog("a_hostile_peer_fetching_a_region_it_was_never_sent_loses_only_its_link", LIMIT, || {
        let (ia, ib) = identities();
        let im = Identity::generate("m").unwrap();
        let a = Node::start(config(
            &ia,
            vec![Peer { name: "b".into(), cert: ib.cert.clone() }, Peer { name: "m".into(), cert: im.cert.clone() }],
        ))
        .unwrap();
        let b = Node::start(config(&ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }])).unwrap();
        b.connect("a", a.local_addr().unwrap()).unwrap();
        // `a` sends `b` a region by reference (region id 1 on that link).
        let (mut srv, to_srv) = ferry::port().unwrap();
        b.export("data", to_srv);
        let data = a.lookup("data@b").unwrap();
        let len = (20 << 20) + PAGE;
        data.send(Message::new(1).with_item(pattern_region(len)), WAIT).unwrap();
        let Some(Item::Send(right)) = srv.recv(WAIT).unwrap().take_items().pop() else { panic!("a region by reference") };

        // `m`, trusted but hostile, asks for region 1 (sent to `b`, not to
        // it), and then for a region that never existed.
        for (what, region) in [("another link's region", 1u64), ("no region", 99)] {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let addr = a.local_addr().unwrap();
            let closed = rt.block_on(async {
                let conn = common::dial(&im, &ia, addr, |_| {}).await;
                let (_control, mut recv) = conn.accept_bi().await.unwrap();
                let mut magic = [0u8; 4];
                recv.read_exact(&mut magic).await.unwrap();
                let (mut send, mut got) = conn.open_bi().await.unwrap();
                let f = ferry_net::frame::Frame::Fetch { region, offset: 0, len: 4096 }.encode();
                let mut req = (f.len() as u32).to_le_bytes().to_vec();
                req.extend_from_slice(&f);
                send.write_all(&req).await.unwrap();
                let _ = send.finish();
                let mut b = [0u8; 1];
                assert!(got.read_exact(&mut b).await.is_err(), "no byte of the region is sent");
                tokio::time::timeout(Duration::from_secs(10), conn.closed()).await
            });
            let reason = closed.unwrap_or_else(|_| panic!("{what}: the node closed the hostile link"));
            assert!(reason.to_string().contains("protocol error"), "{what}: {reason}");
        }
        // The good link and its region are untouched. The node forgets the
        // hostile link on its own task, after the close the client saw:
        // wait (bounded) for it to go.
        let links = || a.links().iter().map(|l| (l.peer.clone(), l.regions_out)).collect::<Vec<_>>();
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while links().iter().any(|(p, _)| p == "m") && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(links(), [("b".to_string(), 1)]);
        let region = RemoteRegion::open(right).unwrap();
        let view = region.map().unwrap();
        assert_eq!(view.as_slice().unwrap()[len - 1], byte_at(len - 1));
    });
}

/// A shared region too large to copy into the frame cannot cross by
/// reference (its sender could change it while the far side fetches it):
/// the message is refused, typed, before anything leaves, and the region
/// comes back in the refusal, still shared with its sender.
#[test]
fn a_large_shared_region_is_refused_and_given_back() {
    watchdog("a_large_shared_region_is_refused_and_given_back", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes_with(&ia, &ib, |_| {});
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let (mut me, _keep) = ferry::port().unwrap();
        let shared = ferry::region::SharedRegion::new((17 << 20) + PAGE).unwrap();
        data.send(Message::new(1).with_item(shared.share().unwrap()).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        let mut answer = me.recv(WAIT).unwrap();
        let (why, text) = ferry_net::Refusal::of(&answer).expect("a refusal");
        assert_eq!(why, ferry_net::Refusal::MutableRegion, "{text}");
        let Some(Item::Region(back)) = answer.take_items().pop() else { panic!("the region did not come back") };
        assert_eq!((back.mode(), back.len()), (ferry::region::Mode::Share, shared.len()));
        // Still the sender's memory: a write through the sender's handle is
        // seen through the region that came back.
        shared.as_atomic_u64()[5].store(0x5eed, std::sync::atomic::Ordering::Relaxed);
        let seen = back.map_shared(ferry::MapOptions::default()).unwrap();
        let mut word = [0u8; 8];
        assert!(seen.read_at(40, &mut word));
        assert_eq!(u64::from_le_bytes(word), 0x5eed);
        assert_eq!(b.links()[0].regions_out, 0, "nothing was kept for the peer");
        data.send(Message::new(2), WAIT).unwrap();
        assert_eq!(srv.recv(WAIT).unwrap().op(), 2, "nothing of the refused message arrived");
    });
}

/// A message larger than a link carries (eager regions together above the
/// frame limit, or a region above the largest sent by reference) is
/// refused to its sender with its items, before anything leaves: sent on,
/// the peer would have closed the link for every user of it.
#[test]
fn a_message_too_large_for_a_link_is_refused_and_the_link_stays_up() {
    watchdog("a_message_too_large_for_a_link_is_refused_and_the_link_stays_up", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let (mut me, _keep) = ferry::port().unwrap();
        let eager = || Region::new(ferry_net::frame::MAX_EAGER_REGION).unwrap().by_move().unwrap();
        let mut too_many = Message::new(1).with_reply(me.make_send_once().unwrap());
        for _ in 0..3 {
            too_many = too_many.with_item(eager());
        }
        data.send(too_many, WAIT).unwrap();
        let answer = me.recv(WAIT).unwrap();
        let (why, text) = ferry_net::Refusal::of(&answer).expect("a refusal");
        assert_eq!((why, answer.items().len()), (ferry_net::Refusal::TooLarge, 3), "{text}");

        // Sparse: its pages cost nothing until touched.
        let huge = Region::new((ferry_net::frame::MAX_REMOTE_REGION * 2) as usize).unwrap().by_move().unwrap();
        data.send(Message::new(2).with_item(huge).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        let answer = me.recv(WAIT).unwrap();
        let (why, text) = ferry_net::Refusal::of(&answer).expect("a refusal");
        assert_eq!((why, answer.items().len()), (ferry_net::Refusal::TooLarge, 1), "{text}");

        // Two eager regions fit: the link is up and carries them.
        data.send(Message::new(3).with_item(eager()).with_item(eager()), WAIT).unwrap();
        let got = srv.recv(WAIT).unwrap();
        assert_eq!((got.op(), got.items().len()), (3, 2), "nothing of the refused messages arrived, and the link stayed up");
        assert_eq!(b.links().len(), 1);
        assert!(b.links()[0].up, "{:?}", b.links());
    });
}

/// Regions sent by reference stay mapped at their origin until the peer
/// lets them go, and each may be a terabyte: a user's share of the
/// address space they take is budgeted by bytes, not only by count.
#[test]
fn regions_by_reference_are_budgeted_by_the_address_space_they_take() {
    watchdog("regions_by_reference_are_budgeted_by_the_address_space_they_take", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let (mut me, _keep) = ferry::port().unwrap();
        // Sparse: their pages cost nothing until touched.
        let tib = || Region::new(1 << 40).unwrap().by_move().unwrap();
        let mut kept = Vec::new();
        for i in 0..8 {
            data.send(Message::new(i).with_item(tib()), WAIT).unwrap();
            kept.push(srv.recv(WAIT).unwrap());
        }
        data.send(Message::new(8).with_item(tib()).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        let answer = me.recv(WAIT).unwrap();
        let (why, text) = ferry_net::Refusal::of(&answer).expect("a refusal");
        assert_eq!((why, answer.items().len()), (ferry_net::Refusal::OverBudget, 1), "{text}");
        assert!(text.contains("address space"), "{text}");
        // Let go at the far side, the space comes back.
        drop(kept);
        let mut passed = false;
        for i in 0..200 {
            data.send(Message::new(100 + i).with_item(tib()).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
            let mut got = None;
            if let Ok(m) = srv.recv(Timeout::millis(50)) {
                got = Some(m);
            }
            if got.is_some() {
                passed = true;
                break;
            }
            let _ = me.recv(WAIT);
        }
        assert!(passed, "the space never came back");
    });
}

#[test]
fn per_user_budgets_refuse_what_one_user_would_have_kept_past_them() {
    watchdog("per_user_budgets_refuse_what_one_user_would_have_kept_past_them", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes_with(&ia, &ib, |c| {
            c.max_regions_per_user = 1;
            c.max_exports_per_user = 2;
        });
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let (mut me, _keep) = ferry::port().unwrap();
        let len = (17 << 20) + PAGE;
        // The refusal, and how many of the message's items it gave back.
        let refused = |me: &mut ferry::ReceiveRight| {
            let answer = me.recv(WAIT).unwrap();
            ferry_net::Refusal::of(&answer).map(|(r, _)| (r, answer.items().len()))
        };

        // One region by reference: within the budget.
        data.send(Message::new(1).with_item(pattern_region(len)), WAIT).unwrap();
        let Some(Item::Send(first)) = srv.recv(WAIT).unwrap().take_items().pop() else { panic!("a region") };
        // A second while the first is held: refused, typed, to the sender.
        data.send(Message::new(2).with_item(pattern_region(len)).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        assert_eq!(refused(&mut me), Some((ferry_net::Refusal::OverBudget, 1)), "refused, with the region given back");
        // Three rights kept at once would pass the budget of two.
        let ports: Vec<_> = (0..3).map(|_| ferry::port().unwrap()).collect();
        let mut m = Message::new(3).with_reply(me.make_send_once().unwrap());
        for r in ports.iter().map(|(_, tx)| tx.try_clone().unwrap()) {
            m = m.with_item(r);
        }
        data.send(m, WAIT).unwrap();
        assert_eq!(refused(&mut me), Some((ferry_net::Refusal::OverBudget, 3)), "refused, with the rights given back");
        // Nothing of the refused messages arrived; the link still works.
        data.send(Message::new(4), WAIT).unwrap();
        assert_eq!(srv.recv(WAIT).unwrap().op(), 4);
        // When the far side lets go of the first region, the budget is back.
        drop(first);
        wait_until("the first region to be released", || b.links()[0].regions_out == 0);
        data.send(Message::new(5).with_item(pattern_region(len)), WAIT).unwrap();
        let m = srv.recv(WAIT).unwrap();
        assert_eq!((m.op(), m.items().len()), (5, 1));
    });
}

/// A message that waited for its stream's credit is held to its sender's
/// budgets when it goes, not only when its proxy read it: with a budget of
/// one region, four messages each with a region by reference, sent through
/// four proxies of one port while its stream waited (the port did not
/// read), keep one region at the far side, and the other three are
/// refused back to their sender.
#[test]
fn messages_that_waited_for_credit_are_held_to_the_budgets_when_they_go() {
    watchdog("messages_that_waited_for_credit_are_held_to_the_budgets_when_they_go", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes_with(&ia, &ib, |c| c.max_regions_per_user = 1);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        // Until the proxy pushes back: the port's queue, and then the
        // stream's credit, are full.
        let mut filled = 0;
        while filled < 10_000 && data.send(Message::new(1).with_body(vec![0u8; 60 << 10]), Timeout::millis(100)).is_ok() {
            filled += 1;
        }
        assert!(filled < 10_000, "the proxy never pushed back");
        let (mut me, _keep) = ferry::port().unwrap();
        let len = (17 << 20) + PAGE;
        let proxies: Vec<_> = (0..4).map(|_| b.lookup("data@a").unwrap()).collect();
        for p in &proxies {
            p.send(Message::new(7).with_item(pattern_region(len)).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        }
        // The port reads again: everything goes, and the regions that
        // arrive are kept.
        let (mut kept, mut refused) = (Vec::new(), 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        while kept.len() + refused < 4 && Instant::now() < deadline {
            while let Ok(mut m) = srv.recv(Timeout::Zero) {
                if m.op() == 7 {
                    kept.push(m.take_items());
                }
            }
            while let Ok(answer) = me.recv(Timeout::millis(10)) {
                assert_eq!(ferry_net::Refusal::of(&answer).map(|(r, _)| r), Some(ferry_net::Refusal::OverBudget));
                refused += 1;
            }
        }
        assert_eq!((kept.len(), refused), (1, 3), "regions kept at the far side, and refused");
    });
}

/// One user keeping the peer's regions cannot make another user's arrive
/// without them: host `b` serves at most eight of `a`'s regions at once,
/// user nobody on `b` is sent eight and keeps them all, and a region `a`
/// then sends to root's port on `b` still arrives (it was lost before:
/// nobody held every one `b` would serve).
#[test]
fn a_user_keeping_the_peers_regions_leaves_room_for_another_users() {
    use std::io::BufRead;

    if !common::can_play_other_user("a_user_keeping_the_peers_regions_leaves_room_for_another_users") {
        return;
    }
    watchdog("a_user_keeping_the_peers_regions_leaves_room_for_another_users", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes_with(&ia, &ib, |c| c.max_regions_in_per_peer = 8);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (_collect, mut other, to_other) = common::other_user_handing_its_port(&a, &b, "collect@a", "keep-messages", &["8"]);
        let len = ferry_net::frame::MAX_EAGER_REGION + PAGE;
        let region = || Region::new(len).unwrap().by_move().unwrap();
        for _ in 0..8 {
            to_other.send(Message::new(30).with_item(region()), WAIT).unwrap();
        }
        let mut said = std::io::BufReader::new(other.stdout.take().unwrap()).lines();
        let line = said.next().unwrap().unwrap();
        let kept: usize = line.strip_prefix("kept ").and_then(|k| k.parse().ok()).unwrap_or_else(|| panic!("the other user said {line:?}"));

        let (mut honest, to_honest) = ferry::port().unwrap();
        b.export("honest", to_honest);
        a.lookup("honest@b").unwrap().send(Message::new(31).with_item(region()), WAIT).unwrap();
        let m = honest.recv(WAIT).unwrap();
        assert_eq!((m.op(), m.items().len()), (31, 1), "root's region was lost");
        assert!(kept <= 4, "nobody kept {kept} of the eight regions `b` serves");
        drop(other.stdin.take());
        assert!(other.wait().unwrap().success());
    });
}

/// The test peer `keep-rights` run as user nobody with `data` passed to
/// it, once it has sent its first two rights through `data` (op 10); its
/// output lines, and its standard input to tell it to go on.
fn keep_rights_as_nobody(
    data: &SendRight,
) -> (std::process::Child, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>, std::process::ChildStdin) {
    use std::io::BufRead;

    let mut other = common::spawn_other_user(data, "keep-rights", &[]);
    let mut said = std::io::BufReader::new(other.stdout.take().unwrap()).lines();
    let tell = other.stdin.take().unwrap();
    assert_eq!(said.next().unwrap().unwrap(), "sent 10");
    (other, said, tell)
}

/// The budgets are per local user: another user (uid nobody) sending
/// through the same proxy is counted on its own. It is not refused because
/// root has used up its budget, and it cannot go past its own.
#[test]
fn per_user_budgets_count_each_local_user_on_its_own() {
    use std::io::Write;

    use ferry_net::Refusal;

    if !common::can_play_other_user("per_user_budgets_count_each_local_user_on_its_own") {
        return;
    }
    watchdog("per_user_budgets_count_each_local_user_on_its_own", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes_with(&ia, &ib, |c| c.max_exports_per_user = 2);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let refused = |me: &mut ferry::ReceiveRight| Refusal::of(&me.recv(WAIT).unwrap()).map(|(r, _)| r);

        // Root uses its whole budget: two rights the far side keeps.
        let mine: Vec<_> = (0..2).map(|_| ferry::port().unwrap()).collect();
        let m = mine.iter().fold(Message::new(1), |m, (_, tx)| m.with_item(tx.try_clone().unwrap()));
        data.send(m, WAIT).unwrap();
        let held_for_root = srv.recv(WAIT).unwrap();
        assert_eq!((held_for_root.op(), held_for_root.items().len()), (1, 2));

        // Another user's two rights through the same proxy are its own.
        let (mut other, mut said, mut tell) = keep_rights_as_nobody(&data);
        let held_for_other = srv.recv(WAIT).unwrap();
        assert_eq!((held_for_other.op(), held_for_other.items().len()), (10, 2), "refused because root's budget was used up");

        // Its third is past its own budget: refused, typed, to it.
        writeln!(tell).unwrap();
        let line = said.next().unwrap().unwrap();
        let answer = match line.split(' ').collect::<Vec<_>>()[..] {
            ["answer", op, body] => Message::new(op.parse().unwrap())
                .with_body((0..body.len()).step_by(2).map(|i| u8::from_str_radix(&body[i..i + 2], 16).unwrap()).collect::<Vec<_>>()),
            _ => panic!("the other user's peer said {line:?}"),
        };
        assert_eq!(Refusal::of(&answer).map(|(r, _)| r), Some(Refusal::OverBudget), "{line}");
        // Its right came back to it, and only to it.
        assert_eq!(said.next().unwrap().unwrap(), "given back 1 mine");
        // And root is still held to its own.
        let (mut me, _keep) = ferry::port().unwrap();
        let (_port, extra) = ferry::port().unwrap();
        data.send(Message::new(2).with_item(extra).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        assert_eq!(refused(&mut me), Some(Refusal::OverBudget));
        drop(tell);
        assert!(other.wait().unwrap().success());
        assert!(matches!(srv.recv(Timeout::Zero), Err(ferry::RecvError::Timeout)), "a refused message arrived");
        drop((held_for_root, held_for_other));
    });
}

/// A right sent again counts again: each arrival is a proxy on the far
/// side. So resending one right stops at its sender's budget, and the
/// budget comes back reference by reference as the far side lets go.
#[test]
fn a_right_sent_again_counts_again_against_its_senders_budget() {
    watchdog("a_right_sent_again_counts_again_against_its_senders_budget", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes_with(&ia, &ib, |c| c.max_exports_per_user = 3);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let (mut me, _keep) = ferry::port().unwrap();
        let (_port, mine) = ferry::port().unwrap();
        let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
        let usage = || b.usage().iter().map(|u| (u.peer.clone(), u.uid, u.rights, u.regions)).collect::<Vec<_>>();

        // The same right three times: three references the far side holds.
        let mut held = Vec::new();
        for op in 1..=3 {
            data.send(Message::new(op).with_item(mine.try_clone().unwrap()), WAIT).unwrap();
            let mut m = srv.recv(WAIT).unwrap();
            let Some(Item::Send(r)) = m.take_items().pop() else { panic!("a right") };
            assert!(!r.is_dead(), "the third copy arrives as a live proxy");
            held.push(r);
        }
        assert_eq!(usage(), [("a".to_string(), uid, 3, 0)]);
        // A fourth copy (with a reply right, for the refusal) is past it.
        data.send(Message::new(4).with_item(mine.try_clone().unwrap()).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        let answer = me.recv(WAIT).unwrap();
        assert_eq!(ferry_net::Refusal::of(&answer).map(|(r, _)| r), Some(ferry_net::Refusal::OverBudget));
        // The far side lets go of two: two references are free again.
        held.truncate(1);
        common::wait_until("two references to be released", || usage() == [("a".to_string(), uid, 1, 0)]);
        data.send(Message::new(5).with_item(mine.try_clone().unwrap()).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        let m = srv.recv(WAIT).unwrap();
        assert_eq!((m.op(), m.items().len()), (5, 1), "within the budget again");
        drop((held, m));
        common::wait_until("every reference to be released", || usage().is_empty());
    });
}

/// One user resending one right cannot take the far side's proxies from
/// another user: with a peer that holds at most ten of this host's
/// references, five of them for the one port every right here arrives at
/// (half, the share of that port's owner there), and three per user here,
/// root's resends stop at three and another user's two rights still
/// arrive as live proxies.
#[test]
fn one_user_resending_a_right_leaves_the_peers_proxies_to_others() {
    use std::io::Write;

    if !common::can_play_other_user("one_user_resending_a_right_leaves_the_peers_proxies_to_others") {
        return;
    }
    watchdog("one_user_resending_a_right_leaves_the_peers_proxies_to_others", LIMIT, || {
        let (ia, ib) = identities();
        let mut ca = config(&ia, vec![Peer { name: "b".into(), cert: ib.cert.clone() }]);
        ca.max_proxies_per_peer = 10;
        let a = Node::start(ca).unwrap();
        let mut cb = config(&ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }]);
        cb.max_exports_per_user = 3;
        let b = Node::start(cb).unwrap();
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let (mut me, _keep) = ferry::port().unwrap();
        let (_port, mine) = ferry::port().unwrap();

        // Root sends one right five times; each copy would be a proxy on
        // the far side. Three arrive; the other two (sent with a reply
        // right, to hear why) are refused.
        let mut held = Vec::new();
        for op in 1..=3 {
            data.send(Message::new(op).with_item(mine.try_clone().unwrap()), WAIT).unwrap();
            let mut m = srv.recv(WAIT).unwrap();
            let Some(Item::Send(r)) = m.take_items().pop() else { panic!("a right") };
            assert!(!r.is_dead());
            held.push(r);
        }
        for op in 4..=5 {
            data.send(Message::new(op).with_item(mine.try_clone().unwrap()).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
            let answer = me.recv(WAIT).unwrap();
            assert_eq!(ferry_net::Refusal::of(&answer).map(|(r, _)| r), Some(ferry_net::Refusal::OverBudget), "op {op}");
        }

        // Another user's two rights arrive as live proxies.
        let (mut other, mut said, mut tell) = keep_rights_as_nobody(&data);
        let mut theirs = srv.recv(WAIT).unwrap();
        assert_eq!(theirs.op(), 10);
        let items = theirs.take_items();
        assert_eq!(items.len(), 2);
        for it in &items {
            let Item::Send(r) = it else { panic!("a right") };
            assert!(!r.is_dead(), "another user's right arrived as a dead name: root took the peer's proxies");
        }
        writeln!(tell).unwrap();
        let _ = said.next();
        writeln!(tell).unwrap();
        drop(tell);
        assert!(other.wait().unwrap().success());
        drop((held, items));
    });
}

/// Users together cannot fill the far side's proxies: each may hold at
/// most half of what the others leave. With a peer taken to hold at most
/// eight of this host's references and a per-user budget that would allow
/// all eight, root's rights stop at four, and another user's two (half of
/// the four left) still arrive as live proxies, its third refused, so the
/// peer keeps room for a third user.
#[test]
fn users_together_leave_the_peers_proxies_room_for_another() {
    use std::io::Write;

    use ferry_net::Refusal;

    if !common::can_play_other_user("users_together_leave_the_peers_proxies_room_for_another") {
        return;
    }
    watchdog("users_together_leave_the_peers_proxies_room_for_another", LIMIT, || {
        let (ia, ib) = identities();
        let mut ca = config(&ia, vec![Peer { name: "b".into(), cert: ib.cert.clone() }]);
        // `a` holds up to sixteen, so that its own share for the one port
        // every right arrives at there (half) is not what binds here.
        ca.max_proxies_per_peer = 16;
        let a = Node::start(ca).unwrap();
        let mut cb = config(&ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }]);
        (cb.max_proxies_per_peer, cb.max_exports_per_user) = (8, 8);
        let b = Node::start(cb).unwrap();
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let (mut me, _keep) = ferry::port().unwrap();
        let refused = |me: &mut ferry::ReceiveRight| Refusal::of(&me.recv(WAIT).unwrap());

        // Root: four rights arrive live; one more (with a reply right to
        // hear why) is past half of the eight.
        let mine: Vec<_> = (0..4).map(|_| ferry::port().unwrap()).collect();
        let m = mine.iter().fold(Message::new(1), |m, (_, tx)| m.with_item(tx.try_clone().unwrap()));
        data.send(m, WAIT).unwrap();
        let held_for_root = srv.recv(WAIT).unwrap();
        assert_eq!((held_for_root.op(), held_for_root.items().len()), (1, 4));
        assert!(held_for_root.items().iter().all(|i| matches!(i, Item::Send(r) if !r.is_dead())));
        let (_p, extra) = ferry::port().unwrap();
        data.send(Message::new(2).with_item(extra).with_reply(me.make_send_once().unwrap()), WAIT).unwrap();
        let (r, why) = refused(&mut me).expect("a refusal");
        assert_eq!(r, Refusal::OverBudget, "{why}");
        assert!(why.contains("half"), "{why}");

        // Another user: two rights, half of the four root leaves, arrive live.
        let (mut other, mut said, mut tell) = keep_rights_as_nobody(&data);
        let held_for_other = srv.recv(WAIT).unwrap();
        assert_eq!((held_for_other.op(), held_for_other.items().len()), (10, 2));
        assert!(
            held_for_other.items().iter().all(|i| matches!(i, Item::Send(r) if !r.is_dead())),
            "another user's rights arrived as dead names: the peer's proxies were full"
        );
        // Its next right and reply right would pass its half: refused.
        writeln!(tell).unwrap();
        let line = said.next().unwrap().unwrap();
        let answer = match line.split(' ').collect::<Vec<_>>()[..] {
            ["answer", op, body] => Message::new(op.parse().unwrap())
                .with_body((0..body.len()).step_by(2).map(|i| u8::from_str_radix(&body[i..i + 2], 16).unwrap()).collect::<Vec<_>>()),
            _ => panic!("the other user's peer said {line:?}"),
        };
        assert_eq!(Refusal::of(&answer).map(|(r, _)| r), Some(Refusal::OverBudget), "{line}");
        // The peer holds six of this host's references: room is left.
        assert_eq!(a.links()[0].imports, 6, "{:?}", a.links());
        drop(tell);
        assert!(other.wait().unwrap().success());
        assert!(matches!(srv.recv(Timeout::Zero), Err(ferry::RecvError::Timeout)), "a refused message arrived");
        drop((held_for_root, held_for_other));
    });
}

/// The network server's status shows each user its own budgets: asked by
/// another user (uid nobody) through the status port, it is not full and
/// carries that user's line and not root's; asked by root, both.
#[test]
fn another_user_sees_only_its_own_budgets_in_the_status() {
    use ferry::spawn::CommandExt;

    if !common::can_play_other_user("another_user_sees_only_its_own_budgets_in_the_status") {
        return;
    }
    watchdog("another_user_sees_only_its_own_budgets_in_the_status", LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (mut srv, data) = export_data(&a, &b);
        let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());

        // Root has one right held at `a`; nobody, two.
        let (_mine, mine) = ferry::port().unwrap();
        data.send(Message::new(1).with_item(mine), WAIT).unwrap();
        let held_for_root = srv.recv(WAIT).unwrap();
        let (mut other, _said, tell) = keep_rights_as_nobody(&data);
        let held_for_other = srv.recv(WAIT).unwrap();
        assert_eq!((held_for_root.items().len(), held_for_other.items().len()), (1, 2));

        // `b`'s status port, served as ferry-netd serves it.
        let (port, status_right) = ferry::port().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let server = std::thread::scope(|scope| {
            let s2 = stop.clone();
            let b = &b;
            let server = scope.spawn(move || {
                let mut server = ferry_net::status::Server::new(port).unwrap();
                while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                    server.serve(b, &[], Timeout::millis(100));
                }
            });
            let out = common::peer_command_as(common::NOBODY, std::path::Path::new("/nonexistent"), "ask", &[&ferry_net::status::QUERY.to_string()])
                .pass_right(&status_right)
                .unwrap()
                .output()
                .unwrap();
            let mine = ferry_net::status::query(&status_right).unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            server.join().unwrap();
            (out, mine)
        });
        let (out, mine) = server;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let theirs = match line.split(' ').collect::<Vec<_>>()[..] {
            ["answer", op, body] if op == ferry_net::status::REPLY.to_string() => ferry_net::status::Status::decode(
                &(0..body.len()).step_by(2).map(|i| u8::from_str_radix(&body[i..i + 2], 16).unwrap()).collect::<Vec<_>>(),
            )
            .unwrap(),
            _ => panic!("the other user's peer said {line:?}"),
        };
        assert!(!theirs.full, "{theirs:?}");
        let shown: Vec<_> = theirs.users.iter().map(|u| (u.peer.as_str(), u.uid, u.rights, u.regions)).collect();
        assert_eq!(shown, [("a", common::NOBODY, 2, 0)], "what nobody was shown");
        assert!(mine.full);
        let lines: Vec<_> = mine.users.iter().map(|u| (u.peer.as_str(), u.uid, u.rights, u.regions)).collect();
        let mut want = vec![("a", root, 1, 0), ("a", common::NOBODY, 2, 0)];
        want.sort_by_key(|w| w.1);
        assert_eq!(lines, want, "what root was shown");
        // Its part done (holding two rights), the other user's peer goes.
        drop(tell);
        let _ = other.kill();
        let _ = other.wait();
        drop((held_for_root, held_for_other));
    });
}

/// A whole fetch is the asker's copy, made in its memory: another local
/// user (uid nobody) who fetches a region whole again and again, keeping
/// every copy, is charged for them, not the node (root) that fetched them.
/// The node used to fill a memfd of its own and hand it over, so each copy
/// counted against the node's memory however many the user kept.
#[test]
fn whole_fetches_are_counted_against_the_asker_not_the_node() {
    use std::io::{BufRead, Write};

    let test = "whole_fetches_are_counted_against_the_asker_not_the_node";
    if !common::can_play_other_user(test) {
        return;
    }
    let Some(cgroup) = common::MemoryCgroup::new(test) else { return };
    watchdog(test, LIMIT, || {
        let (ia, ib) = identities();
        let (a, b) = nodes(&ia, &ib);
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let len = (16 << 20) + 3 * PAGE + 7;
        let (right, _srv) = send_region(&a, &b, len);
        let mut other = common::spawn_other_user(&right, "fetch-whole", &["4"]);
        let mut said = std::io::BufReader::new(other.stdout.take().unwrap()).lines();
        assert_eq!(said.next().unwrap().unwrap(), "ready");
        cgroup.enter(other.id());
        let before = cgroup.usage();
        let mut tell = other.stdin.take().unwrap();
        writeln!(tell, "go").unwrap();
        let sum: u64 = (0..len).map(|i| u64::from(byte_at(i))).sum();
        assert_eq!(said.next().unwrap().unwrap(), format!("held 4 {sum}"), "four whole copies of the sender's bytes");
        let charged = cgroup.usage().saturating_sub(before);
        assert!(
            charged >= 4 * len as u64 * 9 / 10,
            "the four copies nobody holds ({} MiB) are counted against it: {} MiB were",
            (4 * len) >> 20,
            charged >> 20
        );
        assert_eq!(a.stats().fetches, 4);
        drop(tell);
        assert!(other.wait().unwrap().success());
    });
}

/// The child of [`a_touch_waiting_on_a_cut_link_ends_in_sigbus_not_a_hang`]:
/// maps a region from a node behind a relay, cuts the link, and touches a
/// page never fetched.
fn touch_after_cut() {
    let (ia, ib) = identities();
    let (a, b) = nodes(&ia, &ib);
    let relay = common::Relay::start(b.local_addr().unwrap(), 0);
    a.connect("b", relay.addr).unwrap();
    let (mut srv, to_srv) = ferry::port().unwrap();
    a.export("data", to_srv);
    wait_until("the link on both sides", || b.links().len() == 1);
    let data = b.lookup("data@a").unwrap();
    let len = (32 << 20) + 7 * PAGE;
    data.send(Message::new(1).with_item(pattern_region(len)), WAIT).unwrap();
    let Some(Item::Send(right)) = srv.recv(WAIT).unwrap().take_items().pop() else { panic!("a region by reference") };
    let region = RemoteRegion::open(right).unwrap();
    let view = region.map().unwrap();
    let bytes = view.as_slice().unwrap();
    assert_eq!(bytes[0], byte_at(0));
    println!("child: fetched the first page");
    relay.cut();
    // This fault's fetch can never be answered: the link is cut.
    let far = std::hint::black_box(bytes[len - 1]);
    println!("child: no signal, read {far}");
}

#[test]
fn a_touch_waiting_on_a_cut_link_ends_in_sigbus_not_a_hang() {
    if std::env::var_os("FERRY_NET_COR_CHILD").is_some() {
        return touch_after_cut();
    }
    watchdog("a_touch_waiting_on_a_cut_link_ends_in_sigbus_not_a_hang", LIMIT, || {
        use std::os::unix::process::ExitStatusExt;
        let name = "a_touch_waiting_on_a_cut_link_ends_in_sigbus_not_a_hang";
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env("FERRY_NET_COR_CHILD", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > end {
                let _ = child.kill();
                panic!("the child still waits on its fault a minute after the cut");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("child: fetched the first page"), "{text}");
        assert!(!text.contains("no signal"), "{text}");
        assert_eq!(out.status.signal(), Some(libc_sigbus()), "the waiting touch ends in SIGBUS (the pager's dead-pager failure): {:?}", out.status);
    });
}

fn libc_sigbus() -> i32 {
    rustix::process::Signal::BUS.as_raw()
}
