//! The in-memory runtime's state: [`MemoryRuntime`] and what its lock guards (`State`, with
//! its `Sandbox`es and `Container`s), and what the tests read of it (metadata, calls). Every
//! service file adds the methods of its calls to `MemoryRuntime`.

use super::image_ref;
use super::support::{hex64, lock, now_nanos};
use crate::api::v1;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{broadcast, watch};
use tonic::metadata::MetadataMap;
use tonic::Status;

/// Request metadata a test may set to tell its calls apart at the runtime.
pub const CALL_ID: &str = "x-test-call-id";

/// `VersionResponse.runtime_name`.
pub use crate::revision::MEMORY_RUNTIME_NAME as RUNTIME_NAME;
/// Where the fake's images and writable layers "live" (`fs_id.mountpoint` in the stats).
pub const FS_MOUNTPOINT: &str = "/var/lib/cri-bridge-memory";
/// The images present from the start: the pause image and busybox.
pub const PRELOADED_IMAGES: [&str; 2] = ["registry.k8s.io/pause:3.10", "docker.io/library/busybox:latest"];

/// The messages of a typed server-streaming method.
pub type MessageStream<T> = BoxStream<'static, T>;

/// The in-memory runtime. Create it with [`MemoryRuntime::new`] and serve it with a
/// [`CriServer`] (or [`serve_memory`]); or call its typed v1 methods directly.
///
/// [`CriServer`]: crate::grpc::CriServer
pub struct MemoryRuntime {
    pub(super) state: Mutex<State>,
    /// Request metadata of the latest call of each method, by method name.
    pub(super) metadata: Mutex<HashMap<&'static str, MetadataMap>>,
    /// Calls served per method.
    pub(super) calls_by_method: Mutex<HashMap<&'static str, u64>>,
    /// The [`CALL_ID`] of every call that carried one, in arrival order (tests: was a call
    /// executed twice?).
    pub(super) call_ids: Mutex<Vec<String>>,
    pub(super) calls: AtomicU64,
    pub(super) ids: AtomicU64,
    pub(super) id_hasher: RandomState,
    pub(super) events: broadcast::Sender<v1::ContainerEventResponse>,
    /// Set once the server shuts down: ends the GetContainerEvents streams.
    pub(super) closing: watch::Sender<bool>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) sandboxes: Vec<Sandbox>,
    pub(super) containers: Vec<Container>,
    pub(super) images: Vec<v1::Image>,
    pub(super) pod_cidr: String,
    /// `Version`'s runtime name and version, when a test makes the runtime pose as another.
    pub(super) identity: Option<(String, String)>,
    /// What `RuntimeConfig` answers and `Status` verbose info describes, as containerd does;
    /// `None`: `RuntimeConfig` is unimplemented (as in containerd 1.7) and `Status` names none.
    pub(super) cgroup_driver: Option<v1::CgroupDriver>,
    /// How `Status` spells runc's `SystemdCgroup` option (`None`: `SystemdCgroup`).
    pub(super) systemd_cgroup_key: Option<String>,
    /// Creates need `ImageSpec.user_specified_image`, as CRI-O's do with a `signature_policy`.
    pub(super) verifies_signatures: bool,
    /// The handlers `Status` reports, each with (user namespaces, recursive read-only mounts);
    /// `None`: `""` and `runc`, both with both.
    pub(super) handlers: Option<Vec<(String, bool, bool)>>,
    /// Methods answered with this status instead of their answer (tests: a runtime restoring
    /// its state, stuck, or without its CRI service yet).
    pub(super) failing: HashMap<String, Status>,
    /// A status read of an id it does not hold is answered as cri-dockerd answers it (`UNKNOWN`,
    /// Docker's "No such container").
    pub(super) docker_not_found: bool,
    /// Source of pod IPs (10.88.0.0/16, as containerd's default bridge) and of fake PIDs.
    pub(super) next_ip: u32,
    pub(super) next_pid: u32,
}

pub(super) struct Sandbox {
    pub(super) id: String,
    pub(super) config: v1::PodSandboxConfig,
    pub(super) runtime_handler: String,
    pub(super) state: v1::PodSandboxState,
    pub(super) created_at: i64,
    pub(super) ip: String,
    pub(super) pid: u32,
}

pub(super) struct Container {
    pub(super) id: String,
    pub(super) sandbox_id: String,
    pub(super) config: v1::ContainerConfig,
    pub(super) image_id: String,
    pub(super) image_ref: String,
    pub(super) state: v1::ContainerState,
    pub(super) created_at: i64,
    pub(super) started_at: i64,
    pub(super) finished_at: i64,
    pub(super) exit_code: i32,
    pub(super) resources: Option<v1::ContainerResources>,
    pub(super) user: v1::ContainerUser,
    pub(super) log_path: String,
    pub(super) pid: u32,
    /// The `sandbox_config` its `CreateContainer` carried (a runtime reads the pod's cgroup
    /// parent, annotations and log directory from it); verbose `ContainerStatus` shows it.
    pub(super) sandbox_config: Option<v1::PodSandboxConfig>,
}

