//! The URL a runtime answers to `Exec`, `Attach` and `PortForward`, given its scheme when it has
//! none. cri-dockerd 0.4.3 answers `//HOST:PORT/cri/exec/TOKEN`: its streaming server's base URL
//! is `{Path: "/cri/"}`, to which it adds its listener's address but no scheme. The kubelet reads
//! such a URL two ways: its SPDY proxy takes a missing scheme as `http` (apimachinery's
//! `normalizeLocation`), while its WebSocket translator (`ExtendWebSocketsToKubelet`, what
//! kubectl 1.30+ uses for `exec`, `attach` and `port-forward`) dials it as `https`, and then
//! fails against cri-dockerd's plain-HTTP server. Saying `http` makes both read it as the first
//! does. A URL with a scheme, or without a host (nothing to dial), passes as it came.

use crate::api::v1;
use prost::Message;

/// The RPCs whose answer is one `string url = 1` in every CRI version.
pub const METHODS: [&str; 3] = ["Exec", "Attach", "PortForward"];

/// The answer with `http:` before a scheme-less `//HOST…` URL; `None`: it passes as it came.
/// The URL is appended as a second field 1, which every protobuf decoder reads as the value
/// (the last one wins), so any field this schema does not know passes untouched.
pub fn with_scheme(answer: &[u8]) -> Result<Option<Vec<u8>>, prost::DecodeError> {
    // Exec, Attach and PortForward answers decode alike: one `url`.
    let url = v1::ExecResponse::decode(answer)?.url;
    if !url.starts_with("//") || url.len() == 2 {
        return Ok(None);
    }
    let mended = v1::ExecResponse { url: format!("http:{url}") };
    let mut bytes = Vec::with_capacity(answer.len() + mended.encoded_len());
    bytes.extend_from_slice(answer);
    mended.encode(&mut bytes).expect("a Vec grows as needed");
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(bytes: &[u8]) -> String {
        v1::ExecResponse::decode(bytes).unwrap().url
    }

    #[test]
    fn a_scheme_less_url_with_a_host_becomes_http() {
        let answer = v1::ExecResponse { url: "//[::]:40123/cri/exec/AbCd".into() }.encode_to_vec();
        let mended = with_scheme(&answer).unwrap().expect("mended");
        assert_eq!(url(&mended), "http://[::]:40123/cri/exec/AbCd");
        // What came is kept as it was, before the new value.
        assert!(mended.starts_with(&answer));
    }

    #[test]
    fn urls_with_a_scheme_or_without_a_host_pass_as_they_came() {
        for kept in ["http://127.0.0.1:1/exec/x", "https://10.0.0.1:10010/attach/y", "/cri/exec/z", "", "//"] {
            let answer = v1::ExecResponse { url: kept.into() }.encode_to_vec();
            assert_eq!(with_scheme(&answer).unwrap(), None, "{kept:?}");
        }
    }

    #[test]
    fn a_field_this_schema_does_not_know_is_kept() {
        let mut answer = v1::ExecResponse { url: "//127.0.0.1:9/cri/portforward/t".into() }.encode_to_vec();
        // Field 7, varint 5: unknown to every CRI version's schema.
        answer.extend_from_slice(&[7 << 3, 5]);
        let mended = with_scheme(&answer).unwrap().unwrap();
        assert!(mended.starts_with(&answer));
        assert_eq!(url(&mended), "http://127.0.0.1:9/cri/portforward/t");
    }

    #[test]
    fn bytes_that_are_no_answer_are_an_error() {
        assert!(with_scheme(&[0x0a, 0x05, b'a']).is_err());
    }
}
