//! How the door reads a client's frames: each frame's header first (limits, control frames,
//! where the frame belongs), then header blocks gathered until whole, mended when the server
//! would refuse them, and framed anew; every other frame passes on as it came.

use super::frame::{
    frame_length, headers_layout, put_frame_header, self_dependent, ACK, CONTINUATION, END_HEADERS, END_STREAM,
    FRAME_HEADER_LEN, HEADERS, PING, PREFACE, PRIORITY, SETTINGS,
};
use super::header_block::Mended;
use super::{Block, FrontDoor, Gathered, Refused, BLOCK_TIMEOUT, KEEP_BUFFER, MAX_BLOCK, MAX_CONTINUATIONS};
use crate::http2::MAX_FRAME_SIZE;
use bytes::{BufMut, BytesMut};
use std::future::Future;
use std::task::Context;

impl<S> FrontDoor<S> {
    /// Parses what `input` holds at its head; false when more bytes are needed.
    pub(super) fn parse(&mut self) -> bool {
        if !self.preface_checked {
            let seen = self.input.len().min(PREFACE.len());
            if self.input[..seen] != PREFACE[..seen] {
                // No frames to count in what follows: the server gets none of it.
                self.refuse(Refused::NotHttp2);
                return true;
            }
            if seen < PREFACE.len() {
                return false;
            }
            self.preface_checked = true;
            self.passthrough = PREFACE.len();
            return true;
        }
        if self.input.len() < FRAME_HEADER_LEN {
            return false;
        }
        let head = &self.input[..FRAME_HEADER_LEN];
        let length = frame_length(head);
        let (kind, flags) = (head[3], head[4]);
        let stream_id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let frame_len = FRAME_HEADER_LEN + length;
        // Counted in every mode: a frame passes on only once its header has been read here.
        if (kind == SETTINGS || kind == PING) && flags & ACK == 0 {
            self.count_control_frame();
            if self.refused.is_some() {
                return true;
            }
        }
        match &self.block {
            Some(block) if kind == CONTINUATION && stream_id == block.stream_id => {
                // A block's limits, read from frame headers alone: nothing past them is held
                // here or handed to the server.
                if flags & END_HEADERS == 0 && block.continuations >= MAX_CONTINUATIONS {
                    self.refuse(Refused::TooManyContinuations);
                    return true;
                }
                if block.size + frame_len > MAX_BLOCK {
                    self.refuse(Refused::BlockTooLarge);
                    return true;
                }
            }
            // Only a CONTINUATION of its stream may follow an unfinished block, and none may
            // come without one (RFC 9113 §6.10): the server answers either with its error.
            Some(_) => {
                self.give_up();
                self.block = None;
                self.passthrough = frame_len;
                return true;
            }
            None if kind == CONTINUATION => {
                self.give_up();
                self.passthrough = frame_len;
                return true;
            }
            None => {}
        }
        if kind != HEADERS && kind != CONTINUATION {
            self.passthrough = frame_len;
            return true;
        }
        // A frame of a block that goes on is held (here, or by the server when verbatim) until
        // the block ends: within the connection's memory bound, or the connection ends.
        let unfinished = self.block.is_some() || flags & END_HEADERS == 0;
        if let (true, Some(held)) = (unfinished, self.held.as_mut()) {
            if !held.try_grow(frame_len) {
                self.refuse(Refused::NoRoom);
                return true;
            }
        }
        if self.verbatim || length > MAX_FRAME_SIZE {
            // Passed on as it comes (an oversized one for the server to refuse), and the block
            // followed for its limits only.
            self.give_up();
            self.follow(kind, flags, stream_id, frame_len);
            self.passthrough = frame_len;
            return true;
        }
        if self.input.len() < frame_len {
            return false;
        }
        let frame = self.input.split_to(frame_len);
        if kind == HEADERS {
            self.take_headers(flags, stream_id, frame);
        } else if let Some(block) = self.block.as_mut() {
            block.size += frame_len;
            if flags & END_HEADERS == 0 {
                block.continuations += 1;
            }
            // Not verbatim: the block is gathered.
            if let Some(gathered) = block.gathered.as_mut() {
                gathered.frames.extend_from_slice(&frame);
            }
            if flags & END_HEADERS != 0 {
                if let Some(gathered) = self.block.take().and_then(|b| b.gathered) {
                    self.complete(stream_id, gathered);
                }
            }
        }
        true
    }

