//! The example key-value store across Rust and C through typed interfaces:
//! the C stubs are generated (`ferry_idl::c::generate`) from the store's
//! description, `tests/idl/example.kv.json` (which `tests/tests/idl.rs`
//! checks against the Rust definition), compiled with the C programs in
//! `tests/idl/c/` against `libferry.so`, and run as real processes: a C
//! client against the Rust store, the Rust client against a C store, over a
//! port and over an RPC connection each. Needs a C compiler (`$CC`, else
//! `cc`), as the C API's own tests do.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{finish, names, private_bootstrap, spawn_peer, watchdog};

const LIMIT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf()
}

/// `libferry.so`'s directory for this profile, after building it (cargo
/// does not build another package's cdylib for these tests).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(other) => other.to_owned(),
        None => panic!("no profile directory above {}", exe.display()),
    };
    let out = Command::new(env!("CARGO")).args(["build", "--quiet", "-p", "ferry-ffi", "--profile", &profile]).output().expect("run cargo");
    assert!(out.status.success(), "cargo build -p ferry-ffi failed:\n{}", String::from_utf8_lossy(&out.stderr));
    dir
}

/// Generates the store's C stubs into a fresh directory and compiles
/// `program` (in `tests/idl/c/`) with them.
fn build(program: &str) -> (PathBuf, PathBuf) {
    build_with(program, &[])
}

