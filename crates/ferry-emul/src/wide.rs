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
//! Not covered: `fwprintf`, `vfwprintf` and `fwscanf` on such streams.
//! `fwprintf` and `fwscanf` are variadic, which stable Rust cannot define,
//! and `vfwprintf` takes a C `va_list`, which it cannot pass on portably,
//! so they still crash there as before (no program on a Debian
//! system was found using them on files; `rev`, `column`, `colrm`,
//! `colcrt`, `ul` and `gold` use the functions here).

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, size_t, wchar_t, FILE};

use crate::hooks::{fopencookie, set_errno, CookieIo};
use crate::real;

/// `WEOF`.
const WEOF: u32 = u32::MAX;
/// Where glibc's `struct _IO_FILE` keeps `_wide_data` on 64-bit Linux.
const WIDE_DATA_OFFSET: usize = 160;
/// The poison value the C library puts there for a byte-only stream.
const POISON: usize = usize::MAX;
/// Longest multibyte character of any locale.
const MB_MAX: usize = 16;

/// `mbstate_t`: eight bytes on 64-bit glibc, all zero initially.
#[repr(C)]
#[derive(Default)]
struct MbState(u64);

extern "C" {
    fn mbrtowc(pwc: *mut wchar_t, s: *const c_char, n: size_t, ps: *mut MbState) -> size_t;
    fn wcrtomb(s: *mut c_char, wc: wchar_t, ps: *mut MbState) -> size_t;
    fn flockfile(f: *mut FILE);
    fn funlockfile(f: *mut FILE);
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

/// Whether `f` is a byte-only stream the C library's wide functions
/// cannot handle: a cookie stream (the library's own, or any other
/// `fopencookie` stream), as [`check_layout`] confirmed.
pub(crate) fn byte_only(f: *mut FILE) -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: a stream the program passed to a stdio function, which the
    // C library itself would read the same field of; the layout is checked.
    !f.is_null() && *OK.get_or_init(check_layout) && unsafe { wide_data(f) } == POISON
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
