//! Arbitrary wire bytes read as prost reads them, into the value tree of `wire_gen`, written from
//! the protobuf rules (and prost 0.14's choices where the rules leave room), not from cri-bridge:
//!
//! - a field number the schema lacks is skipped (groups too, nested up to prost's recursion
//!   limit of 100 with the message depth counted in), and noted;
//! - a known field with the wrong wire type, a string or map key/value that is not UTF-8, a
//!   length past the end, a varint of more than 10 bytes or beyond 64 bits, are errors;
//! - scalars as prost keeps them: `bool` is `!= 0`, `int32` and enums the low 32 bits
//!   sign-extended, `uint32` the low 32 bits; the last singular value wins and a default value
//!   unsets the field; repeated numbers packed or not; messages merge; map entries take the last
//!   key and value, default when absent, and skip other fields; the last entry of a key wins.
//!
//! So the tree is what the converted message was made from, and the notes (unknown numbers,
//! enum numbers the schema does not define, with their paths) are what cri-bridge's scan must
//! report of the same bytes: both are computed apart from the code under test.

use super::wire_gen::{Field, Kind, Msg, Schema, Val};
use prost::encoding::{decode_key, decode_varint, WireType};

/// Something the scan reports with `Limits::UNKNOWN_ONLY`: where, which field, and for an enum
/// the number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub path: String,
    /// `Message.field` or `Message.#N`.
    pub field: String,
    /// `Some` for an enum number the schema does not define; `None` for an unknown field.
    pub enum_value: Option<i32>,
}

pub struct Decoded {
    pub msg: Msg,
    pub notes: Vec<Note>,
    /// Whether an unknown field was a group (which the scan refuses and prost skips).
    pub groups: bool,
}

const RECURSION_LIMIT: u32 = 100;

pub fn decode(schema: &Schema, idx: usize, bytes: &[u8]) -> Result<Decoded, String> {
    let mut reader = Reader { schema, notes: Vec::new(), groups: false };
    let mut msg = Msg::default();
    reader.merge(idx, bytes, RECURSION_LIMIT, &mut msg, &mut Vec::new())?;
    Ok(Decoded { msg, notes: reader.notes, groups: reader.groups })
}

/// A step of the path as the scan renders it: `[i]` counts the elements of a repeated message
/// field as they appear in one occurrence of the parent on the wire.
enum Step {
    Field(&'static str),
    Index(usize),
}

fn render(path: &[Step], last: &str) -> String {
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
    if !out.is_empty() {
        out.push('.');
    }
    out.push_str(last);
    out
}

struct Reader<'s> {
    schema: &'s Schema,
    notes: Vec<Note>,
    groups: bool,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn take<'b>(buf: &mut &'b [u8], n: u64) -> Result<&'b [u8], String> {
    if n > buf.len() as u64 {
        return Err("buffer underflow".into());
    }
    let (taken, rest) = buf.split_at(n as usize);
    *buf = rest;
    Ok(taken)
}

fn take_len<'b>(buf: &mut &'b [u8]) -> Result<&'b [u8], String> {
    let len = decode_varint(buf).map_err(err)?;
    take(buf, len)
}

fn check_wire(expected: WireType, actual: WireType) -> Result<(), String> {
    if expected == actual {
        Ok(())
    } else {
        Err(format!("invalid wire type {actual:?} (expected {expected:?})"))
    }
}

/// A scalar as prost keeps it, from the varint's value.
fn scalar(kind: Kind, raw: u64) -> Val {
    Val::Varint(match kind {
        Kind::Bool => u64::from(raw != 0),
        Kind::Int32 | Kind::Enum(_) => raw as i32 as i64 as u64,
        Kind::Uint32 => u64::from(raw as u32),
        _ => raw,
    })
}

fn is_default(v: &Val) -> bool {
    match v {
        Val::Varint(x) => *x == 0,
        Val::F64(bits) => f64::from_bits(*bits) == 0.0,
        Val::Bytes(b) => b.is_empty(),
        Val::Msg(_) => false,
    }
}

fn set_one(msg: &mut Msg, number: u32, v: Val) {
    if is_default(&v) {
        msg.fields.remove(&number);
    } else {
        msg.fields.insert(number, Field::One(v));
    }
}

fn push(msg: &mut Msg, number: u32, v: Val) {
    match msg.fields.entry(number).or_insert_with(|| Field::Many(Vec::new())) {
        Field::Many(values) => values.push(v),
        other => *other = Field::Many(vec![v]),
    }
}

