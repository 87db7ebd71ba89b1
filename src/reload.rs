//! `SIGHUP` (systemd's `ExecReload`) re-reads the config file and applies what can change while
//! serving: the loss policy's overrides, the log level, the backend's version pin and revision,
//! `listen.mutating` and the policies of the scoped sockets (`endpoints`), for calls from then on.
//! A file that does not load is refused, its error logged, and the running config kept. A change
//! to a setting that cannot change live (the listen socket, the backend endpoints, a scoped
//! socket added, removed or given another mode or group, the served versions,
//! the message size limit, the log format, the metrics socket) is reported as needing a restart,
//! and the running value is kept.

use crate::access::Policy;
use crate::backend::{Backend, Pins};
use crate::config::{changed_keys, Config, ConfigError, Endpoint};
use crate::convert::policy::LossPolicy;
use crate::forward::{Access, Rules};
use std::sync::Arc;

/// Reads the configuration anew: the file, then the command line's overrides.
pub type LoadConfig = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;
/// Sets the log filter (`log.level`).
pub type SetLogLevel = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// How a reload reads the configuration and sets the log filter; given by `main`.
pub struct Reloader {
    pub load: LoadConfig,
    pub set_log_level: SetLogLevel,
}

/// What a reload changed, and what it could not.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Config keys applied live.
    pub changed: Vec<&'static str>,
    /// Config keys whose new value waits for a restart.
    pub need_restart: Vec<&'static str>,
}

/// The parts of a running proxy a reload reaches.
pub struct Live {
    pub config: Config,
    pub policy: Arc<LossPolicy>,
    pub runtime: Arc<Backend>,
    /// The same backend as `runtime` when there is no separate image endpoint.
    pub image: Arc<Backend>,
    /// The rules of each socket served: the main one, then `endpoints` in order.
    pub sockets: Vec<Arc<Access>>,
}

impl Live {
    /// Loads the file and applies it; on error nothing changes.
    pub fn reload(&mut self, reloader: &Reloader) -> Result<Applied, ConfigError> {
        let new = (reloader.load)()?;
        // Checked before anything is applied, so a bad level changes nothing else either.
        if new.log_level != self.config.log_level {
            (reloader.set_log_level)(&new.log_level)
                .map_err(|message| ConfigError::Invalid { key: "log.level", message })?;
        }
        Ok(self.apply(new))
    }

