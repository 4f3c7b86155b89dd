//! Wide-character stdio on the library's `FILE` objects.
//!
//! The library's streams are `fopencookie` streams, so that their reads and
//! writes reach the emulated descriptor. The C library makes such streams
//! byte-only: their wide-character state is a poison pointer, and its
//! `fgetws`, `getwc`, `fgetwc` and `ungetwc` crash on them (`rev FILE`
//! died of `SIGSEGV` under `ferry run`), while `fputws` and `fputwc` fail.
//! For a stream in that state, the functions here convert between wide
//! and multibyte characters themselves (`mbrtowc`, `wcrtomb`, in the
//! program's locale) and read and write bytes through the stream's narrow
//! functions, which reach the emulated descriptor; every other stream goes
//! to the C library's own function untouched.
//!
//! `fwprintf`, `vfwprintf` and their fortified forms (which failed there)
//! format into a wide buffer (`vswprintf`) and write it the same way. The
//! `fwscanf` family (which crashed there) scans through a stream of the C
//! library's own over the same file, put where the library's stream is,
//! and moves the library's stream to where the scan stopped. `fwprintf`
//! and `fwscanf` are variadic, which a stable Rust function cannot be: on
//! x86-64 each is a naked trampoline that builds the `va_list` of its
//! variable arguments (as a variadic C function's prologue does) and
//! calls the `v` form. Elsewhere than on x86-64 they still fail or crash
//! on such streams.
//!
//! # Safety
//! The trampolines store the argument registers in their own frame,
//! describe them in a `va_list` as the x86-64 ABI lays it out, and return
//! the called function's result; a `va_list` is only copied (its size
//! per architecture) before each use, never walked here.

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_void, size_t, wchar_t, FILE};

use crate::hooks::{fopencookie, set_errno, CookieIo};
use crate::real;

/// `WEOF`.
const WEOF: u32 = u32::MAX;
/// Where glibc's `struct _IO_FILE` keeps `_wide_data` on 64-bit Linux.
const WIDE_DATA_OFFSET: usize = 160;
/// The poison value the C library puts there for a byte-only stream.
const POISON: usize = usize::MAX;
/// Where glibc's `struct _IO_FILE` keeps `_mode` (the orientation: 0
/// none yet, -1 bytes, 1 wide) on 64-bit Linux ([`mode_layout_ok`]).
const MODE_OFFSET: usize = 192;
/// Longest multibyte character of any locale.
const MB_MAX: usize = 16;

/// `mbstate_t`: eight bytes on 64-bit glibc, all zero initially.
#[repr(C)]
#[derive(Default)]
struct MbState(u64);

extern "C" {
    fn vswprintf(s: *mut wchar_t, n: size_t, format: *const wchar_t, ap: *mut c_void) -> c_int;
    fn mbrtowc(pwc: *mut wchar_t, s: *const c_char, n: size_t, ps: *mut MbState) -> size_t;
    fn wcrtomb(s: *mut c_char, wc: wchar_t, ps: *mut MbState) -> size_t;
    pub(crate) fn flockfile(f: *mut FILE);
    pub(crate) fn funlockfile(f: *mut FILE);
}

/// Whether the running C library marks byte-only streams as this module
/// expects: a cookie stream carries the poison at [`WIDE_DATA_OFFSET`] and
/// a stream of its own a real pointer. Checked once, before any stream is
/// ever looked at there.
pub(crate) fn check_layout() -> bool {
    if cfg!(not(all(target_pointer_width = "64", target_env = "gnu"))) {
        return false;
    }
    // SAFETY: makes a cookie stream with no functions and a stream of the
    // C library's own, reads one pointer-sized field inside each (within
    // the structure's public size), and closes both.
    unsafe {
        let cookie = fopencookie(std::ptr::null_mut(), c"r".as_ptr(), CookieIo { read: None, write: None, seek: None, close: None });
        let own = real::fopen()(c"/dev/null".as_ptr(), c"r".as_ptr());
        let ok = !cookie.is_null() && !own.is_null() && wide_data(cookie) == POISON && !matches!(wide_data(own), 0 | POISON);
        if !cookie.is_null() {
            real::fclose()(cookie);
        }
        if !own.is_null() {
            real::fclose()(own);
        }
        ok
    }
}

