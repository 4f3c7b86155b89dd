//! Memory objects served by pagers in other processes: demand paging with
//! request counts, every supply mode, read-ahead, copy-on-write copies, dead
//! and hung pagers, and hostile clients.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdout};
use std::time::Duration;

use ferry::pager::{MappedObject, MemoryObject, ObjectState, PagerError, SupplyMode};
use ferry::{Bootstrap, Message, Timeout};

const PAGE: usize = 4096;
const KIND_PAGER: u8 = ferry::wire::KIND_PAGER;

fn pattern(at: usize) -> u8 {
    ((at / 4096 + at) % 251) as u8
}

/// A pager peer serving object 1 under `name`, started and ready.
struct PagerPeer {
    child: Child,
    _out: BufReader<ChildStdout>,
}

impl PagerPeer {
    fn start(bs: &std::path::Path, name: &str, opts: &[&str]) -> PagerPeer {
        let mut args = vec![name];
        args.extend_from_slice(opts);
        let mut child = common::spawn_peer(bs, "pager-serve", &args);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let line = read_line(&mut out);
        assert_eq!(line.trim(), "ready id=1");
        PagerPeer { child, _out: out }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// A private name service for one test: the one `common` started, or one
/// started here on a thread of the test process.
fn names(test: &str) -> std::path::PathBuf {
    let path = common::private_bootstrap(test);
    if Bootstrap::connect_to(&path).is_err() {
        let server = ferry::NameServer::bind(&path).expect("bind name server");
        std::thread::spawn(move || server.serve());
    }
    path
}

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut s = String::new();
    out.read_line(&mut s).unwrap();
    s
}

fn object(bs: &std::path::Path, name: &str) -> MemoryObject {
    let right = Bootstrap::connect_to(bs).unwrap().lookup(name).unwrap();
    MemoryObject::new(right, 1)
}

/// Bytes of a mapped object, copied out (in either supply mode).
fn read(m: &MappedObject, r: std::ops::Range<usize>) -> Vec<u8> {
    let mut v = vec![0u8; r.len()];
    assert!(m.read_at(r.start, &mut v), "{r:?} outside the object");
    v
}

fn check_page(m: &MappedObject, p: usize) {
    let end = ((p + 1) * PAGE).min(m.len());
    for (i, &b) in read(m, p * PAGE..end).iter().enumerate() {
        assert_eq!(b, pattern(p * PAGE + i), "byte {} of page {p}", i);
    }
}

#[test]
fn only_touched_pages_are_requested() {
    common::watchdog("only_touched_pages_are_requested", Duration::from_secs(60), || {
        let bs = names("pager-touched");
        let pager = PagerPeer::start(&bs, "obj", &["pages=64", "extra=100", "cluster=1"]);
        let obj = object(&bs, "obj");
        let m = obj.map().unwrap();
        assert_eq!(m.len(), 64 * PAGE + 100);
        assert_eq!(m.mode(), SupplyMode::Copy);
        assert_eq!(obj.stats().unwrap().requests, 0, "mapping alone asks for nothing");
        for p in [0, 7, 63, 64] {
            check_page(&m, p);
        }
        check_page(&m, 7);
        let s = obj.stats().unwrap();
        assert_eq!((s.faults, s.requests, s.pages_requested, s.pages_copied), (4, 4, 4, 4));
        assert_eq!(s.clients, 1);
        drop(m);
        pager.kill();
    });
}

#[test]
fn read_ahead_supplies_a_cluster_per_fault() {
    common::watchdog("read_ahead_supplies_a_cluster_per_fault", Duration::from_secs(60), || {
        let bs = names("pager-cluster");
        let pager = PagerPeer::start(&bs, "obj", &["pages=64", "cluster=16"]);
        let obj = object(&bs, "obj");
        let m = obj.map().unwrap();
        for p in 0..16 {
            check_page(&m, p);
        }
        let s = obj.stats().unwrap();
        assert_eq!((s.faults, s.requests, s.pages_requested), (1, 1, 16), "one fault brought sixteen pages");
        check_page(&m, 60);
        let s = obj.stats().unwrap();
        assert_eq!((s.requests, s.pages_requested), (2, 20), "the cluster is clipped at the object's end");
        // Read-ahead stops at pages already supplied: page 56 brings 56..60.
        check_page(&m, 56);
        assert_eq!(obj.stats().unwrap().pages_requested, 24);
        drop(m);
        pager.kill();
    });
}

#[test]
fn unavailable_pages_are_zero_filled() {
    common::watchdog("unavailable_pages_are_zero_filled", Duration::from_secs(60), || {
        let bs = names("pager-holes");
        let pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=1", "holes=1"]);
        let obj = object(&bs, "obj");
        let m = obj.map().unwrap();
        assert!(read(&m, PAGE..2 * PAGE).iter().all(|&b| b == 0));
        check_page(&m, 2);
        let s = obj.stats().unwrap();
        assert_eq!((s.pages_zeroed, s.pages_copied), (1, 1));
        drop(m);
        pager.kill();
    });
}

/// A pager that says a range is empty before any buffer is prepared gets
/// it zero-filled without being asked for data (its `data_request` would
/// supply 0xEE bytes there); ranges it does not declare are asked for as
/// before.
#[test]
fn declared_empty_ranges_are_zero_filled_without_a_request() {
    common::watchdog("declared_empty_ranges", Duration::from_secs(60), || {
        let bs = names("pager-empty");
        let pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=1", "holes=1", "empty=1"]);
        let obj = object(&bs, "obj");
        let m = obj.map().unwrap();
        for p in [1, 3, 5] {
            assert!(read(&m, p * PAGE..(p + 1) * PAGE).iter().all(|&b| b == 0), "page {p} is not zeros");
        }
        check_page(&m, 2);
        let s = obj.stats().unwrap();
        assert_eq!((s.pages_zeroed, s.pages_copied, s.requests), (3, 1, 4));
        drop(m);
        pager.kill();
    });
}

#[test]
fn zero_copy_supply_shares_one_page_cache() {
    common::watchdog("zero_copy_supply_shares_one_page_cache", Duration::from_secs(60), || {
        let bs = names("pager-zc");
        let pager = PagerPeer::start(&bs, "obj", &["pages=32", "extra=7", "cluster=4", "mode=zerocopy"]);
        let obj = object(&bs, "obj");
        let mut m = obj.map().unwrap();
        assert_eq!(m.mode(), SupplyMode::ZeroCopy);
        check_page(&m, 1);
        check_page(&m, 32);
        let s = obj.stats().unwrap();
        assert_eq!((s.requests, s.pages_requested), (2, 5), "pages 1..5 and the short last page");
        assert_eq!(s.pages_continued, 5);
        assert_eq!(s.pages_copied, 0);
        // Our writes are private: another process reads the pager's bytes.
        assert!(m.as_slice().is_none() && m.as_mut_slice().is_none(), "zero-copy pages are not handed out as slices");
        assert!(m.write_at(PAGE, &[0xee; PAGE]));
        let other = common::spawn_peer(&bs, "pager-client", &["obj", "1", "1", "2", "32"]);
        let out = common::finish(other);
        let sum = |p: usize| -> u64 { (p * PAGE..((p + 1) * PAGE).min(32 * PAGE + 7)).map(|i| pattern(i) as u64).sum() };
        assert_eq!(out, format!("page 1 sum {}\npage 2 sum {}\npage 32 sum {}\n", sum(1), sum(2), sum(32)));
        let s = obj.stats().unwrap();
        assert_eq!(s.pages_requested, 5, "the second process was served from the page cache, no new requests");
        assert_eq!(s.pages_continued, 10, "four pages of read-ahead and the last page for the second process");
        drop(m);
        pager.kill();
    });
}

#[test]
fn copies_keep_old_contents_when_the_original_changes() {
    common::watchdog("copies_keep_old_contents_when_the_original_changes", Duration::from_secs(60), || {
        let bs = names("pager-cow");
        let pager = PagerPeer::start(&bs, "obj", &["pages=16", "cluster=1"]);
        let obj = object(&bs, "obj");
        let v1 = obj.copy().unwrap();
        obj.write(3 * PAGE as u64 + 10, b"second edition").unwrap();
        let v2 = obj.copy().unwrap();
        obj.write(3 * PAGE as u64 + 10, b"THIRD").unwrap();
        obj.write(5 * PAGE as u64, &[1u8; 16]).unwrap();

        let now = obj.map().unwrap();
        assert_eq!(&read(&now, 3 * PAGE + 10..3 * PAGE + 24)[..], b"THIRDd edition");
        assert_eq!(&read(&now, 5 * PAGE..5 * PAGE + 16)[..], &[1u8; 16]);
        let old = v1.map().unwrap();
        check_page(&old, 3);
        check_page(&old, 5);
        check_page(&old, 9);
        let mid = v2.map().unwrap();
        assert_eq!(&read(&mid, 3 * PAGE + 10..3 * PAGE + 24)[..], b"second edition");
        check_page(&mid, 5);
        // Only changed pages were duplicated, once per copy that needed them.
        assert_eq!(v1.stats().unwrap().pages_shadowed, 2, "pages 3 and 5");
        assert_eq!(v2.stats().unwrap().pages_shadowed, 2, "pages 3 and 5");
        // A copy of a copy is a value too.
        let v1b = v1.copy().unwrap().map().unwrap();
        check_page(&v1b, 3);
        // Copies are values: they cannot be written through.
        assert!(matches!(v1.write(0, b"x"), Err(PagerError::Unsupported(_))));
        drop((now, old, mid, v1b));
        pager.kill();
    });
}

#[test]
fn a_killed_pager_makes_unsupplied_pages_raise_sigbus() {
    common::watchdog("a_killed_pager_makes_unsupplied_pages_raise_sigbus", Duration::from_secs(60), || {
        let bs = names("pager-dead");
        let pager = PagerPeer::start(&bs, "obj", &["pages=64", "cluster=4"]);
        let mut client = common::spawn_peer(&bs, "pager-outlive", &["obj", "1", "2"]);
        let mut out = BufReader::new(client.stdout.take().unwrap());
        assert_eq!(read_line(&mut out), format!("first {}\n", pattern(0)));
        assert_eq!(read_line(&mut out), "touching 2\n");
        assert_eq!(read_line(&mut out), format!("value {} state Live\n", pattern(2 * PAGE + 1)));
        pager.kill();
        assert_eq!(read_line(&mut out), "state=PagerDead\n");
        let status = client.wait().unwrap();
        assert_eq!(status.signal(), Some(libc_sigbus()), "untouched page after the pager died: {status}");
        assert_eq!(read_line(&mut out), "", "nothing after the fatal touch");
    });
}

#[test]
fn a_fault_waiting_on_a_hung_pager_ends_when_the_pager_is_killed() {
    common::watchdog("a_fault_waiting_on_a_hung_pager_ends_when_the_pager_is_killed", Duration::from_secs(60), || {
        let bs = names("pager-hung");
        let pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=1", "hang=5"]);
        let mut client = common::spawn_peer(&bs, "pager-outlive", &["obj", "1", "5"]);
        let mut out = BufReader::new(client.stdout.take().unwrap());
        assert_eq!(read_line(&mut out), format!("first {}\n", pattern(0)));
        assert_eq!(read_line(&mut out), "touching 5\n");
        // The client is stuck in the fault, since the pager does not answer.
        std::thread::sleep(Duration::from_millis(100));
        assert!(client.try_wait().unwrap().is_none(), "the client waits for the pager");
        // Requests to the stuck pager give up after their timeout.
        let stuck = object(&bs, "obj").with_timeout(Timeout::millis(200));
        assert!(matches!(stuck.stats(), Err(PagerError::Timeout)));
        pager.kill();
        assert!(matches!(stuck.stats(), Err(PagerError::PagerDead)));
        let status = client.wait().unwrap();
        assert_eq!(status.signal(), Some(libc_sigbus()), "{status}");
    });
}

#[test]
fn zero_fill_policy_turns_a_dead_pager_into_zeros() {
    common::watchdog("zero_fill_policy_turns_a_dead_pager_into_zeros", Duration::from_secs(60), || {
        let bs = names("pager-zero");
        let pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=1", "hang=5", "policy=zero"]);
        let mut client = common::spawn_peer(&bs, "pager-outlive", &["obj", "1", "5"]);
        let mut out = BufReader::new(client.stdout.take().unwrap());
        assert_eq!(read_line(&mut out), format!("first {}\n", pattern(0)));
        assert_eq!(read_line(&mut out), "touching 5\n");
        pager.kill();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        assert_eq!(rest, "value 0 state PagerDead\nstate=PagerDead\nlast 0\n");
        assert!(client.wait().unwrap().success());
    });
}

#[test]
fn revoking_a_live_pager_stops_waiting_for_it() {
    common::watchdog("revoking_a_live_pager_stops_waiting_for_it", Duration::from_secs(60), || {
        let bs = names("pager-revoke");
        let pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=1", "policy=zero"]);
        let m = object(&bs, "obj").map().unwrap();
        check_page(&m, 1);
        m.revoke();
        assert_eq!(m.state(), ObjectState::Revoked);
        assert!(read(&m, 2 * PAGE..3 * PAGE).iter().all(|&b| b == 0));
        check_page(&m, 1);
        drop(m);
        pager.kill();
    });
}

#[test]
fn dirty_pages_are_tracked_and_returned_on_clean() {
    common::watchdog("dirty_pages_are_tracked_and_returned_on_clean", Duration::from_secs(60), || {
        let bs = names("pager-dirty");
        let pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=2", "dirty=1"]);
        let obj = object(&bs, "obj");
        let mut m = obj.map().unwrap();
        check_page(&m, 0);
        assert_eq!(obj.stats().unwrap().pages_dirtied, 0, "reading dirties nothing");
        m.as_mut_slice().unwrap()[2 * PAGE..2 * PAGE + 5].copy_from_slice(b"hello");
        m.as_mut_slice().unwrap()[2 * PAGE + 100] = 1;
        m.as_mut_slice().unwrap()[5 * PAGE] = 7;
        assert_eq!(obj.stats().unwrap().pages_dirtied, 2, "one report per page, the first write only");
        assert_eq!(obj.clean().unwrap(), 2);
        while obj.stats().unwrap().pages_returned < 2 {
            common::nap();
        }
        // The pager took the pages back: a new mapping (here, in another
        // process) reads what this one wrote.
        let other = common::spawn_peer(&bs, "pager-client", &["obj", "1", "2", "5"]);
        let sum2: u64 = (2 * PAGE..3 * PAGE).map(|i| m.as_slice().unwrap()[i] as u64).sum();
        let sum5: u64 = (5 * PAGE..6 * PAGE).map(|i| m.as_slice().unwrap()[i] as u64).sum();
        assert_eq!(common::finish(other), format!("page 2 sum {sum2}\npage 5 sum {sum5}\n"));
        // Returned pages are protected again: the next write is reported anew.
        m.as_mut_slice().unwrap()[2 * PAGE] = b'j';
        assert_eq!(obj.stats().unwrap().pages_dirtied, 3);
        assert_eq!(obj.clean().unwrap(), 1);
        assert_eq!(&m.as_slice().unwrap()[2 * PAGE..2 * PAGE + 5], b"jello");
        drop(m);
        pager.kill();
    });
}

/// A write to a page whose pager died waits for nobody. With dirty pages
/// tracked, a supplied page stays write-protected until the pager hears of
/// the first write; once the pager was gone (or revoked) nothing answered
/// that write, and the writing thread waited for ever.
#[test]
fn a_write_after_the_pager_died_never_waits_for_it() {
    common::watchdog("a_write_after_the_pager_died_never_waits_for_it", Duration::from_secs(120), || {
        let bs = names("pager-dead-write");
        let pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=1", "dirty=1"]);
        let mut m = object(&bs, "obj").map().unwrap();
        check_page(&m, 1);
        pager.kill();
        assert_eq!(m.wait_until_ended(Duration::from_secs(10)), ObjectState::PagerDead);
        let (done, written) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            m.as_mut_slice().unwrap()[PAGE + 3] = 0xAB;
            let _ = done.send((m.as_slice().unwrap()[PAGE + 3], m.as_slice().unwrap()[PAGE + 4]));
        });
        let got = written.recv_timeout(Duration::from_secs(30));
        assert_eq!(got, Ok((0xAB, pattern(PAGE + 4))), "a write to a supplied page after the pager died did not end within 30 s");
    });
}

