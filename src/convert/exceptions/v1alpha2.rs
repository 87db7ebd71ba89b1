//! Hand-written conversions between v1alpha2 and v1 (see `rules.rs` for why each exists).

use super::security_profile::{container_up_to_v1, reconcile, sandbox_up_to_v1, ProfileKind};
use super::utf8_value;
use crate::api::{v1 as new, v1alpha2 as old};
use crate::convert::Cx;

pub fn key_value_to_v1(src: old::KeyValue, dst: &mut new::KeyValue, _cx: &mut Cx) {
    dst.value = src.value.into_bytes();
}

pub fn key_value_from_v1(src: new::KeyValue, dst: &mut old::KeyValue, cx: &mut Cx) {
    dst.value = utf8_value(cx, src.value);
}

// Both sides have the strings and the profiles, and the generated code has copied them. These
// hooks make each pair consistent, so that a v1alpha2 runtime older than Kubernetes 1.20 (strings
// only) and a newer one (profile first) enforce the same profile. An unknown profile type is
// already a loss, reported by the generated enum conversion.
macro_rules! keep_profiles_consistent {
    ($($hook:ident: $from:ident::$message:ident -> $to:ident, [$(($kind:ident, $string:ident, $profile:ident)),*];)*) => {$(
        pub fn $hook(_src: $from::$message, dst: &mut $to::$message, _cx: &mut Cx) {
            $(reconcile(ProfileKind::$kind, &mut dst.$string, &mut dst.$profile);)*
        }
    )*};
}

keep_profiles_consistent! {
    sandbox_security_context_from_v1: new::LinuxSandboxSecurityContext -> old,
        [(Seccomp, seccomp_profile_path, seccomp)];
    container_security_context_from_v1: new::LinuxContainerSecurityContext -> old,
        [(Seccomp, seccomp_profile_path, seccomp), (AppArmor, apparmor_profile, apparmor)];
}

// Going up, a string that names no profile cannot reach a runtime that reads only the message.
pub fn sandbox_security_context_to_v1(
    _src: old::LinuxSandboxSecurityContext,
    dst: &mut new::LinuxSandboxSecurityContext,
    cx: &mut Cx,
) {
    sandbox_up_to_v1(dst, cx);
}

pub fn container_security_context_to_v1(
    _src: old::LinuxContainerSecurityContext,
    dst: &mut new::LinuxContainerSecurityContext,
    cx: &mut Cx,
) {
    container_up_to_v1(dst, cx);
}
