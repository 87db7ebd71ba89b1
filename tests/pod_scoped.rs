//! The pod-scoped socket (issue 38) with real crictl (1.37 and 1.34, the oldest cri-tools the
//! module proxy serves), run as a node agent in a pod would be: inside that pod's cgroup. Two
//! pods, made through the main socket as a kubelet makes them (the pod's UID as the sandbox's
//! metadata and as the `io.kubernetes.pod.uid` label of each sandbox and container); the agent
//! lives in pod A. It sees, execs into and stops only A's; it makes no pod and no privileged
//! container; `inspect` shows no environment. The same crictl outside any pod is refused
//! everything. Over the in-memory runtime; needs root (cgroups) and `bash tools/go-peers.sh`.

mod common;

use common::pod_cgroup::PodCgroup;
use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::access::pod::POD_UID_LABEL;
use cri_bridge::access::Policy;
use cri_bridge::api::v1;
use cri_bridge::config::ScopedEndpoint;
use cri_bridge::CriVersion::V1;
use std::path::{Path, PathBuf};
use std::process::Output;

const TOP: &str = env!("CARGO_MANIFEST_DIR");
const POD_A: &str = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9";
const POD_B: &str = "9a8b7c6d-5e4f-4321-8765-0fedcba98765";
/// The agent's own container, as its cgroup names it.
const AGENT: &str = "ab0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd";

type RuntimeClient = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// The tests share the kubelet-like cgroup directories: one at a time, so that each removes
/// what it made.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn crictl(version: &str) -> PathBuf {
    let path = Path::new(TOP).join("target/peers").join(format!("crictl-{version}"));
    assert!(path.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {TOP}", path.display());
    path
}

