//! CRI v1's contract where the runtime speaks an older version: stopping or removing a sandbox
//! or container that the runtime does not know succeeds (v1 requires it; containerd 1.4 and 1.5
//! answer `NOT_FOUND` to `StopContainer` and `StopPodSandbox` of an unknown id). A caller of the
//! runtime's own version gets the runtime's answer as it came, as it would natively.
//!
//! Over the in-memory runtime (which answers `NOT_FOUND` to a stop of an unknown id, as
//! containerd 1.4 does) and over real containerd 1.4.13 (root, and the builds of
//! `containerd_support`; missing ones fail, never skip).

mod common;
mod containerd_support;

use common::{channel, Pair, TempDir};
use containerd_support::{Build, Containerd};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion::{V1alpha2, V1};
use tonic::Code;

type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1alpha2Runtime = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// The four calls with an unknown id, as a v1 caller: each one's code.
async fn v1_calls(mut client: V1Runtime) -> Vec<(&'static str, Code)> {
    let id = || "no-such-id-0123456789".to_string();
    vec![
        (
            "StopContainer",
            code(client.stop_container(v1::StopContainerRequest { container_id: id(), timeout: 0 }).await),
        ),
        ("RemoveContainer", code(client.remove_container(v1::RemoveContainerRequest { container_id: id() }).await)),
        ("StopPodSandbox", code(client.stop_pod_sandbox(v1::StopPodSandboxRequest { pod_sandbox_id: id() }).await)),
        (
            "RemovePodSandbox",
            code(client.remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: id() }).await),
        ),
    ]
}

fn code<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Code {
    match result {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

fn all_ok(calls: &[(&str, Code)]) -> bool {
    calls.iter().all(|(_, code)| *code == Code::Ok)
}

#[tokio::test]
async fn a_v1_caller_of_an_older_runtime_may_stop_and_remove_what_is_gone() {
    let pair = Pair::start("v1-contract-old", &[V1alpha2], None).await;
    let calls = v1_calls(V1Runtime::new(pair.channel())).await;
    assert!(all_ok(&calls), "a v1 caller over a v1alpha2 runtime: {calls:?}");
    // The runtime was asked each time (cri-bridge answers for it only after its NOT_FOUND).
    assert_eq!(pair.runtime.memory.calls_of("StopContainer"), 1);
    assert_eq!(pair.runtime.memory.calls_of("StopPodSandbox"), 1);

    // A v1alpha2 caller is passed the runtime's own answer, as natively.
    let mut old = V1alpha2Runtime::new(pair.channel());
    let stop =
        old.stop_container(v1alpha2::StopContainerRequest { container_id: "no-such-id".into(), timeout: 0 }).await;
    assert_eq!(stop.unwrap_err().code(), Code::NotFound);
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}

#[tokio::test]
async fn a_v1_caller_of_a_v1_runtime_gets_its_answer_as_it_came() {
    let pair = Pair::start("v1-contract-same", &[V1], None).await;
    let calls = v1_calls(V1Runtime::new(pair.channel())).await;
    // The in-memory runtime's own answers: NOT_FOUND for the stops, OK for the removals.
    let expected = [
        ("StopContainer", Code::NotFound),
        ("RemoveContainer", Code::Ok),
        ("StopPodSandbox", Code::NotFound),
        ("RemovePodSandbox", Code::Ok),
    ];
    assert_eq!(calls, expected);
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_containerd_1_4_a_v1_caller_may_stop_and_remove_what_is_gone() {
    let ctd = Containerd::start_build(Build::V1_4).await;
    // Natively (v1alpha2, its only version) the stops of an unknown id are NOT_FOUND.
    let mut direct = V1alpha2Runtime::new(channel(&ctd.socket));
    let native =
        direct.stop_container(v1alpha2::StopContainerRequest { container_id: "no-such-id".into(), timeout: 0 }).await;
    assert_eq!(native.unwrap_err().code(), Code::NotFound, "containerd 1.4.13 natively");
    let native = direct.stop_pod_sandbox(v1alpha2::StopPodSandboxRequest { pod_sandbox_id: "no-such-id".into() }).await;
    assert_eq!(native.unwrap_err().code(), Code::NotFound, "containerd 1.4.13 natively");

    let dir = TempDir::new("v1-contract-ctd");
    let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, None)).await;
    let calls = v1_calls(V1Runtime::new(channel(&bridge.socket))).await;
    assert!(all_ok(&calls), "a v1 caller through cri-bridge over containerd 1.4.13: {calls:?}\n{}", ctd.log_tail(20));
    bridge.stop().await;
}
