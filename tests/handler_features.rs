//! Features a runtime reports per handler are judged by the handler the pod runs on (issue 40).
//! CRI-O 1.36 reports recursive read-only mounts for its `runc` handler and the default, not for
//! `crun` (crun 1.8.1 has no `features` command; `Status.runtime_handlers`, from CRI-O's
//! `server/runtime_status.go`). Judged for all handlers at once, cri-bridge refused
//! `mounts[].recursive_read_only` for a pod on `runc`, which CRI-O runs natively. The in-memory
//! runtime poses as CRI-O 1.36.3 with those handlers.

mod common;

use common::{Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::CriVersion::V1;
use tonic::Code;

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

fn pod(handler: &str) -> v1::RunPodSandboxRequest {
    v1::RunPodSandboxRequest {
        config: Some(v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: format!("pod-{handler}"),
                uid: format!("uid-{handler}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        runtime_handler: handler.into(),
    }
}

fn read_only_mount(sandbox: &str) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: sandbox.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "c".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            mounts: vec![v1::Mount {
                container_path: "/data".into(),
                host_path: "/tmp".into(),
                readonly: true,
                recursive_read_only: true,
                ..Default::default()
            }],
            ..Default::default()
        }),
        sandbox_config: pod("").config,
    }
}

#[tokio::test]
async fn a_handler_feature_is_judged_by_the_pods_handler() {
    let dir = TempDir::new("handler-features");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    runtime.memory.set_identity("cri-o", "1.36.3");
    runtime.memory.set_handlers(&[("", true, true), ("runc", true, true), ("crun", false, false)]);
    let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    let mut client = V1Runtime::new(common::channel(&bridge.socket));

    for (handler, runs) in [("runc", true), ("", true), ("crun", false)] {
        let sandbox = client.run_pod_sandbox(pod(handler)).await.unwrap().into_inner().pod_sandbox_id;
        let created = client.create_container(read_only_mount(&sandbox)).await;
        if runs {
            assert!(created.is_ok(), "a pod on {handler:?}, which reports the feature: {created:?}");
        } else {
            let refused = created.unwrap_err();
            assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
            assert!(refused.message().contains("recursive_read_only"), "{refused:?}");
        }
    }
    bridge.stop().await;
    runtime.stop().await;
}
