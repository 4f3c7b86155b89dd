//! `ferry run --files DIR -- PROGRAM`: the command end to end, with a
//! shell whose redirections open files under DIR through the emulation
//! and hand them to the programs it execs, and the server it started gone
//! once the program is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The emulation library, copied once per test process into a directory
/// of the temporary directory that every user may read: programs run as
/// another user (`setpriv`) load it too, and the build directory may be
/// beneath directories they cannot enter (they then ran without it, and
/// said so on every start).
fn library() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let bin = Path::new(env!("CARGO_BIN_EXE_ferry"));
        let dir = bin.parent().expect("build directory");
        // The newer copy is this build's (`cargo test` does not refresh the
        // one `cargo build` left beside the programs).
        let built = [dir.join("libferry_emul.so"), dir.join("deps/libferry_emul.so")]
            .into_iter()
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .max()
            .map(|(_, p)| p)
            .expect("libferry_emul.so is built beside ferry (a dev-dependency)");
        // Copies left by test processes that have ended are removed.
        for e in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
            let name = e.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix("ferry-run-tests-lib-")).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let copy_dir = std::env::temp_dir().join(format!("ferry-run-tests-lib-{}", std::process::id()));
        std::fs::create_dir_all(&copy_dir).expect("make the library's directory");
        std::fs::set_permissions(&copy_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod the library's directory");
        let copy = copy_dir.join("libferry_emul.so");
        std::fs::copy(&built, &copy).expect("copy libferry_emul.so");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod libferry_emul.so");
        copy
    })
    .clone()
}

/// `ferry` where another user may run it: beside [`library`]'s copy (the
/// build directory may sit below directories other users cannot enter;
/// `setpriv` still starts a program there, but `ferry run` then fails to
/// start its server from it).
fn ferry_for_other_users() -> PathBuf {
    static LINK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LINK.get_or_init(|| {
        let lib = library();
        let ferry = lib.parent().expect("the library's directory").join("ferry");
        if std::fs::hard_link(env!("CARGO_BIN_EXE_ferry"), &ferry).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_ferry"), &ferry).expect("copy ferry");
        }
        ferry
    })
    .clone()
}

/// Process ids whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).replace('\0', " ").contains(needle) && pid != std::process::id() {
                found.push(pid);
            }
        }
    }
    found
}

#[test]
fn ferry_run_serves_a_shell_and_its_programs_then_the_server_goes() {
    let dir = scratch("test");
    let text: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.join("a.txt"), &text).unwrap();
    let d = dir.to_str().unwrap();
    // The shell opens b.txt through the library (redirection), execs cat
    // on it, then appends; wc reads the result back through the library.
    let script = format!("cat {d}/a.txt > {d}/b.txt && echo tail >> {d}/b.txt && wc -c < {d}/b.txt && head -c 12 {d}/b.txt");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--files", d, "--library"])
        .arg(library())
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "ferry run failed: {}", String::from_utf8_lossy(&out.stderr));
    let expected = text.len() + "tail\n".len();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{expected}\nline 0\nline "));
    assert_eq!(std::fs::read_to_string(dir.join("b.txt")).unwrap(), text + "tail\n");
    // The server lives while someone needs it, and not longer.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_with(&format!("__emul-serve {d}")).is_empty() {
        assert!(Instant::now() < deadline, "the emulation server outlived its program");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A missing directory is refused with its name and `ferry run`'s own
