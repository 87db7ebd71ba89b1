//! Prometheus metrics (`metrics.listen`), in the OpenMetrics text format, on a unix socket or a
//! loopback port; nothing listens unless configured. Counting costs a call a few hash lookups
//! whether or not anything scrapes (docs/performance.md gives the measured cost).
//!
//! Every label value comes from a bounded set: the CRI schema (service, method, field), the
//! versions, the status codes, the configured endpoints, and executable names (callers are
//! bounded by [`crate::callers::MAX_CALLERS`]). Nothing a caller sends becomes a label: an
//! unknown path counts as `(unknown)`, an unknown field number as `Message.#unknown`.
//!
//! Besides the counts: `process_start_time_seconds` (the standard series, taken from the clock
//! when the daemon's [`Metrics`] is made, at startup, before anything is served), the build's
//! version, and the configured limits (`limits.*` change only on a restart, so the values of the
//! start are those in force).

use crate::backend::Backend;
use crate::callers::Callers;
use crate::config::{Limits, MetricsListen};
use crate::convert::policy::{Action, LossObserver, Side};
use crate::grpc::Rpc;
use crate::version::CriVersion;
use labels::{
    BackendLabels, BuildLabels, CallerLabels, DirectionLabels, EndpointLabels, LimitLabels, LossLabels, MethodLabels,
    OperationLabels,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

/// The kubelet's buckets for `kubelet_runtime_operations_duration_seconds`: 5 ms × 2.5ⁿ, 14 of them.
fn operation_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// Conversion takes microseconds (a 1,000-container list: milliseconds): 1 µs × 4ⁿ, 12 of them.
fn conversion_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 4.0, 12))
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The label of a message's side of a call.
fn side_label(side: Side) -> &'static str {
    match side {
        Side::Request => "request",
        Side::Response => "response",
    }
}

pub struct Metrics {
    registry: Registry,
    operations: Family<OperationLabels, Counter>,
    durations: HistogramFamily<MethodLabels>,
    conversions: HistogramFamily<DirectionLabels>,
    losses: Family<LossLabels, Counter>,
    inflight: Gauge,
    buffered: Gauge,
    refused: Family<LimitLabels, Counter>,
    // Read from the backends and callers when scraped.
    backend_info: Family<BackendLabels, Gauge>,
    backend_up: Family<EndpointLabels, Gauge>,
    reconnects: Family<EndpointLabels, Counter>,
    callers: Family<CallerLabels, Gauge>,
    last_calls: Family<CallerLabels, Gauge>,
    memory: memory::Memory,
    denials: denials::Denials,
    routed: routed::Routed,
}

impl Default for Metrics {
    /// With the default limits.
    fn default() -> Metrics {
        Metrics::new(&Limits::default())
    }
}

/// Now, in seconds since the Unix epoch.
fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |since| since.as_secs_f64())
}

