//! Running cri-bridge as a node daemon: the Prometheus endpoint scraped after a known sequence of
//! calls, the callers report for a real client in a pod's cgroup, `cri-bridge probe` of the
//! bridge's own socket and its exit codes, and `SIGHUP` with a good and a bad config file.

mod common;

use common::process::{notifications_until, wait_for_listener, wait_timeout, Reaped};
use common::{Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::config::{Config, MetricsListen};
use cri_bridge::CriVersion;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");

/// `GET /metrics` over HTTP/1.0 on `stream`: the body.
async fn get_metrics<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S) -> String {
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .expect("the scrape answered within 5 s")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
    assert!(body.trim_end().ends_with("# EOF"), "OpenMetrics text ends with # EOF:\n{body}");
    body.to_string()
}

/// The samples of a scrape: series (name and labels as written) → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {line:?}"));
            (series.to_string(), value.parse().unwrap_or_else(|_| panic!("a number in {line:?}")))
        })
        .collect()
}

fn operations(method: &str, backend: &str, code: &str) -> String {
    let service = if method == "ListImages" { "ImageService" } else { "RuntimeService" };
    format!(
        "cri_bridge_operations_total{{service=\"{service}\",method=\"{method}\",frontend_version=\"v1\",backend_version=\"{backend}\",code=\"{code}\"}}"
    )
}

