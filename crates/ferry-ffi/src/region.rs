//! Out-of-line regions: allocate and fill one here (`ferry_region`), and
//! look at one received and mapped (`ferry_mapped_region`).
//!
//! Only a region received **by value** (copy or move: sealed, so nobody can
//! change it) gives a direct `const uint8_t*` view; a lent or shared one is
//! read with [`ferry_mapped_region_read`], which copies, because its sender
//! may be writing it meanwhile.

use ferry::region::{MapOptions, MappedRegion, Mode, Region, SharedMapping};

use crate::handle::{bytes_mut, free, give, obj, obj_mut, out, put};
use crate::message::{ferry_region_mode, mode_of};
use crate::status::{ferry_status, guard, Failure, Res};

/// Memory this process allocated to send out of line (opaque). Free with
/// [`ferry_region_free`].
#[derive(Debug)]
pub struct ferry_region {
    pub(crate) region: Region,
}

/// A received region mapped into this process (opaque). Free with
/// [`ferry_mapped_region_free`] (a lent region then returns to its sender).
#[derive(Debug)]
pub struct ferry_mapped_region {
    pub(crate) map: Mapped,
}

/// What a mapped-region handle holds: a region received by value (its
/// bytes may be borrowed), or a lent or shared one (read by copying only).
#[derive(Debug)]
pub(crate) enum Mapped {
    /// Copy or move: sealed, nobody else can change it.
    Value(MappedRegion),
    /// Lent or shared: its sender may still write it.
    Shared(SharedMapping, Mode),
}

impl Mapped {
    fn len(&self) -> usize {
        match self {
            Mapped::Value(m) => m.len(),
            Mapped::Shared(m, _) => m.len(),
        }
    }

    fn mode(&self) -> Mode {
        match self {
            Mapped::Value(m) => m.mode(),
            Mapped::Shared(_, mode) => *mode,
        }
    }

    fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        match self {
            Mapped::Value(m) => m.read_at(offset, out),
            Mapped::Shared(m, _) => m.read_at(offset, out),
        }
    }

    /// The by-value mapping, or `FERRY_ERR_SENDER_MAY_WRITE`.
    fn by_value(&mut self) -> Res<&mut MappedRegion> {
        match self {
            Mapped::Value(m) => Ok(m),
            Mapped::Shared(..) => Err(Failure::new(
                ferry_status::FERRY_ERR_SENDER_MAY_WRITE,
                "the region was lent or shared: its sender may change it; read it with ferry_mapped_region_read",
            )),
        }
    }
}

/// Map flag: fault every page in now rather than on first touch.
pub const FERRY_MAP_IMMEDIATE: u32 = 1;
/// Map flag: map read-only (by-value regions are otherwise privately
/// writable: writes stay in this process).
pub const FERRY_MAP_READ_ONLY: u32 = 2;
/// Map flag: place the region at the address it had in the sender
/// (`FERRY_ERR_ADDRESS_TAKEN` if the range is in use here).
pub const FERRY_MAP_AT_SENDER_ADDRESS: u32 = 4;
/// Map flag: accept a lent or shared region, whose sender may write it
/// while it is mapped here. Its bytes are then only read by copying.
pub const FERRY_MAP_ALLOW_SENDER_WRITES: u32 = 8;

/// The longest region `FERRY_MAP_IMMEDIATE` maps unless the caller sets
/// its own limit (`ferry_message_map_region_limited`): an immediate
/// mapping allocates every page, and the length is the sender's claim.
pub const FERRY_MAP_IMMEDIATE_LIMIT: usize = 1 << 30;

/// Map options from C flags and a limit on the region's length (`None`:
/// [`FERRY_MAP_IMMEDIATE_LIMIT`] for an immediate mapping, none for a lazy
/// one), and whether the caller accepts a region its sender may still
/// write (`FERRY_MAP_ALLOW_SENDER_WRITES`); unknown bits are refused.
pub(crate) fn map_options(flags: u32, limit: Option<usize>) -> Res<(MapOptions, bool)> {
    let known = FERRY_MAP_IMMEDIATE | FERRY_MAP_READ_ONLY | FERRY_MAP_AT_SENDER_ADDRESS | FERRY_MAP_ALLOW_SENDER_WRITES;
    if flags & !known != 0 {
        return Err(Failure::invalid(format!("unknown map flags {:#x}", flags & !known)));
    }
    let immediate = flags & FERRY_MAP_IMMEDIATE != 0;
    let mut o = if immediate { MapOptions::immediate() } else { MapOptions::lazy() };
    if let Some(l) = limit.or(immediate.then_some(FERRY_MAP_IMMEDIATE_LIMIT)) {
        o = o.limit(l);
    }
    if flags & FERRY_MAP_READ_ONLY != 0 {
        o = o.read_only();
    }
    if flags & FERRY_MAP_AT_SENDER_ADDRESS != 0 {
        o = o.at_sender_address();
    }
    Ok((o, flags & FERRY_MAP_ALLOW_SENDER_WRITES != 0))
}

/// Allocates a zeroed region of `len` bytes (at least one); pages are
/// allocated on first touch.
///
/// # Safety
/// `out_region` points at writable storage for a pointer; on success it
/// holds a new region the caller frees.
#[no_mangle]
pub unsafe extern "C" fn ferry_region_new(len: usize, out_region: *mut *mut ferry_region) -> ferry_status {
    guard(|| {
        let o = out(out_region, "out_region")?;
        if len == 0 {
            return Err(Failure::invalid("a region has at least one byte"));
        }
        let region = Region::new(len)?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_region { region }) };
        Ok(())
    })
}

