//! The file server against another local user: root serves a directory
//! (in this test process, on a thread, published as the system name
//! `files` as `ferryd --files` does), and an attacker process runs as uid
//! `nobody`. Each test reproduces one attack and checks that it fails
//! cleanly while everyone else keeps being served, and that whatever the
//! attacker made the server hold is released when it goes.
//!
//! The tests of this file count the descriptors of this process, so they
//! run one at a time (`common::serial`).

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::NOBODY;
use ferry::fileserver::{FileClient, FileServer};
use ferry::pager::{Budgets, ObjectConfig, PagerError};
use ferry::{Bootstrap, Timeout};

const PAGE: usize = 4096;
const LIMIT: Duration = Duration::from_secs(120);

/// A file server run by root for one test.
struct Served {
    root: PathBuf,
    bootstrap: PathBuf,
    objects: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl Served {
    /// Serves a fresh directory holding `README` (40 pages and a bit,
    /// world-readable), after `setup` adds what the test needs.
    fn start(test: &str, budgets: Budgets, setup: impl FnOnce(&Path)) -> Served {
        Served::start_with(test, budgets, None, setup)
    }

    /// As [`Served::start`], with a memory budget per user when `memory`
    /// is given.
    fn start_with(test: &str, budgets: Budgets, memory: Option<u64>, setup: impl FnOnce(&Path)) -> Served {
        let dir = common::temp_path(format!("ferry-files-{}-{test}", std::process::id()));
        let root = dir.join("root");
        std::fs::create_dir_all(&root).unwrap();
        chmod(&dir, 0o755);
        chmod(&root, 0o755);
        std::fs::write(root.join("README"), readme()).unwrap();
        chmod(&root.join("README"), 0o644);
        setup(&root);

        let (mut server, right) = FileServer::new(&root, ObjectConfig { cluster: 4, ..ObjectConfig::default() }).unwrap();
        server.set_budgets(budgets);
        if let Some(bytes) = memory {
            server.set_memory_budget(bytes);
        }
        let bootstrap = dir.join("bootstrap");
        let mut names = ferry::NameServer::bind(&bootstrap).unwrap();
        names.add_system_name("files", right).unwrap();
        names.spawn().unwrap();
        chmod(&bootstrap, 0o666);

        let objects = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (o, s) = (objects.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("files".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    server.serve(Timeout::millis(20)).unwrap();
                    o.store(server.objects().object_count(), Ordering::Relaxed);
                }
            })
            .unwrap();
        Served { root, bootstrap, objects, stop, thread: Some(thread) }
    }

    /// A client as root (this process).
    fn client(&self) -> FileClient {
        FileClient::new(Bootstrap::connect_to(&self.bootstrap).unwrap().lookup("files").unwrap())
            .with_timeout(Timeout::After(Duration::from_secs(10)))
    }

    /// An attacker process as uid `nobody`.
    fn attacker(&self, role: &str, args: &[&str]) -> Child {
        common::spawn_peer_as(NOBODY, &self.bootstrap, role, args)
    }

    /// Objects the server hosts, once it has settled at `want` (or the
    /// count it settled at if that never comes).
    fn objects_settled(&self, want: usize) -> usize {
        for _ in 0..2000 {
            if self.objects.load(Ordering::Relaxed) == want {
                return want;
            }
            common::nap();
        }
        self.objects.load(Ordering::Relaxed)
    }

    /// The descriptors of this process, once they are at most `most` (or
    /// the count they settled at).
    fn fds_settled(&self, most: usize) -> usize {
        for _ in 0..2000 {
            let n = common::open_fds();
            if n <= most {
                return n;
            }
            common::nap();
        }
        common::open_fds()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The descriptors of this process that are file versions' memory (the
/// server runs in this process).
fn version_memfds() -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").into_iter().flatten().flatten() {
        if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:ferry-file")) {
            v.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    v
}

/// Version memfds, once there are at most `most` (or the count they
/// settled at).
fn version_memfds_settled(most: usize) -> usize {
    for _ in 0..2000 {
        let n = version_memfds().len();
        if n <= most {
            return n;
        }
        common::nap();
    }
    version_memfds().len()
}

fn readme() -> Vec<u8> {
    (0..40 * PAGE + 123).map(|i| ((i / 4096 + i) % 251) as u8).collect()
}

fn readme_sum() -> u64 {
    readme().iter().map(|&b| b as u64).sum()
}

fn lines(child: &mut Child) -> BufReader<ChildStdout> {
    BufReader::new(child.stdout.take().unwrap())
}

fn line(out: &mut BufReader<ChildStdout>) -> String {
    let mut s = String::new();
    out.read_line(&mut s).unwrap();
    s.trim_end().to_owned()
}

fn kill(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// Root reads README through the server: everyone else is still served.
fn root_is_served(s: &Served) {
    let snap = s.client().open("README").expect("root's open while the attack goes on");
    assert_eq!(snap.as_slice().len(), 40 * PAGE + 123);
    assert_eq!(snap.as_slice().iter().map(|&b| b as u64).sum::<u64>(), readme_sum());
}

#[test]
fn another_user_cannot_use_root_s_objects_by_id() {
    let test = "another_user_cannot_use_root_s_objects_by_id";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("ids", Budgets::default(), |root| {
            std::fs::write(root.join("secret"), vec![7u8; 3 * PAGE]).unwrap();
            chmod(&root.join("secret"), 0o600);
        });
        // Root opens its secret; the ids are small integers anyone can guess.
        let snap = s.client().open("secret").unwrap();
        assert_eq!(snap.as_slice()[PAGE], 7);
        let (snapshot, version) = (snap.object().unwrap().id(), snap.version());
        let ids = [snapshot.to_string(), version.to_string(), "999999".to_string()];
        let args: Vec<&str> = ids.iter().map(String::as_str).collect();
        let out = common::finish(s.attacker("files-steal", &args));
        // Denied looks exactly like missing: no oracle for probing ids.
        let want: String = ids.iter().map(|id| format!("{id} map NoSuchObject stats NoSuchObject copy NoSuchObject\n")).collect();
        assert_eq!(out, want);
        // Nobody can open the file by name either, and root still reads it.
        let out = common::finish(s.attacker("files-open", &["secret", "README"]));
        assert_eq!(out, format!("secret err Denied\nREADME ok {} {}\n", 40 * PAGE + 123, readme_sum()));
        assert_eq!(snap.as_slice()[2 * PAGE], 7);
    });
}

