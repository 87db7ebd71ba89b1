//! What a spliced connection holds: its streams as the splice carries them, and the state both
//! directions share.

use super::flow::ClientWindow;
use super::hpack::Decoder;
use super::intercept::Event;
use super::router::Router;
use crate::config::Limits;
use crate::relay::message::Meter;
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// A stream of the connection, as the splice carries it.
pub(super) enum Stream<C> {
    Relayed(Relayed<C>),
    Intercepted(Intercepted),
    /// Passed to the runtime without being read (a HEADERS frame the runtime resets unread):
    /// the runtime's reset comes back as it is.
    Passed,
    /// Answered by cri-bridge before the client finished sending: its frames are taken here.
    Ended,
}

pub(super) struct Relayed<C> {
    pub call: Option<C>,
    /// What the runtime still takes on this stream, and the request's bytes waiting for it
    /// (after judging), the last with END_STREAM.
    pub runtime_window: i64,
    pub outbox: VecDeque<(Bytes, bool)>,
    /// The request's frames and message, held until judged (when the router asked).
    pub gathering: Option<Gathering>,
    /// Each answer message's size, against `max_message_size`.
    pub meter: Meter,
    /// The answer's head went to the client: a status of cri-bridge's own goes as trailers.
    pub head_sent: bool,
    /// Its entries in [`Splice::timers`]: when its request must have arrived, and the caller's
    /// deadline.
    pub request_timer: Instant,
    pub deadline: Option<Instant>,
    /// Bytes of its request held in [`Splice::held`].
    pub held: usize,
    /// What the client still takes on this stream (the runtime keeps to it; the splice counts
    /// it to see a caller that takes nothing).
    pub client_window: i64,
    /// When the client last gave room for this stream's answer, and the stall timer's entry in
    /// [`Splice::timers`] while the answer waits for room (`limits.stalled_caller_seconds`).
    pub progress: Instant,
    pub stall_timer: Option<Instant>,
}

/// What a relayed call's timer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// The request must have arrived (`limits.request_timeout_seconds`).
    Request,
    /// The caller's deadline (`grpc-timeout`).
    Deadline,
    /// The caller took none of the answer (`limits.stalled_caller_seconds`).
    Stalled,
}

#[derive(Default)]
pub(super) struct Gathering {
    pub message: BytesMut,
    /// Ask the router before the request goes on.
    pub judge: bool,
    pub check: crate::relay::message::UnaryRequest,
}

pub(super) struct Intercepted {
    /// The request as it came so far; `None` once sent to the terminating path.
    pub request: Option<(http::Request<()>, BytesMut)>,
    /// What the client still takes on this stream.
    pub window: i64,
    /// Answer bytes not yet written, from `offset`, and who waits for them.
    pub pending: Option<(Bytes, usize, oneshot::Sender<()>)>,
    pub task: Option<tokio::task::AbortHandle>,
}

/// A header block being gathered (HEADERS and its CONTINUATIONs).
pub(super) struct Block {
    pub stream: u32,
    pub flags: u8,
    pub frames: Vec<Bytes>,
    pub hpack: Vec<u8>,
}

pub(super) struct Splice<R: Router> {
    pub router: R,
    pub limits: Limits,
    pub inner: h2::client::SendRequest<Bytes>,
    pub events: mpsc::Sender<(u32, Event)>,
    pub streams: HashMap<u32, Stream<R::Call>>,
    /// The highest stream the client opened.
    pub last_stream: u32,
    pub to_client: BytesMut,
    pub to_runtime: BytesMut,
    /// Frames for the client behind one its connection window does not take yet, in order:
    /// (frame, flow-controlled length, written by cri-bridge itself).
    pub waiting: VecDeque<(Bytes, usize, bool)>,
    pub waiting_bytes: usize,
    pub window: ClientWindow,
    /// The client's blocks, against the runtime's table.
    pub client_table: Decoder,
    /// Set once a block the runtime never saw changed the client's table: the client's blocks
    /// are written anew for the runtime from then on.
    pub reencode: bool,
    /// The runtime's blocks, against the client's table.
    pub runtime_table: Decoder,
    pub client_block: Option<Block>,
    pub runtime_block: Option<Block>,
    /// SETTINGS_MAX_FRAME_SIZE each end announced: the largest frame it takes.
    pub client_max_frame: usize,
    pub runtime_max_frame: usize,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE: each intercepted stream's window to begin with.
    pub client_initial_window: i64,
    /// The runtime's SETTINGS_INITIAL_WINDOW_SIZE, and what it still takes on the connection:
    /// the splice gives the client its window back as it reads a request, and sends the
    /// requests on within the runtime's.
    pub runtime_initial_window: i64,
    pub runtime_window: i64,
    /// SETTINGS and PING frames from the client in the current window, and since when.
    pub control_frames: (u32, Instant),
    /// The client's connection's share of the memory bound: requests being gathered.
    pub held: crate::budget::Charge,
    pub preface_read: bool,
    /// GOAWAY sent to the client: streams above `last_stream` are refused.
    pub going_away: bool,
    pub runtime_gone: bool,
    /// The runtime sent GOAWAY: it takes no new streams, so new calls are intercepted.
    pub runtime_draining: bool,
    /// Calls the client reset in the current minute.
    pub resets: u32,
    /// The client answered cri-bridge's keepalive PING since the last look.
    pub keepalive_acked: bool,
    /// Why the connection must end now, if it must, and the GOAWAY code the client is told.
    pub fatal: Option<(u32, String)>,
    pub fields: super::hpack::Fields,
    /// A header block being written, kept from block to block.
    pub scratch: Vec<u8>,
    /// Relayed calls whose judged requests wait for the runtime's window, and intercepted
    /// streams whose answer bytes wait for the client's.
    pub requests_waiting: Vec<u32>,
    pub answers_waiting: Vec<u32>,
    /// When the client last gave room on the connection.
    pub connection_progress: Instant,
    /// Relayed calls' timers, soonest first.
    pub timers: std::collections::BTreeSet<(Instant, u32, Timer)>,
}
