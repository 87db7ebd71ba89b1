//! An in-memory CRI runtime: pod sandboxes, containers and images kept in a map, with the state
//! machine, filters and errors of a real runtime but no processes behind them.
//!
//! It serves two users: the tests, which need a backend to put behind the proxy (and can see what
//! reached it with [`MemoryRuntime::take_metadata`] and [`MemoryRuntime::calls`]), and the README
//! quick start, which runs one on a socket with [`serve_memory`] so that cri-bridge and crictl
//! can be tried without containerd.
//!
//! The runtime thinks in v1. Its [`Handler`] converts each request from the version it was served
//! in to v1, calls the typed method of the same name (`run_pod_sandbox`, …) and converts the
//! answer back, so one implementation serves whichever versions its [`CriServer`] enables.
//!
//! Behaviour worth knowing:
//! - IDs are 64 hex characters. Image IDs are `sha256:<hex>` derived from the reference, so
//!   pulling the same reference again gives the same image.
//! - A container goes CREATED → RUNNING → EXITED. StopContainer exits it with 143 (SIGTERM, a
//!   timeout above 0) or 137 (SIGKILL, timeout 0); stopping a container that is not running does
//!   nothing. StopPodSandbox kills the pod's containers and makes it NOTREADY; RemovePodSandbox
//!   does the same if needed and then removes the pod with its containers.
//! - Remove* of an unknown ID succeeds, because the CRI requires those calls to be idempotent;
//!   every other call naming an unknown ID fails with `NOT_FOUND`.
//! - ExecSync understands `echo`, `true`, `false`, `exit N` and `sh -c "…"` of those; any other
//!   command exits 127.

use crate::api::v1;
use crate::convert::{Cx, Route};
use crate::grpc::{ByteStream, CriServer, Handler, Rpc};
use crate::version::CriVersion;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt};
use prost::Message;
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{broadcast, watch};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};

/// `VersionResponse.runtime_name`.
pub const RUNTIME_NAME: &str = "cri-bridge-memory";
/// Where the fake's images and writable layers "live" (`fs_id.mountpoint` in the stats).
pub const FS_MOUNTPOINT: &str = "/var/lib/cri-bridge-memory";
/// The images present from the start: the pause image and busybox.
pub const PRELOADED_IMAGES: [&str; 2] = ["registry.k8s.io/pause:3.10", "docker.io/library/busybox:latest"];
/// Where Exec, Attach and PortForward URLs point (the kubelet's usual streaming port).
const STREAMING_BASE: &str = "http://127.0.0.1:10010";
/// Items per message in the Stream* calls.
const STREAM_CHUNK: usize = 2;
/// The metadata key echoed back to the caller.
const TRACEPARENT: &str = "traceparent";

/// The messages of a typed server-streaming method.
pub type MessageStream<T> = BoxStream<'static, T>;

/// The in-memory runtime. Create it with [`MemoryRuntime::new`] and serve it with a
/// [`CriServer`] (or [`serve_memory`]); or call its typed v1 methods directly.
pub struct MemoryRuntime {
    state: Mutex<State>,
    /// Request metadata of the latest call of each method, by method name.
    metadata: Mutex<HashMap<&'static str, MetadataMap>>,
    /// Calls served per method.
    calls_by_method: Mutex<HashMap<&'static str, u64>>,
    calls: AtomicU64,
    ids: AtomicU64,
    id_hasher: RandomState,
    events: broadcast::Sender<v1::ContainerEventResponse>,
    /// Set once the server shuts down: ends the GetContainerEvents streams.
    closing: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    sandboxes: Vec<Sandbox>,
    containers: Vec<Container>,
    images: Vec<v1::Image>,
    pod_cidr: String,
    /// Source of pod IPs (10.88.0.0/16, as containerd's default bridge) and of fake PIDs.
    next_ip: u32,
    next_pid: u32,
}

struct Sandbox {
    id: String,
    config: v1::PodSandboxConfig,
    runtime_handler: String,
    state: v1::PodSandboxState,
    created_at: i64,
    ip: String,
    pid: u32,
}

struct Container {
    id: String,
    sandbox_id: String,
    config: v1::ContainerConfig,
    image_id: String,
    image_ref: String,
    state: v1::ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    resources: Option<v1::ContainerResources>,
    user: v1::ContainerUser,
    log_path: String,
    pid: u32,
}

impl MemoryRuntime {
    /// A runtime with no pods or containers and the [`PRELOADED_IMAGES`].
    pub fn new() -> Arc<MemoryRuntime> {
        let images = vec![
            new_image(PRELOADED_IMAGES[0], 320_368, Some(65535), true),
            new_image(PRELOADED_IMAGES[1], 2_167_176, Some(0), false),
        ];
        let state = State { images, next_ip: 2, next_pid: 1000, ..State::default() };
        Arc::new(MemoryRuntime {
            state: Mutex::new(state),
            metadata: Mutex::new(HashMap::new()),
            calls_by_method: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
            ids: AtomicU64::new(0),
            id_hasher: RandomState::new(),
            events: broadcast::channel(1024).0,
            closing: watch::channel(false).0,
        })
    }

    /// The request metadata of the most recent call of `method` (`Version` or
    /// `RuntimeService/Version`), whatever version it came in, and forgets it: a check after a
    /// call sees that call's metadata or nothing, never an earlier call's.
    pub fn take_metadata(&self, method: &str) -> Option<MetadataMap> {
        let method = method.rsplit('/').next().unwrap_or(method);
        lock(&self.metadata).remove(method)
    }

    /// How many calls of `method` (`ListPodSandbox`) the runtime has served, in any version.
    pub fn calls_of(&self, method: &str) -> u64 {
        let method = method.rsplit('/').next().unwrap_or(method);
        lock(&self.calls_by_method).get(method).copied().unwrap_or(0)
    }

    /// How many calls the runtime has served (unknown methods included).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Ends the open GetContainerEvents streams (and those opened later), so that a graceful
    /// shutdown need not wait for them. [`serve_memory`] calls it when its shutdown completes.
    /// How many GetContainerEvents streams are open (tests: a cancelled stream must go away).
    pub fn event_watchers(&self) -> usize {
        self.events.receiver_count()
    }

    pub fn end_streams(&self) {
        self.closing.send_replace(true);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// 64 hex characters that look random: a counter and the time, hashed.
    fn new_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let now = now_nanos();
        hex64(|i| self.id_hasher.hash_one((n, now, i)))
    }

    fn emit(&self, event: v1::ContainerEventResponse) {
        // No receivers is not an error: nobody is watching.
        let _ = self.events.send(event);
    }

    // ----- RuntimeService -----

    /// Version, answered as v1; over the wire `runtime_api_version` is the version served.
    pub fn version(&self, req: v1::VersionRequest) -> Result<v1::VersionResponse, Status> {
        Ok(self.version_as(CriVersion::V1, req))
    }

