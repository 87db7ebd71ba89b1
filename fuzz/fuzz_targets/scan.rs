//! Fuzz target `scan`: see `fuzz/check/scan.rs` for the input layout and the invariants.
#![no_main]

#[path = "../check/mod.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::scan::run(data));
