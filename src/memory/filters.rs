//! The List* calls of pods, containers and their stats, filtered by ID, pod, state and labels.

use super::state::{Container, MemoryRuntime, Sandbox};
use super::support::now_nanos;
use crate::api::v1;
use std::collections::HashMap;
use tonic::Status;

impl MemoryRuntime {
    pub fn list_pod_sandbox(&self, req: v1::ListPodSandboxRequest) -> Result<v1::ListPodSandboxResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let items = self
            .state()
            .sandboxes
            .iter()
            .filter(|s| filter.id.is_empty() || s.id == filter.id)
            .filter(|s| filter.state.as_ref().is_none_or(|f| s.state as i32 == f.state))
            .filter(|s| labels_match(&s.config.labels, &filter.label_selector))
            .map(Sandbox::item)
            .collect();
        Ok(v1::ListPodSandboxResponse { items })
    }

    pub fn list_containers(&self, req: v1::ListContainersRequest) -> Result<v1::ListContainersResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let containers = self
            .state()
            .containers
            .iter()
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| filter.pod_sandbox_id.is_empty() || c.sandbox_id == filter.pod_sandbox_id)
            .filter(|c| filter.state.as_ref().is_none_or(|f| c.state as i32 == f.state))
            .filter(|c| labels_match(&c.config.labels, &filter.label_selector))
            .map(Container::item)
            .collect();
        Ok(v1::ListContainersResponse { containers })
    }

    pub fn list_container_stats(
        &self,
        req: v1::ListContainerStatsRequest,
    ) -> Result<v1::ListContainerStatsResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let now = now_nanos();
        let stats = self
            .state()
            .containers
            .iter()
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| filter.pod_sandbox_id.is_empty() || c.sandbox_id == filter.pod_sandbox_id)
            .filter(|c| labels_match(&c.config.labels, &filter.label_selector))
            .map(|c| c.stats(now))
            .collect();
        Ok(v1::ListContainerStatsResponse { stats })
    }

    pub fn list_pod_sandbox_stats(
        &self,
        req: v1::ListPodSandboxStatsRequest,
    ) -> Result<v1::ListPodSandboxStatsResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let now = now_nanos();
        let state = self.state();
        let stats = state
            .sandboxes
            .iter()
            .filter(|s| filter.id.is_empty() || s.id == filter.id)
            .filter(|s| labels_match(&s.config.labels, &filter.label_selector))
            .map(|s| state.sandbox_stats(s, now))
            .collect();
        Ok(v1::ListPodSandboxStatsResponse { stats })
    }
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(key, value)| labels.get(key) == Some(value))
}