    fn version_as(&self, served: CriVersion, _req: v1::VersionRequest) -> v1::VersionResponse {
        v1::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: served.as_str().into(),
        }
    }

    pub fn status(&self, req: v1::StatusRequest) -> Result<v1::StatusResponse, Status> {
        let condition = |kind: &str| v1::RuntimeCondition { r#type: kind.into(), status: true, ..Default::default() };
        let mut info = HashMap::new();
        if req.verbose {
            let config = format!("{{\"podCIDR\":{}}}", json_string(&self.state().pod_cidr));
            info.insert("config".to_string(), config);
        }
        let features = v1::RuntimeHandlerFeatures { recursive_read_only_mounts: true, user_namespaces: true };
        let runtime_handlers = ["", "runc"]
            .into_iter()
            .map(|name| v1::RuntimeHandler { name: name.into(), features: Some(features) })
            .collect();
        Ok(v1::StatusResponse {
            status: Some(v1::RuntimeStatus { conditions: vec![condition("RuntimeReady"), condition("NetworkReady")] }),
            info,
            runtime_handlers,
            features: Some(v1::RuntimeFeatures {
                supplemental_groups_policy: true,
                user_namespaces_host_network: false,
            }),
        })
    }

    pub fn update_runtime_config(
        &self,
        req: v1::UpdateRuntimeConfigRequest,
    ) -> Result<v1::UpdateRuntimeConfigResponse, Status> {
        if let Some(network) = req.runtime_config.and_then(|c| c.network_config) {
            self.state().pod_cidr = network.pod_cidr;
        }
        Ok(v1::UpdateRuntimeConfigResponse {})
    }

    pub fn run_pod_sandbox(&self, req: v1::RunPodSandboxRequest) -> Result<v1::RunPodSandboxResponse, Status> {
        let config = req.config.ok_or_else(|| missing("config"))?;
        let metadata = config.metadata.as_ref().ok_or_else(|| missing("config.metadata"))?;
        if metadata.name.is_empty() {
            return Err(missing("config.metadata.name"));
        }
        let mut state = self.state();
        // As containerd, one sandbox per name, namespace, uid and attempt.
        if let Some(other) = state.sandboxes.iter().find(|s| s.config.metadata == config.metadata) {
            return Err(Status::already_exists(format!(
                "pod sandbox name \"{}_{}_{}_{}\" is reserved for {:?}",
                metadata.name, metadata.namespace, metadata.uid, metadata.attempt, other.id
            )));
        }
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network == v1::NamespaceMode::Node as i32);
        let ip = if host_network {
            String::new()
        } else {
            let n = state.next_ip;
            state.next_ip += 1;
            format!("10.88.{}.{}", (n >> 8) & 0xff, n & 0xff)
        };
        let pid = state.next_pid();
        let id = self.new_id();
        state.sandboxes.push(Sandbox {
            id: id.clone(),
            config,
            runtime_handler: req.runtime_handler,
            state: v1::PodSandboxState::SandboxReady,
            created_at: now_nanos(),
            ip,
            pid,
        });
        Ok(v1::RunPodSandboxResponse { pod_sandbox_id: id })
    }

    pub fn stop_pod_sandbox(&self, req: v1::StopPodSandboxRequest) -> Result<v1::StopPodSandboxResponse, Status> {
        let mut state = self.state();
        let index = state.sandbox_index(&req.pod_sandbox_id)?;
        self.stop_sandbox(&mut state, index);
        Ok(v1::StopPodSandboxResponse {})
    }

    /// Kills the sandbox's running containers and makes it NOTREADY.
    fn stop_sandbox(&self, state: &mut State, index: usize) {
        let id = state.sandboxes[index].id.clone();
        let running: Vec<usize> = (0..state.containers.len())
            .filter(|&i| state.containers[i].sandbox_id == id && state.containers[i].is_running())
            .collect();
        for i in running {
            state.containers[i].exit(137);
            let event = state.event(&id, &state.containers[i].id, v1::ContainerEventType::ContainerStoppedEvent);
            self.emit(event);
        }
        state.sandboxes[index].state = v1::PodSandboxState::SandboxNotready;
        state.sandboxes[index].pid = 0;
    }

    pub fn remove_pod_sandbox(&self, req: v1::RemovePodSandboxRequest) -> Result<v1::RemovePodSandboxResponse, Status> {
        require("pod_sandbox_id", &req.pod_sandbox_id)?;
        let mut state = self.state();
        // Idempotent, as the CRI requires: an unknown sandbox is already removed.
        let Some(index) = state.sandboxes.iter().position(|s| s.id == req.pod_sandbox_id) else {
            return Ok(v1::RemovePodSandboxResponse {});
        };
        self.stop_sandbox(&mut state, index);
        while let Some(i) = state.containers.iter().position(|c| c.sandbox_id == req.pod_sandbox_id) {
            let container = state.containers.remove(i);
            let event = state.event(&req.pod_sandbox_id, &container.id, v1::ContainerEventType::ContainerDeletedEvent);
            self.emit(event);
        }
        state.sandboxes.remove(index);
        Ok(v1::RemovePodSandboxResponse {})
    }

    pub fn pod_sandbox_status(&self, req: v1::PodSandboxStatusRequest) -> Result<v1::PodSandboxStatusResponse, Status> {
        let state = self.state();
        let sandbox = state.sandbox(&req.pod_sandbox_id)?;
        let mut response = v1::PodSandboxStatusResponse { status: Some(sandbox.status()), ..Default::default() };
        if req.verbose {
            let info = format!(
                "{{\"pid\":{},\"sandboxImage\":{},\"runtimeHandler\":{}}}",
                sandbox.pid,
                json_string(PRELOADED_IMAGES[0]),
                json_string(&sandbox.runtime_handler)
            );
            response.info.insert("info".into(), info);
            response.containers_statuses = state.containers_of(&sandbox.id).map(Container::status).collect();
            response.timestamp = now_nanos();
        }
        Ok(response)
    }

    pub fn list_pod_sandbox(&self, req: v1::ListPodSandboxRequest) -> Result<v1::ListPodSandboxResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let items = self
            .state()
            .sandboxes
            .iter()
            .filter(|s| filter.id.is_empty() || s.id == filter.id)
            .filter(|s| filter.state.as_ref().is_none_or(|f| s.state as i32 == f.state))
            .filter(|s| labels_match(&s.config.labels, &filter.label_selector))
            .map(Sandbox::item)
            .collect();
        Ok(v1::ListPodSandboxResponse { items })
    }

    pub fn stream_pod_sandboxes(
        &self,
        req: v1::StreamPodSandboxesRequest,
    ) -> Result<MessageStream<v1::StreamPodSandboxesResponse>, Status> {
        let items = self.list_pod_sandbox(v1::ListPodSandboxRequest { filter: req.filter })?.items;
        Ok(chunked(items, |pod_sandboxes| v1::StreamPodSandboxesResponse { pod_sandboxes }))
    }

    pub fn create_container(&self, req: v1::CreateContainerRequest) -> Result<v1::CreateContainerResponse, Status> {
        let config = req.config.ok_or_else(|| missing("config"))?;
        let metadata = config.metadata.as_ref().ok_or_else(|| missing("config.metadata"))?;
        if metadata.name.is_empty() {
            return Err(missing("config.metadata.name"));
        }
        let reference = config.image.as_ref().map(|i| i.image.as_str()).unwrap_or_default();
        if reference.is_empty() {
            return Err(missing("config.image"));
        }
        let mut state = self.state();
        let sandbox = state.sandbox(&req.pod_sandbox_id)?;
        if sandbox.state != v1::PodSandboxState::SandboxReady {
            return Err(Status::failed_precondition(format!("pod sandbox {:?} is not ready", sandbox.id)));
        }
        let image = state.find_image(reference).ok_or_else(|| not_found("image", reference))?;
        if let Some(other) = state.containers_of(&sandbox.id).find(|c| c.config.metadata == config.metadata) {
            return Err(Status::already_exists(format!(
                "container name \"{}_{}\" is reserved for {:?}",
                metadata.name, metadata.attempt, other.id
            )));
        }
        let log_path = match (sandbox.config.log_directory.as_str(), config.log_path.as_str()) {
            ("", path) | (path, "") => path.to_string(),
            (dir, path) => format!("{}/{}", dir.trim_end_matches('/'), path),
        };
        let security = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
        let user = v1::LinuxContainerUser {
            uid: security.and_then(|s| s.run_as_user).map_or(image.uid.map_or(0, |u| u.value), |u| u.value),
            gid: security.and_then(|s| s.run_as_group).map_or(0, |g| g.value),
            supplemental_groups: security.map(|s| s.supplemental_groups.clone()).unwrap_or_default(),
        };
        let linux = config.linux.as_ref().and_then(|l| l.resources.clone());
        let windows = config.windows.as_ref().and_then(|w| w.resources.clone());
        let resources = (linux.is_some() || windows.is_some()).then_some(v1::ContainerResources { linux, windows });
        let sandbox_id = sandbox.id.clone();
        let image_id = image.id.clone();
        let image_ref = image.repo_digests.first().unwrap_or(&image.id).clone();
        let id = self.new_id();
        state.containers.push(Container {
            id: id.clone(),
            sandbox_id: sandbox_id.clone(),
            config,
            image_id,
            image_ref,
            state: v1::ContainerState::ContainerCreated,
            created_at: now_nanos(),
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            resources,
            user: v1::ContainerUser { linux: Some(user) },
            log_path,
            pid: 0,
        });
        self.emit(state.event(&sandbox_id, &id, v1::ContainerEventType::ContainerCreatedEvent));
        Ok(v1::CreateContainerResponse { container_id: id })
    }

    pub fn start_container(&self, req: v1::StartContainerRequest) -> Result<v1::StartContainerResponse, Status> {
        let mut state = self.state();
        let index = state.container_index(&req.container_id)?;
        let container = &state.containers[index];
        if container.state != v1::ContainerState::ContainerCreated {
            return Err(Status::failed_precondition(format!(
                "container {:?} is in {} state, only a {} container can be started",
                container.id,
                container.state.as_str_name(),
                v1::ContainerState::ContainerCreated.as_str_name()
            )));
        }
        let sandbox_id = container.sandbox_id.clone();
        if state.sandbox(&sandbox_id)?.state != v1::PodSandboxState::SandboxReady {
            return Err(Status::failed_precondition(format!("pod sandbox {sandbox_id:?} is not ready")));
        }
        let pid = state.next_pid();
        let container = &mut state.containers[index];
        container.state = v1::ContainerState::ContainerRunning;
        container.started_at = now_nanos();
        container.pid = pid;
        let event = state.event(&sandbox_id, &req.container_id, v1::ContainerEventType::ContainerStartedEvent);
        self.emit(event);
        Ok(v1::StartContainerResponse {})
    }

    /// Exits a running container with 143 (SIGTERM) or, for timeout 0, 137 (SIGKILL).
    pub fn stop_container(&self, req: v1::StopContainerRequest) -> Result<v1::StopContainerResponse, Status> {
        let mut state = self.state();
        let index = state.container_index(&req.container_id)?;
        if state.containers[index].is_running() {
            state.containers[index].exit(if req.timeout > 0 { 143 } else { 137 });
            let sandbox_id = state.containers[index].sandbox_id.clone();
            let event = state.event(&sandbox_id, &req.container_id, v1::ContainerEventType::ContainerStoppedEvent);
            self.emit(event);
        }
        Ok(v1::StopContainerResponse {})
    }

    pub fn remove_container(&self, req: v1::RemoveContainerRequest) -> Result<v1::RemoveContainerResponse, Status> {
        require("container_id", &req.container_id)?;
        let mut state = self.state();
        // Idempotent, as the CRI requires: an unknown container is already removed.
        let Some(index) = state.containers.iter().position(|c| c.id == req.container_id) else {
            return Ok(v1::RemoveContainerResponse {});
        };
        if state.containers[index].is_running() {
            return Err(Status::failed_precondition(format!(
                "container {:?} is running, stop it before removing it",
                req.container_id
            )));
        }
        let container = state.containers.remove(index);
        let event = state.event(&container.sandbox_id, &container.id, v1::ContainerEventType::ContainerDeletedEvent);
        self.emit(event);
        Ok(v1::RemoveContainerResponse {})
    }

    pub fn list_containers(&self, req: v1::ListContainersRequest) -> Result<v1::ListContainersResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let containers = self
            .state()
            .containers
            .iter()
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| filter.pod_sandbox_id.is_empty() || c.sandbox_id == filter.pod_sandbox_id)
            .filter(|c| filter.state.as_ref().is_none_or(|f| c.state as i32 == f.state))
            .filter(|c| labels_match(&c.config.labels, &filter.label_selector))
            .map(Container::item)
            .collect();
        Ok(v1::ListContainersResponse { containers })
    }

    pub fn stream_containers(
        &self,
        req: v1::StreamContainersRequest,
    ) -> Result<MessageStream<v1::StreamContainersResponse>, Status> {
        let items = self.list_containers(v1::ListContainersRequest { filter: req.filter })?.containers;
        Ok(chunked(items, |containers| v1::StreamContainersResponse { containers }))
    }

    pub fn container_status(&self, req: v1::ContainerStatusRequest) -> Result<v1::ContainerStatusResponse, Status> {
        let state = self.state();
        let container = state.container(&req.container_id)?;
        let mut info = HashMap::new();
        if req.verbose {
            let json = format!(
                "{{\"sandboxID\":{},\"pid\":{},\"logPath\":{}}}",
                json_string(&container.sandbox_id),
                container.pid,
                json_string(&container.log_path)
            );
            info.insert("info".to_string(), json);
        }
        Ok(v1::ContainerStatusResponse { status: Some(container.status()), info })
    }

    /// Stores the resources; ContainerStatus reports them.
    pub fn update_container_resources(
        &self,
        req: v1::UpdateContainerResourcesRequest,
    ) -> Result<v1::UpdateContainerResourcesResponse, Status> {
        let mut state = self.state();
        let index = state.container_index(&req.container_id)?;
        let resources = state.containers[index].resources.get_or_insert_with(Default::default);
        if req.linux.is_some() {
            resources.linux = req.linux;
        }
        if req.windows.is_some() {
            resources.windows = req.windows;
        }
        Ok(v1::UpdateContainerResourcesResponse {})
    }

    pub fn reopen_container_log(
        &self,
        req: v1::ReopenContainerLogRequest,
    ) -> Result<v1::ReopenContainerLogResponse, Status> {
        self.state().container(&req.container_id)?.require_running()?;
        Ok(v1::ReopenContainerLogResponse {})
    }

    /// Runs `cmd` through a tiny interpreter (see the module documentation).
    pub fn exec_sync(&self, req: v1::ExecSyncRequest) -> Result<v1::ExecSyncResponse, Status> {
        self.state().container(&req.container_id)?.require_running()?;
        if req.cmd.is_empty() {
            return Err(missing("cmd"));
        }
        let (exit_code, stdout, stderr) = interpret(&req.cmd);
        Ok(v1::ExecSyncResponse { stdout: stdout.into_bytes(), stderr: stderr.into_bytes(), exit_code })
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

    pub fn container_stats(&self, req: v1::ContainerStatsRequest) -> Result<v1::ContainerStatsResponse, Status> {
        let stats = self.state().container(&req.container_id)?.stats(now_nanos());
        Ok(v1::ContainerStatsResponse { stats: Some(stats) })
    }

    pub fn list_container_stats(
        &self,
        req: v1::ListContainerStatsRequest,
    ) -> Result<v1::ListContainerStatsResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let now = now_nanos();
        let stats = self
            .state()
            .containers
            .iter()
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| filter.pod_sandbox_id.is_empty() || c.sandbox_id == filter.pod_sandbox_id)
            .filter(|c| labels_match(&c.config.labels, &filter.label_selector))
            .map(|c| c.stats(now))
            .collect();
        Ok(v1::ListContainerStatsResponse { stats })
    }

    pub fn stream_container_stats(
        &self,
        req: v1::StreamContainerStatsRequest,
    ) -> Result<MessageStream<v1::StreamContainerStatsResponse>, Status> {
        let items = self.list_container_stats(v1::ListContainerStatsRequest { filter: req.filter })?.stats;
        Ok(chunked(items, |container_stats| v1::StreamContainerStatsResponse { container_stats }))
    }

    pub fn pod_sandbox_stats(&self, req: v1::PodSandboxStatsRequest) -> Result<v1::PodSandboxStatsResponse, Status> {
        let state = self.state();
        let stats = state.sandbox_stats(state.sandbox(&req.pod_sandbox_id)?, now_nanos());
        Ok(v1::PodSandboxStatsResponse { stats: Some(stats) })
    }

    pub fn list_pod_sandbox_stats(
        &self,
        req: v1::ListPodSandboxStatsRequest,
    ) -> Result<v1::ListPodSandboxStatsResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let now = now_nanos();
        let state = self.state();
        let stats = state
            .sandboxes
            .iter()
            .filter(|s| filter.id.is_empty() || s.id == filter.id)
            .filter(|s| labels_match(&s.config.labels, &filter.label_selector))
            .map(|s| state.sandbox_stats(s, now))
            .collect();
        Ok(v1::ListPodSandboxStatsResponse { stats })
    }

    pub fn stream_pod_sandbox_stats(
        &self,
        req: v1::StreamPodSandboxStatsRequest,
    ) -> Result<MessageStream<v1::StreamPodSandboxStatsResponse>, Status> {
        let items = self.list_pod_sandbox_stats(v1::ListPodSandboxStatsRequest { filter: req.filter })?.stats;
        Ok(chunked(items, |pod_sandbox_stats| v1::StreamPodSandboxStatsResponse { pod_sandbox_stats }))
    }

    pub fn checkpoint_container(
        &self,
        req: v1::CheckpointContainerRequest,
    ) -> Result<v1::CheckpointContainerResponse, Status> {
        self.state().container(&req.container_id)?;
        Ok(v1::CheckpointContainerResponse {})
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

    pub fn list_metric_descriptors(
        &self,
        _req: v1::ListMetricDescriptorsRequest,
    ) -> Result<v1::ListMetricDescriptorsResponse, Status> {
        let descriptor = |name: &str, help: &str, label_keys: &[&str]| v1::MetricDescriptor {
            name: name.into(),
            help: help.into(),
            label_keys: label_keys.iter().map(|k| k.to_string()).collect(),
        };
        Ok(v1::ListMetricDescriptorsResponse {
            descriptors: vec![
                descriptor("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", &[]),
                descriptor("container_memory_working_set_bytes", "Current working set in bytes.", &[]),
                descriptor(
                    "container_network_receive_bytes_total",
                    "Cumulative count of bytes received.",
                    &["interface"],
                ),
                descriptor(
                    "container_network_transmit_bytes_total",
                    "Cumulative count of bytes transmitted.",
                    &["interface"],
                ),
            ],
        })
    }

    pub fn list_pod_sandbox_metrics(
        &self,
        _req: v1::ListPodSandboxMetricsRequest,
    ) -> Result<v1::ListPodSandboxMetricsResponse, Status> {
        let now = now_nanos();
        let state = self.state();
        let metric = |name: &str, kind: v1::MetricType, labels: &[&str], value: u64| v1::Metric {
            name: name.into(),
            timestamp: now,
            metric_type: kind as i32,
            label_values: labels.iter().map(|l| l.to_string()).collect(),
            value: Some(v1::UInt64Value { value }),
        };
        let pod_metrics = state
            .sandboxes
            .iter()
            .map(|sandbox| {
                let (rx, tx) = network_bytes(sandbox, now);
                let container_metrics = state
                    .containers_of(&sandbox.id)
                    .map(|c| {
                        let stats = c.stats(now);
                        let cpu = stats.cpu.and_then(|u| u.usage_core_nano_seconds).map_or(0, |v| v.value);
                        let memory = stats.memory.and_then(|m| m.working_set_bytes).map_or(0, |v| v.value);
                        v1::ContainerMetrics {
                            container_id: c.id.clone(),
                            metrics: vec![
                                metric(
                                    "container_cpu_usage_seconds_total",
                                    v1::MetricType::Counter,
                                    &[],
                                    cpu / 1_000_000_000,
                                ),
                                metric("container_memory_working_set_bytes", v1::MetricType::Gauge, &[], memory),
                            ],
                        }
                    })
                    .collect();
                v1::PodSandboxMetrics {
                    pod_sandbox_id: sandbox.id.clone(),
                    metrics: vec![
                        metric("container_network_receive_bytes_total", v1::MetricType::Counter, &["eth0"], rx),
                        metric("container_network_transmit_bytes_total", v1::MetricType::Counter, &["eth0"], tx),
                    ],
                    container_metrics,
                }
            })
            .collect();
        Ok(v1::ListPodSandboxMetricsResponse { pod_metrics })
    }

    pub fn stream_pod_sandbox_metrics(
        &self,
        _req: v1::StreamPodSandboxMetricsRequest,
    ) -> Result<MessageStream<v1::StreamPodSandboxMetricsResponse>, Status> {
        let items = self.list_pod_sandbox_metrics(v1::ListPodSandboxMetricsRequest {})?.pod_metrics;
        Ok(chunked(items, |pod_sandbox_metrics| v1::StreamPodSandboxMetricsResponse { pod_sandbox_metrics }))
    }

    pub fn runtime_config(&self, _req: v1::RuntimeConfigRequest) -> Result<v1::RuntimeConfigResponse, Status> {
        let linux = v1::LinuxRuntimeConfiguration { cgroup_driver: v1::CgroupDriver::Systemd as i32 };
        Ok(v1::RuntimeConfigResponse { linux: Some(linux) })
    }

    /// Stores the pod's overhead and resources in its config.
    pub fn update_pod_sandbox_resources(
        &self,
        req: v1::UpdatePodSandboxResourcesRequest,
    ) -> Result<v1::UpdatePodSandboxResourcesResponse, Status> {
        let mut state = self.state();
        let index = state.sandbox_index(&req.pod_sandbox_id)?;
        let linux = state.sandboxes[index].config.linux.get_or_insert_with(Default::default);
        if req.overhead.is_some() {
            linux.overhead = req.overhead;
        }
        if req.resources.is_some() {
            linux.resources = req.resources;
        }
        Ok(v1::UpdatePodSandboxResourcesResponse {})
    }

    // ----- ImageService -----

    pub fn list_images(&self, req: v1::ListImagesRequest) -> Result<v1::ListImagesResponse, Status> {
        let reference = req.filter.and_then(|f| f.image).map(|i| i.image).unwrap_or_default();
        let state = self.state();
        let images = if reference.is_empty() {
            state.images.clone()
        } else {
            state.find_image(&reference).cloned().into_iter().collect()
        };
        Ok(v1::ListImagesResponse { images })
    }

    pub fn stream_images(
        &self,
        req: v1::StreamImagesRequest,
    ) -> Result<MessageStream<v1::StreamImagesResponse>, Status> {
        let items = self.list_images(v1::ListImagesRequest { filter: req.filter })?.images;
        Ok(chunked(items, |images| v1::StreamImagesResponse { images }))
    }

    /// An unknown image is `image: None`, not an error, as the CRI specifies.
    pub fn image_status(&self, req: v1::ImageStatusRequest) -> Result<v1::ImageStatusResponse, Status> {
        let reference = image_reference(req.image)?;
        let image = self.state().find_image(&reference).cloned();
        let mut info = HashMap::new();
        if let (true, Some(image)) = (req.verbose, &image) {
            let json = format!("{{\"id\":{},\"size\":{}}}", json_string(&image.id), image.size);
            info.insert("info".to_string(), json);
        }
        Ok(v1::ImageStatusResponse { image, info })
    }

    /// Adds the image (instantly); pulling a present image returns it.
    pub fn pull_image(&self, req: v1::PullImageRequest) -> Result<v1::PullImageResponse, Status> {
        let reference = image_reference(req.image)?;
        if reference.contains(char::is_whitespace) {
            return Err(Status::invalid_argument(format!("invalid image reference {reference:?}")));
        }
        let mut state = self.state();
        if let Some(image) = state.find_image(&reference) {
            return Ok(v1::PullImageResponse { image_ref: image.id.clone() });
        }
        // A plausible size between 1 and 65 MiB, the same for every pull of the reference.
        let size = (1 << 20) + seed(&normalize(&reference)) % (64 << 20);
        let image = new_image(&reference, size, None, false);
        let image_ref = image.id.clone();
        state.images.push(image);
        Ok(v1::PullImageResponse { image_ref })
    }

    pub fn remove_image(&self, req: v1::RemoveImageRequest) -> Result<v1::RemoveImageResponse, Status> {
        let reference = image_reference(req.image)?;
        let mut state = self.state();
        // Idempotent, as the CRI requires: an unknown image is already removed.
        if let Some(id) = state.find_image(&reference).map(|i| i.id.clone()) {
            state.images.retain(|i| i.id != id);
        }
        Ok(v1::RemoveImageResponse {})
    }

    pub fn image_fs_info(&self, _req: v1::ImageFsInfoRequest) -> Result<v1::ImageFsInfoResponse, Status> {
        let state = self.state();
        let used: u64 = state.images.iter().map(|i| i.size).sum();
        let usage = v1::FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: Some(v1::FilesystemIdentifier { mountpoint: FS_MOUNTPOINT.into() }),
            used_bytes: u64_value(used),
            inodes_used: u64_value(state.images.len() as u64 * 64),
        };
        Ok(v1::ImageFsInfoResponse { image_filesystems: vec![usage], container_filesystems: vec![] })
    }

    // ----- bytes ↔ typed calls -----

    /// Records the call; returns the `traceparent` to echo.
    fn record(&self, rpc: Rpc, metadata: &MetadataMap) -> Option<MetadataValue<tonic::metadata::Ascii>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        *lock(&self.calls_by_method).entry(rpc.info.method).or_insert(0) += 1;
        lock(&self.metadata).insert(rpc.info.method, metadata.clone());
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
            echo(traceparent, self.dispatch_unary(rpc, request.get_ref()).map(Response::new))
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

