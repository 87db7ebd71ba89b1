//! Several backends behind one socket (issue 42), over real unix sockets: two in-memory runtimes,
//! one serving CRI v1 ("containerd", the default) and one serving only v1alpha2 ("docker"), so
//! that each call is also converted per backend. Every check reads the runtimes directly too:
//! where a sandbox landed, and that its id is the runtime's own.

mod common;

use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::config::{Config, Endpoint, HandlerRoute, Routing};
use cri_bridge::CriVersion::{V1alpha2, V1};
use futures_util::StreamExt;
use std::time::Duration;
use tonic::Code;

type Client = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type Images = v1::image_service_client::ImageServiceClient<tonic::transport::Channel>;

/// containerd (default, v1) and docker (v1alpha2 only); handler `docker` runs on docker as
/// `""`, `kata` on containerd as `kata`.
fn two_backends(dir: &TempDir) -> Config {
    let routing = Routing {
        backends: vec![
            common::named_backend("docker", &dir.path("docker.sock")),
            common::named_backend("containerd", &dir.path("containerd.sock")),
        ],
        default: 1,
        handlers: vec![
            HandlerRoute { handler: "docker".into(), backend: 0, as_handler: String::new() },
            HandlerRoute { handler: "kata".into(), backend: 1, as_handler: "kata".into() },
        ],
    };
    Config {
        listen_path: dir.path("bridge.sock"),
        backend: Endpoint::Unix(dir.path("containerd.sock")),
        routing: Some(routing),
        ..Config::default()
    }
}

struct Node {
    dir: TempDir,
    containerd: Runtime,
    docker: Runtime,
    bridge: Bridge,
}

impl Node {
    async fn start(name: &str) -> Node {
        Node::with_docker(name, &[V1alpha2]).await
    }

    async fn with_docker(name: &str, docker: &[cri_bridge::CriVersion]) -> Node {
        let dir = TempDir::new(name);
        let containerd = Runtime::start(&dir.path("containerd.sock"), &[V1]).await;
        let docker = Runtime::start(&dir.path("docker.sock"), docker).await;
        let bridge = Bridge::start(two_backends(&dir)).await;
        Node { dir, containerd, docker, bridge }
    }

    fn client(&self) -> Client {
        Client::new(channel(&self.bridge.socket))
    }

    /// The docker runtime asked directly, in its own version.
    fn docker_direct(&self) -> v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel> {
        v1alpha2::runtime_service_client::RuntimeServiceClient::new(channel(&self.dir.path("docker.sock")))
    }

    fn containerd_direct(&self) -> Client {
        Client::new(channel(&self.dir.path("containerd.sock")))
    }
}

async fn run_pod(client: &mut Client, name: &str, handler: &str) -> Result<String, tonic::Status> {
    let request = v1::RunPodSandboxRequest { config: Some(common::v1_pod(name)), runtime_handler: handler.into() };
    client.run_pod_sandbox(request).await.map(|r| r.into_inner().pod_sandbox_id)
}

async fn create(client: &mut Client, sandbox: &str, name: &str) -> String {
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
        image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
        ..Default::default()
    };
    let request = v1::CreateContainerRequest {
        pod_sandbox_id: sandbox.into(),
        config: Some(config),
        sandbox_config: Some(common::v1_pod(name)),
    };
    client.create_container(request).await.expect("create").into_inner().container_id
}

async fn sandbox_ids(client: &mut Client) -> Result<Vec<String>, tonic::Status> {
    let listed = client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await?;
    let mut ids: Vec<String> = listed.into_inner().items.into_iter().map(|s| s.id).collect();
    ids.sort();
    Ok(ids)
}

