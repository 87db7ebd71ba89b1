//! The pod-scoped socket holds as the runtime applies a request (issue 47, commit 99b1ef7), with
//! real processes in a kubelet-like pod cgroup: crictl 1.37 and `cri-bridge probe` / `callers`
//! run inside pod A's cgroup, against the cri-bridge binary over the in-memory runtime, and what
//! reached the runtime read back through the main socket (the in-memory runtime's verbose
//! `ContainerStatus` info: the security context it was sent and the `sandbox_config` its create
//! carried). Needs root (cgroups) and `bash tools/go-peers.sh`.
//!
//! Each test says in a comment why it fails on the code before the fix (`99b1ef7~1`).

mod common;

use common::pod_cgroup::PodCgroup;
use common::process::{wait_for_listener, Reaped};
use common::{channel, Runtime, TempDir};
use cri_bridge::access::create::KUBELET_READONLY_PATHS;
use cri_bridge::access::pod::POD_UID_LABEL;
use cri_bridge::api::v1;
use cri_bridge::CriVersion::V1;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

const TOP: &str = env!("CARGO_MANIFEST_DIR");
const POD_A: &str = "6c1d2e3f-4a5b-4c6d-8e7f-a0b1c2d3e4f5";
const POD_B: &str = "7d2e3f4a-5b6c-4d7e-8f90-b1c2d3e4f5a6";
/// The agent's own container, as its cgroup names it.
const AGENT: &str = "cd0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd";

