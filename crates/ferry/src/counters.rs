//! Process-wide counters of what ferry did: messages, inline bytes, regions
//! per transfer mode, bytes mapped versus bytes copied, pages populated.
//!
//! Each counter is a relaxed atomic add on a path that already makes a system
//! call, so counting costs nothing measurable; reading them is
//! [`snapshot`]. They let a user reproduce Accent's fault table and DASH's
//! cost breakdown for their own workload. What each field measures, and what
//! it cannot, is written on the field.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A copy of every counter at one moment. Subtract two snapshots to see
/// what happened in between ([`Counters::since`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Messages handed to the kernel successfully (socket path).
    pub messages_sent: u64,
    /// Messages received and validated successfully (socket path).
    pub messages_received: u64,
    /// Inline bytes (message bodies) in sent messages.
    pub bytes_inline_sent: u64,
    /// Inline bytes (message bodies) in received messages.
    pub bytes_inline_received: u64,
    /// Regions sent by copy.
    pub regions_sent_copy: u64,
    /// Regions sent by move.
    pub regions_sent_move: u64,
    /// Regions lent from a pool.
    pub regions_sent_lend: u64,
    /// Regions sent as explicitly shared memory.
    pub regions_sent_share: u64,
    /// Regions received (validated) by copy.
    pub regions_received_copy: u64,
    /// Regions received (validated) by move.
    pub regions_received_move: u64,
    /// Lent regions received (validated).
    pub regions_received_lend: u64,
    /// Shared regions received (validated).
    pub regions_received_share: u64,
    /// Memfds this process created for regions (pools count once per slot).
    pub regions_allocated: u64,
    /// Messages, received by value, that were rejected because a region was
    /// not sealed or otherwise invalid.
    pub regions_rejected: u64,
    /// Bytes of received regions mapped into this process (no copy).
    pub bytes_mapped: u64,
    /// Bytes ferry copied on behalf of regions: ordinary memory copied into a
    /// region, regions copied out, and a sender's view copied into a fresh
    /// memfd when it had been written after an earlier send.
    pub bytes_copied: u64,
    /// Pages populated eagerly (`MAP_POPULATE`) when mapping received
    /// regions.
    pub pages_populated: u64,
    /// Minor page faults of this process (`getrusage`) at the time of the
    /// snapshot. The kernel does not separate copy-on-write faults from
    /// other minor faults, so this is an upper bound on them: take the
    /// difference of two snapshots around a loop that writes to regions and
    /// subtract the pages the loop touches for the first time otherwise.
    pub minor_faults: u64,
    /// Calls this process made through RPC connections (either transport).
    pub rpc_calls: u64,
    /// Page faults the pagers of this process served (one per fault
    /// resolved, however many pages read-ahead supplied with it).
    pub pager_faults: u64,
    /// RPC connection ends open in this process now (client connections
    /// plus connections its servers accepted); a gauge, not a total.
    pub rpc_connections: u64,
}

impl Counters {
    /// Field-by-field difference `self - earlier` (saturating) of every
    /// total; the gauge `rpc_connections` keeps its value in `self`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        macro_rules! d {
            ($($f:ident),*; $g:ident) => { Counters { $($f: self.$f.saturating_sub(earlier.$f),)* $g: self.$g } };
        }
        d!(
            messages_sent,
            messages_received,
            bytes_inline_sent,
            bytes_inline_received,
            regions_sent_copy,
            regions_sent_move,
            regions_sent_lend,
            regions_sent_share,
            regions_received_copy,
            regions_received_move,
            regions_received_lend,
            regions_received_share,
            regions_allocated,
            regions_rejected,
            bytes_mapped,
            bytes_copied,
            pages_populated,
            minor_faults,
            rpc_calls,
            pager_faults;
            rpc_connections
        )
    }
}

/// The counters as one `#[repr(C)]` block of 64-bit words, so that another
/// process (`ferry stat`) can read them whole: a magic word, a version, then
/// the values in the order of [`FIELDS`].
#[repr(C)]
pub(crate) struct Block {
    magic: AtomicU64,
    version: AtomicU64,
    messages_sent: AtomicU64,
    messages_received: AtomicU64,
    bytes_inline_sent: AtomicU64,
    bytes_inline_received: AtomicU64,
    regions_sent: [AtomicU64; 4],
    regions_received: [AtomicU64; 4],
    regions_allocated: AtomicU64,
    regions_rejected: AtomicU64,
    bytes_mapped: AtomicU64,
    bytes_copied: AtomicU64,
    pages_populated: AtomicU64,
    rpc_calls: AtomicU64,
    pager_faults: AtomicU64,
    rpc_connections: AtomicU64,
}

const MAGIC: u64 = u64::from_le_bytes(*b"FERYCNT1");
const VERSION: u64 = 2;
// A constant (not a static) on purpose: each use is a fresh zero counter.
#[allow(clippy::declare_interior_mutable_const)]
const Z: AtomicU64 = AtomicU64::new(0);

