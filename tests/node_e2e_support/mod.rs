//! Kubernetes' node end-to-end suite (`test/e2e_node` of 1.37.2, built by
//! `tools/build-node-e2e.sh`) on a node of the tests' own: a runtime (containerd of a given build,
//! Docker through cri-dockerd, or both behind a routed cri-bridge), cri-bridge on its default
//! config in front of it or not, the suite's images in the test registry, and the suite itself,
//! which starts its own etcd, API server and namespace controller, and the kubelet 1.37.2 beside
//! it, then drives pods through the API. Each test's result is read from ginkgo's JSON report.
//!
//! Used by tests/node_e2e.rs (CI's part of the suite) and by `tools/node-e2e.sh` (any part, any
//! runtime). One node at a time: the kubelet's root is /var/lib/kubelet and its ports are fixed.
#![allow(dead_code)]

pub mod cluster;

use crate::docker_support::containerd_support::{lookalikes, unmount_under, Build, Containerd, Extras, Options};
use crate::docker_support::{Docker, DockerExtras};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOP: &str = env!("CARGO_MANIFEST_DIR");
/// The Kubernetes release of the suite and its kubelet.
pub const KUBERNETES: &str = "1.37.2";
/// The suite's pod CIDR (its default kubelet config), the pods' bridge subnet here.
pub const POD_SUBNET: &str = "10.100.0.0/24";
/// Where the suite's kubelet keeps its state (`services.KubeletRootDirectory`).
const KUBELET_ROOT: &str = "/var/lib/kubelet";
/// The registry hosts the runtime mirrors to the test registry: a few tests name
/// `registry.k8s.io/…` images outside the suite's registry override.
pub const MIRRORED_HOSTS: &[&str] = &["registry.k8s.io", "gcr.io", "docker.io"];
/// The sandbox image: the one the suite's image manifest names (`pause:3.10.2`), mirrored.
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10.2";
/// The RuntimeClass handler a routed node sends to Docker (`routes.handlers`).
pub const DOCKER_HANDLER: &str = "docker";

/// Which runtime the node runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runtime {
    Containerd(Build),
    /// Docker 20.10 through cri-dockerd 0.4.3.
    CriDockerd,
    /// containerd 2.4.2 (the default) and cri-dockerd (handler `docker`) behind one cri-bridge.
    Routed,
    /// Any CRI socket already serving (`unix:///…` or a path).
    Socket(PathBuf),
}

impl Runtime {
    /// `containerd-2.4.2`, `containerd-1.7.24`, `containerd-1.6.20`, `containerd-1.4.13`,
    /// `cri-dockerd`, `routed`, or a CRI socket (`unix:///run/crio/crio.sock`, a path).
    pub fn parse(name: &str) -> Result<Runtime, String> {
        Ok(match name {
            "containerd-2.4.2" => Runtime::Containerd(Build::V2_4),
            "containerd-2.1.9" => Runtime::Containerd(Build::V2_1),
            "containerd-1.7.24" => Runtime::Containerd(Build::V1_7),
            "containerd-1.6.20" => Runtime::Containerd(Build::System),
            "containerd-1.4.13" => Runtime::Containerd(Build::V1_4),
            "cri-dockerd" => Runtime::CriDockerd,
            "routed" => Runtime::Routed,
            socket if socket.starts_with("unix://") || socket.starts_with('/') => {
                Runtime::Socket(PathBuf::from(socket.trim_start_matches("unix://")))
            }
            other => {
                return Err(format!(
                    "unknown runtime {other:?}: containerd-2.4.2, containerd-2.1.9, containerd-1.7.24, \
                     containerd-1.6.20, containerd-1.4.13, cri-dockerd, routed, or a CRI socket"
                ))
            }
        })
    }

