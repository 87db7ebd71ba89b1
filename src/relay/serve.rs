//! The listening side: accepts connections (within the connection limits, see
//! [`super::admission`]: the main socket keeps a share the scoped sockets cannot take, and at a
//! limit an idle connection is sent away to make room), speaks HTTP/2 on each through the front
//! door, and hands every stream to what it serves ([`Calls`]: the forwarder) as a task of its
//! own, with an [`Arrival`] it marks once the stream's request has arrived (until then the
//! stream does not make its connection busy); on shutdown, drains. It knows connections and
//! HTTP/2, not what a call means.
//!
//! Each connection is watched: a PING every `limits.keepalive` that must be answered within
//! `limits.keepalive_timeout` (a peer that stopped reading is cut off), GOAWAY after
//! `limits.idle_timeout` with no call open, and GOAWAY `ENHANCE_YOUR_CALM` for a client that
//! cancels more than `limits.resets_per_minute` calls (each cancelled call opened a stream to the
//! runtime: a reset flood is work for both).

use super::admission::{Activity, Admission, Admit, Admitted, Pool};
use crate::budget::Charge;
use crate::config::Limits;
use crate::front_door::FrontDoor;
use crate::grpc::DRAIN_TIMEOUT;
use crate::http2::MAX_HEADER_LIST_SIZE;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use super::admission::Arrival;

/// How long a new connection may take to send the HTTP/2 preface and settings (every client
/// sends them at once).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a connection's idleness is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long a connection sent away to make room (see [`super::admission`]) may take to close;
/// then it is dropped, whatever its client does.
const RECLAIM_GRACE: Duration = Duration::from_secs(2);

/// How long a new connection waits for the slot of one sent away; then it is closed as over the
/// limit.
const RECLAIM_WAIT: Duration = Duration::from_secs(5);

/// What the relay serves: told of each connection, and handed each call on it.
pub trait Calls: Send + Sync + 'static {
    /// What one connection's calls share.
    type Connection: Send + Sync + 'static;

    /// A new connection from `stream`'s peer, and what its unfinished header blocks may hold.
    fn connected(&self, stream: &UnixStream) -> (Arc<Self::Connection>, Charge);

    /// Serves one call to its end; true when the caller cancelled it (reset its stream).
    /// `arrival` is told when the call's request has arrived (until then the stream does not
    /// make the connection busy), and kept to the call's end.
    fn call(
        self: Arc<Self>,
        connection: Arc<Self::Connection>,
        request: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
        arrival: Arrival,
    ) -> impl Future<Output = bool> + Send;

    /// A connection was closed at once by the limit named (`limits.connections`, …).
    fn refused(&self, limit: &'static str);
}

/// Serves each listener's `calls` (one socket per policy: the main socket first, then the scoped
/// ones, which share a pool of at most `limits.scoped_connections` connections; see
/// [`super::admission`]), answering each of `heartbeats` as it turns, until
/// `shutdown` completes; then tells every client to go away (HTTP/2 GOAWAY) and lets calls in
/// flight finish for up to [`DRAIN_TIMEOUT`]; a client that holds its connection longer is cut off.
pub async fn serve<C: Calls>(
    listeners: Vec<(UnixListener, Arc<C>)>,
    limits: Limits,
    mut heartbeats: tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<()>>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let admission = Admission::new(limits.connections, limits.scoped_connections, limits.connections_per_uid);
    let mut next_socket = 0;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            // Accepted here only, when this loop is ready for it: a connection the kernel holds
            // in a socket's backlog at shutdown is left there for the next process (socket
            // activation), never accepted and dropped.
            (socket, accepted) = accept_any(&listeners, &mut next_socket) => match accepted {
                Ok((stream, _)) => {
                    let calls = listeners[socket].1.clone();
                    let pool = if socket == 0 { Pool::Main } else { Pool::Scoped };
                    // The uid alone first (one getsockopt): a refused peer costs no /proc read.
                    let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
                    match admission.admit(pool, uid) {
                        Ok(Admit::Now(admitted)) => {
                            connections.spawn(connection(stream, admitted, calls, limits, stopping.clone()));
                        }
                        // An idle connection was sent away: this one is served once it has gone.
                        Ok(Admit::After(slot, limit)) => {
                            let stopping = stopping.clone();
                            connections.spawn(async move {
                                match tokio::time::timeout(RECLAIM_WAIT, slot).await {
                                    Ok(Ok(admitted)) => connection(stream, admitted, calls, limits, stopping).await,
                                    _ => calls.refused(limit.label()),
                                }
                            });
                        }
                        Err(refused) => calls.refused(refused.label()),
                    }
                }
                Err(error) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // Reap connections that ended, so the set holds only live ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            // The watchdog asks whether this loop still turns (see `systemd::supervise`).
            Some(reply) = heartbeats.recv() => {
                let _ = reply.send(());
            }
            () = &mut shutdown => break,
        }
    }
    drop(listeners);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!("connections still open {DRAIN_TIMEOUT:?} after shutdown began; closing them");
        connections.abort_all();
    }
    Ok(())
}

