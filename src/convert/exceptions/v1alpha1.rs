//! Hand-written conversions between v1alpha1 and v1 (see `rules.rs` for why each exists).
//! Each hook receives the source with its generated fields already moved out, and the target
//! with those fields filled in; it converts the fields its rule claims.

use super::security_profile::{container_up_to_v1, reconcile, sandbox_up_to_v1, ProfileKind};
use super::utf8_value;
use crate::api::{v1 as new, v1alpha1 as old};
use crate::convert::{Cx, IsSet, LossReason};
use new::NamespaceMode;

/// Booleans become modes by meaning: host ↔ NODE, otherwise the private mode Kubernetes used
/// before modes existed (POD for network and IPC, CONTAINER for PID).
pub fn namespace_option_to_v1(src: old::NamespaceOption, dst: &mut new::NamespaceOption, _cx: &mut Cx) {
    let mode = |host: bool, private: NamespaceMode| if host { NamespaceMode::Node } else { private } as i32;
    dst.network = mode(src.host_network, NamespaceMode::Pod);
    dst.pid = mode(src.host_pid, NamespaceMode::Container);
    dst.ipc = mode(src.host_ipc, NamespaceMode::Pod);
}

/// Modes become booleans by meaning; a mode with no boolean form (pid POD or TARGET, network or
/// IPC CONTAINER) is a loss, never a silent `false`.
pub fn namespace_option_from_v1(src: new::NamespaceOption, dst: &mut old::NamespaceOption, cx: &mut Cx) {
    dst.host_network = host(cx, "NamespaceOption.network", src.network, NamespaceMode::Pod);
    dst.host_pid = host(cx, "NamespaceOption.pid", src.pid, NamespaceMode::Container);
    dst.host_ipc = host(cx, "NamespaceOption.ipc", src.ipc, NamespaceMode::Pod);
    if src.target_id.is_set() {
        cx.lost("NamespaceOption.target_id", LossReason::NoField);
    }
    // `mode: NODE` without mappings (the kubelet's default) is what v1alpha1 does anyway.
    if let Some(userns) = src.userns_options {
        if !crate::convert::userns_is_host(&prost::Message::encode_to_vec(&userns)) {
            cx.lost("NamespaceOption.userns_options", LossReason::NoField);
        }
    }
}

fn host(cx: &mut Cx, field: &'static str, mode: i32, private: NamespaceMode) -> bool {
    match NamespaceMode::try_from(mode) {
        Ok(NamespaceMode::Node) => true,
        Ok(m) if m == private => false,
        Ok(NamespaceMode::Pod) => {
            cx.lost(field, LossReason::NoEquivalent("mode POD has no v1alpha1 form"));
            false
        }
        Ok(NamespaceMode::Container) => {
            cx.lost(field, LossReason::NoEquivalent("mode CONTAINER has no v1alpha1 form"));
            false
        }
        Ok(NamespaceMode::Target) => {
            cx.lost(field, LossReason::NoEquivalent("mode TARGET has no v1alpha1 form"));
            false
        }
        Err(_) => {
            cx.lost(field, LossReason::EnumValue(mode));
            false
        }
    }
}

/// In v1alpha1 an absent `NamespaceOption` is all `false`: private namespaces. In v1 an absent
/// one is all zero: pid POD, shared with the pod. So the private modes are written out, down to
/// the container's PID namespace, whenever the v1alpha1 request left them out.
fn private_namespaces() -> new::NamespaceOption {
    let mut options = new::NamespaceOption::default();
    namespace_option_to_v1(old::NamespaceOption::default(), &mut options, &mut Cx::counting());
    options
}

pub fn pod_sandbox_config_to_v1(_src: old::PodSandboxConfig, dst: &mut new::PodSandboxConfig, _cx: &mut Cx) {
    let linux = dst.linux.get_or_insert_with(Default::default);
    let context = linux.security_context.get_or_insert_with(Default::default);
    context.namespace_options.get_or_insert_with(private_namespaces);
}

pub fn pod_sandbox_config_from_v1(_src: new::PodSandboxConfig, _dst: &mut old::PodSandboxConfig, _cx: &mut Cx) {}

pub fn container_config_to_v1(_src: old::ContainerConfig, dst: &mut new::ContainerConfig, _cx: &mut Cx) {
    let linux = dst.linux.get_or_insert_with(Default::default);
    let context = linux.security_context.get_or_insert_with(Default::default);
    context.namespace_options.get_or_insert_with(private_namespaces);
}

