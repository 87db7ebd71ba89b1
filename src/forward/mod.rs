//! The one forwarding path (DESIGN principle 6): every RPC of every frontend version, unary or
//! server-streaming, goes through `Forwarder`.
//!
//! Per call (`call.rs`): find the RPC by its path and the backend's version, look up the
//! precomputed `Plan` for (caller's version, backend's version, RPC), convert the request (or
//! pass its bytes unchanged when the versions match), apply the loss policy, open a stream to the
//! runtime with the caller's metadata and what is left of its deadline, and hand the answer back:
//! as it came when the versions match, message by message converted when they do not. The
//! runtime's status comes back unchanged.

mod audit;
mod backends;
mod call;
mod calls;
mod conversion;
mod endpoint;
mod failure;
mod fan_out;
mod hooks;
mod host_paths;
mod lacking;
mod offload;
mod owners;
mod pod_scope;
mod reply;
mod request_body;
mod router;
mod session;

pub use backends::Routed;
pub use endpoint::{Access, Rules};
pub use hooks::{ClientRecord, Identity, Observer, OwnCalls};
pub use session::{Client, Session};

use crate::backend::{Backend, Discovered};
use crate::budget::Budget;
use crate::config::Config;
use crate::convert::policy::{LossPolicy, Side};
use crate::convert::scan::{self, Limits};
use crate::convert::{Cx, Route};
use crate::error::Error;
use crate::grpc::Rpc;
use crate::version::CriVersion;
use bytes::Bytes;
use prost::Message;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// How one RPC travels from one frontend version to one backend version; computed at start.
struct Plan {
    /// The backend version this plan is for.
    version: CriVersion,
    /// The RPC's URI in the backend's version; `None` when that version lacks it.
    backend: Option<http::Uri>,
    /// The Kubernetes minor that first has the RPC in the backend's version: a runtime that
    /// serves the RPC decodes at least that revision.
    since: u8,
    request: Route,
    response: Route,
    /// The request message in the frontend schema, for the unknown-field scan.
    request_index: usize,
    /// The request message in the backend schema, for the scan of what the runtime receives.
    backend_request_index: usize,
    /// Whether a passthrough request is scanned: its message tree has a field or enum value
    /// newer than the version's first revision, or a message where an unknown number matters.
    /// The others (Version, Status, the status reads) pass unscanned.
    scan_passthrough: bool,
}

/// One RPC of one served version, and its plan for each backend version.
struct Method {
    rpc: Rpc,
    plans: Vec<Plan>,
    /// Where it goes among several backends.
    route: crate::routing::MethodRoute,
}

impl Method {
    fn plan(&self, backend: CriVersion) -> &Plan {
        self.plans.iter().find(|p| p.version == backend).expect("a plan for every backend version")
    }
}

/// The forwarder, serving one socket's connections under that socket's rules.
pub struct Scoped {
    pub forwarder: Arc<Forwarder>,
    pub access: Arc<Access>,
}

pub struct Forwarder {
    /// Every runtime, in the order of `backends` (one without it).
    backends: Vec<Routed>,
    /// Where calls go among several backends (`None`: one backend, every call to it).
    router: Option<owners::Router>,
    policy: Arc<LossPolicy>,
    /// By gRPC path (`/runtime.v1.RuntimeService/Version`), for the served versions only.
    methods: HashMap<String, Arc<Method>>,
    max_message_size: usize,
    /// `limits.request_timeout_seconds`.
    request_timeout: std::time::Duration,
    /// `limits.stalled_caller_seconds`.
    stalled_caller: std::time::Duration,
    /// `limits.buffer_mib`, shared by every client connection.
    budget: Budget,
    /// Where large messages are converted (`limits.conversion_threads`).
    offload: offload::Offload,
    /// `limits.buffer_per_connection_mib`, in bytes: what converting one message may allocate.
    working_memory: usize,
    /// Told what happened to each connection and call (metrics, the callers report).
    observer: Arc<dyn Observer>,
    /// Answers cri-bridge's own questions (`cri-bridge probe`, `cri-bridge callers`).
    own_calls: Arc<dyn OwnCalls>,
    /// Held while a pod-scoped create or checkpoint's host paths are judged and the runtime
    /// answers it (`pod_scope::Held`).
    pod_paths: Arc<tokio::sync::Mutex<()>>,
}

