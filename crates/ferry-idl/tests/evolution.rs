//! Two builds of one interface talking to each other: version 2 adds an
//! operation, an optional argument and an optional record field to version
//! 1; version 3 drops compatibility with version 1. The rules are in
//! `docs/interfaces.md`, "Evolution".

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry::SendRight;
use ferry_idl::{Context, Fault, IdlError};

/// The first build.
mod v1 {
    use super::*;

    ferry_idl::record! {
        /// A stored item.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Item {
            1 => pub name: String,
            2 => pub size: u64,
        }
    }

    ferry_idl::interface! {
        /// A store, first version.
        pub mod store: "test.evolving", version 1, compatible 1 {
            /// Stores an item.
            fn put(key: String, item: Item) = 1;
            /// Reads an item.
            fn get(key: String) -> Option<Item> = 2;
        }
    }

    /// What the server saw: the last item put.
    #[derive(Default)]
    pub struct Store {
        pub items: std::collections::HashMap<String, Item>,
    }

    impl store::Service for Store {
        fn put(&mut self, _: &Context, key: String, item: Item) {
            self.items.insert(key, item);
        }
        fn get(&mut self, _: &Context, key: String) -> Option<Item> {
            self.items.get(&key).cloned()
        }
    }
}

/// The second build: one more operation, one more (optional) argument, one
/// more (optional) field.
mod v2 {
    use super::*;

    ferry_idl::record! {
        /// A stored item, with a colour since version 2.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Item {
            1 => pub name: String,
            2 => pub size: u64,
            /// Since version 2.
            3 => pub color: Option<String>,
        }
    }

    ferry_idl::interface! {
        /// A store, second version.
        pub mod store: "test.evolving", version 2, compatible 1 {
            /// Stores an item; `ttl` since version 2.
            fn put(key: String, item: Item, ttl: Option<u32>) = 1;
            /// Reads an item.
            fn get(key: String) -> Option<Item> = 2;
            /// How many items there are (since version 2).
            fn count() -> u64 = 3;
        }
    }

    /// What the server saw, with each put's time to live.
    #[derive(Default)]
    pub struct Store {
        pub items: std::collections::HashMap<String, (Item, Option<u32>)>,
    }

    impl store::Service for Store {
        fn put(&mut self, _: &Context, key: String, item: Item, ttl: Option<u32>) {
            self.items.insert(key, (item, ttl));
        }
        fn get(&mut self, _: &Context, key: String) -> Option<Item> {
            self.items.get(&key).map(|(i, _)| i.clone())
        }
        fn count(&mut self, _: &Context) -> u64 {
            self.items.len() as u64
        }
    }
}

/// A third build that no longer talks to version 1 peers.
mod v3 {
    use super::*;

    ferry_idl::interface! {
        /// A store, third version.
        pub mod store: "test.evolving", version 3, compatible 2 {
            /// How many items there are.
            fn count() -> u64 = 3;
        }
    }

    pub struct Store;
    impl store::Service for Store {
        fn count(&mut self, _: &Context) -> u64 {
            0
        }
    }
}

/// Another interface altogether.
mod other {
    use super::*;

    ferry_idl::interface! {
        /// Not a store.
        pub mod store: "test.other", version 1, compatible 1 {
            /// How many items there are.
            fn count() -> u64 = 3;
        }
    }

    pub struct Store;
    impl store::Service for Store {
        fn count(&mut self, _: &Context) -> u64 {
            0
        }
    }
}

fn watchdog<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the test hung or panicked")
}

/// Serves `svc` on a new port from a thread; the server is shared so the
/// test can look at what it saw.
fn serve<D: ferry_idl::Dispatch + Send + 'static>(svc: Arc<Mutex<D>>) -> SendRight {
    struct Shared<D>(Arc<Mutex<D>>);
    impl<D: ferry_idl::Dispatch> ferry_idl::Dispatch for Shared<D> {
        fn dispatch(&mut self, req: ferry::Message, route: ferry_idl::Route) -> Option<ferry::Message> {
            self.0.lock().unwrap().dispatch(req, route)
        }
    }
    let (mut rx, tx) = ferry::port().unwrap();
    std::thread::spawn(move || ferry_idl::serve_port(&mut Shared(svc), &mut rx));
    tx
}

#[test]
fn an_old_client_talks_to_a_new_server() {
    watchdog(|| {
        let server = Arc::new(Mutex::new(v2::store::Server(v2::Store::default())));
        let mut c = v1::store::Client::over_port(serve(server.clone())).unwrap();
        assert_eq!(c.peer_version(), 2);
        c.put("a".into(), v1::Item { name: "apple".into(), size: 3 }).unwrap();
        // The new server saw no ttl and no colour: the old client sent none.
        let seen = server.lock().unwrap().0.items["a"].clone();
        assert_eq!(seen, (v2::Item { name: "apple".into(), size: 3, color: None }, None));
        // A field the old client does not know is skipped when it reads.
        server.lock().unwrap().0.items.get_mut("a").unwrap().0.color = Some("red".into());
        assert_eq!(c.get("a".into()).unwrap(), Some(v1::Item { name: "apple".into(), size: 3 }));
    });
}

#[test]
fn a_new_client_talks_to_an_old_server() {
    watchdog(|| {
        let server = Arc::new(Mutex::new(v1::store::Server(v1::Store::default())));
        let mut c = v2::store::Client::over_port(serve(server.clone())).unwrap();
        assert_eq!(c.peer_version(), 1, "the client learns what the server knows");
        // The new argument and the new field are skipped by the old server.
        c.put("b".into(), v2::Item { name: "bean".into(), size: 5, color: Some("green".into()) }, Some(60)).unwrap();
        assert_eq!(server.lock().unwrap().0.items["b"], v1::Item { name: "bean".into(), size: 5 });
        // The old server's answer lacks the new optional field: it reads as None.
        assert_eq!(c.get("b".into()).unwrap(), Some(v2::Item { name: "bean".into(), size: 5, color: None }));
        // The new operation is answered with an error, not silence.
        assert!(matches!(c.count(), Err(IdlError::Fault(Fault::UnknownOperation(3)))));
    });
}

#[test]
fn incompatible_versions_and_other_interfaces_are_refused_at_connect() {
    watchdog(|| {
        // A version 3 client needs at least version 2.
        let old = serve(Arc::new(Mutex::new(v1::store::Server(v1::Store::default()))));
        match v3::store::Client::over_port(old) {
            Err(IdlError::Incompatible { server: 1, oldest: 2 }) => {}
            other => panic!("expected Incompatible, got {other:?}"),
        }
        // A version 3 server refuses a version 1 client.
        let new = serve(Arc::new(Mutex::new(v3::store::Server(v3::Store))));
        match v1::store::Client::over_port(new.try_clone().unwrap()) {
            Err(IdlError::Fault(Fault::Incompatible(why))) => assert!(why.contains("version 1"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // ... and accepts a version 2 one.
        assert_eq!(v2::store::Client::over_port(new).unwrap().peer_version(), 3);
        // A server of another interface refuses, whatever the ordinals.
        let stranger = serve(Arc::new(Mutex::new(other::store::Server(other::Store))));
        match v2::store::Client::over_port(stranger) {
            Err(IdlError::Fault(Fault::Incompatible(why))) => assert!(why.contains("test.other"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    });
}
