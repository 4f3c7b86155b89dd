//! The benchmarks run by root in a temporary directory every user may
//! write to: another user's directories and symbolic links there never
//! make them write where that user points.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FERRY_BENCH: &str = env!("CARGO_BIN_EXE_ferry-bench");

/// The size of the pager suite's data file in a `--smoke` run.
const PAGER_FILE: u64 = 16 << 20;

/// What another user does before the benchmarks run, when
/// `FERRY_TEST_SQUAT` names the shared temporary directory: makes
/// `ferry-bench-pager-0`, the files suite's directories of the next pids
/// and iceoryx2's root directories, world-writable, with the names the benchmarks write (the data
/// file's temporary names, `seq`) symbolic links to `FERRY_TEST_VICTIM`.
/// Run as uid nobody by
/// `benchmarks_run_by_root_never_write_through_another_users_links`;
/// otherwise nothing.
#[test]
fn squat_the_benchmarks_directories() {
    let (Some(tmp), Some(victim)) = (std::env::var_os("FERRY_TEST_SQUAT"), std::env::var_os("FERRY_TEST_VICTIM")) else { return };
    let tmp = Path::new(&tmp);
    let read = |p: &str| -> u32 { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    let (last, max) = (read("/proc/sys/kernel/ns_last_pid"), read("/proc/sys/kernel/pid_max"));
    let pager = tmp.join("ferry-bench-pager-0");
    std::fs::create_dir(&pager).unwrap();
    std::fs::set_permissions(&pager, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut made = 0;
    // The next pids, as the kernel hands them out (after the last, past
    // the largest from 300 again).
    for n in 1..3000 {
        let pid = if last + n < max { last + n } else { 300 + (last + n - max) };
        std::os::unix::fs::symlink(&victim, pager.join(format!("object-{PAGER_FILE}.new-{pid}"))).unwrap();
        let files = tmp.join(format!("ferry-bench-files-{pid}"));
        if std::fs::create_dir(&files).is_ok() {
            std::fs::set_permissions(&files, std::fs::Permissions::from_mode(0o777)).unwrap();
            std::os::unix::fs::symlink(&victim, files.join("seq")).unwrap();
            made += 1;
        }
    }
    // iceoryx2's root directory, by the name it had and by this one's.
    for name in ["ferry-bench-iceoryx2", "ferry-bench-iceoryx2-0"] {
        let dir = tmp.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    println!("squatted {made}");
}

/// Runs `ferry-bench bench SUITE --smoke` (and `more` arguments) with
/// `TMPDIR` at `tmp`, killed after two minutes.
fn bench(suite: &str, tmp: &Path, more: &[&str]) -> String {
    let mut child = Command::new(FERRY_BENCH)
        .arg0("ferry")
        .args(["bench", suite, "--smoke"])
        .args(more)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ferry-bench");
    let end = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("ferry bench {suite} --smoke did not finish in two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `ferry bench pager`, `ferry bench files` and iceoryx2's `ferry bench
/// rpc` run by root with a shared temporary directory in which another
/// user (nobody) made the directories they would use, with symbolic links
/// in them to a file only root may write: the file is untouched, and
/// iceoryx2 writes nothing in that user's directories (it is skipped,
/// saying why).
#[test]
fn benchmarks_run_by_root_never_write_through_another_users_links() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("benchmarks_run_by_root_never_write_through_another_users_links: skipped (needs root to play another user)");
        return;
    }
    let (base, tmp, victim) = squatted_base("");
    squat_as_nobody(&base, "squat_the_benchmarks_directories", ("FERRY_TEST_SQUAT", &tmp), &victim);
    let said = [bench("pager", &tmp, &[]), bench("files", &tmp, &[]), bench("rpc", &tmp, &["--impl", "iceoryx2-event"])];
    let victim_now = std::fs::read(&victim).unwrap();
    // Nothing of root's in the directories nobody made for iceoryx2.
    let roots_in_squat: Vec<_> = ["ferry-bench-iceoryx2", "ferry-bench-iceoryx2-0"]
        .iter()
        .flat_map(|d| std::fs::read_dir(tmp.join(d)).unwrap().flatten())
        .map(|e| e.path())
        .collect();
    let _ = std::fs::remove_dir_all(&base);
    assert!(victim_now == b"root's own\n", "a benchmark wrote {} bytes through another user's symbolic link:\n{}", victim_now.len(), said.join("\n"));
    assert!(said[0].contains("file-mmap"), "{}", said[0]);
    assert!(roots_in_squat.is_empty(), "iceoryx2 wrote {roots_in_squat:?} in directories another user made:\n{}", said[2]);
    assert!(said[2].contains("not this user's own directory"), "{}", said[2]);
}

/// What another user does before `ferry bench python` runs, when
/// `FERRY_TEST_SQUAT_PY` names the shared temporary directory: puts
/// symbolic links to `FERRY_TEST_VICTIM` where the suite's script would
/// write its machine description beside its records, for the next pids.
/// Run as uid nobody by
/// `python_benchmark_run_by_root_never_writes_through_another_users_links`;
/// otherwise nothing.
#[test]
fn squat_the_python_benchmarks_files() {
    let (Some(tmp), Some(victim)) = (std::env::var_os("FERRY_TEST_SQUAT_PY"), std::env::var_os("FERRY_TEST_VICTIM")) else { return };
    let tmp = Path::new(&tmp);
    let read = |p: &str| -> u32 { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    let (last, max) = (read("/proc/sys/kernel/ns_last_pid"), read("/proc/sys/kernel/pid_max"));
    let mut made = 0;
    for n in 1..3000 {
        let pid = if last + n < max { last + n } else { 300 + (last + n - max) };
        if std::os::unix::fs::symlink(&victim, tmp.join(format!("ferry-bench-python-{pid}-0.json.meta.json"))).is_ok() {
            made += 1;
        }
    }
    println!("squatted {made}");
}

/// `ferry bench python` run by root with a shared temporary directory
/// where another user (nobody) put symbolic links, to a file only root may
/// write, under the names the suite's script would write its machine
/// description to (`FILE.meta.json` beside its records, as
/// `python/bench/bench.py` does): the file is untouched. The records' name
/// was made with care, but the script's second file was that name and a
/// suffix, in the shared directory. The script here is a stand-in that
/// writes the two files as the real one does.
#[test]
fn python_benchmark_run_by_root_never_writes_through_another_users_links() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("python_benchmark_run_by_root_never_writes_through_another_users_links: skipped (needs root to play another user)");
        return;
    }
    let (base, tmp, victim) = squatted_base("py");
    // A stand-in for the interpreter (which says it can import ferry and
    // numpy) and for the script, writing FILE and FILE.meta.json.
    let (python, script) = (base.join("python"), base.join("bench.py"));
    std::fs::write(&python, "#!/bin/sh\n[ \"$1\" = -c ] && exit 0\nexec python3 \"$@\"\n").unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let stand_in = "import sys\nout = sys.argv[sys.argv.index('--json') + 1]\n\
        open(out, 'w').write('[]')\nopen(out + '.meta.json', 'w').write('{\"machine\": \"here\"}')\n";
    std::fs::write(&script, stand_in).unwrap();
    squat_as_nobody(&base, "squat_the_python_benchmarks_files", ("FERRY_TEST_SQUAT_PY", &tmp), &victim);
    let run = Command::new(FERRY_BENCH)
        .arg0("ferry")
        .args(["bench", "python", "--smoke"])
        .env("TMPDIR", &tmp)
        .env("FERRY_PYTHON", &python)
        .env("FERRY_PY_BENCH", &script)
        .stdin(Stdio::null())
        .output()
        .expect("run ferry-bench");
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    let victim_now = std::fs::read(&victim).unwrap();
    let _ = std::fs::remove_dir_all(&base);
    println!("the root-only file after ferry bench python: {:?}", String::from_utf8_lossy(&victim_now));
    assert!(victim_now == b"root's own\n", "ferry bench python wrote through another user's symbolic link:\n{said}");
}

/// `ferry bench python` run by root never runs another user's program as
/// its Python interpreter. It tried the virtual environment beside its
/// build directory, one directory above its own: with `ferry-bench` in a
/// directory of root's inside one every user may write to
/// (`$TMPDIR/build/ferry-bench`), uid nobody made `$TMPDIR/python-venv/bin/python`,
/// and root ran it. An interpreter found there is now tried only if no one
/// else may change it.
#[test]
fn python_benchmark_run_by_root_never_runs_another_users_interpreter() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("python_benchmark_run_by_root_never_runs_another_users_interpreter: skipped (needs root to play another user)");
        return;
    }
    let base = std::env::temp_dir().join(format!("ferry-bench-squat-venv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let shared = base.join("tmp");
    let build = shared.join("build");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = build.join("ferry-bench");
    if std::fs::hard_link(FERRY_BENCH, &program).is_err() {
        std::fs::copy(FERRY_BENCH, &program).unwrap();
    }
    // The other user, a real process of uid nobody, makes the virtual
    // environment's interpreter one directory up.
    let marker = shared.join("ran-as");
    let plant = format!(
        "mkdir -p {0}/python-venv/bin && printf '#!/bin/sh\\nid -u > {1}\\nexit 1\\n' > {0}/python-venv/bin/python && chmod 755 {0}/python-venv/bin/python",
        shared.display(),
        marker.display()
    );
    let planted = Command::new("sh").args(["-c", &plant]).uid(65534).gid(65534).current_dir("/").status().unwrap();
    assert!(planted.success(), "the other user could not plant its interpreter");
    let run = Command::new(&program)
        .arg0("ferry")
        .args(["bench", "python", "--smoke", "--json"])
        .arg(base.join("out.json"))
        .env_remove("FERRY_PYTHON")
        .env_remove("VIRTUAL_ENV")
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run ferry-bench");
    let ran = std::fs::read_to_string(&marker).ok();
    let _ = std::fs::remove_dir_all(&base);
    println!("the other user's interpreter ran as uid: {ran:?}; ferry bench python: {}", run.status);
    assert_eq!(ran, None, "ferry bench python ran another user's program as its interpreter");
}

/// A fresh directory `ferry-bench-squat-TAG-PID` holding `tmp`, a shared
/// temporary directory (sticky, writable by all), and a file only root may
/// write (`secret/victim`): the directory, `tmp` and the file.
fn squatted_base(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let tag = if tag.is_empty() { String::new() } else { format!("{tag}-") };
    let base = std::env::temp_dir().join(format!("ferry-bench-squat-{tag}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (tmp, secret) = (base.join("tmp"), base.join("secret"));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = secret.join("victim");
    std::fs::write(&victim, b"root's own\n").unwrap();
    (base, tmp, victim)
}

/// Runs test `squatter` of this binary as the other user, a real process
/// of uid nobody, with `squat` (its variable and the shared directory)
/// and the victim's path; it must say `squatted`. The binary is run from
/// a copy in `base`, where that user may run it (the build directory may
/// be beneath directories it cannot enter): a hard link where it can be
/// (no bytes written: a copy just written may be busy for a moment while
/// a child another test forked holds its descriptor), else a copy.
fn squat_as_nobody(base: &Path, squatter: &str, squat: (&str, &Path), victim: &Path) {
    let copy = base.join("as-another-user");
    if std::fs::hard_link(std::env::current_exe().unwrap(), &copy).is_err() {
        std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = Command::new(&copy);
    cmd.args(["--exact", squatter, "--nocapture", "--test-threads=1"])
        .env(squat.0, squat.1)
        .env("FERRY_TEST_VICTIM", victim)
        .uid(65534)
        .gid(65534)
        .current_dir("/");
    let mut out = cmd.output();
    for _ in 0..100 {
        match &out {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => std::thread::sleep(Duration::from_millis(10)),
            _ => break,
        }
        out = cmd.output();
    }
    let out = out.unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("squatted"), "{out:?}");
}
