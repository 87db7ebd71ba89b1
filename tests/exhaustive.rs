//! Checks that the conversions cover each older CRI version completely.
//!
//! - every message of v1alpha1 and v1alpha2 is either converted (both ways) or listed in
//!   `rules::VERSION_ONLY` with a reason, and every converted message has transcoders;
//! - every transcoder maps the default message (empty bytes) to the default message with no loss;
//! - every `rules::RULES` entry explains itself and names a converted message;
//! - every RPC of an older version exists in v1 with the same request and response.

use cri_bridge::convert::rules::{RULES, VERSION_ONLY};
use cri_bridge::convert::{generated, transcoders, Cx};
use cri_bridge::CriVersion;
use std::collections::BTreeSet;

const OLDER: [CriVersion; 2] = [CriVersion::V1alpha1, CriVersion::V1alpha2];

fn converted(version: CriVersion) -> &'static [&'static str] {
    match version {
        CriVersion::V1alpha1 => generated::v1alpha1::CONVERTED,
        CriVersion::V1alpha2 => generated::v1alpha2::CONVERTED,
        CriVersion::V1 => panic!("v1 is the hub: nothing converts to it"),
    }
}

/// Message names of `version` straight from the compiled descriptors (top level and nested,
/// map entries excluded), short form (`SecurityProfile`, `Outer.Inner`).
fn descriptor_messages(version: CriVersion) -> BTreeSet<String> {
    use prost::Message;
    fn walk(out: &mut BTreeSet<String>, scope: &str, m: &prost_types::DescriptorProto) {
        if m.options.as_ref().and_then(|o| o.map_entry).unwrap_or(false) {
            return;
        }
        let name = if scope.is_empty() { m.name().to_string() } else { format!("{scope}.{}", m.name()) };
        for n in &m.nested_type {
            walk(out, &name, n);
        }
        out.insert(name);
    }
    let fds = prost_types::FileDescriptorSet::decode(cri_bridge::api::FILE_DESCRIPTOR_SET)
        .expect("FILE_DESCRIPTOR_SET decodes");
    let file = fds
        .file
        .iter()
        .find(|f| f.package() == version.package())
        .unwrap_or_else(|| panic!("no file for package {}", version.package()));
    let mut out = BTreeSet::new();
    for m in &file.message_type {
        walk(&mut out, "", m);
    }
    out
}

fn table_messages(version: CriVersion) -> BTreeSet<String> {
    version.schema().messages.iter().map(|m| m.name.to_string()).collect()
}

fn fail_if_any(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}: {} problem(s):\n  {}", problems.len(), problems.join("\n  "));
}

/// The static schema tables list the same messages as the descriptors, so the checks below that
/// read the tables see every message.
#[test]
fn schema_tables_list_every_message() {
    let mut problems = Vec::new();
    for version in [CriVersion::V1alpha1, CriVersion::V1alpha2, CriVersion::V1] {
        let from_descriptors = descriptor_messages(version);
        let from_table = table_messages(version);
        for m in from_descriptors.difference(&from_table) {
            problems.push(format!("{version}: {m} is in the descriptors but not in the schema table"));
        }
        for m in from_table.difference(&from_descriptors) {
            problems.push(format!("{version}: {m} is in the schema table but not in the descriptors"));
        }
        if from_table.len() != version.schema().messages.len() {
            problems.push(format!("{version}: the schema table lists a message twice"));
        }
    }
    fail_if_any("schema tables vs descriptors", problems);
}

