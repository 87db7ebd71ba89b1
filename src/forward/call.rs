//! One call, from the caller's stream to the runtime's and back (see `relay` for the mechanics).

use super::audit::Named;
use super::failure::Failure;
use super::fan_out::Fanned;
use super::lacking::{emulate, missing};
use super::reply::{answer_control, answer_message, grpc_code, send_message};
use super::request_body::{read_request, read_request_body, CONTROL_REQUEST_LIMIT};
use super::router::Target;
use super::{Client, Forwarder, Method, Session, EVENT_STATUS_SINCE, REPROBE_AFTER};
use crate::backend::{Backend, Discovered};
use crate::budget::Charge;
use crate::error::Error;
use crate::grpc::{timeout_of, Rpc};
use crate::relay::answer::Answer;
use crate::relay::message::{self, Meter, Splitter, PREFIX_LEN};
use crate::relay::upstream::{Unsent, Upstream, OWN_CALL};
use crate::version::CriVersion;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use http::{HeaderMap, HeaderName};
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Code, Status};

/// The caller's headers that describe its own HTTP/2 request rather than the call (its body's
/// `content-length` among them: a converted body has another length), or are set anew (the
/// deadline, sent as the time left). Everything else (`traceparent`, `user-agent`, …) passes on.
static NOT_FORWARDED: [HeaderName; 8] = [
    HeaderName::from_static("te"),
    HeaderName::from_static("content-type"),
    HeaderName::from_static("content-length"),
    HeaderName::from_static("host"),
    HeaderName::from_static("grpc-accept-encoding"),
    HeaderName::from_static("grpc-encoding"),
    HeaderName::from_static("grpc-timeout"),
    OWN_CALL,
];

