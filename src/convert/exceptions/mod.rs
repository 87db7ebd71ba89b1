//! The hand-written conversion rules listed in `rules.rs`, one file per older version.

// The deprecated profile strings are exactly what these rules keep in step.
#![allow(deprecated)]

mod security_profile;
pub mod v1alpha1;
pub mod v1alpha2;

use crate::api::v1;
use crate::convert::{Cx, LossReason};
use prost::Message;
use security_profile::{string_carries, ProfileKind};

/// Whether a `SecurityProfile` field (`seccomp`, `apparmor`) of the security context encoded in
/// `context` is also carried by its deprecated string, for a runtime that reads only the string.
/// (v1alpha2 and v1 encode these messages alike.) The pod-level AppArmor profile has no string.
pub(crate) fn profile_carried_by_string(message: &str, field: &str, context: &[u8]) -> bool {
    match (message, field) {
        ("LinuxContainerSecurityContext", "seccomp") => v1::LinuxContainerSecurityContext::decode(context)
            .is_ok_and(|c| string_carries(ProfileKind::Seccomp, &c.seccomp_profile_path, &c.seccomp)),
        ("LinuxContainerSecurityContext", "apparmor") => v1::LinuxContainerSecurityContext::decode(context)
            .is_ok_and(|c| string_carries(ProfileKind::AppArmor, &c.apparmor_profile, &c.apparmor)),
        ("LinuxSandboxSecurityContext", "seccomp") => v1::LinuxSandboxSecurityContext::decode(context)
            .is_ok_and(|c| string_carries(ProfileKind::Seccomp, &c.seccomp_profile_path, &c.seccomp)),
        _ => false,
    }
}

/// A v1 `bytes` env value as an older version's `string`; non-UTF-8 is a loss (left empty).
fn utf8_value(cx: &mut Cx, value: Vec<u8>) -> String {
    String::from_utf8(value).unwrap_or_else(|_| {
        cx.lost("KeyValue.value", LossReason::NotUtf8);
        String::new()
    })
}
