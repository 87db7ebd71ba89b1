//! Small helpers every file of the in-memory runtime uses: its lock, the clock, stable IDs and
//! digests, and the errors a CRI runtime answers for missing or unknown names.

use crate::api::v1;
use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use tonic::Status;

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state stays consistent between statements, so a panic elsewhere does not spoil it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn now_nanos() -> i64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX)
}

/// Four 64-bit parts as 64 hex characters.
pub(super) fn hex64(part: impl Fn(u64) -> u64) -> String {
    (0..4).fold(String::with_capacity(64), |mut out, i| {
        let _ = write!(out, "{:016x}", part(i));
        out
    })
}

/// A stable number for `text` (same input, same output, within a build).
pub(super) fn seed(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// A stable 64-hex-character digest of `text`.
pub(super) fn digest(text: &str) -> String {
    hex64(|i| seed(&format!("{i}:{text}")))
}

pub(super) fn u64_value(value: u64) -> Option<v1::UInt64Value> {
    Some(v1::UInt64Value { value })
}

pub(super) fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(super) fn missing(field: &str) -> Status {
    Status::invalid_argument(format!("{field} is required"))
}

pub(super) fn require(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(missing(field));
    }
    Ok(())
}

pub(super) fn not_found(kind: &str, id: &str) -> Status {
    Status::not_found(format!("{kind} {id:?} not found"))
}