/// A pager that asks for its pages back (`CLEAN`) and never reads what
/// it asked for cannot keep its client from unmapping. The client's
/// guardian sent each page back waiting without end for room in the
/// pager's port, and dropping the mapping waits for the guardian: another
/// user's pager held the dropping thread of a root process for ever.
#[test]
fn a_pager_that_never_takes_back_the_pages_it_asked_for_cannot_hold_up_unmapping() {
    clean_flood_then_drop("a_pager_that_never_takes_back_the_pages_it_asked_for_cannot_hold_up_unmapping", &["8"]);
}

/// Nor can one that asks back pages it never supplied: the guardian,
/// reading such a page to send it back, waited in its fault for the pager,
/// which never answered, and the drop waited for the guardian for ever.
#[test]
fn a_pager_asking_back_pages_it_never_supplied_cannot_hold_up_unmapping() {
    clean_flood_then_drop("a_pager_asking_back_pages_it_never_supplied_cannot_hold_up_unmapping", &["8", "first-only"]);
}

/// Mapping hands the pager the caller's userfaultfd, with which the kernel
/// lets it register and fill any range of the caller's memory, not only
/// the object's: a pager run by another user (uid nobody here, the caller
/// root) is refused with `UntrustedPager` before anything is sent (the
/// tests below map such a pager's object trusting it).
#[test]
fn a_pager_run_by_another_user_is_not_given_the_callers_userfaultfd() {
    let test = "a_pager_run_by_another_user_is_not_given_the_callers_userfaultfd";
    if !common::can_play_other_user(test) {
        return;
    }
    common::watchdog(test, Duration::from_secs(120), || {
        let (mut collect, to_collect) = ferry::port().unwrap();
        let mut pager = common::spawn_other_user(&to_collect, "pager-clean-flood", &["8"]);
        let mut got = collect.recv(Timeout::After(Duration::from_secs(10))).unwrap();
        let Some(ferry::Item::Send(right)) = got.take_items().pop() else { panic!("no right from the pager") };
        let object = MemoryObject::new(right, 1).with_timeout(Timeout::After(Duration::from_secs(10)));
        let refused = object.map();
        drop(pager.stdin.take());
        let _ = pager.kill();
        let _ = pager.wait();
        assert!(matches!(refused, Err(PagerError::UntrustedPager(Some(65534)))), "{:?}", refused.map(|_| ()));
    });
}

