//! The revision model at its edges: release strings, the features report, what counts as
//! reported, and a runtime configured newer than cri-bridge's schema.

mod common;

use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::revision::{parse_minor, parse_release, Block, Features, RuntimeProfile, Source};
use cri_bridge::CriVersion::{V1alpha1, V1alpha2, V1};
use prost::Message;
use tonic::{Code, Request};

#[test]
fn release_strings_parse_as_runtimes_write_them() {
    assert_eq!(parse_release("v1.6.20"), Some((1, 6, 20)));
    assert_eq!(parse_release("1.6.20~ds1"), Some((1, 6, 20)));
    assert_eq!(parse_release("1.36.3"), Some((1, 36, 3)));
    assert_eq!(parse_release("1.7.24+unknown"), Some((1, 7, 24)));
    assert_eq!(parse_release("2"), Some((2, 0, 0)));
    assert_eq!(parse_release("1.x.3"), Some((1, 0, 0)));
    assert_eq!(parse_release("unknown"), None);
    assert_eq!(parse_release(""), None);
}

#[test]
fn revision_keys_parse_as_kubernetes_minors() {
    assert_eq!(parse_minor("1.25"), Some(25));
    assert_eq!(parse_minor("1.9"), Some(9));
    assert_eq!(parse_minor("1.8"), None);
    assert_eq!(parse_minor("2.0"), None);
    assert_eq!(parse_minor("25"), None);
    assert_eq!(parse_minor("1.300"), None);
}

#[test]
fn patch_boundaries_and_versions_of_the_table() {
    let minor = |name, release, version| RuntimeProfile::from_version(version, name, release, None).minor;
    assert_eq!(minor("containerd", "1.6.8", V1), 23);
    assert_eq!(minor("containerd", "1.6.9", V1), 25);
    assert_eq!(minor("containerd", "1.7.0", V1), 26);
    assert_eq!(minor("containerd", "1.7.1", V1), 27);
    assert_eq!(minor("containerd", "1.3.9", V1alpha2), 10, "older than the table: assumed oldest");
    // A version the release does not serve is not in the table either.
    let v1_on_1_4 = RuntimeProfile::from_version(V1, "containerd", "1.4.13", None);
    assert_eq!((v1_on_1_4.minor, v1_on_1_4.source), (20, Source::Assumed));
    assert_eq!(RuntimeProfile::from_version(V1alpha1, "containerd", "1.7.24", None).minor, 9);
    // cri-bridge's own runtime is of its own schema; unknown ones only ignore ambient capabilities.
    let ours = RuntimeProfile::from_version(V1, cri_bridge::memory::RUNTIME_NAME, "0.1.0", None);
    assert_eq!((ours.minor, ours.unhonoured.len()), (37, 0));
    let unknown = RuntimeProfile::unknown(V1, None);
    assert_eq!(unknown.unhonoured.len(), 1);
    assert!(unknown.to_string().contains("set backend.revision"), "{unknown}");
    let configured = RuntimeProfile::from_version(V1, "containerd", "1.6.20", Some(31));
    assert_eq!((configured.minor, configured.source), (31, Source::Config));
    assert_eq!(configured.unhonoured.len(), 2, "the table's facts about 1.6 stay");
}

/// `backend.revision` sets the revision and nothing else: what a runtime decodes but does not act
/// on is a fact of its release, not of its schema, so every such block the runtime has without
/// the override stays with it, at every revision the override may name.
#[test]
fn backend_revision_changes_the_revision_only() {
    let runtimes = [
        ("containerd", "1.6.20"),
        ("containerd", "1.4.13"), // not a v1 server: not in the table for v1
        ("some-runtime", "3.2.1"),
        ("", ""),
        (cri_bridge::revision::DOCKER, "27.3.1"),
        (cri_bridge::memory::RUNTIME_NAME, "0.1.0"),
    ];
    for version in [V1alpha2, V1] {
        let schema = version.schema();
        let ambient = schema.field_by_name("Capability.add_ambient_capabilities").unwrap().1.id;
        for (name, release) in runtimes {
            let unset = RuntimeProfile::from_version(version, name, release, None);
            for minor in cri_bridge::revision::oldest(version)..=cri_bridge::revision::newest(version) + 1 {
                let configured = RuntimeProfile::from_version(version, name, release, Some(minor));
                let mut expected = unset.clone();
                expected.minor = configured.minor;
                let what = format!("{version} {name:?} {release:?} at 1.{minor}");
                assert_eq!(configured.unhonoured, unset.unhonoured, "{what}");
                assert_eq!(configured.blocked(schema), expected.blocked(schema), "{what}");
                // (Below the field's own revision, the revision is the reason given.)
                if name != cri_bridge::memory::RUNTIME_NAME {
                    assert!(configured.blocked(schema)[ambient].is_some(), "{what}: ambient capabilities pass");
                }
            }
        }
    }
}