/// The next connection on any of `listeners`, and which socket it came on; the sockets are
/// asked in turn from `next` (moved past the one that answered), so a flood on one socket does
/// not keep another's connections waiting. Cancel-safe: a connection is taken from a socket only
/// when this is polled and it is ready.
fn accept_any<'a, C>(
    listeners: &'a [(UnixListener, Arc<C>)],
    next: &'a mut usize,
) -> impl Future<Output = (usize, std::io::Result<(UnixStream, tokio::net::unix::SocketAddr)>)> + 'a {
    std::future::poll_fn(move |cx| {
        let count = listeners.len();
        for offset in 0..count {
            let socket = (*next + offset) % count;
            if let std::task::Poll::Ready(accepted) = listeners[socket].0.poll_accept(cx) {
                *next = (socket + 1) % count;
                return std::task::Poll::Ready((socket, accepted));
            }
        }
        std::task::Poll::Pending
    })
}

/// What a connection's calls report to it.
struct OpenCalls {
    /// Calls open, streams waiting for their request, and since when no call is open (the
    /// admission reads it too).
    activity: Arc<Activity>,
    /// Calls the client cancelled in the current minute.
    resets: AtomicU32,
    /// Woken when `resets` passes the limit.
    too_many_resets: Notify,
}

/// One client connection, until the client closes it, or it has drained after shutdown; its
/// slot is given back (or passed on) when it ends.
async fn connection<C: Calls>(
    stream: UnixStream,
    admitted: Admitted,
    calls: Arc<C>,
    limits: Limits,
    stopping: watch::Receiver<bool>,
) {
    // Once per connection (who is at the other end, its own runtime connections), so that
    // calls pay only a count.
    let (client, held) = calls.connected(&stream);
    let activity = admitted.activity().clone();
    match super::socket::hot(stream) {
        Ok(socket) => {
            terminated(FrontDoor::new(socket).with_budget(held), calls, client, activity, limits, stopping).await
        }
        Err(error) => tracing::debug!(%error, "a client connection could not be registered for reading"),
    }
    drop(admitted);
}

