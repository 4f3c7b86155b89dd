//! `ferry bench report`: a results file (and its `FILE.meta.json` sidecar)
//! turned into a Markdown report that sets the papers' tables beside
//! today's numbers, with the ratios that matter: copy against remap, ferry
//! against the floor, ferry against its peers.
//!
//! The report reads whatever the file holds. Suites, cases and
//! implementations may be present or absent; what is absent (or was
//! skipped) is written as "not measured", never filled in. The records are
//! read strictly as [`Record`]s (the benchmark-schema contract); the sidecar
//! is read as whatever JSON object it is.

use std::fmt::{self, Write as _};

use serde_json::error::Category;
use serde_json::Value;

use crate::plot::{fmt_bytes, fmt_ns};
use crate::record::Record;

/// Why a results file could not be turned into a report.
#[derive(Debug)]
pub enum ReportError {
    /// The file could not be read.
    Read {
        /// The file.
        path: String,
        /// What the system said.
        error: std::io::Error,
    },
    /// The file is not valid JSON.
    Syntax {
        /// The file.
        path: String,
        /// What serde_json found, with the line and column.
        error: serde_json::Error,
    },
    /// The JSON is not an array of benchmark records.
    Shape {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Read { path, error } => {
                write!(f, "cannot read {path}: {error}; give the file `ferry bench ... --json FILE` wrote")
            }
            ReportError::Syntax { path, error } => {
                write!(f, "{path} is not valid JSON ({error}); regenerate it with `ferry bench all --json FILE`")
            }
            ReportError::Shape { path, what } => {
                write!(f, "{path} is not a benchmark results file ({what}); give the file `ferry bench ... --json FILE` wrote")
            }
        }
    }
}

impl std::error::Error for ReportError {}

/// Reads the records of a results file's text.
///
/// # Errors
/// When it is not JSON, or not an array of records as the contract defines
/// them.
pub fn parse_rows(path: &str, text: &str) -> Result<Vec<Record>, ReportError> {
    crate::record::from_json_array(text).map_err(|error| match error.classify() {
        Category::Data => ReportError::Shape { path: path.into(), what: error.to_string() },
        Category::Syntax | Category::Eof | Category::Io => ReportError::Syntax { path: path.into(), error },
    })
}

/// Reads `path` and, if present, `path.meta.json`.
///
/// # Errors
/// When the results file cannot be read or parsed (a missing or broken
/// sidecar is reported inside the report instead).
pub fn load(path: &str) -> Result<(Vec<Record>, Option<Value>), ReportError> {
    let text = std::fs::read_to_string(path).map_err(|error| ReportError::Read { path: path.into(), error })?;
    let rows = parse_rows(path, &text)?;
    let meta = std::fs::read_to_string(format!("{path}.meta.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
    Ok((rows, meta))
}

/// A results file a report is made from.
#[derive(Debug, Clone)]
pub struct Source {
    /// The results file, as the report should name it.
    pub path: String,
    /// Its machine sidecar (`path.meta.json`), if it was readable.
    pub meta: Option<Value>,
    /// The suites whose records the report takes from it (all of the first
    /// source's that no later source replaced).
    pub suites: Vec<String>,
}

/// Puts the records of a later run in place of `rows`' records of the
/// same suites (the whole suite, so that every ratio compares records of
/// one run) and returns those suites.
pub fn replace_suites(rows: &mut Vec<Record>, later: Vec<Record>) -> Vec<String> {
    let mut suites: Vec<String> = later.iter().map(|r| r.suite.clone()).collect();
    suites.sort();
    suites.dedup();
    rows.retain(|r| !suites.contains(&r.suite));
    rows.extend(later);
    suites
}

/// What `NOT` is written as.
pub const NOT_MEASURED: &str = "not measured";

const PLACEMENTS: [&str; 3] = ["same-core", "cross-core", "unpinned"];

fn is_ferry(i: &str) -> bool {
    i.starts_with("ferry")
}
fn is_peer(i: &str) -> bool {
    i == "iceoryx2" || i == "ipc-channel" || i.starts_with("iceoryx2-") || i.starts_with("ipc-channel-")
}
/// The copying baselines of the `transfer` suite.
fn is_copy(i: &str) -> bool {
    i == "pipe" || i.starts_with("pipe-") || i == "uds-stream" || i == "uds-seqpacket" || i == "process-vm-readv" || i == "vmsplice"
}

fn fmt_ratio(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}×")
    } else if x >= 10.0 {
        format!("{x:.1}×")
    } else {
        format!("{x:.2}×")
    }
}

fn fmt_ms(ms: f64) -> String {
    fmt_ns(ms * 1e6)
}

struct Ctx<'a> {
    rows: &'a [Record],
    placements: Vec<&'static str>,
}

impl<'a> Ctx<'a> {
    fn new(rows: &'a [Record]) -> Ctx<'a> {
        let placements = PLACEMENTS.iter().copied().filter(|p| rows.iter().any(|r| r.placement.name() == *p)).collect::<Vec<_>>();
        Ctx { rows, placements: if placements.is_empty() { vec!["cross-core"] } else { placements } }
    }

    /// Records of a case at a size, touch and placement.
    fn group(&self, suite: &str, case: &str, bytes: u64, touch: &str, placement: &str) -> Vec<&'a Record> {
        self.rows
            .iter()
            .filter(|r| r.suite == suite && r.case == case && r.bytes == bytes && r.touch.name() == touch && r.placement.name() == placement)
            .collect()
    }

    /// The fastest measured record among those whose impl passes `pick`.
    fn best(&self, suite: &str, case: &str, bytes: u64, touch: &str, placement: &str, pick: impl Fn(&str) -> bool) -> Option<&'a Record> {
        let g = self.group(suite, case, bytes, touch, placement);
        let measured = g
            .iter()
            .copied()
            .filter(|r| pick(&r.imp) && r.median_ns.is_some())
            .min_by(|a, b| a.median_ns.unwrap_or(f64::MAX).total_cmp(&b.median_ns.unwrap_or(f64::MAX)));
        // Nothing measured: the first skipped one, so its reason is shown.
        measured.or_else(|| g.into_iter().find(|r| pick(&r.imp)))
    }

    fn one(&self, suite: &str, case: &str, bytes: u64, touch: &str, placement: &str, imp: &str) -> Option<&'a Record> {
        self.best(suite, case, bytes, touch, placement, |i| i == imp)
    }
}

