//! Image references normalized as docker does (`busybox` → `docker.io/library/busybox:latest`),
//! and the image record the in-memory runtime makes from one: its ID and digests derived from the
//! normalized reference, so the same reference always gives the same image.

use super::support::digest;
use crate::api::v1;

/// `busybox` → `docker.io/library/busybox:latest`, as the docker reference grammar has it.
pub(super) fn normalize(reference: &str) -> String {
    let (name, suffix) = match reference.split_once('@') {
        Some((name, digest)) => (name, format!("@{digest}")),
        None => {
            // A `:` in the last path component is a tag; earlier it is a registry port.
            let last = reference.rsplit('/').next().unwrap_or(reference);
            match last.rfind(':') {
                Some(at) => {
                    let split = reference.len() - last.len() + at;
                    (&reference[..split], reference[split..].to_string())
                }
                None => (reference, ":latest".to_string()),
            }
        }
    };
    let name = match name.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => name.to_string(),
        Some(_) => format!("docker.io/{name}"),
        None => format!("docker.io/library/{name}"),
    };
    format!("{name}{suffix}")
}

/// An image for `reference`, its ID and digest derived from the normalized reference.
pub(super) fn new_image(reference: &str, size: u64, uid: Option<i64>, pinned: bool) -> v1::Image {
    let normalized = normalize(reference);
    let (repo_tags, repo_digests) = match normalized.split_once('@') {
        Some(_) => (vec![], vec![normalized.clone()]),
        None => {
            let repository = normalized.rsplit_once(':').map_or(normalized.as_str(), |(repo, _)| repo);
            let repo_digest = format!("{repository}@sha256:{}", digest(&format!("manifest {normalized}")));
            (vec![normalized.clone()], vec![repo_digest])
        }
    };
    v1::Image {
        id: format!("sha256:{}", digest(&normalized)),
        repo_tags,
        repo_digests,
        size,
        uid: uid.map(|value| v1::Int64Value { value }),
        username: String::new(),
        spec: None,
        pinned,
    }
}