// ----- state helpers -----

impl State {
    fn sandbox_index(&self, id: &str) -> Result<usize, Status> {
        require("pod_sandbox_id", id)?;
        self.sandboxes.iter().position(|s| s.id == id).ok_or_else(|| not_found("pod sandbox", id))
    }

    fn sandbox(&self, id: &str) -> Result<&Sandbox, Status> {
        Ok(&self.sandboxes[self.sandbox_index(id)?])
    }

    fn container_index(&self, id: &str) -> Result<usize, Status> {
        require("container_id", id)?;
        self.containers.iter().position(|c| c.id == id).ok_or_else(|| not_found("container", id))
    }

    fn container(&self, id: &str) -> Result<&Container, Status> {
        Ok(&self.containers[self.container_index(id)?])
    }

    fn containers_of<'a>(&'a self, sandbox_id: &'a str) -> impl Iterator<Item = &'a Container> + 'a {
        self.containers.iter().filter(move |c| c.sandbox_id == sandbox_id)
    }

    /// By ID (with or without `sha256:`), tag or digest; `busybox` finds
    /// `docker.io/library/busybox:latest`.
    fn find_image(&self, reference: &str) -> Option<&v1::Image> {
        let normalized = normalize(reference);
        self.images.iter().find(|image| {
            image.id == reference
                || image.id.strip_prefix("sha256:") == Some(reference)
                || image.repo_tags.contains(&normalized)
                || image.repo_digests.contains(&normalized)
        })
    }

    fn next_pid(&mut self) -> u32 {
        self.next_pid += 1;
        self.next_pid
    }

    /// An event about one container, with its pod's status as it is now.
    fn event(&self, sandbox_id: &str, container_id: &str, kind: v1::ContainerEventType) -> v1::ContainerEventResponse {
        v1::ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: kind as i32,
            created_at: now_nanos(),
            pod_sandbox_status: self.sandboxes.iter().find(|s| s.id == sandbox_id).map(Sandbox::status),
            containers_statuses: self.containers_of(sandbox_id).map(Container::status).collect(),
        }
    }

    /// The pod's containers' stats, summed, plus the pause process and the pod's network.
    fn sandbox_stats(&self, sandbox: &Sandbox, now: i64) -> v1::PodSandboxStats {
        let containers: Vec<v1::ContainerStats> = self.containers_of(&sandbox.id).map(|c| c.stats(now)).collect();
        let ready = sandbox.state == v1::PodSandboxState::SandboxReady;
        let sum = |get: fn(&v1::ContainerStats) -> Option<u64>| containers.iter().filter_map(get).sum::<u64>();
        let cpu_total = sum(|s| Some(s.cpu.as_ref()?.usage_core_nano_seconds?.value));
        let nano_cores = sum(|s| Some(s.cpu.as_ref()?.usage_nano_cores?.value));
        let pause_memory = if ready { 256 << 10 } else { 0 };
        let working_set = pause_memory + sum(|s| Some(s.memory.as_ref()?.working_set_bytes?.value));
        let processes = u64::from(ready)
            + containers
                .iter()
                .filter(|s| s.cpu.as_ref().is_some_and(|c| c.usage_nano_cores.is_some_and(|v| v.value > 0)))
                .count() as u64;
        let (rx, tx) = network_bytes(sandbox, now);
        let eth0 = v1::NetworkInterfaceUsage {
            name: "eth0".into(),
            rx_bytes: u64_value(rx),
            rx_errors: u64_value(0),
            tx_bytes: u64_value(tx),
            tx_errors: u64_value(0),
        };
        v1::PodSandboxStats {
            attributes: Some(v1::PodSandboxAttributes {
                id: sandbox.id.clone(),
                metadata: sandbox.config.metadata.clone(),
                labels: sandbox.config.labels.clone(),
                annotations: sandbox.config.annotations.clone(),
            }),
            linux: Some(v1::LinuxPodSandboxStats {
                cpu: Some(v1::CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: u64_value(cpu_total),
                    usage_nano_cores: u64_value(nano_cores),
                    psi: None,
                }),
                memory: Some(v1::MemoryUsage {
                    timestamp: now,
                    working_set_bytes: u64_value(working_set),
                    usage_bytes: u64_value(working_set + working_set / 4),
                    rss_bytes: u64_value(working_set / 2),
                    page_faults: u64_value(working_set / 4096),
                    major_page_faults: u64_value(0),
                    ..Default::default()
                }),
                network: Some(v1::NetworkUsage {
                    timestamp: now,
                    default_interface: Some(eth0.clone()),
                    interfaces: vec![eth0],
                }),
                process: Some(v1::ProcessUsage { timestamp: now, process_count: u64_value(processes) }),
                containers,
                io: None,
            }),
            windows: None,
        }
    }
}

