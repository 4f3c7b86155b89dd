//! `pager`: memory objects served by a user-level pager in another process,
//! and files read through ferry's file server, against the bare kernel.
//!
//! - `fault`: one fault served; `bytes` is what one fault supplies (the
//!   cluster, `extra.cluster` pages of 4 KiB: 1, 2, 4, 16 and 512). The
//!   client maps a fresh object of at least 1024 pages (untimed), touches
//!   the first byte of every cluster and checks it, and each sample is the
//!   time of all those touches divided by the faults they took. ferry's
//!   three supply modes run through `ferry::pager` with the pager in a
//!   forked process: `ferry-pager-copy` (`UFFDIO_COPY`, Mach's
//!   `data_provided`), `ferry-pager-zerocopy` (the pager fills a shared
//!   memfd, `UFFDIO_CONTINUE` maps it: the `data_supply` analogue) and
//!   `ferry-pager-zerofill` (`data_unavailable`, `UFFDIO_ZEROPAGE`). The
//!   floor is a bare userfaultfd handler in a forked process doing the same
//!   work with the same cluster: `uffd-raw` (copy), `uffd-raw-continue`,
//!   `uffd-raw-zeropage`. `ferry-pager-zerocopy-warm` and
//!   `uffd-raw-continue-warm` measure zero-copy supply of pages already in
//!   the page cache (a first client touched them, untimed): the
//!   `UFFDIO_CONTINUE` alone, what a second client of an object pays.
//!   Both pagers write the same pattern into every
//!   page they supply (a pager produces its data), so the difference is
//!   ferry's machinery alone. Compare each ferry mode with its own raw
//!   mode; the table's ratio column divides by the fastest raw variant.
//! - `seqread`: one sequential pass over a file of `bytes` (16 MiB and
//!   256 MiB; the 256 MiB case is skipped with `--quick`), summing every
//!   8-byte word and checking the sum. `randread`: 4 KiB reads (`bytes`) at
//!   random pages of a 256 MiB file (16 MiB with `--quick`), one read for
//!   every 16 pages of the file per pass, each checked. Through the file
//!   server (`ferry-fileserver`: read-ahead of 16 pages, the default;
//!   `ferry-fileserver-ra512`: 512 pages, which matter only to a client
//!   mapping through the pager), a fresh snapshot per pass (the file server
//!   copies the file into a sealed memfd at each open, untimed like
//!   `file-mmap`'s `mmap` call; `extra.open_us_mean` says what it cost;
//!   `ferry-fileserver-shared` keeps one snapshot open for the whole run,
//!   as another client would, so its opens reuse the version),
//!   against `file-mmap` (a fresh private mapping per pass) and `file-read`
//!   (`pread` into a reused 1 MiB buffer). The file's page cache is warm
//!   for all of them: it is written once and kept in
//!   `$TMPDIR/ferry-bench-pager-UID/` for later runs (each 8-byte word holds
//!   its own offset, so every read can be checked).
//!
//! Implementations answer only the cases they belong to and record the
//! others as skipped ("not applicable").

use std::hint::black_box;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferry::fileserver::{FileClient, FileServer};
use ferry::pager::{MemoryObject, ObjectConfig, ObjectServer, Pager, PagerError, PagerFault, Supply, SupplyMode};
use ferry::Timeout;

use crate::harness::{Case, Impl, Run, Skip, Suite};
use crate::record::Touch;
use crate::sys::{self, Map, RawUffd};

/// The page size the suite assumes (it skips on other page sizes).
pub const PAGE: usize = 4096;
/// Pages supplied per fault in the `fault` case.
pub const CLUSTERS: [usize; 5] = [1, 2, 4, 16, 512];
/// Sizes of the `seqread` file.
pub const SEQ_SIZES: [u64; 2] = [16 << 20, 256 << 20];
/// The file `randread` reads from (full runs) and its `--quick` size.
pub const RAND_FILE: u64 = 256 << 20;
/// `randread`'s file with `--quick`, and the largest `seqread` then.
pub const QUICK_FILE: u64 = 16 << 20;

