//! The calls about the runtime itself: Version, Status, UpdateRuntimeConfig and RuntimeConfig.

use super::state::{MemoryRuntime, RUNTIME_NAME};
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
        let (runtime_name, runtime_version) =
            self.state().identity.clone().unwrap_or_else(|| (RUNTIME_NAME.into(), env!("CARGO_PKG_VERSION").into()));
        v1::VersionResponse {
            version: "0.1.0".into(),
            runtime_name,
            runtime_version,
            runtime_api_version: served.as_str().into(),
        }
    }

    pub fn status(&self, req: v1::StatusRequest) -> Result<v1::StatusResponse, Status> {
        let condition = |kind: &str| v1::RuntimeCondition { r#type: kind.into(), status: true, ..Default::default() };
        let mut info = HashMap::new();
        if req.verbose {
            let state = self.state();
            let mut config = serde_json::json!({ "podCIDR": state.pod_cidr });
            // The CRI plugin's config as containerd 1.5–1.7 print it: the default runtime and
            // its runc options, where the cgroup driver is read from.
            if let Some(driver) = state.cgroup_driver {
                let key = state.systemd_cgroup_key.as_deref().unwrap_or("SystemdCgroup");
                let mut options = serde_json::Map::new();
                options.insert(key.to_string(), (driver == v1::CgroupDriver::Systemd).into());
                let runc = serde_json::json!({ "runtimeType": "io.containerd.runc.v2", "options": options });
                config["containerd"] =
                    serde_json::json!({ "defaultRuntimeName": "runc", "runtimes": { "runc": runc } });
            }
            let config = config.to_string();
            info.insert("config".to_string(), config);
        }
        let handlers =
            self.state().handlers.clone().unwrap_or_else(|| vec![("".into(), true, true), ("runc".into(), true, true)]);
        let runtime_handlers = handlers
            .into_iter()
            .map(|(name, user_namespaces, recursive_read_only_mounts)| v1::RuntimeHandler {
                name,
                features: Some(v1::RuntimeHandlerFeatures { recursive_read_only_mounts, user_namespaces }),
            })
            .collect();
        Ok(v1::StatusResponse {
            status: Some(v1::RuntimeStatus { conditions: vec![condition("RuntimeReady"), condition("NetworkReady")] }),
            info,
            runtime_handlers,
            features: Some(v1::RuntimeFeatures {
                supplemental_groups_policy: true,
                user_namespaces_host_network: false,
                mount_options: true,
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
        // grpc-go's words for a method the service has but does not implement.
        let driver =
            self.state().cgroup_driver.ok_or_else(|| Status::unimplemented("method RuntimeConfig not implemented"))?;
        let linux = v1::LinuxRuntimeConfiguration { cgroup_driver: driver as i32 };
        Ok(v1::RuntimeConfigResponse { linux: Some(linux) })
    }
}
