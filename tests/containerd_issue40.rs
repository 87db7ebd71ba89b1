//! Issue 40, items 1 to 3, against real containerd 2.4.2 and 2.1.9 (both CRI v1 only), with
//! cri-bridge discovering v1 (`auto`) and containerd asked directly, in v1, what it recorded:
//! 1. An old client's (v1alpha2) `config.image.image` reaches containerd as
//!    `user_specified_image` too: seen in the CreateContainer config containerd keeps
//!    (`ContainerStatus` verbose, the `config` object of `info["info"]`). containerd does not
//!    return it in `status.image`, which holds `image` alone.
//! 2. A v1alpha2 seccomp string that names no profile (a bare path) is refused by cri-bridge
//!    naming `seccomp_profile_path`, and containerd never sees the create (its `ListContainers`);
//!    containerd itself refuses the same string sent directly. `runtime/default` is created, and
//!    containerd puts a seccomp profile in the container's runtime spec (`runtimeSpec.linux.seccomp`
//!    of the verbose info) and the running container is filtered (`Seccomp:` of /proc/self/status).
//! 3. A v1 client's recursively read-only mount is judged by what containerd's own `Status` reports
//!    for the pod's handler (`runtime_handlers[].features`): through cri-bridge it succeeds or
//!    fails as the same create sent directly does, and where it succeeds containerd builds the
//!    same mount in both containers' runtime specs.
//!
//! Needs root, runc and busybox-static, the 2.1.9 build unpacked by `tools/debian-unpack.sh` and
//! 2.4.2 built by `tools/go-peers.sh`. Each test starts its own containerd per build, in a temporary
//! directory (see `containerd_support`).

mod common;
mod containerd_support;

use containerd_support::{host_network_pod, host_network_pod_v1alpha2, Build, Containerd, BUSYBOX_IMAGE};
use cri_bridge::api::{v1, v1alpha2};
use serde_json::Value;
use tonic::{Code, Status};

type A2Runtime = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// The builds under test: CRI v1 only, so cri-bridge converts a v1alpha2 client's calls to v1.
const BUILDS: [Build; 2] = [Build::V2_4, Build::V2_1];

/// A bare path, which names no profile (critest 1.22's "should not support a custom seccomp
/// profile without using localhost/ as a prefix").
const BARE_SECCOMP_PATH: &str = "/var/lib/kubelet/seccomp/profile.json";

fn describe(status: &Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

/// Panics naming the step, the RPC and the status that came back.
fn expect<T>(context: &str, rpc: &str, result: Result<tonic::Response<T>, Status>) -> T {
    match result {
        Ok(response) => response.into_inner(),
        Err(status) => panic!("{context}: {rpc} failed: {}", describe(&status)),
    }
}

/// containerd `build` and cri-bridge (`auto`) in front of it.
struct Setup {
    ctd: Containerd,
    bridge: common::Bridge,
    _dir: common::TempDir,
    context: String,
}

impl Setup {
    async fn start(build: Build) -> Setup {
        containerd_support::require_prerequisites();
        let ctd = Containerd::start_build(build).await;
        let dir = common::TempDir::new("ctd-i40");
        let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, None)).await;
        // The build is the one named (containerd answers its own Version).
        let mut direct = V1Runtime::new(ctd.direct_channel());
        let version = expect("direct", "Version", direct.version(v1::VersionRequest::default()).await);
        let context = format!("containerd {}", version.runtime_version);
        assert_eq!(version.runtime_version, build.runtime_version(), "{context}");
        Setup { ctd, bridge, _dir: dir, context }
    }

    fn old_client(&self) -> A2Runtime {
        A2Runtime::new(common::channel(&self.bridge.socket))
    }

    fn v1_client(&self) -> V1Runtime {
        V1Runtime::new(common::channel(&self.bridge.socket))
    }

    fn direct(&self) -> V1Runtime {
        V1Runtime::new(self.ctd.direct_channel())
    }

    /// The containers containerd itself has, asked directly.
    async fn direct_containers(&self) -> Vec<String> {
        let list = self.direct().list_containers(v1::ListContainersRequest::default()).await;
        expect(&self.context, "direct ListContainers", list).containers.into_iter().map(|c| c.id).collect()
    }

    /// `ContainerStatus` verbose, asked directly: the status, and `info["info"]` parsed.
    async fn direct_status(&self, id: &str) -> (v1::ContainerStatus, Value) {
        let request = v1::ContainerStatusRequest { container_id: id.into(), verbose: true };
        let response = expect(&self.context, "direct ContainerStatus", self.direct().container_status(request).await);
        let text = response.info.get("info").unwrap_or_else(|| {
            panic!("{}: ContainerStatus verbose has no \"info\": {:?}", self.context, response.info.keys())
        });
        let info: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{}: ContainerStatus info is not JSON ({e}): {text}", self.context));
        (response.status.expect("a status"), info)
    }

    async fn stop(self) {
        self.bridge.stop().await;
    }
}