impl Metrics {
    /// The daemon's metrics, made once at its start (the start time is taken now), serving with
    /// `limits`.
    pub fn new(limits: &Limits) -> Metrics {
        let mut root = Registry::default();
        let memory = memory::Memory::register(&mut root);
        memory.set_ceiling(crate::relay::memory_ceiling(limits, 1));
        let started = ConstGauge::new(unix_now());
        root.register("process_start_time_seconds", "Start time of the process since unix epoch in seconds", started);
        let registry = root.sub_registry_with_prefix("cri_bridge");
        let build: Family<BuildLabels, Gauge> = Family::default();
        build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        registry.register("build_info", "The cri-bridge build running (always 1), by version", build);
        let configured: Family<LimitLabels, Gauge> = Family::default();
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (limit, value) in [
            ("limits.buffer_mib", count(limits.buffer_bytes)),
            ("limits.connections", count(limits.connections)),
            ("limits.connections_per_uid", count(limits.connections_per_uid)),
            ("limits.scoped_connections", count(limits.scoped_connections)),
        ] {
            configured.get_or_create(&LimitLabels { limit }).set(value);
        }
        registry.register(
            "limit",
            "The configured limits, in the unit of what each bounds (limits.buffer_mib in bytes, as buffered_bytes)",
            configured,
        );
        let operations = Family::default();
        registry.register("operations", "CRI calls answered, by RPC, versions and status code", operations.clone());
        let durations: HistogramFamily<MethodLabels> = Family::new_with_constructor(operation_buckets);
        registry.register(
            "operation_duration_seconds",
            "Time from a call's arrival to its answer's end (the kubelet's buckets)",
            durations.clone(),
        );
        let conversions: HistogramFamily<DirectionLabels> = Family::new_with_constructor(conversion_buckets);
        registry.register(
            "conversion_duration_seconds",
            "Time spent converting one message between CRI versions",
            conversions.clone(),
        );
        let losses = Family::default();
        registry.register(
            "losses",
            "Fields a conversion could not carry, by field and the loss policy's action (answers: counted as field=\"*\")",
            losses.clone(),
        );
        let inflight = Gauge::default();
        registry.register("inflight_calls", "Calls being served now", inflight.clone());
        let buffered = Gauge::default();
        registry.register(
            "buffered_bytes",
            "Bytes held for clients beyond each connection's first 64 KiB (bounded by limits.buffer_mib)",
            buffered.clone(),
        );
        let denials = denials::Denials::register(registry);
        let routed = routed::Routed::register(registry);
        let refused = Family::default();
        registry.register(
            "connections_refused",
            "Client connections closed at once because a limit was reached (limits.*)",
            refused.clone(),
        );
        let backend_info = Family::default();
        registry.register(
            "backend_info",
            "The container runtime behind each endpoint, as last probed",
            backend_info.clone(),
        );
        let backend_up = Family::default();
        registry.register(
            "backend_up",
            "1 when the runtime answered its last probe or call, else 0",
            backend_up.clone(),
        );
        let reconnects = Family::default();
        registry.register("backend_reconnects", "Connections made to the runtime after the first", reconnects.clone());
        let callers = Family::default();
        registry.register(
            "callers",
            "Callers (executable, uid, pod) that used each CRI version since start",
            callers.clone(),
        );
        let last_calls = Family::default();
        registry.register(
            "caller_last_call_timestamp_seconds",
            "When the callers of each executable last called in each CRI version, in seconds since the epoch",
            last_calls.clone(),
        );
        Metrics {
            registry: root,
            operations,
            durations,
            conversions,
            losses,
            inflight,
            buffered,
            refused,
            backend_info,
            backend_up,
            reconnects,
            callers,
            last_calls,
            memory,
            denials,
            routed,
        }
    }

    /// The memory ceiling, for a daemon whose client connections each hold `runtime_connections`.
    pub fn set_memory_ceiling(&self, limits: &Limits, runtime_connections: usize) {
        self.memory.set_ceiling(crate::relay::memory_ceiling(limits, runtime_connections));
    }

    /// Counts one answered call. `rpc` is `None` for a path that is not a CRI method.
    pub fn answered(&self, rpc: Option<Rpc>, backend: Option<CriVersion>, code: Code, elapsed: Duration) {
        let (service, method, frontend) = match rpc {
            Some(rpc) => (rpc.info.service, rpc.info.method, rpc.version.as_str()),
            None => ("(unknown)", "(unknown)", "(unknown)"),
        };
        let backend_version = backend.map_or("none", CriVersion::as_str);
        let labels =
            OperationLabels { service, method, frontend_version: frontend, backend_version, code: code_name(code) };
        self.operations.get_or_create(&labels).inc();
        self.durations.get_or_create(&MethodLabels { service, method }).observe(elapsed.as_secs_f64());
    }

    pub fn converted(&self, side: Side, elapsed: Duration) {
        self.conversions.get_or_create(&DirectionLabels { direction: side_label(side) }).observe(elapsed.as_secs_f64());
    }

    /// Counts a call denied on `socket` (its path).
    pub fn denied(&self, socket: &str, rpc: &str) {
        self.denials.count(socket, rpc);
    }

    /// Counts a call sent to backend `name` among several, answered `code`.
    pub fn routed_call(&self, name: &str, code: Code) {
        self.routed.called(name, code_name(code));
    }

