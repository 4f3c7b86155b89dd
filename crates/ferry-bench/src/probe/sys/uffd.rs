//! userfaultfd: open it with the API handshake, register ranges for
//! missing-page faults, read faults and resolve them with `UFFDIO_COPY` or
//! `UFFDIO_ZEROPAGE`. rustix creates the descriptor; the ioctls and their
//! structs (from `linux/userfaultfd.h`) are here.
//!
//! # Safety
//! Every ioctl gets a pointer to a `#[repr(C)]` struct whose size is the one
//! encoded in the request number and which lives across the call.
//! `UFFDIO_COPY` and `UFFDIO_ZEROPAGE` write only into ranges registered on
//! this descriptor, which live [`Map`]s own.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::io::Errno;
use rustix::time::Timespec;

use super::map::Map;

/// `UFFD_API`.
const UFFD_API: u64 = 0xAA;
const fn iowr(nr: u64, size: u64) -> u64 {
    (3 << 30) | (size << 16) | (0xAA << 8) | nr
}
const fn ior(nr: u64, size: u64) -> u64 {
    (2 << 30) | (size << 16) | (0xAA << 8) | nr
}

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}
#[repr(C)]
struct UffdMsg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    flags: u64,
    address: u64,
    _rest: u64,
}

const UFFDIO_API: u64 = iowr(0x3F, 24);
const UFFDIO_REGISTER: u64 = iowr(0x00, 32);
const UFFDIO_UNREGISTER: u64 = ior(0x01, 16);
const UFFDIO_COPY: u64 = iowr(0x03, 40);
const UFFDIO_ZEROPAGE: u64 = iowr(0x04, 32);
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFD_USER_MODE_ONLY: u32 = 1;

fn ioctl<T>(fd: BorrowedFd<'_>, req: u64, arg: &mut T) -> rustix::io::Result<()> {
    // SAFETY: every request passed to this function takes a pointer to a
    // `#[repr(C)]` struct of exactly `T`'s layout (encoded in `req`), which
    // lives across the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg as *mut T) };
    if rc < 0 {
        Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)))
    } else {
        Ok(())
    }
}

/// A userfaultfd after the API handshake.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    /// Features the kernel reported (`UFFDIO_API`).
    pub features: u64,
    /// Whether the descriptor had to be opened with `UFFD_USER_MODE_ONLY`.
    pub user_mode_only: bool,
}

impl Uffd {
    /// Opens a non-blocking userfaultfd and asks the kernel for every
    /// feature it has (`UFFDIO_API` with features 0 reports them).
    pub fn open() -> rustix::io::Result<Uffd> {
        use rustix::mm::UserfaultfdFlags as F;
        let base = F::CLOEXEC | F::NONBLOCK;
        // SAFETY: creating the descriptor is harmless; the ranges registered
        // on it are owned Maps (module Safety section).
        let (fd, user_mode_only) = match unsafe { rustix::mm::userfaultfd(base) } {
            Ok(fd) => (fd, false),
            Err(Errno::PERM) => {
                // SAFETY: as above.
                let fd = unsafe { rustix::mm::userfaultfd(base | F::from_bits_retain(UFFD_USER_MODE_ONLY)) }?;
                (fd, true)
            }
            Err(e) => return Err(e),
        };
        let mut api = UffdioApi { api: UFFD_API, ..Default::default() };
        ioctl(fd.as_fd(), UFFDIO_API, &mut api)?;
        Ok(Uffd { fd, features: api.features, user_mode_only })
    }

    /// Registers all of `map` for missing-page faults.
    pub fn register_missing(&self, map: &Map) -> rustix::io::Result<()> {
        let mut r = UffdioRegister {
            range: UffdioRange { start: map.addr() as u64, len: map.len() as u64 },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        ioctl(self.fd.as_fd(), UFFDIO_REGISTER, &mut r)
    }

    /// Unregisters all of `map`.
    pub fn unregister(&self, map: &Map) -> rustix::io::Result<()> {
        let mut r = UffdioRange { start: map.addr() as u64, len: map.len() as u64 };
        ioctl(self.fd.as_fd(), UFFDIO_UNREGISTER, &mut r)
    }

    /// Waits up to `timeout` for a page fault; returns its address.
    pub fn next_fault(&self, timeout: Duration) -> rustix::io::Result<Option<u64>> {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut pfd = [PollFd::new(&self.fd, PollFlags::IN)];
        let ts = Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: timeout.subsec_nanos() as i64 };
        match poll(&mut pfd, Some(&ts)) {
            Ok(0) | Err(Errno::INTR) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        let mut msg = MaybeUninit::<UffdMsg>::uninit();
        // SAFETY: the buffer is exactly one uffd_msg (32 bytes) and lives
        // across the call.
        let buf = unsafe { std::slice::from_raw_parts_mut(msg.as_mut_ptr().cast::<MaybeUninit<u8>>(), 32) };
        match rustix::io::read(&self.fd, buf) {
            Ok((got, _)) if got.len() == 32 => {}
            Ok(_) | Err(Errno::AGAIN) => return Ok(None),
            Err(e) => return Err(e),
        }
        // SAFETY: the kernel wrote a whole uffd_msg; every bit pattern is a
        // valid UffdMsg (plain integers).
        let msg = unsafe { msg.assume_init() };
        let _ = msg.flags;
        Ok((msg.event == UFFD_EVENT_PAGEFAULT).then_some(msg.address))
    }

    /// Resolves the fault at `addr` by copying one page from `src`
    /// (`UFFDIO_COPY`), or with the zero page when `src` is `None`.
    pub fn resolve(&self, addr: u64, page: usize, src: Option<&Map>) -> rustix::io::Result<()> {
        let dst = addr & !(page as u64 - 1);
        let r = match src {
            Some(src) => {
                assert!(src.len() >= page);
                let mut c = UffdioCopy { dst, src: src.addr() as u64, len: page as u64, ..Default::default() };
                ioctl(self.fd.as_fd(), UFFDIO_COPY, &mut c)
            }
            None => {
                let mut z = UffdioZeropage { range: UffdioRange { start: dst, len: page as u64 }, ..Default::default() };
                ioctl(self.fd.as_fd(), UFFDIO_ZEROPAGE, &mut z)
            }
        };
        match r {
            // Another resolution got there first: the page is present.
            Err(Errno::EXIST) => Ok(()),
            r => r,
        }
    }
}
