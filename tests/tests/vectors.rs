//! The wire-format test vectors under `tests/vectors/`: every datagram in
//! the manifest is parsed with `ferry::wire::parse` and its outcome compared
//! with the manifest's expectation exactly (same error, same fields); every
//! valid one is encoded again with `ferry::wire::encode` and must come out
//! byte for byte the same. The vectors are language-neutral, so other
//! bindings check themselves against the same files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ferry::wire::{self, Parsed};
use ferry::WireError;

/// One line of `vectors.txt`.
#[derive(Clone, Debug)]
struct Vector {
    name: String,
    fds: usize,
    expect: String,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

fn manifest() -> Vec<Vector> {
    let text = std::fs::read_to_string(dir().join("vectors.txt")).expect("read vectors.txt");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut f = line.split_whitespace();
        let (Some(name), Some(fds)) = (f.next(), f.next()) else {
            panic!("vectors.txt line {}: expected NAME FDS EXPECT", n + 1);
        };
        let expect: Vec<&str> = f.collect();
        assert!(!expect.is_empty(), "vectors.txt line {}: no expectation", n + 1);
        let fds = fds.parse().unwrap_or_else(|_| panic!("vectors.txt line {}: bad FDS {fds:?}", n + 1));
        out.push(Vector { name: name.to_owned(), fds, expect: expect.join(" ") });
    }
    out
}

/// Reads hex bytes: whitespace is ignored, `#` starts a comment.
fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text
        .lines()
        .flat_map(|l| l.split('#').next().unwrap_or("").bytes())
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits ({})", digits.len()));
    }
    digits
        .chunks(2)
        .map(|p| {
            let s = std::str::from_utf8(p).map_err(|_| "non-ASCII byte".to_owned())?;
            u8::from_str_radix(s, 16).map_err(|_| format!("not a hex byte: {s:?}"))
        })
        .collect()
}

