//! The file server inside `ferryd`: files handed out as by-value memory
//! objects, on a thread of its own (the protocol and the server are in
//! `ferry::fileserver`).

use std::path::Path;

use ferry::pager::ObjectConfig;
use ferry::{SendRight, Timeout};

/// The system name the file server is registered under.
pub const NAME: &str = "files";

/// Starts serving the files beneath `root` and returns a send right to the
/// server's port.
pub fn start(root: &Path) -> Result<SendRight, String> {
    let (mut server, right) = ferry::fileserver::FileServer::new(root, ObjectConfig::default()).map_err(|e| e.to_string())?;
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
    Ok(right)
}
