//! `include/ferry.h` is what cbindgen makes of this crate's source, never a
//! hand edit: this test regenerates it and fails when the checked-in copy
//! is stale. `FERRY_BLESS=1 cargo test -p ferry-ffi --test header` writes
//! the fresh header instead.

use std::path::Path;

fn generate() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn header_is_generated_from_the_source() {
    let fresh = generate();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/ferry.h");
    if std::env::var_os("FERRY_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("write include/ferry.h");
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == fresh,
        "include/ferry.h is stale: regenerate it with FERRY_BLESS=1 cargo test -p ferry-ffi --test header"
    );
}

/// Every entry point the library exports is declared in the header, and
/// the header declares nothing the library lacks.
#[test]
fn header_declares_every_exported_function() {
    let header = generate();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut exported = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("list src") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read source");
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if line.trim() == "#[no_mangle]" {
                let sig = lines.next().unwrap_or_default();
                let name = sig.split("fn ").nth(1).and_then(|s| s.split('(').next()).expect("a function after #[no_mangle]");
                exported.push(name.to_owned());
            }
        }
    }
    assert!(exported.len() > 40, "only {} exported functions found", exported.len());
    for name in &exported {
        assert!(header.contains(&format!(" {name}(")) || header.contains(&format!("*{name}(")), "{name} is missing from the header");
        assert!(name.starts_with("ferry_"), "{name} lacks the ferry_ prefix");
    }
    // Every function the header declares is exported.
    for line in header.lines().filter(|l| !l.trim_start().starts_with('*') && l.contains('(')) {
        let before = line.split('(').next().unwrap_or_default();
        let name = before.rsplit([' ', '*']).next().unwrap_or_default();
        if name.starts_with("ferry_") {
            assert!(exported.iter().any(|e| e == name), "the header declares {name}, which the library does not export");
        }
    }
}
