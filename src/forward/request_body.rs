//! Reading the caller's request body: a CRI call's one message, held within its bounds (the
//! message size, the connection's share of memory), or a question of cri-bridge's own read to
//! its end.

use super::failure::Failure;
use crate::budget::Charge;
use crate::error::Error;
use crate::grpc::Rpc;
use crate::relay::message::UnaryRequest;
use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use tonic::Status;

/// Gathers the request's one message (with its prefix). A message that arrives in one DATA frame,
/// as every client sends a CRI request, is taken without a copy. Nothing past the one message
/// is held: more bytes end the call at once. Each chunk is held in `charge` before the client's
/// window is given back for it: a client at its memory bound is held back by HTTP/2 itself.
/// While it waits on the client, a request holding the shared bound beyond its connection's
/// share ends when another client waits below its share (`crate::budget::Reclaim`).
pub(super) async fn read_request(
    rpc: Rpc,
    mut body: RecvStream,
    limit: usize,
    charge: &mut Charge,
) -> Result<Bytes, Failure> {
    let what = || format!("the {} request", rpc.name());
    let mut first: Option<Bytes> = None;
    let mut gathered = BytesMut::new();
    let mut request = UnaryRequest::default();
    let mut reclaim = charge.reclaim();
    loop {
        let chunk = tokio::select! {
            chunk = body.data() => chunk,
            () = reclaim.asked(), if charge.holds_shared() => {
                return Err(Error::BufferReclaimed { rpc: rpc.name() }.into());
            }
        };
        let Some(chunk) = chunk else { break };
        let chunk = chunk.map_err(|error| match error.is_reset() && error.is_remote() {
            // The caller cancelled the call: there is no one to tell.
            true => Failure::Gone,
            false => Status::cancelled(format!("{}: {error}", what())).into(),
        })?;
        request.pass(&chunk, limit).map_err(|error| error.into_status(&what()))?;
        let holding = charge.holds_shared();
        tokio::select! {
            () = charge.grow(chunk.len()) => {}
            () = reclaim.asked(), if holding => return Err(Error::BufferReclaimed { rpc: rpc.name() }.into()),
        }
        let _ = body.flow_control().release_capacity(chunk.len());
        if first.is_none() && gathered.is_empty() {
            first = Some(chunk);
        } else {
            if let Some(earlier) = first.take() {
                gathered.extend_from_slice(&earlier);
            }
            gathered.extend_from_slice(&chunk);
        }
    }
    request.finish().map_err(|error| error.into_status(&what()))?;
    Ok(first.unwrap_or_else(|| gathered.freeze()))
}

/// The most a question of cri-bridge's own may carry (they carry nothing).
pub(super) const CONTROL_REQUEST_LIMIT: usize = 4096;

/// Reads a request's body to its end, holding at most `limit` bytes.
pub(super) async fn read_request_body(mut body: RecvStream, limit: usize) -> Result<(), ()> {
    let mut read = 0;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(drop)?;
        read += chunk.len();
        let _ = body.flow_control().release_capacity(chunk.len());
        if read > limit {
            return Err(());
        }
    }
    Ok(())
}
