//! Least privilege at the interposer (issue 38): scoped sockets (`endpoints`), each with one
//! policy, beside the main socket; `listen.mutating` on the main socket; the audit log and the
//! denial counter. Typed tonic clients of v1 and v1alpha2 over the in-memory runtime (v1), and
//! the binary for what the log and the metrics show.

mod common;

use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::access::Policy;
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::config::{Principals, ScopedEndpoint};
use cri_bridge::CriVersion::V1;
use std::io::{Read, Write};
use std::time::Duration;
use tonic::Code;

type RuntimeClient = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type ImageClient = v1::image_service_client::ImageServiceClient<tonic::transport::Channel>;
type OldRuntimeClient = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

fn scoped(dir: &TempDir, name: &str, policy: Policy) -> ScopedEndpoint {
    ScopedEndpoint { path: dir.path(name), mode: 0o660, group: None, policy }
}

/// A pod with one container, made through the main socket: what the scoped sockets look at.
async fn pod_and_container(main: &mut RuntimeClient) -> (String, String) {
    let config = common::v1_pod("watched");
    let run = v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
    let pod = main.run_pod_sandbox(run).await.unwrap().into_inner().pod_sandbox_id;
    let create = v1::CreateContainerRequest {
        pod_sandbox_id: pod.clone(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            envs: vec![v1::KeyValue { key: "TOKEN".into(), value: b"s3cret".to_vec() }],
            ..Default::default()
        }),
        sandbox_config: Some(config),
    };
    let container = main.create_container(create).await.unwrap().into_inner().container_id;
    (pod, container)
}

fn assert_denied(status: &tonic::Status, rpc: &str, socket: &str, policy: &str) {
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let message = status.message();
    for part in [rpc, socket, &format!("(policy {policy})")] {
        assert!(message.contains(part), "the denial names {part}: {message}");
    }
}

