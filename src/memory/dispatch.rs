//! Bytes ↔ typed calls: the request of an RPC in any version converted to v1, routed to the
//! method of the same name, and the answer converted back; the [`Handler`] impl and
//! [`serve_memory`].

use super::codec::decode_request;
use super::exec_sync::exec_sync_sleep;
use super::state::{MemoryRuntime, MessageStream};
use super::support::lock;
use crate::convert::{Cx, Route};
use crate::grpc::{ByteStream, CriServer, Handler, Rpc};
use crate::version::CriVersion;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::StreamExt;
use prost::Message;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};

/// The metadata key echoed back to the caller.
const TRACEPARENT: &str = "traceparent";

impl MemoryRuntime {
    /// Records the call; returns the `traceparent` to echo.
    fn record(&self, rpc: Rpc, metadata: &MetadataMap) -> Option<MetadataValue<tonic::metadata::Ascii>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        *lock(&self.calls_by_method).entry(rpc.info.method).or_insert(0) += 1;
        lock(&self.metadata).insert(rpc.info.method, metadata.clone());
        if let Some(id) = metadata.get(super::state::CALL_ID).and_then(|v| v.to_str().ok()) {
            lock(&self.call_ids).push(id.to_string());
        }
        metadata.get(TRACEPARENT).cloned()
    }

    fn dispatch_unary(&self, rpc: Rpc, body: &[u8]) -> Result<Bytes, Status> {
        macro_rules! unary {
            ($($name:literal => $method:ident,)*) => {
                match rpc.info.method {
                    // Version alone depends on the version served.
                    "Version" => self.call(rpc, body, |rt, req| Ok(rt.version_as(rpc.version, req))),
                    $($name => self.call(rpc, body, Self::$method),)*
                    _ => Err(unimplemented(rpc)),
                }
            };
        }
        unary! {
            "Status" => status,
            "UpdateRuntimeConfig" => update_runtime_config,
            "RunPodSandbox" => run_pod_sandbox,
            "StopPodSandbox" => stop_pod_sandbox,
            "RemovePodSandbox" => remove_pod_sandbox,
            "PodSandboxStatus" => pod_sandbox_status,
            "ListPodSandbox" => list_pod_sandbox,
            "CreateContainer" => create_container,
            "StartContainer" => start_container,
            "StopContainer" => stop_container,
            "RemoveContainer" => remove_container,
            "ListContainers" => list_containers,
            "ContainerStatus" => container_status,
            "UpdateContainerResources" => update_container_resources,
            "ReopenContainerLog" => reopen_container_log,
            "ExecSync" => exec_sync,
            "Exec" => exec,
            "Attach" => attach,
            "PortForward" => port_forward,
            "ContainerStats" => container_stats,
            "ListContainerStats" => list_container_stats,
            "PodSandboxStats" => pod_sandbox_stats,
            "ListPodSandboxStats" => list_pod_sandbox_stats,
            "CheckpointContainer" => checkpoint_container,
            "ListMetricDescriptors" => list_metric_descriptors,
            "ListPodSandboxMetrics" => list_pod_sandbox_metrics,
            "RuntimeConfig" => runtime_config,
            "UpdatePodSandboxResources" => update_pod_sandbox_resources,
            "CheckpointPod" => checkpoint_pod,
            "RestorePod" => restore_pod,
            "ListImages" => list_images,
            "ImageStatus" => image_status,
            "PullImage" => pull_image,
            "RemoveImage" => remove_image,
            "ImageFsInfo" => image_fs_info,
        }
    }

    fn dispatch_streaming(&self, rpc: Rpc, body: &[u8]) -> Result<ByteStream, Status> {
        macro_rules! streaming {
            ($($name:literal => $method:ident,)*) => {
                match rpc.info.method {
                    $($name => self.call_streaming(rpc, body, Self::$method),)*
                    _ => Err(unimplemented(rpc)),
                }
            };
        }
        streaming! {
            "StreamPodSandboxes" => stream_pod_sandboxes,
            "StreamContainers" => stream_containers,
            "StreamContainerStats" => stream_container_stats,
            "StreamPodSandboxStats" => stream_pod_sandbox_stats,
            "GetContainerEvents" => get_container_events,
            "StreamPodSandboxMetrics" => stream_pod_sandbox_metrics,
            "StreamImages" => stream_images,
        }
    }

    /// Request bytes of `rpc.version` → v1 → `method` → v1 → response bytes of `rpc.version`.
    fn call<Req, Resp>(
        &self,
        rpc: Rpc,
        body: &[u8],
        method: impl FnOnce(&Self, Req) -> Result<Resp, Status>,
    ) -> Result<Bytes, Status>
    where
        Req: Message + Default,
        Resp: Message,
    {
        let response = method(self, decode_request(rpc, body)?)?;
        response_route(rpc)?(response.encode_to_vec())
    }

    fn call_streaming<Req, Resp>(
        &self,
        rpc: Rpc,
        body: &[u8],
        method: impl FnOnce(&Self, Req) -> Result<MessageStream<Resp>, Status>,
    ) -> Result<ByteStream, Status>
    where
        Req: Message + Default,
        Resp: Message + 'static,
    {
        let messages = method(self, decode_request(rpc, body)?)?;
        let convert = response_route(rpc)?;
        Ok(messages.map(move |message| convert(message.encode_to_vec())).boxed())
    }
}

