//! The loss policy: what happens to a call whose conversion lost fields (DESIGN principle 4).
//!
//! Each lost field gets an action. Defaults: `reject` for request fields classed `security` or
//! `behaviour` in [`super::classes`] (and for anything unclassified), `warn` for `advisory` ones,
//! `allow` for response fields (a newer runtime telling an older client more than it can hear).
//! Overrides name a field as
//! `Message.field` (wherever it appears), as a full path (`config.linux.security_context.run_as_group`)
//! or as `Message.#N` for a field number unknown to our schema; a path override wins.
//! The proxy judges request losses field by field; answer losses are only counted.

use super::classes::{class_of, Class};
use super::{Loss, LossReason};
use crate::api::SchemaInfo;
use crate::version::CriVersion;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Refuse the call with `UNIMPLEMENTED` (what clients read as "not supported").
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

/// Told of every loss the policy judges, by field, action and side (the metrics endpoint counts
/// them): the core says what happened and knows nothing of who listens.
pub trait LossObserver: Send + Sync {
    fn lost(&self, field: &str, action: Action, side: Side, count: u64);
}

/// Counts of dropped fields by action, since start.
#[derive(Default, Debug)]
pub struct LossCounters {
    pub rejected: AtomicU64,
    pub warned: AtomicU64,
    pub allowed: AtomicU64,
}

/// A request refused because it would lose a field the policy protects.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{rpc}: the runtime ({runtime}) cannot carry {}; refused by the loss policy (set `loss_policy` for the field to override)", describe(.fields))]
pub struct Refusal {
    pub rpc: String,
    /// The runtime as the caller should read it: `CRI v1alpha2 at the Kubernetes 1.19 revision (…)`.
    pub runtime: String,
    /// The refused losses (paths and reasons).
    pub fields: Vec<Loss>,
}

fn describe(losses: &[Loss]) -> String {
    // The same field lost at several paths (every masked path, every env value) is told once,
    // at its first path, with how many more there are.
    let mut told: Vec<Loss> = Vec::new();
    for loss in losses {
        let same = |t: &&mut Loss| t.field == loss.field && t.reason == loss.reason && t.reason != LossReason::TooMany;
        match told.iter_mut().find(same) {
            Some(first) => first.more += 1 + loss.more,
            None => told.push(loss.clone()),
        }
    }
    let one = |l: &Loss| match l.reason {
        LossReason::TooMany => l.to_string(),
        _ => {
            let (class, why) = class_of(&l.field, &l.path);
            format!("{l} [{class}: {why}]")
        }
    };
    told.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The policy with its per-field overrides.
#[derive(Default)]
pub struct LossPolicy {
    /// Replaced whole by a reload; read only for calls that lose a field.
    overrides: RwLock<Arc<HashMap<String, Action>>>,
    pub counters: LossCounters,
    /// Told of each loss (`cri_bridge_losses_total`), when the proxy counts them.
    observer: Option<Arc<dyn LossObserver>>,
    /// When each field was last warned of, and how many warnings of it were held back since: a
    /// kubelet sets some advisory fields on every pod, and a warning per pod would bury the log.
    warned: Mutex<HashMap<String, (Instant, u64)>>,
}

/// A field is warned of at most this often; the warnings in between are counted, and named in
/// the next one (the metrics count every loss).
pub const WARN_EVERY: Duration = Duration::from_secs(600);

/// Fields whose warnings are held back at once, at most (unknown field numbers are caller-chosen).
const WARNED_FIELDS: usize = 1024;

impl fmt::Debug for LossPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossPolicy").field("overrides", &self.overrides()).field("counters", &self.counters).finish()
    }
}

impl LossPolicy {
    pub fn new(overrides: HashMap<String, Action>) -> LossPolicy {
        LossPolicy { overrides: RwLock::new(Arc::new(overrides)), ..LossPolicy::default() }
    }

    /// A policy that also tells `observer` of every loss.
    pub fn counted(overrides: HashMap<String, Action>, observer: Arc<dyn LossObserver>) -> LossPolicy {
        LossPolicy { observer: Some(observer), ..LossPolicy::new(overrides) }
    }

