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
//!   converting back gives the input except exactly at the reported losses, modulo docs/conversion.md's
//!   documented rules (namespace defaults, seccomp/AppArmor reconciliation, the host user
//!   namespace, v1alpha1 `info` values as JSON);
//! - a route through v1 is its two steps; the loss count equals what the record holds;
//! - the loss record keeps its shape, and the policy judges it without panicking.
//!
//! Here: the input's layout and what the checks share. The checks: requests (`request.rs`) and
//! answers (`response.rs`) under `convert/`, each conversion step (`step.rs`) against the
//! schema difference (`schema_difference.rs`) and the way back (`way_back.rs`).

mod direction;
mod request;
mod response;
mod schema_difference;
mod step;
mod way_back;

pub use request::request;
pub use response::response;

use super::{version, version_choice, Choices};
use cri_bridge::api::RpcInfo;
use cri_bridge::convert::{Loss, LossReason, MAX_DISTINCT};
use cri_bridge::grpc::Rpc;
use cri_bridge::revision::{self, Features, RuntimeProfile};
use cri_bridge::CriVersion;

/// Frontend, backend, RPC, and two bytes for the runtime.
pub const HEADER_LEN: usize = 5;

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
            handlers: Vec::new(),
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