    fn apply(&mut self, new: Config) -> Applied {
        let mut applied = Applied::default();
        let old = &mut self.config;
        if new.log_level != old.log_level {
            old.log_level = new.log_level.clone();
            applied.changed.push("log.level");
        }
        if new.loss_policy != old.loss_policy {
            self.policy.set_overrides(new.loss_policy.clone());
            old.loss_policy = new.loss_policy.clone();
            applied.changed.push("loss_policy");
        }
        // Backends added, removed or routed anew open and close connections: a restart, which
        // the kubelet rides through (it reconnects within a second), and which needs no state.
        let new = if new.routing != old.routing {
            applied.need_restart.extend(changed_keys(old.routing.as_ref(), new.routing.as_ref()));
            Config {
                backend: old.backend.clone(),
                image_backend: old.image_backend.clone(),
                backend_version: old.backend_version,
                backend_revision: old.backend_revision,
                image_revision: old.image_revision,
                routing: old.routing.clone(),
                ..new
            }
        } else {
            new
        };
        // The in-memory runtime serves the version it started with: its pin is not live.
        let memory = old.backend == Endpoint::Memory;
        if new.backend_version != old.backend_version {
            if memory {
                applied.need_restart.push("backend.version");
            } else {
                old.backend_version = new.backend_version;
                applied.changed.push("backend.version");
            }
        }
        if new.backend_revision != old.backend_revision {
            old.backend_revision = new.backend_revision;
            applied.changed.push("backend.revision");
        }
        if new.image_revision != old.image_revision {
            old.image_revision = new.image_revision;
            applied.changed.push("backend.image_revision");
        }
        if new.cgroup_driver != old.cgroup_driver {
            old.cgroup_driver = new.cgroup_driver;
            applied.changed.push(crate::runtime_config::CONFIG_KEY);
        }
        let cgroup_driver = old.cgroup_driver;
        // Among several backends, a pin is part of `backends`: any change to one is a restart.
        if old.routing.is_none() {
            self.runtime.set_pins(Pins { version: old.backend_version, revision: old.backend_revision, cgroup_driver });
            if !Arc::ptr_eq(&self.runtime, &self.image) {
                let pins = Pins { version: old.backend_version, revision: old.image_revision, cgroup_driver: None };
                self.image.set_pins(pins);
            }
        }
        let (mutating, brownout) = (new.mutating != old.mutating, new.brownout != old.brownout);
        if mutating || brownout {
            old.mutating = new.mutating.clone();
            old.brownout = new.brownout.clone();
            if let Some(main) = self.sockets.first() {
                let (mutating, brownout) = (old.mutating.clone(), old.brownout.clone());
                main.set(Rules { policy: Policy::All, mutating, brownout });
            }
            applied
                .changed
                .extend([("listen.mutating", mutating), ("brownout", brownout)].iter().filter(|c| c.1).map(|c| c.0));
        }
        // The same sockets (path, mode, group, in order): their policies change live. Any other
        // change to the list waits for a restart, which opens and closes sockets.
        let same_sockets = new.endpoints.len() == old.endpoints.len()
            && new
                .endpoints
                .iter()
                .zip(&old.endpoints)
                .all(|(n, o)| (&n.path, n.mode, &n.group) == (&o.path, o.mode, &o.group));
        if same_sockets && new.endpoints != old.endpoints {
            for (endpoint, access) in new.endpoints.iter().zip(self.sockets.iter().skip(1)) {
                access.set(Rules { policy: endpoint.policy.clone(), mutating: None, brownout: Vec::new() });
            }
            old.endpoints = new.endpoints.clone();
            applied.changed.push("endpoints");
        }
        let restart_only = [
            ("endpoints", !same_sockets),
            ("listen.path", new.listen_path != old.listen_path),
            ("listen.mode", new.listen_mode != old.listen_mode),
            ("listen.group", new.listen_group != old.listen_group),
            ("listen.versions", new.versions != old.versions),
            ("backend.endpoint", new.backend != old.backend),
            ("backend.image_endpoint", new.image_backend != old.image_backend),
            ("max_message_size", new.max_message_size != old.max_message_size),
            ("log.format", new.log_format != old.log_format),
            ("metrics.listen", new.metrics_listen != old.metrics_listen),
            ("limits", new.limits != old.limits),
        ];
        applied.need_restart.extend(restart_only.into_iter().filter(|(_, differs)| *differs).map(|(key, _)| key));
        applied
    }
}

/// Reloads on every `SIGHUP` `hangups` receives until the task is dropped, telling systemd
/// around each. The stream is made by the caller before the daemon says READY=1, so that a
/// reload asked for at once finds its handler (see [`crate::run::run_on`]).
pub async fn on_sighup(
    mut live: Live,
    reloader: Reloader,
    mut hangups: tokio::signal::unix::Signal,
    status: Arc<dyn Fn() -> String + Send + Sync>,
) {
    while hangups.recv().await.is_some() {
        crate::systemd::notify("RELOADING=1\nSTATUS=reloading the config");
        match live.reload(&reloader) {
            Ok(applied) => {
                if applied.changed.is_empty() && applied.need_restart.is_empty() {
                    tracing::info!("config reloaded: nothing changed");
                } else if !applied.changed.is_empty() {
                    tracing::info!(changed = %applied.changed.join(", "), "config reloaded");
                }
                if !applied.need_restart.is_empty() {
                    tracing::warn!(
                        keys = %applied.need_restart.join(", "),
                        "config reloaded, but these settings change only when cri-bridge restarts; the running values are kept"
                    );
                }
            }
            Err(error) => tracing::error!(%error, "config reload refused; the running config is kept"),
        }
        crate::systemd::notify(&format!("READY=1\nSTATUS={}", status()));
    }
}
