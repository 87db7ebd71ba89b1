//! What a request says of where it belongs, read from its bytes by the schema's field names (a
//! field's number differs between messages: `ContainerFilter.pod_sandbox_id` is 3,
//! `ContainerStatsFilter.pod_sandbox_id` 2).

use crate::access::pod::Owner;
use crate::api::RpcInfo;
use crate::convert::wire;
use crate::version::CriVersion;
use prost::encoding::{encode_key, encode_varint, WireType};

/// The number and message type (for a message field) of `Message.field` in `version`.
fn field(version: CriVersion, message: &str, name: &str) -> Option<(u32, Option<&'static str>)> {
    let schema = version.schema();
    let (_, field) = schema.field_by_name(&format!("{message}.{name}"))?;
    let messages: &'static [crate::api::MessageInfo] = schema.messages;
    Some((field.number, field.message.and_then(|index| messages.get(index)).map(|m| m.name)))
}

/// Every occurrence of message field `number`, joined: what a decoder merges them into.
fn merged(message: &[u8], number: u32) -> Vec<u8> {
    let mut rest = message;
    let mut joined = Vec::new();
    while let Ok(found) = wire::next(&mut rest) {
        if found.number == number && found.wire_type == 2 {
            joined.extend_from_slice(found.value);
        }
    }
    joined
}

/// The string at `path` (message fields, then a string field) from `message` of type `root`.
fn string_at(version: CriVersion, root: &str, path: &[&str], message: &[u8]) -> Option<String> {
    let (last, parents) = path.split_last()?;
    let mut ty = root.to_string();
    let mut bytes = message.to_vec();
    for name in parents {
        let (number, child) = field(version, &ty, name)?;
        bytes = merged(&bytes, number);
        ty = child?.to_string();
    }
    let (number, _) = field(version, &ty, last)?;
    wire::string_field(&bytes, number)
}

/// `RunPodSandboxRequest.runtime_handler` (`""` where the version has none: v1alpha1).
pub fn runtime_handler(version: CriVersion, request: &[u8]) -> String {
    string_at(version, "RunPodSandboxRequest", &["runtime_handler"], request).unwrap_or_default()
}

/// The request with its `runtime_handler` set to `handler`: the field appended (the last
/// occurrence is the one a decoder keeps). `None` where the version has no such field.
pub fn with_runtime_handler(version: CriVersion, request: &[u8], handler: &str) -> Option<Vec<u8>> {
    let (number, _) = field(version, "RunPodSandboxRequest", "runtime_handler")?;
    let mut out = request.to_vec();
    encode_key(number, WireType::LengthDelimited, &mut out);
    encode_varint(handler.len() as u64, &mut out);
    out.extend_from_slice(handler.as_bytes());
    Some(out)
}

/// The `ImageSpec.runtime_handler` of an image request (the kubelet's
/// `RuntimeClassInImageCriApi` gate sets it): `""` when unset.
pub fn image_handler(version: CriVersion, rpc: &RpcInfo, request: &[u8]) -> String {
    string_at(version, rpc.request, &["image", "runtime_handler"], request).unwrap_or_default()
}

/// The pod UID in a `PullImage`'s `sandbox_config` (the kubelet sends the pod's sandbox config).
pub fn pulled_for_pod(version: CriVersion, request: &[u8]) -> Option<String> {
    string_at(version, "PullImageRequest", &["sandbox_config", "metadata", "uid"], request)
        .filter(|uid| !uid.is_empty())
}

/// What a list request's filter names by id: its container, else its sandbox.
pub fn filtered_to(version: CriVersion, rpc: &RpcInfo, request: &[u8]) -> Owner {
    let Some((_, Some(filter))) = field(version, rpc.request, "filter") else {
        return Owner::Nothing;
    };
    let id = string_at(version, rpc.request, &["filter", "id"], request).filter(|id| !id.is_empty());
    let sandbox = string_at(version, rpc.request, &["filter", "pod_sandbox_id"], request).filter(|id| !id.is_empty());
    match (id, sandbox) {
        (Some(id), _) if filter.starts_with("Container") => Owner::Container(id),
        (Some(id), _) => Owner::Sandbox(id),
        (None, Some(sandbox)) => Owner::Sandbox(sandbox),
        (None, None) => Owner::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1;
    use prost::Message;

    fn rpc(method: &str) -> &'static RpcInfo {
        let service = if method.contains("Image") { "ImageService" } else { "RuntimeService" };
        CriVersion::V1.schema().rpc(service, method).expect("a v1 RPC")
    }

    #[test]
    fn reads_and_sets_the_handler() {
        let request = v1::RunPodSandboxRequest { config: None, runtime_handler: "docker".into() }.encode_to_vec();
        assert_eq!(runtime_handler(CriVersion::V1, &request), "docker");
        let rewritten = with_runtime_handler(CriVersion::V1, &request, "").expect("v1 has the field");
        assert_eq!(v1::RunPodSandboxRequest::decode(&rewritten[..]).unwrap().runtime_handler, "");
        assert_eq!(runtime_handler(CriVersion::V1alpha1, &request), "");
    }

    #[test]
    fn reads_filters_split_in_two() {
        let a = v1::ListContainersRequest {
            filter: Some(v1::ContainerFilter { pod_sandbox_id: "sb".into(), ..Default::default() }),
        };
        let b = v1::ListContainersRequest {
            filter: Some(v1::ContainerFilter {
                state: Some(v1::ContainerStateValue { state: 1 }),
                ..Default::default()
            }),
        };
        let mut bytes = a.encode_to_vec();
        bytes.extend(b.encode_to_vec());
        assert_eq!(filtered_to(CriVersion::V1, rpc("ListContainers"), &bytes), Owner::Sandbox("sb".into()));
        let stats = v1::ListContainerStatsRequest {
            filter: Some(v1::ContainerStatsFilter { id: "c1".into(), ..Default::default() }),
        };
        let owner = filtered_to(CriVersion::V1, rpc("ListContainerStats"), &stats.encode_to_vec());
        assert_eq!(owner, Owner::Container("c1".into()));
        let pods =
            v1::ListPodSandboxRequest { filter: Some(v1::PodSandboxFilter { id: "p".into(), ..Default::default() }) };
        assert_eq!(
            filtered_to(CriVersion::V1, rpc("ListPodSandbox"), &pods.encode_to_vec()),
            Owner::Sandbox("p".into())
        );
        assert_eq!(filtered_to(CriVersion::V1, rpc("ListImages"), &[]), Owner::Nothing);
    }

    #[test]
    fn reads_the_pulled_pod_and_image_handler() {
        let request = v1::PullImageRequest {
            image: Some(v1::ImageSpec {
                image: "busybox".into(),
                runtime_handler: "kata".into(),
                ..Default::default()
            }),
            auth: None,
            sandbox_config: Some(v1::PodSandboxConfig {
                metadata: Some(v1::PodSandboxMetadata { uid: "u-1".into(), ..Default::default() }),
                ..Default::default()
            }),
        }
        .encode_to_vec();
        assert_eq!(pulled_for_pod(CriVersion::V1, &request).as_deref(), Some("u-1"));
        assert_eq!(image_handler(CriVersion::V1, rpc("PullImage"), &request), "kata");
    }
}
