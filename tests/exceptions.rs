//! One table test per hand-written exception and per loss-policy default, through the same
//! byte-level routes the proxy uses.

use cri_bridge::api::{v1, v1alpha1, v1alpha2};
use cri_bridge::convert::policy::{Action, LossPolicy, Side};
use cri_bridge::convert::scan::{self, Limits};
use cri_bridge::convert::{Loss, LossReason};
use cri_bridge::CriVersion::{self, V1alpha1, V1alpha2, V1};
use prost::Message;
use std::collections::HashMap;

mod common;
use common::convert;

fn paths(losses: &[Loss]) -> Vec<&str> {
    losses.iter().map(|l| l.path.as_str()).collect()
}

fn v1_pod(namespaces: v1::NamespaceOption) -> v1::RunPodSandboxRequest {
    v1::RunPodSandboxRequest {
        config: Some(v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            linux: Some(v1::LinuxPodSandboxConfig {
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: String::new(),
    }
}

fn namespaces_of_v1alpha1(req: &v1alpha1::RunPodSandboxRequest) -> v1alpha1::NamespaceOption {
    req.config.as_ref().unwrap().linux.as_ref().unwrap().security_context.as_ref().unwrap().namespace_options.unwrap()
}

const POD: i32 = v1::NamespaceMode::Pod as i32;
const CONTAINER: i32 = v1::NamespaceMode::Container as i32;
const NODE: i32 = v1::NamespaceMode::Node as i32;
const TARGET: i32 = v1::NamespaceMode::Target as i32;

#[test]
fn an_ordinary_pod_reaches_v1alpha1_without_host_namespaces() {
    // Every ordinary pod sends pid = CONTAINER (1); the bytes unchanged would read as host_pid = true.
    let ordinary = v1::NamespaceOption { network: POD, pid: CONTAINER, ipc: POD, ..Default::default() };
    let (req, losses): (v1alpha1::RunPodSandboxRequest, _) =
        convert("RunPodSandboxRequest", V1, V1alpha1, &v1_pod(ordinary.clone()));
    assert!(losses.is_empty(), "{losses:?}");
    let ns = namespaces_of_v1alpha1(&req);
    assert!(!ns.host_network && !ns.host_pid && !ns.host_ipc, "{ns:?}");

    // The same from a v1alpha2 client.
    let v1alpha2_pod = v1alpha2::RunPodSandboxRequest::decode(v1_pod(ordinary).encode_to_vec().as_slice()).unwrap();
    let (req, losses): (v1alpha1::RunPodSandboxRequest, _) =
        convert("RunPodSandboxRequest", V1alpha2, V1alpha1, &v1alpha2_pod);
    assert!(losses.is_empty(), "{losses:?}");
    assert!(!namespaces_of_v1alpha1(&req).host_pid);
}

#[test]
fn host_namespaces_map_by_meaning_both_ways() {
    let host = v1::NamespaceOption { network: NODE, pid: NODE, ipc: NODE, ..Default::default() };
    let (req, losses): (v1alpha1::RunPodSandboxRequest, _) =
        convert("RunPodSandboxRequest", V1, V1alpha1, &v1_pod(host));
    assert!(losses.is_empty());
    let ns = namespaces_of_v1alpha1(&req);
    assert!(ns.host_network && ns.host_pid && ns.host_ipc);

    for (host_network, host_pid, host_ipc, expect) in [
        (false, false, false, (POD, CONTAINER, POD)),
        (true, false, false, (NODE, CONTAINER, POD)),
        (false, true, false, (POD, NODE, POD)),
        (false, false, true, (POD, CONTAINER, NODE)),
    ] {
        let old = v1alpha1::NamespaceOption { host_network, host_pid, host_ipc };
        let (new, losses): (v1::NamespaceOption, _) = convert("NamespaceOption", V1alpha1, V1, &old);
        assert!(losses.is_empty());
        assert_eq!((new.network, new.pid, new.ipc), expect, "{old:?}");
    }
}

#[test]
fn namespace_modes_without_a_v1alpha1_form_are_losses_never_a_silent_false() {
    for (ns, lost) in [
        (v1::NamespaceOption { network: POD, pid: POD, ipc: POD, ..Default::default() }, vec!["pid"]),
        (
            v1::NamespaceOption { network: CONTAINER, pid: CONTAINER, ipc: CONTAINER, ..Default::default() },
            vec!["network", "ipc"],
        ),
        (
            v1::NamespaceOption { network: POD, pid: TARGET, ipc: POD, target_id: "c1".into(), ..Default::default() },
            vec!["pid", "target_id"],
        ),
        (
            v1::NamespaceOption {
                network: POD,
                pid: CONTAINER,
                ipc: POD,
                userns_options: Some(v1::UserNamespace::default()),
                ..Default::default()
            },
            vec!["userns_options"],
        ),
    ] {
        let (_, losses): (v1alpha1::RunPodSandboxRequest, _) =
            convert("RunPodSandboxRequest", V1, V1alpha1, &v1_pod(ns.clone()));
        let expect: Vec<String> =
            lost.iter().map(|f| format!("config.linux.security_context.namespace_options.{f}")).collect();
        assert_eq!(paths(&losses), expect, "{ns:?}");
        let refusal = LossPolicy::default().apply(Side::Request, "RunPodSandbox", &V1alpha1, losses).unwrap_err();
        assert!(refusal.to_string().contains("namespace_options"), "{refusal}");
    }
}

fn v1_container(sc: v1::LinuxContainerSecurityContext) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: "p1".into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            linux: Some(v1::LinuxContainerConfig { security_context: Some(sc), ..Default::default() }),
            ..Default::default()
        }),
        sandbox_config: None,
    }
}

