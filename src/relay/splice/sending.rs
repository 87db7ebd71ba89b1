//! What a spliced connection writes to either end: frames behind the client's window, answers of
//! cri-bridge's own, requests within the runtime's windows, and the ends of calls.

use super::connection::HIGH_WATER;
use super::intercept::{self, Event};
use super::router::Router;
use super::state::{Relayed, Splice, Stream, Timer};
use super::wire;
use bytes::{Bytes, BytesMut};
use tokio::time::Instant;
use tonic::Status;

impl<R: Router> Splice<R> {
    /// Sends judged requests on as the runtime's windows allow.
    pub fn flush_requests(&mut self) {
        if self.runtime_gone || self.requests_waiting.is_empty() {
            return;
        }
        let max_frame = self.runtime_max_frame;
        let mut waiting = std::mem::take(&mut self.requests_waiting);
        waiting.retain(|&id| {
            let Some(Stream::Relayed(relayed)) = self.streams.get_mut(&id) else { return false };
            while let Some((bytes, end)) = relayed.outbox.front_mut() {
                let room = self.runtime_window.min(relayed.runtime_window).max(0) as usize;
                let take = bytes.len().min(room).min(max_frame);
                if take == 0 && !bytes.is_empty() {
                    return true;
                }
                let last = take == bytes.len();
                wire::data(&mut self.to_runtime, id, &bytes[..take], last && *end);
                self.runtime_window -= take as i64;
                relayed.runtime_window -= take as i64;
                if last {
                    relayed.outbox.pop_front();
                } else {
                    let _ = bytes.split_to(take);
                }
            }
            false
        });
        self.requests_waiting = waiting;
    }

    /// Moves waiting frames to the client as its window allows, then answer bytes of
    /// intercepted streams.
    pub fn flush(&mut self) {
        self.flush_requests();
        while let Some((_, flow, own)) = self.waiting.front() {
            if self.to_client.len() >= HIGH_WATER {
                return;
            }
            if *flow > 0 && (!self.window.fits(*flow) || (*own && self.window.own_room() < *flow)) {
                break;
            }
            let (frame, flow, own) = self.waiting.pop_front().expect("a front");
            self.waiting_bytes -= frame.len();
            if own {
                self.window.sent_own(flow);
            } else {
                self.window.sent(flow);
            }
            self.to_client.extend_from_slice(&frame);
        }
        if self.waiting.is_empty() {
            self.write_pending_answers();
        }
    }

    /// Appends a frame for the client, behind any that wait.
    pub fn send_client(&mut self, frame: Bytes, flow: usize) {
        if self.waiting.is_empty() && (flow == 0 || self.window.fits(flow)) {
            self.window.sent(flow);
            self.to_client.extend_from_slice(&frame);
        } else {
            self.waiting_bytes += frame.len();
            self.waiting.push_back((frame, flow, false));
        }
    }

    /// A header block of cri-bridge's own for the client, behind any frames that wait.
    pub fn send_client_block(&mut self, id: u32, block: &[u8], end: bool) {
        if self.waiting.is_empty() {
            wire::header_block(&mut self.to_client, id, block, end, self.client_max_frame);
        } else {
            let mut frames = BytesMut::new();
            wire::header_block(&mut frames, id, block, end, self.client_max_frame);
            self.send_client(frames.freeze(), 0);
        }
    }

    /// Writes what intercepted streams' answers have ready, as their windows allow.
    pub fn write_pending_answers(&mut self) {
        let max_frame = self.client_max_frame;
        let mut waiting = std::mem::take(&mut self.answers_waiting);
        waiting.retain(|&id| {
            let Some(Stream::Intercepted(stream)) = self.streams.get_mut(&id) else { return false };
            let Some((bytes, offset, _)) = &mut stream.pending else { return false };
            while *offset < bytes.len() {
                let room = self.window.own_room().min(stream.window.max(0) as usize).min(max_frame);
                if room == 0 || self.to_client.len() >= HIGH_WATER {
                    return true;
                }
                let end = (*offset + room).min(bytes.len());
                wire::data(&mut self.to_client, id, &bytes[*offset..end], false);
                self.window.sent_own(end - *offset);
                stream.window -= (end - *offset) as i64;
                *offset = end;
            }
            if let Some((_, _, written)) = stream.pending.take() {
                let _ = written.send(());
            }
            false
        });
        self.answers_waiting = waiting;
    }

