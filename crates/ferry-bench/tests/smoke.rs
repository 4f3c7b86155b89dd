//! Smoke test of every registered suite: runs each case with a couple of
//! iterations per implementation (real processes, real channels) and checks
//! that the JSON records and the machine sidecar are well formed per the
//! output contract. It never looks at how long anything took.
//!
//! It runs without libtest's harness because the benchmarks fork their
//! peers, which needs a single-threaded process; a watchdog thread is
//! therefore not available either, so the whole test re-executes itself as
//! a child and the parent kills it if it runs past its deadline.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use ferry_bench::harness::{run_suite, Budget, Options};
use ferry_bench::record::{to_json_array, Placement};
use ferry_bench::suites;

/// A parsed JSON value (enough of JSON for the contract).
#[derive(Debug, Clone, PartialEq)]
enum V {
    Null,
    Bool(bool),
    Num { text: String },
    Str(String),
    Arr(Vec<V>),
    Obj(Vec<(String, V)>),
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

impl P<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && b" \n\r\t".contains(&self.s[self.i]) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at byte {}", c as char, self.i))
        }
    }
    fn value(&mut self) -> Result<V, String> {
        self.ws();
        match self.s.get(self.i).copied() {
            Some(b'{') => {
                self.i += 1;
                let mut v = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(V::Obj(v));
                }
                loop {
                    let V::Str(k) = self.value()? else { return Err(format!("object key at {}", self.i)) };
                    self.eat(b':')?;
                    let x = self.value()?;
                    if v.iter().any(|(kk, _)| *kk == k) {
                        return Err(format!("duplicate key {k}"));
                    }
                    v.push((k, x));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(V::Obj(v));
                        }
                        _ => return Err(format!("bad object at {}", self.i)),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut v = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(V::Arr(v));
                }
                loop {
                    v.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(V::Arr(v));
                        }
                        _ => return Err(format!("bad array at {}", self.i)),
                    }
                }
            }
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let c = *self.s.get(self.i).ok_or("unterminated string")?;
                    self.i += 1;
                    match c {
                        b'"' => return Ok(V::Str(out)),
                        b'\\' => {
                            let e = *self.s.get(self.i).ok_or("bad escape")?;
                            self.i += 1;
                            match e {
                                b'"' | b'\\' | b'/' => out.push(e as char),
                                b'n' => out.push('\n'),
                                b'r' => out.push('\r'),
                                b't' => out.push('\t'),
                                b'u' => {
                                    let h = std::str::from_utf8(&self.s[self.i..self.i + 4]).map_err(|e| e.to_string())?;
                                    out.push(char::from_u32(u32::from_str_radix(h, 16).map_err(|e| e.to_string())?).ok_or("bad \\u")?);
                                    self.i += 4;
                                }
                                _ => return Err(format!("bad escape {:?}", e as char)),
                            }
                        }
                        c if c < 0x20 => return Err("control character in string".into()),
                        _ => {
                            let start = self.i - 1;
                            let len = match c {
                                0..=0x7f => 1,
                                0xc0..=0xdf => 2,
                                0xe0..=0xef => 3,
                                _ => 4,
                            };
                            out.push_str(std::str::from_utf8(&self.s[start..start + len]).map_err(|e| e.to_string())?);
                            self.i = start + len;
                        }
                    }
                }
            }
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(V::Bool(true))
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(V::Bool(false))
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(V::Null)
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len() && b"-+.eE0123456789".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap().to_string();
                text.parse::<f64>().map_err(|e| format!("bad number {text}: {e}"))?;
                Ok(V::Num { text })
            }
            _ => Err(format!("unexpected input at byte {}", self.i)),
        }
    }
}

fn parse(s: &str) -> Result<V, String> {
    let mut p = P { s: s.as_bytes(), i: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != s.len() {
        return Err(format!("trailing bytes at {}", p.i));
    }
    Ok(v)
}

fn get<'a>(o: &'a [(String, V)], k: &str) -> Result<&'a V, String> {
    o.iter().find(|(kk, _)| kk == k).map(|(_, v)| v).ok_or_else(|| format!("missing field {k}"))
}

fn is_uint(v: &V) -> bool {
    matches!(v, V::Num { text } if text.bytes().all(|b| b.is_ascii_digit()))
}

fn num(v: &V) -> Option<f64> {
    match v {
        V::Num { text } => text.parse().ok(),
        _ => None,
    }
}