    /// A short name for files and messages.
    pub fn label(&self) -> String {
        match self {
            Runtime::Containerd(build) => {
                let version = build.runtime_version().trim_start_matches('v');
                format!("containerd-{}", version.split(['~', '+']).next().unwrap_or(version))
            }
            Runtime::CriDockerd => "cri-dockerd".into(),
            Runtime::Routed => "routed".into(),
            Runtime::Socket(_) => "socket".into(),
        }
    }
}

/// A node ready for the suite: its runtime, cri-bridge if asked, the registry the suite's images
/// come from. Dropping it stops them all.
pub struct Node {
    /// The CRI socket the kubelet is given.
    pub endpoint: PathBuf,
    /// `127.0.0.1:PORT` of the test registry holding the suite's images.
    pub registry: String,
    /// cri-bridge's log, when it runs.
    pub bridge_log: Option<PathBuf>,
    /// Stopped first: cri-bridge, then the runtimes.
    bridge: Option<Child>,
    containerd: Option<Containerd>,
    docker: Option<Docker>,
}

impl Node {
    /// Starts `runtime` with the suite's images, and cri-bridge in front of it when `through_bridge`
    /// (always for `Routed`), its files in `dir`.
    pub async fn start(runtime: &Runtime, through_bridge: bool, dir: &Path) -> Node {
        let scratch = dir.join("images");
        fs::create_dir_all(&scratch).unwrap();
        let agnhost = peer("agnhost");
        let mut node = Node {
            endpoint: PathBuf::new(),
            registry: String::new(),
            bridge_log: None,
            bridge: None,
            containerd: None,
            docker: None,
        };
        let backend = match runtime {
            Runtime::Containerd(build) => {
                let containerd = start_containerd(*build, &scratch, &agnhost).await;
                node.registry = containerd.registry.host();
                let socket = containerd.socket.clone();
                node.containerd = Some(containerd);
                socket
            }
            Runtime::CriDockerd => {
                let images = lookalikes::node_e2e_images(&scratch, &agnhost);
                let docker = Docker::start_extended(DockerExtras { images, pod_subnet: Some(POD_SUBNET) }).await;
                node.registry = docker.registry.host();
                let socket = docker.cri_socket.clone();
                node.docker = Some(docker);
                socket
            }
            Runtime::Routed => {
                let containerd = start_containerd(Build::V2_4, &scratch, &agnhost).await;
                let docker_scratch = dir.join("docker-images");
                fs::create_dir_all(&docker_scratch).unwrap();
                let images = lookalikes::node_e2e_images(&docker_scratch, &agnhost);
                // Docker's pods on a subnet of their own beside containerd's.
                let docker = Docker::start_extended(DockerExtras { images, pod_subnet: Some("10.101.0.0/24") }).await;
                node.registry = containerd.registry.host();
                let config = routed_config(&dir.join("bridge.sock"), &containerd.socket, &docker.cri_socket);
                node.containerd = Some(containerd);
                node.docker = Some(docker);
                node.start_bridge(dir, &config).await;
                return node;
            }
            Runtime::Socket(socket) => {
                let host = std::env::var("NODE_E2E_REGISTRY").unwrap_or_default();
                assert!(
                    !host.is_empty(),
                    "a runtime given by its socket needs NODE_E2E_REGISTRY=HOST:PORT, a registry it can pull \
                     the suite's images from (tools/node-e2e.sh serves one)"
                );
                node.registry = host;
                socket.clone()
            }
        };
        if through_bridge {
            let config = default_config(&dir.join("bridge.sock"), &backend);
            node.start_bridge(dir, &config).await;
        } else {
            node.endpoint = backend;
        }
        node
    }

    /// Starts the cri-bridge binary with `config` (YAML), waits until it listens.
    async fn start_bridge(&mut self, dir: &Path, config: &str) {
        let socket = dir.join("bridge.sock");
        let log = dir.join("bridge.log");
        self.bridge = Some(start_bridge(config, &dir.join("bridge.yaml"), &socket, &log).await);
        self.bridge_log = Some(log);
        self.endpoint = socket;
    }
}

