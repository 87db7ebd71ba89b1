//! `RuntimeService/RuntimeConfig` through cri-bridge, over real containerd builds each started with
//! runc's `SystemdCgroup = false` and `true`: a v1 caller must be told the cgroup driver the
//! runtime really uses, the same answer containerd 2.1.9 gives natively for the same setting
//! (`CGROUPFS` for false, `SYSTEMD` for true), or `UNIMPLEMENTED` where cri-bridge cannot know it;
//! never another driver, never another code. containerd 2.1.9 and 2.4.2 answer the call
//! themselves (cri-bridge forwards it); 1.6.20 and 1.7.24 answer `UNIMPLEMENTED` on v1 and 1.4.13 serves no v1 at all, so
//! there cri-bridge must work the driver out itself, from the runtime's `Status` info.
//!
//! containerd 1.4.13 prints every runc options table as `{}` in that info, whatever it holds, so
//! with `io.containerd.runc.v2` as the default runtime its driver cannot be read: cri-bridge answers
//! `UNIMPLEMENTED` unless the operator states it (`emulate.runtime_config.cgroup_driver`), and then
//! answers what was stated. 1.4.13's legacy v1 shim (`io.containerd.runtime.v1.linux`) takes its
//! driver from the CRI plugin's top-level `systemd_cgroup`, which the info does show
//! (`"systemdCgroup"`): there cri-bridge reads the driver as for 1.6 and 1.7.
//!
//! The answer is then held against what the runtime does with a pod whose `cgroup_parent` is the
//! one a kubelet of that driver sends (`/kubepods/besteffort/pod<uid>` for cgroupfs,
//! `kubepods-besteffort-pod<uid_with_underscores>.slice` for systemd): the container's runtime spec
//! (`linux.cgroupsPath`, from `ContainerStatus` verbose) and its process's `/proc/<pid>/cgroup`
//! must have that driver's form. A systemd-driven runc needs systemd as PID 1
//! (`/run/systemd/system`); on a machine without it the pod's sandbox cannot start, and runc's
//! refusal ("systemd not running on this host, cannot use systemd cgroups manager") is itself
//! what shows the runtime drives cgroups through systemd.
//!
//! Needs root, containerd, runc and busybox-static, and the 1.4.13, 1.7.24 and 2.1.9 builds
//! unpacked by `tools/debian-unpack.sh` (`bash .ci/run` does all of it). One containerd per build,
//! shim and setting, shared by every assertion about it.

mod common;
mod containerd_support;

use containerd_support::{Build, Containerd, Options, BUSYBOX_IMAGE};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::runtime_config::CgroupDriver;
use cri_bridge::CriVersion::V1;
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use tonic::Code;

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// What containerd 2.1.9 itself answers to `RuntimeConfig` with runc's `SystemdCgroup` set to
/// `systemd_cgroup` (asserted natively in the 2.1 rows).
fn native_driver(systemd_cgroup: bool) -> v1::CgroupDriver {
    if systemd_cgroup {
        v1::CgroupDriver::Systemd
    } else {
        v1::CgroupDriver::Cgroupfs
    }
}

/// Whether systemd runs as PID 1 here, as runc decides it (`/run/systemd/system` exists).
fn systemd_is_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// 1.4.13 with runc.v2: the driver is unreadable, so `UNIMPLEMENTED` unless the key states it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_config_containerd_1_4() {
    both_settings(Build::V1_4, false).await;
}

