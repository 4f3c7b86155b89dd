//! The fast path: L4-style call / reply-and-wait over shared memory.