#[tokio::test]
async fn sandboxes_go_where_the_table_says_with_their_runtimes_ids() {
    let node = Node::start("routing-table").await;
    let mut client = node.client();
    let plain = run_pod(&mut client, "plain", "").await.unwrap();
    let docker = run_pod(&mut client, "old", "docker").await.unwrap();
    let kata = run_pod(&mut client, "kata", "kata").await.unwrap();

    // Each where the table says, under the id its runtime gave it, with the handler it gets there.
    let on_docker = node.docker_direct().list_pod_sandbox(v1alpha2::ListPodSandboxRequest::default()).await.unwrap();
    let on_docker: Vec<_> = on_docker.into_inner().items;
    assert_eq!(on_docker.len(), 1);
    assert_eq!(on_docker[0].id, docker);
    assert_eq!(on_docker[0].runtime_handler, "");
    let mut on_containerd = node.containerd_direct();
    let mut direct = sandbox_ids(&mut on_containerd).await.unwrap();
    let mut expected = vec![plain.clone(), kata.clone()];
    expected.sort();
    assert_eq!(direct, expected);
    let status =
        on_containerd.pod_sandbox_status(v1::PodSandboxStatusRequest { pod_sandbox_id: kata.clone(), verbose: false });
    assert_eq!(status.await.unwrap().into_inner().status.unwrap().runtime_handler, "kata");

    // An unknown handler is refused as a runtime refuses it, never sent to the default.
    let refused = run_pod(&mut client, "unknown", "gvisor").await.unwrap_err();
    assert_eq!(refused.code(), Code::Unknown, "{refused:?}");
    assert!(refused.message().contains("\"gvisor\"") && refused.message().contains("routes.handlers"), "{refused:?}");
    assert_eq!(sandbox_ids(&mut on_containerd).await.unwrap().len(), 2);

    // The merged list is every backend's, with the same ids.
    direct.push(docker.clone());
    direct.sort();
    assert_eq!(sandbox_ids(&mut client).await.unwrap(), direct);

    // A call that names a sandbox goes to its backend: a container in the docker pod lands on docker.
    let container = create(&mut client, &docker, "app").await;
    let listed = node.docker_direct().list_containers(v1alpha2::ListContainersRequest::default()).await.unwrap();
    assert_eq!(listed.into_inner().containers[0].id, container);
    client.start_container(v1::StartContainerRequest { container_id: container.clone() }).await.unwrap();
    let status =
        client.container_status(v1::ContainerStatusRequest { container_id: container.clone(), verbose: false });
    assert_eq!(status.await.unwrap().into_inner().status.unwrap().state, v1::ContainerState::ContainerRunning as i32);
    let exec =
        v1::ExecSyncRequest { container_id: container.clone(), cmd: vec!["echo".into(), "hi".into()], timeout: 5 };
    assert_eq!(client.exec_sync(exec).await.unwrap().into_inner().exit_code, 0);

    // A list filtered by id goes to the owner alone, and finds it.
    let filter = v1::ContainerFilter { pod_sandbox_id: docker.clone(), ..Default::default() };
    let filtered = client.list_containers(v1::ListContainersRequest { filter: Some(filter) }).await.unwrap();
    assert_eq!(filtered.into_inner().containers.len(), 1);
    let stats = client.list_container_stats(v1::ListContainerStatsRequest::default()).await.unwrap();
    assert_eq!(stats.into_inner().stats.len(), 1);

    // UpdateRuntimeConfig reaches every backend.
    let cidr = v1::UpdateRuntimeConfigRequest {
        runtime_config: Some(v1::RuntimeConfig {
            network_config: Some(v1::NetworkConfig { pod_cidr: "10.1.0.0/24".into() }),
        }),
    };
    client.update_runtime_config(cidr).await.unwrap();
    assert_eq!(node.docker.memory.calls_of("UpdateRuntimeConfig"), 1);
    assert_eq!(node.containerd.memory.calls_of("UpdateRuntimeConfig"), 1);

    // `cri-bridge probe` of the bridge names each backend.
    let probed = tokio::process::Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
        .arg("probe")
        .arg(&node.bridge.socket)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&probed.stdout);
    assert!(text.contains("backend docker, unix://") && text.contains("backend containerd, unix://"), "{text}");

    // Status: the routed handlers, the default's first.
    let status = client.status(v1::StatusRequest { verbose: false }).await.unwrap().into_inner();
    let handlers: Vec<_> = status.runtime_handlers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(handlers, ["", "docker", "kata"]);
    assert!(status.status.unwrap().conditions.iter().all(|c| c.status));

    // Stop and remove, each on its backend; a removed id is gone from the merged list.
    client.stop_container(v1::StopContainerRequest { container_id: container.clone(), timeout: 0 }).await.unwrap();
    client.remove_container(v1::RemoveContainerRequest { container_id: container.clone() }).await.unwrap();
    client.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: docker.clone() }).await.unwrap();
    client.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: docker.clone() }).await.unwrap();
    assert!(!sandbox_ids(&mut client).await.unwrap().contains(&docker));
    let on_docker = node.docker_direct().list_pod_sandbox(v1alpha2::ListPodSandboxRequest::default()).await.unwrap();
    assert!(on_docker.into_inner().items.is_empty());
    node.bridge.stop().await;
}

