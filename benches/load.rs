//! cri-bridge under load, next to what it is measured against, in one interleaved run.
//!
//! Peers, each a unix socket the same load client talks to:
//! - `direct v1`: an in-memory runtime serving CRI v1;
//! - `passthrough v1->v1`: the cri-bridge binary in front of that runtime;
//! - `translating v1->v1alpha2`: the cri-bridge binary in front of an in-memory runtime that
//!   serves only v1alpha2, the client still speaking v1;
//! - `direct v1alpha2`: that v1alpha2 runtime asked directly, the baseline of `translating`;
//! - `socat v1`: `socat UNIX-LISTEN:…,fork UNIX-CONNECT:…` in front of the v1 runtime, the
//!   floor any L4 relay costs (skipped, saying so, if socat is not installed).
//!
//! Both runtimes hold 1,000 containers in 1,000 pods, with labels and annotations as a kubelet
//! sets them. Workloads, each run against every peer: `Version` with 1 and with 64 calls in
//! flight, and `ListContainers` (no filter, the whole list) with 1 and with 8 in flight, always
//! on one HTTP/2 connection per peer. A round runs every workload against every peer, one
//! window each (after a short unmeasured warm-up); the table shows, for each figure, the median
//! over rounds. Ratios and added p50 compare each round's window with the same round's window
//! of the baseline (direct v1 for passthrough and socat, direct v1alpha2 for translating), then
//! take the median.
//!
//! Every process is separate, so that its CPU time is its own: the runtimes are this bench
//! binary re-executed (`CRI_BRIDGE_LOAD_ROLE=runtime`), cri-bridge and socat run under a guard
//! (the bench binary again) that kills them when the benchmark goes, however it goes. For each
//! window the table shows CPU time per call of the proxy (cri-bridge, or socat with the children
//! it forks per connection) and of the runtime, from utime + stime in /proc/<pid>/stat: what the
//! proxy costs, and whether it makes the runtime work harder. The proxies' resident memory
//! (VmRSS, and its peak VmHWM) is printed at the end.
//!
//! The load client makes gRPC calls with the h2 crate directly (no tonic, no tower), on a
//! current-thread tokio runtime in this process: the cheapest client, and the same for every
//! peer. The runtimes run on a multi-threaded tokio runtime; cri-bridge runs as it is shipped.
//!
//! Run: `cargo bench --bench load` (about 3½ minutes with the defaults). Knobs:
//! - `LOAD_SECONDS`: length of each measurement window, in seconds (default 2; fractions allowed);
//! - `LOAD_ROUNDS`: number of rounds (default 5);
//! - `LOAD_WORKLOADS`: `all` (default), `version` or `list`;
//! - `LOAD_BRIDGE_BIN`: the cri-bridge binary to measure instead of this build's (to compare
//!   with an older build);
//! - `LOAD_COMPARE_BIN`: another build's cri-bridge, run beside this one as the peers
//!   `compare passthrough` and `compare translating`, so that a change's cost is measured in one run;
//! - `LOAD_PEERS`: a comma-separated list of peer-name prefixes to measure (say, to profile one);
//! - `LOAD_CONTAINERD=/run/containerd/containerd.sock`: also measure a real containerd (one that
//!   serves v1 and v1alpha2, e.g. 1.6 or 1.7) directly, through cri-bridge passing through
//!   (`--backend-version v1`), translating (`--backend-version v1alpha2`) and through socat;
//!   Version workloads only, and without runtime CPU (containerd is not our child);
//! - cri-bridge inherits the environment (without `RUST_LOG`; it logs at info to a file in the
//!   temp dir), so e.g. `CRI_BRIDGE_WORKER_THREADS` reaches it.
//!
//! Run as a test (`cargo test --benches`, no `--bench` argument), it makes one short round as a
//! smoke test, unless `LOAD_SECONDS` or `LOAD_ROUNDS` say otherwise.

