//! End-to-end checks of the wiring a unit test cannot see: the served versions, the message size
//! limit on answers, rediscovery on the very first call after a runtime upgrade, draining at
//! shutdown, and byte-for-byte passthrough (what the runtime receives is exactly what was sent).

mod common;

use bytes::Bytes;
use common::{channel, config, Bridge, Runtime, TempDir};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::grpc::{ByteStream, CriClient, CriServer, Handler, Rpc};
use cri_bridge::memory::MemoryRuntime;
use cri_bridge::CriVersion::{V1alpha2, V1};
use futures_util::future::BoxFuture;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::{Code, Request, Response, Status};

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1alpha2Runtime = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// The in-memory runtime, recording the raw bytes of every request it is sent.
struct Recording {
    memory: Arc<MemoryRuntime>,
    received: Mutex<Vec<(String, Bytes)>>,
}

impl Handler for Recording {
    fn unary(
        self: Arc<Self>,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> BoxFuture<'static, Result<Response<Bytes>, Status>> {
        self.received.lock().unwrap().push((rpc.path(), request.get_ref().clone()));
        self.memory.clone().unary(rpc, request)
    }

    fn server_streaming(
        self: Arc<Self>,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> BoxFuture<'static, Result<Response<ByteStream>, Status>> {
        self.received.lock().unwrap().push((rpc.path(), request.get_ref().clone()));
        self.memory.clone().server_streaming(rpc, request)
    }
}

fn pod(name: &str) -> v1::RunPodSandboxRequest {
    v1::RunPodSandboxRequest {
        config: Some(v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: (0..8).map(|i| (format!("label-{i}"), "x".repeat(40))).collect(),
            ..Default::default()
        }),
        runtime_handler: String::new(),
    }
}

#[tokio::test]
async fn passthrough_delivers_the_callers_bytes_unchanged_unknown_fields_included() {
    let dir = TempDir::new("bytes");
    let recording = Arc::new(Recording { memory: MemoryRuntime::new(), received: Mutex::new(Vec::new()) });
    let listener = tokio::net::UnixListener::bind(dir.path("runtime.sock")).unwrap();
    let server = CriServer::new(recording.clone(), &[V1], 1 << 24);
    let runtime = tokio::spawn(cri_bridge::grpc::serve(listener, server, std::future::pending()));
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = CriClient::new(channel(&bridge.socket), 1 << 20);

    // A status read with a field number cri-bridge does not know (advisory there: warned, passed).
    let mut status = v1::ContainerStatusRequest { container_id: "nope".into(), verbose: true }.encode_to_vec();
    prost::encoding::encode_varint(9 << 3, &mut status);
    prost::encoding::encode_varint(77, &mut status);
    // A scanned request (a List filter), with fields in an unusual order and a repeated key.
    let mut list = Vec::new();
    let filter = v1::ContainerFilter { id: "abc".into(), ..Default::default() }.encode_to_vec();
    prost::encoding::bytes::encode(1, &filter, &mut list);
    for (path, body) in
        [("/runtime.v1.RuntimeService/ContainerStatus", status), ("/runtime.v1.RuntimeService/ListContainers", list)]
    {
        let rpc = Rpc::from_path(path).unwrap();
        let _ = client.unary(rpc, Request::new(Bytes::from(body.clone()))).await;
        let received = recording.received.lock().unwrap().clone();
        let got = received.iter().rev().find(|(p, _)| p == path).unwrap_or_else(|| panic!("{path} not received"));
        assert_eq!(got.1.as_ref(), body.as_slice(), "{path}: the runtime got other bytes");
    }
    bridge.stop().await;
    runtime.abort();
}