/// Writes `config` (YAML) to `config_path`, starts the cri-bridge binary on it with its output
/// appended to `log`, and waits until it listens on `socket`.
pub async fn start_bridge(config: &str, config_path: &Path, socket: &Path, log: &Path) -> Child {
    fs::write(config_path, config).unwrap();
    let out = fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
        .arg("serve")
        .arg("--config")
        .arg(config_path)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start cri-bridge");
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::UnixStream::connect(socket).await.is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("cri-bridge exited with {status} before listening:\n{}", fs::read_to_string(log).unwrap());
        }
        assert!(Instant::now() < deadline, "cri-bridge does not listen on {} after 60 s", socket.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child
}

impl Node {
    /// Whether the routed node's Docker runs the container `id` (cri-dockerd's ids are Docker's).
    pub fn docker_runs(&self, id: &str) -> bool {
        self.docker.as_ref().is_some_and(|docker| docker.runs_container(id))
    }

    /// `docker pull IMAGE` on the routed node's Docker: the kubelet asks the default backend
    /// whether an image is present, so a pod of the `docker` class finds on Docker only what
    /// was pulled there (docs/routing.md, "Images").
    pub fn docker_pull(&self, image: &str) {
        let docker = self.docker.as_ref().expect("a node with Docker");
        docker.docker(&["pull", "--quiet", image]);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.bridge.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The runtimes stop with their own Drop (containers, shims, mounts, bridges).
        self.containerd.take();
        self.docker.take();
    }
}

async fn start_containerd(build: Build, scratch: &Path, agnhost: &Path) -> Containerd {
    let extras = Extras {
        bridge_subnet: Some(POD_SUBNET),
        images: lookalikes::node_e2e_images(scratch, agnhost),
        mirrored_hosts: MIRRORED_HOSTS.to_vec(),
        sandbox_image: Some(SANDBOX_IMAGE),
        ..Extras::default()
    };
    Containerd::start_extended(build, Options::default(), extras).await
}

/// cri-bridge's default config: a socket and a backend, nothing else.
fn default_config(listen: &Path, backend: &Path) -> String {
    format!("listen:\n  path: {}\nbackend:\n  endpoint: unix://{}\n", listen.display(), backend.display())
}

/// Two backends: containerd as the default, Docker for the `docker` RuntimeClass handler.
fn routed_config(listen: &Path, containerd: &Path, docker: &Path) -> String {
    format!(
        "listen:\n  path: {}\nbackends:\n  - name: containerd\n    endpoint: unix://{}\n  - name: docker\n    endpoint: unix://{}\n\
         routes:\n  default: containerd\n  handlers:\n    {DOCKER_HANDLER}: {{ backend: docker, handler: \"\" }}\n",
        listen.display(),
        containerd.display(),
        docker.display()
    )
}

/// A binary `tools/build-node-e2e.sh` builds beside the kubelet; fails (never skips) saying how.
pub fn peer(name: &str) -> PathBuf {
    let path = Path::new(TOP).join(format!("target/peers/kubernetes-{KUBERNETES}")).join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `bash tools/build-node-e2e.sh` in {TOP} (`.ci/run` does)",
        path.display()
    );
    path
}

/// One test's outcome, as ginkgo reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "SKIP",
        }
    }
}

/// What one run of the suite gave: each test by its full name, and why it failed.
pub struct Results {
    pub outcomes: BTreeMap<String, Outcome>,
    pub failures: BTreeMap<String, String>,
    /// The whole run, suite start to end.
    pub took: Duration,
    /// Where its report, list and logs are.
    pub dir: PathBuf,
}

impl Results {
    pub fn count(&self, outcome: Outcome) -> usize {
        self.outcomes.values().filter(|o| **o == outcome).count()
    }

