//! What a create through a pod-scoped socket may get (issue 47): nothing Pod Security baseline
//! would refuse for its pod, judged as the runtime applies the request. Pure: the request in,
//! a refusal or what to add to it out; the host paths it names are judged on the host by the
//! forwarder, and its `sandbox_config` replaced by the sandbox's own there.

use super::pod::{length_delimited, ANNOTATIONS_ALLOWED, POD_UID_LABEL};
use crate::api::v1;
use crate::version::CriVersion;
use prost::Message;
use std::path::PathBuf;

/// What the kubelet puts in `readonly_paths` for every container but one with procMount
/// `Unmasked`, which Pod Security baseline forbids (`pkg/securitycontext/util.go`, 1.29–1.38).
pub const KUBELET_READONLY_PATHS: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// What the kubelet puts in `masked_paths` (1.37), before the `thermal_throttle` directories of
/// the node's CPUs, which it adds where they exist (`crate::node` finds them).
pub const KUBELET_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// What a pod-scoped socket lets its creates have (`endpoints[]` of policy `pod-scoped`).
#[derive(Clone, Copy, Debug)]
pub struct CreateRules<'a> {
    /// Where host paths (mounts, the log file, checkpoints) may be.
    pub host_paths: &'a [PathBuf],
    /// `Localhost` seccomp profiles allowed (`localhost_profiles.seccomp`), by `localhost_ref`.
    pub seccomp_profiles: &'a [String],
    /// `Localhost` AppArmor profiles allowed (`localhost_profiles.apparmor`).
    pub apparmor_profiles: &'a [String],
    /// `masked_paths` filled in where a create has none: the kubelet's, as on this node.
    pub masked_paths: &'a [String],
    /// The lowest `oom_score_adj` a create may ask for: the caller's own process's (what the
    /// kubelet gave the pod; lowering it needs `CAP_SYS_RESOURCE`). `None`: unknown, and any
    /// value below the runtime's default (0) is refused.
    pub oom_floor: Option<i64>,
}

/// A pod-scoped create as judged: what to add to it, and the host paths the runtime will open,
/// which are judged on the host before it is sent (`forward::host_paths`).
#[derive(Debug, Default)]
pub struct CreateJudged {
    /// Appended to the request (protobuf merges it in): the kubelet's `/proc` lists and
    /// `RuntimeDefault` seccomp, where the request has none.
    pub appended: Vec<u8>,
    /// Each mount's host path, and whether the container may write it.
    pub mounts: Vec<(String, bool)>,
    /// `config.log_path`, joined with the sandbox's log directory once that is known.
    pub log_path: String,
}