/// A v1 container asking for the Strict supplemental groups policy, which CRI v1alpha2 lacks.
fn strict_container(pod_id: &str, name: &str) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: pod_id.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            linux: Some(v1::LinuxContainerConfig {
                security_context: Some(v1::LinuxContainerSecurityContext {
                    supplemental_groups_policy: v1::SupplementalGroupsPolicy::Strict as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: Some(pod_config()),
    }
}

fn pod_config() -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: "p".into(),
            uid: "0d7a7cf1-5a6b-4c1d-9e8f-7a6b5c4d3e2f".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_scrape_after_a_known_sequence_of_calls_counts_each_call_exactly() {
    let dir = TempDir::new("ops-scrape");
    // A runtime of CRI v1alpha2 only: every v1 call is converted, both ways.
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1alpha2]).await;
    let metrics_socket = dir.path("metrics.sock");
    let config = Config {
        metrics_listen: Some(MetricsListen::Unix(metrics_socket.clone())),
        ..common::config(&dir, &dir.path("runtime.sock"), None)
    };
    let bridge = Bridge::start(config).await;
    let channel = common::channel(&bridge.socket);
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(channel.clone());
    for _ in 0..3 {
        client.version(v1::VersionRequest::default()).await.expect("Version");
    }
    for _ in 0..2 {
        client.list_containers(v1::ListContainersRequest::default()).await.expect("ListContainers");
    }
    let refused = client.create_container(strict_container("no-such-pod", "app")).await.expect_err("refused");
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    let mut raw = tonic::client::Grpc::new(channel.clone());
    raw.ready().await.unwrap();
    let unknown = raw
        .unary(
            tonic::Request::new(bytes::Bytes::new()),
            http::uri::PathAndQuery::from_static("/runtime.v1.NoSuchService/Nothing"),
            cri_bridge::grpc::RawCodec,
        )
        .await
        .expect_err("an unknown method");
    assert_eq!(unknown.code(), Code::Unimplemented);

    let text = get_metrics(tokio::net::UnixStream::connect(&metrics_socket).await.unwrap()).await;
    let got = samples(&text);
    let value = |series: &str| *got.get(series).unwrap_or_else(|| panic!("{series} is not in the scrape:\n{text}"));
    assert_eq!(value(&operations("Version", "v1alpha2", "OK")), 3.0);
    assert_eq!(value(&operations("ListContainers", "v1alpha2", "OK")), 2.0);
    assert_eq!(value(&operations("CreateContainer", "v1alpha2", "UNIMPLEMENTED")), 1.0);
    assert_eq!(
        value("cri_bridge_operations_total{service=\"(unknown)\",method=\"(unknown)\",frontend_version=\"(unknown)\",backend_version=\"none\",code=\"UNIMPLEMENTED\"}"),
        1.0
    );
    let all: f64 = got.iter().filter(|(s, _)| s.starts_with("cri_bridge_operations_total{")).map(|(_, v)| v).sum();
    assert_eq!(all, 7.0, "nothing else was counted:\n{text}");
    assert_eq!(
        value("cri_bridge_operation_duration_seconds_count{service=\"RuntimeService\",method=\"Version\"}"),
        3.0
    );
    // The kubelet's buckets: 5 ms × 2.5ⁿ, 14 of them, and +Inf.
    let buckets = got
        .keys()
        .filter(|s| s.starts_with("cri_bridge_operation_duration_seconds_bucket{"))
        .filter(|s| s.ends_with(",service=\"RuntimeService\",method=\"Version\"}"))
        .count();
    assert_eq!(buckets, 15, "{text}");
    assert!(text.contains("_bucket{le=\"0.005\",service=\"RuntimeService\",method=\"Version\"}"), "{text}");
    // Six requests converted (the refused one too: the loss is found by converting), five answers.
    assert_eq!(value("cri_bridge_conversion_duration_seconds_count{direction=\"request\"}"), 6.0);
    assert_eq!(value("cri_bridge_conversion_duration_seconds_count{direction=\"response\"}"), 5.0);
    assert_eq!(
        value("cri_bridge_losses_total{field=\"LinuxContainerSecurityContext.supplemental_groups_policy\",action=\"reject\",direction=\"request\"}"),
        1.0
    );
    assert_eq!(value("cri_bridge_inflight_calls"), 0.0);
    let endpoint = format!("unix://{}", dir.path("runtime.sock").display());
    assert_eq!(value(&format!("cri_bridge_backend_up{{endpoint=\"{endpoint}\"}}")), 1.0);
    assert_eq!(value(&format!("cri_bridge_backend_reconnects_total{{endpoint=\"{endpoint}\"}}")), 0.0);
    let info = got
        .iter()
        .find(|(s, _)| s.starts_with("cri_bridge_backend_info{"))
        .unwrap_or_else(|| panic!("no backend_info:\n{text}"));
    for part in [
        format!("endpoint=\"{endpoint}\""),
        "version=\"v1alpha2\"".into(),
        "revision=\"1.25\"".into(),
        "runtime_name=\"cri-bridge-memory\"".into(),
    ] {
        assert!(info.0.contains(&part), "{} lacks {part}", info.0);
    }
    // This test's own process made the calls: one caller, in v1.
    let exe = std::env::current_exe().unwrap();
    let client = exe.file_name().unwrap().to_string_lossy();
    assert_eq!(value(&format!("cri_bridge_callers{{version=\"v1\",client=\"{client}\"}}")), 1.0);

    drop(channel);
    bridge.stop().await;
    assert!(!metrics_socket.exists(), "the metrics socket is removed at exit");
    runtime.stop().await;
}

#[tokio::test]
async fn metrics_on_a_loopback_port_answer_and_other_paths_are_not_found() {
    let dir = TempDir::new("ops-tcp");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    // A free port: bound and let go (a race with another process is possible, not likely).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = Config {
        metrics_listen: Some(MetricsListen::Tcp(address)),
        ..common::config(&dir, &dir.path("runtime.sock"), None)
    };
    let bridge = Bridge::start(config).await;
    v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&bridge.socket))
        .version(v1::VersionRequest::default())
        .await
        .unwrap();
    let text = get_metrics(tokio::net::TcpStream::connect(address).await.unwrap()).await;
    assert_eq!(samples(&text)[&operations("Version", "v1", "OK")], 1.0, "{text}");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(b"GET /secrets HTTP/1.0\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.0 404") || answer.starts_with("HTTP/1.1 404"), "{answer}");
    bridge.stop().await;
    runtime.stop().await;
}

