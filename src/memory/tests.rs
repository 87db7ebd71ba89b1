use super::*;
use crate::api::v1;
use futures_util::stream::StreamExt;
use tonic::Code;
use tonic::Status;

fn pod_config(name: &str, labels: &[(&str, &str)]) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        log_directory: "/var/log/pods/x".into(),
        ..Default::default()
    }
}

fn run_pod(rt: &MemoryRuntime, name: &str, labels: &[(&str, &str)]) -> String {
    let req = v1::RunPodSandboxRequest { config: Some(pod_config(name, labels)), runtime_handler: String::new() };
    rt.run_pod_sandbox(req).unwrap().pod_sandbox_id
}

fn container_config(name: &str, image: &str) -> v1::ContainerConfig {
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
        image: Some(v1::ImageSpec { image: image.into(), ..Default::default() }),
        labels: [("name".to_string(), name.to_string())].into(),
        log_path: format!("{name}/0.log"),
        ..Default::default()
    }
}

fn create(rt: &MemoryRuntime, pod: &str, name: &str) -> Result<String, Status> {
    let req = v1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(container_config(name, "busybox")),
        sandbox_config: None,
    };
    rt.create_container(req).map(|r| r.container_id)
}

fn start(rt: &MemoryRuntime, id: &str) -> Result<v1::StartContainerResponse, Status> {
    rt.start_container(v1::StartContainerRequest { container_id: id.into() })
}

fn status(rt: &MemoryRuntime, id: &str) -> v1::ContainerStatus {
    let req = v1::ContainerStatusRequest { container_id: id.into(), verbose: false };
    rt.container_status(req).unwrap().status.unwrap()
}

fn exec(rt: &MemoryRuntime, id: &str, cmd: &[&str]) -> v1::ExecSyncResponse {
    let cmd = cmd.iter().map(|s| s.to_string()).collect();
    rt.exec_sync(v1::ExecSyncRequest { container_id: id.into(), cmd, timeout: 1 }).unwrap()
}

#[test]
fn ids_are_64_hex_characters() {
    let rt = MemoryRuntime::new();
    let (a, b) = (rt.new_id(), rt.new_id());
    assert_ne!(a, b);
    for id in [&a, &b] {
        assert_eq!(id.len(), 64);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
}

#[test]
fn lifecycle() {
    let rt = MemoryRuntime::new();
    let pod = run_pod(&rt, "web", &[]);
    let id = create(&rt, &pod, "app").unwrap();
    let created = status(&rt, &id);
    assert_eq!(created.state, v1::ContainerState::ContainerCreated as i32);
    assert!(created.created_at > 0 && created.started_at == 0);
    assert_eq!(created.log_path, "/var/log/pods/x/app/0.log");
    assert!(created.image_id.starts_with("sha256:"));

    start(&rt, &id).unwrap();
    let running = status(&rt, &id);
    assert_eq!(running.state, v1::ContainerState::ContainerRunning as i32);
    assert!(running.started_at >= running.created_at);

    let echo = exec(&rt, &id, &["echo", "hello", "world"]);
    assert_eq!((echo.stdout.as_slice(), echo.exit_code), (&b"hello world\n"[..], 0));
    assert_eq!(exec(&rt, &id, &["sh", "-c", "exit 3"]).exit_code, 3);
    assert_eq!(exec(&rt, &id, &["/bin/false"]).exit_code, 1);
    let unknown = exec(&rt, &id, &["nginx", "-t"]);
    assert_eq!((unknown.exit_code, unknown.stderr.as_slice()), (127, &b"nginx: not found\n"[..]));

    rt.stop_container(v1::StopContainerRequest { container_id: id.clone(), timeout: 10 }).unwrap();
    let exited = status(&rt, &id);
    assert_eq!(exited.state, v1::ContainerState::ContainerExited as i32);
    assert_eq!((exited.exit_code, exited.reason.as_str()), (143, "Error"));
    assert!(exited.finished_at >= exited.started_at);

    rt.remove_container(v1::RemoveContainerRequest { container_id: id.clone() }).unwrap();
    let gone = rt.container_status(v1::ContainerStatusRequest { container_id: id.clone(), verbose: false });
    assert_eq!(gone.unwrap_err().code(), Code::NotFound);

    rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).unwrap();
    let pod_status = rt.pod_sandbox_status(v1::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: true });
    let pod_status = pod_status.unwrap();
    assert_eq!(pod_status.status.unwrap().state, v1::PodSandboxState::SandboxNotready as i32);
    assert!(pod_status.info["info"].starts_with('{'));
    rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod }).unwrap();
    assert!(rt.list_pod_sandbox(Default::default()).unwrap().items.is_empty());
}