type RuntimeClient = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// The tests share the kubelet-like cgroup directories: one at a time, so that each removes
/// what it made.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn crictl() -> PathBuf {
    let path = Path::new(TOP).join("target/peers/crictl-1.37.0");
    assert!(path.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {TOP}", path.display());
    path
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A pod as the kubelet makes one, and its first container (with a log file).
struct KubeletPod {
    id: String,
    container: String,
    config: v1::PodSandboxConfig,
}

/// The cri-bridge binary (JSON log, metrics on a loopback port) in front of the in-memory
/// runtime, with a pod-scoped socket whose `host_paths` is `<dir>/hp` and whose
/// `localhost_profiles.seccomp` lists `profiles/listed.json`; pods A and B made through the main
/// socket as a kubelet makes them (log directories under `host_paths`, cgroup parents,
/// annotations); and the agent's cgroup in pod A.
struct Setup {
    dir: TempDir,
    runtime: Runtime,
    daemon: Reaped,
    log: PathBuf,
    port: u16,
    scoped: PathBuf,
    main: RuntimeClient,
    hp: PathBuf,
    a: KubeletPod,
    b: KubeletPod,
    agent: PodCgroup,
}

impl Setup {
    async fn start(name: &str) -> Setup {
        let dir = TempDir::new(name);
        let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
        let hp = dir.path("hp");
        std::fs::create_dir_all(hp.join("pods")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let scoped = dir.path("pod.sock");
        let config = format!(
            "listen:\n  path: {}\nbackend:\n  endpoint: unix://{}\nlog:\n  format: json\n  level: warn\nmetrics:\n  \
             listen: 127.0.0.1:{port}\nendpoints:\n  - path: {}\n    policy: pod-scoped\n    host_paths: [{}]\n    \
             localhost_profiles:\n      seccomp: [profiles/listed.json]\n",
            dir.path("bridge.sock").display(),
            dir.path("runtime.sock").display(),
            scoped.display(),
            hp.display(),
        );
        std::fs::write(dir.path("config.yaml"), config).unwrap();
        let log = dir.path("stderr.log");
        let mut daemon = Reaped(
            std::process::Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
                .args(["serve", "--config"])
                .arg(dir.path("config.yaml"))
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        wait_for_listener(&mut daemon, &scoped).await;
        wait_for_listener(&mut daemon, &dir.path("bridge.sock")).await;
        let mut main = RuntimeClient::new(channel(&dir.path("bridge.sock")));
        let a = kubelet_pod(&mut main, &hp, POD_A, "a").await;
        let b = kubelet_pod(&mut main, &hp, POD_B, "b").await;
        let agent = PodCgroup::new(POD_A, AGENT);
        Setup { dir, runtime, daemon, log, port, scoped, main, hp, a, b, agent }
    }

    /// crictl 1.37 in pod A's cgroup, on the pod-scoped socket.
    fn crictl(&self, args: &[&str]) -> Output {
        let endpoint = format!("unix://{}", self.scoped.display());
        let mut all = vec!["--runtime-endpoint", &endpoint, "--image-endpoint", &endpoint, "--timeout", "10s"];
        all.extend_from_slice(args);
        self.agent.run(&crictl(), &all)
    }

    /// `crictl create <pod A> <container> <pod>` from pod A, with `container` and `pod` as
    /// crictl's JSON files.
    fn create(&self, container: &Value, pod: &Value) -> Output {
        let name = container["metadata"]["name"].as_str().unwrap();
        let (container_file, pod_file) =
            (self.dir.path(&format!("{name}.json")), self.dir.path(&format!("{name}-pod.json")));
        std::fs::write(&container_file, container.to_string()).unwrap();
        std::fs::write(&pod_file, pod.to_string()).unwrap();
        self.crictl(&["create", &self.a.id, container_file.to_str().unwrap(), pod_file.to_str().unwrap()])
    }

    /// A create from pod A that must be refused, naming `naming`; nothing reaches the runtime.
    fn refused(&self, container: &Value, naming: &str) {
        let before = self.runtime.memory.calls_of("CreateContainer");
        let output = self.create(container, &own_pod_json(&self.a.config));
        let said = text(&output);
        assert!(!output.status.success(), "{naming}: the create must be refused: {said}");
        assert!(
            said.contains("PermissionDenied") && said.contains("pod-scoped") && said.contains(naming),
            "{naming}: {said}"
        );
        assert_eq!(self.runtime.memory.calls_of("CreateContainer"), before, "{naming}: nothing reached the runtime");
    }

    /// A create from pod A that must reach the runtime: the new container's id.
    fn created(&self, container: &Value, pod: &Value) -> String {
        let output = self.create(container, pod);
        assert!(output.status.success(), "the create must pass: {}", text(&output));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// What the runtime was sent for `container`: its verbose info, asked on the main socket.
    async fn sent(&mut self, container: &str) -> Value {
        let request = v1::ContainerStatusRequest { container_id: container.to_string(), verbose: true };
        let status = self.main.container_status(request).await.unwrap().into_inner();
        serde_json::from_str(&status.info["info"]).unwrap()
    }

    /// The JSON audit lines the daemon wrote so far (their `fields`).
    fn audit(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["target"] == "audit")
            .map(|l| l["fields"].clone())
            .collect()
    }

    async fn metrics(&self) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    async fn stop(mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        drop(self.agent);
        self.runtime.stop().await;
    }
}

/// Pod `uid`'s sandbox as the kubelet makes it (log directory under `hp`, a cgroup parent and
/// an annotation of its own), and one container in it logging to `<name>-app/0.log`.
async fn kubelet_pod(main: &mut RuntimeClient, hp: &Path, uid: &str, name: &str) -> KubeletPod {
    let labels = || [(POD_UID_LABEL.to_string(), uid.to_string())].into();
    let config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        log_directory: hp.join(format!("pods/default_{name}_{uid}")).display().to_string(),
        labels: labels(),
        annotations: [("kubernetes.io/config.source".to_string(), format!("api-{name}"))].into(),
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: format!("/kubepods/besteffort/pod{uid}"),
            ..Default::default()
        }),
        ..Default::default()
    };
    let run = v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
    let id = main.run_pod_sandbox(run).await.unwrap().into_inner().pod_sandbox_id;
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: id.clone(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: format!("{name}-app"), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            labels: labels(),
            log_path: format!("{name}-app/0.log"),
            ..Default::default()
        }),
        sandbox_config: Some(config.clone()),
    };
    let container = main.create_container(create).await.unwrap().into_inner().container_id;
    main.start_container(v1::StartContainerRequest { container_id: container.clone() }).await.unwrap();
    KubeletPod { id, container, config }
}

/// A container's config in crictl's JSON, labelled as pod A's, with `extra` merged in.
fn container_json(name: &str, extra: Value) -> Value {
    let mut json = json!({
        "metadata": { "name": name },
        "image": { "image": "busybox" },
        "labels": { POD_UID_LABEL: POD_A },
    });
    if let (Some(json), Value::Object(extra)) = (json.as_object_mut(), extra) {
        json.extend(extra);
    }
    json
}

/// A pod's config in crictl's JSON, as `config` says (what the agent would pass for its own).
fn own_pod_json(config: &v1::PodSandboxConfig) -> Value {
    let metadata = config.metadata.clone().unwrap_or_default();
    json!({
        "metadata": { "name": metadata.name, "uid": metadata.uid, "namespace": metadata.namespace },
        "log_directory": config.log_directory,
        "labels": config.labels,
        "annotations": config.annotations,
        "linux": { "cgroup_parent": config.linux.as_ref().map(|l| l.cgroup_parent.clone()).unwrap_or_default() },
    })
}