fn profile(t: v1::security_profile::ProfileType, localhost_ref: &str) -> Option<v1::SecurityProfile> {
    Some(v1::SecurityProfile { profile_type: t as i32, localhost_ref: localhost_ref.into() })
}

#[test]
#[allow(deprecated)]
fn seccomp_runtime_default_given_only_as_a_profile_reaches_v1alpha2_in_both_forms() {
    use v1::security_profile::ProfileType;
    let req = v1_container(v1::LinuxContainerSecurityContext {
        seccomp: profile(ProfileType::RuntimeDefault, ""),
        ..Default::default()
    });
    let (out, losses): (v1alpha2::CreateContainerRequest, _) = convert("CreateContainerRequest", V1, V1alpha2, &req);
    assert!(losses.is_empty(), "{losses:?}");
    let sc = out.config.unwrap().linux.unwrap().security_context.unwrap();
    assert_eq!(sc.seccomp_profile_path, "runtime/default");
    // RuntimeDefault is the zero value: the profile is an empty message that must stay present.
    assert_eq!(sc.seccomp, Some(v1alpha2::SecurityProfile::default()));
    assert!(sc.apparmor.is_none() && sc.apparmor_profile.is_empty());
}

#[test]
#[allow(deprecated)]
fn profiles_and_strings_convert_to_v1alpha1_strings_and_back() {
    use v1::security_profile::ProfileType;
    let req = v1_container(v1::LinuxContainerSecurityContext {
        seccomp: profile(ProfileType::Localhost, "profiles/audit.json"),
        apparmor: profile(ProfileType::Unconfined, ""),
        ..Default::default()
    });
    let (out, losses): (v1alpha1::CreateContainerRequest, _) = convert("CreateContainerRequest", V1, V1alpha1, &req);
    assert!(losses.is_empty(), "{losses:?}");
    let sc = out.config.clone().unwrap().linux.unwrap().security_context.unwrap();
    assert_eq!(sc.seccomp_profile_path, "localhost/profiles/audit.json");
    assert_eq!(sc.apparmor_profile, "unconfined");

    // Up again: the profiles are derived from the strings, which stay as they were.
    let (back, losses): (v1::CreateContainerRequest, _) = convert("CreateContainerRequest", V1alpha1, V1, &out);
    assert!(losses.is_empty());
    let sc = back.config.unwrap().linux.unwrap().security_context.unwrap();
    assert_eq!(sc.seccomp, profile(ProfileType::Localhost, "profiles/audit.json"));
    assert_eq!(sc.apparmor, profile(ProfileType::Unconfined, ""));
    assert_eq!(sc.seccomp_profile_path, "localhost/profiles/audit.json");
}