    /// `PASS|FAIL|SKIP <test>` per line, sorted by name.
    pub fn list(&self) -> String {
        self.outcomes.iter().map(|(name, outcome)| format!("{} {name}\n", outcome.word())).collect()
    }
}

/// Which tests of the suite to run.
pub struct Selection {
    pub focus: String,
    pub skip: String,
    /// A ginkgo label filter (`NodeConformance`), besides the focus.
    pub label_filter: Option<String>,
    /// Test processes at once (ginkgo's `--procs`, through its CLI when above 1): most of a
    /// node test's time is waiting on the node, so a few at once take a fraction of the time. The
    /// first process starts the services and the kubelet; all share them.
    pub procs: u32,
}

impl Default for Selection {
    /// What containerd's and CRI-O's CI run of the suite: `[NodeConformance]`, without the
    /// flaky, slow and serial tests.
    fn default() -> Selection {
        Selection {
            focus: r"\[NodeConformance\]".into(),
            skip: r"\[Flaky\]|\[Slow\]|\[Serial\]".into(),
            label_filter: None,
            procs: 8,
        }
    }
}

/// Runs the suite against `node` with `selection`; its report, the `PASS/FAIL/SKIP` list
/// (`results.txt`), the kubelet's log and the suite's output go to `dir`.
pub fn run_suite(node: &Node, selection: &Selection, dir: &Path) -> Results {
    let suite = peer("e2e_node.test");
    peer("kubelet");
    fs::create_dir_all(dir).unwrap();
    let report = dir.join("report.json");
    let _ = fs::remove_file(&report);
    let kubelet_config = dir.join("kubelet-base.yaml");
    fs::write(&kubelet_config, KUBELET_BASE_CONFIG).unwrap();
    let repo_list = dir.join("repo-list.yaml");
    fs::write(&repo_list, repo_list_yaml(&node.registry)).unwrap();
    let output = fs::File::create(dir.join("suite.log")).unwrap();
    let endpoint = format!("unix://{}", node.endpoint.display());
    let suite_args = [
        format!("--container-runtime-endpoint={endpoint}"),
        format!("--image-service-endpoint={endpoint}"),
        "--prepull-images=false".into(),
        format!("--kubelet-config-file={}", kubelet_config.display()),
        format!("--report-dir={}", dir.display()),
    ];
    let mut ginkgo_args = vec![
        format!("focus={}", selection.focus),
        format!("skip={}", selection.skip),
        // Relative: the CLI puts it in its output directory (the suite's binary alone, in its
        // working directory: the same place).
        "json-report=report.json".into(),
        "no-color".into(),
        "timeout=4h".into(),
        "v".into(),
    ];
    if let Some(filter) = &selection.label_filter {
        ginkgo_args.push(format!("label-filter={filter}"));
    }
    let mut command;
    if selection.procs > 1 {
        // ginkgo's CLI runs the suite's binary on several processes; the report's path is
        // relative to its output directory.
        command = Command::new(ginkgo_cli());
        command.arg(format!("--procs={}", selection.procs)).arg(format!("--output-dir={}", dir.display()));
        command.args(ginkgo_args.iter().map(|a| format!("--{a}")));
        command.arg(&suite).arg("--").args(&suite_args);
    } else {
        command = Command::new(&suite);
        command.args(&suite_args).args(ginkgo_args.iter().map(|a| format!("--ginkgo.{a}")));
    }
    let started = Instant::now();
    let status = command
        .current_dir(dir)
        .env("PATH", path_without_systemd(dir))
        .env("KUBE_TEST_REPO_LIST", &repo_list)
        .stdin(Stdio::null())
        .stdout(output.try_clone().unwrap())
        .stderr(output)
        .status()
        .expect("run e2e_node.test");
    let took = started.elapsed();
    clean_kubelet_root();
    assert!(
        report.is_file(),
        "e2e_node.test exited with {status} and wrote no report; the end of {}:\n{}",
        dir.join("suite.log").display(),
        tail(&dir.join("suite.log"), 60)
    );
    let results = read_report(&report, took, dir);
    fs::write(dir.join("results.txt"), results.list()).unwrap();
    results
}

