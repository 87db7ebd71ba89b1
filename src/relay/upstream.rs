//! A connection to the container runtime: one HTTP/2 connection over its unix socket, made when
//! first needed and made again when it is lost.
//!
//! Each client connection has its own (and the backend one more, for its probes), as each client
//! would have had talking to the runtime directly. A connection shared by every client was
//! cheaper by a read loop and an HPACK table, but its flow control was shared too: a caller that
//! reads nothing pins its streams' share of the connection's window, and 16 such streams
//! (`GetContainerEvents` watchers that stop reading) stopped every other client's calls and the
//! probes. Now a client that reads nothing holds up only its own calls. What this costs: one more
//! file descriptor per client connection, and an HTTP/2 handshake with the runtime on a client
//! connection's first call (crictl makes one connection per command; the kubelet keeps its own).
//!
//! Each stream may hold [`STREAM_WINDOW`] unread, the connection [`CONNECTION_WINDOW`]: the most
//! a client's runtime connection holds for a caller that takes nothing.

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
/// What all the runtime's streams of one client connection together may send before cri-bridge
/// has passed it on.
pub const CONNECTION_WINDOW: u32 = 1 << 20;

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
    /// Its number among the connections made to this endpoint (see [`Upstream::made`]).
    number: u64,
    /// Dropped with the last handle: tells the driving task to close the connection once its
    /// streams are done (h2 closes it only when polled after that, and nothing else polls it).
    _unused: Arc<tokio::sync::oneshot::Sender<()>>,
}

pub struct Upstream {
    socket: PathBuf,
    max_header_list_size: u32,
    /// Incremented on every connection attempt of this one.
    connections: AtomicU64,
    /// Incremented on every connection attempt to the endpoint (this one and its siblings): a
    /// connection numbered above a discovery's count was made after it.
    made: Arc<AtomicU64>,
    /// Woken on every connection attempt, and when the connection ends (the backend's watcher
    /// probes again).
    pub changed: Arc<Notify>,
    live: Mutex<Option<Live>>,
    connecting: tokio::sync::Mutex<()>,
}

impl Upstream {
    pub fn new(socket: PathBuf, max_header_list_size: u32) -> Upstream {
        Upstream::numbered_by(socket, max_header_list_size, Arc::new(AtomicU64::new(0)))
    }

    fn numbered_by(socket: PathBuf, max_header_list_size: u32, made: Arc<AtomicU64>) -> Upstream {
        Upstream {
            socket,
            max_header_list_size,
            connections: AtomicU64::new(0),
            made,
            changed: Arc::new(Notify::new()),
            live: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// Another connection to the same endpoint (a client connection's own), numbered with this
    /// one's.
    pub fn sibling(&self) -> Upstream {
        Upstream::numbered_by(self.socket.clone(), self.max_header_list_size, self.made.clone())
    }

    /// The runtime's socket.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// How many connection attempts this one has made.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    /// How many connection attempts this one and its siblings have made.
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::SeqCst)
    }

    /// The number of the connection open now, if one is.
    pub fn open_number(&self) -> Option<u64> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.as_ref().filter(|l| l.open.load(Ordering::Acquire)).map(|l| l.number)
    }

    fn current(&self) -> Option<(SendRequest<Bytes>, u64)> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.as_ref().filter(|l| l.open.load(Ordering::Acquire)).map(|l| (l.send.clone(), l.number))
    }

    /// A handle to open streams on, and its connection's number: the open connection's, or a
    /// new connection's.
    pub async fn sender(&self) -> Result<(SendRequest<Bytes>, u64), UpstreamError> {
        if let Some(open) = self.current() {
            return Ok(open);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(open) = self.current() {
            return Ok(open);
        }
        self.connections.fetch_add(1, Ordering::SeqCst);
        let number = self.made.fetch_add(1, Ordering::SeqCst) + 1;
        self.changed.notify_one();
        let stream = tokio::net::UnixStream::connect(&self.socket).await.map_err(UpstreamError::Connect)?;
        let stream = super::socket::hot(stream).map_err(UpstreamError::Connect)?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(self.max_header_list_size)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(UpstreamError::Handshake)?;
        let open = Arc::new(AtomicBool::new(true));
        let (driver_open, ended) = (open.clone(), self.changed.clone());
        let (unused, no_longer_used) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            tokio::pin!(connection);
            let ended_with = tokio::select! {
                result = &mut connection => result,
                _ = no_longer_used => connection.await,
            };
            if let Err(error) = ended_with {
                tracing::debug!(%error, "a connection to the container runtime ended");
            }
            driver_open.store(false, Ordering::Release);
            ended.notify_one();
        });
        let live = Live { send: send.clone(), open, number, _unused: Arc::new(unused) };
        *self.live.lock().unwrap_or_else(|e| e.into_inner()) = Some(live);
        Ok((send, number))
    }

    /// Opens a stream for `request` and sends its one message (`frame`, prefix included); with
    /// the number of the connection it went on.
    pub async fn send(
        &self,
        request: http::Request<()>,
        frame: Bytes,
    ) -> Result<(h2::client::ResponseFuture, u64), Unsent> {
        let unsent = |error: &dyn std::fmt::Display| Unsent(error.to_string());
        let (sender, number) = self.sender().await.map_err(|e| unsent(&e))?;
        let mut sender = sender.ready().await.map_err(|e| unsent(&e))?;
        let (response, mut stream) = sender.send_request(request, false).map_err(|e| unsent(&e))?;
        // Buffered by h2 and sent as the runtime's window allows; an error here shows in `response`.
        let _ = stream.send_data(frame, true);
        Ok((response, number))
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
            let (response, _) = self.send(request, message::frame(message)).await.map_err(|Unsent(e)| lost(&e))?;
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
