//! How the forwarder decides the streams of a spliced connection (`relay::splice`): a call in
//! the runtime's version that the runtime takes as it is goes through as frames; every other
//! call (another version, an RPC the runtime lacks, cri-bridge's own questions) through the
//! terminating path, as on an unspliced connection.
//!
//! The version and profile are the runtime's as discovered when the connection was spliced: a
//! runtime that restarts ends the splice's runtime connection, and with it the client's, whose
//! next connection is decided on a discovery made again.

use super::{Client, Forwarder, Method, EVENT_STATUS_SINCE};
use crate::backend::Discovered;
use crate::relay::splice::{RequestHead, Route, Router};
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Code, Status};

pub struct SpliceRouter {
    forwarder: Arc<Forwarder>,
    client: Arc<Client>,
    found: Discovered,
    /// `Backend::forgotten` when `found` was current: once it moves (an UNAVAILABLE answer, a
    /// reload, a lost connection), every call goes through the terminating path, which asks the
    /// runtime again.
    generation: u64,
}

/// One relayed call, counted from its start.
pub struct SplicedCall {
    method: Arc<Method>,
    started: Instant,
}

impl SpliceRouter {
    /// The router of `client`'s spliced connection, and the runtime's socket; `None` when the
    /// connection is not spliced: `splice` is off, images have an endpoint of their own (one
    /// client connection cannot be spliced to two), or the runtime cannot be asked now (the
    /// terminating path says why, call by call).
    pub async fn for_connection(
        forwarder: Arc<Forwarder>,
        client: Arc<Client>,
    ) -> Option<(std::path::PathBuf, SpliceRouter)> {
        if !forwarder.splice || !Arc::ptr_eq(&forwarder.runtime, &forwarder.image) {
            return None;
        }
        let generation = forwarder.runtime.forgotten();
        let found = forwarder.runtime.version().await.ok()?;
        let socket = forwarder.runtime.upstream().socket().to_path_buf();
        Some((socket, SpliceRouter { forwarder, client, found, generation }))
    }
}

impl Router for SpliceRouter {
    type Call = SplicedCall;

    fn route(&self, head: &RequestHead) -> Route<SplicedCall> {
        let Some(method) = self.forwarder.methods.get(head.path) else { return Route::Intercept };
        if self.forwarder.runtime.forgotten() != self.generation {
            return Route::Intercept;
        }
        let (rpc, found) = (method.rpc, &self.found);
        let plan = method.plan(found.version);
        let old_events = rpc.info.method == "GetContainerEvents" && found.profile.runtime.minor < EVENT_STATUS_SINCE;
        let as_it_is = plan.backend.is_some()
            && rpc.version == found.version
            && plan.request.is_identity()
            && plan.response.is_identity()
            && !found.profile.runtime.lacks_rpc(plan.since)
            && !old_events
            // A runtime may answer it UNIMPLEMENTED, which the terminating path answers for.
            && rpc.info.method != "RuntimeConfig";
        if !as_it_is {
            return Route::Intercept;
        }
        let caller = &self.client.caller;
        if !(head.own_call && caller.is_cri_bridge()) {
            caller.called(rpc.version);
        }
        self.forwarder.observer.call_began();
        Route::Relay {
            call: SplicedCall { method: method.clone(), started: Instant::now() },
            judge: plan.scan_passthrough,
        }
    }

    fn judge(&self, call: &SplicedCall, message: &[u8]) -> Result<(), Status> {
        let (rpc, found) = (call.method.rpc, &self.found);
        let plan = call.method.plan(found.version);
        let message = bytes::Bytes::copy_from_slice(message);
        match self.forwarder.convert_request(rpc, plan, found, &message) {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err(Status::internal(format!("{}: a passthrough request was converted", rpc.name()))),
            Err(error) => Err(error.into()),
        }
    }

    fn ended(&self, call: SplicedCall, code: Code) {
        let observer = &self.forwarder.observer;
        observer.answered(Some(call.method.rpc), Some(self.found.version), code, call.started.elapsed());
        observer.call_ended();
        if code == Code::Unavailable {
            self.forwarder.runtime.forget();
        }
    }

    fn runtime_lost(&self, detail: &str) -> Status {
        let runtime = &self.forwarder.runtime;
        runtime.forget();
        crate::error::Error::Unreachable { endpoint: runtime.endpoint.clone(), detail: detail.to_string() }.into()
    }

    fn stalled(&self, call: &SplicedCall, after: std::time::Duration) -> Status {
        crate::error::Error::CallerStalled { rpc: call.method.rpc.name(), after }.into()
    }

    fn request_name(&self, call: &SplicedCall) -> String {
        format!("the {} request", call.method.rpc.name())
    }

    fn max_message_size(&self) -> usize {
        self.forwarder.max_message_size
    }
}
