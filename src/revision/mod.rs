//! Which revision of its CRI version a runtime speaks, and what it does not act on.
//!
//! v1alpha2 grew from Kubernetes 1.10 to 1.25 and v1 from 1.20 on, each under one package name:
//! a runtime built against an older revision decodes a newer field as unknown and ignores it.
//! So the version alone does not say what a runtime understands. A [`RuntimeProfile`] does:
//!
//! - the **revision** (a Kubernetes minor), from the runtime's `Version` answer and the table
//!   below (from `runtime-cri-revisions.tsv`), or `backend.revision`; an unknown runtime is
//!   assumed to be the oldest revision of its version, and the log and `probe` say so;
//! - the fields it decodes but **does not act on** (no release reads `add_ambient_capabilities`;
//!   containerd reads `userns_options` only from 1.7);
//! - the **features** it reports in `Status` (from 1.30: user namespaces and recursive read-only
//!   mounts per handler; from 1.31: supplemental groups policy). Where the revision has the report,
//!   a request needing a feature the runtime does not report is a loss too.
//!
//! [`RuntimeProfile::blocked`] turns all three into one table indexed by field id, which the
//! request scan (`convert::scan`) consults.

mod docker;
mod table;

use crate::api::SchemaInfo;
use crate::version::CriVersion;
pub use docker::engine_api_version;
use std::fmt;
use table::{docker_unhonoured, lookup, AMBIENT};
pub use table::{parse_release, telling_rpcs, Unhonoured, DOCKER, MEMORY_RUNTIME_NAME};

/// The newest revision of each version that cri-bridge's own schema has.
pub fn newest(version: CriVersion) -> u8 {
    match version {
        CriVersion::V1alpha1 => 9,
        CriVersion::V1alpha2 => 25,
        CriVersion::V1 => 37,
    }
}

/// The oldest revision of each version: what an unknown runtime is assumed to speak.
pub fn oldest(version: CriVersion) -> u8 {
    match version {
        CriVersion::V1alpha1 => 9,
        CriVersion::V1alpha2 => 10,
        CriVersion::V1 => 20,
    }
}

/// Where a profile's revision came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The runtime's name and version matched a row of the revision table.
    Table,
    /// `backend.revision` in the config.
    Config,
    /// The runtime is not in the table: the oldest revision of its version is assumed, or the
    /// revision of the newest RPC its service has (`with_rpc_floor`).
    Assumed,
    /// cri-dockerd: its revision told by the RPCs its service has (it reports Docker's version).
    Rpcs,
}

/// What a runtime reports in `StatusResponse` about the features it implements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// Every handler reports user namespace support (`runtime_handlers[].features`).
    pub user_namespaces: bool,
    /// Every handler reports recursive read-only mounts.
    pub recursive_read_only_mounts: bool,
    /// `features.supplemental_groups_policy`.
    pub supplemental_groups_policy: bool,
    /// `features.mount_options` (1.37): the runtime applies `Mount.mount_options`.
    pub mount_options: bool,
    /// Each handler's own report, by name (`""`: the default handler): a pod runs on one
    /// handler, and needs only that handler's features.
    pub handlers: Vec<HandlerFeatures>,
}

/// What one runtime handler reports (`runtime_handlers[].features`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandlerFeatures {
    pub name: String,
    pub user_namespaces: bool,
    pub recursive_read_only_mounts: bool,
}

impl Features {
    /// These features as one handler has them: its own user namespaces and recursive read-only
    /// mounts, the runtime's for the rest. `None` when the runtime reports no such handler.
    pub fn for_handler(&self, handler: &str) -> Option<Features> {
        let own = self.handlers.iter().find(|h| h.name == handler)?;
        Some(Features {
            user_namespaces: own.user_namespaces,
            recursive_read_only_mounts: own.recursive_read_only_mounts,
            ..self.clone()
        })
    }

