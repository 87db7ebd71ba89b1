//! `splice_frames`: arbitrary bytes from both ends of a spliced connection (`relay::splice`).
//!
//! Input: records of a tag byte (low bit: 0 the client, 1 the runtime; bit 1: close that end
//! after this record) and a length byte, then that many bytes. The HTTP/2 client preface is put
//! in front of the client's bytes unless they begin with it. A router relays paths of
//! `runtime.v1.` (judging those that end in `Container`: a message whose first byte is odd is
//! refused) and intercepts the rest, which an in-process HTTP/2 server answers UNIMPLEMENTED.
//!
//! Invariants, on a current-thread runtime over real unix socket pairs:
//! - nothing panics, and the splice ends within 5 s once both ends are closed;
//! - what reaches the client is whole frames, and every header block in it decodes with an empty
//!   HPACK table that it leaves empty (fields that enter no table: cri-bridge may answer on the
//!   connection without the tables drifting);
//! - what reaches the runtime is the client's preface, then whole frames.

use bytes::Bytes;
use cri_bridge::config::Limits;
use cri_bridge::relay::splice::{splice, RequestHead, Route, Router, Spliced};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::{Code, Status};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct FuzzRouter;

impl Router for FuzzRouter {
    type Call = ();

    fn route(&self, head: &RequestHead) -> Route<()> {
        if head.path.contains("runtime.v1.") {
            Route::Relay { call: (), judge: head.path.ends_with("Container") }
        } else {
            Route::Intercept
        }
    }

    fn judge(&self, _: &(), message: &[u8]) -> Result<(), Status> {
        match message.first() {
            Some(byte) if byte % 2 == 1 => Err(Status::failed_precondition("refused by the fuzz router")),
            _ => Ok(()),
        }
    }

    fn ended(&self, _: (), _: Code) {}

    fn runtime_lost(&self, detail: &str) -> Status {
        Status::unavailable(detail.to_string())
    }

    fn stalled(&self, _: &(), after: Duration) -> Status {
        Status::resource_exhausted(format!("stalled for {after:?}"))
    }

    fn request_name(&self, _: &()) -> String {
        "the request".into()
    }

    fn max_message_size(&self) -> usize {
        64 << 10
    }
}

/// The input as (end, bytes, close after) records.
fn records(data: &[u8]) -> Vec<(bool, &[u8], bool)> {
    let mut out = Vec::new();
    let mut rest = data;
    while let [tag, length, tail @ ..] = rest {
        let take = usize::from(*length).min(tail.len());
        out.push((tag & 1 == 1, &tail[..take], tag & 2 == 2));
        rest = &tail[take..];
    }
    out
}

