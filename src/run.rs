//! Starting and stopping the daemon: `run(config, shutdown)` wires the backend(s), the
//! forwarder and the frontend socket, serves until `shutdown` completes, then drains and cleans up.

use crate::access::Policy;
use crate::backend::{Backend, Pins, Role};
use crate::callers::Callers;
use crate::config::{Config, Endpoint, NamedBackend};
use crate::control::Control;
use crate::convert::policy::LossPolicy;
use crate::forward::{Access, Forwarder, Routed, Rules, Scoped};
use crate::frontend::{self, BindError};
use crate::metrics::{Metrics, Scrape};
use crate::observers::Observers;
use crate::reload::{Live, Reloader};
use crate::version::CriVersion;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("cannot start the in-memory runtime: {0}")]
    Memory(std::io::Error),
    #[error("the socket systemd passed cannot be served: {0}")]
    Activated(std::io::Error),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    #[error("config key `backends`: {0}")]
    Drivers(String),
    #[error("serving the frontend failed: {0}")]
    Serve(#[from] std::io::Error),
}

/// An in-memory runtime started for `backend.endpoint: memory`, on a private socket, on a thread
/// of its own: like any runtime, its work (a 2,500-container list, a 300,000-env request) must
/// not run on the thread every call of the proxy needs.
struct MemoryBackend {
    dir: PathBuf,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl MemoryBackend {
    async fn start(version: CriVersion, name: &str) -> Result<(MemoryBackend, PathBuf), RunError> {
        let dir = std::env::temp_dir().join(format!("cri-bridge-memory-{}{name}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(RunError::Memory)?;
        let socket = dir.join("runtime.sock");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound, listening) = tokio::sync::oneshot::channel::<std::io::Result<()>>();
        let path = socket.clone();
        let thread = std::thread::Builder::new()
            .name("memory-runtime".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = bound.send(Err(error));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let served = crate::memory::serve_memory(&path, &[version], async {
                        let _ = stopped.await;
                    })
                    .await;
                    match served {
                        Ok((_, task)) => {
                            let _ = bound.send(Ok(()));
                            let _ = task.await;
                        }
                        Err(error) => {
                            let _ = bound.send(Err(error));
                        }
                    }
                });
            })
            .map_err(RunError::Memory)?;
        let gone = || std::io::Error::other("the in-memory runtime's thread ended");
        listening.await.map_err(|_| gone()).and_then(|bound| bound).map_err(RunError::Memory)?;
        tracing::info!(%version, "started the in-memory runtime (no container runtime needed)");
        Ok((MemoryBackend { dir, stop, thread }, socket))
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every backend: the one `backend`, or each of `backends`; an in-memory runtime started for
/// each `memory` endpoint.
async fn start_backends(config: &Config) -> Result<(Vec<Routed>, Vec<MemoryBackend>), RunError> {
    let one = NamedBackend {
        name: String::new(),
        endpoint: config.backend.clone(),
        image_endpoint: config.image_backend.clone(),
        version: config.backend_version,
        revision: config.backend_revision,
        image_revision: config.image_revision,
    };
    let named = config.routing.as_ref().map_or_else(|| vec![one], |r| r.backends.clone());
    let (mut routed, mut memories) = (Vec::new(), Vec::new());
    for spec in named {
        let socket = match &spec.endpoint {
            Endpoint::Memory => {
                let started = MemoryBackend::start(spec.version.unwrap_or(CriVersion::V1), &spec.name).await;
                let (memory, socket) = match started {
                    Ok(started) => started,
                    Err(error) => {
                        stop_watchers(Vec::new(), memories).await;
                        return Err(error);
                    }
                };
                memories.push(memory);
                socket
            }
            Endpoint::Unix(path) => path.clone(),
        };
        let make = |endpoint: &Endpoint, role, socket, revision, cgroup_driver| {
            let pins = Pins { version: spec.version, revision, cgroup_driver };
            let backend = Backend::new(endpoint.to_string(), role, socket, pins, config.max_message_size);
            Arc::new(backend.named(&spec.name))
        };
        let runtime = make(&spec.endpoint, Role::Runtime, socket, spec.revision, config.cgroup_driver);
        let image = match &spec.image_endpoint {
            Some(endpoint @ Endpoint::Unix(path)) => {
                make(endpoint, Role::Images, path.clone(), spec.image_revision, None)
            }
            _ => runtime.clone(),
        };
        routed.push(Routed { name: spec.name.clone(), runtime, image });
    }
    Ok((routed, memories))
}

/// Runs the proxy until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), RunError> {
    run_on(config, None, None, shutdown).await
}

