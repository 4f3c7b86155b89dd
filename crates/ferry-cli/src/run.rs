//! `ferry run --files DIR -- PROGRAM ARGS`: runs an unmodified program with
//! its file calls under `DIR` served by ferry's emulation server (see
//! `docs/emulation.md`).
//!
//! This command only sets up: it starts a server for `DIR` (a detached
//! process of this same binary, `ferry __emul-serve`, which lives while
//! any emulated process or open file needs it), puts the `ferry-emul`
//! preload library in the program's environment, starts the program under
//! the process port's hand-off filter, hands it a send right to the server
//! when its library asks (`ferry::process::HandOff`), and waits for it,
//! exiting with its status.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use ferry::spawn::CommandExt as _;
use ferry::{Item, Message, Timeout};

/// `ferry run --files DIR -- PROGRAM [ARGS...]`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit status: the program's own, or 128 plus the signal that killed it; \
125 if ferry could not set the program up (no such directory, no library, no server), \
126 if the program was found but could not be started, 127 if it was not found.")]
pub struct Args {
    /// The directory whose files the program reaches through ferry.
    #[arg(long, value_name = "DIR")]
    files: PathBuf,
    /// The preload library (default: $FERRY_EMUL_LIB, then
    /// libferry_emul.so beside this program or in ../lib).
    #[arg(long, value_name = "PATH")]
    library: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "PROGRAM")]
    program: Vec<std::ffi::OsString>,
}

/// `ferry __emul-serve DIR`: the server process (not for direct use).
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The served directory.
    dir: PathBuf,
    /// Start the server as a separate process and return at once.
    #[arg(long)]
    detach: bool,
}

/// Exit status when `ferry run` itself failed before the program ran (as
/// `env`, `timeout` and `chroot` report their own failures).
const SETUP_FAILED: u8 = 125;
/// Exit status when the program was found but could not be started.
const NOT_STARTED: u8 = 126;
/// Exit status when the program was not found.
const NOT_FOUND: u8 = 127;

fn library(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_owned());
    }
    if let Some(p) = std::env::var_os("FERRY_EMUL_LIB") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // Preloaded into the program, with its user's rights: only a file no
    // one else may change (`ferry::spawn::nobody_else_controls`).
    [dir.join("libferry_emul.so"), dir.join("../lib/libferry_emul.so")].into_iter().find(|p| p.is_file() && ferry::spawn::nobody_else_controls(p))
}

/// Runs `ferry run`.
pub fn main(args: &Args) -> ExitCode {
    let fail = |what: String| {
        eprintln!("ferry run: {what}");
        ExitCode::from(SETUP_FAILED)
    };
    let root = match args.files.canonicalize() {
        Ok(r) if r.is_dir() => r,
        Ok(r) => return fail(format!("{} is not a directory", r.display())),
        Err(e) => return fail(format!("{}: {e}", args.files.display())),
    };
    let Some(lib) = library(args.library.as_deref()) else {
        let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("libferry_emul.so").display().to_string()));
        let beside = beside.unwrap_or_else(|| "beside ferry".to_owned());
        return fail(format!(
            "libferry_emul.so not found beside ferry or in ../lib (one another user owns or may change is never loaded); \
             build it with `cargo build --release -p ferry-emul` and copy target/release/libferry_emul.so to {beside}, \
             or set FERRY_EMUL_LIB or pass --library"
        ));
    };
    let lib = lib.canonicalize().unwrap_or(lib);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(format!("cannot find this program: {e}")),
    };
    let (mut rx, tx) = match ferry::port() {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot make a port: {e}")),
    };
    let mut starter = Command::new(&exe);
    starter.arg("__emul-serve").arg(&root).arg("--detach").stdin(Stdio::null()).stdout(Stdio::null());
    if let Err(e) = starter.pass_right(&tx).and_then(|c| c.status()) {
        return fail(format!("cannot start the emulation server: {e}"));
    }
    drop(tx);
    let server = match rx.recv(Timeout::After(Duration::from_secs(30))) {
        Ok(mut m) => match m.take_items().pop() {
            Some(Item::Send(s)) => s,
            _ => return fail("the emulation server sent no right".into()),
        },
        Err(e) => return fail(format!("the emulation server did not start: {e}")),
    };
    let mut cmd = Command::new(&args.program[0]);
    cmd.args(&args.program[1..]);
    ferry::emulation::prepare_command_for_hand_off(&mut cmd, &root, &lib);
    // Signals are caught from now on, so that one sent while the program
    // starts neither kills this process nor is lost (see
    // `pass_signals_to`).
    ferry::process::pass_signals_to(0);
    let not_started = |e: std::io::Error| {
        eprintln!("ferry run: {}: {e}", Path::new(&args.program[0]).display());
        ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound { NOT_FOUND } else { NOT_STARTED })
    };
    let (mut child, port, handoff) = match ferry::process::spawn_with_hand_off(&mut cmd) {
        Ok(c) => c,
        // A process may have one seccomp listener: under another `ferry
        // run` (or any supervisor listening for its system calls) the
        // hand-off filter cannot be installed. The program inherits the
        // right instead, as before the hand-off was.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => {
            let mut cmd = Command::new(&args.program[0]);
            cmd.args(&args.program[1..]).env_remove(ferry::emulation::ENV_HANDOFF);
            if let Err(e) = ferry::emulation::prepare_command(&mut cmd, &server, &root, &lib) {
                return fail(format!("cannot hand the program the server's right: {e}"));
            }
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => return not_started(e),
            };
            ferry::process::pass_signals_to(child.id() as i32);
            let status = child.wait();
            after_the_program(server);
            return match status {
                Ok(st) => exit_code_of(st),
                Err(e) => fail(format!("cannot wait for {}: {e}", Path::new(&args.program[0]).display())),
            };
        }
        Err(e) => return not_started(e),
    };
    // As a shell waits for a command (see `pass_signals_to`).
    ferry::process::pass_signals_to(child.id() as i32);
    // The program (and any process it starts before it has the right)
    // asks through the process port; this thread answers until it is gone.
    let last = server.try_clone().ok();
    let answering = std::thread::spawn(move || {
        while !port.is_dead() {
            if handoff.hand(&server, Timeout::After(Duration::from_millis(200))).is_err() {
                break;
            }
        }
    });
    let status = child.wait();
    let _ = answering.join();
    if let Some(server) = last {
        after_the_program(server);
    }
    match status {
        Ok(st) => exit_code_of(st),
        Err(e) => fail(format!("cannot wait for {}: {e}", Path::new(&args.program[0]).display())),
    }
}

