//! The one classification of every request field a runtime can lose, and why (fail-closed).
//!
//! A request field is lossable when some target lacks it: an older version or revision has no
//! such field, lacks one of its enum values, cannot represent its value, or a runtime decodes it
//! without acting on it. Each lossable field has a class here:
//!
//! - `Security`: without it the workload is less isolated (namespaces, identities, profiles,
//!   capabilities, mounts, devices, the RuntimeClass);
//! - `Behaviour`: without it the runtime runs or returns something other than asked (limits,
//!   signals, environment, image stores, List filters);
//! - `Advisory`: a hint an older runtime may ignore without changing what runs or how isolated it
//!   is.
//!
//! Security and Behaviour losses are refused by default, Advisory ones warned about. A lossable
//! field missing from [`FIELDS`] is refused as well, and `tests/classification.rs` fails on it;
//! the same test checks that every entry names a real field.
//!
//! Field numbers unknown to cri-bridge's schema are classed by the message they appear in
//! ([`class_of_unknown`]), and anything inside a List filter is Behaviour: a filter the runtime
//! cannot apply would widen the answer.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Security,
    Behaviour,
    Advisory,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Security => "security",
            Class::Behaviour => "behaviour",
            Class::Advisory => "advisory",
        })
    }
}

/// One classified field, as `Message.field`.
pub struct Classified {
    pub field: &'static str,
    pub class: Class,
    pub why: &'static str,
}

const fn security(field: &'static str, why: &'static str) -> Classified {
    Classified { field, class: Class::Security, why }
}
const fn behaviour(field: &'static str, why: &'static str) -> Classified {
    Classified { field, class: Class::Behaviour, why }
}
const fn advisory(field: &'static str, why: &'static str) -> Classified {
    Classified { field, class: Class::Advisory, why }
}

/// Every lossable request field, by message.
pub const FIELDS: &[Classified] = &[
    security("Capability.add_ambient_capabilities", "ambient capabilities would silently not be granted"),
    security("ContainerConfig.CDI_devices", "CDI devices would silently not be injected"),
    behaviour("ContainerConfig.stop_signal", "the container would be stopped with another signal"),
    security("ContainerConfig.windows", "Windows resources and security context (HostProcess, run-as user)"),
    behaviour("ContainerStateValue.state", "a List filter on a state the runtime lacks would widen the answer"),
    advisory(
        "ImageSpec.annotations",
        "pull hints; a runtime that predates them pulls the image as named, for the node's platform",
    ),
    behaviour("ImageSpec.image_ref", "the image would be resolved from another reference"),
    behaviour(
        "ImageSpec.runtime_handler",
        "the image would be pulled into, or looked up in, the default runtime's store",
    ),
    advisory(
        "ImageSpec.user_specified_image",
        "the image as the user wrote it, for display; the image pulled is `image`",
    ),
    security(
        "LinuxSandboxSecurityContext.seccomp_profile_path",
        "a seccomp string alone, that names no profile or that the runtime does not read: a runtime reading only \
         SecurityProfile would run the pod unconfined",
    ),
    security(
        "LinuxContainerSecurityContext.seccomp_profile_path",
        "a seccomp string alone, that names no profile or that the runtime does not read: a runtime reading only \
         SecurityProfile would run the container unconfined",
    ),
    security(
        "LinuxContainerSecurityContext.apparmor_profile",
        "an AppArmor string alone, that names no profile or that the runtime does not read: a runtime reading only \
         SecurityProfile would apply none",
    ),
    behaviour("KeyValue.value", "a value the target cannot carry (non-UTF-8) would reach the container changed"),
    behaviour("LinuxContainerResources.hugepage_limits", "huge page limits would not be enforced"),
    behaviour("LinuxContainerResources.memory_swap_limit_in_bytes", "the container could swap beyond its limit"),
    behaviour("LinuxContainerResources.unified", "cgroup v2 limits (memory.high, swap) would not be set"),
    security("LinuxContainerSecurityContext.apparmor", "an AppArmor profile the target cannot express"),
    security("LinuxContainerSecurityContext.masked_paths", "without it /proc paths are exposed"),
    security("LinuxContainerSecurityContext.readonly_paths", "without it /proc paths are writable"),
    security("LinuxContainerSecurityContext.run_as_group", "the process would run with the image's group"),
    security("LinuxContainerSecurityContext.seccomp", "a seccomp profile the target cannot express"),
    security(
        "LinuxContainerSecurityContext.supplemental_groups_policy",
        "Strict drops the image's groups; without it they are merged in",
    ),
    advisory(
        "LinuxPodSandboxConfig.overhead",
        "a sizing hint (VM runtimes); the kubelet creates and limits the pod cgroup itself",
    ),
    advisory(
        "LinuxPodSandboxConfig.resources",
        "a sizing hint (VM runtimes); the kubelet creates and limits the pod cgroup itself",
    ),
    security("LinuxSandboxSecurityContext.apparmor", "an AppArmor profile the target cannot express"),
    security("LinuxSandboxSecurityContext.run_as_group", "the pod would run with the image's group"),
    security("LinuxSandboxSecurityContext.seccomp", "a seccomp profile the target cannot express"),
    security(
        "LinuxSandboxSecurityContext.supplemental_groups_policy",
        "Strict drops the image's groups; without it they are merged in",
    ),
    security("Mount.gidMappings", "ID-mapped mount: without it files appear with host IDs"),
    security("Mount.image", "image volume: without it the mount source changes meaning"),
    security("Mount.image_sub_path", "image volume sub-path: without it the whole image is mounted"),
    security(
        "Mount.mount_options",
        "bind-mount options (noexec, nodev, nosuid): without them the mount allows what they forbid",
    ),
    security("Mount.propagation", "a propagation mode the target lacks would become private or shared"),
    security("Mount.recursive_read_only", "without it submounts stay writable"),
    security("Mount.uidMappings", "ID-mapped mount: without it files appear with host IDs"),
    security("NamespaceOption.ipc", "an IPC namespace mode the target cannot express"),
    security("NamespaceOption.network", "a network namespace mode the target cannot express"),
    security("NamespaceOption.pid", "a PID namespace mode the target cannot express"),
    security("NamespaceOption.target_id", "joins another container's PID namespace"),
    security("NamespaceOption.userns_options", "user namespace: without it container root is host root"),
    security("PodSandboxConfig.windows", "Windows pod security context (HostProcess, run-as user, gMSA, host network)"),
    behaviour("PodSandboxStateValue.state", "a List filter on a state the runtime lacks would widen the answer"),
    behaviour("PortMapping.protocol", "the port would be mapped for another protocol (SCTP as TCP)"),
    security(
        "RunPodSandboxRequest.runtime_handler",
        "the RuntimeClass (gVisor, Kata): without it the pod runs under the default runtime",
    ),
    security("SecurityProfile.profile_type", "a profile type the target does not know"),
    behaviour("UpdateContainerResourcesRequest.annotations", "experimental resources to update would be ignored"),
    behaviour("UpdateContainerResourcesRequest.windows", "the Windows limits would not be updated"),
    security("UserNamespace.mode", "a user namespace mode the target lacks"),
    security("WindowsContainerConfig.security_context", "the Windows identity the container runs as"),
    behaviour("WindowsContainerResources.affinity_cpus", "CPU affinity would not be set"),
    behaviour("WindowsContainerResources.rootfs_size_in_bytes", "the root filesystem size would not be limited"),
    security("WindowsContainerSecurityContext.credential_spec", "the gMSA identity the container runs as"),
    security("WindowsContainerSecurityContext.host_process", "a HostProcess container runs on the host"),
    security("WindowsNamespaceOption.network", "a Windows network namespace mode the target cannot express"),
    security("WindowsSandboxSecurityContext.namespace_options", "Windows namespace modes (host network)"),
];