/// 1.4.13 with the legacy v1 shim: the driver is read from the plugin-wide `systemdCgroup`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_config_containerd_1_4_legacy_v1_shim() {
    both_settings(Build::V1_4, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_config_containerd_1_6() {
    both_settings(Build::System, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_config_containerd_1_7() {
    both_settings(Build::V1_7, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_config_containerd_2_1() {
    both_settings(Build::V2_1, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_config_containerd_2_4() {
    both_settings(Build::V2_4, false).await;
}

/// Both settings of `build` (with the legacy v1 shim as its default runtime or runc.v2), one after
/// the other; every failure of both is reported together.
async fn both_settings(build: Build, legacy_v1_shim: bool) {
    let mut failures = Vec::new();
    for systemd_cgroup in [false, true] {
        failures.extend(one_setting(build, Options { systemd_cgroup, legacy_v1_shim }).await);
    }
    assert!(failures.is_empty(), "containerd {}:\n{}", build.runtime_version(), failures.join("\n"));
}

/// Whether cri-bridge can know the driver of `build` configured with `options` from its `Status`
/// info: not on 1.4 with a runc.v2 default runtime, whose options table it prints as `{}`.
fn readable(build: Build, options: Options) -> bool {
    build != Build::V1_4 || options.legacy_v1_shim
}

/// One containerd of `build` configured with `options` and cri-bridge (`auto`) in front of it.
/// Returns what failed.
async fn one_setting(build: Build, options: Options) -> Vec<String> {
    let systemd_cgroup = options.systemd_cgroup;
    let ctd = Containerd::start_with(build, options).await;
    let row = if options.legacy_v1_shim {
        format!("containerd {} with the legacy v1 shim, systemd_cgroup = {systemd_cgroup}", build.runtime_version())
    } else {
        format!("containerd {} with SystemdCgroup = {systemd_cgroup}", build.runtime_version())
    };
    let expected = native_driver(systemd_cgroup);
    let mut failures = Vec::new();

    // What the runtime answers by itself: its version (the build is the one named; sid moves on),
    // and RuntimeConfig.
    let version = if build.served().contains(&V1) {
        let mut direct = V1Runtime::new(ctd.direct_channel());
        direct.version(v1::VersionRequest::default()).await.map(|r| r.into_inner().runtime_version)
    } else {
        let mut direct = v1alpha2::runtime_service_client::RuntimeServiceClient::new(ctd.direct_channel());
        direct.version(v1alpha2::VersionRequest::default()).await.map(|r| r.into_inner().runtime_version)
    };
    if version.as_deref().ok() != Some(build.runtime_version()) {
        failures.push(format!("{row}: Version says {version:?}"));
    }
    if build.served().contains(&V1) {
        let mut direct = V1Runtime::new(ctd.direct_channel());
        let native = direct.runtime_config(v1::RuntimeConfigRequest {}).await;
        match (build, native) {
            (Build::V2_1 | Build::V2_4, Ok(answer)) => {
                let driver = answer.into_inner().linux.map(|l| l.cgroup_driver());
                if driver != Some(expected) {
                    failures.push(format!("{row}: natively answers {driver:?}, not {expected:?}"));
                }
            }
            (Build::V2_1 | Build::V2_4, Err(status)) => failures.push(format!("{row}: natively fails: {status:?}")),
            (_, Err(status)) if status.code() == Code::Unimplemented => {}
            (_, other) => failures.push(format!("{row}: expected UNIMPLEMENTED natively, got {other:?}")),
        }
    }
    if options.legacy_v1_shim {
        if let Err(why) = legacy_shim_shown(&ctd, systemd_cgroup).await {
            failures.push(format!("{row}: {why}"));
        }
    }

    let dir = common::TempDir::new("rtcfg");
    let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, None)).await;
    let mut rt = V1Runtime::new(common::channel(&bridge.socket));

    // The v1 caller's RuntimeConfig through cri-bridge, with no cgroup driver configured: the
    // runtime's driver where its Status info shows it, else UNIMPLEMENTED.
    let unkeyed = rt.runtime_config(v1::RuntimeConfigRequest {}).await;
    match (readable(build, options), unkeyed) {
        (true, Ok(answer)) => {
            let driver = answer.into_inner().linux.map(|l| l.cgroup_driver());
            if driver != Some(expected) {
                failures.push(format!(
                    "{row}: RuntimeConfig through cri-bridge says {driver:?}; containerd 2.1.9 says {expected:?}"
                ));
            }
        }
        (true, Err(status)) => failures.push(format!(
            "{row}: RuntimeConfig through cri-bridge fails ({:?}: {}); containerd 2.1.9 says {expected:?}",
            status.code(),
            status.message()
        )),
        (false, Err(status)) if status.code() == Code::Unimplemented => {
            println!("{row}: RuntimeConfig through cri-bridge: UNIMPLEMENTED ({})", status.message());
        }
        (false, other) => failures.push(format!(
            "{row}: the driver is not readable here, so RuntimeConfig through cri-bridge must be UNIMPLEMENTED, \
             not {:?}",
            other.map(|r| r.into_inner()).map_err(|s| format!("{:?}: {}", s.code(), s.message()))
        )),
    }

    // Where it is not readable, the operator states it: with the key set to the driver the
    // runtime really uses (the same setting), cri-bridge answers that, as 2.1.9 does natively.
    if !readable(build, options) {
        let mut config = common::config(&dir, &ctd.socket, None);
        config.listen_path = dir.path("bridge-keyed.sock");
        config.cgroup_driver = Some(if systemd_cgroup { CgroupDriver::Systemd } else { CgroupDriver::Cgroupfs });
        let keyed = common::Bridge::start(config).await;
        let mut keyed_rt = V1Runtime::new(common::channel(&keyed.socket));
        match keyed_rt.runtime_config(v1::RuntimeConfigRequest {}).await {
            Ok(answer) => {
                let driver = answer.into_inner().linux.map(|l| l.cgroup_driver());
                if driver != Some(expected) {
                    failures.push(format!(
                        "{row}: with the key set, RuntimeConfig through cri-bridge says {driver:?}; containerd \
                         2.1.9 says {expected:?}"
                    ));
                }
            }
            Err(status) => failures.push(format!(
                "{row}: with the key set, RuntimeConfig through cri-bridge fails ({:?}: {}); containerd 2.1.9 says \
                 {expected:?}",
                status.code(),
                status.message()
            )),
        }
        keyed.stop().await;
    }

    // What the runtime does with a kubelet's pod.
    let shim = if options.legacy_v1_shim { "containerd-shim" } else { "containerd-shim-runc-v2" };
    if let Err(why) = cgroup_of_a_container(&ctd, &mut rt, systemd_cgroup, shim).await {
        failures.push(format!("{row}: {why}"));
    }
    bridge.stop().await;
    for failure in &failures {
        eprintln!("FAILED: {failure}");
    }
    if failures.is_empty() {
        println!("{row}: pass");
    }
    failures
}

/// The legacy v1 shim as the runtime's `Status` info shows it (asked directly, in v1alpha2 on
/// 1.4): the default handler `runc` of type `io.containerd.runtime.v1.linux`, with no options, and
/// the plugin-wide `systemdCgroup` as configured.
async fn legacy_shim_shown(ctd: &Containerd, systemd_cgroup: bool) -> Result<(), String> {
    let request = v1alpha2::StatusRequest { verbose: true };
    let mut direct = v1alpha2::runtime_service_client::RuntimeServiceClient::new(ctd.direct_channel());
    let info = direct.status(request).await.map_err(|s| format!("Status: {s:?}"))?.into_inner().info;
    let config: Value = info
        .get("config")
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or_else(|| format!("Status verbose has no JSON \"config\": {:?}", info.keys()))?;
    let containerd = &config["containerd"];
    let shown = serde_json::json!({
        "defaultRuntimeName": containerd["defaultRuntimeName"],
        "runc": containerd["runtimes"]["runc"],
        "systemdCgroup": config["systemdCgroup"],
    });
    println!("Status info config (the parts naming the driver): {shown}");
    let runc = &containerd["runtimes"]["runc"];
    if containerd["defaultRuntimeName"] != "runc"
        || runc["runtimeType"] != "io.containerd.runtime.v1.linux"
        || !runc["options"].is_null()
        || config["systemdCgroup"] != systemd_cgroup
    {
        return Err(format!("its Status info shows {shown}, not the legacy v1 shim as configured"));
    }
    Ok(())
}

/// The cgroup parent a kubelet of that driver gives a BestEffort pod with `uid`.
fn cgroup_parent(systemd: bool, uid: &str) -> String {
    if systemd {
        format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_"))
    } else {
        format!("/kubepods/besteffort/pod{uid}")
    }
}

/// Runs a pod and a container through `rt` and checks the cgroup the runtime gave them: the
/// driver's form in the spec and in the running process's `/proc/<pid>/cgroup`, and that the
/// process runs under `shim` (the binary's name). Where the systemd driver cannot run (no
/// systemd), checks instead that the sandbox fails for that reason.
async fn cgroup_of_a_container(ctd: &Containerd, rt: &mut V1Runtime, systemd: bool, shim: &str) -> Result<(), String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let uid = format!("{:08x}-0000-4000-8000-{:012x}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
    let parent = cgroup_parent(systemd, &uid);
    let pod_config = pod_config(ctd, &uid, &parent);
    let request = v1::RunPodSandboxRequest { config: Some(pod_config.clone()), runtime_handler: String::new() };
    let pod = match rt.run_pod_sandbox(request).await {
        Ok(response) => response.into_inner().pod_sandbox_id,
        Err(status) if systemd && !systemd_is_running() => {
            const REFUSAL: &str = "systemd not running on this host, cannot use systemd cgroups manager";
            return if status.message().contains(REFUSAL) {
                println!("no systemd here: the sandbox fails as it must ({})", status.message());
                Ok(())
            } else {
                Err(format!("without systemd, RunPodSandbox should fail with {REFUSAL:?}, not {status:?}"))
            };
        }
        Err(status) => return Err(format!("RunPodSandbox (cgroup_parent {parent}): {status:?}")),
    };
    if systemd && !systemd_is_running() {
        let _ = remove_pod(rt, &pod).await;
        return Err("the systemd driver ran a sandbox on a machine without systemd".into());
    }
    let checked = container_cgroup(rt, &pod, &pod_config, &parent, systemd, shim).await;
    let removed = remove_pod(rt, &pod).await;
    remove_cgroupfs_parent(&parent, systemd);
    checked.and(removed)
}

async fn container_cgroup(
    rt: &mut V1Runtime,
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    parent: &str,
    systemd: bool,
    shim: &str,
) -> Result<(), String> {
    let request = v1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "cgroup".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: BUSYBOX_IMAGE.into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            log_path: "cgroup.log".into(),
            ..Default::default()
        }),
        sandbox_config: Some(pod_config.clone()),
    };
    let id =
        rt.create_container(request).await.map_err(|s| format!("CreateContainer: {s:?}"))?.into_inner().container_id;
    rt.start_container(v1::StartContainerRequest { container_id: id.clone() })
        .await
        .map_err(|s| format!("StartContainer: {s:?}"))?;
    let request = v1::ContainerStatusRequest { container_id: id.clone(), verbose: true };
    let status = rt.container_status(request).await.map_err(|s| format!("ContainerStatus: {s:?}"))?.into_inner();
    let info: Value = status
        .info
        .get("info")
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or_else(|| format!("ContainerStatus verbose has no JSON \"info\": {:?}", status.info.keys()))?;

    // The spec: `<parent>/<id>` for cgroupfs; `slice:prefix:name` for systemd.
    let spec_path = info["runtimeSpec"]["linux"]["cgroupsPath"].as_str().unwrap_or_default().to_string();
    let expected_spec = if systemd { format!("{parent}:cri-containerd:{id}") } else { format!("{parent}/{id}") };
    if spec_path != expected_spec {
        return Err(format!("the container's cgroupsPath is {spec_path:?}, not {expected_spec:?}"));
    }

    // The running process: in every hierarchy, under the parent (cgroupfs) or in the
    // `cri-containerd-<id>.scope` of the pod's slice (systemd).
    let pid = info["pid"].as_u64().ok_or_else(|| format!("no pid in ContainerStatus info: {}", info["pid"]))?;
    let cgroups =
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map_err(|e| format!("/proc/{pid}/cgroup: {e}"))?;
    let paths: Vec<&str> = cgroups.lines().filter_map(|line| line.splitn(3, ':').nth(2)).collect();
    let fits = |path: &&str| {
        if systemd {
            path.ends_with(&format!("/{parent}/cri-containerd-{id}.scope"))
        } else {
            *path == format!("{parent}/{id}")
        }
    };
    if paths.is_empty() || !paths.iter().all(fits) {
        return Err(format!(
            "the container's process (pid {pid}) is in cgroups {paths:?}, not the form of {expected_spec}"
        ));
    }
    // Its parent: the shim that started it (a shim is the subreaper of its containers).
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(1)).unwrap_or_default();
    let exe = std::fs::read_link(format!("/proc/{ppid}/exe")).unwrap_or_default();
    if exe.file_name().and_then(|n| n.to_str()) != Some(shim) {
        return Err(format!("the container's process (pid {pid}) runs under {exe:?} (pid {ppid}), not {shim}"));
    }
    println!("container {id} under {}: cgroupsPath {spec_path}; /proc/{pid}/cgroup {}", exe.display(), paths[0]);
    Ok(())
}

/// A BestEffort pod on the host network, with `uid` and `cgroup_parent` as a kubelet sets them.
fn pod_config(ctd: &Containerd, uid: &str, cgroup_parent: &str) -> v1::PodSandboxConfig {
    let log_directory = ctd.pod_logs.join(uid);
    std::fs::create_dir_all(&log_directory).unwrap();
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: "cgroup".into(),
            uid: uid.into(),
            namespace: "cri-bridge-test".into(),
            attempt: 0,
        }),
        log_directory: log_directory.to_str().unwrap().into(),
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.into(),
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1::NamespaceOption {
                    network: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Stops and removes the pod (and with it its containers).
async fn remove_pod(rt: &mut V1Runtime, pod: &str) -> Result<(), String> {
    rt.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: pod.into() })
        .await
        .map_err(|s| format!("StopPodSandbox: {s:?}"))?;
    rt.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: pod.into() })
        .await
        .map_err(|s| format!("RemovePodSandbox: {s:?}"))?;
    Ok(())
}