impl Handler for MemoryRuntime {
    fn unary(
        self: Arc<Self>,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> BoxFuture<'static, Result<Response<Bytes>, Status>> {
        Box::pin(async move {
            let traceparent = self.record(rpc, request.metadata());
            if let Err(status) = exec_sync_sleep(rpc, &request).await {
                return echo(traceparent, Err(status));
            }
            if let Some(failure) = self.failure_of(rpc.info.method) {
                return echo(traceparent, Err(failure));
            }
            let answer = self.dispatch_unary(rpc, request.get_ref());
            echo(traceparent, self.as_posed(rpc, answer).map(Response::new))
        })
    }

    fn server_streaming(
        self: Arc<Self>,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> BoxFuture<'static, Result<Response<ByteStream>, Status>> {
        Box::pin(async move {
            let traceparent = self.record(rpc, request.metadata());
            echo(traceparent, self.dispatch_streaming(rpc, request.get_ref()).map(Response::new))
        })
    }
}

/// Serves a new [`MemoryRuntime`] on a unix socket at `path` (replacing a stale socket) in
/// `versions`, until `shutdown` completes.
pub async fn serve_memory(
    path: &std::path::Path,
    versions: &[CriVersion],
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(Arc<MemoryRuntime>, tokio::task::JoinHandle<()>)> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    let runtime = MemoryRuntime::new();
    let server = CriServer::new(runtime.clone(), versions, 16 << 20);
    let closer = runtime.clone();
    let shutdown = async move {
        shutdown.await;
        closer.end_streams();
    };
    let task = tokio::spawn(async move {
        if let Err(error) = crate::grpc::serve(listener, server, shutdown).await {
            tracing::error!(%error, "memory runtime server failed");
        }
    });
    Ok((runtime, task))
}

fn unimplemented(rpc: Rpc) -> Status {
    Status::unimplemented(format!("{} is not implemented by the memory runtime", rpc.path()))
}

/// Converts v1 response bytes of `rpc` to `rpc.version`.
fn response_route(rpc: Rpc) -> Result<impl Fn(Vec<u8>) -> Result<Bytes, Status> + Send + 'static, Status> {
    let route = Route::new(rpc.info.response, CriVersion::V1, rpc.version)
        .ok_or_else(|| Status::internal(format!("no conversion of {} from v1", rpc.info.response)))?;
    let name = rpc.info.response;
    Ok(move |bytes: Vec<u8>| {
        if route.is_identity() {
            return Ok(Bytes::from(bytes));
        }
        route
            .run(&bytes, &mut Cx::counting())
            .map(Bytes::from)
            .map_err(|e| Status::internal(format!("cannot convert {name}: {e}")))
    })
}

