//! The connection to the container runtime, and which CRI version it speaks (DESIGN principle 8).
//!
//! The version is probed as v1, then v1alpha2, then v1alpha1 (`UNIMPLEMENTED` means "try the
//! next") with a call of the service the endpoint is used for — `RuntimeService/Version`, or
//! `ImageService/ImageFsInfo` for a separate image endpoint, which may serve images only — and
//! probed again after every reconnection, so a runtime restarted or upgraded underneath is picked
//! up. A pinned version skips the probe.

use crate::api::{v1, RpcInfo};
use crate::error::Error;
use crate::grpc::Rpc;
use crate::relay::upstream::Upstream;
use crate::revision::{telling_rpcs, Block, Features, RuntimeProfile, Source, DOCKER};
use crate::runtime_config::{self, CgroupDriver};
use crate::version::CriVersion;
use bytes::Bytes;
use prost::Message;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::Mutex;
use tonic::Code;

/// A version as discovered on one connection.
#[derive(Clone, Debug)]
pub struct Discovered {
    pub version: CriVersion,
    /// How many connections to the endpoint had been made when the probe began: a call on one
    /// made since may have reached a runtime restarted (maybe upgraded) after the probe.
    pub connection: u64,
    /// The probe connection it was found on: when that one ends, the runtime is probed again.
    pub probed_on: Option<u64>,
    pub profile: Arc<Understanding>,
    /// When the probe answered.
    pub at: std::time::Instant,
}

/// What the runtime understands, and the per-field table the request scan uses.
#[derive(Debug)]
pub struct Understanding {
    pub runtime: RuntimeProfile,
    /// Per field id of `runtime.version`'s schema: why the runtime would not act on it, with
    /// every handler's features.
    pub blocked: Vec<Option<Block>>,
    /// The same for a pod on one handler, where the handlers' features differ (CRI-O's `crun`
    /// without recursive read-only mounts beside `runc` with them), by handler name.
    pub blocked_by_handler: Vec<(String, Vec<Option<Block>>)>,
}

impl Understanding {
    pub fn new(runtime: RuntimeProfile) -> Understanding {
        let schema = runtime.version.schema();
        let blocked = runtime.blocked(schema);
        let handlers = runtime.features.as_ref().map(|f| f.handlers.clone()).unwrap_or_default();
        let blocked_by_handler = handlers
            .iter()
            .filter_map(|h| Some((h.name.clone(), runtime.blocked_for_handler(schema, &h.name)?)))
            .collect();
        Understanding { runtime, blocked, blocked_by_handler }
    }

    /// The table for a pod on `handler` (every handler's, if it has none of its own).
    pub fn blocked_on(&self, handler: Option<&str>) -> &[Option<Block>] {
        handler
            .and_then(|name| self.blocked_by_handler.iter().find(|(h, _)| h == name))
            .map_or(&self.blocked, |(_, table)| table)
    }
}

/// What an endpoint is used for, which decides how its version is probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The runtime (and images, unless a separate image endpoint is configured).
    Runtime,
    /// A separate image endpoint (the kubelet's `--image-service-endpoint`).
    Images,
}

/// What the configuration says of the runtime's version (changed by a reload).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pins {
    /// `backend.version`: `None` to discover.
    pub version: Option<CriVersion>,
    /// `backend.revision`: overrides the revision table.
    pub revision: Option<u8>,
    /// `emulate.runtime_config.cgroup_driver`: overrides the runtime's `Status` info.
    pub cgroup_driver: Option<CgroupDriver>,
}

/// Whether the runtime answers, and since when.
#[derive(Clone, Copy, Debug)]
pub struct Health {
    pub up: bool,
    pub since: std::time::SystemTime,
}

pub struct Backend {
    /// As configured: `unix:///run/containerd/containerd.sock`.
    pub endpoint: String,
    /// Its name among several (`backends`); empty for the one `backend`.
    pub name: String,
    role: Role,
    upstream: Upstream,
    max_message_size: usize,
    pins: RwLock<Pins>,
    discovered: RwLock<Option<Discovered>>,
    /// The profile last logged: a probe that finds the same runtime again says nothing.
    announced: std::sync::Mutex<Option<RuntimeProfile>>,
    probing: Mutex<()>,
    health: std::sync::Mutex<Health>,
}

impl Backend {
    pub fn new(endpoint: String, role: Role, socket: PathBuf, pins: Pins, max_message_size: usize) -> Backend {
        Backend {
            endpoint,
            name: String::new(),
            role,
            upstream: Upstream::new(socket, crate::http2::MAX_HEADER_LIST_SIZE),
            max_message_size,
            pins: RwLock::new(pins),
            discovered: RwLock::new(None),
            announced: std::sync::Mutex::new(None),
            probing: Mutex::new(()),
            health: std::sync::Mutex::new(Health { up: false, since: std::time::SystemTime::now() }),
        }
    }