/// A cgroup hierarchy this process may make cgroups in: cgroup v2's, or v1's named `systemd`.
fn writable_cgroup_root() -> PathBuf {
    let candidates = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"];
    for root in candidates {
        let probe = Path::new(root).join("cri-bridge-probe");
        if Path::new(root).join("cgroup.procs").exists() && std::fs::create_dir(&probe).is_ok() {
            let _ = std::fs::remove_dir(&probe);
            return PathBuf::from(root);
        }
    }
    panic!("no cgroup hierarchy is writable here ({candidates:?}): the caller test needs root and cgroupfs");
}

fn go_client(version: &str) -> PathBuf {
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target/clients/bin/cri-session-{version}"));
    assert!(binary.exists(), "{} is missing: run tests/clients/go/build.sh (.ci/run does)", binary.display());
    binary
}

/// The cgroup a kubelet with the systemd driver makes for a container of a BestEffort pod.
struct PodCgroup(PathBuf);

impl Drop for PodCgroup {
    fn drop(&mut self) {
        // Innermost first; a cgroup with a process left in it stays (and says so).
        let mut dir = self.0.clone();
        while dir.file_name().is_some_and(|n| {
            n.to_string_lossy().starts_with("kubepods") || n.to_string_lossy().starts_with("cri-containerd-")
        }) {
            if let Err(error) = std::fs::remove_dir(&dir) {
                eprintln!("cannot remove {}: {error}", dir.display());
            }
            dir.pop();
        }
    }
}

