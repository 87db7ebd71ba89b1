//! The `backend` and `emulate` sections: where the runtime is (`Endpoint`), which version and
//! revision it is pinned to, and what cri-bridge answers for it (`emulate.*`).

use super::error::{invalid, ConfigError};
use crate::version::CriVersion;
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BackendFile {
    pub(super) endpoint: Option<String>,
    pub(super) image_endpoint: Option<String>,
    pub(super) version: Option<String>,
    pub(super) revision: Option<String>,
    pub(super) image_revision: Option<String>,
}

/// What cri-bridge answers for a runtime that cannot (`emulate.*`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EmulateFile {
    #[serde(default)]
    pub(super) runtime_config: RuntimeConfigFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuntimeConfigFile {
    pub(super) cgroup_driver: Option<String>,
}

/// Where the runtime is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `unix:///path/to.sock`
    Unix(PathBuf),
    /// The built-in in-memory runtime.
    Memory,
}

impl Endpoint {
    pub fn parse(key: &'static str, text: &str) -> Result<Endpoint, ConfigError> {
        if text == "memory" {
            return Ok(Endpoint::Memory);
        }
        match text.strip_prefix("unix://") {
            Some(path) if path.starts_with('/') => Ok(Endpoint::Unix(PathBuf::from(path))),
            _ => Err(invalid(key, format!("{text:?} is not `unix:///absolute/path.sock` or `memory`"))),
        }
    }
}

impl Endpoint {
    /// The socket's path, for a unix endpoint.
    pub fn path(&self) -> Option<&PathBuf> {
        match self {
            Endpoint::Unix(path) => Some(path),
            Endpoint::Memory => None,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Memory => f.write_str("memory"),
        }
    }
}

pub(super) fn parse_revision(key: &'static str, text: &str) -> Result<u8, ConfigError> {
    crate::revision::parse_minor(text).ok_or_else(|| {
        invalid(key, format!("{text:?} is not a Kubernetes minor like \"1.25\" (the CRI revision the runtime decodes)"))
    })
}

pub(super) fn parse_backend_version(key: &'static str, text: &str) -> Result<Option<CriVersion>, ConfigError> {
    if text == "auto" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| invalid(key, format!("{text:?} is not auto, v1, v1alpha2 or v1alpha1")))
}