fn bytes_of(name: &str) -> Vec<u8> {
    let path = dir().join(format!("{name}.hex"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_hex(&text).unwrap_or_else(|e| panic!("{name}.hex: {e}"))
}

/// Items as `KIND:FDS`, runs of equal ones as `KIND:FDS*N`, `-` for none.
fn render_items(p: &Parsed) -> String {
    let mut runs: Vec<((u8, u16), usize)> = Vec::new();
    for d in &p.items {
        match runs.last_mut() {
            Some((k, n)) if *k == (d.kind, d.fds) => *n += 1,
            _ => runs.push(((d.kind, d.fds), 1)),
        }
    }
    if runs.is_empty() {
        return "-".into();
    }
    runs.iter()
        .map(|((k, f), n)| if *n > 1 { format!("{k}:{f}*{n}") } else { format!("{k}:{f}") })
        .collect::<Vec<_>>()
        .join(",")
}

/// The manifest's spelling of an error.
fn render_err(e: &WireError) -> String {
    use WireError::*;
    match e {
        Truncated { need, got } => format!("Truncated{{need={need},got={got}}}"),
        BadMagic(m) => format!("BadMagic({m:#010x})"),
        UnknownVersion(v) => format!("UnknownVersion({v})"),
        NeedlessVersion(v) => format!("NeedlessVersion({v})"),
        ReservedNotZero => "ReservedNotZero".into(),
        LengthMismatch { declared, actual } => format!("LengthMismatch{{declared={declared},actual={actual}}}"),
        TooManyItems(n) => format!("TooManyItems({n})"),
        InlineTooLarge(n) => format!("InlineTooLarge({n})"),
        TooManyFds(n) => format!("TooManyFds({n})"),
        FdCountMismatch { declared, received } => format!("FdCountMismatch{{declared={declared},received={received}}}"),
        UnknownItemKind(k) => format!("UnknownItemKind({k})"),
        BadItemFdCount { item, count } => format!("BadItemFdCount{{item={item},count={count}}}"),
        BadReplyRight => "BadReplyRight".into(),
        // The reason is the exact text, quoted and escaped as a Rust string
        // literal, so the spelling stays one token and cannot be confused
        // with the fields around it.
        BadRegion { item, reason } => format!("BadRegion{{item={item},reason={reason:?}}}"),
        // Checked after `wire::parse` (the mode and range of a pager item
        // need its descriptor too); spelled the same way for other checkers.
        BadPagerItem { item, reason } => format!("BadPagerItem{{item={item},reason={reason:?}}}"),
        // Not produced by `wire::parse`; spelled out so a wrong result reads well.
        other => format!("{other:?}"),
    }
}

fn outcome(bytes: &[u8], fds: usize) -> String {
    match wire::parse(bytes, fds) {
        Ok(p) => format!(
            "ok op={} flags={:#04x} items={} inline={}",
            p.op,
            p.flags,
            render_items(&p),
            p.inline.len()
        ),
        Err(e) => render_err(&e),
    }
}

/// Checks one vector against an expectation; `Err` says how it differs.
fn check(bytes: &[u8], fds: usize, expect: &str) -> Result<(), String> {
    let got = outcome(bytes, fds);
    if got != expect {
        return Err(format!("expected {expect}, got {got}"));
    }
    if let Ok(p) = wire::parse(bytes, fds) {
        if p.inline.end != bytes.len() {
            return Err(format!("inline range {:?} does not end the datagram of {}", p.inline, bytes.len()));
        }
        let mut again = Vec::new();
        wire::encode(&mut again, p.op, p.flags, &p.items, &bytes[p.inline.clone()]);
        if again != bytes {
            let at = again.iter().zip(bytes).position(|(a, b)| a != b).unwrap_or(again.len().min(bytes.len()));
            return Err(format!("re-encoding differs at byte {at} ({} vs {} bytes)", again.len(), bytes.len()));
        }
    }
    Ok(())
}

#[test]
fn every_vector_gives_exactly_the_expected_outcome() {
    let vectors = manifest();
    assert!(vectors.len() >= 50, "only {} vectors", vectors.len());
    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|v| check(&bytes_of(&v.name), v.fds, &v.expect).err().map(|e| format!("{}: {e}", v.name)))
        .collect();
    assert!(failures.is_empty(), "{} of {} vectors failed:\n{}", failures.len(), vectors.len(), failures.join("\n"));
}

#[test]
fn valid_vectors_encode_back_to_the_same_bytes() {
    let mut n = 0;
    for v in manifest().iter().filter(|v| v.expect.starts_with("ok ")) {
        let bytes = bytes_of(&v.name);
        let p = wire::parse(&bytes, v.fds).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        let mut again = Vec::new();
        wire::encode(&mut again, p.op, p.flags, &p.items, &bytes[p.inline.clone()]);
        assert_eq!(again, bytes, "{}: encode(parse(bytes)) != bytes", v.name);
        assert_eq!(p.items.iter().map(|d| d.fds as usize).sum::<usize>(), v.fds, "{}", v.name);
        n += 1;
    }
    assert!(n >= 10, "only {n} valid vectors");
}

#[test]
fn manifest_and_files_agree() {
    let vectors = manifest();
    let listed: BTreeSet<String> = vectors.iter().map(|v| v.name.clone()).collect();
    assert_eq!(listed.len(), vectors.len(), "a vector is listed twice");
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir())
        .expect("list vectors")
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.strip_suffix(".hex").map(str::to_owned))
        .collect();
    assert_eq!(listed, on_disk, "vectors.txt and the .hex files disagree");
}

