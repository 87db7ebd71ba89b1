//! systemd: the listening socket it may pass (socket activation, `LISTEN_FDS`), and how the
//! daemon is doing (`sd_notify`, for `Type=notify` units): `READY=1` once the socket is served,
//! `WATCHDOG=1` at half the unit's `WatchdogSec=`, `STOPPING=1` when shutdown begins. Without
//! `NOTIFY_SOCKET` (not started by systemd) every notification does nothing.
//!
//! The protocol is one datagram per message to the unix socket `NOTIFY_SOCKET` names (a path,
//! or `@name` in the abstract namespace), written here rather than taken from a crate: it is a
//! dozen lines of std.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// The listening socket systemd passed (`LISTEN_FDS`, `LISTEN_PID` ours), if any: served instead
/// of binding `listen.path`, so that the socket, its mode and group are the `.socket` unit's and
/// connections wait in its backlog while cri-bridge restarts. Read once, before any thread starts
/// (the variables are removed as they are read, so children do not inherit them).
pub fn activated_listener() -> std::io::Result<Option<std::os::unix::net::UnixListener>> {
    let mut passed = listenfd::ListenFd::from_env();
    if passed.len() > 1 {
        tracing::warn!(passed = passed.len(), "systemd passed several sockets; serving the first");
    }
    if passed.len() == 0 {
        return Ok(None);
    }
    match passed.take_unix_listener(0) {
        Ok(Some(listener)) => Ok(Some(listener)),
        Ok(None) => Ok(None),
        Err(error) => Err(std::io::Error::new(
            error.kind(),
            format!("the socket systemd passed (LISTEN_FDS) is not a listening unix stream socket: {error}"),
        )),
    }
}

/// Sends `state` (`READY=1`, `STATUS=…`, lines joined by `\n`) to systemd, if it is listening.
/// A failure is logged, never fatal: the daemon serves whether or not systemd hears it.
pub fn notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let sent = UnixDatagram::unbound().and_then(|socket| match target.as_encoded_bytes().strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(state.as_bytes(), &address)
        }
        None => socket.send_to(state.as_bytes(), std::path::Path::new(&target)),
    });
    if let Err(error) = sent {
        tracing::warn!(%error, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, when the watchdog is for this
/// process (`WATCHDOG_PID` unset or ours).
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Sends `WATCHDOG=1` every `interval`, for as long as the runtime it runs on is alive: a
/// blocked event loop (the one thread every call runs on) stops the pings, and systemd restarts
/// the daemon.
pub async fn watchdog(interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    loop {
        ticks.tick().await;
        notify("WATCHDOG=1");
    }
}