/// The stream's `_wide_data` field.
///
/// # Safety
/// `f` is a live `FILE` of the C library, whose layout [`check_layout`]
/// confirmed.
unsafe fn wide_data(f: *mut FILE) -> usize {
    // SAFETY: the caller's promise; the field lies inside the structure.
    unsafe { *(f as *const u8).add(WIDE_DATA_OFFSET).cast::<usize>() }
}

/// The stream's `_mode` field (its orientation as the C library keeps it).
///
/// # Safety
/// `f` is a live `FILE` of the C library, whose `_mode` is where
/// [`mode_layout_ok`] looks (checked, or being checked there).
unsafe fn mode(f: *mut FILE) -> c_int {
    // SAFETY: the caller's promise; the field lies inside the structure.
    unsafe { *(f as *const u8).add(MODE_OFFSET).cast::<c_int>() }
}

/// Sets the stream's `_mode` field to 0 (no orientation) or -1 (bytes).
///
/// # Safety
/// As for [`mode`], checked, and `f` is one of the library's streams,
/// whose wide functions are this module's: the C library never sees 1
/// there.
unsafe fn set_mode(f: *mut FILE, m: c_int) {
    // SAFETY: the caller's promise; the field lies inside the structure.
    unsafe { *(f as *mut u8).add(MODE_OFFSET).cast::<c_int>() = m };
}

/// Whether [`check_layout`] confirmed the layout, checked once.
fn layout_ok() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(check_layout)
}

/// Whether the running C library keeps a stream's orientation at
/// [`MODE_OFFSET`], as [`mode`] reads it: -1 for a cookie stream, 0 for a
/// fresh stream of its own. Checked once, before any stream's orientation
/// is looked at or changed there.
fn mode_layout_ok() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        if !layout_ok() {
            return false;
        }
        // SAFETY: as in `check_layout`: two fresh streams, one int read
        // inside each (within the structure's public size), both closed.
        unsafe {
            let cookie = fopencookie(std::ptr::null_mut(), c"r".as_ptr(), CookieIo { read: None, write: None, seek: None, close: None });
            let own = real::fopen()(c"/dev/null".as_ptr(), c"r".as_ptr());
            let ok = !cookie.is_null() && !own.is_null() && mode(cookie) == -1 && mode(own) == 0;
            if !cookie.is_null() {
                real::fclose()(cookie);
            }
            if !own.is_null() {
                real::fclose()(own);
            }
            ok
        }
    })
}

/// Whether `f` is a byte-only stream the C library's wide functions
/// cannot handle: a cookie stream (the library's own, or any other
/// `fopencookie` stream), as [`check_layout`] confirmed.
pub(crate) fn byte_only(f: *mut FILE) -> bool {
    // SAFETY: a stream the program passed to a stdio function, which the
    // C library itself would read the same field of; the layout is checked.
    !f.is_null() && layout_ok() && unsafe { wide_data(f) } == POISON
}

/// The library's streams that are wide-oriented (`FILE` addresses): the
/// C library keeps such a stream's `_mode` at -1 (at 1 its own functions
/// would use the wide buffers a cookie stream does not have), so this
/// says which of those are wide. A stream leaves it when it closes or is
/// reopened ([`forget_orientation`]).
static WIDE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// Whether the orientation of `f` is followed here: a stream of the
/// library's own ([`crate::hooks::own_stream`]) on x86-64, where every wide
/// function (the variadic ones by trampolines) is this module's. Other
/// byte-only streams stay byte streams from the start, as the C library
/// makes them.
fn follows_orientation(f: *mut FILE) -> bool {
    cfg!(target_arch = "x86_64") && crate::hooks::own_stream(f) && mode_layout_ok()
}

/// Gives a stream of the library's own, just made or reopened, no
/// orientation, as the C library gives a stream it opens or reopens (a
/// cookie stream starts as a byte stream); its first narrow call makes it
/// a byte stream there, and its first wide call a wide one here.
pub(crate) fn unorient(f: *mut FILE) {
    if follows_orientation(f) {
        // A stream closed before at the same address was wide, maybe.
        forget_orientation(f);
        // SAFETY: a live stream of the library's own; layout checked.
        unsafe { set_mode(f, 0) };
    }
}

