//! `cri-bridge probe SOCKET`: which CRI versions a runtime serves, and which kubelets can use it
//! directly or through cri-bridge.

use crate::backend::{Backend, Pins, Role};
use crate::control::{BridgeStatus, STATUS_PATH};
use crate::convert::classes::{Class, Classified, FIELDS};
use crate::error::Error;
use crate::revision::{Block, RuntimeProfile};
use crate::version::CriVersion::{self, V1alpha1, V1alpha2, V1};
use std::fmt;
use std::path::Path;
use tonic::Code;

/// Which CRI versions each kubelet release line speaks.
pub const KUBELETS: &[(&str, &[CriVersion])] = &[
    ("1.9 and older", &[V1alpha1]),
    ("1.10 to 1.22", &[V1alpha2]),
    ("1.23 to 1.25", &[V1, V1alpha2]),
    ("1.26 and newer", &[V1]),
];

#[derive(Debug)]
pub struct ProbeReport {
    pub endpoint: String,
    /// Versions that answered `Version`, newest first.
    pub served: Vec<CriVersion>,
    pub runtime_name: String,
    pub runtime_version: String,
    /// What the runtime understands in each served version, newest first.
    pub profiles: Vec<RuntimeProfile>,
    /// What v1 `RuntimeConfig` answers (`None` when v1 is not served): the cgroup driver, or
    /// the status's code and message.
    pub runtime_config: Option<Result<crate::runtime_config::CgroupDriver, String>>,
    /// What cri-bridge in front of the runtime would answer where it does not: the driver
    /// named in its `Status` info, or why none is.
    pub emulated_driver: crate::runtime_config::Reading,
}

/// What answers at a socket: a runtime, or cri-bridge and the runtime behind it.
#[derive(Debug)]
pub enum Probed {
    Runtime(ProbeReport),
    Bridge {
        socket: String,
        status: BridgeStatus,
        /// The probe made through the bridge, or why it failed (the runtime is down).
        through: Result<ProbeReport, String>,
    },
}

impl Probed {
    /// The exit code for scripts: 0 when everything answers, 2 when cri-bridge answers but a
    /// runtime behind it does not. (1 is for a socket that does not answer at all.)
    pub fn exit_code(&self) -> u8 {
        match self {
            Probed::Runtime(_) => 0,
            Probed::Bridge { status, through, .. } => {
                if through.is_ok() && status.backends.iter().all(|b| b.up) {
                    0
                } else {
                    2
                }
            }
        }
    }
}

/// How long cri-bridge's own questions may take.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the cri-bridge at `socket` one of its own questions (`STATUS_PATH`, `CALLERS_PATH`).
/// `Ok(None)`: what answers is not cri-bridge (it does not know the question).
pub async fn ask_bridge<T: serde::de::DeserializeOwned>(socket: &Path, path: &str) -> Result<Option<T>, Error> {
    let endpoint = format!("unix://{}", socket.display());
    let upstream = crate::relay::upstream::Upstream::new(socket.to_path_buf(), crate::http2::MAX_HEADER_LIST_SIZE);
    match upstream.unary(path, &[], ASK_TIMEOUT, crate::config::DEFAULT_MAX_MESSAGE_SIZE).await {
        Ok(json) => serde_json::from_slice(&json).map(Some).map_err(|e| Error::Unreachable {
            endpoint,
            detail: format!("{path}: the answer is not what cri-bridge sends: {e}"),
        }),
        Err(status) if status.code() == Code::Unimplemented => Ok(None),
        Err(status) => Err(Error::Unreachable { endpoint, detail: status.message().to_string() }),
    }
}

/// Probes `socket`: cri-bridge's own status when cri-bridge answers there, and in any case
/// `Version` in every CRI version.
pub async fn probe(socket: &Path) -> Result<Probed, Error> {
    match ask_bridge::<BridgeStatus>(socket, STATUS_PATH).await? {
        None => probe_runtime(socket).await.map(Probed::Runtime),
        Some(first) => {
            let through = probe_runtime(socket).await.map_err(|e| e.to_string());
            // Asked again: the calls just made through it have reached the runtime (or failed
            // to), so the bridge's view of it is as fresh as the report beside it.
            let status = ask_bridge::<BridgeStatus>(socket, STATUS_PATH).await?.unwrap_or(first);
            Ok(Probed::Bridge { socket: format!("unix://{}", socket.display()), status, through })
        }
    }
}

