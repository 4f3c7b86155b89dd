//! The `tracing` feature: ferry's events reach a subscriber, with the
//! target `ferry` and the reason in a field. (A tiny subscriber that
//! records events stands in for a real one; it is a real subscriber as far
//! as `tracing` is concerned.)
#![cfg(feature = "tracing")]

use std::fmt::Write as _;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use ferry::{Message, RecvError, Timeout};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records each event as "target level: field=value ...".
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Line<'a>(&'a mut String);

impl Visit for Line<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut s = format!("{} {}:", e.metadata().target(), e.metadata().level());
        e.record(&mut Line(&mut s));
        self.0.lock().unwrap().push(s);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_rejected_message_and_a_gone_peer_are_traced() {
    let rec = Recorder::default();
    // Global: the name server answers on a thread of its own.
    tracing::subscriber::set_global_default(rec.clone()).unwrap();
    {
        let (mut rx, tx) = ferry::port().unwrap();
        // Bytes that are not a ferry message, straight onto the socket.
        rustix::net::send(tx.as_fd(), b"not a ferry message at all", rustix::net::SendFlags::empty()).unwrap();
        assert!(matches!(rx.recv(Timeout::Infinite), Err(RecvError::BadMessage(_))));
        drop(tx);
        assert!(matches!(rx.recv(Timeout::Infinite), Err(RecvError::NoSenders)));
        let (rx2, tx2) = ferry::port().unwrap();
        drop(rx2);
        assert!(tx2.send(Message::new(1), Timeout::Zero).is_err());

        let (mut rx3, tx3) = ferry::port().unwrap();
        let mut region = ferry::Region::new(4096).unwrap();
        region.as_mut_slice()[0] = 7;
        tx3.send(Message::new(2).with_item(region.by_copy().unwrap()), Timeout::Infinite).unwrap();
        let Some(ferry::Item::Region(got)) = rx3.recv(Timeout::Infinite).unwrap().take_items().pop() else { panic!("a region") };
        let mapped = got.map(ferry::MapOptions::default()).unwrap();
        assert_eq!(mapped.as_slice()[0], 7);

        let dir = std::env::temp_dir().join(format!("ferry-tracing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bootstrap");
        ferry::NameServer::bind(&path).unwrap().spawn().unwrap();
        ferry::Bootstrap::connect_to(&path).unwrap().register("traced", &tx3).unwrap();
        // The server keeps its socket; the directory need not outlive the test.
        let _ = std::fs::remove_dir_all(&dir);
    }
    let lines = rec.0.lock().unwrap().clone();
    let has = |needle: &str| lines.iter().any(|l| l.starts_with("ferry ") && l.contains(needle));
    assert!(has("message rejected") && has("reason="), "{lines:#?}");
    assert!(has("no senders"), "{lines:#?}");
    assert!(has("dead name"), "{lines:#?}");
    assert!(has("region sealed") && has("region mapped"), "{lines:#?}");
    assert!(has("name registered") && has("name=traced"), "{lines:#?}");
}