#[test]
fn features_count_when_every_handler_reports_them() {
    let handler = |name: &str, userns, rro| v1::RuntimeHandler {
        name: name.into(),
        features: Some(v1::RuntimeHandlerFeatures { user_namespaces: userns, recursive_read_only_mounts: rro }),
    };
    let status = |handlers, sgp| v1::StatusResponse {
        runtime_handlers: handlers,
        features: Some(v1::RuntimeFeatures {
            supplemental_groups_policy: sgp,
            user_namespaces_host_network: false,
            mount_options: false,
        }),
        ..Default::default()
    };
    let both = Features::from_status(&status(vec![handler("", true, true), handler("runsc", true, true)], true));
    assert_eq!(
        both,
        Features {
            user_namespaces: true,
            recursive_read_only_mounts: true,
            supplemental_groups_policy: true,
            mount_options: false,
            handlers: vec![own("", true, true), own("runsc", true, true)],
        }
    );
    let one_lacks = Features::from_status(&status(vec![handler("", true, true), handler("runsc", false, true)], false));
    assert_eq!(
        one_lacks,
        Features {
            user_namespaces: false,
            recursive_read_only_mounts: true,
            supplemental_groups_policy: false,
            mount_options: false,
            handlers: vec![own("", true, true), own("runsc", false, true)],
        }
    );
    // Each handler keeps its own: a pod on the default handler has user namespaces.
    assert!(one_lacks.for_handler("").unwrap().user_namespaces);
    assert!(!one_lacks.for_handler("runsc").unwrap().user_namespaces);
    assert!(one_lacks.for_handler("kata").is_none());
    assert!(one_lacks.differ_by_handler() && !both.differ_by_handler());
    assert!(!Features::from_status(&status(vec![], true)).user_namespaces, "no handler reports nothing");
    let silent = v1::StatusResponse {
        runtime_handlers: vec![v1::RuntimeHandler { name: "".into(), features: None }],
        ..Default::default()
    };
    assert_eq!(
        Features::from_status(&silent),
        Features { handlers: vec![own("", false, false)], ..Features::default() }
    );

    assert!(RuntimeProfile::from_version(V1, "containerd", "2.0.0", None).reports_features());
    assert!(!RuntimeProfile::from_version(V1, "cri-o", "1.29.0", None).reports_features());
    assert!(RuntimeProfile::from_version(V1, "cri-o", "1.30.0", None).reports_features());
    assert!(!RuntimeProfile::from_version(V1alpha2, "cri-o", "1.25.0", Some(25)).reports_features());
}

#[test]
fn a_missing_feature_blocks_only_its_fields() {
    let schema = V1.schema();
    let id = |f: &str| schema.field_by_name(f).unwrap().1.id;
    let mut profile = RuntimeProfile::from_version(V1, "containerd", "2.3.0", None);
    profile.features = Some(Features {
        user_namespaces: true,
        recursive_read_only_mounts: false,
        supplemental_groups_policy: false,
        mount_options: false,
        handlers: Vec::new(),
    });
    let blocked = profile.blocked(schema);
    assert_eq!(blocked[id("NamespaceOption.userns_options")], None);
    assert!(matches!(blocked[id("Mount.recursive_read_only")], Some(Block::FeatureMissing(_))));
    assert!(matches!(
        blocked[id("LinuxContainerSecurityContext.supplemental_groups_policy")],
        Some(Block::FeatureMissing(_))
    ));
    assert!(matches!(
        blocked[id("LinuxSandboxSecurityContext.supplemental_groups_policy")],
        Some(Block::FeatureMissing(_))
    ));
    assert_eq!(blocked[id("Mount.image")], None);
    assert!(matches!(blocked[id("Capability.add_ambient_capabilities")], Some(Block::NotHonoured(_))));
    // Without a report (an older revision), features block nothing beyond the revision.
    profile.features = None;
    assert_eq!(profile.blocked(schema)[id("Mount.recursive_read_only")], None);
}