static BLOCK: Block = Block {
    magic: AtomicU64::new(MAGIC),
    version: AtomicU64::new(VERSION),
    messages_sent: Z,
    messages_received: Z,
    bytes_inline_sent: Z,
    bytes_inline_received: Z,
    regions_sent: [Z, Z, Z, Z],
    regions_received: [Z, Z, Z, Z],
    regions_allocated: Z,
    regions_rejected: Z,
    bytes_mapped: Z,
    bytes_copied: Z,
    pages_populated: Z,
    rpc_calls: Z,
    pager_faults: Z,
    rpc_connections: Z,
};

/// Names of the values in the block, in order (after magic and version).
pub const FIELDS: [&str; 20] = [
    "messages_sent",
    "messages_received",
    "bytes_inline_sent",
    "bytes_inline_received",
    "regions_sent_copy",
    "regions_sent_move",
    "regions_sent_lend",
    "regions_sent_share",
    "regions_received_copy",
    "regions_received_move",
    "regions_received_lend",
    "regions_received_share",
    "regions_allocated",
    "regions_rejected",
    "bytes_mapped",
    "bytes_copied",
    "pages_populated",
    "rpc_calls",
    "pager_faults",
    "rpc_connections_open",
];

pub(crate) static MESSAGES_SENT: &AtomicU64 = &BLOCK.messages_sent;
pub(crate) static MESSAGES_RECEIVED: &AtomicU64 = &BLOCK.messages_received;
pub(crate) static BYTES_INLINE_SENT: &AtomicU64 = &BLOCK.bytes_inline_sent;
pub(crate) static BYTES_INLINE_RECEIVED: &AtomicU64 = &BLOCK.bytes_inline_received;
/// Indexed by transfer mode: copy, move, lend, share.
pub(crate) static REGIONS_SENT: &[AtomicU64; 4] = &BLOCK.regions_sent;
/// Indexed by transfer mode: copy, move, lend, share.
pub(crate) static REGIONS_RECEIVED: &[AtomicU64; 4] = &BLOCK.regions_received;
pub(crate) static REGIONS_ALLOCATED: &AtomicU64 = &BLOCK.regions_allocated;
pub(crate) static REGIONS_REJECTED: &AtomicU64 = &BLOCK.regions_rejected;
pub(crate) static BYTES_MAPPED: &AtomicU64 = &BLOCK.bytes_mapped;
pub(crate) static BYTES_COPIED: &AtomicU64 = &BLOCK.bytes_copied;
pub(crate) static PAGES_POPULATED: &AtomicU64 = &BLOCK.pages_populated;
/// Calls through the RPC fast path.
pub(crate) static RPC_CALLS: &AtomicU64 = &BLOCK.rpc_calls;
/// Faults served by pagers in this process.
pub(crate) static PAGER_FAULTS: &AtomicU64 = &BLOCK.pager_faults;

/// Counts one open RPC connection end for as long as it lives; held by
/// each client connection and each connection a server accepted.
#[derive(Debug)]
pub(crate) struct ConnectionGauge(());

impl ConnectionGauge {
    /// Counts a newly opened connection end.
    pub(crate) fn open() -> ConnectionGauge {
        BLOCK.rpc_connections.fetch_add(1, Relaxed);
        ConnectionGauge(())
    }
}

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        BLOCK.rpc_connections.fetch_sub(1, Relaxed);
    }
}

/// Adds `n` to a counter (relaxed).
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// Reads every counter. Each is read on its own (relaxed), so a snapshot
/// taken while other threads work is consistent per field, not across fields.
pub fn snapshot() -> Counters {
    let r = |c: &AtomicU64| c.load(Relaxed);
    let _ = &BLOCK.magic;
    let _ = &BLOCK.version;
    Counters {
        messages_sent: r(MESSAGES_SENT),
        messages_received: r(MESSAGES_RECEIVED),
        bytes_inline_sent: r(BYTES_INLINE_SENT),
        bytes_inline_received: r(BYTES_INLINE_RECEIVED),
        regions_sent_copy: r(&REGIONS_SENT[0]),
        regions_sent_move: r(&REGIONS_SENT[1]),
        regions_sent_lend: r(&REGIONS_SENT[2]),
        regions_sent_share: r(&REGIONS_SENT[3]),
        regions_received_copy: r(&REGIONS_RECEIVED[0]),
        regions_received_move: r(&REGIONS_RECEIVED[1]),
        regions_received_lend: r(&REGIONS_RECEIVED[2]),
        regions_received_share: r(&REGIONS_RECEIVED[3]),
        regions_allocated: r(REGIONS_ALLOCATED),
        regions_rejected: r(REGIONS_REJECTED),
        bytes_mapped: r(BYTES_MAPPED),
        bytes_copied: r(BYTES_COPIED),
        pages_populated: r(PAGES_POPULATED),
        minor_faults: crate::sys::mem::minor_faults(),
        rpc_calls: r(RPC_CALLS),
        pager_faults: r(PAGER_FAULTS),
        rpc_connections: r(&BLOCK.rpc_connections),
    }
}

