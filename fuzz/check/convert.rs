//! `convert_request` and `convert_response`: what the forwarder does to one message, for every
//! RPC of every (frontend, backend) version pair and a runtime revision.
//!
//! Input: [`HEADER_LEN`] choice bytes (frontend version, backend version, RPC of the frontend
//! version, two bytes choosing the runtime: name and release, configured revision, features),
//! then the message. The steps are the forwarder's (`forward::plan`, `Forwarder::convert_request`
//! and `convert_response`), rebuilt from the crate's public parts: `Route`, `Cx`, `scan::scan`,
//! `Limits`, `RuntimeProfile`, `LossPolicy`.
//!
//! Invariants, beyond "no panic":
//! - passthrough (the same version on both sides) gives the bytes unchanged; a passthrough
//!   request the plan leaves unscanned holds nothing the loss policy would refuse;
//! - the conversion accepts exactly the bytes prost accepts (`decode.rs`, written apart);
//! - the scan of the caller's bytes reports exactly the unknown field numbers and undefined enum
//!   numbers that are there, at their paths (when the record did not overflow);
//! - what a step sends decodes in the target schema with no unknown field, is prost's canonical
//!   encoding, has consistent seccomp/AppArmor pairs, and scans without error; an undefined enum
//!   number in it is one the step reported; the runtime's scan of it (revision, features) works;
//! - the losses reported are exactly the fields that differ: those of the schema difference
//!   (fields the target lacks, enum values it cannot name, non-UTF-8 bytes for a string), and
//!   converting back gives the input except exactly at the reported losses, modulo the README's
//!   documented rules (namespace defaults, seccomp/AppArmor reconciliation, the host user
//!   namespace, v1alpha1 `info` values as JSON);
//! - a route through v1 is its two steps; the loss count equals what the record holds;
//! - the loss record keeps its shape, and the policy judges it without panicking.

use super::decode::{self, Decoded};
use super::wire_gen::{schema, EnumDesc, Field, Kind, Msg, Schema, Val};
use super::{version, version_choice, Choices};
use cri_bridge::api::RpcInfo;
use cri_bridge::convert::policy::{Action, LossPolicy, Side};
use cri_bridge::convert::rules::RULES;
use cri_bridge::convert::scan::{self, Limits};
use cri_bridge::convert::{transcoders, Cx, Loss, LossReason, Route, Transcoder, MAX_DISTINCT};
use cri_bridge::grpc::Rpc;
use cri_bridge::revision::{self, Features, RuntimeProfile};
use cri_bridge::CriVersion;
use std::collections::HashMap;

const V1: CriVersion = CriVersion::V1;

/// Frontend, backend, RPC, and two bytes for the runtime.
pub const HEADER_LEN: usize = 5;

/// From this revision `ContainerEventResponse` #4 is a `PodSandboxStatus` (`forward/mod.rs`).
const EVENT_STATUS_SINCE: u8 = 26;

/// The header that selects `method` of `frontend` against `backend` (for writing seeds).
pub fn header(frontend: CriVersion, backend: CriVersion, method: &str, runtime: [u8; 2]) -> Option<[u8; HEADER_LEN]> {
    let rpc = frontend.schema().rpcs.iter().position(|r| r.method == method)?;
    Some([version_choice(frontend), version_choice(backend), u8::try_from(rpc).ok()?, runtime[0], runtime[1]])
}

struct Case {
    frontend: CriVersion,
    backend: CriVersion,
    rpc: Rpc,
    profile: RuntimeProfile,
}

fn read_case(input: &mut Choices<'_>) -> Case {
    let frontend = version(input.u8());
    let backend = version(input.u8());
    let rpcs = frontend.schema().rpcs;
    let info: &'static RpcInfo = &rpcs[usize::from(input.u8()) % rpcs.len()];
    let (a, b) = (input.u8(), input.u8());
    Case { frontend, backend, rpc: Rpc { version: frontend, info }, profile: profile(backend, a, b) }
}