/// The suite.
pub fn suite() -> Suite {
    Suite {
        name: "pager",
        about: "faults served by ferry pagers (copy, zero-copy, zero-fill) vs a raw userfaultfd handler; file server reads vs mmap and read()",
        reference: "uffd-raw",
        cases,
        impls,
    }
}

/// `fault` per cluster, `seqread` per size, `randread`.
pub fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = CLUSTERS
        .iter()
        .map(|&c| Case { suite: "pager", name: "fault", bytes: (c * PAGE) as u64, touch: Touch::Read })
        .collect();
    for &bytes in &SEQ_SIZES {
        v.push(Case { suite: "pager", name: "seqread", bytes, touch: Touch::Read });
    }
    v.push(Case { suite: "pager", name: "randread", bytes: PAGE as u64, touch: Touch::Read });
    v
}

/// The implementations.
pub fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "ferry-pager-copy", run: |r| ferry_fault(r, Mode::Copy) },
        Impl { name: "uffd-raw", run: |r| raw_fault(r, Mode::Copy) },
        Impl { name: "ferry-pager-zerocopy", run: |r| ferry_fault(r, Mode::Continue) },
        Impl { name: "uffd-raw-continue", run: |r| raw_fault(r, Mode::Continue) },
        Impl { name: "ferry-pager-zerocopy-warm", run: |r| ferry_fault(r, Mode::ContinueWarm) },
        Impl { name: "uffd-raw-continue-warm", run: |r| raw_fault(r, Mode::ContinueWarm) },
        Impl { name: "ferry-pager-zerofill", run: |r| ferry_fault(r, Mode::Zero) },
        Impl { name: "uffd-raw-zeropage", run: |r| raw_fault(r, Mode::Zero) },
        Impl { name: "ferry-fileserver", run: |r| fileserver(r, 16, false) },
        Impl { name: "ferry-fileserver-ra512", run: |r| fileserver(r, 512, false) },
        Impl { name: "ferry-fileserver-shared", run: |r| fileserver(r, 16, true) },
        Impl { name: "file-mmap", run: file_mmap },
        Impl { name: "file-read", run: file_read },
    ]
}

/// How a fault is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The pager writes the pages into a buffer; `UFFDIO_COPY`.
    Copy,
    /// The pager writes the pages into a shared memfd; `UFFDIO_CONTINUE`.
    Continue,
    /// The pages are in the shared memfd already (another client touched
    /// them, untimed): `UFFDIO_CONTINUE` alone.
    ContinueWarm,
    /// No data: `UFFDIO_ZEROPAGE`.
    Zero,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Continue => "zerocopy",
            Mode::ContinueWarm => "zerocopy-warm",
            Mode::Zero => "zerofill",
        }
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> Skip {
    Skip::new(format!("failed: {what}: {e}"))
}

fn pager_err(what: &str) -> impl Fn(PagerError) -> Skip + '_ {
    move |e| match e {
        PagerError::UserfaultfdUnavailable(_) | PagerError::Unsupported(_) => Skip::new(format!("{what}: {e}")),
        e => failed(what, e),
    }
}

fn not_applicable(run: &Run<'_>, wanted: &str) -> Skip {
    Skip::new(format!("not applicable: this implementation measures {wanted}, not {}", run.case.name))
}

fn check_page_size() -> Result<(), Skip> {
    if rustix::param::page_size() != PAGE {
        return Err(Skip::new(format!("the suite assumes 4 KiB pages; this machine has {}", rustix::param::page_size())));
    }
    Ok(())
}

/// Whether this run is brief (`--quick`, or the smoke test's few
/// iterations): large files are then smaller or skipped.
fn brief(run: &Run<'_>) -> bool {
    run.budget().round_time < Duration::from_millis(100)
}

// ---------------------------------------------------------------- fault