/// Whether a `CreateContainer` request gets nothing Pod Security baseline would refuse for its
/// pod, as the runtime applies the request: not privileged, no host namespace, no added
/// capability, no device, no SELinux label, no annotation a runtime acts on, no pod label
/// naming another pod, no unconfined or unlisted seccomp or AppArmor profile, `/proc` masked as
/// the kubelet masks it, no `oom_score_adj` below the caller's. Absent fields whose runtime
/// default is unsafe are filled (`CreateJudged::appended`): containerd applies exactly the
/// `/proc` lists it is sent (none when none), and runs a container with no seccomp profile
/// unconfined, as cri-dockerd does. v1alpha2 encodes these fields as v1 does; v1alpha1 is not
/// taken.
pub fn judge_create(
    version: CriVersion,
    request: &[u8],
    pod_uid: &str,
    rules: &CreateRules,
) -> Result<CreateJudged, String> {
    if version == CriVersion::V1alpha1 {
        return Err("a pod-scoped socket takes CreateContainer in v1alpha2 or v1".into());
    }
    let create =
        v1::CreateContainerRequest::decode(request).map_err(|e| format!("the request does not decode: {e}"))?;
    let config = create.config.unwrap_or_default();
    if config.labels.get(POD_UID_LABEL).is_some_and(|uid| uid != pod_uid) {
        return Err(format!("labels.{POD_UID_LABEL} names another pod"));
    }
    if let Some(key) = config.annotations.keys().find(|k| !ANNOTATIONS_ALLOWED.iter().any(|p| k.starts_with(p))) {
        return Err(format!("annotations.{key}: a runtime may act on it"));
    }
    if !config.devices.is_empty() || !config.cdi_devices.is_empty() {
        return Err("devices: a pod-scoped create adds no device".into());
    }
    let linux = config.linux.unwrap_or_default();
    let oom_score_adj = linux.resources.as_ref().map_or(0, |r| r.oom_score_adj);
    if oom_score_adj < rules.oom_floor.unwrap_or(0) {
        return Err(format!(
            "linux.resources.oom_score_adj {oom_score_adj} is below the caller's own ({}): the kubelet gave the pod no \
             lower",
            rules.oom_floor.map_or("unknown, so 0".to_string(), |f| f.to_string())
        ));
    }
    let context = linux.security_context.unwrap_or_default();
    if context.privileged {
        return Err("security_context.privileged".into());
    }
    let capabilities = context.capabilities.clone().unwrap_or_default();
    if !capabilities.add_capabilities.is_empty() || !capabilities.add_ambient_capabilities.is_empty() {
        return Err("security_context.capabilities: a pod-scoped create adds no capability".into());
    }
    if context.selinux_options.is_some() {
        return Err("security_context.selinux_options: a pod-scoped create sets no SELinux label".into());
    }
    let namespaces = context.namespace_options.clone().unwrap_or_default();
    use v1::NamespaceMode::{Node, Target};
    for (name, mode) in [("network", namespaces.network), ("pid", namespaces.pid), ("ipc", namespaces.ipc)] {
        if mode == Node as i32 || mode == Target as i32 {
            return Err(format!("security_context.namespace_options.{name}: the node's or another container's"));
        }
    }
    #[allow(deprecated)]
    let (seccomp_path, apparmor_path) = (&context.seccomp_profile_path, &context.apparmor_profile);
    profile_allowed("seccomp", context.seccomp.as_ref(), seccomp_path, rules.seccomp_profiles)?;
    profile_allowed("apparmor", context.apparmor.as_ref(), apparmor_path, rules.apparmor_profiles)?;
    lists_kept("masked_paths", &context.masked_paths, KUBELET_MASKED_PATHS)?;
    lists_kept("readonly_paths", &context.readonly_paths, KUBELET_READONLY_PATHS)?;

    let mut fill: Vec<(&str, Vec<u8>)> = Vec::new();
    if context.masked_paths.is_empty() {
        fill.extend(rules.masked_paths.iter().map(|p| ("masked_paths", p.as_bytes().to_vec())));
    }
    if context.readonly_paths.is_empty() {
        fill.extend(KUBELET_READONLY_PATHS.iter().map(|p| ("readonly_paths", p.as_bytes().to_vec())));
    }
    if context.seccomp.is_none() && seccomp_path.is_empty() {
        // `RuntimeDefault` is the enum's 0: the profile is present and empty.
        fill.push(("seccomp", Vec::new()));
        fill.push(("seccomp_profile_path", b"runtime/default".to_vec()));
    }
    let appended = security_context_bytes(version, &fill)?;
    let mounts = config.mounts.iter().map(|m| (m.host_path.clone(), !m.readonly)).collect();
    Ok(CreateJudged { appended, mounts, log_path: config.log_path })
}

/// A `seccomp` or `apparmor` profile (the field, and its deprecated string form): unconfined is
/// refused, `Localhost` only for a profile the socket lists.
fn profile_allowed(
    kind: &str,
    profile: Option<&v1::SecurityProfile>,
    string: &str,
    listed: &[String],
) -> Result<(), String> {
    use v1::security_profile::ProfileType;
    let localhost = |name: &str| match listed.iter().any(|l| l == name) {
        true => Ok(()),
        false => Err(format!(
            "security_context.{kind}: Localhost profile {name:?} is not in the socket's localhost_profiles.{kind} \
             {listed:?}"
        )),
    };
    if let Some(profile) = profile {
        match ProfileType::try_from(profile.profile_type) {
            Ok(ProfileType::RuntimeDefault) => {}
            Ok(ProfileType::Localhost) => localhost(&profile.localhost_ref)?,
            Ok(ProfileType::Unconfined) | Err(_) => {
                return Err(format!("security_context.{kind}: a pod-scoped create runs confined (not Unconfined)"))
            }
        }
    }
    match string {
        "" | "runtime/default" | "docker/default" => Ok(()),
        "unconfined" => Err(format!("security_context.{kind}: a pod-scoped create runs confined (not unconfined)")),
        other => match other.strip_prefix("localhost/") {
            Some(name) => localhost(name),
            None => Err(format!("security_context.{kind}: profile {other:?} is not one cri-bridge can judge")),
        },
    }
}

/// A `/proc` list sent must hold every entry the kubelet sends (an empty one is filled).
fn lists_kept(field: &str, sent: &[String], kubelet: &[&str]) -> Result<(), String> {
    match kubelet.iter().find(|p| !sent.is_empty() && !sent.iter().any(|s| s == *p)) {
        Some(missing) => Err(format!(
            "security_context.{field} lacks {missing}, which the kubelet always sends but for procMount Unmasked (Pod \
             Security baseline forbids it)"
        )),
        None => Ok(()),
    }
}

