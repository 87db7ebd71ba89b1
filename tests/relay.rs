//! The hot path as an HTTP/2 relay: what a caller and a runtime see of flow control, resets in
//! both directions, deadlines against a runtime that never answers, many calls multiplexed on one
//! connection, and the message-size limit. The clients here are bare `h2` clients (so windows,
//! resets and deadlines are the test's to set); the misbehaving runtime is a bare `h2` server.

mod common;
#[path = "support/h2_client.rs"]
mod h2_client;

use bytes::Bytes;
use common::{config, Bridge, Runtime, TempDir};
use cri_bridge::api::v1;
use cri_bridge::CriVersion::{V1alpha2, V1};
use h2::Reason;
use h2_client::{framed, only_message, Client};
use prost::Message;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIST_V1: &str = "/runtime.v1.RuntimeService/ListContainers";
const VERSION_V1: &str = "/runtime.v1.RuntimeService/Version";
const EVENTS_V1: &str = "/runtime.v1.RuntimeService/GetContainerEvents";

#[tokio::test]
async fn an_answer_larger_than_every_window_reaches_a_slow_reader_byte_for_byte() {
    let dir = TempDir::new("window");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    common::fill(&runtime, 8_000).await;
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let direct = Client::connect(&dir.path("runtime.sock"), 1 << 20).await;
    let expected = direct.call(LIST_V1, &[], None, Duration::ZERO).await.unwrap();
    assert!(expected.body.len() > 1 << 20, "four times the bridge's 256 KiB stream window: {}", expected.body.len());
    // 16 KiB windows, and a pause after each frame: the bridge must wait for the caller's window
    // rather than fail, and pass every byte as the runtime sent it.
    let slow = Client::connect(&bridge.socket, 16 << 10).await;
    let answered = slow.call(LIST_V1, &[], None, Duration::from_micros(200)).await.unwrap();
    assert_eq!(answered.code, "0", "{answered:?}");
    assert!(answered.body == expected.body, "the passthrough answer differs from the runtime's");
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_translated_list_beyond_every_window_arrives_whole() {
    let dir = TempDir::new("window-old");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1alpha2]).await;
    common::fill(&runtime, 8_000).await;
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let slow = Client::connect(&bridge.socket, 16 << 10).await;
    let answered = slow.call(LIST_V1, &[], None, Duration::from_micros(100)).await.unwrap();
    assert_eq!(answered.code, "0", "{answered:?}");
    let list = v1::ListContainersResponse::decode(only_message(&answered.body)).unwrap();
    assert_eq!(list.containers.len(), 8_000);
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn sixty_four_calls_in_flight_on_one_connection_are_each_answered_once() {
    for backend in [V1, V1alpha2] {
        let dir = TempDir::new("many");
        let runtime = Runtime::start(&dir.path("runtime.sock"), &[backend]).await;
        let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
        let client = Client::connect(&bridge.socket, 1 << 20).await;
        let before = runtime.memory.calls_of("ListPodSandbox");
        let calls = (0..64).map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client.call("/runtime.v1.RuntimeService/ListPodSandbox", &[], Some("10S"), Duration::ZERO).await
            })
        });
        for call in futures_util::future::join_all(calls).await {
            let answered = call.unwrap().unwrap();
            assert_eq!(answered.code, "0", "{backend}: {answered:?}");
            v1::ListPodSandboxResponse::decode(only_message(&answered.body)).unwrap();
        }
        assert_eq!(
            runtime.memory.calls_of("ListPodSandbox") - before,
            64,
            "{backend}: each call reached the runtime once"
        );
        bridge.stop().await;
        runtime.stop().await;
    }
}

