//! Byte-level conversion for messages that are the same on the wire in an older version and v1.
//!
//! v1 began as a copy of v1alpha2 and both grew together until 1.25, so most messages have the
//! same field numbers and types in both. Where every field a message carries (at any depth) is
//! such a field, decoding, converting and encoding it gives back the message it was: its bytes
//! can pass as they are. `build.rs` lists, per older version, each message without a
//! hand-written rule and its fields that pair as the same on both sides
//! (`generated::<version>::SAME`). Before a route copies, one walk over the bytes checks that
//! each field present is one of those, with the wire type a decoder expects; that strings are
//! UTF-8, as a decoder requires; that each enum value names the same value on the other side;
//! and that each nested message passes the same walk. Anything else (a field the target lacks,
//! an unknown number, an enum value without its counterpart, a message with a rule, malformed
//! bytes) sends the message down the decode–convert–encode path, which reports the losses: a copy
//! never hides a loss, and the other side decodes the message the decode path would have given
//! it (`tests/copy.rs` holds the two paths to that).

use crate::version::CriVersion;
use std::sync::OnceLock;

/// A generated enum map: the same value's number on the other side, or the loss's fallback.
pub type EnumMap = fn(i32) -> Result<i32, i32>;

/// A field that pairs as the same in an older version and v1 (generated).
pub struct SameField {
    pub number: u32,
    /// The wire type a decoder expects: 0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed
    /// 32-bit (for a repeated number, of each element).
    pub wire: u8,
    /// A repeated number, which may also come packed (length-delimited).
    pub packable: bool,
    /// A string, which a decoder refuses unless it is UTF-8.
    pub utf8: bool,
    /// A `map<string, string>`: each entry a key (1) and a value (2), both strings.
    pub map: bool,
    /// An enum's value maps, to v1 and from v1.
    pub enums: Option<(EnumMap, EnumMap)>,
}

/// A message without a rule, and its fields that are the same on both sides (generated).
pub struct SameFields {
    pub message: &'static str,
    pub fields: &'static [SameField],
}

/// One field as the walk reads it, in the source version's schema.
struct Entry {
    number: u32,
    wire: u8,
    packable: bool,
    utf8: bool,
    map: bool,
    /// The nested message's index in the source schema.
    nested: Option<usize>,
    /// The enum's map in this direction.
    enum_map: Option<EnumMap>,
}

/// Nested messages deeper than this go to the decode path (prost's own limit is 100).
const MAX_DEPTH: usize = 100;

/// Which messages of one direction (an older version to v1, or back) may be copied as bytes, by
/// the source schema's message index.
pub struct CopyTable {
    messages: Vec<Option<Vec<Entry>>>,
}

impl CopyTable {
    /// The table of the step between `old` and v1, in the direction `to_v1` says, made once from
    /// `same`, the generated `SAME` list of `old`.
    pub fn of(old: CriVersion, to_v1: bool, same: &'static [SameFields]) -> Option<&'static CopyTable> {
        static TABLES: [OnceLock<CopyTable>; 4] = [const { OnceLock::new() }; 4];
        let slot = match (old, to_v1) {
            (CriVersion::V1alpha1, true) => 0,
            (CriVersion::V1alpha1, false) => 1,
            (CriVersion::V1alpha2, true) => 2,
            (CriVersion::V1alpha2, false) => 3,
            (CriVersion::V1, _) => return None,
        };
        Some(TABLES[slot].get_or_init(|| CopyTable::build(old, to_v1, same)))
    }

    fn build(old: CriVersion, to_v1: bool, same: &'static [SameFields]) -> CopyTable {
        let source = if to_v1 { old.schema() } else { CriVersion::V1.schema() };
        let messages = source
            .messages
            .iter()
            .map(|message| {
                let same = same.iter().find(|s| s.message == message.name)?;
                let entries = same.fields.iter().map(|f| {
                    let info = message.fields.iter().find(|i| i.number == f.number);
                    Entry {
                        number: f.number,
                        wire: f.wire,
                        packable: f.packable,
                        utf8: f.utf8,
                        map: f.map,
                        nested: info.and_then(|i| i.message),
                        enum_map: f.enums.map(|(up, down)| if to_v1 { up } else { down }),
                    }
                });
                Some(entries.collect())
            })
            .collect();
        CopyTable { messages }
    }

    /// Whether `bytes`, message `index` of the source version, are the same message in the
    /// target version: every field present the same on both sides, at every depth.
    pub fn carries(&self, index: usize, bytes: &[u8]) -> bool {
        self.walk(index, bytes, 0)
    }

    fn walk(&self, index: usize, mut bytes: &[u8], depth: usize) -> bool {
        let Some(Some(fields)) = self.messages.get(index) else { return false };
        if depth > MAX_DEPTH {
            return false;
        }
        while !bytes.is_empty() {
            let Some(key) = varint(&mut bytes) else { return false };
            let (number, wire) = (key >> 3, (key & 7) as u8);
            let Some(field) = fields.iter().find(|f| u64::from(f.number) == number) else { return false };
            let carried = match wire {
                0 if field.wire == 0 => varint(&mut bytes).is_some_and(|v| same_enum(field.enum_map, v)),
                1 if field.wire == 1 => skip(&mut bytes, 8),
                5 if field.wire == 5 => skip(&mut bytes, 4),
                2 => match delimited(&mut bytes) {
                    None => false,
                    Some(inner) if field.wire == 2 => match (field.nested, field.map) {
                        (_, true) => map_entry(inner),
                        (Some(nested), false) => self.walk(nested, inner, depth + 1),
                        (None, false) => !field.utf8 || std::str::from_utf8(inner).is_ok(),
                    },
                    Some(inner) if field.packable => packed(field, inner),
                    Some(_) => false,
                },
                _ => false,
            };
            if !carried {
                return false;
            }
        }
        true
    }
}

/// An enum value is carried when it is the same number on the other side (decoders read an enum
/// as a 32-bit number, as this does).
fn same_enum(map: Option<EnumMap>, value: u64) -> bool {
    let Some(map) = map else { return true };
    let number = value as i32;
    map(number) == Ok(number)
}

/// A packed run of numbers: whole elements of the field's wire type, each enum value carried.
fn packed(field: &Entry, mut inner: &[u8]) -> bool {
    match field.wire {
        0 => {
            while !inner.is_empty() {
                if !varint(&mut inner).is_some_and(|v| same_enum(field.enum_map, v)) {
                    return false;
                }
            }
            true
        }
        1 => inner.len().is_multiple_of(8),
        5 => inner.len().is_multiple_of(4),
        _ => false,
    }
}

/// A `map<string, string>` entry: a key (1) and a value (2), both UTF-8 strings, nothing else.
fn map_entry(mut entry: &[u8]) -> bool {
    while !entry.is_empty() {
        let Some(key) = varint(&mut entry) else { return false };
        if !(key == (1 << 3 | 2) || key == (2 << 3 | 2)) {
            return false;
        }
        match delimited(&mut entry) {
            Some(text) if std::str::from_utf8(text).is_ok() => {}
            _ => return false,
        }
    }
    true
}

/// Reads a base-128 varint of at most 10 bytes, the tenth at most 1 (as decoders refuse more).
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        if i == 9 && byte > 1 {
            return None;
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

fn skip(bytes: &mut &[u8], n: usize) -> bool {
    match bytes.get(n..) {
        Some(rest) => {
            *bytes = rest;
            true
        }
        None => false,
    }
}

/// A length-delimited field's contents.
fn delimited<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(bytes)?).ok()?;
    let inner = bytes.get(..len)?;
    *bytes = &bytes[len..];
    Some(inner)
}
