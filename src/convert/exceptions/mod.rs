//! The hand-written conversion rules listed in `rules.rs`, one file per older version.

// The deprecated profile strings are exactly what these rules keep in step.
#![allow(deprecated)]

mod security_profile;
pub mod v1alpha1;
pub mod v1alpha2;

use crate::convert::{Cx, LossReason};

/// A v1 `bytes` env value as an older version's `string`; non-UTF-8 is a loss (left empty).
fn utf8_value(cx: &mut Cx, value: Vec<u8>) -> String {
    String::from_utf8(value).unwrap_or_else(|_| {
        cx.lost("KeyValue.value", LossReason::NotUtf8);
        String::new()
    })
}
