//! The loss policy: what happens to a call whose conversion lost fields (DESIGN principle 4).
//!
//! Each lost field gets an action. Defaults: `reject` for the security-relevant request fields in
//! [`SECURITY_RELEVANT`], `warn` for every other request field, `allow` for response fields (a
//! newer runtime telling an older client more than it can hear). Overrides name a field as
//! `Message.field` (wherever it appears), as a full path (`config.linux.security_context.run_as_group`)
//! or as `Message.#N` for a field number unknown to our schema; a path override wins.
//! The proxy judges request losses field by field; answer losses are only counted.

use super::Loss;
use crate::version::CriVersion;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Refuse the call with `FAILED_PRECONDITION`.
    Reject,
    /// Drop the field, log a warning, count it.
    Warn,
    /// Drop the field and count it.
    Allow,
}

impl std::str::FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "reject" => Ok(Action::Reject),
            "warn" => Ok(Action::Warn),
            "allow" => Ok(Action::Allow),
            other => Err(format!("unknown loss action {other:?} (expected reject, warn or allow)")),
        }
    }
}

/// Which half of a call a message belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Request,
    Response,
}

/// A request field that changes what runs (or how isolated it is) when an older runtime ignores it.
pub struct SecurityField {
    pub field: &'static str,
    pub why: &'static str,
}

/// The request fields refused by default when they cannot be carried: the one list.
pub const SECURITY_RELEVANT: &[SecurityField] = &[
    SecurityField { field: "NamespaceOption.network", why: "a network namespace mode the target cannot express" },
    SecurityField { field: "NamespaceOption.pid", why: "a PID namespace mode the target cannot express" },
    SecurityField { field: "NamespaceOption.ipc", why: "an IPC namespace mode the target cannot express" },
    SecurityField { field: "NamespaceOption.target_id", why: "joins another container's PID namespace" },
    SecurityField {
        field: "NamespaceOption.userns_options",
        why: "user namespace: without it the pod runs as host root",
    },
    SecurityField {
        field: "WindowsSandboxSecurityContext.namespace_options",
        why: "Windows namespace modes (host network)",
    },
    SecurityField { field: "Mount.uidMappings", why: "ID-mapped mount: without it files appear with host IDs" },
    SecurityField { field: "Mount.gidMappings", why: "ID-mapped mount: without it files appear with host IDs" },
    SecurityField { field: "Mount.recursive_read_only", why: "without it submounts stay writable" },
    SecurityField { field: "Mount.image", why: "image volume: without it the mount source changes meaning" },
    SecurityField {
        field: "Mount.image_sub_path",
        why: "image volume sub-path: without it the whole image is mounted",
    },
    SecurityField {
        field: "LinuxSandboxSecurityContext.supplemental_groups_policy",
        why: "Strict drops groups from the image; without it they are merged in",
    },
    SecurityField {
        field: "LinuxContainerSecurityContext.supplemental_groups_policy",
        why: "Strict drops groups from the image; without it they are merged in",
    },
    SecurityField {
        field: "LinuxSandboxSecurityContext.run_as_group",
        why: "without it the process runs with the image's group",
    },
    SecurityField {
        field: "LinuxContainerSecurityContext.run_as_group",
        why: "without it the process runs with the image's group",
    },
    SecurityField { field: "LinuxContainerSecurityContext.masked_paths", why: "without it /proc paths are exposed" },
    SecurityField { field: "LinuxContainerSecurityContext.readonly_paths", why: "without it /proc paths are writable" },
    SecurityField {
        field: "Capability.add_ambient_capabilities",
        why: "ambient capabilities would be silently not granted",
    },
    SecurityField { field: "LinuxSandboxSecurityContext.seccomp", why: "a seccomp profile the target cannot express" },
    SecurityField {
        field: "LinuxSandboxSecurityContext.apparmor",
        why: "an AppArmor profile the target cannot express",
    },
    SecurityField {
        field: "LinuxContainerSecurityContext.seccomp",
        why: "a seccomp profile the target cannot express",
    },
    SecurityField {
        field: "LinuxContainerSecurityContext.apparmor",
        why: "an AppArmor profile the target cannot express",
    },
    SecurityField { field: "SecurityProfile.profile_type", why: "a profile type the target does not know" },
    SecurityField { field: "ContainerConfig.CDI_devices", why: "CDI devices would be silently not injected" },
    SecurityField {
        field: "RunPodSandboxRequest.runtime_handler",
        why: "the RuntimeClass (gVisor, Kata): without it the pod runs under the default runtime",
    },
    SecurityField {
        field: "ImageSpec.runtime_handler",
        why: "the image would be pulled into, or looked up in, the default runtime's store",
    },
    SecurityField { field: "ContainerConfig.stop_signal", why: "the container would be stopped with another signal" },
    SecurityField {
        field: "KeyValue.value",
        why: "a value the target cannot carry (non-UTF-8) would reach the container as an empty variable",
    },
];

