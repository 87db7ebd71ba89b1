//! The runtime's frames: passed to the client as they came, except its header blocks (written
//! anew, see [`super::hpack`]), and what belongs to a stream the client does not hear from the
//! runtime (intercepted, refused, reset).

use super::connection::frames;
use super::hpack::{encode, valid_field};
use super::router::Router;
use super::state::{Block, Splice, Stream};
use super::wire::{self, Frame};
use crate::front_door::{MAX_BLOCK, MAX_CONTINUATIONS};
use bytes::BytesMut;
use tonic::{Code, Status};

impl<R: Router> Splice<R> {
    /// Handles every whole frame the runtime sent; `Err` ends the connection.
    pub fn read_runtime(&mut self, buffer: &mut BytesMut) -> Result<(), String> {
        let max = self.client_max_frame;
        let mut incoming = Vec::new();
        for frame in frames(buffer, max) {
            incoming.push(frame.map_err(|e| format!("the runtime: {e}"))?);
        }
        for frame in incoming {
            self.runtime_frame(frame)?;
        }
        Ok(())
    }

    fn runtime_frame(&mut self, frame: Frame) -> Result<(), String> {
        if let Some(block) = &mut self.runtime_block {
            if frame.kind != wire::CONTINUATION || frame.stream != block.stream {
                return Err("the runtime interrupted a header block".into());
            }
            if block.frames.len() > MAX_CONTINUATIONS || block.hpack.len() + frame.payload().len() > MAX_BLOCK {
                return Err("the runtime sent a header block too large".into());
            }
            block.hpack.extend_from_slice(frame.payload());
            if frame.flags & wire::END_HEADERS != 0 {
                let block = self.runtime_block.take().expect("a block");
                return self.runtime_headers(block);
            }
            return Ok(());
        }
        let id = frame.stream;
        match frame.kind {
            wire::HEADERS => {
                let (range, _) =
                    wire::headers_layout(frame.flags, frame.payload()).ok_or("the runtime: a malformed HEADERS")?;
                let block = Block {
                    stream: id,
                    flags: frame.flags,
                    hpack: frame.payload()[range].to_vec(),
                    frames: Vec::new(),
                };
                if frame.flags & wire::END_HEADERS != 0 {
                    return self.runtime_headers(block);
                }
                self.runtime_block = Some(block);
            }
            wire::CONTINUATION => return Err("the runtime: a CONTINUATION with no header block open".into()),
            wire::PUSH_PROMISE => return Err("the runtime pushed a stream".into()),
            wire::DATA => self.runtime_data(frame),
            // The runtime's grants are the splice's to use (`flush_requests`): the client's
            // window is given back by the splice as it reads.
            wire::WINDOW_UPDATE => {
                let increment = i64::from(wire::u31(frame.payload()).unwrap_or(0));
                match (id, self.streams.get_mut(&id)) {
                    (0, _) => self.runtime_window += increment,
                    (_, Some(Stream::Relayed(relayed))) => relayed.runtime_window += increment,
                    _ => {}
                }
                self.flush_requests();
            }
            // Of a stream the client does not hear from the runtime, a reset is not passed.
            wire::RST_STREAM => match self.streams.get(&id) {
                Some(Stream::Relayed(_)) => {
                    self.end_relayed(id, Code::Cancelled);
                    self.send_client(frame.raw, 0);
                }
                Some(Stream::Passed) => {
                    self.streams.remove(&id);
                    self.send_client(frame.raw, 0);
                }
                _ => {}
            },
            wire::SETTINGS if frame.flags & wire::ACK == 0 => {
                for (setting, value) in wire::settings(frame.payload()) {
                    match setting {
                        wire::SETTINGS_MAX_FRAME_SIZE => {
                            self.runtime_max_frame = (value as usize).clamp(16_384, wire::MAX_ALLOWED_FRAME)
                        }
                        wire::SETTINGS_HEADER_TABLE_SIZE => self.client_table.set_limit(value as usize),
                        wire::SETTINGS_INITIAL_WINDOW_SIZE => {
                            let delta = i64::from(value) - self.runtime_initial_window;
                            self.runtime_initial_window = i64::from(value);
                            for stream in self.streams.values_mut() {
                                if let Stream::Relayed(relayed) = stream {
                                    relayed.runtime_window += delta;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                self.send_client(frame.raw, 0);
                self.flush_requests();
            }
            wire::GOAWAY => self.runtime_going_away(wire::u31(frame.payload()).unwrap_or(0)),
            _ => self.send_client(frame.raw, 0),
        }
        Ok(())
    }

    /// A whole header block of the runtime's: decoded always (the client's table copy follows
    /// it), written anew for a relayed stream.
    fn runtime_headers(&mut self, incoming: Block) -> Result<(), String> {
        let id = incoming.stream;
        let end = incoming.flags & wire::END_STREAM != 0;
        // Written anew as it is read: fields that enter no table, `:status` only in a head.
        let relayed = matches!(self.streams.get(&id), Some(Stream::Relayed(_)));
        let head = relayed && matches!(self.streams.get(&id), Some(Stream::Relayed(r)) if !r.head_sent);
        let mut block = std::mem::take(&mut self.scratch);
        block.clear();
        let (mut code, mut bad) = (None, None);
        self.runtime_table
            .decode(&incoming.hpack, |name, value| {
                if !relayed {
                    return;
                }
                if !valid_field(name, value) {
                    bad = Some(String::from_utf8_lossy(name).into_owned());
                    return;
                }
                if name == b"grpc-status" {
                    code = Some(Code::from_bytes(value));
                }
                if name != b":status" || head {
                    encode(name, value, &mut block);
                }
            })
            .map_err(|e| format!("the runtime: {e}"))?;
        if !relayed {
            self.scratch = block;
            return Ok(());
        }
        if let Some(name) = bad {
            self.scratch = block;
            let status = Status::internal(format!("the runtime's answer has an invalid header {name}"));
            self.cut_relayed(id, &status);
            return Ok(());
        }
        if let Some(Stream::Relayed(relayed)) = self.streams.get_mut(&id) {
            relayed.head_sent = true;
        }
        self.send_client_block(id, &block, end);
        self.scratch = block;
        if end {
            self.end_relayed(id, code.unwrap_or(Code::Unknown));
        }
        Ok(())
    }

    fn runtime_data(&mut self, frame: Frame) {
        let id = frame.stream;
        let flow = frame.payload().len();
        let limit = self.router.max_message_size();
        let Some(Stream::Relayed(relayed)) = self.streams.get_mut(&id) else {
            // Nothing of it reaches the client, which will grant nothing for it.
            if flow > 0 {
                let mut grant = BytesMut::new();
                wire::window_update(&mut grant, 0, flow as u32);
                self.send_runtime(&grant);
            }
            return;
        };
        let data = wire::data_of(frame.flags, frame.payload()).unwrap_or_default();
        if let Err(error) = relayed.meter.pass(data, limit) {
            let status = error.into_status("the runtime's answer");
            let mut grant = BytesMut::new();
            wire::window_update(&mut grant, 0, flow as u32);
            self.send_runtime(&grant);
            return self.cut_relayed(id, &status);
        }
        let end = frame.flags & wire::END_STREAM != 0;
        relayed.client_window -= flow as i64;
        let starved = relayed.client_window <= 0;
        self.send_client(frame.raw, flow);
        if end {
            self.end_relayed(id, Code::Unknown);
        } else if starved || !self.waiting.is_empty() {
            self.watch_stall(id);
        }
    }

    /// Ends a relayed call with cri-bridge's own status: the runtime's stream is cancelled.
    pub fn cut_relayed(&mut self, id: u32, status: &Status) {
        let mut cancel = BytesMut::new();
        wire::rst_stream(&mut cancel, id, wire::CANCEL);
        self.send_runtime(&cancel);
        let Some(relayed) = self.end_relayed(id, status.code()) else { return };
        let block = super::intercept::status_block(status);
        // After a head, the status goes as trailers.
        let block = if relayed.head_sent { trailers_of(&block) } else { block };
        let mut frames = BytesMut::new();
        wire::header_block(&mut frames, id, &block, true, self.client_max_frame);
        self.send_client(frames.freeze(), 0);
    }

    /// The runtime will take no new streams. Its GOAWAY is not passed on: its last stream counts
    /// only the streams it saw, and a client would take every intercepted call above it as never
    /// processed and send it again (grpc-go and C-core do, at once). Instead, the relayed calls
    /// it never saw (above `last`) are refused with REFUSED_STREAM, which a client may send again
    /// safely; later calls take the terminating path, which connects anew; the client's
    /// connection goes on.
    fn runtime_going_away(&mut self, last: u32) {
        self.runtime_draining = true;
        let unseen: Vec<u32> = self
            .streams
            .iter()
            .filter(|(&id, stream)| id > last && matches!(stream, Stream::Relayed(_) | Stream::Passed))
            .map(|(&id, _)| id)
            .collect();
        for id in unseen {
            if self.end_relayed(id, Code::Unavailable).is_none() {
                self.streams.remove(&id);
            }
            // Ignored by a runtime that never saw the stream; ends it at one that did.
            let mut cancel = BytesMut::new();
            wire::rst_stream(&mut cancel, id, wire::CANCEL);
            self.send_runtime(&cancel);
            let mut refused = BytesMut::new();
            wire::rst_stream(&mut refused, id, wire::REFUSED_STREAM);
            self.send_client(refused.freeze(), 0);
        }
    }

    /// The runtime connection ended: its open calls are answered UNAVAILABLE (naming the
    /// endpoint), and from here on the terminating path serves the connection's calls.
    pub fn lost_runtime(&mut self) {
        if self.runtime_gone {
            return;
        }
        self.runtime_gone = true;
        self.to_runtime.clear();
        let status = self.router.runtime_lost("the connection was lost");
        let relayed: Vec<u32> =
            self.streams.iter().filter(|(_, s)| matches!(s, Stream::Relayed(_))).map(|(&id, _)| id).collect();
        for id in relayed {
            self.cut_relayed(id, &status);
        }
    }
}

/// A trailers-only block as trailers: without its `:status` and `content-type`.
fn trailers_of(block: &[u8]) -> Vec<u8> {
    let mut decoder = super::hpack::Decoder::new(usize::MAX);
    let mut trailers = Vec::new();
    let _ = decoder.decode(block, |name, value| {
        if name != b":status" && name != b"content-type" {
            super::hpack::encode(name, value, &mut trailers);
        }
    });
    trailers
}