impl MemoryRuntime {
    /// A runtime with no pods or containers and the [`PRELOADED_IMAGES`].
    pub fn new() -> Arc<MemoryRuntime> {
        let images = vec![
            image_ref::new_image(PRELOADED_IMAGES[0], 320_368, Some(65535), true),
            image_ref::new_image(PRELOADED_IMAGES[1], 2_167_176, Some(0), false),
        ];
        let cgroup_driver = Some(v1::CgroupDriver::Systemd);
        let state = State { images, cgroup_driver, next_ip: 2, next_pid: 1000, ..State::default() };
        Arc::new(MemoryRuntime {
            state: Mutex::new(state),
            metadata: Mutex::new(HashMap::new()),
            calls_by_method: Mutex::new(HashMap::new()),
            call_ids: Mutex::new(Vec::new()),
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

    /// The [`CALL_ID`]s received so far, in arrival order.
    pub fn call_ids(&self) -> Vec<String> {
        lock(&self.call_ids).clone()
    }

    /// How many calls the runtime has served (unknown methods included).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// How many GetContainerEvents streams are open (tests: a cancelled stream must go away).
    pub fn event_watchers(&self) -> usize {
        self.events.receiver_count()
    }

    /// Ends the open GetContainerEvents streams (and those opened later), so that a graceful
    /// shutdown need not wait for them. [`serve_memory`] calls it when its shutdown completes.
    pub fn end_streams(&self) {
        self.closing.send_replace(true);
    }

    /// Makes `Version` report `name` and `version` instead of [`RUNTIME_NAME`] (tests: a runtime
    /// cri-bridge's revision table does not know).
    pub fn set_identity(&self, name: &str, version: &str) {
        self.state().identity = Some((name.to_string(), version.to_string()));
    }

    /// The cgroup driver `RuntimeConfig` answers and `Status` verbose info describes (in
    /// containerd's form); `None` makes `RuntimeConfig` unimplemented. Systemd by default.
    pub fn set_cgroup_driver(&self, driver: Option<v1::CgroupDriver>) {
        self.state().cgroup_driver = driver;
    }

    /// Answers as CRI-O 1.36.3 does where cri-bridge has to take care (issue 40; the source of
    /// each fact is in docs/testing.md): `Version` names `cri-o` 1.36.3; `Status` reports the
    /// handlers `""` and `runc` with recursive read-only mounts and user namespaces, and `crun`
    /// with neither; a create whose image names no `user_specified_image` is refused, as with a
    /// `signature_policy` ("user specified image not specified, cannot verify image signature",
    /// gRPC code Unknown, from `server/container_create_linux.go`).
    pub fn pose_as_crio_1_36(&self) {
        self.set_identity("cri-o", "1.36.3");
        self.set_handlers(&[("", true, true), ("runc", true, true), ("crun", false, false)]);
        self.state().verifies_signatures = true;
    }

    /// Reports these handlers in `Status`, each with (user namespaces, recursive read-only
    /// mounts), as CRI-O 1.36 reports `crun` without recursive read-only mounts beside `runc`
    /// with them.
    pub fn set_handlers(&self, handlers: &[(&str, bool, bool)]) {
        self.state().handlers = Some(handlers.iter().map(|(n, u, r)| (n.to_string(), *u, *r)).collect());
    }

    /// Spells runc's `SystemdCgroup` option in the `Status` info as `key`, as a containerd config
    /// may (containerd reads it case-insensitively): `systemdCgroup`, `systemdcgroup`.
    pub fn set_systemd_cgroup_key(&self, key: &str) {
        self.state().systemd_cgroup_key = Some(key.to_string());
    }

    /// Answers every call of `method` (`PodSandboxStatus`) with `status` until [`Self::recover`].
    pub fn fail(&self, method: &str, status: Status) {
        self.state().failing.insert(method.to_string(), status);
    }

    /// Answers `method` again.
    pub fn recover(&self, method: &str) {
        self.state().failing.remove(method);
    }

    /// Answers as cri-dockerd 0.4.3 in front of Docker answers where routing must tell "not
    /// here" from "cannot know": `Version` names `docker`, and `PodSandboxStatus` and
    /// `ContainerStatus` of an id it does not hold give Docker's inspect error as it came
    /// (`UNKNOWN`, "Error response from daemon: No such container: <id>";
    /// `core/sandbox_status.go`, `core/container_status.go`).
    pub fn pose_as_cri_dockerd(&self) {
        self.set_identity(crate::revision::DOCKER, "20.10.24");
        self.state().docker_not_found = true;
    }

    pub(super) fn failure_of(&self, method: &str) -> Option<Status> {
        self.state().failing.get(method).cloned()
    }

    /// `answer` as the runtime posed as would give it.
    pub(super) fn as_posed(&self, rpc: crate::grpc::Rpc, answer: Result<Bytes, Status>) -> Result<Bytes, Status> {
        let status_read = matches!(rpc.info.method, "PodSandboxStatus" | "ContainerStatus");
        match answer {
            Err(status) if status_read && status.code() == tonic::Code::NotFound && self.state().docker_not_found => {
                // The memory runtime's message names the id in quotes: `pod sandbox "<id>" not found`.
                let id = status.message().split('"').nth(1).unwrap_or_default().to_string();
                Err(Status::unknown(format!("Error response from daemon: No such container: {id}")))
            }
            answer => answer,
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// 64 hex characters that look random: a counter and the time, hashed.
    pub(super) fn new_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let now = now_nanos();
        hex64(|i| self.id_hasher.hash_one((n, now, i)))
    }
}