impl Counters {
    /// Builds counters from the values of a block, in the order of
    /// [`FIELDS`], and a minor-fault count.
    fn from_values(v: &[u64; 20], minor_faults: u64) -> Counters {
        Counters {
            messages_sent: v[0],
            messages_received: v[1],
            bytes_inline_sent: v[2],
            bytes_inline_received: v[3],
            regions_sent_copy: v[4],
            regions_sent_move: v[5],
            regions_sent_lend: v[6],
            regions_sent_share: v[7],
            regions_received_copy: v[8],
            regions_received_move: v[9],
            regions_received_lend: v[10],
            regions_received_share: v[11],
            regions_allocated: v[12],
            regions_rejected: v[13],
            bytes_mapped: v[14],
            bytes_copied: v[15],
            pages_populated: v[16],
            minor_faults,
            rpc_calls: v[17],
            pager_faults: v[18],
            rpc_connections: v[19],
        }
    }

    /// The values as `(name, value)` pairs, in the order of [`FIELDS`], with
    /// `minor_faults` last.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        let v = [
            self.messages_sent,
            self.messages_received,
            self.bytes_inline_sent,
            self.bytes_inline_received,
            self.regions_sent_copy,
            self.regions_sent_move,
            self.regions_sent_lend,
            self.regions_sent_share,
            self.regions_received_copy,
            self.regions_received_move,
            self.regions_received_lend,
            self.regions_received_share,
            self.regions_allocated,
            self.regions_rejected,
            self.bytes_mapped,
            self.bytes_copied,
            self.pages_populated,
            self.rpc_calls,
            self.pager_faults,
            self.rpc_connections,
        ];
        let mut out: Vec<(&'static str, u64)> = FIELDS.iter().copied().zip(v).collect();
        out.push(("minor_faults", self.minor_faults));
        out
    }
}

/// Prefix of the name of the memfd that tells other processes where this
/// process keeps its counters.
pub const PUBLISH_PREFIX: &str = "ferry-counters@";

static PUBLISHED: std::sync::OnceLock<Option<std::os::fd::OwnedFd>> = std::sync::OnceLock::new();

/// Makes this process's counters findable by `ferry stat`: an empty memfd
/// (no pages) named after the block's address stays open for the life of the
/// process. ferry calls it when the process first creates a port; call it
/// earlier to be visible before that. Idempotent and cheap after the first
/// call; it holds one descriptor for the life of the process.
pub fn publish() {
    PUBLISHED.get_or_init(|| {
        let name = format!("{PUBLISH_PREFIX}{:x}", &BLOCK as *const Block as usize);
        crate::sys::mem::memfd(&name, 0).ok()
    });
}

/// A process that uses ferry, as [`discover`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// Its process id.
    pub pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
    /// Where its counter block lives in its address space.
    addr: usize,
}

/// Finds processes that published their counters, among those this caller
/// may inspect (same user, or root).
pub fn discover() -> Vec<Published> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Some(p) = find(pid) {
            out.push(p);
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// Looks for the published counters of process `pid`.
pub fn find(pid: i32) -> Option<Published> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else { continue };
        let t = target.to_string_lossy();
        if let Some(rest) = t.strip_prefix("/memfd:").and_then(|r| r.strip_prefix(PUBLISH_PREFIX)) {
            let hex = rest.split(' ').next().unwrap_or("");
            if let Ok(addr) = usize::from_str_radix(hex, 16) {
                let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_owned();
                return Some(Published { pid, command, addr });
            }
        }
    }
    None
}

/// Reads the live counters of another process (needs the right to inspect
/// it: same user, or root).
///
/// # Errors
/// `NotFound` if the process published no counters; `InvalidData` if what
/// is at the published address is not a counter block of this version;
/// permission errors from the kernel as they are.
pub fn read(p: &Published) -> std::io::Result<Counters> {
    let mut words = [0u64; 2 + FIELDS.len()];
    crate::sys::mem::read_other_process(p.pid, p.addr, &mut words).map_err(crate::error::io_err)?;
    if words[0] != MAGIC || words[1] != VERSION {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a ferry counter block of this version"));
    }
    let v: [u64; FIELDS.len()] = words[2..].try_into().expect("one word per field");
    let minflt = std::fs::read_to_string(format!("/proc/{}/stat", p.pid))
        .ok()
        .and_then(|s| s.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(7)).and_then(|f| f.parse().ok()))
        .unwrap_or(0);
    Ok(Counters::from_values(&v, minflt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_is_words_in_field_order() {
        assert_eq!(std::mem::size_of::<Block>(), 8 * (2 + FIELDS.len()));
        publish();
        let me = find(std::process::id() as i32).expect("published");
        add(MESSAGES_SENT, 0);
        let before = snapshot();
        add(BYTES_MAPPED, 12345);
        let seen = read(&me).expect("read own counters");
        assert!(seen.bytes_mapped >= before.bytes_mapped + 12345);
        assert_eq!(seen.fields().len(), FIELDS.len() + 1);
    }
}
