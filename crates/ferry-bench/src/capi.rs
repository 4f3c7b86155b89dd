//! Safe handles over `c/capi.c`, the C code of the impls that go through
//! ferry's C API (`ferry-c-port`, `ferry-c-call-poll`, `ferry-c-call-block`).
//!
//! The C functions call the C API (`include/ferry.h`) exactly as a C
//! program does; the C API is linked into this program from the source of
//! libferry (the `ferry-ffi-rlib` dependency), so the code measured is
//! libferry's. This module owns the C handles: ports are made with
//! `ferry_port_new` and freed with the matching `ferry_*_free`, and each
//! client object is closed exactly once. It is the second of the crate's
//! two modules allowed `unsafe` (the first is `sys`): every call here is a
//! foreign call.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;

use ferry_ffi::port::{ferry_receive_right, ferry_send_right};

/// The C client of a port round trip (`struct ferry_bench_c_port`).
#[repr(C)]
struct PortClient {
    _opaque: [u8; 0],
}

/// The C client of an RPC round trip (`struct ferry_bench_c_rpc`).
#[repr(C)]
struct RpcClient {
    _opaque: [u8; 0],
}

// The C functions return a `ferry_status`, a C enum: an `int`. The rights
// are the C API's opaque handles: C only passes the pointers on to the C
// API, which is Rust, so their Rust layout never crosses to C.
#[allow(improper_ctypes)]
extern "C" {
    fn ferry_bench_c_error() -> *const c_char;
    fn ferry_bench_c_port_serve(rx: *mut ferry_receive_right, to_client: *const ferry_send_right, n: usize) -> c_int;
    fn ferry_bench_c_port_open(to_server: *const ferry_send_right, mine: *mut ferry_receive_right, n: usize, out: *mut *mut PortClient) -> c_int;
    fn ferry_bench_c_port_roundtrip(c: *mut PortClient) -> c_int;
    fn ferry_bench_c_port_close(c: *mut PortClient) -> c_int;
    fn ferry_bench_c_rpc_serve(rx: *mut ferry_receive_right, policy: u32, n: usize) -> c_int;
    fn ferry_bench_c_rpc_open(server: *const ferry_send_right, policy: u32, n: usize, out: *mut *mut RpcClient) -> c_int;
    fn ferry_bench_c_rpc_call(c: *mut RpcClient) -> c_int;
    fn ferry_bench_c_rpc_close(c: *mut RpcClient) -> c_int;
}

/// A failed C call: its status and the error text.
#[derive(Debug)]
pub struct CError {
    /// The `ferry_status` value.
    pub status: c_int,
    /// `ferry_last_error_message()`, or the C benchmark's own complaint.
    pub text: String,
}

impl std::fmt::Display for CError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "C API status {}: {}", self.status, self.text)
    }
}

impl std::error::Error for CError {}

impl From<CError> for std::io::Error {
    fn from(e: CError) -> std::io::Error {
        std::io::Error::other(e)
    }
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: both sources return a NUL-terminated string owned by the
    // calling thread, valid until its next failing call; it is copied now.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn check(status: c_int) -> Result<(), CError> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: no arguments; returns the thread's (possibly empty) text.
    let own = text(unsafe { ferry_bench_c_error() });
    let text = if own.is_empty() { text(ferry_ffi::ferry_last_error_message()) } else { own };
    Err(CError { status, text })
}

/// Wait policy of an RPC connection or server (`FERRY_POLICY_*`).
#[derive(Debug, Clone, Copy)]
pub enum Policy {
    /// `FERRY_POLICY_BLOCK`.
    Block,
    /// `FERRY_POLICY_POLL`.
    Poll,
}

impl Policy {
    fn raw(self) -> u32 {
        match self {
            Policy::Block => ferry_ffi::rpc::FERRY_POLICY_BLOCK,
            Policy::Poll => ferry_ffi::rpc::FERRY_POLICY_POLL,
        }
    }
}

/// A receive right owned through the C API.
#[derive(Debug)]
pub struct Receive(*mut ferry_receive_right);

/// A send right owned through the C API.
#[derive(Debug)]
pub struct Send(*mut ferry_send_right);

impl Drop for Receive {
    fn drop(&mut self) {
        // SAFETY: a live handle this value owns (null after a consuming call).
        unsafe { ferry_ffi::port::ferry_receive_right_free(self.0) }
    }
}

