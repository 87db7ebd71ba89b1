//! The proxy is transparent: the caller's metadata and deadline reach the runtime, the runtime's
//! status and metadata come back unchanged, `Version` names the caller's version, and a request
//! that would lose a protected field is refused before the runtime sees it.

mod common;

use common::{channel, Pair};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion::{V1alpha1, V1alpha2, V1};
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::{Code, Request};

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1alpha2Runtime = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

fn parse_grpc_timeout(value: &str) -> Duration {
    cri_bridge::memory::parse_grpc_timeout(value).expect("a valid grpc-timeout")
}

#[tokio::test]
async fn metadata_and_deadline_reach_the_runtime_in_both_paths() {
    // Same version (bytes pass through) and different versions (converted).
    for backend in [V1, V1alpha2] {
        let pair = Pair::start("meta", &[backend], None).await;
        let mut client = V1Runtime::new(pair.channel());
        let mut request = Request::new(v1::ListPodSandboxRequest::default());
        request.metadata_mut().insert(
            "traceparent",
            MetadataValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        request.metadata_mut().insert("x-request-id", MetadataValue::from_static("req-42"));
        request.set_timeout(Duration::from_secs(30));
        let response = client.list_pod_sandbox(request).await.unwrap();

        let seen = pair.runtime.memory.take_metadata("ListPodSandbox").expect("the runtime saw the call");
        assert_eq!(seen.get("traceparent").unwrap(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(seen.get("x-request-id").unwrap(), "req-42");
        let deadline =
            parse_grpc_timeout(seen.get("grpc-timeout").expect("the deadline is forwarded").to_str().unwrap());
        assert!(
            deadline <= Duration::from_secs(30) && deadline > Duration::from_secs(29),
            "backend {backend}: {deadline:?}"
        );
        // The runtime echoes traceparent: response metadata comes back too.
        assert_eq!(
            response.metadata().get("traceparent").unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        pair.bridge.stop().await;
        pair.runtime.stop().await;
    }
}

#[tokio::test]
async fn the_runtimes_status_comes_back_unchanged() {
    for backend in [V1, V1alpha2, V1alpha1] {
        let pair = Pair::start("status", &[backend], None).await;
        let request = || v1alpha2::ContainerStatusRequest { container_id: "no-such-container".into(), verbose: false };
        // Asked directly, in the runtime's own version…
        let direct = cri_bridge::grpc::CriClient::new(channel(&pair.dir.path("runtime.sock")), 1 << 20);
        let rpc = cri_bridge::grpc::Rpc::from_path(&format!("/{}.RuntimeService/ContainerStatus", backend.package()))
            .unwrap();
        let body = bytes::Bytes::from(prost::Message::encode_to_vec(&request()));
        let direct = direct.unary(rpc, Request::new(body)).await.unwrap_err();
        // …and through the bridge by a v1alpha2 client.
        let through = V1alpha2Runtime::new(pair.channel()).container_status(request()).await.unwrap_err();
        assert_eq!(through.code(), Code::NotFound);
        assert_eq!((through.code(), through.message()), (direct.code(), direct.message()), "backend {backend}");
        pair.bridge.stop().await;
        pair.runtime.stop().await;
    }
}

#[tokio::test]
async fn version_names_the_callers_version() {
    let pair = Pair::start("version", &[V1alpha2], None).await;
    let v1 = V1Runtime::new(pair.channel()).version(v1::VersionRequest::default()).await.unwrap().into_inner();
    assert_eq!(v1.runtime_api_version, "v1");
    let v1alpha2 =
        V1alpha2Runtime::new(pair.channel()).version(v1alpha2::VersionRequest::default()).await.unwrap().into_inner();
    assert_eq!(v1alpha2.runtime_api_version, "v1alpha2");
    assert_eq!(v1.runtime_name, v1alpha2.runtime_name);
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}

async fn run_pod(client: &mut V1Runtime) -> String {
    let metadata = v1::PodSandboxMetadata { name: "p".into(), uid: "u".into(), namespace: "n".into(), attempt: 0 };
    let config = v1::PodSandboxConfig { metadata: Some(metadata), ..Default::default() };
    let request = v1::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
    client.run_pod_sandbox(request).await.unwrap().into_inner().pod_sandbox_id
}

fn strict_container(pod: &str) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            linux: Some(v1::LinuxContainerConfig {
                security_context: Some(v1::LinuxContainerSecurityContext {
                    supplemental_groups_policy: v1::SupplementalGroupsPolicy::Strict as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: None,
    }
}

#[tokio::test]
async fn a_request_that_would_lose_a_protected_field_is_refused_before_the_runtime_sees_it() {
    let pair = Pair::start("refuse", &[V1alpha2], None).await;
    let mut client = V1Runtime::new(pair.channel());
    let pod = run_pod(&mut client).await;
    let refused = client.create_container(strict_container(&pod)).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented);
    for part in ["CreateContainer", "v1alpha2", "config.linux.security_context.supplemental_groups_policy"] {
        assert!(refused.message().contains(part), "{:?} lacks {part}", refused.message());
    }
    assert_eq!(pair.runtime.memory.calls_of("CreateContainer"), 0, "the runtime never saw the call");
    let containers =
        client.list_containers(v1::ListContainersRequest::default()).await.unwrap().into_inner().containers;
    assert!(containers.is_empty());

    // The same request is allowed once the operator says so for that field.
    pair.bridge.stop().await;
    let mut config = common::config(&pair.dir, &pair.dir.path("runtime.sock"), None);
    config.loss_policy.insert(
        "LinuxContainerSecurityContext.supplemental_groups_policy".into(),
        cri_bridge::convert::policy::Action::Warn,
    );
    let bridge = common::Bridge::start(config).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));
    client.create_container(strict_container(&pod)).await.unwrap();
    assert_eq!(pair.runtime.memory.calls_of("CreateContainer"), 1);
    bridge.stop().await;
    pair.runtime.stop().await;
}

#[tokio::test]
async fn an_unknown_field_from_a_newer_client_goes_through_the_policy() {
    let pair = Pair::start("unknown", &[V1alpha2], None).await;
    // A ListPodSandboxRequest with field 99 that our schema does not know.
    let mut body = prost::Message::encode_to_vec(&v1::ListPodSandboxRequest::default());
    prost::encoding::encode_varint(99 << 3, &mut body);
    prost::encoding::encode_varint(7, &mut body);
    let client = cri_bridge::grpc::CriClient::new(pair.channel(), 1 << 20);
    let rpc = cri_bridge::grpc::Rpc::from_path("/runtime.v1.RuntimeService/ListPodSandbox").unwrap();
    // Default policy for an unknown field of a List request: refused (it may be a filter).
    let refused = client.unary(rpc, Request::new(body.clone().into())).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented);
    assert!(refused.message().contains("#99"), "{refused:?}");
    pair.bridge.stop().await;

    let mut config = common::config(&pair.dir, &pair.dir.path("runtime.sock"), None);
    config.loss_policy.insert("ListPodSandboxRequest.#99".into(), cri_bridge::convert::policy::Action::Warn);
    let bridge = common::Bridge::start(config).await;
    let client = cri_bridge::grpc::CriClient::new(channel(&bridge.socket), 1 << 20);
    client.unary(rpc, Request::new(body.into())).await.unwrap();
    bridge.stop().await;
    pair.runtime.stop().await;
}

#[tokio::test]
async fn a_malformed_request_is_invalid_argument_naming_the_rpc() {
    let pair = Pair::start("malformed", &[V1alpha2], None).await;
    let client = cri_bridge::grpc::CriClient::new(pair.channel(), 1 << 20);
    let rpc = cri_bridge::grpc::Rpc::from_path("/runtime.v1.RuntimeService/RunPodSandbox").unwrap();
    // Field 1 (config), length 10, but only 2 bytes follow.
    let status =
        client.unary(rpc, Request::new(bytes::Bytes::from_static(&[0x0a, 0x0a, 0x01, 0x02]))).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("RunPodSandbox"), "{status:?}");
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}

#[tokio::test]
async fn cancelling_a_stream_reaches_the_runtime_and_events_flow_through() {
    let pair = Pair::start("events", &[V1], None).await;
    let mut events = V1Runtime::new(pair.channel())
        .get_container_events(v1::GetEventsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut client = V1Runtime::new(pair.channel());
    let pod = run_pod(&mut client).await;
    let mut create = strict_container(&pod);
    create.config.as_mut().unwrap().linux = None;
    let id = client.create_container(create).await.unwrap().into_inner().container_id;
    let event = tokio::time::timeout(Duration::from_secs(5), events.message()).await.unwrap().unwrap().unwrap();
    assert_eq!(event.container_id, id);
    assert_eq!(event.container_event_type, v1::ContainerEventType::ContainerCreatedEvent as i32);
    assert_eq!(pair.runtime.memory.event_watchers(), 1);
    // The caller goes away: the bridge must cancel its own stream to the runtime.
    drop(events);
    let mut watchers = 1;
    for _ in 0..100 {
        watchers = pair.runtime.memory.event_watchers();
        if watchers == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(watchers, 0, "the runtime's stream was not cancelled");
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}

#[tokio::test]
async fn a_deadline_that_passes_in_the_runtime_comes_back_as_the_runtimes_deadline_exceeded() {
    for backend in [V1, V1alpha2] {
        let pair = Pair::start("deadline", &[backend], None).await;
        let mut client = V1Runtime::new(pair.channel());
        let pod = run_pod(&mut client).await;
        let mut create = strict_container(&pod);
        create.config.as_mut().unwrap().linux = None;
        let id = client.create_container(create).await.unwrap().into_inner().container_id;
        client.start_container(v1::StartContainerRequest { container_id: id.clone() }).await.unwrap();

        // Sent with grpc-timeout through a bare HTTP/2 client that does not enforce it locally,
        // so the answer seen is the one the bridge passes on.
        let exec = v1::ExecSyncRequest { container_id: id, cmd: vec!["sleep".into(), "5".into()], timeout: 0 };
        let started = std::time::Instant::now();
        let (code, message) =
            bare_grpc_call(&pair.bridge.socket, "/runtime.v1.RuntimeService/ExecSync", &exec, "300m").await;
        assert_eq!(code, Code::DeadlineExceeded as i32, "backend {backend}: {message}");
        // The bridge's own channel to the runtime holds the same deadline, so either the runtime's
        // answer or the bridge's expiry of that deadline arrives first: both say DEADLINE_EXCEEDED.
        assert!(
            ["context deadline exceeded", "deadline exceeded before the container runtime answered"]
                .contains(&message.as_str()),
            "{message}"
        );
        // Ended by the deadline (300 ms), not by the exec's own end; load only delays it.
        assert!(started.elapsed() < Duration::from_secs(30), "the deadline reached the runtime");
        pair.bridge.stop().await;
        pair.runtime.stop().await;
    }
}

#[tokio::test]
async fn a_clients_content_length_does_not_break_a_converted_call() {
    // Conversion changes the body's length (here the unknown field #99 is not carried), so the
    // client's content-length must not reach the runtime with the new body.
    let pair = Pair::start("content-length", &[V1alpha2], None).await;
    let mut body = prost::Message::encode_to_vec(&v1::VersionRequest { version: "0.1.0".into() });
    body.extend([0x98, 0x06, 0x01]); // field 99, varint 1
    let frame = grpc_frame(&body);
    let length = frame.len().to_string();
    let (code, message) = bare_grpc_request(
        &pair.bridge.socket,
        "/runtime.v1.RuntimeService/Version",
        frame,
        &[("content-length", length)],
    )
    .await;
    assert_eq!(code, Code::Ok as i32, "{message}");
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}

#[tokio::test]
async fn an_exec_sync_sleep_beyond_any_duration_waits_for_the_deadline_instead_of_panicking() {
    let pair = Pair::start("huge-sleep", &[V1], None).await;
    let mut client = V1Runtime::new(pair.channel());
    let pod = run_pod(&mut client).await;
    let mut create = strict_container(&pod);
    create.config.as_mut().unwrap().linux = None;
    let id = client.create_container(create).await.unwrap().into_inner().container_id;
    client.start_container(v1::StartContainerRequest { container_id: id.clone() }).await.unwrap();
    let exec = v1::ExecSyncRequest { container_id: id, cmd: vec!["sleep".into(), "1e300".into()], timeout: 0 };
    let (code, message) =
        bare_grpc_call(&pair.bridge.socket, "/runtime.v1.RuntimeService/ExecSync", &exec, "200m").await;
    assert_eq!(code, Code::DeadlineExceeded as i32, "{message}");
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}

/// One unary gRPC call over a plain HTTP/2 connection, with `grpc-timeout` set but not enforced
/// by the client. Returns grpc-status and grpc-message.
async fn bare_grpc_call(
    socket: &std::path::Path,
    path: &str,
    message: &impl prost::Message,
    timeout: &str,
) -> (i32, String) {
    let frame = grpc_frame(&message.encode_to_vec());
    bare_grpc_request(socket, path, frame, &[("grpc-timeout", timeout.to_string())]).await
}

/// A gRPC message with its 5-byte prefix.
fn grpc_frame(body: &[u8]) -> Vec<u8> {
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// One unary gRPC request of exactly `frame`, with `headers` besides the usual ones.
async fn bare_grpc_request(
    socket: &std::path::Path,
    path: &str,
    frame: Vec<u8>,
    headers: &[(&str, String)],
) -> (i32, String) {
    use http_body_util::BodyExt;
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::post(format!("http://cri{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request.body(http_body_util::Full::new(bytes::Bytes::from(frame))).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let trailers = if parts.headers.contains_key("grpc-status") {
        parts.headers // a trailers-only answer
    } else {
        body.collect().await.unwrap().trailers().cloned().unwrap_or_default()
    };
    let get = |name: &str| trailers.get(name).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (get("grpc-status").parse().unwrap(), percent_decode(&get("grpc-message")))
}

/// grpc-message is percent-encoded on the wire.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