#[path = "support/load_client.rs"]
mod load_client;
#[path = "support/load_proc.rs"]
mod load_proc;

use cri_bridge::api::v1;
use cri_bridge::memory::{serve_memory, MemoryRuntime};
use cri_bridge::CriVersion;
use load_client::{Call, Connection, Window};
use load_proc::Child;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Containers (each in a pod of its own) in each in-memory runtime.
const CONTAINERS: usize = 1_000;

const SOCKET_ENV: &str = "CRI_BRIDGE_LOAD_SOCKET";
const VERSION_ENV: &str = "CRI_BRIDGE_LOAD_VERSION";
const CONTAINERS_ENV: &str = "CRI_BRIDGE_LOAD_CONTAINERS";

fn main() {
    match std::env::var(load_proc::ROLE).as_deref() {
        Ok("runtime") => runtime_role(),
        Ok("guard") => load_proc::guard_role(),
        _ => benchmark(),
    }
}

// ---------------------------------------------------------------------------------------------
// The in-memory runtime role.

/// Serves the in-memory runtime described by the environment, populated, until stdin closes.
fn runtime_role() {
    let required = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let socket = PathBuf::from(required(SOCKET_ENV));
    let version: CriVersion = required(VERSION_ENV).parse().unwrap_or_else(|e| panic!("{e}"));
    let containers: usize = required(CONTAINERS_ENV).parse().expect("a container count");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let (memory, _serving) = serve_memory(&socket, &[version], std::future::pending())
            .await
            .unwrap_or_else(|e| panic!("serve on {}: {e}", socket.display()));
        populate(&memory, containers);
    });
    println!("ready");
    let _ = std::io::stdout().flush();
    load_proc::wait_for_stdin_eof();
    std::process::exit(0);
}

fn string_map(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// `containers` pods, each with one container, labelled and annotated as a kubelet does.
fn populate(memory: &MemoryRuntime, containers: usize) {
    for i in 0..containers {
        let (pod_name, uid) = (format!("web-{i}"), format!("7f3c9a2e-0000-4000-8000-{i:012}"));
        let metadata =
            v1::PodSandboxMetadata { name: pod_name.clone(), uid: uid.clone(), namespace: "load".into(), attempt: 0 };
        let pod_labels = string_map(&[
            ("app", format!("web-{}", i % 10)),
            ("io.kubernetes.pod.name", pod_name.clone()),
            ("io.kubernetes.pod.namespace", "load".into()),
            ("io.kubernetes.pod.uid", uid.clone()),
        ]);
        let config = v1::PodSandboxConfig { metadata: Some(metadata), labels: pod_labels, ..Default::default() };
        let pod_sandbox_id = memory
            .run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
            .expect("run a pod sandbox")
            .pod_sandbox_id;
        let container = v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            labels: string_map(&[
                ("io.kubernetes.container.name", "app".into()),
                ("io.kubernetes.pod.name", pod_name),
                ("io.kubernetes.pod.namespace", "load".into()),
                ("io.kubernetes.pod.uid", uid),
            ]),
            annotations: string_map(&[
                ("io.kubernetes.container.hash", format!("{:08x}", i * 2_654_435_761 % (1 << 32))),
                ("io.kubernetes.container.restartCount", "0".into()),
                ("io.kubernetes.container.terminationMessagePath", "/dev/termination-log".into()),
            ]),
            ..Default::default()
        };
        let request =
            v1::CreateContainerRequest { pod_sandbox_id, config: Some(container), sandbox_config: Some(config) };
        memory.create_container(request).expect("create a container");
    }
}

// ---------------------------------------------------------------------------------------------
// Settings, workloads and peers.

struct Settings {
    window: Duration,
    warm_up: Duration,
    rounds: usize,
    /// The window as the user gave it, for the header.
    seconds_text: String,
}

