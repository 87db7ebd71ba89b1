//! Where a call goes among several backends (issue 42): the routing table for new sandboxes,
//! and who holds each sandbox and container for every other call.
//!
//! Ownership comes from the backends themselves, never from state of cri-bridge's own: their
//! lists (at start and every [`super::REFRESH_EVERY`]), and on a miss their `PodSandboxStatus` or
//! `ContainerStatus` of the id, asked of every backend on the caller's own connections. A
//! restart of cri-bridge needs nothing; ids are never rewritten.

use super::{Forwarder, Method, Session};
use crate::access::pod::Owner;
use crate::api::v1;
use crate::error::Error;
use crate::grpc::Rpc;
use crate::routing::{request, Way};
use prost::Message;
use std::sync::atomic::Ordering;
use tonic::{Code, Status};

/// Where one call goes.
pub(super) enum Target {
    /// To one backend, with the request changed where it must be (a handler renamed).
    One(usize, Option<Vec<u8>>),
    /// To every backend, the answers merged as `Way` says.
    Every(Way),
}

impl Forwarder {
    /// Where a call of `rpc` with `request` goes; one backend: there, with nothing read.
    pub(super) async fn route(&self, method: &Method, request: &[u8], session: &Session) -> Result<Target, Status> {
        let Some(router) = &self.router else {
            return Ok(Target::One(0, None));
        };
        let (rpc, route) = (method.rpc, method.route);
        let default = router.table.default;
        let one = |backend| Ok(Target::One(backend, None));
        match route.way {
            Way::Default => one(default),
            Way::Handler => {
                let handler = request::runtime_handler(rpc.version, request);
                let Some((backend, there)) = router.table.route(&handler) else {
                    let mut routed = vec!["\"\"".to_string()];
                    routed.extend(router.table.handlers.iter().map(|h| format!("{:?}", h.handler)));
                    return Err(Error::NoRoute { handler, routed: routed.join(", ") }.into());
                };
                let renamed = (there != handler).then(|| request::with_runtime_handler(rpc.version, request, there));
                Ok(Target::One(backend, renamed.flatten()))
            }
            Way::Owner => {
                let names = route.named(request);
                self.owner_of(rpc, &names, session).await.map(|b| Target::One(b.unwrap_or(default), None))
            }
            Way::Merge => match request::filtered_to(rpc.version, rpc.info, request) {
                Owner::Nothing => Ok(Target::Every(Way::Merge)),
                // A list by an id no backend holds lists nothing: every backend says so.
                filtered => match self.owner_of(rpc, &filtered, session).await? {
                    Some(backend) => one(backend),
                    None => Ok(Target::Every(Way::Merge)),
                },
            },
            Way::Image => {
                let handler = request::image_handler(rpc.version, rpc.info, request);
                if !handler.is_empty() {
                    return match router.table.route(&handler) {
                        Some((backend, _)) => one(backend),
                        None => Err(Error::NoRoute { handler, routed: String::new() }.into()),
                    };
                }
                let pod = (rpc.info.method == "PullImage").then(|| request::pulled_for_pod(rpc.version, request));
                match pod.flatten() {
                    Some(uid) => self.pod_owner(&uid, session).await.map(|b| Target::One(b.unwrap_or(default), None)),
                    None => one(default),
                }
            }
            way @ (Way::Events | Way::Status | Way::Every) => Ok(Target::Every(way)),
        }
    }