/// `12.3 µs (p99 20 µs) impl`, or "not measured" with the reason.
fn cell(r: Option<&Record>, scale: f64) -> String {
    match r {
        Some(r) => match r.median_ns {
            Some(m) => format!(
                "{} (p99 {}) `{}`",
                fmt_ns(m * scale),
                r.p99_ns.map_or("?".into(), |p| fmt_ns(p * scale)),
                r.imp
            ),
            None => format!("{NOT_MEASURED}: {}", r.skipped().unwrap_or("no reason recorded")),
        },
        None => NOT_MEASURED.to_string(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => fmt_ratio(a / b),
        _ => NOT_MEASURED.into(),
    }
}

fn med(r: Option<&Record>) -> Option<f64> {
    r.and_then(|r| r.median_ns)
}

/// A sidecar value as text: strings without quotes, arrays spaced, null
/// as "not measured".
fn show(v: &Value) -> String {
    match v {
        Value::Null => NOT_MEASURED.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(show).collect::<Vec<_>>().join(" "),
        other => other.to_string(),
    }
}

fn machine_section(o: &mut String, sources: &[Source]) {
    let _ = writeln!(o, "### Machine and run\n");
    for (i, s) in sources.iter().enumerate() {
        if i > 0 {
            let suites = s.suites.iter().map(|x| format!("`{x}`")).collect::<Vec<_>>().join(", ");
            let _ = writeln!(o, "The {suites} records are from `{}`, a later run:\n", s.path);
        }
        machine_table(o, s.meta.as_ref(), &s.path);
    }
}

fn machine_table(o: &mut String, meta: Option<&Value>, results: &str) {
    let Some(meta) = meta else {
        let _ = writeln!(o, "The machine was {NOT_MEASURED}: `{results}.meta.json` is missing or unreadable.\n");
        return;
    };
    let _ = writeln!(o, "| | |\n|---|---|");
    let keys = [
        ("cpu_model", "CPU"),
        ("cores", "CPUs usable"),
        ("arch", "architecture"),
        ("kernel", "Linux"),
        ("page_size", "page size"),
        ("thp_enabled", "transparent huge pages"),
        ("thp_shmem_enabled", "shmem huge pages"),
        ("unprivileged_userfaultfd", "vm.unprivileged_userfaultfd"),
        ("userfaultfd_syscall_works", "userfaultfd works"),
        ("loadavg_start", "load average at start (1, 5, 15 min)"),
        ("loadavg_end", "load average at end"),
        ("ferry_version", "ferry"),
        ("date", "date (UTC)"),
        ("command_line", "command"),
    ];
    for (k, label) in keys {
        let v = meta.get(k).map_or(NOT_MEASURED.to_string(), show);
        let _ = writeln!(o, "| {label} | {} |", v.replace('|', "\\|"));
    }
    o.push('\n');
}

fn accent(o: &mut String, c: &Ctx<'_>) {
    let _ = writeln!(
        o,
        "### Accent, Table 3-2: IPC operation times\n\n\
         Fitzgerald & Rashid 1986, PERQ. A simple message (under 960 bytes inline) cost 1.15 ms to send and \
         1.35 ms to receive; a complex message with a pointer to 1024 bytes, 10 ms each. Today's one-way time \
         is half the measured round trip (send and receive on both sides): `port` / `null-roundtrip` for the \
         simple message, `rpc` / `roundtrip` at 1024 bytes for the complex one (ferry copies the 1 KiB inline, \
         which Accent would have mapped).\n"
    );
    let _ = writeln!(o, "| message | placement | Accent (PERQ), send + receive | today, one way, best ferry | PERQ ÷ today |\n|---|---|---|---|---|");
    for &p in &c.placements {
        let simple = c.best("port", "null-roundtrip", 0, "none", p, is_ferry);
        let complex = c.best("rpc", "roundtrip", 1024, "none", p, is_ferry);
        let _ = writeln!(o, "| simple | {p} | {} | {} | {} |", fmt_ms(2.5), cell(simple, 0.5), ratio(Some(2.5e6), med(simple).map(|m| m / 2.0)));
        let _ = writeln!(
            o,
            "| complex, 1024 bytes | {p} | {} | {} | {} |",
            fmt_ms(20.0),
            cell(complex, 0.5),
            ratio(Some(20e6), med(complex).map(|m| m / 2.0))
        );
    }
    o.push('\n');
}

/// The `net` suite beside Accent's network figures: the paper (section
/// 3.5) gives one, a system generation that retrieved about 6 MB from a
/// file server over the Ethernet in about 40 minutes, while compiling, with
/// the Ethernet file transfer processes charged 104.5 s of CPU (Table 3-5).
fn net(o: &mut String, c: &Ctx<'_>) {
    let _ = writeln!(
        o,
        "### Ports across machines (`net`), and Accent's network file transfer\n\n\
         Fitzgerald & Rashid 1986 give one network figure: during a system generation the PERQ retrieved about \
         6 MB from a file server in about 40 minutes (about 2.6 KB/s, paced by the compilations beside it), \
         and the Ethernet file transfer processes used 104.5 s of CPU for it (about 17 ms per KB). They give no \
         network round trip and no copy-on-reference timing. Today's figures are over loopback between two \
         network servers in one process, both hosts on one CPU (same-core) or each on a CPU of its own \
         (cross-core); `× raw QUIC` divides by `quic-raw` of the same run (targets: 1.3 for \
         the round trip, 1.25 for the 256 MiB region), and `× relay floor` by `quic-relay`, raw QUIC between \
         two relay tasks each a Unix datagram socket away from its program (the four local hops of a round \
         trip through network servers, with none of ferry's work); `× port relay` by `quic-relay-port`, the \
         same relay with ferry ports for those hops (with the kernel's work for every port message, the \
         sender's credentials and room for rights, but none of the network server's).\n"
    );
    let _ = writeln!(o, "| case | placement | Accent (PERQ) | today, `ferry-net` | × raw QUIC | × relay floor | × port relay | raw TCP |\n|---|---|---|---|---|---|---|---|");
    for &p in &c.placements {
        let rt = c.one("net", "null-roundtrip", 0, "none", p, "ferry-net");
        let q = c.one("net", "null-roundtrip", 0, "none", p, "quic-raw");
        let t = c.one("net", "null-roundtrip", 0, "none", p, "tcp-raw");
        let relay = c.one("net", "null-roundtrip", 0, "none", p, "quic-relay");
        let port_relay = c.one("net", "null-roundtrip", 0, "none", p, "quic-relay-port");
        let _ = writeln!(
            o,
            "| null round trip | {p} | {NOT_MEASURED} (not given) | {} | {} | {} | {} | {} |",
            cell(rt, 1.0),
            ratio(med(rt), med(q)),
            ratio(med(rt), med(relay)),
            ratio(med(rt), med(port_relay)),
            cell(t, 1.0)
        );
        let n = 256 << 20;
        let one = c.one("net", "oneshot", n, "read", p, "ferry-net");
        let q = c.one("net", "oneshot", n, "read", p, "quic-raw");
        let t = c.one("net", "oneshot", n, "read", p, "tcp-raw");
        let gbps = |r: Option<&Record>| med(r).map_or(NOT_MEASURED.to_string(), |m| format!("{:.3} GB/s", n as f64 / m));
        let _ = writeln!(
            o,
            "| 256 MiB region, read all | {p} | 6 MB in ~40 min: 0.0000026 GB/s | {} ({}) | {} | n/a | n/a | {} |",
            cell(one, 1.0),
            gbps(one),
            ratio(med(one), med(q)),
            gbps(t)
        );
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "Copy-on-reference (Accent's port memory objects; the paper gives no figure): a 1 GiB region, the \
         receiver reads the first `touched` of it. `ferry-net-cor` maps it and only touched pages (and their \
         16-page clusters) cross; `ferry-net-eager` moves all of it first. The target at 1%: under 2% of the \
         region's bytes on the wire and at least 20× sooner than eager.\n"
    );
    let _ = writeln!(o, "| touched | placement | on touch | eager | eager ÷ on touch | wire bytes on touch (of the region) |\n|---|---|---|---|---|---|");
    let region = 1u64 << 30;
    for per_mille in [1u64, 10, 100, 1000] {
        let bytes = region * per_mille / 1000;
        for &p in &c.placements {
            let cor = c.one("net", "cor", bytes, "read", p, "ferry-net-cor");
            let eager = c.one("net", "cor", bytes, "read", p, "ferry-net-eager");
            let wire = cor.and_then(|r| r.extra.get("wire_bytes")).and_then(Value::as_f64);
            let share = wire.map_or(NOT_MEASURED.to_string(), |w| format!("{:.0} B ({:.2}%)", w, w * 100.0 / region as f64));
            let _ = writeln!(
                o,
                "| {:.1}% | {p} | {} | {} | {} | {share} |",
                per_mille as f64 / 10.0,
                cell(cor, 1.0),
                cell(eager, 1.0),
                ratio(med(eager), med(cor))
            );
        }
    }
    o.push('\n');
}

/// DASH's Table I (lazy) and II (eager) diagonals and first rows, ms, by
/// 8 KB pages.
const DASH_PAGES: [u64; 5] = [0, 1, 2, 4, 8];
const DASH_LAZY_UNREAD: [f64; 5] = [0.957, 1.077, 1.163, 1.334, 1.679];
const DASH_LAZY_READ: [f64; 5] = [0.957, 1.248, 1.500, 2.008, 3.026];
const DASH_EAGER_READ: [f64; 5] = [0.957, 1.194, 1.400, 1.815, 2.645];

fn dash(o: &mut String, c: &Ctx<'_>) {
    let _ = writeln!(
        o,
        "### DASH, Tables I–III: moving a message between address spaces\n\n\
         Tzou & Anderson 1991, Sun-3/50, 8 KB pages, asynchronous messages, half the loop time. \
         Table I maps pages on first reference, Table II at receive time; copying one 8 KB page cost 2.105 ms \
         (twice, as UNIX does, 4.210 ms).\n"
    );
    let _ = writeln!(o, "| pages of 8 KB | bytes | Table I, none read | Table I, all read | Table II, all read | null + two copies per page (Table III) |\n|---|---|---|---|---|---|");
    for (k, &pages) in DASH_PAGES.iter().enumerate() {
        let _ = writeln!(
            o,
            "| {pages} | {} | {} | {} | {} | {} |",
            fmt_bytes(pages * 8192),
            fmt_ms(DASH_LAZY_UNREAD[k]),
            fmt_ms(DASH_LAZY_READ[k]),
            fmt_ms(DASH_EAGER_READ[k]),
            fmt_ms(0.957 + 4.210 * pages as f64)
        );
    }
    let sizes = sizes_of(c, "transfer", "oneshot");
    let _ = writeln!(
        o,
        "\nToday, `transfer` / `oneshot` (one payload produced before timing; timing ends when the receiver has \
         done its touch and acknowledged): the best ferry implementation, the best copying baseline (pipes, \
         sockets, `process_vm_readv`, `vmsplice`), the mapping floor `memfd-map`, the one-copy floor `memcpy`, \
         and the peers. *copy ÷ ferry* is DASH's \"remapping is 6–10× faster than copying\" measured again.\n"
    );
    if sizes.is_empty() {
        let _ = writeln!(o, "`transfer` / `oneshot`: {NOT_MEASURED}.\n");
    }
    for touch in ["none", "read", "write"] {
        if sizes.is_empty() {
            break;
        }
        let _ = writeln!(o, "Receiver touch: **{touch}**.\n");
        let _ = writeln!(
            o,
            "| bytes | placement | best ferry | best copy | copy ÷ ferry | memfd-map | memcpy | ipc-channel | iceoryx2 | ferry ÷ best peer |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        for &b in &sizes {
            for &p in &c.placements {
                let f = c.best("transfer", "oneshot", b, touch, p, is_ferry);
                let cp = c.best("transfer", "oneshot", b, touch, p, is_copy);
                let peer = c.best("transfer", "oneshot", b, touch, p, is_peer);
                let _ = writeln!(
                    o,
                    "| {} | {p} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    fmt_bytes(b),
                    cell(f, 1.0),
                    cell(cp, 1.0),
                    ratio(med(cp), med(f)),
                    cell(c.one("transfer", "oneshot", b, touch, p, "memfd-map"), 1.0),
                    cell(c.one("transfer", "oneshot", b, touch, p, "memcpy"), 1.0),
                    cell(c.one("transfer", "oneshot", b, touch, p, "ipc-channel"), 1.0),
                    cell(c.one("transfer", "oneshot", b, touch, p, "iceoryx2"), 1.0),
                    ratio(med(f), med(peer)),
                );
            }
        }
        o.push('\n');
    }
    // Every ferry variant side by side: lazy against eager mapping, copy
    // against remap, as DASH's Tables I and II set them.
    let mut ferries: Vec<&str> = Vec::new();
    for r in c.rows.iter().filter(|r| r.suite == "transfer" && r.case == "oneshot" && is_ferry(&r.imp)) {
        if !ferries.contains(&r.imp.as_str()) {
            ferries.push(&r.imp);
        }
    }
    let _ = writeln!(o, "Every ferry variant in `transfer` / `oneshot` (DASH's Table I maps lazily, Table II eagerly), with the mapping floor:\n");
    if ferries.is_empty() {
        let _ = writeln!(o, "ferry's transfer implementations: {NOT_MEASURED}.\n");
    } else {
        let mut head = String::from("| bytes | touch | placement |");
        let mut rule = String::from("|---|---|---|");
        for f in ferries.iter().chain(["memfd-map"].iter()) {
            let _ = write!(head, " `{f}` |");
            rule.push_str("---|");
        }
        let _ = writeln!(o, "{head}\n{rule}");
        for &b in &sizes {
            for touch in ["none", "read", "write"] {
                for &p in &c.placements {
                    let mut line = format!("| {} | {touch} | {p} |", fmt_bytes(b));
                    for f in ferries.iter().chain(["memfd-map"].iter()) {
                        let r = c.one("transfer", "oneshot", b, touch, p, f);
                        let v = match r.and_then(|r| r.median_ns) {
                            Some(m) => fmt_ns(m),
                            None => NOT_MEASURED.to_string(),
                        };
                        let _ = write!(line, " {v} |");
                    }
                    let _ = writeln!(o, "{line}");
                }
            }
        }
        o.push('\n');
    }
    // Table III: per-page increment.
    let _ = writeln!(
        o,
        "**Table III, the increment per 8 KB page.** DASH: 0.087 ms mapped on demand and not read, 0.254 ms mapped \
         on demand and read, 0.208 ms mapped at receive; 2.105 ms to copy once, 4.210 ms twice. Today's increment is \
         the slope of `transfer` / `oneshot` between 64 KiB and 1 MiB, per 8 KiB.\n"
    );
    let _ = writeln!(o, "| implementation | touch | placement | today per 8 KiB | DASH counterpart | DASH ÷ today |\n|---|---|---|---|---|---|");
    let (lo, hi) = (64u64 << 10, 1u64 << 20);
    let mut any = false;
    for touch in ["none", "read"] {
        let dash_ms = if touch == "none" { 0.087 } else { 0.254 };
        for &p in &c.placements {
            let picks: [Pick; 4] = [
                ("best ferry", is_ferry, dash_ms, if touch == "none" { "remap, not read" } else { "remap, read" }),
                ("memfd-map", |i| i == "memfd-map", dash_ms, if touch == "none" { "remap, not read" } else { "remap, read" }),
                ("best copy", is_copy, 4.210, "copy twice"),
                ("memcpy", |i| i == "memcpy", 2.105, "copy once"),
            ];
            for (label, pick, paper, what) in picks {
                let a = c.best("transfer", "oneshot", lo, touch, p, pick);
                let b = c.best("transfer", "oneshot", hi, touch, p, pick);
                let slope = match (med(a), med(b)) {
                    (Some(x), Some(y)) => Some((y - x) / ((hi - lo) as f64 / 8192.0)),
                    _ => None,
                };
                any |= slope.is_some();
                let today = slope.map_or(NOT_MEASURED.to_string(), |s| {
                    let noise = if s <= 0.0 { " (no increase: within noise)" } else { "" };
                    format!("{}{noise} `{}`", fmt_ns(s), b.map_or("", |r| r.imp.as_str()))
                });
                let _ = writeln!(
                    o,
                    "| {label} | {touch} | {p} | {today} | {} {what} | {} |",
                    fmt_ms(paper),
                    ratio(Some(paper * 1e6), slope.filter(|s| *s > 0.0))
                );
            }
        }
    }
    if !any {
        let _ = writeln!(o, "\n(The 64 KiB and 1 MiB sizes were {NOT_MEASURED}.)");
    }
    o.push('\n');
}

/// A row of DASH's Table III today: label, which implementations, the
/// paper's figure (ms) and what it measured.
type Pick = (&'static str, fn(&str) -> bool, f64, &'static str);

fn sizes_of(c: &Ctx<'_>, suite: &str, case: &str) -> Vec<u64> {
    let mut v: Vec<u64> = c.rows.iter().filter(|r| r.suite == suite && r.case == case).map(|r| r.bytes).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn l4(o: &mut String, c: &Ctx<'_>) {
    let _ = writeln!(
        o,
        "### L4: the short-message round trip and its floor\n\n\
         Liedtke 1993, 486/50: an 8-byte cross-address-space IPC in 5 µs (250 cycles) one way, 10 µs there and \
         back, against an estimated minimum of 172 cycles. Today: `rpc` / `roundtrip` with 8 bytes each way, \
         every implementation, beside the blocking floor (`futex-floor`: two processes ping-ponging on a shared \
         futex) and the polling floor (`spin-floor`).\n"
    );
    let _ = writeln!(o, "| implementation | placement | round trip, median (p99) | ÷ futex-floor | ÷ spin-floor | L4 (10 µs) ÷ this |\n|---|---|---|---|---|---|");
    let mut imps: Vec<&str> = c.rows.iter().filter(|r| r.suite == "rpc" && r.case == "roundtrip" && r.bytes == 8).map(|r| r.imp.as_str()).collect();
    imps.dedup();
    let mut seen = Vec::new();
    imps.retain(|i| if seen.contains(i) { false } else { seen.push(*i); true });
    if imps.is_empty() {
        let _ = writeln!(o, "| any | any | {NOT_MEASURED} | | | |");
    }
    for &p in &c.placements {
        let futex = med(c.one("rpc", "roundtrip", 8, "none", p, "futex-floor"));
        let spin = med(c.one("rpc", "roundtrip", 8, "none", p, "spin-floor"));
        for imp in &imps {
            let r = c.group("rpc", "roundtrip", 8, "none", p).into_iter().find(|r| r.imp == *imp);
            let m = med(r);
            let _ = writeln!(o, "| `{imp}` | {p} | {} | {} | {} | {} |", cell(r, 1.0), ratio(m, futex), ratio(m, spin), ratio(Some(10_000.0), m));
        }
    }
    o.push('\n');
    let _ = writeln!(o, "Ferry against its peers, `rpc` / `roundtrip` at every size (best ferry ÷ peer; below 1 means ferry is faster):\n");
    let _ = writeln!(o, "| bytes | placement | best ferry | ipc-channel | ferry ÷ ipc-channel | iceoryx2 | ferry ÷ iceoryx2 |\n|---|---|---|---|---|---|---|");
    let sizes = sizes_of(c, "rpc", "roundtrip");
    if sizes.is_empty() {
        let _ = writeln!(o, "| any | any | {NOT_MEASURED} | | | | |");
    }
    for b in sizes {
        for &p in &c.placements {
            let f = c.best("rpc", "roundtrip", b, "none", p, is_ferry);
            let ic = c.one("rpc", "roundtrip", b, "none", p, "ipc-channel");
            let ix = c.best("rpc", "roundtrip", b, "none", p, |i| i == "iceoryx2" || i.starts_with("iceoryx2-"));
            let _ = writeln!(
                o,
                "| {} | {p} | {} | {} | {} | {} | {} |",
                fmt_bytes(b),
                cell(f, 1.0),
                cell(ic, 1.0),
                ratio(med(f), med(ic)),
                cell(ix, 1.0),
                ratio(med(f), med(ix))
            );
        }
    }
    o.push('\n');
}

fn dean_armand(o: &mut String, c: &Ctx<'_>) {
    let _ = writeln!(
        o,
        "### Dean & Armand, Table 5-2: trap and RPC times\n\n\
         Dean & Armand 1992, 386/25 PCs: a trap to the UNIX emulation (`getpid`) took 61 µs on Mach 3.0; a null \
         RPC between two user tasks 310 µs on Mach 3.0, and 83 µs between CHORUS/MiX supervisor actors through a \
         message handler. Today: the null system call from `ferry probe` (when the results hold its records), a \
         null message round trip through ferry's ports, and the smallest `rpc` round trip.\n"
    );
    let _ = writeln!(o, "| operation | placement | paper | today | paper ÷ today |\n|---|---|---|---|---|");
    let sys = c.rows.iter().find(|r| r.suite == "probe" && r.case == "null-syscall" && r.median_ns.is_some());
    let _ = writeln!(o, "| trap (null system call) | — | 61 µs Mach 3.0 | {} | {} |", cell(sys, 1.0), ratio(Some(61_000.0), med(sys)));
    for &p in &c.placements {
        let port = c.best("port", "null-roundtrip", 0, "none", p, is_ferry);
        let rpc = c.best("rpc", "roundtrip", 8, "none", p, is_ferry);
        let _ = writeln!(o, "| null RPC, ferry port | {p} | 310 µs Mach 3.0 | {} | {} |", cell(port, 1.0), ratio(Some(310_000.0), med(port)));
        let _ = writeln!(o, "| null RPC, best ferry 8-byte call | {p} | 83 µs CHORUS/MiX | {} | {} |", cell(rpc, 1.0), ratio(Some(83_000.0), med(rpc)));
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "### Dean & Armand, Table 5-8: supplying pages by copy or by page stealing\n\n\
         Mach 3.0's external pager, per page fault served from disk: `Data_Provided` (copies) 12.1 ms at 4 KB, \
         10.0 ms at 8 KB, 7.5 ms at 16 KB; `Data_Supply` (steals the page, no copy) 11.5, 10.0 and 7.5 ms (the disk \
         dominates: 530 KB/s at 16 KB). Today: the `pager` suite, every implementation (ferry's pager supplying pages \
         with `UFFDIO_COPY` or `UFFDIO_MOVE`, the bare userfaultfd handler, a plain file read and mmap), from memory \
         rather than disk.\n"
    );
    let pager: Vec<&Record> = c.rows.iter().filter(|r| r.suite == "pager").collect();
    if pager.is_empty() {
        let _ = writeln!(o, "`pager`: {NOT_MEASURED} (the suite was not in this run).\n");
        return;
    }
    let _ = writeln!(o, "| case | bytes | placement | implementation | median (p99) | pages per fault | GB/s |\n|---|---|---|---|---|---|---|");
    for r in &pager {
        let _ = writeln!(
            o,
            "| {} | {} | {} | `{}` | {} | {} | {} |",
            r.case,
            fmt_bytes(r.bytes),
            r.placement,
            r.imp,
            cell(Some(r), 1.0),
            r.extra_num("cluster").map_or(String::new(), |x| format!("{x}")),
            r.gbps.map_or(String::new(), |g| format!("{g:.2}"))
        );
    }
    // Copy against move, where both are there.
    let mut lines = Vec::new();
    for case in ["fault", "seqread"] {
        for b in sizes_of(c, "pager", case) {
            for &p in &c.placements {
                let g = c.group("pager", case, b, "read", p);
                let cp = g.iter().find(|r| is_ferry(&r.imp) && r.imp.contains("copy") && r.median_ns.is_some());
                let mv = g.iter().find(|r| is_ferry(&r.imp) && r.imp.contains("move") && r.median_ns.is_some());
                if let (Some(cp), Some(mv)) = (cp, mv) {
                    lines.push(format!(
                        "| {case} | {} | {p} | `{}` ÷ `{}` | {} |",
                        fmt_bytes(b),
                        cp.imp,
                        mv.imp,
                        ratio(cp.median_ns, mv.median_ns)
                    ));
                }
            }
        }
    }
    let _ = writeln!(o, "\nCopy ÷ move (Dean & Armand measured 12.1 ÷ 11.5 = 1.05× at 4 KB):\n");
    if lines.is_empty() {
        let _ = writeln!(o, "{NOT_MEASURED}: no case has both a copying and a moving ferry pager measured.\n");
    } else {
        let _ = writeln!(o, "| case | bytes | placement | ratio | copy ÷ move |\n|---|---|---|---|---|");
        for l in lines {
            let _ = writeln!(o, "{l}");
        }
        o.push('\n');
    }
}

/// Dean & Armand's Tables 5-3, 5-4, 5-5 and 5-9 (Unix `read`/`write`
/// through Mach 3.0's emulation library and BSD single server) beside the
/// `files` suite: the same calls through ferry's emulation library,
/// CHORUS-style segment I/O, and native calls.
fn dean_armand_files(o: &mut String, c: &Ctx<'_>) {
    let files: Vec<&Record> = c.rows.iter().filter(|r| r.suite == "files").collect();
    let _ = writeln!(
        o,
        "### Dean & Armand, Tables 5-3, 5-4, 5-5 and 5-9: Unix read() and write() through an emulation library\n\n\
         Dean & Armand 1992, Mach 3.0 with the BSD4.3 single server on an HP Vectra (386/25): read() 320 KB/s and \
         write() 300 KB/s from disk (12.5 and 13.3 ms per 4 KB, Table 5-3); cached sequential 4 KB reads 4.3 MB/s, \
         900 µs per read, the same as Mach 2.6 (Table 5-4); a cached 1-byte read after lseek() 210 µs (Mach 2.6: \
         390 µs), a 1-byte write 200 µs, lseek() alone 95 µs (Table 5-5); the read path broken down: trap to the \
         emulation 61 µs, a window change (every 16 reads) 1440 µs, a fast page fault 316 µs (Table 5-9). Today: \
         the `files` suite, `ferry-emul` (the emulation library: mapped 1 MiB windows and a token), `ferry-sg` \
         (CHORUS's segment read/write by message), `ferry-sg-handler` (the same server routine run in the caller's \
         thread) and `native` (the kernel's read()/write()), on cached files (the disk rows of Table 5-3 are not \
         measured: the page cache is warm).\n"
    );
    if files.is_empty() {
        let _ = writeln!(o, "`files`: {NOT_MEASURED} (the suite was not in this run).\n");
        return;
    }
    let impls = ["ferry-emul", "ferry-sg", "ferry-sg-handler", "native"];
    let rows: [(&str, &str, &str, &str); 4] = [
        ("5-4", "seqread", "read", "cached 4 KB read, sequential: 900 µs (4.3 MB/s) Mach 3.0 and 2.6"),
        ("5-5", "byte-read", "read", "cached 1-byte read after lseek: 210 µs + 95 µs lseek Mach 3.0, 390 µs Mach 2.6"),
        ("5-3", "write", "write", "4 KB write: 13.3 ms from disk (300 KB/s) Mach 3.0"),
        ("5-9", "remap-read", "read", "4 KB read forcing a window change: 2250 µs Mach 3.0 (window change 1440 µs)"),
    ];
    let _ = writeln!(o, "| table | case | placement | paper | {} | `ferry-emul` ÷ `native` |", impls.map(|i| format!("`{i}`")).join(" | "));
    let _ = writeln!(o, "|---|---|---|---|{}---|", "---|".repeat(impls.len()));
    for (table, case, touch, paper) in rows {
        let Some(bytes) = files.iter().find(|r| r.case == case).map(|r| r.bytes) else { continue };
        for &p in &c.placements {
            // seqread records a pass over the file; shown per 4 KB read.
            let per_read = |r: Option<&Record>| r.and_then(|r| r.extra_num("reads_per_op")).map_or(1.0, |n| 1.0 / n.max(1.0));
            let cells: Vec<String> = impls
                .iter()
                .map(|i| {
                    let r = c.one("files", case, bytes, touch, p, i);
                    cell(r, per_read(r))
                })
                .collect();
            let emul = med(c.one("files", case, bytes, touch, p, "ferry-emul"));
            let native = med(c.one("files", case, bytes, touch, p, "native"));
            let _ = writeln!(o, "| {table} | {case} | {p} | {paper} | {} | {} |", cells.join(" | "), ratio(emul, native));
        }
    }
    // Table 5-9's breakdown, today: the fast path (token and copy) from
    // byte-read, a window change from remap-read less a sequential read.
    let _ = writeln!(o, "\nThe read path of `ferry-emul` broken down (Table 5-9's terms; cross-core rows where present):\n");
    let p = if c.placements.contains(&"cross-core") { "cross-core" } else { c.placements[0] };
    let pick = |case: &str, touch: &str| {
        let r = files.iter().find(|r| r.case == case).and_then(|r| c.one("files", case, r.bytes, touch, p, "ferry-emul"));
        med(r).map(|m| m / r.and_then(|r| r.extra_num("reads_per_op")).unwrap_or(1.0).max(1.0))
    };
    let (byte, seq, remap) = (pick("byte-read", "read"), pick("seqread", "read"), pick("remap-read", "read"));
    let _ = writeln!(o, "| step | paper (Mach 3.0) | today |\n|---|---|---|");
    let show = |v: Option<f64>| v.map_or(NOT_MEASURED.to_string(), fmt_ns);
    let _ = writeln!(o, "| trap to the emulation | 61 µs | none: a library call, no trap |");
    let _ = writeln!(o, "| token and 1-byte copy, with lseek (byte-read) | 210 µs + 95 µs | {} |", show(byte));
    let _ = writeln!(o, "| 4 KB read inside the window (seqread, per read) | 900 µs | {} |", show(seq));
    let _ = writeln!(o, "| window change (remap-read less seqread) | 1440 µs | {} |", show(remap.zip(seq).map(|(r, s)| (r - s).max(0.0))));
    o.push('\n');
}

/// A row of Dean & Armand's Tables 5-4/5-5 today: its label, the suite, the
/// sequential-read case, the random-read case, and which implementation.
/// Other ways of reading files (an emulation library, a `files` suite) add
/// rows of their own.
pub type CachedReadRow = (&'static str, &'static str, &'static str, &'static str, fn(&str) -> bool);

/// The rows the `pager` suite gives: the file server at its two read-ahead
/// clusters, and the native `read()` and `mmap`; native `read()` is the
/// row the others are divided by.
pub const CACHED_READ_ROWS: &[CachedReadRow] = &[
    ("file server (`ferry-fileserver`)", "pager", "seqread", "randread", |i| i == "ferry-fileserver"),
    ("file server, 512-page cluster", "pager", "seqread", "randread", |i| i == "ferry-fileserver-ra512"),
    ("file server, version kept by another snapshot", "pager", "seqread", "randread", |i| i == "ferry-fileserver-shared"),
    ("native `read()` (`file-read`)", "pager", "seqread", "randread", |i| i == "file-read"),
    ("native `mmap` (`file-mmap`)", "pager", "seqread", "randread", |i| i == "file-mmap"),
];

/// The native `read()` row's record for a case, to divide by.
fn native_read<'a>(c: &Ctx<'a>, case: &str, bytes: u64, p: &str) -> Option<&'a Record> {
    c.one("pager", case, bytes, "read", p, "file-read")
}