    pub fn overrides(&self) -> Arc<HashMap<String, Action>> {
        self.overrides.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the overrides (a reload); calls already judged are not judged again.
    pub fn set_overrides(&self, overrides: HashMap<String, Action>) {
        *self.overrides.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(overrides);
    }

    /// The action for one loss.
    pub fn action(&self, side: Side, loss: &Loss) -> Action {
        let overrides = self.overrides();
        if let Some(action) = overrides.get(&loss.path).or_else(|| overrides.get(loss.field.as_ref())) {
            return *action;
        }
        match side {
            Side::Response => Action::Allow,
            // Fields beyond the bounded record were not judged one by one.
            Side::Request if loss.reason == LossReason::TooMany => Action::Reject,
            // Nothing changes on this node: passed, and counted.
            Side::Request if matches!(loss.reason, LossReason::NoEffectHere(_)) => Action::Allow,
            Side::Request => match class_of(&loss.field, &loss.path).0 {
                Class::Security | Class::Behaviour => Action::Reject,
                Class::Advisory => Action::Warn,
            },
        }
    }

    /// Whether `field` is due a warning now (none in the last [`WARN_EVERY`]), and how many were
    /// held back since the last one.
    fn due(&self, field: &str) -> Option<u64> {
        self.due_at(field, Instant::now())
    }

    fn due_at(&self, field: &str, now: Instant) -> Option<u64> {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, held_back)) = warned.get_mut(field) {
            if now.saturating_duration_since(*at) < WARN_EVERY {
                *held_back += 1;
                return None;
            }
            let since = std::mem::take(held_back);
            *at = now;
            return Some(since);
        }
        if warned.len() >= WARNED_FIELDS {
            warned.clear();
        }
        warned.insert(field.to_string(), (now, 0));
        Some(0)
    }

    /// Counts fields dropped from answers: expected, so allowed without being judged one by one.
    pub fn count_response_losses(&self, count: usize) {
        if count > 0 {
            self.counters.allowed.fetch_add(count as u64, Ordering::Relaxed);
            if let Some(observer) = &self.observer {
                observer.lost("*", Action::Allow, Side::Response, count as u64);
            }
        }
    }

    /// Applies the policy to the losses of one message of call `rpc`, bound for `runtime`
    /// (described for the caller): logs and counts what is dropped, or refuses the call naming
    /// every rejected field.
    pub fn apply(&self, side: Side, rpc: &str, runtime: &dyn fmt::Display, losses: Vec<Loss>) -> Result<(), Refusal> {
        let mut rejected = Vec::new();
        for loss in losses {
            let action = self.action(side, &loss);
            if let Some(observer) = &self.observer {
                observer.lost(&loss.field, action, side, 1 + loss.more);
            }
            match action {
                Action::Reject => rejected.push(loss),
                Action::Warn => {
                    self.counters.warned.fetch_add(1 + loss.more, Ordering::Relaxed);
                    if let Some(held_back) = self.due(&loss.field) {
                        tracing::warn!(rpc, %runtime, %loss, held_back, "{}", fate(&loss));
                    }
                }
                Action::Allow => {
                    self.counters.allowed.fetch_add(1 + loss.more, Ordering::Relaxed);
                    tracing::debug!(rpc, %runtime, %loss, "{}", fate(&loss));
                }
            }
        }
        if rejected.is_empty() {
            return Ok(());
        }
        self.counters.rejected.fetch_add(rejected.iter().map(|l| 1 + l.more).sum(), Ordering::Relaxed);
        let refusal = Refusal { rpc: rpc.to_string(), runtime: runtime.to_string(), fields: rejected };
        tracing::warn!(%refusal, "refused a call");
        Err(refusal)
    }
}

/// What became of a field that was not refused: one the runtime's version has reaches it (as it
/// came, or converted), and the runtime may not act on it; any other is dropped.
fn fate(loss: &Loss) -> &'static str {
    match loss.reason {
        LossReason::Blocked(_) => "passed a field the runtime does not act on",
        LossReason::NoEffectHere(_) => "passed a field the runtime does not act on, which changes nothing on this node",
        _ => "dropped a field the runtime cannot carry",
    }
}

/// Checks that an override key names a request field: `Message.field` or `Message.#N` for a
/// message that requests of some version carry, or a path that resolves from some RPC's request.
/// (Answer losses are allowed and counted, not judged: an override for one would do nothing.)
pub fn check_key(key: &str) -> Result<(), String> {
    let schemas = CriVersion::NEWEST_FIRST.map(|v| v.schema());
    let unknown_number = |name: &str| name.strip_prefix('#').is_some_and(|n| n.parse::<u32>().is_ok());
    if let Some((message, field)) = key.split_once('.').filter(|(m, _)| m.starts_with(|c: char| c.is_ascii_uppercase()))
    {
        let mut in_answers_only = false;
        for schema in schemas {
            let Some(index) = schema.message_index(message) else { continue };
            let m = &schema.messages[index];
            if unknown_number(field) || m.fields.iter().any(|f| f.name == field) {
                if schema.request_messages()[index] {
                    return Ok(());
                }
                in_answers_only = true;
            }
        }
        return Err(if in_answers_only {
            format!("{key:?} is a field of answers only: their losses are allowed and counted, not judged")
        } else {
            format!("{key:?} names no field of any CRI version (expected `Message.field`)")
        });
    }
    let resolves = |schema: &SchemaInfo, root: usize| {
        let mut message = Some(root);
        for segment in key.split('.') {
            let name = segment.split('[').next().unwrap_or(segment);
            let Some(current) = message else { return false };
            if unknown_number(name) {
                message = None;
                continue;
            }
            match schema.messages[current].fields.iter().find(|f| f.name == name) {
                Some(field) => message = field.message,
                None => return false,
            }
        }
        true
    };
    let found = schemas.iter().any(|schema| {
        schema.rpcs.iter().filter_map(|r| schema.message_index(r.request)).any(|root| resolves(schema, root))
    });
    if found {
        Ok(())
    } else {
        Err(format!(
            "{key:?} is not the path of a request field in any CRI version (expected `Message.field` or a path)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_warned_of_once_in_a_while_and_the_rest_counted() {
        let policy = LossPolicy::default();
        assert_eq!(policy.due("ImageSpec.user_specified_image"), Some(0), "the first time");
        assert_eq!(policy.due("ImageSpec.user_specified_image"), None, "held back");
        assert_eq!(policy.due("ImageSpec.user_specified_image"), None);
        assert_eq!(policy.due("LinuxPodSandboxConfig.overhead"), Some(0), "another field is its own");
        // Once WARN_EVERY has passed, the next warning names how many were held back.
        let later = Instant::now() + WARN_EVERY;
        assert_eq!(policy.due_at("ImageSpec.user_specified_image", later), Some(2));
        assert_eq!(policy.due_at("ImageSpec.user_specified_image", later), None);
    }
}
