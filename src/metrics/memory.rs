//! The memory the daemon may hold at most (`crate::relay::memory_ceiling`) beside what it holds
//! now (its resident set, read from `/proc/self/status` at each scrape), so that an alert can
//! compare the two on every node with its own limits.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Default)]
pub(super) struct Memory {
    ceiling: Gauge,
    resident: Gauge,
}

impl Memory {
    /// Registers `cri_bridge_memory_ceiling_bytes` in `registry` (the `cri_bridge` one) and
    /// `process_resident_memory_bytes` in `root`.
    pub(super) fn register(root: &mut Registry) -> Memory {
        let memory = Memory::default();
        root.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes (VmRSS), read at each scrape",
            memory.resident.clone(),
        );
        root.sub_registry_with_prefix("cri_bridge").register(
            "memory_ceiling_bytes",
            "The most memory the daemon may hold with its limits (docs/install.md: limits.buffer_mib, each connection's \
             fixed windows, each conversion thread's working memory, the daemon itself)",
            memory.ceiling.clone(),
        );
        memory
    }

    pub(super) fn set_ceiling(&self, bytes: usize) {
        self.ceiling.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Reads the resident set now.
    pub(super) fn refresh(&self) {
        if let Some(kib) = std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(vm_rss_kib) {
            self.resident.set(i64::try_from(kib.saturating_mul(1024)).unwrap_or(i64::MAX));
        }
    }
}

/// `VmRSS:  12345 kB` in a `/proc/<pid>/status`.
fn vm_rss_kib(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_resident_set_is_read_from_proc() {
        assert_eq!(super::vm_rss_kib("Name: x\nVmRSS:\t   8812 kB\nVmData: 1 kB\n"), Some(8812));
        assert_eq!(super::vm_rss_kib("Name: x\n"), None);
    }
}
