//! A restart under load, with socket activation: cri-bridge is stopped and started again (as
//! `systemctl restart` does) three times while clients keep connecting and calling, and not one
//! connection attempt is refused, not one call fails otherwise than UNAVAILABLE on a connection
//! the old process sent GOAWAY on, and none hangs.
//!
//! The socket is held by `tests/support/activate.py`, a small stand-in for systemd's `.socket`
//! unit: it binds the socket once and passes it to each cri-bridge it starts (`LISTEN_FDS=1`), so
//! connections made between one process and the next wait in the socket's backlog.
//!
//! The clients are bare `h2` clients, one new unix connection per iteration: the test, not a
//! client library, decides what a failure is, and nothing reconnects or retries behind its back.

mod common;

use bytes::{Bytes, BytesMut};
use common::TempDir;
use cri_bridge::api::v1;
use prost::Message;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");
const RESTARTS: usize = 3;
const CLIENTS: usize = 16;
/// Each call's deadline, sent as `grpc-timeout` and enforced here too.
const DEADLINE: Duration = Duration::from_secs(5);
/// How long the load runs on each process before the next restart, at least.
const SERVE_FOR: Duration = Duration::from_millis(300);
/// Calls each process must answer while it is the only one, at least.
const MIN_OK_PER_PROCESS: usize = 20;

/// The supervisor, killed with every cri-bridge it started when the test ends, passing or
/// failing: it leads a process group of its own, and the whole group is killed.
struct Supervisor(Child);

impl Drop for Supervisor {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The supervisor's report lines, each with when it was read.
struct Reports {
    lines: mpsc::Receiver<(Instant, String)>,
    seen: Vec<String>,
}

impl Reports {
    /// Waits up to `timeout` for a line starting with `prefix`; the rest of the line, and when.
    fn expect(&mut self, prefix: &str, timeout: Duration) -> Result<(Instant, String), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    self.seen.push(line.clone());
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok((at, rest.trim().to_string()));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!("no `{prefix}` line in {timeout:?}; lines so far: {:?}", self.seen))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(format!("the supervisor ended before a `{prefix}` line; lines: {:?}", self.seen))
                }
            }
        }
    }

    /// `expect`, off the async runtime: the clients keep running meanwhile.
    async fn expect_async(
        mut self,
        prefix: &'static str,
        timeout: Duration,
    ) -> (Self, Result<(Instant, String), String>) {
        tokio::task::spawn_blocking(move || {
            let found = self.expect(prefix, timeout);
            (self, found)
        })
        .await
        .unwrap()
    }
}

/// A gRPC message with its 5-byte prefix.
fn framed(message: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.extend_from_slice(&[0]);
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    frame.freeze()
}

/// How one call ended.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// grpc-status 0 and a VersionResponse from the in-memory runtime.
    Ok,
    /// UNAVAILABLE because the connection's server sent GOAWAY: refused before it was sent
    /// (`not sent`), left unprocessed (a stream past the GOAWAY's last stream id), or answered
    /// 14 after it (`answered`). A client sends it again on a new connection.
    UnavailableAfterGoaway(&'static str),
    /// Any other grpc-status the server answered (UNAVAILABLE without a GOAWAY included).
    Status(i32, String),
    /// The connection or the stream failed otherwise: closed without GOAWAY, reset, an I/O error.
    Lost(String),
    /// grpc-status 0 with an answer that is not the runtime's VersionResponse.
    BadAnswer(String),
    /// No answer within the deadline.
    Hung,
}

impl Outcome {
    fn label(&self) -> String {
        match self {
            Outcome::Ok => "OK".into(),
            Outcome::UnavailableAfterGoaway(how) => format!("UNAVAILABLE(GOAWAY, {how})"),
            Outcome::Status(code, _) => format!("{:?}({code})", tonic::Code::from_i32(*code)).to_uppercase(),
            Outcome::Lost(_) => "LOST".into(),
            Outcome::BadAnswer(_) => "BAD_ANSWER".into(),
            Outcome::Hung => "HUNG".into(),
        }
    }

    fn allowed(&self) -> bool {
        matches!(self, Outcome::Ok | Outcome::UnavailableAfterGoaway(_))
    }
}

/// True when `error` is the connection going away at the server's request (GOAWAY received).
fn remote_goaway(error: &h2::Error) -> bool {
    error.is_go_away() && error.is_remote() || error.reason() == Some(h2::Reason::REFUSED_STREAM)
}

/// True when the server has sent GOAWAY on this connection: h2 then refuses new streams.
async fn saw_goaway(send: &h2::client::SendRequest<Bytes>) -> bool {
    match tokio::time::timeout(Duration::from_millis(100), send.clone().ready()).await {
        Ok(Err(error)) => remote_goaway(&error),
        _ => false,
    }
}

