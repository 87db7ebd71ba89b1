//! The YAML configuration file, its defaults, and validation whose errors name the key.
//! Every option is documented in `config.example.yaml`.
//!
//! The sections apart from `listen`, `max_message_size` and `loss_policy` are read in files of
//! their own: `backend` and `emulate` (backend.rs), `limits` (limits.rs), `log` and `metrics`
//! (log_and_metrics.rs); the command line's overrides in overrides.rs, and the bounds a file is
//! held to before it is parsed in bounds.rs.

mod backend;
mod bounds;
mod endpoints;
mod error;
mod limits;
mod log_and_metrics;
mod overrides;
mod routing;

pub use backend::Endpoint;
pub use bounds::{MAX_CONFIG_BYTES, MAX_FLOW_OPENERS};
pub use endpoints::{Principals, ScopedEndpoint};
pub use error::ConfigError;
pub use limits::Limits;
pub use log_and_metrics::{LogFormat, MetricsListen};
pub use overrides::Overrides;
pub use routing::{changed_keys, HandlerRoute, NamedBackend, Routing};

use backend::{parse_backend_version, parse_revision, BackendFile, EmulateFile};
use bounds::check_yaml_bounds;
use endpoints::{parse_mode, read_brownout, read_endpoints, read_mutating, BrownoutFile, EndpointFile, MutatingFile};
use error::invalid;
use limits::LimitsFile;
use log_and_metrics::{check_log_filter, LogFile, MetricsFile};
use routing::{read_routing, BackendEntryFile, RoutesFile};

use crate::convert::policy::Action;
use crate::runtime_config::CgroupDriver;
use crate::version::CriVersion;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The kubelet's default gRPC message size limit, each way.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// The file as written: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    listen: ListenFile,
    backend: Option<BackendFile>,
    backends: Option<Vec<BackendEntryFile>>,
    routes: Option<RoutesFile>,
    max_message_size: Option<usize>,
    #[serde(default)]
    loss_policy: HashMap<String, String>,
    #[serde(default)]
    log: LogFile,
    #[serde(default)]
    metrics: MetricsFile,
    #[serde(default)]
    limits: LimitsFile,
    #[serde(default)]
    emulate: EmulateFile,
    #[serde(default)]
    endpoints: Vec<EndpointFile>,
    #[serde(default)]
    brownout: std::collections::BTreeMap<String, BrownoutFile>,
    splice: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenFile {
    path: Option<PathBuf>,
    mode: Option<String>,
    group: Option<String>,
    versions: Option<Vec<String>>,
    mutating: Option<MutatingFile>,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen_path: PathBuf,
    /// Permission bits of the socket file.
    pub listen_mode: u32,
    /// Group owning the socket file (name or number).
    pub listen_group: Option<String>,
    /// Frontend versions served on the socket.
    pub versions: Vec<CriVersion>,
    pub backend: Endpoint,
    pub image_backend: Option<Endpoint>,
    /// `None`: discover (`auto`).
    pub backend_version: Option<CriVersion>,
    /// `backend.revision`: the Kubernetes minor whose CRI schema the runtime decodes (`None`:
    /// from the runtime's `Version` answer and the revision table).
    pub backend_revision: Option<u8>,
    /// `backend.image_revision`: the same for a separate image endpoint.
    pub image_revision: Option<u8>,
    pub max_message_size: usize,
    pub loss_policy: HashMap<String, Action>,
    pub log_level: String,
    pub log_format: LogFormat,
    /// `metrics.listen`: `None` serves no metrics.
    pub metrics_listen: Option<MetricsListen>,
    pub limits: Limits,
    /// `emulate.runtime_config.cgroup_driver`: the runtime's cgroup driver, for `RuntimeConfig`
    /// when the runtime cannot answer it (`None`: read from the runtime's `Status` info).
    pub cgroup_driver: Option<CgroupDriver>,
    /// `endpoints`: scoped sockets beside `listen.path`.
    pub endpoints: Vec<ScopedEndpoint>,
    /// `listen.mutating`: who may make mutating calls on the main socket (`None`: anyone).
    pub mutating: Option<Principals>,
    /// `brownout`: CRI versions refused on the main socket, always or on a schedule.
    pub brownout: Vec<(CriVersion, crate::access::brownout::Brownout)>,
    /// `backends` and `routes`: several runtimes, sandboxes routed by handler (`None`: the one
    /// `backend`). With it, `backend` and the fields beside it are the default backend's.
    pub routing: Option<Routing>,
    /// Keys and flags that are gone, given all the same: each is ignored and warned of (a node
    /// must not stop on an upgrade because its config names one).
    pub gone: Vec<Gone>,
}

