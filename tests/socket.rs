//! The frontend socket: stale and live sockets, a regular file in the way, the parent directory,
//! the mode and group, and the cleanup on shutdown — all through `cri_bridge::run`.

mod common;

use common::{Bridge, Runtime, TempDir};
use cri_bridge::api::v1::runtime_service_client::RuntimeServiceClient;
use cri_bridge::api::v1::VersionRequest;
use cri_bridge::config::Config;
use cri_bridge::CriVersion;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// Runs cri-bridge with `config` and expects it to fail at startup (well before 5 s); the error text.
async fn run_fails(config: Config) -> String {
    let result = tokio::time::timeout(Duration::from_secs(5), cri_bridge::run(config, std::future::pending()))
        .await
        .expect("run must return promptly when the socket cannot be bound");
    result.expect_err("run must fail").to_string()
}

/// A v1 `Version` call through the socket at `path`.
async fn v1_version(path: &Path) -> cri_bridge::api::v1::VersionResponse {
    let mut client = RuntimeServiceClient::new(common::channel(path));
    client
        .version(VersionRequest { version: "0.1.0".into() })
        .await
        .expect("v1 Version through cri-bridge")
        .into_inner()
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn stale_socket_is_removed_and_replaced() {
    let dir = TempDir::new("stale");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    let config = common::config(&dir, &dir.path("runtime.sock"), None);
    let listen = config.listen_path.clone();
    drop(std::os::unix::net::UnixListener::bind(&listen).unwrap());
    assert!(
        std::fs::symlink_metadata(&listen).unwrap().file_type().is_socket(),
        "the dropped listener leaves its socket file behind"
    );
    assert!(std::os::unix::net::UnixStream::connect(&listen).is_err(), "nobody listens on the stale socket");

    let bridge = Bridge::start(config).await;
    let answer = v1_version(&listen).await;
    assert_eq!(answer.runtime_name, cri_bridge::memory::RUNTIME_NAME);
    assert_eq!(answer.runtime_api_version, "v1");

    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn live_socket_is_refused_and_left_alone() {
    let dir = TempDir::new("live");
    let config = common::config(&dir, &dir.path("runtime.sock"), None);
    let listen = config.listen_path.clone();
    let other = std::os::unix::net::UnixListener::bind(&listen).unwrap();
    let inode = std::fs::metadata(&listen).unwrap().ino();

    let error = run_fails(config).await;
    assert!(error.contains("already served"), "{error}");
    assert!(error.contains(&listen.display().to_string()), "{error}");

    // The other process's socket is still there, the same file, and still answers.
    assert_eq!(std::fs::metadata(&listen).unwrap().ino(), inode);
    let _client = std::os::unix::net::UnixStream::connect(&listen).expect("the other listener still serves its socket");
    other.set_nonblocking(true).unwrap();
    let (_accepted, _) = other.accept().expect("the other listener still owns the socket");
}

#[tokio::test]
async fn regular_file_is_refused_and_left_alone() {
    let dir = TempDir::new("regular");
    let config = common::config(&dir, &dir.path("runtime.sock"), None);
    let listen = config.listen_path.clone();
    std::fs::write(&listen, "precious data").unwrap();

    let error = run_fails(config).await;
    assert!(error.contains("not a socket"), "{error}");
    assert!(error.contains(&listen.display().to_string()), "{error}");
    assert_eq!(std::fs::read_to_string(&listen).unwrap(), "precious data");
    assert!(std::fs::metadata(&listen).unwrap().is_file());
}

#[tokio::test]
async fn missing_parent_directory_is_created_with_default_mode() {
    let dir = TempDir::new("parent");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    let listen = dir.path("a/b/bridge.sock");
    assert!(!dir.path("a").exists());
    let config = Config { listen_path: listen.clone(), ..common::config(&dir, &dir.path("runtime.sock"), None) };
    assert_eq!(config.listen_mode, 0o660, "the default mode");

    let bridge = Bridge::start(config).await;
    assert!(dir.path("a/b").is_dir());
    assert!(std::fs::symlink_metadata(&listen).unwrap().file_type().is_socket());
    assert_eq!(mode_of(&listen), 0o660);
    v1_version(&listen).await;

    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn configured_mode_is_applied() {
    let dir = TempDir::new("mode");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    let config = Config { listen_mode: 0o600, ..common::config(&dir, &dir.path("runtime.sock"), None) };
    let listen = config.listen_path.clone();

    let bridge = Bridge::start(config).await;
    assert_eq!(mode_of(&listen), 0o600);
    v1_version(&listen).await;

    bridge.stop().await;
    runtime.stop().await;
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

#[tokio::test]
async fn numeric_group_is_applied() {
    let dir = TempDir::new("group");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    let config = Config { listen_group: Some("0".into()), ..common::config(&dir, &dir.path("runtime.sock"), None) };
    let listen = config.listen_path.clone();

    if is_root() {
        let bridge = Bridge::start(config).await;
        assert_eq!(std::fs::metadata(&listen).unwrap().gid(), 0);
        assert_eq!(mode_of(&listen), 0o660);
        v1_version(&listen).await;
        bridge.stop().await;
    } else {
        // Only root (or a member of group 0) may hand the socket to group 0.
        let error = run_fails(config).await;
        assert!(error.contains("cannot set group"), "{error}");
    }
    runtime.stop().await;
}

#[tokio::test]
async fn unknown_group_name_is_an_error_naming_it() {
    let dir = TempDir::new("nogroup");
    let config = Config {
        listen_group: Some("no-such-group-cri-bridge".into()),
        ..common::config(&dir, &dir.path("runtime.sock"), None)
    };
    let error = run_fails(config).await;
    assert!(error.contains("no-such-group-cri-bridge"), "{error}");
    assert!(error.contains("listen.group"), "{error}");
}

/// A start that fails after binding (here: the group cannot be resolved) must not leave behind a
/// socket file nobody listens on: a kubelet would find the path present but refusing connections.
#[tokio::test]
async fn failed_start_leaves_no_socket_file() {
    let dir = TempDir::new("nogroup-file");
    let config = Config {
        listen_group: Some("no-such-group-cri-bridge".into()),
        ..common::config(&dir, &dir.path("runtime.sock"), None)
    };
    let listen = config.listen_path.clone();
    let error = run_fails(config).await;
    assert!(error.contains("no-such-group-cri-bridge"), "{error}");
    assert!(
        std::fs::symlink_metadata(&listen).is_err(),
        "a failed start must not leave a socket file at {}",
        listen.display()
    );
}

#[tokio::test]
async fn socket_is_removed_after_stop() {
    let dir = TempDir::new("stop");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    let config = common::config(&dir, &dir.path("runtime.sock"), None);
    let listen = config.listen_path.clone();

    let bridge = Bridge::start(config).await;
    v1_version(&listen).await;
    assert!(listen.exists());
    bridge.stop().await;
    assert!(std::fs::symlink_metadata(&listen).is_err(), "{} must be removed on shutdown", listen.display());

    runtime.stop().await;
}

#[tokio::test]
async fn a_live_socket_whose_backlog_is_full_is_not_taken_for_stale() {
    let dir = TempDir::new("sock-busy");
    let path = dir.path("busy.sock");
    // A live server that never accepts: once its backlog is full, connecting fails with EAGAIN.
    let busy = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let mut waiting = Vec::new();
    let mut full = false;
    for _ in 0..5000 {
        match tokio::net::UnixStream::connect(&path).await {
            Ok(stream) => waiting.push(stream),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                full = true;
                break;
            }
            Err(e) => panic!("connecting to the busy socket: {e}"),
        }
    }
    assert!(full, "the backlog never filled after {} connections", waiting.len());
    let runtime = dir.path("runtime.sock");
    let error = run_fails(Config { listen_path: path.clone(), ..common::config(&dir, &runtime, None) }).await;
    assert!(error.contains("already served by a live process"), "{error}");
    assert!(path.exists(), "the busy server's socket was removed");
    drop(busy);
}

#[tokio::test]
async fn shutdown_leaves_a_listen_socket_that_is_no_longer_ours() {
    let dir = TempDir::new("sock-theirs");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    let bridge = Bridge::start(common::config(&dir, &dir.path("runtime.sock"), None)).await;
    // Another process takes the path over while we run.
    std::fs::remove_file(&bridge.socket).unwrap();
    let theirs = std::os::unix::net::UnixListener::bind(&bridge.socket).unwrap();
    let path = bridge.socket.clone();
    bridge.stop().await;
    assert!(path.exists(), "shutdown removed a socket another process had bound");
    std::os::unix::net::UnixStream::connect(&path).expect("their socket still answers");
    drop(theirs);
    runtime.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_never_appears_with_more_than_its_mode_even_under_umask_000() {
    // A supervisor that starts cri-bridge with umask 000 (DaemonSets, some init systems), mode
    // 0600 configured; a watcher stats the path as fast as it can while cri-bridge starts. Any
    // instant at which the socket is there with a wider mode lets another user connect.
    let dir = TempDir::new("sock-umask");
    let config = dir.path("config.yaml");
    let path = dir.path("b.sock");
    std::fs::write(&config, format!("listen:\n  path: {}\n  mode: \"0600\"\n", path.display())).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (stop, path) = (stop.clone(), path.clone());
            std::thread::spawn(move || {
                let mut modes = std::collections::BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(meta) = std::fs::symlink_metadata(&path) {
                        modes.insert(meta.permissions().mode() & 0o777);
                    }
                }
                modes
            })
        };
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("umask 000; exec {} serve --config {}", env!("CARGO_BIN_EXE_cri-bridge"), config.display()))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::wait_for_socket(&path).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        seen.extend(watcher.join().unwrap());
        let _ = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        child.wait().unwrap();
    }
    let octal: Vec<String> = seen.iter().map(|m| format!("{m:o}")).collect();
    assert_eq!(seen, [0o600].into(), "modes the socket was seen with: {octal:?}");
}

/// A listen path the kernel cannot even look up (a 300-byte file name) is refused before
/// anything is bound, naming the path and why.
#[tokio::test]
async fn a_listen_path_that_cannot_be_inspected_is_an_error_naming_it() {
    let dir = TempDir::new("toolong");
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.listen_path = dir.path(&"s".repeat(300));
    let error = run_fails(config.clone()).await;
    assert!(error.starts_with("cannot inspect"), "{error}");
    assert!(error.contains(&config.listen_path.display().to_string()) && error.contains("too long"), "{error}");
}
