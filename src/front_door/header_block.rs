//! One HPACK header block (RFC 7541) mended with the least work the connection's table allows.
//!
//! The client and the server behind us each keep a dynamic table, changed by the blocks the
//! server reads. This pass keeps the server's table equal to the client's, entry for entry and
//! size for size, so that almost every block passes through unchanged: only the sizes of
//! indexed entries are tracked (a name and a length each), and a Huffman-coded string is decoded
//! only where its meaning or length is needed, never in the common case of a field that refers to
//! the table. Where a field must change:
//!
//! - an `:authority` that is not `host[:port]` (the socket path grpc-go sends, C-core's
//!   percent-encoded path) becomes, when the client indexes it, a valid authority of the same
//!   length (`xxx…`): the entry keeps its size, so both tables evict alike, and later references
//!   to it stay valid; when the client does not index it, it is left out;
//! - a request head without `:scheme` gets `:scheme: http`, after any table size updates (which
//!   must open a block) and indexed nowhere.
//!
//! The one authority no same-length form can replace is an empty one that the client indexes (no
//! client known to us does that: encoders send the static entry instead, which is left out here):
//! it is passed as it came, and the server refuses that one stream. The rest of its block is still
//! mended, so that every other authority the block adds to the table is valid for the streams that
//! name it later.

use std::collections::VecDeque;

/// What a block needs.
#[derive(Debug, PartialEq, Eq)]
pub enum Mended {
    /// Pass the block as it came.
    Unchanged,
    /// Send the rewritten block instead.
    Rewritten,
}

/// The block cannot be decoded: the tables may differ from here on.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// The names of the HPACK static table (RFC 7541 Appendix A), index 1 to 61.
pub const STATIC_NAMES: [&[u8]; 61] = [
    b":authority",
    b":method",
    b":method",
    b":path",
    b":path",
    b":scheme",
    b":scheme",
    b":status",
    b":status",
    b":status",
    b":status",
    b":status",
    b":status",
    b":status",
    b"accept-charset",
    b"accept-encoding",
    b"accept-language",
    b"accept-ranges",
    b"accept",
    b"access-control-allow-origin",
    b"age",
    b"allow",
    b"authorization",
    b"cache-control",
    b"content-disposition",
    b"content-encoding",
    b"content-language",
    b"content-length",
    b"content-location",
    b"content-range",
    b"content-type",
    b"cookie",
    b"date",
    b"etag",
    b"expect",
    b"expires",
    b"from",
    b"host",
    b"if-match",
    b"if-modified-since",
    b"if-none-match",
    b"if-range",
    b"if-unmodified-since",
    b"last-modified",
    b"link",
    b"location",
    b"max-forwards",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"range",
    b"referer",
    b"refresh",
    b"retry-after",
    b"server",
    b"set-cookie",
    b"strict-transport-security",
    b"transfer-encoding",
    b"user-agent",
    b"vary",
    b"via",
    b"www-authenticate",
];
/// Static entry 1 is `:authority` with an empty value.
const EMPTY_AUTHORITY: usize = 1;
/// The table size both sides start with (SETTINGS_HEADER_TABLE_SIZE's default; the server
/// behind us keeps it).
const DEFAULT_TABLE_SIZE: usize = 4096;
/// A header field's size in the table is its name, its value and this (§4.1).
pub const ENTRY_OVERHEAD: usize = 32;
/// Huffman decoding room kept from one block for the next; a larger value's is let go.
const KEEP_SCRATCH: usize = 16 * 1024;

/// The connection's dynamic table as names and sizes, and the buffers one block needs.
pub struct HeaderBlocks {
    /// Newest first: (name, entry size).
    entries: VecDeque<(Vec<u8>, usize)>,
    size: usize,
    max_size: usize,
    scratch: Vec<u8>,
}

impl Default for HeaderBlocks {
    fn default() -> Self {
        HeaderBlocks { entries: VecDeque::new(), size: 0, max_size: DEFAULT_TABLE_SIZE, scratch: Vec::new() }
    }
}

/// The pseudo-headers a block names, for the `:scheme` rule.
#[derive(Default)]
struct Seen {
    method: bool,
    scheme: bool,
}