/// A runtime of `backend`: low three bits of `a` its name and release, bit 3 whether it reported
/// features and bits 4–6 which; `b` with its top bit set configures a revision from the version's
/// oldest to two past the schema's newest.
fn profile(backend: CriVersion, a: u8, b: u8) -> RuntimeProfile {
    const RUNTIMES: [(&str, &str); 6] = [
        ("containerd", "v1.7.24"),
        ("containerd", "v1.6.20"),
        ("containerd", "v1.4.13"),
        ("cri-o", "1.25.0"),
        (cri_bridge::memory::RUNTIME_NAME, "0.1.0"),
        ("a-runtime-nobody-knows", "0.0.1"),
    ];
    let (name, release) = RUNTIMES[usize::from(a & 7) % RUNTIMES.len()];
    let (oldest, newest) = (revision::oldest(backend), revision::newest(backend));
    let configured = (b & 0x80 != 0).then(|| oldest + (b & 0x7f) % (newest - oldest + 3));
    let mut profile = RuntimeProfile::from_version(backend, name, release, configured);
    if a & 0x08 != 0 {
        profile.features = Some(Features {
            user_namespaces: a & 0x10 != 0,
            recursive_read_only_mounts: a & 0x20 != 0,
            supplemental_groups_policy: a & 0x40 != 0,
            mount_options: (a ^ b) & 0x01 != 0,
        });
    }
    profile
}

fn describe(case: &Case, message: &str) -> String {
    format!("{} {} → {} ({message}, runtime {})", case.rpc.name(), case.frontend, case.backend, case.profile)
}

fn show(losses: &[Loss]) -> String {
    let v: Vec<String> =
        losses.iter().map(|l| format!("{} [{}] {:?} +{}", l.path, l.field, l.reason, l.more)).collect();
    format!("[{}]", v.join(", "))
}

/// No entry stands for more than one loss: every loss is there with its path.
fn complete(losses: &[Loss]) -> bool {
    losses.iter().all(|l| l.reason != LossReason::TooMany && l.more == 0)
}

/// One record's shape (`loss::record`): at most `MAX_DISTINCT` named entries, then at most one
/// `TooMany`, last.
fn check_record(losses: &[Loss]) -> Result<(), String> {
    let overflow: Vec<usize> =
        losses.iter().enumerate().filter(|(_, l)| l.reason == LossReason::TooMany).map(|(i, _)| i).collect();
    let well_formed = match overflow[..] {
        [] => losses.len() <= MAX_DISTINCT,
        [at] => at == MAX_DISTINCT && losses.len() == MAX_DISTINCT + 1,
        _ => false,
    };
    let more_before_full = losses.len() < MAX_DISTINCT && losses.iter().any(|l| l.more > 0);
    if !well_formed || more_before_full {
        return Err(format!("a misshapen loss record: {}", show(losses)));
    }
    Ok(())
}

