//! A real, isolated containerd for the tests in `tests/containerd.rs`: its own root, state,
//! sockets and runc root in a short temporary directory, the CRI plugin with the `native`
//! snapshotter and no CNI (pods use the host network), and images built on the spot from
//! busybox-static: imported from a docker-archive, and served for `PullImage` by a registry of
//! the test's own on 127.0.0.1 (`registry`). Stopped, with its shims and their containers, by
//! `Drop`, so a panicking test leaves nothing running or mounted.
//!
//! Five containerd builds can be started (`Build`): the one on PATH (Debian bookworm's 1.6.20),
//! 1.4.13, 1.7.24 and 2.1.9 unpacked from other Debian suites by `tools/debian-unpack.sh`, and
//! 2.4.2 built from source by `tools/go-peers.sh`; each with runc's cgroups managed by cgroupfs
//! (the default) or by systemd (`Options`). For a conformance suite (critest), `Extras` gives pods
//! a network of their own (CNI) and serves images under public names (`lookalikes`).
#![allow(dead_code)]

pub mod lookalikes;
mod registry;

use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion::{self, V1alpha2, V1};
pub use registry::{Image as RegistryImage, Registry};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The pause image the CRI plugin runs every sandbox from (`sandbox_image`).
pub const PAUSE_IMAGE: &str = "cri-bridge.test/pause:1";
/// The image the tests' containers run.
pub const BUSYBOX_IMAGE: &str = "cri-bridge.test/busybox:1";
/// Repository and tag of the image the test registry serves.
const PULLABLE_REPOSITORY: &str = "cri-bridge/busybox";
const PULLABLE_TAG: &str = "1";

/// Applets linked to /bin/busybox in the image.
const APPLETS: &[&str] = &["sh", "echo", "cat", "sleep", "readlink", "ls", "id", "grep"];

const HOW_TO_INSTALL: &str = "run `bash .ci/run`, which installs containerd, runc and busybox-static \
                              (or: apt-get install -y containerd runc busybox-static)";

/// Which containerd to run. Each build runs with its own `ctr` and shim; runc is the machine's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// containerd on PATH: Debian bookworm's 1.6.20 (CRI v1 and v1alpha2, its v1alpha2 being its
    /// v1 service re-decoded).
    System,
    /// Debian bullseye's 1.4.13: CRI v1alpha2 only (Kubernetes 1.19's CRI).
    V1_4,
    /// Debian trixie's 1.7.24: CRI v1 and v1alpha2.
    V1_7,
    /// Debian sid's 2.1.9: CRI v1 only; answers `RuntimeConfig` itself. Configured in version 3
    /// of the format (the CRI plugin split into `io.containerd.cri.v1.runtime` and
    /// `io.containerd.cri.v1.images`); it would also take the version 2 file, migrating it with a
    /// warning.
    V2_1,
    /// containerd 2.4.2, built from source by `tools/go-peers.sh` (target/peers/containerd-2.4.2),
    /// reporting `v2.4.2` as a release build does: CRI v1 only. Configured in version 3 of the
    /// format like 2.1 (2.4 reads version 4 and migrates 3, logging that it did).
    V2_4,
}

/// How a containerd is configured beyond the defaults every test shares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// runc's `SystemdCgroup` option of the default runtime (`runc`, `io.containerd.runc.v2`):
    /// containers' cgroups made by systemd (`slice:prefix:name` paths) rather than by runc
    /// writing cgroupfs. Only the runtime's `options` table is set; 1.4's CRI plugin also has a
    /// top-level `systemd_cgroup`, which is for the legacy `io.containerd.runtime.v1.linux` shim
    /// only and is left unset (unless `legacy_v1_shim`).
    pub systemd_cgroup: bool,
    /// 1.x only: the default runtime (`runc`) is the legacy v1 shim (`containerd-shim`,
    /// `runtime_type = "io.containerd.runtime.v1.linux"`) instead of `io.containerd.runc.v2`. It
    /// takes no `options` table: its runc root is the runtime's `runtime_root`, and the driver the
    /// CRI plugin's top-level `systemd_cgroup`, which is then set to `systemd_cgroup` (containerd
    /// 1.4 refuses that key for any other runtime type; 2.x has no v1 shim).
    pub legacy_v1_shim: bool,
}

impl Build {
    /// `(Debian suite, directory under the crate)` of an unpacked build; `None` for `System`.
    fn unpacked(self) -> Option<(&'static str, &'static str)> {
        match self {
            Build::System => None,
            Build::V1_4 => Some(("bullseye", "target/debian/containerd-1.4.13")),
            Build::V1_7 => Some(("trixie", "target/debian/containerd-1.7.24")),
            Build::V2_1 => Some(("sid", "target/debian/containerd-2.1.9")),
            Build::V2_4 => None,
        }
    }