/// Maps the object of a `pager-clean-flood` pager run as uid nobody with
/// `args`, waits until it has asked for its pages back, and checks that
/// dropping the mapping ends.
fn clean_flood_then_drop(test: &str, args: &[&str]) {
    if !common::can_play_other_user(test) {
        return;
    }
    common::watchdog(test, Duration::from_secs(120), || {
        let (mut collect, to_collect) = ferry::port().unwrap();
        let mut pager = common::spawn_other_user(&to_collect, "pager-clean-flood", args);
        let mut got = collect.recv(Timeout::After(Duration::from_secs(10))).unwrap();
        assert_eq!(got.op(), 21);
        let Some(ferry::Item::Send(right)) = got.take_items().pop() else { panic!("no right from the pager") };
        // Another user's pager gets this process's userfaultfd only when
        // trusted with it (`a_pager_run_by_another_user_is_not_given_the_callers_userfaultfd`).
        let m = MemoryObject::new(right, 1).with_timeout(Timeout::After(Duration::from_secs(10))).trusting_any_pager().map().unwrap();
        assert_eq!(read(&m, 0..PAGE), vec![7u8; PAGE]);
        let mut out = BufReader::new(pager.stdout.take().unwrap());
        let line = read_line(&mut out);
        let said: Vec<usize> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        let [sent, queued] = said[..] else { panic!("pager said {line:?}") };
        assert!(sent > 0 && queued > 0, "the pager sent no CLEAN, or got nothing back: {line:?}");
        let (done, dropped) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(m);
            let _ = done.send(());
        });
        let gone = dropped.recv_timeout(Duration::from_secs(30)).is_ok();
        drop(pager.stdin.take());
        let _ = pager.kill();
        let _ = pager.wait();
        assert!(gone, "dropping the mapping still waited after 30 s for a pager that sent {sent} CLEANs and left {queued} bytes of its pages unread at its port");
    });
}

