//! `ferry bench`: argument parsing, running the chosen suites, and writing
//! the JSON records and their machine sidecar.

use std::process::ExitCode;

use crate::harness::{run_suite, Options};
use crate::record::{to_json_array, Placement, Record};
use crate::{machine, suites};

fn usage() -> String {
    let mut s = String::from(
        "usage: ferry bench SUITE|all [--quick] [--json FILE] [--placement same-core|cross-core|unpinned|all]

Runs benchmark suites; every implementation of a case runs in the same
invocation, interleaved round by round, and the table shows each one's ratio
to the suite's reference baseline.

options:
  --quick            brief runs (under two minutes for all), payloads above 256 MiB skipped
  --json FILE        write the records to FILE and the machine to FILE.meta.json
  --placement P      same-core, cross-core, unpinned, or all (same-core and cross-core; the default)
  -h, --help         this text

suites:
",
    );
    for suite in suites::all() {
        s.push_str(&format!("  {:<10} {}\n", suite.name, suite.about));
    }
    s.push_str("  all        every suite above\n");
    s
}

struct Args {
    suites: Vec<String>,
    quick: bool,
    json: Option<String>,
    placements: Vec<Placement>,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut out = Args { suites: Vec::new(), quick: false, json: None, placements: Vec::new() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" | "help" => return Ok(None),
            "--quick" => out.quick = true,
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

/// Runs `ferry bench` with the arguments after `bench`.
pub fn main(args: &[String]) -> ExitCode {
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
    let mut opts = if parsed.quick { Options::quick() } else { Options::full() };
    if !parsed.placements.is_empty() {
        opts.placements = parsed.placements;
    }
    let mut records = Vec::new();
    for suite in &chosen {
        records.extend(run_suite(suite, &opts));
    }
    if let Some(path) = &parsed.json {
        let mut cmd = vec!["ferry".to_string(), "bench".to_string()];
        cmd.extend(args.iter().cloned());
        if let Err(e) = write_json(path, &records, &cmd) {
            eprintln!("ferry bench: cannot write {path}: {e}");
            return ExitCode::from(1);
        }
        eprintln!("ferry bench: wrote {} records to {path} and the machine to {path}.meta.json", records.len());
    }
    ExitCode::SUCCESS
}
