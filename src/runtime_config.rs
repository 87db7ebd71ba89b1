//! `RuntimeConfig` for a runtime that cannot answer it (DESIGN principle 12).
//!
//! The kubelet asks the runtime for its cgroup driver with `RuntimeService/RuntimeConfig` (CRI
//! v1, Kubernetes 1.28). Kubelets 1.34–1.37 fall back to their own `cgroupDriver` on
//! `UNIMPLEMENTED` and exit on any other error (measured: 1.34.4, 1.37.2 and 1.38.0-beta.0 all
//! still fall back; the kubelet's `CRILosingSupport` metric names 1.38.0, so a later release is
//! expected to refuse to start without an
//! answer. containerd 1.7 and older (and CRI-O before 1.28) lack the RPC, yet their cgroup
//! driver is known: it is in their configuration. This module says what that driver is, from
//! either the operator (`emulate.runtime_config.cgroup_driver`) or the runtime's own `Status`
//! verbose info, and encodes the answer. It never guesses: when neither says, the caller gets
//! `UNIMPLEMENTED`, as from the runtime itself.
//!
//! What is read from `Status` (`info["config"]`, the CRI plugin's config as `crictl info`
//! prints it), in the order containerd 2.x itself uses for its native answer: the default
//! runtime handler first, then the others by name; the first handler whose shim is runc
//! decides:
//! - `io.containerd.runc.v2` / `io.containerd.runc.v1`: its `options.SystemdCgroup`
//!   (absent: false, runc's default). containerd decodes the options table into runc's options
//!   with go-toml, which matches a key to a field by name case-insensitively: `systemdCgroup`,
//!   `systemdcgroup` and `SystemdCgroup` all set it. So does cri-bridge; options that give the
//!   key twice, differently cased, are ambiguous (which one containerd takes is not said) and
//!   leave the driver unknown;
//! - `io.containerd.runtime.v1.linux` (the legacy v1 shim of containerd ≤ 1.x): the plugin's
//!   top-level `systemdCgroup`.
//!
//! A handler of another shim (Kata, gVisor, …) does not decide. containerd 2.x then falls back
//! to "is systemd PID 1"; cri-bridge does not guess that for an older runtime, so a config with
//! no runc handler gets `UNIMPLEMENTED` (set the config key).

use crate::api::v1;
use prost::Message;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;

/// The Kubernetes minor whose CRI first has `RuntimeConfig`.
pub const SINCE: u8 = 28;

/// The config key that states the driver.
pub const CONFIG_KEY: &str = "emulate.runtime_config.cgroup_driver";

/// A cgroup driver, as `RuntimeConfig` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupDriver {
    Systemd,
    Cgroupfs,
}

impl CgroupDriver {
    pub fn to_v1(self) -> v1::CgroupDriver {
        match self {
            CgroupDriver::Systemd => v1::CgroupDriver::Systemd,
            CgroupDriver::Cgroupfs => v1::CgroupDriver::Cgroupfs,
        }
    }

    fn from_systemd_cgroup(systemd: bool) -> CgroupDriver {
        if systemd {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    }
}

impl std::str::FromStr for CgroupDriver {
    type Err = String;
    fn from_str(text: &str) -> Result<CgroupDriver, String> {
        match text {
            "systemd" => Ok(CgroupDriver::Systemd),
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            other => Err(format!("{other:?} is not systemd or cgroupfs")),
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupDriver::Systemd => "systemd",
            CgroupDriver::Cgroupfs => "cgroupfs",
        })
    }
}

/// Where a known driver came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `emulate.runtime_config.cgroup_driver`.
    Config,
    /// The runtime's `Status` info: a handler's runc options.
    RuncOptions { handler: String, runtime_type: String, systemd_cgroup: bool },
    /// The runtime's `Status` info: the legacy v1 shim's plugin-wide `systemdCgroup`.
    LegacyShim { handler: String, systemd_cgroup: bool },
}

/// A driver cri-bridge may answer `RuntimeConfig` with, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownDriver {
    pub driver: CgroupDriver,
    pub source: Source,
}

impl fmt::Display for KnownDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.driver)?;
        match &self.source {
            Source::Config => write!(f, "from {CONFIG_KEY}")?,
            Source::RuncOptions { handler, runtime_type, systemd_cgroup } => write!(
                f,
                "from the runtime's Status info: handler {handler:?}, {runtime_type}, options.SystemdCgroup = {systemd_cgroup}"
            )?,
            Source::LegacyShim { handler, systemd_cgroup } => write!(
                f,
                "from the runtime's Status info: handler {handler:?}, io.containerd.runtime.v1.linux, systemdCgroup = {systemd_cgroup}"
            )?,
        }
        f.write_str(")")
    }
}

/// What cri-bridge knows of the runtime's cgroup driver: a driver, or why not.
pub type Reading = Result<KnownDriver, String>;

