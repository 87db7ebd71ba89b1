//! `scan`: the request scan (`cri_bridge::convert::scan`) on arbitrary bytes, for any message of
//! any version and any limits, after any number of losses already recorded.
//!
//! Input: version, message index (2 bytes), a mode byte (report unknown numbers; no blocked
//! table, a revision's, a pseudo-random one or all fields), the revision for enum values, how
//! many losses were recorded before, the field number for `without_field`, then the bytes.
//!
//! Invariants: it returns (an error is an error, not a panic or a hang); the record keeps the
//! losses recorded before as they were and stays bounded, with at most one overflow entry, last;
//! every new loss names a real place of the schema for a reason the limits ask for (a blocked
//! field is blocked in the table, an enum value newer than the revision is newer); where prost
//! decodes the bytes the scan accepts them too (groups aside) and, asked for unknown numbers
//! only, reports exactly those of the independent decoder (`decode.rs`); `without_field` keeps
//! the other top-level fields and fails only where the scan fails.

use super::decode;
use super::wire_gen::schema;
use super::{version, Choices};
use cri_bridge::api::SchemaInfo;
use cri_bridge::convert::scan::{self, Limits};
use cri_bridge::convert::{Loss, LossReason, MAX_DISTINCT};
use cri_bridge::revision::{Block, RuntimeProfile};
use std::borrow::Cow;

fn earlier(i: usize) -> Loss {
    Loss { path: format!("earlier[{i}]"), field: Cow::Borrowed("Earlier.field"), reason: LossReason::NoField, more: 0 }
}

/// A blocked table where each field is blocked with odds of 1 in 4, from `seed`.
fn scattered(schema: &SchemaInfo, seed: u8) -> Vec<Option<Block>> {
    let mut state = u64::from(seed) | 0x9e37_79b9_7f4a_7c00;
    (0..schema.field_count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state & 3 == 0).then_some(Block::NotHonoured("blocked by the fuzz input"))
        })
        .collect()
}

pub fn run(data: &[u8]) {
    let mut input = Choices::new(data);
    let version = version(input.u8());
    let info = version.schema();
    let message = usize::from(input.u16()) % info.messages.len();
    let mode = input.u8();
    let minor = input.u8();
    let before = usize::from(input.u8() % 40);
    let number = u32::from(input.u8() % 16);
    let bytes = input.rest();

    let unknown = mode & 1 != 0;
    let table = match (mode >> 1) & 3 {
        0 => None,
        1 => Some(RuntimeProfile::from_version(version, "", "", Some(minor.max(9))).blocked(info)),
        2 => Some(scattered(info, mode)),
        _ => Some(vec![Some(Block::NotHonoured("every field")); info.field_count]),
    };
    let limits = Limits { unknown, blocked: table.as_deref(), minor, without_swap: false };
    let mut losses: Vec<Loss> = (0..before).map(earlier).collect();
    let result = scan::scan(info, message, bytes, limits, &mut losses);
    let name = info.messages[message].name;
    let fail = |why: String| -> ! {
        panic!("scan of {version} {name} (mode {mode:#x}, minor {minor}, {before} before): {why}")
    };

    // The record: what was there stays, the rest is bounded.
    if losses[..before].iter().enumerate().any(|(i, l)| *l != earlier(i)) {
        fail("an earlier loss was changed".into());
    }
    let added = &losses[before..];
    let overflow: Vec<usize> =
        losses.iter().enumerate().filter(|(_, l)| l.reason == LossReason::TooMany).map(|(i, _)| i).collect();
    if overflow.len() > 1 || overflow.first().is_some_and(|&i| i + 1 != losses.len()) {
        fail(format!("{} overflow entries, or one not last", overflow.len()));
    }
    if losses.len() > before.max(MAX_DISTINCT) + 1 {
        fail(format!("{} entries after {before}", losses.len()));
    }
    for loss in added.iter().filter(|l| l.reason != LossReason::TooMany) {
        check_loss(info, loss, limits).unwrap_or_else(|e| fail(e));
    }

    // Against prost and the independent decoder.
    let decoded = decode::decode(schema(version), message, bytes);
    match (&result, &decoded) {
        (Err(e), Ok(d)) if !d.groups => fail(format!("the scan refuses bytes prost decodes: {e}")),
        (Ok(()), Ok(d))
            if unknown
                && table.is_none()
                && before == 0
                && !added.iter().any(|l| l.more > 0 || l.reason == LossReason::TooMany) =>
        {
            let reported: Vec<(String, String, Option<i32>)> = added
                .iter()
                .map(|l| {
                    let value = match l.reason {
                        LossReason::EnumValue(n) => Some(n),
                        _ => None,
                    };
                    (l.path.clone(), l.field.to_string(), value)
                })
                .collect();
            let noted: Vec<(String, String, Option<i32>)> =
                d.notes.iter().map(|n| (n.path.clone(), n.field.clone(), n.enum_value)).collect();
            if reported != noted {
                fail(format!("reported {reported:?}\n  but the bytes hold {noted:?}"));
            }
        }
        _ => {}
    }

    // `without_field` walks the top level the same way.
    match scan::without_field(bytes, number) {
        Ok((kept, dropped)) => {
            if !dropped && kept != bytes {
                fail(format!("without_field({number}) changed bytes that do not hold it"));
            }
            if kept.len() > bytes.len() {
                fail("without_field grew the message".into());
            }
            let (again, dropped_again) = scan::without_field(&kept, number)
                .unwrap_or_else(|e| fail(format!("what without_field kept is malformed: {e}")));
            if dropped_again || again != kept {
                fail(format!("without_field({number}) left the field in"));
            }
        }
        Err(e) => {
            if result.is_ok() {
                fail(format!("without_field fails ({e}) where the scan does not"));
            }
        }
    }
}

