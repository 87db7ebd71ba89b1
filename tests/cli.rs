//! The `cri-bridge` binary: check-config, probe, and the README quick start (serve, call, SIGTERM).

mod common;

use common::process::{notifications_until, wait_for_listener, wait_timeout, Reaped};
use common::{Runtime, TempDir};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.yaml")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs the binary to completion off the async runtime (which serves the in-memory runtime).
async fn run_bin(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || Command::new(BIN).args(&args).output().expect("run cri-bridge")).await.unwrap()
}

#[test]
fn check_config_accepts_the_example() {
    let output = Command::new(BIN).arg("check-config").arg(example()).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).trim_end().ends_with("ok"), "{output:?}");
    assert!(stdout(&output).contains("config.example.yaml"), "{output:?}");
}

#[test]
fn check_config_refuses_a_bad_file_naming_the_key() {
    let dir = TempDir::new("cli-check");
    let file = dir.path("bad.yaml");
    std::fs::write(&file, "listen:\n  mode: \"rw-rw----\"\n").unwrap();
    let output = Command::new(BIN).arg("check-config").arg(&file).output().unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr(&output).contains("listen.mode"), "{output:?}");
    assert!(!stdout(&output).contains("ok"), "{output:?}");

    std::fs::write(&file, "backend:\n  endpoint: memory\n  versoin: v1\n").unwrap();
    let output = Command::new(BIN).arg("check-config").arg(&file).output().unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr(&output).contains("versoin"), "{output:?}");

    let output = Command::new(BIN).arg("check-config").arg(dir.path("missing.yaml")).output().unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr(&output).contains("missing.yaml"), "{output:?}");
}

/// The probe report line for `version`: `served` or `not served`.
fn served_line(report: &str, version: CriVersion) -> String {
    report
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["CRI", version.as_str()]))
        .unwrap_or_else(|| panic!("no line for CRI {version} in:\n{report}"))
        .split_whitespace()
        .skip(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The probe report line for the kubelets `kubelets` (`1.26 and newer`), after the name.
fn kubelet_line<'a>(report: &'a str, kubelets: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("kubelet ")?.strip_prefix(kubelets))
        .unwrap_or_else(|| panic!("no line for kubelet {kubelets} in:\n{report}"))
        .trim()
}

#[tokio::test]
async fn probe_reports_versions_and_kubelets() {
    let dir = TempDir::new("cli-probe");
    let socket = dir.path("runtime.sock");
    let runtime = Runtime::start(&socket, &[CriVersion::V1alpha2]).await;

    let output = run_bin(vec!["probe".into(), socket.display().to_string()]).await;
    assert!(output.status.success(), "{output:?}");
    let report = stdout(&output);
    assert!(report.contains(cri_bridge::memory::RUNTIME_NAME), "{report}");
    assert!(report.contains(&format!("unix://{}", socket.display())), "{report}");
    assert_eq!(served_line(&report, CriVersion::V1alpha2), "served", "{report}");
    assert_eq!(served_line(&report, CriVersion::V1), "not served", "{report}");
    assert_eq!(served_line(&report, CriVersion::V1alpha1), "not served", "{report}");

    let newest = kubelet_line(&report, "1.26 and newer");
    assert!(newest.starts_with("through cri-bridge"), "{report}");
    let old = kubelet_line(&report, "1.10 to 1.22");
    assert!(old.starts_with("directly"), "{report}");
    assert!(old.contains("v1alpha2"), "{report}");
    // 1.23–1.25 speak v1alpha2 too; 1.9 only v1alpha1.
    assert!(kubelet_line(&report, "1.23 to 1.25").starts_with("directly"), "{report}");
    assert!(kubelet_line(&report, "1.9 and older").starts_with("through cri-bridge"), "{report}");
    // No RuntimeConfig without v1; its Status info names the driver, so cri-bridge answers it and
    // a kubelet 1.38 (which requires it) can start through cri-bridge.
    assert!(report.contains("RuntimeConfig: not served (no CRI v1)"), "{report}");
    assert!(report.contains("cri-bridge in front answers it: cgroup driver systemd (from the runtime's Status info"));
    assert!(
        kubelet_line(&report, "requiring RuntimeConfig (after 1.38.0-beta.0)").starts_with("through cri-bridge"),
        "{report}"
    );

    runtime.stop().await;
}