/// Forgets the orientation of `f` (closed, or reopened: `freopen` gives
/// a stream no orientation, as it does natively).
pub(crate) fn forget_orientation(f: *mut FILE) {
    WIDE.lock().unwrap_or_else(|e| e.into_inner()).retain(|&w| w != f as usize);
}

/// The orientation of `f`, one of the library's streams: 1 wide, -1
/// bytes, 0 none yet.
///
/// # Safety
/// `f` is a live stream for which [`follows_orientation`] holds.
unsafe fn orientation(f: *mut FILE) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { mode(f) } {
        0 => 0,
        _ if WIDE.lock().unwrap_or_else(|e| e.into_inner()).contains(&(f as usize)) => 1,
        _ => -1,
    }
}

/// As the C library's `_IO_fwide(f, 1)` before every wide call: a stream
/// with no orientation becomes wide, and the answer is whether the
/// stream is wide (a byte stream refuses wide calls). Streams whose
/// orientation is not followed here are always converted.
///
/// # Safety
/// `f` is a live byte-only stream.
unsafe fn orient_wide(f: *mut FILE) -> bool {
    if !follows_orientation(f) {
        return true;
    }
    // SAFETY: the caller's stream, one of the library's own.
    unsafe {
        if mode(f) == 0 {
            WIDE.lock().unwrap_or_else(|e| e.into_inner()).push(f as usize);
            // Its bytes go through the narrow functions, which must find
            // it a byte stream there.
            set_mode(f, -1);
            return true;
        }
        orientation(f) == 1
    }
}

/// `fwide(3)`: on one of the library's streams, the orientation kept
/// here.
#[no_mangle]
pub unsafe extern "C" fn fwide(f: *mut FILE, m: c_int) -> c_int {
    if byte_only(f) && follows_orientation(f) {
        // SAFETY: the caller's live stream, one of the library's own.
        unsafe {
            if m > 0 {
                return if orient_wide(f) { 1 } else { -1 };
            }
            if m < 0 && mode(f) == 0 {
                set_mode(f, -1);
            }
            return orientation(f);
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fwide()(f, m) }
}


/// Reads one character of `f` (a byte-only stream) through its narrow
/// functions.
///
/// # Safety
/// `f` is a live stream.
unsafe fn get(f: *mut FILE) -> u32 {
    let mut st = MbState::default();
    let mut got = 0usize;
    loop {
        // SAFETY: the caller's stream.
        let c = unsafe { libc::fgetc(f) };
        if c == libc::EOF {
            if got > 0 {
                // A character cut short by the end of the file.
                set_errno(libc::EILSEQ);
            }
            return WEOF;
        }
        got += 1;
        let b = c as u8 as c_char;
        let mut wc: wchar_t = 0;
        // SAFETY: one byte in, one wide character out, state of our own.
        match unsafe { mbrtowc(&mut wc, &b, 1, &mut st) } {
            n if n == usize::MAX - 1 && got < MB_MAX => continue,
            n if n >= usize::MAX - 1 => {
                set_errno(libc::EILSEQ);
                return WEOF;
            }
            _ => return wc as u32,
        }
    }
}

/// Writes one wide character to `f` (a byte-only stream) as multibyte.
///
/// # Safety
/// `f` is a live stream.
unsafe fn put(wc: wchar_t, f: *mut FILE) -> u32 {
    let mut buf = [0 as c_char; MB_MAX];
    let mut st = MbState::default();
    // SAFETY: a buffer of MB_MAX bytes, at least MB_CUR_MAX.
    let n = unsafe { wcrtomb(buf.as_mut_ptr(), wc, &mut st) };
    if n == usize::MAX {
        set_errno(libc::EILSEQ);
        return WEOF;
    }
    // SAFETY: n bytes of our buffer to the caller's stream.
    if unsafe { libc::fwrite(buf.as_ptr().cast(), 1, n, f) } != n {
        return WEOF;
    }
    wc as u32
}

macro_rules! wide_get {
    ($($name:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "(3)`: on a byte-only stream, through its narrow functions.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(f: *mut FILE) -> u32 {
            if byte_only(f) {
                // SAFETY: the caller's live stream.
                if !unsafe { orient_wide(f) } {
                    // A byte stream refuses wide calls, as natively.
                    return WEOF;
                }
                // SAFETY: the caller's stream.
                return unsafe { get(f) };
            }
            // SAFETY: the caller's argument, passed on unchanged to the C library's own function.
            unsafe { real::$name()(f) }
        }
    )*};
}