#[tokio::test]
async fn images_follow_the_pod_and_are_listed_once() {
    let node = Node::start("routing-images").await;
    let mut client = node.client();
    let mut images = Images::new(channel(&node.bridge.socket));
    let docker_pod = run_pod(&mut client, "old", "docker").await.unwrap();
    assert!(!docker_pod.is_empty());
    let pull = |image: &str, pod: Option<&str>| v1::PullImageRequest {
        image: Some(v1::ImageSpec { image: image.into(), ..Default::default() }),
        auth: None,
        sandbox_config: pod.map(common::v1_pod),
    };
    // A pull for the docker pod lands on docker; a pull for no pod on the default.
    images.pull_image(pull("registry.local/app:1", Some("old"))).await.unwrap();
    images.pull_image(pull("registry.local/app:1", None)).await.unwrap();
    images.pull_image(pull("registry.local/only-new:1", None)).await.unwrap();
    let on_docker = v1alpha2::image_service_client::ImageServiceClient::new(channel(&node.dir.path("docker.sock")))
        .list_images(v1alpha2::ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    let tags: Vec<_> = on_docker.iter().flat_map(|i| i.repo_tags.clone()).collect();
    assert!(tags.iter().any(|t| t.contains("app:1")) && !tags.iter().any(|t| t.contains("only-new")), "{tags:?}");

    // ImageStatus asks the default backend: where new pods run.
    let status = |image: &str| v1::ImageStatusRequest {
        image: Some(v1::ImageSpec { image: image.into(), ..Default::default() }),
        verbose: false,
    };
    assert!(images.image_status(status("registry.local/only-new:1")).await.unwrap().into_inner().image.is_some());

    // The merged list holds each image once; file systems are every backend's.
    let listed = images.list_images(v1::ListImagesRequest::default()).await.unwrap().into_inner().images;
    let mut ids: Vec<_> = listed.iter().map(|i| i.id.clone()).collect();
    let all = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), all, "an image listed twice: {listed:?}");
    let fs = images.image_fs_info(v1::ImageFsInfoRequest {}).await.unwrap().into_inner();
    assert_eq!(fs.image_filesystems.len(), 2, "{fs:?}");

    // RemoveImage goes to every backend (the one without it is no failure).
    let remove = v1::RemoveImageRequest {
        image: Some(v1::ImageSpec { image: "registry.local/app:1".into(), ..Default::default() }),
    };
    images.remove_image(remove).await.unwrap();
    let left = images.list_images(v1::ListImagesRequest::default()).await.unwrap().into_inner().images;
    assert!(!left.iter().flat_map(|i| &i.repo_tags).any(|t| t.contains("app:1")), "{left:?}");
    node.bridge.stop().await;
}

