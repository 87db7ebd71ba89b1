//! The daemon against an unkind host (issue 23): a signal sent the moment systemd hears READY=1,
//! and silent connections to the metrics port.

mod common;

use common::process::{notifications_until, wait_timeout, Reaped};
use common::{Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::config::{Config, MetricsListen};
use cri_bridge::CriVersion;
use std::io::Write;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");

/// A shell waiting on its stdin to send `signal` to `pid`: a line written to it signals within
/// microseconds (the shell's `kill` builtin, no process to start), so the signal lands in the
/// instant after READY=1 where a late handler would not be there yet.
fn armed_kill(signal: &str, pid: u32) -> (Reaped, ChildStdin) {
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg("read _ && kill -s \"$1\" \"$2\"")
        .args(["sh", signal, &pid.to_string()])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let trigger = shell.stdin.take().unwrap();
    (Reaped(shell), trigger)
}

fn fire(mut trigger: ChildStdin) {
    trigger.write_all(b"\n").unwrap();
}

/// Waits up to 5 s for `log` to hold a line with every one of `parts`.
async fn log_line(log: &Path, parts: &[&str]) -> Option<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return Some(line.to_string());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn version(socket: &Path) -> Result<v1::VersionResponse, tonic::Status> {
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(socket));
    client.version(v1::VersionRequest::default()).await.map(|r| r.into_inner())
}

/// Rounds of start-and-signal: the race with a late handler is narrow, so it is run many times.
const ROUNDS: usize = 30;

#[tokio::test]
async fn sighup_the_moment_ready_is_sent_reloads_the_config_and_does_not_kill() {
    for round in 0..ROUNDS {
        let dir = TempDir::new("hard-hup");
        let socket = dir.path("bridge.sock");
        let file = dir.path("config.yaml");
        std::fs::write(&file, format!("listen:\n  path: {}\nbackend:\n  endpoint: memory\n", socket.display()))
            .unwrap();
        let notify = tokio::net::UnixDatagram::bind(dir.path("notify.sock")).unwrap();
        let log = dir.path("stderr.log");
        let mut bridge = Reaped(
            Command::new(BIN)
                .args(["serve", "--config"])
                .arg(&file)
                .env("NOTIFY_SOCKET", dir.path("notify.sock"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let (mut shell, trigger) = armed_kill("HUP", bridge.id());
        let ready = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
        fire(trigger);
        assert!(ready.last().is_some_and(|m| m.starts_with("READY=1")), "round {round}: {ready:?}");
        assert!(wait_timeout(&mut shell, Duration::from_secs(5)).await.is_some_and(|s| s.success()));
        // The reload tells systemd RELOADING=1, then READY=1 again.
        let seen = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
        let logs = || std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(status) = bridge.try_wait().unwrap() {
            panic!("round {round}: SIGHUP right after READY=1 ended cri-bridge ({status}); log:\n{}", logs());
        }
        assert!(seen.iter().any(|m| m.starts_with("RELOADING=1")), "round {round}: {seen:?}\n{}", logs());
        assert!(log_line(&log, &["config reloaded"]).await.is_some(), "round {round}: log:\n{}", logs());
        let answer = version(&socket).await.unwrap_or_else(|e| panic!("round {round}: Version: {e}"));
        assert_eq!(answer.runtime_name, "cri-bridge-memory");
        assert!(Command::new("kill").arg("-TERM").arg(bridge.id().to_string()).status().unwrap().success());
        let status = wait_timeout(&mut bridge, Duration::from_secs(5)).await;
        assert!(status.is_some_and(|s| s.success()), "round {round}: {status:?}");
    }
}

#[tokio::test]
async fn sigterm_the_moment_ready_is_sent_shuts_down_cleanly() {
    for round in 0..ROUNDS {
        let dir = TempDir::new("hard-term");
        let socket = dir.path("bridge.sock");
        let notify = tokio::net::UnixDatagram::bind(dir.path("notify.sock")).unwrap();
        let log = dir.path("stderr.log");
        let mut bridge = Reaped(
            Command::new(BIN)
                .args(["serve", "--listen"])
                .arg(&socket)
                .env("NOTIFY_SOCKET", dir.path("notify.sock"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let (_shell, trigger) = armed_kill("TERM", bridge.id());
        let ready = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
        fire(trigger);
        assert!(ready.last().is_some_and(|m| m.starts_with("READY=1")), "round {round}: {ready:?}");
        let status = wait_timeout(&mut bridge, Duration::from_secs(5)).await;
        let logs = std::fs::read_to_string(&log).unwrap_or_default();
        // Killed by the signal's default action, it would leave its socket file behind.
        assert!(status.is_some_and(|s| s.success()), "round {round}: {status:?}; log:\n{logs}");
        assert!(!socket.exists(), "round {round}: the socket is removed on a clean stop");
    }
}

/// A free loopback port: bound and let go (a race with another process is possible, not likely).
fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

#[tokio::test]
async fn silent_connections_to_the_metrics_port_neither_keep_a_scrape_out_nor_stay_open() {
    let dir = TempDir::new("hard-metrics");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[CriVersion::V1]).await;
    let address = free_port();
    let config = Config {
        metrics_listen: Some(MetricsListen::Tcp(address)),
        ..common::config(&dir, &dir.path("runtime.sock"), None)
    };
    let bridge = Bridge::start(config).await;
    let opened = tokio::time::Instant::now();
    // Twice as many as the endpoint serves at once: the cap alone must not keep a scraper out.
    let mut silent = Vec::new();
    for _ in 0..2 * cri_bridge::metrics::MAX_SCRAPERS {
        silent.push(tokio::net::TcpStream::connect(address).await.unwrap());
    }
    // A scrape now: answered at once, not after the silent ones time out (10 s before the fix,
    // or closed unanswered).
    let scrape = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(3), scrape)
        .await
        .expect("a scrape answered within 3 s while silent connections are open")
        .expect("the scrape's connection");
    assert!(answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(answer.trim_end().ends_with("# EOF"), "{answer}");
    // Each silent connection is closed once the head timeout (2 s) has passed; 6 s from opening
    // is well short of the old 10 s.
    let mut buf = [0u8; 64];
    for (i, mut stream) in silent.into_iter().enumerate() {
        let read = tokio::time::timeout_at(opened + Duration::from_secs(6), stream.read(&mut buf)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => {}
            Ok(Ok(n)) => panic!("silent connection {i} was sent {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(_) => panic!("silent connection {i} still open {:?} after it was opened", opened.elapsed()),
        }
    }
    bridge.stop().await;
    runtime.stop().await;
}
