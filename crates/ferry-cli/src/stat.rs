//! `ferry stat`: the live counters of running ferry processes.
//!
//! Every process that creates a port publishes where its counter block lives
//! (see `ferry::counters`); this command reads the block from outside with
//! `process_vm_readv`, so the observed process does nothing and pays nothing.

use std::process::ExitCode;

use ferry::counters::{self, Published};

/// `ferry stat [PID|NAME] [--json]`.
#[derive(Debug, clap::Args)]
#[command(long_about = "Without an argument, lists every process using ferry that you may inspect, \
with its message and region totals. With a PID, or a NAME registered with the name service, \
prints all of that process's counters, including its open RPC connections, and the queue \
depth of each port it registered. When ferry-netd runs, the list ends with its links, their \
traffic and the bytes fetched on demand.")]
pub struct Args {
    /// A process id, or a name registered with the name service.
    #[arg(value_name = "PID|NAME")]
    target: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `ferry stat`.
pub fn main(args: &Args) -> ExitCode {
    let json = args.json;
    let target = args.target.clone();
    let Some(target) = target else { return list(json) };
    let pid = match target.parse::<i32>() {
        Ok(pid) => pid,
        Err(_) => match owner_of(&target) {
            Ok(pid) => pid,
            Err(e) => {
                eprintln!("ferry stat: {e}");
                return ExitCode::from(1);
            }
        },
    };
    let Some(p) = counters::find(pid) else {
        eprintln!("ferry stat: process {pid} has published no ferry counters (not running, not using ferry, or not yours)");
        return ExitCode::from(1);
    };
    match counters::read(&p) {
        Ok(c) => {
            let queues = queues_of(p.pid);
            if json {
                let body: Vec<String> = c.fields().iter().map(|(k, v)| format!("{}: {v}", json_str(k))).collect();
                let q: Vec<String> = queues.iter().map(|(n, b)| format!("{{\"name\": {}, \"queued_bytes\": {b}}}", json_str(n))).collect();
                println!("{{\"pid\": {}, \"command\": {}, {}, \"ports\": [{}]}}", p.pid, json_str(&p.command), body.join(", "), q.join(", "));
            } else {
                println!("pid {} ({})", p.pid, printable(&p.command));
                for (k, v) in c.fields() {
                    println!("  {k:<24} {v:>16}");
                }
                for (name, bytes) in &queues {
                    println!("  port {name:?}: {bytes} bytes queued");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferry stat: cannot read the counters of {pid}: {e}");
            ExitCode::from(1)
        }
    }
}

/// `s` as a JSON string literal. Names come from other processes (a
/// command name may hold quotes or control characters), so they are escaped
/// by serde_json, not by Rust's `{:?}`, whose `\u{1}` is not JSON.
/// A command name for a terminal: its control characters as `?`, as `ps`
/// shows them. A process's user chooses its name (the kernel's `comm`),
/// and root's `ferry stat` lists every user's processes: escape sequences
/// in a name would otherwise reach root's terminal, to clear it, move the
/// cursor over the lines before, or hide what follows. So are the
/// invisible characters that reorder or hide the text around them, which
/// the name service refuses in names: a right-to-left override before
/// `dyrref` showed another user's process as `ferryd`.
fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() || ferry::bootstrap::hides_text(c) { '?' } else { c }).collect()
}

fn json_str(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// Queue depths of the ports `pid` registered with the name service, when
/// one is reachable (none is started for this).
fn queues_of(pid: i32) -> Vec<(String, usize)> {
    let Ok(mut bs) = ferry::Bootstrap::connect_to(&ferry::bootstrap::default_path()) else { return Vec::new() };
    bs.list().map(|l| l.into_iter().filter(|e| e.owner_pid == pid).map(|e| (e.name, e.queued_bytes as usize)).collect()).unwrap_or_default()
}

/// The pid that registered `name` with the name service: the name a
/// lookup of it by this user reaches, this user's own, else the system's.
/// Root's listing holds every user's names; another user's registration of
/// the same name is never taken for the one root means, which let any user
/// pass its own process off as a system service in root's `ferry stat`.
fn owner_of(name: &str) -> Result<i32, String> {
    let mut bs = ferry::Bootstrap::connect_to(&ferry::bootstrap::default_path()).map_err(|e| format!("{name:?} is not a pid and the name service is unreachable: {e}"))?;
    let entries = bs.list().map_err(|e| e.to_string())?;
    let me = rustix::process::geteuid().as_raw();
    let of = |uid: u32| entries.iter().find(|e| e.name == name && e.uid == uid).map(|e| e.owner_pid);
    if let Some(pid) = of(me).or_else(|| of(ferry::nameserver::SYSTEM_UID)) {
        return Ok(pid);
    }
    match entries.iter().find(|e| e.name == name) {
        Some(e) => Err(format!("{name:?} is registered only by user {}: give the pid ({}) to see that process", e.uid, e.owner_pid)),
        None => Err(format!("no name {name:?} is registered (`ferry names` lists those that are; give a pid for a process that registered none)")),
    }
}

fn list(json: bool) -> ExitCode {
    let found: Vec<(Published, ferry::counters::Counters)> =
        counters::discover().into_iter().filter_map(|p| counters::read(&p).ok().map(|c| (p, c))).collect();
    if json {
        let rows: Vec<String> = found
            .iter()
            .map(|(p, c)| {
                let body: Vec<String> = c.fields().iter().map(|(k, v)| format!("{}: {v}", json_str(k))).collect();
                format!("{{\"pid\": {}, \"command\": {}, {}}}", p.pid, json_str(&p.command), body.join(", "))
            })
            .collect();
        println!("[{}]", rows.join(",\n "));
        return ExitCode::SUCCESS;
    }
    println!("{:>7} {:<16} {:>10} {:>10} {:>8} {:>8} {:>14} {:>14}", "PID", "COMMAND", "MSG SENT", "MSG RECV", "RGN OUT", "RGN IN", "BYTES MAPPED", "BYTES COPIED");
    for (p, c) in &found {
        let out = c.regions_sent_copy + c.regions_sent_move + c.regions_sent_lend + c.regions_sent_share;
        let inn = c.regions_received_copy + c.regions_received_move + c.regions_received_lend + c.regions_received_share;
        println!(
            "{:>7} {:<16} {:>10} {:>10} {:>8} {:>8} {:>14} {:>14}",
            p.pid, printable(&p.command), c.messages_sent, c.messages_received, out, inn, c.bytes_mapped, c.bytes_copied
        );
    }
    if found.is_empty() {
        println!("(no process using ferry found)");
    }
    if let Ok(mut bs) = ferry::Bootstrap::connect_to(&ferry::bootstrap::default_path()) {
        crate::netview::show_stat(&mut bs);
    }
    ExitCode::SUCCESS
}
