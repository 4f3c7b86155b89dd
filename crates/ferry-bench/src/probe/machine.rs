//! The machine a probe ran on, and which of the facilities ferry can use it
//! offers: shmem transparent huge pages and userfaultfd (with the features
//! its `UFFDIO_API` handshake reports).

use std::fs;

use super::sys::{Map, Uffd};
use serde_json::{json, Value};

/// Feature bits of `UFFDIO_API` the probe reports, by name.
pub const UFFD_FEATURES: &[(&str, u64)] = &[
    ("pagefault_flag_wp", 1 << 0),
    ("event_fork", 1 << 1),
    ("event_remap", 1 << 2),
    ("event_remove", 1 << 3),
    ("missing_hugetlbfs", 1 << 4),
    ("missing_shmem", 1 << 5),
    ("event_unmap", 1 << 6),
    ("sigbus", 1 << 7),
    ("thread_id", 1 << 8),
    ("minor_hugetlbfs", 1 << 9),
    ("minor_shmem", 1 << 10),
    ("exact_address", 1 << 11),
    ("wp_hugetlbfs_shmem", 1 << 12),
    ("wp_unpopulated", 1 << 13),
    ("poison", 1 << 14),
    ("wp_async", 1 << 15),
    ("move", 1 << 16),
];

/// What userfaultfd offers here.
#[derive(Clone, Debug, PartialEq)]
pub struct UffdInfo {
    /// `/proc/sys/vm/unprivileged_userfaultfd`, if readable.
    pub unprivileged_sysctl: Option<String>,
    /// Whether the system call and the API handshake worked for this process.
    pub works: bool,
    /// Why not, when it did not.
    pub error: Option<String>,
    /// Whether only `UFFD_USER_MODE_ONLY` descriptors could be had.
    pub user_mode_only: bool,
    /// Raw feature bits.
    pub features: u64,
}

impl UffdInfo {
    /// Whether the kernel reported feature `name` (see [`UFFD_FEATURES`]).
    pub fn has(&self, name: &str) -> bool {
        UFFD_FEATURES.iter().any(|(n, bit)| *n == name && self.features & bit != 0)
    }
}

/// Shmem transparent huge pages.
#[derive(Clone, Debug, PartialEq)]
pub struct ThpInfo {
    /// Selected value of `/sys/kernel/mm/transparent_hugepage/enabled`.
    pub enabled: Option<String>,
    /// Selected value of `.../transparent_hugepage/shmem_enabled`.
    pub shmem_enabled: Option<String>,
    /// Whether a 4 MiB memfd mapped with `MADV_HUGEPAGE` and written really
    /// got huge-page mappings (`ShmemPmdMapped`/`FilePmdMapped` in
    /// `/proc/self/smaps`); `Err` says why the test could not run.
    pub shmem_test: Result<bool, String>,
}

impl ThpInfo {
    /// Whether a memfd can get huge pages: `shmem_enabled` is `always`,
    /// `within_size`, `advise` (with `MADV_HUGEPAGE`) or `force`.
    pub fn shmem_available(&self) -> bool {
        matches!(self.shmem_enabled.as_deref(), Some("always" | "within_size" | "advise" | "force"))
    }
}

/// The machine and its facilities.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// CPUs online.
    pub cpus_online: usize,
    /// CPUs this process may run on.
    pub cpus_allowed: usize,
    /// Kernel release.
    pub kernel: String,
    /// Base page size in bytes.
    pub page_size: usize,
    /// Transparent huge pages.
    pub thp: ThpInfo,
    /// userfaultfd.
    pub uffd: UffdInfo,
}

/// The bracketed choice in a sysfs file like `always [madvise] never`.
fn selected(path: &str) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_string())
}

