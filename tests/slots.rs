//! Connection slots (`relay::admission`) over real unix sockets, cri-bridge in this process in
//! front of the in-memory runtime, every client the test's own uid (root, as the kubelet and most
//! containers): a pod holding every slot it can on a scoped socket, with streams that never send
//! their request, leaves the kubelet's main socket served; and on the main socket, connections
//! that hold only such streams make room for a newcomer. Clients are bare `h2` connections, so
//! the test controls every frame, and a tonic client in the kubelet's role.

mod common;

use bytes::Bytes;
use common::{channel, Bridge, Runtime, TempDir};
use cri_bridge::access::Policy;
use cri_bridge::api::v1;
use cri_bridge::config::{Config, Limits, ScopedEndpoint};
use cri_bridge::relay::admission::RECLAIMABLE_AFTER;
use cri_bridge::CriVersion::V1;
use std::path::Path;
use std::time::Duration;

type RuntimeClient = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

const EVENTS: &str = "/runtime.v1.RuntimeService/GetContainerEvents";
const VERSION: &str = "/runtime.v1.RuntimeService/Version";

/// The limits of both scenarios: 8 connections, 4 of them on the scoped sockets, 4 per uid.
fn small_limits() -> Limits {
    Limits { connections: 8, scoped_connections: 4, connections_per_uid: 4, ..Limits::default() }
}

/// A bare HTTP/2 connection, its driver running, and the streams it holds open.
struct Held {
    send: h2::client::SendRequest<Bytes>,
    pings: h2::PingPong,
    driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
    /// Streams whose request is never sent (headers only), kept so they stay open.
    streams: Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)>,
}

impl Held {
    /// A connection to `socket`; `None` when it is closed before the HTTP/2 preface is written
    /// (refused).
    async fn connect(socket: &Path) -> Option<Held> {
        let stream = tokio::net::UnixStream::connect(socket).await.ok()?;
        let (send, mut connection) = h2::client::handshake(stream).await.ok()?;
        let pings = connection.ping_pong()?;
        Some(Held { send, pings, driver: tokio::spawn(connection), streams: Vec::new() })
    }

    /// Whether cri-bridge serves the connection: it answers a PING within `within` (a refused
    /// connection is closed before anything is read from it).
    async fn served(&mut self, within: Duration) -> bool {
        matches!(tokio::time::timeout(within, self.pings.ping(h2::Ping::opaque())).await, Ok(Ok(_)))
    }

