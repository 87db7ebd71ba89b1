//! The hot path: every call a client makes crosses it twice, so its work per call is what a
//! relay must do and little more.
//!
//! - [`serve`]: the listening socket's connections, HTTP/2 through the front door, each stream
//!   a task; drain on shutdown.
//! - [`upstream`]: the one HTTP/2 connection to the runtime that every call shares.
//! - [`answer`]: the caller's side of one call, sent as the caller's flow control allows.
//! - [`message`]: gRPC's length-prefixed messages: a request gathered, an answer metered or cut.
//!
//! What a call costs on this path (the forwarder, `forward.rs`, decides what is done):
//! HTTP/2 in (`h2`), one hash lookup for the RPC, the request's one message gathered (a single
//! DATA frame is taken without a copy), the caller's headers moved onto a new stream to the
//! runtime, and the answer's head, DATA frames and trailers handed back as they came — only
//! each message's 5-byte prefix is read, to hold `max_message_size`. Translating adds: each
//! message of the answer gathered, converted and framed anew. There is no gRPC server or client
//! stack in between (no per-call tower services, no buffered channel, no decoded framing).

pub mod answer;
pub mod message;
pub mod serve;
pub mod upstream;

pub use serve::serve;
