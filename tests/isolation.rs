//! No client can hurt another (issue 23), shown on the cri-bridge binary: every abuse of
//! `support/abuse.rs` at once — slow readers, unfinished header blocks, unfinished 16 MiB
//! requests, large conversions — while well-behaved clients call `Version`. What must hold:
//! every well-behaved call succeeds (within a deadline of 30 s: how fast is load's business, and
//! `benches/isolation.rs` measures it with a 2 s deadline), the daemon's RSS stays within its
//! configured memory bound (plus what HTTP/2 windows and the conversion thread hold, see
//! docs/install.md), and its fds come back once the abusers leave. The latency figures are printed;
//! `benches/isolation.rs` measures them on the release binary.

#[path = "support/abuse.rs"]
mod abuse;
mod common;

use abuse::{call, connect, Daemon, Seen, Sizes};
use common::TempDir;
use cri_bridge::api::v1;
use prost::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");
/// The bound the daemon is given (`limits.buffer_mib`), and per connection.
const BUFFER_MIB: u64 = 64;
const LIMITS: &str =
    "limits:\n  buffer_mib: 64\n  buffer_per_connection_mib: 32\n  request_timeout_seconds: 10\n  stalled_caller_seconds: 20\n  conversion_threads: 1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_every_abuse_at_once_well_behaved_calls_succeed_and_memory_stays_bounded() {
    let dir = TempDir::new("isolation");
    let daemon = Daemon::start(BIN.as_ref(), dir.path("daemon"), LIMITS).await;
    abuse::populate(&daemon.socket, 1_000).await;
    // Settle: the populating connection is gone, the steady state is what the baseline sees.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (fds, rss) = (daemon.fds(), daemon.rss_kib());
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    // A deadline in tens of seconds: a late call is load, which this test does not judge
    // (benches/isolation.rs gives the latencies); a call that fails, or never comes, is not.
    let good = abuse::well_behaved(daemon.socket.clone(), stop.clone(), seen.clone(), Duration::from_secs(30));
    // Smaller than the benchmark's (a debug build on 2 shared cores): the abuses' own work in
    // the runtime (lists built, requests decoded) is not what this shows.
    let sizes = Sizes {
        containers: 1_000,
        slow_connections: 4,
        slow_streams: 8,
        watchers: 16,
        header_connections: 50,
        request_connections: 2,
        request_streams: 40,
        conversions: 2,
        envs: 100_000,
        floods: 4,
        queue_fillers: 2,
    };
    let abusers = abuse::abuse(&daemon.socket, sizes).await;
    let mut peak = rss;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        peak = peak.max(daemon.rss_kib());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in good {
        task.await.unwrap();
    }
    abusers.stop();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!(
        "isolation: {} well-behaved calls, {} failed; p50 {:?}, p99 {:?}, max {:?}; RSS {rss} KiB -> peak {peak} KiB (+{} MiB)",
        seen.latencies.len(),
        seen.failures.len(),
        seen.percentile(0.5),
        seen.percentile(0.99),
        seen.percentile(1.0),
        (peak - rss) >> 10
    );
    assert!(seen.failures.is_empty(), "well-behaved calls failed: {:?}", seen.failures);
    assert!(seen.latencies.len() > 100, "the well-behaved clients were served throughout");
    // The stated ceiling (docs/install.md), counting the connections open: the abuse's, the
    // well-behaved clients' (one kept, one per call) and the populating one's.
    let mut limits = cri_bridge::config::Limits::default();
    (limits.buffer_bytes, limits.buffer_per_connection_bytes) = ((BUFFER_MIB as usize) << 20, 32 << 20);
    limits.conversion_threads = 1;
    let ceiling = sizes.ceiling_kib(limits, 3);
    assert!(peak < ceiling, "RSS peaked at {peak} KiB, above the stated ceiling of {ceiling} KiB");
    assert!(daemon.fds_back_to(fds, Duration::from_secs(30)).await, "fds {} -> {}", fds, daemon.fds());
}

