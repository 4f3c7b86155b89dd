//! The `ferry-bench` program: `ferry bench` (argument parsing, running the
//! chosen suites, writing the JSON records, their machine sidecar and the
//! plots), `ferry bench report` (a results file turned into Markdown) and
//! `ferry probe`. `ferry bench …` and `ferry probe …` run this program with
//! the same arguments when it is installed.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Parser, Subcommand};

use crate::harness::{run_suite_with, Budget, Options};
use serde_json::Value;

use crate::record::{to_json_array, Placement, Record};
use crate::{machine, plot, probe, report, suites};

/// The `ferry-bench` command line (its usage names `ferry` when `ferry`
/// runs it).
#[derive(Debug, Parser)]
#[command(name = "ferry-bench", version, about = "ferry's benchmark suites and machine probe.", arg_required_else_help = true)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run benchmark suites against their baselines in the same invocation.
    Bench(BenchArgs),
    /// Measure this machine's IPC primitives and the copy/remap crossover.
    Probe(ProbeArgs),
}

/// `bench SUITE|all [--quick|--smoke] [--json FILE] [--placement P] [--max-bytes SIZE]`, or
/// `bench report FILE [--out REPORT.md]`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    long_about = "Runs benchmark suites; every implementation of a case runs in the same \
invocation, interleaved round by round, and the table shows each one's ratio to the suite's \
reference baseline."
)]
pub struct BenchArgs {
    /// `report`: a Markdown report of a results file.
    #[command(subcommand)]
    pub report: Option<BenchCommand>,
    /// The suites to run; `all` runs every suite, then the probe (its
    /// records join the file).
    #[arg(value_name = "SUITE|all", required = true, value_parser = suite_names())]
    pub suites: Vec<String>,
    /// Brief runs (a few minutes for all); payloads above 256 MiB are skipped.
    #[arg(long)]
    pub quick: bool,
    /// A couple of operations per case, payloads above 1 MiB skipped: checks
    /// that everything runs, measures nothing worth reading.
    #[arg(long)]
    pub smoke: bool,
    /// Write the records to FILE, the machine to FILE.meta.json and SVG
    /// plots of latency and throughput against size next to FILE (FILE less
    /// .json, then -SUITE-CASE[-TOUCH]-PLACEMENT-MEASURE.svg).
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Where the two sides run; `all` is same-core and cross-core (the
    /// default).
    #[arg(long, value_name = "P", value_parser = ["same-core", "cross-core", "unpinned", "all"])]
    pub placement: Option<String>,
    /// Record cases whose payload is larger than SIZE as skipped (bytes, or
    /// with a suffix: 256KiB, 16MiB, 1GiB): a default-length run of every
    /// suite without its longest cases.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_bytes: Option<u64>,
    /// Run only this implementation (repeat for more; name the baseline
    /// too, for a same-run ratio): for A/B runs and profiles of one path.
    #[arg(long = "impl", value_name = "NAME")]
    pub only: Vec<String>,
}

/// A size in bytes: digits, optionally followed by `KiB`, `MiB` or `GiB`
/// (binary multiples; `K`, `M`, `G` are read the same way).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: u64 = n.parse().map_err(|_| format!("{text:?} is not a size: digits, then KiB, MiB or GiB"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        other => return Err(format!("unknown unit {other:?} in {text:?}: use KiB, MiB or GiB")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{text:?} is too large"))
}

/// What `bench` can do besides running suites.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Turn a results file (and FILE.meta.json) into a Markdown report that
    /// sets the papers' tables beside today's numbers.
    Report(ReportArgs),
}

/// `bench report FILE [--out REPORT.md]`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The results file `ferry bench … --json FILE` wrote.
    #[arg(value_name = "FILE")]
    pub file: String,
    /// Write the report here (keeping a hand-written part above its
    /// marker) instead of to stdout.
    #[arg(long, value_name = "REPORT.md")]
    pub out: Option<String>,
    /// A later results file: its records replace FILE's records of every
    /// suite it measured (a whole suite, so each ratio still compares one
    /// run's records), and its machine sidecar is shown beside FILE's.
    /// Repeatable; later ones win.
    #[arg(long = "with", value_name = "LATER.json")]
    pub with: Vec<String>,
}

