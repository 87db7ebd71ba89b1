//! How much memory decoding a message takes, told from its wire bytes and schema without
//! decoding it: each message the decoder builds, each string and each scalar of a repeated
//! field has its slot, besides the bytes it holds. A message of tiny fields costs far more
//! decoded than on the wire (an empty `KeyValue` is 2 bytes sent, a 48-byte struct and its
//! place in a vector decoded); the forwarding path refuses to convert a message whose
//! estimate exceeds what a connection may hold.

use super::wire::next;
use crate::api::SchemaInfo;

/// What one decoded message is counted as, besides its fields.
const MESSAGE: usize = 64;
/// A string's or bytes' slot, besides its bytes.
const STRING: usize = 24;
/// A scalar's slot (an element of a repeated field; a singular one sits in its message).
const SCALAR: usize = 8;

/// The estimated bytes that decoding `bytes`, as message `message` of `schema`, allocates,
/// counted until it passes `limit` (then a number past it: the walk stops there, so a hostile
/// message costs the walk no more than `limit` allows). A part that does not parse ends the
/// count there (the conversion reports it).
pub fn decoded_size(schema: &SchemaInfo, message: usize, bytes: &[u8], limit: usize) -> usize {
    let info = &schema.messages[message];
    let mut rest = bytes;
    let mut size = MESSAGE;
    while let Ok(found) = next(&mut rest) {
        size += match (info.field(found.number), found.wire_type) {
            (Some(field), 2) => match field.message {
                Some(nested) => decoded_size(schema, nested, found.value, limit - size.min(limit)),
                None => STRING + found.value.len(),
            },
            // An unknown field is dropped by the decoder; a scalar has its slot.
            (None, _) => 0,
            (Some(_), _) => SCALAR,
        };
        if size > limit {
            break;
        }
    }
    size
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1;
    use prost::Message;

    #[test]
    fn tiny_fields_cost_many_times_their_bytes_and_the_walk_stops_past_the_limit() {
        let schema = crate::CriVersion::V1.schema();
        let index = schema.message_index("ContainerConfig").unwrap();
        let empty = v1::ContainerConfig { envs: vec![v1::KeyValue::default(); 1000], ..Default::default() };
        let bytes = empty.encode_to_vec();
        let size = decoded_size(schema, index, &bytes, usize::MAX);
        assert!(size > 25 * bytes.len(), "{size} for {} bytes", bytes.len());
        // Stopped soon after the limit, not walked to the end.
        let stopped = decoded_size(schema, index, &bytes, 1000);
        assert!(stopped > 1000 && stopped < 1200, "{stopped}");
        // Ordinary strings cost about their bytes.
        let plain = v1::ContainerConfig { working_dir: "w".repeat(100_000), ..Default::default() };
        let plain_bytes = plain.encode_to_vec();
        let cost = decoded_size(schema, index, &plain_bytes, usize::MAX);
        assert!(cost < plain_bytes.len() + 256, "{cost}");
    }
}
