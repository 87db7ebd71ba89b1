//! The load client of `benches/load/`: unary gRPC calls made with the h2 crate directly, over
//! one HTTP/2 connection per peer, so that the client costs the same, and little, whatever it is
//! talking to.

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::header::{HeaderValue, CONTENT_TYPE, TE};
use std::path::Path;
use std::time::{Duration, Instant};

/// One HTTP/2 connection to a CRI socket. Its driver runs as a task of the caller's runtime.
pub struct Connection {
    send: h2::client::SendRequest<Bytes>,
}

/// A unary call ready to be made any number of times: its URI and its gRPC-framed request.
pub struct Call {
    uri: http::Uri,
    body: Bytes,
}

impl Call {
    /// `/<package>.RuntimeService/<method>` with `message` as the request.
    pub fn new(package: &str, method: &str, message: &impl prost::Message) -> Call {
        let uri = format!("http://localhost/{package}.RuntimeService/{method}");
        Call { uri: uri.parse().expect("a valid URI"), body: grpc_frame(message) }
    }
}

/// The gRPC length-prefixed message: uncompressed flag, big-endian length, protobuf bytes.
fn grpc_frame(message: &impl prost::Message) -> Bytes {
    let length = u32::try_from(message.encoded_len()).expect("a request under 4 GiB");
    let mut frame = Vec::with_capacity(5 + length as usize);
    frame.push(0);
    frame.extend_from_slice(&length.to_be_bytes());
    message.encode(&mut frame).expect("a Vec grows as needed");
    frame.into()
}

impl Connection {
    /// Connects and completes the HTTP/2 handshake. Generous receive windows: the client must
    /// not be what limits a 1,000-container list.
    pub async fn open(socket: &Path) -> Result<Connection, String> {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| format!("connect to {}: {e}", socket.display()))?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(16 << 20)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(|e| format!("HTTP/2 handshake with {}: {e}", socket.display()))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Connection { send })
    }

    /// Makes `call` once. The response body is read to the end, its flow-control capacity
    /// released as it arrives, and returned (without the gRPC frame header) only if
    /// `keep_body`; the call succeeds only if its `grpc-status` is 0.
    pub async fn call(&self, call: &Call, keep_body: bool) -> Result<Vec<u8>, String> {
        let mut send = self.send.clone().ready().await.map_err(|e| format!("connection: {e}"))?;
        let mut request = http::Request::new(());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = call.uri.clone();
        request.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        request.headers_mut().insert(TE, HeaderValue::from_static("trailers"));
        let (response, mut request_body) = send.send_request(request, false).map_err(|e| format!("send: {e}"))?;
        request_body.send_data(call.body.clone(), true).map_err(|e| format!("send body: {e}"))?;

        let response = response.await.map_err(|e| format!("response: {e}"))?;
        let (head, mut body) = response.into_parts();
        let mut kept = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| format!("response body: {e}"))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if keep_body {
                kept.extend_from_slice(&chunk);
            }
        }
        let trailers = body.trailers().await.map_err(|e| format!("trailers: {e}"))?;
        // Trailers-only responses carry the status in the headers.
        let fields = trailers.as_ref().unwrap_or(&head.headers);
        match fields.get("grpc-status").map(|v| v.as_bytes()) {
            Some(b"0") if head.status == http::StatusCode::OK => Ok(kept.split_off(kept.len().min(5))),
            Some(status) => Err(format!(
                "HTTP {}, grpc-status {}: {}",
                head.status,
                String::from_utf8_lossy(status),
                fields.get("grpc-message").map(|m| String::from_utf8_lossy(m.as_bytes())).unwrap_or_default()
            )),
            None => Err(format!("HTTP {} without a grpc-status", head.status)),
        }
    }
}

/// What one measurement window saw.
#[derive(Default)]
pub struct Window {
    pub calls: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    /// One entry per call, successful or not, in µs.
    pub latencies_us: Vec<u32>,
}

/// Keeps `in_flight` calls outstanding on `connection` for `duration`, then waits for the last
/// ones; `elapsed` runs until the last answer.
pub async fn load(connection: &Connection, call: &Call, in_flight: usize, duration: Duration) -> Window {
    let start = Instant::now();
    let deadline = start + duration;
    let mut window = Window::default();
    let mut outstanding: FuturesUnordered<_> = (0..in_flight).map(|_| timed_call(connection, call)).collect();
    while let Some((latency, result)) = outstanding.next().await {
        window.calls += 1;
        window.latencies_us.push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
        if let Err(error) = result {
            window.errors += 1;
            window.first_error.get_or_insert(error);
        }
        if Instant::now() < deadline {
            outstanding.push(timed_call(connection, call));
        }
    }
    window.elapsed = start.elapsed();
    window
}

async fn timed_call(connection: &Connection, call: &Call) -> (Duration, Result<(), String>) {
    let started = Instant::now();
    let result = connection.call(call, false).await.map(drop);
    (started.elapsed(), result)
}
