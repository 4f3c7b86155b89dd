//! The name service: register a send right under a name, look one up in
//! another process. Names are per user.

use ferry::Bootstrap;

use crate::handle::{free, give, obj, obj_mut, out, string};
use crate::port::ferry_send_right;
use crate::status::{ferry_status, guard};

/// A connection to the name server (opaque). Free with
/// [`ferry_bootstrap_free`].
#[derive(Debug)]
pub struct ferry_bootstrap {
    bs: Bootstrap,
}

/// Connects to the name server (`$FERRY_BOOTSTRAP`, else the default path),
/// starting `ferryd` detached at the default path if none runs there
/// (unless `FERRY_NO_AUTOSTART=1`); a path from `FERRY_BOOTSTRAP` is never
/// started on demand.
///
/// # Safety
/// `out_bootstrap` points at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_connect(out_bootstrap: *mut *mut ferry_bootstrap) -> ferry_status {
    guard(|| {
        let o = out(out_bootstrap, "out_bootstrap")?;
        let bs = Bootstrap::connect()?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_bootstrap { bs }) };
        Ok(())
    })
}

/// Frees a name-server connection (registrations stay). NULL is ignored.
///
/// # Safety
/// `bootstrap` is NULL or a live handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_free(bootstrap: *mut ferry_bootstrap) {
    let _ = guard(|| {
        // SAFETY: the caller gives the handle up; `free` ignores NULL.
        unsafe { free(bootstrap) };
        Ok(())
    });
}

/// Registers (a copy of) `right` under `name` with `how`: the body of
/// every `ferry_bootstrap_register*` function.
///
/// # Safety
/// `bootstrap` is a live handle used by no other call; `name` is a
/// NUL-terminated string; `right` is a live send-right handle.
unsafe fn register_with(
    bootstrap: *mut ferry_bootstrap,
    name: *const std::ffi::c_char,
    right: *const ferry_send_right,
    how: fn(&mut Bootstrap, &str, &ferry::SendRight) -> Result<(), ferry::NameError>,
) -> ferry_status {
    guard(|| {
        // SAFETY: the caller's contract: live handles and a NUL-terminated
        // name.
        let (b, n, tx) = unsafe { (obj_mut(bootstrap, "bootstrap")?, string(name, "name")?, obj(right, "right")?) };
        Ok(how(&mut b.bs, n, &tx.right)?)
    })
}

/// Registers (a copy of) `right` under `name` for the calling user; the
/// registration disappears when the port dies. `FERRY_ERR_NAME_TAKEN` if
/// the name is registered to a live port.
///
/// # Safety
/// `bootstrap` is a live handle used by no other call; `name` is a
/// NUL-terminated string; `right` is a live send-right handle.
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_register(bootstrap: *mut ferry_bootstrap, name: *const std::ffi::c_char, right: *const ferry_send_right) -> ferry_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // helper's.
    unsafe { register_with(bootstrap, name, right, Bootstrap::register) }
}

/// Registers (a copy of) `right` under `name` among the system names,
/// which every user of the name server finds after their own; the
/// registration disappears when the port dies. Root only:
/// `FERRY_ERR_DENIED` for anyone else; `FERRY_ERR_NAME_TAKEN` if a live
/// port has the system name.
///
/// # Safety
/// `bootstrap` is a live handle used by no other call; `name` is a
/// NUL-terminated string; `right` is a live send-right handle.
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_register_system(
    bootstrap: *mut ferry_bootstrap,
    name: *const std::ffi::c_char,
    right: *const ferry_send_right,
) -> ferry_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // helper's.
    unsafe { register_with(bootstrap, name, right, Bootstrap::register_system) }
}

/// Registers (a copy of) `right` under `name` among the system names as a
/// service that hands every lookup a port of its own: all send rights to
/// one port share one socket, which any holder may shut down or fill for
/// all, so a port every user reaches should not be one port. For each
/// lookup the name server makes a port and sends its receive right to
/// `right` in a `FERRY_SERVICE_PORT` message; take it with
/// `ferry_message_take_service_port` and serve it (a port set holds them
/// all) as the port of the user it names. Root only: `FERRY_ERR_DENIED` for anyone else;
/// `FERRY_ERR_NAME_TAKEN` if a live port has the system name;
/// `FERRY_ERR_REFUSED` from a name server too old for it.
///
/// # Safety
/// As [`ferry_bootstrap_register_system`].
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_register_system_service(
    bootstrap: *mut ferry_bootstrap,
    name: *const std::ffi::c_char,
    right: *const ferry_send_right,
) -> ferry_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // helper's.
    unsafe { register_with(bootstrap, name, right, Bootstrap::register_system_service) }
}

/// Looks `name` up for the calling user: a send right to its port in
/// `*out_right`. `FERRY_ERR_NAME_NOT_FOUND` if no live port has it.
///
/// # Safety
/// `bootstrap` is a live handle used by no other call; `name` is a
/// NUL-terminated string; `out_right` points at writable storage for a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_lookup(bootstrap: *mut ferry_bootstrap, name: *const std::ffi::c_char, out_right: *mut *mut ferry_send_right) -> ferry_status {
    guard(|| {
        let o = out(out_right, "out_right")?;
        // SAFETY: header contract: a live handle and a NUL-terminated name.
        let (b, n) = unsafe { (obj_mut(bootstrap, "bootstrap")?, string(name, "name")?) };
        let right = b.bs.lookup(n)?;
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_send_right { right }) };
        Ok(())
    })
}

/// Looks `name` up like [`ferry_bootstrap_lookup`], waiting for it to be
/// registered as `timeout_ms` says (negative: forever; 0: one lookup), for
/// a client that may start before its server. `FERRY_ERR_NAME_NOT_FOUND`
/// if it was not registered in time; any other failure at once.
///
/// # Safety
/// As [`ferry_bootstrap_lookup`].
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_lookup_wait(
    bootstrap: *mut ferry_bootstrap,
    name: *const std::ffi::c_char,
    timeout_ms: i64,
    out_right: *mut *mut ferry_send_right,
) -> ferry_status {
    guard(|| {
        let o = out(out_right, "out_right")?;
        // SAFETY: header contract: a live handle and a NUL-terminated name.
        let (b, n) = unsafe { (obj_mut(bootstrap, "bootstrap")?, string(name, "name")?) };
        let right = match crate::timeout(timeout_ms) {
            ferry::Timeout::Zero => b.bs.lookup(n)?,
            ferry::Timeout::After(d) => b.bs.lookup_wait(n, d)?,
            ferry::Timeout::Infinite => loop {
                match b.bs.lookup_wait(n, std::time::Duration::from_secs(3600)) {
                    Err(ferry::NameError::NotFound) => continue,
                    r => break r?,
                }
            },
        };
        // SAFETY: `o` checked non-null.
        unsafe { give(o, ferry_send_right { right }) };
        Ok(())
    })
}

/// Removes this user's registration of `name`.
///
/// # Safety
/// `bootstrap` is a live handle used by no other call; `name` is a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ferry_bootstrap_unregister(bootstrap: *mut ferry_bootstrap, name: *const std::ffi::c_char) -> ferry_status {
    guard(|| {
        // SAFETY: header contract: a live handle and a NUL-terminated name.
        let (b, n) = unsafe { (obj_mut(bootstrap, "bootstrap")?, string(name, "name")?) };
        Ok(b.bs.unregister(n)?)
    })
}