/// `sleep 3600` from busybox in `pod`, as a v1alpha2 client asks for it, with the seccomp string
/// `seccomp` (none when empty).
#[allow(deprecated)]
fn a2_container(
    pod: &str,
    pod_config: &v1alpha2::PodSandboxConfig,
    name: &str,
    seccomp: &str,
) -> v1alpha2::CreateContainerRequest {
    let security_context = (!seccomp.is_empty()).then(|| v1alpha2::LinuxContainerSecurityContext {
        seccomp_profile_path: seccomp.into(),
        ..Default::default()
    });
    v1alpha2::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1alpha2::ContainerConfig {
            metadata: Some(v1alpha2::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1alpha2::ImageSpec { image: BUSYBOX_IMAGE.into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            log_path: format!("{name}.log"),
            linux: Some(v1alpha2::LinuxContainerConfig { security_context, ..Default::default() }),
            ..Default::default()
        }),
        sandbox_config: Some(pod_config.clone()),
    }
}

/// `sleep 3600` from busybox in `pod`, as a v1 client asks for it, with `mounts` and nothing in
/// `user_specified_image`.
fn v1_container(
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    name: &str,
    mounts: Vec<v1::Mount>,
) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: BUSYBOX_IMAGE.into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            log_path: format!("{name}.log"),
            mounts,
            ..Default::default()
        }),
        sandbox_config: Some(pod_config.clone()),
    }
}

async fn a2_remove_pod(rt: &mut A2Runtime, context: &str, pod: String) {
    let stop = v1alpha2::StopPodSandboxRequest { pod_sandbox_id: pod.clone() };
    expect(context, "StopPodSandbox", rt.stop_pod_sandbox(stop).await);
    let remove = v1alpha2::RemovePodSandboxRequest { pod_sandbox_id: pod };
    expect(context, "RemovePodSandbox", rt.remove_pod_sandbox(remove).await);
}

async fn v1_remove_pod(rt: &mut V1Runtime, context: &str, pod: String) {
    let stop = v1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() };
    expect(context, "StopPodSandbox", rt.stop_pod_sandbox(stop).await);
    let remove = v1::RemovePodSandboxRequest { pod_sandbox_id: pod };
    expect(context, "RemovePodSandbox", rt.remove_pod_sandbox(remove).await);
}

/// Item 1: v1alpha2 has no `user_specified_image`; cri-bridge fills it from `image`, and
/// containerd keeps it in the CreateContainer config it shows in `ContainerStatus` verbose. A v1
/// create sent directly without it is the control: containerd keeps it empty, so the value seen
/// is the one cri-bridge sent, not one containerd made up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_specified_image_reaches_containerd_from_an_old_clients_image() {
    for build in BUILDS {
        let setup = Setup::start(build).await;
        let context = setup.context.clone();
        let mut old = setup.old_client();
        let pod_config = host_network_pod_v1alpha2("image", &setup.ctd.pod_logs.join("image"));
        let request = v1alpha2::RunPodSandboxRequest { config: Some(pod_config.clone()), ..Default::default() };
        let pod = expect(&context, "RunPodSandbox", old.run_pod_sandbox(request).await).pod_sandbox_id;

        let created = old.create_container(a2_container(&pod, &pod_config, "old", "")).await;
        let id = expect(&context, "CreateContainer (v1alpha2, through cri-bridge)", created).container_id;
        let (status, info) = setup.direct_status(&id).await;
        let spec = status.image.clone().unwrap_or_default();
        println!("{context}: ContainerStatus.status.image = {spec:?}");
        println!("{context}: info config.image = {}", info["config"]["image"]);
        assert_eq!(
            info["config"]["image"]["user_specified_image"], BUSYBOX_IMAGE,
            "{context}: the CreateContainer config containerd keeps: {}",
            info["config"]["image"]
        );
        assert_eq!(info["config"]["image"]["image"], BUSYBOX_IMAGE, "{context}: {}", info["config"]["image"]);
        // `status.image` is not the config containerd kept: it holds `image` alone, and
        // `user_specified_image` is empty there whatever the create sent (the control below gets
        // the same), so the kept config is the one place it can be seen.
        assert_eq!(spec.image, BUSYBOX_IMAGE, "{context}: status.image");
        assert_eq!(spec.user_specified_image, "", "{context}: status.image (containerd 2.x does not return it here)");

        // The control: a v1 create sent directly, `user_specified_image` left empty.
        let mut direct = setup.direct();
        let v1_pod = host_network_pod("image", &setup.ctd.pod_logs.join("image"));
        let created = direct.create_container(v1_container(&pod, &v1_pod, "direct", Vec::new())).await;
        let control = expect(&context, "CreateContainer (v1, direct)", created).container_id;
        let (control_status, control_info) = setup.direct_status(&control).await;
        println!("{context}: control: ContainerStatus.status.image = {:?}", control_status.image);
        println!("{context}: control: info config.image = {}", control_info["config"]["image"]);
        let kept = control_info["config"]["image"]["user_specified_image"].as_str().unwrap_or_default();
        assert_eq!(kept, "", "{context}: containerd keeps what it was sent, and was sent nothing");
        assert_eq!(
            control_status.image.unwrap_or_default().user_specified_image,
            spec.user_specified_image,
            "{context}: status.image is the same whether or not the create named user_specified_image"
        );

        a2_remove_pod(&mut old, &context, pod).await;
        setup.stop().await;
    }
}