#[test]
fn directory_permissions_are_the_file_system_s() {
    let test = "directory_permissions_are_the_file_system_s";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("dirs", Budgets::default(), |root| {
            for (dir, mode) in [("private", 0o700), ("public", 0o755), ("dropbox", 0o777)] {
                std::fs::create_dir(root.join(dir)).unwrap();
                std::fs::write(root.join(dir).join("note"), b"a note").unwrap();
                chmod(&root.join(dir).join("note"), 0o666);
                chmod(&root.join(dir), mode);
            }
            std::fs::write(root.join("shared"), b"shared").unwrap();
            chmod(&root.join("shared"), 0o666);
            // Group permissions: by the asker's (primary) gid, not root's.
            for (file, gid) in [("ours", NOBODY), ("roots", 0)] {
                std::fs::write(root.join(file), b"group").unwrap();
                rustix::fs::chown(root.join(file), None, Some(rustix::fs::Gid::from_raw(gid))).unwrap();
                chmod(&root.join(file), 0o640);
            }
        });
        // A world-readable file in a 0700 directory is not the world's.
        let out = common::finish(s.attacker("files-open", &["private/note", "public/note"]));
        assert_eq!(out, "private/note err Denied\npublic/note ok 6 567\n");
        let out = common::finish(s.attacker("files-open", &["ours", "roots"]));
        assert_eq!(out, "ours ok 5 557\nroots err Denied\n");
        // Writing back replaces the file by a rename: the directory must be
        // writable by the writer, not only the file.
        assert_eq!(common::finish(s.attacker("files-write", &["shared", "mine now"])), "err Denied\n");
        assert_eq!(common::finish(s.attacker("files-write", &["public/note", "mine now"])), "err Denied\n");
        assert_eq!(common::finish(s.attacker("files-write", &["private/note", "mine now"])), "err Denied\n");
        assert_eq!(std::fs::read(s.root.join("shared")).unwrap(), b"shared");
        assert_eq!(common::finish(s.attacker("files-write", &["dropbox/note", "mine now"])), "ok\n");
        assert_eq!(std::fs::read(s.root.join("dropbox/note")).unwrap(), b"mine now");
        // Root's own view is unchanged.
        assert_eq!(s.client().open("private/note").unwrap().as_slice(), b"a note");
        root_is_served(&s);
    });
}

/// Another user creates, in a directory both may write (sticky, as a
/// system's scratch directory is), the names a write-back of root's file
/// there would give its new contents: the file's name, the server's pid
/// and a counter. Root's
/// write-back still succeeds: the new contents' name is one nobody can
/// guess. It used to be refused ("the temporary name for its new contents
/// is taken") for as long as the squatter liked.
#[test]
fn another_user_cannot_squat_the_names_of_a_write_back() {
    let test = "another_user_cannot_squat_the_names_of_a_write_back";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("squat", Budgets::default(), |root| {
            std::fs::create_dir(root.join("shared")).unwrap();
            chmod(&root.join("shared"), 0o1777);
            std::fs::write(root.join("shared/mine"), b"root's").unwrap();
            chmod(&root.join("shared/mine"), 0o644);
        });
        let prefix = format!("{}/shared/mine.ferry-new-{}-", s.root.display(), std::process::id());
        let made = common::finish(s.attacker("files-squat", &[&prefix, "3000"]));
        assert_eq!(made.trim(), "3000", "the squatter could not make its names");
        s.client().write("shared/mine", b"root's new contents").expect("root's write-back");
        assert_eq!(std::fs::read(s.root.join("shared/mine")).unwrap(), b"root's new contents");
        root_is_served(&s);
    });
}

#[test]
fn a_fifo_never_blocks_the_file_server() {
    let test = "a_fifo_never_blocks_the_file_server";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("fifo", Budgets::default(), |root| {
            rustix::fs::mknodat(rustix::fs::CWD, root.join("pipe"), rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o666), 0)
                .unwrap();
            chmod(&root.join("pipe"), 0o666);
        });
        let out = common::finish(s.attacker("files-open", &["pipe", "README"]));
        assert_eq!(out, format!("pipe err Unsupported\nREADME ok {} {}\n", 40 * PAGE + 123, readme_sum()));
        assert!(matches!(s.client().write("pipe", b"x"), Err(PagerError::Unsupported(_))));
        root_is_served(&s);
    });
}

fn blocking_client_does_not_freeze(test: &str, read_own: &str) {
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start(&format!("block{read_own}"), Budgets::default(), |_| {});
        let mut attacker = s.attacker("files-block", &["README", read_own]);
        let mut out = lines(&mut attacker);
        assert_eq!(line(&mut out), "ready");
        // The server keeps serving others, faults and requests alike.
        for _ in 0..3 {
            root_is_served(&s);
        }
        kill(attacker);
        root_is_served(&s);
    });
}

#[test]
fn a_client_clearing_nonblock_on_its_userfaultfd_cannot_freeze_the_server() {
    blocking_client_does_not_freeze("a_client_clearing_nonblock_on_its_userfaultfd_cannot_freeze_the_server", "0");
}

#[test]
fn a_client_reading_its_own_userfaultfd_cannot_freeze_the_server() {
    blocking_client_does_not_freeze("a_client_reading_its_own_userfaultfd_cannot_freeze_the_server", "1");
}

#[test]
fn deleted_files_leave_no_descriptors_behind() {
    let test = "deleted_files_leave_no_descriptors_behind";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        const N: usize = 1000;
        let s = Served::start("churn", Budgets::default(), |root| {
            std::fs::create_dir(root.join("small")).unwrap();
            chmod(&root.join("small"), 0o755);
            for i in 0..N {
                std::fs::write(root.join(format!("small/f{i}")), format!("file {i}")).unwrap();
            }
        });
        root_is_served(&s);
        let objects = s.objects_settled(0);
        let fds = s.fds_settled(0);
        assert_eq!(common::finish(s.attacker("files-churn", &["small/f", &N.to_string()])), format!("opened {N}\n"));
        for i in 0..N {
            std::fs::remove_file(s.root.join(format!("small/f{i}"))).unwrap();
        }
        // Every version went with its last snapshot, and its descriptor too.
        assert_eq!(s.objects_settled(objects), objects);
        let after = s.fds_settled(fds + 8);
        assert!(after <= fds + 8, "the server kept descriptors: {fds} before, {after} after");
        root_is_served(&s);
    });
}