impl Settings {
    fn from_env() -> Settings {
        // Without `--bench`, cargo is running benches as tests: one short smoke round.
        let benching = std::env::args().any(|a| a == "--bench");
        let seconds_text =
            std::env::var("LOAD_SECONDS").unwrap_or_else(|_| (if benching { "2" } else { "0.2" }).into());
        let seconds: f64 = seconds_text.parse().expect("LOAD_SECONDS: a number of seconds");
        let rounds = match std::env::var("LOAD_ROUNDS") {
            Ok(text) => text.parse().expect("LOAD_ROUNDS: a whole number"),
            Err(_) if benching => 5,
            Err(_) => 1,
        };
        assert!(seconds > 0.0 && rounds > 0, "LOAD_SECONDS and LOAD_ROUNDS must be positive");
        let window = Duration::from_secs_f64(seconds);
        Settings { window, warm_up: (window / 20).min(Duration::from_millis(200)), rounds, seconds_text }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Version1,
    Version64,
    List1,
    List8,
}

impl Workload {
    const ALL: [Workload; 4] = [Workload::Version1, Workload::Version64, Workload::List1, Workload::List8];
    const VERSION_ONLY: &'static [Workload] = &[Workload::Version1, Workload::Version64];
    const LIST_ONLY: &'static [Workload] = &[Workload::List1, Workload::List8];

    /// `LOAD_WORKLOADS`: `all` (the default), `version` or `list`.
    fn selected() -> &'static [Workload] {
        match std::env::var("LOAD_WORKLOADS").as_deref() {
            Err(_) | Ok("all") => &Workload::ALL,
            Ok("version") => Workload::VERSION_ONLY,
            Ok("list") => Workload::LIST_ONLY,
            Ok(other) => panic!("LOAD_WORKLOADS={other:?}: expected all, version or list"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Workload::Version1 => "Version, 1 in flight",
            Workload::Version64 => "Version, 64 in flight",
            Workload::List1 => "ListContainers, 1 in flight",
            Workload::List8 => "ListContainers, 8 in flight",
        }
    }

    fn in_flight(self) -> usize {
        match self {
            Workload::Version1 | Workload::List1 => 1,
            Workload::Version64 => 64,
            Workload::List8 => 8,
        }
    }

    /// The call, for a client speaking `package` (`runtime.v1` or `runtime.v1alpha2`; the
    /// requests encode the same in both).
    fn call(self, package: &str) -> Call {
        match self {
            Workload::Version1 | Workload::Version64 => {
                Call::new(package, "Version", &v1::VersionRequest { version: "v1".into() })
            }
            Workload::List1 | Workload::List8 => {
                Call::new(package, "ListContainers", &v1::ListContainersRequest::default())
            }
        }
    }
}

/// A socket the load client talks to, and the processes whose CPU time its calls cost.
struct Peer {
    name: String,
    socket: PathBuf,
    /// The client's protobuf package: `runtime.v1` or `runtime.v1alpha2`.
    package: &'static str,
    /// The peer this one is compared with.
    baseline: Option<usize>,
    /// The proxy process between client and runtime, if any.
    proxy: Option<u32>,
    runtime: Option<u32>,
    workloads: &'static [Workload],
    /// How many containers a full ListContainers returns, checked before measuring.
    containers: usize,
}

/// Everything the benchmark started, stopped when dropped: processes first, then the temp dir.
struct Setup {
    peers: Vec<Peer>,
    _children: Vec<Child>,
    _dir: load_proc::TempDir,
}

fn start_runtime(dir: &Path, version: CriVersion) -> (Child, PathBuf) {
    let socket = dir.join(format!("runtime-{}.sock", version.as_str()));
    let envs = [
        (SOCKET_ENV, socket.display().to_string()),
        (VERSION_ENV, version.as_str().to_string()),
        (CONTAINERS_ENV, CONTAINERS.to_string()),
    ];
    let mut child = Child::runtime(&format!("in-memory runtime {}", version.as_str()), &envs);
    child.wait_for_socket(&socket);
    (child, socket)
}

/// cri-bridge listening on `dir/<label>.sock`, forwarding to `backend`.
fn start_bridge(dir: &Path, label: &str, backend: &Path, backend_version: Option<&str>) -> (Child, PathBuf) {
    // `LOAD_BRIDGE_BIN`: another cri-bridge binary (an older build, to compare with).
    let binary = std::env::var("LOAD_BRIDGE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cri-bridge").to_string());
    start_bridge_binary(&binary, dir, label, backend, backend_version)
}