/// Runs the proxy on `activated`, a listening socket systemd passed, when there is one (see
/// [`crate::systemd::activated_listener`]), else on `listen.path`; with a `reloader`, `SIGHUP`
/// reloads the config.
pub async fn run_on(
    config: Config,
    activated: Option<std::os::unix::net::UnixListener>,
    reloader: Option<Reloader>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    // SIGHUP's handler is installed first, before anything is served and READY=1 sent: a
    // `systemctl reload` at once must reload, not meet SIGHUP's default action (death).
    let reloader =
        reloader.and_then(|reloader| match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(hangups) => Some((reloader, hangups)),
            Err(error) => {
                tracing::warn!(%error, "cannot watch for SIGHUP: the config cannot be reloaded");
                None
            }
        });
    for gone in &config.gone {
        tracing::warn!(key = gone.key, "{}", gone.why);
    }
    let (routed, memory) = start_backends(&config).await?;
    let endpoints = endpoints_of(&routed);
    let watchers: Vec<_> = endpoints.iter().map(|b| tokio::spawn(b.clone().watch())).collect();
    let (runtime, image) = match routed.first() {
        Some(first) => (first.runtime.clone(), first.image.clone()),
        None => return Err(RunError::Memory(std::io::Error::other("no backend"))),
    };
    if let Err(conflict) = same_cgroup_driver(&routed).await {
        stop_watchers(watchers, memory).await;
        return Err(RunError::Drivers(conflict));
    }
    // The forwarder, once made: what the metrics read of several backends.
    let placed: Arc<std::sync::OnceLock<Arc<Forwarder>>> = Arc::default();
    let metrics = Arc::new(Metrics::new(&config.limits));
    metrics.set_memory_ceiling(&config.limits, config.runtime_connections());
    raise_open_files(&config);
    let callers = Arc::new(Callers::default());
    let budget = crate::budget::Budget::new(config.limits.buffer_bytes, config.limits.buffer_per_connection_bytes);
    let policy = Arc::new(LossPolicy::counted(config.loss_policy.clone(), metrics.clone()));
    // Bound before the CRI socket, so a bad metrics.listen stops the start before READY.
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics_endpoint = match &config.metrics_listen {
        Some(listen) => match crate::metrics::Endpoint::bind(listen).await {
            Ok(endpoint) => {
                tracing::info!(listen = %listen, "serving Prometheus metrics");
                let (routed, forwarder) = (routed.clone(), placed.clone());
                let routed_now = Arc::new(move || routed_backends(&routed, forwarder.get()));
                let scrape = Scrape {
                    routed: routed_now,
                    metrics: metrics.clone(),
                    backends: endpoints.clone(),
                    callers: callers.clone(),
                    budget: budget.clone(),
                };
                Some(tokio::spawn(endpoint.serve(scrape, async {
                    let _ = metrics_stopped.await;
                })))
            }
            Err(error) => {
                stop_watchers(watchers, memory).await;
                return Err(error.into());
            }
        },
        None => None,
    };

    let result = async {
        // `listen`: the socket's path, for the logs and systemd's status.
        let (listener, socket_file, listen) = match activated {
            // The socket and its file are the .socket unit's: nothing to bind, nothing to remove.
            Some(listener) => {
                listener.set_nonblocking(true).map_err(RunError::Activated)?;
                let listen = listener.local_addr().ok().and_then(|a| a.as_pathname().map(|p| p.to_path_buf()));
                let listener = tokio::net::UnixListener::from_std(listener).map_err(RunError::Activated)?;
                tracing::info!("serving the socket systemd passed; listen.path is not used");
                (listener, None, listen.unwrap_or_else(|| "(the socket systemd passed)".into()))
            }
            None => {
                let (listener, file) =
                    frontend::bind(&config.listen_path, config.listen_mode, config.listen_group.as_deref()).await?;
                (listener, Some(file), config.listen_path.clone())
            }
        };
        let versions: Vec<_> = config.versions.iter().map(|v| v.as_str()).collect();
        // Every backend, so that the line says where each runtime's calls go.
        let backends = match &config.routing {
            Some(routing) => {
                let named = routing.backends.iter().enumerate().map(|(i, b)| {
                    let default = if i == routing.default { " (default)" } else { "" };
                    format!("{}={}{default}", b.name, b.endpoint)
                });
                named.collect::<Vec<_>>().join(", ")
            }
            None => config.backend.to_string(),
        };
        tracing::info!(listen = %listen.display(), versions = %versions.join(","), %backends, "serving CRI");
        let forwarder = Arc::new(Forwarder::new(
            routed.clone(),
            policy.clone(),
            &config,
            Arc::new(Observers { metrics: metrics.clone(), callers: callers.clone() }),
            Arc::new(Control::new(routed.clone(), &config.versions, callers.clone())),
            budget.clone(),
        ));
        let _ = placed.set(forwarder.clone());
        // Among several backends, who holds what is listed at start and again and again.
        let refresh = (routed.len() > 1).then(|| {
            let forwarder = forwarder.clone();
            tokio::spawn(async move {
                loop {
                    forwarder.refresh_owners().await;
                    tokio::time::sleep(crate::forward::REFRESH_EVERY).await;
                }
            })
        });
        // The main socket, then each scoped one, all served by the one forwarder.
        let main_rules = Rules { policy: Policy::All, mutating: config.mutating.clone(), brownout: config.brownout.clone() };
        let mut accesses = vec![Access::new(&listen, main_rules)];
        let mut sockets = vec![(listener, Arc::new(Scoped { forwarder: forwarder.clone(), access: accesses[0].clone() }))];
        let mut scoped_files = Vec::new();
        for endpoint in &config.endpoints {
            let (listener, file) = match frontend::bind(&endpoint.path, endpoint.mode, endpoint.group.as_deref()).await {
                Ok(bound) => bound,
                Err(error) => {
                    // Nothing bound so far outlives the failed start.
                    for file in socket_file.into_iter().chain(scoped_files) {
                        file.remove_if_ours();
                    }
                    return Err(error.into());
                }
            };
            tracing::info!(listen = %endpoint.path.display(), policy = endpoint.policy.name(), "serving a scoped socket");
            let access = Access::new(&endpoint.path, Rules { policy: endpoint.policy.clone(), mutating: None, brownout: Vec::new() });
            sockets.push((listener, Arc::new(Scoped { forwarder: forwarder.clone(), access: access.clone() })));
            accesses.push(access);
            scoped_files.push(file);
        }
        // The runtime may still be away: it is found in the background, calls meanwhile are
        // answered UNAVAILABLE naming it, and systemd's status says so until it answers.
        let status: Arc<dyn Fn() -> String + Send + Sync> = {
            let served = format!("serving CRI {} on {}", versions.join(","), listen.display());
            let backends = endpoints.clone();
            Arc::new(move || {
                let each: Vec<String> = backends.iter().map(|b| describe_backend(b)).collect();
                format!("{served}; {}", each.join("; "))
            })
        };
        crate::systemd::notify(&format!("READY=1\nSTATUS={}", status()));
        let (heartbeat, heartbeats) = tokio::sync::mpsc::channel(1);
        let supervisor = std::env::var_os("NOTIFY_SOCKET").map(|_| {
            let watchdog = crate::systemd::watchdog_interval();
            let watchers: Vec<_> = watchers.iter().map(|w| w.abort_handle()).collect();
            let healthy = move || match watchers.iter().any(|w| w.is_finished()) {
                true => Err("a backend watcher has stopped".to_string()),
                false => Ok(()),
            };
            let status = status.clone();
            let every = watchdog.unwrap_or(STATUS_EVERY);
            tokio::spawn(crate::systemd::supervise(every, watchdog.is_some(), heartbeat, healthy, move || status()))
        });
        let reloads = reloader.map(|(reloader, hangups)| {
            let live = Live {
                config: config.clone(),
                policy: policy.clone(),
                runtime: runtime.clone(),
                image: image.clone(),
                sockets: accesses.clone(),
            };
            tokio::spawn(crate::reload::on_sighup(live, reloader, hangups, status.clone()))
        });
        let shutdown = async {
            shutdown.await;
            crate::systemd::notify("STOPPING=1\nSTATUS=draining calls in flight");
        };
        let served = crate::relay::serve(sockets, config.limits, heartbeats, shutdown).await;
        for task in [supervisor, reloads, refresh].into_iter().flatten() {
            task.abort();
        }
        for file in socket_file.into_iter().chain(scoped_files) {
            file.remove_if_ours();
        }
        let counters = &policy.counters;
        tracing::info!(
            rejected = counters.rejected.load(Ordering::Relaxed),
            warned = counters.warned.load(Ordering::Relaxed),
            allowed = counters.allowed.load(Ordering::Relaxed),
            "fields that conversions could not carry, since start"
        );
        served.map_err(RunError::from)
    }
    .await;

    let _ = stop_metrics.send(());
    if let Some(endpoint) = metrics_endpoint {
        let _ = endpoint.await;
    }
    stop_watchers(watchers, memory).await;
    tracing::info!("stopped");
    result
}

