//! Several backends with REAL runtimes (issue 42): containerd 2.4.2 (CRI v1, the default backend,
//! `new`) and containerd 1.4.13 (CRI v1alpha2 only, `old`: the RuntimeClass handler `old` runs
//! there as `""`), behind one cri-bridge, driven with real crictl 1.37 (which speaks v1 only: every
//! call for the old backend is converted, per backend).
//!
//! 1. `crictl runp` of a pod with no handler lands on 2.4.2, `--runtime old` on 1.4.13, each under
//!    the id its containerd gave it (asked directly: v1 of 2.4.2, v1alpha2 of 1.4.13); `--runtime
//!    gvisor` (routed nowhere) is refused, naming it, and nothing is made. Containers are created,
//!    started and exec'd into (`crictl exec`, a streaming call through cri-bridge) on each;
//!    `crictl pods` and `ps` through cri-bridge list both backends'.
//! 2. containerd 1.4.13 is killed: `crictl pods` fails UNAVAILABLE naming the backend `old`,
//!    `inspect` of its container too, while the 2.4.2 pod's container answers and a new pod runs
//!    there (crictl checks the image service with `ImageFsInfo` first: the backend away is left
//!    out of it); `crictl info` shows `RuntimeReady` false naming it. containerd 1.4.13 is started again on the same state: cri-bridge, not restarted,
//!    lists both backends again, with the old pod under its old id.
//!
//! Pods use the host network (no CNI). Needs root, runc and busybox-static, containerd 1.4.13
//! unpacked by `tools/debian-unpack.sh`, containerd 2.4.2 and crictl 1.37 built by
//! `tools/go-peers.sh`; fails, never skips, saying which is missing.

mod common;
mod containerd_support;

use common::{Bridge, TempDir};
use containerd_support::{Build, Containerd, BUSYBOX_IMAGE};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::config::{Config, Endpoint, HandlerRoute, Routing};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// crictl 1.37 on cri-bridge's socket.
struct Crictl {
    binary: PathBuf,
    endpoint: String,
}

