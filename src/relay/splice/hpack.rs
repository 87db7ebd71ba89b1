//! HPACK (RFC 7541) as the splice needs it: every header block of one direction decoded against
//! that direction's dynamic table (which the splice follows and never changes), and header
//! blocks of cri-bridge's own written so that they enter no table.
//!
//! The integer and string primitives and the static names are the front door's
//! (`front_door::header_block`), which reads the same format.

use crate::front_door::header_block::{integer, put_raw_length, string, ENTRY_OVERHEAD, STATIC_NAMES};
use std::collections::VecDeque;

/// Why a block could not be decoded: the connection's tables may differ from here on, so the
/// splice ends it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("a header block is cut short or holds an integer beyond any sane size")]
    Truncated,
    #[error("a header block refers to table entry {0}, which does not exist")]
    BadIndex(usize),
    #[error("a header block sets the table size to {asked}, above the {limit} allowed")]
    TableSize { asked: usize, limit: usize },
    #[error("a table size update after the first field of a header block")]
    LateSizeUpdate,
    #[error("a header list above {0} bytes")]
    TooLarge(usize),
}

/// The values of the static table's entries that have one (RFC 7541 Appendix A).
fn static_value(index: usize) -> &'static [u8] {
    match index {
        2 => b"GET",
        3 => b"POST",
        4 => b"/",
        5 => b"/index.html",
        6 => b"http",
        7 => b"https",
        8 => b"200",
        9 => b"204",
        10 => b"206",
        11 => b"304",
        12 => b"400",
        13 => b"404",
        14 => b"500",
        16 => b"gzip, deflate",
        _ => b"",
    }
}

/// A table entry: a name and a value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// One direction's dynamic table, as the receiving end holds it.
pub struct Decoder {
    /// Newest first (index 62 is `entries[0]`).
    entries: VecDeque<Entry>,
    size: usize,
    /// The size the encoder last set (at most `limit`).
    max_size: usize,
    /// SETTINGS_HEADER_TABLE_SIZE of the receiving end.
    limit: usize,
    /// The largest header list a block may decode to.
    max_list: usize,
    name_scratch: Vec<u8>,
    value_scratch: Vec<u8>,
}

impl Decoder {
    /// A table starting at the protocol's 4,096 bytes, decoding header lists up to `max_list`.
    pub fn new(max_list: usize) -> Decoder {
        Decoder {
            entries: VecDeque::new(),
            size: 0,
            max_size: 4096,
            limit: 4096,
            max_list,
            name_scratch: Vec::new(),
            value_scratch: Vec::new(),
        }
    }

    /// The receiving end announced SETTINGS_HEADER_TABLE_SIZE `limit`.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Decodes `block`, handing each field to `each` in order, and updates the table as the
    /// block says; true when the block changed the table (or its size).
    pub fn decode(&mut self, block: &[u8], mut each: impl FnMut(&[u8], &[u8])) -> Result<bool, HpackError> {
        let mut changed = false;
        let mut rest = block;
        let mut fields = 0usize;
        let mut list = 0usize;
        while let Some(&first) = rest.first() {
            let (name_len, value_len);
            if first & 0x80 != 0 {
                let (index, used) = integer(rest, 7).ok_or(HpackError::Truncated)?;
                let (name, value) = self.entry(index)?;
                (name_len, value_len) = (name.len(), value.len());
                each(name, value);
                rest = &rest[used..];
            } else if first & 0xe0 == 0x20 {
                if fields > 0 {
                    return Err(HpackError::LateSizeUpdate);
                }
                let (asked, used) = integer(rest, 5).ok_or(HpackError::Truncated)?;
                if asked > self.limit {
                    return Err(HpackError::TableSize { asked, limit: self.limit });
                }
                self.max_size = asked;
                self.evict_to(asked);
                changed = true;
                rest = &rest[used..];
                continue;
            } else {
                // 01: with incremental indexing (6-bit index); 0000/0001: without, or never
                // indexed (4-bit index).
                let indexing = first & 0x40 != 0;
                let (index, used) = integer(rest, if indexing { 6 } else { 4 }).ok_or(HpackError::Truncated)?;
                rest = &rest[used..];
                self.name_scratch.clear();
                if index == 0 {
                    let (name, used) = string(rest, &mut self.value_scratch).ok_or(HpackError::Truncated)?;
                    self.name_scratch.extend_from_slice(name);
                    rest = &rest[used..];
                } else {
                    let (name, _) = self.entry(index)?;
                    let name = name.to_vec();
                    self.name_scratch = name;
                }
                let (value, used) = string(rest, &mut self.value_scratch).ok_or(HpackError::Truncated)?;
                rest = &rest[used..];
                (name_len, value_len) = (self.name_scratch.len(), value.len());
                each(&self.name_scratch, value);
                if indexing {
                    changed = true;
                    let entry = (self.name_scratch.as_slice().into(), Box::<[u8]>::from(value));
                    self.insert(entry);
                }
            }
            fields += 1;
            list += name_len + value_len + ENTRY_OVERHEAD;
            if list > self.max_list {
                return Err(HpackError::TooLarge(self.max_list));
            }
        }
        Ok(changed)
    }

    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            1..=61 => Ok((STATIC_NAMES[index - 1], static_value(index))),
            _ => {
                let (name, value) =
                    index.checked_sub(62).and_then(|i| self.entries.get(i)).ok_or(HpackError::BadIndex(index))?;
                Ok((name, value))
            }
        }
    }

    fn insert(&mut self, (name, value): Entry) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // An entry larger than the table empties it and is not added (§4.4).
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.entries.push_front((name, value));
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            let Some((name, value)) = self.entries.pop_back() else { break };
            self.size -= name.len() + value.len() + ENTRY_OVERHEAD;
        }
    }
}

