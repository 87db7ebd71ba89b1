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
//!
//! # Files
//!
//! - `mod.rs`: [`MemoryRuntime`] and the state behind its lock (`State`, `Sandbox`,
//!   `Container`), what the tests read of it (metadata, calls), and the helpers every file uses.
//! - `runtime`: Version, Status, UpdateRuntimeConfig and RuntimeConfig.
//! - `lifecycle`: pods and containers: their state machine, statuses and updates, found by ID.
//! - `checkpoint`: CheckpointPod and RestorePod.
//! - `images`: the ImageService, and references normalized as docker does.
//! - `filters`: the List* calls of pods, containers and their stats, and their filters.
//! - `stats`: stats and metrics of containers and pods.
//! - `streams`: GetContainerEvents, the Stream* calls (their List* in chunks), and the Exec,
//!   Attach and PortForward URLs.
//! - `exec_sync`: ExecSync's interpreter, and `sleep` against the caller's deadline.
//! - `codec`: a request of any version read as v1 (for `dispatch` and `exec_sync` alike).
//! - `dispatch`: routing an RPC of any version to its typed method, the [`Handler`] impl, and
//!   [`serve_memory`].
//!
//! [`Handler`]: crate::grpc::Handler
//! [`CriServer`]: crate::grpc::CriServer

mod checkpoint;
mod codec;
mod dispatch;
mod exec_sync;
mod filters;
mod images;
mod lifecycle;
mod runtime;
mod stats;
mod streams;

pub use dispatch::serve_memory;
pub use exec_sync::parse_grpc_timeout;

use crate::api::v1;
use futures_util::stream::BoxStream;
use images::new_image;
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
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
    state: Mutex<State>,
    /// Request metadata of the latest call of each method, by method name.
    metadata: Mutex<HashMap<&'static str, MetadataMap>>,
    /// Calls served per method.
    calls_by_method: Mutex<HashMap<&'static str, u64>>,
    /// The [`CALL_ID`] of every call that carried one, in arrival order (tests: was a call
    /// executed twice?).
    call_ids: Mutex<Vec<String>>,
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
    /// `Version`'s runtime name and version, when a test makes the runtime pose as another.
    identity: Option<(String, String)>,
    /// What `RuntimeConfig` answers and `Status` verbose info describes, as containerd does;
    /// `None`: `RuntimeConfig` is unimplemented (as in containerd 1.7) and `Status` names none.
    cgroup_driver: Option<v1::CgroupDriver>,
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

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// 64 hex characters that look random: a counter and the time, hashed.
    fn new_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let now = now_nanos();
        hex64(|i| self.id_hasher.hash_one((n, now, i)))
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

#[cfg(test)]
mod tests;
