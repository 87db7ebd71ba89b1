//! `splice_hpack`: one direction's header blocks through the splice's HPACK decoder
//! (`cri_bridge::relay::splice::hpack`), against the full decoder of `header_block.rs` (RFC
//! 7541 with `h2`'s limits), and each block written anew as the splice writes blocks of its own.
//!
//! Input: the `header_block` layout (blocks, each a length byte, 255: a 2-byte length follows,
//! and its bytes), so that the two targets share seeds.
//!
//! While the reference decodes the blocks:
//! - the splice's decoder decodes each one to the same fields, in order, and says the table
//!   changed exactly when the block added an entry or set the table's size;
//! - a block the reference refuses, the splice's decoder refuses too (a block read differently
//!   by the two ends would leave their tables apart); the one the splice refuses and the
//!   reference takes is a table size update after a field, which RFC 7541 §4.2 forbids and `h2`
//!   and Go's `hpack` refuse as well;
//! - the block written anew ([`hpack::encode`]) decodes, in a fresh decoder, to the same fields
//!   and leaves that decoder's table empty.

use super::header_block::{Decoder as Reference, Repr};
use super::Choices;
use cri_bridge::relay::splice::hpack::{self, Decoder};

pub fn run(data: &[u8]) {
    let mut input = Choices::new(data);
    let mut reference = Reference::default();
    let mut splice = Decoder::new(usize::MAX);
    let mut number = 0;
    while !input.is_empty() {
        number += 1;
        let len = match input.u8() {
            255 => usize::from(input.u16()),
            n => usize::from(n),
        };
        let block = input.take(len);
        let mut fields = Vec::new();
        let decoded = splice.decode(block, |name, value| fields.push((name.to_vec(), value.to_vec())));
        let expected = match reference.decode(block) {
            Ok(expected) => expected,
            Err(why) => {
                assert!(
                    decoded.is_err(),
                    "block {number}: the reference refuses it ({why}), the splice took {fields:?}"
                );
                return;
            }
        };
        if decoded == Err(hpack::HpackError::LateSizeUpdate) {
            return;
        }
        let changed =
            decoded.unwrap_or_else(|e| panic!("block {number}: the splice refuses what the reference takes: {e}"));
        let want: Vec<(Vec<u8>, Vec<u8>)> = expected.iter().map(|h| (h.name.clone(), h.value.clone())).collect();
        assert_eq!(fields, want, "block {number}: the same fields");
        let sized = block.first().is_some_and(|b| b & 0xe0 == 0x20);
        let added = expected.iter().any(|h| matches!(h.repr, Repr::Incremental));
        // A size update may open a block even among others that add nothing: either changes it.
        if !(added || sized) {
            assert!(!changed, "block {number}: said changed, yet added nothing and set no size");
        }
        if added {
            assert!(changed, "block {number}: added an entry, yet said unchanged");
        }
        let mut anew = Vec::new();
        for (name, value) in &fields {
            hpack::encode(name, value, &mut anew);
        }
        let mut fresh = Decoder::new(usize::MAX);
        let mut again = Vec::new();
        let changed = fresh
            .decode(&anew, |name, value| again.push((name.to_vec(), value.to_vec())))
            .unwrap_or_else(|e| panic!("block {number}: a block of the splice's own does not decode: {e}"));
        assert_eq!(again, want, "block {number}: written anew, the same fields");
        assert!(!changed, "block {number}: a block of the splice's own changed the table");
    }
}