/// One v1 RuntimeService/Version call on `send`'s connection, within [`DEADLINE`].
async fn version_call(send: &h2::client::SendRequest<Bytes>) -> Outcome {
    match tokio::time::timeout(DEADLINE, version_call_inner(send)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Hung,
    }
}

async fn version_call_inner(send: &h2::client::SendRequest<Bytes>) -> Outcome {
    let h2_failure = |how: &'static str, error: h2::Error| {
        if remote_goaway(&error) {
            Outcome::UnavailableAfterGoaway(how)
        } else {
            Outcome::Lost(error.to_string())
        }
    };
    let request = http::Request::post("http://localhost/runtime.v1.RuntimeService/Version")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "5S")
        .body(())
        .unwrap();
    let mut ready = match send.clone().ready().await {
        Ok(ready) => ready,
        Err(error) => return h2_failure("not sent", error),
    };
    let (response, mut body_out) = match ready.send_request(request, false) {
        Ok(sent) => sent,
        Err(error) => return h2_failure("not sent", error),
    };
    let message = v1::VersionRequest { version: "0.1.0".into() }.encode_to_vec();
    if let Err(error) = body_out.send_data(framed(&message), true) {
        return h2_failure("unprocessed", error);
    }
    let (head, mut body) = match response.await {
        Ok(response) => response.into_parts(),
        Err(error) => return h2_failure("unprocessed", error),
    };
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(chunk) => {
                data.extend_from_slice(&chunk);
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            Err(error) => return h2_failure("unprocessed", error),
        }
    }
    let trailers = if head.headers.contains_key("grpc-status") {
        head.headers
    } else {
        match body.trailers().await {
            Ok(trailers) => trailers.unwrap_or_default(),
            Err(error) => return h2_failure("unprocessed", error),
        }
    };
    let get = |name: &str| trailers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let code: i32 = match get("grpc-status").parse() {
        Ok(code) => code,
        Err(_) => return Outcome::BadAnswer(format!("HTTP {} without a grpc-status", head.status)),
    };
    if code == tonic::Code::Unavailable as i32 && saw_goaway(send).await {
        return Outcome::UnavailableAfterGoaway("answered");
    }
    if code != 0 {
        return Outcome::Status(code, get("grpc-message"));
    }
    if data.len() < 5 || data.len() != 5 + u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize {
        return Outcome::BadAnswer(format!("not one gRPC message: {} bytes", data.len()));
    }
    match v1::VersionResponse::decode(&data[5..]) {
        Ok(answer) if answer.runtime_name == "cri-bridge-memory" => Outcome::Ok,
        Ok(answer) => Outcome::BadAnswer(format!("{answer:?}")),
        Err(error) => Outcome::BadAnswer(error.to_string()),
    }
}

/// What one client saw.
#[derive(Default)]
struct Seen {
    attempts: u64,
    /// Connection attempts that failed (ECONNREFUSED, ENOENT, EAGAIN…), with the error.
    refused: Vec<String>,
    calls: Vec<Call>,
}

/// One call: when its connection attempt began (which process may serve it), when the call
/// itself began and ended, and how it ended.
struct Call {
    connected: Instant,
    began: Instant,
    ended: Instant,
    outcome: Outcome,
}

