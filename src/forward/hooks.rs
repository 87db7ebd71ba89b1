//! What the forwarding path asks of the layers above it, through two small interfaces, so that
//! it names none of them: who is told what happened to each connection and call ([`Observer`]:
//! the metrics and the callers report), and who answers cri-bridge's own questions on the CRI
//! socket ([`OwnCalls`]: `cri-bridge probe`, `cri-bridge callers`).

use crate::convert::policy::Side;
use crate::grpc::Rpc;
use crate::version::CriVersion;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

/// Told what happened, never asked to decide. Its methods run on the hot path: they count and
/// return.
pub trait Observer: Send + Sync {
    /// A client connected (read once per connection): the record told of its calls, and who
    /// the process at the other end is.
    fn connected(&self, stream: &tokio::net::UnixStream) -> (Arc<dyn ClientRecord>, Identity);
    /// A call was denied on `socket` by its policy (or `listen.mutating`).
    fn denied(&self, socket: &str, rpc: &str);
    /// A connection was refused at `limit`, the config key that bounds it.
    fn refused_connection(&self, limit: &'static str);
    /// A call began; [`Observer::call_ended`] follows however it ends (see [`InFlight`]).
    fn call_began(&self);
    fn call_ended(&self);
    /// A call was answered with `code` after `took`. `rpc` is `None` for a path that is no CRI
    /// method; `backend` is the version it was forwarded in, when it was.
    fn answered(&self, rpc: Option<Rpc>, backend: Option<CriVersion>, code: Code, took: Duration);
    /// A call went to backend `name` among several (each backend of a call made of all), and was
    /// answered `code`.
    fn routed(&self, name: &str, code: Code);
    /// One message was converted in `side`'s direction, taking `took`.
    fn converted(&self, side: Side, took: Duration);
}

/// Who is at the other end of a connection, as the kernel and `/proc` say: what access
/// decisions and the audit log use (never anything the caller sends).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Identity {
    pub pid: Option<u32>,
    pub uid: u32,
    pub gid: u32,
    /// The executable's path, escaped onto one line.
    pub exe: String,
    /// The pod and container whose cgroup the process runs in, if any.
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
}

/// One client connection as the observers record it.
pub trait ClientRecord: Send + Sync {
    /// It made a call in `version`.
    fn called(&self, version: CriVersion);
    /// Whether the process at the other end is cri-bridge itself (`cri-bridge probe`): its
    /// calls, marked as its own, are no caller to migrate.
    fn is_cri_bridge(&self) -> bool;
}

/// Answers cri-bridge's own questions, asked on the CRI socket beside the CRI services.
pub trait OwnCalls: Send + Sync {
    /// The JSON answer to `path`, when `path` is one of cri-bridge's own.
    fn answer(&self, path: &str) -> Option<Vec<u8>>;
}

/// A call in flight until this drops, whichever way the call ends (answered, failed, or its
/// future dropped when the caller went away).
pub(super) struct InFlight<'a>(&'a dyn Observer);

impl<'a> InFlight<'a> {
    pub(super) fn begin(observer: &'a dyn Observer) -> Self {
        observer.call_began();
        InFlight(observer)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.call_ended();
    }
}
