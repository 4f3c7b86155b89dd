//! The machine a run was made on, for the sidecar `FILE.meta.json`: CPU
//! model and count, kernel, transparent-huge-page and userfaultfd settings,
//! ferry's version, the date and the command line.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::sys;

fn read_trim(path: &str) -> Value {
    match std::fs::read_to_string(path) {
        Ok(s) => Value::String(s.trim().to_string()),
        Err(_) => Value::Null,
    }
}

fn cpu_model() -> Value {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())))
        .map_or(Value::Null, Value::String)
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// This machine and run, as the sidecar's object (keys in this order).
pub fn describe(command_line: &[String]) -> Map<String, Value> {
    let uname = rustix::system::uname();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let uffd = sys::userfaultfd_works();
    let fields: [(&str, Value); 14] = [
        ("cpu_model", cpu_model()),
        ("cores", cores.into()),
        ("kernel", uname.release().to_string_lossy().into()),
        ("arch", uname.machine().to_string_lossy().into()),
        ("thp_enabled", read_trim("/sys/kernel/mm/transparent_hugepage/enabled")),
        ("thp_shmem_enabled", read_trim("/sys/kernel/mm/transparent_hugepage/shmem_enabled")),
        ("unprivileged_userfaultfd", read_trim("/proc/sys/vm/unprivileged_userfaultfd")),
        ("dev_userfaultfd", std::path::Path::new("/dev/userfaultfd").exists().into()),
        ("userfaultfd_syscall_works", uffd.is_ok().into()),
        ("userfaultfd_error", uffd.err().map(|e| e.to_string()).into()),
        ("page_size", rustix::param::page_size().into()),
        ("ferry_version", env!("CARGO_PKG_VERSION").into()),
        ("date", utc_now().into()),
        ("command_line", command_line.join(" ").into()),
    ];
    fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The sidecar as JSON text, one key per line.
pub fn to_json(fields: &Map<String, Value>) -> String {
    let mut s = serde_json::to_string_pretty(fields).expect("a JSON object always serialises");
    s.push('\n');
    s
}
