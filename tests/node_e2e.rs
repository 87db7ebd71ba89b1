//! Kubernetes' node end-to-end suite (`test/e2e_node`, 1.37.2), the one containerd and CRI-O pass
//! before a release: its own etcd and API server, a real kubelet 1.37.2, pods driven through the
//! API (Secrets, ConfigMaps, projected tokens, probes, hooks, init containers, logs, exec), here
//! over containerd 2.4.2 through cri-bridge on its default config.
//!
//! - `conformance_part_through_bridge`: CI's part of `[NodeConformance]`, the pod lifecycle, exec,
//!   logs, probes, hooks and security context tests that finish in a few minutes on 2 cores. Every
//!   one must pass, as each does natively (docs/testing.md has both runs, test by test).
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

/// The tests of CI's part, by the start of their names after the suite's `[sig-node]` prefix
/// (ginkgo's focus is a regular expression over the full name; all are `[NodeConformance]`).
const CI_PART: &[&str] = &[
    // The pod lifecycle.
    "Pods should be submitted and removed",
    "Pods should be updated",
    "Pods should get a host IP",
    "Pods should allow activeDeadlineSeconds to be updated",
    "Container Runtime blackbox test when starting a container that exits should run with the expected status",
    "Container Runtime blackbox test on terminated container should report termination message if TerminationMessagePath is set",
    "Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set",
    "Kubelet when scheduling a busybox command that always fails in a pod should have an terminated reason",
    "InitContainer should invoke init containers on a RestartNever pod",
    // exec and logs, through the API server, the kubelet and the runtime's streaming server.
    "Pods should support remote command execution over websockets",
    "Pods should support retrieving logs from the container over websockets",
    "Kubelet when scheduling a busybox command in a pod should print the output to logs",
    "ContainerLogPath Pod with a container printed log to stdout should print log to correct log path",
    "ContainerLogPath Pod with a container printed log to stdout should print log to correct cri log path",
    // Probes.
    "Probing container should be restarted with a exec \"cat /tmp/health\" liveness probe",
    "Probing container should be restarted with a /healthz http liveness probe",
    "Probing container should be ready immediately after startupProbe succeeds",
    "Probing container should be restarted with a GRPC liveness probe",
    // Hooks.
    "Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook properly",
    "Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop exec hook properly",
    "Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly",
    "Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop http hook properly",
    // The security context.
    "Security Context When creating a container with runAsUser should run the container with uid 65534",
    "Security Context When creating a container with runAsNonRoot should run with an explicit non-root user ID",
    "Security Context When creating a container with runAsNonRoot should not run with an explicit root user ID",
    "Security Context When creating a pod with readOnlyRootFilesystem should run the container with readonly rootfs when readOnlyRootFilesystem=true",
    "Security Context When creating a pod with privileged should run the container as unprivileged when false",
    "Security Context when creating containers with AllowPrivilegeEscalation should not allow privilege escalation when false",
    "Kubelet when scheduling a read only busybox container should not write to root filesystem",
];

fn ci_selection() -> Selection {
    let alternatives: Vec<String> = CI_PART.iter().map(|t| regex_escape(t)).collect();
    Selection {
        focus: format!("({})", alternatives.join("|")),
        label_filter: Some("NodeConformance".into()),
        ..Selection::default()
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
    assert!(
        ran >= CI_PART.len(),
        "the focus ran {ran} tests, fewer than the {} named:\n{}",
        CI_PART.len(),
        results.list()
    );
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
