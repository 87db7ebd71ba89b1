//! Limits against abuse, each shown on the cri-bridge binary with a small `limits.*` in its
//! config: what the abusive client gets, that a well-behaved client's calls meanwhile succeed
//! within their deadlines, and that the daemon's open fds return to where they were (and its RSS
//! stays near) once the abuse ends. Clients are bare `h2` clients or raw bytes, so the test
//! controls every frame; and the real grpc-go and grpcio clients meet the idle timeout and the
//! keepalive pings.

mod common;

#[path = "support/h2_frames.rs"]
mod h2_frames;

use bytes::Bytes;
use common::process::{wait_for_listener, Reaped};
use common::TempDir;
use cri_bridge::api::v1;
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");
const VERSION: &str = "/runtime.v1.RuntimeService/Version";
const EVENTS: &str = "/runtime.v1.RuntimeService/GetContainerEvents";

/// The binary serving the in-memory runtime on a socket anyone may use, with `limits` (YAML
/// lines under `limits:`) and metrics on a socket of their own.
struct Daemon {
    child: Reaped,
    socket: PathBuf,
    metrics: PathBuf,
    dir: TempDir,
}

impl Daemon {
    async fn start(name: &str, limits: &str) -> Daemon {
        let dir = TempDir::new(name);
        let socket = dir.path("bridge.sock");
        let metrics = dir.path("metrics.sock");
        let file = dir.path("config.yaml");
        std::fs::write(
            &file,
            format!(
                "listen:\n  path: {}\n  mode: \"0666\"\nmetrics:\n  listen: {}\nlog:\n  level: info,cri_bridge::relay=debug\nlimits:\n{limits}",
                socket.display(),
                metrics.display()
            ),
        )
        .unwrap();
        let mut child = Reaped(
            Command::new(BIN)
                .args(["serve", "--config"])
                .arg(&file)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path("stderr.log")).unwrap())
                .spawn()
                .unwrap(),
        );
        wait_for_listener(&mut child, &socket).await;
        let daemon = Daemon { child, socket, metrics, dir };
        // Once, so the runtime is found and the steady state is what the baselines see; the
        // call's connection is closed by the time it returns, and gone from cri-bridge soon after.
        daemon.well_behaved_call().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        daemon
    }

    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).unwrap().count()
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A v1 Version call on a connection of its own, closed after it, with a 2 s deadline: it
    /// must succeed in time.
    async fn well_behaved_call(&self) -> Duration {
        let started = Instant::now();
        let call = async {
            let connection = connect(&self.socket).await;
            let mut send = connection.send.ready().await.expect("a connection for the well-behaved call");
            let mut head = request(VERSION);
            head.headers_mut().insert("grpc-timeout", http::HeaderValue::from_static("2S"));
            let (response, mut stream) = send.send_request(head, false).unwrap();
            stream.send_data(version_body(), true).unwrap();
            let (head, mut body) = response.await.expect("answered").into_parts();
            assert_eq!(head.status, 200);
            while let Some(chunk) = body.data().await {
                chunk.expect("the answer's body");
            }
            let trailers = body.trailers().await.expect("trailers").unwrap_or_default();
            assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]), "{trailers:?}");
            drop((send, stream, body));
            let _ = connection.driver.await;
        };
        tokio::time::timeout(Duration::from_secs(2), call)
            .await
            .expect("the well-behaved call ends within its deadline");
        started.elapsed()
    }

    /// Waits up to 5 s for the open fds to come back to `baseline`.
    async fn fds_return_to(&self, baseline: usize) {
        for _ in 0..250 {
            if self.fds() <= baseline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("cri-bridge holds {} fds, {baseline} before the abuse", self.fds());
    }

    async fn scrape(&self) -> String {
        let mut stream = tokio::net::UnixStream::connect(&self.metrics).await.unwrap();
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        text
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("stderr.log")).unwrap_or_default()
    }
}

