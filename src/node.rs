//! What this node is, where it decides whether a field the runtime would not act on changes
//! anything (`convert::scan`): whether it has swap. Read from `/proc/meminfo`, at most once a
//! second (`swapon` may add swap while cri-bridge runs), so a judged call pays a clock read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one reading is used.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// Whether the node has no swap (`SwapTotal: 0 kB`). Unknown (no `/proc/meminfo`, or no such
/// line) counts as having swap: the field is then judged as a loss.
pub fn without_swap() -> bool {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // Milliseconds since EPOCH of the last reading, plus one (0: never read).
    static READ_AT: AtomicU64 = AtomicU64::new(0);
    static WITHOUT: AtomicBool = AtomicBool::new(false);
    let now = EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1;
    let read_at = READ_AT.load(Ordering::Acquire);
    if read_at != 0 && now - read_at < FRESH_FOR.as_millis() as u64 {
        return WITHOUT.load(Ordering::Relaxed);
    }
    let without = std::fs::read_to_string("/proc/meminfo").ok().is_some_and(|m| swap_total_is_zero(&m));
    WITHOUT.store(without, Ordering::Relaxed);
    READ_AT.store(now, Ordering::Release);
    without
}

/// The `masked_paths` the kubelet sends on this node: its fixed list, then the
/// `thermal_throttle` directory of each possible CPU where it exists (as the kubelet finds
/// them, once).
pub fn kubelet_masked_paths() -> &'static [String] {
    static PATHS: OnceLock<Vec<String>> = OnceLock::new();
    PATHS.get_or_init(|| {
        let mut paths: Vec<String> =
            crate::access::create::KUBELET_MASKED_PATHS.iter().map(|p| p.to_string()).collect();
        let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
        for cpu in cpu_list(possible.trim()) {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/thermal_throttle");
            if std::path::Path::new(&path).exists() {
                paths.push(path);
            }
        }
        paths
    })
}

/// A kernel CPU list (`0-3,8`), as numbers.
fn cpu_list(list: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(first), Ok(last)) = (first.parse::<u32>(), last.parse::<u32>()) {
            cpus.extend(first..=last.min(first.saturating_add(4096)));
        }
    }
    cpus
}

/// Whether `/proc/meminfo`'s text says `SwapTotal: 0 kB`.
fn swap_total_is_zero(meminfo: &str) -> bool {
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("SwapTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .is_some_and(|kb| kb == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_total_is_read_from_meminfo() {
        assert!(swap_total_is_zero("MemTotal: 100 kB\nSwapTotal:        0 kB\nSwapFree: 0 kB\n"));
        assert!(!swap_total_is_zero("SwapTotal:  1048572 kB\n"));
        assert!(!swap_total_is_zero("MemTotal: 100 kB\n"), "no line: unknown, judged as swap");
        // The machine the tests run on: the answer matches its own meminfo.
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        assert_eq!(without_swap(), swap_total_is_zero(&meminfo));
    }
}
