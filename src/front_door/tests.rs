//! The door's own limits, end to end through a real socket: what it hands on, and why the
//! connection ends.

use super::frame::{put_frame_header, CONTINUATION, END_HEADERS, HEADERS, PING, PREFACE};
use super::*;
use bytes::BufMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    put_frame_header(&mut out, payload.len(), kind, flags, stream_id);
    out.put_slice(payload);
    out.to_vec()
}

/// What the door hands on from `bytes`, written by a client on a real socket that then
/// closes, and how the reading ended.
async fn through_socket(bytes: Vec<u8>) -> (Vec<u8>, io::Result<()>) {
    let (mut client, server) = tokio::net::UnixStream::pair().unwrap();
    // A client cut off early gets an error here; what the door did is the result below.
    tokio::spawn(async move { client.write_all(&bytes).await });
    let mut door = FrontDoor::new(server);
    let mut out = Vec::new();
    let mut buf = vec![0; 64 << 10];
    let end = loop {
        match door.read(&mut buf).await {
            Ok(0) => break Ok(()),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(error) => break Err(error),
        }
    };
    (out, end)
}

fn assert_ended(end: io::Result<()>, why: &str) {
    let error = end.expect_err("the connection ends");
    assert!(error.to_string().contains(why), "ended with {error:?}, expected {why:?}");
}

#[tokio::test]
async fn control_frames_are_counted_after_a_block_the_door_cannot_read() {
    // An index beyond both tables: the door stops mending, and must still count.
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(HEADERS, END_HEADERS, 1, &[0x80 | 0x7f, 0x7f]));
    for _ in 0..MAX_CONTROL_FRAMES {
        bytes.extend(frame(PING, 0, 0, &[0; 8]));
    }
    let (_, end) = through_socket(bytes).await;
    assert_ended(end, "SETTINGS and PING");
}

#[tokio::test]
async fn a_block_of_more_continuation_frames_than_h2_takes_ends_the_connection() {
    // h2 answers the 81st CONTINUATION without END_HEADERS with GOAWAY; tiny ones cost the
    // door nothing to gather, so only a count stops them.
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(HEADERS, 0, 1, &[0x82]));
    for _ in 0..81 {
        bytes.extend(frame(CONTINUATION, 0, 1, &[0x84]));
    }
    let (out, end) = through_socket(bytes.clone()).await;
    assert_ended(end, "CONTINUATION");
    assert_eq!(out, PREFACE, "nothing of the block is handed on");
    // 80 of them are a block like any other.
    bytes.truncate(bytes.len() - 10);
    bytes.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x86]));
    let (out, end) = through_socket(bytes.clone()).await;
    end.expect("a block of 80 CONTINUATION frames and a last one passes");
    assert_eq!(out, bytes);
}

#[tokio::test]
async fn a_block_larger_than_the_server_takes_ends_the_connection_before_it_is_gathered() {
    let mut bytes = PREFACE.to_vec();
    let chunk = vec![b'v'; MAX_FRAME_SIZE];
    bytes.extend(frame(HEADERS, 0, 1, &chunk));
    // 1 MiB and a frame more.
    for _ in 0..(MAX_HEADER_LIST_SIZE as usize / MAX_FRAME_SIZE) {
        bytes.extend(frame(CONTINUATION, 0, 1, &chunk));
    }
    let (out, end) = through_socket(bytes).await;
    assert_ended(end, "header block larger than");
    assert_eq!(out, PREFACE, "nothing of the block is handed on");
}

#[tokio::test]
async fn bytes_that_are_not_http2_are_not_handed_on() {
    let (out, end) = through_socket(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()).await;
    assert_ended(end, "not an HTTP/2 connection");
    assert!(out.is_empty(), "{out:?}");
}
