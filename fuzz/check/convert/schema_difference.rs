//! The losses a step must report, read from the two schemas alone: fields the target lacks,
//! enum values it cannot name, bytes that are not UTF-8 bound for a string — leaving out the
//! fields the hand-written rules convert.

use super::super::wire_gen::{EnumDesc, Field, Kind, Msg, Schema, Val};
use super::direction::Dir;
use cri_bridge::convert::rules::RULES;
use cri_bridge::convert::LossReason;
use cri_bridge::CriVersion;

/// The fields that hand-written rules convert (`rules::RULES`), on the side a step reads.
pub(super) fn claimed(old: CriVersion, dir: Dir) -> Vec<(&'static str, &'static str)> {
    RULES
        .iter()
        .filter(|r| r.version == old.as_str())
        .flat_map(|r| {
            let fields = match dir {
                Dir::Up => r.old_fields,
                Dir::Down => r.v1_fields,
            };
            fields.iter().map(move |f| (r.message, *f))
        })
        .collect()
}

/// Enum number `n` of `from` in `to`, and whether that is a loss, as docs/conversion.md states it: the
/// value of the same name; a number `from` does not name but `to` does stays (CRI never
/// renumbered a value); anything else is lost and becomes `to`'s UNKNOWN/NOTREADY value where
/// it has one (an unknown state must not read as a real one), else keeps its number.
pub(super) fn carry(from: &EnumDesc, to: &EnumDesc, n: i32) -> (i32, bool) {
    let same = match from.value_name(n) {
        Some(name) => to.value_number(name),
        None => to.value_name(n).map(|_| n),
    };
    match same {
        Some(m) => (m, false),
        None => {
            let unknown = to.values.iter().find(|(name, _)| name.ends_with("UNKNOWN") || name.ends_with("NOTREADY"));
            (unknown.map_or(n, |(_, number)| *number), true)
        }
    }
}

/// The enums of field `number` of `owner` in two schemas, when it is an enum in both.
pub(super) fn enums_of<'a>(
    a: &'a Schema,
    b: &'a Schema,
    owner: &str,
    number: u32,
) -> Option<(&'a EnumDesc, &'a EnumDesc)> {
    let kind = |s: &'a Schema| s.info.message_index(owner).and_then(|i| s.field(i, number)).map(|f| f.kind);
    match (kind(a)?, kind(b)?) {
        (Kind::Enum(x), Kind::Enum(y)) => Some((&a.enums[x], &b.enums[y])),
        _ => None,
    }
}

/// The losses a step must report for `msg`, from the two schemas: set fields the target
/// message lacks (NoField), enum values it cannot name (EnumValue), `bytes` bound for a `string`
/// that are not UTF-8 (NotUtf8). Paths as `Cx` renders them.
#[allow(clippy::too_many_arguments)]
pub(super) fn schema_losses(
    from: &Schema,
    to: &Schema,
    from_idx: usize,
    to_idx: usize,
    msg: &Msg,
    prefix: &str,
    claimed: &[(&str, &str)],
    out: &mut Vec<String>,
) -> Result<(), String> {
    let owner = from.messages[from_idx].name;
    for (&n, field) in &msg.fields {
        let f1 = from.field(from_idx, n).ok_or("a field outside the schema")?;
        if claimed.contains(&(owner, f1.name)) {
            continue;
        }
        let path = if prefix.is_empty() { f1.name.to_string() } else { format!("{prefix}.{}", f1.name) };
        let mut push = |reason: LossReason| out.push(format!("{path} [{owner}.{}] {reason:?}", f1.name));
        let Some(f2) = to.field(to_idx, n) else {
            push(LossReason::NoField);
            continue;
        };
        if f2.name != f1.name || f2.repeated != f1.repeated {
            return Err(format!("{owner}.{} differs in name or label and no rule claims it", f1.name));
        }
        let values: Vec<&Val> = match field {
            Field::One(v) => vec![v],
            Field::Many(vs) => vs.iter().collect(),
            Field::Map(_) => Vec::new(),
        };
        match (f1.kind, f2.kind) {
            (Kind::Message(a), Kind::Message(b)) => {
                for (i, v) in values.iter().enumerate() {
                    let Val::Msg(m) = v else { return Err(format!("{path}: a message field without a message")) };
                    let p = if f1.repeated { format!("{path}[{i}]") } else { path.clone() };
                    schema_losses(from, to, a, b, m, &p, claimed, out)?;
                }
            }
            (Kind::Enum(a), Kind::Enum(b)) => {
                for v in values {
                    let Val::Varint(x) = v else { return Err(format!("{path}: an enum without a number")) };
                    let number = *x as i32;
                    if carry(&from.enums[a], &to.enums[b], number).1 {
                        push(LossReason::EnumValue(number));
                    }
                }
            }
            (Kind::Bytes, Kind::String) => {
                for v in values {
                    let Val::Bytes(b) = v else { return Err(format!("{path}: bytes without bytes")) };
                    if std::str::from_utf8(b).is_err() {
                        push(LossReason::NotUtf8);
                    }
                }
            }
            (Kind::String, Kind::Bytes) => {}
            (a, b) if a == b => {}
            (a, b) => {
                return Err(format!("{owner}.{}: {a:?} in {} but {b:?} in {}", f1.name, from.version, to.version))
            }
        }
    }
    Ok(())
}