/// A bare HTTP/2 connection; `driver` ends when the connection does, with its error.
struct Connection {
    send: h2::client::SendRequest<Bytes>,
    driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

async fn connect(socket: &Path) -> Connection {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (send, connection) = h2::client::handshake(stream).await.unwrap();
    Connection { send, driver: tokio::spawn(connection) }
}

fn request(path: &str) -> http::Request<()> {
    http::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

fn version_body() -> Bytes {
    let message = v1::VersionRequest::default().encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);
    body.into()
}

/// The figures a test reports (the closing note quotes them), once the fds are back.
async fn report(abuse: &str, daemon: &Daemon, baseline: (usize, u64), worst: Duration) {
    daemon.fds_return_to(baseline.0).await;
    eprintln!(
        "abuse: {abuse}: well-behaved calls OK, slowest {worst:?}; fds {} -> {}; RSS {} -> {} KiB",
        baseline.0,
        daemon.fds(),
        baseline.1,
        daemon.rss_kib()
    );
}

/// A connection with a call open on it: an event stream, its request sent (a stream whose
/// request has not arrived does not make its connection busy), and the call's stream.
async fn busy(socket: &Path) -> (Connection, h2::SendStream<Bytes>) {
    let connection = connect(socket).await;
    let mut send = connection.send.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request(EVENTS), false).unwrap();
    // An empty GetEventsRequest: the call stays open, the runtime streaming its events.
    stream.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200, "the event stream is open");
    (connection, stream)
}

#[tokio::test]
async fn connections_over_the_per_uid_limit_are_closed_and_other_uids_are_served() {
    let daemon = Daemon::start("limits-uid", "  connections_per_uid: 4\n  connections: 16\n").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    // Busy: at the limit, only an idle connection makes room.
    let held: Vec<_> = futures_join(4, || busy(&daemon.socket)).await;
    // The fifth from this uid is closed before anything is read from it.
    let mut fifth = tokio::net::UnixStream::connect(&daemon.socket).await.unwrap();
    let _ = fifth.write_all(h2_frames::PREFACE).await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(2), fifth.read(&mut buf)).await.expect("closed at once");
    assert!(matches!(read, Ok(0) | Err(_)), "nothing but the close: {read:?}");
    // Another uid is served meanwhile: `cri-bridge probe` run as nobody.
    let started = Instant::now();
    // A copy of the binary in the test's own directory: the checkout may sit where nobody may
    // enter (a clone in root's home, or in a 0700 temporary directory).
    let bin = daemon.dir.path("cri-bridge");
    std::fs::copy(BIN, &bin).unwrap();
    let probe = {
        use std::os::unix::process::CommandExt;
        let socket = daemon.socket.clone();
        tokio::task::spawn_blocking(move || Command::new(bin).arg("probe").arg(socket).uid(65534).gid(65534).output())
            .await
            .unwrap()
            .unwrap()
    };
    assert!(probe.status.success(), "{probe:?}");
    let worst = started.elapsed();
    let text = daemon.scrape().await;
    assert!(
        text.contains("cri_bridge_connections_refused_total{limit=\"limits.connections_per_uid\"} 1"),
        "{text}\n{}",
        daemon.log()
    );
    assert!(daemon.log().contains("limits.connections_per_uid (4) reached"), "{}", daemon.log());
    drop(held);
    daemon.fds_return_to(baseline.0).await;
    // And this uid is served again.
    let worst = worst.max(daemon.well_behaved_call().await);
    report("5 connections from one uid, limit 4", &daemon, baseline, worst).await;
}

