//! Programs the C library starts through its own internal calls, which no
//! preload library sees: `system` and `popen` (an internal `posix_spawn`),
//! and the variadic `execl`, `execle` and `execlp` (an internal `execve`).
//! Before each, as before `execve`, every emulated descriptor the new
//! program inherits hands its open file's offset to the kernel
//! (`hooks::before_exec`); without it the new program read and wrote at
//! the kernel's stale offset: `system("echo x >&4")` wrote over the data
//! at the start of the file instead of after what the caller had written.
//!
//! `system` and `popen` are plain functions. The `execl` family is
//! variadic, which a stable Rust function cannot be; each is a naked
//! trampoline that keeps the caller's argument registers (the variable
//! arguments past them stay on the caller's stack, untouched), calls
//! [`prepare`], and jumps to the C library's own function with everything
//! as the caller left it. On architectures other than x86-64 the `execl`
//! family is not caught (see docs/emulation.md).
//!
//! # Safety
//! The trampolines touch only the argument registers they restore and the
//! stack below the caller's frame, and call [`prepare`] with the stack
//! aligned as the ABI requires; `system` and `popen` pass the caller's
//! arguments on unchanged.

use libc::{c_char, c_int, FILE};

use crate::real;

/// Which of the variadic functions a trampoline stands for.
const EXECL: u32 = 0;
const EXECLE: u32 = 1;
const EXECLP: u32 = 2;

/// Hands the inherited descriptors' offsets to the kernel and returns the
/// address of the C library's own `execl`, `execle` or `execlp`.
extern "C" fn prepare(which: u32) -> usize {
    crate::hooks::before_exec(false);
    match which {
        EXECL => real::execl() as usize,
        EXECLE => real::execle() as usize,
        _ => real::execlp() as usize,
    }
}

/// Defines a variadic C function as a trampoline through [`prepare`].
macro_rules! trampoline {
    ($name:ident, $which:expr, $doc:literal) => {
        #[doc = $doc]
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            // Six argument registers and %al (the count of vector
            // registers a variadic call passes) are kept; seven pushes
            // after the return address leave the stack 16-byte aligned
            // for the call.
            core::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "mov edi, {which}",
                "call {prepare}",
                "mov r11, rax",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "jmp r11",
                which = const $which,
                prepare = sym prepare,
            )
        }
    };
}

trampoline!(execl, EXECL, "`execl(3)`: the inherited descriptors' offsets go to the kernel first.");
trampoline!(execle, EXECLE, "`execle(3)`: the inherited descriptors' offsets go to the kernel first.");
trampoline!(execlp, EXECLP, "`execlp(3)`: the inherited descriptors' offsets go to the kernel first.");

/// `system(3)`: the inherited descriptors' offsets go to the kernel first.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    if !command.is_null() {
        crate::hooks::before_exec(false);
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::system()(command) }
}

/// `popen(3)`: the inherited descriptors' offsets go to the kernel first.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    crate::hooks::before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::popen()(command, mode) }
}
