//! Why a call ended without the runtime's own answer: what the call path returns, from reading
//! the caller's request to relaying the runtime's answer.

use crate::error::Error;
use crate::relay::answer::CallerGone;
use tonic::Status;

/// Why a call ended without the runtime's own answer.
pub(super) enum Failure {
    /// Answered with cri-bridge's status.
    Status(Status),
    /// The caller went away: there is no one to answer.
    Gone,
    /// The runtime reset its stream, and the caller's was reset the same way.
    Reset,
}

impl From<Status> for Failure {
    fn from(status: Status) -> Failure {
        Failure::Status(status)
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Status(error.into())
    }
}

impl From<CallerGone> for Failure {
    fn from(_: CallerGone) -> Failure {
        Failure::Gone
    }
}
