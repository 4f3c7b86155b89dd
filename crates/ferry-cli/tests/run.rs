//! `ferry run --files DIR -- PROGRAM`: the command end to end, with a
//! shell whose redirections open files under DIR through the emulation
//! and hand them to the programs it execs, and the server it started gone
//! once the program is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn library() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_ferry"));
    let dir = bin.parent().expect("build directory");
    // The newer copy is this build's (`cargo test` does not refresh the
    // one `cargo build` left beside the programs).
    [dir.join("libferry_emul.so"), dir.join("deps/libferry_emul.so")]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .expect("libferry_emul.so is built beside ferry (a dev-dependency)")
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
    let dir = std::env::temp_dir().join(format!("ferry-run-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
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

#[test]
fn ferry_run_refuses_a_missing_directory_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--files", "/nonexistent/ferry-run-dir", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ferry-run-dir"), "{}", String::from_utf8_lossy(&out.stderr));
}
