//! A runtime named `docker` (cri-dockerd) answers `Version.runtime_api_version` as Docker's
//! Engine API version, as dockershim did: kubelets up to 1.23 parse it to admit a pod with
//! `allowPrivilegeEscalation: false` (at least 1.23), and refuse "v1alpha2" or "v1" with
//! "Cannot enforce NoNewPrivs: illegal version string" (issue 42, finding 1).

mod common;

use common::{Bridge, Pair, Runtime, TempDir};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion::V1;

#[tokio::test]
async fn docker_answers_its_engine_api_version_in_every_version() {
    // cri-dockerd 0.4 serves v1 only: a v1alpha2 kubelet's call is converted, a v1 one passed.
    // The name is the one cri-bridge's probe finds: set before cri-bridge starts.
    let pair = named_pair("docker-version", "docker", "20.10.24").await;
    let old = v1alpha2::runtime_service_client::RuntimeServiceClient::new(pair.channel())
        .version(v1alpha2::VersionRequest { version: "0.1.0".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((old.runtime_name.as_str(), old.runtime_api_version.as_str()), ("docker", "1.41.0"));
    assert_eq!((old.version.as_str(), old.runtime_version.as_str()), ("0.1.0", "20.10.24"));
    let new = v1::runtime_service_client::RuntimeServiceClient::new(pair.channel())
        .version(v1::VersionRequest { version: "0.1.0".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(new.runtime_api_version, "1.41.0");
    pair.bridge.stop().await;
}

#[tokio::test]
async fn other_runtimes_answer_the_callers_cri_version() {
    let pair = named_pair("containerd-version", "containerd", "2.1.9").await;
    let old = v1alpha2::runtime_service_client::RuntimeServiceClient::new(pair.channel())
        .version(v1alpha2::VersionRequest { version: "0.1.0".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(old.runtime_api_version, "v1alpha2");
    pair.bridge.stop().await;
}

/// A v1 in-memory runtime named `name` `version`, and cri-bridge in front of it.
async fn named_pair(dir: &str, name: &str, version: &str) -> Pair {
    let dir = TempDir::new(dir);
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    runtime.memory.set_identity(name, version);
    let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    Pair { dir, runtime, bridge }
}
