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
fn length_delimited(fields: &[(u32, &[u8])]) -> Vec<u8> {
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
const ANNOTATIONS_ALLOWED: &[&str] = &["io.kubernetes.container.", "io.kubernetes.pod."];

/// Whether a `CreateContainer` request asks for no privilege: not privileged, no host
/// namespace, no added capability, no device, no host path outside `host_paths` (the container's
/// log file included: containerd writes it where the request's sandbox config says), no
/// unconfined seccomp or AppArmor profile, no SELinux label, no annotation a runtime acts on,
/// and no pod label naming another pod. v1alpha2 encodes these fields as v1 does; v1alpha1 is
/// not taken.
pub fn create_without_privilege(
    version: CriVersion,
    request: &[u8],
    pod_uid: &str,
    host_paths: &[PathBuf],
) -> Result<(), String> {
    if version == CriVersion::V1alpha1 {
        return Err("a pod-scoped socket takes CreateContainer in v1alpha2 or v1".into());
    }
    let create =
        v1::CreateContainerRequest::decode(request).map_err(|e| format!("the request does not decode: {e}"))?;
    let config = create.config.unwrap_or_default();
    if config.labels.get(POD_UID_LABEL).is_some_and(|uid| uid != pod_uid) {
        return Err(format!("labels.{POD_UID_LABEL} names another pod"));
    }
    if let Some(key) = config.annotations.keys().find(|k| !ANNOTATIONS_ALLOWED.iter().any(|p| k.starts_with(p))) {
        return Err(format!("annotations.{key}: a runtime may act on it"));
    }
    if !config.log_path.is_empty() {
        let directory = create.sandbox_config.as_ref().map(|s| s.log_directory.as_str()).unwrap_or_default();
        let log = Path::new(directory).join(&config.log_path);
        if !under_any(&log.to_string_lossy(), host_paths) {
            return Err(format!("log_path: {} is outside the socket's host_paths {host_paths:?}", log.display()));
        }
    }
    if !config.devices.is_empty() || !config.cdi_devices.is_empty() {
        return Err("devices: a pod-scoped create adds no device".into());
    }
    for mount in &config.mounts {
        if !under_any(&mount.host_path, host_paths) {
            return Err(format!(
                "mounts: host path {:?} is outside the socket's host_paths {host_paths:?}",
                mount.host_path
            ));
        }
    }
    let context = config.linux.unwrap_or_default().security_context.unwrap_or_default();
    if context.privileged {
        return Err("security_context.privileged".into());
    }
    let capabilities = context.capabilities.unwrap_or_default();
    if !capabilities.add_capabilities.is_empty() || !capabilities.add_ambient_capabilities.is_empty() {
        return Err("security_context.capabilities: a pod-scoped create adds no capability".into());
    }
    if context.selinux_options.is_some() {
        return Err("security_context.selinux_options: a pod-scoped create sets no SELinux label".into());
    }
    let unconfined = |profile: &Option<v1::SecurityProfile>, string: &str| {
        profile.as_ref().is_some_and(|p| p.profile_type == v1::security_profile::ProfileType::Unconfined as i32)
            || string == "unconfined"
    };
    #[allow(deprecated)]
    let (seccomp, apparmor) = (
        unconfined(&context.seccomp, &context.seccomp_profile_path),
        unconfined(&context.apparmor, &context.apparmor_profile),
    );
    if seccomp || apparmor {
        return Err(
            "security_context: a pod-scoped create runs under seccomp and AppArmor (no unconfined profile)".into()
        );
    }
    let namespaces = context.namespace_options.unwrap_or_default();
    use v1::NamespaceMode::{Node, Target};
    for (name, mode) in [("network", namespaces.network), ("pid", namespaces.pid), ("ipc", namespaces.ipc)] {
        if mode == Node as i32 || mode == Target as i32 {
            return Err(format!("security_context.namespace_options.{name}: the node's or another container's"));
        }
    }
    Ok(())
}

/// Whether `path` is one of `roots` or below one, by whole components, with no `..` in it.
fn under_any(path: &str, roots: &[PathBuf]) -> bool {
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
    path.is_empty() || under_any(path, host_paths)
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
    fn a_create_with_any_privilege_is_refused() {
        let roots = [PathBuf::from("/var/log/pods")];
        let create = |edit: &dyn Fn(&mut v1::ContainerConfig)| {
            let mut config = v1::ContainerConfig::default();
            edit(&mut config);
            let request = v1::CreateContainerRequest { config: Some(config), ..Default::default() };
            create_without_privilege(V1, &request.encode_to_vec(), "mine", &roots)
        };
        let context = |edit: &dyn Fn(&mut v1::LinuxContainerSecurityContext)| {
            create(&|c: &mut v1::ContainerConfig| {
                let mut context = v1::LinuxContainerSecurityContext::default();
                edit(&mut context);
                c.linux = Some(v1::LinuxContainerConfig { security_context: Some(context), ..Default::default() });
            })
        };
        assert!(create(&|_| {}).is_ok());
        assert!(context(&|c| c.privileged = true).is_err());
        assert!(context(&|c| c.capabilities =
            Some(v1::Capability { add_capabilities: vec!["SYS_ADMIN".into()], ..Default::default() }))
        .is_err());
        assert!(context(&|c| c.namespace_options = Some(v1::NamespaceOption { pid: 2, ..Default::default() })).is_err());
        assert!(create(&|c| c.devices = vec![v1::Device::default()]).is_err());
        let mount = |path: &str| v1::Mount { host_path: path.into(), ..Default::default() };
        assert!(create(&|c| c.mounts = vec![mount("/var/log/pods/x")]).is_ok());
        assert!(create(&|c| c.mounts = vec![mount("/var/log/pods/../../etc")]).is_err());
        assert!(create(&|c| c.mounts = vec![mount("/var/log/podsx")]).is_err());
        assert!(create(&|c| c.mounts = vec![mount("/")]).is_err());
        assert!(create(&|c| c.labels = [(POD_UID_LABEL.to_string(), "other".to_string())].into()).is_err());
        let annotation = |key: &str| [(key.to_string(), "x".to_string())].into();
        assert!(create(&|c| c.annotations = annotation("io.kubernetes.container.hash")).is_ok());
        assert!(create(&|c| c.annotations = annotation("io.kubernetes.cri-o.Devices")).is_err());
        assert!(create(&|c| c.annotations = annotation("run.oci.keep_original_groups")).is_err());
        let unconfined = || Some(v1::SecurityProfile { profile_type: 1, localhost_ref: String::new() });
        assert!(context(&|c| c.seccomp = unconfined()).is_err());
        assert!(context(&|c| c.apparmor = unconfined()).is_err());
        assert!(context(
            &|c| c.selinux_options = Some(v1::SeLinuxOption { r#type: "spc_t".into(), ..Default::default() })
        )
        .is_err());
        // The log file: containerd joins the request's sandbox log directory and the log path.
        let logged = |directory: &str, path: &str| {
            let request = v1::CreateContainerRequest {
                config: Some(v1::ContainerConfig { log_path: path.into(), ..Default::default() }),
                sandbox_config: Some(v1::PodSandboxConfig { log_directory: directory.into(), ..Default::default() }),
                ..Default::default()
            };
            create_without_privilege(V1, &request.encode_to_vec(), "mine", &roots)
        };
        assert!(logged("/var/log/pods/ns_p_mine", "app/0.log").is_ok());
        assert!(logged("/etc/cron.d", "x").is_err());
        assert!(logged("/var/log/pods/ns_p_mine", "../../../etc/cron.d/x").is_err());
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