/// A key or flag that cri-bridge no longer has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    /// `splice`, `--splice`.
    pub key: &'static str,
    /// Why it is gone and what to do.
    pub why: &'static str,
}

/// The splice (a frame relay beside h2) was removed: one relay path, built on h2.
const SPLICE_GONE: &str =
    "the splice was removed (every connection is relayed through h2): the key has no effect; remove it";

impl Default for Config {
    fn default() -> Config {
        Config {
            listen_path: PathBuf::from("/run/cri-bridge/cri-bridge.sock"),
            listen_mode: 0o660,
            listen_group: None,
            versions: vec![CriVersion::V1, CriVersion::V1alpha2, CriVersion::V1alpha1],
            backend: Endpoint::Memory,
            image_backend: None,
            backend_version: None,
            backend_revision: None,
            image_revision: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            loss_policy: HashMap::new(),
            log_level: "info".to_string(),
            log_format: LogFormat::Text,
            metrics_listen: None,
            limits: Limits::default(),
            cgroup_driver: None,
            endpoints: Vec::new(),
            mutating: None,
            brownout: Vec::new(),
            routing: None,
            gone: Vec::new(),
        }
    }
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        use std::io::Read;
        let read_error = |source| ConfigError::Read { path: path.to_path_buf(), source };
        // Read at most one byte past the limit: a file (or a FIFO, /dev/zero) is never held whole.
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(MAX_CONFIG_BYTES as u64 + 1).read_to_string(&mut text))
            .map_err(read_error)?;
        Config::parse(&text).map_err(|e| match e {
            ConfigError::Syntax { message } => ConfigError::Parse { path: path.to_path_buf(), message },
            other => other,
        })
    }

    /// Parses and validates YAML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        check_yaml_bounds(text)?;
        // An empty file (or one of only comments) is the defaults.
        let file: File = if text.trim().lines().all(|l| l.trim().is_empty() || l.trim().starts_with('#')) {
            File::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| ConfigError::Syntax { message: e.to_string() })?
        };
        let mut config = Config::default();
        if let Some(path) = file.listen.path {
            config.listen_path = path;
        }
        if let Some(mode) = file.listen.mode {
            config.listen_mode = parse_mode("listen.mode", &mode)?;
        }
        config.mutating = read_mutating(file.listen.mutating)?;
        config.endpoints = read_endpoints(file.endpoints)?;
        config.brownout = read_brownout(file.brownout)?;
        config.listen_group = file.listen.group;
        if let Some(versions) = file.listen.versions {
            config.versions = versions
                .iter()
                .map(|v| v.parse().map_err(|e| invalid("listen.versions", format!("{e}"))))
                .collect::<Result<_, _>>()?;
        }
        config.routing = read_routing(file.backends, file.routes)?;
        match (&config.routing, file.backend) {
            (Some(_), Some(_)) => {
                return Err(invalid("backend", "give `backends` or `backend`, not both (`backends` names each one)"))
            }
            (Some(routing), None) => {
                let default = &routing.backends[routing.default];
                config.backend = default.endpoint.clone();
                config.image_backend = default.image_endpoint.clone();
                config.backend_version = default.version;
                config.backend_revision = default.revision;
                config.image_revision = default.image_revision;
            }
            (None, backend) => config.read_backend(backend.unwrap_or_default())?,
        }
        if file.splice.is_some() {
            config.gone.push(Gone { key: "splice", why: SPLICE_GONE });
        }
        if let Some(size) = file.max_message_size {
            config.max_message_size = size;
        }
        for (field, action) in file.loss_policy {
            let action = action.parse().map_err(|e: String| invalid("loss_policy", format!("{field}: {e}")))?;
            config.loss_policy.insert(field, action);
        }
        if let Some(level) = file.log.level {
            config.log_level = level;
        }
        if let Some(format) = file.log.format {
            config.log_format = match format.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => return Err(invalid("log.format", format!("{other:?} is not text or json"))),
            };
        }
        config.metrics_listen = file.metrics.listen.as_deref().map(MetricsListen::parse).transpose()?;
        config.limits = Limits::read(file.limits)?;
        config.cgroup_driver = file
            .emulate
            .runtime_config
            .cgroup_driver
            .map(|d| d.parse().map_err(|e: String| invalid(crate::runtime_config::CONFIG_KEY, e)))
            .transpose()?;
        config.validate()?;
        Ok(config)
    }

    /// The `backend` section.
    fn read_backend(&mut self, backend: BackendFile) -> Result<(), ConfigError> {
        if let Some(endpoint) = backend.endpoint {
            self.backend = Endpoint::parse("backend.endpoint", &endpoint)?;
        }
        if let Some(endpoint) = backend.image_endpoint {
            self.image_backend = Some(Endpoint::parse("backend.image_endpoint", &endpoint)?);
        }
        if let Some(version) = backend.version {
            self.backend_version = parse_backend_version("backend.version", &version)?;
        }
        self.backend_revision = backend.revision.map(|r| parse_revision("backend.revision", &r)).transpose()?;
        self.image_revision =
            backend.image_revision.map(|r| parse_revision("backend.image_revision", &r)).transpose()?;
        Ok(())
    }

    /// The runtime connections one client connection may hold: one per backend, and one more
    /// for each separate image endpoint (each made on the client's first call that needs it).
    pub fn runtime_connections(&self) -> usize {
        self.backend_endpoints().len()
    }

    /// Every runtime and image endpoint, with the key that names it.
    fn backend_endpoints(&self) -> Vec<(&'static str, &Endpoint)> {
        match &self.routing {
            Some(routing) => routing
                .backends
                .iter()
                .flat_map(|b| {
                    let image = b.image_endpoint.as_ref().map(|e| ("backends.image_endpoint", e));
                    std::iter::once(("backends.endpoint", &b.endpoint)).chain(image)
                })
                .collect(),
            None => {
                let image = self.image_backend.as_ref().map(|e| ("backend.image_endpoint", e));
                std::iter::once(("backend.endpoint", &self.backend)).chain(image).collect()
            }
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.listen_path.as_os_str().is_empty() {
            return Err(invalid("listen.path", "must not be empty"));
        }
        if self.versions.is_empty() {
            return Err(invalid("listen.versions", "at least one version must be served"));
        }
        if self.max_message_size < 4096 {
            return Err(invalid(
                "max_message_size",
                format!("{} bytes is too small (at least 4096)", self.max_message_size),
            ));
        }
        if self.image_backend == Some(Endpoint::Memory) && self.backend != Endpoint::Memory {
            return Err(invalid(
                "backend.image_endpoint",
                "`memory` is only allowed when backend.endpoint is `memory` too",
            ));
        }
        // Listening on the runtime's own socket would take it over (a stale-looking runtime socket
        // is removed at bind) and make cri-bridge its own backend.
        let backends = self.backend_endpoints();
        for &(key, endpoint) in &backends {
            if endpoint == &Endpoint::Unix(self.listen_path.clone()) {
                return Err(invalid(
                    "listen.path",
                    format!(
                        "{} is also {key}: cri-bridge must listen on a socket of its own",
                        self.listen_path.display()
                    ),
                ));
            }
        }
        if self.limits.connections_per_uid > self.limits.connections {
            return Err(invalid(
                "limits.connections_per_uid",
                format!(
                    "{} is more than limits.connections ({})",
                    self.limits.connections_per_uid, self.limits.connections
                ),
            ));
        }
        // A message is gathered and then converted: a connection must be able to hold both.
        let (per_connection, message) = (self.limits.buffer_per_connection_bytes, self.max_message_size);
        if per_connection < 2 * message {
            return Err(invalid(
                "limits.buffer_per_connection_mib",
                format!(
                    "{} MiB cannot hold a message of max_message_size ({message} bytes) twice",
                    per_connection >> 20
                ),
            ));
        }
        if per_connection > self.limits.buffer_bytes {
            return Err(invalid(
                "limits.buffer_per_connection_mib",
                format!(
                    "{} MiB is more than limits.buffer_mib ({} MiB)",
                    per_connection >> 20,
                    self.limits.buffer_bytes >> 20
                ),
            ));
        }
        if let Some((version, _)) = self.brownout.iter().find(|(v, _)| !self.versions.contains(v)) {
            return Err(invalid(
                "brownout",
                format!("{version} is not served (listen.versions): there is nothing to brown out"),
            ));
        }
        let mut sockets = vec![&self.listen_path];
        for endpoint in &self.endpoints {
            let taken =
                sockets.contains(&&endpoint.path) || backends.iter().any(|(_, b)| b.path() == Some(&endpoint.path));
            if taken {
                return Err(invalid(
                    "endpoints",
                    format!(
                        "{} is also listen.path, a backend or another endpoint: each needs a socket of its own",
                        endpoint.path.display()
                    ),
                ));
            }
            sockets.push(&endpoint.path);
        }
        if let Some(MetricsListen::Unix(path)) = &self.metrics_listen {
            let taken = &self.listen_path == path || backends.iter().any(|(_, b)| b.path() == Some(path));
            if taken || self.endpoints.iter().any(|e| &e.path == path) {
                return Err(invalid(
                    "metrics.listen",
                    format!("{} is a CRI socket: the metrics need a socket of their own", path.display()),
                ));
            }
        }
        for key in self.loss_policy.keys() {
            crate::convert::policy::check_key(key).map_err(|e| invalid("loss_policy", e))?;
        }
        check_log_filter(&self.log_level)?;
        tracing_subscriber::EnvFilter::try_new(&self.log_level)
            .map_err(|e| invalid("log.level", format!("{:?}: {e}", self.log_level)))?;
        Ok(())
    }
}

impl Config {
    /// Applies command-line overrides, then validates again.
    pub fn apply(mut self, overrides: Overrides) -> Result<Config, ConfigError> {
        let backend_flag =
            [overrides.backend.is_some(), overrides.image_backend.is_some(), overrides.backend_version.is_some()];
        if self.routing.is_some() && backend_flag.contains(&true) {
            return Err(invalid(
                "backends",
                "--backend, --image-backend and --backend-version set the one `backend`; with `backends`, edit the file",
            ));
        }
        if let Some(listen) = overrides.listen {
            self.listen_path = listen;
        }
        if let Some(backend) = overrides.backend {
            self.backend = Endpoint::parse("--backend", &backend)?;
        }
        if let Some(image) = overrides.image_backend {
            self.image_backend = Some(Endpoint::parse("--image-backend", &image)?);
        }
        if let Some(version) = overrides.backend_version {
            self.backend_version = parse_backend_version("--backend-version", &version)?;
        }
        if overrides.splice {
            self.gone.push(Gone { key: "--splice", why: SPLICE_GONE });
        }
        self.validate()?;
        Ok(self)
    }
}