fn start_bridge_binary(
    binary: &str,
    dir: &Path,
    label: &str,
    backend: &Path,
    backend_version: Option<&str>,
) -> (Child, PathBuf) {
    let socket = dir.join(format!("{label}.sock"));
    let mut args = vec![
        "serve".to_string(),
        "--listen".into(),
        socket.display().to_string(),
        "--backend".into(),
        format!("unix://{}", backend.display()),
    ];
    if let Some(version) = backend_version {
        args.extend(["--backend-version".to_string(), version.to_string()]);
    }
    let log = dir.join(format!("{label}.log"));
    let mut child = Child::guarded(&format!("cri-bridge {label}"), binary, &args, &log);
    child.wait_for_socket(&socket);
    (child, socket)
}

fn socat_installed() -> bool {
    std::process::Command::new("socat").arg("-V").output().is_ok_and(|o| o.status.success())
}

/// socat listening on `dir/<label>.sock`, relaying each connection to `backend`.
fn start_socat(dir: &Path, label: &str, backend: &Path) -> (Child, PathBuf) {
    let socket = dir.join(format!("{label}.sock"));
    let args = [format!("UNIX-LISTEN:{},fork", socket.display()), format!("UNIX-CONNECT:{}", backend.display())];
    let mut child = Child::guarded(&format!("socat {label}"), "socat", &args, &dir.join(format!("{label}.log")));
    child.wait_for_socket(&socket);
    (child, socket)
}

fn start(containerd: Option<PathBuf>) -> Setup {
    let dir = load_proc::TempDir::new("cri-bridge-load");
    let mut children = Vec::new();
    let mut peers = Vec::new();
    let mut add = |peer: Peer| {
        peers.push(peer);
        peers.len() - 1
    };
    let peer = |name: &str, socket: PathBuf, baseline: Option<usize>, proxy: Option<u32>, runtime: Option<u32>| Peer {
        name: name.to_string(),
        socket,
        package: "runtime.v1",
        baseline,
        proxy,
        runtime,
        workloads: Workload::selected(),
        containers: CONTAINERS,
    };

    let (v1_runtime, v1_socket) = start_runtime(&dir.0, CriVersion::V1);
    let (v1alpha2_runtime, v1alpha2_socket) = start_runtime(&dir.0, CriVersion::V1alpha2);
    let (passthrough, passthrough_socket) = start_bridge(&dir.0, "bridge-passthrough", &v1_socket, None);
    let (translating, translating_socket) = start_bridge(&dir.0, "bridge-translating", &v1alpha2_socket, None);
    let (v1_pid, v1alpha2_pid) = (Some(v1_runtime.pid), Some(v1alpha2_runtime.pid));

    let direct_v1 = add(peer("direct v1", v1_socket.clone(), None, None, v1_pid));
    add(peer("passthrough v1->v1", passthrough_socket, Some(direct_v1), Some(passthrough.pid), v1_pid));
    // The translating peer's baseline is pushed right after it.
    let translating_index =
        add(peer("translating v1->v1alpha2", translating_socket, None, Some(translating.pid), v1alpha2_pid));
    let direct_v1alpha2 = add(Peer {
        package: "runtime.v1alpha2",
        ..peer("direct v1alpha2", v1alpha2_socket.clone(), None, None, v1alpha2_pid)
    });
    peers[translating_index].baseline = Some(direct_v1alpha2);
    children.extend([passthrough, translating]);
    // `LOAD_COMPARE_BIN`: the same two proxies from another build, measured in the same run.
    if let Ok(binary) = std::env::var("LOAD_COMPARE_BIN") {
        let (old_passthrough, old_passthrough_socket) =
            start_bridge_binary(&binary, &dir.0, "compare-passthrough", &v1_socket, None);
        let (old_translating, old_translating_socket) =
            start_bridge_binary(&binary, &dir.0, "compare-translating", &v1alpha2_socket, None);
        peers.push(peer(
            "compare passthrough v1->v1",
            old_passthrough_socket,
            Some(direct_v1),
            Some(old_passthrough.pid),
            v1_pid,
        ));
        peers.push(peer(
            "compare translating v1->v1alpha2",
            old_translating_socket,
            Some(direct_v1alpha2),
            Some(old_translating.pid),
            v1alpha2_pid,
        ));
        children.extend([old_passthrough, old_translating]);
    }
    if socat_installed() {
        let (socat, socat_socket) = start_socat(&dir.0, "socat", &v1_socket);
        peers.push(peer("socat v1", socat_socket, Some(direct_v1), Some(socat.pid), v1_pid));
        children.push(socat);
    } else {
        eprintln!("socat is not installed (e.g. apt-get install socat): skipping the `socat v1` peer");
    }

    if let Some(containerd) = containerd {
        add_containerd_peers(&dir.0, &containerd, &mut peers, &mut children);
    }
    children.extend([v1_runtime, v1alpha2_runtime]);
    Setup { peers, _children: children, _dir: dir }
}

