//! Shared test harness: an in-memory runtime on a real unix socket, and cri-bridge in front of it
//! on another, both in a fresh temporary directory.
#![allow(dead_code)]

pub mod pod_cgroup;
pub mod process;

use cri_bridge::config::{Config, Endpoint};
use cri_bridge::memory::{serve_memory, MemoryRuntime};
use cri_bridge::CriVersion;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A fresh directory for one test's sockets; removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        // Unix socket paths are limited to ~108 bytes: keep them short.
        let dir = std::env::temp_dir().join(format!(
            "crib-{}-{}-{}",
            name,
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An in-memory runtime serving some versions on a socket, stoppable.
pub struct Runtime {
    pub memory: Arc<MemoryRuntime>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Runtime {
    pub async fn start(socket: &Path, versions: &[CriVersion]) -> Runtime {
        let (stop, stopped) = oneshot::channel::<()>();
        let (memory, task) = serve_memory(socket, versions, async {
            let _ = stopped.await;
        })
        .await
        .expect("start the in-memory runtime");
        Runtime { memory, stop: Some(stop), task }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let _ = self.task.await;
    }

    /// Ends the runtime as SIGKILL would: every connection closed at once, calls in flight
    /// unanswered, the socket file left behind.
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// cri-bridge running in this process, stoppable.
pub struct Bridge {
    pub socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<Result<(), cri_bridge::run::RunError>>,
}

impl Bridge {
    pub async fn start(config: Config) -> Bridge {
        Bridge::start_within(config, Duration::from_secs(2)).await
    }

    /// As `start`, waiting up to `wait` for the socket (a backend that answers nothing holds
    /// the start for the cgroup driver check's 5 s).
    #[allow(dead_code)]
    pub async fn start_within(config: Config, wait: Duration) -> Bridge {
        let socket = config.listen_path.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(cri_bridge::run(config, async {
            let _ = stopped.await;
        }));
        wait_for_socket_within(&socket, wait).await;
        Bridge { socket, stop: Some(stop), task }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

/// A config with cri-bridge listening in `dir` and forwarding to `backend`.
pub fn config(dir: &TempDir, backend: &Path, pinned: Option<CriVersion>) -> Config {
    Config {
        listen_path: dir.path("bridge.sock"),
        backend: Endpoint::Unix(backend.to_path_buf()),
        backend_version: pinned,
        ..Config::default()
    }
}

/// One of several backends (`backends`): `name` at `socket`, its version discovered.
pub fn named_backend(name: &str, socket: &Path) -> cri_bridge::config::NamedBackend {
    cri_bridge::config::NamedBackend {
        name: name.into(),
        endpoint: Endpoint::Unix(socket.to_path_buf()),
        image_endpoint: None,
        version: None,
        revision: None,
        image_revision: None,
    }
}

/// A runtime speaking `backend` versions and cri-bridge in front of it.
pub struct Pair {
    pub dir: TempDir,
    pub runtime: Runtime,
    pub bridge: Bridge,
}

impl Pair {
    pub async fn start(name: &str, backend: &[CriVersion], pinned: Option<CriVersion>) -> Pair {
        let dir = TempDir::new(name);
        let runtime = Runtime::start(&dir.path("runtime.sock"), backend).await;
        let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), pinned)).await;
        Pair { dir, runtime, bridge }
    }

    pub fn channel(&self) -> tonic::transport::Channel {
        channel(&self.bridge.socket)
    }
}

pub fn channel(socket: &Path) -> tonic::transport::Channel {
    cri_bridge::grpc::unix_channel(socket.to_path_buf(), || {})
}

pub async fn wait_for_socket(path: &Path) {
    wait_for_socket_within(path, Duration::from_secs(2)).await
}

pub async fn wait_for_socket_within(path: &Path, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing listens on {} after {wait:?}", path.display());
}

/// Converts `message` (named `name`) from one version to another through the byte-level route
/// the proxy uses, and decodes the result with the losses reported.
pub fn convert<S: prost::Message, T: prost::Message + Default>(
    name: &str,
    from: CriVersion,
    to: CriVersion,
    message: &S,
) -> (T, Vec<cri_bridge::convert::Loss>) {
    let route = cri_bridge::convert::Route::new(name, from, to).expect("both versions have the message");
    let mut cx = cri_bridge::convert::Cx::new();
    let bytes = route.run(&message.encode_to_vec(), &mut cx).expect("converts");
    (T::decode(bytes.as_slice()).expect("decodes"), cx.into_losses())
}

/// The version cri-bridge speaks to its (first) runtime now, from its own status call; `None`
/// while it does not answer or knows no version yet.
pub async fn bridge_speaks(socket: &Path) -> Option<String> {
    let status: cri_bridge::control::BridgeStatus =
        cri_bridge::probe::ask_bridge(socket, cri_bridge::control::STATUS_PATH).await.ok()??;
    status.backends[0].version.clone()
}

/// Gives `runtime` `containers` containers, each in a pod of its own, labelled as a kubelet does.
pub async fn fill(runtime: &Runtime, containers: usize) {
    let memory = &runtime.memory;
    for i in 0..containers {
        let metadata = cri_bridge::api::v1::PodSandboxMetadata {
            name: format!("pod-{i}"),
            uid: format!("uid-{i}"),
            namespace: "ns".into(),
            attempt: 0,
        };
        let labels = [("app".to_string(), format!("app-{i}")), ("tier".to_string(), "web".to_string())].into();
        let config = cri_bridge::api::v1::PodSandboxConfig { metadata: Some(metadata), labels, ..Default::default() };
        let request =
            cri_bridge::api::v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
        let pod = memory.run_pod_sandbox(request).unwrap().pod_sandbox_id;
        let container = cri_bridge::api::v1::ContainerConfig {
            metadata: Some(cri_bridge::api::v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(cri_bridge::api::v1::ImageSpec {
                image: "docker.io/library/busybox:latest".into(),
                ..Default::default()
            }),
            labels: [("io.kubernetes.pod.name".to_string(), format!("pod-{i}"))].into(),
            ..Default::default()
        };
        let create = cri_bridge::api::v1::CreateContainerRequest {
            pod_sandbox_id: pod,
            config: Some(container),
            sandbox_config: Some(config),
        };
        memory.create_container(create).unwrap();
    }
}

/// A v1alpha2 pod's config, named `name`, as an old client sends one.
pub fn v1alpha2_pod(name: &str) -> cri_bridge::api::v1alpha2::PodSandboxConfig {
    cri_bridge::api::v1alpha2::PodSandboxConfig {
        metadata: Some(cri_bridge::api::v1alpha2::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
}

/// A v1 pod's config, named `name`.
pub fn v1_pod(name: &str) -> cri_bridge::api::v1::PodSandboxConfig {
    cri_bridge::api::v1::PodSandboxConfig {
        metadata: Some(cri_bridge::api::v1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
}
