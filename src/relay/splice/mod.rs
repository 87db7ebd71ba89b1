//! The splice: a client connection whose calls the runtime can take as they are, relayed frame by
//! frame to a runtime connection of its own, so that HTTP/2 is not terminated twice.
//!
//! # What crosses as it came, and what does not
//!
//! - Client to runtime: the preface, SETTINGS, PING, GOAWAY, RST_STREAM and header blocks, as
//!   they came. Each header block is decoded against a copy of the runtime's table, to know the
//!   call. A request's DATA is held until the request is whole (one message within
//!   `max_message_size`, judged where the revision scan or the loss policy must see it), then
//!   sent on within the runtime's windows.
//! - Runtime to client: frames as they came, but header blocks are decoded against the runtime's
//!   table and written anew as fields that enter no table ([`hpack::encode`]). The client's
//!   table therefore stays empty, and cri-bridge may answer on the connection itself (a refusal,
//!   a deadline, an answer of its own) without either side's tables drifting.
//!
//! # Which streams are relayed
//!
//! Each new stream is put to the [`Router`] (the forwarder) with its path: a call in the
//! runtime's version that the runtime takes as it is is relayed (refused by cri-bridge instead
//! when its request is judged so). Every other stream (a call in another version, cri-bridge's
//! own questions, an RPC the runtime lacks) is *intercepted*: served through cri-bridge's
//! terminating HTTP/2 path over an in-process connection, and its answer written to the client
//! here. An intercepted request's header block never reaches the runtime. When it changed the
//! client's table, the runtime's copy can no longer follow: from then on the client's blocks are
//! written anew for the runtime too, into no table. (Sending such a block on a stream reset at
//! once would keep the tables in step, but a runtime rightly reads a run of such resets as an
//! attack: h2 answers GOAWAY ENHANCE_YOUR_CALM.)
//!
//! # Flow control
//!
//! - Client to runtime: the splice gives the client its window back as it reads DATA (requests
//!   are bounded by `max_message_size` and the connection's memory bound), and sends requests
//!   on as the runtime's WINDOW_UPDATEs allow; those are not passed to the client.
//! - Runtime to client: the runtime and the client keep each other's windows, except where
//!   cri-bridge writes DATA itself ([`flow`]): that is repaid from the client's next connection
//!   WINDOW_UPDATEs before they reach the runtime, and the runtime's DATA that would then
//!   overrun the client's window waits here (at most [`flow::OWN_DATA_CAP`]). The splice counts
//!   each relayed stream's window as the client gives it: a caller that gives an answer no room
//!   for `limits.stalled_caller_seconds` is ended as on the terminating path.
//! - Frames the client sends on a stream that ended here (a late WINDOW_UPDATE, RST_STREAM) are
//!   not passed on: the stream is closed at the runtime, or was never there (intercepted), and a
//!   runtime takes a frame on a stream it never saw as a protocol error.

mod client_side;
pub mod connection;
pub mod flow;
pub mod hpack;
mod intercept;
mod router;
mod runtime_side;
mod sending;
mod state;
pub mod wire;

pub use connection::{splice, Spliced};
pub use router::{RequestHead, Route, Router};
