//! A bare `h2` gRPC client for tests that set windows, headers and bodies themselves.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use std::path::Path;
use std::time::Duration;

/// A gRPC message with its 5-byte prefix.
pub fn framed(message: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.extend_from_slice(&[0]);
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    frame.freeze()
}

/// What came back for one call.
#[derive(Debug)]
pub struct Answered {
    /// The DATA bytes, prefixes included, as received.
    pub body: Vec<u8>,
    pub code: String,
    pub message: String,
}

/// A bare HTTP/2 connection to a socket, with the receive window the test chooses.
#[derive(Clone)]
pub struct Client(pub h2::client::SendRequest<Bytes>);

impl Client {
    pub async fn connect(socket: &Path, window: u32) -> Client {
        let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(window)
            .initial_connection_window_size(window)
            .handshake::<_, Bytes>(stream)
            .await
            .unwrap();
        tokio::spawn(connection);
        Client(send)
    }

    /// A connection that can vanish: aborting the handle drops the socket, with no GOAWAY and
    /// no RST_STREAM, as a killed process does.
    pub async fn connect_vanishing(socket: &Path) -> (Client, tokio::task::JoinHandle<()>) {
        let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
        let (send, connection) = h2::client::handshake(stream).await.unwrap();
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        (Client(send), connection)
    }

    /// Opens a call: the response future, and the request stream (to drop or keep).
    pub async fn open(&self, path: &str, message: &[u8], timeout: Option<&str>) -> h2::client::ResponseFuture {
        self.open_raw(path, framed(message), timeout).await
    }

    /// Opens a call whose body is `body` exactly.
    pub async fn open_raw(&self, path: &str, body: Bytes, timeout: Option<&str>) -> h2::client::ResponseFuture {
        self.open_with(path, body, timeout, &[]).await
    }

    /// Opens a call whose body is `body` exactly, with `metadata` among its headers.
    pub async fn open_with(
        &self,
        path: &str,
        body: Bytes,
        timeout: Option<&str>,
        metadata: &[(&str, &str)],
    ) -> h2::client::ResponseFuture {
        let mut request = http::Request::post(format!("http://localhost{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(timeout) = timeout {
            request = request.header("grpc-timeout", timeout);
        }
        for (name, value) in metadata {
            request = request.header(*name, *value);
        }
        let mut send = self.0.clone().ready().await.unwrap();
        let (response, mut stream) = send.send_request(request.body(()).unwrap(), false).unwrap();
        stream.send_data(body, true).unwrap();
        response
    }

    /// One unary call, read to its end, `pause` between DATA frames (a slow reader).
    pub async fn call(
        &self,
        path: &str,
        message: &[u8],
        timeout: Option<&str>,
        pause: Duration,
    ) -> Result<Answered, h2::Error> {
        self.call_raw(path, framed(message), timeout, pause).await
    }

    /// One call with `body` as its request body, exactly.
    pub async fn call_raw(
        &self,
        path: &str,
        body: Bytes,
        timeout: Option<&str>,
        pause: Duration,
    ) -> Result<Answered, h2::Error> {
        self.answer(self.open_raw(path, body, timeout).await, pause).await
    }

    /// A call's answer, read to its end, `pause` between DATA frames.
    pub async fn answer(&self, response: h2::client::ResponseFuture, pause: Duration) -> Result<Answered, h2::Error> {
        let (head, mut body) = response.await?.into_parts();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            data.extend_from_slice(&chunk);
            let _ = body.flow_control().release_capacity(chunk.len());
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        let trailers = if head.headers.contains_key("grpc-status") {
            head.headers
        } else {
            body.trailers().await?.unwrap_or_default()
        };
        let get = |name: &str| trailers.get(name).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        Ok(Answered { body: data, code: get("grpc-status"), message: percent_decoded(&get("grpc-message")) })
    }
}

/// grpc-message is percent-encoded on the wire.
pub fn percent_decoded(text: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = text.bytes();
    while let Some(byte) = bytes.next() {
        let hex = |b: Option<u8>| b.and_then(|b| (b as char).to_digit(16));
        match byte {
            b'%' => {
                let (high, low) = (hex(bytes.next()), hex(bytes.next()));
                out.push((high.unwrap_or(0) * 16 + low.unwrap_or(0)) as u8);
            }
            other => out.push(other),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The message bytes of a body holding exactly one message.
pub fn only_message(body: &[u8]) -> &[u8] {
    assert!(body.len() >= 5, "a message: {body:?}");
    let size = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(body.len(), 5 + size, "exactly one message");
    &body[5..]
}