pub fn container_config_from_v1(_src: new::ContainerConfig, _dst: &mut old::ContainerConfig, _cx: &mut Cx) {}

pub fn status_response_to_v1(_src: old::StatusResponse, _dst: &mut new::StatusResponse, _cx: &mut Cx) {}

/// Kubernetes 1.9's kubelet and crictl decode each `info` value as JSON and fail on the plain
/// strings containerd puts there (`"golang": "go1.19"`): such a value becomes the JSON string
/// holding it, so its content reaches the caller whole. JSON values pass unchanged.
pub fn status_response_from_v1(_src: new::StatusResponse, dst: &mut old::StatusResponse, _cx: &mut Cx) {
    for value in dst.info.values_mut() {
        if serde_json::from_str::<serde::de::IgnoredAny>(value).is_err() {
            *value = serde_json::Value::String(std::mem::take(value)).to_string();
        }
    }
}

/// A storage UUID is not a mountpoint: reported, never reinterpreted.
pub fn filesystem_usage_to_v1(src: old::FilesystemUsage, _dst: &mut new::FilesystemUsage, cx: &mut Cx) {
    if src.storage_id.is_set() {
        cx.lost(
            "FilesystemUsage.storage_id",
            LossReason::NoEquivalent("a v1alpha1 storage UUID is not a v1 mountpoint"),
        );
    }
}

pub fn filesystem_usage_from_v1(src: new::FilesystemUsage, _dst: &mut old::FilesystemUsage, cx: &mut Cx) {
    if src.fs_id.is_set() {
        cx.lost("FilesystemUsage.fs_id", LossReason::NoEquivalent("a v1 mountpoint is not a v1alpha1 storage UUID"));
    }
}

pub fn key_value_to_v1(src: old::KeyValue, dst: &mut new::KeyValue, _cx: &mut Cx) {
    dst.value = src.value.into_bytes();
}

pub fn key_value_from_v1(src: new::KeyValue, dst: &mut old::KeyValue, cx: &mut Cx) {
    dst.value = utf8_value(cx, src.value);
}

/// v1alpha1 has only the seccomp string: the v1 profile is derived from it.
pub fn sandbox_security_context_to_v1(
    _src: old::LinuxSandboxSecurityContext,
    dst: &mut new::LinuxSandboxSecurityContext,
    cx: &mut Cx,
) {
    sandbox_up_to_v1(dst, cx);
}

pub fn sandbox_security_context_from_v1(
    src: new::LinuxSandboxSecurityContext,
    dst: &mut old::LinuxSandboxSecurityContext,
    cx: &mut Cx,
) {
    let mut seccomp = src.seccomp;
    if !reconcile(ProfileKind::Seccomp, &mut dst.seccomp_profile_path, &mut seccomp) {
        cx.lost(
            "LinuxSandboxSecurityContext.seccomp",
            LossReason::NoEquivalent("the profile type has no v1alpha1 string form"),
        );
    }
    if src.apparmor.is_set() {
        cx.lost(
            "LinuxSandboxSecurityContext.apparmor",
            LossReason::NoEquivalent("v1alpha1 has no pod-level AppArmor profile"),
        );
    }
}

/// v1alpha1 has only the seccomp and AppArmor strings: the v1 profiles are derived from them.
pub fn container_security_context_to_v1(
    _src: old::LinuxContainerSecurityContext,
    dst: &mut new::LinuxContainerSecurityContext,
    cx: &mut Cx,
) {
    container_up_to_v1(dst, cx);
}

pub fn container_security_context_from_v1(
    src: new::LinuxContainerSecurityContext,
    dst: &mut old::LinuxContainerSecurityContext,
    cx: &mut Cx,
) {
    let (mut seccomp, mut apparmor) = (src.seccomp, src.apparmor);
    if !reconcile(ProfileKind::Seccomp, &mut dst.seccomp_profile_path, &mut seccomp) {
        cx.lost(
            "LinuxContainerSecurityContext.seccomp",
            LossReason::NoEquivalent("the profile type has no v1alpha1 string form"),
        );
    }
    if !reconcile(ProfileKind::AppArmor, &mut dst.apparmor_profile, &mut apparmor) {
        cx.lost(
            "LinuxContainerSecurityContext.apparmor",
            LossReason::NoEquivalent("the profile type has no v1alpha1 string form"),
        );
    }
}