#[tokio::test]
async fn listen_versions_limits_what_is_served() {
    let dir = TempDir::new("versions");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1alpha2]).await;
    let mut config = config(&dir, &dir.path("runtime.sock"), None);
    config.versions = vec![V1];
    let bridge = Bridge::start(config).await;
    V1Runtime::new(channel(&bridge.socket)).version(v1::VersionRequest::default()).await.unwrap();
    let refused = V1alpha2Runtime::new(channel(&bridge.socket))
        .version(v1alpha2::VersionRequest::default())
        .await
        .expect_err("v1alpha2 is not served");
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn an_answer_over_max_message_size_fails_at_a_small_limit_and_passes_at_the_default() {
    let dir = TempDir::new("size");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut direct = V1Runtime::new(channel(&dir.path("runtime.sock")));
    for i in 0..40 {
        direct.run_pod_sandbox(pod(&format!("p{i}"))).await.unwrap();
    }
    let answer = direct.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap().into_inner();
    assert!(answer.encoded_len() > 8192, "the answer is {} bytes", answer.encoded_len());

    let mut small = config(&dir, &dir.path("runtime.sock"), None);
    small.max_message_size = 8192;
    let bridge = Bridge::start(small).await;
    let failed = V1Runtime::new(channel(&bridge.socket))
        .list_pod_sandbox(v1::ListPodSandboxRequest::default())
        .await
        .expect_err("an answer over the limit");
    assert!(matches!(failed.code(), Code::ResourceExhausted | Code::OutOfRange), "{failed:?}");
    bridge.stop().await;

    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket)).max_decoding_message_size(1 << 24);
    let listed = client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.items.len(), 40);
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn the_first_call_after_the_runtime_returns_in_another_version_succeeds() {
    let dir = TempDir::new("first-call");
    let socket = dir.path("runtime.sock");
    let old = Runtime::start(&socket, &[V1alpha2]).await;
    let bridge = Bridge::start(config(&dir, &socket, None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));
    let checkpoint = || v1::CheckpointContainerRequest { container_id: "c".into(), location: "/x".into(), timeout: 0 };
    let status = client.checkpoint_container(checkpoint()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "v1alpha2 lacks it: {status:?}");
    // A discovery under a second old is trusted: asking again costs the runtime nothing.
    let probes = old.memory.calls_of("Version");
    let status = client.checkpoint_container(checkpoint()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(old.memory.calls_of("Version"), probes, "no probe for a fresh discovery");

    // Upgraded underneath, with no call in between (a restart takes a while: more than the one
    // second after which a discovery is checked again): the first call reaches the v1 runtime,
    // and the caller never sees an error.
    old.stop().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let new = Runtime::start(&socket, &[V1]).await;
    let before = new.memory.calls();
    let status = client.checkpoint_container(checkpoint()).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "the v1 runtime answered: {status:?}");
    assert!(new.memory.calls() > before);

    // The same for an RPC both versions have: sent as v1alpha2 on the new connection, it is
    // answered UNIMPLEMENTED, probed again and sent as v1.
    new.stop().await;
    let older = Runtime::start(&socket, &[V1alpha2]).await;
    client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap();
    older.stop().await;
    let newer = Runtime::start(&socket, &[V1]).await;
    let before = newer.memory.calls();
    client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.expect("the first call succeeds");
    assert_eq!(newer.memory.calls_of("ListPodSandbox"), 1);
    assert!(newer.memory.calls() >= before + 2, "a probe and the call itself");
    bridge.stop().await;
    newer.stop().await;
}

#[tokio::test]
async fn shutdown_lets_a_call_in_flight_finish() {
    let dir = TempDir::new("drain");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));
    let pod_id = client.run_pod_sandbox(pod("p")).await.unwrap().into_inner().pod_sandbox_id;
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: pod_id.clone(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "c".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            ..Default::default()
        }),
        sandbox_config: pod("p").config,
    };
    let id = client.create_container(create).await.unwrap().into_inner().container_id;
    client.start_container(v1::StartContainerRequest { container_id: id.clone() }).await.unwrap();

    let exec = v1::ExecSyncRequest { container_id: id, cmd: vec!["sleep".into(), "1".into()], timeout: 10 };
    let in_flight = tokio::spawn(async move { client.exec_sync(exec).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!in_flight.is_finished(), "the call is still running when shutdown begins");
    bridge.stop().await; // returns once the server has drained
    let answer = in_flight.await.unwrap().expect("the call in flight finished normally");
    assert_eq!(answer.into_inner().exit_code, 0);
    runtime.stop().await;
}