/// Dean & Armand's Tables 5-4 (cached sequential read throughput) and 5-5
/// (cached small reads), from `rows`: each row's sequential pass and its
/// random 4 KiB reads, beside native `read()`.
fn dean_armand_cached_reads(o: &mut String, c: &Ctx<'_>, rows: &[CachedReadRow]) {
    let _ = writeln!(
        o,
        "### Dean & Armand, Table 5-4: cached read throughput\n\n\
         Dean & Armand 1992, 386/25 PCs, sequential 4096-byte `read()`s through a file of about 2 MB already in \
         the cache: Mach 3.0 with the BSD single server (mapped-file windows in an emulation library) 4.3 MB/s, \
         900 µs a read; Mach 2.6 (monolithic) 4.3 MB/s, 900 µs; CHORUS/MiX V.4 3.3 MB/s, 1100 µs; SVR4 3.0 MB/s \
         (about 1300 µs). The servers matched or beat the monolithic kernels. Today: `pager` / `seqread`, one \
         pass over a file whose page cache is warm, through ferry's file server (a fresh snapshot per pass) and \
         natively; time per 4 KiB of the pass. Opening is not timed (nor is `file-mmap`'s `mmap` call); the file \
         server copies a file into a new sealed version at its first open, and the last column gives what that \
         cost where the run noted it.\n"
    );
    let _ = writeln!(
        o,
        "| file | placement | reader | per 4 KiB | MB/s | ÷ native `read()` time | opening, per 4 KiB (untimed, noted) |\n|---|---|---|---|---|---|---|"
    );
    let seq = sizes_of(c, "pager", "seqread");
    if seq.is_empty() {
        let _ = writeln!(o, "| any | any | any | {NOT_MEASURED} | | |");
    }
    let per_page = |r: Option<&Record>, bytes: u64| med(r).map(|m| m * 4096.0 / bytes as f64);
    for &b in &seq {
        for &p in &c.placements {
            let native = per_page(native_read(c, "seqread", b, p), b);
            for (label, suite, case, _, pick) in rows {
                let r = c.best(suite, case, b, "read", p, pick);
                let pp = per_page(r, b);
                let mbps = med(r).map_or(String::new(), |m| format!("{:.0}", b as f64 / m * 1e3));
                let shown = match (r, pp) {
                    (Some(r), Some(pp)) => format!("{} `{}`", fmt_ns(pp), r.imp),
                    (r, _) => cell(r, 1.0),
                };
                let open = r.and_then(|r| r.extra_num("open_us_mean")).map_or(String::new(), |us| fmt_ns(us * 1e3 * 4096.0 / b as f64));
                let _ = writeln!(o, "| {} | {p} | {label} | {shown} | {mbps} | {} | {open} |", fmt_bytes(b), ratio(pp, native));
            }
        }
    }
    let _ = writeln!(
        o,
        "\n### Dean & Armand, Table 5-5: cached read and write times\n\n\
         Dean & Armand 1992: a one-byte `read()` after an `lseek()`, the file cached: Mach 3.0 210 µs, Mach 2.6 \
         390 µs, CHORUS/MiX V.4 710 µs, SVR4 630 µs (`lseek` alone 95, 79, 155 and 121 µs; one-byte writes 200, 380, \
         720 and 420 µs). Today: `pager` / `randread`, a 4 KiB read at a random page of a cached file (`pread` for \
         native `read()`, a touch of the snapshot's page for the file server), per read. A write through the file \
         server replaces the whole file (`FileClient::write`) and has no one-byte counterpart here: \
         {NOT_MEASURED}.\n"
    );
    let _ = writeln!(o, "| placement | reader | per read, median (p99) | ÷ native `read()` | Mach 3.0 (210 µs) ÷ this |\n|---|---|---|---|---|");
    let rand = sizes_of(c, "pager", "randread");
    if rand.is_empty() {
        let _ = writeln!(o, "| any | any | {NOT_MEASURED} | | |");
    }
    for &b in &rand {
        for &p in &c.placements {
            let native = med(native_read(c, "randread", b, p));
            for (label, suite, _, case, pick) in rows {
                let r = c.best(suite, case, b, "read", p, pick);
                let _ = writeln!(o, "| {p} | {label} | {} | {} | {} |", cell(r, 1.0), ratio(med(r), native), ratio(Some(210_000.0), med(r)));
            }
        }
    }
    o.push('\n');
}