    /// Counts a connection refused by `limit` (`limits.connections`, …).
    pub fn refused_connection(&self, limit: &'static str) {
        self.refused.get_or_create(&LimitLabels { limit }).inc();
    }

    /// A call is in flight until [`Metrics::call_ended`] (the forwarder's guard calls it
    /// however the call ends, also when its task is aborted).
    pub fn call_began(&self) {
        self.inflight.inc();
    }

    pub fn call_ended(&self) {
        self.inflight.dec();
    }

    /// The text a scrape answers: the counters, and the backends and callers as they are now.
    pub fn render(&self, scrape: &Scrape) -> String {
        let (backends, callers, budget) = (&scrape.backends, &scrape.callers, &scrape.budget);
        self.routed.refresh(&(scrape.routed)());
        self.buffered.set(i64::try_from(budget.held()).unwrap_or(i64::MAX));
        self.memory.refresh();
        self.backend_info.clear();
        for backend in backends {
            let endpoint = EndpointLabels { endpoint: backend.endpoint.clone() };
            let health = backend.health();
            self.backend_up.get_or_create(&endpoint).set(i64::from(health.up));
            let reconnects = self.reconnects.get_or_create(&endpoint);
            let made = backend.upstream().connections().saturating_sub(1);
            reconnects.inc_by(made.saturating_sub(reconnects.get()));
            if let Some(found) = backend.discovered() {
                let runtime = &found.profile.runtime;
                self.backend_info
                    .get_or_create(&BackendLabels {
                        endpoint: backend.endpoint.clone(),
                        version: found.version.as_str().to_string(),
                        revision: format!("1.{}", runtime.minor),
                        runtime_name: runtime.runtime_name.clone(),
                        runtime_version: runtime.runtime_version.clone(),
                    })
                    .set(1);
            }
        }
        let (mut counted, mut last): (HashMap<CallerLabels, i64>, HashMap<CallerLabels, i64>) = Default::default();
        let label = |version: &str| version.parse::<CriVersion>().map_or("?", CriVersion::as_str);
        for caller in callers.report() {
            for (version, _) in &caller.calls {
                *counted.entry(CallerLabels { version: label(version), client: caller.client.clone() }).or_default() +=
                    1;
            }
            for (version, at) in &caller.last_calls {
                let at = i64::try_from(*at).unwrap_or(i64::MAX);
                let latest =
                    last.entry(CallerLabels { version: label(version), client: caller.client.clone() }).or_default();
                *latest = (*latest).max(at);
            }
        }
        self.callers.clear();
        for (labels, count) in counted {
            self.callers.get_or_create(&labels).set(count);
        }
        self.last_calls.clear();
        for (labels, at) in last {
            self.last_calls.get_or_create(&labels).set(at);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String");
        text
    }
}

/// Metrics connections open at once, at most. At the cap a new connection is still served: the
/// oldest connection that has not yet sent its request gives way (else the oldest of all), so
/// that idle or slow connections cannot keep a scraper out. A scraper sends its request as soon
/// as it connects, so the ones that give way are almost always those that never will.
pub const MAX_SCRAPERS: usize = 64;

/// How long a connection may take to send its request head. A scraper sends it at once; a
/// connection silent this long is closed, so it holds a slot for no longer than this.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// What the metrics endpoint needs to answer a scrape.
#[derive(Clone)]
pub struct Scrape {
    pub metrics: Arc<Metrics>,
    pub backends: Vec<Arc<Backend>>,
    pub callers: Arc<Callers>,
    pub budget: crate::budget::Budget,
    /// Each of several backends as it is now (`backends`; none without it).
    pub routed: Arc<dyn Fn() -> Vec<RoutedBackend> + Send + Sync>,
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics.listen {listen}: {source}")]
    Bind { listen: MetricsListen, source: std::io::Error },
}

/// A bound metrics endpoint; [`Endpoint::serve`] answers scrapes until shutdown.
pub enum Endpoint {
    Unix(tokio::net::UnixListener, crate::frontend::SocketFile),
    Tcp(tokio::net::TcpListener),
}

impl Endpoint {
    /// Binds `listen` (a unix socket: mode 0600, the parent directory made, a stale file
    /// replaced, a live one refused, as for the CRI socket).
    pub async fn bind(listen: &MetricsListen) -> Result<Endpoint, MetricsError> {
        let failed = |source| MetricsError::Bind { listen: listen.clone(), source };
        match listen {
            MetricsListen::Unix(path) => {
                let (listener, file) = crate::frontend::bind(path, 0o600, None)
                    .await
                    .map_err(|e| failed(std::io::Error::other(e.to_string())))?;
                Ok(Endpoint::Unix(listener, file))
            }
            MetricsListen::Tcp(address) => {
                Ok(Endpoint::Tcp(tokio::net::TcpListener::bind(address).await.map_err(failed)?))
            }
        }
    }

