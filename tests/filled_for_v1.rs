//! v1 fields that every v1 kubelet sets and a v1 runtime may rely on, filled for an older client
//! on its way to a v1 runtime (issue 40): `ImageSpec.user_specified_image`, which CRI-O 1.36
//! verifies an image's signature by (with a signature policy it refuses a create that leaves it
//! empty: "user specified image not specified, cannot verify image signature", from CRI-O's
//! `server/container_create.go`). A v1alpha2 client names the image in `image` only.

mod common;

use common::{channel, Pair};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion::V1;

type V1alpha2Runtime = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

#[tokio::test]
async fn a_v1alpha2_create_reaches_a_v1_runtime_with_the_image_as_the_client_named_it() {
    let pair = Pair::start("filled-image", &[V1], None).await;
    let mut old = V1alpha2Runtime::new(pair.channel());
    let sandbox = common::v1alpha2_pod("p");
    let pod = old
        .run_pod_sandbox(v1alpha2::RunPodSandboxRequest {
            config: Some(sandbox.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let image = "docker.io/library/busybox:latest";
    let created = old
        .create_container(v1alpha2::CreateContainerRequest {
            pod_sandbox_id: pod,
            config: Some(v1alpha2::ContainerConfig {
                metadata: Some(v1alpha2::ContainerMetadata { name: "c".into(), attempt: 0 }),
                image: Some(v1alpha2::ImageSpec { image: image.into(), ..Default::default() }),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    // Asked on the runtime's own socket, in its own version: what it was sent.
    let mut direct = V1Runtime::new(channel(&pair.dir.path("runtime.sock")));
    let status = direct
        .container_status(v1::ContainerStatusRequest { container_id: created, verbose: false })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    let spec = status.image.unwrap();
    assert_eq!((spec.image.as_str(), spec.user_specified_image.as_str()), (image, image));
    pair.bridge.stop().await;
    pair.runtime.stop().await;
}