    /// An event of an intercepted stream's task.
    pub fn intercepted_event(&mut self, id: u32, event: Event) {
        let Some(Stream::Intercepted(stream)) = self.streams.get_mut(&id) else { return };
        match event {
            Event::Data { bytes, written } => {
                stream.pending = Some((bytes, 0, written));
                self.answers_waiting.push(id);
            }
            Event::Headers { block, end } => {
                let mut frames = BytesMut::new();
                wire::header_block(&mut frames, id, &block, end, self.client_max_frame);
                self.send_client(frames.freeze(), 0);
                if end {
                    self.streams.remove(&id);
                }
            }
            Event::End => {
                let mut frame = BytesMut::new();
                wire::data(&mut frame, id, &[], true);
                self.send_client(frame.freeze(), 0);
                self.streams.remove(&id);
            }
            Event::Reset(code) => {
                let mut frame = BytesMut::new();
                wire::rst_stream(&mut frame, id, code);
                self.send_client(frame.freeze(), 0);
                self.streams.remove(&id);
            }
        }
    }

    /// Ends the relayed call `id` with `code`, if it is open: what is left of it, for a status of
    /// cri-bridge's own.
    pub fn end_relayed(&mut self, id: u32, code: tonic::Code) -> Option<Relayed<R::Call>> {
        if !matches!(self.streams.get(&id), Some(Stream::Relayed(_))) {
            return None;
        }
        let Some(Stream::Relayed(mut relayed)) = self.streams.remove(&id) else { return None };
        self.timers.remove(&(relayed.request_timer, id, Timer::Request));
        if let Some(deadline) = relayed.deadline {
            self.timers.remove(&(deadline, id, Timer::Deadline));
        }
        if let Some(stall) = relayed.stall_timer {
            self.timers.remove(&(stall, id, Timer::Stalled));
        }
        let held = self.held.held().saturating_sub(relayed.held);
        self.held.shrink_to(held);
        if let Some(call) = relayed.call.take() {
            self.router.ended(call, code);
        }
        Some(relayed)
    }

    /// Relayed calls whose timer passed are ended with DEADLINE_EXCEEDED.
    pub fn timers_due(&mut self) {
        let now = Instant::now();
        while let Some(&(when, id, timer)) = self.timers.first() {
            if when > now {
                break;
            }
            self.timers.remove(&(when, id, timer));
            let Some(Stream::Relayed(relayed)) = self.streams.get(&id) else { continue };
            let status = match timer {
                Timer::Request if relayed.gathering.is_some() => tonic::Status::deadline_exceeded(format!(
                    "the request did not arrive within {:?} (limits.request_timeout_seconds)",
                    self.limits.request_timeout
                )),
                Timer::Request => continue,
                Timer::Deadline => {
                    tonic::Status::deadline_exceeded("deadline exceeded before the container runtime answered")
                }
                Timer::Stalled => match self.stalled_since(id) {
                    Some(since) if since + self.limits.stalled_caller <= now => {
                        let Some(Stream::Relayed(Relayed { call: Some(call), .. })) = self.streams.get(&id) else {
                            continue;
                        };
                        self.router.stalled(call, self.limits.stalled_caller)
                    }
                    Some(since) => {
                        self.arm_stall(id, since + self.limits.stalled_caller);
                        continue;
                    }
                    None => {
                        if let Some(Stream::Relayed(relayed)) = self.streams.get_mut(&id) {
                            relayed.stall_timer = None;
                        }
                        continue;
                    }
                },
            };
            self.cut_relayed(id, &status);
        }
    }

