//! The caller's side of one call: the answer's head, its messages (sent only as fast as the
//! caller's flow-control window allows), its trailers, or a status of cri-bridge's own.
//!
//! A caller that takes nothing of an answer for `limits.stalled_caller_seconds` is let go: its
//! answer holds the runtime's stream (and the memory under it) for no one.

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, SendStream};
use http::HeaderMap;
use std::future::Future;
use std::time::Duration;
use tonic::Status;

pub struct Answer {
    respond: SendResponse<Bytes>,
    /// Set once the head is sent and the stream stays open for messages and trailers.
    stream: Option<SendStream<Bytes>>,
    /// Set once the stream is ended (or reset): nothing more may be sent.
    done: bool,
    /// How long the caller may take nothing before the call is ended.
    stall: Duration,
    /// Set when the caller took nothing for `stall`.
    stalled: bool,
}

/// The caller went away (reset its stream, or its connection closed).
#[derive(Debug)]
pub struct CallerGone;

impl From<h2::Error> for CallerGone {
    fn from(_: h2::Error) -> CallerGone {
        CallerGone
    }
}

impl Answer {
    pub fn new(respond: SendResponse<Bytes>, stall: Duration) -> Answer {
        Answer { respond, stream: None, done: false, stall, stalled: false }
    }

    /// The caller took nothing of the answer for the stall timeout (and was told so by
    /// [`Answer::status`] if it is still there).
    pub fn stalled(&self) -> Option<Duration> {
        self.stalled.then_some(self.stall)
    }

    /// Sends the answer's head; `end` for a trailers-only answer.
    pub fn head(&mut self, head: http::Response<()>, end: bool) -> Result<(), CallerGone> {
        let stream = self.respond.send_response(head, end)?;
        if end {
            self.done = true;
        } else {
            self.stream = Some(stream);
        }
        Ok(())
    }

    /// Sends `data` once the caller's window has room for it, in as many frames as it takes.
    pub async fn data(&mut self, mut data: Bytes) -> Result<(), CallerGone> {
        let stream = self.stream.as_mut().ok_or(CallerGone)?;
        while !data.is_empty() {
            stream.reserve_capacity(data.len());
            let mut room = stream.capacity();
            while room == 0 {
                let capacity = std::future::poll_fn(|cx| stream.poll_capacity(cx));
                match tokio::time::timeout(self.stall, capacity).await {
                    Ok(capacity) => room = capacity.ok_or(CallerGone)??,
                    Err(_) => {
                        self.stalled = true;
                        return Err(CallerGone);
                    }
                }
            }
            let piece = data.split_to(room.min(data.len()));
            stream.send_data(piece, false)?;
        }
        Ok(())
    }

    /// Ends the stream without trailers, as the runtime ended its own.
    pub fn end(&mut self) -> Result<(), CallerGone> {
        let stream = self.stream.as_mut().ok_or(CallerGone)?;
        stream.send_data(Bytes::new(), true)?;
        self.done = true;
        Ok(())
    }

    /// Ends the stream with the runtime's trailers.
    pub fn trailers(&mut self, trailers: HeaderMap) -> Result<(), CallerGone> {
        let stream = self.stream.as_mut().ok_or(CallerGone)?;
        stream.send_trailers(trailers)?;
        self.done = true;
        Ok(())
    }

    /// Ends the call with `status`: a trailers-only answer if no head was sent, else trailers.
    pub fn status(&mut self, status: &Status) {
        if self.done {
            return;
        }
        let mut fields = HeaderMap::new();
        if status.add_header(&mut fields).is_err() {
            // Only metadata that is not valid in a header fails; the code and message always fit.
            fields = HeaderMap::new();
            let _ = Status::new(status.code(), status.message()).add_header(&mut fields);
        }
        match &mut self.stream {
            Some(stream) => {
                let _ = stream.send_trailers(fields);
            }
            None => {
                fields.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
                let mut head = http::Response::new(());
                *head.headers_mut() = fields;
                let _ = self.respond.send_response(head, true);
            }
        }
        self.done = true;
    }

    /// Resets the caller's stream, as the runtime reset its own.
    pub fn reset(&mut self, reason: Reason) {
        match &mut self.stream {
            Some(stream) => stream.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
        self.done = true;
    }

    /// Runs `work` until it completes or the caller resets its stream, whichever comes first.
    pub async fn unless_gone<F: Future>(&mut self, work: F) -> Result<F::Output, CallerGone> {
        let respond = &mut self.respond;
        let stream = &mut self.stream;
        let gone = std::future::poll_fn(|cx| match stream {
            Some(stream) => stream.poll_reset(cx),
            None => respond.poll_reset(cx),
        });
        tokio::select! {
            biased;
            output = work => Ok(output),
            _ = gone => Err(CallerGone),
        }
    }
}