#[test]
fn snapshots_never_mapped_are_bounded_per_user_and_released_with_their_client() {
    let test = "snapshots_never_mapped_are_bounded_per_user_and_released_with_their_client";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        const OPENS: usize = 20_000;
        let budgets = Budgets::default();
        let s = Served::start("hoard", budgets, |_| {});
        let objects = s.objects_settled(0);
        let fds = s.fds_settled(0);
        let mut attacker = s.attacker("files-hoard", &["README", &OPENS.to_string()]);
        let mut out = lines(&mut attacker);
        let held = budgets.holds_per_user;
        assert_eq!(line(&mut out), format!("granted {held} over-budget {} other 0", OPENS - held));
        // At most a snapshot per hold, and one version of the file.
        let during = s.objects.load(Ordering::Relaxed);
        assert!(during <= objects + held + 1, "{during} objects for {held} holds");
        // Root is not charged for nobody's snapshots.
        root_is_served(&s);
        kill(attacker);
        assert_eq!(s.objects_settled(objects), objects, "the dead client's snapshots are released");
        let after = s.fds_settled(fds + 8);
        assert!(after <= fds + 8, "the server kept descriptors: {fds} before, {after} after");
        root_is_served(&s);
    });
}

/// A client that parks each snapshot's hold in flight (its receiving
/// socket sent into the queue of the hold socket the server keeps, so it
/// never hangs up) and exits: the server lets such holds go, as it does
/// those of a client that died, and the user's budget is whole again.
#[test]
fn holds_parked_in_flight_are_released_with_their_client() {
    let test = "holds_parked_in_flight_are_released_with_their_client";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let budgets = Budgets::default();
        let s = Served::start("park", budgets, |_| {});
        let objects = s.objects_settled(0);
        let fds = s.fds_settled(0);
        let held = budgets.holds_per_user;
        let mut parker = s.attacker("files-park", &["README", &held.to_string()]);
        let mut out = lines(&mut parker);
        assert_eq!(line(&mut out), format!("parked {held} over-budget 0 other 0"));
        let _ = parker.wait();
        assert_eq!(s.objects_settled(objects), objects, "the parked holds' snapshots are released");
        let after = s.fds_settled(fds + 8);
        assert!(after <= fds + 8, "the server kept descriptors: {fds} before, {after} after");
        // The user's whole budget is there again.
        let mut again = s.attacker("files-hoard", &["README", &held.to_string()]);
        let mut out = lines(&mut again);
        assert_eq!(line(&mut out), format!("granted {held} over-budget 0 other 0"));
        kill(again);
        root_is_served(&s);
    });
}

/// A hold right that leads back into the server's process (a send right
/// to the server's own port, the receiving end of a port whose send right
/// the name server in the same process keeps, a connection to that name
/// server) or that has no other end (a listening socket) would never hang
/// up: the server would keep the snapshots, their memory and the user's
/// budget for ever after the client exited, and the name server the name
/// or the connection. Such a hold is refused (or, a connection the name
/// server takes after the hold was taken, closed there), nothing stays
/// after the client exits, and the user's budget is whole.
#[test]
fn holds_that_lead_back_into_the_server_are_refused() {
    let test = "holds_that_lead_back_into_the_server_are_refused";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let budgets = Budgets::default();
        let s = Served::start("self-hold", budgets, |_| {});
        let objects = s.objects_settled(0);
        let fds = s.fds_settled(0);
        let held = budgets.holds_per_user;
        for how in ["server", "name", "listen", "connect"] {
            let mut holder = s.attacker("files-self-hold", &[how, "README", &held.to_string()]);
            let mut out = lines(&mut holder);
            let said = line(&mut out);
            if how == "connect" {
                // A new connection may reach the file server before the
                // name server has taken it: then the name server, seeing
                // its other end kept, closes it, and the hold goes.
                let n: Vec<usize> = said.split_whitespace().filter_map(|w| w.parse().ok()).collect();
                assert!(n.len() == 3 && n[1] == 0 && n[0] + n[2] == held, "{said}");
            } else {
                assert_eq!(said, format!("held 0 over-budget 0 other {held}"), "holds leading back into the server ({how}) were taken");
            }
            let _ = holder.wait();
            assert_eq!(s.objects_settled(objects), objects, "the server kept snapshots of a client that exited ({how})");
            let after = s.fds_settled(fds + 8);
            assert!(after <= fds + 8, "the server kept descriptors ({how}): {fds} before, {after} after");
        }
        // The user's whole budget is there.
        let mut again = s.attacker("files-hoard", &["README", &held.to_string()]);
        let mut out = lines(&mut again);
        assert_eq!(line(&mut out), format!("granted {held} over-budget 0 other 0"));
        kill(again);
        root_is_served(&s);
    });
}

/// A hold right to a port another user made and keeps (a system name
/// root registered, looked up) never hangs up when its client exits: it
/// hangs up when that user's process lets the port go. Nobody's 128 such
/// holds kept its snapshots, and its whole budget, in the server after it
/// exited. A hold (and a lifeline) must be a port made by the asker's
/// user or by the asking process itself; such ones are refused, nothing
/// stays after the client exits, and its budget is whole.
#[test]
fn holds_of_ports_another_user_keeps_are_refused() {
    let test = "holds_of_ports_another_user_keeps_are_refused";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let budgets = Budgets::default();
        let s = Served::start("other-hold", budgets, |_| {});
        // Root's port, kept here for the whole test.
        let (_rx, tx) = ferry::port().unwrap();
        ferry::Bootstrap::connect_to(&s.bootstrap).unwrap().register_system("long-lived", &tx).unwrap();
        let objects = s.objects_settled(0);
        let fds = s.fds_settled(0);
        let held = budgets.holds_per_user;
        let mut holder = s.attacker("files-self-hold", &["system", "README", &held.to_string()]);
        let mut out = lines(&mut holder);
        assert_eq!(line(&mut out), format!("held 0 over-budget 0 other {held}"), "holds of root's port were taken");
        let _ = holder.wait();
        assert_eq!(s.objects_settled(objects), objects, "the server kept snapshots of a client that exited");
        let after = s.fds_settled(fds + 8);
        assert!(after <= fds + 8, "the server kept descriptors: {fds} before, {after} after");
        // The user's whole budget is there.
        let mut again = s.attacker("files-hoard", &["README", &held.to_string()]);
        let mut out = lines(&mut again);
        assert_eq!(line(&mut out), format!("granted {held} over-budget 0 other 0"));
        kill(again);
        root_is_served(&s);
    });
}

