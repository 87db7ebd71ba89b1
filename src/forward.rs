//! The one forwarding path (DESIGN principle 6): every RPC of every frontend version, unary or
//! server-streaming, goes through `Forwarder`.
//!
//! Per call: find the backend's version, look up the precomputed `Plan` for (caller's version,
//! backend's version, RPC), convert the request (or pass its bytes unchanged when the versions
//! match), apply the loss policy, call with the caller's metadata and deadline, and convert the
//! answer back. The backend's status comes back unchanged.

use crate::backend::{Backend, Discovered};
use crate::convert::policy::{LossPolicy, Side};
use crate::convert::scan::{self, Limits};
use crate::convert::{Cx, Route};
use crate::error::Error;
use crate::grpc::{ByteStream, Handler, Rpc};
use crate::version::CriVersion;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::metadata::MetadataMap;
use tonic::{Code, Extensions, Request, Response, Status};

/// How one RPC travels from one frontend version to one backend version; computed at start.
struct Plan {
    /// The RPC as the backend's version names it; `None` when that version lacks it.
    backend: Option<Rpc>,
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

type PlanKey = (CriVersion, CriVersion, &'static str, &'static str);

pub struct Forwarder {
    runtime: Arc<Backend>,
    image: Arc<Backend>,
    policy: Arc<LossPolicy>,
    plans: HashMap<PlanKey, Arc<Plan>>,
}

impl Forwarder {
    /// `image` may be the same backend as `runtime` (no separate image endpoint).
    pub fn new(runtime: Arc<Backend>, image: Arc<Backend>, policy: Arc<LossPolicy>) -> Forwarder {
        let mut plans = HashMap::new();
        for frontend in CriVersion::NEWEST_FIRST {
            let schema = frontend.schema();
            for info in schema.rpcs {
                let rpc = Rpc { version: frontend, info };
                for backend in CriVersion::NEWEST_FIRST {
                    let target = rpc.in_version(backend);
                    let route = |name, from, to| {
                        Route::new(name, from, to).expect("an RPC shared by two versions has the same messages")
                    };
                    let (request, response) = match target {
                        Some(_) => (route(info.request, frontend, backend), route(info.response, backend, frontend)),
                        None => (Route::identity(), Route::identity()),
                    };
                    let request_index = schema.message_index(info.request).expect("request message in schema");
                    let backend_schema = backend.schema();
                    let backend_request_index = backend_schema.message_index(info.request).unwrap_or(request_index);
                    let scan_passthrough = target.is_some() && scan::worth_scanning(backend, backend_request_index);
                    let plan = Plan {
                        backend: target,
                        request,
                        response,
                        request_index,
                        backend_request_index,
                        scan_passthrough,
                    };
                    plans.insert((frontend, backend, info.service, info.method), Arc::new(plan));
                }
            }
        }
        Forwarder { runtime, image, policy, plans }
    }

    fn backend_for(&self, rpc: Rpc) -> &Arc<Backend> {
        if rpc.info.service == "ImageService" {
            &self.image
        } else {
            &self.runtime
        }
    }

    fn plan(&self, rpc: Rpc, backend: CriVersion) -> Arc<Plan> {
        self.plans[&(rpc.version, backend, rpc.info.service, rpc.info.method)].clone()
    }

