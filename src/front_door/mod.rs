//! The bytes of a client connection, made acceptable to the HTTP/2 server before it parses them.
//!
//! # Why
//!
//! Real CRI clients dial the socket path itself: grpc-go (crictl, the kubelet) sends that path
//! as the HTTP/2 `:authority` (`/run/cri-bridge.sock`), grpc C-core a percent-encoded form
//! (`run%2Fcri-bridge.sock`). The grpc-go servers in containerd and CRI-O accept any
//! `:authority`; the `h2` crate under hyper accepts only a valid `host[:port]` and resets the
//! stream with PROTOCOL_ERROR, before any code of ours sees the request. There is no option to
//! relax that check, so the header block is mended on its way in.
//!
//! # How, and why this way
//!
//! [`FrontDoor`] wraps the accepted socket and reads the client's HTTP/2 frames ahead of the
//! server. Every frame but HEADERS/CONTINUATION passes through as it came. Each complete header
//! block is read by [`header_block`], which follows the client's HPACK table as the server will
//! hold it and mends only what the server would refuse:
//!
//! - an `:authority` the `http` crate cannot parse (a path, a percent-encoded path, empty);
//!   nothing downstream uses it (HTTP/2 makes it optional; the runtime gets our own);
//! - a request head without `:scheme` (grpc-go servers do not require it; `h2` does).
//!
//! A block that needs nothing — all of them once a client's authority sits in the table —
//! passes as it came; a mended one is framed anew.
//!
//! Ways weighed, on evidence:
//! - another HTTP/2 server: there is no other maintained one for tokio, and `h2` has no option
//!   to relax the check;
//! - decode every block with an HPACK crate and re-encode it as literals that never enter the
//!   server's table (so the tables cannot drift). Built first, and correct, but it costs: with
//!   `loona-hpack`, whose Huffman decoder builds its table anew for every string, about 40 µs a
//!   call per front door in the proxy benchmark (196 µs for an 8-field head of Huffman literals);
//!   with `httlib-hpack`'s table-driven decoder, 1.3 µs a request in `benches/front_door.rs` and
//!   +3 to +10 µs at the median in an interleaved A/B of 10,000 calls through the same process;
//! - keep the server's table equal to the client's and pass blocks verbatim (this module): the
//!   indexed authority is replaced by a valid one of the same length, so both tables keep the
//!   same sizes and evict alike. 0.4 µs a request in `benches/front_door.rs`; in the A/B, within
//!   its noise (−10 to +8 µs at the median, 0.6 µs faster on average).
//!
//! Anything this reader cannot make sense of (a malformed frame sequence, an HPACK error, an
//! oversized frame) is handed to the server unchanged, so the server answers it with the error the
//! protocol prescribes, and from then on header blocks pass unmended. Frames are still read one by
//! one in that mode, so the limits on them hold for the whole connection; bytes that do not begin
//! with the HTTP/2 preface have no frames to count, and end the connection at once.
//!
//! The table copy follows what the server decodes, not what the client sent: a HEADERS frame whose
//! priority names its own stream is reset by h2 before its block is decoded (its entries never
//! reach the server's table), so it passes unread here too.
//!
//! # Limits
//!
//! Gathering a block means holding it until its last frame, so a block is bounded as h2 bounds
//! the blocks it reads itself, and the connection ends (its reads fail with [`Refused`]) past:
//! - [`MAX_BLOCK`] bytes (the 1 MiB header list the server takes, and its frame headers), known
//!   from a frame's header before its payload is read, so no more is ever held;
//! - [`MAX_CONTINUATIONS`] CONTINUATION frames, h2's own count;
//! - [`BLOCK_TIMEOUT`] unfinished: a client mid-block may send nothing else, not even a PING's
//!   answer, and h2 alone would hold its part of the block until keepalive gives up (80 s);
//! - [`MAX_CONTROL_FRAMES`] SETTINGS and PING frames per 10 s, in any block or none.
//!
//! A block is held once, as the frames came (the HPACK bytes are read where they lie; only a block
//! of several frames is joined, once it is whole), and buffers grown for a large one are let go.

/// Public for the fuzz targets (`fuzz/`), which check [`header_block::HeaderBlocks::mend`] on its own.
pub mod header_block;

pub mod frame;
mod gathering;
#[cfg(test)]
mod tests;

