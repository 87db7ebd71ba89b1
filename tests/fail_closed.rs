//! Fail closed: one table test per finding of the fail-closed review. Each states the request,
//! what the runtime receives (call counts before and after, the bytes it got) and what the
//! caller gets, over real unix sockets with the in-memory runtime; the runtime's revision is set
//! with `backend.revision`, as an operator would for a runtime cri-bridge does not know.

mod common;

use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::config::Config;
use cri_bridge::convert::scan::{self, Limits};
use cri_bridge::convert::{LossReason, Route, MAX_DISTINCT};
use cri_bridge::revision::{Block, Features, RuntimeProfile, Source};
use cri_bridge::CriVersion::{self, V1alpha1, V1alpha2, V1};
use prost::Message;
use std::time::Duration;
use tonic::{Code, Request};

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1Images = v1::image_service_client::ImageServiceClient<tonic::transport::Channel>;

/// A runtime serving `version` and cri-bridge in front of it, the runtime's revision set to
/// `revision` (a Kubernetes minor) when given.
struct Setup {
    dir: TempDir,
    runtime: Runtime,
    bridge: Bridge,
}

impl Setup {
    async fn start(name: &str, version: CriVersion, revision: Option<u8>) -> Setup {
        Setup::with(name, version, |c| c.backend_revision = revision).await
    }

    async fn with(name: &str, version: CriVersion, edit: impl FnOnce(&mut Config)) -> Setup {
        let dir = TempDir::new(name);
        let runtime = Runtime::start(&dir.path("runtime.sock"), &[version]).await;
        let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
        edit(&mut config);
        let bridge = Bridge::start(config).await;
        // The first call probes the runtime (Version, Status): done here, so that the tests'
        // call counts see only their own calls.
        V1Runtime::new(channel(&bridge.socket)).version(v1::VersionRequest::default()).await.unwrap();
        Setup { dir, runtime, bridge }
    }

    fn client(&self) -> V1Runtime {
        V1Runtime::new(channel(&self.bridge.socket))
    }

    async fn stop(self) {
        self.bridge.stop().await;
        self.runtime.stop().await;
        drop(self.dir);
    }
}

fn pod(name: &str, namespaces: Option<v1::NamespaceOption>) -> v1::RunPodSandboxRequest {
    v1::RunPodSandboxRequest {
        config: Some(v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            linux: Some(v1::LinuxPodSandboxConfig {
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: namespaces,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: String::new(),
    }
}

fn userns(mode: v1::NamespaceMode, mapped: bool) -> v1::NamespaceOption {
    let mapping = |host_id| vec![v1::IdMapping { host_id, container_id: 0, length: 65536 }];
    v1::NamespaceOption {
        userns_options: Some(v1::UserNamespace {
            mode: mode as i32,
            uids: if mapped { mapping(100000) } else { vec![] },
            gids: if mapped { mapping(100000) } else { vec![] },
        }),
        ..Default::default()
    }
}

fn container(pod_id: &str, config: v1::ContainerConfig) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: pod_id.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            ..config
        }),
        sandbox_config: pod("p", None).config,
    }
}

/// Asserts a refusal naming every part, and that the runtime was not called for it.
async fn assert_refused<T: std::fmt::Debug>(
    setup: &Setup,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
    parts: &[&str],
) {
    let before = setup.runtime.memory.calls();
    let status = call.await.expect_err("refused");
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    for part in parts {
        assert!(status.message().contains(part), "{:?} lacks {part:?}", status.message());
    }
    assert_eq!(setup.runtime.memory.calls(), before, "the runtime was not called");
}

// Finding 1: a v1alpha2 runtime at an older revision silently ignores newer fields.

#[tokio::test]
async fn a_user_namespace_is_refused_to_a_runtime_whose_revision_predates_it() {
    // containerd 1.4 decodes the 1.19 schema; userns_options arrived in 1.25.
    let setup = Setup::start("userns-old", V1alpha2, Some(19)).await;
    let mut client = setup.client();
    let asked = pod("userns", Some(userns(v1::NamespaceMode::Pod, true)));
    assert_refused(
        &setup,
        client.run_pod_sandbox(asked),
        &["RunPodSandbox", "userns_options", "1.19", "1.25", "security", "host root"],
    )
    .await;
    assert!(client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap().into_inner().items.is_empty());

    // The kubelet's default, the host user namespace without mappings, is what that runtime
    // does anyway: it goes through.
    let before = setup.runtime.memory.calls();
    client.run_pod_sandbox(pod("hostusers", Some(userns(v1::NamespaceMode::Node, false)))).await.unwrap();
    assert_eq!(setup.runtime.memory.calls(), before + 1);
    setup.stop().await;
}

