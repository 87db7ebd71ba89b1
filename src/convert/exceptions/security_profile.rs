//! Seccomp and AppArmor intent in its two forms: the deprecated strings (`runtime/default`,
//! `unconfined`, `localhost/<ref>`) and the `SecurityProfile` message that v1alpha2 (Kubernetes
//! 1.20+) and v1 add beside them. Runtimes prefer the message; older ones read only the string.

use crate::api::{v1, v1alpha2};

/// Which kind of profile a string names: they share forms, except `docker/default` (seccomp only).
#[derive(Clone, Copy)]
pub enum ProfileKind {
    Seccomp,
    AppArmor,
}

/// A profile in version-independent form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Profile {
    RuntimeDefault,
    Unconfined,
    Localhost(String),
}

impl Profile {
    /// Reads the string form; `None` for the empty string or a form with no profile equivalent.
    pub fn parse(kind: ProfileKind, s: &str) -> Option<Profile> {
        match s {
            "runtime/default" => Some(Profile::RuntimeDefault),
            "docker/default" if matches!(kind, ProfileKind::Seccomp) => Some(Profile::RuntimeDefault),
            "unconfined" => Some(Profile::Unconfined),
            _ => s.strip_prefix("localhost/").map(|r| Profile::Localhost(r.to_string())),
        }
    }

    pub fn to_string_form(&self) -> String {
        match self {
            Profile::RuntimeDefault => "runtime/default".to_string(),
            Profile::Unconfined => "unconfined".to_string(),
            Profile::Localhost(r) => format!("localhost/{r}"),
        }
    }
}

/// The `SecurityProfile` message of one version.
pub trait ProfileMessage {
    /// `None` when the profile type is not one we know.
    fn profile(&self) -> Option<Profile>;
    fn from_profile(profile: Profile) -> Self;
}

macro_rules! profile_message {
    ($($version:ident),*) => {$(
        impl ProfileMessage for $version::SecurityProfile {
            fn profile(&self) -> Option<Profile> {
                use $version::security_profile::ProfileType;
                match ProfileType::try_from(self.profile_type).ok()? {
                    ProfileType::RuntimeDefault => Some(Profile::RuntimeDefault),
                    ProfileType::Unconfined => Some(Profile::Unconfined),
                    ProfileType::Localhost => Some(Profile::Localhost(self.localhost_ref.clone())),
                }
            }

            fn from_profile(profile: Profile) -> Self {
                use $version::security_profile::ProfileType;
                let (profile_type, localhost_ref) = match profile {
                    Profile::RuntimeDefault => (ProfileType::RuntimeDefault, String::new()),
                    Profile::Unconfined => (ProfileType::Unconfined, String::new()),
                    Profile::Localhost(r) => (ProfileType::Localhost, r),
                };
                $version::SecurityProfile { profile_type: profile_type as i32, localhost_ref }
            }
        }
    )*};
}
profile_message!(v1, v1alpha2);

/// Makes the string and the message say the same thing, where the target has both:
/// a message alone gets its string; a string alone gets its message; when both are present and
/// disagree, the message wins (runtimes that read both prefer it) and the string is rewritten.
/// A present-but-empty message (RuntimeDefault) stays present.
///
/// Returns false when the message holds a profile type we do not know, so no string can be made.
pub fn reconcile<P: ProfileMessage>(kind: ProfileKind, string: &mut String, message: &mut Option<P>) -> bool {
    match message {
        Some(m) => match m.profile() {
            Some(profile) => {
                if Profile::parse(kind, string).as_ref() != Some(&profile) {
                    *string = profile.to_string_form();
                }
                true
            }
            None => false,
        },
        None => {
            *message = Profile::parse(kind, string).map(P::from_profile);
            true
        }
    }
}

/// The string and the v1 message made consistent on the way up to v1 ([`reconcile`]); a
/// string that names no profile (a bare path, say) with no message beside it is a loss of
/// `field`: a v1 runtime that reads only `SecurityProfile` (CRI-O, cri-dockerd) would run the
/// container without the profile asked for, where every runtime reading the string refuses it.
pub fn up_to_v1(
    kind: ProfileKind,
    field: &'static str,
    string: &mut String,
    message: &mut Option<v1::SecurityProfile>,
    cx: &mut crate::convert::Cx,
) {
    reconcile(kind, string, message);
    if message.is_none() && !string.is_empty() {
        cx.lost(
            field,
            crate::convert::LossReason::NoEquivalent(
                "the string names no profile (runtime/default, unconfined or localhost/<path>): a runtime reading \
                 only SecurityProfile would apply none",
            ),
        );
    }
}

/// A pod's seccomp string and profile on the way up to v1 ([`up_to_v1`]).
pub fn sandbox_up_to_v1(dst: &mut v1::LinuxSandboxSecurityContext, cx: &mut crate::convert::Cx) {
    let field = "LinuxSandboxSecurityContext.seccomp_profile_path";
    up_to_v1(ProfileKind::Seccomp, field, &mut dst.seccomp_profile_path, &mut dst.seccomp, cx);
}

/// A container's seccomp and AppArmor strings and profiles on the way up to v1 ([`up_to_v1`]).
pub fn container_up_to_v1(dst: &mut v1::LinuxContainerSecurityContext, cx: &mut crate::convert::Cx) {
    let field = "LinuxContainerSecurityContext.seccomp_profile_path";
    up_to_v1(ProfileKind::Seccomp, field, &mut dst.seccomp_profile_path, &mut dst.seccomp, cx);
    let field = "LinuxContainerSecurityContext.apparmor_profile";
    up_to_v1(ProfileKind::AppArmor, field, &mut dst.apparmor_profile, &mut dst.apparmor, cx);
}

/// True when the deprecated string says what the profile says: a runtime that reads only the
/// string (before 1.20) applies the same profile.
pub fn string_carries(kind: ProfileKind, string: &str, profile: &Option<v1::SecurityProfile>) -> bool {
    match profile.as_ref().map(ProfileMessage::profile) {
        Some(Some(profile)) => Profile::parse(kind, string) == Some(profile),
        _ => false,
    }
}
