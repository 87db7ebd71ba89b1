//! What a kubelet of Kubernetes 1.37 sends for an ordinary pod, through cri-bridge, over
//! every runtime row: the in-memory runtime serving v1, serving v1alpha2, and posing as a runtime
//! cri-bridge does not know; real containerd 1.4.13, 1.6.20, 1.7.24, 2.1.9 and 2.4.2. The calls are
//! those of `tests/clients/go/kubelet.go` (`cri-kubelet-v1`, grpc-go 1.82 on k8s.io/cri-api 0.37.2,
//! the kubelet's own stack), field by field as the kubelet 1.37.2 sets them: default security
//! context, `userns_options { mode: NODE }`, seccomp RuntimeDefault, `user_specified_image`, its
//! startup calls, and its image calls for `imagePullPolicy: Always` (`PullImage`, then the size).
//!
//! Each step must be OK; RuntimeConfig may be UNIMPLEMENTED (runtimes before it existed, the
//! kubelet then uses its own cgroup driver); any other step may only be refused with
//! UNIMPLEMENTED naming a field (grpc-go prints codes as `Unimplemented`). RunPodSandbox,
//! CreateContainer and StartContainer must be OK on every row: nothing an ordinary pod needs may be
//! refused.
//!
//! Then the Stream* list calls (`cri-streams-v1`, on cri-api 0.37.2's own v1): through cri-bridge to
//! the in-memory runtime serving v1 every stream is OK and brings what the unary lists hold; to a
//! runtime without them (the in-memory runtime serving v1alpha2, containerd 1.6.20) the first
//! Recv of each ends UNIMPLEMENTED, which is what sends the kubelet to its unary fallback; to
//! containerd 2.4.2, which has them, each ends as it does natively.
//!
//! Each test prints its rows as a markdown table (`cargo test --test kubelet_defaults --
//! --nocapture`). Prerequisites (missing ones fail, never skip): `bash tests/clients/go/build.sh`,
//! and for the containerd rows root and the builds of `containerd_support`.

mod common;
mod containerd_support;

use common::{Bridge, Runtime, TempDir};
use containerd_support::{Build, Containerd};
use cri_bridge::api::v1;
use cri_bridge::CriVersion::{self, V1alpha2, V1};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// The in-memory runtime's preloaded images.
const MEMORY_IMAGE: &str = "docker.io/library/busybox:latest";
const MEMORY_PAUSE: &str = "registry.k8s.io/pause:3.10";

/// The steps an ordinary pod cannot do without.
const POD_STEPS: &[&str] = &["RunPodSandbox", "CreateContainer", "StartContainer"];