#[test]
fn filters() {
    let rt = MemoryRuntime::new();
    let web = run_pod(&rt, "web", &[("app", "web"), ("tier", "front")]);
    let db = run_pod(&rt, "db", &[("app", "db")]);
    rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: db.clone() }).unwrap();
    let list = |filter: v1::PodSandboxFilter| -> Vec<String> {
        let req = v1::ListPodSandboxRequest { filter: Some(filter) };
        rt.list_pod_sandbox(req).unwrap().items.into_iter().map(|p| p.id).collect()
    };
    let by_label = v1::PodSandboxFilter { label_selector: [("app".into(), "web".into())].into(), ..Default::default() };
    assert_eq!(list(by_label), [web.as_str()]);
    let ready = v1::PodSandboxStateValue { state: v1::PodSandboxState::SandboxReady as i32 };
    assert_eq!(list(v1::PodSandboxFilter { state: Some(ready), ..Default::default() }), [web.as_str()]);
    assert_eq!(list(v1::PodSandboxFilter { id: db.clone(), ..Default::default() }), [db.as_str()]);
    assert_eq!(list(Default::default()).len(), 2);

    let a = create(&rt, &web, "a").unwrap();
    let b = create(&rt, &web, "b").unwrap();
    start(&rt, &b).unwrap();
    let containers = |filter: v1::ContainerFilter| -> Vec<String> {
        let req = v1::ListContainersRequest { filter: Some(filter) };
        rt.list_containers(req).unwrap().containers.into_iter().map(|c| c.id).collect()
    };
    let running = v1::ContainerStateValue { state: v1::ContainerState::ContainerRunning as i32 };
    assert_eq!(containers(v1::ContainerFilter { state: Some(running), ..Default::default() }), [b.as_str()]);
    let named_a = [("name".to_string(), "a".to_string())].into();
    assert_eq!(containers(v1::ContainerFilter { label_selector: named_a, ..Default::default() }), [a.as_str()]);
    assert_eq!(containers(v1::ContainerFilter { pod_sandbox_id: web.clone(), ..Default::default() }).len(), 2);
    assert!(containers(v1::ContainerFilter { pod_sandbox_id: db.clone(), ..Default::default() }).is_empty());

    let stats = v1::ListContainerStatsRequest {
        filter: Some(v1::ContainerStatsFilter { id: b.clone(), ..Default::default() }),
    };
    let stats = rt.list_container_stats(stats).unwrap().stats;
    assert_eq!(stats.len(), 1);
    let layer = stats[0].writable_layer.as_ref().unwrap();
    assert_eq!(layer.fs_id.as_ref().unwrap().mountpoint, FS_MOUNTPOINT);
    let pod_stats = v1::ListPodSandboxStatsRequest {
        filter: Some(v1::PodSandboxStatsFilter { id: web.clone(), ..Default::default() }),
    };
    let pod_stats = rt.list_pod_sandbox_stats(pod_stats).unwrap().stats;
    assert_eq!(pod_stats.len(), 1);
    assert_eq!(pod_stats[0].linux.as_ref().unwrap().containers.len(), 2);
}

