//! gRPC's length-prefixed messages (a flag byte, a 4-byte big-endian length, the bytes) as they
//! cross the relay: a request gathered whole, and an answer's stream cut into messages or only
//! measured as it passes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tonic::Status;

/// The flag byte and the length.
pub const PREFIX_LEN: usize = 5;

/// Frames `message` for the wire.
pub fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(PREFIX_LEN + message.len());
    framed.put_u8(0);
    framed.put_u32(message.len() as u32);
    framed.put_slice(message);
    framed.freeze()
}

/// The prefix of an uncompressed message of `len` bytes.
pub fn prefix(len: usize) -> Bytes {
    let mut prefix = BytesMut::with_capacity(PREFIX_LEN);
    prefix.put_u8(0);
    prefix.put_u32(len as u32);
    prefix.freeze()
}

/// Why a message could not be taken: each becomes the status gRPC servers give for it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageError {
    #[error("a message of {size} bytes is larger than max_message_size ({limit} bytes)")]
    TooLarge { size: usize, limit: usize },
    #[error("compressed messages are not supported (cri-bridge offers no grpc-encoding)")]
    Compressed,
    #[error("invalid gRPC message flag {0:#04x}")]
    BadFlag(u8),
    #[error("the body ended inside a message")]
    Truncated,
}

impl MessageError {
    pub fn into_status(self, what: &str) -> Status {
        let message = format!("{what}: {self}");
        match self {
            MessageError::TooLarge { .. } => Status::resource_exhausted(message),
            MessageError::Compressed => Status::unimplemented(message),
            MessageError::BadFlag(_) | MessageError::Truncated => Status::internal(message),
        }
    }
}

/// Why a unary request's body could not be taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error(transparent)]
    Message(#[from] MessageError),
    #[error("more than one message in a unary request")]
    MoreThanOne,
    #[error("the body holds no message")]
    Empty,
}

impl RequestError {
    /// The status for the request `what` names (`the … request`).
    pub fn into_status(self, what: &str) -> Status {
        match self {
            RequestError::Message(error) => error.into_status(what),
            other => Status::internal(format!("{what}: {other}")),
        }
    }
}

/// A unary request's body checked as it arrives, without holding it: one message, within the
/// limit.
#[derive(Default)]
pub struct UnaryRequest {
    meter: Meter,
    seen: usize,
}

impl UnaryRequest {
    /// The next chunk of the body; an error as soon as the body cannot be one message.
    pub fn pass(&mut self, chunk: &[u8], limit: usize) -> Result<(), RequestError> {
        self.meter.pass(chunk, limit)?;
        self.seen += chunk.len();
        // A second message's prefix: the request is over before it is all read.
        if self.meter.messages() > 1 {
            return Err(RequestError::MoreThanOne);
        }
        Ok(())
    }

    /// At the end of the body.
    pub fn finish(&self) -> Result<(), RequestError> {
        self.meter.finish()?;
        if self.seen < PREFIX_LEN {
            return Err(RequestError::Empty);
        }
        Ok(())
    }
}

/// Reads a prefix; `Ok(None)` when fewer than [`PREFIX_LEN`] bytes are there yet.
fn read_prefix(bytes: &[u8], limit: usize) -> Result<Option<usize>, MessageError> {
    read_prefix_of(bytes, limit, false)
}

/// [`read_prefix`], taking a compressed message when `compressed` allows it.
fn read_prefix_of(bytes: &[u8], limit: usize, compressed: bool) -> Result<Option<usize>, MessageError> {
    if bytes.len() < PREFIX_LEN {
        return Ok(None);
    }
    match bytes[0] {
        0 => {}
        1 if compressed => {}
        1 => return Err(MessageError::Compressed),
        flag => return Err(MessageError::BadFlag(flag)),
    }
    let size = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
    if size > limit {
        return Err(MessageError::TooLarge { size, limit });
    }
    Ok(Some(size))
}

/// Cuts a stream of DATA chunks into whole messages; holds at most one message and a prefix.
#[derive(Default)]
pub struct Splitter {
    pending: BytesMut,
}

impl Splitter {
    /// Adds a chunk and takes every message it completes (without their prefixes). The common
    /// case, a chunk that is exactly one message, is sliced without a copy.
    pub fn push(&mut self, chunk: Bytes, limit: usize, out: &mut Vec<Bytes>) -> Result<(), MessageError> {
        if self.pending.is_empty() {
            if let Some(size) = read_prefix(&chunk, limit)? {
                if chunk.len() == PREFIX_LEN + size {
                    out.push(chunk.slice(PREFIX_LEN..));
                    return Ok(());
                }
            }
        }
        self.pending.extend_from_slice(&chunk);
        while let Some(size) = read_prefix(&self.pending, limit)? {
            if self.pending.len() < PREFIX_LEN + size {
                break;
            }
            self.pending.advance(PREFIX_LEN);
            out.push(self.pending.split_to(size).freeze());
        }
        Ok(())
    }

