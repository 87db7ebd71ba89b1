//! Every entry of the classification table, end to end: for each target that lacks the field (an
//! older version, or an older revision of the same one), a v1 request with only that field set
//! goes through cri-bridge to the in-memory runtime. Security and behaviour fields must come back
//! UNIMPLEMENTED naming the field, with the runtime never called; advisory ones must reach
//! the runtime. Enum fields are also sent an undefined number, which every target lacks.

mod common;
#[path = "support/wire_gen.rs"]
mod wire_gen;

use bytes::Bytes;
use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::convert::classes::{Class, FIELDS};
use cri_bridge::grpc::{CriClient, Rpc};
use cri_bridge::CriVersion::{self, V1alpha1, V1alpha2, V1};
use std::collections::{HashMap, VecDeque};
use tonic::{Code, Request};
use wire_gen::{schema, Field, Kind, Msg, Val};

/// Fields whose meaning older targets carry in another form: a profile the deprecated string
/// expresses (`runtime/default`, `unconfined`, `localhost/…`). The pod-level AppArmor profile
/// has no string, so it is not here.
const CARRIED_OTHERWISE: &[&str] = &[
    "LinuxContainerSecurityContext.apparmor",
    "LinuxContainerSecurityContext.seccomp",
    "LinuxSandboxSecurityContext.seccomp",
];

/// A target: a runtime of `version` at `revision` behind cri-bridge.
struct Target {
    name: String,
    version: CriVersion,
    revision: u8,
    runtime: Runtime,
    bridge: Bridge,
    _dir: TempDir,
}

async fn target(version: CriVersion, revision: u8) -> Target {
    let dir = TempDir::new(&format!("defaults-{version}-{revision}"));
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[version]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.backend_revision = Some(revision);
    let bridge = Bridge::start(config).await;
    // The first call probes: done before anything is counted.
    let client = CriClient::new(channel(&bridge.socket), 1 << 20);
    let version_rpc = Rpc::from_path("/runtime.v1.RuntimeService/Version").unwrap();
    client.unary(version_rpc, Request::new(Bytes::new())).await.unwrap();
    Target { name: format!("{version}@1.{revision}"), version, revision, runtime, bridge, _dir: dir }
}

impl Target {
    /// Whether this target can hold `message.field` (by name) at its revision.
    fn has(&self, message: &str, field: &str) -> bool {
        let schema = self.version.schema();
        let Some(index) = schema.message_index(message) else { return false };
        schema.messages[index].fields.iter().any(|f| f.name == field && f.since <= self.revision)
    }
}

/// The shortest chain of message fields from some RPC's request to `message`: the RPC path and
/// the (owner message index, field number) steps.
fn path_to(message: &str) -> Option<(String, Vec<(usize, u32)>)> {
    let s = schema(V1);
    let target = s.index(message);
    let mut best: Option<(String, Vec<(usize, u32)>)> = None;
    for rpc in s.info.rpcs {
        let root = s.index(rpc.request);
        let mut seen: HashMap<usize, Vec<(usize, u32)>> = HashMap::from([(root, Vec::new())]);
        let mut queue = VecDeque::from([root]);
        while let Some(current) = queue.pop_front() {
            if current == target {
                let steps = seen[&current].clone();
                if best.as_ref().is_none_or(|(_, b)| steps.len() < b.len()) {
                    best = Some((format!("/runtime.v1.{}/{}", rpc.service, rpc.method), steps));
                }
                break;
            }
            for f in &s.messages[current].fields {
                if let Kind::Message(next) = f.kind {
                    if !seen.contains_key(&next) {
                        let mut steps = seen[&current].clone();
                        steps.push((current, f.number));
                        seen.insert(next, steps);
                        queue.push_back(next);
                    }
                }
            }
        }
    }
    best
}

/// A set, non-default value of a field (an enum gets `enum_number`).
fn value(kind: Kind, enum_number: i32) -> Val {
    match kind {
        Kind::String | Kind::Bytes => Val::Bytes(b"x".to_vec()),
        Kind::Double => Val::F64(1.5f64.to_bits()),
        Kind::Enum(_) => Val::Varint(enum_number as i64 as u64),
        Kind::Message(_) => Val::Msg(Msg::default()),
        Kind::Map => unreachable!("maps are built as Field::Map"),
        _ => Val::Varint(1),
    }
}

