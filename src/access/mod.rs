//! What each CRI RPC does to the node, and what an endpoint's policy lets a caller do (issue 38:
//! least privilege at the interposer). Pure: an RPC and its request bytes in, a decision out.
//!
//! Every RPC of every version is in one [`Class`] ([`class_of`]); an RPC cri-bridge does not know
//! (one newer than its schema) is in none, and every policy but an explicit allow list that names
//! it denies it. The read-only and pod-scoped policies pass a status request that asks for
//! `verbose` info without the flag, so the runtime gives none: containerd puts the container's
//! whole OCI spec there (its environment, secrets included), and `Status`'s info holds the
//! runtime's config (registry credentials included). A pod-scoped caller is held to its own pod
//! ([`pod`]).

pub mod brownout;
mod class;
pub mod create;
pub mod pod;

pub use class::{class_of, mutates, Class, Denied};

use crate::api::RpcInfo;
use crate::convert::wire::last_varint;
use crate::version::CriVersion;
use std::path::PathBuf;

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
    /// The caller's own pod, found from its cgroup: reads, shells and changes that name its
    /// sandbox or its containers, lists and events filtered to it, creates without privilege
    /// (host paths only under these).
    PodScoped {
        host_paths: Vec<PathBuf>,
        /// `Localhost` seccomp profiles its creates may name (`localhost_profiles.seccomp`).
        seccomp_profiles: Vec<String>,
        /// `Localhost` AppArmor profiles its creates may name (`localhost_profiles.apparmor`).
        apparmor_profiles: Vec<String>,
    },
}

/// What a call may do, when its policy lets it go on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Sent without its `verbose` flag (the field's number): the runtime gives no info.
    pub drop_verbose: Option<u32>,
    /// Held to the caller's pod ([`pod`]): the ids it names are checked, a list filtered, a
    /// create judged for privilege.
    pub pod_scoped: bool,
}

impl Policy {
    /// The policy's name in the config and in denials.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::All => "all",
            Policy::ReadOnly => "read-only",
            Policy::Images => "images",
            Policy::Allow(_) => "allow",
            Policy::PodScoped { .. } => "pod-scoped",
        }
    }

    /// Whether a call of `rpc` (of `version`) with `request` (its message bytes) may go on, and
    /// how; if not, why, for a `PERMISSION_DENIED`.
    pub fn decide(&self, version: CriVersion, rpc: &RpcInfo, request: &[u8]) -> Result<Verdict, Denied> {
        let denied = |why: &'static str| Err(Denied { why });
        let pass = Ok(Verdict::default());
        let without_verbose = || Verdict { drop_verbose: verbose_flag(version, rpc, request), ..Verdict::default() };
        match self {
            Policy::All => pass,
            Policy::Allow(listed) => match listed.iter().any(|l| is_rpc(l, rpc)) {
                true => pass,
                false => denied("the RPC is not in its allow list"),
            },
            Policy::Images => match rpc.service {
                "ImageService" => pass,
                _ => denied("it serves the ImageService only"),
            },
            Policy::ReadOnly => match class_of(rpc.method) {
                Some(Class::Read) => Ok(without_verbose()),
                Some(Class::Shell) => denied("exec, attach and port-forward are a shell in the container"),
                Some(Class::Mutate | Class::ImageMutate) => denied("the RPC changes the node"),
                None => denied("cri-bridge does not know the RPC (newer than its schema)"),
            },
            Policy::PodScoped { .. } => {
                pod::allowed(rpc.method)?;
                Ok(Verdict { pod_scoped: true, ..without_verbose() })
            }
        }
    }
}

fn is_rpc(listed: &str, rpc: &RpcInfo) -> bool {
    listed.split_once('/').is_some_and(|(service, method)| service == rpc.service && method == rpc.method)
}

/// The number of a status request's `verbose` field, when the request sets it.
fn verbose_flag(version: CriVersion, rpc: &RpcInfo, request: &[u8]) -> Option<u32> {
    let (_, verbose) = version.schema().field_by_name(&format!("{}.verbose", rpc.request))?;
    last_varint(request, verbose.number).filter(|v| *v != 0).map(|_| verbose.number)
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
        assert_eq!(policy.decide(V1, status, &verbose).unwrap().drop_verbose, Some(2), "sent without the flag");
        assert_eq!(policy.decide(V1, status, &verbose[..3]).unwrap(), Verdict::default());
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
