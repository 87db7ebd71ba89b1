//! The pod-scoped policy's pure parts: which RPCs a caller held to its pod may make, which
//! sandbox or container a request names (checked against the runtime by the forwarder), how a
//! list is narrowed to the pod, whether a create asks for privilege, and whether an event is
//! the pod's. The pod is the caller's cgroup's, never anything the caller sends.
//!
//! Lists are narrowed by the label the kubelet puts on every sandbox and container it makes
//! (`io.kubernetes.pod.uid`): one `filter { label_selector }` entry is appended to the request's
//! bytes, which protobuf merges into whatever filter the caller sent (the last entry of a key
//! wins, so a caller's own entry for that key is overridden). What no kubelet made has no such
//! label and is not listed.

use super::class::{class_of, Class, Denied};
use crate::api::{v1, RpcInfo};
use crate::convert::wire::string_field;
use crate::version::CriVersion;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use std::path::{Component, Path, PathBuf};

/// The label the kubelet puts on every sandbox and container, naming its pod's UID.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";

/// RPCs a pod-scoped caller may make at all (each then held to its pod): not a new pod, not the
/// node's image store or runtime config, not the pod metrics lists (no filter to narrow them),
/// and nothing cri-bridge does not know.
pub fn allowed(method: &str) -> Result<(), Denied> {
    let denied = |why| Err(Denied { why });
    match (method, class_of(method)) {
        ("RunPodSandbox" | "RestorePod", _) => denied("a pod-scoped caller cannot make a pod"),
        ("UpdateRuntimeConfig", _) => denied("the runtime's config is the node's"),
        ("ListPodSandboxMetrics" | "StreamPodSandboxMetrics", _) => {
            denied("pod metrics cannot be narrowed to one pod (the request has no filter)")
        }
        (_, Some(Class::ImageMutate)) => denied("the image store is the node's"),
        (_, None) => denied("cri-bridge does not know the RPC (newer than its schema)"),
        _ => Ok(()),
    }
}

/// The sandbox or container a request names, to be checked against the caller's pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The request names no sandbox or container (a list, a version, an image read).
    Nothing,
    Sandbox(String),
    Container(String),
}

/// What `request` of `rpc` names: its `container_id`, else its `pod_sandbox_id` (top-level
/// fields; an empty id is still a name, one that no pod owns).
pub fn owner(version: CriVersion, rpc: &RpcInfo, request: &[u8]) -> Owner {
    let schema = version.schema();
    let field = |name: &str| schema.field_by_name(&format!("{}.{name}", rpc.request)).map(|(_, f)| f.number);
    if let Some(number) = field("container_id") {
        return Owner::Container(string_field(request, number).unwrap_or_default());
    }
    if let Some(number) = field("pod_sandbox_id") {
        return Owner::Sandbox(string_field(request, number).unwrap_or_default());
    }
    Owner::Nothing
}

/// The bytes to append to a list request of `rpc` so that it lists only `pod_uid`'s sandboxes
/// or containers; `None` when the request has no filter with a label selector.
pub fn narrowing(version: CriVersion, rpc: &RpcInfo, pod_uid: &str) -> Option<Vec<u8>> {
    let schema = version.schema();
    let (_, filter) = schema.field_by_name(&format!("{}.filter", rpc.request))?;
    let filter_type = schema.messages.get(filter.message?)?;
    let (_, selector) = schema.field_by_name(&format!("{}.label_selector", filter_type.name))?;
    let entry = length_delimited(&[(1, POD_UID_LABEL.as_bytes()), (2, pod_uid.as_bytes())]);
    let filter_bytes = length_delimited(&[(selector.number, &entry)]);
    Some(length_delimited(&[(filter.number, &filter_bytes)]))
}

