//! Hand-written conversions between v1alpha2 and v1 (see `rules.rs` for why each exists).

use super::security_profile::{reconcile, ProfileKind};
use crate::api::{v1 as new, v1alpha2 as old};
use crate::convert::{Cx, LossReason};

pub fn key_value_to_v1(src: old::KeyValue, dst: &mut new::KeyValue, _cx: &mut Cx) {
    dst.value = src.value.into_bytes();
}

pub fn key_value_from_v1(src: new::KeyValue, dst: &mut old::KeyValue, cx: &mut Cx) {
    match String::from_utf8(src.value) {
        Ok(value) => dst.value = value,
        Err(_) => cx.lost("KeyValue.value", LossReason::NotUtf8),
    }
}

// Both sides have the strings and the profiles; the generated code has copied them. The hooks
// make each pair consistent, so a v1alpha2 runtime older than 1.20 (strings only) and a newer one
// (profile first) enforce the same profile. An unknown profile type is already a loss, reported
// by the generated enum conversion.

pub fn sandbox_security_context_to_v1(
    _src: old::LinuxSandboxSecurityContext,
    dst: &mut new::LinuxSandboxSecurityContext,
    _cx: &mut Cx,
) {
    reconcile(ProfileKind::Seccomp, &mut dst.seccomp_profile_path, &mut dst.seccomp);
}

pub fn sandbox_security_context_from_v1(
    _src: new::LinuxSandboxSecurityContext,
    dst: &mut old::LinuxSandboxSecurityContext,
    _cx: &mut Cx,
) {
    reconcile(ProfileKind::Seccomp, &mut dst.seccomp_profile_path, &mut dst.seccomp);
}

pub fn container_security_context_to_v1(
    _src: old::LinuxContainerSecurityContext,
    dst: &mut new::LinuxContainerSecurityContext,
    _cx: &mut Cx,
) {
    reconcile(ProfileKind::Seccomp, &mut dst.seccomp_profile_path, &mut dst.seccomp);
    reconcile(ProfileKind::AppArmor, &mut dst.apparmor_profile, &mut dst.apparmor);
}

pub fn container_security_context_from_v1(
    _src: new::LinuxContainerSecurityContext,
    dst: &mut old::LinuxContainerSecurityContext,
    _cx: &mut Cx,
) {
    reconcile(ProfileKind::Seccomp, &mut dst.seccomp_profile_path, &mut dst.seccomp);
    reconcile(ProfileKind::AppArmor, &mut dst.apparmor_profile, &mut dst.apparmor);
}
