//! The machine a run was made on, for the sidecar `FILE.meta.json`: CPU
//! model and count, kernel, transparent-huge-page and userfaultfd settings,
//! ferry's version, the date and the command line.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::record::{write_str, Json};
use crate::sys;

fn read_trim(path: &str) -> Json {
    match std::fs::read_to_string(path) {
        Ok(s) => Json::Str(s.trim().to_string()),
        Err(_) => Json::Null,
    }
}

fn cpu_model() -> Json {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())))
        .map_or(Json::Null, Json::Str)
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

/// Key–value pairs describing this machine and run.
pub fn describe(command_line: &[String]) -> Vec<(String, Json)> {
    let uname = rustix::system::uname();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get() as u64);
    let uffd = sys::userfaultfd_works();
    vec![
        ("cpu_model".into(), cpu_model()),
        ("cores".into(), Json::from(cores)),
        ("kernel".into(), Json::Str(uname.release().to_string_lossy().into_owned())),
        ("arch".into(), Json::Str(uname.machine().to_string_lossy().into_owned())),
        ("thp_enabled".into(), read_trim("/sys/kernel/mm/transparent_hugepage/enabled")),
        ("thp_shmem_enabled".into(), read_trim("/sys/kernel/mm/transparent_hugepage/shmem_enabled")),
        ("unprivileged_userfaultfd".into(), read_trim("/proc/sys/vm/unprivileged_userfaultfd")),
        ("dev_userfaultfd".into(), Json::Bool(std::path::Path::new("/dev/userfaultfd").exists())),
        ("userfaultfd_syscall_works".into(), Json::Bool(uffd.is_ok())),
        ("userfaultfd_error".into(), uffd.err().map_or(Json::Null, |e| Json::Str(e.to_string()))),
        ("page_size".into(), Json::from(rustix::param::page_size() as u64)),
        ("ferry_version".into(), Json::Str(env!("CARGO_PKG_VERSION").to_string())),
        ("date".into(), Json::Str(utc_now())),
        ("command_line".into(), Json::Str(command_line.join(" "))),
    ]
}

/// The sidecar as a JSON object.
pub fn to_json(fields: &[(String, Json)]) -> String {
    let mut s = String::from("{\n");
    for (i, (k, v)) in fields.iter().enumerate() {
        s.push_str("  ");
        write_str(&mut s, k).expect("writing to a String cannot fail");
        let _ = write!(s, ": {v}");
        s.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
    }
    s.push_str("}\n");
    s
}
