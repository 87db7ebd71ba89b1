//! Real CRI client libraries through cri-bridge over real containerd builds: the grpc-go
//! sessions of `tests/clients/go` (crictl's and the kubelet's gRPC, dialling the socket path, so
//! the path is the `:authority`) and the grpc C-core (grpcio) sessions of
//! `tests/clients/python` (a percent-encoded path as `:authority`), each version of each.
//!
//! Every session through cri-bridge is compared with the same session run natively against a
//! runtime that speaks the client's version (containerd itself, or for v1alpha1, which no
//! containerd serves, the in-memory runtime serving v1alpha1): every step must give the same
//! gRPC code and set the same fields, and a few answers must mean the same (the exec output, the
//! pod's network namespace, the version the caller is told). A difference fails the test unless
//! `EXPECTED_DIFFERENCES` lists it with its reason. A failing step prints the call, its status and
//! cri-bridge's log lines for that call.
//!
//! cri-bridge runs as its own process, the binary operators run, from a YAML config.
//! Prerequisites (`bash .ci/run` provides all of them; missing ones fail, never skip): root, the
//! containerd builds of `containerd_support`, `tests/clients/go/build.sh` and
//! `tests/clients/python/setup.sh`.

mod common;
mod containerd_support;

use common::{Runtime, TempDir};
use containerd_support::{Build, Containerd, BUSYBOX_IMAGE};
use cri_bridge::api::v1;
use cri_bridge::CriVersion::{self, V1alpha1, V1alpha2, V1};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// The gRPC implementations under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    /// grpc-go 1.33 (Debian bookworm), as in crictl and the kubelet.
    Go,
    /// grpc C-core through Python's grpcio.
    CCore,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Go => "grpc-go",
            Client::CCore => "grpcio",
        }
    }

    /// The session's command line, minus the socket.
    fn command(self, version: CriVersion, image: &str, name: &str) -> tokio::process::Command {
        let top = Path::new(TOP);
        let mut command = match self {
            Client::Go => {
                let binary = top.join(format!("target/clients/bin/cri-session-{version}"));
                assert!(
                    binary.is_file(),
                    "{} is missing: run `bash tests/clients/go/build.sh` (bash .ci/run does)",
                    binary.display()
                );
                tokio::process::Command::new(binary)
            }
            Client::CCore => {
                let python = top.join("target/clients/venv/bin/python");
                assert!(
                    python.is_file(),
                    "{} is missing: run `bash tests/clients/python/setup.sh` (bash .ci/run does)",
                    python.display()
                );
                let mut command = tokio::process::Command::new(python);
                // C-core's retry decisions and the frames it reads go to stderr: a call it retried
                // on its own (a transparent retry) is then named in a failure's report.
                command.env("GRPC_TRACE", "retry,http").env("GRPC_VERBOSITY", "debug");
                command.arg(top.join("tests/clients/python/cri_client.py")).args(["--version", version.as_str()]);
                command
            }
        };
        let dash = if self == Client::Go { "-" } else { "--" };
        command.arg(format!("{dash}image")).arg(image).arg(format!("{dash}name")).arg(name);
        command
    }
}

/// One step of a session: one RPC and what came back.
#[derive(Debug)]
struct Step {
    step: String,
    code: String,
    message: String,
    response: Value,
}

/// Runs one session against `socket` and parses its steps; also the client's own account of
/// calls it retried or saw refused, reset or sent away (C-core's trace; empty for grpc-go).
async fn run_session(
    client: Client,
    version: CriVersion,
    socket: &Path,
    image: &str,
    name: &str,
) -> (Vec<Step>, String) {
    let mut command = client.command(version, image, name);
    let dash = if client == Client::Go { "-" } else { "--" };
    command.arg(format!("{dash}socket")).arg(socket).stdin(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(180), command.output())
        .await
        .unwrap_or_else(|_| panic!("the {} {version} session on {} ran over 180 s", client.name(), socket.display()))
        .expect("start the client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the {} {version} session could not run ({}):\n{stdout}\n{}",
        client.name(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let steps = stdout
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a step ({e}): {line}"));
            Step {
                step: v["step"].as_str().unwrap_or_default().to_string(),
                code: v["code"].as_str().unwrap_or_default().to_string(),
                message: v["message"].as_str().unwrap_or_default().to_string(),
                response: v["response"].clone(),
            }
        })
        .collect();
    (steps, notable_client_lines(&String::from_utf8_lossy(&output.stderr)))
}

