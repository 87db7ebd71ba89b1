//! Soak: a mixed kubelet-like load through cri-bridge into a real containerd for a long time,
//! sampling the daemon's RSS, open fds and the calls' p99 every few seconds, then saying whether
//! anything grew. Not in CI (it runs for as long as asked): `tools/soak.sh [SECONDS]`, or
//! `SOAK_SECONDS=1800 cargo bench --bench soak`. Needs root and what `.ci/run` installs
//! (containerd 1.6.20 and runc from bookworm, busybox-static).
//!
//! Knobs: `SOAK_SECONDS` (default 60), `SOAK_SAMPLE_SECONDS` (5), `SOAK_WORKERS` (4).
//! The load, per worker, round after round: ListPodSandbox, ListContainers, Status,
//! ImageFsInfo, ContainerStatus, ExecSync (`echo`) in a running container, and every tenth
//! round a container created, started, stopped and removed.

#[path = "../tests/containerd_support/mod.rs"]
mod containerd_support;

use containerd_support::{Containerd, BUSYBOX_IMAGE};
use cri_bridge::api::v1;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Client = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type ImageClient = v1::image_service_client::ImageServiceClient<tonic::transport::Channel>;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What the sampler reads, per window.
#[derive(Default)]
struct Window {
    latencies: Mutex<Vec<Duration>>,
    errors: AtomicU64,
}

struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: usize,
    calls: usize,
    errors: u64,
    p99: Duration,
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

fn pod_config(name: &str, logs: &Path) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "cri-bridge-soak".into(),
            attempt: 0,
        }),
        log_directory: logs.to_str().unwrap().into(),
        linux: Some(v1::LinuxPodSandboxConfig {
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1::NamespaceOption {
                    network: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container(pod: &str, config: &v1::PodSandboxConfig, name: &str) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: BUSYBOX_IMAGE.into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            log_path: format!("{name}.log"),
            ..Default::default()
        }),
        sandbox_config: Some(config.clone()),
    }
}

/// Times one call into the window.
async fn timed<T>(window: &Window, call: impl std::future::Future<Output = Result<T, tonic::Status>>) -> Option<T> {
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), call).await;
    let took = started.elapsed();
    window.latencies.lock().unwrap().push(took);
    match result {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(status)) => {
            window.errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("soak: call failed: {:?} {}", status.code(), status.message());
            None
        }
        Err(_) => {
            window.errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("soak: call took over 10 s");
            None
        }
    }
}

/// What every worker shares: the pod its containers go in, and the container it execs in.
#[derive(Clone)]
struct Setup {
    pod: String,
    config: v1::PodSandboxConfig,
    resident: String,
    window: Arc<Window>,
    stop: Arc<AtomicBool>,
}

async fn worker(mut rt: Client, mut images: ImageClient, n: usize, setup: Setup) {
    let Setup { pod, config, resident, window, stop } = setup;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        timed(&window, rt.list_pod_sandbox(v1::ListPodSandboxRequest::default())).await;
        timed(&window, rt.list_containers(v1::ListContainersRequest::default())).await;
        timed(&window, rt.status(v1::StatusRequest { verbose: false })).await;
        timed(&window, images.image_fs_info(v1::ImageFsInfoRequest {})).await;
        let status = v1::ContainerStatusRequest { container_id: resident.clone(), verbose: false };
        timed(&window, rt.container_status(status)).await;
        let exec =
            v1::ExecSyncRequest { container_id: resident.clone(), cmd: vec!["echo".into(), "soak".into()], timeout: 5 };
        timed(&window, rt.exec_sync(exec)).await;
        if round.is_multiple_of(10) {
            let name = format!("w{n}-r{round}");
            if let Some(created) = timed(&window, rt.create_container(container(&pod, &config, &name))).await {
                let id = created.into_inner().container_id;
                timed(&window, rt.start_container(v1::StartContainerRequest { container_id: id.clone() })).await;
                timed(&window, rt.stop_container(v1::StopContainerRequest { container_id: id.clone(), timeout: 0 }))
                    .await;
                timed(&window, rt.remove_container(v1::RemoveContainerRequest { container_id: id })).await;
            }
        }
    }
}

fn p99(latencies: &mut [Duration]) -> Duration {
    if latencies.is_empty() {
        return Duration::ZERO;
    }
    latencies.sort();
    latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let seconds = knob("SOAK_SECONDS", 60);
    let every = Duration::from_secs(knob("SOAK_SAMPLE_SECONDS", 5));
    let workers = knob("SOAK_WORKERS", 4) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(soak(Duration::from_secs(seconds), every, workers));
}