#[tokio::test]
async fn a_request_over_max_message_size_is_resource_exhausted_and_the_connection_serves_on() {
    let dir = TempDir::new("big-request");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut small = config(&dir, &dir.path("runtime.sock"), None);
    small.max_message_size = 8192;
    let bridge = Bridge::start(small).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let small_request = v1::VersionRequest::default().encode_to_vec();
    assert_eq!(client.call(VERSION_V1, &small_request, None, Duration::ZERO).await.unwrap().code, "0");
    let probes = runtime.memory.calls_of("Version");
    let big = v1::VersionRequest { version: "x".repeat(10_000) }.encode_to_vec();
    let refused = client.call(VERSION_V1, &big, None, Duration::ZERO).await.unwrap();
    assert_eq!(refused.code, "8", "RESOURCE_EXHAUSTED: {refused:?}");
    assert!(refused.message.contains("max_message_size") && refused.message.contains("Version"), "{refused:?}");
    let fine = client.call(VERSION_V1, &small_request, None, Duration::ZERO).await;
    assert_eq!(fine.unwrap().code, "0");
    assert_eq!(runtime.memory.calls_of("Version"), probes + 1, "only the call within the limit reached the runtime");
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_request_body_that_is_not_one_whole_message_is_refused_unsent() {
    let dir = TempDir::new("bodies");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let version = v1::VersionRequest::default().encode_to_vec();
    assert_eq!(client.call(VERSION_V1, &version, None, Duration::ZERO).await.unwrap().code, "0");
    let probes = runtime.memory.calls_of("Version");
    let two = [framed(&version), framed(&version)].concat();
    // A flood of messages is refused at the second prefix, not gathered.
    let flood: Vec<u8> = std::iter::repeat_n(framed(&version), 100_000).flatten().collect();
    let mut compressed = framed(&version).to_vec();
    compressed[0] = 1;
    let cases: [(&str, Bytes, &str, &str); 5] = [
        ("empty", Bytes::new(), "13", "holds no message"),
        ("two messages", two.into(), "13", "more than one message"),
        ("a flood", flood.into(), "13", "more than one message"),
        ("cut short", framed(&version).slice(..3), "13", "ended inside a message"),
        ("compressed", compressed.into(), "12", "compressed"),
    ];
    for (case, body, code, says) in cases {
        let answered = client.call_raw(VERSION_V1, body, None, Duration::ZERO).await.unwrap();
        assert_eq!(answered.code, code, "{case}: {answered:?}");
        assert!(answered.message.contains(says) && answered.message.contains("Version"), "{case}: {answered:?}");
    }
    assert_eq!(runtime.memory.calls_of("Version"), probes, "none reached the runtime");
    assert_eq!(
        client.call(VERSION_V1, &version, None, Duration::ZERO).await.unwrap().code,
        "0",
        "the connection serves on"
    );
    bridge.stop().await;
    runtime.stop().await;
}

/// What the misbehaving runtime does with calls other than the probes.
#[derive(Clone, Copy)]
enum Misbehaviour {
    /// Resets the stream with this reason.
    Reset(Reason),
    /// Never answers; counts the streams the bridge then resets. A GetContainerEvents call is
    /// answered its head and one event first, then held the same way (a stream mid-answer).
    Hang,
    /// Answers `UNAVAILABLE` (a runtime shutting down).
    Unavailable,
    /// Answers a head and an empty message, then ends the stream without trailers.
    NoTrailers,
}

/// A bare HTTP/2 runtime: answers the probes (Version, Status) as a v1 runtime, and every other
/// call with its misbehaviour.
struct Misbehaving {
    /// Calls that were neither probes nor answered.
    received: Arc<AtomicUsize>,
    /// Of those, the ones the bridge reset (cancelled).
    cancelled: Arc<AtomicUsize>,
    /// Version calls: cri-bridge's probes.
    probes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Misbehaving {
    fn start(socket: &Path, misbehaviour: Misbehaviour) -> Misbehaving {
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let (received, cancelled, probes) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let counters = (received.clone(), cancelled.clone(), probes.clone());
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let counters = counters.clone();
                tokio::spawn(async move {
                    let mut connection = h2::server::handshake(stream).await.unwrap();
                    while let Some(Ok((request, respond))) = connection.accept().await {
                        tokio::spawn(Self::answer(request, respond, misbehaviour, counters.clone()));
                    }
                });
            }
        });
        Misbehaving { received, cancelled, probes, task }
    }

    async fn answer(
        request: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Bytes>,
        misbehaviour: Misbehaviour,
        (received, cancelled, probes): (Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<AtomicUsize>),
    ) {
        let path = request.uri().path().to_string();
        let mut body = request.into_body();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let message = if path.ends_with("/Version") {
            probes.fetch_add(1, Ordering::SeqCst);
            let answer = v1::VersionResponse {
                version: "0.1.0".into(),
                runtime_name: cri_bridge::memory::RUNTIME_NAME.into(),
                runtime_version: "0.1.0".into(),
                runtime_api_version: "v1".into(),
            };
            Some(answer.encode_to_vec())
        } else if path.ends_with("/Status") {
            Some(v1::StatusResponse::default().encode_to_vec())
        } else {
            None
        };
        if let Some(message) = message {
            let head = http::Response::builder().header("content-type", "application/grpc").body(()).unwrap();
            let mut stream = respond.send_response(head, false).unwrap();
            stream.send_data(framed(&message), false).unwrap();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            stream.send_trailers(trailers).unwrap();
            return;
        }
        received.fetch_add(1, Ordering::SeqCst);
        match misbehaviour {
            Misbehaviour::Reset(reason) => respond.send_reset(reason),
            Misbehaviour::Hang => {
                let reset = if path.ends_with("/GetContainerEvents") {
                    let head = http::Response::builder().header("content-type", "application/grpc").body(()).unwrap();
                    let mut stream = respond.send_response(head, false).unwrap();
                    let event = v1::ContainerEventResponse { container_id: "held".into(), ..Default::default() };
                    stream.send_data(framed(&event.encode_to_vec()), false).unwrap();
                    std::future::poll_fn(|cx| stream.poll_reset(cx)).await
                } else {
                    std::future::poll_fn(|cx| respond.poll_reset(cx)).await
                };
                if reset.is_ok() {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                }
            }
            Misbehaviour::Unavailable => {
                let head = http::Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "14")
                    .header("grpc-message", "shutting down")
                    .body(())
                    .unwrap();
                respond.send_response(head, true).unwrap();
            }
            Misbehaviour::NoTrailers => {
                let head = http::Response::builder().header("content-type", "application/grpc").body(()).unwrap();
                let mut stream = respond.send_response(head, false).unwrap();
                stream.send_data(framed(&[]), true).unwrap();
            }
        }
    }
}