use crate::budget::Charge;
use crate::http2::{MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE};
use bytes::{Buf, BytesMut};
use frame::{frame_length, FRAME_HEADER_LEN};
use header_block::HeaderBlocks;
use std::borrow::Cow;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes of frames one header block may take; past them the connection ends. A block
/// gathered here is held whole until its last frame, so this is what one connection can make us
/// hold. A header list the server accepts encodes within it (every field's encoding is at most
/// its decoded size, given Huffman coding only where it is shorter), with room for frame headers.
pub const MAX_BLOCK: usize = MAX_HEADER_LIST_SIZE as usize + MAX_FRAME_SIZE;
/// The most CONTINUATION frames without END_HEADERS one header block may have; past them the
/// connection ends. h2's own bound (h2 0.4, `calc_max_continuation_frames` in its codec: the
/// frames the header list needs, a quarter more, at least 5), past which h2 sends GOAWAY
/// ENHANCE_YOUR_CALM: 80 here.
pub const MAX_CONTINUATIONS: usize = {
    let frames = MAX_HEADER_LIST_SIZE as usize / MAX_FRAME_SIZE;
    let frames = if frames < 1 { 1 } else { frames };
    let most = frames + frames / 4;
    if most < 5 {
        5
    } else {
        most
    }
};
/// How long a header block may stay unfinished, from the first time the door waits for the rest
/// of it; then the connection ends. A client writes a block at once (grpc-go: in one write).
pub const BLOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// A buffer grown past this for one large block is let go afterwards, not kept for the next.
const KEEP_BUFFER: usize = 64 * 1024;
/// How much is read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;
/// SETTINGS and PING frames a client may send in [`CONTROL_WINDOW`]: each costs the server an
/// answer, and a flood of them holds the one thread every call runs on. Real clients send a few
/// (grpc-go: its settings, keepalive and flow-control estimation pings).
pub const MAX_CONTROL_FRAMES: u32 = 10_000;
pub const CONTROL_WINDOW: Duration = Duration::from_secs(10);

/// A client connection whose header blocks the HTTP/2 server can accept; see the module doc.
///
/// It needs a tokio runtime with its timer (for [`BLOCK_TIMEOUT`]) once its socket is pending
/// in the middle of a header block.
pub struct FrontDoor<S> {
    inner: S,
    /// Read from the client, not yet handed on or parsed.
    input: BytesMut,
    /// Rewritten frames waiting to be handed on.
    output: BytesMut,
    /// Set when `output` grew for a large block: it is let go once handed on.
    output_large: bool,
    /// How many bytes at the head of the stream pass through unchanged before the next frame.
    passthrough: usize,
    preface_checked: bool,
    /// Set when a header block could not be read as the server reads it: from here on header
    /// blocks pass as they came. Frames are still parsed, for the limits on them.
    verbatim: bool,
    /// Set when the client closed its side.
    eof: bool,
    /// The unfinished header block, if any.
    block: Option<Block>,
    /// Fires [`BLOCK_TIMEOUT`] after the door first waited for the rest of a block.
    block_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The client's header table as the server will hold it.
    blocks: HeaderBlocks,
    /// A rewritten block, kept for the next: every request passes through here.
    encoded: Vec<u8>,
    /// Whether a mended block was logged on this connection (once is enough).
    reported: bool,
    /// SETTINGS and PING frames since `control_since`.
    control_frames: u32,
    control_since: Option<std::time::Instant>,
    /// Set when the connection must end: every read fails with it from then on.
    refused: Option<Refused>,
    /// What the unfinished block holds of the connection's memory bound, when there is one.
    held: Option<Charge>,
}

/// Why the front door ended a client's connection: the error its reads fail with (inside an
/// [`io::Error`] of kind `InvalidData`), which the HTTP/2 server ends the connection for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("a client's first bytes are not an HTTP/2 connection preface")]
    NotHttp2,
    #[error("a client sent {MAX_CONTROL_FRAMES} SETTINGS and PING frames within {CONTROL_WINDOW:?}")]
    ControlFlood,
    #[error("a client sent a header block larger than {MAX_BLOCK} bytes")]
    BlockTooLarge,
    #[error("a client sent a header block of more than {MAX_CONTINUATIONS} CONTINUATION frames")]
    TooManyContinuations,
    #[error("a client left a header block unfinished for {BLOCK_TIMEOUT:?}")]
    UnfinishedBlock,
    #[error(
        "a client's header block found no room in the memory held for clients (limits.buffer_per_connection_mib, \
         limits.buffer_mib)"
    )]
    NoRoom,
}

impl<S> FrontDoor<S> {
    pub fn new(inner: S) -> Self {
        FrontDoor {
            inner,
            input: BytesMut::new(),
            output: BytesMut::new(),
            output_large: false,
            passthrough: 0,
            preface_checked: false,
            verbatim: false,
            eof: false,
            block: None,
            block_timer: None,
            blocks: HeaderBlocks::default(),
            encoded: Vec::new(),
            reported: false,
            control_frames: 0,
            control_since: None,
            refused: None,
            held: None,
        }
    }

