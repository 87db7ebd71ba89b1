//! cri-bridge in front of a real cri-dockerd 0.4.3 on a real Docker Engine 20.10
//! (`tests/docker_support`), driven by real clients:
//!
//! - crictl 1.37 (`tools/crictl-check.sh`: version, pull, runp, create, start, exec, logs,
//!   inspect, stop, rm, stopp, rmp, …), natively on cri-dockerd's socket and through cri-bridge:
//!   every command does the same both ways, and only `version` says something else through
//!   cri-bridge (Docker's Engine API version, as dockershim answered it, for `RuntimeApiVersion`).
//! - a CRI v1alpha2 client, which cri-dockerd (v1 only) refuses natively: through cri-bridge it
//!   runs a pod, pulls, creates and starts a container, and execs in it. The streaming URLs
//!   cri-dockerd answers without a scheme say `http` through cri-bridge.
//!
//! Needs root, Debian's docker.io and containernetworking-plugins, and the peers built by
//! `tools/go-peers.sh` (crictl) and `tools/docker-peers.sh` (cri-dockerd).

mod common;
mod docker_support;

use common::{Bridge, TempDir};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::config::{Config, Endpoint};
use docker_support::{host_network_pod_v1alpha2, Docker};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// cri-bridge on its default configuration, in `dir`, in front of cri-dockerd.
async fn bridge_for(docker: &Docker, dir: &TempDir) -> Bridge {
    Bridge::start(Config {
        listen_path: dir.path("bridge.sock"),
        backend: Endpoint::Unix(docker.cri_socket.clone()),
        ..Config::default()
    })
    .await
}

