//! `ferry bench` and `ferry probe`: the benchmark suites, their peers and
//! the machine probe are a program of their own, `ferry-bench` (built from
//! `crates/ferry-bench`), so that `ferry` links the library alone. These
//! subcommands find that program and run it in place of `ferry` with the
//! same arguments; when it is not installed they say how to get it.
//!
//! Where it is looked for, in order: the file `FERRY_BENCH` names (which
//! must then exist), `ferry-bench` in the directory of the running `ferry`
//! (where `cargo install` and `cargo build` put both), then `PATH`.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The program that holds the benchmarks and the probe.
pub const PROGRAM: &str = "ferry-bench";

/// The environment variable that names the program explicitly.
pub const ENV: &str = "FERRY_BENCH";

/// The arguments of `ferry bench` or `ferry probe`, passed on untouched
/// (`--help` included: the program that owns the options explains them).
#[derive(Debug, clap::Args)]
pub struct Forward {
    /// Arguments for `ferry-bench` (`--help` shows them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    args: Vec<OsString>,
}

/// Why `ferry-bench` could not be found.
#[derive(Debug)]
enum NotFound {
    /// `FERRY_BENCH` is set but names no executable file.
    BadEnv(PathBuf),
    /// Not beside `ferry`, not on `PATH`.
    Absent { beside: Option<PathBuf> },
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// [`is_executable`], for a program found rather than named: only one no
/// one else may change (`ferry::spawn::nobody_else_controls`).
fn is_trusted_executable(p: &Path) -> bool {
    is_executable(p) && ferry::spawn::nobody_else_controls(p)
}

/// Finds `ferry-bench` as the module documentation says.
fn locate(env: Option<&OsStr>, own: Option<&Path>, path: Option<&OsStr>) -> Result<PathBuf, NotFound> {
    if let Some(v) = env.filter(|v| !v.is_empty()) {
        // Absolute, so that a bare name means the file here, as checked,
        // not a search of PATH when it is run.
        let p = std::path::absolute(v).unwrap_or_else(|_| PathBuf::from(v));
        return if is_executable(&p) { Ok(p) } else { Err(NotFound::BadEnv(p)) };
    }
    let beside = own.and_then(Path::parent).map(|d| d.join(PROGRAM));
    if let Some(b) = beside.as_ref().filter(|b| is_trusted_executable(b)) {
        return Ok(b.clone());
    }
    let on_path = path.into_iter().flat_map(std::env::split_paths).map(|d| d.join(PROGRAM)).find(|p| is_trusted_executable(p));
    on_path.ok_or(NotFound::Absent { beside })
}

/// Runs `ferry-bench SUB ARGS…` in place of this process (its exit status
/// becomes ours), or explains how to install it.
pub fn main(sub: &str, fwd: &Forward) -> ExitCode {
    let own = std::env::current_exe().ok();
    let program = match locate(std::env::var_os(ENV).as_deref(), own.as_deref(), std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(NotFound::BadEnv(p)) => {
            eprintln!(
                "ferry {sub}: {ENV}={} is not an executable file; point it at the `{PROGRAM}` program, or unset it to look beside `ferry` and on PATH",
                p.display()
            );
            return ExitCode::from(1);
        }
        Err(NotFound::Absent { beside }) => {
            let beside = beside.map_or_else(|| "beside `ferry`".to_string(), |b| b.display().to_string());
            eprintln!(
                "ferry {sub}: the benchmarks and the probe are not installed.\n\
                 They are a separate program, `{PROGRAM}`, so that `ferry` itself stays small. Install it\n\
                 next to `ferry` from a ferry source tree with\n\n    \
                 cargo install --path crates/{PROGRAM}\n\n\
                 or build it in place with `cargo build --release -p {PROGRAM}` and point {ENV} at\n\
                 target/release/{PROGRAM}. Looked for {beside}, then `{PROGRAM}` on PATH; {ENV} is unset."
            );
            return ExitCode::from(1);
        }
    };
    // argv[0] is `ferry`, so the program's usage and help say `ferry bench`.
    let err = std::process::Command::new(&program).arg0("ferry").arg(sub).args(&fwd.args).exec();
    eprintln!("ferry {sub}: cannot run {}: {err}", program.display());
    ExitCode::from(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ferry-cli-locate-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn program_in(dir: &Path, mode: u32) -> PathBuf {
        let p = dir.join(PROGRAM);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn the_variable_then_beside_then_path() {
        let (own_dir, path_dir, empty) = (temp_dir("own"), temp_dir("path"), temp_dir("empty"));
        let own = own_dir.join("ferry");
        let on_path = program_in(&path_dir, 0o755);
        let path = std::env::join_paths([&empty, &path_dir]).unwrap();
        // Only on PATH.
        assert_eq!(locate(None, Some(&own), Some(&path)).unwrap(), on_path);
        // Beside `ferry` wins over PATH; a file that cannot run does not count.
        let beside = program_in(&own_dir, 0o644);
        assert_eq!(locate(None, Some(&own), Some(&path)).unwrap(), on_path);
        std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(locate(None, Some(&own), Some(&path)).unwrap(), beside);
        // The variable wins over both, and must name something that runs.
        assert_eq!(locate(Some(on_path.as_os_str()), Some(&own), Some(&path)).unwrap(), on_path);
        let missing = empty.join("nothing");
        assert!(matches!(locate(Some(missing.as_os_str()), Some(&own), Some(&path)), Err(NotFound::BadEnv(p)) if p == missing));
        // A bare name is the file in the current directory, made absolute
        // so that running it does not search PATH instead (the only test
        // in this binary, so changing the directory disturbs no other).
        std::env::set_current_dir(&path_dir).unwrap();
        assert_eq!(locate(Some(OsStr::new(PROGRAM)), Some(&own), None).unwrap(), on_path);
        // An empty variable is as good as unset.
        assert_eq!(locate(Some(OsStr::new("")), Some(&own), Some(&path)).unwrap(), beside);
        // Nowhere: the answer says where it looked.
        assert!(matches!(locate(None, Some(&empty.join("ferry")), Some(empty.as_os_str())), Err(NotFound::Absent { beside: Some(b) }) if b == empty.join(PROGRAM)));
        for d in [own_dir, path_dir, empty] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
