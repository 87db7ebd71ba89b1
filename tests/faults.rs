//! Faults under load: while clients keep calling through cri-bridge, the runtime is killed and
//! started again, then replaced by one of another CRI version. Every call either succeeds or
//! fails `UNAVAILABLE` (never another code, never past its deadline), no call reaches a runtime
//! twice, and the new version is in use soon after the runtime answers.

mod common;

use common::{Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::memory::{MemoryRuntime, CALL_ID};
use cri_bridge::CriVersion::{self, V1alpha2, V1};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 8;
const DEADLINE: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Outcome {
    id: String,
    code: tonic::Code,
    message: String,
    took: Duration,
    /// When it ended.
    at: Instant,
}

/// Clients calling `Version` and `ListPodSandbox` on their own connections until `stop`.
async fn load(socket: std::path::PathBuf, stop: Arc<AtomicBool>, outcomes: Arc<Mutex<Vec<Outcome>>>) {
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let (socket, stop, outcomes) = (socket.clone(), stop.clone(), outcomes.clone());
        tasks.push(tokio::spawn(async move {
            let mut runtime = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&socket));
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("{client}-{n}");
                let started = Instant::now();
                let answer = if n % 2 == 0 {
                    let mut request = tonic::Request::new(v1::VersionRequest::default());
                    request.set_timeout(DEADLINE);
                    request.metadata_mut().insert(CALL_ID, id.parse().unwrap());
                    let answer = tokio::time::timeout(DEADLINE * 2, runtime.version(request)).await;
                    answer.expect("no call outlives its deadline").err()
                } else {
                    let mut request = tonic::Request::new(v1::ListPodSandboxRequest::default());
                    request.set_timeout(DEADLINE);
                    request.metadata_mut().insert(CALL_ID, id.parse().unwrap());
                    let answer = tokio::time::timeout(DEADLINE * 2, runtime.list_pod_sandbox(request)).await;
                    answer.expect("no call outlives its deadline").err()
                };
                let (code, message) =
                    answer.map_or((tonic::Code::Ok, String::new()), |s| (s.code(), s.message().into()));
                let outcome = Outcome { id, code, message, took: started.elapsed(), at: Instant::now() };
                outcomes.lock().unwrap().push(outcome);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Waits until `memory` is the last hold on a killed runtime. `kill` returns once the server
/// task is gone, but a connection task aborted in the middle of a poll finishes that poll, and
/// hyper runs each call in a task of its own that no abort reaches: either may still record a
/// call and send its answer. Every such task holds the runtime; once none does, no call can
/// reach it any more.
async fn until_unreachable(memory: &mut Arc<MemoryRuntime>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    // (`get_mut` succeeds only on the last hold, and then sees every write made before the
    // others let go.)
    while Arc::get_mut(memory).is_none() {
        assert!(Instant::now() < deadline, "the killed runtime is still held 10 s after its server task ended");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_killed_restarted_and_replaced_under_load() {
    let dir = TempDir::new("faults");
    let runtime_socket = dir.path("runtime.sock");
    let mut runtimes_ids: Vec<String> = Vec::new();
    let mut runtime = Runtime::start(&runtime_socket, &[V1]).await;
    let bridge = Bridge::start(common::config(&dir, &runtime_socket, None)).await;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = tokio::spawn(load(bridge.socket.clone(), stop.clone(), outcomes.clone()));
    let mut events = Vec::new();

    // Killed and started again three times (the same version), then replaced: v1 → v1alpha2 → v1.
    let plan: [(&str, &[CriVersion]); 5] =
        [("restart", &[V1]), ("restart", &[V1]), ("restart", &[V1]), ("replace", &[V1alpha2]), ("replace", &[V1])];
    for (what, versions) in plan {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut memory = runtime.memory.clone();
        let killed_at = Instant::now();
        runtime.kill().await;
        // Read once nothing can reach it any more: every call it saw, up to the last.
        until_unreachable(&mut memory).await;
        runtimes_ids.extend(memory.call_ids());
        tokio::time::sleep(Duration::from_millis(150)).await;
        runtime = Runtime::start(&runtime_socket, versions).await;
        let answering_at = Instant::now();
        let expected = versions[0].as_str();
        let mut in_use = None;
        while answering_at.elapsed() < Duration::from_secs(30) {
            if common::bridge_speaks(&bridge.socket).await.as_deref() == Some(expected) {
                in_use = Some(answering_at.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // How soon is a figure (printed below), not a pass mark: load can stretch it.
        let in_use = in_use.unwrap_or_else(|| panic!("30 s after the {what}, cri-bridge does not speak {expected}"));
        events.push((what, expected, killed_at, in_use));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.store(true, Ordering::Relaxed);
    clients.await.unwrap();
    runtimes_ids.extend(runtime.memory.call_ids());

    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
    for outcome in outcomes.iter() {
        *by_code.entry(format!("{:?}", outcome.code)).or_default() += 1;
    }
    let worst = outcomes.iter().map(|o| o.took).max().unwrap();
    eprintln!(
        "faults: {} calls, outcomes {by_code:?}, max latency {worst:?}; version in use after the runtime answered: {}",
        outcomes.len(),
        events.iter().map(|(w, v, _, t)| format!("{w} {v}: {t:?}")).collect::<Vec<_>>().join(", ")
    );
    for outcome in outcomes.iter() {
        assert!(
            matches!(outcome.code, tonic::Code::Ok | tonic::Code::Unavailable),
            "every call succeeds or is UNAVAILABLE: {outcome:?}"
        );
        assert!(outcome.took < DEADLINE + Duration::from_millis(500), "{outcome:?}");
    }
    // No call reached a runtime twice, and every call answered OK reached one.
    let mut seen = HashSet::new();
    for id in &runtimes_ids {
        assert!(seen.insert(id.as_str()), "call {id} reached a runtime twice");
    }
    for outcome in outcomes.iter().filter(|o| o.code == tonic::Code::Ok) {
        assert!(seen.contains(outcome.id.as_str()), "{outcome:?} was answered OK but no runtime saw it");
    }
    // Calls were made, and answered, after every fault.
    for (what, version, killed_at, _) in &events {
        let after = outcomes.iter().filter(|o| o.at > *killed_at && o.code == tonic::Code::Ok).count();
        assert!(after > 20, "only {after} calls succeeded after the {what} to {version}");
    }
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_bridge_restarted_without_socket_activation_is_reconnected_to() {
    let dir = TempDir::new("faults-bridge");
    let runtime_socket = dir.path("runtime.sock");
    let runtime = Runtime::start(&runtime_socket, &[V1]).await;
    let config = common::config(&dir, &runtime_socket, None);
    let mut bridge = Bridge::start(config.clone()).await;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = tokio::spawn(load(bridge.socket.clone(), stop.clone(), outcomes.clone()));
    let mut restarted = Vec::new();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        bridge.stop().await;
        restarted.push(Instant::now());
        bridge = Bridge::start(config.clone()).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    clients.await.unwrap();
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
    let seen: HashSet<String> = runtime.memory.call_ids().into_iter().collect();
    for outcome in &outcomes {
        *by_code.entry(format!("{:?}", outcome.code)).or_default() += 1;
        match outcome.code {
            tonic::Code::Ok | tonic::Code::Unavailable => {}
            // hyper's client fails a call it had queued on a connection that received GOAWAY and
            // closed before the call was written; tonic reports that as CANCELLED or as UNKNOWN
            // "transport error" (grpc-go retries such a call by itself, grpcio says UNAVAILABLE).
            // Such a call never left the client: the runtime must not have seen it.
            tonic::Code::Cancelled | tonic::Code::Unknown => {
                assert!(!seen.contains(&outcome.id), "{outcome:?} reached the runtime");
                if outcome.code == tonic::Code::Unknown {
                    assert_eq!(outcome.message, "transport error", "{outcome:?}");
                }
            }
            _ => panic!(
                "every call succeeds, or is UNAVAILABLE, or was never sent: {outcome:?} (the runtime saw it: {})",
                seen.contains(&outcome.id)
            ),
        }
    }
    eprintln!(
        "faults: cri-bridge restarted twice without socket activation: {} calls, outcomes {by_code:?}, max latency {:?}",
        outcomes.len(),
        outcomes.iter().map(|o| o.took).max().unwrap()
    );
    // Each client's connection was made again: calls succeed after the last restart.
    let last = *restarted.last().unwrap();
    let after = outcomes.iter().filter(|o| o.at > last && o.code == tonic::Code::Ok).count();
    assert!(after > 50, "only {after} calls succeeded after the last restart");
    bridge.stop().await;
    runtime.stop().await;
}
