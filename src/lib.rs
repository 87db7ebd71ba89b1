//! cri-bridge: lets a kubelet and a container runtime that speak different versions of the
//! Container Runtime Interface (v1alpha1, v1alpha2, v1) work together.
//!
//! # Layout
//!
//! - [`api`]: the generated types, clients and servers of the three versions, and each version's
//!   schema as a static table.
//! - [`version`]: the `CriVersion` enum.
//! - [`convert`]: generated field-by-field conversions with v1 as the hub, the hand-written
//!   exceptions, the classification of lossable fields, loss reports, the loss policy and the
//!   wire scan (unknown fields, fields beyond the runtime's revision).
//! - [`grpc`]: gRPC at the byte level: the raw codec, a server routing every CRI path of the
//!   enabled versions to one handler, a unix-socket client.
//! - [`front_door`]: a client connection's header blocks mended before the HTTP/2 server parses
//!   them (any `:authority`, as grpc-go servers accept).
//! - [`budget`]: the memory held for clients, bounded per connection and in all (used by the
//!   front door, the relay and the forwarder alike).
//! - [`backend`]: the runtime connection and version discovery (probe, re-probe on reconnect).
//! - [`revision`]: which revision of its version a runtime speaks, what it does not act on, and
//!   the features it reports.
//! - [`runtime_config`]: the cgroup driver of a runtime that cannot answer `RuntimeConfig`
//!   itself, from the config or the runtime's `Status` info (pure).
//! - [`forward`]: the one forwarding path: what each call does (passthrough or convert, unary
//!   and streaming), decided per RPC and backend version at start; each client connection's own
//!   runtime connections; large conversions off the one thread; and cri-bridge's own questions
//!   on the same socket (`probe`'s status, the callers report).
//! - [`relay`]: the hot path's mechanics: HTTP/2 in and out with `h2` directly, connections to
//!   the runtime, the answer relayed frame by frame.
//! - [`memory`]: an in-memory CRI runtime serving any version (tests and the quick start).
//! - [`frontend`]: the listening socket (mode, group, stale and live sockets).
//! - [`config`]: the YAML file, CLI overrides, validation naming the key.
//! - [`error`]: the proxy's errors and their gRPC status, in one place.
//! - [`run`]: wiring it all together until shutdown; [`probe`]: `cri-bridge probe`.
//! - [`callers`]: who is calling (peer credentials, executable, pod and container), per CRI
//!   version: the migration report.
//! - [`metrics`]: the Prometheus endpoint (`metrics.listen`) and what the hot path counts.
//! - [`reload`]: `SIGHUP` re-reads the config file and applies what can change live.
//! - [`systemd`]: readiness, watchdog and stopping, told to systemd (`Type=notify`).
//!
//! `build.rs` compiles `proto/` with protox and generates both the types and the conversions.
#![forbid(unsafe_code)]

pub mod api;
pub mod backend;
pub mod budget;
pub mod callers;
pub mod config;
pub mod convert;
pub mod error;
pub mod forward;
pub mod front_door;
pub mod frontend;
pub mod grpc;
pub mod http2;
pub mod memory;
pub mod metrics;
pub mod probe;
pub mod relay;
pub mod reload;
pub mod revision;
pub mod run;
pub mod runtime_config;
pub mod systemd;
pub mod version;

pub use run::run;
pub use version::CriVersion;