/// How often systemd's `STATUS=` is brought up to date when there is no watchdog to ping.
const STATUS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Raises the open-file soft limit to the hard one (as Go programs such as containerd do), and
/// warns when even that cannot hold `limits.connections` client connections, each with its own
/// runtime connections (`Config::runtime_connections`): past it, new connections fail to accept.
fn raise_open_files(config: &Config) {
    let per_connection = 1 + config.runtime_connections();
    let needed = (config.limits.connections * per_connection + 64) as u64;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < needed => tracing::warn!(
            "the open-file limit ({limit}) is below what limits.connections ({}) needs ({needed}: each client \
             connection holds {per_connection}); raise it (LimitNOFILE=) or lower limits.connections",
            config.limits.connections
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "cannot raise the open-file limit"),
    }
}

/// Several backends on one node must use one cgroup driver: the kubelet has one. Each that
/// answers at start is asked (a backend away is asked nothing, and is not waited for).
async fn same_cgroup_driver(routed: &[Routed]) -> Result<(), String> {
    if routed.len() < 2 {
        return Ok(());
    }
    let asked = routed.iter().map(|b| async move {
        let driver = tokio::time::timeout(std::time::Duration::from_secs(5), b.runtime.driver()).await;
        (b.name.as_str(), driver.ok().flatten())
    });
    let drivers: Vec<_> = futures_util::future::join_all(asked).await;
    let known: Vec<_> = drivers.iter().filter_map(|(name, d)| d.map(|d| (*name, d))).collect();
    match known.iter().find(|(_, d)| *d != known[0].1) {
        Some((other, driver)) => Err(format!(
            "backend {:?} uses the {:?} cgroup driver and backend {other:?} the {driver:?} one: the kubelet has one \
             cgroup driver, so every backend must use the same",
            known[0].0, known[0].1
        )),
        None => Ok(()),
    }
}

