//! What cri-bridge answers for a runtime that cannot (DESIGN principle 12), over real unix
//! sockets with the in-memory runtime posing as the runtimes of the revision table:
//! `RuntimeConfig` from the cgroup driver the runtime's `Status` info names (or the config key),
//! read again when the runtime is probed again, and only ever the driver or `UNIMPLEMENTED`;
//! 1.37's `CheckpointPod`/`RestorePod` forwarded or `UNIMPLEMENTED` naming the runtime; and
//! `Mount.mount_options` refused unless the runtime reports the feature.
//! (Real containerd 1.4.13, 1.6.20, 1.7.24 and 2.1.9: `tests/runtime_config.rs`.)

mod common;

use bytes::Bytes;
use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::grpc::{CriClient, Rpc};
use cri_bridge::runtime_config::CgroupDriver;
use cri_bridge::CriVersion::{self, V1alpha2, V1};
use prost::Message;
use std::path::Path;
use tonic::{Code, Request};

async fn call(socket: &Path, path: &str, body: Vec<u8>) -> Result<Bytes, tonic::Status> {
    let client = CriClient::new(channel(socket), 1 << 20);
    let rpc = Rpc::from_path(path).expect("a CRI path");
    client.unary(rpc, Request::new(body.into())).await.map(|r| r.into_inner())
}

/// `RuntimeService/RuntimeConfig` as a v1 caller (the kubelet) asks it: the driver, or the code.
async fn runtime_config(socket: &Path) -> Result<v1::CgroupDriver, Code> {
    match call(socket, "/runtime.v1.RuntimeService/RuntimeConfig", Vec::new()).await {
        Ok(bytes) => {
            let answer = v1::RuntimeConfigResponse::decode(bytes).expect("a RuntimeConfigResponse");
            Ok(answer.linux.expect("linux is set").cgroup_driver())
        }
        Err(status) => {
            assert!(
                matches!(status.code(), Code::Unimplemented | Code::Unavailable),
                "RuntimeConfig may only be the driver, UNIMPLEMENTED or (runtime down) UNAVAILABLE: {status:?}"
            );
            Err(status.code())
        }
    }
}

struct Setup {
    dir: TempDir,
    runtime: Runtime,
    bridge: Bridge,
}

/// The in-memory runtime serving `versions` as `identity` (name, version) with `driver`, and
/// cri-bridge in front with `configured` as `emulate.runtime_config.cgroup_driver`.
async fn setup(
    name: &str,
    versions: &[CriVersion],
    identity: Option<(&str, &str)>,
    driver: Option<v1::CgroupDriver>,
    configured: Option<CgroupDriver>,
) -> Setup {
    let dir = TempDir::new(name);
    let runtime = Runtime::start(&dir.path("runtime.sock"), versions).await;
    if let Some((name, version)) = identity {
        runtime.memory.set_identity(name, version);
    }
    runtime.memory.set_cgroup_driver(driver);
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.cgroup_driver = configured;
    let bridge = Bridge::start(config).await;
    Setup { dir, runtime, bridge }
}

impl Setup {
    async fn stop(self) {
        self.bridge.stop().await;
        self.runtime.stop().await;
    }
}

#[tokio::test]
async fn a_v1alpha2_runtime_gets_runtime_config_from_its_status_info() {
    for driver in [v1::CgroupDriver::Systemd, v1::CgroupDriver::Cgroupfs] {
        let s = setup("emulate-v1alpha2", &[V1alpha2], None, Some(driver), None).await;
        assert_eq!(runtime_config(&s.bridge.socket).await, Ok(driver));
        assert_eq!(s.runtime.memory.calls_of("RuntimeConfig"), 0, "v1alpha2 has no RuntimeConfig to call");
        s.stop().await;
    }
}

