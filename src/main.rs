//! The `cri-bridge` command: parse the command line, load the config, start logging, run.

use clap::{Parser, Subcommand};
use cri_bridge::config::{Config, LogFormat, Overrides};
use cri_bridge::reload::{Reloader, SetLogLevel};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(version, about = "Bridges a kubelet and a container runtime that speak different CRI versions")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve every enabled CRI version on the listen socket and forward to the runtime.
    Serve {
        /// YAML config file (see config.example.yaml); flags override it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Listen socket path.
        #[arg(long)]
        listen: Option<PathBuf>,
        /// Runtime endpoint: unix:///path/to.sock, or `memory` for the built-in in-memory runtime.
        #[arg(long)]
        backend: Option<String>,
        /// Separate image service endpoint (like the kubelet's --image-service-endpoint).
        #[arg(long)]
        image_backend: Option<String>,
        /// auto | v1 | v1alpha2 | v1alpha1
        #[arg(long)]
        backend_version: Option<String>,
        /// Gone: the splice was removed. Accepted, so that a unit that passes it still starts,
        /// and warned of.
        #[arg(long, hide = true)]
        splice: bool,
    },
    /// Validate a config file without starting.
    CheckConfig { file: PathBuf },
    /// Show which CRI versions a runtime socket serves and which kubelets can use it; on
    /// cri-bridge's own socket, also the bridge and the runtime behind it. Exits 0 when all
    /// answer, 1 when the socket does not, 2 when cri-bridge answers but its runtime does not.
    Probe { socket: PathBuf },
    /// What each backend of a config holds: sandboxes and containers, with pod names, asked of
    /// each runtime directly (to know when the runtime a node moves off is empty). Exits 0 when
    /// every backend answered, 3 when one could not be asked (its line says why).
    Backends {
        /// The config file (`backends`; without it, the one `backend`).
        #[arg(long, default_value = "/etc/cri-bridge/config.yaml")]
        config: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Move this node's pods off a backend (docs/migrate.md step 4): those whose sandboxes it
    /// holds, one at a time through the API server's eviction API (PodDisruptionBudgets
    /// honoured), each after the one before has a Ready replacement; static pods restarted from
    /// their manifests. No cordon: replacements on this node run on the default backend. Ends
    /// when the backend holds no sandbox (exit 0); stops, leaving every pod running, on the
    /// first pod that does not come back Ready or when the API server or a backend does not
    /// answer (exit 1): run again to go on. (Not in the static binary: `cargo build` builds it.)
    #[cfg(feature = "move")]
    Move {
        /// The config file.
        #[arg(long, default_value = "/etc/cri-bridge/config.yaml")]
        config: PathBuf,
        #[command(flatten)]
        options: cri_bridge::move_pods::Options,
    },
    /// Who has called the running cri-bridge, in which CRI versions (the migration report).
    Callers {
        /// cri-bridge's socket.
        #[arg(default_value = "/run/cri-bridge/cri-bridge.sock")]
        socket: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve { config: config_file, listen, backend, image_backend, backend_version, splice } => {
            let loaded = match &config_file {
                Some(path) => Config::load(path),
                None => Ok(Config::default()),
            };
            let overrides = Overrides { listen, backend, image_backend, backend_version, splice };
            let config = match loaded.and_then(|c| c.apply(overrides.clone())) {
                Ok(config) => config,
                Err(e) => return fail(e),
            };
            let set_log_level = init_logging(&config);
            // SIGHUP reads the same file and applies the same flags over it.
            let load = move || {
                let loaded = match &config_file {
                    Some(path) => Config::load(path),
                    None => Ok(Config::default()),
                };
                loaded.and_then(|c| c.apply(overrides.clone()))
            };
            let reloader = Reloader { load: Box::new(load), set_log_level };
            // Before any thread starts: reading the passed socket unsets its variables.
            let activated = match cri_bridge::systemd::activated_listener() {
                Ok(listener) => listener,
                Err(e) => return fail(e),
            };
            let runtime = match proxy_runtime() {
                Ok(runtime) => runtime,
                Err(e) => return fail(e),
            };
            let shutdown = {
                // A tokio signal stream is made in its runtime's context.
                let _entered = runtime.enter();
                shutdown_signal()
            };
            let shutdown = match shutdown {
                Ok(shutdown) => shutdown,
                Err(e) => return fail(format!("cannot install the SIGTERM and SIGINT handlers: {e}")),
            };
            match runtime.block_on(cri_bridge::run::run_on(config, activated, Some(reloader), shutdown)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(config) => {
                let gone: String = config
                    .gone
                    .iter()
                    .map(|g| format!("{}: warning: `{}`: {}\n", file.display(), g.key, g.why))
                    .collect();
                report(&format!("{gone}{}: ok\n", file.display()))
            }
            Err(e) => fail(e),
        },
        Command::Probe { socket } => {
            let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
            match runtime.block_on(cri_bridge::probe::probe(&socket)) {
                Ok(found) => match report(&found.to_string()) {
                    ExitCode::SUCCESS => ExitCode::from(found.exit_code()),
                    failed => failed,
                },
                Err(e) => fail(e),
            }
        }
        Command::Backends { config, json } => {
            let config = match Config::load(&config) {
                Ok(config) => config,
                Err(e) => return fail(e),
            };
            let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
            let held = runtime.block_on(cri_bridge::holdings::holdings(&config));
            let reported = match json {
                true => report(&format!("{}\n", serde_json::to_string_pretty(&held).expect("JSON"))),
                false => report(&cri_bridge::holdings::table(&held)),
            };
            // A script waiting for "no sandbox" must not read a backend it could not ask as empty.
            match held.iter().all(|h| h.runtime.is_ok()) {
                true => reported,
                false => ExitCode::from(3),
            }
        }
        #[cfg(feature = "move")]
        Command::Move { config, options } => {
            let config = match Config::load(&config) {
                Ok(config) => config,
                Err(e) => return fail(e),
            };
            let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
            let mut out = std::io::stdout();
            match runtime.block_on(cri_bridge::move_pods::run(&config, &options, &mut out)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Command::Callers { socket, json } => {
            let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
            let asked = runtime.block_on(cri_bridge::probe::ask_bridge::<Vec<cri_bridge::callers::CallerReport>>(
                &socket,
                cri_bridge::control::CALLERS_PATH,
            ));
            match asked {
                Ok(Some(callers)) if json => {
                    report(&format!("{}\n", serde_json::to_string_pretty(&callers).expect("JSON")))
                }
                Ok(Some(callers)) => report(&cri_bridge::callers::table(&callers)),
                Ok(None) => fail(format!("{}: not cri-bridge (a runtime answers there)", socket.display())),
                Err(e) => fail(e),
            }
        }
    }
}

/// The proxy's tokio runtime (`cri_bridge::relay` explains the default);
/// `CRI_BRIDGE_WORKER_THREADS=N` overrides it, `0` for a single thread that also accepts.
fn proxy_runtime() -> Result<tokio::runtime::Runtime, String> {
    const KNOB: &str = "CRI_BRIDGE_WORKER_THREADS";
    let threads = match std::env::var(KNOB) {
        Ok(text) => {
            text.trim().parse::<usize>().map_err(|_| format!("{KNOB}={text:?}: expected a number of threads"))?
        }
        Err(_) => cri_bridge::relay::WORKER_THREADS,
    };
    let mut builder = match threads {
        0 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    // An experiment of issue 50, off unless asked for (`relay::socket`).
    cri_bridge::relay::socket::set_read_watched(std::env::var_os("CRI_BRIDGE_READ_WATCHED").is_some_and(|v| v == "1"));
    builder.enable_all().build().map_err(|e| format!("cannot start the tokio runtime: {e}"))
}

/// Writes a command's report to stdout. A reader that went away (`probe … | head`) is not an
/// error: the report was wanted only that far.
fn report(text: &str) -> ExitCode {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => fail(format!("cannot write the report: {e}")),
        _ => ExitCode::SUCCESS,
    }
}

fn fail(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("cri-bridge: {error}");
    ExitCode::FAILURE
}

/// The audit log's target (`cri_bridge::forward`'s audit lines), always at info.
const AUDIT_DIRECTIVE: &str = "audit=info";

/// Starts logging; returns how a reload sets a new `log.level`.
fn init_logging(config: &Config) -> SetLogLevel {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    // The audit lines pass whatever the level: the filter is the level and `audit=info`.
    let with_audit = |level: &str| EnvFilter::try_new(format!("{level},{AUDIT_DIRECTIVE}"));
    let filter = with_audit(&config.log_level).unwrap_or_else(|_| format!("info,{AUDIT_DIRECTIVE}").into());
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    // Colours only on a terminal: journald and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter);
    match config.log_format {
        LogFormat::Json => registry.with(layer.json()).init(),
        LogFormat::Text => registry.with(layer).init(),
    }
    Box::new(move |level: &str| {
        let filter = with_audit(level).map_err(|e| format!("{level:?}: {e}"))?;
        handle.reload(filter).map_err(|e| e.to_string())
    })
}

/// Completes on SIGINT or SIGTERM (systemd's stop). The handlers are installed when this is
/// called, before anything is served and READY=1 sent: a stop that comes the moment systemd
/// hears READY=1 then drains and removes the socket, instead of the signal's default action
/// killing the daemon. (A tokio signal handler is installed when its stream is made, not when
/// the stream is first polled.)
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
    })
}
