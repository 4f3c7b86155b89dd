//! Calls whose work the C library does with its own internal calls, which
//! no preload library sees: `system` and `popen` (an internal
//! `posix_spawn`), the variadic `execl`, `execle` and `execlp` (an internal
//! `execve`), and `dprintf` and `vdprintf` (an internal `write`). Before
//! each program start, as before `execve`, every emulated descriptor the
//! new program inherits hands its open file's offset to the kernel
//! (`hooks::before_exec`); without it the new program read and wrote at
//! the kernel's stale offset: `system("echo x >&4")` wrote over the data
//! at the start of the file instead of after what the caller had written.
//! `dprintf` to an emulated descriptor hands that descriptor's offset to
//! the kernel the same way, so its write lands where the program's own
//! writes left off (it wrote at the kernel's stale offset).
//!
//! `system` and `popen` are plain functions. The `execl` family is
//! and `dprintf` are variadic, which a stable Rust function cannot be; each
//! is a naked trampoline that keeps the caller's argument registers (the
//! variable arguments past them stay on the caller's stack, untouched),
//! calls [`prepare`] with its first argument, and jumps to the C library's
//! own function with everything as the caller left it. On architectures
//! other than x86-64 they are not caught (see docs/emulation.md).
//!
//! # Safety
//! The trampolines touch only the argument registers they restore and the
//! stack below the caller's frame, and call [`prepare`] with the stack
//! aligned as the ABI requires; `system` and `popen` pass the caller's
//! arguments on unchanged.

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_void, FILE};

use crate::real;

/// Which of the variadic functions a trampoline stands for.
const EXECL: u32 = 0;
const EXECLE: u32 = 1;
const EXECLP: u32 = 2;
const DPRINTF: u32 = 3;

/// Readies the call (`first` is the caller's first argument: the
/// descriptor for `dprintf`) and returns the address of the C library's
/// own function.
extern "C" fn prepare(which: u32, first: usize) -> usize {
    match which {
        EXECL => {
            crate::hooks::before_exec(false);
            real::execl() as usize
        }
        EXECLE => {
            crate::hooks::before_exec(false);
            real::execle() as usize
        }
        EXECLP => {
            crate::hooks::before_exec(false);
            real::execlp() as usize
        }
        _ => {
            to_kernel(first as c_int);
            real::dprintf() as usize
        }
    }
}

/// Hands the offset of the open file behind `fd`, if emulated, to the
/// kernel, whose offset the C library's internal `write` uses.
fn to_kernel(fd: c_int) {
    if let Some(f) = crate::state::get(fd) {
        if let Some(_b) = crate::state::enter() {
            f.hand_offset_to_kernel();
        }
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
            // The six integer argument registers, %al (the count of
            // vector registers a variadic call passes) and the eight
            // vector argument registers (`dprintf("%f", x)`) are kept;
            // seven pushes after the return address and 128 bytes leave
            // the stack 16-byte aligned for the call.
            core::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "sub rsp, 128",
                "movdqu [rsp], xmm0",
                "movdqu [rsp + 16], xmm1",
                "movdqu [rsp + 32], xmm2",
                "movdqu [rsp + 48], xmm3",
                "movdqu [rsp + 64], xmm4",
                "movdqu [rsp + 80], xmm5",
                "movdqu [rsp + 96], xmm6",
                "movdqu [rsp + 112], xmm7",
                "mov rsi, rdi",
                "mov edi, {which}",
                "call {prepare}",
                "mov r11, rax",
                "movdqu xmm0, [rsp]",
                "movdqu xmm1, [rsp + 16]",
                "movdqu xmm2, [rsp + 32]",
                "movdqu xmm3, [rsp + 48]",
                "movdqu xmm4, [rsp + 64]",
                "movdqu xmm5, [rsp + 80]",
                "movdqu xmm6, [rsp + 96]",
                "movdqu xmm7, [rsp + 112]",
                "add rsp, 128",
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
trampoline!(dprintf, DPRINTF, "`dprintf(3)`: an emulated descriptor's offset goes to the kernel first.");

/// `vdprintf(3)`: an emulated descriptor's offset goes to the kernel first.
/// (`va_list` is passed as a pointer on x86-64, and by reference on
/// AArch64, where it is a 32-byte structure.)
#[no_mangle]
pub unsafe extern "C" fn vdprintf(fd: c_int, format: *const c_char, ap: *mut c_void) -> c_int {
    to_kernel(fd);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::vdprintf()(fd, format, ap) }
}

/// `system(3)`: the inherited descriptors' offsets go to the kernel first.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    if !command.is_null() {
        crate::hooks::before_exec(false);
    }
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    let r = unsafe { real::system()(command) };
    if !command.is_null() && r != -1 {
        // The C library waited for the shell itself.
        crate::hooks::child_reaped();
    }
    r
}

/// `popen(3)`: the inherited descriptors' offsets go to the kernel first.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    crate::hooks::before_exec(false);
    // SAFETY: the caller's arguments, passed on unchanged to the C library's own function.
    unsafe { real::popen()(command, mode) }
}