    /// The `runtime_version` its `Version` reports (Debian's upstream version).
    pub fn runtime_version(self) -> &'static str {
        match self {
            Build::System => "1.6.20~ds1",
            Build::V1_4 => "1.4.13~ds1",
            Build::V1_7 => "1.7.24~ds1",
            Build::V2_1 => "2.1.9+unknown",
            Build::V2_4 => "v2.4.2",
        }
    }

    /// The CRI versions it serves, newest first (so `served()[0]` is what `auto` finds).
    pub fn served(self) -> &'static [CriVersion] {
        match self {
            Build::V1_4 => &[V1alpha2],
            Build::System | Build::V1_7 => &[V1, V1alpha2],
            Build::V2_1 | Build::V2_4 => &[V1],
        }
    }

    /// Plugins that would touch paths outside the test's directory (`opt` makes /opt/containerd,
    /// 2.1's `nri`, enabled by default there, listens on /var/run/nri/nri.sock) or cannot work
    /// here. Only ids the build has (`ctr plugins ls` with none disabled): 1.4.13 and 1.6.20 have
    /// no otlp; 2.1.9 has no aufs and no zfs; 2.4.2, built without btrfs, zfs and devmapper, has
    /// none of those (and `nri` enabled by default, as 2.1).
    fn disabled_plugins(self) -> Vec<&'static str> {
        if self == Build::V2_4 {
            return vec![
                "io.containerd.internal.v1.opt",
                "io.containerd.tracing.processor.v1.otlp",
                "io.containerd.nri.v1.nri",
            ];
        }
        let mut ids = vec!["io.containerd.internal.v1.opt"];
        if self != Build::V2_1 {
            ids.push("io.containerd.snapshotter.v1.aufs");
        }
        ids.extend(["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper"]);
        if self != Build::V2_1 {
            ids.push("io.containerd.snapshotter.v1.zfs");
        }
        if matches!(self, Build::V1_7 | Build::V2_1) {
            ids.push("io.containerd.tracing.processor.v1.otlp");
        }
        if self == Build::V2_1 {
            ids.push("io.containerd.nri.v1.nri");
        }
        ids
    }

    /// The directory holding this build's `containerd`, `ctr` and `containerd-shim-runc-v2`;
    /// fails (never skips) with how to get it.
    fn bin_dir(self) -> PathBuf {
        const OWN: [&str; 3] = ["containerd", "ctr", "containerd-shim-runc-v2"];
        let top = Path::new(env!("CARGO_MANIFEST_DIR"));
        if self == Build::V2_4 {
            let bin = top.join("target/peers/containerd-2.4.2/bin");
            let missing: Vec<&str> = OWN.into_iter().filter(|c| !bin.join(c).is_file()).collect();
            assert!(
                missing.is_empty(),
                "containerd 2.4.2 is not built ({} missing in {}): run `bash tools/go-peers.sh` in {}",
                missing.join(", "),
                bin.display(),
                top.display()
            );
            return bin;
        }
        let Some((suite, dest)) = self.unpacked() else {
            let missing: Vec<&str> = OWN.into_iter().filter(|c| find_in_path(c).is_none()).collect();
            assert!(missing.is_empty(), "containerd tests need {} on PATH: {HOW_TO_INSTALL}", missing.join(", "));
            return find_in_path("containerd").unwrap().parent().unwrap().to_path_buf();
        };
        let bin = top.join(dest).join("usr/bin");
        let missing: Vec<&str> = OWN.into_iter().filter(|c| !bin.join(c).is_file()).collect();
        assert!(
            missing.is_empty(),
            "containerd {} is not unpacked ({} missing in {}): run `tools/debian-unpack.sh {suite} {dest} containerd` \
             in {}",
            self.runtime_version(),
            missing.join(", "),
            bin.display(),
            top.display()
        );
        bin
    }
}

/// What the tests need on the machine besides containerd itself: fail (never skip) with how
/// to get it.
/// A free TCP port on 127.0.0.1 for a program this test starts (a kubelet's ports), chosen below
/// the kernel's ephemeral range. A port taken from the ephemeral range (bind to port 0, then let
/// go) could be handed to another program binding port 0 before ours bound it; containerd's
/// streaming server does that, and a kubelet once failed with "bind: address already in use".
/// Unique within this test process; each test binary starts in a block of its own.
pub fn program_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const BLOCK: u32 = 400;
    let range = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral_from: u32 = range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32768);
    let low = ephemeral_from.saturating_sub(12_000).max(1024);
    let base = low + (std::process::id() % 25) * BLOCK;
    for _ in 0..BLOCK {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % BLOCK;
        let port = u16::try_from(port).expect("below the ephemeral range, which ends under 65536");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 127.0.0.1:{base}..{}", base + BLOCK);
}

pub fn require_prerequisites() {
    let missing: Vec<&str> =
        ["runc", "tar", "sha256sum", "umount"].into_iter().filter(|command| find_in_path(command).is_none()).collect();
    assert!(missing.is_empty(), "containerd tests need {} on PATH: {HOW_TO_INSTALL}", missing.join(", "));
    assert!(Path::new("/bin/busybox").is_file(), "containerd tests need a static /bin/busybox: {HOW_TO_INSTALL}");
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().next());
    assert_eq!(uid, Some("0"), "containerd tests run containers and must run as root");
}

fn find_in_path(command: &str) -> Option<PathBuf> {
    std::env::split_paths(&search_path()).map(|dir| dir.join(command)).find(|p| p.is_file())
}

fn search_path() -> OsString {
    std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into())
}

