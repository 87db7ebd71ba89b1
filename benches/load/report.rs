//! The report: each workload's and peer's medians over rounds, compared with the peer's
//! baseline round by round, and the proxies' memory.

use crate::measuring::{Results, Sample, CONVERSION_US};
use crate::peers::{Peer, Setup};
use crate::workload::Workload;
use crate::{load_proc, Settings, CONTAINERS};

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2.0 })
}

fn cell(value: Option<f64>, decimals: usize, width: usize) -> String {
    match value {
        Some(v) => format!("{v:>width$.decimals$}"),
        None => format!("{:>width$}", "-"),
    }
}

/// The median over rounds of `figure(sample, baseline sample)`, the rounds paired.
fn paired_median(samples: &[Sample], baseline: &[Sample], figure: impl Fn(&Sample, &Sample) -> f64) -> Option<f64> {
    median(samples.iter().zip(baseline).map(|(s, b)| figure(s, b)).collect())
}

pub fn print_report(setup: &Setup, results: &Results, settings: &Settings) {
    println!();
    println!(
        "machine: {}; LOAD_SECONDS={} LOAD_ROUNDS={}; {CONTAINERS} containers per runtime; client: h2 on a current-thread tokio runtime",
        load_proc::machine(),
        settings.seconds_text,
        settings.rounds
    );
    println!(
        "{:<28} {:<44} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>17} {:>19} {:>7}",
        "workload",
        "peer",
        "calls/s",
        "ratio",
        "+p50 µs",
        "p50 µs",
        "p99 µs",
        "mean µs",
        "proxy CPU/call µs",
        "runtime CPU/call µs",
        "errors"
    );
    let mut failures = Vec::new();
    for (w, workload) in Workload::ALL.iter().enumerate() {
        for (p, peer) in setup.peers.iter().enumerate() {
            let samples = &results[w][p];
            if samples.is_empty() {
                continue;
            }
            let of = |figure: fn(&Sample) -> f64| median(samples.iter().map(figure).collect());
            let of_option = |figure: fn(&Sample) -> Option<f64>| median(samples.iter().filter_map(figure).collect());
            let baseline = peer.baseline.map(|b| &results[w][b]);
            let ratio =
                baseline.and_then(|b| paired_median(samples, b, |s, b| s.calls_per_second / b.calls_per_second));
            let added_p50 = baseline.and_then(|b| paired_median(samples, b, |s, b| s.p50_us - b.p50_us));
            let (calls, errors) = samples.iter().fold((0, 0), |(c, e), s| (c + s.calls, e + s.errors));
            println!(
                "{:<28} {:<44} {} {} {} {} {} {} {} {} {:>7}",
                workload.name(),
                peer.name,
                cell(of(|s| s.calls_per_second), 0, 9),
                cell(ratio, 2, 6),
                added_p50.map(|a| format!("{a:>+8.1}")).unwrap_or_else(|| format!("{:>8}", "-")),
                cell(of(|s| s.p50_us), 1, 8),
                cell(of(|s| s.p99_us), 1, 8),
                cell(of(|s| s.mean_us), 1, 8),
                cell(of_option(|s| s.proxy_cpu_us), 1, 17),
                cell(of_option(|s| s.runtime_cpu_us), 1, 19),
                errors
            );
            if let Some(first) = samples.iter().find_map(|s| s.first_error.as_ref()) {
                failures.push(format!(
                    "{} / {}: {errors} of {calls} calls failed; first: {first}",
                    workload.name(),
                    peer.name
                ));
            }
        }
    }
    let containerd = if setup.peers.iter().any(|p| p.name.starts_with("containerd")) {
        "; each containerd's peers: that containerd's direct v1"
    } else {
        ""
    };
    println!(
        "(medians over rounds; ratio = calls/s ÷ the baseline's, +p50 = p50 − the baseline's, paired by round; \
         baselines: direct v1 for passthrough and socat, direct v1alpha2 for translating{containerd})"
    );
    println!("{}", memory_line(&setup.peers));
    if let Some(cost) = CONVERSION_US.get() {
        println!("conversion's own cost: the v1alpha2 ListContainers answer to v1, {cost:.0} µs (median of 20, in the bench process)");
    }
    if !failures.is_empty() {
        println!("\n!!! THIS RUN HAD ERRORS: its figures are not comparable !!!");
        for failure in failures {
            println!("!!! {failure}");
        }
    }
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0)).unwrap_or_else(|| "?".into())
}

/// VmRSS and VmHWM of each proxy, with what socat's per-connection children hold.
fn memory_line(peers: &[Peer]) -> String {
    let parts: Vec<String> = peers
        .iter()
        .filter_map(|peer| Some((peer, peer.proxy?)))
        .map(|(peer, pid)| {
            let mut part = format!(
                "{} VmRSS {} (VmHWM {})",
                peer.name,
                mib(load_proc::status_kib(pid, "VmRSS")),
                mib(load_proc::status_kib(pid, "VmHWM"))
            );
            let children = load_proc::live_children(pid);
            if !children.is_empty() {
                let rss = children.iter().filter_map(|&c| load_proc::status_kib(c, "VmRSS")).sum();
                part += &format!(" + {} per-connection children VmRSS {}", children.len(), mib(Some(rss)));
            }
            part
        })
        .collect();
    format!("proxy RSS: {}", parts.join("; "))
}
