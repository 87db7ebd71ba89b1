//! The node migration of docs/migrate.md with real runtimes and real kubelets (issue 42's "Done
//! when"): a node running Docker (dockerd 20.10.24 through cri-dockerd 0.4.3, `docker_support`)
//! moves to containerd 2.4.2 (`containerd_support`, `Build::V2_4`) under a standalone kubelet
//! 1.37.2 (static pods, no API server) without a drain, cri-bridge (the binary, `serve --config`)
//! in front of both. Each step is judged on what the runtimes say directly on their own sockets
//! (sandbox and container ids, containers' start times), on what the kubelet says (`/pods` on its
//! read-only port: `containerID`, `restartCount`, Ready) and on its log ("Killing container"):
//!
//! 1. Docker alone behind cri-bridge: the "old" pod (a real node's pod: limits, the restricted
//!    security context with `allowPrivilegeEscalation: false`, seccomp `RuntimeDefault`, exec
//!    probes) runs and is Ready, its sandbox on Docker.
//! 2. cri-bridge restarted with `backends: [docker, containerd]`, `routes.default: containerd`:
//!    nothing restarts. 2b: the kubelet restarted on cri-bridge, so that it reads the new
//!    `runtime_name` (`containerd`, the default's): nothing restarts, and the old pod's container
//!    ids read `containerd://` though it runs on Docker.
//! 3. A new static pod runs on containerd (crictl 1.37 on containerd's own socket shows it).
//!    3b. cri-dockerd SIGKILLed while both backends hold pods (dockerd and its containers go
//!    on): through cri-bridge, lists fail `UNAVAILABLE` naming backend "docker" while calls for
//!    containerd's pod go on; nothing restarts, the kubelet kills nothing; cri-dockerd restarted
//!    (cri-bridge not), lists hold both backends' pods again and both pods are Ready.
//! 4. The old pod's manifest changes: its new sandbox runs on containerd, and the kubelet removes
//!    Docker's old one.
//! 5. Docker holds no sandbox (`cri-bridge backends` says so, cri-dockerd too); the docker backend
//!    is removed from the config and cri-bridge restarted: nothing restarts.
//! 6. cri-bridge taken out: the kubelet restarted directly on containerd's socket: nothing
//!    restarts.
//!
//! The steps are printed as a markdown table. A second test runs kubelet 1.22.17 (CRI v1alpha2
//! only, `--container-runtime=remote`) over Docker through cri-bridge, with a pod that sets
//! `allowPrivilegeEscalation: false`: kubelets up to 1.23 parse `Version.runtime_api_version` of a
//! runtime named `docker` as Docker's Engine API version to admit it.
//!
//! Pods use the host network (containerd here has no CNI). Images: the old pod's image is Docker's
//! busybox on the tests' registry (`Docker::busybox_image`); containerd is given a `hosts.toml`
//! for that registry, so the same name pulls on either runtime (the kubelet pulls it through
//! cri-bridge, to the pod's backend). What the kubelets change on the node is undone at the end
//! (sysctls, cgroups under a root of the test's own, mounts, /var/log/containers symlinks), as in
//! tests/kubelet.rs, whose guards are copied here.
//!
//! Needs root, curl, what `bash .ci/run` installs (docker.io, containernetworking-plugins, runc,
//! busybox-static), `bash tools/go-peers.sh` (containerd 2.4.2, crictl 1.37),
//! `bash tools/docker-peers.sh` (cri-dockerd) and `bash tools/build-kubelets.sh` (kubelets 1.37.2
//! and 1.22.17). A missing one fails the test naming the command.

mod docker_support;

use cri_bridge::api::v1;
use docker_support::containerd_support::{program_port, Build, Containerd};
use docker_support::{unmount_under, Docker};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const KUBELET_1_37: &str = "1.37.2";
const KUBELET_1_22: &str = "1.22.17";

/// One test at a time in this process: each runs dockerd, two containerds, a kubelet and
/// cri-bridge on a shared 2-core machine.
static ONE_AT_A_TIME: Semaphore = Semaphore::const_new(1);

const KUBELET_UP: Duration = Duration::from_secs(120);
const POD_READY: Duration = Duration::from_secs(180);
/// How long the kubelet may take to remove the replaced pod's sandbox (its sandbox deleter, else
/// its container GC, every minute).
const OLD_SANDBOX_GONE: Duration = Duration::from_secs(120);
/// How long to watch for a restart after a change: more than the kubelet's `syncFrequency` (10 s)
/// and its liveness probe's period (5 s).
const SETTLE: Duration = Duration::from_secs(15);

const BUILD_KUBELETS: &str = "run `bash tools/build-kubelets.sh` (Go at /usr/local/go/bin/go, Debian's golang-1.19-go \
                              for 1.22, modules from the proxy)";

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn kube_binary(version: &str, name: &str) -> PathBuf {
    let path = crate_dir().join("target/peers").join(format!("kubernetes-{version}")).join(name);
    assert!(path.is_file(), "{name} {version} is not built ({} missing): {BUILD_KUBELETS}", path.display());
    path
}

fn crictl_binary() -> PathBuf {
    let path = crate_dir().join("target/peers/crictl-1.37.0");
    assert!(path.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {}", path.display(), crate_dir().display());
    path
}

fn require_curl() {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).any(|d| d.join("curl").is_file());
    assert!(found, "the migration tests read the kubelet's API with curl: apt-get install -y curl");
}

// ---------------------------------------------------------------------------------------------
// What the kubelet changes on the node, undone (as in tests/kubelet.rs).

const KUBELET_SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Node-wide paths a kubelet could create whatever its flags (1.22 writes pod logs to
/// /var/log/pods, fixed); each is removed after the test if it did not exist before.
const NODE_PATHS: &[&str] = &["/var/log/containers", "/var/log/pods", "/var/lib/kubelet", "/etc/kubernetes"];

struct NodeState {
    holders: usize,
    sysctls: Vec<(PathBuf, String)>,
    absent: Vec<PathBuf>,
}

static NODE: Mutex<NodeState> = Mutex::new(NodeState { holders: 0, sysctls: Vec::new(), absent: Vec::new() });

/// The first holder records the node's sysctls and which node-wide paths are absent; the last one
/// out restores them.
struct NodeGuard;

impl NodeGuard {
    fn acquire() -> NodeGuard {
        let mut node = NODE.lock().unwrap_or_else(|e| e.into_inner());
        if node.holders == 0 {
            node.sysctls = KUBELET_SYSCTLS
                .iter()
                .map(|name| {
                    let path = Path::new("/proc/sys").join(name);
                    let value = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                    (path, value.trim().to_string())
                })
                .collect();
            node.absent = NODE_PATHS.iter().map(PathBuf::from).filter(|p| !p.exists()).collect();
        }
        node.holders += 1;
        NodeGuard
    }
}

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let mut node = NODE.lock().unwrap_or_else(|e| e.into_inner());
        node.holders -= 1;
        if node.holders > 0 {
            return;
        }
        for (path, value) in &node.sysctls {
            if fs::read_to_string(path).map(|v| v.trim() != value).unwrap_or(true) {
                if let Err(e) = fs::write(path, value) {
                    eprintln!("could not restore {} to {value}: {e}", path.display());
                }
            }
        }
        for path in &node.absent {
            if path.exists() {
                eprintln!("removing {}, created by a kubelet during the test", path.display());
                if let Err(e) = fs::remove_dir_all(path) {
                    eprintln!("could not remove {}: {e}", path.display());
                }
            }
        }
    }
}

fn cgroup_hierarchies() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir("/sys/fs/cgroup")
        .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.join("cgroup.procs").exists()).collect())
        .unwrap_or_default();
    // cgroup v2: the one tree.
    if Path::new("/sys/fs/cgroup/cgroup.procs").exists() {
        dirs.push(PathBuf::from("/sys/fs/cgroup"));
    }
    dirs.sort();
    dirs
}

/// Removes the cgroup `name` and everything below it in every hierarchy, deepest first.
fn remove_cgroup_tree(name: &str) {
    for hierarchy in cgroup_hierarchies() {
        let top = hierarchy.join(name);
        if !top.exists() {
            continue;
        }
        let mut dirs = Vec::new();
        let mut stack = vec![top.clone()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
            dirs.push(dir);
        }
        for dir in dirs.iter().rev() {
            let mut removed = false;
            for _ in 0..50 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    removed = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if !removed {
                eprintln!("could not remove cgroup {}", dir.display());
            }
        }
    }
}

