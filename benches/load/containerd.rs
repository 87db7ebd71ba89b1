//! Real containerds as runtimes of the load benchmark: each started here from its binary, on a
//! config of its own in the temp dir, as a child that goes with the benchmark.
//!
//! `LOAD_CONTAINERDS`: a comma-separated list of `containerd` binaries, or `none`. Left unset,
//! `cargo bench --bench load` takes the ones CI's peers leave on the machine: Debian's
//! `/usr/bin/containerd` (1.6.20 on bookworm) and `target/peers/containerd-2.4.2/bin/containerd`
//! (`tools/go-peers.sh`), each where it exists; the smoke run of `cargo test --benches` takes none.
//! Only `Version` is measured against them (their CRI plugins hold no container).

use crate::load_proc::Child;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A containerd binary and what it serves.
pub struct Containerd {
    pub binary: PathBuf,
    /// As `containerd --version` gives it (`1.6.20~ds1`, `v2.4.2`), without a leading `v`.
    pub version: String,
    /// 2.x serves CRI v1 only; 1.6 and 1.7 serve v1alpha2 as well.
    pub serves_v1alpha2: bool,
}

impl Containerd {
    fn of(binary: PathBuf) -> Containerd {
        let output = Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("LOAD_CONTAINERDS: cannot run {} --version: {e}", binary.display()));
        // `containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1`: the third word.
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let version = text
            .split_whitespace()
            .nth(2)
            .map(|v| v.trim_start_matches('v').to_string())
            .unwrap_or_else(|| panic!("LOAD_CONTAINERDS: {} --version printed {text:?}", binary.display()));
        let serves_v1alpha2 = !version.starts_with('2');
        Containerd { binary, version, serves_v1alpha2 }
    }

    /// The short name in the report: `containerd 1.6.20`.
    pub fn name(&self) -> String {
        let plain = self.version.split(['~', '+', '-']).next().unwrap_or(&self.version);
        format!("containerd {plain}")
    }

    /// Starts it on `dir/<label>/containerd.sock`; its log is `dir/<label>.log`.
    pub fn start(&self, dir: &Path, label: &str) -> (Child, PathBuf) {
        let home = dir.join(label);
        std::fs::create_dir_all(&home).expect("the containerd's directory");
        let socket = home.join("containerd.sock");
        let config = home.join("config.toml");
        std::fs::write(&config, self.config(&home, &socket)).expect("the containerd's config");
        let args = ["--config".to_string(), config.display().to_string()];
        let program = self.binary.to_str().expect("a UTF-8 path to containerd");
        let mut child = Child::guarded(&self.name(), program, &args, &dir.join(format!("{label}.log")));
        child.wait_for_socket(&socket);
        (child, socket)
    }

    /// Root and state of its own; the CRI plugin on the `native` snapshotter; the plugins this
    /// machine lacks the means for left out (their load failures would only fill the log).
    fn config(&self, home: &Path, socket: &Path) -> String {
        let (h, s) = (home.display(), socket.display());
        if self.serves_v1alpha2 {
            format!(
                "version = 2\nroot = \"{h}/root\"\nstate = \"{h}/state\"\n\
                 disabled_plugins = [\"io.containerd.internal.v1.opt\", \"io.containerd.snapshotter.v1.aufs\", \
                 \"io.containerd.snapshotter.v1.btrfs\", \"io.containerd.snapshotter.v1.devmapper\", \
                 \"io.containerd.snapshotter.v1.zfs\", \"io.containerd.tracing.processor.v1.otlp\"]\n\
                 [grpc]\n  address = \"{s}\"\n[ttrpc]\n  address = \"{s}.ttrpc\"\n[debug]\n  level = \"warn\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\"]\n  disable_apparmor = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"native\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  conf_dir = \"{h}/cni\"\n"
            )
        } else {
            format!(
                "version = 3\nroot = \"{h}/root\"\nstate = \"{h}/state\"\n\
                 disabled_plugins = [\"io.containerd.internal.v1.opt\", \"io.containerd.tracing.processor.v1.otlp\", \
                 \"io.containerd.nri.v1.nri\"]\n\
                 [grpc]\n  address = \"{s}\"\n[ttrpc]\n  address = \"{s}.ttrpc\"\n[debug]\n  level = \"warn\"\n\
                 [plugins.\"io.containerd.cri.v1.images\"]\n  snapshotter = \"native\"\n\
                 [plugins.\"io.containerd.cri.v1.runtime\"]\n  disable_apparmor = true\n\
                 [plugins.\"io.containerd.cri.v1.runtime\".cni]\n  conf_dir = \"{h}/cni\"\n"
            )
        }
    }
}

/// The containerds to measure (`LOAD_CONTAINERDS`, see the module's doc); `benching` is whether
/// this is `cargo bench` rather than the smoke run.
pub fn selected(benching: bool) -> Vec<Containerd> {
    let binaries: Vec<PathBuf> = match std::env::var("LOAD_CONTAINERDS") {
        Ok(list) if list.trim() == "none" => vec![],
        Ok(list) => list.split(',').map(str::trim).filter(|b| !b.is_empty()).map(PathBuf::from).collect(),
        Err(_) if benching => {
            let ci_peers = [
                PathBuf::from("/usr/bin/containerd"),
                Path::new(env!("CARGO_MANIFEST_DIR")).join("target/peers/containerd-2.4.2/bin/containerd"),
            ];
            let (found, missing): (Vec<_>, Vec<_>) = ci_peers.into_iter().partition(|b| b.exists());
            for binary in missing {
                eprintln!("{} is not here (.ci/run puts it there): not measured", binary.display());
            }
            found
        }
        Err(_) => vec![],
    };
    binaries.into_iter().map(Containerd::of).collect()
}