    /// The bytes held of an unfinished message.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// At the end of the body: an unfinished message is an error.
    pub fn finish(&self) -> Result<(), MessageError> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            Err(MessageError::Truncated)
        }
    }
}

/// Follows message boundaries in a stream passed on unchanged, so that each message's size is
/// checked without gathering it: only prefixes are read, a few bytes a message.
#[derive(Default)]
pub struct Meter {
    /// Bytes of the current message's body still to pass.
    remaining: usize,
    /// A prefix split across chunks.
    partial: Vec<u8>,
    /// Messages whose prefix has passed.
    messages: usize,
    /// Compressed messages pass too (their size is still checked).
    compressed: bool,
}

impl Meter {
    pub fn pass(&mut self, mut chunk: &[u8], limit: usize) -> Result<(), MessageError> {
        while !chunk.is_empty() {
            if self.remaining > 0 {
                let step = self.remaining.min(chunk.len());
                self.remaining -= step;
                chunk = &chunk[step..];
                continue;
            }
            let need = PREFIX_LEN - self.partial.len();
            if self.partial.is_empty() && chunk.len() >= PREFIX_LEN {
                self.remaining = read_prefix_of(chunk, limit, self.compressed)?.unwrap_or(0);
                self.messages += 1;
                chunk = &chunk[PREFIX_LEN..];
            } else {
                let step = need.min(chunk.len());
                self.partial.extend_from_slice(&chunk[..step]);
                chunk = &chunk[step..];
                if self.partial.len() == PREFIX_LEN {
                    self.remaining = read_prefix_of(&self.partial, limit, self.compressed)?.unwrap_or(0);
                    self.messages += 1;
                    self.partial.clear();
                }
            }
        }
        Ok(())
    }

    /// How many messages have begun (their prefix passed).
    pub fn messages(&self) -> usize {
        self.messages
    }

    pub fn finish(&self) -> Result<(), MessageError> {
        if self.remaining == 0 && self.partial.is_empty() {
            Ok(())
        } else {
            Err(MessageError::Truncated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(parts: &[&[u8]]) -> Vec<u8> {
        parts.iter().flat_map(|p| frame(p).to_vec()).collect()
    }

    #[test]
    fn messages_are_cut_out_of_any_chunking_and_metered_alike() {
        let messages: [&[u8]; 4] = [b"", b"a", &[7u8; 300], b"xyz"];
        let stream = framed(&messages);
        for chunk_size in [1, 2, 4, 5, 6, 7, 64, stream.len()] {
            let mut splitter = Splitter::default();
            let mut meter = Meter::default();
            let mut out = Vec::new();
            for chunk in stream.chunks(chunk_size) {
                splitter.push(Bytes::copy_from_slice(chunk), 1000, &mut out).unwrap();
                meter.pass(chunk, 1000).unwrap();
            }
            splitter.finish().unwrap();
            meter.finish().unwrap();
            assert_eq!(meter.messages(), messages.len(), "chunks of {chunk_size}");
            let got: Vec<&[u8]> = out.iter().map(|b| b.as_ref()).collect();
            assert_eq!(got, messages, "chunks of {chunk_size}");
        }
    }

    #[test]
    fn a_cut_short_oversized_compressed_or_misflagged_stream_is_named() {
        let stream = framed(&[&[1u8; 10]]);
        let mut meter = Meter::default();
        meter.pass(&stream[..8], 100).unwrap();
        assert_eq!(meter.finish(), Err(MessageError::Truncated));
        let mut splitter = Splitter::default();
        splitter.push(Bytes::copy_from_slice(&stream[..3]), 100, &mut Vec::new()).unwrap();
        assert_eq!(splitter.finish(), Err(MessageError::Truncated));

        assert_eq!(Meter::default().pass(&stream, 9), Err(MessageError::TooLarge { size: 10, limit: 9 }));
        assert_eq!(Meter::default().pass(&stream, 10), Ok(()), "a message exactly at the limit passes");
        let mut split = Splitter::default();
        assert_eq!(
            split.push(Bytes::from(stream.clone()), 9, &mut Vec::new()),
            Err(MessageError::TooLarge { size: 10, limit: 9 })
        );
        let mut compressed = stream.clone();
        compressed[0] = 1;
        assert_eq!(Meter::default().pass(&compressed, 100), Err(MessageError::Compressed));
        compressed[0] = 2;
        assert_eq!(Meter::default().pass(&compressed, 100), Err(MessageError::BadFlag(2)));
        assert_eq!(
            MessageError::TooLarge { size: 10, limit: 9 }.into_status("x").code(),
            tonic::Code::ResourceExhausted
        );
    }
}
