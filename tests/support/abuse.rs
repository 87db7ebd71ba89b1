//! Hostile clients, all at once, against the cri-bridge binary, while well-behaved clients call
//! `Version`: shared by `tests/isolation.rs` (what must hold) and `benches/isolation.rs` (the
//! figures, on the release binary). Clients are bare `h2` clients or raw frames, so every byte
//! and every window is the test's.
//!
//! The abuses (issue 23's findings):
//! - slow readers: connections whose streams take none of a large answer (`ListContainers` over
//!   thousands of containers) and `GetContainerEvents` watchers that stop reading;
//! - unfinished header blocks: HEADERS and CONTINUATIONs of 16 KiB, then nothing;
//! - unfinished requests: streams announcing a 16 MiB message and sending what the window allows;
//! - large conversions: v1 `CreateContainer` requests of hundreds of thousands of `envs` to a
//!   v1alpha2 runtime;
//! - control-frame floods after a HEADERS frame that depends on its own stream (which once
//!   switched the flood limit off);
//! - the conversion queue (issue 36, finding 1): v1 `CreateContainer` requests of 14 MB of empty
//!   `envs` to the v1alpha2 runtime, each with a deadline of 1.5 s, sent again as each ends.

#![allow(dead_code)]

use bytes::Bytes;
use cri_bridge::api::v1;
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

pub const VERSION: &str = "/runtime.v1.RuntimeService/Version";
const LIST_CONTAINERS: &str = "/runtime.v1.RuntimeService/ListContainers";
const EVENTS: &str = "/runtime.v1.RuntimeService/GetContainerEvents";
const CREATE_CONTAINER: &str = "/runtime.v1.RuntimeService/CreateContainer";

impl Sizes {
    /// The client connections the abuse opens at most (each header block and flood, each
    /// conversion and queue filler on a connection of its own; one for the watchers).
    pub fn connections(&self) -> usize {
        self.slow_connections
            + 1
            + self.header_connections
            + self.request_connections
            + self.conversions
            + self.floods
            + self.queue_fillers
    }

    /// The daemon's memory ceiling (`cri_bridge::relay::memory_ceiling`, docs/install.md) with
    /// `limits`, counting the connections actually open: the abuse's, `others` more.
    pub fn ceiling_kib(&self, mut limits: cri_bridge::config::Limits, others: usize) -> u64 {
        limits.connections = self.connections() + others;
        (cri_bridge::relay::memory_ceiling(&limits, 1) >> 10) as u64
    }
}

/// How much of each abuse.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub containers: usize,
    pub slow_connections: usize,
    pub slow_streams: usize,
    pub watchers: usize,
    pub header_connections: usize,
    pub request_connections: usize,
    pub request_streams: usize,
    pub conversions: usize,
    pub envs: usize,
    /// Connections that send a HEADERS frame depending on its own stream, then a PING flood.
    pub floods: usize,
    /// Connections that send 14 MB requests of empty `envs` with `grpc-timeout: 1500m`, again
    /// and again.
    pub queue_fillers: usize,
}