fn anderson(o: &mut String, c: &Ctx<'_>) {
    let _ = writeln!(
        o,
        "### Anderson et al., Table 1: primitive operating-system functions\n\n\
         Anderson, Levy, Bershad & Lazowska 1991, µs: DEC CVAX and MIPS R3000 (DECstation 5000/200). Today: \
         `ferry probe`'s records, when the results hold them (`ferry bench all` runs the probe too). The PTE change \
         and the context switch exclude the system call, as the paper's do.\n"
    );
    let _ = writeln!(o, "| primitive | CVAX | R3000 | today | R3000 ÷ today |\n|---|---|---|---|---|");
    let prims = [
        ("null system call", "null-syscall", 15.8, 4.1),
        ("trap", "trap", 23.1, 5.2),
        ("page table entry change", "pte-change", 8.8, 2.0),
        ("context switch", "context-switch", 28.3, 7.4),
    ];
    for (label, case, cvax, r3000) in prims {
        let r = c.rows.iter().find(|r| r.suite == "probe" && r.case == case && r.median_ns.is_some());
        let today = r.map(|r| r.extra_num("minus_syscalls_ns").filter(|x| *x > 0.0).unwrap_or(r.median_ns.unwrap_or(0.0)));
        let shown = match (r, today) {
            (Some(r), Some(t)) => format!("{} ({})", fmt_ns(t), r.placement),
            _ => {
                let skipped = c.rows.iter().find(|r| r.suite == "probe" && r.case == case).and_then(Record::skipped);
                skipped.map_or(NOT_MEASURED.to_string(), |s| format!("{NOT_MEASURED}: {s}"))
            }
        };
        let _ = writeln!(o, "| {label} | {cvax} µs | {r3000} µs | {shown} | {} |", ratio(Some(r3000 * 1e3), today));
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "### Anderson et al., Table 7: how often the primitives are used\n\n\
         On the remote Andrew benchmark Mach 3.0 made 128,874 address-space switches to Mach 2.5's 3,904 (33×) and \
         160,233 system calls to 35,498: decomposition multiplies the primitives. Today's counterpart is per \
         operation: the context switches of both processes per round trip (`extra.ctx_switches_per_op`) and any \
         other per-operation counts the implementations record, for the small-message cases.\n"
    );
    let _ = writeln!(o, "| suite / case | bytes | placement | implementation | counts per operation |\n|---|---|---|---|---|");
    let mut n = 0;
    for (suite, case, bytes) in [("port", "null-roundtrip", 0u64), ("rpc", "roundtrip", 64)] {
        for &p in &c.placements {
            for r in c.group(suite, case, bytes, "none", p) {
                let counts: Vec<String> = r
                    .extra
                    .iter()
                    .filter(|(k, v)| k.ends_with("_per_op") && v.as_f64().is_some())
                    .map(|(k, v)| format!("{} {}", k.trim_end_matches("_per_op").replace('_', " "), v))
                    .collect();
                let shown = if r.median_ns.is_none() {
                    format!("{NOT_MEASURED}: {}", r.skipped().unwrap_or("no reason recorded"))
                } else if counts.is_empty() {
                    NOT_MEASURED.to_string()
                } else {
                    counts.join(", ")
                };
                n += 1;
                let _ = writeln!(o, "| {suite} / {case} | {} | {p} | `{}` | {shown} |", fmt_bytes(bytes), r.imp);
            }
        }
    }
    if n == 0 {
        let _ = writeln!(o, "| port / null-roundtrip | | | | {NOT_MEASURED} |");
    }
    o.push('\n');
}

