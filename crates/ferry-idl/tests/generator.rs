//! The `ferry-idl-c` command as the documentation shows it:
//! `ferry-idl-c tests/idl/example.kv.json OUT_DIR kv`.

use std::path::Path;
use std::process::Command;

/// An `OUT_DIR` that does not exist yet is made, as a build's output
/// directory is: the command wrote nothing and failed with "cannot write
/// OUT_DIR/kv.h: No such file or directory" before.
#[test]
fn the_generator_makes_a_missing_output_directory() {
    let desc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/idl/example.kv.json");
    let base = std::env::temp_dir().join(format!("ferry-idl-c-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let out_dir = base.join("stubs");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry-idl-c")).arg(&desc).arg(&out_dir).arg("kv").output().expect("run ferry-idl-c");
    let (header, source) = (out_dir.join("kv.h"), out_dir.join("kv.c"));
    let made = header.is_file() && source.is_file();
    let _ = std::fs::remove_dir_all(&base);
    assert!(out.status.success(), "ferry-idl-c failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(made, "ferry-idl-c did not write {} and {}", header.display(), source.display());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&header.display().to_string()) && said.contains(&source.display().to_string()), "{said}");
}

/// `--help` prints the usage on standard output and succeeds, as a
/// command asked for help does; a wrong number of arguments prints it on
/// standard error and fails with 2.
#[test]
fn help_is_printed_and_succeeds_and_bad_usage_fails() {
    let help = Command::new(env!("CARGO_BIN_EXE_ferry-idl-c")).arg("--help").output().expect("run ferry-idl-c");
    assert!(help.status.success(), "--help failed: {:?}", help.status);
    assert!(String::from_utf8_lossy(&help.stdout).contains("usage: ferry-idl-c DESCRIPTION.json OUT_DIR"), "{help:?}");
    let bad = Command::new(env!("CARGO_BIN_EXE_ferry-idl-c")).arg("only-one").output().expect("run ferry-idl-c");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("usage:"), "{bad:?}");
}
