//! What the splice asks of the layer above it about each stream, and tells it.

use tonic::{Code, Status};

/// What the splice learns of a request from its header block.
pub struct RequestHead<'a> {
    pub path: &'a str,
    /// `grpc-timeout`: the splice ends the call with DEADLINE_EXCEEDED when it passes.
    pub timeout: Option<std::time::Duration>,
    /// The request carries cri-bridge's own-call mark (`x-cri-bridge-own-call`).
    pub own_call: bool,
}

/// What to do with a new stream.
pub enum Route<C> {
    /// Relay it (its request held until whole: one message within `max_message_size`);
    /// `judge`: and ask [`Router::judge`] before it goes on.
    Relay { call: C, judge: bool },
    /// Serve it through the terminating path.
    Intercept,
}

/// Decides each stream of a spliced connection, and is told how relayed calls end.
pub trait Router: Send + Sync + 'static {
    /// One relayed call, held by the splice until it ends.
    type Call: Send + 'static;

    fn route(&self, head: &RequestHead) -> Route<Self::Call>;

    /// A gathered request message (without its 5-byte prefix): `Err` refuses the call with
    /// that status, and nothing of it but its header block reaches the runtime.
    fn judge(&self, call: &Self::Call, message: &[u8]) -> Result<(), Status>;

    /// A relayed call ended: the runtime's `grpc-status`, cri-bridge's own status, or
    /// `Cancelled` for a reset stream.
    fn ended(&self, call: Self::Call, code: Code);

    /// The runtime connection was lost (its version may change before the next): the status
    /// its open calls are ended with.
    fn runtime_lost(&self, detail: &str) -> Status;

    /// The status a relayed call is ended with when its caller took none of its answer for
    /// `after` (`limits.stalled_caller_seconds`).
    fn stalled(&self, call: &Self::Call, after: std::time::Duration) -> Status;

    /// How a status of cri-bridge's own names the call's request (`the … request`).
    fn request_name(&self, call: &Self::Call) -> String;

    /// The largest message a relayed call may carry, either way (`max_message_size`).
    fn max_message_size(&self) -> usize;
}
