//! Several backends' answers made one, in the caller's version. Lists merge as protobuf merges
//! messages: their bytes joined, each repeated field holding every backend's entries (the
//! default backend's first). What the kubelet keys by (an image's id, a metric's name) is kept
//! once; `Status` merges its conditions.

use crate::api::v1;
use crate::convert::wire;
use crate::version::CriVersion;
use prost::Message;

/// `message` with the entries of repeated field `list` whose key (string field `key` of the
/// entry) was seen before left out: the same image on two backends is one image.
pub fn first_of_each(message: &[u8], list: u32, key: u32) -> Vec<u8> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(message.len());
    let mut rest = message;
    loop {
        let before = rest;
        let Ok(found) = wire::next(&mut rest) else { break };
        let whole = &before[..before.len() - rest.len()];
        if found.number == list && found.wire_type == 2 {
            let id = wire::string_field(found.value, key).unwrap_or_default();
            if !id.is_empty() && !seen.insert(id) {
                continue;
            }
        }
        out.extend_from_slice(whole);
    }
    out
}

/// A handler the routing table serves, for `Status.runtime_handlers`: its name, and where it
/// runs (backend index, the handler's name there).
pub struct Served<'a> {
    pub name: &'a str,
    pub backend: usize,
    pub as_handler: &'a str,
}

/// One `Status` from several: each condition true only where every backend says so (the first
/// backend that says not gives the reason, and is named in the message); the default backend's
/// info; for a v1 caller, the routed handlers with their backend's features, and the runtime
/// features every backend that a new sandbox can reach (`served`) has. `answers` are by backend
/// index, each with its name.
pub fn status(
    answers: &[(&str, &[u8])],
    default: usize,
    served: &[Served],
    caller: CriVersion,
) -> Result<Vec<u8>, prost::DecodeError> {
    let decoded = answers.iter().map(|(_, bytes)| v1::StatusResponse::decode(*bytes)).collect::<Result<Vec<_>, _>>()?;
    let mut conditions: Vec<v1::RuntimeCondition> = Vec::new();
    for ((name, _), answer) in answers.iter().zip(&decoded) {
        for condition in answer.status.iter().flat_map(|s| &s.conditions) {
            match conditions.iter_mut().find(|c| c.r#type == condition.r#type) {
                Some(merged) if merged.status && !condition.status => {
                    *merged = condition.clone();
                    merged.message = format!("backend {name}: {}", condition.message);
                }
                Some(_) => {}
                None => {
                    let mut first = condition.clone();
                    if !first.status {
                        first.message = format!("backend {name}: {}", condition.message);
                    }
                    conditions.push(first);
                }
            }
        }
    }
    let mut merged = v1::StatusResponse {
        status: Some(v1::RuntimeStatus { conditions }),
        info: decoded.get(default).map(|d| d.info.clone()).unwrap_or_default(),
        ..Default::default()
    };
    if caller == CriVersion::V1 {
        merged.runtime_handlers = served
            .iter()
            .map(|s| {
                let there =
                    decoded.get(s.backend).and_then(|d| d.runtime_handlers.iter().find(|h| h.name == s.as_handler));
                v1::RuntimeHandler { name: s.name.to_string(), features: there.and_then(|h| h.features) }
            })
            .collect();
        // What every backend a new sandbox can reach has (one that only holds old pods does not
        // count: no pod is made there).
        let mut reached: Vec<usize> = served.iter().map(|s| s.backend).collect();
        reached.sort_unstable();
        reached.dedup();
        let every: Vec<v1::RuntimeFeatures> = reached.iter().filter_map(|&i| decoded.get(i)?.features).collect();
        if every.len() == reached.len() {
            merged.features = Some(v1::RuntimeFeatures {
                supplemental_groups_policy: every.iter().all(|f| f.supplemental_groups_policy),
                user_namespaces_host_network: every.iter().all(|f| f.user_namespaces_host_network),
                mount_options: every.iter().all(|f| f.mount_options),
            });
        }
    }
    Ok(merged.encode_to_vec())
}

/// The `Status` of a backend that cannot be reached: not ready, saying why.
pub fn unreachable_status(why: &str) -> Vec<u8> {
    let condition = v1::RuntimeCondition {
        r#type: "RuntimeReady".into(),
        status: false,
        reason: "BackendUnreachable".into(),
        message: why.into(),
    };
    v1::StatusResponse { status: Some(v1::RuntimeStatus { conditions: vec![condition] }), ..Default::default() }
        .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, up: bool, message: &str) -> v1::RuntimeCondition {
        v1::RuntimeCondition { r#type: kind.into(), status: up, reason: String::new(), message: message.into() }
    }

    fn answer(conditions: Vec<v1::RuntimeCondition>, handlers: &[&str]) -> Vec<u8> {
        v1::StatusResponse {
            status: Some(v1::RuntimeStatus { conditions }),
            runtime_handlers: handlers
                .iter()
                .map(|h| v1::RuntimeHandler {
                    name: h.to_string(),
                    features: Some(v1::RuntimeHandlerFeatures {
                        recursive_read_only_mounts: true,
                        user_namespaces: false,
                    }),
                })
                .collect(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn a_condition_is_true_only_where_every_backend_says_so() {
        let a = answer(vec![condition("RuntimeReady", true, ""), condition("NetworkReady", true, "")], &["", "runc"]);
        let b = answer(vec![condition("RuntimeReady", true, ""), condition("NetworkReady", false, "no cni")], &[""]);
        let served =
            [Served { name: "", backend: 0, as_handler: "" }, Served { name: "docker", backend: 1, as_handler: "" }];
        let merged = status(&[("containerd", &a), ("docker", &b)], 0, &served, CriVersion::V1).unwrap();
        let merged = v1::StatusResponse::decode(&merged[..]).unwrap();
        let conditions = merged.status.unwrap().conditions;
        assert!(conditions[0].status);
        assert!(!conditions[1].status);
        assert_eq!(conditions[1].message, "backend docker: no cni");
        let names: Vec<_> = merged.runtime_handlers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["", "docker"]);
        assert!(merged.runtime_handlers[1].features.is_some());
        let old = status(&[("containerd", &a), ("docker", &b)], 0, &served, CriVersion::V1alpha2).unwrap();
        assert!(v1::StatusResponse::decode(&old[..]).unwrap().runtime_handlers.is_empty());
    }

    #[test]
    fn the_same_image_twice_is_listed_once() {
        let image =
            |id: &str, tag: &str| v1::Image { id: id.into(), repo_tags: vec![tag.into()], ..Default::default() };
        let mut joined =
            v1::ListImagesResponse { images: vec![image("sha256:a", "x"), image("sha256:b", "y")] }.encode_to_vec();
        joined.extend(
            v1::ListImagesResponse { images: vec![image("sha256:a", "x"), image("sha256:c", "z")] }.encode_to_vec(),
        );
        let merged = v1::ListImagesResponse::decode(&first_of_each(&joined, 1, 1)[..]).unwrap();
        let ids: Vec<_> = merged.images.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["sha256:a", "sha256:b", "sha256:c"]);
    }
}
