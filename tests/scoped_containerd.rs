//! Scoped sockets (issue 38) in front of REAL containerd, 1.7.24 and 2.1.9 (both serve CRI v1,
//! which cri-bridge discovers), with real clients:
//!
//! 1. crictl 1.37 and 1.34 on a read-only socket: `version`, `ps -a`, `pods`, `images`, `inspect`
//!    and `inspectp` answer, and `inspect` shows no environment value: the container's
//!    `TOKEN=s3cret-…`, which `inspect` through the main socket shows (containerd's verbose info
//!    holds the OCI spec, its env included), is absent, since the read-only socket drops
//!    `verbose`. `exec -s`, `stop`, `rm`, `runp` and `pull` are refused PermissionDenied naming
//!    the read-only policy, and containerd, asked directly afterwards, shows none of them done.
//! 2. The grpc-go v1alpha2 session (`cri-session-v1alpha2`, which runs every step whatever the
//!    earlier ones answered) on the read-only socket: every mutating or shell step is refused
//!    PermissionDenied naming the RPC, the socket and the policy; every read step passes to
//!    containerd: those naming no id answer OK, the three naming the pod or container the refused
//!    creates never made (an empty id) get containerd's own answer to that id, asked directly.
//! 3. A pod-scoped socket and two real pods made through the main socket as a kubelet with the
//!    cgroupfs driver makes them (`cgroup_parent` `/kubepods/besteffort/pod<uid>`, the UID as
//!    `metadata.uid` and as the `io.kubernetes.pod.uid` label), each running a busybox `sleep`.
//!    crictl 1.37 and 1.34, run inside pod A's container's real cgroup (found from the
//!    container's `/proc/<pid>/cgroup`), list only A's containers, exec into A's container (really:
//!    it prints A's own environment), are refused an exec into or a stop of B's container, a
//!    privileged create in A and any create in B, while a plain create in A reaches containerd.
//!
//! The containerd builds here run runc with the cgroupfs driver (`Options::default()`:
//! `SystemdCgroup = false`), so cgroup parents are cgroupfs paths, as a kubelet with
//! `cgroupDriver: cgroupfs` gives them. Traffic is over unix sockets only (crictl's `exec -s` is
//! the CRI's ExecSync; no streaming URL is dialled; the pulls tried are refused before containerd).
//!
//! Needs root (containers, cgroups), runc and busybox-static, the 1.7.24 and 2.1.9 builds unpacked
//! by `tools/debian-unpack.sh`, both crictls built by `tools/go-peers.sh` and the Go clients built
//! by `tests/clients/go/build.sh`; fails, never skips, saying which is missing.

mod common;
mod containerd_support;

use containerd_support::{Build, Containerd, BUSYBOX_IMAGE};
use cri_bridge::access::pod::POD_UID_LABEL;
use cri_bridge::access::Policy;
use cri_bridge::api::v1;
use cri_bridge::config::ScopedEndpoint;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use tonic::Code;

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// The builds under test.
const BUILDS: [Build; 2] = [Build::V1_7, Build::V2_1];

/// The crictls under test: the newest, and the oldest cri-tools the module proxy serves.
const CRICTLS: [&str; 2] = ["1.37.0", "1.34.0"];

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1Images = v1::image_service_client::ImageServiceClient<tonic::transport::Channel>;

/// containerd `build`, and cri-bridge in front of it with one scoped socket.
struct Setup {
    ctd: Containerd,
    bridge: common::Bridge,
    dir: common::TempDir,
    /// The scoped socket.
    scoped: PathBuf,
    context: String,
}

impl Setup {
    async fn start(build: Build, socket_name: &str, policy: Policy) -> Setup {
        Setup::start_for(build, socket_name, |_| policy).await
    }

    /// As `start`, the policy made once containerd runs (its directories known).
    async fn start_for(build: Build, socket_name: &str, policy: impl FnOnce(&Containerd) -> Policy) -> Setup {
        containerd_support::require_prerequisites();
        let ctd = Containerd::start_build(build).await;
        let policy = policy(&ctd);
        let dir = common::TempDir::new("scoped-ctd");
        let scoped = dir.path(socket_name);
        let mut config = common::config(&dir, &ctd.socket, None);
        config.endpoints = vec![ScopedEndpoint { path: scoped.clone(), mode: 0o660, group: None, policy }];
        let bridge = common::Bridge::start(config).await;
        common::wait_for_socket(&scoped).await;
        let mut setup = Setup { ctd, bridge, dir, scoped, context: String::new() };
        // The build is the one named (containerd's own Version, through the main socket).
        let version = setup.main().version(v1::VersionRequest::default()).await.expect("Version").into_inner();
        assert_eq!(version.runtime_version, build.runtime_version(), "the containerd started");
        setup.context = format!("containerd {}", version.runtime_version);
        setup
    }

    /// A v1 client on cri-bridge's main socket (every RPC), as the kubelet.
    fn main(&self) -> V1Runtime {
        V1Runtime::new(common::channel(&self.bridge.socket))
    }

    /// A v1 client straight to containerd, bypassing cri-bridge: what containerd itself has.
    fn direct(&self) -> V1Runtime {
        V1Runtime::new(self.ctd.direct_channel())
    }

