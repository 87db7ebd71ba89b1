//! Walks a request's wire bytes against a schema table and reports what the runtime would not
//! see: field numbers our schema does not know (a client newer than cri-bridge; prost drops them
//! when it decodes), and set fields or enum values that the runtime's revision predates, does not
//! act on or lacks the feature for (`revision::RuntimeProfile::blocked`).
//!
//! It runs on the bytes the runtime will receive: on passthrough the caller's own bytes (one walk
//! finds both kinds), after a conversion the converted bytes (the caller's bytes are walked
//! first for unknown numbers only). Nothing is decoded except varints, lengths, and the
//! messages whose value decides whether a field matters (`userns_options`, a security context
//! whose deprecated strings may carry its profiles).
//!
//! Those judgements are made on the message the runtime will decode: protobuf merges the
//! occurrences of a message field that is not repeated (field by field, the last scalar
//! winning), so a request may split one security context in parts, each harmless alone. Most
//! requests hold each such field once; the walk only notes that, and when one occurs again it
//! walks the request a second time with every such field's occurrences joined (their
//! concatenation is their merge).

use super::carried::{is_carried_anyway, no_effect_here};
use super::classes::{class_of_unknown, Class};
use super::loss::record;
use super::wire::{next, Found};
use super::{Loss, LossReason};
use crate::api::{FieldInfo, MessageInfo, SchemaInfo};
use crate::revision::Block;
use crate::version::CriVersion;
use std::borrow::Cow;

/// The bytes are not a valid protobuf encoding.
#[derive(Debug, thiserror::Error)]
#[error("malformed protobuf at {path}: {what}")]
pub struct Malformed {
    pub path: String,
    pub what: &'static str,
}

/// What to report.
#[derive(Clone, Copy)]
pub struct Limits<'a> {
    /// Field numbers (and enum numbers) that the schema does not know.
    pub unknown: bool,
    /// Per field id, why the runtime would not act on the field; `None`: report nothing of it.
    pub blocked: Option<&'a [Option<Block>]>,
    /// The revision the runtime decodes at least, for enum values (with `blocked`): its own,
    /// or that of the RPC called, if newer (a runtime that serves an RPC decodes its schema).
    pub minor: u8,
    /// The node has no swap (`SwapTotal: 0`): a swap limit that only forbids swapping changes
    /// nothing here ([`no_effect_here`]).
    pub without_swap: bool,
}

impl Limits<'static> {
    /// Unknown numbers only: for the caller's bytes before a conversion.
    pub const UNKNOWN_ONLY: Limits<'static> =
        Limits { unknown: true, blocked: None, minor: u8::MAX, without_swap: false };
}

/// Scans `bytes`, encoded as message `message` of `schema`, appending what `limits` asks for.
pub fn scan(
    schema: &SchemaInfo,
    message: usize,
    bytes: &[u8],
    limits: Limits<'_>,
    losses: &mut Vec<Loss>,
) -> Result<(), Malformed> {
    let start = losses.len();
    // What the walk may change of the record as it was: the overflow entry's count.
    let overflow = losses.last().filter(|l| l.reason == LossReason::TooMany).map(|l| l.more);
    let mut walk = Walk { schema, limits, losses, start, kept: Vec::new(), merge: false };
    if walk.message(message, bytes, &mut Vec::new())? == Walked::Whole {
        return Ok(());
    }
    // A message field occurred twice, and this walk may have judged one part alone: undone,
    // and walked again merging.
    walk.losses.truncate(start);
    if let (Some(more), Some(last)) = (overflow, walk.losses.last_mut()) {
        last.more = more;
    }
    walk.kept.clear();
    walk.merge = true;
    // (Merging, the walk meets every such field once, so it always ends `Whole`.)
    walk.message(message, bytes, &mut Vec::new()).map(|_| ())
}

/// How a walk ended.
#[derive(Debug, PartialEq, Eq)]
enum Walked {
    Whole,
    /// Not merging, a message field that is not repeated occurred twice in one message (and
    /// the limits judge values): the walk stopped there.
    Repeated,
}

/// One step of the path to where the walk is: a field, or an element of a repeated one.
#[derive(Clone, Copy)]
enum Step<'s> {
    Field(&'s str),
    Index(usize),
}

