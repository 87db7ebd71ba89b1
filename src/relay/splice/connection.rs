//! One spliced connection: the client's socket, its own runtime socket, and the in-process
//! connection its intercepted streams take, driven by one task until either end goes.
//!
//! Reads and writes of both sockets wait side by side, so that an end that stops reading stops
//! only what is written to it: a client that reads nothing holds up its own answers, and its
//! calls are read no further once [`HIGH_WATER`] bytes wait for the runtime.

use super::flow::ClientWindow;
use super::hpack::Decoder;
use super::intercept::Event;
use super::router::Router;
use super::wire::{self, Frame};
use crate::config::Limits;
use crate::http2::{MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE};
use crate::relay::message::Meter;
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// Bytes waiting to be written to one end past which the other end is read no further.
pub const HIGH_WATER: usize = 256 << 10;
/// The opaque data of cri-bridge's keepalive PINGs to the client.
pub(super) const KEEPALIVE: [u8; 8] = *b"cribrdge";
/// How often timers (keepalive, idleness, the reset count) are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The three connections a spliced client connection is made of.
pub struct Spliced {
    pub client: UnixStream,
    pub runtime: UnixStream,
    /// The in-process connection to the terminating path, for intercepted streams.
    pub inner: h2::client::SendRequest<Bytes>,
    /// The connection's share of the memory bound.
    pub held: crate::budget::Charge,
}

/// A stream of the connection, as the splice carries it.
pub(super) enum Stream<C> {
    Relayed(Relayed<C>),
    Intercepted(Intercepted),
    /// Passed to the runtime without being read (a HEADERS frame the runtime resets unread):
    /// the runtime's reset comes back as it is.
    Passed,
    /// Answered by cri-bridge before the client finished sending: its frames are taken here.
    Ended,
}

pub(super) struct Relayed<C> {
    pub call: Option<C>,
    /// What the runtime still takes on this stream, and the request's bytes waiting for it
    /// (after judging), the last with END_STREAM.
    pub runtime_window: i64,
    pub outbox: VecDeque<(Bytes, bool)>,
    /// The request's frames and message, held until judged (when the router asked).
    pub gathering: Option<Gathering>,
    /// Each answer message's size, against `max_message_size`.
    pub meter: Meter,
    /// The answer's head went to the client: a status of cri-bridge's own goes as trailers.
    pub head_sent: bool,
    /// Its entries in [`Splice::timers`]: when its request must have arrived, and the caller's
    /// deadline.
    pub request_timer: Instant,
    pub deadline: Option<Instant>,
    /// Bytes of its request held in [`Splice::held`].
    pub held: usize,
}

/// What a relayed call's timer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// The request must have arrived (`limits.request_timeout_seconds`).
    Request,
    /// The caller's deadline (`grpc-timeout`).
    Deadline,
}

#[derive(Default)]
pub(super) struct Gathering {
    pub message: BytesMut,
    /// Ask the router before the request goes on.
    pub judge: bool,
    pub check: crate::relay::message::UnaryRequest,
}

pub(super) struct Intercepted {
    /// The request as it came so far; `None` once sent to the terminating path.
    pub request: Option<(http::Request<()>, BytesMut)>,
    /// What the client still takes on this stream.
    pub window: i64,
    /// Answer bytes not yet written, from `offset`, and who waits for them.
    pub pending: Option<(Bytes, usize, oneshot::Sender<()>)>,
    pub task: Option<tokio::task::AbortHandle>,
}

/// A header block being gathered (HEADERS and its CONTINUATIONs).
pub(super) struct Block {
    pub stream: u32,
    pub flags: u8,
    pub frames: Vec<Bytes>,
    pub hpack: Vec<u8>,
}

