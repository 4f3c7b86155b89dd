//! Code shared by ferry's integration tests and the `ferry-peer` program
//! they spawn: the example key-value service of the typed interfaces.

#![deny(missing_docs)]

pub mod kv;
