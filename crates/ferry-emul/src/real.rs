//! The C library's own functions, found with `dlsym(RTLD_NEXT)` on first
//! use, for everything the library passes through.
//!
//! Variadic C functions (`open`, `openat`, `fcntl`) are called through a
//! fixed signature with the optional argument always present: on the
//! x86-64 and AArch64 Linux calling conventions the optional integer
//! argument travels in the same register either way, and the callee reads
//! it only when the flags say it is there.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_uint, c_ulong, c_void, mode_t, off_t, size_t, ssize_t, FILE};

fn lookup(name: &'static str, slot: &AtomicUsize) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `name` is a NUL-terminated literal (the macro appends the
    // NUL); dlsym only reads it and returns an address or null.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if p == 0 {
        // Without the C library's own function there is nothing to pass
        // the call on to: stop loudly rather than misbehave.
        let msg = b"ferry-emul: a C library function is missing\n";
        // SAFETY: writes a static buffer to standard error, then ends the
        // process; neither touches Rust state.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! real_fns {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        $(
            #[allow(non_snake_case, dead_code)]
            pub fn $name() -> unsafe extern "C" fn($($arg),*) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = lookup(concat!(stringify!($name), "\0"), &SLOT);
                // SAFETY: `p` is the address of the C library's function of
                // this name, whose C signature is the one written here.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(p) }
            }
        )*
    };
}