async fn soak(length: Duration, every: Duration, workers: usize) {
    let containerd = Containerd::start().await;
    let dir = containerd.dir.join("soak");
    std::fs::create_dir_all(&dir).unwrap();
    let socket: PathBuf = dir.join("bridge.sock");
    let log = std::fs::File::create(dir.join("cri-bridge.log")).unwrap();
    let mut bridge = std::process::Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
        .args(["serve", "--listen"])
        .arg(&socket)
        .arg("--backend")
        .arg(format!("unix://{}", containerd.socket.display()))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start cri-bridge");
    let pid = bridge.id();
    for _ in 0..500 {
        if tokio::net::UnixStream::connect(&socket).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let channel = cri_bridge::grpc::unix_channel(socket.clone(), || {});
    let mut rt = Client::new(channel.clone());
    let logs = containerd.pod_logs.join("soak");
    std::fs::create_dir_all(&logs).unwrap();
    let config = pod_config("soak", &logs);
    let pod = rt
        .run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(config.clone()), ..Default::default() })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let resident = rt
        .create_container(container(&pod, &config, "resident"))
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    rt.start_container(v1::StartContainerRequest { container_id: resident.clone() }).await.expect("StartContainer");

    let stop = Arc::new(AtomicBool::new(false));
    let window = Arc::new(Window::default());
    let setup = Setup {
        pod: pod.clone(),
        config: config.clone(),
        resident: resident.clone(),
        window: window.clone(),
        stop: stop.clone(),
    };
    let mut tasks = Vec::new();
    for n in 0..workers {
        // Each worker on a connection of its own, as several kubelet clients would be.
        let channel = cri_bridge::grpc::unix_channel(socket.clone(), || {});
        let images = ImageClient::new(channel.clone());
        tasks.push(tokio::spawn(worker(Client::new(channel), images, n, setup.clone())));
    }
    eprintln!(
        "soak: {workers} workers for {length:?} through cri-bridge (pid {pid}) into containerd {}",
        containerd.build.runtime_version()
    );
    eprintln!("{:>8} {:>10} {:>5} {:>8} {:>7} {:>10}", "t (s)", "RSS (KiB)", "fds", "calls", "errors", "p99 (ms)");
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < length {
        tokio::time::sleep(every).await;
        let mut latencies = std::mem::take(&mut *window.latencies.lock().unwrap());
        let sample = Sample {
            at: started.elapsed(),
            rss_kib: rss_kib(pid),
            fds: fds(pid),
            calls: latencies.len(),
            errors: window.errors.swap(0, Ordering::Relaxed),
            p99: p99(&mut latencies),
        };
        eprintln!(
            "{:>8.0} {:>10} {:>5} {:>8} {:>7} {:>10.2}",
            sample.at.as_secs_f64(),
            sample.rss_kib,
            sample.fds,
            sample.calls,
            sample.errors,
            sample.p99.as_secs_f64() * 1e3
        );
        samples.push(sample);
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    verdict(&samples);
    let _ = rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await;
    let _ = rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod }).await;
    let _ = bridge.kill();
    let _ = bridge.wait();
}

/// Start against end: the median of the first and of the last three samples (the first one
/// dropped, it includes warm-up).
fn verdict(samples: &[Sample]) {
    if samples.len() < 8 {
        eprintln!("soak: too short to judge ({} samples; run longer)", samples.len());
        return;
    }
    let median = |xs: &mut Vec<f64>| {
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        xs[xs.len() / 2]
    };
    let take = |range: &[Sample], f: &dyn Fn(&Sample) -> f64| median(&mut range.iter().map(f).collect());
    let (start, end) = (&samples[1..4], &samples[samples.len() - 3..]);
    let rss = (take(start, &|s| s.rss_kib as f64), take(end, &|s| s.rss_kib as f64));
    let fd = (take(start, &|s| s.fds as f64), take(end, &|s| s.fds as f64));
    let p99 = (take(start, &|s| s.p99.as_secs_f64() * 1e3), take(end, &|s| s.p99.as_secs_f64() * 1e3));
    let errors: u64 = samples.iter().map(|s| s.errors).sum();
    let calls: usize = samples.iter().map(|s| s.calls).sum();
    let grew = |(a, b): (f64, f64), slack: f64| b > a * 1.2 && b - a > slack;
    eprintln!("soak: {calls} calls, {errors} errors");
    eprintln!("soak: RSS {:.0} -> {:.0} KiB: {}", rss.0, rss.1, if grew(rss, 2048.0) { "GREW" } else { "steady" });
    eprintln!("soak: fds {:.0} -> {:.0}: {}", fd.0, fd.1, if fd.1 > fd.0 + 4.0 { "GREW" } else { "steady" });
    eprintln!("soak: p99 {:.2} -> {:.2} ms: {}", p99.0, p99.1, if grew(p99, 5.0) { "GREW" } else { "steady" });
}