#[test]
fn every_rule_of_parse_has_a_vector() {
    let vectors = manifest();
    let names: BTreeSet<&str> = vectors.iter().map(|v| v.expect.split(['{', '(', ' ']).next().unwrap()).collect();
    let expect = |name: &str| vectors.iter().find(|v| v.name == name).map(|v| v.expect.clone());
    for rule in [
        "ok",
        "Truncated",
        "BadMagic",
        "UnknownVersion",
        "NeedlessVersion",
        "ReservedNotZero",
        "TooManyItems",
        "InlineTooLarge",
        "TooManyFds",
        "LengthMismatch",
        "FdCountMismatch",
        "UnknownItemKind",
        "BadItemFdCount",
        "BadReplyRight",
        "BadRegion",
    ] {
        assert!(names.contains(rule), "no vector for {rule}");
    }
    // Errors only the descriptor checks after `parse` produce: no vector may
    // expect them of the bytes alone.
    for rule in ["Oversized", "FdsTruncated", "NotAPort", "ReceiveRightToSelf", "NotSealed", "BadPagerItem"] {
        assert!(!names.contains(rule), "a vector expects {rule}, which parse never returns");
    }
    // Every rule of the region and pager items, each by a vector whose one
    // fault is that rule.
    for (name, want) in [
        ("ok_region", "ok "),
        ("ok_region_modes", "ok "),
        ("ok_region_flags", "ok "),
        ("ok_region_len_max", "ok "),
        ("ok_region_addr_top", "ok "),
        ("region_mode_0", "BadRegion{item=0,reason=\"unknown transfer mode 0\"}"),
        ("region_mode_5", "BadRegion{item=0,reason=\"unknown transfer mode 5\"}"),
        ("region_lend_fds_1", "BadItemFdCount{item=0,count=1}"),
        ("region_fds_2", "BadItemFdCount{item=0,count=2}"),
        ("region_fds_0", "BadItemFdCount{item=0,count=0}"),
        ("region_flags_4", "ReservedNotZero"),
        ("region_aux_copy", "ReservedNotZero"),
        ("region_aux_move", "ReservedNotZero"),
        ("region_aux_share", "ReservedNotZero"),
        ("region_len_0", "BadRegion{item=0,reason=\"zero length\"}"),
        ("ok_region_empty", "ok "),
        ("ok_region_empty_lend", "ok "),
        ("version_2_needless", "NeedlessVersion(2)"),
        ("region_len_over", "BadRegion{item=0,reason=\"length 9223372036854775808 exceeds the address space\"}"),
        ("region_addr_unaligned", "BadRegion{item=0,reason=\"sender address 0x1001 is not page aligned or wraps\"}"),
        ("region_addr_wraps", "BadRegion{item=0,reason=\"sender address 0xfffffffffffff000 is not page aligned or wraps\"}"),
        ("reply_region", "BadReplyRight"),
        ("ok_pager", "ok "),
        ("pager_fds_0", "BadItemFdCount{item=0,count=0}"),
        ("pager_fds_2", "BadItemFdCount{item=1,count=2}"),
        ("pager_flags", "ReservedNotZero"),
        ("pager_aux", "ReservedNotZero"),
        ("reply_pager", "BadReplyRight"),
    ] {
        let got = expect(name).unwrap_or_else(|| panic!("no vector {name}"));
        assert!(got.starts_with(want), "{name}: expects {got}, not {want}");
    }
    assert!(expect("ok_region_modes").unwrap().contains(&format!("{}:2", wire::KIND_REGION)), "no lent region");
    assert!(expect("ok_pager").unwrap().contains(&format!("{}:1", wire::KIND_PAGER)));
    assert_eq!(bytes_of("region_lend_fds_1")[25], wire::MODE_LEND);
    // Empty regions are version 2, and only they; in version 1 they are
    // refused as before.
    assert_eq!(bytes_of("ok_region_empty")[4], wire::VERSION_EMPTY_REGIONS);
    assert_eq!(bytes_of("region_len_0")[4], wire::VERSION);
    assert_eq!(bytes_of("version_2_needless")[4], wire::VERSION_EMPTY_REGIONS);
    assert_eq!(bytes_of("region_fds_2")[25], wire::MODE_COPY);
    // The limits are exercised at the edge: the largest valid message and
    // the smallest invalid ones.
    assert_eq!(bytes_of("ok_max_message").len(), wire::MAX_MESSAGE);
    assert_eq!(bytes_of("ok_max_inline").len(), wire::HEADER_LEN + wire::MAX_INLINE);
    assert_eq!(manifest().iter().find(|v| v.name == "ok_max_fds").unwrap().fds, wire::MAX_FDS);
    assert_eq!(expect("too_many_items_65").unwrap(), format!("TooManyItems({})", wire::MAX_ITEMS + 1));
    assert_eq!(expect("inline_too_large").unwrap(), format!("InlineTooLarge({})", wire::MAX_INLINE + 1));
    assert_eq!(expect("too_many_fds").unwrap(), format!("TooManyFds({})", wire::MAX_FDS + 1));
}

