//! Where a call goes when several runtimes stand behind one socket (issue 42): the pure parts.
//! Which way each RPC travels ([`way_of`]), what a request says of where it belongs
//! (`request.rs`), and how the answers of several backends become one (`merge.rs`).
//!
//! Ids are never rewritten: a sandbox or container keeps the id its runtime gave it, so the
//! kubelet, the runtime's own tools and a cri-bridge taken out again all see the same ids.

pub mod holds;
pub mod merge;
pub mod request;

/// How an RPC travels among several backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// To the default backend: `Version`, `RuntimeConfig`, and what names no pod.
    Default,
    /// A new sandbox: by its `runtime_handler`, through the routing table.
    Handler,
    /// To the backend that holds the sandbox or container the request names.
    Owner,
    /// To every backend, the answers merged (lists, stats, metrics, image lists and file
    /// systems); a list filtered by id goes to the id's owner only.
    Merge,
    /// One event stream per backend, merged.
    Events,
    /// Every backend's `Status`, the conditions merged.
    Status,
    /// To every backend, which must all succeed: `UpdateRuntimeConfig`, `RemoveImage`.
    Every,
    /// An image read or pull: the pod's backend where the request says (`runtime_handler`,
    /// `sandbox_config`), else the default.
    Image,
}

/// Where an RPC's request names its sandbox or container: the top-level field's number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdField {
    Container(u32),
    Sandbox(u32),
}

/// How one RPC of one version is routed, worked out once at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodRoute {
    pub way: Way,
    pub id: Option<IdField>,
}

impl MethodRoute {
    /// `rpc` of `version`: its way, and the field that names its sandbox or container
    /// (`container_id`, else `pod_sandbox_id`, as `crate::access::pod::owner` reads them).
    pub fn of(version: crate::version::CriVersion, rpc: &crate::api::RpcInfo) -> MethodRoute {
        let schema = version.schema();
        let field = |name: &str| schema.field_by_name(&format!("{}.{name}", rpc.request)).map(|(_, f)| f.number);
        let id =
            field("container_id").map(IdField::Container).or_else(|| field("pod_sandbox_id").map(IdField::Sandbox));
        MethodRoute { way: way_of(rpc.method, id.is_some()), id }
    }

    /// What `request` names (an empty id is still a name, one that no backend holds).
    pub fn named(&self, request: &[u8]) -> crate::access::pod::Owner {
        use crate::access::pod::Owner;
        let read = |number| crate::convert::wire::string_field(request, number).unwrap_or_default();
        match self.id {
            Some(IdField::Container(number)) => Owner::Container(read(number)),
            Some(IdField::Sandbox(number)) => Owner::Sandbox(read(number)),
            None => Owner::Nothing,
        }
    }
}

/// The way of `method`; `names_id` says whether its request names a sandbox or container.
pub fn way_of(method: &str, names_id: bool) -> Way {
    match method {
        "Version" | "RuntimeConfig" | "RestorePod" => Way::Default,
        "RunPodSandbox" => Way::Handler,
        "Status" => Way::Status,
        "UpdateRuntimeConfig" | "RemoveImage" => Way::Every,
        "GetContainerEvents" => Way::Events,
        "ImageStatus" | "PullImage" => Way::Image,
        "ImageFsInfo" | "ListMetricDescriptors" => Way::Merge,
        _ if method.starts_with("List") || method.starts_with("Stream") => Way::Merge,
        _ if names_id => Way::Owner,
        _ => Way::Default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rpc_has_a_way() {
        for version in crate::version::CriVersion::NEWEST_FIRST {
            for rpc in version.schema().rpcs {
                let names = crate::access::pod::owner(version, rpc, &[]) != crate::access::pod::Owner::Nothing;
                let way = way_of(rpc.method, names);
                // What names a pod goes to its owner; nothing that names one falls to the default.
                if names && way == Way::Default {
                    panic!("{} names a pod but goes to the default", rpc.method);
                }
            }
        }
        let status = crate::version::CriVersion::V1.schema().rpc("RuntimeService", "ContainerStatus").unwrap();
        let route = MethodRoute::of(crate::version::CriVersion::V1, status);
        assert_eq!(route, MethodRoute { way: Way::Owner, id: Some(IdField::Container(1)) });
        let request = crate::api::v1::ContainerStatusRequest { container_id: "c1".into(), verbose: true };
        let named = route.named(&prost::Message::encode_to_vec(&request));
        assert_eq!(named, crate::access::pod::Owner::Container("c1".into()));
        assert_eq!(way_of("ListContainers", false), Way::Merge);
        assert_eq!(way_of("StreamPodSandboxMetrics", false), Way::Merge);
        assert_eq!(way_of("ContainerStatus", true), Way::Owner);
        assert_eq!(way_of("RunPodSandbox", false), Way::Handler);
    }
}
