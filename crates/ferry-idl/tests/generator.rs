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