/// runc removes the containers' own cgroups, not the pod's parent a kubelet would have made:
/// remove `/kubepods/besteffort/pod<uid>` in every hierarchy, and the two above it when empty.
fn remove_cgroupfs_parent(parent: &str, systemd: bool) {
    if systemd {
        return;
    }
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    let roots: Vec<_> = hierarchies.flatten().map(|e| e.path()).collect();
    // The unified hierarchy (v2) is /sys/fs/cgroup itself; a hybrid one has it below.
    let all = roots.iter().map(|p| p.as_path()).chain([Path::new("/sys/fs/cgroup")]);
    for root in all {
        let mut dir = root.join(parent.trim_start_matches('/'));
        for _ in 0..3 {
            if std::fs::remove_dir(&dir).is_err() {
                break;
            }
            dir.pop();
        }
    }
}

/// How an unknown runtime's revision is floored (`Backend::rpc_floor`), against grpc-go's real
/// answers: containerd 1.6.20 lacks `RuntimeConfig` and `ListMetricDescriptors` (`unknown
/// method`) and implements `ListPodSandboxStats` (1.23); Debian's 1.7.24 is built against a newer
/// cri-api than its code, so its service has `RuntimeConfig` (1.28) unimplemented (`method
/// RuntimeConfig not implemented`). Counting that would floor it above the 1.27 its code reads:
/// for an unknown runtime only implemented RPCs count (cri-dockerd, whose releases' pins are
/// known, is placed by registration).
#[tokio::test]
async fn an_unknown_runtimes_floor_counts_only_what_it_implements() {
    // (Neither implements ListMetricDescriptors, 1.26: both are floored at 1.23, below their 1.25 and 1.27.)
    for (build, registered, implemented) in [(Build::System, Some(23), Some(23)), (Build::V1_7, Some(28), Some(23))] {
        let ctd = Containerd::start_build(build).await;
        let backend = cri_bridge::backend::Backend::new(
            format!("unix://{}", ctd.socket.display()),
            cri_bridge::backend::Role::Runtime,
            ctd.socket.clone(),
            cri_bridge::backend::Pins::default(),
            cri_bridge::config::DEFAULT_MAX_MESSAGE_SIZE,
        );
        assert_eq!(backend.rpc_floor(V1, true).await, registered, "{build:?}: what its service has");
        let floor = backend.rpc_floor(V1, false).await;
        println!("{build:?}: floor by what it has {registered:?}, by what it implements {floor:?}");
        assert_eq!(floor, implemented, "{build:?}: what it implements");
    }
}
