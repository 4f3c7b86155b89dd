//! `ferry probe`: measures this machine's IPC primitives (null system call,
//! trap, page-table-entry change, context switch, futex and spin round
//! trips, copy bandwidth, mapping, fault, seal and descriptor-passing costs,
//! userfaultfd faults) and prints them beside the classic papers' numbers,
//! with the payload sizes at which remapping beats copying.

use std::io::IsTerminal;
use std::process::ExitCode;

use ferry_bench::probe::{self, Options};

const USAGE: &str = "usage: ferry probe [--quick] [--json FILE]

Measures this machine's IPC primitives the way Anderson et al. (Table 1)
and Accent (mapping costs against pages) did, and computes the payload
sizes at which passing pages by remapping beats copying them.

options:
  --quick       a few samples of everything (seconds); numbers are rough
  --json FILE   also write the records as a JSON array to FILE (benchmark
                schema, suite \"probe\") and the machine, huge-page and
                userfaultfd facts to FILE.meta.json
  -h, --help    this text
";

/// Runs `ferry probe` with its arguments.
pub fn main(args: &[String]) -> ExitCode {
    let mut quick = false;
    let mut json: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--json" => match it.next() {
                Some(f) => json = Some(f.clone()),
                None => {
                    eprintln!("ferry probe: --json needs a file name\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                print!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("ferry probe: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let opts = if quick { Options::quick() } else { Options::full() };
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
    if let Some(path) = json {
        let meta = format!("{path}.meta.json");
        if let Err(e) = std::fs::write(&path, result.records_json()) {
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