/// Files of the kernel's own file systems are not served: their contents
/// are the kernel's answers, some decided by who opens them, and the
/// server opening one for a client would open it with the server's
/// privileges (a PCI device's configuration space gave `nobody` what only
/// root may read).
#[test]
fn the_kernel_s_own_files_are_not_served() {
    let _serial = common::serial();
    common::watchdog("the_kernel_s_own_files_are_not_served", LIMIT, || {
        let (mut server, right) = FileServer::new(Path::new("/sys/kernel"), ObjectConfig::default()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                server.serve(Timeout::millis(20)).unwrap();
            }
        });
        let fs = FileClient::new(right).with_timeout(Timeout::After(Duration::from_secs(10)));
        let Err(e) = fs.open("mm/transparent_hugepage/enabled") else { panic!("a sysfs file was served") };
        assert!(e.to_string().contains("sysfs"), "{e}");
        stop.store(true, Ordering::Relaxed);
        thread.join().unwrap();
    });
}

#[test]
fn mappings_are_bounded_per_user_and_released_with_their_client() {
    let test = "mappings_are_bounded_per_user_and_released_with_their_client";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let budgets = Budgets { clients_per_user: 8, ..Budgets::default() };
        let s = Served::start("keep", budgets, |_| {});
        let objects = s.objects_settled(0);
        let fds = s.fds_settled(0);
        let mut attacker = s.attacker("files-keep", &["README", "20"]);
        let mut out = lines(&mut attacker);
        assert_eq!(line(&mut out), "mapped 8 over-budget 12 other 0");
        // Root has a budget of its own.
        root_is_served(&s);
        kill(attacker);
        assert_eq!(s.objects_settled(objects), objects, "the dead client's mappings and snapshots are released");
        let after = s.fds_settled(fds + 8);
        assert!(after <= fds + 8, "the server kept descriptors: {fds} before, {after} after");
    });
}

/// This process's virtual size (the server runs in it), in bytes.
fn virtual_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmSize:")).expect("VmSize").trim().trim_end_matches(" kB").trim();
    kb.parse::<u64>().unwrap() * 1024
}

/// Another user attaches, four times, a mapping of a sparse file of 8 TiB
/// that someone who may write the tree made (by hand: a userfaultfd and
/// the range's length, which is all the server checks). It costs the
/// server no more than the pages it supplies. The server used to
/// allocate two flags per page of every mapping when it was attached
/// (4 GiB of its address space for each mapping here; with a longer
/// mapping, an allocation the kernel refuses, which aborts the server).
#[test]
fn a_huge_mapping_costs_the_server_only_what_it_supplies() {
    let test = "a_huge_mapping_costs_the_server_only_what_it_supplies";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("huge", Budgets::default(), |root| {
            std::fs::create_dir(root.join("dropbox")).unwrap();
            chmod(&root.join("dropbox"), 0o1777);
            let f = std::fs::File::create(root.join("dropbox/huge")).unwrap();
            f.set_len(1 << 43).unwrap();
            chmod(&root.join("dropbox/huge"), 0o644);
        });
        let before = virtual_size();
        let mut attacker = s.attacker("files-attach-raw", &["dropbox/huge", "4"]);
        let mut out = lines(&mut attacker);
        assert_eq!(line(&mut out), "attached 4 other 0");
        let grown = virtual_size().saturating_sub(before);
        root_is_served(&s);
        kill(attacker);
        assert!(grown < 1 << 30, "the server's address space grew by {} MiB for four mappings", grown >> 20);
    });
}