/// A containerd process of our own, with everything it owns under `dir`.
pub struct Containerd {
    pub build: Build,
    pub options: Options,
    /// `/tmp/crib-ctd-<pid>-<n>`: kept short, unix socket paths must stay under ~108 bytes.
    pub dir: PathBuf,
    /// The gRPC socket (CRI, and containerd's own API).
    pub socket: PathBuf,
    /// containerd's stdout and stderr.
    pub log: PathBuf,
    /// Where pods write their container logs (`log_directory`).
    pub pod_logs: PathBuf,
    /// The registry `pullable_image()` is pulled from, configured as an HTTP mirror.
    pub registry: Registry,
    /// The build's `usr/bin`: its `ctr`, and first on containerd's PATH so it finds its own shim.
    bin: PathBuf,
    child: Option<Child>,
}

impl Containerd {
    /// Starts the containerd on PATH (see `start_build`).
    pub async fn start() -> Containerd {
        Containerd::start_build(Build::System).await
    }

    /// Starts containerd `build` with the default `Options` (see `start_with`).
    pub async fn start_build(build: Build) -> Containerd {
        Containerd::start_with(build, Options::default()).await
    }

    /// Starts containerd `build` configured with `options`, waits until its CRI plugin answers,
    /// and imports the pause and busybox images.
    pub async fn start_with(build: Build, options: Options) -> Containerd {
        Containerd::start_extended(build, options, Extras::default()).await
    }

    /// `start_with`, and what `extras` asks for beyond the defaults.
    pub async fn start_extended(build: Build, options: Options, extras: Extras) -> Containerd {
        require_prerequisites();
        let bin = build.bin_dir();
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let dir =
            PathBuf::from(format!("/tmp/crib-ctd-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst)));
        if dir.exists() {
            // Left over by an earlier process with the same pid.
            unmount_under(&dir);
            let _ = fs::remove_dir_all(&dir);
        }
        for sub in ["root", "state", "runc", "cni-conf", "cni-bin", "pod-logs", "images"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let registry = start_registry(&dir.join("images"), extras.images);
        let socket = dir.join("c.sock");
        let config = dir.join("config.toml");
        let network = match (extras.bridge_subnet, extras.cni) {
            (Some(subnet), _) => Network::Bridge(subnet),
            (None, true) => Network::Cni(cni_bin_dir()),
            (None, false) => Network::None,
        };
        // Where pulls go: the test registry under its own address, and under each mirrored host.
        let registry_host = registry.host();
        let hosts: Vec<&str> =
            std::iter::once(registry_host.as_str()).chain(extras.mirrored_hosts.iter().copied()).collect();
        let setup = Setup { network, hosts: &hosts, sandbox_image: extras.sandbox_image.unwrap_or(PAUSE_IMAGE) };
        fs::write(&config, config_toml(build, options, &dir, &socket, &setup)).unwrap();
        if uses_hosts_toml(build, &setup) {
            for host in &hosts {
                write_hosts_toml(&dir, host, &registry_host);
            }
        }
        match setup.network {
            Network::Cni(_) => write_cni_conflist(&dir),
            Network::Bridge(subnet) => {
                remove_stale_bridges();
                write_bridge_conflist(&dir, subnet)
            }
            Network::None => {}
        }
        let log = dir.join("containerd.log");
        let mut containerd =
            Containerd { build, options, pod_logs: dir.join("pod-logs"), dir, socket, log, registry, bin, child: None };
        containerd.spawn();
        containerd.wait_until_cri_answers().await;
        let archive = build_image_archive(
            &containerd.dir.join("images"),
            "base",
            &[
                ImageDef { tag: PAUSE_IMAGE.into(), entrypoint: &["/bin/sleep", "2147483647"] },
                ImageDef { tag: BUSYBOX_IMAGE.into(), entrypoint: &["/bin/sh"] },
            ],
        );
        containerd.import(&archive, &[PAUSE_IMAGE, BUSYBOX_IMAGE]).await;
        containerd
    }

    /// Runs the containerd process on this directory, its log appended to.
    fn spawn(&mut self) {
        let out = fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut path = OsString::from(self.bin.as_os_str());
        path.push(":");
        path.push(search_path());
        let containerd = self.bin.join("containerd");
        let child = Command::new(&containerd)
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e})", containerd.display()));
        self.child = Some(child);
    }

    /// The containerd process's pid (tests: SIGSTOP it, as a runtime stuck on a lock).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash or the OOM killer ends it: calls in flight unanswered, its socket file
    /// left behind, its shims running on.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts containerd again on the same directory and socket (after `kill`), and waits until
    /// its CRI answers.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "restart after kill");
        self.spawn();
        self.wait_until_cri_answers().await;
    }

    /// `127.0.0.1:PORT/cri-bridge/busybox:1`: busybox, in the test registry only (not imported).
    pub fn pullable_image(&self) -> String {
        self.registry.reference()
    }

    /// The ID (`sha256:` of its config) the CRI gives `pullable_image()` once pulled.
    pub fn pullable_image_id(&self) -> &str {
        self.registry.image_id()
    }

    /// A CRI channel straight to containerd, bypassing cri-bridge.
    pub fn direct_channel(&self) -> tonic::transport::Channel {
        cri_bridge::grpc::unix_channel(self.socket.clone(), || {})
    }

