//! The shared memory bound is served fairly (issue 36, finding 3): while another client's
//! unfinished 16 MiB requests hold all of `limits.buffer_mib`, a kubelet's v1 `ListContainers`
//! over a v1alpha2 runtime (1,000 containers, translated, so it needs room in the bound) is
//! answered without waiting for those requests to time out: the client holding more than its
//! share is asked to give back, and its unfinished requests end `RESOURCE_EXHAUSTED` naming
//! `limits.buffer_mib`. Before, the list waited until the hog's requests timed out.

#[path = "support/abuse.rs"]
mod abuse;
mod common;

use abuse::{connect, framed, request, Daemon};
use bytes::Bytes;
use common::TempDir;
use cri_bridge::api::v1;
use prost::Message;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");
/// The hog's requests would be held this long (`limits.request_timeout_seconds`) ...
const REQUEST_TIMEOUT: u64 = 300;
/// ... and the kubelet's list has this deadline, far below it and far above what the list takes.
const LIST_DEADLINE: &str = "60S";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_holding_the_shared_bound_gives_back_for_a_kubelets_translated_list() {
    let dir = TempDir::new("fair-share");
    let limits = format!(
        "limits:\n  buffer_mib: 32\n  buffer_per_connection_mib: 32\n  request_timeout_seconds: {REQUEST_TIMEOUT}\n"
    );
    let daemon = Daemon::start(BIN.as_ref(), dir.path("daemon"), &limits).await;
    abuse::populate(&daemon.socket, 1_000).await;

    // The hog: two connections of four requests each announcing 16 MiB, sending all but the
    // last byte; cri-bridge takes what the bound holds (32 MiB beyond the floors) and waits.
    let announced = (16usize << 20) - 1;
    let mut body = vec![0u8; 5 + announced];
    body[1..5].copy_from_slice(&(announced as u32).to_be_bytes());
    let body = Bytes::from(body);
    let mut hog = Vec::new();
    let mut responses = Vec::new();
    let mut connections = Vec::new();
    for _ in 0..2 {
        let connection = connect(&daemon.socket).await;
        for _ in 0..4 {
            let mut send = connection.send.clone().ready().await.unwrap();
            let path = "/runtime.v1.RuntimeService/CreateContainer";
            let (response, mut stream) = send.send_request(request(path, None), false).unwrap();
            stream.send_data(body.slice(..body.len() - 1), false).unwrap();
            responses.push(response);
            hog.push(stream);
        }
        connections.push(connection);
    }
    // Until the hog's streams stop moving: the bound is spent.
    let mut sent = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now: usize = hog.iter_mut().map(|s| announced + 5 - 1 - s.capacity()).sum();
        if now == sent {
            break;
        }
        sent = now;
    }
    assert!(sent >= 32 << 20, "the hog holds the shared bound: {sent} bytes taken");

    // The kubelet: a v1 list, translated (the runtime speaks v1alpha2), of 1,000 containers.
    let kubelet = connect(&daemon.socket).await;
    let list = v1::ListContainersRequest::default().encode_to_vec();
    let (status, containers) = list_containers(&kubelet, &list).await;
    assert_eq!(status, "0", "the list is answered within its deadline, far below the hog's request timeout");
    assert_eq!(containers, 1_000);

    // The hog's requests, not the kubelet's list, paid for the room.
    let mut reclaimed = 0;
    for response in responses {
        let Ok(Ok(response)) = tokio::time::timeout(Duration::from_secs(30), response).await else { continue };
        let status = response.headers().get("grpc-status").map(|v| v.to_str().unwrap().to_string());
        let message = response.headers().get("grpc-message").map(|v| v.to_str().unwrap().to_string());
        if status.as_deref() == Some("8") {
            assert!(message.as_deref().unwrap_or_default().contains("limits.buffer_mib"), "{message:?}");
            reclaimed += 1;
        }
    }
    assert!(reclaimed >= 1, "at least one of the hog's requests was ended RESOURCE_EXHAUSTED to make room");
}

/// A `ListContainers` call read whole: its grpc-status and how many containers it listed.
async fn list_containers(connection: &abuse::Connection, message: &[u8]) -> (String, usize) {
    let mut send = connection.send.clone().ready().await.unwrap();
    let path = "/runtime.v1.RuntimeService/ListContainers";
    let (response, mut stream) = send.send_request(request(path, Some(LIST_DEADLINE)), false).unwrap();
    stream.send_data(framed(message), true).unwrap();
    let (head, mut body) = response.await.unwrap().into_parts();
    if let Some(code) = head.headers.get("grpc-status") {
        return (format!("{code:?} {:?}", head.headers.get("grpc-message")), 0);
    }
    let mut gathered = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        gathered.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    let status = trailers.get("grpc-status").map_or("none".into(), |v| v.to_str().unwrap().to_string());
    if status != "0" {
        return (format!("{status} {:?}", trailers.get("grpc-message")), 0);
    }
    let answer = v1::ListContainersResponse::decode(&gathered[5..]).unwrap();
    (status, answer.containers.len())
}