/// Length-delimited fields, encoded in order.
pub(super) fn length_delimited(fields: &[(u32, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (number, value) in fields {
        encode_key(*number, WireType::LengthDelimited, &mut out);
        encode_varint(value.len() as u64, &mut out);
        out.extend_from_slice(value);
    }
    out
}

/// Annotation prefixes a pod-scoped create may set: the kubelet's informational ones. Others
/// may change what a runtime does (CRI-O's `io.kubernetes.cri-o.*` devices and user namespaces,
/// crun's `run.oci.*`, Kata's, systemd properties), so they are refused.
pub(super) const ANNOTATIONS_ALLOWED: &[&str] = &["io.kubernetes.container.", "io.kubernetes.pod."];

/// Whether `path` is one of `roots` or below one, by whole components, absolute, with no `..`
/// or `.` in it.
pub fn under_host_paths(path: &str, roots: &[PathBuf]) -> bool {
    let path = Path::new(path);
    let plain = path.is_absolute() && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    plain && roots.iter().any(|root| path.starts_with(root))
}

/// What a checkpoint request makes the runtime write on the host, and must be under the
/// socket's `host_paths`: `CheckpointContainer`'s `location`, `CheckpointPod`'s `output_path`
/// (the runtime writes there as root). v1alpha2 encodes them as v1 does.
pub fn written_path(rpc: &RpcInfo, request: &[u8]) -> Option<String> {
    match rpc.method {
        "CheckpointContainer" => v1::CheckpointContainerRequest::decode(request).ok().map(|r| r.location),
        "CheckpointPod" => v1::CheckpointPodRequest::decode(request).ok().map(|r| r.output_path),
        _ => None,
    }
}

/// Whether the runtime writing at `path` stays under `host_paths` (an empty path: the
/// runtime's own default place).
pub fn may_write(path: &str, host_paths: &[PathBuf]) -> bool {
    path.is_empty() || under_host_paths(path, host_paths)
}

/// Containers a request names beside the one [`owner`] finds: `CheckpointPod`'s
/// `container_ids`, each of which must be the pod's too.
pub fn other_containers(rpc: &RpcInfo, request: &[u8]) -> Vec<String> {
    match rpc.method {
        "CheckpointPod" => v1::CheckpointPodRequest::decode(request).map(|r| r.container_ids).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Whether a v1 `ContainerEventResponse` is about `pod_uid`'s sandbox.
pub fn event_of_pod(event: &[u8], pod_uid: &str) -> bool {
    v1::ContainerEventResponse::decode(event)
        .ok()
        .and_then(|e| e.pod_sandbox_status)
        .and_then(|s| s.metadata)
        .is_some_and(|m| m.uid == pod_uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::CriVersion::{V1alpha2, V1};

    fn rpc(version: CriVersion, method: &str) -> &'static RpcInfo {
        version.schema().rpcs.iter().find(|r| r.method == method).unwrap()
    }

    #[test]
    fn a_narrowed_list_request_decodes_with_the_pods_label_over_the_callers() {
        let asked = v1::ListContainersRequest {
            filter: Some(v1::ContainerFilter {
                state: Some(v1::ContainerStateValue { state: 1 }),
                label_selector: [(POD_UID_LABEL.to_string(), "other".to_string())].into(),
                ..Default::default()
            }),
        };
        let mut bytes = asked.encode_to_vec();
        bytes.extend(narrowing(V1, rpc(V1, "ListContainers"), "mine").unwrap());
        let sent = v1::ListContainersRequest::decode(&bytes[..]).unwrap().filter.unwrap();
        assert_eq!(sent.label_selector.get(POD_UID_LABEL).map(String::as_str), Some("mine"));
        assert_eq!(sent.state, Some(v1::ContainerStateValue { state: 1 }), "the caller's filter is kept");
        assert!(narrowing(V1alpha2, rpc(V1alpha2, "ListPodSandbox"), "mine").is_some());
        assert!(narrowing(V1, rpc(V1, "ListImages"), "mine").is_none(), "images are no pod's");
    }

    #[test]
    fn requests_name_their_container_else_their_sandbox() {
        let exec = v1::ExecSyncRequest { container_id: "c1".into(), ..Default::default() };
        assert_eq!(owner(V1, rpc(V1, "ExecSync"), &exec.encode_to_vec()), Owner::Container("c1".into()));
        let forward = v1::PortForwardRequest { pod_sandbox_id: "p1".into(), port: vec![80] };
        assert_eq!(owner(V1, rpc(V1, "PortForward"), &forward.encode_to_vec()), Owner::Sandbox("p1".into()));
        let create = v1::CreateContainerRequest { pod_sandbox_id: "p1".into(), ..Default::default() };
        assert_eq!(owner(V1, rpc(V1, "CreateContainer"), &create.encode_to_vec()), Owner::Sandbox("p1".into()));
        assert_eq!(owner(V1, rpc(V1, "ListContainers"), &[]), Owner::Nothing);
        assert_eq!(owner(V1, rpc(V1, "StopContainer"), &[]), Owner::Container(String::new()));
    }

    #[test]
    fn a_checkpoint_is_written_under_host_paths_and_names_the_pods_containers_only() {
        let roots = [PathBuf::from("/var/lib/checkpoints")];
        let container =
            v1::CheckpointContainerRequest { container_id: "c".into(), location: "/etc/x.tar".into(), timeout: 0 };
        let path = written_path(rpc(V1, "CheckpointContainer"), &container.encode_to_vec()).unwrap();
        assert!(!may_write(&path, &roots));
        assert!(may_write("/var/lib/checkpoints/c.tar", &roots));
        assert!(may_write("", &roots), "the runtime's own default place");
        let pod = v1::CheckpointPodRequest {
            output_path: "/var/lib/checkpoints/p".into(),
            container_ids: vec!["a".into(), "b".into()],
            ..Default::default()
        };
        let bytes = pod.encode_to_vec();
        assert_eq!(written_path(rpc(V1, "CheckpointPod"), &bytes).as_deref(), Some("/var/lib/checkpoints/p"));
        assert_eq!(other_containers(rpc(V1, "CheckpointPod"), &bytes), vec!["a".to_string(), "b".to_string()]);
        assert_eq!(written_path(rpc(V1, "ExecSync"), &[]), None);
    }

    #[test]
    fn a_pod_scoped_caller_makes_no_pod_and_touches_no_image() {
        for method in ["RunPodSandbox", "PullImage", "RemoveImage", "UpdateRuntimeConfig", "Newer"] {
            assert!(allowed(method).is_err(), "{method}");
        }
        for method in ["ExecSync", "CreateContainer", "ListContainers", "GetContainerEvents", "ImageStatus"] {
            assert!(allowed(method).is_ok(), "{method}");
        }
    }
}