/// The test's own `cgroupRoot`, in every hierarchy, with cpuset's cpus and mems from the top.
fn make_cgroup_root(name: &str) {
    for hierarchy in cgroup_hierarchies() {
        let dir = hierarchy.join(name);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create cgroup {}: {e}", dir.display()));
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = fs::read_to_string(hierarchy.join(file)) {
                fs::write(dir.join(file), value.trim())
                    .unwrap_or_else(|e| panic!("write {}: {e}", dir.join(file).display()));
            }
        }
    }
}

/// The test's directory, cgroup root and the kubelet's log symlinks and pod logs, removed on drop
/// (after the kubelet, cri-bridge and the runtimes have stopped: declared before them).
struct NodeFootprint {
    dir: PathBuf,
    cgroup_root: String,
    node_name: String,
}

impl Drop for NodeFootprint {
    fn drop(&mut self) {
        // Symlinks in /var/log/containers to this test's pod logs: in its own pod log dir (1.37's
        // `podLogsDir`), or in /var/log/pods under a pod named after its node (1.22).
        let pod_logs = self.dir.join("pod-logs");
        for entry in fs::read_dir("/var/log/containers").into_iter().flatten().flatten() {
            let ours = fs::read_link(entry.path()).is_ok_and(|target| target.starts_with(&pod_logs))
                || entry.file_name().to_string_lossy().contains(&self.node_name);
            if ours {
                let _ = fs::remove_file(entry.path());
            }
        }
        for entry in fs::read_dir("/var/log/pods").into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().contains(&self.node_name) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        unmount_under(&self.dir);
        remove_cgroup_tree(&self.cgroup_root);
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl NodeFootprint {
    fn new(label: &str) -> NodeFootprint {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let dir = PathBuf::from(format!("/tmp/crib-{label}-{pid}-{n}"));
        if dir.exists() {
            unmount_under(&dir);
            let _ = fs::remove_dir_all(&dir);
        }
        for sub in ["root", "manifests", "pod-logs", "volume-plugins"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let cgroup_root = format!("crib-{label}-{pid}-{n}");
        make_cgroup_root(&cgroup_root);
        NodeFootprint { dir, cgroup_root, node_name: format!("crib-{label}-{pid}-{n}") }
    }
}

/// A child process stopped on drop: SIGTERM, then SIGKILL after 10 s.
struct Stopped(Option<Child>);

impl Stopped {
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).stderr(Stdio::null()).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Links to every program on the usual PATH but iptables and ip6tables, for the kubelet's PATH:
/// it then adds no chains to the node's tables (tests/kubelet.rs).
fn path_without_iptables(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    for source in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        for entry in fs::read_dir(source).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let text = name.to_string_lossy();
            if text.starts_with("iptables")
                || text.starts_with("ip6tables")
                || bin.join(&name).symlink_metadata().is_ok()
            {
                continue;
            }
            let _ = std::os::unix::fs::symlink(entry.path(), bin.join(&name));
        }
    }
    bin
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    format!(
        "--- last {lines} lines of {} ---\n{}\n---",
        path.display(),
        all[all.len().saturating_sub(lines)..].join("\n")
    )
}

/// GET `url` with curl (`-k` for the kubelet's self-signed certificate).
async fn curl(url: &str, tls: bool) -> Result<String, String> {
    let mut command = tokio::process::Command::new("curl");
    command.args(["-sS", "--max-time", "20", "--fail-with-body"]);
    if tls {
        command.arg("-k");
    }
    let output = command.arg(url).output().await.map_err(|e| format!("cannot run curl: {e}"))?;
    let body = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(body)
    } else {
        Err(format!("GET {url}: {} {}", String::from_utf8_lossy(&output.stderr).trim(), body.trim()))
    }
}

// ---------------------------------------------------------------------------------------------
// cri-bridge, the binary.

struct BridgeProcess {
    child: Stopped,
    socket: PathBuf,
    config: PathBuf,
    log: PathBuf,
    starts: u32,
}

impl BridgeProcess {
    fn new(dir: &Path) -> BridgeProcess {
        BridgeProcess {
            child: Stopped(None),
            socket: dir.join("bridge.sock"),
            config: dir.join("bridge.yaml"),
            log: dir.join("bridge.log"),
            starts: 0,
        }
    }