impl Drop for Misbehaving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    eventually_within(what, Duration::from_secs(30), check).await
}

#[tokio::test]
async fn the_runtimes_reset_of_a_stream_reaches_the_caller_with_its_reason() {
    let dir = TempDir::new("reset");
    let runtime = Misbehaving::start(&dir.path("runtime.sock"), Misbehaviour::Reset(Reason::ENHANCE_YOUR_CALM));
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let error = client.call(LIST_V1, &[], None, Duration::ZERO).await.expect_err("the runtime reset the stream");
    assert_eq!(error.reason(), Some(Reason::ENHANCE_YOUR_CALM), "{error:?}");
    assert_eq!(runtime.received.load(Ordering::SeqCst), 1, "sent once, not retried");
    // The connection serves on.
    let version = client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap();
    assert_eq!(version.code, "0");
    bridge.stop().await;
}

#[tokio::test]
async fn a_runtime_that_never_answers_ends_the_call_at_its_deadline_and_has_its_stream_cancelled() {
    let dir = TempDir::new("hang");
    let runtime = Misbehaving::start(&dir.path("runtime.sock"), Misbehaviour::Hang);
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let started = Instant::now();
    let hung = {
        let client = client.clone();
        tokio::spawn(async move { client.call(LIST_V1, &[], Some("500m"), Duration::ZERO).await })
    };
    eventually("the runtime received the call", || runtime.received.load(Ordering::SeqCst) == 1).await;
    // Other calls are served while that one hangs.
    assert_eq!(client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap().code, "0");
    let answered = hung.await.unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!(answered.code, "4", "DEADLINE_EXCEEDED: {answered:?}");
    // Not before its deadline (never shortened); after it, only as late as load makes it.
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(30), "ended at its deadline: {took:?}");
    eventually("the runtime's stream was cancelled", || runtime.cancelled.load(Ordering::SeqCst) == 1).await;
    bridge.stop().await;
}

