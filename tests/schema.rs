//! Checks the compiled `proto/` schemas against the reference tables in `tests/schema/`.
//!
//! Each of the three files in `cri_bridge::api::FILE_DESCRIPTOR_SET` is rendered into rows in the
//! format of the TSV files (`kind  full_name  number  type  label  extra`, see
//! `tests/schema/README.md`) and compared as a set with the matching table. A failure lists the
//! rows each side lacks, so a wrong number, type, label, name or missing item shows up directly.
//! Because every message, enum, field and RPC is a row, this also checks the counts in the README.

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

const COLUMNS: &str = "kind\tfull_name\tnumber\ttype\tlabel\textra";

fn descriptor_set() -> FileDescriptorSet {
    FileDescriptorSet::decode(cri_bridge::api::FILE_DESCRIPTOR_SET)
        .expect("FILE_DESCRIPTOR_SET decodes as a FileDescriptorSet")
}

fn file<'a>(fds: &'a FileDescriptorSet, package: &str) -> &'a FileDescriptorProto {
    let files: Vec<_> = fds.file.iter().filter(|f| f.package() == package).collect();
    assert_eq!(files.len(), 1, "expected exactly one file with package {package:?}, found {}", files.len());
    files[0]
}

/// A type name as the tables write it: fully qualified, without the leading dot.
fn type_ref(name: &str) -> String {
    name.strip_prefix('.').unwrap_or(name).to_string()
}

fn scalar_name(t: Type) -> Option<&'static str> {
    Some(match t {
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
        Type::Group | Type::Message | Type::Enum => return None,
    })
}

fn field_type(f: &FieldDescriptorProto) -> String {
    match scalar_name(f.r#type()) {
        Some(s) => s.to_string(),
        None if f.r#type() == Type::Group => format!("group {}", type_ref(f.type_name())),
        None => type_ref(f.type_name()),
    }
}

fn is_map_entry(m: &DescriptorProto) -> bool {
    m.options.as_ref().and_then(|o| o.map_entry).unwrap_or(false)
}

fn row(kind: &str, full_name: &str, number: &str, ty: &str, label: &str, extra: &str) -> String {
    format!("{kind}\t{full_name}\t{number}\t{ty}\t{label}\t{extra}")
}

/// Rows for an enum and its values. Value rows are named `<enum full name>.<value>` and carry the
/// enum's full name as their type.
fn enum_rows(rows: &mut Vec<String>, scope: &str, e: &EnumDescriptorProto) {
    let name = format!("{scope}.{}", e.name());
    let mut extra = Vec::new();
    if e.options.as_ref().and_then(|o| o.deprecated).unwrap_or(false) {
        extra.push("deprecated".to_string());
    }
    if !e.reserved_range.is_empty() || !e.reserved_name.is_empty() {
        extra.push("reserved".to_string());
    }
    rows.push(row("enum", &name, "", "", "", &extra.join(";")));
    for v in &e.value {
        let deprecated = v.options.as_ref().and_then(|o| o.deprecated).unwrap_or(false);
        rows.push(row(
            "enumvalue",
            &format!("{name}.{}", v.name()),
            &v.number().to_string(),
            &name,
            "",
            if deprecated { "deprecated" } else { "" },
        ));
    }
}