/// Frees a region (what was sent of it by copy stays with its receivers).
/// NULL is ignored.
///
/// # Safety
/// `region` is NULL or a live region handle, not used again (nor any
/// pointer into it).
#[no_mangle]
pub unsafe extern "C" fn ferry_region_free(region: *mut ferry_region) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(region) };
        Ok(())
    });
}

/// The region's bytes, writable: `*data` points at `*len` bytes of this
/// process's own memory. Writes after the region was sent by copy stay
/// here (copy-on-write). The pointer is valid until the region is freed or
/// moved; after attaching the region to a message, call this again before
/// writing (so ferry knows the bytes changed).
///
/// # Safety
/// `region` is a live region handle used by no other call meanwhile;
/// `data` and `len` point at writable storage.
#[no_mangle]
pub unsafe extern "C" fn ferry_region_data(region: *mut ferry_region, data: *mut *mut u8, len: *mut usize) -> ferry_status {
    guard(|| {
        let (d, l) = (out(data, "data")?, out(len, "len")?);
        // SAFETY: header contract: a live handle used by no other call.
        let r = unsafe { obj_mut(region, "region") }?;
        let s = r.region.as_mut_slice();
        // SAFETY: `d` and `l` checked non-null.
        unsafe {
            put(d, s.as_mut_ptr());
            put(l, s.len());
        }
        Ok(())
    })
}

/// Frees a mapped region: unmaps it (a lent region returns to its sender's
/// pool). NULL is ignored.
///
/// # Safety
/// `map` is NULL or a live mapped-region handle, not used again (nor any
/// pointer into it).
#[no_mangle]
pub unsafe extern "C" fn ferry_mapped_region_free(map: *mut ferry_mapped_region) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(map) };
        Ok(())
    });
}

/// Length and mode of a mapped region; either out-pointer may be NULL.
///
/// # Safety
/// `map` is a live mapped-region handle; `len` and `mode` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ferry_mapped_region_info(map: *const ferry_mapped_region, len: *mut usize, mode: *mut ferry_region_mode) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj(map, "map") }?;
        if !len.is_null() {
            // SAFETY: non-null and writable per the header.
            unsafe { put(len, m.map.len()) };
        }
        if !mode.is_null() {
            // SAFETY: non-null and writable per the header.
            unsafe { put(mode, mode_of(m.map.mode())) };
        }
        Ok(())
    })
}

/// A direct, read-only view of a region received **by value**: `*data`
/// points at `*len` bytes nobody else can change, valid until the handle is
/// freed. A lent or shared region gives `FERRY_ERR_SENDER_MAY_WRITE` (read
/// it with [`ferry_mapped_region_read`]).
///
/// # Safety
/// `map` is a live mapped-region handle; `data` and `len` point at writable
/// storage.
#[no_mangle]
pub unsafe extern "C" fn ferry_mapped_region_data(map: *const ferry_mapped_region, data: *mut *const u8, len: *mut usize) -> ferry_status {
    guard(|| {
        let (d, l) = (out(data, "data")?, out(len, "len")?);
        // SAFETY: header contract: a live handle.
        let m = unsafe { obj_mut(map.cast_mut(), "map") }?;
        let s = m.map.by_value()?.as_slice();
        // SAFETY: `d` and `l` checked non-null.
        unsafe {
            put(d, s.as_ptr());
            put(l, s.len());
        }
        Ok(())
    })
}

/// A writable view of a region received by value and mapped writable
/// (without `FERRY_MAP_READ_ONLY`): writes stay in this process. Lent and
/// shared regions give `FERRY_ERR_SENDER_MAY_WRITE`; read-only mappings
/// `FERRY_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `map` is a live mapped-region handle used by no other call meanwhile;
/// `data` and `len` point at writable storage.
#[no_mangle]
pub unsafe extern "C" fn ferry_mapped_region_data_mut(map: *mut ferry_mapped_region, data: *mut *mut u8, len: *mut usize) -> ferry_status {
    guard(|| {
        let (d, l) = (out(data, "data")?, out(len, "len")?);
        // SAFETY: header contract: a live handle used by no other call.
        let m = unsafe { obj_mut(map, "map") }?;
        let s = m.map.by_value()?.as_mut_slice().ok_or_else(|| Failure::invalid("the region is mapped read-only"))?;
        // SAFETY: `d` and `l` checked non-null.
        unsafe {
            put(d, s.as_mut_ptr());
            put(l, s.len());
        }
        Ok(())
    })
}

/// Copies `len` bytes at `offset` of the mapped region into `buf`; works
/// for every mode (for a lent or shared region the sender may be writing
/// meanwhile). `FERRY_ERR_INVALID_ARGUMENT` if the range is outside it.
///
/// # Safety
/// `map` is a live mapped-region handle; `buf` points at `len` writable
/// bytes (it may be NULL when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn ferry_mapped_region_read(map: *const ferry_mapped_region, offset: usize, buf: *mut u8, len: usize) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle; `len` writable bytes at `buf`.
        let (m, b) = unsafe { (obj(map, "map")?, bytes_mut(buf, len, "buf")?) };
        if m.map.read_at(offset, b) {
            Ok(())
        } else {
            Err(Failure::invalid(format!("{len} bytes at {offset} are outside the region of {}", m.map.len())))
        }
    })
}