/// ginkgo's CLI, built by `tools/go-peers.sh` (the version critest and the suite are built with).
fn ginkgo_cli() -> PathBuf {
    let path = Path::new(TOP).join("target/peers/ginkgo-2.32.1");
    assert!(path.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {TOP}", path.display());
    path
}

/// The kubelet config the suite starts from: its own defaults (test/e2e_node/jenkins), and what
/// this machine needs: cgroup v1 allowed (kubelets from 1.35 refuse it by default) and swap.
const KUBELET_BASE_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /
podCIDR: 10.100.0.0/24
volumeStatsAggPeriod: 10s
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
evictionHard:
  memory.available: 250Mi
  nodefs.available: 10%
  nodefs.inodesFree: 5%
evictionMinimumReclaim:
  nodefs.available: 5%
  nodefs.inodesFree: 5%
serializeImagePulls: false
failCgroupV1: false
failSwapOn: false
";

/// The suite's registry override: every registry its images come from is the test registry.
/// `invalidRegistry` and `privateRegistry` stay as they are (tests that expect a failed pull, or
/// one that needs credentials).
fn repo_list_yaml(registry: &str) -> String {
    format!(
        "promoterE2eRegistry: {registry}/e2e-test-images\nbuildImageRegistry: {registry}/build-image\n\
         gcEtcdRegistry: {registry}\ngcRegistry: {registry}\nsigStorageRegistry: {registry}/sig-storage\n\
         dockerLibraryRegistry: {registry}/library\ncloudProviderGcpRegistry: {registry}/cloud-provider-gcp\n"
    )
}

/// The suite runs its kubelet under `systemd-run` whenever that command is on PATH, and this
/// machine has the command but no systemd: a PATH of links to every command but that one.
fn path_without_systemd(dir: &Path) -> PathBuf {
    let bin = dir.join("path");
    let _ = fs::remove_dir_all(&bin);
    fs::create_dir_all(&bin).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    for directory in path.split(':').chain(["/usr/sbin", "/sbin"]) {
        let Ok(entries) = fs::read_dir(directory) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name == "systemd-run" || bin.join(&name).exists() {
                continue;
            }
            let _ = symlink(entry.path(), bin.join(&name));
        }
    }
    bin
}

/// What the suite's kubelet leaves once it is gone: volume mounts under its root.
fn clean_kubelet_root() {
    unmount_under(Path::new(KUBELET_ROOT));
}

/// Each spec (`It`) of ginkgo's JSON report: its full text and state.
fn read_report(report: &Path, took: Duration, dir: &Path) -> Results {
    let text = fs::read_to_string(report).unwrap();
    let suites: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut outcomes = BTreeMap::new();
    let mut failures = BTreeMap::new();
    for suite in suites.as_array().expect("a ginkgo JSON report is an array of suites") {
        for spec in suite["SpecReports"].as_array().into_iter().flatten() {
            if spec["LeafNodeType"] != "It" {
                continue;
            }
            let mut parts: Vec<String> = spec["ContainerHierarchyTexts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect();
            parts.push(spec["LeafNodeText"].as_str().unwrap_or_default().to_string());
            let name = parts.join(" ");
            let outcome = match spec["State"].as_str().unwrap_or_default() {
                "passed" => Outcome::Pass,
                "skipped" | "pending" => Outcome::Skip,
                _ => Outcome::Fail,
            };
            if outcome == Outcome::Fail {
                let message = spec["Failure"]["Message"].as_str().unwrap_or("(no message)");
                failures.insert(name.clone(), message.chars().take(2000).collect());
            }
            outcomes.insert(name, outcome);
        }
    }
    Results { outcomes, failures, took, dir: dir.to_path_buf() }
}

/// The last `lines` lines of a file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
