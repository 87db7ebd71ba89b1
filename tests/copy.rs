//! The byte-level copy (`convert::copy`) held against the path it stands in for. The
//! decode–convert–encode path is the oracle: whenever a route lets a message's bytes pass as they
//! are, the decode path must convert the same bytes without error and without a loss, and the
//! other side must decode the same message from both. This is checked over every message each
//! older version converts, both ways:
//! - from generated messages (`support/wire_gen.rs`), some with unknown field numbers added;
//! - from the same bytes with a few bytes changed at random, which makes malformed lengths,
//!   wrong wire types, undefined enum numbers and broken UTF-8.
//!
//! The copy must also be taken where it should be, or the check would pass on a copy that never
//! happens. Each direction between v1alpha2 and v1 copies most generated messages, and a
//! kubelet-shaped `ListContainers` answer copies whole. A field the target lacks, or an enum
//! value without its counterpart, goes to the decode path, which reports the loss.
//!
//! The check itself is `fuzz/check/copy.rs`, which the `copy` fuzz target runs on arbitrary
//! bytes. `PROPTEST_CASES` sets the cases per message and direction (default 64).

#[path = "../fuzz/check/mod.rs"]
mod check;

use check::copy::same_at_the_other_side;
use check::wire_gen::{schema, Rng};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::convert::generated::{v1alpha1, v1alpha2 as generated_v1alpha2};
use cri_bridge::convert::{Cx, Route};
use cri_bridge::CriVersion;
use prost::Message;
use std::borrow::Cow;
use std::collections::HashMap;

const V1: CriVersion = CriVersion::V1;

fn cases() -> u64 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64)
}

/// Runs `check` over every converted message of `old`, in the direction given; returns how many
/// inputs were copied, of how many.
fn every_message(old: CriVersion, to_v1: bool, mutate: bool) -> (u64, u64) {
    let (from, to) = if to_v1 { (old, V1) } else { (V1, old) };
    let names = match old {
        CriVersion::V1alpha1 => v1alpha1::CONVERTED,
        _ => generated_v1alpha2::CONVERTED,
    };
    let source = schema(from);
    let (mut copied, mut total) = (0, 0);
    let mut failures = Vec::new();
    for &name in names {
        let route = Route::new(name, from, to).expect("a converted message has a route");
        let index = source.index(name);
        for case in 0..cases() {
            let mut rng = Rng::new(case.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(to_v1) ^ name.len() as u64);
            let mut message = source.generate(index, &mut rng);
            if rng.chance(1, 4) {
                source.insert_unknown(index, &mut message, &mut rng);
            }
            let mut bytes = source.encode(index, &message);
            if mutate && !bytes.is_empty() {
                for _ in 0..=rng.below(3) {
                    let at = rng.below(bytes.len() as u64) as usize;
                    bytes[at] = rng.below(256) as u8;
                }
            }
            total += 1;
            match same_at_the_other_side(&route, to, name, &bytes) {
                Ok(true) => copied += 1,
                Ok(false) => {}
                Err(why) => failures.push(format!("{from} → {to} {name}, case {case}, bytes {bytes:02x?}: {why}")),
            }
        }
    }
    assert!(failures.is_empty(), "{} inputs copied wrongly:\n{}", failures.len(), failures.join("\n"));
    (copied, total)
}

#[test]
fn a_copied_message_is_what_the_decode_path_gives_for_generated_messages() {
    for old in [CriVersion::V1alpha1, CriVersion::V1alpha2] {
        for to_v1 in [true, false] {
            let (copied, total) = every_message(old, to_v1, false);
            println!("{old} {}: {copied} of {total} generated inputs copied", if to_v1 { "→ v1" } else { "← v1" });
            if old == CriVersion::V1alpha2 {
                assert!(copied * 2 > total, "{old}, to v1 {to_v1}: only {copied} of {total} copied");
            }
        }
    }
}