/// As [`build`], with `flags` added to the compiler's.
fn build_with(program: &str, flags: &[&str]) -> (PathBuf, PathBuf) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = common::temp_path(format!("ferry-idl-c-{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    let desc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo().join("tests/idl/example.kv.json")).unwrap()).unwrap();
    let stubs = ferry_idl::c::generate(&desc, Some("kv")).expect("C stubs of the store");
    std::fs::write(dir.join(&stubs.header_name), &stubs.header).unwrap();
    std::fs::write(dir.join(&stubs.source_name), &stubs.source).unwrap();
    let lib = lib_dir();
    let exe = dir.join(program);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-pthread", "-D_DEFAULT_SOURCE"])
        .args(flags)
        .arg(format!("-I{}", repo().join("crates/ferry-ffi/include").display()))
        .arg(format!("-I{}", dir.display()))
        .arg(repo().join(format!("tests/idl/c/{program}.c")))
        .arg(dir.join(&stubs.source_name))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg("-lferry")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(out.status.success(), "compiling {program} with the generated stubs failed:\n{}", String::from_utf8_lossy(&out.stderr));
    (exe, dir)
}

fn spawn_c(exe: &Path, bootstrap: &Path, args: &[&str]) -> std::process::Child {
    Command::new(exe)
        .args(args)
        .env("FERRY_BOOTSTRAP", bootstrap)
        .env("FERRY_NO_EMBED", "1")
        .env("FERRY_NO_AUTOSTART", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the C program")
}

/// A C client (generated stubs) against the Rust store: every operation,
/// the typed error, regions both ways, over the port and over RPC.
#[test]
fn a_c_client_talks_to_the_rust_store() {
    watchdog("a_c_client_talks_to_the_rust_store", LIMIT, || {
        let (exe, dir) = build("kv_client");
        let path = private_bootstrap("idl-c-client");
        let store = spawn_peer(&path, "idl-kv-named", &["store"]);
        let client = spawn_c(&exe, &path, &["store"]);
        let out = finish(client);
        assert!(out.contains("kv-c-client-ok"), "{out}");
        let mut bs = names(&path);
        bs.unregister("store").unwrap();
        bs.unregister("store.rpc").unwrap();
        let served = finish(store);
        // 8 calls per transport reach the store (the version checks do not).
        // 7 calls per transport reach the store.
        assert!(served.contains("served 16 requests"), "{served}");
        std::fs::remove_dir_all(dir).ok();
    });
}

/// The Rust client against a store written in C with the generated server
/// dispatch table.
#[test]
fn the_rust_client_talks_to_a_c_store() {
    watchdog("the_rust_client_talks_to_a_c_store", LIMIT, || {
        let (exe, dir) = build("kv_server");
        let path = private_bootstrap("idl-c-server");
        let mut store = spawn_c(&exe, &path, &["cstore"]);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(store.stdout.as_mut().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        let client = spawn_peer(&path, "idl-kv-client", &["cstore"]);
        let out = finish(client);
        assert!(out.contains("kv-client-ok"), "{out}");
        let mut bs = names(&path);
        bs.unregister("cstore").unwrap();
        bs.unregister("cstore.rpc").unwrap();
        let served = finish(store);
        // 7 calls per transport reach the store.
        assert!(served.contains("served 14 requests"), "{served}");
        std::fs::remove_dir_all(dir).ok();
    });
}

/// The C dispatcher checks before it acts: requests that do not match the
/// interface (cut short, bytes left over, not UTF-8, a required argument
/// missing, a send right where a region belongs, an item nobody claims) are
/// answered with a `BadRequest` fault, an unknown operation with
/// `UnknownOperation`, an answer is dropped unanswered, and none of them
/// reaches the C store's functions (it counts the requests that do).
#[test]
fn the_c_dispatcher_refuses_what_does_not_match() {
    use ferry::{Message, Region, Timeout};
    use ferry_idl::{Decoder, Fault, Wire, REPLY_FAULT};
    watchdog("the_c_dispatcher_refuses_what_does_not_match", LIMIT, || {
        let (exe, dir) = build("kv_server");
        let path = private_bootstrap("idl-c-refuse");
        let mut store = spawn_c(&exe, &path, &["refuse"]);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(store.stdout.as_mut().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        let mut bs = names(&path);
        let to_store = common::lookup_retry(&mut bs, "refuse");
        let (stray_rx, stray) = ferry::port().unwrap();
        let hex = |s: &str| (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
        let region = || Region::copied_from(b"x").unwrap().by_copy().unwrap();
        let bad = vec![
            Message::new(2).with_body(hex("0100070000000300000078")),
            Message::new(2).with_body(hex("010005000000010000006bff")),
            Message::new(2).with_body(hex("0100050000000100000080")),
            Message::new(3),
            Message::new(1).with_body(hex("010005000000010000006b02000400000000000000")).with_item(stray.try_clone().unwrap()),
            Message::new(2).with_body(hex("010005000000010000006b")).with_item(region()),
            Message::new(77),
        ];
        let (mut reply_rx, _keep) = ferry::port().unwrap();
        for (k, m) in bad.into_iter().enumerate() {
            to_store.send(m.with_reply(reply_rx.make_send_once().unwrap()), Timeout::Infinite).unwrap();
            let mut answer = reply_rx.recv(Timeout::After(LIMIT)).expect("an answer to a bad request");
            assert_eq!(answer.op(), REPLY_FAULT, "request {k}");
            let items = answer.take_items();
            let mut dec = Decoder::new(answer.body(), items);
            let fault = Fault::decode(&mut dec).expect("a fault");
            if k == 6 {
                assert!(matches!(fault, Fault::UnknownOperation(77)), "{fault:?}");
            } else {
                assert!(matches!(fault, Fault::BadRequest(_)), "request {k}: {fault:?}");
            }
        }
        // An answer handed on to the store (a refusal, as another server
        // would send it to a reply right naming the store's port) is
        // dropped: not run, and not answered.
        let answer = Message::new(ferry_idl::REPLY_ERR).with_body(hex("010000000000000400000000"));
        to_store.send(answer.with_reply(reply_rx.make_send_once().unwrap()), Timeout::Infinite).unwrap();
        let got = reply_rx.recv(Timeout::After(LIMIT));
        assert!(matches!(got, Err(ferry::RecvError::SendOnceDropped)), "an answer was answered: {got:?}");
        drop((to_store, stray, stray_rx));
        bs.unregister("refuse").unwrap();
        bs.unregister("refuse.rpc").unwrap();
        let served = finish(store);
        assert!(served.contains("served 0 requests"), "{served}");
        std::fs::remove_dir_all(dir).ok();
    });
}

/// Whether the C compiler builds and runs a program with AddressSanitizer
/// (and its leak check).
fn address_sanitizer_works() -> bool {
    let dir = common::temp_path(format!("ferry-idl-c-asan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc).arg("-fsanitize=address").arg(&src).arg("-o").arg(&exe).output().is_ok_and(|o| o.status.success());
    let ran = built && Command::new(&exe).output().is_ok_and(|o| o.status.success());
    std::fs::remove_dir_all(dir).ok();
    ran
}

/// A C client given replies that do not decode frees what it decoded of
/// them: each reply to `list` holds two entries, the second cut short
/// after its key, and every call fails with `FERRY_IDL_BAD_REPLY`. The
/// program is built with AddressSanitizer, whose leak check fails it if
/// a key decoded before the failure is never freed.
#[test]
fn a_c_client_frees_a_list_that_fails_to_decode_part_way() {
    if !address_sanitizer_works() {
        eprintln!("skipped: the C compiler cannot build with -fsanitize=address here");
        return;
    }
    watchdog("a_c_client_frees_a_list_that_fails_to_decode_part_way", LIMIT, || {
        let (exe, dir) = build_with("kv_cut_list", &["-fsanitize=address", "-g"]);
        let out = Command::new(&exe)
            .arg("50")
            .env("ASAN_OPTIONS", "detect_leaks=1")
            .env("FERRY_NO_EMBED", "1")
            .env("FERRY_NO_AUTOSTART", "1")
            .output()
            .expect("run kv_cut_list");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.contains("kv-cut-list-ok"), "kv_cut_list failed with {}:\n{stdout}\n{stderr}", out.status);
        std::fs::remove_dir_all(dir).ok();
    });
}

/// The generated C port server skips a send-once right to its port freed
/// unused, as the Rust `serve_port` does, instead of stopping with
/// `FERRY_ERR_SEND_ONCE_DROPPED` and leaving its clients unanswered.
#[test]
fn the_c_port_server_goes_on_past_a_send_once_right_dropped_unused() {
    watchdog("the_c_port_server_goes_on_past_a_send_once_right_dropped_unused", LIMIT, || {
        let (exe, dir) = build("kv_once_dropped");
        let out = Command::new(&exe).env("FERRY_NO_EMBED", "1").env("FERRY_NO_AUTOSTART", "1").output().expect("run kv_once_dropped");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.contains("kv-once-dropped-ok"), "kv_once_dropped failed with {}:\n{stdout}\n{stderr}", out.status);
        std::fs::remove_dir_all(dir).ok();
    });
}

/// The generated dispatcher given a server function's return value the
/// operation does not define (-1, 2: neither a result nor a typed error)
/// answers with fault 4 instead of a success whose result the function
/// never set.
#[test]
fn a_c_server_function_returning_neither_0_nor_1_is_answered_with_a_fault() {
    watchdog("a_c_server_function_returning_neither_0_nor_1_is_answered_with_a_fault", LIMIT, || {
        let (exe, dir) = build("kv_bad_rc");
        let out = Command::new(&exe).arg("5").env("FERRY_NO_EMBED", "1").env("FERRY_NO_AUTOSTART", "1").output().expect("run kv_bad_rc");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.contains("kv-bad-rc-ok"), "kv_bad_rc failed with {}:\n{stdout}\n{stderr}", out.status);
        std::fs::remove_dir_all(dir).ok();
    });
}

/// A C client given replies with no value (OK to `get`, the typed error to
/// `put`, each with an empty body), into result and error structs the
/// caller did not initialise, as the documentation's example leaves them:
/// every call fails with `FERRY_IDL_BAD_REPLY`, without freeing what the
/// uninitialised structs seemed to hold.
#[test]
fn a_c_client_given_a_reply_without_its_value_into_uninitialised_results_fails_cleanly() {
    watchdog("a_c_client_given_a_reply_without_its_value_into_uninitialised_results_fails_cleanly", LIMIT, || {
        let (exe, dir) = build("kv_empty_reply");
        let out = Command::new(&exe).arg("20").env("FERRY_NO_EMBED", "1").env("FERRY_NO_AUTOSTART", "1").output().expect("run kv_empty_reply");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.contains("kv-empty-reply-ok"), "kv_empty_reply failed with {}:\n{stdout}\n{stderr}", out.status);
        std::fs::remove_dir_all(dir).ok();
    });
}

ferry_idl::record! {
    /// Fields whose names are reserved words in C or C++.
    #[derive(Debug)]
    pub struct Reserved {
        /// A C keyword.
        1 => pub inline: u32,
        /// A C++ keyword.
        2 => pub class: String,
        /// A macro of <errno.h>.
        3 => pub errno: i32,
    }
}

ferry_idl::enumeration! {
    /// Variants that become reserved words in snake case.
    #[derive(Debug)]
    pub enum Answer {
        /// `true`.
        1 => True,
        /// `default`, with a payload.
        2 => Default(u64),
    }
}

ferry_idl::interface! {
    /// Operations named like C and C++ keywords.
    pub mod reserved: "test.reserved", version 1, compatible 1 {
        /// `register`.
        fn register(int: u32, new: Reserved) -> Answer = 1;
        /// `delete`.
        oneway delete(this: String) = 2;
    }
}

ferry_idl::record! {
    /// A record holding a list, an optional value and another record.
    #[derive(Debug)]
    pub struct Nested {
        /// A list of strings.
        1 => pub tags: Vec<String>,
        /// An optional record.
        2 => pub inner: Option<Reserved>,
        /// Fixed-size bytes.
        3 => pub fixed: [u8; 4],
    }
}

ferry_idl::interface! {
    /// Every kind of value, so that every helper the generator writes is
    /// compiled.
    pub mod every: "test.every", version 1, compatible 1 {
        /// Every scalar.
        fn scalars(byte: u8, half: u16, word: u32, wide: u64, sbyte: i8, shalf: i16, sword: i32, swide: i64, single: f32, double: f64, flag: bool) -> f64 = 1;
        /// Strings, bytes, lists, arrays and records.
        fn texts(text: String, bytes: Vec<u8>, list: Vec<u32>, nested: Vec<Nested>) -> Option<Nested> | Answer = 2;
        /// Rights of every kind, in lists too.
        fn rights(to: ferry_idl::SendTo<every::Protocol>, rx: ferry_idl::ReceiveOf<every::Protocol>, once: ferry_idl::SendOnceTo<every::Protocol>, more: Vec<ferry_idl::SendTo<every::Protocol>>) = 3;
        /// Regions in every mode.
        fn regions(copied: ferry_idl::ByValue, lent: ferry_idl::Lent, shared: ferry_idl::Shared) -> ferry_idl::ByValue = 4;
        /// A one-way operation.
        oneway note(text: String) = 5;
        /// Arguments named like the generated code's own variables,
        /// parameters and the C library functions it calls.
        fn clash(c: u32, a: u32, d: u32, e: u32, m: u32, r: u32, st: u32, reply: u32, code: u32, ctx: u32, result: u32, error: u32, memset: u32, snprintf: u32) -> u32 | Answer = 6;
    }
}

/// The C++ compiler: `$CXX`, else the first of `c++` and `g++` that runs.
fn cxx() -> Option<String> {
    if let Ok(cxx) = std::env::var("CXX") {
        return Some(cxx);
    }
    ["c++", "g++"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success())).map(str::to_owned)
}

/// Generates the C stubs of `desc` and compiles them as C11 and as C++17,
/// with every warning an error, and their header alone as C++, in a fresh
/// directory. Without a C++ compiler the C++ half is skipped, and says so.
fn compile_stubs(desc: &serde_json::Value, prefix: &str) {
    let dir = common::temp_path(format!("ferry-idl-c-{}-{prefix}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stubs = ferry_idl::c::generate(desc, Some(prefix)).unwrap_or_else(|e| panic!("C stubs of {prefix}: {e}"));
    std::fs::write(dir.join(&stubs.header_name), &stubs.header).unwrap();
    std::fs::write(dir.join(&stubs.source_name), &stubs.source).unwrap();
    let include = format!("-I{}", repo().join("crates/ferry-ffi/include").display());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_DEFAULT_SOURCE", "-c"])
        .arg(&include)
        .arg(format!("-I{}", dir.display()))
        .arg(dir.join(&stubs.source_name))
        .arg("-o")
        .arg(dir.join(format!("{prefix}.o")))
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(out.status.success(), "{prefix}'s C stubs do not compile:\n{}", String::from_utf8_lossy(&out.stderr));
    let Some(cxx) = cxx() else {
        eprintln!("no C++ compiler (set CXX, or install c++ or g++): {prefix}'s stubs were compiled as C only");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    let cxx_flags = ["-x", "c++", "-std=c++17", "-Wall", "-Wextra", "-Werror"];
    let out = Command::new(&cxx).args(cxx_flags).arg("-fsyntax-only").arg(&include).arg(dir.join(&stubs.header_name)).output().unwrap_or_else(|e| panic!("run {cxx}: {e}"));
    assert!(out.status.success(), "{prefix}'s C header is not valid C++:\n{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(&cxx)
        .args(cxx_flags)
        .args(["-D_DEFAULT_SOURCE", "-c"])
        .arg(&include)
        .arg(format!("-I{}", dir.display()))
        .arg(dir.join(&stubs.source_name))
        .arg("-o")
        .arg(dir.join(format!("{prefix}.cc.o")))
        .output()
        .unwrap_or_else(|e| panic!("run {cxx}: {e}"));
    assert!(out.status.success(), "{prefix}'s C stubs do not compile as C++:\n{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An interface name is any string: one with quotes, backslashes, the end
/// of a comment, a trigraph, a newline and letters beyond ASCII is written
/// into the stubs' comments and their `PREFIX_NAME` string (which the
/// version check sends) so that they compile, as C and as C++, and the
/// string holds the name's bytes exactly.
#[test]
fn an_interface_name_of_any_characters_is_a_c_string_of_its_bytes() {
    let name = "acme \"kv\" \\ */ /* ??= tab\there\nline 2 \u{e9}t\u{e9}";
    let mut desc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo().join("tests/idl/example.kv.json")).unwrap()).unwrap();
    let d = desc.get_mut("description").unwrap_or_else(|| panic!("the contract holds a description"));
    d["interface"] = serde_json::Value::String(name.into());
    compile_stubs(&desc, "odd");
    let dir = common::temp_path(format!("ferry-idl-c-{}-odd-name", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stubs = ferry_idl::c::generate(&desc, Some("odd")).expect("C stubs");
    std::fs::write(dir.join(&stubs.header_name), &stubs.header).unwrap();
    std::fs::write(dir.join("name.c"), "#include <stdio.h>\n#include \"odd.h\"\nint main(void) { fputs(ODD_NAME, stdout); return 0; }\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", repo().join("crates/ferry-ffi/include").display()))
        .arg(format!("-I{}", dir.display()))
        .arg(dir.join("name.c"))
        .arg("-o")
        .arg(dir.join("name"))
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(out.status.success(), "a program printing ODD_NAME does not compile:\n{}", String::from_utf8_lossy(&out.stderr));
    let printed = Command::new(dir.join("name")).output().expect("run it");
    assert_eq!(String::from_utf8_lossy(&printed.stdout), name);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Records and enumerations are named in C from their names, beside the
/// helpers the stubs bring and the names they give operations: a record
/// named `Hello` compiles (the version check's helpers are named apart),
/// and two things the description keeps apart that C would name alike
/// (a record `ListEntry` beside the list of `Entry`, an operation
/// `dispatch` beside the dispatcher, an enumeration `Bool` beside `bool`,
/// an enumeration `Op` whose variant
/// `Put` is named like operation `put`'s ordinal, two different records
/// named `Entry`) are refused with an error naming both, instead of
/// stubs that do not compile or that decode one as the other.
#[test]
fn a_record_named_hello_compiles_and_names_c_would_confuse_are_refused() {
    let kv = std::fs::read_to_string(repo().join("tests/idl/example.kv.json")).unwrap();
    let parse = |text: &str| -> serde_json::Value { serde_json::from_str(text).unwrap() };
    compile_stubs(&parse(&kv.replace("\"Entry\"", "\"Hello\"")), "hello");

    let ops = |d: &mut serde_json::Value| -> Vec<serde_json::Value> { d["description"]["operations"].as_array().unwrap().clone() };
    let with_op = |op: serde_json::Value| {
        let mut d = parse(&kv);
        let mut list = ops(&mut d);
        list.push(op);
        d["description"]["operations"] = serde_json::Value::Array(list);
        d
    };
    let record = |name: &str, field: &str| serde_json::json!({"record": name, "fields": [{"name": field, "ordinal": 1, "type": "u32"}]});
    let refused = [
        (with_op(serde_json::json!({"name": "first", "ordinal": 9, "kind": "call", "args": [], "result": record("ListEntry", "n"), "error": null})), "ListEntry"),
        (parse(&kv.replace("\"name\": \"remove\"", "\"name\": \"dispatch\"")), "dispatch"),
        (parse(&kv.replace("\"KvError\"", "\"Bool\"")), "enum Bool"),
        (with_op(serde_json::json!({"name": "pick", "ordinal": 9, "kind": "call", "args": [], "result": {"enum": "Op", "variants": [{"name": "Put", "ordinal": 1, "payload": null}]}, "error": null})), "Op::Put"),
        (with_op(serde_json::json!({"name": "other", "ordinal": 9, "kind": "call", "args": [], "result": record("Entry", "other"), "error": null})), "Entry"),
    ];
    for (desc, what) in refused {
        match ferry_idl::c::generate(&desc, Some("kv")) {
            Err(e) => assert!(e.to_string().contains(what), "{what}: {e}"),
            Ok(_) => panic!("{what}: stubs were made"),
        }
    }
}

/// A description written by hand (or damaged) whose fields, arguments,
/// variants or versions C cannot hold apart is refused with an error
/// saying which, instead of stubs that do not compile: two arguments of
/// one name, a record's field ordinal used twice or past a u16, two fields
/// C names alike (`void` is `void_` there), two variants of one ordinal
/// or one past a u32, and a version past a u32 or older than the
/// compatible one; a record, enumeration or variant whose name is not a
/// C identifier (it went into comments and string literals as it was);
/// and a prefix that would name the stubs' header like
/// one they include (`string.h`, `ferry.h`).
#[test]
fn descriptions_whose_fields_c_cannot_tell_apart_are_refused() {
    let kv = std::fs::read_to_string(repo().join("tests/idl/example.kv.json")).unwrap();
    let base: serde_json::Value = serde_json::from_str(&kv).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut d = base.clone();
        f(&mut d["description"]);
        d
    };
    let put_args = |d: &mut serde_json::Value| d["operations"][0]["args"].as_array_mut().unwrap().clone();
    let refused = [
        (
            edit(&|d| {
                let mut args = put_args(d);
                let mut again = args[1].clone();
                again["ordinal"] = 3.into();
                args.push(again);
                d["operations"][0]["args"] = args.into();
            }),
            "two fields are named value",
        ),
        (edit(&|d| d["operations"][0]["args"][1]["ordinal"] = 1.into()), "ordinal 1 is over 65535 or used twice"),
        (edit(&|d| d["operations"][0]["args"][1]["ordinal"] = 65536.into()), "ordinal 65536"),
        (
            edit(&|d| {
                let mut args = put_args(d);
                args[0]["name"] = "void".into();
                args[1]["name"] = "void_".into();
                d["operations"][0]["args"] = args.into();
            }),
            "two fields are named void_",
        ),
        (edit(&|d| d["operations"][0]["error"]["variants"][1]["ordinal"] = 1.into()), "variant EmptyKey's ordinal 1"),
        (edit(&|d| d["operations"][0]["error"]["variants"][1]["ordinal"] = 4294967296u64.into()), "ordinal 4294967296"),
        (edit(&|d| d["version"] = 4294967296u64.into()), "version 4294967296"),
        (edit(&|d| d["operations"][3]["result"]["list"]["record"] = "*/".into()), "record name \"*/\""),
        (edit(&|d| d["operations"][0]["error"]["enum"] = "\"".into()), "enumeration name"),
        (edit(&|d| d["operations"][0]["error"]["variants"][0]["name"] = "Too Large".into()), "variant name"),
        (edit(&|d| d["compatible"] = 2.into()), "compatible version 2"),
    ];
    for (desc, what) in refused {
        match ferry_idl::c::generate(&desc, Some("kv")) {
            Err(e) => assert!(e.to_string().contains(what), "{what}: {e}"),
            Ok(_) => panic!("{what}: stubs were made"),
        }
    }
    // A prefix naming a header the stubs include (or ferry's own).
    for prefix in ["ferry", "string", "time"] {
        match ferry_idl::c::generate(&base, Some(prefix)) {
            Err(e) => assert!(e.to_string().contains(&format!("{prefix}.h")), "{prefix}: {e}"),
            Ok(_) => panic!("prefix {prefix}: stubs were made"),
        }
    }
    // The description as it is still makes stubs that compile.
    compile_stubs(&base, "kv_whole");
}

#[test]
fn the_name_service_and_names_that_are_reserved_words_compile_to_c() {
    // The name service's operations include `register` and its listing a
    // variant `Inline`: both are C keywords, which the generator renames
    // (`register_`, `inline_`) rather than writing code that does not
    // compile.
    compile_stubs(&ferry::bootstrap::protocol::describe(), "names");
    compile_stubs(&reserved::describe(), "reserved");
}

/// The stubs are C that C++ compiles too (no conversion from `void *`
/// without a cast, no C++ keyword as a name), so a C++ program can build
/// them with the rest of its sources.
#[test]
fn stubs_of_every_kind_of_value_compile_as_c_and_as_cxx() {
    compile_stubs(&serde_json::from_str(&std::fs::read_to_string(repo().join("tests/idl/example.kv.json")).unwrap()).unwrap(), "kv");
    compile_stubs(&every::describe(), "every");
}