/// Each older message converts both ways, or is explicitly version-only with a reason.
#[test]
fn every_older_message_is_converted_or_version_only() {
    let mut problems = Vec::new();
    let v1 = table_messages(CriVersion::V1);
    for version in OLDER {
        let v = version.as_str();
        let messages = descriptor_messages(version);
        let converted_set: BTreeSet<&str> = converted(version).iter().copied().collect();
        if converted_set.len() != converted(version).len() {
            problems.push(format!("{v}: CONVERTED lists a message twice"));
        }
        let version_only: Vec<_> = VERSION_ONLY.iter().filter(|o| o.version == v).collect();
        for m in &messages {
            let is_converted = converted_set.contains(m.as_str());
            let only: Vec<_> = version_only.iter().filter(|o| o.message == m).collect();
            match (is_converted, only.len()) {
                (true, 0) => {}
                (false, 1) => {
                    if only[0].why.trim().is_empty() {
                        problems.push(format!("{v}: VERSION_ONLY entry for {m} has an empty reason"));
                    }
                }
                (false, 0) => problems.push(format!("{v}: {m} is neither in CONVERTED nor in VERSION_ONLY")),
                (true, _) => problems.push(format!("{v}: {m} is in CONVERTED and also in VERSION_ONLY")),
                (false, _) => problems.push(format!("{v}: {m} is in VERSION_ONLY more than once")),
            }
        }
        for name in &converted_set {
            if !messages.contains(*name) {
                problems.push(format!("{v}: CONVERTED names {name}, which {v} does not have"));
            }
            if !v1.contains(*name) {
                problems.push(format!("{v}: CONVERTED names {name}, which v1 does not have"));
            }
        }
        for o in &version_only {
            if !messages.contains(o.message) {
                problems.push(format!("{v}: VERSION_ONLY names {}, which {v} does not have", o.message));
            }
            if v1.contains(o.message) {
                problems.push(format!("{v}: VERSION_ONLY names {}, but v1 has it (it should be converted)", o.message));
            }
        }
    }
    for o in VERSION_ONLY {
        if !OLDER.iter().any(|v| v.as_str() == o.version) {
            problems.push(format!("VERSION_ONLY entry {} names unknown version {:?}", o.message, o.version));
        }
    }
    fail_if_any("message coverage", problems);
}

/// Every converted message has exactly one transcoder, and every transcoder is for a converted
/// message.
#[test]
fn every_converted_message_has_a_transcoder() {
    let mut problems = Vec::new();
    for version in OLDER {
        let v = version.as_str();
        let names: Vec<&str> = transcoders(version).iter().map(|t| t.message).collect();
        for m in converted(version) {
            match names.iter().filter(|n| *n == m).count() {
                1 => {}
                0 => problems.push(format!("{v}: {m} is in CONVERTED but has no transcoder")),
                n => problems.push(format!("{v}: {m} has {n} transcoders")),
            }
        }
        for n in &names {
            if !converted(version).contains(n) {
                problems.push(format!("{v}: transcoder for {n}, which is not in CONVERTED"));
            }
        }
    }
    assert!(transcoders(CriVersion::V1).is_empty(), "v1 needs no transcoders");
    fail_if_any("transcoders", problems);
}

/// A transcoder whose default message does not map to the default message, by design.
struct NotDefault {
    version: CriVersion,
    message: &'static str,
    direction: &'static str,
    /// The exact encoded output for empty input.
    output: &'static [u8],
    /// The `Loss::field` of each loss reported, in order.
    losses: &'static [&'static str],
}

/// v1alpha1 `NamespaceOption` is three booleans and v1's is three modes, mapped by meaning (see
/// `tests/schema/README.md`): the all-false v1alpha1 message means pid CONTAINER, which v1 encodes
/// as field 2 = 1; the default v1 message means pid POD, which v1alpha1 cannot express.
const NOT_DEFAULT: &[NotDefault] = &[
    NotDefault {
        version: CriVersion::V1alpha1,
        message: "NamespaceOption",
        direction: "to_v1",
        output: &[0x10, 0x01],
        losses: &[],
    },
    NotDefault {
        version: CriVersion::V1alpha1,
        message: "NamespaceOption",
        direction: "from_v1",
        output: &[],
        losses: &["NamespaceOption.pid"],
    },
    // An absent v1alpha1 NamespaceOption also means "all false": the pod and container configs
    // write it out in v1 (linux.security_context.namespace_options = {pid: CONTAINER}).
    NotDefault {
        version: CriVersion::V1alpha1,
        message: "PodSandboxConfig",
        direction: "to_v1",
        output: &[0x42, 0x06, 0x12, 0x04, 0x0a, 0x02, 0x10, 0x01],
        losses: &[],
    },
    NotDefault {
        version: CriVersion::V1alpha1,
        message: "ContainerConfig",
        direction: "to_v1",
        output: &[0x7a, 0x06, 0x12, 0x04, 0x1a, 0x02, 0x10, 0x01],
        losses: &[],
    },
];

