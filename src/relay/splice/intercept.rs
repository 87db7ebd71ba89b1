//! An intercepted stream: its request sent through cri-bridge's terminating path (an in-process
//! HTTP/2 connection to the same server every unspliced connection gets), and its answer handed
//! back to the splice as header blocks of cri-bridge's own and DATA, one piece at a time.

use super::hpack;
use bytes::Bytes;
use h2::client::SendRequest;
use http::HeaderMap;
use tokio::sync::{mpsc, oneshot};

/// What an intercepted stream's task hands the splice.
pub enum Event {
    /// A header block to write (the answer's head, or its trailers when `end`).
    Headers { block: Vec<u8>, end: bool },
    /// Answer bytes; `written` is told once they are written, and only then is more read.
    Data { bytes: Bytes, written: oneshot::Sender<()> },
    /// The answer ended without trailers.
    End,
    /// The answer failed: reset the client's stream with this code.
    Reset(u32),
}

/// A request head as the terminating path takes it, from the client's decoded fields; `Err`
/// names the field that is not a valid HTTP header.
pub fn request_from(fields: &hpack::Fields) -> Result<http::Request<()>, String> {
    let mut request = http::Request::new(());
    *request.method_mut() = http::Method::POST;
    for (name, value) in fields.iter() {
        let shown = || String::from_utf8_lossy(name).into_owned();
        match name {
            b":path" => {
                let path = std::str::from_utf8(value).map_err(|_| format!("{}: not UTF-8", shown()))?;
                *request.uri_mut() =
                    format!("http://localhost{path}").parse().map_err(|e| format!("{}: {e}", shown()))?;
            }
            b":method" => {
                *request.method_mut() = http::Method::from_bytes(value).map_err(|e| format!("{}: {e}", shown()))?;
            }
            // The in-process connection's own.
            b":authority" | b":scheme" => {}
            _ => {
                let name = http::HeaderName::from_bytes(name).map_err(|e| format!("{}: {e}", shown()))?;
                let value = http::HeaderValue::from_bytes(value).map_err(|e| format!("{name}: {e}"))?;
                request.headers_mut().append(name, value);
            }
        }
    }
    Ok(request)
}

/// A header block of cri-bridge's own for a response head or trailers.
pub fn block_of(status: Option<http::StatusCode>, headers: &HeaderMap) -> Vec<u8> {
    let mut block = Vec::new();
    if let Some(status) = status {
        hpack::encode(b":status", status.as_str().as_bytes(), &mut block);
    }
    for (name, value) in headers {
        hpack::encode(name.as_str().as_bytes(), value.as_bytes(), &mut block);
    }
    block
}

/// A trailers-only answer of cri-bridge's own carrying `status`.
pub fn status_block(status: &tonic::Status) -> Vec<u8> {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    if status.add_header(&mut headers).is_err() {
        // Only metadata that is not valid in a header fails; the code and message always fit.
        let _ = tonic::Status::new(status.code(), status.message()).add_header(&mut headers);
    }
    block_of(Some(http::StatusCode::OK), &headers)
}

/// Serves one intercepted stream to its end, telling the splice each part of the answer.
pub async fn serve(
    inner: SendRequest<Bytes>,
    request: http::Request<()>,
    body: Bytes,
    stream: u32,
    events: mpsc::Sender<(u32, Event)>,
) {
    let tell = |event| events.send((stream, event));
    let outcome = async {
        let mut inner = inner.ready().await?;
        let (response, mut sending) = inner.send_request(request, body.is_empty())?;
        if !body.is_empty() {
            sending.send_data(body, true)?;
        }
        let (head, mut answer) = response.await?.into_parts();
        let end = answer.is_end_stream();
        let _ = tell(Event::Headers { block: block_of(Some(head.status), &head.headers), end }).await;
        if end {
            return Ok(());
        }
        while let Some(chunk) = answer.data().await {
            let chunk = chunk?;
            let size = chunk.len();
            let (written, taken) = oneshot::channel();
            if tell(Event::Data { bytes: chunk, written }).await.is_err() || taken.await.is_err() {
                return Ok(());
            }
            let _ = answer.flow_control().release_capacity(size);
        }
        let _ = match answer.trailers().await? {
            Some(trailers) => tell(Event::Headers { block: block_of(None, &trailers), end: true }).await,
            None => tell(Event::End).await,
        };
        Ok::<(), h2::Error>(())
    };
    if let Err(error) = outcome.await {
        tracing::debug!(%error, "an intercepted call failed on the in-process connection");
        let code = error.reason().map_or(super::wire::INTERNAL_ERROR, u32::from);
        let _ = tell(Event::Reset(code)).await;
    }
}
