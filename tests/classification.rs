//! The classification of lossable request fields (`src/convert/classes.rs`) against the schema
//! tables: every lossable request field has a class, every class names a real lossable field, the
//! message lists name real messages, and the table in docs/conversion.md is the code's.

use cri_bridge::api::SchemaInfo;
use cri_bridge::convert::classes::{class_of, class_of_unknown, Class, ADVISORY_MESSAGES, FIELDS, SECURITY_MESSAGES};
use cri_bridge::CriVersion::{self, V1alpha1, V1alpha2, V1};
use std::collections::{BTreeMap, BTreeSet};

/// The versions whose request fields can be lost, each with the next older version.
const WITH_OLDER: [(CriVersion, CriVersion); 2] = [(V1, V1alpha2), (V1alpha2, V1alpha1)];

const ALL: [CriVersion; 3] = [V1, V1alpha2, V1alpha1];

/// The section of docs/conversion.md holding the classification table (the README links to it).
const DOC_SECTION: &str = "## What is refused: the classification";
const DOC_HEADER: &str = "| field | class | why |";

/// Messages whose fields need no entry of their own: every request path to them goes through a
/// field named `filter`, which `class_of` classes as Behaviour.
fn is_filter_message(name: &str) -> bool {
    name.ends_with("Filter")
}

/// Every lossable request field `Message.field` of `version` (with `older`, the next older
/// version), each with the reasons it is lossable.
fn lossable_in(version: CriVersion, older: CriVersion) -> BTreeMap<String, Vec<String>> {
    let schema = version.schema();
    let old = older.schema();
    let reachable = schema.request_messages();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (index, message) in schema.messages.iter().enumerate() {
        if !reachable[index] {
            continue;
        }
        let Some(born) = message.fields.iter().map(|f| f.since).min() else { continue };
        let old_message = old.message_index(message.name).map(|i| &old.messages[i]);
        for field in message.fields {
            let qualified = format!("{}.{}", message.name, field.name);
            let mut reasons = Vec::new();
            if field.since > born {
                reasons.push(format!("{version}: added in Kubernetes 1.{}, after its message (1.{born})", field.since));
            }
            if let Some(old_message) = old_message {
                if !old_message.fields.iter().any(|f| f.name == field.name) {
                    reasons.push(format!("{version}: {older} has {} but no field {}", message.name, field.name));
                }
            }
            if let Some(e) = field.enumeration {
                reasons.push(format!(
                    "{version}: an enum field ({}): a value may have no counterpart",
                    schema.enums[e].name
                ));
            }
            if qualified == "KeyValue.value" {
                reasons.push(format!("{version}: its type differs from {older}'s"));
            }
            // Carried up as they are, and lost when they name no profile: a runtime that reads
            // only SecurityProfile (CRI-O 1.36) gets none.
            if matches!(
                qualified.as_str(),
                "LinuxSandboxSecurityContext.seccomp_profile_path"
                    | "LinuxContainerSecurityContext.seccomp_profile_path"
                    | "LinuxContainerSecurityContext.apparmor_profile"
            ) && version == CriVersion::V1
            {
                reasons.push(format!("{version}: a string that names no profile has no SecurityProfile form"));
            }
            if !reasons.is_empty() {
                out.entry(qualified).or_default().extend(reasons);
            }
        }
    }
    out
}

/// Every lossable request field of v1 and v1alpha2, with why.
fn lossable() -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (version, older) in WITH_OLDER {
        for (field, reasons) in lossable_in(version, older) {
            out.entry(field).or_default().extend(reasons);
        }
    }
    out
}

fn classified(field: &str) -> bool {
    FIELDS.iter().any(|c| c.field == field)
}

/// A message in the request tree of some RPC of `schema`.
fn is_request_message(schema: &SchemaInfo, name: &str) -> bool {
    schema.message_index(name).is_some_and(|i| schema.request_messages()[i])
}