/// A decoded header list, held flat in one buffer that is kept from block to block.
#[derive(Default)]
pub struct Fields {
    bytes: Vec<u8>,
    /// Each field's start, the end of its name, and the end of its value, in `bytes`.
    spans: Vec<(usize, usize, usize)>,
}

impl Fields {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(value);
        self.spans.push((start, start + name.len(), self.bytes.len()));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans.iter().map(|&(start, name, end)| (&self.bytes[start..name], &self.bytes[name..end]))
    }

    /// The first field named `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// Whether `name` may be a header name on the wire (lowercase, a token) and `value` a value
/// (no control characters but tab), as the `http` crate requires of them.
pub fn valid_field(name: &[u8], value: &[u8]) -> bool {
    let name_ok = |b: &u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~');
    let pseudo = name.first() == Some(&b':');
    let name = if pseudo { &name[1..] } else { name };
    !name.is_empty() && name.iter().all(name_ok) && value.iter().all(|&b| (b >= 32 && b != 127) || b == b'\t')
}

/// Appends one field to a block of cri-bridge's own: the static entry when name and value are
/// one, else a literal never indexed (naming a static entry when the name is one), not
/// Huffman-coded. Such a block changes neither end's table.
pub fn encode(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let static_name = STATIC_NAMES.iter().position(|n| *n == name).map(|i| i + 1);
    if let Some(first) = static_name {
        let whole = (first..=61).take_while(|&i| STATIC_NAMES[i - 1] == name).find(|&i| static_value(i) == value);
        if let Some(index) = whole {
            put_integer(index, 7, 0x80, out);
            return;
        }
    }
    put_integer(static_name.unwrap_or(0), 4, 0x10, out);
    if static_name.is_none() {
        put_raw_length(name.len(), out);
        out.extend_from_slice(name);
    }
    put_raw_length(value.len(), out);
    out.extend_from_slice(value);
}

/// An HPACK integer with a `prefix`-bit prefix, the first byte's other bits `flags`.
fn put_integer(mut value: usize, prefix: u32, flags: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(decoder: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        decoder
            .decode(block, |n, v| fields.push((String::from_utf8_lossy(n).into(), String::from_utf8_lossy(v).into())))
            .expect("a valid block");
        fields
    }

    #[test]
    fn blocks_of_a_real_encoder_decode_with_their_table() {
        // httlib-hpack as the encoder: indexing, Huffman, a table that evicts.
        let mut encoder = httlib_hpack::Encoder::with_dynamic_size(256);
        let mut decoder = Decoder::new(1 << 20);
        for round in 0..50 {
            let fields: Vec<(Vec<u8>, Vec<u8>)> = vec![
                (b":method".to_vec(), b"POST".to_vec()),
                (b":path".to_vec(), format!("/runtime.v1.RuntimeService/M{}", round % 7).into_bytes()),
                (b"user-agent".to_vec(), b"grpc-go/1.60".to_vec()),
                (format!("x-meta-{round}").into_bytes(), vec![b'v'; round * 3]),
            ];
            let mut block = Vec::new();
            if round == 10 {
                encoder.update_max_dynamic_size(128, &mut block).expect("a size update");
            }
            for (name, value) in &fields {
                let flags = 0x1 | 0x2 | 0x4 | 0x10;
                encoder.encode((name.clone(), value.clone(), flags), &mut block).expect("encodes");
            }
            let got = decoded(&mut decoder, &block);
            let want: Vec<(String, String)> = fields
                .iter()
                .map(|(n, v)| (String::from_utf8_lossy(n).into(), String::from_utf8_lossy(v).into()))
                .collect();
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn own_blocks_decode_and_leave_the_table_empty() {
        let mut table_free = true;
        let mut block = Vec::new();
        encode(b":status", b"200", &mut block);
        encode(b"content-type", b"application/grpc", &mut block);
        encode(b"grpc-status", b"13", &mut block);
        encode(b"grpc-message", &vec![b'x'; 300], &mut block);
        assert_eq!(block[0], 0x88, ":status 200 is static entry 8");
        let mut decoder = Decoder::new(1 << 20);
        let fields = decoded(&mut decoder, &block);
        table_free &= !decoder.decode(&block, |_, _| {}).expect("decodes");
        assert!(table_free);
        assert_eq!(fields.len(), 4);
        assert_eq!(fields[2], ("grpc-status".into(), "13".into()));
        assert_eq!(fields[3].1.len(), 300);
        assert!(decoder.entries.is_empty());
    }

    #[test]
    fn bad_blocks_are_errors() {
        let mut decoder = Decoder::new(100);
        assert_eq!(decoder.decode(&[0x80 | 62], |_, _| {}), Err(HpackError::BadIndex(62)));
        assert_eq!(decoder.decode(&[0x40, 0x05, b'a'], |_, _| {}), Err(HpackError::Truncated));
        assert_eq!(decoder.decode(&[0x82, 0x3f, 0xe1, 0x1f], |_, _| {}), Err(HpackError::LateSizeUpdate));
        assert!(matches!(decoder.decode(&[0x3f, 0xe1, 0x7f], |_, _| {}), Err(HpackError::TableSize { .. })));
        let mut big = Vec::new();
        encode(b"x-big", &[b'a'; 200], &mut big);
        assert_eq!(decoder.decode(&big, |_, _| {}), Err(HpackError::TooLarge(100)));
    }
}
