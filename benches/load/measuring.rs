//! Measuring: a warm-up and one window of a workload against a peer, with the CPU time it cost
//! the proxy and the runtime; each peer's answers checked first; the rounds.

use crate::load_client::{self, Connection, Window};
use crate::peers::Peer;
use crate::workload::Workload;
use crate::{load_proc, Settings};
use cri_bridge::api::v1;
use cri_bridge::CriVersion;

/// One window's figures.
pub struct Sample {
    pub calls_per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub proxy_cpu_us: Option<f64>,
    pub runtime_cpu_us: Option<f64>,
    pub calls: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// CPU time of a process tree, to be turned into µs per call over a window.
struct CpuMeter {
    pid: Option<u32>,
    start: Option<u64>,
}

impl CpuMeter {
    fn start(pid: Option<u32>) -> CpuMeter {
        CpuMeter { pid, start: pid.and_then(load_proc::tree_cpu_ticks) }
    }

    fn per_call_us(&self, calls: u64, ticks_per_second: f64) -> Option<f64> {
        let end = load_proc::tree_cpu_ticks(self.pid?)?;
        let ticks = end.checked_sub(self.start?)?;
        (calls > 0).then(|| ticks as f64 / ticks_per_second * 1e6 / calls as f64)
    }
}

fn percentile(sorted: &[u32], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1])
}

fn sample(mut window: Window, proxy_cpu_us: Option<f64>, runtime_cpu_us: Option<f64>) -> Sample {
    window.latencies_us.sort_unstable();
    let total_us: u64 = window.latencies_us.iter().map(|&l| u64::from(l)).sum();
    Sample {
        calls_per_second: window.calls as f64 / window.elapsed.as_secs_f64(),
        p50_us: percentile(&window.latencies_us, 0.50),
        p99_us: percentile(&window.latencies_us, 0.99),
        mean_us: total_us as f64 / window.calls.max(1) as f64,
        proxy_cpu_us,
        runtime_cpu_us,
        calls: window.calls,
        errors: window.errors,
        first_error: window.first_error,
    }
}

/// A warm-up, then one measured window of `workload` against `peer`.
async fn measure(
    peer: &Peer,
    connection: &Connection,
    workload: Workload,
    settings: &Settings,
    ticks_per_second: f64,
) -> Sample {
    let call = workload.call(peer.package);
    load_client::load(connection, &call, workload.in_flight(), settings.warm_up).await;
    let (proxy, runtime) = (CpuMeter::start(peer.proxy), CpuMeter::start(peer.runtime));
    let window = load_client::load(connection, &call, workload.in_flight(), settings.window).await;
    let calls = window.calls;
    sample(window, proxy.per_call_us(calls, ticks_per_second), runtime.per_call_us(calls, ticks_per_second))
}

/// One call of each kind the peer is measured with, decoded: a peer that answers wrongly is a
/// setup error, not a figure.
async fn check(peer: &Peer, connection: &Connection) {
    use prost::Message;
    let body = connection
        .call(&Workload::Version1.call(peer.package), true)
        .await
        .unwrap_or_else(|e| panic!("{}: Version failed: {e}", peer.name));
    let version = v1::VersionResponse::decode(body.as_slice()).expect("a VersionResponse");
    let mut seen =
        format!("{} {} (CRI {})", version.runtime_name, version.runtime_version, version.runtime_api_version);
    if peer.workloads.contains(&Workload::List1) {
        let body = connection
            .call(&Workload::List1.call(peer.package), true)
            .await
            .unwrap_or_else(|e| panic!("{}: ListContainers failed: {e}", peer.name));
        let list = v1::ListContainersResponse::decode(body.as_slice()).expect("a ListContainersResponse");
        assert_eq!(list.containers.len(), peer.containers, "{}: containers listed", peer.name);
        seen += &format!(", {} containers in {} KiB", list.containers.len(), body.len() / 1024);
        if peer.package == "runtime.v1alpha2" {
            let cost = conversion_cost(&body);
            seen += &format!("; converting it to v1 in this process: {cost:.0} µs");
            let _ = CONVERSION_US.set(cost);
        }
    }
    eprintln!("{:<36} {seen}", peer.name);
}

/// What converting the v1alpha2 runtime's whole ListContainers answer to v1 costs on its own,
/// measured in this process: what the translating peer's CPU per call is compared with.
pub static CONVERSION_US: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// The median of 20 conversions of `body` (a v1alpha2 ListContainersResponse) to v1, in µs,
/// with the proxy's route (losses counted, not recorded, as for every answer).
fn conversion_cost(body: &[u8]) -> f64 {
    let route = cri_bridge::convert::Route::new("ListContainersResponse", CriVersion::V1alpha2, CriVersion::V1)
        .expect("both versions have ListContainersResponse");
    let mut times: Vec<f64> = (0..20)
        .map(|_| {
            let started = std::time::Instant::now();
            let mut cx = cri_bridge::convert::Cx::counting();
            std::hint::black_box(route.run(body, &mut cx).expect("converts"));
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// `results[workload][peer]`: one sample per round.
pub type Results = Vec<Vec<Vec<Sample>>>;

/// Every round; returns the results and the connections, still open.
pub async fn run_rounds(peers: &[Peer], settings: &Settings, ticks_per_second: f64) -> (Results, Vec<Connection>) {
    let mut connections = Vec::new();
    for peer in peers {
        let connection = Connection::open(&peer.socket).await.unwrap_or_else(|e| panic!("{}: {e}", peer.name));
        check(peer, &connection).await;
        connections.push(connection);
    }
    let mut results: Results = Workload::ALL.iter().map(|_| peers.iter().map(|_| Vec::new()).collect()).collect();
    // `LOAD_PEERS=passthrough,socat`: only the peers whose names start so (for profiling one).
    let only: Option<Vec<String>> =
        std::env::var("LOAD_PEERS").ok().map(|list| list.split(',').map(str::to_string).collect());
    for round in 1..=settings.rounds {
        for (w, &workload) in Workload::ALL.iter().enumerate() {
            let chosen =
                |peer: &Peer| only.as_ref().is_none_or(|only| only.iter().any(|o| peer.name.starts_with(o.as_str())));
            for (p, peer) in
                peers.iter().enumerate().filter(|(_, peer)| peer.workloads.contains(&workload) && chosen(peer))
            {
                let sample = measure(peer, &connections[p], workload, settings, ticks_per_second).await;
                eprintln!("{}", progress_line(round, settings.rounds, workload, peer, &sample));
                results[w][p].push(sample);
            }
        }
    }
    (results, connections)
}

fn progress_line(round: usize, rounds: usize, workload: Workload, peer: &Peer, sample: &Sample) -> String {
    let errors = match &sample.first_error {
        Some(error) => format!("  {} ERRORS, first: {error}", sample.errors),
        None => String::new(),
    };
    format!(
        "round {round}/{rounds}  {:<28} {:<36} {:>9.0} calls/s  p50 {:>7.1} µs  p99 {:>7.1} µs{errors}",
        workload.name(),
        peer.name,
        sample.calls_per_second,
        sample.p50_us,
        sample.p99_us
    )
}