/// A file server run by an ordinary user (uid 65533), which cannot act as
/// its clients and checks mode bits itself, is asked by another user
/// (`nobody`) for `dropbox/sw/secret` thousands of times while `sw` is
/// swapped between a directory of nobody's and a symbolic link to the
/// server user's `private` directory (mode 0700; its `secret` is 0644).
/// The server checks the very directories it then opens the file from, so
/// nobody only ever gets its decoy or a refusal. The server used to check
/// the path one way (directory by directory) and open it another (the
/// whole name again), and the swap between the two gave nobody the secret.
#[test]
fn a_server_that_checks_modes_itself_opens_what_it_checked() {
    let test = "a_server_that_checks_modes_itself_opens_what_it_checked";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        use ferry::spawn::CommandExt as _;
        use std::os::unix::process::CommandExt as _;
        const OWNER: u32 = 65533;
        let dir = common::temp_path(format!("ferry-files-{}-checked", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        std::fs::create_dir_all(root.join("private")).unwrap();
        std::fs::create_dir_all(root.join("dropbox")).unwrap();
        std::fs::write(root.join("private/secret"), b"the owner's secret").unwrap();
        for (p, mode) in [(&dir, 0o755), (&root, 0o755), (&root.join("private"), 0o700), (&root.join("private/secret"), 0o644), (&root.join("dropbox"), 0o1777)] {
            rustix::fs::chown(p, Some(rustix::fs::Uid::from_raw(OWNER)), Some(rustix::fs::Gid::from_raw(OWNER))).unwrap();
            chmod(p, mode);
        }
        let (mut rx, tx) = ferry::port().unwrap();
        let mut server = std::process::Command::new(common::peer_for_other_users())
            .arg("files-serve-here")
            .arg(&root)
            .pass_right(&tx)
            .unwrap()
            .uid(OWNER)
            .gid(OWNER)
            .current_dir("/")
            .spawn()
            .unwrap();
        drop(tx);
        let mut m = rx.recv(Timeout::After(Duration::from_secs(30))).expect("the server's right");
        let Some(ferry::Item::Send(right)) = m.take_items().pop() else { panic!("no right from the server") };
        let out = std::process::Command::new(common::peer_for_other_users())
            .arg("files-race")
            .arg(root.join("dropbox"))
            .arg("5000")
            .pass_right(&right)
            .unwrap()
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap();
        let _ = server.kill();
        let _ = server.wait();
        assert!(out.status.success(), "the attacker failed: {}", out.status);
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(said.contains(" leaked 0 "), "nobody read a file in a directory it may not enter: {said}");
        let decoys: usize = said.split(' ').nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
        assert!(decoys > 0, "the race never reached the server: {said}");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// An access ACL (`system.posix_acl_access`, version 2) giving the owner
/// read-write, `uid` nothing, and group, mask and others read.
fn acl_denying(uid: u32) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [(0x01u16, 6u16, u32::MAX), (0x02, 0, uid), (0x04, 4, u32::MAX), (0x10, 4, u32::MAX), (0x20, 4, u32::MAX)] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn acls_are_applied_by_the_kernel() {
    let test = "acls_are_applied_by_the_kernel";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let mut supported = true;
        let s = Served::start("acl", Budgets::default(), |root| {
            std::fs::write(root.join("listed"), b"not for nobody").unwrap();
            chmod(&root.join("listed"), 0o644);
            let acl = acl_denying(NOBODY);
            supported = rustix::fs::setxattr(root.join("listed"), "system.posix_acl_access", &acl, rustix::fs::XattrFlags::empty()).is_ok();
        });
        if !supported {
            eprintln!("skipped {test}: the temporary directory's file system takes no POSIX ACLs");
            return;
        }
        // The mode bits (0644 as far as `stat` shows) would let anyone read
        // it; the ACL names nobody and gives it nothing.
        let out = common::finish(s.attacker("files-open", &["listed", "README"]));
        assert_eq!(out, format!("listed err Denied\nREADME ok {} {}\n", 40 * PAGE + 123, readme_sum()));
    });
}

#[test]
fn snapshots_stay_exact_when_the_file_is_changed_in_place_or_truncated() {
    use std::os::unix::fs::FileExt;
    let test = "snapshots_stay_exact_when_the_file_is_changed_in_place_or_truncated";
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("inplace", Budgets::default(), |_| {});
        let path = s.root.join("README");
        let fs = s.client();
        let before = fs.open("README").unwrap();
        // Touch only the first page: the others are read after the changes.
        assert_eq!(before.as_slice()[..PAGE], readme()[..PAGE]);
        // Another program writes the file in place (same inode, no rename),
        // then cuts it short.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&vec![0xEE; 10 * PAGE], 5 * PAGE as u64).unwrap();
        let during = fs.open("README").unwrap();
        f.set_len(7 * PAGE as u64 + 5).unwrap();
        drop(f);
        assert_eq!(before.as_slice(), &readme()[..], "the snapshot shows a later write or truncation");
        let mut changed = readme();
        changed[5 * PAGE..15 * PAGE].fill(0xEE);
        assert_eq!(during.as_slice(), &changed[..], "a snapshot taken after the write in place");
        // A new open sees the file as it is now.
        let after = fs.open("README").unwrap();
        assert_eq!(after.as_slice(), &changed[..7 * PAGE + 5]);
        assert_ne!(after.version(), during.version());
        // Nobody, not even root, can change a version's memory.
        let fds = version_memfds();
        assert!(!fds.is_empty());
        for fd in &fds {
            let m = std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/self/fd/{fd}")).unwrap();
            assert!(m.write_at(b"x", 0).is_err(), "a version's memory took a write");
            assert!(m.set_len(1).is_err(), "a version's memory was shrunk");
        }
        assert_eq!(before.as_slice(), &readme()[..]);
    });
}

#[test]
fn another_user_cannot_reach_a_version_s_memory() {
    let test = "another_user_cannot_reach_a_version_s_memory";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("reach", Budgets::default(), |root| {
            std::fs::write(root.join("secret"), vec![7u8; 3 * PAGE]).unwrap();
            chmod(&root.join("secret"), 0o600);
        });
        let snap = s.client().open("secret").unwrap();
        assert_eq!(snap.as_slice()[PAGE], 7);
        // The server (this process) holds the version's memfd: another
        // user can neither open it through /proc nor see our mappings.
        // (The server's copy sent in the reply may still be closing.)
        assert_eq!(version_memfds_settled(1), 1);
        let fds = version_memfds();
        let mut args = vec![std::process::id().to_string()];
        args.extend(fds.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = common::finish(s.attacker("files-reach", &args));
        assert_eq!(out, format!("{} read denied write denied\nmaps denied\n", fds[0]));
        // Nor open the file's version by name.
        let out = common::finish(s.attacker("files-open", &["secret"]));
        assert_eq!(out, "secret err Denied\n");
        assert_eq!(snap.as_slice()[2 * PAGE], 7);
    });
}