#[test]
fn the_file_server_hands_out_sealed_snapshots_read_without_faults() {
    use ferry::fileserver::FileClient;
    use std::os::unix::fs::PermissionsExt;
    common::watchdog("the_file_server_hands_out_sealed_snapshots_read_without_faults", Duration::from_secs(60), || {
        let bs = names("fileserver");
        let root = bs.parent().unwrap().join("files");
        std::fs::create_dir_all(&root).unwrap();
        let size = 40 * PAGE + 123;
        let original: Vec<u8> = (0..size).map(pattern).collect();
        std::fs::write(root.join("README"), &original).unwrap();
        std::fs::write(root.join("empty"), b"").unwrap();
        std::fs::write(root.join("secret"), b"not for you").unwrap();
        std::fs::set_permissions(root.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
        rustix::fs::chown(root.join("secret"), Some(rustix::fs::Uid::from_raw(12345)), None).unwrap();

        let mut child = common::spawn_peer(&bs, "file-serve", &["files", root.to_str().unwrap()]);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        assert_eq!(read_line(&mut out), "ready\n");
        let fs = FileClient::new(Bootstrap::connect_to(&bs).unwrap().lookup("files").unwrap());

        let mut snap = fs.open("README").unwrap();
        assert_eq!(snap.as_slice().len(), size);
        assert!(snap.is_direct(), "the version's sealed memory is mapped directly");
        assert_eq!(snap.as_slice(), &original[..]);
        // Every page was read, and none was asked of the server: the kernel
        // served the faults from the version's memory.
        assert_eq!(fs.stats(snap.version()).unwrap().pages_requested, 0);
        assert_eq!(snap.object().unwrap().stats().unwrap().faults, 0);
        // Through the pager, the snapshot's object holds the same bytes.
        let paged = snap.object().unwrap().map().unwrap();
        assert_eq!(paged.as_slice().unwrap(), &original[..]);
        assert_eq!(fs.stats(snap.version()).unwrap().pages_requested, size.div_ceil(PAGE) as u64);
        drop(paged);
        // Our writes stay ours.
        snap.as_mut_slice()[0..5].copy_from_slice(b"mine!");
        assert_eq!(std::fs::read(root.join("README")).unwrap(), original);

        // Writing back replaces the file in one message; the old snapshot
        // keeps the old contents, even in pages it had not read yet.
        fs.write("README", b"brand new contents").unwrap();
        assert_eq!(std::fs::read(root.join("README")).unwrap(), b"brand new contents");
        assert_eq!(&snap.as_slice()[30 * PAGE..31 * PAGE], &original[30 * PAGE..31 * PAGE]);
        assert_eq!(&snap.as_slice()[size - 123..], &original[size - 123..]);
        assert_eq!(&snap.as_slice()[0..5], b"mine!");
        let fresh = fs.open("README").unwrap();
        assert_eq!(fresh.as_slice(), b"brand new contents");

        assert_eq!(fs.open("empty").unwrap().as_slice(), b"");
        assert!(matches!(fs.open("secret"), Err(PagerError::Denied(_))), "mode 0600 of another user");
        assert!(matches!(fs.write("secret", b"x"), Err(PagerError::Denied(_))));
        assert!(matches!(fs.open("../bootstrap"), Err(PagerError::Denied(_))), "no escaping the root");
        assert!(matches!(fs.open("/etc/passwd"), Err(PagerError::Denied(_))));
        assert!(matches!(fs.open("missing"), Err(PagerError::BadRequest(_))));
        // Unused snapshots, and old versions nobody holds, are reclaimed.
        let (snap_id, old_version) = (snap.object().unwrap().id(), snap.version());
        drop(snap);
        for id in [snap_id, old_version] {
            while !matches!(fs.stats(id), Err(PagerError::NoSuchObject(_))) {
                common::nap();
            }
        }
        assert!(fs.stats(fresh.version()).is_ok(), "the current version stays");
        drop(fresh);
        child.kill().unwrap();
        child.wait().unwrap();
    });
}

#[test]
fn unprivileged_processes_get_user_mode_only_handling() {
    common::watchdog("unprivileged_processes_get_user_mode_only_handling", Duration::from_secs(60), || {
        let bs = names("pager-unpriv");
        let out = common::finish(common::spawn_peer(&bs, "pager-unprivileged", &[]));
        let knob = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").unwrap_or_default();
        if knob.trim() == "0" {
            assert_eq!(out, "full=false poison=true\nuser_mode_only=true byte=true\nsyscall=Err(Os { code: 14, kind: Uncategorized, message: \"Bad address\" })\n");
        } else {
            assert!(out.contains("byte=true"), "{out}");
        }
    });
}

#[test]
fn mapping_and_unmapping_leaks_nothing() {
    common::watchdog("mapping_and_unmapping_leaks_nothing", Duration::from_secs(60), || {
        let bs = names("pager-churn");
        let pager = PagerPeer::start(&bs, "obj", &["pages=16", "cluster=4"]);
        let out = common::finish(common::spawn_peer(&bs, "pager-churn", &["obj", "1", "50"]));
        assert_eq!(out, "fds +0 threads +0\n");
        let obj = object(&bs, "obj");
        while obj.stats().unwrap().clients != 0 {
            common::nap();
        }
        assert!(obj.stats().unwrap().faults >= 50);
        pager.kill();
    });
}

fn libc_sigbus() -> i32 {
    rustix::process::Signal::BUS.as_raw()
}

/// Sends a raw datagram with descriptors, bypassing ferry's encoder.
fn send_raw(to: &ferry::SendRight, bytes: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    }
    sendmsg(to.as_fd(), &[std::io::IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL).unwrap();
}

/// A one-item message header + item, as the wire format lays them out.
fn raw_item(op: u32, kind: u8, mode: u8, len: u64, addr: u64) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(b"FERY");
    v.push(1);
    v.push(0);
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&op.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&[0; 6]);
    v.push(kind);
    v.push(mode);
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&addr.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    v
}

