//! Out-of-line memory regions sent by value (see docs/regions.md).
