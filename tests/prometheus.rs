//! The fleet view, end to end: the real Prometheus (Debian's `prometheus`) scrapes a running
//! cri-bridge with `contrib/prometheus/cri-bridge.rules.yml` loaded: the process's start time,
//! the build's version and the configured limits arrive as they are; the refusal alert fires on
//! one refused call, and not before it; the restart alert fires when cri-bridge starts anew
//! without answering a call, naming the version.

mod common;

use common::TempDir;
use cri_bridge::api::{v1, v1alpha2};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tonic::Code;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/prometheus/cri-bridge.rules.yml");
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/grafana/cri-bridge.json");
const ALERT: &str = "CriBridgeCallsRefused";
const RESTARTED: &str = "CriBridgeRestarted";
/// `limits.buffer_mib` and `limits.connections` in the config, not the defaults (256, 1024).
const BUFFER_MIB: u64 = 96;
const CONNECTIONS: u64 = 512;

/// A free loopback port: bound and let go (a race with another process is possible, not likely).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A plain HTTP/1.0 GET to 127.0.0.1: the status code and the body.
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// `text` percent-encoded for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Now, in seconds since the Unix epoch.
fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// cri-bridge as its own process: the in-memory runtime speaking only v1alpha1 behind it, its
/// metrics on a loopback port, and limits other than the defaults.
struct BridgeProcess {
    socket: PathBuf,
    metrics_port: u16,
    log: PathBuf,
    child: tokio::process::Child,
    /// When it was started, and when it was found listening (seconds since the Unix epoch).
    spawned: f64,
    listening: f64,
}

impl BridgeProcess {
    async fn start(dir: &TempDir) -> BridgeProcess {
        BridgeProcess::start_on(dir, free_port(), "bridge.log").await
    }

    /// Stops it and starts it anew, on the same sockets, logging to `log`.
    async fn restart(self, dir: &TempDir, log: &str) -> BridgeProcess {
        let port = self.metrics_port;
        self.stop().await;
        BridgeProcess::start_on(dir, port, log).await
    }

