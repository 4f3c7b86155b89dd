//! The payload size above which passing pages by remapping is cheaper than
//! copying them, from the costs the probe measured.
//!
//! The model, for a payload of N pages:
//!
//! - **copy** (a pipe-like path: into the kernel and out again):
//!   `2 × N × copy_per_page(N)`, where `copy_per_page` is the `memcpy` cost
//!   per page measured at the largest buffer size not above the payload.
//! - **remap** (ferry's by-value region: seal the memfd, pass the
//!   descriptor, the receiver maps it privately and later unmaps it):
//!   `fixed + N × per_page(touch)` with
//!   - `fixed = mmap-munmap(1 page) + seal(1 page) + fd_extra`, where
//!     `fd_extra` is what carrying the descriptor adds to a message that
//!     would be sent anyway (`fd-pass − seqpacket-message`);
//!   - `per_page(none) = seal-per-page + mmap slope` (the growth of an
//!     untouched mmap/munmap with size);
//!   - `per_page(read) = per_page(none) + read-fault-per-page + munmap-read-per-page`;
//!   - `per_page(write) = per_page(none) + cow-fault-per-page + munmap-cow-per-page`.
//!
//! The crossover is the smallest N from which remap is cheaper at every
//! larger size up to 1 GiB (measured copy costs are not monotone in size,
//! so the first N where remap wins is not enough).
//!
//! The message itself is common to both paths and cancels. The copy path's
//! receiver touching its own copy is free (the data is in its cache), so
//! the copy side does not depend on the touch. Not modelled: the sender
//! writing the payload (needed either way), fresh-page allocation for a new
//! region (`shmem-alloc-fault-per-page`; ferry's lend mode reuses pages),
//! and cache effects of the copies on the rest of the program.

use super::{record, Placement, Record, Touch, IMPL, SUITE};

/// Largest payload considered: 1 GiB of 4 KiB pages.
pub const MAX_PAGES: u64 = 1 << 18;

/// The crossover for one touch mode.
#[derive(Clone, Debug, PartialEq)]
pub struct Crossover {
    /// What the receiver does with the pages.
    pub touch: Touch,
    /// Smallest payload, in pages, from which remapping is cheaper at every
    /// size up to [`MAX_PAGES`]; `None` if it is not cheaper at
    /// `MAX_PAGES` or the inputs are missing.
    pub pages: Option<u64>,
    /// Page size used.
    pub page: u64,
    /// Fixed remapping cost, ns.
    pub fixed_ns: f64,
    /// Remapping cost per page for this touch, ns.
    pub remap_per_page_ns: f64,
    /// Copying cost per page (both copies) at the crossover (or the largest
    /// size measured), ns.
    pub copy_per_page_ns: f64,
    /// Why there is no crossover, when there is none.
    pub reason: Option<String>,
}

impl Crossover {
    /// Crossover size in bytes.
    pub fn bytes(&self) -> Option<u64> {
        self.pages.map(|p| p * self.page)
    }

    /// Total cost of either path at the crossover, ns.
    pub fn cost_ns(&self) -> Option<f64> {
        self.pages.map(|n| self.fixed_ns + n as f64 * self.remap_per_page_ns)
    }

    /// As a `crossover` record: `bytes` is the size, `median_ns` the cost
    /// of either path there; `iters` 0 and no p99/min because it is
    /// computed, not timed.
    pub fn record(&self) -> Record {
        let r = match (self.bytes(), &self.reason) {
            (Some(b), _) => {
                let mut r = Record::new(SUITE, "crossover", IMPL, Placement::SameCore).bytes(b).touch(self.touch);
                r.median_ns = self.cost_ns();
                r.extra("pages", self.pages.unwrap_or(0))
            }
            (None, reason) => {
                record::skipped("crossover", Placement::SameCore, reason.as_deref().unwrap_or("no crossover")).touch(self.touch)
            }
        };
        r.extra("kind", "model")
            .extra("fixed_ns", self.fixed_ns)
            .extra("remap_per_page_ns", self.remap_per_page_ns)
            .extra("copy_per_page_ns", self.copy_per_page_ns)
            .extra("model", MODEL)
    }
}

/// One-line statement of the model, carried in every crossover record.
pub const MODEL: &str = "copy = 2*N*memcpy_per_page; remap = mmap-munmap + seal + (fd-pass - seqpacket-message) + N*(seal-per-page + mmap slope [+ read fault + unmap | + cow fault + unmap])";

fn median(rs: &[Record], case: &str) -> Option<f64> {
    rs.iter().find(|r| r.case == case).and_then(|r| r.median_ns)
}