#[tokio::test]
async fn a_caller_that_resets_its_stream_has_the_runtimes_stream_cancelled() {
    let dir = TempDir::new("caller-reset");
    let runtime = Misbehaving::start(&dir.path("runtime.sock"), Misbehaviour::Hang);
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let response = client.open(LIST_V1, &[], None).await;
    eventually("the runtime received the call", || runtime.received.load(Ordering::SeqCst) == 1).await;
    drop(response); // h2 resets a stream whose every handle is dropped
    eventually("the runtime's stream was cancelled", || runtime.cancelled.load(Ordering::SeqCst) == 1).await;
    assert_eq!(client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap().code, "0");
    bridge.stop().await;
}

#[tokio::test]
async fn an_unavailable_answer_makes_the_next_call_probe_the_runtime_again() {
    let dir = TempDir::new("unavailable");
    let runtime = Misbehaving::start(&dir.path("runtime.sock"), Misbehaviour::Unavailable);
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let answered = client.call(LIST_V1, &[], None, Duration::ZERO).await.unwrap();
    assert_eq!((answered.code.as_str(), answered.message.as_str()), ("14", "shutting down"), "passed on as it came");
    let probes = runtime.probes.load(Ordering::SeqCst);
    let again = client.call(LIST_V1, &[], None, Duration::ZERO).await.unwrap();
    assert_eq!(again.code, "14");
    assert!(runtime.probes.load(Ordering::SeqCst) > probes, "the runtime going away made cri-bridge probe it again");
    bridge.stop().await;
}

#[tokio::test]
async fn an_answer_the_runtime_ends_without_trailers_ends_the_callers_stream_too() {
    let dir = TempDir::new("no-trailers");
    let _runtime = Misbehaving::start(&dir.path("runtime.sock"), Misbehaviour::NoTrailers);
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let answered = tokio::time::timeout(Duration::from_secs(5), client.call(LIST_V1, &[], None, Duration::ZERO))
        .await
        .expect("the stream ends, as the runtime's did")
        .unwrap();
    assert_eq!((answered.body.as_slice(), answered.code.as_str()), (&framed(&[])[..], ""), "no status invented");
    bridge.stop().await;
}

#[tokio::test]
async fn a_request_split_over_many_data_frames_arrives_whole() {
    let dir = TempDir::new("split");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let version = v1::VersionRequest { version: "0.1.0-split".into() }.encode_to_vec();
    let frame = framed(&version);
    let mut request = http::Request::post(format!("http://localhost{VERSION_V1}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    request.headers_mut().insert("x-split", "yes".parse().unwrap());
    let mut send = client.0.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request, false).unwrap();
    // One DATA frame per byte: the prefix and the message in pieces.
    for i in 0..frame.len() {
        stream.send_data(frame.slice(i..i + 1), i + 1 == frame.len()).unwrap();
    }
    let (head, mut body) = response.await.unwrap().into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        data.extend_from_slice(&chunk.unwrap());
    }
    let trailers = body.trailers().await.unwrap().unwrap_or(head.headers);
    assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    v1::VersionResponse::decode(only_message(&data)).unwrap();
    let metadata = runtime.memory.take_metadata("Version").expect("the runtime saw the call");
    assert_eq!(metadata.get("x-split").map(|v| v.to_str().unwrap()), Some("yes"));
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn under_load_a_runtime_that_never_answers_ends_every_call_at_its_deadline_and_version_is_served() {
    let dir = TempDir::new("hang-load");
    let runtime = Misbehaving::start(&dir.path("runtime.sock"), Misbehaviour::Hang);
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    const CONNECTIONS: usize = 8;
    const PER_CONNECTION: usize = 8;
    let started = Instant::now();
    let mut hung = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let client = Client::connect(&bridge.socket, 1 << 20).await;
        for _ in 0..PER_CONNECTION {
            let client = client.clone();
            hung.push(tokio::spawn(async move {
                let answered = client.call(LIST_V1, &[], Some("500m"), Duration::ZERO).await;
                (answered, started.elapsed())
            }));
        }
        clients.push(client);
    }
    // Meanwhile the calls the runtime does answer keep being answered, on every connection.
    let mut served = 0;
    while started.elapsed() < Duration::from_millis(400) {
        for client in &clients {
            assert_eq!(client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap().code, "0");
            served += 1;
        }
    }
    let total = CONNECTIONS * PER_CONNECTION;
    for call in hung {
        let (answered, took) = call.await.unwrap();
        let answered = answered.expect("answered, not reset");
        assert_eq!(answered.code, "4", "DEADLINE_EXCEEDED: {answered:?}");
        assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(30), "{took:?}");
    }
    eventually("every runtime stream was cancelled", || runtime.cancelled.load(Ordering::SeqCst) == total).await;
    assert_eq!(runtime.received.load(Ordering::SeqCst), total, "each sent once");
    eprintln!("faults: a runtime that never answers: {total} calls DEADLINE_EXCEEDED at 500 ms, {served} Version calls served meanwhile");
    bridge.stop().await;
}

