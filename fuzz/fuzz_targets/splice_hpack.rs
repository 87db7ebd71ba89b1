//! Fuzz target `splice_hpack`: see `fuzz/check/splice_hpack.rs` for the input layout and the invariants.
#![no_main]

#[path = "../check/mod.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::splice_hpack::run(data));