/// A real containerd at `socket`: direct, through cri-bridge both ways, through socat.
fn add_containerd_peers(dir: &Path, socket: &Path, peers: &mut Vec<Peer>, children: &mut Vec<Child>) {
    let direct = peers.len();
    let peer = |name: &str, socket: PathBuf, baseline: Option<usize>, proxy: Option<u32>| Peer {
        name: format!("containerd {name}"),
        socket,
        package: "runtime.v1",
        baseline,
        proxy,
        runtime: None,
        workloads: Workload::VERSION_ONLY,
        containers: 0,
    };
    peers.push(peer("direct v1", socket.to_path_buf(), None, None));
    let (passthrough, passthrough_socket) = start_bridge(dir, "containerd-passthrough", socket, Some("v1"));
    peers.push(peer("passthrough v1->v1", passthrough_socket, Some(direct), Some(passthrough.pid)));
    let (translating, translating_socket) = start_bridge(dir, "containerd-translating", socket, Some("v1alpha2"));
    peers.push(peer("translating v1->v1alpha2", translating_socket, Some(direct), Some(translating.pid)));
    children.extend([passthrough, translating]);
    if socat_installed() {
        let (socat, socat_socket) = start_socat(dir, "containerd-socat", socket);
        peers.push(peer("socat v1", socat_socket, Some(direct), Some(socat.pid)));
        children.push(socat);
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// One window's figures.
struct Sample {
    calls_per_second: f64,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
    proxy_cpu_us: Option<f64>,
    runtime_cpu_us: Option<f64>,
    calls: u64,
    errors: u64,
    first_error: Option<String>,
}

/// CPU time of a process tree, to be turned into µs per call over a window.
struct CpuMeter {
    pid: Option<u32>,
    start: Option<u64>,
}

impl CpuMeter {
    fn start(pid: Option<u32>) -> CpuMeter {
        CpuMeter { pid, start: pid.and_then(load_proc::tree_cpu_ticks) }
    }

    fn per_call_us(&self, calls: u64, ticks_per_second: f64) -> Option<f64> {
        let end = load_proc::tree_cpu_ticks(self.pid?)?;
        let ticks = end.checked_sub(self.start?)?;
        (calls > 0).then(|| ticks as f64 / ticks_per_second * 1e6 / calls as f64)
    }
}

fn percentile(sorted: &[u32], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1])
}