/// The byte every byte of page `p` holds (never zero, so zero-filled pages
/// are told apart).
fn pattern(p: usize) -> u8 {
    (p % 251) as u8 + 1
}

/// Writes the pattern of the pages starting at byte `offset` into `buf`:
/// the work any pager does to produce its data.
fn fill_pages(offset: usize, buf: &mut [u8]) {
    for (i, page) in buf.chunks_mut(PAGE).enumerate() {
        page.fill(pattern(offset / PAGE + i));
    }
}

/// A pager producing the pattern.
struct Produce;

impl Pager for Produce {
    fn data_request(&mut self, offset: u64, buf: &mut [u8]) -> Result<Supply, PagerFault> {
        fill_pages(offset as usize, buf);
        Ok(Supply::Provided)
    }
}

/// A pager with no data (`data_unavailable` for every request).
struct Nothing;

impl Pager for Nothing {
    fn data_request(&mut self, _: u64, _: &mut [u8]) -> Result<Supply, PagerFault> {
        Ok(Supply::Unavailable)
    }

    fn data_unavailable(&mut self, _: u64, _: usize) -> bool {
        true
    }
}

/// The cluster of a `fault` case, and the pages of one batch's object.
fn fault_shape(run: &Run<'_>) -> Result<(usize, usize), Skip> {
    if run.case.name != "fault" {
        return Err(not_applicable(run, "faults"));
    }
    check_page_size()?;
    let cluster = run.bytes() / PAGE;
    Ok((cluster, (32 * cluster).max(1024)))
}

/// Touches the first byte of every cluster of `pages` pages at `read`,
/// timed; checks each byte against the mode's data afterwards.
fn touch_clusters(read: impl Fn(usize) -> u8, pages: usize, cluster: usize, mode: Mode) -> Result<Duration, Skip> {
    let faults = pages / cluster;
    let mut got = vec![0u8; faults];
    let t = Instant::now();
    for (f, g) in got.iter_mut().enumerate() {
        *g = black_box(read(f * cluster * PAGE));
    }
    let el = t.elapsed();
    for (f, &g) in got.iter().enumerate() {
        let want = if mode == Mode::Zero { 0 } else { pattern(f * cluster) };
        if g != want {
            return Err(Skip::new(format!("failed: page {} read {g}, expected {want}", f * cluster)));
        }
    }
    Ok(el)
}

/// One byte of a mapped object, read by copy (a zero-copy object's pages
/// are the pager's and are never borrowed as a slice).
fn byte_at(m: &ferry::pager::MappedObject, off: usize) -> u8 {
    let mut b = [0u8];
    m.read_at(off, &mut b);
    b[0]
}

/// ferry's pager: an `ObjectServer` with one fresh object per batch, served
/// by a forked process; the client maps it with `MemoryObject::map`.
fn ferry_fault(run: &mut Run<'_>, mode: Mode) -> Result<(), Skip> {
    let (cluster, pages) = fault_shape(run)?;
    let faults = pages / cluster;
    let mut served = ferry::pager::ObjectStats::default();
    let mut touches = 0u64;
    while run.more() {
        let (mut server, right) = ObjectServer::new().map_err(pager_err("object server"))?;
        let config = ObjectConfig {
            cluster,
            mode: if matches!(mode, Mode::Continue | Mode::ContinueWarm) { SupplyMode::ZeroCopy } else { SupplyMode::Copy },
            ..ObjectConfig::default()
        };
        let pager: Box<dyn Pager> = if mode == Mode::Zero { Box::new(Nothing) } else { Box::new(Produce) };
        let id = server.add_object((pages * PAGE) as u64, pager, config).map_err(pager_err("add object"))?;
        let peer = run.spawn(&[], move || loop {
            server.serve(Timeout::Infinite).map_err(|e| io::Error::other(e.to_string()))?;
        })?;
        let object = MemoryObject::new(right, id);
        if mode == Mode::ContinueWarm {
            // A first client fills the pager's page cache, untimed.
            let first = object.map().map_err(pager_err("map"))?;
            touch_clusters(|off| byte_at(&first, off), pages, 1, mode)?;
        }
        let before = object.stats().map_err(pager_err("stats"))?;
        let mapped = object.map().map_err(pager_err("map"))?;
        let el = touch_clusters(|off| byte_at(&mapped, off), pages, cluster, mode)?;
        run.record_batch(el, faults as u64);
        touches += faults as u64;
        let st = object.stats().map_err(pager_err("stats"))?;
        served.faults += st.faults - before.faults;
        served.pages_copied += st.pages_copied - before.pages_copied;
        served.pages_continued += st.pages_continued - before.pages_continued;
        served.pages_zeroed += st.pages_zeroed - before.pages_zeroed;
        served.requests += st.requests - before.requests;
        drop(mapped);
        drop(object);
        drop(peer);
    }
    note_fault(run, cluster, mode, faults);
    let f = served.faults.max(1) as f64;
    run.note("faults_per_touch", served.faults as f64 / touches.max(1) as f64);
    run.note("pages_per_fault", (served.pages_copied + served.pages_continued + served.pages_zeroed) as f64 / f);
    run.note("pager_requests_per_fault", served.requests as f64 / f);
    Ok(())
}

