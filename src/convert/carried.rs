//! What a set field that the runtime would not act on still means (`super::scan` asks): whether
//! its meaning reaches the runtime all the same (a deprecated string says the same, a user
//! namespace that is the node's), or whether on this node it changes nothing (a swap limit on a
//! node without swap). Either way no refusal is needed; the first is no loss at all, the second
//! is passed and counted.

use super::wire::{last_bytes, last_varint, Found};
use crate::api::{FieldInfo, MessageInfo};

/// A set field the runtime does not read, whose meaning reaches it all the same: a
/// `userns_options { mode: NODE }` without mappings (the kubelet sends it for every pod) asks for
/// what a runtime ignoring the field does anyway; a seccomp or AppArmor profile whose deprecated
/// string says the same is applied from the string by a runtime that reads only the string, and
/// a deprecated string beside its `SecurityProfile` is said by the message to a runtime that reads
/// only that. `message` is the whole message that holds the field.
pub(super) fn is_carried_anyway(info: &MessageInfo, field: &FieldInfo, value: &[u8], message: &[u8]) -> bool {
    match (info.name, field.name) {
        ("NamespaceOption", "userns_options") => crate::convert::userns_is_host(value),
        (context, profile) => super::exceptions::profile_carried_by_twin(context, profile, message),
    }
}

/// Why a set field the runtime would not act on changes nothing on this node, if it does not:
/// what the runtime does without it is what the field asks for here. The kubelet sends both of
/// these for every container with a memory limit, whether or not the node has swap:
///
/// - `LinuxContainerResources.memory_swap_limit_in_bytes` equal to the memory limit (no swap
///   beyond it; cgroup v1's `memory.memsw.limit_in_bytes`) or -1 (unlimited), on a node without
///   swap: there is nothing to swap to, with or without the limit. Any other value is judged
///   as a loss (a limit below the memory limit is an error the runtime would report).
/// - `LinuxContainerResources.unified`'s entry `memory.swap.max` = `0` (cgroup v2: no swap), on
///   a node without swap. Every other entry is judged on its own.
pub(super) fn no_effect_here(
    info: &MessageInfo,
    field: &FieldInfo,
    found: &Found<'_>,
    message: &[u8],
    without_swap: bool,
) -> Option<&'static str> {
    if !without_swap || info.name != "LinuxContainerResources" {
        return None;
    }
    match field.name {
        "memory_swap_limit_in_bytes" if found.wire_type == 0 => {
            let swap = found.varint as i64;
            let memory = info
                .fields
                .iter()
                .find(|f| f.name == "memory_limit_in_bytes")
                .and_then(|f| last_varint(message, f.number));
            (swap == -1 || Some(swap) == memory.map(|m| m as i64))
                .then_some("it forbids no more than the node allows: the node has no swap (SwapTotal: 0)")
        }
        "unified" if found.wire_type == 2 => {
            let (key, value) = (last_bytes(found.value, 1), last_bytes(found.value, 2));
            (key == Some(&b"memory.swap.max"[..]) && value == Some(&b"0"[..]))
                .then_some("memory.swap.max = 0 forbids swap, and the node has no swap (SwapTotal: 0)")
        }
        _ => None,
    }
}