/// status (125); a program that is not there or cannot be run gets a
/// shell's (127, 126).
#[test]
fn ferry_run_tells_its_own_failures_from_the_programs() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--files", "/nonexistent/ferry-run-dir", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "ferry's own failure is not told apart from the program's");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ferry-run-dir"), "{}", String::from_utf8_lossy(&out.stderr));
    // A program that is not there, or cannot be run, is reported as a
    // shell reports it (127, 126), with its name.
    let dir = std::env::temp_dir().join(format!("ferry-run-statuses-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_executable = dir.join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let not_executable = not_executable.to_str().unwrap();
    for (program, code) in [("/nonexistent/ferry-run-program", 127), (not_executable, 126)] {
        let out = ferry_run(dir.to_str().unwrap(), &[program]);
        assert_eq!(out.status.code(), Some(code), "{program}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains(program), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `python3` runs here (the tests that need it say they are
/// skipped when it does not).
fn have_python() -> bool {
    let here = Command::new("python3").arg("-c").arg("pass").output().is_ok();
    if !here {
        eprintln!("skipped: python3 is not installed");
    }
    here
}

/// Whether a C compiler (`cc`) is installed; `test` says it is skipped
/// when none is.
fn have_cc(test: &str) -> bool {
    let here = Command::new("sh").args(["-c", "command -v cc"]).output().is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("skipped {test}: cc is not installed");
    }
    here
}

/// A fresh, empty directory for one test, by its canonical name (the one
/// the library matches the program's names against).
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-run-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// Runs the Python program `py` under `ferry run --files dir`, which must
/// succeed; returns what it printed.
fn python_under_ferry_run(dir: &str, py: &str) -> String {
    let out = ferry_run(dir, &["python3", "-c", py]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ferry_run(dir: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferry")).args(["run", "--files", dir, "--library"]).arg(library()).arg("--").args(args).output().unwrap()
}

#[test]
fn ferry_run_hands_the_right_through_the_process_port_and_passes_the_status_on() {
    if !have_python() {
        return;
    }
    let dir = scratch("handoff");
    std::fs::write(dir.join("f"), b"served\n").unwrap();
    let d = dir.to_str().unwrap();
    // Nothing is inherited: the program asks at its first file call, and
    // its holder places the right at descriptor 1000, under the filter.
    let py = format!(
        "import os\nprint(open('{d}/f').read(), end='')\nprint(os.readlink('/proc/self/fd/1000').split(':')[0])\n\
         st = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n\
         print(st['Seccomp'].strip(), st['NoNewPrivs'].strip())"
    );
    assert_eq!(python_under_ferry_run(d, &py), "served\nsocket\n2 1\n");
    // A program that starts another that starts another: the last one
    // finds the right its parents were handed.
    let out = ferry_run(d, &["sh", "-c", &format!("sh -c 'cat {d}/f; echo more >> {d}/f'; cat {d}/f")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "served\nserved\nmore\n");
    // The program's exit status is ferry run's, a signal's as a shell
    // reports it.
    assert_eq!(ferry_run(d, &["sh", "-c", "exit 3"]).status.code(), Some(3));
    assert_eq!(ferry_run(d, &["sh", "-c", "kill -TERM $$"]).status.code(), Some(128 + 15));
    assert_eq!(ferry_run(d, &["/nonexistent/program"]).status.code(), Some(127));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under a low hard limit on descriptors (`ulimit -n 512`, which the
/// server inherits), files are still served: the server's reserve of
/// descriptors shrinks with the limit instead of taking all of it (every
/// open failed with `ENFILE`).
#[test]
fn ferry_run_serves_files_under_a_low_descriptor_limit() {
    let dir = scratch("nofile");
    let d = dir.to_str().unwrap();
    std::fs::write(dir.join("f"), b"served\n").unwrap();
    for limit in [512, 128] {
        let cmd = format!(
            "ulimit -n {limit} && exec '{}' run --files '{d}' --library '{}' -- sh -c 'for i in 1 2 3 4 5 6 7 8; do exec 3<{d}/f; done; cat {d}/f'",
            env!("CARGO_BIN_EXE_ferry"),
            library().display()
        );
        let out = Command::new("bash").arg("-c").arg(&cmd).output().unwrap();
        assert!(out.status.success(), "limit {limit}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "served\n", "limit {limit}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file the program closes is closed when `close` returns, as natively:
/// the server's own descriptor of it goes before the call does, so the
/// program can run a script it just wrote (no "Text file busy") or lock
/// the file afresh. The server used to close it when its loop came to the
/// hold's end, and build tools that write and run a program at once
/// failed now and then.
#[test]
fn ferry_run_closes_a_file_before_close_returns() {
    if !have_python() {
        return;
    }
    let dir = scratch("close");
    let d = dir.to_str().unwrap();
    // The server is the peer of the right at descriptor 1000. Its
    // descriptors of the file are found while the file is open and looked
    // at again the moment `close` returns, the server on another CPU (a
    // wake-up there takes tens of microseconds; the look, a few).
    let py = format!(
        "import os, socket, struct, fcntl\n\
         p = '{d}/run-me'\n\
         fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o755)\n\
         os.write(fd, b'#!/bin/sh\\necho ran\\n')\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=os.dup(1000))\n\
         pid = struct.unpack('3i', s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]\n\
         def named(f):\n\
         \x20   try: return os.readlink(f'/proc/{{pid}}/fd/{{f}}') == p\n\
         \x20   except OSError: return False\n\
         mine = [f for f in os.listdir(f'/proc/{{pid}}/fd') if named(f)]\n\
         print('open', len(mine) > 0)\n\
         try:\n\
         \x20   os.sched_setaffinity(pid, {{0}}); os.sched_setaffinity(0, {{1}})\n\
         except OSError: pass\n\
         os.close(fd)\n\
         print('closed', sum(named(f) for f in mine))\n\
         r = os.open(p, os.O_RDONLY); fcntl.flock(r, fcntl.LOCK_EX); os.close(r)\n\
         r = os.open(p, os.O_RDONLY); fcntl.flock(r, fcntl.LOCK_EX | fcntl.LOCK_NB); os.close(r)\n\
         print('locked again')\n\
         os.execv(p, [p])\n"
    );
    assert_eq!(python_under_ferry_run(d, &py), "open True\nclosed 0\nlocked again\nran\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child about to exec closes every descriptor it does not pass on, the
/// library's reply ports among them (Python's subprocess does), while the
/// files it closes are let go at the server: a reply port the program
/// closed is neither reused nor closed again (closing it again closed
/// whatever had its number by then; a debug build aborted on it).
#[test]
fn ferry_run_children_that_close_everything_before_exec_keep_working() {
    if !have_python() {
        return;
    }
    let dir = scratch("closeall");
    let d = dir.to_str().unwrap();
    let py = format!(
        "import os, subprocess\n\
         fds = [os.open(f'{d}/f{{i}}', os.O_RDWR | os.O_CREAT, 0o644) for i in range(3)]\n\
         for step in range(150):\n\
         \x20   fd = fds[step % 3]\n\
         \x20   r = subprocess.run(['sh', '-c', f'echo shell{{step}} >&{{fd}}'], pass_fds=[fd], capture_output=True)\n\
         \x20   assert r.returncode == 0, (step, r.returncode, r.stderr)\n\
         print(sum(len(open(f'{d}/f{{i}}').read().split()) for i in range(3)))\n"
    );
    assert_eq!(python_under_ferry_run(d, &py), "150\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A descriptor closed with the raw system call (`syscall(SYS_close)`, as
/// libuv does under Node.js) is forgotten by the library like one closed
/// with `close`: the next descriptor given the same number (a pipe here;
/// an inotify descriptor or a socket in Node.js) is the program's, not the
/// file's. It used to read the file's bytes.
#[test]
fn ferry_run_forgets_descriptors_closed_by_raw_system_call() {
    if !have_python() {
        return;
    }
    let dir = scratch("rawclose");
    let d = dir.to_str().unwrap();
    std::fs::write(dir.join("f"), b"file-bytes").unwrap();
    let py = format!(
        "import os, ctypes, platform\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         SYS_close = {{'x86_64': 3, 'aarch64': 57}}[platform.machine()]\n\
         fd = os.open('{d}/f', os.O_RDONLY)\n\
         os.read(fd, 4)\n\
         print(libc.syscall(SYS_close, fd))\n\
         r, w = os.pipe()\n\
         os.write(w, b'pipe-bytes')\n\
         print(fd in (r, w), os.read(r, 100).decode())\n"
    );
    assert_eq!(python_under_ferry_run(d, &py), "0\nTrue pipe-bytes\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferry run` under `ferry run`: the inner one cannot install its
/// hand-off filter (a process may have one seccomp listener, and the outer
/// one's is inherited), so its program inherits the right instead. It
/// used to fail with "Device or resource busy" and status 126.
#[test]
fn ferry_run_runs_under_ferry_run() {
    let dir = scratch("nested");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    let d = dir.to_str().unwrap();
    std::fs::write(dir.join("g"), b"outer\n").unwrap();
    std::fs::write(dir.join("in/f"), b"inner\n").unwrap();
    let inner = format!(
        "cat {d}/g; '{}' run --files {d}/in --library '{}' -- sh -c 'cat {d}/in/f; echo more >> {d}/in/f; exit 4'; echo status $?; cat {d}/in/f",
        env!("CARGO_BIN_EXE_ferry"),
        library().display()
    );
    let out = ferry_run(d, &["sh", "-c", &inner]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "outer\ninner\nstatus 4\ninner\nmore\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A descriptor of a served file passed to another process over a Unix
/// socket (`SCM_RIGHTS`) shares its offset with the sender's, as natively:
/// the receiver used to write at the kernel's stale offset, over what the
/// sender had written.
#[test]
fn ferry_run_descriptors_passed_over_sockets_share_the_offset() {
    if !have_python() {
        return;
    }
    let dir = scratch("scm");
    let d = dir.to_str().unwrap();
    let py = format!(
        "import os, socket\n\
         a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         fd = os.open('{d}/log', os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)\n\
         os.write(fd, b'sender-line\\n')\n\
         pid = os.fork()\n\
         if pid == 0:\n\
         \x20   _, fds, _, _ = socket.recv_fds(b, 10, 1)\n\
         \x20   os.write(fds[0], b'receiver-line\\n')\n\
         \x20   os._exit(0)\n\
         socket.send_fds(a, [b'x'], [fd])\n\
         os.waitpid(pid, 0)\n\
         os.write(fd, b'sender-again\\n')\n\
         os.close(fd)\n\
         print(open('{d}/log').read(), end='')\n"
    );
    assert_eq!(python_under_ferry_run(d, &py), "sender-line\nreceiver-line\nsender-again\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dup2` onto one of the library's own descriptors (1000 and up) fails
/// with `EBUSY` instead of replacing it: the library went on using the
/// number for the program's file (a write to one file landed in another).
/// Onto a free number up there, and onto the inherited right at 1000, it
/// works as natively.
#[test]
fn ferry_run_keeps_its_own_descriptors_from_dup2() {
    if !have_python() {
        return;
    }
    let dir = scratch("dup2high");
    let d = dir.to_str().unwrap();
    let py = format!(
        "import os, errno\n\
         a = os.open('{d}/a', os.O_RDWR | os.O_CREAT, 0o644)\n\
         b = os.open('{d}/b', os.O_RDWR | os.O_CREAT, 0o644)\n\
         mine = sorted(int(f) for f in os.listdir('/proc/self/fd') if int(f) > 1000)\n\
         refused = 0\n\
         for n in mine:\n\
         \x20   try:\n\
         \x20       os.dup2(b, n)\n\
         \x20   except OSError as e:\n\
         \x20       refused += e.errno == errno.EBUSY\n\
         print('refused', refused == len(mine) > 0)\n\
         os.write(a, b'to a'); os.write(b, b'to b')\n\
         print(open('{d}/a').read(), open('{d}/b').read())\n\
         os.dup2(b, 1000); os.dup2(b, 4000)\n\
         os.write(4000, b'!')\n\
         print(open('{d}/b').read())\n"
    );
    assert_eq!(python_under_ferry_run(d, &py), "refused True\nto a to b\nto b!\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Signals sent to `ferry run` reach the program: `SIGUSR1` and the like
/// used to kill `ferry run` itself and leave the program running without
/// them, and an interrupt sent with `kill` was lost.
#[test]
fn ferry_run_passes_signals_sent_to_it_on_to_the_program() {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("ferry-run-signals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = "for s in USR1 USR2 INT QUIT WINCH; do trap \"echo got $s\" $s; done; trap 'echo got ALRM; exit 7' ALRM; \
                  echo ready; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; exit 1";
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--files", dir.to_str().unwrap(), "--library"])
        .arg(library())
        .args(["--", "bash", "-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = || rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|e| panic!("the program said nothing more: {e}"));
    assert_eq!(next(), "ready");
    use rustix::process::{kill_process, Pid, Signal};
    let pid = Pid::from_raw(child.id() as i32).unwrap();
    for (sig, name) in [(Signal::USR1, "USR1"), (Signal::USR2, "USR2"), (Signal::INT, "INT"), (Signal::QUIT, "QUIT"), (Signal::WINCH, "WINCH")] {
        kill_process(pid, sig).unwrap();
        assert_eq!(next(), format!("got {name}"), "the program did not get {name}");
    }
    kill_process(pid, Signal::ALARM).unwrap();
    assert_eq!(next(), "got ALRM");
    assert_eq!(child.wait().unwrap().code(), Some(7), "ferry run exits with the program's status");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A C program whose threads open and close files under DIR from their
/// first instruction while the main thread forks children that do the
/// same.
const FORK_STRESS_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/wait.h>
static volatile int stop;
static void *worker(void *arg) {
    char n[32]; snprintf(n, 32, "w%ld", (long)arg);
    while (!stop) { int fd = open(n, O_CREAT|O_RDWR, 0644); if (fd >= 0) { write(fd, "x", 1); close(fd); } }
    return 0;
}
int main(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, (void *)i);
    int ok = 0;
    for (int i = 0; i < 500; i++) {
        pid_t p = fork();
        if (p == 0) { int fd = open("child", O_CREAT|O_WRONLY|O_APPEND, 0644); write(fd, "c\n", 2); close(fd); _exit(0); }
        int st; waitpid(p, &st, 0); if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    }
    stop = 1; for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    printf("children ok %d\n", ok);
    return 0;
}
"#;

/// Threads reading one file through the library while the main thread
/// forks children that read it too (through the inherited descriptor).
const FORK_READERS_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/wait.h>
static volatile int stop;
static int fd;
static void *reader(void *arg) {
    (void)arg; char buf[65536];
    while (!stop) pread(fd, buf, sizeof buf, (rand() % 16) * 65536);
    return 0;
}
int main(void) {
    fd = open("big", O_CREAT|O_RDWR|O_TRUNC, 0644);
    char *z = calloc(1, 1 << 20); for (int i = 0; i < 4; i++) write(fd, z, 1 << 20);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, reader, 0);
    int ok = 0;
    for (int i = 0; i < 300; i++) {
        pid_t p = fork();
        if (p == 0) { char b[16]; _exit(pread(fd, b, 16, 100) == 16 ? 0 : 1); }
        int st; waitpid(p, &st, 0); if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    }
    stop = 1; for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    printf("children ok %d\n", ok);
    return 0;
}
"#;

/// A program whose signal handler opens a file every millisecond while
/// `main` forks, 1000 times.
const FORK_SIGNAL_C: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
static volatile int opened;
static void on_alarm(int s) { (void)s; int fd = open("a.txt", O_RDONLY); if (fd >= 0) { close(fd); opened++; } }
int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, 0);
    for (int k = 0; k < 1000; k++) {
        pid_t p = fork();
        if (p == 0) _exit(0);
        while (waitpid(p, 0, 0) < 0) {}
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    printf("forked 1000, opened %s\n", opened > 0 ? "some" : "none");
    return 0;
}
"#;

/// A signal handler that opens a file while the program forks no longer
/// hangs it: the library held its table's lock across `fork`, and the
/// handler's `open` (async-signal-safe) waited for it for ever. Signals are
/// now blocked on the forking thread while the lock is held.
#[test]
fn ferry_run_signal_handlers_that_open_files_during_fork_never_hang() {
    if !have_cc("ferry_run_signal_handlers_that_open_files_during_fork_never_hang") {
        return;
    }
    let dir = scratch("forksig");
    std::fs::write(dir.join("fs.c"), FORK_SIGNAL_C).unwrap();
    std::fs::write(dir.join("a.txt"), b"a").unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "forksig", "fs.c"]).current_dir(&dir).status().unwrap();
    assert!(built.success(), "cc failed");
    let d = dir.to_str().unwrap();
    let script = format!("cd {d} && for i in 1 2 3; do timeout 30 ./forksig || exit 1; done");
    let out = ferry_run(d, &["sh", "-c", &script]);
    assert!(out.status.success(), "the program hung or failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "forked 1000, opened some\n".repeat(3));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ferry_run_children_forked_while_threads_use_files_never_hang() {
    // A fork while another thread was setting the library up (its first
    // file call: under `ferry run` that includes asking for the server's
    // right) left the child waiting for ever on a set-up the absent thread
    // would have finished; so did a fork while another thread changed the
    // table of descriptors, or while another thread copied from an open
    // file's window (the child's read of that file waited for the
    // window's lock for ever).
    if !have_cc("ferry_run_children_forked_while_threads_use_files_never_hang") {
        return;
    }
    let dir = scratch("fork");
    std::fs::write(dir.join("fs.c"), FORK_STRESS_C).unwrap();
    std::fs::write(dir.join("fr.c"), FORK_READERS_C).unwrap();
    for (src, exe) in [("fs.c", "fs"), ("fr.c", "fr")] {
        let built = Command::new("cc").args(["-O2", "-pthread", "-o", exe, src]).current_dir(&dir).status().unwrap();
        assert!(built.success(), "cc failed");
    }
    let d = dir.to_str().unwrap();
    let script = format!("cd {d} && for i in 1 2 3 4 5; do timeout 30 ./fs || exit 1; done && for i in 1 2 3; do timeout 30 ./fr || exit 1; done");
    let out = ferry_run(d, &["sh", "-c", &script]);
    assert!(out.status.success(), "a child hung or failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "children ok 500\n".repeat(5) + &"children ok 300\n".repeat(3));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Once the served directory is moved away from its name (renamed, or
/// removed and made anew), names under that name are the kernel's, as
/// natively: the server resolves names from the directory it was given,
/// wherever it went, so `cat DIR/f` after `mv DIR DIR.moved` read the
/// moved file instead of failing, and files made in a new `DIR` went into
/// the moved one. A process that moves it back is served again.
#[test]
fn ferry_run_names_after_the_served_directory_moves_are_its_name_s_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os\n\
              D = os.environ['D']\n\
              def tr(what, f):\n\
              \x20   try: print(what, f())\n\
              \x20   except OSError as e: print(what, e.errno)\n\
              os.rename(D, D + '.2')\n\
              tr('moved', lambda: open(D + '/g').read())\n\
              tr('create', lambda: open(D + '/h', 'w').write('h'))\n\
              os.rename(D + '.2', D)\n\
              tr('back', lambda: open(D + '/g').read())\n\
              tr('create back', lambda: open(D + '/h', 'w').write('h'))\n";
    let script = format!(
        "echo old > f && cd / && mv \"$D\" \"$D.moved\" && cat \"$D/f\"; mkdir \"$D\" && echo new > \"$D/g\" && ls \"$D\" && cat \"$D/g\" && \
         ls \"$D.moved\" && python3 -c \"{py}\"; ls \"$D\"; rm -rf \"$D.moved\""
    );
    let (native, served) = native_and_served("rootmoved", &script, "ls; cat g");
    assert!(native.contains("No such file") && native.contains("moved 2\ncreate 2\nback new"), "{native}");
    assert_eq!(served, native);
}

/// Reads of many open files under a limit on the program's address space
/// (`ulimit -v`) succeed as natively: each open file read past its first
/// 64 KiB had a window of 1 MiB mapped, and once the windows had taken
/// the address space the program may use, reads failed with `ENOMEM`
/// (Python's `read` raised "Cannot allocate memory"). A window that cannot
/// be mapped leaves the read to the kernel (`pread`).
#[test]
fn ferry_run_reads_under_an_address_space_limit_succeed_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os\n\
              os.mkdir('m')\n\
              for i in range(400): open('m/f%d' % i, 'wb').write(bytes([i % 256]) * 100000)\n\
              fs = [open('m/f%d' % i, 'rb') for i in range(400)]\n\
              total = 0\n\
              for i, f in enumerate(fs):\n\
              \x20   a = f.read(70000); b = f.read()\n\
              \x20   total += len(a) + len(b)\n\
              \x20   assert a + b == bytes([i % 256]) * 100000\n\
              fds = [os.open('m/f%d' % i, os.O_RDONLY) for i in range(400)]\n\
              print(total, sum(len(os.pread(fd, 100000, 0)) + len(os.pread(fd, 10, 99995)) for fd in fds))\n";
    let script = format!("ulimit -v 250000 && python3 -c \"{py}\"");
    let (native, served) = native_and_served("aslimit", &script, "ls m | wc -l");
    assert!(native.contains("40000000 40002000"), "{native}");
    assert_eq!(served, native);
}

/// A program placing record locks relative to its offset: `lockf`, and
/// `fcntl` locks with `l_whence` `SEEK_CUR` (plain and open-file ones, set
/// and tested), after seeks and reads.
const LOCK_AT_OFFSET_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <sys/wait.h>
static void show(const char *what, int r, struct flock *l) {
    printf("%s %d %s type %d whence %d start %ld len %ld\n", what, r, r < 0 ? strerror(errno) : "", l->l_type, l->l_whence, (long)l->l_start, (long)l->l_len);
}
static void others_see(const char *when) {
    fflush(stdout);
    if (fork() == 0) {
        int fd = open("f", O_RDWR);
        for (off_t s = 0; s < 300; s += 5) {
            struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = s, .l_len = 1 };
            if (fcntl(fd, F_GETLK, &l) == 0 && l.l_type != F_UNLCK) printf("%s: %ld locked\n", when, (long)s);
        }
        fflush(stdout);
        _exit(0);
    }
    wait(NULL);
}
int main(void) {
    char buf[300];
    memset(buf, 'a', sizeof buf);
    int fd = open("f", O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(fd, buf, sizeof buf);
    lseek(fd, 100, SEEK_SET);
    printf("lockf %d\n", lockf(fd, F_TLOCK, 10));
    read(fd, buf, 50);
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_CUR, .l_start = 50, .l_len = 5 };
    show("setlk", fcntl(fd, F_SETLK, &l), &l);
    l = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_CUR, .l_start = -150, .l_len = 1 };
    show("getlk", fcntl(fd, F_GETLK, &l), &l);
    l = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_CUR, .l_start = -200, .l_len = 1 };
    show("before the start", fcntl(fd, F_GETLK, &l), &l);
    int two = open("f", O_RDWR);
    lseek(two, 250, SEEK_SET);
    l = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_CUR, .l_start = 0, .l_len = 10 };
    show("ofd setlk", fcntl(two, F_OFD_SETLK, &l), &l);
    int three = open("f", O_RDWR);
    read(three, buf, 260);
    l = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_CUR, .l_start = -5, .l_len = 1 };
    show("ofd getlk", fcntl(three, F_OFD_GETLK, &l), &l);
    l = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_CUR, .l_start = 20, .l_len = 1 };
    show("ofd getlk free", fcntl(three, F_OFD_GETLK, &l), &l);
    others_see("locked");
    lseek(fd, 105, SEEK_SET);
    printf("lockf test %d\n", lockf(fd, F_TEST, 10));
    printf("unlock %d\n", lockf(fd, F_ULOCK, 0));
    others_see("unlocked");
    return 0;
}
"#;

/// Record locks placed relative to the offset (`lockf`, `fcntl` with
/// `SEEK_CUR`) are placed from the open file's offset, as natively: the
/// kernel placed them from its own offset of the descriptor, which the
/// library does not move (the offset lives in the token page), so
/// `lockf` after a seek to 100 locked bytes 0 to 9, and a `SEEK_CUR` lock
/// reaching back before the kernel's offset failed with `EINVAL`.
#[test]
fn ferry_run_record_locks_relative_to_the_offset_are_placed_like_native() {
    if !have_cc("ferry_run_record_locks_relative_to_the_offset_are_placed_like_native") {
        return;
    }
    let src = scratch("lockcur-src");
    std::fs::write(src.join("l.c"), LOCK_AT_OFFSET_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "l", "l.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("l");
    let (native, served) = native_and_served("lockcur", exe.to_str().unwrap(), "ls");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("locked: 100 locked") && native.contains("ofd getlk 0  type 1 whence 0 start 250 len 10"), "{native}");
    assert_eq!(served, native);
}

/// Runs `sh -c script` in a fresh directory named by `$D` (its working
/// directory), natively and then under `ferry run --files $D` in the same
/// directory made afresh, and returns both outputs (standard output,
/// standard error and status, each with what `listing` prints after).
fn native_and_served(test: &str, script: &str, listing: &str) -> (String, String) {
    let dir = scratch(test);
    let d = dir.to_str().unwrap().to_owned();
    let run = |served: bool| {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = if served {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
            c.args(["run", "--files", &d, "--library"]).arg(library()).args(["--", "timeout", "60", "sh", "-c", script]);
            c
        } else {
            let mut c = Command::new("timeout");
            c.args(["60", "sh", "-c", script]);
            c
        };
        let out = cmd.env("D", &d).current_dir(&dir).output().unwrap();
        let after = Command::new("sh").args(["-c", listing]).env("D", &d).current_dir(&dir).output().unwrap();
        format!(
            "{}--- stderr\n{}--- {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            out.status,
            String::from_utf8_lossy(&after.stdout)
        )
    };
    let native = run(false);
    let served = run(true);
    let _ = std::fs::remove_dir_all(&dir);
    (native, served)
}

/// Names near PATH_MAX resolve as the kernel resolves them: a short name
/// relative to a working directory whose own name is some 4,000 bytes
/// long is the kernel's (sent to the server as one name beneath the root,
/// it was past PATH_MAX there and every call failed with ENAMETOOLONG, so
/// `mkdir -p` of a deep tree stopped half-way), and a name of PATH_MAX
/// bytes or more is refused as natively (cut short at the root, it was
/// served and the file made).
#[test]
fn ferry_run_names_near_path_max_resolve_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, errno\n\
              def tr(what, f):\n\
              \x20   try: f(); print(what, 'ok')\n\
              \x20   except OSError as e: print(what, errno.errorcode[e.errno])\n\
              seg = 'd' * 200\n\
              while len(os.getcwd()) < 3950:\n\
              \x20   os.mkdir(seg); os.chdir(seg)\n\
              name = 'e' * 200\n\
              tr('mkdir', lambda: os.mkdir(name))\n\
              tr('create', lambda: os.close(os.open(name + '/f', os.O_CREAT | os.O_WRONLY, 0o644)))\n\
              tr('write', lambda: open(name + '/f', 'w').write('x' * 10))\n\
              tr('stat', lambda: print(os.stat(name + '/f').st_size))\n\
              tr('rename', lambda: os.rename(name + '/f', name + '/g'))\n\
              tr('read', lambda: print(open(name + '/g').read()))\n\
              tr('unlink', lambda: os.unlink(name + '/g'))\n\
              tr('rmdir', lambda: os.rmdir(name))\n\
              far = os.getcwd() + '/' + 'x' * (4100 - len(os.getcwd()))\n\
              tr('create far', lambda: os.close(os.open(far, os.O_CREAT | os.O_WRONLY, 0o644)))\n\
              tr('mkdir far', lambda: os.mkdir(far))\n\
              tr('stat far', lambda: os.stat(far))\n";
    let deep = format!("a/{}", vec!["p".repeat(250); 18].join("/"));
    let script = format!("python3 -c \"{py}\" && mkdir -p {deep} && echo made $?");
    let (native, served) = native_and_served("pathmax", &script, "find . -type d | wc -l; find . -type f | wc -l");
    assert!(native.contains("mkdir ok") && native.contains("create far ENAMETOOLONG"), "{native}");
    assert_eq!(served, native);
}

/// A second open of a file the program holds POSIX record locks on keeps
/// them, as natively: the library used to take the file's descriptor where
/// it arrived from the server and move it above the program's numbers,
/// and closing the descriptor it arrived on dropped the process's locks
/// on the file. Another process then took a lock the program held, and
/// SQLite's second connection to a database let another process write
/// inside the first connection's exclusive transaction (whose commit then
/// failed with "disk I/O error").
#[test]
fn ferry_run_a_second_open_keeps_the_program_s_record_locks_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, sys, fcntl, sqlite3, subprocess\n\
              probe = 'import fcntl, os\\nfd = os.open(\\'f\\', os.O_RDWR)\\ntry:\\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print(\\'free\\')\\nexcept OSError: print(\\'held\\')'\n\
              def other(code): return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60).stdout.strip()\n\
              open('f', 'w').write('data')\n\
              fd = os.open('f', os.O_RDWR)\n\
              fcntl.lockf(fd, fcntl.LOCK_EX)\n\
              print('locked', other(probe))\n\
              fd2 = os.open('f', os.O_RDONLY)\n\
              print('second open', fd2 - fd, other(probe))\n\
              os.read(fd2, 2); os.write(fd, b'x')\n\
              print('read and write', other(probe))\n\
              a = sqlite3.connect('db', isolation_level=None, timeout=0)\n\
              a.execute('create table t(x)')\n\
              a.execute('begin exclusive'); a.execute('insert into t values(1)')\n\
              b = sqlite3.connect('db', timeout=0)\n\
              try: b.execute('select count(*) from t')\n\
              except sqlite3.OperationalError as e: print('second connection:', e)\n\
              w = 'import sqlite3\\nc = sqlite3.connect(\\'db\\', isolation_level=None, timeout=0)\\ntry:\\n    c.execute(\\'begin exclusive\\'); c.execute(\\'insert into t values(2)\\'); c.execute(\\'commit\\'); print(\\'wrote\\')\\nexcept sqlite3.OperationalError as e: print(e)'\n\
              print('other process:', other(w))\n\
              a.execute('commit')\n\
              print(a.execute('select * from t').fetchall(), a.execute('pragma integrity_check').fetchone())\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("relock", &script, "ls");
    assert!(native.contains("second open 1 held") && native.contains("other process: database is locked"), "{native}");
    assert_eq!(served, native);
}

/// `truncate` by name of a file the program holds POSIX record locks on
/// keeps them, as natively: the library cut the file by opening it through
/// the server and closing it again, and the close dropped the process's
/// locks on the file, so another process took a lock the program held.
/// The file is now cut through an open file the program already has.
#[test]
fn ferry_run_truncate_by_name_keeps_the_program_s_record_locks_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, sys, fcntl, subprocess\n\
              probe = 'import fcntl, os\\nfd = os.open(\\'f\\', os.O_RDWR)\\ntry:\\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print(\\'free\\')\\nexcept OSError: print(\\'held\\')'\n\
              def other(): return subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=60).stdout.strip()\n\
              open('f', 'w').write('0123456789')\n\
              fd = os.open('f', os.O_RDWR)\n\
              fcntl.lockf(fd, fcntl.LOCK_EX)\n\
              print('locked', other())\n\
              os.truncate('f', 4)\n\
              print('truncated', os.path.getsize('f'), other())\n\
              os.truncate('f', 8); os.lseek(fd, 0, 0)\n\
              print('grown', os.read(fd, 20), other())\n\
              os.chmod('f', 0o444)\n\
              try: os.truncate('f', 2)\n\
              except OSError as e: print('read-only', e.errno)\n\
              print(os.path.getsize('f'))\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("trunclock", &script, "ls");
    assert!(native.contains("truncated 4 held"), "{native}");
    assert_eq!(served, native);
}

/// A truncation that would grow a file past the program's file size limit
/// (`ulimit -f`, `RLIMIT_FSIZE`) fails with `EFBIG` and raises `SIGXFSZ`,
/// as natively, by descriptor and by name, while one that shrinks the file
/// or stays within the limit is made, and the kernel's earlier refusals
/// (a descriptor open only for reading, a missing name) come first. The
/// server, which makes the cut and runs under limits of its own, grew the
/// file to any length: `truncate -s 1M f` under `ulimit -f 20` succeeded.
#[test]
fn ferry_run_truncation_past_the_file_size_limit_fails_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, signal, resource\n\
              signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGXFSZ])\n\
              resource.setrlimit(resource.RLIMIT_FSIZE, (10000, resource.RLIM_INFINITY))\n\
              def t(what, call):\n\
              \x20   try: call(); r = 'ok'\n\
              \x20   except OSError as e: r = e.errno\n\
              \x20   raised = signal.SIGXFSZ in signal.sigpending()\n\
              \x20   if raised: signal.sigwait([signal.SIGXFSZ])\n\
              \x20   print(what, r, raised, os.path.getsize('f'))\n\
              fd = os.open('f', os.O_RDWR)\n\
              ro = os.open('f', os.O_RDONLY)\n\
              t('fd grow past', lambda: os.ftruncate(fd, 20000))\n\
              t('fd grow to', lambda: os.ftruncate(fd, 10000))\n\
              t('fd one past', lambda: os.ftruncate(fd, 10001))\n\
              t('name grow past', lambda: os.truncate('f', 30000))\n\
              t('fd shrink', lambda: os.ftruncate(fd, 100))\n\
              t('read-only past', lambda: os.ftruncate(ro, 20000))\n\
              t('missing past', lambda: os.truncate('missing', 20000))\n\
              t('name within', lambda: os.truncate('f', 5000))\n\
              os.write(os.open('big', os.O_WRONLY | os.O_CREAT), b'b' * 9000)\n\
              resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n\
              t('name shrink above the limit', lambda: os.truncate('big', 8000))\n\
              t('name same above the limit', lambda: os.truncate('big', 8000))\n";
    let script = format!("echo 0123456789 > f && python3 -c \"{py}\"; (ulimit -f 20; truncate -s 1M f); echo truncate $?; wc -c < f; wc -c < big");
    let (native, served) = native_and_served("fsizelimit", &script, "ls");
    assert!(native.contains("fd grow past 27 True 11"), "{native}");
    assert_eq!(served, native);
}

/// A program run as another user than the server's (here uid 65534 under a
/// server run by root) reaches the files its supplementary groups open to
/// it, and no more, as natively: the server acted as the asker's uid and
/// primary gid only, and `cat`, `>>` and `touch` of group-shared files were
/// refused ("Permission denied"). The groups are those the kernel reports
/// for the process that made the socket the answer goes on.
#[test]
fn ferry_run_another_user_s_supplementary_groups_count_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv {
        eprintln!("skipped ferry_run_another_user_s_supplementary_groups_count_like_native: needs root and setpriv");
        return;
    }
    let script = "echo shared > g && chown 0:4321 g && chmod 660 g && mkdir gd && chown 0:4321 gd && chmod 770 gd && \
                  echo in > gd/f && chown 0:4321 gd/f && chmod 660 gd/f && echo mine > o && chmod 600 o && \
                  setpriv --reuid=65534 --regid=65534 --groups=4321 sh -c 'cat g; echo more >> g; cat gd/f; ls gd; touch gd/new; cat o; echo in-group $?' 2>&1; \
                  setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'cat g; echo more >> g; cat gd/f; touch gd/new2; echo no-group $?' 2>&1";
    let (native, served) = native_and_served("groups", script, "stat -c '%n %s %u %g' g gd/*");
    assert!(native.contains("shared\nin\nf\n") && native.contains("g 12 0 4321") && native.contains("in-group 1") && native.contains("no-group 1"), "{native}");
    assert_eq!(served, native);
}

/// A program run as another user than the server's lists no directory it
/// may not read, and searches none it may not search, as natively
/// (`EACCES`): opens with `O_DIRECTORY` (`ls`'s, `find`'s) are served,
/// by a server that may open every directory, and the descriptor it
/// hands over lists the directory without a further check.
#[test]
fn ferry_run_another_user_lists_no_directory_it_may_not_read_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv {
        eprintln!("skipped ferry_run_another_user_lists_no_directory_it_may_not_read_like_native: needs root and setpriv");
        return;
    }
    let script = "mkdir priv && echo s > priv/secret && chmod 700 priv && mkdir x && echo k > x/known && chmod 644 x/known && chmod 711 x && \
                  mkdir w && chmod 733 w && chmod 755 . && \
                  setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'ls priv; echo ls-priv $?; find priv; echo find-priv $?; \
                  ls x; echo ls-x $?; cat x/known; ls -d x; (cd x && ls); echo cd-x $?; ls w; echo ls-w $?; find . -name secret; echo find-all $?' 2>&1";
    let (native, served) = native_and_served("unreadable-dirs", script, "ls -ln | cut -d' ' -f1,3,4,9");
    assert!(native.contains("ls-priv 2") && native.contains("ls-x 2") && native.contains("k\n") && !native.contains("secret\n"), "{native}");
    assert_eq!(served, native);
}

/// A program run as another user than the server's, which may not search
/// a directory above the served one, reaches no file under it, as
/// natively (`EACCES`): the server resolved names from the directory it
/// was given, checking only the directories beneath it, so such a user
/// read, wrote and created files there. The same program moved to a
/// directory it may search is served as before.
#[test]
fn ferry_run_another_user_who_may_not_reach_the_served_directory_is_refused_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv {
        eprintln!("skipped ferry_run_another_user_who_may_not_reach_the_served_directory_is_refused_like_native: needs root and setpriv");
        return;
    }
    let top = scratch("unreachable");
    let served = top.join("closed/d");
    let d = served.to_str().unwrap().to_owned();
    let script = format!(
        "setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'cat {d}/f; echo more >> {d}/f; touch {d}/new; ls {d}; echo closed $?' 2>&1; \
         chmod 755 {d}/..; setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'cat {d}/f; echo more >> {d}/f; touch {d}/new; echo open $?' 2>&1; \
         chmod 700 {d}/..; cat {d}/f; ls {d}"
    );
    let run = |under: bool| {
        let _ = std::fs::remove_dir_all(top.join("closed"));
        std::fs::create_dir_all(&served).unwrap();
        std::fs::write(served.join("f"), b"hi\n").unwrap();
        Command::new("chmod").args(["666", &format!("{d}/f")]).status().unwrap();
        Command::new("chmod").args(["777", &d]).status().unwrap();
        Command::new("chmod").args(["700", &format!("{d}/..")]).status().unwrap();
        let out = if under { ferry_run(&d, &["sh", "-c", &script]) } else { Command::new("sh").args(["-c", &script]).output().unwrap() };
        format!("{}--- {}", String::from_utf8_lossy(&out.stdout).replace("Permission denied", "EACCES"), out.status)
    };
    let native = run(false);
    let under = run(true);
    let _ = std::fs::remove_dir_all(&top);
    assert!(native.contains("closed 2") && native.contains("open 0"), "{native}");
    assert_eq!(under, native);
}

/// A program in a user namespace of its own (`unshare -r`, as an
/// unprivileged user) holds capabilities there that give it nothing over
/// the files of users the namespace does not map, as natively: the server
/// (run by root) read the capabilities the kernel reports for it and acted
/// with them, so such a user read and overwrote root's private files.
#[test]
fn ferry_run_a_program_in_a_user_namespace_of_its_own_gains_no_capability_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let can = Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-r", "true"]).status().is_ok_and(|s| s.success());
    if !root || !can {
        eprintln!("skipped ferry_run_a_program_in_a_user_namespace_of_its_own_gains_no_capability_like_native: needs root, setpriv and user namespaces");
        return;
    }
    let script = "echo secret > s && chmod 600 s && echo mine > m && chown 65534:65534 m && chmod 000 m && chmod 777 . && \
                  setpriv --reuid=65534 --regid=65534 --clear-groups unshare -r sh -c 'cat s; echo over > s; cat m; echo mine2 > m; echo new > n; ls -n n | cut -d\" \" -f3; mkdir dd; echo ns $?' 2>&1; cat s";
    let (native, served) = native_and_served("userns", script, "ls -ln | cut -d' ' -f1,3,4,9");
    assert!(native.contains("Permission denied") && native.contains("secret"), "{native}");
    assert_eq!(served, native);
}

/// Under a server not run by root, a program in a user namespace of its
/// own (`unshare -r`) is root there, with capabilities over its own
/// user's files, as natively: it reads its file of mode 000. Served as its
/// user with no capability, it was refused.
#[test]
fn ferry_run_a_program_in_a_user_namespace_keeps_its_capabilities_there_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let can = Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-r", "true"]).status().is_ok_and(|s| s.success());
    if !root || !can {
        eprintln!("skipped ferry_run_a_program_in_a_user_namespace_keeps_its_capabilities_there_like_native: needs root, setpriv and user namespaces");
        return;
    }
    let dir = scratch("userns-own");
    let d = dir.to_str().unwrap().to_owned();
    let script = format!("unshare -r sh -c 'cat {d}/m; echo again > {d}/m; cat {d}/m; chmod 600 {d}/m; echo ns $?' 2>&1; stat -c %a {d}/m");
    let run = |under: bool| {
        std::fs::write(dir.join("m"), b"mine\n").unwrap();
        Command::new("chown").args(["-R", "65534:65534", &d]).status().unwrap();
        Command::new("chmod").args(["000", &format!("{d}/m")]).status().unwrap();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        if under {
            cmd.arg(ferry_for_other_users()).args(["run", "--files", &d, "--library"]).arg(library()).arg("--");
        }
        let out = cmd.args(["sh", "-c", &script]).env("HOME", &d).output().unwrap();
        format!("{}{}--- {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr), out.status)
    };
    let native = run(false);
    let served = run(true);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(native.contains("mine\nagain\nns 0\n600"), "{native}");
    assert_eq!(served, native);
}

/// A program run as root that takes another user's effective ids to act
/// for that user (`setegid`, `seteuid`, as daemons do before touching a
/// user's files) is served as that user, as the kernel checks it
/// natively: calls named the real ids, and it read, wrote, created and
/// removed root's files under the served directory as root. Back to root,
/// it is root again.
#[test]
fn ferry_run_a_program_acting_as_another_user_by_effective_ids_is_served_as_that_user() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    if !root || !have_python() {
        eprintln!("skipped ferry_run_a_program_acting_as_another_user_by_effective_ids_is_served_as_that_user: needs root");
        return;
    }
    let py = "import os, errno\n\
              def tr(what, f):\n\
              \x20   try: f(); print(what, 'ok')\n\
              \x20   except OSError as e: print(what, errno.errorcode[e.errno])\n\
              open('s', 'w').write('secret'); os.chmod('s', 0o600)\n\
              tr('root read', lambda: open('s').read())\n\
              os.setegid(65534); os.seteuid(65534)\n\
              tr('read', lambda: open('s').read())\n\
              tr('append', lambda: open('s', 'a').write('x'))\n\
              tr('create', lambda: open('new', 'w').write('x'))\n\
              tr('mkdir', lambda: os.mkdir('d'))\n\
              tr('unlink', lambda: os.unlink('s'))\n\
              os.seteuid(0); os.setegid(0)\n\
              tr('root again', lambda: open('s').read())\n\
              tr('root create', lambda: open('mine', 'w').write('x'))\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("seteuid", &script, "stat -c '%n %s %u' * | sort");
    assert!(native.contains("read EACCES") && native.contains("root again ok"), "{native}");
    assert_eq!(served, native);
}

/// A program that lowers its own limit on descriptors below the library's
/// high numbers (`ulimit -n 64` in a shell) keeps its numbers: the
/// library's descriptors for the files it opens go to the top quarter of
/// the limit as it is now. They stayed where the server's answer left
/// them, among the program's low numbers: a shell's `exec 12>file` found
/// one of the library's there, saved it and put it back, and writes to 12
/// went to the library's socket, not the file ("Bad file descriptor" for
/// others).
#[test]
fn ferry_run_a_limit_lowered_by_the_program_keeps_its_descriptor_numbers_like_native() {
    let script = "bash <<'EOS'\nulimit -n 64; for i in 10 11 12 13 14 15 16; do eval \"exec $i>f$i\"; done\n\
                  for i in 10 11 12 13 14 15 16; do echo \"to $i\" >&$i; done; cat f1*\nEOS\n";
    let (native, served) = native_and_served("lowered", script, "wc -c f1* | tail -1");
    assert!(native.contains("to 16\n--- stderr\n--- exit status: 0"), "{native}");
    assert_eq!(served, native);
}

/// An open file's flags as `fcntl(F_GETFL)` shows them are the ones the
/// program asked for: a file the server created showed `O_NOFOLLOW`, and
/// a directory opened without `O_DIRECTORY` showed it (and one opened with
/// `O_NOATIME` did not show that). Reopening each through `/proc/self/fd`
/// with the flags shown works as natively.
#[test]
fn ferry_run_open_file_flags_are_the_program_s_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, fcntl, errno\n\
              os.mkdir('d'); open('f', 'w').write('x')\n\
              for p, fl in [('new', os.O_WRONLY | os.O_CREAT | os.O_TRUNC), ('new2', os.O_RDWR | os.O_CREAT | os.O_EXCL), ('f', os.O_WRONLY | os.O_CREAT),\n\
              \x20             ('d', os.O_RDONLY), ('d', os.O_RDONLY | os.O_DIRECTORY), ('d', os.O_RDONLY | os.O_NOATIME)]:\n\
              \x20   fd = os.open(p, fl, 0o644)\n\
              \x20   got = fcntl.fcntl(fd, fcntl.F_GETFL)\n\
              \x20   try: os.close(os.open('/proc/self/fd/%d' % fd, got)); again = 'ok'\n\
              \x20   except OSError as e: again = errno.errorcode[e.errno]\n\
              \x20   print(p, oct(fl), oct(got), again); os.close(fd)\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("getfl", &script, "ls");
    assert!(native.contains("new 0o1101 0o100001 ok"), "{native}");
    assert_eq!(served, native);
}

/// Reads of a file opened with `O_DIRECT` (or switched to it with
/// `fcntl(F_SETFL)`) are the kernel's, which refuses one of a length or at
/// an offset the file system cannot serve without its page cache
/// (`EINVAL`): every read after the first was copied from a window and
/// succeeded.
#[test]
fn ferry_run_direct_io_reads_are_checked_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, mmap, fcntl, errno\n\
              open('f', 'w').write('x' * 200000)\n\
              def tr(what, f):\n\
              \x20   try: r = f(); print(what, 'ok', r)\n\
              \x20   except OSError as e: print(what, errno.errorcode[e.errno])\n\
              try: fd = os.open('f', os.O_RDONLY | os.O_DIRECT)\n\
              except OSError as e: print('no O_DIRECT here', e.errno); raise SystemExit\n\
              buf = mmap.mmap(-1, 8192)\n\
              for i in range(2):\n\
              \x20   tr('read 100', lambda: len(os.read(fd, 100)))\n\
              \x20   tr('pread 100 at 3', lambda: len(os.pread(fd, 100, 3)))\n\
              \x20   tr('aligned at 0', lambda: os.preadv(fd, [buf], 0))\n\
              \x20   tr('aligned at 4096', lambda: os.preadv(fd, [buf], 4096))\n\
              \x20   tr('aligned at the end', lambda: os.preadv(fd, [buf], 196608))\n\
              fl = fcntl.fcntl(fd, fcntl.F_GETFL)\n\
              fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_DIRECT)\n\
              tr('buffered pread 100 at 3', lambda: len(os.pread(fd, 100, 3)))\n\
              fcntl.fcntl(fd, fcntl.F_SETFL, fl)\n\
              tr('direct again', lambda: len(os.pread(fd, 100, 3)))\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("direct", &script, "ls");
    assert_eq!(served, native);
}

/// A program that opens a file and then becomes another user (`setuid`,
/// or `seteuid` for a while, as daemons do after opening their logs) goes
/// on using the open file as natively: the server refused another user's
/// requests for it (the token, a truncation, a flush) with `EBADF`, so
/// reads and writes failed once another process had used the file. The
/// server now serves them when the asking process holds the open file.
#[test]
fn ferry_run_a_program_that_changes_user_keeps_its_open_files_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    if !root || !have_python() {
        eprintln!("skipped ferry_run_a_program_that_changes_user_keeps_its_open_files_like_native: needs root and python3");
        return;
    }
    let py = "import os, errno, sys\n\
              def tr(what, f):\n\
              \x20   try: print(what, 'ok', f())\n\
              \x20   except OSError as e: print(what, errno.errorcode[e.errno])\n\
              for mode in ['seteuid', 'setuid']:\n\
              \x20   open(mode, 'w').write('0123456789' * 1000); os.chmod(mode, 0o600)\n\
              \x20   fd = os.open(mode, os.O_RDWR)\n\
              \x20   os.read(fd, 10)\n\
              \x20   if os.fork() == 0:\n\
              \x20       os.read(fd, 10); os.write(fd, b'child'); os._exit(0)\n\
              \x20   os.wait()\n\
              \x20   if os.fork() == 0:\n\
              \x20       if mode == 'seteuid': os.seteuid(65534)\n\
              \x20       else: os.setgid(65534); os.setuid(65534)\n\
              \x20       tr('read', lambda: os.read(fd, 10))\n\
              \x20       tr('write', lambda: os.write(fd, b'x'))\n\
              \x20       tr('pread', lambda: os.pread(fd, 5, 0))\n\
              \x20       tr('ftruncate', lambda: os.ftruncate(fd, 50))\n\
              \x20       tr('fsync', lambda: os.fsync(fd))\n\
              \x20       tr('open again', lambda: os.open(mode, os.O_RDONLY))\n\
              \x20       sys.stdout.flush(); os._exit(0)\n\
              \x20   os.wait()\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("userchange", &script, "stat -c '%n %s' seteuid setuid");
    assert!(native.contains("read ok b'5678901234'") && native.contains("open again EACCES"), "{native}");
    assert_eq!(served, native);
}

