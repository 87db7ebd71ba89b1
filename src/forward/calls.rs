//! A client connection as the forwarder knows it, made when the relay accepts one on a socket.

use super::{Access, Client, Forwarder, Scoped, Session};
use bytes::Bytes;
use std::sync::Arc;

impl Forwarder {
    /// Who is at the other end (read once per connection), its own runtime connections, its
    /// share of the memory bound (the front door's header blocks take from it too), and the
    /// rules of the socket it came on.
    pub(super) fn connect(
        &self,
        stream: &tokio::net::UnixStream,
        access: Arc<Access>,
    ) -> (Arc<Client>, crate::budget::Charge) {
        let (caller, identity) = self.observer.connected(stream);
        let session = Session::new(&self.backends, self.budget.connection(), self.offload.lane());
        let held = session.budget.charge();
        (Arc::new(Client { caller, identity, access, session }), held)
    }
}

impl crate::relay::serve::Calls for Scoped {
    type Connection = Client;

    /// Who is at the other end (read once per connection), its own runtime connections, and
    /// its share of the memory bound (the front door's header blocks take from it too).
    fn connected(&self, stream: &tokio::net::UnixStream) -> (Arc<Client>, crate::budget::Charge) {
        self.forwarder.connect(stream, self.access.clone())
    }

    fn call(
        self: Arc<Self>,
        client: Arc<Client>,
        request: http::Request<h2::RecvStream>,
        respond: h2::server::SendResponse<Bytes>,
        arrival: crate::relay::serve::Arrival,
    ) -> impl std::future::Future<Output = bool> + Send {
        self.forwarder.clone().serve_call(client, request, respond, arrival)
    }

    fn refused(&self, limit: &'static str) {
        self.forwarder.observer.refused_connection(limit);
    }
}