pub(super) struct Splice<R: Router> {
    pub router: R,
    pub limits: Limits,
    pub inner: h2::client::SendRequest<Bytes>,
    pub events: mpsc::Sender<(u32, Event)>,
    pub streams: HashMap<u32, Stream<R::Call>>,
    /// The highest stream the client opened.
    pub last_stream: u32,
    pub to_client: BytesMut,
    pub to_runtime: BytesMut,
    /// Frames for the client behind one its connection window does not take yet, in order:
    /// (frame, flow-controlled length, written by cri-bridge itself).
    pub waiting: VecDeque<(Bytes, usize, bool)>,
    pub waiting_bytes: usize,
    pub window: ClientWindow,
    /// The client's blocks, against the runtime's table.
    pub client_table: Decoder,
    /// Set once a block the runtime never saw changed the client's table: the client's blocks
    /// are written anew for the runtime from then on.
    pub reencode: bool,
    /// The runtime's blocks, against the client's table.
    pub runtime_table: Decoder,
    pub client_block: Option<Block>,
    pub runtime_block: Option<Block>,
    /// SETTINGS_MAX_FRAME_SIZE each end announced: the largest frame it takes.
    pub client_max_frame: usize,
    pub runtime_max_frame: usize,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE: each intercepted stream's window to begin with.
    pub client_initial_window: i64,
    /// The runtime's SETTINGS_INITIAL_WINDOW_SIZE, and what it still takes on the connection:
    /// the splice gives the client its window back as it reads a request, and sends the
    /// requests on within the runtime's.
    pub runtime_initial_window: i64,
    pub runtime_window: i64,
    /// SETTINGS and PING frames from the client in the current window, and since when.
    pub control_frames: (u32, Instant),
    /// The client's connection's share of the memory bound: requests being gathered.
    pub held: crate::budget::Charge,
    pub preface_read: bool,
    /// GOAWAY sent to the client: streams above `last_stream` are refused.
    pub going_away: bool,
    pub runtime_gone: bool,
    /// Calls the client reset in the current minute.
    pub resets: u32,
    /// The client answered cri-bridge's keepalive PING since the last look.
    pub keepalive_acked: bool,
    /// Why the connection must end now, if it must, and the GOAWAY code the client is told.
    pub fatal: Option<(u32, String)>,
    pub fields: super::hpack::Fields,
    /// A header block being written, kept from block to block.
    pub scratch: Vec<u8>,
    /// Relayed calls whose judged requests wait for the runtime's window, and intercepted
    /// streams whose answer bytes wait for the client's.
    pub requests_waiting: Vec<u32>,
    pub answers_waiting: Vec<u32>,
    /// Relayed calls' timers, soonest first.
    pub timers: std::collections::BTreeSet<(Instant, u32, Timer)>,
}

