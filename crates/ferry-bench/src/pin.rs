//! Placement of the benchmark's processes on CPUs with `sched_setaffinity`.
//!
//! The timing process always sits on the first allowed CPU; the other side
//! sits on the same CPU (same-core) or on the next allowed one (cross-core).
//! On a two-CPU machine that is CPU 0 with CPU 0, or CPU 0 with CPU 1.
//! Unpinned leaves both free to go anywhere in the original set.

use std::io;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::record::Placement;

/// CPUs the calling thread may run on now: the process's whole set only
/// while nothing has pinned the thread (the harness asks before it pins).
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(None)?;
    Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// The CPUs of (timing side, other side) for a placement; `None` for
/// unpinned. Fails when cross-core is asked on a one-CPU set.
pub fn cpus_for(placement: Placement, allowed: &[usize]) -> Result<Option<(usize, usize)>, String> {
    let first = *allowed.first().ok_or("no CPU is allowed")?;
    match placement {
        Placement::Unpinned => Ok(None),
        Placement::SameCore => Ok(Some((first, first))),
        Placement::CrossCore => match allowed.get(1) {
            Some(&second) => Ok(Some((first, second))),
            None => Err("cross-core needs two CPUs; this process may use only one".into()),
        },
    }
}

/// Pins the calling process (thread) to one CPU.
pub fn pin_to(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set)?;
    Ok(())
}

/// Lets the calling process run on every CPU in `cpus` again.
pub fn unpin(cpus: &[usize]) -> io::Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    sched_setaffinity(None, &set)?;
    Ok(())
}
