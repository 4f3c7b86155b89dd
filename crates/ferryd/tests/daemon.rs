//! `ferryd` as a user runs it: a separate daemon process serving the name
//! service and, with `--files`, the file server under a system name.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &std::path::Path, files: &std::path::Path) -> (Daemon, ferry::Bootstrap) {
    let sock = dir.join("bootstrap");
    let child = Command::new(env!("CARGO_BIN_EXE_ferryd"))
        .args(["--socket", sock.to_str().unwrap(), "--files", files.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .expect("start ferryd");
    let daemon = Daemon(child);
    for _ in 0..1000 {
        if let Ok(bs) = ferry::Bootstrap::connect_to(&sock) {
            return (daemon, bs);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("ferryd never listened at {}", sock.display());
}

#[test]
fn file_server_hands_out_files_by_value() {
    let dir = std::env::temp_dir().join(format!("ferryd-test-{}", std::process::id()));
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let content: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(files.join("data.bin"), &content).unwrap();
    let (_daemon, mut bs) = start(&dir, &files);
    // The file server is a system name: visible although we did not register it.
    let right = bs.lookup("files").expect("files is registered");
    assert!(bs.list().unwrap().iter().any(|e| e.name == "files" && e.uid == ferry::nameserver::SYSTEM_UID));
    let client = ferry::fileserver::FileClient::new(right);
    let mut old = client.open("data.bin").expect("open data.bin");
    // Write back through the server before touching a page of the first
    // snapshot: it still reads the old contents (a value, not a window).
    client.write("data.bin", b"changed").expect("write back");
    assert_eq!(old.as_slice(), &content[..]);
    assert_eq!(client.open("data.bin").unwrap().as_slice(), b"changed");
    assert_eq!(std::fs::read(files.join("data.bin")).unwrap(), b"changed");
    // Our writes to a snapshot stay private.
    old.as_mut_slice()[0] ^= 0xff;
    assert_eq!(&old.as_slice()[1..], &content[1..]);
    assert_eq!(client.open("data.bin").unwrap().as_slice(), b"changed");
    assert!(client.open("../outside").is_err(), "a name leading outside the served directory is refused");
    let _ = std::fs::remove_dir_all(&dir);
}
