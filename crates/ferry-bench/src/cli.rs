//! `ferry bench`: argument parsing, running the chosen suites, and writing
//! the JSON records, their machine sidecar and the plots; and
//! `ferry bench report`, which turns a results file into Markdown.

use std::process::ExitCode;

use crate::harness::{run_suite, Budget, Options};
use crate::record::{to_json_array, Json, Placement, Record};
use crate::{machine, plot, probe, report, suites};

fn usage() -> String {
    let mut s = String::from(
        "usage: ferry bench SUITE|all [--quick|--smoke] [--json FILE] [--placement same-core|cross-core|unpinned|all]
       ferry bench report FILE [--out REPORT.md]

Runs benchmark suites; every implementation of a case runs in the same
invocation, interleaved round by round, and the table shows each one's ratio
to the suite's reference baseline.

options:
  --quick            brief runs (a few minutes for all), payloads above 256 MiB skipped
  --smoke            a couple of operations per case, payloads above 1 MiB skipped:
                     checks that everything runs, measures nothing worth reading
  --json FILE        write the records to FILE, the machine to FILE.meta.json and
                     SVG plots of latency and throughput against size next to FILE
                     (FILE less .json, then -SUITE-CASE[-TOUCH]-PLACEMENT-MEASURE.svg)
  --placement P      same-core, cross-core, unpinned, or all (same-core and cross-core; the default)
  -h, --help         this text

suites:
",
    );
    for suite in suites::all() {
        s.push_str(&format!("  {:<10} {}\n", suite.name, suite.about));
    }
    s.push_str("  all        every suite above, then `ferry probe` (its records join the file)\n");
    s.push_str(
        "\nreport: turns FILE (and FILE.meta.json) into a Markdown report that sets the papers'
tables beside today's numbers; written to stdout, or to REPORT.md with --out.\n",
    );
    s
}

struct Args {
    suites: Vec<String>,
    quick: bool,
    smoke: bool,
    json: Option<String>,
    placements: Vec<Placement>,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut out = Args { suites: Vec::new(), quick: false, smoke: false, json: None, placements: Vec::new() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" | "help" => return Ok(None),
            "--quick" => out.quick = true,
            "--smoke" => out.smoke = true,
            "--json" => out.json = Some(it.next().ok_or("--json needs a file name")?.clone()),
            "--placement" => {
                let p = it.next().ok_or("--placement needs a value")?;
                out.placements = match p.as_str() {
                    "all" => vec![Placement::SameCore, Placement::CrossCore],
                    other => vec![Placement::parse(other)
                        .ok_or_else(|| format!("unknown placement {other:?} (same-core, cross-core, unpinned, all)"))?],
                };
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s:?}")),
            s => out.suites.push(s.to_string()),
        }
    }
    if out.suites.is_empty() {
        return Err("name a suite, or all".into());
    }
    Ok(Some(out))
}

/// Writes `records` to `path` and the machine description to
/// `path.meta.json`.
pub fn write_json(path: &str, records: &[Record], command_line: &[String]) -> std::io::Result<()> {
    std::fs::write(path, to_json_array(records))?;
    std::fs::write(format!("{path}.meta.json"), machine::to_json(&machine::describe(command_line)))
}

/// The system's load averages (1, 5, 15 minutes), for the sidecar: how
/// busy the machine was around the run.
fn loadavg() -> Json {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| Json::Str(s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")))
        .unwrap_or(Json::Null)
}

/// Joins two JSON arrays of records (as text) into one.
fn join_arrays(a: &str, b: &str) -> String {
    let a = a.trim_end().trim_end_matches(']').trim_end();
    let b = b.trim_start().trim_start_matches('[').trim_start();
    if a.ends_with('[') {
        format!("{a}\n  {b}")
    } else if b.starts_with(']') {
        format!("{a}\n{b}")
    } else {
        format!("{a},\n  {b}")
    }
}

/// `ferry bench report FILE [--out PATH]`.
fn report_main(args: &[String]) -> ExitCode {
    let mut file = None;
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => {
                print!("{}", usage());
                return ExitCode::SUCCESS;
            }
            "--out" => match it.next() {
                Some(p) => out = Some(p.clone()),
                None => {
                    eprintln!("ferry bench report: --out needs a file name");
                    return ExitCode::from(2);
                }
            },
            s if s.starts_with('-') => {
                eprintln!("ferry bench report: unknown option {s:?}");
                return ExitCode::from(2);
            }
            s if file.is_none() => file = Some(s.to_string()),
            s => {
                eprintln!("ferry bench report: one results file only (got {s:?} too)");
                return ExitCode::from(2);
            }
        }
    }
    let Some(file) = file else {
        eprint!("ferry bench report: name the results file `ferry bench ... --json FILE` wrote\n\n{}", usage());
        return ExitCode::from(2);
    };
    let (rows, meta) = match report::load(&file) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ferry bench report: {e}");
            return ExitCode::from(1);
        }
    };
    // Only plots of cases this file measured (a stale plot of an earlier
    // run with the same name is left out).
    let stem_name = std::path::Path::new(plot::stem(&file)).file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let mut plots = report::plots_beside(&file, out.as_deref());
    plots.retain(|p| {
        let name = std::path::Path::new(p).file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        rows.iter().any(|r| r.median.is_some() && name.starts_with(&format!("{stem_name}-{}-{}-", r.suite, r.case)))
    });
    let text = report::render(&rows, meta.as_ref(), &file, &plots);
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

/// Runs `ferry bench` with the arguments after `bench`.
pub fn main(args: &[String]) -> ExitCode {
    if args.first().map(String::as_str) == Some("report") {
        return report_main(&args[1..]);
    }
    let parsed = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprint!("ferry bench: {e}\n\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let mut chosen = Vec::new();
    for name in &parsed.suites {
        if name == "all" {
            chosen.extend(suites::all());
        } else if let Some(s) = suites::find(name) {
            chosen.push(s);
        } else {
            eprint!("ferry bench: no suite called {name:?}\n\n{}", usage());
            return ExitCode::from(2);
        }
    }
    let mut opts = if parsed.quick || parsed.smoke { Options::quick() } else { Options::full() };
    if parsed.smoke {
        opts.budget = Budget::tiny();
        opts.max_bytes = 1 << 20;
        opts.max_bytes_reason = "payloads above 1 MiB are skipped with --smoke".into();
    }
    if !parsed.placements.is_empty() {
        opts.placements = parsed.placements;
    }
    let with_probe = parsed.suites.iter().any(|s| s == "all");
    let load_start = loadavg();
    let mut records = Vec::new();
    for (k, suite) in chosen.iter().enumerate() {
        if chosen.len() > 1 && opts.progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!("ferry bench: suite {}/{}: {}", k + 1, chosen.len(), suite.name);
        }
        records.extend(run_suite(suite, &opts));
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
        let mut cmd = vec!["ferry".to_string(), "bench".to_string()];
        cmd.extend(args.iter().cloned());
        let mut meta = machine::describe(&cmd);
        meta.push(("loadavg_start".into(), load_start));
        meta.push(("loadavg_end".into(), loadavg()));
        let mut text = to_json_array(&records);
        if let Some(p) = &probed {
            text = join_arrays(&text, &p.records_json());
        }
        let written = std::fs::write(path, text).and_then(|()| std::fs::write(format!("{path}.meta.json"), machine::to_json(&meta)));
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
            records.len() + probed.as_ref().map_or(0, |p| p.records.len()),
            plots.len()
        );
    }
    ExitCode::SUCCESS
}
