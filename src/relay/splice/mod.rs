//! The splice: a client connection whose calls the runtime can take as they are, relayed frame by
//! frame to a runtime connection of its own, so that HTTP/2 is not terminated twice.
//!
//! # What crosses as it came, and what does not
//!
//! - Client to runtime: every frame as it came (the preface, SETTINGS, header blocks with their
//!   HPACK bytes, DATA, WINDOW_UPDATE, PING, RST_STREAM, GOAWAY). Each header block is decoded
//!   against a copy of the runtime's table, to know the call, never re-encoded.
//! - Runtime to client: frames as they came, but header blocks are decoded against the runtime's
//!   table and written anew as fields that enter no table ([`hpack::encode`]). The client's
//!   table therefore stays empty, and cri-bridge may answer on the connection itself (a refusal,
//!   an answer of its own) without either side's tables drifting.
//!
//! # Which streams are relayed
//!
//! Each new stream is put to the [`Router`] (the forwarder) with its path: a call in the
//! runtime's version that needs nothing more than passing is relayed; one whose request must be
//! judged first (the revision scan, the loss policy) is relayed once its message is gathered and
//! judged, or refused by cri-bridge. Every other stream (a call in another version, cri-bridge's
//! own questions, an RPC the runtime lacks) is *intercepted*: served through cri-bridge's
//! terminating HTTP/2 path over an in-process connection, and its answer written to the client
//! here. An intercepted request's header block reaches the runtime only when it changes the
//! runtime's table, on a stream cancelled at once (RST_STREAM CANCEL before any DATA: no
//! handler runs a call without its message).
//!
//! # Flow control
//!
//! The runtime and the client keep each other's windows, as they would directly, except where
//! cri-bridge sends or takes DATA itself ([`flow`]): DATA taken from the client on an intercepted
//! stream is granted back to the client at once; DATA written to the client by cri-bridge is
//! repaid from the client's next connection WINDOW_UPDATEs before they reach the runtime, and
//! the runtime's DATA that would then overrun the client's window waits here (at most
//! [`flow::OWN_DATA_CAP`]).

mod client_side;
pub mod connection;
pub mod flow;
pub mod hpack;
mod intercept;
mod router;
mod runtime_side;
pub mod wire;

pub use connection::{splice, Spliced};
pub use router::{RequestHead, Route, Router};