#[tokio::test]
async fn the_driver_is_read_again_when_the_runtime_comes_back_with_another() {
    let s = setup("emulate-again", &[V1alpha2], None, Some(v1::CgroupDriver::Cgroupfs), None).await;
    assert_eq!(runtime_config(&s.bridge.socket).await, Ok(v1::CgroupDriver::Cgroupfs));
    // The runtime restarts with SystemdCgroup = true: the next probe reads it.
    s.runtime.stop().await;
    let _ = std::fs::remove_file(s.dir.path("runtime.sock"));
    let restarted = Runtime::start(&s.dir.path("runtime.sock"), &[V1alpha2]).await;
    restarted.memory.set_cgroup_driver(Some(v1::CgroupDriver::Systemd));
    let mut answer = Err(Code::Unavailable);
    for _ in 0..50 {
        answer = runtime_config(&s.bridge.socket).await;
        if answer == Ok(v1::CgroupDriver::Systemd) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(answer, Ok(v1::CgroupDriver::Systemd), "the restarted runtime's driver");
    s.bridge.stop().await;
    restarted.stop().await;
}

#[tokio::test]
async fn the_config_key_answers_unless_the_runtime_says_otherwise_and_an_unknown_driver_is_unimplemented() {
    // The runtime's Status says nothing of its driver: the key is what the operator knows.
    let configured = setup("emulate-key", &[V1alpha2], None, None, Some(CgroupDriver::Cgroupfs)).await;
    assert_eq!(runtime_config(&configured.bridge.socket).await, Ok(v1::CgroupDriver::Cgroupfs));
    configured.stop().await;
    // It agrees: the same.
    let agreed =
        setup("emulate-agree", &[V1alpha2], None, Some(v1::CgroupDriver::Systemd), Some(CgroupDriver::Systemd)).await;
    assert_eq!(runtime_config(&agreed.bridge.socket).await, Ok(v1::CgroupDriver::Systemd));
    agreed.stop().await;
    // It says the other driver (a config copied from another node): neither is trusted, and
    // the caller is told UNIMPLEMENTED naming both, as the runtime itself would (a kubelet
    // 1.34–1.37 then uses its own cgroupDriver, as natively).
    let contradicted =
        setup("emulate-contra", &[V1alpha2], None, Some(v1::CgroupDriver::Systemd), Some(CgroupDriver::Cgroupfs)).await;
    let status =
        call(&contradicted.bridge.socket, "/runtime.v1.RuntimeService/RuntimeConfig", Vec::new()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert!(status.message().contains("says cgroupfs") && status.message().contains("systemd"), "{status:?}");
    contradicted.stop().await;
    // No driver in the runtime's Status info and no key: UNIMPLEMENTED, as the runtime would say
    // (any other code makes a kubelet 1.34–1.37 exit).
    let unknown = setup("emulate-unknown", &[V1alpha2], None, None, None).await;
    assert_eq!(runtime_config(&unknown.bridge.socket).await, Err(Code::Unimplemented));
    let status =
        call(&unknown.bridge.socket, "/runtime.v1.RuntimeService/RuntimeConfig", Vec::new()).await.unwrap_err();
    assert!(status.message().contains("emulate.runtime_config.cgroup_driver"), "names the key: {status:?}");
    unknown.stop().await;
}

/// containerd 1.x reads runc's options with go-toml, which matches `systemdCgroup` (any case) to
/// `SystemdCgroup`: a runtime configured so runs runc with systemd cgroups, and cri-bridge must
/// say systemd (cgroupfs there makes runc refuse every pod the kubelet asks for).
#[tokio::test]
async fn the_runc_option_is_read_in_any_case() {
    for key in ["systemdCgroup", "systemdcgroup"] {
        let dir = TempDir::new("emulate-case");
        let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1alpha2]).await;
        runtime.memory.set_systemd_cgroup_key(key);
        runtime.memory.set_cgroup_driver(Some(v1::CgroupDriver::Systemd));
        let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
        let s = Setup { dir, runtime, bridge };
        assert_eq!(runtime_config(&s.bridge.socket).await, Ok(v1::CgroupDriver::Systemd), "{key}");
        s.stop().await;
    }
}

