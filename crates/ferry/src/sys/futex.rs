//! Futex wait and wake on shared memory.