#[tokio::test]
async fn swap_and_unified_limits_are_refused_to_a_1_19_runtime_and_carried_to_a_1_22_one() {
    // Swap beyond the memory limit: asked for on any node.
    let limits = v1::ContainerConfig {
        linux: Some(v1::LinuxContainerConfig {
            resources: Some(v1::LinuxContainerResources {
                memory_limit_in_bytes: 1 << 28,
                memory_swap_limit_in_bytes: 1 << 29,
                unified: [("memory.high".to_string(), "200000000".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let old = Setup::start("swap-old", V1alpha2, Some(19)).await;
    let mut client = old.client();
    let pod_id = client.run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    assert_refused(
        &old,
        client.create_container(container(&pod_id, limits.clone())),
        &["memory_swap_limit_in_bytes", "unified", "behaviour"],
    )
    .await;
    old.stop().await;

    let new = Setup::start("swap-new", V1alpha2, Some(22)).await;
    let mut client = new.client();
    let pod_id = client.run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    let id = client.create_container(container(&pod_id, limits)).await.unwrap().into_inner().container_id;
    let status = client
        .container_status(v1::ContainerStatusRequest { container_id: id, verbose: false })
        .await
        .unwrap()
        .into_inner();
    // The runtime stored what it was sent: both limits arrived.
    let carried =
        status.status.and_then(|s| s.resources).and_then(|r| r.linux).expect("the runtime reports the limits");
    assert_eq!(carried.memory_swap_limit_in_bytes, 1 << 29);
    assert_eq!(carried.unified.get("memory.high").map(String::as_str), Some("200000000"));
    new.stop().await;
}

/// What a kubelet sets for a container with a memory limit on a cgroup v1 node: the swap limit
/// equal to the memory limit (no swap beyond it). For a 1.19 runtime (containerd 1.4), which
/// predates the field, that changes nothing on a node without swap: the call passes, and the
/// field is counted as allowed (`tests/scan.rs` checks the policy's action). On a node with swap it is refused as a loss. (This test runs on
/// whichever node it finds, and asserts what that node calls for; CI's machines have no swap.)
#[tokio::test]
async fn a_swap_limit_equal_to_the_memory_limit_passes_to_a_1_19_runtime_on_a_node_without_swap() {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let without_swap = meminfo.lines().any(|l| l.starts_with("SwapTotal:") && l.split_whitespace().nth(1) == Some("0"));
    let limits = v1::ContainerConfig {
        linux: Some(v1::LinuxContainerConfig {
            resources: Some(v1::LinuxContainerResources {
                memory_limit_in_bytes: 64 << 20,
                memory_swap_limit_in_bytes: 64 << 20,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let old = Setup::start("swap-equal", V1alpha2, Some(19)).await;
    let mut client = old.client();
    let pod_id = client.run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    if without_swap {
        let created = client.create_container(container(&pod_id, limits)).await;
        assert!(created.is_ok(), "no swap on this node: {created:?}");
        assert_eq!(old.runtime.memory.calls_of("CreateContainer"), 1);
    } else {
        assert_refused(&old, client.create_container(container(&pod_id, limits)), &["memory_swap_limit_in_bytes"])
            .await;
    }
    old.stop().await;
}

#[tokio::test]
async fn passthrough_is_scanned_too_a_v1_runtime_at_1_25_cannot_see_a_1_30_field() {
    // Same version, no conversion: a kubelet 1.36 talking v1 to a runtime of the 1.25 revision.
    let mount = v1::Mount {
        container_path: "/data".into(),
        host_path: "/srv".into(),
        readonly: true,
        recursive_read_only: true,
        ..Default::default()
    };
    let config = v1::ContainerConfig { mounts: vec![mount], ..Default::default() };
    let old = Setup::start("rro-old", V1, Some(25)).await;
    let mut client = old.client();
    let pod_id = client.run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    assert_refused(
        &old,
        client.create_container(container(&pod_id, config.clone())),
        &["mounts[0].recursive_read_only", "1.25", "1.30", "submounts stay writable"],
    )
    .await;
    old.stop().await;

    // The in-memory runtime is of cri-bridge's own revision and reports the feature.
    let current = Setup::start("rro-current", V1, None).await;
    let mut client = current.client();
    let pod_id = client.run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    client.create_container(container(&pod_id, config)).await.unwrap();
    current.stop().await;
}

// Finding 2 and 5: the RuntimeClass, the image's runtime handler, stop_signal.

#[tokio::test]
async fn runtime_handlers_and_stop_signal_are_refused_where_they_cannot_go() {
    let old = Setup::start("handler-old", V1alpha2, Some(11)).await;
    let mut client = old.client();
    let mut gvisor = pod("gvisor", None);
    gvisor.runtime_handler = "runsc".into();
    // RunPodSandboxRequest.runtime_handler arrived in 1.12.
    assert_refused(&old, client.run_pod_sandbox(gvisor), &["runtime_handler", "1.11", "RuntimeClass"]).await;
    old.stop().await;

    let setup = Setup::start("handler-v1alpha2", V1alpha2, None).await;
    let mut images = V1Images::new(channel(&setup.bridge.socket));
    let spec = v1::ImageSpec { image: "busybox".into(), runtime_handler: "runsc".into(), ..Default::default() };
    let pull = v1::PullImageRequest { image: Some(spec.clone()), ..Default::default() };
    assert_refused(&setup, images.pull_image(pull), &["image.runtime_handler", "store"]).await;
    // A ListImages filter the runtime cannot apply would widen the answer: refused, not widened.
    let list = v1::ListImagesRequest { filter: Some(v1::ImageFilter { image: Some(spec) }) };
    assert_refused(&setup, images.list_images(list), &["filter.image.runtime_handler", "widen"]).await;
    // Even a field that is only a hint elsewhere (advisory) would widen a filter.
    let hint =
        v1::ImageSpec { image: "busybox".into(), user_specified_image: "busybox:1".into(), ..Default::default() };
    let list = v1::ListImagesRequest { filter: Some(v1::ImageFilter { image: Some(hint.clone()) }) };
    assert_refused(&setup, images.list_images(list), &["filter.image.user_specified_image", "widen"]).await;
    // Outside a filter it is advisory: warned about, and the pull goes through.
    let before = setup.runtime.memory.calls_of("PullImage");
    images.pull_image(v1::PullImageRequest { image: Some(hint), ..Default::default() }).await.unwrap();
    assert_eq!(setup.runtime.memory.calls_of("PullImage"), before + 1);

    let mut client = setup.client();
    let pod_id = client.run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    let stop = v1::ContainerConfig { stop_signal: v1::Signal::Sigusr1 as i32, ..Default::default() };
    assert_refused(&setup, client.create_container(container(&pod_id, stop)), &["stop_signal", "another signal"]).await;
    setup.stop().await;
}

// Finding 3: unknown numbers inside security-bearing messages.

#[tokio::test]
async fn an_unknown_field_inside_a_security_context_is_refused_on_passthrough() {
    let setup = Setup::start("unknown-sc", V1, None).await;
    let pod_id = setup.client().run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    // CreateContainerRequest.config(2).linux(15).security_context(2) with field 120 unknown.
    let mut sc =
        v1::LinuxContainerSecurityContext { run_as_user: Some(v1::Int64Value { value: 1000 }), ..Default::default() }
            .encode_to_vec();
    prost::encoding::encode_varint(120 << 3, &mut sc);
    prost::encoding::encode_varint(1, &mut sc);
    let mut linux = Vec::new();
    prost::encoding::bytes::encode(2, &sc, &mut linux);
    let mut config = container(&pod_id, Default::default()).config.unwrap().encode_to_vec();
    prost::encoding::bytes::encode(15, &linux, &mut config);
    let mut body = Vec::new();
    prost::encoding::string::encode(1, &pod_id, &mut body);
    prost::encoding::bytes::encode(2, &config, &mut body);

    let client = cri_bridge::grpc::CriClient::new(channel(&setup.bridge.socket), 1 << 20);
    let rpc = cri_bridge::grpc::Rpc::from_path("/runtime.v1.RuntimeService/CreateContainer").unwrap();
    let before = setup.runtime.memory.calls();
    let refused = client.unary(rpc, Request::new(body.into())).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented);
    assert!(refused.message().contains("config.linux.security_context.#120"), "{refused:?}");
    assert!(refused.message().contains("security"), "{refused:?}");
    assert_eq!(setup.runtime.memory.calls(), before);
    setup.stop().await;
}

// Finding 4: enum values with no counterpart.

#[tokio::test]
async fn sctp_to_v1alpha1_and_an_unknown_state_filter_are_refused() {
    let setup = Setup::start("sctp", V1alpha1, None).await;
    let mut client = setup.client();
    let mut sctp = pod("sctp", None);
    sctp.config.as_mut().unwrap().port_mappings = vec![v1::PortMapping {
        protocol: v1::Protocol::Sctp as i32,
        container_port: 9,
        host_port: 9,
        host_ip: "".into(),
    }];
    let refused = client.run_pod_sandbox(sctp.clone()).await.unwrap_err();
    assert_eq!(refused.message().matches("port_mappings[0].protocol").count(), 1, "reported once: {refused:?}");
    assert_refused(&setup, client.run_pod_sandbox(sctp), &["port_mappings[0].protocol", "SCTP as TCP"]).await;

    let filter = v1::ListContainersRequest {
        filter: Some(v1::ContainerFilter { state: Some(v1::ContainerStateValue { state: 7 }), ..Default::default() }),
    };
    assert_refused(&setup, client.list_containers(filter), &["filter.state.state", "7"]).await;
    setup.stop().await;
}

#[test]
fn an_unknown_state_in_an_answer_reads_as_unknown_or_not_ready_never_as_another_state() {
    let route = Route::new("ContainerStatusResponse", V1, V1alpha2).unwrap();
    let answer = v1::ContainerStatusResponse {
        status: Some(v1::ContainerStatus { id: "c".into(), state: 7, ..Default::default() }),
        ..Default::default()
    };
    let mut cx = cri_bridge::convert::Cx::counting();
    let bytes = route.run(&answer.encode_to_vec(), &mut cx).unwrap();
    let got = cri_bridge::api::v1alpha2::ContainerStatusResponse::decode(bytes.as_slice()).unwrap();
    assert_eq!(got.status.unwrap().state, cri_bridge::api::v1alpha2::ContainerState::ContainerUnknown as i32);
    assert_eq!(cx.loss_count(), 1);
    assert!(cx.losses().is_empty(), "answer losses are counted, not recorded one by one");

    let route = Route::new("ListContainersResponse", V1, V1alpha2).unwrap();
    let container = |id: &str| v1::Container { id: id.into(), state: 9, ..Default::default() };
    let answer = v1::ListContainersResponse { containers: vec![container("a"), container("b"), container("c")] };
    let mut cx = cri_bridge::convert::Cx::counting();
    let bytes = route.run(&answer.encode_to_vec(), &mut cx).unwrap();
    let got = cri_bridge::api::v1alpha2::ListContainersResponse::decode(bytes.as_slice()).unwrap();
    assert!(got
        .containers
        .iter()
        .all(|c| c.state == cri_bridge::api::v1alpha2::ContainerState::ContainerUnknown as i32));
    assert_eq!(cx.loss_count(), 3);

    let route = Route::new("PodSandboxStatusResponse", V1, V1alpha1).unwrap();
    let answer = v1::PodSandboxStatusResponse {
        status: Some(v1::PodSandboxStatus { id: "p".into(), state: 5, ..Default::default() }),
        ..Default::default()
    };
    let bytes = route.run(&answer.encode_to_vec(), &mut cri_bridge::convert::Cx::counting()).unwrap();
    let got = cri_bridge::api::v1alpha1::PodSandboxStatusResponse::decode(bytes.as_slice()).unwrap();
    assert_eq!(got.status.unwrap().state, cri_bridge::api::v1alpha1::PodSandboxState::SandboxNotready as i32);
}

// Finding 10: the loss record is bounded.

#[test]
fn millions_of_unknown_fields_make_a_bounded_loss_record() {
    // 8 MiB of distinct unknown field numbers (3-byte fields) in a CreateContainerRequest.
    let mut body = Vec::with_capacity(8 << 20);
    let mut number = 100u64;
    while body.len() < 8 << 20 {
        prost::encoding::encode_varint(number << 3, &mut body);
        prost::encoding::encode_varint(1, &mut body);
        number = if number > 200_000 { 100 } else { number + 1 };
    }
    let schema = V1.schema();
    let mut losses = Vec::new();
    let index = schema.message_index("CreateContainerRequest").unwrap();
    scan::scan(schema, index, &body, Limits::UNKNOWN_ONLY, &mut losses).unwrap();
    assert_eq!(losses.len(), MAX_DISTINCT + 1, "kept one by one, then one overflow entry");
    let overflow = losses.last().unwrap();
    assert_eq!(overflow.reason, LossReason::TooMany);
    // The numbers repeat every 200,000 fields: the first ones recorded count their repeats.
    assert!(losses[0].more >= 10, "{:?}", losses[0]);
    let counted: u64 = losses.iter().map(|l| 1 + l.more).sum();
    let losses_overflow = overflow.more;
    assert!(counted > 2_000_000, "every field is counted: {counted}");
    let policy = cri_bridge::convert::policy::LossPolicy::default();
    let refusal =
        policy.apply(cri_bridge::convert::policy::Side::Request, "CreateContainer", &"v1", losses).unwrap_err();
    let text = refusal.to_string();
    assert!(text.len() < 16 * 1024, "the refusal stays short");
    let overflow = format!("{} more lost fields (more than 32 different fields were lost)", 1 + losses_overflow);
    assert!(text.contains(&overflow), "{}", &text[text.len() - 300..]);
    assert!(!text.contains("not classified"), "the overflow entry is not judged as a field");
}

#[tokio::test]
async fn an_8_mib_request_of_unknown_fields_is_refused_with_a_short_message() {
    let setup = Setup::with("flood", V1, |c| c.max_message_size = 16 << 20).await;
    let mut body = v1::ListPodSandboxRequest::default().encode_to_vec();
    let mut number = 100u64;
    while body.len() < 8 << 20 {
        prost::encoding::encode_varint(number << 3, &mut body);
        prost::encoding::encode_varint(1, &mut body);
        number += 1;
    }
    let client = cri_bridge::grpc::CriClient::new(channel(&setup.bridge.socket), 16 << 20);
    let rpc = cri_bridge::grpc::Rpc::from_path("/runtime.v1.RuntimeService/ListPodSandbox").unwrap();
    let refused = client.unary(rpc, Request::new(body.into())).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented);
    assert!(refused.message().contains("more than 32 different fields"), "{}", &refused.message()[..200]);
    assert!(refused.message().len() < 16 * 1024);
    setup.stop().await;
}

// Finding 11: the forwarded deadline is the caller's remaining time.

#[tokio::test]
async fn the_runtime_gets_the_callers_remaining_time_not_the_original_timeout() {
    let setup = Setup::start("deadline", V1alpha2, None).await;
    let mut client = setup.client();
    let mut request = Request::new(v1::VersionRequest::default());
    request.set_timeout(Duration::from_secs(7));
    client.version(request).await.unwrap();
    let metadata = setup.runtime.memory.take_metadata("Version").unwrap();
    let forwarded = metadata.get("grpc-timeout").expect("a deadline is forwarded").to_str().unwrap().to_string();
    let mut map = tonic::metadata::MetadataMap::new();
    map.insert("grpc-timeout", forwarded.parse().unwrap());
    let remaining = cri_bridge::grpc::timeout_of(map.as_ref()).unwrap();
    assert!(remaining < Duration::from_secs(7) && remaining > Duration::from_secs(6), "{forwarded}");
    setup.stop().await;
}

// Finding 12: overrides for answer fields are refused at load.

#[test]
fn an_override_for_an_answer_field_is_a_config_error() {
    let error = Config::parse("loss_policy:\n  ContainerStatus.user: warn\n").unwrap_err().to_string();
    assert!(error.contains("loss_policy") && error.contains("answers only"), "{error}");
    let error = Config::parse("loss_policy:\n  status.user: warn\n").unwrap_err().to_string();
    assert!(error.contains("not the path of a request field"), "{error}");
    Config::parse("loss_policy:\n  config.linux.security_context.run_as_group: warn\n").unwrap();
    let error = Config::parse("backend:\n  revision: \"25\"\n").unwrap_err().to_string();
    assert!(error.contains("backend.revision"), "{error}");
    assert_eq!(Config::parse("backend:\n  revision: \"1.25\"\n").unwrap().backend_revision, Some(25));
}

// Revision-aware answers: ContainerEventResponse #4 changed type in 1.26.

#[tokio::test]
async fn events_from_a_1_25_runtime_do_not_pass_a_metadata_off_as_a_status() {
    for (revision, expect_status) in [(Some(25), false), (Some(26), true), (None, true)] {
        let setup = Setup::start("events", V1, revision).await;
        let mut client = setup.client();
        let mut events = client.get_container_events(v1::GetEventsRequest {}).await.unwrap().into_inner();
        while setup.runtime.memory.event_watchers() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let pod_id = client.run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
        client.create_container(container(&pod_id, Default::default())).await.unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), events.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(event.pod_sandbox_status.is_some(), expect_status, "revision {revision:?}");
        // The rest of the event is kept.
        assert!(!event.container_id.is_empty(), "revision {revision:?}: {event:?}");
        assert_eq!(event.container_event_type, v1::ContainerEventType::ContainerCreatedEvent as i32);
        drop(events);
        setup.stop().await;
    }
}

// The revision table, the features, and what is blocked.

#[test]
fn the_revision_comes_from_the_runtimes_name_and_version() {
    let cases: &[(&str, &str, CriVersion, u8, Source)] = &[
        ("containerd", "1.4.13~ds1", V1alpha2, 19, Source::Table),
        ("containerd", "v1.5.18", V1alpha2, 20, Source::Table),
        ("containerd", "1.6.8", V1, 23, Source::Table),
        ("containerd", "1.6.20~ds1", V1, 25, Source::Table),
        ("containerd", "1.7.0", V1, 26, Source::Table),
        ("containerd", "1.7.24~ds1", V1, 27, Source::Table),
        ("containerd", "1.7.24~ds1", V1alpha2, 25, Source::Table),
        ("containerd", "v2.1.4", V1, 32, Source::Table),
        ("containerd", "2.9.0", V1, 36, Source::Table),
        ("cri-o", "1.24.6", V1, 22, Source::Table),
        ("cri-o", "1.32.13", V1, 31, Source::Table),
        ("cri-o", "1.18.6", V1alpha2, 18, Source::Table),
        ("some-runtime", "3.0", V1, 20, Source::Assumed),
        ("some-runtime", "3.0", V1alpha2, 10, Source::Assumed),
    ];
    for (name, release, version, minor, source) in cases {
        let profile = RuntimeProfile::from_version(*version, name, release, None);
        assert_eq!((profile.minor, &profile.source), (*minor, source), "{name} {release} {version}");
    }
    let configured = RuntimeProfile::from_version(V1, "some-runtime", "3.0", Some(33));
    assert_eq!((configured.minor, configured.source), (33, Source::Config));
    // A v1alpha2 runtime never decodes more than the 1.25 schema.
    assert_eq!(RuntimeProfile::from_version(V1alpha2, "x", "1", Some(30)).minor, 25);
}

#[test]
fn fields_a_runtime_decodes_but_does_not_act_on_are_blocked() {
    let schema = V1.schema();
    let id = |f: &str| schema.field_by_name(f).unwrap().1.id;
    // containerd 1.6.20 decodes userns_options (1.25 schema) but never applies it.
    let blocked = RuntimeProfile::from_version(V1, "containerd", "1.6.20", None).blocked(schema);
    assert!(matches!(blocked[id("NamespaceOption.userns_options")], Some(Block::NotHonoured(_))));
    assert!(matches!(blocked[id("Capability.add_ambient_capabilities")], Some(Block::NotHonoured(_))));
    assert!(matches!(blocked[id("Mount.uidMappings")], Some(Block::Revision { runtime: 25, field: 27 })));
    // containerd 1.7 reads it.
    let blocked = RuntimeProfile::from_version(V1, "containerd", "1.7.24", None).blocked(schema);
    assert_eq!(blocked[id("NamespaceOption.userns_options")], None);
    assert_eq!(blocked[id("Mount.uidMappings")], None);
    assert!(matches!(blocked[id("Mount.recursive_read_only")], Some(Block::Revision { runtime: 27, field: 30 })));
}

#[test]
fn a_runtime_that_does_not_report_a_feature_gets_no_request_needing_it() {
    let schema = V1.schema();
    let mut profile = RuntimeProfile::from_version(V1, "containerd", "2.3.4", None);
    profile.features =
        Some(Features { user_namespaces: false, recursive_read_only_mounts: false, ..Features::default() });
    let blocked = profile.blocked(schema);
    let index = schema.message_index("CreateContainerRequest").unwrap();
    let request = container(
        "p",
        v1::ContainerConfig {
            mounts: vec![v1::Mount {
                container_path: "/d".into(),
                recursive_read_only: true,
                readonly: true,
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    let mut losses = Vec::new();
    let limits = Limits { unknown: true, blocked: Some(&blocked), minor: profile.minor, without_swap: false };
    scan::scan(schema, index, &request.encode_to_vec(), limits, &mut losses).unwrap();
    assert_eq!(losses.len(), 1, "{losses:?}");
    assert_eq!(losses[0].path, "config.mounts[0].recursive_read_only");
    assert!(matches!(losses[0].reason, LossReason::Blocked(Block::FeatureMissing(_))));

    // Reported by every handler: nothing is blocked.
    profile.features =
        Some(Features { user_namespaces: true, recursive_read_only_mounts: true, ..Features::default() });
    let blocked = profile.blocked(schema);
    let mut losses = Vec::new();
    let limits = Limits { unknown: true, blocked: Some(&blocked), minor: profile.minor, without_swap: false };
    scan::scan(schema, index, &request.encode_to_vec(), limits, &mut losses).unwrap();
    assert!(losses.is_empty(), "{losses:?}");
}

#[tokio::test]
async fn a_profile_reaches_a_pre_1_20_runtime_through_its_string_or_is_refused() {
    let setup = Setup::start("profiles-old", V1alpha2, Some(19)).await;
    let mut client = setup.client();
    let profile = |t: v1::security_profile::ProfileType| {
        Some(v1::SecurityProfile { profile_type: t as i32, localhost_ref: String::new() })
    };
    // Seccomp: the conversion writes the string beside the profile; a 1.19 runtime reads the string.
    let mut seccomp = pod("seccomp", None);
    let context = seccomp.config.as_mut().unwrap().linux.as_mut().unwrap().security_context.as_mut().unwrap();
    context.seccomp = profile(v1::security_profile::ProfileType::RuntimeDefault);
    let before = setup.runtime.memory.calls();
    client.run_pod_sandbox(seccomp).await.unwrap();
    assert_eq!(setup.runtime.memory.calls(), before + 1);
    // A pod-level AppArmor profile has no string form: the runtime would not apply it.
    let mut apparmor = pod("apparmor", None);
    let context = apparmor.config.as_mut().unwrap().linux.as_mut().unwrap().security_context.as_mut().unwrap();
    context.apparmor = profile(v1::security_profile::ProfileType::RuntimeDefault);
    assert_refused(&setup, client.run_pod_sandbox(apparmor), &["security_context.apparmor", "1.19", "1.20"]).await;
    setup.stop().await;
}

/// A runtime merges the occurrences of a message field that is not repeated: a security context
/// sent as two `linux` parts is one to it. On passthrough to a runtime before 1.20 (a v1alpha2
/// kubelet and containerd 1.4), which applies only the deprecated (last) string, the profile is
/// judged on the merged context: a Localhost profile with its string in one part and the string
/// `unconfined` in the other would run unconfined, and is refused; parts that agree once merged
/// pass, in whichever order.
#[allow(deprecated)]
#[tokio::test]
async fn a_security_context_split_in_parts_is_judged_as_the_runtime_merges_it() {
    use v1::security_profile::ProfileType;
    let setup = Setup::start("split-profile", V1alpha2, Some(19)).await;
    let pod_id = setup.client().run_pod_sandbox(pod("p", None)).await.unwrap().into_inner().pod_sandbox_id;
    let part = |profile: Option<ProfileType>, path: &str| v1::LinuxContainerSecurityContext {
        seccomp: profile.map(|t| v1::SecurityProfile { profile_type: t as i32, localhost_ref: "audit.json".into() }),
        seccomp_profile_path: path.into(),
        ..Default::default()
    };
    // CreateContainerRequest.config(2) whose linux(15) occurs once per part, each holding its
    // part as security_context(2).
    let request = |name: &str, parts: &[v1::LinuxContainerSecurityContext]| {
        let mut config = container(&pod_id, Default::default()).config.unwrap();
        config.metadata.as_mut().unwrap().name = name.into();
        let mut config = config.encode_to_vec();
        for part in parts {
            let linux = v1::LinuxContainerConfig { security_context: Some(part.clone()), ..Default::default() };
            prost::encoding::message::encode(15, &linux, &mut config);
        }
        let mut body = Vec::new();
        prost::encoding::string::encode(1, &pod_id, &mut body);
        prost::encoding::bytes::encode(2, &config, &mut body);
        Request::new(body.into())
    };
    let client = cri_bridge::grpc::CriClient::new(channel(&setup.bridge.socket), 1 << 20);
    let rpc = cri_bridge::grpc::Rpc::from_path("/runtime.v1alpha2.RuntimeService/CreateContainer").unwrap();

    let localhost = || part(Some(ProfileType::Localhost), "localhost/audit.json");
    for (what, parts) in [
        ("then the string unconfined", [localhost(), part(None, "unconfined")]),
        ("then the profile unconfined", [localhost(), part(Some(ProfileType::Unconfined), "")]),
    ] {
        let before = setup.runtime.memory.calls();
        let refused = client.unary(rpc, request("split", &parts)).await.expect_err(what);
        assert_eq!(refused.code(), Code::Unimplemented, "{what}: {refused:?}");
        for part in ["config.linux.security_context.seccomp", "1.19", "1.20"] {
            assert!(refused.message().contains(part), "{what}: {:?} lacks {part:?}", refused.message());
        }
        assert_eq!(setup.runtime.memory.calls(), before, "{what}: the runtime was not called");
    }
    for (name, parts) in [
        ("one-part", vec![localhost()]),
        ("profile-then-string", vec![part(Some(ProfileType::Localhost), ""), part(None, "localhost/audit.json")]),
        ("unconfined-then-localhost", vec![part(None, "unconfined"), localhost()]),
    ] {
        let before = setup.runtime.memory.calls_of("CreateContainer");
        client.unary(rpc, request(name, &parts)).await.unwrap_or_else(|s| panic!("{name}: {s:?}"));
        assert_eq!(setup.runtime.memory.calls_of("CreateContainer"), before + 1, "{name}");
    }
    setup.stop().await;
}

#[tokio::test]
async fn extreme_deadlines_are_handled_not_panicked_on() {
    let setup = Setup::start("deadline-extremes", V1, None).await;
    let client = cri_bridge::grpc::CriClient::new(channel(&setup.bridge.socket), 1 << 20);
    let rpc = cri_bridge::grpc::Rpc::from_path("/runtime.v1.RuntimeService/Version").unwrap();
    for (timeout, ok) in [("99999999H", true), ("1n", false), ("0m", false), ("junk", true)] {
        let mut request = Request::new(bytes::Bytes::new());
        request.metadata_mut().insert("grpc-timeout", timeout.parse().unwrap());
        let answer = client.unary(rpc, request).await;
        match ok {
            true => assert!(answer.is_ok(), "{timeout}: {answer:?}"),
            false => assert_eq!(answer.unwrap_err().code(), Code::DeadlineExceeded, "{timeout}"),
        }
    }
    setup.stop().await;
}

#[test]
fn past_the_first_32_losses_a_field_already_recorded_only_counts() {
    // 40 env values that are not UTF-8, bound for v1alpha2 (a string field there).
    let envs = (0..40).map(|i| v1::KeyValue { key: format!("K{i}"), value: vec![0xff, i as u8] }).collect();
    let request = container("p", v1::ContainerConfig { envs, ..Default::default() });
    let route = Route::new("CreateContainerRequest", V1, V1alpha2).unwrap();
    let mut cx = cri_bridge::convert::Cx::new();
    route.run(&request.encode_to_vec(), &mut cx).unwrap();
    let losses = cx.into_losses();
    assert_eq!(losses.len(), MAX_DISTINCT, "{losses:?}");
    assert!(losses.iter().all(|l| l.field == "KeyValue.value" && l.reason == LossReason::NotUtf8));
    assert_eq!(losses[0].path, "config.envs[0].value");
    assert_eq!(losses.iter().map(|l| 1 + l.more).sum::<u64>(), 40);
    assert_eq!(losses[0].more, 8, "the 8 beyond the record count on the first entry of the field");
    let policy = cri_bridge::convert::policy::LossPolicy::default();
    let refusal =
        policy.apply(cri_bridge::convert::policy::Side::Request, "CreateContainer", &"v1alpha2", losses).unwrap_err();
    let text = refusal.to_string();
    // The caller is told the field once, at its first path, with how many more there are.
    assert_eq!(text.matches("more like it").count(), 1, "{text}");
    assert_eq!(text.matches("envs[").count(), 1, "{text}");
    assert!(text.contains("config.envs[0].value (") && text.contains(" and 39 more like it"), "{text}");
}