/// The lines of a client's stderr that tell of a call failing or sent again below the
/// application: a retry, a GOAWAY or RST_STREAM, a status other than OK (at most 60).
fn notable_client_lines(stderr: &str) -> String {
    let notable = |line: &&str| {
        let failed = line.contains("call finished, status=") && !line.contains("status=OK");
        failed || ["GOAWAY", "RST_STREAM", "REFUSED", "ransparent", "retrying"].iter().any(|word| line.contains(word))
    };
    stderr.lines().filter(notable).take(60).collect::<Vec<_>>().join("\n")
}

/// cri-bridge as operators run it: its own process, a YAML config, debug logs to a file.
struct BridgeProcess {
    socket: PathBuf,
    log: PathBuf,
    child: tokio::process::Child,
    _dir: TempDir,
}

impl BridgeProcess {
    async fn start(name: &str, backend: &Path) -> BridgeProcess {
        let dir = TempDir::new(name);
        let socket = dir.path("bridge.sock");
        let config = dir.path("config.yaml");
        let yaml = format!(
            "listen:\n  path: {}\nbackend:\n  endpoint: unix://{}\n  version: auto\nlog:\n  level: debug\n",
            socket.display(),
            backend.display()
        );
        std::fs::write(&config, yaml).unwrap();
        let log = dir.path("bridge.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("start cri-bridge");
        common::wait_for_socket(&socket).await;
        BridgeProcess { socket, log, child, _dir: dir }
    }

    /// cri-bridge's log lines about `method`.
    fn log_lines_for(&self, method: &str) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let needle = format!("/{method}");
        // The method's lines, warnings, and what happened to connections (no rpc named).
        let lines: Vec<&str> =
            text.lines().filter(|l| l.contains(&needle) || l.contains(" WARN ") || !l.contains("rpc=")).collect();
        format!("--- cri-bridge log for {method} ({}) ---\n{}\n---", self.log.display(), lines.join("\n"))
    }

    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
    }
}