real_fns! {
    longjmp: fn(*mut c_void, c_int) -> ();
    _longjmp: fn(*mut c_void, c_int) -> ();
    siglongjmp: fn(*mut c_void, c_int) -> ();
    __longjmp_chk: fn(*mut c_void, c_int) -> ();
    open: fn(*const c_char, c_int, c_uint) -> c_int;
    open64: fn(*const c_char, c_int, c_uint) -> c_int;
    __open_2: fn(*const c_char, c_int) -> c_int;
    __open64_2: fn(*const c_char, c_int) -> c_int;
    openat: fn(c_int, *const c_char, c_int, c_uint) -> c_int;
    openat64: fn(c_int, *const c_char, c_int, c_uint) -> c_int;
    __openat_2: fn(c_int, *const c_char, c_int) -> c_int;
    __openat64_2: fn(c_int, *const c_char, c_int) -> c_int;
    creat: fn(*const c_char, mode_t) -> c_int;
    creat64: fn(*const c_char, mode_t) -> c_int;
    fopen: fn(*const c_char, *const c_char) -> *mut FILE;
    fopen64: fn(*const c_char, *const c_char) -> *mut FILE;
    fdopen: fn(c_int, *const c_char) -> *mut FILE;
    fclose: fn(*mut FILE) -> c_int;
    ioctl: fn(c_int, c_ulong, *mut c_void) -> c_int;
    freopen: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    freopen64: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    fgetwc: fn(*mut FILE) -> u32;
    getwc: fn(*mut FILE) -> u32;
    fgetwc_unlocked: fn(*mut FILE) -> u32;
    getwc_unlocked: fn(*mut FILE) -> u32;
    fputwc: fn(libc::wchar_t, *mut FILE) -> u32;
    putwc: fn(libc::wchar_t, *mut FILE) -> u32;
    fputwc_unlocked: fn(libc::wchar_t, *mut FILE) -> u32;
    putwc_unlocked: fn(libc::wchar_t, *mut FILE) -> u32;
    fgetws: fn(*mut libc::wchar_t, c_int, *mut FILE) -> *mut libc::wchar_t;
    fgetws_unlocked: fn(*mut libc::wchar_t, c_int, *mut FILE) -> *mut libc::wchar_t;
    fputws: fn(*const libc::wchar_t, *mut FILE) -> c_int;
    fputws_unlocked: fn(*const libc::wchar_t, *mut FILE) -> c_int;
    ungetwc: fn(u32, *mut FILE) -> u32;
    fwide: fn(*mut FILE, c_int) -> c_int;
    __fgetws_chk: fn(*mut libc::wchar_t, size_t, c_int, *mut FILE) -> *mut libc::wchar_t;
    vfwprintf: fn(*mut FILE, *const libc::wchar_t, *mut c_void) -> c_int;
    __vfwprintf_chk: fn(*mut FILE, c_int, *const libc::wchar_t, *mut c_void) -> c_int;
    vfwscanf: fn(*mut FILE, *const libc::wchar_t, *mut c_void) -> c_int;
    __isoc99_vfwscanf: fn(*mut FILE, *const libc::wchar_t, *mut c_void) -> c_int;
    fwscanf: fn() -> c_int;
    __isoc99_fwscanf: fn() -> c_int;
    fileno: fn(*mut FILE) -> c_int;
    fseek: fn(*mut FILE, libc::c_long, c_int) -> c_int;
    fseeko: fn(*mut FILE, off_t, c_int) -> c_int;
    fseeko64: fn(*mut FILE, off_t, c_int) -> c_int;
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    __read_chk: fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;
    pread: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    pread64: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    __pread_chk: fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
    __pread64_chk: fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    pwrite: fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    pwrite64: fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    readv: fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    preadv: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    preadv64: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    pwritev: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    pwritev64: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    preadv2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    preadv64v2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    pwritev2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    pwritev64v2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    lseek: fn(c_int, off_t, c_int) -> off_t;
    lseek64: fn(c_int, off_t, c_int) -> off_t;
    ftruncate: fn(c_int, off_t) -> c_int;
    ftruncate64: fn(c_int, off_t) -> c_int;
    truncate: fn(*const c_char, off_t) -> c_int;
    truncate64: fn(*const c_char, off_t) -> c_int;
    fsync: fn(c_int) -> c_int;
    flock: fn(c_int, c_int) -> c_int;
    fdatasync: fn(c_int) -> c_int;
    close: fn(c_int) -> c_int;
    close_range: fn(c_uint, c_uint, c_int) -> c_int;
    syscall: fn(libc::c_long, libc::c_long, libc::c_long, libc::c_long, libc::c_long, libc::c_long, libc::c_long) -> libc::c_long;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    fcntl: fn(c_int, c_int, c_ulong) -> c_int;
    fcntl64: fn(c_int, c_int, c_ulong) -> c_int;
    lockf: fn(c_int, c_int, off_t) -> c_int;
    lockf64: fn(c_int, c_int, off_t) -> c_int;
    copy_file_range: fn(c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t;
    sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    sendfile64: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    splice: fn(c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t;
    stat: fn(*const c_char, *mut libc::stat) -> c_int;
    stat64: fn(*const c_char, *mut libc::stat) -> c_int;
    lstat: fn(*const c_char, *mut libc::stat) -> c_int;
    lstat64: fn(*const c_char, *mut libc::stat) -> c_int;
    fstatat: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
    fstatat64: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
    unlink: fn(*const c_char) -> c_int;
    unlinkat: fn(c_int, *const c_char, c_int) -> c_int;
    linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int;
    rmdir: fn(*const c_char) -> c_int;
    rename: fn(*const c_char, *const c_char) -> c_int;
    renameat: fn(c_int, *const c_char, c_int, *const c_char) -> c_int;
    renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int;
    mkdir: fn(*const c_char, mode_t) -> c_int;
    mkdirat: fn(c_int, *const c_char, mode_t) -> c_int;
    chroot: fn(*const c_char) -> c_int;
    unshare: fn(c_int) -> c_int;
    setns: fn(c_int, c_int) -> c_int;
    execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    sendmsg: fn(c_int, *const libc::msghdr, c_int) -> ssize_t;
    sendmmsg: fn(c_int, *mut libc::mmsghdr, c_uint, c_int) -> c_int;
    execv: fn(*const c_char, *const *const c_char) -> c_int;
    execvp: fn(*const c_char, *const *const c_char) -> c_int;
    execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int;
    opendir: fn(*const c_char) -> *mut libc::DIR;
    pipe: fn(*mut c_int) -> c_int;
    pipe2: fn(*mut c_int, c_int) -> c_int;
    socket: fn(c_int, c_int, c_int) -> c_int;
    epoll_create: fn(c_int) -> c_int;
    epoll_create1: fn(c_int) -> c_int;
    eventfd: fn(c_uint, c_int) -> c_int;
    memfd_create: fn(*const c_char, c_uint) -> c_int;
    inotify_init: fn() -> c_int;
    inotify_init1: fn(c_int) -> c_int;
    timerfd_create: fn(c_int, c_int) -> c_int;
    signalfd: fn(c_int, *const libc::sigset_t, c_int) -> c_int;
    mkstemp: fn(*mut c_char) -> c_int;
    mkstemp64: fn(*mut c_char) -> c_int;
    mkostemp: fn(*mut c_char, c_int) -> c_int;
    mkostemp64: fn(*mut c_char, c_int) -> c_int;
    mkstemps: fn(*mut c_char, c_int) -> c_int;
    mkstemps64: fn(*mut c_char, c_int) -> c_int;
    mkostemps: fn(*mut c_char, c_int, c_int) -> c_int;
    mkostemps64: fn(*mut c_char, c_int, c_int) -> c_int;
    tmpfile: fn() -> *mut FILE;
    tmpfile64: fn() -> *mut FILE;
    socketpair: fn(c_int, c_int, c_int, *mut c_int) -> c_int;
    accept: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;
    accept4: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t, c_int) -> c_int;
    fork: fn() -> libc::pid_t;
    execl: fn() -> c_int;
    execle: fn() -> c_int;
    execlp: fn() -> c_int;
    dprintf: fn() -> c_int;
    vdprintf: fn(c_int, *const c_char, *mut c_void) -> c_int;
    system: fn(*const c_char) -> c_int;
    popen: fn(*const c_char, *const c_char) -> *mut FILE;
    waitpid: fn(libc::pid_t, *mut c_int, c_int) -> libc::pid_t;
    wait: fn(*mut c_int) -> libc::pid_t;
    wait3: fn(*mut c_int, c_int, *mut libc::rusage) -> libc::pid_t;
    wait4: fn(libc::pid_t, *mut c_int, c_int, *mut libc::rusage) -> libc::pid_t;
    waitid: fn(libc::idtype_t, libc::id_t, *mut libc::siginfo_t, c_int) -> c_int;
    pclose: fn(*mut FILE) -> c_int;
    posix_spawn: fn(*mut libc::pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int;
    posix_spawnp: fn(*mut libc::pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int;
}

/// Finds the jumps when the library is loaded: they are called from
/// signal handlers, where looking a function up (`dlsym`, which takes the
/// loader's lock) is not safe.
extern "C" fn find_jumps() {
    longjmp();
    _longjmp();
    siglongjmp();
    __longjmp_chk();
}

#[used]
#[link_section = ".init_array"]
static FIND_JUMPS: extern "C" fn() = find_jumps;

/// Finds the `wait` calls when the library is loaded: programs reap their
/// children in `SIGCHLD` handlers, where looking a function up is not
/// safe (see [`find_jumps`]).
extern "C" fn find_waits() {
    waitpid();
    wait();
    wait3();
    wait4();
    waitid();
}

#[used]
#[link_section = ".init_array"]
static FIND_WAITS: extern "C" fn() = find_waits;