/// An existing file opened with `O_CREAT` in a sticky directory others
/// may write to is refused as natively when neither the directory's owner
/// nor the opener owns it (`fs.protected_regular`, set to 1 for the test
/// and put back after), root included: the server reopens a file it found
/// without `O_CREAT`, so the kernel's check never ran and a program
/// appending to what it thought its own file wrote into one another user
/// had put in its way.
#[test]
fn ferry_run_files_of_others_in_sticky_directories_are_protected_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    const SETTING: &str = "/proc/sys/fs/protected_regular";
    let Ok(was) = std::fs::read_to_string(SETTING) else {
        eprintln!("skipped ferry_run_files_of_others_in_sticky_directories_are_protected_like_native: no {SETTING}");
        return;
    };
    if !root || std::fs::write(SETTING, "1").is_err() {
        eprintln!("skipped ferry_run_files_of_others_in_sticky_directories_are_protected_like_native: needs root to set {SETTING}");
        return;
    }
    /// Puts the setting back however the test ends.
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write("/proc/sys/fs/protected_regular", self.0.trim());
        }
    }
    let _restore = Restore(was);
    let script = "mkdir s && chmod 1777 s && echo theirs > s/f && chown 65534:65534 s/f && echo mine > s/m && ln -s f s/l && \
                  (echo x >> s/f; echo append-theirs $?) 2>&1; (echo y >> s/m; echo append-mine $?) 2>&1; \
                  (echo z >> s/l; echo through-link $?) 2>&1; (cat s/f >/dev/null; echo read-theirs $?) 2>&1; \
                  (echo w > s/new; echo create $?) 2>&1";
    let (native, served) = native_and_served("sticky", script, "cat s/f s/m s/new");
    assert!(native.contains("append-theirs 2") && native.contains("append-mine 0") && native.contains("read-theirs 0"), "{native}");
    assert_eq!(served, native);
}

