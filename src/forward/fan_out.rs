//! A call to every backend (issue 42): lists, stats and metrics merged, `Status` merged, events
//! merged as they come, `UpdateRuntimeConfig` and `RemoveImage` made everywhere.
//!
//! Each backend gets the request in its own version, on the caller's own connection to it, and
//! its answer is converted to the caller's version before the merge. A backend that fails fails
//! the whole call, naming it: never an empty success, and never a partial list (a kubelet that
//! is shown a list without a backend's pods takes them for gone).

use super::failure::Failure;
use super::lacking::missing;
use super::reply::{answer_all, answer_joined, grpc_head, ok_trailers, send_message};
use super::{Forwarder, Method, Session};
use crate::backend::Discovered;
use crate::budget::Charge;
use crate::error::Error;
use crate::relay::answer::Answer;
use crate::relay::message::{self, Splitter};
use crate::relay::upstream::Unsent;
use crate::routing::{merge, Way};
use bytes::Bytes;
use futures_util::StreamExt;
use h2::RecvStream;
use http::HeaderMap;
use prost::Message;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Code, Status};

/// A call made of every backend, as the caller sent it.
pub(super) struct Fanned<'a> {
    pub method: &'a Arc<Method>,
    pub session: &'a Session,
    pub message: &'a Bytes,
    pub metadata: &'a HeaderMap,
    pub deadline: Option<Instant>,
    /// A pod-scoped caller's pod: only its events are passed.
    pub pod: Option<&'a str>,
}

/// One backend's part of a call.
struct Leg {
    index: usize,
    found: Discovered,
    body: Option<RecvStream>,
    splitter: Splitter,
    ready: VecDeque<Bytes>,
    /// The backend's status, once it has ended its answer.
    ended: Option<Status>,
    charge: Charge,
}

impl Forwarder {
    /// Makes the call of every backend and answers with the merge `way` says.
    pub(super) async fn fan_out(
        self: &Arc<Self>,
        call: Fanned<'_>,
        way: Way,
        answer: &mut Answer,
    ) -> Result<Code, Failure> {
        let order = self.router.as_ref().map(|r| r.order()).unwrap_or_else(|| vec![0]);
        let rpc = call.method.rpc;
        let opened = futures_util::future::join_all(order.iter().map(|&index| self.open_leg(&call, index)));
        let (mut legs, mut away) = (Vec::new(), Vec::new());
        for (&index, leg) in order.iter().zip(answer.unless_gone(opened).await?) {
            match leg {
                Ok(leg) => legs.push(leg),
                Err(Failure::Status(status)) if self.tolerated(way, rpc.info.method, index, &status) => {
                    away.push((index, status))
                }
                Err(Failure::Status(status)) if self.nothing_to_list(way, &call, index, &status).await => {}
                Err(failure) => return Err(failure),
            }
        }
        if way == Way::Events {
            return self.merge_events(&call, legs, answer).await;
        }
        let indices: Vec<usize> = legs.iter().map(|leg| leg.index).collect();
        let collected = futures_util::future::join_all(legs.iter_mut().map(|leg| self.drain(&call, leg)));
        let mut answers = Vec::new();
        for (&index, messages) in indices.iter().zip(answer.unless_gone(collected).await?) {
            let messages = match (messages, way, rpc.info.method) {
                (Ok(messages), _, _) => messages,
                // An image one backend lacks is removed there already.
                (Err(status), Way::Every, "RemoveImage") if status.code() == Code::NotFound => Vec::new(),
                (Err(status), _, _) => {
                    let status = self.named(index, status);
                    if self.nothing_to_list(way, &call, index, &status).await {
                        continue;
                    }
                    if !self.tolerated(way, rpc.info.method, index, &status) {
                        return Err(status.into());
                    }
                    away.push((index, status));
                    continue;
                }
            };
            answers.push((index, messages));
        }
        for (index, status) in &away {
            tracing::warn!(rpc = %rpc.path(), backend = %self.backends[*index].name, "left out: {}", status.message());
            if way == Way::Status {
                answers.push((*index, vec![merge::unreachable_status(status.message()).into()]));
            }
        }
        let merged: Vec<Bytes> = match way {
            Way::Status => {
                // By backend index, as the routing table names them.
                let mut by_index: Vec<(&str, &[u8])> =
                    self.backends.iter().map(|b| (b.name.as_str(), &[][..])).collect();
                for (index, messages) in &answers {
                    if let (Some(slot), Some(message)) = (by_index.get_mut(*index), messages.first()) {
                        slot.1 = message;
                    }
                }
                let router = self.router.as_ref();
                let served = router.map(|r| r.served()).unwrap_or_default();
                let default = router.map_or(0, |r| r.table.default);
                let merged =
                    merge::status(&by_index, default, &served, rpc.version).map_err(|e| Error::BadResponse {
                        rpc: rpc.name(),
                        version: rpc.version,
                        message: rpc.info.response,
                        detail: e.to_string(),
                    })?;
                vec![merged.into()]
            }
            Way::Every => vec![answers.into_iter().find_map(|(_, m)| m.into_iter().next()).unwrap_or_default()],
            _ if rpc.info.server_streaming => answers.into_iter().flat_map(|(_, m)| m).collect(),
            // What the kubelet keys by is listed once: an image by id, a metric by name.
            _ if matches!(rpc.info.method, "ListImages" | "ListMetricDescriptors") => {
                let mut joined = Vec::new();
                answers.iter().flat_map(|(_, m)| m).for_each(|m| joined.extend_from_slice(m));
                vec![merge::first_of_each(&joined, 1, 1).into()]
            }
            // One message made of every backend's, as protobuf merges them: sent as its prefix and
            // then each part as it came, never copied into one.
            _ => {
                let parts: Vec<Bytes> = answers.into_iter().flat_map(|(_, m)| m).collect();
                self.within_limit(rpc, parts.iter().map(Bytes::len).sum())?;
                return Ok(answer_joined(answer, parts).await?);
            }
        };
        for message in &merged {
            self.within_limit(rpc, message.len())?;
        }
        Ok(answer_all(answer, merged).await?)
    }