#[tokio::test]
async fn a_probe_whose_reader_goes_away_ends_quietly() {
    let dir = TempDir::new("cli-probe-pipe");
    let socket = dir.path("runtime.sock");
    let runtime = Runtime::start(&socket, &[CriVersion::V1]).await;
    // `probe … | head -1`: the reader is gone before the report is written.
    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(BIN)
            .arg("probe")
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run cri-bridge probe");
        drop(child.stdout.take());
        child.wait_with_output().expect("probe exits")
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    runtime.stop().await;
}

#[tokio::test]
async fn probe_of_a_dead_socket_fails_unreachable() {
    let dir = TempDir::new("cli-dead");
    // A stale socket file: nobody listens.
    let stale = dir.path("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    // And no file at all.
    let missing = dir.path("missing.sock");
    for socket in [stale, missing] {
        let output = run_bin(vec!["probe".into(), socket.display().to_string()]).await;
        assert!(!output.status.success(), "{output:?}");
        assert!(stderr(&output).contains("unreachable"), "{output:?}");
        assert!(stderr(&output).contains(&socket.display().to_string()), "{output:?}");
        assert!(stdout(&output).is_empty(), "{output:?}");
    }
}

#[tokio::test]
async fn quick_start_serves_and_stops_on_sigterm() {
    let dir = TempDir::new("cli-serve");
    let socket = dir.path("bridge.sock");
    let log = std::fs::File::create(dir.path("stderr.log")).unwrap();
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--listen")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn cri-bridge serve");
    wait_for_listener(&mut child, &socket).await;

    let channel = common::channel(&socket);
    let answer = v1::runtime_service_client::RuntimeServiceClient::new(channel.clone())
        .version(v1::VersionRequest { version: "0.1.0".into() })
        .await
        .expect("v1 Version")
        .into_inner();
    assert_eq!(answer.runtime_name, "cri-bridge-memory");
    assert_eq!(answer.runtime_api_version, "v1");
    let answer = v1alpha2::runtime_service_client::RuntimeServiceClient::new(channel.clone())
        .version(v1alpha2::VersionRequest { version: "0.1.0".into() })
        .await
        .expect("v1alpha2 Version")
        .into_inner();
    assert_eq!(answer.runtime_name, "cri-bridge-memory");
    assert_eq!(answer.runtime_api_version, "v1alpha2");
    drop(channel);

    let killed = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(killed.success());
    // Wait asynchronously: the client connection's task must keep running to see the GOAWAY.
    let status = wait_timeout(&mut child, Duration::from_secs(5)).await;
    let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("cri-bridge did not exit within 5 s of SIGTERM; stderr:\n{logs}");
    };
    assert!(status.success(), "exit status {status}; stderr:\n{logs}");
    assert!(std::fs::symlink_metadata(&socket).is_err(), "{} must be removed on exit", socket.display());
    // What an operator reads: the runtime named once when found, and nothing to warn about.
    let named: Vec<&str> = logs.lines().filter(|l| l.contains("container runtime speaks")).collect();
    assert_eq!(named.len(), 1, "stderr:\n{logs}");
    assert!(named[0].contains("cri-bridge-memory") && named[0].contains("INFO"), "{}", named[0]);
    assert!(!logs.contains("WARN"), "a healthy quick start warns of nothing; stderr:\n{logs}");
}