/// Maps a 4 MiB memfd shared with `MADV_HUGEPAGE`, writes every page, and
/// reads back from `/proc/self/smaps` how much of it was mapped with huge
/// pages.
fn shmem_huge_test() -> Result<bool, String> {
    use std::os::fd::AsFd;
    const LEN: usize = 4 << 20;
    let fd = rustix::fs::memfd_create("ferry-probe-thp", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| format!("memfd_create: {e}"))?;
    rustix::fs::ftruncate(&fd, LEN as u64).map_err(|e| format!("ftruncate: {e}"))?;
    let map = Map::file(fd.as_fd(), LEN, true, true).map_err(|e| format!("mmap: {e}"))?;
    let _ = map.advise_huge();
    map.touch_write(rustix::param::page_size(), 1);
    let smaps = fs::read_to_string("/proc/self/smaps").map_err(|e| format!("/proc/self/smaps: {e}"))?;
    let head = format!("{:x}-", map.addr());
    let Some(at) = smaps.lines().position(|l| l.starts_with(&head)) else {
        return Err("mapping not found in /proc/self/smaps".into());
    };
    // The entry's field lines follow its header, up to the next header
    // (a line whose first word is an address range, not a `Key:`).
    let fields: Vec<(&str, u64)> = smaps
        .lines()
        .skip(at + 1)
        .take_while(|l| l.split_whitespace().next().is_some_and(|w| w.ends_with(':')))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?, w.next()?.parse::<u64>().ok()?))
        })
        .collect();
    let kb = |key: &str| fields.iter().filter(|(k, _)| *k == key).map(|(_, v)| *v).sum::<u64>();
    if kb("Size:") != (LEN >> 10) as u64 {
        return Err(format!("unexpected smaps entry for the test mapping (Size: {} kB)", kb("Size:")));
    }
    let huge_kb = kb("ShmemPmdMapped:") + kb("FilePmdMapped:");
    Ok(huge_kb > 0)
}

impl Machine {
    /// Looks at this machine.
    pub fn detect() -> Machine {
        let cpu_model = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let uname = rustix::system::uname();
        let uffd = match Uffd::open() {
            Ok(u) => UffdInfo {
                unprivileged_sysctl: None,
                works: true,
                error: None,
                user_mode_only: u.user_mode_only,
                features: u.features,
            },
            Err(e) => UffdInfo {
                unprivileged_sysctl: None,
                works: false,
                error: Some(e.to_string()),
                user_mode_only: false,
                features: 0,
            },
        };
        Machine {
            cpu_model,
            cpus_online: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cpus_allowed: super::measure::allowed_cpus().len(),
            kernel: uname.release().to_string_lossy().into_owned(),
            page_size: rustix::param::page_size(),
            thp: ThpInfo {
                enabled: selected("/sys/kernel/mm/transparent_hugepage/enabled"),
                shmem_enabled: selected("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
                shmem_test: shmem_huge_test(),
            },
            uffd: UffdInfo {
                unprivileged_sysctl: fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd")
                    .ok()
                    .map(|s| s.trim().to_string()),
                ..uffd
            },
        }
    }

    /// As JSON, for the sidecar file.
    pub fn to_json(&self) -> Value {
        let features: serde_json::Map<String, Value> =
            UFFD_FEATURES.iter().map(|(n, bit)| (n.to_string(), Value::Bool(self.uffd.features & bit != 0))).collect();
        json!({
            "cpu_model": self.cpu_model,
            "cpus_online": self.cpus_online,
            "cpus_allowed": self.cpus_allowed,
            "kernel": self.kernel,
            "page_size": self.page_size,
            "thp": {
                "enabled": self.thp.enabled,
                "shmem_enabled": self.thp.shmem_enabled,
                "shmem_available": self.thp.shmem_available(),
                "shmem_huge_mapped_in_test": self.thp.shmem_test.as_ref().ok(),
                "shmem_test_error": self.thp.shmem_test.as_ref().err(),
            },
            "userfaultfd": {
                "unprivileged_userfaultfd": self.uffd.unprivileged_sysctl,
                "works": self.uffd.works,
                "error": self.uffd.error,
                "user_mode_only": self.uffd.user_mode_only,
                "features_raw": format!("{:#x}", self.uffd.features),
                "features": features,
            },
        })
    }
}
