//! The audit log (issue 38): one structured line (target `audit`; JSON with `log.format: json`)
//! for every call that changes the node, and every denial, whatever the log level of the rest.
//! It says who called (what the kernel says: executable, pid, uid, pod, container), on which
//! socket, which RPC, the sandbox and container ids the request names, and the outcome. Nothing
//! the request carries beyond those ids is logged: no environment, no command, no credentials.

use super::{Client, Identity};
use crate::access;
use crate::convert::wire::string_field;
use crate::error::code_name;
use crate::grpc::Rpc;
use tonic::Code;

/// The ids a request names, read from its bytes when it arrived.
#[derive(Debug, Default)]
pub(super) struct Named {
    pub sandbox: Option<String>,
    pub container: Option<String>,
    /// The call was denied by its socket's rules.
    pub denied: bool,
}

impl Named {
    /// Reads `pod_sandbox_id` and `container_id` from `request`, when `rpc`'s request has them
    /// and the call is one the audit log records.
    pub(super) fn read(rpc: Rpc, request: &[u8]) -> Named {
        if !access::mutates(rpc.info.method) {
            return Named::default();
        }
        Named::of(rpc, request)
    }

    /// The ids `request` names, whatever the call: a denied read is audited with the ids it
    /// named too.
    pub(super) fn of(rpc: Rpc, request: &[u8]) -> Named {
        let schema = rpc.version.schema();
        let field = |name: &str| {
            let (_, field) = schema.field_by_name(&format!("{}.{name}", rpc.info.request))?;
            string_field(request, field.number).filter(|id| !id.is_empty())
        };
        Named { sandbox: field("pod_sandbox_id"), container: field("container_id"), denied: false }
    }
}

/// Records the call, if it is one the audit log records.
pub(super) fn record(rpc: Rpc, client: &Client, named: &Named, code: Code) {
    if !(named.denied || access::mutates(rpc.info.method)) {
        return;
    }
    let outcome = if named.denied { "denied" } else { code_name(code) };
    let ids = (named.sandbox.as_deref().unwrap_or(""), named.container.as_deref().unwrap_or(""));
    line(client, &rpc.name(), rpc.version.as_str(), ids, outcome);
}

/// Records a denied call of cri-bridge's own (`path`: `cri_bridge.Bridge/Callers`), as any
/// denial is.
pub(super) fn record_own_call_denied(path: &str, client: &Client) {
    line(client, path, "", ("", ""), "denied");
}

/// One audit line: who called, on which socket, what, naming which sandbox and container ids.
fn line(client: &Client, rpc: &str, version: &str, (sandbox, container): (&str, &str), outcome: &str) {
    let Identity { pid, uid, gid, exe, pod_uid, container_id } = &client.identity;
    tracing::info!(
        target: "audit",
        socket = %client.access.socket,
        rpc = %rpc,
        version,
        sandbox,
        container,
        outcome,
        caller_exe = %exe,
        caller_pid = pid.unwrap_or(0),
        caller_uid = uid,
        caller_gid = gid,
        caller_pod = pod_uid.as_deref().unwrap_or(""),
        caller_container = container_id.as_deref().unwrap_or(""),
        "audit"
    );
}