    /// `Version`, asked directly in the oldest CRI version the build serves.
    async fn direct_version(&self) -> Result<(), tonic::Status> {
        if self.build.served().contains(&V1alpha2) {
            let mut client = v1alpha2::runtime_service_client::RuntimeServiceClient::new(self.direct_channel());
            client.version(v1alpha2::VersionRequest::default()).await.map(drop)
        } else {
            let mut client = v1::runtime_service_client::RuntimeServiceClient::new(self.direct_channel());
            client.version(v1::VersionRequest::default()).await.map(drop)
        }
    }

    /// Whether the CRI plugin knows image `tag` (`ImageStatus`, asked as `direct_version` is).
    async fn direct_image_known(&self, tag: &str) -> Result<bool, tonic::Status> {
        if self.build.served().contains(&V1alpha2) {
            let mut client = v1alpha2::image_service_client::ImageServiceClient::new(self.direct_channel());
            let image = Some(v1alpha2::ImageSpec { image: tag.to_string(), ..Default::default() });
            let request = v1alpha2::ImageStatusRequest { image, verbose: false };
            client.image_status(request).await.map(|r| r.get_ref().image.is_some())
        } else {
            let mut client = v1::image_service_client::ImageServiceClient::new(self.direct_channel());
            let image = Some(v1::ImageSpec { image: tag.to_string(), ..Default::default() });
            let request = v1::ImageStatusRequest { image, verbose: false };
            client.image_status(request).await.map(|r| r.get_ref().image.is_some())
        }
    }

