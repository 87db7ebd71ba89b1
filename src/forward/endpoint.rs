//! The sockets cri-bridge serves, each with its access rules (issue 38): the main socket
//! (every RPC; mutating ones only for `listen.mutating`'s uids and gids, when set) and each
//! scoped socket of `endpoints` (one policy of `crate::access`). Every socket is served by the
//! one forwarder (`super::Scoped`: the forwarder seen through one socket's rules).
//!
//! A call is judged once its request has arrived (a status call's `verbose` flag is in it), by
//! who the kernel says the caller is (`Identity`), never by anything it sends; a denial is
//! `PERMISSION_DENIED` naming the RPC, the socket and its policy, counted, and audited.

use super::hooks::Identity;
use crate::access::{self, Policy};
use crate::config::Principals;
use crate::convert::scan::{self, Limits};
use crate::error::Error;
use crate::grpc::Rpc;
use std::sync::{Arc, RwLock};

/// What one socket lets its callers do; replaced whole on reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    pub policy: Policy,
    /// Who may make mutating calls (`None`: whoever the policy lets).
    pub mutating: Option<Principals>,
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

    /// Whether `rpc`, with `request` (its message), may go on for `caller`; if not, the denial.
    pub(super) fn judge(&self, rpc: Rpc, request: &[u8], caller: &Identity) -> Result<(), Error> {
        let rules = self.rules();
        let deny = |why: String| Error::Denied {
            rpc: rpc.name(),
            socket: self.socket.clone(),
            policy: rules.policy.name(),
            why,
        };
        if let Some(principals) = &rules.mutating {
            if access::mutates(rpc.info.method) && !principals.admits(caller.uid, caller.gid) {
                return Err(deny(format!(
                    "listen.mutating allows mutating calls only to uids {:?} and gids {:?}; the caller is uid {}, gid {}",
                    principals.uids, principals.gids, caller.uid, caller.gid
                )));
            }
        }
        rules.policy.decide(rpc.version, rpc.info, request).map_err(|denied| deny(denied.why.to_string()))?;
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
        Ok(())
    }
}