/// `CreateContainerRequest { config { linux { security_context { <fields> } } } }`, encoded with
/// `version`'s field numbers, to be appended to a request (protobuf merges it in: repeated
/// fields are extended, a message field merged). A field the version lacks is left out.
fn security_context_bytes(version: CriVersion, fields: &[(&str, Vec<u8>)]) -> Result<Vec<u8>, String> {
    if fields.is_empty() {
        return Ok(Vec::new());
    }
    let schema = version.schema();
    let number = |qualified: &str| {
        schema
            .field_by_name(qualified)
            .map(|(_, f)| f.number)
            .ok_or_else(|| format!("CRI {version} has no {qualified}"))
    };
    let mut context = Vec::new();
    for (name, value) in fields {
        if let Ok(n) = number(&format!("LinuxContainerSecurityContext.{name}")) {
            context.extend(length_delimited(&[(n, value)]));
        }
    }
    let linux = length_delimited(&[(number("LinuxContainerConfig.security_context")?, &context)]);
    let config = length_delimited(&[(number("ContainerConfig.linux")?, &linux)]);
    Ok(length_delimited(&[(number("CreateContainerRequest.config")?, &config)]))
}

/// Go's `filepath.Join(dir, file)`, as containerd and cri-dockerd join a log directory and a
/// log path: the parts joined by `/` (an absolute second part does not replace the first) and
/// cleaned lexically (`.` and `..` resolved, `..` at the root staying there).
pub fn go_join(dir: &str, file: &str) -> String {
    let joined = match (dir.is_empty(), file.is_empty()) {
        (true, true) => return String::new(),
        (true, false) => file.to_string(),
        (false, true) => dir.to_string(),
        (false, false) => format!("{dir}/{file}"),
    };
    go_clean(&joined)
}

