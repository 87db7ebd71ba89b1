//! The client's frames: passed to the runtime as they came, except where a stream is
//! intercepted, a request is held to be judged, or a grant repays cri-bridge's own DATA.

use super::connection::{frames, KEEPALIVE};
use super::hpack::Fields;
use super::intercept;
use super::router::{RequestHead, Route, Router};
use super::state::{Block, Gathering, Intercepted, Relayed, Splice, Stream, Timer};
use super::wire::{self, Frame};
use crate::front_door::{CONTROL_WINDOW, MAX_BLOCK, MAX_CONTINUATIONS, MAX_CONTROL_FRAMES};
use crate::relay::message::{Meter, RequestError, PREFIX_LEN};
use crate::relay::upstream::OWN_CALL;
use bytes::BytesMut;
use std::collections::VecDeque;
use tokio::time::Instant;
use tonic::{Code, Status};

impl<R: Router> Splice<R> {
    /// Handles every whole frame the client sent; `Err` ends the connection.
    pub fn read_client(&mut self, buffer: &mut BytesMut) -> Result<(), String> {
        if !self.preface_read {
            if buffer.len() < wire::PREFACE.len() {
                return match wire::PREFACE.starts_with(buffer) {
                    true => Ok(()),
                    false => Err(wire::WireError::NoPreface.to_string()),
                };
            }
            if !buffer.starts_with(wire::PREFACE) {
                return Err(wire::WireError::NoPreface.to_string());
            }
            let preface = buffer.split_to(wire::PREFACE.len());
            self.send_runtime(&preface);
            self.preface_read = true;
        }
        let max = self.runtime_max_frame;
        let mut incoming = Vec::new();
        for frame in frames(buffer, max) {
            incoming.push(frame?);
        }
        for frame in incoming {
            self.client_frame(frame)?;
        }
        Ok(())
    }