/// A ListContainers answer of 1,000 containers, of which the caller reads nothing for longer
/// than `limits.stalled_caller_seconds`.
#[tokio::test]
async fn a_caller_that_takes_none_of_an_answer_is_let_go_with_a_status_naming_the_key() {
    let dir = TempDir::new("stalled");
    let config = "limits:\n  stalled_caller_seconds: 1\n";
    let daemon = Daemon::start(BIN.as_ref(), dir.path("daemon"), config).await;
    abuse::populate(&daemon.socket, 1_000).await;
    let connection = connect(&daemon.socket).await;
    let mut send = connection.send.clone().ready().await.unwrap();
    let list = abuse::request("/runtime.v1.RuntimeService/ListContainers", None);
    let (response, mut stream) = send.send_request(list, false).unwrap();
    stream.send_data(abuse::framed(&v1::ListContainersRequest::default().encode_to_vec()), true).unwrap();
    let (_, mut body) = response.await.unwrap().into_parts();
    // Nothing is read (so no window is given back) for longer than the stall timeout.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    while let Some(chunk) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.unwrap().len());
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    assert_eq!(trailers.get("grpc-status").unwrap(), "8", "RESOURCE_EXHAUSTED: {trailers:?}");
    let message = trailers.get("grpc-message").unwrap().to_str().unwrap();
    assert!(message.contains("limits.stalled_caller_seconds"), "{message}");
    // The connection serves on.
    let version = v1::VersionRequest::default().encode_to_vec();
    assert_eq!(call(&connection, abuse::VERSION, &version, "2S").await, Ok("0".to_string()));
}

#[tokio::test]
async fn a_header_block_that_finds_no_room_ends_its_own_connection_only() {
    // A bound of 1 MiB in all: one unfinished block of 600 KiB fits (64 KiB of it the
    // connection's own), a second connection's does not.
    let dir = TempDir::new("no-room");
    let config = "max_message_size: 4096\nlimits:\n  buffer_mib: 1\n  buffer_per_connection_mib: 1\n";
    let daemon = Daemon::start(BIN.as_ref(), dir.path("daemon"), config).await;
    let first = unfinished_block(&daemon.socket, 600 << 10).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut second = unfinished_block(&daemon.socket, 600 << 10).await;
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(2), async {
        use tokio::io::AsyncReadExt;
        // The server's own SETTINGS may come first; then the end.
        while second.read(&mut byte).await.unwrap_or(0) > 0 {}
    })
    .await;
    assert!(closed.is_ok(), "the connection whose block found no room is closed");
    let version = v1::VersionRequest::default().encode_to_vec();
    let good = connect(&daemon.socket).await;
    assert_eq!(call(&good, abuse::VERSION, &version, "2S").await, Ok("0".to_string()), "others are served");
    assert!(daemon.log().contains("found no room"), "{}", daemon.log());
    drop(first);
}

/// A connection that sends the preface, SETTINGS, and a header block of `size` bytes without
/// its end.
async fn unfinished_block(socket: &std::path::Path, size: usize) -> tokio::net::UnixStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let frame = |kind: u8, payload: &[u8]| {
        let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        frame.extend([kind, 0, 0, 0, 0, 1]);
        frame.extend_from_slice(payload);
        frame
    };
    let filler = vec![0x82u8; 16 << 10];
    bytes.extend(frame(0x1, &filler));
    for _ in 1..size / filler.len() {
        bytes.extend(frame(0x9, &filler));
    }
    let _ = stream.write_all(&bytes).await;
    stream
}