#[test]
fn a_copied_message_is_what_the_decode_path_gives_for_damaged_bytes() {
    for old in [CriVersion::V1alpha1, CriVersion::V1alpha2] {
        for to_v1 in [true, false] {
            let (copied, total) = every_message(old, to_v1, true);
            println!("{old} {}: {copied} of {total} damaged inputs copied", if to_v1 { "→ v1" } else { "← v1" });
        }
    }
}

/// A v1alpha2 answer as containerd gives it to a kubelet's relist: containers with labels and
/// annotations, in every state.
fn list_containers(count: usize) -> v1alpha2::ListContainersResponse {
    let containers = (0..count)
        .map(|i| v1alpha2::Container {
            id: format!("{i:064x}"),
            pod_sandbox_id: format!("{:064x}", i / 2),
            metadata: Some(v1alpha2::ContainerMetadata { name: format!("app-{i}"), attempt: 1 }),
            image: Some(v1alpha2::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            image_ref: format!("sha256:{i:064x}"),
            state: (i % 4) as i32,
            created_at: 1_700_000_000_000_000_000 + i as i64,
            labels: HashMap::from([
                ("io.kubernetes.pod.name".to_string(), format!("pod-{i}")),
                ("io.kubernetes.container.name".to_string(), format!("app-{i}")),
            ]),
            annotations: HashMap::from([("io.kubernetes.container.hash".to_string(), format!("{i:08x}"))]),
        })
        .collect();
    v1alpha2::ListContainersResponse { containers }
}

#[test]
fn a_kubelet_sized_list_answer_passes_as_it_came_and_decodes_the_same_in_v1() {
    let answer = list_containers(1000).encode_to_vec();
    let route = Route::new("ListContainersResponse", CriVersion::V1alpha2, V1).expect("a route");
    let mut cx = Cx::new();
    let passed = route.convert(&answer, &mut cx).expect("a valid answer converts");
    assert!(matches!(passed, Cow::Borrowed(_)), "a v1alpha2 list answer is the same message in v1");
    assert_eq!(cx.loss_count(), 0);
    let mut oracle_cx = Cx::new();
    let oracle = route.run(&answer, &mut oracle_cx).expect("the decode path converts it");
    let as_copied = v1::ListContainersResponse::decode(&answer[..]).expect("v1 decodes the copy");
    let as_converted = v1::ListContainersResponse::decode(&oracle[..]).expect("v1 decodes the decode path's output");
    assert_eq!(as_copied, as_converted);
    assert_eq!(as_copied.containers.len(), 1000);
}

#[test]
fn what_the_target_lacks_goes_the_decode_path_and_is_reported() {
    let route = Route::new("ContainerStatus", V1, CriVersion::V1alpha2).expect("a route");
    let status = v1::ContainerStatus {
        id: "a".repeat(64),
        // `user` is v1 only (1.31): the copy would hand it to a runtime that cannot read it.
        user: Some(v1::ContainerUser::default()),
        image_id: "sha256:1".into(),
        ..Default::default()
    };
    let bytes = status.encode_to_vec();
    let mut cx = Cx::new();
    let converted = route.convert(&bytes, &mut cx).expect("it converts");
    if matches!(converted, Cow::Borrowed(_)) {
        panic!("a v1-only field passed as bytes to v1alpha2");
    }
    assert!(cx.loss_count() > 0, "the loss is reported by the decode path");

    // An enum number v1alpha2 does not define becomes a loss there too, never a copy.
    let route = Route::new("ContainerStatus", CriVersion::V1alpha2, V1).expect("a route");
    let bytes = v1alpha2::ContainerStatus { id: "b".repeat(64), state: 9, ..Default::default() }.encode_to_vec();
    let mut cx = Cx::new();
    assert!(matches!(route.convert(&bytes, &mut cx), Ok(Cow::Owned(_))), "an undefined state is not copied");
    assert!(cx.loss_count() > 0);
}
