//! Who holds each sandbox and container among several backends, as they last said (see
//! `router.rs`), and the routing table.

use crate::access::pod::Owner;
use crate::config::Routing;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Who holds what: by sandbox id, container id and pod UID, the backend's index.
#[derive(Default)]
pub(super) struct Owners {
    pub(super) sandboxes: HashMap<String, usize>,
    pub(super) containers: HashMap<String, usize>,
    pub(super) pods: HashMap<String, usize>,
}

pub(super) struct Router {
    pub(super) table: Routing,
    owners: Mutex<Owners>,
    /// Sandboxes each backend listed last (metrics).
    pub(super) sandboxes: Vec<AtomicUsize>,
}

impl Router {
    pub(super) fn new(table: Routing) -> Router {
        let sandboxes = table.backends.iter().map(|_| AtomicUsize::new(0)).collect();
        Router { table, owners: Mutex::new(Owners::default()), sandboxes }
    }

    pub(super) fn owners(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn known(&self, owner: &Owner) -> Option<usize> {
        let owners = self.owners();
        match owner {
            Owner::Sandbox(id) => owners.sandboxes.get(id).copied(),
            Owner::Container(id) => owners.containers.get(id).copied(),
            Owner::Nothing => None,
        }
    }

    pub(super) fn learn(&self, owner: &Owner, backend: usize) {
        let mut owners = self.owners();
        match owner {
            Owner::Sandbox(id) => owners.sandboxes.insert(id.clone(), backend),
            Owner::Container(id) => owners.containers.insert(id.clone(), backend),
            Owner::Nothing => None,
        };
    }

    /// The routed handlers, `""` (the default) first, for `Status.runtime_handlers`.
    pub(super) fn served(&self) -> Vec<crate::routing::merge::Served<'_>> {
        let default = crate::routing::merge::Served { name: "", backend: self.table.default, as_handler: "" };
        let routes = self.table.handlers.iter().map(|h| crate::routing::merge::Served {
            name: &h.handler,
            backend: h.backend,
            as_handler: &h.as_handler,
        });
        std::iter::once(default).chain(routes).collect()
    }

    /// The backends in the order answers merge: the default's first.
    pub(super) fn order(&self) -> Vec<usize> {
        let others = (0..self.table.backends.len()).filter(|&i| i != self.table.default);
        std::iter::once(self.table.default).chain(others).collect()
    }

    /// The sandboxes backend `index` listed last.
    pub fn sandboxes_of(&self, index: usize) -> usize {
        self.sandboxes.get(index).map_or(0, |n| n.load(Ordering::Relaxed))
    }
}