/// The steps the kubelet session makes, in order.
const STEPS: &[&str] = &[
    "Version",
    "RuntimeConfig",
    "Status",
    "ImageFsInfo",
    "UpdateRuntimeConfig",
    "RunPodSandbox",
    "PodSandboxStatus",
    "PullImage",
    "ImageStatus(size)",
    "ImageStatus(user)",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "ListContainers",
    "ListPodSandbox",
    "ContainerStats",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// The stream calls `cri-streams-v1` makes, in order.
const STREAMS: &[&str] = &[
    "StreamPodSandboxes",
    "StreamContainers",
    "StreamContainerStats",
    "StreamPodSandboxStats",
    "StreamPodSandboxMetrics",
    "StreamImages",
];

fn client(name: &str) -> PathBuf {
    let binary = Path::new(TOP).join("target/clients/bin").join(name);
    assert!(
        binary.is_file(),
        "{} is missing: run `bash tests/clients/go/build.sh` (bash .ci/run does)",
        binary.display()
    );
    binary
}

/// Runs a client binary to its end and returns its JSON lines.
async fn run_client(name: &str, args: &[String]) -> Vec<Value> {
    let mut command = tokio::process::Command::new(client(name));
    command.args(args).stdin(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .unwrap_or_else(|_| panic!("{name} {args:?} ran over 300 s"))
        .expect("start the client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{name} {args:?} could not run ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

/// A refusal names a field when its message holds a field's name: a snake_case word
/// (`userns_options`, `seccomp_profile_path`, …).
fn names_a_field(message: &str) -> bool {
    message.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).any(|word| {
        let last = word.rsplit('.').next().unwrap_or_default();
        last.contains('_')
            && last.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && last.chars().any(|c| c.is_ascii_lowercase())
    })
}

/// One runtime row's outcome.
struct Row {
    label: String,
    speaks: String,
    steps: Vec<Value>,
}

impl Row {
    /// Everything wrong with this row.
    fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        let names: Vec<String> = self.steps.iter().map(|s| text(s, "step")).collect();
        if names != STEPS {
            failures.push(format!("{}: steps {names:?}, expected {STEPS:?}", self.label));
            return failures;
        }
        for step in &self.steps {
            let (name, code, message) = (text(step, "step"), text(step, "code"), text(step, "message"));
            let allowed = match code.as_str() {
                "OK" => true,
                // RuntimeConfig: a runtime that predates it; otherwise cri-bridge's refusal.
                "UNIMPLEMENTED" | "Unimplemented" => {
                    name == "RuntimeConfig" || (!POD_STEPS.contains(&name.as_str()) && names_a_field(&message))
                }
                _ => false,
            };
            if !allowed {
                failures.push(format!("{}: {name}: {code} {message:?}", self.label));
            }
        }
        for (step, key) in [("ListContainers", "containers"), ("ListPodSandbox", "items")] {
            let found = self.steps.iter().find(|s| text(s, "step") == step && text(s, "code") == "OK");
            if let Some(s) = found {
                let n = s["response"][key].as_array().map(Vec::len);
                if n != Some(1) {
                    failures.push(format!("{}: {step} by the pod's uid label found {n:?} items, not 1", self.label));
                }
            }
        }
        failures
    }

    fn table_line(&self) -> String {
        let ok = self.steps.iter().filter(|s| text(s, "code") == "OK").count();
        let others: Vec<String> = self
            .steps
            .iter()
            .filter(|s| text(s, "code") != "OK")
            .map(|s| {
                format!("{}: {} `{}`", text(s, "step"), text(s, "code"), short(&text(s, "message")).replace('|', "\\|"))
            })
            .collect();
        let pod =
            if POD_STEPS.iter().all(|p| self.steps.iter().any(|s| text(s, "step") == *p && text(s, "code") == "OK")) {
                "served"
            } else {
                "**refused**"
            };
        let verdict = if self.failures().is_empty() { "pass" } else { "**FAIL**" };
        let others = if others.is_empty() { "none".to_string() } else { others.join("; ") };
        format!("| {} | {} | {ok}/{} | {pod} | {others} | {verdict} |", self.label, self.speaks, self.steps.len())
    }
}

/// A message cut for a table cell (the whole one is in the failure report).
fn short(message: &str) -> String {
    const MAX: usize = 240;
    match message.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &message[..at]),
        None => message.to_string(),
    }
}

const TABLE_HEAD: &str = "| runtime | cri-bridge speaks | steps OK | pod (RunPodSandbox, CreateContainer, StartContainer) | not OK (step: code `message`) | result |\n| --- | --- | --- | --- | --- | --- |";

fn print_and_check(title: &str, rows: &[Row]) {
    let lines: Vec<String> = rows.iter().map(Row::table_line).collect();
    println!("\n{title}\n\n{TABLE_HEAD}\n{}\n", lines.join("\n"));
    let failures: Vec<String> = rows.iter().flat_map(Row::failures).collect();
    let details: Vec<String> = rows
        .iter()
        .filter(|r| !r.failures().is_empty())
        .map(|r| {
            format!("--- {} ---\n{}", r.label, r.steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("\n"))
        })
        .collect();
    assert!(failures.is_empty(), "{} failure(s):\n{}\n\n{}", failures.len(), failures.join("\n"), details.join("\n"));
}

