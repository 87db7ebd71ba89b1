//! A pod-scoped caller held to its pod (issue 38): the sandbox or container its request names is
//! asked of the runtime, on the caller's own runtime connection (what it costs, it costs only
//! that caller), and must be its pod's; a create must ask for no privilege. The answer "not
//! yours" and "no such id" are the same denial, so that a caller learns nothing of other pods.

use super::endpoint::PodScope;
use super::{Forwarder, Session};
use crate::access::pod::{self, Owner};
use crate::api::v1;
use crate::error::Error;
use crate::grpc::Rpc;
use crate::version::CriVersion;
use prost::Message;

impl Forwarder {
    /// Denies the call unless what it names is `scope`'s pod's, and a create asks for no
    /// privilege. `backend`: the backend the call goes to, and the version it speaks.
    pub(super) async fn hold_to_pod(
        &self,
        rpc: Rpc,
        request: &[u8],
        scope: &PodScope,
        session: &Session,
        backend: (usize, CriVersion),
    ) -> Result<(), Error> {
        if rpc.info.method == "CreateContainer" {
            pod::create_without_privilege(rpc.version, request, &scope.uid, &scope.host_paths)
                .map_err(|why| scope.deny(format!("a pod-scoped create asks for no privilege: {why}")))?;
        }
        if let Some(path) = pod::written_path(rpc.info, request) {
            if !pod::may_write(&path, &scope.host_paths) {
                let why =
                    format!("it would have the runtime write at {path:?}, outside host_paths {:?}", scope.host_paths);
                return Err(scope.deny(why));
            }
        }
        let mut named = pod::other_containers(rpc.info, request).into_iter().map(Owner::Container).collect::<Vec<_>>();
        named.push(pod::owner(rpc.version, rpc.info, request));
        for owner in named {
            let pod_uid = match owner {
                Owner::Nothing => continue,
                Owner::Sandbox(id) => self.pod_of(session, backend, &id).await,
                Owner::Container(id) => match self.sandbox_of(session, backend, &id).await {
                    Some(sandbox) => self.pod_of(session, backend, &sandbox).await,
                    None => None,
                },
            };
            if pod_uid.as_deref() != Some(scope.uid.as_str()) {
                return Err(scope.deny("it names a sandbox or container that is not the caller's pod's".into()));
            }
        }
        Ok(())
    }

    /// The sandbox a container belongs to (`ListContainers` by its id), as the runtime says.
    async fn sandbox_of(&self, session: &Session, backend: (usize, CriVersion), container: &str) -> Option<String> {
        if container.is_empty() {
            return None;
        }
        let filter = v1::ContainerFilter { id: container.to_string(), ..Default::default() };
        let request = v1::ListContainersRequest { filter: Some(filter) };
        let answer = self.ask(session, backend.0, "ListContainers", &request.encode_to_vec()).await.ok()?;
        let listed = v1::ListContainersResponse::decode(answer).ok()?;
        listed.containers.into_iter().find(|c| c.id == container).map(|c| c.pod_sandbox_id)
    }

    /// The pod UID of a sandbox (`PodSandboxStatus`'s metadata, which the kubelet set from the
    /// pod), as the runtime says.
    async fn pod_of(&self, session: &Session, backend: (usize, CriVersion), sandbox: &str) -> Option<String> {
        if sandbox.is_empty() {
            return None;
        }
        let request = v1::PodSandboxStatusRequest { pod_sandbox_id: sandbox.to_string(), verbose: false };
        let answer = self.ask(session, backend.0, "PodSandboxStatus", &request.encode_to_vec()).await.ok()?;
        let status = v1::PodSandboxStatusResponse::decode(answer).ok()?.status?;
        status.metadata.map(|m| m.uid)
    }
}
