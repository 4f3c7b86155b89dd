//! `files`: Unix file calls through ferry's emulation (Dean & Armand's
//! Tables 5-3, 5-4, 5-5 and 5-9), against native `read()`/`write()` on
//! the same files in the same run.
//!
//! - `seqread`: sequential 4 KiB reads over a cached file of `bytes`
//!   (16 MiB), one pass per sample (GB/s is the pass's throughput;
//!   `extra.reads_per_op` says how many reads a pass makes).
//! - `byte-read`: `lseek` to a pseudo-random offset in the file's first
//!   page, then a 1-byte read; reported per lseek+read pair (the paper's
//!   loop re-reads cached bytes: the cost of the calls, not of moving
//!   windows).
//! - `remap-read`: a 4 KiB read after an `lseek` one window further on
//!   (the library's 1 MiB, or `$FERRY_EMUL_WINDOW`), so that every read
//!   needs a new window (the paper's 61440-byte `lseek`
//!   test, which isolates the window change of Table 5-9); reported per
//!   lseek+read pair.
//! - `write`: sequential 4 KiB writes overwriting a cached 16 MiB file,
//!   one pass per sample, reported per write.
//! - `open-close`: `open`, a read of all 64 bytes and `close` of one of
//!   [`SMALL_FILES`] small files in turn, reported per file: what a
//!   program that reads many small files (a compiler's headers, a
//!   repository's objects) pays per file. `ferry-emul` and `native` only.
//!
//! Implementations: `ferry-emul` calls the emulation library's own `open`,
//! `read`, `write`, `lseek` (the `libferry_emul.so` that `ferry run`
//! preloads, opened here with `dlopen`; a preloaded program reaches the
//! same functions through the same kind of PLT call as it reaches the C
//! library's) with the emulation server on a thread of this process;
//! `ferry-sg` is CHORUS's segment read and write by message to that server
//! (copied through the server's cache, nothing mapped); `ferry-sg-handler`
//! runs the same server routine in the caller's thread (CHORUS's message
//! handler, for a co-located server); `native` is the C library's
//! `read`/`write`/`lseek` on a descriptor of the same file.
//!
//! The files live in a temporary directory removed when the process
//! exits. The library is looked for beside this program (`cargo build
//! --release -p ferry-emul -p ferry-bench` puts it in `deps/`) or at
//! `$FERRY_EMUL_LIB`; without it `ferry-emul` is recorded as skipped.
//!
//! # Safety
//! The suite calls C functions through pointers (the emulation library's
//! and the C library's `open`/`read`/`write`/`lseek`/`close`) on its own
//! descriptors and buffers of the stated lengths, and loads the library
//! with `dlopen`; each block says which.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ferry::emulation::{Client, EmulServer, Handler, Opened, OpenedFile};
use ferry::Timeout;
use libc::{c_char, c_int, c_uint, c_void, off_t, size_t, ssize_t};

use crate::harness::{Case, Impl, Run, Skip, Suite};
use crate::record::Touch;

/// The cached file's size in full runs.
pub const FILE_SIZE: u64 = 16 << 20;
/// Bytes per read or write in `seqread` and `write`.
pub const IO: usize = 4096;
/// The emulation library's window: how far `remap-read` moves between
/// reads.
fn stride() -> u64 {
    std::env::var("FERRY_EMUL_WINDOW").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 20)
}
/// The span `byte-read` seeks within.
pub const BYTE_SPAN: u64 = 4096;
/// How many small files `open-close` goes through, and each one's size.
pub const SMALL_FILES: usize = 256;
/// The size of each of `open-close`'s files.
pub const SMALL_BYTES: usize = 64;

/// The suite.
pub fn suite() -> Suite {
    Suite {
        name: "files",
        about: "Unix file calls through ferry's emulation library and segment reads vs native read()/write()",
        reference: "native",
        cases,
        impls,
    }
}

