//! `ferryd`: the ferry daemon. Serves the name service on the bootstrap
//! socket and, when asked, the file server, logging each event to standard
//! error.
//!
//! By default it serves one user at that user's path (what
//! `ferry::Bootstrap::connect` starts on demand, with `--detach`); with
//! `--system`, run by root, it serves every user at a system path, names
//! scoped by each caller's kernel-reported uid and budgets per user.

mod files;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

/// Where `ferryd --system` listens unless `--socket` says otherwise.
const SYSTEM_PATH: &str = "/run/ferry/bootstrap";

/// The ferry daemon: the name service and the system servers.
///
/// Serves ferry's name service at PATH: by default this user's path
/// ($FERRY_BOOTSTRAP, else $XDG_RUNTIME_DIR/ferry/bootstrap, else
/// $TMPDIR/ferry-UID/bootstrap), socket mode 0600 in a directory only this
/// user may enter. With --system (root only) at /run/ferry/bootstrap, socket
/// mode 0666 in a root-owned directory of mode 0755, for every user: each
/// user's names are their own (by the uid the kernel reports) and each user
/// has the budgets below.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Args {
    /// Listen at PATH instead of the default.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve the files beneath DIR as by-value memory objects,
    /// registered as the system name "files" (visible to every user; each
    /// request is checked against the caller's uid and gid).
    #[arg(long, value_name = "DIR")]
    files: Option<PathBuf>,
    /// Serve every user of the machine (root only).
    #[arg(long)]
    system: bool,
    /// Live registrations one user may hold.
    #[arg(long, value_name = "N", default_value_t = ferry::Limits::default().names_per_user)]
    max_names: usize,
    /// Connections one user may hold open.
    #[arg(long, value_name = "N", default_value_t = ferry::Limits::default().connections_per_user)]
    max_connections: usize,
    /// Descriptors below the open-file limit kept for the daemon itself.
    #[arg(long, value_name = "N", default_value_t = ferry::Limits::default().fd_reserve)]
    fd_reserve: usize,
    /// Exit after SECS seconds with no connection and no registered name
    /// (programs that start the daemon on demand pass 600); by default the
    /// daemon serves until it is stopped.
    #[arg(long, value_name = "SECS")]
    idle_exit: Option<u64>,
    /// Start in the background, in a new session, and return once the
    /// daemon answers (how programs start it on demand). What it says while
    /// starting comes to standard error; from then on it logs to the file
    /// --log names, so it holds none of the caller's terminal or pipes.
    #[arg(long)]
    detach: bool,
    /// Where a daemon started with --detach logs once it serves (appended;
    /// made with mode 0600) [default: ferryd.log beside the socket].
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Size in bytes past which a detached daemon's log is renamed to
    /// FILE.1 (replacing the one before) and begun anew, so the two stay
    /// near this size however many clients connect [default: 4194304].
    #[arg(long, value_name = "BYTES")]
    log_limit: Option<u64>,
    /// Lines about one user's doings (its connections, malformed requests,
    /// names registered and gone) logged at most each --log-every; the
    /// rest are counted, and the count is logged when that time is over.
    #[arg(long, value_name = "N", default_value_t = ferry::nameserver::LOG_LINES_PER_USER)]
    log_lines: u32,
    /// The time in seconds --log-lines is counted over.
    #[arg(long, value_name = "SECS", default_value_t = ferry::nameserver::LOG_EVERY.as_secs())]
    log_every: u64,
    /// (internal) The background half of --detach.
    #[arg(long, hide = true)]
    new_session: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.system && !rustix::process::geteuid().is_root() {
        eprintln!("ferryd: --system serves every user and must run as root");
        return ExitCode::from(2);
    }
    let path = match (&args.socket, args.system) {
        (Some(p), _) => p.clone(),
        (None, true) => PathBuf::from(SYSTEM_PATH),
        (None, false) => ferry::bootstrap::default_path(),
    };
    if !(args.detach || args.new_session) && (args.log.is_some() || args.log_limit.is_some()) {
        eprintln!("ferryd: --log and --log-limit go with --detach (without it, the log is standard error)");
        return ExitCode::from(2);
    }
    let log = args.log.clone().unwrap_or_else(|| path.with_file_name("ferryd.log"));
    if args.detach {
        return detach(&path, &log);
    }
    if args.new_session {
        // Leaves the caller's session: no terminal, no hang-up from it.
        let _ = rustix::process::setsid();
    }
    raise_nofile_limit();
    if args.system {
        if let Err(e) = system_dir(&path) {
            eprintln!("ferryd: {e}");
            return ExitCode::from(1);
        }
    }
    let mode = if args.system { 0o666 } else { 0o600 };
    let mut server = match ferry::NameServer::bind_with_mode(&path, mode) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferryd: cannot listen at {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    server.set_limits(ferry::Limits {
        names_per_user: args.max_names,
        connections_per_user: args.max_connections,
        fd_reserve: args.fd_reserve,
    });
    server.set_logging(true);
    server.set_log_budget(args.log_lines, Duration::from_secs(args.log_every.max(1)));
    if let Some(secs) = args.idle_exit {
        if args.files.is_some() {
            eprintln!("ferryd: --idle-exit is ignored with --files: the file server's name is always held");
        }
        server.set_idle_exit(Some(Duration::from_secs(secs)));
    }
    let l = server.limits();
    eprintln!(
        "ferryd: {} daemon; per user at most {} names and {} connections; {} descriptors kept in reserve",
        if args.system { "system" } else { "per-user" },
        l.names_per_user,
        l.connections_per_user,
        l.fd_reserve
    );
    if let Some(root) = args.files {
        match files::start(&root) {
            Ok((right, minter)) => {
                // Each lookup gets a port of its own: what one user does to
                // its right (shut its socket, fill its queue) reaches no one
                // else's.
                let mint = Box::new(move |uid| files::mint_for(&minter, uid));
                if let Err(e) = server.add_system_service(files::NAME, right, mint) {
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
    if args.new_session {
        // Serving: the rest of the log goes to the file, and the pipe the
        // starting half reads closes (its end of `detach`).
        if let Err(e) = log_to(&log, args.log_limit.unwrap_or(LOG_LIMIT)) {
            eprintln!("ferryd: cannot log to {}: {e}", log.display());
            return ExitCode::from(1);
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

/// Raises the soft open-file limit to the hard one: every registration and
/// connection is a descriptor, and the budgets are what bound them.
fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: lim.maximum, maximum: lim.maximum });
    }
}

/// Creates the system socket's directory (root's, mode 0755) if missing.
fn system_dir(path: &Path) -> Result<(), String> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
    if !dir.exists() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Size past which a detached daemon's log is renamed to `LOG.1` (the one
/// before it dropped) and begun anew, unless `--log-limit` says otherwise:
/// the file and its one predecessor stay near this size however many
/// clients connect. A system daemon's log is on `/run`, in memory, where a
/// user connecting in a loop would otherwise fill it.
const LOG_LIMIT: u64 = 4 << 20;

/// How often the log's size is looked at.
const LOG_CHECK: Duration = Duration::from_secs(1);

/// Opens `log` for appending: made with mode 0600, never through a
/// symbolic link, and only if the file is this user's. Every user's
/// connections and registrations are logged; a file another user made
/// first where the log goes (in a directory every user may write to) was
/// appended to, and that user read them.
fn open_log(log: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32).open(log)?;
    let (owner, me) = (file.metadata()?.uid(), rustix::process::geteuid().as_raw());
    if owner != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("it is owned by uid {owner}, not by this user (uid {me}): another user may read what is logged there"),
        ));
    }
    Ok(file)
}

