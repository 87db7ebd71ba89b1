//! A small model of one CRI version, read from the compiled descriptors.
//!
//! The generators work on this model instead of raw descriptors: names are short
//! (`SecurityProfile.ProfileType`, no package), maps are recognised, and the Rust
//! names prost gives each item are computed once, here.

use heck::{ToSnakeCase, ToUpperCamelCase};
use prost_types::field_descriptor_proto::{Label as ProtoLabel, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};
use std::collections::BTreeMap;

pub struct Schema {
    /// `v1alpha1`, `v1alpha2` or `v1`: also the Rust module under `crate::api`.
    pub version: &'static str,
    pub package: String,
    /// Messages by short name, in file order.
    pub messages: Vec<Message>,
    pub enums: BTreeMap<String, Vec<(String, i32)>>,
    pub rpcs: Vec<Rpc>,
}

pub struct Message {
    pub name: String,
    pub fields: Vec<Field>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Kind {
    /// A proto scalar type name: `string`, `int64`, `bytes`, …
    Scalar(&'static str),
    Enum(String),
    Message(String),
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Label {
    Single,
    Repeated,
    /// `map<K, V>`; every CRI map is `map<string, string>`, which the generator checks.
    Map(Kind, Kind),
}

#[derive(Clone, Debug)]
pub struct Field {
    pub name: String,
    pub number: i32,
    pub kind: Kind,
    pub label: Label,
}

pub struct Rpc {
    /// `RuntimeService` or `ImageService`.
    pub service: String,
    pub method: String,
    pub request: String,
    pub response: String,
    pub server_streaming: bool,
}

impl Schema {
    pub fn read(fds: &FileDescriptorSet, version: &'static str, package: &str) -> Schema {
        let file = fds
            .file
            .iter()
            .find(|f| f.package() == package)
            .unwrap_or_else(|| panic!("no file declares package {package}"));
        let prefix = format!(".{package}.");
        let short = |t: &str| t.strip_prefix(&prefix).unwrap_or(t).to_string();

        let mut enums = BTreeMap::new();
        for e in &file.enum_type {
            enums.insert(e.name().to_string(), values(e));
        }
        let mut messages = Vec::new();
        for m in &file.message_type {
            for e in &m.enum_type {
                enums.insert(format!("{}.{}", m.name(), e.name()), values(e));
            }
            let fields = m.field.iter().map(|f| field(m, f, &short)).collect();
            messages.push(Message { name: m.name().to_string(), fields });
        }
        let mut rpcs = Vec::new();
        for s in &file.service {
            for m in &s.method {
                rpcs.push(Rpc {
                    service: s.name().to_string(),
                    method: m.name().to_string(),
                    request: short(m.input_type()),
                    response: short(m.output_type()),
                    server_streaming: m.server_streaming(),
                });
            }
        }
        Schema { version, package: package.to_string(), messages, enums, rpcs }
    }

    pub fn message(&self, name: &str) -> Option<&Message> {
        self.messages.iter().find(|m| m.name == name)
    }
}

impl Message {
    pub fn field(&self, number: i32) -> Option<&Field> {
        self.fields.iter().find(|f| f.number == number)
    }
}

fn values(e: &prost_types::EnumDescriptorProto) -> Vec<(String, i32)> {
    e.value.iter().map(|v| (v.name().to_string(), v.number())).collect()
}

fn field(owner: &DescriptorProto, f: &prost_types::FieldDescriptorProto, short: &dyn Fn(&str) -> String) -> Field {
    let kind_of = |f: &prost_types::FieldDescriptorProto| match f.r#type() {
        Type::Message => Kind::Message(short(f.type_name())),
        Type::Enum => Kind::Enum(short(f.type_name())),
        other => Kind::Scalar(scalar_name(other)),
    };
    let kind = kind_of(f);
    let mut label = match f.label() {
        ProtoLabel::Repeated => Label::Repeated,
        _ => Label::Single,
    };
    if let Kind::Message(entry) = &kind {
        // Map fields are repeated messages of a nested `*Entry` type marked map_entry.
        let entry_name = entry.rsplit('.').next().unwrap_or(entry);
        if let Some(nested) = owner.nested_type.iter().find(|n| n.name() == entry_name) {
            if nested.options.as_ref().and_then(|o| o.map_entry).unwrap_or(false) {
                label = Label::Map(kind_of(&nested.field[0]), kind_of(&nested.field[1]));
            }
        }
    }
    Field { name: f.name().to_string(), number: f.number(), kind, label }
}

fn scalar_name(t: Type) -> &'static str {
    match t {
        Type::Double => "double",
        Type::Float => "float",
        Type::Int64 => "int64",
        Type::Uint64 => "uint64",
        Type::Int32 => "int32",
        Type::Fixed64 => "fixed64",
        Type::Fixed32 => "fixed32",
        Type::Bool => "bool",
        Type::String => "string",
        Type::Bytes => "bytes",
        Type::Uint32 => "uint32",
        Type::Sfixed32 => "sfixed32",
        Type::Sfixed64 => "sfixed64",
        Type::Sint32 => "sint32",
        Type::Sint64 => "sint64",
        other => panic!("unexpected field type {other:?}"),
    }
}

/// The Rust name prost gives a message: `CDIDevice` → `CdiDevice`.
pub fn rust_type(message: &str) -> String {
    message.to_upper_camel_case()
}

/// The Rust name prost gives a field: `uidMappings` → `uid_mappings`, `type` → `r#type`.
pub fn rust_field(field: &str) -> String {
    let snake = field.to_snake_case();
    match snake.as_str() {
        "as" | "break" | "const" | "continue" | "else" | "enum" | "false" | "fn" | "for" | "if" | "impl" | "in"
        | "let" | "loop" | "match" | "mod" | "move" | "mut" | "pub" | "ref" | "return" | "static" | "struct"
        | "trait" | "true" | "type" | "unsafe" | "use" | "where" | "while" | "dyn" | "abstract" | "become" | "box"
        | "do" | "final" | "macro" | "override" | "priv" | "typeof" | "unsized" | "virtual" | "yield" | "async"
        | "await" | "try" | "gen" => format!("r#{snake}"),
        _ => snake,
    }
}

/// A snake-case identifier for generated function names: `SecurityProfile.ProfileType` →
/// `security_profile_profile_type`.
pub fn snake_ident(name: &str) -> String {
    name.replace('.', "_").to_snake_case()
}
