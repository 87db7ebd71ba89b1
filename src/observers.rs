//! The forwarding path's observers, joined behind its one interface ([`Observer`]): the metrics
//! count each call and connection, and the callers report records who made them. They sit above
//! `forward`, which tells them what happened and never names them.

use crate::callers::{Caller, Callers, Peer};
use crate::convert::policy::Side;
use crate::forward::{ClientRecord, Identity, Observer};
use crate::grpc::Rpc;
use crate::metrics::Metrics;
use crate::version::CriVersion;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

pub struct Observers {
    pub metrics: Arc<Metrics>,
    pub callers: Arc<Callers>,
}

impl Observer for Observers {
    fn connected(&self, stream: &tokio::net::UnixStream) -> (Arc<dyn ClientRecord>, Identity) {
        let peer = Peer::of(stream);
        let identity = peer.who.clone();
        (self.callers.connected(peer), identity)
    }

    fn denied(&self, socket: &str, rpc: &str) {
        self.metrics.denied(socket, rpc);
    }

    fn refused_connection(&self, limit: &'static str) {
        self.metrics.refused_connection(limit);
    }

    fn call_began(&self) {
        self.metrics.call_began();
    }

    fn call_ended(&self) {
        self.metrics.call_ended();
    }

    fn answered(&self, rpc: Option<Rpc>, backend: Option<CriVersion>, code: Code, took: Duration) {
        self.metrics.answered(rpc, backend, code, took);
    }

    fn routed(&self, name: &str, code: Code) {
        self.metrics.routed_call(name, code);
    }

    fn converted(&self, side: Side, took: Duration) {
        self.metrics.converted(side, took);
    }
}

impl ClientRecord for Caller {
    fn called(&self, version: CriVersion) {
        Caller::called(self, version);
    }

    fn is_cri_bridge(&self) -> bool {
        self.peer.is_cri_bridge()
    }
}
