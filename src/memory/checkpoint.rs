//! Pod checkpoints (CRI v1 at 1.37): `CheckpointPod` checks what it is asked to save, and
//! `RestorePod` runs the pod and creates its containers from the configs it is given, as a
//! runtime restoring a checkpoint would (the in-memory runtime keeps no checkpoint contents).

use super::state::MemoryRuntime;
use super::support::missing;
use crate::api::v1;
use tonic::Status;

impl MemoryRuntime {
    pub fn checkpoint_pod(&self, req: v1::CheckpointPodRequest) -> Result<v1::CheckpointPodResponse, Status> {
        if req.output_path.is_empty() {
            return Err(missing("output_path"));
        }
        let state = self.state();
        state.sandbox(&req.pod_sandbox_id)?;
        for id in &req.container_ids {
            state.container(id)?;
        }
        Ok(v1::CheckpointPodResponse {})
    }

    pub fn restore_pod(&self, req: v1::RestorePodRequest) -> Result<v1::RestorePodResponse, Status> {
        if req.checkpoint_path.is_empty() {
            return Err(missing("checkpoint_path"));
        }
        let config = req.config.ok_or_else(|| missing("config"))?;
        let sandbox = v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: req.runtime_handler };
        let pod_sandbox_id = self.run_pod_sandbox(sandbox)?.pod_sandbox_id;
        let mut restored_containers = Vec::new();
        for container in req.container_configs {
            let name = container.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
            let create = v1::CreateContainerRequest {
                pod_sandbox_id: pod_sandbox_id.clone(),
                config: Some(container),
                sandbox_config: Some(config.clone()),
            };
            let container_id = self.create_container(create)?.container_id;
            restored_containers.push(v1::RestoredContainer { name, container_id });
        }
        Ok(v1::RestorePodResponse { pod_sandbox_id, restored_containers })
    }
}