/// The request bytes with only `message.field` set (and the messages leading to it).
fn request_with(message: &str, field: &str, enum_number: i32) -> (String, Vec<u8>) {
    let s = schema(V1);
    let (rpc, steps) = path_to(message).unwrap_or_else(|| panic!("{message} is in no request"));
    let owner = s.index(message);
    let fd = s.field_by_name(owner, field).unwrap_or_else(|| panic!("{message}.{field} is not a v1 field"));
    let set = match fd.kind {
        Kind::Map => Field::Map([("k".to_string(), "v".to_string())].into()),
        kind if fd.repeated => Field::Many(vec![value(kind, enum_number)]),
        kind => Field::One(value(kind, enum_number)),
    };
    let mut msg = Msg::default();
    msg.fields.insert(fd.number, set);
    for (parent, number) in steps.iter().rev() {
        let step = s.field(*parent, *number).unwrap();
        let mut outer = Msg::default();
        let nested = Val::Msg(msg);
        outer.fields.insert(*number, if step.repeated { Field::Many(vec![nested]) } else { Field::One(nested) });
        msg = outer;
    }
    let root = s.index(steps.first().map_or(message, |(p, _)| s.messages[*p].name));
    (rpc, s.encode(root, &msg))
}

/// A defined, non-zero value of an enum field (its largest), or 1.
fn defined_value(message: &str, field: &str) -> i32 {
    let s = schema(V1);
    match s.field_by_name(s.index(message), field).map(|f| f.kind) {
        Some(Kind::Enum(e)) => s.enums[e].values.iter().map(|(_, n)| *n).max().unwrap_or(1),
        _ => 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_classified_field_gets_its_default_on_every_target_that_lacks_it() {
    let targets =
        [target(V1alpha1, 9).await, target(V1alpha2, 10).await, target(V1alpha2, 19).await, target(V1, 20).await];
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in FIELDS {
        let (message, field) = entry.field.split_once('.').unwrap();
        if schema(V1).info.message_index(message).is_none() {
            continue;
        }
        let is_enum =
            matches!(schema(V1).field_by_name(schema(V1).index(message), field).map(|f| f.kind), Some(Kind::Enum(_)));
        let mut cases = vec![(defined_value(message, field), false)];
        if is_enum {
            cases.push((99, true));
        }
        for t in &targets {
            let (rpc_path, steps) = path_to(message).unwrap();
            // Only where the field itself is what is lost: every message on the way is there.
            let s = schema(V1);
            let reachable = steps.iter().all(|(owner, number)| {
                let owner_name = s.messages[*owner].name;
                t.has(owner_name, s.field(*owner, *number).unwrap().name)
            });
            if !reachable {
                continue;
            }
            for (number, undefined) in &cases {
                if t.has(message, field) && !undefined {
                    continue;
                }
                let (_, body) = request_with(message, field, *number);
                let client = CriClient::new(channel(&t.bridge.socket), 1 << 20);
                // The case's own RPC: a discovery probe (Version, Status) may come in any case,
                // when a connection is made after the discovery was forgotten.
                let before = t.runtime.memory.calls_of(&rpc_path);
                let answer = client.unary(Rpc::from_path(&rpc_path).unwrap(), Request::new(body.into())).await;
                let reached = t.runtime.memory.calls_of(&rpc_path) > before;
                let refused = matches!(&answer, Err(s) if s.code() == Code::Unimplemented
                    && s.message().contains("refused by the loss policy"));
                let named = matches!(&answer, Err(s) if s.message().contains(field));
                let case = format!("{} = {number} to {}", entry.field, t.name);
                checked += 1;
                let carried = CARRIED_OTHERWISE.contains(&entry.field) && !undefined;
                match entry.class {
                    _ if carried && (refused || !reached) => {
                        failures.push(format!("{case}: carried by its string, yet {answer:?}"))
                    }
                    _ if carried => {}
                    Class::Security | Class::Behaviour if !(refused && named && !reached) => failures
                        .push(format!("{case}: expected a refusal naming it, got {answer:?} (reached: {reached})")),
                    Class::Advisory if refused || !reached => {
                        failures.push(format!("{case}: expected it to reach the runtime, got {answer:?}"))
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(checked > 60, "only {checked} cases were checked");
    assert!(failures.is_empty(), "{} of {checked} cases fail:\n{}", failures.len(), failures.join("\n"));
    for t in targets {
        t.bridge.stop().await;
        t.runtime.stop().await;
    }
}