/// Relays `spliced` until the client goes, the runtime goes and the client's last call is
/// answered, or `stopping` turns and the client's calls are done.
pub async fn splice<R: Router>(spliced: Spliced, router: R, limits: Limits, mut stopping: watch::Receiver<bool>) {
    let Spliced { client, runtime, inner, held } = spliced;
    let (events, mut event_rx) = mpsc::channel(64);
    let mut splice = Splice {
        router,
        limits,
        inner,
        events,
        streams: HashMap::new(),
        last_stream: 0,
        to_client: BytesMut::new(),
        to_runtime: BytesMut::new(),
        waiting: VecDeque::new(),
        waiting_bytes: 0,
        window: ClientWindow::default(),
        client_table: Decoder::new(MAX_HEADER_LIST_SIZE as usize),
        reencode: false,
        runtime_table: Decoder::new(MAX_HEADER_LIST_SIZE as usize),
        client_block: None,
        runtime_block: None,
        client_max_frame: MAX_FRAME_SIZE,
        runtime_max_frame: MAX_FRAME_SIZE,
        client_initial_window: super::flow::INITIAL_WINDOW,
        runtime_initial_window: super::flow::INITIAL_WINDOW,
        runtime_window: super::flow::INITIAL_WINDOW,
        control_frames: (0, Instant::now()),
        held,
        preface_read: false,
        going_away: false,
        runtime_gone: false,
        resets: 0,
        keepalive_acked: false,
        fatal: None,
        fields: super::hpack::Fields::default(),
        scratch: Vec::new(),
        timers: std::collections::BTreeSet::new(),
        requests_waiting: Vec::new(),
        answers_waiting: Vec::new(),
    };
    let (mut from_client, mut from_runtime) = (BytesMut::with_capacity(16 << 10), BytesMut::with_capacity(16 << 10));
    let mut checks = tokio::time::interval(CHECK_EVERY.min(limits.idle_timeout));
    let (mut idle_since, mut minute) = (Instant::now(), Instant::now());
    let (mut last_ping, mut ping_out) = (Instant::now(), None::<Instant>);
    loop {
        if let Some((code, why)) = splice.fatal.take() {
            tracing::debug!(%why, "a spliced connection ends");
            splice.to_client.clear();
            wire::goaway(&mut splice.to_client, splice.last_stream, code);
            let _ = write_all(&client, &splice.to_client).await;
            break;
        }
        splice.flush();
        if splice.finished() {
            let _ = write_all(&client, &splice.to_client).await;
            break;
        }
        let read_client = splice.to_runtime.len() < HIGH_WATER && !splice.runtime_gone;
        let read_runtime =
            !splice.runtime_gone && splice.to_client.len() < HIGH_WATER && splice.waiting_bytes < 2 * HIGH_WATER;
        tokio::select! {
            ready = client.readable(), if read_client || splice.runtime_gone => {
                if ready.is_err() { break; }
                match client.try_read_buf(&mut from_client) {
                    Ok(0) => break,
                    Ok(_) => {
                        if let Err(error) = splice.read_client(&mut from_client) {
                            splice.fatal = Some((wire::PROTOCOL_ERROR, error));
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            ready = runtime.readable(), if read_runtime => {
                if ready.is_err() { splice.lost_runtime(); continue; }
                match runtime.try_read_buf(&mut from_runtime) {
                    Ok(0) => splice.lost_runtime(),
                    Ok(_) => {
                        if let Err(error) = splice.read_runtime(&mut from_runtime) {
                            splice.fatal = Some((wire::INTERNAL_ERROR, error));
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => splice.lost_runtime(),
                }
            }
            ready = client.writable(), if !splice.to_client.is_empty() => {
                if ready.is_err() { break; }
                match client.try_write(&splice.to_client) {
                    Ok(n) => { let _ = splice.to_client.split_to(n); }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            ready = runtime.writable(), if !splice.to_runtime.is_empty() && !splice.runtime_gone => {
                if ready.is_err() { splice.lost_runtime(); continue; }
                match runtime.try_write(&splice.to_runtime) {
                    Ok(n) => { let _ = splice.to_runtime.split_to(n); }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => splice.lost_runtime(),
                }
            }
            Some((stream, event)) = event_rx.recv(), if splice.to_client.len() < HIGH_WATER => {
                splice.intercepted_event(stream, event);
            }
            _ = checks.tick() => {
                if splice.calls_open() {
                    idle_since = Instant::now();
                } else if !splice.going_away && idle_since.elapsed() >= limits.idle_timeout {
                    tracing::debug!("a spliced connection idle for {:?} (limits.idle_timeout_seconds): GOAWAY", limits.idle_timeout);
                    splice.go_away(wire::NO_ERROR);
                }
                if minute.elapsed() >= Duration::from_secs(60) {
                    (minute, splice.resets) = (Instant::now(), 0);
                }
                match ping_out {
                    Some(sent) if sent.elapsed() >= limits.keepalive_timeout => {
                        tracing::debug!("a client did not answer a PING within {:?} (limits.keepalive_timeout_seconds): closing", limits.keepalive_timeout);
                        break;
                    }
                    None if last_ping.elapsed() >= limits.keepalive => {
                        wire::ping(&mut splice.to_client, KEEPALIVE);
                        (last_ping, ping_out) = (Instant::now(), Some(Instant::now()));
                    }
                    _ => {}
                }
                if splice.keepalive_answered() {
                    ping_out = None;
                }
            }
            () = sleep_until(splice.timers.first().map(|t| t.0)) => splice.timers_due(),
            _ = stopping.wait_for(|stop| *stop), if !splice.going_away => {
                splice.go_away(wire::NO_ERROR);
            }
        }
    }
    // The runtime is told that no one waits for the calls left open, as the client would
    // have told it directly by closing its connection.
    for (id, stream) in std::mem::take(&mut splice.streams) {
        match stream {
            Stream::Intercepted(Intercepted { task: Some(task), .. }) => task.abort(),
            Stream::Relayed(Relayed { call, .. }) => {
                wire::rst_stream(&mut splice.to_runtime, id, wire::CANCEL);
                if let Some(call) = call {
                    splice.router.ended(call, tonic::Code::Cancelled);
                }
            }
            _ => {}
        }
    }
    if !splice.runtime_gone && !splice.to_runtime.is_empty() {
        let _ = tokio::time::timeout(LAST_WRITE, write_all(&runtime, &splice.to_runtime)).await;
    }
}

/// How long what is left for the runtime (its calls' cancellations) may take to write, once the
/// client is gone.
const LAST_WRITE: Duration = Duration::from_secs(1);

/// Sleeps until `when`, or forever.
async fn sleep_until(when: Option<Instant>) {
    match when {
        Some(when) => tokio::time::sleep_until(when).await,
        None => std::future::pending().await,
    }
}

async fn write_all(stream: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

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
    fn write_pending_answers(&mut self) {
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
    fn intercepted_event(&mut self, id: u32, event: Event) {
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
        let held = self.held.held().saturating_sub(relayed.held);
        self.held.shrink_to(held);
        if let Some(call) = relayed.call.take() {
            self.router.ended(call, code);
        }
        Some(relayed)
    }

    /// Relayed calls whose timer passed are ended with DEADLINE_EXCEEDED.
    fn timers_due(&mut self) {
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
            };
            self.cut_relayed(id, &status);
        }
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
    fn finished(&self) -> bool {
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

    fn keepalive_answered(&mut self) -> bool {
        std::mem::take(&mut self.keepalive_acked)
    }
}

/// Frames of one end, split off its read buffer.
pub(super) fn frames(buffer: &mut BytesMut, max: usize) -> impl Iterator<Item = Result<Frame, String>> + '_ {
    std::iter::from_fn(move || wire::next_frame(buffer, max).map_err(|e| e.to_string()).transpose())
}