#[test]
#[allow(deprecated)]
fn an_old_string_spelling_is_kept_when_it_agrees_and_replaced_when_it_does_not() {
    use v1::security_profile::ProfileType;
    let old =
        v1alpha1::LinuxContainerSecurityContext { seccomp_profile_path: "docker/default".into(), ..Default::default() };
    let (new, _): (v1::LinuxContainerSecurityContext, _) = convert("LinuxContainerSecurityContext", V1alpha1, V1, &old);
    assert_eq!(new.seccomp, profile(ProfileType::RuntimeDefault, ""));
    assert_eq!(new.seccomp_profile_path, "docker/default");

    // Both given and disagreeing: the profile wins (runtimes that read both prefer it).
    let new = v1::LinuxContainerSecurityContext {
        seccomp: profile(ProfileType::RuntimeDefault, ""),
        seccomp_profile_path: "unconfined".into(),
        ..Default::default()
    };
    let (old, losses): (v1alpha2::LinuxContainerSecurityContext, _) =
        convert("LinuxContainerSecurityContext", V1, V1alpha2, &new);
    assert!(losses.is_empty());
    assert_eq!(old.seccomp_profile_path, "runtime/default");
}

#[test]
fn a_pod_level_apparmor_profile_cannot_reach_v1alpha1() {
    use v1::security_profile::ProfileType;
    let sc =
        v1::LinuxSandboxSecurityContext { apparmor: profile(ProfileType::RuntimeDefault, ""), ..Default::default() };
    let (_, losses): (v1alpha1::LinuxSandboxSecurityContext, _) =
        convert("LinuxSandboxSecurityContext", V1, V1alpha1, &sc);
    assert_eq!(paths(&losses), ["apparmor"]);
    assert_eq!(LossPolicy::default().action(Side::Request, &losses[0]), Action::Reject);
}