/// The default message (empty bytes) converts to the default message, both ways, with no loss,
/// except for the cases in `NOT_DEFAULT`, which must behave exactly as listed there.
#[test]
fn transcoders_map_empty_to_empty_without_loss() {
    let mut problems = Vec::new();
    let mut used = vec![false; NOT_DEFAULT.len()];
    for version in OLDER {
        let v = version.as_str();
        for t in transcoders(version) {
            for (direction, f) in [("to_v1", t.to_v1), ("from_v1", t.from_v1)] {
                let exception = NOT_DEFAULT
                    .iter()
                    .position(|e| e.version == version && e.message == t.message && e.direction == direction);
                let (want_output, want_losses): (&[u8], &[&str]) = match exception {
                    Some(i) => {
                        used[i] = true;
                        (NOT_DEFAULT[i].output, NOT_DEFAULT[i].losses)
                    }
                    None => (&[], &[]),
                };
                let mut cx = Cx::new();
                match f(&[], &mut cx) {
                    Ok(out) => {
                        if out != want_output {
                            problems.push(format!(
                                "{v}: {}.{direction}(empty) produced {:02x?}, expected {:02x?}",
                                t.message, out, want_output
                            ));
                        }
                    }
                    Err(e) => problems.push(format!("{v}: {}.{direction}(empty) failed: {e}", t.message)),
                }
                let got_losses: Vec<&str> = cx.losses().iter().map(|l| &*l.field).collect();
                if got_losses != want_losses {
                    let losses: Vec<String> = cx.losses().iter().map(|l| l.to_string()).collect();
                    problems.push(format!(
                        "{v}: {}.{direction}(empty) reported losses {:?} ({}), expected {:?}",
                        t.message,
                        got_losses,
                        losses.join(", "),
                        want_losses
                    ));
                }
            }
        }
    }
    for (e, used) in NOT_DEFAULT.iter().zip(used) {
        if !used {
            problems.push(format!(
                "{}: NOT_DEFAULT lists {}.{}, which has no transcoder",
                e.version, e.message, e.direction
            ));
        }
    }
    fail_if_any("empty messages", problems);
}

/// Every hand-written rule says why it exists and names a message that is converted.
#[test]
fn every_rule_is_explained_and_names_a_converted_message() {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for rule in RULES {
        let Some(version) = OLDER.iter().copied().find(|v| v.as_str() == rule.version) else {
            problems.push(format!("rule for {} names unknown version {:?}", rule.message, rule.version));
            continue;
        };
        if rule.why.trim().is_empty() {
            problems.push(format!("rule {}::{} has an empty why", rule.version, rule.message));
        }
        if rule.hook.trim().is_empty() {
            problems.push(format!("rule {}::{} has an empty hook", rule.version, rule.message));
        }
        if !converted(version).contains(&rule.message) {
            problems.push(format!(
                "rule {}::{} names a message that is not in CONVERTED for {}",
                rule.version, rule.message, rule.version
            ));
        }
        if !seen.insert((rule.version, rule.message)) {
            problems
                .push(format!("more than one rule for {}::{} (only the first is used)", rule.version, rule.message));
        }
    }
    fail_if_any("rules", problems);
}

/// No RPC was ever removed: each older RPC exists in v1 with the same request and response
/// messages (and the same streaming), and both of its messages convert.
#[test]
fn every_older_rpc_exists_in_v1_with_the_same_messages() {
    let mut problems = Vec::new();
    let v1 = CriVersion::V1.schema();
    for version in OLDER {
        let v = version.as_str();
        let schema = version.schema();
        assert!(!schema.rpcs.is_empty(), "{v} has no RPCs in its schema table");
        for r in schema.rpcs {
            let name = format!("{}/{}", r.service, r.method);
            let Some(n) = v1.rpc(r.service, r.method) else {
                problems.push(format!("{v}: {name} does not exist in v1"));
                continue;
            };
            if (r.request, r.response) != (n.request, n.response) {
                problems.push(format!(
                    "{v}: {name} is {} -> {} but in v1 {} -> {}",
                    r.request, r.response, n.request, n.response
                ));
            }
            if r.server_streaming != n.server_streaming {
                problems.push(format!(
                    "{v}: {name} server_streaming={} but in v1 {}",
                    r.server_streaming, n.server_streaming
                ));
            }
            for m in [r.request, r.response] {
                if !converted(version).contains(&m) {
                    problems.push(format!("{v}: {name} uses {m}, which is not in CONVERTED"));
                }
            }
        }
    }
    fail_if_any("RPCs", problems);
}