fn sample(mut window: Window, proxy_cpu_us: Option<f64>, runtime_cpu_us: Option<f64>) -> Sample {
    window.latencies_us.sort_unstable();
    let total_us: u64 = window.latencies_us.iter().map(|&l| u64::from(l)).sum();
    Sample {
        calls_per_second: window.calls as f64 / window.elapsed.as_secs_f64(),
        p50_us: percentile(&window.latencies_us, 0.50),
        p99_us: percentile(&window.latencies_us, 0.99),
        mean_us: total_us as f64 / window.calls.max(1) as f64,
        proxy_cpu_us,
        runtime_cpu_us,
        calls: window.calls,
        errors: window.errors,
        first_error: window.first_error,
    }
}

/// A warm-up, then one measured window of `workload` against `peer`.
async fn measure(
    peer: &Peer,
    connection: &Connection,
    workload: Workload,
    settings: &Settings,
    ticks_per_second: f64,
) -> Sample {
    let call = workload.call(peer.package);
    load_client::load(connection, &call, workload.in_flight(), settings.warm_up).await;
    let (proxy, runtime) = (CpuMeter::start(peer.proxy), CpuMeter::start(peer.runtime));
    let window = load_client::load(connection, &call, workload.in_flight(), settings.window).await;
    let calls = window.calls;
    sample(window, proxy.per_call_us(calls, ticks_per_second), runtime.per_call_us(calls, ticks_per_second))
}

/// One call of each kind the peer is measured with, decoded: a peer that answers wrongly is a
/// setup error, not a figure.
async fn check(peer: &Peer, connection: &Connection) {
    use prost::Message;
    let body = connection
        .call(&Workload::Version1.call(peer.package), true)
        .await
        .unwrap_or_else(|e| panic!("{}: Version failed: {e}", peer.name));
    let version = v1::VersionResponse::decode(body.as_slice()).expect("a VersionResponse");
    let mut seen =
        format!("{} {} (CRI {})", version.runtime_name, version.runtime_version, version.runtime_api_version);
    if peer.workloads.contains(&Workload::List1) {
        let body = connection
            .call(&Workload::List1.call(peer.package), true)
            .await
            .unwrap_or_else(|e| panic!("{}: ListContainers failed: {e}", peer.name));
        let list = v1::ListContainersResponse::decode(body.as_slice()).expect("a ListContainersResponse");
        assert_eq!(list.containers.len(), peer.containers, "{}: containers listed", peer.name);
        seen += &format!(", {} containers in {} KiB", list.containers.len(), body.len() / 1024);
        if peer.package == "runtime.v1alpha2" {
            let cost = conversion_cost(&body);
            seen += &format!("; converting it to v1 in this process: {cost:.0} µs");
            let _ = CONVERSION_US.set(cost);
        }
    }
    eprintln!("{:<36} {seen}", peer.name);
}

