//! The connection to the container runtime: one HTTP/2 connection over its unix socket, shared by
//! every call, made when first needed and made again when it is lost.
//!
//! One connection rather than a pool: HTTP/2 multiplexes, and the runtimes (grpc-go servers)
//! run each stream in its own goroutine, so more connections would buy no parallelism on the
//! runtime's side — only another read loop and another HPACK table on each side. The one limit a
//! single connection has, flow control, is set out of the way: each stream may hold
//! [`STREAM_WINDOW`] unread, the connection [`CONNECTION_WINDOW`].

use super::message::{self, Splitter};
use bytes::Bytes;
use h2::client::SendRequest;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tonic::{Code, Status};

/// Metadata on cri-bridge's own calls (its probes, `cri-bridge probe`): a cri-bridge that
/// receives one from a `cri-bridge` executable does not count it as a caller's call.
pub const OWN_CALL: http::HeaderName = http::HeaderName::from_static("x-cri-bridge-own-call");

/// What a stream of the runtime's may send before cri-bridge has passed it on: a 1,000-container
/// list (about 650 KiB) in three windows, and at most this much held per call for a slow caller.
pub const STREAM_WINDOW: u32 = 256 << 10;
/// What all the runtime's streams together may send before cri-bridge has passed it on.
pub const CONNECTION_WINDOW: u32 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("HTTP/2 handshake failed: {0}")]
    Handshake(h2::Error),
    #[error("the connection was lost: {0}")]
    Lost(h2::Error),
}

/// A call that could not be sent: nothing of it reached the runtime.
pub struct Unsent(pub String);

#[derive(Clone)]
struct Live {
    send: SendRequest<Bytes>,
    /// Cleared by the task driving the connection when it ends.
    open: Arc<AtomicBool>,
}

pub struct Upstream {
    socket: PathBuf,
    max_header_list_size: u32,
    /// Incremented on every connection attempt; a discovery made on an older one is stale.
    connections: Arc<AtomicU64>,
    /// Woken on every connection attempt (the backend's watcher probes again).
    pub connected: Arc<Notify>,
    live: Mutex<Option<Live>>,
    connecting: tokio::sync::Mutex<()>,
}

impl Upstream {
    pub fn new(socket: PathBuf, max_header_list_size: u32) -> Upstream {
        Upstream {
            socket,
            max_header_list_size,
            connections: Arc::new(AtomicU64::new(0)),
            connected: Arc::new(Notify::new()),
            live: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// How many connection attempts have been made.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    fn current(&self) -> Option<SendRequest<Bytes>> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.as_ref().filter(|l| l.open.load(Ordering::Acquire)).map(|l| l.send.clone())
    }

    /// A handle to open streams on: the open connection's, or a new connection's.
    pub async fn sender(&self) -> Result<SendRequest<Bytes>, UpstreamError> {
        if let Some(send) = self.current() {
            return Ok(send);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(send) = self.current() {
            return Ok(send);
        }
        self.connections.fetch_add(1, Ordering::SeqCst);
        self.connected.notify_one();
        let stream = tokio::net::UnixStream::connect(&self.socket).await.map_err(UpstreamError::Connect)?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(self.max_header_list_size)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(UpstreamError::Handshake)?;
        let open = Arc::new(AtomicBool::new(true));
        let driver_open = open.clone();
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "the connection to the container runtime ended");
            }
            driver_open.store(false, Ordering::Release);
        });
        *self.live.lock().unwrap_or_else(|e| e.into_inner()) = Some(Live { send: send.clone(), open });
        Ok(send)
    }

    /// Opens a stream for `request` and sends its one message (`frame`, prefix included).
    pub async fn send(&self, request: http::Request<()>, frame: Bytes) -> Result<h2::client::ResponseFuture, Unsent> {
        let unsent = |error: &dyn std::fmt::Display| Unsent(error.to_string());
        let sender = self.sender().await.map_err(|e| unsent(&e))?;
        let mut sender = sender.ready().await.map_err(|e| unsent(&e))?;
        let (response, mut stream) = sender.send_request(request, false).map_err(|e| unsent(&e))?;
        // Buffered by h2 and sent as the runtime's window allows; an error here shows in `response`.
        let _ = stream.send_data(frame, true);
        Ok(response)
    }

    /// One unary call of cri-bridge's own (the version probe), as its message's bytes.
    /// One call of cri-bridge's own (a probe), marked with [`OWN_CALL`].
    pub async fn unary(&self, path: &str, message: &[u8], timeout: Duration, limit: usize) -> Result<Bytes, Status> {
        let call = async {
            let lost = |error: &dyn std::fmt::Display| Status::unavailable(error.to_string());
            let uri: http::Uri = format!("http://localhost{path}").parse().map_err(|e| lost(&e))?;
            let mut request = http::Request::post(uri).body(()).expect("a POST to a valid URI");
            let headers = request.headers_mut();
            headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
            headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
            headers.insert("grpc-timeout", crate::grpc::encode_timeout(timeout));
            headers.insert(OWN_CALL, http::HeaderValue::from_static("1"));
            let response = self.send(request, message::frame(message)).await.map_err(|Unsent(e)| lost(&e))?;
            let (head, mut body) = response.await.map_err(|e| lost(&e))?.into_parts();
            let (mut splitter, mut messages) = (Splitter::default(), Vec::new());
            while let Some(chunk) = body.data().await {
                let chunk = chunk.map_err(|e| lost(&e))?;
                let _ = body.flow_control().release_capacity(chunk.len());
                splitter.push(chunk, limit, &mut messages).map_err(|e| e.into_status(path))?;
            }
            splitter.finish().map_err(|e| e.into_status(path))?;
            let trailers = match Status::from_header_map(&head.headers) {
                Some(status) => Some(status),
                None => body.trailers().await.map_err(|e| lost(&e))?.and_then(|t| Status::from_header_map(&t)),
            };
            match trailers {
                Some(status) if status.code() != Code::Ok => Err(status),
                Some(_) => messages.pop().ok_or_else(|| Status::internal(format!("{path}: the answer has no message"))),
                None => Err(Status::internal(format!("{path}: the answer has no grpc-status"))),
            }
        };
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded(format!("{path}: no answer within {timeout:?}"))))
    }

    /// Drops the connection (after it failed under a call): the next call makes a new one.
    pub fn reset(&self) {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