#[tokio::test]
async fn the_start_line_names_every_backend_and_the_default() {
    let dir = TempDir::new("cli-backends");
    let docker = Runtime::start(&dir.path("docker.sock"), &[CriVersion::V1alpha2]).await;
    let containerd = Runtime::start(&dir.path("containerd.sock"), &[CriVersion::V1]).await;
    let config = dir.path("config.yaml");
    std::fs::write(
        &config,
        format!(
            "listen:\n  path: {}\nbackends:\n  - name: docker\n    endpoint: unix://{}\n  - name: containerd\n    \
             endpoint: unix://{}\nroutes:\n  default: containerd\n",
            dir.path("bridge.sock").display(),
            dir.path("docker.sock").display(),
            dir.path("containerd.sock").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path("stderr.log")).unwrap();
    let child =
        Command::new(BIN).arg("serve").arg("--config").arg(&config).stdout(Stdio::null()).stderr(log).spawn().unwrap();
    let mut child = Reaped(child);
    wait_for_listener(&mut child.0, &dir.path("bridge.sock")).await;
    let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap();
    let line = logs.lines().find(|l| l.contains("serving CRI")).unwrap_or_else(|| panic!("{logs}"));
    let docker_named = format!("docker=unix://{}", dir.path("docker.sock").display());
    let containerd_named = format!("containerd=unix://{} (default)", dir.path("containerd.sock").display());
    assert!(line.contains(&docker_named) && line.contains(&containerd_named), "{line}");
    drop((docker, containerd));
}

#[test]
fn move_refuses_a_backend_it_cannot_empty_naming_it() {
    let dir = TempDir::new("cli-move");
    let write = |name: &str, text: &str| {
        let path = dir.path(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let one = write("one.yaml", "backend:\n  endpoint: unix:///run/d.sock\n");
    let two = write(
        "two.yaml",
        "backends:\n  - name: docker\n    endpoint: unix:///run/d.sock\n  - name: containerd\n    endpoint: \
         unix:///run/c.sock\nroutes:\n  default: containerd\n",
    );
    let run = |config: &Path, from: &str| {
        Command::new(BIN).args(["move", "--from", from, "--node", "n", "--config"]).arg(config).output().unwrap()
    };
    // One backend: nothing to move to. The default: new sandboxes would go back to it. A name
    // that is no backend. Each refused before any API server is asked, naming --from.
    for (config, from, says) in [
        (&one, "docker", "has one backend"),
        (&two, "containerd", "is routes.default"),
        (&two, "crio", "no such backend (backends: docker, containerd)"),
    ] {
        let output = run(config, from);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(stderr(&output).contains(&format!("--from {from}")) && stderr(&output).contains(says), "{output:?}");
    }
}

#[tokio::test]
async fn systemd_hears_ready_then_watchdog_pings_then_stopping() {
    let dir = TempDir::new("cli-notify");
    let socket = dir.path("bridge.sock");
    let notify = tokio::net::UnixDatagram::bind(dir.path("notify.sock")).unwrap();
    let mut child = Reaped(
        Command::new(BIN)
            .arg("serve")
            .arg("--listen")
            .arg(&socket)
            .env("NOTIFY_SOCKET", dir.path("notify.sock"))
            .env("WATCHDOG_USEC", "200000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cri-bridge serve"),
    );
    let ready = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
    let last = ready.last().cloned().unwrap_or_default();
    assert!(last.starts_with("READY=1\nSTATUS=serving CRI"), "{ready:?}");
    assert!(last.contains(&socket.display().to_string()), "the status names the socket: {last}");
    // Served by the time systemd hears READY: the kubelet ordered after it can connect at once.
    tokio::net::UnixStream::connect(&socket).await.expect("listening once READY=1 is sent");
    // WatchdogSec=0.2s: a ping every 0.1 s.
    let started = tokio::time::Instant::now();
    let mut pings = 0;
    while pings < 3 {
        let seen = notifications_until(&notify, |m| m == "WATCHDOG=1").await;
        assert_eq!(seen.last().map(String::as_str), Some("WATCHDOG=1"), "{seen:?}");
        pings += 1;
    }
    // A ping every 0.1 s: three come well within seconds; the bound only catches pings that stop
    // (load on the machine cannot make them take this long).
    assert!(started.elapsed() < Duration::from_secs(20), "3 pings took {:?}", started.elapsed());
    assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
    let stopping = notifications_until(&notify, |m| m.starts_with("STOPPING=1")).await;
    assert!(stopping.last().is_some_and(|m| m.starts_with("STOPPING=1")), "{stopping:?}");
    let status = wait_timeout(&mut child, Duration::from_secs(5)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

#[tokio::test]
async fn systemd_in_the_abstract_namespace_hears_ready_and_a_watchdog_for_another_pid_is_left_alone() {
    let dir = TempDir::new("cli-notify-abstract");
    let socket = dir.path("bridge.sock");
    let name = format!("cri-bridge-test-{}", std::process::id());
    let address = {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
    };
    let notify = std::os::unix::net::UnixDatagram::bind_addr(&address).unwrap();
    notify.set_nonblocking(true).unwrap();
    let notify = tokio::net::UnixDatagram::from_std(notify).unwrap();
    let _child = Reaped(
        Command::new(BIN)
            .arg("serve")
            .arg("--listen")
            .arg(&socket)
            .env("NOTIFY_SOCKET", format!("@{name}"))
            // A watchdog meant for another process (systemd sets WATCHDOG_PID to the main pid).
            .env("WATCHDOG_USEC", "100000")
            .env("WATCHDOG_PID", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cri-bridge serve"),
    );
    let seen = notifications_until(&notify, |m| m.starts_with("READY=1")).await;
    assert!(seen.last().is_some_and(|m| m.starts_with("READY=1")), "{seen:?}");
    // Half a second: five pings' worth at WatchdogSec=0.1s. Status updates may come; no ping.
    let mut heard = Vec::new();
    let mut buf = [0u8; 4096];
    let until = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Ok(n)) = tokio::time::timeout_at(until, notify.recv(&mut buf)).await {
        heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(heard.iter().all(|m| m.starts_with("STATUS=")), "no WATCHDOG=1 for a watchdog of another pid: {heard:?}");
}

#[tokio::test]
async fn a_socket_systemd_passes_is_served_instead_of_binding_and_is_left_to_systemd() {
    let dir = TempDir::new("cli-activate");
    let activated = dir.path("activated.sock");
    let unused = dir.path("unused.sock");
    // systemd-socket-activate (Debian's systemd) binds the socket and passes it as LISTEN_FDS=1.
    let mut child = Reaped(
        Command::new("systemd-socket-activate")
            .arg("-l")
            .arg(&activated)
            .arg(BIN)
            .args(["serve", "--listen"])
            .arg(&unused)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("systemd-socket-activate (the Debian systemd package; .ci/run installs it)"),
    );
    wait_for_listener(&mut child, &activated).await;
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&activated));
    let answer = client.version(v1::VersionRequest::default()).await.expect("v1 Version").into_inner();
    assert_eq!(answer.runtime_name, "cri-bridge-memory");
    assert!(std::fs::symlink_metadata(&unused).is_err(), "listen.path is not bound when a socket is passed");
    drop(client);
    assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
    let status = wait_timeout(&mut child, Duration::from_secs(5)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(std::fs::symlink_metadata(&activated).is_ok(), "the passed socket's file is systemd's to remove");
}

#[test]
fn a_worker_threads_value_that_is_not_a_number_stops_serve_naming_it() {
    let dir = TempDir::new("cli-threads");
    let output = Command::new(BIN)
        .args(["serve", "--listen"])
        .arg(dir.path("bridge.sock"))
        .env("CRI_BRIDGE_WORKER_THREADS", "lots")
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr(&output).contains("CRI_BRIDGE_WORKER_THREADS") && stderr(&output).contains("lots"), "{output:?}");
    assert!(!dir.path("bridge.sock").exists());
}

#[tokio::test]
async fn serve_on_worker_threads_answers_as_on_one_thread() {
    let dir = TempDir::new("cli-workers");
    let socket = dir.path("bridge.sock");
    let mut child = Reaped(
        Command::new(BIN)
            .arg("serve")
            .arg("--listen")
            .arg(&socket)
            .env("CRI_BRIDGE_WORKER_THREADS", "2")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cri-bridge serve"),
    );
    wait_for_listener(&mut child, &socket).await;
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&socket));
    let answer = client.version(v1::VersionRequest::default()).await.expect("v1 Version").into_inner();
    assert_eq!(answer.runtime_name, "cri-bridge-memory");
}

#[test]
fn serve_with_a_bad_backend_names_the_flag() {
    let dir = TempDir::new("cli-badflag");
    let output = Command::new(BIN)
        .args(["serve", "--backend", "tcp://x", "--listen"])
        .arg(dir.path("bridge.sock"))
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr(&output).contains("--backend"), "{output:?}");
    assert!(stderr(&output).contains("tcp://x"), "{output:?}");
    assert!(!dir.path("bridge.sock").exists());
}

/// With the runtime away, the daemon serves anyway, says so once (a warning naming the
/// endpoint), and keeps retrying quietly: no warning per retry.
#[tokio::test]
async fn an_absent_runtime_is_warned_about_once() {
    let dir = TempDir::new("cli-away");
    let socket = dir.path("bridge.sock");
    let away = dir.path("away.sock");
    let log = std::fs::File::create(dir.path("stderr.log")).unwrap();
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--listen")
        .arg(&socket)
        .arg("--backend")
        .arg(format!("unix://{}", away.display()))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn cri-bridge serve");
    wait_for_listener(&mut child, &socket).await;
    let status = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&socket))
        .version(v1::VersionRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    // Backoff 100, 200, 400, 800 ms: at least four retries in 1.6 s.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
    let exited = wait_timeout(&mut child, Duration::from_secs(5)).await;
    let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
    assert!(exited.is_some_and(|s| s.success()), "stderr:\n{logs}");
    let warned: Vec<&str> = logs.lines().filter(|l| l.contains("container runtime not ready")).collect();
    assert_eq!(warned.len(), 1, "stderr:\n{logs}");
    assert!(warned[0].contains("WARN") && warned[0].contains(&away.display().to_string()), "{}", warned[0]);
}

