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
use crate::routing::holds::{self, Holding};
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
                    Some(uid) => {
                        self.pod_owner(rpc, &uid, session).await.map(|b| Target::One(b.unwrap_or(default), None))
                    }
                    None => one(default),
                }
            }
            way @ (Way::Events | Way::Status | Way::Every) => Ok(Target::Every(way)),
        }
    }

    /// The backend that holds the sandbox or container `owner` names: known, or asked of every
    /// backend. `None`: no backend holds it (each said so in its own words for "not here",
    /// `routing::holds`). A backend that said anything else may hold it: the call fails
    /// `UNAVAILABLE` naming it, and goes nowhere on a guess.
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
        let request = match owner {
            Owner::Container(id) => {
                v1::ContainerStatusRequest { container_id: id.clone(), verbose: false }.encode_to_vec()
            }
            _ => v1::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false }.encode_to_vec(),
        };
        let order = router.order();
        let asked = order.iter().map(|&index| {
            let request = &request;
            async move {
                let answer = self.ask_within(session, index, method, request).await;
                let runtime = self.runtime_name(index).await;
                let said = answer.as_ref().map(|_| ()).map_err(|status| (status.code(), status.message()));
                (holds::holding(&runtime, id, said), answer.err())
            }
        });
        let answers = futures_util::future::join_all(asked).await;
        let mut unknown = None;
        for (&index, (holding, error)) in order.iter().zip(answers) {
            match holding {
                Holding::Holds => {
                    router.learn(owner, index);
                    return Ok(Some(index));
                }
                Holding::NotHere => {}
                Holding::CannotKnow => unknown = unknown.or(Some((index, error))),
            }
        }
        tracing::debug!(rpc = %rpc.path(), id = %id, "no backend holds it");
        match unknown {
            None => Ok(None),
            Some((index, error)) => Err(self.cannot_know(rpc, index, id, error)),
        }
    }

    /// The failure of a call whose owner backend `index` could not be asked (`error`: what it
    /// answered): `UNAVAILABLE` naming the backend and the id.
    fn cannot_know(&self, rpc: Rpc, index: usize, id: &str, error: Option<Status>) -> Status {
        let error = error.unwrap_or_else(|| Status::unknown("its answer did not decode"));
        if error.code() == Code::Unavailable {
            // Away: the message names it already.
            let message = format!("{} (it may hold {id}, which no other backend has)", error.message());
            return Status::unavailable(message);
        }
        let backend = self.backends[index].runtime.who();
        let (code, detail) = (crate::error::code_name(error.code()), error.message().to_string());
        Error::OwnerUnknown { rpc: rpc.name(), backend, id: id.to_string(), code, detail }.into()
    }

    /// [`Forwarder::ask`], bounded whole by [`super::LOOKUP_TIMEOUT`]: a runtime that accepts the
    /// connection and answers nothing (stopped, stuck on a lock) is "cannot know" in time.
    async fn ask_within(
        &self,
        session: &Session,
        index: usize,
        method: &str,
        request: &[u8],
    ) -> Result<bytes::Bytes, Status> {
        let asked = tokio::time::timeout(super::LOOKUP_TIMEOUT, self.ask(session, index, method, request)).await;
        asked.unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(format!("it did not answer {method} within {:?}", super::LOOKUP_TIMEOUT)))
        })
    }

    /// The `Version.runtime_name` backend `index` reported (empty when it is away).
    async fn runtime_name(&self, index: usize) -> String {
        let found = tokio::time::timeout(super::LOOKUP_TIMEOUT, self.backends[index].runtime.version()).await;
        let Ok(found) = found else { return String::new() };
        found.map(|found| found.profile.runtime.runtime_name.clone()).unwrap_or_default()
    }

    /// The backend running pod `uid`'s sandbox: known, or listed by the pod's label on every
    /// backend. `None`: every backend listed its sandboxes, and none runs it. A backend that
    /// could not list them may run it: `UNAVAILABLE` naming it (the pull goes nowhere on a guess).
    async fn pod_owner(&self, rpc: Rpc, uid: &str, session: &Session) -> Result<Option<usize>, Status> {
        let Some(router) = &self.router else { return Ok(Some(0)) };
        if let Some(backend) = router.owners().pods.get(uid).copied() {
            return Ok(Some(backend));
        }
        // Every sandbox, matched by the UID in its metadata (which the kubelet sets from the
        // pod, as in the pull's `sandbox_config`): what each backend runs is learnt with it.
        let request = v1::ListPodSandboxRequest::default().encode_to_vec();
        let (mut found_on, mut unknown) = (None, None);
        for index in router.order() {
            let listed = self.ask_within(session, index, "ListPodSandbox", &request).await;
            let listed = match listed.map(v1::ListPodSandboxResponse::decode) {
                Ok(Ok(listed)) => listed,
                Ok(Err(_)) => {
                    unknown = unknown.or(Some((index, None)));
                    continue;
                }
                Err(status) => {
                    unknown = unknown.or(Some((index, Some(status))));
                    continue;
                }
            };
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
        match (found_on, unknown) {
            (Some(index), _) => Ok(Some(index)),
            (None, None) => Ok(None),
            (None, Some((index, error))) => Err(self.cannot_know(rpc, index, &format!("pod {uid}"), error)),
        }
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