/// critest holds one connection per test client, hundreds in a run, idle: at the per-uid limit a
/// new connection sends the longest-idle one away (GOAWAY) and is served; the bound holds (the
/// connection sent away is gone), and a flood of connections while every one at the limit is
/// busy is refused, each counted, as before.
#[tokio::test]
async fn at_the_limit_an_idle_connection_makes_room_and_busy_ones_hold_the_bound() {
    let daemon = Daemon::start("limits-reclaim", "  connections_per_uid: 4\n  connections: 16\n").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    let oldest = connect(&daemon.socket).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut others: Vec<Connection> = futures_join(3, || connect(&daemon.socket)).await;
    // Idle for over a second (RECLAIMABLE_AFTER): each may make room.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fifth = connect(&daemon.socket).await;
    let mut send = fifth.send.clone().ready().await.expect("the fifth connection is served");
    let (response, mut stream) = send.send_request(request(VERSION), false).unwrap();
    stream.send_data(version_body(), true).unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(30), response).await;
    assert_eq!(answered.expect("answered").expect("an answer").status(), 200);
    // The longest idle one was sent away, the others kept.
    let ended = tokio::time::timeout(Duration::from_secs(10), oldest.driver).await;
    assert!(ended.is_ok(), "the longest-idle connection was sent away (GOAWAY)\n{}", daemon.log());
    assert!(others.iter().all(|c| !c.driver.is_finished()), "the others are kept");
    let text = daemon.scrape().await;
    assert!(!text.contains("cri_bridge_connections_refused_total{limit=\"limits.connections_per_uid\"}"), "{text}");

    // Now every connection at the limit busy: a flood of new ones is refused, each counted.
    drop((fifth, send, stream));
    others.truncate(0);
    daemon.fds_return_to(baseline.0).await;
    let held: Vec<_> = futures_join(4, || busy(&daemon.socket)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    const FLOOD: usize = 40;
    for _ in 0..FLOOD {
        let mut extra = tokio::net::UnixStream::connect(&daemon.socket).await.unwrap();
        let _ = extra.write_all(h2_frames::PREFACE).await;
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), extra.read(&mut buf)).await.expect("closed");
        assert!(matches!(read, Ok(0) | Err(_)), "refused, nothing but the close: {read:?}");
    }
    let text = daemon.scrape().await;
    let refused = format!("cri_bridge_connections_refused_total{{limit=\"limits.connections_per_uid\"}} {FLOOD}");
    assert!(text.contains(&refused), "{text}\n{}", daemon.log());
    assert!(held.iter().all(|(c, _)| !c.driver.is_finished()), "the busy connections are kept");
    drop(held);
    daemon.fds_return_to(baseline.0).await;
    let worst = daemon.well_behaved_call().await;
    report("idle connections at the per-uid limit, then a flood at busy ones", &daemon, baseline, worst).await;
}

async fn futures_join<F: std::future::Future>(n: usize, make: impl Fn() -> F) -> Vec<F::Output> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(make().await);
    }
    out
}

#[tokio::test]
async fn a_connection_holds_at_most_its_streams_and_a_trickled_request_is_cut_off() {
    let daemon = Daemon::start("limits-streams", "  streams_per_connection: 8\n  request_timeout_seconds: 1\n").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    let abuser = connect(&daemon.socket).await;
    // Eight calls whose request never comes (headers sent, the body never ended).
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut send = abuser.send.clone().ready().await.unwrap();
        let (response, stream) = send.send_request(request(VERSION), false).unwrap();
        held.push((response, stream));
    }
    // A ninth is not served while they are open: the connection may have 8 (h2's client holds
    // it back, or the server refuses it with REFUSED_STREAM).
    let ninth = async {
        let mut send = abuser.send.clone().ready().await?;
        let (response, mut stream) = send.send_request(request(VERSION), false)?;
        stream.send_data(version_body(), true)?;
        response.await
    };
    match tokio::time::timeout(Duration::from_millis(300), ninth).await {
        Err(_) => {}
        Ok(Err(error)) => assert_eq!(error.reason(), Some(h2::Reason::REFUSED_STREAM), "{error:?}"),
        Ok(Ok(response)) => panic!("a ninth call was served beside eight: {response:?}"),
    }
    let worst = daemon.well_behaved_call().await;
    // Each trickled request is cut off after limits.request_timeout_seconds.
    for (response, _stream) in held.drain(..) {
        let response = tokio::time::timeout(Duration::from_secs(30), response).await.expect("answered").unwrap();
        let status = response.headers().get("grpc-status").map(|v| v.to_str().unwrap().to_string());
        assert_eq!(status.as_deref(), Some("4"), "DEADLINE_EXCEEDED: {response:?}");
        let message = response.headers().get("grpc-message").unwrap().to_str().unwrap().to_string();
        assert!(message.contains("limits.request_timeout_seconds"), "{message}");
    }
    // And the connection serves on.
    let mut send = abuser.send.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request(VERSION), false).unwrap();
    stream.send_data(version_body(), true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    drop((abuser, send, stream));
    daemon.fds_return_to(baseline.0).await;
    report("8 requests held open, limit 8, request timeout 1 s", &daemon, baseline, worst).await;
}

