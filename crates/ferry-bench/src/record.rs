//! The benchmark record of the output contract (`docs/benchmarks.md`) and
//! its JSON form, read and written with serde_json.
//!
//! One [`Record`] per (suite, case, bytes, placement, touch, impl); the
//! suites, the probe and the report all use this one type. A run writes
//! them as a JSON array, one record per line ([`to_json_array`]); reading
//! ([`from_json_array`]) is strict: every field of the contract with its
//! type (integers where the contract wants integers), no unknown field, no
//! key twice.

use std::fmt;
use std::io;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The free-form `extra` object: keys in the order they were added.
pub type Extra = serde_json::Map<String, Value>;

/// Where the two sides of a benchmark run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Both processes pinned to the same CPU.
    SameCore,
    /// The processes pinned to two different CPUs.
    CrossCore,
    /// No pinning: the scheduler decides.
    Unpinned,
}

impl Placement {
    /// The name used in records and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Placement::SameCore => "same-core",
            Placement::CrossCore => "cross-core",
            Placement::Unpinned => "unpinned",
        }
    }

    /// Parses a placement name.
    pub fn parse(s: &str) -> Option<Placement> {
        [Placement::SameCore, Placement::CrossCore, Placement::Unpinned].into_iter().find(|p| p.name() == s)
    }
}

/// What the receiver does with the payload before acknowledging.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Touch {
    /// Nothing.
    None,
    /// Reads one byte of every 64-byte cache line.
    Read,
    /// Writes one byte of every 64-byte cache line.
    Write,
}

impl Touch {
    /// The name used in records.
    pub fn name(self) -> &'static str {
        match self {
            Touch::None => "none",
            Touch::Read => "read",
            Touch::Write => "write",
        }
    }

    /// Reads `buf` one byte per cache line unless this is [`Touch::None`];
    /// for a buffer that cannot be written ([`Touch::Write`] reads too).
    /// Returns a sum so the reads are not optimised away.
    pub fn apply_read(self, buf: &[u8]) -> u64 {
        match self {
            Touch::Read | Touch::Write => buf.iter().step_by(64).map(|&b| b as u64).sum(),
            Touch::None => 0,
        }
    }

    /// Applies this touch to a writable buffer.
    pub fn apply(self, buf: &mut [u8]) -> u64 {
        match self {
            Touch::None => 0,
            Touch::Read => std::hint::black_box(self.apply_read(buf)),
            Touch::Write => {
                for b in buf.iter_mut().step_by(64) {
                    *b = b.wrapping_add(1);
                }
                std::hint::black_box(buf.len() as u64)
            }
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Touch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One measured (or skipped) combination, as the output contract defines it.
///
/// Serialised with the contract's field names, in its order; `None` and
/// non-finite numbers are written as `null`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Suite name (`port`, `rpc`, `transfer`, `pager`, `probe`, …).
    pub suite: String,
    /// Case name within the suite.
    pub case: String,
    /// Implementation: `ferry-<variant>`, a baseline or peer name, or
    /// `machine` for the probe.
    #[serde(rename = "impl")]
    pub imp: String,
    /// Payload size in bytes (0 where meaningless).
    pub bytes: u64,
    /// Where the processes ran.
    pub placement: Placement,
    /// What the receiver did with the payload.
    pub touch: Touch,
    /// Operations timed.
    pub iters: u64,
    /// Median per operation, ns; `None` when the case was skipped.
    pub median_ns: Option<f64>,
    /// 99th percentile per operation, ns.
    pub p99_ns: Option<f64>,
    /// Fastest operation, ns.
    pub min_ns: Option<f64>,
    /// Payload GB/s at the median, where data moves.
    pub gbps: Option<f64>,
    /// Free-form details; `skipped` holds the reason a case did not run.
    #[serde(deserialize_with = "distinct_keys")]
    pub extra: Extra,
}

impl Record {
    /// A record of `suite`/`case` by `imp` with nothing measured yet:
    /// zero bytes and iterations, no numbers, no details.
    pub fn new(suite: &str, case: &str, imp: &str, placement: Placement) -> Record {
        Record {
            suite: suite.into(),
            case: case.into(),
            imp: imp.into(),
            bytes: 0,
            placement,
            touch: Touch::None,
            iters: 0,
            median_ns: None,
            p99_ns: None,
            min_ns: None,
            gbps: None,
            extra: Extra::new(),
        }
    }

    /// Sets `bytes`.
    pub fn bytes(mut self, n: u64) -> Record {
        self.bytes = n;
        self
    }

    /// Sets `touch`.
    pub fn touch(mut self, t: Touch) -> Record {
        self.touch = t;
        self
    }

    /// Sets `gbps`.
    pub fn gbps(mut self, g: f64) -> Record {
        self.gbps = Some(g);
        self
    }

    /// Sets the `extra` entry `key` (replacing an earlier value in place).
    pub fn extra(mut self, key: &str, v: impl Into<Value>) -> Record {
        self.extra.insert(key.to_string(), v.into());
        self
    }

    /// The `extra` entry named `key`.
    pub fn get_extra(&self, key: &str) -> Option<&Value> {
        self.extra.get(key)
    }

    /// A number in `extra`.
    pub fn extra_num(&self, key: &str) -> Option<f64> {
        self.extra.get(key).and_then(Value::as_f64)
    }

    /// The reason this record was skipped, if it was.
    pub fn skipped(&self) -> Option<&str> {
        self.extra.get("skipped").and_then(Value::as_str)
    }

    /// This record as one line of JSON (`{"suite": "rpc", "case": …}`).
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, OneLine);
        // A Record has only string keys and JSON-representable values, and
        // a Vec does not fail to grow: serialising it cannot fail.
        self.serialize(&mut ser).expect("a record always serialises");
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }
}