impl Reader<'_> {
    /// Merges the fields in `buf` into `msg` (message `idx`); `ctx` is prost's recursion budget
    /// for this message's fields.
    fn merge(
        &mut self,
        idx: usize,
        mut buf: &[u8],
        ctx: u32,
        msg: &mut Msg,
        path: &mut Vec<Step>,
    ) -> Result<(), String> {
        let schema = self.schema;
        let owner = schema.messages[idx].name;
        // Elements of each repeated message field seen so far in this occurrence.
        let mut seen: Vec<(u32, usize)> = Vec::new();
        while !buf.is_empty() {
            let (number, wire) = decode_key(&mut buf).map_err(err)?;
            let Some(fd) = schema.field(idx, number) else {
                self.notes.push(Note {
                    path: render(path, &format!("#{number}")),
                    field: format!("{owner}.#{number}"),
                    enum_value: None,
                });
                self.skip(wire, number, &mut buf, ctx)?;
                continue;
            };
            match fd.kind {
                Kind::Message(sub) => {
                    check_wire(WireType::LengthDelimited, wire)?;
                    if ctx == 0 {
                        return Err("recursion limit reached".into());
                    }
                    let body = take_len(&mut buf)?;
                    path.push(Step::Field(fd.name));
                    if fd.repeated {
                        let index = match seen.iter_mut().find(|(n, _)| *n == number) {
                            Some((_, count)) => {
                                *count += 1;
                                *count - 1
                            }
                            None => {
                                seen.push((number, 1));
                                0
                            }
                        };
                        path.push(Step::Index(index));
                        let mut element = Msg::default();
                        let merged = self.merge(sub, body, ctx - 1, &mut element, path);
                        path.pop();
                        merged?;
                        push(msg, number, Val::Msg(element));
                    } else {
                        let entry = msg.fields.entry(number).or_insert_with(|| Field::One(Val::Msg(Msg::default())));
                        let Field::One(Val::Msg(existing)) = entry else {
                            unreachable!("a message field holds a message")
                        };
                        self.merge(sub, body, ctx - 1, existing, path)?;
                    }
                    path.pop();
                }
                Kind::Map => {
                    check_wire(WireType::LengthDelimited, wire)?;
                    if ctx == 0 {
                        return Err("recursion limit reached".into());
                    }
                    let body = take_len(&mut buf)?;
                    let (key, value) = self.map_entry(body, ctx - 1)?;
                    match msg.fields.entry(number).or_insert_with(|| Field::Map(Default::default())) {
                        Field::Map(entries) => {
                            entries.insert(key, value);
                        }
                        _ => unreachable!("a map field holds a map"),
                    }
                }
                Kind::String | Kind::Bytes => {
                    check_wire(WireType::LengthDelimited, wire)?;
                    let body = take_len(&mut buf)?.to_vec();
                    if fd.kind == Kind::String && std::str::from_utf8(&body).is_err() {
                        return Err(format!("{owner}.{}: invalid string value: data is not UTF-8 encoded", fd.name));
                    }
                    if fd.repeated {
                        push(msg, number, Val::Bytes(body));
                    } else {
                        set_one(msg, number, Val::Bytes(body));
                    }
                }
                kind => {
                    let fixed = kind == Kind::Double;
                    let expected = if fixed { WireType::SixtyFourBit } else { WireType::Varint };
                    let read = |buf: &mut &[u8]| -> Result<Val, String> {
                        if fixed {
                            let b = take(buf, 8)?;
                            Ok(Val::F64(u64::from_le_bytes(b.try_into().expect("8 bytes"))))
                        } else {
                            Ok(scalar(kind, decode_varint(buf).map_err(err)?))
                        }
                    };
                    if fd.repeated && wire == WireType::LengthDelimited {
                        let mut packed = take_len(&mut buf)?;
                        while !packed.is_empty() {
                            let v = read(&mut packed)?;
                            push(msg, number, v);
                        }
                        continue;
                    }
                    check_wire(expected, wire)?;
                    let v = read(&mut buf)?;
                    if let (Kind::Enum(e), Val::Varint(x)) = (kind, &v) {
                        let n = *x as i32;
                        if schema.enums[e].value_name(n).is_none() {
                            self.notes.push(Note {
                                path: render(path, fd.name),
                                field: format!("{owner}.{}", fd.name),
                                enum_value: Some(n),
                            });
                        }
                    }
                    if fd.repeated {
                        push(msg, number, v);
                    } else {
                        set_one(msg, number, v);
                    }
                }
            }
        }
        Ok(())
    }

    /// One `map<string, string>` entry; `ctx` is the budget of the entry's fields.
    fn map_entry(&mut self, mut buf: &[u8], ctx: u32) -> Result<(String, String), String> {
        let (mut key, mut value) = (String::new(), String::new());
        while !buf.is_empty() {
            let (number, wire) = decode_key(&mut buf).map_err(err)?;
            match number {
                1 | 2 => {
                    check_wire(WireType::LengthDelimited, wire)?;
                    let body = take_len(&mut buf)?;
                    let text = String::from_utf8(body.to_vec()).map_err(|_| "map entry: not UTF-8".to_string())?;
                    if number == 1 {
                        key = text;
                    } else {
                        value = text;
                    }
                }
                _ => self.skip(wire, number, &mut buf, ctx)?,
            }
        }
        Ok((key, value))
    }

    fn skip(&mut self, wire: WireType, number: u32, buf: &mut &[u8], ctx: u32) -> Result<(), String> {
        if ctx == 0 {
            return Err("recursion limit reached".into());
        }
        match wire {
            WireType::Varint => {
                decode_varint(buf).map_err(err)?;
            }
            WireType::ThirtyTwoBit => {
                take(buf, 4)?;
            }
            WireType::SixtyFourBit => {
                take(buf, 8)?;
            }
            WireType::LengthDelimited => {
                take_len(buf)?;
            }
            WireType::StartGroup => {
                self.groups = true;
                loop {
                    let (inner, inner_wire) = decode_key(buf).map_err(err)?;
                    if inner_wire == WireType::EndGroup {
                        if inner != number {
                            return Err("unexpected end group tag".into());
                        }
                        break;
                    }
                    self.skip(inner_wire, inner, buf, ctx - 1)?;
                }
            }
            WireType::EndGroup => return Err("unexpected end group tag".into()),
        }
        Ok(())
    }
}
