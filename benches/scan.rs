//! What the fail-closed scan adds to a passthrough call: the walk of a kubelet-shaped request
//! against the runtime's revision (containerd 1.6.20: v1 at the 1.25 schema), next to a prost
//! decode of the same bytes (a yardstick: what any look at the message would cost). The proxy
//! benchmark gives the whole call for scale (~100–400 µs per call on this kind of machine).

use cri_bridge::api::v1;
use cri_bridge::convert::scan::{self, Limits};
use cri_bridge::revision::RuntimeProfile;
use cri_bridge::CriVersion::V1;
use criterion::{black_box, Criterion};
use prost::Message;
use std::time::Duration;

/// A container as a kubelet 1.3x creates it: env, mounts, labels, annotations, limits, a
/// security context with dropped capabilities and masked paths.
fn create_container() -> v1::CreateContainerRequest {
    let kv = |k: &str, v: &str| v1::KeyValue { key: k.into(), value: v.as_bytes().to_vec() };
    let labels = |n: usize| (0..n).map(|i| (format!("io.kubernetes.label-{i}"), format!("value-{i}"))).collect();
    let mount = |c: &str, h: &str| v1::Mount { container_path: c.into(), host_path: h.into(), ..Default::default() };
    v1::CreateContainerRequest {
        pod_sandbox_id: "8d4c9c0a5a3f4f0e8b1b2a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e".into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec {
                image: "sha256:3f57d9401f8d42f986df300f0c69192fc41da28ccc8d797829467780db3dd741".into(),
                user_specified_image: "registry.k8s.io/app:1.0".into(),
                ..Default::default()
            }),
            command: vec!["/app".into()],
            args: vec!["--port=8080".into(), "--verbose".into()],
            working_dir: "/".into(),
            envs: (0..20).map(|i| kv(&format!("ENV_{i}"), "some-value-of-moderate-length")).collect(),
            mounts: vec![
                mount("/var/run/secrets/kubernetes.io/serviceaccount", "/var/lib/kubelet/pods/x/volumes/token"),
                mount("/etc/hosts", "/var/lib/kubelet/pods/x/etc-hosts"),
                mount("/dev/termination-log", "/var/lib/kubelet/pods/x/containers/app/0"),
            ],
            labels: labels(6),
            annotations: labels(6),
            log_path: "app/0.log".into(),
            linux: Some(v1::LinuxContainerConfig {
                resources: Some(v1::LinuxContainerResources {
                    cpu_period: 100000,
                    cpu_quota: 50000,
                    cpu_shares: 512,
                    memory_limit_in_bytes: 1 << 28,
                    oom_score_adj: 999,
                    hugepage_limits: vec![v1::HugepageLimit { page_size: "2MB".into(), limit: 0 }],
                    ..Default::default()
                }),
                security_context: Some(v1::LinuxContainerSecurityContext {
                    capabilities: Some(v1::Capability { drop_capabilities: vec!["ALL".into()], ..Default::default() }),
                    run_as_user: Some(v1::Int64Value { value: 1000 }),
                    masked_paths: vec!["/proc/kcore".into(), "/proc/keys".into(), "/proc/timer_list".into()],
                    readonly_paths: vec!["/proc/bus".into(), "/proc/sys".into()],
                    seccomp: Some(v1::SecurityProfile { profile_type: 0, localhost_ref: String::new() }),
                    namespace_options: Some(v1::NamespaceOption { pid: 1, ..Default::default() }),
                    no_new_privs: true,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        sandbox_config: None,
    }
}

/// A hostile request: 8 MiB of 3-byte unknown fields, numbers 100 to 200,000 over and over,
/// so the loss record overflows at once and every later field is a repeat or an overflow.
fn flood() -> Vec<u8> {
    let mut body = Vec::with_capacity(8 << 20);
    let mut number = 100u64;
    while body.len() < 8 << 20 {
        prost::encoding::encode_varint(number << 3, &mut body);
        prost::encoding::encode_varint(1, &mut body);
        number = if number > 200_000 { 100 } else { number + 1 };
    }
    body
}

fn main() {
    let mut criterion = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    let schema = V1.schema();
    let profile = RuntimeProfile::from_version(V1, "containerd", "1.6.20", None);
    let blocked = profile.blocked(schema);
    let limits = Limits { unknown: true, blocked: Some(&blocked), minor: profile.minor, without_swap: false };
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("CreateContainer (kubelet-shaped)", "CreateContainerRequest", create_container().encode_to_vec()),
        (
            "ListContainers (state filter)",
            "ListContainersRequest",
            v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    state: Some(v1::ContainerStateValue { state: 1 }),
                    ..Default::default()
                }),
            }
            .encode_to_vec(),
        ),
        ("8 MiB of unknown fields (a flood)", "CreateContainerRequest", flood()),
    ];
    for (name, message, bytes) in &cases {
        let index = schema.message_index(message).unwrap();
        let mut group = criterion.benchmark_group(*name);
        group.bench_function(format!("scan ({} bytes)", bytes.len()), |b| {
            b.iter(|| {
                let mut losses = Vec::new();
                scan::scan(schema, index, black_box(bytes), limits, &mut losses).unwrap();
                losses
            })
        });
        match *message {
            "CreateContainerRequest" => group.bench_function("prost decode (yardstick)", |b| {
                b.iter(|| v1::CreateContainerRequest::decode(black_box(bytes.as_slice())).unwrap())
            }),
            _ => group.bench_function("prost decode (yardstick)", |b| {
                b.iter(|| v1::ListContainersRequest::decode(black_box(bytes.as_slice())).unwrap())
            }),
        };
        group.finish();
    }
    criterion.final_summary();
}
