//! The HTTP/2 frame layout the door reads (RFC 9113 §3.4, §4.1, §6): the connection preface,
//! the frame types and flags it looks at, a frame header's fields, and where a HEADERS payload's
//! parts lie.

use bytes::{BufMut, BytesMut};
use std::ops::Range;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const FRAME_HEADER_LEN: usize = 9;
pub const HEADERS: u8 = 0x1;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY: u8 = 0x20;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const ACK: u8 = 0x1;

/// The payload length in a frame header.
pub fn frame_length(head: &[u8]) -> usize {
    usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2])
}

/// Whether a HEADERS frame's priority names its own stream (RFC 9113 §5.3.1), as h2 reads it:
/// after the pad length, before the padding is checked.
pub fn self_dependent(flags: u8, stream_id: u32, payload: &[u8]) -> bool {
    if flags & PRIORITY == 0 {
        return false;
    }
    let start = usize::from(flags & PADDED != 0);
    payload
        .get(start..start + 5)
        .is_some_and(|p| u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff == stream_id)
}

/// Where a HEADERS payload's HPACK bytes lie, between pad length + priority and padding, and its
/// priority; `None` when its padding or priority does not fit in it.
pub fn headers_layout(flags: u8, payload: &[u8]) -> Option<(Range<usize>, Option<[u8; 5]>)> {
    let mut start = 0;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = usize::from(*payload.first()?);
        start = 1;
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(payload.get(start..start + 5)?.try_into().ok()?);
        start += 5;
    }
    let end = payload.len().checked_sub(pad).filter(|end| *end >= start)?;
    Some((start..end, priority))
}

pub fn put_frame_header(out: &mut BytesMut, length: usize, kind: u8, flags: u8, stream_id: u32) {
    let length = length as u32;
    out.put_slice(&length.to_be_bytes()[1..]);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream_id);
}