    /// Finds the backend's version and the plan for it, then sends the request with `send`.
    /// A call answered `UNIMPLEMENTED` on a connection newer than the discovered version (the
    /// runtime was restarted, maybe upgraded) was not executed: probe again and retry once. An
    /// RPC the discovered version lacks is checked the same way (one probe) when the discovery
    /// is over a second old, before the caller is told `UNIMPLEMENTED`.
    async fn call<T>(
        &self,
        rpc: Rpc,
        request: Request<Bytes>,
        send: impl AsyncFn(&Backend, Rpc, Request<Bytes>) -> Result<Response<T>, Status>,
    ) -> Result<(Response<T>, Arc<Plan>, Discovered), Status> {
        let backend = self.backend_for(rpc);
        let (metadata, _, body) = request.into_parts();
        // The caller's deadline, from the moment its call arrived: time spent here (probing,
        // converting, a retry) is taken from what the runtime is given.
        let deadline = crate::grpc::timeout_of(&metadata).map(|t| tokio::time::Instant::now() + t);
        let mut retried = false;
        loop {
            let found = match deadline {
                Some(deadline) => {
                    tokio::time::timeout_at(deadline, backend.version()).await.map_err(|_| expired())??
                }
                None => backend.version().await?,
            };
            let plan = self.plan(rpc, found.version);
            let Some(target) = plan.backend else {
                // The runtime may have been upgraded since it was probed, with no call (and so no
                // reconnection) in between: ask again before saying it lacks the RPC, at most
                // once a second.
                if !retried && found.at.elapsed() > REPROBE_AFTER {
                    backend.forget();
                    retried = true;
                    continue;
                }
                return Err(Error::NotInBackendVersion { rpc: rpc.name(), backend: found.version }.into());
            };
            let converted = self.convert_request(rpc, &plan, &found, &body)?;
            let mut outgoing = Request::from_parts(forwardable(&metadata), Extensions::new(), converted);
            if let Some(deadline) = deadline {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                if remaining.is_zero() {
                    return Err(expired());
                }
                outgoing.set_timeout(remaining);
            }
            match send(backend, target, outgoing).await {
                Ok(response) => return Ok((response, plan, found)),
                Err(status) if status.code() == Code::Unimplemented && !retried && backend.is_stale(&found) => {
                    backend.forget();
                    retried = true;
                }
                // Not retried: a call already sent may have run.
                Err(status) if crate::grpc::is_connect_error(&status) || crate::grpc::is_connection_lost(&status) => {
                    backend.forget();
                    let detail = status.message().to_string();
                    return Err(Error::Unreachable { endpoint: backend.endpoint.clone(), detail }.into());
                }
                Err(status) => {
                    if status.code() == Code::Unavailable {
                        backend.forget();
                    }
                    return Err(status);
                }
            }
        }
    }