/// This process's open file descriptors (the in-process bridge's and the test's clients').
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_clients_that_vanish_mid_call_and_mid_stream_have_every_runtime_stream_cancelled() {
    let dir = TempDir::new("vanish-load");
    let runtime = Misbehaving::start(&dir.path("runtime.sock"), Misbehaviour::Hang);
    let bridge = Bridge::start(config(&dir, &dir.path("runtime.sock"), None)).await;
    // The well-behaved load: 4 connections calling Version with 2 s deadlines throughout.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let client = Client::connect(&bridge.socket, 1 << 20).await;
        // One call before the baseline: it makes the connection's own runtime connection.
        client.call(VERSION_V1, &[], Some("2S"), Duration::ZERO).await.expect("answered");
        let stop = stop.clone();
        load.push(tokio::spawn(async move {
            let (mut calls, mut slowest) = (0usize, Duration::ZERO);
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let answered = client.call(VERSION_V1, &[], Some("2S"), Duration::ZERO).await.expect("answered");
                assert_eq!(answered.code, "0", "{answered:?}");
                (calls, slowest) = (calls + 1, slowest.max(started.elapsed()));
            }
            (calls, slowest)
        }));
    }
    let baseline = open_fds();
    // The vanishing clients: each round opens two unary calls the runtime holds and one event
    // stream it has begun to answer, then either vanishes whole (its socket dropped) or resets
    // its streams and leaves.
    const TASKS: usize = 8;
    const ROUNDS: usize = 50;
    let mut vanishers = Vec::new();
    for task in 0..TASKS {
        let socket = bridge.socket.clone();
        vanishers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let (client, connection) = Client::connect_vanishing(&socket).await;
                let held = [client.open(LIST_V1, &[], None).await, client.open(LIST_V1, &[], None).await];
                let (_head, mut events) = client.open(EVENTS_V1, &[], None).await.await.unwrap().into_parts();
                let first = events.data().await.expect("the first event").unwrap();
                v1::ContainerEventResponse::decode(only_message(&first)).unwrap();
                if (task + round) % 2 == 0 {
                    connection.abort();
                    let _ = connection.await;
                    drop((held, events, client));
                } else {
                    drop((held, events));
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    drop(client);
                    connection.abort();
                }
            }
        }));
    }
    for vanisher in vanishers {
        vanisher.await.unwrap();
    }
    let streams = TASKS * ROUNDS;
    eventually_within(
        "every runtime stream the vanished callers opened was cancelled",
        Duration::from_secs(30),
        || {
            let received = runtime.received.load(Ordering::SeqCst);
            received >= streams && runtime.cancelled.load(Ordering::SeqCst) == received
        },
    )
    .await;
    eventually_within("the fds are back to their baseline", Duration::from_secs(30), || open_fds() <= baseline).await;
    stop.store(true, Ordering::SeqCst);
    let (mut calls, mut slowest) = (0, Duration::ZERO);
    for client in load {
        let (n, s) = client.await.unwrap();
        (calls, slowest) = (calls + n, slowest.max(s));
    }
    let received = runtime.received.load(Ordering::SeqCst);
    eprintln!(
        "faults: {} vanishing connections opened {received} runtime streams ({streams} mid-answer), all {} cancelled; \
         fds {baseline} -> {}; the load made {calls} Version calls, all OK, slowest {slowest:?}",
        TASKS * ROUNDS,
        runtime.cancelled.load(Ordering::SeqCst),
        open_fds()
    );
    // Every call OK (each load call fails the test otherwise); the slowest is a figure.
    assert!(calls > 0, "{calls} calls, slowest {slowest:?}");
    bridge.stop().await;
}

async fn eventually_within(what: &str, limit: Duration, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