/// Item 2: a seccomp string naming no profile is refused by cri-bridge before containerd sees
/// it; one naming a profile is created, and containerd applies seccomp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seccomp_string_naming_no_profile_never_reaches_containerd() {
    for build in BUILDS {
        let setup = Setup::start(build).await;
        let context = setup.context.clone();
        let mut old = setup.old_client();
        let pod_config = host_network_pod_v1alpha2("seccomp", &setup.ctd.pod_logs.join("seccomp"));
        let request = v1alpha2::RunPodSandboxRequest { config: Some(pod_config.clone()), ..Default::default() };
        let pod = expect(&context, "RunPodSandbox", old.run_pod_sandbox(request).await).pod_sandbox_id;

        let before = setup.direct_containers().await;
        let refused = old
            .create_container(a2_container(&pod, &pod_config, "bare", BARE_SECCOMP_PATH))
            .await
            .expect_err("a bare seccomp path must be refused");
        println!("{context}: cri-bridge: {}", describe(&refused));
        assert_eq!(refused.code(), Code::Unimplemented, "{context}: {}", describe(&refused));
        assert!(refused.message().contains("seccomp_profile_path"), "{context}: {}", describe(&refused));
        assert_eq!(setup.direct_containers().await, before, "{context}: containerd never saw the create");

        // Natively containerd refuses the same string too (sent directly, in v1).
        let v1_pod = host_network_pod("seccomp", &setup.ctd.pod_logs.join("seccomp"));
        #[allow(deprecated)]
        let bare =
            v1::LinuxContainerSecurityContext { seccomp_profile_path: BARE_SECCOMP_PATH.into(), ..Default::default() };
        let mut direct_request = v1_container(&pod, &v1_pod, "bare", Vec::new());
        direct_request.config.as_mut().unwrap().linux =
            Some(v1::LinuxContainerConfig { security_context: Some(bare), ..Default::default() });
        let native_answer = setup.direct().create_container(direct_request).await;
        let native_refusal = native_answer.expect_err("containerd refuses a bare seccomp path itself");
        println!("{context}: containerd itself: {}", describe(&native_refusal));
        assert_eq!(setup.direct_containers().await, before, "{context}: containerd's own refusal leaves no container");

        // A string naming a profile is created, and containerd applies it.
        let created = old.create_container(a2_container(&pod, &pod_config, "default", "runtime/default")).await;
        let id = expect(&context, "CreateContainer (runtime/default)", created).container_id;
        let (_, info) = setup.direct_status(&id).await;
        // cri-bridge sent the string and, as v1 has it, the profile (RuntimeDefault is the zero
        // value: an empty object in containerd's JSON).
        let received = &info["config"]["linux"]["security_context"];
        println!("{context}: config.linux.security_context as containerd got it: {received}");
        assert_eq!(received["seccomp_profile_path"], "runtime/default", "{context}: {received}");
        assert!(received["seccomp"].is_object(), "{context}: no SecurityProfile in {received}");
        let seccomp = &info["runtimeSpec"]["linux"]["seccomp"];
        assert!(seccomp.is_object(), "{context}: runtimeSpec.linux.seccomp is {seccomp}");
        println!(
            "{context}: runtimeSpec.linux.seccomp: defaultAction {}, {} syscall rules",
            seccomp["defaultAction"],
            seccomp["syscalls"].as_array().map_or(0, Vec::len)
        );
        let start = old.start_container(v1alpha2::StartContainerRequest { container_id: id.clone() }).await;
        expect(&context, "StartContainer", start);
        let exec = v1alpha2::ExecSyncRequest {
            container_id: id,
            cmd: ["grep", "Seccomp:", "/proc/self/status"].map(String::from).to_vec(),
            timeout: 10,
        };
        let response = expect(&context, "ExecSync", old.exec_sync(exec).await);
        assert_eq!(String::from_utf8_lossy(&response.stdout), "Seccomp:\t2\n", "{context}: a seccomp filter");

        a2_remove_pod(&mut old, &context, pod).await;
        setup.stop().await;
    }
}

