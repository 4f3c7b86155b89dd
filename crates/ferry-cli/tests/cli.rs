//! The `ferry` command line: `--version`, `--help` on every subcommand, and
//! `ferry bench` / `ferry probe`, which run the separately installed
//! `ferry-bench` program or, when it is absent, say how to install it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FERRY: &str = env!("CARGO_BIN_EXE_ferry");

/// These tests write programs and run them. A child forked by one test
/// while another is writing a program inherits the open file until its own
/// exec, and running that program then fails with "Text file busy"; so the
/// tests take turns (a spawn returns only after the child's exec, when the
/// inherited descriptor is closed).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temporary directory");
    d
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A copy of `ferry` alone in a directory of its own, so that nothing is
/// installed beside it.
fn lone_ferry(dir: &Path) -> PathBuf {
    let f = dir.join("ferry");
    std::fs::copy(FERRY, &f).expect("copy ferry");
    f
}

#[test]
fn version_and_help_on_every_subcommand() {
    let _turn = serial();
    let out = Command::new(FERRY).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(text(&out.stdout).trim(), format!("ferry {}", env!("CARGO_PKG_VERSION")));
    for sub in ["demo", "names", "stat"] {
        let out = Command::new(FERRY).args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "ferry {sub} --help: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains(&format!("Usage: ferry {sub}")), "ferry {sub} --help:\n{}", text(&out.stdout));
    }
    let out = Command::new(FERRY).arg("--help").output().unwrap();
    let help = text(&out.stdout);
    for sub in ["demo", "names", "stat", "bench", "probe"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(sub)), "ferry --help lacks {sub}:\n{help}");
    }
    // Flags are checked, not ignored.
    let out = Command::new(FERRY).args(["stat", "--frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--frobnicate"));
}