    /// Holds unfinished header blocks within `charge`'s connection bound (see `crate::budget`).
    pub fn with_budget(mut self, charge: Charge) -> Self {
        self.held = Some(charge);
        self
    }

    /// Counts a SETTINGS or PING frame; refuses the connection past the budget.
    fn count_control_frame(&mut self) {
        // The clock is read at a window's first frame and once per budget's worth, not per frame.
        if self.control_since.is_none() {
            self.control_since = Some(std::time::Instant::now());
        }
        self.control_frames += 1;
        if self.control_frames < MAX_CONTROL_FRAMES {
            return;
        }
        let now = std::time::Instant::now();
        match self.control_since {
            Some(since) if now.duration_since(since) < CONTROL_WINDOW => self.refuse(Refused::ControlFlood),
            _ => {
                self.control_since = Some(now);
                self.control_frames = 0;
            }
        }
    }

    /// Ends the connection: its reads fail from now on, and what it held goes.
    fn refuse(&mut self, why: Refused) {
        match why {
            Refused::NotHttp2 => tracing::debug!("{why}: closing its connection"),
            _ => tracing::warn!("{why}: closing its connection"),
        }
        self.refused = Some(why);
        self.block = None;
        self.block_timer = None;
        self.held = None;
    }
}

/// A header block whose HEADERS frame has come and whose END_HEADERS has not.
struct Block {
    stream_id: u32,
    /// CONTINUATION frames without END_HEADERS so far.
    continuations: usize,
    /// Bytes of its frames so far.
    size: usize,
    /// When the door first waited for the rest of it.
    waiting_since: Option<tokio::time::Instant>,
    /// Its frames while gathered; `None` when they pass as they come (verbatim).
    gathered: Option<Gathered>,
}

/// A header block's frames, held once: its HPACK bytes are read from them where they lie.
struct Gathered {
    end_stream: bool,
    priority: Option<[u8; 5]>,
    /// The HEADERS frame's length, header included; CONTINUATION frames follow it.
    headers_len: usize,
    /// Where the HEADERS frame's HPACK bytes lie: after pad length and priority, before padding.
    first: Range<usize>,
    /// The frames as received, handed on unchanged unless the block needs mending.
    frames: BytesMut,
}

impl Gathered {
    /// The block's HPACK bytes: borrowed from a lone HEADERS frame, joined from several.
    fn fragment(&self) -> Cow<'_, [u8]> {
        if self.frames.len() == self.headers_len {
            return Cow::Borrowed(&self.frames[self.first.clone()]);
        }
        let mut joined = Vec::with_capacity(self.frames.len());
        joined.extend_from_slice(&self.frames[self.first.clone()]);
        let mut at = self.headers_len;
        while at + FRAME_HEADER_LEN <= self.frames.len() {
            let length = frame_length(&self.frames[at..]);
            let start = at + FRAME_HEADER_LEN;
            joined.extend_from_slice(&self.frames[start..start + length]);
            at = start + length;
        }
        Cow::Owned(joined)
    }
}

/// Copies as much of `from` as fits into `buf`.
fn hand_on(from: &mut BytesMut, limit: usize, buf: &mut ReadBuf<'_>) {
    let n = from.len().min(limit).min(buf.remaining());
    buf.put_slice(&from[..n]);
    from.advance(n);
}

impl<S: AsyncRead + Unpin> AsyncRead for FrontDoor<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if let Some(why) = this.refused {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
            }
            if !this.output.is_empty() {
                hand_on(&mut this.output, usize::MAX, buf);
                if this.output.is_empty() && this.output_large {
                    this.output = BytesMut::new();
                    this.output_large = false;
                }
                return Poll::Ready(Ok(()));
            }
            if this.passthrough > 0 && !this.input.is_empty() {
                let before = buf.filled().len();
                hand_on(&mut this.input, this.passthrough, buf);
                this.passthrough -= buf.filled().len() - before;
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // A truncated frame goes to the server as it is, then the end.
                hand_on(&mut this.input, usize::MAX, buf);
                return Poll::Ready(Ok(()));
            }
            if this.passthrough == 0 && this.parse() {
                if let (None, Some(held)) = (&this.block, this.held.as_mut()) {
                    held.shrink_to(0);
                }
                continue;
            }
            // More bytes are needed: for the frame being passed on, or to see the next one.
            this.input.reserve(READ_CHUNK);
            match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.input) {
                Poll::Ready(Ok(0)) => {
                    this.eof = true;
                    this.give_up();
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending if this.block_timed_out(cx) => this.refuse(Refused::UnfinishedBlock),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FrontDoor<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