#[tokio::test]
async fn a_runtime_that_answers_runtime_config_itself_is_passed_through() {
    let s = setup("emulate-native", &[V1], None, Some(v1::CgroupDriver::Cgroupfs), Some(CgroupDriver::Systemd)).await;
    assert_eq!(runtime_config(&s.bridge.socket).await, Ok(v1::CgroupDriver::Cgroupfs), "the runtime's own answer");
    assert_eq!(s.runtime.memory.calls_of("RuntimeConfig"), 1);
    s.stop().await;
}

#[tokio::test]
async fn containerd_1_7_over_v1_is_answered_without_asking_it() {
    // containerd 1.7 speaks v1 at the 1.27 revision: it has no RuntimeConfig (1.28).
    let identity = Some(("containerd", "1.7.24~ds1"));
    let s = setup("emulate-1-7", &[V1, V1alpha2], identity, Some(v1::CgroupDriver::Systemd), None).await;
    assert_eq!(runtime_config(&s.bridge.socket).await, Ok(v1::CgroupDriver::Systemd));
    assert_eq!(s.runtime.memory.calls_of("RuntimeConfig"), 0, "known to lack it: not sent");
    s.stop().await;
}

#[tokio::test]
async fn an_unknown_v1_runtime_answering_unimplemented_gets_the_driver_or_unimplemented() {
    // A runtime nobody knows whose RuntimeConfig is unimplemented: forwarded, and its
    // UNIMPLEMENTED replaced only where its Status info names a driver (here: none).
    let s = setup("emulate-unknown-v1", &[V1], Some(("somert", "0.9")), None, None).await;
    call(&s.bridge.socket, "/runtime.v1.RuntimeService/Version", Vec::new()).await.unwrap();
    let before = s.runtime.memory.calls_of("RuntimeConfig");
    assert_eq!(runtime_config(&s.bridge.socket).await, Err(Code::Unimplemented));
    assert_eq!(s.runtime.memory.calls_of("RuntimeConfig"), before + 1, "forwarded");
    s.stop().await;
    let keyed = setup("emulate-unknown-key", &[V1], Some(("somert", "0.9")), None, Some(CgroupDriver::Systemd)).await;
    assert_eq!(runtime_config(&keyed.bridge.socket).await, Ok(v1::CgroupDriver::Systemd));
    keyed.stop().await;
}

#[tokio::test]
async fn a_runtime_that_is_down_gets_what_a_kubelet_gets_natively() {
    let s =
        setup("emulate-down", &[V1alpha2], None, Some(v1::CgroupDriver::Systemd), Some(CgroupDriver::Systemd)).await;
    s.runtime.stop().await;
    let _ = std::fs::remove_file(s.dir.path("runtime.sock"));
    assert_eq!(runtime_config(&s.bridge.socket).await, Err(Code::Unavailable));
    s.bridge.stop().await;
}