impl Sandbox {
    fn status(&self) -> v1::PodSandboxStatus {
        let namespace_options = self
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone());
        v1::PodSandboxStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            network: Some(v1::PodSandboxNetworkStatus { ip: self.ip.clone(), additional_ips: vec![] }),
            linux: Some(v1::LinuxPodSandboxStatus { namespaces: Some(v1::Namespace { options: namespace_options }) }),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }

    fn item(&self) -> v1::PodSandbox {
        v1::PodSandbox {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }
}

impl Container {
    fn is_running(&self) -> bool {
        self.state == v1::ContainerState::ContainerRunning
    }

    fn require_running(&self) -> Result<(), Status> {
        if self.is_running() {
            return Ok(());
        }
        Err(Status::failed_precondition(format!(
            "container {:?} is in {} state, not running",
            self.id,
            self.state.as_str_name()
        )))
    }

    fn exit(&mut self, exit_code: i32) {
        self.state = v1::ContainerState::ContainerExited;
        self.finished_at = now_nanos();
        self.exit_code = exit_code;
        self.pid = 0;
    }

    fn status(&self) -> v1::ContainerStatus {
        let reason = match (self.state, self.exit_code) {
            (v1::ContainerState::ContainerExited, 0) => "Completed",
            (v1::ContainerState::ContainerExited, _) => "Error",
            _ => "",
        };
        v1::ContainerStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            exit_code: self.exit_code,
            image: self.config.image.clone(),
            image_ref: self.image_ref.clone(),
            reason: reason.into(),
            message: String::new(),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            mounts: self.config.mounts.clone(),
            log_path: self.log_path.clone(),
            resources: self.resources.clone(),
            image_id: self.image_id.clone(),
            user: Some(self.user.clone()),
            stop_signal: self.config.stop_signal,
        }
    }

    fn item(&self) -> v1::Container {
        v1::Container {
            id: self.id.clone(),
            pod_sandbox_id: self.sandbox_id.clone(),
            metadata: self.config.metadata.clone(),
            image: self.config.image.clone(),
            image_ref: self.image_ref.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            image_id: self.image_id.clone(),
        }
    }

    /// Plausible numbers: 1% of a core while running, a few MiB of memory, a small writable layer.
    fn stats(&self, now: i64) -> v1::ContainerStats {
        let seed = seed(&self.id);
        let running = self.is_running();
        let ran_for = match self.state {
            v1::ContainerState::ContainerRunning => now - self.started_at,
            v1::ContainerState::ContainerExited => self.finished_at - self.started_at,
            _ => 0,
        };
        let ran_for = u64::try_from(ran_for).unwrap_or(0);
        let working_set = if running { (4 << 20) + (seed % 1024) * 4096 } else { 0 };
        let limit = self.resources.as_ref().and_then(|r| r.linux.as_ref()).map_or(0, |l| l.memory_limit_in_bytes);
        let available = u64::try_from(limit).ok().filter(|&l| l > 0).map(|l| l.saturating_sub(working_set));
        v1::ContainerStats {
            attributes: Some(v1::ContainerAttributes {
                id: self.id.clone(),
                metadata: self.config.metadata.clone(),
                labels: self.config.labels.clone(),
                annotations: self.config.annotations.clone(),
            }),
            cpu: Some(v1::CpuUsage {
                timestamp: now,
                usage_core_nano_seconds: u64_value(ran_for / 100),
                usage_nano_cores: u64_value(if running { 10_000_000 } else { 0 }),
                psi: None,
            }),
            memory: Some(v1::MemoryUsage {
                timestamp: now,
                working_set_bytes: u64_value(working_set),
                available_bytes: available.and_then(u64_value),
                usage_bytes: u64_value(working_set + working_set / 4),
                rss_bytes: u64_value(working_set / 2),
                page_faults: u64_value(working_set / 4096 + ran_for / 1_000_000_000),
                major_page_faults: u64_value(0),
                psi: None,
            }),
            writable_layer: Some(v1::FilesystemUsage {
                timestamp: now,
                fs_id: Some(v1::FilesystemIdentifier { mountpoint: FS_MOUNTPOINT.into() }),
                used_bytes: u64_value(4096 * (1 + seed % 64)),
                inodes_used: u64_value(1 + seed % 16),
            }),
            swap: None,
            io: None,
        }
    }
}

