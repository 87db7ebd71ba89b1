//! A tiny read-only OCI distribution registry on 127.0.0.1, so that `PullImage` can be tested
//! without the network: images (each an OCI manifest, an OCI config and uncompressed layers)
//! under their repositories and tags, served over plain HTTP/1.1 from a thread with `std::net`.
//!
//! Only what a pull needs is answered: `GET /v2/`, `HEAD`/`GET` of the manifest by tag or digest
//! and of each blob by digest. Everything else is 404 (or 405 for other methods), which is also
//! what a pull of a reference the registry does not have must see.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// One piece of content, addressed by its digest (`sha256:<hex>`).
struct Blob {
    digest: String,
    media_type: &'static str,
    bytes: Vec<u8>,
}

/// One image to serve: its config (an OCI image config) and layers (tars, bottom first), under
/// `repository` with each of `tags`.
pub struct Image {
    pub repository: String,
    pub tags: Vec<String>,
    pub config: Vec<u8>,
    pub layers: Vec<Vec<u8>>,
}

struct Content {
    /// `repository` → reference (a tag, or the manifest's digest) → the manifest's digest.
    manifests: HashMap<String, HashMap<String, String>>,
    /// Manifests, configs and layers.
    blobs: HashMap<String, Blob>,
    /// `METHOD path status`, in arrival order: what the runtime actually fetched.
    requests: Mutex<Vec<String>>,
}

pub struct Registry {
    addr: SocketAddr,
    content: Arc<Content>,
    /// The first image's `repository:tag` (`reference`) and config digest (`image_id`).
    first: String,
    config_digest: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Registry {
    /// Serves `repository:tag` made of `config` (an OCI image config) and `layer` (a tar);
    /// `sha256` gives the hex digest of some bytes.
    pub fn start(
        repository: &str,
        tag: &str,
        config: Vec<u8>,
        layer: Vec<u8>,
        sha256: impl Fn(&[u8]) -> String,
    ) -> Self {
        let image = Image { repository: repository.into(), tags: vec![tag.into()], config, layers: vec![layer] };
        Registry::start_many(vec![image], sha256)
    }

    /// Serves every image of `images` (at least one); `reference` and `image_id` are the first's,
    /// with its first tag. Images may share layers, and repositories.
    pub fn start_many(images: Vec<Image>, sha256: impl Fn(&[u8]) -> String) -> Self {
        let blob =
            |media_type, bytes: Vec<u8>| Blob { digest: format!("sha256:{}", sha256(&bytes)), media_type, bytes };
        let descriptor =
            |b: &Blob| serde_json::json!({ "mediaType": b.media_type, "digest": b.digest, "size": b.bytes.len() });
        let mut manifests: HashMap<String, HashMap<String, String>> = HashMap::new();
        let mut blobs = HashMap::new();
        let mut first = None;
        for image in images {
            let config = blob(CONFIG_TYPE, image.config);
            let layers: Vec<Blob> = image.layers.into_iter().map(|l| blob(LAYER_TYPE, l)).collect();
            let manifest = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": descriptor(&config),
                "layers": layers.iter().map(descriptor).collect::<Vec<_>>(),
            });
            let manifest = blob(MANIFEST_TYPE, serde_json::to_vec(&manifest).unwrap());
            let references = manifests.entry(image.repository.clone()).or_default();
            for reference in image.tags.iter().chain([&manifest.digest]) {
                references.insert(reference.clone(), manifest.digest.clone());
            }
            if first.is_none() {
                let tag = image.tags.first().expect("an image with a tag").clone();
                first = Some((format!("{}:{tag}", image.repository), config.digest.clone()));
            }
            for b in [manifest, config].into_iter().chain(layers) {
                blobs.insert(b.digest.clone(), b);
            }
        }
        let (first, config_digest) = first.expect("at least one image");
        let content = Arc::new(Content { manifests, blobs, requests: Mutex::new(Vec::new()) });

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the test registry on 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (content, stop) = (content.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    // containerd fetches the config and the layer in parallel.
                    let content = content.clone();
                    std::thread::spawn(move || serve_connection(stream, &content));
                }
            })
        };
        Registry { addr, content, first, config_digest, stop, thread: Some(thread) }
    }

    /// `127.0.0.1:PORT`, the registry host of the references it serves.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The reference to pull (the first image): `127.0.0.1:PORT/repository:tag`.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.host(), self.first)
    }

    /// The image's ID as the CRI reports it (the config's digest).
    pub fn image_id(&self) -> &str {
        &self.config_digest
    }

    /// Every request so far, as `METHOD path status`.
    pub fn requests(&self) -> Vec<String> {
        self.content.requests.lock().unwrap().clone()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers requests on one connection until the client closes it (Go's client keeps
/// connections alive) or stays idle too long.
fn serve_connection(stream: TcpStream, content: &Content) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        // The headers are not needed (no auth, no ranges: a fresh pull asks for whole blobs),
        // only skipped up to the blank line; GET and HEAD carry no body.
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" || header == "\n" {
                break;
            }
        }
        let mut parts = request_line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        // A query string (none expected) does not change what is served.
        let path = target.split('?').next().unwrap_or("");
        let (status, found) = match method {
            "GET" | "HEAD" => match content.lookup(path) {
                Some(found) => ("200 OK", Some(found)),
                None => ("404 Not Found", None),
            },
            _ => ("405 Method Not Allowed", None),
        };
        content.requests.lock().unwrap().push(format!("{method} {path} {}", &status[..3]));
        let mut head = format!("HTTP/1.1 {status}\r\nDocker-Distribution-Api-Version: registry/2.0\r\n");
        let body: &[u8] = match found {
            Some(Found::Root) => {
                head += "Content-Type: application/json\r\n";
                b"{}"
            }
            Some(Found::Blob(blob)) => {
                head += &format!("Content-Type: {}\r\nDocker-Content-Digest: {}\r\n", blob.media_type, blob.digest);
                &blob.bytes
            }
            None => b"",
        };
        head += &format!("Content-Length: {}\r\n\r\n", body.len());
        let mut reply = head.into_bytes();
        if method != "HEAD" {
            reply.extend_from_slice(body);
        }
        if writer.write_all(&reply).and_then(|()| writer.flush()).is_err() {
            return;
        }
    }
}

enum Found<'a> {
    Root,
    Blob(&'a Blob),
}

impl Content {
    /// `/v2/<repository>/manifests/<reference>` or `/v2/<repository>/blobs/<digest>`; a
    /// repository's name may hold slashes. A blob is served from any repository this registry
    /// has (as registries that share storage do).
    fn lookup(&self, path: &str) -> Option<Found<'_>> {
        if path == "/v2/" || path == "/v2" {
            return Some(Found::Root);
        }
        let rest = path.strip_prefix("/v2/")?;
        if let Some((repository, reference)) = rest.rsplit_once("/manifests/") {
            let digest = self.manifests.get(repository)?.get(reference)?;
            return self.blobs.get(digest).map(Found::Blob);
        }
        let (repository, digest) = rest.rsplit_once("/blobs/")?;
        if !self.manifests.contains_key(repository) {
            return None;
        }
        self.blobs.get(digest).map(Found::Blob)
    }
}
