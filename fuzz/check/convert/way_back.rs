//! What converting back must give: the input, except at the reported losses (each as it comes
//! back from an empty message, enum numbers as they are carried there and back) and where the
//! documented rules change it.

use super::super::wire_gen::{Field, Kind, Msg, Schema, Val};
use super::direction::{opposite, run_step, sides, Dir};
use super::schema_difference::{carry, enums_of};
use cri_bridge::convert::{Loss, LossReason};
use cri_bridge::CriVersion;

/// A loss of the way back that is expected: an enum number (of message `idx` of `from`) that
/// `to` cannot name either.
pub(super) fn from_enum_loss(from: &Schema, to: &Schema, idx: usize, loss: &Loss) -> bool {
    let LossReason::EnumValue(n) = loss.reason else { return false };
    let Ok(r) = from.resolve(idx, &loss.path) else { return false };
    enums_of(from, to, from.messages[r.owner].name, r.field.number).is_some_and(|(a, b)| carry(a, b, n).1)
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
pub(super) fn expected_back(
    old: CriVersion,
    dir: Dir,
    name: &str,
    input: &Msg,
    losses: &[Loss],
) -> Result<Msg, String> {
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

/// The v1alpha1 rules of docs/conversion.md that change a message on the way there and back without a
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