/// The daemon under test, in front of an in-memory runtime speaking v1alpha2 (so v1 callers are
/// translated), serving v1 and v1alpha2. The runtime runs in this process, so that the daemon's
/// RSS and CPU are cri-bridge's alone (the abuse makes the runtime work and hold memory too).
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub dir: PathBuf,
    runtime: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Daemon {
    /// `extra`: more of the config file (YAML at the top level).
    pub async fn start(binary: &Path, dir: PathBuf, extra: &str) -> Daemon {
        std::fs::create_dir_all(&dir).unwrap();
        let (socket, runtime_socket) = (dir.join("bridge.sock"), dir.join("runtime.sock"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // On threads of its own: decoding the abusers' requests must not hold this process's
        // clients, whose latency is what is measured.
        let (listening, bound) = std::sync::mpsc::channel();
        let path = runtime_socket.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let versions = [cri_bridge::CriVersion::V1alpha2];
                let served = cri_bridge::memory::serve_memory(&path, &versions, async {
                    let _ = stopped.await;
                })
                .await
                .expect("the in-memory runtime");
                listening.send(()).unwrap();
                let _ = served.1.await;
            });
        });
        bound.recv().expect("the in-memory runtime started");
        let file = dir.join("config.yaml");
        let config = format!(
            "listen:\n  path: {}\n  versions: [v1, v1alpha2]\nbackend:\n  endpoint: unix://{}\n{extra}",
            socket.display(),
            runtime_socket.display()
        );
        std::fs::write(&file, config).unwrap();
        let child = Command::new(binary)
            .args(["serve", "--config"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
            .spawn()
            .unwrap();
        // Held from here, so that it is killed and waited for however the start goes.
        let daemon = Daemon { child, socket, dir, runtime: Some(stop) };
        for _ in 0..500 {
            if tokio::net::UnixStream::connect(&daemon.socket).await.is_ok() {
                return daemon;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("cri-bridge did not listen: {}", daemon.log());
    }

    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).unwrap().count()
    }

    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// Waits up to `limit` for the open fds to come back to `baseline`.
    pub async fn fds_back_to(&self, baseline: usize, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if self.fds() <= baseline {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(stop) = self.runtime.take() {
            let _ = stop.send(());
        }
    }
}

/// A bare HTTP/2 connection.
pub struct Connection {
    pub send: h2::client::SendRequest<Bytes>,
    pub driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

pub async fn connect(socket: &Path) -> Connection {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (send, connection) = h2::client::handshake(stream).await.unwrap();
    Connection { send, driver: tokio::spawn(connection) }
}

pub fn request(path: &str, timeout: Option<&'static str>) -> http::Request<()> {
    let mut request = http::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    if let Some(timeout) = timeout {
        request.headers_mut().insert("grpc-timeout", http::HeaderValue::from_static(timeout));
    }
    request
}

pub fn framed(message: &[u8]) -> Bytes {
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    body.into()
}

/// One call on `connection`, read whole: its grpc-status, or why there is none.
pub async fn call(
    connection: &Connection,
    path: &str,
    message: &[u8],
    timeout: &'static str,
) -> Result<String, String> {
    let mut send = connection.send.clone().ready().await.map_err(|e| e.to_string())?;
    let (response, mut stream) = send.send_request(request(path, Some(timeout)), false).map_err(|e| e.to_string())?;
    stream.send_data(framed(message), true).map_err(|e| e.to_string())?;
    let (head, mut body) = response.await.map_err(|e| e.to_string())?.into_parts();
    if let Some(code) = head.headers.get("grpc-status") {
        return Ok(code.to_str().unwrap_or("?").to_string());
    }
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.map_err(|e| e.to_string())?.unwrap_or_default();
    Ok(trailers.get("grpc-status").map_or("none".to_string(), |v| v.to_str().unwrap_or("?").to_string()))
}

/// What the well-behaved clients saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub latencies: Vec<Duration>,
    pub failures: Vec<String>,
}

impl Seen {
    pub fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
    }
}