/// A known, explained difference between a native session and the same session through
/// cri-bridge: `(client version, runtime through cri-bridge (None: any), step, field, why)`.
type Expected = (CriVersion, Option<Build>, &'static str, &'static str, &'static str);

const EXPECTED_DIFFERENCES: &[Expected] = &[
    // A v1 client over containerd 1.4.13, against the same client over containerd 1.6: 1.4 is built
    // on the CRI of Kubernetes 1.19 and does not fill what later CRIs added. Nothing is lost in
    // cri-bridge: containerd 1.4 sends none of these.
    (V1, Some(Build::V1_4), "ContainerStatus", "status.resources", OLD_RUNTIME),
    (V1, Some(Build::V1_4), "ContainerStats", "stats.memory.page_faults", OLD_RUNTIME),
    (V1, Some(Build::V1_4), "ContainerStats", "stats.memory.rss_bytes", OLD_RUNTIME),
    (V1, Some(Build::V1_4), "ContainerStats", "stats.memory.usage_bytes", OLD_RUNTIME),
    // A v1alpha1 client, against a v1alpha2 client of the same containerd: fields v1alpha1 lacks.
    (V1alpha1, None, "PodSandboxStatus", "status.linux.namespaces.options.host_network", BOOLEANS),
    (V1alpha1, None, "PodSandboxStatus", "status.linux.namespaces.options.network", BOOLEANS),
    (V1alpha1, None, "ImageFsInfo", "image_filesystems[].fs_id", STORAGE_ID),
    (V1alpha1, None, "ContainerStats", "stats.writable_layer.fs_id", STORAGE_ID),
    (V1alpha1, None, "ContainerStatus", "status.resources", NOT_IN_V1ALPHA1),
    (V1alpha1, None, "ContainerStats", "stats.memory.page_faults", NOT_IN_V1ALPHA1),
    (V1alpha1, None, "ContainerStats", "stats.memory.rss_bytes", NOT_IN_V1ALPHA1),
    (V1alpha1, None, "ContainerStats", "stats.memory.usage_bytes", NOT_IN_V1ALPHA1),
    (V1alpha1, Some(Build::V1_7), "ListImages", "images[].pinned", NOT_IN_V1ALPHA1),
    // Over containerd 2.4.2 the v1alpha1 session's fields are compared with 1.7.24's native
    // v1alpha2 session (2.4 serves no v1alpha2), which pins the sandbox image as 2.4 does.
    (V1alpha1, Some(Build::V2_4), "ListImages", "images[].pinned", NOT_IN_V1ALPHA1),
];

const OLD_RUNTIME: &str = "containerd 1.4 (CRI of Kubernetes 1.19) does not report it";
const BOOLEANS: &str = "the same host network, told as v1alpha1's host_network instead of network: NODE";
const STORAGE_ID: &str = "v1alpha1's field 2 is a storage UUID, not a mountpoint: never reinterpreted (a counted loss)";
const NOT_IN_V1ALPHA1: &str = "v1alpha1 has no such field";

/// Fields whose values are maps: their keys are compared, not descended into.
const MAPS: &[&str] = &["info", "labels", "annotations", "extra", "features"];

/// Fields whose presence depends on timing or on the runtime build, not on the path a call took:
/// usage counters that are zero (hence absent) until sampled.
const TIMING: &[&str] = &["usage_nano_cores", "usage_core_nano_seconds", "timestamp", "working_set_bytes"];

/// The paths of the fields a response sets, `a.b[].c`, maps as their keys.
fn field_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            let is_map = MAPS.iter().any(|m| prefix.ends_with(m));
            for (key, child) in map {
                if is_set(child) && !TIMING.contains(&key.as_str()) {
                    let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                    if is_map {
                        out.insert(format!("{prefix}{{}}"));
                    } else {
                        out.insert(path.clone());
                        field_paths(child, &path, out);
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                field_paths(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// What encoding/json's and MessageToDict's "omit defaults" leave out.
fn is_set(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A comparison's findings: the report's lines and the failures.
#[derive(Default)]
struct Findings {
    report: Vec<String>,
    failures: Vec<String>,
}

fn step_names(steps: &[Step]) -> Vec<&str> {
    steps.iter().map(|s| s.step.as_str()).collect()
}

/// Every step through cri-bridge gives the native step's gRPC code.
fn compare_codes(native: &[Step], bridged: &[Step], bridge: &BridgeProcess, findings: &mut Findings) {
    if step_names(native) != step_names(bridged) {
        let (n, b) = (step_names(native), step_names(bridged));
        findings.failures.push(format!("different steps: native {n:?}, through cri-bridge {b:?}"));
        return;
    }
    for (n, b) in native.iter().zip(bridged) {
        findings.report.push(format!("{:<20} native {:<14} through cri-bridge {}", n.step, n.code, b.code));
        if n.code != b.code {
            findings.failures.push(format!(
                "{}: native {} {:?}, through cri-bridge {} {:?}\n{}",
                n.step,
                n.code,
                n.message,
                b.code,
                b.message,
                bridge.log_lines_for(&n.step)
            ));
        }
    }
}

/// Every step through cri-bridge sets the fields `reference` sets, but for the differences
/// `EXPECTED_DIFFERENCES` explains.
fn compare_fields(version: CriVersion, build: Build, reference: &[Step], bridged: &[Step], findings: &mut Findings) {
    for (n, b) in reference.iter().zip(bridged).filter(|(n, b)| n.code == "OK" && b.code == "OK") {
        let (mut reference_fields, mut bridged_fields) = (BTreeSet::new(), BTreeSet::new());
        field_paths(&n.response, "", &mut reference_fields);
        field_paths(&b.response, "", &mut bridged_fields);
        for path in reference_fields.symmetric_difference(&bridged_fields) {
            let side = if reference_fields.contains(path) { "only natively" } else { "only through cri-bridge" };
            let expected = EXPECTED_DIFFERENCES.iter().find(|(v, r, step, field, _)| {
                let covers = path == field || path.strip_prefix(*field).is_some_and(|rest| rest.starts_with('.'));
                *v == version && r.is_none_or(|r| r == build) && *step == n.step && covers
            });
            match expected {
                Some((.., why)) => findings.report.push(format!("  {}: {path} set {side}: {why}", n.step)),
                None => findings.failures.push(format!(
                    "{}: field {path} set {side}\n  natively: {}\n  through cri-bridge: {}",
                    n.step, n.response, b.response
                )),
            }
        }
    }
}

/// Answers whose meaning is fixed whatever the runtime: checked on the session through
/// cri-bridge.
fn meaning_failures(client: Client, version: CriVersion, steps: &[Step]) -> Vec<String> {
    let mut failures = Vec::new();
    let find = |name: &str| steps.iter().find(|s| s.step == name).filter(|s| s.code == "OK");
    let mut check = |name: &str, ok: bool, what: &str| {
        if !ok {
            let step = steps.iter().find(|s| s.step == name);
            failures.push(format!("{name}: {what}; got {step:?}"));
        }
    };
    if let Some(s) = find("Version") {
        check("Version", s.response["runtime_api_version"] == version.as_str(), "runtime_api_version is the caller's");
    }
    if let Some(s) = find("ExecSync") {
        // Bytes come as base64 from both clients: "hello\n".
        check("ExecSync", s.response["stdout"] == "aGVsbG8K", "stdout is hello");
    }
    if let Some(s) = find("Exec") {
        let url = s.response["url"].as_str().unwrap_or_default();
        check("Exec", url.starts_with("http://127.0.0.1:") || url.starts_with("http://"), "an exec URL");
    }
    if let Some(s) = find("ListPodSandbox") {
        check(
            "ListPodSandbox",
            s.response["items"].as_array().map(Vec::len) == Some(1),
            "the label filter finds our pod",
        );
    }
    if let Some(s) = find("ListContainers") {
        check("ListContainers", s.response["containers"].as_array().map(Vec::len) == Some(1), "our one container");
    }
    if let Some(s) = find("PodSandboxStatus") {
        let options = &s.response["status"]["linux"]["namespaces"]["options"];
        let host_network = if version == V1alpha1 {
            options["host_network"] == true
        } else {
            options["network"] == 2 || options["network"] == "NODE"
        };
        check("PodSandboxStatus", host_network, "the pod is on the host network as asked");
    }
    if let Some(s) = find("Status").filter(|_| version == V1alpha1) {
        // A v1alpha1-era client decodes every info value as JSON.
        let info = s.response["info"].as_object().cloned().unwrap_or_default();
        let bad: Vec<&String> = info
            .iter()
            .filter(|(_, v)| serde_json::from_str::<Value>(v.as_str().unwrap_or("")).is_err())
            .map(|(k, _)| k)
            .collect();
        check("Status", bad.is_empty(), &format!("every info value is JSON (not: {bad:?})"));
    }
    if client == Client::CCore && version == V1 {
        if let Some(s) = find("GetContainerEvents") {
            let types = s.response["event_types"].as_array().cloned().unwrap_or_default();
            check("GetContainerEvents", !types.is_empty(), "events of our container arrived on the stream");
        }
    }
    failures
}

/// Where a native session runs: a containerd build's own socket, or the in-memory runtime
/// serving v1alpha1 (no containerd serves it), with `image` already pulled.
enum Native<'a> {
    Containerd(&'a Containerd),
    Memory,
}

async fn native_session(client: Client, version: CriVersion, native: Native<'_>, image: &str) -> Vec<Step> {
    let name = format!("{}-{version}-native", client.name());
    match native {
        Native::Containerd(containerd) => run_session(client, version, &containerd.socket, image, &name).await.0,
        Native::Memory => {
            let dir = TempDir::new("native-v1alpha1");
            let memory = Runtime::start(&dir.path("memory.sock"), &[V1alpha1]).await;
            let spec = v1::ImageSpec { image: image.to_string(), ..Default::default() };
            memory.memory.pull_image(v1::PullImageRequest { image: Some(spec), ..Default::default() }).unwrap();
            let (steps, _) = run_session(client, version, &dir.path("memory.sock"), image, &name).await;
            memory.stop().await;
            steps
        }
    }
}

/// The image a client's session runs: the registry's, pulled by the session (grpc-go), or the
/// one imported at start (the C-core session does not pull).
fn image_for(client: Client, runtime: &Containerd) -> String {
    match client {
        Client::Go => runtime.pullable_image(),
        Client::CCore => BUSYBOX_IMAGE.to_string(),
    }
}

/// Runs `client`'s `version` session through cri-bridge over `runtime` and checks it against
/// `native`: the same codes, the fields `fields_of` sets (`native` itself when `None`), the
/// fixed meanings. Panics with the whole report on any unexplained difference.
async fn through_bridge(
    client: Client,
    version: CriVersion,
    runtime: &Containerd,
    native: &[Step],
    fields_of: Option<&[Step]>,
) {
    through_bridge_beside(client, version, runtime, native, fields_of, 0).await
}

/// [`through_bridge`], with `stalled` v1 `GetContainerEvents` watchers on another connection
/// to the same cri-bridge that take none of their events (their HTTP/2 window is 0) throughout.
async fn through_bridge_beside(
    client: Client,
    version: CriVersion,
    runtime: &Containerd,
    native: &[Step],
    fields_of: Option<&[Step]>,
    stalled: usize,
) {
    let build = runtime.build;
    let label = format!("{} {version} → cri-bridge → containerd {}", client.name(), build.runtime_version());
    let bridge = BridgeProcess::start("realclient", &runtime.socket).await;
    let watchers = stalled_watchers(&bridge.socket, stalled).await;
    let name = format!("{}-{version}-bridged", client.name());
    let (bridged, client_lines) =
        run_session(client, version, &bridge.socket, &image_for(client, runtime), &name).await;
    drop(watchers);
    let mut findings = Findings::default();
    compare_codes(native, &bridged, &bridge, &mut findings);
    compare_fields(version, build, fields_of.unwrap_or(native), &bridged, &mut findings);
    findings.failures.extend(meaning_failures(client, version, &bridged));
    println!("{label}\n{}", findings.report.join("\n"));
    bridge.stop().await;
    let Findings { report, failures } = findings;
    assert!(
        failures.is_empty(),
        "{label}: {} difference(s)\n{}\n\n{}\n--- the client's retries, resets and failures ---\n{client_lines}",
        failures.len(),
        failures.join("\n\n"),
        report.join("\n")
    );
}

/// `count` event watchers on one connection whose window is 0: every event the runtime sends
/// them stays with cri-bridge. Dropped to end them.
async fn stalled_watchers(
    socket: &Path,
    count: usize,
) -> Option<(h2::client::SendRequest<bytes::Bytes>, Vec<h2::client::ResponseFuture>)> {
    if count == 0 {
        return None;
    }
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (send, connection) = h2::client::Builder::new().initial_window_size(0).handshake(stream).await.unwrap();
    tokio::spawn(connection);
    let mut watchers = Vec::new();
    for _ in 0..count {
        let mut ready = send.clone().ready().await.unwrap();
        let request = http::Request::post("http://localhost/runtime.v1.RuntimeService/GetContainerEvents")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut body) = ready.send_request(request, false).unwrap();
        body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true).unwrap();
        watchers.push(response);
    }
    Some((send, watchers))
}

/// The older clients over a containerd serving v1 (cri-bridge converts to v1): v1alpha2 against
/// the same containerd's own v1alpha2; v1alpha1 against the in-memory runtime for its codes and
/// against that native v1alpha2 session for its fields (the same runtime answering a version
/// that has every v1alpha1 field).
async fn older_clients(client: Client, runtime: &Containerd) {
    let image = image_for(client, runtime);
    let v1alpha2 = native_session(client, V1alpha2, Native::Containerd(runtime), &image).await;
    through_bridge(client, V1alpha2, runtime, &v1alpha2, None).await;
    let v1alpha1 = native_session(client, V1alpha1, Native::Memory, &image).await;
    through_bridge(client, V1alpha1, runtime, &v1alpha1, Some(&v1alpha2)).await;
}

/// [`older_clients`] over a containerd that serves v1 only (2.4.2): no native v1alpha2 session of
/// that build exists, so the v1alpha2 session through cri-bridge is compared with the native
/// v1alpha2 session on `reference` (containerd 1.7.24, the newest build serving v1alpha2), and
/// v1alpha1's as in `older_clients`.
async fn older_clients_over_v1_only(client: Client, runtime: &Containerd, reference: &Containerd) {
    let v1alpha2 = native_session(client, V1alpha2, Native::Containerd(reference), &image_for(client, reference)).await;
    through_bridge(client, V1alpha2, runtime, &v1alpha2, None).await;
    let v1alpha1 = native_session(client, V1alpha1, Native::Memory, &image_for(client, runtime)).await;
    through_bridge(client, V1alpha1, runtime, &v1alpha1, Some(&v1alpha2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_every_version_over_containerd_2_4() {
    let containerd = Containerd::start_build(Build::V2_4).await;
    let image = image_for(Client::Go, &containerd);
    let native = native_session(Client::Go, V1, Native::Containerd(&containerd), &image).await;
    through_bridge(Client::Go, V1, &containerd, &native, None).await;
    let reference = Containerd::start_build(Build::V1_7).await;
    older_clients_over_v1_only(Client::Go, &containerd, &reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_every_version_over_containerd_2_4() {
    let containerd = Containerd::start_build(Build::V2_4).await;
    let native = native_session(Client::CCore, V1, Native::Containerd(&containerd), BUSYBOX_IMAGE).await;
    through_bridge(Client::CCore, V1, &containerd, &native, None).await;
    let reference = Containerd::start_build(Build::V1_7).await;
    older_clients_over_v1_only(Client::CCore, &containerd, &reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_v1_over_containerd_1_4_the_rolling_upgrade() {
    // A v1-only client (kubelet ≥ 1.26) and a v1alpha2-only runtime; natively, the same client
    // against containerd 1.6's v1.
    let old = Containerd::start_build(Build::V1_4).await;
    let current = Containerd::start_build(Build::System).await;
    let native = native_session(Client::Go, V1, Native::Containerd(&current), &current.pullable_image()).await;
    through_bridge(Client::Go, V1, &old, &native, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_older_clients_over_containerd_1_6() {
    older_clients(Client::Go, &Containerd::start_build(Build::System).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_older_clients_over_containerd_1_7() {
    older_clients(Client::Go, &Containerd::start_build(Build::V1_7).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_every_version_over_containerd_1_6() {
    let containerd = Containerd::start_build(Build::System).await;
    let native = native_session(Client::CCore, V1, Native::Containerd(&containerd), BUSYBOX_IMAGE).await;
    through_bridge(Client::CCore, V1, &containerd, &native, None).await;
    older_clients(Client::CCore, &containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_v1_event_stream_over_containerd_1_7() {
    // containerd 1.6.20 answers GetContainerEvents UNIMPLEMENTED; 1.7.24 streams events, so here a
    // C-core client's server-streaming call carries real events through cri-bridge.
    let containerd = Containerd::start_build(Build::V1_7).await;
    let native = native_session(Client::CCore, V1, Native::Containerd(&containerd), BUSYBOX_IMAGE).await;
    through_bridge(Client::CCore, V1, &containerd, &native, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_v1_over_containerd_1_7_beside_16_stalled_event_watchers() {
    // 16 watchers that take none of their events, on cri-bridge beside the grpc-go session: each
    // client connection has its own connection to containerd, so the session's calls go as they
    // would alone (the same codes and fields as natively).
    let containerd = Containerd::start_build(Build::V1_7).await;
    let image = image_for(Client::Go, &containerd);
    let native = native_session(Client::Go, V1, Native::Containerd(&containerd), &image).await;
    through_bridge_beside(Client::Go, V1, &containerd, &native, None, 16).await;
}