/// The kubelet session's arguments, minus the socket.
fn kubelet_args(name: &str, image: &str, pause: &str, root: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-name".into(),
        name.into(),
        "-image".into(),
        image.into(),
        "-pause-image".into(),
        pause.into(),
        "-root".into(),
        root.display().to_string(),
        // A 1.37 kubelet's image calls for the pod's imagePullPolicy.
        "-pull-policy".into(),
        "Always".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A memory-runtime row: the runtime serving `served`, posing as `identity` if given, behind
/// cri-bridge. The kubelet session runs as on a cgroup v2 node (the runtime runs nothing).
async fn memory_row(label: &str, served: CriVersion, identity: Option<(&str, &str)>) -> Row {
    let dir = TempDir::new("kubelet-mem");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[served]).await;
    if let Some((name, version)) = identity {
        runtime.memory.set_identity(name, version);
    }
    let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    static ROW: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!("kubelet-mem-{}-{}", std::process::id(), ROW.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
    let mut args = kubelet_args(&name, MEMORY_IMAGE, MEMORY_PAUSE, &dir.path("kubelet"), &["-cgroup-v2", "true"]);
    args.extend(["-socket".to_string(), bridge.socket.display().to_string()]);
    let steps = run_client("cri-kubelet-v1", &args).await;
    let speaks = common::bridge_speaks(&bridge.socket).await.unwrap_or_else(|| "?".into());
    bridge.stop().await;
    runtime.stop().await;
    Row { label: label.to_string(), speaks, steps }
}

/// A containerd row: the build behind cri-bridge (`auto`), a host-network pod (these machines
/// have no CNI), cgroup v1 or v2 as the machine is, the image pulled from the test registry.
async fn containerd_row(build: Build) -> Row {
    let containerd = Containerd::start_build(build).await;
    let dir = TempDir::new("kubelet-ctd");
    let bridge = Bridge::start(common::config(&dir, &containerd.socket, None)).await;
    let label = format!("containerd {}", build.runtime_version());
    let name = format!("kubelet-{}-{}", std::process::id(), build.runtime_version().replace(['.', '~', '+'], "-"));
    // The kubelet's cgroupfs form of a BestEffort pod's parent, under a root of the test's own.
    let cgroup_root = format!("cri-bridge-kubelet-{}", std::process::id());
    let parent = format!("/{cgroup_root}/kubepods/besteffort/pod-{name}");
    let mut args = kubelet_args(
        &name,
        &containerd.pullable_image(),
        containerd_support::PAUSE_IMAGE,
        &dir.path("kubelet"),
        &["-host-network", "-cgroup-v2", "auto", "-cgroup-parent", &parent],
    );
    args.extend(["-socket".to_string(), bridge.socket.display().to_string()]);
    let steps = run_client("cri-kubelet-v1", &args).await;
    let speaks = common::bridge_speaks(&bridge.socket).await.unwrap_or_else(|| "?".into());
    bridge.stop().await;
    let row = Row { label, speaks, steps };
    if !row.failures().is_empty() {
        eprintln!("{}", containerd.log_tail(40));
    }
    drop(containerd);
    remove_cgroups(&cgroup_root);
    row
}

/// Removes the (by now empty) cgroup directories runc made under `/<root>` in every hierarchy.
fn remove_cgroups(root: &str) {
    fn remove(dir: &Path) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove(&entry.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let base = Path::new("/sys/fs/cgroup");
    remove(&base.join(root));
    for hierarchy in std::fs::read_dir(base).into_iter().flatten().flatten() {
        remove(&hierarchy.path().join(root));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_pod_over_the_in_memory_runtime() {
    let rows = vec![
        memory_row("in-memory runtime serving v1", V1, None).await,
        memory_row("in-memory runtime serving v1alpha2", V1alpha2, None).await,
        memory_row(
            "unknown runtime (in-memory, reports acme-runtime 3.1.4), serving v1",
            V1,
            Some(("acme-runtime", "3.1.4")),
        )
        .await,
        memory_row(
            "unknown runtime (in-memory, reports acme-runtime 3.1.4), serving v1alpha2",
            V1alpha2,
            Some(("acme-runtime", "3.1.4")),
        )
        .await,
    ];
    print_and_check("kubelet 1.29–1.36 default pod, in-memory runtime rows", &rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_pod_over_containerd_1_4_1_6_1_7() {
    let mut rows = Vec::new();
    for build in [Build::V1_4, Build::System, Build::V1_7] {
        let row = containerd_row(build).await;
        // Printed as it comes, so that a later row's harness failure hides nothing.
        println!("{}", row.table_line());
        rows.push(row);
    }
    print_and_check("kubelet 1.29–1.36 default pod, containerd rows", &rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_pod_over_containerd_2_1() {
    let rows = vec![containerd_row(Build::V2_1).await];
    print_and_check("kubelet 1.29–1.36 default pod, containerd 2.1 row", &rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_pod_over_containerd_2_4() {
    let rows = vec![containerd_row(Build::V2_4).await];
    print_and_check("kubelet 1.29–1.36 default pod, containerd 2.4 row", &rows);
}

/// The streams client's lines, by call.
async fn streams(socket: &Path) -> Vec<Value> {
    let lines = run_client("cri-streams-v1", &["-socket".to_string(), socket.display().to_string()]).await;
    let names: Vec<String> = lines.iter().map(|l| text(l, "step")).collect();
    assert_eq!(names, STREAMS, "the streams client's calls");
    lines
}

fn streams_table(title: &str, rows: &[(String, Vec<Value>)]) {
    let mut out =
        format!("\n{title}\n\n| runtime | {} |\n| --- |{}\n", STREAMS.join(" | "), " --- |".repeat(STREAMS.len()));
    for (label, lines) in rows {
        let cells: Vec<String> = lines
            .iter()
            .map(|l| if text(l, "code") == "OK" { format!("OK, {} items", l["items"]) } else { text(l, "code") })
            .collect();
        out.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    }
    println!("{out}");
}

/// Three pods of two running containers each, made directly in the in-memory runtime.
fn populate(memory: &cri_bridge::memory::MemoryRuntime) {
    for p in 0..3 {
        let config = v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: format!("stream-pod-{p}"),
                uid: format!("stream-uid-{p}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let pod = memory
            .run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(config.clone()), ..Default::default() })
            .unwrap()
            .pod_sandbox_id;
        for c in 0..2 {
            let container = v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata { name: format!("c{c}"), attempt: 0 }),
                image: Some(v1::ImageSpec { image: MEMORY_IMAGE.into(), ..Default::default() }),
                ..Default::default()
            };
            let id = memory
                .create_container(v1::CreateContainerRequest {
                    pod_sandbox_id: pod.clone(),
                    config: Some(container),
                    sandbox_config: Some(config.clone()),
                })
                .unwrap()
                .container_id;
            memory.start_container(v1::StartContainerRequest { container_id: id }).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_streams_pass_or_end_unimplemented() {
    let mut rows = Vec::new();
    let mut failures = Vec::new();

    // A runtime that has them: every stream OK, with what the unary lists hold.
    let dir = TempDir::new("streams-v1");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    populate(&runtime.memory);
    let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    let lines = streams(&bridge.socket).await;
    let m = &runtime.memory;
    let expected = [
        m.list_pod_sandbox(Default::default()).unwrap().items.len(),
        m.list_containers(Default::default()).unwrap().containers.len(),
        m.list_container_stats(Default::default()).unwrap().stats.len(),
        m.list_pod_sandbox_stats(Default::default()).unwrap().stats.len(),
        m.list_pod_sandbox_metrics(Default::default()).unwrap().pod_metrics.len(),
        m.list_images(Default::default()).unwrap().images.len(),
    ];
    assert_eq!(expected[..2], [3, 6], "the in-memory runtime holds the 3 pods and 6 containers made");
    for (line, want) in lines.iter().zip(expected) {
        let ok = text(line, "code") == "OK" && text(line, "end_code") == "OK" && line["items"] == want;
        if !ok {
            failures.push(format!("in-memory v1: {line}: expected OK and {want} items"));
        }
    }
    rows.push(("in-memory runtime serving v1".to_string(), lines));
    bridge.stop().await;
    runtime.stop().await;

    // Runtimes that lack them: the first Recv ends UNIMPLEMENTED.
    let unimplemented = |label: &str, lines: &[Value], failures: &mut Vec<String>| {
        for line in lines {
            if text(line, "code") != "Unimplemented" || line["items"] != 0 {
                failures.push(format!("{label}: {line}: expected the first Recv to end UNIMPLEMENTED"));
            }
        }
    };
    let dir = TempDir::new("streams-v1a2");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1alpha2]).await;
    populate(&runtime.memory);
    let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    let lines = streams(&bridge.socket).await;
    unimplemented("in-memory v1alpha2", &lines, &mut failures);
    rows.push(("in-memory runtime serving v1alpha2".to_string(), lines));
    bridge.stop().await;
    runtime.stop().await;

    let containerd = Containerd::start_build(Build::System).await;
    let dir = TempDir::new("streams-ctd");
    let bridge = Bridge::start(common::config(&dir, &containerd.socket, None)).await;
    let lines = streams(&bridge.socket).await;
    let label = format!("containerd {}", Build::System.runtime_version());
    unimplemented(&label, &lines, &mut failures);
    rows.push((label, lines));
    bridge.stop().await;
    drop(containerd);

    // A runtime that has them (containerd 2.4.2): each stream through cri-bridge ends as it does
    // natively, with as many items.
    let containerd = Containerd::start_build(Build::V2_4).await;
    let native = streams(&containerd.socket).await;
    let dir = TempDir::new("streams-ctd24");
    let bridge = Bridge::start(common::config(&dir, &containerd.socket, None)).await;
    let lines = streams(&bridge.socket).await;
    let label = format!("containerd {}", Build::V2_4.runtime_version());
    for (through, native) in lines.iter().zip(&native) {
        let same = ["code", "end_code"].iter().all(|k| text(through, k) == text(native, k))
            && through["items"] == native["items"];
        if !same || text(native, "code") != "OK" {
            failures
                .push(format!("{label}: {through} through cri-bridge, {native} natively: expected OK, as natively"));
        }
    }
    rows.push((format!("{label} natively"), native));
    rows.push((label, lines));
    bridge.stop().await;
    drop(containerd);

    streams_table("Stream* list calls through cri-bridge (first Recv)", &rows);
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// containerd 1.4 decodes the 1.19 schema: a kubelet on a cgroup v2 node sends
/// `LinuxContainerResources.unified` (1.22: `memory.oom.group`, `memory.swap.max`), which 1.4
/// would drop, so the container would run without them. cri-bridge refuses CreateContainer
/// naming the field (the README says how to accept it), and serves the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cgroup_v2_kubelet_on_containerd_1_4_is_refused_naming_unified() {
    let label = "containerd 1.4.13 (in-memory, reports containerd 1.4.13~ds1), kubelet on cgroup v2";
    let row = memory_row(label, V1alpha2, Some(("containerd", "1.4.13~ds1"))).await;
    println!("\n{TABLE_HEAD}\n{}\n", row.table_line());
    let step = |name: &str| row.steps.iter().find(|s| text(s, "step") == name).cloned().unwrap_or_default();
    assert_eq!(text(&step("RunPodSandbox"), "code"), "OK", "{:?}", row.steps);
    let create = step("CreateContainer");
    assert_eq!(text(&create, "code"), "Unimplemented", "{create}");
    let message = text(&create, "message");
    assert!(message.contains("config.linux.resources.unified") && message.contains("1.22"), "{message}");
    assert!(
        !message.contains("masked_paths") && !message.contains("hugepage"),
        "only unified is beyond 1.19: {message}"
    );
}