/// Well-behaved clients until `stop`: one long-lived connection calling `Version` back to back
/// (a kubelet), and one connection per call (crictl), each call with `deadline` (a grpc-timeout:
/// `2S` in the benchmark, whose figures count a late call as failed; tens of seconds in the
/// test, where only what load cannot cause may fail it).
pub fn well_behaved(
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    deadline: Duration,
) -> Vec<tokio::task::JoinHandle<()>> {
    let grpc_timeout: &'static str = Box::leak(format!("{}S", deadline.as_secs().max(1)).into_boxed_str());
    let message = v1::VersionRequest::default().encode_to_vec();
    let mut tasks = Vec::new();
    for fresh_connections in [false, true] {
        let (socket, stop, seen, message) = (socket.clone(), stop.clone(), seen.clone(), message.clone());
        tasks.push(tokio::spawn(async move {
            let mut kept = None;
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let outcome = tokio::time::timeout(deadline, async {
                    if fresh_connections || kept.is_none() {
                        kept = Some(connect(&socket).await);
                    }
                    call(kept.as_ref().unwrap(), VERSION, &message, grpc_timeout).await
                })
                .await;
                let took = started.elapsed();
                let failure = match outcome {
                    Ok(Ok(code)) if code == "0" => None,
                    Ok(Ok(code)) => Some(format!("grpc-status {code}")),
                    Ok(Err(error)) => Some(error),
                    Err(_) => Some(format!("no answer within {deadline:?} ({took:?})")),
                };
                match failure {
                    None => seen.lock().unwrap().latencies.push(took),
                    Some(failure) => seen.lock().unwrap().failures.push(failure),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tasks
}

/// A sandbox and `containers` containers, so that `ListContainers` answers are large.
pub async fn populate(socket: &Path, containers: usize) {
    let connection = connect(socket).await;
    let pod = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: "abused".into(),
            uid: "u-abused".into(),
            namespace: "ns".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    let message = v1::RunPodSandboxRequest { config: Some(pod.clone()), ..Default::default() }.encode_to_vec();
    let answer = unary(&connection, "/runtime.v1.RuntimeService/RunPodSandbox", &message).await;
    let pod_id = v1::RunPodSandboxResponse::decode(answer).unwrap().pod_sandbox_id;
    let mut calls = Vec::new();
    for n in 0..containers {
        let request = v1::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata { name: format!("container-{n:05}"), attempt: 0 }),
                image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
                labels: [("app".to_string(), "abused".to_string()), ("n".to_string(), n.to_string())].into(),
                ..Default::default()
            }),
            sandbox_config: Some(pod.clone()),
        };
        calls.push(request.encode_to_vec());
    }
    for batch in calls.chunks(64) {
        let answers = batch.iter().map(|m| unary(&connection, "/runtime.v1.RuntimeService/CreateContainer", m));
        futures_util::future::join_all(answers).await;
    }
}

/// A unary call that must succeed: its answer's message.
async fn unary(connection: &Connection, path: &str, message: &[u8]) -> Bytes {
    let mut send = connection.send.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request(path, Some("20S")), false).unwrap();
    stream.send_data(framed(message), true).unwrap();
    let (head, mut body) = response.await.unwrap().into_parts();
    assert!(head.headers.get("grpc-status").is_none(), "{path}: {:?}", head.headers);
    let mut gathered = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        gathered.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]), "{path}: {trailers:?}");
    Bytes::from(gathered).slice(5..)
}

