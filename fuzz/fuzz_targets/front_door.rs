//! Fuzz target `front_door`: see `fuzz/check/front_door.rs` for the input layout and the invariants.
#![no_main]

#[path = "../check/mod.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::front_door::run(data));