    async fn start_on(dir: &TempDir, metrics_port: u16, log: &str) -> BridgeProcess {
        let socket = dir.path("bridge.sock");
        let config = dir.path("bridge.yaml");
        let yaml = format!(
            "listen:\n  path: {}\nbackend:\n  endpoint: memory\n  version: v1alpha1\nmetrics:\n  listen: 127.0.0.1:{metrics_port}\n\
             limits:\n  buffer_mib: {BUFFER_MIB}\n  connections: {CONNECTIONS}\n",
            socket.display()
        );
        std::fs::write(&config, yaml).unwrap();
        let log = dir.path(log);
        let spawned = unix_now();
        let out = std::fs::File::create(&log).unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("start cri-bridge");
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::UnixStream::connect(&socket).await.is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("cri-bridge exited with {status}: {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            assert!(Instant::now() < deadline, "cri-bridge does not listen after 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        BridgeProcess { socket, metrics_port, log, child, spawned, listening: unix_now() }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }

    fn v1(&self) -> v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel> {
        v1::runtime_service_client::RuntimeServiceClient::new(common::channel(&self.socket))
    }
}

/// Prometheus scraping cri-bridge every second and evaluating the rules every second.
struct Prometheus {
    port: u16,
    log: PathBuf,
    child: tokio::process::Child,
}

impl Prometheus {
    async fn start(dir: &TempDir, target: u16) -> Prometheus {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: install Debian's `prometheus` package (`bash .ci/run` installs it)"
        );
        let port = free_port();
        let config = dir.path("prometheus.yml");
        let yaml = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {RULES}\n\
             scrape_configs:\n  - job_name: cri-bridge\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
        );
        std::fs::write(&config, yaml).unwrap();
        let log = dir.path("prometheus.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = tokio::process::Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("start prometheus");
        let mut prometheus = Prometheus { port, log, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(get(port, "/-/ready"), Ok((200, _))) {
            if let Some(status) = prometheus.child.try_wait().unwrap() {
                panic!("prometheus exited with {status}:\n{}", prometheus.log());
            }
            assert!(Instant::now() < deadline, "prometheus is not ready after 30 s:\n{}", prometheus.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `data` of an API answer.
    fn api(&self, path: &str) -> Value {
        let (status, body) = get(self.port, path).unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log()));
        let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"));
        assert!(status == 200 && answer["status"] == "success", "GET {path}: {status} {body}");
        answer["data"].clone()
    }

    /// The series an instant query answers.
    fn query(&self, expr: &str) -> Vec<Value> {
        self.api(&format!("/api/v1/query?query={}", encode(expr)))["result"].as_array().cloned().unwrap_or_default()
    }

    /// The alerts named `name`, pending or firing now.
    fn alerts(&self, name: &str) -> Vec<Value> {
        let all = self.api("/api/v1/alerts")["alerts"].as_array().cloned().unwrap_or_default();
        all.into_iter().filter(|alert| alert["labels"]["alertname"] == name).collect()
    }

    /// Polls until `done` holds, for `bound` at most.
    async fn wait(&self, what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + bound;
        while !done() {
            assert!(Instant::now() < deadline, "prometheus: not {what} after {bound:?}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The value of one series of a query's answer.
fn number(series: &Value) -> f64 {
    let value = series["value"][1].as_str().unwrap_or_else(|| panic!("a value in {series}"));
    value.parse().unwrap_or_else(|_| panic!("a number in {series}"))
}

fn pod(name: &str, protocol: v1::Protocol) -> v1::RunPodSandboxRequest {
    let port =
        v1::PortMapping { protocol: protocol as i32, container_port: 80, host_port: 8080, host_ip: String::new() };
    v1::RunPodSandboxRequest {
        config: Some(v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            port_mappings: vec![port],
            ..Default::default()
        }),
        runtime_handler: String::new(),
    }
}

#[tokio::test]
async fn the_series_arrive_and_a_refused_call_and_a_restart_fire_their_alerts() {
    let dir = TempDir::new("prom");
    let bridge = BridgeProcess::start(&dir).await;
    let prometheus = Prometheus::start(&dir, bridge.metrics_port).await;
    let instance = format!("127.0.0.1:{}", bridge.metrics_port);
    let is_one = |series: &[Value]| series.len() == 1 && series[0]["value"][1] == "1";
    prometheus
        .wait("scraping cri-bridge", Duration::from_secs(30), || is_one(&prometheus.query("up{job=\"cri-bridge\"}")))
        .await;

    // Beside the counts, as the process wrote them: when it started (taken at its start, before
    // it listened), its version, and its limits in the unit of what each bounds.
    let started = prometheus.query("process_start_time_seconds{job=\"cri-bridge\"}");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["metric"]["instance"], instance.as_str(), "{started:?}");
    let started_at = number(&started[0]);
    assert!(
        bridge.spawned <= started_at && started_at <= bridge.listening,
        "started at {started_at}: not between its spawning ({}) and its listening ({})",
        bridge.spawned,
        bridge.listening
    );
    let build = prometheus.query("cri_bridge_build_info");
    assert!(is_one(&build), "{build:?}");
    assert_eq!(build[0]["metric"]["version"], env!("CARGO_PKG_VERSION"), "{build:?}");
    assert_eq!(build[0]["metric"]["instance"], instance.as_str(), "{build:?}");
    let mut limits: Vec<(String, f64)> = prometheus
        .query("cri_bridge_limit")
        .iter()
        .map(|s| (s["metric"]["limit"].as_str().unwrap_or_default().to_string(), number(s)))
        .collect();
    limits.sort_by(|a, b| a.0.cmp(&b.0));
    let configured = [
        ("limits.buffer_mib", (BUFFER_MIB << 20) as f64),
        ("limits.connections", CONNECTIONS as f64),
        ("limits.connections_per_uid", 256.0),
        // A quarter of limits.connections, by default.
        ("limits.scoped_connections", (CONNECTIONS / 4).max(1) as f64),
    ];
    assert_eq!(limits, configured.map(|(k, v)| (k.to_string(), v)), "in bytes for the buffer, else a count");

    // Served calls: a v1 pod the v1alpha1 runtime can run, and a v1alpha2 caller.
    let mut client = bridge.v1();
    client.version(v1::VersionRequest::default()).await.unwrap();
    client.run_pod_sandbox(pod("tcp", v1::Protocol::Tcp)).await.unwrap();
    v1alpha2::runtime_service_client::RuntimeServiceClient::new(common::channel(&bridge.socket))
        .version(v1alpha2::VersionRequest::default())
        .await
        .unwrap();
    // Once the rules have counted all three, two more evaluations: no refusal alert, not even
    // pending.
    prometheus
        .wait("counting the served calls", Duration::from_secs(30), || {
            let sum = prometheus.query("sum(cri_bridge_operations_total)");
            sum.len() == 1 && sum[0]["value"][1] == "3"
        })
        .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(prometheus.alerts(ALERT), Vec::<Value>::new(), "no call was refused");
    // The v1alpha2 caller is named, on its node.
    let me = std::env::current_exe().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    let old = prometheus.query("instance_client_version:cri_bridge_callers_old_cri:sum");
    assert_eq!(old.len(), 1, "{old:?}");
    let labels = &old[0]["metric"];
    assert_eq!(labels["instance"], instance.as_str(), "{old:?}");
    assert_eq!(labels["client"], me.as_str(), "{old:?}");
    assert_eq!(labels["version"], "v1alpha2", "{old:?}");
    // And when it last called in it: seconds ago, not since start.
    let age = prometheus.query("instance_client_version:cri_bridge_old_cri_last_call:age_seconds");
    assert_eq!(age.len(), 1, "{age:?}");
    assert_eq!(age[0]["metric"]["client"], me.as_str(), "{age:?}");
    let seconds: f64 = age[0]["value"][1].as_str().and_then(|v| v.parse().ok()).expect("a number");
    assert!((-5.0..120.0).contains(&seconds), "the last v1alpha2 call {seconds} s ago");

    // One refused call: v1alpha1 has no SCTP, and taking it as TCP is refused (behaviour).
    let refused = client.run_pod_sandbox(pod("sctp", v1::Protocol::Sctp)).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    let refused_at = Instant::now();
    let mut last = Vec::new();
    while !last.iter().any(|alert: &Value| alert["state"] == "firing") {
        if refused_at.elapsed() > Duration::from_secs(60) {
            panic!(
                "{ALERT} is not firing 60 s after the refusal; last answer: {last:?}\n--- prometheus log ---\n{}\n--- cri-bridge log ---\n{}",
                prometheus.log(),
                std::fs::read_to_string(&bridge.log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        last = prometheus.alerts(ALERT);
    }
    eprintln!("{ALERT} firing {:?} after the refusal", refused_at.elapsed());
    let labels = &last[0]["labels"];
    assert_eq!(labels["instance"], instance.as_str(), "{last:?}");
    assert_eq!(labels["job"], "cri-bridge", "{last:?}");
    assert_eq!(labels["field"], "PortMapping.protocol", "{last:?}");
    assert_eq!(labels["severity"], "warning", "{last:?}");
    assert!(last[0]["annotations"]["description"].as_str().unwrap().contains("PortMapping.protocol"), "{last:?}");

    // Every rule evaluates on the real series without an error.
    let groups = prometheus.api("/api/v1/rules")["groups"].as_array().cloned().unwrap_or_default();
    let rules: Vec<&Value> = groups.iter().flat_map(|g| g["rules"].as_array().into_iter().flatten()).collect();
    assert!(rules.len() > 20, "the rules file is loaded: {groups:?}");
    let failing: Vec<String> = rules
        .iter()
        .filter(|r| r["health"] != "ok")
        .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
        .collect();
    assert!(failing.is_empty(), "rules failing: {failing:#?}");
    // The buffer alert's two sides match on the real labels (were they not to, it would never
    // fire): with nothing held, its comparison turned round holds for this node.
    let buffer_alert = rules.iter().find(|r| r["name"] == "CriBridgeBufferNearLimit").expect("the buffer alert");
    let query = buffer_alert["query"].as_str().unwrap();
    assert!(query.starts_with("cri_bridge_buffered_bytes > "), "{query}");
    let under = prometheus.query(&query.replacen(" > ", " <= ", 1));
    assert_eq!(under.len(), 1, "{query}, turned round: {under:?}");
    assert_eq!(under[0]["metric"]["instance"], instance.as_str(), "{under:?}");

    // The dashboard's queries, every node selected, answer on the same Prometheus; its refusal
    // panel shows the field.
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let targets =
        dashboard["panels"].as_array().unwrap().iter().flat_map(|p| p["targets"].as_array().into_iter().flatten());
    let mut queried = 0;
    for target in targets {
        let expr = target["expr"].as_str().unwrap().replace("$instance", ".+");
        let series = prometheus.query(&expr);
        if expr.starts_with("instance_field:cri_bridge_losses_rejected:increase5m") {
            assert!(series.iter().any(|s| s["metric"]["field"] == "PortMapping.protocol"), "{expr}: {series:?}");
        }
        if expr.starts_with("version:cri_bridge_build_info:count") {
            assert!(
                is_one(&series) && series[0]["metric"]["version"] == env!("CARGO_PKG_VERSION"),
                "{expr}: {series:?}"
            );
        }
        queried += 1;
    }
    assert!(queried > 10, "{DASHBOARD} has its queries");

    // cri-bridge starts anew and answers no call: no counter tells it, its start time does.
    assert_eq!(prometheus.alerts(RESTARTED), Vec::<Value>::new(), "started once so far");
    let bridge = bridge.restart(&dir, "bridge-restarted.log").await;
    let restarted_at = Instant::now();
    let mut last = Vec::new();
    while !last.iter().any(|alert: &Value| alert["state"] == "firing") {
        if restarted_at.elapsed() > Duration::from_secs(60) {
            panic!(
                "{RESTARTED} is not firing 60 s after the restart; last answer: {last:?}\n--- prometheus log ---\n{}\n--- cri-bridge log ---\n{}",
                prometheus.log(),
                bridge.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        last = prometheus.alerts(RESTARTED);
    }
    eprintln!("{RESTARTED} firing {:?} after the restart", restarted_at.elapsed());
    let labels = &last[0]["labels"];
    assert_eq!(labels["instance"], instance.as_str(), "{last:?}");
    assert_eq!(labels["job"], "cri-bridge", "{last:?}");
    assert_eq!(labels["severity"], "warning", "{last:?}");
    let description = last[0]["annotations"]["description"].as_str().unwrap();
    let version = format!("(1 time(s)); it runs version {} now.", env!("CARGO_PKG_VERSION"));
    assert!(description.contains(&version), "{description:?} names the version running");
    let started = prometheus.query("process_start_time_seconds{job=\"cri-bridge\"}");
    assert_eq!(started.len(), 1, "{started:?}");
    let started_anew = number(&started[0]);
    assert!(bridge.spawned <= started_anew && started_anew <= bridge.listening, "{started_anew}: {started:?}");
    let calls = prometheus.query("cri_bridge_operations_total");
    assert_eq!(calls, Vec::<Value>::new(), "the new process answered no call");

    prometheus.stop().await;
    bridge.stop().await;
}
