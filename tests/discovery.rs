//! Backend version discovery: probe newest first, keep serving while the runtime is away, probe
//! again when the runtime comes back (perhaps speaking another version), honour a pin.

mod common;

use common::{channel, config, Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::CriVersion::{V1alpha1, V1alpha2, V1};
use std::time::Duration;
use tonic::Code;

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// Retries `Version` through the bridge until it succeeds (bounded), returning the last error otherwise.
async fn version_eventually(client: &mut V1Runtime) -> Result<v1::VersionResponse, tonic::Status> {
    let mut last = None;
    for _ in 0..100 {
        match client.version(v1::VersionRequest::default()).await {
            Ok(response) => return Ok(response.into_inner()),
            Err(status) => last = Some(status),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(last.unwrap())
}

fn checkpoint() -> v1::CheckpointContainerRequest {
    v1::CheckpointContainerRequest { container_id: "c".into(), location: "/tmp/x".into(), timeout: 0 }
}

#[tokio::test]
async fn a_runtime_absent_at_start_is_found_when_it_appears() {
    let dir = TempDir::new("absent");
    let runtime_socket = dir.path("runtime.sock");
    let bridge = Bridge::start(config(&dir, &runtime_socket, None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));

    let status = client.version(v1::VersionRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains(&runtime_socket.display().to_string()), "names the endpoint: {status:?}");

    let runtime = Runtime::start(&runtime_socket, &[V1alpha2]).await;
    let version = version_eventually(&mut client).await.unwrap();
    assert_eq!(version.runtime_api_version, "v1");
    assert!(runtime.memory.take_metadata("Version").is_some());
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_runtime_restarted_speaking_another_version_is_rediscovered() {
    let dir = TempDir::new("restart");
    let runtime_socket = dir.path("runtime.sock");
    let old = Runtime::start(&runtime_socket, &[V1alpha2]).await;
    let bridge = Bridge::start(config(&dir, &runtime_socket, None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));

    // v1alpha2 lacks CheckpointContainer: the bridge says so, naming the backend version.
    let status = client.checkpoint_container(checkpoint()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert!(status.message().contains("v1alpha2"), "{status:?}");

    // The runtime is upgraded underneath: stopped, and started again speaking only v1.
    old.stop().await;
    let new = Runtime::start(&runtime_socket, &[V1]).await;
    version_eventually(&mut client).await.unwrap();
    let status = client.checkpoint_container(checkpoint()).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "the call now reaches the v1 runtime: {status:?}");
    assert_eq!(new.memory.calls_of("CheckpointContainer"), 1);

    // And downgraded again: v1alpha1 only.
    new.stop().await;
    let oldest = Runtime::start(&runtime_socket, &[V1alpha1]).await;
    version_eventually(&mut client).await.unwrap();
    let listed = client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap();
    assert!(listed.into_inner().items.is_empty());
    assert_eq!(oldest.memory.calls_of("ListPodSandbox"), 1);
    bridge.stop().await;
    oldest.stop().await;
}

#[tokio::test]
async fn auto_prefers_v1_and_a_pin_overrides_it() {
    let dir = TempDir::new("pin");
    let runtime_socket = dir.path("runtime.sock");
    let runtime = Runtime::start(&runtime_socket, &[V1, V1alpha2]).await;

    let auto = Bridge::start(config(&dir, &runtime_socket, None)).await;
    let status = V1Runtime::new(channel(&auto.socket)).checkpoint_container(checkpoint()).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "auto found v1: {status:?}");
    auto.stop().await;

    let pinned = Bridge::start(config(&dir, &runtime_socket, Some(V1alpha2))).await;
    let mut client = V1Runtime::new(channel(&pinned.socket));
    let status = client.checkpoint_container(checkpoint()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "pinned to v1alpha2: {status:?}");
    client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap();
    pinned.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_runtime_serving_no_cri_is_explained_plainly() {
    let dir = TempDir::new("nocri");
    let runtime_socket = dir.path("runtime.sock");
    // A gRPC server that answers UNIMPLEMENTED to every CRI path (like containerd without its CRI plugin).
    let runtime = Runtime::start(&runtime_socket, &[]).await;
    let bridge = Bridge::start(config(&dir, &runtime_socket, None)).await;
    let status = V1Runtime::new(channel(&bridge.socket)).version(v1::VersionRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("serves no CRI") && status.message().contains("CRI plugin"), "{status:?}");
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_separate_image_endpoint_is_discovered_on_its_own() {
    let dir = TempDir::new("image");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let images = Runtime::start(&dir.path("images.sock"), &[V1alpha2]).await;
    let mut config = config(&dir, &dir.path("runtime.sock"), None);
    config.image_backend = Some(cri_bridge::config::Endpoint::Unix(dir.path("images.sock")));
    let bridge = Bridge::start(config).await;
    let mut image_client = v1::image_service_client::ImageServiceClient::new(channel(&bridge.socket));
    image_client.list_images(v1::ListImagesRequest::default()).await.unwrap();
    assert_eq!(images.memory.calls_of("ListImages"), 1);
    assert_eq!(runtime.memory.calls_of("ListImages"), 0);
    V1Runtime::new(channel(&bridge.socket)).list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap();
    assert_eq!(runtime.memory.calls_of("ListPodSandbox"), 1);
    assert_eq!(images.memory.calls_of("ListPodSandbox"), 0);
    bridge.stop().await;
    runtime.stop().await;
    images.stop().await;
}

/// A CRI server with the image service only, as a separate image endpoint may be.
struct ImagesOnly(std::sync::Arc<cri_bridge::memory::MemoryRuntime>);

impl cri_bridge::grpc::Handler for ImagesOnly {
    fn unary(
        self: std::sync::Arc<Self>,
        rpc: cri_bridge::grpc::Rpc,
        request: tonic::Request<bytes::Bytes>,
    ) -> futures_util::future::BoxFuture<'static, Result<tonic::Response<bytes::Bytes>, tonic::Status>> {
        if rpc.info.service != "ImageService" {
            return Box::pin(
                async move { Err(tonic::Status::unimplemented(format!("unknown service {}", rpc.path()))) },
            );
        }
        self.0.clone().unary(rpc, request)
    }

    fn server_streaming(
        self: std::sync::Arc<Self>,
        rpc: cri_bridge::grpc::Rpc,
        request: tonic::Request<bytes::Bytes>,
    ) -> futures_util::future::BoxFuture<'static, Result<tonic::Response<cri_bridge::grpc::ByteStream>, tonic::Status>>
    {
        self.0.clone().server_streaming(rpc, request)
    }
}

#[tokio::test]
async fn an_image_endpoint_that_serves_only_images_is_discovered() {
    let dir = TempDir::new("images-only");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let memory = cri_bridge::memory::MemoryRuntime::new();
    let server =
        cri_bridge::grpc::CriServer::new(std::sync::Arc::new(ImagesOnly(memory.clone())), &[V1alpha2], 1 << 24);
    let listener = tokio::net::UnixListener::bind(dir.path("images.sock")).unwrap();
    let images = tokio::spawn(cri_bridge::grpc::serve(listener, server, std::future::pending()));
    let mut config = config(&dir, &dir.path("runtime.sock"), None);
    config.image_backend = Some(cri_bridge::config::Endpoint::Unix(dir.path("images.sock")));
    let bridge = Bridge::start(config).await;
    let mut image_client = v1::image_service_client::ImageServiceClient::new(channel(&bridge.socket));
    let spec = v1::ImageSpec { image: "busybox:1".into(), ..Default::default() };
    image_client.pull_image(v1::PullImageRequest { image: Some(spec), ..Default::default() }).await.unwrap();
    let listed = image_client.list_images(v1::ListImagesRequest::default()).await.unwrap().into_inner();
    let tags: Vec<&String> = listed.images.iter().flat_map(|i| &i.repo_tags).collect();
    assert!(tags.iter().any(|t| t.ends_with("busybox:1")), "the pulled image is listed: {tags:?}");
    assert_eq!(memory.calls_of("ListImages"), 1, "the image-only server answered");
    assert_eq!(runtime.memory.calls_of("ListImages"), 0);
    bridge.stop().await;
    runtime.stop().await;
    images.abort();
}

#[tokio::test]
async fn a_pinned_runtime_that_is_away_is_named_in_unavailable() {
    let dir = TempDir::new("pinned-away");
    let runtime_socket = dir.path("runtime.sock");
    let bridge = Bridge::start(config(&dir, &runtime_socket, Some(V1alpha2))).await;
    let status = V1Runtime::new(channel(&bridge.socket)).version(v1::VersionRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains(&runtime_socket.display().to_string()), "names the endpoint: {status:?}");
    bridge.stop().await;
}

#[tokio::test]
async fn a_backend_connection_lost_mid_call_is_unavailable_naming_the_endpoint() {
    // A "runtime" that accepts, reads the start of the call and hangs up.
    let dir = TempDir::new("lost");
    let socket = dir.path("runtime.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 256];
            let _ = std::io::Read::read(&mut stream, &mut buf);
            drop(stream);
        }
    });
    let bridge = Bridge::start(config(&dir, &socket, Some(V1))).await;
    let status = V1Runtime::new(channel(&bridge.socket))
        .list_pod_sandbox(v1::ListPodSandboxRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains(&socket.display().to_string()), "names the endpoint: {status:?}");
    bridge.stop().await;
}

/// A pin is trusted: pinned to a version the runtime does not serve, cri-bridge still speaks it,
/// and each call gets the runtime's own UNIMPLEMENTED (naming the service it lacks), not an
/// UNAVAILABLE that would send an operator looking for a dead runtime.
#[tokio::test]
async fn a_pin_to_a_version_the_runtime_lacks_gets_the_runtimes_unimplemented() {
    let dir = TempDir::new("pin-wrong");
    let runtime_socket = dir.path("runtime.sock");
    let runtime = Runtime::start(&runtime_socket, &[V1]).await;
    let pinned = Bridge::start(config(&dir, &runtime_socket, Some(V1alpha2))).await;
    let mut client = V1Runtime::new(channel(&pinned.socket));
    for _ in 0..2 {
        let status = client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
        assert!(status.message().contains("runtime.v1alpha2.RuntimeService"), "{status:?}");
    }
    assert_eq!(runtime.memory.calls_of("ListPodSandbox"), 0, "the runtime served none of them");
    pinned.stop().await;
    runtime.stop().await;
}
