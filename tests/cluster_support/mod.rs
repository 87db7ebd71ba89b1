//! A two-node Kubernetes 1.37.2 cluster on this one machine, for tests/cluster_move.rs and
//! `tools/cluster.sh`: the control plane of `tools/control-plane.sh` (etcd, API server,
//! controller-manager, scheduler), two kubelets 1.37.2 each with its own name, address, ports,
//! root directory, pod log directory and cgroup root, and one kube-proxy for the Services.
//!
//! - `node-a` (10.99.0.1) runs Docker 20.10 through cri-dockerd 0.4.3 behind cri-bridge, with
//!   containerd 2.4.2 started beside it, unused until a test adds it as the default backend
//!   (docs/migrate.md, steps 2 and 3).
//! - `node-b` (10.99.0.2) runs containerd 2.4.2, directly.
//!
//! The node addresses are on an interface of their own (a bridge with no port): the API server
//! reaches each kubelet there, and no traffic leaves the machine. Each runtime's pods are on a
//! Linux bridge with a subnet of their own in 10.110.0.0/16 (apart from the node e2e suite's
//! 10.100.0.0/24), the host their gateway: the host routes between them, so pods on either node
//! reach each other, and kube-proxy (iptables mode) serves the Services, NodePorts on 127.0.0.1
//! included. Pod specs name images under `registry.k8s.io`: containerd mirrors that host to its
//! test registry, and Docker has them pulled and tagged under those names
//! (`imagePullPolicy: IfNotPresent`).
//!
//! Never beside the node e2e suite: every kubelet on a machine shares /var/lib/kubelet/device-plugins
//! (a constant in the kubelet), and each one's device manager takes that directory over.

use crate::docker_support::containerd_support::{lookalikes, unmount_under, Build, Containerd, Extras, Options};
use crate::docker_support::{Docker, DockerExtras};
use crate::node_e2e_support::cluster::apply_with;
use crate::node_e2e_support::{peer, start_bridge, tail, MIRRORED_HOSTS, SANDBOX_IMAGE};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TOP: &str = env!("CARGO_MANIFEST_DIR");
/// The API server of `tools/control-plane.sh`.
pub const API_SERVER: &str = "https://127.0.0.1:7443";
/// The interface holding the nodes' addresses.
const NODE_LINK: &str = "crib-nodes";
/// The images the workload runs, under the names pods give.
pub const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.66.1";
pub const BUSYBOX: &str = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2";
/// Where the kubelets keep their state: one directory per node.
const KUBELET_ROOTS: &str = "/var/lib/crib-kubelet";

/// What makes one node differ from the other.
struct NodeSpec {
    name: &'static str,
    ip: &'static str,
    port: u16,
    healthz_port: u16,
}

const NODE_A: NodeSpec = NodeSpec { name: "node-a", ip: "10.99.0.1", port: 10350, healthz_port: 10348 };
const NODE_B: NodeSpec = NodeSpec { name: "node-b", ip: "10.99.0.2", port: 10450, healthz_port: 10448 };

/// One node: its runtimes, cri-bridge when it has one, and its kubelet.
pub struct ClusterNode {
    pub name: &'static str,
    pub dir: PathBuf,
    /// The kubelet's root directory.
    pub root: PathBuf,
    /// Its static pod directory (`staticPodPath`).
    pub manifests: PathBuf,
    /// cri-bridge's config file, on node-a.
    pub bridge_config: PathBuf,
    pub bridge_socket: PathBuf,
    pub bridge_log: PathBuf,
    pub docker: Option<Docker>,
    pub containerd: Option<Containerd>,
    bridge: Option<Child>,
    kubelet: Option<Child>,
}

/// The cluster, running; stopped, all of it, when dropped.
pub struct TestCluster {
    pub dir: PathBuf,
    /// The admin's kubeconfig (system:masters).
    pub kubeconfig: PathBuf,
    pub a: ClusterNode,
    pub b: ClusterNode,
    kube_proxy: Option<Child>,
}