    fn client_frame(&mut self, frame: Frame) -> Result<(), String> {
        if let Some(block) = &mut self.client_block {
            if frame.kind != wire::CONTINUATION || frame.stream != block.stream {
                return Err("a header block interrupted by another frame".into());
            }
            if block.frames.len() > MAX_CONTINUATIONS || block.hpack.len() + frame.payload().len() > MAX_BLOCK {
                return Err("a header block too large".into());
            }
            block.hpack.extend_from_slice(frame.payload());
            let done = frame.flags & wire::END_HEADERS != 0;
            block.frames.push(frame.raw);
            if done {
                let block = self.client_block.take().expect("a block");
                return self.client_headers(block);
            }
            return Ok(());
        }
        // Only what the client asks for counts: its ACKs answer the runtime's own PINGs (grpc-go
        // sends one to estimate bandwidth each time DATA arrives) and SETTINGS, at the runtime's pace.
        if matches!(frame.kind, wire::SETTINGS | wire::PING) && frame.flags & wire::ACK == 0 {
            self.count_control_frame();
        }
        match frame.kind {
            // A HEADERS frame whose priority names its own stream is reset by the runtime before
            // its block is decoded (RFC 9113 §5.3.1; grpc-go and h2 alike): passed unread.
            wire::HEADERS if wire::self_dependent(frame.flags, frame.stream, frame.payload()) => {
                if frame.flags & wire::END_HEADERS == 0 {
                    return Err("a self-dependent HEADERS frame continued".into());
                }
                if frame.stream > self.last_stream && !frame.stream.is_multiple_of(2) {
                    self.last_stream = frame.stream;
                    self.streams.insert(frame.stream, Stream::Passed);
                }
                self.send_runtime(&frame.raw);
            }
            wire::HEADERS => {
                let (range, _) =
                    wire::headers_layout(frame.flags, frame.payload()).ok_or("a malformed HEADERS frame")?;
                let block = Block {
                    stream: frame.stream,
                    flags: frame.flags,
                    hpack: frame.payload()[range].to_vec(),
                    frames: vec![frame.raw.clone()],
                };
                if frame.flags & wire::END_HEADERS != 0 {
                    return self.client_headers(block);
                }
                self.client_block = Some(block);
            }
            wire::CONTINUATION => return Err("a CONTINUATION frame with no header block open".into()),
            wire::DATA => self.client_data(frame),
            wire::WINDOW_UPDATE => {
                let increment = wire::u31(frame.payload()).unwrap_or(0);
                match (frame.stream, self.streams.get_mut(&frame.stream)) {
                    (0, _) => {
                        if increment > 0 {
                            self.connection_progress = Instant::now();
                        }
                        let passed = self.window.granted(increment);
                        if passed > 0 {
                            let mut update = BytesMut::new();
                            wire::window_update(&mut update, 0, passed);
                            self.send_runtime(&update);
                        }
                    }
                    (_, Some(Stream::Intercepted(stream))) => stream.window += i64::from(increment),
                    (_, Some(Stream::Relayed(relayed))) => {
                        relayed.client_window += i64::from(increment);
                        if increment > 0 {
                            relayed.progress = Instant::now();
                        }
                        self.send_runtime(&frame.raw);
                    }
                    (_, Some(Stream::Ended | Stream::Passed)) => {}
                    // A stream the client never opened is the runtime's to judge. A stream that
                    // ended here is closed at the runtime too, or was never there (intercepted):
                    // the runtime would take a frame on it as one on an idle stream.
                    (id, None) if id > self.last_stream => self.send_runtime(&frame.raw),
                    (_, None) => {}
                }
            }
            wire::RST_STREAM => {
                self.resets += 1;
                if self.resets == self.limits.resets_per_minute {
                    tracing::warn!(
                        "a client cancelled more than {} calls in a minute (limits.resets_per_minute): closing its connection",
                        self.limits.resets_per_minute
                    );
                    self.fatal = Some((wire::ENHANCE_YOUR_CALM, "too many calls cancelled".into()));
                }
                match self.streams.get(&frame.stream) {
                    Some(Stream::Passed) => {
                        self.streams.remove(&frame.stream);
                        self.send_runtime(&frame.raw);
                    }
                    Some(Stream::Intercepted(_) | Stream::Ended) => {
                        if let Some(Stream::Intercepted(Intercepted { task: Some(task), .. })) =
                            self.streams.remove(&frame.stream)
                        {
                            task.abort();
                        }
                    }
                    Some(Stream::Relayed(_)) => {
                        self.end_relayed(frame.stream, Code::Cancelled);
                        self.send_runtime(&frame.raw);
                    }
                    None if frame.stream > self.last_stream => self.send_runtime(&frame.raw),
                    None => {}
                }
            }
            wire::SETTINGS if frame.flags & wire::ACK == 0 => {
                for (id, value) in wire::settings(frame.payload()) {
                    match id {
                        wire::SETTINGS_INITIAL_WINDOW_SIZE => {
                            let delta = i64::from(value) - self.client_initial_window;
                            self.client_initial_window = i64::from(value);
                            for stream in self.streams.values_mut() {
                                match stream {
                                    Stream::Intercepted(stream) => stream.window += delta,
                                    Stream::Relayed(relayed) => relayed.client_window += delta,
                                    _ => {}
                                }
                            }
                        }
                        wire::SETTINGS_MAX_FRAME_SIZE => {
                            self.client_max_frame = (value as usize).clamp(16_384, wire::MAX_ALLOWED_FRAME)
                        }
                        wire::SETTINGS_HEADER_TABLE_SIZE => self.runtime_table.set_limit(value as usize),
                        _ => {}
                    }
                }
                if self.runtime_gone {
                    let mut ack = BytesMut::new();
                    wire::put_frame_header(&mut ack, 0, wire::SETTINGS, wire::ACK, 0);
                    self.send_client(ack.freeze(), 0);
                }
                self.send_runtime(&frame.raw);
            }
            wire::PING if frame.flags & wire::ACK != 0 && frame.payload() == KEEPALIVE => self.keepalive_acked = true,
            // Answered here, as the terminating path answers them: the client's peer is
            // cri-bridge. Passed on, they would reach a runtime that may see no call of the
            // client's (all intercepted) and count them as abuse (grpc-go's keepalive policy:
            // GOAWAY ENHANCE_YOUR_CALM "too_many_pings" after the third).
            wire::PING if frame.flags & wire::ACK == 0 => {
                let mut pong = BytesMut::from(&frame.raw[..]);
                pong[4] = wire::ACK;
                self.send_client(pong.freeze(), 0);
            }
            _ => self.send_runtime(&frame.raw),
        }
        Ok(())
    }