/// Sends standard error to the end of `log` and standard output to
/// `/dev/null`, and keeps the log near `limit` bytes from then on.
fn log_to(log: &Path, limit: u64) -> std::io::Result<()> {
    let file = open_log(log)?;
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    rustix::stdio::dup2_stdout(&null)?;
    rustix::stdio::dup2_stderr(&file)?;
    eprintln!("ferryd: serving in the background, pid {}", std::process::id());
    let log = log.to_owned();
    std::thread::Builder::new().name("ferryd-log".into()).spawn(move || keep_log_bounded(&log, limit, LOG_CHECK))?;
    Ok(())
}

/// Every `every`, if standard error (the log at `log`) has grown past
/// `limit`, renames it to `LOG.1` and points standard error at a new file
/// at `log`. A failure is logged and tried again at the next look.
fn keep_log_bounded(log: &Path, limit: u64, every: Duration) {
    let mut old = log.as_os_str().to_owned();
    old.push(".1");
    loop {
        std::thread::sleep(every);
        let big = rustix::fs::fstat(rustix::stdio::stderr()).is_ok_and(|st| st.st_size as u64 > limit);
        if !big {
            continue;
        }
        let turned = std::fs::rename(log, &old).and_then(|()| open_log(log)).and_then(|f| rustix::stdio::dup2_stderr(&f).map_err(Into::into));
        match turned {
            Ok(()) => eprintln!("ferryd: log begun anew; the one before is {}", Path::new(&old).display()),
            Err(e) => eprintln!("ferryd: cannot begin the log anew: {e}"),
        }
    }
}

/// `--detach`: starts the daemon again in the background (it calls
/// `setsid` itself) and returns once it serves at `path`, or once it has
/// failed. What the daemon says while starting (its errors included)
/// comes through a pipe to this process's standard error; once it serves
/// it logs to `log` and the pipe closes, so the daemon keeps none of the
/// caller's terminal or pipes (`x=$(ferryd --detach 2>&1)` returns). The
/// background daemon is not a child of the caller, so it outlives whoever
/// started it.
fn detach(path: &Path, log: &Path) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ferryd: cannot find my own binary: {e}");
            return ExitCode::from(1);
        }
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).filter(|a| a != "--detach").collect();
    let mut child = match std::process::Command::new(exe)
        .arg("--new-session")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ferryd: cannot start the daemon: {e}");
            return ExitCode::from(1);
        }
    };
    // Passes on what the daemon says until it serves (or stops).
    let said = child.stderr.take().map(|from| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::BufReader::new(from), &mut std::io::stderr());
        })
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if let Some(t) = said {
                    let _ = t.join();
                }
                eprintln!("ferryd: the daemon stopped at start ({status})");
                return ExitCode::from(1);
            }
            Ok(None) if said.as_ref().is_some_and(|t| t.is_finished()) && ferry::Bootstrap::connect_to(path).is_ok() => {
                eprintln!("ferryd: serving {} in the background (pid {}); its log: {}", path.display(), child.id(), log.display());
                return ExitCode::SUCCESS;
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                // Not serving in time: stopped, so that it does not go on
                // with the caller's pipe as its standard error.
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("ferryd: the daemon did not serve at {} within 10 s; stopped it", path.display());
                return ExitCode::from(1);
            }
        }
    }
}