/// `/cri_bridge.Bridge/<what>` asked as a raw gRPC unary call on `socket`.
async fn own_call(socket: &Path, what: &'static str) -> Result<bytes::Bytes, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel(socket));
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static(what);
    let request = tonic::Request::new(bytes::Bytes::new());
    grpc.unary::<bytes::Bytes, bytes::Bytes, _>(request, path, cri_bridge::grpc::RawCodec).await.map(|r| r.into_inner())
}

/// (a) cri-bridge's own calls (`Status`, `Callers`: every caller of every socket, the backends'
/// endpoints) are answered on the main socket only: on the pod-scoped socket they are
/// `PERMISSION_DENIED` naming the socket, counted in `cri_bridge_denials_total` and audited
/// with the caller's pod, for `cri-bridge probe` and `cri-bridge callers` run inside pod A's
/// cgroup and for a raw gRPC call.
///
/// Before the fix, `Forwarder::serve_call` answered an own call on whatever socket it came
/// (`answer_control` with no judgement): `probe` and `callers` succeeded on the pod-scoped
/// socket, the raw call answered JSON, and nothing was counted or audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_calls_are_answered_on_the_main_socket_only() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let setup = Setup::start("own-calls").await;
    let bridge = Path::new(env!("CARGO_BIN_EXE_cri-bridge"));
    let scoped = setup.scoped.display().to_string();

    let probe = setup.agent.run(bridge, &["probe", &scoped]);
    assert!(!probe.status.success(), "probe on the pod-scoped socket must be refused: {}", text(&probe));
    for part in ["cri_bridge.Bridge/Status", "denied on", &scoped, "(policy pod-scoped)", "main socket only"] {
        assert!(text(&probe).contains(part), "probe's failure names {part}: {}", text(&probe));
    }
    let callers = setup.agent.run(bridge, &["callers", &scoped, "--json"]);
    assert!(!callers.status.success(), "callers on the pod-scoped socket must be refused: {}", text(&callers));
    assert!(text(&callers).contains("cri_bridge.Bridge/Callers"), "{}", text(&callers));
    assert!(!text(&callers).contains(POD_A), "no caller is shown: {}", text(&callers));

    let denied = own_call(&setup.scoped, "/cri_bridge.Bridge/Callers").await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains(&scoped) && denied.message().contains("cri_bridge.Bridge/Callers"), "{denied:?}");
    let denied = own_call(&setup.scoped, "/cri_bridge.Bridge/Status").await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");

    // The main socket answers both, to the same binary.
    let main = setup.dir.path("bridge.sock");
    let probed =
        tokio::task::block_in_place(|| std::process::Command::new(bridge).arg("probe").arg(&main).output()).unwrap();
    assert!(probed.status.success(), "probe on the main socket: {}", text(&probed));
    let answered = own_call(&main, "/cri_bridge.Bridge/Callers").await.expect("Callers on the main socket");
    let report: Value = serde_json::from_slice(&answered).unwrap();
    assert!(report.as_array().is_some_and(|callers| !callers.is_empty()), "{report}");
    own_call(&main, "/cri_bridge.Bridge/Status").await.expect("Status on the main socket");

    let metrics = setup.metrics().await;
    for (rpc, count) in [("cri_bridge.Bridge/Callers", 2), ("cri_bridge.Bridge/Status", 2)] {
        let counted = format!("cri_bridge_denials_total{{socket=\"{scoped}\",rpc=\"{rpc}\"}} {count}");
        assert!(metrics.contains(&counted), "{counted} in:\n{metrics}");
    }
    assert!(!metrics.contains(&format!("socket=\"{}\",rpc=\"cri_bridge", main.display())), "{metrics}");
    let audit = setup.audit();
    let from_a: Vec<&Value> = audit.iter().filter(|f| f["outcome"] == "denied" && f["caller_pod"] == POD_A).collect();
    for rpc in ["cri_bridge.Bridge/Status", "cri_bridge.Bridge/Callers"] {
        let line = from_a.iter().find(|f| f["rpc"] == rpc).unwrap_or_else(|| panic!("{rpc} audited: {audit:?}"));
        assert_eq!(line["socket"], scoped.as_str(), "{line}");
        assert!(line["caller_exe"].as_str().unwrap().contains("cri-bridge"), "{line}");
    }
    setup.stop().await;
}