/// Rows for a message, its fields, and (recursively) its nested enums and non-map-entry messages.
///
/// Anything the tables cannot express (oneofs, proto3 `optional`, reserved ranges, `required`,
/// groups) is written into `label`/`extra` so that it shows up as a difference.
fn message_rows(rows: &mut Vec<String>, scope: &str, m: &DescriptorProto) {
    let name = format!("{scope}.{}", m.name());
    let mut extra = Vec::new();
    if m.options.as_ref().and_then(|o| o.deprecated).unwrap_or(false) {
        extra.push("deprecated".to_string());
    }
    if !m.reserved_range.is_empty() || !m.reserved_name.is_empty() {
        extra.push("reserved".to_string());
    }
    if !m.extension_range.is_empty() || !m.extension.is_empty() {
        extra.push("extensions".to_string());
    }
    rows.push(row("message", &name, "", "", "", &extra.join(";")));

    for f in &m.field {
        let map_entry = (f.r#type() == Type::Message && f.label() == Label::Repeated)
            .then(|| {
                let entry = type_ref(f.type_name());
                m.nested_type.iter().find(|n| format!("{name}.{}", n.name()) == entry && is_map_entry(n))
            })
            .flatten();
        let (ty, label) = match map_entry {
            Some(entry) => {
                let key = entry.field.iter().find(|x| x.number() == 1);
                let value = entry.field.iter().find(|x| x.number() == 2);
                let (Some(key), Some(value)) = (key, value) else {
                    panic!("map entry {name}.{} lacks a key or value", entry.name());
                };
                (format!("map<{},{}>", field_type(key), field_type(value)), "map")
            }
            None => (
                field_type(f),
                match f.label() {
                    Label::Repeated => "repeated",
                    Label::Required => "required",
                    Label::Optional if f.proto3_optional() => "proto3_optional",
                    Label::Optional => "optional",
                },
            ),
        };
        let mut extra = Vec::new();
        if f.options.as_ref().and_then(|o| o.deprecated).unwrap_or(false) {
            extra.push("deprecated".to_string());
        }
        if let Some(i) = f.oneof_index {
            if !f.proto3_optional() {
                let oneof = m.oneof_decl.get(i as usize).map(|o| o.name()).unwrap_or("?");
                extra.push(format!("oneof={oneof}"));
            }
        }
        if f.default_value.is_some() {
            extra.push(format!("default={}", f.default_value()));
        }
        if f.options.as_ref().and_then(|o| o.packed) == Some(false) {
            extra.push("packed=false".to_string());
        }
        rows.push(row("field", &format!("{name}.{}", f.name()), &f.number().to_string(), &ty, label, &extra.join(";")));
    }
    for e in &m.enum_type {
        enum_rows(rows, &name, e);
    }
    for nested in m.nested_type.iter().filter(|n| !is_map_entry(n)) {
        message_rows(rows, &name, nested);
    }
}

/// Every row of one file, in file order.
fn file_rows(file: &FileDescriptorProto) -> Vec<String> {
    let package = file.package();
    let mut rows = Vec::new();
    for e in &file.enum_type {
        enum_rows(&mut rows, package, e);
    }
    for m in &file.message_type {
        message_rows(&mut rows, package, m);
    }
    for s in &file.service {
        let service = format!("{package}.{}", s.name());
        rows.push(row("service", &service, "", "", "", ""));
        for m in &s.method {
            let extra = format!(
                "request={};response={};client_streaming={};server_streaming={}",
                type_ref(m.input_type()),
                type_ref(m.output_type()),
                m.client_streaming(),
                m.server_streaming()
            );
            rows.push(row(
                "rpc",
                &format!("{service}.{}", m.name()),
                "",
                &format!("/{service}/{}", m.name()),
                "",
                &extra,
            ));
        }
    }
    rows
}

/// What the README says no version uses, beyond what the rows show.
fn file_level_problems(file: &FileDescriptorProto) -> Vec<String> {
    let mut problems = Vec::new();
    if file.syntax() != "proto3" {
        problems.push(format!("syntax is {:?}, not \"proto3\"", file.syntax()));
    }
    if !file.dependency.is_empty() {
        problems.push(format!("imports {:?}", file.dependency));
    }
    if !file.extension.is_empty() {
        problems.push("declares extensions".to_string());
    }
    problems
}

fn table_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schema").join(name)
}