    /// Named among several backends (`backends`).
    pub fn named(mut self, name: &str) -> Backend {
        self.name = name.to_string();
        self
    }

    /// How errors and logs name it: its endpoint, after its name when it has one.
    pub fn who(&self) -> String {
        match self.name.is_empty() {
            true => self.endpoint.clone(),
            false => format!("backend {:?} ({})", self.name, self.endpoint),
        }
    }

    /// Whether the runtime answers, and since when.
    pub fn health(&self) -> Health {
        *self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mark(&self, up: bool) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        if health.up != up {
            *health = Health { up, since: std::time::SystemTime::now() };
        }
    }

    /// The version pin and revision now in force.
    pub fn pins(&self) -> Pins {
        *self.pins.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets a new pin and revision (a reload): the next call probes again.
    pub fn set_pins(&self, pins: Pins) {
        let mut current = self.pins.write().unwrap_or_else(|e| e.into_inner());
        if *current != pins {
            *current = pins;
            drop(current);
            self.forget();
        }
    }

    /// The version discovered last, on the current connection or an older one.
    pub fn discovered(&self) -> Option<Discovered> {
        self.discovered.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The connection cri-bridge's own calls (its probes) are sent on.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// A connection of a client's own, numbered with the probes' (see [`Backend::made_after`]).
    pub fn client_upstream(&self) -> Upstream {
        self.upstream.sibling()
    }

    /// The version to speak now, and what the runtime understands: cached for the current
    /// connection, or probed (a pinned version skips the version probe, not the profile).
    pub async fn version(&self) -> Result<Discovered, Error> {
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let _one_probe_at_a_time = self.probing.lock().await;
        if let Some(found) = self.current() {
            return Ok(found);
        }
        // Read before the probe: a connection made during it may reach a runtime newer than it.
        let connection = self.upstream.made();
        let probed = self.probe().await;
        self.mark(probed.is_ok());
        let (version, profile) = probed?;
        let found = Discovered {
            version,
            connection,
            probed_on: self.upstream.open_number(),
            profile: Arc::new(Understanding::new(profile)),
            at: std::time::Instant::now(),
        };
        self.discovered.write().unwrap_or_else(|e| e.into_inner()).replace(found.clone());
        let previous = self.announced.lock().unwrap_or_else(|e| e.into_inner()).replace(found.profile.runtime.clone());
        if previous.as_ref() != Some(&found.profile.runtime) {
            let runtime = &found.profile.runtime;
            tracing::info!(endpoint = %self.endpoint, %version, minor = runtime.minor, "container runtime speaks {runtime}");
            if runtime.source == Source::Assumed {
                tracing::warn!(endpoint = %self.endpoint, "{runtime}");
            }
            if self.role == Role::Runtime && !runtime.has_runtime_config() {
                let (who, known) = (runtime_config::who_answers(&runtime.cgroup_driver), runtime.cgroup_driver.is_ok());
                let kubelets = runtime_config::kubelets(known);
                match known {
                    true => tracing::info!(endpoint = %self.endpoint, "RuntimeConfig: {who}: {kubelets}"),
                    false => tracing::warn!(endpoint = %self.endpoint, "RuntimeConfig: {who}: {kubelets}"),
                }
            }
        }
        Ok(found)
    }

    /// True when the probe connection `found` was discovered on has ended since: the runtime
    /// went away (restarted, maybe upgraded), or a probe call failed.
    pub fn is_stale(&self, found: &Discovered) -> bool {
        self.upstream.open_number() != found.probed_on
    }

    /// True when connection `number` (see [`Upstream::send`]) was made after `found`'s probe
    /// began: a call on it may have reached a runtime that `found` does not describe.
    pub fn made_after(&self, found: &Discovered, number: u64) -> bool {
        number > found.connection
    }

    /// Forgets the discovered version: the next call probes again.
    pub fn forget(&self) {
        self.discovered.write().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn current(&self) -> Option<Discovered> {
        let found = self.discovered.read().unwrap_or_else(|e| e.into_inner()).clone()?;
        (!self.is_stale(&found)).then_some(found)
    }

    /// Finds the version (asking in each, newest first, with a call of the endpoint's role,
    /// unless pinned) and what the runtime understands.
    pub async fn probe(&self) -> Result<(CriVersion, RuntimeProfile), Error> {
        let unreachable =
            |status: tonic::Status| Error::Unreachable { endpoint: self.who(), detail: status.message().to_string() };
        let pins = self.pins();
        let candidates = match pins.version {
            Some(version) => vec![version],
            None => CriVersion::NEWEST_FIRST.to_vec(),
        };
        for version in candidates {
            let answer = match self.role {
                Role::Runtime => self.call_version(version).await.map(Some),
                Role::Images => self.call_image_fs_info(version).await.map(|()| None),
            };
            let version_answer = match answer {
                Ok(answer) => answer,
                Err(status) if status.code() == Code::Unimplemented && pins.version.is_none() => continue,
                Err(status) if status.code() == Code::Unimplemented => None,
                Err(status) => return Err(unreachable(status)),
            };
            // An image-only endpoint may not serve RuntimeService: then nothing is known of it.
            let version_answer = match version_answer {
                Some(answer) => Some(answer),
                None => self.call_version(version).await.ok(),
            };
            let mut profile = self.judge(version, version_answer.as_ref(), pins.revision).await;
            if self.role == Role::Runtime && !profile.has_runtime_config() {
                let read = self.cgroup_driver(version, profile.shows_runtime_options()).await;
                profile.cgroup_driver = match pins.cgroup_driver {
                    Some(pin) => runtime_config::pinned(pin, read),
                    None => read,
                };
            }
            return Ok((version, profile));
        }
        Err(Error::NoCri { endpoint: self.who() })
    }

    /// What the runtime that answered `Version` with `answer` (in `version`) understands: its
    /// revision (the table, `pin`, or the RPCs its service has), what it does not act on, and the
    /// features it reports. `serve` and `probe` judge a runtime here alike.
    pub async fn judge(
        &self,
        version: CriVersion,
        answer: Option<&v1::VersionResponse>,
        pin: Option<u8>,
    ) -> RuntimeProfile {
        let mut profile = match answer {
            Some(v) => RuntimeProfile::from_version(version, &v.runtime_name, &v.runtime_version, pin),
            None => RuntimeProfile::unknown(version, pin),
        };
        if self.role == Role::Runtime && profile.source == Source::Assumed {
            // cri-dockerd's v1 service tells its revisions in both versions, by the RPCs it
            // has (its releases' pins are known); an unknown runtime only by those it
            // implements: one built against a newer cri-api than its code has the newer RPCs
            // unimplemented, and acts on no more than its code reads.
            profile = match profile.runtime_name == DOCKER {
                true => profile.with_rpc_floor(self.rpc_floor(CriVersion::V1, true).await),
                false => profile.with_rpc_floor(self.rpc_floor(version, false).await),
            };
        }
        if profile.reports_features() {
            profile.features = Some(self.features().await);
        }
        profile
    }

    /// The features the runtime reports in `Status`; none when it cannot be read (fail closed).
    pub async fn features(&self) -> Features {
        let info = CriVersion::V1.schema().rpc("RuntimeService", "Status").expect("v1 has Status");
        match self.unary(Rpc { version: CriVersion::V1, info }, &[]).await {
            Ok(answer) => match v1::StatusResponse::decode(answer) {
                Ok(status) => Features::from_status(&status),
                Err(error) => {
                    tracing::warn!(endpoint = %self.endpoint, %error, "invalid StatusResponse: taking no feature as reported");
                    Features::default()
                }
            },
            Err(status) => {
                tracing::warn!(endpoint = %self.endpoint, message = status.message(), "Status failed: taking no feature as reported");
                Features::default()
            }
        }
    }

    /// The revision of the newest of [`telling_rpcs`] the runtime's `version` service answers:
    /// implemented (answered, or failed in the method), or with `registered`, also a method its
    /// service has but does not implement (`UNIMPLEMENTED` in grpc-go's words for that, against
    /// `unknown method` for one it lacks). `None` when it has none, or cannot tell (the runtime
    /// went away).
    pub async fn rpc_floor(&self, version: CriVersion, registered: bool) -> Option<u8> {
        for &(method, since) in telling_rpcs(version) {
            let info = version.schema().rpc("RuntimeService", method).expect("a telling RPC of its version");
            let has = match self.unary(Rpc { version, info }, &[]).await {
                Ok(_) => true,
                Err(status) => match status.code() {
                    Code::Unimplemented => registered && status.message() == format!("method {method} not implemented"),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => return None,
                    _ => true,
                },
            };
            if has {
                return Some(since);
            }
        }
        None
    }

    /// The cgroup driver named in the runtime's `Status` verbose info (asked in `version`:
    /// `StatusRequest.verbose` and `StatusResponse.info` have the same numbers in every version).
    pub async fn cgroup_driver(&self, version: CriVersion, options_shown: bool) -> runtime_config::Reading {
        let info = version.schema().rpc("RuntimeService", "Status").expect("every CRI version has Status");
        let request = v1::StatusRequest { verbose: true }.encode_to_vec();
        let answer = self
            .unary(Rpc { version, info }, &request)
            .await
            .map_err(|status| format!("its Status (verbose) failed: {:?} {}", status.code(), status.message()))?;
        let status = v1::StatusResponse::decode(answer).map_err(|e| format!("its StatusResponse is invalid: {e}"))?;
        runtime_config::from_status_info(&status.info, options_shown)
    }

    /// The runtime handler a sandbox runs on, asked with `PodSandboxStatus` in `version`
    /// (`PodSandboxStatus.runtime_handler` has the same number in v1alpha2 and v1); `None` when
    /// the runtime cannot say.
    pub async fn sandbox_handler(&self, version: CriVersion, sandbox: &str) -> Option<String> {
        let info = version.schema().rpc("RuntimeService", "PodSandboxStatus")?;
        let request = v1::PodSandboxStatusRequest { pod_sandbox_id: sandbox.to_string(), verbose: false };
        let answer = self.unary(Rpc { version, info }, &request.encode_to_vec()).await.ok()?;
        Some(v1::PodSandboxStatusResponse::decode(answer).ok()?.status?.runtime_handler)
    }

    /// The cgroup driver the runtime uses: its `RuntimeConfig` answer, or read from its `Status`
    /// (or pinned). `None`: unknown, or the runtime is away.
    pub async fn driver(&self) -> Option<CgroupDriver> {
        let found = self.version().await.ok()?;
        if found.profile.runtime.has_runtime_config() {
            return self.runtime_config().await.ok();
        }
        found.profile.runtime.cgroup_driver.as_ref().ok().map(|known| known.driver)
    }

    /// Calls v1 `RuntimeConfig`: the cgroup driver, or the answer's code and message.
    pub async fn runtime_config(&self) -> Result<CgroupDriver, String> {
        let info = CriVersion::V1.schema().rpc("RuntimeService", "RuntimeConfig").expect("v1 has RuntimeConfig");
        match self.unary(Rpc { version: CriVersion::V1, info }, &[]).await {
            Ok(answer) => match v1::RuntimeConfigResponse::decode(answer) {
                Ok(v1::RuntimeConfigResponse { linux: Some(linux) }) => Ok(linux.cgroup_driver().into()),
                Ok(_) => Err("the answer has no linux configuration".to_string()),
                Err(e) => Err(format!("invalid RuntimeConfigResponse: {e}")),
            },
            Err(status) => Err(format!("{:?}: {}", status.code(), status.message())),
        }
    }

    /// Calls `Version` as `version`; the answer decodes the same in every version.
    pub async fn call_version(&self, version: CriVersion) -> Result<v1::VersionResponse, tonic::Status> {
        let rpc = Rpc { version, info: version_rpc(version) };
        let request = v1::VersionRequest { version: version.as_str().to_string() };
        let response = self.unary(rpc, &request.encode_to_vec()).await?;
        v1::VersionResponse::decode(response)
            .map_err(|e| tonic::Status::internal(format!("invalid VersionResponse: {e}")))
    }

    /// Calls `ImageFsInfo` as `version`: every version's image service has it, and it is cheap.
    async fn call_image_fs_info(&self, version: CriVersion) -> Result<(), tonic::Status> {
        let info = version.schema().rpc("ImageService", "ImageFsInfo").expect("every CRI version has ImageFsInfo");
        self.unary(Rpc { version, info }, &[]).await.map(drop)
    }

    /// One call of cri-bridge's own (a probe), on the connection calls are sent on.
    pub async fn unary(&self, rpc: Rpc, message: &[u8]) -> Result<Bytes, tonic::Status> {
        let answer = self.upstream.unary(&rpc.path(), message, PROBE_TIMEOUT, self.max_message_size).await;
        if answer.as_ref().is_err_and(|status| status.code() == Code::Unavailable) {
            self.upstream.reset();
        }
        answer
    }

    /// Keeps the discovered version fresh: retries an unreachable runtime with backoff, and probes
    /// again whenever the probe connection ends or is made again. Runs until the task is dropped.
    pub async fn watch(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(100);
        let mut reported = false;
        loop {
            match self.version().await {
                Ok(_) => {
                    backoff = Duration::from_millis(100);
                    reported = false;
                    self.upstream.changed.notified().await;
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

/// How long a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

fn version_rpc(version: CriVersion) -> &'static RpcInfo {
    version.schema().rpc("RuntimeService", "Version").expect("every CRI version has RuntimeService/Version")
}
