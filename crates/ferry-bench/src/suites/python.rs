//! `ferry bench python`: suite `python`, measured by the Python script
//! `python/bench/bench.py` (a Python program has to do the Python side), run
//! by this program so that its records land in the same results file as the
//! other suites'.
//!
//! Cases (the script's docstring has the details): `oneshot`, 256 MiB, touch
//! `read`, impls `ferry-py`, `mp-pipe-pickle`, `mp-shared-memory`,
//! `pickle5-oob`; `roundtrip`, 64 bytes, impls `ferry-py`, `ferry-py-port`,
//! `mp-pipe`. The script needs ferry's Python package and NumPy; the
//! interpreter is the first of `$FERRY_PYTHON`, `$VIRTUAL_ENV/bin/python`,
//! the virtual environment `python/test.sh` makes (`target/python-venv`,
//! beside this program's build directory only if no one else may change
//! it) and `python3` that can import both. Without one, every record of the
//! suite is written as skipped, with the reason and how to get the
//! package in `extra.skipped`, and the same text goes to stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::record::{Placement, Record, Touch};

/// The script, in the source tree this program was built from
/// (`$FERRY_PY_BENCH` overrides it).
fn script() -> PathBuf {
    std::env::var_os("FERRY_PY_BENCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/bench/bench.py"))
}

/// How to get what the suite needs.
pub const HOW: &str = "build ferry's Python package first: `python/test.sh` (it makes the virtual environment \
target/python-venv with maturin, numpy and the package), or in any virtual environment \
`pip install maturin numpy && maturin develop --release --manifest-path python/Cargo.toml`; \
or point FERRY_PYTHON at an interpreter that can `import ferry, numpy`";

/// Interpreters to try, in order.
fn candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("FERRY_PYTHON") {
        v.push(PathBuf::from(p));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        v.push(Path::new(&venv).join("bin/python"));
    }
    // This program in target/<profile>/, the venv in target/python-venv:
    // found, not named, so run only if no one else may change it
    // (`ferry::spawn::nobody_else_controls`). With this program in
    // `$TMPDIR/build/`, that is `$TMPDIR/python-venv`, which any user may make.
    if let Some(target) = std::env::current_exe().ok().and_then(|e| e.parent()?.parent().map(Path::to_path_buf)) {
        let venv = target.join("python-venv/bin/python");
        if ferry::spawn::nobody_else_controls(&venv) {
            v.push(venv);
        }
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        v.push(Path::new(&t).join("python-venv/bin/python"));
    }
    v.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/python-venv/bin/python"));
    v.push(PathBuf::from("python3"));
    v
}

/// The first interpreter that imports ferry's package and NumPy.
fn interpreter() -> Option<PathBuf> {
    candidates().into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import ferry, numpy"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The suite's records, all skipped for `why`.
fn skipped(mib: u64, why: &str) -> Vec<Record> {
    let mut v = Vec::new();
    for imp in ["ferry-py", "mp-pipe-pickle", "mp-shared-memory", "pickle5-oob"] {
        v.push(Record::new("python", "oneshot", imp, Placement::Unpinned).bytes(mib << 20).touch(Touch::Read).extra("skipped", why));
    }
    for imp in ["ferry-py", "ferry-py-port", "mp-pipe"] {
        v.push(Record::new("python", "roundtrip", imp, Placement::Unpinned).bytes(64).extra("skipped", why));
    }
    v
}

/// Runs the script (`--quick` for brief runs, `mib` MiB for `oneshot`) and
/// returns its records, or the suite's records skipped with the reason.
pub fn run(quick: bool, mib: u64) -> Vec<Record> {
    let script = script();
    if !script.exists() {
        let why = format!("the Python benchmark script is not at {} (set FERRY_PY_BENCH)", script.display());
        eprintln!("ferry bench python: {why}");
        return skipped(mib, &why);
    }
    let Some(python) = interpreter() else {
        let why = format!("no Python interpreter here can import ferry and numpy; {HOW}");
        eprintln!("ferry bench python: {why}");
        return skipped(mib, &why);
    };
    let dir = match private_temp_dir() {
        Ok(d) => d,
        Err(e) => return skipped(mib, &format!("no temporary directory for the script's records: {e}")),
    };
    let out = dir.path().join("records.json");
    let mut cmd = Command::new(&python);
    cmd.arg(&script).arg("--json").arg(&out).arg("--mib").arg(mib.to_string());
    if quick {
        cmd.arg("--quick");
    }
    let status = cmd.status();
    let text = std::fs::read_to_string(&out);
    drop(dir);
    match (status, text) {
        (Ok(s), Ok(text)) if s.success() => match crate::record::from_json_array(&text) {
            Ok(records) => records,
            Err(e) => skipped(mib, &format!("the script's records do not follow the schema: {e}")),
        },
        (Ok(s), _) => skipped(mib, &format!("{} {} failed ({s})", python.display(), script.display())),
        (Err(e), _) => skipped(mib, &format!("cannot run {}: {e}", python.display())),
    }
}

/// A new directory of this user's alone (mode 0700) in the temporary
/// directory, `ferry-bench-python-` and random characters (`tempfile`),
/// removed when dropped, for the script's records and the machine
/// description it writes beside them (`FILE.meta.json`). The temporary
/// directory is shared: a file of a name made there with care still had
/// its sidecar's name known ahead, where another user's symbolic link made
/// the script, run by root, write over a file only root may write.
fn private_temp_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("ferry-bench-python-").tempdir()
}
