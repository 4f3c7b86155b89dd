//! Compiles `c/capi.c`, the C side of the impls that go through ferry's C
//! API (`ferry-c-port`, `ferry-c-call-*`), against the generated header of
//! `crates/ferry-ffi`. The C API's functions themselves come from the
//! `ferry-ffi-rlib` dependency (the same source as libferry).

fn main() {
    println!("cargo:rerun-if-changed=c/capi.c");
    println!("cargo:rerun-if-changed=../ferry-ffi/include/ferry.h");
    cc::Build::new()
        .file("c/capi.c")
        .include("../ferry-ffi/include")
        .std("c11")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("ferry_bench_capi");
}
