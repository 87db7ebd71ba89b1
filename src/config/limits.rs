//! The `limits` section: what one client may hold and do, its defaults, and each key's
//! validation (the checks against other sections are `Config::validate`'s).

use super::error::{invalid, ConfigError};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitsFile {
    pub(super) connections: Option<usize>,
    pub(super) connections_per_uid: Option<usize>,
    pub(super) scoped_connections: Option<usize>,
    pub(super) streams_per_connection: Option<u32>,
    pub(super) idle_timeout_seconds: Option<u64>,
    pub(super) keepalive_seconds: Option<u64>,
    pub(super) keepalive_timeout_seconds: Option<u64>,
    pub(super) request_timeout_seconds: Option<u64>,
    pub(super) resets_per_minute: Option<u32>,
    pub(super) buffer_mib: Option<u64>,
    pub(super) buffer_per_connection_mib: Option<u64>,
    pub(super) stalled_caller_seconds: Option<u64>,
    pub(super) conversion_threads: Option<usize>,
}

/// What one client may hold and do (`limits.*`): bounds against a misbehaving or hostile
/// caller on a root-equivalent socket, set well above what a kubelet needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections open at once, in all.
    pub connections: usize,
    /// Client connections open at once from one uid (`SO_PEERCRED`), in each pool (the main
    /// socket's, the scoped sockets'): a root pod on a scoped socket takes none of the
    /// kubelet's.
    pub connections_per_uid: usize,
    /// Client connections the scoped sockets (`endpoints`) may hold at once, all together;
    /// below `connections`, so that the main socket (the kubelet's) can always reach
    /// `connections - scoped_connections` whatever the scoped sockets' callers do.
    pub scoped_connections: usize,
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
            scoped_connections: default_scoped_connections(1024),
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

/// A quarter of `connections`, at least 1.
fn default_scoped_connections(connections: usize) -> usize {
    (connections / 4).max(1)
}

impl Limits {
    pub(super) fn read(file: LimitsFile) -> Result<Limits, ConfigError> {
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
        limits.scoped_connections = match file.scoped_connections {
            Some(n) => at_least_one("limits.scoped_connections", n as u64)? as usize,
            None => default_scoped_connections(limits.connections),
        };
        if limits.scoped_connections >= limits.connections {
            let given = match file.scoped_connections {
                Some(_) => "",
                None => " (the default: a quarter of limits.connections, at least 1)",
            };
            return Err(invalid(
                "limits.scoped_connections",
                format!(
                    "{}{given} is not less than limits.connections ({}): the main socket must keep a share",
                    limits.scoped_connections, limits.connections
                ),
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(connections: Option<usize>, scoped: Option<usize>) -> Result<Limits, String> {
        let file = LimitsFile { connections, scoped_connections: scoped, ..LimitsFile::default() };
        Limits::read(file).map_err(|e| e.to_string())
    }

    #[test]
    fn the_scoped_share_defaults_to_a_quarter_of_the_connections_and_at_least_one() {
        assert_eq!(Limits::default().scoped_connections, 256);
        assert_eq!(read(None, None).unwrap().scoped_connections, 256);
        assert_eq!(read(Some(16), None).unwrap().scoped_connections, 4);
        assert_eq!(read(Some(3), None).unwrap().scoped_connections, 1);
        assert_eq!(read(Some(16), Some(15)).unwrap().scoped_connections, 15);
    }

    #[test]
    fn the_scoped_share_must_leave_the_main_socket_some() {
        for (connections, scoped, says) in [
            (Some(16), Some(0), "must be at least 1"),
            (Some(16), Some(16), "16 is not less than limits.connections (16)"),
            (None, Some(2000), "2000 is not less than limits.connections (1024)"),
            (Some(1), None, "1 (the default: a quarter of limits.connections, at least 1) is not less"),
        ] {
            let error = read(connections, scoped).expect_err("refused");
            assert!(error.contains("limits.scoped_connections") && error.contains(says), "{error}");
        }
    }
}