#[test]
fn file_memory_is_bounded_per_user_and_released_with_its_client() {
    let test = "file_memory_is_bounded_per_user_and_released_with_its_client";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        // README is 40 pages and a bit; the budget lets a user keep copies
        // of it and 20 pages more, not 30.
        let budget = 64 * PAGE as u64;
        let s = Served::start_with("memory", Budgets::default(), Some(budget), |root| {
            for (name, pages) in [("a", 20), ("b", 30)] {
                std::fs::write(root.join(name), vec![1u8; pages * PAGE]).unwrap();
                chmod(&root.join(name), 0o644);
            }
        });
        let objects = s.objects_settled(0);
        let fds = s.fds_settled(0);
        let memfds = version_memfds_settled(0);
        let mut attacker = s.attacker("files-hold", &["README", "README", "a", "b"]);
        let mut out = lines(&mut attacker);
        let readme_line = format!("README ok {} {}", 40 * PAGE + 123, readme_sum());
        assert_eq!(line(&mut out), readme_line);
        assert_eq!(line(&mut out), readme_line, "one version is charged once");
        assert_eq!(line(&mut out), format!("a ok {} {}", 20 * PAGE, 20 * PAGE));
        // Past the budget, b is not copied: it is served lazily from the
        // file through the pager, and nothing more is charged or held.
        assert_eq!(line(&mut out), format!("b ok {} {}", 30 * PAGE, 30 * PAGE));
        assert_eq!(line(&mut out), "ready");
        assert_eq!(version_memfds_settled(memfds + 2), memfds + 2, "README's version and a's, and no copy of b");
        // Root has a budget of its own.
        assert_eq!(s.client().open("b").unwrap().as_slice().len(), 30 * PAGE);
        root_is_served(&s);
        kill(attacker);
        // Everything the dead client kept is gone: snapshots, versions,
        // their memory and descriptors; its budget is free again.
        assert_eq!(s.objects_settled(objects), objects, "the dead client's snapshots are released");
        assert_eq!(version_memfds_settled(memfds), memfds, "a version's memory outlived its last snapshot");
        // Nor does the server (this process, whose own snapshots are all
        // dropped) map any version.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(!maps.contains("memfd:ferry-file"), "a version is still mapped here:\n{maps}");
        let after = s.fds_settled(fds + 8);
        assert!(after <= fds + 8, "the server kept descriptors: {fds} before, {after} after");
        let out = common::finish(s.attacker("files-open", &["b"]));
        assert_eq!(out, format!("b ok {} {}\n", 30 * PAGE, 30 * PAGE));
    });
}

/// A write-back acts on the one directory where it found the file: the
/// new contents, given the file's owner and mode, are made and renamed in
/// that directory. The server resolved the whole name again to make them
/// and again to rename them, so uid nobody, swapping a link of its own on
/// the way between root's directory and one of its own, had root's
/// world-writable file checked and the new inode, owned by root, made in
/// its own directory: a file of root's with nobody's contents, which
/// nobody may not make (a chown to another user is root's alone).
#[test]
fn a_write_back_never_gives_another_users_file_to_the_writer() {
    let test = "a_write_back_never_gives_another_users_file_to_the_writer";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("giveaway", Budgets::default(), |root| {
            std::fs::create_dir(root.join("pub")).unwrap();
            chmod(&root.join("pub"), 0o755);
            std::fs::write(root.join("pub/w"), b"root's shared file").unwrap();
            chmod(&root.join("pub/w"), 0o666);
            std::fs::create_dir(root.join("nb")).unwrap();
            std::os::unix::fs::chown(root.join("nb"), Some(NOBODY), Some(NOBODY)).unwrap();
            chmod(&root.join("nb"), 0o755);
        });
        let nb = s.root.join("nb");
        let out = common::finish(s.attacker("files-giveaway", &[nb.to_str().unwrap(), "3000"]));
        println!("{}", out.trim());
        assert!(out.contains(" given 0 "), "a write-back made a file of another user's in nobody's directory: {out}");
        // The link led the server to both directories: nobody may not
        // write `pub` (no write-back there), and `mine` has no `w`.
        let count = |what: &str| -> usize {
            let words: Vec<&str> = out.split_whitespace().collect();
            words.iter().position(|w| *w == what).and_then(|i| words.get(i + 1)).and_then(|n| n.parse().ok()).unwrap_or(0)
        };
        assert!(count("denied") > 0 && count("missing") > 0, "the race never reached both directories: {out}");
        use std::os::unix::fs::MetadataExt;
        let w = std::fs::metadata(s.root.join("pub/w")).unwrap();
        assert_eq!((w.uid(), w.mode() & 0o7777), (0, 0o666));
        assert_eq!(std::fs::read(s.root.join("pub/w")).unwrap(), b"root's shared file");
        root_is_served(&s);
    });
}

/// A write-back by a user other than the file's owner, of a file with
/// other names, gives the new contents to the writer, not the owner: the
/// new inode replaces this name only, so it was a file of the owner's made
/// where the writer chose. Uid nobody hard-linked root's world-writable
/// file into a directory of its own (which the kernel lets it do, as it
/// may read and write the file) and wrote the link back: root's file kept
/// its contents, and nobody's directory held a new file of root's with
/// nobody's contents, which only a chown by root can make.
#[test]
fn a_write_back_through_another_name_never_gives_the_writer_a_file_of_the_owners() {
    let test = "a_write_back_through_another_name_never_gives_the_writer_a_file_of_the_owners";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt as _;
        let s = Served::start("hardlink", Budgets::default(), |root| {
            std::fs::create_dir(root.join("pub")).unwrap();
            chmod(&root.join("pub"), 0o755);
            std::fs::write(root.join("pub/w"), b"root's shared file").unwrap();
            chmod(&root.join("pub/w"), 0o666);
            std::fs::create_dir(root.join("nb")).unwrap();
            std::os::unix::fs::chown(root.join("nb"), Some(NOBODY), Some(NOBODY)).unwrap();
            chmod(&root.join("nb"), 0o755);
        });
        let linked = std::process::Command::new("ln")
            .arg(s.root.join("pub/w"))
            .arg(s.root.join("nb/h"))
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .status()
            .unwrap();
        if !linked.success() {
            println!("skipped {test}: uid nobody may not link root's file here (fs.protected_hardlinks?)");
            return;
        }
        let out = common::finish(s.attacker("files-write", &["nb/h", "planted"]));
        assert_eq!(out.trim(), "ok");
        let h = std::fs::metadata(s.root.join("nb/h")).unwrap();
        println!("nb/h after the write-back: uid {} mode {:o}", h.uid(), h.mode() & 0o7777);
        assert_eq!(std::fs::read(s.root.join("nb/h")).unwrap(), b"planted");
        assert_eq!(std::fs::read(s.root.join("pub/w")).unwrap(), b"root's shared file");
        assert_eq!(h.uid(), NOBODY, "a write-back made a file of root's in nobody's directory");
        assert_eq!(h.mode() & 0o7777, 0o666);
        // The owner's own write-back keeps the file the owner's.
        s.client().write("pub/w", b"root's again").unwrap();
        assert_eq!(std::fs::metadata(s.root.join("pub/w")).unwrap().uid(), 0);
    });
}

