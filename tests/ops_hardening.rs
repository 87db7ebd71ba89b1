//! The daemon against an unkind host (issue 23): a signal sent the moment systemd hears READY=1,
//! silent connections to the metrics port, sockets passed that are not ours or not listening,
//! and a caller whose executable name holds control characters.

mod common;

use common::process::{notifications_until, wait_for_listener, wait_timeout, Reaped};
use common::{Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::config::{Config, MetricsListen};
use cri_bridge::CriVersion;
use std::io::Write;
use std::path::{Path, PathBuf};
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

fn pass_fd_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pass_fd.py")
}

/// `cri-bridge serve --listen <dir>/bridge.sock`, started by `pass_fd.py` with fd 3 of `kind`
/// (at `passed`) and LISTEN_FDS=1, LISTEN_PID as `pid` says; systemd's notifications go to
/// `<dir>/notify.sock`, the log to `<dir>/stderr.log`.
fn serve_with_fd(dir: &TempDir, kind: &str, passed: &Path, pid: &str) -> Reaped {
    Reaped(
        Command::new("python3")
            .arg(pass_fd_script())
            .args([kind, &passed.display().to_string(), pid, "--", BIN, "serve", "--listen"])
            .arg(dir.path("bridge.sock"))
            .env("NOTIFY_SOCKET", dir.path("notify.sock"))
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path("stderr.log")).unwrap())
            .spawn()
            .expect("python3 (as for tests/support/activate.py)"),
    )
}

#[tokio::test]
async fn a_passed_socket_is_ignored_unless_listen_pid_is_ours_and_listen_path_is_bound() {
    for pid in ["absent", "other"] {
        let dir = TempDir::new("hard-pid");
        let notify = tokio::net::UnixDatagram::bind(dir.path("notify.sock")).unwrap();
        let passed = dir.path("passed.sock");
        let mut bridge = serve_with_fd(&dir, "listening", &passed, pid);
        let ready = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
        let logs = || std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
        assert!(ready.last().is_some_and(|m| m.starts_with("READY=1")), "LISTEN_PID {pid}: {ready:?}\n{}", logs());
        let socket = dir.path("bridge.sock");
        let answer =
            version(&socket).await.unwrap_or_else(|e| panic!("LISTEN_PID {pid}: listen.path: {e}\n{}", logs()));
        assert_eq!(answer.runtime_name, "cri-bridge-memory");
        let ready = ready.last().unwrap();
        assert!(ready.contains(&socket.display().to_string()), "the status names listen.path: {ready}");
        let line = log_line(&dir.path("stderr.log"), &["LISTEN_FDS", "LISTEN_PID"]).await;
        assert!(line.is_some(), "LISTEN_PID {pid}: the log says why the passed socket is not served:\n{}", logs());
        assert!(Command::new("kill").arg("-TERM").arg(bridge.id().to_string()).status().unwrap().success());
        let status = wait_timeout(&mut bridge, Duration::from_secs(5)).await;
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
    }
}

#[tokio::test]
async fn a_passed_fd_that_is_not_a_listening_unix_stream_socket_stops_the_start_naming_listen_fds() {
    for kind in ["connected", "file", "tcp", "datagram"] {
        let dir = TempDir::new("hard-fd");
        let notify = tokio::net::UnixDatagram::bind(dir.path("notify.sock")).unwrap();
        let passed = dir.path("passed");
        std::fs::write(&passed, "not a socket\n").unwrap();
        let mut bridge = serve_with_fd(&dir, kind, &passed, "own");
        let status = wait_timeout(&mut bridge, Duration::from_secs(10)).await;
        let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
        let mut heard = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = notify.try_recv(&mut buf) {
            heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        assert!(status.is_some_and(|s| !s.success()), "{kind}: must refuse to start: {status:?}; {heard:?}\n{logs}");
        assert!(logs.contains("LISTEN_FDS"), "{kind}: the error names LISTEN_FDS:\n{logs}");
        assert!(heard.iter().all(|m| !m.contains("READY=1")), "{kind}: no READY=1: {heard:?}");
        assert!(!dir.path("bridge.sock").exists(), "{kind}: nothing else is served either");
    }
}

/// Characters that must never reach a terminal raw from a caller's name.
fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[tokio::test]
async fn a_caller_named_with_control_characters_shows_escaped_on_one_line() {
    let dir = TempDir::new("hard-callers");
    let socket = dir.path("bridge.sock");
    let log = dir.path("stderr.log");
    let mut bridge = Reaped(
        Command::new(BIN)
            .args(["serve", "--listen"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_listener(&mut bridge, &socket).await;
    // A name that, printed raw, returns to the line's start, erases it, reverses what follows,
    // and shows `kubelet`.
    let name = "evil\r\x1b[2K\u{202e}kubelet";
    let escaped = "evil\\r\\x1b[2K\\u{202e}kubelet";
    let copy = dir.0.join(name);
    std::fs::copy(BIN, &copy).unwrap();
    let run = |mut command: Command| async move {
        tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
    };
    // A copy of cri-bridge under another name is a caller like any other.
    let mut probe = Command::new(&copy);
    probe.arg("probe").arg(&socket);
    let output = run(probe).await;
    assert!(output.status.success(), "{output:?}");

    let mut table = Command::new(BIN);
    table.arg("callers").arg(&socket);
    let output = run(table).await;
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(!text.chars().any(is_unsafe), "a raw control character in the table:\n{text:?}");
    let line = text.lines().find(|l| l.contains("kubelet")).unwrap_or_else(|| panic!("{text:?}"));
    assert!(line.starts_with(escaped), "{line:?}");

    let mut json = Command::new(BIN);
    json.args(["callers", "--json"]).arg(&socket);
    let output = run(json).await;
    let report: Vec<cri_bridge::callers::CallerReport> = serde_json::from_slice(&output.stdout).unwrap();
    let row = report.iter().find(|r| r.client.contains("kubelet")).unwrap_or_else(|| panic!("{report:#?}"));
    assert_eq!(row.client, escaped);
    assert!(row.exe.ends_with(&format!("/{escaped}")) && !row.exe.chars().any(is_unsafe), "{row:?}");

    let logged = log_line(&log, &["first call of a caller", &format!("client={escaped} ")]).await;
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logged.is_some(), "the log names the caller as the table does:\n{logs}");
    assert!(!logs.chars().any(is_unsafe), "a raw control character in the log:\n{logs:?}");
}