#[tokio::test]
async fn events_of_every_backend_come_on_one_stream() {
    // A backend without events (v1alpha2) makes the stream UNIMPLEMENTED, naming it: a stream
    // without its events would hide its pods' changes from the kubelet, which falls back to
    // relisting on exactly that code.
    let node = Node::start("routing-no-events").await;
    let refused = node.client().get_container_events(v1::GetEventsRequest {}).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    assert!(refused.message().contains("\"docker\""), "{refused:?}");
    node.bridge.stop().await;

    let node = Node::with_docker("routing-events", &[V1]).await;
    let mut client = node.client();
    let mut events = client.get_container_events(v1::GetEventsRequest {}).await.unwrap().into_inner();
    let new = run_pod(&mut client, "new", "").await.unwrap();
    let old = run_pod(&mut client, "old", "docker").await.unwrap();
    create(&mut client, &new, "web").await;
    create(&mut client, &old, "app").await;
    let mut seen = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(seen.contains(&new) && seen.contains(&old)) {
        let event = tokio::time::timeout_at(deadline, events.next()).await.expect("both backends' events").unwrap();
        let event = event.unwrap();
        seen.insert(event.pod_sandbox_status.map(|s| s.id).unwrap_or_default());
    }
    // One runtime ending its stream ends the caller's (which watches again): never a stream that
    // goes on without one backend's events.
    node.docker.memory.end_streams();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(event) = events.next().await {
            event.unwrap();
        }
    });
    ended.await.expect("the merged stream ends with the runtime's");
    drop(events);
    node.bridge.stop().await;
}

