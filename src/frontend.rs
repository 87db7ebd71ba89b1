//! The listening socket: created with its parent directory, given the configured mode and group,
//! refused when a live process already serves the path, and cleared when only a stale file is left.

use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("{path} is already served by a live process (another cri-bridge?); refusing to take it over")]
    InUse { path: PathBuf },
    #[error("{path} exists and is not a socket; refusing to remove it")]
    NotASocket { path: PathBuf },
    #[error("listen.group: no group named {group:?} in /etc/group")]
    UnknownGroup { group: String },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
}

/// The socket file we created, known by its inode: removed at shutdown only if it is still ours
/// (another cri-bridge may have taken the path over since).
pub struct SocketFile {
    path: PathBuf,
    identity: (u64, u64),
}

impl SocketFile {
    pub fn remove_if_ours(&self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.identity);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        } else {
            tracing::info!(path = %self.path.display(), "the listen socket is no longer ours; leaving it");
        }
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BindError {
    let path = path.to_path_buf();
    move |source| BindError::Io { what, path, source }
}

/// Binds the frontend socket at `path`.
pub async fn bind(path: &Path, mode: u32, group: Option<&str>) -> Result<(UnixListener, SocketFile), BindError> {
    // Resolved first, so that a bad group leaves no socket file behind.
    let gid = group.map(resolve_group).transpose()?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io("cannot create directory", parent))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => return Err(BindError::NotASocket { path: path.to_path_buf() }),
        Ok(_) => match UnixStream::connect(path).await {
            Ok(_) => return Err(BindError::InUse { path: path.to_path_buf() }),
            // Only a refused connection means nobody listens: a busy server's full backlog
            // (EAGAIN) is a live one.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing stale socket");
                std::fs::remove_file(path).map_err(io("cannot remove stale socket", path))?;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(BindError::InUse { path: path.to_path_buf() }),
            Err(e) => return Err(io("cannot tell whether a live process serves", path)(e)),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot inspect", path)(e)),
    }
    let (listener, identity) = bind_privately(path, mode, gid)?;
    Ok((listener, SocketFile { path: path.to_path_buf(), identity }))
}

/// Binds in a fresh directory only we can enter, gives the socket its mode and group there, then
/// renames it into place: at no instant is `path` a socket with more than `mode` (whatever the
/// umask), and the mode and group are never set through a path someone else could swap.
fn bind_privately(path: &Path, mode: u32, gid: Option<u32>) -> Result<(UnixListener, (u64, u64)), BindError> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // Short: a unix socket path has ~108 bytes, and this one is longer than `path` by this much.
    let private = parent.join(format!(".crib{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&private); // left by a crashed process with our pid
    std::fs::DirBuilder::new().mode(0o700).create(&private).map_err(io("cannot create directory", &private))?;
    let staged = private.join("s");
    let result = (|| {
        let listener = UnixListener::bind(&staged).map_err(io("cannot listen on", &staged))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))
            .map_err(io("cannot set mode of", &staged))?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(&staged, None, Some(gid)).map_err(io("cannot set group of", &staged))?;
        }
        let meta = std::fs::symlink_metadata(&staged).map_err(io("cannot inspect", &staged))?;
        std::fs::rename(&staged, path).map_err(io("cannot move the socket to", path))?;
        Ok((listener, (meta.dev(), meta.ino())))
    })();
    let _ = std::fs::remove_dir_all(&private);
    result
}

/// A group number, or a name looked up in /etc/group.
fn resolve_group(group: &str) -> Result<u32, BindError> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").map_err(io("cannot read", Path::new("/etc/group")))?;
    groups
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&group))
        .and_then(|fields| fields.get(2)?.parse().ok())
        .ok_or_else(|| BindError::UnknownGroup { group: group.to_string() })
}
