//! The sockets cri-bridge serves, each with its access rules (issue 38): the main socket
//! (every RPC; mutating ones only for `listen.mutating`'s uids and gids, when set) and each
//! scoped socket of `endpoints` (one policy of `crate::access`). Every socket is served by the
//! one forwarder (`super::Scoped`: the forwarder seen through one socket's rules).
//!
//! A call is judged once its request has arrived (a status call's `verbose` flag is in it), by
//! who the kernel says the caller is (`Identity`), never by anything it sends; a denial is
//! `PERMISSION_DENIED` naming the RPC, the socket and its policy, counted, and audited.

use super::hooks::Identity;
use crate::access::brownout::Brownout;
use crate::access::{self, pod, Policy};
use crate::config::Principals;
use crate::convert::scan::{self, Limits};
use crate::error::Error;
use crate::grpc::Rpc;
use crate::version::CriVersion;
use std::sync::{Arc, RwLock};

/// What one socket lets its callers do; replaced whole on reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    pub policy: Policy,
    /// Who may make mutating calls (`None`: whoever the policy lets).
    pub mutating: Option<Principals>,
    /// CRI versions refused, always or on a schedule (`brownout`; the main socket's).
    pub brownout: Vec<(CriVersion, Brownout)>,
}

/// One socket and its rules.
#[derive(Debug)]
pub struct Access {
    /// The socket's path, as denials, the audit log and the metrics name it.
    pub socket: String,
    rules: RwLock<Arc<Rules>>,
}

impl Access {
    pub fn new(socket: &std::path::Path, rules: Rules) -> Arc<Access> {
        Arc::new(Access { socket: socket.display().to_string(), rules: RwLock::new(Arc::new(rules)) })
    }

    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// New rules, for calls from now on (a reload).
    pub fn set(&self, rules: Rules) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
    }

    /// Whether `caller` may read cri-bridge's own calls (`path`: `/cri_bridge.Bridge/Callers`,
    /// `Status`): they name every caller of every socket (pods' UIDs, container ids, pids) and
    /// the backends' endpoints, so only the main socket answers them, and, where
    /// `listen.mutating` is set, only to those it lets change the node. A scoped socket denies
    /// them as any RPC its policy does not name.
    pub(super) fn judge_own_call(&self, path: &str, caller: &Identity) -> Result<(), Error> {
        let rules = self.rules();
        let deny = |why: String| Error::Denied {
            rpc: path.trim_start_matches('/').to_string(),
            socket: self.socket.clone(),
            policy: rules.policy.name(),
            why,
        };
        if rules.policy != Policy::All {
            return Err(deny("cri-bridge's own calls are answered on the main socket only".into()));
        }
        match &rules.mutating {
            Some(principals) if !principals.admits(caller.uid, caller.gid) => Err(deny(format!(
                "cri-bridge's own calls are answered only to the callers listen.mutating allows (uids {:?}, gids \
                 {:?}); the caller is uid {}, gid {}",
                principals.uids, principals.gids, caller.uid, caller.gid
            ))),
            _ => Ok(()),
        }
    }

    /// Whether `rpc`, with `request` (its message), may go on for `caller`, and how; if not, the
    /// denial.
    pub(super) fn judge(&self, rpc: Rpc, request: &[u8], caller: &Identity) -> Result<Judged, Error> {
        let rules = self.rules();
        let deny = |why: String| Error::Denied {
            rpc: rpc.name(),
            socket: self.socket.clone(),
            policy: rules.policy.name(),
            why,
        };
        if let Some((_, brownout)) = rules.brownout.iter().find(|(version, _)| *version == rpc.version) {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            if brownout.active(now) {
                return Err(Error::BrownedOut { rpc: rpc.name(), version: rpc.version, how: brownout.describe() });
            }
        }
        if let Some(principals) = &rules.mutating {
            if access::mutates(rpc.info.method) && !principals.admits(caller.uid, caller.gid) {
                return Err(deny(format!(
                    "listen.mutating allows mutating calls only to uids {:?} and gids {:?}; the caller is uid {}, gid {}",
                    principals.uids, principals.gids, caller.uid, caller.gid
                )));
            }
        }
        let verdict = rules.policy.decide(rpc.version, rpc.info, request).map_err(|d| deny(d.why.to_string()))?;
        // What the scan cannot judge (a field newer than cri-bridge's schema) is refused on a
        // scoped socket, whatever the loss policy says elsewhere.
        if rules.policy != Policy::All {
            let schema = rpc.version.schema();
            if let Some(index) = schema.message_index(rpc.info.request) {
                let mut losses = Vec::new();
                let scanned = scan::scan(schema, index, request, Limits::UNKNOWN_ONLY, &mut losses);
                if scanned.is_err() || !losses.is_empty() {
                    let paths: Vec<&str> = losses.iter().map(|l| l.path.as_str()).collect();
                    return Err(deny(format!(
                        "the request holds what cri-bridge cannot judge ({}); a scoped socket refuses it",
                        if paths.is_empty() { "it does not decode".to_string() } else { paths.join(", ") }
                    )));
                }
            }
        }
        let mut judged = Judged::default();
        if let Some(number) = verdict.drop_verbose {
            let (without, _) = scan::without_field(request, number).map_err(|e| deny(e.to_string()))?;
            judged.rewritten = Some(without);
        }
        if let (true, Policy::PodScoped { host_paths, seccomp_profiles, apparmor_profiles }) =
            (verdict.pod_scoped, &rules.policy)
        {
            let Some(pod_uid) = caller.pod_uid.clone() else {
                return Err(deny("the caller runs in no pod (its cgroup names none)".into()));
            };
            if let Some(narrowing) = pod::narrowing(rpc.version, rpc.info, &pod_uid) {
                let mut narrowed = judged.rewritten.take().unwrap_or_else(|| request.to_vec());
                narrowed.extend(narrowing);
                judged.rewritten = Some(narrowed);
            }
            judged.pod = Some(PodScope {
                uid: pod_uid,
                host_paths: host_paths.clone(),
                seccomp_profiles: seccomp_profiles.clone(),
                apparmor_profiles: apparmor_profiles.clone(),
                rpc: rpc.name(),
                socket: self.socket.clone(),
            });
        }
        Ok(judged)
    }
}

/// How a call may go on.
#[derive(Debug, Default)]
pub(super) struct Judged {
    /// The request to send instead of the caller's (without `verbose`, or narrowed to a pod).
    pub rewritten: Option<Vec<u8>>,
    /// The caller is held to this pod: the ids its request names are checked (`super::pod_scope`).
    pub pod: Option<PodScope>,
}

/// The pod a pod-scoped caller is held to.
#[derive(Debug)]
pub(super) struct PodScope {
    pub uid: String,
    /// Where its creates may mount host paths.
    pub host_paths: Vec<std::path::PathBuf>,
    /// The `Localhost` profiles its creates may name.
    pub seccomp_profiles: Vec<String>,
    pub apparmor_profiles: Vec<String>,
    /// The call and the socket, for a denial.
    rpc: String,
    socket: String,
}

impl PodScope {
    /// A denial of the call, naming the RPC, the socket and the policy.
    pub(super) fn deny(&self, why: String) -> Error {
        Error::Denied { rpc: self.rpc.clone(), socket: self.socket.clone(), policy: "pod-scoped", why }
    }
}
