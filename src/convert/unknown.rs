//! Finds fields in wire bytes that our schema does not know (a client newer than cri-bridge).
//!
//! prost drops unknown fields when it decodes, so before a request is converted its bytes are
//! walked against the schema table; every unknown field number becomes a loss at
//! `<path>.#<number>`, which then goes through the loss policy like any other.

use super::{Loss, LossReason};
use crate::api::SchemaInfo;
use std::borrow::Cow;

/// The bytes are not a valid protobuf encoding.
#[derive(Debug, thiserror::Error)]
#[error("malformed protobuf at {path}: {what}")]
pub struct Malformed {
    pub path: String,
    pub what: &'static str,
}

/// Scans `bytes`, encoded as message `message` of `schema`, and appends a loss for each field
/// number the schema does not know.
pub fn scan(schema: &SchemaInfo, message: usize, bytes: &[u8], losses: &mut Vec<Loss>) -> Result<(), Malformed> {
    let mut path = Vec::new();
    walk(schema, message, bytes, &mut path, losses)
}

fn walk<'a>(
    schema: &'a SchemaInfo,
    message: usize,
    mut bytes: &[u8],
    path: &mut Vec<&'a str>,
    losses: &mut Vec<Loss>,
) -> Result<(), Malformed> {
    let info = &schema.messages[message];
    let malformed = |path: &Vec<&str>, what| Malformed { path: render(path), what };
    while !bytes.is_empty() {
        let key = varint(&mut bytes).ok_or_else(|| malformed(path, "truncated field key"))?;
        let (number, wire_type) = ((key >> 3) as u32, (key & 7) as u8);
        if number == 0 {
            return Err(malformed(path, "field number 0"));
        }
        let value = match wire_type {
            0 => varint(&mut bytes).map(|_| &[][..]),
            1 => take(&mut bytes, 8),
            2 => varint(&mut bytes).and_then(|len| take(&mut bytes, usize::try_from(len).ok()?)),
            5 => take(&mut bytes, 4),
            _ => return Err(malformed(path, "unsupported wire type")),
        }
        .ok_or_else(|| malformed(path, "truncated field value"))?;
        match info.field(number) {
            None => {
                let rendered = render(path);
                let at = if rendered.is_empty() { format!("#{number}") } else { format!("{rendered}.#{number}") };
                losses.push(Loss {
                    path: at,
                    field: Cow::Owned(format!("{}.#{number}", info.name)),
                    reason: LossReason::UnknownField,
                });
            }
            Some(field) => {
                if let (Some(nested), 2) = (field.message, wire_type) {
                    path.push(field.name);
                    walk(schema, nested, value, path, losses)?;
                    path.pop();
                }
            }
        }
    }
    Ok(())
}

fn render(path: &[&str]) -> String {
    path.join(".")
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
