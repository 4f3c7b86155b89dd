//! How the probe samples: a budget of samples and time per primitive, the
//! statistics kept from the samples (median, p99, min), and CPU pinning.
//!
//! Fast primitives are timed in batches (one sample = the mean of a batch),
//! so the clock's own cost and resolution vanish; slow ones one at a time.

use std::time::{Duration, Instant};

use rustix::thread::CpuSet;

/// How long and how often a primitive is sampled.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Samples always taken, however long they take.
    pub min_samples: usize,
    /// Samples never exceeded.
    pub max_samples: usize,
    /// Stop after this long once `min_samples` are in.
    pub max_time: Duration,
    /// Scale for batch sizes (1.0 by default, smaller for `--quick`).
    pub batch_scale: f64,
}

impl Budget {
    /// Long enough for a stable median on a quiet machine.
    pub fn full() -> Budget {
        Budget { min_samples: 30, max_samples: 3000, max_time: Duration::from_millis(800), batch_scale: 1.0 }
    }

    /// A few samples of each primitive, for smoke checks.
    pub fn quick() -> Budget {
        Budget { min_samples: 5, max_samples: 40, max_time: Duration::from_millis(30), batch_scale: 0.1 }
    }

    /// A batch of `n` scaled to this budget (at least 1).
    pub fn batch(&self, n: u64) -> u64 {
        ((n as f64 * self.batch_scale) as u64).max(1)
    }

    /// Starts sampling.
    pub fn start(&self) -> Sampler {
        Sampler { budget: *self, start: Instant::now(), taken: 0 }
    }
}

/// Counts samples against a [`Budget`].
#[derive(Debug)]
pub struct Sampler {
    budget: Budget,
    start: Instant,
    taken: usize,
}

impl Sampler {
    /// Whether to take another sample.
    pub fn more(&mut self) -> bool {
        let go = self.taken < self.budget.min_samples
            || (self.taken < self.budget.max_samples && self.start.elapsed() < self.budget.max_time);
        if go {
            self.taken += 1;
        }
        go
    }
}

/// Per-operation times, one per sample, and how many operations each
/// sample covered.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    ns: Vec<f64>,
    ops: u64,
}

impl Samples {
    /// Records a sample that timed `ops` operations in `total_ns`.
    pub fn push(&mut self, total_ns: f64, ops: u64) {
        self.ns.push(total_ns / ops.max(1) as f64);
        self.ops += ops;
    }

    /// Records a sample that timed `ops` operations in `d`.
    pub fn push_dur(&mut self, d: Duration, ops: u64) {
        self.push(d.as_nanos() as f64, ops);
    }

    /// Median, p99 and minimum per operation; `None` without samples.
    pub fn stats(&self) -> Option<Stats> {
        if self.ns.is_empty() {
            return None;
        }
        let mut v = self.ns.clone();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some(Stats { median_ns: at(0.5), p99_ns: at(0.99), min_ns: v[0], iters: self.ops, samples: v.len() })
    }

    /// Every sample scaled by `k` (to derive one primitive from another).
    pub fn scaled(&self, k: f64) -> Samples {
        Samples { ns: self.ns.iter().map(|x| x * k).collect(), ops: self.ops }
    }
}

/// What a primitive's samples say.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Median nanoseconds per operation.
    pub median_ns: f64,
    /// 99th percentile nanoseconds per operation (over samples).
    pub p99_ns: f64,
    /// Fastest sample, nanoseconds per operation.
    pub min_ns: f64,
    /// Operations timed in all.
    pub iters: u64,
    /// Samples taken.
    pub samples: usize,
}

/// CPUs this thread may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// Pins the calling thread to `cpu`; returns the previous set for [`unpin`].
pub fn pin(cpu: usize) -> rustix::io::Result<CpuSet> {
    let old = rustix::thread::sched_getaffinity(None)?;
    let mut set = CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(old)
}

/// Restores an affinity returned by [`pin`].
pub fn unpin(old: &CpuSet) {
    let _ = rustix::thread::sched_setaffinity(None, old);
}
