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

/// Whether a security-profile field of the security context encoded in `context`, set in a
/// request to a runtime that does not read it, reaches the runtime all the same through its
/// twin (v1alpha2 and v1 encode these messages alike; the pod-level AppArmor profile has none):
/// - a `SecurityProfile` (`seccomp`, `apparmor`), to a runtime that reads only the string: when
///   the deprecated string names the same profile;
/// - a deprecated string, to a runtime that reads only the message: when the message is there,
///   which is what CRI v1 says a runtime applies when both are set; and a seccomp string
///   `unconfined` alone, which asks what such a runtime does with no message (it applies none).
pub(crate) fn profile_carried_by_twin(message: &str, field: &str, context: &[u8]) -> bool {
    use v1::{LinuxContainerSecurityContext as Container, LinuxSandboxSecurityContext as Sandbox};
    match (message, field) {
        ("LinuxContainerSecurityContext", "seccomp") => Container::decode(context)
            .is_ok_and(|c| string_carries(ProfileKind::Seccomp, &c.seccomp_profile_path, &c.seccomp)),
        ("LinuxContainerSecurityContext", "apparmor") => Container::decode(context)
            .is_ok_and(|c| string_carries(ProfileKind::AppArmor, &c.apparmor_profile, &c.apparmor)),
        ("LinuxSandboxSecurityContext", "seccomp") => Sandbox::decode(context)
            .is_ok_and(|c| string_carries(ProfileKind::Seccomp, &c.seccomp_profile_path, &c.seccomp)),
        ("LinuxContainerSecurityContext", "seccomp_profile_path") => {
            Container::decode(context).is_ok_and(|c| c.seccomp.is_some() || c.seccomp_profile_path == "unconfined")
        }
        ("LinuxContainerSecurityContext", "apparmor_profile") => {
            Container::decode(context).is_ok_and(|c| c.apparmor.is_some())
        }
        ("LinuxSandboxSecurityContext", "seccomp_profile_path") => {
            Sandbox::decode(context).is_ok_and(|c| c.seccomp.is_some() || c.seccomp_profile_path == "unconfined")
        }
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