    fn direct_images(&self) -> V1Images {
        V1Images::new(self.ctd.direct_channel())
    }

    async fn direct_pods(&self) -> BTreeSet<String> {
        let listed = self.direct().list_pod_sandbox(v1::ListPodSandboxRequest::default()).await;
        listed.expect("direct ListPodSandbox").into_inner().items.into_iter().map(|p| p.id).collect()
    }

    /// containerd's containers and the state of each.
    async fn direct_containers(&self) -> Vec<(String, v1::ContainerState)> {
        let listed = self.direct().list_containers(v1::ListContainersRequest::default()).await;
        let containers = listed.expect("direct ListContainers").into_inner().containers;
        containers.into_iter().map(|c| (c.id.clone(), c.state())).collect()
    }

    /// Whether containerd has image `image` (asked directly).
    async fn direct_has_image(&self, image: &str) -> bool {
        let spec = Some(v1::ImageSpec { image: image.into(), ..Default::default() });
        let status = self.direct_images().image_status(v1::ImageStatusRequest { image: spec, verbose: false }).await;
        status.expect("direct ImageStatus").into_inner().image.is_some()
    }

    /// Stops and removes `pod` (its containers with it) through the main socket.
    async fn remove_pod(&self, pod: &str) {
        let mut main = self.main();
        let stop = v1::StopPodSandboxRequest { pod_sandbox_id: pod.into() };
        main.stop_pod_sandbox(stop).await.unwrap_or_else(|e| panic!("{}: StopPodSandbox: {e:?}", self.context));
        let remove = v1::RemovePodSandboxRequest { pod_sandbox_id: pod.into() };
        main.remove_pod_sandbox(remove).await.unwrap_or_else(|e| panic!("{}: RemovePodSandbox: {e:?}", self.context));
    }

    async fn stop(self) {
        self.bridge.stop().await;
        drop(self.dir);
        drop(self.ctd);
    }
}

/// A pod as the kubelet makes one, with its running container.
struct Pod {
    id: String,
    config: v1::PodSandboxConfig,
    uid: String,
    container: String,
}

/// The pod's config as the kubelet sends it: on the host network (no CNI here), its UID as
/// metadata and as the pod label, its cgroup under `cgroup_parent` (containerd's default when
/// empty).
fn pod_config(setup: &Setup, uid: &str, name: &str, cgroup_parent: &str) -> v1::PodSandboxConfig {
    let mut config = containerd_support::host_network_pod(name, &setup.ctd.pod_logs.join(name));
    if let Some(metadata) = config.metadata.as_mut() {
        metadata.uid = uid.into();
    }
    config.labels = [(POD_UID_LABEL.to_string(), uid.to_string())].into();
    if let Some(linux) = config.linux.as_mut() {
        linux.cgroup_parent = cgroup_parent.into();
    }
    config
}

/// The secret in the environment of pod `name`'s container.
fn secret(name: &str) -> String {
    format!("s3cret-{name}-{}", std::process::id())
}

/// Runs pod `name` (UID `uid`) through the main socket, and in it container `<name>-app`: busybox
/// sleeping, with `TOKEN` (the secret) and `POD` (the pod's name) in its environment.
async fn kubelet_pod(setup: &Setup, uid: &str, name: &str, cgroup_parent: &str) -> Pod {
    let config = pod_config(setup, uid, name, cgroup_parent);
    let mut main = setup.main();
    let run = v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
    let ran = main.run_pod_sandbox(run).await;
    let id =
        ran.unwrap_or_else(|e| panic!("{}: RunPodSandbox {name}: {e:?}", setup.context)).into_inner().pod_sandbox_id;
    let envs = vec![
        v1::KeyValue { key: "TOKEN".into(), value: secret(name).into_bytes() },
        v1::KeyValue { key: "POD".into(), value: name.as_bytes().to_vec() },
    ];
    let pod = Pod { id, config, uid: uid.into(), container: String::new() };
    let container = create_container(setup, &pod, &format!("{name}-app"), envs).await;
    let start = main.start_container(v1::StartContainerRequest { container_id: container.clone() }).await;
    start.unwrap_or_else(|e| panic!("{}: StartContainer {name}: {e:?}", setup.context));
    Pod { container, ..pod }
}

/// Creates (does not start) container `name` in `pod` through the main socket: `sleep 3600`.
async fn create_container(setup: &Setup, pod: &Pod, name: &str, envs: Vec<v1::KeyValue>) -> String {
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: pod.id.clone(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: BUSYBOX_IMAGE.into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            envs,
            labels: [(POD_UID_LABEL.to_string(), pod.uid.clone())].into(),
            log_path: format!("{name}.log"),
            ..Default::default()
        }),
        sandbox_config: Some(pod.config.clone()),
    };
    let created = setup.main().create_container(create).await;
    created.unwrap_or_else(|e| panic!("{}: CreateContainer {name}: {e:?}", setup.context)).into_inner().container_id
}

/// A crictl of `version` on `socket`, run from the test's own cgroup or, with `cgroup_procs`,
/// moved first into that cgroup (its `cgroup.procs`), as a process of that container would be.
struct Crictl {
    binary: PathBuf,
    endpoint: String,
    cgroup_procs: Option<PathBuf>,
    version: &'static str,
}

