//! cri-bridge's own questions, answered on the CRI socket beside the CRI services: the bridge
//! and the runtime behind it (`cri-bridge probe`), and who has called (`cri-bridge callers`).
//!
//! They are gRPC unary calls whose one message is JSON. A runtime asked the same answers
//! `UNIMPLEMENTED`, which is how `cri-bridge probe` tells a bridge from a runtime. They are
//! looked up only when a path is not a CRI method, so CRI calls do not pay for them; and they
//! are as privileged as the socket (anyone who may call CRI may read them).

use crate::backend::Backend;
use crate::callers::Callers;
use crate::forward::{OwnCalls, Routed};
use crate::version::CriVersion;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub const STATUS_PATH: &str = "/cri_bridge.Bridge/Status";
pub const CALLERS_PATH: &str = "/cri_bridge.Bridge/Callers";

/// The answer to [`STATUS_PATH`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BridgeStatus {
    /// cri-bridge's own version.
    pub bridge_version: String,
    pub pid: u32,
    /// Seconds since the epoch.
    pub serving_since: u64,
    /// The CRI versions the socket serves.
    pub versions: Vec<String>,
    /// Each backend's runtime endpoint, then its image endpoint when it is separate.
    pub backends: Vec<BackendStatus>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BackendStatus {
    /// Its name among several backends (`backends`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `runtime` or `images`.
    pub role: String,
    pub endpoint: String,
    pub up: bool,
    /// Seconds since the epoch when `up` last changed (or cri-bridge started).
    pub since: u64,
    /// The CRI version spoken to it (`None` until found).
    pub version: Option<String>,
    /// `backend.version` when pinned.
    pub pinned: Option<String>,
    /// The Kubernetes minor whose schema it decodes (`1.27`).
    pub revision: Option<String>,
    pub runtime_name: Option<String>,
    pub runtime_version: Option<String>,
    /// Who answers the kubelet's `RuntimeConfig` (runtime endpoint only).
    #[serde(default)]
    pub runtime_config: Option<String>,
}

/// cri-bridge's own answers: the forwarder asks it (as [`OwnCalls`]) for any path that is no CRI
/// method.
pub struct Control {
    backends: Vec<Routed>,
    versions: Vec<String>,
    callers: Arc<Callers>,
    started: SystemTime,
}

fn seconds(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Control {
    pub fn new(backends: Vec<Routed>, served: &[CriVersion], callers: Arc<Callers>) -> Self {
        let versions = served.iter().map(|v| v.as_str().to_string()).collect();
        Control { backends, versions, callers, started: SystemTime::now() }
    }

    fn status(&self) -> BridgeStatus {
        let mut backends = Vec::new();
        for routed in &self.backends {
            backends.push(describe("runtime", &routed.runtime));
            if !Arc::ptr_eq(&routed.runtime, &routed.image) {
                backends.push(describe("images", &routed.image));
            }
        }
        BridgeStatus {
            bridge_version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            serving_since: seconds(self.started),
            versions: self.versions.clone(),
            backends,
        }
    }
}

impl OwnCalls for Control {
    fn answer(&self, path: &str) -> Option<Vec<u8>> {
        let json = match path {
            STATUS_PATH => serde_json::to_vec(&self.status()),
            CALLERS_PATH => serde_json::to_vec(&self.callers.report()),
            _ => return None,
        };
        Some(json.expect("serializing plain data"))
    }
}

fn describe(role: &str, backend: &Backend) -> BackendStatus {
    let health = backend.health();
    let found = backend.discovered();
    let runtime = found.as_ref().map(|f| &f.profile.runtime);
    BackendStatus {
        name: Some(backend.name.clone()).filter(|n| !n.is_empty()),
        role: role.to_string(),
        endpoint: backend.endpoint.clone(),
        up: health.up,
        since: seconds(health.since),
        version: found.as_ref().map(|f| f.version.as_str().to_string()),
        pinned: backend.pins().version.map(|v| v.as_str().to_string()),
        revision: runtime.map(|r| format!("1.{}", r.minor)),
        runtime_name: runtime.map(|r| r.runtime_name.clone()).filter(|n| !n.is_empty()),
        runtime_version: runtime.map(|r| r.runtime_version.clone()).filter(|v| !v.is_empty()),
        runtime_config: runtime.filter(|_| role == "runtime").map(|r| match r.has_runtime_config() {
            true => "answered by the runtime".to_string(),
            false => crate::runtime_config::who_answers(&r.cgroup_driver),
        }),
    }
}
