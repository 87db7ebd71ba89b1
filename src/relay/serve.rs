//! The listening side: accepts connections, speaks HTTP/2 on each through the front door, and
//! hands every stream to the forwarder as a task of its own; on shutdown, drains.

use crate::callers::Peer;
use crate::forward::Forwarder;
use crate::front_door::{FrontDoor, MAX_HEADER_LIST_SIZE};
use crate::grpc::DRAIN_TIMEOUT;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Streams one client connection may have open at once. The kubelet has a few dozen at most
/// (one per pod worker and probe); the bound keeps one client from holding unbounded state.
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// How long a new connection may take to send the HTTP/2 preface and settings (every client
/// sends them at once).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `forwarder` on `listener` (answering each of `heartbeats` as it turns) until
/// `shutdown` completes, then tells every client to go
/// away (HTTP/2 GOAWAY) and lets calls in flight finish for up to [`DRAIN_TIMEOUT`]; a client
/// that holds its connection longer is cut off.
pub async fn serve(
    listener: UnixListener,
    forwarder: Arc<Forwarder>,
    mut heartbeats: tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<()>>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, forwarder.clone(), stopping.clone()));
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

/// One client connection, until the client closes it, or it has drained after shutdown.
async fn connection(stream: UnixStream, forwarder: Arc<Forwarder>, mut stopping: watch::Receiver<bool>) {
    // Who is at the other end: once per connection, so calls pay only a count.
    let caller = forwarder.callers().connected(Peer::of(&stream));
    let handshake = h2::server::Builder::new()
        // hyper's default is 16 KiB; grpc-go servers (containerd, CRI-O) take 16 MiB, and a
        // caller's metadata (trace context, baggage) may pass 16 KiB. 1 MiB serves those and
        // still bounds what one stream's header block can make us hold.
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .handshake::<_, bytes::Bytes>(FrontDoor::new(stream));
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
    let mut draining = false;
    loop {
        tokio::select! {
            next = connection.accept() => match next {
                Some(Ok((request, respond))) => {
                    tokio::spawn(forwarder.clone().serve_call(caller.clone(), request, respond));
                }
                Some(Err(error)) => {
                    tracing::debug!(%error, "client connection ended with an error");
                    return;
                }
                None => return,
            },
            _ = stopping.wait_for(|stop| *stop), if !draining => {
                draining = true;
                connection.graceful_shutdown();
            }
        }
    }
}