    // The support speaks v1alpha2 to containerd itself where the build serves it (the genuine
    // old CRI of 1.4), else v1 (2.x). Panics below print containerd's log tail when `self` is
    // dropped (see `Drop`).
    async fn wait_until_cri_answers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("containerd exited at start with {status}");
            }
            if self.socket.exists() {
                match self.direct_version().await {
                    Ok(_) => return,
                    // containerd runs on without a plugin that failed to load.
                    Err(_) if fs::read_to_string(&self.log).is_ok_and(|log| log.lines().any(cri_plugin_failed)) => {
                        panic!("containerd's CRI plugin failed to load (its config is wrong for this machine)")
                    }
                    Err(status) if Instant::now() > deadline => {
                        panic!("containerd's CRI never answered Version: {status:?}")
                    }
                    Err(_) => {}
                }
            }
            assert!(Instant::now() < deadline, "containerd never created {}", self.socket.display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Imports a docker-archive into the CRI namespace (`k8s.io`), unpacked for the `native`
    /// snapshotter, and waits until the CRI plugin knows every tag in `tags`.
    pub async fn import(&self, archive: &Path, tags: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut imported_at = None;
        for tag in tags {
            loop {
                // The CRI plugin learns about images from containerd's events; one imported while
                // it was still starting can be missed, so import again when it stays unknown.
                if imported_at.is_none_or(|at: Instant| at.elapsed() > Duration::from_secs(5)) {
                    self.ctr(&["images", "import", "--snapshotter", "native", archive.to_str().unwrap()]);
                    imported_at = Some(Instant::now());
                }
                match self.direct_image_known(tag).await {
                    Ok(true) => break,
                    result => assert!(
                        Instant::now() < deadline,
                        "the CRI plugin does not see the imported image {tag}: {result:?}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Builds and imports small images that differ from busybox only by their config (so each
    /// has its own image ID and removing one removes no other), tagged `tags`.
    pub async fn import_extra_images(&self, name: &str, tags: &[&str]) {
        let defs: Vec<ImageDef> =
            tags.iter().map(|t| ImageDef { tag: t.to_string(), entrypoint: &["/bin/sh"] }).collect();
        let archive = build_image_archive(&self.dir.join("images"), name, &defs);
        self.import(&archive, tags).await;
    }

    /// Runs `ctr` against this containerd in the `k8s.io` namespace; panics with its output.
    pub fn ctr(&self, args: &[&str]) -> String {
        let output = Command::new(self.bin.join("ctr"))
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} ({e})", self.bin.join("ctr").display()));
        assert!(
            output.status.success(),
            "ctr {} failed ({}): {}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The last `lines` lines of containerd's log, to print beside a failure.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        format!("--- last {lines} lines of {} ---\n{tail}\n---", self.log.display())
    }

    /// Stops containerd, then whatever it left behind: shims and their containers, cgroups,
    /// mounts, shim sockets, the directory.
    fn stop(&mut self) {
        let shims = shim_pids(&self.socket);
        let cgroups = runc_cgroups(&self.dir.join("runc"));
        let shim_sockets = shim_sockets(&self.dir.join("state"));

        if let Some(mut child) = self.child.take() {
            signal("TERM", &[child.id()]);
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }

        // Shims outlive containerd by design; the tests remove their pods, so any shim left here
        // belongs to a test that failed. Kill its containers with it: a shim's death only
        // reparents them.
        if !shims.is_empty() {
            let mut doomed = descendants(&shims);
            doomed.extend(&shims);
            signal("KILL", &doomed);
            let deadline = Instant::now() + Duration::from_secs(5);
            while doomed.iter().any(|pid| is_alive(*pid)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for cgroup in cgroups {
            let _ = fs::remove_dir(cgroup);
        }
        let bridge = bridge_name(&self.dir);
        if Path::new(&format!("/sys/class/net/{bridge}")).exists() {
            let _ = Command::new("ip").args(["link", "del", &bridge]).stderr(Stdio::null()).status();
        }
        for socket in shim_sockets {
            let _ = fs::remove_file(socket);
        }
        unmount_under(&self.dir);
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail(60));
        }
        self.stop();
    }
}

/// A log line saying a CRI plugin failed to load: 1.x's `io.containerd.grpc.v1.cri`, or 2.x's
/// `io.containerd.cri.v1.runtime` / `.images` (2.x logs `msg="failed to load plugin" id=…`).
fn cri_plugin_failed(line: &str) -> bool {
    line.contains("failed to load plugin")
        && (line.contains("io.containerd.grpc.v1.cri") || line.contains("io.containerd.cri.v1."))
}

/// What a containerd gets beyond the defaults every test shares (`Containerd::start_extended`):
/// what a conformance suite such as critest needs.
#[derive(Default)]
pub struct Extras {
    /// Pods that do not ask for the host network get a network namespace of their own, with an
    /// interface and an address from CNI (`Network::Cni`); without it containerd refuses to run
    /// them (no CNI configuration).
    pub cni: bool,
    /// More images for the test registry, each under its own repository and tags.
    pub images: Vec<RegistryImage>,
    /// Pods on a Linux bridge of their own (Debian's CNI plugins, /usr/lib/cni) with the host as
    /// their gateway, addresses from this subnet: the host reaches them (the kubelet's probes, a
    /// port-forward), as on a real node. Overrides `cni`. The bridge goes with the containerd.
    pub bridge_subnet: Option<&'static str>,
    /// Registry hosts (`registry.k8s.io`, `docker.io`, …) whose pulls go to the test registry
    /// instead: `registry.k8s.io/e2e-test-images/busybox:1.29-2` is then fetched from the test
    /// registry as repository `e2e-test-images/busybox`, tag `1.29-2`.
    pub mirrored_hosts: Vec<&'static str>,
    /// The image of every pod's sandbox container instead of `PAUSE_IMAGE` (pulled when first
    /// needed, so it should be in `images`).
    pub sandbox_image: Option<&'static str>,
}

/// How pods are networked.
enum Network {
    /// No CNI configuration: only pods on the host network run.
    None,
    /// The CNI plugins in this directory (`tools/go-peers.sh`), configured by `write_cni_conflist`.
    Cni(PathBuf),
    /// A bridge with the host as gateway, on this subnet (`write_bridge_conflist`).
    Bridge(&'static str),
}

/// The parts of the configuration `Extras` change.
struct Setup<'a> {
    network: Network,
    /// The registry hosts pulls may name: the test registry's own `127.0.0.1:PORT` first, then
    /// the mirrored ones, all served by the test registry.
    hosts: &'a [&'a str],
    /// `PAUSE_IMAGE` or `Extras::sandbox_image`.
    sandbox_image: &'a str,
}

/// Whether the registry hosts are configured by `hosts.toml` files under `config_path`
/// (`write_hosts_toml`) rather than by `mirrors`: always on 2.x; on 1.6 and 1.7 when public hosts
/// are mirrored, because a `mirrors` endpoint that lacks an image falls back to the public host
/// itself, which a `hosts.toml` whose `server` is the test registry never does; 1.4 has only
/// `mirrors`.
fn uses_hosts_toml(build: Build, setup: &Setup) -> bool {
    match build {
        Build::V2_1 | Build::V2_4 => true,
        Build::V1_4 => false,
        Build::System | Build::V1_7 => setup.hosts.len() > 1,
    }
}

/// The CNI plugins `tools/go-peers.sh` builds; fails (never skips) with how to get them.
fn cni_bin_dir() -> PathBuf {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = top.join("target/peers/cni-1.10.0/bin");
    let missing: Vec<&str> = ["loopback", "tap", "host-local"].into_iter().filter(|p| !bin.join(p).is_file()).collect();
    assert!(
        missing.is_empty(),
        "the CNI plugins are not built ({} missing in {}): run `bash tools/go-peers.sh` in {}",
        missing.join(", "),
        bin.display(),
        top.display()
    );
    bin
}

/// `cni-conf/10-cri-bridge-test.conflist` under `dir`: each pod gets a `tap` interface (`eth0`, a
/// tap device no process holds, inside the pod's network namespace only: no bridge, veth, route or
/// iptables rule on the host) with an address from `host-local`, whose leases stay under `dir`.
/// The addresses are loopback ones (127.213.0.0/16): a pod reaches its own, and whatever the host
/// sends to one stays on the host (answered by nothing), never routed off the machine.
/// containerd adds the loopback itself. CNI 0.4.0, the newest containerd 1.4's libcni reads.
fn write_cni_conflist(dir: &Path) {
    let conflist = serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "cri-bridge-test",
        "plugins": [{
            "type": "tap",
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": "127.213.0.0/16" }]],
                "dataDir": dir.join("cni-ipam"),
            },
        }],
    });
    fs::write(dir.join("cni-conf/10-cri-bridge-test.conflist"), serde_json::to_vec_pretty(&conflist).unwrap()).unwrap();
}

/// Debian's containernetworking-plugins.
const BRIDGE_CNI_BIN: &str = "/usr/lib/cni";

/// The Linux bridge of a containerd's pods (`Network::Bridge`): `cbc<pid>x<n>` after its
/// directory `/tmp/crib-ctd-<pid>-<n>`, at most 15 characters (IFNAMSIZ - 1), so that
/// `remove_stale_bridges` can tell whose it is.
fn bridge_name(dir: &Path) -> String {
    let name = dir.file_name().unwrap().to_string_lossy().replace("crib-ctd-", "");
    let (pid, n) = name.split_once('-').unwrap_or((&name, "0"));
    format!("cbc{pid}x{n}")
}

/// Deletes the pod bridges (`cbc<pid>x<n>` here, `cbr<pid>x<n>` of docker_support) whose test
/// process is gone: a killed run leaves its bridge with the pod subnet's gateway address on it,
/// and the next node on that subnet would route its pods' traffic to the dead bridge.
pub fn remove_stale_bridges() {
    let Ok(links) = fs::read_dir("/sys/class/net") else { return };
    for link in links.flatten() {
        let name = link.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("cbc").or_else(|| name.strip_prefix("cbr")) else { continue };
        let Some(pid) = rest.split_once('x').and_then(|(pid, _)| pid.parse::<u32>().ok()) else { continue };
        if !is_alive(pid) {
            eprintln!("removing the pod bridge {name} of the dead test process {pid}");
            let _ = Command::new("ip").args(["link", "del", &name]).stderr(Stdio::null()).status();
        }
    }
}

/// `cni-conf/10-cri-bridge-test.conflist` for `Network::Bridge`: `bridge` with the host as the
/// gateway (an address on the bridge, a route to the subnet), no masquerading, `host-local`
/// addresses kept under `dir`, and `portmap` for host ports.
fn write_bridge_conflist(dir: &Path, subnet: &str) {
    let missing: Vec<&str> = ["bridge", "host-local", "loopback", "portmap"]
        .into_iter()
        .filter(|p| !Path::new(BRIDGE_CNI_BIN).join(p).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "the CNI plugins {} are missing in {BRIDGE_CNI_BIN}: apt-get install -y containernetworking-plugins",
        missing.join(", ")
    );
    let conflist = serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "cri-bridge-test",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge_name(dir),
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": subnet }]],
                    "dataDir": dir.join("cni-ipam"),
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ],
    });
    fs::write(dir.join("cni-conf/10-cri-bridge-test.conflist"), serde_json::to_vec_pretty(&conflist).unwrap()).unwrap();
}

