//! Fuzz target `splice_frames`: see `fuzz/check/splice_frames.rs` for the input layout and the invariants.
#![no_main]

#[path = "../check/mod.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::splice_frames::run(data));