/// Computes the crossover for each touch mode from the probe's records.
pub fn compute(rs: &[Record], page: usize) -> Vec<Crossover> {
    let page = page as u64;
    let copies: Vec<(u64, f64)> = rs
        .iter()
        .filter(|r| r.case == "memcpy" && r.bytes > 0)
        .filter_map(|r| r.median_ns.map(|m| (r.bytes, m * page as f64 / r.bytes as f64)))
        .collect();
    let mmaps: Vec<(u64, f64)> =
        rs.iter().filter(|r| r.case == "mmap-munmap").filter_map(|r| r.median_ns.map(|m| (r.bytes, m))).collect();
    let need = |name: &str| format!("no crossover: `{name}` was not measured");
    let inputs = (|| -> Result<_, String> {
        if copies.is_empty() {
            return Err(need("memcpy"));
        }
        let (b1, m1) = *mmaps.iter().min_by_key(|(b, _)| *b).ok_or_else(|| need("mmap-munmap"))?;
        let (bn, mn) = *mmaps.iter().max_by_key(|(b, _)| *b).unwrap();
        let slope = if bn > b1 { ((mn - m1) / ((bn - b1) / page) as f64).max(0.0) } else { 0.0 };
        let seal = median(rs, "seal").ok_or_else(|| need("seal"))?;
        let seal_pp = median(rs, "seal-per-page").ok_or_else(|| need("seal-per-page"))?;
        let fd = median(rs, "fd-pass").ok_or_else(|| need("fd-pass"))?;
        let msg = median(rs, "seqpacket-message").ok_or_else(|| need("seqpacket-message"))?;
        Ok((m1 + seal + (fd - msg).max(0.0), seal_pp + slope))
    })();
    [Touch::None, Touch::Read, Touch::Write]
        .into_iter()
        .map(|touch| {
            let touch_pp = match touch {
                Touch::None => Ok(0.0),
                Touch::Read => median(rs, "read-fault-per-page")
                    .zip(median(rs, "munmap-read-per-page"))
                    .map(|(a, b)| a + b)
                    .ok_or_else(|| need("read-fault-per-page")),
                Touch::Write => median(rs, "cow-fault-per-page")
                    .zip(median(rs, "munmap-cow-per-page"))
                    .map(|(a, b)| a + b)
                    .ok_or_else(|| need("cow-fault-per-page")),
            };
            let both = match (&inputs, touch_pp) {
                (Ok((fixed, base)), Ok(t)) => Ok((*fixed, base + t)),
                (Err(e), _) => Err(e.clone()),
                (_, Err(e)) => Err(e),
            };
            match both {
                Ok((fixed, per_page)) => solve(touch, page, fixed, per_page, &copies),
                Err(e) => Crossover {
                    touch,
                    pages: None,
                    page,
                    fixed_ns: 0.0,
                    remap_per_page_ns: 0.0,
                    copy_per_page_ns: 0.0,
                    reason: Some(e),
                },
            }
        })
        .collect()
}

/// Both copies of one page at a payload of `pages` pages.
fn copy_pp(copies: &[(u64, f64)], pages: u64, page: u64) -> f64 {
    let bytes = pages * page;
    let at = copies
        .iter()
        .filter(|(b, _)| *b <= bytes)
        .max_by_key(|(b, _)| *b)
        .or_else(|| copies.iter().min_by_key(|(b, _)| *b))
        .map(|(_, c)| *c)
        .unwrap_or(0.0);
    2.0 * at
}

fn solve(touch: Touch, page: u64, fixed: f64, per_page: f64, copies: &[(u64, f64)]) -> Crossover {
    // The copy cost per page is not monotone in size (caches, noise), so
    // remapping may win at some size and lose again at a larger one: the
    // crossover is the size from which it wins at every larger size too.
    let wins = |n: u64| fixed + n as f64 * per_page < n as f64 * copy_pp(copies, n, page);
    let found = match (1..=MAX_PAGES).rev().find(|&n| !wins(n)) {
        None => Some(1),
        Some(MAX_PAGES) => None,
        Some(last_loss) => Some(last_loss + 1),
    };
    let at = found.unwrap_or(MAX_PAGES);
    let copy = copy_pp(copies, at, page);
    Crossover {
        touch,
        pages: found,
        page,
        fixed_ns: fixed,
        remap_per_page_ns: per_page,
        copy_per_page_ns: copy,
        reason: found.is_none().then(|| {
            format!(
                "remapping does not beat copying up to {}: it costs {:.0} ns per page against {:.0} ns for two copies",
                super::report::fmt_bytes(MAX_PAGES * page),
                per_page,
                copy
            )
        }),
    }
}
