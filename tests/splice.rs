//! The splice (`relay::splice`, `splice: true`): calls in the runtime's version relayed frame by
//! frame, every other call on the same connection served by the terminating path, over real
//! unix sockets with the in-memory runtime. The clients are bare `h2` clients, whose encoder
//! indexes every header it can: the runtime's table and the splice's copy of it must stay in
//! step through relayed, intercepted and refused calls.
//!
//! A relayed call is told apart by what reaches the runtime: the client's header block as it
//! came, with `grpc-accept-encoding`, which the terminating path never forwards.

mod common;
#[path = "support/h2_client.rs"]
mod h2_client;
#[path = "support/h2_frames.rs"]
mod h2_frames;

use common::{config, Bridge, Runtime, TempDir};
use cri_bridge::api::{v1, v1alpha2};
use cri_bridge::CriVersion::V1;
use h2_client::{framed, only_message, Client};
use prost::Message;
use std::time::Duration;

const VERSION_V1: &str = "/runtime.v1.RuntimeService/Version";
const VERSION_V1ALPHA2: &str = "/runtime.v1alpha2.RuntimeService/Version";
const LIST_V1: &str = "/runtime.v1.RuntimeService/ListContainers";
const LIST_V1ALPHA2: &str = "/runtime.v1alpha2.RuntimeService/ListContainers";
const STOP_V1: &str = "/runtime.v1.RuntimeService/StopContainer";
const EVENTS_V1: &str = "/runtime.v1.RuntimeService/GetContainerEvents";
/// Passed by the splice, dropped by the terminating path.
const MARK: (&str, &str) = ("grpc-accept-encoding", "identity");

async fn spliced_pair(name: &str, revision: Option<u8>) -> (TempDir, Runtime, Bridge) {
    let dir = TempDir::new(name);
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = config(&dir, &dir.path("runtime.sock"), None);
    config.splice = true;
    config.backend_revision = revision;
    let bridge = Bridge::start(config).await;
    (dir, runtime, bridge)
}

