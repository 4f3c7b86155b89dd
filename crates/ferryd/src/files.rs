//! The file server inside `ferryd`: files handed out as by-value memory
//! objects, on a thread of its own (the protocol and the server are in
//! `ferry::fileserver`).

use std::path::Path;

use ferry::bootstrap::{Budget, Limit, Refusal};
use ferry::pager::{ObjectConfig, PagerError, PortMinter};
use ferry::{SendRight, Timeout};

/// The system name the file server is registered under.
pub const NAME: &str = "files";

/// Starts serving the files beneath `root` and returns a send right to the
/// server's main port, to be watched and never handed out, with a minter
/// of a port of its own for each client (see [`ferry::pager::PortMinter`]
/// for why).
///
/// Every user is held to the file server's default budgets (snapshots held
/// and mappings attached at once, `ferry::pager::Budgets`, and the memory
/// of the file versions copied for it, for as long as they exist,
/// `ferry::fileserver::DEFAULT_MEMORY_PER_USER`), which cost the daemon
/// descriptors and memory; the soft descriptor limit is raised to the hard one
/// so that the budgets, not the limit, are what a user runs into.
pub fn start(root: &Path) -> Result<(SendRight, PortMinter), String> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            eprintln!("ferryd: file server: cannot raise the descriptor limit: {e}");
        }
    }
    // The directory that cannot be opened is named by the caller: its
    // error alone says why, not "memory-object system call failed".
    let (mut server, right) = ferry::fileserver::FileServer::new(root, ObjectConfig::default()).map_err(|e| match e {
        ferry::pager::PagerError::Io(e) => e.to_string(),
        e => e.to_string(),
    })?;
    let minter = server.port_minter(right.try_clone().map_err(|e| e.to_string())?);
    std::thread::Builder::new()
        .name("ferry-files".into())
        .spawn(move || loop {
            if let Err(e) = server.serve(Timeout::Infinite) {
                eprintln!("ferryd: file server: {e}");
                // Do not spin on a persistent failure.
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        })
        .map_err(|e| e.to_string())?;
    Ok((right, minter))
}

/// The name server's answer when `minter` cannot make `uid` a port.
pub fn mint_for(minter: &PortMinter, uid: u32) -> Result<SendRight, Refusal> {
    minter.mint(uid).map_err(|e| match e {
        PagerError::OverBudget(_) => Refusal::LimitReached(Budget { what: Limit::Descriptors, limit: minter.per_user() as u64 }),
        PagerError::Timeout => Refusal::Refused("the file server is busy (its queue is full); look it up again".into()),
        e => Refusal::Refused(format!("the file server cannot make a port: {e}")),
    })
}