fn all_results(o: &mut String, c: &Ctx<'_>) {
    let _ = writeln!(o, "### Every record\n\nMedian (p99) per operation; *x ref* is the ratio to the suite's reference baseline where the suite has one.\n");
    let mut suites: Vec<&str> = Vec::new();
    for r in c.rows {
        if !suites.contains(&r.suite.as_str()) && r.suite != "probe" {
            suites.push(&r.suite);
        }
    }
    for suite in suites {
        let _ = writeln!(o, "#### `{suite}`\n");
        let _ = writeln!(o, "| case | bytes | touch | placement | implementation | median | p99 | GB/s | note |\n|---|---|---|---|---|---|---|---|---|");
        for r in c.rows.iter().filter(|r| r.suite == suite) {
            let note = match r.skipped() {
                Some(s) => format!("{NOT_MEASURED}: {s}"),
                None => r.extra_num("ctx_switches_per_op").map_or(String::new(), |x| format!("{x} switches/op")),
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | `{}` | {} | {} | {} | {} |",
                r.case,
                fmt_bytes(r.bytes),
                r.touch,
                r.placement,
                r.imp,
                r.median_ns.map_or("—".into(), fmt_ns),
                r.p99_ns.map_or("—".into(), fmt_ns),
                r.gbps.map_or(String::new(), |g| format!("{g:.2}")),
                note.replace('|', "\\|")
            );
        }
        o.push('\n');
    }
}

