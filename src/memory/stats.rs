//! Stats and metrics: plausible numbers for each container, summed for its pod.

use super::state::{Container, MemoryRuntime, Sandbox, State, FS_MOUNTPOINT};
use super::support::{now_nanos, seed, u64_value};
use crate::api::v1;
use tonic::Status;

impl MemoryRuntime {
    pub fn container_stats(&self, req: v1::ContainerStatsRequest) -> Result<v1::ContainerStatsResponse, Status> {
        let stats = self.state().container(&req.container_id)?.stats(now_nanos());
        Ok(v1::ContainerStatsResponse { stats: Some(stats) })
    }

    pub fn pod_sandbox_stats(&self, req: v1::PodSandboxStatsRequest) -> Result<v1::PodSandboxStatsResponse, Status> {
        let state = self.state();
        let stats = state.sandbox_stats(state.sandbox(&req.pod_sandbox_id)?, now_nanos());
        Ok(v1::PodSandboxStatsResponse { stats: Some(stats) })
    }

    pub fn list_metric_descriptors(
        &self,
        _req: v1::ListMetricDescriptorsRequest,
    ) -> Result<v1::ListMetricDescriptorsResponse, Status> {
        let descriptor = |name: &str, help: &str, label_keys: &[&str]| v1::MetricDescriptor {
            name: name.into(),
            help: help.into(),
            label_keys: label_keys.iter().map(|k| k.to_string()).collect(),
        };
        Ok(v1::ListMetricDescriptorsResponse {
            descriptors: vec![
                descriptor("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", &[]),
                descriptor("container_memory_working_set_bytes", "Current working set in bytes.", &[]),
                descriptor(
                    "container_network_receive_bytes_total",
                    "Cumulative count of bytes received.",
                    &["interface"],
                ),
                descriptor(
                    "container_network_transmit_bytes_total",
                    "Cumulative count of bytes transmitted.",
                    &["interface"],
                ),
            ],
        })
    }

    pub fn list_pod_sandbox_metrics(
        &self,
        _req: v1::ListPodSandboxMetricsRequest,
    ) -> Result<v1::ListPodSandboxMetricsResponse, Status> {
        let now = now_nanos();
        let state = self.state();
        let metric = |name: &str, kind: v1::MetricType, labels: &[&str], value: u64| v1::Metric {
            name: name.into(),
            timestamp: now,
            metric_type: kind as i32,
            label_values: labels.iter().map(|l| l.to_string()).collect(),
            value: Some(v1::UInt64Value { value }),
        };
        let pod_metrics = state
            .sandboxes
            .iter()
            .map(|sandbox| {
                let (rx, tx) = network_bytes(sandbox, now);
                let container_metrics = state
                    .containers_of(&sandbox.id)
                    .map(|c| {
                        let stats = c.stats(now);
                        let cpu = stats.cpu.and_then(|u| u.usage_core_nano_seconds).map_or(0, |v| v.value);
                        let memory = stats.memory.and_then(|m| m.working_set_bytes).map_or(0, |v| v.value);
                        v1::ContainerMetrics {
                            container_id: c.id.clone(),
                            metrics: vec![
                                metric(
                                    "container_cpu_usage_seconds_total",
                                    v1::MetricType::Counter,
                                    &[],
                                    cpu / 1_000_000_000,
                                ),
                                metric("container_memory_working_set_bytes", v1::MetricType::Gauge, &[], memory),
                            ],
                        }
                    })
                    .collect();
                v1::PodSandboxMetrics {
                    pod_sandbox_id: sandbox.id.clone(),
                    metrics: vec![
                        metric("container_network_receive_bytes_total", v1::MetricType::Counter, &["eth0"], rx),
                        metric("container_network_transmit_bytes_total", v1::MetricType::Counter, &["eth0"], tx),
                    ],
                    container_metrics,
                }
            })
            .collect();
        Ok(v1::ListPodSandboxMetricsResponse { pod_metrics })
    }
}

