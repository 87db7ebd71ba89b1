//! The `log` and `metrics` sections: the log filter and format, and where the Prometheus
//! endpoint listens.

use super::error::{invalid, ConfigError};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogFile {
    pub(super) level: Option<String>,
    pub(super) format: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// `log.level` takes targets and levels only (`info`, `cri_bridge=debug,h2=warn`). The rest of
/// tracing-subscriber's filter syntax is refused before it reaches the parser: its parser panics on
/// some non-ASCII text (it slices inside a character), and a span field filter's value is a regex
/// compiled to a DFA that can take minutes and gigabytes (`x[{a=a....................}]`), on the
/// runtime thread, at a reload.
pub(super) fn check_log_filter(filter: &str) -> Result<(), ConfigError> {
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsFile {
    pub(super) listen: Option<String>,
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
