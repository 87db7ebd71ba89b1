//! Several backends behind one socket (`backends`): calls, health and sandboxes per backend, by
//! its name, so that an operator moving a node between runtimes sees each one's share and when
//! the old one is empty.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    backend: String,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: String,
}

#[derive(Debug, Default)]
pub(super) struct Routed {
    calls: Family<CallLabels, Counter>,
    up: Family<BackendLabels, Gauge>,
    sandboxes: Family<BackendLabels, Gauge>,
}

/// One backend as a scrape sees it.
pub struct RoutedBackend {
    pub name: String,
    pub up: bool,
    /// The sandboxes it listed last.
    pub sandboxes: usize,
}

impl Routed {
    /// Registers `cri_bridge_routed_calls_total`, `cri_bridge_routed_backend_up` and
    /// `cri_bridge_routed_sandboxes` in `registry` (the `cri_bridge` one).
    pub(super) fn register(registry: &mut Registry) -> Routed {
        let routed = Routed::default();
        registry.register(
            "routed_calls",
            "Calls sent to each of several backends (backends), by backend and the call's status code",
            routed.calls.clone(),
        );
        registry.register(
            "routed_backend_up",
            "1 when the backend's runtime answered its last probe or call, else 0 (backends)",
            routed.up.clone(),
        );
        registry.register(
            "routed_sandboxes",
            "The sandboxes each backend listed last (backends): 0 on the old runtime means it can be removed",
            routed.sandboxes.clone(),
        );
        routed
    }

    pub(super) fn called(&self, backend: &str, code: &'static str) {
        self.calls.get_or_create(&CallLabels { backend: backend.to_string(), code }).inc();
    }

    pub(super) fn refresh(&self, backends: &[RoutedBackend]) {
        for backend in backends {
            let labels = BackendLabels { backend: backend.name.clone() };
            self.up.get_or_create(&labels).set(i64::from(backend.up));
            self.sandboxes.get_or_create(&labels).set(i64::try_from(backend.sandboxes).unwrap_or(i64::MAX));
        }
    }
}
