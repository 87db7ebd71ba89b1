//! An RPC the runtime lacks: answered by cri-bridge where it knows what the runtime would say,
//! else `UNIMPLEMENTED` saying why.

use super::Plan;
use crate::backend::Discovered;
use crate::error::Error;
use crate::grpc::Rpc;
use crate::version::CriVersion;

/// cri-bridge's own answer to a call the runtime cannot answer, where it knows what the
/// runtime would say (DESIGN principle 12): `RuntimeConfig` from the runtime's cgroup driver.
pub(super) fn emulate(rpc: Rpc, found: &Discovered) -> Option<Vec<u8>> {
    let driver = found.profile.runtime.cgroup_driver.as_ref().ok().filter(|_| is_runtime_config(rpc))?;
    tracing::debug!(driver = %driver, "RuntimeConfig answered by cri-bridge");
    Some(crate::runtime_config::answer(driver.driver))
}

/// Why an RPC the runtime lacks is `UNIMPLEMENTED`: its version or its revision has no such
/// RPC; for `RuntimeConfig`, also why cri-bridge cannot answer it instead.
pub(super) fn missing(rpc: Rpc, plan: &Plan, found: &Discovered) -> Error {
    let runtime = &found.profile.runtime;
    let error = match plan.backend {
        None => Error::NotInBackendVersion { rpc: rpc.name(), backend: found.version },
        Some(_) => Error::NotInRuntimeRevision { rpc: rpc.name(), since: plan.since, runtime: runtime.to_string() },
    };
    match (is_runtime_config(rpc), &runtime.cgroup_driver) {
        (true, Err(why)) => Error::DriverUnknown { missing: Box::new(error), why: why.clone() },
        _ => error,
    }
}

fn is_runtime_config(rpc: Rpc) -> bool {
    rpc.version == CriVersion::V1 && rpc.info.method == "RuntimeConfig"
}
