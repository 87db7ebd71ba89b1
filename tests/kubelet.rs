//! Real kubelets through cri-bridge (issue 35): kubelets 1.38.0-beta.0, 1.37.2 and 1.34.4, built
//! from the Go module proxy by `tools/build-kubelets.sh`, each standalone (no API server: static
//! pods from its `staticPodPath`) with a containerd of its own, through cri-bridge on its default
//! configuration (only `listen.path` and `backend.endpoint` set) over containerd 1.4.13, 1.7.24,
//! 2.1.9 and 2.4.2 (built by `tools/go-peers.sh`), and directly against the containerds
//! whose CRI the kubelet speaks natively (1.7.24, 2.1.9, 2.4.2).
//!
//! Every run serves the pods of a small real node: BestEffort (env, an emptyDir and a hostPath),
//! Burstable (cpu and memory requests below their limits), Guaranteed, and a restricted
//! container (non-root uid, read-only root filesystem, seccomp `RuntimeDefault`, every capability
//! dropped, no privilege escalation); each with exec liveness and readiness probes. The pods use
//! the host network: the containerds have no CNI (see `containerd_support`). Each pod must run and
//! become Ready (the kubelet's read-only port, `/pods`), its log must say what the container saw
//! (read through the kubelet's API, `/containerLogs`, anonymous and `AlwaysAllow` on 127.0.0.1),
//! and once its manifest is deleted its sandbox must be gone from containerd (the kubelet's
//! container GC runs every minute).
//!
//! The kubelet log is read for where the cgroup driver came from (`RuntimeConfig`: through
//! cri-bridge over containerd 1.7, cri-bridge answers it) and for the CRI errors it logged; those
//! of each run through cri-bridge are compared with the same kubelet's run directly on the same
//! containerd. The results are printed as a markdown table; each run's kubelet and cri-bridge
//! logs are kept in target/kubelet-logs.
//!
//! What a kubelet changes on the node is undone when each run ends, passing or failing (`Drop`):
//! its pod cgroups live under a `cgroupRoot` of the run's own, removed with everything below it;
//! its root dir (which it bind-mounts onto itself), pod log dir, cert dir and volume plugin dir
//! are the run's own and unmounted and removed; the symlinks it makes in /var/log/containers are
//! removed; the sysctls it sets at start (`vm.overcommit_memory`, `vm.panic_on_oom`,
//! `kernel.panic`, `kernel.panic_on_oops`, `kernel.keys.root_maxkeys`, `kernel.keys.root_maxbytes`)
//! are recorded before the first kubelet starts and written back after the last one stops. The
//! kubelet is given a PATH without iptables, so that none adds chains to the node's tables (each
//! must log "No iptables support on this system", as on a host with nftables only).
//!
//! kubeadm of each version runs its preflight checks (`kubeadm init phase preflight --dry-run`:
//! no image is pulled) against cri-bridge over containerd 1.7 and directly against containerd 1.7;
//! the CRI checks (`CRI`, `ContainerRuntimeVersion`) must pass through cri-bridge.
//!
//! Needs root, what `bash .ci/run` installs (containerd builds, runc, busybox-static), curl, and
//! `bash tools/build-kubelets.sh` (the kubelets and kubeadms). A missing one fails the test with
//! the command to run; containerd 2.4.2 needs `bash tools/go-peers.sh`.

mod containerd_support;

use containerd_support::{program_port, unmount_under, Build, Containerd, BUSYBOX_IMAGE};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The kubelet versions, as `tools/build-kubelets.sh` names their directories.
const KUBELET_1_38: &str = "1.38.0-beta.0";
const KUBELET_1_37: &str = "1.37.2";
const KUBELET_1_34: &str = "1.34.4";

/// How many kubelet runs go at once in this process (each a kubelet, a containerd and perhaps a
/// cri-bridge): the machines have 2 cores, shared.
static RUNS_AT_ONCE: Semaphore = Semaphore::const_new(3);

/// Waits, generous for a loaded 2-core machine.
const KUBELET_UP: Duration = Duration::from_secs(180);
const PODS_READY: Duration = Duration::from_secs(240);
const PODS_GONE: Duration = Duration::from_secs(240);

