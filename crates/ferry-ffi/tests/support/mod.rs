//! Building C programs against the library the tests (or the benchmark)
//! run with: the system C compiler (`$CC`, else `cc`), the generated header
//! and `libferry.so` from the same target directory, linked with an rpath
//! so the program finds it when run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The crate's directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where cargo puts `libferry.so` for the profile this program was built
/// in (`target/<profile>`, two levels above a test binary in `deps/` or an
/// example in `examples/`), after making sure it is built from the current
/// source: cargo does not build a library that is only a `cdylib` and a
/// `staticlib` for the tests of its own package, so the first call runs
/// `cargo build -p ferry-ffi` in the same profile (a no-op when fresh).
pub fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("current exe");
            let dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
            let profile = match dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") => "dev".to_owned(),
                Some(other) => other.to_owned(),
                None => panic!("no profile directory above {}", exe.display()),
            };
            let out = Command::new(env!("CARGO"))
                .args(["build", "--quiet", "-p", "ferry-ffi", "--profile", &profile])
                .output()
                .expect("run cargo");
            assert!(out.status.success(), "cargo build -p ferry-ffi failed:\n{}", String::from_utf8_lossy(&out.stderr));
            assert!(dir.join("libferry.so").exists(), "cargo built no libferry.so in {}", dir.display());
            dir
        })
        .clone()
}

/// Compiles `sources` (relative to the crate) into an executable named
/// `name` under `out_dir` against `libferry.so`, warnings as errors;
/// panics with the compiler's output if it fails.
pub fn compile(name: &str, sources: &[&str], out_dir: &Path) -> PathBuf {
    let lib = lib_dir();
    link(name, sources, out_dir, &[format!("-L{}", lib.display()), "-lferry".into(), format!("-Wl,-rpath,{}", lib.display())])
}

/// As [`compile`], against `libferry.a`: the program carries ferry in it.
pub fn compile_static(name: &str, sources: &[&str], out_dir: &Path) -> PathBuf {
    let lib = lib_dir().join("libferry.a");
    link(name, sources, out_dir, &[lib.display().to_string(), "-ldl".into(), "-lm".into()])
}

fn link(name: &str, sources: &[&str], out_dir: &Path, libs: &[String]) -> PathBuf {
    let out = out_dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = crate_dir();
    let result = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-pthread"])
        .arg(format!("-I{}", dir.join("include").display()))
        .arg(format!("-I{}", dir.join("examples/c").display()))
        .args(sources.iter().map(|s| dir.join(s)))
        .arg("-o")
        .arg(&out)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(result.status.success(), "compiling {name} failed:\n{}", String::from_utf8_lossy(&result.stderr));
    out
}

/// Starts a program with stdout piped, pointed at a name server.
pub fn spawn(program: &Path, args: &[&str], bootstrap: &Path) -> Child {
    Command::new(program)
        .args(args)
        .env("FERRY_BOOTSTRAP", bootstrap)
        .env("FERRY_NO_EMBED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()))
}

/// Waits for a child at most `limit`, killing it after; returns its output.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => break,
            None if start.elapsed() > limit => {
                let _ = child.kill();
                break;
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    child.wait_with_output().expect("collect output")
}

/// Panics with the program's output unless it exited with status 0;
/// returns its stdout.
pub fn succeeded(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