/// Puts the request's `traceparent` on the response (or the error).
fn echo<T>(
    traceparent: Option<MetadataValue<tonic::metadata::Ascii>>,
    result: Result<Response<T>, Status>,
) -> Result<Response<T>, Status> {
    let Some(value) = traceparent else {
        return result;
    };
    match result {
        Ok(mut response) => {
            response.metadata_mut().insert(TRACEPARENT, value);
            Ok(response)
        }
        Err(mut status) => {
            status.metadata_mut().insert(TRACEPARENT, value);
            Err(status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RUNTIME_NAME;
    use std::sync::atomic::AtomicU64;
    use tonic::Code;

    #[tokio::test]
    async fn every_rpc_of_every_version_is_dispatched() {
        let rt = MemoryRuntime::new();
        for version in CriVersion::NEWEST_FIRST {
            for info in version.schema().rpcs {
                let rpc = Rpc { version, info };
                let request = || Request::new(Bytes::new());
                let result = if info.server_streaming {
                    rt.clone().server_streaming(rpc, request()).await.map(|_| ())
                } else {
                    rt.clone().unary(rpc, request()).await.map(|_| ())
                };
                // An empty request may be invalid, but every method must be known and convertible.
                if let Err(status) = result {
                    let code = status.code();
                    assert!(code != Code::Unimplemented && code != Code::Internal, "{}: {status:?}", rpc.path());
                }
                assert!(rt.take_metadata(info.method).is_some(), "{}", rpc.path());
            }
        }
        let total: usize = CriVersion::NEWEST_FIRST.iter().map(|v| v.schema().rpcs.len()).sum();
        assert_eq!(rt.calls(), total as u64);
        assert_eq!(CriVersion::V1.schema().rpcs.len(), 43);
    }

    #[tokio::test]
    async fn serves_v1alpha2_on_a_socket() {
        use crate::api::{v1 as v1_api, v1alpha2 as api};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "crib-memory-{}-{}.sock",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (rt, task) = serve_memory(&path, &[CriVersion::V1alpha2], async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
        let channel = crate::grpc::unix_channel(path.clone(), || {});
        let mut client = api::runtime_service_client::RuntimeServiceClient::new(channel.clone());

        let mut request = Request::new(api::VersionRequest { version: "0.1.0".into() });
        request
            .metadata_mut()
            .insert(TRACEPARENT, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".parse().unwrap());
        let response = client.version(request).await.unwrap();
        assert!(response.metadata().get(TRACEPARENT).is_some(), "traceparent is echoed");
        let version = response.into_inner();
        assert_eq!((version.runtime_name.as_str(), version.runtime_api_version.as_str()), (RUNTIME_NAME, "v1alpha2"));
        assert!(rt.take_metadata("RuntimeService/Version").unwrap().get(TRACEPARENT).is_some());

        let config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: "web".into(),
                uid: "1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        };
        let run = api::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        let pod = client.run_pod_sandbox(run).await.unwrap().into_inner().pod_sandbox_id;
        let filter = api::PodSandboxFilter {
            label_selector: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        };
        let items = client
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: Some(filter) })
            .await
            .unwrap()
            .into_inner()
            .items;
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].id.as_str(), items[0].state), (pod.as_str(), api::PodSandboxState::SandboxReady as i32));
        assert_eq!(rt.calls(), 3);

        // Only v1alpha2 is enabled: a v1 path is UNIMPLEMENTED and never reaches the runtime.
        let mut v1_client = v1_api::runtime_service_client::RuntimeServiceClient::new(channel);
        let err = v1_client.version(v1_api::VersionRequest::default()).await.unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
        assert_eq!(rt.calls(), 3);

        drop((client, v1_client));
        let _ = stop.send(());
        tokio::time::timeout(std::time::Duration::from_secs(10), task).await.unwrap().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
