//! The series a scrape answers beside the counts: the process's start time, the build, and the
//! configured limits, written as the rest (HELP and TYPE lines, `# EOF` at the end).

use super::{unix_now, Metrics, RoutedBackend, Scrape};
use crate::budget::Budget;
use crate::callers::Callers;
use crate::config::Limits;
use std::sync::Arc;

/// What a scrape reads: `callers`, several backends as `routed` says, no endpoint.
fn reading(callers: Callers, routed: fn() -> Vec<RoutedBackend>) -> Scrape {
    Scrape {
        metrics: Arc::new(Metrics::default()),
        backends: Vec::new(),
        callers: Arc::new(callers),
        budget: Budget::new(1 << 20, 1 << 20),
        routed: Arc::new(routed),
    }
}

/// A scrape of `metrics` with no backend and no caller.
fn scrape(metrics: &Metrics) -> String {
    metrics.render(&reading(Callers::default(), Vec::new))
}

/// The value of the sample line written exactly as `series`.
fn value(text: &str, series: &str) -> f64 {
    let found: Vec<f64> = text
        .lines()
        .filter_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{series}: {v:?} is no number")))
        .collect();
    assert_eq!(found.len(), 1, "one sample {series} in:\n{text}");
    found[0]
}

/// The HELP and TYPE lines of `name` come before its samples, and the text ends with `# EOF`.
fn assert_described(text: &str, name: &str, kind: &str) {
    let help = text.find(&format!("# HELP {name} ")).unwrap_or_else(|| panic!("no HELP for {name}:\n{text}"));
    let typed = text.find(&format!("# TYPE {name} {kind}\n")).unwrap_or_else(|| panic!("{name} is no {kind}:\n{text}"));
    let sample = [format!("\n{name} "), format!("\n{name}{{")].iter().filter_map(|s| text.find(s.as_str())).min();
    assert!(sample.is_some_and(|at| help < typed && typed < at), "{name}: HELP, TYPE, then samples:\n{text}");
    assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends with # EOF:\n{text}");
}

#[test]
fn the_start_time_is_the_standard_series_taken_once_when_made() {
    let before = unix_now();
    let metrics = Metrics::default();
    let after = unix_now();
    let text = scrape(&metrics);
    assert_described(&text, "process_start_time_seconds", "gauge");
    let started = value(&text, "process_start_time_seconds");
    assert!(before <= started && started <= after, "{before} <= {started} <= {after}");
    // A fraction of a second, not whole seconds.
    assert!(text.lines().any(|l| l.starts_with("process_start_time_seconds ") && l.contains('.')), "{text}");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(value(&scrape(&metrics), "process_start_time_seconds"), started, "the same at every scrape");
    assert!(!text.contains("cri_bridge_process_start_time_seconds"), "the standard name, unprefixed:\n{text}");
}

#[test]
fn the_build_is_one_series_naming_the_version() {
    let text = scrape(&Metrics::default());
    assert_described(&text, "cri_bridge_build_info", "gauge");
    let series = format!("cri_bridge_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"));
    assert_eq!(value(&text, &series), 1.0);
    assert_eq!(text.lines().filter(|l| l.starts_with("cri_bridge_build_info")).count(), 1, "{text}");
}

#[test]
fn the_limits_are_the_configured_ones_in_the_unit_of_what_they_bound() {
    let limits = Limits {
        buffer_bytes: 48 << 20,
        connections: 10,
        connections_per_uid: 3,
        scoped_connections: 2,
        ..Limits::default()
    };
    let text = scrape(&Metrics::new(&limits));
    assert_described(&text, "cri_bridge_limit", "gauge");
    assert_eq!(value(&text, "cri_bridge_limit{limit=\"limits.buffer_mib\"}"), 50_331_648.0, "48 MiB, in bytes");
    assert_eq!(value(&text, "cri_bridge_limit{limit=\"limits.connections\"}"), 10.0);
    assert_eq!(value(&text, "cri_bridge_limit{limit=\"limits.connections_per_uid\"}"), 3.0);
    assert_eq!(value(&text, "cri_bridge_limit{limit=\"limits.scoped_connections\"}"), 2.0);
    assert_eq!(text.lines().filter(|l| l.starts_with("cri_bridge_limit{")).count(), 4, "{text}");
    // The series each bounds, beside it.
    assert_described(&text, "cri_bridge_buffered_bytes", "gauge");

    let defaults = scrape(&Metrics::default());
    assert_eq!(value(&defaults, "cri_bridge_limit{limit=\"limits.buffer_mib\"}"), 268_435_456.0, "256 MiB");
    assert_eq!(value(&defaults, "cri_bridge_limit{limit=\"limits.connections\"}"), 1024.0);
    assert_eq!(value(&defaults, "cri_bridge_limit{limit=\"limits.connections_per_uid\"}"), 256.0);
}

#[test]
fn each_executable_says_when_it_last_called_in_each_version() {
    use crate::callers::Peer;
    use crate::version::CriVersion;
    let callers = Callers::default();
    let who = |uid| crate::callers::Identity { pid: Some(1), uid, exe: "/usr/bin/crictl".into(), ..Default::default() };
    let peer = |uid| Peer { who: who(uid), ..Peer::default() };
    let before = unix_now().floor();
    callers.connected(peer(0)).called(CriVersion::V1alpha2);
    callers.connected(peer(1)).called(CriVersion::V1alpha2);
    let text = Metrics::default().render(&reading(callers, Vec::new));
    let name = "cri_bridge_caller_last_call_timestamp_seconds";
    assert_described(&text, name, "gauge");
    // Two callers (two uids) of one executable: one series, their latest call.
    let at = value(&text, &format!("{name}{{version=\"v1alpha2\",client=\"crictl\"}}"));
    assert!(at >= before && at <= unix_now(), "{at} against {before}");
    assert!(!text.contains(&format!("{name}{{version=\"v1\"")), "no call in v1:\n{text}");
}

#[test]
fn several_backends_show_their_calls_health_and_sandboxes() {
    let metrics = Metrics::default();
    metrics.routed_call("docker", tonic::Code::Unavailable);
    metrics.routed_call("containerd", tonic::Code::Ok);
    let routed = || {
        vec![
            RoutedBackend { name: "docker".into(), up: false, sandboxes: 3 },
            RoutedBackend { name: "containerd".into(), up: true, sandboxes: 0 },
        ]
    };
    let text = metrics.render(&reading(Callers::default(), routed));
    assert_described(&text, "cri_bridge_routed_backend_up", "gauge");
    assert_eq!(value(&text, "cri_bridge_routed_calls_total{backend=\"docker\",code=\"UNAVAILABLE\"}"), 1.0);
    assert_eq!(value(&text, "cri_bridge_routed_backend_up{backend=\"docker\"}"), 0.0);
    assert_eq!(value(&text, "cri_bridge_routed_backend_up{backend=\"containerd\"}"), 1.0);
    assert_eq!(value(&text, "cri_bridge_routed_sandboxes{backend=\"docker\"}"), 3.0);
}
