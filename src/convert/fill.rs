//! v1 request fields that every v1 kubelet sets and a v1 runtime may rely on, filled in when an
//! older client's request goes to a v1 runtime. The client's version has no such field; what it
//! sent says what the field would hold.
//!
//! - `CreateContainerRequest.config.image.user_specified_image`: the image as the client named
//!   it. CRI-O 1.36 verifies the image's signature by it and, with a signature policy, refuses a
//!   create that leaves it empty ("user specified image not specified, cannot verify image
//!   signature"). A v1alpha2 or v1alpha1 client named the image in `image` alone (an old
//!   kubelet: the image reference it resolved with `ImageStatus`).
//!
//! Only the request of the RPC named is decoded again (a create, a few per pod), after its
//! conversion; every other call pays nothing.

use crate::api::v1;
use prost::Message;

/// `request` (a v1 request of `method`, converted from an older version) with the fields above
/// filled; `None` when nothing needed filling (or it does not decode: the runtime says so).
pub fn for_v1_runtime(method: &str, request: &[u8]) -> Option<Vec<u8>> {
    if method != "CreateContainer" {
        return None;
    }
    let mut create = v1::CreateContainerRequest::decode(request).ok()?;
    let image = create.config.as_mut()?.image.as_mut()?;
    if image.image.is_empty() || !image.user_specified_image.is_empty() {
        return None;
    }
    image.user_specified_image = image.image.clone();
    Some(create.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_as_named_is_filled_once() {
        let create = |image: &str, specified: &str| v1::CreateContainerRequest {
            config: Some(v1::ContainerConfig {
                image: Some(v1::ImageSpec {
                    image: image.into(),
                    user_specified_image: specified.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let filled = for_v1_runtime("CreateContainer", &create("busybox:1", "").encode_to_vec()).unwrap();
        let filled = v1::CreateContainerRequest::decode(filled.as_slice()).unwrap();
        assert_eq!(filled.config.unwrap().image.unwrap().user_specified_image, "busybox:1");
        assert!(for_v1_runtime("CreateContainer", &create("busybox:1", "busybox").encode_to_vec()).is_none());
        assert!(for_v1_runtime("CreateContainer", &create("", "").encode_to_vec()).is_none());
        assert!(for_v1_runtime("PullImage", &create("busybox:1", "").encode_to_vec()).is_none());
    }
}
