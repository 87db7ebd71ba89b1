//! The node e2e suite's own services, started on their own: its etcd, API server and namespace
//! controller (`e2e_node.test --run-services-mode`) and its kubelet (`--run-kubelet-mode`), as
//! the suite starts them, so that a test can drive the node with kubectl as an operator would.

use super::{path_without_systemd, peer, repo_list_yaml, tail, Node, KUBELET_BASE_CONFIG};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The API server the suite starts (`framework.TestContext.Host`'s default).
pub const API_SERVER: &str = "https://127.0.0.1:6443";
/// The kubelet's read-only port, which the suite turns on (`ports.KubeletReadOnlyPort`).
pub const KUBELET_READ_ONLY: &str = "http://127.0.0.1:10255";

/// The services and the kubelet, running; stopped (kubelet first) when dropped.
pub struct Cluster {
    pub dir: PathBuf,
    /// The kubeconfig the suite writes for its kubelet (a bearer token, the API server).
    pub kubeconfig: PathBuf,
    kubelet: Option<Child>,
    services: Option<Child>,
}

impl Cluster {
    /// Starts the services, then the kubelet on `node`'s endpoint, and waits until the node is
    /// Ready.
    pub fn start(node: &Node, dir: &Path) -> Cluster {
        let suite = peer("e2e_node.test");
        peer("kubelet");
        let token = format!("crib-{}", std::process::id());
        let kubelet_config = dir.join("kubelet-base.yaml");
        fs::write(&kubelet_config, KUBELET_BASE_CONFIG).unwrap();
        let repo_list = dir.join("repo-list.yaml");
        fs::write(&repo_list, repo_list_yaml(&node.registry)).unwrap();
        let path = path_without_systemd(dir);
        let endpoint = format!("unix://{}", node.endpoint.display());
        let spawn = |mode: &str, log: &str| {
            let out = fs::File::create(dir.join(log)).unwrap();
            Command::new(&suite)
                .current_dir(dir)
                .env("PATH", &path)
                .env("KUBE_TEST_REPO_LIST", &repo_list)
                .arg(mode)
                .arg(format!("--bearer-token={token}"))
                .arg(format!("--container-runtime-endpoint={endpoint}"))
                .arg(format!("--image-service-endpoint={endpoint}"))
                .arg(format!("--kubelet-config-file={}", kubelet_config.display()))
                .arg(format!("--report-dir={}", dir.display()))
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("start {} {mode}: {e}", suite.display()))
        };
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            kubeconfig: dir.join("kubeconfig"),
            kubelet: None,
            services: Some(spawn("--run-services-mode", "services-mode.log")),
        };
        cluster.wait_for("the API server", Duration::from_secs(120), || {
            Command::new("curl")
                .args(["-ksf", "-o", "/dev/null", "-H"])
                .arg(format!("Authorization: Bearer {token}"))
                .arg(format!("{API_SERVER}/readyz"))
                .status()
                .is_ok_and(|s| s.success())
        });
        cluster.kubelet = Some(spawn("--run-kubelet-mode", "kubelet-mode.log"));
        cluster.wait_for("the node to be Ready", Duration::from_secs(120), || {
            cluster.kubeconfig.is_file()
                && cluster
                    .kubectl_output(&[
                        "get",
                        "nodes",
                        "-o",
                        "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}",
                    ])
                    .is_ok_and(|out| out.trim() == "True")
        });
        cluster
    }

    fn wait_for(&self, what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "{what}: not after {within:?}\n== services:\n{}\n== kubelet:\n{}",
                tail(&self.dir.join("services-mode.log"), 30),
                tail(&self.dir.join("kubelet.log"), 30)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `kubectl ARGS` against the cluster; its stdout, or its stderr as the error.
    pub fn kubectl_output(&self, args: &[&str]) -> Result<String, String> {
        let output = self.kubectl(args).stdin(Stdio::null()).output().map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// `kubectl ARGS`, succeeding; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        self.kubectl_output(args).unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    /// A kubectl command against the cluster, to be run by the caller.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut command = Command::new(peer("kubectl"));
        command.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        command
    }

    /// Applies a manifest (YAML or JSON).
    pub fn apply(&self, manifest: &str) {
        apply_with(self.kubectl(&["apply", "-f", "-"]), manifest);
    }
}

/// Runs `kubectl` (an `apply -f -` command) with `manifest` on its standard input; it must
/// succeed.
pub fn apply_with(mut kubectl: Command, manifest: &str) {
    let mut child =
        kubectl.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("run kubectl apply");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
    let Output { status, stderr, .. } = child.wait_with_output().unwrap();
    assert!(status.success(), "kubectl apply: {}\n{manifest}", String::from_utf8_lossy(&stderr));
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The kubelet mode stops its kubelet on SIGTERM; the services mode its servers.
        for child in [self.kubelet.take(), self.services.take()].into_iter().flatten() {
            let mut child = child;
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        super::clean_kubelet_root();
    }
}