#[test]
fn supplemental_groups_policy_strict_bound_for_v1alpha2_is_refused() {
    let req = v1_container(v1::LinuxContainerSecurityContext {
        supplemental_groups_policy: v1::SupplementalGroupsPolicy::Strict as i32,
        ..Default::default()
    });
    let (_, losses): (v1alpha2::CreateContainerRequest, _) = convert("CreateContainerRequest", V1, V1alpha2, &req);
    assert_eq!(paths(&losses), ["config.linux.security_context.supplemental_groups_policy"]);
    assert_eq!(losses[0].field, "LinuxContainerSecurityContext.supplemental_groups_policy");
    let refusal = LossPolicy::default().apply(Side::Request, "CreateContainer", &V1alpha2, losses.clone()).unwrap_err();
    let message = refusal.to_string();
    for part in ["CreateContainer", "v1alpha2", "config.linux.security_context.supplemental_groups_policy"] {
        assert!(message.contains(part), "{message:?} lacks {part}");
    }

    // An override by field or by path lets it through (dropped, counted).
    for key in [
        "LinuxContainerSecurityContext.supplemental_groups_policy",
        "config.linux.security_context.supplemental_groups_policy",
    ] {
        let policy = LossPolicy::new(HashMap::from([(key.to_string(), Action::Warn)]));
        policy.apply(Side::Request, "CreateContainer", &V1alpha2, losses.clone()).unwrap();
        assert_eq!(policy.counters.warned.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}

#[test]
fn other_request_losses_warn_and_response_losses_are_allowed() {
    // The image name as the user wrote it: a hint for the runtime's logs, not what runs.
    let spec = v1::ImageSpec {
        image: "docker.io/library/busybox:1".into(),
        user_specified_image: "busybox:1".into(),
        ..Default::default()
    };
    let req = v1::PullImageRequest { image: Some(spec), ..Default::default() };
    let (_, losses): (v1alpha2::PullImageRequest, _) = convert("PullImageRequest", V1, V1alpha2, &req);
    assert_eq!(paths(&losses), ["image.user_specified_image"]);
    let policy = LossPolicy::default();
    assert_eq!(policy.action(Side::Request, &losses[0]), Action::Warn);
    policy.apply(Side::Request, "PullImage", &V1alpha2, losses).unwrap();

    // A v1 runtime's ImageFsInfo answer for a v1alpha1 client: the mountpoint has no UUID form.
    let resp = v1::ImageFsInfoResponse {
        image_filesystems: vec![v1::FilesystemUsage {
            timestamp: 1,
            fs_id: Some(v1::FilesystemIdentifier { mountpoint: "/var/lib/containerd".into() }),
            used_bytes: Some(v1::UInt64Value { value: 10 }),
            inodes_used: None,
        }],
        container_filesystems: vec![],
    };
    let (old, losses): (v1alpha1::ImageFsInfoResponse, _) = convert("ImageFsInfoResponse", V1, V1alpha1, &resp);
    assert_eq!(paths(&losses), ["image_filesystems[0].fs_id"]);
    assert_eq!(old.image_filesystems[0].storage_id, None, "a mountpoint is never passed off as a UUID");
    assert_eq!(old.image_filesystems[0].used_bytes.as_ref().unwrap().value, 10);
    assert_eq!(policy.action(Side::Response, &losses[0]), Action::Allow);
}

#[test]
fn losses_that_change_what_runs_are_refused_by_default() {
    // (what is lost, the request, the target): each would run something other than asked.
    let mut stop_signal = v1_container(v1::LinuxContainerSecurityContext::default());
    stop_signal.config.as_mut().unwrap().stop_signal = v1::Signal::Sigterm as i32;
    let mut env = v1_container(v1::LinuxContainerSecurityContext::default());
    env.config.as_mut().unwrap().envs = vec![v1::KeyValue { key: "BAD".into(), value: vec![0xff] }];
    let mut handler = v1_pod(v1::NamespaceOption { pid: CONTAINER, ..Default::default() });
    handler.runtime_handler = "kata".into();
    let image = v1::ImageSpec { image: "busybox".into(), runtime_handler: "kata".into(), ..Default::default() };
    let pull = v1::PullImageRequest { image: Some(image), ..Default::default() };
    let policy = LossPolicy::default();
    let refused = |rpc: &str, losses: Vec<Loss>, target: CriVersion, path: &str| {
        assert_eq!(paths(&losses), [path], "{rpc}");
        let refusal = policy.apply(Side::Request, rpc, &target, losses).expect_err(rpc).to_string();
        assert!(refusal.contains(path), "{rpc}: {refusal}");
    };
    let (_, l): (v1alpha2::CreateContainerRequest, _) = convert("CreateContainerRequest", V1, V1alpha2, &stop_signal);
    refused("CreateContainer", l, V1alpha2, "config.stop_signal");
    let (_, l): (v1alpha2::CreateContainerRequest, _) = convert("CreateContainerRequest", V1, V1alpha2, &env);
    refused("CreateContainer", l, V1alpha2, "config.envs[0].value");
    let (_, l): (v1alpha1::RunPodSandboxRequest, _) = convert("RunPodSandboxRequest", V1, V1alpha1, &handler);
    refused("RunPodSandbox", l, V1alpha1, "runtime_handler");
    let (_, l): (v1alpha2::PullImageRequest, _) = convert("PullImageRequest", V1, V1alpha2, &pull);
    refused("PullImage", l, V1alpha2, "image.runtime_handler");
}

#[test]
fn a_non_utf8_env_value_is_a_loss_not_a_crash() {
    let mut req = v1_container(v1::LinuxContainerSecurityContext::default());
    req.config.as_mut().unwrap().envs = vec![
        v1::KeyValue { key: "OK".into(), value: b"fine".to_vec() },
        v1::KeyValue { key: "BAD".into(), value: vec![0xff, 0xfe] },
    ];
    let (out, losses): (v1alpha2::CreateContainerRequest, _) = convert("CreateContainerRequest", V1, V1alpha2, &req);
    assert_eq!(paths(&losses), ["config.envs[1].value"]);
    assert_eq!(losses[0].reason, LossReason::NotUtf8);
    assert_eq!(out.config.unwrap().envs[0].value, "fine");
}

#[test]
fn an_unknown_field_number_in_a_request_is_reported() {
    let mut bytes = v1_container(v1::LinuxContainerSecurityContext {
        run_as_group: Some(v1::Int64Value { value: 5 }),
        ..Default::default()
    })
    .encode_to_vec();
    // A newer client adds field 99 to CreateContainerRequest: tag (99 << 3 | 0), value 1.
    prost::encoding::encode_varint(99 << 3, &mut bytes);
    prost::encoding::encode_varint(1, &mut bytes);
    let schema = V1.schema();
    let mut losses = Vec::new();
    scan::scan(
        schema,
        schema.message_index("CreateContainerRequest").unwrap(),
        &bytes,
        Limits::UNKNOWN_ONLY,
        &mut losses,
    )
    .unwrap();
    assert_eq!(paths(&losses), ["#99"]);
    assert_eq!(losses[0].field, "CreateContainerRequest.#99");
    // What a new field of CreateContainer means cannot be judged: refused.
    assert_eq!(LossPolicy::default().action(Side::Request, &losses[0]), Action::Reject);
    // In a read-only request an unknown field can only ask for more detail: warned about.
    let mut status = v1::ContainerStatusRequest { container_id: "c".into(), verbose: true }.encode_to_vec();
    prost::encoding::encode_varint(9 << 3, &mut status);
    prost::encoding::encode_varint(1, &mut status);
    let mut losses = Vec::new();
    let index = schema.message_index("ContainerStatusRequest").unwrap();
    scan::scan(schema, index, &status, Limits::UNKNOWN_ONLY, &mut losses).unwrap();
    assert_eq!(paths(&losses), ["#9"]);
    assert_eq!(LossPolicy::default().action(Side::Request, &losses[0]), Action::Warn);

    // Nested: an unknown field inside config.linux.security_context.
    let nested_sc = {
        let mut sc = v1::LinuxContainerSecurityContext { privileged: true, ..Default::default() }.encode_to_vec();
        prost::encoding::encode_varint(120 << 3 | 2, &mut sc);
        prost::encoding::encode_varint(2, &mut sc);
        sc.extend_from_slice(b"hi");
        sc
    };
    let mut linux = Vec::new();
    prost::encoding::bytes::encode(2, &nested_sc, &mut linux); // LinuxContainerConfig.security_context = 2
    let mut config = Vec::new();
    prost::encoding::bytes::encode(15, &linux, &mut config); // ContainerConfig.linux = 15
    let mut req = Vec::new();
    prost::encoding::bytes::encode(2, &config, &mut req); // CreateContainerRequest.config = 2
    let mut losses = Vec::new();
    scan::scan(
        schema,
        schema.message_index("CreateContainerRequest").unwrap(),
        &req,
        Limits::UNKNOWN_ONLY,
        &mut losses,
    )
    .unwrap();
    assert_eq!(paths(&losses), ["config.linux.security_context.#120"]);

    // Truncated bytes are an error, not a panic.
    let err = scan::scan(
        schema,
        schema.message_index("CreateContainerRequest").unwrap(),
        &req[..req.len() - 1],
        Limits::UNKNOWN_ONLY,
        &mut Vec::new(),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "malformed protobuf at CreateContainerRequest: truncated field value");
    // Deeper down, the path names where: CreateContainerRequest.config (2) → ContainerConfig.image
    // (2) → ImageSpec.image (1), whose length says 5 bytes where there is 1.
    let wrap = |number: u32, body: &[u8]| {
        let mut out = Vec::new();
        prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(body.len() as u64, &mut out);
        out.extend_from_slice(body);
        out
    };
    let mut truncated = wrap(1, b"abcde");
    truncated.truncate(3);
    let outer = wrap(2, &wrap(2, &truncated));
    let index = schema.message_index("CreateContainerRequest").unwrap();
    let err = scan::scan(schema, index, &outer, Limits::UNKNOWN_ONLY, &mut Vec::new()).unwrap_err();
    assert_eq!(err.to_string(), "malformed protobuf at config.image: truncated field value");
}

#[test]
fn fields_only_in_v1_are_losses_going_down_and_unset_going_up() {
    let mount = v1::Mount {
        container_path: "/data".into(),
        host_path: "/srv".into(),
        readonly: true,
        recursive_read_only: true,
        uid_mappings: vec![v1::IdMapping { host_id: 1000, container_id: 0, length: 1 }],
        ..Default::default()
    };
    let (old, losses): (v1alpha2::Mount, _) = convert("Mount", V1, V1alpha2, &mount);
    assert_eq!(paths(&losses), ["uidMappings", "recursive_read_only"]);
    assert!(losses.iter().all(|l| LossPolicy::default().action(Side::Request, l) == Action::Reject));
    assert_eq!((old.container_path.as_str(), old.host_path.as_str(), old.readonly), ("/data", "/srv", true));
    let (back, losses): (v1::Mount, _) = convert("Mount", V1alpha2, V1, &old);
    assert!(losses.is_empty());
    assert!(!back.recursive_read_only && back.uid_mappings.is_empty());
}

#[test]
fn an_absent_v1alpha1_namespace_option_keeps_its_meaning_in_v1() {
    // v1alpha1: absent means no host namespaces, a private PID namespace. v1: absent means pid
    // POD, shared with the pod. The conversion writes the v1alpha1 meaning out.
    let container = v1alpha1::CreateContainerRequest {
        pod_sandbox_id: "p".into(),
        config: Some(v1alpha1::ContainerConfig {
            metadata: Some(v1alpha1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            ..Default::default()
        }),
        sandbox_config: Some(v1alpha1::PodSandboxConfig::default()),
    };
    let (out, losses): (v1::CreateContainerRequest, _) = convert("CreateContainerRequest", V1alpha1, V1, &container);
    assert!(losses.is_empty());
    let private = v1::NamespaceOption { network: POD, pid: CONTAINER, ipc: POD, ..Default::default() };
    let of_container = out.config.unwrap().linux.unwrap().security_context.unwrap().namespace_options;
    assert_eq!(of_container, Some(private.clone()));
    let of_pod = out.sandbox_config.unwrap().linux.unwrap().security_context.unwrap().namespace_options;
    assert_eq!(of_pod, Some(private));
}

#[test]
fn v1alpha1_status_info_values_are_json_with_their_content_kept() {
    // What containerd 1.6 puts in a verbose Status: JSON objects, and plain strings.
    let info: HashMap<String, String> = [
        ("config", r#"{"containerd":{"snapshotter":"native"},"enableSelinux":false}"#),
        ("golang", "go1.19.8"),
        ("lastCNILoadStatus", "cni config load failed: no network config found in /etc/cni/net.d"),
        ("quoted", r#"say "hi"\ back"#),
        ("number", "42"),
        ("empty", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let response = v1::StatusResponse { info: info.clone(), ..Default::default() };
    let (down, losses): (v1alpha1::StatusResponse, _) = convert("StatusResponse", V1, V1alpha1, &response);
    assert!(losses.is_empty(), "{losses:?}");
    assert_eq!(down.info.len(), info.len());
    for (key, original) in &info {
        let sent = &down.info[key];
        let parsed: serde_json::Value =
            serde_json::from_str(sent).unwrap_or_else(|e| panic!("info[{key}] = {sent:?} is not JSON: {e}"));
        match serde_json::from_str::<serde_json::Value>(original) {
            // Already JSON: passed unchanged.
            Ok(_) => assert_eq!(sent, original, "info[{key}]"),
            // A plain string: the JSON string holding exactly it.
            Err(_) => assert_eq!(parsed, serde_json::Value::String(original.clone()), "info[{key}]"),
        }
    }
    assert_eq!(down.info["golang"], r#""go1.19.8""#);
    assert_eq!(down.info["empty"], r#""""#);

    // v1alpha2 callers get the runtime's values as they are, as from a v1alpha2 runtime.
    let (same, _): (v1alpha2::StatusResponse, _) = convert("StatusResponse", V1, V1alpha2, &response);
    assert_eq!(same.info, info);
}

#[test]
fn a_path_override_wins_over_a_field_override() {
    let loss =
        |path: &str| Loss { path: path.into(), field: "KeyValue.value".into(), reason: LossReason::NotUtf8, more: 0 };
    let policy = LossPolicy::new(HashMap::from([
        ("KeyValue.value".to_string(), Action::Allow),
        ("config.envs[0].value".to_string(), Action::Reject),
    ]));
    assert_eq!(policy.action(Side::Request, &loss("config.envs[0].value")), Action::Reject);
    assert_eq!(policy.action(Side::Request, &loss("config.envs[1].value")), Action::Allow);
    // Without overrides: the class (behaviour) decides; answers are allowed.
    assert_eq!(LossPolicy::default().action(Side::Request, &loss("config.envs[1].value")), Action::Reject);
    assert_eq!(LossPolicy::default().action(Side::Response, &loss("envs[1].value")), Action::Allow);
}

/// The policy's counters (logged at shutdown, and what an operator reads to know how much was
/// dropped) count every field, a record entry's repeats included, under the action taken.
#[test]
fn the_policy_counts_each_dropped_field_under_its_action() {
    use std::sync::atomic::Ordering::Relaxed;
    let loss = |field: &'static str, path: &str, more: u64| Loss {
        path: path.into(),
        field: field.into(),
        reason: LossReason::NoField,
        more,
    };
    let policy = LossPolicy::default();
    let counts = |p: &LossPolicy| {
        (p.counters.rejected.load(Relaxed), p.counters.warned.load(Relaxed), p.counters.allowed.load(Relaxed))
    };

    // Advisory: warned, with its two repeats.
    policy
        .apply(
            Side::Request,
            "PullImage",
            &V1alpha2,
            vec![loss("ImageSpec.user_specified_image", "image.user_specified_image", 2)],
        )
        .unwrap();
    assert_eq!(counts(&policy), (0, 3, 0));
    // Security beside advisory: the call is refused; only the refused field counts as rejected,
    // the advisory one still as warned.
    let refused = policy
        .apply(
            Side::Request,
            "CreateContainer",
            &V1alpha2,
            vec![
                loss("LinuxContainerSecurityContext.run_as_group", "config.linux.security_context.run_as_group", 1),
                loss("ImageSpec.user_specified_image", "config.image.user_specified_image", 0),
            ],
        )
        .unwrap_err();
    assert_eq!(refused.fields.len(), 1, "{refused}");
    assert_eq!(counts(&policy), (2, 4, 0));
    // Answers: allowed, counted one by one or as a total.
    policy
        .apply(Side::Response, "ContainerStatus", &V1alpha2, vec![loss("ContainerStatus.user", "status.user", 4)])
        .unwrap();
    assert_eq!(counts(&policy), (2, 4, 5));
    policy.count_response_losses(0);
    assert_eq!(counts(&policy), (2, 4, 5));
    policy.count_response_losses(7);
    assert_eq!(counts(&policy), (2, 4, 12));
}
