//! `ferry-idl-c DESCRIPTION.json OUT_DIR [PREFIX]`: writes the C stubs of
//! an interface (`PREFIX.h`, `PREFIX.c`, over ferry's C API; `OUT_DIR` is
//! made if missing) from the
//! description its Rust definition emits (`describe()`); see
//! `ferry_idl::c` and `docs/interfaces.md`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    const USAGE: &str = "usage: ferry-idl-c DESCRIPTION.json OUT_DIR [PREFIX]";
    if args.first().is_some_and(|a| a == "--help" || a == "-h") {
        println!("{USAGE}\nWrites OUT_DIR/PREFIX.h and OUT_DIR/PREFIX.c, C stubs of the interface a Rust definition's describe() emitted (PREFIX: the interface's name, '.' as '_'); see docs/interfaces.md.");
        return ExitCode::SUCCESS;
    }
    if args.len() < 2 || args.len() > 3 {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let text = match std::fs::read_to_string(&args[0]) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ferry-idl-c: cannot read {}: {e}", args[0]);
            return ExitCode::from(1);
        }
    };
    let desc: serde_json::Value = match serde_json::from_str(&text) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ferry-idl-c: {} is not JSON: {e}", args[0]);
            return ExitCode::from(1);
        }
    };
    let stubs = match ferry_idl::c::generate(&desc, args.get(2).map(String::as_str)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferry-idl-c: {e}");
            return ExitCode::from(1);
        }
    };
    let dir = std::path::Path::new(&args[1]);
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("ferry-idl-c: cannot make {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    for (name, text) in [(&stubs.header_name, &stubs.header), (&stubs.source_name, &stubs.source)] {
        if let Err(e) = std::fs::write(dir.join(name), text) {
            eprintln!("ferry-idl-c: cannot write {}: {e}", dir.join(name).display());
            return ExitCode::from(1);
        }
    }
    println!("{}\n{}", dir.join(&stubs.header_name).display(), dir.join(&stubs.source_name).display());
    ExitCode::SUCCESS
}
