//! The YAML configuration file, its defaults, and validation whose errors name the key.
//! Every option is documented in `config.example.yaml`.

use crate::convert::policy::Action;
use crate::runtime_config::CgroupDriver;
use crate::version::CriVersion;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The kubelet's default gRPC message size limit, each way.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("config: {message}")]
    Syntax { message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, message: message.into() }
}

/// The file as written: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    listen: ListenFile,
    #[serde(default)]
    backend: BackendFile,
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
}

/// What cri-bridge answers for a runtime that cannot (`emulate.*`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmulateFile {
    #[serde(default)]
    runtime_config: RuntimeConfigFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuntimeConfigFile {
    cgroup_driver: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    connections: Option<usize>,
    connections_per_uid: Option<usize>,
    streams_per_connection: Option<u32>,
    idle_timeout_seconds: Option<u64>,
    keepalive_seconds: Option<u64>,
    keepalive_timeout_seconds: Option<u64>,
    request_timeout_seconds: Option<u64>,
    resets_per_minute: Option<u32>,
    buffer_mib: Option<u64>,
    buffer_per_connection_mib: Option<u64>,
    stalled_caller_seconds: Option<u64>,
    conversion_threads: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsFile {
    listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenFile {
    path: Option<PathBuf>,
    mode: Option<String>,
    group: Option<String>,
    versions: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendFile {
    endpoint: Option<String>,
    image_endpoint: Option<String>,
    version: Option<String>,
    revision: Option<String>,
    image_revision: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogFile {
    level: Option<String>,
    format: Option<String>,
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

/// What one client may hold and do (`limits.*`): bounds against a misbehaving or hostile
/// caller on a root-equivalent socket, set well above what a kubelet needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections open at once, in all.
    pub connections: usize,
    /// Client connections open at once from one uid (`SO_PEERCRED`).
    pub connections_per_uid: usize,
    /// Calls open at once on one connection (HTTP/2 `MAX_CONCURRENT_STREAMS`).
    pub streams_per_connection: u32,
    /// A connection with no call open for this long is told to go away (GOAWAY).
    pub idle_timeout: std::time::Duration,
    /// An HTTP/2 PING is sent this often; a peer that does not answer within
    /// `keepalive_timeout` is disconnected.
    pub keepalive: std::time::Duration,
    pub keepalive_timeout: std::time::Duration,
    /// A request's message must have arrived within this long (a client trickling it is cut off).
    pub request_timeout: std::time::Duration,
    /// Calls a connection's client may cancel (RST_STREAM) per minute before it is cut off.
    pub resets_per_minute: u32,
    /// Bytes held for clients beyond each connection's first 64 KiB, in all (`crate::budget`).
    pub buffer_bytes: usize,
    /// Bytes held for one client connection.
    pub buffer_per_connection_bytes: usize,
    /// A caller that takes none of an answer for this long has the call ended on both sides.
    pub stalled_caller: std::time::Duration,
    /// Threads that convert large messages, off the thread every call runs on.
    pub conversion_threads: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        use std::time::Duration;
        Limits {
            connections: 1024,
            connections_per_uid: 256,
            streams_per_connection: 1024,
            idle_timeout: Duration::from_secs(600),
            keepalive: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
            request_timeout: Duration::from_secs(30),
            resets_per_minute: 6000,
            buffer_bytes: 256 << 20,
            buffer_per_connection_bytes: 64 << 20,
            stalled_caller: Duration::from_secs(60),
            conversion_threads: std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
        }
    }
}

impl Limits {
    fn read(file: LimitsFile) -> Result<Limits, ConfigError> {
        let mut limits = Limits::default();
        let at_least_one = |key: &'static str, value: u64| {
            if value == 0 {
                Err(invalid(key, "must be at least 1"))
            } else {
                Ok(value)
            }
        };
        let seconds = |key, value: Option<u64>, default: std::time::Duration| {
            value.map_or(Ok(default), |v| at_least_one(key, v).map(std::time::Duration::from_secs))
        };
        if let Some(n) = file.connections {
            limits.connections = at_least_one("limits.connections", n as u64)? as usize;
        }
        if let Some(n) = file.connections_per_uid {
            limits.connections_per_uid = at_least_one("limits.connections_per_uid", n as u64)? as usize;
        }
        if let Some(n) = file.streams_per_connection {
            limits.streams_per_connection = at_least_one("limits.streams_per_connection", u64::from(n))? as u32;
        }
        if let Some(n) = file.resets_per_minute {
            limits.resets_per_minute = at_least_one("limits.resets_per_minute", u64::from(n))? as u32;
        }
        limits.idle_timeout = seconds("limits.idle_timeout_seconds", file.idle_timeout_seconds, limits.idle_timeout)?;
        limits.keepalive = seconds("limits.keepalive_seconds", file.keepalive_seconds, limits.keepalive)?;
        limits.keepalive_timeout =
            seconds("limits.keepalive_timeout_seconds", file.keepalive_timeout_seconds, limits.keepalive_timeout)?;
        limits.request_timeout =
            seconds("limits.request_timeout_seconds", file.request_timeout_seconds, limits.request_timeout)?;
        limits.stalled_caller =
            seconds("limits.stalled_caller_seconds", file.stalled_caller_seconds, limits.stalled_caller)?;
        let mib = |key, value: u64| at_least_one(key, value).map(|v| (v.min(1 << 20) as usize) << 20);
        if let Some(n) = file.buffer_mib {
            limits.buffer_bytes = mib("limits.buffer_mib", n)?;
        }
        if let Some(n) = file.buffer_per_connection_mib {
            limits.buffer_per_connection_bytes = mib("limits.buffer_per_connection_mib", n)?;
        }
        if let Some(n) = file.conversion_threads {
            limits.conversion_threads = at_least_one("limits.conversion_threads", n as u64)? as usize;
        }
        Ok(limits)
    }
}

/// Where the Prometheus endpoint listens (`metrics.listen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsListen {
    /// A unix socket path.
    Unix(PathBuf),
    /// A loopback address: the metrics name every caller, so they stay on the node.
    Tcp(std::net::SocketAddr),
}

impl MetricsListen {
    pub fn parse(text: &str) -> Result<MetricsListen, ConfigError> {
        const KEY: &str = "metrics.listen";
        let path = text.strip_prefix("unix://").unwrap_or(text);
        if path.starts_with('/') {
            return Ok(MetricsListen::Unix(PathBuf::from(path)));
        }
        let address: std::net::SocketAddr = text.parse().map_err(|_| {
            invalid(
                KEY,
                format!("{text:?} is not a unix socket path (/run/…) or a loopback host:port (127.0.0.1:9464)"),
            )
        })?;
        if !address.ip().is_loopback() {
            return Err(invalid(KEY, format!("{text:?} is not a loopback address (127.0.0.1 or [::1])")));
        }
        Ok(MetricsListen::Tcp(address))
    }
}

impl std::fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetricsListen::Unix(path) => write!(f, "unix://{}", path.display()),
            MetricsListen::Tcp(address) => write!(f, "http://{address}/metrics"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
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
}

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
        }
    }
}

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<PathBuf>,
    pub backend: Option<String>,
    pub image_backend: Option<String>,
    pub backend_version: Option<String>,
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
            config.listen_mode = u32::from_str_radix(mode.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| invalid("listen.mode", format!("{mode:?} is not an octal permission like \"0660\"")))?;
        }
        config.listen_group = file.listen.group;
        if let Some(versions) = file.listen.versions {
            config.versions = versions
                .iter()
                .map(|v| v.parse().map_err(|e| invalid("listen.versions", format!("{e}"))))
                .collect::<Result<_, _>>()?;
        }
        if let Some(endpoint) = file.backend.endpoint {
            config.backend = Endpoint::parse("backend.endpoint", &endpoint)?;
        }
        if let Some(endpoint) = file.backend.image_endpoint {
            config.image_backend = Some(Endpoint::parse("backend.image_endpoint", &endpoint)?);
        }
        if let Some(version) = file.backend.version {
            config.backend_version = parse_backend_version("backend.version", &version)?;
        }
        config.backend_revision = file.backend.revision.map(|r| parse_revision("backend.revision", &r)).transpose()?;
        config.image_revision =
            file.backend.image_revision.map(|r| parse_revision("backend.image_revision", &r)).transpose()?;
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

    /// Applies command-line overrides, then validates again.
    pub fn apply(mut self, overrides: Overrides) -> Result<Config, ConfigError> {
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
        self.validate()?;
        Ok(self)
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
        for (key, endpoint) in
            [("backend.endpoint", Some(&self.backend)), ("backend.image_endpoint", self.image_backend.as_ref())]
        {
            if endpoint == Some(&Endpoint::Unix(self.listen_path.clone())) {
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
        if let Some(MetricsListen::Unix(path)) = &self.metrics_listen {
            let taken =
                [Some(&self.listen_path), self.backend.path(), self.image_backend.as_ref().and_then(Endpoint::path)];
            if taken.contains(&Some(path)) {
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

/// The largest config file read (a real one is a few KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// The most `[` and `{` a config may hold. The YAML parser's time grows with the square of the
/// flow collections' nesting (20,000 nested `[` take 1.5 s, 100,000 over 30 s); counting every
/// opener, quoted or not, bounds the nesting without parsing. A real config has a handful.
pub const MAX_FLOW_OPENERS: usize = 1024;

/// Refuses, before the YAML parser sees it, text whose size or nesting would make it slow.
fn check_yaml_bounds(text: &str) -> Result<(), ConfigError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::Syntax {
            message: format!("larger than {MAX_CONFIG_BYTES} bytes: not a cri-bridge config"),
        });
    }
    let openers = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    if openers > MAX_FLOW_OPENERS {
        return Err(ConfigError::Syntax {
            message: format!("{openers} '[' and '{{' (at most {MAX_FLOW_OPENERS}): not a cri-bridge config"),
        });
    }
    Ok(())
}

/// `log.level` takes targets and levels only (`info`, `cri_bridge=debug,h2=warn`). The rest of
/// tracing-subscriber's filter syntax is refused before it reaches the parser: its parser panics on
/// some non-ASCII text (it slices inside a character), and a span field filter's value is a regex
/// compiled to a DFA that can take minutes and gigabytes (`x[{a=a....................}]`), on the
/// runtime thread, at a reload.
fn check_log_filter(filter: &str) -> Result<(), ConfigError> {
    const LONGEST: usize = 1024;
    if filter.len() > LONGEST {
        return Err(invalid("log.level", format!("{} bytes: a log filter is at most {LONGEST}", filter.len())));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_:-.=, ".contains(c);
    if let Some(bad) = filter.chars().find(|&c| !allowed(c)) {
        return Err(invalid(
            "log.level",
            format!(
                "{filter:?}: {bad:?} is not accepted; write levels and targets only, like \"info\" or \"cri_bridge=debug,h2=warn\" (span and field filters are not supported)"
            ),
        ));
    }
    Ok(())
}

fn parse_revision(key: &'static str, text: &str) -> Result<u8, ConfigError> {
    crate::revision::parse_minor(text).ok_or_else(|| {
        invalid(key, format!("{text:?} is not a Kubernetes minor like \"1.25\" (the CRI revision the runtime decodes)"))
    })
}

fn parse_backend_version(key: &'static str, text: &str) -> Result<Option<CriVersion>, ConfigError> {
    if text == "auto" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| invalid(key, format!("{text:?} is not auto, v1, v1alpha2 or v1alpha1")))
}
