//! What each fuzz target checks, as plain functions of the input bytes that panic when an
//! invariant breaks. The fuzz targets (`fuzz/fuzz_targets/*.rs`, nightly, libFuzzer) and the
//! stable replay of the checked-in corpus (`tests/fuzz_corpus.rs`) both include this directory
//! with `#[path]`, so a corpus file or a crash input means the same thing in both.
//!
//! Nothing here is part of cri-bridge: it uses the crate's public API and, for the conversion
//! targets, the schema-driven wire tools of the property tests (`tests/support/wire_gen.rs`).

// Each includer uses some of the modules only.
#![allow(dead_code)]

pub mod config;
pub mod convert;
pub mod copy;
pub mod decode;
pub mod framing;
pub mod front_door;
pub mod header_block;
pub mod scan;

#[path = "../../tests/support/wire_gen.rs"]
pub mod wire_gen;

use cri_bridge::CriVersion;

/// A target's check of one input: it panics when an invariant breaks.
pub type Check = fn(&[u8]);

/// Every target, by the name of its fuzz target and corpus directory.
pub const TARGETS: &[(&str, Check)] = &[
    ("convert_request", convert::request),
    ("convert_response", convert::response),
    ("scan", scan::run),
    ("framing", framing::run),
    ("front_door", front_door::run),
    ("header_block", header_block::run),
    ("config", config::run),
    ("copy", copy::run),
];

/// The input read as a sequence of choices, then the rest as the payload. Past the end every
/// choice reads as 0, so any input is a valid one.
pub struct Choices<'a> {
    bytes: &'a [u8],
}

impl<'a> Choices<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Choices { bytes }
    }

    pub fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = rest;
        taken
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn rest(self) -> &'a [u8] {
        self.bytes
    }
}

/// The three versions, by a choice byte.
pub fn version(choice: u8) -> CriVersion {
    [CriVersion::V1, CriVersion::V1alpha2, CriVersion::V1alpha1][usize::from(choice) % 3]
}

/// The choice byte that [`version`] reads as `version` (for writing seeds).
pub fn version_choice(version: CriVersion) -> u8 {
    match version {
        CriVersion::V1 => 0,
        CriVersion::V1alpha2 => 1,
        CriVersion::V1alpha1 => 2,
    }
}
