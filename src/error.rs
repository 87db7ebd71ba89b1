//! The proxy's errors, and the one place where they become gRPC status.

use crate::convert::policy::Refusal;
use crate::version::CriVersion;
use tonic::{Code, Status};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The loss policy refused a request.
    #[error(transparent)]
    Refused(#[from] Refusal),

    /// The backend's version lacks the RPC (the kubelet falls back on exactly UNIMPLEMENTED).
    #[error("{rpc} is not available: the backend speaks CRI {backend}, which has no such RPC")]
    NotInBackendVersion { rpc: String, backend: CriVersion },

    /// The runtime's revision predates the RPC: it has no such method (UNIMPLEMENTED, as it
    /// would answer itself).
    #[error("{rpc} is not available: the runtime speaks {runtime}, which predates it (Kubernetes 1.{since})")]
    NotInRuntimeRevision { rpc: String, since: u8, runtime: String },

    /// `RuntimeConfig` for a runtime that lacks it, whose cgroup driver is unknown
    /// (UNIMPLEMENTED: kubelets 1.34–1.37 fall back on exactly that code).
    #[error(
        "{missing}; cri-bridge answers it for such a runtime only with the cgroup driver the runtime uses, which is \
         unknown ({why}): set emulate.runtime_config.cgroup_driver"
    )]
    DriverUnknown { missing: Box<Error>, why: String },

    /// The caller's message does not decode against its version's schema.
    #[error("{rpc}: the request is not a valid CRI {version} {message}: {detail}")]
    BadRequest { rpc: String, version: CriVersion, message: &'static str, detail: String },

    /// The backend's answer does not decode against its version's schema.
    #[error("{rpc}: the backend's answer is not a valid CRI {version} {message}: {detail}")]
    BadResponse { rpc: String, version: CriVersion, message: &'static str, detail: String },

    /// The backend could not be reached.
    #[error("the container runtime at {endpoint} is unreachable: {detail}")]
    Unreachable { endpoint: String, detail: String },

    /// The caller took none of the answer for `limits.stalled_caller_seconds`.
    #[error(
        "{rpc}: the caller took none of the answer for {after:?} (limits.stalled_caller_seconds): the call was \
         ended and the runtime's stream cancelled"
    )]
    CallerStalled { rpc: String, after: std::time::Duration },

    /// A call waited too long for room in the memory held for clients.
    #[error(
        "{rpc}: no room within {waited:?} in the memory held for clients (limits.buffer_per_connection_mib, \
         limits.buffer_mib)"
    )]
    BufferFull { rpc: String, waited: std::time::Duration },

    /// A call that held the shared bound, beyond its connection's share, while waiting on its
    /// own client, ended so that a client waiting below its share is served.
    #[error(
        "{rpc}: ended while waiting on this client: its connection held more than its share of the memory held for \
         clients (limits.buffer_mib) while another client waited"
    )]
    BufferReclaimed { rpc: String },

    /// A call in a CRI version being retired, during its brownout (`brownout`).
    #[error(
        "{rpc}: CRI {version} is browned out on this node ({how}: brownout.{version} in cri-bridge's config): the \
         runtime is moving to a newer CRI; move this client off {version} (`cri-bridge callers` lists who still uses it)"
    )]
    BrownedOut { rpc: String, version: crate::version::CriVersion, how: String },

    /// A call its socket's rules do not allow (`endpoints`, `listen.mutating`).
    #[error("{rpc}: denied on {socket} (policy {policy}): {why}")]
    Denied { rpc: String, socket: String, policy: &'static str, why: String },

    /// A message whose conversion would allocate more than a connection may hold.
    #[error(
        "{rpc}: converting the {what} would take about {estimate} bytes of memory, more than a connection may hold \
         ({limit} bytes, limits.buffer_per_connection_mib)"
    )]
    TooCostly { rpc: String, what: &'static str, estimate: usize, limit: usize },

    /// A conversion run off the one thread ended without a result (it panicked, or the daemon is
    /// stopping).
    #[error("{rpc}: converting the message failed: {detail}")]
    ConversionAborted { rpc: String, detail: String },

    /// A new sandbox on a RuntimeClass handler the routing table does not name (refused as a
    /// runtime refuses a handler it has no runtime for, with UNKNOWN; never sent to the default).
    #[error("no runtime for {handler:?} is configured: cri-bridge routes the handlers {routed} (routes.handlers)")]
    NoRoute { handler: String, routed: String },

    /// Among several backends, one that did not say whether it holds the id a call names (any
    /// answer but its own "not here", `routing::holds`): the call is not sent elsewhere on a
    /// guess, since a Stop or Remove answered "not found" by a runtime that never held the id
    /// reads as done.
    #[error(
        "{rpc}: {backend} cannot say whether it holds {id} ({code}: {detail}); it may hold it, so the call goes \
         nowhere else"
    )]
    OwnerUnknown { rpc: String, backend: String, id: String, code: &'static str, detail: String },

    /// The backend answers, but serves none of the CRI versions.
    #[error(
        "the container runtime at {endpoint} answers UNIMPLEMENTED for CRI v1, v1alpha2 and v1alpha1: \
         it serves no CRI (for containerd: is the CRI plugin disabled in its config?)"
    )]
    NoCri { endpoint: String },
}

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        let code = match &error {
            Error::Refused(_)
            | Error::NotInBackendVersion { .. }
            | Error::NotInRuntimeRevision { .. }
            | Error::DriverUnknown { .. }
            | Error::BrownedOut { .. } => Code::Unimplemented,
            Error::BadRequest { .. } => Code::InvalidArgument,
            Error::BadResponse { .. } | Error::ConversionAborted { .. } => Code::Internal,
            Error::CallerStalled { .. }
            | Error::BufferFull { .. }
            | Error::BufferReclaimed { .. }
            | Error::TooCostly { .. } => Code::ResourceExhausted,
            Error::Unreachable { .. } | Error::NoCri { .. } | Error::OwnerUnknown { .. } => Code::Unavailable,
            Error::Denied { .. } => Code::PermissionDenied,
            Error::NoRoute { .. } => Code::Unknown,
        };
        Status::new(code, error.to_string())
    }
}

/// The canonical name of a gRPC status code, as in the gRPC specification.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