const FIELDS: [&str; 12] =
    ["suite", "case", "impl", "bytes", "placement", "touch", "iters", "median_ns", "p99_ns", "min_ns", "gbps", "extra"];

/// What identifies a record: (case, bytes, touch, placement, impl).
type Key = (String, u64, String, String, String);

/// Checks one record against the contract and the suite's declared names;
/// returns its key and, if it was skipped, why.
fn check_record(v: &V, suite: &ferry_bench::harness::Suite) -> Result<(Key, Option<String>), String> {
    let V::Obj(o) = v else { return Err("record is not an object".into()) };
    let keys: Vec<&str> = o.iter().map(|(k, _)| k.as_str()).collect();
    if keys != FIELDS {
        return Err(format!("fields {keys:?}, expected {FIELDS:?}"));
    }
    let s = |k: &str| -> Result<String, String> {
        match get(o, k)? {
            V::Str(s) => Ok(s.clone()),
            other => Err(format!("{k} is {other:?}, not a string")),
        }
    };
    let (su, case, imp, placement, touch) = (s("suite")?, s("case")?, s("impl")?, s("placement")?, s("touch")?);
    if su != suite.name {
        return Err(format!("suite {su} in the {} suite's output", suite.name));
    }
    let cases = (suite.cases)();
    if !cases.iter().any(|c| c.name == case) {
        return Err(format!("case {case} is not a case of {su}"));
    }
    if !(suite.impls)().iter().any(|i| i.name == imp) {
        return Err(format!("impl {imp} is not an impl of {su}"));
    }
    if !["same-core", "cross-core", "unpinned"].contains(&placement.as_str()) {
        return Err(format!("placement {placement}"));
    }
    if !["none", "read", "write"].contains(&touch.as_str()) {
        return Err(format!("touch {touch}"));
    }
    for k in ["bytes", "iters"] {
        if !is_uint(get(o, k)?) {
            return Err(format!("{k} is not a non-negative integer"));
        }
    }
    let bytes = num(get(o, "bytes")?).unwrap() as u64;
    if !cases.iter().any(|c| c.name == case && c.bytes == bytes && c.touch.name() == touch) {
        return Err(format!("{case} with {bytes} bytes and touch {touch} is not a declared case"));
    }
    let V::Obj(extra) = get(o, "extra")? else { return Err("extra is not an object".into()) };
    let median = get(o, "median_ns")?;
    let skipped = match median {
        V::Null => {
            let reason = match get(extra, "skipped") {
                Ok(V::Str(r)) if !r.is_empty() => r.clone(),
                _ => return Err(format!("{imp}/{case}: median_ns is null but extra.skipped has no reason")),
            };
            for k in ["p99_ns", "min_ns", "gbps"] {
                if *get(o, k)? != V::Null {
                    return Err(format!("{k} is set on a skipped record"));
                }
            }
            Some(reason)
        }
        V::Num { .. } => {
            for k in ["p99_ns", "min_ns"] {
                if num(get(o, k)?).is_none() {
                    return Err(format!("{k} is not a number"));
                }
            }
            match get(o, "gbps")? {
                V::Null | V::Num { .. } => {}
                _ => return Err("gbps is neither a number nor null".into()),
            }
            if extra.iter().any(|(k, _)| k == "skipped") {
                return Err("a measured record carries extra.skipped".into());
            }
            if num(get(o, "iters")?) == Some(0.0) {
                return Err("a measured record with zero iterations".into());
            }
            None
        }
        other => return Err(format!("median_ns is {other:?}")),
    };
    Ok(((case, bytes, touch, placement, imp), skipped))
}

