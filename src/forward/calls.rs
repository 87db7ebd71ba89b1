//! The relay hands the forwarder its connections and their calls.

use super::{Client, Forwarder, Session};
use bytes::Bytes;
use std::sync::Arc;

/// The relay hands the forwarder its connections and their calls.
impl crate::relay::serve::Calls for Forwarder {
    type Connection = Client;

    /// Who is at the other end (read once per connection), its own runtime connections, and
    /// its share of the memory bound (the front door's header blocks take from it too).
    fn connected(&self, stream: &tokio::net::UnixStream) -> (Arc<Client>, crate::budget::Charge) {
        let caller = self.observer.connected(stream);
        let session = Session::new(&self.runtime, &self.image, self.budget.connection(), self.offload.lane());
        let held = session.budget.charge();
        (Arc::new(Client { caller, session }), held)
    }

    fn call(
        self: Arc<Self>,
        client: Arc<Client>,
        request: http::Request<h2::RecvStream>,
        respond: h2::server::SendResponse<Bytes>,
    ) -> impl std::future::Future<Output = bool> + Send {
        self.serve_call(client, request, respond)
    }

    fn refused(&self, limit: &'static str) {
        self.observer.refused_connection(limit);
    }
}