impl Crictl {
    fn new(socket: &Path) -> Crictl {
        let binary = Path::new(TOP).join("target/peers/crictl-1.37.0");
        assert!(binary.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {TOP}", binary.display());
        Crictl { binary, endpoint: format!("unix://{}", socket.display()) }
    }

    async fn run(&self, args: &[&str]) -> Output {
        tokio::process::Command::new(&self.binary)
            .args(["--runtime-endpoint", &self.endpoint, "--image-endpoint", &self.endpoint, "--timeout", "30s"])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()))
    }

    async fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(output.status.success(), "crictl {args:?} failed: {}", text(&output));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    async fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(!output.status.success(), "crictl {args:?} must fail: {}", text(&output));
        text(&output)
    }
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn json_file(dir: &TempDir, name: &str, json: &Value) -> String {
    let path = dir.path(name);
    std::fs::write(&path, serde_json::to_vec_pretty(json).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

/// A pod on the host network, its logs under `logs`.
fn pod_json(name: &str, logs: &Path) -> Value {
    json!({
        "metadata": { "name": name, "uid": format!("uid-{name}"), "namespace": "cri-bridge-test" },
        "log_directory": logs.join(name),
        "linux": { "security_context": { "namespace_options": { "network": v1::NamespaceMode::Node as i32 } } },
    })
}

fn container_json(name: &str) -> Value {
    json!({
        "metadata": { "name": name },
        "image": { "image": BUSYBOX_IMAGE },
        "command": ["sleep", "3600"],
        "log_path": format!("{name}.log"),
    })
}

async fn pod_ids_new(new: &Containerd) -> Vec<String> {
    let mut direct = v1::runtime_service_client::RuntimeServiceClient::new(new.direct_channel());
    let listed = direct.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.unwrap().into_inner();
    listed.items.into_iter().map(|p| p.id).collect()
}

async fn pod_ids_old(old: &Containerd) -> Vec<String> {
    let mut direct = v1alpha2::runtime_service_client::RuntimeServiceClient::new(old.direct_channel());
    let listed = direct.list_pod_sandbox(v1alpha2::ListPodSandboxRequest::default()).await.unwrap().into_inner();
    listed.items.into_iter().map(|p| p.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_on_two_real_containerds_by_handler_and_one_going_away_is_named() {
    containerd_support::require_prerequisites();
    let new = Containerd::start_build(Build::V2_4).await;
    let mut old = Containerd::start_build(Build::V1_4).await;
    let dir = TempDir::new("routing-ctd");
    let routing = Routing {
        backends: vec![common::named_backend("old", &old.socket), common::named_backend("new", &new.socket)],
        default: 1,
        handlers: vec![HandlerRoute { handler: "old".into(), backend: 0, as_handler: String::new() }],
    };
    let config = Config {
        listen_path: dir.path("bridge.sock"),
        backend: Endpoint::Unix(new.socket.clone()),
        routing: Some(routing),
        ..Config::default()
    };
    let bridge = Bridge::start(config).await;
    let crictl = Crictl::new(&bridge.socket);
    assert!(crictl.ok(&["version"]).await.contains("v2.4.2"), "Version is the default backend's");

    // 1. Each pod where the table says, under its containerd's own id.
    let on_new = crictl.ok(&["runp", &json_file(&dir, "a.json", &pod_json("a", &new.pod_logs))]).await;
    let on_old =
        crictl.ok(&["runp", "--runtime", "old", &json_file(&dir, "b.json", &pod_json("b", &old.pod_logs))]).await;
    assert_eq!(pod_ids_new(&new).await, std::slice::from_ref(&on_new));
    assert_eq!(pod_ids_old(&old).await, std::slice::from_ref(&on_old));
    let refused =
        crictl.fails(&["runp", "--runtime", "gvisor", &json_file(&dir, "c.json", &pod_json("c", &new.pod_logs))]).await;
    assert!(refused.contains("gvisor") && refused.contains("routes.handlers"), "{refused}");
    assert_eq!(pod_ids_new(&new).await.len() + pod_ids_old(&old).await.len(), 2, "nothing made for gvisor");

    let mut containers = Vec::new();
    for (pod, name, logs) in [(&on_new, "a", &new.pod_logs), (&on_old, "b", &old.pod_logs)] {
        let container_file = json_file(&dir, &format!("{name}-app.json"), &container_json(&format!("{name}-app")));
        let pod_file = json_file(&dir, &format!("{name}-pod.json"), &pod_json(name, logs));
        let id = crictl.ok(&["create", pod, &container_file, &pod_file]).await;
        crictl.ok(&["start", &id]).await;
        assert_eq!(crictl.ok(&["exec", &id, "echo", "hello", name]).await, format!("hello {name}"));
        containers.push(id);
    }
    let pods = crictl.ok(&["pods", "-q"]).await;
    assert!(pods.contains(&on_new) && pods.contains(&on_old), "{pods}");
    let listed = crictl.ok(&["ps", "-q"]).await;
    assert!(containers.iter().all(|c| listed.contains(c.as_str())), "{listed}");

    // 2. The old containerd killed: its pods and every list fail, naming it; the new one's answer.
    old.kill();
    let away = crictl.fails(&["pods"]).await;
    assert!(away.contains("Unavailable") && away.contains(r#"backend \"old\""#), "{away}");
    let away = crictl.fails(&["inspect", &containers[1]]).await;
    assert!(away.contains("Unavailable") && away.contains(r#"backend \"old\""#), "{away}");
    assert!(crictl.ok(&["inspect", &containers[0]]).await.contains("CONTAINER_RUNNING"));
    // Status says the runtime is not ready, naming the backend away.
    let info = crictl.ok(&["info"]).await;
    assert!(info.contains("BackendUnreachable") && info.contains(r#"backend \"old\""#), "{info}");
    let d = json_file(&dir, "d.json", &pod_json("d", &new.pod_logs));
    let during = crictl.ok(&["runp", &d]).await;

    // It comes back on its state: cri-bridge recovers without a restart.
    old.restart().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let pods = loop {
        let output = crictl.run(&["pods", "-q"]).await;
        if output.status.success() {
            break String::from_utf8_lossy(&output.stdout).to_string();
        }
        assert!(Instant::now() < deadline, "cri-bridge did not recover: {}", text(&output));
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for pod in [&on_new, &on_old, &during] {
        assert!(pods.contains(pod.as_str()), "{pod} after the restart: {pods}");
    }
    for pod in [&on_new, &on_old, &during] {
        crictl.ok(&["stopp", pod]).await;
        crictl.ok(&["rmp", pod]).await;
    }
    assert!(pod_ids_new(&new).await.is_empty() && pod_ids_old(&old).await.is_empty());
    bridge.stop().await;
}

/// Issue 47, finding 1, with real runtimes: containerd 2.4.2 (`old`, the handler `old`) beside
/// containerd 1.7.24 (the default), behind a cri-bridge that has found both (their versions
/// known) but has not yet listed a pod made on 2.4.2 since its last look (as after a restart of
/// cri-bridge, or between two of its 15 s lists). 2.4.2 is then stopped (SIGSTOP: a runtime
/// stuck on a lock, which accepts connections and answers nothing), and crictl asks through
/// cri-bridge to stop the pod's container, stop the pod and remove it. Each call fails
/// UNAVAILABLE naming `old` after cri-bridge's 10 s lookup: before the fix, the lookup's
/// deadline was taken for "not here" and the call went to 1.7.24, which answers a Stop or Remove
/// of an id it never held as done (CRI v1), while the pod ran on out of the kubelet's sight.
/// Once 2.4.2 runs again, the same calls reach it, and it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_runtimes_pod_is_never_stopped_elsewhere() {
    containerd_support::require_prerequisites();
    let default = Containerd::start_build(Build::V1_7).await;
    let old = Containerd::start_build(Build::V2_4).await;
    let dir = TempDir::new("routing-stuck");
    let routing = Routing {
        backends: vec![common::named_backend("old", &old.socket), common::named_backend("new", &default.socket)],
        default: 1,
        handlers: vec![HandlerRoute { handler: "old".into(), backend: 0, as_handler: String::new() }],
    };
    let config = Config {
        listen_path: dir.path("bridge.sock"),
        backend: Endpoint::Unix(default.socket.clone()),
        routing: Some(routing),
        ..Config::default()
    };
    let bridge = Bridge::start(config).await;
    let crictl = Crictl::new(&bridge.socket);
    // Both backends found (and listed: nothing yet).
    assert_eq!(crictl.ok(&["pods", "-q"]).await, "");
    // A pod made on 2.4.2 itself, which cri-bridge has not listed since.
    let on_old = Crictl::new(&old.socket);
    let pod = on_old.ok(&["runp", &json_file(&dir, "p.json", &pod_json("p", &old.pod_logs))]).await;
    let container_file = json_file(&dir, "p-app.json", &container_json("p-app"));
    let pod_file = json_file(&dir, "p-pod.json", &pod_json("p", &old.pod_logs));
    let container = on_old.ok(&["create", &pod, &container_file, &pod_file]).await;
    on_old.ok(&["start", &container]).await;

    let pid = old.pid().expect("containerd 2.4.2 runs").to_string();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill").args([name, &pid]).status().expect("kill");
        assert!(sent.success(), "kill {name} {pid}");
    };
    signal("-STOP");
    for args in [vec!["stop", container.as_str()], vec!["stopp", pod.as_str()], vec!["rmp", "-f", pod.as_str()]] {
        let said = crictl.fails(&args).await;
        assert!(
            said.contains("Unavailable")
                && said.contains(r#"backend \"old\""#)
                && (said.contains("cannot say") || said.contains("may hold")),
            "crictl {args:?} while containerd 2.4.2 is stuck: {said}"
        );
    }
    signal("-CONT");
    // Nothing reached it meanwhile, nor 1.7.24: the pod runs on, where it was.
    let mut direct = v1::runtime_service_client::RuntimeServiceClient::new(old.direct_channel());
    let status = direct.pod_sandbox_status(v1::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: false });
    let state = status.await.expect("containerd 2.4.2 holds the pod").into_inner().status.unwrap().state();
    assert_eq!(state, v1::PodSandboxState::SandboxReady, "the pod was stopped by nothing");
    assert!(pod_ids_new(&default).await.is_empty(), "1.7.24 never held a pod");
    crictl.ok(&["stopp", &pod]).await;
    crictl.ok(&["rmp", &pod]).await;
    assert!(pod_ids_new(&old).await.is_empty(), "stopped and removed where it ran");
    bridge.stop().await;
}
