//! The protobuf wire format as the scan reads it: one field at a time (key, then its varint or
//! payload), nothing decoded beyond that.

use crate::api::FieldInfo;

/// One field as found on the wire.
pub struct Found<'b> {
    pub number: u32,
    pub wire_type: u8,
    /// The varint's value (wire type 0).
    pub varint: u64,
    /// The payload (wire types 1, 2, 5).
    pub value: &'b [u8],
}

impl Found<'_> {
    /// Holds something other than the proto3 default (a message, even empty, is set).
    pub fn is_set(&self, field: &FieldInfo) -> bool {
        match self.wire_type {
            0 => self.varint != 0,
            2 => field.message.is_some() || !self.value.is_empty(),
            _ => self.value.iter().any(|b| *b != 0),
        }
    }
}

pub fn next<'b>(bytes: &mut &'b [u8]) -> Result<Found<'b>, &'static str> {
    let key = varint(bytes).ok_or("truncated field key")?;
    // Protobuf field numbers are 1 to 2^29 - 1; cutting a larger key down to u32 would read it
    // as some other field.
    let (number, wire_type) = (key >> 3, (key & 7) as u8);
    if number == 0 {
        return Err("field number 0");
    }
    let number = u32::try_from(number).ok().filter(|n| *n < 1 << 29).ok_or("field number out of range")?;
    let mut found = Found { number, wire_type, varint: 0, value: &[] };
    match wire_type {
        0 => found.varint = varint(bytes).ok_or("truncated field value")?,
        1 => found.value = take(bytes, 8).ok_or("truncated field value")?,
        2 => {
            let len = varint(bytes).and_then(|len| usize::try_from(len).ok()).ok_or("truncated field value")?;
            found.value = take(bytes, len).ok_or("truncated field value")?;
        }
        5 => found.value = take(bytes, 4).ok_or("truncated field value")?,
        _ => return Err("unsupported wire type"),
    }
    Ok(found)
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(value);
        }
    }
    None
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if bytes.len() < n {
        return None;
    }
    let (value, rest) = bytes.split_at(n);
    *bytes = rest;
    Some(value)
}

/// The value of the last occurrence of varint field `number` in `message` (the one a decoder
/// keeps).
pub fn last_varint(message: &[u8], number: u32) -> Option<u64> {
    let mut rest = message;
    let mut last = None;
    while let Ok(found) = next(&mut rest) {
        if found.number == number && found.wire_type == 0 {
            last = Some(found.varint);
        }
    }
    last
}

/// The payload of the last occurrence of length-delimited field `number` in `message`.
pub fn last_bytes(message: &[u8], number: u32) -> Option<&[u8]> {
    let mut rest = message;
    let mut last = None;
    while let Ok(found) = next(&mut rest) {
        if found.number == number && found.wire_type == 2 {
            last = Some(found.value);
        }
    }
    last
}

/// The last occurrence of top-level string field `number` in `message` (the one a decoder
/// keeps), if it is valid UTF-8.
pub fn string_field(message: &[u8], number: u32) -> Option<String> {
    last_bytes(message, number).and_then(|v| std::str::from_utf8(v).ok()).map(str::to_string)
}
