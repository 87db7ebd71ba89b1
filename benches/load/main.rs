//! cri-bridge under load, next to what it is measured against, in one interleaved run.
//!
//! Peers, each a unix socket the same load client talks to:
//! - `direct v1`: an in-memory runtime serving CRI v1;
//! - `passthrough v1->v1`: the cri-bridge binary in front of that runtime;
//! - `translating v1->v1alpha2`: the cri-bridge binary in front of an in-memory runtime that
//!   serves only v1alpha2, the client still speaking v1;
//! - `passthrough v1->v1, two backends`: cri-bridge with `backends` (issue 42): that v1 runtime as
//!   the default and a second in-memory runtime with no container beside it; its baseline is the
//!   one-backend `passthrough`, so its ratio is what routing keeps of one backend's calls;
//! - `direct v1alpha2`: that v1alpha2 runtime asked directly, the baseline of `translating`;
//! - `socat v1`: `socat UNIX-LISTEN:…,fork UNIX-CONNECT:…` in front of the v1 runtime, the
//!   floor any L4 relay costs (skipped, saying so, if socat is not installed);
//! - `nginx grpc_pass v1`: Debian's nginx in front of the v1 runtime, HTTP/2 in and `grpc_pass`
//!   out over kept-alive upstream connections, one process: the L7 proxy an operator would pick
//!   (skipped, saying so, if nginx is not installed).
//!
//! Both runtimes hold 1,000 containers in 1,000 pods, with labels and annotations as a kubelet
//! sets them. Workloads, each run against every peer: `Version` with 1 and with 64 calls in
//! flight, and `ListContainers` (no filter, the whole list) with 1 and with 8 in flight, always
//! on one HTTP/2 connection per peer. A round runs every workload against every peer, one
//! window each (after a short unmeasured warm-up); the table shows, for each figure, the median
//! over rounds. Ratios and added p50 compare each round's window with the same round's window
//! of the baseline (direct v1 for passthrough and socat, direct v1alpha2 for translating), then
//! take the median.
//!
//! Every process is separate, so that its CPU time is its own: the runtimes are this bench
//! binary re-executed (`CRI_BRIDGE_LOAD_ROLE=runtime`), cri-bridge and socat run under a guard
//! (the bench binary again) that kills them when the benchmark goes, however it goes. For each
//! window the table shows CPU time per call of the proxy (cri-bridge, or socat with the children
//! it forks per connection) and of the runtime, from utime + stime in /proc/<pid>/stat: what the
//! proxy costs, and whether it makes the runtime work harder. The proxies' resident memory
//! (VmRSS, and its peak VmHWM) is printed at the end.
//!
//! The load client makes gRPC calls with the h2 crate directly (no tonic, no tower), on a
//! current-thread tokio runtime in this process: the cheapest client, and the same for every
//! peer. The runtimes run on a multi-threaded tokio runtime; cri-bridge runs as it is shipped.
//!
//! Run: `cargo bench --bench load` (about 3½ minutes with the defaults). Knobs:
//! - `LOAD_SECONDS`: length of each measurement window, in seconds (default 2; fractions allowed);
//! - `LOAD_ROUNDS`: number of rounds (default 5);
//! - `LOAD_WORKLOADS`: `all` (default), `version` or `list`;
//! - `LOAD_BRIDGE_BIN`: the cri-bridge binary to measure instead of this build's (to compare
//!   with an older build);
//! - `LOAD_COMPARE_BIN`: another build's cri-bridge, run beside this one as the peers
//!   `compare passthrough` and `compare translating`, so that a change's cost is
//!   measured in one run;
//! - `LOAD_PEERS`: a comma-separated list of peer-name prefixes to measure (say, to profile one);
//! - `LOAD_CONTAINERDS`: real containerds, each started here on a config of its own and measured
//!   directly, through cri-bridge passing through (`--backend-version v1`) and, where it serves
//!   v1alpha2, translating (`--backend-version v1alpha2`), through socat and through nginx, with
//!   `Version` only (`load/containerd.rs`). Unset, `cargo bench` starts the ones `.ci/run` leaves:
//!   Debian's containerd 1.6.20 and containerd 2.4.2 from `target/peers`; `none` for none;
//! - `LOAD_CONTAINERD=/run/containerd/containerd.sock`: also measure a containerd already running
//!   (one that serves v1 and v1alpha2), the same way, without runtime CPU (it is not our child);
//! - cri-bridge inherits the environment (without `RUST_LOG`; it logs at info to a file in the
//!   temp dir), so e.g. `CRI_BRIDGE_WORKER_THREADS` reaches it.
//!
//! Run as a test (`cargo test --benches`, no `--bench` argument), it makes one short round as a
//! smoke test, unless `LOAD_SECONDS` or `LOAD_ROUNDS` say otherwise.

mod containerd;
#[path = "../support/load_client.rs"]
mod load_client;
#[path = "../support/load_proc.rs"]
mod load_proc;
mod measuring;
mod memory_runtime;
mod peers;
mod report;
mod workload;

use measuring::run_rounds;
use peers::start;
use report::print_report;
use std::path::PathBuf;
use std::time::Duration;

/// Containers (each in a pod of its own) in each in-memory runtime.
const CONTAINERS: usize = 1_000;

const SOCKET_ENV: &str = "CRI_BRIDGE_LOAD_SOCKET";
const VERSION_ENV: &str = "CRI_BRIDGE_LOAD_VERSION";
const CONTAINERS_ENV: &str = "CRI_BRIDGE_LOAD_CONTAINERS";

fn main() {
    match std::env::var(load_proc::ROLE).as_deref() {
        Ok("runtime") => memory_runtime::runtime_role(),
        Ok("guard") => load_proc::guard_role(),
        _ => benchmark(),
    }
}

/// How long each window is, and how many rounds (`LOAD_SECONDS`, `LOAD_ROUNDS`).
struct Settings {
    window: Duration,
    warm_up: Duration,
    rounds: usize,
    /// The window as the user gave it, for the header.
    seconds_text: String,
    /// `cargo bench` rather than the smoke run of `cargo test --benches`.
    benching: bool,
}

impl Settings {
    fn from_env() -> Settings {
        // Without `--bench`, cargo is running benches as tests: one short smoke round.
        let benching = std::env::args().any(|a| a == "--bench");
        let seconds_text =
            std::env::var("LOAD_SECONDS").unwrap_or_else(|_| (if benching { "2" } else { "0.2" }).into());
        let seconds: f64 = seconds_text.parse().expect("LOAD_SECONDS: a number of seconds");
        let rounds = match std::env::var("LOAD_ROUNDS") {
            Ok(text) => text.parse().expect("LOAD_ROUNDS: a whole number"),
            Err(_) if benching => 5,
            Err(_) => 1,
        };
        assert!(seconds > 0.0 && rounds > 0, "LOAD_SECONDS and LOAD_ROUNDS must be positive");
        let window = Duration::from_secs_f64(seconds);
        Settings { window, warm_up: (window / 20).min(Duration::from_millis(200)), rounds, seconds_text, benching }
    }
}

fn benchmark() {
    let settings = Settings::from_env();
    let containerd = std::env::var_os("LOAD_CONTAINERD").map(PathBuf::from);
    let ticks_per_second = load_proc::clock_ticks_per_second();
    let setup = start(containerd, containerd::selected(settings.benching));
    let client = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let (results, connections) = client.block_on(run_rounds(&setup.peers, &settings, ticks_per_second));
    // Report while the connections, and so socat's per-connection children, are still there.
    print_report(&setup, &results, &settings);
    drop(connections);
    drop(client);
    drop(setup);
}
