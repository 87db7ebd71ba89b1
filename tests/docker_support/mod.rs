//! A real, isolated Docker Engine with a real cri-dockerd in front of it, for
//! `tests/docker_backend.rs`: Debian's docker.io (20.10.24) on a containerd of its own, and
//! cri-dockerd 0.4.3 (built by `tools/docker-peers.sh`, CRI v1 only), every socket, root and
//! state in a short temporary directory. Stopped by `Drop`, with whatever their containers left
//! (processes, mounts, cgroups, the pods' bridge), so a panicking test leaves nothing running or
//! mounted.
//!
//! - containerd: the machine's (`/usr/bin/containerd`, the one docker.io depends on), started
//!   here with its own root, state and socket, so that dockerd never picks the system's
//!   `/run/containerd/containerd.sock` nor collides with the tests' other containerds.
//! - dockerd: its own `-H` socket, `--config-file` (no /etc/docker/daemon.json is read), data
//!   root, exec root, pid file and trust key; the `vfs` storage driver; no iptables, no IP
//!   forwarding or masquerading, no `docker0` (`bridge: none`); cgroups under a parent of its own;
//!   and as its default runtime `tools/runc-no-oom-adj`, runc with a negative `oomScoreAdj` raised
//!   to 0 (these machines lack CAP_SYS_RESOURCE, and cri-dockerd gives every sandbox -998).
//! - pods' network: cri-dockerd's CNI (`--network-plugin cni`) with Debian's
//!   containernetworking-plugins (/usr/lib/cni): a conflist of our own with `bridge` (a bridge
//!   per `Docker`, removed by `Drop`, with no address on the host, no masquerading) and
//!   `host-local` addresses in 127.213.N.0/24 (the pod addresses `tools/crictl-check.sh`
//!   normalizes; they route nowhere), then `portmap`. Host-network pods need none of it.
//! - images: Docker can mirror only docker.io, so the tests' images are named on the test
//!   registry (`tests/containerd_support/registry.rs`) on 127.0.0.1: critest's look-alikes of
//!   `pause:3.10` (a `pause` process that exits on SIGTERM: busybox `sleep` as PID 1 would make
//!   every `StopPodSandbox` wait out its 10 s grace) and `e2e-test-images/busybox:1.29-2`
//!   (`tests/containerd_support/lookalikes.rs`), served as OCI manifests, which Docker 20.10
//!   pulls. Docker tries HTTPS first on an insecure registry (127.0.0.0/8 is, by default; the
//!   registry is listed in `insecure-registries` all the same): the registry closes a connection
//!   whose first line is not text (a TLS ClientHello) at once, and Docker goes on over HTTP.
//!
//! Prerequisites are checked first and fail the test, never skip it, saying how to get them.
#![allow(dead_code)]

#[path = "../containerd_support/mod.rs"]
pub mod containerd_support;

// Re-exported for the tests that use this support (not each uses each).
#[allow(unused_imports)]
pub use containerd_support::{host_network_pod, host_network_pod_v1alpha2, unmount_under};
use containerd_support::{lookalikes, Registry, RegistryImage};
use cri_bridge::api::v1;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// cri-dockerd's version, as `tools/docker-peers.sh` builds it.
pub const CRI_DOCKERD_VERSION: &str = "0.4.3";

/// Debian's docker.io: the daemon and its own CLI (not another `docker` on PATH, such as a newer
/// static CLI in /usr/local/bin).
const DOCKERD: &str = "/usr/sbin/dockerd";
const DOCKER_CLI: &str = "/usr/bin/docker";
/// Where Debian's containernetworking-plugins puts the CNI plugins.
const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The images' repositories and tags in the test registry (critest's look-alikes).
const PAUSE_REPOSITORY: &str = "pause";
const PAUSE_TAG: &str = "3.10";
const BUSYBOX_REPOSITORY: &str = "e2e-test-images/busybox";
const BUSYBOX_TAG: &str = "1.29-2";

const HOW_TO_INSTALL: &str = "apt-get install -y docker.io containernetworking-plugins socat busybox-static \
                              (`bash .ci/run` installs them)";