    /// Whether the handlers differ in a feature, so that a request may need the one it runs on.
    pub fn differ_by_handler(&self) -> bool {
        let differs = |f: fn(&HandlerFeatures) -> bool| self.handlers.iter().any(f) && !self.handlers.iter().all(f);
        differs(|h| h.user_namespaces) || differs(|h| h.recursive_read_only_mounts)
    }
}

impl Features {
    /// Reads the report from a v1 `StatusResponse`. A handler feature counts for the runtime as
    /// a whole only when every handler reports it; each handler's own is kept
    /// ([`Features::for_handler`]).
    pub fn from_status(status: &crate::api::v1::StatusResponse) -> Features {
        let handlers = &status.runtime_handlers;
        let all = |f: fn(&crate::api::v1::RuntimeHandlerFeatures) -> bool| {
            !handlers.is_empty() && handlers.iter().all(|h| h.features.as_ref().is_some_and(f))
        };
        Features {
            user_namespaces: all(|f| f.user_namespaces),
            recursive_read_only_mounts: all(|f| f.recursive_read_only_mounts),
            supplemental_groups_policy: status.features.as_ref().is_some_and(|f| f.supplemental_groups_policy),
            mount_options: status.features.as_ref().is_some_and(|f| f.mount_options),
            handlers: handlers
                .iter()
                .map(|h| HandlerFeatures {
                    name: h.name.clone(),
                    user_namespaces: h.features.as_ref().is_some_and(|f| f.user_namespaces),
                    recursive_read_only_mounts: h.features.as_ref().is_some_and(|f| f.recursive_read_only_mounts),
                })
                .collect(),
        }
    }
}

/// The revision from which `Status` reports handler features (runtime features from 1.31).
pub const HANDLER_FEATURES_SINCE: u8 = 30;

/// What one runtime understands, as far as cri-bridge can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeProfile {
    pub version: CriVersion,
    /// A Kubernetes minor: the runtime decodes the schema of this release.
    pub minor: u8,
    pub source: Source,
    /// As reported in `Version` (empty when not asked).
    pub runtime_name: String,
    pub runtime_version: String,
    pub unhonoured: Vec<Unhonoured>,
    /// `None` when the revision predates the report (or `Status` could not be read).
    pub features: Option<Features>,
    /// True when the runtime is known to decode no more than `minor` (a bounded table row, or
    /// `backend.revision`); false when `minor` is only a floor (the newest row of a runtime,
    /// an unknown runtime). Only then does cri-bridge say itself that an RPC is missing.
    pub exact: bool,
    /// The cgroup driver for `RuntimeConfig`, when the runtime cannot answer it: from the
    /// config or the runtime's `Status` info, or why it is unknown.
    pub cgroup_driver: crate::runtime_config::Reading,
}

/// Why the runtime would not act on a field: what the request scan reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// The runtime's revision predates the field (or enum value).
    Revision {
        runtime: u8,
        field: u8,
    },
    NotHonoured(&'static str),
    /// The runtime's `Status` does not report the feature the field needs.
    FeatureMissing(&'static str),
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Block::Revision { runtime, field } => {
                write!(f, "the runtime's CRI revision (Kubernetes 1.{runtime}) predates it (1.{field})")
            }
            Block::NotHonoured(why) => write!(f, "the runtime decodes it but does not act on it: {why}"),
            Block::FeatureMissing(feature) => write!(f, "the runtime does not report the {feature} feature"),
        }
    }
}

/// A request field (`Message.field`), the feature it needs, and whether a report has it.
type FeatureNeed = (&'static str, &'static str, fn(&Features) -> bool);

