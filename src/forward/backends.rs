//! The runtimes behind the socket, each by name: one without `backends`, several with it.

use crate::backend::Backend;
use crate::grpc::Rpc;
use std::sync::Arc;

#[derive(Clone)]
/// One runtime among those behind the socket: its runtime endpoint, and its image endpoint
/// (the same backend unless it has its own).
pub struct Routed {
    /// Empty for the one `backend`.
    pub name: String,
    pub runtime: Arc<Backend>,
    pub image: Arc<Backend>,
}

impl Routed {
    pub(super) fn backend_for(&self, rpc: Rpc) -> &Arc<Backend> {
        if rpc.info.service == "ImageService" {
            &self.image
        } else {
            &self.runtime
        }
    }
}