#[tokio::test]
async fn a_runtime_configured_newer_than_the_schema_gets_unknown_fields() {
    for (revision, passes) in [(37, false), (38, true)] {
        let dir = TempDir::new("newer");
        let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
        let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
        config.backend_revision = Some(revision);
        let bridge = Bridge::start(config).await;
        // A StopContainerRequest with a field 9 from a schema newer than cri-bridge's.
        let mut body = v1::StopContainerRequest { container_id: "c".into(), timeout: 1 }.encode_to_vec();
        prost::encoding::encode_varint(9 << 3, &mut body);
        prost::encoding::encode_varint(1, &mut body);
        let client = cri_bridge::grpc::CriClient::new(channel(&bridge.socket), 1 << 20);
        let rpc = cri_bridge::grpc::Rpc::from_path("/runtime.v1.RuntimeService/StopContainer").unwrap();
        let answer = client.unary(rpc, Request::new(body.into())).await;
        let refused = matches!(&answer, Err(s) if s.code() == Code::Unimplemented
            && s.message().contains("refused by the loss policy"));
        assert_eq!(!refused, passes, "revision 1.{revision}: {answer:?}");
        assert_eq!(runtime.memory.calls_of("StopContainer"), u64::from(passes));
        bridge.stop().await;
        runtime.stop().await;
    }
}

#[test]
fn only_requests_that_can_hold_a_lossable_field_are_scanned_on_passthrough() {
    let worth = |version: cri_bridge::CriVersion, message: &str| {
        cri_bridge::convert::scan::worth_scanning(version, version.schema().message_index(message).unwrap())
    };
    // Read-only requests of the first revision's fields: nothing to find.
    for message in ["VersionRequest", "StatusRequest", "ContainerStatusRequest", "PodSandboxStatusRequest"] {
        assert!(!worth(V1, message), "{message}");
    }
    // A read-only request whose field came after v1's first revision (1.23).
    assert!(worth(V1, "PodSandboxStatsRequest"));
    // Messages where an unknown number or a newer field matters.
    for message in ["CreateContainerRequest", "RunPodSandboxRequest", "ListContainersRequest", "StopContainerRequest"] {
        assert!(worth(V1, message), "{message}");
    }
    assert!(!worth(V1alpha2, "ContainerStatusRequest"));
}

#[test]
fn vendor_version_strings_find_their_rows() {
    let profile = |name, release| RuntimeProfile::from_version(V1, name, release, None);
    // k3s's containerd, Debian's, and a build without git describe.
    for (release, minor) in [("v1.7.21-k3s2", 27), ("1.7.24~ds1", 27), ("2.1.9+unknown", 32), ("v2.4.0-beta.0", 36)] {
        let p = profile("containerd", release);
        assert_eq!((p.minor, &p.source), (minor, &Source::Table), "{release}");
    }
    assert_eq!(parse_release("v1.7.21-k3s2"), Some((1, 7, 21)));
    assert_eq!(parse_release("2.1.9+unknown"), Some((2, 1, 9)));
    // A row followed by another of its runtime is exact; the newest only a floor.
    assert!(profile("containerd", "1.7.24").exact);
    assert!(!profile("containerd", "2.4.0").exact);
    assert!(!profile("cri-o", "1.37.0").exact);
    assert_eq!(profile("cri-o", "1.37.0").minor, 36, "CRI-O 1.37 pins cri-api v0.36.3");
    // Snapshot pins: CRI-O 1.23/1.24 (1.22 plus the 1.23 stats RPCs) and 1.26.0.
    let crio_1_24 = profile("cri-o", "1.24.6");
    assert_eq!((crio_1_24.minor, crio_1_24.exact), (22, false));
    assert!(!crio_1_24.lacks_rpc(23), "its stats RPCs are forwarded");
    assert_eq!((profile("cri-o", "1.26.0").minor, profile("cri-o", "1.26.4").minor), (25, 26));
    // containerd 1.7 is known to lack RuntimeConfig (1.28) and CheckpointPod (1.37).
    assert!(profile("containerd", "1.7.24").lacks_rpc(28));
    assert!(!profile("containerd", "2.1.9").lacks_rpc(28));
    assert!(!profile("a-runtime-nobody-knows", "1.0").lacks_rpc(37), "only a floor: forwarded");
}