/// A sandbox as the kubelet makes one for pod `uid`, and one container in it.
async fn kubelet_pod(main: &mut RuntimeClient, uid: &str, name: &str) -> (String, String) {
    let labels = || [(POD_UID_LABEL.to_string(), uid.to_string())].into();
    let config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: labels(),
        ..Default::default()
    };
    let run = v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
    let pod = main.run_pod_sandbox(run).await.unwrap().into_inner().pod_sandbox_id;
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: pod.clone(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: format!("{name}-app"), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            envs: vec![v1::KeyValue { key: "TOKEN".into(), value: format!("s3cret-{name}").into_bytes() }],
            labels: labels(),
            ..Default::default()
        }),
        sandbox_config: Some(config),
    };
    let container = main.create_container(create).await.unwrap().into_inner().container_id;
    main.start_container(v1::StartContainerRequest { container_id: container.clone() }).await.unwrap();
    (pod, container)
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_in_a_pods_cgroup_is_held_to_its_pod() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new("pod-scoped");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    let host_paths = vec![PathBuf::from("/var/log/pods")];
    let scoped = dir.path("pod.sock");
    config.endpoints = vec![ScopedEndpoint {
        path: scoped.clone(),
        mode: 0o660,
        group: None,
        policy: Policy::PodScoped { host_paths, seccomp_profiles: Vec::new(), apparmor_profiles: Vec::new() },
    }];
    let bridge = Bridge::start(config).await;
    common::wait_for_socket(&scoped).await;
    let mut main = RuntimeClient::new(channel(&bridge.socket));
    let (pod_a, container_a) = kubelet_pod(&mut main, POD_A, "a").await;
    let (pod_b, container_b) = kubelet_pod(&mut main, POD_B, "b").await;
    let agent = PodCgroup::new(POD_A, AGENT);
    let endpoint = format!("unix://{}", scoped.display());

    for version in ["1.37.0", "1.34.0"] {
        let crictl = crictl(version);
        let run = |args: &[&str]| {
            let mut all = vec!["--runtime-endpoint", &endpoint, "--image-endpoint", &endpoint, "--timeout", "10s"];
            all.extend_from_slice(args);
            agent.run(&crictl, &all)
        };
        let denied = |output: &Output, what: &str| {
            assert!(!output.status.success(), "crictl {version} {what} must be refused: {}", text(output));
            let said = text(output);
            assert!(
                said.contains("PermissionDenied") && said.contains("pod-scoped"),
                "crictl {version} {what}: {said}"
            );
        };
        // Lists: A's alone.
        let listed = run(&["ps", "-a", "-q"]);
        assert!(listed.status.success(), "crictl {version} ps: {}", text(&listed));
        assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), container_a, "crictl {version} ps");
        let pods = run(&["pods", "-q"]);
        assert_eq!(String::from_utf8_lossy(&pods.stdout).trim(), pod_a, "crictl {version} pods: {}", text(&pods));
        // Its own container: exec and inspect (without the environment, which verbose info holds).
        let exec = run(&["exec", "-s", &container_a, "echo", "hello"]);
        assert!(exec.status.success() && text(&exec).contains("hello"), "crictl {version} exec: {}", text(&exec));
        let inspect = run(&["inspect", &container_a]);
        assert!(inspect.status.success(), "crictl {version} inspect: {}", text(&inspect));
        assert!(
            !text(&inspect).contains("s3cret"),
            "crictl {version} inspect shows no environment: {}",
            text(&inspect)
        );
        let inspectp = run(&["inspectp", &pod_a]);
        assert!(inspectp.status.success(), "crictl {version} inspectp: {}", text(&inspectp));
        // Another pod's: nothing.
        denied(&run(&["exec", "-s", &container_b, "echo", "hello"]), "exec into another pod");
        denied(&run(&["inspect", &container_b]), "inspect of another pod's container");
        denied(&run(&["stop", &container_b]), "stop of another pod's container");
        denied(&run(&["inspectp", &pod_b]), "inspectp of another pod");
        denied(&run(&["stopp", &pod_b]), "stopp of another pod");
        denied(&run(&["stop", "no-such-container"]), "stop of an id no pod has");
        // No pod, no image, no privilege.
        let pod_file = dir.path("pod.json");
        std::fs::write(&pod_file, format!(r#"{{"metadata":{{"name":"new","uid":"{POD_A}","namespace":"default"}}}}"#))
            .unwrap();
        denied(&run(&["runp", pod_file.to_str().unwrap()]), "runp");
        denied(&run(&["pull", "busybox"]), "pull");
        let container_file = |name: &str, extra: &str| {
            let path = dir.path(&format!("{name}.json"));
            let json = format!(r#"{{"metadata":{{"name":"{name}"}},"image":{{"image":"busybox"}}{extra}}}"#);
            std::fs::write(&path, json).unwrap();
            path
        };
        let privileged = container_file("privileged", r#","linux":{"security_context":{"privileged":true}}"#);
        denied(
            &run(&["create", &pod_a, privileged.to_str().unwrap(), pod_file.to_str().unwrap()]),
            "a privileged create",
        );
        let host = container_file("host", r#","mounts":[{"container_path":"/host","host_path":"/etc"}]"#);
        denied(&run(&["create", &pod_a, host.to_str().unwrap(), pod_file.to_str().unwrap()]), "a host-path mount");
        let plain = container_file(&format!("plain-{}", version.replace('.', "-")), "");
        denied(
            &run(&["create", &pod_b, plain.to_str().unwrap(), pod_file.to_str().unwrap()]),
            "a create in another pod",
        );
        // A checkpoint is written by the runtime, as root: only under host_paths.
        let outside = "--export=/etc/cri-bridge-test-checkpoint.tar";
        denied(&run(&["checkpoint", outside, &container_a]), "a checkpoint written outside host_paths");
        let inside = run(&["checkpoint", "--export=/var/log/pods/cri-bridge-test-checkpoint.tar", &container_a]);
        assert!(
            !text(&inside).contains("PermissionDenied"),
            "crictl {version} checkpoint under host_paths: {}",
            text(&inside)
        );
        denied(&run(&["checkpoint", "--export=/var/log/pods/b.tar", &container_b]), "a checkpoint of another pod's");
        let created = run(&["create", &pod_a, plain.to_str().unwrap(), pod_file.to_str().unwrap()]);
        assert!(created.status.success(), "crictl {version} create in its own pod: {}", text(&created));

        // The same crictl outside any pod: refused everything.
        let mut args = vec!["--runtime-endpoint", &endpoint, "--timeout", "10s", "ps", "-a"];
        let outside = tokio::task::block_in_place(|| std::process::Command::new(&crictl).args(&args).output().unwrap());
        assert!(text(&outside).contains("runs in no pod"), "crictl {version} outside pods: {}", text(&outside));
        args.clear();
    }
    assert_eq!(runtime.memory.calls_of("ExecSync"), 2, "only the agent's two execs into its own container");
    assert_eq!(runtime.memory.calls_of("StopContainer"), 0);
    assert_eq!(runtime.memory.calls_of("RunPodSandbox"), 2, "the kubelet's two pods, none of the agent's");
    drop(agent);
    bridge.stop().await;
    runtime.stop().await;
}

/// Events are the pod's: a watcher in pod A sees A's container created, not B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_scoped_watcher_sees_its_pods_events_only() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new("pod-events");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    let scoped = dir.path("pod.sock");
    let policy =
        Policy::PodScoped { host_paths: Vec::new(), seccomp_profiles: Vec::new(), apparmor_profiles: Vec::new() };
    config.endpoints = vec![ScopedEndpoint { path: scoped.clone(), mode: 0o660, group: None, policy }];
    let bridge = Bridge::start(config).await;
    common::wait_for_socket(&scoped).await;
    let agent = PodCgroup::new(POD_A, AGENT);
    let endpoint = format!("unix://{}", scoped.display());
    let crictl = crictl("1.37.0");
    let procs = agent.leaf.join("cgroup.procs");
    let script = format!("echo $$ > {} && exec \"$@\"", procs.display());
    let mut watcher = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&crictl)
        .args(["--runtime-endpoint", &endpoint, "--timeout", "60s", "events", "--output", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The watch is open once the runtime counts it.
    for _ in 0..200 {
        if runtime.memory.event_watchers() > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(runtime.memory.event_watchers() > 0, "crictl events did not start watching");
    let mut main = RuntimeClient::new(channel(&bridge.socket));
    let (_, container_b) = kubelet_pod(&mut main, POD_B, "b").await;
    let (_, container_a) = kubelet_pod(&mut main, POD_A, "a").await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    watcher.start_kill().unwrap();
    let output = watcher.wait_with_output().await.unwrap();
    let seen = String::from_utf8_lossy(&output.stdout);
    assert!(
        seen.contains(&container_a),
        "A's events reach the watcher in A: {seen}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!seen.contains(&container_b), "B's never do: {seen}");
    drop(agent);
    bridge.stop().await;
    runtime.stop().await;
}

/// Real crictl (1.37 and 1.34) on the `images` and `allow` sockets: what the policy names works,
/// and the rest is refused naming the policy (crictl's own start-up checks included: `ps` first
/// asks the image service, which a list of runtime RPCs does not name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crictl_on_the_images_and_allow_sockets() {
    let dir = TempDir::new("images-allow");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    let (images, ci) = (dir.path("images.sock"), dir.path("ci.sock"));
    let allowed = ["RuntimeService/Version", "RuntimeService/ListContainerStats", "RuntimeService/ContainerStats"];
    config.endpoints = vec![
        ScopedEndpoint { path: images.clone(), mode: 0o660, group: None, policy: Policy::Images },
        ScopedEndpoint {
            path: ci.clone(),
            mode: 0o660,
            group: None,
            policy: Policy::Allow(allowed.iter().map(|a| a.to_string()).collect()),
        },
    ];
    let bridge = Bridge::start(config).await;
    common::wait_for_socket(&ci).await;
    let mut main = RuntimeClient::new(channel(&bridge.socket));
    let (_, container) = kubelet_pod(&mut main, POD_A, "a").await;
    for version in ["1.37.0", "1.34.0"] {
        let crictl = crictl(version);
        let run = |socket: &Path, args: &[&str]| {
            let endpoint = format!("unix://{}", socket.display());
            let mut all = vec!["--runtime-endpoint", &endpoint, "--image-endpoint", &endpoint, "--timeout", "10s"];
            all.extend_from_slice(args);
            let mut command = std::process::Command::new(&crictl);
            command.args(&all);
            tokio::task::block_in_place(|| command.output().unwrap())
        };
        let pulled = run(&images, &["pull", "busybox"]);
        assert!(pulled.status.success(), "crictl {version} pull on the images socket: {}", text(&pulled));
        let listed = run(&images, &["images", "-q"]);
        assert!(listed.status.success() && !listed.stdout.is_empty(), "crictl {version} images: {}", text(&listed));
        let refused = run(&images, &["ps", "-a"]);
        assert!(
            text(&refused).contains("(policy images)"),
            "crictl {version} ps on the images socket: {}",
            text(&refused)
        );

        let stats = run(&ci, &["stats", "-a", "-o", "json"]);
        assert!(stats.status.success(), "crictl {version} stats on the allow socket: {}", text(&stats));
        assert!(text(&stats).contains(&container), "crictl {version} stats: {}", text(&stats));
        for args in [&["pods"][..], &["ps", "-a"], &["stop", container.as_str()]] {
            let refused = run(&ci, args);
            assert!(!refused.status.success(), "crictl {version} {args:?} must be refused: {}", text(&refused));
            assert!(text(&refused).contains("(policy allow)"), "crictl {version} {args:?}: {}", text(&refused));
        }
    }
    assert_eq!(runtime.memory.calls_of("StopContainer"), 0);
    bridge.stop().await;
    runtime.stop().await;
}
