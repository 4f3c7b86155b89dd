//! `ferry probe`: measures this machine's IPC primitives.