/// Everything the abusers hold; dropping it ends the abuse.
#[derive(Default)]
pub struct Abusers {
    held: Vec<Box<dyn std::any::Any + Send>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Abusers {
    pub fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts every abuse; returns once each has begun.
pub async fn abuse(socket: &Path, sizes: Sizes) -> Abusers {
    let mut abusers = Abusers::default();
    // Slow readers: streams whose answers are never read (h2 gives no window back for them).
    for _ in 0..sizes.slow_connections {
        let connection = connect(socket).await;
        let mut streams = Vec::new();
        for _ in 0..sizes.slow_streams {
            let mut send = connection.send.clone().ready().await.unwrap();
            let (response, mut stream) = send.send_request(request(LIST_CONTAINERS, None), false).unwrap();
            stream.send_data(framed(&v1::ListContainersRequest::default().encode_to_vec()), true).unwrap();
            streams.push((response, stream));
        }
        abusers.held.push(Box::new((connection, streams)));
    }
    {
        let connection = connect(socket).await;
        let mut watchers = Vec::new();
        for _ in 0..sizes.watchers {
            let mut send = connection.send.clone().ready().await.unwrap();
            let (response, mut stream) = send.send_request(request(EVENTS, None), false).unwrap();
            stream.send_data(framed(&[]), true).unwrap();
            watchers.push((response, stream));
        }
        abusers.held.push(Box::new((connection, watchers)));
    }
    // Unfinished header blocks: HEADERS without END_HEADERS, CONTINUATIONs of 16 KiB, then nothing.
    for _ in 0..sizes.header_connections {
        let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(raw_frame(0x4, 0, 0, &[]));
        bytes.extend(raw_frame(0x1, 0, 1, &[0x82]));
        let filler = vec![0x82u8; 16 * 1024];
        for _ in 0..126 {
            bytes.extend(raw_frame(0x9, 0, 1, &filler));
        }
        // Written by a task of its own: the server may stop reading, or close.
        abusers.tasks.push(tokio::spawn(async move {
            let _ = stream.write_all(&bytes).await;
            std::future::pending::<()>().await;
            drop(stream);
        }));
    }
    // Unfinished requests: each announces 16 MiB - 1 and sends what its window allows.
    let announced = (16 << 20) - 1;
    let mut body = vec![0u8; 5 + announced];
    body[1..5].copy_from_slice(&(announced as u32).to_be_bytes());
    let body = Bytes::from(body);
    for _ in 0..sizes.request_connections {
        let connection = connect(socket).await;
        let mut streams = Vec::new();
        for _ in 0..sizes.request_streams {
            let mut send = connection.send.clone().ready().await.unwrap();
            let (response, mut stream) = send.send_request(request(CREATE_CONTAINER, None), false).unwrap();
            // All but the last byte: buffered by h2 and sent as cri-bridge gives window back.
            stream.send_data(body.slice(..body.len() - 1), false).unwrap();
            streams.push((response, stream));
        }
        abusers.held.push(Box::new((connection, streams)));
    }
    // Floods: a self-dependent HEADERS frame, then 20,000 PINGs.
    for _ in 0..sizes.floods {
        let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(raw_frame(0x4, 0, 0, &[]));
        // PRIORITY flag, END_HEADERS: stream 1 depends on stream 1.
        bytes.extend(raw_frame(0x1, 0x24, 1, &[0, 0, 0, 1, 16, 0x82]));
        for n in 0..20_000u64 {
            bytes.extend(raw_frame(0x6, 0, 0, &n.to_be_bytes()));
        }
        abusers.tasks.push(tokio::spawn(async move {
            let _ = stream.write_all(&bytes).await;
            std::future::pending::<()>().await;
            drop(stream);
        }));
    }
    // The conversion queue: requests whose decoding costs many times their size, each with a
    // deadline shorter than a conversion queue without bounds would take, sent again at once.
    if sizes.queue_fillers > 0 {
        let envs = vec![v1::KeyValue::default(); 7_000_000];
        let request = v1::CreateContainerRequest {
            pod_sandbox_id: "no-such-pod".into(),
            config: Some(v1::ContainerConfig { envs, ..Default::default() }),
            ..Default::default()
        };
        let message = Bytes::from(request.encode_to_vec());
        for _ in 0..sizes.queue_fillers {
            let (socket, message) = (socket.to_path_buf(), message.clone());
            abusers.tasks.push(tokio::spawn(async move {
                let connection = connect(&socket).await;
                loop {
                    if call(&connection, CREATE_CONTAINER, &message, "1500m").await.is_err() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }));
        }
    }
    // Large conversions: whole requests, each on a connection of its own.
    if sizes.conversions > 0 {
        let envs = (0..sizes.envs).map(|n| v1::KeyValue { key: format!("K{n}"), value: "v".into() }).collect();
        let request = v1::CreateContainerRequest {
            pod_sandbox_id: "no-such-pod".into(),
            config: Some(v1::ContainerConfig { envs, ..Default::default() }),
            ..Default::default()
        };
        let message = request.encode_to_vec();
        for _ in 0..sizes.conversions {
            let (socket, message) = (socket.to_path_buf(), message.clone());
            abusers.tasks.push(tokio::spawn(async move {
                let connection = connect(&socket).await;
                let _ = call(&connection, CREATE_CONTAINER, &message, "60S").await;
                std::future::pending::<()>().await;
                drop(connection);
            }));
        }
    }
    abusers
}

fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    frame.extend([kind, flags]);
    frame.extend(stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}
