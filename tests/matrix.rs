//! All 9 pairs of frontend × backend version, over real unix sockets with the in-memory runtime:
//! a pod and container lifecycle through the generated client of the frontend version, then every
//! RPC of the frontend version once: those the backend's version has reach the runtime, the rest
//! are answered UNIMPLEMENTED naming the backend version.

mod common;

use bytes::Bytes;
use common::Pair;
use cri_bridge::grpc::{CriClient, Rpc};
use cri_bridge::CriVersion::{self, V1alpha1, V1alpha2, V1};
use std::time::Duration;
use tonic::{Code, Request};

/// Runs a lifecycle with the typed client of CRI version `$v` over `$channel`.
macro_rules! lifecycle {
    ($v:ident, $channel:expr) => {{
        use cri_bridge::api::$v as api;
        let mut rt = api::runtime_service_client::RuntimeServiceClient::new($channel.clone());
        let mut img = api::image_service_client::ImageServiceClient::new($channel.clone());

        let version = rt.version(api::VersionRequest { version: "0.1.0".into() }).await.unwrap().into_inner();
        assert_eq!(version.runtime_api_version, stringify!($v), "Version names the caller's version");
        assert_eq!(version.runtime_name, "cri-bridge-memory");

        let images = img.list_images(api::ListImagesRequest::default()).await.unwrap().into_inner().images;
        assert!(images.iter().any(|i| i.repo_tags.iter().any(|t| t.contains("busybox"))), "{images:?}");
        let pulled = img
            .pull_image(api::PullImageRequest {
                image: Some(api::ImageSpec { image: "docker.io/library/nginx:1.27".into(), ..Default::default() }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!pulled.image_ref.is_empty());

        let pod_config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: "web".into(),
                uid: "uid-1".into(),
                namespace: "default".into(),
                attempt: 1,
            }),
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        };
        let pod = rt
            .run_pod_sandbox(api::RunPodSandboxRequest { config: Some(pod_config.clone()), ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .pod_sandbox_id;
        let status = rt
            .pod_sandbox_status(api::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: false })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap();
        assert_eq!(status.state, api::PodSandboxState::SandboxReady as i32);
        assert_eq!(status.metadata.unwrap().name, "web");
        let listed = rt
            .list_pod_sandbox(api::ListPodSandboxRequest {
                filter: Some(api::PodSandboxFilter {
                    label_selector: [("app".to_string(), "web".to_string())].into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .items;
        assert_eq!(listed.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), [pod.as_str()]);

        let container_config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            envs: vec![api::KeyValue { key: "GREETING".into(), value: "hello".into() }],
            ..Default::default()
        };
        let container = rt
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(container_config),
                sandbox_config: Some(pod_config),
            })
            .await
            .unwrap()
            .into_inner()
            .container_id;
        rt.start_container(api::StartContainerRequest { container_id: container.clone() }).await.unwrap();
        let status = rt
            .container_status(api::ContainerStatusRequest { container_id: container.clone(), verbose: false })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap();
        assert_eq!(status.state, api::ContainerState::ContainerRunning as i32);
        let exec = rt
            .exec_sync(api::ExecSyncRequest {
                container_id: container.clone(),
                cmd: vec!["echo".into(), "hi".into()],
                timeout: 5,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((exec.stdout.as_slice(), exec.exit_code), (&b"hi\n"[..], 0));
        let in_pod = rt
            .list_containers(api::ListContainersRequest {
                filter: Some(api::ContainerFilter { pod_sandbox_id: pod.clone(), ..Default::default() }),
            })
            .await
            .unwrap()
            .into_inner()
            .containers;
        assert_eq!(in_pod.len(), 1);
        // Starting twice is an invalid transition: the runtime's status comes back unchanged.
        let again =
            rt.start_container(api::StartContainerRequest { container_id: container.clone() }).await.unwrap_err();
        assert_eq!(again.code(), Code::FailedPrecondition, "{again:?}");

        rt.stop_container(api::StopContainerRequest { container_id: container.clone(), timeout: 0 }).await.unwrap();
        rt.remove_container(api::RemoveContainerRequest { container_id: container.clone() }).await.unwrap();
        let gone = rt
            .container_status(api::ContainerStatusRequest { container_id: container, verbose: false })
            .await
            .unwrap_err();
        assert_eq!(gone.code(), Code::NotFound);
        rt.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.unwrap();
        rt.remove_pod_sandbox(api::RemovePodSandboxRequest { pod_sandbox_id: pod }).await.unwrap();
        let left = rt.list_pod_sandbox(api::ListPodSandboxRequest::default()).await.unwrap().into_inner().items;
        assert!(left.is_empty());
    }};
}

/// Calls every RPC of `frontend` once with an empty request; returns a line per RPC for the report.
async fn every_rpc(pair: &Pair, frontend: CriVersion, backend: CriVersion) {
    let client = CriClient::new(pair.channel(), 16 << 20);
    for info in frontend.schema().rpcs {
        let rpc = Rpc { version: frontend, info };
        let before = pair.runtime.memory.calls_of(info.method);
        let result = if info.server_streaming {
            match client.server_streaming(rpc, Request::new(Bytes::new())).await {
                Ok(response) => {
                    let mut stream = response.into_inner();
                    // GetContainerEvents never ends by itself: a short wait shows it is open.
                    let _ = tokio::time::timeout(Duration::from_millis(200), stream.message()).await;
                    Ok(())
                }
                Err(status) => Err(status),
            }
        } else {
            client.unary(rpc, Request::new(Bytes::new())).await.map(|_| ())
        };
        match rpc.in_version(backend) {
            Some(_) => {
                if let Err(status) = &result {
                    assert_ne!(status.code(), Code::Unimplemented, "{frontend}→{backend} {}: {status:?}", rpc.name());
                }
                assert_eq!(
                    pair.runtime.memory.calls_of(info.method),
                    before + 1,
                    "{frontend}→{backend} {} reached the runtime once: {result:?}",
                    rpc.name()
                );
            }
            // cri-bridge answers RuntimeConfig from the cgroup driver the runtime's Status info
            // names (the in-memory runtime's: systemd), never sending it on.
            None if info.method == "RuntimeConfig" => {
                assert!(result.is_ok(), "{frontend}→{backend} RuntimeConfig is answered for the runtime: {result:?}");
                assert_eq!(pair.runtime.memory.calls_of(info.method), before, "never sent to the runtime");
            }
            None => {
                let status = result.expect_err("an RPC the backend lacks must fail");
                assert_eq!(status.code(), Code::Unimplemented, "{frontend}→{backend} {}", rpc.name());
                assert!(
                    status.message().contains(backend.as_str()) && status.message().contains(info.method),
                    "{status:?}"
                );
                assert_eq!(pair.runtime.memory.calls_of(info.method), before, "never sent to the runtime");
            }
        }
    }
}

macro_rules! pair_test {
    ($name:ident, $front:ident, $fv:expr, $bv:expr) => {
        #[tokio::test]
        // One struct literal serves three versions whose messages have different field sets.
        #[allow(clippy::needless_update)]
        async fn $name() {
            let pair = Pair::start(stringify!($name), &[$bv], None).await;
            lifecycle!($front, pair.channel());
            every_rpc(&pair, $fv, $bv).await;
            pair.bridge.stop().await;
            pair.runtime.stop().await;
        }
    };
}

pair_test!(v1_to_v1, v1, V1, V1);
pair_test!(v1_to_v1alpha2, v1, V1, V1alpha2);
pair_test!(v1_to_v1alpha1, v1, V1, V1alpha1);
pair_test!(v1alpha2_to_v1, v1alpha2, V1alpha2, V1);
pair_test!(v1alpha2_to_v1alpha2, v1alpha2, V1alpha2, V1alpha2);
pair_test!(v1alpha2_to_v1alpha1, v1alpha2, V1alpha2, V1alpha1);
pair_test!(v1alpha1_to_v1, v1alpha1, V1alpha1, V1);
pair_test!(v1alpha1_to_v1alpha2, v1alpha1, V1alpha1, V1alpha2);
pair_test!(v1alpha1_to_v1alpha1, v1alpha1, V1alpha1, V1alpha1);
