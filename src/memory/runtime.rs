//! The calls about the runtime itself: Version, Status, UpdateRuntimeConfig and RuntimeConfig.

use super::{json_string, MemoryRuntime, RUNTIME_NAME};
use crate::api::v1;
use crate::version::CriVersion;
use std::collections::HashMap;
use tonic::Status;

impl MemoryRuntime {
    /// Version, answered as v1; over the wire `runtime_api_version` is the version served.
    pub fn version(&self, req: v1::VersionRequest) -> Result<v1::VersionResponse, Status> {
        Ok(self.version_as(CriVersion::V1, req))
    }

    pub(super) fn version_as(&self, served: CriVersion, _req: v1::VersionRequest) -> v1::VersionResponse {
        v1::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: served.as_str().into(),
        }
    }

    pub fn status(&self, req: v1::StatusRequest) -> Result<v1::StatusResponse, Status> {
        let condition = |kind: &str| v1::RuntimeCondition { r#type: kind.into(), status: true, ..Default::default() };
        let mut info = HashMap::new();
        if req.verbose {
            let config = format!("{{\"podCIDR\":{}}}", json_string(&self.state().pod_cidr));
            info.insert("config".to_string(), config);
        }
        let features = v1::RuntimeHandlerFeatures { recursive_read_only_mounts: true, user_namespaces: true };
        let runtime_handlers = ["", "runc"]
            .into_iter()
            .map(|name| v1::RuntimeHandler { name: name.into(), features: Some(features) })
            .collect();
        Ok(v1::StatusResponse {
            status: Some(v1::RuntimeStatus { conditions: vec![condition("RuntimeReady"), condition("NetworkReady")] }),
            info,
            runtime_handlers,
            features: Some(v1::RuntimeFeatures {
                supplemental_groups_policy: true,
                user_namespaces_host_network: false,
            }),
        })
    }

    pub fn update_runtime_config(
        &self,
        req: v1::UpdateRuntimeConfigRequest,
    ) -> Result<v1::UpdateRuntimeConfigResponse, Status> {
        if let Some(network) = req.runtime_config.and_then(|c| c.network_config) {
            self.state().pod_cidr = network.pod_cidr;
        }
        Ok(v1::UpdateRuntimeConfigResponse {})
    }

    pub fn runtime_config(&self, _req: v1::RuntimeConfigRequest) -> Result<v1::RuntimeConfigResponse, Status> {
        let linux = v1::LinuxRuntimeConfiguration { cgroup_driver: v1::CgroupDriver::Systemd as i32 };
        Ok(v1::RuntimeConfigResponse { linux: Some(linux) })
    }
}
