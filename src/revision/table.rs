//! The revision table: which cri-api schema each runtime release decodes (from
//! `runtime-cri-revisions.tsv`), and the fields each decodes but does not act on (from the
//! runtimes' sources; `docs/conversion.md` lists them with where each fact comes from).

use crate::version::CriVersion;

/// A field that a runtime decodes but does not act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unhonoured {
    /// `Message.field`.
    pub field: &'static str,
    pub why: &'static str,
}

/// The in-memory runtime's `VersionResponse.runtime_name` (`memory::RUNTIME_NAME`): named here,
/// where runtimes are told apart, so that this table needs nothing of the runtime itself.
pub const MEMORY_RUNTIME_NAME: &str = "cri-bridge-memory";

pub(super) const AMBIENT: Unhonoured = Unhonoured {
    field: "Capability.add_ambient_capabilities",
    why: "no containerd (to 2.3) or CRI-O (to 1.36) release reads ambient capabilities",
};
const USERNS_1_6: Unhonoured = Unhonoured {
    field: "NamespaceOption.userns_options",
    why: "containerd 1.6 decodes user namespace options but never applies them (the first reader is in 1.7)",
};

// The deprecated security-profile strings and the messages beside them (cri-api 1.20 on):
// which one each runtime reads. containerd reads the message and, when it is absent, the string
// (1.5 to 2.4, both services, all three fields; 1.4 predates the messages): nothing to list.
const CRIO_SECCOMP_SANDBOX_STRING: Unhonoured = Unhonoured {
    field: "LinuxSandboxSecurityContext.seccomp_profile_path",
    why: "CRI-O 1.28 and later read only the SecurityProfile `seccomp` (cri-o#7006): the pod would run without it",
};
const CRIO_SECCOMP_CONTAINER_STRING: Unhonoured = Unhonoured {
    field: "LinuxContainerSecurityContext.seccomp_profile_path",
    why: "CRI-O 1.28 and later read only the SecurityProfile `seccomp` (cri-o#7006): the container would run \
          unconfined",
};
const CRIO_APPARMOR_MESSAGE: Unhonoured = Unhonoured {
    field: "LinuxContainerSecurityContext.apparmor",
    why: "CRI-O before 1.30 reads only the `apparmor_profile` string (cri-o#7901)",
};
const DOCKER_APPARMOR_MESSAGE: Unhonoured = Unhonoured {
    field: "LinuxContainerSecurityContext.apparmor",
    why: "cri-dockerd (0.2 to 0.4) reads only the `apparmor_profile` string",
};
const DOCKER_SECCOMP_STRING: Unhonoured = Unhonoured {
    field: "LinuxContainerSecurityContext.seccomp_profile_path",
    why: "cri-dockerd 0.3.5 and later read only the SecurityProfile `seccomp` (cri-dockerd#223): the container \
          would run unconfined",
};
const DOCKER_SECCOMP_MESSAGE: Unhonoured = Unhonoured {
    field: "LinuxContainerSecurityContext.seccomp",
    why: "cri-dockerd before 0.3.5 reads only the `seccomp_profile_path` string (its release is not told apart \
          from 0.3.5 to 0.3.8: set both alike)",
};

/// What CRI-O releases of `minor` (1.`minor`) do not act on: ambient capabilities, and the
/// security-profile fields they do not read.
const fn crio_unhonoured(minor: u32) -> &'static [Unhonoured] {
    if minor < 20 {
        &[AMBIENT]
    } else if minor < 28 {
        &[AMBIENT, CRIO_APPARMOR_MESSAGE]
    } else if minor < 30 {
        &[AMBIENT, CRIO_APPARMOR_MESSAGE, CRIO_SECCOMP_SANDBOX_STRING, CRIO_SECCOMP_CONTAINER_STRING]
    } else {
        &[AMBIENT, CRIO_SECCOMP_SANDBOX_STRING, CRIO_SECCOMP_CONTAINER_STRING]
    }
}

/// What cri-dockerd does not act on, by the revision its RPCs tell (`docker_revision`): 27 and
/// 30 are 0.3.9 and later; 20 is 0.2 to 0.3.8, which read the one seccomp field or the other.
pub(super) fn docker_unhonoured(revision: u8) -> Vec<Unhonoured> {
    let seccomp =
        if revision >= 27 { vec![DOCKER_SECCOMP_STRING] } else { vec![DOCKER_SECCOMP_STRING, DOCKER_SECCOMP_MESSAGE] };
    [vec![AMBIENT, DOCKER_APPARMOR_MESSAGE], seccomp].concat()
}

/// One row of the revision table: a runtime's releases from `from` on (to the next row).
struct Row {
    runtime: &'static str,
    from: (u32, u32, u32),
    /// The revision of the v1 service; `None` when these releases do not serve v1.
    v1: Option<u8>,
    v1alpha2: Option<u8>,
    unhonoured: &'static [Unhonoured],
    /// A pre-release snapshot of cri-api (see `snapshot`).
    snapshot: bool,
}

const fn row(runtime: &'static str, from: (u32, u32, u32), v1: Option<u8>, v1alpha2: Option<u8>) -> Row {
    Row { runtime, from, v1, v1alpha2, unhonoured: &[AMBIENT], snapshot: false }
}

/// A CRI-O row ([`crio_unhonoured`]).
const fn crio(from: (u32, u32, u32), v1: Option<u8>, v1alpha2: Option<u8>) -> Row {
    Row { unhonoured: crio_unhonoured(from.1), ..row("cri-o", from, v1, v1alpha2) }
}