/// The containerd configuration: everything under `dir`, CRI with the native snapshotter, and
/// the test registry (`setup.hosts[0]`, `127.0.0.1:PORT`) as a plain-HTTP mirror of itself and of
/// each other host in `setup.hosts`. Version 2 of the format is read by every build from 1.3 on;
/// each key below is in 1.4.13's CRI config (`containerd config dump` shows them all taken). 2.x
/// gets the same in version 3 (`config_toml_v3`).
fn config_toml(build: Build, options: Options, dir: &Path, socket: &Path, setup: &Setup) -> String {
    if matches!(build, Build::V2_1 | Build::V2_4) {
        return config_toml_v3(build, options, dir, socket, setup);
    }
    let d = dir.display();
    let s = socket.display();
    let disabled: String = build.disabled_plugins().iter().map(|id| format!("\n  \"{id}\",")).collect();
    let systemd_cgroup = options.systemd_cgroup;
    let (cni_comment, cni_bin) = cni_parts(dir, &setup.network);
    let registry_tables = registry_tables_v2(build, dir, setup);
    let sandbox_image = setup.sandbox_image;
    // The default runtime: runc.v2 with its options table, or the legacy v1 shim, whose driver is
    // the plugin-wide `systemd_cgroup` (see `Options::legacy_v1_shim`).
    let (plugin_wide, runtime) = if options.legacy_v1_shim {
        (
            format!("\n  systemd_cgroup = {systemd_cgroup}"),
            format!(
                r#"      runtime_type = "io.containerd.runtime.v1.linux"
      runtime_root = "{d}/runc""#
            ),
        )
    } else {
        (
            String::new(),
            format!(
                r#"      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
        SystemdCgroup = {systemd_cgroup}"#
            ),
        )
    };
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [{disabled}
]

[grpc]
  address = "{s}"

[ttrpc]
  address = "{s}.ttrpc"

[debug]
  level = "info"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # No CAP_SYS_RESOURCE here: without this every sandbox fails with
  # "can't get final child's PID from pipe" (runc cannot lower oom_score_adj).
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"{plugin_wide}

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
{runtime}

  {cni_comment}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{d}/cni-conf"
{registry_tables}"#
    )
}

/// The CNI section's comment and `bin_dir`.
fn cni_parts(dir: &Path, network: &Network) -> (&'static str, String) {
    match network {
        Network::None => {
            ("# Empty: pods use the host network, CNI is never called.", dir.join("cni-bin").display().to_string())
        }
        Network::Cni(bin) => ("# A tap interface per pod (write_cni_conflist).", bin.display().to_string()),
        Network::Bridge(_) => ("# A bridge with the host as gateway (write_bridge_conflist).", BRIDGE_CNI_BIN.into()),
    }
}

