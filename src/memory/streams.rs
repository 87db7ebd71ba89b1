//! What streams: the container events (GetContainerEvents), the Stream* calls (their List* a
//! few items a message), and the URLs of the streaming server (Exec, Attach, PortForward).

use super::state::{Container, MemoryRuntime, MessageStream, Sandbox, State};
use super::support::{missing, now_nanos};
use crate::api::v1;
use futures_util::stream::{self, StreamExt};
use tokio::sync::broadcast;
use tonic::Status;

/// Where Exec, Attach and PortForward URLs point (the kubelet's usual streaming port).
const STREAMING_BASE: &str = "http://127.0.0.1:10010";

/// Items per message in the Stream* calls.
const STREAM_CHUNK: usize = 2;

impl MemoryRuntime {
    pub(super) fn emit(&self, event: v1::ContainerEventResponse) {
        // No receivers is not an error: nobody is watching.
        let _ = self.events.send(event);
    }

    /// Every container event from now on, until the caller drops the stream or the runtime's
    /// streams are ended ([`MemoryRuntime::end_streams`]).
    pub fn get_container_events(
        &self,
        _req: v1::GetEventsRequest,
    ) -> Result<MessageStream<v1::ContainerEventResponse>, Status> {
        let events = self.events.subscribe();
        let closing = self.closing.subscribe();
        let stream = stream::unfold((events, closing), |(mut events, mut closing)| async move {
            loop {
                let event = tokio::select! {
                    event = events.recv() => event,
                    _ = closing.wait_for(|closed| *closed) => return None,
                };
                match event {
                    Ok(event) => return Some((event, (events, closing))),
                    // A slow watcher misses events rather than stalling the runtime.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        Ok(stream.boxed())
    }

    pub fn stream_pod_sandboxes(
        &self,
        req: v1::StreamPodSandboxesRequest,
    ) -> Result<MessageStream<v1::StreamPodSandboxesResponse>, Status> {
        let items = self.list_pod_sandbox(v1::ListPodSandboxRequest { filter: req.filter })?.items;
        Ok(chunked(items, |pod_sandboxes| v1::StreamPodSandboxesResponse { pod_sandboxes }))
    }

    pub fn stream_containers(
        &self,
        req: v1::StreamContainersRequest,
    ) -> Result<MessageStream<v1::StreamContainersResponse>, Status> {
        let items = self.list_containers(v1::ListContainersRequest { filter: req.filter })?.containers;
        Ok(chunked(items, |containers| v1::StreamContainersResponse { containers }))
    }

    pub fn stream_container_stats(
        &self,
        req: v1::StreamContainerStatsRequest,
    ) -> Result<MessageStream<v1::StreamContainerStatsResponse>, Status> {
        let items = self.list_container_stats(v1::ListContainerStatsRequest { filter: req.filter })?.stats;
        Ok(chunked(items, |container_stats| v1::StreamContainerStatsResponse { container_stats }))
    }

    pub fn stream_pod_sandbox_stats(
        &self,
        req: v1::StreamPodSandboxStatsRequest,
    ) -> Result<MessageStream<v1::StreamPodSandboxStatsResponse>, Status> {
        let items = self.list_pod_sandbox_stats(v1::ListPodSandboxStatsRequest { filter: req.filter })?.stats;
        Ok(chunked(items, |pod_sandbox_stats| v1::StreamPodSandboxStatsResponse { pod_sandbox_stats }))
    }

    pub fn stream_pod_sandbox_metrics(
        &self,
        _req: v1::StreamPodSandboxMetricsRequest,
    ) -> Result<MessageStream<v1::StreamPodSandboxMetricsResponse>, Status> {
        let items = self.list_pod_sandbox_metrics(v1::ListPodSandboxMetricsRequest {})?.pod_metrics;
        Ok(chunked(items, |pod_sandbox_metrics| v1::StreamPodSandboxMetricsResponse { pod_sandbox_metrics }))
    }

    pub fn stream_images(
        &self,
        req: v1::StreamImagesRequest,
    ) -> Result<MessageStream<v1::StreamImagesResponse>, Status> {
        let items = self.list_images(v1::ListImagesRequest { filter: req.filter })?.images;
        Ok(chunked(items, |images| v1::StreamImagesResponse { images }))
    }

    pub fn exec(&self, req: v1::ExecRequest) -> Result<v1::ExecResponse, Status> {
        self.state().container(&req.container_id)?.require_running()?;
        if req.cmd.is_empty() {
            return Err(missing("cmd"));
        }
        check_streams(req.stdin, req.stdout, req.stderr, req.tty)?;
        Ok(v1::ExecResponse { url: self.streaming_url("exec") })
    }

    pub fn attach(&self, req: v1::AttachRequest) -> Result<v1::AttachResponse, Status> {
        self.state().container(&req.container_id)?.require_running()?;
        check_streams(req.stdin, req.stdout, req.stderr, req.tty)?;
        Ok(v1::AttachResponse { url: self.streaming_url("attach") })
    }

    pub fn port_forward(&self, req: v1::PortForwardRequest) -> Result<v1::PortForwardResponse, Status> {
        let state = self.state();
        let sandbox = state.sandbox(&req.pod_sandbox_id)?;
        if sandbox.state != v1::PodSandboxState::SandboxReady {
            return Err(Status::failed_precondition(format!("pod sandbox {:?} is not ready", sandbox.id)));
        }
        if let Some(port) = req.port.iter().find(|p| !(1..=65535).contains(*p)) {
            return Err(Status::invalid_argument(format!("port {port} is out of range")));
        }
        Ok(v1::PortForwardResponse { url: self.streaming_url("portforward") })
    }

    fn streaming_url(&self, kind: &str) -> String {
        let token = self.new_id();
        format!("{STREAMING_BASE}/{kind}/{}", &token[..8])
    }
}

impl State {
    /// An event about one container, with its pod's status as it is now.
    pub(super) fn event(
        &self,
        sandbox_id: &str,
        container_id: &str,
        kind: v1::ContainerEventType,
    ) -> v1::ContainerEventResponse {
        v1::ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: kind as i32,
            created_at: now_nanos(),
            pod_sandbox_status: self.sandboxes.iter().find(|s| s.id == sandbox_id).map(Sandbox::status),
            containers_statuses: self.containers_of(sandbox_id).map(Container::status).collect(),
        }
    }
}

/// The Stream* calls send their items a few at a time.
fn chunked<T: Send + 'static, R: Send + 'static>(items: Vec<T>, wrap: fn(Vec<T>) -> R) -> MessageStream<R> {
    let mut messages = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        messages.push(wrap(items.by_ref().take(STREAM_CHUNK).collect()));
    }
    stream::iter(messages).boxed()
}

/// The checks a streaming server makes before handing out an Exec or Attach URL.
fn check_streams(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<(), Status> {
    if !(stdin || stdout || stderr) {
        return Err(Status::invalid_argument("one of stdin, stdout or stderr must be set"));
    }
    if tty && stderr {
        return Err(Status::invalid_argument("tty and stderr cannot both be set"));
    }
    Ok(())
}