macro_rules! wide_put {
    ($($name:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "(3)`: on a byte-only stream, as multibyte through its narrow functions.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(wc: wchar_t, f: *mut FILE) -> u32 {
            if byte_only(f) {
                // SAFETY: the caller's live stream.
                if !unsafe { orient_wide(f) } {
                    // A byte stream refuses wide calls, as natively.
                    return WEOF;
                }
                // SAFETY: the caller's stream.
                return unsafe { put(wc, f) };
            }
            // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
            unsafe { real::$name()(wc, f) }
        }
    )*};
}

wide_get!(fgetwc, getwc, fgetwc_unlocked, getwc_unlocked);
wide_put!(fputwc, putwc, fputwc_unlocked, putwc_unlocked);

/// Reads a line of at most `n - 1` wide characters from a byte-only
/// stream.
///
/// # Safety
/// `buf` holds `n` wide characters; `f` is a live stream.
unsafe fn get_line(buf: *mut wchar_t, n: c_int, f: *mut FILE) -> *mut wchar_t {
    if n <= 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let mut i = 0usize;
    while i + 1 < n as usize {
        // SAFETY: the caller's stream.
        let c = unsafe { get(f) };
        if c == WEOF {
            break;
        }
        // SAFETY: i < n - 1, inside the caller's buffer.
        unsafe { *buf.add(i) = c as wchar_t };
        i += 1;
        if c == u32::from('\n') {
            break;
        }
    }
    // SAFETY: i <= n - 1.
    unsafe { *buf.add(i) = 0 };
    // SAFETY: the caller's stream.
    if i == 0 || unsafe { libc::ferror(f) } != 0 {
        return std::ptr::null_mut();
    }
    buf
}

