//! `libferry_emul.so`: the emulation library of ferry (Mach 3.0's, after
//! Dean & Armand), loaded into an unmodified program with `LD_PRELOAD` by
//! `ferry run --files DIR`.
//!
//! It takes the C library's file calls for names under `DIR` and serves
//! them from ferry's emulation server (`ferry::emulation`): opens, stats,
//! unlinks, renames and directory creations are messages; reads, writes
//! and seeks on an open file are served **in the process**, from 1 MiB (by
//! default; `FERRY_EMUL_WINDOW`) windows of the file mapped shared, guarded by the open file's
//! token, with no message and no system call while the token and the
//! window are held. Everything else passes through to the C library
//! untouched.
//!
//! Why a preload library: the cached one-byte read after `lseek` must make
//! no system call at all, so the calls must be caught in user space before
//! they reach the kernel; seccomp user notification catches them only in
//! the kernel, after the trap, and would add a round trip to a supervisor
//! per call. The price: a program that makes system calls without the C
//! library (statically linked, or raw `syscall`) bypasses the library and
//! reaches the files natively (the descriptors it holds are real, so it
//! still works, through the kernel; see `docs/emulation.md`).
//!
//! The descriptors a program gets are real: a regular file's descriptor is
//! a duplicate of the file the server opened with the program's rights, a
//! directory's is the directory itself, so `close`, `dup`, `fcntl`, `fstat`,
//! `mmap`, locks, `select`, `fork` and `exec` work on them as on any file.
//! Only the offset lives elsewhere (in the token page), and the library
//! sets the kernel's offset from it before `exec`.
//!
//! Modules: `real` finds the C library's functions, `state` holds the
//! process's connection and descriptor table, `file` serves one open
//! file, `fault` its copies from a window over bytes the file lost,
//! `hooks` are the exported C functions, `exec` those that start
//! programs through the C library's internal calls, `wide` the
//! wide-character stdio functions for the library's streams.

#![deny(missing_docs)]

pub mod exec;
mod fault;
mod file;
pub mod hooks;
mod real;
mod state;
mod table;
pub mod wide;
