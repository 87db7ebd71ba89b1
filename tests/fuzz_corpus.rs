//! The fuzz targets' checked-in inputs, replayed on the stable toolchain: every seed of
//! `fuzz/corpus/<target>/` (real requests, answers and connections of the grpc-go and grpcio
//! clients, the config examples) and every crash input of `fuzz/regressions/<target>/` goes
//! through the same checks as in the fuzz target (`fuzz/check/`, included here as it is there),
//! so a crash once found stays fixed without cargo-fuzz or nightly. `tools/fuzz.sh` runs the
//! targets themselves.

#[path = "../fuzz/check/mod.rs"]
mod check;

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        files.extend(entries.map(|e| e.expect("a directory entry").path()).filter(|p| p.is_file()));
    }
    files.sort();
    files
}

/// Runs `target`'s check on each of its inputs; fails naming every input that fails.
fn replay(target: &str) {
    let run = check::TARGETS.iter().find(|(name, _)| *name == target).expect("a target").1;
    let files = inputs(target);
    assert!(!files.is_empty(), "fuzz/corpus/{target}/ has no seeds");
    let failed: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let data = std::fs::read(file).expect("a corpus file");
            let outcome = std::panic::catch_unwind(|| run(&data));
            outcome.err().map(|panic| {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                format!("{}: {why}", file.display())
            })
        })
        .collect();
    assert!(failed.is_empty(), "{} of {} {target} inputs fail:\n{}", failed.len(), files.len(), failed.join("\n"));
}

#[test]
fn every_target_is_replayed() {
    let names: Vec<&str> = check::TARGETS.iter().map(|(name, _)| *name).collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    let mut targets: Vec<String> = std::fs::read_dir(dir)
        .expect("fuzz/fuzz_targets")
        .map(|e| e.expect("an entry").path().file_stem().expect("a name").to_string_lossy().into_owned())
        .collect();
    targets.sort();
    let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    expected.sort();
    assert_eq!(targets, expected, "every fuzz target has its check in fuzz/check/mod.rs TARGETS, and a test here");
}

#[test]
fn convert_request() {
    replay("convert_request");
}

#[test]
fn convert_response() {
    replay("convert_response");
}

#[test]
fn scan() {
    replay("scan");
}

#[test]
fn framing() {
    replay("framing");
}

#[test]
fn front_door() {
    replay("front_door");
}

#[test]
fn header_block() {
    replay("header_block");
}

#[test]
fn config() {
    replay("config");
}

#[test]
fn copy() {
    replay("copy");
}
