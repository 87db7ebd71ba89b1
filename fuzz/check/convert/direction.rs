//! A direction between an older version and v1, and one generated step run in it: what every
//! check of the conversion routes stands on.

use super::super::wire_gen::{schema, Schema};
use cri_bridge::convert::{transcoders, Cx, Loss, Transcoder};
use cri_bridge::CriVersion;

const V1: CriVersion = CriVersion::V1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dir {
    /// From the older version to v1.
    Up,
    /// From v1 to the older version.
    Down,
}

pub(super) fn sides(old: CriVersion, dir: Dir) -> (&'static Schema, &'static Schema) {
    match dir {
        Dir::Up => (schema(old), schema(V1)),
        Dir::Down => (schema(V1), schema(old)),
    }
}

fn transcoder(old: CriVersion, name: &str) -> Result<&'static Transcoder, String> {
    transcoders(old).iter().find(|t| t.message == name).ok_or_else(|| format!("no {old} transcoder for {name}"))
}

pub(super) fn run_step(old: CriVersion, dir: Dir, name: &str, bytes: &[u8]) -> Result<(Vec<u8>, Vec<Loss>), String> {
    let t = transcoder(old, name)?;
    let step = match dir {
        Dir::Up => t.to_v1,
        Dir::Down => t.from_v1,
    };
    let mut cx = Cx::new();
    let out = step(bytes, &mut cx).map_err(|e| format!("{dir:?} step of {old} {name}: {e}"))?;
    Ok((out, cx.into_losses()))
}

pub(super) fn opposite(dir: Dir) -> Dir {
    match dir {
        Dir::Up => Dir::Down,
        Dir::Down => Dir::Up,
    }
}