    /// A merged message the caller could not take (each backend's was within the limit).
    fn within_limit(&self, rpc: crate::grpc::Rpc, size: usize) -> Result<(), Status> {
        match size > self.max_message_size {
            true => Err(Status::resource_exhausted(format!(
                "{}: the backends' answers merged are {size} bytes, more than max_message_size ({} bytes)",
                rpc.name(),
                self.max_message_size
            ))),
            false => Ok(()),
        }
    }

    /// Whether a backend's failure leaves the call answered by the others: `Status` (the backend
    /// away becomes `RuntimeReady` false, naming it), and `ImageFsInfo` of a backend other than
    /// the default when it is away (no list of pods: the kubelet and crictl ask it when they
    /// connect, and the default's file system is the one the kubelet reads first).
    fn tolerated(&self, way: Way, method: &str, index: usize, status: &Status) -> bool {
        let default = self.router.as_ref().map_or(0, |r| r.table.default);
        let away = status.code() == Code::Unavailable;
        match (way, method) {
            (Way::Status, _) => away,
            (_, "ImageFsInfo") => away && index != default,
            _ => false,
        }
    }

    /// Whether a backend that lacks a list RPC (`UNIMPLEMENTED`: its version or revision has
    /// none, as containerd 1.7 has no pod metrics) is left out of the list because it holds no
    /// sandbox, asked now: it has nothing to list. One that holds sandboxes makes the list
    /// `UNIMPLEMENTED`, naming it, and the kubelet falls back as for a runtime without the RPC.
    async fn nothing_to_list(&self, way: Way, call: &Fanned<'_>, index: usize, status: &Status) -> bool {
        if way != Way::Merge || status.code() != Code::Unimplemented {
            return false;
        }
        let listed = self.ask(call.session, index, "ListPodSandbox", &[]).await;
        let empty =
            listed.is_ok_and(|l| crate::api::v1::ListPodSandboxResponse::decode(l).is_ok_and(|l| l.items.is_empty()));
        if empty {
            tracing::debug!(rpc = %call.method.rpc.path(), backend = %self.backends[index].name, "lacks it and holds no sandbox: left out");
        }
        empty
    }

    /// `status` as the caller sees it: the backend named.
    fn named(&self, index: usize, status: Status) -> Status {
        let who = self.backends[index].runtime.who();
        Status::new(status.code(), format!("{who}: {}", status.message()))
    }

