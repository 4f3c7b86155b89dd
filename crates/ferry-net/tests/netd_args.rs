//! `ferry-netd`'s command line, run as a user would: `--help` and
//! `--version` work, bad flags and bad values are refused with a clear
//! message and exit code 2 before anything starts, and `--gen-identity`
//! writes a usable identity; a listening address in use is named in the
//! error, an import of no host or of an untrusted one is refused, so is a
//! `--trust` file that is no certificate, and so is `--system-names` from
//! a user other than root. No daemon is left
//! running.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `ferry-netd ARGS` to completion, killing it after 30 seconds.
fn netd(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
        .args(args)
        // Never reach a real name server from these runs.
        .env("FERRY_BOOTSTRAP", "/nonexistent/ferry-netd-args/bootstrap")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferry-netd");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferry-netd {args:?} still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A usage error: exit code 2, nothing on standard output, and standard
/// error saying `what`.
fn assert_usage_error(args: &[&str], what: &[&str]) {
    let out = netd(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "ferry-netd {args:?}: {out:?}");
    assert!(out.stdout.is_empty(), "ferry-netd {args:?} wrote to stdout: {}", text(&out.stdout));
    for w in what {
        assert!(err.contains(w), "ferry-netd {args:?}: stderr lacks {w:?}:\n{err}");
    }
}

#[test]
fn help_lists_every_flag() {
    for flag in ["--help", "-h"] {
        let out = netd(&[flag]);
        assert!(out.status.success(), "{flag}: {out:?}");
        let help = text(&out.stdout);
        assert!(help.contains("Usage: ferry-netd"), "{help}");
        for f in [
            "--identity", "--listen", "--trust", "--peer", "--export", "--import", "--idle-timeout-ms", "--gen-identity",
            "--host-name", "--system-names", "--version",
        ] {
            assert!(help.contains(f), "{flag} does not mention {f}:\n{help}");
        }
    }
}

#[test]
fn version_prints_the_crate_version() {
    for flag in ["--version", "-V"] {
        let out = netd(&[flag]);
        assert!(out.status.success(), "{flag}: {out:?}");
        assert_eq!(text(&out.stdout).trim(), format!("ferry-netd {}", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn unknown_flag_is_a_usage_error() {
    assert_usage_error(&["--identity", "/nonexistent", "--bogus"], &["unexpected argument '--bogus'", "Usage: ferry-netd"]);
}

#[test]
fn bad_values_are_usage_errors_naming_the_flag() {
    assert_usage_error(&["--identity", "/nonexistent", "--listen", "not-an-address"], &["--listen", "not-an-address"]);
    assert_usage_error(&["--identity", "/nonexistent", "--peer", "a=10.0.0.1"], &["--peer", "not a socket address"]);
    assert_usage_error(&["--identity", "/nonexistent", "--peer", "10.0.0.1:7447"], &["--peer", "expected HOST=VALUE"]);
    assert_usage_error(&["--identity", "/nonexistent", "--trust", "=cert.pem"], &["--trust", "expected HOST=VALUE"]);
    assert_usage_error(&["--identity", "/nonexistent", "--idle-timeout-ms", "soon"], &["--idle-timeout-ms", "soon"]);
    assert_usage_error(&["--identity"], &["--identity", "a value is required"]);
}

#[test]
fn identity_is_required_and_gen_identity_stands_alone() {
    assert_usage_error(&[], &["--identity"]);
    assert_usage_error(&["--listen", "127.0.0.1:0"], &["--identity"]);
    assert_usage_error(&["--gen-identity", "/nonexistent", "--identity", "/nonexistent"], &["cannot be used with"]);
    assert_usage_error(&["--identity", "/nonexistent", "--host-name", "a"], &["--host-name"]);
}

#[test]
fn gen_identity_writes_a_private_key_and_a_certificate() {
    let dir = std::env::temp_dir().join(format!("ferry-netd-args-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let id = dir.join("id");
    let out = netd(&["--gen-identity", id.to_str().unwrap(), "--host-name", "a"]);
    assert!(out.status.success(), "{out:?}");
    let (cert, key) = (std::fs::read_to_string(id.join("cert.pem")).unwrap(), std::fs::read_to_string(id.join("key.pem")).unwrap());
    assert_eq!(std::fs::metadata(id.join("key.pem")).unwrap().permissions().mode() & 0o777, 0o600);
    ferry_net::Identity::from_pem(&cert, &key).expect("the written identity loads");
    // A daemon given that identity gets past its arguments and fails only
    // at the (absent) local name server, as a run-time error (exit 1).
    let out = netd(&["--identity", id.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("local name server"), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--gen-identity` into a directory that already holds an identity
/// refuses and keeps it: its peers pin that certificate, and the command
/// run a second time (a setup script run again) replaced the key, so the
/// host could link to none of them.
#[test]
fn gen_identity_never_replaces_an_identity() {
    let dir = std::env::temp_dir().join(format!("ferry-netd-again-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let id = dir.join("id");
    assert!(netd(&["--gen-identity", id.to_str().unwrap()]).status.success());
    let read = |f: &str| std::fs::read(id.join(f)).unwrap();
    let (cert, key) = (read("cert.pem"), read("key.pem"));
    let out = netd(&["--gen-identity", id.to_str().unwrap()]);
    let (cert2, key2) = (read("cert.pem"), read("key.pem"));
    let _ = std::fs::remove_dir_all(&dir);
    let err = text(&out.stderr);
    assert!(cert == cert2 && key == key2, "a second --gen-identity replaced the identity: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("already holds an identity"), "{err}");
}

/// An identity and a name server of a test's own in a fresh directory `tag`:
/// runs `ferry-netd --identity ID ARGS` against them to completion.
fn netd_with_names(tag: &str, args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!("ferry-netd-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let id = dir.join("id");
    assert!(netd(&["--gen-identity", id.to_str().unwrap()]).status.success());
    let boot = dir.join("bootstrap");
    ferry::NameServer::bind(&boot).unwrap().spawn().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferry-netd"))
        .args(["--identity", id.to_str().unwrap()])
        .args(args)
        .env("FERRY_BOOTSTRAP", &boot)
        .stdin(Stdio::null())
        .output()
        .expect("run ferry-netd");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// A listening address another program holds is a run-time error (exit 1)
/// that names the address, not a bare "Address already in use".
#[test]
fn a_listen_address_in_use_is_named() {
    let busy = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = netd_with_names("busy", &["--listen", &addr]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&addr) && err.contains("in use"), "{err}");
}

/// An `--import` that is not `NAME@HOST`, or names a host not trusted, is
/// refused at start with what to do (an import of a trusted host that is
/// not linked yet is not: it waits for the link).
#[test]
fn an_import_of_no_host_or_an_untrusted_one_is_refused() {
    let out = netd_with_names("import-untrusted", &["--listen", "127.0.0.1:0", "--import", "svc@nowhere"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nowhere is not a trusted host") && err.contains("--trust nowhere="), "{err}");
    let out = netd_with_names("import-nohost", &["--listen", "127.0.0.1:0", "--import", "svc"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("expected NAME@HOST"), "{err}");
}

/// A `--trust` file that is not a certificate (a host's `key.pem` given
/// for its `cert.pem`) is refused naming the flag and the file: it said
/// only "expected a CERTIFICATE block, found PRIVATE KEY".
#[test]
fn a_trust_file_that_is_no_certificate_is_named() {
    let dir = std::env::temp_dir().join(format!("ferry-netd-trustkey-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let peer = dir.join("peer");
    assert!(netd(&["--gen-identity", peer.to_str().unwrap()]).status.success());
    let key = peer.join("key.pem");
    let out = netd_with_names("trust-key", &["--listen", "127.0.0.1:0", "--trust", &format!("b={}", key.display())]);
    let _ = std::fs::remove_dir_all(&dir);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("--trust b={}", key.display())) && err.contains("CERTIFICATE"), "{err}");
}

/// `--system-names` run by a user other than root is refused at start,
/// saying why, before it reaches a name server (which would refuse each
/// registration as `Denied`). The daemon is copied where that user may run
/// it (a build below a private directory is out of its reach).
#[test]
fn system_names_are_refused_to_a_daemon_not_run_by_root() {
    use std::os::unix::process::CommandExt;

    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped system_names_are_refused_to_a_daemon_not_run_by_root: starting a process as another user needs root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferry-netd-not-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join("ferry-netd");
    std::fs::copy(env!("CARGO_BIN_EXE_ferry-netd"), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(&copy)
        .args(["--identity", "/nonexistent", "--system-names"])
        .env("FERRY_BOOTSTRAP", "/nonexistent/ferry-netd-args/bootstrap")
        .current_dir("/")
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--system-names") && err.contains("only root"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferry-netd --gen-identity DIR` run by root never writes its private
/// key where another user put a file of its own, nor through that user's
/// symbolic links: uid nobody made `DIR` ahead, with a `key.pem` it may
/// read and a `cert.pem` linked to a file only root may write. Root's key
/// went into nobody's file and the certificate over root's. A directory
/// of another user's, or one others may write to, is refused.
#[test]
fn gen_identity_never_writes_into_another_users_directory() {
    use std::os::unix::process::CommandExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped gen_identity_never_writes_into_another_users_directory: playing another user needs root");
        return;
    }
    let base = std::env::temp_dir().join(format!("ferry-netd-squat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (shared, secret) = (base.join("tmp"), base.join("secret"));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = secret.join("victim");
    std::fs::write(&victim, b"root's own\n").unwrap();
    let id = shared.join("id");
    // The other user, a real process of uid nobody, makes the directory
    // first.
    let squat = format!(
        "mkdir -m 755 {0} && touch {0}/key.pem && chmod 644 {0}/key.pem && ln -s {1} {0}/cert.pem",
        id.display(),
        victim.display()
    );
    let made = Command::new("sh").args(["-c", &squat]).uid(65534).gid(65534).current_dir("/").status().unwrap();
    assert!(made.success(), "the other user could not make its directory");
    let out = netd(&["--gen-identity", id.to_str().unwrap()]);
    let key_there = std::fs::read_to_string(id.join("key.pem")).unwrap_or_default();
    let victim_now = std::fs::read(&victim).unwrap();
    let _ = std::fs::remove_dir_all(&base);
    println!(
        "gen-identity into nobody's directory: {}; nobody's key.pem holds a private key: {}; the victim is intact: {}",
        out.status,
        key_there.contains("PRIVATE KEY"),
        victim_now == b"root's own\n"
    );
    assert!(!key_there.contains("PRIVATE KEY"), "root's private key went into another user's file");
    assert_eq!(victim_now, b"root's own\n", "ferry-netd wrote through another user's symbolic link");
    assert!(!out.status.success() && text(&out.stderr).contains("owned by uid 65534"), "{out:?}");
}