/// One client's faults get a turn, not the server: a client whose threads
/// fault on pages of its mapping and drop them again, over and over, gave
/// the server another fault of its to serve before it had served the last
/// ones, and the server served them until there were none, so no request
/// or fault of anyone else's was served while it went on. Uid nobody's 40
/// threads doing so had the server serve thousands of their faults while
/// each of root's opens waited (when it was answered at all), and root's
/// reads through the pager wait for it until the watchdog stopped the test.
/// The faults counted are the server's, in this process.
#[test]
fn a_client_refaulting_without_end_holds_up_nobody_else() {
    let test = "a_client_refaulting_without_end_holds_up_nobody_else";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("refault", Budgets::default(), |_| {});
        let mut attacker = s.attacker("files-refault", &["README", "40"]);
        let mut out = lines(&mut attacker);
        assert_eq!(line(&mut out), "ready");
        let faults = || ferry::counters::snapshot().pager_faults;
        // Root's opens while it goes on, each answered (within the
        // client's 10 s) or not, and the other user's faults the server
        // served while each waited.
        let fs = s.client();
        let (mut snaps, mut waited) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let before = faults();
            let r = fs.open("README");
            waited.push(faults() - before);
            match r {
                Ok(snap) => snaps.push(snap),
                Err(e) => println!("root's open: {e}"),
            }
        }
        // And root's reads through the pager, which wait for the server as
        // long as it takes (a bounded wait here, then the client goes).
        let answered = snaps.len();
        let (done, read) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for snap in &snaps {
                match snap.object().unwrap().map() {
                    Ok(mapped) => {
                        let _ = done.send(mapped.as_slice().unwrap().iter().map(|&b| b as u64).sum::<u64>());
                    }
                    Err(e) => return println!("root's mapping: {e}"),
                }
            }
        });
        let sums: Vec<u64> = (0..answered).map_while(|_| read.recv_timeout(Duration::from_secs(30)).ok()).collect();
        kill(attacker);
        reader.join().unwrap();
        println!("faults served while each of root's opens waited: {waited:?}; {answered} of 3 answered, {} read through the pager", sums.len());
        assert_eq!(answered, 3, "root's opens were not answered while another user's client refaulted");
        assert!(waited.iter().all(|&n| n <= 1000), "root's opens waited for thousands of another user's faults: {waited:?}");
        assert_eq!(sums, vec![readme_sum(); 3], "root's faults were not served while another user's client refaulted");
    });
}

/// A port's requests get a turn, not the server: requests came off the
/// server's main port until none was left, so a client whose threads kept
/// that port's queue full had the server serve nothing else, not even
/// another client's faults, for as long as it went on. (`ferryd` hands out
/// a port of its own per lookup, served 64 requests a turn; a host that
/// hands its main port out, as this one does, had none.) The requests
/// counted are those the server, in this process, received while root's
/// reads of a snapshot through the pager waited.
#[test]
fn a_client_flooding_the_main_port_holds_up_nobody_elses_faults() {
    let test = "a_client_flooding_the_main_port_holds_up_nobody_elses_faults";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("flood", Budgets::default(), |_| {});
        // Root's snapshot, mapped through the pager before the flood.
        let snap = s.client().open("README").unwrap();
        let mapped = snap.object().unwrap().map().unwrap();
        let mut attacker = s.attacker("files-flood", &["4"]);
        let mut out = lines(&mut attacker);
        assert_eq!(line(&mut out), "ready");
        let received = || ferry::counters::snapshot().messages_received;
        // Root's reads wait for the server as long as it takes: a bounded
        // wait here, then the client goes.
        let (done, read) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let before = received();
            let sum = mapped.as_slice().unwrap().iter().map(|&b| b as u64).sum::<u64>();
            let _ = done.send((sum, received() - before));
        });
        let got = read.recv_timeout(Duration::from_secs(30)).ok();
        kill(attacker);
        reader.join().unwrap();
        println!("root's read of 41 pages through the pager, and the requests served meanwhile: {got:?}");
        let Some((sum, requests)) = got else { panic!("root's faults were not served while another user flooded the port") };
        assert_eq!(sum, readme_sum());
        assert!(requests <= 2000, "root's faults waited for {requests} of another user's requests");
    });
}

/// The distinct file versions' memories process `pid` holds descriptors of.
fn versions_held_by(pid: u32) -> usize {
    use std::os::unix::fs::MetadataExt;
    let mut inodes = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
        if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:ferry-file")) {
            if let Ok(m) = std::fs::metadata(e.path()) {
                inodes.insert(m.ino());
            }
        }
    }
    inodes.len()
}

/// The memory of a file version stays charged to the user it was copied
/// for as long as it exists anywhere, not only while a snapshot at the
/// server keeps it: an open's reply carries the version's memfd, and a
/// client that kept it and let the snapshot go had the server copy the
/// file anew at its next open, each copy the server's memory, never
/// charged to anyone. Uid nobody kept 12 copies of a 20-page file with a
/// budget of 64 pages.
#[test]
fn memory_a_user_keeps_after_its_snapshots_go_stays_within_its_budget() {
    let test = "memory_a_user_keeps_after_its_snapshots_go_stays_within_its_budget";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let budget = 64 * PAGE as u64;
        let s = Served::start_with("pinned", Budgets::default(), Some(budget), |root| {
            std::fs::write(root.join("a"), vec![1u8; 20 * PAGE]).unwrap();
            chmod(&root.join("a"), 0o644);
        });
        let memfds = version_memfds_settled(0);
        let mut attacker = s.attacker("files-pin", &["a", "12"]);
        let mut out = lines(&mut attacker);
        let said = line(&mut out);
        let kept = versions_held_by(attacker.id());
        println!("{said}; distinct versions kept by the client: {kept}");
        assert!(said.ends_with("other 0"), "{said}");
        assert!(
            kept as u64 * 20 * PAGE as u64 <= budget,
            "uid nobody keeps {kept} copies of a 20-page file past its snapshots, with a budget of 64 pages"
        );
        // The rest were served lazily, and root has a budget of its own.
        root_is_served(&s);
        assert!(s.client().open("a").unwrap().is_direct(), "root's open of a was not copied");
        kill(attacker);
        assert_eq!(version_memfds_settled(memfds), memfds, "a version's memory outlived its last snapshot");
        // Once the client has let the memory go, the budget is free again.
        let mut again = s.attacker("files-pin", &["a", "12"]);
        let said = line(&mut lines(&mut again));
        let kept_again = versions_held_by(again.id());
        kill(again);
        assert!((1..=3).contains(&kept_again), "the budget was not given back once the kept memory went ({said}; {kept_again} kept)");
    });
}