fn note_fault(run: &mut Run<'_>, cluster: usize, mode: Mode, faults: usize) {
    run.note("cluster", cluster as u64);
    run.note("mode", mode.name());
    run.note("faults_per_batch", faults as u64);
}

/// The floor: a bare userfaultfd handler in a forked process resolving the
/// same faults the same way, with nothing around it.
fn raw_fault(run: &mut Run<'_>, mode: Mode) -> Result<(), Skip> {
    let (cluster, pages) = fault_shape(run)?;
    let faults = pages / cluster;
    let len = pages * PAGE;
    while run.more() {
        let shmem = matches!(mode, Mode::Continue | Mode::ContinueWarm);
        let memfd = if shmem {
            let fd = rustix::fs::memfd_create("uffd-raw", rustix::fs::MemfdFlags::CLOEXEC).map_err(|e| failed("memfd", e))?;
            rustix::fs::ftruncate(&fd, len as u64).map_err(|e| failed("ftruncate", e))?;
            Some(fd)
        } else {
            None
        };
        let map = match &memfd {
            Some(fd) => Map::file(fd.as_fd(), len, false, true),
            None => sys::private_anon(len),
        }
        .map_err(|e| failed("mmap", e))?;
        let uffd = match RawUffd::new(shmem) {
            Ok(u) => u,
            Err(e) => return Err(Skip::new(format!("userfaultfd unavailable: {e}"))),
        };
        if let (Mode::ContinueWarm, Some(fd)) = (mode, &memfd) {
            // The page cache is filled before the client faults, untimed.
            let mut cache = Map::file(fd.as_fd(), len, true, true).map_err(|e| failed("mmap", e))?;
            fill_pages(0, cache.as_mut_slice().ok_or_else(|| failed("mmap", "read-only"))?);
        }
        uffd.register(map.addr(), len, shmem).map_err(|e| failed("UFFDIO_REGISTER", e))?;
        let base = map.addr();
        let peer = run.spawn(&[], move || serve_raw(uffd, memfd, base, len, cluster, mode))?;
        let el = touch_clusters(|off| map.touch(off), pages, cluster, mode)?;
        run.record_batch(el, faults as u64);
        drop(peer);
        drop(map);
    }
    note_fault(run, cluster, mode, faults);
    Ok(())
}