#[tokio::test]
async fn each_scoped_socket_serves_what_its_policy_allows_and_denies_the_rest() {
    let dir = TempDir::new("scoped");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.endpoints = vec![
        scoped(&dir, "read-only.sock", Policy::ReadOnly),
        scoped(&dir, "images.sock", Policy::Images),
        scoped(&dir, "ci.sock", Policy::Allow(vec!["RuntimeService/ListContainers".into()])),
    ];
    let bridge = Bridge::start(config).await;
    common::wait_for_socket(&dir.path("ci.sock")).await;
    let mut main = RuntimeClient::new(channel(&bridge.socket));
    let (pod, container) = pod_and_container(&mut main).await;
    let socket = |name: &str| dir.path(name).display().to_string();

    // read-only: the reads, in v1 and in v1alpha2 (translated to the v1 runtime).
    let mut read_only = RuntimeClient::new(channel(&dir.path("read-only.sock")));
    read_only.version(v1::VersionRequest::default()).await.expect("Version");
    let listed = read_only.list_containers(v1::ListContainersRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.containers.len(), 1);
    let status = v1::ContainerStatusRequest { container_id: container.clone(), verbose: false };
    read_only.container_status(status).await.expect("ContainerStatus without verbose");
    let mut old = OldRuntimeClient::new(channel(&dir.path("read-only.sock")));
    let listed = old.list_pod_sandbox(v1alpha2::ListPodSandboxRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.items.len(), 1, "a v1alpha2 agent on the read-only socket over a v1 runtime");
    // ... never the verbose info (asked for, it is not passed on: the runtime gives none), a
    // shell, or a change.
    let verbose = v1::ContainerStatusRequest { container_id: container.clone(), verbose: true };
    let direct = main.container_status(verbose.clone()).await.unwrap().into_inner();
    assert!(direct.info["info"].contains("TOKEN=s3cret"), "the main socket passes verbose on: {:?}", direct.info);
    let status = read_only.container_status(verbose).await.unwrap().into_inner();
    assert!(status.status.is_some() && status.info.is_empty(), "no info on the read-only socket: {:?}", status.info);
    let verbose = v1::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: true };
    assert!(read_only.pod_sandbox_status(verbose).await.unwrap().into_inner().info.is_empty());
    assert!(read_only.status(v1::StatusRequest { verbose: true }).await.unwrap().into_inner().info.is_empty());
    let exec = v1::ExecSyncRequest { container_id: container.clone(), cmd: vec!["id".into()], timeout: 5 };
    let denied = read_only.exec_sync(exec.clone()).await.unwrap_err();
    assert_denied(&denied, "RuntimeService/ExecSync", &socket("read-only.sock"), "read-only");
    let url =
        v1::ExecRequest { container_id: container.clone(), cmd: vec!["sh".into()], stdout: true, ..Default::default() };
    assert_eq!(read_only.exec(url).await.unwrap_err().code(), Code::PermissionDenied, "no exec URL");
    let stop = v1::StopContainerRequest { container_id: container.clone(), timeout: 0 };
    let denied = read_only.stop_container(stop.clone()).await.unwrap_err();
    assert_denied(&denied, "RuntimeService/StopContainer", &socket("read-only.sock"), "read-only");
    let mut read_only_images = ImageClient::new(channel(&dir.path("read-only.sock")));
    read_only_images.list_images(v1::ListImagesRequest::default()).await.expect("ListImages");
    let pull = v1::PullImageRequest {
        image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
        ..Default::default()
    };
    assert_eq!(read_only_images.pull_image(pull.clone()).await.unwrap_err().code(), Code::PermissionDenied);

    // images: the ImageService alone.
    let mut images = ImageClient::new(channel(&dir.path("images.sock")));
    images.pull_image(pull).await.expect("PullImage on the images socket");
    let denied = RuntimeClient::new(channel(&dir.path("images.sock"))).version(v1::VersionRequest::default()).await;
    assert_denied(&denied.unwrap_err(), "RuntimeService/Version", &socket("images.sock"), "images");

    // allow: exactly its list.
    let mut ci = RuntimeClient::new(channel(&dir.path("ci.sock")));
    ci.list_containers(v1::ListContainersRequest::default()).await.expect("a listed RPC");
    let denied = ci.container_stats(v1::ContainerStatsRequest { container_id: container.clone() }).await.unwrap_err();
    assert_denied(&denied, "RuntimeService/ContainerStats", &socket("ci.sock"), "allow");

    // The main socket is as before, and nothing denied reached the runtime.
    assert_eq!(runtime.memory.calls_of("ExecSync"), 0);
    assert_eq!(runtime.memory.calls_of("StopContainer"), 0);
    main.stop_container(stop).await.expect("the main socket serves every RPC");
    bridge.stop().await;
    runtime.stop().await;
}

/// A field newer than cri-bridge's schema is refused on a scoped socket (the scan cannot judge
/// it), where the main socket's loss policy passes it in a read-only request with a warning.
#[tokio::test]
async fn a_request_the_scan_cannot_judge_is_refused_on_a_scoped_socket() {
    let dir = TempDir::new("scoped-unknown");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.endpoints = vec![scoped(&dir, "read-only.sock", Policy::ReadOnly)];
    let bridge = Bridge::start(config).await;
    // StatusRequest with field 99 (varint 1): unknown to every version.
    const REQUEST: &[u8] = &[0x98, 0x06, 0x01];
    let call = |socket: std::path::PathBuf| async move {
        let mut grpc = tonic::client::Grpc::new(channel(&socket));
        grpc.ready().await.unwrap();
        let path = http::uri::PathAndQuery::from_static("/runtime.v1.RuntimeService/Status");
        grpc.unary::<bytes::Bytes, bytes::Bytes, _>(
            tonic::Request::new(bytes::Bytes::from_static(REQUEST)),
            path,
            cri_bridge::grpc::RawCodec,
        )
        .await
    };
    let denied = call(dir.path("read-only.sock")).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("#99"), "names the field: {denied:?}");
    call(bridge.socket.clone()).await.expect("the main socket passes it, warned");
    bridge.stop().await;
    runtime.stop().await;
}