    /// Writes `body` (everything but `listen`) as the config, checks it with `check-config`,
    /// starts cri-bridge and waits until it listens.
    async fn start(&mut self, body: &str) -> Duration {
        let started = Instant::now();
        let text = format!("listen:\n  path: {}\n{body}", self.socket.display());
        fs::write(&self.config, &text).unwrap();
        let check = Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
            .arg("check-config")
            .arg(&self.config)
            .output()
            .expect("run cri-bridge check-config");
        assert!(
            check.status.success(),
            "cri-bridge check-config refuses\n{text}\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        self.starts += 1;
        let mut out = fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let _ = std::io::Write::write_all(&mut out, format!("=== start {} with:\n{text}===\n", self.starts).as_bytes());
        let child = Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start cri-bridge");
        self.child = Stopped(Some(child));
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::UnixStream::connect(&self.socket).await.is_err() {
            if let Some(status) = self.child.exited() {
                panic!("cri-bridge exited with {status} before listening\n{}", tail(&self.log, 40));
            }
            assert!(Instant::now() < deadline, "cri-bridge does not listen on {} after 60 s", self.socket.display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        started.elapsed()
    }

    fn stop(&mut self) {
        self.child.stop();
    }

    /// Waits until the kubelet has called the cri-bridge started last (its log's "first call of
    /// a caller" with `client=kubelet`): how long after cri-bridge began serving.
    async fn kubelet_reconnected(&self) -> Result<Duration, String> {
        let deadline = Instant::now() + SETTLE;
        let marker = format!("=== start {} with:", self.starts);
        loop {
            let log = fs::read_to_string(&self.log).unwrap_or_default();
            let this_run = log.rsplit_once(&marker).map(|(_, run)| run).unwrap_or("");
            let serving = this_run.lines().find(|l| l.contains("serving CRI")).and_then(log_time);
            let called = this_run
                .lines()
                .find(|l| l.contains("first call of a caller") && l.contains("client=kubelet"))
                .and_then(log_time);
            if let (Some(serving), Some(called)) = (serving, called) {
                return Ok(Duration::from_secs_f64((called - serving).max(0.0)));
            }
            if Instant::now() > deadline {
                return Err(format!("the kubelet did not call the restarted cri-bridge within {} s", SETTLE.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `cri-bridge backends --config FILE`: its output.
    fn backends(&self) -> String {
        let output = Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
            .arg("backends")
            .arg("--config")
            .arg(&self.config)
            .output()
            .expect("run cri-bridge backends");
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    }
}

/// The seconds of the day of a cri-bridge log line (`2026-12-06T18:49:55.693818Z  INFO …`).
fn log_time(line: &str) -> Option<f64> {
    let time = line.split_whitespace().next()?.split_once('T')?.1.trim_end_matches('Z');
    let mut parts = time.split(':');
    let (h, m, s) =
        (parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?);
    Some(h * 3600.0 + m * 60.0 + s)
}

fn single_backend(socket: &Path) -> String {
    format!("backend:\n  endpoint: unix://{}\n", socket.display())
}

// ---------------------------------------------------------------------------------------------
// A standalone kubelet.

struct Kubelet {
    version: &'static str,
    bin: PathBuf,
    dir: PathBuf,
    node_name: String,
    cgroup_root: String,
    port: u16,
    read_only_port: u16,
    healthz_port: u16,
    log: PathBuf,
    child: Stopped,
    starts: u32,
}

impl Kubelet {
    fn new(version: &'static str, footprint: &NodeFootprint) -> Kubelet {
        Kubelet {
            version,
            bin: kube_binary(version, "kubelet"),
            dir: footprint.dir.clone(),
            node_name: footprint.node_name.clone(),
            cgroup_root: format!("/{}", footprint.cgroup_root),
            port: program_port(),
            read_only_port: program_port(),
            healthz_port: program_port(),
            log: footprint.dir.join("kubelet.log"),
            child: Stopped(None),
            starts: 0,
        }
    }

    fn legacy(&self) -> bool {
        self.version == KUBELET_1_22
    }

    /// The kubelet's configuration file. 1.22 lacks `containerRuntimeEndpoint`,
    /// `imageServiceEndpoint` (flags there), `podLogsDir` (/var/log/pods, fixed) and
    /// `failCgroupV1`.
    fn config(&self, endpoint: &Path) -> Value {
        let endpoint = format!("unix://{}", endpoint.display());
        let mut config = json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.port,
            "readOnlyPort": self.read_only_port,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "staticPodPath": self.dir.join("manifests"),
            "fileCheckFrequency": "1s",
            "syncFrequency": "10s",
            // Both runtimes' driver: dockerd here runs with native.cgroupdriver=cgroupfs
            // (docker_support), containerd with runc's SystemdCgroup false (its default).
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": false,
            "volumePluginDir": self.dir.join("volume-plugins"),
            "authentication": {
                "anonymous": { "enabled": true },
                "webhook": { "enabled": false },
                "x509": {}
            },
            "authorization": { "mode": "AlwaysAllow" },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%"
            },
            "protectKernelDefaults": false
        });
        if !self.legacy() {
            config["failCgroupV1"] = json!(false);
            config["containerRuntimeEndpoint"] = json!(endpoint);
            config["imageServiceEndpoint"] = json!(endpoint);
            config["podLogsDir"] = json!(self.dir.join("pod-logs"));
        }
        config
    }

    /// Starts the kubelet on the CRI at `endpoint` (its log appended to).
    fn start(&mut self, endpoint: &Path) {
        let config = self.dir.join("kubelet.yaml");
        fs::write(&config, serde_json::to_vec_pretty(&self.config(endpoint)).unwrap()).unwrap();
        self.starts += 1;
        let mut out = fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let _ = std::io::Write::write_all(
            &mut out,
            format!("=== kubelet start {} on {}\n", self.starts, endpoint.display()).as_bytes(),
        );
        let root = self.dir.join("root");
        let mut command = Command::new(&self.bin);
        command
            .env("PATH", path_without_iptables(&self.dir))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--root-dir={}", root.display()))
            .arg(format!("--cert-dir={}", root.join("pki").display()))
            .arg(format!("--hostname-override={}", self.node_name))
            .arg("--v=2");
        if self.legacy() {
            let endpoint = format!("unix://{}", endpoint.display());
            command
                .arg("--container-runtime=remote")
                .arg(format!("--container-runtime-endpoint={endpoint}"))
                .arg(format!("--image-service-endpoint={endpoint}"));
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e})", self.bin.display()));
        self.child = Stopped(Some(child));
    }

    fn stop(&mut self) {
        self.child.stop();
    }

    fn exited(&mut self) -> Option<String> {
        self.child.exited().map(|status| format!("the kubelet exited with {status}\n{}", tail(&self.log, 60)))
    }

    async fn wait_up(&mut self) -> Result<Duration, String> {
        let started = Instant::now();
        let url = format!("http://127.0.0.1:{}/healthz", self.healthz_port);
        loop {
            if let Some(exit) = self.exited() {
                return Err(exit);
            }
            if curl(&url, false).await.is_ok_and(|body| body.trim() == "ok") {
                return Ok(started.elapsed());
            }
            if started.elapsed() > KUBELET_UP {
                return Err(format!("the kubelet's healthz did not answer ok within {} s", KUBELET_UP.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn pods(&self) -> Result<Vec<Value>, String> {
        let body = curl(&format!("http://127.0.0.1:{}/pods", self.read_only_port), false).await?;
        let list: Value = serde_json::from_str(&body).map_err(|e| format!("/pods is not JSON: {e}"))?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    fn full_name(&self, pod: &str) -> String {
        format!("{pod}-{}", self.node_name)
    }

    /// Writes the static pod's manifest whole (written beside, then renamed: the kubelet watches
    /// the directory and would read a file half written).
    fn write_manifest(&self, name: &str, manifest: &Value) {
        let file = self.dir.join("manifests").join(format!("{name}.yaml"));
        let scratch = self.dir.join(format!("{name}.yaml.new"));
        fs::write(&scratch, serde_json::to_vec_pretty(manifest).unwrap()).unwrap();
        fs::rename(&scratch, file).unwrap();
    }

    fn remove_manifest(&self, name: &str) {
        let _ = fs::remove_file(self.dir.join("manifests").join(format!("{name}.yaml")));
    }

    /// The kubelet's view of pod `name`.
    async fn view(&self, name: &str) -> Result<Option<KubeletView>, String> {
        let pods = self.pods().await?;
        let full = self.full_name(name);
        Ok(pods.iter().find(|p| p["metadata"]["name"] == full.as_str()).map(KubeletView::of))
    }

    /// Waits until pod `name` (with UID `uid`, if given) runs and is Ready.
    async fn wait_ready(&mut self, name: &str, uid: Option<&str>) -> Result<(KubeletView, Duration), String> {
        let started = Instant::now();
        let mut last = None;
        loop {
            if let Some(exit) = self.exited() {
                return Err(exit);
            }
            if let Ok(Some(view)) = self.view(name).await {
                if view.running && view.ready && uid.is_none_or(|u| u == view.uid) {
                    return Ok((view, started.elapsed()));
                }
                last = Some(view);
            }
            if started.elapsed() > POD_READY {
                return Err(format!(
                    "pod {name} not running and Ready after {} s: {}",
                    POD_READY.as_secs(),
                    last.map(|v| v.describe).unwrap_or_else(|| "not listed by the kubelet".into())
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn log_len(&self) -> usize {
        fs::metadata(&self.log).map(|m| m.len() as usize).unwrap_or(0)
    }

    /// Lines of the kubelet's log from byte `from` on that say a container or sandbox is killed,
    /// or a probe failed.
    fn kills_since(&self, from: usize) -> Vec<String> {
        let text = fs::read(&self.log).unwrap_or_default();
        let text = String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned();
        text.lines()
            .filter(|l| {
                l.contains("Killing container")
                    || l.contains("Killing unwanted container")
                    || l.contains("will be restarted")
                    || l.contains("Probe failed")
                    || l.contains("StopPodSandbox")
            })
            .map(|l| l.chars().take(300).collect())
            .collect()
    }
}

/// What the kubelet says of a pod (`/pods`), for its one container `main`.
#[derive(Clone, Debug)]
struct KubeletView {
    uid: String,
    container_id: String,
    restart_count: i64,
    started_at: String,
    running: bool,
    ready: bool,
    describe: String,
}

impl KubeletView {
    fn of(pod: &Value) -> KubeletView {
        let status = &pod["status"];
        let main = status["containerStatuses"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == "main"))
            .cloned()
            .unwrap_or(Value::Null);
        let pod_ready = status["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        let mut describe = vec![format!("phase {}", status["phase"].as_str().unwrap_or("?"))];
        if let Some(waiting) = main["state"]["waiting"].as_object() {
            describe.push(format!(
                "waiting {}: {}",
                waiting.get("reason").and_then(Value::as_str).unwrap_or(""),
                waiting.get("message").and_then(Value::as_str).unwrap_or("")
            ));
        }
        if let Some(terminated) = main["state"]["terminated"].as_object() {
            describe.push(format!("terminated {:?}", terminated));
        }
        for cond in status["conditions"].as_array().into_iter().flatten() {
            if cond["status"] != "True" {
                describe.push(format!(
                    "{} {}: {}",
                    cond["type"].as_str().unwrap_or(""),
                    cond["reason"].as_str().unwrap_or(""),
                    cond["message"].as_str().unwrap_or("")
                ));
            }
        }
        KubeletView {
            uid: pod["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
            container_id: main["containerID"].as_str().unwrap_or_default().to_string(),
            restart_count: main["restartCount"].as_i64().unwrap_or(-1),
            started_at: main["state"]["running"]["startedAt"].as_str().unwrap_or_default().to_string(),
            running: main["state"]["running"].is_object(),
            ready: pod_ready && main["ready"] == true,
            describe: describe.join("; "),
        }
    }

    /// `docker://0123456789ab`: the scheme and the id's first 12 digits.
    fn short_id(&self) -> String {
        match self.container_id.split_once("://") {
            Some((scheme, id)) => format!("{scheme}://{}", &id[..id.len().min(12)]),
            None => self.container_id.clone(),
        }
    }

    fn id(&self) -> &str {
        self.container_id.split_once("://").map(|(_, id)| id).unwrap_or(&self.container_id)
    }
}

// ---------------------------------------------------------------------------------------------
// What a runtime holds, asked directly on its own socket (CRI v1: cri-dockerd and containerd 2.4
// serve it).

#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    pod: String,
    uid: String,
    sandbox: String,
    sandbox_created: i64,
    ready: bool,
    containers: Vec<HeldContainer>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct HeldContainer {
    name: String,
    id: String,
    attempt: u32,
    running: bool,
    started_at: i64,
}

impl Held {
    fn summary(&self) -> String {
        let containers: Vec<String> = self
            .containers
            .iter()
            .map(|c| {
                format!(
                    "{} {} attempt {} {} started {}",
                    c.name,
                    short(&c.id),
                    c.attempt,
                    if c.running { "running" } else { "exited" },
                    c.started_at
                )
            })
            .collect();
        format!(
            "sandbox {} ({}) uid {}: {}",
            short(&self.sandbox),
            if self.ready { "ready" } else { "not ready" },
            short(&self.uid),
            containers.join(", ")
        )
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

async fn runtime_holds(channel: tonic::transport::Channel) -> Result<Vec<Held>, String> {
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(channel);
    let sandboxes = client
        .list_pod_sandbox(v1::ListPodSandboxRequest::default())
        .await
        .map_err(|s| format!("ListPodSandbox: {s}"))?
        .into_inner()
        .items;
    let containers = client
        .list_containers(v1::ListContainersRequest::default())
        .await
        .map_err(|s| format!("ListContainers: {s}"))?
        .into_inner()
        .containers;
    let mut held = Vec::new();
    for sandbox in sandboxes {
        let metadata = sandbox.metadata.clone().unwrap_or_default();
        let mut inside = Vec::new();
        for c in containers.iter().filter(|c| c.pod_sandbox_id == sandbox.id) {
            let status = client
                .container_status(v1::ContainerStatusRequest { container_id: c.id.clone(), verbose: false })
                .await
                .map_err(|s| format!("ContainerStatus {}: {s}", c.id))?
                .into_inner()
                .status
                .unwrap_or_default();
            let meta = c.metadata.clone().unwrap_or_default();
            inside.push(HeldContainer {
                name: meta.name,
                id: c.id.clone(),
                attempt: meta.attempt,
                running: status.state == v1::ContainerState::ContainerRunning as i32,
                started_at: status.started_at,
            });
        }
        held.push(Held {
            pod: metadata.name,
            uid: metadata.uid,
            sandbox: sandbox.id,
            sandbox_created: sandbox.created_at,
            ready: sandbox.state == v1::PodSandboxState::SandboxReady as i32,
            containers: inside,
        });
    }
    held.sort_by(|a, b| (&a.pod, a.sandbox_created).cmp(&(&b.pod, b.sandbox_created)));
    Ok(held)
}

/// The sandboxes of pod `full_name` in `held`.
fn of_pod<'a>(held: &'a [Held], full_name: &str) -> Vec<&'a Held> {
    held.iter().filter(|h| h.pod == full_name).collect()
}

/// The differences between two views of the same pods: a sandbox or container gone, new, or
/// with another start time or attempt; a container no longer running.
fn restarts(before: &[Held], after: &[Held]) -> Vec<String> {
    let mut found = Vec::new();
    for b in before {
        match after.iter().find(|a| a.sandbox == b.sandbox) {
            None => found.push(format!("sandbox {} of {} is gone", short(&b.sandbox), b.pod)),
            Some(a) => {
                if a.ready != b.ready {
                    found.push(format!("sandbox {} of {}: ready {} -> {}", short(&b.sandbox), b.pod, b.ready, a.ready));
                }
                if a.containers != b.containers {
                    found.push(format!("{}: containers {} -> {}", b.pod, b.summary(), a.summary()));
                }
            }
        }
    }
    for a in after {
        if !before.iter().any(|b| b.sandbox == a.sandbox) {
            found.push(format!("a new sandbox for {}: {}", a.pod, a.summary()));
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// The pods.

/// A real node's pod: busybox with requests and limits, the restricted security context (non-root,
/// read-only root file system, no capability, `allowPrivilegeEscalation: false`, seccomp
/// `RuntimeDefault`), an emptyDir, exec readiness and liveness probes. `value` is an env value: a
/// change of it replaces the static pod (a new UID).
fn real_pod(name: &str, image: &str, value: &str) -> Value {
    let script = format!(
        "echo \"{name} up VALUE=$VALUE uid=$(id -u) gid=$(id -g)\"; \
         if (: > /root-probe) 2>/dev/null; then echo root-writable; else echo root-read-only; fi; \
         grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; \
         echo ok > /work/ready; exec sleep 2147483647"
    );
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": "default", "labels": { "app": name } },
        "spec": {
            "hostNetwork": true,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 2,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": { "type": "RuntimeDefault" }
            },
            "volumes": [{ "name": "work", "emptyDir": {} }],
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", script],
                "env": [{ "name": "VALUE", "value": value }],
                "resources": {
                    "requests": { "cpu": "10m", "memory": "16Mi" },
                    "limits": { "cpu": "250m", "memory": "64Mi" }
                },
                "securityContext": {
                    "runAsNonRoot": true,
                    "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": { "drop": ["ALL"] }
                },
                "volumeMounts": [{ "name": "work", "mountPath": "/work" }],
                "readinessProbe": {
                    "exec": { "command": ["cat", "/work/ready"] },
                    "initialDelaySeconds": 1, "periodSeconds": 2, "timeoutSeconds": 10, "failureThreshold": 3
                },
                "livenessProbe": {
                    "exec": { "command": ["id", "-u"] },
                    "initialDelaySeconds": 2, "periodSeconds": 5, "timeoutSeconds": 10, "failureThreshold": 6
                }
            }]
        }
    })
}

/// What the container's log must say: who it runs as, and what the kernel enforces.
fn log_must_say(name: &str, value: &str) -> Vec<String> {
    vec![
        format!("{name} up VALUE={value} uid=1000 gid=1000"),
        "root-read-only".into(),
        "CapEff:\t0000000000000000".into(),
        "NoNewPrivs:\t1".into(),
        "Seccomp:\t2".into(),
    ]
}

/// The container `main`'s log through the kubelet's API (TLS, self-signed; anonymous, AlwaysAllow).
async fn container_log(kubelet: &Kubelet, name: &str) -> Result<String, String> {
    let url = format!("https://127.0.0.1:{}/containerLogs/default/{}/main", kubelet.port, kubelet.full_name(name));
    curl(&url, true).await
}

async fn check_log(kubelet: &Kubelet, name: &str, value: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = container_log(kubelet, name).await;
        let missing: Vec<String> = match &text {
            Ok(text) => log_must_say(name, value).into_iter().filter(|s| !text.contains(s.as_str())).collect(),
            Err(e) => vec![e.clone()],
        };
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{name}'s log lacks {missing:?}: {text:?}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Pulls naming Docker's registry host, on containerd: a `hosts.toml` under its `config_path`
/// (2.x reads it at each pull) sending them there over plain HTTP.
fn let_containerd_pull_from(containerd: &Containerd, image: &str) {
    let host = image.split('/').next().unwrap();
    let dir = containerd.dir.join("certs.d").join(host);
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("hosts.toml"),
        format!("server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
    )
    .unwrap();
}

/// crictl 1.37 on `socket`: the sandboxes named `name` it lists, as `id state`.
async fn crictl_pods(socket: &Path, name: &str) -> Result<Vec<(String, String)>, String> {
    let endpoint = format!("unix://{}", socket.display());
    let output = tokio::process::Command::new(crictl_binary())
        .args(["--runtime-endpoint", &endpoint, "--image-endpoint", &endpoint, "--timeout", "30s"])
        .args(["pods", "--name", name, "-o", "json"])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run crictl: {e}"))?;
    if !output.status.success() {
        return Err(format!("crictl pods failed: {}", String::from_utf8_lossy(&output.stderr)));
    }
    let list: Value = serde_json::from_slice(&output.stdout).map_err(|e| format!("crictl pods -o json: {e}"))?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["name"] == name)
        .map(|p| (p["id"].as_str().unwrap_or("").to_string(), p["state"].as_str().unwrap_or("").to_string()))
        .collect())
}

/// crictl 1.37 on `socket` with `args`: its stdout if it succeeds, else its stderr.
async fn crictl(socket: &Path, args: &[&str]) -> Result<String, String> {
    let endpoint = format!("unix://{}", socket.display());
    let output = tokio::process::Command::new(crictl_binary())
        .args(["--runtime-endpoint", &endpoint, "--image-endpoint", &endpoint, "--timeout", "10s"])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run crictl: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
    }
}

/// The names of the pods `crictl pods -o json` lists.
fn crictl_pod_names(json: &str) -> Result<Vec<String>, String> {
    let list: Value = serde_json::from_str(json).map_err(|e| format!("crictl pods -o json: {e}"))?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect())
}

/// The seconds of the day of a klog line (`E1206 19:02:41.095535   12641 kubelet.go:…`).
fn klog_time(line: &str) -> Option<f64> {
    let time = line.split_whitespace().nth(1)?;
    let mut parts = time.split(':');
    let (h, m, s) =
        (parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?);
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Now, in seconds of the (UTC) day, as the logs stamp it.
fn now_of_day() -> f64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.as_secs_f64() % 86_400.0
}

/// The kubelet's error lines (klog `E`) from byte `from` on that `pick` keeps.
fn kubelet_errors_since(kubelet: &Kubelet, from: usize, pick: impl Fn(&str) -> bool) -> Vec<String> {
    let text = fs::read(&kubelet.log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned();
    text.lines().filter(|l| l.starts_with('E') && pick(l)).map(str::to_string).collect()
}

/// `N <what> from +A s to +B s after the kill (B - A s)`, the times relative to `origin` (seconds
/// of the day), with the first line's message.
fn error_span(what: &str, lines: &[String], origin: f64) -> String {
    let times: Vec<f64> = lines.iter().filter_map(|l| klog_time(l)).collect();
    match (times.first(), times.last()) {
        (Some(first), Some(last)) => format!(
            "{} {what} from +{:.1} s to +{:.1} s after the kill ({:.1} s), the first: {}",
            lines.len(),
            first - origin,
            last - origin,
            last - first,
            lines[0].split_once("] ").map(|(_, r)| r).unwrap_or(&lines[0]).chars().take(160).collect::<String>()
        ),
        _ => format!("no {what}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The steps, reported.

struct Step {
    name: &'static str,
    passed: bool,
    seconds: f64,
    measured: Vec<String>,
}

fn table(steps: &[Step]) -> String {
    let mut out = String::from("| step | result | s | measured |\n| --- | --- | --- | --- |\n");
    for s in steps {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} |",
            s.name,
            if s.passed { "pass" } else { "**FAIL**" },
            s.seconds,
            s.measured.join("; ").replace('|', "\\|").replace('\n', " ")
        );
    }
    out
}

/// Collects what a step measured and what went wrong.
struct Judge {
    name: &'static str,
    started: Instant,
    measured: Vec<String>,
    problems: Vec<String>,
}

impl Judge {
    fn new(name: &'static str) -> Judge {
        eprintln!("--- {name}");
        Judge { name, started: Instant::now(), measured: Vec::new(), problems: Vec::new() }
    }

    fn note(&mut self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("    {what}");
        self.measured.push(what);
    }

    fn check(&mut self, ok: bool, problem: impl Into<String>) {
        if !ok {
            let problem = problem.into();
            eprintln!("    PROBLEM: {problem}");
            self.problems.push(problem);
        }
    }

    fn done(self) -> Step {
        let mut measured = self.measured;
        measured.extend(self.problems.iter().map(|p| format!("PROBLEM: {p}")));
        Step {
            name: self.name,
            passed: self.problems.is_empty(),
            seconds: self.started.elapsed().as_secs_f64(),
            measured,
        }
    }
}

/// Everything of the migration, stopped in this order on drop: the kubelet, cri-bridge, the
/// runtimes, then the node's footprint and guard (fields drop in declaration order).
struct Migration {
    kubelet: Kubelet,
    bridge: BridgeProcess,
    containerd: Containerd,
    docker: Docker,
    _footprint: NodeFootprint,
    _node: NodeGuard,
    /// Docker's busybox on the tests' registry: the pods' image.
    image: String,
    /// The config of step 2: both backends, containerd the default.
    both: String,
}

impl Migration {
    fn docker_channel(&self) -> tonic::transport::Channel {
        self.docker.direct_channel()
    }

    async fn docker_holds(&self) -> Result<Vec<Held>, String> {
        runtime_holds(self.docker_channel()).await
    }

    async fn containerd_holds(&self) -> Result<Vec<Held>, String> {
        runtime_holds(self.containerd.direct_channel()).await
    }

    /// Both runtimes' holdings: Docker's then containerd's.
    async fn holds(&self) -> Result<Vec<Held>, String> {
        let mut all = self.docker_holds().await?;
        all.extend(self.containerd_holds().await?);
        Ok(all)
    }

    /// After a change that must restart nothing: waits `SETTLE`, then compares both runtimes'
    /// holdings with `before`, the kubelet's view of each pod (same container id, restartCount 0,
    /// Ready), and its log since `log_from` (no kill).
    async fn nothing_restarted(
        &mut self,
        judge: &mut Judge,
        before: &[Held],
        views: &[(&str, KubeletView)],
        log_from: usize,
    ) -> Vec<(String, KubeletView)> {
        tokio::time::sleep(SETTLE).await;
        let mut now_views = Vec::new();
        for (name, was) in views {
            match self.kubelet.wait_ready(name, Some(&was.uid)).await {
                Ok((view, _)) => {
                    judge.check(
                        view.id() == was.id(),
                        format!("{name}: the kubelet's container id {} -> {}", was.container_id, view.container_id),
                    );
                    judge.check(view.restart_count == 0, format!("{name}: restartCount {}", view.restart_count));
                    judge.check(
                        view.started_at == was.started_at,
                        format!("{name}: startedAt {} -> {}", was.started_at, view.started_at),
                    );
                    judge.note(format!(
                        "kubelet: {name} {} restartCount {} Ready",
                        view.short_id(),
                        view.restart_count
                    ));
                    now_views.push((name.to_string(), view));
                }
                Err(e) => judge.check(false, e),
            }
        }
        match self.holds().await {
            Ok(after) => {
                let changed = restarts(before, &after);
                judge.check(changed.is_empty(), format!("the runtimes changed: {changed:?}"));
                if changed.is_empty() {
                    judge.note(format!(
                        "runtimes: the same {} sandboxes and containers (ids, attempts, start times)",
                        after.len()
                    ));
                }
            }
            Err(e) => judge.check(false, e),
        }
        let kills = self.kubelet.kills_since(log_from);
        judge.check(kills.is_empty(), format!("the kubelet logged {kills:?}"));
        now_views
    }
}

fn holds_summary(held: &[&Held]) -> String {
    held.iter().map(|h| h.summary()).collect::<Vec<_>>().join(" / ")
}

async fn migrate(m: &mut Migration, steps: &mut Vec<Step>) -> Result<(), ()> {
    let old = "old";
    let fresh = "fresh";
    let old_full = m.kubelet.full_name(old);
    let fresh_full = m.kubelet.full_name(fresh);
    let image = m.image.clone();

    // 1. Docker the only backend.
    let mut judge = Judge::new("1. Docker alone behind cri-bridge: the old pod");
    let took = m.bridge.start(&single_backend(&m.docker.cri_socket)).await;
    judge.note(format!("cri-bridge up in {} ms (backend: cri-dockerd)", took.as_millis()));
    m.kubelet.start(&m.bridge.socket);
    match m.kubelet.wait_up().await {
        Ok(took) => judge.note(format!("kubelet {} up in {:.1} s", m.kubelet.version, took.as_secs_f64())),
        Err(e) => judge.check(false, e),
    }
    m.kubelet.write_manifest(old, &real_pod(old, &image, "one"));
    let mut old_view = None;
    if judge.problems.is_empty() {
        match m.kubelet.wait_ready(old, None).await {
            Ok((view, took)) => {
                judge.note(format!("old Running and Ready in {} s, kubelet: {}", took.as_secs(), view.short_id()));
                judge.check(view.container_id.starts_with("docker://"), format!("containerID {}", view.container_id));
                old_view = Some(view);
            }
            Err(e) => judge.check(false, e),
        }
    }
    if let Err(e) = check_log(&m.kubelet, old, "one").await {
        judge.check(false, e);
    } else {
        judge.note("its log: uid 1000, read-only root, CapEff 0, NoNewPrivs 1, Seccomp 2");
    }
    let mut before = Vec::new();
    match (m.docker_holds().await, m.containerd_holds().await) {
        (Ok(docker), Ok(containerd)) => {
            let on_docker = of_pod(&docker, &old_full);
            judge.check(
                on_docker.len() == 1 && on_docker[0].ready,
                format!("Docker holds {} sandboxes of old: {}", on_docker.len(), holds_summary(&on_docker)),
            );
            judge.check(containerd.is_empty(), format!("containerd holds {containerd:?}"));
            if let (Some(h), Some(view)) = (on_docker.first(), &old_view) {
                judge.note(format!("cri-dockerd directly: {}", h.summary()));
                judge.check(
                    h.containers.iter().any(|c| c.id == view.id() && c.running),
                    "the kubelet's container is not the one Docker runs",
                );
            }
            before = docker;
            before.extend(containerd);
        }
        (d, c) => judge.check(false, format!("asking the runtimes: {:?} {:?}", d.err(), c.err())),
    }
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }
    let old_view = old_view.unwrap();

    // 2. Both backends, containerd the default.
    let mut judge = Judge::new("2. cri-bridge restarted with backends [docker, containerd], default containerd");
    let log_from = m.kubelet.log_len();
    m.bridge.stop();
    let took = m.bridge.start(&m.both.clone()).await;
    judge.note(format!("cri-bridge restarted in {} ms", took.as_millis()));
    match m.bridge.kubelet_reconnected().await {
        Ok(after) => judge.note(format!("the kubelet called it {} ms after it listened", after.as_millis())),
        Err(e) => judge.check(false, e),
    }
    let views = m.nothing_restarted(&mut judge, &before, &[(old, old_view.clone())], log_from).await;
    judge.check(
        views.iter().all(|(_, v)| v.container_id.starts_with("docker://")),
        "the kubelet, not restarted, should still name containers docker://",
    );
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }

    // 2b. The kubelet restarted: it reads runtime_name `containerd`.
    let mut judge = Judge::new("2b. the kubelet restarted on cri-bridge (reads runtime_name containerd)");
    let log_from = m.kubelet.log_len();
    m.kubelet.stop();
    m.kubelet.start(&m.bridge.socket);
    match m.kubelet.wait_up().await {
        Ok(took) => judge.note(format!("kubelet up again in {:.1} s", took.as_secs_f64())),
        Err(e) => judge.check(false, e),
    }
    let views = m.nothing_restarted(&mut judge, &before, &[(old, old_view.clone())], log_from).await;
    let log = fs::read_to_string(&m.kubelet.log).unwrap_or_default();
    let runtime_line = log[log_from.min(log.len())..]
        .lines()
        .find(|l| l.contains("Container runtime initialized"))
        .map(|l| l.rsplit_once("\"] ").map(|(_, r)| r).unwrap_or(l).chars().take(200).collect::<String>());
    if let Some(line) = &runtime_line {
        judge.note(format!("kubelet log: {line}"));
    }
    let old_view = match views.into_iter().next() {
        Some((_, view)) => {
            judge.note(format!(
                "old (still on Docker) is now {} in the kubelet's status: the runtime name is a label",
                view.short_id()
            ));
            judge.check(
                view.container_id.starts_with("containerd://"),
                format!(
                    "after its restart the kubelet should name containers containerd://, not {}",
                    view.container_id
                ),
            );
            view
        }
        None => old_view,
    };
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }

    // 3. A new pod lands on containerd.
    let mut judge = Judge::new("3. a new static pod runs on containerd");
    m.kubelet.write_manifest(fresh, &real_pod(fresh, &image, "one"));
    let mut fresh_view = None;
    match m.kubelet.wait_ready(fresh, None).await {
        Ok((view, took)) => {
            judge.note(format!("fresh Running and Ready in {} s, kubelet: {}", took.as_secs(), view.short_id()));
            fresh_view = Some(view);
        }
        Err(e) => judge.check(false, e),
    }
    match crictl_pods(&m.containerd.socket, &fresh_full).await {
        Ok(pods) => {
            judge.check(
                pods.len() == 1 && pods[0].1 == "SANDBOX_READY",
                format!("crictl on containerd's socket lists {pods:?}"),
            );
            if let Some((id, state)) = pods.first() {
                judge.note(format!("crictl 1.37 on containerd's socket: {} {state}", short(id)));
            }
        }
        Err(e) => judge.check(false, e),
    }
    match m.docker_holds().await {
        Ok(docker) => judge.check(of_pod(&docker, &fresh_full).is_empty(), "Docker holds a sandbox of fresh"),
        Err(e) => judge.check(false, e),
    }
    if let Err(e) = check_log(&m.kubelet, fresh, "one").await {
        judge.check(false, e);
    }
    let pulled = m.containerd.ctr(&["images", "ls", "-q"]).lines().any(|l| l.trim() == image);
    judge.note(format!("containerd has {image} (pulled through cri-bridge to the pod's backend): {pulled}"));
    judge.check(pulled, format!("containerd lacks {image}"));
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }
    let fresh_view = fresh_view.unwrap();

    // 3b. cri-dockerd killed (dockerd and its containers go on), then started again.
    let mut judge = Judge::new("3b. a backend killed mid-run");
    if let Err(()) = backend_killed(m, &mut judge, &old_view, &fresh_view).await {
        judge.check(false, "the step could not go on");
    }
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }

    // 4. The old pod's manifest changes: replaced on containerd, Docker's sandbox removed.
    let mut judge = Judge::new("4. the old pod's manifest changes: its new sandbox on containerd");
    let changed_at = Instant::now();
    m.kubelet.write_manifest(old, &real_pod(old, &image, "two"));
    let mut new_old_view = None;
    let deadline = Instant::now() + POD_READY;
    loop {
        if let Ok(Some(view)) = m.kubelet.view(old).await {
            if view.uid != old_view.uid && view.running && view.ready {
                judge.note(format!(
                    "old replaced (uid {} -> {}), Running and Ready in {} s, kubelet: {}",
                    short(&old_view.uid),
                    short(&view.uid),
                    changed_at.elapsed().as_secs(),
                    view.short_id()
                ));
                new_old_view = Some(view);
                break;
            }
        }
        if let Some(exit) = m.kubelet.exited() {
            judge.check(false, exit);
            break;
        }
        if Instant::now() > deadline {
            judge
                .check(false, format!("the replaced old pod is not Running and Ready after {} s", POD_READY.as_secs()));
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if let Some(view) = &new_old_view {
        match m.containerd_holds().await {
            Ok(containerd) => {
                let mine: Vec<&Held> =
                    of_pod(&containerd, &old_full).into_iter().filter(|h| h.uid == view.uid).collect();
                judge.check(
                    mine.len() == 1
                        && mine[0].ready
                        && mine[0].containers.iter().any(|c| c.id == view.id() && c.running),
                    format!("containerd holds of the new old pod: {}", holds_summary(&mine)),
                );
                if let Some(h) = mine.first() {
                    judge.note(format!("containerd directly: {}", h.summary()));
                }
            }
            Err(e) => judge.check(false, e),
        }
        if let Err(e) = check_log(&m.kubelet, old, "two").await {
            judge.check(false, e);
        }
    }
    // Docker's old sandbox: stopped, then removed by the kubelet.
    let deadline = changed_at + POD_READY + OLD_SANDBOX_GONE;
    let mut docker_left = None;
    loop {
        match m.docker_holds().await {
            Ok(docker) if docker.is_empty() => {
                judge.note(format!(
                    "Docker's old sandbox removed by the kubelet {} s after the change",
                    changed_at.elapsed().as_secs()
                ));
                docker_left = None;
                break;
            }
            Ok(docker) => docker_left = Some(docker),
            Err(e) => {
                judge.check(false, e);
                break;
            }
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    if let Some(left) = docker_left {
        let left: Vec<&Held> = left.iter().collect();
        judge.check(
            false,
            format!("Docker still holds after {} s: {}", changed_at.elapsed().as_secs(), holds_summary(&left)),
        );
    }
    // The fresh pod, untouched.
    match m.kubelet.view(fresh).await {
        Ok(Some(view)) => judge.check(
            view.id() == fresh_view.id() && view.restart_count == 0,
            format!("fresh changed: {} restartCount {}", view.container_id, view.restart_count),
        ),
        other => judge.check(false, format!("fresh: {other:?}")),
    }
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }
    let old_view = new_old_view.unwrap();

    // 5. Docker empty: the docker backend removed.
    let mut judge = Judge::new("5. Docker holds nothing: back to one backend, containerd");
    let listing = m.bridge.backends();
    let docker_part: String =
        listing.split("backend ").find(|part| part.starts_with("docker ")).unwrap_or("").to_string();
    judge.check(
        docker_part.contains("no sandbox"),
        format!("`cri-bridge backends` does not say \"no sandbox\" under docker:\n{listing}"),
    );
    judge.note(format!("cri-bridge backends: {}", listing.lines().map(str::trim).collect::<Vec<_>>().join(" / ")));
    match m.docker_holds().await {
        Ok(docker) => {
            judge.check(docker.is_empty(), format!("cri-dockerd directly: {docker:?}"));
            judge.note(format!("cri-dockerd directly: {} sandboxes", docker.len()));
        }
        Err(e) => judge.check(false, e),
    }
    let before = match m.holds().await {
        Ok(held) => held,
        Err(e) => {
            judge.check(false, e);
            Vec::new()
        }
    };
    let log_from = m.kubelet.log_len();
    m.bridge.stop();
    let took = m.bridge.start(&single_backend(&m.containerd.socket)).await;
    judge.note(format!("cri-bridge restarted with `backend: containerd` in {} ms", took.as_millis()));
    match m.bridge.kubelet_reconnected().await {
        Ok(after) => judge.note(format!("the kubelet called it {} ms after it listened", after.as_millis())),
        Err(e) => judge.check(false, e),
    }
    let views = m
        .nothing_restarted(&mut judge, &before, &[(old, old_view.clone()), (fresh, fresh_view.clone())], log_from)
        .await;
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }

    // 6. cri-bridge taken out.
    let mut judge = Judge::new("6. cri-bridge taken out: the kubelet directly on containerd");
    let log_from = m.kubelet.log_len();
    m.kubelet.stop();
    m.bridge.stop();
    m.kubelet.start(&m.containerd.socket);
    match m.kubelet.wait_up().await {
        Ok(took) => judge.note(format!("kubelet up on containerd's socket in {:.1} s", took.as_secs_f64())),
        Err(e) => judge.check(false, e),
    }
    let views: Vec<(&str, KubeletView)> =
        views.iter().map(|(name, view)| (if name == old { old } else { fresh }, view.clone())).collect();
    let after = m.nothing_restarted(&mut judge, &before, &views, log_from).await;
    judge.check(
        after.iter().all(|(_, v)| v.container_id.starts_with("containerd://")),
        format!("container ids: {after:?}"),
    );
    let passed = judge.problems.is_empty();
    steps.push(judge.done());
    if !passed {
        return Err(());
    }
    Ok(())
}

/// Step 3b: cri-dockerd SIGKILLed for `AWAY` while Docker holds `old` and containerd `fresh`,
/// judged through cri-bridge (crictl), on each runtime directly, and by the kubelet; then started
/// again, cri-bridge left running.
async fn backend_killed(
    m: &mut Migration,
    judge: &mut Judge,
    old_view: &KubeletView,
    fresh_view: &KubeletView,
) -> Result<(), ()> {
    const AWAY: Duration = Duration::from_secs(25);
    const BACK: Duration = Duration::from_secs(30);
    let old_full = m.kubelet.full_name("old");
    let fresh_full = m.kubelet.full_name("fresh");
    let before = match m.holds().await {
        Ok(held) => held,
        Err(e) => {
            judge.check(false, e);
            return Err(());
        }
    };
    let fresh_before: Vec<Held> = before.iter().filter(|h| h.pod == fresh_full).cloned().collect();
    judge.check(fresh_before.len() == 1, format!("containerd holds {} sandboxes of fresh", fresh_before.len()));
    judge.check(m.docker.runs_container(old_view.id()), "Docker does not run old's container before the kill");
    let log_from = m.kubelet.log_len();
    let killed_clock = now_of_day();
    let killed_at = Instant::now();
    m.docker.kill_cri_dockerd();
    judge.note("cri-dockerd SIGKILLed (dockerd and its containers left running)");

    // While it is away: a few rounds of every check.
    let mut rounds = 0;
    let mut pods_answered = 0;
    let mut unavailable_example = None;
    tokio::time::sleep(Duration::from_secs(2)).await;
    while killed_at.elapsed() < AWAY {
        rounds += 1;
        let at = killed_at.elapsed().as_secs();
        match crictl(&m.bridge.socket, &["pods", "-o", "json"]).await {
            Ok(out) => judge.check(false, format!("+{at} s: crictl pods through cri-bridge succeeded: {out}")),
            Err(err) => {
                let names_docker = err.contains(r#"backend \"docker\""#) || err.contains(r#"backend "docker""#);
                judge.check(
                    err.contains("Unavailable") && names_docker,
                    format!("+{at} s: crictl pods through cri-bridge failed otherwise than Unavailable naming backend \"docker\": {err}"),
                );
                let line = err.lines().find(|l| l.contains("Unavailable")).unwrap_or(&err);
                let from = line.find("code = ").unwrap_or(0);
                unavailable_example.get_or_insert(line[from..].chars().take(200).collect::<String>());
            }
        }
        match crictl(&m.bridge.socket, &["inspect", fresh_view.id()]).await {
            Ok(out) => {
                let state = serde_json::from_str::<Value>(&out)
                    .ok()
                    .and_then(|v| v["status"]["state"].as_str().map(str::to_string))
                    .unwrap_or_default();
                judge.check(
                    state == "CONTAINER_RUNNING",
                    format!("+{at} s: crictl inspect fresh's container through cri-bridge: state {state:?}"),
                );
            }
            Err(err) => {
                judge.check(false, format!("+{at} s: crictl inspect fresh's container through cri-bridge: {err}"))
            }
        }
        match m.containerd_holds().await {
            Ok(held) => {
                let now: Vec<Held> = held.into_iter().filter(|h| h.pod == fresh_full).collect();
                let changed = restarts(&fresh_before, &now);
                judge.check(changed.is_empty(), format!("+{at} s: containerd directly, fresh changed: {changed:?}"));
            }
            Err(e) => judge.check(false, format!("+{at} s: containerd directly: {e}")),
        }
        match m.kubelet.view("fresh").await {
            Ok(Some(view)) => {
                pods_answered += 1;
                judge.check(
                    view.id() == fresh_view.id() && view.restart_count == 0,
                    format!("+{at} s: the kubelet's fresh: {} restartCount {}", view.container_id, view.restart_count),
                );
            }
            Ok(None) => judge.check(false, format!("+{at} s: the kubelet's /pods lacks fresh")),
            // The kubelet may not answer while its runtime is down: not judged.
            Err(e) => judge.note(format!("+{at} s: the kubelet's /pods does not answer: {e}")),
        }
        judge.check(
            m.docker.runs_container(old_view.id()),
            format!("+{at} s: Docker no longer runs old's container {}", short(old_view.id())),
        );
        if let Some(exit) = m.kubelet.exited() {
            judge.check(false, exit);
            return Err(());
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    let away = killed_at.elapsed();
    judge.note(format!(
        "away {:.0} s, {rounds} rounds: crictl pods through cri-bridge failed each time ({}); crictl inspect of \
         fresh's container answered; containerd directly: fresh the same; kubelet's /pods answered {pods_answered} \
         times: fresh {} restartCount 0; docker ps: old's container running",
        away.as_secs_f64(),
        unavailable_example.as_deref().unwrap_or_default(),
        fresh_view.short_id()
    ));

    // Back: cri-dockerd started again, cri-bridge not.
    let restarted_clock = now_of_day();
    let took = m.docker.restart_cri_dockerd().await;
    let restarted_at = Instant::now();
    judge.note(format!(
        "cri-dockerd restarted at +{:.1} s, answering in {:.1} s",
        restarted_clock - killed_clock,
        took.as_secs_f64()
    ));
    let mut last = String::new();
    let mut listed = false;
    while restarted_at.elapsed() < BACK {
        match crictl(&m.bridge.socket, &["pods", "-o", "json"]).await.and_then(|out| crictl_pod_names(&out)) {
            Ok(names) if names.contains(&old_full) && names.contains(&fresh_full) => {
                listed = true;
                break;
            }
            Ok(names) => last = format!("lists {names:?}"),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if listed {
        judge.note(format!(
            "crictl pods through cri-bridge lists both backends' pods {:.1} s after cri-dockerd's restart ({:.1} s after the kill)",
            restarted_at.elapsed().as_secs_f64(),
            killed_at.elapsed().as_secs_f64()
        ));
    } else {
        judge.check(
            false,
            format!("crictl pods through cri-bridge, {} s after cri-dockerd's restart: {last}", BACK.as_secs()),
        );
    }
    m.nothing_restarted(judge, &before, &[("old", old_view.clone()), ("fresh", fresh_view.clone())], log_from).await;

    // The kubelet's errors while Docker was away.
    let pleg = kubelet_errors_since(&m.kubelet, log_from, |l| {
        l.contains("PLEG") || l.contains("relist") || l.contains("retrieve pods")
    });
    let not_ready = kubelet_errors_since(&m.kubelet, log_from, |l| l.contains("Skipping pod synchronization"));
    let probes = kubelet_errors_since(&m.kubelet, log_from, |l| l.contains("ExecSync"));
    let naming = kubelet_errors_since(&m.kubelet, log_from, |l| l.contains(r#"backend \"docker\""#));
    judge.note(format!("kubelet: {}", error_span("PLEG relist errors", &pleg, killed_clock)));
    judge.note(format!(
        "kubelet: {}",
        error_span("\"Skipping pod synchronization\" (runtime not ready)", &not_ready, killed_clock)
    ));
    judge.note(format!(
        "kubelet: {} ExecSync (probe) errors, not counted as probe failures; {} error lines in all naming backend \"docker\", \
         the last {}",
        probes.len(),
        naming.len(),
        naming
            .last()
            .and_then(|l| klog_time(l))
            .map(|t| format!("{:+.1} s from cri-dockerd's restart", t - restarted_clock))
            .unwrap_or_else(|| "none".into())
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_to_containerd_under_kubelet_1_37_without_a_restart() {
    docker_support::require_prerequisites();
    docker_support::containerd_support::require_prerequisites();
    require_curl();
    kube_binary(KUBELET_1_37, "kubelet");
    crictl_binary();
    let _one = ONE_AT_A_TIME.acquire().await.unwrap();
    let started = Instant::now();

    let node = NodeGuard::acquire();
    let footprint = NodeFootprint::new("mig");
    let docker = Docker::start().await;
    let containerd = Containerd::start_build(Build::V2_4).await;
    let image = docker.busybox_image.clone();
    let_containerd_pull_from(&containerd, &image);
    eprintln!(
        "Docker {} (API {}) and containerd {} up in {} s",
        docker.engine_version,
        docker.engine_api_version,
        Build::V2_4.runtime_version(),
        started.elapsed().as_secs()
    );
    let both = format!(
        "backends:\n  - name: docker\n    endpoint: unix://{}\n  - name: containerd\n    endpoint: unix://{}\n\
         routes:\n  default: containerd\n  handlers:\n    docker: {{ backend: docker, handler: \"\" }}\n",
        docker.cri_socket.display(),
        containerd.socket.display()
    );
    let mut m = Migration {
        kubelet: Kubelet::new(KUBELET_1_37, &footprint),
        bridge: BridgeProcess::new(&footprint.dir),
        containerd,
        docker,
        _footprint: footprint,
        _node: node,
        image,
        both,
    };
    let mut steps = Vec::new();
    let result = migrate(&mut m, &mut steps).await;
    println!(
        "\nDocker 20.10.24 (cri-dockerd 0.4.3) to containerd 2.4.2 under kubelet {KUBELET_1_37}, {} s:\n\n{}",
        started.elapsed().as_secs(),
        table(&steps)
    );
    let keep = crate_dir().join("target/kubelet-logs");
    let _ = fs::create_dir_all(&keep);
    let _ = fs::copy(&m.kubelet.log, keep.join("migrate-1.37.kubelet.log"));
    let _ = fs::copy(&m.bridge.log, keep.join("migrate-1.37.cri-bridge.log"));
    if result.is_err() {
        eprintln!("{}\n{}\n{}", tail(&m.kubelet.log, 80), tail(&m.bridge.log, 40), m.containerd.log_tail(30));
        eprintln!("{}", m.docker.log_tails(30));
    }
    m.kubelet.stop();
    m.bridge.stop();
    drop(m);
    let failed: Vec<String> =
        steps.iter().filter(|s| !s.passed).map(|s| format!("{}: {}", s.name, s.measured.join("; "))).collect();
    assert!(failed.is_empty() && result.is_ok(), "the migration failed at: {failed:?} (steps run: {})", steps.len());
    assert_eq!(steps.len(), 8, "every step ran");
}

// ---------------------------------------------------------------------------------------------
// Kubelet 1.22 over Docker through cri-bridge.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_1_22_runs_a_no_new_privs_pod_on_docker_through_cri_bridge() {
    docker_support::require_prerequisites();
    require_curl();
    kube_binary(KUBELET_1_22, "kubelet");
    let _one = ONE_AT_A_TIME.acquire().await.unwrap();
    let started = Instant::now();

    let node = NodeGuard::acquire();
    let footprint = NodeFootprint::new("k122");
    let docker = Docker::start().await;
    let mut kubelet = Kubelet::new(KUBELET_1_22, &footprint);
    let mut problems = Vec::new();
    let mut report = Vec::new();

    // The control: directly on cri-dockerd (CRI v1 only), kubelet 1.22 (v1alpha2 only) cannot run.
    let log_from = kubelet.log_len();
    kubelet.start(&docker.cri_socket);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut direct = None;
    while Instant::now() < deadline {
        if let Some(status) = kubelet.child.exited() {
            direct = Some(format!("exits ({status})"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    kubelet.stop();
    let log = fs::read(&kubelet.log).unwrap_or_default();
    let log = String::from_utf8_lossy(&log[log_from.min(log.len())..]).into_owned();
    let why = log
        .lines()
        .rev()
        .find(|l| l.contains("v1alpha2") || l.contains("Unimplemented") || l.contains("failed to run Kubelet"))
        .map(|l| l.chars().take(300).collect::<String>());
    report.push(format!(
        "directly on cri-dockerd (control): the kubelet {}: {}",
        direct.as_deref().unwrap_or("still runs after 30 s"),
        why.as_deref().unwrap_or("(no CRI error logged)")
    ));
    if direct.is_none() || why.is_none() {
        problems.push(format!(
            "the control: kubelet {KUBELET_1_22} directly on cri-dockerd did not fail on the CRI version"
        ));
    }

    let mut bridge = BridgeProcess::new(&footprint.dir);
    bridge.start(&single_backend(&docker.cri_socket)).await;
    kubelet.start(&bridge.socket);
    let name = "nnp";
    let full = kubelet.full_name(name);
    match kubelet.wait_up().await {
        Ok(took) => report.push(format!("kubelet {KUBELET_1_22} up in {:.1} s", took.as_secs_f64())),
        Err(e) => problems.push(e),
    }
    if problems.is_empty() {
        kubelet.write_manifest(name, &real_pod(name, &docker.busybox_image, "one"));
        match kubelet.wait_ready(name, None).await {
            Ok((view, took)) => {
                report.push(format!("{name} Running and Ready in {} s: {}", took.as_secs(), view.short_id()));
                if !view.container_id.starts_with("docker://") {
                    problems.push(format!("containerID {}", view.container_id));
                }
                match runtime_holds(docker.direct_channel()).await {
                    Ok(held) => {
                        let mine = of_pod(&held, &full);
                        if mine.len() == 1 && mine[0].containers.iter().any(|c| c.id == view.id() && c.running) {
                            report.push(format!("cri-dockerd directly: {}", mine[0].summary()));
                        } else {
                            problems.push(format!("cri-dockerd holds {held:?}"));
                        }
                    }
                    Err(e) => problems.push(e),
                }
            }
            Err(e) => problems.push(e),
        }
        match check_log(&kubelet, name, "one").await {
            Ok(()) => report.push("its log: uid 1000, read-only root, CapEff 0, NoNewPrivs 1, Seccomp 2".into()),
            Err(e) => problems.push(e),
        }
    }
    let log = fs::read_to_string(&kubelet.log).unwrap_or_default();
    for needle in ["Container runtime initialized", "illegal version string", "NoNewPrivs"] {
        if let Some(line) = log.lines().find(|l| l.contains(needle)) {
            report.push(format!("kubelet log: {}", line.chars().take(240).collect::<String>()));
        }
    }
    if log.contains("illegal version string") {
        problems.push("the kubelet logged \"illegal version string\"".into());
    }
    // The pod removed, so that nothing of it outlives the test in /var/log/pods.
    kubelet.remove_manifest(name);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if kubelet.view(name).await.is_ok_and(|v| v.is_none()) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "\nkubelet {KUBELET_1_22} (CRI v1alpha2) through cri-bridge over cri-dockerd 0.4.3 (CRI v1), Docker {}, {} s:\n  {}",
        docker.engine_version,
        started.elapsed().as_secs(),
        report.join("\n  ")
    );
    let keep = crate_dir().join("target/kubelet-logs");
    let _ = fs::create_dir_all(&keep);
    let _ = fs::copy(&kubelet.log, keep.join("migrate-1.22.kubelet.log"));
    let _ = fs::copy(&bridge.log, keep.join("migrate-1.22.cri-bridge.log"));
    if !problems.is_empty() {
        eprintln!("{}\n{}\n{}", tail(&kubelet.log, 100), tail(&bridge.log, 40), docker.log_tails(30));
    }
    kubelet.stop();
    bridge.stop();
    drop(docker);
    drop(footprint);
    drop(node);
    assert!(problems.is_empty(), "kubelet {KUBELET_1_22} over Docker through cri-bridge: {problems:#?}");
}
