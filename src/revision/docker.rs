//! What a kubelet up to 1.23 expects of a runtime named `docker`: `Version.runtime_api_version`
//! is Docker's Engine API version, as dockershim answered it (`1.41.0` for Docker 20.10), not a
//! CRI version. Those kubelets parse it to admit a pod whose container sets
//! `allowPrivilegeEscalation: false` (at least 1.23) or a non-default `procMount` (at least 1.38);
//! `v1alpha2` or `v1` does not parse, and the pod is never admitted. Kubelets from 1.24 only log
//! it. (kubelet `pkg/kubelet/lifecycle/handlers.go`, 1.20 to 1.23; dockershim
//! `docker_service.go`.)

use super::table::parse_release;

/// Docker Engine releases and the API version each serves (Docker's version matrix): the first
/// release of each API version.
const ENGINE_API: &[((u32, u32), &str)] = &[
    ((17, 3), "1.26"),
    ((17, 4), "1.28"),
    ((17, 5), "1.29"),
    ((17, 6), "1.30"),
    ((17, 7), "1.31"),
    ((17, 9), "1.32"),
    ((17, 10), "1.33"),
    ((17, 11), "1.34"),
    ((17, 12), "1.35"),
    ((18, 2), "1.36"),
    ((18, 3), "1.37"),
    ((18, 6), "1.38"),
    ((18, 9), "1.39"),
    ((19, 3), "1.40"),
    ((20, 10), "1.41"),
    ((23, 0), "1.42"),
    ((24, 0), "1.43"),
    ((25, 0), "1.44"),
    ((26, 0), "1.45"),
    ((27, 0), "1.46"),
    ((27, 2), "1.47"),
    ((28, 0), "1.48"),
    ((28, 1), "1.49"),
    ((28, 2), "1.50"),
    ((28, 3), "1.51"),
    ((29, 0), "1.52"),
    ((29, 2), "1.53"),
    ((29, 3), "1.54"),
];

/// What cri-dockerd's engine versions before 17.03 serve at least: below every check.
const OLDEST: &str = "1.25";

/// The Engine API version dockershim would have answered for Docker `engine_version`
/// (`20.10.24` gives `1.41.0`): the release's row, the newest row for a release newer than the
/// table. `None` when the version does not parse.
pub fn engine_api_version(engine_version: &str) -> Option<String> {
    let (major, minor, _) = parse_release(engine_version)?;
    let api = ENGINE_API.iter().rev().find(|(release, _)| *release <= (major, minor)).map_or(OLDEST, |(_, api)| api);
    Some(format!("{api}.0"))
}

#[cfg(test)]
mod tests {
    use super::engine_api_version;

    #[test]
    fn engine_releases_give_their_api_version() {
        assert_eq!(engine_api_version("20.10.24").as_deref(), Some("1.41.0"));
        assert_eq!(engine_api_version("27.3.1").as_deref(), Some("1.47.0"));
        assert_eq!(engine_api_version("19.03.15").as_deref(), Some("1.40.0"));
        assert_eq!(engine_api_version("31.0.0").as_deref(), Some("1.54.0"));
        assert_eq!(engine_api_version("1.13.1").as_deref(), Some("1.25.0"));
        assert_eq!(engine_api_version("unknown"), None);
    }
}
