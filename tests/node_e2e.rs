//! Kubernetes' node end-to-end suite (`test/e2e_node`, 1.37.2), the one containerd and CRI-O pass
//! before a release: its own etcd and API server, a real kubelet 1.37.2, pods driven through the
//! API (Secrets, ConfigMaps, projected tokens, probes, hooks, init containers, logs, exec), here
//! over containerd 2.4.2 through cri-bridge on its default config.
//!
//! - `conformance_part_through_bridge`: CI's part of `[NodeConformance]`, the pod lifecycle, exec,
//!   logs, probes, hooks and security context tests (`CI_GROUPS`) that finish in a few minutes on
//!   2 cores. Every one must pass, as each does natively (docs/testing.md has both runs, test by
//!   test).
//! - `suite_from_env` (ignored; `tools/node-e2e.sh` runs it): any part of the suite over any
//!   runtime, directly or through cri-bridge, its results written as a `PASS/FAIL/SKIP` list.
//!
//! Needs root, the peers of `tools/build-node-e2e.sh` and the packages `.ci/run` installs; fails,
//! never skips, without them.

mod common;
mod docker_support;
mod node_e2e_support;

use docker_support::containerd_support::Build;
use node_e2e_support::{run_suite, Node, Outcome, Runtime, Selection};
use std::path::PathBuf;

/// CI's part of `[NodeConformance]`: its tests in these groups (the start of their names after
/// `[sig-node] `): the pod lifecycle, exec and logs over the API server, probes, hooks and the
/// security context. 71 tests, about 4 minutes on 2 cores with 8 at once.
const CI_GROUPS: &[&str] = &[
    "Pods ",
    "Container Runtime",
    "Kubelet when scheduling",
    "InitContainer",
    "ContainerLogPath",
    "Probing container",
    "Container Lifecycle Hook",
    "Restartable Init Container Lifecycle Hook",
    "Lifecycle Sleep Hook",
    "Lifecycle sleep action",
    "Security Context",
];

/// Left out of CI's part, for time: the probe tests that watch a container for four minutes to
/// see that it is *not* restarted, or how its restart count grows (they run with the script).
const CI_LEFT_OUT: &[&str] = &[r"should \*not\* be restarted", "should have monotonically increasing restart count"];

/// At least this many tests in CI's part (a changed name that selects nothing fails the test).
const CI_AT_LEAST: usize = 65;

fn ci_selection() -> Selection {
    let groups: Vec<String> = CI_GROUPS.iter().map(|g| regex_escape(g)).collect();
    let default = Selection::default();
    Selection {
        focus: format!(r"\[sig-node\] ({})", groups.join("|")),
        skip: format!("{}|{}", default.skip, CI_LEFT_OUT.join("|")),
        label_filter: Some("NodeConformance".into()),
        ..default
    }
}

/// `s` as a regular expression matching itself (Go's RE2 syntax).
fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Where a run's files go: target/node-e2e/LABEL.
fn run_dir(label: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/node-e2e").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_part_through_bridge() {
    let runtime = Runtime::Containerd(Build::V2_4);
    let dir = run_dir("ci-containerd-2.4.2-through-bridge");
    let node = Node::start(&runtime, true, &dir).await;
    let results = tokio::task::block_in_place(|| run_suite(&node, &ci_selection(), &dir));
    drop(node);
    eprintln!(
        "node e2e (CI part) over containerd 2.4.2 through cri-bridge: {} passed, {} failed, {} skipped in {:?}",
        results.count(Outcome::Pass),
        results.count(Outcome::Fail),
        results.count(Outcome::Skip),
        results.took
    );
    let ran = results.count(Outcome::Pass) + results.count(Outcome::Fail);
    assert!(ran >= CI_AT_LEAST, "CI's part ran {ran} tests, fewer than {CI_AT_LEAST}:\n{}", results.list());
    let failed: Vec<String> = results
        .failures
        .iter()
        .map(|(name, why)| format!("FAIL {name}\n    {}", why.replace('\n', "\n    ")))
        .collect();
    assert!(failed.is_empty(), "through cri-bridge:\n{}\n(all: {})", failed.join("\n"), results.dir.display());
}

/// `tools/node-e2e.sh`: NODE_E2E_RUNTIME (see `Runtime::parse`), NODE_E2E_BRIDGE=1 to run through
/// cri-bridge, NODE_E2E_FOCUS / NODE_E2E_SKIP (ginkgo regular expressions; default: the
/// conformance selection of containerd's CI), NODE_E2E_OUT (default target/node-e2e/LABEL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by tools/node-e2e.sh, which sets what to run"]
async fn suite_from_env() {
    let name = std::env::var("NODE_E2E_RUNTIME").expect("NODE_E2E_RUNTIME: which runtime (tools/node-e2e.sh)");
    let runtime = Runtime::parse(&name).unwrap_or_else(|e| panic!("NODE_E2E_RUNTIME: {e}"));
    let through_bridge = std::env::var("NODE_E2E_BRIDGE").is_ok_and(|v| v == "1") || runtime == Runtime::Routed;
    let mut selection = Selection::default();
    if let Ok(focus) = std::env::var("NODE_E2E_FOCUS") {
        selection.focus = focus;
    }
    if let Ok(skip) = std::env::var("NODE_E2E_SKIP") {
        selection.skip = skip;
    }
    if let Ok(procs) = std::env::var("NODE_E2E_PROCS") {
        selection.procs = procs.parse().unwrap_or_else(|_| panic!("NODE_E2E_PROCS: a number, not {procs:?}"));
    }
    let label = format!("{}-{}", runtime.label(), if through_bridge { "through-bridge" } else { "direct" });
    let dir = match std::env::var("NODE_E2E_OUT") {
        Ok(out) => {
            let dir = PathBuf::from(out);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        }
        Err(_) => run_dir(&label),
    };
    let node = Node::start(&runtime, through_bridge, &dir).await;
    let results = tokio::task::block_in_place(|| run_suite(&node, &selection, &dir));
    drop(node);
    println!(
        "node e2e {label}: {} passed, {} failed, {} skipped in {} s; list: {}",
        results.count(Outcome::Pass),
        results.count(Outcome::Fail),
        results.count(Outcome::Skip),
        results.took.as_secs(),
        dir.join("results.txt").display()
    );
}