impl Forwarder {
    /// Serves `config.versions` from `backends` (routed by `config.routing` when there are
    /// several), within `config.max_message_size` and `config.limits`.
    pub fn new(
        backends: Vec<Routed>,
        policy: Arc<LossPolicy>,
        config: &Config,
        observer: Arc<dyn Observer>,
        own_calls: Arc<dyn OwnCalls>,
        budget: Budget,
    ) -> Forwarder {
        let served = &config.versions;
        let mut methods = HashMap::new();
        for &frontend in served {
            let schema = frontend.schema();
            for info in schema.rpcs {
                let rpc = Rpc { version: frontend, info };
                let plans = CriVersion::NEWEST_FIRST.iter().map(|&backend| plan(rpc, backend)).collect();
                let route = crate::routing::MethodRoute::of(frontend, info);
                methods.insert(rpc.path(), Arc::new(Method { rpc, plans, route }));
            }
        }
        let router = config.routing.clone().filter(|_| backends.len() > 1).map(owners::Router::new);
        Forwarder {
            backends,
            router,
            policy,
            methods,
            max_message_size: config.max_message_size,
            request_timeout: config.limits.request_timeout,
            stalled_caller: config.limits.stalled_caller,
            budget,
            offload: offload::Offload::new(config.limits.conversion_threads),
            working_memory: config.limits.buffer_per_connection_bytes,
            observer,
            own_calls,
            pod_paths: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// The memory bound shared by every client connection.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The endpoint a call of `rpc` to backend `target` goes to.
    fn backend_for(&self, rpc: Rpc, target: usize) -> &Arc<Backend> {
        self.backends[target].backend_for(rpc)
    }

    /// Converts the request for the runtime (or passes its bytes), and judges every field the
    /// runtime would not see: unknown to cri-bridge's schema, lost by the conversion, or beyond
    /// what the runtime's revision and features act on. `None`: the bytes pass as they came.
    /// `handler`: the runtime handler the call's pod runs on, where the handlers' features
    /// differ (`None`: judged by every handler's).
    fn convert_request(
        &self,
        rpc: Rpc,
        plan: &Plan,
        found: &Discovered,
        body: &Bytes,
        handler: Option<&str>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let bad = |detail: String| Error::BadRequest {
            rpc: rpc.name(),
            version: rpc.version,
            message: rpc.info.request,
            detail,
        };
        let profile = &found.profile;
        let runtime = Limits {
            // A runtime newer than cri-bridge's schema may know what cri-bridge does not.
            unknown: !profile.runtime.is_newer_than_schema(),
            blocked: Some(profile.blocked_on(handler)),
            // A runtime that serves the RPC (else it answers UNIMPLEMENTED, and nothing runs)
            // decodes at least the RPC's revision, whatever its assumed revision.
            minor: profile.runtime.minor.max(plan.since),
            without_swap: crate::node::without_swap(),
        };
        let backend_schema = found.version.schema();
        let mut losses = Vec::new();
        let converted = if plan.request.is_identity() {
            if !plan.scan_passthrough {
                return Ok(None);
            }
            scan::scan(backend_schema, plan.backend_request_index, body, runtime, &mut losses)
                .map_err(|e| bad(e.to_string()))?;
            None
        } else {
            let started = std::time::Instant::now();
            scan::scan(rpc.version.schema(), plan.request_index, body, Limits::UNKNOWN_ONLY, &mut losses)
                .map_err(|e| bad(e.to_string()))?;
            let mut cx = Cx::new();
            // The same message on both sides passes as it came (`convert::copy`).
            let mut converted = plan.request.convert(body, &mut cx).map_err(|e| bad(e.to_string()))?;
            if found.version == CriVersion::V1 {
                if let Some(filled) = crate::convert::fill::for_v1_runtime(rpc.info.method, &converted) {
                    converted = Cow::Owned(filled);
                }
            }
            self.observer.converted(Side::Request, started.elapsed());
            losses.extend(cx.into_losses());
            let after = Limits { unknown: false, ..runtime };
            scan::scan(backend_schema, plan.backend_request_index, &converted, after, &mut losses)
                .map_err(|e| bad(e.to_string()))?;
            match converted {
                Cow::Borrowed(_) => None,
                Cow::Owned(converted) => Some(converted),
            }
        };
        if !losses.is_empty() {
            self.policy.apply(Side::Request, &rpc.name(), &profile.runtime, losses)?;
        }
        Ok(converted)
    }

    fn convert_response(&self, rpc: Rpc, plan: &Plan, found: &Discovered, body: Bytes) -> Result<Bytes, Error> {
        let backend = found.version;
        if rpc.info.method == "GetContainerEvents" && found.profile.runtime.minor < EVENT_STATUS_SINCE {
            return self.convert_old_event(rpc, plan, found, body);
        }
        if plan.response.is_identity() && !answer_is_read(rpc, found) {
            return Ok(body);
        }
        let bad = |detail: String| Error::BadResponse {
            rpc: rpc.name(),
            version: backend,
            message: rpc.info.response,
            detail,
        };
        let started = std::time::Instant::now();
        let mut cx = Cx::counting();
        let converted = plan.response.convert(&body, &mut cx).map_err(|e| bad(e.to_string()))?;
        self.policy.count_response_losses(cx.loss_count());
        // The same message on both sides passes as it came (`convert::copy`), without a copy.
        let mut converted = match converted {
            Cow::Borrowed(_) => body.clone(),
            Cow::Owned(converted) => converted.into(),
        };
        if rpc.info.method == "Version" {
            let passed = plan.response.is_identity();
            converted = match rewrite_api_version(&converted, rpc.version, passed).map_err(|e| bad(e.to_string()))? {
                Some(rewritten) => rewritten.into(),
                None => converted,
            };
        }
        if crate::convert::streaming_url::METHODS.contains(&rpc.info.method) {
            if let Some(mended) =
                crate::convert::streaming_url::with_scheme(&converted).map_err(|e| bad(e.to_string()))?
            {
                tracing::debug!(rpc = %rpc.path(), "the runtime's streaming URL had no scheme: http");
                converted = mended.into();
            }
        }
        self.observer.converted(Side::Response, started.elapsed());
        Ok(converted)
    }
}

/// How long a call of cri-bridge's own on a caller's connection (who holds an id, what a pod
/// is) may take.
const LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Forwarder {
    /// One `RuntimeService` call of cri-bridge's own to backend `index`, in the version it
    /// speaks, on the caller's own connection to it (what it costs, it costs that caller). These
    /// requests and answers encode alike in every version. A backend that cannot be reached is
    /// `UNAVAILABLE` naming it.
    async fn ask(&self, session: &Session, index: usize, method: &str, request: &[u8]) -> Result<Bytes, tonic::Status> {
        let backend = &self.backends[index].runtime;
        let found = backend.version().await.map_err(tonic::Status::from)?;
        let Some(info) = found.version.schema().rpc("RuntimeService", method) else {
            return Err(tonic::Status::unimplemented(format!("CRI {} has no {method}", found.version)));
        };
        let path = Rpc { version: found.version, info }.path();
        let upstream = session.upstream("RuntimeService", index);
        let answer = upstream.unary(&path, request, LOOKUP_TIMEOUT, self.max_message_size).await;
        answer.map_err(|status| match status.code() {
            tonic::Code::Unavailable => {
                let detail = status.message().to_string();
                Error::Unreachable { endpoint: backend.who(), detail }.into()
            }
            _ => status,
        })
    }

    /// The request head of a call to the runtime: `uri`, the caller's `metadata`, and what is
    /// left of its deadline. `None`: the deadline has passed.
    fn runtime_request(
        uri: &http::Uri,
        metadata: &http::HeaderMap,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<http::Request<()>> {
        let mut request = http::Request::new(());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = metadata.clone();
        if let Some(deadline) = deadline {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return None;
            }
            request.headers_mut().insert("grpc-timeout", crate::grpc::encode_timeout(remaining));
        }
        Some(request)
    }
}

/// How often every backend's sandboxes and containers are listed again, among several.
pub const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// How old a discovery must be before an RPC missing from its version makes cri-bridge probe
/// again (a runtime upgraded while no call was made).
const REPROBE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// From this revision `ContainerEventResponse` #4 is a `PodSandboxStatus`; before (1.25) it was
/// a `PodSandboxMetadata`, which does not decode as one.
const EVENT_STATUS_SINCE: u8 = 26;

fn plan(rpc: Rpc, backend: CriVersion) -> Plan {
    let frontend = rpc.version;
    let info = rpc.info;
    let target = rpc.in_version(backend);
    let route =
        |name, from, to| Route::new(name, from, to).expect("an RPC shared by two versions has the same messages");
    let (request, response) = match target {
        Some(_) => (route(info.request, frontend, backend), route(info.response, backend, frontend)),
        None => (Route::identity(), Route::identity()),
    };
    let schema = frontend.schema();
    let request_index = schema.message_index(info.request).expect("request message in schema");
    let backend_request_index = backend.schema().message_index(info.request).unwrap_or(request_index);
    let scan_passthrough = target.is_some() && scan::worth_scanning(backend, backend_request_index);
    let uri = |target: Rpc| {
        let uri = format!("http://localhost{}", target.path());
        uri.parse().expect("a CRI path makes a valid URI")
    };
    Plan {
        version: backend,
        since: target.map_or(0, |t| t.info.since),
        backend: target.map(uri),
        request,
        response,
        request_index,
        backend_request_index,
        scan_passthrough,
    }
}

impl Forwarder {
    /// An event from a 1.25-revision runtime: its #4 (`pod_sandbox_metadata`) is left out, and
    /// counted, rather than handed on as a `PodSandboxStatus` it is not (with no state, it would
    /// read as SANDBOX_READY).
    fn convert_old_event(&self, rpc: Rpc, plan: &Plan, found: &Discovered, body: Bytes) -> Result<Bytes, Error> {
        let bad = |detail: String| Error::BadResponse {
            rpc: rpc.name(),
            version: found.version,
            message: rpc.info.response,
            detail,
        };
        let (kept, dropped) = scan::without_field(&body, 4).map_err(|e| bad(e.to_string()))?;
        self.policy.count_response_losses(usize::from(dropped));
        let mut cx = Cx::counting();
        let converted = plan.response.run(&kept, &mut cx).map_err(|e| bad(e.to_string()))?;
        self.policy.count_response_losses(cx.loss_count());
        Ok(converted.into())
    }
}

/// Whether the answer to `rpc` is read even where the versions match: a `Version` of a runtime
/// the probe found named `docker` (cri-dockerd), so that `runtime_api_version` is Docker's, and
/// every streaming URL (`convert::streaming_url`: cri-dockerd's have no scheme). Neither is on the
/// hot path: the kubelet asks `Version` once a start and these only for `kubectl` commands.
fn answer_is_read(rpc: Rpc, found: &Discovered) -> bool {
    (rpc.info.method == "Version" && found.profile.runtime.runtime_name == crate::revision::DOCKER)
        || crate::convert::streaming_url::METHODS.contains(&rpc.info.method)
}

/// `Version.runtime_api_version` names the version the caller speaks, not the backend's; for a
/// runtime named `docker` (cri-dockerd), Docker's Engine API version, as dockershim answered
/// and kubelets up to 1.23 require (`crate::revision::engine_api_version`), even where the
/// versions match (`passed`). `None`: the answer passes as it came. (`VersionResponse` has the
/// same fields in every version.)
fn rewrite_api_version(bytes: &[u8], caller: CriVersion, passed: bool) -> Result<Option<Vec<u8>>, prost::DecodeError> {
    let mut response = crate::api::v1::VersionResponse::decode(bytes)?;
    let docker = response.runtime_name == crate::revision::DOCKER;
    let engine_api = docker.then(|| crate::revision::engine_api_version(&response.runtime_version)).flatten();
    if passed && engine_api.is_none() {
        return Ok(None);
    }
    response.runtime_api_version = engine_api.unwrap_or_else(|| caller.as_str().to_string());
    Ok(Some(response.encode_to_vec()))
}