#[tokio::test]
async fn one_backend_down_fails_its_calls_and_lists_by_name_and_recovers() {
    let node = Node::start("routing-down").await;
    let mut client = node.client();
    let new = run_pod(&mut client, "new", "").await.unwrap();
    let old = run_pod(&mut client, "old", "docker").await.unwrap();
    let new_container = create(&mut client, &new, "web").await;
    let old_container = create(&mut client, &old, "app").await;

    node.docker.kill().await;
    // Lists fail whole, naming the backend: never a list without docker's pods.
    let listed = sandbox_ids(&mut client).await.unwrap_err();
    assert_eq!(listed.code(), Code::Unavailable, "{listed:?}");
    assert!(listed.message().contains("\"docker\""), "{listed:?}");
    // Calls for its pods fail the same way; the other backend's go on.
    let status = |id: &str| v1::ContainerStatusRequest { container_id: id.into(), verbose: false };
    let away = client.container_status(status(&old_container)).await.unwrap_err();
    assert_eq!(away.code(), Code::Unavailable, "{away:?}");
    assert!(away.message().contains("\"docker\""), "{away:?}");
    client.container_status(status(&new_container)).await.unwrap();
    run_pod(&mut client, "newer", "").await.unwrap();
    // Status: not ready, naming the backend away; ImageFsInfo: the default's file system alone
    // (the kubelet and crictl ask it when they connect).
    let ready = client.status(v1::StatusRequest { verbose: false }).await.unwrap().into_inner();
    let runtime = ready.status.unwrap().conditions.into_iter().find(|c| c.r#type == "RuntimeReady").unwrap();
    assert!(!runtime.status && runtime.reason == "BackendUnreachable", "{runtime:?}");
    assert!(runtime.message.contains("\"docker\""), "{runtime:?}");
    let mut images = Images::new(channel(&node.bridge.socket));
    let fs = images.image_fs_info(v1::ImageFsInfoRequest {}).await.unwrap().into_inner();
    assert_eq!(fs.image_filesystems.len(), 1, "{fs:?}");
    let listed = images.list_images(v1::ListImagesRequest::default()).await.unwrap_err();
    assert_eq!(listed.code(), Code::Unavailable, "{listed:?}");
    let version = client.version(v1::VersionRequest::default()).await.unwrap().into_inner();
    assert_eq!(version.version, "0.1.0");

    // It comes back (empty: an in-memory runtime keeps nothing): cri-bridge recovers alone.
    let docker = Runtime::start(&node.dir.path("docker.sock"), &[V1alpha2]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let ids = loop {
        match sandbox_ids(&mut client).await {
            Ok(ids) => break ids,
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cri-bridge did not recover: {e:?}"),
        }
    };
    assert_eq!(ids.len(), 2, "{ids:?}");
    run_pod(&mut client, "back", "docker").await.unwrap();
    node.bridge.stop().await;
    docker.stop().await;
}

#[tokio::test]
async fn a_restarted_bridge_finds_who_holds_what_from_the_backends() {
    let node = Node::start("routing-restart").await;
    let mut client = node.client();
    let old = run_pod(&mut client, "old", "docker").await.unwrap();
    let container = create(&mut client, &old, "app").await;
    node.bridge.stop().await;
    // A new cri-bridge (nothing kept on disk) routes the same ids to the same backend.
    let bridge = Bridge::start(two_backends(&node.dir)).await;
    let mut client = Client::new(channel(&bridge.socket));
    client.start_container(v1::StartContainerRequest { container_id: container.clone() }).await.unwrap();
    let status = client.pod_sandbox_status(v1::PodSandboxStatusRequest { pod_sandbox_id: old.clone(), verbose: false });
    assert_eq!(status.await.unwrap().into_inner().status.unwrap().id, old);
    // An id no backend holds gets the runtime's own answer.
    let missing = client.container_status(v1::ContainerStatusRequest { container_id: "f00".into(), verbose: false });
    assert_eq!(missing.await.unwrap_err().code(), Code::NotFound);
    bridge.stop().await;
}

#[tokio::test]
async fn backends_of_two_cgroup_drivers_do_not_start() {
    let dir = TempDir::new("routing-drivers");
    let containerd = Runtime::start(&dir.path("containerd.sock"), &[V1]).await;
    let docker = Runtime::start(&dir.path("docker.sock"), &[V1alpha2]).await;
    containerd.memory.set_cgroup_driver(Some(v1::CgroupDriver::Systemd));
    docker.memory.set_cgroup_driver(Some(v1::CgroupDriver::Cgroupfs));
    let error = cri_bridge::run(two_backends(&dir), async {}).await.unwrap_err().to_string();
    assert!(error.contains("\"docker\"") && error.contains("\"containerd\"") && error.contains("cgroup"), "{error}");
    containerd.stop().await;
    docker.stop().await;
}

/// The config file an operator writes for two backends.
fn yaml(dir: &TempDir, handler_backend: &str) -> std::path::PathBuf {
    let text = format!(
        "listen:\n  path: {bridge}\nbackends:\n  - name: docker\n    endpoint: unix://{docker}\n  - name: containerd\n    \
         endpoint: unix://{containerd}\nroutes:\n  default: containerd\n  handlers:\n    docker: {{ backend: {handler_backend}, handler: \"\" }}\n",
        bridge = dir.path("bridge.sock").display(),
        docker = dir.path("docker.sock").display(),
        containerd = dir.path("containerd.sock").display(),
    );
    let path = dir.path(&format!("config-{handler_backend}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn the_operator_sees_what_each_backend_holds_and_a_bad_route_is_named() {
    let node = Node::start("routing-cli").await;
    let mut client = node.client();
    run_pod(&mut client, "old", "docker").await.unwrap();
    let cli = env!("CARGO_BIN_EXE_cri-bridge");
    let config = yaml(&node.dir, "docker");
    let checked = std::process::Command::new(cli).args(["check-config"]).arg(&config).output().unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let shown = tokio::process::Command::new(cli).args(["backends", "--config"]).arg(&config).output().await.unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{shown:?}");
    // docker holds the old pod (under its own id), containerd nothing yet.
    let (docker, containerd) = text.split_once("backend containerd").expect(&text);
    assert!(docker.contains("default/old") && docker.contains("CRI v1alpha2"), "{text}");
    assert!(containerd.contains("no sandbox"), "{text}");

    // A backend that cannot be asked is named, and the status says so: a script waiting for
    // "no sandbox" must not take it for empty.
    let containerd_socket = node.dir.path("containerd.sock").display().to_string();
    let gone_socket = node.dir.path("no-such.sock").display().to_string();
    let away = std::fs::read_to_string(&config).unwrap().replace(&containerd_socket, &gone_socket);
    let away_config = node.dir.path("config-away.yaml");
    std::fs::write(&away_config, away).unwrap();
    let shown =
        tokio::process::Command::new(cli).args(["backends", "--config"]).arg(&away_config).output().await.unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(shown.status.code(), Some(3), "{shown:?}");
    assert!(text.contains("backend containerd") && text.contains("not asked"), "{text}");
    assert!(text.contains("default/old"), "{text}");

    // A handler routed to a backend that does not exist is named by check-config.
    let bad = yaml(&node.dir, "cri-o");
    let checked = std::process::Command::new(cli).args(["check-config"]).arg(&bad).output().unwrap();
    let error = String::from_utf8_lossy(&checked.stderr);
    assert!(!checked.status.success(), "{error}");
    assert!(
        error.contains("routes.handlers") && error.contains("\"docker\"") && error.contains("\"cri-o\""),
        "{error}"
    );
    node.bridge.stop().await;
}

#[tokio::test]
async fn a_merged_answer_over_max_message_size_is_refused_naming_it() {
    let dir = TempDir::new("routing-limit");
    let containerd = Runtime::start(&dir.path("containerd.sock"), &[V1]).await;
    let docker = Runtime::start(&dir.path("docker.sock"), &[V1alpha2]).await;
    common::fill(&containerd, 8).await;
    common::fill(&docker, 8).await;
    let bridge = Bridge::start(Config { max_message_size: 4096, ..two_backends(&dir) }).await;
    let mut client = Client::new(channel(&bridge.socket));
    // Each backend's list fits; the two merged do not: refused, never cut.
    let direct = containerd.memory.list_containers(v1::ListContainersRequest::default()).unwrap();
    let one = prost::Message::encoded_len(&direct);
    assert!(one < 4096 && 2 * one > 4096, "{one} bytes for each backend");
    let refused = client.list_containers(v1::ListContainersRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("max_message_size"), "{refused:?}");
    bridge.stop().await;
    containerd.stop().await;
    docker.stop().await;
}

#[tokio::test]
async fn a_backend_without_a_list_rpc_is_left_out_only_while_it_holds_no_sandbox() {
    // v1alpha2 has no pod metrics: docker lacks ListPodSandboxMetrics.
    let node = Node::start("routing-lacking").await;
    let mut client = node.client();
    run_pod(&mut client, "new", "").await.unwrap();
    let metrics = || v1::ListPodSandboxMetricsRequest {};
    client.list_pod_sandbox_metrics(metrics()).await.expect("docker holds nothing: containerd's answer");
    run_pod(&mut client, "old", "docker").await.unwrap();
    let lacking = client.list_pod_sandbox_metrics(metrics()).await.unwrap_err();
    assert_eq!(lacking.code(), Code::Unimplemented, "{lacking:?}");
    assert!(lacking.message().contains("\"docker\""), "{lacking:?}");
    node.bridge.stop().await;
}

/// Issue 47, finding 1: a backend that does not say "not here" in its own words (containerd's
/// CRI plugin restoring its state after a restart: `UNKNOWN` "server is not initialized yet"; a
/// runtime stuck on a lock: `DEADLINE_EXCEEDED`; one whose CRI service is not registered yet:
/// `UNIMPLEMENTED`) may hold the id. Stop and Remove of its pod and container fail `UNAVAILABLE`
/// naming it, and none reaches the other runtime, where "not found" would read as done; once it
/// answers, they reach it. A cri-bridge started cold (nothing learnt from lists) is asked.
#[tokio::test]
async fn a_backend_that_cannot_say_is_never_passed_over() {
    let node = Node::start("routing-cannot-say").await;
    let mut client = node.client();
    let old = run_pod(&mut client, "old", "docker").await.unwrap();
    let container = create(&mut client, &old, "app").await;
    node.bridge.stop().await;
    let answers = [
        tonic::Status::unknown("server is not initialized yet"),
        tonic::Status::deadline_exceeded("context deadline exceeded"),
        tonic::Status::unimplemented("unknown service runtime.v1alpha2.RuntimeService"),
    ];
    for answer in answers {
        let said = format!("{:?}", answer.code());
        // The docker runtime answers nothing but `answer`, lists included (cri-bridge learns
        // nothing at start).
        for method in ["ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus"] {
            node.docker.memory.fail(method, answer.clone());
        }
        let bridge = Bridge::start(two_backends(&node.dir)).await;
        let mut client = Client::new(channel(&bridge.socket));
        let calls = [
            client.stop_container(v1::StopContainerRequest { container_id: container.clone(), timeout: 0 }).await.err(),
            client.remove_container(v1::RemoveContainerRequest { container_id: container.clone() }).await.err(),
            client.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: old.clone() }).await.err(),
            client.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: old.clone() }).await.err(),
            client
                .pod_sandbox_status(v1::PodSandboxStatusRequest { pod_sandbox_id: old.clone(), verbose: false })
                .await
                .err(),
        ];
        for failed in calls {
            let failed = failed.unwrap_or_else(|| panic!("{said}: a call on docker's pod succeeded elsewhere"));
            assert_eq!(failed.code(), Code::Unavailable, "{said}: {failed:?}");
            assert!(failed.message().contains("\"docker\"") && failed.message().contains("cannot say"), "{failed:?}");
        }
        // A pull for its pod cannot be placed either: it does not go to the default.
        let mut images = Images::new(channel(&bridge.socket));
        let pull = v1::PullImageRequest {
            image: Some(v1::ImageSpec { image: "registry.local/app:2".into(), ..Default::default() }),
            auth: None,
            sandbox_config: Some(common::v1_pod("old")),
        };
        let pulled = images.pull_image(pull).await.unwrap_err();
        assert_eq!(pulled.code(), Code::Unavailable, "{said}: {pulled:?}");
        for method in ["StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox", "PullImage"] {
            assert_eq!(node.containerd.memory.calls_of(method), 0, "{said}: {method} reached containerd");
        }
        bridge.stop().await;
    }
    // It answers again: the calls reach it, and only it.
    for method in ["ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus"] {
        node.docker.memory.recover(method);
    }
    let bridge = Bridge::start(two_backends(&node.dir)).await;
    let mut client = Client::new(channel(&bridge.socket));
    client.stop_container(v1::StopContainerRequest { container_id: container.clone(), timeout: 0 }).await.unwrap();
    client.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: old.clone() }).await.unwrap();
    assert_eq!(node.docker.memory.calls_of("StopPodSandbox"), 1);
    assert_eq!(node.containerd.memory.calls_of("StopPodSandbox"), 0);
    bridge.stop().await;
}

