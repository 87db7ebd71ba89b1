//! The hot path: every call a client makes crosses it twice, so its work per call is what a
//! relay must do and little more.
//!
//! - [`serve`]: the listening socket's connections, HTTP/2 through the front door, each stream
//!   a task, each connection watched (keepalive, idleness, reset floods); drain on shutdown.
//! - [`admission`]: how many connections, in all, per pool (the main socket, the scoped ones)
//!   and per uid; a stream is busy once its request has arrived.
//! - [`upstream`]: an HTTP/2 connection to the runtime (each client connection has its own).
//! - [`answer`]: the caller's side of one call, sent as the caller's flow control allows.
//! - [`message`]: gRPC's length-prefixed messages: a request gathered, an answer metered or cut.
//! - [`socket`]: the connections' unix sockets; watched for reading only (no wake-up for each
//!   write the peer has read) with `CRI_BRIDGE_READ_WATCHED=1`, an experiment of issue 50.
//!
//! What a call costs on this path (the forwarder, `forward.rs`, decides what is done):
//! HTTP/2 in (`h2`), one hash lookup for the RPC, the request's one message gathered (a single
//! DATA frame is taken without a copy) and held within the connection's memory bound, the
//! caller's headers moved onto a new stream of the client connection's own runtime connection,
//! and the answer's head, DATA frames and trailers handed back as they came — only each
//! message's 5-byte prefix is read, to hold `max_message_size`. Translating adds: each
//! message of the answer gathered, converted and framed anew. There is no gRPC server or client
//! stack in between (no per-call tower services, no buffered channel, no decoded framing).
//!
//! # The runtime model
//!
//! One thread (a current-thread tokio runtime; each stream still a task of its own), chosen on
//! the load benchmark (`benches/load/`, 2-core machine, Version with 64 calls in flight on
//! one connection, passthrough, one run each): proxy CPU per call 20.9 µs on one thread, 26.3 µs
//! with one worker thread beside the accepting one, 34.5 µs with two workers, at about the same
//! latency (p50 2.07, 1.95, 2.55 ms). With more threads every call's wake-ups cross threads
//! (the h2 connection tasks and the call tasks run apart, and idle workers are woken to steal),
//! which costs more than it buys on a node whose cores the kubelet and the runtime need. What one
//! thread gives up: a conversion holds the other calls while it runs, so large ones run on
//! threads of their own (`forward::offload`); a 1,000-container list (a few ms) still runs here.
//! `CRI_BRIDGE_WORKER_THREADS=N` (read by `main`) picks N workers instead.

pub mod admission;
pub mod answer;
pub mod message;
pub mod serve;
pub mod socket;
pub mod upstream;

pub use serve::serve;

/// What the daemon itself takes, beside what it holds for clients: the binary, its threads'
/// stacks, tokio, the metrics (measured: about 10 MiB resident at start; counted with room).
pub const DAEMON_ITSELF: usize = 32 << 20;

/// The most memory the daemon may hold with `limits` (`docs/install.md`, "Limits and memory"):
/// `limits.buffer_mib`; for each of `limits.connections`, its own first 64 KiB
/// (`budget::FLOOR`), the 64 KiB the client may send before any window is given back and the
/// 1 MiB each of its `runtime_connections` may send ahead (one per backend, and one more for each
/// separate image endpoint: `Config::runtime_connections`); each
/// conversion thread's working memory (at most `limits.buffer_per_connection_mib` a message,
/// `forward::offload`); and the daemon itself.
pub fn memory_ceiling(limits: &crate::config::Limits, runtime_connections: usize) -> usize {
    let runtime_windows = (upstream::CONNECTION_WINDOW as usize).saturating_mul(runtime_connections);
    let per_connection = crate::budget::FLOOR + CLIENT_WINDOW + runtime_windows;
    limits
        .buffer_bytes
        .saturating_add(limits.connections.saturating_mul(per_connection))
        .saturating_add(limits.conversion_threads.saturating_mul(limits.buffer_per_connection_bytes))
        .saturating_add(DAEMON_ITSELF)
}

/// What a client may send on a connection before cri-bridge gives any window back (h2's
/// default initial window).
pub const CLIENT_WINDOW: usize = 65_535;

/// Worker threads of the proxy's tokio runtime (0: one thread that also accepts).
pub const WORKER_THREADS: usize = 0;
