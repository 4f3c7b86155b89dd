//! Fuzzes `ferry::wire::parse`, the first code that sees another process's
//! bytes. The first input byte is the number of descriptors that "arrived";
//! the rest is the datagram. Parsing must never panic, and whatever it
//! accepts must be self-consistent and encode back to the same bytes.
//!
//! Run it with cargo-fuzz on a nightly toolchain, seeded with the test
//! vectors:
//!
//! ```text
//! python3 tests/vectors/gen.py --corpus fuzz/corpus/parse   # or reuse fuzz/corpus/wire
//! cd fuzz && cargo +nightly fuzz run parse
//! ```

#![no_main]

use ferry::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&nfds, bytes)) = data.split_first() else { return };
    let nfds = nfds as usize;
    if let Ok(p) = wire::parse(bytes, nfds) {
        assert!(p.items.len() <= wire::MAX_ITEMS);
        assert!(p.inline.len() <= wire::MAX_INLINE);
        assert_eq!(p.inline.end, bytes.len());
        assert_eq!(p.items.iter().map(|d| d.fds as usize).sum::<usize>(), nfds);
        assert!(nfds <= wire::MAX_FDS);
        let mut again = Vec::new();
        wire::encode(&mut again, p.op, p.flags, &p.items, &bytes[p.inline.clone()]);
        assert_eq!(again, bytes);
    }
});