#[tokio::test]
async fn checkpoint_pod_is_forwarded_to_a_runtime_that_has_it_and_unimplemented_otherwise() {
    let checkpoint = v1::CheckpointPodRequest {
        pod_sandbox_id: "no-such-pod".into(),
        output_path: "/tmp/checkpoint.tar".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let path = "/runtime.v1.RuntimeService/CheckpointPod";
    // cri-bridge's own runtime has the 1.37 schema: the call reaches it (and it has no such pod).
    let ours = setup("checkpoint-ours", &[V1], None, Some(v1::CgroupDriver::Systemd), None).await;
    let status = call(&ours.bridge.socket, path, checkpoint.clone()).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert_eq!(ours.runtime.memory.calls_of("CheckpointPod"), 1);
    ours.stop().await;
    // containerd 2.1 decodes the 1.32 schema: UNIMPLEMENTED naming it, never sent.
    let old =
        setup("checkpoint-2-1", &[V1], Some(("containerd", "v2.1.9")), Some(v1::CgroupDriver::Systemd), None).await;
    let status = call(&old.bridge.socket, path, checkpoint.clone()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert!(status.message().contains("containerd v2.1.9") && status.message().contains("1.37"), "{status:?}");
    assert_eq!(old.runtime.memory.calls_of("CheckpointPod"), 0);
    old.stop().await;
    // A v1alpha2 runtime: UNIMPLEMENTED naming its version.
    let alpha = setup("checkpoint-alpha", &[V1alpha2], None, Some(v1::CgroupDriver::Systemd), None).await;
    let status = call(&alpha.bridge.socket, path, checkpoint).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert!(status.message().contains("v1alpha2"), "{status:?}");
    alpha.stop().await;
}

/// A CreateContainer whose one mount asks for noexec.
fn create_with_mount_options() -> Vec<u8> {
    let mount = v1::Mount {
        container_path: "/data".into(),
        host_path: "/tmp".into(),
        mount_options: vec!["noexec".into(), "nosuid".into()],
        ..Default::default()
    };
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata { name: "c".into(), attempt: 0 }),
        image: Some(v1::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
        mounts: vec![mount],
        ..Default::default()
    };
    v1::CreateContainerRequest { pod_sandbox_id: "p".into(), config: Some(config), sandbox_config: None }
        .encode_to_vec()
}

#[tokio::test]
async fn mount_options_are_refused_unless_the_runtime_reports_the_feature() {
    let path = "/runtime.v1.RuntimeService/CreateContainer";
    // containerd 2.3 decodes the 1.36 schema: the options would be dropped.
    let old =
        setup("mount-options-2-3", &[V1], Some(("containerd", "v2.3.4")), Some(v1::CgroupDriver::Systemd), None).await;
    let status = call(&old.bridge.socket, path, create_with_mount_options()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert!(status.message().contains("mount_options"), "{status:?}");
    assert_eq!(old.runtime.memory.calls_of("CreateContainer"), 0);
    old.stop().await;
    // cri-bridge's own runtime reports features.mount_options: the call reaches it.
    let ours = setup("mount-options-ours", &[V1], None, Some(v1::CgroupDriver::Systemd), None).await;
    let answer = call(&ours.bridge.socket, path, create_with_mount_options()).await;
    assert!(!matches!(&answer, Err(s) if s.message().contains("refused by the loss policy")), "{answer:?}");
    assert_eq!(ours.runtime.memory.calls_of("CreateContainer"), 1);
    ours.stop().await;
}

#[tokio::test]
async fn asking_runtime_config_in_a_loop_does_not_make_cri_bridge_probe_for_everyone() {
    // A probe holds every caller's next call; a client looping RuntimeConfig must not cause them.
    let s = setup("emulate-loop", &[V1alpha2], None, Some(v1::CgroupDriver::Systemd), None).await;
    assert_eq!(runtime_config(&s.bridge.socket).await, Ok(v1::CgroupDriver::Systemd));
    let statuses = s.runtime.memory.calls_of("Status");
    let versions = s.runtime.memory.calls_of("Version");
    let started = std::time::Instant::now();
    for _ in 0..50 {
        assert_eq!(runtime_config(&s.bridge.socket).await, Ok(v1::CgroupDriver::Systemd));
    }
    // At most one probe a second (a runtime upgraded with no reconnection is noticed so).
    let probes = s.runtime.memory.calls_of("Status") - statuses;
    assert!(probes <= started.elapsed().as_secs(), "{probes} probes in {:?}", started.elapsed());
    let liveness = s.runtime.memory.calls_of("Version") - versions - probes;
    assert_eq!(liveness, 50, "one Version per call, to know the runtime answers now");
    s.stop().await;
}
