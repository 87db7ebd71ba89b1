//! The ImageService: images found by ID, tag or digest, references normalized as docker does.

use super::image_ref::{new_image, normalize};
use super::state::{MemoryRuntime, State, FS_MOUNTPOINT};
use super::support::{json_string, missing, now_nanos, seed, u64_value};
use crate::api::v1;
use std::collections::HashMap;
use tonic::Status;

impl MemoryRuntime {
    pub fn list_images(&self, req: v1::ListImagesRequest) -> Result<v1::ListImagesResponse, Status> {
        let reference = req.filter.and_then(|f| f.image).map(|i| i.image).unwrap_or_default();
        let state = self.state();
        let images = if reference.is_empty() {
            state.images.clone()
        } else {
            state.find_image(&reference).cloned().into_iter().collect()
        };
        Ok(v1::ListImagesResponse { images })
    }

    /// An unknown image is `image: None`, not an error, as the CRI specifies.
    pub fn image_status(&self, req: v1::ImageStatusRequest) -> Result<v1::ImageStatusResponse, Status> {
        let reference = image_reference(req.image)?;
        let image = self.state().find_image(&reference).cloned();
        let mut info = HashMap::new();
        if let (true, Some(image)) = (req.verbose, &image) {
            let json = format!("{{\"id\":{},\"size\":{}}}", json_string(&image.id), image.size);
            info.insert("info".to_string(), json);
        }
        Ok(v1::ImageStatusResponse { image, info })
    }

    /// Adds the image (instantly); pulling a present image returns it.
    pub fn pull_image(&self, req: v1::PullImageRequest) -> Result<v1::PullImageResponse, Status> {
        let reference = image_reference(req.image)?;
        if reference.contains(char::is_whitespace) {
            return Err(Status::invalid_argument(format!("invalid image reference {reference:?}")));
        }
        let mut state = self.state();
        if let Some(image) = state.find_image(&reference) {
            return Ok(v1::PullImageResponse { image_ref: image.id.clone() });
        }
        // A plausible size between 1 and 65 MiB, the same for every pull of the reference.
        let size = (1 << 20) + seed(&normalize(&reference)) % (64 << 20);
        let image = new_image(&reference, size, None, false);
        let image_ref = image.id.clone();
        state.images.push(image);
        Ok(v1::PullImageResponse { image_ref })
    }

    pub fn remove_image(&self, req: v1::RemoveImageRequest) -> Result<v1::RemoveImageResponse, Status> {
        let reference = image_reference(req.image)?;
        let mut state = self.state();
        // Idempotent, as the CRI requires: an unknown image is already removed.
        if let Some(id) = state.find_image(&reference).map(|i| i.id.clone()) {
            state.images.retain(|i| i.id != id);
        }
        Ok(v1::RemoveImageResponse {})
    }

    pub fn image_fs_info(&self, _req: v1::ImageFsInfoRequest) -> Result<v1::ImageFsInfoResponse, Status> {
        let state = self.state();
        let used: u64 = state.images.iter().map(|i| i.size).sum();
        let usage = v1::FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: Some(v1::FilesystemIdentifier { mountpoint: FS_MOUNTPOINT.into() }),
            used_bytes: u64_value(used),
            inodes_used: u64_value(state.images.len() as u64 * 64),
        };
        Ok(v1::ImageFsInfoResponse { image_filesystems: vec![usage], container_filesystems: vec![] })
    }
}

impl State {
    /// By ID (with or without `sha256:`), tag or digest; `busybox` finds
    /// `docker.io/library/busybox:latest`.
    pub(super) fn find_image(&self, reference: &str) -> Option<&v1::Image> {
        let normalized = normalize(reference);
        self.images.iter().find(|image| {
            image.id == reference
                || image.id.strip_prefix("sha256:") == Some(reference)
                || image.repo_tags.contains(&normalized)
                || image.repo_digests.contains(&normalized)
        })
    }
}

fn image_reference(spec: Option<v1::ImageSpec>) -> Result<String, Status> {
    spec.map(|s| s.image).filter(|i| !i.is_empty()).ok_or_else(|| missing("image"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn images() {
        let rt = MemoryRuntime::new();
        let spec = |image: &str| Some(v1::ImageSpec { image: image.into(), ..Default::default() });
        let status = |image: &str| rt.image_status(v1::ImageStatusRequest { image: spec(image), verbose: false });
        let busybox = status("busybox").unwrap().image.expect("busybox is preloaded");
        assert_eq!(busybox.repo_tags, ["docker.io/library/busybox:latest"]);
        assert_eq!(status(&busybox.id).unwrap().image.unwrap().id, busybox.id);
        assert!(status("nginx:1.27").unwrap().image.is_none(), "unknown is None, not an error");

        let pulled = rt.pull_image(v1::PullImageRequest { image: spec("nginx:1.27"), ..Default::default() }).unwrap();
        let nginx = status("docker.io/library/nginx:1.27").unwrap().image.unwrap();
        assert_eq!(pulled.image_ref, nginx.id);
        assert!(nginx.repo_digests[0].starts_with("docker.io/library/nginx@sha256:"));
        let again = rt.pull_image(v1::PullImageRequest { image: spec("nginx:1.27"), ..Default::default() }).unwrap();
        assert_eq!(again.image_ref, pulled.image_ref);
        let filtered = v1::ListImagesRequest { filter: Some(v1::ImageFilter { image: spec("nginx:1.27") }) };
        assert_eq!(rt.list_images(filtered).unwrap().images.len(), 1);
        assert_eq!(rt.list_images(Default::default()).unwrap().images.len(), 3);

        let fs = rt.image_fs_info(v1::ImageFsInfoRequest {}).unwrap().image_filesystems;
        let total: u64 = rt.list_images(Default::default()).unwrap().images.iter().map(|i| i.size).sum();
        assert_eq!(fs[0].used_bytes.unwrap().value, total);
        assert_eq!(fs[0].fs_id.as_ref().unwrap().mountpoint, FS_MOUNTPOINT);

        rt.remove_image(v1::RemoveImageRequest { image: spec("nginx:1.27") }).unwrap();
        assert!(status("nginx:1.27").unwrap().image.is_none());
        rt.remove_image(v1::RemoveImageRequest { image: spec("nginx:1.27") }).unwrap();
        let err = rt.pull_image(v1::PullImageRequest::default()).unwrap_err();
        assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "image is required"));
    }

    #[test]
    fn references_normalize_like_docker() {
        assert_eq!(normalize("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(normalize("nginx:1.27"), "docker.io/library/nginx:1.27");
        assert_eq!(normalize("user/app"), "docker.io/user/app:latest");
        assert_eq!(normalize("localhost:5000/app"), "localhost:5000/app:latest");
        assert_eq!(normalize("registry.k8s.io/pause:3.10"), "registry.k8s.io/pause:3.10");
        assert_eq!(normalize("quay.io/a/b@sha256:00"), "quay.io/a/b@sha256:00");
    }
}