/// `listen.mutating`: only the listed uids and gids change the node through the main socket;
/// reads stay open to every caller.
#[tokio::test]
async fn listen_mutating_keeps_changes_to_the_listed_callers() {
    let dir = TempDir::new("mutating");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    // Neither this process's uid nor its gid.
    let (uid, gid) = (own_id("Uid:"), own_id("Gid:"));
    config.mutating = Some(Principals { uids: vec![uid + 4242], gids: vec![gid + 4242] });
    let bridge = Bridge::start(config).await;
    let mut main = RuntimeClient::new(channel(&bridge.socket));
    main.version(v1::VersionRequest::default()).await.expect("reads are open");
    main.list_containers(v1::ListContainersRequest::default()).await.expect("reads are open");
    let run = v1::RunPodSandboxRequest { config: Some(common::v1_pod("p")), runtime_handler: String::new() };
    let denied = main.run_pod_sandbox(run).await.unwrap_err();
    assert_denied(&denied, "RuntimeService/RunPodSandbox", &bridge.socket.display().to_string(), "all");
    assert!(denied.message().contains("listen.mutating"), "{denied:?}");
    assert!(denied.message().contains(&format!("uid {uid}")), "{denied:?}");
    assert_eq!(runtime.memory.calls_of("RunPodSandbox"), 0);
    bridge.stop().await;
    runtime.stop().await;
}