// ----- small helpers -----

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state stays consistent between statements, so a panic elsewhere does not spoil it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_nanos() -> i64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX)
}

/// Four 64-bit parts as 64 hex characters.
fn hex64(part: impl Fn(u64) -> u64) -> String {
    (0..4).fold(String::with_capacity(64), |mut out, i| {
        let _ = write!(out, "{:016x}", part(i));
        out
    })
}

/// A stable number for `text` (same input, same output, within a build).
fn seed(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// A stable 64-hex-character digest of `text`.
fn digest(text: &str) -> String {
    hex64(|i| seed(&format!("{i}:{text}")))
}

fn u64_value(value: u64) -> Option<v1::UInt64Value> {
    Some(v1::UInt64Value { value })
}

/// Received and transmitted bytes of the pod's eth0: grows with the pod's age.
fn network_bytes(sandbox: &Sandbox, now: i64) -> (u64, u64) {
    let age_seconds = u64::try_from(now - sandbox.created_at).unwrap_or(0) / 1_000_000_000;
    (1000 * (age_seconds + 1), 500 * (age_seconds + 1))
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(key, value)| labels.get(key) == Some(value))
}

/// `busybox` → `docker.io/library/busybox:latest`, as the docker reference grammar has it.
fn normalize(reference: &str) -> String {
    let (name, suffix) = match reference.split_once('@') {
        Some((name, digest)) => (name, format!("@{digest}")),
        None => {
            // A `:` in the last path component is a tag; earlier it is a registry port.
            let last = reference.rsplit('/').next().unwrap_or(reference);
            match last.rfind(':') {
                Some(at) => {
                    let split = reference.len() - last.len() + at;
                    (&reference[..split], reference[split..].to_string())
                }
                None => (reference, ":latest".to_string()),
            }
        }
    };
    let name = match name.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => name.to_string(),
        Some(_) => format!("docker.io/{name}"),
        None => format!("docker.io/library/{name}"),
    };
    format!("{name}{suffix}")
}

