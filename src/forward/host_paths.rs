//! Host paths a pod-scoped create or checkpoint makes the runtime open, judged as the runtime
//! resolves them (issue 47). Runtimes follow symlinks in a mount's source (containerd resolves
//! it at create, runc mounts it at start), in a log file's directories and in a checkpoint's
//! location. A check of the path as written, or even of the tree at the moment of the check,
//! would not hold against a container that changes the tree before the runtime opens it.
//!
//! What holds: a path is let open only if (1) no component of it, from `/` down, is a symlink
//! now, and (2) no container the runtimes report can write any component of it: the path is
//! not at or below a read-write mount source of any container (a container can change only
//! what it can write, and on a node that is its read-write mounts; its root file system lies
//! under the runtime's own state directory, which `host_paths` must not name). And a new
//! read-write mount is refused at or above any path a container already uses (its mounts, its
//! log file), so that no later container gets to change what an earlier one was let open.
//! Creates and checkpoints of pod-scoped sockets are judged one at a time (`Held::_paths`), so
//! two of them cannot each pass the other's check. With no writer, nothing can plant a symlink
//! between the check and the runtime's open.

use super::{Forwarder, Session};
use crate::api::v1;
use prost::Message;
use std::path::{Path, PathBuf};

impl Forwarder {
    /// Judges `paths` (each with whether the new container may write it); `writable`: the new
    /// read-write mounts among them. `Err`: why, naming the path.
    pub(super) async fn judge_host_paths(
        &self,
        session: &Session,
        paths: Vec<(String, bool)>,
        writable: &[String],
    ) -> Result<(), String> {
        if paths.is_empty() {
            return Ok(());
        }
        let in_use = self.paths_in_use(session).await?;
        for (path, _) in &paths {
            if let Some(mount) = in_use.writable.iter().find(|w| Path::new(path).starts_with(w)) {
                return Err(format!(
                    "host path {path} is at or below {}, which a container can write (a read-write mount): it could \
                     put a symlink there before the runtime opens it",
                    mount.display()
                ));
            }
        }
        let requested = paths.iter().map(|(p, _)| PathBuf::from(p));
        for mount in writable {
            let used = in_use.used.iter().cloned().chain(requested.clone().filter(|p| p != Path::new(mount)));
            if let Some(under) = used.into_iter().find(|u| u.starts_with(mount)) {
                return Err(format!(
                    "a read-write mount of {mount} would let the container change {}, which a container uses",
                    under.display()
                ));
            }
        }
        let checked: Vec<String> = paths.into_iter().map(|(p, _)| p).collect();
        let walked = tokio::task::spawn_blocking(move || checked.iter().try_for_each(|p| no_symlink_on(p)));
        walked.await.map_err(|e| format!("checking the host paths failed: {e}"))?
    }

    /// Every container's mounts and log file, as every backend reports them, asked on the
    /// caller's connections. A backend that cannot say is no answer: the create is refused.
    async fn paths_in_use(&self, session: &Session) -> Result<InUse, String> {
        let mut in_use = InUse::default();
        let list = v1::ListContainersRequest::default().encode_to_vec();
        for index in 0..self.backends.len() {
            let cannot =
                |e: tonic::Status| format!("the runtime could not say which paths its containers use: {}", e.message());
            let listed = self.ask(session, index, "ListContainers", &list).await.map_err(cannot)?;
            let listed = v1::ListContainersResponse::decode(listed).map_err(|e| e.to_string())?;
            for container in listed.containers {
                let request = v1::ContainerStatusRequest { container_id: container.id.clone(), verbose: false };
                let status = match self.ask(session, index, "ContainerStatus", &request.encode_to_vec()).await {
                    Ok(status) => status,
                    // Removed since it was listed.
                    Err(e) if e.code() == tonic::Code::NotFound => continue,
                    Err(e) => return Err(cannot(e)),
                };
                let Some(status) = v1::ContainerStatusResponse::decode(status).map_err(|e| e.to_string())?.status
                else {
                    continue;
                };
                for mount in status.mounts.iter().filter(|m| !m.host_path.is_empty()) {
                    if !mount.readonly {
                        in_use.writable.push(PathBuf::from(&mount.host_path));
                    }
                    in_use.used.push(PathBuf::from(&mount.host_path));
                }
                if !status.log_path.is_empty() {
                    in_use.used.push(PathBuf::from(&status.log_path));
                }
            }
        }
        Ok(in_use)
    }
}

/// What the node's containers use of the host.
#[derive(Default)]
struct InUse {
    /// Read-write mount sources: a container can change anything at or below them.
    writable: Vec<PathBuf>,
    /// Every mount source and log file.
    used: Vec<PathBuf>,
}

/// No component of `path` (absolute), from `/` down, is a symlink; the components past the
/// first that does not exist are made by the runtime, as directories.
fn no_symlink_on(path: &str) -> Result<(), String> {
    let mut at = PathBuf::from("/");
    for part in Path::new(path).components().skip(1) {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!("host path {path}: {} is a symlink, which the runtime would follow", at.display()))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("host path {path}: {}: {e}", at.display())),
        }
    }
    Ok(())
}