/// Without `ferry-bench` beside `ferry`, on PATH or in FERRY_BENCH, `ferry
/// bench` and `ferry probe` (and their `--help`) fail with the install
/// command.
#[test]
fn bench_and_probe_say_how_to_install_when_absent() {
    let _turn = serial();
    let dir = temp_dir("absent");
    let ferry = lone_ferry(&dir);
    for args in [&["bench", "all", "--quick"][..], &["bench", "--help"], &["probe"]] {
        let out = Command::new(&ferry).args(args).env_remove("FERRY_BENCH").env("PATH", &dir).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "ferry {args:?}: {err}");
        assert!(err.contains("cargo install --path crates/ferry-bench"), "ferry {args:?}:\n{err}");
        assert!(err.contains(&dir.join("ferry-bench").display().to_string()), "says where it looked:\n{err}");
    }
    // A FERRY_BENCH naming nothing runnable is an error of its own.
    let out = Command::new(&ferry).args(["bench", "port"]).env("FERRY_BENCH", dir.join("missing")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("FERRY_BENCH="), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferry bench ARGS` runs `ferry-bench bench ARGS` in its place: the
/// arguments arrive untouched (options and `--help` included), `argv[0]` is
/// `ferry`, and the exit status is the program's. The program here is a
/// shell script standing in for `ferry-bench`; the real program's side is
/// tested in crates/ferry-bench/tests/bench_cli.rs.
#[test]
fn bench_runs_the_installed_program_with_the_arguments() {
    let _turn = serial();
    let dir = temp_dir("forward");
    let ferry = lone_ferry(&dir);
    let log = dir.join("argv");
    let script = format!("#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > '{}'\nexit 7\n", log.display());
    let check = |program_dir: &Path, env: Option<&Path>, args: &[&str], want: &[&str]| {
        let p = program_dir.join("ferry-bench");
        std::fs::write(&p, &script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(&ferry);
        cmd.args(args).env("PATH", program_dir).env_remove("FERRY_BENCH");
        if let Some(e) = env {
            cmd.env("FERRY_BENCH", e);
        }
        let out: Output = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(7), "ferry {args:?}: {}", text(&out.stderr));
        let got = std::fs::read_to_string(&log).expect("the program ran");
        // sh's $0 is the script path; the rest is what ferry passed.
        let got: Vec<&str> = got.lines().skip(1).collect();
        assert_eq!(got, want);
        std::fs::remove_file(&p).unwrap();
    };
    let on_path = temp_dir("forward-path");
    // Found on PATH.
    check(&on_path, None, &["bench", "port", "--quick", "--json", "r.json"], &["bench", "port", "--quick", "--json", "r.json"]);
    // Found beside ferry; --help goes to the program.
    check(&dir, None, &["probe", "--help"], &["probe", "--help"]);
    // Named by FERRY_BENCH.
    let named = temp_dir("forward-env");
    check(&named, Some(&named.join("ferry-bench")), &["bench", "report", "r.json"], &["bench", "report", "r.json"]);
    for d in [dir, on_path, named] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// With no name server at the socket given, `ferry names` says how to
/// start one there: a daemon started as it used to say (`ferryd --detach`)
/// listens at the default path, not at the one asked about, and the
/// command failed again the same way.
#[test]
fn names_without_a_server_says_how_to_start_one_at_that_socket() {
    let _turn = serial();
    let dir = temp_dir("names-none");
    let sock = dir.join("bootstrap");
    let out = Command::new(FERRY).args(["names", "--socket", sock.to_str().unwrap()]).env("FERRY_NO_AUTOSTART", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("ferryd --detach --socket {}", sock.display())), "{err}");
    // At the path a plain `ferryd --detach` listens on, that is what it says.
    let out = Command::new(FERRY).arg("names").env("FERRY_BOOTSTRAP", &sock).env("FERRY_NO_AUTOSTART", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("`ferryd --detach`"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferry` installed alone (`cargo install` installs no library) says how
/// to build the emulation library `ferry run` preloads and where to put
/// it, and runs nothing.
#[test]
fn run_without_the_emulation_library_says_how_to_build_and_install_it() {
    let _turn = serial();
    let dir = temp_dir("run-nolib");
    let ferry = lone_ferry(&dir);
    let out = Command::new(&ferry).args(["run", "--files"]).arg(&dir).args(["--", "/bin/true"]).env_remove("FERRY_EMUL_LIB").output().unwrap();
    let err = text(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("cargo build --release -p ferry-emul"), "{err}");
    assert!(err.contains(&format!("{}/libferry_emul.so", dir.display())), "{err}");
}

/// Another user's name server (a per-user `ferryd`'s socket is mode 0600)
/// refuses a connection with "Permission denied"; `ferry names` says that
/// the socket is another user's and which name server to use instead. Run
/// as uid nobody against a socket of root's.
#[test]
fn names_at_another_users_socket_says_whose_it_is_and_what_to_use() {
    use std::os::unix::process::CommandExt;
    if Command::new("id").arg("-u").output().map(|o| o.stdout != b"0\n").unwrap_or(true) {
        eprintln!("skipped names_at_another_users_socket_says_whose_it_is_and_what_to_use: needs root to run as another user");
        return;
    }
    let _turn = serial();
    let dir = temp_dir("names-theirs");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ferry = lone_ferry(&dir);
    std::fs::set_permissions(&ferry, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.join("bootstrap");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(&ferry).args(["names", "--socket"]).arg(&sock).uid(65534).gid(65534).current_dir("/").output().unwrap();
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(err.contains("belongs to uid 0"), "{err}");
    assert!(err.contains("ferryd --system"), "{err}");
}

/// `ferry stat NAME` of a name nobody registered says so and where the
/// names that are registered are listed (`ferry names`), against a real
/// name server.
#[test]
fn stat_of_a_name_nobody_registered_points_to_ferry_names() {
    let _turn = serial();
    let dir = temp_dir("stat-unknown");
    let sock = dir.join("bootstrap");
    let ferryd = Path::new(FERRY).with_file_name("ferryd");
    let mut daemon = Command::new(&ferryd).arg("--socket").arg(&sock).stderr(std::process::Stdio::null()).spawn().expect("start ferryd");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !sock.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = Command::new(FERRY).args(["stat", "no-such-service"]).env("FERRY_BOOTSTRAP", &sock).env("FERRY_NO_AUTOSTART", "1").output().unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("\"no-such-service\"") && err.contains("`ferry names`"), "{err}");
}
