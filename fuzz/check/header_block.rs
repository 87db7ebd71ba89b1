//! `header_block`: one connection's HPACK header blocks through `HeaderBlocks::mend`
//! (`cri_bridge::front_door::header_block`), against a full HPACK decoder of our own (RFC 7541,
//! with `h2`'s limits: integers of at most 5 octets, table size updates up to the 4,096 bytes
//! both sides start with).
//!
//! Input: blocks, each a length byte (255: a 2-byte length follows) and its bytes.
//!
//! Two decoders follow the connection: the client's, reading the blocks as sent, and the
//! server's, reading what the front door hands on (the block itself when `mend` says
//! `Unchanged`, its output when `Rewritten`). While the client's blocks decode and `mend`
//! accepts them:
//! - the server decodes every block handed on, and its table holds the client's entries, name
//!   for name and size for size (only a mended authority's value differs);
//! - the server gets the client's header list with no `:authority` it cannot parse (unless the
//!   block has the one unfixable form, an empty authority the client indexes, or names that
//!   entry), with
//!   every valid authority the client sent literally, and `:scheme: http` first where a request
//!   head had none; nothing else changes;
//! - a block needing nothing passes unchanged.
//!
//! (`mend` refusing a block is not checked: the front door then hands the connection on as it
//! came, and the server answers whatever is wrong with it.)

use super::Choices;
use cri_bridge::front_door::header_block::{HeaderBlocks, Mended};
use std::collections::VecDeque;

/// RFC 7541 Appendix A.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];
const TABLE_SIZE: usize = 4096;

/// How a field was represented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repr {
    /// An entry of the static table.
    Indexed,
    /// An entry of the dynamic table.
    Dynamic,
    /// A literal added to the table.
    Incremental,
    /// A literal without indexing (or never indexed).
    Literal,
}

#[derive(Clone, Debug)]
pub struct Header {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
    pub repr: Repr,
}

/// An HPACK decoder (RFC 7541) with `h2`'s limits; its dynamic table newest first.
#[derive(Default)]
pub struct Decoder {
    entries: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: Option<usize>,
}

fn integer(buf: &[u8], pos: &mut usize, prefix: u32) -> Result<usize, String> {
    let mask = (1usize << prefix) - 1;
    let first = *buf.get(*pos).ok_or("integer past the end")?;
    *pos += 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    for shift in [0, 7, 14, 21] {
        let b = *buf.get(*pos).ok_or("integer past the end")?;
        *pos += 1;
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("integer of more than 5 octets".into())
}

fn string(buf: &[u8], pos: &mut usize) -> Result<Vec<u8>, String> {
    let huffman = buf.get(*pos).ok_or("string past the end")? & 0x80 != 0;
    let len = integer(buf, pos, 7)?;
    let end = pos.checked_add(len).filter(|e| *e <= buf.len()).ok_or("string past the end")?;
    let raw = &buf[*pos..end];
    *pos = end;
    if !huffman {
        return Ok(raw.to_vec());
    }
    let mut out = Vec::new();
    httlib_huffman::decode(raw, &mut out, httlib_huffman::DecoderSpeed::FiveBits)
        .map_err(|e| format!("huffman: {e:?}"))?;
    Ok(out)
}

impl Decoder {
    fn max(&self) -> usize {
        self.max.unwrap_or(TABLE_SIZE)
    }

    fn get(&self, index: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
        match index {
            0 => Err("index 0".into()),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            }
            _ => self.entries.get(index - 62).cloned().ok_or_else(|| format!("index {index} past the table")),
        }
    }

    fn evict(&mut self, limit: usize) {
        while self.size > limit {
            let Some((n, v)) = self.entries.pop_back() else { break };
            self.size -= n.len() + v.len() + 32;
        }
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + 32;
        if size > self.max() {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict(self.max() - size);
        self.size += size;
        self.entries.push_front((name, value));
    }

    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<Header>, String> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < block.len() {
            let first = block[pos];
            if first & 0x80 != 0 {
                let index = integer(block, &mut pos, 7)?;
                let (name, value) = self.get(index)?;
                let repr = if index > STATIC.len() { Repr::Dynamic } else { Repr::Indexed };
                out.push(Header { name, value, repr });
            } else if first & 0xe0 == 0x20 {
                let size = integer(block, &mut pos, 5)?;
                if size > TABLE_SIZE {
                    return Err(format!("table size update to {size}"));
                }
                self.max = Some(size);
                self.evict(size);
            } else {
                let incremental = first & 0xc0 == 0x40;
                let index = integer(block, &mut pos, if incremental { 6 } else { 4 })?;
                let name = if index == 0 { string(block, &mut pos)? } else { self.get(index)?.0 };
                let value = string(block, &mut pos)?;
                if incremental {
                    self.insert(name.clone(), value.clone());
                }
                let repr = if incremental { Repr::Incremental } else { Repr::Literal };
                out.push(Header { name, value, repr });
            }
        }
        Ok(out)
    }

    /// The table as names and sizes.
    fn shape(&self) -> Vec<(Vec<u8>, usize)> {
        self.entries.iter().map(|(n, v)| (n.clone(), n.len() + v.len() + 32)).collect()
    }
}

fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

fn without_authority(list: &[Header]) -> Vec<(&[u8], &[u8])> {
    list.iter().filter(|h| h.name != b":authority").map(|h| (h.name.as_slice(), h.value.as_slice())).collect()
}

fn show(list: &[Header]) -> String {
    let v: Vec<String> =
        list.iter().map(|h| format!("{}: {} ({:?})", h.name.escape_ascii(), h.value.escape_ascii(), h.repr)).collect();
    v.join(", ")
}

pub fn run(data: &[u8]) {
    let mut input = Choices::new(data);
    let mut mender = HeaderBlocks::default();
    let (mut client, mut server) = (Decoder::default(), Decoder::default());
    let mut out = Vec::new();
    let mut number = 0;
    while !input.is_empty() {
        number += 1;
        let len = match input.u8() {
            255 => usize::from(input.u16()),
            n => usize::from(n),
        };
        let block = input.take(len);
        let mended = mender.mend(block, &mut out);
        let Ok(original) = client.decode(block) else { return };
        let Ok(mended) = mended else { return };
        let sent: &[u8] = match mended {
            Mended::Unchanged => block,
            Mended::Rewritten => &out,
        };
        let fail = |why: String| -> ! {
            panic!("block {number} ({mended:?}): {why}\n  client's: {}\n  sent: {:02x?}", show(&original), sent)
        };
        let received =
            server.decode(sent).unwrap_or_else(|e| fail(format!("the server cannot decode what was sent: {e}")));
        if client.shape() != server.shape() || client.max() != server.max() {
            fail(format!(
                "the tables differ: client {:?}\n  server {:?}",
                client.shape().iter().map(|(n, s)| (n.escape_ascii().to_string(), *s)).collect::<Vec<_>>(),
                server.shape().iter().map(|(n, s)| (n.escape_ascii().to_string(), *s)).collect::<Vec<_>>()
            ));
        }

        // An empty authority the client indexes has no same-length valid form: it stays in both
        // tables as it is, and every block naming it passes with it (the server refuses those
        // streams).
        let unfixable = original.iter().any(|h| {
            h.name == b":authority" && h.value.is_empty() && matches!(h.repr, Repr::Incremental | Repr::Dynamic)
        });
        let is_request = original.iter().any(|h| h.name == b":method");
        let has_scheme = original.iter().any(|h| h.name == b":scheme");
        let mut expected = without_authority(&original);
        if mended == Mended::Rewritten && is_request && !has_scheme {
            expected.insert(0, (b":scheme", b"http"));
        }
        if without_authority(&received) != expected {
            fail(format!("the server got another header list: {}", show(&received)));
        }
        let bad = received.iter().find(|h| h.name == b":authority" && !valid_authority(&h.value));
        if let (Some(h), false) = (bad, unfixable) {
            fail(format!("the server got the authority {:?}", h.value.escape_ascii().to_string()));
        }
        if is_request && !has_scheme && !unfixable && !received.iter().any(|h| h.name == b":scheme") {
            fail("a request head reaches the server without :scheme".into());
        }
        let authorities = |list: &[Header], literal_only: bool| -> Vec<Vec<u8>> {
            list.iter()
                .filter(|h| h.name == b":authority" && valid_authority(&h.value))
                .filter(|h| !literal_only || !matches!(h.repr, Repr::Indexed | Repr::Dynamic))
                .map(|h| h.value.clone())
                .collect()
        };
        let (sent_ones, got) = (authorities(&original, true), authorities(&received, false));
        let mut remaining = got.iter();
        if !sent_ones.iter().all(|a| remaining.any(|g| g == a)) {
            fail(format!("a valid authority did not reach the server: {}", show(&received)));
        }
        let needs = original.iter().any(|h| {
            h.name == b":authority" && !valid_authority(&h.value) && h.repr != Repr::Indexed && h.repr != Repr::Dynamic
        }) || original.iter().any(|h| h.name == b":authority" && h.value.is_empty())
            || (is_request && !has_scheme);
        if !needs && mended == Mended::Rewritten {
            fail("a block that needed nothing was rewritten".into());
        }
    }
}