/// A connection served through the terminating path: HTTP/2 read and answered by `h2`.
async fn terminated<C: Calls, T>(
    io: T,
    calls: Arc<C>,
    client: Arc<C::Connection>,
    activity: Arc<Activity>,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let handshake = h2::server::Builder::new()
        // hyper's default is 16 KiB; grpc-go servers (containerd, CRI-O) take 16 MiB, and a
        // caller's metadata (trace context, baggage) may pass 16 KiB. 1 MiB serves those and
        // still bounds what one stream's header block can make us hold.
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .max_concurrent_streams(limits.streams_per_connection)
        .handshake::<_, bytes::Bytes>(io);
    // Finished even when shutdown begins meanwhile: the client may have sent its calls already,
    // and is told to go away (GOAWAY, below) rather than cut off with them unanswered.
    let mut connection = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => {
            tracing::debug!(%error, "HTTP/2 handshake with a client failed");
            return;
        }
        Err(_) => {
            tracing::debug!("a client sent no HTTP/2 preface within {HANDSHAKE_TIMEOUT:?}");
            return;
        }
    };
    let open = Arc::new(OpenCalls { activity, resets: AtomicU32::new(0), too_many_resets: Notify::new() });
    let mut keepalive = connection.ping_pong().map(|pings| AbortOnDrop(tokio::spawn(keep_alive(pings, limits))));
    let peer_gone = async {
        match keepalive {
            Some(AbortOnDrop(ref mut task)) => {
                let _ = task.await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(peer_gone);
    let mut checks = tokio::time::interval(CHECK_EVERY.min(limits.idle_timeout));
    let mut minute = Instant::now();
    let mut draining = false;
    // Once sent away to make room for a new connection: when it must be gone by.
    let mut reclaimed_by: Option<Instant> = None;
    let activity = open.activity.clone();
    let reclaimed = activity.reclaimed();
    tokio::pin!(reclaimed);
    loop {
        tokio::select! {
            next = connection.accept() => match next {
                Some(Ok((request, respond))) => {
                    // Waiting for its request, not yet a call: told by the call when it arrives,
                    // counted out when the task ends (also when it is aborted).
                    let arrival = open.activity.stream_accepted();
                    let (calls, client, open) = (calls.clone(), client.clone(), open.clone());
                    tokio::spawn(async move {
                        let reset = calls.call(client, request, respond, arrival).await;
                        if reset && open.resets.fetch_add(1, Ordering::Relaxed) + 1 == limits.resets_per_minute {
                            open.too_many_resets.notify_one();
                        }
                    });
                }
                Some(Err(error)) => {
                    tracing::debug!(%error, "client connection ended with an error");
                    return;
                }
                None => return,
            },
            () = &mut peer_gone => {
                tracing::debug!(
                    "a client did not answer a PING within {:?} (limits.keepalive_timeout_seconds): closing",
                    limits.keepalive_timeout
                );
                return;
            }
            () = open.too_many_resets.notified() => {
                tracing::warn!(
                    "a client cancelled more than {} calls in a minute (limits.resets_per_minute): closing its connection",
                    limits.resets_per_minute
                );
                connection.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                draining = true;
            }
            () = &mut reclaimed, if reclaimed_by.is_none() => {
                // A new connection takes this one's slot. Idle, it is told at once which calls
                // were seen (none since, so a client retries any it sent meanwhile elsewhere),
                // and streams still waiting for their request end with it; a call that raced
                // in may finish within the grace.
                tracing::debug!("an idle connection makes room for a new one at a connection limit: GOAWAY");
                if open.activity.open_calls() == 0 {
                    connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                } else {
                    connection.graceful_shutdown();
                }
                draining = true;
                reclaimed_by = Some(Instant::now() + RECLAIM_GRACE);
            }
            () = sleep_until(reclaimed_by), if reclaimed_by.is_some() => {
                tracing::debug!("a connection sent away to make room did not close within {RECLAIM_GRACE:?}: dropped");
                return;
            }
            _ = checks.tick() => {
                if minute.elapsed() >= Duration::from_secs(60) {
                    minute = Instant::now();
                    open.resets.store(0, Ordering::Relaxed);
                }
                if !draining && open.activity.idle_for() >= limits.idle_timeout {
                    tracing::debug!("a connection idle for {:?} (limits.idle_timeout_seconds): GOAWAY", limits.idle_timeout);
                    draining = true;
                    connection.graceful_shutdown();
                }
            }
            _ = stopping.wait_for(|stop| *stop), if !draining => {
                draining = true;
                connection.graceful_shutdown();
            }
        }
    }
}

/// Completes at `at`; never when `at` is `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// PINGs the client every `limits.keepalive`; returns when one goes unanswered.
async fn keep_alive(mut pings: h2::PingPong, limits: Limits) {
    loop {
        tokio::time::sleep(limits.keepalive).await;
        match tokio::time::timeout(limits.keepalive_timeout, pings.ping(h2::Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            _ => return,
        }
    }
}
