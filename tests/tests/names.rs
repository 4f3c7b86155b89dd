//! The name service between real processes: registration, lookup, death of
//! registered ports, refusal of live names, and per-user scoping.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use ferry::{Message, NameError, Timeout};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn register_lookup_and_death_across_processes() {
    watchdog("names_basic", LIMIT, || {
        let path = private_bootstrap("names");
        let mut peer = spawn_peer(&path, "register", &["svc"]);
        let mut bs = names(&path);
        let to_peer = lookup_retry(&mut bs, "svc");
        // A live name cannot be taken over, by another process or by us.
        let second = finish(spawn_peer(&path, "register", &["svc"]));
        assert_eq!(second.trim(), "taken");
        let (_rx, tx) = ferry::port().unwrap();
        assert!(matches!(bs.register("svc", &tx), Err(NameError::Taken)));
        let listed = bs.list().unwrap();
        let entry = listed.iter().find(|e| e.name == "svc").expect("listed");
        assert_eq!(entry.owner_pid as u32, peer.id());
        // The registration disappears when its port dies.
        let _ = peer.kill();
        let _ = peer.wait();
        assert!(to_peer.wait_dead(Timeout::Infinite));
        let mut gone = false;
        for _ in 0..400 {
            if matches!(bs.lookup("svc"), Err(NameError::NotFound)) {
                gone = true;
                break;
            }
            nap();
        }
        assert!(gone, "registration of a dead port was not dropped");
        // And the name is free again.
        bs.register("svc", &tx).unwrap();
        assert_eq!(finish(spawn_peer(&path, "lookup", &["svc"])).trim(), "found");
        bs.unregister("svc").unwrap();
        assert_eq!(finish(spawn_peer(&path, "lookup", &["svc"])).trim(), "notfound");
    });
}

#[test]
fn bad_names_are_refused() {
    let path = private_bootstrap("badnames");
    let mut bs = names(&path);
    let (_rx, tx) = ferry::port().unwrap();
    assert!(matches!(bs.register("", &tx), Err(NameError::Invalid)));
    assert!(matches!(bs.register("a\nb", &tx), Err(NameError::Invalid)));
    assert!(matches!(bs.register(&"x".repeat(ferry::bootstrap::MAX_NAME + 1), &tx), Err(NameError::Invalid)));
    assert!(matches!(bs.lookup("nobody"), Err(NameError::NotFound)));
}

#[test]
fn names_are_scoped_per_user() {
    if !rustix::process::getuid().is_root() {
        eprintln!("names_are_scoped_per_user: needs root to run a peer as another user; skipped");
        return;
    }
    watchdog("names_scoped", LIMIT, || {
        let path = private_bootstrap("scoped");
        // Let another user reach the socket.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut bs = names(&path);
        let (mut rx, tx) = ferry::port().unwrap();
        bs.register("shared-name", &tx).unwrap();
        let run_as_nobody = |role: &str| {
            let out = Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
                .args([role, "shared-name"])
                .env("FERRY_BOOTSTRAP", &path)
                .env("FERRY_NO_EMBED", "1")
                .uid(65534)
                .gid(65534)
                .stdout(Stdio::piped())
                .output()
                .unwrap();
            assert!(out.status.success(), "{role} as nobody failed");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        // Another user does not see root's name ...
        assert_eq!(run_as_nobody("lookup"), "notfound");
        // ... and registering the same name creates its own, separate entry.
        let mut nobody = spawn_peer_as_nobody(&path);
        let listed = loop {
            let l = bs.list().unwrap();
            if l.iter().filter(|e| e.name == "shared-name").count() == 2 {
                break l;
            }
            nap();
        };
        let uids: Vec<u32> = listed.iter().filter(|e| e.name == "shared-name").map(|e| e.uid).collect();
        assert!(uids.contains(&0) && uids.contains(&65534), "{uids:?}");
        // Root's lookup still finds root's own port.
        let mine = bs.lookup("shared-name").unwrap();
        mine.send(Message::new(5), Timeout::Infinite).unwrap();
        assert_eq!(rx.recv(Timeout::Infinite).unwrap().op(), 5);
        let _ = nobody.kill();
        let _ = nobody.wait();
    });
}

fn spawn_peer_as_nobody(path: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
        .args(["register", "shared-name"])
        .env("FERRY_BOOTSTRAP", path)
        .env("FERRY_NO_EMBED", "1")
        .uid(65534)
        .gid(65534)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}
