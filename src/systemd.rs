//! systemd: the listening socket it may pass (socket activation, `LISTEN_FDS`), and how the
//! daemon is doing (`sd_notify`, for `Type=notify` units): `READY=1` once the socket is served,
//! `WATCHDOG=1` at half the unit's `WatchdogSec=` while the accept loop and the backend's
//! watchers run, `STATUS=` as the runtime comes and goes, `RELOADING=1` around a reload (see
//! [`crate::reload`]), `STOPPING=1` when shutdown begins. Without
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

/// A question the accept loop answers whenever it turns: the watchdog's proof that it runs.
pub type Heartbeat = tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>;

/// What the daemon tells systemd while it serves, every `every`: `WATCHDOG=1` (when `ping`)
/// if the accept loop answers `accept_loop` within the period and `healthy` says the backend's
/// watchers run; and `STATUS=` whenever `status` changes (the runtime found, lost, found again).
/// A blocked event loop, a wedged accept loop or a dead watcher stops the pings, and systemd
/// restarts the daemon; a runtime that is merely away does not (it is the runtime's to restart).
pub async fn supervise(
    every: Duration,
    ping: bool,
    accept_loop: Heartbeat,
    healthy: impl Fn() -> Result<(), String>,
    status: impl Fn() -> String,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut told = String::new();
    loop {
        ticks.tick().await;
        // The accept loop has ended: shutdown has begun, and STOPPING=1 was said.
        if accept_loop.is_closed() {
            return;
        }
        let now = status();
        if now != told {
            notify(&format!("STATUS={now}"));
            told = now;
        }
        if !ping {
            continue;
        }
        let (reply, answered) = tokio::sync::oneshot::channel();
        let turning = accept_loop.try_send(reply).is_ok()
            && tokio::time::timeout(every, answered).await.is_ok_and(|answer| answer.is_ok());
        match (turning, healthy()) {
            (true, Ok(())) => notify("WATCHDOG=1"),
            (false, _) => tracing::error!("the accept loop did not answer within {every:?}: not pinging the watchdog"),
            (true, Err(why)) => tracing::error!("{why}: not pinging the watchdog"),
        }
    }
}