    /// Opens a call to `path` and sends its headers only: its request never comes.
    async fn silent_stream(&mut self, path: &str) {
        let request = http::Request::post(format!("http://localhost{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let mut send = self.send.clone().ready().await.expect("room for a stream");
        let stream = send.send_request(request, false).expect("the stream's headers sent");
        self.streams.push(stream);
    }

    /// Whether cri-bridge has closed the connection (sent it away).
    fn gone(&self) -> bool {
        self.driver.is_finished()
    }
}

/// How many of `held` cri-bridge has closed, once `expected` have (or 2 s have passed: a closed
/// connection's driver ends as soon as it reads the close).
async fn gone(held: &[Held], expected: usize) -> usize {
    for _ in 0..100 {
        if held.iter().filter(|held| held.gone()).count() >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held.iter().filter(|held| held.gone()).count()
}

/// A served connection to `socket` holding `streams` streams that never send their request.
async fn holding_silent_streams(socket: &Path, path: &str, streams: usize) -> Held {
    let mut held = Held::connect(socket).await.expect("a connection");
    assert!(held.served(Duration::from_secs(5)).await, "the connection is served");
    for _ in 0..streams {
        held.silent_stream(path).await;
    }
    // Served, after the streams: a PING answered once the server has read their headers.
    assert!(held.served(Duration::from_secs(5)).await, "the connection is still served");
    held
}

/// The kubelet's Version call: must succeed within 8 s (a new connection at a limit waits up to
/// 5 s for the slot of one sent away).
async fn kubelet_version(kubelet: &mut RuntimeClient) -> Result<(), String> {
    let call = kubelet.version(v1::VersionRequest::default());
    match tokio::time::timeout(Duration::from_secs(8), call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(format!("{status:?}")),
        Err(_) => Err("no answer within 8 s".into()),
    }
}

/// cri-bridge with `limits` (and `scoped`, if any) in front of a fresh in-memory runtime, once
/// the connections made to see it listening are gone.
async fn bridge(name: &str, limits: Limits, scoped: Option<&str>) -> (TempDir, Runtime, Bridge, Config) {
    let dir = TempDir::new(name);
    let runtime = Runtime::start(&dir.path("runtime.sock"), &[V1]).await;
    let mut config = common::config(&dir, &dir.path("runtime.sock"), None);
    config.limits = limits;
    if let Some(scoped) = scoped {
        let endpoint = ScopedEndpoint { path: dir.path(scoped), mode: 0o660, group: None, policy: Policy::ReadOnly };
        config.endpoints = vec![endpoint];
    }
    let bridge = Bridge::start(config.clone()).await;
    if let Some(scoped) = scoped {
        common::wait_for_socket(&dir.path(scoped)).await;
    }
    // The connections that saw the sockets listening closed at once: their slots come back as
    // soon as cri-bridge reads their end.
    tokio::time::sleep(Duration::from_millis(300)).await;
    (dir, runtime, bridge, config)
}

#[tokio::test]
async fn a_root_pod_holding_every_scoped_slot_leaves_the_kubelet_served() {
    let (dir, runtime, bridge, config) = bridge("slots-scoped", small_limits(), Some("pod.sock")).await;
    let pod_socket = dir.path("pod.sock");
    // The pod, as root, fills what the scoped sockets may hold: each connection with event
    // watches that never send their request.
    let mut pod = Vec::new();
    for _ in 0..config.limits.scoped_connections {
        pod.push(holding_silent_streams(&pod_socket, EVENTS, 4).await);
    }

    // The kubelet (root too) connects to the main socket and is served: the pod used none of
    // its uid's slots.
    let mut kubelet = RuntimeClient::new(channel(&bridge.socket));
    kubelet_version(&mut kubelet).await.expect("the kubelet's Version");
    // And the main socket reaches its whole share, connections - scoped_connections, the
    // kubelet's connection among them.
    let share = config.limits.connections - config.limits.scoped_connections;
    let mut main = Vec::new();
    for _ in 1..share {
        main.push(holding_silent_streams(&bridge.socket, VERSION, 1).await);
    }

    // One more pod connection is refused, or takes the slot of one of the pod's own (never the
    // main socket's): the pod never holds more than its share.
    let further = match Held::connect(&pod_socket).await {
        Some(mut further) => further.served(Duration::from_secs(8)).await.then_some(further),
        None => None,
    };
    let expected = usize::from(further.is_some());
    eprintln!(
        "a further pod connection: {}",
        if expected == 1 { "served, a pod connection sent away" } else { "refused" }
    );
    assert_eq!(gone(&pod, expected).await, expected, "served, it took one pod connection's slot; refused, none");
    for held in pod.iter_mut().filter(|held| !held.gone()) {
        assert!(held.served(Duration::from_secs(5)).await, "the pod's other connections are kept");
    }
    for held in &mut main {
        assert!(!held.gone() && held.served(Duration::from_secs(5)).await, "the main socket's connections are kept");
    }
    let answered = kubelet.version(v1::VersionRequest::default()).await;
    answered.expect("the kubelet's connection is kept and served");

    drop((pod, main, kubelet, further));
    bridge.stop().await;
    runtime.stop().await;
}

#[tokio::test]
async fn connections_holding_only_streams_that_never_sent_make_room_for_a_newcomer() {
    let (_dir, runtime, bridge, config) = bridge("slots-silent", small_limits(), None).await;
    // Every slot of this uid taken by connections whose streams never send their request.
    let mut held = Vec::new();
    for _ in 0..config.limits.connections_per_uid {
        held.push(holding_silent_streams(&bridge.socket, VERSION, 2).await);
    }
    // Such a stream makes its connection reclaimable once it has waited RECLAIMABLE_AFTER.
    tokio::time::sleep(RECLAIMABLE_AFTER + Duration::from_millis(500)).await;

    let mut newcomer = RuntimeClient::new(channel(&bridge.socket));
    kubelet_version(&mut newcomer).await.expect("the newcomer's Version: a silent connection made room");
    // The newcomer was served once the connection sent away had closed: one, and only one.
    assert_eq!(gone(&held, 1).await, 1, "one connection holding silent streams was sent away");
    for held in held.iter_mut().filter(|held| !held.gone()) {
        assert!(held.served(Duration::from_secs(5)).await, "the others are kept");
    }

    drop((held, newcomer));
    bridge.stop().await;
    runtime.stop().await;
}