    /// Converts the request for the runtime (or passes its bytes), and judges every field the
    /// runtime would not see: unknown to cri-bridge's schema, lost by the conversion, or beyond
    /// what the runtime's revision and features act on.
    fn convert_request(&self, rpc: Rpc, plan: &Plan, found: &Discovered, body: &Bytes) -> Result<Bytes, Error> {
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
            blocked: Some(&profile.blocked),
            minor: profile.runtime.minor,
        };
        let backend_schema = found.version.schema();
        let mut losses = Vec::new();
        let converted = if plan.request.is_identity() {
            if !plan.scan_passthrough {
                return Ok(body.clone());
            }
            scan::scan(backend_schema, plan.backend_request_index, body, runtime, &mut losses)
                .map_err(|e| bad(e.to_string()))?;
            body.clone()
        } else {
            scan::scan(rpc.version.schema(), plan.request_index, body, Limits::UNKNOWN_ONLY, &mut losses)
                .map_err(|e| bad(e.to_string()))?;
            let mut cx = Cx::new();
            let converted = plan.request.run(body, &mut cx).map_err(|e| bad(e.to_string()))?;
            losses.extend(cx.into_losses());
            let after = Limits { unknown: false, ..runtime };
            scan::scan(backend_schema, plan.backend_request_index, &converted, after, &mut losses)
                .map_err(|e| bad(e.to_string()))?;
            converted.into()
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
        if plan.response.is_identity() {
            return Ok(body);
        }
        let bad = |detail: String| Error::BadResponse {
            rpc: rpc.name(),
            version: backend,
            message: rpc.info.response,
            detail,
        };
        let mut cx = Cx::counting();
        let mut converted = plan.response.run(&body, &mut cx).map_err(|e| bad(e.to_string()))?;
        self.policy.count_response_losses(cx.loss_count());
        if rpc.info.method == "Version" {
            converted = rewrite_api_version(&converted, rpc.version).map_err(|e| bad(e.to_string()))?;
        }
        Ok(converted.into())
    }
}

/// How old a discovery must be before an RPC missing from its version makes cri-bridge probe
/// again (a runtime upgraded while no call was made).
const REPROBE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// From this revision `ContainerEventResponse` #4 is a `PodSandboxStatus`; before (1.25) it was
/// a `PodSandboxMetadata`, which does not decode as one.
const EVENT_STATUS_SINCE: u8 = 26;

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

/// The deadline passed while cri-bridge held the call (probing a runtime that is slow to answer).
fn expired() -> Status {
    Status::deadline_exceeded("deadline exceeded before the call reached the container runtime")
}

/// `Version.runtime_api_version` names the version the caller speaks, not the backend's.
/// (`VersionResponse` has the same fields in every version.)
fn rewrite_api_version(bytes: &[u8], caller: CriVersion) -> Result<Vec<u8>, prost::DecodeError> {
    let mut response = crate::api::v1::VersionResponse::decode(bytes)?;
    response.runtime_api_version = caller.as_str().to_string();
    Ok(response.encode_to_vec())
}

/// The caller's metadata minus what describes the caller's own HTTP/2 request (its body's
/// `content-length` among them: a converted body has another length) and the deadline (sent as
/// the time left); everything else (`traceparent`, …) passes on unchanged.
fn forwardable(metadata: &MetadataMap) -> MetadataMap {
    let mut headers = metadata.clone().into_headers();
    for hop in [
        "te",
        "content-type",
        "content-length",
        "user-agent",
        "host",
        "grpc-accept-encoding",
        "grpc-encoding",
        // Set again from the caller's remaining time.
        "grpc-timeout",
    ] {
        headers.remove(hop);
    }
    MetadataMap::from_headers(headers)
}

/// One debug line per call (its stream's first answer for server-streaming calls): what a
/// failing client step is matched with. Its fields are only formatted when debug is enabled.
fn log_answer<T>(rpc: Rpc, answer: &Result<T, Status>) {
    match answer {
        Ok(_) => tracing::debug!(rpc = %rpc.path(), code = "OK", "answered"),
        Err(status) => {
            tracing::debug!(rpc = %rpc.path(), code = ?status.code(), message = status.message(), "answered")
        }
    }
}

impl Handler for Forwarder {
    fn unary(
        self: Arc<Self>,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> BoxFuture<'static, Result<Response<Bytes>, Status>> {
        Box::pin(async move {
            let answer = async {
                let (response, plan, found) = self
                    .call(rpc, request, async |b: &Backend, target, req| b.client().unary(target, req).await)
                    .await?;
                let (metadata, body, _) = response.into_parts();
                let body = self.convert_response(rpc, &plan, &found, body)?;
                Ok(Response::from_parts(metadata, body, Extensions::new()))
            }
            .await;
            log_answer(rpc, &answer);
            answer
        })
    }

    fn server_streaming(
        self: Arc<Self>,
        rpc: Rpc,
        request: Request<Bytes>,
    ) -> BoxFuture<'static, Result<Response<ByteStream>, Status>> {
        Box::pin(async move {
            let called = self
                .call(rpc, request, async |b: &Backend, target, req| b.client().server_streaming(target, req).await)
                .await;
            log_answer(rpc, &called);
            let (response, plan, found) = called?;
            let (metadata, stream, _) = response.into_parts();
            // Dropping this stream (the caller went away) drops the backend's: the cancellation
            // reaches the runtime as a reset of its stream.
            let this = self.clone();
            let converted = stream.map(move |item| {
                let bytes = item?;
                this.convert_response(rpc, &plan, &found, bytes).map_err(Status::from)
            });
            Ok(Response::from_parts(metadata, converted.boxed(), Extensions::new()))
        })
    }
}