/// (b) A create from pod A with no security context reaches the runtime with the kubelet's
/// `masked_paths` (as on this node) and `readonly_paths` and a `RuntimeDefault` seccomp profile,
/// as the runtime's verbose status shows through the main socket; the same create through the
/// main socket is passed as it came.
///
/// Before the fix, the pod-scoped create was forwarded as sent: containerd then applies no
/// `/proc` masking and no seccomp profile (it runs the container unconfined), and the in-memory
/// runtime's info shows empty lists and no profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_without_a_security_context_gets_the_kubelets_defaults() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::start("defaults").await;
    let plain = container_json("plain", json!({}));
    let container = setup.created(&plain, &own_pod_json(&setup.a.config));
    let sent = setup.sent(&container).await;
    let masked: Vec<&str> = cri_bridge::node::kubelet_masked_paths().iter().map(String::as_str).collect();
    assert_eq!(sent["maskedPaths"], json!(masked), "{sent}");
    assert_eq!(sent["readonlyPaths"], json!(KUBELET_READONLY_PATHS), "{sent}");
    assert!(sent["seccomp"].as_str().unwrap().contains("RuntimeDefault"), "{sent}");
    assert_eq!(sent["seccompProfilePath"], "runtime/default", "{sent}");

    // The main socket fills nothing: the kubelet sends its own.
    let container = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata { name: "plain-main".into(), attempt: 0 }),
        image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
        ..Default::default()
    };
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: setup.a.id.clone(),
        config: Some(container),
        sandbox_config: Some(setup.a.config.clone()),
    };
    let container = setup.main.create_container(create).await.unwrap().into_inner().container_id;
    let sent = setup.sent(&container).await;
    assert_eq!((&sent["maskedPaths"], &sent["seccomp"]), (&json!([]), &json!("")), "{sent}");
    setup.stop().await;
}