/// The registry tables of the version 2 format.
fn registry_tables_v2(build: Build, dir: &Path, setup: &Setup) -> String {
    if uses_hosts_toml(build, setup) {
        return format!(
            r#"
  # Every host pulls may name, by a hosts.toml under config_path (write_hosts_toml).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{}/certs.d"
"#,
            dir.display()
        );
    }
    let registry = setup.hosts[0];
    let mut tables = String::from(
        r#"
  # Plain HTTP to the test registry. All three builds already default to HTTP for a loopback
  # host (a pull passes without this table); the mirror says so explicitly, as a registry on any
  # other host would need. `mirrors` is the one form all three read (1.6 and 1.7 log it as
  # deprecated in favour of `config_path`, which 1.4 lacks). A mirrored public host (1.4 only)
  # would fall back to the host itself for an image the test registry lacks.
"#,
    );
    for host in setup.hosts {
        tables.push_str(&format!(
            "  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"{host}\"]\n    endpoint = [\"http://{registry}\"]\n"
        ));
    }
    tables
}

/// The configuration of `config_toml` in version 3 of the format, as containerd 2.x writes it
/// (`containerd config default`): the CRI plugin's runtime half in `io.containerd.cri.v1.runtime`,
/// its image half in `io.containerd.cri.v1.images` (the pause image is `pinned_images.sandbox`),
/// only the streaming server left in `io.containerd.grpc.v1.cri`. The registry is configured the
/// 2.x way, by a `hosts.toml` under `config_path` (`write_hosts_toml`): 2.x still reads
/// `mirrors`, but then falls back from the transfer service to its deprecated local pull.
fn config_toml_v3(build: Build, options: Options, dir: &Path, socket: &Path, setup: &Setup) -> String {
    assert!(!options.legacy_v1_shim, "containerd {} has no legacy v1 shim", build.runtime_version());
    let d = dir.display();
    let s = socket.display();
    let disabled: String = build.disabled_plugins().iter().map(|id| format!("\n  \"{id}\",")).collect();
    let systemd_cgroup = options.systemd_cgroup;
    let (cni_comment, cni_bin) = cni_parts(dir, &setup.network);
    let sandbox_image = setup.sandbox_image;
    let arch = go_arch();
    format!(
        r#"version = 3
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [{disabled}
]

[grpc]
  address = "{s}"

[ttrpc]
  address = "{s}.ttrpc"

[debug]
  level = "info"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"

  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox_image}"

  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{d}/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  # See config_toml.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false

  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = "{d}/runc"
        SystemdCgroup = {systemd_cgroup}

  {cni_comment}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{d}/cni-conf"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

# Imports (`ctr images import`) and CRI pulls go through the transfer service, which unpacks
# only for the platform and snapshotter pairs listed here (the default lists overlayfs alone:
# "no unpack platforms defined" for native).
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/{arch}"
  snapshotter = "native"
"#
    )
}

/// `certs.d/<host>/hosts.toml` under `dir`: pulls naming `host` go to the test registry
/// (`registry`) over plain HTTP, for `config_path`. The test registry is the `server` too, so a
/// pull it cannot serve fails there rather than going on to the public host.
fn write_hosts_toml(dir: &Path, host: &str, registry: &str) {
    let hosts = dir.join("certs.d").join(host);
    fs::create_dir_all(&hosts).unwrap();
    let text = format!(
        "server = \"http://{registry}\"\n\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    );
    fs::write(hosts.join("hosts.toml"), text).unwrap();
}

/// One image of a docker-archive: the busybox layer with its own config.
pub struct ImageDef {
    pub tag: String,
    pub entrypoint: &'static [&'static str],
}

/// Writes a docker-archive (`docker save` format) holding `images`, all sharing one layer with
/// /bin/busybox, its applets and a minimal /etc; returns the archive's path.
pub fn build_image_archive(dir: &Path, name: &str, images: &[ImageDef]) -> PathBuf {
    let layer = busybox_layer(dir);
    let layer_digest = sha256_file(&layer);
    let work = dir.join(name);
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(work.join(&layer_digest)).unwrap();
    fs::copy(layer.as_path(), work.join(&layer_digest).join("layer.tar")).unwrap();
    let mut manifest = Vec::new();
    let mut members = vec!["manifest.json".to_string(), layer_digest.clone()];
    for image in images {
        let config = image_config(&image.tag, image.entrypoint, &layer_digest);
        let config_file = format!("{}.json", sha256_bytes(&work, &config));
        fs::write(work.join(&config_file), config.as_slice()).unwrap();
        manifest.push(serde_json::json!({
            "Config": config_file,
            "RepoTags": [image.tag],
            "Layers": [format!("{layer_digest}/layer.tar")],
        }));
        members.push(config_file);
    }
    fs::write(work.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    let archive = dir.join(format!("{name}.tar"));
    run(Command::new("tar").arg("-cf").arg(archive.as_os_str()).arg("-C").arg(work.as_os_str()).args(members));
    archive
}

/// This machine's architecture as OCI (Go) names it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The image config of busybox with `entrypoint`. The tag in a label makes every config, hence
/// every image ID, distinct.
fn image_config(tag: &str, entrypoint: &[&str], layer_digest: &str) -> Vec<u8> {
    let arch = go_arch();
    let config = serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": {
            "Env": ["PATH=/bin"],
            "Entrypoint": entrypoint,
            "Labels": { "cri-bridge.test/tag": tag },
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_digest}")] },
    });
    serde_json::to_vec(&config).unwrap()
}