impl Drop for Send {
    fn drop(&mut self) {
        // SAFETY: a live handle this value owns.
        unsafe { ferry_ffi::port::ferry_send_right_free(self.0) }
    }
}

/// A new port through the C API (`ferry_port_new`).
pub fn port() -> Result<(Receive, Send), CError> {
    let (mut rx, mut tx) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: two valid out-pointers.
    check(unsafe { ferry_ffi::port::ferry_port_new(&mut rx, &mut tx) } as c_int)?;
    Ok((Receive(rx), Send(tx)))
}

/// The server of the port round trip: answers each request on `rx` with
/// `n` bytes sent on `to_client`, until the client's stop request.
pub fn port_serve(rx: &mut Receive, to_client: &Send, n: usize) -> Result<(), CError> {
    // SAFETY: live handles, borrowed for the call.
    check(unsafe { ferry_bench_c_port_serve(rx.0, to_client.0, n) })
}

/// The client of the port round trip; stops the server when closed.
#[derive(Debug)]
pub struct PortRoundTrip<'a> {
    c: *mut PortClient,
    _rights: std::marker::PhantomData<(&'a Send, &'a mut Receive)>,
}

impl<'a> PortRoundTrip<'a> {
    /// A client sending requests of `n` bytes to `to_server` and receiving
    /// the replies on `mine`.
    pub fn open(to_server: &'a Send, mine: &'a mut Receive, n: usize) -> Result<Self, CError> {
        let mut c = ptr::null_mut();
        // SAFETY: live handles that outlive the client (the lifetime says
        // so); a valid out-pointer.
        check(unsafe { ferry_bench_c_port_open(to_server.0, mine.0, n, &mut c) })?;
        Ok(PortRoundTrip { c, _rights: std::marker::PhantomData })
    }

    /// One round trip.
    pub fn roundtrip(&mut self) -> Result<(), CError> {
        // SAFETY: the live client this value owns.
        check(unsafe { ferry_bench_c_port_roundtrip(self.c) })
    }

    /// Stops the server and frees the client.
    pub fn close(mut self) -> Result<(), CError> {
        let c = std::mem::replace(&mut self.c, ptr::null_mut());
        // SAFETY: the live client, closed once (null left behind for Drop).
        check(unsafe { ferry_bench_c_port_close(c) })
    }
}

impl Drop for PortRoundTrip<'_> {
    fn drop(&mut self) {
        if !self.c.is_null() {
            // SAFETY: the live client, not closed yet.
            unsafe { ferry_bench_c_port_close(self.c) };
        }
    }
}

/// The RPC server: consumes `rx`, answers each call with `n` bytes until
/// the client's stop call or until no client is left.
pub fn rpc_serve(mut rx: Receive, policy: Policy, n: usize) -> Result<(), CError> {
    let raw = std::mem::replace(&mut rx.0, ptr::null_mut());
    // SAFETY: a live handle, consumed by the call whatever its outcome (the
    // null left in `rx` makes its drop a no-op).
    check(unsafe { ferry_bench_c_rpc_serve(raw, policy.raw(), n) })
}

/// The client of the RPC round trip; stops the server when closed.
#[derive(Debug)]
pub struct RpcCall {
    c: *mut RpcClient,
}

impl RpcCall {
    /// Connects to the server behind `server` for calls of `n` bytes each
    /// way.
    pub fn open(server: &Send, policy: Policy, n: usize) -> Result<Self, CError> {
        let mut c = ptr::null_mut();
        // SAFETY: a live handle (only read during the call); a valid
        // out-pointer.
        check(unsafe { ferry_bench_c_rpc_open(server.0, policy.raw(), n, &mut c) })?;
        Ok(RpcCall { c })
    }

    /// One call.
    pub fn call(&mut self) -> Result<(), CError> {
        // SAFETY: the live client this value owns.
        check(unsafe { ferry_bench_c_rpc_call(self.c) })
    }

    /// Stops the server and frees the client.
    pub fn close(mut self) -> Result<(), CError> {
        let c = std::mem::replace(&mut self.c, ptr::null_mut());
        // SAFETY: the live client, closed once.
        check(unsafe { ferry_bench_c_rpc_close(c) })
    }
}

impl Drop for RpcCall {
    fn drop(&mut self) {
        if !self.c.is_null() {
            // SAFETY: the live client, not closed yet.
            unsafe { ferry_bench_c_rpc_close(self.c) };
        }
    }
}