#[test]
fn every_lossable_request_field_has_a_class() {
    let lossable = lossable();
    assert!(lossable.len() >= FIELDS.len() / 2, "the rule finds almost nothing: {lossable:?}");

    let missing: Vec<String> = lossable
        .iter()
        .filter(|(field, _)| !classified(field))
        .filter(|(field, _)| !is_filter_message(field.split_once('.').expect("Message.field").0))
        .map(|(field, reasons)| format!("  {field}: {}", reasons.join("; ")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} lossable request field(s) have no class in FIELDS (src/convert/classes.rs):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn filter_messages_are_reached_only_through_filter_fields_and_are_behaviour() {
    let mut wrong = Vec::new();
    for version in [V1, V1alpha2] {
        let schema = version.schema();
        let reachable = schema.request_messages();
        for (index, message) in schema.messages.iter().enumerate() {
            for field in message.fields {
                let Some(target) = field.message else { continue };
                if reachable[index] && is_filter_message(schema.messages[target].name) && field.name != "filter" {
                    wrong.push(format!(
                        "{version}: {}.{} holds {} but is not named `filter`",
                        message.name, field.name, schema.messages[target].name
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "filter messages reached other than through `filter`:\n{}", wrong.join("\n"));

    let schema = V1.schema();
    let reachable = schema.request_messages();
    let filters: Vec<_> =
        schema.messages.iter().enumerate().filter(|(i, m)| reachable[*i] && is_filter_message(m.name)).collect();
    assert!(filters.len() >= 3, "v1 has Container, PodSandbox and ContainerStats filters at least: {filters:?}");
    for (_, message) in filters {
        let field = message.fields.first().unwrap_or_else(|| panic!("{} has fields", message.name));
        let qualified = format!("{}.{}", message.name, field.name);
        let path = format!("filter.{}", field.name);
        assert_eq!(class_of(&qualified, &path).0, Class::Behaviour, "{qualified} at {path}");
        let nested = format!("config.filter.{}", field.name);
        assert_eq!(class_of(&qualified, &nested).0, Class::Behaviour, "{qualified} at {nested}");
        let unknown = format!("{}.#99", message.name);
        assert_eq!(class_of(&unknown, "filter.#99").0, Class::Behaviour, "{unknown} at filter.#99");
    }
}

#[test]
fn every_classified_field_is_a_real_request_field() {
    let lossable = lossable();
    let mut problems = Vec::new();
    let mut dead = Vec::new();
    let mut seen = BTreeSet::new();
    for entry in FIELDS {
        let field = entry.field;
        if !seen.insert(field) {
            problems.push(format!("  {field}: listed twice"));
        }
        if entry.why.trim().is_empty() {
            problems.push(format!("  {field}: empty why"));
        }
        let in_schema: Vec<CriVersion> =
            ALL.into_iter().filter(|v| v.schema().field_by_name(field).is_some()).collect();
        if in_schema.is_empty() {
            problems.push(format!("  {field}: no such field in v1, v1alpha2 or v1alpha1"));
            continue;
        }
        let message = field.split_once('.').expect("Message.field").0;
        if !in_schema.iter().any(|v| is_request_message(v.schema(), message)) {
            problems.push(format!("  {field}: {message} is in no RPC's request (in {in_schema:?})"));
            continue;
        }
        if !lossable.contains_key(field) {
            dead.push(format!("  {field}"));
        }
    }
    let mut report = Vec::new();
    if !problems.is_empty() {
        report.push(format!("FIELDS entries that are not real request fields:\n{}", problems.join("\n")));
    }
    if !dead.is_empty() {
        report.push(format!(
            "FIELDS entries that are real request fields but lossable in no version (dead weight: born with \
             their message, present in the older version, no enum, so their loss shows at the field that \
             holds the message):\n{}",
            dead.join("\n")
        ));
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn security_and_unknown_message_lists_name_real_messages() {
    let mut problems = Vec::new();
    for (list, names) in [("SECURITY_MESSAGES", SECURITY_MESSAGES), ("ADVISORY_MESSAGES", ADVISORY_MESSAGES)] {
        let mut seen = BTreeSet::new();
        for name in names {
            if !seen.insert(name) {
                problems.push(format!("  {list}: {name} listed twice"));
            }
            if !ALL.iter().any(|v| v.schema().message_index(name).is_some()) {
                problems.push(format!("  {list}: {name} is a message in no version"));
            } else if !ALL.iter().any(|v| is_request_message(v.schema(), name)) {
                problems.push(format!("  {list}: {name} is in no RPC's request"));
            }
        }
    }
    for name in ADVISORY_MESSAGES {
        if !ALL.iter().any(|v| v.schema().rpcs.iter().any(|r| r.request == *name)) {
            problems.push(format!("  ADVISORY_MESSAGES: {name} is no RPC's request message"));
        }
        if SECURITY_MESSAGES.contains(name) {
            problems.push(format!("  {name} is in both lists"));
        }
    }
    assert!(problems.is_empty(), "message lists naming the wrong messages:\n{}", problems.join("\n"));
}

/// The rows of the classification table in docs/conversion.md: (field, class, why).
fn doc_rows() -> Vec<(String, String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/conversion.md");
    let doc = std::fs::read_to_string(path).expect("docs/conversion.md");
    let mut lines = doc.lines();
    assert!(lines.any(|l| l.trim_end() == DOC_SECTION), "docs/conversion.md has no section {DOC_SECTION:?}");
    let mut lines = lines.take_while(|l| !l.starts_with("## "));
    assert!(
        lines.any(|l| l.trim_end() == DOC_HEADER),
        "docs/conversion.md's {DOC_SECTION:?} has no table header {DOC_HEADER:?}"
    );
    let separator = lines.next().unwrap_or_default();
    assert!(
        separator.starts_with('|') && separator.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')),
        "no separator row after the header: {separator:?}"
    );
    lines
        .take_while(|l| !l.trim().is_empty())
        .map(|line| {
            let inner = line
                .trim_end()
                .strip_prefix("| ")
                .and_then(|l| l.strip_suffix(" |"))
                .unwrap_or_else(|| panic!("not a table row: {line:?}"));
            let cells: Vec<&str> = inner.split(" | ").collect();
            let [field, class, why] = cells[..] else { panic!("not three cells: {line:?}") };
            let field = field
                .strip_prefix('`')
                .and_then(|f| f.strip_suffix('`'))
                .unwrap_or_else(|| panic!("field not in backticks: {line:?}"));
            (field.to_string(), class.to_string(), why.replace("\\|", "|"))
        })
        .collect()
}

#[test]
fn documented_classification_table_matches_the_code() {
    let rows = doc_rows();
    let expected: Vec<(String, String, String)> =
        FIELDS.iter().map(|c| (c.field.to_string(), c.class.to_string(), c.why.to_string())).collect();
    if rows != expected {
        let mut diff = Vec::new();
        for i in 0..rows.len().max(expected.len()) {
            match (rows.get(i), expected.get(i)) {
                (Some(r), Some(e)) if r == e => {}
                (r, e) => diff.push(format!("  row {}: docs/conversion.md {r:?}, FIELDS {e:?}", i + 1)),
            }
        }
        panic!(
            "docs/conversion.md's classification table differs from FIELDS ({} rows against {}):\n{}",
            rows.len(),
            expected.len(),
            diff.join("\n")
        );
    }
}

#[test]
fn classes_are_the_documented_defaults() {
    use Class::{Advisory, Behaviour, Security};
    let expected = [
        ("NamespaceOption.userns_options", "config.linux.security_context.namespace_options.userns_options", Security),
        ("RunPodSandboxRequest.runtime_handler", "runtime_handler", Security),
        ("ImageSpec.user_specified_image", "image.user_specified_image", Advisory),
        ("ContainerConfig.stop_signal", "config.stop_signal", Behaviour),
        ("LinuxContainerResources.unified", "config.linux.resources.unified", Behaviour),
        ("LinuxPodSandboxConfig.resources", "config.linux.resources", Advisory),
        (
            "Capability.add_ambient_capabilities",
            "config.linux.security_context.capabilities.add_ambient_capabilities",
            Security,
        ),
    ];
    for (field, path, class) in expected {
        assert_eq!(class_of(field, path).0, class, "{field} at {path}");
    }
    assert_eq!(class_of_unknown("LinuxContainerSecurityContext"), Security);
    assert_eq!(class_of_unknown("ContainerStatusRequest"), Advisory);
    assert_eq!(class_of_unknown("CreateContainerRequest"), Behaviour);
    assert_eq!(class_of("ContainerFilter.#9", "filter.#9").0, Behaviour);
    // Not classified: refused (fail-closed), and an unknown number in a read-only request is a hint.
    assert_eq!(class_of("ContainerConfig.no_such_field", "config.no_such_field").0, Behaviour);
    assert_eq!(class_of("ContainerStatusRequest.#9", "#9").0, Advisory);
}
