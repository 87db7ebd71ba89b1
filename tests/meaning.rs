//! The meaning tables of docs/conversion.md ("What the hand-written rules mean"), written here as
//! literals and checked against the converter, so that the expected values do not come from the
//! code under test. The same literals are rendered and compared with docs/conversion.md, row by
//! row.

#![allow(deprecated)] // the deprecated profile strings are what these tables are about

use cri_bridge::api::{v1, v1alpha1, v1alpha2};
use cri_bridge::convert::{Cx, Route};
use cri_bridge::CriVersion::{V1alpha1, V1alpha2, V1};
use prost::Message;

mod common;
use common::convert;

// ---------------------------------------------------------------------------------------------
// Namespaces: v1 modes ↔ v1alpha1 booleans
// ---------------------------------------------------------------------------------------------

/// What a v1alpha1 runtime is sent for each v1 mode: `Some(host_…)`, or `None` when the mode has
/// no boolean form (a loss: the request is refused, and `false` is what the bytes would say).
/// Columns: POD, CONTAINER, NODE, TARGET.
const MODES_DOWN: [(&str, [Option<bool>; 4]); 3] = [
    ("network", [Some(false), None, Some(true), None]),
    ("pid", [None, Some(false), Some(true), None]),
    ("ipc", [Some(false), None, Some(true), None]),
];

/// What a v1alpha1 boolean means in v1: (field, false →, true →).
const BOOLEANS_UP: [(&str, &str, &str); 3] =
    [("network", "POD", "NODE"), ("pid", "CONTAINER", "NODE"), ("ipc", "POD", "NODE")];

const MODE_NAMES: [&str; 4] = ["POD", "CONTAINER", "NODE", "TARGET"];

fn mode_number(name: &str) -> i32 {
    v1::NamespaceMode::from_str_name(name).unwrap_or_else(|| panic!("no mode {name}")) as i32
}

#[test]
fn every_combination_of_modes_reaches_v1alpha1_as_the_table_says() {
    for combination in 0..64 {
        let modes = [combination % 4, combination / 4 % 4, combination / 16];
        let v1 = v1::NamespaceOption {
            network: mode_number(MODE_NAMES[modes[0]]),
            pid: mode_number(MODE_NAMES[modes[1]]),
            ipc: mode_number(MODE_NAMES[modes[2]]),
            ..Default::default()
        };
        let (old, losses): (v1alpha1::NamespaceOption, _) = convert("NamespaceOption", V1, V1alpha1, &v1);
        let sent = [old.host_network, old.host_pid, old.host_ipc];
        let mut lost: Vec<&str> = losses.iter().map(|l| l.path.as_str()).collect();
        lost.sort_unstable();
        let mut expect_lost = Vec::new();
        for (i, (field, row)) in MODES_DOWN.iter().enumerate() {
            match row[modes[i]] {
                Some(host) => assert_eq!(sent[i], host, "{field} {} → {old:?}", MODE_NAMES[modes[i]]),
                None => {
                    assert!(!sent[i], "{field} {}: a lost mode must not read as host", MODE_NAMES[modes[i]]);
                    expect_lost.push(*field);
                }
            }
        }
        expect_lost.sort_unstable();
        assert_eq!(lost, expect_lost, "{v1:?}");
    }
}