/// `probe [--quick] [--json FILE]`.
#[derive(Debug, clap::Args)]
#[command(long_about = "Measures this machine's IPC primitives the way Anderson et al. (Table 1) \
and Accent (mapping costs against pages) did, and computes the payload sizes at which passing \
pages by remapping beats copying them.")]
pub struct ProbeArgs {
    /// A few samples of everything (seconds); numbers are rough.
    #[arg(long)]
    pub quick: bool,
    /// Also write the records as a JSON array to FILE (benchmark schema,
    /// suite "probe") and the machine, huge-page and userfaultfd facts to
    /// FILE.meta.json.
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
}

/// The suite names, each with its one-line description, and `all`.
fn suite_names() -> PossibleValuesParser {
    let mut v: Vec<PossibleValue> = suites::all().into_iter().map(|s| PossibleValue::new(s.name).help(s.about)).collect();
    v.push(PossibleValue::new("python").help(
        "a 256 MiB NumPy array between two Python processes and 64-byte round trips vs multiprocessing (runs python/bench/bench.py; needs ferry's Python package)",
    ));
    v.push(PossibleValue::new("all").help("every suite above, then the probe"));
    PossibleValuesParser::new(v)
}

/// Writes `records` to `path` and the machine description to
/// `path.meta.json`.
pub fn write_json(path: &str, records: &[Record], command_line: &[String]) -> std::io::Result<()> {
    std::fs::write(path, to_json_array(records))?;
    std::fs::write(format!("{path}.meta.json"), machine::to_json(&machine::describe(command_line)))
}

/// Checks, before anything is measured, that the results of a run can be
/// written to `path` and its sidecar: a run of an hour that could not save
/// what it measured would be lost. Writes and removes `path.partial` (the
/// name every save goes through), so the directory is known to exist and
/// take files; nothing at `path` itself is touched.
fn check_writable(path: &str) -> Result<(), String> {
    if std::path::Path::new(path).is_dir() {
        return Err(format!("{path} is a directory; give a file name, e.g. {}/results.json", path.trim_end_matches('/')));
    }
    let probe = format!("{path}.partial");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
        .map_err(|e| format!("cannot write {path}: {e}; check that its directory exists and is writable"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `text` to `to` through a temporary file renamed into place, so a
/// reader (or an interruption) never sees half a file.
fn replace_file(to: &str, text: String) -> std::io::Result<()> {
    let tmp = format!("{to}.partial");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, to)
}

/// Writes the records of an unfinished run to `path` and its sidecar, the
/// sidecar first: whenever the results file exists, so does a sidecar
/// saying `"complete": false`. The final write replaces both.
fn save_partial(path: &str, records: &[Record], argv: &[String], load_start: &Value) -> std::io::Result<()> {
    let mut meta = machine::describe(&typed(argv));
    meta.insert("loadavg_start".into(), load_start.clone());
    meta.insert("complete".into(), Value::Bool(false));
    replace_file(&format!("{path}.meta.json"), machine::to_json(&meta))?;
    replace_file(path, to_json_array(records))
}

/// The system's load averages (1, 5, 15 minutes), for the sidecar: how
/// busy the machine was around the run.
fn loadavg() -> Value {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| Value::String(s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")))
        .unwrap_or(Value::Null)
}

/// `ferry bench report FILE [--out PATH]`.
fn report_main(args: &ReportArgs) -> ExitCode {
    let out = args.out.clone();
    let mut rows = Vec::new();
    let mut sources: Vec<report::Source> = Vec::new();
    for file in std::iter::once(&args.file).chain(&args.with) {
        let (later, meta) = match report::load(file) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("ferry bench report: {e}");
                return ExitCode::from(1);
            }
        };
        let suites = report::replace_suites(&mut rows, later);
        for s in &mut sources {
            s.suites.retain(|x| !suites.contains(x));
        }
        sources.push(report::Source { path: file.clone(), meta, suites });
    }
    // Only plots of cases whose records the report took from the file the
    // plot was written beside (a stale plot of an earlier run with the same
    // name, or of a suite a later run replaced, is left out).
    let mut plots = Vec::new();
    for s in &sources {
        let stem_name = std::path::Path::new(plot::stem(&s.path)).file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let mut mine = report::plots_beside(&s.path, out.as_deref());
        mine.retain(|p| {
            let name = std::path::Path::new(p).file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            rows.iter().any(|r| {
                s.suites.contains(&r.suite) && r.median_ns.is_some() && name.starts_with(&format!("{stem_name}-{}-{}-", r.suite, r.case))
            })
        });
        plots.extend(mine);
    }
    let text = report::render(&rows, &sources, &plots);
    match out {
        None => print!("{text}"),
        Some(path) => {
            if let Err(e) = report::write_into(&path, &text) {
                eprintln!("ferry bench report: cannot write {path}: {e}");
                return ExitCode::from(1);
            }
            eprintln!("ferry bench report: wrote {path}");
        }
    }
    ExitCode::SUCCESS
}

/// Runs the program: parses the command line and runs what it names.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    match cli.command {
        Command::Bench(a) => match &a.report {
            Some(BenchCommand::Report(r)) => report_main(r),
            None => bench_main(&a, &argv),
        },
        Command::Probe(a) => probe_main(&a),
    }
}

