//! Conversions between CRI versions, with v1 as the hub (DESIGN principle 1).
//!
//! - `generated` (from `build.rs`): field-by-field conversions between each older version and v1,
//!   as `Convert` impls, plus a decode–convert–encode `Transcoder` for every message.
//! - `rules` + `exceptions`: the hand-written part, for fields whose meaning differs.
//! - `copy`: a message that is the same on both sides passes as its bytes, checked by one walk;
//!   `Route::convert` takes it, and falls back to the decode path for anything else.
//! - `cx` and `loss`: each conversion reports what it could not carry, as field paths.
//! - `classes`: every lossable request field as security, behaviour or advisory, with why.
//! - `fill`: v1 request fields a v1 kubelet always sets, filled for an older client's request.
//! - `policy`: decides per lost field whether the call is refused, warned about or allowed.
//! - `scan`: finds, in the wire bytes, fields our own schema does not know and fields the
//!   runtime's revision would not act on; `carried`: which of those still reach the runtime in
//!   meaning, or change nothing on this node; `wire`: the protobuf wire format, field by field;
//!   `size`: what decoding a message would allocate, told from its bytes.
//! - `streaming_url`: an `Exec`/`Attach`/`PortForward` URL without a scheme given `http`.

mod carried;
pub mod classes;
pub mod copy;
mod cx;
mod exceptions;
pub mod fill;
pub mod go_json;
mod loss;
pub mod policy;
pub mod rules;
pub mod scan;
pub mod size;
pub mod streaming_url;
pub mod wire;

pub use cx::{Convert, Cx, IsSet};
pub use loss::{Loss, LossReason, MAX_DISTINCT};

use crate::version::CriVersion;
use prost::Message;
use std::borrow::Cow;

/// Whether encoded `UserNamespace` bytes (the same in v1alpha2 and v1) ask for the host user
/// namespace with no mappings: what a runtime that ignores `userns_options` does anyway.
pub fn userns_is_host(bytes: &[u8]) -> bool {
    crate::api::v1::UserNamespace::decode(bytes)
        .is_ok_and(|u| u.mode == crate::api::v1::NamespaceMode::Node as i32 && u.uids.is_empty() && u.gids.is_empty())
}

/// The generated conversions, one module per older version.
pub mod generated {
    pub mod v1alpha1 {
        #![allow(clippy::all, deprecated)]
        include!(concat!(env!("OUT_DIR"), "/convert_v1alpha1.rs"));
    }
    pub mod v1alpha2 {
        #![allow(clippy::all, deprecated)]
        include!(concat!(env!("OUT_DIR"), "/convert_v1alpha2.rs"));
    }
}

/// Decodes one message, converts it, encodes the result.
pub type TranscodeFn = fn(&[u8], &mut Cx) -> Result<Vec<u8>, prost::DecodeError>;

/// The byte-level conversions of one message between an older version and v1.
pub struct Transcoder {
    pub message: &'static str,
    pub to_v1: TranscodeFn,
    pub from_v1: TranscodeFn,
}

/// Decode as `S`, convert to `T`, encode.
pub fn transcode<S, T>(bytes: &[u8], cx: &mut Cx) -> Result<Vec<u8>, prost::DecodeError>
where
    S: Message + Default + Convert<T>,
    T: Message,
{
    let source = S::decode(bytes)?;
    Ok(source.convert(cx).encode_to_vec())
}

/// The transcoders between `version` and v1 (none for v1 itself: v1 → v1 is the identity).
pub fn transcoders(version: CriVersion) -> &'static [Transcoder] {
    match version {
        CriVersion::V1alpha1 => generated::v1alpha1::TRANSCODERS,
        CriVersion::V1alpha2 => generated::v1alpha2::TRANSCODERS,
        CriVersion::V1 => &[],
    }
}

/// The messages of `version` without a rule, and their fields that are the same in v1 (for
/// `copy`; none for v1 itself).
fn same_fields(version: CriVersion) -> &'static [copy::SameFields] {
    match version {
        CriVersion::V1alpha1 => generated::v1alpha1::SAME,
        CriVersion::V1alpha2 => generated::v1alpha2::SAME,
        CriVersion::V1 => &[],
    }
}

/// One step of a conversion path from one version to another.
#[derive(Clone, Copy)]
pub struct Step(TranscodeFn);

/// How a message travels from one version to another: zero steps (same version, the bytes pass
/// unchanged), one (to or from v1) or two (between the older versions, through v1).
#[derive(Clone)]
pub struct Route {
    steps: Vec<Step>,
    /// For one step: the table and message index that let the bytes pass as they are when the
    /// message is the same on both sides (`copy`).
    copy: Option<(&'static copy::CopyTable, usize)>,
}

impl Route {
    /// The route for message `name` from `from` to `to`; `None` when one side lacks the message.
    pub fn new(name: &str, from: CriVersion, to: CriVersion) -> Option<Route> {
        let find = |v: CriVersion| transcoders(v).iter().find(|t| t.message == name);
        let mut steps = Vec::new();
        if from != to {
            if from != CriVersion::V1 {
                steps.push(Step(find(from)?.to_v1));
            }
            if to != CriVersion::V1 {
                steps.push(Step(find(to)?.from_v1));
            }
        }
        let copy = match (from, to) {
            (old, CriVersion::V1) | (CriVersion::V1, old) if old != CriVersion::V1 => {
                let index = from.schema().message_index(name)?;
                copy::CopyTable::of(old, to == CriVersion::V1, same_fields(old)).map(|table| (table, index))
            }
            _ => None,
        };
        Some(Route { steps, copy })
    }

    /// The route that changes nothing.
    pub fn identity() -> Route {
        Route { steps: Vec::new(), copy: None }
    }

    /// True when the bytes pass unchanged.
    pub fn is_identity(&self) -> bool {
        self.steps.is_empty()
    }

    /// Converts `bytes`: as they are when the route is one step and they are the same message on
    /// both sides (see `copy`), else by [`Route::run`]. Either way the other side decodes the same
    /// message, and `cx` holds the same losses (a copy has none).
    pub fn convert<'a>(&self, bytes: &'a [u8], cx: &mut Cx) -> Result<Cow<'a, [u8]>, prost::DecodeError> {
        if let Some((table, index)) = self.copy {
            if table.carries(index, bytes) {
                return Ok(Cow::Borrowed(bytes));
            }
        }
        self.run(bytes, cx).map(Cow::Owned)
    }

    /// Runs the route over `bytes` by decoding, converting and encoding, recording losses in `cx`.
    pub fn run(&self, bytes: &[u8], cx: &mut Cx) -> Result<Vec<u8>, prost::DecodeError> {
        let Some((first, rest)) = self.steps.split_first() else {
            return Ok(bytes.to_vec());
        };
        let mut current = (first.0)(bytes, cx)?;
        for step in rest {
            current = (step.0)(&current, cx)?;
        }
        Ok(current)
    }
}
