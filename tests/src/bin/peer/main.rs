//! `ferry-peer`: the other process in ferry's multi-process tests.
//!
//! Usage: `ferry-peer ROLE [ARGS...]`. Each role finds its counterpart
//! through the name service (`FERRY_BOOTSTRAP` is set by the test), does one
//! job, prints what it observed on standard output, and exits 0 on success.
//! It asks the kernel to kill it if the test process dies, so a failed test
//! never leaves peers behind.

mod chaos;
mod core;
mod emul;
mod files;
mod hostile;
mod idl;
mod names;
mod pager;
mod regions;
mod rpc;
mod xlang;

use std::process::ExitCode;

fn main() -> ExitCode {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((role, rest)) = args.split_first() else {
        eprintln!("usage: ferry-peer ROLE [ARGS...]");
        return ExitCode::from(2);
    };
    let outcome = core::run(role, rest)
        .or_else(|| regions::run(role, rest))
        .or_else(|| rpc::run(role, rest))
        .or_else(|| pager::run(role, rest))
        .or_else(|| chaos::run(role, rest))
        .or_else(|| files::run(role, rest))
        .or_else(|| hostile::run(role, rest))
        .or_else(|| names::run(role, rest))
        .or_else(|| xlang::run(role, rest))
        .or_else(|| idl::run(role, rest))
        .or_else(|| emul::run(role, rest));
    match outcome {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(e)) => {
            eprintln!("ferry-peer {role}: {e}");
            ExitCode::from(1)
        }
        None => {
            eprintln!("ferry-peer: unknown role {role:?}");
            ExitCode::from(2)
        }
    }
}

/// What a role returns: `None` from a module that does not know the role.
pub type Outcome = Option<Result<(), Box<dyn std::error::Error>>>;

/// Opens things with `open` until it fails or `max` are open, prints
/// `connected K`, `stopped: ERROR` (`none` if none failed) and `ready`,
/// and holds them until the process is killed: a user taking all a
/// server's budget lets it.
pub fn hold_until_refused<T, E: std::fmt::Debug>(max: usize, mut open: impl FnMut() -> Result<T, E>) -> ! {
    use std::io::Write as _;
    let mut held = Vec::new();
    let mut why = String::from("none");
    while held.len() < max {
        match open() {
            Ok(t) => held.push(t),
            Err(e) => {
                why = format!("{e:?}");
                break;
            }
        }
    }
    println!("connected {}", held.len());
    println!("stopped: {why}");
    println!("ready");
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