/// Connects anew and calls, in a loop, until `stop`: one call on odd iterations, four in a row
/// on the same connection on even ones.
async fn client(socket: PathBuf, stop: Arc<AtomicBool>, ok: Arc<AtomicU64>) -> Seen {
    let mut seen = Seen::default();
    let mut iteration = 0u64;
    while !stop.load(Ordering::Relaxed) {
        iteration += 1;
        seen.attempts += 1;
        let connected = Instant::now();
        let stream = match tokio::net::UnixStream::connect(&socket).await {
            Ok(stream) => stream,
            Err(error) => {
                seen.refused.push(format!("{error} ({:?})", error.kind()));
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (send, connection) = match h2::client::handshake(stream).await {
            Ok(handshaken) => handshaken,
            Err(error) => {
                let outcome = Outcome::Lost(format!("handshake: {error}"));
                seen.calls.push(Call { connected, began: connected, ended: Instant::now(), outcome });
                continue;
            }
        };
        let connection = tokio::spawn(connection);
        let calls = if iteration.is_multiple_of(2) { 4 } else { 1 };
        for _ in 0..calls {
            let began = Instant::now();
            let outcome = version_call(&send).await;
            let done = outcome != Outcome::Ok;
            if outcome == Outcome::Ok {
                ok.fetch_add(1, Ordering::Relaxed);
            }
            seen.calls.push(Call { connected, began, ended: Instant::now(), outcome });
            if done {
                // Like any client: a connection going away is left for a new one.
                break;
            }
        }
        drop(send);
        // Closes once its streams are done; a hung one is covered by the deadline.
        let _ = tokio::time::timeout(Duration::from_secs(1), connection).await;
    }
    seen
}

/// `python3` or a clear failure: the test must not skip silently.
fn spawn_supervisor(dir: &TempDir, socket: &Path) -> Supervisor {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/activate.py");
    let log = std::fs::File::create(dir.path("stderr.log")).unwrap();
    let mut command = Command::new("python3");
    command
        .arg(&script)
        .arg(socket)
        .arg("--")
        .arg(BIN)
        .args(["serve", "--backend", "memory", "--listen"])
        .arg(dir.path("unused.sock"))
        // Nothing of an outer systemd (or of a test runner under one) reaches the processes.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .env_remove("CRI_BRIDGE_WORKER_THREADS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .process_group(0);
    match command.spawn() {
        Ok(child) => Supervisor(child),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            panic!("python3 is needed to run {} (the socket-activation supervisor): {error}", script.display())
        }
        Err(error) => panic!("cannot start python3 {}: {error}", script.display()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_with_socket_activation_refuses_no_connection() {
    let dir = TempDir::new("restart");
    let socket = dir.path("cri.sock");
    let mut supervisor = spawn_supervisor(&dir, &socket);
    let (lines, received) = mpsc::channel();
    let stdout = supervisor.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let logs = || std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
    let mut reports = Reports { lines: received, seen: Vec::new() };
    let started = (|| {
        reports.expect("listening", Duration::from_secs(10))?;
        reports.expect("started ", Duration::from_secs(10))
    })();
    let (_, first) = started.unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", logs()));
    let mut pids = vec![first];

    // Served: a Version call answers (connections wait in the backlog until then).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stream = tokio::net::UnixStream::connect(&socket).await.expect("the supervisor listens");
        let (send, connection) = h2::client::handshake(stream).await.expect("HTTP/2 handshake");
        tokio::spawn(connection);
        let outcome = version_call(&send).await;
        if outcome == Outcome::Ok {
            break;
        }
        if Instant::now() > deadline {
            panic!("cri-bridge does not answer Version: {outcome:?}\nstderr:\n{}", logs());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> =
        (0..CLIENTS).map(|_| tokio::spawn(client(socket.clone(), stop.clone(), ok.clone()))).collect();

    // Phases: while process k is the only one, [when its predecessor's exit was read, when the
    // next restart was asked for). A call that began and ended inside one was served by it.
    let mut phases = Vec::new();
    let mut hups = Vec::new();
    let mut phase_began = Instant::now();
    let mut problems = Vec::new();
    for restart in 1..=RESTARTS {
        // Serve for a while, and until the process has answered some calls.
        let ok_before = ok.load(Ordering::Relaxed);
        tokio::time::sleep(SERVE_FOR).await;
        let waited = Instant::now() + Duration::from_secs(10);
        while ok.load(Ordering::Relaxed) < ok_before + MIN_OK_PER_PROCESS as u64 && Instant::now() < waited {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let old = pids.last().unwrap().clone();
        let hup_at = Instant::now();
        hups.push(hup_at);
        phases.push((old.clone(), phase_began, hup_at));
        let hup = Command::new("kill").args(["-HUP", &supervisor.0.id().to_string()]).status().unwrap();
        assert!(hup.success(), "kill -HUP the supervisor");
        let (back, exited) = reports.expect_async("exited ", Duration::from_secs(15)).await;
        reports = back;
        let (exited_at, exited) = exited.unwrap_or_else(|e| panic!("restart {restart}: {e}\nstderr:\n{}", logs()));
        if exited != format!("{old} 0") {
            problems.push(format!("restart {restart}: cri-bridge {old} exited as `{exited}`, not `{old} 0`"));
        }
        let (back, started) = reports.expect_async("started ", Duration::from_secs(10)).await;
        reports = back;
        let (_, new) = started.unwrap_or_else(|e| panic!("restart {restart}: {e}\nstderr:\n{}", logs()));
        eprintln!("restart {restart}: {old} stopped {:?} after SIGHUP; {new} started", exited_at - hup_at);
        pids.push(new);
        phase_began = exited_at;
    }
    // The last process serves for a while too, then the load stops.
    let ok_before = ok.load(Ordering::Relaxed);
    tokio::time::sleep(SERVE_FOR).await;
    let waited = Instant::now() + Duration::from_secs(10);
    while ok.load(Ordering::Relaxed) < ok_before + MIN_OK_PER_PROCESS as u64 && Instant::now() < waited {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    phases.push((pids.last().unwrap().clone(), phase_began, Instant::now()));
    stop.store(true, Ordering::Relaxed);
    let mut seen = Vec::new();
    for client in clients {
        seen.push(client.await.expect("a client task"));
    }

    // The supervisor stops the last cri-bridge and itself on SIGTERM.
    let term = Command::new("kill").args(["-TERM", &supervisor.0.id().to_string()]).status().unwrap();
    assert!(term.success(), "kill -TERM the supervisor");
    let (back, exited) = reports.expect_async("exited ", Duration::from_secs(15)).await;
    reports = back;
    match exited {
        Ok((_, exited)) if exited == format!("{} 0", pids.last().unwrap()) => {}
        other => problems.push(format!("the last cri-bridge stopped as {other:?}")),
    }
    let (supervisor, status) = tokio::task::spawn_blocking(move || {
        let status = supervisor.0.wait();
        (supervisor, status)
    })
    .await
    .unwrap();
    drop(supervisor);
    if !status.as_ref().is_ok_and(|s| s.success()) {
        problems.push(format!("the supervisor exited as {status:?}"));
    }

    // The figures.
    let attempts: u64 = seen.iter().map(|s| s.attempts).sum();
    let refused: Vec<&String> = seen.iter().flat_map(|s| &s.refused).collect();
    let calls: Vec<&Call> = seen.iter().flat_map(|s| &s.calls).collect();
    let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
    for call in &calls {
        *by_code.entry(call.outcome.label()).or_default() += 1;
    }
    let max_latency = calls.iter().map(|call| call.ended - call.began).max().unwrap_or_default();
    let served: Vec<(String, usize)> = phases
        .iter()
        .map(|(pid, from, to)| {
            let alone = |call: &&&Call| call.connected >= *from && call.ended <= *to;
            let count = calls.iter().filter(alone).filter(|call| call.outcome == Outcome::Ok).count();
            (pid.clone(), count)
        })
        .collect();
    let mut distinct = pids.clone();
    distinct.sort();
    distinct.dedup();
    eprintln!(
        "restart under load: {attempts} connection attempts, {} refused, {} calls ({}), max latency {max_latency:?}, \
         {RESTARTS} restarts, {} cri-bridge pids, OK calls per process while alone: {}",
        refused.len(),
        calls.len(),
        by_code.iter().map(|(code, n)| format!("{code} {n}")).collect::<Vec<_>>().join(", "),
        distinct.len(),
        served.iter().map(|(pid, n)| format!("{pid}: {n}")).collect::<Vec<_>>().join(", "),
    );

    if !refused.is_empty() {
        problems.push(format!(
            "{} connection attempts failed, e.g. {:?}",
            refused.len(),
            &refused[..refused.len().min(5)]
        ));
    }
    // Each wrong outcome, placed in time: how long after which SIGHUP its connection was made.
    let wrong: Vec<String> = calls
        .iter()
        .filter(|call| !call.outcome.allowed())
        .map(|Call { connected: began, outcome, .. }| {
            // The nearest SIGHUP, before or after: `kill -HUP` itself takes a few ms to run.
            let nearest = (0..hups.len()).min_by_key(|&k| hups[k].max(*began) - hups[k].min(*began));
            match nearest {
                Some(k) if hups[k] <= *began => {
                    format!("{outcome:?}, connected {:?} after SIGHUP {}", *began - hups[k], k + 1)
                }
                Some(k) => format!("{outcome:?}, connected {:?} before SIGHUP {}", hups[k] - *began, k + 1),
                None => format!("{outcome:?}"),
            }
        })
        .collect();
    if !wrong.is_empty() {
        problems.push(format!(
            "{} calls neither OK nor UNAVAILABLE after GOAWAY:\n  {}",
            wrong.len(),
            wrong[..wrong.len().min(10)].join("\n  ")
        ));
    }
    if distinct.len() != RESTARTS + 1 {
        problems.push(format!("expected {} distinct cri-bridge processes, saw {pids:?}", RESTARTS + 1));
    }
    for (pid, count) in &served {
        if *count < MIN_OK_PER_PROCESS {
            problems.push(format!(
                "cri-bridge {pid} answered {count} calls while it was alone, fewer than {MIN_OK_PER_PROCESS}"
            ));
        }
    }
    let total = calls.len();
    if total < (RESTARTS + 1) * MIN_OK_PER_PROCESS * 2 {
        problems.push(format!("only {total} calls made"));
    }
    assert!(problems.is_empty(), "{}\nsupervisor said: {:?}\nstderr:\n{}", problems.join("\n"), reports.seen, logs());
}
