//! Where each message of a call is converted: in place when it is small, off the one thread
//! when it is large (`super::offload`, in the connection's lane, holding its charge), refused
//! when decoding it would take more than a connection may hold, and judged by the runtime
//! handler its pod runs on where the handlers' features differ.

use super::offload::{ANSWERS_FROM, REQUESTS_FROM};
use super::{Forwarder, Method, Session};
use crate::backend::Discovered;
use crate::budget::Charge;
use crate::error::Error;
use crate::grpc::Rpc;
use bytes::Bytes;
use std::sync::Arc;

impl Forwarder {
    /// The request as the runtime gets it (`None`: its bytes as they came), converted and judged
    /// by `convert_request`, off the one thread when it is large.
    pub(super) async fn request_for_runtime(
        self: &Arc<Self>,
        method: &Arc<Method>,
        (target, found): (usize, &Discovered),
        message: &Bytes,
        session: &Session,
        charge: &mut Charge,
    ) -> Result<Option<Vec<u8>>, Error> {
        let rpc = method.rpc;
        let handler = self.handler_of(rpc, (target, found), message).await;
        if message.len() < REQUESTS_FROM {
            return self.convert_request(rpc, method.plan(found.version), found, message, handler.as_deref());
        }
        let (this, method, found, message) = (self.clone(), method.clone(), found.clone(), message.clone());
        // The job holds the message's charge until it has run, even if this call ends first.
        let held = charge.split_off(message.len());
        let work = move || {
            let schema = rpc.version.schema();
            this.affordable(rpc, "request", schema, method.plan(found.version).request_index, &message)?;
            this.convert_request(rpc, method.plan(found.version), &found, &message, handler.as_deref())
        };
        let aborted = |detail| Error::ConversionAborted { rpc: rpc.name(), detail };
        let (converted, held) = self.offload.run(session.lane, held, work).await.map_err(aborted)?;
        charge.absorb(held);
        converted
    }

    /// The runtime handler the pod of a call runs on, where it decides what the runtime acts on
    /// (the handlers' features differ): `RunPodSandbox`'s own `runtime_handler`; for
    /// `CreateContainer`, its sandbox's, asked of the runtime (`PodSandboxStatus`: one call more
    /// per create, on such a runtime only). `None` otherwise: judged by every handler's features.
    async fn handler_of(&self, rpc: Rpc, (target, found): (usize, &Discovered), message: &[u8]) -> Option<String> {
        use crate::convert::wire::string_field;
        if found.profile.blocked_by_handler.is_empty() {
            return None;
        }
        // The field's number in the caller's version (v1alpha1 has no runtime_handler).
        let number = |field: &str| rpc.version.schema().field_by_name(field).map(|(_, f)| f.number);
        match rpc.info.method {
            "RunPodSandbox" => {
                Some(string_field(message, number("RunPodSandboxRequest.runtime_handler")?).unwrap_or_default())
            }
            "CreateContainer" => {
                let sandbox = string_field(message, number("CreateContainerRequest.pod_sandbox_id")?)?;
                self.backend_for(rpc, target).sandbox_handler(found.version, &sandbox).await
            }
            _ => None,
        }
    }

    /// Refuses to convert `message` (message `index` of `schema`) when decoding it would
    /// allocate more than a connection may hold (`limits.buffer_per_connection_mib`): a message
    /// of tiny fields decodes to many times its size, none of it charged otherwise.
    fn affordable(
        &self,
        rpc: Rpc,
        what: &'static str,
        schema: &crate::api::SchemaInfo,
        index: usize,
        message: &[u8],
    ) -> Result<(), Error> {
        let estimate = crate::convert::size::decoded_size(schema, index, message, self.working_memory);
        if estimate > self.working_memory {
            return Err(Error::TooCostly { rpc: rpc.name(), what, estimate, limit: self.working_memory });
        }
        Ok(())
    }

    /// The answer's message as the caller gets it, off the one thread when it is large.
    pub(super) async fn answer_for_caller(
        self: &Arc<Self>,
        method: &Arc<Method>,
        found: &Discovered,
        message: Bytes,
        session: &Session,
        charge: &mut Charge,
    ) -> Result<Bytes, Error> {
        let rpc = method.rpc;
        if message.len() < ANSWERS_FROM {
            return self.convert_response(rpc, method.plan(found.version), found, message);
        }
        let (this, method, found) = (self.clone(), method.clone(), found.clone());
        let held = charge.split_off(message.len());
        let work = move || {
            let schema = found.version.schema();
            if let Some(index) = schema.message_index(rpc.info.response) {
                this.affordable(rpc, "answer", schema, index, &message)?;
            }
            this.convert_response(rpc, method.plan(found.version), &found, message)
        };
        let aborted = |detail| Error::ConversionAborted { rpc: rpc.name(), detail };
        let (converted, held) = self.offload.run(session.lane, held, work).await.map_err(aborted)?;
        charge.absorb(held);
        converted
    }
}