impl Seen {
    fn note(&mut self, name: &[u8]) {
        match name {
            b":method" => self.method = true,
            b":scheme" => self.scheme = true,
            _ => {}
        }
    }
}

impl HeaderBlocks {
    /// Reads `block` (a whole header block), updating the table as the server will; writes the
    /// mended block to `out` when it needs one.
    pub fn mend(&mut self, block: &[u8], out: &mut Vec<u8>) -> Result<Mended, Malformed> {
        let mended = self.read(block, out);
        // A large value's decoding room is not kept for the blocks after it.
        if self.scratch.capacity() > KEEP_SCRATCH {
            self.scratch = Vec::new();
        }
        mended
    }

    fn read(&mut self, block: &[u8], out: &mut Vec<u8>) -> Result<Mended, Malformed> {
        out.clear();
        let mut changed = false;
        let mut seen = Seen::default();
        // Where a missing `:scheme` goes: after the size updates that open the block.
        let mut first_field = None;
        let mut pos = 0;
        while pos < block.len() {
            let rest = &block[pos..];
            let first = rest[0];
            if first & 0xe0 == 0x20 {
                // Dynamic table size update.
                let (size, used) = integer(rest, 5).ok_or(Malformed)?;
                // Above the server's SETTINGS_HEADER_TABLE_SIZE is an error (§6.3) the server
                // answers; our copy of the table must not grow past it meanwhile.
                if size > DEFAULT_TABLE_SIZE {
                    return Err(Malformed);
                }
                self.resize(size);
                out.extend_from_slice(&rest[..used]);
                pos += used;
                continue;
            }
            first_field.get_or_insert(out.len());
            let used = if first & 0x80 != 0 {
                let (index, used) = integer(rest, 7).ok_or(Malformed)?;
                let name = self.name(index).ok_or(Malformed)?;
                seen.note(name);
                if index == EMPTY_AUTHORITY {
                    changed = true;
                } else {
                    out.extend_from_slice(&rest[..used]);
                }
                used
            } else {
                let indexed = first & 0xc0 == 0x40;
                let (name_index, mut used) = integer(rest, if indexed { 6 } else { 4 }).ok_or(Malformed)?;
                let name = if name_index == 0 {
                    let (name, n) = string(&rest[used..], &mut self.scratch).ok_or(Malformed)?;
                    used += n;
                    name.to_vec()
                } else {
                    self.name(name_index).ok_or(Malformed)?.to_vec()
                };
                seen.note(&name);
                let value_at = used;
                let is_authority = name == b":authority";
                let (value_length, n, valid) = if is_authority || indexed {
                    // An indexed entry's size needs the decoded length, hence decoding.
                    let (value, n) = string(&rest[used..], &mut self.scratch).ok_or(Malformed)?;
                    let valid = !is_authority || http::uri::Authority::try_from(value).is_ok();
                    (value.len(), n, valid)
                } else {
                    // Neither indexed nor an authority: its value needs no reading.
                    (0, string_extent(&rest[used..]).ok_or(Malformed)?, true)
                };
                used += n;
                if indexed {
                    self.insert(name, value_length);
                }
                match (valid, indexed) {
                    (true, _) => out.extend_from_slice(&rest[..used]),
                    (false, false) => changed = true,
                    (false, true) if value_length > 0 => {
                        // The same name representation, a same-length valid value.
                        out.extend_from_slice(&rest[..value_at]);
                        put_raw_length(value_length, out);
                        out.resize(out.len() + value_length, b'x');
                        changed = true;
                    }
                    // An empty authority indexed: no same-length form (see the module doc). It
                    // goes as it came, and the block is read on, so that our copy of the table
                    // takes every entry the server will, and mended on.
                    (false, true) => out.extend_from_slice(&rest[..used]),
                }
                used
            };
            pos += used;
        }
        if seen.method && !seen.scheme {
            let at = first_field.unwrap_or(out.len());
            let mut scheme = vec![0x00];
            for string in [&b":scheme"[..], b"http"] {
                put_raw_length(string.len(), &mut scheme);
                scheme.extend_from_slice(string);
            }
            out.splice(at..at, scheme);
            changed = true;
        }
        Ok(if changed { Mended::Rewritten } else { Mended::Unchanged })
    }