/// What the tests need on the machine: fail (never skip) with how to get it.
pub fn require_prerequisites() {
    let files = [
        DOCKERD,
        DOCKER_CLI,
        "/usr/bin/containerd",
        "/usr/bin/containerd-shim-runc-v2",
        "/usr/lib/cni/bridge",
        "/usr/lib/cni/host-local",
        "/usr/lib/cni/portmap",
        "/usr/lib/cni/loopback",
        "/bin/busybox",
        "/usr/bin/socat",
    ];
    let missing: Vec<&str> = files.into_iter().filter(|path| !Path::new(path).is_file()).collect();
    assert!(missing.is_empty(), "the Docker tests need {}: {HOW_TO_INSTALL}", missing.join(", "));
    let commands = ["runc", "ip", "nsenter", "tar", "sha256sum", "umount"];
    let missing: Vec<&str> = commands.into_iter().filter(|c| find_in_path(c).is_none()).collect();
    assert!(missing.is_empty(), "the Docker tests need {} on PATH: {HOW_TO_INSTALL}", missing.join(", "));
    let cri_dockerd = cri_dockerd_binary();
    assert!(
        cri_dockerd.is_file(),
        "cri-dockerd {CRI_DOCKERD_VERSION} is not built ({} is missing): run `bash tools/docker-peers.sh` in {TOP}",
        cri_dockerd.display()
    );
    let wrapper = Path::new(TOP).join("tools/runc-no-oom-adj");
    assert!(wrapper.is_file(), "{} is missing", wrapper.display());
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().next());
    assert_eq!(uid, Some("0"), "the Docker tests run containers and must run as root");
}

/// `target/peers/cri-dockerd-0.4.3/cri-dockerd`.
pub fn cri_dockerd_binary() -> PathBuf {
    Path::new(TOP).join(format!("target/peers/cri-dockerd-{CRI_DOCKERD_VERSION}/cri-dockerd"))
}

fn find_in_path(command: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).map(|dir| dir.join(command)).find(|p| p.is_file())
}

/// One process of ours: its name (for messages) and log.
struct Daemon {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// containerd, dockerd and cri-dockerd of our own, with everything they own under `dir`.
/// What a `Docker` gets beyond `start`'s defaults.
#[derive(Default)]
pub struct DockerExtras {
    /// More images for the test registry.
    pub images: Vec<RegistryImage>,
    /// The pods' subnet, with the host as their gateway (the kubelet's probes reach them).
    pub pod_subnet: Option<&'static str>,
}

pub struct Docker {
    /// `/tmp/crib-dkr-<pid>-<n>`: kept short, unix socket paths must stay under ~108 bytes.
    pub dir: PathBuf,
    /// cri-dockerd's CRI v1 socket.
    pub cri_socket: PathBuf,
    /// dockerd's API socket (`docker -H unix://…`).
    pub docker_socket: PathBuf,
    /// The containerd dockerd runs its containers on.
    pub containerd_socket: PathBuf,
    /// Docker's version as the engine reports it (`20.10.24+dfsg1` for Debian's 20.10.24).
    pub engine_version: String,
    /// Docker's Engine API version (`1.41` for 20.10).
    pub engine_api_version: String,
    /// The test registry the images are pulled from.
    pub registry: Registry,
    /// `127.0.0.1:PORT/pause:3.10`: cri-dockerd's `--pod-infra-container-image`.
    pub pause_image: String,
    /// `127.0.0.1:PORT/e2e-test-images/busybox:1.29-2`: busybox, with `sh` as its command.
    pub busybox_image: String,
    /// The Linux bridge of the pods' CNI network (made by the `bridge` plugin at the first pod).
    pub bridge: String,
    /// Where the tests' pods may put their logs (`log_directory`).
    pub pod_logs: PathBuf,
    /// containerd, dockerd, cri-dockerd: stopped in the reverse order.
    daemons: Vec<Daemon>,
    cgroup_parent: String,
}

impl Docker {
    /// Starts containerd, dockerd and cri-dockerd, waits until cri-dockerd answers `Version`,
    /// and has Docker pull the pause image (so that a pull that cannot work fails here, clearly).
    pub async fn start() -> Docker {
        Docker::start_extended(DockerExtras::default()).await
    }