#[test]
fn garbage_from_clients_never_crashes_the_pager() {
    common::watchdog("garbage_from_clients_never_crashes_the_pager", Duration::from_secs(60), || {
        let bs = names("pager-garbage");
        let mut pager = PagerPeer::start(&bs, "obj", &["pages=8", "cluster=2"]);
        let right = Bootstrap::connect_to(&bs).unwrap().lookup("obj").unwrap();
        let call = |m: Message| -> Message {
            let (mut rx, _tx) = ferry::port().unwrap();
            let once = rx.make_send_once().unwrap();
            right.send(m.with_reply(once), Timeout::Infinite).unwrap();
            rx.recv(Timeout::Infinite).unwrap()
        };
        const ERROR: u32 = 0x7061_00ff;
        const OPEN: u32 = 0x7061_0001;
        const ATTACH: u32 = 0x7061_0003;
        const WRITE: u32 = 0x7061_0009;
        // Unknown operations, short bodies, unknown objects.
        assert_eq!(call(Message::new(0xdead)).op(), ERROR);
        assert_eq!(call(Message::new(OPEN).with_body(vec![1, 2, 3])).op(), ERROR);
        assert_eq!(call(Message::new(OPEN).with_body(99u64.to_le_bytes())).op(), ERROR);
        // An attach without its descriptors, or with the wrong ones.
        assert_eq!(call(Message::new(ATTACH).with_body(1u64.to_le_bytes())).op(), ERROR);
        let (_r, s) = ferry::port().unwrap();
        assert_eq!(call(Message::new(ATTACH).with_body(1u64.to_le_bytes()).with_item(s)).op(), ERROR);
        // A write past the object's end.
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend_from_slice(&(8 * PAGE as u64 - 2).to_le_bytes());
        body.extend_from_slice(b"overflow");
        assert_eq!(call(Message::new(WRITE).with_body(body)).op(), ERROR);
        // Forged memory-object items: a memfd posing as a userfaultfd, an
        // unknown item mode, an unaligned range. The port rejects them.
        let memfd = rustix::fs::memfd_create("fake", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        send_raw(&right, &raw_item(ATTACH, KIND_PAGER, 1, PAGE as u64 * 8, 0x10000), &[memfd.as_fd()]);
        send_raw(&right, &raw_item(ATTACH, KIND_PAGER, 9, PAGE as u64 * 8, 0x10000), &[memfd.as_fd()]);
        send_raw(&right, &raw_item(ATTACH, KIND_PAGER, 2, PAGE as u64 * 8, 0), &[memfd.as_fd()]);
        send_raw(&right, &raw_item(OPEN, KIND_PAGER, 1, 100, 0x10001), &[memfd.as_fd()]);
        // Garbage bytes with no header at all.
        send_raw(&right, b"not a ferry message", &[]);
        // A forged "dirty page" from a process not attached to the object
        // (and for an object that does not track dirty pages) is ignored.
        let mut dirty = 1u64.to_le_bytes().to_vec();
        dirty.extend_from_slice(&0u64.to_le_bytes());
        dirty.extend_from_slice(&[0xaa; PAGE]);
        right.send(Message::new(0x7061_000c).with_body(dirty), Timeout::Infinite).unwrap();
        // A client that attaches and dies is detached.
        let quitter = common::spawn_peer(&bs, "pager-client", &["obj", "1", "0"]);
        common::finish(quitter);
        let obj = MemoryObject::new(right.try_clone().unwrap(), 1);
        while obj.stats().unwrap().clients != 0 {
            common::nap();
        }
        // The pager still serves a well-behaved client.
        assert!(pager.alive());
        let m = obj.map().unwrap();
        check_page(&m, 6);
        check_page(&m, 0);
        assert_eq!(obj.stats().unwrap().clients, 1);
        assert!(matches!(MemoryObject::new(right.try_clone().unwrap(), 42).map(), Err(PagerError::NoSuchObject(42))));
        drop(m);
        pager.kill();
        // And once it is gone, a new request says so.
        assert!(matches!(obj.map(), Err(PagerError::PagerDead)));
    });
}
