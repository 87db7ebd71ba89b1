//! systemd: the listening socket it may pass (socket activation: `LISTEN_FDS`, when `LISTEN_PID`
//! is ours), and how the daemon is doing (`sd_notify`, for `Type=notify` units): `READY=1` once
//! the socket is served, `WATCHDOG=1` at half the unit's `WatchdogSec=` while the accept loop and
//! the backend's watchers run, `STATUS=` as the runtime comes and goes, `RELOADING=1` around a
//! reload (see [`crate::reload`]), `STOPPING=1` when shutdown begins. Without `NOTIFY_SOCKET`
//! (not started by systemd) every notification does nothing.
//!
//! The protocol is one datagram per message to the unix socket `NOTIFY_SOCKET` names (a path,
//! or `@name` in the abstract namespace), written here rather than taken from a crate: it is a
//! dozen lines of std.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Why the socket systemd passed cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error("LISTEN_FDS={0:?}: not a number of file descriptors")]
    Count(String),
    #[error("LISTEN_FDS: fd 3 is not a listening unix stream socket ({0}); refusing to start")]
    NotAListener(String),
}

/// The listening socket systemd passed, if any: served instead of binding `listen.path`, so that
/// the socket, its mode and group are the `.socket` unit's and connections wait in its backlog
/// while cri-bridge restarts. As systemd's protocol says, the fds are ours only when
/// `LISTEN_PID` is our pid; otherwise (absent, or another process's) `LISTEN_FDS` is ignored,
/// with a log line, and `listen.path` is bound. A passed fd that is not a listening unix stream
/// socket is an error: served, it would accept nothing while systemd hears READY=1. Read once,
/// before any thread starts (the variables are removed as they are read, so children do not
/// inherit them).
pub fn activated_listener() -> Result<Option<std::os::unix::net::UnixListener>, ActivationError> {
    let Some(count) = std::env::var_os("LISTEN_FDS") else { return Ok(None) };
    let listen_pid = std::env::var("LISTEN_PID").ok();
    if listen_pid.as_deref().and_then(|pid| pid.trim().parse::<u32>().ok()) != Some(std::process::id()) {
        tracing::warn!(
            listen_pid = listen_pid.as_deref().unwrap_or("(unset)"),
            pid = std::process::id(),
            "LISTEN_FDS is set but LISTEN_PID is not this process: the fds are not ours; binding listen.path"
        );
        for name in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"] {
            std::env::remove_var(name);
        }
        return Ok(None);
    }
    if count.to_str().and_then(|n| n.trim().parse::<u32>().ok()).is_none() {
        return Err(ActivationError::Count(count.to_string_lossy().into_owned()));
    }
    // listenfd reads the variables again (LISTEN_PID is ours) and removes them.
    let mut passed = listenfd::ListenFd::from_env();
    std::env::remove_var("LISTEN_FDNAMES");
    if passed.len() > 1 {
        tracing::warn!(passed = passed.len(), "systemd passed several sockets; serving the first");
    }
    // It checks that fd 3 is a unix stream socket, and makes it ours (close-on-exec).
    let listener = match passed.take_unix_listener(0) {
        Ok(Some(listener)) => listener,
        Ok(None) => return Ok(None),
        Err(error) => return Err(ActivationError::NotAListener(error.to_string())),
    };
    // And here that it is one still, and listening: a connected or unlistened socket passes
    // listenfd's check, and accept() on it fails at every turn of the accept loop.
    let socket = socket2::SockRef::from(&listener);
    let what = |error: std::io::Error| ActivationError::NotAListener(error.to_string());
    if socket.domain().map_err(what)? != socket2::Domain::UNIX {
        return Err(ActivationError::NotAListener("not a unix-domain socket".into()));
    }
    if socket.r#type().map_err(what)? != socket2::Type::STREAM {
        return Err(ActivationError::NotAListener("not a stream socket".into()));
    }
    if !socket.is_listener().map_err(what)? {
        return Err(ActivationError::NotAListener("not listening (SO_ACCEPTCONN is 0)".into()));
    }
    Ok(Some(listener))
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