    /// Sends the call to backend `index` and waits for its answer's head.
    async fn open_leg(self: &Arc<Self>, call: &Fanned<'_>, index: usize) -> Result<Leg, Failure> {
        let (method, rpc) = (call.method, call.method.rpc);
        let backend = self.backend_for(rpc, index);
        let found = backend.version().await?;
        let plan = method.plan(found.version);
        if plan.backend.is_none() || found.profile.runtime.lacks_rpc(plan.since) {
            return Err(self.named(index, missing(rpc, plan, &found).into()).into());
        }
        let mut charge = call.session.budget.charge();
        let frame =
            match self.request_for_runtime(method, (index, &found), call.message, call.session, &mut charge).await? {
                Some(converted) => message::frame(&converted),
                None => message::frame(call.message),
            };
        let uri = plan.backend.clone().ok_or_else(|| missing(rpc, plan, &found))?;
        let upstream = call.session.upstream(rpc.info.service, index);
        let mut reconnected = false;
        let response = loop {
            let Some(request) = Forwarder::runtime_request(&uri, call.metadata, call.deadline) else {
                return Err(Status::deadline_exceeded("deadline exceeded before the container runtime answered").into());
            };
            match upstream.send(request, frame.clone()).await {
                Ok((response, _)) => break response.await,
                Err(Unsent(detail)) => {
                    upstream.reset();
                    if !reconnected {
                        reconnected = true;
                        continue;
                    }
                    return Err(Error::Unreachable { endpoint: backend.who(), detail }.into());
                }
            }
        };
        let response = response.map_err(|e| {
            upstream.reset();
            Error::Unreachable { endpoint: backend.who(), detail: e.to_string() }
        })?;
        let (head, body) = response.into_parts();
        let ended = body.is_end_stream().then(|| status_of(&head.headers));
        Ok(Leg { index, found, body: Some(body), splitter: Splitter::default(), ready: VecDeque::new(), ended, charge })
    }

    /// The next message of a leg, converted for the caller; `None` at its end (status OK).
    async fn next(self: &Arc<Self>, call: &Fanned<'_>, leg: &mut Leg) -> Result<Option<Bytes>, Status> {
        let rpc = call.method.rpc;
        loop {
            if let Some(message) = leg.ready.pop_front() {
                let converted = self.answer_for_caller(call.method, &leg.found, message, call.session, &mut leg.charge);
                return converted.await.map(Some).map_err(Status::from);
            }
            if let Some(status) = &leg.ended {
                return match status.code() {
                    Code::Ok => Ok(None),
                    _ => Err(status.clone()),
                };
            }
            let Some(body) = leg.body.as_mut() else { return Ok(None) };
            let lost = |e: h2::Error| Status::unavailable(format!("the answer was cut off: {e}"));
            match body.data().await {
                Some(chunk) => {
                    let chunk = chunk.map_err(lost)?;
                    let size = chunk.len();
                    self.hold(&mut leg.charge, size, rpc).await.map_err(Status::from)?;
                    let mut messages = Vec::new();
                    let too_big = |e: message::MessageError| e.into_status(&format!("the answer to {}", rpc.name()));
                    leg.splitter.push(chunk, self.max_message_size, &mut messages).map_err(too_big)?;
                    leg.ready.extend(messages);
                    let _ = body.flow_control().release_capacity(size);
                }
                None => {
                    let trailers = body.trailers().await.map_err(lost)?;
                    leg.ended = Some(
                        trailers.map_or_else(|| Status::unknown("the answer has no grpc-status"), |t| status_of(&t)),
                    );
                }
            }
        }
    }

    /// A leg with its next message.
    async fn advance(self: &Arc<Self>, call: &Fanned<'_>, mut leg: Leg) -> (Leg, Result<Option<Bytes>, Status>) {
        let next = self.next(call, &mut leg).await;
        (leg, next)
    }

    /// Every message of a leg (bounded by the connection's share of the memory bound).
    async fn drain(self: &Arc<Self>, call: &Fanned<'_>, leg: &mut Leg) -> Result<Vec<Bytes>, Status> {
        let mut messages = Vec::new();
        while let Some(message) = self.next(call, leg).await? {
            messages.push(message);
        }
        Ok(messages)
    }

    /// Every backend's events, passed as they come; the first backend to fail ends the stream
    /// with its status, named.
    async fn merge_events(
        self: &Arc<Self>,
        call: &Fanned<'_>,
        legs: Vec<Leg>,
        answer: &mut Answer,
    ) -> Result<Code, Failure> {
        let mut pending: futures_util::stream::FuturesUnordered<_> =
            legs.into_iter().map(|leg| self.advance(call, leg)).collect();
        answer.head(grpc_head(), false)?;
        while let Some((leg, event)) = answer.unless_gone(pending.next()).await? {
            let event = match event {
                Ok(Some(event)) => event,
                // A runtime that ends its stream ends the caller's: it watches again, and sees
                // every backend's events or an error, never a stream without one backend's.
                Ok(None) => break,
                Err(status) => return Err(self.named(leg.index, status).into()),
            };
            let index = leg.index;
            pending.push(self.advance(call, leg));
            if call.pod.is_some_and(|pod| !crate::access::pod::event_of_pod(&event, pod)) {
                continue;
            }
            tracing::trace!(backend = index, "event");
            send_message(answer, event).await?;
        }
        answer.trailers(ok_trailers())?;
        Ok(Code::Ok)
    }
}

/// The status of a head or trailers.
fn status_of(headers: &HeaderMap) -> Status {
    Status::from_header_map(headers).unwrap_or_else(|| Status::unknown("the answer has no grpc-status"))
}