    /// `start`, with more images in the test registry and, if asked, the pods' bridge as the
    /// host's gateway to them (`DockerExtras`).
    pub async fn start_extended(extras: DockerExtras) -> Docker {
        require_prerequisites();
        run_docker_was_there();
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let dir = PathBuf::from(format!("/tmp/crib-dkr-{pid}-{n}"));
        if dir.exists() {
            // Left over by an earlier process with the same pid.
            unmount_under(&dir);
            let _ = fs::remove_dir_all(&dir);
        }
        for sub in
            ["containerd", "data", "exec", "cri-dockerd", "cni-conf", "cni-cache", "cni-ipam", "pod-logs", "images"]
        {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }

        let registry = start_registry(&dir.join("images"), extras.images);
        let host = registry.host();
        let pause_image = format!("{host}/{PAUSE_REPOSITORY}:{PAUSE_TAG}");
        let busybox_image = format!("{host}/{BUSYBOX_REPOSITORY}:{BUSYBOX_TAG}");
        // At most 15 characters (IFNAMSIZ - 1); named for remove_stale_bridges.
        let bridge = format!("cbr{}x{n}", pid % 10_000_000);
        containerd_support::remove_stale_bridges();
        let mut docker = Docker {
            cri_socket: dir.join("cri.sock"),
            docker_socket: dir.join("docker.sock"),
            containerd_socket: dir.join("containerd.sock"),
            engine_version: String::new(),
            engine_api_version: String::new(),
            registry,
            pause_image,
            busybox_image,
            bridge,
            pod_logs: dir.join("pod-logs"),
            daemons: Vec::new(),
            cgroup_parent: format!("crib-dkr-{pid}-{n}"),
            dir,
        };
        docker.start_containerd().await;
        docker.start_dockerd(&host).await;
        docker.write_cni_conflist(n, extras.pod_subnet);
        docker.start_cri_dockerd().await;
        let started = Instant::now();
        docker.docker(&["pull", "--quiet", &docker.pause_image]);
        eprintln!("docker pulled {} in {:?}", docker.pause_image, started.elapsed());
        docker
    }

    /// containerd for dockerd (`--containerd`): the CRI plugin off, as dockerd's own managed
    /// containerd has it, and the plugins that would touch paths outside `dir` off.
    async fn start_containerd(&mut self) {
        let d = self.dir.join("containerd");
        let config = d.join("config.toml");
        let text = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  level = "warn"
"#,
            root = d.join("root").display(),
            state = d.join("state").display(),
            socket = self.containerd_socket.display(),
        );
        fs::write(&config, text).unwrap();
        let mut command = Command::new("/usr/bin/containerd");
        command.arg("--config").arg(&config);
        self.spawn("containerd", command);
        let socket = self.containerd_socket.clone();
        self.wait_for_socket(&socket, Duration::from_secs(20)).await;
    }

