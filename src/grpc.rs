//! gRPC at the byte level: a codec that passes message bytes through untouched, a server that
//! routes every CRI path of the enabled versions to one [`Handler`], and a unix-socket channel.
//!
//! Both the proxy (`forward`) and the in-memory runtime (`memory`) are handlers: neither needs a
//! generated service per version, because the schema tables say which RPCs exist and stream.

use crate::api::RpcInfo;
use crate::version::CriVersion;
use bytes::{Buf, BufMut, Bytes};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Request, Response, Status};

/// The messages of a server-streaming call.
pub type ByteStream = BoxStream<'static, Result<Bytes, Status>>;

/// One RPC of one version.
#[derive(Clone, Copy, Debug)]
pub struct Rpc {
    pub version: CriVersion,
    pub info: &'static RpcInfo,
}

impl Rpc {
    /// Finds the RPC a gRPC path names: `/runtime.v1.RuntimeService/Version`.
    pub fn from_path(path: &str) -> Option<Rpc> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        let (package, service) = service.rsplit_once('.')?;
        let version = CriVersion::from_package(package)?;
        let info = version.schema().rpc(service, method)?;
        Some(Rpc { version, info })
    }

    /// The same method in another version, if that version has it.
    pub fn in_version(self, version: CriVersion) -> Option<Rpc> {
        let info = version.schema().rpc(self.info.service, self.info.method)?;
        Some(Rpc { version, info })
    }

    pub fn path(&self) -> String {
        format!("/{}.{}/{}", self.version.package(), self.info.service, self.info.method)
    }

    /// `RuntimeService/Version`: how the RPC is named in messages, version aside.
    pub fn name(&self) -> String {
        format!("{}/{}", self.info.service, self.info.method)
    }
}

/// Answers CRI calls as bytes.
pub trait Handler: Send + Sync + 'static {
    fn unary(self: Arc<Self>, rpc: Rpc, request: Request<Bytes>)
        -> BoxFuture<'static, Result<Response<Bytes>, Status>>;
    fn server_streaming(
        self: Arc<Self>,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> BoxFuture<'static, Result<Response<ByteStream>, Status>>;
}

/// Passes message bytes through without decoding them.
#[derive(Clone, Copy, Default, Debug)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A tower service that serves the Runtime and Image services of `versions` through `handler`.
pub struct CriServer<H> {
    handler: Arc<H>,
    versions: Arc<[CriVersion]>,
    max_message_size: usize,
}

impl<H> Clone for CriServer<H> {
    fn clone(&self) -> Self {
        CriServer {
            handler: self.handler.clone(),
            versions: self.versions.clone(),
            max_message_size: self.max_message_size,
        }
    }
}

impl<H: Handler> CriServer<H> {
    pub fn new(handler: Arc<H>, versions: &[CriVersion], max_message_size: usize) -> Self {
        CriServer { handler, versions: versions.into(), max_message_size }
    }
}

impl<H, B> tower::Service<http::Request<B>> for CriServer<H>
where
    H: Handler,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let rpc = Rpc::from_path(request.uri().path()).filter(|rpc| self.versions.contains(&rpc.version));
        let Some(rpc) = rpc else {
            let status = Status::unimplemented(format!("unknown service or method {}", request.uri().path()));
            return Box::pin(async move { Ok(status.into_http()) });
        };
        let handler = self.handler.clone();
        let mut grpc = tonic::server::Grpc::new(RawCodec)
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size);
        Box::pin(async move {
            let response = if rpc.info.server_streaming {
                let service = tower::service_fn(move |req| handler.clone().server_streaming(rpc, req));
                grpc.server_streaming(service, request).await
            } else {
                let service = tower::service_fn(move |req| handler.clone().unary(rpc, req));
                grpc.unary(service, request).await
            };
            Ok(response)
        })
    }
}

/// A lazily connecting channel to a unix socket. `on_connect` runs for every connection attempt,
/// so the caller can tell when the connection was re-established.
pub fn unix_channel(path: PathBuf, on_connect: impl Fn() + Send + Sync + 'static) -> tonic::transport::Channel {
    let on_connect = Arc::new(on_connect);
    // The URI is required by the API but unused: the connector always dials the socket.
    tonic::transport::Endpoint::from_static("http://cri.invalid").connect_with_connector_lazy(tower::service_fn(
        move |_: http::Uri| {
            let path = path.clone();
            on_connect();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        },
    ))
}

/// A byte-level client for one channel.
#[derive(Clone)]
pub struct CriClient {
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
}

impl CriClient {
    pub fn new(channel: tonic::transport::Channel, max_message_size: usize) -> Self {
        let grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(max_message_size)
            .max_encoding_message_size(max_message_size);
        CriClient { grpc }
    }

    pub async fn unary(&self, rpc: Rpc, request: Request<Bytes>) -> Result<Response<Bytes>, Status> {
        let mut grpc = self.grpc.clone();
        grpc.ready().await.map_err(|e| Status::unavailable(format!("backend not ready: {e}")))?;
        grpc.unary(request, path_of(rpc)?, RawCodec).await.map_err(deadline_as_deadline)
    }

