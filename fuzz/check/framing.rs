//! `framing`: gRPC's length-prefixed messages (`cri_bridge::relay::message`).
//!
//! Input: a limit, a cycle of chunk sizes, then the stream. Invariants:
//! - the `Splitter` gives the same messages and the same outcome (the first error, or
//!   `finish`'s) however the stream is cut into chunks, empty chunks included;
//! - what it gives is the stream: the messages framed again with `frame` (and `prefix`) are the
//!   bytes consumed, each within the limit; an error names the prefix where it stopped;
//! - the `Meter`, fed the same chunks, fails with the same error at the same message, counts one
//!   message per prefix passed (the complete messages, and one more when a prefix passed but its
//!   body did not), and agrees on `finish`.

use super::Choices;
use bytes::Bytes;
use cri_bridge::relay::message::{frame, prefix, MessageError, Meter, Splitter, PREFIX_LEN};

/// What one run over the chunks gave: the messages, and the first error (of a push or `finish`).
#[derive(Debug, PartialEq)]
struct Split {
    messages: Vec<Bytes>,
    outcome: Result<(), MessageError>,
}

fn split<'a>(chunks: impl Iterator<Item = &'a [u8]>, limit: usize) -> Split {
    let mut splitter = Splitter::default();
    let mut messages = Vec::new();
    for chunk in chunks {
        if let Err(e) = splitter.push(Bytes::copy_from_slice(chunk), limit, &mut messages) {
            return Split { messages, outcome: Err(e) };
        }
    }
    Split { messages, outcome: splitter.finish() }
}

fn meter<'a>(chunks: impl Iterator<Item = &'a [u8]>, limit: usize) -> (usize, Result<(), MessageError>) {
    let mut meter = Meter::default();
    for chunk in chunks {
        if let Err(e) = meter.pass(chunk, limit) {
            return (meter.messages(), Err(e));
        }
    }
    (meter.messages(), meter.finish())
}

/// Cuts `stream` by the sizes in `sizes`, over and over (a 0 is an empty chunk; a cycle of
/// zeroes alone cuts nothing and is read as one chunk).
fn chunks<'a>(stream: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    if sizes.iter().all(|s| *s == 0) {
        return vec![stream];
    }
    let mut out = Vec::new();
    let mut rest = stream;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at(usize::from(size).min(rest.len()));
        out.push(chunk);
        rest = tail;
    }
    out
}

pub fn run(data: &[u8]) {
    let mut input = Choices::new(data);
    let limit = match input.u8() % 4 {
        0 => usize::from(input.u8()),
        1 => usize::from(input.u16()),
        2 => input.u32() as usize,
        _ => usize::MAX,
    };
    let cycle = usize::from(input.u8() % 8) + 1;
    let sizes = input.take(cycle).to_vec();
    let stream = input.rest();

    let whole = split(std::iter::once(stream), limit);
    let cut = chunks(stream, &sizes);
    let pieces = split(cut.iter().copied(), limit);
    assert_eq!(pieces, whole, "the Splitter depends on how the stream is cut (limit {limit}, chunks {sizes:?})");

    // The messages are the stream, framed.
    let mut consumed = 0;
    for message in &whole.messages {
        assert!(message.len() <= limit, "a message of {} bytes passed the limit {limit}", message.len());
        let framed = frame(message);
        let mut by_prefix = prefix(message.len()).to_vec();
        by_prefix.extend_from_slice(message);
        assert_eq!(framed.as_ref(), by_prefix.as_slice(), "frame and prefix disagree");
        assert_eq!(
            &stream[consumed..consumed + framed.len()],
            framed.as_ref(),
            "a message is not what the stream held"
        );
        consumed += framed.len();
    }
    let left = &stream[consumed..];
    match &whole.outcome {
        Ok(()) => assert!(left.is_empty(), "finish accepted {} bytes left over", left.len()),
        Err(MessageError::Truncated) => {
            assert!(!left.is_empty(), "Truncated with nothing left");
            if left.len() >= PREFIX_LEN {
                assert_eq!(left[0], 0, "a bad flag read as a truncated message");
                let size = u32::from_be_bytes([left[1], left[2], left[3], left[4]]) as usize;
                assert!(size <= limit && left.len() < PREFIX_LEN + size, "a whole message left as truncated");
            }
        }
        Err(e) => {
            assert!(left.len() >= PREFIX_LEN, "{e} before a whole prefix");
            let size = u32::from_be_bytes([left[1], left[2], left[3], left[4]]) as usize;
            let expected = match left[0] {
                0 => MessageError::TooLarge { size, limit },
                1 => MessageError::Compressed,
                flag => MessageError::BadFlag(flag),
            };
            assert_eq!(e, &expected, "the error does not name the prefix where the split stopped");
            if let MessageError::TooLarge { size, limit } = e {
                assert!(size > limit, "TooLarge for a message within the limit");
            }
        }
    }

    // The Meter follows the same boundaries without gathering.
    let started_unfinished = matches!(whole.outcome, Err(MessageError::Truncated)) && left.len() >= PREFIX_LEN;
    for chunking in [vec![stream], cut] {
        let (count, outcome) = meter(chunking.iter().copied(), limit);
        assert_eq!(outcome, whole.outcome, "the Meter and the Splitter disagree (limit {limit}, chunks {sizes:?})");
        assert_eq!(
            count,
            whole.messages.len() + usize::from(started_unfinished),
            "the Meter counts another number of messages (limit {limit}, chunks {sizes:?})"
        );
    }
}