/// Asks the runtime at `socket` for `Version` in every CRI version.
pub async fn probe_runtime(socket: &Path) -> Result<ProbeReport, Error> {
    let endpoint = format!("unix://{}", socket.display());
    let backend = Backend::new(
        endpoint.clone(),
        Role::Runtime,
        socket.to_path_buf(),
        Pins::default(),
        crate::config::DEFAULT_MAX_MESSAGE_SIZE,
    );
    let mut report = ProbeReport {
        endpoint,
        served: Vec::new(),
        runtime_name: String::new(),
        runtime_version: String::new(),
        profiles: Vec::new(),
        runtime_config: None,
        emulated_driver: Err("not read".into()),
    };
    for version in CriVersion::NEWEST_FIRST {
        match backend.call_version(version).await {
            Ok(answer) => {
                report.served.push(version);
                report.profiles.push(backend.judge(version, Some(&answer), None).await);
                report.runtime_name = answer.runtime_name;
                report.runtime_version = answer.runtime_version;
            }
            Err(status) if status.code() == Code::Unimplemented => {}
            Err(status) => {
                return Err(Error::Unreachable { endpoint: report.endpoint, detail: status.message().to_string() })
            }
        }
    }
    if report.served.is_empty() {
        return Err(Error::NoCri { endpoint: report.endpoint });
    }
    if report.served.contains(&V1) {
        report.runtime_config = Some(backend.runtime_config().await);
    }
    let newest = &report.profiles[0];
    report.emulated_driver = backend.cgroup_driver(newest.version, newest.shows_runtime_options()).await;
    Ok(report)
}

