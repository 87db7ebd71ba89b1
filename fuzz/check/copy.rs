//! `copy`: the byte-level copy (`cri_bridge::convert::copy`, taken by `Route::convert`) held
//! against the decode–convert–encode path on arbitrary bytes, for any message an older version
//! and v1 both have, either way.
//!
//! Input: the older version (a `version` choice; v1 reads as v1alpha2), the direction (even: up to
//! v1, odd: down from v1), the message's index in the source version's schema (2 bytes), then the
//! message's bytes.
//!
//! Invariant ([`same_at_the_other_side`]): when the bytes pass as they came, the decode path
//! converts them without an error and without a loss, and the target version's decoder reads the
//! same message from both. (`tests/copy.rs` runs the same check over generated messages.)

use super::wire_gen::schema;
use super::{version, Choices};
use cri_bridge::convert::{Cx, Route};
use cri_bridge::CriVersion;
use std::borrow::Cow;

pub fn run(data: &[u8]) {
    let mut input = Choices::new(data);
    let old = match version(input.u8()) {
        CriVersion::V1 => CriVersion::V1alpha2,
        old => old,
    };
    let (from, to) = if input.u8().is_multiple_of(2) { (old, CriVersion::V1) } else { (CriVersion::V1, old) };
    let messages = from.schema().messages;
    let name = messages[usize::from(input.u16()) % messages.len()].name;
    let bytes = input.rest();
    // A message only one side has has no route: nothing to check.
    let Some(route) = Route::new(name, from, to) else { return };
    if let Err(why) = same_at_the_other_side(&route, to, name, bytes) {
        panic!("{from} → {to} {name}: {why}");
    }
}

/// Whether `route` copied `bytes` (message `name`, for version `to`), and an error saying how when
/// the copy is not what the decode path gives.
pub fn same_at_the_other_side(route: &Route, to: CriVersion, name: &str, bytes: &[u8]) -> Result<bool, String> {
    let mut copy_cx = Cx::new();
    if !matches!(route.convert(bytes, &mut copy_cx), Ok(Cow::Borrowed(_))) {
        return Ok(false);
    }
    let mut cx = Cx::new();
    let converted = route.run(bytes, &mut cx).map_err(|e| format!("copied, but the decode path fails: {e}"))?;
    if cx.loss_count() > 0 {
        return Err(format!("copied, but the decode path reports losses: {:?}", cx.into_losses()));
    }
    let target = schema(to);
    let index = target.index(name);
    let as_copied = target.decode(index, bytes).map_err(|e| format!("the copy does not decode as {to}: {e}"))?;
    let as_converted = target.decode(index, &converted).map_err(|e| format!("the decode path's output: {e}"))?;
    if as_copied != as_converted {
        return Err(format!(
            "the two paths differ at the other side\n  copied:    {}\n  converted: {}",
            target.render(index, &as_copied),
            target.render(index, &as_converted)
        ));
    }
    Ok(true)
}