/// A byte relay between cri-bridge and the runtime whose connections can be cut at will: a
/// connection lost under a call, with the runtime itself still there.
struct Relay {
    accept: tokio::task::JoinHandle<()>,
    copies: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    fn start(listen: &std::path::Path, to: &std::path::Path) -> Relay {
        let listener = tokio::net::UnixListener::bind(listen).unwrap();
        let copies: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let (to, tasks) = (to.to_path_buf(), copies.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = to.clone();
                tasks.lock().unwrap().push(tokio::spawn(async move {
                    let mut server = tokio::net::UnixStream::connect(to).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }));
            }
        });
        Relay { accept, copies }
    }

    /// Drops every relayed connection at once (the listener stays).
    fn cut(&self) {
        for task in self.copies.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

#[tokio::test]
async fn a_connection_lost_under_a_call_is_unavailable_naming_the_endpoint_and_then_recovers() {
    let dir = TempDir::new("cut");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let relay = Relay::start(&dir.path("relay.sock"), &dir.path("runtime.sock"));
    let bridge = Bridge::start(config(&dir, &dir.path("relay.sock"), None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));
    let pod_id = client.run_pod_sandbox(pod("p")).await.unwrap().into_inner().pod_sandbox_id;
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: pod_id,
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "c".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            ..Default::default()
        }),
        sandbox_config: pod("p").config,
    };
    let id = client.create_container(create).await.unwrap().into_inner().container_id;
    client.start_container(v1::StartContainerRequest { container_id: id.clone() }).await.unwrap();

    let exec = v1::ExecSyncRequest { container_id: id, cmd: vec!["sleep".into(), "5".into()], timeout: 10 };
    let mut in_flight_client = client.clone();
    let in_flight = tokio::spawn(async move { in_flight_client.exec_sync(exec).await });
    while runtime.memory.calls_of("ExecSync") == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.cut();
    let status = in_flight.await.unwrap().expect_err("the connection was cut under the call");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains(&dir.path("relay.sock").display().to_string()), "names the endpoint: {status:?}");

    // The next call reconnects and is served.
    let probes = runtime.memory.calls_of("Version");
    client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap();
    assert!(runtime.memory.calls_of("Version") > probes, "the lost connection made cri-bridge probe again");
    bridge.stop().await;
    relay.accept.abort();
    runtime.stop().await;
}

#[tokio::test]
async fn a_failed_call_on_a_new_connection_is_not_sent_twice() {
    let dir = TempDir::new("once");
    let socket = dir.path("runtime.sock");
    let first = Runtime::start(&socket, &[V1]).await;
    let bridge = Bridge::start(config(&dir, &socket, None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));
    let status_of = || v1::ContainerStatusRequest { container_id: "nope".into(), verbose: false };
    assert_eq!(client.container_status(status_of()).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(first.memory.calls_of("ContainerStatus"), 1, "an error answer is passed on, not retried");
    // Restarted, same version: the first call goes out on a new connection and fails as the
    // runtime says; only UNIMPLEMENTED there means "not executed", anything else may have run.
    first.stop().await;
    let second = Runtime::start(&socket, &[V1]).await;
    assert_eq!(client.container_status(status_of()).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(second.memory.calls_of("ContainerStatus"), 1, "sent once");
    bridge.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn an_unimplemented_answer_from_the_runtime_itself_is_passed_on_once() {
    // The runtime serves v1 images only: RuntimeService calls are UNIMPLEMENTED on a connection
    // that is not new, so they are the runtime's answer, not a sign of an upgrade.
    struct ImagesOnly(Arc<MemoryRuntime>, Mutex<u64>);
    impl Handler for ImagesOnly {
        fn unary(
            self: Arc<Self>,
            rpc: Rpc,
            request: Request<Bytes>,
        ) -> BoxFuture<'static, Result<Response<Bytes>, Status>> {
            if rpc.info.method == "ListContainers" {
                *self.1.lock().unwrap() += 1;
                return Box::pin(async { Err(Status::unimplemented("not here")) });
            }
            self.0.clone().unary(rpc, request)
        }
        fn server_streaming(
            self: Arc<Self>,
            rpc: Rpc,
            request: Request<Bytes>,
        ) -> BoxFuture<'static, Result<Response<ByteStream>, Status>> {
            self.0.clone().server_streaming(rpc, request)
        }
    }
    let dir = TempDir::new("unimpl");
    let handler = Arc::new(ImagesOnly(MemoryRuntime::new(), Mutex::new(0)));
    let listener = tokio::net::UnixListener::bind(dir.path("runtime.sock")).unwrap();
    let server = tokio::spawn(cri_bridge::grpc::serve(
        listener,
        CriServer::new(handler.clone(), &[V1], 1 << 24),
        std::future::pending(),
    ));
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));
    client.version(v1::VersionRequest::default()).await.unwrap();
    let status =
        tokio::time::timeout(Duration::from_secs(5), client.list_containers(v1::ListContainersRequest::default()))
            .await
            .expect("answered, not retried forever")
            .unwrap_err();
    assert_eq!((status.code(), status.message()), (Code::Unimplemented, "not here"));
    assert_eq!(*handler.1.lock().unwrap(), 1, "sent once");
    bridge.stop().await;
    server.abort();
}