/// A snapshot root takes of a file is an exact copy whatever another user
/// did first. A version a user over its memory budget opened is served
/// lazily from the file, and was then handed to every later opener of
/// that file: uid nobody, its budget filled with copies of another file,
/// opened a file of its own, and root's snapshot of it, taken after and
/// well within root's own budget, showed nobody's later writes to the
/// file in pages root had not read yet. A lazy version is now reused only
/// for an opener that could not have a copy either.
#[test]
fn another_users_budget_never_makes_roots_snapshot_read_the_live_file() {
    let test = "another_users_budget_never_makes_roots_snapshot_read_the_live_file";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    use std::os::unix::process::CommandExt as _;
    common::watchdog(test, LIMIT, || {
        // The budget lets a user keep a copy of `fill` and not one more
        // of `theirs` besides.
        let budget = 64 * PAGE as u64;
        let s = Served::start_with("lazy-shared", Budgets::default(), Some(budget), |root| {
            std::fs::write(root.join("fill"), vec![1u8; 60 * PAGE]).unwrap();
            chmod(&root.join("fill"), 0o644);
            std::fs::write(root.join("theirs"), vec![1u8; 8 * PAGE]).unwrap();
            chmod(&root.join("theirs"), 0o644);
            std::os::unix::fs::chown(root.join("theirs"), Some(NOBODY), Some(NOBODY)).unwrap();
        });
        let mut attacker = s.attacker("files-hold", &["fill", "theirs"]);
        let mut out = lines(&mut attacker);
        assert_eq!(line(&mut out), format!("fill ok {} {}", 60 * PAGE, 60 * PAGE));
        assert_eq!(line(&mut out), format!("theirs ok {} {}", 8 * PAGE, 8 * PAGE));
        assert_eq!(line(&mut out), "ready");
        // Root takes its snapshot and reads its first page.
        let snap = s.client().open("theirs").unwrap();
        assert_eq!(snap.as_slice()[0], 1);
        // The file's owner writes it in place afterwards.
        let theirs = s.root.join("theirs");
        let wrote = std::process::Command::new("dd")
            .args(["if=/dev/zero", "bs=4096", "count=1", "seek=5", "conv=notrunc", "status=none"])
            .arg(format!("of={}", theirs.display()))
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .status()
            .unwrap();
        assert!(wrote.success());
        let seen = snap.as_slice()[5 * PAGE];
        println!("root's snapshot, page 5, after the owner wrote zeros there: {seen}");
        kill(attacker);
        assert_eq!(seen, 1, "root's snapshot showed a write made to the file after it was taken");
    });
}


/// A version the file server made of a file that kept changing while it
/// copied it is never handed to a later opener as the file's contents.
/// After its last attempt the copy was stamped with the file's state
/// after the copy, not before it: uid nobody, writing its own file while
/// it opened it and stopping once answered, left a torn copy stamped as
/// the file's final state, and root's snapshot of the file, taken when it
/// no longer changed, held bytes the file did not.
#[test]
fn a_copy_torn_by_its_files_writer_is_never_handed_on_as_the_file() {
    let test = "a_copy_torn_by_its_files_writer_is_never_handed_on_as_the_file";
    if !common::can_play_other_user(test) {
        return;
    }
    let _serial = common::serial();
    common::watchdog(test, LIMIT, || {
        let s = Served::start("torn", Budgets::default(), |root| {
            std::fs::write(root.join("churned"), vec![0u8; 16384 * PAGE]).unwrap();
            chmod(&root.join("churned"), 0o644);
            std::os::unix::fs::chown(root.join("churned"), Some(NOBODY), Some(NOBODY)).unwrap();
        });
        let path = s.root.join("churned");
        let (mut differed, mut planted) = (0, 0);
        let trials = 12;
        for _ in 0..trials {
            let mut attacker = s.attacker("files-plant", &["churned", path.to_str().unwrap()]);
            let mut out = lines(&mut attacker);
            if line(&mut out) != "planted" {
                kill(attacker);
                continue;
            }
            planted += 1;
            let snap = s.client().open("churned").unwrap();
            let now = std::fs::read(&path).unwrap();
            if snap.as_slice() != &now[..] {
                differed += 1;
            }
            drop(snap);
            kill(attacker);
        }
        println!("root's snapshots unlike the file they were taken of, which no longer changed: {differed} of {planted} planted in {trials} tries");
        assert_eq!(differed, 0, "root's snapshot held bytes the file did not, in {differed} of {trials} tries");
    });
}

/// An answer sent on to the file server (the reply right of a request to
/// another server naming the file server's port) is never a request: it is
/// dropped, counted and not answered, and the server goes on serving.
#[test]
fn an_answer_sent_to_the_file_server_is_dropped_unanswered() {
    let _serial = common::serial();
    common::watchdog("an_answer_sent_to_the_file_server_is_dropped_unanswered", LIMIT, || {
        let s = Served::start("answer", Budgets::default(), |_| {});
        let files = Bootstrap::connect_to(&s.bootstrap).unwrap().lookup("files").unwrap();
        let dropped = ferry::idl::answers_dropped();
        let (mut replies, _keep) = ferry::port().unwrap();
        let answer = ferry::Message::new(ferry::idl::REPLY_ERR).with_body(vec![1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0]);
        files.send(answer.with_reply(replies.make_send_once().unwrap()), Timeout::Infinite).unwrap();
        let got = replies.recv(Timeout::After(LIMIT));
        assert!(matches!(got, Err(ferry::RecvError::SendOnceDropped)), "the file server answered an answer: {got:?}");
        assert_eq!(ferry::idl::answers_dropped(), dropped + 1, "the answer was not counted");
        root_is_served(&s);
    });
}