/// A record's count of losses: every entry is one, plus the repeats it stands for.
fn counted(losses: &[Loss]) -> usize {
    losses.iter().map(|l| 1 + l.more as usize).sum()
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

pub fn request(data: &[u8]) {
    let mut input = Choices::new(data);
    let case = read_case(&mut input);
    let body = input.rest();
    let info = case.rpc.info;
    // `forward::plan`: an RPC the backend's version lacks is answered UNIMPLEMENTED.
    if case.rpc.in_version(case.backend).is_none() {
        return;
    }
    let route = Route::new(info.request, case.frontend, case.backend)
        .unwrap_or_else(|| panic!("{}: no route for a shared RPC", describe(&case, info.request)));
    let request_index = case.frontend.schema().message_index(info.request).expect("request in its schema");
    let backend_schema = case.backend.schema();
    let backend_index = backend_schema.message_index(info.request).unwrap_or(request_index);
    let scan_passthrough = scan::worth_scanning(case.backend, backend_index);
    let blocked = case.profile.blocked(backend_schema);
    let runtime =
        Limits { unknown: !case.profile.is_newer_than_schema(), blocked: Some(&blocked), minor: case.profile.minor };
    let policy = LossPolicy::new(HashMap::new());
    let fail = |why: String| -> ! { panic!("{}: {why}", describe(&case, info.request)) };

    if route.is_identity() {
        if case.frontend != case.backend {
            fail("an identity route between two versions".into());
        }
        let passed = route.run(body, &mut Cx::new()).unwrap_or_else(|e| fail(format!("passthrough failed: {e}")));
        if passed != body {
            fail("passthrough changed the bytes".into());
        }
        let mut losses = Vec::new();
        let scanned = scan::scan(backend_schema, backend_index, body, runtime, &mut losses);
        if scanned.is_ok() {
            check_record(&losses).unwrap_or_else(|e| fail(e));
            if !scan_passthrough {
                // The plan skips the scan: it must not skip a field the policy would refuse. (Past
                // the bound the record counts the rest in one entry, which is refused whole; the
                // fields it stands for are judged like the named ones.)
                let refused = losses
                    .iter()
                    .filter(|l| l.reason != LossReason::TooMany)
                    .find(|l| policy.action(Side::Request, l) == Action::Reject);
                if let Some(l) = refused {
                    fail(format!(
                        "an unscanned passthrough request carries a refused loss: {} ({:?})",
                        l.path, l.reason
                    ));
                }
            }
            let _ = policy.apply(Side::Request, &case.rpc.name(), &case.profile, losses).map_err(|r| r.to_string());
        }
        return;
    }

    let mut losses = Vec::new();
    let source = scan::scan(case.frontend.schema(), request_index, body, Limits::UNKNOWN_ONLY, &mut losses);
    let decoded = decode::decode(schema(case.frontend), schema(case.frontend).index(info.request), body);
    let mut cx = Cx::new();
    let converted = route.run(body, &mut cx);
    let decoded = match (decoded, &converted) {
        (Ok(d), Ok(_)) => d,
        (Err(_), Err(_)) => return,
        (Ok(_), Err(e)) => fail(format!("the conversion refuses bytes prost decodes: {e}")),
        (Err(e), Ok(_)) => fail(format!("the conversion accepts bytes that do not decode: {e}")),
    };
    if let Err(e) = &source {
        // The forwarder refuses the request here; prost would skip an unknown group, which
        // the scan does not read.
        if !decoded.groups {
            fail(format!("the scan refuses bytes prost decodes: {e}"));
        }
        return;
    }
    check_record(&losses).unwrap_or_else(|e| fail(format!("caller's scan: {e}")));
    check_notes(&losses, &decoded).unwrap_or_else(|e| fail(e));

    let converted = converted.expect("checked above");
    if cx.loss_count() != counted(cx.losses()) {
        fail(format!("{} losses counted, the record holds {}", cx.loss_count(), counted(cx.losses())));
    }
    let conversion = cx.into_losses();
    check_record(&conversion).unwrap_or_else(|e| fail(format!("conversion: {e}")));
    check_route(case.frontend, case.backend, info.request, &decoded, body, &converted, &conversion).unwrap_or_else(
        |e| fail(format!("{e}\n  input:\n{}", indent(&render(case.frontend, info.request, &decoded.msg)))),
    );

    // What the runtime would not act on, in what it receives.
    losses.extend(conversion);
    let after = Limits { unknown: false, ..runtime };
    let start = losses.len();
    if let Err(e) = scan::scan(backend_schema, backend_index, &converted, after, &mut losses) {
        fail(format!("the converted request does not scan: {e}"));
    }
    if let Some(l) = losses[start..].iter().find(|l| !matches!(l.reason, LossReason::Blocked(_) | LossReason::TooMany))
    {
        fail(format!("the runtime's scan of converted bytes reported {} {:?}", l.path, l.reason));
    }
    let _ = policy.apply(Side::Request, &case.rpc.name(), &case.profile, losses).map_err(|r| r.to_string());
}

/// The caller's scan (`UNKNOWN_ONLY`) reports what the independent decoder noted, in order.
fn check_notes(losses: &[Loss], decoded: &Decoded) -> Result<(), String> {
    if !complete(losses) {
        return Ok(());
    }
    let reported: Vec<String> = losses
        .iter()
        .map(|l| match l.reason {
            LossReason::UnknownField => format!("{} [{}] unknown", l.path, l.field),
            LossReason::EnumValue(n) => format!("{} [{}] enum {n}", l.path, l.field),
            ref other => format!("{} [{}] {other:?}", l.path, l.field),
        })
        .collect();
    let noted: Vec<String> = decoded
        .notes
        .iter()
        .map(|n| match n.enum_value {
            None => format!("{} [{}] unknown", n.path, n.field),
            Some(v) => format!("{} [{}] enum {v}", n.path, n.field),
        })
        .collect();
    if reported != noted {
        return Err(format!("the scan reported {reported:?}\n  but the bytes hold {noted:?}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

pub fn response(data: &[u8]) {
    let mut input = Choices::new(data);
    let case = read_case(&mut input);
    let mut body = input.rest().to_vec();
    let info = case.rpc.info;
    if case.rpc.in_version(case.backend).is_none() {
        return;
    }
    let fail = |why: String| -> ! { panic!("{}: {why}", describe(&case, info.response)) };
    let route = Route::new(info.response, case.backend, case.frontend)
        .unwrap_or_else(|| fail("no route for a shared RPC".into()));

    if info.method == "GetContainerEvents" && case.profile.minor < EVENT_STATUS_SINCE {
        // `Forwarder::convert_old_event`: #4 (a 1.25 PodSandboxMetadata) is left out.
        let Ok((kept, dropped)) = scan::without_field(&body, 4) else { return };
        check_without(&body, &kept, dropped, 4).unwrap_or_else(|e| fail(e));
        body = kept;
    }
    if route.is_identity() {
        let passed = route.run(&body, &mut Cx::counting()).unwrap_or_else(|e| fail(format!("passthrough: {e}")));
        if passed != body {
            fail("passthrough changed the bytes".into());
        }
        return;
    }

    let mut counting = Cx::counting();
    let counted_run = route.run(&body, &mut counting);
    let mut cx = Cx::new();
    let converted = route.run(&body, &mut cx);
    let from = schema(case.backend);
    let decoded = decode::decode(from, from.index(info.response), &body);
    let decoded = match (decoded, &converted, &counted_run) {
        (Ok(d), Ok(_), Ok(_)) => d,
        (Err(_), Err(_), Err(_)) => return,
        (d, c, n) => fail(format!(
            "prost decodes: {}, the conversion: {}, the counting conversion: {}",
            d.is_ok(),
            c.is_ok(),
            n.is_ok()
        )),
    };
    let converted = converted.expect("checked above");
    if counting.loss_count() != cx.loss_count() || cx.loss_count() != counted(cx.losses()) {
        fail(format!(
            "the counting context counted {}, the recording one {} and its record holds {}",
            counting.loss_count(),
            cx.loss_count(),
            counted(cx.losses())
        ));
    }
    let to = schema(case.frontend);
    let idx = to.index(info.response);
    let same = to.decode(idx, &counted_run.expect("checked above")).ok() == to.decode(idx, &converted).ok();
    if !same {
        fail("the counting and the recording conversions give different answers".into());
    }
    let losses = cx.into_losses();
    check_record(&losses).unwrap_or_else(|e| fail(e));
    check_route(case.backend, case.frontend, info.response, &decoded, &body, &converted, &losses).unwrap_or_else(|e| {
        fail(format!("{e}\n  input:\n{}", indent(&render(case.backend, info.response, &decoded.msg))))
    });
}

/// `scan::without_field`: the top-level fields but `number`, as they came.
fn check_without(body: &[u8], kept: &[u8], dropped: bool, number: u32) -> Result<(), String> {
    let mut rest = body;
    let mut expected = Vec::new();
    let mut found = false;
    while !rest.is_empty() {
        let before = rest;
        // (The scan steps over a few encodings prost refuses, such as a 10-byte varint past 64
        // bits; the conversion then refuses them. Only what prost reads is compared.)
        let Ok((n, wire)) = prost::encoding::decode_key(&mut rest) else { return Ok(()) };
        if prost::encoding::skip_field(wire, n, &mut rest, Default::default()).is_err() {
            return Ok(());
        }
        if n == number {
            found = true;
        } else {
            expected.extend_from_slice(&before[..before.len() - rest.len()]);
        }
    }
    if kept != expected || dropped != found {
        return Err(format!(
            "without_field({number}) kept {kept:?} (dropped {dropped}), expected {expected:?} ({found})"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// One route, one step
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// From the older version to v1.
    Up,
    /// From v1 to the older version.
    Down,
}

fn sides(old: CriVersion, dir: Dir) -> (&'static Schema, &'static Schema) {
    match dir {
        Dir::Up => (schema(old), schema(V1)),
        Dir::Down => (schema(V1), schema(old)),
    }
}

fn transcoder(old: CriVersion, name: &str) -> Result<&'static Transcoder, String> {
    transcoders(old).iter().find(|t| t.message == name).ok_or_else(|| format!("no {old} transcoder for {name}"))
}

fn run_step(old: CriVersion, dir: Dir, name: &str, bytes: &[u8]) -> Result<(Vec<u8>, Vec<Loss>), String> {
    let t = transcoder(old, name)?;
    let step = match dir {
        Dir::Up => t.to_v1,
        Dir::Down => t.from_v1,
    };
    let mut cx = Cx::new();
    let out = step(bytes, &mut cx).map_err(|e| format!("{dir:?} step of {old} {name}: {e}"))?;
    Ok((out, cx.into_losses()))
}

fn render(version: CriVersion, name: &str, msg: &Msg) -> String {
    let s = schema(version);
    s.render(s.index(name), msg)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

/// Checks the conversion of message `name` from `from` to `to` that gave `output` and `losses`.
fn check_route(
    from: CriVersion,
    to: CriVersion,
    name: &str,
    input: &Decoded,
    bytes: &[u8],
    output: &[u8],
    losses: &[Loss],
) -> Result<(), String> {
    match (from, to) {
        (old, V1) => check_step(old, Dir::Up, name, &input.msg, output, losses),
        (V1, old) => check_step(old, Dir::Down, name, &input.msg, output, losses),
        (a, b) => {
            let (mid, up_losses) = run_step(a, Dir::Up, name, bytes)?;
            check_step(a, Dir::Up, name, &input.msg, &mid, &up_losses).map_err(|e| format!("{a} → v1: {e}"))?;
            let v1 = schema(V1);
            let mid_tree = v1.decode(v1.index(name), &mid)?;
            let (down, down_losses) = run_step(b, Dir::Down, name, &mid)?;
            check_step(b, Dir::Down, name, &mid_tree, &down, &down_losses).map_err(|e| format!("v1 → {b}: {e}"))?;
            let target = schema(b);
            let idx = target.index(name);
            if target.decode(idx, output)? != target.decode(idx, &down)? {
                return Err(format!("the route {a} → {b} is not its two steps through v1"));
            }
            let steps: Vec<Loss> = up_losses.iter().chain(&down_losses).cloned().collect();
            if steps.len() <= MAX_DISTINCT && complete(&steps) && losses != steps.as_slice() {
                return Err(format!("the route reported {}, its steps {}", show(losses), show(&steps)));
            }
            Ok(())
        }
    }
}

/// One step between `old` and v1, of message `name`: `input` the tree it was given, `output` and
/// `losses` what it gave.
fn check_step(
    old: CriVersion,
    dir: Dir,
    name: &str,
    input: &Msg,
    output: &[u8],
    losses: &[Loss],
) -> Result<(), String> {
    let (from, to) = sides(old, dir);
    let (from_idx, to_idx) = (from.index(name), to.index(name));

    // What is sent fits the target schema, canonically, with consistent profile pairs.
    let sent = to.decode(to_idx, output).map_err(|e| format!("the output does not decode as {}: {e}", to.version))?;
    if !sent.has_unordered_map() && to.encode(to_idx, &sent) != output {
        return Err("the output is not prost's canonical encoding".into());
    }
    let mut reconciled = sent.clone();
    to.reconcile_profiles(to_idx, &mut reconciled);
    if reconciled != sent {
        let at = to.first_difference(to_idx, &reconciled, &sent).unwrap_or_default();
        return Err(format!("the output has an inconsistent seccomp/AppArmor pair at {at}"));
    }
    let table = to.info.message_index(name).ok_or("message not in the schema table")?;
    let mut found = Vec::new();
    scan::scan(to.info, table, output, Limits::UNKNOWN_ONLY, &mut found)
        .map_err(|e| format!("the output does not scan: {e}"))?;
    for f in &found {
        let reported = losses.iter().any(|l| l.path == f.path && l.reason == f.reason);
        match f.reason {
            LossReason::EnumValue(_) if reported || !complete(losses) => {}
            _ => return Err(format!("the output holds {} ({:?}), which the step did not report", f.path, f.reason)),
        }
    }

    if !complete(losses) {
        // Past the bound only the named entries can be checked.
        for l in losses.iter().filter(|l| l.reason != LossReason::TooMany) {
            let r = from.resolve(from_idx, &l.path)?;
            if l.field != format!("{}.{}", from.messages[r.owner].name, r.field.name) {
                return Err(format!("loss {} names field {}", l.path, l.field));
            }
        }
        return Ok(());
    }

    // The losses are the schema difference (for the fields no hand-written rule converts).
    let claimed = claimed(old, dir);
    let mut expected = Vec::new();
    schema_losses(from, to, from_idx, to_idx, input, "", &claimed, &mut expected)?;
    expected.sort();
    let mut actual: Vec<String> = losses
        .iter()
        .filter(|l| !claimed.iter().any(|(m, f)| l.field == format!("{m}.{f}")))
        .map(|l| format!("{} [{}] {:?}", l.path, l.field, l.reason))
        .collect();
    actual.sort();
    if actual != expected {
        let missing: Vec<&String> = expected.iter().filter(|e| !actual.contains(e)).collect();
        let extra: Vec<&String> = actual.iter().filter(|a| !expected.contains(a)).collect();
        return Err(format!(
            "the losses are not the schema difference\n  not reported: {missing:?}\n  reported but not lost: {extra:?}"
        ));
    }

    // Back again: the input, except exactly at the losses.
    let (back, back_losses) = run_step(old, opposite(dir), name, output)?;
    for l in &back_losses {
        let lost_again = from_enum_loss(to, from, to_idx, l);
        if !lost_again {
            return Err(format!("the way back reported {}", show(&back_losses)));
        }
    }
    let expected = expected_back(old, dir, name, input, losses)?;
    let returned = from.decode(from_idx, &back).map_err(|e| format!("the way back does not decode: {e}"))?;
    if returned != expected {
        let at = from.first_difference(from_idx, &expected, &returned).unwrap_or_default();
        return Err(format!(
            "there and back differs at {at}\n  losses: {}\n  expected:\n{}  got:\n{}",
            show(losses),
            indent(&from.render(from_idx, &expected)),
            indent(&from.render(from_idx, &returned))
        ));
    }
    Ok(())
}

fn opposite(dir: Dir) -> Dir {
    match dir {
        Dir::Up => Dir::Down,
        Dir::Down => Dir::Up,
    }
}

/// A loss of the way back that is expected: an enum number (of message `idx` of `from`) that
/// `to` cannot name either.
fn from_enum_loss(from: &Schema, to: &Schema, idx: usize, loss: &Loss) -> bool {
    let LossReason::EnumValue(n) = loss.reason else { return false };
    let Ok(r) = from.resolve(idx, &loss.path) else { return false };
    enums_of(from, to, from.messages[r.owner].name, r.field.number).is_some_and(|(a, b)| carry(a, b, n).1)
}

/// The fields that hand-written rules convert (`rules::RULES`), on the side a step reads.
fn claimed(old: CriVersion, dir: Dir) -> Vec<(&'static str, &'static str)> {
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

/// Enum number `n` of `from` in `to`, and whether that is a loss, as the README states it: the
/// value of the same name; a number `from` does not name but `to` does stays (CRI never
/// renumbered a value); anything else is lost and becomes `to`'s UNKNOWN/NOTREADY value where
/// it has one (an unknown state must not read as a real one), else keeps its number.
fn carry(from: &EnumDesc, to: &EnumDesc, n: i32) -> (i32, bool) {
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
fn enums_of<'a>(a: &'a Schema, b: &'a Schema, owner: &str, number: u32) -> Option<(&'a EnumDesc, &'a EnumDesc)> {
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
fn schema_losses(
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

/// What field `number` of `owner` becomes on the way back when the way there could not carry it:
/// its value in the way back of an empty message (for nearly every field, unset).
fn what_comes_back(old: CriVersion, dir: Dir, owner: &str, number: u32) -> Result<Option<Field>, String> {
    let (back_schema, _) = sides(old, dir);
    let (back, _) = run_step(old, opposite(dir), owner, &[])?;
    Ok(back_schema.decode(back_schema.index(owner), &back)?.fields.remove(&number))
}

fn set_enum(parent: &mut Msg, number: u32, value: i32) {
    if value == 0 {
        parent.fields.remove(&number);
    } else {
        parent.fields.insert(number, Field::One(Val::Varint(value as i64 as u64)));
    }
}

/// The input as it must come back: each loss as `what_comes_back` (enum numbers as `carry`
/// takes them there and back), then the documented rules.
fn expected_back(old: CriVersion, dir: Dir, name: &str, input: &Msg, losses: &[Loss]) -> Result<Msg, String> {
    let (from, to) = sides(old, dir);
    let idx = from.index(name);
    let mut expected = input.clone();
    for loss in losses {
        let r = from.resolve(idx, &loss.path)?;
        let owner = from.messages[r.owner].name;
        let number = r.field.number;
        if loss.field != format!("{owner}.{}", r.field.name) {
            return Err(format!("loss {} names field {}", loss.path, loss.field));
        }
        if input.message_at(&r.parent).is_none() {
            return Err(format!("loss {} under a message that is not set", loss.path));
        }
        let parent = expected.message_at_mut(&r.parent).ok_or_else(|| format!("loss {}: no parent", loss.path))?;
        let before = parent.fields.get(&number).cloned();
        if let (LossReason::EnumValue(n), Some((a, b))) = (&loss.reason, enums_of(from, to, owner, number)) {
            if !matches!(before, Some(Field::One(Val::Varint(v))) if v as i32 == *n) {
                return Err(format!("loss {} of enum value {n}, which is not there", loss.path));
            }
            set_enum(parent, number, carry(b, a, carry(a, b, *n).0).0);
            continue;
        }
        match what_comes_back(old, dir, owner, number)? {
            Some(f) => parent.fields.insert(number, f),
            None => parent.fields.remove(&number),
        };
        if parent.fields.get(&number) == before.as_ref() {
            return Err(format!("loss {} reported, but the field comes back as it was", loss.path));
        }
    }
    if old == CriVersion::V1alpha1 {
        from.for_each_nested(idx, &mut expected, &mut |s, i, m| v1alpha1_rules(s, i, m, dir));
    }
    from.reconcile_profiles(idx, &mut expected);
    Ok(expected)
}

/// The v1alpha1 rules of the README that change a message on the way there and back without a
/// loss, on node `m` (message `idx` of `s`, the side the step started from):
/// - pod and container configs: an absent v1alpha1 `NamespaceOption` means private namespaces,
///   written out going up; so it comes back (up: present, all `false`; down: the private modes,
///   pid CONTAINER, where the v1 request left it out);
/// - `NamespaceOption.userns_options { mode: NODE }` without mappings is what v1alpha1 does
///   anyway: left out going down, not lost;
/// - a seccomp or AppArmor profile goes down as its string, which names a reference only for
///   Localhost: another type's `localhost_ref` (meaningless, "set if and only if Localhost")
///   does not come back;
/// - `StatusResponse.info` values that are not JSON become JSON strings.
fn v1alpha1_rules(s: &Schema, idx: usize, m: &mut Msg, dir: Dir) {
    let field = |i: usize, name: &str| s.field_by_name(i, name).map(|f| (f.number, f.kind));
    match s.messages[idx].name {
        "PodSandboxConfig" | "ContainerConfig" => {
            let mut node = m;
            let mut at = idx;
            for step in ["linux", "security_context"] {
                let Some((number, Kind::Message(sub))) = field(at, step) else { return };
                let entry = node.fields.entry(number).or_insert_with(|| Field::One(Val::Msg(Msg::default())));
                let Field::One(Val::Msg(inner)) = entry else { return };
                node = inner;
                at = sub;
            }
            let Some((number, Kind::Message(options))) = field(at, "namespace_options") else { return };
            if node.fields.contains_key(&number) {
                return;
            }
            let mut private = Msg::default();
            if dir == Dir::Down {
                if let Some((pid, Kind::Enum(e))) = field(options, "pid") {
                    let container = s.enums[e].value_number("CONTAINER").unwrap_or(0);
                    set_enum(&mut private, pid, container);
                }
            }
            node.fields.insert(number, Field::One(Val::Msg(private)));
        }
        "NamespaceOption" if dir == Dir::Down => {
            let Some((number, Kind::Message(userns))) = field(idx, "userns_options") else { return };
            let Some(Field::One(Val::Msg(u))) = m.fields.get(&number) else { return };
            let is_node = match field(userns, "mode") {
                Some((mode, Kind::Enum(e))) => {
                    let node = s.enums[e].value_number("NODE");
                    matches!((node, u.fields.get(&mode)), (Some(n), Some(Field::One(Val::Varint(v)))) if *v as i32 == n)
                }
                _ => false,
            };
            let mapped =
                ["uids", "gids"].iter().any(|f| field(userns, f).is_some_and(|(n, _)| u.fields.contains_key(&n)));
            if is_node && !mapped {
                m.fields.remove(&number);
            }
        }
        "SecurityProfile" if dir == Dir::Down => {
            // v1alpha1 carries a profile as its string, which has no reference but Localhost's.
            let (Some((kind, Kind::Enum(e))), Some((reference, _))) =
                (field(idx, "profile_type"), field(idx, "localhost_ref"))
            else {
                return;
            };
            let number = match m.fields.get(&kind) {
                Some(Field::One(Val::Varint(v))) => *v as i32,
                _ => 0,
            };
            if s.enums[e].value_name(number).is_some_and(|name| name != "Localhost") {
                m.fields.remove(&reference);
            }
        }
        "StatusResponse" => {
            let Some((number, Kind::Map)) = field(idx, "info") else { return };
            if let Some(Field::Map(entries)) = m.fields.get_mut(&number) {
                for value in entries.values_mut() {
                    if serde_json::from_str::<serde::de::IgnoredAny>(value).is_err() {
                        *value = serde_json::Value::String(std::mem::take(value)).to_string();
                    }
                }
            }
        }
        _ => {}
    }
}