/// serde_json's compact output with a space after each `,` and `:`, so a
/// record reads as one tidy line.
struct OneLine;

impl serde_json::ser::Formatter for OneLine {
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// Reads `extra`, refusing a key that appears twice (serde_json would keep
/// the last one silently).
fn distinct_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Extra, D::Error> {
    struct Distinct;
    impl<'de> Visitor<'de> for Distinct {
        type Value = Extra;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object with distinct keys")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Extra, A::Error> {
            let mut out = Extra::new();
            while let Some((k, v)) = m.next_entry::<String, Value>()? {
                if out.contains_key(&k) {
                    return Err(de::Error::custom(format_args!("duplicate key `{k}` in extra")));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Distinct)
}

/// A JSON array of records, one per line.
pub fn to_json_array(records: &[Record]) -> String {
    let mut s = String::from("[\n");
    for (i, r) in records.iter().enumerate() {
        s.push_str("  ");
        s.push_str(&r.to_json());
        if i + 1 < records.len() {
            s.push(',');
        }
        s.push('\n');
    }
    s.push_str("]\n");
    s
}

/// Reads a JSON array of records, strictly (see the module documentation).
///
/// # Errors
/// serde_json's error, with the line and column of the problem; its
/// [`classify`](serde_json::Error::classify) tells broken JSON from JSON of
/// the wrong shape.
pub fn from_json_array(text: &str) -> Result<Vec<Record>, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        let mut r = Record::new("rpc", "roundtrip", "ferry-call-poll", Placement::CrossCore).bytes(64).extra("note", "a\"b\\c\n\u{1}");
        r.iters = 200_000;
        r.median_ns = Some(4210.0);
        r.p99_ns = Some(f64::NAN);
        r.min_ns = Some(1.5);
        r.extra("rounds", 3u64).extra("thp", true)
    }

    #[test]
    fn one_line_in_the_contract_order_with_escapes_and_null() {
        assert_eq!(
            sample().to_json(),
            r#"{"suite": "rpc", "case": "roundtrip", "impl": "ferry-call-poll", "bytes": 64, "placement": "cross-core", "touch": "none", "iters": 200000, "median_ns": 4210.0, "p99_ns": null, "min_ns": 1.5, "gbps": null, "extra": {"note": "a\"b\\c\n\u0001", "rounds": 3, "thp": true}}"#
        );
    }

    #[test]
    fn reads_back_what_it_writes() {
        let mut r = sample();
        r.p99_ns = None;
        let back = from_json_array(&to_json_array(&[r.clone(), r.clone()])).unwrap();
        assert_eq!(back, vec![r.clone(), r]);
    }

    #[test]
    fn reading_is_strict() {
        let good = sample().to_json();
        assert!(from_json_array(&format!("[{good}]")).is_ok());
        let bad = [
            // A float where the contract wants an integer.
            good.replace("\"bytes\": 64", "\"bytes\": 64.0"),
            good.replace("\"iters\": 200000", "\"iters\": -1"),
            // A key twice, at the top and in extra.
            good.replace("\"bytes\": 64", "\"bytes\": 64, \"bytes\": 64"),
            good.replace("\"rounds\": 3", "\"rounds\": 3, \"rounds\": 4"),
            // A field the contract does not have, and one it needs missing.
            good.replace("\"gbps\": null", "\"gbps\": null, \"speed\": 1"),
            good.replace("\"case\": \"roundtrip\", ", ""),
            // A placement or touch outside the contract's names.
            good.replace("cross-core", "cross_core"),
            good.replace("\"touch\": \"none\"", "\"touch\": \"all\""),
        ];
        for b in bad {
            let e = from_json_array(&format!("[{b}]")).expect_err(&b);
            assert_eq!(e.classify(), serde_json::error::Category::Data, "{b}: {e}");
        }
        assert_eq!(from_json_array("[{").unwrap_err().classify(), serde_json::error::Category::Eof);
    }
}