/// The raw handler's loop: read a fault, supply the cluster after it (up to
/// a page already supplied, as ferry does), until killed.
fn serve_raw(uffd: RawUffd, memfd: Option<OwnedFd>, base: usize, len: usize, cluster: usize, mode: Mode) -> io::Result<()> {
    let pages = len / PAGE;
    let mut buf = vec![0u8; cluster * PAGE];
    let mut cache = match &memfd {
        Some(fd) => Some(Map::file(fd.as_fd(), len, true, true)?),
        None => None,
    };
    let mut supplied = vec![false; pages];
    while let Some(addr) = uffd.next_fault()? {
        let Some(first) = (addr as usize).checked_sub(base).map(|o| o / PAGE).filter(|&p| p < pages) else { continue };
        let mut end = first + 1;
        while end < pages && end < first + cluster && !supplied[end] {
            end += 1;
        }
        let dst = base + first * PAGE;
        let n = (end - first) * PAGE;
        match mode {
            Mode::Copy => {
                fill_pages(first * PAGE, &mut buf[..n]);
                fill_all(n, |at| uffd.copy(dst + at, &buf[at..n]))?;
            }
            Mode::ContinueWarm => fill_all(n, |at| uffd.continue_(dst + at, n - at))?,
            Mode::Continue => {
                let c = cache.as_mut().and_then(Map::as_mut_slice).ok_or_else(|| io::Error::other("no page cache"))?;
                fill_pages(first * PAGE, &mut c[first * PAGE..end * PAGE]);
                fill_all(n, |at| uffd.continue_(dst + at, n - at))?;
            }
            Mode::Zero => fill_all(n, |at| uffd.zeropage(dst + at, n - at))?,
        }
        supplied[first..end].iter_mut().for_each(|s| *s = true);
    }
    Ok(())
}

/// Repeats a fill ioctl until `n` bytes are done, stepping over present
/// pages.
fn fill_all(n: usize, mut op: impl FnMut(usize) -> Result<usize, sys::RawPartial>) -> io::Result<()> {
    let mut at = 0;
    while at < n {
        match op(at) {
            Ok(k) => at += k.max(PAGE),
            Err((k, rustix::io::Errno::AGAIN)) => at += k,
            Err((0, rustix::io::Errno::EXIST)) => at += PAGE,
            Err((k, rustix::io::Errno::EXIST)) => at += k,
            Err((_, e)) => return Err(e.into()),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- files

/// What one pass reads: the whole file in order, or `reads` random pages.
#[derive(Clone, Copy, Debug)]
enum Pass {
    Seq,
    Rand { reads: usize },
}

/// The file a read case uses: its size, created (once per machine and
/// size) in the suite's directory; and what a pass does.
fn file_shape(run: &Run<'_>) -> Result<(u64, Pass), Skip> {
    check_page_size()?;
    match run.case.name {
        "seqread" if brief(run) && run.case.bytes > QUICK_FILE => {
            Err(Skip::new(format!("files above {} MiB are read only in full runs (not with --quick)", QUICK_FILE >> 20)))
        }
        "seqread" => Ok((run.case.bytes, Pass::Seq)),
        "randread" => {
            let size = if brief(run) { QUICK_FILE } else { RAND_FILE };
            Ok((size, Pass::Rand { reads: size as usize / PAGE / 16 }))
        }
        _ => Err(not_applicable(run, "file reads")),
    }
}

/// The sum of the 8-byte words of `b` (wrapping).
fn sum_words(b: &[u8]) -> u64 {
    b.chunks_exact(8).fold(0u64, |s, w| s.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes"))))
}

/// The sum [`sum_words`] gives for `n` bytes of the file at `offset` (each
/// word holds its own offset).
fn expected_sum(offset: u64, n: u64) -> u64 {
    let k = n / 8;
    k.wrapping_mul(offset).wrapping_add(8u64.wrapping_mul(k.wrapping_mul(k.wrapping_sub(1)) / 2))
}

/// The pages a random pass reads (a fixed sequence, so every
/// implementation reads the same pages).
fn random_pages(pages: usize, reads: usize) -> Vec<usize> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..reads)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % pages as u64) as usize
        })
        .collect()
}