/// The test registry, serving busybox (the layer the docker-archives hold, with a config of its
/// own) as `cri-bridge/busybox:1`, and `extra`.
fn start_registry(images: &Path, extra: Vec<RegistryImage>) -> Registry {
    let layer = busybox_layer(images);
    let layer_digest = sha256_file(&layer);
    let layer = fs::read(layer).unwrap();
    let label = format!("{PULLABLE_REPOSITORY}:{PULLABLE_TAG} in the test registry");
    let config = image_config(&label, &["/bin/sh"], &layer_digest);
    let pullable = RegistryImage {
        repository: PULLABLE_REPOSITORY.into(),
        tags: vec![PULLABLE_TAG.into()],
        config,
        layers: vec![layer],
    };
    let all = std::iter::once(pullable).chain(extra).collect();
    Registry::start_many(all, |bytes| sha256_bytes(images, bytes))
}

/// The one layer (an uncompressed tar), built once per directory.
fn busybox_layer(dir: &Path) -> PathBuf {
    let layer = dir.join("layer.tar");
    if layer.exists() {
        return layer;
    }
    let rootfs = dir.join("rootfs");
    fs::create_dir_all(rootfs.join("bin")).unwrap();
    fs::create_dir_all(rootfs.join("etc")).unwrap();
    fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    fs::write(rootfs.join("etc/group"), "root:x:0:\n").unwrap();
    run(Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "-cf"])
        .arg(layer.as_os_str())
        .arg("-C")
        .arg(rootfs.as_os_str())
        .arg("."));
    layer
}

fn sha256_file(path: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(path));
    out.split_whitespace().next().unwrap().to_string()
}

fn sha256_bytes(scratch: &Path, bytes: &[u8]) -> String {
    let file = scratch.join(".digest-me");
    fs::write(&file, bytes).unwrap();
    let digest = sha256_file(&file);
    fs::remove_file(file).unwrap();
    digest
}

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(output.status.success(), "{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
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

/// `containerd-shim-runc-v2 -namespace k8s.io -id … -address <our socket>`, or the legacy v1
/// shim's `containerd-shim -namespace k8s.io … -address <our socket> …`: ours only.
fn shim_pids(socket: &Path) -> Vec<u32> {
    let socket = socket.to_str().unwrap();
    all_pids()
        .into_iter()
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first().is_some_and(|a0| a0.ends_with(b"containerd-shim-runc-v2") || a0.ends_with(b"containerd-shim"))
                && args.contains(&socket.as_bytes())
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

/// The cgroups runc created for containers still known to it (from its state files).
fn runc_cgroups(runc_root: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let Ok(namespaces) = fs::read_dir(runc_root) else { return paths };
    for namespace in namespaces.flatten() {
        for container in fs::read_dir(namespace.path()).into_iter().flatten().flatten() {
            let Ok(text) = fs::read_to_string(container.path().join("state.json")) else { continue };
            let Ok(state) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
            if let Some(map) = state["cgroup_paths"].as_object() {
                paths.extend(map.values().filter_map(|v| v.as_str()).map(PathBuf::from));
            }
        }
    }
    paths
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

/// Unmounts everything mounted at or below `dir` (rootfs bind mounts, sandbox /dev/shm),
/// newest first.
pub fn unmount_under(dir: &Path) {
    for _ in 0..3 {
        let mounts: Vec<PathBuf> = fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split(' ').nth(4).map(unescape_mountinfo))
            .filter(|point| point.starts_with(dir))
            .collect();
        if mounts.is_empty() {
            return;
        }
        for point in mounts.iter().rev() {
            let ok = Command::new("umount").arg(point).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(point).stderr(Stdio::null()).status();
            }
        }
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            out.push(u8::from_str_radix(&field[i + 1..i + 4], 8).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(String::from_utf8_lossy(&out).into_owned())
}

/// A v1 pod on the host network (these tests set up no CNI), its logs in `log_directory`.
pub fn host_network_pod(name: &str, log_directory: &Path) -> v1::PodSandboxConfig {
    fs::create_dir_all(log_directory).unwrap();
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "cri-bridge-test".into(),
            attempt: 0,
        }),
        log_directory: log_directory.to_str().unwrap().into(),
        linux: Some(v1::LinuxPodSandboxConfig {
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1::NamespaceOption {
                    network: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The same pod as a v1alpha2 client sends it (the two versions encode these fields alike).
pub fn host_network_pod_v1alpha2(name: &str, log_directory: &Path) -> v1alpha2::PodSandboxConfig {
    use prost::Message;
    let bytes = host_network_pod(name, log_directory).encode_to_vec();
    v1alpha2::PodSandboxConfig::decode(&bytes[..]).expect("v1alpha2 decodes a v1 pod config")
}