/// The command line as it was typed, with the program's file name only
/// (`ferry bench …` when `ferry` ran this program).
fn typed(argv: &[String]) -> Vec<String> {
    let mut v = argv.to_vec();
    if let Some(first) = v.first_mut() {
        if let Some(name) = std::path::Path::new(first.as_str()).file_name() {
            *first = name.to_string_lossy().into_owned();
        }
    }
    v
}

/// Runs `bench SUITE…`.
fn bench_main(parsed: &BenchArgs, argv: &[String]) -> ExitCode {
    let mut chosen = Vec::new();
    for name in &parsed.suites {
        if name == "all" {
            chosen.extend(suites::all());
        } else if let Some(s) = suites::find(name) {
            chosen.push(s);
        }
    }
    let mut opts = if parsed.quick || parsed.smoke { Options::quick() } else { Options::full() };
    if parsed.smoke {
        opts.budget = Budget::tiny();
        opts.max_bytes = 1 << 20;
        opts.max_bytes_reason = "payloads above 1 MiB are skipped with --smoke".into();
    }
    match parsed.placement.as_deref() {
        None | Some("all") => {}
        Some(p) => opts.placements = Placement::parse(p).into_iter().collect(),
    }
    if let Some(max) = parsed.max_bytes.filter(|&m| m < opts.max_bytes) {
        opts.max_bytes = max;
        opts.max_bytes_reason = format!("payloads above {max} bytes are skipped with --max-bytes");
    }
    if !parsed.only.is_empty() {
        let known: Vec<&str> = chosen.iter().flat_map(|s| (s.impls)()).map(|i| i.name).collect();
        if let Some(bad) = parsed.only.iter().find(|o| !known.contains(&o.as_str())) {
            eprintln!("ferry bench: no implementation `{bad}` in the chosen suites (they have: {})", known.join(", "));
            return ExitCode::from(2);
        }
        opts.only = parsed.only.clone();
    }
    if let Some(path) = &parsed.json {
        if let Err(e) = check_writable(path) {
            eprintln!("ferry bench: {e}");
            return ExitCode::from(2);
        }
    }
    let with_probe = parsed.suites.iter().any(|s| s == "all");
    let load_start = loadavg();
    let mut records = Vec::new();
    for (k, suite) in chosen.iter().enumerate() {
        if chosen.len() > 1 && opts.progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!("ferry bench: suite {}/{}: {}", k + 1, chosen.len(), suite.name);
        }
        let measured = run_suite_with(suite, &opts, |group| {
            // What is measured so far, saved after every group: an
            // interrupted run of hours keeps all but its last group.
            if let Some(path) = &parsed.json {
                let mut so_far = records.clone();
                so_far.extend_from_slice(group);
                if let Err(e) = save_partial(path, &so_far, argv, &load_start) {
                    eprintln!("ferry bench: cannot save the results so far to {path}: {e}");
                }
            }
        });
        records.extend(measured);
    }
    if parsed.suites.iter().any(|s| s == "python" || s == "all") {
        // The smoke run's payload limit holds for the Python oneshot too.
        let mib = if parsed.smoke { 1 } else { 256 };
        let python = suites::python::run(parsed.quick || parsed.smoke, mib);
        records.extend(python);
        if let Some(path) = &parsed.json {
            if let Err(e) = save_partial(path, &records, argv, &load_start) {
                eprintln!("ferry bench: cannot save the results so far to {path}: {e}");
            }
        }
    }
    let probed = with_probe.then(|| {
        let popts = if parsed.quick || parsed.smoke { probe::Options::quick() } else { probe::Options::full() };
        let show = opts.progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
        let p = probe::run(&popts, |what| {
            if show {
                eprint!("\r\x1b[K[probe] {what}");
            }
        });
        if show {
            eprint!("\r\x1b[K");
        }
        if opts.table {
            println!("\n{}", p.table());
        }
        p
    });
    if let Some(path) = &parsed.json {
        let mut meta = machine::describe(&typed(argv));
        meta.insert("loadavg_start".into(), load_start);
        meta.insert("loadavg_end".into(), loadavg());
        meta.insert("complete".into(), Value::Bool(true));
        let mut all = records.clone();
        all.extend(probed.iter().flat_map(|p| p.records.iter().cloned()));
        // The records, then the sidecar that says they are complete.
        let written = replace_file(path, to_json_array(&all)).and_then(|()| replace_file(&format!("{path}.meta.json"), machine::to_json(&meta)));
        if let Err(e) = written {
            eprintln!("ferry bench: cannot write {path}: {e}");
            return ExitCode::from(1);
        }
        let plots = match plot::write_plots(&records, path) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("ferry bench: cannot write the plots next to {path}: {e}");
                return ExitCode::from(1);
            }
        };
        eprintln!(
            "ferry bench: wrote {} records to {path}, the machine to {path}.meta.json and {} plots next to it",
            all.len(),
            plots.len()
        );
    }
    ExitCode::SUCCESS
}