impl Crictl {
    fn new(version: &'static str, socket: &Path, cgroup_procs: Option<PathBuf>) -> Crictl {
        let binary = Path::new(TOP).join("target/peers").join(format!("crictl-{version}"));
        assert!(binary.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {TOP}", binary.display());
        Crictl { binary, endpoint: format!("unix://{}", socket.display()), cgroup_procs, version }
    }

    /// Runs `crictl args` to its end (tokio's process: the test's runtime serves cri-bridge).
    async fn run(&self, args: &[&str]) -> Output {
        let mut command = match &self.cgroup_procs {
            None => tokio::process::Command::new(&self.binary),
            Some(procs) => {
                let mut command = tokio::process::Command::new("sh");
                let script = format!("echo $$ > {} && exec \"$@\"", procs.display());
                command.arg("-c").arg(script).arg("sh").arg(&self.binary);
                command
            }
        };
        command
            .args(["--runtime-endpoint", &self.endpoint, "--image-endpoint", &self.endpoint, "--timeout", "30s"])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command.output().await.unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()))
    }

    /// `crictl args`, which must succeed: its stdout.
    async fn ok(&self, context: &str, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(output.status.success(), "{context}: crictl {} {args:?} failed: {}", self.version, text(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `crictl args`, which must be refused PERMISSION_DENIED by `policy`, printing nothing on
    /// stdout: what it printed on stderr.
    async fn refused(&self, context: &str, args: &[&str], policy: &str) -> String {
        let output = self.run(args).await;
        let said = text(&output);
        assert!(output.stdout.is_empty(), "{context}: crictl {} {args:?} printed a result: {said}", self.version);
        assert!(!output.status.success(), "{context}: crictl {} {args:?} must be refused: {said}", self.version);
        assert!(
            said.contains("PermissionDenied") && said.contains(&format!("(policy {policy})")),
            "{context}: crictl {} {args:?} is refused PermissionDenied by the {policy} policy: {said}",
            self.version
        );
        said
    }
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn lines(stdout: &str) -> BTreeSet<String> {
    stdout.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
}

/// Writes `json` to `dir/name`, for crictl.
fn json_file(dir: &common::TempDir, name: &str, json: &Value) -> String {
    let path = dir.path(name);
    std::fs::write(&path, serde_json::to_vec_pretty(json).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

/// A pod's config in crictl's JSON (the CRI's field names), on the host network.
fn pod_json(name: &str, uid: &str, cgroup_parent: &str) -> Value {
    serde_json::json!({
        "metadata": { "name": name, "uid": uid, "namespace": "cri-bridge-test" },
        "labels": { POD_UID_LABEL: uid },
        "linux": {
            "cgroup_parent": cgroup_parent,
            "security_context": { "namespace_options": { "network": v1::NamespaceMode::Node as i32 } },
        },
    })
}

/// A container's config in crictl's JSON: busybox sleeping, labelled as pod `uid`'s.
fn container_json(name: &str, uid: &str, privileged: bool) -> Value {
    let mut json = serde_json::json!({
        "metadata": { "name": name },
        "image": { "image": BUSYBOX_IMAGE },
        "command": ["sleep", "3600"],
        "labels": { POD_UID_LABEL: uid },
    });
    if privileged {
        json["linux"] = serde_json::json!({ "security_context": { "privileged": true } });
    }
    json
}

/// Item 1: crictl reads through the read-only socket, sees no environment, changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crictl_on_a_read_only_socket_reads_without_the_environment_and_changes_nothing() {
    for build in BUILDS {
        let setup = Setup::start(build, "read-only.sock", Policy::ReadOnly).await;
        let context = setup.context.clone();
        let uid = format!("{:08x}-0000-4000-8000-00000000000{}", std::process::id(), build as u8);
        let pod = kubelet_pod(&setup, &uid, "ro", "").await;
        // Created, never started: what a plain `crictl rm` (no -f) asks to remove.
        let idle = create_container(&setup, &pod, "ro-idle", Vec::new()).await;
        let secret = secret("ro");

        // The main socket passes `verbose` on: containerd's info holds the OCI spec's env.
        let main = Crictl::new("1.37.0", &setup.bridge.socket, None);
        let shown = main.ok(&context, &["inspect", &pod.container]).await;
        assert!(shown.contains(&format!("TOKEN={secret}")), "{context}: inspect on the main socket: {shown}");

        for version in CRICTLS {
            let crictl = Crictl::new(version, &setup.scoped, None);
            let context = format!("{context}, crictl {version} on the read-only socket");
            let said = crictl.ok(&context, &["version"]).await;
            assert!(said.contains(build.runtime_version()), "{context}: version: {said}");
            let ps = crictl.ok(&context, &["ps", "-a"]).await;
            assert!(ps.contains(&pod.container[..13]) && ps.contains("ro-app"), "{context}: ps -a: {ps}");
            let ids = crictl.ok(&context, &["ps", "-a", "-q"]).await;
            assert_eq!(lines(&ids), [pod.container.clone(), idle.clone()].into(), "{context}: ps -a -q");
            let pods = crictl.ok(&context, &["pods"]).await;
            assert!(pods.contains(&pod.id[..13]) && pods.contains("ro"), "{context}: pods: {pods}");
            let images = crictl.ok(&context, &["images"]).await;
            assert!(images.contains("cri-bridge.test/busybox"), "{context}: images: {images}");
            let inspect = crictl.ok(&context, &["inspect", &pod.container]).await;
            assert!(inspect.contains(&pod.container), "{context}: inspect: {inspect}");
            assert!(inspect.contains("CONTAINER_RUNNING"), "{context}: inspect shows the state: {inspect}");
            assert!(!inspect.contains("s3cret"), "{context}: inspect shows no environment value: {inspect}");
            assert!(!inspect.contains("runtimeSpec"), "{context}: no verbose info at all: {inspect}");
            let inspectp = crictl.ok(&context, &["inspectp", &pod.id]).await;
            assert!(inspectp.contains(&pod.id) && inspectp.contains("SANDBOX_READY"), "{context}: {inspectp}");
            assert!(!inspectp.contains("s3cret"), "{context}: inspectp: {inspectp}");

            for (args, rpc) in [
                (vec!["exec", "-s", &pod.container, "echo", "hello"], "RuntimeService/ExecSync"),
                (vec!["stop", &pod.container], "RuntimeService/StopContainer"),
                (vec!["rm", &idle], "RuntimeService/RemoveContainer"),
            ] {
                let said = crictl.refused(&context, &args, "read-only").await;
                assert!(said.contains(rpc), "{context}: {args:?} names {rpc}: {said}");
            }
            let pod_file = json_file(&setup.dir, "runp.json", &pod_json("ro-new", &uid, ""));
            let said = crictl.refused(&context, &["runp", &pod_file], "read-only").await;
            assert!(said.contains("RuntimeService/RunPodSandbox"), "{context}: runp: {said}");
            let said = crictl.refused(&context, &["pull", &setup.ctd.pullable_image()], "read-only").await;
            assert!(said.contains("ImageService/PullImage"), "{context}: pull: {said}");
        }

        // containerd, asked directly: none of it happened.
        let containers = setup.direct_containers().await;
        let expected = vec![
            (pod.container.clone(), v1::ContainerState::ContainerRunning),
            (idle.clone(), v1::ContainerState::ContainerCreated),
        ];
        assert_eq!(containers.into_iter().collect::<BTreeSet<_>>(), expected.into_iter().collect(), "{context}");
        assert_eq!(setup.direct_pods().await, [pod.id.clone()].into(), "{context}: no pod was run");
        assert!(!setup.direct_has_image(&setup.ctd.pullable_image()).await, "{context}: nothing was pulled");

        setup.remove_pod(&pod.id).await;
        setup.stop().await;
    }
}

/// The steps of `cri-session-v1alpha2`, in order (tests/clients/go/session.go).
const SESSION_STEPS: &[&str] = &[
    "Version",
    "Status",
    "ImageFsInfo",
    "PullImage",
    "ListImages",
    "ImageStatus",
    "RunPodSandbox",
    "PodSandboxStatus",
    "ListPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "ExecSync",
    "Exec",
    "ListContainers",
    "ContainerStats",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
    "RemoveImage",
];

/// The session's steps that only read (by the CRI's meaning, not by cri-bridge's classes).
const READ_STEPS: &[&str] = &[
    "Version",
    "Status",
    "ImageFsInfo",
    "ListImages",
    "ImageStatus",
    "PodSandboxStatus",
    "ListPodSandbox",
    "ContainerStatus",
    "ListContainers",
    "ContainerStats",
];

const IMAGE_STEPS: &[&str] = &["ImageFsInfo", "PullImage", "ListImages", "ImageStatus", "RemoveImage"];

/// grpc-go's name of a code (`status.Code.String()`).
fn go_code(code: Code) -> String {
    match code {
        Code::Ok => "OK".into(),
        Code::Cancelled => "Canceled".into(),
        other => format!("{other:?}"),
    }
}

/// What containerd itself answers, asked directly, to the session's read `step` naming the id
/// the session has when its creates were refused: none (empty).
async fn direct_answer_to_empty_id(setup: &Setup, step: &str) -> String {
    let mut direct = setup.direct();
    let code = match step {
        "PodSandboxStatus" => {
            let request = v1::PodSandboxStatusRequest { pod_sandbox_id: String::new(), verbose: true };
            direct.pod_sandbox_status(request).await.err().map(|e| e.code())
        }
        "ContainerStatus" => {
            let request = v1::ContainerStatusRequest { container_id: String::new(), verbose: true };
            direct.container_status(request).await.err().map(|e| e.code())
        }
        "ContainerStats" => {
            let request = v1::ContainerStatsRequest { container_id: String::new() };
            direct.container_stats(request).await.err().map(|e| e.code())
        }
        other => unreachable!("{other} names no id"),
    };
    go_code(code.unwrap_or(Code::Ok))
}

/// Item 2: the grpc-go v1alpha2 session on the read-only socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha2_grpc_go_session_on_a_read_only_socket_reads_and_is_refused_every_change() {
    let binary = Path::new(TOP).join("target/clients/bin/cri-session-v1alpha2");
    assert!(binary.is_file(), "{} is missing: run `bash tests/clients/go/build.sh`", binary.display());
    for build in BUILDS {
        let setup = Setup::start(build, "read-only.sock", Policy::ReadOnly).await;
        let context = format!("{}, cri-session-v1alpha2 on the read-only socket", setup.context);
        let uid = format!("{:08x}-0000-4000-8000-0000000001{:02x}", std::process::id(), build as u8);
        let pod = kubelet_pod(&setup, &uid, "watched", "").await;
        let socket = setup.scoped.display().to_string();

        let output = tokio::process::Command::new(&binary)
            .args(["-socket", &socket, "-image", BUSYBOX_IMAGE, "-timeout", "30s"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("start cri-session-v1alpha2");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{context}: {}\n{stdout}\n{}", output.status, text(&output));
        let steps: Vec<Value> =
            stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
        let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap_or("?")).collect();
        assert_eq!(names, SESSION_STEPS, "{context}: the session runs every step, refused or not");

        for step in &steps {
            let name = step["step"].as_str().unwrap();
            let code = step["code"].as_str().unwrap_or("?");
            let message = step["message"].as_str().unwrap_or("");
            println!("{context}: {name}: {code} {message}");
            if READ_STEPS.contains(&name) {
                let expected = match name {
                    "PodSandboxStatus" | "ContainerStatus" | "ContainerStats" => {
                        direct_answer_to_empty_id(&setup, name).await
                    }
                    _ => "OK".to_string(),
                };
                assert_ne!(code, "PermissionDenied", "{context}: the read {name} is not refused: {message}");
                assert_eq!(code, expected, "{context}: {name} gets containerd's own answer: {message}");
            } else {
                let service = if IMAGE_STEPS.contains(&name) { "ImageService" } else { "RuntimeService" };
                assert_eq!(code, "PermissionDenied", "{context}: {name} must be refused: {message}");
                let named = format!("{service}/{name}: denied on {socket} (policy read-only)");
                assert!(message.starts_with(&named), "{context}: {name}: the denial names {named}: {message}");
            }
        }
        let step = |name: &str| steps.iter().find(|s| s["step"] == name).unwrap();
        // Reads carry containerd's real answers; a verbose Status none of its info.
        assert_eq!(step("Version")["response"]["runtime_version"], build.runtime_version(), "{context}");
        let listed = step("ListContainers")["response"].to_string();
        assert!(listed.contains(&pod.container), "{context}: ListContainers shows the pod's container: {listed}");
        let images = step("ListImages")["response"].to_string();
        assert!(images.contains(BUSYBOX_IMAGE), "{context}: ListImages: {images}");
        let info = &step("Status")["response"]["info"];
        assert!(info.is_null() || info.as_object().is_some_and(|o| o.is_empty()), "{context}: Status info: {info}");
        let direct = setup.main().status(v1::StatusRequest { verbose: true }).await.expect("Status").into_inner();
        assert!(!direct.info.is_empty(), "{context}: the main socket's verbose Status has containerd's info");

        // containerd, asked directly: nothing changed.
        assert_eq!(setup.direct_pods().await, [pod.id.clone()].into(), "{context}: no pod was run");
        let containers: Vec<String> = setup.direct_containers().await.into_iter().map(|(id, _)| id).collect();
        assert_eq!(containers, vec![pod.container.clone()], "{context}: no container was made");
        assert!(setup.direct_has_image(BUSYBOX_IMAGE).await, "{context}: the image was not removed");

        setup.remove_pod(&pod.id).await;
        setup.stop().await;
    }
}

/// The kubelet-like cgroups (`/kubepods/besteffort/pod<uid>` in each hierarchy) that do not exist
/// yet: runc makes them for the pods' containers, and they are removed (when empty) on drop.
struct KubeletCgroups {
    absent: Vec<PathBuf>,
}

impl KubeletCgroups {
    fn claim(pod_uids: &[&str]) -> KubeletCgroups {
        let root = Path::new("/sys/fs/cgroup");
        let hierarchies: Vec<PathBuf> = if root.join("cgroup.controllers").exists() {
            vec![root.to_path_buf()]
        } else {
            let entries = std::fs::read_dir(root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
            // Real directories only: `cpu,cpuacct` and the like are symlinks to one of them.
            let dirs = entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir()));
            dirs.map(|e| e.path()).filter(|p| p.join("cgroup.procs").exists()).collect()
        };
        let mut relative = vec![PathBuf::from("kubepods"), PathBuf::from("kubepods/besteffort")];
        relative.extend(pod_uids.iter().map(|uid| Path::new("kubepods/besteffort").join(format!("pod{uid}"))));
        let mut absent: Vec<PathBuf> =
            hierarchies.iter().flat_map(|h| relative.iter().map(move |r| h.join(r))).filter(|p| !p.exists()).collect();
        // Deepest first.
        absent.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        KubeletCgroups { absent }
    }
}

impl Drop for KubeletCgroups {
    fn drop(&mut self) {
        for dir in &self.absent {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The pid of `container`'s process, from containerd's verbose info (through the main socket).
async fn container_pid(setup: &Setup, container: &str) -> u32 {
    let request = v1::ContainerStatusRequest { container_id: container.into(), verbose: true };
    let status = setup.main().container_status(request).await.expect("ContainerStatus").into_inner();
    let info: Value = serde_json::from_str(status.info.get("info").expect("verbose info")).expect("info is JSON");
    info["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0).unwrap_or_else(|| {
        panic!("{}: no pid in {container}'s info: {}", setup.context, info["pid"]);
    })
}

/// The `cgroup.procs` of the cgroup a process is in, from its `/proc/<pid>/cgroup`: the unified
/// hierarchy's where it is the only one, else the v1 `pids` hierarchy's.
fn cgroup_procs_of(cgroup: &str) -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    let unified = root.join("cgroup.controllers").exists();
    let (mount, path) = cgroup
        .lines()
        .find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            match unified {
                true => (controllers.is_empty()).then(|| (root.to_path_buf(), path)),
                false => controllers.split(',').any(|c| c == "pids").then(|| (root.join("pids"), path)),
            }
        })
        .unwrap_or_else(|| panic!("no cgroup to join in {cgroup}"));
    mount.join(path.trim_start_matches('/')).join("cgroup.procs")
}

/// Item 3: crictl inside pod A's container's cgroup, on the pod-scoped socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crictl_in_a_real_pods_container_cgroup_is_held_to_its_pod() {
    for build in BUILDS {
        // Distinct per build and per test process (other tests may hold pods of their own).
        let uid = |n: u8| format!("{:08x}-c0de-4000-8000-0000000002{:x}{n:x}", std::process::id(), build as u8);
        let (uid_a, uid_b) = (uid(0xa), uid(0xb));
        let parent = |uid: &str| format!("/kubepods/besteffort/pod{uid}");
        let cgroups = KubeletCgroups::claim(&[&uid_a, &uid_b]);
        let host_paths = Vec::new();
        let setup = Setup::start(
            build,
            "pod.sock",
            Policy::PodScoped { host_paths, seccomp_profiles: Vec::new(), apparmor_profiles: Vec::new() },
        )
        .await;
        let context = setup.context.clone();
        let a = kubelet_pod(&setup, &uid_a, "a", &parent(&uid_a)).await;
        let b = kubelet_pod(&setup, &uid_b, "b", &parent(&uid_b)).await;

        // Where containerd (runc, cgroupfs) put A's container: under the pod's cgroup parent,
        // named by its id, which is how cri-bridge tells a caller's pod.
        let pid = container_pid(&setup, &a.container).await;
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let expected = format!("{}/{}", parent(&uid_a), a.container);
        assert!(cgroup.lines().any(|l| l.ends_with(&expected)), "{context}: A's container's cgroup: {cgroup}");
        assert_eq!(
            cri_bridge::callers::pod_and_container(&cgroup),
            (Some(uid_a.clone()), Some(a.container.clone())),
            "{context}: {cgroup}"
        );
        let procs = cgroup_procs_of(&cgroup);
        let members = std::fs::read_to_string(&procs).unwrap_or_else(|e| panic!("{}: {e}", procs.display()));
        assert!(members.lines().any(|p| p == pid.to_string()), "{context}: {} holds {pid}", procs.display());

        let mut a_containers: BTreeSet<String> = [a.container.clone()].into();
        for version in CRICTLS {
            let agent = Crictl::new(version, &setup.scoped, Some(procs.clone()));
            let context = format!("{context}, crictl {version} in pod A's container's cgroup");
            let listed = agent.ok(&context, &["ps", "-a", "-q"]).await;
            assert_eq!(lines(&listed), a_containers, "{context}: ps -a -q lists A's containers only");
            let pods = agent.ok(&context, &["pods", "-q"]).await;
            assert_eq!(lines(&pods), [a.id.clone()].into(), "{context}: pods -q");

            // A real exec into A's container: it answers, with A's own environment.
            let hello = agent.ok(&context, &["exec", "-s", &a.container, "echo", "hello"]).await;
            assert_eq!(hello.trim(), "hello", "{context}: exec into A's container");
            let own = agent.ok(&context, &["exec", "-s", &a.container, "sh", "-c", "echo in pod $POD"]).await;
            assert_eq!(own.trim(), "in pod a", "{context}: the exec ran in A's container");

            // B's container: refused, and untouched.
            let said = agent.refused(&context, &["exec", "-s", &b.container, "echo", "hello"], "pod-scoped").await;
            assert!(
                said.contains("RuntimeService/ExecSync") && said.contains("not the caller's pod's"),
                "{context}: {said}"
            );
            agent.refused(&context, &["stop", &b.container], "pod-scoped").await;

            // Creates: none privileged, none in B; a plain one in A reaches containerd.
            let tag = version.replace('.', "-");
            let pod_a = json_file(&setup.dir, "pod-a.json", &pod_json("a", &uid_a, &parent(&uid_a)));
            let pod_b = json_file(&setup.dir, "pod-b.json", &pod_json("b", &uid_b, &parent(&uid_b)));
            let privileged = container_json(&format!("privileged-{tag}"), &uid_a, true);
            let privileged = json_file(&setup.dir, "privileged.json", &privileged);
            let said = agent.refused(&context, &["create", &a.id, &privileged, &pod_a], "pod-scoped").await;
            assert!(said.contains("privileged"), "{context}: the refusal says why: {said}");
            let in_b = json_file(&setup.dir, "in-b.json", &container_json(&format!("in-b-{tag}"), &uid_b, false));
            agent.refused(&context, &["create", &b.id, &in_b, &pod_b], "pod-scoped").await;
            let plain = json_file(&setup.dir, "plain.json", &container_json(&format!("plain-{tag}"), &uid_a, false));
            let created = agent.ok(&context, &["create", &a.id, &plain, &pod_a]).await;
            let created = created.trim().to_string();
            assert_eq!(created.len(), 64, "{context}: create printed the new container's id: {created}");
            a_containers.insert(created);

            // The same crictl outside any pod: refused.
            let outside = Crictl::new(version, &setup.scoped, None);
            let said = outside.refused(&context, &["ps", "-a"], "pod-scoped").await;
            assert!(said.contains("runs in no pod"), "{context}: outside any pod: {said}");
        }

        // containerd, asked directly: B's container runs on; A has what the agent created.
        let containers = setup.direct_containers().await;
        assert!(
            containers.contains(&(b.container.clone(), v1::ContainerState::ContainerRunning)),
            "{context}: B's container runs on: {containers:?}"
        );
        let ids: BTreeSet<String> = containers.into_iter().map(|(id, _)| id).collect();
        let mut expected = a_containers.clone();
        expected.insert(b.container.clone());
        assert_eq!(ids, expected, "{context}: only the plain creates in A were made");
        assert_eq!(setup.direct_pods().await, [a.id.clone(), b.id.clone()].into(), "{context}");

        setup.remove_pod(&a.id).await;
        setup.remove_pod(&b.id).await;
        setup.stop().await;
        drop(cgroups);
    }
}

/// The fields of a container's process that show how it is confined: its seccomp mode (2: a
/// filter) and whether `/proc/sys` is mounted read-only, from inside it (ExecSync through the
/// main socket, as `kubectl exec` would).
async fn confinement(setup: &Setup, container: &str) -> (String, bool) {
    let exec = |cmd: &[&str]| v1::ExecSyncRequest {
        container_id: container.into(),
        cmd: cmd.iter().map(|c| c.to_string()).collect(),
        timeout: 10,
    };
    let mut main = setup.main();
    let status = main.exec_sync(exec(&["grep", "^Seccomp:", "/proc/self/status"])).await.expect("ExecSync");
    let seccomp =
        String::from_utf8_lossy(&status.into_inner().stdout).split_whitespace().nth(1).unwrap_or("").to_string();
    let mounts = main.exec_sync(exec(&["cat", "/proc/self/mountinfo"])).await.expect("ExecSync").into_inner();
    let mounts = String::from_utf8_lossy(&mounts.stdout).into_owned();
    // A mountinfo line: id parent major:minor root mount-point options …
    let read_only = mounts.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(4) == Some(&"/proc/sys") && fields.get(5).is_some_and(|o| o.split(',').any(|o| o == "ro"))
    });
    (seccomp, read_only)
}