/// An image for `reference`, its ID and digest derived from the normalized reference.
fn new_image(reference: &str, size: u64, uid: Option<i64>, pinned: bool) -> v1::Image {
    let normalized = normalize(reference);
    let (repo_tags, repo_digests) = match normalized.split_once('@') {
        Some(_) => (vec![], vec![normalized.clone()]),
        None => {
            let repository = normalized.rsplit_once(':').map_or(normalized.as_str(), |(repo, _)| repo);
            let repo_digest = format!("{repository}@sha256:{}", digest(&format!("manifest {normalized}")));
            (vec![normalized.clone()], vec![repo_digest])
        }
    };
    v1::Image {
        id: format!("sha256:{}", digest(&normalized)),
        repo_tags,
        repo_digests,
        size,
        uid: uid.map(|value| v1::Int64Value { value }),
        username: String::new(),
        spec: None,
        pinned,
    }
}

fn image_reference(spec: Option<v1::ImageSpec>) -> Result<String, Status> {
    spec.map(|s| s.image).filter(|i| !i.is_empty()).ok_or_else(|| missing("image"))
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

/// The whole shell of the fake: `(exit code, stdout, stderr)` of `cmd`.
/// `ExecSync` of `sleep N` takes N seconds, and like a real runtime it gives up when the
/// caller's deadline (`grpc-timeout`) passes first, answering DEADLINE_EXCEEDED.
async fn exec_sync_sleep(rpc: Rpc, request: &Request<Bytes>) -> Result<(), Status> {
    if rpc.info.method != "ExecSync" {
        return Ok(());
    }
    let Ok(exec) = decode_request::<v1::ExecSyncRequest>(rpc, request.get_ref()) else {
        return Ok(()); // the typed call reports the decode error
    };
    let seconds = match exec.cmd.as_slice() {
        [program, n] if program.rsplit('/').next() == Some("sleep") => n.parse::<f64>().ok(),
        _ => None,
    };
    // Beyond what a Duration holds (`sleep 1e300`) is forever, as far as any caller can tell.
    let Some(wait) = seconds.filter(|s| *s >= 0.0).map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX))
    else {
        return Ok(());
    };
    match request.metadata().get("grpc-timeout").and_then(|v| parse_grpc_timeout(v.to_str().ok()?)) {
        Some(deadline) if deadline < wait => {
            tokio::time::sleep(deadline).await;
            Err(Status::deadline_exceeded("context deadline exceeded"))
        }
        _ => {
            tokio::time::sleep(wait).await;
            Ok(())
        }
    }
}

/// `grpc-timeout` as sent on the wire: digits and a unit (H, M, S, m, u, n).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn interpret(cmd: &[String]) -> (i32, String, String) {
    let Some((program, args)) = cmd.split_first() else {
        return (0, String::new(), String::new());
    };
    let ok = |stdout: String| (0, stdout, String::new());
    match program.rsplit('/').next().unwrap_or(program) {
        "echo" => ok(format!("{}\n", args.join(" "))),
        "true" | "sleep" => ok(String::new()),
        "false" => (1, String::new(), String::new()),
        "exit" => match args.first().map(|n| n.parse::<i64>()) {
            None => ok(String::new()),
            // A shell's exit status is taken modulo 256.
            Some(Ok(n)) => (n.rem_euclid(256) as i32, String::new(), String::new()),
            Some(Err(_)) => (2, String::new(), format!("exit: Illegal number: {}\n", args[0])),
        },
        "sh" | "bash" => match args {
            [flag, script, ..] if flag == "-c" => {
                interpret(&script.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            }
            [] => ok(String::new()),
            _ => (2, String::new(), format!("{program}: only -c SCRIPT is supported\n")),
        },
        _ => (127, String::new(), format!("{program}: not found\n")),
    }
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn missing(field: &str) -> Status {
    Status::invalid_argument(format!("{field} is required"))
}

fn require(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(missing(field));
    }
    Ok(())
}