/// The input for writing seeds: `(runtime, bytes)` records, none closing.
pub fn seed(parts: &[(bool, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (runtime, bytes) in parts {
        for chunk in bytes.chunks(255) {
            out.push(u8::from(*runtime));
            out.push(chunk.len() as u8);
            out.extend_from_slice(chunk);
        }
    }
    out
}

pub fn run(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(relay(data));
}

async fn relay(data: &[u8]) {
    let (client, client_peer) = tokio::net::UnixStream::pair().unwrap();
    let (runtime, runtime_peer) = tokio::net::UnixStream::pair().unwrap();
    let (near, far) = tokio::io::duplex(64 << 10);
    tokio::spawn(unimplemented_server(far));
    let (inner, driver) = h2::client::Builder::new().handshake::<_, Bytes>(near).await.unwrap();
    tokio::spawn(async move {
        let _ = driver.await;
    });
    let held = cri_bridge::budget::Budget::new(64 << 20, 16 << 20).connection().charge();
    let spliced = Spliced { client, runtime, inner, held };
    // Kept to the end: a dropped sender reads as shutdown.
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(splice(spliced, FuzzRouter, Limits::default(), stopping));

    let (mut client_read, mut client_write) = client_peer.into_split();
    let (mut runtime_read, mut runtime_write) = runtime_peer.into_split();
    let to_client = tokio::spawn(async move {
        let mut all = Vec::new();
        let _ = client_read.read_to_end(&mut all).await;
        all
    });
    let to_runtime = tokio::spawn(async move {
        let mut all = Vec::new();
        let _ = runtime_read.read_to_end(&mut all).await;
        all
    });
    let records = records(data);
    let begins_with_preface = records.iter().find(|r| !r.0).is_some_and(|r| r.1.starts_with(PREFACE));
    if !begins_with_preface {
        let _ = client_write.write_all(PREFACE).await;
    }
    let (mut client_open, mut runtime_open) = (true, true);
    for (to_runtime_end, bytes, close) in records {
        // A write to an end the splice stopped reading may wait for ever: bounded.
        let write = async {
            match (to_runtime_end, client_open, runtime_open) {
                (false, true, _) => client_write.write_all(bytes).await,
                (true, _, true) => runtime_write.write_all(bytes).await,
                _ => Ok(()),
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(100), write).await;
        tokio::task::yield_now().await;
        if close {
            match to_runtime_end {
                false => client_open = false,
                true => runtime_open = false,
            }
        }
        if !client_open && !runtime_open {
            break;
        }
    }
    drop(runtime_write);
    tokio::task::yield_now().await;
    drop(client_write);
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => panic!("the splice failed: {error}"),
        Err(_) => panic!("the splice did not end within 5 s of both ends closing"),
    }
    let to_client = to_client.await.unwrap();
    let to_runtime = to_runtime.await.unwrap();
    check_client_bytes(&to_client);
    // The client's preface passes first.
    frames(to_runtime.strip_prefix(PREFACE).unwrap_or(&to_runtime), "the runtime");
}

/// Answers every request UNIMPLEMENTED (trailers only), as the terminating path answers a path
/// it does not know.
async fn unimplemented_server(io: tokio::io::DuplexStream) {
    let Ok(mut connection) = h2::server::Builder::new().handshake::<_, Bytes>(io).await else { return };
    while let Some(Ok((_, mut respond))) = connection.accept().await {
        let answer = http::Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", "12")
            .body(())
            .unwrap();
        let _ = respond.send_response(answer, true);
    }
}

/// The frames of `bytes` (type, flags, stream, payload); panics on a frame cut short.
fn frames<'a>(bytes: &'a [u8], whose: &str) -> Vec<(u8, u8, u32, &'a [u8])> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        assert!(rest.len() >= 9, "{whose} got a frame header cut short: {rest:?}");
        let length = (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
        assert!(rest.len() >= 9 + length, "{whose} got a frame cut short ({length} bytes announced)");
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
        out.push((rest[3], rest[4], stream, &rest[9..9 + length]));
        rest = &rest[9 + length..];
    }
    out
}

/// The client's bytes are whole frames, and its header blocks leave its HPACK table empty.
fn check_client_bytes(bytes: &[u8]) {
    const HEADERS: u8 = 0x1;
    const CONTINUATION: u8 = 0x9;
    const END_HEADERS: u8 = 0x4;
    let mut block: Option<Vec<u8>> = None;
    for (kind, flags, _, payload) in frames(bytes, "the client") {
        match kind {
            HEADERS => {
                // cri-bridge writes its blocks without padding or priority.
                block = Some(payload.to_vec());
            }
            CONTINUATION => match &mut block {
                Some(open) => open.extend_from_slice(payload),
                None => panic!("the client got a CONTINUATION with no block open"),
            },
            _ => {
                assert!(block.is_none(), "the client got a header block interrupted by a frame of type {kind}");
                continue;
            }
        }
        if flags & END_HEADERS != 0 {
            let done = block.take().unwrap();
            tableless(&done);
        }
    }
}

/// `block` holds only literals that enter no table (RFC 7541 §6.2.2 and §6.2.3, new names) or
/// static-table references, and no table size update.
fn tableless(block: &[u8]) {
    let mut at = 0;
    while at < block.len() {
        let first = block[at];
        assert!(
            first & 0x80 == 0 || integer(block, &mut at, 7) <= 61,
            "an indexed field past the static table reached the client: {block:?}"
        );
        if first & 0x80 != 0 {
            continue;
        }
        assert!(first & 0xc0 != 0x40, "a field entering the client's table: {block:?}");
        assert!(first & 0xe0 != 0x20, "a table size update reached the client: {block:?}");
        let name_index = integer(block, &mut at, 4);
        assert!(name_index <= 61, "a name from the dynamic table reached the client: {block:?}");
        if name_index == 0 {
            string(block, &mut at);
        }
        string(block, &mut at);
    }
}

fn integer(block: &[u8], at: &mut usize, prefix: u32) -> usize {
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(block[*at]) & max;
    *at += 1;
    if value == max {
        let mut shift = 0;
        loop {
            let byte = *block.get(*at).expect("an integer cut short in a block to the client");
            *at += 1;
            value += usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
            assert!(shift < 28, "an integer too long in a block to the client");
        }
    }
    value
}

fn string(block: &[u8], at: &mut usize) {
    assert!(*at < block.len(), "a string missing in a block to the client: {block:?}");
    let length = integer(block, at, 7);
    assert!(*at + length <= block.len(), "a string cut short in a block to the client: {block:?}");
    *at += length;
}