/// The security and behaviour fields of its version the runtime would not act on, and why.
fn refused_fields(profile: &RuntimeProfile) -> Vec<(&'static Classified, Block)> {
    let schema = profile.version.schema();
    let blocked = profile.blocked(schema);
    FIELDS
        .iter()
        .filter(|c| c.class != Class::Advisory)
        .filter_map(|c| Some((c, blocked[schema.field_by_name(c.field)?.1.id]?)))
        .collect()
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "runtime:  {} {} at {}", self.runtime_name, self.runtime_version, self.endpoint)?;
        for version in CriVersion::NEWEST_FIRST {
            let served = if self.served.contains(&version) { "served" } else { "not served" };
            writeln!(f, "CRI {version:<9} {served}")?;
        }
        for profile in &self.profiles {
            writeln!(f, "CRI {}: {profile}", profile.version)?;
            match &profile.features {
                Some(features) => writeln!(
                    f,
                    "  features reported: user namespaces {}, recursive read-only mounts {}, supplemental groups policy {}",
                    yes(features.user_namespaces),
                    yes(features.recursive_read_only_mounts),
                    yes(features.supplemental_groups_policy)
                )?,
                None => writeln!(f, "  features reported: none (the revision predates the report)")?,
            }
            let refused: Vec<String> = refused_fields(profile)
                .into_iter()
                .map(|(c, block)| {
                    let also = match c.field.rsplit('.').next() {
                        Some("seccomp" | "apparmor") if c.field != "LinuxSandboxSecurityContext.apparmor" => {
                            " (unless the deprecated string says the same: the runtime reads that)"
                        }
                        _ => "",
                    };
                    format!("    {} ({}): {block}{also}", c.field, c.class)
                })
                .collect();
            if refused.is_empty() {
                writeln!(f, "  refused when set: nothing (it acts on every classified field)")?;
            } else {
                writeln!(f, "  refused when set (the runtime would not act on them):")?;
                for line in refused {
                    writeln!(f, "{line}")?;
                }
            }
        }
        match &self.runtime_config {
            Some(Ok(driver)) => writeln!(f, "RuntimeConfig: cgroup driver {driver}")?,
            Some(Err(error)) => writeln!(f, "RuntimeConfig: {error}")?,
            None => writeln!(f, "RuntimeConfig: not served (no CRI v1)")?,
        }
        let native = matches!(self.runtime_config, Some(Ok(_)));
        if !native {
            match &self.emulated_driver {
                Ok(driver) => writeln!(f, "  cri-bridge in front answers it: cgroup driver {driver}")?,
                Err(why) => writeln!(
                    f,
                    "  cri-bridge in front answers it UNIMPLEMENTED unless emulate.runtime_config.cgroup_driver \
                     is set: the driver is unknown ({why})"
                )?,
            }
        }
        writeln!(f, "kubelet compatibility:")?;
        for (kubelets, speaks) in KUBELETS {
            let direct: Vec<_> = speaks.iter().filter(|v| self.served.contains(v)).map(|v| v.as_str()).collect();
            if direct.is_empty() {
                let wanted: Vec<_> = speaks.iter().map(|v| v.as_str()).collect();
                writeln!(
                    f,
                    "  kubelet {kubelets:<15} through cri-bridge (speaks {}, the runtime does not)",
                    wanted.join(" or ")
                )?;
            } else {
                let ignores =
                    self.profiles.iter().any(|p| speaks.contains(&p.version) && !refused_fields(p).is_empty());
                let note = if ignores { "; it ignores the fields above, which cri-bridge refuses instead" } else { "" };
                writeln!(f, "  kubelet {kubelets:<15} directly (CRI {}{note})", direct.join(", "))?;
            }
        }
        let (directly, through) = (native, native || self.emulated_driver.is_ok());
        let how = match (directly, through) {
            (true, _) => "directly",
            (false, true) => "through cri-bridge (which answers RuntimeConfig for it)",
            (false, false) => "not without emulate.runtime_config.cgroup_driver in cri-bridge (no RuntimeConfig)",
        };
        writeln!(f, "  kubelet {:<15} {how}", "requiring RuntimeConfig (after 1.38.0-beta.0)")?;
        Ok(())
    }
}

fn when(seconds: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
    let ago = std::time::SystemTime::now().duration_since(at).map(|d| d.as_secs()).unwrap_or(0);
    format!("{} ({})", humantime::format_rfc3339_seconds(at), crate::callers::ago_text(ago))
}

impl fmt::Display for Probed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (socket, status, through) = match self {
            Probed::Runtime(report) => return report.fmt(f),
            Probed::Bridge { socket, status, through } => (socket, status, through),
        };
        writeln!(
            f,
            "bridge:   cri-bridge {} (pid {}) at {socket}, serving CRI {} since {}",
            status.bridge_version,
            status.pid,
            status.versions.join(", "),
            when(status.serving_since)
        )?;
        for backend in &status.backends {
            let state = if backend.up { "up" } else { "DOWN" };
            let named = backend.name.as_ref().map_or(String::new(), |name| format!("backend {name}, "));
            writeln!(
                f,
                "{:<9} {named}{} {state} since {}",
                format!("{}:", backend.role),
                backend.endpoint,
                when(backend.since)
            )?;
            if let Some(version) = &backend.version {
                let pinned = if backend.pinned.is_some() { " (pinned)" } else { "" };
                writeln!(
                    f,
                    "  speaks CRI {version}{pinned} at the Kubernetes {} revision: {} {}",
                    backend.revision.as_deref().unwrap_or("?"),
                    backend.runtime_name.as_deref().unwrap_or("(name not reported)"),
                    backend.runtime_version.as_deref().unwrap_or("")
                )?;
            }
            if let Some(runtime_config) = &backend.runtime_config {
                writeln!(f, "  RuntimeConfig: {runtime_config}")?;
            }
        }
        match through {
            Ok(report) => {
                writeln!(f, "through cri-bridge:")?;
                report.fmt(f)
            }
            Err(error) => writeln!(f, "through cri-bridge: {error}"),
        }
    }
}
