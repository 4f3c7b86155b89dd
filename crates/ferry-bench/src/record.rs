//! The benchmark record of the output contract and its JSON form.
//!
//! One [`Record`] per (suite, case, bytes, placement, touch, impl); a run
//! writes them as a JSON array. The JSON is written by hand: the shape is
//! small and fixed, and a serialisation framework would be the crate's
//! largest dependency.

use std::fmt::{self, Write as _};

/// Where the two sides of a benchmark run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// A JSON value for the free-form `extra` object.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number (non-finite values are written as `null`).
    Num(f64),
    /// A string.
    Str(String),
}

impl From<bool> for Json {
    fn from(v: bool) -> Json {
        Json::Bool(v)
    }
}
impl From<i64> for Json {
    fn from(v: i64) -> Json {
        Json::Int(v)
    }
}
impl From<u64> for Json {
    fn from(v: u64) -> Json {
        Json::Int(v as i64)
    }
}
impl From<f64> for Json {
    fn from(v: f64) -> Json {
        Json::Num(v)
    }
}
impl From<&str> for Json {
    fn from(v: &str) -> Json {
        Json::Str(v.to_string())
    }
}
impl From<String> for Json {
    fn from(v: String) -> Json {
        Json::Str(v)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Int(i) => write!(f, "{i}"),
            Json::Num(x) => write_num(f, Some(*x)),
            Json::Str(s) => write_str(f, s),
        }
    }
}

/// Writes `s` as a JSON string literal.
pub fn write_str(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    out.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

/// Writes an optional number; `None` and non-finite values become `null`.
/// Numbers always carry a fractional part (`4210.0`).
pub fn write_num(out: &mut impl fmt::Write, x: Option<f64>) -> fmt::Result {
    match x {
        Some(v) if v.is_finite() => {
            if v.fract() == 0.0 && v.abs() < 1e15 {
                write!(out, "{v:.1}")
            } else {
                write!(out, "{v}")
            }
        }
        _ => out.write_str("null"),
    }
}

/// One measured (or skipped) combination, as the output contract defines it.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Suite name (`port`, `rpc`, `transfer`, …).
    pub suite: String,
    /// Case name within the suite.
    pub case: String,
    /// Implementation: `ferry-<variant>` or a baseline name.
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
    pub extra: Vec<(String, Json)>,
}

impl Record {
    /// The reason this record was skipped, if it was.
    pub fn skipped(&self) -> Option<&str> {
        self.extra.iter().find(|(k, _)| k == "skipped").and_then(|(_, v)| match v {
            Json::Str(s) => Some(s.as_str()),
            _ => None,
        })
    }

    /// This record as one JSON object.
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        self.write_json(&mut s).expect("writing to a String cannot fail");
        s
    }

    fn write_json(&self, o: &mut String) -> fmt::Result {
        o.push_str("{\"suite\": ");
        write_str(o, &self.suite)?;
        o.push_str(", \"case\": ");
        write_str(o, &self.case)?;
        o.push_str(", \"impl\": ");
        write_str(o, &self.imp)?;
        write!(o, ", \"bytes\": {}, \"placement\": ", self.bytes)?;
        write_str(o, self.placement.name())?;
        o.push_str(", \"touch\": ");
        write_str(o, self.touch.name())?;
        write!(o, ", \"iters\": {}, \"median_ns\": ", self.iters)?;
        write_num(o, self.median_ns)?;
        o.push_str(", \"p99_ns\": ");
        write_num(o, self.p99_ns)?;
        o.push_str(", \"min_ns\": ");
        write_num(o, self.min_ns)?;
        o.push_str(", \"gbps\": ");
        write_num(o, self.gbps)?;
        o.push_str(", \"extra\": {");
        for (i, (k, v)) in self.extra.iter().enumerate() {
            if i > 0 {
                o.push_str(", ");
            }
            write_str(o, k)?;
            write!(o, ": {v}")?;
        }
        o.push_str("}}");
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        write_str(&mut s, "a\"b\\c\n\u{1}").unwrap();
        assert_eq!(s, r#""a\"b\\c\n\u0001""#);
    }

    #[test]
    fn numbers_keep_a_fraction_and_nan_is_null() {
        let mut s = String::new();
        write_num(&mut s, Some(4210.0)).unwrap();
        s.push(' ');
        write_num(&mut s, Some(1.5)).unwrap();
        s.push(' ');
        write_num(&mut s, Some(f64::NAN)).unwrap();
        s.push(' ');
        write_num(&mut s, None).unwrap();
        assert_eq!(s, "4210.0 1.5 null null");
    }
}