/// Counts of dropped fields by action, since start.
#[derive(Default, Debug)]
pub struct LossCounters {
    pub rejected: AtomicU64,
    pub warned: AtomicU64,
    pub allowed: AtomicU64,
}

/// A request refused because it would lose a field the policy protects.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{rpc}: the backend speaks CRI {target}, which cannot carry {}; refused by the loss policy (set `loss_policy` for the field to override)", describe(.fields))]
pub struct Refusal {
    pub rpc: String,
    pub target: CriVersion,
    /// The refused losses (paths and reasons).
    pub fields: Vec<Loss>,
}

fn describe(losses: &[Loss]) -> String {
    losses.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
}

/// The policy with its per-field overrides.
#[derive(Debug, Default)]
pub struct LossPolicy {
    overrides: HashMap<String, Action>,
    pub counters: LossCounters,
}

impl LossPolicy {
    pub fn new(overrides: HashMap<String, Action>) -> LossPolicy {
        LossPolicy { overrides, counters: LossCounters::default() }
    }

    /// The action for one loss.
    pub fn action(&self, side: Side, loss: &Loss) -> Action {
        if let Some(action) = self.overrides.get(&loss.path).or_else(|| self.overrides.get(loss.field.as_ref())) {
            return *action;
        }
        match side {
            Side::Response => Action::Allow,
            Side::Request if SECURITY_RELEVANT.iter().any(|s| s.field == loss.field) => Action::Reject,
            Side::Request => Action::Warn,
        }
    }

    /// Counts fields dropped from answers: expected, so allowed without being judged one by one.
    pub fn count_response_losses(&self, count: usize) {
        if count > 0 {
            self.counters.allowed.fetch_add(count as u64, Ordering::Relaxed);
        }
    }

    /// Applies the policy to the losses of one message of call `rpc`, bound for `target`:
    /// logs and counts what is dropped, or refuses the call naming every rejected field.
    pub fn apply(&self, side: Side, rpc: &str, target: CriVersion, losses: Vec<Loss>) -> Result<(), Refusal> {
        let mut rejected = Vec::new();
        for loss in losses {
            match self.action(side, &loss) {
                Action::Reject => rejected.push(loss),
                Action::Warn => {
                    self.counters.warned.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(rpc, %target, path = %loss.path, reason = %loss.reason, "dropped a field the other version cannot carry");
                }
                Action::Allow => {
                    self.counters.allowed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(rpc, %target, path = %loss.path, reason = %loss.reason, "dropped a field the other version cannot carry");
                }
            }
        }
        if rejected.is_empty() {
            return Ok(());
        }
        self.counters.rejected.fetch_add(rejected.len() as u64, Ordering::Relaxed);
        let refusal = Refusal { rpc: rpc.to_string(), target, fields: rejected };
        tracing::warn!(%refusal, "refused a call");
        Err(refusal)
    }
}

/// Checks that an override key names something that exists: `Message.field` or `Message.#N`
/// for a message of any version, or a path whose every segment is a field name of some message.
pub fn check_key(key: &str) -> Result<(), String> {
    let schemas = CriVersion::NEWEST_FIRST.map(|v| v.schema());
    let is_field =
        |name: &str| schemas.iter().any(|s| s.messages.iter().any(|m| m.fields.iter().any(|f| f.name == name)));
    let unknown_number = |name: &str| name.strip_prefix('#').is_some_and(|n| n.parse::<u32>().is_ok());
    if let Some((message, field)) = key.split_once('.').filter(|(m, _)| m.starts_with(|c: char| c.is_ascii_uppercase()))
    {
        let known = schemas
            .iter()
            .filter_map(|s| s.messages.iter().find(|m| m.name == message))
            .any(|m| unknown_number(field) || m.fields.iter().any(|f| f.name == field));
        return if known {
            Ok(())
        } else {
            Err(format!("{key:?} names no field of any CRI version (expected `Message.field`)"))
        };
    }
    for segment in key.split('.') {
        let name = segment.split('[').next().unwrap_or(segment);
        if !(is_field(name) || unknown_number(name)) {
            return Err(format!(
                "{key:?}: {name:?} is not a field of any CRI version (expected `Message.field` or a path)"
            ));
        }
    }
    Ok(())
}
