//! One spliced connection: the client's socket, its own runtime socket, and the in-process
//! connection its intercepted streams take, driven by one task until either end goes.
//!
//! Reads and writes of both sockets wait side by side, so that an end that stops reading stops
//! only what is written to it: a client that reads nothing holds up its own answers, and its
//! calls are read no further once [`HIGH_WATER`] bytes wait for the runtime.

use super::flow::ClientWindow;
use super::hpack::Decoder;
use super::router::Router;
use super::state::{Intercepted, Relayed, Splice, Stream};
use super::wire::{self, Frame};
use crate::config::Limits;
use crate::http2::{MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE};
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
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
        runtime_draining: false,
        resets: 0,
        keepalive_acked: false,
        fatal: None,
        fields: super::hpack::Fields::default(),
        scratch: Vec::new(),
        connection_progress: Instant::now(),
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
        // Written at once where the socket takes it, rather than after a round of the select.
        if !splice.to_runtime.is_empty()
            && !splice.runtime_gone
            && write_some(&runtime, &mut splice.to_runtime).is_err()
        {
            splice.lost_runtime();
            continue;
        }
        if !splice.to_client.is_empty() && write_some(&client, &mut splice.to_client).is_err() {
            break;
        }
        let read_client = splice.to_runtime.len() < HIGH_WATER && !splice.runtime_gone;
        // Nothing may reach the runtime before the client's preface, and reading the runtime
        // can make the splice write to it (a grant for DATA no one takes): it waits for the preface.
        let read_runtime = splice.preface_read
            && !splice.runtime_gone
            && splice.to_client.len() < HIGH_WATER
            && splice.waiting_bytes < 2 * HIGH_WATER;
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
                if ready.is_err() || write_some(&client, &mut splice.to_client).is_err() { break; }
            }
            ready = runtime.writable(), if !splice.to_runtime.is_empty() && !splice.runtime_gone => {
                if ready.is_err() || write_some(&runtime, &mut splice.to_runtime).is_err() { splice.lost_runtime(); }
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

/// Writes what `stream` takes of `out` now (nothing when it would block), and drops it from `out`.
fn write_some(stream: &UnixStream, out: &mut BytesMut) -> std::io::Result<()> {
    match stream.try_write(out) {
        Ok(n) => drop(out.split_to(n)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    Ok(())
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

/// Frames of one end, split off its read buffer.
pub(super) fn frames(buffer: &mut BytesMut, max: usize) -> impl Iterator<Item = Result<Frame, String>> + '_ {
    std::iter::from_fn(move || wire::next_frame(buffer, max).map_err(|e| e.to_string()).transpose())
}
