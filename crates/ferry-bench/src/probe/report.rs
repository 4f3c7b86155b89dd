//! How a probe is shown: its records and sidecar as JSON (serde_json), and
//! the human table with the papers' numbers beside ours.

use std::fmt::Write as _;

use serde_json::json;

use super::crossover::MODEL;
use super::{Probe, Record, Touch};

/// The records as a JSON array, one record per line.
pub fn records_json(rs: &[Record]) -> String {
    crate::record::to_json_array(rs)
}

/// The sidecar: machine, facilities, ferry's version, the crossover model.
pub fn meta_json(p: &Probe) -> String {
    let meta = json!({
        "suite": "probe",
        "ferry_version": env!("CARGO_PKG_VERSION"),
        "quick": p.quick,
        "machine": p.machine.to_json(),
        "crossover_model": MODEL,
    });
    let mut s = serde_json::to_string_pretty(&meta).expect("a JSON value always serialises");
    s.push('\n');
    s
}

/// The papers' number for a primitive, with the machine it was measured on.
pub fn paper(case: &str) -> &'static str {
    match case {
        "null-syscall" => "4.1 µs R3000, 15.8 µs CVAX [A]; 132 µs PERQ trap [Ac]",
        "trap" => "5.2 µs R3000, 23.1 µs CVAX [A]",
        "pte-change" => "2.0 µs R3000, 8.8 µs CVAX, no syscall [A]",
        "context-switch" => "7.4 µs R3000, 53.9 µs SPARC [A]; 120 µs Sun-3/50 [D]",
        "futex-roundtrip" => "L4 IPC 5 µs one way, 486/50 [L]",
        "memcpy" => "3.9 MB/s Sun-3/50 [D]",
        "mmap-munmap" => "Validate 6.2 ms + Invalidate, PERQ [Ac]",
        "read-fault-per-page" => "3.36-3.76 ms PERQ [Ac]; 254 µs Sun-3/50 [D]",
        "cow-fault-per-page" => "3.83 ms PERQ [Ac]",
        "shmem-alloc-fault-per-page" => "3.70 ms zero-fill write, PERQ [Ac]",
        "uffd-fault" | "uffd-fault-zeropage" => "pager fault 3.3-3.8 ms PERQ [Ac]; 134 µs [D]",
        _ => "",
    }
}

/// A duration in ns, in the unit that suits it.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

pub use crate::plot::fmt_bytes;