#[tokio::test]
async fn an_idle_connection_is_sent_away_and_a_busy_one_is_not() {
    let daemon = Daemon::start("limits-idle", "  idle_timeout_seconds: 1\n").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    let idle = connect(&daemon.socket).await;
    let busy = connect(&daemon.socket).await;
    // The idle one has made a call, and is idle once it ended.
    let mut send = idle.send.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request(VERSION), false).unwrap();
    stream.send_data(version_body(), true).unwrap();
    let (head, mut body) = response.await.unwrap().into_parts();
    assert_eq!(head.status, 200);
    while body.data().await.is_some() {}
    let _ = body.trailers().await;
    drop((send, stream, body));
    let started = Instant::now();
    let mut worst = Duration::ZERO;
    while started.elapsed() < Duration::from_millis(2500) {
        let begun = Instant::now();
        let mut send = busy.send.clone().ready().await.expect("the busy connection stays");
        let (response, mut stream) = send.send_request(request(VERSION), false).unwrap();
        stream.send_data(version_body(), true).unwrap();
        assert_eq!(response.await.unwrap().status(), 200);
        worst = worst.max(begun.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ended = tokio::time::timeout(Duration::from_secs(1), idle.driver).await;
    assert!(ended.is_ok(), "the idle connection was ended (GOAWAY) within about 2 s");
    assert!(!busy.driver.is_finished(), "the busy connection is kept");
    drop(busy);
    daemon.fds_return_to(baseline.0).await;
    report("an idle connection, idle timeout 1 s", &daemon, baseline, worst).await;
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_disconnected() {
    let daemon = Daemon::start("limits-keepalive", "  keepalive_seconds: 1\n  keepalive_timeout_seconds: 1\n").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    // A client that says hello and then never reads or writes again.
    let mut mute = tokio::net::UnixStream::connect(&daemon.socket).await.unwrap();
    mute.write_all(h2_frames::PREFACE).await.unwrap();
    mute.write_all(&h2_frames::frame(h2_frames::SETTINGS, 0, 0, &[])).await.unwrap();
    // A well-behaved client answers PINGs (h2 does) and stays.
    let live = connect(&daemon.socket).await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    // The mute one was closed: what it has to read ends.
    let mut all = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), mute.read_to_end(&mut all)).await;
    assert!(read.is_ok(), "the mute peer's connection was closed");
    assert!(!live.driver.is_finished(), "a peer that answers PINGs is kept");
    let worst = daemon.well_behaved_call().await;
    drop((mute, live));
    daemon.fds_return_to(baseline.0).await;
    report("a peer that stops answering PINGs, keepalive 1 s + 1 s", &daemon, baseline, worst).await;
}

