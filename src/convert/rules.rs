//! The hand-written exceptions to the generated conversions, as data.
//!
//! `build.rs` reads this file too (it is plain data with no dependencies): a field that differs
//! between an older version and v1 — in name or type, or present only in the older version — must
//! be claimed by a rule here, or the build fails naming the field. For each rule the generated
//! conversion moves every unclaimed field and then calls the hook pair
//! `exceptions::<version>::<hook>_to_v1` and `<hook>_from_v1`, which handles the claimed ones.
//!
//! Fields that exist only in v1 need no rule: going down they are reported as losses when set,
//! going up they stay unset. A rule claims such a field only when its meaning can be carried in
//! another form (a seccomp profile as the old string, a namespace mode as a boolean).

/// One exception: which fields of one message a hand-written hook converts.
pub struct Rule {
    /// The older version: `v1alpha1` or `v1alpha2`.
    pub version: &'static str,
    /// The message, by its short name.
    pub message: &'static str,
    /// Fields of the older version that the hook converts (the generator skips them).
    pub old_fields: &'static [&'static str],
    /// Fields of v1 that the hook converts (the generator skips them).
    pub v1_fields: &'static [&'static str],
    /// Hook name: the functions are `<hook>_to_v1` and `<hook>_from_v1`.
    pub hook: &'static str,
    pub why: &'static str,
}

/// A message that exists in an older version only, with no v1 counterpart to convert to.
pub struct VersionOnly {
    pub version: &'static str,
    pub message: &'static str,
    pub why: &'static str,
}

pub const RULES: &[Rule] = &[
    Rule {
        version: "v1alpha1",
        message: "NamespaceOption",
        old_fields: &["host_network", "host_pid", "host_ipc"],
        v1_fields: &["network", "pid", "ipc", "target_id", "userns_options"],
        hook: "namespace_option",
        why: "v1alpha1 booleans and v1 modes share field numbers 1-3 but not meaning: map by meaning",
    },
    Rule {
        version: "v1alpha1",
        message: "PodSandboxConfig",
        old_fields: &[],
        v1_fields: &[],
        hook: "pod_sandbox_config",
        why: "an absent v1alpha1 NamespaceOption means no host namespaces; an absent v1 one means pid POD",
    },
    Rule {
        version: "v1alpha1",
        message: "ContainerConfig",
        old_fields: &[],
        v1_fields: &[],
        hook: "container_config",
        why: "an absent v1alpha1 NamespaceOption means a private PID namespace; an absent v1 one shares the pod's",
    },
    Rule {
        version: "v1alpha1",
        message: "FilesystemUsage",
        old_fields: &["storage_id"],
        v1_fields: &["fs_id"],
        hook: "filesystem_usage",
        why: "field 2 is a storage UUID in v1alpha1 and a mountpoint later: never reinterpret one as the other",
    },
    Rule {
        version: "v1alpha1",
        message: "KeyValue",
        old_fields: &["value"],
        v1_fields: &["value"],
        hook: "key_value",
        why: "string in v1alpha1, bytes in v1: a non-UTF-8 value cannot go down",
    },
    Rule {
        version: "v1alpha1",
        message: "LinuxSandboxSecurityContext",
        old_fields: &[],
        v1_fields: &["seccomp", "apparmor"],
        hook: "sandbox_security_context",
        why: "v1alpha1 carries seccomp only as the profile path string",
    },
    Rule {
        version: "v1alpha1",
        message: "LinuxContainerSecurityContext",
        old_fields: &[],
        v1_fields: &["seccomp", "apparmor"],
        hook: "container_security_context",
        why: "v1alpha1 carries seccomp and AppArmor only as strings",
    },
    Rule {
        version: "v1alpha1",
        message: "StatusResponse",
        old_fields: &[],
        v1_fields: &[],
        hook: "status_response",
        why: "v1alpha1-era clients parse every info value as JSON; later runtimes put plain strings there",
    },
    Rule {
        version: "v1alpha2",
        message: "KeyValue",
        old_fields: &["value"],
        v1_fields: &["value"],
        hook: "key_value",
        why: "string in v1alpha2, bytes in v1: a non-UTF-8 value cannot go down",
    },
    Rule {
        version: "v1alpha2",
        message: "LinuxSandboxSecurityContext",
        old_fields: &[],
        v1_fields: &[],
        hook: "sandbox_security_context",
        why: "keep the deprecated string and SecurityProfile consistent: runtimes before 1.20 read only the string",
    },
    Rule {
        version: "v1alpha2",
        message: "LinuxContainerSecurityContext",
        old_fields: &[],
        v1_fields: &[],
        hook: "container_security_context",
        why: "keep the deprecated strings and SecurityProfiles consistent: runtimes before 1.20 read only the strings",
    },
];

pub const VERSION_ONLY: &[VersionOnly] = &[VersionOnly {
    version: "v1alpha1",
    message: "StorageIdentifier",
    why: "the UUID form of FilesystemUsage field 2; v1alpha2 replaced it with FilesystemIdentifier (a mountpoint)",
}];
