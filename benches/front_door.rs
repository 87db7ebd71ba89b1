//! What the front door adds to reading a connection: 100 gRPC requests as grpc-go writes them
//! (HEADERS with Huffman-coded, dynamically indexed fields and the socket path as `:authority`,
//! then one DATA frame), read through `FrontDoor` against the same bytes read as they are.

use cri_bridge::front_door::FrontDoor;
#[path = "../tests/support/h2_frames.rs"]
mod h2_frames;

use criterion::Criterion;
use h2_frames::{frame, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

const REQUESTS: usize = 100;

/// A client connection's bytes: the preface, SETTINGS, then `REQUESTS` unary calls.
fn connection() -> Vec<u8> {
    use httlib_hpack::Encoder;
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(SETTINGS, 0, 0, &[]));
    let mut encoder = Encoder::default();
    let flags = Encoder::HUFFMAN_NAME | Encoder::HUFFMAN_VALUE | Encoder::WITH_INDEXING | Encoder::BEST_FORMAT;
    for i in 0..REQUESTS {
        let stream = 1 + 2 * i as u32;
        let timeout = format!("{}u", 1_999_000 + i);
        let head = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/runtime.v1.RuntimeService/ListContainers"),
            (":authority", "/var/run/cri-bridge.sock"),
            ("content-type", "application/grpc"),
            ("user-agent", "grpc-go/1.33.3"),
            ("te", "trailers"),
            ("grpc-timeout", timeout.as_str()),
        ];
        let mut block = Vec::new();
        for (name, value) in head {
            encoder.encode((name.as_bytes().to_vec(), value.as_bytes().to_vec(), flags), &mut block).unwrap();
        }
        bytes.extend(frame(HEADERS, END_HEADERS, stream, &block));
        bytes.extend(frame(DATA, END_STREAM, stream, &[0, 0, 0, 0, 2, 0x0a, 0x00]));
    }
    bytes
}

async fn drain(mut reader: impl AsyncRead + Unpin) -> usize {
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    loop {
        match reader.read(&mut buf).await.unwrap() {
            0 => return total,
            n => total += n,
        }
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let bytes = connection();
    let mut criterion = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let mut group = criterion.benchmark_group(format!("{REQUESTS} grpc-go requests"));
    group.bench_function("read as they are", |b| b.iter(|| rt.block_on(drain(&bytes[..]))));
    group.bench_function("read through FrontDoor", |b| b.iter(|| rt.block_on(drain(FrontDoor::new(&bytes[..])))));
    group.finish();
    criterion.final_summary();
}