impl TestCluster {
    /// Builds nothing (`tools/build-cluster.sh` and `tools/build-node-e2e.sh` have), starts it all
    /// in `dir`, and waits until both nodes are Ready.
    pub async fn start(dir: &Path) -> TestCluster {
        for program in ["kube-apiserver", "kube-proxy", "kubelet", "kubectl", "agnhost"] {
            peer(program);
        }
        fs::create_dir_all(dir).unwrap();
        node_addresses(true);
        let control = dir.join("control-plane");
        script(&["up", &control.display().to_string()]);
        let mut cluster = TestCluster {
            dir: dir.to_path_buf(),
            kubeconfig: control.join("admin.kubeconfig"),
            a: ClusterNode::new(dir, &NODE_A),
            b: ClusterNode::new(dir, &NODE_B),
            kube_proxy: None,
        };
        let scratch = dir.join("images");
        fs::create_dir_all(&scratch).unwrap();
        let agnhost = peer("agnhost");

        // node-a: Docker behind cri-bridge (step 2 of docs/migrate.md), containerd beside it.
        let images = lookalikes::node_e2e_images(&scratch, &agnhost);
        let docker = Docker::start_extended(DockerExtras { images, pod_subnet: Some("10.110.0.0/24") }).await;
        for image in [AGNHOST, BUSYBOX] {
            // Pulled from the test registry, tagged under the name the pods give.
            let (_, path) = image.split_once('/').unwrap();
            let local = format!("{}/{path}", docker.registry.host());
            docker.docker(&["pull", "--quiet", &local]);
            docker.docker(&["tag", &local, image]);
        }
        cluster.a.containerd = Some(start_containerd(&scratch, &agnhost, "10.110.2.0/24").await);
        let config = cluster.a.docker_only_config(&docker);
        cluster.a.docker = Some(docker);
        cluster.a.restart_bridge(&config).await;
        // node-b: containerd, directly.
        cluster.b.containerd = Some(start_containerd(&scratch, &agnhost, "10.110.1.0/24").await);

        let a_endpoint = cluster.a.bridge_socket.clone();
        let b_endpoint = cluster.b.containerd.as_ref().unwrap().socket.clone();
        cluster.a.start_kubelet(&NODE_A, &control, &a_endpoint);
        cluster.b.start_kubelet(&NODE_B, &control, &b_endpoint);
        cluster.kube_proxy = Some(start_kube_proxy(dir, &control));
        for node in [&NODE_A, &NODE_B] {
            cluster.wait_for(&format!("{} to be Ready", node.name), Duration::from_secs(180), || {
                cluster
                    .kubectl_output(&[
                        "get",
                        "node",
                        node.name,
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                    ])
                    .is_ok_and(|out| out.trim() == "True")
            });
        }
        cluster
    }