    /// dockerd, configured by a daemon.json of its own (and only its `-H` by a flag).
    async fn start_dockerd(&mut self, registry_host: &str) {
        let d = &self.dir;
        let wrapper = Path::new(TOP).join("tools/runc-no-oom-adj");
        let config = serde_json::json!({
            "data-root": d.join("data"),
            "exec-root": d.join("exec"),
            "pidfile": d.join("docker.pid"),
            "deprecated-key-path": d.join("key.json"),
            "containerd": self.containerd_socket,
            "storage-driver": "vfs",
            "iptables": false,
            "ip6tables": false,
            "ip-forward": false,
            "ip-masq": false,
            "bridge": "none",
            "userland-proxy": false,
            "exec-opts": ["native.cgroupdriver=cgroupfs"],
            "cgroup-parent": format!("/{}", self.cgroup_parent),
            "oom-score-adjust": 0,
            "runtimes": { "runc-no-oom-adj": { "path": wrapper } },
            "default-runtime": "runc-no-oom-adj",
            "insecure-registries": [registry_host],
            "log-level": "warn",
        });
        let config_file = d.join("daemon.json");
        fs::write(&config_file, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let mut command = Command::new(DOCKERD);
        command
            .arg("--config-file")
            .arg(&config_file)
            .arg("-H")
            .arg(format!("unix://{}", self.docker_socket.display()));
        self.spawn("dockerd", command);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.check_alive();
            if self.docker_socket.exists() {
                let output = self.docker_output(&["version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}"]);
                if output.status.success() {
                    let text = String::from_utf8_lossy(&output.stdout).into_owned();
                    let mut words = text.split_whitespace();
                    self.engine_version = words.next().unwrap_or_default().to_string();
                    self.engine_api_version = words.next().unwrap_or_default().to_string();
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "dockerd never answered `docker version`: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            assert!(Instant::now() < deadline, "dockerd never created {}", self.docker_socket.display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The pods' network: `bridge` (no address on the host, no IP masquerading), addresses from
    /// `host-local` kept in `dir`, and `portmap` for the pods' host ports.
    fn write_cni_conflist(&self, n: u32, pod_subnet: Option<&str>) {
        // With `pod_subnet`, the host is the pods' gateway (the bridge has an address, and the
        // host a route to the subnet); else the pods' addresses route nowhere.
        let subnet = pod_subnet.map(str::to_string).unwrap_or_else(|| format!("127.213.{}.0/24", n % 256));
        let conflist = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": format!("crib-docker-{n}"),
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": pod_subnet.is_some(),
                    "ipMasq": false,
                    "hairpinMode": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{ "subnet": subnet }]],
                        "dataDir": self.dir.join("cni-ipam"),
                    },
                },
                { "type": "portmap", "capabilities": { "portMappings": true } },
            ],
        });
        fs::write(self.dir.join("cni-conf/10-crib.conflist"), serde_json::to_vec_pretty(&conflist).unwrap()).unwrap();
    }

    /// cri-dockerd on `cri_socket`, its streaming server on 127.0.0.1, its pods' network from
    /// CNI, its root directory in `dir`.
    async fn start_cri_dockerd(&mut self) {
        let d = &self.dir;
        let mut command = Command::new(cri_dockerd_binary());
        command
            .arg("--container-runtime-endpoint")
            .arg(format!("unix://{}", self.cri_socket.display()))
            .arg("--docker-endpoint")
            .arg(format!("unix://{}", self.docker_socket.display()))
            .arg("--cri-dockerd-root-directory")
            .arg(d.join("cri-dockerd"))
            .args(["--network-plugin", "cni", "--cni-bin-dir", CNI_BIN_DIR])
            .arg("--cni-conf-dir")
            .arg(d.join("cni-conf"))
            .arg("--cni-cache-dir")
            .arg(d.join("cni-cache"))
            .arg("--pod-infra-container-image")
            .arg(&self.pause_image)
            .args(["--streaming-bind-addr", "127.0.0.1:0", "--log-level", "info"]);
        self.spawn("cri-dockerd", command);
        let socket = self.cri_socket.clone();
        self.wait_for_socket(&socket, Duration::from_secs(30)).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.check_alive();
            match self.native_version().await {
                Ok(_) => return,
                Err(status) => {
                    assert!(Instant::now() < deadline, "cri-dockerd never answered Version: {status:?}")
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILLs cri-dockerd alone (dockerd, containerd and the containers keep running), as a
    /// crash would: its socket file stays behind, refusing connections. Waits until it is reaped;
    /// its log is kept (a restart appends to it). Panics if it is not running.
    pub fn kill_cri_dockerd(&mut self) {
        let at = self
            .daemons
            .iter()
            .position(|d| d.name == "cri-dockerd")
            .expect("cri-dockerd is not running (killed already?)");
        let mut daemon = self.daemons.remove(at);
        signal("KILL", &[daemon.child.id()]);
        let _ = daemon.child.wait();
    }

    /// Starts cri-dockerd again, after `kill_cri_dockerd`, with the same flags, socket and
    /// directories, and waits until it answers `Version` on its socket: how long that took.
    pub async fn restart_cri_dockerd(&mut self) -> Duration {
        assert!(!self.daemons.iter().any(|d| d.name == "cri-dockerd"), "cri-dockerd is still running");
        let started = Instant::now();
        // The killed one's socket file: a stale one would answer `wait_for_socket` never, and
        // cri-dockerd replaces it anyway.
        let _ = fs::remove_file(&self.cri_socket);
        self.start_cri_dockerd().await;
        started.elapsed()
    }

    /// Whether Docker runs container `id` (`docker ps`, full ids).
    pub fn runs_container(&self, id: &str) -> bool {
        self.docker(&["ps", "-q", "--no-trunc"]).lines().any(|l| l.trim() == id)
    }

    /// `Version` asked of cri-dockerd itself, in CRI v1 (the only version it serves).
    pub async fn native_version(&self) -> Result<v1::VersionResponse, tonic::Status> {
        let mut client = v1::runtime_service_client::RuntimeServiceClient::new(self.direct_channel());
        client.version(v1::VersionRequest { version: "0.1.0".into() }).await.map(|r| r.into_inner())
    }

    /// A CRI channel straight to cri-dockerd, bypassing cri-bridge.
    pub fn direct_channel(&self) -> tonic::transport::Channel {
        cri_bridge::grpc::unix_channel(self.cri_socket.clone(), || {})
    }

    /// Runs `command` with its output appended to `dir/<name>.log`.
    fn spawn(&mut self, name: &'static str, mut command: Command) {
        let log = self.dir.join(format!("{name}.log"));
        let out = fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        self.daemons.push(Daemon { name, child, log });
    }

    /// Panics if one of the daemons exited.
    fn check_alive(&mut self) {
        for daemon in &mut self.daemons {
            if let Some(status) = daemon.child.try_wait().ok().flatten() {
                panic!("{} exited at start with {status}", daemon.name);
            }
        }
    }

    async fn wait_for_socket(&mut self, socket: &Path, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            self.check_alive();
            if tokio::net::UnixStream::connect(socket).await.is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "nothing listens on {} after {limit:?}", socket.display());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Docker's CLI (Debian's, matching the engine) on this dockerd: its output, whatever it
    /// exits with.
    pub fn docker_output(&self, args: &[&str]) -> Output {
        Command::new(DOCKER_CLI)
            .arg("-H")
            .arg(format!("unix://{}", self.docker_socket.display()))
            .args(args)
            .env("DOCKER_CONFIG", self.dir.join("docker-cli"))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {DOCKER_CLI} ({e})"))
    }

    /// `docker ARGS` on this dockerd; panics with its output unless it succeeds; its stdout.
    pub fn docker(&self, args: &[&str]) -> String {
        let output = self.docker_output(args);
        assert!(
            output.status.success(),
            "docker {} failed ({}): {}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The last `lines` lines of each daemon's log, to print beside a failure.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for daemon in &self.daemons {
            let text = fs::read_to_string(&daemon.log).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = all[all.len().saturating_sub(lines)..].join("\n");
            out += &format!("--- last {lines} lines of {} ---\n{tail}\n", daemon.log.display());
        }
        out + "---"
    }

    /// Stops everything, newest first, then removes what they left: containers, shims, cgroups,
    /// the bridge, mounts, shim sockets, the directory.
    fn stop(&mut self) {
        // Listed first: `docker rm -f` deletes the tasks that name the shims' sockets, and a shim
        // ended with its task may leave its socket behind.
        let shim_sockets = shim_sockets(&self.dir.join("containerd/state"));
        let dockerd_alive =
            self.daemons.iter_mut().any(|d| d.name == "dockerd" && d.child.try_wait().ok().flatten().is_none());
        if dockerd_alive && self.docker_socket.exists() {
            // The tests remove their pods: anything here belongs to a test that failed.
            let listed = self.docker_output(&["ps", "-aq"]);
            let ids: Vec<String> =
                String::from_utf8_lossy(&listed.stdout).split_whitespace().map(str::to_string).collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f", "-v"];
                args.extend(ids.iter().map(String::as_str));
                let _ = self.docker_output(&args);
            }
        }
        let shims = shim_pids(&self.containerd_socket);
        while let Some(mut daemon) = self.daemons.pop() {
            signal("TERM", &[daemon.child.id()]);
            let deadline = Instant::now() + Duration::from_secs(10);
            while daemon.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = daemon.child.kill();
            let _ = daemon.child.wait();
        }
        // Shims outlive containerd by design; kill their containers with them.
        if !shims.is_empty() {
            let mut doomed = descendants(&shims);
            doomed.extend(&shims);
            signal("KILL", &doomed);
            let deadline = Instant::now() + Duration::from_secs(5);
            while doomed.iter().any(|pid| is_alive(*pid)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for socket in shim_sockets {
            let _ = fs::remove_file(socket);
        }
        remove_cgroups(&self.cgroup_parent);
        if Path::new(&format!("/sys/class/net/{}", self.bridge)).exists() {
            let _ = Command::new("ip").args(["link", "del", &self.bridge]).stderr(Stdio::null()).status();
        }
        if !run_docker_was_there() {
            // dockerd makes /run/docker/plugins (plugin sockets) whatever its exec root; only
            // empty directories go, so a dockerd still running elsewhere keeps what it has.
            let _ = fs::remove_dir("/run/docker/plugins");
            let _ = fs::remove_dir("/run/docker");
        }
        unmount_under(&self.dir);
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails(40));
        }
        self.stop();
    }
}

