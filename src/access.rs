//! What each CRI RPC does to the node, and what an endpoint's policy lets a caller do (issue 38:
//! least privilege at the interposer). Pure: an RPC and its request bytes in, a decision out.
//!
//! Every RPC of every version is in one [`Class`] ([`class_of`]); an RPC cri-bridge does not know
//! (one newer than its schema) is in none, and every policy but an explicit allow list that names
//! it denies it. The read-only policy also refuses a status request that asks for `verbose`
//! info: containerd puts the container's whole OCI spec there (its environment, secrets
//! included), and `Status`'s info holds the runtime's config (registry credentials included).

use crate::api::RpcInfo;
use crate::convert::wire::last_varint;
use crate::version::CriVersion;

/// What an RPC does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Reads state: versions, status, lists, stats, metrics, events, image facts.
    Read,
    /// Runs a command in a container, or opens a stream into one: a shell on the node.
    Shell,
    /// Changes what runs or how: sandboxes, containers, resources, checkpoints, runtime config.
    Mutate,
    /// Changes the image store: pulls and removals.
    ImageMutate,
}

/// Each RPC cri-bridge knows, by method name (the same in every version that has it).
const CLASSES: &[(&str, Class)] = &[
    ("Version", Class::Read),
    ("Status", Class::Read),
    ("RuntimeConfig", Class::Read),
    ("ListPodSandbox", Class::Read),
    ("StreamPodSandboxes", Class::Read),
    ("PodSandboxStatus", Class::Read),
    ("ListContainers", Class::Read),
    ("StreamContainers", Class::Read),
    ("ContainerStatus", Class::Read),
    ("ContainerStats", Class::Read),
    ("ListContainerStats", Class::Read),
    ("StreamContainerStats", Class::Read),
    ("PodSandboxStats", Class::Read),
    ("ListPodSandboxStats", Class::Read),
    ("StreamPodSandboxStats", Class::Read),
    ("ListMetricDescriptors", Class::Read),
    ("ListPodSandboxMetrics", Class::Read),
    ("StreamPodSandboxMetrics", Class::Read),
    ("GetContainerEvents", Class::Read),
    ("ImageFsInfo", Class::Read),
    ("ListImages", Class::Read),
    ("StreamImages", Class::Read),
    ("ImageStatus", Class::Read),
    ("Exec", Class::Shell),
    ("ExecSync", Class::Shell),
    ("Attach", Class::Shell),
    ("PortForward", Class::Shell),
    ("RunPodSandbox", Class::Mutate),
    ("StopPodSandbox", Class::Mutate),
    ("RemovePodSandbox", Class::Mutate),
    ("CreateContainer", Class::Mutate),
    ("StartContainer", Class::Mutate),
    ("StopContainer", Class::Mutate),
    ("RemoveContainer", Class::Mutate),
    ("UpdateContainerResources", Class::Mutate),
    ("UpdatePodSandboxResources", Class::Mutate),
    ("ReopenContainerLog", Class::Mutate),
    ("CheckpointContainer", Class::Mutate),
    ("CheckpointPod", Class::Mutate),
    ("RestorePod", Class::Mutate),
    ("UpdateRuntimeConfig", Class::Mutate),
    ("PullImage", Class::ImageMutate),
    ("RemoveImage", Class::ImageMutate),
];

/// The class of an RPC; `None` for one cri-bridge does not know.
pub fn class_of(method: &str) -> Option<Class> {
    CLASSES.iter().find(|(name, _)| *name == method).map(|(_, class)| *class)
}

/// Whether a call changes the node (what the audit log records and a uid restriction guards).
pub fn mutates(method: &str) -> bool {
    !matches!(class_of(method), Some(Class::Read))
}

/// An endpoint's policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Every RPC, as the runtime's own socket would.
    All,
    /// The [`Class::Read`] RPCs, without verbose info.
    ReadOnly,
    /// The ImageService only.
    Images,
    /// Exactly these RPCs, each `Service/Method` (`RuntimeService/ListContainers`).
    Allow(Vec<String>),
}