/// (c) What Pod Security baseline refuses is refused, as the runtime would apply it: seccomp
/// `Unconfined`, a `Localhost` profile the socket does not list (a listed one passes), a
/// `masked_paths` shorter than the kubelet's, `oom_score_adj` below the caller's own, a log
/// path out of the sandbox's log directory, a mount through a symlink, a mount at or below
/// what another container can write, a new read-write mount above a path a container uses.
/// Each denial is audited naming the sandbox. Plain mounts under `host_paths` still pass.
///
/// Before the fix (`access::pod::create_without_privilege`): a `Localhost` profile of any name,
/// any `masked_paths`, any `oom_score_adj`, and any mount whose path was lexically under
/// `host_paths` (symlinks and other containers' writable mounts unexamined) all reached the
/// runtime, and a denial was audited with no sandbox id. (`Unconfined` and the `..` log path
/// were refused before too, by the older lexical rules: they are kept here so that the new
/// judgement keeps refusing them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_baseline_refuses_is_refused_as_the_runtime_would_apply_it() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::start("refused").await;
    let hp = setup.hp.clone();
    let path = |rest: &str| hp.join(rest).display().to_string();
    let seccomp = |profile_type: i32, name: &str| {
        let profile = json!({ "profile_type": profile_type, "localhost_ref": name });
        json!({ "linux": { "security_context": { "seccomp": profile } } })
    };

    setup.refused(&container_json("unconfined", seccomp(1, "")), "not Unconfined");
    setup.refused(&container_json("unlisted", seccomp(2, "profiles/open.json")), "localhost_profiles.seccomp");
    let listed =
        setup.created(&container_json("listed", seccomp(2, "profiles/listed.json")), &own_pod_json(&setup.a.config));
    let sent = setup.sent(&listed).await;
    assert!(sent["seccomp"].as_str().unwrap().contains("profiles/listed.json"), "{sent}");

    let short = json!({ "linux": { "security_context": { "masked_paths": ["/proc/kcore"] } } });
    setup.refused(&container_json("short-masked", short), "masked_paths lacks");

    let oom = |value: i64| json!({ "linux": { "resources": { "oom_score_adj": value } } });
    setup.refused(&container_json("oom", oom(-1000)), "oom_score_adj -1000");
    // As low as the caller's own (crictl inherits this process's) is allowed.
    let own: i64 = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap().trim().parse().unwrap();
    setup.created(&container_json("oom-own", oom(own)), &own_pod_json(&setup.a.config));

    setup.refused(&container_json("log-escape", json!({ "log_path": "../../x" })), "log_path");

    // A symlink on the path, pointing out of host_paths: the runtime would follow it.
    std::fs::create_dir_all(hp.join("sym")).unwrap();
    std::os::unix::fs::symlink("/etc", hp.join("sym/link")).unwrap();
    let mount = |host: String, readonly: bool| json!({ "mounts": [{ "container_path": "/data", "host_path": host, "readonly": readonly }] });
    setup.refused(&container_json("symlink", mount(path("sym/link/cron.d"), true)), "is a symlink");

    // Below another container's read-write mount: that container could plant a symlink there.
    std::fs::create_dir_all(hp.join("shared/sub")).unwrap();
    let writer = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata { name: "writer".into(), attempt: 0 }),
        image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
        mounts: vec![v1::Mount {
            container_path: "/shared".into(),
            host_path: path("shared"),
            readonly: false,
            ..Default::default()
        }],
        ..Default::default()
    };
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: setup.b.id.clone(),
        config: Some(writer),
        sandbox_config: Some(setup.b.config.clone()),
    };
    setup.main.create_container(create).await.expect("the main socket makes the writer");
    setup.refused(&container_json("below-writer", mount(path("shared/sub"), true)), "which a container can write");
    // A new read-write mount above pod A's log file, which a container uses.
    setup.refused(&container_json("above-used", mount(path("pods"), false)), "which a container uses");

    // A plain directory under host_paths, read-only or read-write, passes.
    std::fs::create_dir_all(hp.join("data")).unwrap();
    let mounted = setup.created(&container_json("data-ro", mount(path("data"), true)), &own_pod_json(&setup.a.config));
    let request = v1::ContainerStatusRequest { container_id: mounted, verbose: false };
    let status = setup.main.container_status(request).await.unwrap().into_inner().status.unwrap();
    assert_eq!(status.mounts[0].host_path, path("data"));

    // Each denial audited with the sandbox the create named.
    let audit = setup.audit();
    let denied: Vec<&Value> =
        audit.iter().filter(|f| f["outcome"] == "denied" && f["rpc"] == "RuntimeService/CreateContainer").collect();
    assert_eq!(denied.len(), 8, "{audit:?}");
    for line in denied {
        assert_eq!(line["sandbox"], setup.a.id.as_str(), "{line}");
        assert_eq!(line["caller_pod"], POD_A, "{line}");
    }
    setup.stop().await;
}

/// (d) The `sandbox_config` a pod-scoped create carries is replaced by the runtime's own record
/// of the caller's sandbox: a create from pod A whose `sandbox_config` names pod B (its
/// metadata, cgroup parent, log directory, annotations, and an annotation a runtime acts on)
/// reaches the runtime with A's.
///
/// Before the fix the request's `sandbox_config` was forwarded as sent, and a runtime reads the
/// pod's cgroup parent, annotations and log directory from it (containerd: the OCI spec's
/// cgroups path and annotations, the log file's directory): the in-memory runtime records B's
/// cgroup parent, B's log directory and the added annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_sandbox_config_is_replaced_by_the_sandboxs_own() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::start("sandbox-config").await;
    let mut forged = own_pod_json(&setup.b.config);
    forged["annotations"]["io.kubernetes.cri-o.Devices"] = json!("/dev/sda:/dev/xvda:rwm");
    let container = setup.created(&container_json("forged", json!({ "log_path": "forged/0.log" })), &forged);
    let sent = setup.sent(&container).await;
    let config = &sent["sandboxConfig"];
    let own = &setup.a.config;
    assert_eq!(config["metadata"]["uid"], POD_A, "{sent}");
    assert_eq!(config["linux"]["cgroup_parent"], own.linux.as_ref().unwrap().cgroup_parent.as_str(), "{sent}");
    assert_eq!(config["log_directory"], own.log_directory.as_str(), "{sent}");
    assert_eq!(config["annotations"], json!(own.annotations), "{sent}");
    assert_eq!(config["labels"], json!(own.labels), "{sent}");
    assert!(!sent.to_string().contains(POD_B), "nothing of B's reaches the runtime: {sent}");
    // The main socket passes what it is sent: the kubelet's own config.
    let kubelet = setup.sent(&setup.b.container.clone()).await;
    assert_eq!(kubelet["sandboxConfig"]["metadata"]["uid"], POD_B, "{kubelet}");
    setup.stop().await;
}