/// Whether /run/docker was there before this process started its first dockerd.
fn run_docker_was_there() -> bool {
    static THERE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *THERE.get_or_init(|| Path::new("/run/docker").exists())
}

/// The test registry, serving the look-alikes of `pause:3.10` and `e2e-test-images/busybox`.
fn start_registry(scratch: &Path, extra: Vec<RegistryImage>) -> Registry {
    let mut images: Vec<RegistryImage> = lookalikes::critest_images(scratch)
        .into_iter()
        .filter(|image| {
            (image.repository == PAUSE_REPOSITORY && image.tags.iter().any(|t| t == PAUSE_TAG))
                || image.repository == BUSYBOX_REPOSITORY
        })
        .collect();
    assert_eq!(images.len(), 2, "the look-alikes of pause:{PAUSE_TAG} and {BUSYBOX_REPOSITORY}");
    // An extra image under a repository of the two replaces it (its tags are the ones served).
    images.retain(|image| !extra.iter().any(|e| e.repository == image.repository));
    images.extend(extra);
    Registry::start_many(images, sha256_hex)
}

/// The hex SHA-256 of `bytes` (`sha256sum`).
fn sha256_hex(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sha256sum ({e})"));
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "sha256sum failed");
    String::from_utf8_lossy(&output.stdout).split_whitespace().next().unwrap().to_string()
}

