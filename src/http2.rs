//! The HTTP/2 settings every connection of cri-bridge shares, on the client side (`grpc::serve`,
//! `relay::serve`, the front door in front of both) and on the runtime side (`relay::upstream`, as
//! `backend` and `probe` open it). A bottom module: each of those takes the numbers from here,
//! and none has to reach into another for them.

/// The largest decoded header list a connection accepts, on either side (why 1 MiB: where the
/// servers set it, `grpc::serve` and `relay::serve`).
pub const MAX_HEADER_LIST_SIZE: u32 = 1024 * 1024;

/// The largest frame a peer may send before SETTINGS change it (RFC 9113 §4.2). No connection
/// changes it (hyper and h2 keep the protocol's default), so the front door reads a client's
/// frames against it.
pub const MAX_FRAME_SIZE: usize = 16_384;