    pub async fn server_streaming(
        &self,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> Result<Response<tonic::codec::Streaming<Bytes>>, Status> {
        let mut grpc = self.grpc.clone();
        grpc.ready().await.map_err(|e| Status::unavailable(format!("backend not ready: {e}")))?;
        grpc.server_streaming(request, path_of(rpc)?, RawCodec).await.map_err(deadline_as_deadline)
    }
}

/// The caller's `grpc-timeout` (`<up to 8 digits><H|M|S|m|u|n>`); `None` when absent or invalid.
pub fn timeout_of(headers: &http::HeaderMap) -> Option<std::time::Duration> {
    let text = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    // ASCII digits only: Rust's integer parse would also take a sign (`+5S`).
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    use std::time::Duration;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

/// `timeout` as `grpc-timeout`: the finest unit whose value fits the 8 digits allowed.
pub fn encode_timeout(timeout: std::time::Duration) -> http::HeaderValue {
    const MAX: u128 = 99_999_999;
    let text = if timeout.as_micros() <= MAX {
        format!("{}u", timeout.as_micros())
    } else if timeout.as_millis() <= MAX {
        format!("{}m", timeout.as_millis())
    } else {
        format!("{}S", (timeout.as_secs() as u128).min(MAX))
    };
    http::HeaderValue::try_from(text).expect("digits and a unit make a valid header value")
}

/// tonic's channel enforces the forwarded `grpc-timeout` itself and reports its expiry as
/// CANCELLED; the caller's deadline expired, which gRPC (and the kubelet) call DEADLINE_EXCEEDED.
fn deadline_as_deadline(status: Status) -> Status {
    if caused_by::<tonic::TimeoutExpired>(&status) {
        return Status::deadline_exceeded("deadline exceeded before the container runtime answered");
    }
    status
}

/// True when an error of type `E` is somewhere in the status's chain of sources.
fn caused_by<E: std::error::Error + 'static>(status: &Status) -> bool {
    source_of::<E>(status).is_some()
}

/// The first error of type `E` in the status's chain of sources.
fn source_of<E: std::error::Error + 'static>(status: &Status) -> Option<&E> {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(found) = error.downcast_ref::<E>() {
            return Some(found);
        }
        source = error.source();
    }
    None
}

fn path_of(rpc: Rpc) -> Result<http::uri::PathAndQuery, Status> {
    rpc.path().parse().map_err(|_| Status::internal(format!("invalid gRPC path {}", rpc.path())))
}

/// How long calls in flight may take to finish after shutdown begins.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves `server` over HTTP/2 on `listener` until `shutdown` completes, then lets calls in
/// flight finish for up to [`DRAIN_TIMEOUT`]; a client that holds its connection longer is cut off.
///
/// A plain hyper server rather than tonic's: tonic's would enforce each call's `grpc-timeout`
/// itself and answer CANCELLED, while the runtime, which receives the same deadline, answers
/// DEADLINE_EXCEEDED — and the runtime's status is the one to pass on.
pub async fn serve<H: Handler>(
    listener: tokio::net::UnixListener,
    server: CriServer<H>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http2 = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    // hyper's default is 16 KiB; grpc-go servers (containerd, CRI-O) take 16 MiB, and a caller's
    // metadata (trace context, baggage) may pass 16 KiB. 1 MiB serves those and still bounds
    // what one stream's header block can make us hold.
    http2.max_header_list_size(crate::http2::MAX_HEADER_LIST_SIZE);
    tokio::pin!(shutdown);
    // Held here, not detached: dropping this future (aborting its task) ends every connection
    // at once, as a killed process would (the fault tests kill a runtime so).
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(server.clone());
        let stream = crate::front_door::FrontDoor::new(stream);
        let connection = http2.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let connection = connections.watch(connection);
        tasks.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let drained = async {
        connections.shutdown().await;
        while tasks.join_next().await.is_some() {}
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("connections still open {DRAIN_TIMEOUT:?} after shutdown began; closing them");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{encode_timeout, timeout_of};
    use std::time::Duration;

    fn timeout(text: Option<&str>) -> Option<Duration> {
        let mut headers = http::HeaderMap::new();
        if let Some(text) = text {
            headers.insert("grpc-timeout", text.parse().expect("a valid header value"));
        }
        timeout_of(&headers)
    }

    #[test]
    fn a_timeout_is_sent_in_the_finest_unit_that_fits_and_reads_back() {
        for (sent, text) in [
            (Duration::from_micros(1500), "1500u"),
            (Duration::from_secs(99), "99000000u"),
            (Duration::from_secs(100), "100000m"),
            (Duration::from_secs(200_000), "200000S"),
            (Duration::from_secs(u64::MAX), "99999999S"),
        ] {
            assert_eq!(encode_timeout(sent), text);
            let back = timeout(Some(text)).expect("reads back");
            assert!(back <= sent, "{text}");
        }
    }

    #[test]
    fn grpc_timeout_reads_as_the_grpc_http2_spec_says() {
        let cases = [
            (Some("2H"), Some(Duration::from_secs(2 * 3600))),
            (Some("3M"), Some(Duration::from_secs(3 * 60))),
            (Some("4S"), Some(Duration::from_secs(4))),
            (Some("5m"), Some(Duration::from_millis(5))),
            (Some("6u"), Some(Duration::from_micros(6))),
            (Some("7n"), Some(Duration::from_nanos(7))),
            (Some("99999999H"), Some(Duration::from_secs(99_999_999 * 3600))),
            (Some("0m"), Some(Duration::ZERO)),
            // At most 8 digits, digits only, a known unit.
            (Some("123456789S"), None),
            (Some("+5S"), None),
            (Some("-5S"), None),
            (Some("1.5S"), None),
            (Some("5s"), None),
            (Some("5"), None),
            (Some("S"), None),
            (Some(""), None),
            (None, None),
        ];
        for (text, expect) in cases {
            assert_eq!(timeout(text), expect, "{text:?}");
        }
    }
}