/// After `chroot`, names are the new root's, as natively: the library
/// went on matching them against the served directory's name and serving
/// them from the old root, so a program that had moved into a jail
/// holding a directory of the same name read the served file instead of
/// the jail's and created its files outside the jail. Descriptors opened
/// before stay served.
#[test]
fn ferry_run_names_after_chroot_are_the_new_root_s_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    if !root || !have_python() {
        eprintln!("skipped ferry_run_names_after_chroot_are_the_new_root_s_like_native: needs root");
        return;
    }
    let py = "import os, errno\n\
              def tr(what, f):\n\
              \x20   try: print(what, f())\n\
              \x20   except OSError as e: print(what, errno.errorcode[e.errno])\n\
              D = os.environ['D']\n\
              open('f', 'w').write('outside'); open('g', 'w').write('only outside')\n\
              os.makedirs('jail' + D); open('jail' + D + '/f', 'w').write('inside')\n\
              fd = os.open('f', os.O_RDWR)\n\
              os.chroot('jail'); os.chdir('/')\n\
              tr('read', lambda: open(D + '/f').read())\n\
              tr('stat', lambda: os.stat(D + '/g').st_size)\n\
              tr('create', lambda: open(D + '/new', 'w').write('n'))\n\
              tr('mkdir', lambda: os.mkdir(D + '/dir'))\n\
              tr('rename', lambda: os.rename(D + '/new', D + '/dir/new'))\n\
              tr('unlink', lambda: os.unlink(D + '/f'))\n\
              tr('held', lambda: os.read(fd, 100))\n\
              tr('write held', lambda: os.write(fd, b'!'))\n\
              os.chdir(D)\n\
              tr('relative', lambda: sorted(os.listdir('.')))\n\
              tr('truncate', lambda: os.truncate('dir/new', 0))\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("chroot", &script, "find . | sort; cat f");
    assert!(native.contains("read inside") && native.contains("stat ENOENT") && native.contains("./jail/"), "{native}");
    assert_eq!(served, native);
}

/// In a mount namespace of its own, a program's names are that
/// namespace's, as natively: the server resolves names in its own, so a
/// file system the program mounted under the served directory (after
/// `unshare -m`, or its own `unshare(CLONE_NEWNS)`) was not seen: files
/// written there went to the directory beneath the mount, and the
/// directory's old files were still read through it. Descriptors opened
/// before stay served.
#[test]
fn ferry_run_names_in_a_mount_namespace_of_the_program_s_own_are_its_own_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let can = Command::new("unshare").args(["-m", "sh", "-c", "mount -t tmpfs none /mnt"]).output().is_ok_and(|o| o.status.success());
    if !root || !can || !have_python() {
        eprintln!("skipped ferry_run_names_in_a_mount_namespace_of_the_program_s_own_are_its_own_like_native: needs root, unshare and tmpfs");
        return;
    }
    let py = "import os, errno, ctypes, subprocess\n\
              def tr(what, f):\n\
              \x20   try: print(what, f())\n\
              \x20   except OSError as e: print(what, errno.errorcode[e.errno])\n\
              fd = os.open('in/u', os.O_RDWR)\n\
              libc = ctypes.CDLL(None, use_errno=True)\n\
              print('unshare', libc.unshare(0x20000))\n\
              subprocess.run(['mount', '--make-rprivate', '/'], check=True)\n\
              subprocess.run(['mount', '-t', 'tmpfs', 'none', 'in'], check=True)\n\
              tr('old', lambda: open('in/u').read())\n\
              tr('create', lambda: open('in/g', 'w').write('g'))\n\
              tr('list', lambda: sorted(os.listdir('in')))\n\
              tr('stat', lambda: os.stat('in/g').st_size)\n\
              tr('held', lambda: os.read(fd, 100))\n\
              tr('write held', lambda: os.write(fd, b'!'))\n";
    let script = format!(
        "mkdir sub in && echo under > sub/u && echo under > in/u && \
         unshare -m sh -c 'mount -t tmpfs none \"$D/sub\" && echo x > \"$D/sub/f\" && ls \"$D/sub\"; cat sub/f; cat \"$D/sub/u\"'; \
         ls sub; unshare -m python3 -c \"{py}\"; ls in"
    );
    let (native, served) = native_and_served("mountns", &script, "find . | sort; cat in/u");
    assert!(native.contains("old ENOENT") && native.contains("list ['g']"), "{native}");
    assert_eq!(served, native);
}

/// `O_NOFOLLOW` and `O_ASYNC` stay in an open file's flags as
/// `fcntl(F_GETFL)` shows them, as natively: the server opened an existing
/// file or directory again through its `/proc/self/fd` name, which takes
/// no `O_NOFOLLOW`, and kept neither flag (`0o100000` where natively
/// `0o500000`). Reopening each through `/proc/self/fd` works as natively,
/// and a link opened with `O_NOFOLLOW` still fails.
#[test]
fn ferry_run_open_files_keep_o_nofollow_and_o_async_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, fcntl, errno\n\
              os.mkdir('d'); open('f', 'w').write('x'); os.symlink('f', 'l')\n\
              A = getattr(os, 'O_ASYNC', 0o20000)\n\
              for p, fl in [('f', os.O_RDONLY | os.O_NOFOLLOW), ('f', os.O_RDWR | os.O_NOFOLLOW | os.O_APPEND), ('f', os.O_WRONLY | A),\n\
              \x20             ('f', os.O_RDONLY | A | os.O_NOFOLLOW), ('d', os.O_RDONLY | os.O_NOFOLLOW), ('d', os.O_RDONLY | os.O_DIRECTORY | A),\n\
              \x20             ('f', os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW), ('n', os.O_WRONLY | os.O_CREAT | A), ('n2', os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | A),\n\
              \x20             ('l', os.O_RDONLY | os.O_NOFOLLOW), ('f', os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW), ('f', os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)]:\n\
              \x20   try: fd = os.open(p, fl, 0o644)\n\
              \x20   except OSError as e: print(p, oct(fl), errno.errorcode[e.errno]); continue\n\
              \x20   got = fcntl.fcntl(fd, fcntl.F_GETFL)\n\
              \x20   try: os.close(os.open('/proc/self/fd/%d' % fd, got & ~os.O_NOFOLLOW)); again = 'ok'\n\
              \x20   except OSError as e: again = errno.errorcode[e.errno]\n\
              \x20   print(p, oct(fl), oct(got), again, os.fstat(fd).st_size); os.close(fd)\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("nofollow", &script, "ls");
    assert!(native.contains("f 0o400000 0o500000 ok") && native.contains("l 0o400000 ELOOP"), "{native}");
    assert_eq!(served, native);
}

/// `truncate` by name of a file the program has open only for reading,
/// with a read lock on it, keeps the lock, as natively: the library cut the
/// file by opening it for writing through the server and closing it
/// again, and closing any descriptor of a file drops the process's POSIX
/// record locks on it (another process then saw the file unlocked). The
/// server now cuts the file by name, and the process never holds a
/// descriptor to close. Errors (a file the program may not write, a
/// negative length, no such file, a directory) are the kernel's.
#[test]
fn ferry_run_truncate_by_name_of_a_file_open_for_reading_keeps_its_locks_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, sys, fcntl, struct, subprocess\n\
              probe = 'import fcntl, os, struct\\nfd = os.open(\\'f\\', os.O_RDONLY)\\nr = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(\\'hhqqi\\', fcntl.F_WRLCK, 0, 0, 0, 0))\\nprint(\\'held\\' if struct.unpack(\\'hhqqi\\', r)[0] != fcntl.F_UNLCK else \\'free\\')'\n\
              def other(): return subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=60).stdout.strip()\n\
              def tr(what, f):\n\
              \x20   try: f(); print(what, 'ok')\n\
              \x20   except OSError as e: print(what, e.errno)\n\
              open('f', 'w').write('0123456789')\n\
              fd = os.open('f', os.O_RDONLY)\n\
              fcntl.lockf(fd, fcntl.LOCK_SH)\n\
              print('locked', other())\n\
              os.truncate('f', 4)\n\
              print('truncated', os.path.getsize('f'), os.pread(fd, 20, 0), other())\n\
              os.truncate('f', 8)\n\
              print('grown', os.pread(fd, 20, 0), other())\n\
              tr('negative', lambda: os.truncate('f', -1))\n\
              tr('negative missing', lambda: os.truncate('nope', -1))\n\
              tr('missing', lambda: os.truncate('nope', 1))\n\
              os.mkdir('d')\n\
              tr('directory', lambda: os.truncate('d', 1))\n\
              os.mkfifo('p')\n\
              tr('fifo', lambda: os.truncate('p', 1))\n\
              os.chmod('f', 0o444)\n\
              tr('read-only', lambda: os.truncate('f', 2))\n\
              print(os.path.getsize('f'), other())\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("truncread", &script, "ls; wc -c f");
    assert!(native.contains("truncated 4 b'0123' held") && native.contains("missing 2"), "{native}");
    assert_eq!(served, native);
}

/// What `inotify` reports of a program's calls under the served directory
/// is what it reports natively: `truncate` by name is one modification,
/// where the server, which opened the file for writing to cut it, made it
/// an open, a modification and a close for writing as well (a program
/// watching the directory saw a file it never opened written and closed).
#[test]
fn ferry_run_inotify_sees_the_program_s_calls_like_native() {
    if !have_python() {
        return;
    }
    let py = "import ctypes, os, struct\n\
              libc = ctypes.CDLL(None, use_errno=True)\n\
              fd = libc.inotify_init1(os.O_NONBLOCK)\n\
              os.mkdir('w')\n\
              libc.inotify_add_watch(fd, b'w', 0xfff)\n\
              def events(what):\n\
              \x20   try: buf = os.read(fd, 65536)\n\
              \x20   except BlockingIOError: buf = b''\n\
              \x20   i = 0; ev = []\n\
              \x20   while i < len(buf):\n\
              \x20       w, m, c, l = struct.unpack_from('iIII', buf, i); ev.append('%s:%s' % (hex(m), buf[i + 16:i + 16 + l].rstrip(bytes(1)).decode())); i += 16 + l\n\
              \x20   print(what, *ev)\n\
              fd2 = os.open('w/f', os.O_CREAT | os.O_RDWR, 0o644); events('create')\n\
              os.write(fd2, b'0123456789'); events('write')\n\
              os.close(fd2); events('close')\n\
              os.truncate('w/f', 4); events('truncate')\n\
              os.truncate('w/f', 8); events('grow')\n\
              os.chmod('w/f', 0o600); events('chmod')\n\
              fd3 = os.open('w/f', os.O_WRONLY | os.O_TRUNC); events('open trunc')\n\
              os.ftruncate(fd3, 3); events('ftruncate')\n\
              os.close(fd3); events('close w')\n\
              os.utime('w/f', (1, 1)); events('utime')\n\
              os.rename('w/f', 'w/g'); events('rename')\n\
              os.unlink('w/g'); events('unlink')\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("inotify", &script, "ls w");
    assert!(native.contains("truncate 0x2:f\n"), "{native}");
    assert_eq!(served, native);
}

/// Under a lowered limit on descriptors whose top quarter the library's
/// own descriptors have filled (two per open file: eight files under
/// `ulimit -n 64`), the program still gets the numbers it gets natively:
/// the library's next ones went to the lowest free numbers, which are the
/// program's next, so a shell's `exec {fd}>file` gave 22, 23, 26, 29
/// where natively 21, 22, 23, 24, and the programs it started opened at
/// other numbers too. They now go to the highest free numbers below the
/// top quarter.
#[test]
fn ferry_run_many_files_under_a_lowered_limit_keep_the_program_s_numbers_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os\n\
              fds = [os.open('p%d' % i, os.O_CREAT | os.O_WRONLY, 0o644) for i in range(5)]\n\
              print(fds)\n\
              for i, fd in enumerate(fds): os.write(fd, b'%d' % i)\n";
    let script = format!(
        "bash <<'EOS'\nulimit -n 64; for i in $(seq 10 23); do exec {{fd}}>f$i; echo -n \"$fd \"; echo $i >&$fd; done; echo\n\
         exec 5>g5; echo five >&5; python3 -c \"{py}\"; cat f1* f2* g5 p*; echo\nEOS\n"
    );
    let (native, served) = native_and_served("lowmany", &script, "ls | wc -l");
    // The numbers depend on what the test itself inherited (a harness may
    // leave a descriptor of its own at 10), so only their shape is checked
    // natively: fourteen numbers from 10 upwards, each above the last.
    let first: Vec<u32> = native.lines().next().unwrap_or("").split_whitespace().filter_map(|n| n.parse().ok()).collect();
    assert!(first.len() == 14 && first[0] >= 10 && first.windows(2).all(|w| w[0] < w[1]), "{native}");
    assert_eq!(served, native);
}

/// `fwscanf` on a stream opened under the served directory keeps the
/// process's POSIX record locks on the file, as natively: the library
/// scans through a stream of the C library's own over the same file, and
/// it closed that stream after each scan, which closed a descriptor of the
/// file and so dropped the process's locks on it (another process saw
/// the file unlocked). The stream is now kept until the program's closes.
#[test]
fn ferry_run_fwscanf_keeps_the_program_s_record_locks_like_native() {
    if !have_cc("ferry_run_fwscanf_keeps_the_program_s_record_locks_like_native") {
        return;
    }
    let script = r#"cat > ws.c <<'C'
#include <fcntl.h>
#include <locale.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wchar.h>
static const char *other(void) {
    pid_t p = fork();
    if (p == 0) {
        int fd = open("f", O_RDONLY);
        struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
        fcntl(fd, F_GETLK, &l);
        _exit(l.l_type == F_UNLCK ? 0 : 1);
    }
    int st;
    waitpid(p, &st, 0);
    return WEXITSTATUS(st) ? "held" : "free";
}
int main(void) {
    setlocale(LC_ALL, "C.UTF-8");
    FILE *w = fopen("f", "w"); fputs("12 h\xc3\xa9llo 34\n56 w\xc3\xb6rld 78\n", w); fclose(w);
    int fd = open("f", O_RDWR);
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    fcntl(fd, F_SETLK, &l);
    printf("locked %s\n", other());
    FILE *f = fopen("f", "r");
    int a = 0, b = 0; wchar_t s[32];
    int n = fwscanf(f, L"%d %ls %d", &a, s, &b);
    printf("scanned %d %d %ls %d %s\n", n, a, s, b, other());
    n = fwscanf(f, L"%d %ls %d", &a, s, &b);
    printf("again %d %d %ls %d %s\n", n, a, s, b, other());
    printf("at end %d %d %s\n", fwscanf(f, L"%d", &a), (int)fgetwc(f), other());
    f = freopen("f", "r", f);
    n = fwscanf(f, L"%d", &a);
    printf("reopened %d %d %s\n", n, a, other());
    fclose(f);
    printf("closed %s\n", other());
    return 0;
}
C
cc -o ws ws.c && ./ws"#;
    let (native, served) = native_and_served("fwscanf", script, "ls");
    assert!(native.contains("scanned 3 12 héllo 34 held") && native.contains("closed free"), "{native}");
    assert_eq!(served, native);
}

