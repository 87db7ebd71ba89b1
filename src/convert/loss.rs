//! What a conversion could not carry: one `Loss` per field that was set in the source and has no
//! place (or no equivalent value) in the target version.

use crate::revision::Block;
use std::borrow::Cow;
use std::fmt;

/// How many losses of one message are recorded one by one (see [`record`]).
pub const MAX_DISTINCT: usize = 32;

/// Why a set field did not reach the target version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// The target version has no such field.
    NoField,
    /// The enum value has no counterpart (by name) in the target version.
    EnumValue(i32),
    /// The value has no form in the target version; the text says which.
    NoEquivalent(&'static str),
    /// A v1 `bytes` value bound for an older `string` field is not valid UTF-8.
    NotUtf8,
    /// A field number that cri-bridge's own schema does not know (a newer client).
    UnknownField,
    /// The target version has the field, but the runtime would not act on it.
    Blocked(Block),
    /// The runtime would not act on the field, and on this node that changes nothing (why).
    NoEffectHere(&'static str),
    /// More distinct fields were lost than are recorded one by one.
    TooMany,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::NoField => f.write_str("the version has no such field"),
            LossReason::EnumValue(v) => {
                write!(f, "enum value {v} has no equivalent in the version")
            }
            LossReason::NoEquivalent(why) => f.write_str(why),
            LossReason::NotUtf8 => {
                f.write_str("the value is not valid UTF-8, which the version's string field requires")
            }
            LossReason::UnknownField => f.write_str("the field number is unknown to cri-bridge's schema"),
            LossReason::Blocked(block) => block.fmt(f),
            LossReason::NoEffectHere(why) => write!(f, "the runtime would not act on it, which changes nothing: {why}"),
            LossReason::TooMany => write!(f, "more than {MAX_DISTINCT} different fields were lost"),
        }
    }
}

/// One field that a conversion dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Where in the message: `config.linux.security_context.supplemental_groups_policy`,
    /// `config.mounts[2].recursive_read_only`, `config.#99`.
    pub path: String,
    /// Which field, independent of where it sits: `LinuxContainerSecurityContext.supplemental_groups_policy`
    /// (or `Message.#99` for an unknown field). The loss policy is keyed by this.
    pub field: Cow<'static, str>,
    pub reason: LossReason,
    /// How many more times the same field was lost at other paths (`envs[3].value`, …).
    pub more: u64,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reason == LossReason::TooMany {
            return write!(f, "{} more lost fields ({})", 1 + self.more, self.reason);
        }
        write!(f, "{} ({})", self.path, self.reason)?;
        if self.more > 0 {
            write!(f, " and {} more like it", self.more)?;
        }
        Ok(())
    }
}

/// Adds a loss to a bounded record: the first [`MAX_DISTINCT`] losses are kept one by one, with
/// their paths; after that a field already recorded only counts one more, and anything else is
/// counted in one `TooMany` entry. So a hostile request of millions of unknown fields costs a
/// bounded record. `find` gives the index of the new loss's field among the entries kept (it is
/// asked only once the record is full); `make` builds the loss only when it is kept. Returns
/// whether it was kept one by one.
pub fn record(
    losses: &mut Vec<Loss>,
    find: impl FnOnce(&[Loss]) -> Option<usize>,
    make: impl FnOnce() -> Loss,
) -> bool {
    if losses.len() < MAX_DISTINCT {
        losses.push(make());
        return true;
    }
    if let Some(index) = find(&losses[..MAX_DISTINCT]) {
        losses[index].more += 1;
        return false;
    }
    // The overflow entry, once made, is the last: nothing is kept after it.
    match losses.last_mut() {
        Some(overflow) if overflow.reason == LossReason::TooMany => overflow.more += 1,
        _ => {
            losses.push(Loss { path: "…".into(), field: Cow::Borrowed("…"), reason: LossReason::TooMany, more: 0 })
        }
    }
    false
}