#[tokio::test]
async fn callers_report_names_a_real_client_in_its_pod_cgroup_and_one_outside() {
    let dir = TempDir::new("ops-callers");
    let socket = dir.path("bridge.sock");
    let mut bridge = Reaped(
        Command::new(BIN)
            .args(["serve", "--listen"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path("stderr.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_listener(&mut bridge, &socket).await;
    let pod_uid = "5f0e8b9a-1c2d-4e3f-8a7b-6c5d4e3f2a1b";
    let container = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d";
    let cgroup = PodCgroup(writable_cgroup_root().join(format!(
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{container}.scope",
        pod_uid.replace('-', "_")
    )));
    std::fs::create_dir_all(&cgroup.0).unwrap();
    // The client joins the cgroup, then becomes grpc-go's CRI v1alpha2 client (as crictl 1.25 would
    // be against a v1alpha2 runtime), and runs a whole pod-and-container session.
    let procs = cgroup.0.join("cgroup.procs");
    let in_pod = format!(
        "echo $$ > '{}' && exec '{}' -socket '{}'",
        procs.display(),
        go_client("v1alpha2").display(),
        socket.display()
    );
    let run = |mut command: Command| async move {
        tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
    };
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(&in_pod);
    let output = run(sh).await;
    assert!(output.status.success(), "the client in the pod cgroup: {output:?}");
    let mut outside = Command::new(go_client("v1"));
    outside.arg("-socket").arg(&socket);
    let output = run(outside).await;
    assert!(output.status.success(), "the client outside pods: {output:?}");

    // `cri-bridge probe` asks in all three versions, but is no caller to migrate.
    let mut probe = Command::new(BIN);
    probe.arg("probe").arg(&socket);
    let output = run(probe).await;
    assert!(output.status.success(), "{output:?}");

    let mut ask = Command::new(BIN);
    ask.args(["callers", "--json"]).arg(&socket);
    let output = run(ask).await;
    assert!(output.status.success(), "{output:?}");
    let report: Vec<cri_bridge::callers::CallerReport> = serde_json::from_slice(&output.stdout).unwrap();
    let row = |client: &str| {
        report.iter().find(|r| r.client == client).unwrap_or_else(|| panic!("no {client} in {report:#?}")).clone()
    };
    let in_pod = row("cri-session-v1alpha2");
    assert_eq!(in_pod.pod_uid.as_deref(), Some(pod_uid), "{in_pod:?}");
    assert_eq!(in_pod.container_id.as_deref(), Some(container), "{in_pod:?}");
    assert_eq!(in_pod.uid, 0);
    assert_eq!(in_pod.calls.len(), 1, "{in_pod:?}");
    assert_eq!(in_pod.calls[0].0, "v1alpha2");
    assert!(in_pod.calls[0].1 >= 10, "a whole session: {in_pod:?}");
    assert!(in_pod.exe.ends_with("target/clients/bin/cri-session-v1alpha2"), "{in_pod:?}");
    assert!(report.iter().all(|r| r.client != "cri-bridge"), "the probe is not a caller: {report:#?}");

    // Another file named cri-bridge (here a copy of the same program, so that it marks its calls
    // as cri-bridge's own) is a caller like any other: only the daemon's own executable file
    // (device and inode) is trusted, never a name.
    std::fs::create_dir_all(dir.path("elsewhere")).unwrap();
    let impostor = dir.path("elsewhere").join("cri-bridge");
    std::fs::copy(BIN, &impostor).unwrap();
    let mut probe = Command::new(&impostor);
    probe.arg("probe").arg(&socket);
    assert!(run(probe).await.status.success());
    let mut ask = Command::new(BIN);
    ask.args(["callers", "--json"]).arg(&socket);
    let output = run(ask).await;
    let report: Vec<cri_bridge::callers::CallerReport> = serde_json::from_slice(&output.stdout).unwrap();
    let copied = report.iter().find(|r| r.client == "cri-bridge").unwrap_or_else(|| panic!("{report:#?}"));
    assert!(copied.exe.ends_with("elsewhere/cri-bridge"), "{copied:?}");
    let v1 = row("cri-session-v1");
    assert_eq!((v1.pod_uid.as_deref(), v1.container_id.as_deref()), (None, None), "{v1:?}");
    assert_eq!(v1.calls.iter().map(|(v, _)| v.as_str()).collect::<Vec<_>>(), ["v1"]);

    let mut table = Command::new(BIN);
    table.arg("callers").arg(&socket);
    let output = run(table).await;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(text.starts_with("CLIENT "), "{text}");
    let line = text.lines().find(|l| l.starts_with("cri-session-v1alpha2 ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(pod_uid) && line.contains(&container[..13]) && line.contains("v1alpha2 ("), "{line}");
    // Each caller's first call in each version is logged, once.
    let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap();
    let first: Vec<&str> = logs.lines().filter(|l| l.contains("first call of a caller")).collect();
    // Two clients, and the copy in each of the three versions its probe asks in.
    assert_eq!(first.len(), 5, "`cri-bridge callers` and `probe` are not callers:\n{logs}");
    assert_eq!(first.iter().filter(|l| l.contains("elsewhere/cri-bridge")).count(), 3, "{logs}");
}

#[tokio::test]
async fn probe_of_the_bridge_reports_it_and_its_runtime_with_an_exit_code_scripts_can_use() {
    let dir = TempDir::new("ops-probe");
    let up = dir.path("up.sock");
    let down = dir.path("down.sock");
    let spawn = |listen: &Path, backend: &str| {
        Reaped(
            Command::new(BIN)
                .args(["serve", "--listen"])
                .arg(listen)
                .args(["--backend", backend])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mut healthy = spawn(&up, "memory");
    let absent = format!("unix://{}", dir.path("no-runtime.sock").display());
    let mut broken = spawn(&down, &absent);
    wait_for_listener(&mut healthy, &up).await;
    wait_for_listener(&mut broken, &down).await;
    let probe = |socket: PathBuf| async move {
        tokio::task::spawn_blocking(move || Command::new(BIN).arg("probe").arg(socket).output().unwrap()).await.unwrap()
    };

    let output = probe(up.clone()).await;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(text.starts_with("bridge:   cri-bridge "), "{text}");
    assert!(text.contains(&format!("pid {}", healthy.id())), "{text}");
    assert!(text.contains("runtime:  memory up since "), "{text}");
    assert!(text.contains("speaks CRI v1 at the Kubernetes 1."), "{text}");
    // And the runtime as the kubelets see it through the bridge.
    assert!(text.contains("through cri-bridge:\nruntime:  cri-bridge-memory"), "{text}");

    let output = probe(down.clone()).await;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(2), "bridge up, runtime down: {output:?}");
    assert!(text.contains(&format!("runtime:  {absent} DOWN since ")), "{text}");
    assert!(text.contains("through cri-bridge: the container runtime at"), "{text}");

    let output = probe(dir.path("nothing.sock")).await;
    assert_eq!(output.status.code(), Some(1), "{output:?}");
}

/// Waits up to 5 s for `log` to hold a line with every one of `parts`.
async fn log_line(log: &Path, parts: &[&str]) -> String {
    for _ in 0..250 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no line with {parts:?} in:\n{}", std::fs::read_to_string(log).unwrap_or_default());
}

#[tokio::test]
async fn sighup_applies_a_good_file_and_keeps_the_running_config_on_a_bad_one() {
    let dir = TempDir::new("ops-reload");
    let socket = dir.path("bridge.sock");
    let file = dir.path("config.yaml");
    let base = format!("listen:\n  path: {}\nbackend:\n  endpoint: memory\n  version: v1alpha2\n", socket.display());
    std::fs::write(&file, &base).unwrap();
    let notify = tokio::net::UnixDatagram::bind(dir.path("notify.sock")).unwrap();
    let log = dir.path("stderr.log");
    let mut bridge = Reaped(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&file)
            .env("NOTIFY_SOCKET", dir.path("notify.sock"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let ready = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
    assert!(ready.last().is_some_and(|m| m.starts_with("READY=1")), "{ready:?}");
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&socket));
    let pod = client
        .run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(pod_config()), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let refused = client.create_container(strict_container(&pod, "refused")).await.expect_err("refused by default");
    assert_eq!(refused.code(), Code::Unimplemented);

    let hangup = |child: &Reaped| {
        assert!(Command::new("kill").arg("-HUP").arg(child.id().to_string()).status().unwrap().success());
    };
    let reloaded = |seen: &[String]| {
        seen.iter().any(|m| m.starts_with("RELOADING=1")) && seen.last().is_some_and(|m| m.starts_with("READY=1"))
    };

    // A good file: the override applies to the next call, and the log level changes.
    std::fs::write(
        &file,
        format!("{base}loss_policy:\n  LinuxContainerSecurityContext.supplemental_groups_policy: warn\nlog:\n  level: debug\n"),
    )
    .unwrap();
    hangup(&bridge);
    let seen = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
    assert!(reloaded(&seen), "RELOADING=1, then READY=1: {seen:?}");
    log_line(&log, &["config reloaded", "log.level", "loss_policy"]).await;
    client.create_container(strict_container(&pod, "warned")).await.expect("allowed (with a warning) after the reload");
    log_line(&log, &["WARN", "dropped a field", "supplemental_groups_policy"]).await;
    log_line(&log, &["DEBUG"]).await;

    // A bad file: refused, naming the key; the override stays in force.
    std::fs::write(&file, format!("{base}loss_policy:\n  NoSuchMessage.field: allow\n")).unwrap();
    hangup(&bridge);
    let seen = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
    assert!(reloaded(&seen), "{seen:?}");
    let line = log_line(&log, &["config reload refused"]).await;
    assert!(line.contains("ERROR") && line.contains("loss_policy") && line.contains("NoSuchMessage.field"), "{line}");
    client.create_container(strict_container(&pod, "kept")).await.expect("the running config is kept");

    // A setting that cannot change live is reported, and the socket stays where it is.
    let moved = dir.path("moved.sock");
    std::fs::write(
        &file,
        base.replace(&socket.display().to_string(), &moved.display().to_string())
            + "loss_policy:\n  LinuxContainerSecurityContext.supplemental_groups_policy: warn\n",
    )
    .unwrap();
    hangup(&bridge);
    notifications_until(&notify, |m| m.starts_with("READY=1")).await;
    let line = log_line(&log, &["change only when cri-bridge restarts"]).await;
    assert!(line.contains("listen.path") && line.contains("WARN"), "{line}");
    // ... and not after a line saying that nothing changed.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("nothing changed") && !text.contains("nothing that can change"), "{text}");
    client.version(v1::VersionRequest::default()).await.expect("still serving on the first socket");
    assert!(!moved.exists());

    assert!(Command::new("kill").arg("-TERM").arg(bridge.id().to_string()).status().unwrap().success());
    let status = wait_timeout(&mut bridge, Duration::from_secs(5)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

#[test]
fn metrics_listen_takes_a_socket_path_or_a_loopback_port_only() {
    let parse = |value: &str| Config::parse(&format!("metrics:\n  listen: \"{value}\"\n"));
    assert_eq!(
        parse("/run/cri-bridge/metrics.sock").unwrap().metrics_listen,
        Some(MetricsListen::Unix("/run/cri-bridge/metrics.sock".into()))
    );
    assert_eq!(
        parse("127.0.0.1:9464").unwrap().metrics_listen,
        Some(MetricsListen::Tcp("127.0.0.1:9464".parse().unwrap()))
    );
    assert!(parse("[::1]:9464").is_ok());
    for bad in ["0.0.0.0:9464", "10.1.2.3:9464", "localhost", "metrics.sock"] {
        let error = parse(bad).expect_err(bad).to_string();
        assert!(error.contains("metrics.listen"), "{bad}: {error}");
    }
    let error = parse("/run/cri-bridge/cri-bridge.sock").expect_err("the CRI socket").to_string();
    assert!(error.contains("metrics.listen") && error.contains("CRI socket"), "{error}");
    assert_eq!(Config::parse("").unwrap().metrics_listen, None, "nothing listens by default");
}

#[tokio::test]
async fn systemd_status_says_the_runtime_is_away_until_it_answers() {
    let dir = TempDir::new("ops-status");
    let socket = dir.path("bridge.sock");
    let runtime_socket = dir.path("runtime.sock");
    let notify = tokio::net::UnixDatagram::bind(dir.path("notify.sock")).unwrap();
    let _bridge = Reaped(
        Command::new(BIN)
            .args(["serve", "--listen"])
            .arg(&socket)
            .arg("--backend")
            .arg(format!("unix://{}", runtime_socket.display()))
            .env("NOTIFY_SOCKET", dir.path("notify.sock"))
            .env("WATCHDOG_USEC", "400000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Ready as soon as the socket is served, saying the runtime is not there yet.
    let seen = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
    let ready = seen.last().cloned().unwrap_or_default();
    assert!(ready.starts_with("READY=1\nSTATUS=serving CRI v1,v1alpha2,v1alpha1 on "), "{seen:?}");
    assert!(ready.contains(&format!("runtime unix://{} not answering", runtime_socket.display())), "{ready}");
    // Pings go on while the runtime is away: it is not cri-bridge that is broken.
    let seen = notifications_until(&notify, |m| m == "WATCHDOG=1").await;
    assert_eq!(seen.last().map(String::as_str), Some("WATCHDOG=1"), "{seen:?}");

    let runtime = Runtime::start(&runtime_socket, &[CriVersion::V1alpha2]).await;
    let seen = notifications_until(&notify, |m| m.starts_with("STATUS=") && m.contains(" up: CRI v1alpha2")).await;
    let found = seen.last().cloned().unwrap_or_default();
    assert!(found.contains("up: CRI v1alpha2, cri-bridge-memory"), "the status follows the runtime: {seen:?}");
    runtime.stop().await;
}