/// A child made by a raw `clone(CLONE_VM | CLONE_VFORK)` (no `fork`, so no
/// fork handler runs) shares its parent's memory, the library's table of
/// descriptors included, but has descriptors of its own: the files it
/// opened were recorded in its parent's table, and a pipe the parent made
/// later at the same number was taken for the child's file (its read
/// failed with `EBADF`). Such a child's opens are now the kernel's, and a
/// child that is the first to use the library leaves both unemulated.
#[test]
fn ferry_run_raw_clone_children_leave_the_parent_s_descriptors_alone_like_native() {
    if !have_cc("ferry_run_raw_clone_children_leave_the_parent_s_descriptors_alone_like_native") {
        return;
    }
    let script = r#"cat > cl.c <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static char stack[1 << 20];
static int child(void *name) {
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    write(fd, "child\n", 6);
    execlp("true", "true", (char *)0);
    _exit(127);
}
int main(int argc, char **argv) {
    if (argc > 1) {
        int pre = open("pre", O_WRONLY | O_CREAT, 0644);
        write(pre, "parent\n", 7);
    }
    pid_t p = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, "cf");
    int st;
    waitpid(p, &st, 0);
    int pfd[2];
    pipe(pfd);
    ssize_t n = write(pfd[1], "to the pipe\n", 12);
    char b[64] = {0};
    ssize_t m = read(pfd[0], b, 63);
    printf("pipe %d %d wrote %zd read %zd: %s", pfd[0], pfd[1], n, m, b);
    int g = open("cf", O_RDONLY);
    memset(b, 0, sizeof b);
    read(g, b, 63);
    printf("cf: %s", b);
    return 0;
}
C
cc -o cl cl.c && ./cl && ./cl first && cat pre"#;
    let (native, served) = native_and_served("rawclone", script, "ls");
    assert!(native.contains("read 12: to the pipe\ncf: child\n"), "{native}");
    assert_eq!(served, native);
}

/// A program run as root without some of root's capabilities (here
/// without `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER` and
/// `CAP_CHOWN`, as services are run) is refused what it is refused
/// natively: a server run by root served a root asker with all of its
/// own capabilities, so the program read and appended to another user's
/// file it may not touch, and created files in a directory closed to it.
#[test]
fn ferry_run_a_root_program_without_capabilities_is_served_without_them_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv {
        eprintln!("skipped ferry_run_a_root_program_without_capabilities_is_served_without_them_like_native: needs root and setpriv");
        return;
    }
    let script = "echo secret > f && chmod 000 f && chown 65534 f && mkdir -m 000 d && chown 65534 d && echo x > g && chown 65534 g && chmod 600 g && \
                  mkdir -m 700 p && chown 65534 p && echo in > p/h && chmod 644 p/h && echo mine > m && chmod 000 m && \
                  setpriv --bounding-set=-dac_override,-dac_read_search,-fowner,-chown --inh-caps=-dac_override,-dac_read_search,-fowner,-chown \
                  sh -c 'cat f; echo read $?; echo y >> g; echo append $?; ls d; echo list $?; touch d/x; echo create $?; cat p/h; echo search $?; \
                  cat m; echo own $?; chmod 600 m; echo chmod $?; mkdir d/e; echo mkdir $?; rm p/h; echo remove $?' 2>&1 | sed 's/^.*: //'";
    let (native, served) = native_and_served("caps", script, "ls -ln --time-style=+ | tail -n +2; ls d p");
    assert!(native.contains("read 1") && native.contains("chmod 0\n"), "{native}");
    assert_eq!(served, native);
}

/// A program run as root in other groups than the server's is served with
/// its own groups and gid, as natively: without `CAP_DAC_OVERRIDE` and
/// `CAP_DAC_READ_SEARCH`, a file its supplementary group may read is read,
/// and with none, it is refused; a file it makes is of its own gid. The
/// server acted for an asker of its own uid with its own groups and gid,
/// so the first was refused and the file made was of the server's gid.
#[test]
fn ferry_run_a_root_program_s_own_groups_count_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv {
        eprintln!("skipped ferry_run_a_root_program_s_own_groups_count_like_native: needs root and setpriv");
        return;
    }
    let script = "echo secret > f && chown 65534:4242 f && chmod 040 f && \
                  setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search --groups=4242 \
                  sh -c 'cat f; echo group $?' 2>&1 | sed 's/^.*: //'; \
                  setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search --clear-groups \
                  sh -c 'cat f; echo none $?' 2>&1 | sed 's/^.*: //'; \
                  setpriv --regid=4243 --clear-groups sh -c 'echo x > made; echo made $?'";
    let (native, served) = native_and_served("groups", script, "ls -ln --time-style=+ | tail -n +2");
    assert!(native.contains("secret\ngroup 0") && native.contains("none 1") && native.contains(" 4243 "), "{native}");
    assert_eq!(served, native);
}

/// A root program without `CAP_DAC_OVERRIDE` that drops a supplementary
/// group after its first file call (`setgroups`, as a daemon shedding
/// privileges does) is refused that group's files from then on, as
/// natively; given the group back it reads them again, and once it has
/// dropped the group and every capability, it stays refused. The server
/// took the groups the kernel recorded for the thread's channel when it
/// was made (`SO_PEERGROUPS`), and served the program with the dropped
/// group for as long as the thread lived: it read the file 3 times where
/// natively it was refused.
#[test]
fn ferry_run_a_program_that_drops_a_group_is_refused_that_groups_files_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv || !have_python() {
        eprintln!("skipped ferry_run_a_program_that_drops_a_group_is_refused_that_groups_files_like_native: needs root, setpriv and python3");
        return;
    }
    let py = "import ctypes, os\n\
              def cat(what):\n\
              \x20   try: print(what, open('f').read().strip())\n\
              \x20   except OSError as e: print(what, 'errno', e.errno)\n\
              print(open('o').read().strip())\n\
              cat('in-group')\n\
              os.setgroups([])\n\
              cat('dropped')\n\
              os.setgroups([4242])\n\
              cat('again')\n\
              os.setgroups([])\n\
              libc = ctypes.CDLL(None, use_errno=True)\n\
              print('capset', libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()))\n\
              cat('no-capabilities')\n\
              cat('still')\n";
    let script = format!(
        "echo secret > f && chown 65534:4242 f && chmod 040 f && echo open > o && \
         setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search --groups=4242 python3 -c \"{py}\" 2>&1"
    );
    let (native, served) = native_and_served("dropgroups", &script, "ls -ln --time-style=+ | tail -n +2");
    assert!(
        native.contains("in-group secret\ndropped errno 13\nagain secret\ncapset 0\nno-capabilities errno 13\nstill errno 13"),
        "{native}"
    );
    assert_eq!(served, native);
}

/// A program run as another user with capabilities of its own (ambient
/// `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH`, here) reads and writes
/// what they let it, as natively: the server acting as that user emptied
/// its own capabilities, and the program was refused root's file and a
/// directory closed to it ("Permission denied").
#[test]
fn ferry_run_another_user_s_capabilities_count_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv {
        eprintln!("skipped ferry_run_another_user_s_capabilities_count_like_native: needs root and setpriv");
        return;
    }
    let script = "echo secret > f && chmod 600 f && mkdir -m 700 d && echo in > d/g && \
                  setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=+dac_read_search,+dac_override --ambient-caps=+dac_read_search,+dac_override \
                  sh -c 'cat f; echo read $?; cat d/g; echo search $?; echo x >> f; echo append $?; touch d/new; echo create $?' 2>&1 | sed 's/^.*: //'; \
                  setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'cat f; echo without $?' 2>&1 | sed 's/^.*: //'";
    let (native, served) = native_and_served("ambient", script, "ls -ln --time-style=+ . d | grep -v total");
    assert!(native.contains("read 0") && native.contains("create 0") && native.contains("without 1"), "{native}");
    assert_eq!(served, native);
}

/// A second open of a directory the program holds a POSIX record lock on
/// keeps the lock, as natively: the library moved the directory's
/// descriptor from the number it arrived on, and again to the program's
/// number, and each close of a descriptor of the directory dropped the
/// process's locks on it (another process saw it unlocked). The
/// descriptor is now the program's where it arrived, as a file's is.
#[test]
fn ferry_run_a_second_open_of_a_directory_keeps_its_record_locks_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os, sys, fcntl, struct, subprocess\n\
              probe = 'import fcntl, os, struct\\nfd = os.open(\\'d\\', os.O_RDONLY)\\nr = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(\\'hhqqi\\', fcntl.F_WRLCK, 0, 0, 0, 0))\\nprint(\\'held\\' if struct.unpack(\\'hhqqi\\', r)[0] != fcntl.F_UNLCK else \\'free\\')'\n\
              def other(): return subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=60).stdout.strip()\n\
              os.mkdir('d')\n\
              fd = os.open('d', os.O_RDONLY)\n\
              fcntl.lockf(fd, fcntl.LOCK_SH)\n\
              print('locked', other())\n\
              fd2 = os.open('d', os.O_RDONLY)\n\
              print('second open', fd2 - fd, other(), bool(fcntl.fcntl(fd2, fcntl.F_GETFD) & fcntl.FD_CLOEXEC))\n\
              fd3 = os.open('d', os.O_RDONLY | os.O_CLOEXEC)\n\
              print('third open', fd3 - fd, other(), bool(fcntl.fcntl(fd3, fcntl.F_GETFD) & fcntl.FD_CLOEXEC))\n\
              os.close(fd3)\n\
              print('closed', other())\n";
    let script = format!("python3 -c \"{py}\"");
    let (native, served) = native_and_served("dirlock", &script, "ls");
    assert!(native.contains("second open 1 held") && native.contains("closed free"), "{native}");
    assert_eq!(served, native);
}

/// `ferry run` run by root never preloads another user's library into the
/// program. Unless told where the emulation library is, it took
/// `libferry_emul.so` beside itself or in `../lib`: with `ferry` in a
/// directory of root's inside one every user may write to
/// (`$TMPDIR/build/ferry`), uid nobody made `$TMPDIR/lib` with a library of its
/// own there, and root's program ran it as root. A library found, not
/// named, is now loaded only if no one else may change it.
#[test]
fn run_never_preloads_another_users_library() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("run_never_preloads_another_users_library: skipped (needs root to play another user)");
        return;
    }
    let base = std::env::temp_dir().join(format!("ferry-run-preload-squat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (shared, files) = (base.join("tmp"), base.join("files"));
    let build = shared.join("build");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ferry = build.join("ferry");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_ferry"), &ferry).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_ferry"), &ferry).unwrap();
    }
    // The other user's library: it says who loaded it.
    let marker = shared.join("loaded-as");
    let source = base.join("theirs.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void said(void) {{ FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fprintf(f, \"%d\\n\", (int) geteuid()); fclose(f); }} }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let built = base.join("theirs.so");
    let cc = Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&built).arg(&source).status();
    if !cc.is_ok_and(|s| s.success()) {
        eprintln!("run_never_preloads_another_users_library: skipped (no C compiler to build the other user's library)");
        let _ = std::fs::remove_dir_all(&base);
        return;
    }
    std::fs::set_permissions(&built, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The other user, a real process of uid nobody, puts it in place.
    let plant = format!("mkdir -m 777 {0}/lib && cp {1} {0}/lib/libferry_emul.so", shared.display(), built.display());
    let planted = Command::new("sh").args(["-c", &plant]).uid(65534).gid(65534).current_dir("/").status().unwrap();
    assert!(planted.success(), "the other user could not plant its library");
    let out = Command::new(&ferry)
        .args(["run", "--files"])
        .arg(&files)
        .args(["--", "/bin/true"])
        .env_remove("FERRY_EMUL_LIB")
        .output()
        .unwrap();
    let loaded = std::fs::read_to_string(&marker).ok();
    let _ = std::fs::remove_dir_all(&base);
    println!("the other user's library was loaded as uid: {loaded:?}; ferry run: {} {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    assert_eq!(loaded, None, "ferry run preloaded another user's library");
}

/// `truncate` by name from another user (uid nobody), of a file it may
/// write and of root's file it may only read, as natively: the server
/// cuts a file by name as the asker, with the asker's permission checks,
/// so the second is refused and root's file keeps its bytes.
#[test]
fn ferry_run_another_user_s_truncate_by_name_is_checked_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    // The system's Python: another user may not reach one installed for root.
    if !root || !setpriv || !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped ferry_run_another_user_s_truncate_by_name_is_checked_like_native: needs root, setpriv and /usr/bin/python3");
        return;
    }
    let py = "import os, errno\n\
              for p in ['mine', 'theirs', 'nope']:\n\
              \x20   try: os.truncate(p, 2); print(p, 'ok')\n\
              \x20   except OSError as e: print(p, errno.errorcode[e.errno])\n";
    let script = format!(
        "echo 0123456789 > mine && echo 0123456789 > theirs && chmod 666 mine && chmod 644 theirs && \
         setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c \"{py}\""
    );
    let (native, served) = native_and_served("truncate-other", &script, "wc -c mine theirs");
    assert!(native.contains("mine ok") && native.contains("theirs EACCES") && native.contains("11 theirs"), "{native}");
    assert_eq!(served, native);
}