/// What converting the v1alpha2 runtime's whole ListContainers answer to v1 costs on its own,
/// measured in this process: what the translating peer's CPU per call is compared with.
static CONVERSION_US: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// The median of 20 conversions of `body` (a v1alpha2 ListContainersResponse) to v1, in µs,
/// with the proxy's route (losses counted, not recorded, as for every answer).
fn conversion_cost(body: &[u8]) -> f64 {
    let route = cri_bridge::convert::Route::new("ListContainersResponse", CriVersion::V1alpha2, CriVersion::V1)
        .expect("both versions have ListContainersResponse");
    let mut times: Vec<f64> = (0..20)
        .map(|_| {
            let started = std::time::Instant::now();
            let mut cx = cri_bridge::convert::Cx::counting();
            std::hint::black_box(route.run(body, &mut cx).expect("converts"));
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// `results[workload][peer]`: one sample per round.
type Results = Vec<Vec<Vec<Sample>>>;

/// Every round; returns the results and the connections, still open.
async fn run_rounds(peers: &[Peer], settings: &Settings, ticks_per_second: f64) -> (Results, Vec<Connection>) {
    let mut connections = Vec::new();
    for peer in peers {
        let connection = Connection::open(&peer.socket).await.unwrap_or_else(|e| panic!("{}: {e}", peer.name));
        check(peer, &connection).await;
        connections.push(connection);
    }
    let mut results: Results = Workload::ALL.iter().map(|_| peers.iter().map(|_| Vec::new()).collect()).collect();
    // `LOAD_PEERS=passthrough,socat`: only the peers whose names start so (for profiling one).
    let only: Option<Vec<String>> =
        std::env::var("LOAD_PEERS").ok().map(|list| list.split(',').map(str::to_string).collect());
    for round in 1..=settings.rounds {
        for (w, &workload) in Workload::ALL.iter().enumerate() {
            let chosen =
                |peer: &Peer| only.as_ref().is_none_or(|only| only.iter().any(|o| peer.name.starts_with(o.as_str())));
            for (p, peer) in
                peers.iter().enumerate().filter(|(_, peer)| peer.workloads.contains(&workload) && chosen(peer))
            {
                let sample = measure(peer, &connections[p], workload, settings, ticks_per_second).await;
                eprintln!("{}", progress_line(round, settings.rounds, workload, peer, &sample));
                results[w][p].push(sample);
            }
        }
    }
    (results, connections)
}

fn progress_line(round: usize, rounds: usize, workload: Workload, peer: &Peer, sample: &Sample) -> String {
    let errors = match &sample.first_error {
        Some(error) => format!("  {} ERRORS, first: {error}", sample.errors),
        None => String::new(),
    };
    format!(
        "round {round}/{rounds}  {:<28} {:<36} {:>9.0} calls/s  p50 {:>7.1} µs  p99 {:>7.1} µs{errors}",
        workload.name(),
        peer.name,
        sample.calls_per_second,
        sample.p50_us,
        sample.p99_us
    )
}

// ---------------------------------------------------------------------------------------------
// The report.

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2.0 })
}

fn cell(value: Option<f64>, decimals: usize, width: usize) -> String {
    match value {
        Some(v) => format!("{v:>width$.decimals$}"),
        None => format!("{:>width$}", "-"),
    }
}

/// The median over rounds of `figure(sample, baseline sample)`, the rounds paired.
fn paired_median(samples: &[Sample], baseline: &[Sample], figure: impl Fn(&Sample, &Sample) -> f64) -> Option<f64> {
    median(samples.iter().zip(baseline).map(|(s, b)| figure(s, b)).collect())
}

