//! cri-bridge's own answers to a caller: one message or several of its own with status OK,
//! and a converted message sent without being held twice.

use crate::relay::answer::{Answer, CallerGone};
use crate::relay::message;
use bytes::Bytes;
use http::HeaderMap;
use tonic::Code;

/// Sends one converted message to the caller. A large one goes as its prefix and then its bytes,
/// so that it is never held twice (a 1,000-container list is about 650 KiB).
pub(super) async fn send_message(answer: &mut Answer, message: Bytes) -> Result<(), CallerGone> {
    const COPY_BELOW: usize = 64 << 10;
    if message.len() < COPY_BELOW {
        return answer.data(message::frame(&message)).await;
    }
    answer.data(message::prefix(message.len())).await?;
    answer.data(message).await
}

/// The `grpc-status` of an answer's head or trailers.
pub(super) fn grpc_code(headers: &HeaderMap) -> Option<Code> {
    headers.get("grpc-status").map(|value| Code::from_bytes(value.as_bytes()))
}

/// Answers a question of cri-bridge's own: one JSON message, status OK.
pub(super) async fn answer_control(answer: &mut Answer, json: Vec<u8>) {
    if answer_message(answer, json).await.is_err() {
        tracing::debug!("the caller of a control call went away");
    }
}

/// Answers a call with one message of cri-bridge's own, status OK.
pub(super) async fn answer_message(answer: &mut Answer, message: Vec<u8>) -> Result<Code, CallerGone> {
    answer.head(grpc_head(), false)?;
    answer.data(message::frame(&message)).await?;
    answer.trailers(ok_trailers())?;
    Ok(Code::Ok)
}

/// The head of an answer of cri-bridge's own.
pub(super) fn grpc_head() -> http::Response<()> {
    let mut head = http::Response::new(());
    head.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    head
}

/// The trailers of status OK.
pub(super) fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    trailers
}

/// Answers with `messages` and status OK.
pub(super) async fn answer_all(answer: &mut Answer, messages: Vec<Bytes>) -> Result<Code, CallerGone> {
    if let [one] = &messages[..] {
        return answer_message(answer, one.to_vec()).await;
    }
    answer.head(grpc_head(), false)?;
    for message in messages {
        send_message(answer, message).await?;
    }
    answer.trailers(ok_trailers())?;
    Ok(Code::Ok)
}

/// Answers with one message made of `parts` joined (protobuf merges them into one), status OK:
/// its prefix, then each part as it is, so that no part is copied.
pub(super) async fn answer_joined(answer: &mut Answer, parts: Vec<Bytes>) -> Result<Code, CallerGone> {
    answer.head(grpc_head(), false)?;
    answer.data(message::prefix(parts.iter().map(Bytes::len).sum())).await?;
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        answer.data(part).await?;
    }
    answer.trailers(ok_trailers())?;
    Ok(Code::Ok)
}