/// The Markdown report of `rows`, made from `sources` (the results file
/// first, then any later runs whose suites replaced its records; none
/// gives a report of `rows` alone), listing `plots` (paths as they should
/// be linked).
pub fn render(rows: &[Record], sources: &[Source], plots: &[String]) -> String {
    let c = Ctx::new(rows);
    let mut o = String::new();
    let results = sources.first().map_or("(none)", |s| s.path.as_str());
    let command = std::iter::once(format!("ferry bench report {results}"))
        .chain(sources.iter().skip(1).map(|s| format!("--with {}", s.path)))
        .collect::<Vec<_>>()
        .join(" ");
    let _ = writeln!(o, "## Report: `{results}`\n");
    let _ = writeln!(
        o,
        "Generated by `{command}` from {} records. Times are medians per operation with the 99th \
         percentile in parentheses; ratios divide medians; `not measured` marks what this run could not measure \
         (with the reason recorded in the results) or did not include. The papers' machines are 30–40 years old: \
         the ratios show how far each cost has come, not a contest.\n",
        rows.len()
    );
    machine_section(&mut o, sources);
    accent(&mut o, &c);
    dash(&mut o, &c);
    l4(&mut o, &c);
    dean_armand(&mut o, &c);
    dean_armand_files(&mut o, &c);
    dean_armand_cached_reads(&mut o, &c, CACHED_READ_ROWS);
    anderson(&mut o, &c);
    net(&mut o, &c);
    if !plots.is_empty() {
        let _ = writeln!(o, "### Plots\n\nLatency and throughput against payload size, one line per implementation (DASH's Figures 3 and 4 again):\n");
        for p in plots {
            let _ = writeln!(o, "- [{p}]({p})");
        }
        o.push('\n');
    }
    all_results(&mut o, &c);
    o
}