/// The human table.
pub fn table(p: &Probe) -> String {
    let mut o = String::new();
    let m = &p.machine;
    let _ = writeln!(
        o,
        "ferry probe{} — {} ({} CPUs online, {} usable), Linux {}, {} B pages\n",
        if p.quick { " --quick (few samples; numbers are rough)" } else { "" },
        m.cpu_model,
        m.cpus_online,
        m.cpus_allowed,
        m.kernel,
        m.page_size
    );
    let _ = writeln!(
        o,
        "{:<28} {:<10} {:>9} {:>10} {:>10} {:>10}  {:<22} papers",
        "primitive", "placement", "size", "median", "p99", "min", "note"
    );
    for r in p.records.iter().filter(|r| r.case != "crossover") {
        let size = if r.bytes > 0 { fmt_bytes(r.bytes) } else { String::new() };
        match r.median_ns {
            None => {
                let _ = writeln!(
                    o,
                    "{:<28} {:<10} {:>9} {:>10}  skipped: {}",
                    r.case,
                    r.placement.name(),
                    size,
                    "-",
                    r.skipped().unwrap_or("no reason given")
                );
            }
            Some(med) => {
                let note = note(r);
                let _ = writeln!(
                    o,
                    "{:<28} {:<10} {:>9} {:>10} {:>10} {:>10}  {:<22} {}",
                    r.case,
                    r.placement.name(),
                    size,
                    fmt_ns(med),
                    r.p99_ns.map(fmt_ns).unwrap_or_default(),
                    r.min_ns.map(fmt_ns).unwrap_or_default(),
                    note,
                    paper(&r.case)
                );
            }
        }
    }
    o.push_str(
        "\npapers: [A] Anderson, Levy, Bershad, Lazowska 1991, Table 1 (DECstation 5000/200 MIPS R3000 25 MHz; \
         VAXstation 3200 CVAX; SPARCstation 1+); [Ac] Accent, Fitzgerald & Rashid 1986, Tables 3-1, 3-3, Fig. 3-1 \
         (PERQ, 512-byte pages); [D] DASH, Tzou & Anderson 1991 (Sun-3/50); [L] L3/L4, Liedtke 1993 (486/50).\n\
         Anderson's PTE change and context switch exclude the system call; see extra.minus_syscalls_ns in the JSON.\n",
    );

    let _ = writeln!(o, "\nfacilities");
    let thp = &m.thp;
    let _ = writeln!(
        o,
        "  shmem huge pages: {} (shmem_enabled = {}, enabled = {}); a 4 MiB memfd with MADV_HUGEPAGE {}",
        if thp.shmem_available() { "available" } else { "not available" },
        thp.shmem_enabled.as_deref().unwrap_or("unreadable"),
        thp.enabled.as_deref().unwrap_or("unreadable"),
        match &thp.shmem_test {
            Ok(true) => "got huge pages".to_string(),
            Ok(false) => "got none".to_string(),
            Err(e) => format!("could not be tested: {e}"),
        }
    );
    let u = &m.uffd;
    if u.works {
        let names: Vec<&str> = ["minor_shmem", "move", "pagefault_flag_wp", "wp_hugetlbfs_shmem", "wp_async"]
            .into_iter()
            .filter(|n| u.has(n))
            .collect();
        let _ = writeln!(
            o,
            "  userfaultfd: works{} (vm.unprivileged_userfaultfd = {}); features {:#x}: {}",
            if u.user_mode_only { " (user-mode faults only)" } else { "" },
            u.unprivileged_sysctl.as_deref().unwrap_or("?"),
            u.features,
            if names.is_empty() { "none of minor-shmem, move, write-protect".to_string() } else { names.join(", ") }
        );
    } else {
        let _ = writeln!(
            o,
            "  userfaultfd: not usable ({}; vm.unprivileged_userfaultfd = {})",
            u.error.as_deref().unwrap_or("unknown error"),
            u.unprivileged_sysctl.as_deref().unwrap_or("?")
        );
    }

    let _ = writeln!(o, "\ncrossover: payload size above which remapping a sealed memfd beats copying");
    let _ = writeln!(o, "  copy  = 2 × N × memcpy per page (into the kernel and out, like a pipe)");
    let _ = writeln!(
        o,
        "  remap = fixed (mmap+munmap, seal, extra for passing the fd) + N × per page (seal, mmap growth,\n          \
         plus read fault + unmap when read, or copy-on-write fault + unmap when written)"
    );
    for c in &p.crossovers {
        let what = match c.touch {
            Touch::None => "untouched",
            Touch::Read => "read",
            Touch::Write => "written",
        };
        match c.bytes() {
            Some(b) => {
                let _ = writeln!(
                    o,
                    "  {:<10} remap wins from {:>9} ({} pages): fixed {}, {} per page vs {} per page to copy twice",
                    what,
                    fmt_bytes(b),
                    c.pages.unwrap_or(0),
                    fmt_ns(c.fixed_ns),
                    fmt_ns(c.remap_per_page_ns),
                    fmt_ns(c.copy_per_page_ns)
                );
            }
            None => {
                let _ = writeln!(o, "  {:<10} {}", what, c.reason.as_deref().unwrap_or("no crossover"));
            }
        }
    }
    o
}

fn note(r: &Record) -> String {
    let num = |k: &str| r.extra_num(k);
    if let Some(g) = r.gbps {
        return format!("{g:.1} GB/s");
    }
    if let Some(f) = num("faults_per_page") {
        return format!("{f:.3} faults/page");
    }
    if let Some(x) = num("minus_syscalls_ns") {
        return format!("{} w/o syscall", fmt_ns(x));
    }
    if let Some(x) = num("fd_extra_ns") {
        return format!("fd adds {}", fmt_ns(x));
    }
    if r.case == "trap" {
        if let Some(x) = num("with_fix_ns") {
            return format!("{} w/ mprotect", fmt_ns(x));
        }
    }
    String::new()
}