    /// A whole header block of the client's.
    fn client_headers(&mut self, block: Block) -> Result<(), String> {
        let mut fields = std::mem::take(&mut self.fields);
        fields.clear();
        let changed = self
            .client_table
            .decode(&block.hpack, |name, value| fields.push(name, value))
            .map_err(|e| e.to_string())?;
        let id = block.stream;
        let end = block.flags & wire::END_STREAM != 0;
        let full = self.calls_open_count() >= self.limits.streams_per_connection as usize;
        let result = match self.streams.get_mut(&id) {
            // A request's trailers: the terminating path reads the message and leaves them, and
            // so does the splice (the runtime's table no longer follows the client's if they
            // changed it); they end the request.
            Some(Stream::Relayed(Relayed { gathering: Some(gathering), .. })) => {
                self.reencode |= changed;
                if end {
                    let finished = gathering.check.finish().err();
                    self.judge(id, finished);
                }
                Ok(())
            }
            Some(Stream::Relayed(_)) => {
                self.pass_block(&block, &fields);
                Ok(())
            }
            Some(Stream::Passed) => Err("a header block on a stream the runtime reset unread".into()),
            Some(Stream::Intercepted(_) | Stream::Ended) if changed => {
                Err("a second header block, changing the table, on a stream the runtime does not carry".into())
            }
            Some(Stream::Ended) => {
                if end {
                    self.streams.remove(&id);
                }
                Ok(())
            }
            Some(Stream::Intercepted(_)) => {
                if end {
                    self.send_intercepted(id);
                }
                Ok(())
            }
            None if id.is_multiple_of(2) || id <= self.last_stream => {
                // Not a new stream: the runtime answers it as the protocol says.
                self.pass_block(&block, &fields);
                Ok(())
            }
            None if self.going_away => {
                // The runtime never sees this block: from here on it gets blocks of cri-bridge's own.
                self.reencode |= changed;
                self.last_stream = id;
                let mut refused = BytesMut::new();
                wire::rst_stream(&mut refused, id, 0x7);
                self.send_client(refused.freeze(), 0);
                Ok(())
            }
            None if full => {
                // As h2 refuses a stream past MAX_CONCURRENT_STREAMS on an unspliced connection.
                self.reencode |= changed;
                self.last_stream = id;
                let mut refused = BytesMut::new();
                wire::rst_stream(&mut refused, id, 0x7);
                self.send_client(refused.freeze(), 0);
                Ok(())
            }
            None => {
                self.last_stream = id;
                self.new_stream(block, &fields, changed, end);
                Ok(())
            }
        };
        self.fields = fields;
        result
    }

    /// Passes a client's header block to the runtime: as it came, or, once a block the
    /// runtime never saw has changed the client's table, written anew into no table.
    fn pass_block(&mut self, block: &Block, fields: &Fields) {
        if !self.reencode {
            for frame in &block.frames {
                self.send_runtime(frame);
            }
            return;
        }
        let mut encoded = Vec::new();
        for (name, value) in fields.iter() {
            super::hpack::encode(name, value, &mut encoded);
        }
        let mut frames = BytesMut::new();
        let end = block.flags & wire::END_STREAM != 0;
        wire::header_block(&mut frames, block.stream, &encoded, end, self.runtime_max_frame);
        self.send_runtime(&frames);
    }

