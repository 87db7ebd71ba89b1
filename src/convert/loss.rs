//! What a conversion could not carry: one `Loss` per field that was set in the source and has no
//! place (or no equivalent value) in the target version.

use std::borrow::Cow;
use std::fmt;

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
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path, self.reason)
    }
}
