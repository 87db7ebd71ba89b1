//! Pods and containers: the calls that move them through their states (Run, Stop and Remove of a
//! pod; Create, Start, Stop and Remove of a container), their statuses and updates, and finding
//! them by ID.

use super::state::{Container, MemoryRuntime, Sandbox, State, PRELOADED_IMAGES};
use super::support::{json_string, missing, not_found, now_nanos, require};
use crate::api::v1;
use std::collections::HashMap;
use tonic::Status;

impl MemoryRuntime {
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
            // As containerd's: the sandbox's config as recorded, printed by Go's encoding/json.
            let info = serde_json::json!({
                "pid": sandbox.pid,
                "sandboxImage": PRELOADED_IMAGES[0],
                "runtimeHandler": sandbox.runtime_handler,
                "config": recorded_config(&sandbox.config),
            });
            response.info.insert("info".into(), info.to_string());
            response.containers_statuses = state.containers_of(&sandbox.id).map(Container::status).collect();
            response.timestamp = now_nanos();
        }
        Ok(response)
    }

    pub fn create_container(&self, req: v1::CreateContainerRequest) -> Result<v1::CreateContainerResponse, Status> {
        let sandbox_config = req.sandbox_config;
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
        let named = config.image.as_ref().is_some_and(|i| !i.user_specified_image.is_empty());
        if state.verifies_signatures && !named {
            return Err(Status::unknown("user specified image not specified, cannot verify image signature"));
        }
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
            sandbox_config,
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

    pub fn container_status(&self, req: v1::ContainerStatusRequest) -> Result<v1::ContainerStatusResponse, Status> {
        let state = self.state();
        let container = state.container(&req.container_id)?;
        let mut info = HashMap::new();
        if req.verbose {
            // The seccomp profile it was created with, and the /proc paths masked and read-only,
            // as a runtime's verbose info shows its spec.
            let context = container.config.linux.as_ref().and_then(|l| l.security_context.as_ref());
            let seccomp = context.and_then(|c| c.seccomp.as_ref()).map(|p| format!("{p:?}")).unwrap_or_default();
            #[allow(deprecated)]
            let seccomp_path = context.map(|c| c.seccomp_profile_path.as_str()).unwrap_or_default();
            let list = |paths: Option<&Vec<String>>| {
                paths.into_iter().flatten().map(|p| json_string(p)).collect::<Vec<_>>().join(",")
            };
            let masked = list(context.map(|c| &c.masked_paths));
            let readonly = list(context.map(|c| &c.readonly_paths));
            // And its environment, as containerd's spec in the info holds it (secrets included).
            let envs: Vec<String> = container
                .config
                .envs
                .iter()
                .map(|e| json_string(&format!("{}={}", e.key, String::from_utf8_lossy(&e.value))))
                .collect();
            // And the sandbox config its create carried, as containerd records a sandbox's.
            let sandbox_config = container.sandbox_config.as_ref().map_or(serde_json::Value::Null, recorded_config);
            let json = format!(
                "{{\"sandboxID\":{},\"pid\":{},\"logPath\":{},\"seccomp\":{},\"seccompProfilePath\":{},\
                 \"maskedPaths\":[{}],\"readonlyPaths\":[{}],\"env\":[{}],\"sandboxConfig\":{}}}",
                json_string(&container.sandbox_id),
                container.pid,
                json_string(&container.log_path),
                json_string(&seccomp),
                json_string(seccomp_path),
                masked,
                readonly,
                envs.join(","),
                sandbox_config
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

    pub fn checkpoint_container(
        &self,
        req: v1::CheckpointContainerRequest,
    ) -> Result<v1::CheckpointContainerResponse, Status> {
        self.state().container(&req.container_id)?;
        Ok(v1::CheckpointContainerResponse {})
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
}

impl State {
    fn sandbox_index(&self, id: &str) -> Result<usize, Status> {
        require("pod_sandbox_id", id)?;
        self.sandboxes.iter().position(|s| s.id == id).ok_or_else(|| not_found("pod sandbox", id))
    }

    pub(super) fn sandbox(&self, id: &str) -> Result<&Sandbox, Status> {
        Ok(&self.sandboxes[self.sandbox_index(id)?])
    }

    fn container_index(&self, id: &str) -> Result<usize, Status> {
        require("container_id", id)?;
        self.containers.iter().position(|c| c.id == id).ok_or_else(|| not_found("container", id))
    }

    pub(super) fn container(&self, id: &str) -> Result<&Container, Status> {
        Ok(&self.containers[self.container_index(id)?])
    }

    pub(super) fn containers_of<'a>(&'a self, sandbox_id: &'a str) -> impl Iterator<Item = &'a Container> + 'a {
        self.containers.iter().filter(move |c| c.sandbox_id == sandbox_id)
    }

    fn next_pid(&mut self) -> u32 {
        self.next_pid += 1;
        self.next_pid
    }
}

impl Sandbox {
    pub(super) fn status(&self) -> v1::PodSandboxStatus {
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

    pub(super) fn item(&self) -> v1::PodSandbox {
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
    pub(super) fn is_running(&self) -> bool {
        self.state == v1::ContainerState::ContainerRunning
    }

    pub(super) fn require_running(&self) -> Result<(), Status> {
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

    pub(super) fn status(&self) -> v1::ContainerStatus {
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

    pub(super) fn item(&self) -> v1::Container {
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
}

/// A sandbox's config as containerd records it in its verbose info: Go's `encoding/json` of the
/// CRI type (snake_case keys, empty fields left out); the fields the memory runtime keeps.
fn recorded_config(config: &v1::PodSandboxConfig) -> serde_json::Value {
    let mut recorded = serde_json::Map::new();
    if let Some(m) = &config.metadata {
        let metadata =
            serde_json::json!({ "name": m.name, "uid": m.uid, "namespace": m.namespace, "attempt": m.attempt });
        recorded.insert("metadata".into(), metadata);
    }
    for (key, text) in [("hostname", &config.hostname), ("log_directory", &config.log_directory)] {
        if !text.is_empty() {
            recorded.insert(key.into(), text.as_str().into());
        }
    }
    for (key, map) in [("labels", &config.labels), ("annotations", &config.annotations)] {
        if !map.is_empty() {
            recorded.insert(key.into(), serde_json::json!(map));
        }
    }
    if let Some(linux) = &config.linux {
        let mut recorded_linux = serde_json::Map::new();
        if !linux.cgroup_parent.is_empty() {
            recorded_linux.insert("cgroup_parent".into(), linux.cgroup_parent.as_str().into());
        }
        if let Some(options) = linux.security_context.as_ref().and_then(|c| c.namespace_options.as_ref()) {
            let options = serde_json::json!({ "network": options.network, "pid": options.pid, "ipc": options.ipc });
            recorded_linux.insert("security_context".into(), serde_json::json!({ "namespace_options": options }));
        }
        recorded.insert("linux".into(), recorded_linux.into());
    }
    recorded.into()
}