    fn new_stream(&mut self, block: Block, fields: &Fields, changed: bool, end: bool) {
        let id = block.stream;
        let path = fields.get(b":path").map(String::from_utf8_lossy);
        let own_call = fields.get(OWN_CALL.as_str().as_bytes()).is_some();
        let timeout = fields.get(b"grpc-timeout").and_then(timeout_of);
        // A request without a message (END_STREAM on its head) is the terminating path's to refuse.
        let route = match &path {
            // Once the runtime connection is lost, the terminating path serves every call (it
            // makes a connection of its own).
            Some(path) if !end && !self.runtime_gone && !self.runtime_draining => {
                self.router.route(&RequestHead { path, timeout, own_call })
            }
            _ => Route::Intercept,
        };
        match route {
            Route::Relay { call, judge } => {
                self.pass_block(&block, fields);
                let now = Instant::now();
                let request_timer = now + self.limits.request_timeout;
                let deadline = timeout.and_then(|timeout| now.checked_add(timeout));
                self.timers.insert((request_timer, id, Timer::Request));
                if let Some(deadline) = deadline {
                    self.timers.insert((deadline, id, Timer::Deadline));
                }
                let gathering = Some(Gathering { judge, ..Gathering::default() });
                let relayed = Relayed {
                    call: Some(call),
                    runtime_window: self.runtime_initial_window,
                    outbox: VecDeque::new(),
                    gathering,
                    meter: Meter::passing_compressed(),
                    head_sent: false,
                    deadline,
                    request_timer,
                    held: 0,
                    client_window: self.client_initial_window,
                    progress: now,
                    stall_timer: None,
                };
                self.streams.insert(id, Stream::Relayed(relayed));
            }
            Route::Intercept => {
                // The runtime's table never takes this block: from here on the runtime gets
                // blocks of cri-bridge's own, which refer to no table.
                self.reencode |= changed;
                let request = match intercept::request_from(fields) {
                    Ok(request) => request,
                    Err(field) => {
                        let status = Status::invalid_argument(format!("the request's header {field}"));
                        self.own_status(id, &status);
                        return;
                    }
                };
                let stream = Intercepted {
                    request: Some((request, BytesMut::new())),
                    window: self.client_initial_window,
                    pending: None,
                    task: None,
                };
                self.streams.insert(id, Stream::Intercepted(stream));
                if end {
                    self.send_intercepted(id);
                }
            }
        }
    }

    fn client_data(&mut self, frame: Frame) {
        let id = frame.stream;
        let end = frame.flags & wire::END_STREAM != 0;
        let flow = frame.payload().len();
        let data = wire::data_of(frame.flags, frame.payload()).unwrap_or_default();
        let limit = self.router.max_message_size() + PREFIX_LEN;
        // The client's window is given back as its DATA is read: requests are held here until
        // whole, and sent on within the runtime's window (`flush_requests`).
        let mut grant = BytesMut::new();
        if flow > 0 {
            wire::window_update(&mut grant, 0, flow as u32);
            if !end && self.streams.contains_key(&id) {
                wire::window_update(&mut grant, id, flow as u32);
            }
            self.send_client(grant.freeze(), 0);
        }
        match self.streams.get_mut(&id) {
            Some(Stream::Relayed(Relayed { gathering: Some(gathering), held, .. })) => {
                gathering.message.extend_from_slice(data);
                *held += data.len();
                let checked = gathering.check.pass(data, self.router.max_message_size());
                let checked = match (checked, end) {
                    (Ok(()), true) => gathering.check.finish(),
                    (checked, _) => checked,
                };
                let room = self.held.try_grow(data.len());
                if !room {
                    let what = self.router.request_name(self.call_of(id));
                    let status = Status::resource_exhausted(format!(
                        "{what}: the connection's memory bound (limits.buffer_per_connection_mib) is full"
                    ));
                    return self.refuse(id, status, true);
                }
                if end || checked.is_err() {
                    self.judge(id, checked.err());
                }
            }
            Some(Stream::Intercepted(stream)) => {
                let size = match &mut stream.request {
                    Some((_, body)) => {
                        body.extend_from_slice(data);
                        Some(body.len())
                    }
                    None => None,
                };
                let Some(size) = size else { return };
                if size > limit {
                    let status = Status::resource_exhausted(format!(
                        "a request larger than {} bytes (max_message_size)",
                        self.router.max_message_size()
                    ));
                    self.own_status(id, &status);
                    self.end_early(id);
                } else if end {
                    self.send_intercepted(id);
                }
            }
            Some(Stream::Ended) if end => {
                self.streams.remove(&id);
            }
            // After a request's end, on a stream the runtime reset unread, or on one that is
            // over: nothing for the runtime.
            _ => {}
        }
    }