/// The data rows of a table (header checked and dropped, blank lines ignored).
fn read_table(name: &str) -> Vec<String> {
    let path = table_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(COLUMNS), "{name}: unexpected header line");
    let rows: Vec<String> =
        lines.filter(|l| !l.trim().is_empty()).map(|l| l.trim_end_matches('\r').to_string()).collect();
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.split('\t').count(), 6, "{name}:{}: expected 6 tab-separated columns: {r:?}", i + 2);
    }
    rows
}

fn duplicates(rows: &[String]) -> Vec<&String> {
    let mut seen = BTreeSet::new();
    rows.iter().filter(|r| !seen.insert(*r)).collect()
}

/// Per-kind counts, for the failure message.
fn counts(rows: &BTreeSet<&String>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows {
        let kind = r.split('\t').next().unwrap_or("").to_string();
        *out.entry(kind).or_insert(0) += 1;
    }
    out
}

fn check_version(package: &str, table: &str) {
    let fds = descriptor_set();
    let file = file(&fds, package);
    let actual = file_rows(file);
    let expected = read_table(table);

    let mut report = String::new();
    for problem in file_level_problems(file) {
        report.push_str(&format!("proto file for {package}: {problem}\n"));
    }
    for d in duplicates(&actual) {
        report.push_str(&format!("duplicate row from the descriptors: {d}\n"));
    }
    for d in duplicates(&expected) {
        report.push_str(&format!("duplicate row in {table}: {d}\n"));
    }

    let actual_set: BTreeSet<&String> = actual.iter().collect();
    let expected_set: BTreeSet<&String> = expected.iter().collect();
    let missing: Vec<_> = expected_set.difference(&actual_set).collect();
    let extra: Vec<_> = actual_set.difference(&expected_set).collect();
    if !missing.is_empty() {
        report.push_str(&format!("\n{} row(s) in {table} but not in the compiled proto ({package}):\n", missing.len()));
        for r in &missing {
            report.push_str(&format!("  - {r}\n"));
        }
    }
    if !extra.is_empty() {
        report.push_str(&format!("\n{} row(s) in the compiled proto ({package}) but not in {table}:\n", extra.len()));
        for r in &extra {
            report.push_str(&format!("  + {r}\n"));
        }
    }
    if !report.is_empty() {
        panic!(
            "schema of {package} differs from tests/schema/{table}\n\
             counts by kind: table {:?}, proto {:?}\n{report}",
            counts(&expected_set),
            counts(&actual_set)
        );
    }
}

#[test]
fn v1alpha1_matches_table() {
    check_version("runtime", "v1alpha1.tsv");
}

#[test]
fn v1alpha2_matches_table() {
    check_version("runtime.v1alpha2", "v1alpha2.tsv");
}

#[test]
fn v1_matches_table() {
    check_version("runtime.v1", "v1.tsv");
}

/// v1alpha2 only grew between Kubernetes 1.10 and 1.25: every message and field of the 1.10
/// table is in the final table with the same full name, number and type.
#[test]
fn v1alpha2_at_k8s_1_10_is_a_subset_of_v1alpha2() {
    let key = |r: &String| -> Option<(String, String, String, String)> {
        let cols: Vec<&str> = r.split('\t').collect();
        matches!(cols[0], "message" | "field")
            .then(|| (cols[0].to_string(), cols[1].to_string(), cols[2].to_string(), cols[3].to_string()))
    };
    let old: BTreeSet<_> = read_table("v1alpha2-k8s-1.10.tsv").iter().filter_map(key).collect();
    let new: BTreeSet<_> = read_table("v1alpha2.tsv").iter().filter_map(key).collect();
    assert!(!old.is_empty(), "the 1.10 table has no messages or fields");
    let missing: Vec<String> =
        old.difference(&new).map(|(kind, name, number, ty)| format!("  {kind}\t{name}\t{number}\t{ty}")).collect();
    assert!(
        missing.is_empty(),
        "{} message/field row(s) of v1alpha2 at Kubernetes 1.10 are missing from (or changed in) \
         v1alpha2.tsv:\n{}",
        missing.len(),
        missing.join("\n")
    );
}