/// Issue 47, findings 2–4 and 7, with containerd 2.4.2 applying what it is sent. crictl 1.37 in
/// pod A's container's real cgroup, on a pod-scoped socket whose `host_paths` are a directory of
/// the test's and containerd's pod log directory:
/// - a create with no security context at all (no `/proc` lists, no seccomp profile), whose
///   `sandbox_config` names pod B's cgroup parent, makes a container that finds `/proc/sys`
///   read-only, runs under a seccomp filter, and runs in pod A's cgroup: before the fix,
///   containerd applied no lists (`/proc/sys` writable: `core_pattern` runs a command as host
///   root), no seccomp, and put it in B's cgroup;
/// - a mount whose host path under `host_paths` passes a planted symlink to `/`, a log path
///   whose directory is such a symlink, and a checkpoint written through one are refused, and
///   nothing of the host outside `host_paths` is seen; so is a mount below what another
///   container mounts read-write (it could plant the symlink after the check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_scoped_create_gets_what_baseline_allows_as_containerd_applies_it() {
    let build = Build::V2_4;
    let uid = |n: u8| format!("{:08x}-c0de-4000-8000-0000000047{n:02x}", std::process::id());
    let (uid_a, uid_b) = (uid(0xa), uid(0xb));
    let parent = |uid: &str| format!("/kubepods/besteffort/pod{uid}");
    let cgroups = KubeletCgroups::claim(&[&uid_a, &uid_b]);
    let dir = common::TempDir::new("scoped-47");
    let host = dir.path("host");
    std::fs::create_dir_all(host.join("data")).unwrap();
    std::fs::create_dir_all(host.join("shared/sub")).unwrap();
    // The escape a container of the node would plant: a symlink to the host's root.
    std::os::unix::fs::symlink("/", host.join("data/x")).unwrap();
    let setup = Setup::start_for(build, "pod.sock", |ctd| Policy::PodScoped {
        host_paths: vec![host.clone(), ctd.pod_logs.clone()],
        seccomp_profiles: Vec::new(),
        apparmor_profiles: Vec::new(),
    })
    .await;
    let context = setup.context.clone();
    let a = kubelet_pod(&setup, &uid_a, "a", &parent(&uid_a)).await;
    let b = kubelet_pod(&setup, &uid_b, "b", &parent(&uid_b)).await;
    let pid = container_pid(&setup, &a.container).await;
    let procs = cgroup_procs_of(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap());
    let agent = Crictl::new("1.37.0", &setup.scoped, Some(procs));

    // A bare create, its sandbox config naming B's cgroup parent.
    let bare = json_file(&setup.dir, "bare.json", &container_json("bare", &uid_a, false));
    let a_as_b = json_file(&setup.dir, "a-as-b.json", &pod_json("a", &uid_a, &parent(&uid_b)));
    let created = agent.ok(&context, &["create", &a.id, &bare, &a_as_b]).await.trim().to_string();
    agent.ok(&context, &["start", &created]).await;
    let (seccomp, read_only) = confinement(&setup, &created).await;
    eprintln!("{context}: seccomp {seccomp}, /proc/sys read-only {read_only}");
    assert_eq!(seccomp, "2", "{context}: the container runs under a seccomp filter (RuntimeDefault)");
    assert!(read_only, "{context}: /proc/sys is read-only in the container");
    let pid = container_pid(&setup, &created).await;
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(
        cgroup.contains(&parent(&uid_a)) && !cgroup.contains(&parent(&uid_b)),
        "{context}: the container runs in its own pod's cgroup: {cgroup}"
    );
    // The kubelet's own container, for comparison: the same confinement.
    assert_eq!(confinement(&setup, &a.container).await.0, "0", "{context}: the test's kubelet sent no profile");

    // Symlinks planted under host_paths: a mount, the log file, a checkpoint.
    let mut through_link = container_json("link", &uid_a, false);
    through_link["mounts"] = serde_json::json!([{ "host_path": host.join("data/x/etc").to_str().unwrap(),
        "container_path": "/host-etc", "readonly": true }]);
    let through_link = json_file(&setup.dir, "link.json", &through_link);
    let pod_a = json_file(&setup.dir, "pod-a.json", &pod_json("a", &uid_a, &parent(&uid_a)));
    let said = agent.refused(&context, &["create", &a.id, &through_link, &pod_a], "pod-scoped").await;
    assert!(said.contains("symlink"), "{context}: the refusal names the symlink: {said}");
    let logs_of_a = setup.ctd.pod_logs.join("a");
    std::fs::create_dir_all(&logs_of_a).unwrap();
    std::os::unix::fs::symlink("/etc", logs_of_a.join("evil")).unwrap();
    let mut logged = container_json("logged", &uid_a, false);
    logged["log_path"] = "evil/passwd".into();
    let logged = json_file(&setup.dir, "logged.json", &logged);
    let said = agent.refused(&context, &["create", &a.id, &logged, &pod_a], "pod-scoped").await;
    assert!(said.contains("symlink"), "{context}: {said}");
    let export = host.join("data/x/tmp/cp.tar");
    let said =
        agent.refused(&context, &["checkpoint", "--export", export.to_str().unwrap(), &created], "pod-scoped").await;
    assert!(said.contains("symlink"), "{context}: {said}");

    // A directory another container may write: made through the main socket (a kubelet's
    // hostPath volume) with a read-write mount of `shared`; a pod-scoped mount below it is refused.
    let writer = v1::CreateContainerRequest {
        pod_sandbox_id: b.id.clone(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "writer".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: BUSYBOX_IMAGE.into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            labels: [(POD_UID_LABEL.to_string(), uid_b.clone())].into(),
            mounts: vec![v1::Mount {
                host_path: host.join("shared").to_str().unwrap().into(),
                container_path: "/shared".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        sandbox_config: Some(b.config.clone()),
    };
    let writer = setup.main().create_container(writer).await.expect("the kubelet's create").into_inner().container_id;
    let mut below = container_json("below", &uid_a, false);
    below["mounts"] = serde_json::json!([{ "host_path": host.join("shared/sub").to_str().unwrap(),
        "container_path": "/sub", "readonly": true }]);
    let below = json_file(&setup.dir, "below.json", &below);
    let said = agent.refused(&context, &["create", &a.id, &below, &pod_a], "pod-scoped").await;
    assert!(said.contains("can write"), "{context}: {said}");
    // A plain read-only mount of host_paths with no symlink and no writer is let through.
    let mut plain = container_json("plain-mount", &uid_a, false);
    plain["mounts"] = serde_json::json!([{ "host_path": host.join("data").to_str().unwrap(),
        "container_path": "/data", "readonly": true }]);
    let plain = json_file(&setup.dir, "plain-mount.json", &plain);
    agent.ok(&context, &["create", &a.id, &plain, &pod_a]).await;

    // containerd, asked directly: nothing made through the refused creates.
    let names: BTreeSet<String> = {
        let listed = setup.direct().list_containers(v1::ListContainersRequest::default()).await.unwrap();
        listed.into_inner().containers.into_iter().filter_map(|c| c.metadata.map(|m| m.name)).collect()
    };
    for refused in ["link", "logged", "below"] {
        assert!(!names.contains(refused), "{context}: {refused} was made: {names:?}");
    }
    assert!(setup.direct_containers().await.iter().any(|(id, _)| *id == writer), "{context}: the kubelet's writer");
    setup.remove_pod(&a.id).await;
    setup.remove_pod(&b.id).await;
    setup.stop().await;
    drop((cgroups, dir));
}
