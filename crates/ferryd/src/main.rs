//! `ferryd`: the ferry daemon. Serves the name service on the bootstrap
//! socket in the foreground and logs each event to standard error.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut path = ferry::bootstrap::default_path();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => match args.next() {
                Some(p) => path = p.into(),
                None => return usage("--socket needs a path"),
            },
            "-h" | "--help" => {
                println!("usage: ferryd [--socket PATH]\n\nServes ferry's name service at PATH (default: $FERRY_BOOTSTRAP,\nelse $XDG_RUNTIME_DIR/ferry/bootstrap, else /tmp/ferry-UID/bootstrap).");
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
    match server.serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferryd: stopped: {e}");
            ExitCode::from(1)
        }
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("ferryd: {msg}\nusage: ferryd [--socket PATH]");
    ExitCode::from(2)
}