/// A row whose releases pin a cri-api snapshot between two minors: the revision is the older
/// minor, but some RPCs of the newer one are there (so the revision is a floor, not exact).
const fn snapshot(runtime: &'static str, from: (u32, u32, u32), v1: Option<u8>, v1alpha2: Option<u8>) -> Row {
    Row { snapshot: true, ..row(runtime, from, v1, v1alpha2) }
}

/// From `runtime-cri-revisions.tsv`: the cri-api schema each release line decodes, as the
/// Kubernetes minor it equals. Where a pin is a snapshot between two minors, the older minor
/// (CRI-O 1.23/1.24 lack the 1.23 fields; 1.32 uses a 1.31 module). Releases newer than the last
/// row of a runtime know at least what that row knows. Ordered by runtime, then release.
const TABLE: &[Row] = &[
    row("containerd", (1, 4, 0), None, Some(19)),
    row("containerd", (1, 5, 0), None, Some(20)),
    row("containerd", (1, 6, 0), Some(23), Some(23)),
    Row { unhonoured: &[AMBIENT, USERNS_1_6], ..row("containerd", (1, 6, 9), Some(25), Some(25)) },
    row("containerd", (1, 7, 0), Some(26), Some(25)),
    row("containerd", (1, 7, 1), Some(27), Some(25)),
    row("containerd", (2, 0, 0), Some(31), None),
    row("containerd", (2, 1, 0), Some(32), None),
    row("containerd", (2, 2, 0), Some(34), None),
    row("containerd", (2, 3, 0), Some(36), None),
    row("containerd", (2, 4, 0), Some(36), None),
    crio((1, 10, 0), None, Some(10)),
    crio((1, 11, 0), None, Some(11)),
    crio((1, 12, 0), None, Some(12)),
    crio((1, 13, 0), None, Some(13)),
    crio((1, 14, 0), None, Some(14)),
    crio((1, 15, 0), None, Some(15)),
    crio((1, 16, 0), None, Some(16)),
    crio((1, 17, 0), None, Some(17)),
    crio((1, 18, 0), None, Some(18)),
    crio((1, 19, 0), None, Some(19)),
    crio((1, 20, 0), None, Some(20)),
    crio((1, 21, 0), Some(21), Some(21)),
    crio((1, 22, 0), Some(22), Some(22)),
    // 1.22 plus the 1.23 pod sandbox stats RPCs.
    Row { unhonoured: crio_unhonoured(23), ..snapshot("cri-o", (1, 23, 0), Some(22), Some(22)) },
    crio((1, 25, 0), Some(25), Some(25)),
    // 1.26.0: a pre-1.26 snapshot without the metrics RPCs; 1.26.1+ the 1.26 schema.
    Row { unhonoured: crio_unhonoured(26), ..snapshot("cri-o", (1, 26, 0), Some(25), None) },
    crio((1, 26, 1), Some(26), None),
    crio((1, 27, 0), Some(27), None),
    crio((1, 28, 0), Some(28), None),
    crio((1, 29, 0), Some(29), None),
    crio((1, 30, 0), Some(30), None),
    crio((1, 31, 0), Some(31), None),
    crio((1, 33, 0), Some(33), None),
    crio((1, 34, 0), Some(34), None),
    crio((1, 35, 0), Some(35), None),
    crio((1, 36, 0), Some(36), None),
    // The release-1.37 branch pins cri-api v0.36.3: the 1.36 schema.
    crio((1, 37, 0), Some(36), None),
];

/// cri-dockerd's `runtime_name`: it answers "docker", and as `runtime_version` the Docker
/// Engine's version, never its own, so the table cannot place it by release.
pub const DOCKER: &str = "docker";

/// Read-only RPCs of each version, newest first, with the Kubernetes minor that added them: a
/// runtime whose CRI service has one decodes at least that revision, and one that implements it
/// was written for it.
pub fn telling_rpcs(version: CriVersion) -> &'static [(&'static str, u8)] {
    match version {
        CriVersion::V1 => &[("RuntimeConfig", 28), ("ListMetricDescriptors", 26), ("ListPodSandboxStats", 23)],
        CriVersion::V1alpha2 => &[("ListPodSandboxStats", 23)],
        CriVersion::V1alpha1 => &[],
    }
}

/// `v1.6.20`, `1.6.20~ds1`, `1.36.3` → (1, 6, 20); missing parts are 0.
pub fn parse_release(text: &str) -> Option<(u32, u32, u32)> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let numeric: String = text.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let mut parts = numeric.split('.').filter(|p| !p.is_empty()).map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    Some((major, parts.next().flatten().unwrap_or(0), parts.next().flatten().unwrap_or(0)))
}

/// What the table says of one runtime release speaking one version.
pub(super) struct Found {
    pub(super) minor: u8,
    pub(super) unhonoured: &'static [Unhonoured],
    /// A later row of the same runtime exists: the release is known, not just "at least".
    pub(super) exact: bool,
}

/// The table's revision for a runtime speaking `version`, and what it does not act on.
pub(super) fn lookup(name: &str, release: &str, version: CriVersion) -> Option<Found> {
    let release = parse_release(release)?;
    let at = TABLE.iter().rposition(|r| r.runtime == name && r.from <= release)?;
    let row = &TABLE[at];
    let minor = match version {
        CriVersion::V1 => row.v1,
        CriVersion::V1alpha2 => row.v1alpha2,
        CriVersion::V1alpha1 => None,
    }?;
    let exact = !row.snapshot && TABLE[at + 1..].iter().any(|r| r.runtime == name);
    Some(Found { minor, unhonoured: row.unhonoured, exact })
}
