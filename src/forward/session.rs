//! What one client connection holds apart from every other: its own connections to the runtime
//! (and to a separate image endpoint), made on its first call, closed with it; and its share of
//! the memory bound (`crate::budget`).

use crate::budget::ConnectionBudget;
use crate::relay::upstream::Upstream;
use std::sync::Arc;

/// One client connection as the forwarder knows it: who is calling, and what it holds apart.
pub struct Client {
    pub caller: Arc<dyn super::ClientRecord>,
    /// Who the kernel says the caller is.
    pub identity: super::hooks::Identity,
    /// The socket it came on, and its rules.
    pub access: Arc<super::endpoint::Access>,
    pub session: Session,
}

pub struct Session {
    /// Per backend (in the forwarder's order): its runtime connection, and its image
    /// connection (`None` when images are served by the runtime's endpoint).
    upstreams: Vec<(Upstream, Option<Upstream>)>,
    pub budget: ConnectionBudget,
    /// The connection's place in the conversion queue.
    pub lane: super::offload::Lane,
}

impl Session {
    pub(super) fn new(
        backends: &[super::backends::Routed],
        budget: ConnectionBudget,
        lane: super::offload::Lane,
    ) -> Session {
        let upstreams = backends
            .iter()
            .map(|b| {
                let image = (!Arc::ptr_eq(&b.runtime, &b.image)).then(|| b.image.client_upstream());
                (b.runtime.client_upstream(), image)
            })
            .collect();
        Session { upstreams, budget, lane }
    }

    /// The connection a call of `service` to backend `target` goes on. (Connections are made
    /// on their first call: a backend a client never calls costs it nothing.)
    pub(super) fn upstream(&self, service: &str, target: usize) -> &Upstream {
        let (runtime, image) = &self.upstreams[target];
        match (image, service) {
            (Some(image), "ImageService") => image,
            _ => runtime,
        }
    }
}