    fn call_of(&self, id: u32) -> &R::Call {
        match self.streams.get(&id) {
            Some(Stream::Relayed(Relayed { call: Some(call), .. })) => call,
            _ => unreachable!("a relayed call"),
        }
    }

    /// A gathered request is whole (or can be no request): sent on, or refused.
    fn judge(&mut self, id: u32, bad: Option<RequestError>) {
        let Some(Stream::Relayed(relayed)) = self.streams.get_mut(&id) else { return };
        let gathering = relayed.gathering.take().expect("a request being gathered");
        let call = relayed.call.as_ref().expect("a call");
        let early = bad.is_some();
        let mut verdict = match bad {
            Some(error) => Err(error.into_status(&self.router.request_name(call))),
            None if gathering.judge => self.router.judge(call, &gathering.message[PREFIX_LEN..]),
            None => Ok(()),
        };
        if verdict.is_ok() && relayed.deadline.is_some_and(|deadline| deadline <= Instant::now()) {
            verdict = Err(Status::deadline_exceeded("deadline exceeded before the container runtime answered"));
        }
        match verdict {
            Ok(()) => {
                relayed.outbox.push_back((gathering.message.freeze(), true));
                self.requests_waiting.push(id);
                self.flush_requests();
            }
            Err(status) => self.refuse(id, status, early),
        }
    }

    /// Counts a SETTINGS or PING frame (not an ACK): past `front_door::MAX_CONTROL_FRAMES` in
    /// `front_door::CONTROL_WINDOW`, the connection ends.
    fn count_control_frame(&mut self) {
        let (count, since) = &mut self.control_frames;
        if since.elapsed() >= CONTROL_WINDOW {
            (*count, *since) = (0, Instant::now());
        }
        *count += 1;
        if *count > MAX_CONTROL_FRAMES {
            let why = format!("more than {MAX_CONTROL_FRAMES} SETTINGS and PING frames within {CONTROL_WINDOW:?}");
            self.fatal = Some((wire::ENHANCE_YOUR_CALM, why));
        }
    }

    /// An intercepted request is whole: it goes to the terminating path.
    fn send_intercepted(&mut self, id: u32) {
        let Some(Stream::Intercepted(stream)) = self.streams.get_mut(&id) else { return };
        let Some((request, body)) = stream.request.take() else { return };
        let task = tokio::spawn(intercept::serve(self.inner.clone(), request, body.freeze(), id, self.events.clone()));
        stream.task = Some(task.abort_handle());
    }
}

/// A `grpc-timeout` value.
fn timeout_of(value: &[u8]) -> Option<std::time::Duration> {
    let mut headers = http::HeaderMap::with_capacity(1);
    headers.insert("grpc-timeout", http::HeaderValue::from_bytes(value).ok()?);
    crate::grpc::timeout_of(&headers)
}