fn not_found(kind: &str, id: &str) -> Status {
    Status::not_found(format!("{kind} {id:?} not found"))
}

fn unimplemented(rpc: Rpc) -> Status {
    Status::unimplemented(format!("{} is not implemented by the memory runtime", rpc.path()))
}

/// Decodes the request of `rpc` as v1, converting from `rpc.version` first.
fn decode_request<Req: Message + Default>(rpc: Rpc, body: &[u8]) -> Result<Req, Status> {
    let route = Route::new(rpc.info.request, rpc.version, CriVersion::V1)
        .ok_or_else(|| Status::internal(format!("no conversion of {} to v1", rpc.info.request)))?;
    let invalid = |e: prost::DecodeError| Status::invalid_argument(format!("cannot decode {}: {e}", rpc.info.request));
    // Losses here are the fake's own business: ignored.
    let v1_bytes = route.run(body, &mut Cx::counting()).map_err(invalid)?;
    Req::decode(v1_bytes.as_slice()).map_err(invalid)
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
    use tonic::Code;

    fn pod_config(name: &str, labels: &[(&str, &str)]) -> v1::PodSandboxConfig {
        v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            log_directory: "/var/log/pods/x".into(),
            ..Default::default()
        }
    }

    fn run_pod(rt: &MemoryRuntime, name: &str, labels: &[(&str, &str)]) -> String {
        let req = v1::RunPodSandboxRequest { config: Some(pod_config(name, labels)), runtime_handler: String::new() };
        rt.run_pod_sandbox(req).unwrap().pod_sandbox_id
    }

    fn container_config(name: &str, image: &str) -> v1::ContainerConfig {
        v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: image.into(), ..Default::default() }),
            labels: [("name".to_string(), name.to_string())].into(),
            log_path: format!("{name}/0.log"),
            ..Default::default()
        }
    }

    fn create(rt: &MemoryRuntime, pod: &str, name: &str) -> Result<String, Status> {
        let req = v1::CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(container_config(name, "busybox")),
            sandbox_config: None,
        };
        rt.create_container(req).map(|r| r.container_id)
    }

    fn start(rt: &MemoryRuntime, id: &str) -> Result<v1::StartContainerResponse, Status> {
        rt.start_container(v1::StartContainerRequest { container_id: id.into() })
    }

    fn status(rt: &MemoryRuntime, id: &str) -> v1::ContainerStatus {
        let req = v1::ContainerStatusRequest { container_id: id.into(), verbose: false };
        rt.container_status(req).unwrap().status.unwrap()
    }

    fn exec(rt: &MemoryRuntime, id: &str, cmd: &[&str]) -> v1::ExecSyncResponse {
        let cmd = cmd.iter().map(|s| s.to_string()).collect();
        rt.exec_sync(v1::ExecSyncRequest { container_id: id.into(), cmd, timeout: 1 }).unwrap()
    }

    #[test]
    fn ids_are_64_hex_characters() {
        let rt = MemoryRuntime::new();
        let (a, b) = (rt.new_id(), rt.new_id());
        assert_ne!(a, b);
        for id in [&a, &b] {
            assert_eq!(id.len(), 64);
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        }
    }

    #[test]
    fn lifecycle() {
        let rt = MemoryRuntime::new();
        let pod = run_pod(&rt, "web", &[]);
        let id = create(&rt, &pod, "app").unwrap();
        let created = status(&rt, &id);
        assert_eq!(created.state, v1::ContainerState::ContainerCreated as i32);
        assert!(created.created_at > 0 && created.started_at == 0);
        assert_eq!(created.log_path, "/var/log/pods/x/app/0.log");
        assert!(created.image_id.starts_with("sha256:"));

        start(&rt, &id).unwrap();
        let running = status(&rt, &id);
        assert_eq!(running.state, v1::ContainerState::ContainerRunning as i32);
        assert!(running.started_at >= running.created_at);

        let echo = exec(&rt, &id, &["echo", "hello", "world"]);
        assert_eq!((echo.stdout.as_slice(), echo.exit_code), (&b"hello world\n"[..], 0));
        assert_eq!(exec(&rt, &id, &["sh", "-c", "exit 3"]).exit_code, 3);
        assert_eq!(exec(&rt, &id, &["/bin/false"]).exit_code, 1);
        let unknown = exec(&rt, &id, &["nginx", "-t"]);
        assert_eq!((unknown.exit_code, unknown.stderr.as_slice()), (127, &b"nginx: not found\n"[..]));

        rt.stop_container(v1::StopContainerRequest { container_id: id.clone(), timeout: 10 }).unwrap();
        let exited = status(&rt, &id);
        assert_eq!(exited.state, v1::ContainerState::ContainerExited as i32);
        assert_eq!((exited.exit_code, exited.reason.as_str()), (143, "Error"));
        assert!(exited.finished_at >= exited.started_at);

        rt.remove_container(v1::RemoveContainerRequest { container_id: id.clone() }).unwrap();
        let gone = rt.container_status(v1::ContainerStatusRequest { container_id: id.clone(), verbose: false });
        assert_eq!(gone.unwrap_err().code(), Code::NotFound);

        rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).unwrap();
        let pod_status =
            rt.pod_sandbox_status(v1::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: true });
        let pod_status = pod_status.unwrap();
        assert_eq!(pod_status.status.unwrap().state, v1::PodSandboxState::SandboxNotready as i32);
        assert!(pod_status.info["info"].starts_with('{'));
        rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod }).unwrap();
        assert!(rt.list_pod_sandbox(Default::default()).unwrap().items.is_empty());
    }

    #[test]
    fn filters() {
        let rt = MemoryRuntime::new();
        let web = run_pod(&rt, "web", &[("app", "web"), ("tier", "front")]);
        let db = run_pod(&rt, "db", &[("app", "db")]);
        rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: db.clone() }).unwrap();
        let list = |filter: v1::PodSandboxFilter| -> Vec<String> {
            let req = v1::ListPodSandboxRequest { filter: Some(filter) };
            rt.list_pod_sandbox(req).unwrap().items.into_iter().map(|p| p.id).collect()
        };
        let by_label =
            v1::PodSandboxFilter { label_selector: [("app".into(), "web".into())].into(), ..Default::default() };
        assert_eq!(list(by_label), [web.as_str()]);
        let ready = v1::PodSandboxStateValue { state: v1::PodSandboxState::SandboxReady as i32 };
        assert_eq!(list(v1::PodSandboxFilter { state: Some(ready), ..Default::default() }), [web.as_str()]);
        assert_eq!(list(v1::PodSandboxFilter { id: db.clone(), ..Default::default() }), [db.as_str()]);
        assert_eq!(list(Default::default()).len(), 2);

        let a = create(&rt, &web, "a").unwrap();
        let b = create(&rt, &web, "b").unwrap();
        start(&rt, &b).unwrap();
        let containers = |filter: v1::ContainerFilter| -> Vec<String> {
            let req = v1::ListContainersRequest { filter: Some(filter) };
            rt.list_containers(req).unwrap().containers.into_iter().map(|c| c.id).collect()
        };
        let running = v1::ContainerStateValue { state: v1::ContainerState::ContainerRunning as i32 };
        assert_eq!(containers(v1::ContainerFilter { state: Some(running), ..Default::default() }), [b.as_str()]);
        let named_a = [("name".to_string(), "a".to_string())].into();
        assert_eq!(containers(v1::ContainerFilter { label_selector: named_a, ..Default::default() }), [a.as_str()]);
        assert_eq!(containers(v1::ContainerFilter { pod_sandbox_id: web.clone(), ..Default::default() }).len(), 2);
        assert!(containers(v1::ContainerFilter { pod_sandbox_id: db.clone(), ..Default::default() }).is_empty());

        let stats = v1::ListContainerStatsRequest {
            filter: Some(v1::ContainerStatsFilter { id: b.clone(), ..Default::default() }),
        };
        let stats = rt.list_container_stats(stats).unwrap().stats;
        assert_eq!(stats.len(), 1);
        let layer = stats[0].writable_layer.as_ref().unwrap();
        assert_eq!(layer.fs_id.as_ref().unwrap().mountpoint, FS_MOUNTPOINT);
        let pod_stats = v1::ListPodSandboxStatsRequest {
            filter: Some(v1::PodSandboxStatsFilter { id: web.clone(), ..Default::default() }),
        };
        let pod_stats = rt.list_pod_sandbox_stats(pod_stats).unwrap().stats;
        assert_eq!(pod_stats.len(), 1);
        assert_eq!(pod_stats[0].linux.as_ref().unwrap().containers.len(), 2);
    }

    #[test]
    fn errors_name_the_field_or_id() {
        let rt = MemoryRuntime::new();
        let missing = rt.container_status(v1::ContainerStatusRequest { container_id: "abc".into(), verbose: false });
        let missing = missing.unwrap_err();
        assert_eq!(missing.code(), Code::NotFound);
        assert_eq!(missing.message(), "container \"abc\" not found");
        let no_pod = rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: "abc".into() }).unwrap_err();
        assert_eq!((no_pod.code(), no_pod.message()), (Code::NotFound, "pod sandbox \"abc\" not found"));

        let pod = run_pod(&rt, "web", &[]);
        let no_metadata = v1::ContainerConfig { metadata: None, ..container_config("a", "busybox") };
        let req =
            v1::CreateContainerRequest { pod_sandbox_id: pod.clone(), config: Some(no_metadata), sandbox_config: None };
        let err = rt.create_container(req).unwrap_err();
        assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "config.metadata is required"));
        let no_image = v1::ContainerConfig { image: None, ..container_config("a", "busybox") };
        let req =
            v1::CreateContainerRequest { pod_sandbox_id: pod.clone(), config: Some(no_image), sandbox_config: None };
        assert!(rt.create_container(req).unwrap_err().message().contains("config.image"));
        let req = v1::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(container_config("a", "nginx:1.27")),
            sandbox_config: None,
        };
        assert_eq!(rt.create_container(req).unwrap_err().code(), Code::NotFound);

        // Invalid transitions.
        let id = create(&rt, &pod, "a").unwrap();
        let err = rt.exec_sync(v1::ExecSyncRequest { container_id: id.clone(), cmd: vec!["true".into()], timeout: 0 });
        assert_eq!(err.unwrap_err().code(), Code::FailedPrecondition);
        start(&rt, &id).unwrap();
        assert_eq!(start(&rt, &id).unwrap_err().code(), Code::FailedPrecondition);
        let err = rt.remove_container(v1::RemoveContainerRequest { container_id: id.clone() }).unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition);
        rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).unwrap();
        assert_eq!(status(&rt, &id).exit_code, 137, "stopping the pod kills its containers");
        assert_eq!(create(&rt, &pod, "b").unwrap_err().code(), Code::FailedPrecondition);
        let err = rt.reopen_container_log(v1::ReopenContainerLogRequest { container_id: id.clone() }).unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition);

        // Removing the pod removes its containers; removing again is fine.
        rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).unwrap();
        assert!(rt.list_containers(Default::default()).unwrap().containers.is_empty());
        rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod }).unwrap();
    }

    #[test]
    fn images() {
        let rt = MemoryRuntime::new();
        let spec = |image: &str| Some(v1::ImageSpec { image: image.into(), ..Default::default() });
        let status = |image: &str| rt.image_status(v1::ImageStatusRequest { image: spec(image), verbose: false });
        let busybox = status("busybox").unwrap().image.expect("busybox is preloaded");
        assert_eq!(busybox.repo_tags, ["docker.io/library/busybox:latest"]);
        assert_eq!(status(&busybox.id).unwrap().image.unwrap().id, busybox.id);
        assert!(status("nginx:1.27").unwrap().image.is_none(), "unknown is None, not an error");

        let pulled = rt.pull_image(v1::PullImageRequest { image: spec("nginx:1.27"), ..Default::default() }).unwrap();
        let nginx = status("docker.io/library/nginx:1.27").unwrap().image.unwrap();
        assert_eq!(pulled.image_ref, nginx.id);
        assert!(nginx.repo_digests[0].starts_with("docker.io/library/nginx@sha256:"));
        let again = rt.pull_image(v1::PullImageRequest { image: spec("nginx:1.27"), ..Default::default() }).unwrap();
        assert_eq!(again.image_ref, pulled.image_ref);
        let filtered = v1::ListImagesRequest { filter: Some(v1::ImageFilter { image: spec("nginx:1.27") }) };
        assert_eq!(rt.list_images(filtered).unwrap().images.len(), 1);
        assert_eq!(rt.list_images(Default::default()).unwrap().images.len(), 3);

        let fs = rt.image_fs_info(v1::ImageFsInfoRequest {}).unwrap().image_filesystems;
        let total: u64 = rt.list_images(Default::default()).unwrap().images.iter().map(|i| i.size).sum();
        assert_eq!(fs[0].used_bytes.unwrap().value, total);
        assert_eq!(fs[0].fs_id.as_ref().unwrap().mountpoint, FS_MOUNTPOINT);

        rt.remove_image(v1::RemoveImageRequest { image: spec("nginx:1.27") }).unwrap();
        assert!(status("nginx:1.27").unwrap().image.is_none());
        rt.remove_image(v1::RemoveImageRequest { image: spec("nginx:1.27") }).unwrap();
        let err = rt.pull_image(v1::PullImageRequest::default()).unwrap_err();
        assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "image is required"));
    }

    #[test]
    fn references_normalize_like_docker() {
        assert_eq!(normalize("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(normalize("nginx:1.27"), "docker.io/library/nginx:1.27");
        assert_eq!(normalize("user/app"), "docker.io/user/app:latest");
        assert_eq!(normalize("localhost:5000/app"), "localhost:5000/app:latest");
        assert_eq!(normalize("registry.k8s.io/pause:3.10"), "registry.k8s.io/pause:3.10");
        assert_eq!(normalize("quay.io/a/b@sha256:00"), "quay.io/a/b@sha256:00");
    }

    #[tokio::test]
    async fn streams_chunk_and_events_follow_containers() {
        let rt = MemoryRuntime::new();
        let mut events = rt.get_container_events(v1::GetEventsRequest {}).unwrap();
        let pods: Vec<String> = (0..5).map(|i| run_pod(&rt, &format!("pod{i}"), &[])).collect();
        let messages: Vec<_> = rt.stream_pod_sandboxes(Default::default()).unwrap().collect().await;
        let sizes: Vec<usize> = messages.iter().map(|m| m.pod_sandboxes.len()).collect();
        assert_eq!(sizes, [2, 2, 1]);
        let images: Vec<_> = rt.stream_images(Default::default()).unwrap().collect().await;
        assert_eq!(images.len(), 1);

        let id = create(&rt, &pods[0], "a").unwrap();
        start(&rt, &id).unwrap();
        rt.stop_container(v1::StopContainerRequest { container_id: id.clone(), timeout: 0 }).unwrap();
        rt.remove_container(v1::RemoveContainerRequest { container_id: id.clone() }).unwrap();
        let mut kinds = Vec::new();
        for _ in 0..4 {
            let event = events.next().await.unwrap();
            assert_eq!(event.container_id, id);
            assert_eq!(event.pod_sandbox_status.unwrap().id, pods[0]);
            kinds.push(event.container_event_type);
        }
        use v1::ContainerEventType::*;
        let expected = [ContainerCreatedEvent, ContainerStartedEvent, ContainerStoppedEvent, ContainerDeletedEvent];
        assert_eq!(kinds, expected.map(|k| k as i32));

        rt.end_streams();
        assert!(events.next().await.is_none(), "ending the streams ends the event stream");
    }

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
        assert_eq!(CriVersion::V1.schema().rpcs.len(), 41);
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
