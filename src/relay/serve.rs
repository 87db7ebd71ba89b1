//! The listening side: accepts connections (within the connection limits, see
//! [`super::admission`]), speaks HTTP/2 on each through the front door, and hands every stream to
//! what it serves ([`Calls`]: the forwarder) as a task of its own; on shutdown, drains. It knows
//! connections and HTTP/2, not what a call means.
//!
//! Each connection is watched: a PING every `limits.keepalive` that must be answered within
//! `limits.keepalive_timeout` (a peer that stopped reading is cut off), GOAWAY after
//! `limits.idle_timeout` with no call open, and GOAWAY `ENHANCE_YOUR_CALM` for a client that
//! cancels more than `limits.resets_per_minute` calls (each cancelled call opened a stream to the
//! runtime: a reset flood is work for both).

use super::admission::Admission;
use crate::budget::Charge;
use crate::config::Limits;
use crate::front_door::FrontDoor;
use crate::grpc::DRAIN_TIMEOUT;
use crate::http2::MAX_HEADER_LIST_SIZE;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How long a new connection may take to send the HTTP/2 preface and settings (every client
/// sends them at once).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a connection's idleness is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What the relay serves: told of each connection, and handed each call on it.
pub trait Calls: Send + Sync + 'static {
    /// What one connection's calls share.
    type Connection: Send + Sync + 'static;

    /// A new connection from `stream`'s peer, and what its unfinished header blocks may hold.
    fn connected(&self, stream: &UnixStream) -> (Arc<Self::Connection>, Charge);

    /// Serves one call to its end; true when the caller cancelled it (reset its stream).
    fn call(
        self: Arc<Self>,
        connection: Arc<Self::Connection>,
        request: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
    ) -> impl Future<Output = bool> + Send;

    /// A connection was closed at once by the limit named (`limits.connections`, …).
    fn refused(&self, limit: &'static str);

    /// Decides each stream of a spliced connection.
    type Router: super::splice::Router;

    /// Whether `connection` is spliced (`super::splice`): the runtime's socket, and the router
    /// of its streams; `None` serves it through the terminating path alone.
    fn splice(
        self: &Arc<Self>,
        connection: &Arc<Self::Connection>,
    ) -> impl Future<Output = Option<(std::path::PathBuf, Self::Router)>> + Send;
}

/// Serves `calls` on `listener` (answering each of `heartbeats` as it turns) until
/// `shutdown` completes, then tells every client to go
/// away (HTTP/2 GOAWAY) and lets calls in flight finish for up to [`DRAIN_TIMEOUT`]; a client
/// that holds its connection longer is cut off.
pub async fn serve<C: Calls>(
    listener: UnixListener,
    calls: Arc<C>,
    limits: Limits,
    mut heartbeats: tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<()>>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let admission = Admission::new(limits.connections, limits.connections_per_uid);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // The uid alone first (one getsockopt): a refused peer costs no /proc read.
                    let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
                    match admission.admit(uid) {
                        Ok(admitted) => {
                            let watched = connection(stream, calls.clone(), limits, stopping.clone());
                            connections.spawn(async move {
                                watched.await;
                                drop(admitted);
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
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!("connections still open {DRAIN_TIMEOUT:?} after shutdown began; closing them");
        connections.abort_all();
    }
    Ok(())
}

/// What a connection's calls report to it.
#[derive(Default)]
struct OpenCalls {
    open: AtomicUsize,
    /// Calls the client cancelled in the current minute.
    resets: AtomicU32,
    /// Woken when `resets` passes the limit.
    too_many_resets: Notify,
}

/// One client connection, until the client closes it, or it has drained after shutdown.
async fn connection<C: Calls>(stream: UnixStream, calls: Arc<C>, limits: Limits, stopping: watch::Receiver<bool>) {
    // Once per connection (who is at the other end, its own runtime connections), so that
    // calls pay only a count.
    let (client, held) = calls.connected(&stream);
    if let Some((socket, router)) = calls.splice(&client).await {
        // The runtime connection is made once the client has sent something (its preface):
        // a client that connects and sends nothing costs the runtime nothing.
        if tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.readable()).await.is_err() {
            tracing::debug!("a client sent no HTTP/2 preface within {HANDSHAKE_TIMEOUT:?}");
            return;
        }
        match UnixStream::connect(&socket).await {
            Ok(runtime) => return spliced(stream, runtime, router, (calls, client, held), limits, stopping).await,
            Err(error) => {
                tracing::debug!(%error, socket = %socket.display(), "cannot splice: the terminating path serves the connection")
            }
        }
    }
    terminated(FrontDoor::new(stream).with_budget(held), calls, client, limits, stopping).await
}

/// A spliced connection (`super::splice`), its intercepted calls served by [`terminated`] over
/// an in-process connection.
async fn spliced<C: Calls>(
    stream: UnixStream,
    runtime: UnixStream,
    router: C::Router,
    (calls, client, held): (Arc<C>, Arc<C::Connection>, Charge),
    limits: Limits,
    stopping: watch::Receiver<bool>,
) {
    let (near, far) = tokio::io::duplex(64 << 10);
    // The in-process connection lives as long as the splice: never idle, never pinged.
    let inner_limits = Limits { idle_timeout: Duration::from_secs(365 * 24 * 3600), ..limits };
    let _server = AbortOnDrop(tokio::spawn(terminated(far, calls, client, inner_limits, stopping.clone())));
    let Ok((inner, driver)) =
        h2::client::Builder::new().max_header_list_size(MAX_HEADER_LIST_SIZE).handshake::<_, Bytes>(near).await
    else {
        return;
    };
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = driver.await;
    }));
    tracing::debug!("a client connection is spliced to a runtime connection of its own");
    let spliced = super::splice::Spliced { client: stream, runtime, inner, held };
    super::splice::splice(spliced, router, limits, stopping).await;
}

/// A connection served through the terminating path: HTTP/2 read and answered by `h2`.
async fn terminated<C: Calls, T>(
    io: T,
    calls: Arc<C>,
    client: Arc<C::Connection>,
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
    let open = Arc::new(OpenCalls::default());
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
    let mut idle_since = Instant::now();
    let mut minute = Instant::now();
    let mut draining = false;
    loop {
        tokio::select! {
            next = connection.accept() => match next {
                Some(Ok((request, respond))) => {
                    idle_since = Instant::now();
                    open.open.fetch_add(1, Ordering::Relaxed);
                    let (calls, client, open) = (calls.clone(), client.clone(), open.clone());
                    tokio::spawn(async move {
                        let _open = Open(&open);
                        let reset = calls.call(client, request, respond).await;
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
            _ = checks.tick() => {
                if minute.elapsed() >= Duration::from_secs(60) {
                    minute = Instant::now();
                    open.resets.store(0, Ordering::Relaxed);
                }
                if open.open.load(Ordering::Relaxed) > 0 {
                    idle_since = Instant::now();
                } else if !draining && idle_since.elapsed() >= limits.idle_timeout {
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

/// A call open on a connection, until dropped (also when its task is aborted).
struct Open<'a>(&'a OpenCalls);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
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