/// A new loss: a real place of the schema, for a reason the limits ask for.
fn check_loss(info: &SchemaInfo, loss: &Loss, limits: Limits<'_>) -> Result<(), String> {
    let (message, field) =
        loss.field.rsplit_once('.').ok_or_else(|| format!("loss field {:?} is not Message.field", loss.field))?;
    let m = info.messages.iter().find(|m| m.name == message).ok_or_else(|| format!("no message {message}"))?;
    if !loss.path.ends_with(field) {
        return Err(format!("loss path {} does not end in {field}", loss.path));
    }
    match &loss.reason {
        LossReason::UnknownField => {
            let number: u32 =
                field.strip_prefix('#').and_then(|n| n.parse().ok()).ok_or("an unknown field without #N")?;
            if !limits.unknown || m.field(number).is_some() || number == 0 || number >= 1 << 29 {
                return Err(format!("{} reported unknown", loss.field));
            }
        }
        LossReason::EnumValue(n) => {
            let f = m.fields.iter().find(|f| f.name == field).ok_or("no such field")?;
            let e = f.enumeration.ok_or("an enum loss on a field that is no enum")?;
            if !limits.unknown || info.enums[e].value(*n).is_some() {
                return Err(format!("{} value {n} reported undefined", loss.field));
            }
        }
        LossReason::Blocked(block) => {
            let f = m.fields.iter().find(|f| f.name == field).ok_or("no such field")?;
            let table = limits.blocked.ok_or("blocked without a table")?;
            let by_field = table[f.id].as_ref() == Some(block);
            let by_value = match block {
                Block::Revision { runtime, field: since } => {
                    *runtime == limits.minor
                        && since > runtime
                        && f.enumeration.is_some_and(|e| info.enums[e].values.iter().any(|v| v.since == *since))
                }
                _ => false,
            };
            if !by_field && !by_value {
                return Err(format!("{} reported {block:?}, which the table does not say", loss.field));
            }
        }
        other => return Err(format!("{} reported {other:?}", loss.field)),
    }
    Ok(())
}