impl State {
    /// The pod's containers' stats, summed, plus the pause process and the pod's network.
    pub(super) fn sandbox_stats(&self, sandbox: &Sandbox, now: i64) -> v1::PodSandboxStats {
        let containers: Vec<v1::ContainerStats> = self.containers_of(&sandbox.id).map(|c| c.stats(now)).collect();
        let ready = sandbox.state == v1::PodSandboxState::SandboxReady;
        let sum = |get: fn(&v1::ContainerStats) -> Option<u64>| containers.iter().filter_map(get).sum::<u64>();
        let cpu_total = sum(|s| Some(s.cpu.as_ref()?.usage_core_nano_seconds?.value));
        let nano_cores = sum(|s| Some(s.cpu.as_ref()?.usage_nano_cores?.value));
        let pause_memory = if ready { 256 << 10 } else { 0 };
        let working_set = pause_memory + sum(|s| Some(s.memory.as_ref()?.working_set_bytes?.value));
        let processes = u64::from(ready)
            + containers
                .iter()
                .filter(|s| s.cpu.as_ref().is_some_and(|c| c.usage_nano_cores.is_some_and(|v| v.value > 0)))
                .count() as u64;
        let (rx, tx) = network_bytes(sandbox, now);
        let eth0 = v1::NetworkInterfaceUsage {
            name: "eth0".into(),
            rx_bytes: u64_value(rx),
            rx_errors: u64_value(0),
            tx_bytes: u64_value(tx),
            tx_errors: u64_value(0),
        };
        v1::PodSandboxStats {
            attributes: Some(v1::PodSandboxAttributes {
                id: sandbox.id.clone(),
                metadata: sandbox.config.metadata.clone(),
                labels: sandbox.config.labels.clone(),
                annotations: sandbox.config.annotations.clone(),
            }),
            linux: Some(v1::LinuxPodSandboxStats {
                cpu: Some(v1::CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: u64_value(cpu_total),
                    usage_nano_cores: u64_value(nano_cores),
                    psi: None,
                }),
                memory: Some(v1::MemoryUsage {
                    timestamp: now,
                    working_set_bytes: u64_value(working_set),
                    usage_bytes: u64_value(working_set + working_set / 4),
                    rss_bytes: u64_value(working_set / 2),
                    page_faults: u64_value(working_set / 4096),
                    major_page_faults: u64_value(0),
                    ..Default::default()
                }),
                network: Some(v1::NetworkUsage {
                    timestamp: now,
                    default_interface: Some(eth0.clone()),
                    interfaces: vec![eth0],
                }),
                process: Some(v1::ProcessUsage { timestamp: now, process_count: u64_value(processes) }),
                containers,
                io: None,
            }),
            windows: None,
        }
    }
}

impl Container {
    /// Plausible numbers: 1% of a core while running, a few MiB of memory, a small writable layer.
    pub(super) fn stats(&self, now: i64) -> v1::ContainerStats {
        let seed = seed(&self.id);
        let running = self.is_running();
        let ran_for = match self.state {
            v1::ContainerState::ContainerRunning => now - self.started_at,
            v1::ContainerState::ContainerExited => self.finished_at - self.started_at,
            _ => 0,
        };
        let ran_for = u64::try_from(ran_for).unwrap_or(0);
        let working_set = if running { (4 << 20) + (seed % 1024) * 4096 } else { 0 };
        let limit = self.resources.as_ref().and_then(|r| r.linux.as_ref()).map_or(0, |l| l.memory_limit_in_bytes);
        let available = u64::try_from(limit).ok().filter(|&l| l > 0).map(|l| l.saturating_sub(working_set));
        v1::ContainerStats {
            attributes: Some(v1::ContainerAttributes {
                id: self.id.clone(),
                metadata: self.config.metadata.clone(),
                labels: self.config.labels.clone(),
                annotations: self.config.annotations.clone(),
            }),
            cpu: Some(v1::CpuUsage {
                timestamp: now,
                usage_core_nano_seconds: u64_value(ran_for / 100),
                usage_nano_cores: u64_value(if running { 10_000_000 } else { 0 }),
                psi: None,
            }),
            memory: Some(v1::MemoryUsage {
                timestamp: now,
                working_set_bytes: u64_value(working_set),
                available_bytes: available.and_then(u64_value),
                usage_bytes: u64_value(working_set + working_set / 4),
                rss_bytes: u64_value(working_set / 2),
                page_faults: u64_value(working_set / 4096 + ran_for / 1_000_000_000),
                major_page_faults: u64_value(0),
                psi: None,
            }),
            writable_layer: Some(v1::FilesystemUsage {
                timestamp: now,
                fs_id: Some(v1::FilesystemIdentifier { mountpoint: FS_MOUNTPOINT.into() }),
                used_bytes: u64_value(4096 * (1 + seed % 64)),
                inodes_used: u64_value(1 + seed % 16),
            }),
            swap: None,
            io: None,
        }
    }
}

/// Received and transmitted bytes of the pod's eth0: grows with the pod's age.
fn network_bytes(sandbox: &Sandbox, now: i64) -> (u64, u64) {
    let age_seconds = u64::try_from(now - sandbox.created_at).unwrap_or(0) / 1_000_000_000;
    (1000 * (age_seconds + 1), 500 * (age_seconds + 1))
}