/// Issue 47, finding 1, beside cri-dockerd: it says "not here" as Docker does (`UNKNOWN`,
/// "No such container: <id>"), which is taken as "not here" for that id only; its other
/// `UNKNOWN` answers are "cannot know". A cold cri-bridge still finds containerd's pod (the move
/// off Docker needs exactly this), and an id neither holds gets the default's own answer.
#[tokio::test]
async fn cri_dockerds_no_such_container_is_not_here_and_its_other_errors_are_not() {
    let node = Node::start("routing-cri-dockerd").await;
    node.docker.memory.pose_as_cri_dockerd();
    let mut client = node.client();
    let new = run_pod(&mut client, "new", "").await.unwrap();
    let container = create(&mut client, &new, "web").await;
    node.bridge.stop().await;
    node.docker.memory.fail("ListPodSandbox", tonic::Status::unknown("Cannot connect to the Docker daemon"));
    node.docker.memory.fail("ListContainers", tonic::Status::unknown("Cannot connect to the Docker daemon"));
    let bridge = Bridge::start(two_backends(&node.dir)).await;
    let mut client = Client::new(channel(&bridge.socket));
    let status =
        client.container_status(v1::ContainerStatusRequest { container_id: container.clone(), verbose: false });
    assert_eq!(status.await.unwrap().into_inner().status.unwrap().id, container);
    client.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: new.clone() }).await.unwrap();
    assert_eq!(node.containerd.memory.calls_of("StopPodSandbox"), 1);
    let missing = client.container_status(v1::ContainerStatusRequest { container_id: "f00".into(), verbose: false });
    assert_eq!(missing.await.unwrap_err().code(), Code::NotFound, "neither holds it: containerd's own answer");
    // Docker's daemon away: its answer is no "not here".
    node.docker.memory.fail("ContainerStatus", tonic::Status::unknown("Cannot connect to the Docker daemon"));
    let away = client.container_status(v1::ContainerStatusRequest { container_id: "f01".into(), verbose: false });
    let away = away.await.unwrap_err();
    assert_eq!(away.code(), Code::Unavailable, "{away:?}");
    bridge.stop().await;
}