/// Item 3: per handler, a recursively read-only mount through cri-bridge fares as it does sent
/// directly, and as containerd's `Status` says it should.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursively_read_only_mount_fares_as_containerd_reports_for_the_pods_handler() {
    for build in BUILDS {
        let setup = Setup::start(build).await;
        let context = setup.context.clone();
        let status =
            expect(&context, "direct Status", setup.direct().status(v1::StatusRequest { verbose: false }).await);
        let handlers: Vec<(String, bool)> = status
            .runtime_handlers
            .iter()
            .map(|h| (h.name.clone(), h.features.as_ref().is_some_and(|f| f.recursive_read_only_mounts)))
            .collect();
        println!("{context}: Status.runtime_handlers (name, recursive_read_only_mounts): {handlers:?}");
        assert!(handlers.iter().any(|(name, _)| name.is_empty()), "{context}: no default handler in {handlers:?}");

        let host = common::TempDir::new("ctd-i40-rro");
        let mount = v1::Mount {
            container_path: "/mnt/rro".into(),
            host_path: host.0.to_str().unwrap().into(),
            readonly: true,
            recursive_read_only: true,
            propagation: v1::MountPropagation::PropagationPrivate as i32,
            ..Default::default()
        };
        let mut rt = setup.v1_client();
        let mut direct = setup.direct();
        for (index, (handler, reported)) in handlers.iter().enumerate() {
            let context = format!("{context}, handler {handler:?} (recursive_read_only_mounts {reported})");
            let name = format!("rro-{index}");
            let pod_config = host_network_pod(&name, &setup.ctd.pod_logs.join(&name));
            let request =
                v1::RunPodSandboxRequest { config: Some(pod_config.clone()), runtime_handler: handler.clone() };
            let pod = expect(&context, "RunPodSandbox", rt.run_pod_sandbox(request).await).pod_sandbox_id;

            let before = setup.direct_containers().await;
            let through = rt.create_container(v1_container(&pod, &pod_config, "through", vec![mount.clone()])).await;
            let natively =
                direct.create_container(v1_container(&pod, &pod_config, "direct", vec![mount.clone()])).await;
            let outcome = |answer: &Result<tonic::Response<v1::CreateContainerResponse>, Status>| match answer {
                Ok(_) => "OK".to_string(),
                Err(status) => describe(status),
            };
            println!("{context}: through cri-bridge: {}; directly: {}", outcome(&through), outcome(&natively));
            assert_eq!(
                through.is_ok(),
                natively.is_ok(),
                "{context}: through cri-bridge {}, directly {}",
                outcome(&through),
                outcome(&natively)
            );
            assert_eq!(through.is_ok(), *reported, "{context}: through cri-bridge {}", outcome(&through));
            match (through, natively) {
                (Ok(through), Ok(natively)) => {
                    // Both reached containerd, and it built the same mount for both.
                    let ids = [through.into_inner().container_id, natively.into_inner().container_id];
                    let mut built = Vec::new();
                    for id in &ids {
                        let (_, info) = setup.direct_status(id).await;
                        let mounts = info["runtimeSpec"]["mounts"].as_array().cloned().unwrap_or_default();
                        let rro = mounts.into_iter().find(|m| m["destination"] == "/mnt/rro");
                        let rro = rro.unwrap_or_else(|| panic!("{context}: no /mnt/rro in {id}'s runtime spec"));
                        println!("{context}: {id}: {rro}");
                        built.push(rro);
                    }
                    assert_eq!(built[0], built[1], "{context}: the same mount through cri-bridge as directly");
                    let options = built[0]["options"].as_array().cloned().unwrap_or_default();
                    assert!(options.contains(&Value::from("rro")), "{context}: options {options:?} lack rro");
                }
                (Err(refused), Err(_)) => {
                    assert_eq!(refused.code(), Code::Unimplemented, "{context}: {}", describe(&refused));
                    assert!(refused.message().contains("recursive_read_only"), "{context}: {}", describe(&refused));
                    assert_eq!(setup.direct_containers().await, before, "{context}: containerd has no container");
                }
                _ => unreachable!("asserted above"),
            }
            v1_remove_pod(&mut rt, &context, pod).await;
        }
        setup.stop().await;
    }
}
