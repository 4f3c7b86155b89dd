//! `ferry names`: what is registered with the name service, with each
//! registration's owner and queue depth.

use std::process::ExitCode;

/// Runs `ferry names [--socket PATH]`.
pub fn main(args: &[String]) -> ExitCode {
    let mut path = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--socket" => path = it.next().map(std::path::PathBuf::from),
            "-h" | "--help" => {
                println!("usage: ferry names [--socket PATH]\n\nLists the names registered with ferryd for this user (all users for root).\nThe daemon is found at $FERRY_BOOTSTRAP or the default path; no daemon is started.");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("ferry names: unknown argument {other:?}");
                return ExitCode::from(2);
            }
        }
    }
    let path = path.unwrap_or_else(ferry::bootstrap::default_path);
    let mut bs = match ferry::Bootstrap::connect_to(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("ferry names: no name server at {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    match bs.list() {
        Ok(entries) => {
            println!("{:<32} {:>6} {:>10} {:>12}", "NAME", "UID", "OWNER PID", "QUEUED B");
            for e in &entries {
                println!("{:<32} {:>6} {:>10} {:>12}", e.name, e.uid, e.owner_pid, e.queued_bytes);
            }
            if entries.is_empty() {
                println!("(no names registered)");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferry names: {e}");
            ExitCode::from(1)
        }
    }
}