    /// The backend that holds the sandbox or container `owner` names: known, or asked of every
    /// backend. `None`: no backend holds it (each answered, and none has it).
    async fn owner_of(&self, rpc: Rpc, owner: &Owner, session: &Session) -> Result<Option<usize>, Status> {
        let Some(router) = &self.router else { return Ok(Some(0)) };
        if let Some(backend) = router.known(owner) {
            return Ok(Some(backend));
        }
        let (method, id) = match owner {
            Owner::Sandbox(id) => ("PodSandboxStatus", id),
            Owner::Container(id) => ("ContainerStatus", id),
            Owner::Nothing => return Ok(None),
        };
        if id.is_empty() {
            return Ok(None);
        }
        let asked = router.order().into_iter().map(|index| async move {
            let request = match owner {
                Owner::Container(id) => {
                    v1::ContainerStatusRequest { container_id: id.clone(), verbose: false }.encode_to_vec()
                }
                _ => v1::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false }.encode_to_vec(),
            };
            match self.ask(session, index, method, &request).await {
                Ok(_) => Ok(true),
                Err(status) if status.code() == Code::Unavailable => Err(status),
                Err(_) => Ok(false),
            }
        });
        let answers = futures_util::future::join_all(asked).await;
        let order = router.order();
        let mut down = None;
        for (index, answer) in order.into_iter().zip(answers) {
            match answer {
                Ok(true) => {
                    router.learn(owner, index);
                    return Ok(Some(index));
                }
                Ok(false) => {}
                Err(error) => down = down.or(Some(error)),
            }
        }
        tracing::debug!(rpc = %rpc.path(), id = %id, "no backend holds it");
        // A backend that did not answer may hold it: saying "no such id" could be false.
        match down {
            Some(away) => Err(Status::new(
                away.code(),
                format!("{} (it may hold {id}, which no other backend has)", away.message()),
            )),
            None => Ok(None),
        }
    }

    /// The backend running pod `uid`'s sandbox: known, or listed by the pod's label on every
    /// backend. `None`: no backend runs it.
    async fn pod_owner(&self, uid: &str, session: &Session) -> Result<Option<usize>, Status> {
        let Some(router) = &self.router else { return Ok(Some(0)) };
        if let Some(backend) = router.owners().pods.get(uid).copied() {
            return Ok(Some(backend));
        }
        // Every sandbox, matched by the UID in its metadata (which the kubelet sets from the
        // pod, as in the pull's `sandbox_config`): what each backend runs is learnt with it.
        let request = v1::ListPodSandboxRequest::default().encode_to_vec();
        let mut found_on = None;
        for index in router.order() {
            let listed = match self.ask(session, index, "ListPodSandbox", &request).await {
                Ok(listed) => listed,
                Err(status) if status.code() == Code::Unavailable => return Err(status),
                Err(_) => continue,
            };
            let Ok(listed) = v1::ListPodSandboxResponse::decode(listed) else { continue };
            // A pod whose sandbox was made again may have an old one, not ready, elsewhere.
            let ready = listed.items.into_iter().filter(|s| s.state == v1::PodSandboxState::SandboxReady as i32);
            let mut owners = router.owners();
            for pod in ready.filter_map(|s| s.metadata).filter(|m| !m.uid.is_empty()) {
                if pod.uid == uid {
                    found_on = found_on.or(Some(index));
                }
                owners.pods.insert(pod.uid, index);
            }
        }
        Ok(found_on)
    }

    /// Lists every backend's sandboxes and containers, on each backend's own connection, and
    /// learns who holds what. Run at start and every [`super::REFRESH_EVERY`] (`run`).
    pub async fn refresh_owners(&self) {
        let Some(router) = &self.router else { return };
        for (index, routed) in self.backends.iter().enumerate() {
            let Ok(found) = routed.runtime.version().await else { continue };
            let list = |method: &'static str, request: Vec<u8>| async move {
                let info = found.version.schema().rpc("RuntimeService", method)?;
                routed.runtime.unary(Rpc { version: found.version, info }, &request).await.ok()
            };
            let sandboxes = list("ListPodSandbox", v1::ListPodSandboxRequest::default().encode_to_vec()).await;
            let containers = list("ListContainers", v1::ListContainersRequest::default().encode_to_vec()).await;
            let sandboxes = sandboxes.and_then(|b| v1::ListPodSandboxResponse::decode(b).ok());
            let containers = containers.and_then(|b| v1::ListContainersResponse::decode(b).ok());
            let (Some(sandboxes), Some(containers)) = (sandboxes, containers) else { continue };
            router.sandboxes[index].store(sandboxes.items.len(), Ordering::Relaxed);
            let mut owners = router.owners();
            owners.sandboxes.retain(|_, b| *b != index);
            owners.containers.retain(|_, b| *b != index);
            owners.pods.retain(|_, b| *b != index);
            for sandbox in sandboxes.items {
                let ready = sandbox.state == v1::PodSandboxState::SandboxReady as i32;
                if let Some(uid) = sandbox.metadata.map(|m| m.uid).filter(|u| ready && !u.is_empty()) {
                    owners.pods.insert(uid, index);
                }
                owners.sandboxes.insert(sandbox.id, index);
            }
            for container in containers.containers {
                owners.containers.insert(container.id, index);
            }
        }
    }

    /// The routing state, when there are several backends.
    pub fn router_sandboxes(&self) -> Vec<(String, usize)> {
        let Some(router) = &self.router else { return Vec::new() };
        router.table.backends.iter().enumerate().map(|(i, b)| (b.name.clone(), router.sandboxes_of(i))).collect()
    }
}