/// `fgetws(3)`: on a byte-only stream, through its narrow functions.
#[no_mangle]
pub unsafe extern "C" fn fgetws(buf: *mut wchar_t, n: c_int, f: *mut FILE) -> *mut wchar_t {
    if byte_only(f) {
        // SAFETY: the caller's live stream.
        if !unsafe { orient_wide(f) } {
            // A byte stream refuses wide calls, as natively.
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's buffer and stream; the lock is recursive.
        unsafe {
            flockfile(f);
            let r = get_line(buf, n, f);
            funlockfile(f);
            return r;
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fgetws()(buf, n, f) }
}

/// `fgetws_unlocked(3)`.
#[no_mangle]
pub unsafe extern "C" fn fgetws_unlocked(buf: *mut wchar_t, n: c_int, f: *mut FILE) -> *mut wchar_t {
    if byte_only(f) {
        // SAFETY: the caller's live stream.
        if !unsafe { orient_wide(f) } {
            // A byte stream refuses wide calls, as natively.
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's buffer and stream.
        return unsafe { get_line(buf, n, f) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fgetws_unlocked()(buf, n, f) }
}

/// Writes a NUL-terminated wide string to a byte-only stream.
///
/// # Safety
/// `s` is NUL-terminated; `f` is a live stream.
unsafe fn put_str(s: *const wchar_t, f: *mut FILE) -> c_int {
    let mut p = s;
    // SAFETY: walks the caller's string up to its NUL.
    unsafe {
        while *p != 0 {
            if put(*p, f) == WEOF {
                return libc::EOF;
            }
            p = p.add(1);
        }
    }
    1
}

/// `fputws(3)`: on a byte-only stream, as multibyte through its narrow
/// functions.
#[no_mangle]
pub unsafe extern "C" fn fputws(s: *const wchar_t, f: *mut FILE) -> c_int {
    if byte_only(f) {
        // SAFETY: the caller's live stream.
        if !unsafe { orient_wide(f) } {
            // A byte stream refuses wide calls, as natively.
            return libc::EOF;
        }
        // SAFETY: the caller's string and stream; the lock is recursive.
        unsafe {
            flockfile(f);
            let r = put_str(s, f);
            funlockfile(f);
            return r;
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fputws()(s, f) }
}

/// `fputws_unlocked(3)`.
#[no_mangle]
pub unsafe extern "C" fn fputws_unlocked(s: *const wchar_t, f: *mut FILE) -> c_int {
    if byte_only(f) {
        // SAFETY: the caller's live stream.
        if !unsafe { orient_wide(f) } {
            // A byte stream refuses wide calls, as natively.
            return libc::EOF;
        }
        // SAFETY: the caller's string and stream.
        return unsafe { put_str(s, f) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::fputws_unlocked()(s, f) }
}

/// `ungetwc(3)`: on a byte-only stream, the character's bytes are pushed
/// back in reverse order (the stream backs up over what it just read).
#[no_mangle]
pub unsafe extern "C" fn ungetwc(wc: u32, f: *mut FILE) -> u32 {
    if byte_only(f) {
        // As natively, the stream becomes wide if it was neither (a byte
        // stream takes the character back all the same).
        // SAFETY: the caller's live stream.
        unsafe { orient_wide(f) };
        if wc == WEOF {
            return WEOF;
        }
        let mut buf = [0 as c_char; MB_MAX];
        let mut st = MbState::default();
        // SAFETY: a buffer of MB_MAX bytes, at least MB_CUR_MAX.
        let n = unsafe { wcrtomb(buf.as_mut_ptr(), wc as wchar_t, &mut st) };
        if n == usize::MAX {
            set_errno(libc::EILSEQ);
            return WEOF;
        }
        for b in buf[..n].iter().rev() {
            // SAFETY: the caller's stream.
            if unsafe { libc::ungetc(*b as u8 as c_int, f) } == libc::EOF {
                return WEOF;
            }
        }
        return wc;
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::ungetwc()(wc, f) }
}

/// `__fgetws_chk`: `fgetws` as fortified programs call it, with the
/// buffer's size in wide characters.
#[no_mangle]
pub unsafe extern "C" fn __fgetws_chk(buf: *mut wchar_t, size: size_t, n: c_int, f: *mut FILE) -> *mut wchar_t {
    if byte_only(f) {
        // SAFETY: the caller's live stream.
        if !unsafe { orient_wide(f) } {
            // A byte stream refuses wide calls, as natively.
            return std::ptr::null_mut();
        }
        if n > 0 && n as usize > size {
            // What the C library's check does: the caller overflows.
            // SAFETY: ends the process.
            unsafe { libc::abort() };
        }
        // SAFETY: the caller's buffer (checked above) and stream.
        unsafe {
            flockfile(f);
            let r = get_line(buf, n, f);
            funlockfile(f);
            return r;
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::__fgetws_chk()(buf, size, n, f) }
}

/// Bytes of a `va_list` as a callee receives it (x86-64: the one-element
/// array `__va_list_tag[1]`, passed as a pointer to it; AArch64: a 32-byte
/// structure, passed by reference): what a copy (`va_copy`) copies.
#[cfg(target_arch = "x86_64")]
const VA_LIST_BYTES: usize = 24;
#[cfg(target_arch = "aarch64")]
const VA_LIST_BYTES: usize = 32;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const VA_LIST_BYTES: usize = 0;

/// Most wide characters one formatted write may make here.
const FORMAT_MAX: usize = 64 << 20;

/// `format` with the arguments `ap` describes, formatted by `vswprintf`
/// into a buffer grown until it fits (each try on a fresh copy of `ap`).
///
/// # Safety
/// `format` is a NUL-terminated wide string and `ap` a `va_list` holding
/// the arguments it asks for.
unsafe fn format_wide(format: *const wchar_t, ap: *mut c_void) -> Result<Vec<wchar_t>, i32> {
    if VA_LIST_BYTES == 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut cap = 512usize;
    loop {
        let mut buf: Vec<wchar_t> = vec![0; cap];
        let mut copy = [0u64; 4];
        // SAFETY: copies the caller's va_list (VA_LIST_BYTES <= 32 bytes)
        // into our aligned buffer: `va_copy`, for this architecture.
        unsafe { std::ptr::copy_nonoverlapping(ap.cast::<u8>(), copy.as_mut_ptr().cast::<u8>(), VA_LIST_BYTES) };
        // SAFETY: a buffer of cap wide characters; the caller's format and
        // arguments.
        let n = unsafe { vswprintf(buf.as_mut_ptr(), cap, format, copy.as_mut_ptr().cast()) };
        if n >= 0 {
            buf.truncate(n as usize);
            buf.push(0);
            return Ok(buf);
        }
        // -1: too small, or a character with no wide form; the second
        // stays -1 at any size.
        if cap >= FORMAT_MAX {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EOVERFLOW));
        }
        cap *= 4;
    }
}

/// `vfwprintf` on a byte-only stream: formatted, then written as
/// multibyte through the stream's narrow functions. Returns the wide
/// characters written, or -1.
///
/// # Safety
/// As [`format_wide`]; `f` is a live stream.
unsafe fn print_wide(f: *mut FILE, format: *const wchar_t, ap: *mut c_void) -> c_int {
    // SAFETY: the caller's format and arguments.
    match unsafe { format_wide(format, ap) } {
        Ok(buf) => {
            // SAFETY: a NUL-terminated string of ours; the caller's stream.
            let r = unsafe {
                flockfile(f);
                let r = put_str(buf.as_ptr(), f);
                funlockfile(f);
                r
            };
            if r == libc::EOF {
                -1
            } else {
                (buf.len() - 1) as c_int
            }
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `vfwprintf(3)`: on a byte-only stream, formatted here and written as
/// multibyte through its narrow functions.
#[no_mangle]
pub unsafe extern "C" fn vfwprintf(f: *mut FILE, format: *const wchar_t, ap: *mut c_void) -> c_int {
    if byte_only(f) {
        // SAFETY: the caller's live stream.
        if !unsafe { orient_wide(f) } {
            // A byte stream refuses wide calls, as natively.
            return -1;
        }
        // SAFETY: the caller's arguments.
        return unsafe { print_wide(f, format, ap) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::vfwprintf()(f, format, ap) }
}

/// `__vfwprintf_chk`: `vfwprintf` as fortified programs call it.
#[no_mangle]
pub unsafe extern "C" fn __vfwprintf_chk(f: *mut FILE, flag: c_int, format: *const wchar_t, ap: *mut c_void) -> c_int {
    if byte_only(f) {
        // SAFETY: the caller's live stream.
        if !unsafe { orient_wide(f) } {
            // A byte stream refuses wide calls, as natively.
            return -1;
        }
        // SAFETY: the caller's arguments.
        return unsafe { print_wide(f, format, ap) };
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::__vfwprintf_chk()(f, flag, format, ap) }
}

/// The streams of the C library's own that `fwscanf` scans through, by
/// the library's stream they scan for (`FILE` addresses), with the file
/// each reads (device and inode). Each is kept until its stream closes
/// ([`forget_scanner`]): closing its descriptor would drop the process's
/// POSIX record locks on the file, which natively last until the stream's
/// own descriptor closes.
static SCANNERS: std::sync::Mutex<Vec<Scanner>> = std::sync::Mutex::new(Vec::new());

/// One entry of [`SCANNERS`]: the program's stream, the library's stream
/// scanning it, and the file it reads (device and inode).
type Scanner = (usize, usize, (u64, u64));

/// The device and inode of descriptor `fd`.
fn identity(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: a descriptor number the caller holds open, borrowed for one fstat.
    let st = rustix::fs::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// Closes the stream `fwscanf` kept for the library's stream `f`, if any,
/// as `f` closes.
pub(crate) fn forget_scanner(f: *mut FILE) {
    let mut all = SCANNERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = all.iter().position(|s| s.0 == f as usize) {
        let (_, rf, _) = all.swap_remove(i);
        drop(all);
        // SAFETY: a stream of the C library's own that only this table held.
        unsafe { real::fclose()(rf as *mut FILE) };
    }
}

/// A stream of the C library's own reading the file of descriptor `fd`
/// (the library's stream `f`'s): the one kept for `f` if it still reads
/// that file, else a new one (through `/proc/self/fd`, as the kernel
/// opens it). Null when none can be made. Hand it back with
/// [`keep_scanner`].
///
/// # Safety
/// `f` is a live stream of the library whose descriptor is `fd`.
unsafe fn take_scanner(f: *mut FILE, fd: c_int) -> (*mut FILE, Option<(u64, u64)>) {
    let id = identity(fd);
    let kept = {
        let mut all = SCANNERS.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().position(|s| s.0 == f as usize).map(|i| all.swap_remove(i))
    };
    if let Some((_, rf, was)) = kept {
        if id.is_some() && Some(was) == id {
            return (rf as *mut FILE, id);
        }
        // The stream's descriptor is another file's now (`freopen`, `dup2`
        // onto it): that file's scanner goes, as its descriptor would
        // have natively.
        // SAFETY: a stream of the C library's own that only the table held.
        unsafe { real::fclose()(rf as *mut FILE) };
    }
    let path = format!("/proc/self/fd/{fd}\0");
    // SAFETY: a NUL-terminated name; the C library's own calls.
    unsafe {
        let rfd = real::open()(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC, 0);
        if rfd < 0 {
            return (std::ptr::null_mut(), None);
        }
        let rf = real::fdopen()(rfd, c"r".as_ptr());
        if rf.is_null() {
            real::close()(rfd);
            return (rf, None);
        }
        (rf, identity(rfd))
    }
}

/// Keeps `rf`, reading the file `id`, as the scanner of the library's
/// stream `f` until `f` closes.
fn keep_scanner(f: *mut FILE, rf: *mut FILE, id: Option<(u64, u64)>) {
    match id {
        Some(id) => SCANNERS.lock().unwrap_or_else(|e| e.into_inner()).push((f as usize, rf as usize, id)),
        None => {
            // SAFETY: a stream of the C library's own nobody else holds.
            unsafe { real::fclose()(rf) };
        }
    }
}

/// `vfwscanf` on a byte-only stream, through a stream of the C library's
/// own over the same file: the library's stream is flushed (its offset is
/// then the next unread byte), a second, real stream on the file (through
/// `/proc/self/fd`, as the kernel opens it) is put there and scanned by
/// the C library's own function, and the library's stream is moved to
/// where the scan stopped. The second stream is kept until the library's
/// closes ([`SCANNERS`]): closed after each scan, it closed a descriptor
/// of the file, which drops the process's POSIX record locks on it. A
/// stream that cannot read fails as the C library's does (`EBADF`).
///
/// # Safety
/// `f` is a live byte-only stream; `format` and `ap` as for `vfwscanf`.
unsafe fn scan_wide(f: *mut FILE, format: *const wchar_t, ap: *mut c_void, isoc99: bool) -> c_int {
    const IO_NO_READS: c_int = 0x4;
    // SAFETY: the caller's stream, its first field the flags (checked
    // layout: `byte_only`); the C library's functions on it.
    unsafe {
        if *(f as *const c_int) & IO_NO_READS != 0 {
            set_errno(libc::EBADF);
            return libc::EOF;
        }
        flockfile(f);
        let r = (|| {
            if libc::fflush(f) != 0 {
                return libc::EOF;
            }
            let pos = libc::ftello(f);
            let fd = real::fileno()(f);
            if pos < 0 || fd < 0 {
                return libc::EOF;
            }
            let (rf, id) = take_scanner(f, fd);
            if rf.is_null() {
                return libc::EOF;
            }
            libc::clearerr(rf);
            let mut n = libc::EOF;
            if libc::fseeko(rf, pos, libc::SEEK_SET) == 0 {
                n = if isoc99 { real::__isoc99_vfwscanf()(rf, format, ap) } else { real::vfwscanf()(rf, format, ap) };
                let end = libc::ftello(rf);
                let at_end = libc::feof(rf) != 0;
                let e = *libc::__errno_location();
                if end >= 0 {
                    libc::fseeko(f, end, libc::SEEK_SET);
                }
                if at_end {
                    // The scan met the end: so does the library's stream
                    // (its end-of-file indicator is set by a read there).
                    let c = libc::fgetc(f);
                    if c != libc::EOF {
                        libc::ungetc(c, f);
                    }
                }
                set_errno(e);
            }
            keep_scanner(f, rf, id);
            n
        })();
        funlockfile(f);
        r
    }
}

macro_rules! wide_vscan {
    ($($name:ident, $isoc99:expr);*) => {$(
        #[doc = concat!("`", stringify!($name), "(3)`: on a byte-only stream, through a stream of the C library's own over the same file.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(f: *mut FILE, format: *const wchar_t, ap: *mut c_void) -> c_int {
            if byte_only(f) {
                // SAFETY: the caller's live stream.
                if !unsafe { orient_wide(f) } {
                    // A byte stream refuses wide calls, as natively.
                    return libc::EOF;
                }
                // SAFETY: the caller's arguments.
                return unsafe { scan_wide(f, format, ap, $isoc99) };
            }
            // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
            unsafe { real::$name()(f, format, ap) }
        }
    )*};
}

wide_vscan!(vfwscanf, false; __isoc99_vfwscanf, true);

/// `fwscanf` with its variable arguments as a `va_list`.
unsafe extern "C" fn fwscanf_v(f: *mut FILE, format: *const wchar_t, ap: *mut c_void) -> c_int {
    // SAFETY: the trampoline's arguments, the caller's.
    unsafe { vfwscanf(f, format, ap) }
}

/// `__isoc99_fwscanf` with its variable arguments as a `va_list`.
unsafe extern "C" fn isoc99_fwscanf_v(f: *mut FILE, format: *const wchar_t, ap: *mut c_void) -> c_int {
    // SAFETY: the trampoline's arguments, the caller's.
    unsafe { __isoc99_vfwscanf(f, format, ap) }
}

/// `fwprintf` with its variable arguments as a `va_list`.
unsafe extern "C" fn fwprintf_v(f: *mut FILE, format: *const wchar_t, ap: *mut c_void) -> c_int {
    // SAFETY: the trampoline's arguments, the caller's.
    unsafe { vfwprintf(f, format, ap) }
}

/// `__fwprintf_chk` with its variable arguments as a `va_list`.
unsafe extern "C" fn fwprintf_chk_v(f: *mut FILE, flag: c_int, format: *const wchar_t, ap: *mut c_void) -> c_int {
    // SAFETY: the trampoline's arguments, the caller's.
    unsafe { __vfwprintf_chk(f, flag, format, ap) }
}

/// Defines a variadic printing function with `$named` named integer
/// arguments as a trampoline that builds the `va_list` of the rest and
/// calls `$target` with the named arguments and a pointer to it (in
/// `$ap`, the next argument register). Frame: the six integer argument
/// registers at 0, the eight vector ones at 48, the `va_list` at 176
/// (offset of the next integer and vector argument in the save area, the
/// caller's stack arguments, the save area); 200 bytes keep the stack
/// 16-byte aligned for the call.
macro_rules! va_trampoline {
    ($name:ident, $named:expr, $ap:literal, $target:ident) => {
        #[doc = concat!("`", stringify!($name), "(3)`: through its `v` form, which serves the library's byte-only streams.")]
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "sub rsp, 200",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "movdqu [rsp + 48], xmm0",
                "movdqu [rsp + 64], xmm1",
                "movdqu [rsp + 80], xmm2",
                "movdqu [rsp + 96], xmm3",
                "movdqu [rsp + 112], xmm4",
                "movdqu [rsp + 128], xmm5",
                "movdqu [rsp + 144], xmm6",
                "movdqu [rsp + 160], xmm7",
                "mov dword ptr [rsp + 176], {gp}",
                "mov dword ptr [rsp + 180], 48",
                "lea rax, [rsp + 208]",
                "mov [rsp + 184], rax",
                "mov [rsp + 192], rsp",
                concat!("lea ", $ap, ", [rsp + 176]"),
                "call {target}",
                "add rsp, 200",
                "ret",
                gp = const 8 * $named,
                target = sym $target,
            )
        }
    };
}

va_trampoline!(fwprintf, 2, "rdx", fwprintf_v);
va_trampoline!(fwscanf, 2, "rdx", fwscanf_v);
va_trampoline!(__isoc99_fwscanf, 2, "rdx", isoc99_fwscanf_v);
va_trampoline!(__fwprintf_chk, 3, "rcx", fwprintf_chk_v);
