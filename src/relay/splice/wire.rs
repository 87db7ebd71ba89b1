//! HTTP/2 frames as the splice reads and writes them (RFC 9113 §4, §6): one frame's header
//! parsed off a buffer, and the few frames cri-bridge writes itself.

use bytes::{BufMut, Bytes, BytesMut};

pub use crate::front_door::frame::{
    headers_layout, put_frame_header, self_dependent, ACK, CONTINUATION, END_HEADERS, END_STREAM, FRAME_HEADER_LEN,
    HEADERS, PADDED, PING, PREFACE, SETTINGS,
};

pub const DATA: u8 = 0x0;
pub const RST_STREAM: u8 = 0x3;
pub const PUSH_PROMISE: u8 = 0x5;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;

pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const INTERNAL_ERROR: u32 = 0x2;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// The largest frame either end may announce (2^24 - 1).
pub const MAX_ALLOWED_FRAME: usize = (1 << 24) - 1;

/// One frame, whole, split off the front of a read buffer.
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    /// The whole frame, header included, as it came.
    pub raw: Bytes,
}

impl Frame {
    pub fn payload(&self) -> &[u8] {
        &self.raw[FRAME_HEADER_LEN..]
    }
}

/// Why a peer's bytes are no HTTP/2 the splice will carry.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("a frame of {0} bytes, above the {1} allowed")]
    TooLarge(usize, usize),
    #[error("the connection does not begin with the HTTP/2 preface")]
    NoPreface,
}

/// Splits the next whole frame off `buffer`; `Ok(None)` until one is there. `max` is the
/// largest payload the reading end announced.
pub fn next_frame(buffer: &mut BytesMut, max: usize) -> Result<Option<Frame>, WireError> {
    if buffer.len() < FRAME_HEADER_LEN {
        return Ok(None);
    }
    let length = usize::from(buffer[0]) << 16 | usize::from(buffer[1]) << 8 | usize::from(buffer[2]);
    if length > max {
        return Err(WireError::TooLarge(length, max));
    }
    if buffer.len() < FRAME_HEADER_LEN + length {
        buffer.reserve(FRAME_HEADER_LEN + length - buffer.len());
        return Ok(None);
    }
    let raw = buffer.split_to(FRAME_HEADER_LEN + length).freeze();
    let stream = u32::from_be_bytes([raw[5], raw[6], raw[7], raw[8]]) & 0x7fff_ffff;
    Ok(Some(Frame { kind: raw[3], flags: raw[4], stream, raw }))
}

/// The settings a SETTINGS frame (not an ACK) carries, in order.
pub fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload.chunks_exact(6).map(|s| (u16::from_be_bytes([s[0], s[1]]), u32::from_be_bytes([s[2], s[3], s[4], s[5]])))
}

/// The stream a whole frame (header and payload) belongs to.
pub fn stream_of(frame: &[u8]) -> u32 {
    frame.get(5..).and_then(u31).unwrap_or(0)
}

/// A 31-bit value at the start of a payload (WINDOW_UPDATE's increment, a stream id).
pub fn u31(payload: &[u8]) -> Option<u32> {
    payload.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
}

/// A DATA frame's data, without its padding; `None` when its padding does not fit.
pub fn data_of(flags: u8, payload: &[u8]) -> Option<&[u8]> {
    if flags & PADDED == 0 {
        return Some(payload);
    }
    let pad = usize::from(*payload.first()?);
    payload.get(1..payload.len().checked_sub(pad)?)
}

pub fn rst_stream(out: &mut BytesMut, stream: u32, code: u32) {
    put_frame_header(out, 4, RST_STREAM, 0, stream);
    out.put_u32(code);
}

pub fn window_update(out: &mut BytesMut, stream: u32, increment: u32) {
    put_frame_header(out, 4, WINDOW_UPDATE, 0, stream);
    out.put_u32(increment);
}

pub fn goaway(out: &mut BytesMut, last_stream: u32, code: u32) {
    put_frame_header(out, 8, GOAWAY, 0, 0);
    out.put_u32(last_stream);
    out.put_u32(code);
}

pub fn ping(out: &mut BytesMut, opaque: [u8; 8]) {
    put_frame_header(out, 8, PING, 0, 0);
    out.put_slice(&opaque);
}

/// A header block of cri-bridge's own, in a HEADERS frame and as many CONTINUATION frames as
/// `max_frame` requires.
pub fn header_block(out: &mut BytesMut, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let mut kind = HEADERS;
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        put_frame_header(out, 0, HEADERS, flags | END_HEADERS, stream);
        return;
    }
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        put_frame_header(out, chunk.len(), kind, flags, stream);
        out.put_slice(chunk);
        kind = CONTINUATION;
        flags = 0;
    }
}

/// A DATA frame of cri-bridge's own.
pub fn data(out: &mut BytesMut, stream: u32, data: &[u8], end_stream: bool) {
    put_frame_header(out, data.len(), DATA, if end_stream { END_STREAM } else { 0 }, stream);
    out.put_slice(data);
}
