//! Fuzz target `copy`: see `fuzz/check/copy.rs` for the input layout and the invariant.
#![no_main]

#[path = "../check/mod.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::copy::run(data));