    pub async fn serve(self, scrape: Scrape, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        // The connections being served, oldest first; only this loop adds or removes them.
        let mut open: std::collections::VecDeque<Connection> = std::collections::VecDeque::new();
        loop {
            tokio::select! {
                accepted = accept(&self) => match accepted {
                    Ok(io) => {
                        open.retain(|c| !c.task.is_finished());
                        if open.len() >= MAX_SCRAPERS {
                            let silent = open.iter().position(|c| !c.asked.load(Ordering::Relaxed));
                            if let Some(oldest) = open.remove(silent.unwrap_or(0)) {
                                tracing::debug!("{MAX_SCRAPERS} metrics connections are open: closing the oldest");
                                oldest.task.abort();
                            }
                        }
                        let asked = Arc::new(AtomicBool::new(false));
                        let task = tokio::spawn(answer_scrapes(io, scrape.clone(), asked.clone())).abort_handle();
                        open.push_back(Connection { asked, task });
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accepting a metrics connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                () = &mut shutdown => break,
            }
        }
        if let Endpoint::Unix(_, file) = self {
            file.remove_if_ours();
        }
    }
}

/// A metrics connection being served.
struct Connection {
    /// Set once its request head has arrived.
    asked: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Io for T {}

async fn accept(endpoint: &Endpoint) -> std::io::Result<Box<dyn Io>> {
    Ok(match endpoint {
        Endpoint::Unix(listener, _) => Box::new(listener.accept().await?.0),
        Endpoint::Tcp(listener) => Box::new(listener.accept().await?.0),
    })
}

/// HTTP/1.1 on one connection: `GET /metrics` answers the scrape, anything else 404. `asked` is
/// set when the request head has arrived.
async fn answer_scrapes(io: Box<dyn Io>, scrape: Scrape, asked: Arc<AtomicBool>) {
    use http_body_util::Full;
    let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
        asked.store(true, Ordering::Relaxed);
        let scrape = scrape.clone();
        async move {
            let response = if request.uri().path() == "/metrics" {
                let text = scrape.metrics.render(&scrape);
                http::Response::builder()
                    .header(http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")
                    .body(Full::new(bytes::Bytes::from(text)))
            } else {
                http::Response::builder()
                    .status(http::StatusCode::NOT_FOUND)
                    .body(Full::new(bytes::Bytes::from_static(b"cri-bridge serves /metrics\n")))
            };
            Ok::<_, std::convert::Infallible>(response.expect("a valid response"))
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        // One scrape per connection is what Prometheus needs; a held connection holds a slot.
        .keep_alive(false)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "metrics connection ended with an error");
    }
}

impl LossObserver for Metrics {
    /// Counts `count` losses of `field` (`Message.field`, `Message.#N`, or `*` for answers).
    fn lost(&self, field: &str, action: Action, side: Side, count: u64) {
        let field = match field.split_once(".#") {
            Some((message, _)) => format!("{message}.#unknown"),
            None => field.to_string(),
        };
        let action = match action {
            Action::Reject => "reject",
            Action::Warn => "warn",
            Action::Allow => "allow",
        };
        self.losses.get_or_create(&LossLabels { field, action, direction: side_label(side) }).inc_by(count);
    }
}

mod denials;
mod labels;
mod memory;
mod routed;
pub use crate::error::code_name;
pub use routed::RoutedBackend;
#[cfg(test)]
mod tests;
