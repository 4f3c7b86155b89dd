//! `ferry::spawn`: a child process started with a send right in hand, and
//! what happens when the right is missing, taken twice, or not a right.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use ferry::spawn::{CommandExt, InheritError, INHERITED_ENV};
use ferry::{RecvError, Timeout};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_child_inherits_a_send_right_and_takes_it_once() {
    common::watchdog("a_child_inherits_a_send_right_and_takes_it_once", LIMIT, || {
        let (mut rx, tx) = ferry::port().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry-peer"));
        cmd.arg("inherited").pass_right(&tx).unwrap();
        drop(tx);
        let mut child = cmd.spawn().unwrap();
        let m = rx.recv(Timeout::Infinite).unwrap();
        assert_eq!(m.sender().unwrap().pid as u32, child.id(), "sent by the child itself");
        assert_eq!(m.body(), b"again: the inherited send right was already taken");
        assert!(child.wait().unwrap().success());
        // The command still holds its copy; once it is gone, and the child
        // too, nobody can send.
        drop(cmd);
        assert!(matches!(rx.recv(Timeout::Infinite), Err(RecvError::NoSenders)));
    });
}

#[test]
fn a_process_started_without_a_right_is_told_so() {
    assert!(std::env::var_os(INHERITED_ENV).is_none());
    assert_eq!(ferry::spawn::inherited().unwrap_err(), InheritError::NotPassed);
}

#[test]
fn a_descriptor_that_is_not_a_right_is_refused_and_left_open() {
    common::watchdog("a_descriptor_that_is_not_a_right_is_refused_and_left_open", LIMIT, || {
        let out = Command::new(env!("CARGO_BIN_EXE_ferry-peer"))
            .arg("inherited-refused")
            .env(INHERITED_ENV, "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(stdout.contains("refused; stdin open: true"), "{stdout}");
    });
}