/// Reads one pass through `page_sum` (the sum of page `p`) or `all` (the
/// whole file's sum), timed; checks the sums afterwards.
fn timed_pass(size: u64, pass: Pass, all: impl FnOnce() -> io::Result<u64>, mut page_sum: impl FnMut(usize) -> io::Result<u64>) -> Result<(Duration, u64), Skip> {
    match pass {
        Pass::Seq => {
            let t = Instant::now();
            let s = black_box(all().map_err(|e| failed("read", e))?);
            let el = t.elapsed();
            if s != expected_sum(0, size) {
                return Err(Skip::new("failed: the file's words do not sum as written".to_string()));
            }
            Ok((el, 1))
        }
        Pass::Rand { reads } => {
            let order = random_pages(size as usize / PAGE, reads);
            let mut sums = vec![0u64; reads];
            let t = Instant::now();
            for (s, &p) in sums.iter_mut().zip(&order) {
                *s = black_box(page_sum(p).map_err(|e| failed("read", e))?);
            }
            let el = t.elapsed();
            for (s, &p) in sums.iter().zip(&order) {
                if *s != expected_sum((p * PAGE) as u64, PAGE as u64) {
                    return Err(Skip::new(format!("failed: page {p} does not sum as written")));
                }
            }
            Ok((el, reads as u64))
        }
    }
}

/// The suite's data file of `size` bytes, each 8-byte word its own offset:
/// reused if present and intact, else written (to a temporary name, then
/// renamed). Returns its directory and name.
fn data_file(size: u64) -> Result<(PathBuf, String), Skip> {
    let dir = std::env::temp_dir().join(format!("ferry-bench-pager-{}", rustix::process::getuid().as_raw()));
    super::own_dir(&dir).map_err(|e| failed(&format!("the data file's directory {}", dir.display()), e))?;
    let name = format!("object-{size}");
    let path = dir.join(&name);
    let intact = || -> io::Result<bool> {
        let f = std::fs::File::open(&path)?;
        if f.metadata()?.len() != size {
            return Ok(false);
        }
        let mut w = [0u8; 8];
        for off in [0, size / 2, size - 8] {
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut w, off)?;
            if u64::from_le_bytes(w) != off {
                return Ok(false);
            }
        }
        Ok(true)
    };
    if intact().unwrap_or(false) {
        return Ok((dir, name));
    }
    let write = || -> io::Result<()> {
        let tmp = dir.join(format!("{name}.new-{}", std::process::id()));
        let mut chunk = vec![0u8; 1 << 20];
        {
            let f = std::fs::File::create(&tmp)?;
            let mut off = 0u64;
            while off < size {
                let n = (chunk.len() as u64).min(size - off) as usize;
                for (i, w) in chunk[..n].chunks_exact_mut(8).enumerate() {
                    w.copy_from_slice(&(off + 8 * i as u64).to_le_bytes());
                }
                std::os::unix::fs::FileExt::write_all_at(&f, &chunk[..n], off)?;
                off += n as u64;
            }
        }
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| failed(&format!("writing the data file {}", path.display()), e))?;
    Ok((dir, name))
}

fn note_file(run: &mut Run<'_>, size: u64, pass: Pass) {
    run.note("file_bytes", size);
    run.note("page_cache", "warm");
    if let Pass::Rand { reads } = pass {
        run.note("reads_per_pass", reads as u64);
    }
}