fn signal(name: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(|p| p.to_string()))
        .stderr(Stdio::null())
        .status();
}

/// Alive and not a zombie.
fn is_alive(pid: u32) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
}

fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|entries| entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// `containerd-shim-runc-v2 -namespace moby -id … -address <our socket>`: ours only.
fn shim_pids(socket: &Path) -> Vec<u32> {
    let socket = socket.to_str().unwrap();
    all_pids()
        .into_iter()
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first().is_some_and(|a0| a0.ends_with(b"containerd-shim-runc-v2")) && args.contains(&socket.as_bytes())
        })
        .collect()
}

/// Every process below `roots`.
fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in all_pids() {
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // After "comm)": state, then ppid.
        let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut seen = HashSet::new();
    let mut stack = roots.to_vec();
    while let Some(pid) = stack.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if seen.insert(*child) {
                stack.push(*child);
            }
        }
    }
    seen.into_iter().collect()
}

/// The sockets of this containerd's shims (`/run/containerd/s/<hash>`), named in each task's
/// `address` file; a killed shim leaves its socket behind.
fn shim_sockets(state: &Path) -> Vec<PathBuf> {
    let tasks = state.join("io.containerd.runtime.v2.task");
    let mut sockets = Vec::new();
    for namespace in fs::read_dir(tasks).into_iter().flatten().flatten() {
        for task in fs::read_dir(namespace.path()).into_iter().flatten().flatten() {
            if let Ok(address) = fs::read_to_string(task.path().join("address")) {
                if let Some(path) = address.trim().strip_prefix("unix://") {
                    sockets.push(PathBuf::from(path));
                }
            }
        }
    }
    sockets
}

/// Removes the cgroup `parent` (dockerd's `cgroup-parent`) and what is left below it, in every
/// hierarchy (cgroup v1's controllers, or v2's one tree): deepest first, directories only (a
/// cgroup's files go with it).
fn remove_cgroups(parent: &str) {
    let root = Path::new("/sys/fs/cgroup");
    let mut tops = vec![root.join(parent)];
    for hierarchy in fs::read_dir(root).into_iter().flatten().flatten() {
        tops.push(hierarchy.path().join(parent));
    }
    for top in tops.into_iter().filter(|t| t.is_dir()) {
        let mut dirs = vec![top.clone()];
        let mut i = 0;
        while i < dirs.len() {
            for entry in fs::read_dir(&dirs[i]).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(entry.path());
                }
            }
            i += 1;
        }
        for dir in dirs.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}