/// Runs `probe [--quick] [--json FILE]`.
fn probe_main(args: &ProbeArgs) -> ExitCode {
    if let Some(path) = &args.json {
        if let Err(e) = check_writable(path) {
            eprintln!("ferry probe: {e}");
            return ExitCode::from(2);
        }
    }
    let opts = if args.quick { probe::Options::quick() } else { probe::Options::full() };
    let tty = std::io::stderr().is_terminal();
    let total = probe::steps();
    let mut done = 0;
    let result = probe::run(&opts, |name| {
        done += 1;
        if tty {
            eprint!("\r\x1b[Kprobing {name} ({done}/{total})");
        }
    });
    if tty {
        eprint!("\r\x1b[K");
    }
    print!("{}", result.table());
    if let Some(path) = &args.json {
        let meta = format!("{path}.meta.json");
        if let Err(e) = std::fs::write(path, result.records_json()) {
            eprintln!("ferry probe: cannot write {path}: {e}; check the directory exists and is writable");
            return ExitCode::from(1);
        }
        if let Err(e) = std::fs::write(&meta, result.meta_json()) {
            eprintln!("ferry probe: cannot write {meta}: {e}; check the directory exists and is writable");
            return ExitCode::from(1);
        }
        eprintln!("ferry probe: wrote {path} and {meta}");
    }
    ExitCode::SUCCESS
}
