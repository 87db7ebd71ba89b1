//! A pod-scoped caller held to its pod (issues 38 and 47): the sandbox or container its request
//! names is asked of the runtime, on the caller's own runtime connection (what it costs, it
//! costs only that caller), and must be its pod's. A create is judged as the runtime will apply
//! it: what Pod Security baseline would refuse is refused, absent fields with an unsafe runtime
//! default are filled, the caller's `sandbox_config` is replaced by the sandbox's own as the
//! runtime recorded it, and every host path the runtime will open is judged on the host
//! (`host_paths.rs`). The answer "not yours" and "no such id" are the same denial, so that a
//! caller learns nothing of other pods.

use super::endpoint::PodScope;
use super::{Forwarder, Session};
use crate::access::create::{self, CreateRules};
use crate::access::pod::{self, Owner};
use crate::api::v1;
use crate::error::Error;
use crate::grpc::Rpc;
use crate::version::CriVersion;
use prost::Message;
use serde_json::Value;

/// What a pod-scoped call may go on with.
#[derive(Default)]
pub(super) struct Held {
    /// The request to send instead (a create with its defaults filled and the sandbox's own
    /// config).
    pub rewritten: Option<Vec<u8>>,
    /// Held until the runtime has answered a call whose host paths were judged: pod-scoped
    /// creates and checkpoints are judged one at a time, so that none can add a writable mount
    /// above a path another was let open.
    pub _paths: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Forwarder {
    /// Denies the call unless what it names is `scope`'s pod's, and a create or checkpoint gets
    /// nothing baseline refuses. `backend`: the backend the call goes to, and the version it
    /// speaks; `caller_pid`: the caller's process, whose `oom_score_adj` bounds a create's.
    pub(super) async fn hold_to_pod(
        &self,
        rpc: Rpc,
        request: &[u8],
        scope: &PodScope,
        session: &Session,
        backend: (usize, CriVersion),
        caller_pid: Option<u32>,
    ) -> Result<Held, Error> {
        let mut named = pod::other_containers(rpc.info, request).into_iter().map(Owner::Container).collect::<Vec<_>>();
        named.push(pod::owner(rpc.version, rpc.info, request));
        let mut recorded = None;
        // Only a create needs the sandbox's recorded config (verbose info, heavier to answer).
        let create = rpc.info.method == "CreateContainer";
        for owner in named {
            let sandbox = match owner {
                Owner::Nothing => continue,
                Owner::Sandbox(id) => self.sandbox_record(session, backend, &id, create).await,
                Owner::Container(id) => match self.sandbox_of(session, backend, &id).await {
                    Some(sandbox) => self.sandbox_record(session, backend, &sandbox, create).await,
                    None => None,
                },
            };
            match sandbox {
                Some((uid, config)) if uid == scope.uid => recorded = recorded.or(config),
                _ => return Err(scope.deny("it names a sandbox or container that is not the caller's pod's".into())),
            }
        }
        let written = pod::written_path(rpc.info, request).filter(|p| !p.is_empty());
        if rpc.info.method != "CreateContainer" && written.is_none() {
            return Ok(Held::default());
        }
        // One pod-scoped create or checkpoint at a time, from its paths' judgement to its answer.
        let paths = self.pod_paths.clone().lock_owned().await;
        if let Some(path) = written {
            if !pod::may_write(&path, &scope.host_paths) {
                let why =
                    format!("it would have the runtime write at {path:?}, outside host_paths {:?}", scope.host_paths);
                return Err(scope.deny(why));
            }
            self.judge_host_paths(session, vec![(path, false)], &[]).await.map_err(|why| scope.deny(why))?;
            return Ok(Held { rewritten: None, _paths: Some(paths) });
        }
        let rewritten = self.judge_create(rpc, request, scope, session, recorded, caller_pid).await?;
        Ok(Held { rewritten: Some(rewritten), _paths: Some(paths) })
    }

    /// A pod-scoped create, judged and made into what the runtime is sent.
    async fn judge_create(
        &self,
        rpc: Rpc,
        request: &[u8],
        scope: &PodScope,
        session: &Session,
        recorded: Option<Value>,
        caller_pid: Option<u32>,
    ) -> Result<Vec<u8>, Error> {
        let deny =
            |why: String| scope.deny(format!("a pod-scoped create gets nothing Pod Security baseline refuses: {why}"));
        let oom_floor = match caller_pid {
            Some(pid) => read_oom_score_adj(pid).await,
            None => None,
        };
        let rules = CreateRules {
            host_paths: &scope.host_paths,
            seccomp_profiles: &scope.seccomp_profiles,
            apparmor_profiles: &scope.apparmor_profiles,
            masked_paths: crate::node::kubelet_masked_paths(),
            oom_floor,
        };
        let judged = create::judge_create(rpc.version, request, &scope.uid, &rules).map_err(deny)?;
        // The sandbox's own config, as the runtime recorded it, replaces the caller's: the
        // runtime reads its cgroup parent, annotations, metadata, hostname, privilege and
        // namespaces from the request's copy.
        let Some(recorded) = recorded else {
            return Err(deny(
                "the runtime shows no record of the sandbox's config (verbose PodSandboxStatus info.config), so the \
                 request's sandbox_config cannot be checked"
                    .into(),
            ));
        };
        let schema = rpc.version.schema();
        let config_index = schema.message_index("PodSandboxConfig").expect("PodSandboxConfig in every version");
        let sandbox_config = crate::convert::go_json::encode(schema, config_index, &recorded, "sandbox_config")
            .map_err(|e| {
                deny(format!("the runtime's record of the sandbox cannot be carried in CRI {}: {e}", rpc.version))
            })?;
        let (_, field) = schema.field_by_name("CreateContainerRequest.sandbox_config").expect("in every version");
        let (mut rewritten, _) =
            crate::convert::scan::without_field(request, field.number).map_err(|e| deny(e.to_string()))?;
        prost::encoding::encode_key(field.number, prost::encoding::WireType::LengthDelimited, &mut rewritten);
        prost::encoding::encode_varint(sandbox_config.len() as u64, &mut rewritten);
        rewritten.extend_from_slice(&sandbox_config);
        rewritten.extend_from_slice(&judged.appended);

        // The host paths the runtime will open: each mount's, and the log file (containerd and
        // cri-dockerd join the sandbox's log directory and the log path with Go's join, and
        // write it only when both are set).
        let mut paths = Vec::new();
        for (path, writable) in &judged.mounts {
            if !pod::under_host_paths(path, &scope.host_paths) {
                return Err(deny(format!(
                    "mounts: host path {path:?} is outside the socket's host_paths {:?}",
                    scope.host_paths
                )));
            }
            paths.push((path.clone(), *writable));
        }
        let log_directory = recorded.get("log_directory").and_then(Value::as_str).unwrap_or_default();
        if !log_directory.is_empty() && !judged.log_path.is_empty() {
            let log = create::go_join(log_directory, &judged.log_path);
            let inside = log.strip_prefix(log_directory).is_some_and(|rest| rest.starts_with('/'));
            if !inside || !pod::under_host_paths(&log, &scope.host_paths) {
                return Err(deny(format!(
                    "log_path: {log} is outside the sandbox's log directory {log_directory} or the socket's host_paths \
                     {:?}",
                    scope.host_paths
                )));
            }
            paths.push((log, false));
        }
        let writable: Vec<String> = paths.iter().filter(|(_, w)| *w).map(|(p, _)| p.clone()).collect();
        self.judge_host_paths(session, paths, &writable).await.map_err(deny)?;
        Ok(rewritten)
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
    /// pod), and with `config`, the sandbox's config as the runtime recorded it, where its
    /// verbose info shows it (containerd's `info.config`), as the runtime says.
    async fn sandbox_record(
        &self,
        session: &Session,
        backend: (usize, CriVersion),
        sandbox: &str,
        config: bool,
    ) -> Option<(String, Option<Value>)> {
        if sandbox.is_empty() {
            return None;
        }
        let request = v1::PodSandboxStatusRequest { pod_sandbox_id: sandbox.to_string(), verbose: config };
        let answer = self.ask(session, backend.0, "PodSandboxStatus", &request.encode_to_vec()).await.ok()?;
        let response = v1::PodSandboxStatusResponse::decode(answer).ok()?;
        let uid = response.status?.metadata?.uid;
        let config = response
            .info
            .get("info")
            .and_then(|info| serde_json::from_str::<Value>(info).ok())
            .and_then(|mut info| info.get_mut("config").map(Value::take))
            .filter(Value::is_object);
        Some((uid, config))
    }
}

/// A process's `oom_score_adj` (`None`: it is gone, or `/proc` is not there).
async fn read_oom_score_adj(pid: u32) -> Option<i64> {
    let path = format!("/proc/{pid}/oom_score_adj");
    let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(path)).await.ok()?.ok()?;
    read.trim().parse().ok()
}