/// The conversion queue (issue 36): clients send v1 `CreateContainer` requests of 14 MB of empty
/// `envs` to a v1alpha2 runtime, with a deadline of 1.5 s, over and over. Each such request
/// decodes to about 25 times its size, and before the fix its job stayed queued, holding the
/// message, after its call had ended: RSS grew by gigabytes and another client's conversion
/// waited a minute. Now a job leaves the queue with its call, holds its charge until it has run,
/// lanes are served in turn, and a message whose decoding would take more than a connection may
/// hold is refused (RESOURCE_EXHAUSTED naming `limits.buffer_per_connection_mib`). What must
/// hold: every abusive call ends RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED; a well-behaved
/// client's translated 40 KiB requests, made meanwhile, all reach the runtime; RSS stays within
/// the bound, the conversion threads' working memory and the windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_conversions_hold_no_memory_outside_the_bound_and_leave_with_their_calls() {
    use prost::encoding::{encode_key, encode_varint, WireType};
    let dir = TempDir::new("isolation-queue");
    let daemon = Daemon::start(BIN.as_ref(), dir.path("daemon"), LIMITS).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss = daemon.rss_kib();
    // 7 million empty `envs`, written as bytes (decoded here they would take 300 MB).
    let schema = cri_bridge::CriVersion::V1.schema();
    let envs = schema.field_by_name("ContainerConfig.envs").unwrap().1.number;
    let mut config = Vec::with_capacity(14 << 20);
    for _ in 0..7_000_000 {
        encode_key(envs, WireType::LengthDelimited, &mut config);
        config.push(0);
    }
    let mut huge = Vec::with_capacity(config.len() + 16);
    encode_key(2, WireType::LengthDelimited, &mut huge);
    encode_varint(config.len() as u64, &mut huge);
    huge.extend_from_slice(&config);
    drop(config);
    let huge = Arc::new(huge);
    let stop = Arc::new(AtomicBool::new(false));
    let codes = Arc::new(Mutex::new(Vec::new()));
    let mut abusers = Vec::new();
    for _ in 0..3 {
        let (socket, huge, stop, codes) = (daemon.socket.clone(), huge.clone(), stop.clone(), codes.clone());
        abusers.push(tokio::spawn(async move {
            let connection = connect(&socket).await;
            while !stop.load(Ordering::SeqCst) {
                let code = call(&connection, "/runtime.v1.RuntimeService/CreateContainer", &huge, "1500m").await;
                codes.lock().unwrap().push(code);
            }
        }));
    }
    // The well-behaved client: translated requests of 40 KiB (over the size that goes off the
    // one thread), each to a sandbox the runtime does not have: NOT_FOUND is the runtime's answer.
    let modest = v1::CreateContainerRequest {
        pod_sandbox_id: "no-such-pod".into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "c".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            envs: (0..2_000)
                .map(|n| v1::KeyValue { key: format!("KEY_{n:05}"), value: b"vvvvvvvv".to_vec() })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    assert!(modest.len() > 32 << 10, "{}", modest.len());
    let good = connect(&daemon.socket).await;
    let (mut answers, mut slowest, mut peak) = (Vec::new(), Duration::ZERO, rss);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        let begun = Instant::now();
        answers.push(call(&good, "/runtime.v1.RuntimeService/CreateContainer", &modest, "60S").await);
        slowest = slowest.max(begun.elapsed());
        peak = peak.max(daemon.rss_kib());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in abusers {
        task.await.unwrap();
    }
    let codes = std::mem::take(&mut *codes.lock().unwrap());
    eprintln!(
        "conversion queue: {} well-behaved translated calls, slowest {slowest:?}; {} abusive calls; RSS {rss} KiB -> peak {peak} KiB (+{} MiB)",
        answers.len(),
        codes.len(),
        (peak - rss) >> 10
    );
    // NOT_FOUND (5): the runtime's own answer, so the call reached it.
    assert!(answers.iter().all(|a| a.as_deref() == Ok("5")), "well-behaved calls: {answers:?}");
    assert!(!codes.is_empty());
    // RESOURCE_EXHAUSTED (8), or DEADLINE_EXCEEDED (4) for a call whose deadline passed first.
    assert!(codes.iter().all(|c| matches!(c.as_deref(), Ok("8") | Ok("4"))), "abusive calls: {codes:?}");
    assert!(codes.iter().any(|c| c.as_deref() == Ok("8")), "refused for what decoding would take: {codes:?}");
    // The bound (64 MiB), one conversion's working memory at most (32 MiB, one thread), the
    // windows and the test's 14 MB messages in flight on three connections.
    let allowed = (BUFFER_MIB + 32 + 64) << 10;
    assert!(peak - rss < allowed, "RSS grew by {} KiB, more than {allowed} KiB", peak - rss);
}
