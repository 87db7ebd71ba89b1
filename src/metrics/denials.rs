//! Calls denied by a socket's policy (`endpoints`) or by `listen.mutating`: by socket and RPC, so
//! that an alert can tell an agent probing what it may not do from a policy that is too tight.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DenialLabels {
    socket: String,
    rpc: String,
}

#[derive(Debug, Default)]
pub(super) struct Denials(Family<DenialLabels, Counter>);

impl Denials {
    /// Registers `cri_bridge_denials_total` in `registry` (the `cri_bridge` one).
    pub(super) fn register(registry: &mut Registry) -> Denials {
        let denials = Denials::default();
        registry.register(
            "denials",
            "Calls denied by their socket's policy (endpoints) or by listen.mutating, by socket and RPC",
            denials.0.clone(),
        );
        denials
    }

    pub(super) fn count(&self, socket: &str, rpc: &str) {
        self.0.get_or_create(&DenialLabels { socket: socket.to_string(), rpc: rpc.to_string() }).inc();
    }
}