fn print_report(setup: &Setup, results: &Results, settings: &Settings) {
    println!();
    println!(
        "machine: {}; LOAD_SECONDS={} LOAD_ROUNDS={}; {CONTAINERS} containers per runtime; client: h2 on a current-thread tokio runtime",
        load_proc::machine(),
        settings.seconds_text,
        settings.rounds
    );
    println!(
        "{:<28} {:<36} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>17} {:>19} {:>7}",
        "workload",
        "peer",
        "calls/s",
        "ratio",
        "+p50 µs",
        "p50 µs",
        "p99 µs",
        "mean µs",
        "proxy CPU/call µs",
        "runtime CPU/call µs",
        "errors"
    );
    let mut failures = Vec::new();
    for (w, workload) in Workload::ALL.iter().enumerate() {
        for (p, peer) in setup.peers.iter().enumerate() {
            let samples = &results[w][p];
            if samples.is_empty() {
                continue;
            }
            let of = |figure: fn(&Sample) -> f64| median(samples.iter().map(figure).collect());
            let of_option = |figure: fn(&Sample) -> Option<f64>| median(samples.iter().filter_map(figure).collect());
            let baseline = peer.baseline.map(|b| &results[w][b]);
            let ratio =
                baseline.and_then(|b| paired_median(samples, b, |s, b| s.calls_per_second / b.calls_per_second));
            let added_p50 = baseline.and_then(|b| paired_median(samples, b, |s, b| s.p50_us - b.p50_us));
            let (calls, errors) = samples.iter().fold((0, 0), |(c, e), s| (c + s.calls, e + s.errors));
            println!(
                "{:<28} {:<36} {} {} {} {} {} {} {} {} {:>7}",
                workload.name(),
                peer.name,
                cell(of(|s| s.calls_per_second), 0, 9),
                cell(ratio, 2, 6),
                added_p50.map(|a| format!("{a:>+8.1}")).unwrap_or_else(|| format!("{:>8}", "-")),
                cell(of(|s| s.p50_us), 1, 8),
                cell(of(|s| s.p99_us), 1, 8),
                cell(of(|s| s.mean_us), 1, 8),
                cell(of_option(|s| s.proxy_cpu_us), 1, 17),
                cell(of_option(|s| s.runtime_cpu_us), 1, 19),
                errors
            );
            if let Some(first) = samples.iter().find_map(|s| s.first_error.as_ref()) {
                failures.push(format!(
                    "{} / {}: {errors} of {calls} calls failed; first: {first}",
                    workload.name(),
                    peer.name
                ));
            }
        }
    }
    let containerd =
        if setup.peers.iter().any(|p| p.runtime.is_none()) { "; containerd peers: containerd direct v1" } else { "" };
    println!(
        "(medians over rounds; ratio = calls/s ÷ the baseline's, +p50 = p50 − the baseline's, paired by round; \
         baselines: direct v1 for passthrough and socat, direct v1alpha2 for translating{containerd})"
    );
    println!("{}", memory_line(&setup.peers));
    if let Some(cost) = CONVERSION_US.get() {
        println!("conversion's own cost: the v1alpha2 ListContainers answer to v1, {cost:.0} µs (median of 20, in the bench process)");
    }
    if !failures.is_empty() {
        println!("\n!!! THIS RUN HAD ERRORS: its figures are not comparable !!!");
        for failure in failures {
            println!("!!! {failure}");
        }
    }
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0)).unwrap_or_else(|| "?".into())
}

/// VmRSS and VmHWM of each proxy, with what socat's per-connection children hold.
fn memory_line(peers: &[Peer]) -> String {
    let parts: Vec<String> = peers
        .iter()
        .filter_map(|peer| Some((peer, peer.proxy?)))
        .map(|(peer, pid)| {
            let mut part = format!(
                "{} VmRSS {} (VmHWM {})",
                peer.name,
                mib(load_proc::status_kib(pid, "VmRSS")),
                mib(load_proc::status_kib(pid, "VmHWM"))
            );
            let children = load_proc::live_children(pid);
            if !children.is_empty() {
                let rss = children.iter().filter_map(|&c| load_proc::status_kib(c, "VmRSS")).sum();
                part += &format!(" + {} per-connection children VmRSS {}", children.len(), mib(Some(rss)));
            }
            part
        })
        .collect();
    format!("proxy RSS: {}", parts.join("; "))
}

fn benchmark() {
    let settings = Settings::from_env();
    let containerd = std::env::var_os("LOAD_CONTAINERD").map(PathBuf::from);
    let ticks_per_second = load_proc::clock_ticks_per_second();
    let setup = start(containerd);
    let client = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let (results, connections) = client.block_on(run_rounds(&setup.peers, &settings, ticks_per_second));
    // Report while the connections, and so socat's per-connection children, are still there.
    print_report(&setup, &results, &settings);
    drop(connections);
    drop(client);
    drop(setup);
}
