//! The scan's wire reader, on bytes written by hand: every wire type, the limits of varints and
//! lengths, field numbers out of range, and what counts as "set" for a blocked field. (The
//! round-trip suite checks the scan on generated messages; these are the edges a generator does
//! not reach.)

use cri_bridge::convert::scan::{self, Limits, Malformed};
use cri_bridge::convert::{Loss, LossReason};
use cri_bridge::revision::{Block, RuntimeProfile};
use cri_bridge::CriVersion::{V1alpha2, V1};
use prost::encoding::{encode_key, encode_varint, WireType};

fn key(number: u32, wire_type: WireType, out: &mut Vec<u8>) {
    encode_key(number, wire_type, out);
}

fn length_delimited(number: u32, body: &[u8], out: &mut Vec<u8>) {
    key(number, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// Scans `bytes` as v1 `message`, reporting unknown numbers only.
fn scan_unknown(message: &str, bytes: &[u8]) -> Result<Vec<Loss>, Malformed> {
    let schema = V1.schema();
    let mut losses = Vec::new();
    scan::scan(schema, schema.message_index(message).unwrap(), bytes, Limits::UNKNOWN_ONLY, &mut losses)?;
    Ok(losses)
}

fn paths(losses: &[Loss]) -> Vec<String> {
    losses.iter().map(|l| format!("{} {:?}", l.path, l.reason)).collect()
}

#[test]
fn unknown_fields_of_every_wire_type_are_stepped_over_and_each_reported() {
    // ContainerConfig: #100 varint, #101 fixed64, #102 length-delimited, #103 fixed32, then a
    // known field (linux, #15) holding an unknown field of its own: the walk must read past
    // each kind to reach it.
    let mut linux = Vec::new();
    key(99, WireType::Varint, &mut linux);
    encode_varint(7, &mut linux);
    let mut config = Vec::new();
    key(100, WireType::Varint, &mut config);
    encode_varint(u64::MAX, &mut config); // the longest varint: 10 bytes
    key(101, WireType::SixtyFourBit, &mut config);
    config.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    length_delimited(102, b"a newer client's text", &mut config);
    key(103, WireType::ThirtyTwoBit, &mut config);
    config.extend_from_slice(&[9, 9, 9, 9]);
    length_delimited(15, &linux, &mut config);
    let mut request = Vec::new();
    length_delimited(2, &config, &mut request);

    let losses = scan_unknown("CreateContainerRequest", &request).unwrap();
    assert_eq!(
        paths(&losses),
        [
            "config.#100 UnknownField",
            "config.#101 UnknownField",
            "config.#102 UnknownField",
            "config.#103 UnknownField",
            "config.linux.#99 UnknownField",
        ]
    );
    assert_eq!(losses[4].field, "LinuxContainerConfig.#99");
}

#[test]
fn elements_of_repeated_messages_are_numbered_in_paths() {
    // ContainerConfig.mounts (#7): the third mount carries an unknown field.
    let mut config = Vec::new();
    length_delimited(7, &[], &mut config);
    length_delimited(7, &[], &mut config);
    let mut mount = Vec::new();
    key(50, WireType::Varint, &mut mount);
    encode_varint(1, &mut mount);
    length_delimited(7, &mount, &mut config);
    assert_eq!(paths(&scan_unknown("ContainerConfig", &config).unwrap()), ["mounts[2].#50 UnknownField"]);
}

#[test]
fn malformed_bytes_are_errors_naming_where() {
    let err = |bytes: &[u8]| scan_unknown("ContainerConfig", bytes).unwrap_err().to_string();
    let mut groups = Vec::new();
    for wire_type in [3u8, 4, 6, 7] {
        groups.clear();
        encode_varint(u64::from(100u32 << 3 | u32::from(wire_type)), &mut groups);
        assert_eq!(err(&groups), "malformed protobuf at ContainerConfig: unsupported wire type", "{wire_type}");
    }
    // Field number 0, and numbers beyond the protobuf limit (2^29 - 1): a key that would read
    // as another field if its high bits were cut off.
    assert_eq!(err(&[0x00, 0x01]), "malformed protobuf at ContainerConfig: field number 0");
    let mut huge = Vec::new();
    encode_varint(((1u64 << 32) + 15) << 3 | 2, &mut huge);
    encode_varint(0, &mut huge);
    assert_eq!(err(&huge), "malformed protobuf at ContainerConfig: field number out of range");
    let mut first_beyond = Vec::new();
    encode_varint((1u64 << 29) << 3, &mut first_beyond);
    encode_varint(0, &mut first_beyond);
    assert_eq!(err(&first_beyond), "malformed protobuf at ContainerConfig: field number out of range");
    let mut largest = Vec::new();
    encode_varint(((1u64 << 29) - 1) << 3, &mut largest);
    encode_varint(0, &mut largest);
    assert_eq!(paths(&scan_unknown("ContainerConfig", &largest).unwrap()), ["#536870911 UnknownField"]);
    // A varint of 11 bytes; a key with nothing after it; lengths one past the end.
    let mut long = Vec::new();
    key(100, WireType::Varint, &mut long);
    long.extend_from_slice(&[0xff; 10]);
    long.push(0x01);
    assert_eq!(err(&long), "malformed protobuf at ContainerConfig: truncated field value");
    assert_eq!(err(&[0x80]), "malformed protobuf at ContainerConfig: truncated field key");
    for (wire_type, body) in [(WireType::SixtyFourBit, 7usize), (WireType::ThirtyTwoBit, 3)] {
        let mut short = Vec::new();
        key(100, wire_type, &mut short);
        short.extend(std::iter::repeat_n(0, body));
        assert_eq!(err(&short), "malformed protobuf at ContainerConfig: truncated field value", "{wire_type:?}");
        short.push(0);
        assert_eq!(paths(&scan_unknown("ContainerConfig", &short).unwrap()), ["#100 UnknownField"]);
    }
    let mut past = Vec::new();
    key(5, WireType::LengthDelimited, &mut past);
    encode_varint(4, &mut past);
    past.extend_from_slice(b"abc");
    assert_eq!(err(&past), "malformed protobuf at ContainerConfig: truncated field value");
    past.push(b'd');
    assert!(scan_unknown("ContainerConfig", &past).unwrap().is_empty(), "exactly to the end is whole");
}

/// A blocked field is reported when it is set: a non-default value, whatever the wire type; an
/// empty message counts as set (its presence means something), an empty string does not.
#[test]
fn a_blocked_field_counts_as_set_when_its_bytes_say_something() {
    let schema = V1.schema();
    let (_, working_dir) = schema.field_by_name("ContainerConfig.working_dir").unwrap();
    let (_, linux) = schema.field_by_name("ContainerConfig.linux").unwrap();
    let (_, stop_signal) = schema.field_by_name("ContainerConfig.stop_signal").unwrap();
    let mut blocked = vec![None; schema.field_count];
    for field in [working_dir, linux, stop_signal] {
        blocked[field.id] = Some(Block::Revision { runtime: 10, field: 30 });
    }
    let limits = Limits { unknown: true, blocked: Some(&blocked), minor: 10, without_swap: false };
    let reported = |bytes: &[u8]| {
        let mut losses = Vec::new();
        scan::scan(schema, schema.message_index("ContainerConfig").unwrap(), bytes, limits, &mut losses).unwrap();
        losses.iter().map(|l| l.path.clone()).collect::<Vec<_>>()
    };
    let field = |number: u32, wire_type: WireType, value: &[u8]| {
        let mut out = Vec::new();
        key(number, wire_type, &mut out);
        out.extend_from_slice(value);
        out
    };
    let ss = stop_signal.number;
    assert!(reported(&field(ss, WireType::Varint, &[0])).is_empty(), "varint 0 is the default");
    assert_eq!(reported(&field(ss, WireType::Varint, &[3])), ["stop_signal"]);
    assert!(reported(&field(ss, WireType::SixtyFourBit, &[0; 8])).is_empty(), "all-zero fixed64");
    assert_eq!(reported(&field(ss, WireType::SixtyFourBit, &[0, 0, 0, 0, 0, 0, 0, 1])), ["stop_signal"]);
    assert!(reported(&field(ss, WireType::ThirtyTwoBit, &[0; 4])).is_empty(), "all-zero fixed32");
    assert_eq!(reported(&field(ss, WireType::ThirtyTwoBit, &[1, 0, 0, 0])), ["stop_signal"]);
    assert!(reported(&field(working_dir.number, WireType::LengthDelimited, &[0])).is_empty(), "empty string");
    assert_eq!(reported(&field(working_dir.number, WireType::LengthDelimited, &[1, b'/'])), ["working_dir"]);
    assert_eq!(reported(&field(linux.number, WireType::LengthDelimited, &[0])), ["linux"], "an empty message is set");
    // A blocked message is reported whole; nothing inside it is walked.
    let mut inner = Vec::new();
    key(99, WireType::Varint, &mut inner);
    encode_varint(1, &mut inner);
    let mut config = Vec::new();
    length_delimited(linux.number, &inner, &mut config);
    assert_eq!(reported(&config), ["linux"]);
    assert_eq!(
        paths(&scan_unknown("ContainerConfig", &config).unwrap()),
        ["linux.#99 UnknownField"],
        "unblocked, the walk goes inside"
    );
}

/// Every enum value newer than its version's first revision, in every message that holds it: sent
/// to a runtime one revision older than the value it is blocked, naming the field; at the value's
/// own revision it passes. (Values found from the schema tables, so a new one is covered too.)
#[test]
fn an_enum_value_is_blocked_below_its_revision_and_passes_from_it() {
    let (mut checked, mut below_checked) = (0, 0);
    for version in [V1alpha2, V1] {
        let schema = version.schema();
        for (index, message) in schema.messages.iter().enumerate() {
            for field in message.fields {
                let Some(e) = field.enumeration else { continue };
                for value in schema.enums[e].values.iter().filter(|v| v.since > cri_bridge::revision::oldest(version)) {
                    let mut bytes = Vec::new();
                    key(field.number, WireType::Varint, &mut bytes);
                    encode_varint(value.number as i64 as u64, &mut bytes);
                    let at = |minor: u8| {
                        let profile = RuntimeProfile::from_version(version, "containerd", "9.9.9", Some(minor));
                        let blocked = profile.blocked(schema);
                        let mut losses = Vec::new();
                        let limits = Limits { unknown: true, blocked: Some(&blocked), minor, without_swap: false };
                        scan::scan(schema, index, &bytes, limits, &mut losses).unwrap();
                        losses
                    };
                    let what = format!("{version} {}.{} = {}", message.name, field.name, value.name);
                    if field.since < value.since {
                        let below = at(value.since - 1);
                        assert_eq!(below.len(), 1, "{what} at 1.{}: {below:?}", value.since - 1);
                        assert_eq!(below[0].path, field.name, "{what}");
                        let expect =
                            LossReason::Blocked(Block::Revision { runtime: value.since - 1, field: value.since });
                        assert_eq!(below[0].reason, expect, "{what}");
                        below_checked += 1;
                    }
                    // (A field newer than the value is blocked as a whole until its own revision.)
                    let from = value.since.max(field.since);
                    assert!(at(from).is_empty(), "{what} at 1.{from}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 5 && below_checked >= 3, "only {checked} newer enum values ({below_checked} in older fields)");
}

/// Past the first 32 distinct losses, a repeat of a field already recorded is counted on that
/// field's entry, and on no other.
#[test]
fn a_repeated_loss_past_the_bound_counts_on_its_own_entry() {
    let schema = V1.schema();
    let mount_with = |propagation: u64| {
        let mut mount = Vec::new();
        key(5, WireType::Varint, &mut mount); // Mount.propagation, given an undefined value
        encode_varint(propagation, &mut mount);
        mount
    };
    let mut config = Vec::new();
    length_delimited(7, &mount_with(90), &mut config);
    for number in 100..131 {
        key(number, WireType::Varint, &mut config);
        encode_varint(1, &mut config);
    }
    length_delimited(7, &mount_with(91), &mut config);
    key(100, WireType::Varint, &mut config);
    encode_varint(1, &mut config);
    let mut losses = Vec::new();
    let index = schema.message_index("ContainerConfig").unwrap();
    scan::scan(schema, index, &config, Limits::UNKNOWN_ONLY, &mut losses).unwrap();
    assert_eq!(losses.len(), 32, "{losses:?}");
    assert_eq!((losses[0].field.as_ref(), losses[0].more), ("Mount.propagation", 1));
    assert_eq!((losses[1].field.as_ref(), losses[1].more), ("ContainerConfig.#100", 1));
    assert!(losses[2..].iter().all(|l| l.more == 0), "{losses:?}");
}

/// A v1alpha2 runtime before 1.20 reads only the deprecated seccomp/AppArmor strings. A
/// passthrough request whose profile the string does not say (missing, or naming another
/// profile) would run under another profile than asked: refused. When the string says the same,
/// the runtime applies it from the string: the profile may go unread.
#[allow(deprecated)]
#[test]
fn a_profile_a_string_does_not_carry_is_blocked_before_1_20() {
    use cri_bridge::api::v1alpha2::{security_profile::ProfileType, LinuxContainerSecurityContext, SecurityProfile};
    use prost::Message;
    let schema = V1alpha2.schema();
    let profile = RuntimeProfile::from_version(V1alpha2, "containerd", "1.4.13", Some(19));
    let blocked = profile.blocked(schema);
    let index = schema.message_index("LinuxContainerSecurityContext").unwrap();
    let localhost =
        Some(SecurityProfile { profile_type: ProfileType::Localhost as i32, localhost_ref: "audit.json".into() });
    let scanned = |string: &str| {
        let context = LinuxContainerSecurityContext {
            seccomp: localhost.clone(),
            seccomp_profile_path: string.into(),
            apparmor: localhost.clone(),
            apparmor_profile: string.into(),
            ..Default::default()
        };
        let mut losses = Vec::new();
        let limits = Limits { unknown: true, blocked: Some(&blocked), minor: 19, without_swap: false };
        scan::scan(schema, index, &context.encode_to_vec(), limits, &mut losses).unwrap();
        losses.iter().map(|l| l.path.clone()).collect::<Vec<_>>()
    };
    assert!(scanned("localhost/audit.json").is_empty(), "the strings say the same");
    let mut refused = scanned("unconfined");
    refused.sort();
    assert_eq!(refused, ["apparmor", "seccomp"]);
    assert_eq!(scanned(""), scanned("unconfined"));
}

/// Where a `CreateContainerRequest` is split: which non-repeated message field occurs once per
/// part. The runtime merges the occurrences (field by field; a string set twice: the last), so
/// the parts make one security context.
#[derive(Clone, Copy, Debug)]
enum Split {
    /// `config.linux.security_context` occurs once per part.
    SecurityContext,
    /// `config.linux` occurs once per part.
    Linux,
    /// `config` occurs once per part.
    Config,
}

/// A v1alpha2 `CreateContainerRequest` whose container security context is `parts`, split at
/// `split`. The first part's `config` also starts with field #99, unknown to every schema.
#[allow(deprecated)]
fn split_request(split: Split, parts: &[cri_bridge::api::v1alpha2::LinuxContainerSecurityContext]) -> Vec<u8> {
    use prost::encoding::bytes::encode as field;
    use prost::Message;
    let contexts: Vec<Vec<u8>> = parts.iter().map(Message::encode_to_vec).collect();
    let wrap = |number: u32, body: &[u8]| {
        let mut out = Vec::new();
        field(number, &body.to_vec(), &mut out);
        out
    };
    // security_context is LinuxContainerConfig #2, linux is ContainerConfig #15, config is
    // CreateContainerRequest #2.
    let configs: Vec<Vec<u8>> = match split {
        Split::SecurityContext => vec![wrap(15, &contexts.iter().flat_map(|c| wrap(2, c)).collect::<Vec<_>>())],
        Split::Linux => vec![contexts.iter().flat_map(|c| wrap(15, &wrap(2, c))).collect()],
        Split::Config => contexts.iter().map(|c| wrap(15, &wrap(2, c))).collect(),
    };
    let mut request = Vec::new();
    for (i, config) in configs.into_iter().enumerate() {
        let mut unknown = Vec::new();
        if i == 0 {
            key(99, WireType::Varint, &mut unknown);
            encode_varint(1, &mut unknown);
        }
        request.extend(wrap(2, &[unknown, config].concat()));
    }
    request
}

/// The losses of a v1alpha2 request scanned for a runtime of the 1.19 revision (containerd 1.4),
/// appended to `losses`.
fn scan_for_1_19(message: &str, bytes: &[u8], losses: &mut Vec<Loss>) {
    let schema = V1alpha2.schema();
    let blocked = RuntimeProfile::from_version(V1alpha2, "containerd", "1.4.13", None).blocked(schema);
    let limits = Limits { unknown: true, blocked: Some(&blocked), minor: 19, without_swap: false };
    scan::scan(schema, schema.message_index(message).unwrap(), bytes, limits, losses).unwrap();
}

/// A runtime merges the occurrences of a message field that is not repeated, so a security
/// context split in parts is one context to it: a profile is judged carried by its string on the
/// merged context, wherever the split is (the context, `linux`, or `config` occurring twice). A
/// Localhost profile with its string in one part and `unconfined` as the string in another would
/// run unconfined on a runtime before 1.20, which reads only the (last) string: refused.
#[allow(deprecated)]
#[test]
fn a_split_security_context_is_judged_as_the_runtime_merges_it() {
    use cri_bridge::api::v1alpha2::{security_profile::ProfileType, LinuxContainerSecurityContext, SecurityProfile};
    let localhost =
        || Some(SecurityProfile { profile_type: ProfileType::Localhost as i32, localhost_ref: "audit.json".into() });
    let unconfined =
        || Some(SecurityProfile { profile_type: ProfileType::Unconfined as i32, localhost_ref: "".into() });
    let context = |seccomp: Option<SecurityProfile>, path: &str| LinuxContainerSecurityContext {
        seccomp,
        seccomp_profile_path: path.into(),
        ..Default::default()
    };
    let refused = ["config.#99", "config.linux.security_context.seccomp"];
    let cases: [(&str, Vec<LinuxContainerSecurityContext>, &[&str]); 6] = [
        (
            "a Localhost profile and its string, then the string unconfined",
            vec![context(localhost(), "localhost/audit.json"), context(None, "unconfined")],
            &refused,
        ),
        (
            "unconfined and its string, then the string of a Localhost profile",
            vec![context(unconfined(), "unconfined"), context(None, "localhost/audit.json")],
            &refused,
        ),
        (
            "a Localhost profile and its string, then the profile unconfined",
            vec![context(localhost(), "localhost/audit.json"), context(unconfined(), "")],
            &refused,
        ),
        (
            "the string unconfined, then a Localhost profile and its string (the last string wins)",
            vec![context(None, "unconfined"), context(localhost(), "localhost/audit.json")],
            &refused[..1],
        ),
        (
            "a Localhost profile, then its string",
            vec![context(localhost(), ""), context(None, "localhost/audit.json")],
            &refused[..1],
        ),
        ("one part", vec![context(localhost(), "localhost/audit.json")], &refused[..1]),
    ];
    for split in [Split::SecurityContext, Split::Linux, Split::Config] {
        for (what, parts, expected) in &cases {
            let mut losses = Vec::new();
            scan_for_1_19("CreateContainerRequest", &split_request(split, parts), &mut losses);
            let paths: Vec<&str> = losses.iter().map(|l| l.path.as_str()).collect();
            assert_eq!(paths, *expected, "{what}, split at {split:?}");
        }
    }
    // AppArmor alike.
    let apparmor = |profile: Option<SecurityProfile>, name: &str| LinuxContainerSecurityContext {
        apparmor: profile,
        apparmor_profile: name.into(),
        ..Default::default()
    };
    let split = [apparmor(localhost(), "localhost/audit.json"), apparmor(None, "unconfined")];
    let mut losses = Vec::new();
    scan_for_1_19("CreateContainerRequest", &split_request(Split::Linux, &split), &mut losses);
    assert_eq!(
        paths(&losses)[1..],
        ["config.linux.security_context.apparmor Blocked(Revision { runtime: 19, field: 20 })"]
    );
}

/// The pod's security context too: `RunPodSandboxRequest.config.linux.security_context` split.
#[allow(deprecated)]
#[test]
fn a_split_sandbox_security_context_is_judged_merged() {
    use cri_bridge::api::v1alpha2::{security_profile::ProfileType, LinuxSandboxSecurityContext, SecurityProfile};
    use prost::Message;
    let localhost =
        Some(SecurityProfile { profile_type: ProfileType::Localhost as i32, localhost_ref: "audit.json".into() });
    let first = LinuxSandboxSecurityContext {
        seccomp: localhost,
        seccomp_profile_path: "localhost/audit.json".into(),
        ..Default::default()
    };
    let second = LinuxSandboxSecurityContext { seccomp_profile_path: "unconfined".into(), ..Default::default() };
    // security_context is LinuxPodSandboxConfig #2, linux is PodSandboxConfig #8.
    let mut linux = Vec::new();
    for part in [&first, &second] {
        prost::encoding::bytes::encode(2, &part.encode_to_vec(), &mut linux);
    }
    let mut config = Vec::new();
    prost::encoding::bytes::encode(8, &linux, &mut config);
    let mut request = Vec::new();
    prost::encoding::bytes::encode(1, &config, &mut request);
    let mut losses = Vec::new();
    scan_for_1_19("RunPodSandboxRequest", &request, &mut losses);
    assert_eq!(losses.iter().map(|l| l.path.as_str()).collect::<Vec<_>>(), ["config.linux.security_context.seccomp"]);
}

/// Judging merged occurrences walks the request again: what the first walk had recorded is
/// undone, and losses recorded before the scan stay as they were, the bounded record's overflow
/// count included.
#[allow(deprecated)]
#[test]
fn walking_a_split_request_again_records_each_loss_once() {
    use cri_bridge::api::v1alpha2::{security_profile::ProfileType, LinuxContainerSecurityContext, SecurityProfile};
    let localhost =
        Some(SecurityProfile { profile_type: ProfileType::Localhost as i32, localhost_ref: "audit.json".into() });
    let parts = [
        LinuxContainerSecurityContext {
            seccomp: localhost,
            seccomp_profile_path: "localhost/audit.json".into(),
            ..Default::default()
        },
        LinuxContainerSecurityContext { seccomp_profile_path: "unconfined".into(), ..Default::default() },
    ];
    let request = split_request(Split::Config, &parts);
    let earlier = |n: usize| Loss {
        path: format!("earlier{n}"),
        field: format!("Earlier.f{n}").into(),
        reason: LossReason::NoField,
        more: 0,
    };
    let mut losses = vec![earlier(0)];
    scan_for_1_19("CreateContainerRequest", &request, &mut losses);
    assert_eq!(
        losses.iter().map(|l| (l.path.as_str(), l.more)).collect::<Vec<_>>(),
        [("earlier0", 0), ("config.#99", 0), ("config.linux.security_context.seccomp", 0)]
    );
    // A full record: the two losses of the merged walk count on the overflow entry, once each.
    let mut losses: Vec<Loss> = (0..cri_bridge::convert::MAX_DISTINCT).map(earlier).collect();
    losses.push(Loss { path: "…".into(), field: "…".into(), reason: LossReason::TooMany, more: 5 });
    scan_for_1_19("CreateContainerRequest", &request, &mut losses);
    assert_eq!(losses.len(), cri_bridge::convert::MAX_DISTINCT + 1);
    assert_eq!(losses.last().map(|l| (&l.reason, l.more)), Some((&LossReason::TooMany, 7)));
}

/// What a kubelet sets for a container with a memory limit, whether or not the node has swap: a
/// swap limit equal to the memory limit (cgroup v1) or `unified { memory.swap.max: "0" }`
/// (cgroup v2). For a runtime that predates both (containerd 1.4, the 1.19 revision) they change
/// nothing on a node without swap: reported as no effect here (the policy passes and counts it),
/// not as a loss. With swap on the node, or any other value, a loss as before.
#[test]
fn a_swap_limit_that_forbids_nothing_more_is_no_loss_on_a_node_without_swap() {
    use cri_bridge::api::v1alpha2::LinuxContainerResources;
    use cri_bridge::convert::policy::{Action, LossPolicy, Side};
    use prost::Message;
    let schema = V1alpha2.schema();
    let blocked = RuntimeProfile::from_version(V1alpha2, "containerd", "1.4.13", None).blocked(schema);
    let index = schema.message_index("LinuxContainerResources").unwrap();
    let scanned = |resources: &LinuxContainerResources, without_swap: bool| {
        let mut losses = Vec::new();
        let limits = Limits { unknown: true, blocked: Some(&blocked), minor: 19, without_swap };
        scan::scan(schema, index, &resources.encode_to_vec(), limits, &mut losses).unwrap();
        losses
    };
    let no_effect = |losses: &[Loss]| losses.iter().all(|l| matches!(l.reason, LossReason::NoEffectHere(_)));
    let policy = LossPolicy::default();
    let actions = |losses: &[Loss]| losses.iter().map(|l| policy.action(Side::Request, l)).collect::<Vec<_>>();
    let memory = 64 << 20;

    let equal = LinuxContainerResources {
        memory_limit_in_bytes: memory,
        memory_swap_limit_in_bytes: memory,
        ..Default::default()
    };
    let here = scanned(&equal, true);
    assert_eq!(here.iter().map(|l| l.path.as_str()).collect::<Vec<_>>(), ["memory_swap_limit_in_bytes"]);
    assert!(no_effect(&here), "{here:?}");
    assert_eq!(actions(&here), [Action::Allow]);
    let with_swap = scanned(&equal, false);
    assert!(matches!(with_swap[0].reason, LossReason::Blocked(Block::Revision { .. })), "{with_swap:?}");
    assert_eq!(actions(&with_swap), [Action::Reject]);

    // Unlimited swap: nothing to swap to either.
    let unlimited = LinuxContainerResources { memory_swap_limit_in_bytes: -1, ..equal.clone() };
    assert!(no_effect(&scanned(&unlimited, true)));
    // Swap beyond the memory limit is asked for, or a limit below it (an error natively): judged.
    for swap in [memory * 2, memory / 2] {
        let other = LinuxContainerResources { memory_swap_limit_in_bytes: swap, ..equal.clone() };
        let losses = scanned(&other, true);
        assert_eq!(actions(&losses), [Action::Reject], "swap {swap}: {losses:?}");
    }

    // cgroup v2: memory.swap.max = 0 is no effect here; any other entry is judged on its own.
    let unified = |entries: &[(&str, &str)]| LinuxContainerResources {
        unified: entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    let swap_off = scanned(&unified(&[("memory.swap.max", "0")]), true);
    assert!(no_effect(&swap_off) && swap_off.len() == 1, "{swap_off:?}");
    assert_eq!(actions(&scanned(&unified(&[("memory.swap.max", "0")]), false)), [Action::Reject]);
    let with_oom_group = scanned(&unified(&[("memory.swap.max", "0"), ("memory.oom.group", "1")]), true);
    let mut judged = actions(&with_oom_group);
    judged.sort_by_key(|a| format!("{a:?}"));
    // The swap entry passes, the OOM group entry is refused: so is the call.
    assert_eq!(judged, [Action::Allow, Action::Reject], "{with_oom_group:?}");

    // An override still decides: an operator who refuses the field gets it refused.
    let strict = LossPolicy::new(
        [("LinuxContainerResources.memory_swap_limit_in_bytes".to_string(), Action::Reject)].into_iter().collect(),
    );
    assert_eq!(strict.action(Side::Request, &here[0]), Action::Reject);
}
