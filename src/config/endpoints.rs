//! `endpoints`: sockets beside `listen.path`, each with its own path, mode, group and one access
//! policy (`crate::access`); `listen.mutating`: the uids and gids that may make mutating calls
//! on the main socket; `brownout`: CRI versions refused on the main socket, always or on a
//! schedule.

use super::error::invalid;
use super::ConfigError;
use crate::access::brownout::{parse_duration, Brownout};
use crate::access::Policy;
use crate::version::CriVersion;
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EndpointFile {
    path: Option<PathBuf>,
    policy: Option<String>,
    mode: Option<String>,
    group: Option<String>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    host_paths: Vec<PathBuf>,
    #[serde(default)]
    localhost_profiles: Option<LocalhostProfilesFile>,
}

/// `endpoints[].localhost_profiles`: the `Localhost` seccomp and AppArmor profiles a
/// pod-scoped socket's creates may name (distributions load some with `flags=(unconfined)`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LocalhostProfilesFile {
    #[serde(default)]
    seccomp: Vec<String>,
    #[serde(default)]
    apparmor: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MutatingFile {
    #[serde(default)]
    uids: Vec<u32>,
    #[serde(default)]
    gids: Vec<u32>,
}

/// A scoped socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedEndpoint {
    pub path: PathBuf,
    /// Permission bits of the socket file.
    pub mode: u32,
    /// Group owning the socket file (name or number).
    pub group: Option<String>,
    pub policy: Policy,
}

/// Who may make mutating calls on the main socket (`listen.mutating`): a caller whose uid or
/// gid is listed. `None`: anyone who can open the socket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Principals {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

impl Principals {
    pub fn admits(&self, uid: u32, gid: u32) -> bool {
        self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}

/// Parses `mode` (`"0660"`) for `key`.
pub(super) fn parse_mode(key: &'static str, mode: &str) -> Result<u32, ConfigError> {
    u32::from_str_radix(mode.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| invalid(key, format!("{mode:?} is not an octal permission like \"0660\"")))
}

pub(super) fn read_endpoints(files: Vec<EndpointFile>) -> Result<Vec<ScopedEndpoint>, ConfigError> {
    let mut endpoints = Vec::new();
    for mut file in files {
        let path = file
            .path
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| invalid("endpoints[].path", "each endpoint needs a path"))?;
        let at = |what: String| invalid("endpoints", format!("{}: {what}", path.display()));
        let policy = match (file.policy.as_deref(), file.allow.is_empty()) {
            (Some("pod-scoped"), true) => {
                let profiles = file.localhost_profiles.take().unwrap_or_default();
                Policy::PodScoped {
                    host_paths: read_host_paths(&file.host_paths).map_err(at)?,
                    seccomp_profiles: profiles.seccomp,
                    apparmor_profiles: profiles.apparmor,
                }
            }
            (Some("read-only"), true) => Policy::ReadOnly,
            (Some("images"), true) => Policy::Images,
            (Some("allow") | None, false) => Policy::Allow(read_allow_list(&file.allow).map_err(at)?),
            (Some("allow") | None, true) => return Err(at("policy `allow` needs a non-empty `allow` list".into())),
            (Some(policy @ ("read-only" | "images" | "pod-scoped")), false) => {
                return Err(at(format!("`allow` is for policy `allow`, not `{policy}`")))
            }
            (Some(other), _) => {
                return Err(at(format!("policy {other:?} is not one of read-only, images, pod-scoped, allow")));
            }
        };
        if file.localhost_profiles.is_some() {
            return Err(at(format!("`localhost_profiles` is for policy `pod-scoped`, not `{}`", policy.name())));
        }
        if !file.host_paths.is_empty() && !matches!(policy, Policy::PodScoped { .. }) {
            return Err(at(format!("`host_paths` is for policy `pod-scoped`, not `{}`", policy.name())));
        }
        let mode = file.mode.as_deref().map(|m| parse_mode("endpoints[].mode", m)).transpose()?.unwrap_or(0o660);
        endpoints.push(ScopedEndpoint { path, mode, group: file.group, policy });
    }
    Ok(endpoints)
}

/// Where a pod-scoped caller's creates may mount host paths: absolute, with no `..`.
fn read_host_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    use std::path::Component;
    let plain =
        |p: &PathBuf| p.is_absolute() && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    match paths.iter().find(|p| !plain(p)) {
        Some(path) => Err(format!("host_paths: {} is not an absolute path without `..`", path.display())),
        None => Ok(paths.to_vec()),
    }
}

/// Each entry names an RPC as `Service/Method` (`RuntimeService/ListContainers`) that some CRI
/// version has: a typo would otherwise deny what it meant to allow, silently.
fn read_allow_list(entries: &[String]) -> Result<Vec<String>, String> {
    let known = |entry: &str| {
        entry.split_once('/').is_some_and(|(service, method)| {
            [CriVersion::V1, CriVersion::V1alpha2, CriVersion::V1alpha1]
                .iter()
                .any(|v| v.schema().rpc(service, method).is_some())
        })
    };
    match entries.iter().find(|e| !known(e)) {
        Some(unknown) => {
            Err(format!("allow: {unknown:?} names no CRI RPC (write Service/Method, as RuntimeService/ListContainers)"))
        }
        None => Ok(entries.to_vec()),
    }
}

pub(super) fn read_mutating(file: Option<MutatingFile>) -> Result<Option<Principals>, ConfigError> {
    match file {
        None => Ok(None),
        Some(file) if file.uids.is_empty() && file.gids.is_empty() => {
            Err(invalid("listen.mutating", "name at least one uid or gid (leave the key out to allow every caller)"))
        }
        Some(file) => Ok(Some(Principals { uids: file.uids, gids: file.gids })),
    }
}

/// `brownout.<version>`: `deny`, or `{every: 1h, for: 10m}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum BrownoutFile {
    Word(String),
    Schedule {
        every: String,
        #[serde(rename = "for")]
        refused: String,
    },
}

pub(super) fn read_brownout(
    file: std::collections::BTreeMap<String, BrownoutFile>,
) -> Result<Vec<(CriVersion, Brownout)>, ConfigError> {
    let mut brownouts = Vec::new();
    for (version, how) in file {
        let key = || format!("brownout.{version}");
        let version: CriVersion = version.parse().map_err(|e| invalid("brownout", format!("{e}")))?;
        let brownout = match how {
            BrownoutFile::Word(word) if word == "deny" => Brownout::Always,
            BrownoutFile::Word(other) => {
                return Err(invalid("brownout", format!("{}: {other:?} is not `deny` or {{every, for}}", key())))
            }
            BrownoutFile::Schedule { every, refused } => {
                let duration = |text: &str| {
                    parse_duration(text).filter(|d| !d.is_zero()).ok_or_else(|| {
                        invalid("brownout", format!("{}: {text:?} is not a duration like 10m or 1h", key()))
                    })
                };
                let (every, refused) = (duration(&every)?, duration(&refused)?);
                if refused >= every {
                    return Err(invalid("brownout", format!("{}: `for` must be shorter than `every`", key())));
                }
                Brownout::Schedule { every, refused }
            }
        };
        brownouts.push((version, brownout));
    }
    Ok(brownouts)
}
