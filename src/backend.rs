//! The connection to the container runtime, and which CRI version it speaks (DESIGN principle 8).
//!
//! The version is probed as v1, then v1alpha2, then v1alpha1 (`UNIMPLEMENTED` means "try the
//! next") with a call of the service the endpoint is used for — `RuntimeService/Version`, or
//! `ImageService/ImageFsInfo` for a separate image endpoint, which may serve images only — and
//! probed again after every reconnection, so a runtime restarted or upgraded underneath is picked
//! up. A pinned version skips the probe.

use crate::api::{v1, RpcInfo};
use crate::error::Error;
use crate::grpc::{unix_channel, CriClient, Rpc};
use crate::version::CriVersion;
use bytes::Bytes;
use prost::Message;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{Mutex, Notify};
use tonic::{Code, Request};

/// A version as discovered on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discovered {
    pub version: CriVersion,
    /// The connection count when it was discovered; a newer connection means "probe again".
    pub connection: u64,
}

/// What an endpoint is used for, which decides how its version is probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The runtime (and images, unless a separate image endpoint is configured).
    Runtime,
    /// A separate image endpoint (the kubelet's `--image-service-endpoint`).
    Images,
}

pub struct Backend {
    /// As configured: `unix:///run/containerd/containerd.sock`.
    pub endpoint: String,
    role: Role,
    client: CriClient,
    pinned: Option<CriVersion>,
    /// Incremented by the connector on every connection attempt.
    connections: Arc<AtomicU64>,
    connected: Arc<Notify>,
    discovered: RwLock<Option<Discovered>>,
    probing: Mutex<()>,
}

impl Backend {
    pub fn new(
        endpoint: String,
        role: Role,
        socket: PathBuf,
        pinned: Option<CriVersion>,
        max_message_size: usize,
    ) -> Backend {
        let connections = Arc::new(AtomicU64::new(0));
        let connected = Arc::new(Notify::new());
        let channel = {
            let (connections, connected) = (connections.clone(), connected.clone());
            unix_channel(socket, move || {
                connections.fetch_add(1, Ordering::SeqCst);
                connected.notify_one();
            })
        };
        Backend {
            endpoint,
            role,
            client: CriClient::new(channel, max_message_size),
            pinned,
            connections,
            connected,
            discovered: RwLock::new(None),
            probing: Mutex::new(()),
        }
    }

    pub fn client(&self) -> &CriClient {
        &self.client
    }

    /// The version to speak now: pinned, cached for the current connection, or probed.
    pub async fn version(&self) -> Result<Discovered, Error> {
        if let Some(version) = self.pinned {
            return Ok(Discovered { version, connection: self.connections.load(Ordering::SeqCst) });
        }
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let _one_probe_at_a_time = self.probing.lock().await;
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let version = self.probe().await?;
        let found = Discovered { version, connection: self.connections.load(Ordering::SeqCst) };
        let previous = self.discovered.write().unwrap_or_else(|e| e.into_inner()).replace(found);
        if previous.map(|p| p.version) != Some(version) {
            tracing::info!(endpoint = %self.endpoint, %version, "container runtime speaks CRI {version}");
        }
        Ok(found)
    }

    /// True when the connection has changed since `found` was discovered.
    pub fn is_stale(&self, found: Discovered) -> bool {
        self.pinned.is_none() && self.connections.load(Ordering::SeqCst) != found.connection
    }

    /// Forgets the discovered version: the next call probes again.
    pub fn forget(&self) {
        self.discovered.write().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn current(&self) -> Option<Discovered> {
        let found = (*self.discovered.read().unwrap_or_else(|e| e.into_inner()))?;
        (!self.is_stale(found)).then_some(found)
    }

    /// Asks in each version, newest first, with a call of the endpoint's role.
    pub async fn probe(&self) -> Result<CriVersion, Error> {
        for version in CriVersion::NEWEST_FIRST {
            let answer = match self.role {
                Role::Runtime => self.call_version(version).await.map(drop),
                Role::Images => self.call_image_fs_info(version).await,
            };
            match answer {
                Ok(_) => return Ok(version),
                Err(status) if status.code() == Code::Unimplemented => continue,
                Err(status) => {
                    return Err(Error::Unreachable {
                        endpoint: self.endpoint.clone(),
                        detail: status.message().to_string(),
                    })
                }
            }
        }
        Err(Error::NoCri { endpoint: self.endpoint.clone() })
    }

    /// Calls `Version` as `version`; the answer decodes the same in every version.
    pub async fn call_version(&self, version: CriVersion) -> Result<v1::VersionResponse, tonic::Status> {
        let rpc = Rpc { version, info: version_rpc(version) };
        let request = v1::VersionRequest { version: version.as_str().to_string() };
        let mut request = Request::new(Bytes::from(request.encode_to_vec()));
        request.set_timeout(Duration::from_secs(5));
        let response = self.client.unary(rpc, request).await?;
        v1::VersionResponse::decode(response.into_inner())
            .map_err(|e| tonic::Status::internal(format!("invalid VersionResponse: {e}")))
    }

    /// Calls `ImageFsInfo` as `version`: every version's image service has it, and it is cheap.
    async fn call_image_fs_info(&self, version: CriVersion) -> Result<(), tonic::Status> {
        let info = version.schema().rpc("ImageService", "ImageFsInfo").expect("every CRI version has ImageFsInfo");
        let mut request = Request::new(Bytes::new());
        request.set_timeout(Duration::from_secs(5));
        self.client.unary(Rpc { version, info }, request).await.map(drop)
    }

    /// Keeps the discovered version fresh: retries an unreachable runtime with backoff, and probes
    /// again whenever a new connection is made. Runs until the task is dropped.
    pub async fn watch(self: Arc<Self>) {
        if self.pinned.is_some() {
            return;
        }
        let mut backoff = Duration::from_millis(100);
        let mut reported = false;
        loop {
            match self.version().await {
                Ok(_) => {
                    backoff = Duration::from_millis(100);
                    reported = false;
                    self.connected.notified().await;
                }
                Err(error) => {
                    if !reported {
                        tracing::warn!(%error, "container runtime not ready; retrying with backoff");
                        reported = true;
                    } else {
                        tracing::debug!(%error, "container runtime still not ready");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

fn version_rpc(version: CriVersion) -> &'static RpcInfo {
    version.schema().rpc("RuntimeService", "Version").expect("every CRI version has RuntimeService/Version")
}
