//! What cri-bridge adds to a call: the same RPCs asked of the in-memory runtime directly (the
//! baseline) and through cri-bridge, with the bytes passed through (v1 → v1) and converted
//! (v1 → v1alpha2, against the same runtime serving v1alpha2, whose direct v1alpha2 call is
//! that case's baseline). An L4 relay, socat, in front of the same v1 runtime is the floor any
//! proxy is measured against. Everything runs over real unix sockets on this machine.

#[path = "support/estimates.rs"]
mod estimates;

use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::config::{Config, Endpoint};
use cri_bridge::memory::{serve_memory, MemoryRuntime};
use cri_bridge::CriVersion;
use criterion::Criterion;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;

type V1Client = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1alpha2Client = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// A runtime with `pods` pods, each with a container.
async fn runtime(socket: &Path, version: CriVersion, pods: usize) -> Arc<MemoryRuntime> {
    let (memory, _task) = serve_memory(socket, &[version], std::future::pending()).await.unwrap();
    for i in 0..pods {
        let metadata = v1::PodSandboxMetadata {
            name: format!("pod-{i}"),
            uid: format!("uid-{i}"),
            namespace: "bench".into(),
            attempt: 0,
        };
        let labels = [("app".to_string(), format!("app-{i}")), ("tier".to_string(), "web".to_string())].into();
        let config = v1::PodSandboxConfig { metadata: Some(metadata), labels, ..Default::default() };
        let pod = memory
            .run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
            .unwrap()
            .pod_sandbox_id;
        let container = v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            ..Default::default()
        };
        let request =
            v1::CreateContainerRequest { pod_sandbox_id: pod, config: Some(container), sandbox_config: Some(config) };
        memory.create_container(request).unwrap();
    }
    memory
}

async fn bridge(listen: PathBuf, backend: &Path) {
    let config =
        Config { listen_path: listen.clone(), backend: Endpoint::Unix(backend.to_path_buf()), ..Config::default() };
    tokio::spawn(cri_bridge::run(config, std::future::pending()));
    for _ in 0..200 {
        if tokio::net::UnixStream::connect(&listen).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("cri-bridge did not start");
}

/// socat relaying `listen` to `backend`: what an L4 relay adds to the same calls.
struct Socat(std::process::Child);

impl Socat {
    async fn start(listen: &Path, backend: &Path) -> Socat {
        let mut child = std::process::Command::new("socat")
            .arg(format!("UNIX-LISTEN:{},fork", listen.display()))
            .arg(format!("UNIX-CONNECT:{}", backend.display()))
            .spawn()
            .expect("the proxy benchmark needs socat (apt-get install socat; .ci/run installs it)");
        for _ in 0..200 {
            if listen.exists() {
                return Socat(child);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("socat did not start");
    }
}

impl Drop for Socat {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn channel(path: &Path) -> tonic::transport::Channel {
    cri_bridge::grpc::unix_channel(path.to_path_buf(), || {})
}

const PATHS: [&str; 4] = [
    "direct",
    "through cri-bridge, passthrough v1->v1",
    "through cri-bridge, converted v1->v1alpha2",
    "through socat (L4 relay), v1",
];

fn main() {
    let rt = Runtime::new().unwrap();
    let dir = std::env::temp_dir().join(format!("crib-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut direct_v1, mut direct_v1alpha2, mut passthrough, mut converted, mut relayed, _socat) =
        rt.block_on(async {
            runtime(&dir.join("v1.sock"), CriVersion::V1, 100).await;
            runtime(&dir.join("v1alpha2.sock"), CriVersion::V1alpha2, 100).await;
            bridge(dir.join("pass.sock"), &dir.join("v1.sock")).await;
            bridge(dir.join("conv.sock"), &dir.join("v1alpha2.sock")).await;
            let socat = Socat::start(&dir.join("socat.sock"), &dir.join("v1.sock")).await;
            (
                V1Client::new(channel(&dir.join("v1.sock"))),
                V1alpha2Client::new(channel(&dir.join("v1alpha2.sock"))),
                V1Client::new(channel(&dir.join("pass.sock"))),
                V1Client::new(channel(&dir.join("conv.sock"))),
                V1Client::new(channel(&dir.join("socat.sock"))),
                socat,
            )
        });

    let mut criterion = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    let mut groups = Vec::new();
    macro_rules! rpc {
        ($group:literal, $method:ident, $v1:expr, $v1alpha2:expr) => {{
            let mut group = criterion.benchmark_group($group);
            group.bench_function("direct v1", |b| b.iter(|| rt.block_on(direct_v1.$method($v1)).unwrap()));
            group.bench_function("direct v1alpha2", |b| {
                b.iter(|| rt.block_on(direct_v1alpha2.$method($v1alpha2)).unwrap())
            });
            group.bench_function(PATHS[1], |b| b.iter(|| rt.block_on(passthrough.$method($v1)).unwrap()));
            group.bench_function(PATHS[2], |b| b.iter(|| rt.block_on(converted.$method($v1)).unwrap()));
            group.bench_function(PATHS[3], |b| b.iter(|| rt.block_on(relayed.$method($v1)).unwrap()));
            group.finish();
            groups.push($group);
        }};
    }
    rpc!("Version", version, v1::VersionRequest::default(), v1alpha2::VersionRequest::default());
    rpc!(
        "ListPodSandbox (100 pods)",
        list_pod_sandbox,
        v1::ListPodSandboxRequest::default(),
        v1alpha2::ListPodSandboxRequest::default()
    );
    rpc!(
        "ListContainers (100)",
        list_containers,
        v1::ListContainersRequest::default(),
        v1alpha2::ListContainersRequest::default()
    );
    criterion.final_summary();
    let _ = std::fs::remove_dir_all(&dir);

    let means = estimates::criterion_means();
    let mean = |group: &str, function: &str| means.get(&(group.to_string(), function.to_string())).copied();
    println!("\n{:<28} {:<44} {:>10} {:>10} {:>7}", "call", "path", "baseline", "time", "ratio");
    for group in groups {
        for (path, baseline) in [(PATHS[1], "direct v1"), (PATHS[2], "direct v1alpha2"), (PATHS[3], "direct v1")] {
            if let (Some(base), Some(time)) = (mean(group, baseline), mean(group, path)) {
                println!(
                    "{group:<28} {path:<44} {:>7.1} µs {:>7.1} µs {:>6.2}×",
                    base / 1000.0,
                    time / 1000.0,
                    time / base
                );
            }
        }
    }
}