/// The checker must be able to fail: every vector checked against another
/// vector's (different) expectation is reported, and so is a valid vector
/// with one byte changed.
#[test]
fn a_wrong_expectation_fails_the_check() {
    let vectors = manifest();
    for (i, v) in vectors.iter().enumerate() {
        let bytes = bytes_of(&v.name);
        let other = vectors[i + 1..].iter().chain(&vectors[..i]).find(|o| o.expect != v.expect).expect("another outcome");
        assert!(check(&bytes, v.fds, &other.expect).is_err(), "{} passed with {}'s expectation", v.name, other.name);
        if v.expect.starts_with("ok") {
            assert!(check(&bytes, v.fds + 1, &v.expect).is_err(), "{} passed with one descriptor more", v.name);
            for at in [0, 4, 5, 8, 12, 16] {
                let mut bad = bytes.clone();
                bad[at] ^= 0x01;
                assert!(check(&bad, v.fds, &v.expect).is_err(), "{} passed with byte {at} changed", v.name);
            }
        }
    }
    // A near miss in the fields of an error is a failure too.
    let b = bytes_of("trunc_header_10");
    assert!(check(&b, 0, "Truncated{need=24,got=10}").is_ok());
    assert!(check(&b, 0, "Truncated{need=24,got=11}").is_err());
    assert!(check(&b, 0, "Truncated").is_err());
}

#[test]
fn error_spelling_is_exact_and_unambiguous() {
    let region = WireError::BadRegion { item: 3, reason: "zero length".into() };
    assert_eq!(render_err(&region), "BadRegion{item=3,reason=\"zero length\"}");
    let quoted = WireError::BadRegion { item: 0, reason: "a \"b\", c=d}".into() };
    assert_eq!(render_err(&quoted), r#"BadRegion{item=0,reason="a \"b\", c=d}"}"#);
    let pager = WireError::BadPagerItem { item: 1, reason: "unknown memory-object item mode" };
    assert_eq!(render_err(&pager), "BadPagerItem{item=1,reason=\"unknown memory-object item mode\"}");
    // A near miss in a reason fails the check.
    let b = bytes_of("region_len_0");
    assert!(check(&b, 1, "BadRegion{item=0,reason=\"zero length\"}").is_ok());
    assert!(check(&b, 1, "BadRegion{item=0,reason=\"zero  length\"}").is_err());
    assert!(check(&b, 1, "BadRegion{item=1,reason=\"zero length\"}").is_err());
    assert!(check(&b, 1, "BadRegion").is_err());
}

#[test]
fn hex_reader_is_strict() {
    assert_eq!(parse_hex("46 45 # comment 99\n52 59\n").unwrap(), b"FERY");
    assert_eq!(parse_hex("4645\t5259").unwrap(), b"FERY");
    assert!(parse_hex("464").is_err());
    assert!(parse_hex("zz").is_err());
    assert_eq!(parse_hex("# only a comment\n").unwrap(), b"");
}