/// Reads the driver from a `StatusResponse.info` (asked with `verbose: true`).
/// `empty_options_readable`: whether an empty `options` object means "no options set" (containerd
/// 1.5 and later) rather than "not shown" (containerd 1.4 prints every runc options table as
/// `{}`, whatever it holds).
pub fn from_status_info(info: &HashMap<String, String>, empty_options_readable: bool) -> Reading {
    let text = info.get("config").ok_or("its Status info has no \"config\" (not containerd's CRI plugin?)")?;
    let config: Value =
        serde_json::from_str(text).map_err(|e| format!("its Status info \"config\" is not JSON: {e}"))?;
    let containerd = config.get("containerd").ok_or("its Status info \"config\" names no containerd runtimes")?;
    let runtimes = containerd
        .get("runtimes")
        .and_then(Value::as_object)
        .ok_or("its Status info \"config\" has no containerd.runtimes")?;
    let default = containerd.get("defaultRuntimeName").and_then(Value::as_str).unwrap_or_default();
    let mut names: Vec<&String> = runtimes.keys().collect();
    names.sort_by_key(|name| (name.as_str() != default, name.as_str()));
    for name in names {
        let runtime = &runtimes[name.as_str()];
        let runtime_type = runtime.get("runtimeType").and_then(Value::as_str).unwrap_or_default();
        match runtime_type {
            "io.containerd.runc.v2" | "io.containerd.runc.v1" => {
                let options = runtime.get("options").unwrap_or(&Value::Null);
                // Read before whether the options are shown: a key given is a key set.
                let systemd_cgroup = systemd_cgroup_option(name, options)?;
                let shown = match options {
                    Value::Null => true,
                    Value::Object(map) => !map.is_empty() || empty_options_readable,
                    _ => false,
                };
                if !shown {
                    return Err(format!(
                        "handler {name:?} ({runtime_type}): the runtime does not show its options ({options}) \
                         (containerd 1.4 never does)"
                    ));
                }
                return Ok(KnownDriver {
                    driver: CgroupDriver::from_systemd_cgroup(systemd_cgroup),
                    source: Source::RuncOptions {
                        handler: name.clone(),
                        runtime_type: runtime_type.to_string(),
                        systemd_cgroup,
                    },
                });
            }
            "io.containerd.runtime.v1.linux" => {
                let systemd_cgroup = match config.get("systemdCgroup") {
                    Some(Value::Bool(b)) => *b,
                    _ => return Err(format!("handler {name:?} is the v1 shim, and \"systemdCgroup\" is not given")),
                };
                return Ok(KnownDriver {
                    driver: CgroupDriver::from_systemd_cgroup(systemd_cgroup),
                    source: Source::LegacyShim { handler: name.clone(), systemd_cgroup },
                });
            }
            _ => continue,
        }
    }
    Err("no runtime handler in its config is runc, whose options name the driver".to_string())
}

/// runc's `SystemdCgroup` in a handler's options as containerd reads it: the key in any case,
/// absent (or null) false; given twice in different cases, or not a boolean, unknown.
fn systemd_cgroup_option(handler: &str, options: &Value) -> Result<bool, String> {
    let Value::Object(options) = options else { return Ok(false) };
    let mut given = options.iter().filter(|(key, _)| key.eq_ignore_ascii_case("SystemdCgroup"));
    let Some((key, value)) = given.next() else { return Ok(false) };
    if let Some((again, _)) = given.next() {
        return Err(format!(
            "handler {handler:?}: its options give {key:?} and {again:?}, which containerd reads as one key \
             (case-insensitively); which it takes is not said"
        ));
    }
    match value {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        other => Err(format!("handler {handler:?}: options.{key} is {other}, not a boolean")),
    }
}

/// The driver to answer with when `emulate.runtime_config.cgroup_driver` is set: the config
/// key's, unless the runtime's own `Status` info names the other driver; then neither is
/// trusted (a config copied from another node, or a runtime reconfigured): unknown, naming both,
/// so that `RuntimeConfig` is `UNIMPLEMENTED` as from the runtime itself.
pub fn pinned(pin: CgroupDriver, read: Reading) -> Reading {
    match read {
        Ok(found) if found.driver != pin => Err(format!(
            "{CONFIG_KEY} says {pin}, but the runtime's Status info says {found}: correct the config key, or \
             remove it"
        )),
        _ => Ok(KnownDriver { driver: pin, source: Source::Config }),
    }
}

/// The encoded `RuntimeConfigResponse` naming `driver`.
pub fn answer(driver: CgroupDriver) -> Vec<u8> {
    let linux = v1::LinuxRuntimeConfiguration { cgroup_driver: driver.to_v1() as i32 };
    v1::RuntimeConfigResponse { linux: Some(linux) }.encode_to_vec()
}

/// Who answers `RuntimeConfig` where the runtime lacks it, as the log and `probe` say it.
pub fn who_answers(reading: &Reading) -> String {
    match reading {
        Ok(driver) => format!("answered by cri-bridge where the runtime lacks it: {driver}"),
        Err(why) => format!("UNIMPLEMENTED where the runtime lacks it: the cgroup driver is unknown ({why})"),
    }
}