/// Each of several backends for a scrape: its name, health and sandboxes (none for one backend).
fn routed_backends(routed: &[Routed], forwarder: Option<&Arc<Forwarder>>) -> Vec<crate::metrics::RoutedBackend> {
    if routed.len() < 2 {
        return Vec::new();
    }
    let sandboxes = forwarder.map(|f| f.router_sandboxes()).unwrap_or_default();
    routed
        .iter()
        .enumerate()
        .map(|(i, r)| crate::metrics::RoutedBackend {
            name: r.name.clone(),
            up: r.runtime.health().up,
            sandboxes: sandboxes.get(i).map_or(0, |(_, n)| *n),
        })
        .collect()
}

/// Every endpoint of every backend: its runtime's, then its image endpoint's when separate.
fn endpoints_of(routed: &[Routed]) -> Vec<Arc<Backend>> {
    let mut endpoints = Vec::new();
    for backend in routed {
        endpoints.push(backend.runtime.clone());
        if !Arc::ptr_eq(&backend.runtime, &backend.image) {
            endpoints.push(backend.image.clone());
        }
    }
    endpoints
}

/// One backend as systemd's status shows it.
fn describe_backend(backend: &Backend) -> String {
    let health = backend.health();
    match (health.up, backend.discovered()) {
        (true, Some(found)) => {
            let runtime = &found.profile.runtime;
            format!(
                "runtime {} up: CRI {}, {} {}",
                backend.who(),
                found.version,
                runtime.runtime_name,
                runtime.runtime_version
            )
        }
        (true, None) => format!("runtime {} up", backend.who()),
        (false, _) => format!(
            "runtime {} not answering (since {})",
            backend.who(),
            humantime::format_rfc3339_seconds(health.since)
        ),
    }
}

async fn stop_watchers(watchers: Vec<tokio::task::JoinHandle<()>>, memories: Vec<MemoryBackend>) {
    for watcher in watchers {
        watcher.abort();
    }
    for memory in memories {
        memory.stop().await;
    }
}
