//! `ferry names`: what is registered with the name service, with each
//! registration's owner and queue depth.

use std::process::ExitCode;

/// `ferry names [--socket PATH]`.
#[derive(Debug, clap::Args)]
#[command(long_about = "Lists the names registered with ferryd for this user (all users for root), \
with each registration's owner pid and queue depth, then, when ferry-netd runs, its links, \
remote names (NAME@HOST, each a proxy) and exported names. The daemon is found at $FERRY_BOOTSTRAP \
or the default path; no daemon is started.")]
pub struct Args {
    /// The name server's socket (default: $FERRY_BOOTSTRAP, then the default path).
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
}

/// Runs `ferry names`.
pub fn main(args: &Args) -> ExitCode {
    let path = args.socket.clone();
    let path = path.unwrap_or_else(ferry::bootstrap::default_path);
    let mut bs = match ferry::Bootstrap::connect_to(&path) {
        Ok(b) => b,
        Err(e) => {
            match e {
                // These already name the path.
                ferry::NameError::NotRunning { .. } | ferry::NameError::Impostor { .. } | ferry::NameError::UnsafeDirectory { .. } => {
                    eprintln!("ferry names: {e}")
                }
                _ => eprintln!("ferry names: the name server at {}: {e}", path.display()),
            }
            return ExitCode::from(1);
        }
    };
    match bs.list() {
        Ok(entries) => {
            println!("{:<32} {:>6} {:>10} {:>12}", "NAME", "UID", "OWNER PID", "QUEUED B");
            for e in &entries {
                // System names (the daemon's own, and root's
                // `register_system`) belong to no user.
                let uid = if e.uid == ferry::nameserver::SYSTEM_UID { "system".to_owned() } else { e.uid.to_string() };
                println!("{:<32} {:>6} {:>10} {:>12}", shown(&e.name), uid, e.owner_pid, e.queued_bytes);
            }
            if entries.is_empty() {
                println!("(no names registered)");
            }
            crate::netview::show_names(&mut bs);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferry names: {e}");
            ExitCode::from(1)
        }
    }
}

/// A name as the listing shows it: as it is when it is all visible ASCII,
/// else quoted, with every other character (spaces included) and any
/// quote or backslash escaped (`\u{20}`). Root's listing holds every
/// user's names, which their users choose: a name of spaces laid out as
/// the listing's columns read as a row of its own (the system's `files`,
/// registered by pid 1), and one of blank-looking letters could do the
/// same.
fn shown(name: &str) -> String {
    if name.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\') {
        return name.to_owned();
    }
    let mut s = String::from("\"");
    for c in name.chars() {
        if c.is_ascii_graphic() && c != '"' && c != '\\' {
            s.push(c);
        } else {
            s.extend(c.escape_unicode());
        }
    }
    s.push('"');
    s
}
