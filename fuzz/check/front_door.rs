//! `front_door`: a client connection's bytes through `FrontDoor` (`cri_bridge::front_door`).
//!
//! Input: a cycle of read sizes, a cycle of write sizes, then the client's bytes; the HTTP/2
//! client preface is put in front unless the bytes begin with it (so recorded connections are
//! seeds as they are).
//!
//! Invariants:
//! - as a reader over the bytes alone, `FrontDoor` hands on the same bytes however the socket
//!   delivers them (read by read in the chosen sizes, or all at once), never needs more than
//!   the socket has (no `Pending` from a reader that is never pending), and ends, failing only
//!   with a `Refused` the bytes can be: a flood of SETTINGS and PING frames (`MAX_CONTROL_FRAMES`)
//!   or a header block past its limits;
//! - bytes without any HEADERS or CONTINUATION frame pass unchanged (up to a flood);
//! - bytes that do not begin with the preface are refused with nothing handed on (a beginning
//!   of the preface passes as it is);
//! - in front of `h2`'s server (configured as `relay::serve` configures it), over an in-memory
//!   duplex on a current-thread runtime, with the client writing its bytes in the chosen sizes
//!   and then closing: the connection ends, its requests answered, within a bounded number of
//!   scheduler rounds (a hang is a failure), and nothing panics.

use super::Choices;
use cri_bridge::front_door::{FrontDoor, Refused, MAX_CONTINUATIONS, MAX_CONTROL_FRAMES};
use cri_bridge::http2::MAX_HEADER_LIST_SIZE;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Scheduler rounds a connection may take (each round, every task that can progress does).
const ROUNDS: u32 = 20_000;

/// The input as the client's bytes and how they are cut, for writing seeds: a cycle of one read
/// size and one write size of 0 (whole).
pub fn seed(connection: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 0];
    out.extend_from_slice(connection);
    out
}

/// A socket that delivers `data` in reads of the sizes in `sizes` (0 is as much as fits), over
/// and over; never pending.
struct Trickle<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    turn: usize,
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let size = match self.sizes.get(self.turn % self.sizes.len().max(1)) {
            Some(&s) if s > 0 => usize::from(s),
            _ => usize::MAX,
        };
        self.turn += 1;
        let n = size.min(self.data.len()).min(buf.remaining());
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// Everything `FrontDoor` hands on from `data` read in `sizes`, and why it refused the rest.
fn read_through(data: &[u8], sizes: &[u8]) -> (Vec<u8>, Option<Refused>) {
    let mut door = FrontDoor::new(Trickle { data, sizes, turn: 0 });
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 8192];
    // Every read of the socket or hand-on makes progress; this bounds a loop that would not.
    for _ in 0..(data.len() + 16) * 4 {
        let mut buf = ReadBuf::new(&mut chunk);
        match Pin::new(&mut door).poll_read(&mut cx, &mut buf) {
            Poll::Ready(Ok(())) if buf.filled().is_empty() => return (out, None),
            Poll::Ready(Ok(())) => out.extend_from_slice(buf.filled()),
            Poll::Ready(Err(e)) => match e.get_ref().and_then(|e| e.downcast_ref::<Refused>()) {
                Some(why) => return (out, Some(*why)),
                None => panic!("FrontDoor failed over a socket that cannot fail: {e}"),
            },
            Poll::Pending => panic!("FrontDoor is pending over a socket that never is"),
        }
    }
    panic!("FrontDoor did not reach the end of {} bytes", data.len());
}

/// Whether `data` is the preface then frames none of which is HEADERS or CONTINUATION.
fn has_header_frame(data: &[u8]) -> bool {
    let Some(mut rest) = data.strip_prefix(PREFACE) else { return false };
    while rest.len() >= 9 {
        let length = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        if rest[3] == 0x1 || rest[3] == 0x9 {
            return true;
        }
        rest = &rest[(9 + length).min(rest.len())..];
    }
    false
}