/// `tools/crictl-check.sh` (crictl 1.37) over `socket`: each command's section (`name (exit N)`
/// and its normalized output), in order. Kept in target/crictl-check-docker-<label>.txt.
async fn crictl_check(socket: &Path, docker: &Docker, label: &str) -> Vec<(String, String)> {
    let crictl = Path::new(TOP).join("target/peers/crictl-1.37.0");
    assert!(crictl.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {TOP}", crictl.display());
    // Both runs start without the image. cri-dockerd 0.4.3 leaves it in Docker at the script's
    // last `crictl rmi` (which exits 0): crictl names the image by its tag, and cri-dockerd's
    // RemoveImage looks it up as an image ID, finds nothing and removes nothing.
    let _ = docker.docker_output(&["rmi", &docker.busybox_image]);
    let work = TempDir::new("dkr-crictl");
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(Path::new(TOP).join("tools/crictl-check.sh"))
        .arg(socket)
        .arg(&docker.busybox_image)
        .arg(&work.0)
        .env("CRICTL_CHECK_RUNTIME_DIR", &docker.dir)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(180), command.output())
        .await
        .unwrap_or_else(|_| panic!("crictl-check {label} ran over 180 s"))
        .expect("run tools/crictl-check.sh");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("crictl-check {label}: {:?}", started.elapsed());
    assert!(
        output.status.success(),
        "tools/crictl-check.sh {label} could not run ({}): {}{text}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(Path::new(TOP).join(format!("target/crictl-check-docker-{label}.txt")), &text).unwrap();
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        match line.strip_prefix("== ") {
            Some(head) => sections.push((head.to_string(), String::new())),
            None => {
                if let Some((_, body)) = sections.last_mut() {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    sections
}

/// The section named `name` (its head without the exit status): its exit status and output.
fn section<'a>(sections: &'a [(String, String)], name: &str) -> (&'a str, &'a str) {
    let (head, body) = sections
        .iter()
        .find(|(head, _)| head.split(" (exit").next() == Some(name))
        .unwrap_or_else(|| panic!("crictl-check ran no `{name}`: {sections:#?}"));
    let status = head.split(" (exit ").nth(1).and_then(|s| s.strip_suffix(')')).unwrap_or("?");
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crictl_runs_a_pod_on_cri_dockerd_through_cri_bridge_as_natively() {
    let docker = Docker::start().await;
    let dir = TempDir::new("dkr-crictl-bridge");
    let bridge = bridge_for(&docker, &dir).await;

    let native = crictl_check(&docker.cri_socket, &docker, "native").await;
    let through = crictl_check(&bridge.socket, &docker, "through").await;
    let report = |sections: &[(String, String)]| {
        sections.iter().map(|(h, b)| format!("== {h}\n{b}")).collect::<Vec<_>>().concat()
    };

    // Both ways, every command works (the first rmi finds no image; `exec -s` runs a command
    // that exits 3, which crictl reports as an error with its stderr), on a pod with a network
    // of its own (cri-dockerd's CNI: a bridge).
    let must_succeed = [
        "version",
        "info",
        "pull",
        "images",
        "inspecti",
        "runp",
        "pods",
        "inspectp",
        "create",
        "start",
        "ps",
        "inspect",
        "exec",
        "logs",
        "stop",
        "ps-exited",
        "rm",
        "stopp",
        "rmp",
        "pods-gone",
        "rmi",
    ];
    for (label, sections) in [("natively", &native), ("through cri-bridge", &through)] {
        for name in must_succeed {
            let (status, body) = section(sections, name);
            assert_eq!(status, "0", "crictl {name} failed {label}:\n{body}\n{}", report(sections));
        }
        assert_eq!(section(sections, "rmi-before").0, "1", "crictl rmi of no image {label}:\n{}", report(sections));
        assert!(section(sections, "exec").1.contains("hello"), "crictl exec {label}:\n{}", report(sections));
        let exec_sync = section(sections, "exec-sync").1;
        assert!(exec_sync.contains("exited with 3: to stderr"), "crictl exec -s {label}:\n{}", report(sections));
        assert!(section(sections, "logs").1.contains("started"), "crictl logs {label}:\n{}", report(sections));
        assert!(
            section(sections, "inspectp").1.contains("<pod-ip>"),
            "the pod's address {label}:\n{}",
            report(sections)
        );
    }

    // The same through cri-bridge, command for command; only `version` differs: cri-bridge
    // answers Docker's Engine API version as RuntimeApiVersion, where cri-dockerd says "v1".
    assert_eq!(
        native.iter().map(|(h, _)| h).collect::<Vec<_>>(),
        through.iter().map(|(h, _)| h).collect::<Vec<_>>(),
        "the commands' exit statuses natively and through cri-bridge"
    );
    let differing: Vec<String> = native
        .iter()
        .zip(&through)
        .filter(|(n, t)| n != t)
        .map(|((head, n), (_, t))| format!("`{head}`:\n--- native\n{n}--- through cri-bridge\n{t}"))
        .collect();
    let version = |sections: &[(String, String)]| section(sections, "version").1.to_string();
    let api_version = format!("{}.0", docker.engine_api_version);
    assert_eq!(
        version(&native).replace("RuntimeApiVersion: v1\n", &format!("RuntimeApiVersion: {api_version}\n")),
        version(&through),
        "crictl version natively and through cri-bridge"
    );
    assert!(version(&native).contains("RuntimeName: docker\n"), "{}", version(&native));
    assert!(
        differing.len() == 1 && differing[0].starts_with("`version"),
        "crictl's output differs natively and through cri-bridge:\n{}",
        differing.join("\n")
    );

    bridge.stop().await;
    drop(docker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha2_client_runs_a_pod_on_cri_dockerd_through_cri_bridge() {
    let docker = Docker::start().await;
    let dir = TempDir::new("dkr-v1alpha2");
    let bridge = bridge_for(&docker, &dir).await;
    let api_version = format!("{}.0", docker.engine_api_version);
    assert_eq!(docker.engine_api_version, "1.41", "Debian bookworm's docker.io is 20.10 (Engine API 1.41)");

    // Natively: cri-dockerd serves v1 only, and answers its CRI version as runtime_api_version.
    let native = docker.native_version().await.expect("cri-dockerd answers v1 Version");
    assert_eq!(
        (native.runtime_name.as_str(), native.runtime_version.as_str(), native.runtime_api_version.as_str()),
        ("docker", docker.engine_version.as_str(), "v1")
    );
    let refused = v1alpha2::runtime_service_client::RuntimeServiceClient::new(docker.direct_channel())
        .version(v1alpha2::VersionRequest { version: "0.1.0".into() })
        .await
        .expect_err("cri-dockerd does not serve v1alpha2");
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");
    assert!(refused.message().contains("unknown service runtime.v1alpha2"), "{refused:?}");

    // Through cri-bridge: Docker's Engine API version, for a v1alpha2 caller and for a v1 one.
    let channel = common::channel(&bridge.socket);
    let mut runtime = v1alpha2::runtime_service_client::RuntimeServiceClient::new(channel.clone());
    let mut images = v1alpha2::image_service_client::ImageServiceClient::new(channel.clone());
    let version = runtime.version(v1alpha2::VersionRequest { version: "0.1.0".into() }).await.unwrap().into_inner();
    assert_eq!(
        (version.runtime_name.as_str(), version.runtime_version.as_str(), version.runtime_api_version.as_str()),
        ("docker", docker.engine_version.as_str(), api_version.as_str())
    );
    assert!(docker.engine_version.starts_with("20.10.24"), "{}", docker.engine_version);
    let v1_version = v1::runtime_service_client::RuntimeServiceClient::new(channel.clone())
        .version(v1::VersionRequest { version: "0.1.0".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v1_version.runtime_api_version, api_version);

    // A pod on the host network, a busybox container pulled from the test registry.
    let image = v1alpha2::ImageSpec { image: docker.busybox_image.clone(), ..Default::default() };
    let pulled = images
        .pull_image(v1alpha2::PullImageRequest { image: Some(image.clone()), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    // cri-dockerd answers the image's repo digest.
    let repo = docker.busybox_image.rsplit_once(':').unwrap().0;
    assert!(pulled.image_ref.starts_with(&format!("{repo}@sha256:")), "{pulled:?}");
    let pod_config = host_network_pod_v1alpha2("v1alpha2-pod", &docker.pod_logs.join("v1alpha2-pod"));
    let pod = runtime
        .run_pod_sandbox(v1alpha2::RunPodSandboxRequest {
            config: Some(pod_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let container_config = v1alpha2::ContainerConfig {
        metadata: Some(v1alpha2::ContainerMetadata { name: "main".into(), attempt: 0 }),
        image: Some(image),
        command: vec!["sh".into(), "-c".into(), "echo started; exec sleep 3600".into()],
        log_path: "main.log".into(),
        ..Default::default()
    };
    let container = runtime
        .create_container(v1alpha2::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(container_config),
            sandbox_config: Some(pod_config),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    runtime.start_container(v1alpha2::StartContainerRequest { container_id: container.clone() }).await.unwrap();
    let status = runtime
        .container_status(v1alpha2::ContainerStatusRequest { container_id: container.clone(), verbose: false })
        .await
        .unwrap()
        .into_inner()
        .status
        .expect("a status");
    assert_eq!(status.state, v1alpha2::ContainerState::ContainerRunning as i32, "{status:?}");
    assert_eq!(status.image.as_ref().map(|i| i.image.as_str()), Some(docker.busybox_image.as_str()));

    let exec = runtime
        .exec_sync(v1alpha2::ExecSyncRequest {
            container_id: container.clone(),
            cmd: vec!["sh".into(), "-c".into(), "echo hello; id -u; echo oops >&2".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let stdout = String::from_utf8_lossy(&exec.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&exec.stderr).into_owned();
    assert_eq!((stdout.as_str(), stderr.as_str(), exec.exit_code), ("hello\n0\n", "oops\n", 0));
    // A command that fails: its exit code and output, the same natively in v1.
    let failing: Vec<String> = vec!["sh".into(), "-c".into(), "echo to stderr >&2; exit 3".into()];
    let through = runtime
        .exec_sync(v1alpha2::ExecSyncRequest { container_id: container.clone(), cmd: failing.clone(), timeout: 10 })
        .await
        .unwrap()
        .into_inner();
    let native = v1::runtime_service_client::RuntimeServiceClient::new(docker.direct_channel())
        .exec_sync(v1::ExecSyncRequest { container_id: container.clone(), cmd: failing, timeout: 10 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (&through.stdout, &through.stderr, through.exit_code),
        (&native.stdout, &native.stderr, native.exit_code)
    );
    assert_eq!((native.stderr.as_slice(), native.exit_code), (&b"to stderr\n"[..], 3));
    // Streaming URLs: cri-dockerd's have no scheme (`//HOST:PORT/cri/exec/TOKEN`), which the
    // kubelet's WebSocket path (kubectl exec, attach, port-forward) dials as https; through
    // cri-bridge they say http, for a v1 caller (same version) as for a v1alpha2 one, and are the
    // same URL otherwise. cri-dockerd's plain-HTTP server answers them.
    let exec_v1 = v1::ExecRequest {
        container_id: container.clone(),
        cmd: vec!["true".into()],
        stdout: true,
        ..Default::default()
    };
    let native_url = v1::runtime_service_client::RuntimeServiceClient::new(docker.direct_channel())
        .exec(exec_v1.clone())
        .await
        .unwrap()
        .into_inner()
        .url;
    assert!(native_url.starts_with("//") && native_url.contains("/cri/exec/"), "cri-dockerd's URL: {native_url}");
    let mut v1_runtime = v1::runtime_service_client::RuntimeServiceClient::new(channel.clone());
    let through_urls = [
        v1_runtime.exec(exec_v1).await.unwrap().into_inner().url,
        runtime
            .exec(v1alpha2::ExecRequest {
                container_id: container.clone(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .url,
        v1_runtime
            .attach(v1::AttachRequest { container_id: container.clone(), stdout: true, ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .url,
        v1_runtime
            .port_forward(v1::PortForwardRequest { pod_sandbox_id: pod.clone(), port: vec![80] })
            .await
            .unwrap()
            .into_inner()
            .url,
    ];
    let server = native_url.rsplit_once("/cri/").unwrap().0;
    for (url, kind) in through_urls.iter().zip(["exec", "exec", "attach", "portforward"]) {
        assert!(
            url.starts_with(&format!("http:{server}/cri/{kind}/")),
            "through cri-bridge: {url} (natively {native_url})"
        );
        // Asked without the SPDY upgrade, the plain-HTTP server answers (an https client would not).
        let asked = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-X", "POST", url])
            .output()
            .unwrap();
        let code = String::from_utf8_lossy(&asked.stdout).into_owned();
        assert!(code.len() == 3 && code != "000", "{url}: curl said {code:?} {asked:?}");
    }
    // Docker's own view: the container is cri-dockerd's, named as dockershim names them.
    let names = docker.docker(&["ps", "--format", "{{.Names}}"]);
    assert!(names.lines().any(|n| n.starts_with("k8s_main_v1alpha2-pod_")), "{names}");

    runtime
        .stop_container(v1alpha2::StopContainerRequest { container_id: container.clone(), timeout: 0 })
        .await
        .unwrap();
    runtime.remove_container(v1alpha2::RemoveContainerRequest { container_id: container }).await.unwrap();
    runtime.stop_pod_sandbox(v1alpha2::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.unwrap();
    runtime.remove_pod_sandbox(v1alpha2::RemovePodSandboxRequest { pod_sandbox_id: pod }).await.unwrap();
    let left = runtime.list_pod_sandbox(v1alpha2::ListPodSandboxRequest::default()).await.unwrap().into_inner().items;
    assert!(left.is_empty(), "{left:?}");

    bridge.stop().await;
    drop(docker);
}
