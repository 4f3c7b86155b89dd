//! The C API end to end: the C examples and C tests are compiled with the
//! system compiler against `include/ferry.h` and `libferry.so` and run as
//! real processes: a client/server pair, a big region by value, the
//! wire-format vectors through the C parser, argument misuse, and a C
//! program exchanging rights and regions with this (Rust) test.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ferry::region::{MapOptions, Mode, Region, SharedRegion};
use ferry::{Item, Message, Timeout};
use support::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A private name server's path, whose directory goes when the test ends
/// (passed or failed).
struct Bootstrap(PathBuf);

impl std::ops::Deref for Bootstrap {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A private name server for one test, on a thread of this process.
fn private_bootstrap(test: &str) -> Bootstrap {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!("ferry-ffi-test-{}-{test}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).expect("create test dir");
    let path = dir.join("bootstrap");
    ferry::NameServer::bind(&path).expect("bind name server").spawn().expect("start name server");
    Bootstrap(path)
}

fn build(name: &str, sources: &[&str]) -> PathBuf {
    compile(name, sources, Path::new(env!("CARGO_TARGET_TMPDIR")))
}

#[test]
fn c_client_and_server_exchange_rights_replies_and_rpc_calls() {
    let server = build("ferry_server", &["examples/c/server.c"]);
    let client = build("ferry_client", &["examples/c/client.c"]);
    let path = private_bootstrap("clisrv");
    let s = spawn(&server, &["c-example"], &path);
    let c = spawn(&client, &["c-example", "500"], &path);
    let c_out = succeeded("ferry_client", &wait_bounded(c, LIMIT));
    let s_out = succeeded("ferry_server", &wait_bounded(s, LIMIT));
    assert!(c_out.contains("client: ok, 500 calls answered"), "{c_out}");
    assert!(s_out.contains("served 500 calls"), "{s_out}");
}

/// The example client run with a name no server has registered (its
/// server not started, or started under another name) gives up after its
/// wait saying so and what to start: it said only "expected to_server !=
/// NULL", a line of its source.
#[test]
fn c_client_of_a_name_nobody_registered_says_to_start_the_server() {
    // A program of its own: the test beside it builds and runs
    // `ferry_client` at the same time, and running a file another test is
    // writing fails with `ETXTBSY`.
    let client = build("ferry_client_unanswered", &["examples/c/client.c"]);
    let path = private_bootstrap("clinone");
    let out = wait_bounded(spawn(&client, &["c-nobody", "1"], &path), LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no server registered c-nobody") && err.contains("ferry_server c-nobody"), "{err}");
}

#[test]
fn c_big_region_travels_by_value_between_processes() {
    let big = build("ferry_big_region", &["examples/c/big_region.c"]);
    let path = private_bootstrap("big");
    // The example embeds no server here (one runs); its child is told not to.
    let out = succeeded("ferry_big_region", &wait_bounded(spawn(&big, &["32"], &path), LIMIT));
    assert!(out.contains("0 words wrong"), "{out}");
}

fn vectors_dir() -> PathBuf {
    crate_dir().join("../../tests/vectors")
}

#[test]
fn c_parser_gives_every_vector_its_expected_outcome() {
    let checker = build("ferry_vectors", &["tests/c/vectors.c"]);
    let out = wait_bounded(spawn(&checker, &[vectors_dir().to_str().unwrap()], Path::new("/nonexistent")), LIMIT);
    let stdout = succeeded("ferry_vectors", &out);
    let manifest = std::fs::read_to_string(vectors_dir().join("vectors.txt")).unwrap();
    let listed = manifest.lines().filter(|l| !l.split('#').next().unwrap().trim().is_empty()).count();
    assert!(stdout.contains(&format!("{listed} vectors, 0 failed")), "{stdout}");
}

/// The C checker can fail: a manifest with one expectation changed in a
/// field (and one with an error's reason changed) is reported.
#[test]
fn c_vector_checker_reports_a_wrong_expectation() {
    let checker = build("ferry_vectors_neg", &["tests/c/vectors.c"]);
    let manifest = std::fs::read_to_string(vectors_dir().join("vectors.txt")).unwrap();
    for (from, to, name) in [
        ("Truncated{need=24,got=10}", "Truncated{need=24,got=11}", "trunc_header_10"),
        ("reason=\"zero length\"", "reason=\"zero lengths\"", "region_len_0"),
        ("ok op=7 flags=0x00 items=- inline=12", "ok op=7 flags=0x00 items=- inline=13", "ok_inline"),
    ] {
        let altered_text: String = manifest
            .lines()
            .map(|l| if l.split_whitespace().next() == Some(name) { l.replacen(from, to, 1) } else { l.to_owned() } + "\n")
            .collect();
        assert_ne!(altered_text, manifest, "the manifest's line for {name} no longer has {from}");
        let altered = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("vectors-{name}.txt"));
        std::fs::write(&altered, altered_text).unwrap();
        let out = wait_bounded(
            spawn(&checker, &[vectors_dir().to_str().unwrap(), altered.to_str().unwrap()], Path::new("/nonexistent")),
            LIMIT,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(stdout.contains(&format!("FAIL {name}:")) && stdout.contains(", 1 failed"), "{stdout}");
    }
}

#[test]
fn c_misuse_gets_typed_errors_and_leaks_nothing() {
    let misuse = build("ferry_misuse", &["tests/c/misuse.c"]);
    let out = succeeded("ferry_misuse", &wait_bounded(spawn(&misuse, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("misuse: ok"), "{out}");
}

#[test]
fn c_port_set_reports_messages_no_senders_and_dead_names_per_member() {
    let portset = build("ferry_portset", &["tests/c/portset.c"]);
    let out = succeeded("ferry_portset", &wait_bounded(spawn(&portset, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("portset: ok"), "{out}");
}

/// A region mapped immediately has every page allocated, and its length is
/// the sender's claim: past `FERRY_MAP_IMMEDIATE_LIMIT` (or the caller's
/// own limit) it is refused with `FERRY_ERR_TOO_LARGE` and stays in the
/// message.
#[test]
fn c_immediate_mapping_refuses_a_region_past_its_limit() {
    let limit = build("ferry_map_limit", &["tests/c/map_limit.c"]);
    let out = succeeded("ferry_map_limit", &wait_bounded(spawn(&limit, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("map_limit: ok"), "{out}");
}

#[test]
fn c_reply_pairs_carry_one_answer_or_report_the_right_dropped() {
    let reply = build("ferry_reply", &["tests/c/reply.c"]);
    let out = succeeded("ferry_reply", &wait_bounded(spawn(&reply, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("reply: ok"), "{out}");
}

/// ferry called from a thread's `pthread_key_create` destructor and from
/// an `atexit` handler, after the library's thread-local storage is gone:
/// messages still travel, and a failing call returns its status and a
/// text instead of aborting the process.
#[test]
fn c_calls_made_while_a_thread_is_torn_down_return_their_status() {
    let teardown = build("ferry_teardown", &["tests/c/teardown.c"]);
    let out = succeeded("ferry_teardown", &wait_bounded(spawn(&teardown, &[], Path::new("/nonexistent")), LIMIT));
    for stage in ["teardown: thread key destructor ok", "teardown: main done", "teardown: atexit handler ok"] {
        assert!(out.contains(stage), "{out}");
    }
}

/// A child made with `fork()` frees the copies of its parent's handles it
/// does not use, an RPC server among them, without an error; the parent's
/// server keeps its watcher thread and serves a second child's calls.
#[test]
fn c_handles_freed_in_a_forked_child_leave_the_parents_alone() {
    let fork = build("ferry_fork", &["tests/c/fork.c"]);
    let out = wait_bounded(spawn(&fork, &[], Path::new("/nonexistent")), LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "ferry panicked:\n{stderr}");
    let stdout = succeeded("ferry_fork", &out);
    assert!(stdout.contains("fork: ok, 200 calls served"), "{stdout}");
}

/// A child forked after a connection was made cannot call through its copy
/// (which shares the parent's slot and sequence numbers): refused, nothing
/// sent; its own connection works, and the parent's calls go on with their
/// own replies.
#[test]
fn c_connection_copied_by_fork_is_refused_in_the_child() {
    let fork = build("ferry_fork_conn", &["tests/c/fork_conn.c"]);
    let out = succeeded("ferry_fork_conn", &wait_bounded(spawn(&fork, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("fork conn: ok"), "{out}");
}

/// An RPC server learns who calls: every request, through the slot or over
/// the socket, names its client's pid, uid and gid.
#[test]
fn c_rpc_requests_name_their_client() {
    let sender = build("ferry_rpc_sender", &["tests/c/rpc_sender.c"]);
    let out = succeeded("ferry_rpc_sender", &wait_bounded(spawn(&sender, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("rpc sender: ok"), "{out}");
}

/// A reply too large to travel fails its client's call, and the server's
/// reply-and-wait (in place or not) goes on to the next request.
#[test]
fn c_rpc_server_goes_on_after_a_reply_too_large_to_travel() {
    let too_large = build("ferry_rpc_too_large", &["tests/c/rpc_too_large.c"]);
    let out = succeeded("ferry_rpc_too_large", &wait_bounded(spawn(&too_large, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("rpc too large: ok"), "{out}");
}

/// A client started before its server waits for the server's name:
/// `ferry_bootstrap_lookup_wait` returns once the name is registered, and
/// `FERRY_ERR_NAME_NOT_FOUND` when the timeout passes first.
#[test]
fn c_client_waits_for_a_name_registered_after_it_started() {
    let waiter = build("ferry_lookup_wait", &["tests/c/lookup_wait.c"]);
    let path = private_bootstrap("lookupwait");
    let out = succeeded("ferry_lookup_wait", &wait_bounded(spawn(&waiter, &["c-lookup-wait"], &path), LIMIT));
    assert!(out.contains("lookup wait: ok"), "{out}");
}

/// Each receiving handle gives one descriptor for a C event loop, which
/// polls readable exactly when a call with a zero timeout has something:
/// a receive right, a reply receiver, a port set and an RPC server serving
/// a forked client, driven by `poll(2)` alone.
#[test]
fn c_handles_fit_an_event_loop_through_one_descriptor_each() {
    let event_loop = build("ferry_event_loop", &["tests/c/event_loop.c"]);
    let out = succeeded("ferry_event_loop", &wait_bounded(spawn(&event_loop, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("event loop: ok"), "{out}");
}

/// A C program runs under valgrind (when it is installed) with no error:
/// the misuse test, whose calls cover ports, messages, regions and the
/// error paths.
#[test]
fn c_program_runs_under_valgrind() {
    if std::process::Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("skipped c_program_runs_under_valgrind: valgrind is not installed");
        return;
    }
    let misuse = build("ferry_misuse_valgrind", &["tests/c/misuse.c"]);
    let args = ["-q", "--error-exitcode=99", misuse.to_str().unwrap()];
    let out = wait_bounded(spawn(Path::new("valgrind"), &args, Path::new("/nonexistent")), Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "under valgrind: {}\n{stderr}", out.status);
    assert!(String::from_utf8_lossy(&out.stdout).contains("misuse: ok"), "{stderr}");
}

/// The static library links into a C program on its own (no
/// `libferry.so` at run time) and behaves the same.
#[test]
fn c_program_links_statically() {
    let misuse = compile_static("ferry_misuse_static", &["tests/c/misuse.c"], Path::new(env!("CARGO_TARGET_TMPDIR")));
    let ldd = std::process::Command::new("ldd").arg(&misuse).output();
    if let Ok(ldd) = ldd {
        assert!(!String::from_utf8_lossy(&ldd.stdout).contains("libferry"), "linked against libferry.so");
    }
    let out = succeeded("ferry_misuse_static", &wait_bounded(spawn(&misuse, &[], Path::new("/nonexistent")), LIMIT));
    assert!(out.contains("misuse: ok"), "{out}");
}

fn word(i: usize, salt: u64) -> u64 {
    (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt
}

fn checksum(words: &[u64]) -> u64 {
    words.iter().fold(0u64, |h, w| h.rotate_left(7) ^ w)
}

/// A C program and this Rust program exchange send rights and regions: the
/// C side sends a send right to its port and a region by copy; the Rust
/// side answers through that right with a region by move, a shared region
/// and a send-once right for the C side's verdict.
#[test]
fn c_and_rust_exchange_rights_and_by_value_regions() {
    let xlang = build("ferry_xlang", &["tests/c/xlang.c"]);
    let path = private_bootstrap("xlang");
    let mut names = ferry::Bootstrap::connect_to(&path).unwrap();
    let (mut rx, tx) = ferry::port().unwrap();
    names.register("rust-side", &tx).unwrap();
    let child = spawn(&xlang, &["rust-side", "8"], &path);

    let mut hello = rx.recv(Timeout::After(LIMIT)).expect("the C program's message");
    assert_eq!(hello.op(), 1);
    assert_eq!(hello.sender().unwrap().pid as u32, child.id(), "the kernel's sender is the C program");
    let sum = u64::from_le_bytes(hello.body().try_into().expect("an 8-byte checksum"));
    let mut items = hello.take_items().into_iter();
    let (Some(Item::Send(to_c)), Some(Item::Region(region)), None) = (items.next(), items.next(), items.next()) else {
        panic!("expected a send right and a region");
    };
    assert_eq!(region.mode(), Mode::Copy);
    let view = region.map(MapOptions::lazy()).expect("map the C region");
    let words = view.as_slice_of::<u64>();
    assert_eq!(words.len(), (8 << 20) / 8);
    assert!(words.iter().enumerate().all(|(i, w)| *w == word(i, 0)), "the C region's words");
    assert_eq!(checksum(words), sum);

    let mut mine = Region::new(4 << 20).unwrap();
    for (i, w) in mine.as_mut_slice_of::<u64>().iter_mut().enumerate() {
        *w = word(i, 0x5555_5555_5555_5555);
    }
    let rust_sum = checksum(mine.as_slice_of::<u64>());
    let shared = SharedRegion::new(4096).unwrap();
    assert!(shared.write_at(0, b"share"));
    let verdict = rx.make_send_once().unwrap();
    let msg = Message::new(2)
        .with_body(rust_sum.to_le_bytes())
        .with_item(mine.by_move().unwrap())
        .with_item(shared.share().unwrap())
        .with_reply(verdict);
    to_c.send(msg, Timeout::Infinite).unwrap();

    let answer = rx.recv(Timeout::After(LIMIT)).expect("the C program's verdict");
    assert_eq!(answer.op(), 3);
    assert!(answer.via_send_once());
    assert_eq!(answer.body(), rust_sum.to_le_bytes());
    let out = succeeded("ferry_xlang", &wait_bounded(child, LIMIT));
    assert!(out.contains("xlang: ok"), "{out}");
}

/// The C example of a system service (run as root): each lookup of its
/// name gets a port of its own, which the name server sends to the
/// service's main port with the asker's uid; the service takes it with
/// `ferry_message_take_service_port` and answers every call on it with that
/// uid. A lookup made as uid nobody is answered as nobody's, root's as
/// root's, and the service hears each port close when its user lets go.
#[test]
fn c_system_service_gives_each_users_lookup_a_port_of_its_own() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped c_system_service_gives_each_users_lookup_a_port_of_its_own: registering a system service needs root");
        return;
    }
    const NOBODY: u32 = 65534;
    let svc = build("ferry_system_service", &["examples/c/system_service.c"]);
    let path = private_bootstrap("syssvc");
    let child = spawn(&svc, &["c-system-svc", "3"], &path);
    let mut names = ferry::Bootstrap::connect_to(&path).unwrap();
    let lookup = |names: &mut ferry::Bootstrap| {
        let deadline = std::time::Instant::now() + LIMIT;
        loop {
            match names.lookup("c-system-svc") {
                Ok(r) => return r,
                Err(ferry::NameError::NotFound) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("lookup of the C service: {e}"),
            }
        }
    };
    let call = |right: &ferry::SendRight| {
        let (mut answer, once) = ferry::reply_pair().unwrap();
        right.send(Message::new(7).with_reply(once), Timeout::After(LIMIT)).unwrap();
        let m = answer.recv(Timeout::After(LIMIT)).expect("the C service's answer");
        u32::from_le_bytes(m.body().try_into().expect("a uid"))
    };
    let root1 = lookup(&mut names);
    let nobody = ferry::Credentials { pid: std::process::id() as i32, uid: NOBODY, gid: NOBODY };
    let theirs = ferry::sending_as(nobody, || names.lookup("c-system-svc")).unwrap();
    let root2 = lookup(&mut names);
    assert_eq!((call(&root1), call(&theirs), call(&root2)), (0, NOBODY, 0));
    // Whatever credentials a call on nobody's port carries, it is nobody's.
    let (mut answer, once) = ferry::reply_pair().unwrap();
    theirs.send(Message::new(7).with_reply(once), Timeout::After(LIMIT)).unwrap();
    assert_eq!(answer.recv(Timeout::After(LIMIT)).unwrap().body(), NOBODY.to_le_bytes());
    drop((root1, theirs, root2));
    let out = succeeded("ferry_system_service", &wait_bounded(child, LIMIT));
    assert!(out.contains("system service: ok, 3 ports closed, 4 calls answered, 0 messages on the main port ignored"), "{out}");
    assert!(out.contains("port of uid 65534 closed"), "{out}");
}