impl Policy {
    /// The policy's name in the config and in denials.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::All => "all",
            Policy::ReadOnly => "read-only",
            Policy::Images => "images",
            Policy::Allow(_) => "allow",
        }
    }

    /// Whether a call of `rpc` (of `version`) with `request` (its message bytes) may go on;
    /// if not, why, for a `PERMISSION_DENIED`.
    pub fn decide(&self, version: CriVersion, rpc: &RpcInfo, request: &[u8]) -> Result<(), Denied> {
        let denied = |why: &'static str| Err(Denied { why });
        match self {
            Policy::All => Ok(()),
            Policy::Allow(listed) => match listed.iter().any(|l| is_rpc(l, rpc)) {
                true => Ok(()),
                false => denied("the RPC is not in its allow list"),
            },
            Policy::Images => match rpc.service {
                "ImageService" => Ok(()),
                _ => denied("it serves the ImageService only"),
            },
            Policy::ReadOnly => match class_of(rpc.method) {
                Some(Class::Read) if asks_verbose(version, rpc, request) => {
                    denied("verbose info holds the container's spec and environment, or the runtime's config")
                }
                Some(Class::Read) => Ok(()),
                Some(Class::Shell) => denied("exec, attach and port-forward are a shell in the container"),
                Some(Class::Mutate | Class::ImageMutate) => denied("the RPC changes the node"),
                None => denied("cri-bridge does not know the RPC (newer than its schema)"),
            },
        }
    }
}

/// Why a policy denies a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denied {
    pub why: &'static str,
}

fn is_rpc(listed: &str, rpc: &RpcInfo) -> bool {
    listed.split_once('/').is_some_and(|(service, method)| service == rpc.service && method == rpc.method)
}

/// Whether a status request sets its `verbose` flag.
fn asks_verbose(version: CriVersion, rpc: &RpcInfo, request: &[u8]) -> bool {
    let field = format!("{}.verbose", rpc.request);
    match version.schema().field_by_name(&field) {
        Some((_, verbose)) => last_varint(request, verbose.number).is_some_and(|v| v != 0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::CriVersion::{V1alpha1, V1alpha2, V1};

    #[test]
    fn every_rpc_of_every_version_has_a_class() {
        for version in [V1alpha1, V1alpha2, V1] {
            for rpc in version.schema().rpcs {
                assert!(class_of(rpc.method).is_some(), "{version:?} {}/{} has no class", rpc.service, rpc.method);
            }
        }
    }

    fn rpc(version: CriVersion, service: &str, method: &str) -> &'static RpcInfo {
        version.schema().rpc(service, method).unwrap_or_else(|| panic!("{service}/{method}"))
    }

    #[test]
    fn read_only_allows_reads_without_verbose_and_nothing_else() {
        let policy = Policy::ReadOnly;
        assert!(policy.decide(V1, rpc(V1, "RuntimeService", "ListContainers"), &[]).is_ok());
        assert!(policy.decide(V1alpha2, rpc(V1alpha2, "RuntimeService", "ContainerStatus"), &[]).is_ok());
        // ContainerStatusRequest { container_id: "c", verbose: true }
        let verbose = [0x0a, 0x01, b'c', 0x10, 0x01];
        let status = rpc(V1, "RuntimeService", "ContainerStatus");
        assert!(policy.decide(V1, status, &verbose).unwrap_err().why.contains("verbose"));
        assert!(policy.decide(V1, status, &verbose[..3]).is_ok());
        for method in ["Exec", "ExecSync", "Attach", "PortForward", "CreateContainer", "RunPodSandbox"] {
            assert!(policy.decide(V1, rpc(V1, "RuntimeService", method), &[]).is_err(), "{method}");
        }
        assert!(policy.decide(V1, rpc(V1, "ImageService", "PullImage"), &[]).is_err());
        assert!(policy.decide(V1, rpc(V1, "ImageService", "ListImages"), &[]).is_ok());
    }

    #[test]
    fn images_serves_the_image_service_and_allow_its_list() {
        assert!(Policy::Images.decide(V1, rpc(V1, "ImageService", "PullImage"), &[]).is_ok());
        assert!(Policy::Images.decide(V1, rpc(V1, "RuntimeService", "Version"), &[]).is_err());
        let allow = Policy::Allow(vec!["RuntimeService/ListContainers".into()]);
        assert!(allow.decide(V1alpha2, rpc(V1alpha2, "RuntimeService", "ListContainers"), &[]).is_ok());
        assert!(allow.decide(V1, rpc(V1, "RuntimeService", "ContainerStats"), &[]).is_err());
        assert!(allow.decide(V1, rpc(V1, "ImageService", "ListImages"), &[]).is_err());
    }

    #[test]
    fn only_reads_do_not_mutate() {
        assert!(!mutates("ListContainers"));
        assert!(mutates("ExecSync"));
        assert!(mutates("PullImage"));
        assert!(mutates("SomeNewerRpc"), "an unknown RPC is judged as one that changes the node");
    }
}