/// Reads through ferry's file server (in a forked process), a fresh
/// snapshot per pass, read ahead `cluster` pages per fault (for mappings
/// through the pager). With `shared`, a first snapshot opened before the
/// passes (untimed) stays open throughout, as another client's would: each
/// pass's open then reuses the file's version instead of copying the file.
fn fileserver(run: &mut Run<'_>, cluster: usize, shared: bool) -> Result<(), Skip> {
    let (size, pass) = file_shape(run)?;
    let (dir, name) = data_file(size)?;
    let (mut server, right) =
        FileServer::new(&dir, ObjectConfig { cluster, ..ObjectConfig::default() }).map_err(pager_err("file server"))?;
    let peer = run.spawn(&[], move || loop {
        server.serve(Timeout::Infinite).map_err(|e| io::Error::other(e.to_string()))?;
    })?;
    let client = FileClient::new(right);
    let (mut faults, mut passes, mut requested, mut direct) = (0u64, 0u64, 0u64, true);
    let mut open_time = Duration::ZERO;
    let first = if shared { Some(client.open(&name).map_err(pager_err("open"))?) } else { None };
    while run.more() {
        // Untimed, as `file-mmap`'s `mmap` call is; its mean is noted.
        // Unless `first` keeps the version, the previous pass's snapshot is
        // gone, so each open copies the file into a new version.
        let t = Instant::now();
        let snap = client.open(&name).map_err(pager_err("open"))?;
        open_time += t.elapsed();
        direct &= snap.is_direct();
        let s = snap.as_slice();
        if s.len() as u64 != size {
            return Err(Skip::new(format!("failed: snapshot of {} bytes, the file has {size}", s.len())));
        }
        let (el, ops) = timed_pass(size, pass, || Ok(sum_words(s)), |p| Ok(sum_words(&s[p * PAGE..(p + 1) * PAGE])))?;
        run.record_batch(el, ops);
        if let Some(o) = snap.object() {
            let st = o.stats().map_err(pager_err("stats"))?;
            faults += st.faults;
            requested += st.pages_requested;
        }
        passes += 1;
        drop(snap);
    }
    drop(first);
    drop(client);
    drop(peer);
    note_file(run, size, pass);
    run.note("cluster", cluster as u64);
    run.note("version_shared", shared);
    run.note("faults_per_pass", faults as f64 / passes.max(1) as f64);
    run.note("pages_requested_per_pass", requested as f64 / passes.max(1) as f64);
    run.note("open_us_mean", open_time.as_secs_f64() * 1e6 / passes.max(1) as f64);
    run.note("mapped", if direct { "sealed memfd, privately" } else { "through the pager" });
    Ok(())
}

fn open_file(size: u64) -> Result<std::fs::File, Skip> {
    let (dir, name) = data_file(size)?;
    std::fs::File::open(dir.join(name)).map_err(|e| failed("open", e))
}

/// The baseline: a plain private mapping of the file, fresh per pass.
fn file_mmap(run: &mut Run<'_>) -> Result<(), Skip> {
    let (size, pass) = file_shape(run)?;
    let f = open_file(size)?;
    while run.more() {
        let m = Map::file(f.as_fd(), size as usize, false, false).map_err(|e| failed("mmap", e))?;
        let s = m.as_slice();
        let (el, ops) = timed_pass(size, pass, || Ok(sum_words(s)), |p| Ok(sum_words(&s[p * PAGE..(p + 1) * PAGE])))?;
        run.record_batch(el, ops);
        drop(m);
    }
    note_file(run, size, pass);
    Ok(())
}

/// The baseline: `pread` into a reused buffer (1 MiB at a time for a
/// sequential pass, one page for a random read).
fn file_read(run: &mut Run<'_>) -> Result<(), Skip> {
    let (size, pass) = file_shape(run)?;
    let f = open_file(size)?;
    let mut buf = vec![0u8; 1 << 20];
    while run.more() {
        let b = std::cell::RefCell::new(&mut buf);
        let all = || -> io::Result<u64> {
            let mut b = b.borrow_mut();
            let (mut off, mut sum) = (0u64, 0u64);
            while off < size {
                let n = (b.len() as u64).min(size - off) as usize;
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut b[..n], off)?;
                sum = sum.wrapping_add(sum_words(&b[..n]));
                off += n as u64;
            }
            Ok(sum)
        };
        let page = |p: usize| -> io::Result<u64> {
            let mut b = b.borrow_mut();
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut b[..PAGE], (p * PAGE) as u64)?;
            Ok(sum_words(&b[..PAGE]))
        };
        let (el, ops) = timed_pass(size, pass, all, page)?;
        run.record_batch(el, ops);
    }
    note_file(run, size, pass);
    Ok(())
}