/// The markers between which [`write_into`] replaces a document's
/// generated part.
pub const BEGIN: &str = "<!-- ferry bench report: begin (generated, do not edit by hand) -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- ferry bench report: end -->";

/// Writes `report` to `path`: between the [`BEGIN`] and [`END`] markers if
/// the file has them (keeping the hand-written rest), else as the whole file.
///
/// # Errors
/// When the file cannot be read or written.
pub fn write_into(path: &str, report: &str) -> std::io::Result<()> {
    if let Ok(old) = std::fs::read_to_string(path) {
        if let (Some(b), Some(e)) = (old.find(BEGIN), old.find(END)) {
            if b < e {
                let head = &old[..b + BEGIN.len()];
                let tail = &old[e..];
                return std::fs::write(path, format!("{head}\n\n{}\n{tail}", report.trim_end()));
            }
        }
    }
    std::fs::write(path, report)
}

/// The plots `ferry bench --json results` wrote next to `results`, as
/// paths relative to the directory of `out` where they lie under it.
pub fn plots_beside(results: &str, out: Option<&str>) -> Vec<String> {
    use std::path::Path;
    let stem = crate::plot::stem(results);
    let stem_path = Path::new(stem);
    let dir = match stem_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    let Some(prefix) = stem_path.file_name().map(|n| format!("{}-", n.to_string_lossy())) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix) && n.ends_with(".svg"))
        .collect();
    names.sort();
    let out_dir = out.and_then(|o| Path::new(o).parent()).and_then(|d| d.canonicalize().ok());
    let dir_abs = dir.canonicalize().ok();
    names
        .into_iter()
        .map(|n| {
            let full = dir.join(&n);
            match (&out_dir, &dir_abs) {
                (Some(od), Some(da)) => match da.join(&n).strip_prefix(od) {
                    Ok(rel) => rel.to_string_lossy().into_owned(),
                    Err(_) => full.to_string_lossy().into_owned(),
                },
                _ => full.to_string_lossy().into_owned(),
            }
        })
        .collect()
}