#[tokio::test]
async fn a_flood_of_cancelled_calls_gets_the_connection_closed_with_enhance_your_calm() {
    let daemon = Daemon::start("limits-resets", "  resets_per_minute: 50\n").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    let abuser = connect(&daemon.socket).await;
    let mut cut_off = None;
    for opened in 0..200 {
        let Ok(mut send) = abuser.send.clone().ready().await else {
            cut_off = Some(opened);
            break;
        };
        let Ok((_response, mut stream)) = send.send_request(request(VERSION), false) else {
            cut_off = Some(opened);
            break;
        };
        // Cancelled once cri-bridge is waiting for its body: a call opened and given up.
        tokio::time::sleep(Duration::from_millis(2)).await;
        stream.send_reset(h2::Reason::CANCEL);
    }
    let ended = tokio::time::timeout(Duration::from_secs(2), abuser.driver).await.expect("the connection ended");
    let error = ended.unwrap().expect_err("ended by the server");
    assert_eq!(error.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{error:?}");
    let cut_off = cut_off.expect("cut off before 200 streams");
    assert!((50..=120).contains(&cut_off), "cut off after about 50 resets, at {cut_off}");
    let worst = daemon.well_behaved_call().await;
    assert!(daemon.log().contains("limits.resets_per_minute"), "{}", daemon.log());
    daemon.fds_return_to(baseline.0).await;
    report("cancelled calls, 50 a minute allowed", &daemon, baseline, worst).await;
}

/// Writes `frames` (the preface first) on a raw connection while reading and discarding what
/// comes back, then closes it; what the server did is what ended the read.
async fn flood(socket: &Path, frame: Vec<u8>, count: usize) -> usize {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        let mut total = 0;
        while let Ok(n) = read.read(&mut buf).await {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let mut batch = h2_frames::PREFACE.to_vec();
    batch.extend(h2_frames::frame(h2_frames::SETTINGS, 0, 0, &[]));
    let _ = write.write_all(&batch).await;
    let chunk: Vec<u8> = std::iter::repeat_n(frame, 1000).flatten().collect();
    for _ in 0..count / 1000 {
        if write.write_all(&chunk).await.is_err() {
            break;
        }
    }
    drop(write);
    tokio::time::timeout(Duration::from_secs(10), reader).await.expect("the server ends or answers").unwrap()
}

#[tokio::test]
async fn floods_of_settings_and_pings_leave_other_clients_served_and_nothing_held() {
    let daemon = Daemon::start("limits-floods", "").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    let settings = h2_frames::frame(h2_frames::SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0]);
    const PING: u8 = 0x6;
    let ping = h2_frames::frame(PING, 0, 0, &[7; 8]);
    let (flooded, worst) = tokio::join!(
        async {
            let a = flood(&daemon.socket, settings, 200_000).await;
            let b = flood(&daemon.socket, ping, 200_000).await;
            (a, b)
        },
        async {
            let mut worst = Duration::ZERO;
            for _ in 0..10 {
                worst = worst.max(daemon.well_behaved_call().await);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            worst
        }
    );
    eprintln!("flood: the server sent back {} bytes to the SETTINGS flood, {} to the PING flood", flooded.0, flooded.1);
    // Cut off after 10,000 of each (front_door::MAX_CONTROL_FRAMES), not answered 200,000 times:
    // a SETTINGS ack is 9 bytes, a PING ack 17.
    assert!(flooded.0 < 20_000 * 9 && flooded.1 < 20_000 * 17, "{flooded:?}");
    assert!(daemon.log().contains("SETTINGS and PING frames within"), "{}", daemon.log());
    daemon.fds_return_to(baseline.0).await;
    let grown = daemon.rss_kib().saturating_sub(baseline.1);
    assert!(grown < 8 << 10, "RSS grew by {grown} KiB");
    report("200,000 SETTINGS, then 200,000 PINGs on one connection", &daemon, baseline, worst).await;
}

/// A real client's session (`tests/clients`) against the daemon, pausing `idle` after Version;
/// the steps' codes.
async fn real_session(client: &str, socket: &Path, idle: &str) -> Vec<String> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = if client == "grpc-go" {
        let binary = top.join("target/clients/bin/cri-session-v1");
        assert!(binary.is_file(), "{} is missing: run tests/clients/go/build.sh (.ci/run does)", binary.display());
        let mut command = tokio::process::Command::new(binary);
        command.arg("-socket").arg(socket).args(["-idle", &format!("{idle}s"), "-timeout", "5s"]);
        command
    } else {
        let python = top.join("target/clients/venv/bin/python");
        assert!(python.is_file(), "{} is missing: run tests/clients/python/setup.sh (.ci/run does)", python.display());
        let mut command = tokio::process::Command::new(python);
        command.arg(top.join("tests/clients/python/cri_client.py")).arg("--socket").arg(socket);
        command.args([
            "--version",
            "v1",
            "--image",
            "busybox",
            "--name",
            "limits-idle",
            "--idle",
            idle,
            "--timeout",
            "5",
        ]);
        command
    };
    let output =
        tokio::time::timeout(Duration::from_secs(60), command.stdin(Stdio::null()).kill_on_drop(true).output())
            .await
            .unwrap_or_else(|_| panic!("the {client} session ran over 60 s"))
            .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{client}: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| {
            let step: serde_json::Value = serde_json::from_str(line).unwrap();
            format!("{} {}", step["step"].as_str().unwrap(), step["code"].as_str().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn real_clients_ride_over_the_idle_goaway_and_answer_keepalive_pings() {
    let daemon = Daemon::start(
        "limits-real",
        "  idle_timeout_seconds: 1\n  keepalive_seconds: 1\n  keepalive_timeout_seconds: 1\n",
    )
    .await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    let started = Instant::now();
    // Each pauses 3.5 s after Version with no call open (the GOAWAY comes 1-2 s after the last
    // call): pinged, then sent away; the next call goes on a new connection. grpcio pauses again
    // with only its event stream open: pinged, and kept.
    // One after the other, grpcio on the preloaded busybox, grpc-go on an image it pulls.
    let c_core = real_session("grpcio", &daemon.socket, "3.5").await;
    let go = real_session("grpc-go", &daemon.socket, "3.5").await;
    let took = started.elapsed();
    for (client, steps) in [("grpc-go", &go), ("grpcio", &c_core)] {
        assert!(steps.len() >= 10, "{client}: {steps:?}");
        let failed: Vec<&String> = steps.iter().filter(|s| !s.ends_with(" OK")).collect();
        assert!(failed.is_empty(), "{client}: every step succeeds across the GOAWAY: {failed:?} of {steps:?}");
    }
    let log = daemon.log();
    let goaways = log.matches("(limits.idle_timeout_seconds): GOAWAY").count();
    let unanswered = log.matches("did not answer a PING").count();
    assert!(goaways >= 2, "both clients' idle connections were sent away: {goaways}\n{log}");
    assert_eq!(unanswered, 0, "both clients answer the PINGs\n{log}");
    daemon.fds_return_to(baseline.0).await;
    eprintln!(
        "abuse: real clients with idle timeout 1 s, keepalive 1 s + 1 s: grpc-go {} steps and grpcio {} steps all OK \
         in {took:?}, {goaways} idle GOAWAYs, 0 PINGs unanswered; fds {} -> {}",
        go.len(),
        c_core.len(),
        baseline.0,
        daemon.fds()
    );
}

/// A raw client, once the server's SETTINGS are acknowledged. It sends nothing of its own
/// accord: a client in the middle of a header block may send nothing but CONTINUATION frames
/// (RFC 9113 §6.10), not even a PING's ACK. `closed` resolves when the server ends the
/// connection.
struct Trickler {
    write: tokio::net::unix::OwnedWriteHalf,
    closed: tokio::task::JoinHandle<()>,
}

impl Trickler {
    async fn connect(socket: &Path) -> Trickler {
        let (mut read, mut write) = tokio::net::UnixStream::connect(socket).await.unwrap().into_split();
        let mut hello = h2_frames::PREFACE.to_vec();
        hello.extend(h2_frames::frame(h2_frames::SETTINGS, 0, 0, &[]));
        write.write_all(&hello).await.unwrap();
        let mut header = [0u8; 9];
        loop {
            read.read_exact(&mut header).await.unwrap();
            let mut payload = vec![0u8; u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize];
            read.read_exact(&mut payload).await.unwrap();
            if (header[3], header[4]) == (h2_frames::SETTINGS, 0) {
                break;
            }
        }
        write.write_all(&h2_frames::frame(h2_frames::SETTINGS, 1, 0, &[])).await.unwrap();
        let closed = tokio::spawn(async move {
            let mut sink = vec![0u8; 4096];
            while read.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        });
        Trickler { write, closed }
    }
}

#[tokio::test]
async fn a_header_block_trickled_a_byte_at_a_time_does_not_hold_a_connection() {
    let daemon =
        Daemon::start("limits-trickle-headers", "  keepalive_seconds: 1\n  keepalive_timeout_seconds: 1\n").await;
    let baseline = (daemon.fds(), daemon.rss_kib());
    let mut trickler = Trickler::connect(&daemon.socket).await;
    // HEADERS without END_HEADERS (`:method POST`, indexed), then one CONTINUATION byte every
    // 100 ms (`:scheme http`, over and over), never ending the block.
    trickler.write.write_all(&h2_frames::frame(h2_frames::HEADERS, 0, 1, &[0x83])).await.unwrap();
    let started = Instant::now();
    let mut worst = Duration::ZERO;
    while !trickler.closed.is_finished() && started.elapsed() < Duration::from_secs(10) {
        let byte = h2_frames::frame(h2_frames::CONTINUATION, 0, 1, &[0x86]);
        if trickler.write.write_all(&byte).await.is_err() {
            break;
        }
        worst = worst.max(daemon.well_behaved_call().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = started.elapsed();
    tokio::time::timeout(Duration::from_secs(30), trickler.closed).await.expect("closed by the server").unwrap();
    // Cut off by keepalive (its PING cannot be answered mid-block), not by the idle timeout
    // (600 s): the log says which, and how long it took is a figure.
    eprintln!("a trickled header block held its connection for {held:?}");
    assert!(daemon.log().contains("did not answer a PING"), "{}", daemon.log());
    daemon.fds_return_to(baseline.0).await;
    report(
        &format!("a header block trickled a byte per 100 ms, keepalive 1 s + 1 s: cut off after {held:?}"),
        &daemon,
        baseline,
        worst,
    )
    .await;
}
