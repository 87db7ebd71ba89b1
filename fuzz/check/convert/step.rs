//! One route, one step: a conversion checked against the two schemas it goes between — what it
//! sends, the losses it reports, and what converting back gives.

use super::super::decode::Decoded;
use super::super::wire_gen::{schema, Msg};
use super::direction::{opposite, run_step, sides, Dir};
use super::schema_difference::{claimed, schema_losses};
use super::way_back::{expected_back, from_enum_loss};
use super::{complete, show};
use cri_bridge::convert::scan::{self, Limits};
use cri_bridge::convert::{Loss, LossReason, MAX_DISTINCT};
use cri_bridge::CriVersion;

const V1: CriVersion = CriVersion::V1;

pub(super) fn render(version: CriVersion, name: &str, msg: &Msg) -> String {
    let s = schema(version);
    s.render(s.index(name), msg)
}

pub(super) fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

/// Checks the conversion of message `name` from `from` to `to` that gave `output` and `losses`.
pub(super) fn check_route(
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
