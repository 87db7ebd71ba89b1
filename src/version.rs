//! The three CRI wire versions.

use crate::api::{SchemaInfo, V1, V1ALPHA1, V1ALPHA2};
use std::fmt;
use std::str::FromStr;

/// A CRI wire version. Ordered oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CriVersion {
    V1alpha1,
    V1alpha2,
    V1,
}

impl CriVersion {
    /// Newest first: the order in which a backend is probed.
    pub const NEWEST_FIRST: [CriVersion; 3] = [CriVersion::V1, CriVersion::V1alpha2, CriVersion::V1alpha1];

    pub fn as_str(self) -> &'static str {
        match self {
            CriVersion::V1alpha1 => "v1alpha1",
            CriVersion::V1alpha2 => "v1alpha2",
            CriVersion::V1 => "v1",
        }
    }

    /// The proto package, which is also the gRPC path prefix (`/runtime.v1.RuntimeService/…`).
    pub fn package(self) -> &'static str {
        self.schema().package
    }

    pub fn schema(self) -> &'static SchemaInfo {
        match self {
            CriVersion::V1alpha1 => &V1ALPHA1,
            CriVersion::V1alpha2 => &V1ALPHA2,
            CriVersion::V1 => &V1,
        }
    }

    /// The version whose proto package is `package` (`runtime`, `runtime.v1alpha2`, `runtime.v1`).
    pub fn from_package(package: &str) -> Option<CriVersion> {
        Self::NEWEST_FIRST.into_iter().find(|v| v.package() == package)
    }
}

impl fmt::Display for CriVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text is not one of `v1alpha1`, `v1alpha2`, `v1`.
#[derive(Debug, thiserror::Error)]
#[error("unknown CRI version {0:?} (expected v1, v1alpha2 or v1alpha1)")]
pub struct UnknownVersion(pub String);

impl FromStr for CriVersion {
    type Err = UnknownVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::NEWEST_FIRST.into_iter().find(|v| v.as_str() == s).ok_or_else(|| UnknownVersion(s.to_string()))
    }
}
