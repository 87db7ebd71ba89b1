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

/// A v1 caller's security context, with the deprecated strings and messages given.
#[allow(deprecated)]
fn v1_create(pod: &str, name: &str, context: v1::LinuxContainerSecurityContext) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1::ImageSpec {
                image: "docker.io/library/busybox:latest".into(),
                user_specified_image: "busybox".into(),
                ..Default::default()
            }),
            linux: Some(v1::LinuxContainerConfig { security_context: Some(context), ..Default::default() }),
            ..Default::default()
        }),
        sandbox_config: Some(common::v1_pod("p")),
    }
}

fn profile(kind: v1::security_profile::ProfileType) -> Option<v1::SecurityProfile> {
    Some(v1::SecurityProfile { profile_type: kind as i32, localhost_ref: String::new() })
}

/// The in-memory runtime posing as `name` `release`, behind cri-bridge, and a v1 client's pod.
async fn posing(name: &str, release: &str) -> (common::Runtime, common::Bridge, V1Runtime, String, common::TempDir) {
    let dir = common::TempDir::new("security-strings-v1");
    let runtime = common::Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    match (name, release) {
        ("cri-o", "1.36.3") => runtime.memory.pose_as_crio_1_36(),
        _ => runtime.memory.set_identity(name, release),
    }
    let bridge = common::Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    let mut client = V1Runtime::new(channel(&bridge.socket));
    let run = v1::RunPodSandboxRequest { config: Some(common::v1_pod("p")), runtime_handler: String::new() };
    let pod = client.run_pod_sandbox(run).await.unwrap().into_inner().pod_sandbox_id;
    (runtime, bridge, client, pod, dir)
}

/// A v1 caller passed through to the runtime (issue 40, "the same check on passthrough"): a
/// deprecated string set alone reaches a runtime that reads only the message as nothing, so it
/// is refused where the runtime is known to read only the message (CRI-O 1.28+ for seccomp:
/// cri-o#7006), and passed where the runtime reads the string (containerd 1.5 to 2.4, all three
/// strings; CRI-O 1.30+ AppArmor, cri-o#7901). Beside its message, the string is passed.
#[tokio::test]
#[allow(deprecated)]
async fn a_v1_callers_string_alone_is_refused_where_the_runtime_reads_only_the_message() {
    use v1::security_profile::ProfileType::RuntimeDefault;
    let seccomp_string =
        || v1::LinuxContainerSecurityContext { seccomp_profile_path: "runtime/default".into(), ..Default::default() };
    let apparmor_string =
        || v1::LinuxContainerSecurityContext { apparmor_profile: "runtime/default".into(), ..Default::default() };

    let (runtime, bridge, mut crio, pod, _dir) = posing("cri-o", "1.36.3").await;
    let before = runtime.memory.calls_of("CreateContainer");
    let refused = crio.create_container(v1_create(&pod, "a", seccomp_string())).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    assert!(refused.message().contains("config.linux.security_context.seccomp_profile_path"), "{refused:?}");
    assert!(refused.message().contains("cri-o#7006"), "{refused:?}");
    assert_eq!(runtime.memory.calls_of("CreateContainer"), before, "the runtime never saw it");
    let both = v1::LinuxContainerSecurityContext { seccomp: profile(RuntimeDefault), ..seccomp_string() };
    crio.create_container(v1_create(&pod, "b", both)).await.expect("the string beside its message");
    crio.create_container(v1_create(&pod, "c", apparmor_string())).await.expect("CRI-O 1.36 reads the AppArmor string");
    // `unconfined` alone asks what a runtime reading only the message does without one: no loss.
    let unconfined =
        v1::LinuxContainerSecurityContext { seccomp_profile_path: "unconfined".into(), ..Default::default() };
    crio.create_container(v1_create(&pod, "d", unconfined)).await.expect("nothing is lost");
    let mut sandbox = common::v1_pod("q");
    let context =
        sandbox.linux.get_or_insert_with(Default::default).security_context.get_or_insert_with(Default::default);
    context.seccomp_profile_path = "runtime/default".into();
    let run = v1::RunPodSandboxRequest { config: Some(sandbox), runtime_handler: String::new() };
    let refused = crio.run_pod_sandbox(run).await.unwrap_err();
    assert!(refused.message().contains("security_context.seccomp_profile_path"), "{refused:?}");
    bridge.stop().await;
    runtime.stop().await;

    // containerd reads every string when its message is absent.
    let (runtime, bridge, mut containerd, pod, _dir) = posing("containerd", "v2.4.2").await;
    containerd.create_container(v1_create(&pod, "a", seccomp_string())).await.expect("containerd reads the string");
    bridge.stop().await;
    runtime.stop().await;

    // CRI-O before 1.30 reads only the AppArmor string: a message alone is refused, and one
    // beside the same string passed.
    let (runtime, bridge, mut crio, pod, _dir) = posing("cri-o", "1.29.4").await;
    let message = || v1::LinuxContainerSecurityContext { apparmor: profile(RuntimeDefault), ..Default::default() };
    let refused = crio.create_container(v1_create(&pod, "a", message())).await.unwrap_err();
    assert!(refused.message().contains("security_context.apparmor "), "{refused:?}");
    assert!(refused.message().contains("cri-o#7901"), "{refused:?}");
    let both = v1::LinuxContainerSecurityContext { apparmor_profile: "runtime/default".into(), ..message() };
    crio.create_container(v1_create(&pod, "b", both)).await.expect("the message beside the same string");
    bridge.stop().await;
    runtime.stop().await;
}
