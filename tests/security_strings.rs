//! The deprecated seccomp and AppArmor strings of an older client, on their way to a v1 runtime
//! (issue 40). A string that names a profile (`runtime/default`, `unconfined`,
//! `localhost/<path>`) reaches the runtime as a `SecurityProfile` too, which is all CRI-O 1.36
//! reads. A string that names none (critest 1.22's bare path, "should not support a custom
//! seccomp profile without using localhost/ as a prefix") is refused naming the field: every
//! runtime that reads the string refuses it natively, and one that reads only the message would
//! run the container unconfined.

mod common;

use common::{channel, Pair};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion::V1;
use tonic::Code;

type V1alpha2Runtime = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

fn sandbox() -> v1alpha2::PodSandboxConfig {
    common::v1alpha2_pod("p")
}

#[allow(deprecated)]
fn create(pod: &str, seccomp: &str) -> v1alpha2::CreateContainerRequest {
    v1alpha2::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1alpha2::ContainerConfig {
            metadata: Some(v1alpha2::ContainerMetadata { name: format!("c{}", seccomp.len()), attempt: 0 }),
            image: Some(v1alpha2::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            linux: Some(v1alpha2::LinuxContainerConfig {
                security_context: Some(v1alpha2::LinuxContainerSecurityContext {
                    seccomp_profile_path: seccomp.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: Some(sandbox()),
    }
}

#[tokio::test]
async fn a_string_that_names_no_profile_is_refused_and_one_that_does_reaches_the_runtime_as_a_profile() {
    let pair = Pair::start("security-strings", &[V1], None).await;
    let mut old = V1alpha2Runtime::new(pair.channel());
    let pod = old
        .run_pod_sandbox(v1alpha2::RunPodSandboxRequest { config: Some(sandbox()), runtime_handler: String::new() })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let before = pair.runtime.memory.calls_of("CreateContainer");
    let refused = old.create_container(create(&pod, "/var/lib/kubelet/seccomp/profile.json")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    assert!(refused.message().contains("seccomp_profile_path"), "{refused:?}");
    assert_eq!(pair.runtime.memory.calls_of("CreateContainer"), before, "the runtime never saw it");

    let created = old.create_container(create(&pod, "localhost/profile.json")).await.unwrap().into_inner();
    // What the runtime was sent, asked in its own version.
    let mut direct = V1Runtime::new(channel(&pair.dir.path("runtime.sock")));
    let status = direct
        .container_status(v1::ContainerStatusRequest { container_id: created.container_id, verbose: true })
        .await
        .unwrap()
        .into_inner();
    let info = status.info.get("info").cloned().unwrap_or_default();
    assert!(info.contains("profile.json"), "the runtime was sent the profile: {info}");
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}