/// Once the program is gone: one request to the server, answered after it
/// has let go of the files the program left open. The server closes its
/// descriptor of an open file when the file's last hold goes, as it comes
/// to that event, and of a file opened only for reading nobody waits for
/// it (`docs/emulation.md`): `ferry run` returned with such files still
/// open, so a lock another program took on one of them (`flock -s` on a
/// descriptor the shell handed it) was still held when the next command
/// asked for the file's lock. The program's holds went when it exited,
/// before this request, and the server takes its events in the order
/// they came. Its answer does not matter, and a server that does not
/// answer within 5 s (stopped, say) is not waited for longer.
fn after_the_program(server: ferry::SendRight) {
    let (done, answered) = std::sync::mpsc::channel();
    let asking = std::thread::spawn(move || {
        let _ = ferry::emulation::Client::new(server).stat(".", false);
        let _ = done.send(());
    });
    if answered.recv_timeout(Duration::from_secs(5)).is_ok() {
        let _ = asking.join();
    }
}

/// The program's exit status as `ferry run`'s: its code, or 128 plus the
/// signal that killed it, as a shell reports it.
fn exit_code_of(st: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt as _;
    match (st.code(), st.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig) as u8),
        _ => ExitCode::from(1),
    }
}

/// Runs the server (`ferry __emul-serve`).
pub fn serve(args: &ServeArgs) -> ExitCode {
    let Ok(parent) = ferry::spawn::inherited() else {
        eprintln!("ferry __emul-serve: started without a right to answer on");
        return ExitCode::from(2);
    };
    if args.detach {
        // The server must not be a child of the program it serves (a
        // shell waiting for all its children would wait for it forever).
        let started = std::env::current_exe().and_then(|exe| {
            Command::new(exe)
                .arg("__emul-serve")
                .arg(&args.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .pass_right(&parent)?
                .spawn()
        });
        return if started.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) };
    }
    // Every open file holds descriptors; the server's budgets of open
    // files follow its limit, so the limit is raised first.
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let lim = getrlimit(Resource::Nofile);
        if lim.current != lim.maximum {
            let _ = setrlimit(Resource::Nofile, Rlimit { current: lim.maximum, maximum: lim.maximum });
        }
    }
    let (mut srv, right) = match ferry::emulation::EmulServer::new(&args.dir) {
        Ok(s) => s,
        Err(_) => return ExitCode::from(1),
    };
    if parent.send(Message::new(1).with_item(right), Timeout::After(Duration::from_secs(30))).is_err() {
        return ExitCode::from(1);
    }
    drop(parent);
    while srv.serve(Timeout::After(Duration::from_secs(1))) {}
    ExitCode::SUCCESS
}