const BUILD_KUBELETS: &str = "run `bash tools/build-kubelets.sh` (Go at /usr/local/go/bin/go, modules from the proxy)";

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/peers/kubernetes-VERSION/NAME`, or a failure saying how to build it.
fn kube_binary(version: &str, name: &str) -> PathBuf {
    let path = crate_dir().join("target/peers").join(format!("kubernetes-{version}")).join(name);
    assert!(path.is_file(), "{} {version} is not built ({} missing): {BUILD_KUBELETS}", name, path.display());
    path
}

fn require_curl() {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).any(|d| d.join("curl").is_file());
    assert!(found, "the kubelet tests read the kubelet's API with curl: apt-get install -y curl");
}

// ---------------------------------------------------------------------------------------------
// What the kubelet changes on the node, undone.

/// The sysctls a kubelet sets at start (`setupKernelTunables`, with `protectKernelDefaults`
/// false).
const KUBELET_SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Node-wide paths a kubelet or kubeadm could create whatever their flags (the kubelet's
/// /var/log/containers is fixed); each is removed after the last run if it did not exist before
/// the first.
const NODE_PATHS: &[&str] = &["/var/log/containers", "/var/log/pods", "/var/lib/kubelet", "/etc/kubernetes"];

struct NodeState {
    holders: usize,
    sysctls: Vec<(PathBuf, String)>,
    absent: Vec<PathBuf>,
}

static NODE: Mutex<NodeState> = Mutex::new(NodeState { holders: 0, sysctls: Vec::new(), absent: Vec::new() });

/// Held by every kubelet or kubeadm run: the first records the node's sysctls and which
/// node-wide paths are absent, the last one out restores them.
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
        // Created during the runs: only a kubelet or kubeadm of ours makes these on a test machine.
        for path in &node.absent {
            if path.exists() {
                eprintln!("removing {}, created by a kubelet or kubeadm during the tests", path.display());
                if let Err(e) = fs::remove_dir_all(path) {
                    eprintln!("could not remove {}: {e}", path.display());
                }
            }
        }
    }
}

/// The controllers' hierarchies mounted under /sys/fs/cgroup (cgroup v1, hybrid).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir("/sys/fs/cgroup")
        .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.join("cgroup.procs").exists()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// Removes the cgroup `name` (relative to each hierarchy's root) and everything below it,
/// deepest first; says what it could not remove.
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
        // Children were pushed after their parents: reversed, deepest first.
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

/// A run's own `cgroupRoot`: made in every hierarchy (the kubelet refuses a root that does not
/// exist), with cpuset's cpus and mems copied from the top so children can be given tasks.
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

/// Everything of one kubelet run on the node, removed on drop (after the kubelet, cri-bridge and
/// containerd have stopped: see `Run`'s field order).
struct NodeFootprint {
    dir: PathBuf,
    cgroup_root: String,
}

impl Drop for NodeFootprint {
    fn drop(&mut self) {
        // The symlinks the kubelet made in /var/log/containers to this run's pod logs.
        let pod_logs = self.dir.join("pod-logs");
        for entry in fs::read_dir("/var/log/containers").into_iter().flatten().flatten() {
            if fs::read_link(entry.path()).is_ok_and(|target| target.starts_with(&pod_logs)) {
                let _ = fs::remove_file(entry.path());
            }
        }
        unmount_under(&self.dir);
        remove_cgroup_tree(&self.cgroup_root);
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

/// A child process stopped on drop: SIGTERM, then SIGKILL after 10 s.
struct Stopped(Option<Child>);

impl Stopped {
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
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

/// A directory of links to every program on the usual PATH except iptables and ip6tables (and
/// their variants), for the kubelet's PATH: with iptables found, kubelets before 1.38 would add
/// chains and rules to the node's tables (KUBE-IPTABLES-HINT, KUBE-FIREWALL, KUBE-KUBELET-CANARY).
/// Without, every kubelet logs "No iptables support on this system" and leaves them alone, as on
/// a host with nftables only (kubelet 1.38 as built here never finds iptables:
/// tools/iptables-none).
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

// ---------------------------------------------------------------------------------------------
// One run: a kubelet, perhaps cri-bridge, a containerd.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Direct,
    Bridge,
}

/// The pods, by name, with what each container's log must say.
struct PodDef {
    name: &'static str,
    qos: &'static str,
    manifest: Value,
    log_says: Vec<String>,
}

/// A probe pair: readiness reads the file the container writes once up, liveness runs `id`.
fn probes(ready_file: &str) -> Value {
    json!({
        "readinessProbe": {
            "exec": { "command": ["cat", ready_file] },
            "initialDelaySeconds": 1, "periodSeconds": 2, "timeoutSeconds": 10, "failureThreshold": 3
        },
        "livenessProbe": {
            "exec": { "command": ["id", "-u"] },
            "initialDelaySeconds": 2, "periodSeconds": 5, "timeoutSeconds": 10, "failureThreshold": 6
        }
    })
}

fn pod(name: &str, container: Value, volumes: Value, security: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": "default", "labels": { "app": name } },
        "spec": {
            "hostNetwork": true,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 2,
            "securityContext": security,
            "volumes": volumes,
            "containers": [container]
        }
    })
}

fn container(script: &str, extra: Value) -> Value {
    let mut c = json!({
        "name": "main",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn merge(mut a: Value, b: Value) -> Value {
    for (k, v) in b.as_object().unwrap() {
        a[k] = v.clone();
    }
    a
}

fn pod_defs(host_dir: &Path, host_word: &str) -> Vec<PodDef> {
    let keep = "exec sleep 2147483647";
    let besteffort = pod(
        "crib-besteffort",
        container(
            &format!(
                "echo \"crib-besteffort up GREETING=$GREETING\"; cat /host/hello.txt; echo ok > /scratch/ready; {keep}"
            ),
            merge(
                probes("/scratch/ready"),
                json!({
                    "env": [{ "name": "GREETING", "value": "hello-from-env" }],
                    "volumeMounts": [
                        { "name": "scratch", "mountPath": "/scratch" },
                        { "name": "host", "mountPath": "/host", "readOnly": true }
                    ]
                }),
            ),
        ),
        json!([
            { "name": "scratch", "emptyDir": {} },
            { "name": "host", "hostPath": { "path": host_dir, "type": "Directory" } }
        ]),
        json!({}),
    );
    let burstable = pod(
        "crib-burstable",
        container(
            &format!("echo \"crib-burstable up LEVEL=$LEVEL\"; echo ok > /data/ready; {keep}"),
            merge(
                probes("/data/ready"),
                json!({
                    "env": [{ "name": "LEVEL", "value": "burst" }],
                    "resources": {
                        "requests": { "cpu": "10m", "memory": "16Mi" },
                        "limits": { "cpu": "250m", "memory": "64Mi" }
                    },
                    "volumeMounts": [{ "name": "data", "mountPath": "/data" }]
                }),
            ),
        ),
        json!([{ "name": "data", "emptyDir": {} }]),
        json!({}),
    );
    let guaranteed = pod(
        "crib-guaranteed",
        container(
            &format!("echo \"crib-guaranteed up\"; echo ok > /data/ready; {keep}"),
            merge(
                probes("/data/ready"),
                json!({
                    "resources": {
                        "requests": { "cpu": "100m", "memory": "48Mi" },
                        "limits": { "cpu": "100m", "memory": "48Mi" }
                    },
                    "volumeMounts": [{ "name": "data", "mountPath": "/data" }]
                }),
            ),
        ),
        json!([{ "name": "data", "emptyDir": {} }]),
        json!({}),
    );
    // The write is tried in a subshell: a failed redirection of a special builtin ends a POSIX
    // shell, and the image has no `touch`.
    let restricted = pod(
        "crib-restricted",
        container(
            &format!(
                "echo \"crib-restricted up uid=$(id -u) gid=$(id -g)\"; \
                 if (: > /root-probe) 2>/dev/null; then echo root-writable; else echo root-read-only; fi; \
                 grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; \
                 echo ok > /work/ready; {keep}"
            ),
            merge(
                probes("/work/ready"),
                json!({
                    "securityContext": {
                        "runAsNonRoot": true,
                        "readOnlyRootFilesystem": true,
                        "allowPrivilegeEscalation": false,
                        "capabilities": { "drop": ["ALL"] }
                    },
                    "volumeMounts": [{ "name": "work", "mountPath": "/work" }]
                }),
            ),
        ),
        json!([{ "name": "work", "emptyDir": {} }]),
        json!({
            "runAsNonRoot": true,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "seccompProfile": { "type": "RuntimeDefault" }
        }),
    );
    vec![
        PodDef {
            name: "crib-besteffort",
            qos: "BestEffort",
            manifest: besteffort,
            log_says: vec!["crib-besteffort up GREETING=hello-from-env".into(), host_word.into()],
        },
        PodDef {
            name: "crib-burstable",
            qos: "Burstable",
            manifest: burstable,
            log_says: vec!["crib-burstable up LEVEL=burst".into()],
        },
        PodDef {
            name: "crib-guaranteed",
            qos: "Guaranteed",
            manifest: guaranteed,
            log_says: vec!["crib-guaranteed up".into()],
        },
        PodDef {
            name: "crib-restricted",
            qos: "BestEffort",
            manifest: restricted,
            log_says: vec![
                "crib-restricted up uid=1000 gid=1000".into(),
                "root-read-only".into(),
                "CapEff:\t0000000000000000".into(),
                "NoNewPrivs:\t1".into(),
                "Seccomp:\t2".into(),
            ],
        },
    ]
}

/// What one run found.
#[derive(Default)]
struct Outcome {
    kubelet: &'static str,
    runtime: String,
    via: Option<Via>,
    pods: usize,
    running: usize,
    ready: usize,
    logs: usize,
    removed: usize,
    /// Where the kubelet's cgroup driver came from, from its log.
    cgroup_driver: String,
    /// `code: what` of each distinct CRI error the kubelet logged.
    cri_errors: BTreeSet<String>,
    /// What went wrong, if anything.
    problems: Vec<String>,
}

impl Outcome {
    fn passed(&self) -> bool {
        self.problems.is_empty()
            && self.pods > 0
            && [self.running, self.ready, self.logs, self.removed].iter().all(|n| *n == self.pods)
    }
}

fn runtime_name(build: Build) -> String {
    match build {
        Build::V1_4 => "containerd 1.4.13".into(),
        Build::V1_7 => "containerd 1.7.24".into(),
        Build::V2_1 => "containerd 2.1.9".into(),
        Build::System => "containerd 1.6.20".into(),
        Build::V2_4 => "containerd 2.4.2".into(),
    }
}

/// Everything of a run, stopped in this order on drop: the kubelet, cri-bridge, containerd (its
/// shims and containers), then what is left on the node.
struct Run {
    kubelet: Stopped,
    _bridge: Stopped,
    containerd: Containerd,
    footprint: NodeFootprint,
    _node: NodeGuard,
    kubelet_log: PathBuf,
    bridge_log: PathBuf,
    node_name: String,
    manifests: PathBuf,
    port: u16,
    read_only_port: u16,
    healthz_port: u16,
}

static RUN_COUNTER: AtomicU32 = AtomicU32::new(0);

/// cri-bridge's config: its defaults, with only where it listens and what it forwards to.
fn bridge_config(listen: &Path, backend: &Path) -> String {
    format!("listen:\n  path: {}\nbackend:\n  endpoint: unix://{}\n", listen.display(), backend.display())
}

/// Starts cri-bridge (the binary) in front of `backend`, waits until it listens.
async fn start_bridge(dir: &Path, backend: &Path) -> (Stopped, PathBuf, PathBuf) {
    let socket = dir.join("bridge.sock");
    let config = dir.join("bridge.yaml");
    fs::write(&config, bridge_config(&socket, backend)).unwrap();
    let log = dir.join("bridge.log");
    let out = fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start cri-bridge");
    let mut bridge = Stopped(Some(child));
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::UnixStream::connect(&socket).await.is_err() {
        if let Some(status) = bridge.exited() {
            panic!("cri-bridge exited with {status} before listening\n{}", tail(&log, 40));
        }
        assert!(Instant::now() < deadline, "cri-bridge does not listen on {} after 60 s", socket.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (bridge, socket, log)
}

fn kubelet_config(dir: &Path, endpoint: &Path, cgroup_root: &str, ports: (u16, u16, u16)) -> Value {
    let (port, read_only_port, healthz_port) = ports;
    let endpoint = format!("unix://{}", endpoint.display());
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": read_only_port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "staticPodPath": dir.join("manifests"),
        "fileCheckFrequency": "1s",
        "syncFrequency": "10s",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        // The machine is cgroup v1: kubelets 1.35+ refuse to start on it without this.
        "failCgroupV1": false,
        "failSwapOn": false,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "podLogsDir": dir.join("pod-logs"),
        "volumePluginDir": dir.join("volume-plugins"),
        "authentication": {
            "anonymous": { "enabled": true },
            "webhook": { "enabled": false },
            "x509": {}
        },
        "authorization": { "mode": "AlwaysAllow" },
        // Nothing evicted or collected for the machine's disk or memory.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%"
        },
        "protectKernelDefaults": false
    })
}

impl Run {
    async fn start(version: &'static str, build: Build, via: Via) -> Run {
        let kubelet_bin = kube_binary(version, "kubelet");
        let node = NodeGuard::acquire();
        let n = RUN_COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let dir = PathBuf::from(format!("/tmp/crib-kl-{pid}-{n}"));
        if dir.exists() {
            unmount_under(&dir);
            let _ = fs::remove_dir_all(&dir);
        }
        let cgroup_root = format!("crib-kubelet-{pid}-{n}");
        let footprint = NodeFootprint { dir: dir.clone(), cgroup_root: cgroup_root.clone() };
        for sub in ["root", "manifests", "pod-logs", "volume-plugins", "hostpath"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        make_cgroup_root(&cgroup_root);

        let containerd = Containerd::start_build(build).await;
        let (bridge, endpoint, bridge_log) = match via {
            Via::Bridge => start_bridge(&dir, &containerd.socket).await,
            Via::Direct => (Stopped(None), containerd.socket.clone(), dir.join("bridge.log")),
        };

        let ports = (program_port(), program_port(), program_port());
        let config = dir.join("kubelet.yaml");
        let config_json = kubelet_config(&dir, &endpoint, &format!("/{cgroup_root}"), ports);
        fs::write(&config, serde_json::to_vec_pretty(&config_json).unwrap()).unwrap();
        let node_name = format!("crib-{pid}-{n}");
        let kubelet_log = dir.join("kubelet.log");
        let out = fs::File::create(&kubelet_log).unwrap();
        let root = dir.join("root");
        let child = Command::new(&kubelet_bin)
            .env("PATH", path_without_iptables(&dir))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--root-dir={}", root.display()))
            .arg(format!("--cert-dir={}", root.join("pki").display()))
            .arg(format!("--hostname-override={node_name}"))
            .arg("--v=2")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e})", kubelet_bin.display()));
        Run {
            kubelet: Stopped(Some(child)),
            _bridge: bridge,
            containerd,
            footprint,
            _node: node,
            kubelet_log,
            bridge_log,
            node_name,
            manifests: dir.join("manifests"),
            port: ports.0,
            read_only_port: ports.1,
            healthz_port: ports.2,
        }
    }

    fn dir(&self) -> &Path {
        &self.footprint.dir
    }

    fn kubelet_log_text(&self) -> String {
        fs::read_to_string(&self.kubelet_log).unwrap_or_default()
    }

    /// The kubelet's exit, if it has exited.
    fn kubelet_exited(&mut self) -> Option<String> {
        self.kubelet.exited().map(|status| format!("the kubelet exited with {status}"))
    }

    /// Waits until the kubelet's healthz answers `ok`.
    async fn wait_kubelet_up(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + KUBELET_UP;
        let url = format!("http://127.0.0.1:{}/healthz", self.healthz_port);
        loop {
            if let Some(exit) = self.kubelet_exited() {
                return Err(exit);
            }
            if curl(&url, false).await.is_ok_and(|body| body.trim() == "ok") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the kubelet's healthz did not answer ok within {} s", KUBELET_UP.as_secs()));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The kubelet's `/pods` (read-only port): its pods, with their status.
    async fn kubelet_pods(&self) -> Result<Vec<Value>, String> {
        let body = curl(&format!("http://127.0.0.1:{}/pods", self.read_only_port), false).await?;
        let list: Value = serde_json::from_str(&body).map_err(|e| format!("/pods is not JSON: {e}"))?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    /// `/containerLogs/default/POD-NODE/main` on the kubelet's port (TLS, self-signed).
    async fn container_log(&self, pod: &str) -> Result<String, String> {
        let url = format!("https://127.0.0.1:{}/containerLogs/default/{pod}-{}/main", self.port, self.node_name);
        curl(&url, true).await
    }

    /// The sandboxes and containers containerd holds, asked directly.
    async fn runtime_holds(&self) -> Result<(usize, usize), String> {
        let channel = self.containerd.direct_channel();
        if self.containerd.build.served().contains(&CriVersion::V1) {
            let mut client = v1::runtime_service_client::RuntimeServiceClient::new(channel);
            let pods =
                client.list_pod_sandbox(v1::ListPodSandboxRequest::default()).await.map_err(|s| s.to_string())?;
            let containers =
                client.list_containers(v1::ListContainersRequest::default()).await.map_err(|s| s.to_string())?;
            Ok((pods.get_ref().items.len(), containers.get_ref().containers.len()))
        } else {
            let mut client = v1alpha2::runtime_service_client::RuntimeServiceClient::new(channel);
            let pods =
                client.list_pod_sandbox(v1alpha2::ListPodSandboxRequest::default()).await.map_err(|s| s.to_string())?;
            let containers =
                client.list_containers(v1alpha2::ListContainersRequest::default()).await.map_err(|s| s.to_string())?;
            Ok((pods.get_ref().items.len(), containers.get_ref().containers.len()))
        }
    }
}

/// GET `url` with curl (`-k` for the kubelet's self-signed certificate); the body, or why not.
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

fn pod_status<'a>(pods: &'a [Value], name: &str, node: &str) -> Option<&'a Value> {
    let full = format!("{name}-{node}");
    pods.iter().find(|p| p["metadata"]["name"] == full.as_str()).map(|p| &p["status"])
}

fn is_running(status: &Value) -> bool {
    status["containerStatuses"]
        .as_array()
        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object()))
}

fn is_ready(status: &Value) -> bool {
    status["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        && status["containerStatuses"].as_array().is_some_and(|cs| cs.iter().all(|c| c["ready"] == true))
}

/// A short account of why a pod is not (yet) running and ready.
fn describe(status: Option<&Value>) -> String {
    let Some(status) = status else { return "not listed by the kubelet".into() };
    let mut parts = vec![format!("phase {}", status["phase"].as_str().unwrap_or("?"))];
    for c in status["containerStatuses"].as_array().into_iter().flatten() {
        let state = &c["state"];
        if let Some(waiting) = state["waiting"].as_object() {
            parts.push(format!(
                "waiting {}: {}",
                waiting.get("reason").and_then(Value::as_str).unwrap_or(""),
                waiting.get("message").and_then(Value::as_str).unwrap_or("")
            ));
        } else if let Some(terminated) = state["terminated"].as_object() {
            parts.push(format!("terminated {}", terminated.get("reason").and_then(Value::as_str).unwrap_or("")));
        } else if state["running"].is_object() {
            parts.push(format!("running, ready {}, restarts {}", c["ready"], c["restartCount"]));
        }
    }
    for cond in status["conditions"].as_array().into_iter().flatten() {
        if cond["status"] != "True" {
            if let Some(message) = cond["message"].as_str() {
                parts.push(format!("{}: {message}", cond["type"].as_str().unwrap_or("")));
            }
        }
    }
    parts.join("; ")
}

/// The CRI errors in a kubelet log, one `Code: what` per kind: the gRPC code, and the error's
/// text with ids, numbers and quoted values taken out.
fn cri_error_kinds(log: &str) -> BTreeSet<String> {
    let mut kinds = BTreeSet::new();
    for line in log.lines() {
        let Some(at) = line.find("rpc error: code = ") else { continue };
        let rest = &line[at + "rpc error: code = ".len()..];
        let (code, desc) = rest.split_once(" desc = ").unwrap_or((rest, ""));
        let code = code.split_whitespace().next().unwrap_or("").trim_matches(|c: char| !c.is_alphanumeric());
        // Where in the kubelet: the log line's message ("...") before the error.
        let what = line[..at].rsplit_once("] \"").map(|(_, m)| m.split('"').next().unwrap_or("")).unwrap_or("");
        let desc: String = desc
            .split_whitespace()
            .take(8)
            .map(|w| {
                let w = w.trim_matches(|c: char| c == '"' || c == '\\' || c == ',' || c == ':');
                if w.len() >= 12 && w.chars().all(|c| c.is_ascii_hexdigit()) || w.chars().any(|c| c.is_ascii_digit()) {
                    "…"
                } else {
                    w
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        kinds.insert(format!("{code} [{what}] {desc}"));
    }
    kinds
}

/// Where the kubelet says its cgroup driver came from.
fn cgroup_driver_source(log: &str) -> String {
    if let Some(line) = log.lines().find(|l| l.contains("Using cgroup driver setting received from the CRI runtime")) {
        let driver = line.rsplit_once("cgroupDriver=").map(|(_, d)| d.trim_matches('"')).unwrap_or("?");
        format!("from RuntimeConfig: {driver}")
    } else if log.contains("CRI implementation should be updated to support RuntimeConfig") {
        "own config (RuntimeConfig UNIMPLEMENTED)".into()
    } else {
        "not logged".into()
    }
}

/// One kubelet over one runtime: start, pods up, logs, pods removed.
async fn run_case(version: &'static str, build: Build, via: Via) -> Outcome {
    let _slot = RUNS_AT_ONCE.acquire().await.unwrap();
    let started = Instant::now();
    let mut outcome = Outcome { kubelet: version, runtime: runtime_name(build), via: Some(via), ..Default::default() };
    let mut run = Run::start(version, build, via).await;
    let host_word = format!("hostpath-content-{}", run.node_name);
    fs::write(run.dir().join("hostpath/hello.txt"), format!("{host_word}\n")).unwrap();
    let defs = pod_defs(&run.dir().join("hostpath"), &host_word);
    outcome.pods = defs.len();

    let result = drive(&mut run, &defs, &mut outcome).await;
    let log = run.kubelet_log_text();
    outcome.cgroup_driver = cgroup_driver_source(&log);
    outcome.cri_errors = cri_error_kinds(&log);
    if !log.contains("No iptables support on this system") && run.kubelet_exited().is_none() {
        outcome.problems.push("the kubelet did not log \"No iptables support on this system\"".into());
    }
    if let Err(problem) = result {
        outcome.problems.push(problem);
    }
    if !outcome.passed() {
        eprintln!(
            "=== kubelet {version}, {}, {via:?}: {:?}\n{}\n{}\n{}",
            outcome.runtime,
            outcome.problems,
            tail(&run.kubelet_log, 80),
            if via == Via::Bridge { tail(&run.bridge_log, 30) } else { String::new() },
            run.containerd.log_tail(30)
        );
    }
    keep_logs(&run, version, &outcome.runtime, via);
    eprintln!(
        "kubelet {version}, {}, {via:?}: {} s, {}",
        outcome.runtime,
        started.elapsed().as_secs(),
        if outcome.passed() { "passed" } else { "FAILED" }
    );
    drop(run);
    outcome
}

/// Keeps the run's kubelet and cri-bridge logs in target/kubelet-logs (the run's directory is
/// removed), named by kubelet version, runtime and path.
fn keep_logs(run: &Run, version: &str, runtime: &str, via: Via) {
    let dest = crate_dir().join("target/kubelet-logs");
    let _ = fs::create_dir_all(&dest);
    let stem =
        format!("{version}-{}-{}", runtime.replace(' ', "-"), if via == Via::Bridge { "bridge" } else { "direct" });
    let _ = fs::copy(&run.kubelet_log, dest.join(format!("{stem}.kubelet.log")));
    if via == Via::Bridge {
        let _ = fs::copy(&run.bridge_log, dest.join(format!("{stem}.cri-bridge.log")));
    }
}

async fn drive(run: &mut Run, defs: &[PodDef], outcome: &mut Outcome) -> Result<(), String> {
    run.wait_kubelet_up().await?;
    for def in defs {
        let file = run.manifests.join(format!("{}.yaml", def.name));
        fs::write(file, serde_json::to_vec_pretty(&def.manifest).unwrap()).unwrap();
    }

    // Every pod running and Ready.
    let deadline = Instant::now() + PODS_READY;
    let mut last = Vec::new();
    loop {
        if let Some(exit) = run.kubelet_exited() {
            return Err(exit);
        }
        if let Ok(pods) = run.kubelet_pods().await {
            last = pods;
        }
        let statuses: Vec<Option<&Value>> = defs.iter().map(|d| pod_status(&last, d.name, &run.node_name)).collect();
        outcome.running = statuses.iter().filter(|s| s.is_some_and(is_running)).count();
        outcome.ready = statuses.iter().filter(|s| s.is_some_and(is_ready)).count();
        if outcome.ready == defs.len() && outcome.running == defs.len() {
            break;
        }
        if Instant::now() > deadline {
            let waiting: Vec<String> = defs
                .iter()
                .zip(&statuses)
                .filter(|(_, s)| !s.is_some_and(|s| is_running(s) && is_ready(s)))
                .map(|(d, s)| format!("{}: {}", d.name, describe(*s)))
                .collect();
            outcome.problems.push(format!(
                "not running and Ready after {} s: {}",
                PODS_READY.as_secs(),
                waiting.join(" | ")
            ));
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for def in defs {
        if let Some(status) = pod_status(&last, def.name, &run.node_name) {
            if status["qosClass"] != def.qos {
                outcome.problems.push(format!("{}: QoS class {} (expected {})", def.name, status["qosClass"], def.qos));
            }
        }
    }

    // Each running container's log, through the kubelet.
    for def in defs {
        if !pod_status(&last, def.name, &run.node_name).is_some_and(is_running) {
            continue;
        }
        match run.container_log(def.name).await {
            Ok(text) => {
                let missing: Vec<&String> = def.log_says.iter().filter(|s| !text.contains(s.as_str())).collect();
                if missing.is_empty() {
                    outcome.logs += 1;
                } else {
                    outcome.problems.push(format!("{}'s log lacks {missing:?}: {text:?}", def.name));
                }
            }
            Err(e) => outcome.problems.push(format!("{}'s log: {e}", def.name)),
        }
    }

    // Removed: manifests deleted, the kubelet forgets the pods, containerd holds no sandbox.
    let (sandboxes_before, _) = run.runtime_holds().await?;
    for def in defs {
        let _ = fs::remove_file(run.manifests.join(format!("{}.yaml", def.name)));
    }
    let deadline = Instant::now() + PODS_GONE;
    let mut listed = defs.len();
    let mut held = (sandboxes_before, 0);
    loop {
        if let Some(exit) = run.kubelet_exited() {
            return Err(exit);
        }
        if let Ok(pods) = run.kubelet_pods().await {
            listed = defs.iter().filter(|d| pod_status(&pods, d.name, &run.node_name).is_some()).count();
        }
        if let Ok(h) = run.runtime_holds().await {
            held = h;
        }
        if listed == 0 && held == (0, 0) {
            outcome.removed = defs.len();
            break;
        }
        if Instant::now() > deadline {
            outcome.removed = defs.len().saturating_sub(held.0.max(listed));
            outcome.problems.push(format!(
                "{} s after the manifests were deleted: the kubelet still lists {listed} pods, containerd holds {} \
                 sandboxes and {} containers",
                PODS_GONE.as_secs(),
                held.0,
                held.1
            ));
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

/// The runs for one kubelet version: through cri-bridge over every containerd, and directly
/// where the kubelet speaks the runtime's CRI.
fn cases() -> Vec<(Build, Via)> {
    let mut cases = vec![
        (Build::V1_4, Via::Bridge),
        (Build::V1_7, Via::Bridge),
        (Build::V1_7, Via::Direct),
        (Build::V2_1, Via::Bridge),
        (Build::V2_1, Via::Direct),
    ];
    // containerd 2.4.2, built by `tools/go-peers.sh` (target/peers/containerd-2.4.2): missing,
    // the test fails saying so (Containerd::start_build names the command).
    cases.extend(containerd_2_4_cases());
    cases
}

/// containerd 2.4.2's runs: through cri-bridge and directly.
fn containerd_2_4_cases() -> Vec<(Build, Via)> {
    vec![(Build::V2_4, Via::Bridge), (Build::V2_4, Via::Direct)]
}

fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| kubelet | runtime | path | pods running | Ready | logs read | removed | cgroup driver |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for o in outcomes {
        let n = o.pods;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}/{n} | {}/{n} | {}/{n} | {}/{n} | {} |",
            o.kubelet,
            o.runtime,
            match o.via {
                Some(Via::Bridge) => "through cri-bridge",
                _ => "direct",
            },
            o.running,
            o.ready,
            o.logs,
            o.removed,
            o.cgroup_driver
        );
    }
    out
}

/// The CRI error kinds of each run through cri-bridge that its direct run on the same
/// containerd did not log, and the other way round.
fn cri_error_differences(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    for bridged in outcomes.iter().filter(|o| o.via == Some(Via::Bridge)) {
        let direct = outcomes.iter().find(|o| o.via == Some(Via::Direct) && o.runtime == bridged.runtime);
        let Some(direct) = direct else {
            let _ = writeln!(out, "- {} via cri-bridge (no direct run): {:?}", bridged.runtime, bridged.cri_errors);
            continue;
        };
        let only_bridge: Vec<&String> = bridged.cri_errors.difference(&direct.cri_errors).collect();
        let only_direct: Vec<&String> = direct.cri_errors.difference(&bridged.cri_errors).collect();
        let _ = writeln!(
            out,
            "- {}: same in both {}; only through cri-bridge {only_bridge:?}; only direct {only_direct:?}",
            bridged.runtime,
            bridged.cri_errors.intersection(&direct.cri_errors).count()
        );
    }
    out
}

async fn kubelet_version_runs(version: &'static str) {
    containerd_support::require_prerequisites();
    require_curl();
    kube_binary(version, "kubelet");
    let started = Instant::now();
    let mut handles = Vec::new();
    for (build, via) in cases() {
        handles.push((build, via, tokio::spawn(run_case(version, build, via))));
    }
    let mut outcomes = Vec::new();
    for (build, via, handle) in handles {
        match handle.await {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => outcomes.push(Outcome {
                kubelet: version,
                runtime: runtime_name(build),
                via: Some(via),
                problems: vec![format!("the run panicked: {e}")],
                ..Default::default()
            }),
        }
    }
    println!("\nkubelet {version} ({} s):\n\n{}", started.elapsed().as_secs(), table(&outcomes));
    println!("CRI errors the kubelet logged, through cri-bridge vs direct:\n{}", cri_error_differences(&outcomes));
    for o in &outcomes {
        println!("  {} {:?}: {:?}", o.runtime, o.via.unwrap_or(Via::Direct), o.cri_errors);
    }

    // Over containerd 1.7 through cri-bridge the kubelet takes its cgroup driver from cri-bridge's
    // RuntimeConfig answer.
    let over_1_7 = outcomes.iter().find(|o| o.runtime == runtime_name(Build::V1_7) && o.via == Some(Via::Bridge));
    if let Some(o) = over_1_7 {
        if o.problems.iter().all(|p| !p.contains("exited")) {
            assert_eq!(
                o.cgroup_driver, "from RuntimeConfig: cgroupfs",
                "kubelet {version} through cri-bridge over containerd 1.7 did not take its cgroup driver from RuntimeConfig"
            );
        }
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(|o| format!("{} {:?}: {}", o.runtime, o.via.unwrap_or(Via::Direct), o.problems.join("; ")))
        .collect();
    assert!(failed.is_empty(), "kubelet {version}:\n{}", failed.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_1_38_static_pods() {
    kubelet_version_runs(KUBELET_1_38).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_1_37_static_pods() {
    kubelet_version_runs(KUBELET_1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_1_34_static_pods() {
    kubelet_version_runs(KUBELET_1_34).await;
}

// ---------------------------------------------------------------------------------------------
// kubeadm's preflight checks.

/// The checks of `kubeadm init phase preflight` that are about the node rather than the CRI and
/// can fail on a test machine, made warnings: cgroup v1 (`SystemVerification`: an error from
/// kubeadm 1.35 on), IP forwarding off, swap on, and the port a real kubelet may hold. Every
/// other check must pass; `CRI` and `ContainerRuntimeVersion` are not among these.
const NON_CRI_CHECKS: &[&str] =
    &["SystemVerification", "FileContent--proc-sys-net-ipv4-ip_forward", "Swap", "Port-10250"];

/// The checks about the CRI.
const CRI_CHECKS: &[&str] = &["CRI", "ContainerRuntimeVersion"];

/// What one kubeadm preflight run said.
struct Preflight {
    passed: bool,
    /// `[ERROR X]` / `[WARNING X]` lines, as `LEVEL X: text`.
    findings: Vec<(String, String, String)>,
    output: String,
}

impl Preflight {
    fn about_cri(&self) -> Vec<String> {
        self.findings
            .iter()
            .filter(|(_, check, _)| CRI_CHECKS.contains(&check.as_str()))
            .map(|(level, check, text)| format!("[{level} {check}]: {text}"))
            .collect()
    }
}

/// `[ERROR X]: text` and `[WARNING X]: text` in kubeadm's output.
fn preflight_findings(output: &str) -> Vec<(String, String, String)> {
    let mut findings = Vec::new();
    for line in output.lines() {
        let line = line.trim();
        for level in ["ERROR", "WARNING"] {
            let Some(rest) = line.strip_prefix(&format!("[{level} ")) else { continue };
            let Some((check, text)) = rest.split_once("]:") else { continue };
            findings.push((level.to_string(), check.to_string(), text.trim().to_string()));
        }
    }
    findings
}

/// `kubeadm init phase preflight --dry-run` of `version` against the CRI on `socket`.
async fn kubeadm_preflight(version: &str, socket: &Path, dir: &Path) -> Preflight {
    let kubeadm = kube_binary(version, "kubeadm");
    let kubelet_dir = kube_binary(version, "kubelet").parent().unwrap().to_path_buf();
    let config = dir.join("kubeadm.yaml");
    // The node is named localhost: the Hostname check resolves the name from /etc/hosts. The
    // advertise address is left to kubeadm (the default route's interface; kubeadm refuses
    // 127.0.0.1, "unable to select an IP from lo network interface"): the preflight checks only
    // look at it (proxy variables), nothing connects to it. The version is given: kubeadm would
    // otherwise ask dl.k8s.io.
    fs::write(
        &config,
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: localhost\n  criSocket: unix://{}\n---\n\
             apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v{version}\n",
            socket.display()
        ),
    )
    .unwrap();
    let dry_run_dir = dir.join("dry-run");
    fs::create_dir_all(&dry_run_dir).unwrap();
    let mut path = std::ffi::OsString::from(kubelet_dir.as_os_str());
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let output = tokio::process::Command::new(&kubeadm)
        .args(["init", "phase", "preflight", "--dry-run", "--v=1"])
        .arg(format!("--config={}", config.display()))
        .arg(format!("--ignore-preflight-errors={}", NON_CRI_CHECKS.join(",")))
        // kubeadm's dry-run directory, else /etc/kubernetes/tmp/kubeadm-init-dryrun*.
        .env("KUBEADM_INIT_DRYRUN_DIR", &dry_run_dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {} ({e})", kubeadm.display()));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    Preflight { passed: output.status.success(), findings: preflight_findings(&text), output: text }
}

/// kubeadm `version`'s preflight through cri-bridge over containerd 1.7 (the CRI checks must
/// pass) and directly against containerd 1.7 (reported).
async fn kubeadm_version_preflight(version: &'static str) {
    containerd_support::require_prerequisites();
    let _slot = RUNS_AT_ONCE.acquire().await.unwrap();
    let _node = NodeGuard::acquire();
    let n = RUN_COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = PathBuf::from(format!("/tmp/crib-ka-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let footprint = NodeFootprint { dir: dir.clone(), cgroup_root: format!("crib-kubeadm-{}-{n}", std::process::id()) };
    let containerd = Containerd::start_build(Build::V1_7).await;
    let (bridge, socket, bridge_log) = start_bridge(&dir, &containerd.socket).await;

    let bridged = kubeadm_preflight(version, &socket, &dir).await;
    let direct = kubeadm_preflight(version, &containerd.socket, &dir).await;
    let summary = |p: &Preflight| {
        let mut lines: Vec<String> = p.findings.iter().map(|(l, c, t)| format!("    [{l} {c}]: {t}")).collect();
        if !p.passed {
            let all: Vec<&str> = p.output.lines().collect();
            lines.extend(all[all.len().saturating_sub(6)..].iter().map(|l| format!("    | {l}")));
        }
        format!("exit {}\n{}", if p.passed { "0" } else { "non-zero" }, lines.join("\n"))
    };
    println!(
        "\nkubeadm {version} init phase preflight --dry-run, ignoring {} non-CRI checks:\n  through cri-bridge over \
         containerd 1.7.24: {}\n  directly against containerd 1.7.24: {}",
        NON_CRI_CHECKS.len(),
        summary(&bridged),
        summary(&direct)
    );
    let cri = bridged.about_cri();
    if !bridged.passed || !cri.is_empty() {
        eprintln!("{}\n{}", bridged.output, tail(&bridge_log, 40));
    }
    drop(bridge);
    drop(containerd);
    drop(footprint);
    assert!(cri.is_empty(), "kubeadm {version}'s CRI checks through cri-bridge over containerd 1.7: {cri:?}");
    assert!(bridged.passed, "kubeadm {version} preflight through cri-bridge failed:\n{}", bridged.output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_preflight_cri_checks() {
    for version in [KUBELET_1_38, KUBELET_1_37, KUBELET_1_34] {
        kubeadm_version_preflight(version).await;
    }
}
