//! The figures of "no client can hurt another" (issue 23), on the release binary: well-behaved
//! clients' latency with no abuse and under every abuse of `tests/support/abuse.rs` at once,
//! the daemon's RSS (default memory bound: `limits.buffer_mib` 256) and its fds after.
//!
//! Two well-behaved measures: `Version` (through the in-memory runtime, which runs on threads of
//! its own inside the daemon and is itself loaded by the abuse), and `cri-bridge`'s own status
//! call (`/cri_bridge.Bridge/Status`), answered by the proxy's one thread alone: what the abuse
//! costs cri-bridge itself.
//!
//! A third well-behaved measure is a kubelet's relist: a v1 `ListContainers` of every container,
//! translated for the v1alpha2 runtime (so it needs room in the shared memory bound that the
//! unfinished requests and the conversion queue fillers press on), every 100 ms.
//!
//! Run: `cargo bench --bench isolation`;
//! `ISOLATION_ABUSES=slow,headers,requests,conversions,floods,queue` (any of them) runs only those
//! abuses. The RSS peak is compared with the stated ceiling (`cri_bridge::relay::memory_ceiling`
//! for the default limits, counting the connections actually open).

#[path = "../tests/support/abuse.rs"]
mod abuse;

use abuse::{call, connect, Daemon, Seen, Sizes};
use cri_bridge::api::v1;
use prost::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");
const STATUS: &str = "/cri_bridge.Bridge/Status";
const LIST: &str = "/runtime.v1.RuntimeService/ListContainers";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cri-bridge-isolation-{}", std::process::id()));
    let daemon = Daemon::start(BIN.as_ref(), dir.clone(), "limits:\n  request_timeout_seconds: 10\n").await;
    let sizes = Sizes {
        containers: 2_500,
        slow_connections: 4,
        slow_streams: 20,
        watchers: 16,
        header_connections: 100,
        request_connections: 2,
        request_streams: 40,
        conversions: 4,
        envs: 1_000_000,
        floods: 8,
        queue_fillers: 4,
    };
    let mut sizes = sizes;
    if let Ok(only) = std::env::var("ISOLATION_ABUSES") {
        let off = |name: &str| !only.split(',').any(|a| a.trim() == name);
        if off("slow") {
            (sizes.slow_connections, sizes.watchers) = (0, 0);
        }
        if off("headers") {
            sizes.header_connections = 0;
        }
        if off("requests") {
            sizes.request_connections = 0;
        }
        if off("conversions") {
            sizes.conversions = 0;
        }
        if off("floods") {
            sizes.floods = 0;
        }
        if off("queue") {
            sizes.queue_fillers = 0;
        }
    }
    abuse::populate(&daemon.socket, sizes.containers).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (fds, rss) = (daemon.fds(), daemon.rss_kib());
    let quiet = measure(&daemon, Duration::from_secs(4)).await;
    let abusers = abuse::abuse(&daemon.socket, sizes).await;
    let abused = measure(&daemon, Duration::from_secs(12)).await;
    abusers.stop();
    let back = daemon.fds_back_to(fds, Duration::from_secs(90)).await;
    println!("isolation: {sizes:?}");
    println!("| measure | calls | failed | p50 | p99 | max |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (phase, (version, status, list, _)) in [("quiet", &quiet), ("every abuse at once", &abused)] {
        for (what, seen) in [("Version", version), ("cri-bridge status", status), ("translated list", list)] {
            println!(
                "| {phase}: {what} | {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
                seen.latencies.len(),
                seen.failures.len(),
                ms(seen.percentile(0.5)),
                ms(seen.percentile(0.99)),
                ms(seen.percentile(1.0)),
            );
        }
    }
    let ceiling = sizes.ceiling_kib(cri_bridge::config::Limits::default(), 4);
    println!(
        "RSS: {} MiB before, peak {} MiB under the abuse (default limits; stated ceiling with the {} connections open: {} MiB); fds {fds} before, {} after ({})",
        rss >> 10,
        abused.3 >> 10,
        sizes.connections() + 4,
        ceiling >> 10,
        daemon.fds(),
        if back { "back" } else { "NOT back within 90 s" }
    );
    for failure in abused.0.failures.iter().chain(&abused.1.failures).chain(&abused.2.failures).take(5) {
        println!("failure: {failure}");
    }
    drop(daemon);
    let _ = std::fs::remove_dir_all(dir);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Well-behaved `Version` callers, a status caller and a relisting kubelet for `window`; the
/// RSS peak meanwhile.
async fn measure(daemon: &Daemon, window: Duration) -> (Seen, Seen, Seen, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let version = Arc::new(Mutex::new(Seen::default()));
    let status = Arc::new(Mutex::new(Seen::default()));
    let list = Arc::new(Mutex::new(Seen::default()));
    let mut tasks = abuse::well_behaved(daemon.socket.clone(), stop.clone(), version.clone(), Duration::from_secs(2));
    let (socket, stop_status, seen) = (daemon.socket.clone(), stop.clone(), status.clone());
    tasks.push(tokio::spawn(async move {
        let connection = connect(&socket).await;
        while !stop_status.load(Ordering::SeqCst) {
            let started = Instant::now();
            let outcome = tokio::time::timeout(Duration::from_secs(2), call(&connection, STATUS, &[], "2S")).await;
            let took = started.elapsed();
            let failure = match outcome {
                Ok(Ok(code)) if code == "0" => None,
                other => Some(format!("{other:?}")),
            };
            match failure {
                None => seen.lock().unwrap().latencies.push(took),
                Some(failure) => seen.lock().unwrap().failures.push(failure),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }));
    let (socket, stop_list, seen) = (daemon.socket.clone(), stop.clone(), list.clone());
    tasks.push(tokio::spawn(async move {
        let connection = connect(&socket).await;
        let request = v1::ListContainersRequest::default().encode_to_vec();
        while !stop_list.load(Ordering::SeqCst) {
            let started = Instant::now();
            let outcome = tokio::time::timeout(Duration::from_secs(10), call(&connection, LIST, &request, "10S")).await;
            let took = started.elapsed();
            match outcome {
                Ok(Ok(code)) if code == "0" => seen.lock().unwrap().latencies.push(took),
                other => seen.lock().unwrap().failures.push(format!("list: {other:?}")),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }));
    let (started, mut peak) = (Instant::now(), 0);
    while started.elapsed() < window {
        peak = peak.max(daemon.rss_kib());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        let _ = task.await;
    }
    let take = |seen: Arc<Mutex<Seen>>| std::mem::take(&mut *seen.lock().unwrap());
    (take(version), take(status), take(list), peak)
}