/// Messages that carry isolation: an unknown field number in one is a security loss.
pub const SECURITY_MESSAGES: &[&str] = &[
    "Capability",
    "CDIDevice",
    "Device",
    "IDMapping",
    "LinuxContainerSecurityContext",
    "LinuxSandboxSecurityContext",
    "Mount",
    "NamespaceOption",
    "SecurityProfile",
    "UserNamespace",
    "WindowsContainerSecurityContext",
    "WindowsNamespaceOption",
    "WindowsSandboxSecurityContext",
];

/// Requests that only read: an unknown field number in one (not in a filter) can only ask for
/// more or other detail, so it is advisory.
pub const ADVISORY_MESSAGES: &[&str] = &[
    "ContainerStatsRequest",
    "ContainerStatusRequest",
    "GetEventsRequest",
    "ImageFsInfoRequest",
    "ListMetricDescriptorsRequest",
    "ListPodSandboxMetricsRequest",
    "PodSandboxStatsRequest",
    "PodSandboxStatusRequest",
    "RuntimeConfigRequest",
    "StatusRequest",
    "VersionRequest",
];

/// The class of a lost field `Message.field` (or `Message.#N`) found at `path`.
pub fn class_of(field: &str, path: &str) -> (Class, &'static str) {
    if path.starts_with("filter.") || path.contains(".filter.") {
        return (Class::Behaviour, "a List filter the runtime cannot apply would widen the answer");
    }
    if let Some((message, _)) = field.split_once(".#") {
        return (class_of_unknown(message), "a field cri-bridge's schema does not know: its meaning cannot be judged");
    }
    match FIELDS.iter().find(|c| c.field == field) {
        Some(c) => (c.class, c.why),
        None => (Class::Behaviour, "not classified: refused until it is"),
    }
}

/// The class of an unknown field number inside `message`.
pub fn class_of_unknown(message: &str) -> Class {
    if SECURITY_MESSAGES.contains(&message) {
        Class::Security
    } else if ADVISORY_MESSAGES.contains(&message) {
        Class::Advisory
    } else {
        Class::Behaviour
    }
}