/// This process's real uid or gid, from `/proc/self/status` (`Uid:` / `Gid:`).
fn own_id(key: &str) -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The binary: every mutating call and every denial is one JSON audit line (whatever
/// `log.level`: here `warn`) naming the caller,
/// the socket, the RPC, the ids and the outcome, and nothing the request carried besides; the
/// denials are counted by socket and RPC; a reload (SIGHUP) changes a policy for new calls.
#[tokio::test]
async fn denials_and_changes_are_audited_counted_and_policies_reload() {
    let dir = TempDir::new("audit");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let file = dir.path("config.yaml");
    let write_config = |policy: &str| {
        let text = format!(
            "listen:\n  path: {}\nbackend:\n  endpoint: unix://{}\nlog:\n  format: json\n  level: warn\nmetrics:\n  listen: 127.0.0.1:{port}\n\
             endpoints:\n  - path: {}\n    {policy}\n",
            dir.path("bridge.sock").display(),
            dir.path("runtime.sock").display(),
            dir.path("scoped.sock").display(),
        );
        std::fs::write(&file, text).unwrap();
    };
    write_config("policy: read-only");
    let log = dir.path("stderr.log");
    let mut daemon = std::process::Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
        .args(["serve", "--config"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    common::wait_for_socket(&dir.path("scoped.sock")).await;
    let mut main = RuntimeClient::new(channel(&dir.path("bridge.sock")));
    let (pod, container) = pod_and_container(&mut main).await;
    let mut scoped = RuntimeClient::new(channel(&dir.path("scoped.sock")));
    let stop = v1::StopContainerRequest { container_id: container.clone(), timeout: 0 };
    assert_eq!(scoped.stop_container(stop).await.unwrap_err().code(), Code::PermissionDenied);

    let (_, metrics) = get(port, "/metrics");
    let counted = format!(
        "cri_bridge_denials_total{{socket=\"{}\",rpc=\"RuntimeService/StopContainer\"}} 1",
        dir.path("scoped.sock").display()
    );
    assert!(metrics.contains(&counted), "{counted} in:\n{metrics}");

    // A reload to an allow list: StopContainer is allowed from the next call on.
    write_config("policy: allow\n    allow: [RuntimeService/StopContainer]");
    let pid = daemon.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let stop = v1::StopContainerRequest { container_id: container.clone(), timeout: 0 };
    let mut stopped = None;
    for _ in 0..100 {
        match scoped.stop_container(stop.clone()).await {
            Ok(answer) => {
                stopped = Some(answer);
                break;
            }
            Err(status) => assert_eq!(status.code(), Code::PermissionDenied, "{status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stopped.is_some(), "the reloaded policy applies to new calls");
    // A socket added by a reload waits for a restart, and the reload says so.
    let text = std::fs::read_to_string(&file).unwrap()
        + &format!("  - path: {}\n    policy: images\n", dir.path("added.sock").display());
    std::fs::write(&file, text).unwrap();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let mut warned = false;
    for _ in 0..100 {
        let log = std::fs::read_to_string(&log).unwrap();
        if log.lines().any(|l| l.contains("change only when cri-bridge restarts") && l.contains("endpoints")) {
            warned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(warned, "the reload names endpoints as waiting for a restart");
    assert!(!dir.path("added.sock").exists(), "no socket is opened by a reload");
    let _ = daemon.kill();
    let _ = daemon.wait();

    let text = std::fs::read_to_string(&log).unwrap();
    let audit: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["target"] == "audit")
        .collect();
    let fields = |v: &serde_json::Value| v["fields"].clone();
    let create = audit.iter().map(fields).find(|f| f["rpc"] == "RuntimeService/CreateContainer").expect("the create");
    assert_eq!(create["outcome"], "OK");
    assert_eq!(create["sandbox"], pod.as_str());
    assert_eq!(create["socket"], dir.path("bridge.sock").display().to_string());
    assert_eq!(create["caller_uid"], own_id("Uid:"));
    assert!(create["caller_exe"].as_str().unwrap().contains("scoped_sockets"), "{create}");
    let denied = audit.iter().map(fields).find(|f| f["outcome"] == "denied").expect("the denial");
    assert_eq!(denied["rpc"], "RuntimeService/StopContainer");
    assert_eq!(denied["container"], container.as_str());
    assert_eq!(denied["socket"], dir.path("scoped.sock").display().to_string());
    assert!(audit.iter().map(fields).any(|f| f["rpc"] == "RuntimeService/StopContainer" && f["outcome"] == "OK"));
    assert!(!audit.iter().any(|f| f["fields"]["rpc"] == "RuntimeService/ListContainers"), "reads are not audited");
    assert!(!text.contains("s3cret"), "no env value is logged");
    runtime.stop().await;
}

/// A plain HTTP/1.0 GET to 127.0.0.1: the status code and the body.
fn get(port: u16, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), body.to_string())
}

/// `brownout`: a CRI version being retired is refused on the main socket, always or for part
/// of each period, naming the migration; the other versions are served as before.
#[tokio::test]
async fn a_browned_out_version_is_refused_naming_the_migration() {
    use cri_bridge::access::brownout::Brownout;
    let dir = TempDir::new("brownout");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.brownout = vec![(cri_bridge::CriVersion::V1alpha2, Brownout::Always)];
    let bridge = Bridge::start(config).await;
    let mut old = OldRuntimeClient::new(channel(&bridge.socket));
    let refused = old.version(v1alpha2::VersionRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "as a runtime that serves v1 alone answers: {refused:?}");
    for part in ["RuntimeService/Version", "browned out", "brownout.v1alpha2", "cri-bridge callers"] {
        assert!(refused.message().contains(part), "names {part}: {refused:?}");
    }
    RuntimeClient::new(channel(&bridge.socket)).version(v1::VersionRequest::default()).await.expect("v1 is served");
    bridge.stop().await;

    // A schedule: refused for the first second of every two, served the other.
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.listen_path = dir.path("scheduled.sock");
    let schedule = Brownout::Schedule { every: Duration::from_secs(2), refused: Duration::from_secs(1) };
    config.brownout = vec![(cri_bridge::CriVersion::V1alpha2, schedule)];
    let bridge = Bridge::start(config).await;
    let mut old = OldRuntimeClient::new(channel(&bridge.socket));
    let (mut refused, mut served) = (0, 0);
    for _ in 0..60 {
        match old.version(v1alpha2::VersionRequest::default()).await {
            Ok(_) => served += 1,
            Err(status) => {
                assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
                assert!(status.message().contains("the first 1s of every 2s"), "{status:?}");
                refused += 1;
            }
        }
        if refused > 0 && served > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused > 0 && served > 0, "both halves of the period seen: {refused} refused, {served} served");
    bridge.stop().await;
    runtime.stop().await;
}