    /// The relayed call `id`'s answer found no room at the client: the stall timer runs, if it
    /// does not already.
    pub fn watch_stall(&mut self, id: u32) {
        let at = Instant::now() + self.limits.stalled_caller;
        if let Some(Stream::Relayed(Relayed { stall_timer: None, .. })) = self.streams.get(&id) {
            self.arm_stall(id, at);
        }
    }

    fn arm_stall(&mut self, id: u32, at: Instant) {
        if let Some(Stream::Relayed(relayed)) = self.streams.get_mut(&id) {
            relayed.stall_timer = Some(at);
            self.timers.insert((at, id, Timer::Stalled));
        }
    }

    /// Since when the caller of `id` has given its answer no room, if it gives none now: its
    /// stream's window is used up, or its DATA waits behind the connection's window.
    fn stalled_since(&self, id: u32) -> Option<Instant> {
        let Some(Stream::Relayed(relayed)) = self.streams.get(&id) else { return None };
        if relayed.client_window <= 0 {
            return Some(relayed.progress);
        }
        let waits = self.waiting.iter().any(|(frame, flow, _)| *flow > 0 && wire::stream_of(frame) == id);
        waits.then(|| relayed.progress.max(self.connection_progress))
    }

    /// Ends a relayed call with a status of cri-bridge's own before its request went on: the
    /// runtime's stream (its head alone) is cancelled.
    pub fn refuse(&mut self, id: u32, status: Status, early: bool) {
        let mut cancel = BytesMut::new();
        wire::rst_stream(&mut cancel, id, wire::CANCEL);
        self.send_runtime(&cancel);
        self.end_relayed(id, status.code());
        self.own_status(id, &status);
        if early {
            self.end_early(id);
        }
    }

    /// A stream answered before the client finished its request: it is told to stop (RST_STREAM
    /// NO_ERROR, after the answer), and what it sent meanwhile is taken here.
    pub fn end_early(&mut self, id: u32) {
        let mut stop = BytesMut::new();
        wire::rst_stream(&mut stop, id, wire::NO_ERROR);
        self.send_client(stop.freeze(), 0);
        self.streams.insert(id, Stream::Ended);
    }

    /// A trailers-only answer of cri-bridge's own, ending the stream on the client's side.
    pub fn own_status(&mut self, id: u32, status: &Status) {
        let mut frames = BytesMut::new();
        wire::header_block(&mut frames, id, &intercept::status_block(status), true, self.client_max_frame);
        self.send_client(frames.freeze(), 0);
    }

    /// Appends a frame for the runtime (none once it is gone).
    pub fn send_runtime(&mut self, frame: &[u8]) {
        if !self.runtime_gone {
            self.to_runtime.extend_from_slice(frame);
        }
    }

    /// Tells the client to open no more streams.
    pub fn go_away(&mut self, code: u32) {
        if !self.going_away {
            self.going_away = true;
            let mut frame = BytesMut::new();
            wire::goaway(&mut frame, self.last_stream, code);
            self.send_client(frame.freeze(), 0);
        }
    }

    /// Whether the connection has nothing left to do.
    pub fn finished(&self) -> bool {
        self.going_away && !self.calls_open() && self.waiting.is_empty()
    }

    /// Whether a call is open (not counting streams only left to be taken).
    pub fn calls_open(&self) -> bool {
        self.streams.values().any(|s| !matches!(s, Stream::Ended))
    }

    /// The calls open: `limits.streams_per_connection` bounds them.
    pub fn calls_open_count(&self) -> usize {
        self.streams.len()
    }

    pub fn keepalive_answered(&mut self) -> bool {
        std::mem::take(&mut self.keepalive_acked)
    }
}
