//! Events through the `tracing` crate, with the `tracing` feature: a
//! message rejected and why, a peer gone (no senders, a dead name, an RPC
//! peer), a region sealed or mapped, a name registered. Every event has
//! the target `ferry`.
//!
//! Without the feature the [`event!`] macro expands to nothing, so its
//! arguments are not even evaluated: the events cost nothing when off.

/// Emits a `tracing` event at the named level (`error`, `warn`, `info`,
/// `debug`, `trace`) with the target `ferry`, when the `tracing` feature is
/// on; nothing otherwise.
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {
        #[cfg(feature = "tracing")]
        {
            ::tracing::$level!(target: "ferry", $($arg)+);
        }
    };
}

pub(crate) use event;