impl From<v1::CgroupDriver> for CgroupDriver {
    fn from(driver: v1::CgroupDriver) -> CgroupDriver {
        match driver {
            v1::CgroupDriver::Systemd => CgroupDriver::Systemd,
            v1::CgroupDriver::Cgroupfs => CgroupDriver::Cgroupfs,
        }
    }
}

/// Which kubelets can start on a runtime, given whether `RuntimeConfig` is answered (by the
/// runtime or by cri-bridge).
pub fn kubelets(answered: bool) -> &'static str {
    if answered {
        "kubelets 1.28+ take the cgroup driver from it (including those expected to require it)"
    } else {
        "kubelets 1.34 to 1.38.0-beta.0 (measured) fall back to their own cgroupDriver; a kubelet that requires \
         RuntimeConfig (announced for a release after 1.38.0-beta.0) will not start \
         (set emulate.runtime_config.cgroup_driver to the runtime's driver)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(config: &str) -> HashMap<String, String> {
        HashMap::from([("config".to_string(), config.to_string())])
    }

    #[test]
    fn the_default_runc_handler_decides() {
        let config = r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{
            "kata":{"runtimeType":"io.containerd.kata.v2","options":{"SystemdCgroup":false}},
            "runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":true}}}}}"#;
        let found = from_status_info(&info(config), true).unwrap();
        assert_eq!(found.driver, CgroupDriver::Systemd);
        assert!(found.to_string().contains("handler \"runc\""), "{found}");
    }

    #[test]
    fn absent_options_are_runcs_default_cgroupfs() {
        let config = r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":null}}}}"#;
        assert_eq!(from_status_info(&info(config), true).unwrap().driver, CgroupDriver::Cgroupfs);
    }

    #[test]
    fn containerd_1_4s_empty_options_say_nothing() {
        let config = r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{}}}},"systemdCgroup":false}"#;
        assert!(from_status_info(&info(config), false).is_err(), "1.4: {{}} whatever the table holds");
        assert_eq!(from_status_info(&info(config), true).unwrap().driver, CgroupDriver::Cgroupfs, "1.5+: no options");
    }

    #[test]
    fn the_legacy_shim_reads_the_plugin_wide_key() {
        let config = r#"{"systemdCgroup":true,"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"runtimeType":"io.containerd.runtime.v1.linux"}}}}"#;
        assert_eq!(from_status_info(&info(config), true).unwrap().driver, CgroupDriver::Systemd);
    }

    #[test]
    fn no_runc_handler_no_answer() {
        let config = r#"{"containerd":{"defaultRuntimeName":"kata","runtimes":{"kata":{"runtimeType":"io.containerd.kata.v2"}}}}"#;
        assert!(from_status_info(&info(config), true).is_err());
        assert!(from_status_info(&HashMap::new(), true).is_err());
        assert!(from_status_info(&info("{not json"), true).is_err());
        let odd = r#"{"containerd":{"runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":"yes"}}}}}"#;
        assert!(from_status_info(&info(odd), true).is_err());
    }

    /// containerd 1.6.20 runs runc with systemd cgroups for `systemdCgroup = true` (go-toml
    /// matches the key case-insensitively); a driver of cgroupfs there makes runc refuse every pod.
    #[test]
    fn the_key_is_read_in_any_case_and_two_spellings_are_ambiguous() {
        let runc = |options: &str| {
            let config = format!(
                r#"{{"containerd":{{"defaultRuntimeName":"runc","runtimes":{{"runc":{{"runtimeType":"io.containerd.runc.v2","options":{options}}}}}}}}}"#
            );
            from_status_info(&info(&config), true)
        };
        for key in ["SystemdCgroup", "systemdCgroup", "systemdcgroup", "SYSTEMDCGROUP"] {
            assert_eq!(runc(&format!(r#"{{"{key}":true}}"#)).unwrap().driver, CgroupDriver::Systemd, "{key}");
        }
        let twice = runc(r#"{"SystemdCgroup":false,"systemdCgroup":true}"#).unwrap_err();
        assert!(twice.contains("case-insensitively"), "{twice}");
        // Another option whose name merely contains the key does not count.
        assert_eq!(runc(r#"{"NoSystemdCgroupHere":true}"#).unwrap().driver, CgroupDriver::Cgroupfs);
    }

    #[test]
    fn a_config_key_that_the_runtime_contradicts_is_not_trusted() {
        let said = |driver| Ok(KnownDriver { driver, source: Source::Config });
        assert_eq!(pinned(CgroupDriver::Systemd, said(CgroupDriver::Systemd)).unwrap().driver, CgroupDriver::Systemd);
        // Unknown from the runtime: the key is what the operator knows.
        assert_eq!(pinned(CgroupDriver::Systemd, Err("1.4".into())).unwrap().source, Source::Config);
        let wrong = pinned(CgroupDriver::Cgroupfs, said(CgroupDriver::Systemd)).unwrap_err();
        assert!(wrong.contains(CONFIG_KEY) && wrong.contains("says cgroupfs"), "{wrong}");
    }
}