    /// The name at a table index: static first, then dynamic, newest first.
    fn name(&self, index: usize) -> Option<&[u8]> {
        match index {
            0 => None,
            1..=61 => Some(STATIC_NAMES[index - 1]),
            _ => self.entries.get(index - 62).map(|(name, _)| name.as_slice()),
        }
    }

    /// Adds an entry as the decoder does: evicting the oldest until it fits, or emptying the
    /// table for an entry larger than the table (§4.4).
    fn insert(&mut self, name: Vec<u8>, value_length: usize) {
        let size = name.len() + value_length + ENTRY_OVERHEAD;
        self.evict_to(self.max_size.saturating_sub(size));
        if size <= self.max_size {
            self.entries.push_front((name, size));
            self.size += size;
        }
    }

    fn resize(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some((_, size)) => self.size -= size,
                None => break,
            }
        }
    }
}

/// A string literal (§5.2), decoded (into `scratch` when Huffman-coded), and the bytes it took.
pub fn string<'a>(buf: &'a [u8], scratch: &'a mut Vec<u8>) -> Option<(&'a [u8], usize)> {
    let (length, used) = integer(buf, 7)?;
    let raw = buf.get(used..used.checked_add(length)?)?;
    if buf[0] & 0x80 == 0 {
        return Some((raw, used + length));
    }
    scratch.clear();
    httlib_huffman::decode(raw, scratch, httlib_huffman::DecoderSpeed::FiveBits).ok()?;
    Some((scratch.as_slice(), used + length))
}

/// How many bytes a string literal takes, without reading it.
fn string_extent(buf: &[u8]) -> Option<usize> {
    let (length, used) = integer(buf, 7)?;
    let end = used.checked_add(length)?;
    (end <= buf.len()).then_some(end)
}

/// An HPACK integer with a `prefix`-bit prefix (§5.1), and the bytes it took; `None` when
/// truncated or beyond any sane size.
pub fn integer(buf: &[u8], prefix: u32) -> Option<(usize, usize)> {
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(*buf.first()?) & max;
    if value < max {
        return Some((value, 1));
    }
    for (i, byte) in buf.iter().enumerate().skip(1).take(4) {
        value += usize::from(byte & 0x7f) << (7 * (i - 1));
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// A string length as an HPACK integer with a 7-bit prefix and the Huffman bit clear.
pub fn put_raw_length(mut length: usize, out: &mut Vec<u8>) {
    const PREFIX_MAX: usize = 0x7f;
    if length < PREFIX_MAX {
        out.push(length as u8);
        return;
    }
    out.push(PREFIX_MAX as u8);
    length -= PREFIX_MAX;
    while length >= 0x80 {
        out.push((length & 0x7f) as u8 | 0x80);
        length >>= 7;
    }
    out.push(length as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A literal `:authority` (static name 1) added to the table, with a raw value.
    fn indexed_authority(value: &[u8]) -> Vec<u8> {
        let mut field = vec![0x41, value.len() as u8];
        field.extend_from_slice(value);
        field
    }

    #[test]
    fn a_block_with_an_unfixable_authority_still_mends_the_others_it_indexes() {
        // Found by the header_block fuzz target: POST, http, an empty authority and a socket path
        // authority, both indexed. The empty one cannot be mended; the path must still be, or the
        // server's table keeps it and every later stream naming it is refused.
        let mut block = vec![0x83, 0x86];
        block.extend(indexed_authority(b""));
        block.extend(indexed_authority(b"/run/x.sock"));
        let mut blocks = HeaderBlocks::default();
        let mut out = Vec::new();
        assert_eq!(blocks.mend(&block, &mut out), Ok(Mended::Rewritten));
        let mut expected = vec![0x83, 0x86];
        expected.extend(indexed_authority(b""));
        expected.extend(indexed_authority(b"xxxxxxxxxxx"));
        assert_eq!(out, expected, "the empty authority as it came, the path as a same-length valid one");
        // A later block naming the path's entry (62, the newest) needs nothing: the server's
        // entry is the mended one.
        assert_eq!(blocks.mend(&[0x83, 0x86, 0x80 | 62], &mut out), Ok(Mended::Unchanged));
    }
}