/// `seqread`, `byte-read`, `remap-read`, `write`, `open-close`.
pub fn cases() -> Vec<Case> {
    vec![
        Case { suite: "files", name: "seqread", bytes: FILE_SIZE, touch: Touch::Read },
        Case { suite: "files", name: "byte-read", bytes: 1, touch: Touch::Read },
        Case { suite: "files", name: "remap-read", bytes: IO as u64, touch: Touch::Read },
        Case { suite: "files", name: "write", bytes: IO as u64, touch: Touch::Write },
        Case { suite: "files", name: "open-close", bytes: SMALL_BYTES as u64, touch: Touch::Read },
    ]
}

/// The emulation library, segment I/O by message and in the caller's
/// thread, and native calls.
pub fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "ferry-emul", run: emul },
        Impl { name: "ferry-sg", run: sg_message },
        Impl { name: "ferry-sg-handler", run: sg_handler },
        Impl { name: "native", run: native },
    ]
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
type SeekFn = unsafe extern "C" fn(c_int, off_t, c_int) -> off_t;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;

/// File calls: the emulation library's or the C library's.
#[derive(Clone, Copy)]
struct Calls {
    open: OpenFn,
    read: ReadFn,
    write: WriteFn,
    lseek: SeekFn,
    close: CloseFn,
}

/// The files, the server, a client and a handler, made once per process.
struct Env {
    dir: PathBuf,
    client: Client,
    handler: Handler,
    lib: Result<Calls, String>,
}

// SAFETY: every field is usable from any thread (ports, paths, function
// pointers into a library that stays loaded).
unsafe impl Sync for Env {}

static ENV: OnceLock<Result<Env, String>> = OnceLock::new();

extern "C" fn remove_dir() {
    if let Some(Ok(e)) = ENV.get() {
        let _ = std::fs::remove_dir_all(&e.dir);
    }
}

/// A new directory of this user's alone (mode 0700) in the temporary
/// directory, `ferry-bench-files-` and random characters (`tempfile`).
/// The temporary directory is shared: another user may have made a name
/// first, with symbolic links in it named as the suite's files, so the
/// name is never one that already exists. Removed at exit.
fn private_temp_dir() -> std::io::Result<PathBuf> {
    Ok(tempfile::Builder::new().prefix("ferry-bench-files-").tempdir()?.keep())
}

fn library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERRY_EMUL_LIB") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // The newer copy is this build's.
    // Preloaded into the suite's programs: only a file no one else may
    // change (`ferry::spawn::nobody_else_controls`).
    [dir.join("libferry_emul.so"), dir.join("deps/libferry_emul.so")]
        .into_iter()
        .filter(|p| ferry::spawn::nobody_else_controls(p))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
}