/// The plots of a suite's records: one latency plot for every (case, touch,
/// placement) measured at two sizes or more, each a well-formed SVG with a
/// line or point per measured implementation.
fn check_plots(records: &[ferry_bench::record::Record], path: &str) -> Result<(), String> {
    let written = ferry_bench::plot::write_plots(records, path).map_err(|e| e.to_string())?;
    let mut groups = Vec::new();
    for r in records.iter().filter(|r| r.median_ns.is_some()) {
        let k = (r.case.clone(), r.touch.name(), r.placement.name());
        let sizes: std::collections::BTreeSet<u64> = records
            .iter()
            .filter(|q| q.median_ns.is_some() && (q.case.clone(), q.touch.name(), q.placement.name()) == k)
            .map(|q| q.bytes)
            .collect();
        if sizes.len() >= 2 && !groups.contains(&k) {
            groups.push(k);
        }
    }
    let latency: Vec<&String> = written.iter().filter(|p| p.ends_with("-latency.svg")).collect();
    if latency.len() < groups.len() {
        return Err(format!("{} latency plots for {} groups measured at several sizes", latency.len(), groups.len()));
    }
    for p in &written {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
        if !text.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") || !text.trim_end().ends_with("</svg>") {
            return Err(format!("{p} is not an SVG document"));
        }
        if text.matches('<').count() != text.matches('>').count() {
            return Err(format!("{p} has unbalanced tags"));
        }
        if !text.contains("<circle") {
            return Err(format!("{p} plots no point"));
        }
    }
    Ok(())
}

fn run_all() -> Result<(), String> {
    let opts = Options {
        budget: Budget::tiny(),
        placements: vec![Placement::SameCore, Placement::CrossCore],
        max_bytes: 1 << 20,
        max_bytes_reason: "the smoke test stops at 1 MiB".into(),
        progress: false,
        table: false,
    };
    let dir = std::env::temp_dir().join(format!("ferry-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut total = 0;
    for suite in suites::all() {
        let records = run_suite(&suite, &opts);
        let path = dir.join(format!("{}.json", suite.name));
        let path = path.to_str().unwrap();
        ferry_bench::cli::write_json(path, &records, &["ferry".into(), "bench".into(), suite.name.into()])
            .map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        assert_eq!(text, to_json_array(&records));
        let V::Arr(items) = parse(&text).map_err(|e| format!("{}: {e}", suite.name))? else {
            return Err(format!("{}: the output is not a JSON array", suite.name));
        };
        // Every case × placement × impl appears exactly once.
        let mut seen = BTreeMap::new();
        let mut measured = 0;
        for it in &items {
            let (k, skipped) = check_record(it, &suite).map_err(|e| format!("{}: {e}", suite.name))?;
            match skipped {
                None => measured += 1,
                // A benchmark that broke is a failure; one this machine
                // cannot run (one CPU, a refused pipe size) is not.
                Some(r) if r.starts_with("failed") || r.starts_with("ferry") || r.contains("no samples") => {
                    return Err(format!("{} {k:?} broke: {r}", suite.name));
                }
                Some(r) if k.1 <= opts.max_bytes => eprintln!("smoke: {} {k:?}: skipped: {r}", suite.name),
                Some(_) => {}
            }
            if seen.insert(k.clone(), ()).is_some() {
                return Err(format!("{}: duplicate record {k:?}", suite.name));
            }
        }
        let want = (suite.cases)().len() * opts.placements.len() * (suite.impls)().len();
        if items.len() != want {
            return Err(format!("{}: {} records, expected {want}", suite.name, items.len()));
        }
        if measured == 0 {
            return Err(format!("{}: nothing was measured", suite.name));
        }
        let meta = std::fs::read_to_string(format!("{path}.meta.json")).map_err(|e| e.to_string())?;
        let V::Obj(m) = parse(&meta).map_err(|e| format!("meta: {e}"))? else { return Err("meta is not an object".into()) };
        for k in ["cpu_model", "cores", "kernel", "thp_enabled", "thp_shmem_enabled", "unprivileged_userfaultfd", "userfaultfd_syscall_works", "ferry_version", "date", "command_line"] {
            get(&m, k).map_err(|e| format!("meta: {e}"))?;
        }
        check_plots(&records, path).map_err(|e| format!("{}: plots: {e}", suite.name))?;
        println!("smoke: {}: {} records ({measured} measured) well formed", suite.name, items.len());
        total += items.len();
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("smoke: {total} records checked");
    Ok(())
}

const CHILD: &str = "FERRY_BENCH_SMOKE_CHILD";

fn main() -> ExitCode {
    if std::env::var_os(CHILD).is_some() {
        return match run_all() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("smoke: FAILED: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // Watchdog: run the checks in a child process and kill it if it hangs.
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe).env(CHILD, "1").spawn().expect("start the smoke run");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Some(status) = child.try_wait().expect("wait for the smoke run") {
            return if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("smoke: FAILED: the run did not finish within 600 s (a deadlock?)");
            return ExitCode::FAILURE;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