/// The runtime is named when it is first found and when it changes, not at every rediscovery:
/// a runtime restarted as the same build is found again silently.
#[tokio::test]
async fn a_runtime_found_again_unchanged_is_not_announced_again() {
    let dir = TempDir::new("cli-again");
    let socket = dir.path("bridge.sock");
    let runtime_socket = dir.path("runtime.sock");
    let runtime = Runtime::start(&runtime_socket, &[CriVersion::V1]).await;
    let log = std::fs::File::create(dir.path("stderr.log")).unwrap();
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--listen")
        .arg(&socket)
        .arg("--backend")
        .arg(format!("unix://{}", runtime_socket.display()))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn cri-bridge serve");
    wait_for_listener(&mut child, &socket).await;
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&socket));
    client.version(v1::VersionRequest::default()).await.expect("first call");
    let named = |logs: &str| logs.lines().filter(|l| l.contains("container runtime speaks")).count();
    let before = std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
    assert_eq!(named(&before), 1, "named once found, before any restart; stderr:\n{before}");
    runtime.stop().await;
    let runtime = Runtime::start(&runtime_socket, &[CriVersion::V1]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.version(v1::VersionRequest::default()).await.is_err() {
        assert!(Instant::now() < deadline, "the restarted runtime was not found again in 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(runtime.memory.calls_of("Version") >= 2, "found again: probed, then called");
    assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
    let exited = wait_timeout(&mut child, Duration::from_secs(5)).await;
    let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
    assert!(exited.is_some_and(|s| s.success()), "stderr:\n{logs}");
    assert_eq!(named(&logs), 1, "not again after the restart; stderr:\n{logs}");
    runtime.stop().await;
}

#[tokio::test]
async fn an_open_file_limit_too_low_for_limits_connections_is_raised_or_named() {
    let dir = TempDir::new("cli-nofile");
    let socket = dir.path("bridge.sock");
    let log = std::fs::File::create(dir.path("stderr.log")).unwrap();
    // Soft and hard 512: nothing to raise to, and 1,024 connections need 2 descriptors each.
    let script = format!("ulimit -n 512 && exec {BIN} serve --listen {}", socket.display());
    let mut child = Command::new("sh").arg("-c").arg(script).stdout(Stdio::null()).stderr(log).spawn().unwrap();
    wait_for_listener(&mut child, &socket).await;
    let _ = child.kill();
    let _ = child.wait();
    let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
    let warning = logs.lines().find(|l| l.contains("open-file limit")).unwrap_or_else(|| panic!("{logs}"));
    assert!(warning.contains("(512)") && warning.contains("limits.connections (1024)"), "{warning}");
}

/// A field the runtime's version has but its revision does not act on, with `loss_policy: warn`,
/// reaches the runtime (the bytes pass as they came): the warning says it was passed and may not
/// be honoured, not that it was dropped (issue 40: CRI-O enforced such a field while the log
/// said "dropped"). Here the in-memory runtime is held to the 1.30 revision by
/// `backend.revision`, and a v1 caller sets `supplemental_groups_policy` (1.31).
#[tokio::test]
async fn a_warned_field_the_runtime_receives_is_logged_as_passed() {
    let dir = TempDir::new("cli-warn");
    let socket = dir.path("bridge.sock");
    let config = dir.path("config.yaml");
    std::fs::write(
        &config,
        format!(
            "listen:\n  path: {}\nbackend:\n  endpoint: memory\n  revision: \"1.30\"\nloss_policy:\n  \
             LinuxContainerSecurityContext.supplemental_groups_policy: warn\n",
            socket.display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path("stderr.log")).unwrap();
    let mut child = Reaped(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn cri-bridge serve"),
    );
    wait_for_listener(&mut child, &socket).await;
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&socket));
    let config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata { name: "p".into(), uid: "u".into(), namespace: "n".into(), attempt: 0 }),
        ..Default::default()
    };
    let pod = client
        .run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let strict = v1::SupplementalGroupsPolicy::Strict as i32;
    let created = client
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: pod,
            config: Some(v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata { name: "c".into(), attempt: 0 }),
                image: Some(v1::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
                linux: Some(v1::LinuxContainerConfig {
                    security_context: Some(v1::LinuxContainerSecurityContext {
                        supplemental_groups_policy: strict,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: Some(config),
        })
        .await;
    assert!(created.is_ok(), "warned, not refused: {created:?}");
    let logs = std::fs::read_to_string(dir.path("stderr.log")).unwrap();
    let warned: Vec<&str> = logs.lines().filter(|l| l.contains("supplemental_groups_policy")).collect();
    assert_eq!(warned.len(), 1, "{logs}");
    assert!(warned[0].contains("WARN") && warned[0].contains("passed a field the runtime does not act on"), "{logs}");
    assert!(!warned[0].contains("dropped"), "{logs}");
}

/// `probe` and `serve` judge a runtime in one place (issue 42): the in-memory runtime posing as
/// cri-dockerd (it answers `docker` and the Docker Engine's version, which the revision table
/// cannot place) is placed by the RPCs its service has, `RuntimeConfig` among them, at the 1.30
/// revision by both; and as it answers `RuntimeConfig` itself, neither says a kubelet needing
/// it will not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_and_serve_judge_cri_dockerd_alike() {
    let dir = TempDir::new("cli-probe-docker");
    let socket = dir.path("runtime.sock");
    let runtime = Runtime::start(&socket, &[CriVersion::V1]).await;
    runtime.memory.set_identity("docker", "28.1.1");
    let output = run_bin(vec!["probe".into(), socket.display().to_string()]).await;
    assert!(output.status.success(), "{output:?}");
    let report = stdout(&output);
    assert!(report.contains("Kubernetes 1.30 revision"), "probe places it by its RPCs: {report}");
    assert!(!report.contains("assumed"), "{report}");

    let listen = dir.path("bridge.sock");
    let config = dir.path("config.yaml");
    let yaml = format!("listen:\n  path: {}\nbackend:\n  endpoint: unix://{}\n", listen.display(), socket.display());
    std::fs::write(&config, yaml).unwrap();
    let log = dir.path("serve.log");
    let mut serve = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    common::wait_for_socket(&listen).await;
    // The first call discovers the runtime, which the log then describes.
    let mut client = v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&listen));
    client.version(v1::VersionRequest::default()).await.unwrap();
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&log).unwrap();
        if text.contains("container runtime speaks") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(text.contains("Kubernetes 1.30 revision"), "serve places it alike: {text}");
    assert!(!text.contains("will not start"), "cri-dockerd answers RuntimeConfig itself: {text}");
    runtime.stop().await;
}