fn load(path: &std::path::Path) -> Result<Calls, String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: loads the emulation library (a Rust cdylib whose
    // initialisation only reads the environment set just before).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!("cannot load {}", path.display()));
    }
    let sym = |name: &std::ffi::CStr| -> Result<usize, String> {
        // SAFETY: looks a symbol up in the handle just opened.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) } as usize;
        if p == 0 {
            Err(format!("{} has no {name:?}", path.display()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: the library's exported functions have exactly these C
    // signatures (they stand in for the C library's).
    unsafe {
        Ok(Calls {
            open: std::mem::transmute::<usize, OpenFn>(sym(c"open")?),
            read: std::mem::transmute::<usize, ReadFn>(sym(c"read")?),
            write: std::mem::transmute::<usize, WriteFn>(sym(c"write")?),
            lseek: std::mem::transmute::<usize, SeekFn>(sym(c"lseek")?),
            close: std::mem::transmute::<usize, CloseFn>(sym(c"close")?),
        })
    }
}

fn native_calls() -> Calls {
    unsafe extern "C" fn open(p: *const c_char, f: c_int, m: c_uint) -> c_int {
        // SAFETY: the caller's arguments, passed on.
        unsafe { libc::open(p, f, m) }
    }
    Calls { open, read: libc::read, write: libc::write, lseek: libc::lseek, close: libc::close }
}

fn fill(path: &std::path::Path, size: u64) -> std::io::Result<()> {
    let words: Vec<u8> = (0..size / 8).flat_map(|i| (i * 8).to_le_bytes()).collect();
    std::fs::write(path, words)
}

fn env() -> Result<&'static Env, Skip> {
    let e = ENV.get_or_init(|| {
        let dir = private_temp_dir().map_err(|e| e.to_string())?;
        let dir = dir.canonicalize().map_err(|e| e.to_string())?;
        // SAFETY: registers a function that removes the directory at exit.
        unsafe { libc::atexit(remove_dir) };
        for (name, size) in [("seq", FILE_SIZE), ("wr", FILE_SIZE)] {
            fill(&dir.join(name), size).map_err(|e| e.to_string())?;
        }
        std::fs::create_dir_all(dir.join("small")).map_err(|e| e.to_string())?;
        for i in 0..SMALL_FILES {
            fill(&dir.join("small").join(i.to_string()), SMALL_BYTES as u64).map_err(|e| e.to_string())?;
        }
        let (mut srv, right) = EmulServer::new(&dir).map_err(|e| e.to_string())?;
        let handler = srv.handler();
        // The library finds the server at a descriptor named in the
        // environment (what `ferry run` arranges by inheritance).
        let inherited = right.try_clone().map_err(|e| e.to_string())?;
        std::env::set_var(ferry::emulation::ENV_ROOT, &dir);
        std::env::set_var(ferry::emulation::ENV_FD, inherited.as_fd().as_raw_fd().to_string());
        std::mem::forget(inherited);
        // The server thread runs wherever the scheduler puts it, not on the
        // CPU of the round that happened to start it.
        // (The round's thread may be pinned: every CPU is offered, and the
        // kernel keeps those the process may use.)
        let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU).collect();
        std::thread::spawn(move || {
            let _ = crate::pin::unpin(&cpus);
            while srv.serve(Timeout::After(Duration::from_secs(1))) {}
        });
        let lib = match library() {
            Some(p) => load(&p),
            None => Err("libferry_emul.so not found beside ferry-bench (build ferry-emul) nor at $FERRY_EMUL_LIB".into()),
        };
        Ok(Env { dir, client: Client::new(right), handler, lib })
    });
    e.as_ref().map_err(|e| Skip::new(format!("set-up failed: {e}")))
}

fn file_for(_run: &Run<'_>, write: bool) -> (String, u64) {
    (if write { "wr" } else { "seq" }.to_string(), FILE_SIZE)
}

/// A pseudo-random sequence for byte-read offsets.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A `seqread` sample is one pass over the file; a `write` sample is
/// reported per write.
fn record_pass(run: &mut Run<'_>, el: Duration, ops: u64, write: bool) {
    if write {
        run.record_batch(el, ops);
    } else {
        run.note("reads_per_op", ops);
        run.record_batch(el, 1);
    }
}

fn check_word(buf: &[u8], at: u64) -> Result<(), Skip> {
    let w = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    if w != at {
        return Err(Skip::new(format!("read the wrong bytes at {at}: {w}")));
    }
    Ok(())
}

/// `open-close`: each sample opens, reads whole and closes every small
/// file once; reported per file.
fn open_close(run: &mut Run<'_>, calls: Calls) -> Result<(), Skip> {
    let e = env()?;
    let paths: Vec<CString> = (0..SMALL_FILES)
        .map(|i| CString::new(e.dir.join("small").join(i.to_string()).into_os_string().into_encoded_bytes()).expect("path"))
        .collect();
    let mut buf = [0u8; SMALL_BYTES + 1];
    run.note("files", SMALL_FILES as u64);
    while run.more() {
        let t = Instant::now();
        for p in &paths {
            // SAFETY: a C string path and plain flags; then our descriptor
            // and a buffer of its length.
            let n = unsafe {
                let fd = (calls.open)(p.as_ptr(), libc::O_RDONLY, 0);
                if fd < 0 {
                    return Err(Skip::new(format!("open: {}", std::io::Error::last_os_error())));
                }
                let n = (calls.read)(fd, buf.as_mut_ptr().cast(), buf.len());
                (calls.close)(fd);
                n
            };
            if n != SMALL_BYTES as isize {
                return Err(Skip::new(format!("read {n} bytes of a {SMALL_BYTES}-byte file")));
            }
        }
        let el = t.elapsed();
        check_word(&buf[SMALL_BYTES - 8..], SMALL_BYTES as u64 - 8)?;
        run.record_batch(el, SMALL_FILES as u64);
    }
    Ok(())
}

fn with_calls(run: &mut Run<'_>, calls: Calls) -> Result<(), Skip> {
    if run.case.name == "open-close" {
        return open_close(run, calls);
    }
    let e = env()?;
    let write = run.case.name == "write";
    let (name, size) = file_for(run, write);
    let path = CString::new(e.dir.join(&name).into_os_string().into_encoded_bytes()).expect("path");
    let flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
    // SAFETY: a C string path and plain flags.
    let fd = unsafe { (calls.open)(path.as_ptr(), flags, 0) };
    if fd < 0 {
        return Err(Skip::new(format!("open {name}: {}", std::io::Error::last_os_error())));
    }
    let mut buf = vec![0u8; IO];
    let result = (|| {
        match run.case.name {
            "seqread" | "write" => {
                run.note("file_bytes", size);
                while run.more() {
                    // SAFETY: our descriptor; a buffer of IO bytes.
                    unsafe { (calls.lseek)(fd, 0, libc::SEEK_SET) };
                    let t = Instant::now();
                    let mut ops = 0u64;
                    let mut off = 0u64;
                    while off < size {
                        let n = if write {
                            buf[..8].copy_from_slice(&off.to_le_bytes());
                            // SAFETY: as above.
                            unsafe { (calls.write)(fd, buf.as_ptr().cast(), IO) }
                        } else {
                            // SAFETY: as above.
                            unsafe { (calls.read)(fd, buf.as_mut_ptr().cast(), IO) }
                        };
                        if n != IO as isize {
                            return Err(Skip::new(format!("short transfer at {off}: {n}")));
                        }
                        ops += 1;
                        off += IO as u64;
                    }
                    let el = t.elapsed();
                    if !write {
                        check_word(&buf, size - IO as u64)?;
                    }
                    record_pass(run, el, ops, write);
                }
            }
            "remap-read" => {
                let stride = stride();
                run.note("window_bytes", stride);
                while run.more() {
                    let t = Instant::now();
                    let mut ops = 0u64;
                    let mut off = 0u64;
                    while off + IO as u64 <= size {
                        // SAFETY: our descriptor; a buffer of IO bytes.
                        let n = unsafe {
                            (calls.lseek)(fd, off as off_t, libc::SEEK_SET);
                            (calls.read)(fd, buf.as_mut_ptr().cast(), IO)
                        };
                        if n != IO as isize {
                            return Err(Skip::new(format!("short read at {off}: {n}")));
                        }
                        ops += 1;
                        off += stride;
                    }
                    let el = t.elapsed();
                    check_word(&buf, off - stride)?;
                    run.record_batch(el, ops);
                }
            }
            _ => {
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                let words = (BYTE_SPAN / 8).min(size / 8);
                while run.more() {
                    let t = Instant::now();
                    let mut last = (0u64, 0u8);
                    for _ in 0..1000 {
                        let at = (next(&mut x) % words) * 8;
                        // SAFETY: our descriptor; a one-byte read into buf.
                        unsafe {
                            (calls.lseek)(fd, at as off_t, libc::SEEK_SET);
                            if (calls.read)(fd, buf.as_mut_ptr().cast(), 1) != 1 {
                                return Err(Skip::new(format!("1-byte read at {at} failed")));
                            }
                        }
                        last = (at, buf[0]);
                    }
                    let el = t.elapsed();
                    if last.1 != last.0.to_le_bytes()[0] {
                        return Err(Skip::new("the 1-byte read returned the wrong byte"));
                    }
                    run.record_batch(el, 1000);
                }
            }
        }
        Ok(())
    })();
    // SAFETY: closes our descriptor.
    unsafe { (calls.close)(fd) };
    result
}

fn emul(run: &mut Run<'_>) -> Result<(), Skip> {
    let e = env()?;
    let calls = e.lib.clone().map_err(Skip::new)?;
    run.note("window_bytes", stride());
    with_calls(run, calls)
}

fn native(run: &mut Run<'_>) -> Result<(), Skip> {
    with_calls(run, native_calls())
}

/// Segment I/O through `sg`, on a file opened through the server.
/// A segment read or write: (open file, offset, buffer, write?) → bytes.
type SegmentIo<'a> = &'a dyn Fn(u64, u64, &mut [u8], bool) -> Result<usize, i32>;

fn with_sg(run: &mut Run<'_>, sg: SegmentIo<'_>) -> Result<(), Skip> {
    if run.case.name == "open-close" {
        return Err(Skip::new("segment I/O opens no files by name"));
    }
    let e = env()?;
    let write = run.case.name == "write";
    let (name, size) = file_for(run, write);
    let flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
    let f: OpenedFile = match e.client.open(&name, flags, 0) {
        Ok(Opened::File(f)) => f,
        _ => return Err(Skip::new(format!("open {name} through the server failed"))),
    };
    let mut buf = vec![0u8; IO];
    match run.case.name {
        "seqread" | "write" => {
            run.note("file_bytes", size);
            while run.more() {
                let t = Instant::now();
                let mut ops = 0u64;
                let mut off = 0u64;
                while off < size {
                    if write {
                        buf[..8].copy_from_slice(&off.to_le_bytes());
                    }
                    let n = sg(f.id, off, &mut buf, write).map_err(|e| Skip::new(format!("segment I/O: errno {e}")))?;
                    if n != IO {
                        return Err(Skip::new(format!("short segment transfer at {off}: {n}")));
                    }
                    ops += 1;
                    off += IO as u64;
                }
                let el = t.elapsed();
                if !write {
                    check_word(&buf, size - IO as u64)?;
                }
                record_pass(run, el, ops, write);
            }
        }
        "remap-read" => {
            let stride = stride();
            while run.more() {
                let t = Instant::now();
                let mut ops = 0u64;
                let mut off = 0u64;
                while off + IO as u64 <= size {
                    let n = sg(f.id, off, &mut buf, false).map_err(|e| Skip::new(format!("segment read: errno {e}")))?;
                    if n != IO {
                        return Err(Skip::new(format!("short segment read at {off}: {n}")));
                    }
                    ops += 1;
                    off += stride;
                }
                let el = t.elapsed();
                check_word(&buf, off - stride)?;
                run.record_batch(el, ops);
            }
        }
        _ => {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let words = (BYTE_SPAN / 8).min(size / 8);
            while run.more() {
                let t = Instant::now();
                let n = 200;
                for _ in 0..n {
                    let at = (next(&mut x) % words) * 8;
                    sg(f.id, at, &mut buf[..1], false).map_err(|e| Skip::new(format!("segment read: errno {e}")))?;
                    if buf[0] != at.to_le_bytes()[0] {
                        return Err(Skip::new("the 1-byte segment read returned the wrong byte"));
                    }
                }
                run.record_batch(t.elapsed(), n);
            }
        }
    }
    Ok(())
}

fn sg_message(run: &mut Run<'_>) -> Result<(), Skip> {
    let e = env()?;
    with_sg(run, &|id, off, buf, write| if write { e.client.sg_write(id, off, buf) } else { e.client.sg_read(id, off, buf) })
}

fn sg_handler(run: &mut Run<'_>) -> Result<(), Skip> {
    let e = env()?;
    with_sg(run, &|id, off, buf, write| if write { e.handler.sg_write(id, off, buf) } else { e.handler.sg_read(id, off, buf) })
}