    /// A HEADERS frame read whole while no block is open: read at once when it ends its block,
    /// or the start of the block gathered.
    fn take_headers(&mut self, flags: u8, stream_id: u32, frame: BytesMut) {
        if self_dependent(flags, stream_id, &frame[FRAME_HEADER_LEN..]) {
            // h2 resets such a stream without decoding its block, so the server's table does
            // not take the block's entries: neither does our copy of it.
            self.output.extend_from_slice(&frame);
            return;
        }
        let Some((first, priority)) = headers_layout(flags, &frame[FRAME_HEADER_LEN..]) else {
            // Malformed: the server sees the frame as it came and answers with its error.
            self.give_up();
            self.output.extend_from_slice(&frame);
            return;
        };
        let first = FRAME_HEADER_LEN + first.start..FRAME_HEADER_LEN + first.end;
        let size = frame.len();
        let gathered =
            Gathered { end_stream: flags & END_STREAM != 0, priority, headers_len: size, first, frames: frame };
        if flags & END_HEADERS != 0 {
            self.complete(stream_id, gathered);
        } else {
            self.block =
                Some(Block { stream_id, continuations: 0, size, waiting_since: None, gathered: Some(gathered) });
        }
    }

    /// Follows a header frame passed on as it comes, for the limits of its block.
    fn follow(&mut self, kind: u8, flags: u8, stream_id: u32, frame_len: usize) {
        if flags & END_HEADERS != 0 {
            self.block = None;
            return;
        }
        match &mut self.block {
            Some(block) => {
                block.size += frame_len;
                block.continuations += 1;
            }
            None if kind == HEADERS => {
                self.block =
                    Some(Block { stream_id, continuations: 0, size: frame_len, waiting_since: None, gathered: None });
            }
            None => {}
        }
    }

    /// Reads a whole header block and queues it, mended if it needs to be, or as it came when it
    /// cannot be decoded (the door turns verbatim).
    fn complete(&mut self, stream_id: u32, gathered: Gathered) {
        let mut encoded = std::mem::take(&mut self.encoded);
        let mended = self.blocks.mend(&gathered.fragment(), &mut encoded);
        match mended {
            Ok(Mended::Unchanged) => self.output.extend_from_slice(&gathered.frames),
            Ok(Mended::Rewritten) => {
                if !self.reported {
                    self.reported = true;
                    tracing::debug!("mended a client's header block (an :authority not host[:port], or no :scheme)");
                }
                self.queue_block(stream_id, gathered.end_stream, gathered.priority, &encoded);
            }
            Err(_) => {
                self.output.extend_from_slice(&gathered.frames);
                self.verbatim = true;
            }
        }
        if encoded.capacity() > KEEP_BUFFER {
            encoded = Vec::new();
        }
        self.encoded = encoded;
        self.output_large |= self.output.len() > KEEP_BUFFER;
    }

    /// Frames `encoded` as one HEADERS frame and as many CONTINUATION frames as needed.
    fn queue_block(&mut self, stream_id: u32, end_stream: bool, priority: Option<[u8; 5]>, encoded: &[u8]) {
        let priority = priority.as_ref().map_or(&[][..], |p| &p[..]);
        let first_room = MAX_FRAME_SIZE - priority.len();
        let (first, mut rest) = encoded.split_at(encoded.len().min(first_room));
        let mut flags = if end_stream { END_STREAM } else { 0 };
        if !priority.is_empty() {
            flags |= PRIORITY;
        }
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        self.output.reserve(encoded.len() + FRAME_HEADER_LEN * (2 + encoded.len() / MAX_FRAME_SIZE) + 5);
        put_frame_header(&mut self.output, priority.len() + first.len(), HEADERS, flags, stream_id);
        self.output.put_slice(priority);
        self.output.put_slice(first);
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME_SIZE));
            let flags = if tail.is_empty() { END_HEADERS } else { 0 };
            put_frame_header(&mut self.output, chunk.len(), CONTINUATION, flags, stream_id);
            self.output.put_slice(chunk);
            rest = tail;
        }
    }

    /// From here on the server gets header blocks as they came, starting with any block that
    /// was being gathered (still followed for its limits).
    pub(super) fn give_up(&mut self) {
        if let Some(gathered) = self.block.as_mut().and_then(|b| b.gathered.take()) {
            self.output.extend_from_slice(&gathered.frames);
            self.output_large |= self.output.len() > KEEP_BUFFER;
        }
        self.verbatim = true;
    }

    /// With the socket pending: whether a block has now been unfinished for [`BLOCK_TIMEOUT`]
    /// (else the timer wakes the reader when it will have been).
    pub(super) fn block_timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(block) = &mut self.block else { return false };
        let deadline = *block.waiting_since.get_or_insert_with(tokio::time::Instant::now) + BLOCK_TIMEOUT;
        let timer = self.block_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        timer.as_mut().poll(cx).is_ready()
    }
}
