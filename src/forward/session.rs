//! What one client connection holds apart from every other: its own connections to the runtime
//! (and to a separate image endpoint), made on its first call, closed with it; and its share of
//! the memory bound (`crate::budget`).

use crate::backend::Backend;
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
    runtime: Upstream,
    /// `None` when images are served by the runtime's endpoint.
    image: Option<Upstream>,
    pub budget: ConnectionBudget,
    /// The connection's place in the conversion queue.
    pub lane: super::offload::Lane,
}

impl Session {
    pub(super) fn new(
        runtime: &Arc<Backend>,
        image: &Arc<Backend>,
        budget: ConnectionBudget,
        lane: super::offload::Lane,
    ) -> Session {
        let image = (!Arc::ptr_eq(runtime, image)).then(|| image.client_upstream());
        Session { runtime: runtime.client_upstream(), image, budget, lane }
    }

    /// The connection a call of `service` goes on.
    pub(super) fn upstream(&self, service: &str) -> &Upstream {
        match (&self.image, service) {
            (Some(image), "ImageService") => image,
            _ => &self.runtime,
        }
    }
}
