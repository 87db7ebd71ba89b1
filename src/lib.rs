//! cri-bridge: lets a kubelet and a container runtime that speak different versions of the
//! Container Runtime Interface (v1alpha1, v1alpha2, v1) work together.
//!
//! # Floors, from the bottom up
//!
//! A module uses only the modules listed before it: those on floors below its own, and those to
//! its left on its floor. What happens is told upward through small interfaces that the lower
//! floor defines (`convert::policy::LossObserver`, `relay::serve::Calls`, `forward::Observer`,
//! `forward::OwnCalls`), so the pure core never names an I/O module and the forwarding path
//! never names its observers. `tests/layers.rs` holds the code to this list.
//!
//! 1. Schemas: [`api`], [`version`]
//! 2. The pure core: [`runtime_config`], [`revision`], [`convert`], [`access`], [`routing`]
//! 3. Settings and failures: [`config`], [`error`]
//! 4. I/O mechanics: [`node`], [`http2`], [`budget`], [`front_door`], [`grpc`], [`frontend`], [`relay`], [`backend`]
//! 5. What a call means: [`forward`]
//! 6. Observers and cri-bridge's own calls: [`callers`], [`metrics`], [`observers`], [`control`]
//! 7. Programs: [`memory`], [`systemd`], [`reload`], [`run`], [`probe`], [`holdings`], [`move_pods`]
//!
//! Why these floors:
//! 1. The generated types and schemas of the three versions, and the `CriVersion` enum.
//! 2. Bytes and schemas in, decisions out; no I/O, no tokio, no metrics, so it is tested and
//!    fuzzed alone. [`runtime_config`]: the cgroup driver a runtime reports. [`revision`]: which
//!    revision of its version a runtime speaks, what it does not act on, its features.
//!    [`convert`]: generated conversions with v1 as the hub, the hand-written exceptions, the
//!    bytes of a message the same on both sides passed as they are, the classification of
//!    lossable fields, loss reports, the loss policy, the wire scan. [`access`]: what each RPC
//!    does to the node, and what an endpoint's policy lets a caller do. [`routing`]: where a call
//!    goes among several backends, and how their answers merge.
//! 3. [`config`]: the YAML file, CLI overrides, validation naming the key. [`error`]: the
//!    proxy's errors and their gRPC status, in one place.
//! 4. Generic over what a call means. [`node`]: what this node is (whether it has swap), read
//!    where a field's effect depends on it. [`http2`]: the HTTP/2 settings every connection shares.
//!    [`budget`]: the memory held for clients, bounded per connection and in all, shared fairly.
//!    [`front_door`]: a client connection's header blocks mended before the HTTP/2 server parses
//!    them. [`grpc`]: gRPC at the byte level (codec, path router, unix-socket client).
//!    [`frontend`]: the listening socket. [`relay`]: the hot path's HTTP/2 in and out with `h2`,
//!    answers relayed frame by frame. [`backend`]: the runtime connection and version discovery.
//! 5. [`forward`]: the one forwarding path: per RPC and backend version, passthrough or convert,
//!    unary and streaming; each client connection's own runtime connections; large conversions
//!    off the one thread; among several backends, where each call goes and merged answers.
//! 6. Told what happened. [`callers`]: who is calling, per CRI version (the migration report).
//!    [`metrics`]: the Prometheus endpoint. [`observers`]: both, behind `forward::Observer`.
//!    [`control`]: cri-bridge's own questions on the CRI socket (`probe`'s status, callers).
//! 7. [`memory`]: an in-memory CRI runtime serving any version (tests, the quick start): a
//!    runtime like any other, which nothing below names. [`systemd`]: readiness, watchdog,
//!    stopping. [`reload`]: `SIGHUP` re-reads the config. [`run`]: wiring it all together until
//!    shutdown. [`probe`]: `cri-bridge probe`. [`holdings`]: `cri-bridge backends`, what each backend
//!    holds. [`move_pods`]: `cri-bridge move`, a node's pods moved off a backend through the API
//!    server's eviction API.
//!
//! `build.rs` compiles `proto/` with protox and generates both the types and the conversions.
#![forbid(unsafe_code)]

pub mod access;
pub mod api;
pub mod backend;
pub mod budget;
pub mod callers;
pub mod config;
pub mod control;
pub mod convert;
pub mod error;
pub mod forward;
pub mod front_door;
pub mod frontend;
pub mod grpc;
pub mod holdings;
pub mod http2;
pub mod memory;
pub mod metrics;
#[cfg(feature = "move")]
pub mod move_pods;
pub mod node;
pub mod observers;
pub mod probe;
pub mod relay;
pub mod reload;
pub mod revision;
pub mod routing;
pub mod run;
pub mod runtime_config;
pub mod systemd;
pub mod version;

pub use run::run;
pub use version::CriVersion;