/// `config`, `mounts`, [2] → `config.mounts[2]`.
fn render(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn at(path: &[Step<'_>], last: &str) -> String {
    let parent = render(path);
    if parent.is_empty() {
        last.to_string()
    } else {
        format!("{parent}.{last}")
    }
}

struct Walk<'s, 'l, 'v> {
    schema: &'s SchemaInfo,
    limits: Limits<'l>,
    losses: &'v mut Vec<Loss>,
    /// How many losses were recorded before this walk.
    start: usize,
    /// (message index, field number, whether it has no effect here) of each loss this walk kept,
    /// in order from `start` (a loss is never counted on an entry the policy judges more
    /// leniently): past the
    /// bound, a repeat is found by number, so a flood of unknown fields costs integer compares.
    kept: Vec<(usize, u32, bool)>,
    /// Walk each message field that is not repeated once, its occurrences merged.
    merge: bool,
}

/// The numbers of the fields met once so far in one message: a bit each below 64 (every CRI
/// field), a list beyond.
#[derive(Default)]
struct Met {
    low: u64,
    high: Vec<u32>,
}

impl Met {
    /// Notes `number`; false when it was met before.
    fn first(&mut self, number: u32) -> bool {
        if number < 64 {
            let bit = 1u64 << number;
            let first = self.low & bit == 0;
            self.low |= bit;
            first
        } else if self.high.contains(&number) {
            false
        } else {
            self.high.push(number);
            true
        }
    }

    fn has(&self, number: u32) -> bool {
        if number < 64 {
            self.low & 1u64 << number != 0
        } else {
            self.high.contains(&number)
        }
    }
}

impl<'s> Walk<'s, '_, '_> {
    fn message(&mut self, message: usize, mut bytes: &[u8], path: &mut Vec<Step<'s>>) -> Result<Walked, Malformed> {
        let info: &'s MessageInfo = &self.schema.messages[message];
        let whole = bytes;
        // How many elements of each repeated message field have been seen, for `[i]` in paths.
        let mut seen: Vec<(u32, usize)> = Vec::new();
        // Not merging: the single message fields met. Merging: those that occur more than once,
        // each with its occurrences joined, and whether it was walked.
        let mut met = Met::default();
        let mut merged = if self.merge { repeated_singles(info, whole) } else { Vec::new() };
        while !bytes.is_empty() {
            let mut found = next(&mut bytes).map_err(|what| Malformed {
                // At the top there is no field to name: name the message.
                path: if path.is_empty() { info.name.to_string() } else { render(path) },
                what,
            })?;
            let Some(field) = info.field(found.number) else {
                if self.limits.unknown {
                    self.unknown_field(message, found.number, path);
                }
                continue;
            };
            // Only a walk against a revision judges values (`is_carried_anyway`): there, a single
            // message field that occurs again is walked merged, at its first occurrence.
            if self.limits.blocked.is_some() && field.message.is_some() && !field.repeated && found.wire_type == 2 {
                if self.merge {
                    if let Some((_, joined, walked)) = merged.iter_mut().find(|(n, _, _)| *n == found.number) {
                        if std::mem::replace(walked, true) {
                            continue;
                        }
                        found.value = joined;
                    }
                } else if !met.first(found.number) {
                    return Ok(Walked::Repeated);
                }
            }
            let block = self.limits.blocked.and_then(|b| b[field.id]);
            // A field the runtime decodes after all: one of the RPC's own revision (`minor`).
            if let Some(block) =
                block.filter(|b| !matches!(b, Block::Revision { field, .. } if *field <= self.limits.minor))
            {
                if found.is_set(field) && !is_carried_anyway(info, field, found.value, whole) {
                    let reason = match no_effect_here(info, field, &found, whole, self.limits.without_swap) {
                        Some(why) => LossReason::NoEffectHere(why),
                        None => LossReason::Blocked(block),
                    };
                    self.lose(message, field, path, reason);
                }
                continue;
            }
            if let Some(enumeration) = field.enumeration {
                self.enum_value(message, field, enumeration, &found, path);
            }
            if let (Some(nested), 2) = (field.message, found.wire_type) {
                path.push(Step::Field(field.name));
                if field.repeated {
                    let index = match seen.iter_mut().find(|(n, _)| *n == field.number) {
                        Some((_, count)) => {
                            *count += 1;
                            *count - 1
                        }
                        None => {
                            seen.push((field.number, 1));
                            0
                        }
                    };
                    path.push(Step::Index(index));
                    let walked = self.message(nested, found.value, path)?;
                    path.pop();
                    if walked == Walked::Repeated {
                        return Ok(walked);
                    }
                } else if self.message(nested, found.value, path)? == Walked::Repeated {
                    return Ok(Walked::Repeated);
                }
                path.pop();
            }
        }
        Ok(Walked::Whole)
    }

    /// Checks an enum field's value against the schema and the revision. (CRI has no repeated
    /// enum field, so an enum is one varint; another wire type does not decode at all, and the
    /// conversion or the runtime refuses it.)
    fn enum_value(
        &mut self,
        message: usize,
        field: &'s FieldInfo,
        enumeration: usize,
        found: &Found<'_>,
        path: &[Step<'s>],
    ) {
        if found.wire_type != 0 {
            return;
        }
        let number = found.varint as i32;
        match self.schema.enums[enumeration].value(number) {
            None if self.limits.unknown => self.lose(message, field, path, LossReason::EnumValue(number)),
            Some(v) if self.limits.blocked.is_some() && v.since > self.limits.minor => {
                let block = Block::Revision { runtime: self.limits.minor, field: v.since };
                self.lose(message, field, path, LossReason::Blocked(block))
            }
            _ => {}
        }
    }

    fn unknown_field(&mut self, message: usize, number: u32, path: &[Step<'_>]) {
        let name = self.schema.messages[message].name;
        self.note((message, number, false), || Loss {
            path: at(path, &format!("#{number}")),
            field: Cow::Owned(format!("{name}.#{number}")),
            reason: LossReason::UnknownField,
            more: 0,
        });
    }

    fn lose(&mut self, message: usize, field: &FieldInfo, path: &[Step<'_>], reason: LossReason) {
        let name = self.schema.messages[message].name;
        let no_effect = matches!(reason, LossReason::NoEffectHere(_));
        self.note((message, field.number, no_effect), || Loss {
            path: at(path, field.name),
            field: Cow::Owned(format!("{name}.{}", field.name)),
            reason,
            more: 0,
        });
    }

    /// Records a loss of `key` (message, field number) in the bounded record. Past the bound, a
    /// repeat of a field this walk kept counts on its entry, found by number; a field only
    /// recorded before the walk (unknown numbers of the caller's bytes, conversion losses) is
    /// never one the walk meets again, so it is not searched for.
    fn note(&mut self, key: (usize, u32, bool), make: impl FnOnce() -> Loss) {
        let (start, kept) = (self.start, &self.kept);
        let find = |_: &[Loss]| kept.iter().position(|k| *k == key).map(|i| start + i);
        if record(self.losses, find, make) {
            self.kept.push(key);
        }
    }
}

/// The message fields of `bytes` (a message `info`) that are not repeated yet occur more than
/// once, each with its occurrences' payloads joined in order (the encoding of their merge) and
/// `false` (not walked yet). A malformed part ends the search; the walk reports it where it is.
fn repeated_singles(info: &MessageInfo, bytes: &[u8]) -> Vec<(u32, Vec<u8>, bool)> {
    let single = |found: &Found<'_>| {
        found.wire_type == 2 && info.field(found.number).is_some_and(|f| f.message.is_some() && !f.repeated)
    };
    let (mut once, mut again) = (Met::default(), Met::default());
    let mut rest = bytes;
    while let Ok(found) = next(&mut rest) {
        if single(&found) && !once.first(found.number) {
            again.first(found.number);
        }
    }
    let mut joined: Vec<(u32, Vec<u8>, bool)> = Vec::new();
    let mut rest = bytes;
    while let Ok(found) = next(&mut rest) {
        if !single(&found) || !again.has(found.number) {
            continue;
        }
        match joined.iter_mut().find(|(n, _, _)| *n == found.number) {
            Some((_, payloads, _)) => payloads.extend_from_slice(found.value),
            None => joined.push((found.number, found.value.to_vec(), false)),
        }
    }
    joined
}

/// Whether a passthrough request of message `root` (of `version`) can hold anything the scan
/// reports: a field or enum value newer than the version's first revision, or a message where an
/// unknown field number is not merely advisory. The others (`Version`, `Status`, the status
/// reads) pass unscanned.
pub fn worth_scanning(version: CriVersion, root: usize) -> bool {
    let schema = version.schema();
    let first = crate::revision::oldest(version);
    let mut seen = vec![false; schema.messages.len()];
    let mut stack = vec![root];
    while let Some(index) = stack.pop() {
        if std::mem::replace(&mut seen[index], true) {
            continue;
        }
        let message = &schema.messages[index];
        if class_of_unknown(message.name) != Class::Advisory {
            return true;
        }
        for field in message.fields {
            let newer_value = field.enumeration.is_some_and(|e| schema.enums[e].values.iter().any(|v| v.since > first));
            if field.since > first || newer_value {
                return true;
            }
            stack.extend(field.message);
        }
    }
    false
}

/// `bytes` (one message) without top-level field `number`, and whether it was there.
pub fn without_field(bytes: &[u8], number: u32) -> Result<(Vec<u8>, bool), Malformed> {
    let mut rest = bytes;
    let mut kept = Vec::with_capacity(bytes.len());
    let mut dropped = false;
    while !rest.is_empty() {
        let before = rest;
        let found = next(&mut rest).map_err(|what| Malformed { path: String::new(), what })?;
        let encoded = &before[..before.len() - rest.len()];
        if found.number == number {
            dropped = true;
        } else {
            kept.extend_from_slice(encoded);
        }
    }
    Ok((kept, dropped))
}
