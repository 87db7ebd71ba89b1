//! `backends` and `routes`: several runtimes behind one socket (issue 42). Each backend is a
//! socket with its own detected CRI version; `routes` says where a new sandbox goes, by its
//! RuntimeClass handler. Without `backends`, the `backend` section is the one backend, as ever.

use super::backend::{parse_backend_version, parse_revision, Endpoint};
use super::error::invalid;
use super::ConfigError;
use crate::version::CriVersion;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BackendEntryFile {
    name: Option<String>,
    endpoint: Option<String>,
    image_endpoint: Option<String>,
    version: Option<String>,
    revision: Option<String>,
    image_revision: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RoutesFile {
    default: Option<String>,
    #[serde(default)]
    handlers: BTreeMap<String, HandlerRouteFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HandlerRouteFile {
    backend: Option<String>,
    /// The handler the sandbox gets on its backend; the same name when absent.
    handler: Option<String>,
}

/// One backend of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedBackend {
    pub name: String,
    pub endpoint: Endpoint,
    pub image_endpoint: Option<Endpoint>,
    /// `None`: discover.
    pub version: Option<CriVersion>,
    pub revision: Option<u8>,
    pub image_revision: Option<u8>,
}

/// A RuntimeClass handler's route: the backend its sandboxes run on, and the handler they get
/// there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerRoute {
    pub handler: String,
    pub backend: usize,
    pub as_handler: String,
}

/// Several backends and the routing table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    pub backends: Vec<NamedBackend>,
    /// Where sandboxes whose handler is `""` go, and what answers for the node.
    pub default: usize,
    pub handlers: Vec<HandlerRoute>,
}

impl Routing {
    /// The backend and the handler for a sandbox asked for on `handler`; `None`: no route.
    pub fn route(&self, handler: &str) -> Option<(usize, &str)> {
        if handler.is_empty() {
            return Some((self.default, ""));
        }
        self.handlers.iter().find(|r| r.handler == handler).map(|r| (r.backend, r.as_handler.as_str()))
    }

    pub fn names(&self) -> Vec<&str> {
        self.backends.iter().map(|b| b.name.as_str()).collect()
    }

    /// The routes by backend name (the default's, then each handler's backend and handler), so
    /// that two configs compare whatever the order of their backends.
    pub fn routes_by_name(&self) -> (&str, Vec<(&str, &str, &str)>) {
        let name = |index: usize| self.backends[index].name.as_str();
        let handlers = self.handlers.iter().map(|r| (r.handler.as_str(), name(r.backend), r.as_handler.as_str()));
        (name(self.default), handlers.collect())
    }
}

/// The config keys that differ between two routings (`None`: the one `backend` section):
/// `backends` when the backends do, `routes` when where a sandbox goes does.
pub fn changed_keys(old: Option<&Routing>, new: Option<&Routing>) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if old.map(|r| &r.backends) != new.map(|r| &r.backends) {
        keys.push("backends");
    }
    if old.map(Routing::routes_by_name) != new.map(Routing::routes_by_name) {
        keys.push("routes");
    }
    keys
}

/// A backend's name: what logs, errors, metrics and `cri-bridge backends` call it.
fn check_name(name: &str) -> Result<(), ConfigError> {
    let fits = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    if name.is_empty() || name.len() > 63 || !name.chars().all(fits) {
        return Err(invalid("backends.name", format!("{name:?} is not 1 to 63 of a-z, 0-9, - and _")));
    }
    Ok(())
}

pub(super) fn read_routing(
    backends: Option<Vec<BackendEntryFile>>,
    routes: Option<RoutesFile>,
) -> Result<Option<Routing>, ConfigError> {
    let Some(entries) = backends else {
        if routes.is_some() {
            return Err(invalid("routes", "routes need `backends` (with one `backend`, every sandbox goes to it)"));
        }
        return Ok(None);
    };
    if entries.is_empty() {
        return Err(invalid("backends", "lists no backend"));
    }
    let mut read = Vec::new();
    for entry in entries {
        let name = entry.name.ok_or_else(|| invalid("backends.name", "every backend needs a name"))?;
        check_name(&name)?;
        if read.iter().any(|b: &NamedBackend| b.name == name) {
            return Err(invalid("backends.name", format!("{name:?} is named twice")));
        }
        let endpoint =
            entry.endpoint.ok_or_else(|| invalid("backends.endpoint", format!("backend {name:?} has none")))?;
        let endpoint = Endpoint::parse("backends.endpoint", &endpoint)?;
        let image_endpoint =
            entry.image_endpoint.map(|e| Endpoint::parse("backends.image_endpoint", &e)).transpose()?;
        if image_endpoint == Some(Endpoint::Memory) {
            return Err(invalid("backends.image_endpoint", format!("backend {name:?}: `memory` serves images itself")));
        }
        let version = match entry.version {
            Some(version) => parse_backend_version("backends.version", &version)?,
            None => None,
        };
        let revision = entry.revision.map(|r| parse_revision("backends.revision", &r)).transpose()?;
        let image_revision = entry.image_revision.map(|r| parse_revision("backends.image_revision", &r)).transpose()?;
        let taken = |e: &Endpoint| e != &Endpoint::Memory && read.iter().any(|b: &NamedBackend| &b.endpoint == e);
        if taken(&endpoint) {
            return Err(invalid("backends.endpoint", format!("{endpoint} is the endpoint of two backends")));
        }
        read.push(NamedBackend { name, endpoint, image_endpoint, version, revision, image_revision });
    }
    let routes = routes.unwrap_or_default();
    let names = read.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", ");
    let find = |name: &str| {
        read.iter()
            .position(|b| b.name == name)
            .ok_or_else(|| format!("no backend is named {name:?} (backends: {names})"))
    };
    let default = match (&routes.default, read.len()) {
        (Some(name), _) => find(name).map_err(|e| invalid("routes.default", e))?,
        (None, 1) => 0,
        (None, _) => {
            return Err(invalid("routes.default", format!("name the backend for sandboxes of no handler ({names})")))
        }
    };
    let mut handlers = Vec::new();
    for (handler, route) in routes.handlers {
        if handler.is_empty() {
            return Err(invalid("routes.handlers", "the handler \"\" is routes.default"));
        }
        let backend =
            route.backend.ok_or_else(|| invalid("routes.handlers", format!("handler {handler:?} names no backend")))?;
        let backend = find(&backend).map_err(|e| invalid("routes.handlers", format!("handler {handler:?}: {e}")))?;
        let as_handler = route.handler.unwrap_or_else(|| handler.clone());
        handlers.push(HandlerRoute { handler, backend, as_handler });
    }
    Ok(Some(Routing { backends: read, default, handlers }))
}