#[test]
fn errors_name_the_field_or_id() {
    let rt = MemoryRuntime::new();
    let missing = rt.container_status(v1::ContainerStatusRequest { container_id: "abc".into(), verbose: false });
    let missing = missing.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(missing.message(), "container \"abc\" not found");
    let no_pod = rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: "abc".into() }).unwrap_err();
    assert_eq!((no_pod.code(), no_pod.message()), (Code::NotFound, "pod sandbox \"abc\" not found"));

    let pod = run_pod(&rt, "web", &[]);
    let no_metadata = v1::ContainerConfig { metadata: None, ..container_config("a", "busybox") };
    let req =
        v1::CreateContainerRequest { pod_sandbox_id: pod.clone(), config: Some(no_metadata), sandbox_config: None };
    let err = rt.create_container(req).unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "config.metadata is required"));
    let no_image = v1::ContainerConfig { image: None, ..container_config("a", "busybox") };
    let req = v1::CreateContainerRequest { pod_sandbox_id: pod.clone(), config: Some(no_image), sandbox_config: None };
    assert!(rt.create_container(req).unwrap_err().message().contains("config.image"));
    let req = v1::CreateContainerRequest {
        pod_sandbox_id: pod.clone(),
        config: Some(container_config("a", "nginx:1.27")),
        sandbox_config: None,
    };
    assert_eq!(rt.create_container(req).unwrap_err().code(), Code::NotFound);

    // Invalid transitions.
    let id = create(&rt, &pod, "a").unwrap();
    let err = rt.exec_sync(v1::ExecSyncRequest { container_id: id.clone(), cmd: vec!["true".into()], timeout: 0 });
    assert_eq!(err.unwrap_err().code(), Code::FailedPrecondition);
    start(&rt, &id).unwrap();
    assert_eq!(start(&rt, &id).unwrap_err().code(), Code::FailedPrecondition);
    let err = rt.remove_container(v1::RemoveContainerRequest { container_id: id.clone() }).unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).unwrap();
    assert_eq!(status(&rt, &id).exit_code, 137, "stopping the pod kills its containers");
    assert_eq!(create(&rt, &pod, "b").unwrap_err().code(), Code::FailedPrecondition);
    let err = rt.reopen_container_log(v1::ReopenContainerLogRequest { container_id: id.clone() }).unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);

    // Removing the pod removes its containers; removing again is fine.
    rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).unwrap();
    assert!(rt.list_containers(Default::default()).unwrap().containers.is_empty());
    rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod }).unwrap();
}

#[tokio::test]
async fn streams_chunk_and_events_follow_containers() {
    let rt = MemoryRuntime::new();
    let mut events = rt.get_container_events(v1::GetEventsRequest {}).unwrap();
    let pods: Vec<String> = (0..5).map(|i| run_pod(&rt, &format!("pod{i}"), &[])).collect();
    let messages: Vec<_> = rt.stream_pod_sandboxes(Default::default()).unwrap().collect().await;
    let sizes: Vec<usize> = messages.iter().map(|m| m.pod_sandboxes.len()).collect();
    assert_eq!(sizes, [2, 2, 1]);
    let images: Vec<_> = rt.stream_images(Default::default()).unwrap().collect().await;
    assert_eq!(images.len(), 1);

    let id = create(&rt, &pods[0], "a").unwrap();
    start(&rt, &id).unwrap();
    rt.stop_container(v1::StopContainerRequest { container_id: id.clone(), timeout: 0 }).unwrap();
    rt.remove_container(v1::RemoveContainerRequest { container_id: id.clone() }).unwrap();
    let mut kinds = Vec::new();
    for _ in 0..4 {
        let event = events.next().await.unwrap();
        assert_eq!(event.container_id, id);
        assert_eq!(event.pod_sandbox_status.unwrap().id, pods[0]);
        kinds.push(event.container_event_type);
    }
    use v1::ContainerEventType::*;
    let expected = [ContainerCreatedEvent, ContainerStartedEvent, ContainerStoppedEvent, ContainerDeletedEvent];
    assert_eq!(kinds, expected.map(|k| k as i32));

    rt.end_streams();
    assert!(events.next().await.is_none(), "ending the streams ends the event stream");
}