/// Request fields that need a feature the runtime reports in `Status`.
const NEEDS_FEATURE: &[FeatureNeed] = &[
    ("NamespaceOption.userns_options", "user namespaces (runtime_handlers[].features.user_namespaces)", |f| {
        f.user_namespaces
    }),
    ("Mount.recursive_read_only", "recursive read-only mounts (runtime_handlers[].features)", |f| {
        f.recursive_read_only_mounts
    }),
    ("LinuxSandboxSecurityContext.supplemental_groups_policy", "supplemental groups policy (features)", |f| {
        f.supplemental_groups_policy
    }),
    ("LinuxContainerSecurityContext.supplemental_groups_policy", "supplemental groups policy (features)", |f| {
        f.supplemental_groups_policy
    }),
    ("Mount.mount_options", "mount options (features.mount_options)", |f| f.mount_options),
];

/// cri-dockerd's revisions, told by the newest of the read-only v1 RPCs
/// ([`telling_rpcs`]) its service has (`runtime-cri-revisions.tsv`): with `RuntimeConfig` (1.28)
/// it is 0.3.16+ or 0.4 (v1 = 1.30, v1alpha2 = 1.25); with `ListMetricDescriptors` (1.26) but not
/// that, 0.3.9–0.3.15 (1.27, 1.25); with neither, 0.2–0.3.8 (1.20 or 1.22: 1.20 assumed).
fn docker_revision(version: CriVersion, floor: Option<u8>) -> u8 {
    match (version, floor) {
        (CriVersion::V1, Some(f)) if f >= 28 => 30,
        (CriVersion::V1, Some(f)) if f >= 26 => 27,
        (CriVersion::V1alpha2, Some(f)) if f >= 26 => 25,
        (version, _) => oldest(version).max(20),
    }
}

impl RuntimeProfile {
    /// The profile of a runtime that answered `Version` as `version`; `configured` is
    /// `backend.revision`, which wins over the table.
    pub fn from_version(version: CriVersion, name: &str, release: &str, configured: Option<u8>) -> RuntimeProfile {
        let ours = name == MEMORY_RUNTIME_NAME;
        let (minor, source, unhonoured, exact) = match lookup(name, release, version) {
            _ if ours => (newest(version), Source::Table, Vec::new(), true),
            Some(found) => (found.minor, Source::Table, found.unhonoured.to_vec(), found.exact),
            None => (oldest(version), Source::Assumed, vec![AMBIENT], false),
        };
        // `backend.revision` says which schema the runtime decodes, no more. What it does not act
        // on is a fact of its release (no release reads ambient capabilities, at any revision),
        // so the unhonoured fields stay whatever the revision.
        let (minor, source, exact) = match configured {
            Some(minor) => (minor, Source::Config, true),
            None => (minor, source, exact),
        };
        // A v1alpha2 runtime never has more than the 1.25 schema, whatever is configured.
        let minor = if version == CriVersion::V1 { minor } else { minor.min(newest(version)) };
        RuntimeProfile {
            version,
            minor,
            source,
            runtime_name: name.to_string(),
            runtime_version: release.to_string(),
            unhonoured,
            features: None,
            exact,
            cgroup_driver: Err("not read".to_string()),
        }
    }

    /// For a runtime the table cannot place (unknown, or cri-dockerd), what the RPCs its CRI
    /// service has tell: `floor` is the revision of the newest of [`telling_rpcs`] it has (of
    /// its version; of v1 for cri-dockerd).
    pub fn with_rpc_floor(mut self, floor: Option<u8>) -> RuntimeProfile {
        if self.source != Source::Assumed {
            return self;
        }
        if self.runtime_name == DOCKER {
            self.minor = docker_revision(self.version, floor);
            self.unhonoured = docker_unhonoured(self.minor);
            self.source = Source::Rpcs;
        } else {
            self.minor = self.minor.max(floor.unwrap_or(0));
        }
        self
    }

    /// True when the runtime is known to lack an RPC that first appeared in Kubernetes
    /// 1.`since` (an RPC its version has, but its revision predates).
    pub fn lacks_rpc(&self, since: u8) -> bool {
        self.exact && since > self.minor
    }

