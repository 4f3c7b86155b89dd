//! `ferryd`: the ferry daemon. Serves the name service on the bootstrap
//! socket and, when asked, the file server, in the foreground, logging each
//! event to standard error.

mod files;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: ferryd [--socket PATH] [--files DIR]

Serves ferry's name service at PATH (default: $FERRY_BOOTSTRAP, else
$XDG_RUNTIME_DIR/ferry/bootstrap, else $TMPDIR/ferry-UID/bootstrap,
with $TMPDIR defaulting to the system temporary directory).

--files DIR   also serve the files beneath DIR as by-value memory objects,
              registered as the system name \"files\" (visible to every user;
              each request is checked against the caller's uid and gid).";

fn main() -> ExitCode {
    let mut path = ferry::bootstrap::default_path();
    let mut files: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => match args.next() {
                Some(p) => path = p.into(),
                None => return usage("--socket needs a path"),
            },
            "--files" => match args.next() {
                Some(p) => files = Some(p.into()),
                None => return usage("--files needs a directory"),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    let mut server = match ferry::NameServer::bind(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferryd: cannot listen at {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    server.set_logging(true);
    if let Some(root) = files {
        match files::start(&root) {
            Ok(right) => {
                if let Err(e) = server.add_system_name(files::NAME, right) {
                    eprintln!("ferryd: cannot register the file server: {e}");
                    return ExitCode::from(1);
                }
                eprintln!("ferryd: file server for {} registered as {:?}", root.display(), files::NAME);
            }
            Err(e) => {
                eprintln!("ferryd: cannot serve files from {}: {e}", root.display());
                return ExitCode::from(1);
            }
        }
    }
    match server.serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferryd: stopped: {e}");
            ExitCode::from(1)
        }
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("ferryd: {msg}\n{USAGE}");
    ExitCode::from(2)
}