/// Go's `filepath.Clean`.
fn go_clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if rooted => {}
                _ => parts.push(".."),
            },
            part => parts.push(part),
        }
    }
    match (rooted, parts.is_empty()) {
        (true, _) => format!("/{}", parts.join("/")),
        (false, true) => ".".to_string(),
        (false, false) => parts.join("/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::pod::under_host_paths;
    use crate::version::CriVersion::V1;

    fn rules(roots: &[PathBuf]) -> CreateRules<'_> {
        static MASKED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let masked = MASKED.get_or_init(|| KUBELET_MASKED_PATHS.iter().map(|p| p.to_string()).collect());
        CreateRules {
            host_paths: roots,
            seccomp_profiles: &[],
            apparmor_profiles: &[],
            masked_paths: masked,
            oom_floor: Some(-997),
        }
    }

    #[test]
    fn a_create_with_any_privilege_is_refused() {
        let roots = [PathBuf::from("/var/log/pods")];
        let create = |edit: &dyn Fn(&mut v1::ContainerConfig)| {
            let mut config = v1::ContainerConfig::default();
            edit(&mut config);
            let request = v1::CreateContainerRequest { config: Some(config), ..Default::default() };
            judge_create(V1, &request.encode_to_vec(), "mine", &rules(&roots))
        };
        let context = |edit: &dyn Fn(&mut v1::LinuxContainerSecurityContext)| {
            create(&|c: &mut v1::ContainerConfig| {
                let mut context = v1::LinuxContainerSecurityContext::default();
                edit(&mut context);
                c.linux = Some(v1::LinuxContainerConfig { security_context: Some(context), ..Default::default() });
            })
        };
        assert!(create(&|_| {}).is_ok());
        assert!(context(&|c| c.privileged = true).is_err());
        assert!(context(&|c| c.capabilities =
            Some(v1::Capability { add_capabilities: vec!["SYS_ADMIN".into()], ..Default::default() }))
        .is_err());
        assert!(context(&|c| c.namespace_options = Some(v1::NamespaceOption { pid: 2, ..Default::default() })).is_err());
        assert!(create(&|c| c.devices = vec![v1::Device::default()]).is_err());
        assert!(create(&|c| c.labels = [(POD_UID_LABEL.to_string(), "other".to_string())].into()).is_err());
        let annotation = |key: &str| [(key.to_string(), "x".to_string())].into();
        assert!(create(&|c| c.annotations = annotation("io.kubernetes.container.hash")).is_ok());
        assert!(create(&|c| c.annotations = annotation("io.kubernetes.cri-o.Devices")).is_err());
        assert!(create(&|c| c.annotations = annotation("run.oci.keep_original_groups")).is_err());
        let profile = |profile_type, name: &str| Some(v1::SecurityProfile { profile_type, localhost_ref: name.into() });
        assert!(context(&|c| c.seccomp = profile(1, "")).is_err(), "Unconfined");
        assert!(context(&|c| c.seccomp = profile(2, "/var/lib/kubelet/seccomp/open.json")).is_err(), "unlisted");
        assert!(context(&|c| c.seccomp = profile(0, "")).is_ok(), "RuntimeDefault");
        #[allow(deprecated)]
        {
            assert!(context(&|c| c.seccomp_profile_path = "unconfined".into()).is_err());
            assert!(context(&|c| c.seccomp_profile_path = "localhost/x.json".into()).is_err());
            assert!(context(&|c| c.apparmor_profile = "unconfined".into()).is_err());
        }
        assert!(context(&|c| c.apparmor = profile(1, "")).is_err());
        assert!(context(&|c| c.apparmor = profile(2, "unconfined-by-flags")).is_err());
        assert!(context(
            &|c| c.selinux_options = Some(v1::SeLinuxOption { r#type: "spc_t".into(), ..Default::default() })
        )
        .is_err());
        // /proc: a list that lacks what the kubelet sends is refused; none is filled.
        assert!(context(&|c| c.masked_paths = vec!["/proc/kcore".into()]).is_err());
        assert!(context(&|c| c.readonly_paths = vec!["/proc/bus".into()]).is_err());
        // oom_score_adj: no lower than the caller's.
        let oom = |value| {
            create(&|c: &mut v1::ContainerConfig| {
                let resources = v1::LinuxContainerResources { oom_score_adj: value, ..Default::default() };
                c.linux = Some(v1::LinuxContainerConfig { resources: Some(resources), ..Default::default() });
            })
        };
        assert!(oom(-1000).is_err());
        assert!(oom(-997).is_ok());
    }

    #[test]
    fn absent_proc_lists_and_seccomp_are_filled_as_the_kubelet_sends_them() {
        let roots = [PathBuf::from("/var/log/pods")];
        let request = v1::CreateContainerRequest {
            config: Some(v1::ContainerConfig { log_path: "app/0.log".into(), ..Default::default() }),
            ..Default::default()
        };
        let mut bytes = request.encode_to_vec();
        let judged = judge_create(V1, &bytes, "mine", &rules(&roots)).unwrap();
        bytes.extend(&judged.appended);
        let sent = v1::CreateContainerRequest::decode(&bytes[..]).unwrap().config.unwrap();
        assert_eq!(sent.log_path, "app/0.log", "the request is kept");
        let context = sent.linux.unwrap().security_context.unwrap();
        assert_eq!(context.masked_paths, KUBELET_MASKED_PATHS.iter().map(|p| p.to_string()).collect::<Vec<_>>());
        assert_eq!(context.readonly_paths, KUBELET_READONLY_PATHS.iter().map(|p| p.to_string()).collect::<Vec<_>>());
        assert_eq!(context.seccomp, Some(v1::SecurityProfile::default()), "RuntimeDefault");
        // A request with the kubelet's lists and a profile gets nothing added.
        let context = v1::LinuxContainerSecurityContext {
            masked_paths: KUBELET_MASKED_PATHS.iter().map(|p| p.to_string()).collect(),
            readonly_paths: KUBELET_READONLY_PATHS.iter().map(|p| p.to_string()).collect(),
            seccomp: Some(v1::SecurityProfile::default()),
            ..Default::default()
        };
        let linux = v1::LinuxContainerConfig { security_context: Some(context), ..Default::default() };
        let config = v1::ContainerConfig { linux: Some(linux), ..Default::default() };
        let request = v1::CreateContainerRequest { config: Some(config), ..Default::default() };
        assert!(judge_create(V1, &request.encode_to_vec(), "mine", &rules(&roots)).unwrap().appended.is_empty());
    }

    #[test]
    fn log_paths_join_as_go_joins_them() {
        assert_eq!(go_join("/var/log/pods/ns_p_u", "app/0.log"), "/var/log/pods/ns_p_u/app/0.log");
        // An absolute second part does not replace the first.
        assert_eq!(go_join("/var/log/pods/ns_p_u", "/etc/cron.d/x"), "/var/log/pods/ns_p_u/etc/cron.d/x");
        assert_eq!(go_join("/var/log/pods/ns_p_u", "../../../etc/x"), "/var/etc/x");
        assert_eq!(go_join("/a", "../../../.."), "/");
        // A relative directory stays relative: containerd would write below its working directory.
        assert_eq!(go_join("logs", "/x.log"), "logs/x.log");
        assert_eq!(go_join("", "x.log"), "x.log");
        assert!(!under_host_paths(&go_join("logs", "/var/log/pods/x"), &[PathBuf::from("/var/log/pods")]));
    }
}
