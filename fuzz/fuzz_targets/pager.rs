//! Coverage-guided runs of `ferry::fuzzing::pager`, the same target the
//! stable runner (`tests/tests/fuzz.rs`) drives over the committed corpus.
//! See `docs/fuzzing.md`:
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run pager corpus/pager -- -max_total_time=300
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferry::fuzzing::pager(data));