    /// True when the runtime is known to answer `RuntimeConfig` itself: its revision is from
    /// the table or the config, or (cri-dockerd) told by the RPCs it implements, `RuntimeConfig`
    /// first; not an unknown runtime's floor (it may have the method unimplemented).
    pub fn has_runtime_config(&self) -> bool {
        let known = matches!(self.source, Source::Table | Source::Config | Source::Rpcs);
        known && self.version == CriVersion::V1 && self.minor >= crate::runtime_config::SINCE
    }

    /// Whether the runtime's `Status` info shows each runtime handler's options as they are set:
    /// containerd 1.4 prints every options table as `{}`.
    pub fn shows_runtime_options(&self) -> bool {
        self.runtime_name != "containerd" || parse_release(&self.runtime_version).is_some_and(|r| r >= (1, 5, 0))
    }

    /// A profile for a version with nothing known about the runtime (an image endpoint that
    /// does not answer `Version`).
    pub fn unknown(version: CriVersion, configured: Option<u8>) -> RuntimeProfile {
        RuntimeProfile::from_version(version, "", "", configured)
    }

    /// Whether `Status` should be read for the features report.
    pub fn reports_features(&self) -> bool {
        self.version == CriVersion::V1 && self.minor >= HANDLER_FEATURES_SINCE
    }

    /// True when the runtime is newer than cri-bridge's schema: a field number cri-bridge does
    /// not know may be one the runtime knows.
    pub fn is_newer_than_schema(&self) -> bool {
        self.minor > newest(self.version)
    }

    /// The same table for a pod on `handler`: that handler's features instead of every
    /// handler's. `None` when the handlers do not differ, or the runtime reports no such one.
    pub fn blocked_for_handler(&self, schema: &SchemaInfo, handler: &str) -> Option<Vec<Option<Block>>> {
        let features = self.features.as_ref().filter(|f| f.differ_by_handler())?.for_handler(handler)?;
        let on_handler = RuntimeProfile { features: Some(features), ..self.clone() };
        Some(on_handler.blocked(schema))
    }

    /// Why the runtime would not act on each field of `schema`, by field id (`None`: it would).
    pub fn blocked(&self, schema: &SchemaInfo) -> Vec<Option<Block>> {
        let mut blocked = vec![None; schema.field_count];
        for message in schema.messages {
            for field in message.fields {
                if field.since > self.minor {
                    blocked[field.id] = Some(Block::Revision { runtime: self.minor, field: field.since });
                }
            }
        }
        for u in &self.unhonoured {
            if let Some((_, field)) = schema.field_by_name(u.field) {
                blocked[field.id].get_or_insert(Block::NotHonoured(u.why));
            }
        }
        // (A field newer than the report, like supplemental_groups_policy at 1.30, is blocked by
        // the revision already.)
        if let Some(features) = &self.features {
            for (name, feature, has) in NEEDS_FEATURE {
                if !has(features) {
                    if let Some((_, field)) = schema.field_by_name(name) {
                        blocked[field.id].get_or_insert(Block::FeatureMissing(feature));
                    }
                }
            }
        }
        blocked
    }
}

impl fmt::Display for RuntimeProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CRI {} at the Kubernetes 1.{} revision", self.version, self.minor)?;
        match self.source {
            Source::Table => write!(f, " ({} {})", self.runtime_name, self.runtime_version),
            Source::Config => write!(f, " (backend.revision)"),
            Source::Assumed => write!(
                f,
                " (assumed: {:?} {:?} is not in cri-bridge's revision table; set backend.revision)",
                self.runtime_name, self.runtime_version
            ),
            Source::Rpcs => write!(
                f,
                " (cri-dockerd in front of Docker Engine {}: the revision told by the RPCs its CRI service has)",
                self.runtime_version
            ),
        }
    }
}

/// `backend.revision`: `"1.27"` → 27.
pub fn parse_minor(text: &str) -> Option<u8> {
    let minor: u8 = text.strip_prefix("1.")?.parse().ok()?;
    (minor >= 9).then_some(minor)
}