#[tokio::test]
async fn the_runtimes_version_is_relayed_as_it_came_and_the_rest_served_on_the_same_connection() {
    let (_dir, runtime, bridge) = spliced_pair("splice-mixed", None).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let request = framed(&v1::VersionRequest { version: "0.1.0".into() }.encode_to_vec());
    for round in 0..3 {
        let value = format!("round-{round}");
        let metadata = [MARK, ("x-round", value.as_str())];
        let open = client.open_with(VERSION_V1, request.clone(), Some("5S"), &metadata).await;
        let relayed = client.answer(open, Duration::ZERO).await.unwrap();
        assert_eq!(relayed.code, "0", "{relayed:?}");
        let version = v1::VersionResponse::decode(only_message(&relayed.body)).unwrap();
        assert_eq!(version.runtime_api_version, "v1");
        let seen = runtime.memory.take_metadata("Version").unwrap();
        assert_eq!(seen.get(MARK.0).unwrap(), MARK.1, "round {round}: the block as it came");
        assert_eq!(seen.get("x-round").unwrap(), value.as_str(), "round {round}");

        let open = client.open_with(VERSION_V1ALPHA2, request.clone(), Some("5S"), &metadata).await;
        let served = client.answer(open, Duration::ZERO).await.unwrap();
        assert_eq!(served.code, "0", "{served:?}");
        let version = v1alpha2::VersionResponse::decode(only_message(&served.body)).unwrap();
        assert_eq!(version.runtime_api_version, "v1alpha2", "translated by the terminating path");
        let seen = runtime.memory.take_metadata("Version").unwrap();
        assert!(seen.get(MARK.0).is_none(), "round {round}: not spliced");
        assert_eq!(seen.get("x-round").unwrap(), value.as_str(), "round {round}: its metadata passed on");

        let own = client.call(cri_bridge::control::STATUS_PATH, &[], None, Duration::ZERO).await.unwrap();
        assert_eq!(own.code, "0", "cri-bridge's own question, answered on the spliced connection: {own:?}");
        serde_json::from_slice::<serde_json::Value>(only_message(&own.body)).expect("a JSON status");
    }
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn calls_of_both_kinds_interleaved_on_one_connection_each_get_their_own_answer() {
    let (_dir, runtime, bridge) = spliced_pair("splice-interleaved", None).await;
    common::fill(&runtime, 40).await;
    let direct = Client::connect(&runtime_socket(&bridge), 1 << 20).await;
    let all = direct.call(LIST_V1, &[], None, Duration::ZERO).await.unwrap();
    let ids: Vec<String> = v1::ListContainersResponse::decode(only_message(&all.body))
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.id)
        .collect();
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let mut calls = Vec::new();
    for (i, id) in ids.iter().cycle().take(128).enumerate() {
        let client = client.clone();
        let id = id.clone();
        calls.push(tokio::spawn(async move {
            // A header of its own for each call: the client's table churns (entries added and
            // evicted) across relayed and intercepted calls alike.
            let value = format!("{i}-{}", "x".repeat(i * 7 % 300));
            let metadata = [MARK, ("x-call", value.as_str())];
            let (path, request) = if i % 2 == 0 {
                let filter = v1::ContainerFilter { id: id.clone(), ..Default::default() };
                (LIST_V1, v1::ListContainersRequest { filter: Some(filter) }.encode_to_vec())
            } else {
                let filter = v1alpha2::ContainerFilter { id: id.clone(), ..Default::default() };
                (LIST_V1ALPHA2, v1alpha2::ListContainersRequest { filter: Some(filter) }.encode_to_vec())
            };
            let answered =
                client.answer(client.open_with(path, framed(&request), None, &metadata).await, Duration::ZERO);
            let answered = answered.await.unwrap();
            assert_eq!(answered.code, "0", "call {i}: {answered:?}");
            let found: Vec<String> = if i % 2 == 0 {
                v1::ListContainersResponse::decode(only_message(&answered.body))
                    .unwrap()
                    .containers
                    .into_iter()
                    .map(|c| c.id)
                    .collect()
            } else {
                v1alpha2::ListContainersResponse::decode(only_message(&answered.body))
                    .unwrap()
                    .containers
                    .into_iter()
                    .map(|c| c.id)
                    .collect()
            };
            assert_eq!(found, vec![id], "call {i} got its own answer");
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_refused_call_leaves_the_connection_and_both_tables_in_step() {
    // A runtime of revision 1.37 gets no field cri-bridge's schema does not know.
    let (_dir, runtime, bridge) = spliced_pair("splice-refused", Some(37)).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    let mut unknown = v1::StopContainerRequest { container_id: "c".into(), timeout: 1 }.encode_to_vec();
    prost::encoding::encode_varint(9 << 3, &mut unknown);
    prost::encoding::encode_varint(1, &mut unknown);
    let known = v1::StopContainerRequest { container_id: "c".into(), timeout: 1 }.encode_to_vec();
    for round in 0..4 {
        // A header first seen on the refused call, indexed by the client then: the runtime's
        // table must have taken it, for the next call refers to it.
        let value = format!("refused-{round}-{}", "v".repeat(200));
        let metadata = [MARK, ("x-trace", value.as_str())];
        let refused = client.answer(client.open_with(STOP_V1, framed(&unknown), None, &metadata).await, Duration::ZERO);
        let refused = refused.await.unwrap();
        assert_eq!(refused.code, "9", "FAILED_PRECONDITION: {refused:?}");
        assert_eq!(runtime.memory.calls_of("StopContainer"), round, "the refused call did not run");
        let passed = client.answer(client.open_with(STOP_V1, framed(&known), None, &metadata).await, Duration::ZERO);
        let passed = passed.await.unwrap();
        assert_ne!(passed.code, "9", "{passed:?}");
        assert_eq!(runtime.memory.calls_of("StopContainer"), round + 1);
        let seen = runtime.memory.take_metadata("StopContainer").unwrap();
        assert_eq!(seen.get("x-trace").unwrap(), value.as_str(), "round {round}: the runtime decoded the same header");
        assert_eq!(seen.get(MARK.0).unwrap(), MARK.1, "round {round}: the call that passed was spliced");
    }
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn an_answer_of_cri_bridges_own_larger_than_the_clients_window_shares_it_with_the_runtimes() {
    let (_dir, runtime, bridge) = spliced_pair("splice-windows", None).await;
    common::fill(&runtime, 2_000).await;
    // 64 KiB windows, read slowly: the translated answer (written by cri-bridge) and the relayed
    // one (written by the runtime) take turns in the same connection window.
    let client = Client::connect(&bridge.socket, 64 << 10).await;
    let list = |path: &'static str| {
        let client = client.clone();
        tokio::spawn(async move {
            let open = client.open_with(path, framed(&[]), None, &[MARK]).await;
            client.answer(open, Duration::from_millis(1)).await.unwrap()
        })
    };
    let (relayed, translated) = (list(LIST_V1), list(LIST_V1ALPHA2));
    let (relayed, translated) = (relayed.await.unwrap(), translated.await.unwrap());
    assert_eq!((relayed.code.as_str(), translated.code.as_str()), ("0", "0"));
    assert!(translated.body.len() > 4 * (64 << 10), "an answer of {} bytes", translated.body.len());
    let relayed = v1::ListContainersResponse::decode(only_message(&relayed.body)).unwrap();
    let translated = v1alpha2::ListContainersResponse::decode(only_message(&translated.body)).unwrap();
    let ids = |ids: Vec<String>| -> std::collections::BTreeSet<String> { ids.into_iter().collect() };
    assert_eq!(relayed.containers.len(), 2_000);
    assert_eq!(
        ids(relayed.containers.into_iter().map(|c| c.id).collect()),
        ids(translated.containers.into_iter().map(|c| c.id).collect())
    );
    // And the connection serves on.
    let version = client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap();
    assert_eq!(version.code, "0");
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_relayed_caller_that_takes_none_of_its_answer_is_let_go_and_a_slow_reader_is_not() {
    let dir = TempDir::new("splice-stall");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    common::fill(&runtime, 1_000).await;
    let mut config = config(&dir, &dir.path("runtime.sock"), None);
    config.splice = true;
    config.limits.stalled_caller = Duration::from_secs(1);
    let bridge = Bridge::start(config).await;
    let client = Client::connect(&bridge.socket, 64 << 10).await;
    // Read slowly but steadily for longer than the stall timeout: each window given back
    // restarts its clock.
    let started = std::time::Instant::now();
    let slow = client.open_with(LIST_V1, framed(&[]), None, &[MARK]).await;
    let slow = client.answer(slow, Duration::from_millis(150)).await.unwrap();
    assert_eq!(slow.code, "0", "{}", slow.message);
    assert!(started.elapsed() > Duration::from_millis(1500), "read over {:?}", started.elapsed());
    assert_eq!(v1::ListContainersResponse::decode(only_message(&slow.body)).unwrap().containers.len(), 1_000);
    // Read nothing for longer than it: the call is ended, the client told why.
    let stalled = client.open_with(LIST_V1, framed(&[]), None, &[MARK]).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let stalled = client.answer(stalled, Duration::ZERO).await.unwrap();
    assert_eq!(stalled.code, "8", "RESOURCE_EXHAUSTED: {}", stalled.message);
    assert!(stalled.message.contains("limits.stalled_caller_seconds"), "{}", stalled.message);
    // The connection serves on, relayed and intercepted calls alike.
    for path in [VERSION_V1, VERSION_V1ALPHA2] {
        let version = client.call(path, &[], None, Duration::ZERO).await.unwrap();
        assert_eq!(version.code, "0", "{path}: {}", version.message);
    }
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_runtimes_goaway_refuses_only_the_relayed_calls_it_never_saw_and_the_connection_serves_on() {
    let dir = TempDir::new("splice-goaway");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let inject = goaway_injector(dir.path("between.sock"), dir.path("runtime.sock"));
    let mut config = config(&dir, &dir.path("between.sock"), None);
    config.splice = true;
    let bridge = Bridge::start(config).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    // Stream 1, relayed and answered; stream 3, a relayed event stream left open.
    let version = client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap();
    assert_eq!(version.code, "0", "{}", version.message);
    let events = client.open_with(EVENTS_V1, framed(&[]), None, &[MARK]).await;
    // Relayed: the runtime holds the watcher.
    for _ in 0..500 {
        if runtime.memory.event_watchers() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(runtime.memory.event_watchers(), 1, "the event stream reached the runtime");
    // The runtime says it saw stream 1 only: stream 3 is refused, which a client may send
    // again; had the GOAWAY been passed on, the client could open no stream more.
    inject.send(Some(1)).unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(5), async {
        let (_, mut body) = events.await?.into_parts();
        while body.data().await.transpose()?.is_some() {}
        body.trailers().await.map(|_| ())
    })
    .await
    .expect("stream 3 ended");
    let reason = refused.expect_err("stream 3 was refused").reason();
    assert_eq!(reason, Some(h2::Reason::REFUSED_STREAM));
    // Later calls on the same connection, relayable or not, take the terminating path.
    for path in [VERSION_V1, VERSION_V1ALPHA2, VERSION_V1] {
        let version = client.call(path, &[], None, Duration::ZERO).await.unwrap();
        assert_eq!(version.code, "0", "{path}: {}", version.message);
    }
    bridge.stop().await;
    runtime.stop().await;
}

/// Between cri-bridge and the runtime at `runtime`, listening at `listen`: bytes pass both ways
/// as they came, and once a value is sent, a GOAWAY naming it as the last stream is written to
/// cri-bridge between two of the runtime's frames on every connection open at that moment.
fn goaway_injector(listen: std::path::PathBuf, runtime: std::path::PathBuf) -> tokio::sync::watch::Sender<Option<u32>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::UnixListener::bind(&listen).unwrap();
    let (inject, injected) = tokio::sync::watch::channel(None::<u32>);
    tokio::spawn(async move {
        while let Ok((bridge, _)) = listener.accept().await {
            let upstream = tokio::net::UnixStream::connect(&runtime).await.unwrap();
            let mut injected = injected.clone();
            injected.borrow_and_update();
            tokio::spawn(async move {
                let (mut from_bridge, mut to_bridge) = bridge.into_split();
                let (mut from_runtime, mut to_runtime) = upstream.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut from_bridge, &mut to_runtime).await });
                let mut buffer = bytes::BytesMut::new();
                let mut done = false;
                loop {
                    tokio::select! {
                        read = from_runtime.read_buf(&mut buffer) => {
                            if !matches!(read, Ok(n) if n > 0) { break; }
                            let mut whole = 0;
                            while let Some(head) = buffer.get(whole..whole + 9) {
                                let length = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
                                if buffer.len() < whole + 9 + length { break; }
                                whole += 9 + length;
                            }
                            let frames = buffer.split_to(whole);
                            if to_bridge.write_all(&frames).await.is_err() { break; }
                        }
                        changed = injected.changed(), if !done => {
                            done = true;
                            let Some(last) = changed.ok().and(*injected.borrow()) else { continue };
                            let mut goaway = vec![0, 0, 8, 0x7, 0, 0, 0, 0, 0];
                            goaway.extend_from_slice(&last.to_be_bytes());
                            goaway.extend_from_slice(&0u32.to_be_bytes());
                            if to_bridge.write_all(&goaway).await.is_err() { break; }
                        }
                    }
                }
            });
        }
    });
    inject
}

fn runtime_socket(bridge: &Bridge) -> std::path::PathBuf {
    bridge.socket.with_file_name("runtime.sock")
}

/// One step of the model-based test below.
#[derive(Debug, Clone)]
enum Step {
    /// A v1 ListContainers of one container (relayed), with a header of its own.
    Relayed { pick: usize, meta: String },
    /// The same in v1alpha2 (intercepted, translated by the terminating path).
    Intercepted { pick: usize, meta: String },
    /// cri-bridge's own question.
    Own,
    /// A StopContainer with a field the runtime's revision does not know: refused by cri-bridge.
    Refused { meta: String },
    /// A StopContainer the runtime takes (relayed after judging).
    Judged { meta: String },
    /// A call whose request is cut off and reset by the client before it is whole.
    Abandoned { meta: String },
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let meta = "[a-z0-9]{0,24}|x{200,400}";
    prop_oneof![
        (0usize..20, meta).prop_map(|(pick, meta)| Step::Relayed { pick, meta }),
        (0usize..20, meta).prop_map(|(pick, meta)| Step::Intercepted { pick, meta }),
        Just(Step::Own),
        meta.prop_map(|meta| Step::Refused { meta }),
        meta.prop_map(|meta| Step::Judged { meta }),
        meta.prop_map(|meta| Step::Abandoned { meta }),
    ]
}

/// Runs one step on `client`: panics when its answer is not the one the model expects.
async fn run_step(client: Client, step: Step, ids: Vec<String>) {
    let stop = |unknown: bool| {
        let mut body = v1::StopContainerRequest { container_id: ids[0].clone(), timeout: 0 }.encode_to_vec();
        if unknown {
            prost::encoding::encode_varint(9 << 3, &mut body);
            prost::encoding::encode_varint(1, &mut body);
        }
        framed(&body)
    };
    let relayed = matches!(step, Step::Relayed { .. });
    match step {
        Step::Relayed { pick, meta } | Step::Intercepted { pick, meta } => {
            let id = ids[pick % ids.len()].clone();
            let (path, body) = if relayed {
                let filter = v1::ContainerFilter { id: id.clone(), ..Default::default() };
                (LIST_V1, v1::ListContainersRequest { filter: Some(filter) }.encode_to_vec())
            } else {
                let filter = v1alpha2::ContainerFilter { id: id.clone(), ..Default::default() };
                (LIST_V1ALPHA2, v1alpha2::ListContainersRequest { filter: Some(filter) }.encode_to_vec())
            };
            let metadata = [MARK, ("x-step", meta.as_str())];
            let open = client.open_with(path, framed(&body), Some("10S"), &metadata).await;
            let answered = client.answer(open, Duration::ZERO).await.unwrap();
            assert_eq!(answered.code, "0", "{path}: {answered:?}");
            let found: Vec<String> = if relayed {
                let list = v1::ListContainersResponse::decode(only_message(&answered.body)).unwrap();
                list.containers.into_iter().map(|c| c.id).collect()
            } else {
                let list = v1alpha2::ListContainersResponse::decode(only_message(&answered.body)).unwrap();
                list.containers.into_iter().map(|c| c.id).collect()
            };
            assert_eq!(found, vec![id], "{path}: its own container");
        }
        Step::Own => {
            let own = client.call(cri_bridge::control::STATUS_PATH, &[], None, Duration::ZERO).await.unwrap();
            assert_eq!(own.code, "0", "{own:?}");
        }
        Step::Refused { meta } => {
            let metadata = [MARK, ("x-step", meta.as_str())];
            let refused = client.answer(client.open_with(STOP_V1, stop(true), None, &metadata).await, Duration::ZERO);
            assert_eq!(refused.await.unwrap().code, "9", "FAILED_PRECONDITION");
        }
        Step::Judged { meta } => {
            let metadata = [MARK, ("x-step", meta.as_str())];
            let passed = client.answer(client.open_with(STOP_V1, stop(false), None, &metadata).await, Duration::ZERO);
            assert_eq!(passed.await.unwrap().code, "0", "the runtime stopped it");
        }
        Step::Abandoned { meta } => {
            let request = http::Request::post(format!("http://localhost{STOP_V1}"))
                .header("content-type", "application/grpc")
                .header("x-step", meta.as_str())
                .body(())
                .unwrap();
            let mut send = client.0.clone().ready().await.unwrap();
            let (_response, mut stream) = send.send_request(request, false).unwrap();
            // Half a request, then the client gives up on it.
            stream.send_data(stop(false).slice(..4), false).unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
            stream.send_reset(h2::Reason::CANCEL);
        }
    }
}

/// The model-based test of the splice: random sequences of calls of every kind, run in
/// concurrent batches on one connection whose window is also chosen at random, each answer
/// checked, and after each batch one relayed and one intercepted call whose header the runtime
/// must decode exactly as the client encoded it (the client indexes every header: a table out
/// of step shows as a wrong value, a decoding error, or a connection ended). At the end the
/// runtime has run exactly the StopContainer calls the model says reached it.
#[test]
fn random_interleavings_of_every_kind_of_call_keep_both_ends_in_step() {
    use proptest::test_runner::{Config, TestRunner};
    let strategy = (proptest::collection::vec(proptest::collection::vec(step(), 1..10), 1..5), 0usize..3);
    let mut runner = TestRunner::new(Config { cases: 12, failure_persistence: None, ..Config::default() });
    runner
        .run(&strategy, |(batches, window)| {
            let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            tokio.block_on(async move {
                let (_dir, runtime, bridge) = spliced_pair("splice-model", Some(37)).await;
                common::fill(&runtime, 20).await;
                let direct = Client::connect(&runtime_socket(&bridge), 1 << 20).await;
                let all = direct.call(LIST_V1, &[], None, Duration::ZERO).await.unwrap();
                let list = v1::ListContainersResponse::decode(only_message(&all.body)).unwrap();
                let ids: Vec<String> = list.containers.into_iter().map(|c| c.id).collect();
                let client = Client::connect(&bridge.socket, [16 << 10, 64 << 10, 1 << 20][window]).await;
                let mut judged = 0;
                for (number, batch) in batches.into_iter().enumerate() {
                    judged += batch.iter().filter(|s| matches!(s, Step::Judged { .. })).count() as u64;
                    let steps: Vec<_> =
                        batch.into_iter().map(|s| tokio::spawn(run_step(client.clone(), s, ids.clone()))).collect();
                    for step in steps {
                        step.await.unwrap();
                    }
                    let value = format!("after-batch-{number}");
                    for path in [VERSION_V1, VERSION_V1ALPHA2] {
                        let open = client.open_with(path, framed(&[]), None, &[MARK, ("x-check", &value)]).await;
                        let answered = client.answer(open, Duration::ZERO).await.unwrap();
                        assert_eq!(answered.code, "0", "{path} after batch {number}: {answered:?}");
                        let seen = runtime.memory.take_metadata("Version").unwrap();
                        assert_eq!(seen.get("x-check").unwrap(), value.as_str(), "{path} after batch {number}");
                        assert_eq!(seen.get(MARK.0).is_some(), path == VERSION_V1, "{path}: spliced only in v1");
                    }
                }
                assert_eq!(runtime.memory.calls_of("StopContainer"), judged, "only the judged stops ran");
                bridge.stop().await;
                runtime.stop().await;
            });
            Ok(())
        })
        .unwrap();
}

#[tokio::test]
async fn streams_past_the_connection_limit_are_refused_and_the_connection_serves_on() {
    let dir = TempDir::new("splice-streams");
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = config(&dir, &dir.path("runtime.sock"), None);
    config.splice = true;
    config.limits.streams_per_connection = 4;
    let bridge = Bridge::start(config).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    // Four calls whose requests never end hold the connection's four streams.
    let mut held = Vec::new();
    for _ in 0..4 {
        let request = http::Request::post(format!("http://localhost{VERSION_V1}"))
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let mut send = client.0.clone().ready().await.unwrap();
        let (response, mut stream) = send.send_request(request, false).unwrap();
        stream.send_data(framed(&[]).slice(..2), false).unwrap();
        held.push((response, stream));
    }
    let refused = client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap_err();
    assert_eq!(refused.reason(), Some(h2::Reason::REFUSED_STREAM), "{refused:?}");
    for (_, mut stream) in held {
        stream.send_reset(h2::Reason::CANCEL);
    }
    // (HTTP/2 orders frames within a stream only: the resets are given time to go first.)
    tokio::time::sleep(Duration::from_millis(100)).await;
    let served = client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap();
    assert_eq!(served.code, "0", "{served:?}");
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_request_ended_by_trailers_is_served_as_the_terminating_path_serves_it() {
    let (_dir, runtime, bridge) = spliced_pair("splice-trailers", None).await;
    let client = Client::connect(&bridge.socket, 1 << 20).await;
    for round in 0..3 {
        let request = http::Request::post(format!("http://localhost{VERSION_V1}"))
            .header("content-type", "application/grpc")
            .header(MARK.0, MARK.1)
            .body(())
            .unwrap();
        let mut send = client.0.clone().ready().await.unwrap();
        let (response, mut stream) = send.send_request(request, false).unwrap();
        stream.send_data(framed(&v1::VersionRequest::default().encode_to_vec()), false).unwrap();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-request-trailer", format!("t-{round}").parse().unwrap());
        stream.send_trailers(trailers).unwrap();
        let answered = client.answer(response, Duration::ZERO).await.unwrap();
        assert_eq!(answered.code, "0", "round {round}: {answered:?}");
        assert!(runtime.memory.take_metadata("Version").unwrap().get(MARK.0).is_some(), "round {round}: spliced");
    }
    let after = client.call(VERSION_V1, &[], None, Duration::ZERO).await.unwrap();
    assert_eq!(after.code, "0", "the tables still agree: {after:?}");
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn a_clients_answers_to_the_runtimes_pings_are_not_a_flood() {
    // grpc-go runtimes (containerd) PING to estimate bandwidth each time DATA arrives, and the
    // client answers each: 10,000 calls in 10 s are 10,000 PING ACKs the client sends. They
    // answer the runtime; only PINGs and SETTINGS the client starts count against its limit.
    // (Written by hand: ACKs the in-memory runtime never asked for, which it ignores.)
    use h2_frames::{frame, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PING: u8 = 0x6;
    const ACK: u8 = 0x1;
    let (_dir, runtime, bridge) = spliced_pair("splice-ping-acks", None).await;
    let mut socket = tokio::net::UnixStream::connect(&bridge.socket).await.unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    let acks: Vec<u8> = std::iter::repeat_n(frame(PING, ACK, 0, &[9; 8]), 12_000).flatten().collect();
    out.extend(acks);
    let mut head = Vec::new();
    for (name, value) in [(":method", "POST"), (":scheme", "http"), (":path", VERSION_V1), (":authority", "x")] {
        cri_bridge::relay::splice::hpack::encode(name.as_bytes(), value.as_bytes(), &mut head);
    }
    cri_bridge::relay::splice::hpack::encode(b"content-type", b"application/grpc", &mut head);
    out.extend(frame(HEADERS, END_HEADERS, 1, &head));
    out.extend(frame(0x0, END_STREAM, 1, &framed(&[])));
    socket.write_all(&out).await.unwrap();
    // Read until stream 1 ends (its trailers), or the connection does.
    let mut read = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            if n == 0 {
                return false;
            }
            read.extend_from_slice(&buf[..n]);
            let mut at = 0;
            while read.len() >= at + 9 {
                let len = u32::from_be_bytes([0, read[at], read[at + 1], read[at + 2]]) as usize;
                let (kind, flags, stream) =
                    (read[at + 3], read[at + 4], u32::from_be_bytes(read[at + 5..at + 9].try_into().unwrap()));
                if read.len() < at + 9 + len {
                    break;
                }
                assert_ne!(kind, 0x7, "GOAWAY: {:?}", &read[at + 9..at + 9 + len]);
                if kind == HEADERS && flags & END_STREAM != 0 && stream == 1 {
                    return true;
                }
                at += 9 + len;
            }
        }
    })
    .await
    .expect("an answer within 10 s");
    assert!(ended, "the call was answered on a connection still open");
    assert!(runtime.memory.calls_of("Version") > 0);
    bridge.stop().await;
    runtime.stop().await;
}

/// One unit of a hand-written client connection: a whole header block (HEADERS and its
/// CONTINUATIONs, which nothing may split), a DATA frame, or a control frame.
#[derive(Debug, Clone)]
enum Unit {
    Head { call: usize },
    Data { call: usize, part: usize },
    Reset { call: usize },
    Ping(u8),
    Settings,
    Grant(u32),
}

/// A call of the raw test: v1 (relayed) or v1alpha2 (intercepted), its header value, how its
/// block and its body are cut into frames, and whether the client resets it mid-request.
#[derive(Debug, Clone)]
struct RawCall {
    v1: bool,
    meta: String,
    block_cuts: usize,
    data_cuts: usize,
    reset: bool,
}

fn raw_call() -> impl proptest::strategy::Strategy<Value = RawCall> {
    use proptest::prelude::*;
    (any::<bool>(), "[a-z]{0,12}|y{100,300}", 0usize..4, 1usize..5, proptest::bool::weighted(0.2))
        .prop_map(|(v1, meta, block_cuts, data_cuts, reset)| RawCall { v1, meta, block_cuts, data_cuts, reset })
}

/// Frames written by hand in a random interleaving: header blocks cut into CONTINUATIONs at
/// random, bodies into several DATA frames, PINGs, SETTINGS and window grants between them,
/// some calls reset mid-request. Every call not reset is answered in its own version, every
/// PING answered with its own data; and the runtime decodes a last call's header exactly.
#[test]
fn random_frame_interleavings_reach_the_runtime_as_the_client_encoded_them() {
    use h2_frames::{frame, CONTINUATION, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    const DATA: u8 = 0x0;
    const PING: u8 = 0x6;
    const WINDOW_UPDATE: u8 = 0x8;
    const RST_STREAM: u8 = 0x3;
    let strategy = (proptest::collection::vec(raw_call(), 1..7), proptest::collection::vec(any::<u64>(), 20));
    let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
    runner
        .run(&strategy, |(calls, shuffle)| {
            // The order: each call's head before its DATA (and its reset), all else at random.
            let mut units: Vec<Unit> = Vec::new();
            for (i, call) in calls.iter().enumerate() {
                units.push(Unit::Head { call: i });
                let parts = if call.reset { 1 } else { call.data_cuts };
                units.extend((0..parts).map(|part| Unit::Data { call: i, part }));
                if call.reset {
                    units.push(Unit::Reset { call: i });
                }
            }
            units.extend([Unit::Ping(1), Unit::Settings, Unit::Grant(1 << 16), Unit::Ping(2)]);
            // A stable merge by random keys that keeps each call's own order.
            let mut keyed: Vec<(u64, usize, Unit)> = Vec::new();
            let mut last_key = vec![0u64; calls.len()];
            for (n, unit) in units.into_iter().enumerate() {
                let random = shuffle[n % shuffle.len()].rotate_left(n as u32) % 1000;
                let key = match &unit {
                    Unit::Head { call } | Unit::Data { call, .. } | Unit::Reset { call } => {
                        last_key[*call] = last_key[*call].max(random) + 1;
                        last_key[*call]
                    }
                    _ => random,
                };
                keyed.push((key, n, unit));
            }
            keyed.sort_by_key(|(key, n, _)| (*key, *n));
            let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            tokio.block_on(raw_session(calls, keyed.into_iter().map(|(_, _, u)| u).collect()));
            Ok(())
        })
        .unwrap();

    /// A request head as grpc-go writes one (every field indexed, Huffman-coded where shorter).
    fn request_head(encoder: &mut httlib_hpack::Encoder, path: &str, meta: &str) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "/run/cri-bridge.sock"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("x-raw", meta),
        ] {
            let flags = 0x1 | 0x2 | 0x4 | 0x10;
            encoder.encode((name.as_bytes().to_vec(), value.as_bytes().to_vec(), flags), &mut block).unwrap();
        }
        block
    }

    async fn raw_session(calls: Vec<RawCall>, units: Vec<Unit>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (_dir, runtime, bridge) = spliced_pair("splice-raw", None).await;
        let mut encoder = httlib_hpack::Encoder::default();
        let mut socket = tokio::net::UnixStream::connect(&bridge.socket).await.unwrap();
        let mut out = PREFACE.to_vec();
        out.extend(frame(SETTINGS, 0, 0, &[]));
        let mut ids = vec![0u32; calls.len()];
        let mut next_id = 1;
        let body = |call: &RawCall| framed(&v1::VersionRequest { version: call.meta.clone() }.encode_to_vec());
        let mut pings = Vec::new();
        for unit in &units {
            match *unit {
                Unit::Head { call } => {
                    ids[call] = next_id;
                    next_id += 2;
                    let c = &calls[call];
                    let path = if c.v1 { VERSION_V1 } else { VERSION_V1ALPHA2 };
                    let block = request_head(&mut encoder, path, &c.meta);
                    let size = block.len().div_ceil(c.block_cuts + 1).max(1);
                    let pieces: Vec<&[u8]> = block.chunks(size).collect();
                    for (n, piece) in pieces.iter().enumerate() {
                        let kind = if n == 0 { HEADERS } else { CONTINUATION };
                        let flags = if n + 1 == pieces.len() { END_HEADERS } else { 0 };
                        out.extend(frame(kind, flags, ids[call], piece));
                    }
                }
                Unit::Data { call, part } => {
                    let c = &calls[call];
                    let bytes = body(c);
                    if c.reset {
                        out.extend(frame(DATA, 0, ids[call], &bytes[..2]));
                    } else {
                        let size = bytes.len().div_ceil(c.data_cuts).max(1);
                        let pieces: Vec<&[u8]> = bytes.chunks(size).collect();
                        if let Some(piece) = pieces.get(part) {
                            let end = if part + 1 >= pieces.len() { END_STREAM } else { 0 };
                            out.extend(frame(DATA, end, ids[call], piece));
                        }
                    }
                }
                Unit::Reset { call } => out.extend(frame(RST_STREAM, 0, ids[call], &8u32.to_be_bytes())),
                Unit::Ping(n) => {
                    pings.push([n; 8]);
                    out.extend(frame(PING, 0, 0, &[n; 8]));
                }
                Unit::Settings => out.extend(frame(SETTINGS, 0, 0, &[])),
                Unit::Grant(n) => out.extend(frame(WINDOW_UPDATE, 0, 0, &n.to_be_bytes())),
            }
        }
        socket.write_all(&out).await.unwrap();
        // Read every answer: per stream, its status and its message.
        let waiting: Vec<u32> = calls.iter().zip(&ids).filter(|(c, _)| !c.reset).map(|(_, id)| *id).collect();
        let mut done = std::collections::BTreeMap::new();
        let mut acked = Vec::new();
        let mut read = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let mut decoder = cri_bridge::relay::splice::hpack::Decoder::new(1 << 20);
        let mut bodies: std::collections::HashMap<u32, Vec<u8>> = Default::default();
        let finished = tokio::time::timeout(Duration::from_secs(10), async {
            while waiting.iter().any(|id| !done.contains_key(id)) || acked.len() < pings.len() {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the connection ended: {done:?}");
                read.extend_from_slice(&buf[..n]);
                while read.len() >= 9 {
                    let len = u32::from_be_bytes([0, read[0], read[1], read[2]]) as usize;
                    if read.len() < 9 + len {
                        break;
                    }
                    let (kind, flags) = (read[3], read[4]);
                    let stream = u32::from_be_bytes(read[5..9].try_into().unwrap());
                    let payload = read[9..9 + len].to_vec();
                    read.drain(..9 + len);
                    match kind {
                        0x7 => panic!("GOAWAY {payload:?}"),
                        PING if flags & 1 != 0 => acked.push(payload),
                        DATA => bodies.entry(stream).or_default().extend(payload),
                        HEADERS => {
                            assert!(flags & END_HEADERS != 0, "cri-bridge's blocks here fit one frame");
                            let mut status = None;
                            decoder
                                .decode(&payload, |n, v| {
                                    if n == b"grpc-status" {
                                        status = Some(String::from_utf8_lossy(v).into_owned());
                                    }
                                })
                                .expect("a block the client can decode");
                            if flags & END_STREAM != 0 {
                                done.insert(stream, status);
                            }
                        }
                        _ => {}
                    }
                }
            }
        })
        .await;
        assert!(finished.is_ok(), "answered within 10 s: done {done:?} of {waiting:?}, pings {acked:?}");
        for (call, id) in calls.iter().zip(&ids).filter(|(c, _)| !c.reset) {
            assert_eq!(done[id].as_deref(), Some("0"), "{call:?}");
            let message = only_message(&bodies[id]);
            let version = if call.v1 {
                v1::VersionResponse::decode(message).unwrap().runtime_api_version
            } else {
                v1alpha2::VersionResponse::decode(message).unwrap().runtime_api_version
            };
            assert_eq!(version, if call.v1 { "v1" } else { "v1alpha2" }, "{call:?}");
        }
        for ping in &pings {
            assert!(acked.iter().any(|a| a == ping), "PING {ping:?} answered");
        }
        // One more call, alone: the runtime decodes its header as the client's encoder wrote it.
        let block = request_head(&mut encoder, VERSION_V1, "the-last-one");
        let mut last = frame(HEADERS, END_HEADERS, next_id, &block);
        last.extend(frame(DATA, END_STREAM, next_id, &framed(&[])));
        socket.write_all(&last).await.unwrap();
        let mut seen = None;
        for _ in 0..200 {
            seen =
                runtime.memory.take_metadata("Version").filter(|m| m.get("x-raw").is_some_and(|v| v == "the-last-one"));
            if seen.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(seen.is_some(), "the runtime decoded the last call's header as encoded");
        drop(socket);
        bridge.stop().await;
        runtime.stop().await;
    }
}
