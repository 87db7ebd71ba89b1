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
//! - `state`: [`MemoryRuntime`] and the state behind its lock (`State`, `Sandbox`,
//!   `Container`), and what the tests read of it (metadata, calls).
//! - `support`: the helpers every file uses (lock, clock, stable IDs, common errors).
//! - `image_ref`: references normalized as docker does, and the image record made from one.
//! - `runtime`: Version, Status, UpdateRuntimeConfig and RuntimeConfig.
//! - `lifecycle`: pods and containers: their state machine, statuses and updates, found by ID.
//! - `checkpoint`: CheckpointPod and RestorePod.
//! - `images`: the ImageService.
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
mod image_ref;
mod images;
mod lifecycle;
mod runtime;
mod state;
mod stats;
mod streams;
mod support;

pub use dispatch::serve_memory;
pub use exec_sync::parse_grpc_timeout;
pub use state::{MemoryRuntime, MessageStream, CALL_ID, FS_MOUNTPOINT, PRELOADED_IMAGES, RUNTIME_NAME};

#[cfg(test)]
mod tests;
