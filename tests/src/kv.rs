//! The example service of `docs/interfaces.md`: a key-value store whose
//! values are by-value regions, defined once with `ferry-idl`. The store
//! keeps each value in a region of its own (one copy, made when it is put)
//! and hands out copy-on-write copies of it, so a `get` copies no byte and
//! nobody, not even the client that stored a value, can change what the
//! next reader sees.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ferry::{MapOptions, Region};
use ferry_idl::{enumeration, interface, record, ByValue, Context};

/// The largest value the store takes (64 MiB).
pub const MAX_VALUE: u64 = 64 << 20;

enumeration! {
    /// Why the store refused.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum KvError {
        /// The value is longer than the store takes; the payload is the limit.
        1 => TooLarge(u64),
        /// The key is empty.
        2 => EmptyKey,
        /// The store could not make room for the value.
        3 => NoMemory,
    }
}

record! {
    /// One key and the length of its value.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Entry {
        /// The key.
        1 => pub key: String,
        /// The value's length in bytes.
        2 => pub len: u64,
    }
}

interface! {
    /// A key-value store whose values are by-value regions.
    pub mod kv: "example.kv", version 1, compatible 1 {
        /// Stores `value` under `key`; returns the length of the value it
        /// replaced, if any.
        fn put(key: String, value: ByValue) -> Option<u64> | KvError = 1;
        /// A copy of the value under `key` (pages shared copy-on-write),
        /// or nothing.
        fn get(key: String) -> Option<ByValue> = 2;
        /// Removes `key`; whether it was there.
        fn remove(key: String) -> bool = 3;
        /// Every key with its value's length, in key order.
        fn list() -> Vec<Entry> = 4;
    }
}

/// The store's state, shared by the threads that serve it.
#[derive(Debug, Default)]
pub struct Store {
    values: BTreeMap<String, Region>,
    /// Requests that reached the implementation (a request the
    /// interface's checks refused never counts).
    pub requests: u64,
    /// User ids of the callers, as the kernel reported them (when known).
    pub callers: Vec<u32>,
}

/// A handle on a shared [`Store`] that serves [`kv`].
#[derive(Debug, Clone, Default)]
pub struct SharedStore(pub Arc<Mutex<Store>>);

impl SharedStore {
    fn lock(&self, ctx: &Context) -> std::sync::MutexGuard<'_, Store> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.requests += 1;
        if let Some(c) = ctx.sender {
            s.callers.push(c.uid);
        }
        s
    }
}

impl kv::Service for SharedStore {
    fn put(&mut self, ctx: &Context, key: String, value: ByValue) -> Result<Option<u64>, KvError> {
        let mut s = self.lock(ctx);
        if key.is_empty() {
            return Err(KvError::EmptyKey);
        }
        if value.0.len() as u64 > MAX_VALUE {
            return Err(KvError::TooLarge(MAX_VALUE));
        }
        let map = value.0.map(MapOptions::lazy()).map_err(|_| KvError::NoMemory)?;
        let region = Region::copied_from(map.as_slice()).map_err(|_| KvError::NoMemory)?;
        Ok(s.values.insert(key, region).map(|r| r.len() as u64))
    }

    fn get(&mut self, ctx: &Context, key: String) -> Option<ByValue> {
        let mut s = self.lock(ctx);
        let region = s.values.get_mut(&key)?;
        region.by_copy().ok().map(ByValue)
    }

    fn remove(&mut self, ctx: &Context, key: String) -> bool {
        self.lock(ctx).values.remove(&key).is_some()
    }

    fn list(&mut self, ctx: &Context) -> Vec<Entry> {
        let s = self.lock(ctx);
        s.values.iter().map(|(k, v)| Entry { key: k.clone(), len: v.len() as u64 }).collect()
    }
}