#[test]
fn cri_dockerd_is_placed_by_the_rpcs_its_service_has() {
    let docker = |version, floor| RuntimeProfile::from_version(version, "docker", "28.1.1", None).with_rpc_floor(floor);
    // 0.3.16+ and 0.4 (RuntimeConfig registered): v1 1.30, v1alpha2 1.25.
    assert_eq!(docker(V1, Some(28)).minor, 30);
    assert_eq!(docker(V1alpha2, Some(28)).minor, 25);
    // 0.3.9–0.3.15 (ListMetricDescriptors, no RuntimeConfig): 1.27 and 1.25.
    assert_eq!(docker(V1, Some(26)).minor, 27);
    assert_eq!(docker(V1alpha2, Some(26)).minor, 25);
    // Older: 1.20 (0.3.0; 0.3.1–0.3.8 decode 1.22, the older one is assumed).
    assert_eq!(docker(V1, Some(23)).minor, 20);
    assert_eq!(docker(V1, None).minor, 20);
    assert_eq!(docker(V1alpha2, None).minor, 20);
    let placed = docker(V1, Some(28));
    assert_eq!(placed.source, Source::Rpcs);
    assert!(!placed.exact, "a later cri-dockerd may decode more");
    assert!(placed.to_string().contains("cri-dockerd in front of Docker Engine 28.1.1"), "{placed}");
    // An unknown v1 runtime: the RPC's revision is a floor over the oldest.
    let unknown = RuntimeProfile::from_version(V1, "somert", "1.0", None).with_rpc_floor(Some(28));
    assert_eq!((unknown.minor, unknown.source), (28, Source::Assumed));
    // A runtime in the table is not moved by it.
    let known = RuntimeProfile::from_version(V1, "containerd", "1.7.24", None).with_rpc_floor(Some(28));
    assert_eq!(known.minor, 27);
}

/// A handler's own report, as `Features::from_status` keeps it.
/// Which security-profile field of each pair a runtime does not read (issue 40; the sources are
/// in docs/conversion.md): containerd reads both, CRI-O dropped the seccomp strings in 1.28 and
/// read the AppArmor message only from 1.30, cri-dockerd reads one of each.
#[test]
fn the_security_profile_fields_each_runtime_does_not_read() {
    let unread = |profile: RuntimeProfile| {
        let mut fields: Vec<&str> =
            profile.unhonoured.iter().map(|u| u.field).filter(|f| f.contains("Security")).collect();
        fields.sort();
        fields
    };
    let crio = |release| unread(RuntimeProfile::from_version(V1, "cri-o", release, None));
    const SANDBOX: &str = "LinuxSandboxSecurityContext.seccomp_profile_path";
    const CONTAINER: &str = "LinuxContainerSecurityContext.seccomp_profile_path";
    const APPARMOR: &str = "LinuxContainerSecurityContext.apparmor";
    const SECCOMP: &str = "LinuxContainerSecurityContext.seccomp";
    for containerd in ["1.5.18", "1.6.20", "1.7.24", "2.1.9", "2.4.2"] {
        let profile = RuntimeProfile::from_version(V1alpha2, "containerd", containerd, None);
        assert!(unread(profile).is_empty(), "containerd {containerd} reads every string and message");
    }
    assert_eq!(crio("1.19.0"), Vec::<&str>::new(), "before the messages");
    assert_eq!(crio("1.27.3"), vec![APPARMOR]);
    assert_eq!(crio("1.28.0"), vec![APPARMOR, CONTAINER, SANDBOX]);
    assert_eq!(crio("1.29.4"), vec![APPARMOR, CONTAINER, SANDBOX]);
    assert_eq!(crio("1.30.0"), vec![CONTAINER, SANDBOX]);
    assert_eq!(crio("1.36.3"), vec![CONTAINER, SANDBOX]);
    let docker = |floor| unread(RuntimeProfile::from_version(V1, "docker", "28.1.1", None).with_rpc_floor(floor));
    assert_eq!(docker(Some(28)), vec![APPARMOR, CONTAINER]);
    assert_eq!(docker(Some(26)), vec![APPARMOR, CONTAINER]);
    assert_eq!(docker(None), vec![APPARMOR, SECCOMP, CONTAINER], "0.2 to 0.3.8: one seccomp field or the other");
}

fn own(name: &str, user_namespaces: bool, recursive_read_only_mounts: bool) -> cri_bridge::revision::HandlerFeatures {
    cri_bridge::revision::HandlerFeatures { name: name.into(), user_namespaces, recursive_read_only_mounts }
}