pub fn run(data: &[u8]) {
    let mut input = Choices::new(data);
    let reads = usize::from(input.u8() % 4) + 1;
    let read_sizes = input.take(reads).to_vec();
    let writes = usize::from(input.u8() % 4) + 1;
    let write_sizes = input.take(writes).to_vec();
    let rest = input.rest();
    let mut connection = Vec::with_capacity(PREFACE.len() + rest.len());
    if !rest.starts_with(PREFACE) {
        connection.extend_from_slice(PREFACE);
    }
    connection.extend_from_slice(rest);

    let (whole, refused) = read_through(&connection, &[]);
    let (trickled, trickled_refused) = read_through(&connection, &read_sizes);
    assert!(
        whole == trickled && refused == trickled_refused,
        "FrontDoor hands on other bytes when the socket delivers them in reads of {read_sizes:?}"
    );
    match refused {
        None => {}
        // Fewer bytes cannot be a flood, nor a block of too many frames.
        Some(Refused::ControlFlood) => assert!(connection.len() >= 9 * MAX_CONTROL_FRAMES as usize, "{refused:?}"),
        Some(Refused::TooManyContinuations) => {
            assert!(connection.len() >= 9 * (MAX_CONTINUATIONS + 2), "{refused:?}")
        }
        Some(Refused::BlockTooLarge) => assert!(has_header_frame(&connection), "{refused:?}"),
        // Not from bytes that begin with the preface, nor from a socket that is never pending,
        // nor from a door with no memory bound.
        Some(why @ (Refused::NotHttp2 | Refused::UnfinishedBlock | Refused::NoRoom)) => panic!("refused for {why:?}"),
    }
    if !has_header_frame(&connection) {
        let passed = if refused.is_some() { connection.starts_with(&whole) } else { whole == connection };
        assert!(passed, "bytes without a header block were changed");
    }
    let (raw, raw_refused) = read_through(rest, &[]);
    if PREFACE.starts_with(rest) {
        assert!(raw == rest && raw_refused.is_none(), "a beginning of the preface was changed");
    } else if !rest.starts_with(PREFACE) {
        assert!(raw.is_empty() && raw_refused == Some(Refused::NotHttp2), "bytes without the preface were handed on");
    }

    serve(&connection, &write_sizes);
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        // With the timer: the front door sets one when the socket is pending inside a header block.
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a current-thread runtime");
}

/// The client writes `connection` in `sizes` and closes; the h2 server behind `FrontDoor`
/// answers what it accepts. Both must end within [`ROUNDS`].
fn serve(connection: &[u8], sizes: &[u8]) {
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let (client, server) = tokio::io::duplex(16 * 1024);
            let (mut from_server, mut to_server) = tokio::io::split(client);
            let write = async move {
                let mut rest = connection;
                let mut turn = 0;
                while !rest.is_empty() {
                    let size = match sizes.get(turn % sizes.len().max(1)) {
                        Some(&s) if s > 0 => usize::from(s),
                        _ => rest.len(),
                    };
                    turn += 1;
                    let (chunk, tail) = rest.split_at(size.min(rest.len()));
                    if to_server.write_all(chunk).await.is_err() {
                        return;
                    }
                    rest = tail;
                }
                let _ = to_server.shutdown().await;
            };
            let read = async move {
                let mut sink = [0u8; 4096];
                while let Ok(n) = from_server.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            let all = async { tokio::join!(write, read, answer(server)) };
            let rounds = async {
                for _ in 0..ROUNDS {
                    tokio::task::yield_now().await;
                }
            };
            tokio::select! {
                biased;
                _ = all => {}
                _ = rounds => panic!("the connection did not end within {ROUNDS} rounds after the client closed"),
            }
        })
    });
}

/// The server side: h2 behind the front door, each request answered with headers and trailers
/// (as a gRPC answer), until the connection ends.
async fn answer(io: tokio::io::DuplexStream) {
    let handshake = h2::server::Builder::new()
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .max_concurrent_streams(1024)
        .handshake::<_, bytes::Bytes>(FrontDoor::new(io));
    let Ok(mut connection) = handshake.await else { return };
    while let Some(next) = connection.accept().await {
        let Ok((request, mut respond)) = next else { break };
        drop(request);
        let head = http::Response::builder().status(200).header("content-type", "application/grpc").body(());
        if let Ok(mut stream) = respond.send_response(head.expect("a valid response head"), false) {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let _ = stream.send_trailers(trailers);
        }
    }
}
