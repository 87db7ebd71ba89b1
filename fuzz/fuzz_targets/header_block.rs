//! Fuzz target `header_block`: see `fuzz/check/header_block.rs` for the input layout and the invariants.
#![no_main]

#[path = "../check/mod.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::header_block::run(data));