impl Forwarder {
    /// Serves one stream of a client connection to its end, counting it (metrics, `caller`).
    /// True when the caller cancelled the call (reset its stream) before the answer's end.
    pub async fn serve_call(
        self: Arc<Self>,
        client: Arc<Client>,
        request: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
        mut arrival: crate::relay::serve::Arrival,
    ) -> bool {
        let caller = &client.caller;
        let started = Instant::now();
        let _in_flight = super::hooks::InFlight::begin(&*self.observer);
        let mut answer = Answer::new(respond, self.stalled_caller);
        let (head, body) = request.into_parts();
        let Some(method) = self.methods.get(head.uri.path()) else {
            if let Some(json) = self.own_calls.answer(head.uri.path()) {
                // Read first: a caller whose body is cut off by the answer's end sees an error.
                if answer.unless_gone(read_request_body(body, CONTROL_REQUEST_LIMIT)).await.is_ok() {
                    arrival.arrived();
                    // Judged once its request is here, as every call is: they tell of every
                    // caller and backend, so only the main socket's callers that may change
                    // the node read them.
                    match client.access.judge_own_call(head.uri.path(), &client.identity) {
                        Ok(()) => answer_control(&mut answer, json).await,
                        Err(denied) => {
                            let status = Status::from(denied);
                            answer.status(&status);
                            let path = head.uri.path().trim_start_matches('/');
                            self.observer.denied(&client.access.socket, path);
                            super::audit::record_own_call_denied(path, &client);
                        }
                    }
                }
                return false;
            }
            let status = Status::unimplemented(format!("unknown service or method {}", head.uri.path()));
            answer.status(&status);
            self.observer.answered(None, None, status.code(), started.elapsed());
            return false;
        };
        let rpc = method.rpc;
        // `cri-bridge probe` asks in every version: it is no caller to migrate.
        if !(head.headers.contains_key(&OWN_CALL) && caller.is_cri_bridge()) {
            caller.called(rpc.version);
        }
        // The caller's deadline, from the moment its call arrived: time spent here (probing,
        // converting, a retry) is taken from what the runtime is given.
        let deadline = timeout_of(&head.headers).map(|timeout| started + timeout);
        let (mut backend_version, mut named, mut went) = (None, Named::default(), None);
        // Boxed: the call's state is large, and the task that holds it is moved on spawning.
        let call = Box::pin(self.call(
            method,
            &client,
            head.headers,
            body,
            deadline,
            &mut answer,
            (&mut backend_version, &mut named, &mut went),
            &mut arrival,
        ));
        let mut outcome = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, call).await.unwrap_or_else(|_| Err(expired().into())),
            None => call.await,
        };
        if let (Err(Failure::Gone), Some(after)) = (&outcome, answer.stalled()) {
            outcome = Err(Error::CallerStalled { rpc: rpc.name(), after }.into());
        }
        let (code, cancelled) = match outcome {
            Ok(code) => {
                tracing::debug!(rpc = %rpc.path(), ?code, "answered");
                (code, false)
            }
            Err(Failure::Status(status)) => {
                tracing::debug!(rpc = %rpc.path(), code = ?status.code(), message = status.message(), "answered");
                answer.status(&status);
                (status.code(), false)
            }
            Err(Failure::Gone) => {
                tracing::debug!(rpc = %rpc.path(), "the caller went away");
                (Code::Cancelled, true)
            }
            Err(Failure::Reset) => {
                tracing::debug!(rpc = %rpc.path(), "the runtime reset the call");
                (Code::Cancelled, false)
            }
        };
        self.observer.answered(Some(rpc), backend_version, code, started.elapsed());
        // Among several backends: counted for the one it went to, or for each (`None`: every one).
        match (self.router.is_some(), went) {
            (true, Some(Some(target))) => self.observer.routed(&self.backends[target].name, code),
            (true, Some(None)) => self.backends.iter().for_each(|b| self.observer.routed(&b.name, code)),
            _ => {}
        }
        if named.denied {
            self.observer.denied(&client.access.socket, &rpc.name());
        }
        super::audit::record(rpc, &client, &named, code);
        cancelled
    }

    /// Sends the request (converted, or as it came) and relays the answer. A call answered
    /// `UNIMPLEMENTED` by a runtime newer than the discovered version (restarted, maybe
    /// upgraded) was not executed: probe again and retry once. An RPC the
    /// discovered version lacks is checked the same way (one probe) when the discovery is over a
    /// second old, before the caller is told `UNIMPLEMENTED`.
    #[allow(clippy::too_many_arguments)]
    async fn call(
        self: &Arc<Self>,
        method: &Arc<Method>,
        client: &Client,
        headers: HeaderMap,
        body: RecvStream,
        deadline: Option<Instant>,
        answer: &mut Answer,
        (backend_version, named, went): (&mut Option<CriVersion>, &mut Named, &mut Option<Option<usize>>),
        arrival: &mut crate::relay::serve::Arrival,
    ) -> Result<Code, Failure> {
        let rpc = method.rpc;
        let session = &client.session;
        // What this call holds of the connection's memory bound: its request, and what it converts.
        let mut charge = session.budget.charge();
        // A client that trickles its request is cut off; every real client sends it at once.
        let read = read_request(rpc, body, self.max_message_size, &mut charge);
        let read = tokio::time::timeout(self.request_timeout, read);
        let frame = match answer.unless_gone(read).await? {
            Ok(frame) => frame?,
            Err(_) => {
                return Err(Status::deadline_exceeded(format!(
                    "the {} request did not arrive within {:?} (limits.request_timeout_seconds)",
                    rpc.name(),
                    self.request_timeout
                ))
                .into())
            }
        };
        // Only now is the connection busy: a stream that never sends its request does not keep
        // its connection from being reclaimed at a connection limit.
        arrival.arrived();
        let mut message = frame.slice(PREFIX_LEN..);
        // Judged by the socket's rules once the request is here, before anything reaches the
        // runtime; what is sent may be the request changed (no verbose info, a list narrowed).
        *named = Named::read(rpc, &message);
        let judged = match client.access.judge(rpc, &message, &client.identity) {
            Ok(judged) => judged,
            Err(denied) => {
                *named = Named { denied: true, ..Named::of(rpc, &message) };
                return Err(denied.into());
            }
        };
        let frame = match judged.rewritten {
            Some(rewritten) => message::frame(&rewritten),
            None => frame,
        };
        message = frame.slice(PREFIX_LEN..);
        let pod = judged.pod.as_ref().map(|scope| scope.uid.as_str());
        let mut metadata = headers;
        for name in &NOT_FORWARDED {
            metadata.remove(name);
        }
        metadata.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
        metadata.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
        // Among several backends: the one the call goes to, or every one.
        let (target, mut frame) = match self.route(method, &message, session).await? {
            Target::One(target, None) => (target, frame),
            Target::One(target, Some(renamed)) => (target, message::frame(&renamed)),
            Target::Every(way) => {
                *went = Some(None);
                let call = Fanned { method, session, message: &message, metadata: &metadata, deadline, pod };
                return self.fan_out(call, way, answer).await;
            }
        };
        message = frame.slice(PREFIX_LEN..);
        *went = Some(Some(target));
        let backend = self.backend_for(rpc, target);
        // What a pod-scoped call holds until the runtime has answered (its host paths judged).
        let mut _held = None;
        if let Some(scope) = &judged.pod {
            let found = backend.version().await?;
            let pid = client.identity.pid;
            match self.hold_to_pod(rpc, &message, scope, session, (target, found.version), pid).await {
                Ok(held) => {
                    if let Some(rewritten) = &held.rewritten {
                        frame = message::frame(rewritten);
                        message = frame.slice(PREFIX_LEN..);
                    }
                    _held = Some(held);
                }
                Err(denied) => {
                    *named = Named { denied: true, ..Named::of(rpc, &message) };
                    return Err(denied.into());
                }
            }
        }
        let upstream = session.upstream(rpc.info.service, target);
        let (mut retried, mut reconnected) = (false, false);
        loop {
            let found = backend.version().await?;
            *backend_version = Some(found.version);
            let plan = method.plan(found.version);
            if plan.backend.is_none() || found.profile.runtime.lacks_rpc(plan.since) {
                // The runtime may have been upgraded since it was probed, with no call (and so no
                // reconnection) in between: ask again before saying it lacks the RPC, at most
                // once a second (a probe holds every caller's next call).
                if !retried && found.at.elapsed() > REPROBE_AFTER {
                    backend.forget();
                    retried = true;
                    continue;
                }
                if let Some(emulated) = emulate(rpc, &found) {
                    // Only a runtime that answers now is answered for (asked directly, a runtime
                    // that is down gives UNAVAILABLE); one that came back on a new connection
                    // may have a new config: it is probed again first. This costs this caller
                    // one Version call, and no one else anything.
                    if let Err(status) = backend.call_version(found.version).await {
                        let detail = status.message().to_string();
                        return Err(Error::Unreachable { endpoint: backend.who(), detail }.into());
                    }
                    if !retried && backend.is_stale(&found) {
                        retried = true;
                        continue;
                    }
                    return Ok(answer_message(answer, emulated).await?);
                }
                return Err(missing(rpc, plan, &found).into());
            }
            let uri = plan.backend.as_ref().expect("a missing RPC was answered above");
            let outgoing =
                match self.request_for_runtime(method, (target, &found), &message, session, &mut charge).await? {
                    None => frame.clone(),
                    Some(converted) => {
                        // The request as it came is held already; a retry's conversion replaces
                        // the last one's.
                        charge.shrink_to(frame.len());
                        self.hold(&mut charge, converted.len(), rpc).await?;
                        message::frame(&converted)
                    }
                };
            let Some(request) = Forwarder::runtime_request(uri, &metadata, deadline) else {
                return Err(expired().into());
            };
            let (response, connection) = match upstream.send(request, outgoing).await {
                Ok((response, connection)) => (answer.unless_gone(response).await?, connection),
                // Nothing reached the runtime: a connection that went away since the last call
                // (a runtime restarted) is made again, once.
                Err(Unsent(detail)) => {
                    upstream.reset();
                    if !reconnected {
                        reconnected = true;
                        continue;
                    }
                    return Err(Error::Unreachable { endpoint: backend.who(), detail }.into());
                }
            };
            let response = match response {
                Ok(response) => response,
                Err(error) => return Err(self.runtime_failed(backend, upstream, error, answer)),
            };
            // An answer that is its status alone (an error, as grpc-go sends one): its code.
            let ended = if response.body().is_end_stream() { grpc_code(response.headers()) } else { None };
            let unimplemented = ended == Some(Code::Unimplemented);
            // On a connection made since the probe, UNIMPLEMENTED may come from a runtime
            // restarted (maybe upgraded) since: one Version call on the probe connection tells
            // (it fails, or is made on a new connection), and then the runtime is probed again.
            if unimplemented && !retried && backend.made_after(&found, connection) {
                let _ = backend.call_version(found.version).await;
                if backend.is_stale(&found) {
                    backend.forget();
                    retried = true;
                    continue;
                }
            }
            if ended == Some(Code::NotFound) && gone_is_done(rpc, found.version) {
                tracing::debug!(rpc = %rpc.path(), "the runtime does not know the id: done, as CRI v1 requires");
                return Ok(answer_message(answer, Vec::new()).await?);
            }
            // Only an answer of UNIMPLEMENTED is looked at again: every other call pays nothing.
            let emulated = if unimplemented { emulate(rpc, &found) } else { None };
            if let Some(emulated) = emulated {
                return Ok(answer_message(answer, emulated).await?);
            }
            return self.relay_answer(method, &found, session, (backend, upstream), response, answer, pod).await;
        }
    }

    /// Grows `charge` by `bytes`, waiting for room at most `limits.request_timeout_seconds`.
    pub(super) async fn hold(&self, charge: &mut Charge, bytes: usize, rpc: Rpc) -> Result<(), Error> {
        match tokio::time::timeout(self.request_timeout, charge.grow(bytes)).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::BufferFull { rpc: rpc.name(), waited: self.request_timeout }),
        }
    }

    /// Hands the runtime's answer to the caller: the head, every DATA frame as it came (only
    /// each message's size read) or each message converted, and the trailers. A message being
    /// converted is held within the connection's memory bound; one passed as it came is held
    /// by the runtime connection's flow-control window alone. A pod-scoped caller's events
    /// (`pod`) are converted, and only its pod's are passed.
    #[allow(clippy::too_many_arguments)]
    async fn relay_answer(
        self: &Arc<Self>,
        method: &Arc<Method>,
        found: &Discovered,
        session: &Session,
        (backend, upstream): (&Backend, &Upstream),
        response: http::Response<RecvStream>,
        answer: &mut Answer,
        pod: Option<&str>,
    ) -> Result<Code, Failure> {
        let (rpc, plan) = (method.rpc, method.plan(found.version));
        let events = rpc.info.method == "GetContainerEvents";
        let old_events = events && found.profile.runtime.minor < EVENT_STATUS_SINCE;
        let pod_events = pod.filter(|_| events);
        // Read whatever the versions: a `docker` runtime's `Version`, streaming URLs.
        let read = super::answer_is_read(rpc, found);
        let converting = !plan.response.is_identity() || old_events || pod_events.is_some() || read;
        let (mut head, mut body) = response.into_parts();
        if converting {
            head.headers.remove(http::header::CONTENT_LENGTH);
        }
        if body.is_end_stream() {
            let code = grpc_code(&head.headers).unwrap_or(Code::Unknown);
            note_answer(backend, code);
            answer.head(http::Response::from_parts(head, ()), true)?;
            return Ok(code);
        }
        answer.head(http::Response::from_parts(head, ()), false)?;
        let limit = self.max_message_size;
        let too_big =
            |error: message::MessageError| error.into_status(&format!("the runtime's answer to {}", rpc.name()));
        let (mut meter, mut splitter, mut messages) = (Meter::default(), Splitter::default(), Vec::new());
        let mut charge = session.budget.charge();
        let mut reclaim = charge.reclaim();
        loop {
            let chunk = match answer.unless_gone(body.data()).await? {
                None => break,
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => return Err(self.runtime_failed(backend, upstream, error, answer)),
            };
            let size = chunk.len();
            if converting {
                self.hold(&mut charge, size, rpc).await?;
                splitter.push(chunk, limit, &mut messages).map_err(too_big)?;
                for message in messages.drain(..) {
                    let converted = self.answer_for_caller(method, found, message, session, &mut charge).await?;
                    if pod_events.is_some_and(|pod| !crate::access::pod::event_of_pod(&converted, pod)) {
                        continue;
                    }
                    self.hold(&mut charge, converted.len(), rpc).await?;
                    // A caller slow to take it gives back what it holds beyond its share.
                    let holding = charge.holds_shared();
                    tokio::select! {
                        sent = send_message(answer, converted) => sent?,
                        () = reclaim.asked(), if holding => {
                            return Err(Error::BufferReclaimed { rpc: rpc.name() }.into());
                        }
                    }
                }
                charge.shrink_to(splitter.pending());
            } else {
                meter.pass(&chunk, limit).map_err(too_big)?;
                answer.data(chunk).await?;
            }
            // Only now may the runtime send more: a slow caller slows the runtime's stream.
            let _ = body.flow_control().release_capacity(size);
        }
        splitter.finish().and(meter.finish()).map_err(too_big)?;
        match answer.unless_gone(body.trailers()).await? {
            Ok(Some(trailers)) => {
                let code = grpc_code(&trailers).unwrap_or(Code::Unknown);
                note_answer(backend, code);
                answer.trailers(trailers)?;
                Ok(code)
            }
            // No status: the caller's gRPC library says so, as it would have directly.
            Ok(None) => {
                answer.end()?;
                Ok(Code::Unknown)
            }
            Err(error) => Err(self.runtime_failed(backend, upstream, error, answer)),
        }
    }

    /// The runtime reset the call's stream (passed on as the same reset), or the connection to
    /// it failed (UNAVAILABLE naming the endpoint; not retried: a call sent may have run; the
    /// client's next call makes a new connection).
    fn runtime_failed(&self, backend: &Backend, upstream: &Upstream, error: h2::Error, answer: &mut Answer) -> Failure {
        if let (Some(reason), true, false) = (error.reason(), error.is_reset() && error.is_remote(), error.is_go_away())
        {
            answer.reset(reason);
            return Failure::Reset;
        }
        upstream.reset();
        Error::Unreachable { endpoint: backend.who(), detail: error.to_string() }.into()
    }
}

/// An answer of `UNAVAILABLE` means the runtime is going away: probe it again on the next call.
fn note_answer(backend: &Backend, code: Code) {
    if code == Code::Unavailable {
        backend.forget();
    }
}

/// CRI v1 requires stopping or removing a sandbox or container that is already gone (or never
/// was) to succeed. containerd 1.4 and 1.5 (v1alpha2) answer `NOT_FOUND` for an unknown id in
/// `StopContainer` and `StopPodSandbox`: a v1 caller of an older runtime is told what v1 says,
/// with the empty answer all four RPCs have. (A caller of the runtime's own version is passed
/// its answer as it came, as natively.)
fn gone_is_done(rpc: Rpc, backend: CriVersion) -> bool {
    const IDEMPOTENT: [&str; 4] = ["StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"];
    rpc.version == CriVersion::V1 && backend != CriVersion::V1 && IDEMPOTENT.contains(&rpc.info.method)
}

/// The deadline passed while cri-bridge held the call.
fn expired() -> Status {
    Status::deadline_exceeded("deadline exceeded before the container runtime answered")
}