#[test]
fn every_combination_of_booleans_reaches_v1_as_the_table_says() {
    for bits in 0..8u8 {
        let host = [bits & 1 != 0, bits & 2 != 0, bits & 4 != 0];
        let old = v1alpha1::NamespaceOption { host_network: host[0], host_pid: host[1], host_ipc: host[2] };
        let (new, losses): (v1::NamespaceOption, _) = convert("NamespaceOption", V1alpha1, V1, &old);
        assert!(losses.is_empty(), "{losses:?}");
        let got = [new.network, new.pid, new.ipc];
        for (i, (field, when_false, when_true)) in BOOLEANS_UP.iter().enumerate() {
            let expect = if host[i] { when_true } else { when_false };
            assert_eq!(got[i], mode_number(expect), "{field}: {old:?} → {new:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seccomp and AppArmor: string ↔ SecurityProfile
// ---------------------------------------------------------------------------------------------

/// What each string form means as a profile, for seccomp and for AppArmor: (type, localhost_ref),
/// or `None` when the string names no profile (a non-empty one is passed on as it is).
type Meaning = Option<(&'static str, &'static str)>;
const STRINGS: [(&str, Meaning, Meaning); 7] = [
    ("runtime/default", Some(("RuntimeDefault", "")), Some(("RuntimeDefault", ""))),
    ("docker/default", Some(("RuntimeDefault", "")), None),
    ("unconfined", Some(("Unconfined", "")), Some(("Unconfined", ""))),
    (
        "localhost/profiles/audit.json",
        Some(("Localhost", "profiles/audit.json")),
        Some(("Localhost", "profiles/audit.json")),
    ),
    ("localhost/", Some(("Localhost", "")), Some(("Localhost", ""))),
    ("", None, None),
    ("runtime/defaults", None, None),
];

/// The string each profile is sent as, where only the string can go (v1alpha1) or both do.
const PROFILES: [(&str, &str, &str); 3] = [
    ("RuntimeDefault", "", "runtime/default"),
    ("Unconfined", "", "unconfined"),
    ("Localhost", "k8s-apparmor-example", "localhost/k8s-apparmor-example"),
];

fn profile(meaning: Meaning) -> Option<v1::SecurityProfile> {
    meaning.map(|(t, r)| v1::SecurityProfile {
        profile_type: v1::security_profile::ProfileType::from_str_name(t).expect("profile type") as i32,
        localhost_ref: r.into(),
    })
}

#[test]
fn every_string_form_means_the_profile_the_table_says() {
    for (string, seccomp, apparmor) in STRINGS {
        // From v1alpha1 (strings only) and from v1alpha2 given only the strings.
        let a1 = v1alpha1::LinuxContainerSecurityContext {
            seccomp_profile_path: string.into(),
            apparmor_profile: string.into(),
            ..Default::default()
        };
        let (up1, losses): (v1::LinuxContainerSecurityContext, _) =
            convert("LinuxContainerSecurityContext", V1alpha1, V1, &a1);
        let a2 = v1alpha2::LinuxContainerSecurityContext {
            seccomp_profile_path: string.into(),
            apparmor_profile: string.into(),
            ..Default::default()
        };
        let (up2, losses2): (v1::LinuxContainerSecurityContext, _) =
            convert("LinuxContainerSecurityContext", V1alpha2, V1, &a2);
        // A string that names no profile is carried as it is, and reported: a runtime that reads
        // only SecurityProfile would apply none.
        let unnamed: Vec<&str> = [("seccomp_profile_path", seccomp), ("apparmor_profile", apparmor)]
            .into_iter()
            .filter(|(_, meaning)| meaning.is_none() && !string.is_empty())
            .map(|(field, _)| field)
            .collect();
        for (from, up, losses) in [("v1alpha1", &up1, &losses), ("v1alpha2", &up2, &losses2)] {
            let reported: Vec<&str> = losses.iter().map(|l| l.path.as_str()).collect();
            assert_eq!(reported, unnamed, "{from} {string:?}: {losses:?}");
            assert_eq!(up.seccomp, profile(seccomp), "{from} seccomp {string:?}");
            assert_eq!(up.apparmor, profile(apparmor), "{from} AppArmor {string:?}");
            // The string itself is passed on as it was: it already says the same.
            assert_eq!((up.seccomp_profile_path.as_str(), up.apparmor_profile.as_str()), (string, string));
        }
        // The pod-level seccomp string reads the same way.
        let pod = v1alpha1::LinuxSandboxSecurityContext { seccomp_profile_path: string.into(), ..Default::default() };
        let (up, _): (v1::LinuxSandboxSecurityContext, _) = convert("LinuxSandboxSecurityContext", V1alpha1, V1, &pod);
        assert_eq!(up.seccomp, profile(seccomp), "pod seccomp {string:?}");
    }
}

#[test]
fn every_profile_is_sent_as_the_string_the_table_says() {
    for (t, r, string) in PROFILES {
        let given = profile(Some((t, r)));
        let sc =
            v1::LinuxContainerSecurityContext { seccomp: given.clone(), apparmor: given.clone(), ..Default::default() };
        let (a1, losses): (v1alpha1::LinuxContainerSecurityContext, _) =
            convert("LinuxContainerSecurityContext", V1, V1alpha1, &sc);
        assert!(losses.is_empty(), "{t}: {losses:?}");
        assert_eq!(
            (a1.seccomp_profile_path.as_str(), a1.apparmor_profile.as_str()),
            (string, string),
            "{t} to v1alpha1"
        );

        let (a2, losses): (v1alpha2::LinuxContainerSecurityContext, _) =
            convert("LinuxContainerSecurityContext", V1, V1alpha2, &sc);
        assert!(losses.is_empty(), "{t}: {losses:?}");
        assert_eq!(
            (a2.seccomp_profile_path.as_str(), a2.apparmor_profile.as_str()),
            (string, string),
            "{t} to v1alpha2"
        );
        let kept =
            |p: &Option<v1alpha2::SecurityProfile>| p.as_ref().map(|p| (p.profile_type, p.localhost_ref.clone()));
        let expect = given.as_ref().map(|p| (p.profile_type, p.localhost_ref.clone()));
        assert_eq!((kept(&a2.seccomp), kept(&a2.apparmor)), (expect.clone(), expect), "{t}: the profile stays");

        let pod = v1::LinuxSandboxSecurityContext { seccomp: given.clone(), ..Default::default() };
        for to in [V1alpha1, V1alpha2] {
            let route = Route::new("LinuxSandboxSecurityContext", V1, to).expect("route");
            let mut cx = Cx::new();
            let bytes = route.run(&pod.encode_to_vec(), &mut cx).expect("converts");
            // Field 7 is seccomp_profile_path in both older versions.
            let sent = v1alpha1::LinuxSandboxSecurityContext::decode(bytes.as_slice())
                .map(|c| c.seccomp_profile_path)
                .unwrap_or_default();
            assert_eq!(sent, string, "pod seccomp {t} to {to}");
        }
    }
}

#[test]
fn a_profile_and_a_string_that_disagree_are_sent_as_the_profile() {
    for (t, r, string) in PROFILES {
        for other in ["unconfined", "runtime/default", "localhost/else", "nonsense"] {
            if other == string {
                continue;
            }
            let sc = v1::LinuxContainerSecurityContext {
                seccomp: profile(Some((t, r))),
                seccomp_profile_path: other.into(),
                apparmor: profile(Some((t, r))),
                apparmor_profile: other.into(),
                ..Default::default()
            };
            for to in [V1alpha1, V1alpha2] {
                let route = Route::new("LinuxContainerSecurityContext", V1, to).expect("route");
                let mut cx = Cx::new();
                let bytes = route.run(&sc.encode_to_vec(), &mut cx).expect("converts");
                let sent = v1alpha1::LinuxContainerSecurityContext::decode(bytes.as_slice()).expect("decodes");
                assert_eq!(
                    (sent.seccomp_profile_path.as_str(), sent.apparmor_profile.as_str()),
                    (string, string),
                    "{t} with {other:?} to {to}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// docs/conversion.md shows the same tables
// ---------------------------------------------------------------------------------------------

fn show(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "`true`",
        Some(false) => "`false`",
        None => "lost (refused)",
    }
}

fn show_meaning(m: Meaning) -> String {
    match m {
        Some((t, "")) => t.to_string(),
        Some((t, r)) => format!("{t} `{r}`"),
        None => "no profile".into(),
    }
}

fn rendered_tables() -> Vec<String> {
    let mut rows = vec!["| v1 mode → v1alpha1 | POD | CONTAINER | NODE | TARGET |".to_string()];
    for (field, row) in MODES_DOWN {
        rows.push(format!("| `{field}` | {} |", row.map(show).join(" | ")));
    }
    rows.push("| v1alpha1 → v1 mode | `false` | `true` |".into());
    for (field, f, t) in BOOLEANS_UP {
        rows.push(format!("| `host_{field}` | {f} | {t} |"));
    }
    rows.push("| string | seccomp profile | AppArmor profile |".into());
    for (s, seccomp, apparmor) in STRINGS {
        let s = if s.is_empty() { "(empty)".to_string() } else { format!("`{s}`") };
        rows.push(format!("| {s} | {} | {} |", show_meaning(seccomp), show_meaning(apparmor)));
    }
    rows.push("| profile | sent as the string |".into());
    for (t, r, s) in PROFILES {
        rows.push(format!("| {} | `{s}` |", show_meaning(Some((t, r)))));
    }
    rows
}

#[test]
fn the_docs_show_these_tables() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/conversion.md"))
        .expect("docs/conversion.md");
    let lines: Vec<&str> = doc.lines().collect();
    let missing: Vec<String> = rendered_tables().into_iter().filter(|row| !lines.contains(&row.as_str())).collect();
    assert!(missing.is_empty(), "docs/conversion.md lacks these rows of the meaning tables:\n{}", missing.join("\n"));
}
