//! A kubelet-like pod cgroup for a test's child processes (the pod-scoped socket tells a
//! caller's pod by its cgroup).

use std::path::{Path, PathBuf};
use std::process::Output;

/// A cgroup like the kubelet's for a container of `pod` (under its root, which only root may
/// write), made and removed by the test: cgroup v2 with the systemd layout where the machine
/// has only v2, else the v1 `pids` hierarchy with the cgroupfs layout.
pub struct PodCgroup {
    pub leaf: PathBuf,
    made: Vec<PathBuf>,
}

impl PodCgroup {
    pub fn new(pod: &str, container: &str) -> PodCgroup {
        let unified = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let (base, parts) = if unified {
            let pod = pod.replace('-', "_");
            let parts = vec![
                "kubepods.slice".to_string(),
                "kubepods-besteffort.slice".to_string(),
                format!("kubepods-besteffort-pod{pod}.slice"),
                format!("cri-containerd-{container}.scope"),
            ];
            (PathBuf::from("/sys/fs/cgroup"), parts)
        } else {
            let parts =
                vec!["kubepods".to_string(), "besteffort".to_string(), format!("pod{pod}"), container.to_string()];
            (PathBuf::from("/sys/fs/cgroup/pids"), parts)
        };
        assert!(base.is_dir(), "no cgroup hierarchy at {}", base.display());
        let mut made = Vec::new();
        let mut path = base;
        for part in parts {
            path.push(part);
            if !path.exists() {
                std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {} (root needed): {e}", path.display()));
                made.push(path.clone());
            }
        }
        PodCgroup { leaf: path, made }
    }

    /// Runs `program args` inside this cgroup (off the test's thread, which serves cri-bridge).
    pub fn run(&self, program: &Path, args: &[&str]) -> Output {
        let procs = self.leaf.join("cgroup.procs");
        let script = format!("echo $$ > {} && exec \"$@\"", procs.display());
        let mut command = std::process::Command::new("sh");
        command.arg("-c").arg(script).arg("sh").arg(program).args(args);
        tokio::task::block_in_place(|| command.output().unwrap())
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        for dir in self.made.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}