    /// `kubectl` with the admin's kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut command = Command::new(peer("kubectl"));
        command.arg(format!("--kubeconfig={}", self.kubeconfig.display())).args(args);
        command
    }

    pub fn kubectl_output(&self, args: &[&str]) -> Result<String, String> {
        let output: Output = self.kubectl(args).stdin(Stdio::null()).output().unwrap();
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!("kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr)))
        }
    }

    /// `kubectl ARGS`, which must succeed: its standard output.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        self.kubectl_output(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) {
        apply_with(self.kubectl(&["apply", "-f", "-"]), yaml);
    }

    /// Waits up to `limit` for `ready`, failing with the kubelets' and the control plane's logs.
    pub fn wait_for(&self, what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !ready() {
            if Instant::now() > deadline {
                panic!(
                    "no {what} after {limit:?}. node-a's kubelet:\n{}\nnode-b's kubelet:\n{}",
                    tail(&self.a.dir.join("kubelet.log"), 30),
                    tail(&self.b.dir.join("kubelet.log"), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl ClusterNode {
    fn new(dir: &Path, spec: &NodeSpec) -> ClusterNode {
        let node_dir = dir.join(spec.name);
        let manifests = node_dir.join("manifests");
        fs::create_dir_all(&manifests).unwrap();
        ClusterNode {
            name: spec.name,
            root: Path::new(KUBELET_ROOTS).join(spec.name),
            manifests,
            bridge_config: node_dir.join("cri-bridge.yaml"),
            bridge_socket: node_dir.join("cri-bridge.sock"),
            bridge_log: node_dir.join("cri-bridge.log"),
            dir: node_dir,
            docker: None,
            containerd: None,
            bridge: None,
            kubelet: None,
        }
    }

    /// cri-bridge in front of Docker alone (docs/migrate.md step 2).
    fn docker_only_config(&self, docker: &Docker) -> String {
        format!(
            "listen:\n  path: {}\nbackend:\n  endpoint: unix://{}\n",
            self.bridge_socket.display(),
            docker.cri_socket.display()
        )
    }

    /// Docker and containerd, containerd the default (docs/migrate.md step 3).
    pub fn routed_config(&self) -> String {
        format!(
            "listen:\n  path: {}\nbackends:\n  - name: docker\n    endpoint: unix://{}\n  - name: containerd\n    \
             endpoint: unix://{}\nroutes:\n  default: containerd\n",
            self.bridge_socket.display(),
            self.docker.as_ref().expect("node-a has Docker").cri_socket.display(),
            self.containerd.as_ref().expect("node-a has containerd").socket.display()
        )
    }

    /// Stops cri-bridge if it runs, and starts it on `config`, as `systemctl restart` would.
    pub async fn restart_bridge(&mut self, config: &str) {
        if let Some(mut old) = self.bridge.take() {
            let _ = Command::new("kill").arg("-TERM").arg(old.id().to_string()).status();
            let _ = old.wait();
        }
        self.bridge = Some(start_bridge(config, &self.bridge_config, &self.bridge_socket, &self.bridge_log).await);
    }

    fn start_kubelet(&mut self, spec: &NodeSpec, control: &Path, endpoint: &Path) {
        let cgroup_root = format!("/crib-{}", spec.name);
        make_cgroup_root(&cgroup_root);
        let logs = self.dir.join("pod-logs");
        fs::create_dir_all(&logs).unwrap();
        fs::create_dir_all(&self.root).unwrap();
        let config = self.dir.join("kubelet.yaml");
        fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{endpoint}
address: {ip}
port: {port}
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
podLogsDir: {logs}
staticPodPath: {manifests}
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
authentication:
  anonymous: {{ enabled: false }}
  webhook: {{ enabled: true }}
  x509: {{ clientCAFile: {ca} }}
authorization: {{ mode: Webhook }}
evictionHard: {{ memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1% }}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
failSwapOn: false
failCgroupV1: false
",
                endpoint = endpoint.display(),
                ip = spec.ip,
                port = spec.port,
                healthz = spec.healthz_port,
                logs = logs.display(),
                manifests = self.manifests.display(),
                ca = control.join("pki/ca.crt").display(),
            ),
        )
        .unwrap();
        let log = fs::File::create(self.dir.join("kubelet.log")).unwrap();
        let child = Command::new(peer("kubelet"))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", control.join(format!("{}.kubeconfig", spec.name)).display()))
            .arg(format!("--hostname-override={}", spec.name))
            .arg(format!("--node-ip={}", spec.ip))
            .arg(format!("--root-dir={}", self.root.display()))
            .arg("--v=2")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the kubelet");
        self.kubelet = Some(child);
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        if let Some(mut kubelet) = self.kubelet.take() {
            let _ = kubelet.kill();
            let _ = kubelet.wait();
        }
        if let Some(mut bridge) = self.bridge.take() {
            let _ = bridge.kill();
            let _ = bridge.wait();
        }
        // The runtimes stop with their own Drop (containers, shims, mounts, bridges).
        self.containerd.take();
        self.docker.take();
        unmount_under(&self.root);
        let _ = fs::remove_dir_all(&self.root);
        remove_cgroup_root(&format!("/crib-{}", self.name));
    }
}

impl TestCluster {
    /// What a failed test needs to be understood from CI's output alone: the pods, the events,
    /// and the tails of node-a's kubelet and cri-bridge logs.
    fn report_failure(&self) {
        let pods = self.kubectl_output(&["get", "pods", "-A", "-o", "wide"]).unwrap_or_else(|e| e);
        let events = self.kubectl_output(&["get", "events", "-A", "--sort-by=.lastTimestamp"]).unwrap_or_else(|e| e);
        let events: Vec<&str> = events.lines().collect();
        eprintln!(
            "--- the cluster when the test failed ---\n{pods}\n--- the last 40 events ---\n{}\n\
             --- node-a's kubelet ---\n{}\n--- node-a's cri-bridge ---\n{}\n--- node-b's kubelet ---\n{}\n---",
            events[events.len().saturating_sub(40)..].join("\n"),
            tail(&self.a.dir.join("kubelet.log"), 60),
            tail(&self.a.bridge_log, 30),
            tail(&self.b.dir.join("kubelet.log"), 20),
        );
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.report_failure();
        }
        if let Some(mut proxy) = self.kube_proxy.take() {
            let _ = proxy.kill();
            let _ = proxy.wait();
            // Its iptables chains go with it.
            let _ =
                Command::new(peer("kube-proxy")).arg("--cleanup").stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        let _ = Command::new("bash")
            .arg(Path::new(TOP).join("tools/control-plane.sh"))
            .args(["down", &self.dir.join("control-plane").display().to_string()])
            .stdout(Stdio::null())
            .status();
        node_addresses(false);
    }
}

async fn start_containerd(scratch: &Path, agnhost: &Path, subnet: &'static str) -> Containerd {
    let extras = Extras {
        bridge_subnet: Some(subnet),
        images: lookalikes::node_e2e_images(scratch, agnhost),
        mirrored_hosts: MIRRORED_HOSTS.to_vec(),
        sandbox_image: Some(SANDBOX_IMAGE),
        ..Extras::default()
    };
    Containerd::start_extended(Build::V2_4, Options::default(), extras).await
}

/// kube-proxy, iptables mode, for both nodes (one host, one set of rules): NodePorts on
/// 127.0.0.1 too, so that a client on the host reaches a Service there.
fn start_kube_proxy(dir: &Path, control: &Path) -> Child {
    let log = fs::File::create(dir.join("kube-proxy.log")).unwrap();
    Command::new(peer("kube-proxy"))
        .arg(format!("--kubeconfig={}", control.join("kube-proxy.kubeconfig").display()))
        .args(["--hostname-override=node-a", "--proxy-mode=iptables", "--cluster-cidr=10.110.0.0/16"])
        .args(["--nodeport-addresses=127.0.0.0/8", "--metrics-bind-address=127.0.0.1:10349"])
        .args(["--healthz-bind-address=127.0.0.1:10356", "--conntrack-max-per-core=0", "--v=2"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start kube-proxy")
}

/// `tools/control-plane.sh ARGS`, which must succeed.
fn script(args: &[&str]) {
    let output = Command::new("bash").arg(Path::new(TOP).join("tools/control-plane.sh")).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "tools/control-plane.sh {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The nodes' addresses on an interface of their own (`up`), or the interface gone.
fn node_addresses(up: bool) {
    let _ = Command::new("ip").args(["link", "del", NODE_LINK]).stderr(Stdio::null()).status();
    if !up {
        return;
    }
    let run = |args: &[&str]| {
        let status = Command::new("ip").args(args).status().unwrap();
        assert!(status.success(), "ip {}", args.join(" "));
    };
    // A bridge with no port: an interface of its own (this kernel has no dummy driver).
    run(&["link", "add", NODE_LINK, "type", "bridge"]);
    for node in [&NODE_A, &NODE_B] {
        run(&["addr", "add", &format!("{}/32", node.ip), "dev", NODE_LINK]);
    }
    run(&["link", "set", NODE_LINK, "up"]);
}

/// The kubelet wants its cgroup root to exist in every hierarchy (cgroup v1) or in the one (v2).
fn make_cgroup_root(root: &str) {
    for hierarchy in cgroup_hierarchies() {
        fs::create_dir_all(hierarchy.join(root.trim_start_matches('/'))).unwrap();
    }
}

/// Removes a cgroup root and everything under it, deepest first (only empty cgroups go).
fn remove_cgroup_root(root: &str) {
    fn remove(dir: &Path) {
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    remove(&entry.path());
                }
            }
        }
        let _ = fs::remove_dir(dir);
    }
    for hierarchy in cgroup_hierarchies() {
        remove(&hierarchy.join(root.trim_start_matches('/')));
    }
}

fn cgroup_hierarchies() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![base.to_path_buf()];
    }
    let Ok(entries) = fs::read_dir(base) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != "unified")
        .map(|e| e.path())
        .collect()
}