/// A program whose signal handler leaves a file call by `siglongjmp` (the
/// classic way to put a time limit on a call, with `alarm`) keeps its
/// files as natively: a signal that came while the library served the
/// call left the thread marked as inside the library for good, so its
/// later calls went past the library to the kernel (a read of a file
/// opened before then read `01`, the kernel's offset, where natively
/// `23`); and a jump out of the library's own allocation broke the C
/// library's heap (the program aborted in `malloc`). Some 300 jumps, on a
/// timer of 40 µs, out of opens, reads and writes of served files.
#[test]
fn ferry_run_calls_left_by_siglongjmp_keep_the_program_s_files_like_native() {
    if !have_cc("ferry_run_calls_left_by_siglongjmp_keep_the_program_s_files_like_native") {
        return;
    }
    let script = r#"cat > sj.c <<'C'
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
static sigjmp_buf env;
static volatile sig_atomic_t jumps, armed;
static void on_alarm(int s) {
    (void)s;
    if (armed) { jumps++; siglongjmp(env, 1); }
}
static void timer(long us) {
    struct itimerval it = { { 0, us }, { 0, us } };
    setitimer(ITIMER_REAL, &it, NULL);
}
int main(void) {
    char big[300000];
    memset(big, 'x', sizeof big);
    int w = open("f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    write(w, "0123456789", 10); write(w, big, sizeof big); close(w);
    int f = open("f", O_RDONLY);
    char b[8] = { 0 };
    read(f, b, 2);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    timer(40);
    for (volatile int i = 0; i < 4000 && jumps < 300; i++) {
        if (sigsetjmp(env, 1) == 0) {
            armed = 1;
            int g = open("g", O_CREAT | O_RDWR, 0644);
            char c[4096];
            pread(f, c, sizeof c, 4096 * (i % 64));
            if (g >= 0) { write(g, "g", 1); close(g); }
        }
    }
    armed = 0;
    timer(0);
    signal(SIGALRM, SIG_DFL);
    printf("jumped %s\n", jumps > 0 ? "yes" : "no");
    read(f, b, 2);
    printf("read %s\n", b);
    char c[8] = { 0 };
    printf("pread %zd %.4s\n", pread(f, c, 4, 6), c);
    int h = open("h", O_CREAT | O_WRONLY, 0644);
    printf("wrote %zd\n", write(h, "hello", 5));
    close(h); close(f);
    return 0;
}
C
cc -o sj sj.c && ./sj && cat h; echo"#;
    let (native, served) = native_and_served("siglongjmp", script, "ls; wc -c h");
    assert!(native.contains("jumped yes\nread 23\npread 4 6789\nwrote 5\nhello"), "{native}");
    assert_eq!(served, native);
}

/// Name calls given flags they do not know: `unlinkat` with anything but
/// `AT_REMOVEDIR` and `fstatat` with a flag outside its set, each printed
/// with its result, and whether the file is still there.
const UNKNOWN_NAME_FLAGS_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
static void show(const char *what, int r) {
    printf("%s %d %s\n", what, r, r < 0 ? strerror(errno) : "");
}
int main(void) {
    struct stat st;
    close(open("victim", O_CREAT | O_WRONLY, 0644));
    mkdir("d", 0755);
    show("unlinkat 1", unlinkat(AT_FDCWD, "victim", 1));
    show("unlinkat nofollow", unlinkat(AT_FDCWD, "victim", AT_SYMLINK_NOFOLLOW));
    show("unlinkat removedir|1", unlinkat(AT_FDCWD, "d", AT_REMOVEDIR | 1));
    show("fstatat unknown", fstatat(AT_FDCWD, "victim", &st, 0x40000000));
    show("fstatat removedir", fstatat(AT_FDCWD, "victim", &st, AT_REMOVEDIR));
    show("fstatat no-automount", fstatat(AT_FDCWD, "victim", &st, AT_NO_AUTOMOUNT | AT_SYMLINK_NOFOLLOW));
    show("stat victim", stat("victim", &st));
    show("stat d", stat("d", &st));
    show("unlinkat 0", unlinkat(AT_FDCWD, "victim", 0));
    show("unlinkat removedir", unlinkat(AT_FDCWD, "d", AT_REMOVEDIR));
    return 0;
}
"#;

/// `unlinkat` and `fstatat` with flags the kernel does not take for them
/// fail with `EINVAL`, as natively. The library looked only at the flags
/// it knew: `unlinkat(AT_FDCWD, "f", 1)` removed the file the kernel
/// keeps (and `AT_REMOVEDIR | 1` the directory), and `fstatat` with an
/// unknown flag answered 0.
#[test]
fn ferry_run_name_calls_with_unknown_flags_are_refused_like_native() {
    if !have_cc("ferry_run_name_calls_with_unknown_flags_are_refused_like_native") {
        return;
    }
    let src = scratch("nameflags-src");
    std::fs::write(src.join("n.c"), UNKNOWN_NAME_FLAGS_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "n", "n.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("n");
    let (native, served) = native_and_served("nameflags", exe.to_str().unwrap(), "ls");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("unlinkat 1 -1 Invalid argument") && native.contains("stat victim 0"), "{native}");
    assert_eq!(served, native);
}

/// Streams opened with every kind of mode string the C library reads
/// (`t` and other letters it ignores, `+` after them, letters past the
/// ones it looks at, a first letter it refuses) by `fopen`, `fdopen` and
/// `freopen`: each stream's descriptor's access, a read and a write
/// through it, and what the file holds after.
const STDIO_MODES_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void use(const char *how, const char *mode, FILE *f) {
    printf("%s %-12s %s", how, mode, f ? "ok" : strerror(errno));
    if (f) {
        int fl = fcntl(fileno(f), F_GETFL);
        printf(" access %d append %d", fl & O_ACCMODE, !!(fl & O_APPEND));
        errno = 0;
        int c = fgetc(f);
        printf(" getc %d %s", c, c < 0 ? strerror(errno) : "");
        clearerr(f);
        fseek(f, 0, SEEK_CUR);
        errno = 0;
        int w = fputs("W", f), fl2 = fflush(f);
        printf(" puts %d flush %d %s", w, fl2, (w < 0 || fl2) ? strerror(errno) : "");
        fclose(f);
    }
    char b[32] = {0};
    int fd = open("data", O_RDONLY);
    read(fd, b, sizeof b - 1);
    close(fd);
    b[strcspn(b, "\n")] = '|';
    printf(" -> %s\n", b);
}
static void fresh(void) {
    int fd = open("data", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    write(fd, "hello\n", 6);
    close(fd);
}
int main(void) {
    const char *modes[] = {"r", "rt", "r+t", "rt+", "rbt+", "re+", "wt+", "at+", "rbbbbbbbb+", "+r", "z", NULL};
    for (int i = 0; modes[i]; i++) {
        fresh();
        errno = 0;
        use("fopen", modes[i], fopen("data", modes[i]));
    }
    errno = 0;
    printf("fopen z of a missing file %s\n", fopen("missing", "z") ? "ok" : strerror(errno));
    const char *fdmodes[] = {"r", "rt+", "wt+", "at+", "rbbb+", NULL};
    for (int i = 0; fdmodes[i]; i++) {
        fresh();
        errno = 0;
        use("fdopen", fdmodes[i], fdopen(open("data", O_RDWR), fdmodes[i]));
    }
    const char *remodes[] = {"rt+", "wt+", "at+", "z", NULL};
    for (int i = 0; remodes[i]; i++) {
        fresh();
        FILE *f = fopen("data", "r");
        errno = 0;
        use("freopen", remodes[i], freopen("data", remodes[i], f));
    }
    return 0;
}
"#;

/// Streams opened under the served directory read and write as the C
/// library's mode string says, as natively. The library's streams were
/// made with the caller's mode string, which the C library reads for
/// such streams only as far as a `+` right after the first letter (or
/// after a `b`): `fopen(name, "rt+")` (and `"wt+"`, `"at+"`, `"re+"`)
/// opened the file for reading and writing but gave a stream that could
/// only read (or only write), so its writes failed with `EBADF`; and the
/// library's own reading of the mode looked at the whole string, where
/// the C library stops after six letters and refuses a first letter other
/// than `r`, `w` or `a` (`EINVAL`).
#[test]
fn ferry_run_streams_take_the_mode_the_c_library_reads_like_native() {
    if !have_cc("ferry_run_streams_take_the_mode_the_c_library_reads_like_native") {
        return;
    }
    let src = scratch("stdiomodes-src");
    std::fs::write(src.join("m.c"), STDIO_MODES_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "m", "m.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("m");
    let (native, served) = native_and_served("stdiomodes", exe.to_str().unwrap(), "ls");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("fopen rt+          ok access 2 append 0 getc 104  puts 1 flush 0  -> hWllo|"), "{native}");
    assert_eq!(served, native);
}

/// Writes that cross the file size limit: `write`, `pwrite` and `writev`
/// that start below it, each printed with what it wrote, then a write at
/// the limit (`SIGXFSZ`).
const WRITES_ACROSS_THE_SIZE_LIMIT_C: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/uio.h>
int main(void) {
    struct rlimit r = { 3000, 3000 };
    setrlimit(RLIMIT_FSIZE, &r);
    char b[5000];
    memset(b, 'x', sizeof b);
    int fd = open("f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    printf("write %zd\n", write(fd, b, sizeof b));
    fflush(stdout);
    int g = open("g", O_CREAT | O_RDWR | O_TRUNC, 0644);
    printf("pwrite %zd\n", pwrite(g, b, sizeof b, 1000));
    fflush(stdout);
    struct iovec v[2] = { { b, 1000 }, { b, 3000 } };
    printf("writev %zd\n", writev(g, v, 2));
    fflush(stdout);
    ssize_t n = write(fd, b, 10);
    printf("at the limit %zd %s\n", n, n < 0 ? strerror(errno) : "");
    return 0;
}
"#;

/// A write that starts below the file size limit (`ulimit -f`) and
/// reaches past it writes what fits and returns that count, as natively;
/// only a write at the limit fails (`EFBIG`, `SIGXFSZ`). The library
/// went on writing the rest after the kernel's short write, and that
/// second write, at the limit, raised `SIGXFSZ`: the program was killed
/// by its first write across the limit, where natively it is told 3000
/// of 5000 bytes were written and goes on.
#[test]
fn ferry_run_writes_across_the_file_size_limit_are_short_like_native() {
    if !have_cc("ferry_run_writes_across_the_file_size_limit_are_short_like_native") {
        return;
    }
    let src = scratch("fsizewrite-src");
    std::fs::write(src.join("w.c"), WRITES_ACROSS_THE_SIZE_LIMIT_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "w", "w.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("w");
    let (native, served) = native_and_served("fsizewrite", exe.to_str().unwrap(), "stat -c '%n %s' f g");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("write 3000\npwrite 2000\nwritev 3000\n"), "{native}");
    assert_eq!(served, native);
}

/// `splice` between a served file and pipes: a flag it does not know,
/// `SPLICE_F_NONBLOCK` from an empty pipe and into a full one, and from
/// a pipe holding less than asked; each call printed with its result,
/// and the file's offset. An alarm ends a call that waits.
const SPLICE_FLAGS_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void show(const char *what, long r) {
    printf("%s %ld %s\n", what, r, r < 0 ? strerror(errno) : "");
    fflush(stdout);
}
int main(void) {
    alarm(10);
    int fd = open("f", O_CREAT | O_RDWR | O_TRUNC, 0644);
    write(fd, "0123456789", 10);
    lseek(fd, 0, SEEK_SET);
    int p[2];
    pipe(p);
    show("unknown flag", splice(fd, NULL, p[1], NULL, 3, 0x100));
    show("offset", lseek(fd, 0, SEEK_CUR));
    show("empty pipe, nonblocking", splice(p[0], NULL, fd, NULL, 3, SPLICE_F_NONBLOCK));
    write(p[1], "ab", 2);
    show("pipe of two, nonblocking", splice(p[0], NULL, fd, NULL, 3, SPLICE_F_NONBLOCK));
    show("offset", lseek(fd, 0, SEEK_CUR));
    int q[2];
    pipe(q);
    fcntl(q[1], F_SETPIPE_SZ, 4096);
    char full[4096];
    memset(full, 'z', sizeof full);
    write(q[1], full, sizeof full);
    show("full pipe, nonblocking", splice(fd, NULL, q[1], NULL, 4, SPLICE_F_NONBLOCK));
    show("offset", lseek(fd, 0, SEEK_CUR));
    show("file to pipe, nonblocking", splice(fd, NULL, p[1], NULL, 4, SPLICE_F_NONBLOCK));
    char b[16] = {0};
    read(p[0], b, sizeof b - 1);
    printf("the pipe had %s\n", b);
    show("offset", lseek(fd, 0, SEEK_CUR));
    return 0;
}
"#;

/// `splice` with a served file at one end refuses a flag it does not
/// know (`EINVAL`) and, with `SPLICE_F_NONBLOCK`, does not wait for its
/// pipe: an empty pipe or a full one is `EAGAIN`, as natively. The
/// library, which copies such splices itself, ignored the flags: a
/// splice with an unknown flag copied, and one with `SPLICE_F_NONBLOCK`
/// from an empty pipe waited until the alarm killed the program.
#[test]
fn ferry_run_splice_flags_are_honoured_like_native() {
    if !have_cc("ferry_run_splice_flags_are_honoured_like_native") {
        return;
    }
    let src = scratch("spliceflags-src");
    std::fs::write(src.join("s.c"), SPLICE_FLAGS_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "s", "s.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("s");
    let (native, served) = native_and_served("spliceflags", exe.to_str().unwrap(), "cat f; echo");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("unknown flag -1 Invalid argument") && native.contains("empty pipe, nonblocking -1 Resource temporarily unavailable"), "{native}");
    assert_eq!(served, native);
}

/// When `ferry run` returns, the files its program had open are closed,
/// as natively once a program has exited: a lock another program took on
/// one of them (`flock -s` on a descriptor the shell opened for reading
/// and handed it) is let go, and a process started next takes the file's
/// lock at once. The server, which holds a descriptor of every open file
/// it serves, let go of files opened only for reading at its own pace,
/// after `ferry run` had returned: `flock -n` right after found the
/// program's lock still held 7 times in 30.
#[test]
fn ferry_run_returns_with_the_program_s_files_closed_like_native() {
    if !Command::new("flock").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped ferry_run_returns_with_the_program_s_files_closed_like_native: flock is not installed");
        return;
    }
    let dir = scratch("closedonreturn");
    let d = dir.to_str().unwrap();
    let lock = dir.join("lock");
    std::fs::write(&lock, b"").unwrap();
    let script = format!("exec 9<{d}/lock; flock -s 9");
    let mut held = 0;
    for _ in 0..30 {
        let out = ferry_run(d, &["bash", "-c", &script]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let after = Command::new("flock").arg("-n").arg(&lock).arg("true").status().unwrap();
        if !after.success() {
            held += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(held, 0, "the program's lock was still held after ferry run returned, {held} times in 30");
}

/// Reads and writes given no buffer (a null pointer with bytes to move):
/// at and past the end of the file, inside it, and on descriptors not
/// open for that; each printed with its result and the offset after.
const NULL_BUFFERS_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void show(const char *what, long r, int fd) {
    printf("%s %ld %s offset %ld\n", what, r, r < 0 ? strerror(errno) : "", (long)lseek(fd, 0, SEEK_CUR));
}
int main(void) {
    int fd = open("f", O_CREAT | O_RDWR | O_TRUNC, 0644);
    write(fd, "0123456789", 10);
    int ro = open("f", O_RDONLY), wo = open("f", O_WRONLY);
    show("read at the end", read(fd, NULL, 5), fd);
    lseek(fd, 20, SEEK_SET);
    show("read past the end", read(fd, NULL, 5), fd);
    lseek(fd, 3, SEEK_SET);
    show("read inside", read(fd, NULL, 5), fd);
    show("pread at the end", pread(ro, NULL, 5, 10), ro);
    show("pread inside", pread(ro, NULL, 5, 9), ro);
    show("pread negative", pread(ro, NULL, 5, -1), ro);
    show("read write-only", read(wo, NULL, 5), wo);
    show("pread write-only", pread(wo, NULL, 5, 0), wo);
    show("write read-only", write(ro, NULL, 5), ro);
    show("pwrite read-only", pwrite(ro, NULL, 5, 0), ro);
    show("write", write(wo, NULL, 5), wo);
    return 0;
}
"#;

/// A read or write given a null buffer with bytes to move fails as the
/// kernel fails it: a descriptor not open for that is `EBADF` first, and
/// a read with nothing left to read (at or past the end) is 0, where only
/// a read that would copy bytes is `EFAULT`. The library answered
/// `EFAULT` to every such call.
#[test]
fn ferry_run_reads_and_writes_without_a_buffer_fail_like_native() {
    if !have_cc("ferry_run_reads_and_writes_without_a_buffer_fail_like_native") {
        return;
    }
    let src = scratch("nullbuf-src");
    std::fs::write(src.join("n.c"), NULL_BUFFERS_C).unwrap();
    let built = Command::new("cc").args(["-O0", "-o", "n", "n.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("n");
    let (native, served) = native_and_served("nullbuf", exe.to_str().unwrap(), "cat f; echo");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("read at the end 0  offset 10") && native.contains("read write-only -1 Bad file descriptor"), "{native}");
    assert_eq!(served, native);
}

/// Under a limit on descriptors too low for the library's own
/// descriptors of one more served file, a program's open that has its
/// own number succeeds, as natively: the kernel opens the file, not
/// served. A served open file takes three descriptors (the program's, the
/// library's copy and the hold), and the open failed with `EMFILE`: under
/// `ulimit -n 12` and `16` a shell's `exec 3>a 4>b 5>c` failed at the
/// second or third file, where natively all three open and `cat` reads
/// them.
#[test]
fn ferry_run_opens_under_a_limit_too_low_for_the_library_succeed_like_native() {
    let script = "for n in 12 16; do bash -c \"ulimit -n $n; exec 3>a$n 4>b$n 5>c$n; echo x >&3; echo y >&4; echo z >&5; exec 3>&- 4>&- 5>&-; cat a$n b$n c$n\" 2>&1; done";
    let (native, served) = native_and_served("lowlimit", script, "ls");
    assert!(native.starts_with("x\ny\nz\nx\ny\nz\n--- stderr\n--- exit status: 0\n"), "{native}");
    assert_eq!(served, native);
}

/// Vector reads and writes whose buffers after the first include a null
/// one: each printed with its result and the offset after, then the file.
const NULL_IOVECS_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>
static void show(const char *what, long r, int fd) {
    printf("%s %ld %s offset %ld\n", what, r, r < 0 ? strerror(errno) : "", (long)lseek(fd, 0, SEEK_CUR));
}
int main(void) {
    char a[8], b[8];
    int fd = open("f", O_CREAT | O_RDWR | O_TRUNC, 0644);
    struct iovec w[3] = {{"01234", 5}, {NULL, 5}, {"56789", 5}};
    show("writev null second", writev(fd, w, 3), fd);
    show("writev null first", writev(fd, w + 1, 2), fd);
    show("pwritev null second", pwritev(fd, w, 3, 2), fd);
    show("pwritev2 null second", pwritev2(fd, w, 3, 20, 0), fd);
    show("pwritev2 dsync null second", pwritev2(fd, w, 3, 30, RWF_DSYNC), fd);
    struct iovec empty[3] = {{"", 0}, {NULL, 5}, {"x", 1}};
    show("writev empty then null", writev(fd, empty, 3), fd);
    write(fd, "abcdefghij", 10);
    struct iovec r[3] = {{a, 5}, {NULL, 5}, {b, 5}};
    lseek(fd, 0, SEEK_SET);
    show("readv null second", readv(fd, r, 3), fd);
    show("readv null first", readv(fd, r + 1, 2), fd);
    lseek(fd, 32, SEEK_SET);
    show("readv null second near the end", readv(fd, r, 3), fd);
    show("readv null second at the end", readv(fd, r, 3), fd);
    show("readv null first at the end", readv(fd, r + 1, 2), fd);
    show("preadv null second", preadv(fd, r, 3, 3), fd);
    show("preadv null first past the end", preadv(fd, r + 1, 2, 100), fd);
    show("preadv2 null second", preadv2(fd, r, 3, 1, 0), fd);
    show("preadv2 hipri null second", preadv2(fd, r, 3, 1, RWF_HIPRI), fd);
    struct iovec big[2] = {{a, 5}, {NULL, 20 << 20}};
    lseek(fd, 0, SEEK_SET);
    show("readv null large", readv(fd, big, 2), fd);
    return 0;
}
"#;

/// A vector read or write whose buffers include a null one moves what
/// the buffers before it take and answers that, as the kernel does (it
/// stops at the first buffer it cannot reach); `EFAULT` only when nothing
/// before it could move, and a read with nothing left to read is 0. The
/// library refused the whole call with `EFAULT` whenever any buffer was
/// null, so `writev` of three buffers with a null second one wrote
/// nothing where natively it wrote 5 bytes.
#[test]
fn ferry_run_vector_calls_with_a_null_buffer_move_what_comes_before_it_like_native() {
    if !have_cc("ferry_run_vector_calls_with_a_null_buffer_move_what_comes_before_it_like_native") {
        return;
    }
    let src = scratch("nulliov-src");
    std::fs::write(src.join("n.c"), NULL_IOVECS_C).unwrap();
    let built = Command::new("cc").args(["-O0", "-o", "n", "n.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("n");
    let (native, served) = native_and_served("nulliov", exe.to_str().unwrap(), "od -c f");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("writev null second 5  offset 5") && native.contains("readv null first -1 Bad address"), "{native}");
    assert_eq!(served, native);
}

/// A program holding more files than the server allows one user (its
/// share of the server's descriptors) opens the next ones as natively:
/// the kernel opens them, not served. With `ferry run` and the program
/// under a limit of 1024 descriptors, Python opening one file 600 times
/// got `ENFILE` at the 158th open, where natively all 600 open.
#[test]
fn ferry_run_opens_past_the_server_s_share_for_the_user_succeed_like_native() {
    if !have_python() {
        return;
    }
    let dir = scratch("pastshare");
    let d = dir.to_str().unwrap();
    std::fs::write(dir.join("f"), b"data\n").unwrap();
    let py = "import sys\nfs = []\ntry:\n    while len(fs) < 600: fs.append(open(sys.argv[1], 'rb'))\n    print('opened', len(fs), fs[-1].read())\nexcept OSError as e: print('opened', len(fs), e.strerror)\n";
    let file = dir.join("f");
    let file = file.to_str().unwrap();
    let native = Command::new("sh").args(["-c", "ulimit -n 1024 && exec \"$@\"", "sh", "python3", "-c", py, file]).output().unwrap();
    let served = Command::new("sh")
        .args(["-c", "ulimit -n 1024 && exec \"$@\"", "sh", env!("CARGO_BIN_EXE_ferry"), "run", "--files", d, "--library"])
        .arg(library())
        .args(["--", "python3", "-c", py, file])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (native, served) = (String::from_utf8_lossy(&native.stdout), String::from_utf8_lossy(&served.stdout));
    assert_eq!(native, "opened 600 b'data\\n'\n");
    assert_eq!(served, native);
}

/// Reading a sparse file on a `tmpfs` leaves its holes, as natively: a
/// read fault of a mapping there fills a hole with a page of memory (its
/// `read` copies zeros and does not), and the library's windows are
/// mappings. `md5sum` of a 64 MiB file with one block of data took its
/// blocks from 8 to 131,080 under `ferry run` (and that much memory for
/// as long as the file lived); natively they stay 8.
#[test]
fn ferry_run_reads_of_a_sparse_file_on_tmpfs_leave_its_holes_like_native() {
    let shm = Path::new("/dev/shm");
    /// `statfs`'s type of a tmpfs (linux/magic.h).
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let is_tmpfs = rustix::fs::statfs(shm).is_ok_and(|st| st.f_type == TMPFS_MAGIC);
    if !is_tmpfs {
        eprintln!("skipped ferry_run_reads_of_a_sparse_file_on_tmpfs_leave_its_holes_like_native: /dev/shm is not a tmpfs");
        return;
    }
    let dir = shm.join(format!("ferry-run-sparse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let script = "truncate -s 64M sparse && echo end >> sparse && md5sum sparse && cat sparse > /dev/null && stat -c '%s %b' sparse && rm sparse";
    let native = Command::new("sh").args(["-c", script]).current_dir(&dir).output().unwrap();
    let served = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--files", d, "--library"])
        .arg(library())
        .args(["--", "sh", "-c", script])
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (native, served) = (String::from_utf8_lossy(&native.stdout), String::from_utf8_lossy(&served.stdout));
    assert!(native.ends_with("sparse\n67108868 8\n"), "{native}");
    assert_eq!(served, native);
}

/// `/proc/self/fdinfo/N` of a served descriptor shows the program's
/// offset, as natively: the kernel shows its own offset of the open file
/// there, which the library left where the open put it (the token page
/// holds the offset), so `pos:` said 0 after a read of 17 bytes and
/// after a seek to 100.
#[test]
fn ferry_run_fdinfo_shows_the_program_s_offset_like_native() {
    if !have_python() {
        return;
    }
    let py = "import os\n\
def pos(fd, who='self'):\n    return [l for l in open('/proc/%s/fdinfo/%d' % (who, fd)).read().split('\\n') if l.startswith('pos:')]\n\
open('f', 'w').write('x' * 10000)\n\
fd = os.open('f', os.O_RDONLY)\n\
os.read(fd, 17)\n\
print('after a read', pos(fd), pos(fd, os.getpid()), pos(fd, 'thread-self'))\n\
os.lseek(fd, 100, 0)\n\
print('after a seek', pos(fd))\n\
d = os.dup(fd)\n\
os.read(d, 1000)\n\
print('through a dup', pos(fd), pos(d))\n\
f = open('f', 'rb')\n\
f.read(5)\n\
print('a stream', pos(f.fileno()))\n";
    let (native, served) = native_and_served("fdinfo", &format!("python3 -c \"{}\"", py.replace('"', "\\\"")), "true");
    assert!(native.starts_with("after a read ['pos:\\t17'] ['pos:\\t17'] ['pos:\\t17']\n"), "{native}");
    assert_eq!(served, native);
}

/// Streams opened with a coded character set (`",ccs=..."` in the mode):
/// wide-character text written and read back in UTF-8 and UTF-16, with
/// the program left in the "C" locale, and a set the C library does not
/// know.
const STDIO_CCS_C: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <wchar.h>
int main(void) {
    FILE *f = fopen("u8", "w,ccs=UTF-8");
    printf("utf-8 open %d fwide %d\n", f != NULL, f ? fwide(f, 0) : 0);
    if (f) {
        printf("fputws %d\n", fputws(L"caf\u00e9 \u20ac\n", f));
        printf("fwprintf %d\n", fwprintf(f, L"%ls %d\n", L"\u00fc", 7));
        fclose(f);
    }
    f = fopen("u8", "r,ccs=UTF-8");
    if (f) {
        wchar_t line[64];
        while (fgetws(line, 64, f))
            printf("line of %zu characters, first %x\n", wcslen(line), (unsigned)line[0]);
        fclose(f);
    }
    f = fopen("u16", "w+,ccs=UTF-16LE");
    if (f) {
        fputws(L"h\u00e9", f);
        rewind(f);
        wint_t a = fgetwc(f), b = fgetwc(f);
        printf("utf-16 read back %x %x\n", (unsigned)a, (unsigned)b);
        fclose(f);
    }
    errno = 0;
    f = fopen("unknown", "w,ccs=NO-SUCH-SET");
    printf("unknown set %s\n", f ? "opened" : strerror(errno));
    if (f)
        fclose(f);
    return 0;
}
"#;

/// A stream opened with `",ccs=CHARSET"` in its mode is a wide stream that
/// converts to and from that set, whatever the program's locale, as
/// natively. The library made every stream of a served file a byte
/// stream of the C library's, which knows no `ccs=`: the text went out in
/// the locale's encoding instead, so in the "C" locale `fputws` of
/// "café €" stopped at the "é" and the file kept 3 bytes of 15, UTF-16
/// came out as one byte a character, and an unknown set was accepted
/// where natively the open fails with `EINVAL`.
#[test]
fn ferry_run_streams_with_a_coded_character_set_convert_like_native() {
    if !have_cc("ferry_run_streams_with_a_coded_character_set_convert_like_native") {
        return;
    }
    let src = scratch("stdioccs-src");
    std::fs::write(src.join("c.c"), STDIO_CCS_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "c", "c.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("c");
    let (native, served) = native_and_served("stdioccs", exe.to_str().unwrap(), "ls; od -An -tx1 u8 u16");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("utf-8 open 1 fwide 1\nfputws 1\n") && native.contains("unknown set Invalid argument"), "{native}");
    assert_eq!(served, native);
}

/// Calls on an open file made through the C library's `syscall`: reads,
/// writes, seeks, vectors, a truncation, an in-kernel copy, a duplicate
/// and a record lock from the offset, each followed by what the C
/// library's own calls then see.
const RAW_FILE_CALLS_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
static char b[64];
static const char *got(long n) { b[n > 0 ? n : 0] = 0; return b; }
int main(void) {
    int fd = open("f", O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(fd, "0123456789abcdefghij", 20);
    lseek(fd, 5, SEEK_SET);
    long n = syscall(SYS_read, fd, b, 4);
    printf("read %ld %s\n", n, got(n));
    printf("then at %ld\n", (long)lseek(fd, 0, SEEK_CUR));
    n = read(fd, b, 4);
    printf("then read %ld %s\n", n, got(n));
    printf("write %ld\n", syscall(SYS_write, fd, "XY", 2));
    printf("seek %ld\n", syscall(SYS_lseek, fd, 0, SEEK_CUR));
    n = pread(fd, b, 20, 0);
    printf("file %s\n", got(n));
    printf("seek to %ld\n", syscall(SYS_lseek, fd, 1, SEEK_SET));
    n = read(fd, b, 3);
    printf("then read %s\n", got(n));
    n = syscall(SYS_pread64, fd, b, 5, 10);
    printf("pread %s\n", got(n));
    printf("pwrite %ld\n", syscall(SYS_pwrite64, fd, "PQ", 2, 18));
    struct iovec v[2] = { { "<", 1 }, { ">", 1 } };
    printf("writev %ld\n", syscall(SYS_writev, fd, v, 2));
    char x[3], y[3];
    struct iovec r[2] = { { x, 3 }, { y, 3 } };
    n = syscall(SYS_readv, fd, r, 2);
    printf("readv %ld %.3s%.3s\n", n, x, y);
    n = syscall(SYS_preadv, fd, r, 2, 0, 0);
    printf("preadv %ld %.3s%.3s\n", n, x, y);
    printf("at %ld\n", (long)lseek(fd, 0, SEEK_CUR));
    int g = open("g", O_RDWR | O_CREAT | O_TRUNC, 0644);
    lseek(fd, 2, SEEK_SET);
    n = syscall(SYS_copy_file_range, fd, NULL, g, NULL, 3, 0);
    printf("copy %ld, at %ld and %ld\n", n, (long)lseek(fd, 0, SEEK_CUR), (long)lseek(g, 0, SEEK_CUR));
    n = pread(g, b, 10, 0);
    printf("copied %s\n", got(n));
    printf("truncate %ld\n", syscall(SYS_ftruncate, fd, 7));
    n = pread(fd, b, 20, 0);
    printf("after it %ld %s\n", n, got(n));
    lseek(fd, 3, SEEK_SET);
    int d = syscall(SYS_dup3, fd, 50, 0);
    n = read(d, b, 2);
    printf("dup3 %d reads %s, at %ld\n", d, got(n), (long)lseek(fd, 0, SEEK_CUR));
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_CUR, .l_start = 0, .l_len = 1 };
    printf("lock %ld\n", syscall(SYS_fcntl, fd, F_SETLK, &l));
    struct flock q = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    fcntl(fd, F_OFD_GETLK, &q);
    printf("held from %ld\n", (long)q.l_start);
    return 0;
}
"#;

/// Calls on an open file that a program makes through the C library's
/// `syscall` (`syscall(SYS_read, ...)`, as programs do for calls their C
/// library has no wrapper for) read, write and seek at the program's
/// offset, as natively. Only closes were caught there; every other call
/// went to the kernel, whose offset of a served file the library does not
/// keep: a raw read after a seek to 5 read "0123" where natively "5678",
/// a raw write landed over the start of the file, a raw seek said 6 where
/// natively 15, a raw `copy_file_range` copied from 0 and left both
/// offsets where they were, and after a raw truncation to 7 bytes the
/// program still read 20.
#[test]
fn ferry_run_calls_made_through_syscall_use_the_program_s_offset_like_native() {
    if !have_cc("ferry_run_calls_made_through_syscall_use_the_program_s_offset_like_native") {
        return;
    }
    let src = scratch("rawcalls-src");
    std::fs::write(src.join("r.c"), RAW_FILE_CALLS_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "r", "r.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("r");
    let (native, served) = native_and_served("rawcalls", exe.to_str().unwrap(), "ls; cat f; echo; cat g; echo");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.starts_with("read 4 5678\nthen at 9\nthen read 4 9abc\n"), "{native}");
    assert_eq!(served, native);
}

/// A program that reads part of a file and starts shells that go on
/// reading and writing it from the inherited descriptor 3, through
/// `execveat` (by name, relative to a directory, and of a descriptor)
/// and through `syscall(SYS_execve)`.
const EXECVEAT_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
extern char **environ;
static char *av[] = { "sh", "-c", "head -c 3 <&3; echo; echo W >&3", NULL };
static void run(int how) {
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        if (how == 0)
            execveat(AT_FDCWD, "/bin/sh", av, environ, 0);
        else if (how == 1)
            execveat(open("/bin", O_RDONLY | O_DIRECTORY), "sh", av, environ, 0);
        else if (how == 2)
            execveat(open("/bin/sh", O_PATH), "", av, environ, AT_EMPTY_PATH);
        else
            syscall(SYS_execve, "/bin/sh", av, environ);
        _exit(99);
    }
    int status;
    waitpid(p, &status, 0);
    printf("status %d, then at %ld\n", WEXITSTATUS(status), (long)lseek(3, 0, SEEK_CUR));
}
int main(void) {
    int fd = open("f", O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(fd, "0123456789abcdefghijklmnopqrstuvwxyz\n", 37);
    lseek(fd, 4, SEEK_SET);
    if (fd != 3)
        dup2(fd, 3);
    for (int how = 0; how < 4; how++)
        run(how);
    return 0;
}
"#;

/// A program started with `execveat` (or with `execve` through the C
/// library's `syscall`) goes on from its parent's offsets of the files it
/// inherits, as natively. The library hands offsets to the kernel before
/// `execve` and its kin, but `execveat` was not among them: the new
/// program read and wrote at the kernel's stale offset, so a shell
/// started after a seek to 4 read "012" where natively "456", wrote over
/// the start of the file, and its parent's offset stayed at 4.
#[test]
fn ferry_run_programs_started_by_execveat_go_on_from_the_offsets_like_native() {
    if !have_cc("ferry_run_programs_started_by_execveat_go_on_from_the_offsets_like_native") {
        return;
    }
    let src = scratch("execveat-src");
    std::fs::write(src.join("e.c"), EXECVEAT_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "e", "e.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("e");
    let (native, served) = native_and_served("execveat", exe.to_str().unwrap(), "cat f");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.starts_with("456\nstatus 0, then at 9\n"), "{native}");
    assert_eq!(served, native);
}

/// Opens files under a lowered descriptor limit until refused, reading
/// part of one first and going on with it after, writes to each, shares
/// one with a child, and makes a pipe after closing two.
const OPENS_UP_TO_THE_LIMIT_PY: &str = r#"
import errno, os, resource
open('given', 'w').write('0123456789' * 10)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
given = os.open('given', os.O_RDONLY)
print('read first', os.read(given, 7))
fds = []
try:
    for i in range(500):
        fds.append(os.open('f%d' % i, os.O_RDWR | os.O_CREAT, 0o644))
except OSError as e:
    print('opened', len(fds), errno.errorcode[e.errno])
print('read on', os.read(given, 5), os.lseek(given, 0, os.SEEK_CUR))
for i, fd in enumerate(fds):
    os.write(fd, b'%d;' % i)
pid = os.fork()
if pid == 0:
    os.write(fds[0], b'child;')
    os._exit(0)
os.waitpid(pid, 0)
os.write(fds[0], b'parent;')
print('offsets', [os.lseek(fd, 0, os.SEEK_CUR) for fd in fds[:3]], sum(os.lseek(fd, 0, os.SEEK_CUR) for fd in fds))
os.close(fds.pop())
os.close(fds.pop())
r, w = os.pipe()
print('pipe made')
print('read back', all(os.pread(fd, 100, 0).startswith(b'%d;' % i) for i, fd in enumerate(fds)))
"#;

/// A program holding a POSIX record lock on one file (open twice) opens
/// others until refused: the lock is still its own after (another
/// process is refused it).
const OPENS_UP_TO_THE_LIMIT_LOCKED_PY: &str = r#"
import errno, fcntl, os, resource, subprocess, sys
lk = os.open('locked', os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(lk, fcntl.LOCK_EX)
again = os.open('locked', os.O_RDONLY)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
fds = []
try:
    for i in range(500):
        fds.append(os.open('f%d' % i, os.O_RDONLY | os.O_CREAT, 0o644))
except OSError as e:
    print('opened', len(fds), errno.errorcode[e.errno])
for fd in fds[:10]:
    os.close(fd)
other = 'import fcntl, os\ntry:\n    fcntl.lockf(os.open(\'locked\', os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB); print(\'taken\')\nexcept OSError: print(\'refused\')\n'
print('another process:', subprocess.run([sys.executable, '-c', other], capture_output=True, text=True).stdout.strip())
"#;

/// A program can hold as many files under the served directory as its
/// descriptor limit allows natively. Each served open file takes two
/// descriptors of the library's besides the program's (its own copy and
/// the hold), so under `ulimit -n 64` Python's opens failed with `EMFILE`
/// after 22 files where natively 60 opened (342 where natively 1019 under
/// the usual limit of 1024), and a child's first write to one of them
/// failed with `EMFILE` too. A program that holds POSIX record locks
/// keeps them (served files are not let go then).
#[test]
fn ferry_run_a_program_opens_as_many_files_as_its_limit_allows_like_native() {
    if !have_python() {
        return;
    }
    let script = format!("python3 -c \"{}\"", OPENS_UP_TO_THE_LIMIT_PY.replace('"', "\\\""));
    let (native, served) = native_and_served("openlimit", &script, "ls | wc -l; cat f0; echo; cat f1");
    assert!(native.contains("opened 60 EMFILE") && native.contains("pipe made\nread back True\n"), "{native}");
    assert_eq!(served, native);
    let script = format!("python3 -c \"{}\"", OPENS_UP_TO_THE_LIMIT_LOCKED_PY.replace('"', "\\\""));
    let (native, served) = native_and_served("openlimitlocked", &script, "true");
    assert!(native.contains("opened 59 EMFILE") && native.contains("another process: refused"), "{native}");
    assert_eq!(served, native);
}

/// Opens files under a lowered descriptor limit until few numbers are
/// left, then lists a directory, makes pipes and sockets, and accepts a
/// connection.
const DESCRIPTORS_BESIDES_FILES_PY: &str = r#"
import errno, os, resource, socket
resource.setrlimit(resource.RLIMIT_NOFILE, (48, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
fds = [os.open('f%d' % i, os.O_RDWR | os.O_CREAT, 0o644) for i in range(36)]
for i, fd in enumerate(fds):
    os.write(fd, b'%d;' % i)
def tr(what, f):
    try:
        print(what, f())
    except OSError as e:
        print(what, errno.errorcode[e.errno])
tr('listdir', lambda: len(os.listdir('.')))
tr('pipe', lambda: len(os.pipe()))
tr('pipe2', lambda: len(os.pipe2(os.O_CLOEXEC)))
tr('socketpair', lambda: len(socket.socketpair()))
listener = socket.socket(socket.AF_UNIX)
listener.bind('sock')
listener.listen()
client = socket.socket(socket.AF_UNIX)
client.connect('sock')
tr('accept', lambda: listener.accept()[0].fileno() > 0)
print('offsets', sum(os.lseek(fd, 0, os.SEEK_CUR) for fd in fds))
"#;

/// A program near its descriptor limit with files open under the served
/// directory lists directories and makes pipes and sockets as natively:
/// those calls are the C library's, and with the library's two
/// descriptors of each served file taking the numbers they failed with
/// `EMFILE` (Python under a limit of 48 holding 36 files: `listdir`,
/// every `pipe` and `socketpair`, and its `import` of a module, which
/// lists a directory, failed where natively they succeed).
#[test]
fn ferry_run_a_program_near_its_limit_makes_pipes_sockets_and_listings_like_native() {
    if !have_python() {
        return;
    }
    let script = format!("python3 -c \"{}\"", DESCRIPTORS_BESIDES_FILES_PY.replace('"', "\\\""));
    let (native, served) = native_and_served("nearlimit", &script, "ls | wc -l");
    assert!(native.contains("listdir 36\npipe 2\npipe2 2\nsocketpair 2\n") && native.contains("accept True"), "{native}");
    assert_eq!(served, native);
}

/// Writes a file, reads it back twice (the second read from a window),
/// waits for the clock to move on, changes it through the same
/// descriptor (by `pwrite`, `write` with `O_APPEND`, `ftruncate`), reads
/// it again, and says whether the access time then came after the
/// change, as `relatime` has it.
const ACCESS_AFTER_CHANGE_PY: &str = r#"
import os, time
def changed_then_read(name, change):
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b'x' * 200000)
    os.pread(fd, 10, 0)
    os.pread(fd, 10, 100000)
    time.sleep(0.05)
    change(fd)
    os.pread(fd, 10, 100000)
    st = os.stat(name)
    print(name, 'read after the change:', st.st_atime_ns >= st.st_mtime_ns)
changed_then_read('pwrite', lambda fd: os.pwrite(fd, b'y', 5))
def append(fd):
    import fcntl
    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_APPEND)
    os.write(fd, b'z')
changed_then_read('append', append)
changed_then_read('ftruncate', lambda fd: os.ftruncate(fd, 150000))
"#;

/// A file changed and then read through the same open file has its
/// access time updated by the read, as natively under `relatime` (the
/// access time was older than the change). Reads from the library's
/// window are copies the kernel does not see, so the file kept the
/// access time of its mapping, before the change.
#[test]
fn ferry_run_reads_after_a_change_update_the_access_time_like_native() {
    if !have_python() {
        return;
    }
    let script = format!("python3 -c \"{}\"", ACCESS_AFTER_CHANGE_PY.replace('"', "\\\""));
    let (native, served) = native_and_served("atime", &script, "true");
    if native.contains("False") {
        eprintln!("skipped: reads here do not update the access time (noatime?): {native}");
        return;
    }
    assert!(native.contains("pwrite read after the change: True"), "{native}");
    assert_eq!(served, native);
}

/// Children that leave files open when they exit: one writes a script
/// and exits, and the parent runs the script at once; one takes an
/// open-file lock on a file the parent has open, and the parent then
/// takes a conflicting one. Each 50 times; what failed is counted.
const CHILDREN_LEAVING_FILES_OPEN_C: &str = r##"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
int main(void) {
    int busy = 0, wrong = 0, locked = 0;
    int keep = open("f", O_RDWR | O_CREAT, 0644);
    for (int i = 0; i < 50; i++) {
        pid_t p = fork();
        if (p == 0) {
            int fd = open("prog", O_WRONLY | O_CREAT | O_TRUNC, 0755);
            write(fd, "#!/bin/sh\nexit 7\n", 17);
            exit(0);
        }
        waitpid(p, NULL, 0);
        pid_t q = fork();
        if (q == 0) {
            execl("./prog", "prog", (char *)NULL);
            _exit(errno == ETXTBSY ? 100 : 101);
        }
        int st;
        waitpid(q, &st, 0);
        if (WEXITSTATUS(st) == 100)
            busy++;
        else if (WEXITSTATUS(st) != 7)
            wrong++;
        p = fork();
        if (p == 0) {
            int fd = open("f", O_RDONLY);
            struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
            fcntl(fd, F_OFD_SETLK, &l);
            _exit(0);
        }
        waitpid(p, NULL, 0);
        struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
        if (fcntl(keep, F_OFD_SETLK, &l) < 0)
            locked++;
        l.l_type = F_UNLCK;
        fcntl(keep, F_OFD_SETLK, &l);
    }
    printf("text busy %d, other failures %d, lock still held %d\n", busy, wrong, locked);
    return 0;
}
"##;

/// When a parent has reaped a child, the files the child left open are
/// closed, as natively: a script the child wrote runs, and a lock the
/// child held on an open file is gone. The server, whose descriptor of
/// each open file keeps it open until every process holding it is gone,
/// let go of a child's files at its own pace: the parent's lock
/// conflicting with the child's open-file lock was refused 16 times in 50
/// here (47 in 100 in a loop of its own), and its `execl` of the script
/// just written failed with `ETXTBSY` 3 times in 50 in a loop of its own.
#[test]
fn ferry_run_files_a_reaped_child_left_open_are_closed_like_native() {
    if !have_cc("ferry_run_files_a_reaped_child_left_open_are_closed_like_native") {
        return;
    }
    let src = scratch("reaped-src");
    std::fs::write(src.join("r.c"), CHILDREN_LEAVING_FILES_OPEN_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "r", "r.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("r");
    let (native, served) = native_and_served("reaped", exe.to_str().unwrap(), "ls");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.starts_with("text busy 0, other failures 0, lock still held 0\n"), "{native}");
    assert_eq!(served, native);
}

/// A stream's orientation as `fwide` tells it and as the wide and narrow
/// functions follow it: none until its first character, byte or wide
/// from then on, and none again after `freopen`. Wide output on a byte
/// stream (and wide input) fails without writing anything.
const STDIO_ORIENTATION_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <wchar.h>
int main(void) {
    FILE *f = fopen("f", "w+");
    printf("new %d\n", fwide(f, 0));
    fputs("abc\n", f);
    printf("after fputs %d\n", fwide(f, 0));
    int c = (int)fputwc(L'x', f);
    int s = fputws(L"yz", f);
    printf("fputwc %d fputws %d fwprintf %d\n", c, s, fwprintf(f, L"%d", 5));
    rewind(f);
    wchar_t buf[8];
    c = (int)fgetwc(f);
    printf("fgetwc %d fgetws %s\n", c, fgetws(buf, 8, f) ? "line" : "none");
    printf("asked wide %d\n", fwide(f, 1));
    fclose(f);
    f = fopen("f", "r");
    int w = fwide(f, 1);
    printf("asked wide %d, then byte %d\n", w, fwide(f, -1));
    c = (int)fgetwc(f);
    printf("fgetwc %d, now %d\n", c, fwide(f, 0));
    f = freopen("f", "r", f);
    printf("after freopen %d\n", fwide(f, 0));
    c = (int)fgetwc(f);
    printf("fgetwc %d, now %d\n", c, fwide(f, 0));
    fclose(f);
    f = fopen("g", "a");
    printf("append %d\n", fwide(f, 0));
    fputws(L"wide\n", f);
    printf("after fputws %d\n", fwide(f, 0));
    fclose(f);
    f = fdopen(open("g", O_RDONLY), "r");
    printf("fdopen %d\n", fwide(f, 0));
    return 0;
}
"#;

/// A served stream has no orientation until it is used, as natively, and
/// takes the one its first use gives it. The library's streams are the C
/// library's cookie streams, which are byte streams from the start:
/// `fwide(f, 0)` said -1 on a fresh stream where natively 0, `fwide(f, 1)`
/// said -1 where natively 1, and wide output after `fputs` (which a byte
/// stream refuses) went into the file, which kept 8 bytes "abc\nxyz5"
/// where natively the 4 of "abc\n".
#[test]
fn ferry_run_streams_take_their_orientation_from_their_first_use_like_native() {
    if !have_cc("ferry_run_streams_take_their_orientation_from_their_first_use_like_native") {
        return;
    }
    let src = scratch("stdioorient-src");
    std::fs::write(src.join("c.c"), STDIO_ORIENTATION_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "c", "c.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("c");
    let (native, served) = native_and_served("stdioorient", exe.to_str().unwrap(), "ls; od -An -c f g");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("new 0\nafter fputs -1\nfputwc -1 fputws -1 fwprintf -1\n"), "{native}");
    assert_eq!(served, native);
}

/// What `__freading`, `__fwriting` and `__fpending` say of a stream of
/// each mode before its first use, after `ftell`, and just after
/// `freopen` into another mode.
const STDIO_FRESH_C: &str = r#"
#include <stdio.h>
#include <stdio_ext.h>
int main(void) {
    const char *modes[] = { "r", "r+", "w", "w+", "a", "a+" };
    fclose(fopen("f", "w"));
    for (int i = 0; i < 6; i++) {
        FILE *f = fopen("f", modes[i]);
        printf("%s: reading %d writing %d pending %zu", modes[i], __freading(f), __fwriting(f), __fpending(f));
        printf(" at %ld: reading %d\n", ftell(f), __freading(f));
        f = freopen("f", modes[5 - i], f);
        printf("  reopened %s: reading %d writing %d\n", modes[5 - i], __freading(f), __fwriting(f));
        fclose(f);
    }
    return 0;
}
"#;

/// A served stream that has not read or written yet is not reading, as
/// natively: giving the library's stream its buffer at the open put its
/// read pointers at the buffer's start, so `__freading` (which gnulib's
/// `freading` is on glibc) said 1 for a fresh or just reopened `"r+"`,
/// `"w+"` or `"a+"` stream where natively 0 (6 of 12 lines differed).
#[test]
fn ferry_run_streams_not_used_yet_are_not_reading_like_native() {
    if !have_cc("ferry_run_streams_not_used_yet_are_not_reading_like_native") {
        return;
    }
    let src = scratch("stdiofresh-src");
    std::fs::write(src.join("c.c"), STDIO_FRESH_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "c", "c.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("c");
    let (native, served) = native_and_served("stdiofresh", exe.to_str().unwrap(), "ls");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("r+: reading 0 writing 0 pending 0 at 0: reading 0\n"), "{native}");
    assert_eq!(served, native);
}

/// Links made from open descriptors (`linkat` with `AT_EMPTY_PATH`): of
/// a file the program opened, of an `O_TMPFILE` file (with and without
/// `O_EXCL`), over an existing name, with a flag the kernel refuses, and
/// of another user's file.
const LINK_BY_DESCRIPTOR_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void show(const char *what, int r) { printf("%s: %s\n", what, r == 0 ? "ok" : strerror(errno)); }
int main(void) {
    int fd = open("f", O_RDWR | O_CREAT, 0644);
    write(fd, "data\n", 5);
    show("an open file", linkat(fd, "", AT_FDCWD, "f2", AT_EMPTY_PATH));
    int t = open(".", O_TMPFILE | O_RDWR, 0640);
    write(t, "new\n", 4);
    show("a new file", linkat(t, "", AT_FDCWD, "t", AT_EMPTY_PATH));
    int x = open(".", O_TMPFILE | O_RDWR | O_EXCL, 0640);
    show("an exclusive new file", linkat(x, "", AT_FDCWD, "x", AT_EMPTY_PATH));
    show("over a name", linkat(fd, "", AT_FDCWD, "t", AT_EMPTY_PATH));
    show("with a bad flag", linkat(fd, "", AT_FDCWD, "g", AT_EMPTY_PATH | 1));
    int r = open("theirs", O_RDONLY);
    show("another's file", linkat(r, "", AT_FDCWD, "r2", AT_EMPTY_PATH));
    return 0;
}
"#;

/// Another user links the files it opened by their descriptors as the
/// kernel lets it natively (since Linux 6.10, a file opened with the
/// caller's credentials). The server opened a served file, with its own,
/// so the kernel refused: `linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH)`
/// of a file the program had just opened failed with `ENOENT` (and said
/// `ENOENT` where natively `EEXIST` over an existing name and `EPERM` for
/// another user's file; 3 of 6 calls differed, and the link was not
/// made).
#[test]
fn ferry_run_another_user_links_files_by_descriptor_like_native() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let setpriv = Command::new("sh").args(["-c", "command -v setpriv"]).output().is_ok_and(|o| o.status.success());
    if !root || !setpriv || !have_cc("ferry_run_another_user_links_files_by_descriptor_like_native") {
        eprintln!("skipped ferry_run_another_user_links_files_by_descriptor_like_native: needs root, setpriv and cc");
        return;
    }
    let src = scratch("linkfd-src");
    std::fs::write(src.join("c.c"), LINK_BY_DESCRIPTOR_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "c", "c.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("c");
    let script = format!(
        "echo root > theirs && chmod 644 theirs && chmod 777 \"$D\" && \
         setpriv --reuid=65534 --regid=65534 --clear-groups {}",
        exe.to_str().unwrap()
    );
    let (native, served) = native_and_served("linkfd", &script, "find . -printf '%p %s %n %u\\n' | sort; cat f2 t");
    let _ = std::fs::remove_dir_all(&src);
    // Older kernels refuse the link to another user whatever opened it.
    if native.contains("an open file: ok") {
        assert!(native.contains("a new file: ok\n") && native.contains("./t 4 1 nobody"), "{native}");
    }
    assert_eq!(served, native);
}

/// Under a limit of 56 descriptors with 36 files open, the calls besides
/// `open` that make descriptors: epoll, eventfd, memfd, inotify, timerfd
/// and signalfd descriptors, temporary files by `mkstemp` and its
/// relatives (whose template must be unchanged when they are made
/// again), and `tmpfile`.
const MORE_DESCRIPTORS_BESIDES_FILES_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
static void show(const char *what, int fd) { printf("%s %s\n", what, fd >= 0 ? "ok" : strerror(errno)); }
int main(void) {
    struct rlimit l;
    getrlimit(RLIMIT_NOFILE, &l);
    l.rlim_cur = 56;
    setrlimit(RLIMIT_NOFILE, &l);
    int fds[36];
    char name[16];
    for (int i = 0; i < 36; i++) {
        snprintf(name, sizeof name, "f%d", i);
        fds[i] = open(name, O_RDWR | O_CREAT, 0644);
        dprintf(fds[i], "%d;", i);
    }
    show("epoll_create1", epoll_create1(EPOLL_CLOEXEC));
    show("epoll_create", epoll_create(1));
    show("eventfd", eventfd(0, 0));
    show("memfd_create", memfd_create("m", 0));
    show("inotify_init1", inotify_init1(0));
    show("inotify_init", inotify_init());
    show("timerfd_create", timerfd_create(CLOCK_MONOTONIC, 0));
    sigset_t s;
    sigemptyset(&s);
    show("signalfd", signalfd(-1, &s, 0));
    char t1[] = "tmpXXXXXX", t2[] = "tmpXXXXXX", t3[] = "tmpXXXXXX.s", t4[] = "tmpXXXXXX.s";
    show("mkstemp", mkstemp(t1));
    show("mkostemp", mkostemp(t2, O_CLOEXEC));
    show("mkstemps", mkstemps(t3, 2));
    show("mkostemps", mkostemps(t4, 2, 0));
    FILE *f = tmpfile();
    show("tmpfile", f ? fileno(f) : -1);
    long sum = 0;
    for (int i = 0; i < 36; i++)
        sum += lseek(fds[i], 0, SEEK_CUR);
    printf("offsets %ld\n", sum);
    return 0;
}
"#;

/// A program near its descriptor limit with files open under the served
/// directory makes the descriptors of the C library's other calls as
/// natively: those calls do not open names, and with the library's two
/// descriptors of each served file taking the numbers they failed with
/// `EMFILE` (a C program under a limit of 56 holding 36 files: after
/// `epoll_create1`, every one of `epoll_create`, `eventfd`,
/// `memfd_create`, `inotify_init1`, `inotify_init`, `timerfd_create`,
/// `signalfd`, `mkstemp`, `mkostemp`, `mkstemps`, `mkostemps` and
/// `tmpfile` failed where natively each succeeds).
#[test]
fn ferry_run_a_program_near_its_limit_makes_other_descriptors_like_native() {
    if !have_cc("ferry_run_a_program_near_its_limit_makes_other_descriptors_like_native") {
        return;
    }
    let src = scratch("nearlimit2-src");
    std::fs::write(src.join("c.c"), MORE_DESCRIPTORS_BESIDES_FILES_C).unwrap();
    let built = Command::new("cc").args(["-O2", "-o", "c", "c.c"]).current_dir(&src).status().unwrap();
    assert!(built.success(), "cc failed");
    let exe = src.join("c");
    let (native, served) = native_and_served("nearlimit2", exe.to_str().unwrap(), "ls | wc -l; ls | grep -c '^tmp'");
    let _ = std::fs::remove_dir_all(&src);
    assert!(native.contains("epoll_create1 ok\n") && native.contains("tmpfile ok\noffsets"), "{native}");
    assert_eq!(served, native);
}
