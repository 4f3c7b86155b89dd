//! The registered suites. Each suite module lists its cases and its
//! implementations; `all()` is what `ferry bench all` runs.

pub mod files;
pub mod net;
pub mod pager;
pub mod peer_ipc_channel;
pub mod pingpong;
pub mod python;
pub mod port;
pub mod rpc;
pub mod rpc_c;
pub mod rpc_ferry;
pub mod rpc_iceoryx2;
pub mod rpc_stub;
pub mod transfer;

use crate::harness::Suite;

/// Every registered suite, in the order `ferry bench all` runs them.
pub fn all() -> Vec<Suite> {
    vec![port::suite(), rpc::suite(), transfer::suite(), pager::suite(), net::suite(), files::suite()]
}

/// The suite called `name`.
pub fn find(name: &str) -> Option<Suite> {
    all().into_iter().find(|s| s.name == name)
}

/// Makes `dir` (mode 0700) or checks that it is this user's own: a
/// directory, not a symbolic link, owned by this user, that no other user
/// may write to. For a directory of a name known ahead in the shared
/// temporary directory (the pager suite's data file, iceoryx2's root):
/// another user who made it first, with symbolic links in it named as the
/// files a suite writes, would otherwise have a benchmark run by root
/// write over any file they point to.
pub(crate) fn own_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let st = std::fs::symlink_metadata(dir)?;
    let me = rustix::process::geteuid().as_raw();
    if !st.file_type().is_dir() || st.uid() != me || st.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "it is not this user's own directory (owner uid {}, mode {:o}): remove it",
            st.uid(),
            st.mode() & 0o7777
        )));
    }
    Ok(())
}
