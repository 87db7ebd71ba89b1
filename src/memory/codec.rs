//! The in-memory runtime's requests, in whatever version they come, read as v1.

use crate::convert::{Cx, Route};
use crate::grpc::Rpc;
use crate::version::CriVersion;
use prost::Message;
use tonic::Status;

/// Decodes the request of `rpc` as v1, converting from `rpc.version` first.
pub(super) fn decode_request<Req: Message + Default>(rpc: Rpc, body: &[u8]) -> Result<Req, Status> {
    let route = Route::new(rpc.info.request, rpc.version, CriVersion::V1)
        .ok_or_else(|| Status::internal(format!("no conversion of {} to v1", rpc.info.request)))?;
    let invalid = |e: prost::DecodeError| Status::invalid_argument(format!("cannot decode {}: {e}", rpc.info.request));
    // Losses here are the fake's own business: ignored.
    let v1_bytes = route.run(body, &mut Cx::counting()).map_err(invalid)?;
    Req::decode(v1_bytes.as_slice()).map_err(invalid)
}
